//! SOFT_MAX of `kernels-hip/src/softmax.hip`: f32 rows of any length and element-aligned
//! strides, scale, optional f32/f16 mask repeated over heads and sequences as ggml allows,
//! ALiBi slopes (`max_bias > 0`) and optional per-head sinks.

use super::rows::{aligned_strides, non_empty, row_block, row_launch, writes_in_place_safely};
use crate::gpu::api::DevicePtr;
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, LaunchCtx, Node, Registration};
use crate::gpu::safe::KernelArgs;
use tandem_graph::params::SoftMaxParams;
use tandem_graph::{ElemType, Op, Tensor};

pub const FAMILY: &str = "softmax";

pub const REGISTRATIONS: &[Registration] = &[Registration {
    name: "hip.soft_max_f32",
    op: Op::SoftMax,
    fuses: None,
    accepts,
    launch,
}];

/// Rows up to this many elements keep their logits in shared memory (32 KiB, inside the 48 KiB
/// every device grants without opt-in); longer rows are read again in each pass.
pub const CACHED_ROW_MAX: i64 = 8192;

/// `tandem_soft_max_shape` of softmax.hip.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SoftMaxShape {
    pub ne: [i64; 4],
    pub nbx: [i64; 4],
    pub nbd: [i64; 4],
    pub nem: [i64; 4],
    pub nbm: [i64; 4],
    pub nbsink: i64,
    pub scale: f32,
    pub max_bias: f32,
    pub m0: f32,
    pub m1: f32,
    pub n_head_log2: i32,
    /// 0 no mask, 1 f32, 2 f16.
    pub mask_type: i32,
    pub has_sinks: i32,
    pub cached: i32,
}
const _: () = assert!(std::mem::size_of::<SoftMaxShape>() == 200);

/// ALiBi bases as the CPU computes them: `(n_head_log2, m0, m1)` for `n_head` heads.
pub fn alibi_bases(max_bias: f32, n_head: u32) -> (i32, f32, f32) {
    if max_bias <= 0.0 || n_head == 0 {
        return (0, 1.0, 1.0);
    }
    let n_log2 = 1u32 << (n_head as f32).log2().floor() as u32;
    let m0 = 2f32.powf(-max_bias / n_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_log2 as f32);
    (n_log2 as i32, m0, m1)
}

/// The kernel's shape for `node`, or `None` when the kernel does not run it exactly.
pub fn soft_max_shape(node: &Node<'_>) -> Option<SoftMaxShape> {
    let dst = node.dst;
    let a = node.src(0)?;
    if a.ty != ElemType::F32 || dst.ty != ElemType::F32 || a.ne != dst.ne || !non_empty(a.ne) {
        return None;
    }
    if a.ne[2] > i32::MAX as i64 || !writes_in_place_safely(dst, a) {
        return None;
    }
    let p = SoftMaxParams::read(dst);
    if !p.scale.is_finite() || !p.max_bias.is_finite() {
        return None;
    }
    let mut shape = SoftMaxShape {
        ne: a.ne,
        nbx: aligned_strides(a, 4)?,
        nbd: aligned_strides(dst, 4)?,
        nem: [1; 4],
        scale: p.scale,
        max_bias: p.max_bias,
        m0: 1.0,
        m1: 1.0,
        ..Default::default()
    };
    match node.src(1) {
        Some(m) => {
            let (kind, size) = match m.ty {
                ElemType::F32 => (1, 4),
                ElemType::F16 => (2, 2),
                _ => return None,
            };
            let fits = m.ne[0] == a.ne[0]
                && m.ne[1] >= a.ne[1]
                && m.ne[2] >= 1
                && m.ne[3] >= 1
                && a.ne[2] % m.ne[2] == 0
                && a.ne[3] % m.ne[3] == 0;
            if !fits {
                return None;
            }
            shape.mask_type = kind;
            shape.nem = m.ne;
            shape.nbm = aligned_strides(m, size)?;
            let (n_log2, m0, m1) = alibi_bases(p.max_bias, a.ne[2] as u32);
            (shape.n_head_log2, shape.m0, shape.m1) = (n_log2, m0, m1);
        }
        // ALiBi needs a mask (the CPU rejects the node).
        None if p.max_bias > 0.0 => return None,
        None => {}
    }
    if let Some(s) = node.src(2) {
        if s.ty != ElemType::F32 || s.ne[0] < a.ne[2] {
            return None;
        }
        shape.has_sinks = 1;
        shape.nbsink = aligned_strides(s, 4)?[0];
    }
    shape.cached = (a.ne[0] <= CACHED_ROW_MAX) as i32;
    Some(shape)
}

fn accepts(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    soft_max_shape(node).is_some()
}

