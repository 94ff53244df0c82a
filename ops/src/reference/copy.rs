//! CPY, CONT, DUP: the k-th element of src0 in flat order becomes the k-th of dst. Every source
//! value is gathered first and written afterwards, so overlapping tensors cannot interfere.

use crate::data::{elem_ptr, indices, read_f64, rows, write_f64};
use crate::error::{ensure, need};
use crate::quant::{dequantize_row, quantize_row_from_float_ref};
use crate::{OpError, Srcs};
use tandem_graph::{ElemType, Tensor};

fn float(ty: ElemType) -> bool {
    matches!(ty, ElemType::F32 | ElemType::F16 | ElemType::BF16)
}

fn quant_target(ty: ElemType) -> bool {
    use ElemType::*;
    matches!(ty, Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | IQ4NL)
}

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    ensure(a.ne.iter().chain(&dst.ne).all(|&n| n >= 0), dst, srcs, || {
        "negative size".into()
    })?;
    ensure(a.nelements() == dst.nelements(), dst, srcs, || {
        "element counts differ".into()
    })?;
    let supported = (a.ty == dst.ty && !a.ty.is_quantized())
        || (float(a.ty) && (float(dst.ty) || quant_target(dst.ty)))
        || (a.ty.is_quantized() && float(dst.ty));
    ensure(supported, dst, srcs, || {
        format!("{} into {} is not supported", a.ty, dst.ty)
    })?;
    for t in [a, dst] {
        if t.ty.is_quantized() {
            ensure(
                t.ne[0] % t.ty.block_size() as i64 == 0 && t.nb[0] == t.ty.type_size(),
                dst,
                srcs,
                || "quantized rows must be whole, contiguous blocks".into(),
            )?;
        }
    }
    Ok(())
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let fail = |what: &str, e: crate::quant::QuantError| OpError::new(dst, srcs, format!("{what}: {e}"));
    if a.ty == dst.ty {
        // Same plain type: move the bytes of each element unchanged.
        let size = a.ty.type_size();
        let mut bytes = Vec::new();
        for i in indices(a.ne) {
            // SAFETY: i is within src0's shape; `size` bytes per element.
            bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(elem_ptr(a, i), size) });
        }
        for (k, i) in indices(dst.ne).enumerate() {
            // SAFETY: i is within dst's shape.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().add(k * size), elem_ptr(dst, i), size) };
        }
        return Ok(());
    }
    let mut values: Vec<f32> = Vec::new();
    if a.ty.is_quantized() {
        let row_len = a.ne[0] as usize;
        let row_bytes = a.ty.row_size(a.ne[0]).unwrap_or(0);
        for r in rows(a.ne) {
            let start = values.len();
            values.resize(start + row_len, 0.0);
            // SAFETY: a row of whole contiguous blocks (checked).
            let src = unsafe { std::slice::from_raw_parts(elem_ptr(a, r), row_bytes) };
            dequantize_row(a.ty, src, &mut values[start..]).map_err(|e| fail("dequantizing", e))?;
        }
    } else {
        // SAFETY: every index is within src0's shape.
        values.extend(indices(a.ne).map(|i| unsafe { read_f64(a, i) } as f32));
    }
    if dst.ty.is_quantized() {
        let row_len = dst.ne[0] as usize;
        let row_bytes = dst.ty.row_size(dst.ne[0]).unwrap_or(0);
        for (k, r) in rows(dst.ne).enumerate() {
            let mut out = vec![0u8; row_bytes];
            quantize_row_from_float_ref(dst.ty, &values[k * row_len..(k + 1) * row_len], &mut out)
                .map_err(|e| fail("quantizing", e))?;
            // SAFETY: dst's row is `row_bytes` contiguous bytes (checked).
            unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), elem_ptr(dst, r), row_bytes) };
        }
    } else {
        for (i, &v) in indices(dst.ne).zip(&values) {
            // SAFETY: i is within dst's shape.
            unsafe { write_f64(dst, i, v as f64) };
        }
    }
    Ok(())
}
