//! `#[repr(C)]` mirrors of ggml's plugin ABI (ggml 0.26.0, `GGML_BACKEND_API_VERSION` 3): the
//! public `struct ggml_tensor` from `ggml.h` and the interface structs of
//! `ggml/src/ggml-backend-impl.h`. Field order and types follow the headers one to one; the
//! `tandem-tests` layout test compares every size and offset with the C compiler's.
//! `docs/abi.md` says what to update when moving to a newer ggml.

pub mod iface;
pub mod tensor;

pub use iface::*;
pub use tensor::*;

use std::ffi::c_int;

/// `GGML_BACKEND_API_VERSION` of the pinned ggml.
pub const BACKEND_API_VERSION: c_int = 3;

/// `enum ggml_status`.
pub type Status = c_int;
pub const STATUS_ALLOC_FAILED: Status = -2;
pub const STATUS_FAILED: Status = -1;
pub const STATUS_SUCCESS: Status = 0;
pub const STATUS_ABORTED: Status = 1;

/// `enum ggml_backend_dev_type`.
pub type DevType = c_int;
pub const DEVICE_TYPE_CPU: DevType = 0;
pub const DEVICE_TYPE_GPU: DevType = 1;
pub const DEVICE_TYPE_IGPU: DevType = 2;
pub const DEVICE_TYPE_ACCEL: DevType = 3;
pub const DEVICE_TYPE_META: DevType = 4;

/// `enum ggml_backend_buffer_usage`.
pub type BufferUsage = c_int;
pub const BUFFER_USAGE_ANY: BufferUsage = 0;
pub const BUFFER_USAGE_WEIGHTS: BufferUsage = 1;
pub const BUFFER_USAGE_COMPUTE: BufferUsage = 2;

/// `enum ggml_log_level`.
pub type LogLevel = c_int;
pub const LOG_LEVEL_NONE: LogLevel = 0;
pub const LOG_LEVEL_DEBUG: LogLevel = 1;
pub const LOG_LEVEL_INFO: LogLevel = 2;
pub const LOG_LEVEL_WARN: LogLevel = 3;
pub const LOG_LEVEL_ERROR: LogLevel = 4;
pub const LOG_LEVEL_CONT: LogLevel = 5;
