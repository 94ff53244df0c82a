//! ADD, SUB, MUL, DIV: `dst = src0 op src1` with src1 repeated over src0 (each dim of src0 a
//! multiple of src1's). Any mix of f32/f16/bf16, any strides, in place when dst is src0.
//!
//! Rows whose three operands are plain f32 run straight on the tensor memory; everything else is
//! staged through f32 row buffers (load, combine, store), which also keeps a row correct when a
//! source shares bytes with it.

use super::ew_rows::{
    for_row_ranges, is_float, load_f32, plain_f32_row, ranges_overlap, row_addr, row_coords, store_f32,
};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::{Op, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let b = need(dst, srcs, 1)?;
    for t in [dst, a, b] {
        ensure(is_float(t.ty), dst, srcs, || {
            format!("{} is not supported, only f32/f16/bf16", t.ty)
        })?;
        ensure(t.ne.iter().all(|&n| n >= 0), dst, srcs, || "negative size".into())?;
    }
    ensure(dst.ne == a.ne, dst, srcs, || "dst and src0 shapes differ".into())?;
    let repeats = (0..4).all(|k| b.ne[k] > 0 && a.ne[k] % b.ne[k] == 0);
    ensure(repeats || dst.nelements() == 0, dst, srcs, || {
        "src1 does not repeat onto src0 (each src0 dim must be a multiple of src1's)".into()
    })
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (a, b) = (need(dst, srcs, 0)?, need(dst, srcs, 1)?);
    // SAFETY: forwarded contract.
    unsafe {
        match dst.op {
            Op::Add => combine(ctx, dst, a, b, |x, y| x + y),
            Op::Sub => combine(ctx, dst, a, b, |x, y| x - y),
            Op::Mul => combine(ctx, dst, a, b, |x, y| x * y),
            Op::Div => combine(ctx, dst, a, b, |x, y| x / y),
            other => return Err(OpError::new(dst, srcs, format!("{other} is not a binary op"))),
        }
    }
    Ok(())
}

/// # Safety
/// See [`super::compute`]; shapes passed [`check`].
unsafe fn combine<F>(ctx: &CpuContext, dst: &Tensor, a: &Tensor, b: &Tensor, op: F)
where
    F: Fn(f32, f32) -> f32 + Copy + Sync + Send,
{
    let n0 = dst.ne[0] as usize;
    let n10 = b.ne[0] as usize;
    let nrows = dst.nrows() as usize;
    for_row_ranges(ctx, dst, &[a, b], nrows, n0, |start, end| {
        let mut abuf = Vec::new();
        let mut bbuf = Vec::new();
        for r in start..end {
            let [i1, i2, i3] = row_coords(dst, r);
            let d = row_addr(dst, r);
            let s0 = row_addr(a, r);
            let s1 = b.data
                + (i1 % b.ne[1] as usize) * b.nb[1]
                + (i2 % b.ne[2] as usize) * b.nb[2]
                + (i3 % b.ne[3] as usize) * b.nb[3];
            // SAFETY: the rows lie inside their tensors (shapes checked); row ranges handed to
            // different tasks write disjoint bytes (for_row_ranges).
            unsafe {
                if !direct_f32_row(op, dst, a, b, d, s0, s1, n0, n10) {
                    abuf.resize(n0, 0.0);
                    bbuf.resize(n10, 0.0);
                    load_f32(a.ty, s0 as *const u8, a.nb[0], &mut abuf);
                    load_f32(b.ty, s1 as *const u8, b.nb[0], &mut bbuf);
                    combine_in_place(&mut abuf, &bbuf, op);
                    store_f32(dst.ty, d as *mut u8, dst.nb[0], &abuf);
                }
            }
        }
    });
}

/// `z[i] = op(z[i], y[i % y.len()])`.
#[inline(always)]
fn combine_in_place<F: Fn(f32, f32) -> f32>(z: &mut [f32], y: &[f32], op: F) {
    if let [y0] = *y {
        z.iter_mut().for_each(|zi| *zi = op(*zi, y0));
        return;
    }
    for zc in z.chunks_exact_mut(y.len()) {
        for (zi, &yi) in zc.iter_mut().zip(y) {
            *zi = op(*zi, yi);
        }
    }
}

/// `z[i] = op(x[i], y[i % y.len()])`.
#[inline(always)]
fn combine_into<F: Fn(f32, f32) -> f32>(z: &mut [f32], x: &[f32], y: &[f32], op: F) {
    if let [y0] = *y {
        z.iter_mut().zip(x).for_each(|(zi, &xi)| *zi = op(xi, y0));
        return;
    }
    for (zc, xc) in z.chunks_exact_mut(y.len()).zip(x.chunks_exact(y.len())) {
        for ((zi, &xi), &yi) in zc.iter_mut().zip(xc).zip(y) {
            *zi = op(xi, yi);
        }
    }
}

