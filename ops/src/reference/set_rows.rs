//! SET_ROWS reference: source rows written in order (a repeated index leaves the last one),
//! element by element through `crate::data`; quantized rows go through
//! `crate::quant::quantize_row_from_float_ref` (the type's `from_float`, as ggml's CPU backend).

use crate::data::{indices, read_f64, read_index, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::{ElemType, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let b = need(dst, srcs, 0)?;
    let c = need(dst, srcs, 1)?;
    let a = need(dst, srcs, 2)?;
    ensure(matches!(b.ty, ElemType::F32 | ElemType::F16), dst, srcs, || {
        format!("src0 must be f32 or f16, not {}", b.ty)
    })?;
    ensure(matches!(c.ty, ElemType::I32 | ElemType::I64), dst, srcs, || {
        format!("src1 must be i32 or i64, not {}", c.ty)
    })?;
    let writable = matches!(
        dst.ty,
        ElemType::F32
            | ElemType::F16
            | ElemType::BF16
            | ElemType::Q8_0
            | ElemType::Q4_0
            | ElemType::Q4_1
            | ElemType::Q5_0
            | ElemType::Q5_1
            | ElemType::IQ4NL
    );
    ensure(writable, dst, srcs, || format!("dst type {} is not supported", dst.ty))?;
    ensure(a.ty == dst.ty && a.ne == dst.ne, dst, srcs, || {
        "dst must match src2".into()
    })?;
    ensure(
        b.ne[0] == dst.ne[0] && b.ne[2] == dst.ne[2] && b.ne[3] == dst.ne[3],
        dst,
        srcs,
        || "src0 must be [dst.ne0, n, dst.ne2, dst.ne3]".into(),
    )?;
    let idx_ok = c.ne[0] == b.ne[1]
        && c.ne[3] == 1
        && c.ne[1] > 0
        && c.ne[2] > 0
        && b.ne[2] % c.ne[1] == 0
        && b.ne[3] % c.ne[2] == 0;
    ensure(idx_ok, dst, srcs, || "src1 (indices) does not fit src0".into())?;
    ensure(dst.ne[0] % dst.ty.block_size() as i64 == 0, dst, srcs, || {
        "dst rows are not whole blocks".into()
    })?;
    ensure(
        !dst.ty.is_quantized() || dst.nb[0] == dst.ty.type_size(),
        dst,
        srcs,
        || "quantized dst rows must be contiguous".into(),
    )
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (Some(b), Some(c)) = (srcs[0], srcs[1]) else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    for i in indices(c.ne) {
        let v = read_index(c, i);
        if v < 0 || v >= dst.ne[1] {
            return Err(OpError::new(
                dst,
                srcs,
                format!(
                    "index {v} at [{}, {}, {}] is outside 0..{}",
                    i[0], i[1], i[2], dst.ne[1]
                ),
            ));
        }
    }
    let ne0 = dst.ne[0];
    let mut row = vec![0f32; ne0 as usize];
    for i3 in 0..b.ne[3] {
        for i2 in 0..b.ne[2] {
            for i in 0..b.ne[1] {
                let target = read_index(c, [i, i2 % c.ne[1], i3 % c.ne[2], 0]);
                if dst.ty.is_quantized() {
                    for i0 in 0..ne0 {
                        row[i0 as usize] = read_f64(b, [i0, i, i2, i3]) as f32;
                    }
                    let len = dst.ty.row_size(ne0).unwrap_or(0);
                    let start = (dst.data + dst.offset_of([0, target, i2, i3])) as *mut u8;
                    let out = std::slice::from_raw_parts_mut(start, len);
                    crate::quant::quantize_row_from_float_ref(dst.ty, &row, out)
                        .map_err(|e| OpError::new(dst, srcs, format!("quantizing a row: {e}")))?;
                } else {
                    for i0 in 0..ne0 {
                        write_f64(dst, [i0, target, i2, i3], read_f64(b, [i0, i, i2, i3]));
                    }
                }
            }
        }
    }
    Ok(())
}
