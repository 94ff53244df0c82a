//! CPY, CONT and DUP on the GPU (`kernels-hip/src/copy.hip`): element k of src0 in flat order
//! becomes element k of dst, for any shapes and byte strides with equal element counts.
//! Same-type copies of f32/f16/bf16/i32 move bits; f32/f16/bf16 convert through f32 with the
//! CPU's rounding; f32 into q8_0/q4_0/q4_1/q5_0/q5_1 quantizes each dst block with the CPU
//! quantizer's exact float steps (bytes equal). Everything else (quantized sources, iq4_nl
//! targets, other integer types) stays on the CPU.

use super::convert::{element_count, elements_disjoint, launch_config, strides, strides_aligned};
use crate::gpu::api::LaunchConfig;
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, Accepts, LaunchCtx, Node, Registration};
use crate::gpu::safe::KernelArgs;
use tandem_graph::{ElemType, Op, Tensor};

pub const COPY_FAMILY: &str = "copy";
/// Threads per block of the quantizing kernels (one thread per 32-value block).
const QUANT_BLOCK: u32 = 128;
/// Grid cap for the quantizing kernels; their loop is grid-stride, so capping only lengthens it.
const QUANT_MAX_GRID: i64 = 65_535;

/// `tandem_copy_shape`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyShape {
    /// dst extents.
    pub ne: [i64; 4],
    /// dst byte strides.
    pub nbd: [i64; 4],
    /// src extents (same element count).
    pub nes: [i64; 4],
    /// src byte strides.
    pub nbs: [i64; 4],
}
const _: () = assert!(std::mem::size_of::<CopyShape>() == 128);

/// The kernel entry copying `src` elements into `dst` elements.
pub fn copy_entry(src: ElemType, dst: ElemType) -> Option<&'static str> {
    use ElemType::*;
    Some(match (src, dst) {
        (F32, F32) | (I32, I32) => "tandem_cpy_b32",
        (F16, F16) | (BF16, BF16) => "tandem_cpy_b16",
        (F32, F16) => "tandem_cpy_f32_f16",
        (F32, BF16) => "tandem_cpy_f32_bf16",
        (F16, F32) => "tandem_cpy_f16_f32",
        (BF16, F32) => "tandem_cpy_bf16_f32",
        (F16, BF16) => "tandem_cpy_f16_bf16",
        (BF16, F16) => "tandem_cpy_bf16_f16",
        (F32, Q8_0) => "tandem_cpy_f32_q8_0",
        (F32, Q4_0) => "tandem_cpy_f32_q4_0",
        (F32, Q4_1) => "tandem_cpy_f32_q4_1",
        (F32, Q5_0) => "tandem_cpy_f32_q5_0",
        (F32, Q5_1) => "tandem_cpy_f32_q5_1",
        _ => return None,
    })
}

/// Whether the copy kernel for `src_ty` → `dst_ty` runs `node` (CPY, CONT or DUP) exactly.
pub fn copy_ok(node: &Node<'_>, src_ty: ElemType, dst_ty: ElemType) -> bool {
    let dst = node.dst;
    let Some(a) = node.src(0) else {
        return false;
    };
    if a.ty != src_ty || dst.ty != dst_ty || copy_entry(src_ty, dst_ty).is_none() {
        return false;
    }
    if matches!(dst.op, Op::Cont | Op::Dup) && src_ty != dst_ty {
        return false;
    }
    match (element_count(a.ne), element_count(dst.ne)) {
        (Some(n), Some(m)) if n == m => {}
        _ => return false,
    }
    if strides(a).is_none() || strides(dst).is_none() {
        return false;
    }
    let src_size = src_ty.type_size();
    if src_ty.is_quantized() || !strides_aligned(a, src_size, true) {
        return false;
    }
    if dst_ty.is_quantized() {
        let (bs, bytes) = (dst_ty.block_size() as i64, dst_ty.type_size());
        return dst.ne[0] % bs == 0
            && dst.nb[0] == bytes
            && strides_aligned(dst, 2, false)
            && elements_disjoint(dst, dst.ne[0] / bs, bytes);
    }
    let dst_size = dst_ty.type_size();
    strides_aligned(dst, dst_size, true) && elements_disjoint(dst, dst.ne[0], dst_size)
}

/// The kernel's shape argument.
pub fn copy_shape(a: &Tensor, dst: &Tensor) -> Option<CopyShape> {
    Some(CopyShape {
        ne: dst.ne,
        nbd: strides(dst)?,
        nes: a.ne,
        nbs: strides(a)?,
    })
}

