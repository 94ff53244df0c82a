//! ggml's block formats: reference quantizers byte-identical to ggml's `quantize_row_*_ref`
//! (and `quantize_iq4_nl` without an importance matrix), dequantizers identical to ggml's
//! `dequantize_row_*`, and f16/bf16 row conversion.
//!
//! - [`float`]: f32 ↔ f16/bf16, scalar and row-wise (F16C when present).
//! - `legacy`: q4_0, q4_1, q5_0, q5_1, q8_0, q8_1.
//! - `q2k_q3k`, `q4k_q5k`, `q6k_q8k`: the k-quants, with their scale searches in `ksearch`.
//! - `iq4nl`: iq4_nl.

mod block_io;
pub mod float;
mod iq4nl;
mod ksearch;
mod legacy;
mod q2k_q3k;
mod q4k_q5k;
mod q6k_q8k;
#[cfg(test)]
mod test_rows;

pub use float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use tandem_graph::ElemType;

/// A row could not be converted: names the type and the sizes that do not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ty}: {reason}")]
pub struct QuantError {
    pub ty: ElemType,
    pub reason: String,
}

type Quantizer = fn(&[f32], &mut [u8]);
type Dequantizer = fn(&[u8], &mut [f32]);

fn copy_f32_to_bytes(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.iter().zip(dst.chunks_exact_mut(4)) {
        out.copy_from_slice(&x.to_le_bytes());
    }
}

fn copy_bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

fn quantizer(ty: ElemType) -> Option<Quantizer> {
    Some(match ty {
        ElemType::F32 => copy_f32_to_bytes,
        ElemType::F16 => float::f32_row_to_f16,
        ElemType::BF16 => float::f32_row_to_bf16,
        ElemType::Q4_0 => legacy::quantize_q4_0,
        ElemType::Q4_1 => legacy::quantize_q4_1,
        ElemType::Q5_0 => legacy::quantize_q5_0,
        ElemType::Q5_1 => legacy::quantize_q5_1,
        ElemType::Q8_0 => legacy::quantize_q8_0,
        ElemType::Q8_1 => legacy::quantize_q8_1,
        ElemType::Q2K => q2k_q3k::quantize_q2_k,
        ElemType::Q3K => q2k_q3k::quantize_q3_k,
        ElemType::Q4K => q4k_q5k::quantize_q4_k,
        ElemType::Q5K => q4k_q5k::quantize_q5_k,
        ElemType::Q6K => q6k_q8k::quantize_q6_k,
        ElemType::Q8K => q6k_q8k::quantize_q8_k,
        ElemType::IQ4NL => iq4nl::quantize_iq4_nl,
        ElemType::I8 | ElemType::I16 | ElemType::I32 | ElemType::I64 | ElemType::F64 => return None,
    })
}

fn dequantizer(ty: ElemType) -> Option<Dequantizer> {
    Some(match ty {
        ElemType::F32 => copy_bytes_to_f32,
        ElemType::F16 => float::f16_row_to_f32,
        ElemType::BF16 => float::bf16_row_to_f32,
        ElemType::Q4_0 => legacy::dequantize_q4_0,
        ElemType::Q4_1 => legacy::dequantize_q4_1,
        ElemType::Q5_0 => legacy::dequantize_q5_0,
        ElemType::Q5_1 => legacy::dequantize_q5_1,
        ElemType::Q8_0 => legacy::dequantize_q8_0,
        ElemType::Q8_1 => legacy::dequantize_q8_1,
        ElemType::Q2K => q2k_q3k::dequantize_q2_k,
        ElemType::Q3K => q2k_q3k::dequantize_q3_k,
        ElemType::Q4K => q4k_q5k::dequantize_q4_k,
        ElemType::Q5K => q4k_q5k::dequantize_q5_k,
        ElemType::Q6K => q6k_q8k::dequantize_q6_k,
        ElemType::Q8K => q6k_q8k::dequantize_q8_k,
        ElemType::IQ4NL => iq4nl::dequantize_iq4_nl,
        ElemType::I8 | ElemType::I16 | ElemType::I32 | ElemType::I64 | ElemType::F64 => return None,
    })
}

/// Types [`quantize_row`] can produce.
pub fn can_quantize(ty: ElemType) -> bool {
    quantizer(ty).is_some()
}

/// Types [`dequantize_row`] can read.
pub fn can_dequantize(ty: ElemType) -> bool {
    dequantizer(ty).is_some()
}

/// Checks that `n` values are whole blocks of `ty` and that `bytes` is exactly their size.
fn check_sizes(ty: ElemType, n: usize, bytes: usize, what: &str) -> Result<(), QuantError> {
    let err = |reason: String| Err(QuantError { ty, reason });
    let Some(row_size) = i64::try_from(n).ok().and_then(|n| ty.row_size(n)) else {
        return err(format!(
            "{n} values are not a whole number of {}-element blocks",
            ty.block_size()
        ));
    };
    if bytes != row_size {
        return err(format!("{what} has {bytes} bytes, {n} values need {row_size}"));
    }
    Ok(())
}

