//! `struct ggml_tensor` (public in `ggml.h`, so its layout is part of the ABI) and the opaque
//! `struct ggml_cgraph`, which is only ever reached through ggml's accessor functions.

use super::iface::Buffer;
use std::ffi::{c_char, c_int, c_void};

pub const MAX_DIMS: usize = 4;
pub const MAX_SRC: usize = 10;
/// `GGML_MAX_OP_PARAMS` is in bytes; the field holds that many bytes as `int32_t`.
pub const MAX_OP_PARAMS_BYTES: usize = 64;
pub const MAX_NAME: usize = 64;

/// `enum ggml_tensor_flag` bits.
pub const TENSOR_FLAG_INPUT: i32 = 1;
pub const TENSOR_FLAG_OUTPUT: i32 = 2;
pub const TENSOR_FLAG_PARAM: i32 = 4;
pub const TENSOR_FLAG_LOSS: i32 = 8;
/// Set on nodes that must be computed; nodes without it are in the graph only for ordering.
pub const TENSOR_FLAG_COMPUTE: i32 = 16;

#[repr(C)]
pub struct GgmlTensor {
    /// `enum ggml_type`.
    pub type_: c_int,
    pub buffer: *mut Buffer,
    pub ne: [i64; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
    /// `enum ggml_op`.
    pub op: c_int,
    pub op_params: [i32; MAX_OP_PARAMS_BYTES / 4],
    pub flags: i32,
    pub src: [*mut GgmlTensor; MAX_SRC],
    pub view_src: *mut GgmlTensor,
    pub view_offs: usize,
    pub data: *mut c_void,
    pub name: [c_char; MAX_NAME],
    pub extra: *mut c_void,
    pub padding: [c_char; 8],
}

/// `struct ggml_cgraph`: opaque on purpose (its layout is private to ggml).
#[repr(C)]
pub struct Cgraph {
    _private: [u8; 0],
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<GgmlTensor>() == 336);
