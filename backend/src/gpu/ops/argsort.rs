//! ARGSORT of `kernels-hip/src/rowsort.hip`: f32 rows into i32 indices, ascending or
//! descending, in exactly the CPU's order (ties by index, NaN last, -0 == +0). One block sorts a
//! row in shared memory, so rows longer than [`MAX_COLS`] go to the CPU. Also a MoE router's
//! SOFT_MAX, descending ARGSORT, its first k columns and the GET_ROWS of their probabilities,
//! fused into one kernel (`tandem_topk_moe_f32`).

use super::rows::{aligned_strides, non_empty, row_launch};
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, read_apart, LaunchCtx, Node, Registration};
use crate::gpu::safe::KernelArgs;
use tandem_graph::op::SortOrder;
use tandem_graph::{params, ElemType, Op};

pub const FAMILY: &str = "rowsort";

pub const REGISTRATIONS: &[Registration] = &[
    Registration {
        name: "hip.argsort_f32",
        op: Op::Argsort,
        fuses: None,
        accepts,
        launch,
    },
    Registration {
        name: "hip.topk_moe_f32",
        op: Op::SoftMax,
        fuses: Some(Op::GetRows),
        accepts: accepts_topk_moe,
        launch: launch_topk_moe,
    },
];

/// `tandem_topk_moe_shape` of rowsort.hip.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopkMoeShape {
    pub e: i64,
    pub t: i64,
    pub k: i64,
    pub nbx1: i64,
    pub nbi1: i64,
    pub nbw1: i64,
    pub nbw2: i64,
}
const _: () = assert!(std::mem::size_of::<TopkMoeShape>() == 56);

/// Most experts a router of `tandem_topk_moe_f32` takes: 8 logits a thread, 256 threads.
pub const TOPK_MAX_EXPERTS: i64 = 2048;

/// The fused router's shape for SOFT_MAX `node` (of the logits, `[e, t]`) and the GET_ROWS
/// `next` that picks the probabilities of the first k columns of their descending ARGSORT (`[1,
/// k, t]`, from a `[1, e, t]` reshape of the probabilities, by a `[k, t]` view of the ARGSORT).
/// The plan's chain (`exec::topk_moe_chain`) checks how the nodes connect; this checks the
/// params, types and layouts the kernel reads and writes.
fn topk_moe_shape(node: &Node<'_>, next: &Node<'_>) -> Option<TopkMoeShape> {
    let (x, p) = (node.src(0)?, node.dst);
    if p.op != Op::SoftMax || node.src(1).is_some() || node.src(2).is_some() {
        return None;
    }
    let sm = params::SoftMaxParams::read(p);
    if sm.scale != 1.0 || sm.max_bias != 0.0 {
        return None;
    }
    let [e, t, one2, one3] = x.ne;
    if x.ty != ElemType::F32 || p.ty != ElemType::F32 || p.ne != x.ne || one2 != 1 || one3 != 1 {
        return None;
    }
    let (probs, ids, w) = (next.src(0)?, next.src(1)?, next.dst);
    let k = ids.ne[0];
    if next.dst.op != Op::GetRows || probs.ne != [1, e, t, 1] || ids.ty != ElemType::I32 || ids.ne != [k, t, 1, 1] {
        return None;
    }
    if w.ty != ElemType::F32 || w.ne != [1, k, t, 1] || k < 1 || k > e || e > TOPK_MAX_EXPERTS {
        return None;
    }
    let (nbx, nbi, nbw) = (aligned_strides(x, 4)?, aligned_strides(ids, 4)?, aligned_strides(w, 4)?);
    if nbx[0] != 4 || nbi[0] != 4 {
        return None;
    }
    Some(TopkMoeShape {
        e,
        t,
        k,
        nbx1: nbx[1],
        nbi1: nbi[1],
        nbw1: nbw[1],
        nbw2: nbw[2],
    })
}

fn accepts_topk_moe(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    next.is_some_and(|n| topk_moe_shape(node, n).is_some())
}

/// Threads of a router block: a multiple of 64 (whole waves on every device) holding at most 8
/// logits each.
pub fn topk_threads(e: i64) -> u32 {
    (((e + 8 * 64 - 1) / (8 * 64)) * 64).clamp(64, 256) as u32
}

