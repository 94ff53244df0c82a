//! Scalar reference implementations: slow, simple, accumulating in f64 where it matters. The op
//! harness and tests compare every device against these. Same module split as [`crate::cpu`].

mod add_id;
mod attention;
mod binary;
mod copy;
mod get_rows;
mod glu;
mod layout;
mod matmul;
mod norm;
mod rope;
mod set_rows;
mod softmax;
mod sort;
mod sum_rows;
mod unary;

use crate::{OpError, Srcs};
use tandem_graph::{Op, Tensor};

/// Whether the reference can compute `dst` from `srcs`.
pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    match dst.op {
        Op::None | Op::Reshape | Op::View | Op::Permute | Op::Transpose => Ok(()),
        Op::Add | Op::Sub | Op::Mul | Op::Div => binary::check(dst, srcs),
        Op::AddId => add_id::check(dst, srcs),
        Op::Unary | Op::Scale | Op::Clamp | Op::Sqr | Op::Sqrt | Op::Log | Op::Sin | Op::Cos => unary::check(dst, srcs),
        Op::Glu => glu::check(dst, srcs),
        Op::SumRows => sum_rows::check(dst, srcs),
        Op::Repeat | Op::Concat | Op::Pad => layout::check(dst, srcs),
        Op::Cpy | Op::Cont | Op::Dup => copy::check(dst, srcs),
        Op::GetRows => get_rows::check(dst, srcs),
        Op::SetRows => set_rows::check(dst, srcs),
        Op::Norm | Op::RmsNorm | Op::L2Norm => norm::check(dst, srcs),
        Op::Rope => rope::check(dst, srcs),
        Op::SoftMax => softmax::check(dst, srcs),
        Op::Argsort | Op::TopK => sort::check(dst, srcs),
        Op::MulMat | Op::MulMatId => matmul::check(dst, srcs),
        Op::FlashAttnExt => attention::check(dst, srcs),
    }
}

/// Computes `dst` from `srcs`, single-threaded. Checks first; a node that fails the check is
/// not touched.
///
/// # Safety
/// Every present tensor's `data` points at `nbytes()` readable bytes, `dst`'s writable, and no
/// other thread writes them meanwhile.
pub unsafe fn compute(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    check(dst, srcs)?;
    if dst.nelements() == 0 {
        return Ok(());
    }
    match dst.op {
        Op::None | Op::Reshape | Op::View | Op::Permute | Op::Transpose => Ok(()),
        Op::Add | Op::Sub | Op::Mul | Op::Div => binary::run(dst, srcs),
        Op::AddId => add_id::run(dst, srcs),
        Op::Unary | Op::Scale | Op::Clamp | Op::Sqr | Op::Sqrt | Op::Log | Op::Sin | Op::Cos => unary::run(dst, srcs),
        Op::Glu => glu::run(dst, srcs),
        Op::SumRows => sum_rows::run(dst, srcs),
        Op::Repeat | Op::Concat | Op::Pad => layout::run(dst, srcs),
        Op::Cpy | Op::Cont | Op::Dup => copy::run(dst, srcs),
        Op::GetRows => get_rows::run(dst, srcs),
        Op::SetRows => set_rows::run(dst, srcs),
        Op::Norm | Op::RmsNorm | Op::L2Norm => norm::run(dst, srcs),
        Op::Rope => rope::run(dst, srcs),
        Op::SoftMax => softmax::run(dst, srcs),
        Op::Argsort | Op::TopK => sort::run(dst, srcs),
        Op::MulMat | Op::MulMatId => matmul::run(dst, srcs),
        Op::FlashAttnExt => attention::run(dst, srcs),
    }
}
