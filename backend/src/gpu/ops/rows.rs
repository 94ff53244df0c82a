//! Row reductions of `kernels-hip/src/norm.hip`: RMS_NORM and NORM (alone, or absorbing the MUL
//! by a weight that follows them) and SUM_ROWS, on f32 with any element-aligned strides. Also
//! the helpers the other row families (SOFT_MAX, ARGSORT) share: stride checks and one-block-
//! per-row launch geometry.

use crate::gpu::api::LaunchConfig;
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, read_apart, LaunchCtx, Node, Registration};
use crate::gpu::safe::KernelArgs;
use tandem_graph::{params, ElemType, Op, Tensor};

pub const FAMILY: &str = "norm";

pub const REGISTRATIONS: &[Registration] = &[
    Registration {
        name: "hip.add_rms_norm_mul_f32",
        op: Op::Add,
        fuses: Some(Op::Mul),
        accepts: accepts_add_norm_mul,
        launch: launch_add_norm_mul,
    },
    Registration {
        name: "hip.rms_norm_mul_f32",
        op: Op::RmsNorm,
        fuses: Some(Op::Mul),
        accepts: accepts_norm_mul,
        launch: launch_norm_mul,
    },
    Registration {
        name: "hip.norm_mul_f32",
        op: Op::Norm,
        fuses: Some(Op::Mul),
        accepts: accepts_norm_mul,
        launch: launch_norm_mul,
    },
    Registration {
        name: "hip.rms_norm_f32",
        op: Op::RmsNorm,
        fuses: None,
        accepts: accepts_norm,
        launch: launch_norm,
    },
    Registration {
        name: "hip.norm_f32",
        op: Op::Norm,
        fuses: None,
        accepts: accepts_norm,
        launch: launch_norm,
    },
    Registration {
        name: "hip.sum_clamp_div_f32",
        op: Op::SumRows,
        fuses: Some(Op::Div),
        accepts: accepts_sum_clamp_div,
        launch: launch_sum_clamp_div,
    },
    Registration {
        name: "hip.sum_rows_f32",
        op: Op::SumRows,
        fuses: None,
        accepts: accepts_sum_rows,
        launch: launch_sum_rows,
    },
];

/// Grid dimensions stay within what every device accepts; the kernels loop over rows, so
/// capping only lengthens the loop.
const MAX_GRID: i64 = 65_535;

/// `tandem_row_shape` of norm.hip: extents and byte strides of the source, the destination and
/// (fused) the MUL's other operand.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowShape {
    pub ne: [i64; 4],
    pub nbs: [i64; 4],
    pub nbd: [i64; 4],
    pub new: [i64; 4],
    pub nbw: [i64; 4],
}
const _: () = assert!(std::mem::size_of::<RowShape>() == 160);

/// Byte strides of `t` as i64 when every stride and the view offset are multiples of `align`
/// (the element size the kernel loads), so each access is naturally aligned.
pub fn aligned_strides(t: &Tensor, align: usize) -> Option<[i64; 4]> {
    if !t.view_offs.is_multiple_of(align) {
        return None;
    }
    let mut nb = [0i64; 4];
    for (o, &b) in nb.iter_mut().zip(&t.nb) {
        if !b.is_multiple_of(align) {
            return None;
        }
        *o = i64::try_from(b).ok()?;
    }
    Some(nb)
}

/// Every extent is at least 1 and the element count fits an i64.
pub fn non_empty(ne: [i64; 4]) -> bool {
    ne.iter().all(|&n| n >= 1) && ne.iter().try_fold(1i64, |acc, &n| acc.checked_mul(n)).is_some()
}

/// A result may share bytes with a source only element for element (ggml's in-place ops): when
/// `dst` is a view, it must have `src`'s extents and strides. Anything else is declined.
pub fn writes_in_place_safely(dst: &Tensor, src: &Tensor) -> bool {
    dst.view_src.is_none() || (dst.ne == src.ne && dst.nb == src.nb)
}

