//! Backend (stream) entries. Every entry, async ones included, finishes its work before it
//! returns: the host device computes on the calling thread's pool, so `synchronize` and events
//! have nothing left to wait for.

use crate::abi::{Backend, BackendIface, Buffer, Cgraph, Device as CDevice, Event, GgmlTensor, Guid, Status};
use crate::abi::{STATUS_FAILED, STATUS_SUCCESS};
use crate::convert::convert_graph;
use crate::device::DeviceCtx;
use crate::guard::guard;
use crate::host::host;
use crate::{buffer, log};
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::{addr_of, null};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use tandem_backend::Device;

/// Identifies tandem backends (`ggml_backend_guid`).
static GUID: Guid = [
    0x74, 0x61, 0x6e, 0x64, 0x65, 0x6d, 0x2d, 0x67, 0x67, 0x6d, 0x6c, 0x2d, 0x76, 0x30, 0x2e, 0x31,
];

pub struct BackendCtx {
    pub device: Arc<Device>,
    pub name: CString,
    /// Last value from `ggml_backend_set_n_threads` (the pool size is fixed by `TANDEM_THREADS`
    /// when the device is made; hosts call this before every graph).
    pub n_threads: AtomicI32,
}

/// A new backend on `dev`; freed by its `free` entry.
pub fn new_backend(dev: *mut CDevice, ctx: &DeviceCtx) -> *mut Backend {
    let bctx = Box::new(BackendCtx {
        device: ctx.device.clone(),
        name: ctx.name.clone(),
        n_threads: AtomicI32::new(0),
    });
    Box::into_raw(Box::new(Backend {
        guid: addr_of!(GUID).cast_mut(),
        iface: BACKEND_IFACE,
        device: dev,
        context: Box::into_raw(bctx).cast(),
    }))
}

const BACKEND_IFACE: BackendIface = BackendIface {
    get_name: Some(get_name),
    free: Some(free),
    set_tensor_async: Some(set_tensor_async),
    get_tensor_async: Some(get_tensor_async),
    set_tensor_2d_async: Some(set_tensor_2d_async),
    get_tensor_2d_async: Some(get_tensor_2d_async),
    cpy_tensor_async: Some(cpy_tensor_async),
    synchronize: Some(synchronize),
    graph_plan_create: None,
    graph_plan_free: None,
    graph_plan_update: None,
    graph_plan_compute: None,
    graph_compute: Some(graph_compute),
    event_record: Some(event_record),
    event_wait: Some(event_wait),
    graph_optimize: None,
};

/// # Safety
/// `backend` was made by [`new_backend`] and not freed.
unsafe fn ctx<'a>(backend: *mut Backend) -> &'a BackendCtx {
    // SAFETY: the context of tandem's backends is a BackendCtx box.
    unsafe { &*((*backend).context as *const BackendCtx) }
}

unsafe extern "C" fn get_name(backend: *mut Backend) -> *const c_char {
    // SAFETY: ggml calls backend entries with their own backend.
    guard("get_name", null(), || unsafe { ctx(backend) }.name.as_ptr())
}

unsafe extern "C" fn free(backend: *mut Backend) {
    guard("free", (), || {
        // SAFETY: both boxes were made in new_backend; ggml frees a backend once.
        unsafe {
            drop(Box::from_raw((*backend).context as *mut BackendCtx));
            drop(Box::from_raw(backend));
        }
    })
}

/// `ggml_backend_set_n_threads` (through `get_proc_address`).
pub unsafe extern "C" fn set_n_threads(backend: *mut Backend, n_threads: c_int) {
    guard("set_n_threads", (), || {
        if !backend.is_null() {
            // SAFETY: ggml resolves this function through tandem's registry and calls it with
            // tandem's backends only.
            unsafe { ctx(backend) }.n_threads.store(n_threads, Ordering::Relaxed);
        }
    })
}

/// The buffer that holds `t`'s bytes (a view's root owns them).
///
/// # Safety
/// `t` and its `view_src` are live.
unsafe fn buffer_of(t: *const GgmlTensor) -> *mut Buffer {
    // SAFETY: per the contract.
    unsafe {
        if (*t).view_src.is_null() {
            (*t).buffer
        } else {
            (*(*t).view_src).buffer
        }
    }
}

