//! Owning wrappers over the raw runtime handles: each frees its handle on drop and binds its
//! device's context before every call, so they can be used from any thread.

use super::api::*;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One device's context (CUDA: its retained primary context). Everything made from it holds an
/// `Arc` to it, so the context outlives its buffers, streams and modules.
pub struct Context {
    rt: Arc<dyn GpuRuntime>,
    ordinal: usize,
    raw: RawContext,
    info: DeviceInfo,
    /// Whether `Stream::launch_dependent` overlaps kernels here (the runtime and device have
    /// it, and `TANDEM_DEPENDENT_LAUNCH` leaves it on).
    dependent_launch: bool,
}

impl Context {
    pub fn new(rt: Arc<dyn GpuRuntime>, ordinal: usize) -> GpuResult<Arc<Context>> {
        let info = rt.device_info(ordinal)?;
        let raw = rt.context_retain(ordinal)?;
        let dependent_launch = rt.has_dependent_launch(&info) && crate::config::Config::get().dependent_launch;
        let ctx = Context {
            rt,
            ordinal,
            raw,
            info,
            dependent_launch,
        };
        ctx.bind()?;
        Ok(Arc::new(ctx))
    }

    /// Makes this device current on the calling thread.
    pub fn bind(&self) -> GpuResult<()> {
        // SAFETY: `raw` was retained in `new` and is released only in `drop`.
        unsafe { self.rt.context_bind(self.ordinal, self.raw) }
    }

    pub fn runtime(&self) -> &dyn GpuRuntime {
        &*self.rt
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Whether dependent launches overlap kernels on this device (else they are plain launches).
    pub fn dependent_launch(&self) -> bool {
        self.dependent_launch
    }

    /// Waits for all work on the device.
    pub fn synchronize(&self) -> GpuResult<()> {
        self.bind()?;
        self.rt.context_synchronize()
    }

    /// (free, total) device memory in bytes.
    pub fn mem_info(&self) -> GpuResult<(u64, u64)> {
        self.bind()?;
        self.rt.mem_info()
    }

    /// Device memory of `len` bytes (uninitialised).
    pub fn alloc(self: &Arc<Self>, len: usize) -> GpuResult<DeviceBuffer> {
        self.bind()?;
        // Zero-byte allocations are errors in both runtimes; a 1-byte one keeps pointers valid.
        let ptr = self.rt.mem_alloc(len.max(1))?;
        Ok(DeviceBuffer {
            ctx: self.clone(),
            ptr,
            len,
        })
    }

    /// Zeroed page-locked host memory that the device reads and writes directly.
    pub fn alloc_pinned(self: &Arc<Self>, len: usize) -> GpuResult<PinnedHostBuffer> {
        self.bind()?;
        let host = self.rt.host_alloc_mapped(len.max(1))?;
        // SAFETY: `host` was just allocated by `host_alloc_mapped`.
        let device = match unsafe { self.rt.host_device_pointer(host) } {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: allocated above, not yet shared.
                let _ = unsafe { self.rt.host_free(host) };
                return Err(e);
            }
        };
        // SAFETY: the allocation holds at least `len.max(1)` bytes and nothing else uses it yet.
        unsafe { std::ptr::write_bytes(host, 0, len.max(1)) };
        Ok(PinnedHostBuffer {
            ctx: self.clone(),
            host,
            device,
            len,
        })
    }

    pub fn stream(self: &Arc<Self>) -> GpuResult<Stream> {
        self.bind()?;
        let raw = self.rt.stream_create()?;
        Ok(Stream {
            ctx: self.clone(),
            raw,
            after_kernel: AtomicBool::new(false),
            launches: AtomicU64::new(0),
            barrier: AtomicU64::new(0),
        })
    }

    pub fn event(self: &Arc<Self>) -> GpuResult<Event> {
        self.bind()?;
        let raw = self.rt.event_create()?;
        Ok(Event { ctx: self.clone(), raw })
    }

    /// Loads a code object compiled for this device.
    pub fn load_module(self: &Arc<Self>, image: &[u8]) -> GpuResult<Arc<Module>> {
        self.bind()?;
        // SAFETY: the runtime validates the image and returns an error code for a foreign or
        // damaged one; the bytes are only read during the call.
        let raw = unsafe { self.rt.module_load(image)? };
        Ok(Arc::new(Module { ctx: self.clone(), raw }))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: retained once in `new`; every child holds an Arc, so none is alive now.
        let _ = unsafe { self.rt.context_release(self.ordinal, self.raw) };
    }
}

