//! Every op's semantics and its CPU implementation.
//!
//! - [`quant`]: ggml's block formats: reference quantizers (byte-identical to ggml's) and
//!   dequantizers, plus f16/bf16 conversion.
//! - [`vecdot`]: dot products of a weight row with an activation row quantized the way ggml does
//!   (q8_0 / q8_1 / q8_K), SIMD chosen once at start.
//! - [`cpu`]: the fallback: one module per op family, multi-threaded on a persistent pool.
//! - [`mod@reference`]: slow, obviously-correct scalar implementations that tests and the op harness
//!   compare every device against.

pub mod cpu;
pub mod data;
pub mod error;
pub mod pool;
pub mod quant;
pub mod reference;
pub mod simd;
pub mod vecdot;

pub use error::OpError;
pub use pool::CpuContext;

/// The sources of a node by slot, as in ggml (`src[i]` may be absent).
pub type Srcs<'a> = [Option<&'a tandem_graph::Tensor>; tandem_graph::MAX_SRC];
