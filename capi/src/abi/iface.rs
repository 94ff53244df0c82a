//! The interface structs of `ggml-backend-impl.h`: function tables plus the small handle
//! structs ggml passes around (reg, device, backend, buffer type, buffer, event). Every function
//! pointer is `Option<..>` because ggml treats NULL as "not provided".

use super::tensor::{Cgraph, GgmlTensor};
use super::{BufferUsage, DevType, Status};
use std::ffi::{c_char, c_int, c_void};

/// `ggml_guid`: 16 bytes, passed as a pointer.
pub type Guid = [u8; 16];

// ---- buffer type ----

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BufferTypeIface {
    pub get_name: Option<unsafe extern "C" fn(buft: *mut BufferType) -> *const c_char>,
    pub alloc_buffer: Option<unsafe extern "C" fn(buft: *mut BufferType, size: usize) -> *mut Buffer>,
    pub alloc_buffer_n:
        Option<unsafe extern "C" fn(buft: *mut BufferType, tensors: *mut *mut GgmlTensor, n: c_int) -> *mut Buffer>,
    pub get_alignment: Option<unsafe extern "C" fn(buft: *mut BufferType) -> usize>,
    pub get_max_size: Option<unsafe extern "C" fn(buft: *mut BufferType) -> usize>,
    pub get_alloc_size: Option<unsafe extern "C" fn(buft: *mut BufferType, tensor: *const GgmlTensor) -> usize>,
    pub get_alloc_size_n:
        Option<unsafe extern "C" fn(buft: *mut BufferType, tensors: *mut *mut GgmlTensor, n: c_int) -> usize>,
    pub is_host: Option<unsafe extern "C" fn(buft: *mut BufferType) -> bool>,
}

#[repr(C)]
pub struct BufferType {
    pub iface: BufferTypeIface,
    pub device: *mut Device,
    pub context: *mut c_void,
}

// ---- buffer ----

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BufferIface {
    pub free_buffer: Option<unsafe extern "C" fn(buffer: *mut Buffer)>,
    pub get_base: Option<unsafe extern "C" fn(buffer: *mut Buffer) -> *mut c_void>,
    pub init_tensor: Option<unsafe extern "C" fn(buffer: *mut Buffer, tensor: *mut GgmlTensor) -> Status>,
    pub memset_tensor: Option<
        unsafe extern "C" fn(buffer: *mut Buffer, tensor: *mut GgmlTensor, value: u8, offset: usize, size: usize),
    >,
    pub set_tensor: Option<
        unsafe extern "C" fn(
            buffer: *mut Buffer,
            tensor: *mut GgmlTensor,
            data: *const c_void,
            offset: usize,
            size: usize,
        ),
    >,
    pub get_tensor: Option<
        unsafe extern "C" fn(
            buffer: *mut Buffer,
            tensor: *const GgmlTensor,
            data: *mut c_void,
            offset: usize,
            size: usize,
        ),
    >,
    pub set_tensor_2d: Option<
        unsafe extern "C" fn(
            buffer: *mut Buffer,
            tensor: *mut GgmlTensor,
            data: *const c_void,
            offset: usize,
            size: usize,
            n_copies: usize,
            stride_tensor: usize,
            stride_data: usize,
        ),
    >,
    pub get_tensor_2d: Option<
        unsafe extern "C" fn(
            buffer: *mut Buffer,
            tensor: *const GgmlTensor,
            data: *mut c_void,
            offset: usize,
            size: usize,
            n_copies: usize,
            stride_tensor: usize,
            stride_data: usize,
        ),
    >,
    pub cpy_tensor:
        Option<unsafe extern "C" fn(buffer: *mut Buffer, src: *const GgmlTensor, dst: *mut GgmlTensor) -> bool>,
    pub clear: Option<unsafe extern "C" fn(buffer: *mut Buffer, value: u8)>,
    pub reset: Option<unsafe extern "C" fn(buffer: *mut Buffer)>,
}

/// Allocated and freed by ggml (`ggml_backend_buffer_init` / `ggml_backend_buffer_free`).
#[repr(C)]
pub struct Buffer {
    pub iface: BufferIface,
    pub buft: *mut BufferType,
    pub context: *mut c_void,
    pub size: usize,
    pub usage: BufferUsage,
}

// ---- backend (stream) ----

