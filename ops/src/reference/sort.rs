//! ARGSORT and TOP_K reference: a stable sort of each row's indices by value (NaN after every
//! number, in both orders), so equal values keep the lower index first. TOP_K is the first k
//! of the descending order.

use crate::data::{read_f64, rows, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use std::cmp::Ordering;
use tandem_graph::{ElemType, Op, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    ensure(a.ty == ElemType::F32, dst, srcs, || "src0 must be f32".into())?;
    ensure(dst.ty == ElemType::I32, dst, srcs, || "dst must be i32".into())?;
    ensure(a.ne[0] <= i32::MAX as i64, dst, srcs, || {
        "row too long for i32 indices".into()
    })?;
    if dst.op == Op::TopK {
        let k = dst.ne[0];
        ensure(k >= 1 && k <= a.ne[0] && dst.ne[1..] == a.ne[1..], dst, srcs, || {
            format!("k = {k} must be in 1..=ne0 and the other dims must match")
        })
    } else {
        let order = dst.param_i32(0);
        ensure(order == 0 || order == 1, dst, srcs, || {
            format!("sort order {order} is invalid")
        })?;
        ensure(a.ne == dst.ne, dst, srcs, || "dst shape differs from src0".into())
    }
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let Some(a) = srcs[0] else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    let descending = dst.op == Op::TopK || dst.param_i32(0) == 1;
    for r in rows(a.ne) {
        let vals: Vec<f64> = (0..a.ne[0]).map(|i0| read_f64(a, [i0, r[1], r[2], r[3]])).collect();
        let mut order: Vec<usize> = (0..vals.len()).collect();
        order.sort_by(|&i, &j| {
            let (x, y) = (vals[i], vals[j]);
            match (x.is_nan(), y.is_nan()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) if descending => y.partial_cmp(&x).unwrap_or(Ordering::Equal),
                (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            }
        });
        for (j, &i) in order.iter().take(dst.ne[0] as usize).enumerate() {
            write_f64(dst, [j as i64, r[1], r[2], r[3]], i as f64);
        }
    }
    Ok(())
}
