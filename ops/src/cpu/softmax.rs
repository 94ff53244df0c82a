//! SOFT_MAX: `softmax(x * scale + slope * mask)` over each f32 row, with an optional f16/f32
//! mask (row i01 of plane (i02 % m2, i03 % m3)), ALiBi slopes per head (`i02`) when
//! `max_bias > 0`, and optional per-head sinks: one extra logit that joins the max and the sum
//! but has no output. As in ggml, a row whose logits are all -inf (and no sink) comes out NaN.

use super::rs_expf::exp_sub_sum;
use super::rs_rowio::{elements_disjoint, load_f32, row_ptr, split_row, store_f32};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::params::SoftMaxParams;
use tandem_graph::{ElemType, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    ensure(a.ty == ElemType::F32 && dst.ty == ElemType::F32, dst, srcs, || {
        "src0 and dst must be f32".into()
    })?;
    ensure(a.ne == dst.ne, dst, srcs, || "dst must have src0's shape".into())?;
    let p = SoftMaxParams::read(dst);
    ensure(p.scale.is_finite() && p.max_bias.is_finite(), dst, srcs, || {
        format!("scale {} and max_bias {} must be finite", p.scale, p.max_bias)
    })?;
    if let Some(m) = srcs[1] {
        ensure(matches!(m.ty, ElemType::F16 | ElemType::F32), dst, srcs, || {
            format!("mask (src1) must be f16 or f32, not {}", m.ty)
        })?;
        ensure(
            m.ne[0] == a.ne[0]
                && m.ne[1] >= a.ne[1]
                && m.ne[2] > 0
                && m.ne[3] > 0
                && a.ne[2] % m.ne[2] == 0
                && a.ne[3] % m.ne[3] == 0,
            dst,
            srcs,
            || "mask must be [ne0, >= ne1, a divisor of ne2, a divisor of ne3]".into(),
        )?;
    } else {
        ensure(p.max_bias <= 0.0, dst, srcs, || "max_bias > 0 needs a mask".into())?;
    }
    if let Some(s) = srcs[2] {
        ensure(s.ty == ElemType::F32 && s.ne[0] >= a.ne[2], dst, srcs, || {
            "sinks (src2) must be f32 with one value per head (ne2)".into()
        })?;
    }
    ensure(elements_disjoint(dst), dst, srcs, || "dst elements overlap".into())
}

/// ALiBi slope of head `h` of `n_head` (1 without a bias).
fn alibi_slope(max_bias: f32, n_head: u32, h: u32) -> f32 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    // Heads beyond the largest power of two get the odd powers of a second, gentler base.
    let n_log2 = 1u32 << (n_head as f32).log2().floor() as u32;
    let m0 = 2f32.powf(-max_bias / n_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_log2 as f32);
    if h < n_log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h - n_log2) as i32 + 1)
    }
}

