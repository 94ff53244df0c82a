//! The CPU fallback: `check` says whether a node can run here (types, shapes, params) and
//! `compute` runs it on the worker pool. One module per op family.

mod add_id;
mod attention;
mod binary;
mod copy;
mod ew_math;
mod ew_rows;
#[cfg(test)]
mod ew_testutil;
mod fa_check;
mod fa_kernel;
mod fa_simd;
mod get_rows;
mod glu;
mod layout;
pub(crate) mod matmul;
mod norm;
mod rope;
mod rs_expf;
mod rs_rowio;
#[cfg(test)]
mod rs_testutil;
mod set_rows;
mod softmax;
mod sort;
mod sum_rows;
mod unary;

use crate::{CpuContext, OpError, Srcs};
/// The K/V element types FLASH_ATTN_EXT reads (ggml's CPU backend reads the same).
pub use fa_check::KV_TYPES as FLASH_ATTN_KV_TYPES;
use tandem_graph::{Op, Tensor};

/// Whether the CPU can compute `dst` from `srcs`; the error names what is not supported.
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

/// Computes `dst` from `srcs` on `ctx`'s pool. Checks first; a node that fails the check is
/// not touched.
///
/// # Safety
/// Every present tensor's `data` points at `nbytes()` readable bytes, `dst`'s writable, and no
/// other thread writes them meanwhile.
pub unsafe fn compute(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    check(dst, srcs)?;
    if dst.nelements() == 0 {
        return Ok(());
    }
    match dst.op {
        Op::None | Op::Reshape | Op::View | Op::Permute | Op::Transpose => Ok(()),
        Op::Add | Op::Sub | Op::Mul | Op::Div => binary::run(ctx, dst, srcs),
        Op::AddId => add_id::run(ctx, dst, srcs),
        Op::Unary | Op::Scale | Op::Clamp | Op::Sqr | Op::Sqrt | Op::Log | Op::Sin | Op::Cos => {
            unary::run(ctx, dst, srcs)
        }
        Op::Glu => glu::run(ctx, dst, srcs),
        Op::SumRows => sum_rows::run(ctx, dst, srcs),
        Op::Repeat | Op::Concat | Op::Pad => layout::run(ctx, dst, srcs),
        Op::Cpy | Op::Cont | Op::Dup => copy::run(ctx, dst, srcs),
        Op::GetRows => get_rows::run(ctx, dst, srcs),
        Op::SetRows => set_rows::run(ctx, dst, srcs),
        Op::Norm | Op::RmsNorm | Op::L2Norm => norm::run(ctx, dst, srcs),
        Op::Rope => rope::run(ctx, dst, srcs),
        Op::SoftMax => softmax::run(ctx, dst, srcs),
        Op::Argsort | Op::TopK => sort::run(ctx, dst, srcs),
        Op::MulMat | Op::MulMatId => matmul::run(ctx, dst, srcs),
        Op::FlashAttnExt => attention::run(ctx, dst, srcs),
    }
}
