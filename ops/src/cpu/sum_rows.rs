//! SUM_ROWS: `dst[0, i1, i2, i3] = sum of src0[:, i1, i2, i3]`, accumulated in f64 as ggml does.

use super::ew_rows::{for_row_ranges, is_float, load_f32, row_addr, write_elem};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::Tensor;

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    for t in [dst, a] {
        ensure(is_float(t.ty), dst, srcs, || {
            format!("{} is not supported, only f32/f16/bf16", t.ty)
        })?;
        ensure(t.ne.iter().all(|&n| n >= 0), dst, srcs, || "negative size".into())?;
    }
    let want = [1, a.ne[1], a.ne[2], a.ne[3]];
    ensure(dst.ne == want, dst, srcs, || format!("dst must be {want:?}"))
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let n0 = a.ne[0] as usize;
    for_row_ranges(ctx, dst, &[a], dst.nrows() as usize, n0, |start, end| {
        let mut buf = vec![0f32; n0];
        for r in start..end {
            // SAFETY: src0's row r and dst's element r lie inside their tensors (shapes
            // checked); the task owns dst's rows start..end (for_row_ranges).
            unsafe {
                load_f32(a.ty, row_addr(a, r) as *const u8, a.nb[0], &mut buf);
                let sum: f64 = buf.iter().map(|&v| v as f64).sum();
                write_elem(dst.ty, row_addr(dst, r) as *mut u8, sum as f32);
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::ew_testutil::{assert_close, run_both, TOL};
    use tandem_graph::{ElemType, GraphBuilder};

    #[test]
    fn sums_match_reference() {
        for ne in [&[1i64, 1][..], &[37, 5, 3], &[4096, 40], &[3, 2, 2, 2]] {
            let mut g = GraphBuilder::new();
            let a = g.new_tensor(ElemType::F32, ne);
            let n = g.sum_rows(a);
            assert_close(g.build(), n, &[], TOL);
        }
        // Transposed source: strided rows.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[6, 11]);
        let t = g.transpose(a);
        let n = g.sum_rows(t);
        let (cpu, reference) = run_both(g.build(), n, &[], 5);
        assert_eq!(cpu.len(), 6);
        assert!(cpu.iter().zip(&reference).all(|(a, b)| (a - b).abs() < 1e-5));
    }

    #[test]
    fn rejects_wrong_dst_shape() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[8, 3]);
        let n = g.sum_rows(a);
        let graph = g.build();
        let mut dst = graph.tensor(n).clone();
        dst.ne = [2, 3, 1, 1];
        assert!(super::check(&dst, &graph.srcs(n)).is_err());
        assert!(crate::reference::check(&dst, &graph.srcs(n)).is_err());
        dst.ne = [1, 3, 1, 1];
        dst.ty = ElemType::I32;
        assert!(super::check(&dst, &graph.srcs(n)).unwrap_err().reason.contains("i32"));
    }
}
