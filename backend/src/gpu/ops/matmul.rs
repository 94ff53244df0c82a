//! MUL_MAT and MUL_MAT_ID registrations over the 14 weight types (f32, f16, bf16, q4_0, q4_1,
//! q5_0, q5_1, q8_0, q2_K .. q6_K, iq4_nl) with f32 activations:
//! - `hip.gemv_<type>`: 1..8 columns (decode); quantized weights use q8_1 activations;
//! - `hip.mul_mat_<type>`: more than 8 columns (prefill), the tiled GEMM;
//! - `hip.mul_mat_id_<type>`: MUL_MAT_ID in GEMV form (each slot reads its expert's rows).
//!
//! Predicates start from the CPU's own shape rules (`tandem_ops::cpu::check`: types, the
//! MUL_MAT hint, broadcastable batches, contiguous weight rows and dst) and add what the kernels
//! need: f32 src1 (contiguous rows for float weights, which read it directly), non-empty
//! extents, grids within every device's limits, and a bounded q8_1 scratch copy.

use super::binary::{accepts_glu_f32, launch_glu};
use super::matmul_launch::{
    launch_gemm, launch_gemv, launch_mul_mat_id, launch_seg, mul_mat_fits, q8_1_layout, seg_bytes, uses_q8_1, GluGate,
    MulMatIdShape, MulMatShape, Q8Shape, GEMV_MAX_COLUMNS, MAX_GRID_X, MAX_GRID_YZ,
};
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, LaunchCtx, Node, Registration};
use tandem_graph::params::glu_op;
use tandem_graph::{ElemType, GluOp, Op, Tensor};

/// Which kernel shape a MUL_MAT predicate stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    Gemv,
    Gemm,
}

/// The element sizes the kernels read with: f32 src1/dst, weight rows at 2-byte granularity
/// (4 for f32), so every stride must keep those alignments.
fn strides_aligned(t: &Tensor, to: usize) -> bool {
    t.nb.iter().all(|&b| b.is_multiple_of(to))
}

fn weight_alignment(ty: ElemType) -> usize {
    if ty == ElemType::F32 {
        4
    } else {
        2
    }
}

/// The MUL_MAT node (src0 of type `ty`, f32 src1) if the kernels of `form` run it exactly.
fn mul_mat_accepts(node: &Node<'_>, ty: ElemType, form: Form) -> bool {
    let dst = node.dst;
    if dst.op != Op::MulMat {
        return false;
    }
    let (Some(w), Some(x)) = (node.src(0), node.src(1)) else {
        return false;
    };
    if w.ty != ty || x.ty != ElemType::F32 || dst.ty != ElemType::F32 {
        return false;
    }
    if tandem_ops::cpu::check(dst, &node.srcs).is_err() {
        return false;
    }
    if dst.nelements() == 0 || w.ne[0] <= 0 {
        return false;
    }
    if !strides_aligned(w, weight_alignment(ty)) || !strides_aligned(x, 4) || !strides_aligned(dst, 4) {
        return false;
    }
    let Some(s) = MulMatShape::new(dst, w, x) else {
        return false;
    };
    if !mul_mat_fits(&s) {
        return false;
    }
    let reads_src1_rows = !uses_q8_1(ty) || form == Form::Gemm;
    if reads_src1_rows && x.nb[0] != 4 {
        return false;
    }
    match form {
        Form::Gemv => {
            if s.n < 1 || s.n > GEMV_MAX_COLUMNS {
                return false;
            }
            if uses_q8_1(ty) && q8_1_layout(Q8Shape::of(x).columns(), s.k).is_none() {
                return false;
            }
        }
        Form::Gemm => {
            if s.n <= GEMV_MAX_COLUMNS {
                return false;
            }
        }
    }
    true
}

/// The MUL_MAT_ID node (experts of type `ty`, f32 src1, i32 ids) if the GEMV-form kernel runs it.
fn mul_mat_id_accepts(node: &Node<'_>, ty: ElemType) -> bool {
    let dst = node.dst;
    if dst.op != Op::MulMatId {
        return false;
    }
    let (Some(w), Some(x), Some(ids)) = (node.src(0), node.src(1), node.src(2)) else {
        return false;
    };
    if w.ty != ty || x.ty != ElemType::F32 || ids.ty != ElemType::I32 || dst.ty != ElemType::F32 {
        return false;
    }
    if tandem_ops::cpu::check(dst, &node.srcs).is_err() {
        return false;
    }
    if dst.nelements() == 0 || w.ne[0] <= 0 || w.ne[2] <= 0 {
        return false;
    }
    if !strides_aligned(w, weight_alignment(ty))
        || !strides_aligned(x, 4)
        || !strides_aligned(ids, 4)
        || !strides_aligned(dst, 4)
    {
        return false;
    }
    let s = MulMatIdShape::new(dst, w, x, ids);
    if s.m > MAX_GRID_X || s.slots() > MAX_GRID_YZ || s.n_b <= 0 {
        return false;
    }
    if uses_q8_1(ty) {
        q8_1_layout(Q8Shape::of(x).columns(), s.k).is_some()
    } else {
        x.nb[0] == 4
    }
}

fn ty_of(id: u32) -> Option<ElemType> {
    ElemType::from_ggml(id)
}

fn accepts_gemv<const T: u32>(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    ty_of(T).is_some_and(|ty| mul_mat_accepts(node, ty, Form::Gemv))
}

fn accepts_gemm<const T: u32>(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    ty_of(T).is_some_and(|ty| mul_mat_accepts(node, ty, Form::Gemm))
}

fn accepts_mul_mat_id<const T: u32>(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    ty_of(T).is_some_and(|ty| mul_mat_id_accepts(node, ty))
}

/// # Safety
/// [`crate::gpu::registry::Launch`]'s contract.
unsafe fn gemv(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    // SAFETY: forwarded.
    unsafe { launch_gemv(ctx, node) }
}

/// # Safety
/// [`crate::gpu::registry::Launch`]'s contract.
unsafe fn gemm(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    // SAFETY: forwarded.
    unsafe { launch_gemm(ctx, node) }
}

/// # Safety
/// [`crate::gpu::registry::Launch`]'s contract.
unsafe fn mul_mat_id(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    // SAFETY: forwarded.
    unsafe { launch_mul_mat_id(ctx, node) }
}

/// The GLU gate and the one-column MUL_MAT reading it (a GLU FFN's down projection): the
/// gate's op, and its operands as the GEMV reads them (`x` as its column, `g` beside it), where
/// the segment GEMV can compute the gate as it reads its column. Split form only (two f32
/// operands of the gate's shape, contiguous, not swapped), one column of `k` values, one batch,
/// a weight type with a segment walk.
fn glu_gemv_parts<'a>(glu: &Node<'a>, mm: &Node<'a>) -> Option<(GluOp, &'a Tensor, &'a Tensor)> {
    let d = glu.dst;
    let (op, swapped) = glu_op(d);
    let (op, x, g) = (op?, glu.src(0)?, glu.src(1)?);
    let w = mm.src(0)?;
    // The MUL_MAT reads the gate's result as its activations, not as its weight.
    let reads_gate = mm.src(1).is_some_and(|a| std::ptr::eq(a, d)) && !std::ptr::eq(w, d);
    if swapped || !reads_gate || seg_bytes(w.ty).is_none() || !mul_mat_accepts(mm, w.ty, Form::Gemv) {
        return None;
    }
    let column = |t: &Tensor| t.ty == ElemType::F32 && t.ne == d.ne && t.nb[0] == 4 && t.is_contiguous();
    let s = MulMatShape::new(mm.dst, w, d)?;
    (column(x) && column(g) && column(d) && s.n == 1 && s.batches() == 1 && d.ne[0] == s.k).then_some((op, x, g))
}

fn accepts_glu_gemv(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    node.dst.op == Op::Glu
        && accepts_glu_f32(node, None)
        && next.is_some_and(|mm| mm.dst.op == Op::MulMat && glu_gemv_parts(node, mm).is_some())
}

/// A GLU gate and the GEMV that reads it: one segment GEMV computing the gate as it reads its
/// column where the device runs one for the shape; else the gate's kernel, then the GEMV.
///
/// # Safety
/// [`crate::gpu::registry::Launch`]'s contract.
unsafe fn glu_gemv(ctx: &LaunchCtx<'_>, node: &Node<'_>, next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let mm = next.ok_or_else(|| launch_error("hip.glu_gemv", "no MUL_MAT after the gate"))?;
    let (op, x, g) = glu_gemv_parts(node, mm).ok_or_else(|| launch_error("hip.glu_gemv", "not a gate a GEMV reads"))?;
    let w = mm
        .src(0)
        .ok_or_else(|| launch_error("hip.glu_gemv", "MUL_MAT without a weight"))?;
    let s = MulMatShape::new(mm.dst, w, node.dst).ok_or_else(|| launch_error("hip.glu_gemv", "empty batch"))?;
    let gate = GluGate { g: dptr(g), op };
    // SAFETY: forwarded; x and g are contiguous f32 columns of k values (`glu_gemv_parts`).
    if unsafe { launch_seg(ctx, w, x, Some(gate), mm.dst, &s) }? {
        return Ok(());
    }
    // The gate's kernel writes the column the GEMV then reads: the GEMV must not read it early.
    let after = LaunchCtx {
        act_ready: false,
        ..*ctx
    };
    // SAFETY: forwarded; the predicates of both nodes accepted them.
    unsafe {
        launch_glu(ctx, node, None)?;
        launch_gemv(&after, mm)
    }
}

macro_rules! registrations {
    ($($ty:ident: $gemv:literal, $gemm:literal, $mmid:literal;)*) => {
        &[
            $(Registration {
                name: $gemv,
                op: Op::MulMat,
                fuses: None,
                accepts: accepts_gemv::<{ ElemType::$ty as u32 }>,
                launch: gemv,
            },)*
            $(Registration {
                name: $gemm,
                op: Op::MulMat,
                fuses: None,
                accepts: accepts_gemm::<{ ElemType::$ty as u32 }>,
                launch: gemm,
            },)*
            $(Registration {
                name: $mmid,
                op: Op::MulMatId,
                fuses: None,
                accepts: accepts_mul_mat_id::<{ ElemType::$ty as u32 }>,
                launch: mul_mat_id,
            },)*
        ]
    };
}

