//! The one API table both vendors implement: the CUDA driver API and HIP's module API are the same
//! calls under two prefixes, so one trait covers them. Every method returns the runtime's own
//! error string; handles are raw and unowned here (the owning types are in `safe.rs`).

use std::ffi::c_void;
use std::fmt;

/// Which vendor runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuntimeKind {
    /// NVIDIA: CUDA driver API + NVRTC.
    Cuda,
    /// AMD: HIP + hiprtc.
    Hip,
}

impl RuntimeKind {
    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Cuda => "cuda",
            RuntimeKind::Hip => "hip",
        }
    }
}

/// A failed runtime call: the call's name, the runtime's code and its own description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuError {
    pub call: &'static str,
    pub code: i32,
    pub message: String,
}

impl GpuError {
    /// An error that did not come from a runtime call (bad argument, missing library).
    pub fn other(call: &'static str, message: impl Into<String>) -> GpuError {
        GpuError {
            call,
            code: -1,
            message: message.into(),
        }
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.code >= 0 {
            write!(f, "{} failed: {} (code {})", self.call, self.message, self.code)
        } else {
            write!(f, "{}: {}", self.call, self.message)
        }
    }
}

impl std::error::Error for GpuError {}

pub type GpuResult<T> = Result<T, GpuError>;

/// A device address (`CUdeviceptr` / `hipDeviceptr_t`, both 64-bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
}

macro_rules! raw_handle {
    ($($(#[$m:meta])* $name:ident;)*) => {$(
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(pub *mut c_void);
        // SAFETY: driver handles are process-wide values; the runtimes allow using them from any
        // thread (the owning types in `safe.rs` bind the right context first).
        unsafe impl Send for $name {}
        // SAFETY: as above; the handle itself is never mutated through a shared reference.
        unsafe impl Sync for $name {}
    )*};
}

raw_handle! {
    /// `CUcontext` (the device's primary context); null on HIP, which binds by device ordinal.
    RawContext;
    /// `CUmodule` / `hipModule_t`.
    RawModule;
    /// `CUfunction` / `hipFunction_t`.
    RawFunction;
    /// `CUstream` / `hipStream_t`; null is the legacy default stream.
    RawStream;
    /// `CUevent` / `hipEvent_t`.
    RawEvent;
    /// `CUgraphExec`: captured stream work, instantiated to be launched as one.
    RawGraphExec;
}

/// What a device is, for `tandem info` and for choosing kernel variants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// Compile target: `sm_90` on NVIDIA, `gfx1100` on AMD (feature suffixes removed).
    pub arch: String,
    /// Streaming multiprocessors (NVIDIA) or compute units (AMD).
    pub compute_units: u32,
    pub warp_size: u32,
    pub total_memory: u64,
    /// Whether pinned host memory can be mapped into the device's address space.
    pub can_map_host_memory: bool,
    pub integrated: bool,
}

/// `sm_<N>[suffix]` → N (the compute capability as one number: `sm_90a` → 90); `None` for any
/// other target name (AMD's).
pub fn sm_number(arch: &str) -> Option<u32> {
    arch.strip_prefix("sm_")?
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .ok()
}

/// Grid and block of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

/// The runtime calls tandem uses, identical in meaning on both vendors.
///
/// Methods taking raw handles or pointers are `unsafe`: the caller guarantees the handles are live
/// and belong to the device whose context is current on this thread, and that every pointer covers
/// the bytes named.
pub trait GpuRuntime: Send + Sync {
    fn kind(&self) -> RuntimeKind;
    /// The driver's version as the runtime encodes it (CUDA: 1000*major + 10*minor).
    fn driver_version(&self) -> GpuResult<i32>;
    fn device_count(&self) -> GpuResult<usize>;
    fn device_info(&self, ordinal: usize) -> GpuResult<DeviceInfo>;