/// Largest value of `x` (-inf when empty); NaN is skipped. Kept in independent lanes so the
/// comparison chain vectorizes.
fn row_max(x: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] = if c[l] > acc[l] { c[l] } else { acc[l] };
        }
    }
    let tail = chunks.remainder().iter().copied();
    acc.into_iter().chain(tail).fold(f32::NEG_INFINITY, f32::max)
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let Some(a) = srcs[0] else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    let (mask, sinks) = (srcs[1], srcs[2]);
    let p = SoftMaxParams::read(dst);
    let ne0 = a.ne[0] as usize;
    let n_head = a.ne[2] as u32;
    let nrows = a.nrows() as usize;
    // Max, exp and scale: a few operations per element.
    ctx.par_chunks_work(nrows, 4, nrows * ne0 * 4, |start, end| {
        let mut w = vec![0f32; ne0];
        let mut m = vec![0f32; ne0];
        let mut e = vec![0f32; ne0];
        for r in start..end {
            let (i1, i2, i3) = split_row(a.ne, r);
            // SAFETY: row r of `a` is readable.
            unsafe { load_f32(ElemType::F32, row_ptr(a, i1, i2, i3), a.nb[0], &mut w) };
            if let Some(mt) = mask {
                let slope = alibi_slope(p.max_bias, n_head, i2 as u32);
                let mrow = row_ptr(mt, i1, i2 % mt.ne[2], i3 % mt.ne[3]);
                // SAFETY: i1 < a.ne1 <= mask.ne1 and the plane indices are reduced modulo the
                // mask's dims, so the row is within the mask.
                unsafe { load_f32(mt.ty, mrow, mt.nb[0], &mut m) };
                w.iter_mut().zip(&m).for_each(|(v, &mv)| *v = *v * p.scale + slope * mv);
            } else if p.scale != 1.0 {
                w.iter_mut().for_each(|v| *v *= p.scale);
            }
            let mut max = row_max(&w);
            let sink = sinks.map(|s| {
                // SAFETY: i2 < a.ne2 <= sinks.ne0 (checked).
                unsafe { ((s.data + i2 as usize * s.nb[0]) as *const f32).read_unaligned() }
            });
            if let Some(sv) = sink {
                max = max.max(sv);
            }
            let mut sum = exp_sub_sum(&w, max, &mut e);
            if let Some(sv) = sink {
                sum += ((sv - max) as f64).exp();
            }
            let inv = (1.0 / sum) as f32;
            e.iter_mut().for_each(|v| *v *= inv);
            // SAFETY: row r of `dst` is written by this task only (elements disjoint, checked).
            unsafe { store_f32(ElemType::F32, row_ptr(dst, i1, i2, i3), dst.nb[0], &e) };
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::rs_testutil::{both_reject, cpu_vs_ref, nmse, rng, Mem};
    use rand::Rng;
    use tandem_graph::{ElemType, GraphBuilder, TensorId};

    struct Case {
        ne: [i64; 4],
        mask: Option<(ElemType, [i64; 4])>,
        sinks: bool,
        scale: f32,
        max_bias: f32,
    }

    /// Builds and fills a case; the mask has some -inf entries (never a whole row).
    fn build(c: &Case) -> (Mem, TensorId) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &c.ne);
        let m = c.mask.map(|(ty, ne)| g.new_tensor(ty, &ne));
        let s = c.sinks.then(|| g.new_tensor(ElemType::F32, &[c.ne[2]]));
        let d = g.soft_max(a, m, s, c.scale, c.max_bias).unwrap();
        let mut mem = Mem::new(g.build());
        mem.fill_uniform(a, -5.0, 5.0, 51);
        if let Some(m) = m {
            let mut r = rng(52);
            mem.fill(m, |i| {
                if i[0] > 0 && r.random_range(0..4) == 0 {
                    f64::NEG_INFINITY
                } else {
                    r.random_range(-2.0..2.0)
                }
            });
        }
        if let Some(s) = s {
            mem.fill_uniform(s, -1.0, 3.0, 53);
        }
        (mem, d)
    }

    #[test]
    fn masks_sinks_alibi() {
        let f16 = ElemType::F16;
        let f32 = ElemType::F32;
        let cases = [
            Case {
                ne: [1, 1, 1, 1],
                mask: None,
                sinks: false,
                scale: 1.0,
                max_bias: 0.0,
            },
            Case {
                ne: [37, 5, 3, 2],
                mask: None,
                sinks: false,
                scale: 0.3,
                max_bias: 0.0,
            },
            Case {
                ne: [37, 5, 3, 2],
                mask: Some((f16, [37, 8, 1, 1])),
                sinks: false,
                scale: 0.125,
                max_bias: 0.0,
            },
            Case {
                ne: [64, 4, 6, 2],
                mask: Some((f32, [64, 4, 3, 1])),
                sinks: true,
                scale: 1.0,
                max_bias: 0.0,
            },
            Case {
                ne: [19, 3, 6, 2],
                mask: Some((f16, [19, 3, 1, 2])),
                sinks: false,
                scale: 0.5,
                max_bias: 8.0,
            },
            Case {
                ne: [300, 2, 12, 1],
                mask: Some((f32, [300, 2, 12, 1])),
                sinks: true,
                scale: 0.7,
                max_bias: 4.0,
            },
            Case {
                ne: [4099, 2, 2, 1],
                mask: None,
                sinks: true,
                scale: 1.0,
                max_bias: 0.0,
            },
        ];
        for (k, c) in cases.iter().enumerate() {
            let (m, d) = build(c);
            let (a, b) = cpu_vs_ref(&m, d);
            let e = nmse(&a, &b);
            assert!(e <= 1e-6, "case {k}: nmse {e}");
            if !c.sinks {
                let row: f64 = a[..c.ne[0] as usize].iter().sum();
                assert!((row - 1.0).abs() < 1e-5, "case {k}: row sums to {row}");
            }
        }
    }

    #[test]
    fn all_masked_row_is_nan_like_ggml_unless_a_sink_exists() {
        for sinks in [false, true] {
            let c = Case {
                ne: [8, 2, 1, 1],
                mask: Some((ElemType::F32, [8, 2, 1, 1])),
                sinks,
                scale: 1.0,
                max_bias: 0.0,
            };
            let (mut m, d) = build(&c);
            m.fill(TensorId(1), |i| if i[1] == 0 { f64::NEG_INFINITY } else { 0.0 });
            let r = m.duplicate();
            m.run_cpu(d).unwrap();
            r.run_ref(d).unwrap();
            let (a, b) = (m.read(d), r.read(d));
            for v in [&a, &b] {
                if sinks {
                    assert!(v[..8].iter().all(|&x| x == 0.0), "{v:?}");
                } else {
                    assert!(v[..8].iter().all(|x| x.is_nan()), "{v:?}");
                }
                assert!(v[8..].iter().all(|x| x.is_finite()));
            }
        }
    }

    #[test]
    fn shape_and_type_errors() {
        let c = Case {
            ne: [8, 3, 4, 1],
            mask: Some((ElemType::F16, [8, 3, 2, 1])),
            sinks: true,
            scale: 1.0,
            max_bias: 0.0,
        };
        let (mut m, d) = build(&c);
        m.g.tensor_mut(TensorId(1)).ne[1] = 2;
        both_reject(&m, d, "mask");
        m.g.tensor_mut(TensorId(1)).ne[1] = 3;
        m.g.tensor_mut(TensorId(1)).ne[2] = 3;
        both_reject(&m, d, "mask");
        m.g.tensor_mut(TensorId(1)).ne[2] = 2;
        m.g.tensor_mut(TensorId(1)).ty = ElemType::BF16;
        both_reject(&m, d, "bf16");
        m.g.tensor_mut(TensorId(1)).ty = ElemType::F16;
        m.g.tensor_mut(TensorId(2)).ne[0] = 3;
        both_reject(&m, d, "sinks");
        m.g.tensor_mut(TensorId(2)).ne[0] = 4;
        m.g.tensor_mut(d).ty = ElemType::F16;
        both_reject(&m, d, "f32");
        m.g.tensor_mut(d).ty = ElemType::F32;
        m.g.tensor_mut(d).src[1] = None;
        m.g.tensor_mut(d).set_param_f32(1, 2.0);
        both_reject(&m, d, "max_bias");
    }
}
