//! ADD, SUB, MUL, DIV in f64: `dst[i] = src0[i] op src1[i mod src1.ne]`, element by element.

use crate::data::{indices, read_f64, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::{ElemType, Op, Tensor};

fn float(ty: ElemType) -> bool {
    matches!(ty, ElemType::F32 | ElemType::F16 | ElemType::BF16)
}

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let b = need(dst, srcs, 1)?;
    ensure(float(dst.ty) && float(a.ty) && float(b.ty), dst, srcs, || {
        "only f32/f16/bf16".into()
    })?;
    ensure(
        [dst, a, b].iter().all(|t| t.ne.iter().all(|&n| n >= 0)),
        dst,
        srcs,
        || "negative size".into(),
    )?;
    ensure(dst.ne == a.ne, dst, srcs, || "dst and src0 shapes differ".into())?;
    let repeats = (0..4).all(|k| b.ne[k] > 0 && a.ne[k] % b.ne[k] == 0);
    ensure(repeats || dst.nelements() == 0, dst, srcs, || {
        "src1 does not repeat onto src0".into()
    })
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (a, b) = (need(dst, srcs, 0)?, need(dst, srcs, 1)?);
    for i in indices(dst.ne) {
        let j = [i[0] % b.ne[0], i[1] % b.ne[1], i[2] % b.ne[2], i[3] % b.ne[3]];
        // SAFETY: i is within dst's and src0's shape, j within src1's.
        let (x, y) = unsafe { (read_f64(a, i), read_f64(b, j)) };
        let v = match dst.op {
            Op::Add => x + y,
            Op::Sub => x - y,
            Op::Mul => x * y,
            Op::Div => x / y,
            other => return Err(OpError::new(dst, srcs, format!("{other} is not a binary op"))),
        };
        // SAFETY: i is within dst's shape.
        unsafe { write_f64(dst, i, v) };
    }
    Ok(())
}
