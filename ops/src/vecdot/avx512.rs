//! AVX-512F/BW dot kernels of q8_0 and q4_0 (against q8_0) and of f16, with a VNNI variant of the
//! block kernels.
//!
//! One 512-bit register holds the 32 quants of two consecutive blocks, one block per 256-bit
//! half, so a step multiplies two blocks and folds both scales in with one FMA (the scale vector
//! repeats block i's combined scale in lanes 0..8 and block i+1's in 8..16). Signed weights go
//! through the sign trick (|x| times y with x's sign) because both `maddubs` and `vpdpbusd` need
//! one unsigned operand; q8_0 activations never hold -128, so negating them cannot wrap.

use super::act::Q8_0_BYTES;
use super::avx2::f16_at;
use std::arch::x86_64::*;

/// 32 bytes at `p` into the low half and 32 bytes at `q` into the high half.
///
/// # Safety
/// `p` and `q` point at 32 readable bytes each.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn load_pair(p: *const u8, q: *const u8) -> __m512i {
    // SAFETY: the caller vouches for 32 bytes at each pointer; loadu needs no alignment.
    let (lo, hi) = unsafe { (_mm256_loadu_si256(p.cast()), _mm256_loadu_si256(q.cast())) };
    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
}

/// 32 bytes at `p` into the low half; the high half is zero.
///
/// # Safety
/// `p` points at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn load_low(p: *const u8) -> __m512i {
    // SAFETY: the caller vouches for 32 bytes; loadu needs no alignment.
    let lo = unsafe { _mm256_loadu_si256(p.cast()) };
    _mm512_inserti64x4(_mm512_setzero_si512(), lo, 0)
}

/// The combined scales of two block pairs: `f16(w0) * f16(a0)` in lanes 0..8 and
/// `f16(w1) * f16(a1)` in lanes 8..16. The four halves are converted by one `vcvtph2ps`.
///
/// # Safety
/// Each pointer points at 2 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn pair_scale(w0: *const u8, a0: *const u8, w1: *const u8, a1: *const u8) -> __m512 {
    // SAFETY: the caller vouches for 2 bytes at each pointer.
    let h = |p: *const u8| unsafe { p.cast::<u16>().read_unaligned() } as u64;
    let bits = h(w0) | h(a0) << 16 | h(w1) << 32 | h(a1) << 48;
    let v = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
    // Lanes 0 and 2 now hold the two products.
    let prod = _mm_mul_ps(v, _mm_movehdup_ps(v));
    let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(prod))
}

/// `(|x|, y with the sign of x)`: the same byte products, with the left operand unsigned.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
fn sign_split(x: __m512i, y: __m512i) -> (__m512i, __m512i) {
    let neg = _mm512_movepi8_mask(x);
    (
        _mm512_abs_epi8(x),
        _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y),
    )
}

/// Σ of `x[i] * y[i]` (i8 x i8) over each group of 4 bytes, in 16 i32 lanes, by `maddubs`
/// (pair sums stay below 2 * 128 * 127, so the i16 saturation never bites) and `madd`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
fn dot_i8_madd(x: __m512i, y: __m512i) -> __m512i {
    let (ux, sy) = sign_split(x, y);
    _mm512_madd_epi16(_mm512_maddubs_epi16(ux, sy), _mm512_set1_epi16(1))
}

/// As [`dot_i8_madd`], by one `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn dot_i8_vnni(x: __m512i, y: __m512i) -> __m512i {
    let (ux, sy) = sign_split(x, y);
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), ux, sy)
}

/// The quants of the q8_0 blocks at `p` and `q` (one per half).
///
/// # Safety
/// `p` and `q` point at whole q8_0 blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn q8_0_quants(p: *const u8, q: *const u8) -> __m512i {
    // SAFETY: a q8_0 block is a 2-byte scale and 32 quants.
    unsafe { load_pair(p.add(2), q.add(2)) }
}

/// The quants of the q4_0 blocks at `p` and `q` (one per half) as signed bytes: each half holds
/// its block's low nibbles then its high nibbles, minus 8.
///
/// # Safety
/// `p` and `q` point at whole q4_0 blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn q4_0_quants(p: *const u8, q: *const u8) -> __m512i {
    // SAFETY: a q4_0 block is a 2-byte scale and 16 bytes of nibbles; loadu needs no alignment.
    let (b0, b1) = unsafe { (_mm_loadu_si128(p.add(2).cast()), _mm_loadu_si128(q.add(2).cast())) };
    let v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(b0, b0)),
        _mm256_set_m128i(b1, b1),
        1,
    );
    let m = _mm512_set1_epi8(0xF);
    let lo = _mm512_and_si512(v, m);
    let hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    // 128-bit lanes 1 and 3 (64-bit lanes 2, 3, 6, 7) take the high nibbles.
    _mm512_sub_epi8(_mm512_mask_blend_epi64(0b1100_1100, lo, hi), _mm512_set1_epi8(8))
}

