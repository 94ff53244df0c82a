//! GLU in f64: `dst = act(x) * g`, x and g taken from the halves of each src0 row (swappable)
//! or from src0 and src1.

use super::unary::{gelu_erf, gelu_tanh};
use crate::data::{indices, read_f64, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::{ElemType, GluOp, Tensor};

fn float(ty: ElemType) -> bool {
    matches!(ty, ElemType::F32 | ElemType::F16 | ElemType::BF16)
}

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let id = dst.param_i32(0);
    ensure(GluOp::from_ggml(id).is_some(), dst, srcs, || {
        format!("unknown GLU op {id}")
    })?;
    ensure(float(dst.ty) && float(a.ty), dst, srcs, || "only f32/f16/bf16".into())?;
    ensure(a.ne.iter().all(|&n| n >= 0), dst, srcs, || "negative size".into())?;
    match srcs[1] {
        Some(b) => {
            ensure(float(b.ty), dst, srcs, || "only f32/f16/bf16".into())?;
            ensure(b.ne == a.ne && dst.ne == a.ne, dst, srcs, || "shapes differ".into())
        }
        None => ensure(
            a.ne[0] % 2 == 0 && dst.ne == [a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]],
            dst,
            srcs,
            || "dst must hold half of each even-length src0 row".into(),
        ),
    }
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let Some(op) = GluOp::from_ggml(dst.param_i32(0)) else {
        return Err(OpError::new(dst, srcs, "unknown GLU op"));
    };
    let swapped = dst.param_i32(1) != 0;
    let nc = dst.ne[0];
    for i in indices(dst.ne) {
        // SAFETY: every index read is within its tensor (shapes checked: the one-source form
        // reads i0 and i0 + nc < 2 nc = src0.ne0).
        let (x, g) = unsafe {
            match srcs[1] {
                Some(b) => (read_f64(a, i), read_f64(b, i)),
                None => {
                    let first = read_f64(a, i);
                    let second = read_f64(a, [i[0] + nc, i[1], i[2], i[3]]);
                    if swapped {
                        (second, first)
                    } else {
                        (first, second)
                    }
                }
            }
        };
        let act = match op {
            GluOp::Reglu => x.max(0.0),
            GluOp::Geglu => gelu_tanh(x),
            GluOp::Swiglu => x / (1.0 + (-x).exp()),
            GluOp::GegluErf => gelu_erf(x),
            GluOp::GegluQuick => x / (1.0 + (-1.702 * x).exp()),
        };
        // SAFETY: i is within dst's shape.
        unsafe { write_f64(dst, i, act * g) };
    }
    Ok(())
}
