//! The only `extern "C"` surface of tandem: ggml's dynamic-backend ABI (ggml 0.26.0,
//! `GGML_BACKEND_API_VERSION` 3), shipped as `libggml-tandem.so`.
//!
//! A host built on a shared ggml loads the library with `ggml_backend_load` (or through
//! `GGML_BACKEND_PATH`); `ggml_backend_init` returns the `TANDEM` registry. ggml-base functions
//! are resolved from the host process, so there is no link-time dependency on ggml. Every entry
//! point catches panics (`guard`) and turns them into a failure value plus one log line.
//!
//! - [`abi`]: `#[repr(C)]` mirrors of ggml's structs (checked against the headers by a test).
//! - `registry`, `device`, `backend`, `buffer`: the ABI entries.
//! - `convert`: `ggml_tensor`/`ggml_cgraph` → [`tandem_graph::Graph`].

pub mod abi;
mod backend;
mod buffer;
mod convert;
mod device;
mod guard;
mod host;
mod log;
mod registry;

use std::ffi::c_int;

pub use backend::GraphTotals;

/// Score reported to ggml's loader: any positive value means "usable here". A registry with no
/// device (`TANDEM_HOST_DEVICE=0` and no GPU) still loads, cleanly, with zero devices.
const SCORE: c_int = 10;

/// Entry point of ggml's dynamic-backend loader: the `TANDEM` registry, or NULL when the host's
/// ggml is unusable (one log line says why).
#[no_mangle]
pub extern "C" fn ggml_backend_init() -> *mut abi::Reg {
    guard::guard("ggml_backend_init", std::ptr::null_mut(), registry::init)
}

/// ggml's loader skips a backend whose score is 0.
#[no_mangle]
pub extern "C" fn ggml_backend_score() -> c_int {
    guard::guard("ggml_backend_score", 0, || SCORE)
}
