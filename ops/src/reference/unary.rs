//! UNARY, SCALE, CLAMP and SQR/SQRT/LOG/SIN/COS in f64, element by element, from the textbook formulas.

use crate::data::{indices, read_f64, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::params::{clamp_params, scale_params};
use tandem_graph::{ElemType, Op, Tensor, UnaryOp};

fn float(ty: ElemType) -> bool {
    matches!(ty, ElemType::F32 | ElemType::F16 | ElemType::BF16)
}

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    ensure(float(dst.ty) && float(a.ty), dst, srcs, || "only f32/f16/bf16".into())?;
    ensure(dst.ne == a.ne && a.ne.iter().all(|&n| n >= 0), dst, srcs, || {
        "shapes differ".into()
    })?;
    if dst.op == Op::Unary {
        let id = dst.param_i32(0);
        ensure(UnaryOp::from_ggml(id).is_some(), dst, srcs, || {
            format!("unknown unary op {id}")
        })?;
    }
    let math = matches!(dst.op, Op::Sqr | Op::Sqrt | Op::Log | Op::Sin | Op::Cos);
    ensure(
        math || matches!(dst.op, Op::Unary | Op::Scale | Op::Clamp),
        dst,
        srcs,
        || "not a unary op".into(),
    )
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let unary = UnaryOp::from_ggml(dst.param_i32(0));
    let (s, b) = scale_params(dst);
    let (lo, hi) = clamp_params(dst);
    for i in indices(dst.ne) {
        // SAFETY: i is within both shapes (equal, checked).
        let x = unsafe { read_f64(a, i) };
        let v = match (dst.op, unary) {
            (Op::Scale, _) => x * s as f64 + b as f64,
            (Op::Clamp, _) => x.min(hi as f64).max(lo as f64),
            (Op::Sqr, _) => x * x,
            (Op::Sqrt, _) => x.sqrt(),
            (Op::Log, _) => x.ln(),
            (Op::Sin, _) => x.sin(),
            (Op::Cos, _) => x.cos(),
            (Op::Unary, Some(op)) => apply(op, x),
            _ => return Err(OpError::new(dst, srcs, "not a known unary op")),
        };
        // SAFETY: as above.
        unsafe { write_f64(dst, i, v) };
    }
    Ok(())
}

fn apply(op: UnaryOp, x: f64) -> f64 {
    let sigmoid = |t: f64| 1.0 / (1.0 + (-t).exp());
    match op {
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sgn => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Neg => -x,
        UnaryOp::Step => (x > 0.0) as u8 as f64,
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Elu => {
            if x > 0.0 {
                x
            } else {
                x.exp() - 1.0
            }
        }
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Gelu => gelu_tanh(x),
        UnaryOp::GeluQuick => x * sigmoid(1.702 * x),
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Hardswish => x * ((x + 3.0) / 6.0).clamp(0.0, 1.0),
        UnaryOp::Hardsigmoid => ((x + 3.0) / 6.0).clamp(0.0, 1.0),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Expm1 => x.exp() - 1.0,
        UnaryOp::Softplus => {
            if x > 20.0 {
                x
            } else {
                (1.0 + x.exp()).ln()
            }
        }
        UnaryOp::GeluErf => gelu_erf(x),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round(),
        UnaryOp::Trunc => x.trunc(),
    }
}

/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub(super) fn gelu_tanh(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

/// `0.5 x (1 + erf(x / sqrt 2))`.
pub(super) fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// erf from its everywhere-convergent series `2/sqrt(pi) e^(-x^2) sum 2^n x^(2n+1) / (2n+1)!!`
/// (all terms positive, so no cancellation); beyond |x| = 6, erf is 1 to double precision.
pub(super) fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() > 6.0 {
        return x.signum();
    }
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > 1e-18 * sum.abs() {
        n += 1.0;
        term *= 2.0 * x * x / (2.0 * n + 1.0);
        sum += term;
    }
    std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp() * sum
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_known_values() {
        // erf(0.5), erf(1), erf(2), erf(3) to 12+ digits.
        for (x, want) in [
            (0.5, 0.520_499_877_813),
            (1.0, 0.842_700_792_950),
            (2.0, 0.995_322_265_019),
            (3.0, 0.999_977_909_503),
        ] {
            assert!((super::erf(x) - want).abs() < 1e-11, "erf({x}) = {}", super::erf(x));
            assert!((super::erf(-x) + want).abs() < 1e-11);
        }
        assert_eq!(super::erf(0.0), 0.0);
    }
}
