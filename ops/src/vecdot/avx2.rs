//! AVX2+FMA+F16C dot kernels of the float and 32-element block formats.
//!
//! Block kernels widen a block's 32 weight quants to bytes in one register, multiply them with
//! the 32 activation bytes by `maddubs` (u8 x i8 → pairs of i16) and `madd` (→ i32), and fold the
//! block's combined scale in with one FMA. Signed weights go through the sign trick (|x| times
//! y with x's sign) because `maddubs` needs one unsigned operand.

use super::act::{Q8_0_BYTES, Q8_1_BYTES};
use std::arch::x86_64::*;
use tandem_graph::blocks::KVALUES_IQ4NL;

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    hsum_ps128(s)
}

/// Sum of the 4 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum_ps128(s: __m128) -> f32 {
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The f16 at `p` as f32.
///
/// # Safety
/// `p` points at 2 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller vouches for 2 bytes at p; read_unaligned needs no alignment.
    let bits = unsafe { p.cast::<u16>().read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// `f16(p) * f16(q)`. Both halves go into one 32-bit lane pair that the conversion reads in
/// full, so the compiler loads them with `vmovd`; converting a lone u16 let it insert the word
/// into whatever register was free (an accumulator), chaining every block on the previous FMA
/// (measured: q4_0 at 38% of one core's read bandwidth before, see the matmul benchmark).
///
/// # Safety
/// `p` and `q` point at 2 readable bytes each.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_product(p: *const u8, q: *const u8) -> f32 {
    // SAFETY: the caller vouches for 2 bytes at each pointer.
    let (x, y) = unsafe { (p.cast::<u16>().read_unaligned(), q.cast::<u16>().read_unaligned()) };
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128((x as u32 | (y as u32) << 16) as i32));
    _mm_cvtss_f32(_mm_mul_ss(v, _mm_movehdup_ps(v)))
}

/// The two f16 at `p` and `p + 2` as f32, converted together (see [`f16_product`]).
///
/// # Safety
/// `p` points at 4 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_pair(p: *const u8) -> (f32, f32) {
    // SAFETY: the caller vouches for 4 bytes.
    let bits = unsafe { p.cast::<u32>().read_unaligned() };
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// 32 bytes at `p`.
///
/// # Safety
/// `p` points at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    // SAFETY: the caller vouches for 32 bytes; loadu needs no alignment.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// 16 bytes at `p`.
///
/// # Safety
/// `p` points at 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load128(p: *const u8) -> __m128i {
    // SAFETY: the caller vouches for 16 bytes; loadu needs no alignment.
    unsafe { _mm_loadu_si128(p.cast()) }
}

/// Σ of `x[i] * y[i]` (u8 x i8) in 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_u8_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

/// Σ of `x[i] * y[i]` (i8 x i8) as 8 f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_i8_i8_ps(x: __m256i, y: __m256i) -> __m256 {
    _mm256_cvtepi32_ps(dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)))
}

/// The 16 bytes at `p` as 32 nibbles: low nibbles in bytes 0..16, high nibbles in 16..32.
///
/// # Safety
/// `p` points at 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: forwarded from the caller.
    let b = unsafe { load128(p) };
    let both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    _mm256_and_si256(both, _mm256_set1_epi8(0xF))
}

/// Bit `j` of `x` as byte `j`: 0xFF where set, 0 where clear.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bits_to_bytes(x: u32) -> __m256i {
    let spread = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    let v = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), spread);
    // Every bit but bit (j % 8) set in byte j: the OR is all ones iff that bit is set.
    let others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(v, others), _mm256_set1_epi64x(-1))
}

/// # Safety
/// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(n: usize, w: *const u8, a: *const u8) -> f32 {
    let (w, a) = (w.cast::<f32>(), a.cast::<f32>());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, s) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8k + 8 <= n floats are in both rows.
            let (x, y) = unsafe { (_mm256_loadu_ps(w.add(i + 8 * k)), _mm256_loadu_ps(a.add(i + 8 * k))) };
            *s = _mm256_fmadd_ps(x, y, *s);
        }
        i += 32;
    }
    let mut sum = hsum_ps(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        // SAFETY: i < n.
        sum += unsafe { w.add(i).read_unaligned() * a.add(i).read_unaligned() };
        i += 1;
    }
    sum
}

/// # Safety
/// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f16(n: usize, w: *const u8, a: *const u8) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, s) in acc.iter_mut().enumerate() {
            // SAFETY: elements i + 8k .. i + 8k + 8 (2 bytes each) are in both rows.
            let (x, y) = unsafe { (load128(w.add(2 * (i + 8 * k))), load128(a.add(2 * (i + 8 * k)))) };
            *s = _mm256_fmadd_ps(_mm256_cvtph_ps(x), _mm256_cvtph_ps(y), *s);
        }
        i += 32;
    }
    let mut sum = hsum_ps(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        // SAFETY: i < n.
        sum += unsafe { f16_at(w.add(2 * i)) * f16_at(a.add(2 * i)) };
        i += 1;
    }
    sum
}

/// 8 bf16 at `p` as f32 (bf16 is the top half of an f32).
///
/// # Safety
/// `p` points at 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bf16x8(p: *const u8) -> __m256 {
    // SAFETY: forwarded from the caller.
    let v = unsafe { load128(p) };
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16))
}

