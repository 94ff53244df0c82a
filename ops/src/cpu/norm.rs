//! NORM (`(x - mean) / sqrt(var + eps)`), RMS_NORM (`x / sqrt(mean(x²) + eps)`) and L2_NORM
//! (`x / max(sqrt(Σx²), eps)`) over each row of f32, any strides. As in ggml, the sums are accumulated in f64 and the per-row
//! statistics rounded to f32 before scaling.

use super::rs_rowio::{elements_disjoint, load_f32, row_ptr, split_row, store_f32};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::{params, ElemType, Op, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    ensure(a.ty == ElemType::F32 && dst.ty == ElemType::F32, dst, srcs, || {
        format!("{} takes and gives f32", dst.op)
    })?;
    ensure(a.ne == dst.ne, dst, srcs, || "dst must have src0's shape".into())?;
    let eps = params::norm_eps(dst);
    ensure(eps >= 0.0 && eps.is_finite(), dst, srcs, || {
        format!("eps {eps} must be finite and >= 0")
    })?;
    ensure(elements_disjoint(dst), dst, srcs, || "dst elements overlap".into())
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let Some(a) = srcs[0] else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    let eps = params::norm_eps(dst);
    let ne0 = a.ne[0] as usize;
    let nrows = a.nrows() as usize;
    ctx.par_chunks_work(nrows, 4, nrows * ne0 * 3, |start, end| {
        let mut row = vec![0f32; ne0];
        for r in start..end {
            let (i1, i2, i3) = split_row(a.ne, r);
            // SAFETY: row r of `a` is readable; row r of `dst` is written by this task only
            // (elements are disjoint, checked), and only after the whole row was read.
            unsafe {
                load_f32(ElemType::F32, row_ptr(a, i1, i2, i3), a.nb[0], &mut row);
                match dst.op {
                    Op::RmsNorm => rms_norm_row(&mut row, eps),
                    Op::L2Norm => l2_norm_row(&mut row, eps),
                    _ => norm_row(&mut row, eps),
                }
                store_f32(ElemType::F32, row_ptr(dst, i1, i2, i3), dst.nb[0], &row);
            }
        }
    });
    Ok(())
}

/// Independent partial sums, so the f64 accumulation vectorizes.
const LANES: usize = 8;

/// Σ f(x) accumulated in f64.
#[inline(always)]
fn sum_f64(x: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    let mut acc = [0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] += f(c[l]) as f64;
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f(v) as f64).sum();
    acc.iter().sum::<f64>() + tail
}

fn norm_row(x: &mut [f32], eps: f32) {
    let n = x.len() as f32;
    let mean = sum_f64(x, |v| v) as f32 / n;
    for v in x.iter_mut() {
        *v -= mean;
    }
    let var = (sum_f64(x, |v| v * v) / x.len() as f64) as f32;
    let scale = 1.0 / (var + eps).sqrt();
    for v in x.iter_mut() {
        *v *= scale;
    }
}

fn l2_norm_row(x: &mut [f32], eps: f32) {
    let scale = 1.0 / (sum_f64(x, |v| v * v) as f32).sqrt().max(eps);
    for v in x.iter_mut() {
        *v *= scale;
    }
}

fn rms_norm_row(x: &mut [f32], eps: f32) {
    let mean_sq = (sum_f64(x, |v| v * v) / x.len() as f64) as f32;
    let scale = 1.0 / (mean_sq + eps).sqrt();
    for v in x.iter_mut() {
        *v *= scale;
    }
}

#[cfg(test)]
mod tests {
    use super::super::rs_testutil::{both_reject, cpu_vs_ref, nmse, Mem};
    use tandem_graph::{ElemType, GraphBuilder};

    #[test]
    fn contiguous_rows_of_odd_sizes() {
        for ne0 in [1i64, 7, 8, 33, 4097] {
            for rms in [false, true] {
                let mut g = GraphBuilder::new();
                let a = g.new_tensor(ElemType::F32, &[ne0, 5, 3, 2]);
                let d = if rms { g.rms_norm(a, 1e-6) } else { g.norm(a, 1e-5) };
                let mut m = Mem::new(g.build());
                m.fill_uniform(a, -2.0, 3.0, ne0 as u64);
                let (c, r) = cpu_vs_ref(&m, d);
                let e = nmse(&c, &r);
                assert!(e <= 1e-7, "ne0 {ne0} rms {rms}: nmse {e}");
                if !rms && ne0 == 1 {
                    assert!(c.iter().all(|&v| v == 0.0));
                }
            }
        }
    }

    #[test]
    fn strided_input_and_in_place_view() {
        let mut g = GraphBuilder::new();
        let base = g.new_tensor(ElemType::F32, &[6, 40, 3]);
        // Rows of 40 elements 24 bytes apart: a transposed source.
        let a = g.transpose(base);
        let d1 = g.norm(a, 1e-5);
        let d2 = g.rms_norm(a, 0.0);
        let mut m = Mem::new(g.build());
        m.fill_uniform(base, -1.0, 1.0, 4);
        for d in [d1, d2] {
            let (c, r) = cpu_vs_ref(&m, d);
            assert!(nmse(&c, &r) <= 1e-7);
        }
        // Result written over its own source, as ggml_norm_inplace does.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[50, 4]);
        let d = g.rms_norm(a, 1e-6);
        let mut m = Mem::new(g.build());
        let shared = m.t(a).data;
        m.g.tensor_mut(d).data = shared;
        m.fill_uniform(a, -1.0, 1.0, 5);
        let x = m.read(a);
        m.run_cpu(d).unwrap();
        let y = m.read(d);
        let s = (x[..50].iter().map(|v| v * v).sum::<f64>() / 50.0 + 1e-6).sqrt();
        assert!((y[3] - x[3] / s).abs() < 1e-6);
    }

    #[test]
    fn bad_eps_and_types() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[8, 2]);
        let d = g.norm(a, -1.0);
        let mut m = Mem::new(g.build());
        both_reject(&m, d, "eps -1");
        m.g.tensor_mut(d).set_param_f32(0, f32::NAN);
        both_reject(&m, d, "eps NaN");
        m.g.tensor_mut(d).set_param_f32(0, 1e-5);
        m.g.tensor_mut(a).ty = ElemType::F16;
        both_reject(&m, d, "f32");
        m.g.tensor_mut(a).ty = ElemType::F32;
        m.g.tensor_mut(d).ne[1] = 1;
        both_reject(&m, d, "shape");
    }
}
