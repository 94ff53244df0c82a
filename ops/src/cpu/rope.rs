//! ROPE, normal (adjacent pairs) and neox (pairs half a rotation apart) modes, with freq
//! factors and YaRN, over f32 or f16 rows of `[head_dim, n_head, n_tokens, n_seq]`.
//!
//! The rotation angles of a token are computed once per task and token, in f64 from the
//! closed form `pos * base^(-2k/n_dims)`, then rounded to f32: ggml multiplies up `theta` in
//! f32, whose error grows with the position, so this stays closer to the exact result.
//! Elements outside `[n_offs, n_offs + n_dims)` are copied.

use super::rs_rowio::{elements_disjoint, load_f32, row_ptr, split_row, store_f32};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::op::{ROPE_TYPE_MROPE, ROPE_TYPE_NEOX, ROPE_TYPE_NORMAL};
use tandem_graph::params::RopeParams;
use tandem_graph::{ElemType, Tensor};

/// `op_params` word holding the first rotated dimension (ggml's `ggml_rope_set_offset`).
const N_OFFS_PARAM: usize = 15;

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let pos = need(dst, srcs, 1)?;
    ensure(matches!(a.ty, ElemType::F32 | ElemType::F16), dst, srcs, || {
        format!("src0 must be f32 or f16, not {}", a.ty)
    })?;
    ensure(dst.ty == a.ty && dst.ne == a.ne, dst, srcs, || {
        "dst must have src0's type and shape".into()
    })?;
    let p = RopeParams::read(dst);
    ensure(p.mode & ROPE_TYPE_MROPE == 0, dst, srcs, || {
        format!("rope mode {} (multi-section or vision) is not supported", p.mode)
    })?;
    ensure(
        p.mode == ROPE_TYPE_NORMAL || p.mode == ROPE_TYPE_NEOX,
        dst,
        srcs,
        || format!("rope mode {} is not supported", p.mode),
    )?;
    ensure(
        pos.ty == ElemType::I32 && pos.ne[0] == a.ne[2] && pos.nelements() == pos.ne[0],
        dst,
        srcs,
        || "positions (src1) must be an i32 vector of src0.ne2 entries".into(),
    )?;
    let n_offs = dst.param_i32(N_OFFS_PARAM);
    ensure(
        p.n_dims >= 0 && p.n_dims % 2 == 0 && n_offs >= 0 && n_offs % 2 == 0,
        dst,
        srcs,
        || format!("n_dims {} and offset {n_offs} must be even and >= 0", p.n_dims),
    )?;
    ensure((n_offs + p.n_dims) as i64 <= a.ne[0], dst, srcs, || {
        format!("offset {n_offs} + n_dims {} exceeds ne0 {}", p.n_dims, a.ne[0])
    })?;
    if let Some(ff) = srcs[2] {
        ensure(
            ff.ty == ElemType::F32 && ff.ne[0] >= (p.n_dims / 2) as i64,
            dst,
            srcs,
            || format!("freq factors (src2) must be f32 with at least {} entries", p.n_dims / 2),
        )?;
    }
    ensure(elements_disjoint(dst), dst, srcs, || "dst elements overlap".into())
}

/// Per-run constants of the angle computation.
struct Angles {
    /// `base^(-2k/n_dims)` for each pair k.
    inv_freq: Vec<f64>,
    /// `1 / freq_factor[k]` (all 1 without src2).
    inv_factor: Vec<f64>,
    freq_scale: f64,
    ext_factor: f64,
    mscale: f64,
    /// YaRN's ramp between these pair indices.
    corr: [f32; 2],
}

