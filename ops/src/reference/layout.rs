//! REPEAT, CONCAT and PAD reference: each result element read from where the op's definition
//! puts it (or zero), element by element.

use crate::data::{indices, read_f64, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::{ElemType, Op, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let readable = |t: ElemType| matches!(t, ElemType::F32 | ElemType::F16 | ElemType::BF16 | ElemType::I32);
    ensure(readable(dst.ty) && a.ty == dst.ty, dst, srcs, || {
        "only f32/f16/bf16/i32, one type".into()
    })?;
    ensure(dst.ne.iter().chain(&a.ne).all(|&n| n >= 0), dst, srcs, || {
        "negative size".into()
    })?;
    match dst.op {
        Op::Repeat => ensure(
            (0..4).all(|k| a.ne[k] > 0 && dst.ne[k] % a.ne[k] == 0),
            dst,
            srcs,
            || "not a multiple".into(),
        ),
        Op::Concat => {
            let b = need(dst, srcs, 1)?;
            let d = dst.param_i32(0);
            ensure((0..4).contains(&d) && b.ty == a.ty, dst, srcs, || {
                "bad dim or types".into()
            })?;
            let d = d as usize;
            let mut ne = a.ne;
            ne[d] += b.ne[d];
            let same = (0..4).all(|k| k == d || a.ne[k] == b.ne[k]);
            ensure(same && ne == dst.ne, dst, srcs, || "shapes do not join".into())
        }
        Op::Pad => {
            let p: Vec<i64> = (0..8).map(|i| dst.param_i32(i) as i64).collect();
            ensure(dst.ty == ElemType::F32 && p.iter().all(|&x| x >= 0), dst, srcs, || {
                "f32 and non-negative padding only".into()
            })?;
            let circular = dst.param_i32(8) != 0;
            ensure(!circular || a.ne.iter().all(|&n| n > 0), dst, srcs, || {
                "empty source".into()
            })?;
            ensure(
                (0..4).all(|k| dst.ne[k] == a.ne[k] + p[2 * k] + p[2 * k + 1]),
                dst,
                srcs,
                || "shape is not src0 plus the padding".into(),
            )
        }
        _ => Err(OpError::new(dst, srcs, "not a layout op")),
    }
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    for i in indices(dst.ne) {
        let v = match dst.op {
            Op::Repeat => read_f64(a, [i[0] % a.ne[0], i[1] % a.ne[1], i[2] % a.ne[2], i[3] % a.ne[3]]),
            Op::Concat => {
                let d = dst.param_i32(0) as usize;
                if i[d] < a.ne[d] {
                    read_f64(a, i)
                } else {
                    let b = need(dst, srcs, 1)?;
                    let mut j = i;
                    j[d] -= a.ne[d];
                    read_f64(b, j)
                }
            }
            _ => {
                let circular = dst.param_i32(8) != 0;
                let j: [i64; 4] = std::array::from_fn(|k| i[k] - dst.param_i32(2 * k) as i64);
                if circular {
                    read_f64(a, std::array::from_fn(|k| ((j[k] % a.ne[k]) + a.ne[k]) % a.ne[k]))
                } else if (0..4).all(|k| j[k] >= 0 && j[k] < a.ne[k]) {
                    read_f64(a, j)
                } else {
                    0.0
                }
            }
        };
        write_f64(dst, i, v);
    }
    Ok(())
}