/// Device memory.
pub struct DeviceBuffer {
    ctx: Arc<Context>,
    ptr: DevicePtr,
    len: usize,
}

impl DeviceBuffer {
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    fn check_range(&self, offset: usize, bytes: usize, call: &'static str) -> GpuResult<()> {
        match offset.checked_add(bytes) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(GpuError::other(
                call,
                format!("range {offset}+{bytes} outside buffer of {} bytes", self.len),
            )),
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: allocated in `Context::alloc`, freed once. cuMemFree/hipFree wait for the
            // device's outstanding work before releasing the memory.
            let _ = unsafe { self.ctx.rt.mem_free(self.ptr) };
        }
    }
}

/// Page-locked host memory mapped into the device's address space: the CPU uses `as_slice`,
/// kernels use `device_ptr`.
pub struct PinnedHostBuffer {
    ctx: Arc<Context>,
    host: *mut u8,
    device: DevicePtr,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively; access goes through `&`/`&mut` borrows.
unsafe impl Send for PinnedHostBuffer {}
// SAFETY: shared access only reads.
unsafe impl Sync for PinnedHostBuffer {}

impl PinnedHostBuffer {
    pub fn device_ptr(&self) -> DevicePtr {
        self.device
    }

    pub fn host_ptr(&self) -> *mut u8 {
        self.host
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes. Kernels writing this memory must have completed (stream synchronized).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `host` points at `len` initialised bytes owned by this buffer.
        unsafe { std::slice::from_raw_parts(self.host, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` makes the access exclusive on the CPU side.
        unsafe { std::slice::from_raw_parts_mut(self.host, self.len) }
    }
}

impl Drop for PinnedHostBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: allocated in `Context::alloc_pinned`, freed once; the free waits for the
            // device as for device memory.
            let _ = unsafe { self.ctx.rt.host_free(self.host) };
        }
    }
}

/// A loaded code object.
pub struct Module {
    ctx: Arc<Context>,
    raw: RawModule,
}

impl Module {
    pub fn function(self: &Arc<Self>, name: &str) -> GpuResult<Function> {
        self.ctx.bind()?;
        // SAFETY: the module is live while `self` is.
        let raw = unsafe { self.ctx.rt.module_function(self.raw, name)? };
        Ok(Function {
            module: self.clone(),
            raw,
            name: name.into(),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: every Function holds an Arc to the module, so none is usable after this.
            let _ = unsafe { self.ctx.rt.module_unload(self.raw) };
        }
    }
}

/// A kernel entry point; keeps its module loaded.
#[derive(Clone)]
pub struct Function {
    module: Arc<Module>,
    raw: RawFunction,
    name: Arc<str>,
}

impl Function {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module this function keeps loaded.
    pub fn module(&self) -> &Arc<Module> {
        &self.module
    }
}

/// Kernel parameters: each value copied into its own 16-byte-aligned slot of one buffer, and
/// the pointer array the launch APIs want (made at launch, when the buffer no longer moves).
#[derive(Default)]
pub struct KernelArgs {
    words: Vec<u128>,
    /// First word of each parameter.
    starts: Vec<usize>,
}

impl KernelArgs {
    pub fn new() -> KernelArgs {
        KernelArgs {
            words: Vec::with_capacity(32),
            starts: Vec::with_capacity(8),
        }
    }

    /// Appends one parameter; `T` must have the C layout of the kernel's parameter (a scalar, a
    /// `DevicePtr` for a pointer, or a `#[repr(C)]` struct).
    pub fn push<T: Copy>(&mut self, value: T) -> &mut Self {
        let n = std::mem::size_of::<T>().div_ceil(16).max(1);
        let start = self.words.len();
        self.words.resize(start + n, 0);
        // SAFETY: words start..start+n hold at least size_of::<T>() bytes, aligned to 16 >=
        // align_of::<T>() for every parameter type kernels take.
        unsafe { std::ptr::write_unaligned(self.words[start..].as_mut_ptr().cast::<T>(), value) };
        self.starts.push(start);
        self
    }

    fn pointers(&mut self) -> Vec<*mut c_void> {
        let base = self.words.as_mut_ptr();
        // SAFETY: every start is inside `words`, which is not resized while the pointers live.
        self.starts.iter().map(|&s| unsafe { base.add(s) }.cast()).collect()
    }
}

/// An in-order queue of device work.
pub struct Stream {
    ctx: Arc<Context>,
    raw: RawStream,
    /// The last work queued through this wrapper is a kernel: only then may a dependent launch
    /// overlap it (copies, fills, event records and waits ahead keep their ordinary ordering).
    after_kernel: AtomicBool,
    /// Kernels queued through this wrapper so far.
    launches: AtomicU64,
    /// The value of `launches` just after the last kernel queued as an ordinary launch: that
    /// kernel started only once all work queued before it had finished, and every kernel queued
    /// after it starts later still.
    barrier: AtomicU64,
}

impl Stream {
    pub fn raw(&self) -> RawStream {
        self.raw
    }

    /// Records that something other than a kernel is queued last, so the next dependent launch
    /// waits for it in the ordinary way.
    fn note_other_work(&self) {
        self.after_kernel.store(false, Ordering::Relaxed);
    }

    /// Kernels queued through this wrapper so far (a count that only grows).
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    /// Whether everything queued up to the moment [`Self::launches`] read `mark` has finished
    /// by the time the next kernel queued here starts: an ordinary launch was queued since, or
    /// the next dependent launch cannot overlap what is ahead of it (and so starts as an
    /// ordinary one).
    pub fn finished_before_next(&self, mark: u64) -> bool {
        self.barrier.load(Ordering::Relaxed) > mark || !self.next_overlaps()
    }

    /// Whether a dependent launch queued now would overlap the work ahead of it: the device
    /// overlaps them and a kernel was queued last.
    fn next_overlaps(&self) -> bool {
        self.ctx.dependent_launch && self.after_kernel.load(Ordering::Relaxed)
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Copies `src` into `dst` at `offset` and waits for it.
    pub fn write(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> GpuResult<()> {
        dst.check_range(offset, src.len(), "write")?;
        self.ctx.bind()?;
        self.note_other_work();
        // SAFETY: the range is inside `dst`; `src` stays borrowed until the sync below.
        unsafe {
            self.ctx
                .rt
                .copy_htod_async(dst.ptr.offset(offset), src.as_ptr(), src.len(), self.raw)?
        };
        self.synchronize()
    }

    /// Copies `dst.len()` bytes from `src` at `offset` and waits for them.
    pub fn read(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> GpuResult<()> {
        src.check_range(offset, dst.len(), "read")?;
        self.ctx.bind()?;
        self.note_other_work();
        // SAFETY: the range is inside `src`; `dst` stays borrowed until the sync below.
        unsafe {
            self.ctx
                .rt
                .copy_dtoh_async(dst.as_mut_ptr(), src.ptr.offset(offset), dst.len(), self.raw)?
        };
        self.synchronize()
    }

    /// Queues a host-to-device copy without waiting.
    ///
    /// # Safety
    /// `src..src+bytes` stays valid and unchanged until the stream has passed this copy, and
    /// `dst..dst+bytes` is device memory of this context.
    pub unsafe fn copy_htod_async(&self, dst: DevicePtr, src: *const u8, bytes: usize) -> GpuResult<()> {
        self.ctx.bind()?;
        self.note_other_work();
        // SAFETY: forwarded contract.
        unsafe { self.ctx.rt.copy_htod_async(dst, src, bytes, self.raw) }
    }

    /// Queues a device-to-host copy without waiting.
    ///
    /// # Safety
    /// `dst..dst+bytes` stays valid and untouched until the stream has passed this copy, and
    /// `src..src+bytes` is device memory of this context.
    pub unsafe fn copy_dtoh_async(&self, dst: *mut u8, src: DevicePtr, bytes: usize) -> GpuResult<()> {
        self.ctx.bind()?;
        self.note_other_work();
        // SAFETY: forwarded contract.
        unsafe { self.ctx.rt.copy_dtoh_async(dst, src, bytes, self.raw) }
    }

    /// Queues a device-to-device copy of `bytes` between two buffers.
    pub fn copy(
        &self,
        dst: &DeviceBuffer,
        dst_off: usize,
        src: &DeviceBuffer,
        src_off: usize,
        bytes: usize,
    ) -> GpuResult<()> {
        dst.check_range(dst_off, bytes, "copy")?;
        src.check_range(src_off, bytes, "copy")?;
        self.ctx.bind()?;
        self.note_other_work();
        // SAFETY: both ranges are inside live buffers (freeing one waits for the device).
        unsafe {
            self.ctx
                .rt
                .copy_dtod_async(dst.ptr.offset(dst_off), src.ptr.offset(src_off), bytes, self.raw)
        }
    }

    /// Queues a device-to-device copy between raw device ranges.
    ///
    /// # Safety
    /// Both ranges are device memory of this context, valid until the stream has passed the copy.
    pub unsafe fn copy_dtod_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize) -> GpuResult<()> {
        self.ctx.bind()?;
        self.note_other_work();
        // SAFETY: forwarded contract.
        unsafe { self.ctx.rt.copy_dtod_async(dst, src, bytes, self.raw) }
    }

    /// Queues filling a raw device range with `value`.
    ///
    /// # Safety
    /// The range is device memory of this context, valid until the stream has passed the fill.
    pub unsafe fn memset_async(&self, dst: DevicePtr, value: u8, bytes: usize) -> GpuResult<()> {
        self.ctx.bind()?;
        self.note_other_work();
        // SAFETY: forwarded contract.
        unsafe { self.ctx.rt.memset_d8_async(dst, value, bytes, self.raw) }
    }

    /// Queues filling `bytes` bytes of `dst` from `offset` with `value`.
    pub fn memset(&self, dst: &DeviceBuffer, offset: usize, value: u8, bytes: usize) -> GpuResult<()> {
        dst.check_range(offset, bytes, "memset")?;
        self.ctx.bind()?;
        self.note_other_work();
        // SAFETY: the range is inside a live buffer.
        unsafe {
            self.ctx
                .rt
                .memset_d8_async(dst.ptr.offset(offset), value, bytes, self.raw)
        }
    }

    /// Queues `f` with `args`.
    ///
    /// # Safety
    /// `args` match `f`'s parameter list in number, order and layout, and every address the
    /// kernel reads or writes for this grid is valid memory of this device until it completes.
    pub unsafe fn launch(&self, f: &Function, cfg: LaunchConfig, args: &mut KernelArgs) -> GpuResult<()> {
        // SAFETY: forwarded contract.
        unsafe { self.queue_kernel(f, cfg, args, false) }
    }

    /// Queues `f` with `args` as a dependent launch where this device overlaps them and the
    /// work queued last is a kernel: `f`'s grid may start once every block of that kernel has
    /// started (or released it with tandem_grid_release), before it finishes. Elsewhere a plain
    /// [`Self::launch`].
    ///
    /// # Safety
    /// As [`Self::launch`]; and `f` calls tandem_grid_wait before it writes anything or reads
    /// anything but memory that no work queued ahead of it on this stream writes.
    pub unsafe fn launch_dependent(&self, f: &Function, cfg: LaunchConfig, args: &mut KernelArgs) -> GpuResult<()> {
        let overlap = self.next_overlaps();
        // SAFETY: forwarded contract.
        unsafe { self.queue_kernel(f, cfg, args, overlap) }
    }

    /// # Safety
    /// As [`Self::launch`], and as [`Self::launch_dependent`] when `dependent`.
    unsafe fn queue_kernel(
        &self,
        f: &Function,
        cfg: LaunchConfig,
        args: &mut KernelArgs,
        dependent: bool,
    ) -> GpuResult<()> {
        self.ctx.bind()?;
        let mut ptrs = args.pointers();
        // SAFETY: forwarded contract; the argument slots live until the call returns (the
        // runtimes copy parameter values at launch).
        let queued = unsafe {
            if dependent {
                self.ctx.rt.launch_dependent(f.raw, cfg, self.raw, &mut ptrs)
            } else {
                self.ctx.rt.launch(f.raw, cfg, self.raw, &mut ptrs)
            }
        };
        // A failed launch queued nothing, but whether the one before it still stands last is
        // not worth tracking: ordinary ordering is always safe.
        self.after_kernel.store(queued.is_ok(), Ordering::Relaxed);
        if queued.is_ok() {
            let n = self.launches.fetch_add(1, Ordering::Relaxed) + 1;
            if !dependent {
                self.barrier.store(n, Ordering::Relaxed);
            }
        }
        queued.map_err(|mut e| {
            e.message = format!("{} ({})", e.message, f.name);
            e
        })
    }

    /// Makes later work on this stream wait for `e`.
    pub fn wait(&self, e: &Event) -> GpuResult<()> {
        self.ctx.bind()?;
        self.note_other_work();
        // SAFETY: both handles are live.
        unsafe { self.ctx.rt.stream_wait_event(self.raw, e.raw) }
    }

    pub fn synchronize(&self) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: live stream.
        unsafe { self.ctx.rt.stream_synchronize(self.raw) }
    }

    /// Whether [`Self::capture`] can work here.
    pub fn has_graphs(&self) -> bool {
        self.ctx.rt.has_graphs()
    }

    /// From now on what is queued here is captured, not run, until [`Self::end_capture`], which
    /// the caller must call whatever happens meanwhile. The captured work starts as work after a
    /// graph launch does: its first kernel overlaps nothing ahead of it.
    pub fn begin_capture(&self) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: a live stream; tandem captures on one thread at a time and never nests
        // captures (the device's exec lock is held across begin and end).
        unsafe { self.ctx.rt.capture_begin(self.raw) }?;
        self.note_other_work();
        Ok(())
    }

    /// Ends the capture [`Self::begin_capture`] began and instantiates what it holds; none of it
    /// has run (it runs where [`GraphExec::launch`] queues it).
    pub fn end_capture(&self) -> GpuResult<GraphExec> {
        self.ctx.bind()?;
        // SAFETY: this stream is capturing (the caller began it); the capture ends either way.
        let ended = unsafe { self.ctx.rt.capture_end(self.raw) };
        // What was captured never ran: the next dependent launch must not overlap it.
        self.note_other_work();
        Ok(GraphExec {
            ctx: self.ctx.clone(),
            raw: ended?,
        })
    }
}

/// Captured stream work, instantiated ([`Stream::capture`]); launched as one.
pub struct GraphExec {
    ctx: Arc<Context>,
    raw: RawGraphExec,
}

impl GraphExec {
    /// Queues the captured work on `s`, after everything queued there before it.
    ///
    /// # Safety
    /// Every address the captured work touches is still valid device memory, holding what its
    /// kernels expect, until this launch completes.
    pub unsafe fn launch(&self, s: &Stream) -> GpuResult<()> {
        self.ctx.bind()?;
        s.note_other_work();
        // SAFETY: both handles live; forwarded contract.
        unsafe { self.ctx.rt.graph_launch(self.raw, s.raw) }
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: instantiated in `Stream::capture`, destroyed once; its owner synchronizes
            // the stream before dropping it.
            let _ = unsafe { self.ctx.rt.graph_destroy(self.raw) };
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created in `Context::stream`, destroyed once; queued work still completes.
            let _ = unsafe { self.ctx.rt.stream_destroy(self.raw) };
        }
    }
}

/// A point in a stream, for ordering and timing.
pub struct Event {
    ctx: Arc<Context>,
    raw: RawEvent,
}

impl Event {
    pub fn record(&self, s: &Stream) -> GpuResult<()> {
        self.ctx.bind()?;
        s.note_other_work();
        // SAFETY: both handles are live.
        unsafe { self.ctx.rt.event_record(self.raw, s.raw) }
    }

    pub fn synchronize(&self) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: live event.
        unsafe { self.ctx.rt.event_synchronize(self.raw) }
    }

    /// Milliseconds from `self` to `end`, both recorded and completed.
    pub fn elapsed_ms(&self, end: &Event) -> GpuResult<f32> {
        self.ctx.bind()?;
        // SAFETY: both live; the runtime reports an error code for unrecorded events.
        unsafe { self.ctx.rt.event_elapsed_ms(self.raw, end.raw) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created in `Context::event`, destroyed once.
            let _ = unsafe { self.ctx.rt.event_destroy(self.raw) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_args_keep_values_aligned_and_intact() {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Shape {
            ne: [i64; 4],
            nb: [i64; 4],
        }
        let shape = Shape {
            ne: [1, 2, 3, 4],
            nb: [5, 6, 7, 8],
        };
        let mut a = KernelArgs::new();
        a.push(DevicePtr(0xdead_beef_0000)).push(1.5f32).push(shape);
        let p = a.pointers();
        assert_eq!(p.len(), 3);
        for q in &p {
            assert_eq!(*q as usize % 16, 0);
        }
        // SAFETY: each slot holds the value pushed, with its type's layout.
        unsafe {
            assert_eq!(*(p[0] as *const u64), 0xdead_beef_0000);
            assert_eq!(*(p[1] as *const f32), 1.5);
            let s = *(p[2] as *const Shape);
            assert_eq!(s.ne, [1, 2, 3, 4]);
            assert_eq!(s.nb, [5, 6, 7, 8]);
        }
    }
}
