//! Buffer types and buffers, created through the host's own `ggml_backend_buffer_init` so ggml
//! owns and frees the `ggml_backend_buffer` struct itself:
//! - the host device's: 64-byte aligned host memory (owned, or borrowed from the host for
//!   memory-mapped weights);
//! - a GPU device's: device memory (`TANDEM<n>`), and pinned host memory mapped into the device
//!   (`TANDEM<n>_Host`, its host buffer type: kernels read it over the bus, the CPU directly).
//!
//! Every byte access checks that the span lies inside the buffer before touching memory; ggml
//! checks against the tensor's size, this checks against the allocation.

use crate::abi::STATUS_SUCCESS;
use crate::abi::{Buffer, BufferIface, BufferType, BufferTypeIface, Device as CDevice, GgmlTensor, Status};
use crate::guard::guard;
use crate::host::{host, HostApi};
use crate::log;
use crate::registry;
use std::ffi::{c_char, c_void, CString};
use std::ptr::null_mut;
use std::sync::Arc;
use tandem_backend::buffer::HOST_ALIGN;
use tandem_backend::gpu::{DeviceAlloc, DevicePtr, GpuDevice, PinnedAlloc};
use tandem_backend::{Device, HostBuffer};
use tandem_graph::Graph;

/// Alignment of GPU device and pinned buffers (wide loads and ggml's padding both fit).
const GPU_ALIGN: usize = 256;

/// What a buffer type allocates.
pub enum BuftKind {
    /// Host memory of the host device.
    Host,
    /// Device memory of a GPU device.
    Gpu(Arc<Device>),
    /// Pinned host memory mapped into a GPU device.
    Pinned(Arc<Device>),
}

/// Context of a buffer type.
pub struct BufferTypeCtx {
    pub name: CString,
    pub kind: BuftKind,
}

enum Memory {
    Owned(HostBuffer),
    /// Host memory tandem does not own (`buffer_from_host_ptr`, e.g. an mmap'd model file).
    Borrowed {
        base: usize,
        len: usize,
    },
    Gpu {
        alloc: DeviceAlloc,
        device: Arc<Device>,
    },
    Pinned(PinnedAlloc),
}

/// Context of one buffer.
pub struct BufferCtx {
    mem: Memory,
}

impl BufferCtx {
    fn base(&self) -> usize {
        match &self.mem {
            Memory::Owned(b) => b.addr(),
            Memory::Borrowed { base, .. } => *base,
            Memory::Gpu { alloc, .. } => alloc.ptr().0 as usize,
            Memory::Pinned(p) => p.host_ptr() as usize,
        }
    }

    fn len(&self) -> usize {
        match &self.mem {
            Memory::Owned(b) => b.len(),
            Memory::Borrowed { len, .. } => *len,
            Memory::Gpu { alloc, .. } => alloc.len(),
            Memory::Pinned(p) => p.len(),
        }
    }

    /// The GPU device whose memory this is, for device-memory buffers.
    fn gpu(&self) -> Option<&GpuDevice> {
        match &self.mem {
            Memory::Gpu { device, .. } => match &**device {
                Device::Gpu(g) => Some(g),
                Device::Host(_) => None,
            },
            _ => None,
        }
    }

    /// `addr..addr+size` as a pointer if it lies inside this buffer.
    fn span(&self, addr: usize, size: usize) -> Option<*mut u8> {
        let end = addr.checked_add(size)?;
        (addr >= self.base() && end <= self.base() + self.len()).then_some(addr as *mut u8)
    }
}

/// Makes a (process-lifetime) buffer type of `cdev`: `TANDEM_HOST`, `TANDEM<n>` or
/// `TANDEM<n>_Host`, as `kind` says.
pub fn new_buffer_type(cdev: *mut CDevice, device: &Device, kind: BuftKind) -> *mut BufferType {
    let name = match kind {
        BuftKind::Pinned(_) => format!("{}_Host", device.name()),
        _ => device.name().to_string(),
    };
    let ctx = Box::new(BufferTypeCtx {
        name: CString::new(name).unwrap_or_default(),
        kind,
    });
    Box::into_raw(Box::new(BufferType {
        iface: BUFFER_TYPE_IFACE,
        device: cdev,
        context: Box::into_raw(ctx).cast(),
    }))
}