/// Blocks `i` and `j` against q8_0 added into `acc`. With `lone`, `j` must equal `i` and only
/// block `i` counts: the activation's high half is zero, so the repeated block adds nothing.
macro_rules! pair_step {
    ($w:ident, $a:ident, $i:expr, $j:expr, $lone:expr, $wb:expr, $acc:expr, $dot:ident, $quants:ident) => {{
        let (i, j) = ($i, $j);
        let (w0, w1) = ($w.add(i * $wb), $w.add(j * $wb));
        let (a0, a1) = ($a.add(i * Q8_0_BYTES), $a.add(j * Q8_0_BYTES));
        let d = pair_scale(w0, a0, w1, a1);
        let y = if $lone {
            load_low(a0.add(2))
        } else {
            load_pair(a0.add(2), a1.add(2))
        };
        _mm512_fmadd_ps(d, _mm512_cvtepi32_ps($dot($quants(w0, w1), y)), $acc)
    }};
}

/// Defines a kernel of a 32-element format against q8_0: `$quants` loads two weight blocks,
/// `$dot` multiplies bytes. Four blocks per step into two accumulators, so consecutive steps do
/// not wait on each other's FMA; a pair, then a lone block, finish the row.
macro_rules! q8_0_kernel {
    ($name:ident, $features:literal, $wb:expr, $dot:ident, $quants:ident) => {
        /// # Safety
        /// See [`super::DotFn`]; the CPU has the features this kernel is compiled for.
        #[target_feature(enable = $features)]
        pub unsafe fn $name(n: usize, w: *const u8, a: *const u8) -> f32 {
            let blocks = n / 32;
            let (mut acc0, mut acc1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            let mut i = 0;
            while i + 4 <= blocks {
                // SAFETY: every block index is below blocks = n / 32, the number of whole blocks
                // the caller vouches for in both rows.
                acc0 = unsafe { pair_step!(w, a, i, i + 1, false, $wb, acc0, $dot, $quants) };
                // SAFETY: as above.
                acc1 = unsafe { pair_step!(w, a, i + 2, i + 3, false, $wb, acc1, $dot, $quants) };
                i += 4;
            }
            if i + 2 <= blocks {
                // SAFETY: as above.
                acc0 = unsafe { pair_step!(w, a, i, i + 1, false, $wb, acc0, $dot, $quants) };
                i += 2;
            }
            if i < blocks {
                // SAFETY: as above.
                acc1 = unsafe { pair_step!(w, a, i, i, true, $wb, acc1, $dot, $quants) };
            }
            _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
        }
    };
}

q8_0_kernel!(dot_q8_0, "avx512f,avx512bw,avx2,fma,f16c", 34, dot_i8_madd, q8_0_quants);
q8_0_kernel!(dot_q4_0, "avx512f,avx512bw,avx2,fma,f16c", 18, dot_i8_madd, q4_0_quants);
q8_0_kernel!(
    dot_q8_0_vnni,
    "avx512f,avx512bw,avx512vnni,avx2,fma,f16c",
    34,
    dot_i8_vnni,
    q8_0_quants
);
q8_0_kernel!(
    dot_q4_0_vnni,
    "avx512f,avx512bw,avx512vnni,avx2,fma,f16c",
    18,
    dot_i8_vnni,
    q4_0_quants
);

/// 16 f16 at `p` as f32.
///
/// # Safety
/// `p` points at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn f16x16(p: *const u8) -> __m512 {
    // SAFETY: the caller vouches for 32 bytes; loadu needs no alignment.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
}

/// # Safety
/// See [`super::DotFn`]; the CPU has AVX-512F/BW, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_f16(n: usize, w: *const u8, a: *const u8) -> f32 {
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 64 <= n {
        for (k, s) in acc.iter_mut().enumerate() {
            let o = 2 * (i + 16 * k);
            // SAFETY: elements i + 16k .. i + 16k + 16 (2 bytes each) are in both rows.
            let (x, y) = unsafe { (f16x16(w.add(o)), f16x16(a.add(o))) };
            *s = _mm512_fmadd_ps(x, y, *s);
        }
        i += 64;
    }
    while i + 16 <= n {
        // SAFETY: elements i .. i + 16 are in both rows.
        let (x, y) = unsafe { (f16x16(w.add(2 * i)), f16x16(a.add(2 * i))) };
        acc[0] = _mm512_fmadd_ps(x, y, acc[0]);
        i += 16;
    }
    let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(acc[0], acc[1]),
        _mm512_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        // SAFETY: i < n.
        sum += unsafe { f16_at(w.add(2 * i)) * f16_at(a.add(2 * i)) };
        i += 1;
    }
    sum
}