/// Two one-column MUL_MATs on the same activations with weights of one type and shape (a
/// layer's k and v projections, an FFN's gate and up), as one segment GEMV over a batch of two:
/// the second weight and result as the first's at a byte distance (`nb02`, `nb2`), the column
/// read by both (`nb12` = 0). `exec::sibling_chain` finds the pair.
fn pair_shape(a: &Node<'_>, b: &Node<'_>) -> Option<MulMatShape> {
    let (wa, xa, wb, xb) = (a.src(0)?, a.src(1)?, b.src(0)?, b.src(1)?);
    let same = wa.ty == wb.ty && wa.ne == wb.ne && wa.nb == wb.nb && std::ptr::eq(xa, xb) && a.dst.ne == b.dst.ne;
    if !same
        || seg_bytes(wa.ty).is_none()
        || !mul_mat_accepts(a, wa.ty, Form::Gemv)
        || !mul_mat_accepts(b, wa.ty, Form::Gemv)
    {
        return None;
    }
    let s = MulMatShape::new(a.dst, wa, xa)?;
    (s.n == 1 && s.batches() == 1 && wa.ne[2] == 1 && wa.ne[3] == 1).then_some(s)
}

fn accepts_gemv_pair(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    next.is_some_and(|b| b.dst.op == Op::MulMat && pair_shape(node, b).is_some())
}

/// # Safety
/// [`crate::gpu::registry::Launch`]'s contract.
unsafe fn gemv_pair(ctx: &LaunchCtx<'_>, node: &Node<'_>, next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let b = next.ok_or_else(|| launch_error("hip.gemv_pair", "no second MUL_MAT"))?;
    let s = pair_shape(node, b).ok_or_else(|| launch_error("hip.gemv_pair", "not a pair of one-column GEMVs"))?;
    let (wa, x, wb) = match (node.src(0), node.src(1), b.src(0)) {
        (Some(wa), Some(x), Some(wb)) => (wa, x, wb),
        _ => return Err(launch_error("hip.gemv_pair", "MUL_MAT without two sources")),
    };
    let dw = wb.data as i64 - wa.data as i64;
    let dd = b.dst.data as i64 - node.dst.data as i64;
    let pair = MulMatShape {
        ne12: 2,
        r2: 1,
        nb02: dw,
        nb12: 0,
        nb2: dd,
        ..s
    };
    // SAFETY: forwarded; batch 1 of `pair` is the second product exactly (its weight `dw` bytes
    // from the first's, its result `dd` from the first's, the same column), whose tensors the
    // predicates accepted as the first's; the segment walk takes the batch only where the
    // distances keep its 16-byte alignment (`gemv_seg_fits`).
    if dd % 4 == 0 && unsafe { launch_seg(ctx, wa, x, None, node.dst, &pair) }? {
        return Ok(());
    }
    // SAFETY: forwarded; each node's predicate accepted it.
    unsafe {
        launch_gemv(ctx, node)?;
        launch_gemv(ctx, b)
    }
}

/// Sibling one-column MUL_MATs in one launch.
pub const GEMV_PAIR: Registration = Registration {
    name: "hip.gemv_pair",
    op: Op::MulMat,
    fuses: Some(Op::MulMat),
    accepts: accepts_gemv_pair,
    launch: gemv_pair,
};

/// The GLU gate fused into the GEMV that reads it. Not registered: with the gate out of line,
/// every block still computes it over the whole column before its first dot, and in a model run
/// (H100, dense Q4_0 decode, forty-seventh record) the down GEMV with the gate took 24.8 µs of
/// a layer's time against about 20 for the gate's kernel and the GEMV apart; decode 468.8
/// against 487.1 tok/s with it left out, same command.
pub const GLU_GEMV: Registration = Registration {
    name: "hip.glu_gemv",
    op: Op::Glu,
    fuses: Some(Op::MulMat),
    accepts: accepts_glu_gemv,
    launch: glu_gemv,
};

pub const REGISTRATIONS: &[Registration] = registrations! {
    F32: "hip.gemv_f32", "hip.mul_mat_f32", "hip.mul_mat_id_f32";
    F16: "hip.gemv_f16", "hip.mul_mat_f16", "hip.mul_mat_id_f16";
    BF16: "hip.gemv_bf16", "hip.mul_mat_bf16", "hip.mul_mat_id_bf16";
    Q4_0: "hip.gemv_q4_0", "hip.mul_mat_q4_0", "hip.mul_mat_id_q4_0";
    Q4_1: "hip.gemv_q4_1", "hip.mul_mat_q4_1", "hip.mul_mat_id_q4_1";
    Q5_0: "hip.gemv_q5_0", "hip.mul_mat_q5_0", "hip.mul_mat_id_q5_0";
    Q5_1: "hip.gemv_q5_1", "hip.mul_mat_q5_1", "hip.mul_mat_id_q5_1";
    Q8_0: "hip.gemv_q8_0", "hip.mul_mat_q8_0", "hip.mul_mat_id_q8_0";
    Q2K: "hip.gemv_q2_K", "hip.mul_mat_q2_K", "hip.mul_mat_id_q2_K";
    Q3K: "hip.gemv_q3_K", "hip.mul_mat_q3_K", "hip.mul_mat_id_q3_K";
    Q4K: "hip.gemv_q4_K", "hip.mul_mat_q4_K", "hip.mul_mat_id_q4_K";
    Q5K: "hip.gemv_q5_K", "hip.mul_mat_q5_K", "hip.mul_mat_id_q5_K";
    Q6K: "hip.gemv_q6_K", "hip.mul_mat_q6_K", "hip.mul_mat_id_q6_K";
    IQ4NL: "hip.gemv_iq4_nl", "hip.mul_mat_iq4_nl", "hip.mul_mat_id_iq4_nl";
};

#[cfg(test)]
mod tests {
    use super::super::matmul_launch::{
        convert_config, entries, gemm_config, gemm_k_parts, gemv_act_bytes, gemv_config, gemv_fuses_quantize,
        gemv_seg_config, gemv_seg_fits, gemv_shared_bytes, gemv_stages, gemv_waves, half_weights, has_mma, has_wgmma,
        mma_config, mma_entry, mma_tile, mmid_grouped_bytes, mmid_mma_config, mmid_mma_entry, mmid_wmma_entry,
        mmq_shared_bytes, mmv_config, mmv_entry, mmv_fits, mmv_shared_bytes, quantize_config, rows_per_wave, seg_bytes,
        seg_entry, seg_in_units, seg_narrow, seg_narrow_entry, seg_parts, seg_slots, seg_sm_shared, seg_unit_slots,
        seg_units_entry, split_sum_config, units_one_per_unit, wgmma_config, wgmma_entry, wgmma_fits,
        wgmma_shared_bytes, wgmma_takes, wgmmq_config, wgmmq_entry, wgmmq_fits, wgmmq_shared_bytes,
        wgmmq_tensor_offsets, wmma_entry, wmma_native_layout, MmSplit, AMD_BLOCK_LDS, GEMM_FAMILY, GEMV_FAMILY,
        GEMV_FLOAT_ROWS, GEMV_FUSED_ACT_BYTES, MMA_COPY_VALUES, QUANTIZE_VALUES, WGMMQ_MAX_ROW_BYTES, WMMA_FAMILY,
    };
    use super::*;
    use crate::gpu::api::DevicePtr;
    use crate::gpu::registry::accepting;
    use tandem_graph::{Graph, GraphBuilder, TensorId};

    /// Every weight type the CPU matmul takes, which the GPU registrations cover too.
    const TYPES: [ElemType; 14] = tandem_ops::vecdot::WEIGHT_TYPES;

    fn k_for(ty: ElemType) -> i64 {
        if ty.block_size() == 256 {
            512
        } else {
            96
        }
    }

    /// The f32 GEMM splits k where its tiles leave most units idle (a router's 128 rows), in
    /// parts of whole 32-value steps that cover k; never across batches or on large grids.
    #[test]
    fn small_f32_gemms_split_k() {
        let shape = |m: i64, k: i64, n: i64, ne12: i64| MulMatShape {
            m,
            k,
            n,
            ne12,
            ne13: 1,
            ..MulMatShape::default()
        };
        assert_eq!(gemm_k_parts(&shape(128, 2048, 512, 1), 132), (8, 256));
        let (parts, chunk) = gemm_k_parts(&shape(128, 1100, 100, 1), 132);
        assert!(parts > 1 && chunk % 32 == 0 && (parts - 1) * chunk < 1100 && parts * chunk >= 1100);
        assert_eq!(gemm_k_parts(&shape(128, 2048, 512, 2), 132), (1, 2048));
        assert_eq!(gemm_k_parts(&shape(4096, 4096, 512, 1), 132), (1, 4096));
        assert_eq!(gemm_k_parts(&shape(128, 256, 512, 1), 132), (1, 256));
    }