/// Wraps host memory that tandem does not own in a ggml buffer of `buft`.
///
/// # Safety
/// `buft` is one of tandem's buffer types; `ptr..ptr+size` stays valid while the buffer lives.
pub unsafe fn buffer_from_host_ptr(buft: *mut BufferType, ptr: *mut c_void, size: usize) -> *mut Buffer {
    let ctx = BufferCtx {
        mem: Memory::Borrowed {
            base: ptr as usize,
            len: size,
        },
    };
    // SAFETY: per the contract.
    unsafe { wrap(buft, ctx, size) }
}

/// # Safety
/// `buft` is one of tandem's buffer types.
unsafe fn wrap(buft: *mut BufferType, ctx: BufferCtx, size: usize) -> *mut Buffer {
    let Ok(h) = host() else { return null_mut() };
    let raw = Box::into_raw(Box::new(ctx));
    // SAFETY: ggml copies the interface table and keeps `raw` as the context, which our
    // free_buffer releases.
    let buf = unsafe { (h.buffer_init)(buft, BUFFER_IFACE, raw.cast(), size) };
    if buf.is_null() {
        // SAFETY: ggml did not take the context; reclaim it.
        drop(unsafe { Box::from_raw(raw) });
    }
    buf
}

const BUFFER_TYPE_IFACE: BufferTypeIface = BufferTypeIface {
    get_name: Some(buft_get_name),
    alloc_buffer: Some(buft_alloc_buffer),
    alloc_buffer_n: None,
    get_alignment: Some(buft_get_alignment),
    get_max_size: None,
    get_alloc_size: None,
    get_alloc_size_n: None,
    is_host: Some(buft_is_host),
};

const BUFFER_IFACE: BufferIface = BufferIface {
    free_buffer: Some(buffer_free),
    get_base: Some(buffer_get_base),
    init_tensor: Some(buffer_init_tensor),
    memset_tensor: Some(buffer_memset_tensor),
    set_tensor: Some(buffer_set_tensor),
    get_tensor: Some(buffer_get_tensor),
    set_tensor_2d: Some(buffer_set_tensor_2d),
    get_tensor_2d: Some(buffer_get_tensor_2d),
    cpy_tensor: Some(buffer_cpy_tensor),
    clear: Some(buffer_clear),
    reset: None,
};

/// # Safety
/// `buft` is one of tandem's buffer types.
unsafe fn buft_ctx<'a>(buft: *mut BufferType) -> &'a BufferTypeCtx {
    // SAFETY: tandem's buffer types are leaked boxes whose context is a BufferTypeCtx.
    unsafe { &*((*buft).context as *const BufferTypeCtx) }
}

/// # Safety
/// `buffer` was made by [`wrap`] and not freed.
unsafe fn buf_ctx<'a>(buffer: *mut Buffer) -> &'a BufferCtx {
    // SAFETY: the context of tandem's buffers is the BufferCtx box handed to buffer_init.
    unsafe { &*((*buffer).context as *const BufferCtx) }
}

unsafe extern "C" fn buft_get_name(buft: *mut BufferType) -> *const c_char {
    // SAFETY: ggml calls this with one of tandem's buffer types.
    guard("buft_get_name", std::ptr::null(), || {
        unsafe { buft_ctx(buft) }.name.as_ptr()
    })
}

