//! Device entries: name, description, memory, type, properties, backends, buffer types, events
//! and the honest `supports_op` (the node is converted and the device is asked).

use crate::abi::{Backend, Buffer, BufferType, DevCaps, DevProps, DevType, Device as CDevice, Event, GgmlTensor, Reg};
use crate::abi::{DEVICE_TYPE_ACCEL, DEVICE_TYPE_GPU};
use crate::buffer::BuftKind;
use crate::convert::Converter;
use crate::guard::guard;
use crate::host::host;
use crate::{backend, buffer};
use std::ffi::{c_char, c_void, CString};
use std::ptr::{null, null_mut};
use std::sync::Arc;
use tandem_backend::{Config, Device, DeviceKind, OffloadExec};

/// Context of one device entry (process lifetime).
pub struct DeviceCtx {
    pub device: Arc<Device>,
    pub name: CString,
    pub description: CString,
    pub buft: *mut BufferType,
    /// A GPU device's pinned host buffer type (`get_host_buffer_type`); NULL for the host device.
    pub host_buft: *mut BufferType,
}

/// Makes the ggml device entry for `device` and its buffer types (one for the host device; the
/// device-memory and the pinned host type for a GPU).
pub fn new_device(reg: *mut Reg, device: Arc<Device>) -> (*mut CDevice, Vec<*mut BufferType>) {
    let cdev = Box::into_raw(Box::new(CDevice {
        iface: DEVICE_IFACE,
        reg,
        context: null_mut(),
    }));
    let (buft, host_buft) = match &*device {
        Device::Host(_) => (buffer::new_buffer_type(cdev, &device, BuftKind::Host), null_mut()),
        Device::Gpu(_) => (
            buffer::new_buffer_type(cdev, &device, BuftKind::Gpu(device.clone())),
            buffer::new_buffer_type(cdev, &device, BuftKind::Pinned(device.clone())),
        ),
    };
    let ctx = DeviceCtx {
        name: CString::new(device.name()).unwrap_or_default(),
        description: CString::new(device.description()).unwrap_or_default(),
        device,
        buft,
        host_buft,
    };
    // SAFETY: `cdev` was just allocated and is not shared yet.
    unsafe { (*cdev).context = Box::into_raw(Box::new(ctx)).cast() };
    let bufts = [buft, host_buft].into_iter().filter(|b| !b.is_null()).collect();
    (cdev, bufts)
}

/// # Safety
/// `dev` is one of tandem's device entries.
pub unsafe fn dev_ctx<'a>(dev: *mut CDevice) -> &'a DeviceCtx {
    // SAFETY: the context of tandem's devices is a leaked DeviceCtx.
    unsafe { &*((*dev).context as *const DeviceCtx) }
}

const DEVICE_IFACE: crate::abi::DeviceIface = crate::abi::DeviceIface {
    get_name: Some(dev_get_name),
    get_description: Some(dev_get_description),
    get_memory: Some(dev_get_memory),
    get_type: Some(dev_get_type),
    get_props: Some(dev_get_props),
    init_backend: Some(dev_init_backend),
    get_buffer_type: Some(dev_get_buffer_type),
    get_host_buffer_type: Some(dev_get_host_buffer_type),
    buffer_from_host_ptr: Some(dev_buffer_from_host_ptr),
    supports_op: Some(dev_supports_op),
    supports_buft: Some(dev_supports_buft),
    offload_op: Some(dev_offload_op),
    event_new: Some(dev_event_new),
    event_free: Some(dev_event_free),
    event_synchronize: Some(dev_event_synchronize),
};

unsafe extern "C" fn dev_get_name(dev: *mut CDevice) -> *const c_char {
    // SAFETY: ggml calls device entries with the device they belong to.
    guard("dev_get_name", null(), || unsafe { dev_ctx(dev) }.name.as_ptr())
}

unsafe extern "C" fn dev_get_description(dev: *mut CDevice) -> *const c_char {
    // SAFETY: as dev_get_name.
    guard("dev_get_description", null(), || {
        unsafe { dev_ctx(dev) }.description.as_ptr()
    })
}

/// (free, total) bytes of the memory the device computes in.
fn memory_of(device: &Device) -> (usize, usize) {
    match device {
        Device::Host(_) => host_memory(),
        Device::Gpu(g) => {
            let (free, total) = g.memory();
            (free as usize, total as usize)
        }
    }
}

