//! GET_ROWS reference: element by element through `crate::data`; quantized rows go through
//! `crate::quant::dequantize_row`.

use crate::data::{indices, read_f64, read_index, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::{ElemType, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let b = need(dst, srcs, 1)?;
    let plain = matches!(a.ty, ElemType::F32 | ElemType::F16 | ElemType::BF16 | ElemType::I32);
    ensure(plain || ElemType::WEIGHT_QUANTS.contains(&a.ty), dst, srcs, || {
        format!("src0 type {} cannot be gathered", a.ty)
    })?;
    let out_ty = match a.ty {
        ElemType::I32 => ElemType::I32,
        _ => ElemType::F32,
    };
    ensure(dst.ty == out_ty, dst, srcs, || format!("dst must be {out_ty}"))?;
    ensure(b.ty == ElemType::I32, dst, srcs, || "src1 must be i32 indices".into())?;
    ensure(
        b.ne[1] == a.ne[2] && b.ne[2] == a.ne[3] && b.ne[3] == 1,
        dst,
        srcs,
        || "src1 must be [n, src0.ne2, src0.ne3]".into(),
    )?;
    ensure(dst.ne == [a.ne[0], b.ne[0], b.ne[1], b.ne[2]], dst, srcs, || {
        "dst must be [src0.ne0, n, ne2, ne3]".into()
    })?;
    ensure(a.ne[0] % a.ty.block_size() as i64 == 0, dst, srcs, || {
        "src0 rows are not whole blocks".into()
    })?;
    ensure(!a.ty.is_quantized() || a.nb[0] == a.ty.type_size(), dst, srcs, || {
        "quantized src0 rows must be contiguous".into()
    })
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (Some(a), Some(b)) = (srcs[0], srcs[1]) else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    // First pass: every index must name a row of `a`.
    for i in indices(b.ne) {
        let v = read_index(b, i);
        if v < 0 || v >= a.ne[1] {
            return Err(OpError::new(
                dst,
                srcs,
                format!("index {v} at [{}, {}, {}] is outside 0..{}", i[0], i[1], i[2], a.ne[1]),
            ));
        }
    }
    let ne0 = a.ne[0] as usize;
    let mut row = vec![0f32; ne0];
    for j in indices(b.ne) {
        let r = read_index(b, j);
        if a.ty.is_quantized() {
            let start = (a.data + a.offset_of([0, r, j[1], j[2]])) as *const u8;
            let len = a.ty.row_size(a.ne[0]).unwrap_or(0);
            let bytes = std::slice::from_raw_parts(start, len);
            crate::quant::dequantize_row(a.ty, bytes, &mut row)
                .map_err(|e| OpError::new(dst, srcs, format!("dequantizing src0: {e}")))?;
            for (i0, v) in row.iter().enumerate() {
                write_f64(dst, [i0 as i64, j[0], j[1], j[2]], *v as f64);
            }
        } else {
            for i0 in 0..a.ne[0] {
                let v = read_f64(a, [i0, r, j[1], j[2]]);
                write_f64(dst, [i0, j[0], j[1], j[2]], v);
            }
        }
    }
    Ok(())
}
