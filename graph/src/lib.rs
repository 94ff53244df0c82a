//! The ggml-compatible data model of tandem.
//!
//! Element types use ggml's numbering and byte-exact block layouts (ggml 0.26.0, as shipped in
//! `llama-cpp-sys-2` 0.1.161); tensors carry `ne`/`nb` like `ggml_tensor`; ops carry ggml's
//! `op_params` words unchanged so a graph converted from ggml and one built here mean the same.
//! This crate is pure data: it knows nothing about devices.

pub mod blocks;
pub mod builder;
pub mod error;
pub mod graph;
pub mod op;
pub mod params;
pub mod tensor;
pub mod types;

pub use builder::GraphBuilder;
pub use error::GraphError;
pub use graph::Graph;
pub use op::{GluOp, Op, UnaryOp};
pub use tensor::{Tensor, TensorId, MAX_DIMS, MAX_OP_PARAMS, MAX_SRC};
pub use types::ElemType;