/// Whether `a` and `b` are the same graph tensor (the same node seen twice).
pub fn same_tensor(a: &Tensor, b: &Tensor) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// Threads of a one-block-per-row kernel for rows of `ne0`: about four elements per thread,
/// a multiple of 64 (whole waves on every device), at most 1024.
pub fn row_block(ne0: i64) -> u32 {
    let want = ((ne0.max(1) + 3) / 4).clamp(64, 1024) as u32;
    want.next_power_of_two()
}

/// One block per row of extents `ne` (rows = dims 1..3), capped at `MAX_GRID` blocks.
pub fn row_launch(ne: [i64; 4], block: u32, shared_bytes: u32) -> LaunchConfig {
    let rows = ne[1].max(1).saturating_mul(ne[2].max(1)).saturating_mul(ne[3].max(1));
    LaunchConfig {
        grid: [rows.min(MAX_GRID) as u32, 1, 1],
        block: [block, 1, 1],
        shared_bytes,
    }
}

fn is_f32(t: &Tensor) -> bool {
    t.ty == ElemType::F32
}

/// Source and eps of a plain norm node the kernels run, or `None`.
fn norm_parts<'a>(node: &Node<'a>) -> Option<(&'a Tensor, f32)> {
    let dst = node.dst;
    let src = node.src(0)?;
    if !is_f32(src) || !is_f32(dst) || src.ne != dst.ne || !non_empty(dst.ne) {
        return None;
    }
    let eps = params::norm_eps(dst);
    if !(eps.is_finite() && eps >= 0.0) {
        return None;
    }
    aligned_strides(src, 4)?;
    aligned_strides(dst, 4)?;
    Some((src, eps))
}

fn accepts_norm(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    let Some((src, _)) = norm_parts(node) else {
        return false;
    };
    writes_in_place_safely(node.dst, src)
}

/// The MUL's other operand when `next` multiplies `node`'s result (as src0 or src1, not both)
/// by a tensor that repeats over it, and the MUL's result has the norm's shape.
fn fused_other<'a>(node: &Node<'_>, next: &Node<'a>) -> Option<&'a Tensor> {
    let (a, b) = (next.src(0)?, next.src(1)?);
    let other = match (same_tensor(a, node.dst), same_tensor(b, node.dst)) {
        (true, false) => b,
        (false, true) => a,
        _ => return None,
    };
    let out = next.dst;
    if next.dst.op != Op::Mul || !is_f32(out) || !is_f32(other) || out.ne != node.dst.ne {
        return None;
    }
    if !(0..4).all(|k| other.ne[k] >= 1 && out.ne[k] % other.ne[k] == 0) {
        return None;
    }
    aligned_strides(other, 4)?;
    aligned_strides(out, 4)?;
    Some(other)
}

fn accepts_norm_mul(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    let Some(next) = next else {
        return false;
    };
    let Some((src, _)) = norm_parts(node) else {
        return false;
    };
    let Some(other) = fused_other(node, next) else {
        return false;
    };
    let out = next.dst;
    // In place onto the source or onto a full-size other operand: element for element only.
    if out.view_src.is_some() && (out.nb != src.nb || (other.ne == out.ne && other.nb != out.nb)) {
        return false;
    }
    true
}