unsafe extern "C" fn buft_alloc_buffer(buft: *mut BufferType, size: usize) -> *mut Buffer {
    guard("alloc_buffer", null_mut(), || {
        // SAFETY: ggml calls this with one of tandem's buffer types.
        let bctx = unsafe { buft_ctx(buft) };
        fn gpu(d: &Arc<Device>) -> Result<&GpuDevice, String> {
            match &**d {
                Device::Gpu(g) => Ok(g),
                Device::Host(_) => Err("not a GPU device".to_string()),
            }
        }
        let mem = match &bctx.kind {
            BuftKind::Host => HostBuffer::new(size).map(Memory::Owned),
            BuftKind::Gpu(d) => gpu(d).and_then(|g| {
                g.alloc(size).map_err(|e| e.to_string()).map(|alloc| Memory::Gpu {
                    alloc,
                    device: d.clone(),
                })
            }),
            BuftKind::Pinned(d) => {
                gpu(d).and_then(|g| g.alloc_pinned(size).map_err(|e| e.to_string()).map(Memory::Pinned))
            }
        };
        match mem {
            // SAFETY: as above.
            Ok(mem) => unsafe { wrap(buft, BufferCtx { mem }, size) },
            Err(e) => {
                log::error(&format!(
                    "alloc_buffer: {} bytes of {}: {e}",
                    size,
                    bctx.name.to_string_lossy()
                ));
                null_mut()
            }
        }
    })
}

unsafe extern "C" fn buft_get_alignment(buft: *mut BufferType) -> usize {
    // SAFETY: ggml calls this with one of tandem's buffer types.
    guard("get_alignment", HOST_ALIGN, || match unsafe { buft_ctx(buft) }.kind {
        BuftKind::Host => HOST_ALIGN,
        BuftKind::Gpu(_) | BuftKind::Pinned(_) => GPU_ALIGN,
    })
}

unsafe extern "C" fn buft_is_host(buft: *mut BufferType) -> bool {
    // Host-device and pinned buffers are host memory in ggml's layout; device memory is not.
    // SAFETY: ggml calls this with one of tandem's buffer types.
    guard("is_host", false, || {
        !matches!(unsafe { buft_ctx(buft) }.kind, BuftKind::Gpu(_))
    })
}

unsafe extern "C" fn buffer_free(buffer: *mut Buffer) {
    guard("free_buffer", (), || {
        // SAFETY: the context was made by Box::into_raw in `wrap`; ggml calls free once.
        drop(unsafe { Box::from_raw((*buffer).context as *mut BufferCtx) });
    })
}

unsafe extern "C" fn buffer_get_base(buffer: *mut Buffer) -> *mut c_void {
    // SAFETY: ggml calls this with one of tandem's live buffers.
    guard("get_base", null_mut(), || {
        unsafe { buf_ctx(buffer) }.base() as *mut c_void
    })
}

unsafe extern "C" fn buffer_init_tensor(_buffer: *mut Buffer, _tensor: *mut GgmlTensor) -> Status {
    // Host memory in ggml's layout needs no per-tensor state.
    STATUS_SUCCESS
}

/// The tensor's bytes `offset..offset+size` inside `buffer`, or a log line and `None`.
///
/// # Safety
/// `buffer` is a live tandem buffer and `tensor` a live tensor.
unsafe fn tensor_span(
    entry: &str,
    buffer: *mut Buffer,
    tensor: *const GgmlTensor,
    offset: usize,
    size: usize,
) -> Option<*mut u8> {
    // SAFETY: per the contract.
    let (ctx, t) = unsafe { (buf_ctx(buffer), &*tensor) };
    let span = (t.data as usize).checked_add(offset).and_then(|a| ctx.span(a, size));
    if span.is_none() {
        log::error(&format!(
            "{entry}: bytes {offset}..+{size} of tensor '{}' lie outside its buffer; nothing copied",
            crate::convert::name_of(t)
        ));
    }
    span
}

unsafe extern "C" fn buffer_memset_tensor(
    buffer: *mut Buffer,
    tensor: *mut GgmlTensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    guard("memset_tensor", (), || {
        // SAFETY: ggml passes a live buffer and tensor.
        if let Some(p) = unsafe { tensor_span("memset_tensor", buffer, tensor, offset, size) } {
            // SAFETY: as above.
            if let Some(g) = unsafe { buf_ctx(buffer) }.gpu() {
                // SAFETY: the span lies inside the buffer's device allocation.
                if let Err(e) = unsafe { g.memset(DevicePtr(p as u64), value, size) } {
                    log::error(&format!("memset_tensor: {e}"));
                }
                return;
            }
            // SAFETY: the span was checked to lie inside the buffer.
            unsafe { std::ptr::write_bytes(p, value, size) };
        }
    })
}