    /// Retains the device's primary context (CUDA) or checks the ordinal (HIP).
    fn context_retain(&self, ordinal: usize) -> GpuResult<RawContext>;
    /// # Safety
    /// `ctx` came from `context_retain(ordinal)` and is released once.
    unsafe fn context_release(&self, ordinal: usize, ctx: RawContext) -> GpuResult<()>;
    /// Makes the device current on this thread.
    ///
    /// # Safety
    /// `ctx` is a live context of `ordinal`.
    unsafe fn context_bind(&self, ordinal: usize, ctx: RawContext) -> GpuResult<()>;
    /// Waits for all work of the current device.
    fn context_synchronize(&self) -> GpuResult<()>;
    /// (free, total) bytes of the current device.
    fn mem_info(&self) -> GpuResult<(u64, u64)>;

    /// # Safety
    /// `image` is a complete code object (cubin/PTX or AMD ELF) for the current device.
    unsafe fn module_load(&self, image: &[u8]) -> GpuResult<RawModule>;
    /// # Safety
    /// `module` is live and unloaded once; no function of it runs or is used afterwards.
    unsafe fn module_unload(&self, module: RawModule) -> GpuResult<()>;
    /// # Safety
    /// `module` is live.
    unsafe fn module_function(&self, module: RawModule, name: &str) -> GpuResult<RawFunction>;
    /// # Safety
    /// `params` holds one pointer per kernel parameter, each to a value of exactly that
    /// parameter's type and layout, live until the call returns; every address the kernel
    /// touches is valid device memory until the launch completes.
    unsafe fn launch(
        &self,
        function: RawFunction,
        cfg: LaunchConfig,
        stream: RawStream,
        params: &mut [*mut c_void],
    ) -> GpuResult<()>;

    /// Whether [`Self::launch_dependent`] can start a grid before the kernel ahead of it has
    /// finished (CUDA 12's programmatic dependent launch, on devices of compute capability 9.0 or
    /// later); where not, it is a plain launch.
    fn has_dependent_launch(&self, info: &DeviceInfo) -> bool {
        let _ = info;
        false
    }
    /// As [`Self::launch`], but where [`Self::has_dependent_launch`] the grid may start as soon as
    /// every block of the kernel queued just ahead of it on `stream` has started (or called
    /// `griddepcontrol.launch_dependents`), rather than when that kernel has finished.
    ///
    /// # Safety
    /// As [`Self::launch`]; in addition the kernel executes `griddepcontrol.wait` (tandem_grid_wait)
    /// before it writes anything or reads anything other than memory that no work queued ahead of
    /// it on the stream writes.
    unsafe fn launch_dependent(
        &self,
        function: RawFunction,
        cfg: LaunchConfig,
        stream: RawStream,
        params: &mut [*mut c_void],
    ) -> GpuResult<()> {
        // SAFETY: forwarded contract; an ordinary launch meets a stronger one.
        unsafe { self.launch(function, cfg, stream, params) }
    }

    fn mem_alloc(&self, bytes: usize) -> GpuResult<DevicePtr>;
    /// # Safety
    /// `ptr` came from `mem_alloc`, is freed once, and no queued work still uses it.
    unsafe fn mem_free(&self, ptr: DevicePtr) -> GpuResult<()>;
    /// Page-locked host memory mapped into every device's address space (portable + mapped).
    fn host_alloc_mapped(&self, bytes: usize) -> GpuResult<*mut u8>;
    /// # Safety
    /// `ptr` came from `host_alloc_mapped`, is freed once, and no queued work still uses it.
    unsafe fn host_free(&self, ptr: *mut u8) -> GpuResult<()>;
    /// # Safety
    /// `host` points into memory from `host_alloc_mapped`.
    unsafe fn host_device_pointer(&self, host: *mut u8) -> GpuResult<DevicePtr>;