/// The shape for a norm of `src` into `dst`, with `other` repeated over the row when fused.
pub fn norm_shape(src: &Tensor, dst: &Tensor, other: Option<&Tensor>) -> Option<RowShape> {
    let (new, nbw) = match other {
        Some(o) => (o.ne, aligned_strides(o, 4)?),
        None => ([1; 4], [0; 4]),
    };
    Some(RowShape {
        ne: src.ne,
        nbs: aligned_strides(src, 4)?,
        nbd: aligned_strides(dst, 4)?,
        new,
        nbw,
    })
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch_norm(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let (src, eps) = norm_parts(node).ok_or_else(|| launch_error("launch_norm", "node not accepted"))?;
    let shape = norm_shape(src, node.dst, None).ok_or_else(|| launch_error("launch_norm", "bad strides"))?;
    let entry = if node.dst.op == Op::RmsNorm {
        "tandem_rms_norm_f32"
    } else {
        "tandem_norm_f32"
    };
    let f = ctx.kernels.function(FAMILY, entry)?;
    let mut args = KernelArgs::new();
    args.push(dptr(src)).push(dptr(node.dst)).push(shape).push(eps);
    let cfg = row_launch(shape.ne, row_block(shape.ne[0]), 0);
    // SAFETY: the parameters are (const char*, char*, tandem_row_shape, float); the predicate
    // checked that the strides describe both tensors, whose bytes the caller vouches for.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch_norm_mul(ctx: &LaunchCtx<'_>, node: &Node<'_>, next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let next = next.ok_or_else(|| launch_error("launch_norm_mul", "no MUL to fuse"))?;
    let (src, eps) = norm_parts(node).ok_or_else(|| launch_error("launch_norm_mul", "node not accepted"))?;
    let other = fused_other(node, next).ok_or_else(|| launch_error("launch_norm_mul", "MUL not fusable"))?;
    let out = next.dst;
    let shape = norm_shape(src, out, Some(other)).ok_or_else(|| launch_error("launch_norm_mul", "bad strides"))?;
    let entry = if node.dst.op == Op::RmsNorm {
        "tandem_rms_norm_mul_f32"
    } else {
        "tandem_norm_mul_f32"
    };
    let f = ctx.kernels.function(FAMILY, entry)?;
    // The norm's source may be dead once the norm ran, and the MUL's result over its bytes.
    // SAFETY: the registry contract gives device addresses covering each tensor.
    let at = unsafe { read_apart(ctx, [src, other], &[out]) }?;
    let mut args = KernelArgs::new();
    args.push(at[0]).push(at[1]).push(dptr(out)).push(shape).push(eps);
    let cfg = row_launch(shape.ne, row_block(shape.ne[0]), 0);
    // SAFETY: the parameters are (const char*, const char*, char*, tandem_row_shape, float); the
    // strides and repeat extents were checked against the three tensors.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// `tandem_add_strides` of norm.hip: byte strides of an ADD's two operands.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddStrides {
    pub nba: [i64; 4],
    pub nbb: [i64; 4],
}
const _: () = assert!(std::mem::size_of::<AddStrides>() == 64);

/// The parts of the chain ADD (`node`), RMS_NORM of its result, MUL of that by a weight (`next`;
/// the plan's chain, `exec::add_norm_chain`, checks that the norm reads the ADD): the ADD's
/// operands, the norm, the MUL's other operand, the shapes and eps. The ADD adds two f32 tensors
/// of its own extents, element for element.
struct AddNorm<'a> {
    a: &'a Tensor,
    b: &'a Tensor,
    other: &'a Tensor,
    shape: RowShape,
    strides: AddStrides,
    eps: f32,
}

fn add_norm_parts<'a>(node: &Node<'a>, next: &Node<'a>) -> Option<AddNorm<'a>> {
    let (a, b, sum) = (node.src(0)?, node.src(1)?, node.dst);
    if sum.op != Op::Add || !is_f32(a) || !is_f32(b) || !is_f32(sum) || a.ne != sum.ne || b.ne != sum.ne {
        return None;
    }
    // The MUL reads the norm and the weight, not the sum itself.
    let (m0, m1) = (next.src(0)?, next.src(1)?);
    if same_tensor(m0, sum) || same_tensor(m1, sum) {
        return None;
    }
    let norm = [m0, m1].into_iter().find(|t| t.op == Op::RmsNorm)?;
    let mut srcs = [None; tandem_graph::MAX_SRC];
    srcs[0] = Some(sum);
    let norm_node = Node { dst: norm, srcs };
    if norm.ne != sum.ne || !accepts_norm_mul(&norm_node, Some(next)) {
        return None;
    }
    // The sum may be an operand in place, element for element only.
    if sum.view_src.is_some() && !(a.nb == sum.nb || b.nb == sum.nb) {
        return None;
    }
    let other = fused_other(&norm_node, next)?;
    Some(AddNorm {
        a,
        b,
        other,
        shape: norm_shape(sum, next.dst, Some(other))?,
        strides: AddStrides {
            nba: aligned_strides(a, 4)?,
            nbb: aligned_strides(b, 4)?,
        },
        eps: params::norm_eps(norm),
    })
}

