//! AVX2+FMA+F16C dot kernels of the k-quant formats against q8_K.
//!
//! Each 32-element group of weight quants is made unsigned (0..63), multiplied with the
//! activation bytes by `maddubs` into 16 i16 pair sums (8 per 16-element sub-block), scaled per
//! sub-block by one `madd`, and summed as i32 over the whole 256-element block; one FMA per
//! block applies `d_w * d_a`. Offsets (the mins of q2_K/q4_K/q5_K, the -4 of q3_K and the -32
//! of q6_K) meet the activation through q8_K's 16-element sums (`bsums`) once per block.

use super::act::Q8_K_BYTES;
use super::avx2::{f16_at, f16_pair, hsum_ps, hsum_ps128, load128, load256};
use super::scalar_kquant::{k4_scale_min, q3_k_scales};
use std::arch::x86_64::*;
use tandem_graph::blocks::QK_K;

/// Offsets inside a q8_K block.
const A_QS: usize = 4;
const A_BSUMS: usize = 4 + QK_K;

/// The activation scale of the q8_K block at `ab`.
///
/// # Safety
/// `ab` points at a q8_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn act_scale(ab: *const u8) -> f32 {
    // SAFETY: a q8_K block starts with its f32 scale.
    unsafe { ab.cast::<f32>().read_unaligned() }
}

/// A register whose low 8 i16 are `lo` and high 8 are `hi`: scales two 16-element sub-blocks
/// of one 32-byte `maddubs` result.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_scales(lo: i16, hi: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
}

/// `Σ q[i] * y[i]` per 16-element half, weighted by `lo`/`hi`, in 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scaled_dot(q: __m256i, y: __m256i, lo: i16, hi: i16) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), pair_scales(lo, hi))
}

/// 16 i16 sums of the activation block at `ab`.
///
/// # Safety
/// `ab` points at a q8_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bsums(ab: *const u8) -> __m256i {
    // SAFETY: the 32 bytes of sums end the block.
    unsafe { load256(ab.add(A_BSUMS)) }
}

/// # Safety
/// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q2_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    let (mut acc, mut acc_min) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let three = _mm256_set1_epi8(3);
    for i in 0..n / QK_K {
        // SAFETY: block i is within the caller's n/256 blocks of each row; every offset below
        // stays inside an 84-byte q2_K block (scales 0..16, qs 16..80, d 80, dmin 82) and a q8_K
        // block.
        unsafe {
            let (wb, ab) = (w.add(i * 84), a.add(i * Q8_K_BYTES));
            let da = act_scale(ab);
            let sc_bytes = load128(wb);
            let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc_bytes, 4), _mm_set1_epi8(0xF)));
            let min_sum = _mm256_madd_epi16(mins, bsums(ab));
            let (d, dmin) = f16_pair(wb.add(80));
            acc_min = _mm256_fmadd_ps(_mm256_set1_ps(da * dmin), _mm256_cvtepi32_ps(min_sum), acc_min);
            let sc = std::slice::from_raw_parts(wb, 16);
            let mut sumi = _mm256_setzero_si256();
            for h in 0..2 {
                let q2 = load256(wb.add(16 + 32 * h));
                for j in 0..4 {
                    let q = _mm256_and_si256(_mm256_srl_epi16(q2, _mm_cvtsi32_si128(2 * j as i32)), three);
                    let y = load256(ab.add(A_QS + 128 * h + 32 * j));
                    let s = 8 * h + 2 * j;
                    let p = scaled_dot(q, y, (sc[s] & 0xF) as i16, (sc[s + 1] & 0xF) as i16);
                    sumi = _mm256_add_epi32(sumi, p);
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(da * d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    hsum_ps(acc) - hsum_ps(acc_min)
}

/// # Safety
/// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q3_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let (three, one) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
    for i in 0..n / QK_K {
        // SAFETY: block i is within the caller's blocks; offsets stay inside a 110-byte q3_K
        // block (hmask 0..32, qs 32..96, scales 96..108, d 108) and a q8_K block.
        unsafe {
            let (wb, ab) = (w.add(i * 110), a.add(i * Q8_K_BYTES));
            let sc = q3_k_scales(std::slice::from_raw_parts(wb.add(96), 12));
            let mut sc16 = [0i16; 16];
            for (d, s) in sc16.iter_mut().zip(sc) {
                *d = s as i16;
            }
            // Quants are stored as q + 4 (0..7); take 4 * Σ scale * bsum back out.
            let offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(sc16.as_ptr().cast()), bsums(ab)), 2);
            let hmask = load256(wb);
            let mut sumi = _mm256_setzero_si256();
            for h in 0..2 {
                let q3 = load256(wb.add(32 + 32 * h));
                for j in 0..4 {
                    let low = _mm256_and_si256(_mm256_srl_epi16(q3, _mm_cvtsi32_si128(2 * j as i32)), three);
                    let hbit = _mm256_and_si256(_mm256_srl_epi16(hmask, _mm_cvtsi32_si128((4 * h + j) as i32)), one);
                    let q = _mm256_or_si256(low, _mm256_slli_epi16(hbit, 2));
                    let y = load256(ab.add(A_QS + 128 * h + 32 * j));
                    let s = 8 * h + 2 * j;
                    sumi = _mm256_add_epi32(sumi, scaled_dot(q, y, sc16[s], sc16[s + 1]));
                }
            }
            sumi = _mm256_sub_epi32(sumi, offset);
            let d = act_scale(ab) * f16_at(wb.add(108));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    hsum_ps(acc)
}

/// q4_K and q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; `WB` is the block size and
/// `QH` whether a fifth bit plane (q5_K) precedes the nibbles.
///
/// # Safety
/// See [`super::DotFn`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_k4<const WB: usize, const QH: bool>(n: usize, w: *const u8, a: *const u8) -> f32 {
    let (mut acc, mut acc_min) = (_mm256_setzero_ps(), _mm_setzero_ps());
    let (low4, one) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(1));
    let qs_at = if QH { 48 } else { 16 };
    for i in 0..n / QK_K {
        // SAFETY: block i is within the caller's blocks; offsets stay inside the weight block
        // (d 0, dmin 2, scales 4..16, [qh 16..48], qs 128 bytes at qs_at) and a q8_K block.
        unsafe {
            let (wb, ab) = (w.add(i * WB), a.add(i * Q8_K_BYTES));
            let packed = std::slice::from_raw_parts(wb.add(4), 12);
            let (mut sc, mut mn) = ([0i16; 8], [0u8; 16]);
            for j in 0..8 {
                let (s, m) = k4_scale_min(j, packed);
                sc[j] = s as i16;
                mn[j] = m;
            }
            let da = act_scale(ab);
            // Σ min_j * (bsum[2j] + bsum[2j+1]) for the 8 sub-blocks of 32.
            let bs = bsums(ab);
            let pair_sums = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            let min_sum = _mm_madd_epi16(_mm_cvtepu8_epi16(load128(mn.as_ptr())), pair_sums);
            let (d, dmin) = f16_pair(wb);
            acc_min = _mm_fmadd_ps(_mm_set1_ps(da * dmin), _mm_cvtepi32_ps(min_sum), acc_min);
            let qh = if QH {
                load256(wb.add(16))
            } else {
                _mm256_setzero_si256()
            };
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let q4 = load256(wb.add(qs_at + 32 * j));
                let mut lo = _mm256_and_si256(q4, low4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
                if QH {
                    let bl = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32)), one);
                    let bh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32 + 1)), one);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(bl, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(bh, 4));
                }
                let y0 = load256(ab.add(A_QS + 64 * j));
                let y1 = load256(ab.add(A_QS + 64 * j + 32));
                let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_set1_epi16(sc[2 * j]));
                let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), _mm256_set1_epi16(sc[2 * j + 1]));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(da * d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    hsum_ps(acc) - hsum_ps128(acc_min)
}