/// Combines one row straight on tensor memory when all three are plain f32 rows and dst either
/// is src0's row or shares no byte with either source; returns false to ask for the staged path.
///
/// # Safety
/// The three rows are valid for their lengths and no other thread touches dst's row.
#[inline]
unsafe fn direct_f32_row<F: Fn(f32, f32) -> f32>(
    op: F,
    dst: &Tensor,
    a: &Tensor,
    b: &Tensor,
    d: usize,
    s0: usize,
    s1: usize,
    n0: usize,
    n10: usize,
) -> bool {
    if !(plain_f32_row(dst, d) && plain_f32_row(a, s0) && plain_f32_row(b, s1)) {
        return false;
    }
    let (dlen, blen) = (n0 * 4, n10 * 4);
    if ranges_overlap(d, dlen, s1, blen) {
        return false;
    }
    // SAFETY: all three rows are aligned f32 of the given lengths; dst's row overlaps no source
    // row (checked here) except when it is exactly src0's row, handled as one mutable slice.
    unsafe {
        let y = std::slice::from_raw_parts(s1 as *const f32, n10);
        if d == s0 {
            combine_in_place(std::slice::from_raw_parts_mut(d as *mut f32, n0), y, op);
            return true;
        }
        if ranges_overlap(d, dlen, s0, dlen) {
            return false;
        }
        let x = std::slice::from_raw_parts(s0 as *const f32, n0);
        combine_into(std::slice::from_raw_parts_mut(d as *mut f32, n0), x, y, op);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::ew_testutil::{assert_close, Fill, TOL};
    use tandem_graph::{ElemType, GraphBuilder, Op, TensorId};

    use ElemType::{BF16, F16, F32};

    fn node(g: &mut GraphBuilder, op: Op, a: TensorId, b: TensorId) -> TensorId {
        match op {
            Op::Add => g.add(a, b),
            Op::Mul => g.mul(a, b),
            _ => g.div(a, b),
        }
        .unwrap()
    }

    /// One binary node over fresh leaves; returns the graph, the node and the src1 leaf.
    fn case(op: Op, ta: ElemType, a_ne: &[i64], tb: ElemType, b_ne: &[i64]) -> (GraphBuilder, TensorId, TensorId) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ta, a_ne);
        let b = g.new_tensor(tb, b_ne);
        let n = node(&mut g, op, a, b);
        (g, n, b)
    }

    fn check_case(op: Op, ta: ElemType, a_ne: &[i64], tb: ElemType, b_ne: &[i64]) {
        let (g, n, b) = case(op, ta, a_ne, tb, b_ne);
        assert_close(g.build(), n, &[(b, Fill::AwayFromZero)], TOL);
    }

    #[test]
    fn same_shape_and_broadcasts() {
        for op in [Op::Add, Op::Mul, Op::Div] {
            check_case(op, F32, &[37, 5, 3], F32, &[37, 5, 3]);
            check_case(op, F32, &[64, 6, 4, 2], F32, &[64, 1, 4, 1]);
            check_case(op, F32, &[64, 6, 4, 2], F32, &[1, 6, 1, 2]);
            check_case(op, F32, &[48, 3, 2], F32, &[16, 3, 1]);
            check_case(op, F32, &[7, 1, 1, 5], F32, &[1, 1, 1, 1]);
        }
    }

    #[test]
    fn halves_with_f32_or_own_type() {
        for (ta, tb) in [(F16, F32), (F16, F16), (BF16, F32), (BF16, BF16)] {
            for op in [Op::Add, Op::Mul, Op::Div] {
                check_case(op, ta, &[33, 4, 3], tb, &[33, 1, 3]);
                check_case(op, ta, &[40, 4], tb, &[8, 4]);
            }
        }
    }

    #[test]
    fn large_enough_to_split_across_threads() {
        check_case(Op::Add, F32, &[300, 70], F32, &[300, 1]);
        check_case(Op::Mul, F16, &[257, 90], F32, &[257, 90]);
    }

    #[test]
    fn permuted_and_transposed_operands() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(F32, &[6, 9, 4]);
        let pa = g.permute(a, [1, 0, 2, 3]).unwrap(); // [9, 6, 4], dim 0 strided
        let b = g.new_tensor(F32, &[6, 9]);
        let tb = g.transpose(b); // [9, 6]
        let n = g.mul(pa, tb).unwrap();
        let m = g.add(n, pa).unwrap();
        assert_close(g.build(), m, &[], TOL);

        let mut g = GraphBuilder::new();
        let a = g.new_tensor(F16, &[5, 7, 3, 2]);
        let pa = g.permute(a, [2, 0, 3, 1]).unwrap();
        let b = g.new_tensor(BF16, &[7, 1, 5, 1]); // pa is [7, 2, 5, 3]
        let n = g.div(pa, b).unwrap();
        assert_close(g.build(), n, &[(b, Fill::AwayFromZero)], TOL);
    }

    #[test]
    fn in_place_on_src0() {
        for ty in [F32, F16] {
            let (mut g, n, b) = case(Op::Add, ty, &[300, 80], F32, &[300, 1]);
            let a = g.tensor(n).src[0].unwrap();
            let nb = g.tensor(a).nb;
            let t = g.tensor_mut(n);
            t.view_src = Some(a);
            t.nb = nb;
            assert_close(g.build(), n, &[(b, Fill::AwayFromZero)], TOL);
        }
    }

    #[test]
    fn rejects_bad_types_and_shapes() {
        let (g, n, _) = case(Op::Add, F32, &[8, 4], F32, &[8, 2]);
        let graph = g.build();
        let srcs = graph.srcs(n);
        let dst = graph.tensor(n).clone();
        assert!(super::check(&dst, &srcs).is_ok());

        let mut bad = graph.clone();
        bad.tensors[1].ty = ElemType::I32;
        let e = super::check(&dst, &bad.srcs(n)).unwrap_err();
        assert!(e.reason.contains("i32"), "{e}");

        let mut bad = graph.clone();
        bad.tensors[1].ne = [8, 3, 1, 1];
        let e = super::check(&dst, &bad.srcs(n)).unwrap_err();
        assert!(e.reason.contains("repeat"), "{e}");

        let mut wrong_dst = dst.clone();
        wrong_dst.ne = [8, 5, 1, 1];
        assert!(super::check(&wrong_dst, &srcs).unwrap_err().reason.contains("shapes"));

        let mut missing = srcs;
        missing[1] = None;
        assert!(super::check(&dst, &missing).unwrap_err().reason.contains("src1"));
        assert!(crate::reference::check(&dst, &missing).is_err());
    }
}
