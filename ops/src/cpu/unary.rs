//! UNARY (op_params[0] = ggml's unary op), SCALE (`x * s + b`), CLAMP and the math ops (SQR,
//! SQRT, LOG, SIN, COS): one function applied
//! to every element, f32/f16/bf16 in and out, any strides, in place when dst is src0.
//!
//! Each op is its own monomorphised row loop so the cheap ones and the sigmoid family (see
//! `ew_math`) vectorise; f16/bf16 rows are widened to f32, mapped, and narrowed back.

use super::ew_math::{gelu_erf, gelu_quick, gelu_tanh, map_in_place, map_into, sigmoid, silu};
use super::ew_rows::{for_row_ranges, is_float, load_f32, plain_f32_row, ranges_overlap, row_addr, store_f32};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::params::{clamp_params, scale_params};
use tandem_graph::{Op, Tensor, UnaryOp};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    for t in [dst, a] {
        ensure(is_float(t.ty), dst, srcs, || {
            format!("{} is not supported, only f32/f16/bf16", t.ty)
        })?;
    }
    ensure(dst.ne == a.ne, dst, srcs, || "dst and src0 shapes differ".into())?;
    ensure(dst.ne.iter().all(|&n| n >= 0), dst, srcs, || "negative size".into())?;
    match dst.op {
        Op::Unary => {
            let id = dst.param_i32(0);
            ensure(UnaryOp::from_ggml(id).is_some(), dst, srcs, || {
                format!("unknown unary op {id}")
            })
        }
        Op::Scale | Op::Clamp | Op::Sqr | Op::Sqrt | Op::Log | Op::Sin | Op::Cos => Ok(()),
        other => Err(OpError::new(dst, srcs, format!("{other} is not a unary op"))),
    }
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    // SAFETY: forwarded contract; `check` passed.
    unsafe {
        match dst.op {
            Op::Sqr => map_rows(ctx, dst, a, |x| x * x),
            Op::Sqrt => map_rows(ctx, dst, a, f32::sqrt),
            Op::Log => map_rows(ctx, dst, a, f32::ln),
            Op::Sin => map_rows(ctx, dst, a, f32::sin),
            Op::Cos => map_rows(ctx, dst, a, f32::cos),
            Op::Scale => {
                let (s, b) = scale_params(dst);
                map_rows(ctx, dst, a, move |x| x * s + b);
            }
            Op::Clamp => {
                let (lo, hi) = clamp_params(dst);
                // ggml's max(min(x, hi), lo), written with comparisons: no panic when lo > hi.
                map_rows(ctx, dst, a, move |x| {
                    let y = if x < hi { x } else { hi };
                    if y > lo {
                        y
                    } else {
                        lo
                    }
                });
            }
            Op::Unary => {
                let id = dst.param_i32(0);
                let Some(op) = UnaryOp::from_ggml(id) else {
                    return Err(OpError::new(dst, srcs, format!("unknown unary op {id}")));
                };
                run_unary(ctx, dst, a, op);
            }
            other => return Err(OpError::new(dst, srcs, format!("{other} is not a unary op"))),
        }
    }
    Ok(())
}

/// # Safety
/// See [`super::compute`].
unsafe fn run_unary(ctx: &CpuContext, dst: &Tensor, a: &Tensor, op: UnaryOp) {
    // SAFETY: forwarded contract.
    unsafe {
        match op {
            UnaryOp::Abs => map_rows(ctx, dst, a, |x| x.abs()),
            UnaryOp::Sgn => map_rows(ctx, dst, a, |x| {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            }),
            UnaryOp::Neg => map_rows(ctx, dst, a, |x| -x),
            UnaryOp::Step => map_rows(ctx, dst, a, |x| if x > 0.0 { 1.0 } else { 0.0 }),
            UnaryOp::Tanh => map_rows(ctx, dst, a, |x| x.tanh()),
            UnaryOp::Elu => map_rows(ctx, dst, a, |x| if x > 0.0 { x } else { x.exp_m1() }),
            UnaryOp::Relu => map_rows(ctx, dst, a, |x| if x > 0.0 { x } else { 0.0 }),
            UnaryOp::Sigmoid => map_rows(ctx, dst, a, sigmoid),
            UnaryOp::Gelu => map_rows(ctx, dst, a, gelu_tanh),
            UnaryOp::GeluQuick => map_rows(ctx, dst, a, gelu_quick),
            UnaryOp::Silu => map_rows(ctx, dst, a, silu),
            UnaryOp::Hardswish => map_rows(ctx, dst, a, |x| x * hard_gate(x)),
            UnaryOp::Hardsigmoid => map_rows(ctx, dst, a, hard_gate),
            UnaryOp::Exp => map_rows(ctx, dst, a, |x| x.exp()),
            UnaryOp::Expm1 => map_rows(ctx, dst, a, |x| x.exp_m1()),
            // Above 20, log(1 + e^x) equals x in f32.
            UnaryOp::Softplus => map_rows(ctx, dst, a, |x| if x > 20.0 { x } else { x.exp().ln_1p() }),
            UnaryOp::GeluErf => map_rows(ctx, dst, a, gelu_erf),
            UnaryOp::Floor => map_rows(ctx, dst, a, f32::floor),
            UnaryOp::Ceil => map_rows(ctx, dst, a, f32::ceil),
            // Halves away from zero, as C's roundf.
            UnaryOp::Round => map_rows(ctx, dst, a, f32::round),
            UnaryOp::Trunc => map_rows(ctx, dst, a, f32::trunc),
        }
    }
}

/// `min(1, max(0, (x + 3) / 6))`.
#[inline(always)]
fn hard_gate(x: f32) -> f32 {
    ((x + 3.0) / 6.0).clamp(0.0, 1.0)
}