unsafe extern "C" fn set_tensor_async(
    _backend: *mut Backend,
    tensor: *mut GgmlTensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: ggml passes a live tensor and `size` readable bytes.
    guard("set_tensor_async", (), || unsafe {
        let buf = buffer_of(tensor);
        if !buf.is_null() {
            buffer::set_2d(buf, tensor, data, offset, size, 1, 0, 0)
        }
    })
}

unsafe extern "C" fn get_tensor_async(
    _backend: *mut Backend,
    tensor: *const GgmlTensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: ggml passes a live tensor and `size` writable bytes.
    guard("get_tensor_async", (), || unsafe {
        let buf = buffer_of(tensor);
        if !buf.is_null() {
            buffer::get_2d(buf, tensor, data, offset, size, 1, 0, 0)
        }
    })
}

unsafe extern "C" fn set_tensor_2d_async(
    _backend: *mut Backend,
    tensor: *mut GgmlTensor,
    data: *const c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    // SAFETY: ggml passes a live tensor and n_copies readable rows.
    guard("set_tensor_2d_async", (), || unsafe {
        let buf = buffer_of(tensor);
        if !buf.is_null() {
            buffer::set_2d(buf, tensor, data, offset, size, n_copies, stride_tensor, stride_data)
        }
    })
}

unsafe extern "C" fn get_tensor_2d_async(
    _backend: *mut Backend,
    tensor: *const GgmlTensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    // SAFETY: ggml passes a live tensor and n_copies writable rows.
    guard("get_tensor_2d_async", (), || unsafe {
        let buf = buffer_of(tensor);
        if !buf.is_null() {
            buffer::get_2d(buf, tensor, data, offset, size, n_copies, stride_tensor, stride_data)
        }
    })
}

/// Copies between host-memory tensors; anything else is left to ggml's generic path.
unsafe extern "C" fn cpy_tensor_async(
    backend_src: *mut Backend,
    backend_dst: *mut Backend,
    src: *const GgmlTensor,
    dst: *mut GgmlTensor,
) -> bool {
    guard("cpy_tensor_async", false, || {
        let Ok(h) = host() else { return false };
        // SAFETY: ggml passes live backends and tensors of equal layout.
        unsafe {
            let (sbuf, dbuf) = (buffer_of(src), buffer_of(dst));
            if sbuf.is_null() || dbuf.is_null() || !(h.buffer_is_host)(sbuf) || !(h.buffer_is_host)(dbuf) {
                return false;
            }
            // The source backend may still be writing `src`: wait for it as ggml's fallback would.
            if !backend_src.is_null() && backend_src != backend_dst {
                (h.synchronize)(backend_src);
            }
            buffer::copy_host_tensor(dbuf, src, dst, (h.nbytes)(src))
        }
    })
}

unsafe extern "C" fn synchronize(_backend: *mut Backend) {
    // Nothing is ever pending when an entry returns.
}

unsafe extern "C" fn event_record(_backend: *mut Backend, _event: *mut Event) {}

unsafe extern "C" fn event_wait(_backend: *mut Backend, _event: *mut Event) {}

unsafe extern "C" fn graph_compute(backend: *mut Backend, cgraph: *mut Cgraph) -> Status {
    guard("graph_compute", STATUS_FAILED, || {
        // SAFETY: ggml calls backend entries with their own backend.
        let bctx = unsafe { ctx(backend) };
        let name = bctx.device.name();
        let h = match host() {
            Ok(h) => h,
            Err(e) => {
                log::error(&format!("{name}: graph_compute: {e}"));
                return STATUS_FAILED;
            }
        };
        // SAFETY: ggml passes a live graph whose tensors stay live during the call.
        let g = match unsafe { convert_graph(h, cgraph) } {
            Ok(g) => g,
            Err(e) => {
                log::error(&format!("{name}: graph_compute: {e}"));
                return STATUS_FAILED;
            }
        };
        if let Err(e) = buffer::check_host_memory(h, &g) {
            log::error(&format!("{name}: graph_compute: {e}"));
            return STATUS_FAILED;
        }
        // SAFETY: every tensor's bytes live in host memory (checked above) that ggml keeps
        // allocated and does not touch while the graph runs.
        match unsafe { bctx.device.compute(&g) } {
            Ok(_) => STATUS_SUCCESS,
            Err(e) => {
                log::error(&format!("{name}: graph_compute failed: {e}"));
                STATUS_FAILED
            }
        }
    })
}
