//! FLASH_ATTN_EXT reference: `softmax(scale · q·kᵀ (softcapped) + slope · mask, sink) · v` per
//! (query, head), in f64 with a plain two-pass softmax over the whole row.

use crate::data::{read_f64, write_f64};
use crate::{OpError, Srcs};
use tandem_graph::params::FlashAttnParams;
use tandem_graph::Tensor;

/// The same admission rules as the CPU kernel, which implement ggml's constructor asserts.
pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    crate::cpu::check(dst, srcs)
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    check(dst, srcs)?;
    let (Some(q), Some(k), Some(v)) = (srcs[0], srcs[1], srcs[2]) else {
        return Err(OpError::new(dst, srcs, "q, k and v are required"));
    };
    let (mask, sinks) = (srcs[3], srcs[4]);
    let p = FlashAttnParams::read(dst);
    let [dk, n_q, n_head, n_seq] = q.ne.map(|n| n as usize);
    let dv = v.ne[0] as usize;
    let n_kv = k.ne[1] as usize;
    let group = n_head / k.ne[2] as usize;
    let seq_per_kv = n_seq / k.ne[3] as usize;
    let slopes = alibi_slopes(n_head, p.max_bias as f64);
    let (scale, softcap) = (p.scale as f64, p.logit_softcap as f64);

    let mut scores: Vec<Option<f64>> = vec![None; n_kv];
    let mut out = vec![0f64; dv];
    for seq in 0..n_seq {
        let kv_seq = seq / seq_per_kv;
        for kv_head in 0..k.ne[2] as usize {
            // Every K/V row of this kv head, expanded once for the whole GQA group.
            let mut krows = Vec::with_capacity(n_kv);
            let mut vrows = Vec::with_capacity(n_kv);
            for j in 0..n_kv {
                krows.push(kv_row(dst, srcs, k, [j, kv_head, kv_seq])?);
                vrows.push(kv_row(dst, srcs, v, [j, kv_head, kv_seq])?);
            }
            for h in kv_head * group..(kv_head + 1) * group {
                for qi in 0..n_q {
                    let qrow: Vec<f64> = (0..dk).map(|d| read_f64(q, idx([d, qi, h, seq]))).collect();
                    for (j, sj) in scores.iter_mut().enumerate() {
                        let bias = match mask {
                            Some(m) => {
                                let at = [j, qi, h % m.ne[2] as usize, seq % m.ne[3] as usize];
                                slopes[h] * read_f64(m, idx(at))
                            }
                            None => 0.0,
                        };
                        *sj = if bias == f64::NEG_INFINITY {
                            None
                        } else {
                            let dot: f64 = qrow.iter().zip(&krows[j]).map(|(a, b)| a * b).sum();
                            let mut x = scale * dot;
                            if softcap != 0.0 {
                                x = softcap * (x / softcap).tanh();
                            }
                            Some(x + bias)
                        };
                    }
                    let sink = sinks.map(|s| read_f64(s, [h as i64, 0, 0, 0]));
                    let max = scores
                        .iter()
                        .flatten()
                        .chain(sink.iter())
                        .copied()
                        .fold(f64::NEG_INFINITY, f64::max);
                    out.fill(0.0);
                    if max != f64::NEG_INFINITY {
                        let mut denom = sink.map_or(0.0, |s| (s - max).exp());
                        for (j, sj) in scores.iter().enumerate() {
                            if let Some(x) = sj {
                                let w = (x - max).exp();
                                denom += w;
                                for (o, vv) in out.iter_mut().zip(&vrows[j]) {
                                    *o += w * vv;
                                }
                            }
                        }
                        for o in out.iter_mut() {
                            *o /= denom;
                        }
                    }
                    // A row with every score masked and no sink stays all zeros, as in ggml.
                    for (e, o) in out.iter().enumerate() {
                        write_f64(dst, idx([e, h, qi, seq]), *o);
                    }
                }
            }
        }
    }
    Ok(())
}

fn idx(i: [usize; 4]) -> [i64; 4] {
    i.map(|x| x as i64)
}

/// Row `at = [row, head, seq]` of k or v as f64; quantized rows go through the block dequantizer.
///
/// # Safety
/// See [`super::compute`]; `at` within the tensor's shape.
unsafe fn kv_row(dst: &Tensor, srcs: &Srcs, t: &Tensor, at: [usize; 3]) -> Result<Vec<f64>, OpError> {
    let n = t.ne[0] as usize;
    let i = idx([0, at[0], at[1], at[2]]);
    if !t.ty.is_quantized() {
        return Ok((0..n).map(|e| read_f64(t, [e as i64, i[1], i[2], i[3]])).collect());
    }
    let bytes = t.ty.row_size(t.ne[0]).unwrap_or(0);
    // SAFETY: the row is contiguous (checked) and inside the tensor's bytes.
    let raw = std::slice::from_raw_parts(crate::data::elem_ptr(t, i) as *const u8, bytes);
    let mut row = vec![0f32; n];
    crate::quant::dequantize_row(t.ty, raw, &mut row)
        .map_err(|e| OpError::new(dst, srcs, format!("dequantizing {}: {e}", t.ty)))?;
    Ok(row.into_iter().map(f64::from).collect())
}

/// ALiBi slope per head: `m0^(h+1)` for the first power-of-two heads, `m1^(2(h-n)+1)` after.
fn alibi_slopes(n_head: usize, max_bias: f64) -> Vec<f64> {
    if max_bias <= 0.0 {
        return vec![1.0; n_head];
    }
    let n_log2 = 1usize << (n_head as f64).log2().floor() as u32;
    let m0 = 2f64.powf(-max_bias / n_log2 as f64);
    let m1 = 2f64.powf(-(max_bias / 2.0) / n_log2 as f64);
    (0..n_head)
        .map(|h| {
            if h < n_log2 {
                m0.powi(h as i32 + 1)
            } else {
                m1.powi(2 * (h - n_log2) as i32 + 1)
            }
        })
        .collect()
}
