//! SOFT_MAX reference in f64: scale, ALiBi-sloped mask, sinks, max-subtracted exponentials.

use crate::data::{read_f64, rows, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::params::SoftMaxParams;
use tandem_graph::{ElemType, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    ensure(a.ty == ElemType::F32 && dst.ty == ElemType::F32, dst, srcs, || {
        "only f32 is supported".into()
    })?;
    ensure(a.ne == dst.ne, dst, srcs, || "dst shape differs from src0".into())?;
    let p = SoftMaxParams::read(dst);
    ensure(p.scale.is_finite() && p.max_bias.is_finite(), dst, srcs, || {
        "scale and max_bias must be finite".into()
    })?;
    match srcs[1] {
        Some(m) => {
            ensure(m.ty == ElemType::F16 || m.ty == ElemType::F32, dst, srcs, || {
                format!("mask type {} is not supported", m.ty)
            })?;
            let fits = m.ne[0] == a.ne[0]
                && m.ne[1] >= a.ne[1]
                && m.ne[2] >= 1
                && m.ne[3] >= 1
                && a.ne[2] % m.ne[2] == 0
                && a.ne[3] % m.ne[3] == 0;
            ensure(fits, dst, srcs, || "mask shape does not broadcast".into())?;
        }
        None => ensure(p.max_bias <= 0.0, dst, srcs, || "max_bias without a mask".into())?,
    }
    if let Some(s) = srcs[2] {
        ensure(s.ty == ElemType::F32 && s.ne[0] >= a.ne[2], dst, srcs, || {
            "sinks must be f32 [>= ne2]".into()
        })?;
    }
    Ok(())
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let Some(a) = srcs[0] else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    let p = SoftMaxParams::read(dst);
    let n_head = a.ne[2];
    let floor_pow2 = 1i64 << (n_head as f64).log2().floor() as u32;
    let base_lo = 2f64.powf(-(p.max_bias as f64) / floor_pow2 as f64);
    let base_hi = 2f64.powf(-(p.max_bias as f64) / 2.0 / floor_pow2 as f64);
    for r in rows(a.ne) {
        let h = r[2];
        let slope = if p.max_bias > 0.0 {
            if h < floor_pow2 {
                base_lo.powi(h as i32 + 1)
            } else {
                base_hi.powi(2 * (h - floor_pow2) as i32 + 1)
            }
        } else {
            1.0
        };
        let logits: Vec<f64> = (0..a.ne[0])
            .map(|i0| {
                let x = read_f64(a, [i0, r[1], r[2], r[3]]) * p.scale as f64;
                match srcs[1] {
                    Some(m) => x + slope * read_f64(m, [i0, r[1], r[2] % m.ne[2], r[3] % m.ne[3]]),
                    None => x,
                }
            })
            .collect();
        let sink = srcs[2].map(|s| read_f64(s, [h, 0, 0, 0]));
        let max = logits.iter().copied().chain(sink).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = logits.iter().chain(sink.iter()).map(|v| (v - max).exp()).sum();
        for (i0, v) in logits.iter().enumerate() {
            write_f64(dst, [i0 as i64, r[1], r[2], r[3]], (v - max).exp() / sum);
        }
    }
    Ok(())
}
