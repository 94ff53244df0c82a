//! f16 and bf16 conversion with ggml's exact results: f32→f16 rounds to nearest even and turns
//! every NaN into `sign | 0x7E00` (ggml's `GGML_FP32_TO_FP16`); f32→bf16 rounds to nearest even
//! and quiets NaNs by setting bit 6 (ggml's `ggml_compute_fp32_to_bf16`).
//!
//! Rows of f16 go through F16C when the CPU has it: the hardware rounds the same way, but keeps
//! NaN payloads, so a group of 8 that holds a NaN is redone by the scalar path.

use crate::simd::features;

/// f32 → f16 bits, as ggml converts (round to nearest even, NaN → quiet `0x7E00` with the sign).
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    if abs > 0x7f80_0000 {
        return sign | 0x7e00;
    }
    // 65536 and above (and infinity) overflow; values from 65520 up reach infinity through the
    // rounding carry below.
    if abs >= 0x4780_0000 {
        return sign | 0x7c00;
    }
    // Below 2^-14 the result is subnormal: adding 0.5 lines the f16 subnormal grid up with the
    // last mantissa bits of an f32 in [0.5, 1), and the FPU's own rounding is nearest-even.
    if abs < 0x3880_0000 {
        let aligned = f32::from_bits(abs) + 0.5;
        return sign | (aligned.to_bits() - 0x3f00_0000) as u16;
    }
    // Normal: rebias the exponent (127 → 15) and round the 13 dropped bits to nearest even.
    let odd = (abs >> 13) & 1;
    let rounded = abs.wrapping_sub((127 - 15) << 23) + 0x0fff + odd;
    sign | (rounded >> 13) as u16
}

/// f16 bits → f32 (exact; NaNs keep their payload and become quiet, as ggml's conversion does).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x03ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        // Subnormal: man · 2^-24 is exact in f32.
        (0, _) => sign | (man as f32 * f32::from_bits(0x3380_0000)).to_bits(),
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, _) => sign | 0x7fc0_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// f32 → bf16 bits, as ggml's `ggml_compute_fp32_to_bf16`.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        ((bits >> 16) | 64) as u16
    } else {
        ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
    }
}

/// bf16 bits → f32 (exact).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `src` as little-endian f16 into `dst` (`2 * src.len()` bytes).
pub(crate) fn f32_row_to_f16(src: &[f32], dst: &mut [u8]) {
    debug_assert_eq!(dst.len(), 2 * src.len());
    #[cfg(target_arch = "x86_64")]
    if features().f16c {
        // SAFETY: F16C (and the AVX it implies) was detected on this CPU.
        unsafe { x86::f32_row_to_f16(src, dst) };
        return;
    }
    f32_row_to_f16_scalar(src, dst);
}

/// `src` (little-endian f16, `2 * dst.len()` bytes) into `dst`.
pub(crate) fn f16_row_to_f32(src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), 2 * dst.len());
    #[cfg(target_arch = "x86_64")]
    if features().f16c {
        // SAFETY: F16C (and the AVX it implies) was detected on this CPU.
        unsafe { x86::f16_row_to_f32(src, dst) };
        return;
    }
    f16_row_to_f32_scalar(src, dst);
}

fn f32_row_to_f16_scalar(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.iter().zip(dst.chunks_exact_mut(2)) {
        out.copy_from_slice(&f32_to_f16(*x).to_le_bytes());
    }
}

fn f16_row_to_f32_scalar(src: &[u8], dst: &mut [f32]) {
    for (h, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = f16_to_f32(u16::from_le_bytes([h[0], h[1]]));
    }
}

/// `src` as little-endian bf16 into `dst` (`2 * src.len()` bytes). Plain loop: the compiler
/// vectorizes it (no branches once the NaN case is a select).
pub(crate) fn f32_row_to_bf16(src: &[f32], dst: &mut [u8]) {
    debug_assert_eq!(dst.len(), 2 * src.len());
    for (x, out) in src.iter().zip(dst.chunks_exact_mut(2)) {
        out.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
    }
}