/// # Safety
/// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { dot_k4::<144, false>(n, w, a) }
}

/// # Safety
/// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: forwarded.
    unsafe { dot_k4::<176, true>(n, w, a) }
}

/// # Safety
/// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q6_k(n: usize, w: *const u8, a: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let (low4, three) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(3));
    for i in 0..n / QK_K {
        // SAFETY: block i is within the caller's blocks; offsets stay inside a 210-byte q6_K
        // block (ql 0..128, qh 128..192, scales 192..208, d 208) and a q8_K block.
        unsafe {
            let (wb, ab) = (w.add(i * 210), a.add(i * Q8_K_BYTES));
            let sc = std::slice::from_raw_parts(wb.add(192).cast::<i8>(), 16);
            // Quants are stored as q + 32 (0..63); take 32 * Σ scale * bsum back out.
            let sc16 = _mm256_cvtepi8_epi16(load128(wb.add(192)));
            let offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums(ab)), 5);
            let mut sumi = _mm256_setzero_si256();
            for h in 0..2 {
                let ql0 = load256(wb.add(64 * h));
                let ql1 = load256(wb.add(64 * h + 32));
                let qh = load256(wb.add(128 + 32 * h));
                let high = |shift: i32| {
                    let b = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift)), three);
                    _mm256_slli_epi16(b, 4)
                };
                let groups = [
                    _mm256_or_si256(_mm256_and_si256(ql0, low4), high(0)),
                    _mm256_or_si256(_mm256_and_si256(ql1, low4), high(2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), high(4)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), high(6)),
                ];
                for (g, q) in groups.into_iter().enumerate() {
                    let y = load256(ab.add(A_QS + 128 * h + 32 * g));
                    let s = 8 * h + 2 * g;
                    sumi = _mm256_add_epi32(sumi, scaled_dot(q, y, sc[s] as i16, sc[s + 1] as i16));
                }
            }
            sumi = _mm256_sub_epi32(sumi, offset);
            let d = act_scale(ab) * f16_at(wb.add(208));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    hsum_ps(acc)
}
