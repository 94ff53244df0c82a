//! Activation math for the elementwise CPU ops, in f32.
//!
//! The sigmoid family (SiLU, sigmoid, both GELUs, and the GLUs built on them) runs on
//! [`exp_neg_sat`], written without branches or libm calls so LLVM vectorises the loops over a
//! row; the rarely hot ones use std. GELU's tanh form is evaluated exactly (no lookup table)
//! through the identity `0.5 x (1 + tanh u) = x / (1 + exp(-2u))`, which also avoids the
//! cancellation of `1 + tanh u` for very negative `x`.

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 in two parts: the high part has few enough bits that `n * LN2_HI` is exact for the
/// exponents reached here.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// 1.5 * 2^23: adding it rounds a float of magnitude below 2^22 to an integer and leaves that
/// integer in the low mantissa bits.
const ROUNDER: f32 = 12_582_912.0;

/// `e^x` for the sigmoid family. The argument saturates to [-87, 88], so the result stays a
/// normal float (far ends come out as about 1.6e-38 and 1.7e38, which is what a sigmoid needs);
/// NaN stays NaN. About 2 ulp inside the range.
#[inline(always)]
pub(super) fn exp_sat(x: f32) -> f32 {
    // Comparisons, not f32::max/min, so that NaN passes through.
    let x = if x < -87.0 { -87.0 } else { x };
    let x = if x > 88.0 { 88.0 } else { x };
    let shifted = x * LOG2E + ROUNDER;
    let n = shifted - ROUNDER;
    let r = x - n * LN2_HI - n * LN2_LO;
    // Taylor series of e^r to r^7: truncation error below 6e-9 relative for |r| <= ln2/2.
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let n_int = (shifted.to_bits() as i32).wrapping_sub(ROUNDER.to_bits() as i32);
    let two_to_n = f32::from_bits((n_int.wrapping_add(127) as u32).wrapping_shl(23));
    p * two_to_n
}

/// `e^(-x)`, saturating as [`exp_sat`].
#[inline(always)]
pub(super) fn exp_neg_sat(x: f32) -> f32 {
    exp_sat(-x)
}

#[inline(always)]
pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp_neg_sat(x))
}

#[inline(always)]
pub(super) fn silu(x: f32) -> f32 {
    x / (1.0 + exp_neg_sat(x))
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044_715;
const GELU_QUICK_COEF: f32 = 1.702;

/// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
#[inline(always)]
pub(super) fn gelu_tanh(x: f32) -> f32 {
    let u = SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x);
    x / (1.0 + exp_neg_sat(2.0 * u))
}

/// `x * sigmoid(1.702 x)`.
#[inline(always)]
pub(super) fn gelu_quick(x: f32) -> f32 {
    x / (1.0 + exp_neg_sat(GELU_QUICK_COEF * x))
}

/// Exact GELU: `0.5 x (1 + erf(x / sqrt 2))`.
#[inline]
pub(super) fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Error function, evaluated in f64 so the f32 result carries only its final rounding on top:
/// its Maclaurin series near 0 (keeps small results relatively accurate) and a Chebyshev-fitted
/// erfc elsewhere (fractional error below 1.2e-7).
pub(super) fn erf(x: f32) -> f32 {
    let z = (x as f64).abs();
    if z < 0.25 {
        let x = x as f64;
        let x2 = x * x;
        let series = x * (1.0 - x2 * (1.0 / 3.0 - x2 * (1.0 / 10.0 - x2 * (1.0 / 42.0 - x2 / 216.0))));
        return (std::f64::consts::FRAC_2_SQRT_PI * series) as f32;
    }
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * (-z * z + poly).exp();
    let e = (1.0 - erfc) as f32;
    if x < 0.0 {
        -e
    } else {
        e
    }
}

/// Row loops over the functions above, compiled twice: for the baseline target and with AVX2 +
/// FMA enabled, picked at run time. Rust never contracts `a * b + c` into an FMA, so both
/// builds give the same bits; the AVX2 build just runs 8 lanes instead of 4.
macro_rules! dispatched_row_loop {
    ($(#[$doc:meta])* $name:ident, $avx2:ident, ($($arg:ident: $ty:ty),*), $body:expr) => {
        $(#[$doc])*
        #[inline]
        pub(super) fn $name<F: Fn(f32) -> f32>($($arg: $ty,)* f: F) {
            #[cfg(target_arch = "x86_64")]
            if crate::simd::features().has_avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA (detected at start).
                return unsafe { $avx2($($arg,)* f) };
            }
            $body($($arg,)* f)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2<F: Fn(f32) -> f32>($($arg: $ty,)* f: F) {
            $body($($arg,)* f)
        }
    };
}

dispatched_row_loop!(
    /// `z[i] = f(z[i])`.
    map_in_place, map_in_place_avx2, (z: &mut [f32]),
    |z: &mut [f32], f: F| z.iter_mut().for_each(|v| *v = f(*v))
);

dispatched_row_loop!(
    /// `z[i] = f(x[i])`.
    map_into, map_into_avx2, (z: &mut [f32], x: &[f32]),
    |z: &mut [f32], x: &[f32], f: F| z.iter_mut().zip(x).for_each(|(zi, &xi)| *zi = f(xi))
);

dispatched_row_loop!(
    /// `z[i] = f(x[i]) * g[i]`.
    gate_into, gate_into_avx2, (z: &mut [f32], x: &[f32], g: &[f32]),
    |z: &mut [f32], x: &[f32], g: &[f32], f: F| {
        z.iter_mut().zip(x).zip(g).for_each(|((zi, &xi), &gi)| *zi = f(xi) * gi)
    }
);

dispatched_row_loop!(
    /// `x[i] = f(x[i]) * g[i]`.
    gate_in_place, gate_in_place_avx2, (x: &mut [f32], g: &[f32]),
    |x: &mut [f32], g: &[f32], f: F| x.iter_mut().zip(g).for_each(|(xi, &gi)| *xi = f(*xi) * gi)
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_in_range() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp_sat(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
        assert!(exp_sat(f32::NAN).is_nan());
        assert!(exp_sat(-1000.0) > 0.0 && exp_sat(1000.0).is_finite());
    }

    #[test]
    fn erf_matches_known_values() {
        // erf(0.5), erf(1), erf(2) to 10 digits.
        for (x, want) in [
            (0.5f32, 0.520_499_877_8f64),
            (1.0, 0.842_700_792_9),
            (2.0, 0.995_322_265_0),
        ] {
            assert!((erf(x) as f64 - want).abs() < 2e-7, "erf({x})");
            assert!((erf(-x) as f64 + want).abs() < 2e-7, "erf(-{x})");
        }
        assert_eq!(erf(0.0), 0.0);
        assert!(erf(f32::NAN).is_nan());
    }

    #[test]
    fn sigmoid_family_limits() {
        assert!(silu(-200.0).abs() < 1e-30);
        assert_eq!(gelu_tanh(50.0), 50.0);
        assert!(gelu_tanh(-50.0).abs() < 1e-30);
        assert!((sigmoid(0.0) - 0.5).abs() < 1e-7);
        assert!(silu(f32::NAN).is_nan() && gelu_quick(f32::NAN).is_nan());
    }
}