impl Angles {
    /// # Safety
    /// `ff`, when present, holds at least `n_dims/2` readable f32.
    unsafe fn new(p: &RopeParams, ff: Option<&Tensor>) -> Angles {
        let half = (p.n_dims / 2) as usize;
        let base = p.freq_base as f64;
        let inv_freq = (0..half)
            .map(|k| base.powf(-2.0 * k as f64 / p.n_dims as f64))
            .collect();
        let inv_factor = (0..half)
            .map(|k| match ff {
                // SAFETY: k < n_dims/2 <= ff.ne0 (checked; caller guarantees the bytes).
                Some(t) => 1.0 / unsafe { ((t.data + k * t.nb[0]) as *const f32).read_unaligned() } as f64,
                None => 1.0,
            })
            .collect();
        let mut mscale = p.attn_factor as f64;
        if p.ext_factor != 0.0 {
            mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale as f64).ln();
        }
        Angles {
            inv_freq,
            inv_factor,
            freq_scale: p.freq_scale as f64,
            ext_factor: p.ext_factor as f64,
            mscale,
            corr: yarn_corr_dims(p),
        }
    }

    /// cos and sin of every pair's angle for position `pos`, scaled by the magnitude correction.
    fn fill(&self, pos: f64, cos: &mut [f32], sin: &mut [f32]) {
        for (k, (co, si)) in cos.iter_mut().zip(sin.iter_mut()).enumerate() {
            let extrap = pos * self.inv_freq[k] * self.inv_factor[k];
            let interp = self.freq_scale * extrap;
            let theta = if self.ext_factor != 0.0 {
                let mix = yarn_ramp(self.corr, k) as f64 * self.ext_factor;
                interp * (1.0 - mix) + extrap * mix
            } else {
                interp
            };
            let (s, c) = theta.sin_cos();
            *co = (c * self.mscale) as f32;
            *si = (s * self.mscale) as f32;
        }
    }
}