    /// # Safety
    /// `dst..dst+bytes` is device memory, `src..src+bytes` host memory that stays valid and
    /// unchanged until the stream reaches this copy.
    unsafe fn copy_htod_async(&self, dst: DevicePtr, src: *const u8, bytes: usize, s: RawStream) -> GpuResult<()>;
    /// # Safety
    /// As `copy_htod_async` with the roles swapped; `dst` is not read or written until then.
    unsafe fn copy_dtoh_async(&self, dst: *mut u8, src: DevicePtr, bytes: usize, s: RawStream) -> GpuResult<()>;
    /// # Safety
    /// Both ranges are device memory.
    unsafe fn copy_dtod_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, s: RawStream) -> GpuResult<()>;
    /// # Safety
    /// `dst..dst+bytes` is device memory.
    unsafe fn memset_d8_async(&self, dst: DevicePtr, value: u8, bytes: usize, s: RawStream) -> GpuResult<()>;

    fn stream_create(&self) -> GpuResult<RawStream>;
    /// # Safety
    /// `s` is live and destroyed once.
    unsafe fn stream_destroy(&self, s: RawStream) -> GpuResult<()>;
    /// # Safety
    /// `s` is live.
    unsafe fn stream_synchronize(&self, s: RawStream) -> GpuResult<()>;
    /// # Safety
    /// Both handles are live.
    unsafe fn stream_wait_event(&self, s: RawStream, e: RawEvent) -> GpuResult<()>;

    /// An event that records timing.
    fn event_create(&self) -> GpuResult<RawEvent>;
    /// # Safety
    /// `e` is live and destroyed once.
    unsafe fn event_destroy(&self, e: RawEvent) -> GpuResult<()>;
    /// # Safety
    /// Both handles are live.
    unsafe fn event_record(&self, e: RawEvent, s: RawStream) -> GpuResult<()>;
    /// # Safety
    /// `e` is live.
    unsafe fn event_synchronize(&self, e: RawEvent) -> GpuResult<()>;
    /// Milliseconds between two completed events.
    ///
    /// # Safety
    /// Both events are live and recorded.
    unsafe fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> GpuResult<f32>;

    /// Whether [`Self::capture_begin`], [`Self::capture_end`] and [`Self::graph_launch`] work:
    /// stream work captured once and replayed as one launch (a CUDA driver with stream capture
    /// and `cuGraphInstantiateWithFlags`, CUDA 11.4 and later; not yet on HIP).
    fn has_graphs(&self) -> bool {
        false
    }
    /// From now on work queued on `s` is captured (by this thread, in relaxed mode) instead of
    /// run, until [`Self::capture_end`].
    ///
    /// # Safety
    /// `s` is live and not capturing.
    unsafe fn capture_begin(&self, s: RawStream) -> GpuResult<()> {
        let _ = s;
        Err(GpuError::other("capture_begin", "this runtime has no device graphs"))
    }
    /// Ends the capture begun on `s` and instantiates what it holds. The capture ends even where
    /// this fails (a call during the capture that the capture could not take).
    ///
    /// # Safety
    /// `s` is live and capturing.
    unsafe fn capture_end(&self, s: RawStream) -> GpuResult<RawGraphExec> {
        let _ = s;
        Err(GpuError::other("capture_end", "this runtime has no device graphs"))
    }
    /// Queues the captured work of `g` on `s`, after everything queued there before it.
    ///
    /// # Safety
    /// Both handles are live; every address the captured work touches is still valid.
    unsafe fn graph_launch(&self, g: RawGraphExec, s: RawStream) -> GpuResult<()> {
        let _ = (g, s);
        Err(GpuError::other("graph_launch", "this runtime has no device graphs"))
    }
    /// # Safety
    /// `g` is live, destroyed once, and no launch of it is still queued.
    unsafe fn graph_destroy(&self, g: RawGraphExec) -> GpuResult<()> {
        let _ = g;
        Ok(())
    }
}

/// A run-time compiler (NVRTC or hiprtc).
pub trait KernelCompiler: Send + Sync {
    /// Compiler name and version, part of every cache key, e.g. `nvrtc 13.0`.
    fn id(&self) -> String;
    /// Compiles `source` (program name `name`) with in-memory `headers` (include name, contents)
    /// into a code object loadable by `module_load`.
    fn compile(
        &self,
        name: &str,
        source: &str,
        headers: &[(&str, &str)],
        options: &[String],
    ) -> Result<Vec<u8>, CompileError>;
    /// Options selecting `arch` (e.g. `sm_90`, `gfx1100`) plus the language settings tandem uses.
    fn arch_options(&self, arch: &str) -> Vec<String>;
}

/// A failed compile: which program, the compiler's result and its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    pub program: String,
    pub message: String,
    pub log: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel {} failed to compile: {}", self.program, self.message)?;
        if !self.log.trim().is_empty() {
            write!(f, "\n{}", self.log.trim_end())?;
        }
        Ok(())
    }
}

impl std::error::Error for CompileError {}