fn accepts_add_norm_mul(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    next.is_some_and(|n| add_norm_parts(node, n).is_some())
}

/// # Safety
/// As [`crate::gpu::registry::Launch`]; `next` is the chain's MUL.
unsafe fn launch_add_norm_mul(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    next: Option<&Node<'_>>,
) -> Result<(), KernelError> {
    let next = next.ok_or_else(|| launch_error("launch_add_norm_mul", "no MUL"))?;
    let p = add_norm_parts(node, next).ok_or_else(|| launch_error("launch_add_norm_mul", "node not accepted"))?;
    let f = ctx.kernels.function(FAMILY, "tandem_add_rms_norm_mul_f32")?;
    // The ADD's operands may be dead once it ran, and the MUL's result over their bytes.
    // SAFETY: the registry contract gives device addresses covering each tensor.
    let at = unsafe { read_apart(ctx, [p.a, p.b, p.other], &[node.dst, next.dst]) }?;
    let mut args = KernelArgs::new();
    args.push(at[0])
        .push(at[1])
        .push(dptr(node.dst))
        .push(at[2])
        .push(dptr(next.dst))
        .push(p.shape)
        .push(p.strides)
        .push(p.eps);
    // The block size of the norm alone, so the sum of squares is reduced in the same order.
    let cfg = row_launch(p.shape.ne, row_block(p.shape.ne[0]), 0);
    // SAFETY: the parameters are (const char*, const char*, char*, const char*, char*,
    // tandem_row_shape, tandem_add_strides, float); the strides and extents were checked against
    // the five tensors.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

fn sum_rows_shape(node: &Node<'_>) -> Option<RowShape> {
    let dst = node.dst;
    let src = node.src(0)?;
    if !is_f32(src) || !is_f32(dst) || !non_empty(src.ne) || dst.ne != [1, src.ne[1], src.ne[2], src.ne[3]] {
        return None;
    }
    // The result is a quarter-row-sized side product; a view would only ever alias the source.
    if dst.view_src.is_some() {
        return None;
    }
    Some(RowShape {
        ne: src.ne,
        nbs: aligned_strides(src, 4)?,
        nbd: aligned_strides(dst, 4)?,
        new: [1; 4],
        nbw: [0; 4],
    })
}

fn accepts_sum_rows(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    sum_rows_shape(node).is_some()
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch_sum_rows(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let shape = sum_rows_shape(node).ok_or_else(|| launch_error("launch_sum_rows", "node not accepted"))?;
    let src = node
        .src(0)
        .ok_or_else(|| launch_error("launch_sum_rows", "no source"))?;
    let f = ctx.kernels.function(FAMILY, "tandem_sum_rows_f32")?;
    let mut args = KernelArgs::new();
    args.push(dptr(src)).push(dptr(node.dst)).push(shape);
    let cfg = row_launch(shape.ne, row_block(shape.ne[0]), 0);
    // SAFETY: the parameters are (const char*, char*, tandem_row_shape); one f32 per source row
    // is written at dst's strides, checked against dst's shape.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// SUM_ROWS `node` and the DIV `next` of llama.cpp's weight normalization, `x / clamp(sum_rows(x),
/// lo, hi)`: the DIV divides the SUM_ROWS's own source by the CLAMP of its result (the plan's
/// chain, `exec::sum_clamp_div_chain`, checks that the CLAMP reads the sum). Returns the shape
/// (dst's strides in `nbw`) and the clamp's bounds.
fn sum_clamp_div_shape(node: &Node<'_>, next: &Node<'_>) -> Option<(RowShape, f32, f32)> {
    let mut shape = sum_rows_shape(node)?;
    let x = node.src(0)?;
    let (a, c, d) = (next.src(0)?, next.src(1)?, next.dst);
    if d.op != Op::Div || c.op != Op::Clamp || !is_f32(c) || !is_f32(d) || c.ne != node.dst.ne {
        return None;
    }
    if !(std::ptr::eq(a, x) || (a.data == x.data && a.ne == x.ne && a.nb == x.nb)) || d.ne != x.ne {
        return None;
    }
    let (lo, hi) = params::clamp_params(c);
    shape.nbw = aligned_strides(d, 4)?;
    Some((shape, lo, hi))
}

fn accepts_sum_clamp_div(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    next.is_some_and(|n| sum_clamp_div_shape(node, n).is_some())
}

/// # Safety
/// As [`crate::gpu::registry::Launch`]; `next` is the chain's DIV.
unsafe fn launch_sum_clamp_div(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    next: Option<&Node<'_>>,
) -> Result<(), KernelError> {
    let next = next.ok_or_else(|| launch_error("launch_sum_clamp_div", "no DIV"))?;
    let (shape, lo, hi) =
        sum_clamp_div_shape(node, next).ok_or_else(|| launch_error("launch_sum_clamp_div", "node not accepted"))?;
    let src = node
        .src(0)
        .ok_or_else(|| launch_error("launch_sum_clamp_div", "no source"))?;
    let f = ctx.kernels.function(FAMILY, "tandem_sum_clamp_div_f32")?;
    let mut args = KernelArgs::new();
    args.push(dptr(src)).push(dptr(next.dst)).push(shape).push(lo).push(hi);
    // The block size of SUM_ROWS alone, so the sum is reduced in the same order.
    let cfg = row_launch(shape.ne, row_block(shape.ne[0]), 0);
    // SAFETY: the parameters are (const char*, char*, tandem_row_shape, float, float); every row
    // of src is read and the same row of dst (its strides in nbw, dst of src's extents) written.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::GraphBuilder;

    #[test]
    fn plain_norms_accept_f32_rows_and_decline_the_rest() {
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[4096, 3, 2]);
        let r = b.rms_norm(a, 1e-6);
        let n = b.norm(a, 1e-5);
        let t = b.transpose(a);
        let rt = b.rms_norm(t, 1e-6);
        let h = b.new_tensor(ElemType::F16, &[64, 2]);
        let rh = b.rms_norm(h, 1e-6);
        let bad = b.norm(a, -1.0);
        let g = b.build();
        for id in [r, n, rt] {
            assert!(accepts_norm(&Node::of(&g, id), None), "{:?}", g.tensor(id).op);
        }
        assert!(!accepts_norm(&Node::of(&g, rh), None));
        assert!(!accepts_norm(&Node::of(&g, bad), None));
        // A norm is not offered to the fused registration without a MUL.
        assert!(!accepts_norm_mul(&Node::of(&g, r), None));

        let shape = norm_shape(g.tensor(a), g.tensor(r), None).unwrap();
        assert_eq!(shape.ne, [4096, 3, 2, 1]);
        assert_eq!(shape.nbs, [4, 16384, 49152, 98304]);
        assert_eq!((shape.new, shape.nbw), ([1; 4], [0; 4]));
        let ts = norm_shape(g.tensor(t), g.tensor(rt), None).unwrap();
        assert_eq!(ts.nbs[0], 16384);
    }

    #[test]
    fn misaligned_strides_and_odd_in_place_views_are_declined() {
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[64, 4]);
        let r = b.rms_norm(a, 1e-6);
        let mut g = b.build();
        g.tensor_mut(a).nb[1] = 258;
        assert!(!accepts_norm(&Node::of(&g, r), None));
        g.tensor_mut(a).nb[1] = 256;
        // In place with the source's layout is fine; with another layout it is not.
        g.tensor_mut(r).view_src = Some(a);
        assert!(accepts_norm(&Node::of(&g, r), None));
        g.tensor_mut(r).nb = [4, 512, 2048, 2048];
        assert!(!accepts_norm(&Node::of(&g, r), None));
    }

    #[test]
    fn fused_norm_takes_the_mul_from_either_side() {
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[256, 5, 2]);
        let w = b.new_tensor(ElemType::F32, &[256]);
        let full = b.new_tensor(ElemType::F32, &[256, 5, 2]);
        let odd = b.new_tensor(ElemType::F32, &[128, 5, 1]);
        let r = b.rms_norm(x, 1e-6);
        let m0 = b.mul(r, w).unwrap();
        let m1 = b.mul(full, r).unwrap();
        let m2 = b.mul(r, odd).unwrap();
        let sq = b.mul(r, r).unwrap();
        let n = b.norm(x, 1e-5);
        let other_mul = b.mul(n, w).unwrap();
        let wh = b.new_tensor(ElemType::F16, &[256]);
        let mh = b.mul(r, wh).unwrap();
        let g = b.build();
        let nr = Node::of(&g, r);
        for m in [m0, m1, m2] {
            assert!(accepts_norm_mul(&nr, Some(&Node::of(&g, m))), "mul {m:?}");
        }
        let other = fused_other(&nr, &Node::of(&g, m1)).unwrap();
        assert_eq!(other.ne, [256, 5, 2, 1]);
        assert!(!accepts_norm_mul(&nr, Some(&Node::of(&g, sq))), "x*x");
        assert!(
            !accepts_norm_mul(&nr, Some(&Node::of(&g, other_mul))),
            "MUL of another node"
        );
        assert!(!accepts_norm_mul(&nr, Some(&Node::of(&g, mh))), "f16 weight");
        assert!(accepts_norm_mul(&Node::of(&g, n), Some(&Node::of(&g, other_mul))));

        let s = norm_shape(g.tensor(x), g.tensor(m2), Some(g.tensor(odd))).unwrap();
        assert_eq!(s.new, [128, 5, 1, 1]);
        assert_eq!(s.nbw, [4, 512, 2560, 2560]);
        assert_eq!(s.nbd, [4, 1024, 5120, 10240]);
    }

    #[test]
    fn fused_norm_declines_a_mul_whose_result_is_broadcast_larger() {
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[64]);
        let big = b.new_tensor(ElemType::F32, &[64, 3]);
        let r = b.rms_norm(x, 1e-6);
        let m = b.mul(big, r).unwrap();
        let g = b.build();
        assert!(!accepts_norm_mul(&Node::of(&g, r), Some(&Node::of(&g, m))));
    }

    #[test]
    fn sum_rows_predicate_and_geometry() {
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[33, 4, 3]);
        let s = b.sum_rows(a);
        let t = b.transpose(a);
        let st = b.sum_rows(t);
        let h = b.new_tensor(ElemType::F16, &[33, 4]);
        let sh = b.sum_rows(h);
        let g = b.build();
        assert!(accepts_sum_rows(&Node::of(&g, s), None));
        assert!(accepts_sum_rows(&Node::of(&g, st), None));
        assert!(!accepts_sum_rows(&Node::of(&g, sh), None));
        let shape = sum_rows_shape(&Node::of(&g, s)).unwrap();
        assert_eq!(shape.nbd, [4, 4, 16, 48]);

        assert_eq!(row_block(1), 64);
        assert_eq!(row_block(1000), 256);
        assert_eq!(row_block(4096), 1024);
        assert_eq!(row_block(1 << 20), 1024);
        let c = row_launch([4096, 1 << 12, 64, 1], 1024, 0);
        assert_eq!(c.grid, [65_535, 1, 1]);
        assert_eq!(row_launch([7, 3, 2, 1], 64, 0).grid, [6, 1, 1]);
        assert!(non_empty([1, 1, 1, 1]) && !non_empty([0, 1, 1, 1]) && !non_empty([i64::MAX, 2, 1, 1]));
    }
}