/// Grid of the quantizing kernels: one thread per dst block of `block_size` values.
pub fn quantize_launch_config(ne: [i64; 4], block_size: i64) -> LaunchConfig {
    let blocks = ne[0].max(0) / block_size * ne[1].max(1) * ne[2].max(1) * ne[3].max(1);
    let gx = ((blocks + QUANT_BLOCK as i64 - 1) / QUANT_BLOCK as i64).clamp(1, QUANT_MAX_GRID);
    LaunchConfig {
        grid: [gx as u32, 1, 1],
        block: [QUANT_BLOCK, 1, 1],
        shared_bytes: 0,
    }
}

fn accepts_copy<const S: u32, const D: u32>(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    let (Some(s), Some(d)) = (ElemType::from_ggml(S), ElemType::from_ggml(D)) else {
        return false;
    };
    next.is_none() && copy_ok(node, s, d)
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch_copy(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let Some(a) = node.src(0) else {
        return Err(launch_error("launch_copy", "copy without a source"));
    };
    // SAFETY: forwarded contract.
    unsafe { copy_tensor(ctx, a, node.dst) }
}

/// Queues the copy of `a`'s elements into `dst`'s, in flat order ([`copy_ok`] holds for them).
///
/// # Safety
/// Both tensors' addresses are memory the device reaches (its own, or mapped pinned host
/// memory), of their extents and strides, valid until the copy has run.
pub unsafe fn copy_tensor(ctx: &LaunchCtx<'_>, a: &Tensor, dst: &Tensor) -> Result<(), KernelError> {
    const CALL: &str = "launch_copy";
    let entry =
        copy_entry(a.ty, dst.ty).ok_or_else(|| launch_error(CALL, format!("no kernel for {} -> {}", a.ty, dst.ty)))?;
    let shape = copy_shape(a, dst).ok_or_else(|| launch_error(CALL, "strides out of range"))?;
    if element_count(shape.ne).unwrap_or(0) == 0 {
        return Ok(());
    }
    let cfg = if dst.ty.is_quantized() {
        quantize_launch_config(shape.ne, dst.ty.block_size() as i64)
    } else {
        launch_config(shape.ne)
    };
    let f = ctx.kernels.function(COPY_FAMILY, entry)?;
    let mut args = KernelArgs::new();
    args.push(dptr(a)).push(dptr(dst)).push(shape);
    // SAFETY: the parameter list is (const char*, char*, tandem_copy_shape); the predicate
    // checked element counts, strides and block geometry against both tensors, whose device
    // memory the caller vouches for.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

const fn reg(name: &'static str, op: Op, accepts: Accepts) -> Registration {
    Registration {
        name,
        op,
        fuses: None,
        accepts,
        launch: launch_copy,
    }
}

const F32: u32 = ElemType::F32 as u32;
const F16: u32 = ElemType::F16 as u32;
const BF16: u32 = ElemType::BF16 as u32;
const I32: u32 = ElemType::I32 as u32;

pub const REGISTRATIONS: &[Registration] = &[
    reg("hip.cpy_f32_f32", Op::Cpy, accepts_copy::<F32, F32>),
    reg("hip.cpy_f32_f16", Op::Cpy, accepts_copy::<F32, F16>),
    reg("hip.cpy_f32_bf16", Op::Cpy, accepts_copy::<F32, BF16>),
    reg("hip.cpy_f16_f32", Op::Cpy, accepts_copy::<F16, F32>),
    reg("hip.cpy_f16_f16", Op::Cpy, accepts_copy::<F16, F16>),
    reg("hip.cpy_f16_bf16", Op::Cpy, accepts_copy::<F16, BF16>),
    reg("hip.cpy_bf16_f32", Op::Cpy, accepts_copy::<BF16, F32>),
    reg("hip.cpy_bf16_f16", Op::Cpy, accepts_copy::<BF16, F16>),
    reg("hip.cpy_bf16_bf16", Op::Cpy, accepts_copy::<BF16, BF16>),
    reg("hip.cpy_i32_i32", Op::Cpy, accepts_copy::<I32, I32>),
    reg(
        "hip.cpy_f32_q8_0",
        Op::Cpy,
        accepts_copy::<F32, { ElemType::Q8_0 as u32 }>,
    ),
    reg(
        "hip.cpy_f32_q4_0",
        Op::Cpy,
        accepts_copy::<F32, { ElemType::Q4_0 as u32 }>,
    ),
    reg(
        "hip.cpy_f32_q4_1",
        Op::Cpy,
        accepts_copy::<F32, { ElemType::Q4_1 as u32 }>,
    ),
    reg(
        "hip.cpy_f32_q5_0",
        Op::Cpy,
        accepts_copy::<F32, { ElemType::Q5_0 as u32 }>,
    ),
    reg(
        "hip.cpy_f32_q5_1",
        Op::Cpy,
        accepts_copy::<F32, { ElemType::Q5_1 as u32 }>,
    ),
    reg("hip.cont_f32", Op::Cont, accepts_copy::<F32, F32>),
    reg("hip.cont_f16", Op::Cont, accepts_copy::<F16, F16>),
    reg("hip.cont_bf16", Op::Cont, accepts_copy::<BF16, BF16>),
    reg("hip.cont_i32", Op::Cont, accepts_copy::<I32, I32>),
    reg("hip.dup_f32", Op::Dup, accepts_copy::<F32, F32>),
    reg("hip.dup_f16", Op::Dup, accepts_copy::<F16, F16>),
    reg("hip.dup_bf16", Op::Dup, accepts_copy::<BF16, BF16>),
    reg("hip.dup_i32", Op::Dup, accepts_copy::<I32, I32>),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::registry::accepting;
    use tandem_graph::{Graph, GraphBuilder, TensorId};

    const FLOATS: [ElemType; 3] = [ElemType::F32, ElemType::F16, ElemType::BF16];
    const QUANTS: [ElemType; 5] = [
        ElemType::Q8_0,
        ElemType::Q4_0,
        ElemType::Q4_1,
        ElemType::Q5_0,
        ElemType::Q5_1,
    ];

    fn accepted_by(g: &Graph, id: TensorId) -> Vec<&'static str> {
        accepting(REGISTRATIONS, g, id)
    }

    /// `cpy(src, dst)` with src of shape `ne` stored as `layout` says (0 plain, 1 permuted,
    /// 2 transposed) and a fresh dst of `dst_ne`.
    fn cpy(from: ElemType, to: ElemType, ne: [i64; 4], dst_ne: [i64; 4], layout: u8) -> (Graph, TensorId) {
        let mut g = GraphBuilder::new();
        let a = match layout {
            0 => g.new_tensor(from, &ne),
            1 => {
                let t = g.new_tensor(from, &[ne[0], ne[2], ne[1], ne[3]]);
                g.permute(t, [0, 2, 1, 3]).unwrap()
            }
            _ => {
                let t = g.new_tensor(from, &[ne[1], ne[0], ne[2], ne[3]]);
                g.transpose(t)
            }
        };
        let b = g.new_tensor(to, &dst_ne);
        let n = g.cpy(a, b).unwrap();
        (g.build(), n)
    }

    #[test]
    fn every_harness_copy_finds_its_registration() {
        for from in FLOATS {
            for to in FLOATS {
                let want = vec![format!("hip.cpy_{}_{}", from.name(), to.name())];
                for (ne, dne, layout) in [
                    ([67, 5, 1, 1], [67, 5, 1, 1], 0),
                    ([16, 5, 3, 1], [16, 5, 3, 1], 1),
                    ([7, 9, 1, 1], [7, 9, 1, 1], 2),
                    ([12, 5, 1, 1], [60, 1, 1, 1], 0),
                    ([8, 6, 3, 1], [48, 3, 1, 1], 1),
                ] {
                    let (g, n) = cpy(from, to, ne, dne, layout);
                    assert_eq!(accepted_by(&g, n), want, "{from} -> {to} {ne:?} -> {dne:?}");
                }
            }
        }
        for to in QUANTS {
            let want = vec![format!("hip.cpy_f32_{}", to.name())];
            for (ne, dne, layout) in [
                ([64, 3, 1, 1], [64, 3, 1, 1], 0),
                ([32, 5, 3, 1], [32, 5, 3, 1], 1),
                ([128, 6, 1, 1], [256, 3, 1, 1], 0),
            ] {
                let (g, n) = cpy(ElemType::F32, to, ne, dne, layout);
                assert_eq!(accepted_by(&g, n), want, "{to}");
            }
            // A row that is not a whole number of blocks, and f16 sources, stay on the CPU.
            let (g, n) = cpy(ElemType::F32, to, [48, 2, 1, 1], [48, 2, 1, 1], 0);
            assert!(accepted_by(&g, n).is_empty());
            let (g, n) = cpy(ElemType::F16, to, [64, 2, 1, 1], [64, 2, 1, 1], 0);
            assert!(accepted_by(&g, n).is_empty());
        }
        // iq4_nl targets and quantized sources stay on the CPU.
        let (g, n) = cpy(ElemType::F32, ElemType::IQ4NL, [64, 2, 1, 1], [64, 2, 1, 1], 0);
        assert!(accepted_by(&g, n).is_empty());
        let (g, n) = cpy(ElemType::Q8_0, ElemType::F32, [64, 2, 1, 1], [64, 2, 1, 1], 0);
        assert!(accepted_by(&g, n).is_empty());
    }

    #[test]
    fn cont_and_dup_of_views() {
        for ty in [ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I32] {
            let mut g = GraphBuilder::new();
            let a = g.new_tensor(ty, &[5, 7, 3, 2]);
            let p = g.permute(a, [2, 0, 3, 1]).unwrap();
            let c = g.cont(p);
            let d = g.dup(p);
            let r = g.cont_shape(p, &[14, 15]).unwrap();
            let g = g.build();
            assert_eq!(accepted_by(&g, c), vec![format!("hip.cont_{}", ty.name())]);
            assert_eq!(accepted_by(&g, r), vec![format!("hip.cont_{}", ty.name())]);
            assert_eq!(accepted_by(&g, d), vec![format!("hip.dup_{}", ty.name())]);
            let s = copy_shape(g.tensor(p), g.tensor(r)).unwrap();
            assert_eq!(s.ne, [14, 15, 1, 1]);
            assert_eq!(s.nes, g.tensor(p).ne);
            let sz = ty.type_size() as i64;
            assert_eq!(s.nbd, [sz, 14 * sz, 210 * sz, 210 * sz]);
        }
    }

    #[test]
    fn declines_overlapping_misaligned_or_mismatched_nodes() {
        let (mut g, n) = cpy(ElemType::F32, ElemType::F16, [8, 4, 1, 1], [8, 4, 1, 1], 0);
        g.tensor_mut(n).nb[1] = 8; // dst rows overlap
        assert!(accepted_by(&g, n).is_empty());
        let (mut g, n) = cpy(ElemType::F32, ElemType::F16, [8, 4, 1, 1], [8, 4, 1, 1], 0);
        let a = g.tensor(n).src[0].unwrap();
        g.tensor_mut(a).nb[1] = 30; // f32 rows 30 bytes apart
        assert!(accepted_by(&g, n).is_empty());
        let (mut g, n) = cpy(ElemType::F32, ElemType::F16, [8, 4, 1, 1], [8, 4, 1, 1], 0);
        g.tensor_mut(n).ne[0] = 7; // element counts differ
        assert!(accepted_by(&g, n).is_empty());
        let (mut g, n) = cpy(ElemType::F32, ElemType::Q8_0, [64, 2, 1, 1], [64, 2, 1, 1], 0);
        g.tensor_mut(n).nb[0] = 36; // blocks not back to back
        assert!(accepted_by(&g, n).is_empty());
        // A CONT that changes the type is not a copy these kernels do.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[4, 4]);
        let c = g.cont(a);
        let mut g = g.build();
        g.tensor_mut(c).ty = ElemType::F16;
        assert!(accepted_by(&g, c).is_empty());
    }

    #[test]
    fn entries_exist_and_grids_cover_every_block() {
        let fam = tandem_kernels_hip::find(COPY_FAMILY).unwrap();
        for r in REGISTRATIONS {
            let rest = r.name.split_once('_').unwrap().1;
            let (s, d) = match r.op {
                Op::Cpy => rest.split_once('_').unwrap(),
                _ => (rest, rest),
            };
            let (s, d) = (ElemType::from_name(s).unwrap(), ElemType::from_name(d).unwrap());
            let entry = copy_entry(s, d).unwrap();
            assert!(fam.entries.contains(&entry), "{entry}");
        }
        let names: std::collections::HashSet<_> = REGISTRATIONS.iter().map(|r| r.name).collect();
        assert_eq!(names.len(), REGISTRATIONS.len());
        let c = quantize_launch_config([4096, 1, 1, 1], 32);
        assert_eq!((c.grid, c.block), ([1, 1, 1], [128, 1, 1]));
        let c = quantize_launch_config([256, 4, 2, 1], 32);
        assert_eq!(c.grid, [1, 1, 1]);
        let c = quantize_launch_config([4096, 4096, 1, 1], 32);
        assert_eq!(c.grid, [4096, 1, 1]);
        let c = quantize_launch_config([1 << 20, 1 << 16, 1, 1], 32);
        assert_eq!(c.grid, [65_535, 1, 1]);
    }
}
