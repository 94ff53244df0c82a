use crate::{CpuContext, OpError, Srcs};
use tandem_graph::Tensor;

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    Err(OpError::new(dst, srcs, "not implemented on the CPU yet"))
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(_ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    Err(OpError::new(dst, srcs, "not implemented on the CPU yet"))
}
