//! The error every op check and op run returns: it names the node, the op and its inputs.

use crate::Srcs;
use tandem_graph::{Op, Tensor};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("node '{node}' ({op}; dst {dst}; {inputs}): {reason}")]
pub struct OpError {
    pub node: String,
    pub op: Op,
    /// `ty[ne0,ne1,ne2,ne3]` of the result.
    pub dst: String,
    /// `srcN ty[...]` of each present source.
    pub inputs: String,
    pub reason: String,
}

impl OpError {
    pub fn new(dst: &Tensor, srcs: &Srcs, reason: impl Into<String>) -> OpError {
        let inputs = srcs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|t| format!("src{i} {}", t.describe())))
            .collect::<Vec<_>>()
            .join(", ");
        OpError {
            node: dst.name.clone(),
            op: dst.op,
            dst: dst.describe(),
            inputs: if inputs.is_empty() { "no sources".into() } else { inputs },
            reason: reason.into(),
        }
    }
}

/// `srcs[i]`, or an error naming the missing slot.
pub fn need<'a>(dst: &Tensor, srcs: &Srcs<'a>, i: usize) -> Result<&'a Tensor, OpError> {
    srcs[i].ok_or_else(|| OpError::new(dst, srcs, format!("src{i} is missing")))
}

/// An error unless `cond` holds.
pub fn ensure(cond: bool, dst: &Tensor, srcs: &Srcs, reason: impl FnOnce() -> String) -> Result<(), OpError> {
    if cond {
        Ok(())
    } else {
        Err(OpError::new(dst, srcs, reason()))
    }
}