unsafe extern "C" fn buffer_set_tensor(
    buffer: *mut Buffer,
    tensor: *mut GgmlTensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: ggml passes live arguments and `size` readable bytes at `data`.
    guard("set_tensor", (), || unsafe {
        set_2d(buffer, tensor, data, offset, size, 1, 0, 0)
    })
}

unsafe extern "C" fn buffer_get_tensor(
    buffer: *mut Buffer,
    tensor: *const GgmlTensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: ggml passes live arguments and `size` writable bytes at `data`.
    guard("get_tensor", (), || unsafe {
        get_2d(buffer, tensor, data, offset, size, 1, 0, 0)
    })
}

unsafe extern "C" fn buffer_set_tensor_2d(
    buffer: *mut Buffer,
    tensor: *mut GgmlTensor,
    data: *const c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    // SAFETY: ggml passes live arguments; `data` holds n_copies rows of `size` bytes.
    guard("set_tensor_2d", (), || unsafe {
        set_2d(buffer, tensor, data, offset, size, n_copies, stride_tensor, stride_data)
    })
}

unsafe extern "C" fn buffer_get_tensor_2d(
    buffer: *mut Buffer,
    tensor: *const GgmlTensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    // SAFETY: as set_tensor_2d, with `data` writable.
    guard("get_tensor_2d", (), || unsafe {
        get_2d(buffer, tensor, data, offset, size, n_copies, stride_tensor, stride_data)
    })
}

/// Bytes from the first to one past the last byte a 2-D copy touches in the tensor.
fn span_2d(size: usize, n_copies: usize, stride: usize) -> Option<usize> {
    if n_copies == 0 || size == 0 {
        return Some(0);
    }
    (n_copies - 1).checked_mul(stride)?.checked_add(size)
}

/// The tensor's bytes `offset..offset+size`: bounds-checked against the allocation for tandem's
/// buffers (a device address for a GPU device-memory buffer: see [`gpu_of`]), trusted (ggml
/// checked the tensor's size) for other host buffers, refused for other device memory.
///
/// # Safety
/// `buffer` is the live buffer holding the live `tensor`.
unsafe fn host_span(
    entry: &str,
    buffer: *mut Buffer,
    tensor: *const GgmlTensor,
    offset: usize,
    size: usize,
) -> Option<*mut u8> {
    // SAFETY: per the contract.
    if registry::is_our_buft(unsafe { (*buffer).buft }) {
        // SAFETY: a tandem buffer, so its context is a BufferCtx.
        return unsafe { tensor_span(entry, buffer, tensor, offset, size) };
    }
    let Ok(h) = host() else { return None };
    // SAFETY: per the contract.
    if unsafe { (h.buffer_is_host)(buffer) } {
        // SAFETY: host memory; ggml checked offset+size against the tensor's size.
        return Some(unsafe { ((*tensor).data as *mut u8).add(offset) });
    }
    // SAFETY: per the contract.
    let name = crate::convert::name_of(unsafe { &*tensor });
    log::error(&format!(
        "{entry}: tensor '{name}' is not in host memory; nothing copied"
    ));
    None
}

/// Copies `n_copies` rows of `size` bytes from host memory into the tensor.
///
/// # Safety
/// `buffer` holds the live `tensor`; `data` holds `n_copies` rows of `size` readable bytes
/// `stride_data` apart.
pub unsafe fn set_2d(
    buffer: *mut Buffer,
    tensor: *mut GgmlTensor,
    data: *const c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    let Some(extent) = span_2d(size, n_copies, stride_tensor) else {
        return;
    };
    // SAFETY: per the contract.
    let Some(dst) = (unsafe { host_span("set_tensor", buffer, tensor, offset, extent) }) else {
        return;
    };
    // SAFETY: per the contract.
    if let Some(g) = unsafe { gpu_of(buffer) } {
        // SAFETY: every row lies inside the checked device span and inside `data`.
        unsafe {
            device_rows(
                g,
                true,
                data as *mut u8,
                stride_data,
                dst,
                stride_tensor,
                size,
                n_copies,
            )
        };
        return;
    }
    // SAFETY: every row lies inside the checked span on our side and inside `data` per the
    // contract; host data and tensor memory do not overlap.
    unsafe { copy_rows(data as *const u8, stride_data, dst, stride_tensor, size, n_copies) };
}

