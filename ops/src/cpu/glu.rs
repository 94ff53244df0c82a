//! GLU (op_params `[op, swapped]`): `dst = act(x) * g`. With one source, each row of src0 holds
//! `x` in its first half and `g` in its second (`swapped` exchanges them); with two, `x` is src0
//! and `g` is src1. f32/f16/bf16, any strides.

use super::ew_math::{gate_in_place, gate_into, gelu_erf, gelu_quick, gelu_tanh, silu};
use super::ew_rows::{for_row_ranges, is_float, load_f32, plain_f32_row, ranges_overlap, row_addr, store_f32};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::{GluOp, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let id = dst.param_i32(0);
    ensure(GluOp::from_ggml(id).is_some(), dst, srcs, || {
        format!("unknown GLU op {id}")
    })?;
    let mut all = vec![dst, a];
    all.extend(srcs[1]);
    for t in all {
        ensure(is_float(t.ty), dst, srcs, || {
            format!("{} is not supported, only f32/f16/bf16", t.ty)
        })?;
        ensure(t.ne.iter().all(|&n| n >= 0), dst, srcs, || "negative size".into())?;
    }
    match srcs[1] {
        Some(b) => {
            ensure(b.ne == a.ne, dst, srcs, || "src0 and src1 shapes differ".into())?;
            ensure(dst.ne == a.ne, dst, srcs, || "dst and src0 shapes differ".into())
        }
        None => {
            ensure(a.ne[0] % 2 == 0, dst, srcs, || "src0 rows have odd length".into())?;
            let want = [a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]];
            ensure(dst.ne == want, dst, srcs, || {
                format!("dst must be {want:?} (half of src0's rows)")
            })
        }
    }
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let id = dst.param_i32(0);
    let Some(op) = GluOp::from_ggml(id) else {
        return Err(OpError::new(dst, srcs, format!("unknown GLU op {id}")));
    };
    // SAFETY: forwarded contract; `check` passed.
    unsafe {
        match op {
            GluOp::Reglu => gate_rows(ctx, dst, a, srcs[1], |x| if x > 0.0 { x } else { 0.0 }),
            GluOp::Geglu => gate_rows(ctx, dst, a, srcs[1], gelu_tanh),
            GluOp::Swiglu => gate_rows(ctx, dst, a, srcs[1], silu),
            GluOp::GegluErf => gate_rows(ctx, dst, a, srcs[1], gelu_erf),
            GluOp::GegluQuick => gate_rows(ctx, dst, a, srcs[1], gelu_quick),
        }
    }
    Ok(())
}

/// `dst = act(x) * g` row by row.
///
/// # Safety
/// See [`super::compute`]; shapes passed [`check`].
unsafe fn gate_rows<F>(ctx: &CpuContext, dst: &Tensor, a: &Tensor, b: Option<&Tensor>, act: F)
where
    F: Fn(f32) -> f32 + Copy + Sync + Send,
{
    let nc = dst.ne[0] as usize;
    let swapped = dst.param_i32(1) != 0;
    // Where x and g start within a src0 row in the one-source form.
    let half = nc * a.nb[0];
    let (x_off, g_off) = if swapped { (half, 0) } else { (0, half) };
    let g_src = b.unwrap_or(a);
    let mut srcs = vec![a];
    srcs.extend(b);
    for_row_ranges(ctx, dst, &srcs, dst.nrows() as usize, nc, |start, end| {
        let (mut xbuf, mut gbuf) = (Vec::new(), Vec::new());
        for r in start..end {
            let d = row_addr(dst, r);
            let (x, g) = match b {
                Some(b) => (row_addr(a, r), row_addr(b, r)),
                None => (row_addr(a, r) + x_off, row_addr(a, r) + g_off),
            };
            let direct = plain_f32_row(dst, d)
                && plain_f32_row(a, x)
                && plain_f32_row(g_src, g)
                && !ranges_overlap(d, nc * 4, x, nc * 4)
                && !ranges_overlap(d, nc * 4, g, nc * 4);
            // SAFETY: rows lie inside their tensors (shapes checked); the task owns dst's row
            // (for_row_ranges); slices are made only for aligned f32 rows sharing no byte with
            // dst's row.
            unsafe {
                if direct {
                    let xs = std::slice::from_raw_parts(x as *const f32, nc);
                    let gs = std::slice::from_raw_parts(g as *const f32, nc);
                    gate_into(std::slice::from_raw_parts_mut(d as *mut f32, nc), xs, gs, act);
                } else {
                    xbuf.resize(nc, 0.0);
                    gbuf.resize(nc, 0.0);
                    load_f32(a.ty, x as *const u8, a.nb[0], &mut xbuf);
                    load_f32(g_src.ty, g as *const u8, g_src.nb[0], &mut gbuf);
                    gate_in_place(&mut xbuf, &gbuf, act);
                    store_f32(dst.ty, d as *mut u8, dst.nb[0], &xbuf);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::ew_testutil::{assert_close, TOL};
    use tandem_graph::{ElemType, GluOp, GraphBuilder};

    #[test]
    fn one_source_both_orders() {
        for op in GluOp::ALL {
            for ty in [ElemType::F32, ElemType::F16, ElemType::BF16] {
                for swapped in [false, true] {
                    let mut g = GraphBuilder::new();
                    let a = g.new_tensor(ty, &[2 * 37, 5, 3]);
                    let n = g.glu(a, op, swapped).unwrap();
                    assert_close(g.build(), n, &[], TOL);
                }
            }
        }
    }

    #[test]
    fn split_sources_and_large_rows() {
        for op in GluOp::ALL {
            for ty in [ElemType::F32, ElemType::F16] {
                let mut g = GraphBuilder::new();
                let a = g.new_tensor(ty, &[1000, 33]);
                let b = g.new_tensor(ty, &[1000, 33]);
                let n = g.glu_split(a, b, op).unwrap();
                assert_close(g.build(), n, &[], TOL);
            }
        }
    }

    #[test]
    fn strided_rows() {
        // Rows taken from a wider tensor: gaps between rows.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[40, 9]);
        let v = g.view(a, &[32, 9], &[160], 16).unwrap();
        let n = g.glu(v, GluOp::Swiglu, false).unwrap();
        assert_close(g.build(), n, &[], TOL);
    }

    #[test]
    fn rejects_unknown_op_and_bad_shapes() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[16, 2]);
        let n = g.glu(a, GluOp::Geglu, false).unwrap();
        let graph = g.build();
        let srcs = graph.srcs(n);
        let mut dst = graph.tensor(n).clone();
        assert!(super::check(&dst, &srcs).is_ok());
        dst.op_params[0] = 3;
        let e = super::check(&dst, &srcs).unwrap_err();
        assert!(e.reason.contains("GLU op 3"), "{e}");
        assert!(crate::reference::check(&dst, &srcs).is_err());

        let mut dst = graph.tensor(n).clone();
        dst.ne = [16, 2, 1, 1];
        assert!(super::check(&dst, &srcs).is_err());
        let mut odd = graph.clone();
        odd.tensors[0].ne = [15, 2, 1, 1];
        assert!(super::check(graph.tensor(n), &odd.srcs(n))
            .unwrap_err()
            .reason
            .contains("odd"));
    }
}
