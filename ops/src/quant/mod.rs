//! ggml's block formats: reference quantizers byte-identical to ggml's `quantize_row_*_ref`
//! (and `quantize_iq4_nl` without an importance matrix), dequantizers identical to ggml's
//! `dequantize_row_*`, and f16/bf16 row conversion.

use tandem_graph::ElemType;

/// A row could not be converted: names the type and the sizes that do not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ty}: {reason}")]
pub struct QuantError {
    pub ty: ElemType,
    pub reason: String,
}

/// Types [`quantize_row`] can produce.
pub fn can_quantize(ty: ElemType) -> bool {
    let _ = ty;
    false
}

/// Types [`dequantize_row`] can read.
pub fn can_dequantize(ty: ElemType) -> bool {
    let _ = ty;
    false
}

/// Quantizes `src` (a whole number of blocks) into `dst` (exactly `ty.row_size(src.len())`
/// bytes), byte-identical to ggml's reference quantizer.
pub fn quantize_row(ty: ElemType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let _ = (src, dst);
    Err(QuantError {
        ty,
        reason: "not implemented".into(),
    })
}

/// Expands `src` (`ty.row_size(dst.len())` bytes) into `dst`.
pub fn dequantize_row(ty: ElemType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let _ = (src, dst);
    Err(QuantError {
        ty,
        reason: "not implemented".into(),
    })
}
