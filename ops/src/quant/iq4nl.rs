//! iq4_nl: 32 values as 4-bit indices into a fixed non-linear table, one f16 scale.
//!
//! ggml quantizes it two ways. `ggml_quantize_chunk` (model files) searches 15 scales around
//! the first guess and then re-picks every index for the best scale ([`quantize_iq4_nl`]); the
//! type's `from_float_ref`, which the CPU backend also uses for SET_ROWS and CPY, keeps the first
//! guess' indices and only refits the scale ([`quantize_iq4_nl_single_pass`]).

use super::block_io::{dequantize_blocks, quantize_blocks};
use super::float::{f16_to_f32, f32_to_f16};
use super::ksearch::GROUP_MAX_EPS;
use half::f16;
use tandem_graph::blocks::*;

const QK: usize = 32;

/// The table entry nearest to `x` (the lower one on exact ties), as ggml's `best_index_int8`.
fn nearest_level(x: f32) -> u8 {
    let v = &KVALUES_IQ4NL;
    if x <= v[0] as f32 {
        return 0;
    }
    if x >= v[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (v[hi - 1] as f32) < (v[hi] as f32) - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// x²-weighted least-squares fit of `x` to `level(i)·d`: returns `(Σ w·q·x, Σ w·q²)`.
fn fit(x: &[f32; QK], mut level: impl FnMut(usize, f32) -> u8) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for (i, &v) in x.iter().enumerate() {
        let q = KVALUES_IQ4NL[level(i, v) as usize] as f32;
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// One block with `tries` extra scales on each side of the first guess (ggml's `ntry`); with
/// `tries <= 0` the first guess' indices are kept.
fn quantize_block(x: &[f32; QK], tries: i32) -> BlockIQ4NL {
    let mut levels = [0u8; QK];
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let first = KVALUES_IQ4NL[0] as f32;
    let d = if amax < GROUP_MAX_EPS {
        0.0
    } else {
        let guess = if tries > 0 { -max / first } else { max / first };
        let id = 1.0 / guess;
        let (sumqx, sumq2) = fit(x, |i, v| {
            levels[i] = nearest_level(id * v);
            levels[i]
        });
        let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for t in -tries..=tries {
            let id = (t + KVALUES_IQ4NL[0] as i32) as f32 / max;
            let (sumqx, sumq2) = fit(x, |_, v| nearest_level(id * v));
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        d
    };
    if tries > 0 {
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (l, &v) in levels.iter_mut().zip(x) {
            *l = nearest_level(id * v);
        }
    } else if amax < GROUP_MAX_EPS {
        // ggml leaves the indices of such a block unset on this path; any choice dequantizes
        // to zero, and the one of the other path keeps the bytes deterministic.
        levels = [nearest_level(0.0); QK];
    }
    let mut b = BlockIQ4NL {
        d: f16::from_bits(f32_to_f16(d)),
        ..Default::default()
    };
    for j in 0..QK / 2 {
        b.qs[j] = levels[j] | (levels[j + QK / 2] << 4);
    }
    b
}

/// As `ggml_quantize_chunk(GGML_TYPE_IQ4_NL, ..., imatrix = NULL)`.
pub(crate) fn quantize_iq4_nl(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK]| quantize_block(x, 7));
}

/// As ggml's `quantize_row_iq4_nl_ref` (`from_float_ref`, and the CPU backend's `from_float`).
pub(crate) fn quantize_iq4_nl_single_pass(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK]| quantize_block(x, -1));
}

pub(crate) fn dequantize_iq4_nl(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockIQ4NL, y: &mut [f32; QK]| {
        let d = f16_to_f32(b.d.to_bits());
        for j in 0..QK / 2 {
            y[j] = d * KVALUES_IQ4NL[(b.qs[j] & 0x0f) as usize] as f32;
            y[j + QK / 2] = d * KVALUES_IQ4NL[(b.qs[j] >> 4) as usize] as f32;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::test_rows::check_round_trip;
    use super::*;
    use tandem_graph::ElemType;

    #[test]
    fn nearest_level_picks_the_closest_entry() {
        for i in 0..=2600 {
            let x = -130.0 + i as f32 * 0.1;
            let got = KVALUES_IQ4NL[nearest_level(x) as usize] as f32;
            let best = KVALUES_IQ4NL
                .iter()
                .map(|&v| (v as f32 - x).abs())
                .fold(f32::MAX, f32::min);
            assert!(((got - x).abs() - best).abs() < 1e-4, "{x}: got {got}");
        }
    }

    #[test]
    fn iq4_nl_round_trip_error_is_bounded() {
        // The widest gap of the table is 24 of 127 (89 → 113): half of it is 0.095·amax.
        check_round_trip(ElemType::IQ4NL, 0.12, 0.01);
    }

    #[test]
    fn both_paths_stay_within_the_grid_error() {
        let x: [f32; QK] = std::array::from_fn(|i| ((i * 29) % 32) as f32 / 7.0 - 2.0);
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        for quantize in [quantize_iq4_nl, quantize_iq4_nl_single_pass] {
            let mut q = [0u8; 18];
            quantize(&x, &mut q);
            let mut y = [0f32; QK];
            dequantize_iq4_nl(&q, &mut y);
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() <= 0.12 * amax, "{a} -> {b}");
            }
        }
    }
}