    fn chosen(g: &Graph, id: TensorId) -> Vec<&'static str> {
        accepting(REGISTRATIONS, g, id)
    }

    fn mul_mat(ty: ElemType, k: i64, m: i64, n: i64, batch: [i64; 2], bcast: [i64; 2]) -> (Graph, TensorId) {
        let mut b = GraphBuilder::new();
        let w = b.new_tensor(ty, &[k, m, batch[0], batch[1]]);
        let x = b.new_tensor(ElemType::F32, &[k, n, batch[0] * bcast[0], batch[1] * bcast[1]]);
        let d = b.mul_mat(w, x).unwrap();
        (b.build(), d)
    }

    /// An FFN on one column: gate, up, the gate's GLU, down (types, ops and widths as given).
    fn ffn(ty: ElemType, up_ty: ElemType, k: i64, ffn: i64, n: i64, op: GluOp) -> (Graph, [TensorId; 4]) {
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[k, n]);
        let wg = b.new_tensor(ty, &[k, ffn]);
        let wu = b.new_tensor(up_ty, &[k, ffn]);
        let wd = b.new_tensor(ty, &[ffn, 64]);
        let gate = b.mul_mat(wg, x).unwrap();
        let up = b.mul_mat(wu, x).unwrap();
        let h = b.glu_split(gate, up, op).unwrap();
        let down = b.mul_mat(wd, h).unwrap();
        (b.build(), [gate, up, h, down])
    }

    #[test]
    fn sibling_gemvs_pair_and_the_gate_fuses_into_the_down_gemv() {
        let (g, [gate, up, h, down]) = ffn(ElemType::Q4_0, ElemType::Q4_0, 256, 512, 1, GluOp::Swiglu);
        let n = |id| Node::of(&g, id);
        assert!(accepts_gemv_pair(&n(gate), Some(&n(up))));
        assert!(accepts_glu_gemv(&n(h), Some(&n(down))));
        // The down GEMV does not pair with the gate (another column), nor the gate with the GLU.
        assert!(!accepts_gemv_pair(&n(gate), Some(&n(down))));
        assert!(!accepts_glu_gemv(&n(h), Some(&n(up))));
        // Weights of two types, or types without a segment walk, stay apart; so do two columns.
        let (g2, [gate2, up2, h2, down2]) = ffn(ElemType::Q4_0, ElemType::Q8_0, 256, 512, 1, GluOp::Swiglu);
        assert!(!accepts_gemv_pair(&Node::of(&g2, gate2), Some(&Node::of(&g2, up2))));
        assert!(accepts_glu_gemv(&Node::of(&g2, h2), Some(&Node::of(&g2, down2))));
        let (g3, [gate3, up3, h3, down3]) = ffn(ElemType::Q5_0, ElemType::Q5_0, 256, 512, 1, GluOp::Geglu);
        assert!(!accepts_gemv_pair(&Node::of(&g3, gate3), Some(&Node::of(&g3, up3))));
        assert!(!accepts_glu_gemv(&Node::of(&g3, h3), Some(&Node::of(&g3, down3))));
        let (g4, [gate4, up4, h4, down4]) = ffn(ElemType::Q4_0, ElemType::Q4_0, 256, 512, 2, GluOp::Swiglu);
        assert!(!accepts_gemv_pair(&Node::of(&g4, gate4), Some(&Node::of(&g4, up4))));
        assert!(!accepts_glu_gemv(&Node::of(&g4, h4), Some(&Node::of(&g4, down4))));
    }

    #[test]
    fn each_type_has_exactly_one_kernel_per_column_count() {
        for ty in TYPES {
            let k = k_for(ty);
            for n in [1, 3, 8] {
                let (g, d) = mul_mat(ty, k, 67, n, [1, 1], [1, 1]);
                assert_eq!(chosen(&g, d), vec![format!("hip.gemv_{}", ty.name())], "{ty} n={n}");
            }
            for n in [9, 16, 300] {
                let (g, d) = mul_mat(ty, k, 67, n, [2, 1], [1, 3]);
                assert_eq!(chosen(&g, d), vec![format!("hip.mul_mat_{}", ty.name())], "{ty} n={n}");
            }
            let (g, d) = mul_mat(ty, k, 33, 4, [2, 2], [3, 2]);
            assert_eq!(chosen(&g, d).len(), 1, "{ty} broadcast");
        }
    }

    #[test]
    fn declines_what_the_kernels_do_not_do() {
        // f16 activations.
        let mut b = GraphBuilder::new();
        let w = b.new_tensor(ElemType::Q4_0, &[64, 8]);
        let x = b.new_tensor(ElemType::F16, &[64, 2]);
        let d = b.mul_mat(w, x).unwrap();
        let g = b.build();
        assert!(chosen(&g, d).is_empty());
        // A MUL_MAT hint.
        let (mut g, d) = mul_mat(ElemType::Q8_0, 64, 8, 1, [1, 1], [1, 1]);
        g.tensor_mut(d).set_param_i32(1, 1);
        assert!(chosen(&g, d).is_empty());
        // Too many batches for grid.y.
        let (g, d) = mul_mat(ElemType::F16, 16, 4, 1, [70_000, 1], [1, 1]);
        assert!(chosen(&g, d).is_empty());
        // Empty output.
        let (g, d) = mul_mat(ElemType::Q4K, 256, 0, 1, [1, 1], [1, 1]);
        assert!(chosen(&g, d).is_empty());
        // A type without a kernel (q8_1 is activation-only).
        let (g, d) = mul_mat(ElemType::Q8_1, 64, 4, 1, [1, 1], [1, 1]);
        assert!(chosen(&g, d).is_empty());
    }

    #[test]
    fn permuted_and_transposed_activations() {
        for ty in [ElemType::Q4_0, ElemType::F16, ElemType::Q6K] {
            let k = k_for(ty);
            // Rows stay contiguous: every kernel reads it.
            let mut b = GraphBuilder::new();
            let w = b.new_tensor(ty, &[k, 19, 3]);
            let x0 = b.new_tensor(ElemType::F32, &[k, 3, 5]);
            let x = b.permute(x0, [0, 2, 1, 3]).unwrap();
            let d = b.mul_mat(w, x).unwrap();
            let g = b.build();
            assert_eq!(chosen(&g, d), vec![format!("hip.gemv_{}", ty.name())]);
            // Elements of a row strided: only the q8_1 quantizer reads that.
            let mut b = GraphBuilder::new();
            let w = b.new_tensor(ty, &[k, 19]);
            let x0 = b.new_tensor(ElemType::F32, &[2, k]);
            let x = b.permute(x0, [1, 0, 2, 3]).unwrap();
            let d = b.mul_mat(w, x).unwrap();
            let g = b.build();
            let want: Vec<String> = if ty.is_quantized() {
                vec![format!("hip.gemv_{}", ty.name())]
            } else {
                vec![]
            };
            assert_eq!(chosen(&g, d), want, "{ty}");
        }
    }

    #[test]
    fn mul_mat_id_accepts_each_type() {
        for ty in TYPES {
            let k = k_for(ty);
            let mut b = GraphBuilder::new();
            let w = b.new_tensor(ty, &[k, 33, 8]);
            let x = b.new_tensor(ElemType::F32, &[k, 2, 5]);
            let ids = b.new_tensor(ElemType::I32, &[4, 5]);
            let d = b.mul_mat_id(w, x, ids).unwrap();
            let g = b.build();
            assert_eq!(chosen(&g, d), vec![format!("hip.mul_mat_id_{}", ty.name())]);
            let s = MulMatIdShape::new(g.tensor(d), g.tensor(w), g.tensor(x), g.tensor(ids));
            assert_eq!((s.n_used, s.n_tokens, s.n_b, s.slots()), (4, 5, 2, 20));
            assert_eq!(s.nb2 as usize, g.tensor(d).nb[2]);
        }
    }

    #[test]
    fn shapes_geometry_and_entries() {
        let (g, d) = mul_mat(ElemType::Q4_0, 4096, 1024, 3, [2, 1], [2, 1]);
        let (dst, srcs) = (g.tensor(d), g.srcs(d));
        let s = MulMatShape::new(dst, srcs[0].unwrap(), srcs[1].unwrap()).unwrap();
        assert_eq!((s.k, s.m, s.n, s.ne12, s.ne13, s.r2, s.r3), (4096, 1024, 3, 4, 1, 2, 1));
        assert_eq!((s.nb01, s.nb10, s.nb11), (2304, 4, 16384));
        assert_eq!((s.nb1, s.nb2), (4096, 4096 * 3));
        let c = gemv_config(ElemType::Q4_0, s.m, s.batches(), 4, 0);
        assert_eq!((c.grid, c.block), ([256, 4, 1], [256, 1, 1]));
        // Every row is covered, the last block partly; float weights take 128-thread blocks.
        assert_eq!(gemv_config(ElemType::Q4_0, 1025, 1, 4, 0).grid, [257, 1, 1]);
        assert_eq!(gemv_config(ElemType::Q4_0, 3, 7, 4, 0).grid, [1, 7, 1]);
        let f = gemv_config(ElemType::F16, 1025, 2, 1, 0);
        assert_eq!((f.grid, f.block), ([1025, 2, 1], [128, 1, 1]));
        // One-column float GEMVs take GEMV_FLOAT_ROWS rows per block.
        let f = gemv_config(ElemType::F16, 1025, 2, GEMV_FLOAT_ROWS, 0);
        assert_eq!(f.grid, [513, 2, 1]);
        // Eight 32-lane waves (four 64-lane ones); one row per wave until the grid holds two
        // blocks per SM.
        assert_eq!((gemv_waves(32), gemv_waves(64), gemv_waves(0)), (8, 4, 256));
        assert_eq!(rows_per_wave(1024, 8, 132), 1);
        assert_eq!(rows_per_wave(2112, 8, 132), 1);
        assert_eq!(rows_per_wave(2113, 8, 132), 2);
        assert_eq!(rows_per_wave(14336, 8, 132), 7);
        assert_eq!(rows_per_wave(0, 0, 0), 1);
        // Shared memory: a 2048-weight chunk per wave (two where several columns of a 32-value
        // block type walk rows in pairs), plus the fused q8_1 columns.
        assert_eq!((gemv_stages(ElemType::Q4_0, 1), gemv_stages(ElemType::Q4_0, 2)), (1, 2));
        assert_eq!((gemv_stages(ElemType::IQ4NL, 8), gemv_stages(ElemType::Q6K, 8)), (2, 1));
        assert_eq!(gemv_shared_bytes(ElemType::Q4_0, 8, 1, None), 8 * 1152 + 16);
        assert_eq!(
            gemv_shared_bytes(ElemType::Q8_0, 8, 1, Some(gemv_act_bytes(4096, 1))),
            8 * 2176 + 4096 + 1024 + 16
        );
        assert_eq!(
            gemv_shared_bytes(ElemType::Q8_0, 8, 2, Some(gemv_act_bytes(1024, 2))),
            8 * 2 * 2176 + 2048 + 512 + 16
        );
        assert_eq!(gemv_shared_bytes(ElemType::F16, 8, 2, None), 0);
        assert!(gemv_fuses_quantize(8192, 1) && gemv_fuses_quantize(1024, 8) && gemv_fuses_quantize(4096, 2));
        assert!(!gemv_fuses_quantize(14336, 1) && !gemv_fuses_quantize(4096, 8));
        // The largest fused block stays within 48 KiB on every wave size.
        for ty in TYPES {
            assert!(
                gemv_shared_bytes(ty, 8, 2, Some(GEMV_FUSED_ACT_BYTES)) <= 48 * 1024,
                "{ty}"
            );
        }
        // The segment GEMV: q4_0, iq4_nl, q4_K; one column, k a multiple of 256, contiguous rows,
        // 16-byte-aligned bases; in stretches (iq4_nl) rows enough to give each of the 132 x 8
        // waves (32 lanes) a step, in units (q4_0, q4_K) any number of rows.
        let one = |ty: ElemType, m: i64, k: i64| MulMatShape {
            n: 1,
            m,
            k,
            nb01: ty.row_size(k).map_or(0, |r| r as i64),
            nb02: ty.row_size(k).map_or(0, |r| r as i64 * m),
            ne12: 1,
            ..s
        };
        let fits = |ty, s: &MulMatShape| gemv_seg_fits(ty, DevicePtr(0x1000), s, 8, 32, 132, "sm_90");
        for ty in [ElemType::Q4_0, ElemType::IQ4NL, ElemType::Q4K] {
            let name = seg_entry(ty).unwrap();
            let gemv_src = tandem_kernels_hip::find(GEMV_FAMILY).unwrap();
            assert!(gemv_src.entries.contains(&name) && name.contains(ty.name()) && seg_bytes(ty) == Some(144));
            assert!(
                fits(ty, &one(ty, 14336, 4096)) && fits(ty, &one(ty, 4096, 14336)),
                "{ty}"
            );
            // 2112 rows of 16 segments fill the 1056 waves' steps; 2111 do not, which leaves
            // them out of stretches but not out of units.
            assert!(fits(ty, &one(ty, 2112, 4096)), "{ty}");
            assert_eq!(fits(ty, &one(ty, 2111, 4096)), ty != ElemType::IQ4NL, "{ty}");
            assert_eq!(fits(ty, &one(ty, 1, 256)), ty != ElemType::IQ4NL, "{ty}");
            assert!(!fits(
                ty,
                &MulMatShape {
                    n: 2,
                    ..one(ty, 14336, 4096)
                }
            ));
            assert!(!fits(ty, &one(ty, 14336, 4096 + 128)) && !fits(ty, &one(ty, 1024, 32768 + 256)));
            // Shared memory: rows of more than 32 segments run in stretches, one slot of eight
            // waves (36 KiB) beside the q8_1 column, which fit sm_90 and sm_86 up to k = 32768;
            // one slot of four 64-lane waves (36 KiB) fits AMD's 64 KiB up to k = 22784.
            let wide = one(ty, 14336, 32768);
            assert!(fits(ty, &wide));
            assert!(gemv_seg_fits(ty, DevicePtr(0x1000), &wide, 8, 32, 132, "sm_86"));
            let amd = |s: &MulMatShape| gemv_seg_fits(ty, DevicePtr(0x1000), s, 4, 64, 96, "gfx1100");
            assert!(amd(&one(ty, 14336, 22784)) && !amd(&one(ty, 14336, 23040)));
            let padded = one(ty, 14336, 4096);
            assert!(!fits(
                ty,
                &MulMatShape {
                    nb01: padded.nb01 + 16,
                    ..padded
                }
            ));
            assert!(!fits(
                ty,
                &MulMatShape {
                    nb02: padded.nb02 + 2,
                    ..padded
                }
            ));
            assert!(!gemv_seg_fits(ty, DevicePtr(0x1002), &padded, 8, 32, 132, "sm_90"));
        }
        for ty in TYPES
            .into_iter()
            .filter(|t| !matches!(t, ElemType::Q4_0 | ElemType::IQ4NL | ElemType::Q4K))
        {
            assert!(seg_entry(ty).is_none(), "{ty}");
            assert_eq!(
                seg_bytes(ty).is_some(),
                matches!(ty, ElemType::Q8_0 | ElemType::Q6K),
                "{ty}"
            );
        }
        // q8_0: segments of four blocks, in units only (no stretches): rows of 2 .. 32 segments
        // (k = 256 .. 4096) on NVIDIA sm_80+; wider rows, or devices without cp.async, stay on
        // the row walk.
        let q8 = ElemType::Q8_0;
        assert_eq!(seg_bytes(q8), Some(136));
        assert!(fits(q8, &one(q8, 14336, 4096)) && fits(q8, &one(q8, 16896, 256)));
        assert!(!fits(q8, &one(q8, 4096, 14336)) && !fits(q8, &one(q8, 14336, 8192)));
        assert!(!fits(q8, &one(q8, 14336, 4096 + 128)));
        assert!(!gemv_seg_fits(
            q8,
            DevicePtr(0x1000),
            &one(q8, 14336, 4096),
            8,
            32,
            132,
            "sm_75"
        ));
        assert!(!gemv_seg_fits(
            q8,
            DevicePtr(0x1000),
            &one(q8, 14336, 4096),
            4,
            64,
            96,
            "gfx1100"
        ));
        // In units any number of rows.
        assert!(fits(q8, &one(q8, 1056, 4096)) && fits(q8, &one(q8, 1055, 4096)) && fits(q8, &one(q8, 1, 4096)));
        assert!(!gemv_seg_fits(
            q8,
            DevicePtr(0x1008),
            &one(q8, 14336, 4096),
            8,
            32,
            132,
            "sm_90"
        ));
        // q6_K: one superblock a lane, in units only, rows of whole 16-byte units (8, 16 or 32
        // segments): k = 2048, 4096 (8192's q8_1 column leaves two blocks over an SM's 228
        // KiB); two slots of 8 waves x 32 x 210 bytes, the q8_1 column and its halves' sums.
        let q6 = ElemType::Q6K;
        assert_eq!(seg_bytes(q6), Some(210));
        assert!(fits(q6, &one(q6, 14336, 4096)) && fits(q6, &one(q6, 4224, 2048)));
        assert!(!fits(q6, &one(q6, 14336, 1024)) && !fits(q6, &one(q6, 14336, 8192)));
        assert!(!fits(q6, &one(q6, 4096, 14336)) && !fits(q6, &one(q6, 14336, 3072)));
        assert!(seg_in_units(q6, 4096, 32, "sm_90") && !seg_in_units(q6, 4096, 32, "sm_80"));
        let c = gemv_seg_config(q6, &one(q6, 14336, 4096), 8, 32, 132, true, true);
        assert_eq!(
            (c.grid, c.shared_bytes),
            ([264, 1, 1], 8 * 2 * 32 * 210 + 4096 + 1024 + 4096 / 16 * 4)
        );
        assert!(seg_parts(q6) && !seg_parts(q8) && !seg_parts(ElemType::Q4_0));
        // Three slots a wave.
        let c = gemv_seg_config(q8, &one(q8, 14336, 4096), 8, 32, 132, true, true);
        assert_eq!((c.grid, c.shared_bytes), ([264, 1, 1], 8 * 3 * 32 * 136 + 4096 + 1024));
        assert_eq!((seg_unit_slots(q8), seg_unit_slots(ElemType::Q4_0)), (3, 2));
        assert_eq!(
            (seg_sm_shared("sm_90"), seg_sm_shared("sm_80"), seg_sm_shared("sm_86")),
            (228 * 1024, 164 * 1024, 100 * 1024)
        );
        // Two slots where cp.async is (NVIDIA sm_80+), else one; units there for rows whose
        // segments divide a wave.
        assert_eq!(
            (
                seg_slots("sm_90"),
                seg_slots("sm_86"),
                seg_slots("sm_75"),
                seg_slots("gfx1100")
            ),
            (2, 2, 1, 1)
        );
        for ty in [ElemType::Q4_0, ElemType::Q4K, ElemType::Q8_0, ElemType::Q6K] {
            let name = seg_units_entry(ty).unwrap();
            assert!(tandem_kernels_hip::find(GEMV_FAMILY).unwrap().entries.contains(&name) && name.ends_with("_u1"));
            assert!(seg_in_units(ty, 2048, 32, "sm_90") && seg_in_units(ty, 4096, 32, "sm_90"));
            // q4_0, q4_K, q6_K: 33, 18 and 12 segments a row; q8_0: 66, 36 and 24 (and 64 at
            // 8192): not a divisor of 32. q6_K at 8192: two blocks over an SM.
            assert!(!seg_in_units(ty, 8448, 32, "sm_90") && !seg_in_units(ty, 4608, 32, "sm_90"));
            assert!(!seg_in_units(ty, 3072, 32, "sm_90"));
            let q4 = matches!(ty, ElemType::Q4_0 | ElemType::Q4K);
            assert_eq!(seg_in_units(ty, 8192, 32, "sm_90"), q4);
            assert!(!seg_in_units(ty, 4096, 64, "gfx942"));
            // Two blocks must fit an SM: 2 x (74 KiB + 1 KiB) q4_0 / q4_K, 2 x (108 + 1) q8_0
            // (three slots), 2 x (110 + 1) q6_K, against sm_90's 228 KiB, sm_80's 164 and
            // sm_86's 100.
            assert_eq!(seg_in_units(ty, 4096, 32, "sm_80"), q4);
            assert!(!seg_in_units(ty, 256, 32, "sm_86") && !seg_in_units(ty, 256, 32, "sm_89"));
            assert!(!seg_in_units(ty, 4096, 32, "sm_75"));
        }
        for ty in [ElemType::Q5K, ElemType::IQ4NL] {
            assert!(
                seg_units_entry(ty).is_none() && !seg_in_units(ty, 4096, 32, "sm_90"),
                "{ty}"
            );
        }
        // In units: two blocks per SM (fewer where the units, two rows of 16 segments at
        // k = 4096, leave a block's eight waves without one), a grid row per batch; shared
        // memory: eight waves' two stages of 32 segments, then the q8_1 column.
        let c = gemv_seg_config(
            ElemType::Q4_0,
            &one(ElemType::Q4_0, 14336, 4096),
            8,
            32,
            132,
            true,
            true,
        );
        assert_eq!(
            (c.grid, c.block, c.shared_bytes),
            ([264, 1, 1], [256, 1, 1], 8 * 2 * 32 * 144 + 4096 + 1024)
        );
        // Units that two steps per wave cover over at most one block per SM (up to 4224 rows:
        // 2112 units of two rows for 132 x 8 waves) take as few blocks as give every wave two
        // steps (1024 rows: 512 units, 32 blocks; 2048 rows: 64; 2112 rows: 1056 units, 66;
        // 2114 rows: 1057 units, 67, the last wave one step; 3072 rows: 96), so the next
        // kernel's blocks fit beside them; more take two blocks per SM.
        let blocks =
            |m: i64| gemv_seg_config(ElemType::Q4_0, &one(ElemType::Q4_0, m, 4096), 8, 32, 132, true, true).grid[0];
        assert_eq!(
            [
                blocks(2112),
                blocks(2114),
                blocks(3072),
                blocks(4224),
                blocks(1024),
                blocks(2048),
                blocks(4226)
            ],
            [66, 67, 96, 132, 32, 64, 264]
        );
        assert_eq!(
            (units_one_per_unit(2112, 8, 132), units_one_per_unit(2113, 8, 132)),
            (Some(132), None)
        );
        assert_eq!(
            (units_one_per_unit(1056, 8, 132), units_one_per_unit(1057, 8, 132)),
            (Some(66), Some(67))
        );
        assert_eq!(units_one_per_unit(5, 8, 132), Some(1));
        assert_eq!(units_one_per_unit(17, 8, 132), Some(2));
        // Batches keep the walk of two blocks per SM.
        assert_eq!(
            gemv_seg_config(
                ElemType::Q4_0,
                &MulMatShape {
                    ne12: 2,
                    ..one(ElemType::Q4_0, 1024, 4096)
                },
                8,
                32,
                132,
                true,
                true
            )
            .grid,
            [64, 2, 1]
        );
        // Without the overlap (the column read after the wait, or no dependent launch), two
        // blocks per SM as before: 1024 rows take 64 blocks (a unit per wave), 4224 rows 264.
        let plain =
            |m: i64| gemv_seg_config(ElemType::Q4_0, &one(ElemType::Q4_0, m, 4096), 8, 32, 132, true, false).grid[0];
        assert_eq!((plain(1024), plain(4224), plain(14336)), (64, 264, 264));
        // At most one step a wave: the one-slot walk (`_n1`), half the stage memory. One-batch
        // grids that overlap give their waves two steps (q4_0 x 4096: 1024 and 2048 rows, 512
        // and 1024 units over 32 and 64 blocks of 8 waves; 3072, 1536 units over 132 blocks),
        // except the smallest (16 rows, 8 units: one block); never without the overlap.
        let narrow = |m: i64, overlapped: bool| {
            let s = one(ElemType::Q4_0, m, 4096);
            let n = seg_narrow(ElemType::Q4_0, &s, 8, 32, 132, true, overlapped);
            (
                n,
                gemv_seg_config(ElemType::Q4_0, &s, 8, 32, 132, true, overlapped).shared_bytes,
            )
        };
        let one_slot = 8 * 32 * 144 + 4096 + 1024;
        let two_slots = 8 * 2 * 32 * 144 + 4096 + 1024;
        assert_eq!(
            [
                narrow(16, true),
                narrow(1024, true),
                narrow(2048, true),
                narrow(3072, true),
                narrow(14336, true)
            ],
            [
                (true, one_slot),
                (false, two_slots),
                (false, two_slots),
                (false, two_slots),
                (false, two_slots)
            ]
        );
        assert_eq!(
            [narrow(1024, false), narrow(4226, false)],
            [(false, two_slots), (false, two_slots)]
        );
        // Not in stretches, nor for a type without units (iq4_nl).
        for (ty, in_units) in [(ElemType::Q4_0, false), (ElemType::IQ4NL, true)] {
            assert!(
                !seg_narrow(ty, &one(ty, 1024, 4096), 8, 32, 132, in_units, true),
                "{ty:?}"
            );
        }
        for ty in [ElemType::Q4_0, ElemType::Q4K, ElemType::Q8_0, ElemType::Q6K] {
            let name = seg_narrow_entry(ty).unwrap();
            assert!(tandem_kernels_hip::find(GEMV_FAMILY).unwrap().entries.contains(&name) && name.ends_with("_n1"));
        }
        // k = 256: units of 32 rows; 20 rows are one unit, one block.
        assert_eq!(
            gemv_seg_config(ElemType::Q4_0, &one(ElemType::Q4_0, 20, 256), 8, 32, 132, true, true).grid[0],
            1
        );
        // In stretches: one block per SM (fewer where there are fewer than 8 rows a block), one
        // stage per wave.
        let c = gemv_seg_config(ElemType::Q4K, &one(ElemType::Q4K, 4096, 14336), 8, 32, 132, false, true);
        assert_eq!(
            (c.grid, c.shared_bytes),
            ([132, 1, 1], 8 * 32 * 144 + 14336 + 14336 / 32 * 8)
        );
        let c = gemv_seg_config(
            ElemType::Q4K,
            &MulMatShape {
                ne12: 3,
                ..one(ElemType::Q4K, 100, 256)
            },
            4,
            64,
            4,
            false,
            true,
        );
        assert_eq!((c.grid, c.shared_bytes), ([4, 3, 1], 4 * 64 * 144 + 256 + 64));
        assert_eq!(
            gemv_seg_config(ElemType::Q4_0, &one(ElemType::Q4_0, 20, 256), 8, 32, 132, false, true).grid[0],
            3
        );
        let q = Q8Shape::of(srcs[1].unwrap());
        assert_eq!(q.columns(), 12);
        // Four values per thread: 4096 values of a column in four blocks of 256 threads.
        assert_eq!(quantize_config(&q).grid, [4, 12, 1]);
        // q8_1 copy: 12 columns of 4096 values, then 128 pairs of f32 per column.
        assert_eq!(q8_1_layout(12, 4096), Some((12 * 4096, 12 * 4096 + 12 * 128 * 8)));
        assert_eq!(q8_1_layout(1, 48), None);
        assert_eq!(q8_1_layout(i64::MAX, 4096), None);
        let gs = MulMatShape {
            n: 300,
            m: 67,
            ne12: 3,
            ne13: 2,
            ..s
        };
        let c = gemm_config(&gs);
        assert_eq!((c.grid, c.block), ([5, 2, 6], [256, 1, 1]));
        let gemv_src = tandem_kernels_hip::find(GEMV_FAMILY).unwrap();
        let gemm_src = tandem_kernels_hip::find(GEMM_FAMILY).unwrap();
        assert!(gemv_src.entries.contains(&"tandem_quantize_q8_1"));
        for ty in TYPES {
            let e = entries(ty).unwrap();
            assert!(e[..3].iter().all(|n| gemv_src.entries.contains(n)), "{ty}");
            assert!(gemm_src.entries.contains(&e[3]), "{ty}");
            assert!(e.iter().all(|n| n.contains(ty.name())));
        }
        assert!(entries(ElemType::Q8K).is_none());
        // Tensor-core GEMM: sm_80 and newer, f16 and every quantized type.
        assert!(has_mma("sm_80") && has_mma("sm_90") && has_mma("sm_90a") && has_mma("sm_120"));
        assert!(!has_mma("sm_75") && !has_mma("gfx1100") && !has_mma("") && !has_mma("sm_x"));
        let mma_src = tandem_kernels_hip::find("mma").unwrap();
        for ty in TYPES {
            let want = ty != ElemType::F32;
            assert_eq!(mma_entry(ty).is_some(), want, "{ty}");
            assert_eq!(mmid_mma_entry(ty).is_some(), want && !half_weights(ty), "{ty}");
            for e in [mma_entry(ty), mmid_mma_entry(ty)].into_iter().flatten() {
                assert!(mma_src.entries.contains(&e), "{e}");
            }
        }
        // AMD WMMA tiles: f16 and every quantized type, in the "wmma" build of mma.hip.
        let wmma_src = tandem_kernels_hip::find(WMMA_FAMILY).unwrap();
        assert_eq!(
            (wmma_src.file, wmma_src.options),
            ("mma.hip", &["-DTANDEM_WMMA_ENTRIES"][..])
        );
        assert!(wmma_src.entries.contains(&"tandem_wmma_route") && wmma_src.entries.contains(&"tandem_wmma_f16_copy"));
        for ty in TYPES {
            assert_eq!(
                wmma_entry(ty).is_some(),
                ty.is_quantized() || ty == ElemType::F16,
                "{ty}"
            );
            assert_eq!(mmid_wmma_entry(ty).is_some(), ty.is_quantized(), "{ty}");
            for e in [wmma_entry(ty), mmid_wmma_entry(ty)].into_iter().flatten() {
                assert!(wmma_src.entries.contains(&e) && e.ends_with(ty.name()), "{e}");
            }
        }
        for (arch, layout) in [
            ("gfx1100", Some(11)),
            ("gfx1103", Some(11)),
            ("gfx1151", Some(11)),
            ("gfx1100:xnack-", Some(11)),
            ("gfx1201", Some(12)),
            ("gfx1030", None),
            ("gfx908", Some(9)),
            ("gfx90a", Some(9)),
            ("gfx90a:sramecc+:xnack-", Some(9)),
            ("gfx942", Some(9)),
            ("gfx950", Some(9)),
            ("gfx900", None),
            ("gfx906", None),
            ("sm_90a", None),
            ("gfx", None),
        ] {
            assert_eq!(wmma_native_layout(arch), layout, "{arch}");
        }
        // The integer tiles' shared memory against AMD's 64 KiB per workgroup: every type but
        // q6_K (72 KiB) fits, so q6_K prefill stays on the portable GEMM on AMD devices.
        for ty in TYPES.into_iter().filter(|t| t.is_quantized()) {
            assert_eq!(
                mmq_shared_bytes(ty) <= AMD_BLOCK_LDS,
                ty != ElemType::Q6K,
                "{ty}: {}",
                mmq_shared_bytes(ty)
            );
        }
    }

    #[test]
    fn split_of_the_last_wave() {
        let shape = |m: i64, k: i64, n: i64, batches: i64| MulMatShape {
            k,
            m,
            n,
            ne12: batches,
            ne13: 1,
            ..MulMatShape::default()
        };
        let parts = |s: &MmSplit| (s.tiles, s.whole, s.parts, s.blocks());
        // Whole waves (4 x 33 tiles on 132 SMs) and a last wave more than half full (92 of 132)
        // run as they are.
        let s = MmSplit::new(&shape(4224, 4096, 512, 1), (128, 128), 32, 132);
        assert_eq!(parts(&s), (132, 132, 1, 132));
        let s = MmSplit::new(&shape(14336, 4096, 512, 1), (128, 256), 32, 132);
        assert_eq!(parts(&s), (224, 224, 1, 224));
        assert_eq!(s.partial_bytes(128 * 128), 0);
        // A grid under one wave (k and v projections, 1024 rows): four parts of 8 steps each.
        let s = MmSplit::new(&shape(1024, 4096, 512, 1), (128, 128), 32, 132);
        assert_eq!(parts(&s), (32, 0, 4, 128));
        assert_eq!(s.partial_bytes(128 * 128), 3 * 32 * 65_536);
        // No part shorter than SPLIT_MIN_STEPS steps: k = 1024 (8 steps) splits in two, k = 512
        // not at all.
        let s = MmSplit::new(&shape(1024, 1024, 512, 1), (128, 128), 8, 132);
        assert_eq!(parts(&s), (32, 0, 2, 64));
        let s = MmSplit::new(&shape(1024, 512, 512, 1), (128, 128), 4, 132);
        assert_eq!(parts(&s), (32, 32, 1, 32));
        // Batches count as tiles (2 x 3 x 5 = 30 on 132: four parts); a partial column tile too.
        let s = MmSplit::new(&shape(300, 4096, 200, 5), (128, 128), 32, 132);
        assert_eq!((s.tiles_x, s.tiles_y), (2, 3));
        assert_eq!(parts(&s), (30, 0, 4, 120));
        // No device units reported: one block at a time, nothing split.
        let s = MmSplit::new(&shape(1024, 4096, 512, 1), (128, 128), 32, 0);
        assert_eq!(parts(&s), (32, 32, 1, 32));
    }

    /// MUL_MAT_ID in units: the types and rows the one-column GEMV takes in units, experts whose
    /// rows are back to back from 16-byte-aligned bases, up to eight tokens; two blocks per SM
    /// over all slots, no more than give each wave a unit.
    #[test]
    fn mul_mat_id_in_units() {
        use super::super::matmul_launch::{mmid_in_units, mmid_units_config, mmid_units_entry};
        let shape = |ty: ElemType, m: i64, k: i64, n_expert: i64, n_used: i64, n_tokens: i64| {
            let nb01 = ty.row_size(k).unwrap() as i64;
            MulMatIdShape {
                k,
                m,
                n_expert,
                n_used,
                n_tokens,
                n_b: 1,
                nb01,
                nb02: nb01 * m,
                nb11: 4 * k,
                nb12: 4 * k,
                ids_nb0: 4,
                ids_nb1: 4 * n_used,
                nb1: 4 * m,
                nb2: 4 * m * n_used,
                nb10: 4,
                flags: 0,
            }
        };
        let base = DevicePtr(1 << 20);
        for ty in [ElemType::Q4_0, ElemType::Q4K, ElemType::Q8_0, ElemType::Q6K] {
            let name = mmid_units_entry(ty).unwrap();
            assert!(tandem_kernels_hip::find(GEMV_FAMILY).unwrap().entries.contains(&name));
            let s = shape(ty, 768, 2048, 128, 8, 1);
            let on_sm90 = |at: DevicePtr, s: MulMatIdShape| mmid_in_units(ty, at, &s, 32, "sm_90");
            assert!(on_sm90(base, s), "{ty}");
            // Not on devices without cp.async, not past eight tokens, not for rows the GEMV
            // keeps out of units (q4_0 at 3072: 12 segments), not with a padded row or an
            // expert base off 16 bytes.
            assert!(!mmid_in_units(ty, base, &s, 32, "sm_75") && !mmid_in_units(ty, base, &s, 64, "gfx942"));
            assert!(!on_sm90(base, shape(ty, 768, 2048, 128, 8, 9)));
            assert!(!on_sm90(base, shape(ty, 768, 3072, 128, 8, 1)));
            assert!(!on_sm90(base, MulMatIdShape { nb01: s.nb01 + 16, ..s }));
            assert!(!on_sm90(base, MulMatIdShape { nb02: s.nb02 + 8, ..s }));
            assert!(!on_sm90(DevicePtr(base.0 + 8), s));
        }
        for ty in [ElemType::IQ4NL, ElemType::Q5K, ElemType::F16] {
            assert!(
                mmid_units_entry(ty).is_none()
                    && !mmid_in_units(ty, base, &shape(ty, 768, 2048, 128, 8, 1), 32, "sm_90")
            );
        }
        // 128 experts top-8, 768 x 2048 q4_0: units of four rows (eight segments a row), 192 a
        // slot, 1536 in all, which two steps per wave cover with one block per SM: 16 a slot.
        let s = shape(ElemType::Q4_0, 768, 2048, 128, 8, 1);
        let c = mmid_units_config(ElemType::Q4_0, &s, 8, 32, 132, true);
        assert_eq!(
            (c.grid, c.block, c.shared_bytes),
            ([16, 8, 1], [256, 1, 1], 8 * 2 * 32 * 144 + 2048 + 512)
        );
        // Without the overlap about two blocks per SM: 33 a slot, but 24 blocks of eight waves
        // give each unit a wave.
        assert_eq!(
            mmid_units_config(ElemType::Q4_0, &s, 8, 32, 132, false).grid,
            [24, 8, 1]
        );
        let grid = |ty: ElemType, s: MulMatIdShape| mmid_units_config(ty, &s, 8, 32, 132, true).grid;
        // Two tokens (3072 units) take more steps: about two blocks per SM, 17 a slot (24
        // blocks of eight waves would give each unit a wave).
        assert_eq!(
            grid(ElemType::Q4_0, shape(ElemType::Q4_0, 768, 2048, 128, 8, 2)),
            [17, 16, 1]
        );
        // One token of 4 experts, 2048 x 4096 q4_K: 1024 units a slot, 66 blocks a slot.
        assert_eq!(
            grid(ElemType::Q4K, shape(ElemType::Q4K, 2048, 4096, 32, 4, 1)),
            [66, 4, 1]
        );
        // Few rows: a unit per wave at most (33 rows of k = 256: two units of 32 rows, one block).
        assert_eq!(grid(ElemType::Q4_0, shape(ElemType::Q4_0, 33, 256, 4, 2, 3)), [1, 6, 1]);
    }

    #[test]
    fn grouped_mul_mat_id_geometry() {
        let s = MulMatIdShape {
            k: 2048,
            m: 768,
            n_expert: 128,
            n_used: 8,
            n_tokens: 512,
            n_b: 1,
            ..Default::default()
        };
        // Counts plus one list of every slot per expert.
        assert_eq!(mmid_grouped_bytes(&s), Some((128 + 128 * 4096) * 4));
        // 64 x 64 tiles, four warps; q4_0: two steps of 64 rows of four 18-byte blocks (80 bytes
        // padded), 64 activation rows of 144 bytes and 4 x 64 pairs; q4_K: one 144-byte
        // superblock per row and step, activation rows of 272 bytes, 8 x 64 pairs.
        let c = mmid_mma_config(ElemType::Q4_0, &s);
        assert_eq!(
            (c.grid, c.block, c.shared_bytes),
            ([8, 12, 128], [128, 1, 1], 2 * (64 * 80 + 64 * 144 + 4 * 64 * 8))
        );
        let c = mmid_mma_config(ElemType::Q4K, &s);
        assert_eq!(
            (c.grid, c.block, c.shared_bytes),
            ([8, 12, 128], [128, 1, 1], 2 * (64 * 144 + 64 * 272 + 8 * 64 * 8))
        );
        let mm = MulMatShape {
            k: 4096,
            m: 14336,
            n: 512,
            ne12: 1,
            ne13: 1,
            ..Default::default()
        };
        let c = mma_config(ElemType::F16, &mm);
        assert_eq!((c.grid, c.block), ([8, 112, 1], [256, 1, 1]));
        // The f16 activation copy: four values per thread, 1024 per block along k.
        let q = Q8Shape {
            ne: [4096, 512, 1, 1],
            ..Default::default()
        };
        let c = convert_config(&q, MMA_COPY_VALUES);
        assert_eq!((c.grid, c.block), ([4, 512, 1], [256, 1, 1]));
        assert_eq!(convert_config(&q, QUANTIZE_VALUES).grid, quantize_config(&q).grid);
        let c = mma_config(ElemType::Q8_0, &mm);
        assert_eq!((c.grid, c.block), ([8, 224, 1], [128, 1, 1]));
        // Hopper f16: 128 x 256 tiles, four k steps of 48 KiB in flight plus the alignment room;
        // q4_0: three 16 KiB weight tiles and four steps of 32 KiB activations + 4.5 KiB raw blocks
        // padded to 5 KiB (every step's activation tile 1024-byte aligned).
        // 224 tiles of 128 x 256 on 132 SMs, a last wave of 92 (more than half full) left whole;
        // a 1024-row product's 16 tiles in four k ranges of 16 steps.
        let split = MmSplit::new(&mm, (128, 256), 64, 132);
        assert_eq!((split.tiles, split.whole, split.parts), (224, 224, 1));
        let c = wgmma_config(ElemType::Q4_0, &split);
        assert_eq!((c.grid, c.block), ([224, 1, 1], [256, 1, 1]));
        let c = wgmma_config(ElemType::F16, &split);
        assert_eq!((c.grid, c.block, c.shared_bytes), ([224, 1, 1], [256, 1, 1], 197_632));
        let kv = MmSplit::new(&MulMatShape { m: 1024, ..mm }, (128, 256), 64, 132);
        assert_eq!((kv.tiles, kv.whole, kv.parts, kv.blocks()), (16, 0, 4, 64));
        assert_eq!(kv.partial_bytes(128 * 256), 3 * 16 * 131_072);
        assert_eq!(split_sum_config(&kv, (128, 256)).grid, [16, 32, 1]);
        assert_eq!(
            wgmma_shared_bytes(ElemType::Q4_0),
            49_152 + 4 * (32_768 + 6144) + 1024,
            "q4_0: 48-byte staged rows (36 bytes from up to 12 into a 16-byte unit)"
        );
        assert_eq!(
            wgmma_shared_bytes(ElemType::Q8_0),
            49_152 + 4 * (32_768 + 10_240) + 1024
        );
        for ty in TYPES {
            if wgmma_entry(ty).is_some() {
                let bytes = wgmma_shared_bytes(ty);
                assert!(
                    mma_entry(ty).is_some() && bytes <= 227 * 1024 && bytes.is_multiple_of(1024),
                    "{ty}"
                );
            }
        }
        use crate::config::F16Prefill::{Always, Never, Wide};
        let narrow = MulMatShape { n: 9, ..mm };
        assert!(wgmma_takes(ElemType::F16, Never, &narrow) && wgmma_takes(ElemType::F16, Always, &narrow));
        assert!(
            wgmma_takes(ElemType::BF16, Never, &narrow)
                && wgmma_shared_bytes(ElemType::BF16) == wgmma_shared_bytes(ElemType::F16)
        );
        assert!(!wgmma_takes(ElemType::Q4_0, Never, &mm) && wgmma_takes(ElemType::Q4_0, Always, &narrow));
        // By default the block types take it past one int8 tile of columns, at any number of
        // rows (where the tiles are few, it splits k).
        let wide = |m, n| MulMatShape { m, n, ..mm };
        assert!(!wgmma_takes(ElemType::Q8_0, Wide, &wide(14336, 128)));
        assert!(wgmma_takes(ElemType::Q8_0, Wide, &wide(14336, 129)));
        assert!(
            wgmma_takes(ElemType::Q4_0, Wide, &wide(1024, 512)) && wgmma_takes(ElemType::Q4_0, Wide, &wide(4096, 512))
        );
        assert!(wgmma_takes(ElemType::Q4_0, Always, &wide(1024, 512)));
        assert!(!wgmma_takes(ElemType::Q4K, Always, &mm) && !wgmma_takes(ElemType::F32, Always, &mm));
        assert!(has_wgmma("sm_90a") && !has_wgmma("sm_90") && !has_wgmma("sm_100a") && !has_wgmma("gfx942"));
        let f16 = MulMatShape {
            nb01: 2 * mm.k,
            nb02: 2 * mm.k * mm.m,
            nb03: 2 * mm.k * mm.m,
            ..mm
        };
        let at = DevicePtr(1 << 20);
        assert!(wgmma_fits(ElemType::F16, at, &f16) && wgmma_fits(ElemType::BF16, at, &f16));
        assert!(
            !wgmma_fits(ElemType::F16, DevicePtr((1 << 20) + 2), &f16),
            "base off 16 bytes"
        );
        let k4100 = MulMatShape {
            k: 4100,
            nb01: 8200,
            ..f16
        };
        assert!(!wgmma_fits(ElemType::F16, at, &k4100), "k not whole pieces");
        assert!(
            !wgmma_fits(ElemType::F16, at, &MulMatShape { nb02: 8, ..f16 }),
            "batch base off 16 bytes"
        );
        let q = MulMatShape {
            nb01: 18 * mm.k / 32,
            nb02: 18 * mm.k / 32 * mm.m,
            nb03: 18 * mm.k / 32 * mm.m,
            ..mm
        };
        // The block types on both Hopper GEMMs: k in whole steps (64 and 128 values), rows and
        // batch bases aligned to the copy unit (4 and 8 bytes).
        type Fits = fn(ElemType, DevicePtr, &MulMatShape) -> bool;
        for (fits, k_step, unit) in [(wgmma_fits as Fits, 64, 4), (wgmmq_fits, 128, 8)] {
            assert!(fits(ElemType::Q4_0, at, &q));
            let k = 4096 + k_step / 2;
            let short = MulMatShape {
                k,
                nb01: 18 * k / 32,
                ..q
            };
            assert!(!fits(ElemType::Q4_0, at, &short), "k not whole steps");
            let off = DevicePtr((1 << 20) + unit as u64 / 2);
            assert!(!fits(ElemType::Q4_0, off, &q), "base off the copy unit");
            let nb02 = q.nb02 + unit / 2;
            assert!(!fits(ElemType::Q4_0, at, &MulMatShape { nb02, ..q }), "batch base off");
        }
        // Both copy 16-byte units from up to 12 (int8 GEMM: 8) bytes before a step: the weights'
        // base 16-byte aligned, rows 4-byte (8) aligned, batches 16 (8); rows less than 16 MiB
        // apart (32-bit offsets within a tile).
        for (fits, row, batch) in [(wgmma_fits as Fits, 4, 16), (wgmmq_fits, 8, 8)] {
            assert!(
                !fits(ElemType::Q4_0, DevicePtr((1 << 20) + row as u64), &q),
                "base off 16 bytes"
            );
            let (nb01, nb02) = (q.nb01 + row, (q.nb01 + row) * q.m + batch);
            assert!(fits(
                ElemType::Q4_0,
                at,
                &MulMatShape {
                    nb01,
                    nb02,
                    nb03: nb02,
                    ..q
                }
            ));
            let wide = MulMatShape {
                nb01: WGMMQ_MAX_ROW_BYTES,
                nb02: WGMMQ_MAX_ROW_BYTES * q.m,
                nb03: WGMMQ_MAX_ROW_BYTES * q.m,
                ..q
            };
            assert!(!fits(ElemType::Q4_0, at, &wide), "rows past 32-bit tile offsets");
            let nb01 = WGMMQ_MAX_ROW_BYTES - 8;
            assert!(fits(ElemType::Q4_0, at, &MulMatShape { nb01, ..wide }));
        }
        assert!(!wgmma_fits(ElemType::Q4_0, at, &MulMatShape { nb02: q.nb02 + 4, ..q }));
        assert!(!wgmma_fits(ElemType::Q4K, at, &q), "no Hopper GEMM for superblocks");
        // Hopper int8 GEMM: 512 threads, 128 x 128 tiles; q4_0: two 16 KiB weight tiles with
        // 4.5 KiB of scales and 6 KiB of converted activation scales each (53 KiB in all), four
        // steps of 16 KiB activations + 4 KiB pairs + 10 KiB raw blocks (80-byte staged rows).
        // 14336 x 4096 x 512 on 132 SMs: 448 tiles, three whole waves and 52 tiles in two k
        // halves of 16 steps (104 blocks more).
        let split = MmSplit::new(&mm, (128, 128), mm.k / 128, 132);
        assert_eq!(
            (split.tiles_x, split.tiles_y, split.tiles, split.whole, split.parts),
            (4, 112, 448, 396, 2)
        );
        assert_eq!((split.split_tiles(), split.blocks()), (52, 500));
        assert_eq!(split.partial_bytes(128 * 128), 52 * 65_536);
        let c = wgmmq_config(ElemType::Q4_0, &split);
        assert_eq!(
            (c.grid, c.block, c.shared_bytes),
            ([500, 1, 1], [512, 1, 1], 46_080 + 4 * (16_384 + 4096 + 10_240) + 1024)
        );
        let c = split_sum_config(&split, (128, 128));
        assert_eq!((c.grid, c.block), ([52, 16, 1], [128, 1, 1]));
        for ty in TYPES {
            let e = wgmmq_entry(ty);
            assert_eq!(
                e.is_some(),
                mmid_mma_entry(ty).is_some() && ty.block_size() == 32 || matches!(ty, ElemType::Q4K | ElemType::Q5K),
                "{ty}"
            );
            if let Some(entry) = e {
                assert!(tandem_kernels_hip::find("mma").unwrap().entries.contains(&entry));
                let bytes = wgmmq_shared_bytes(ty);
                assert!(bytes <= 227 * 1024 && bytes.is_multiple_of(1024), "{ty}");
            }
        }
        assert!(!wgmmq_fits(ElemType::F16, at, &q) && !wgmmq_fits(ElemType::Q6K, at, &q));
        // q4_K: whole 144-byte superblocks, rows and batches 16-byte aligned.
        let qk = MulMatShape {
            nb01: 144 * mm.k / 256,
            nb02: 144 * mm.k / 256 * mm.m,
            nb03: 144 * mm.k / 256 * mm.m,
            ..mm
        };
        assert!(wgmmq_fits(ElemType::Q4K, at, &qk));
        assert!(!wgmmq_fits(
            ElemType::Q4K,
            at,
            &MulMatShape {
                nb02: qk.nb02 + 8,
                ..qk
            }
        ));
        // q4_K and q5_K: their offsets on the tensor cores (two 8 KiB tf32 tiles, s_a as two
        // tf32); each row's step staged as the 16 / 48 bytes before the quants and 64 quant bytes
        // (80 / 112 of 128 rows, padded to 1024 bytes).
        assert_eq!(
            wgmmq_shared_bytes(ElemType::Q4K),
            70_656 + 4 * (16_384 + 4096 + 10_240) + 1024
        );
        assert_eq!(
            wgmmq_shared_bytes(ElemType::Q5K),
            70_656 + 4 * (16_384 + 4096 + 14_336) + 1024
        );
        for ty in TYPES {
            assert_eq!(
                wgmmq_tensor_offsets(ty),
                matches!(ty, ElemType::Q4_1 | ElemType::Q5_1 | ElemType::Q4K | ElemType::Q5K),
                "{ty}"
            );
        }
        // Tensor-core GEMV: 3..=8 columns, rows and batch bases 16-byte aligned.
        let few = MulMatShape { n: 8, ..q };
        assert!(mmv_fits(ElemType::Q4_0, at, &few));
        assert!(mmv_fits(ElemType::Q4_0, at, &MulMatShape { n: 3, ..few }));
        assert!(
            !mmv_fits(ElemType::Q4_0, at, &MulMatShape { n: 2, ..few }),
            "two columns"
        );
        assert!(
            !mmv_fits(ElemType::Q4_0, at, &MulMatShape { n: 9, ..few }),
            "prefill width"
        );
        let k96 = MulMatShape { k: 96, nb01: 54, ..few };
        assert!(!mmv_fits(ElemType::Q4_0, at, &k96), "rows off 16 bytes");
        assert!(
            !mmv_fits(ElemType::Q4_0, DevicePtr((1 << 20) + 8), &few),
            "base off 16 bytes"
        );
        assert!(
            !mmv_fits(
                ElemType::Q4_0,
                at,
                &MulMatShape {
                    nb03: few.nb03 + 8,
                    ..few
                }
            ),
            "batch base off"
        );
        assert!(!mmv_fits(ElemType::BF16, at, &few) && !mmv_fits(ElemType::F16, at, &few));
        // q6_K rows of 5120 values (20 superblocks, 4200 bytes: 8-byte aligned) at a 2-byte base.
        let q6 = MulMatShape {
            k: 5120,
            nb01: 4200,
            nb02: 4200 * few.m,
            nb03: 4200 * few.m,
            ..few
        };
        assert!(mmv_fits(ElemType::Q6K, DevicePtr((1 << 20) + 2), &q6));
        assert!(!mmv_fits(ElemType::Q4K, at, &MulMatShape { nb01: 4200, ..few }));
        // Block 128 taking every grid.x-th tile of 32 rows, two blocks per compute unit over all
        // batches (448 tiles on 132 SMs: 264 blocks); q4_0: four warps x three stages of 32 rows x
        // 144 bytes, eight 272-byte activation columns and 64 pairs, then 32 x 8 partial sums
        // of three warps.
        let parts = 3 * 32 * 8 * 4;
        let c = mmv_config(ElemType::Q4_0, &few, 132);
        assert_eq!(
            (c.grid, c.block, c.shared_bytes),
            ([264, 1, 1], [128, 1, 1], 4 * 3 * (32 * 144 + 8 * 272 + 512) + parts)
        );
        assert_eq!(
            mmv_config(ElemType::Q4_0, &few, 1000).grid,
            [448, 1, 1],
            "one tile each"
        );
        let batched = MulMatShape { ne12: 4, ..few };
        assert_eq!(mmv_config(ElemType::Q4_0, &batched, 132).grid, [66, 4, 1]);
        assert_eq!(
            mmv_config(ElemType::Q4_0, &MulMatShape { m: 5, ..few }, 0).grid,
            [1, 1, 1]
        );
        // q6_K: 210-byte chunks in windows of 14 units, rows of 15; two stages.
        assert_eq!(
            mmv_shared_bytes(ElemType::Q6K),
            4 * 2 * (32 * 240 + 8 * 272 + 512) + parts
        );
        // q3_K: 110-byte chunks in windows of 8 units, rows of 9; three stages.
        assert_eq!(
            mmv_shared_bytes(ElemType::Q3K),
            4 * 3 * (32 * 144 + 8 * 272 + 512) + parts
        );
        // q2_K: 84-byte chunks in windows of 7 units, rows of 7; three stages.
        assert_eq!(
            mmv_shared_bytes(ElemType::Q2K),
            4 * 3 * (32 * 112 + 8 * 272 + 512) + parts
        );
        for ty in TYPES {
            assert_eq!(mmv_entry(ty).is_some(), ty.is_quantized(), "{ty}");
            if let Some(entry) = mmv_entry(ty) {
                assert!(tandem_kernels_hip::find("mma").unwrap().entries.contains(&entry));
                // Two blocks (plus the 1 KiB the driver keeps per block) fit a Hopper SM's 228 KiB.
                assert!(2 * (mmv_shared_bytes(ty) + 1024) <= 228 * 1024, "{ty}");
            }
        }
        for ty in TYPES {
            if mma_entry(ty).is_some() {
                let (threads, tm, tn) = mma_tile(ty);
                assert!(threads as i64 * 4 <= tm * tn && tm % 16 == 0 && tn % 16 == 0, "{ty}");
            }
        }
        // The int8 tiles' two stages: 64 weight rows (q4_0: four 18-byte blocks, 72 bytes in rows
        // of 5 units; q4_K: a 144-byte superblock, rows of 9; q6_K: 210 bytes in windows of 14
        // units, rows of 15; q2_K: 84 bytes in windows of 7), 64 activation rows of the step's
        // values plus 16 bytes, the pairs of its groups.
        let acts = |groups: u32| 64 * (32 * groups + 16) + groups * 64 * 8;
        assert_eq!(mmq_shared_bytes(ElemType::Q4_0), 2 * (64 * 80 + acts(4)));
        assert_eq!(mmq_shared_bytes(ElemType::Q4K), 2 * (64 * 144 + acts(8)));
        assert_eq!(mmq_shared_bytes(ElemType::Q6K), 2 * (64 * 240 + acts(8)));
        assert_eq!(mmq_shared_bytes(ElemType::Q2K), 2 * (64 * 112 + acts(8)));
        assert_eq!(mmq_shared_bytes(ElemType::F16), 0);
        for ty in TYPES.into_iter().filter(|t| t.is_quantized()) {
            // Three superblock tiles (plus the driver's 1 KiB each) fit a Hopper SM's 228 KiB,
            // as `TANDEM_MMQ_SB_KERNEL`'s launch bounds assume.
            assert!(3 * (mmq_shared_bytes(ty) + 1024) <= 228 * 1024, "{ty}");
        }
        // Decode-sized batches and huge expert counts keep the GEMV form.
        assert_eq!(mmid_grouped_bytes(&MulMatIdShape { n_tokens: 8, ..s }), None);
        assert_eq!(mmid_grouped_bytes(&MulMatIdShape { n_expert: 4097, ..s }), None);
        assert_eq!(mmid_grouped_bytes(&MulMatIdShape { n_expert: 0, ..s }), None);
    }

    /// Fields (i64 each) of `struct <name> { ... };` in a kernel source.
    fn i64_fields(src: &str, name: &str) -> usize {
        let start = src
            .find(&format!("struct {name} {{"))
            .unwrap_or_else(|| panic!("no {name}"));
        let body = &src[start..start + src[start..].find("};").unwrap()];
        body.lines()
            .map(|l| l.split("//").next().unwrap().trim())
            .filter_map(|l| l.strip_prefix("i64 "))
            .map(|l| l.trim_end_matches(';').split(',').count())
            .sum()
    }

    #[test]
    fn launch_constants_and_shapes_match_the_kernel_sources() {
        use super::super::matmul_launch::{
            CDNA_LAYOUT, GEMM_THREADS, GEMM_TILE, GEMV_CHUNK, GEMV_FLOAT_ROWS, GEMV_THREADS, MMA_COPY_VALUES,
            MMA_THREADS, MMA_TILE_M, MMA_TILE_N, MMID_MAX_EXPERTS, MMQ_THREADS, MMQ_TILE_M, MMQ_TILE_N, MMV_COLUMNS,
            MMV_GROUPS, MMV_ROWS, MMV_THREADS, QUANTIZE_VALUES, SPLIT_SUM_COLUMNS, SPLIT_SUM_THREADS, WGMMA_QSTAGES,
            WGMMA_STAGES, WGMMA_THREADS, WGMMA_TILE_M, WGMMA_TILE_N, WGMMQ_STAGES, WGMMQ_THREADS, WGMMQ_TILE_M,
            WGMMQ_TILE_N,
        };
        let src = |family| tandem_kernels_hip::find(family).unwrap().source;
        let (gemv, gemm, mma) = (src("gemv"), src("gemm"), src("mma"));
        for (src, text) in [
            (gemv, format!("#define TANDEM_MV_THREADS {GEMV_THREADS}\n")),
            (gemv, format!("#define TANDEM_MV_GROUPS {}\n", GEMV_CHUNK / 32)),
            (gemv, format!("#define TANDEM_MV_FLOAT_ROWS {GEMV_FLOAT_ROWS}\n")),
            (gemv, format!("#define TANDEM_Q8_VALUES {QUANTIZE_VALUES}\n")),
            // gemv_stages gives two stages to the types whose multi-column walk goes in pairs.
            (gemv, "static constexpr bool value = T::QK == 32;".to_string()),
            (gemm, format!("#define TANDEM_MM_THREADS {GEMM_THREADS}\n")),
            (gemm, format!("#define TANDEM_MM_BM {GEMM_TILE}\n")),
            (gemm, format!("#define TANDEM_MM_BN {GEMM_TILE}\n")),
            (mma, format!("#define TANDEM_MMA_THREADS {MMA_THREADS}\n")),
            (mma, format!("#define TANDEM_CDNA_LAYOUT {CDNA_LAYOUT}\n")),
            (mma, format!("#define TANDEM_MMA_BM {MMA_TILE_M}\n")),
            (mma, format!("#define TANDEM_MMA_BN {MMA_TILE_N}\n")),
            (mma, format!("#define TANDEM_WGMMA_THREADS {WGMMA_THREADS}\n")),
            (mma, format!("#define TANDEM_WGMMA_BM {WGMMA_TILE_M}\n")),
            (mma, format!("#define TANDEM_WGMMA_BN {WGMMA_TILE_N}\n")),
            (mma, format!("#define TANDEM_WGMMA_STAGES {WGMMA_STAGES}\n")),
            (mma, format!("#define TANDEM_WGMMA_QSTAGES {WGMMA_QSTAGES}\n")),
            (mma, format!("#define TANDEM_WGMMQ_THREADS {WGMMQ_THREADS}\n")),
            (mma, format!("#define TANDEM_WGMMQ_BM {WGMMQ_TILE_M}\n")),
            (mma, format!("#define TANDEM_WGMMQ_BN {WGMMQ_TILE_N}\n")),
            (mma, format!("#define TANDEM_MMV_THREADS {MMV_THREADS}\n")),
            (mma, format!("#define TANDEM_MMV_ROWS {MMV_ROWS}\n")),
            (mma, format!("#define TANDEM_MMV_COLS {MMV_COLUMNS}\n")),
            (mma, format!("#define TANDEM_MMV_GROUPS {MMV_GROUPS}\n")),
            // mmv_stage: three stages up to 208-byte rows.
            (mma, "static constexpr int STAGES = PAD > 208 ? 2 : 3;".to_string()),
            (mma, format!("#define TANDEM_WGMMQ_STAGES {WGMMQ_STAGES}\n")),
            (mma, format!("#define TANDEM_MMA_COPY_VALUES {MMA_COPY_VALUES}\n")),
            (mma, format!("#define TANDEM_SPLIT_SUM_THREADS {SPLIT_SUM_THREADS}\n")),
            (mma, format!("#define TANDEM_SPLIT_SUM_COLS {SPLIT_SUM_COLUMNS}\n")),
            (mma, "    float* partial;\n};".to_string()),
            (mma, format!("#define TANDEM_MMQ_THREADS {MMQ_THREADS}\n")),
            (mma, format!("#define TANDEM_MMQ_BM {MMQ_TILE_M}\n")),
            (mma, format!("#define TANDEM_MMQ_BN {MMQ_TILE_N}\n")),
            (mma, format!("__shared__ i32 cnt[{MMID_MAX_EXPERTS}];")),
        ] {
            assert!(src.contains(&text), "{text}");
        }
        let mm = std::mem::size_of::<MulMatShape>() / 8;
        let mmid = std::mem::size_of::<MulMatIdShape>() / 8;
        for src in [gemv, gemm, mma] {
            assert_eq!(i64_fields(src, "tandem_mm_shape"), mm);
        }
        for src in [gemv, mma] {
            assert_eq!(i64_fields(src, "tandem_mmid_shape"), mmid);
        }
        assert_eq!(i64_fields(gemv, "tandem_q8_shape"), std::mem::size_of::<Q8Shape>() / 8);
        // tandem_mm_split: five i64, then the partial sums' pointer.
        assert_eq!(
            i64_fields(mma, "tandem_mm_split"),
            std::mem::size_of::<MmSplit>() / 8 - 1
        );
        assert_eq!(
            i64_fields(mma, "tandem_mma_src_shape"),
            std::mem::size_of::<Q8Shape>() / 8
        );
    }
}
