//! tandem's quantizers and dequantizers against the real ggml, byte for byte and bit for bit.
//!
//! For every type: seeded rows of several distributions plus edge rows go through ggml
//! (`ggml_quantize_chunk`, or the type's `from_float_ref` where `ggml_quantize_chunk` does not
//! take the type) and through `tandem_ops::quant`; the bytes must be identical. Dequantization
//! runs both sides on ggml's bytes and on random block bytes; the floats must have identical bits.

use llama_cpp_sys_2 as sys;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use std::ffi::c_void;
use tandem_graph::ElemType;
use tandem_ops::quant::{dequantize_row, quantize_row, quantize_row_from_float_ref};

// ggml-base exports these, but its public header does not declare them (q8_K has neither
// `to_float` nor `from_float_ref` in the type table).
extern "C" {
    fn quantize_row_q8_K_ref(x: *const f32, y: *mut c_void, k: i64);
    fn dequantize_row_q8_K(x: *const c_void, y: *mut f32, k: i64);
}

fn traits(ty: ElemType) -> &'static sys::ggml_type_traits {
    // SAFETY: ggml returns a pointer into its static type table for every valid type id.
    unsafe { &*sys::ggml_get_type_traits(ty.ggml_id()) }
}

/// ggml's quantization of `nrows` rows of `n` values, as a model converter would produce it.
fn ggml_quantize(ty: ElemType, src: &[f32], n: usize) -> Vec<u8> {
    let nrows = src.len() / n;
    let mut dst = vec![0u8; nrows * ty.row_size(n as i64).unwrap()];
    match ty {
        // Not handled by ggml_quantize_chunk: their row quantizers directly.
        ElemType::Q8_1 => ggml_from_float_ref(ty, src, &mut dst),
        // SAFETY: src holds src.len() floats and dst their q8_K size; q8_K leaves the sums of
        // all-zero blocks unwritten, so dst starts zeroed.
        ElemType::Q8K => unsafe { quantize_row_q8_K_ref(src.as_ptr(), dst.as_mut_ptr().cast(), src.len() as i64) },
        _ => dst = tandem_tests::ggml::quantize(ty, src, n, nrows).expect("ggml quantizes the rows"),
    }
    dst
}

fn ggml_from_float_ref(ty: ElemType, src: &[f32], dst: &mut [u8]) {
    let f = traits(ty).from_float_ref.expect("type has from_float_ref");
    // SAFETY: dst holds exactly the quantized size of src.
    unsafe { f(src.as_ptr(), dst.as_mut_ptr().cast(), src.len() as i64) };
}

/// ggml's dequantization of `src` into `n` floats.
fn ggml_dequantize(ty: ElemType, src: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    match ty {
        ElemType::F32 => {
            for (b, y) in src.chunks_exact(4).zip(y.iter_mut()) {
                *y = f32::from_le_bytes(b.try_into().unwrap());
            }
        }
        // SAFETY: src holds n/256 q8_K blocks, y has n floats.
        ElemType::Q8K => unsafe { dequantize_row_q8_K(src.as_ptr().cast(), y.as_mut_ptr(), n as i64) },
        // ggml has no q8_1 dequantizer: qs · d, with ggml's own f16 conversion of d.
        ElemType::Q8_1 => {
            for (b, y) in src.chunks_exact(36).zip(y.chunks_exact_mut(32)) {
                // SAFETY: plain conversion function without preconditions.
                let d = unsafe { sys::ggml_fp16_to_fp32(u16::from_le_bytes([b[0], b[1]])) };
                for (y, &q) in y.iter_mut().zip(&b[4..]) {
                    *y = q as i8 as f32 * d;
                }
            }
        }
        _ => {
            let f = traits(ty).to_float.expect("type has to_float");
            // SAFETY: src holds the quantized size of n values, y has n floats.
            unsafe { f(src.as_ptr().cast(), y.as_mut_ptr(), n as i64) };
        }
    }
    y
}

