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

/// f16 bit patterns at the edges of the format: largest finite, smallest subnormal, smallest
/// normal, zeros, and one.
const EXTREME_F16: [u16; 9] = [0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0400, 0x0000, 0x8000, 0x3C00, 0xBC00];

/// Replaces about half of the f16 values at byte offsets `o + k * stride` with extreme ones.
fn make_extreme(rng: &mut Pcg64, row: &mut [u8], o: usize, stride: usize) {
    use rand::Rng;
    for b in row.chunks_exact_mut(stride) {
        if rng.random_bool(0.5) {
            let v = EXTREME_F16[rng.random_range(0..EXTREME_F16.len())];
            b[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Σ |w_i a_i| of a row pair of weight type `ty` (f16, q8_0 or q4_0), the scale of the rounding
/// error a reordered sum may have.
fn abs_dot(ty: ElemType, n: usize, w: &[u8], a: &[u8]) -> f64 {
    let h = |b: &[u8]| scalar::f16_at(b).abs() as f64;
    match ty {
        ElemType::F16 => (0..n).map(|i| h(&w[2 * i..]) * h(&a[2 * i..])).sum(),
        _ => {
            let wb = ty.type_size();
            (0..n / 32)
                .map(|k| {
                    let (wq, aq) = (&w[k * wb..(k + 1) * wb], &a[k * 34..(k + 1) * 34]);
                    let q = |j: usize| -> f64 {
                        if ty == ElemType::Q8_0 {
                            wq[2 + j] as i8 as f64
                        } else {
                            let b = wq[2 + j % 16];
                            (if j < 16 { b & 0xF } else { b >> 4 }) as f64 - 8.0
                        }
                    };
                    let s: f64 = (0..32).map(|j| (q(j) * aq[2 + j] as i8 as f64).abs()).sum();
                    h(wq) * h(aq) * s
                })
                .sum()
        }
    }
}

/// Compares the AVX-512 kernels of `ty` (plain and VNNI) with the scalar one on random rows,
/// also with extreme scales; prints a SKIP line for each variant this CPU cannot run.
fn avx512_matches_scalar(ty: ElemType) {
    let f = crate::simd::features();
    if !(f.avx512f && f.avx512bw && f.has_avx2_fma()) {
        eprintln!("SKIP avx512: {ty}: this CPU lacks avx512f/avx512bw (or avx2/fma/f16c), or TANDEM_CPU_SCALAR=1");
        return;
    }
    let mut rng = Pcg64::seed_from_u64(23);
    let counts: &[usize] = if ty.is_float() {
        &[1, 15, 16, 17, 63, 64, 65, 100, 257, 1000]
    } else {
        &[1, 2, 3, 4, 5, 6, 7, 17, 33, 64]
    };
    // Only the block kernels have a VNNI variant.
    let variants: &[bool] = if ty.is_float() { &[false] } else { &[false, true] };
    for &vnni in variants {
        let Some(kernel) = avx512_dot_fn(ty, vnni) else {
            assert!(vnni, "{ty}: no AVX-512 kernel although the CPU has the features");
            eprintln!("SKIP avx512: {ty} vnni: this CPU lacks avx512vnni");
            continue;
        };
        let mut checked = 0;
        for &blocks in counts {
            for round in 0..6 {
                let (n, mut w, _, mut a) = rows(&mut rng, ty, blocks);
                if round >= 3 {
                    if ty == ElemType::F16 {
                        make_extreme(&mut rng, &mut w, 0, 2);
                        make_extreme(&mut rng, &mut a, 0, 2);
                    } else {
                        make_extreme(&mut rng, &mut w, 0, ty.type_size());
                        make_extreme(&mut rng, &mut a, 0, 34);
                    }
                }
                let s = vec_dot_scalar(ty, n, &w, &a).unwrap();
                // SAFETY: rows() made both rows exactly n elements long; the CPU has the
                // features (avx512_dot_fn checked them).
                let v = unsafe { kernel(n, w.as_ptr(), a.as_ptr()) };
                let mag = abs_dot(ty, n, &w, &a);
                assert!(
                    ((s - v).abs() as f64) <= 1e-5 * mag + 1e-30,
                    "{ty} vnni={vnni} n={n}: scalar {s} avx512 {v} (Σ|terms| {mag})"
                );
                checked += 1;
            }
        }
        eprintln!("avx512 {ty} vnni={vnni}: {checked} rows match scalar");
    }
}

#[test]
fn avx512_q8_0_matches_scalar() {
    avx512_matches_scalar(ElemType::Q8_0);
}

#[test]
fn avx512_q4_0_matches_scalar() {
    avx512_matches_scalar(ElemType::Q4_0);
}

#[test]
fn avx512_f16_matches_scalar() {
    avx512_matches_scalar(ElemType::F16);
}

#[test]
fn avx512_is_preferred_when_present() {
    let f = crate::simd::features();
    if !(f.avx512f && f.avx512bw && f.has_avx2_fma()) {
        eprintln!("SKIP avx512: this CPU lacks avx512f/avx512bw (or avx2/fma/f16c), or TANDEM_CPU_SCALAR=1");
        assert!(avx512_dot_fn(ElemType::Q8_0, false).is_none() && avx512_dot_fn(ElemType::Q8_0, true).is_none());
        return;
    }
    for ty in [ElemType::F16, ElemType::Q8_0, ElemType::Q4_0] {
        let want = avx512_dot_fn(ty, true).or_else(|| avx512_dot_fn(ty, false));
        assert!(want.is_some(), "{ty}");
        assert_eq!(dot_fn(ty).map(|k| k as usize), want.map(|k| k as usize), "{ty}");
    }
    assert_eq!(avx512_dot_fn(ElemType::Q6K, false).map(|k| k as usize), None);
}

/// Throughput of the AVX2 and AVX-512 kernels on one 4096-element row pair that stays in L1
/// (`cargo test -p tandem-ops --lib avx512_speed -- --ignored --nocapture`).
#[test]
#[ignore]
fn avx512_speed() {
    #[cfg(target_arch = "x86_64")]
    {
        let mut rng = Pcg64::seed_from_u64(5);
        for ty in [ElemType::F16, ElemType::Q8_0, ElemType::Q4_0] {
            let (n, w, _, a) = rows(&mut rng, ty, 4096 / ty.block_size().max(vec_dot_type(ty).block_size()));
            let mut kernels: Vec<(&str, DotFn)> = Vec::new();
            if crate::simd::features().has_avx2_fma() {
                let k: DotFn = match ty {
                    ElemType::F16 => super::avx2::dot_f16,
                    ElemType::Q8_0 => super::avx2::dot_q8_0,
                    _ => super::avx2::dot_q4_0,
                };
                kernels.push(("avx2", k));
            }
            kernels.extend(avx512_dot_fn(ty, false).map(|k| ("avx512", k)));
            kernels.extend(avx512_dot_fn(ty, true).map(|k| ("avx512vnni", k)));
            for (name, k) in kernels {
                let reps = 20_000;
                let t = std::time::Instant::now();
                let mut sink = 0.0f32;
                for _ in 0..reps {
                    // SAFETY: rows() made both rows n elements long; the kernel was chosen for
                    // this CPU's features.
                    sink += unsafe { k(n, std::hint::black_box(w.as_ptr()), a.as_ptr()) };
                }
                let ns = t.elapsed().as_nanos() as f64 / reps as f64;
                eprintln!("{ty} {name}: {ns:.0} ns per 4096-element dot ({sink:e})");
            }
        }
    }
}
