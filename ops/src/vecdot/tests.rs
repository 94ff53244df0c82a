use super::testgen::{random_f32, random_weight_row};
use super::*;
use rand::SeedableRng;
use rand_pcg::Pcg64;

/// Random weight and activation rows of `blocks` blocks of `ty`.
fn rows(rng: &mut Pcg64, ty: ElemType, blocks: usize) -> (usize, Vec<u8>, Vec<f32>, Vec<u8>) {
    let n = blocks * ty.block_size().max(vec_dot_type(ty).block_size());
    let w = random_weight_row(rng, ty, n);
    let x = random_f32(rng, n);
    let act = vec_dot_type(ty);
    let mut a = vec![0u8; act.row_size(n as i64).unwrap()];
    quantize_activation(act, &x, &mut a).unwrap();
    (n, w, x, a)
}

#[test]
fn vec_dot_types_match_ggml() {
    assert_eq!(vec_dot_type(ElemType::Q4_0), ElemType::Q8_0);
    assert_eq!(vec_dot_type(ElemType::IQ4NL), ElemType::Q8_0);
    assert_eq!(vec_dot_type(ElemType::Q5_1), ElemType::Q8_1);
    assert_eq!(vec_dot_type(ElemType::Q6K), ElemType::Q8K);
    assert_eq!(vec_dot_type(ElemType::F16), ElemType::F16);
    assert_eq!(vec_dot_type(ElemType::BF16), ElemType::BF16);
    for ty in WEIGHT_TYPES {
        assert!(dot_fn(ty).is_some() && scalar_dot_fn(ty).is_some(), "{ty}");
        assert!(can_quantize_activation(vec_dot_type(ty)), "{ty}");
    }
    assert!(dot_fn(ElemType::I32).is_none());
}

#[test]
fn simd_matches_scalar_for_every_type() {
    let mut rng = Pcg64::seed_from_u64(7);
    for ty in WEIGHT_TYPES {
        let Some(simd) = simd_dot_fn(ty) else {
            eprintln!("no SIMD kernel on this CPU; skipping {ty}");
            continue;
        };
        // Odd counts of blocks, and float rows whose length is not a multiple of the unroll.
        let counts: &[usize] = if ty.is_float() {
            &[1, 7, 31, 33, 100, 257]
        } else {
            &[1, 3, 7, 17]
        };
        for &blocks in counts {
            for _ in 0..4 {
                let (n, w, x, a) = rows(&mut rng, ty, blocks);
                let s = vec_dot_scalar(ty, n, &w, &a).unwrap();
                // SAFETY: rows() made both rows exactly n elements long.
                let v = unsafe { simd(n, w.as_ptr(), a.as_ptr()) };
                let mag: f32 = x.iter().map(|v| v.abs()).sum::<f32>() + 1.0;
                assert!((s - v).abs() <= 1e-5 * mag, "{ty} n={n}: scalar {s} simd {v}");
            }
        }
    }
}

#[test]
fn dots_match_dequantized_f64() {
    let mut rng = Pcg64::seed_from_u64(11);
    for ty in WEIGHT_TYPES {
        if !ty.is_float() && !crate::quant::can_dequantize(ty) {
            eprintln!("no dequantizer for {ty} yet; skipping");
            continue;
        }
        let (mut err, mut norm) = (0.0f64, 0.0f64);
        for blocks in [1, 3, 5] {
            for _ in 0..8 {
                let (n, w, x, a) = rows(&mut rng, ty, blocks);
                let mut wf = vec![0f32; n];
                match ty {
                    ElemType::F32 => {
                        wf = w
                            .chunks_exact(4)
                            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                            .collect()
                    }
                    ElemType::F16 => wf = w.chunks_exact(2).map(scalar::f16_at).collect(),
                    ElemType::BF16 => {
                        wf = w
                            .chunks_exact(2)
                            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                            .collect()
                    }
                    _ => crate::quant::dequantize_row(ty, &w, &mut wf).unwrap(),
                }
                let exact: f64 = wf.iter().zip(&x).map(|(p, q)| *p as f64 * *q as f64).sum();
                let got = vec_dot(ty, n, &w, &a).unwrap() as f64;
                err += (exact - got).powi(2);
                norm += exact * exact;
            }
        }
        let nmse = err / norm;
        assert!(nmse < 1e-3, "{ty}: nmse {nmse}");
    }
}

#[test]
fn q8_k_keeps_ggml_conventions() {
    let mut x = vec![0.0f32; 256];
    x[3] = 2.0;
    x[7] = -1.0;
    let mut b = vec![0u8; 292];
    quantize_activation(ElemType::Q8K, &x, &mut b).unwrap();
    // d = max / -127 with the signed maximum, so the largest element maps to -127.
    assert_eq!(f32::from_le_bytes(b[..4].try_into().unwrap()), 2.0 / -127.0);
    assert_eq!(b[4 + 3] as i8, -127);
    assert_eq!(b[4 + 7] as i8, 64);
    assert_eq!(i16::from_le_bytes([b[260], b[261]]), -127 + 64);
    quantize_activation(ElemType::Q8K, &[0.0; 256], &mut b).unwrap();
    assert!(b.iter().all(|&v| v == 0));
}

#[test]
fn bad_sizes_are_errors() {
    let w = vec![0u8; 18];
    let a = vec![0u8; 34];
    assert!(vec_dot(ElemType::Q4_0, 32, &w, &a).is_ok());
    assert!(vec_dot(ElemType::Q4_0, 33, &w, &a).is_err());
    assert!(vec_dot(ElemType::Q4_0, 64, &w, &a).is_err());
    assert!(vec_dot(ElemType::I32, 32, &w, &a).is_err());
    assert!(quantize_activation(ElemType::Q8_0, &[0.0; 31], &mut [0u8; 34]).is_err());
    assert!(quantize_activation(ElemType::Q4_0, &[0.0; 32], &mut [0u8; 18]).is_err());
}