/// Dynamic shared memory of a launch: the row's logits when cached.
pub fn shared_bytes(shape: &SoftMaxShape) -> u32 {
    if shape.cached != 0 {
        (shape.ne[0] * 4) as u32
    } else {
        0
    }
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let shape = soft_max_shape(node).ok_or_else(|| launch_error("launch_soft_max", "node not accepted"))?;
    let src = node
        .src(0)
        .ok_or_else(|| launch_error("launch_soft_max", "no source"))?;
    let opt = |t: Option<&Tensor>| t.map(dptr).unwrap_or(DevicePtr(0));
    let f = ctx.kernels.function(FAMILY, "tandem_soft_max_f32")?;
    let mut args = KernelArgs::new();
    args.push(dptr(src))
        .push(opt(node.src(1)))
        .push(opt(node.src(2)))
        .push(dptr(node.dst))
        .push(shape);
    let cfg = row_launch(shape.ne, row_block(shape.ne[0]), shared_bytes(&shape));
    // SAFETY: the parameters are (const char*, const char*, const char*, char*,
    // tandem_soft_max_shape); absent mask/sinks are null and flagged off in the shape; the
    // predicate checked every stride and repeat extent against the tensors.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::GraphBuilder;

    #[test]
    fn masks_sinks_and_alibi_fill_the_shape() {
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[67, 5, 12, 2]);
        let m = b.new_tensor(ElemType::F16, &[67, 8, 1, 1]);
        let s = b.new_tensor(ElemType::F32, &[12]);
        let d = b.soft_max(a, Some(m), Some(s), 0.125, 8.0).unwrap();
        let plain = b.soft_max(a, None, None, 1.0, 0.0).unwrap();
        let g = b.build();
        let sh = soft_max_shape(&Node::of(&g, d)).unwrap();
        assert_eq!((sh.mask_type, sh.has_sinks, sh.cached), (2, 1, 1));
        assert_eq!(sh.nem, [67, 8, 1, 1]);
        assert_eq!(sh.nbm, [2, 134, 1072, 1072]);
        assert_eq!(sh.nbsink, 4);
        assert_eq!((sh.scale, sh.max_bias), (0.125, 8.0));
        // 12 heads: the first 8 use 2^(-8/8 * (h+1)), the other 4 odd powers of 2^(-0.5).
        assert_eq!(sh.n_head_log2, 8);
        assert_eq!((sh.m0, sh.m1), (0.5, 2f32.powf(-0.5)));
        assert_eq!(shared_bytes(&sh), 67 * 4);
        let p = soft_max_shape(&Node::of(&g, plain)).unwrap();
        assert_eq!((p.mask_type, p.has_sinks, p.n_head_log2), (0, 0, 0));
    }

    #[test]
    fn long_rows_run_uncached_and_bad_nodes_are_declined() {
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[40_000, 2]);
        let long = b.soft_max(a, None, None, 1.0, 0.0).unwrap();
        let x = b.new_tensor(ElemType::F32, &[16, 4, 6]);
        let bm = b.new_tensor(ElemType::F16, &[16, 4]);
        let bf = b.soft_max(x, Some(bm), None, 1.0, 0.0).unwrap();
        let m = b.new_tensor(ElemType::F32, &[16, 4, 3]);
        let ok = b.soft_max(x, Some(m), None, 1.0, 0.0).unwrap();
        let mut g0 = b.build();
        g0.tensor_mut(bm).ty = ElemType::BF16;
        let sh = soft_max_shape(&Node::of(&g0, long)).unwrap();
        assert_eq!((sh.cached, shared_bytes(&sh)), (0, 0));
        assert_eq!(row_launch(sh.ne, row_block(sh.ne[0]), 0).block, [1024, 1, 1]);
        assert!(!accepts(&Node::of(&g0, bf), None));
        assert!(accepts(&Node::of(&g0, ok), None));

        let mut g = g0.clone();
        g.tensor_mut(m).ne[2] = 4; // no longer divides the 6 heads
        assert!(!accepts(&Node::of(&g, ok), None));
        let mut g = g0.clone();
        g.tensor_mut(m).ne[1] = 3; // fewer mask rows than src rows
        assert!(!accepts(&Node::of(&g, ok), None));
        let mut g = g0.clone();
        g.tensor_mut(ok).src[1] = None;
        g.tensor_mut(ok).set_param_f32(1, 2.0); // ALiBi without a mask
        assert!(!accepts(&Node::of(&g, ok), None));
        let mut g = g0.clone();
        g.tensor_mut(ok).set_param_f32(0, f32::INFINITY);
        assert!(!accepts(&Node::of(&g, ok), None));
        let mut g = g0;
        g.tensor_mut(m).nb[1] = 66; // rows not 4-byte aligned
        assert!(!accepts(&Node::of(&g, ok), None));
    }

    #[test]
    fn alibi_bases_match_the_cpu_rule() {
        assert_eq!(alibi_bases(0.0, 32), (0, 1.0, 1.0));
        let (n, m0, m1) = alibi_bases(8.0, 32);
        assert_eq!(n, 32);
        assert_eq!(m0, 2f32.powf(-0.25));
        assert_eq!(m1, 2f32.powf(-0.125));
        assert_eq!(alibi_bases(8.0, 6).0, 4);
    }
}
