use crate::{OpError, Srcs};
use tandem_graph::Tensor;

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    Err(OpError::new(dst, srcs, "no reference yet"))
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    Err(OpError::new(dst, srcs, "no reference yet"))
}