/// # Safety
/// As [`crate::gpu::registry::Launch`]; `next` is the chain's GET_ROWS.
unsafe fn launch_topk_moe(ctx: &LaunchCtx<'_>, node: &Node<'_>, next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let next = next.ok_or_else(|| launch_error("launch_topk_moe", "no GET_ROWS"))?;
    let shape = topk_moe_shape(node, next).ok_or_else(|| launch_error("launch_topk_moe", "node not accepted"))?;
    let (x, ids) = match (node.src(0), next.src(1)) {
        (Some(x), Some(ids)) => (x, ids),
        _ => return Err(launch_error("launch_topk_moe", "missing source")),
    };
    let f = ctx.kernels.function(FAMILY, "tandem_topk_moe_f32")?;
    // SAFETY: the registry contract gives device addresses covering each tensor.
    let at = unsafe { read_apart(ctx, [x], &[ids, next.dst]) }?;
    let mut args = KernelArgs::new();
    args.push(at[0]).push(dptr(ids)).push(dptr(next.dst)).push(shape);
    let cfg = row_launch([1, shape.t, 1, 1], topk_threads(shape.e), 0);
    // SAFETY: the parameters are (const char*, char*, char*, tandem_topk_moe_shape); each token's
    // e logits are read, k ids written at the ids view's strides and k weights at dst's.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// Longest row sorted on the GPU: 4096 u64 keys are 32 KiB of shared memory, inside the 48 KiB
/// every device grants without opt-in.
pub const MAX_COLS: i64 = 4096;

/// `tandem_sort_shape` of rowsort.hip.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SortShape {
    pub ne: [i64; 4],
    pub nbs: [i64; 4],
    pub nbd: [i64; 4],
}
const _: () = assert!(std::mem::size_of::<SortShape>() == 96);

/// Shape and whether the order is descending, or `None` when the kernel does not run the node.
pub fn sort_shape(node: &Node<'_>) -> Option<(SortShape, bool)> {
    let dst = node.dst;
    let a = node.src(0)?;
    if a.ty != ElemType::F32 || dst.ty != ElemType::I32 || a.ne != dst.ne || !non_empty(a.ne) {
        return None;
    }
    if a.ne[0] > MAX_COLS || dst.view_src.is_some() {
        return None;
    }
    let desc = match params::sort_order(dst)? {
        SortOrder::Asc => false,
        SortOrder::Desc => true,
    };
    let shape = SortShape {
        ne: a.ne,
        nbs: aligned_strides(a, 4)?,
        nbd: aligned_strides(dst, 4)?,
    };
    Some((shape, desc))
}

fn accepts(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    sort_shape(node).is_some()
}

/// Keys per row after padding (a power of two) and the threads sorting them.
pub fn sort_geometry(ne0: i64) -> (u32, u32) {
    let padded = (ne0.max(1) as u32).next_power_of_two();
    (padded, (padded / 2).clamp(64, 1024))
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let (shape, desc) = sort_shape(node).ok_or_else(|| launch_error("launch_argsort", "node not accepted"))?;
    let src = node.src(0).ok_or_else(|| launch_error("launch_argsort", "no source"))?;
    let (padded, threads) = sort_geometry(shape.ne[0]);
    let f = ctx.kernels.function(FAMILY, "tandem_argsort_f32")?;
    let mut args = KernelArgs::new();
    args.push(dptr(src))
        .push(dptr(node.dst))
        .push(shape)
        .push(desc as i32)
        .push(padded as i32);
    let cfg = row_launch(shape.ne, threads, padded * 8);
    // SAFETY: the parameters are (const char*, char*, tandem_sort_shape, i32, i32); the shared
    // memory holds `padded` u64 keys; strides were checked against both tensors.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::GraphBuilder;

    #[test]
    fn accepts_rows_that_fit_shared_memory() {
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[4096, 2]);
        let asc = b.argsort(a, SortOrder::Asc);
        let t = b.transpose(a);
        let desc = b.argsort(t, SortOrder::Desc);
        let long = b.new_tensor(ElemType::F32, &[4097]);
        let too_long = b.argsort(long, SortOrder::Asc);
        let g = b.build();
        let (s, d) = sort_shape(&Node::of(&g, asc)).unwrap();
        assert!(!d);
        assert_eq!(s.nbd, [4, 16384, 32768, 32768]);
        let (s, d) = sort_shape(&Node::of(&g, desc)).unwrap();
        assert!(d);
        assert_eq!(s.ne, [2, 4096, 1, 1]);
        assert_eq!(s.nbs[0], 16384);
        assert!(!accepts(&Node::of(&g, too_long), None));

        let mut g2 = g.clone();
        g2.tensor_mut(asc).set_param_i32(0, 2);
        assert!(!accepts(&Node::of(&g2, asc), None));
        let mut g3 = g;
        g3.tensor_mut(asc).ty = ElemType::I64;
        assert!(!accepts(&Node::of(&g3, asc), None));
    }

    #[test]
    fn geometry_pads_to_a_power_of_two_within_limits() {
        assert_eq!(sort_geometry(1), (1, 64));
        assert_eq!(sort_geometry(100), (128, 64));
        assert_eq!(sort_geometry(1024), (1024, 512));
        assert_eq!(sort_geometry(4096), (4096, 1024));
        let (padded, threads) = sort_geometry(MAX_COLS);
        assert!(padded as usize * 8 <= 48 * 1024 && threads <= 1024 && threads % 64 == 0);
    }
}
