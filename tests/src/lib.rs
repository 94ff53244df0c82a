//! Integration tests of tandem against the real ggml built from `llama-cpp-sys-2`.
extern crate llama_cpp_sys_2;
