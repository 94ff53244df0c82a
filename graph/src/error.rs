//! Errors raised while building a graph.

/// A graph could not be built: names the op, the inputs (type and shape) and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{op}: {reason} (inputs: {inputs})")]
pub struct GraphError {
    pub op: &'static str,
    pub inputs: String,
    pub reason: String,
}
