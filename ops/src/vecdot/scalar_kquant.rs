//! Scalar dot kernels of the k-quant formats against q8_K. Each block is decoded into 256
//! integer quants, a signed scale and an unsigned min per 16 elements; the mins meet the
//! activation through q8_K's 16-element sums, as in ggml.

use super::act::Q8_K_BYTES;
use super::scalar::{bytes, f16_at};
use tandem_graph::blocks::QK_K;

/// A decoded k-quant block: `x[j] = d * sc[j/16] * q[j] - dmin * mn[j/16]`.
struct Decoded {
    q: [i32; QK_K],
    sc: [i32; 16],
    mn: [i32; 16],
}

fn dot_kquant<const WB: usize>(
    n: usize,
    w: &[u8],
    a: &[u8],
    decode: impl Fn(&[u8], &mut Decoded) -> (f32, f32),
) -> f32 {
    let mut blk = Decoded {
        q: [0; QK_K],
        sc: [0; 16],
        mn: [0; 16],
    };
    let mut sum = 0.0f32;
    for (wb, ab) in w.chunks_exact(WB).zip(a.chunks_exact(Q8_K_BYTES)).take(n / QK_K) {
        let (d, dmin) = decode(wb, &mut blk);
        let da = f32::from_le_bytes([ab[0], ab[1], ab[2], ab[3]]);
        let qa = &ab[4..4 + QK_K];
        let bsums = &ab[4 + QK_K..];
        let (mut isum, mut msum) = (0i32, 0i32);
        for s in 0..16 {
            let part: i32 = (0..16).map(|l| blk.q[16 * s + l] * qa[16 * s + l] as i8 as i32).sum();
            isum += blk.sc[s] * part;
            msum += blk.mn[s] * i16::from_le_bytes([bsums[2 * s], bsums[2 * s + 1]]) as i32;
        }
        sum += d * da * isum as f32 - dmin * da * msum as f32;
    }
    sum
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q2_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract: n/256 blocks of each format.
    let (w, a) = unsafe { (bytes(w, n / QK_K, 84), bytes(a, n / QK_K, Q8_K_BYTES)) };
    dot_kquant::<84>(n, w, a, |b, o| {
        let (scales, qs) = (&b[..16], &b[16..80]);
        for s in 0..16 {
            o.sc[s] = (scales[s] & 0xF) as i32;
            o.mn[s] = (scales[s] >> 4) as i32;
        }
        for h in 0..2 {
            for j in 0..4 {
                for l in 0..32 {
                    o.q[128 * h + 32 * j + l] = ((qs[32 * h + l] >> (2 * j)) & 3) as i32;
                }
            }
        }
        (f16_at(&b[80..]), f16_at(&b[82..]))
    })
}

/// The 16 signed 6-bit scales of a q3_K block (low 4 bits in bytes 0..8, high 2 in 8..12).
pub(super) fn q3_k_scales(s: &[u8]) -> [i32; 16] {
    let mut out = [0i32; 16];
    for i in 0..16 {
        let low = if i < 8 { s[i] & 0xF } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (low | (high << 4)) as i32 - 32;
    }
    out
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q3_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract.
    let (w, a) = unsafe { (bytes(w, n / QK_K, 110), bytes(a, n / QK_K, Q8_K_BYTES)) };
    dot_kquant::<110>(n, w, a, |b, o| {
        let (hmask, qs) = (&b[..32], &b[32..96]);
        o.sc = q3_k_scales(&b[96..108]);
        o.mn = [0; 16];
        for h in 0..2 {
            for j in 0..4 {
                let bit = 1u8 << (4 * h + j);
                for l in 0..32 {
                    let low = ((qs[32 * h + l] >> (2 * j)) & 3) as i32;
                    o.q[128 * h + 32 * j + l] = low - if hmask[l] & bit != 0 { 0 } else { 4 };
                }
            }
        }
        (f16_at(&b[108..]), 0.0)
    })
}

/// Scale and min of sub-block `j` (of 8) from the 12 packed bytes of q4_K/q5_K.
pub(super) fn k4_scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Decodes a q4_K (`qh` empty) or q5_K block whose nibbles start at `qs`.
fn decode_k4(b: &[u8], qh: &[u8], qs: &[u8], o: &mut Decoded) -> (f32, f32) {
    for j in 0..8 {
        let (sc, mn) = k4_scale_min(j, &b[4..16]);
        o.sc[2 * j] = sc as i32;
        o.sc[2 * j + 1] = sc as i32;
        o.mn[2 * j] = mn as i32;
        o.mn[2 * j + 1] = mn as i32;
    }
    for j in 0..4 {
        for l in 0..32 {
            let (mut lo, mut hi) = ((qs[32 * j + l] & 0xF) as i32, (qs[32 * j + l] >> 4) as i32);
            if !qh.is_empty() {
                lo += (((qh[l] >> (2 * j)) & 1) as i32) << 4;
                hi += (((qh[l] >> (2 * j + 1)) & 1) as i32) << 4;
            }
            o.q[64 * j + l] = lo;
            o.q[64 * j + 32 + l] = hi;
        }
    }
    (f16_at(b), f16_at(&b[2..]))
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q4_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract.
    let (w, a) = unsafe { (bytes(w, n / QK_K, 144), bytes(a, n / QK_K, Q8_K_BYTES)) };
    dot_kquant::<144>(n, w, a, |b, o| decode_k4(b, &[], &b[16..144], o))
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q5_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract.
    let (w, a) = unsafe { (bytes(w, n / QK_K, 176), bytes(a, n / QK_K, Q8_K_BYTES)) };
    dot_kquant::<176>(n, w, a, |b, o| decode_k4(b, &b[16..48], &b[48..176], o))
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q6_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract.
    let (w, a) = unsafe { (bytes(w, n / QK_K, 210), bytes(a, n / QK_K, Q8_K_BYTES)) };
    dot_kquant::<210>(n, w, a, |b, o| {
        let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
        for s in 0..16 {
            o.sc[s] = scales[s] as i8 as i32;
        }
        o.mn = [0; 16];
        for h in 0..2 {
            let (ql, qh, q) = (&ql[64 * h..], &qh[32 * h..], &mut o.q[128 * h..]);
            for l in 0..32 {
                q[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                q[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            }
        }
        (f16_at(&b[208..]), 0.0)
    })
}