/// `struct ggml_backend_graph_optimize_params`.
#[repr(C)]
pub struct GraphOptimizeParams {
    pub add_alloc_dep:
        Option<unsafe extern "C" fn(user_data: *mut c_void, tensor: *mut GgmlTensor, until: *mut GgmlTensor)>,
    pub user_data: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BackendIface {
    pub get_name: Option<unsafe extern "C" fn(backend: *mut Backend) -> *const c_char>,
    pub free: Option<unsafe extern "C" fn(backend: *mut Backend)>,
    pub set_tensor_async: Option<
        unsafe extern "C" fn(
            backend: *mut Backend,
            tensor: *mut GgmlTensor,
            data: *const c_void,
            offset: usize,
            size: usize,
        ),
    >,
    pub get_tensor_async: Option<
        unsafe extern "C" fn(
            backend: *mut Backend,
            tensor: *const GgmlTensor,
            data: *mut c_void,
            offset: usize,
            size: usize,
        ),
    >,
    pub set_tensor_2d_async: Option<
        unsafe extern "C" fn(
            backend: *mut Backend,
            tensor: *mut GgmlTensor,
            data: *const c_void,
            offset: usize,
            size: usize,
            n_copies: usize,
            stride_tensor: usize,
            stride_data: usize,
        ),
    >,
    pub get_tensor_2d_async: Option<
        unsafe extern "C" fn(
            backend: *mut Backend,
            tensor: *const GgmlTensor,
            data: *mut c_void,
            offset: usize,
            size: usize,
            n_copies: usize,
            stride_tensor: usize,
            stride_data: usize,
        ),
    >,
    pub cpy_tensor_async: Option<
        unsafe extern "C" fn(
            backend_src: *mut Backend,
            backend_dst: *mut Backend,
            src: *const GgmlTensor,
            dst: *mut GgmlTensor,
        ) -> bool,
    >,
    pub synchronize: Option<unsafe extern "C" fn(backend: *mut Backend)>,
    pub graph_plan_create: Option<unsafe extern "C" fn(backend: *mut Backend, cgraph: *const Cgraph) -> *mut c_void>,
    pub graph_plan_free: Option<unsafe extern "C" fn(backend: *mut Backend, plan: *mut c_void)>,
    pub graph_plan_update:
        Option<unsafe extern "C" fn(backend: *mut Backend, plan: *mut c_void, cgraph: *const Cgraph)>,
    pub graph_plan_compute: Option<unsafe extern "C" fn(backend: *mut Backend, plan: *mut c_void) -> Status>,
    pub graph_compute: Option<unsafe extern "C" fn(backend: *mut Backend, cgraph: *mut Cgraph) -> Status>,
    pub event_record: Option<unsafe extern "C" fn(backend: *mut Backend, event: *mut Event)>,
    pub event_wait: Option<unsafe extern "C" fn(backend: *mut Backend, event: *mut Event)>,
    pub graph_optimize:
        Option<unsafe extern "C" fn(backend: *mut Backend, cgraph: *mut Cgraph, params: *mut GraphOptimizeParams)>,
}

#[repr(C)]
pub struct Backend {
    pub guid: *mut Guid,
    pub iface: BackendIface,
    pub device: *mut Device,
    pub context: *mut c_void,
}

#[repr(C)]
pub struct Event {
    pub device: *mut Device,
    pub context: *mut c_void,
}

// ---- device ----

/// `struct ggml_backend_dev_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevCaps {
    pub async_: bool,
    pub host_buffer: bool,
    pub buffer_from_host_ptr: bool,
    pub events: bool,
    pub mmap_support: bool,
}

/// `struct ggml_backend_dev_props`.
#[repr(C)]
pub struct DevProps {
    pub name: *const c_char,
    pub description: *const c_char,
    pub memory_free: usize,
    pub memory_total: usize,
    pub type_: DevType,
    pub device_id: *const c_char,
    pub caps: DevCaps,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceIface {
    pub get_name: Option<unsafe extern "C" fn(dev: *mut Device) -> *const c_char>,
    pub get_description: Option<unsafe extern "C" fn(dev: *mut Device) -> *const c_char>,
    pub get_memory: Option<unsafe extern "C" fn(dev: *mut Device, free: *mut usize, total: *mut usize)>,
    pub get_type: Option<unsafe extern "C" fn(dev: *mut Device) -> DevType>,
    pub get_props: Option<unsafe extern "C" fn(dev: *mut Device, props: *mut DevProps)>,
    pub init_backend: Option<unsafe extern "C" fn(dev: *mut Device, params: *const c_char) -> *mut Backend>,
    pub get_buffer_type: Option<unsafe extern "C" fn(dev: *mut Device) -> *mut BufferType>,
    pub get_host_buffer_type: Option<unsafe extern "C" fn(dev: *mut Device) -> *mut BufferType>,
    pub buffer_from_host_ptr: Option<
        unsafe extern "C" fn(dev: *mut Device, ptr: *mut c_void, size: usize, max_tensor_size: usize) -> *mut Buffer,
    >,
    pub supports_op: Option<unsafe extern "C" fn(dev: *mut Device, op: *const GgmlTensor) -> bool>,
    pub supports_buft: Option<unsafe extern "C" fn(dev: *mut Device, buft: *mut BufferType) -> bool>,
    pub offload_op: Option<unsafe extern "C" fn(dev: *mut Device, op: *const GgmlTensor) -> bool>,
    pub event_new: Option<unsafe extern "C" fn(dev: *mut Device) -> *mut Event>,
    pub event_free: Option<unsafe extern "C" fn(dev: *mut Device, event: *mut Event)>,
    pub event_synchronize: Option<unsafe extern "C" fn(dev: *mut Device, event: *mut Event)>,
}

#[repr(C)]
pub struct Device {
    pub iface: DeviceIface,
    pub reg: *mut Reg,
    pub context: *mut c_void,
}

// ---- registry ----

#[repr(C)]
#[derive(Clone, Copy)]
pub struct RegIface {
    pub get_name: Option<unsafe extern "C" fn(reg: *mut Reg) -> *const c_char>,
    pub get_device_count: Option<unsafe extern "C" fn(reg: *mut Reg) -> usize>,
    pub get_device: Option<unsafe extern "C" fn(reg: *mut Reg, index: usize) -> *mut Device>,
    pub get_proc_address: Option<unsafe extern "C" fn(reg: *mut Reg, name: *const c_char) -> *mut c_void>,
}

#[repr(C)]
pub struct Reg {
    pub api_version: c_int,
    pub iface: RegIface,
    pub context: *mut c_void,
}

/// `struct ggml_backend_feature`: one entry of the NULL-terminated list behind
/// `ggml_backend_get_features`.
#[repr(C)]
pub struct Feature {
    pub name: *const c_char,
    pub value: *const c_char,
}
