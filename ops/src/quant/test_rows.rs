//! Rows shared by the unit tests of every format: the edge cases and seeded random data.

use super::{dequantize_row, quantize_row};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use tandem_graph::ElemType;

/// Edge rows of `n` values: all zeros, constants, one outlier, huge and tiny magnitudes (within
/// what an f16 scale can hold), negative only, and uniform noise.
pub(super) fn edge_rows(n: usize) -> Vec<Vec<f32>> {
    let mut rng = Pcg64::seed_from_u64(0x5eed);
    let mut noise = |scale: f32, offset: f32| -> Vec<f32> {
        (0..n)
            .map(|_| offset + scale * rng.random_range(-1.0f32..1.0))
            .collect()
    };
    let mut outlier = noise(0.01, 0.0);
    outlier[n / 3] = 100.0;
    vec![
        vec![0.0; n],
        vec![0.75; n],
        vec![-3.0; n],
        outlier,
        noise(3.0e4, 0.0),
        noise(1.0e-3, 0.0),
        noise(2.0, -3.0),
        noise(1.0, 0.0),
        noise(1.0, 0.5),
    ]
}

/// Quantizes and dequantizes every edge row (and more random ones) of `ty`; asserts that every
/// value is within `max_frac` of its block's largest magnitude (plus what a subnormal f16 scale
/// may lose) and that the NMSE of the noise rows stays below `max_nmse`.
pub(super) fn check_round_trip(ty: ElemType, max_frac: f32, max_nmse: f64) {
    let n = 4 * ty.block_size().max(64);
    let bs = ty.block_size();
    let mut rows = edge_rows(n);
    let mut rng = Pcg64::seed_from_u64(99);
    for _ in 0..20 {
        rows.push(
            (0..n)
                .map(|_| rng.random_range(-1.0f32..1.0) * rng.random_range(0.0f32..2.0))
                .collect(),
        );
    }
    for row in &rows {
        let mut q = vec![0u8; ty.row_size(n as i64).unwrap()];
        quantize_row(ty, row, &mut q).unwrap();
        let mut y = vec![0f32; n];
        dequantize_row(ty, &q, &mut y).unwrap();
        for (xb, yb) in row.chunks(bs).zip(y.chunks(bs)) {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let tol = max_frac * amax + 4.0e-5;
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= tol, "{ty}: {a:e} -> {b:e} (tol {tol:e})");
            }
        }
    }
    for row in &rows[rows.len() - 20..] {
        let mut q = vec![0u8; ty.row_size(n as i64).unwrap()];
        quantize_row(ty, row, &mut q).unwrap();
        let mut y = vec![0f32; n];
        dequantize_row(ty, &q, &mut y).unwrap();
        let err: f64 = row.iter().zip(&y).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
        let sum: f64 = row.iter().map(|a| (*a as f64).powi(2)).sum();
        assert!(err / sum <= max_nmse, "{ty}: nmse {:e}", err / sum);
    }
}
