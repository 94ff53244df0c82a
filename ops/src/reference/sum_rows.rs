//! SUM_ROWS in f64.

use crate::data::{read_f64, rows, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::{ElemType, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let float = |t: ElemType| matches!(t, ElemType::F32 | ElemType::F16 | ElemType::BF16);
    ensure(float(dst.ty) && float(a.ty), dst, srcs, || "only f32/f16/bf16".into())?;
    ensure(a.ne.iter().all(|&n| n >= 0), dst, srcs, || "negative size".into())?;
    ensure(dst.ne == [1, a.ne[1], a.ne[2], a.ne[3]], dst, srcs, || {
        "dst must be [1, ne1, ne2, ne3]".into()
    })
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    for [_, i1, i2, i3] in rows(a.ne) {
        // SAFETY: every index is within src0's shape; the row index within dst's.
        unsafe {
            let sum: f64 = (0..a.ne[0]).map(|i0| read_f64(a, [i0, i1, i2, i3])).sum();
            write_f64(dst, [0, i1, i2, i3], sum);
        }
    }
    Ok(())
}