/// Edge rows: zeros, constants, one outlier, huge and tiny magnitudes (up to overflow and into
/// subnormals), negative only, exact halves for the rounding ties.
fn edge_rows(n: usize, rng: &mut Pcg64) -> Vec<Vec<f32>> {
    let mut noise = |scale: f32, offset: f32| -> Vec<f32> {
        (0..n)
            .map(|_| offset + scale * rng.random_range(-1.0f32..1.0))
            .collect()
    };
    let mut rows = vec![
        vec![0.0; n],
        vec![-0.0; n],
        vec![1.0; n],
        vec![-0.3; n],
        vec![65504.0; n],
        noise(1.0e30, 0.0),
        noise(3.0e38, 0.0),
        noise(1.0e-30, 0.0),
        noise(1.0e-40, 0.0),
        noise(1.0e-6, 0.0),
        noise(2.0, -3.0),
        noise(1.0e3, -2.0e3),
        (0..n).map(|i| (i as f32 - n as f32 / 2.0) * 0.5).collect(),
        (0..n).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 }).collect(),
        (0..n).map(|i| (i % 17) as f32 - 8.0).collect(),
    ];
    for big in [100.0f32, -100.0, 1.0e20] {
        let mut r = noise(0.01, 0.0);
        r[n / 3] = big;
        rows.push(r);
        let mut r = vec![0.0; n];
        r[n - 1] = big;
        rows.push(r);
    }
    rows
}