fn host_memory() -> (usize, usize) {
    // SAFETY: sysconf only reads system configuration.
    let (page, total, avail) = unsafe {
        (
            libc::sysconf(libc::_SC_PAGESIZE),
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_AVPHYS_PAGES),
        )
    };
    let bytes = |pages: libc::c_long| (pages.max(0) as usize).saturating_mul(page.max(0) as usize);
    (bytes(avail), bytes(total))
}

unsafe extern "C" fn dev_get_memory(dev: *mut CDevice, free: *mut usize, total: *mut usize) {
    guard("dev_get_memory", (), || {
        // SAFETY: as dev_get_name.
        let (f, t) = memory_of(&unsafe { dev_ctx(dev) }.device);
        // SAFETY: ggml passes writable out-pointers (checked for NULL anyway).
        unsafe {
            if !free.is_null() {
                *free = f;
            }
            if !total.is_null() {
                *total = t;
            }
        }
    })
}

fn dev_type_of(device: &Device) -> DevType {
    match device.kind() {
        DeviceKind::Gpu => DEVICE_TYPE_GPU,
        DeviceKind::Accel => DEVICE_TYPE_ACCEL,
    }
}

unsafe extern "C" fn dev_get_type(dev: *mut CDevice) -> DevType {
    // SAFETY: as dev_get_name.
    guard("dev_get_type", DEVICE_TYPE_ACCEL, || {
        dev_type_of(&unsafe { dev_ctx(dev) }.device)
    })
}

/// What tandem's devices can do. Every async entry completes before it returns, so events and
/// async copies are trivially honest. A GPU device has a pinned host buffer type and takes no
/// foreign host pointers (its kernels could not read them).
fn caps(device: &Device) -> DevCaps {
    let gpu = matches!(device, Device::Gpu(_));
    DevCaps {
        async_: true,
        host_buffer: gpu,
        buffer_from_host_ptr: !gpu,
        events: true,
        mmap_support: true,
    }
}

unsafe extern "C" fn dev_get_props(dev: *mut CDevice, props: *mut DevProps) {
    guard("dev_get_props", (), || {
        if props.is_null() {
            return;
        }
        // SAFETY: as dev_get_name.
        let ctx = unsafe { dev_ctx(dev) };
        let (free, total) = memory_of(&ctx.device);
        // SAFETY: ggml passes a writable props struct.
        unsafe {
            props.write(DevProps {
                name: ctx.name.as_ptr(),
                description: ctx.description.as_ptr(),
                memory_free: free,
                memory_total: total,
                type_: dev_type_of(&ctx.device),
                device_id: null(),
                caps: caps(&ctx.device),
            })
        };
    })
}

unsafe extern "C" fn dev_init_backend(dev: *mut CDevice, _params: *const c_char) -> *mut Backend {
    // SAFETY: as dev_get_name.
    guard("init_backend", null_mut(), || {
        backend::new_backend(dev, unsafe { dev_ctx(dev) })
    })
}

unsafe extern "C" fn dev_get_buffer_type(dev: *mut CDevice) -> *mut BufferType {
    // SAFETY: as dev_get_name.
    guard("get_buffer_type", null_mut(), || unsafe { dev_ctx(dev) }.buft)
}

unsafe extern "C" fn dev_get_host_buffer_type(dev: *mut CDevice) -> *mut BufferType {
    // SAFETY: as dev_get_name.
    guard("get_host_buffer_type", null_mut(), || unsafe { dev_ctx(dev) }.host_buft)
}

unsafe extern "C" fn dev_buffer_from_host_ptr(
    dev: *mut CDevice,
    ptr: *mut c_void,
    size: usize,
    _max_tensor_size: usize,
) -> *mut Buffer {
    guard("buffer_from_host_ptr", null_mut(), || {
        // SAFETY: as dev_get_name.
        if ptr.is_null() || matches!(*unsafe { dev_ctx(dev) }.device, Device::Gpu(_)) {
            return null_mut();
        }
        // SAFETY: as dev_get_name; ggml keeps `ptr..ptr+size` mapped while the buffer lives.
        unsafe { buffer::buffer_from_host_ptr(dev_ctx(dev).buft, ptr, size) }
    })
}