/// `src` (little-endian bf16, `2 * dst.len()` bytes) into `dst`.
pub(crate) fn bf16_row_to_f32(src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), 2 * dst.len());
    for (h, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = bf16_to_f32(u16::from_le_bytes([h[0], h[1]]));
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU supports F16C and AVX; `dst.len() == 2 * src.len()`.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f32_row_to_f16(src: &[f32], dst: &mut [u8]) {
        let n = src.len().min(dst.len() / 2);
        let mut i = 0;
        // 32 values per step with one NaN test for all of them.
        while i + 32 <= n {
            // SAFETY: i + 32 <= n keeps the 32 loads within src and the 64 bytes stored within dst.
            unsafe {
                let p = src.as_ptr().add(i);
                let v = [
                    _mm256_loadu_ps(p),
                    _mm256_loadu_ps(p.add(8)),
                    _mm256_loadu_ps(p.add(16)),
                    _mm256_loadu_ps(p.add(24)),
                ];
                let unord = |a: __m256, b: __m256| _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b);
                let any_nan = _mm256_or_ps(unord(v[0], v[1]), unord(v[2], v[3]));
                if _mm256_movemask_ps(any_nan) == 0 {
                    let out = dst.as_mut_ptr().add(2 * i);
                    for (k, v) in v.iter().enumerate() {
                        _mm_storeu_si128(out.add(16 * k).cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(*v));
                    }
                } else {
                    super::f32_row_to_f16_scalar(&src[i..i + 32], &mut dst[2 * i..2 * i + 64]);
                }
            }
            i += 32;
        }
        super::f32_row_to_f16_scalar(&src[i..n], &mut dst[2 * i..2 * n]);
    }

    /// # Safety
    /// The CPU supports F16C and AVX; `src.len() == 2 * dst.len()`.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f16_row_to_f32(src: &[u8], dst: &mut [f32]) {
        let n = dst.len().min(src.len() / 2);
        let mut i = 0;
        while i + 32 <= n {
            // SAFETY: i + 32 <= n keeps the 64 bytes loaded within src and the 32 stores within dst.
            unsafe {
                let (p, out) = (src.as_ptr().add(2 * i), dst.as_mut_ptr().add(i));
                for k in 0..4 {
                    let h = _mm_loadu_si128(p.add(16 * k).cast());
                    _mm256_storeu_ps(out.add(8 * k), _mm256_cvtph_ps(h));
                }
            }
            i += 32;
        }
        super::f16_row_to_f32_scalar(&src[2 * i..2 * n], &mut dst[i..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64;

    /// A direct round-to-nearest-even reference through f64, independent of the bit tricks.
    fn f16_reference(x: f32) -> u16 {
        if x.is_nan() {
            return ((x.to_bits() >> 16) & 0x8000) as u16 | 0x7e00;
        }
        half::f16::from_f64(x as f64).to_bits()
    }

    fn interesting_f32s() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            65504.0,
            65519.99,
            65520.0,
            65536.0,
            1e9,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::MIN_POSITIVE,
            1e-45,
            5.96e-8,
            2.98e-8,
            2.9802326e-8,
            2.9802324e-8,
            6.1035156e-5,
            6.1035e-5,
            3.0517578e-5,
            0.33333334,
            f32::MAX,
            f32::MIN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffc1_2345),
            f32::from_bits(0x7fbf_ffff),
        ];
        let mut rng = Pcg64::seed_from_u64(7);
        for _ in 0..20000 {
            v.push(f32::from_bits(rng.random()));
        }
        for _ in 0..20000 {
            v.push(rng.random_range(-70000.0f32..70000.0) * 10f32.powi(rng.random_range(-12..1)));
        }
        // Exact ties between f16 neighbours in all ranges, normal and subnormal.
        for h in (0u16..0x7c00).step_by(37) {
            let lo = half::f16::from_bits(h).to_f64();
            let hi = half::f16::from_bits(h + 1).to_f64();
            v.push(((lo + hi) / 2.0) as f32);
        }
        v
    }

    #[test]
    fn f16_scalar_matches_round_to_nearest_even() {
        for x in interesting_f32s() {
            assert_eq!(f32_to_f16(x), f16_reference(x), "{x:e} ({:#010x})", x.to_bits());
        }
    }

    #[test]
    fn f16_row_paths_agree_with_scalar() {
        let xs = interesting_f32s();
        let mut row = vec![0u8; 2 * xs.len()];
        f32_row_to_f16(&xs, &mut row);
        for (i, x) in xs.iter().enumerate() {
            assert_eq!(
                u16::from_le_bytes([row[2 * i], row[2 * i + 1]]),
                f32_to_f16(*x),
                "{x:e}"
            );
        }
        let mut back = vec![0f32; xs.len()];
        f16_row_to_f32(&row, &mut back);
        for (i, y) in back.iter().enumerate() {
            let h = u16::from_le_bytes([row[2 * i], row[2 * i + 1]]);
            assert_eq!(y.to_bits(), f16_to_f32(h).to_bits());
        }
    }

    #[test]
    fn f16_to_f32_is_exact_for_every_bit_pattern() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan());
                assert_eq!(got.to_bits(), want.to_bits() | 0x0040_0000, "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn bf16_rounds_to_even_and_quiets_nans() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: stays at the even one.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16(f32::from_bits(0xff81_0000)), 0xffc1);
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80);
        assert_eq!(bf16_to_f32(0xc0a0), -5.0);
        let xs = interesting_f32s();
        let mut row = vec![0u8; 2 * xs.len()];
        f32_row_to_bf16(&xs, &mut row);
        let mut back = vec![0f32; xs.len()];
        bf16_row_to_f32(&row, &mut back);
        for (x, y) in xs.iter().zip(&back) {
            if x.is_finite() && x.abs() < 1e38 && x.abs() > 1e-37 {
                assert!((x - y).abs() <= x.abs() / 256.0, "{x:e} -> {y:e}");
            }
        }
    }
}
