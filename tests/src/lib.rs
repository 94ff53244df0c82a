//! Integration tests of tandem against the real ggml built from `llama-cpp-sys-2`.
extern crate llama_cpp_sys_2;

pub mod fuzz_graphs;
pub mod ggml;
pub mod llama_run;
pub mod logs;
pub mod plugin;
pub mod tiny_models;