/// # Safety
/// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_bf16(n: usize, w: *const u8, a: *const u8) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, s) in acc.iter_mut().enumerate() {
            // SAFETY: elements i + 8k .. i + 8k + 8 are in both rows.
            let (x, y) = unsafe { (bf16x8(w.add(2 * (i + 8 * k))), bf16x8(a.add(2 * (i + 8 * k)))) };
            *s = _mm256_fmadd_ps(x, y, *s);
        }
        i += 32;
    }
    let mut sum = hsum_ps(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        // SAFETY: i < n.
        let (x, y) = unsafe {
            (
                w.add(2 * i).cast::<u16>().read_unaligned(),
                a.add(2 * i).cast::<u16>().read_unaligned(),
            )
        };
        sum += f32::from_bits((x as u32) << 16) * f32::from_bits((y as u32) << 16);
        i += 1;
    }
    sum
}

/// One block of a 32-element format against q8_0, added into `$acc`: `$quants` (an expression of
/// the block pointer `$b`) gives the block's 32 signed weight quants; the scale is the block's
/// first f16.
macro_rules! signed_q8_0_block {
    ($w:ident, $a:ident, $i:expr, $wb:expr, $acc:ident, |$b:ident| $quants:expr) => {
        // SAFETY: block $i of each row is within the n/32 blocks the kernel's caller vouches
        // for; both blocks start with an f16 scale, the activation's 32 quants follow it, and
        // the weight block holds what `$quants` reads.
        unsafe {
            let ($b, ab) = ($w.add($i * $wb), $a.add($i * Q8_0_BYTES));
            let d = f16_product($b, ab);
            let p = dot_i8_i8_ps($quants, load256(ab.add(2)));
            $acc = _mm256_fmadd_ps(_mm256_set1_ps(d), p, $acc);
        }
    };
}

/// Defines a kernel of a 32-element format against q8_0 from its quant expression. A macro
/// rather than a generic over a closure, so the expression is compiled with the kernel's target
/// features and inlined; two blocks per step into two accumulators, so consecutive blocks do
/// not wait on each other's FMA.
macro_rules! signed_q8_0_kernel {
    ($(#[$doc:meta])* $name:ident, $wb:expr, |$b:ident| $quants:expr) => {
        $(#[$doc])*
        /// # Safety
        /// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name(n: usize, w: *const u8, a: *const u8) -> f32 {
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let blocks = n / 32;
            let mut i = 0;
            while i + 2 <= blocks {
                signed_q8_0_block!(w, a, i, $wb, acc0, |$b| $quants);
                signed_q8_0_block!(w, a, i + 1, $wb, acc1, |$b| $quants);
                i += 2;
            }
            if i < blocks {
                signed_q8_0_block!(w, a, i, $wb, acc0, |$b| $quants);
            }
            hsum_ps(_mm256_add_ps(acc0, acc1))
        }
    };
}

signed_q8_0_kernel!(dot_q4_0, 18, |b| _mm256_sub_epi8(
    nibbles(b.add(2)),
    _mm256_set1_epi8(8)
));
signed_q8_0_kernel!(dot_q8_0, 34, |b| load256(b.add(2)));
signed_q8_0_kernel!(dot_iq4_nl, 18, |b| _mm256_shuffle_epi8(
    _mm256_broadcastsi128_si256(load128(KVALUES_IQ4NL.as_ptr().cast())),
    nibbles(b.add(2))
));
signed_q8_0_kernel!(
    /// A clear fifth bit means q - 16 < 0: the high nibble is set to make the byte negative.
    dot_q5_0,
    22,
    |b| _mm256_or_si256(
        nibbles(b.add(6)),
        _mm256_andnot_si256(
            bits_to_bytes(b.add(2).cast::<u32>().read_unaligned()),
            _mm256_set1_epi8(0xF0u8 as i8)
        )
    )
);

/// Defines a kernel of an unsigned 32-element format with a min against q8_1: the block adds
/// `d_w d_a Σ q q_a + m_w s_a`; `$quants` gives the 32 unsigned quants of block `$b`.
macro_rules! unsigned_q8_1_kernel {
    ($name:ident, $wb:expr, |$b:ident| $quants:expr) => {
        /// # Safety
        /// See [`super::DotFn`]; the CPU has AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name(n: usize, w: *const u8, a: *const u8) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut mins = 0.0f32;
            for i in 0..n / 32 {
                // SAFETY: block i of each row is within the caller's n/32 blocks; weight d, m and
                // activation d, s are the blocks' first f16 pairs, activation quants at +4.
                unsafe {
                    let ($b, ab) = (w.add(i * $wb), a.add(i * Q8_1_BYTES));
                    mins += f16_product($b.add(2), ab.add(2));
                    let d = f16_product($b, ab);
                    let p = _mm256_cvtepi32_ps(dot_u8_i8($quants, load256(ab.add(4))));
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), p, acc);
                }
            }
            hsum_ps(acc) + mins
        }
    };
}

unsigned_q8_1_kernel!(dot_q4_1, 20, |b| nibbles(b.add(4)));
unsigned_q8_1_kernel!(dot_q5_1, 24, |b| _mm256_or_si256(
    nibbles(b.add(8)),
    _mm256_and_si256(
        bits_to_bytes(b.add(4).cast::<u32>().read_unaligned()),
        _mm256_set1_epi8(0x10)
    )
));