/// The GPU device of a tandem device-memory buffer.
///
/// # Safety
/// `buffer` is live.
unsafe fn gpu_of<'a>(buffer: *mut Buffer) -> Option<&'a GpuDevice> {
    // SAFETY: per the contract; only tandem's buffers have a BufferCtx.
    unsafe {
        registry::is_our_buft((*buffer).buft)
            .then(|| buf_ctx(buffer).gpu())
            .flatten()
    }
}

/// Copies `n` rows of `size` bytes between host memory (`host`, `host_stride` apart) and device
/// memory (`dev`, `dev_stride` apart); `to_device` says which way. One copy when both sides are
/// contiguous.
///
/// # Safety
/// Both sides hold the rows; `dev` is device memory of `g`.
unsafe fn device_rows(
    g: &GpuDevice,
    to_device: bool,
    host: *mut u8,
    host_stride: usize,
    dev: *mut u8,
    dev_stride: usize,
    size: usize,
    n: usize,
) {
    let contiguous = n <= 1 || (host_stride == size && dev_stride == size);
    let (rows, len) = if contiguous { (n.min(1), size * n) } else { (n, size) };
    for i in 0..rows {
        let d = DevicePtr(dev as u64 + (i * dev_stride) as u64);
        // SAFETY: per the contract, row i lies inside both sides.
        let r = unsafe {
            let h = host.add(i * host_stride);
            if to_device {
                g.write(d, std::slice::from_raw_parts(h, len))
            } else {
                g.read(d, std::slice::from_raw_parts_mut(h, len))
            }
        };
        if let Err(e) = r {
            log::error(&format!("{} tensor: {e}", if to_device { "set" } else { "get" }));
            return;
        }
    }
}

/// Copies `n_copies` rows of `size` bytes of the tensor out to host memory.
///
/// # Safety
/// As [`set_2d`], with `data` writable.
pub unsafe fn get_2d(
    buffer: *mut Buffer,
    tensor: *const GgmlTensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    let Some(extent) = span_2d(size, n_copies, stride_tensor) else {
        return;
    };
    // SAFETY: per the contract.
    let Some(src) = (unsafe { host_span("get_tensor", buffer, tensor, offset, extent) }) else {
        return;
    };
    // SAFETY: per the contract.
    if let Some(g) = unsafe { gpu_of(buffer) } {
        // SAFETY: every row lies inside the checked device span and inside `data`.
        unsafe {
            device_rows(
                g,
                false,
                data as *mut u8,
                stride_data,
                src,
                stride_tensor,
                size,
                n_copies,
            )
        };
        return;
    }
    // SAFETY: as set_2d, in the other direction.
    unsafe { copy_rows(src, stride_tensor, data as *mut u8, stride_data, size, n_copies) };
}

/// Copies `n` rows of `size` bytes, `src_stride` and `dst_stride` apart.
///
/// # Safety
/// Both sides hold `n` rows of `size` bytes at those strides and do not overlap.
unsafe fn copy_rows(src: *const u8, src_stride: usize, dst: *mut u8, dst_stride: usize, size: usize, n: usize) {
    for i in 0..n {
        // SAFETY: per the contract.
        unsafe { std::ptr::copy_nonoverlapping(src.add(i * src_stride), dst.add(i * dst_stride), size) };
    }
}