fn unsupported(ty: ElemType) -> QuantError {
    QuantError {
        ty,
        reason: "no block format conversion for this type".into(),
    }
}

/// Quantizes `src` (a whole number of blocks) into `dst` (exactly `ty.row_size(src.len())`
/// bytes), byte-identical to ggml's reference quantizer — what `ggml_quantize_chunk` writes
/// without an importance matrix (for q8_1 and q8_K, which it does not take: their
/// `quantize_row_*_ref`).
pub fn quantize_row(ty: ElemType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let quantize = quantizer(ty).ok_or_else(|| unsupported(ty))?;
    check_sizes(ty, src.len(), dst.len(), "destination")?;
    quantize(src, dst);
    Ok(())
}

/// As [`quantize_row`], but as ggml's `from_float_ref` of the type, which is also what ggml's
/// CPU backend stores for SET_ROWS/CPY into the reference-quantized types. The two differ only
/// for iq4_nl, whose `from_float_ref` skips the scale search.
pub fn quantize_row_from_float_ref(ty: ElemType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    if ty != ElemType::IQ4NL {
        return quantize_row(ty, src, dst);
    }
    check_sizes(ty, src.len(), dst.len(), "destination")?;
    iq4nl::quantize_iq4_nl_single_pass(src, dst);
    Ok(())
}

/// Expands `src` (`ty.row_size(dst.len())` bytes) into `dst`.
pub fn dequantize_row(ty: ElemType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let dequantize = dequantizer(ty).ok_or_else(|| unsupported(ty))?;
    check_sizes(ty, dst.len(), src.len(), "source")?;
    dequantize(src, dst);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COVERED: [ElemType; 16] = [
        ElemType::F32,
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
    ];

    #[test]
    fn every_float_and_block_type_is_covered() {
        for ty in ElemType::ALL {
            let want = COVERED.contains(&ty);
            assert_eq!(can_quantize(ty), want, "{ty}");
            assert_eq!(can_dequantize(ty), want, "{ty}");
        }
    }

    #[test]
    fn bad_sizes_are_errors_not_panics() {
        for ty in COVERED {
            let bs = ty.block_size();
            let row = ty.row_size(bs as i64).unwrap();
            let src = vec![0.5f32; bs];
            let mut ok = vec![0u8; row];
            quantize_row(ty, &src, &mut ok).unwrap();
            assert!(quantize_row(ty, &src, &mut vec![0u8; row + 1]).is_err(), "{ty}");
            assert!(quantize_row(ty, &src, &mut vec![0u8; row - 1]).is_err(), "{ty}");
            assert!(
                quantize_row_from_float_ref(ty, &src, &mut vec![0u8; row + 1]).is_err(),
                "{ty}"
            );
            let mut back = vec![0f32; bs];
            dequantize_row(ty, &ok, &mut back).unwrap();
            assert!(dequantize_row(ty, &ok[..row - 1], &mut back).is_err(), "{ty}");
            assert!(dequantize_row(ty, &ok, &mut vec![0f32; bs + 1]).is_err(), "{ty}");
            if bs > 1 {
                let short = vec![0.5f32; bs - 1];
                let e = quantize_row(ty, &short, &mut ok).unwrap_err();
                assert_eq!(e.ty, ty);
                assert!(e.to_string().contains("whole number"), "{e}");
                assert!(dequantize_row(ty, &ok, &mut vec![0f32; bs - 1]).is_err(), "{ty}");
            }
        }
        let e = quantize_row(ElemType::I32, &[1.0], &mut [0u8; 4]).unwrap_err();
        assert_eq!(e.ty, ElemType::I32);
        assert!(dequantize_row(ElemType::F64, &[0u8; 8], &mut [0.0]).is_err());
    }

    #[test]
    fn empty_rows_are_fine() {
        for ty in COVERED {
            quantize_row(ty, &[], &mut []).unwrap();
            dequantize_row(ty, &[], &mut []).unwrap();
        }
    }

    #[test]
    fn f32_and_halves_round_trip() {
        let row = [1.0f32, -2.5, 0.1, 65504.0, -0.0, 3.0e-4];
        for ty in [ElemType::F32, ElemType::F16, ElemType::BF16] {
            let mut bytes = vec![0u8; ty.row_size(6).unwrap()];
            quantize_row(ty, &row, &mut bytes).unwrap();
            let mut back = [0f32; 6];
            dequantize_row(ty, &bytes, &mut back).unwrap();
            let rel = if ty == ElemType::BF16 {
                1.0 / 256.0
            } else {
                1.0 / 2048.0
            };
            for (a, b) in row.iter().zip(&back) {
                assert!((a - b).abs() <= a.abs() * rel, "{ty}: {a} -> {b}");
            }
        }
    }
}