fn gaussian(rng: &mut Pcg64) -> f32 {
    let u1 = rng.random_range(f32::EPSILON..1.0f32);
    let u2 = rng.random_range(0.0f32..1.0);
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

/// `count` random rows of several distributions: uniform, gaussian, heavy-tailed, per-block
/// magnitudes over twelve decades, one-signed, sparse, and f32 bit patterns for the halves.
fn random_rows(ty: ElemType, n: usize, count: usize, rng: &mut Pcg64) -> Vec<Vec<f32>> {
    let bs = ty.block_size().max(32);
    (0..count)
        .map(|r| match r % 7 {
            0 => (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect(),
            1 => (0..n).map(|_| gaussian(rng) * 0.02).collect(),
            2 => (0..n).map(|_| gaussian(rng) * (2.0 * gaussian(rng)).exp()).collect(),
            3 => {
                let mut row = Vec::with_capacity(n);
                while row.len() < n {
                    let scale = 10f32.powi(rng.random_range(-6..6));
                    row.extend((0..bs).map(|_| gaussian(rng) * scale));
                }
                row.truncate(n);
                row
            }
            4 => (0..n).map(|_| rng.random_range(0.0f32..5.0)).collect(),
            5 => (0..n)
                .map(|_| {
                    if rng.random_range(0..8) == 0 {
                        gaussian(rng)
                    } else {
                        0.0
                    }
                })
                .collect(),
            _ if ty.is_float() => (0..n).map(|_| f32::from_bits(rng.random())).collect(),
            _ => (0..n).map(|_| -rng.random_range(0.0f32..1.0).powi(3)).collect(),
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Asserts equal bytes block by block, naming the first block that differs.
fn assert_same_bytes(ty: ElemType, what: &str, input: &[f32], ours: &[u8], theirs: &[u8]) {
    let (bs, ts) = (ty.block_size(), ty.type_size());
    for (b, (o, t)) in ours.chunks(ts).zip(theirs.chunks(ts)).enumerate() {
        assert!(
            o == t,
            "{ty} {what}: block {b} differs\n input {:?}\n ours  {}\n ggml  {}",
            &input[b * bs..(b + 1) * bs],
            hex(o),
            hex(t)
        );
    }
    assert_eq!(ours.len(), theirs.len());
}

fn assert_same_bits(ty: ElemType, what: &str, ours: &[f32], theirs: &[f32]) {
    for (i, (o, t)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            o.to_bits() == t.to_bits(),
            "{ty} {what}: value {i}: ours {o:e} ({:#x}) ggml {t:e} ({:#x})",
            o.to_bits(),
            t.to_bits()
        );
    }
}

/// Random block bytes: any bit pattern is a valid block, including NaN and infinite scales.
fn random_blocks(ty: ElemType, n: usize, rng: &mut Pcg64) -> Vec<u8> {
    (0..ty.row_size(n as i64).unwrap()).map(|_| rng.random()).collect()
}

/// ggml's `quantize_row_iq4_nl_ref` leaves the indices of an all-zero block unset (stale or
/// uninitialized stack values); only the zero scale of such a block is defined, so the indices of
/// blocks whose scale is zero on both sides are cleared before comparing.
fn mask_unset_iq4_nl_indices(ours: &mut [u8], theirs: &mut [u8]) {
    for (o, t) in ours.chunks_exact_mut(18).zip(theirs.chunks_exact_mut(18)) {
        if o[..2] == [0, 0] && t[..2] == [0, 0] {
            o[2..].fill(0);
            t[2..].fill(0);
        }
    }
}

fn compare_type(ty: ElemType, random_count: usize) {
    let n = 8 * ty.block_size().max(32);
    let mut rng = Pcg64::seed_from_u64(0x7a9d_e000 + ty.ggml_id() as u64);
    let mut rows = edge_rows(n, &mut rng);
    rows.extend(random_rows(ty, n, random_count, &mut rng));
    let src: Vec<f32> = rows.concat();
    let row_bytes = ty.row_size(n as i64).unwrap();

    let theirs = ggml_quantize(ty, &src, n);
    let mut ours = vec![0u8; theirs.len()];
    for (r, (x, out)) in rows.iter().zip(ours.chunks_exact_mut(row_bytes)).enumerate() {
        quantize_row(ty, x, out).unwrap_or_else(|e| panic!("row {r}: {e}"));
    }
    for (r, (o, t)) in ours.chunks(row_bytes).zip(theirs.chunks(row_bytes)).enumerate() {
        assert_same_bytes(ty, &format!("quantize row {r}"), &rows[r], o, t);
    }

    // from_float_ref (and its iq4_nl variant), where the type table has one.
    let mut ref_rows = 0;
    if traits(ty).from_float_ref.is_some() {
        let mut theirs_ref = vec![0u8; theirs.len()];
        let mut ours_ref = vec![0u8; theirs.len()];
        for (r, x) in rows.iter().enumerate() {
            let range = r * row_bytes..(r + 1) * row_bytes;
            ggml_from_float_ref(ty, x, &mut theirs_ref[range.clone()]);
            quantize_row_from_float_ref(ty, x, &mut ours_ref[range]).unwrap();
        }
        if ty == ElemType::IQ4NL {
            mask_unset_iq4_nl_indices(&mut ours_ref, &mut theirs_ref);
        }
        for (r, (o, t)) in ours_ref.chunks(row_bytes).zip(theirs_ref.chunks(row_bytes)).enumerate() {
            assert_same_bytes(ty, &format!("from_float_ref row {r}"), &rows[r], o, t);
        }
        ref_rows = rows.len();
    }

    // Dequantize ggml's bytes on both sides, then random bytes.
    let mut dq_rows = 0;
    let fuzz_rows = if ty == ElemType::F32 { 0 } else { 64 };
    let fuzz: Vec<Vec<u8>> = (0..fuzz_rows).map(|_| random_blocks(ty, n, &mut rng)).collect();
    for (what, bytes) in theirs
        .chunks(row_bytes)
        .map(|b| ("dequantize", b))
        .chain(fuzz.iter().map(|b| ("dequantize random", &b[..])))
    {
        let want = ggml_dequantize(ty, bytes, n);
        let mut got = vec![0f32; n];
        dequantize_row(ty, bytes, &mut got).unwrap();
        assert_same_bits(ty, &format!("{what} row {dq_rows}"), &got, &want);
        dq_rows += 1;
    }
    let ref_note = match ref_rows {
        0 => "ggml has no from_float_ref".to_string(),
        r => format!("from_float_ref bytes equal on {r} rows"),
    };
    println!(
        "{ty:>6}: {} rows of {n}: quantize bytes equal, {ref_note}, dequantize bits equal on {dq_rows} rows \
         ({fuzz_rows} of random bytes)",
        rows.len()
    );
}

macro_rules! compare_tests {
    ($($name:ident: $ty:expr, $count:expr;)*) => {$(
        #[test]
        fn $name() {
            compare_type($ty, $count);
        }
    )*};
}

compare_tests! {
    f32_matches_ggml: ElemType::F32, 100;
    f16_matches_ggml: ElemType::F16, 400;
    bf16_matches_ggml: ElemType::BF16, 400;
    q4_0_matches_ggml: ElemType::Q4_0, 400;
    q4_1_matches_ggml: ElemType::Q4_1, 400;
    q5_0_matches_ggml: ElemType::Q5_0, 400;
    q5_1_matches_ggml: ElemType::Q5_1, 400;
    q8_0_matches_ggml: ElemType::Q8_0, 400;
    q8_1_matches_ggml: ElemType::Q8_1, 400;
    q2_k_matches_ggml: ElemType::Q2K, 200;
    q3_k_matches_ggml: ElemType::Q3K, 200;
    q4_k_matches_ggml: ElemType::Q4K, 200;
    q5_k_matches_ggml: ElemType::Q5K, 200;
    q6_k_matches_ggml: ElemType::Q6K, 200;
    q8_k_matches_ggml: ElemType::Q8K, 200;
    iq4_nl_matches_ggml: ElemType::IQ4NL, 400;
}

/// ggml's CPU backend quantizes SET_ROWS/CPY destinations with its own `from_float`: the
/// reference quantizers for most types (must match `quantize_row_from_float_ref`), SIMD variants
/// for the activation formats and the halves (reported, not asserted).
#[test]
fn cpu_backend_from_float() {
    let mut rng = Pcg64::seed_from_u64(31);
    for ty in [
        ElemType::F16,
        ElemType::BF16,
        ElemType::Q4_0,
        ElemType::Q4_1,
        ElemType::Q5_0,
        ElemType::Q5_1,
        ElemType::Q8_0,
        ElemType::Q8_1,
        ElemType::Q2K,
        ElemType::Q3K,
        ElemType::Q4K,
        ElemType::Q5K,
        ElemType::Q6K,
        ElemType::Q8K,
        ElemType::IQ4NL,
    ] {
        let n = 8 * ty.block_size().max(32);
        let rows = random_rows(ty, n, 70, &mut rng);
        let row_bytes = ty.row_size(n as i64).unwrap();
        // SAFETY: static table lookup in ggml-cpu.
        let cpu = unsafe { &*sys::ggml_get_type_traits_cpu(ty.ggml_id()) };
        let from_float = cpu.from_float.expect("cpu from_float");
        let (mut blocks, mut differing) = (0, 0);
        for x in &rows {
            let (mut theirs, mut ours) = (vec![0u8; row_bytes], vec![0u8; row_bytes]);
            // SAFETY: theirs holds the quantized size of x.
            unsafe { from_float(x.as_ptr(), theirs.as_mut_ptr().cast(), n as i64) };
            quantize_row_from_float_ref(ty, x, &mut ours).unwrap();
            if ty == ElemType::IQ4NL {
                mask_unset_iq4_nl_indices(&mut ours, &mut theirs);
            }
            for (o, t) in ours.chunks(ty.type_size()).zip(theirs.chunks(ty.type_size())) {
                blocks += 1;
                differing += (o != t) as usize;
            }
            let simd_variant = matches!(
                ty,
                ElemType::F16 | ElemType::BF16 | ElemType::Q8_0 | ElemType::Q8_1 | ElemType::Q8K
            );
            if !simd_variant {
                assert_same_bytes(ty, "cpu from_float", x, &ours, &theirs);
            }
        }
        println!("{ty:>6}: cpu from_float vs reference: {differing} of {blocks} blocks differ");
    }
}