unsafe extern "C" fn buffer_cpy_tensor(buffer: *mut Buffer, src: *const GgmlTensor, dst: *mut GgmlTensor) -> bool {
    guard("cpy_tensor", false, || {
        let Ok(h) = host() else { return false };
        // SAFETY: ggml passes live tensors; `dst` lives in `buffer`.
        unsafe {
            let s = &*src;
            let sbuf = if s.view_src.is_null() {
                s.buffer
            } else {
                (*s.view_src).buffer
            };
            if sbuf.is_null() {
                return false;
            }
            let n = (h.nbytes)(src);
            match (gpu_of(sbuf), gpu_of(buffer)) {
                (None, None) if (h.buffer_is_host)(sbuf) => copy_host_tensor(buffer, src, dst, n),
                (None, Some(_)) if (h.buffer_is_host)(sbuf) => {
                    set_2d(buffer, dst, s.data as *const c_void, 0, n, 1, 0, 0);
                    true
                }
                (Some(_), None) => {
                    get_2d(sbuf, src, (*dst).data, 0, n, 1, 0, 0);
                    true
                }
                (Some(a), Some(b)) if std::ptr::eq(a, b) => {
                    let (Some(sp), Some(dp)) = (
                        tensor_span("cpy_tensor", sbuf, src, 0, n),
                        tensor_span("cpy_tensor", buffer, dst, 0, n),
                    ) else {
                        return false;
                    };
                    match b.copy(DevicePtr(dp as u64), DevicePtr(sp as u64), n) {
                        Ok(()) => true,
                        Err(e) => {
                            log::error(&format!("cpy_tensor: {e}"));
                            false
                        }
                    }
                }
                _ => false,
            }
        }
    })
}

/// Copies `n` bytes of host tensor `src` into `dst`, held by `dst_buffer`.
///
/// # Safety
/// `src` is a live tensor with `n` readable bytes in host memory; `dst_buffer` holds the live
/// `dst`.
pub unsafe fn copy_host_tensor(
    dst_buffer: *mut Buffer,
    src: *const GgmlTensor,
    dst: *mut GgmlTensor,
    n: usize,
) -> bool {
    // SAFETY: per the contract.
    let Some(d) = (unsafe { host_span("cpy_tensor", dst_buffer, dst, 0, n) }) else {
        return false;
    };
    // SAFETY: per the contract.
    let s = unsafe { (*src).data as *const u8 };
    if !std::ptr::eq(d, s) {
        // SAFETY: both spans are `n` bytes of host memory; `copy` allows overlap.
        unsafe { std::ptr::copy(s, d, n) };
    }
    true
}

/// Checks that every allocated tensor of `g` lives in host memory (the host device computes
/// there) or, for a GPU device, in that device's own memory; names the first that does not.
pub fn check_host_memory(h: &HostApi, g: &Graph, gpu: Option<&GpuDevice>) -> Result<(), String> {
    let mut seen: Vec<u64> = Vec::new();
    for t in &g.tensors {
        if t.buffer == 0 || t.data == 0 || seen.contains(&t.buffer) {
            continue;
        }
        let buf = t.buffer as usize as *mut Buffer;
        // SAFETY: `buffer` was read from a live ggml tensor of the graph being computed.
        // SAFETY: as above.
        let ok = unsafe { (h.buffer_is_host)(buf) }
            || gpu.is_some_and(|g| unsafe { gpu_of(buf) }.is_some_and(|b| std::ptr::eq(b, g)));
        if !ok {
            return Err(format!(
                "tensor '{}' ({}) is not in memory this device reaches",
                t.name,
                t.describe()
            ));
        }
        seen.push(t.buffer);
    }
    Ok(())
}

unsafe extern "C" fn buffer_clear(buffer: *mut Buffer, value: u8) {
    guard("clear", (), || {
        // SAFETY: ggml passes one of tandem's live buffers.
        let ctx = unsafe { buf_ctx(buffer) };
        if let Some(g) = ctx.gpu() {
            // SAFETY: exactly the buffer's own device allocation is written.
            if let Err(e) = unsafe { g.memset(DevicePtr(ctx.base() as u64), value, ctx.len()) } {
                log::error(&format!("clear: {e}"));
            }
            return;
        }
        // SAFETY: exactly the buffer's own allocation is written.
        unsafe { std::ptr::write_bytes(ctx.base() as *mut u8, value, ctx.len()) };
    })
}
