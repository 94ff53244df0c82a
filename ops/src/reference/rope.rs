//! ROPE reference (normal and neox, freq factors, YaRN), in f64 from the closed-form angle
//! `pos * base^(-2k/n_dims)`. Only YaRN's correction range is taken in f32, as ggml takes it,
//! because it is floored and ceiled.

use crate::data::{read_f64, rows, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::op::{ROPE_TYPE_MROPE, ROPE_TYPE_NEOX};
use tandem_graph::params::RopeParams;
use tandem_graph::{ElemType, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let b = need(dst, srcs, 1)?;
    ensure(matches!(a.ty, ElemType::F32 | ElemType::F16), dst, srcs, || {
        "src0 must be f32 or f16".into()
    })?;
    ensure(dst.ty == a.ty && dst.ne == a.ne, dst, srcs, || {
        "dst differs from src0".into()
    })?;
    let p = RopeParams::read(dst);
    ensure(
        p.mode & ROPE_TYPE_MROPE == 0 && (p.mode == 0 || p.mode == ROPE_TYPE_NEOX),
        dst,
        srcs,
        || format!("rope mode {} is not supported", p.mode),
    )?;
    ensure(b.ty == ElemType::I32 && b.ne == [a.ne[2], 1, 1, 1], dst, srcs, || {
        "positions must be i32 [src0.ne2]".into()
    })?;
    let offs = dst.param_i32(15);
    ensure(
        p.n_dims % 2 == 0 && p.n_dims >= 0 && offs % 2 == 0 && offs >= 0,
        dst,
        srcs,
        || format!("n_dims {} or offset {offs} is odd or negative", p.n_dims),
    )?;
    ensure(offs as i64 + p.n_dims as i64 <= a.ne[0], dst, srcs, || {
        "offset + n_dims exceeds ne0".into()
    })?;
    if let Some(c) = srcs[2] {
        ensure(
            c.ty == ElemType::F32 && 2 * c.ne[0] >= p.n_dims as i64,
            dst,
            srcs,
            || "freq factors must be f32 [>= n_dims/2]".into(),
        )?;
    }
    Ok(())
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (Some(a), Some(b)) = (srcs[0], srcs[1]) else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    let p = RopeParams::read(dst);
    let offs = dst.param_i32(15) as i64;
    let n_dims = p.n_dims as i64;
    let corr = correction_range(&p);
    let mut mscale = p.attn_factor as f64;
    if p.ext_factor != 0.0 {
        mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale as f64).ln();
    }
    for r in rows(a.ne) {
        let pos = read_f64(b, [r[2], 0, 0, 0]);
        let mut x: Vec<f64> = (0..a.ne[0]).map(|i0| read_f64(a, [i0, r[1], r[2], r[3]])).collect();
        for k in 0..n_dims / 2 {
            let factor = match srcs[2] {
                Some(c) => read_f64(c, [k, 0, 0, 0]),
                None => 1.0,
            };
            let extrap = pos * (p.freq_base as f64).powf(-2.0 * k as f64 / n_dims as f64) / factor;
            let interp = p.freq_scale as f64 * extrap;
            let theta = if p.ext_factor != 0.0 {
                let ramp = 1.0 - ((k as f64 - corr.0) / (corr.1 - corr.0).max(0.001)).clamp(0.0, 1.0);
                let mix = ramp * p.ext_factor as f64;
                interp * (1.0 - mix) + extrap * mix
            } else {
                interp
            };
            let (c, s) = (theta.cos() * mscale, theta.sin() * mscale);
            let (i, j) = if p.mode == ROPE_TYPE_NEOX {
                (offs + k, offs + k + n_dims / 2)
            } else {
                (offs + 2 * k, offs + 2 * k + 1)
            };
            let (u, v) = (x[i as usize], x[j as usize]);
            x[i as usize] = u * c - v * s;
            x[j as usize] = u * s + v * c;
        }
        for (i0, v) in x.into_iter().enumerate() {
            write_f64(dst, [i0 as i64, r[1], r[2], r[3]], v);
        }
    }
    Ok(())
}

/// YaRN's `[low, high]` pair indices, in f32 like ggml's `ggml_rope_yarn_corr_dims`.
fn correction_range(p: &RopeParams) -> (f64, f64) {
    let turns_at = |beta: f32| -> f32 {
        let two_pi = 2.0 * std::f32::consts::PI;
        p.n_dims as f32 * (p.n_ctx_orig as f32 / (beta * two_pi)).ln() / (2.0 * p.freq_base.ln())
    };
    let low = turns_at(p.beta_fast).floor().max(0.0);
    let high = turns_at(p.beta_slow).ceil().min(p.n_dims as f32 - 1.0);
    (low as f64, high as f64)
}
