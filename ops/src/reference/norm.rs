//! NORM, RMS_NORM and L2_NORM reference, all in f64.

use crate::data::{read_f64, rows, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::{params, ElemType, Op, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    ensure(a.ty == ElemType::F32 && dst.ty == ElemType::F32, dst, srcs, || {
        "only f32 is supported".into()
    })?;
    ensure(a.ne == dst.ne, dst, srcs, || "dst shape differs from src0".into())?;
    let eps = params::norm_eps(dst);
    ensure(eps.is_finite() && eps >= 0.0, dst, srcs, || {
        format!("eps {eps} is invalid")
    })
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let Some(a) = srcs[0] else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    let eps = params::norm_eps(dst) as f64;
    let n = a.ne[0];
    for r in rows(a.ne) {
        let x: Vec<f64> = (0..n).map(|i0| read_f64(a, [i0, r[1], r[2], r[3]])).collect();
        let y: Vec<f64> = if dst.op == Op::RmsNorm {
            let ms = x.iter().map(|v| v * v).sum::<f64>() / n as f64;
            x.iter().map(|v| v / (ms + eps).sqrt()).collect()
        } else if dst.op == Op::L2Norm {
            let len = x.iter().map(|v| v * v).sum::<f64>().sqrt().max(eps);
            x.iter().map(|v| v / len).collect()
        } else {
            let mean = x.iter().sum::<f64>() / n as f64;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
            x.iter().map(|v| (v - mean) / (var + eps).sqrt()).collect()
        };
        for (i0, v) in y.into_iter().enumerate() {
            write_f64(dst, [i0 as i64, r[1], r[2], r[3]], v);
        }
    }
    Ok(())
}
