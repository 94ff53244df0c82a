//! Device entries: name, description, memory, type, properties, backends, buffer types, events
//! and the honest `supports_op` (the node is converted and the device is asked).

use crate::abi::{Backend, Buffer, BufferType, DevCaps, DevProps, DevType, Device as CDevice, Event, GgmlTensor, Reg};
use crate::abi::{DEVICE_TYPE_ACCEL, DEVICE_TYPE_GPU};
use crate::convert::Converter;
use crate::guard::guard;
use crate::host::host;
use crate::{backend, buffer, registry};
use std::ffi::{c_char, c_void, CString};
use std::ptr::{null, null_mut};
use std::sync::Arc;
use tandem_backend::{Device, DeviceKind};

/// Context of one device entry (process lifetime).
pub struct DeviceCtx {
    pub device: Arc<Device>,
    pub name: CString,
    pub description: CString,
    pub buft: *mut BufferType,
}

/// Makes the ggml device entry for `device` and its buffer type.
pub fn new_device(reg: *mut Reg, device: Arc<Device>) -> (*mut CDevice, *mut BufferType) {
    let cdev = Box::into_raw(Box::new(CDevice {
        iface: DEVICE_IFACE,
        reg,
        context: null_mut(),
    }));
    let buft = buffer::new_buffer_type(cdev, &device);
    let ctx = DeviceCtx {
        name: CString::new(device.name()).unwrap_or_default(),
        description: CString::new(device.description()).unwrap_or_default(),
        device,
        buft,
    };
    // SAFETY: `cdev` was just allocated and is not shared yet.
    unsafe { (*cdev).context = Box::into_raw(Box::new(ctx)).cast() };
    (cdev, buft)
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
    // The host device's own buffers already are host memory: no separate staging type.
    get_host_buffer_type: None,
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
/// async copies are trivially honest.
const CAPS: DevCaps = DevCaps {
    async_: true,
    host_buffer: false,
    buffer_from_host_ptr: true,
    events: true,
    mmap_support: true,
};

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
                caps: CAPS,
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

unsafe extern "C" fn dev_buffer_from_host_ptr(
    dev: *mut CDevice,
    ptr: *mut c_void,
    size: usize,
    _max_tensor_size: usize,
) -> *mut Buffer {
    guard("buffer_from_host_ptr", null_mut(), || {
        if ptr.is_null() {
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
            Device::Host(_) => host().is_ok_and(|h| unsafe { (h.buft_is_host)(buft) }) || registry::is_our_buft(buft),
        }
    })
}

unsafe extern "C" fn dev_offload_op(_dev: *mut CDevice, _op: *const GgmlTensor) -> bool {
    // Offloading moves work to where the weights are not; for the host device the data is
    // already in host memory, so ggml's CPU backend is as close as tandem.
    false
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