/// `dst = f(src0)` row by row.
///
/// # Safety
/// See [`super::compute`]; shapes passed [`check`].
unsafe fn map_rows<F>(ctx: &CpuContext, dst: &Tensor, a: &Tensor, f: F)
where
    F: Fn(f32) -> f32 + Copy + Sync + Send,
{
    let n0 = dst.ne[0] as usize;
    for_row_ranges(ctx, dst, &[a], dst.nrows() as usize, n0, |start, end| {
        let mut buf = Vec::new();
        for r in start..end {
            let (d, s) = (row_addr(dst, r), row_addr(a, r));
            let direct = plain_f32_row(dst, d) && plain_f32_row(a, s);
            // SAFETY: rows lie inside their tensors (same shape, checked); the task owns dst's
            // row (for_row_ranges). Slices are made only for aligned f32 rows that are either
            // the same row (one mutable slice) or share no byte.
            unsafe {
                if direct && d == s {
                    map_in_place(std::slice::from_raw_parts_mut(d as *mut f32, n0), f);
                } else if direct && !ranges_overlap(d, n0 * 4, s, n0 * 4) {
                    let x = std::slice::from_raw_parts(s as *const f32, n0);
                    map_into(std::slice::from_raw_parts_mut(d as *mut f32, n0), x, f);
                } else {
                    buf.resize(n0, 0.0);
                    load_f32(a.ty, s as *const u8, a.nb[0], &mut buf);
                    map_in_place(&mut buf, f);
                    store_f32(dst.ty, d as *mut u8, dst.nb[0], &buf);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::ew_testutil::{assert_close, Fill, TOL};
    use tandem_graph::{ElemType, GraphBuilder, Op, TensorId, UnaryOp};

    fn unary_case(op: UnaryOp, ty: ElemType, ne: &[i64], fill: Fill) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ty, ne);
        let n = g.unary(a, op).unwrap();
        assert_close(g.build(), n, &[(a, fill)], TOL);
    }

    #[test]
    fn every_unary_op_f32_f16_bf16() {
        for op in UnaryOp::ALL {
            for ty in [ElemType::F32, ElemType::F16, ElemType::BF16] {
                unary_case(op, ty, &[67, 5, 2], Fill::Uniform(-6.0, 6.0));
            }
            // Far tails: saturation of the sigmoid family, softplus's cut-over, exp's range.
            let wide = if matches!(op, UnaryOp::Exp | UnaryOp::Expm1) {
                80.0
            } else {
                120.0
            };
            unary_case(op, ElemType::F32, &[129, 3], Fill::Uniform(-wide, wide));
        }
    }

    #[test]
    fn large_rows_split_across_threads() {
        for op in [UnaryOp::Silu, UnaryOp::Gelu, UnaryOp::GeluErf] {
            unary_case(op, ElemType::F32, &[4096, 9], Fill::Uniform(-8.0, 8.0));
        }
    }

    #[test]
    fn strided_rows_and_in_place() {
        // Rows of a view with gaps between them.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[20, 6, 3]);
        let v = g.view(a, &[13, 6, 3], &[80, 480], 8).unwrap();
        let n = g.unary(v, UnaryOp::Silu).unwrap();
        assert_close(g.build(), n, &[], TOL);

        // dst is src0's memory.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[500, 40]);
        let n = g.unary(a, UnaryOp::Gelu).unwrap();
        let nb = g.tensor(a).nb;
        let t = g.tensor_mut(n);
        t.view_src = Some(a);
        t.nb = nb;
        assert_close(g.build(), n, &[], TOL);
    }

    #[test]
    fn scale_and_clamp() {
        for ty in [ElemType::F32, ElemType::F16] {
            let mut g = GraphBuilder::new();
            let a = g.new_tensor(ty, &[45, 7, 3]);
            let s = g.scale(a, 0.125, -1.5);
            let c = g.clamp(s, -1.75, 0.25);
            let graph = g.build();
            assert_close(graph.clone(), s, &[], TOL);
            assert_close(graph, c, &[], TOL);
        }
        // min > max: everything becomes min, as in ggml; no panic.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[10]);
        let c = g.clamp(a, 1.0, -1.0);
        let (cpu, _) = super::super::ew_testutil::run_both(g.build(), c, &[], 3);
        assert!(cpu.iter().all(|&v| v == 1.0), "{cpu:?}");
    }

    fn unary_node(op: Op) -> (tandem_graph::Graph, TensorId) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[8, 2]);
        let n = match op {
            Op::Scale => g.scale(a, 2.0, 0.0),
            _ => g.unary(a, UnaryOp::Relu).unwrap(),
        };
        (g.build(), n)
    }

    #[test]
    fn rejects_unknown_ops_and_types() {
        let (g, n) = unary_node(Op::Unary);
        let srcs = g.srcs(n);
        let mut dst = g.tensor(n).clone();
        dst.op_params[0] = 99;
        let e = super::check(&dst, &srcs).unwrap_err();
        assert!(e.reason.contains("99"), "{e}");
        assert!(crate::reference::check(&dst, &srcs).unwrap_err().reason.contains("99"));

        let mut dst = g.tensor(n).clone();
        dst.ty = ElemType::Q8_0;
        assert!(super::check(&dst, &srcs).unwrap_err().reason.contains("q8_0"));

        let (g, n) = unary_node(Op::Scale);
        let mut dst = g.tensor(n).clone();
        dst.ne = [8, 3, 1, 1];
        assert!(super::check(&dst, &g.srcs(n)).is_err());
        assert!(super::check(g.tensor(n), &[None; tandem_graph::MAX_SRC]).is_err());
    }
}