unsafe extern "C" fn dev_supports_op(dev: *mut CDevice, op: *const GgmlTensor) -> bool {
    guard("supports_op", false, || {
        let Ok(h) = host() else { return false };
        if op.is_null() {
            return false;
        }
        let mut conv = Converter::new(h);
        // SAFETY: ggml passes a live node whose sources are live.
        let Ok(id) = (unsafe { conv.add_node(op, None) }) else {
            return false;
        };
        let g = conv.finish();
        // SAFETY: as dev_get_name.
        unsafe { dev_ctx(dev) }.device.supports(g.tensor(id), &g.srcs(id))
    })
}

unsafe extern "C" fn dev_supports_buft(dev: *mut CDevice, buft: *mut BufferType) -> bool {
    guard("supports_buft", false, || {
        if buft.is_null() {
            return false;
        }
        // SAFETY: as dev_get_name.
        let ctx = unsafe { dev_ctx(dev) };
        if buft == ctx.buft {
            return true;
        }
        match &*ctx.device {
            // The host device reads any host-memory buffer (ggml's CPU buffers included); other
            // tandem devices' buffers are not host memory to it unless ggml says so.
            // SAFETY: ggml passes a live buffer type.
            Device::Host(_) => host().is_ok_and(|h| unsafe { (h.buft_is_host)(buft) }),
            // A GPU device computes in its own memory, and in its pinned host memory unless
            // `TANDEM_OFFLOAD_EXEC=cpu` leaves nodes on weights there to ggml's CPU backend (as
            // llama.cpp's CUDA backend does with its `CUDA_Host` memory). llama.cpp puts the
            // layers it keeps off the GPU (`-ngl`, `-ot ...=CPU`) in this memory.
            Device::Gpu(_) => buft == ctx.host_buft && Config::get().offload_exec != OffloadExec::Cpu,
        }
    })
}

unsafe extern "C" fn dev_offload_op(dev: *mut CDevice, op: *const GgmlTensor) -> bool {
    guard("offload_op", false, || {
        // SAFETY: as dev_get_name.
        let ctx = unsafe { dev_ctx(dev) };
        // The host device's data already is in host memory, so ggml's CPU backend is as close
        // as tandem. A GPU pays for copying weights in only with a batch large enough (ggml's
        // own rule of 32 rows) and a kernel to run it.
        let Device::Gpu(g) = &*ctx.device else { return false };
        let Ok(h) = host() else { return false };
        if op.is_null() {
            return false;
        }
        let mut conv = Converter::new(h);
        // SAFETY: ggml passes a live node whose sources are live.
        let Ok(id) = (unsafe { conv.add_node(op, None) }) else {
            return false;
        };
        let graph = conv.finish();
        let t = graph.tensor(id);
        // The batch is the token count: dim 2 for MUL_MAT_ID (dim 1 holds the experts used).
        let batch = if t.op == tandem_graph::Op::MulMatId {
            t.ne[2]
        } else {
            t.ne[1]
        };
        batch >= 32 && t.op != tandem_graph::Op::GetRows && g.has_kernel(t, &graph.srcs(id))
    })
}

unsafe extern "C" fn dev_event_new(dev: *mut CDevice) -> *mut Event {
    guard("event_new", null_mut(), || {
        Box::into_raw(Box::new(Event {
            device: dev,
            context: null_mut(),
        }))
    })
}

unsafe extern "C" fn dev_event_free(_dev: *mut CDevice, event: *mut Event) {
    guard("event_free", (), || {
        if !event.is_null() {
            // SAFETY: events are made by dev_event_new as boxes; ggml frees each once.
            drop(unsafe { Box::from_raw(event) });
        }
    })
}

unsafe extern "C" fn dev_event_synchronize(_dev: *mut CDevice, _event: *mut Event) {
    // Work recorded before the event has already finished: every entry completes in place.
}

/// `ggml_backend_dev_get_extra_bufts`: none (NULL-terminated empty list).
pub unsafe extern "C" fn get_extra_bufts(_dev: *mut CDevice) -> *mut *mut BufferType {
    struct Empty([*mut BufferType; 1]);
    // SAFETY: a single NULL entry, never written.
    unsafe impl Sync for Empty {}
    static EMPTY: Empty = Empty([null_mut()]);
    EMPTY.0.as_ptr().cast_mut()
}