/// The pair index where a rotation of `n_rot` turns completes within `n_ctx_orig` positions,
/// computed in f32 as ggml does (the floor/ceil below make the exact rounding matter).
fn yarn_corr_dims(p: &RopeParams) -> [f32; 2] {
    let dim = |n_rot: f32| {
        p.n_dims as f32 * (p.n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln() / (2.0 * p.freq_base.ln())
    };
    let start = dim(p.beta_fast).floor();
    let end = dim(p.beta_slow).ceil();
    [start.max(0.0), end.min(p.n_dims as f32 - 1.0)]
}

/// 1 below `corr[0]`, 0 above `corr[1]`, linear between.
fn yarn_ramp(corr: [f32; 2], k: usize) -> f32 {
    let y = (k as f32 - corr[0]) / (corr[1] - corr[0]).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (Some(a), Some(pos)) = (srcs[0], srcs[1]) else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    let p = RopeParams::read(dst);
    // SAFETY: src2 was checked to hold n_dims/2 f32.
    let angles = unsafe { Angles::new(&p, srcs[2]) };
    let n_offs = dst.param_i32(N_OFFS_PARAM) as usize;
    let half = (p.n_dims / 2) as usize;
    let neox = p.mode == ROPE_TYPE_NEOX;
    let ne0 = a.ne[0] as usize;
    let nrows = a.nrows() as usize;
    // Each row computes its angles' cos and sin (tens of operations per pair) and rotates.
    ctx.par_chunks_work(nrows, 4, nrows * ne0 * 8, |start, end| {
        let mut row = vec![0f32; ne0];
        // Separate cos and sin arrays let the neox loop vectorize.
        let mut cos = vec![0f32; half];
        let mut sin = vec![0f32; half];
        let mut token = -1i64;
        for r in start..end {
            let (i1, i2, i3) = split_row(a.ne, r);
            if i2 != token {
                // SAFETY: i2 < pos.ne0 (checked shape).
                let at = unsafe { ((pos.data + i2 as usize * pos.nb[0]) as *const i32).read_unaligned() };
                angles.fill(at as f64, &mut cos, &mut sin);
                token = i2;
            }
            // SAFETY: row r of `a` is readable; row r of `dst` is written by this task only
            // (elements disjoint, checked), after the whole row was read.
            unsafe { load_f32(a.ty, row_ptr(a, i1, i2, i3), a.nb[0], &mut row) };
            let x = &mut row[n_offs..n_offs + 2 * half];
            if neox {
                let (lo, hi) = x.split_at_mut(half);
                for ((x0, x1), (&c, &s)) in lo.iter_mut().zip(hi.iter_mut()).zip(cos.iter().zip(&sin)) {
                    let (u, v) = (*x0, *x1);
                    *x0 = u * c - v * s;
                    *x1 = u * s + v * c;
                }
            } else {
                for (k, pair) in x.chunks_exact_mut(2).enumerate() {
                    let (u, v) = (pair[0], pair[1]);
                    pair[0] = u * cos[k] - v * sin[k];
                    pair[1] = u * sin[k] + v * cos[k];
                }
            }
            // SAFETY: as above.
            unsafe { store_f32(dst.ty, row_ptr(dst, i1, i2, i3), dst.nb[0], &row) };
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::rs_testutil::{both_reject, cpu_vs_ref, nmse, rng, Mem};
    use rand::Rng;
    use tandem_graph::params::RopeParams;
    use tandem_graph::{ElemType, GraphBuilder, TensorId};

    /// x [head_dim, 3, n_tok, 2] of `ty` with random positions below `max_pos`.
    fn rope_case(ty: ElemType, head_dim: i64, n_tok: i64, p: RopeParams, ff: bool, max_pos: i32) -> (Mem, TensorId) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ty, &[head_dim, 3, n_tok, 2]);
        let pos = g.new_tensor(ElemType::I32, &[n_tok]);
        let f = ff.then(|| g.new_tensor(ElemType::F32, &[p.n_dims as i64 / 2]));
        let d = g.rope(a, pos, f, p).unwrap();
        let mut m = Mem::new(g.build());
        m.fill_uniform(a, -2.0, 2.0, 31);
        let mut r = rng(32);
        m.fill(pos, |_| r.random_range(0..max_pos) as f64);
        if let Some(f) = f {
            m.fill_uniform(f, 0.5, 4.0, 33);
        }
        (m, d)
    }

    fn yarn(n_dims: i32, neox: bool) -> RopeParams {
        RopeParams {
            freq_scale: 0.25,
            ext_factor: 1.0,
            attn_factor: 1.0,
            n_ctx_orig: 2048,
            ..RopeParams::llama(n_dims, neox)
        }
    }

    #[test]
    fn modes_types_and_partial_dims() {
        for ty in [ElemType::F32, ElemType::F16] {
            for neox in [false, true] {
                for (head_dim, n_dims) in [(64, 64), (80, 32), (18, 6)] {
                    for ff in [false, true] {
                        for p in [RopeParams::llama(n_dims, neox), yarn(n_dims, neox)] {
                            let (m, d) = rope_case(ty, head_dim, 7, p, ff, 5000);
                            let (c, r) = cpu_vs_ref(&m, d);
                            let e = nmse(&c, &r);
                            assert!(e <= 1e-7, "{ty} neox {neox} {head_dim}/{n_dims} ff {ff}: nmse {e}");
                            // The tail past n_dims is a plain copy.
                            let x = m.read(TensorId(0));
                            let tail = n_dims as usize..head_dim as usize;
                            assert_eq!(c[tail.clone()], x[tail]);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn offset_and_strided_source() {
        let mut g = GraphBuilder::new();
        // q of a fused qkv: 4 heads of 16 taken from rows of 96 elements.
        let qkv = g.new_tensor(ElemType::F32, &[96, 5]);
        let q = g.view(qkv, &[16, 4, 5], &[64, 384], 0).unwrap();
        let pos = g.new_tensor(ElemType::I32, &[5]);
        let d = g.rope(q, pos, None, RopeParams::llama(8, true)).unwrap();
        let mut m = Mem::new(g.build());
        m.g.tensor_mut(d).set_param_i32(super::N_OFFS_PARAM, 4);
        m.fill_uniform(qkv, -1.0, 1.0, 40);
        m.fill(pos, |i| (i[0] * 37 + 3) as f64);
        let (c, r) = cpu_vs_ref(&m, d);
        assert!(nmse(&c, &r) <= 1e-7);
        let x = m.read(q);
        assert_eq!(&c[..4], &x[..4]);
        assert_eq!(&c[12..16], &x[12..16]);
        assert_ne!(c[4], x[4]);
    }

    #[test]
    fn unsupported_modes_and_bad_params() {
        let (mut m, d) = rope_case(ElemType::F32, 16, 3, RopeParams::llama(16, false), true, 10);
        for (mode, what) in [(8, "rope mode 8"), (24, "rope mode 24"), (1, "rope mode 1")] {
            m.g.tensor_mut(d).set_param_i32(2, mode);
            both_reject(&m, d, what);
        }
        m.g.tensor_mut(d).set_param_i32(2, 0);
        m.g.tensor_mut(d).set_param_i32(1, 15);
        both_reject(&m, d, "n_dims 15");
        m.g.tensor_mut(d).set_param_i32(1, 18);
        both_reject(&m, d, "exceeds ne0");
        m.g.tensor_mut(d).set_param_i32(1, 16);
        m.g.tensor_mut(TensorId(2)).ne[0] = 7;
        both_reject(&m, d, "freq factors");
        m.g.tensor_mut(TensorId(2)).ne[0] = 8;
        m.g.tensor_mut(TensorId(1)).ne[0] = 2;
        both_reject(&m, d, "positions");
    }
}
