//! NVIDIA: the CUDA driver API (`libcuda.so.1`) loaded at run time. `CudaSys` is the raw symbol
//! table; `CudaRuntime` turns each call into a `GpuResult` with the driver's own error text.

use super::api::*;
use super::loader::{self, open_first, symbol_table, LibReport};
use std::ffi::{c_char, c_void, CString};

type Ptr = *mut c_void;

symbol_table! {
    /// The driver calls tandem uses (the `_v2` names are the 64-bit ABI every driver exports).
    pub struct CudaSys {
        cuInit: fn(u32) -> i32;
        cuDriverGetVersion: fn(*mut i32) -> i32;
        cuDeviceGetCount: fn(*mut i32) -> i32;
        cuDeviceGet: fn(*mut i32, i32) -> i32;
        cuDeviceGetName: fn(*mut c_char, i32, i32) -> i32;
        cuDeviceGetAttribute: fn(*mut i32, i32, i32) -> i32;
        cuDeviceTotalMem_v2: fn(*mut usize, i32) -> i32;
        cuDevicePrimaryCtxRetain: fn(*mut Ptr, i32) -> i32;
        cuDevicePrimaryCtxRelease_v2: fn(i32) -> i32;
        cuCtxSetCurrent: fn(Ptr) -> i32;
        cuCtxSynchronize: fn() -> i32;
        cuMemGetInfo_v2: fn(*mut usize, *mut usize) -> i32;
        cuModuleLoadData: fn(*mut Ptr, *const c_void) -> i32;
        cuModuleUnload: fn(Ptr) -> i32;
        cuModuleGetFunction: fn(*mut Ptr, Ptr, *const c_char) -> i32;
        cuFuncSetAttribute: fn(Ptr, i32, i32) -> i32;
        cuLaunchKernel: fn(Ptr, u32, u32, u32, u32, u32, u32, u32, Ptr, *mut *mut c_void, *mut *mut c_void) -> i32;
        cuMemAlloc_v2: fn(*mut u64, usize) -> i32;
        cuMemFree_v2: fn(u64) -> i32;
        cuMemHostAlloc: fn(*mut Ptr, usize, u32) -> i32;
        cuMemFreeHost: fn(Ptr) -> i32;
        cuMemHostGetDevicePointer_v2: fn(*mut u64, Ptr, u32) -> i32;
        cuMemcpyHtoDAsync_v2: fn(u64, *const c_void, usize, Ptr) -> i32;
        cuMemcpyDtoHAsync_v2: fn(Ptr, u64, usize, Ptr) -> i32;
        cuMemcpyDtoDAsync_v2: fn(u64, u64, usize, Ptr) -> i32;
        cuMemsetD8Async: fn(u64, u8, usize, Ptr) -> i32;
        cuStreamCreate: fn(*mut Ptr, u32) -> i32;
        cuStreamDestroy_v2: fn(Ptr) -> i32;
        cuStreamSynchronize: fn(Ptr) -> i32;
        cuStreamWaitEvent: fn(Ptr, Ptr, u32) -> i32;
        cuEventCreate: fn(*mut Ptr, u32) -> i32;
        cuEventRecord: fn(Ptr, Ptr) -> i32;
        cuEventSynchronize: fn(Ptr) -> i32;
        cuEventElapsedTime: fn(*mut f32, Ptr, Ptr) -> i32;
        cuEventDestroy_v2: fn(Ptr) -> i32;
        cuGetErrorName: fn(i32, *mut *const c_char) -> i32;
        cuGetErrorString: fn(i32, *mut *const c_char) -> i32;
    }
}

// CUdevice_attribute values (cuda.h; stable since they were introduced).
const ATTR_WARP_SIZE: i32 = 10;
const ATTR_MULTIPROCESSOR_COUNT: i32 = 16;
const ATTR_INTEGRATED: i32 = 18;
const ATTR_CAN_MAP_HOST_MEMORY: i32 = 19;
const ATTR_CC_MAJOR: i32 = 75;
const ATTR_CC_MINOR: i32 = 76;
// cuMemHostAlloc flags.
const MEMHOSTALLOC_PORTABLE: u32 = 0x01;
const MEMHOSTALLOC_DEVICEMAP: u32 = 0x02;
const STREAM_NON_BLOCKING: u32 = 0x1;
// CUfunction_attribute: the most dynamic shared memory a launch may ask for.
const FUNC_MAX_DYNAMIC_SHARED: i32 = 8;
/// Dynamic shared memory every launch may take without raising its function's limit.
const DEFAULT_DYNAMIC_SHARED: u32 = 48 * 1024;
const EVENT_DEFAULT: u32 = 0x0;
// CUlaunchAttributeID: the grid may start before the kernel ahead of it in the stream finishes.
const LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: i32 = 6;

/// `CUlaunchAttribute` (cuda.h, CUDA 12): the id, padding to 8 bytes, a 64-byte value union.
#[repr(C)]
struct LaunchAttribute {
    id: i32,
    pad: [u8; 4],
    value: [u64; 8],
}

/// `CUlaunchConfig` (cuda.h, CUDA 12).
#[repr(C)]
struct LaunchConfigEx {
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    stream: Ptr,
    attrs: *mut LaunchAttribute,
    num_attrs: u32,
}

const _: () = assert!(std::mem::size_of::<LaunchAttribute>() == 72);
const _: () = assert!(std::mem::size_of::<LaunchConfigEx>() == 56);

/// `cuLaunchKernelEx` (CUDA 12.0 drivers and later; looked up on its own, as older drivers lack it).
type LaunchKernelEx = unsafe extern "C" fn(*const LaunchConfigEx, Ptr, *mut *mut c_void, *mut *mut c_void) -> i32;

// CUstreamCaptureMode: other threads' unsafe calls do not break this thread's capture.
const STREAM_CAPTURE_MODE_RELAXED: i32 = 2;

/// The stream-capture and graph calls (CUDA 11.4 drivers and later), looked up together: all
/// or none.
#[derive(Clone, Copy)]
struct GraphSys {
    begin: unsafe extern "C" fn(Ptr, i32) -> i32,
    end: unsafe extern "C" fn(Ptr, *mut Ptr) -> i32,
    instantiate: unsafe extern "C" fn(*mut Ptr, Ptr, u64) -> i32,
    launch: unsafe extern "C" fn(Ptr, Ptr) -> i32,
    exec_destroy: unsafe extern "C" fn(Ptr) -> i32,
    destroy: unsafe extern "C" fn(Ptr) -> i32,
}

impl GraphSys {
    /// # Safety
    /// The pointers are used only while the library stays open.
    unsafe fn load(l: &loader::SymbolLoader<'_>) -> Option<GraphSys> {
        // SAFETY: each type is cuda.h's declaration of the symbol (forwarded contract).
        unsafe {
            Some(GraphSys {
                begin: l.optional("cuStreamBeginCapture_v2")?,
                end: l.optional("cuStreamEndCapture")?,
                instantiate: l.optional("cuGraphInstantiateWithFlags")?,
                launch: l.optional("cuGraphLaunch")?,
                exec_destroy: l.optional("cuGraphExecDestroy")?,
                destroy: l.optional("cuGraphDestroy")?,
            })
        }
    }
}

/// The sonames the driver is looked for under (`libcuda.so` only exists with a dev package).
pub fn driver_candidates() -> Vec<String> {
    let mut dirs = Vec::new();
    if let Some(p) = std::env::var_os("CUDA_PATH") {
        dirs.push(std::path::PathBuf::from(p).join("lib64/stubs").with_file_name("lib64"));
    }
    loader::candidates(&["libcuda.so.1", "libcuda.so"], &dirs)
}

pub struct CudaRuntime {
    sys: CudaSys,
    /// `cuLaunchKernelEx`, where the driver has it (its library is kept open by `sys`).
    launch_ex: Option<LaunchKernelEx>,
    /// Stream capture and graphs, where the driver has them.
    graphs: Option<GraphSys>,
    /// `cuInit`'s result: a driver without devices still loads, and says why here.
    init: GpuResult<()>,
    /// Dynamic shared memory each function's limit has been raised to (function handle as
    /// usize), so the driver is asked once per function and size, not on every launch.
    shared_limits: std::sync::Mutex<std::collections::HashMap<usize, u32>>,
}

impl CudaRuntime {
    /// Loads the driver; `None` (with the report saying why) if absent or incomplete.
    pub fn load() -> (Option<CudaRuntime>, LibReport) {
        let (lib, mut report) = open_first("CUDA driver", &driver_candidates());
        let Some(lib) = lib else { return (None, report) };
        // SAFETY: the type is cuda.h's declaration of cuLaunchKernelEx; the pointer is used only
        // while `sys`, which takes the library, keeps it open.
        let launch_ex = unsafe { loader::SymbolLoader::new(&lib).optional::<LaunchKernelEx>("cuLaunchKernelEx") };
        // SAFETY: as above.
        let graphs = unsafe { GraphSys::load(&loader::SymbolLoader::new(&lib)) };
        let sys = match CudaSys::load(lib) {
            Ok(s) => s,
            Err(e) => {
                report.error = Some(e);
                return (None, report);
            }
        };
        let mut rt = CudaRuntime {
            sys,
            launch_ex,
            graphs,
            init: Ok(()),
            shared_limits: Default::default(),
        };
        // SAFETY: cuInit takes flags that must be 0; it may be called any number of times.
        let code = unsafe { (rt.sys.cuInit)(0) };
        rt.init = rt.check("cuInit", code);
        (Some(rt), report)
    }

    /// Raises `function`'s dynamic shared-memory limit to `bytes` where a launch asks for more
    /// than every function may take; once per function and size.
    fn raise_shared_limit(&self, function: RawFunction, bytes: u32) -> GpuResult<()> {
        if bytes <= DEFAULT_DYNAMIC_SHARED {
            return Ok(());
        }
        let mut limits = self.shared_limits.lock().unwrap_or_else(|p| p.into_inner());
        let raised = limits.entry(function.0 as usize).or_insert(DEFAULT_DYNAMIC_SHARED);
        if bytes > *raised {
            // SAFETY: a live function handle; the driver checks the value against the device.
            let code = unsafe { (self.sys.cuFuncSetAttribute)(function.0, FUNC_MAX_DYNAMIC_SHARED, bytes as i32) };
            self.check("cuFuncSetAttribute", code)?;
            *raised = bytes;
        }
        Ok(())
    }

    /// A launch with `cuLaunchKernel`, or with `dependent` (and a driver that has it) through
    /// `cuLaunchKernelEx` with programmatic stream serialization allowed.
    ///
    /// # Safety
    /// [`GpuRuntime::launch`]'s contract, and [`GpuRuntime::launch_dependent`]'s when `dependent`.
    unsafe fn queue(
        &self,
        function: RawFunction,
        cfg: LaunchConfig,
        stream: RawStream,
        params: &mut [*mut c_void],
        dependent: bool,
    ) -> GpuResult<()> {
        self.raise_shared_limit(function, cfg.shared_bytes)?;
        if let Some(launch_ex) = self.launch_ex.filter(|_| dependent) {
            let mut attr = LaunchAttribute {
                id: LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                // programmaticStreamSerializationAllowed: an int at the start of the union.
                value: [1, 0, 0, 0, 0, 0, 0, 0],
            };
            let config = LaunchConfigEx {
                grid: cfg.grid,
                block: cfg.block,
                shared_bytes: cfg.shared_bytes,
                stream: stream.0,
                attrs: &mut attr,
                num_attrs: 1,
            };
            // SAFETY: `config` and its one attribute live until the call returns (the driver
            // copies them); the caller guarantees `params` matches the kernel and that the kernel
            // waits (griddepcontrol.wait) before touching what the work ahead of it writes.
            let code = unsafe { launch_ex(&config, function.0, params.as_mut_ptr(), std::ptr::null_mut()) };
            return self.check("cuLaunchKernelEx", code);
        }
        let [gx, gy, gz] = cfg.grid;
        let [bx, by, bz] = cfg.block;
        // SAFETY: the caller guarantees `params` matches the kernel's parameter list.
        let code = unsafe {
            (self.sys.cuLaunchKernel)(
                function.0,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                cfg.shared_bytes,
                stream.0,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check("cuLaunchKernel", code)
    }

    fn check(&self, call: &'static str, code: i32) -> GpuResult<()> {
        if code == 0 {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: both calls write a pointer to a static string (or leave it null on an unknown
        // code); `c_str` reads it at once.
        let message = unsafe {
            (self.sys.cuGetErrorName)(code, &mut name);
            (self.sys.cuGetErrorString)(code, &mut text);
            match (loader::c_str(name), loader::c_str(text)) {
                (n, t) if n.is_empty() && t.is_empty() => "unknown CUDA error".to_string(),
                (n, t) if t.is_empty() => n,
                (n, t) => format!("{n}: {t}"),
            }
        };
        Err(GpuError { call, code, message })
    }

    fn device(&self, ordinal: usize) -> GpuResult<i32> {
        self.init.clone()?;
        let mut dev = 0;
        // SAFETY: writes one CUdevice; a bad ordinal is reported as an error code.
        let code = unsafe { (self.sys.cuDeviceGet)(&mut dev, ordinal as i32) };
        self.check("cuDeviceGet", code).map(|_| dev)
    }

    fn attribute(&self, dev: i32, attr: i32) -> GpuResult<i32> {
        let mut v = 0;
        // SAFETY: writes one int for a valid device handle.
        let code = unsafe { (self.sys.cuDeviceGetAttribute)(&mut v, attr, dev) };
        self.check("cuDeviceGetAttribute", code).map(|_| v)
    }
}

impl GpuRuntime for CudaRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Cuda
    }

    fn driver_version(&self) -> GpuResult<i32> {
        let mut v = 0;
        // SAFETY: writes one int; valid before cuInit.
        let code = unsafe { (self.sys.cuDriverGetVersion)(&mut v) };
        self.check("cuDriverGetVersion", code).map(|_| v)
    }

    fn device_count(&self) -> GpuResult<usize> {
        self.init.clone()?;
        let mut n = 0;
        // SAFETY: writes one int.
        let code = unsafe { (self.sys.cuDeviceGetCount)(&mut n) };
        self.check("cuDeviceGetCount", code).map(|_| n.max(0) as usize)
    }

    fn device_info(&self, ordinal: usize) -> GpuResult<DeviceInfo> {
        let dev = self.device(ordinal)?;
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates within them.
        let code = unsafe { (self.sys.cuDeviceGetName)(name.as_mut_ptr(), name.len() as i32, dev) };
        self.check("cuDeviceGetName", code)?;
        let mut total = 0usize;
        // SAFETY: writes one size_t.
        let code = unsafe { (self.sys.cuDeviceTotalMem_v2)(&mut total, dev) };
        self.check("cuDeviceTotalMem", code)?;
        let major = self.attribute(dev, ATTR_CC_MAJOR)?;
        let minor = self.attribute(dev, ATTR_CC_MINOR)?;
        Ok(DeviceInfo {
            ordinal,
            // SAFETY: NUL-terminated by the driver (and the array is zero-initialised).
            name: unsafe { loader::c_str(name.as_ptr()) },
            arch: format!("sm_{major}{minor}"),
            compute_units: self.attribute(dev, ATTR_MULTIPROCESSOR_COUNT)?.max(0) as u32,
            warp_size: self.attribute(dev, ATTR_WARP_SIZE)?.max(0) as u32,
            total_memory: total as u64,
            can_map_host_memory: self.attribute(dev, ATTR_CAN_MAP_HOST_MEMORY)? != 0,
            integrated: self.attribute(dev, ATTR_INTEGRATED)? != 0,
        })
    }

    fn context_retain(&self, ordinal: usize) -> GpuResult<RawContext> {
        let dev = self.device(ordinal)?;
        let mut ctx: Ptr = std::ptr::null_mut();
        // SAFETY: writes one CUcontext for a valid device.
        let code = unsafe { (self.sys.cuDevicePrimaryCtxRetain)(&mut ctx, dev) };
        self.check("cuDevicePrimaryCtxRetain", code).map(|_| RawContext(ctx))
    }

    unsafe fn context_release(&self, ordinal: usize, _ctx: RawContext) -> GpuResult<()> {
        let dev = self.device(ordinal)?;
        // SAFETY: pairs with the caller's one retain.
        let code = unsafe { (self.sys.cuDevicePrimaryCtxRelease_v2)(dev) };
        self.check("cuDevicePrimaryCtxRelease", code)
    }

    unsafe fn context_bind(&self, _ordinal: usize, ctx: RawContext) -> GpuResult<()> {
        // SAFETY: `ctx` is live per the contract.
        let code = unsafe { (self.sys.cuCtxSetCurrent)(ctx.0) };
        self.check("cuCtxSetCurrent", code)
    }

    fn context_synchronize(&self) -> GpuResult<()> {
        // SAFETY: acts on the current context; without one the driver returns an error code.
        let code = unsafe { (self.sys.cuCtxSynchronize)() };
        self.check("cuCtxSynchronize", code)
    }

    fn mem_info(&self) -> GpuResult<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two size_t values.
        let code = unsafe { (self.sys.cuMemGetInfo_v2)(&mut free, &mut total) };
        self.check("cuMemGetInfo", code).map(|_| (free as u64, total as u64))
    }

    unsafe fn module_load(&self, image: &[u8]) -> GpuResult<RawModule> {
        let mut m: Ptr = std::ptr::null_mut();
        // SAFETY: the image is a complete code object per the contract; the driver copies it.
        let code = unsafe { (self.sys.cuModuleLoadData)(&mut m, image.as_ptr().cast()) };
        self.check("cuModuleLoadData", code).map(|_| RawModule(m))
    }

    unsafe fn module_unload(&self, module: RawModule) -> GpuResult<()> {
        // SAFETY: live module, unloaded once (contract).
        let code = unsafe { (self.sys.cuModuleUnload)(module.0) };
        self.check("cuModuleUnload", code)
    }

    unsafe fn module_function(&self, module: RawModule, name: &str) -> GpuResult<RawFunction> {
        let cname = CString::new(name).map_err(|_| GpuError::other("cuModuleGetFunction", "name has a NUL"))?;
        let mut f: Ptr = std::ptr::null_mut();
        // SAFETY: live module; the name is NUL-terminated.
        let code = unsafe { (self.sys.cuModuleGetFunction)(&mut f, module.0, cname.as_ptr()) };
        self.check("cuModuleGetFunction", code).map(|_| RawFunction(f))
    }

    unsafe fn launch(
        &self,
        function: RawFunction,
        cfg: LaunchConfig,
        stream: RawStream,
        params: &mut [*mut c_void],
    ) -> GpuResult<()> {
        // SAFETY: forwarded contract.
        unsafe { self.queue(function, cfg, stream, params, false) }
    }

    fn has_dependent_launch(&self, info: &DeviceInfo) -> bool {
        self.launch_ex.is_some() && sm_number(&info.arch).is_some_and(|v| v >= 90)
    }

    unsafe fn launch_dependent(
        &self,
        function: RawFunction,
        cfg: LaunchConfig,
        stream: RawStream,
        params: &mut [*mut c_void],
    ) -> GpuResult<()> {
        // SAFETY: forwarded contract.
        unsafe { self.queue(function, cfg, stream, params, true) }
    }

    fn mem_alloc(&self, bytes: usize) -> GpuResult<DevicePtr> {
        let mut p = 0u64;
        // SAFETY: writes one CUdeviceptr; zero bytes is rejected by the driver with a code.
        let code = unsafe { (self.sys.cuMemAlloc_v2)(&mut p, bytes) };
        self.check("cuMemAlloc", code).map(|_| DevicePtr(p))
    }

    unsafe fn mem_free(&self, ptr: DevicePtr) -> GpuResult<()> {
        // SAFETY: allocation from cuMemAlloc freed once (contract).
        let code = unsafe { (self.sys.cuMemFree_v2)(ptr.0) };
        self.check("cuMemFree", code)
    }

    fn host_alloc_mapped(&self, bytes: usize) -> GpuResult<*mut u8> {
        let mut p: Ptr = std::ptr::null_mut();
        // SAFETY: writes one host pointer.
        let code = unsafe { (self.sys.cuMemHostAlloc)(&mut p, bytes, MEMHOSTALLOC_PORTABLE | MEMHOSTALLOC_DEVICEMAP) };
        self.check("cuMemHostAlloc", code).map(|_| p.cast())
    }

    unsafe fn host_free(&self, ptr: *mut u8) -> GpuResult<()> {
        // SAFETY: allocation from cuMemHostAlloc freed once (contract).
        let code = unsafe { (self.sys.cuMemFreeHost)(ptr.cast()) };
        self.check("cuMemFreeHost", code)
    }

    unsafe fn host_device_pointer(&self, host: *mut u8) -> GpuResult<DevicePtr> {
        let mut d = 0u64;
        // SAFETY: `host` is mapped pinned memory (contract); flags must be 0.
        let code = unsafe { (self.sys.cuMemHostGetDevicePointer_v2)(&mut d, host.cast(), 0) };
        self.check("cuMemHostGetDevicePointer", code).map(|_| DevicePtr(d))
    }

    unsafe fn copy_htod_async(&self, dst: DevicePtr, src: *const u8, bytes: usize, s: RawStream) -> GpuResult<()> {
        // SAFETY: ranges valid per the contract.
        let code = unsafe { (self.sys.cuMemcpyHtoDAsync_v2)(dst.0, src.cast(), bytes, s.0) };
        self.check("cuMemcpyHtoDAsync", code)
    }

    unsafe fn copy_dtoh_async(&self, dst: *mut u8, src: DevicePtr, bytes: usize, s: RawStream) -> GpuResult<()> {
        // SAFETY: ranges valid per the contract.
        let code = unsafe { (self.sys.cuMemcpyDtoHAsync_v2)(dst.cast(), src.0, bytes, s.0) };
        self.check("cuMemcpyDtoHAsync", code)
    }

    unsafe fn copy_dtod_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, s: RawStream) -> GpuResult<()> {
        // SAFETY: ranges valid per the contract.
        let code = unsafe { (self.sys.cuMemcpyDtoDAsync_v2)(dst.0, src.0, bytes, s.0) };
        self.check("cuMemcpyDtoDAsync", code)
    }

    unsafe fn memset_d8_async(&self, dst: DevicePtr, value: u8, bytes: usize, s: RawStream) -> GpuResult<()> {
        // SAFETY: range valid per the contract.
        let code = unsafe { (self.sys.cuMemsetD8Async)(dst.0, value, bytes, s.0) };
        self.check("cuMemsetD8Async", code)
    }

    fn stream_create(&self) -> GpuResult<RawStream> {
        let mut s: Ptr = std::ptr::null_mut();
        // SAFETY: writes one CUstream in the current context.
        let code = unsafe { (self.sys.cuStreamCreate)(&mut s, STREAM_NON_BLOCKING) };
        self.check("cuStreamCreate", code).map(|_| RawStream(s))
    }

    unsafe fn stream_destroy(&self, s: RawStream) -> GpuResult<()> {
        // SAFETY: live stream destroyed once (contract).
        let code = unsafe { (self.sys.cuStreamDestroy_v2)(s.0) };
        self.check("cuStreamDestroy", code)
    }

    unsafe fn stream_synchronize(&self, s: RawStream) -> GpuResult<()> {
        // SAFETY: live stream (contract).
        let code = unsafe { (self.sys.cuStreamSynchronize)(s.0) };
        self.check("cuStreamSynchronize", code)
    }

    unsafe fn stream_wait_event(&self, s: RawStream, e: RawEvent) -> GpuResult<()> {
        // SAFETY: live handles (contract); flags must be 0.
        let code = unsafe { (self.sys.cuStreamWaitEvent)(s.0, e.0, 0) };
        self.check("cuStreamWaitEvent", code)
    }

    fn event_create(&self) -> GpuResult<RawEvent> {
        let mut e: Ptr = std::ptr::null_mut();
        // SAFETY: writes one CUevent in the current context.
        let code = unsafe { (self.sys.cuEventCreate)(&mut e, EVENT_DEFAULT) };
        self.check("cuEventCreate", code).map(|_| RawEvent(e))
    }

    unsafe fn event_destroy(&self, e: RawEvent) -> GpuResult<()> {
        // SAFETY: live event destroyed once (contract).
        let code = unsafe { (self.sys.cuEventDestroy_v2)(e.0) };
        self.check("cuEventDestroy", code)
    }

    unsafe fn event_record(&self, e: RawEvent, s: RawStream) -> GpuResult<()> {
        // SAFETY: live handles (contract).
        let code = unsafe { (self.sys.cuEventRecord)(e.0, s.0) };
        self.check("cuEventRecord", code)
    }

    unsafe fn event_synchronize(&self, e: RawEvent) -> GpuResult<()> {
        // SAFETY: live event (contract).
        let code = unsafe { (self.sys.cuEventSynchronize)(e.0) };
        self.check("cuEventSynchronize", code)
    }

    unsafe fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> GpuResult<f32> {
        let mut ms = 0f32;
        // SAFETY: live, recorded events (contract).
        let code = unsafe { (self.sys.cuEventElapsedTime)(&mut ms, start.0, end.0) };
        self.check("cuEventElapsedTime", code).map(|_| ms)
    }

    fn has_graphs(&self) -> bool {
        self.graphs.is_some()
    }

    unsafe fn capture_begin(&self, s: RawStream) -> GpuResult<()> {
        let g = self
            .graphs
            .ok_or_else(|| GpuError::other("cuStreamBeginCapture", "the driver has no graphs"))?;
        // SAFETY: a live stream that is not capturing (contract).
        let code = unsafe { (g.begin)(s.0, STREAM_CAPTURE_MODE_RELAXED) };
        self.check("cuStreamBeginCapture", code)
    }

    unsafe fn capture_end(&self, s: RawStream) -> GpuResult<RawGraphExec> {
        let g = self
            .graphs
            .ok_or_else(|| GpuError::other("cuStreamEndCapture", "the driver has no graphs"))?;
        let mut graph: Ptr = std::ptr::null_mut();
        // SAFETY: a live, capturing stream (contract); writes the graph handle, null where the
        // capture broke.
        let code = unsafe { (g.end)(s.0, &mut graph) };
        self.check("cuStreamEndCapture", code)?;
        let mut exec: Ptr = std::ptr::null_mut();
        // SAFETY: `graph` is the live graph the capture made; the exec handle is written.
        let code = unsafe { (g.instantiate)(&mut exec, graph, 0) };
        // SAFETY: the graph itself is no longer needed once instantiated (or not).
        unsafe { (g.destroy)(graph) };
        self.check("cuGraphInstantiateWithFlags", code)
            .map(|_| RawGraphExec(exec))
    }

    unsafe fn graph_launch(&self, exec: RawGraphExec, s: RawStream) -> GpuResult<()> {
        let g = self
            .graphs
            .ok_or_else(|| GpuError::other("cuGraphLaunch", "the driver has no graphs"))?;
        // SAFETY: live handles; the caller keeps what the captured work touches valid.
        let code = unsafe { (g.launch)(exec.0, s.0) };
        self.check("cuGraphLaunch", code)
    }

    unsafe fn graph_destroy(&self, exec: RawGraphExec) -> GpuResult<()> {
        let g = self
            .graphs
            .ok_or_else(|| GpuError::other("cuGraphExecDestroy", "the driver has no graphs"))?;
        // SAFETY: a live exec, destroyed once, with no launch of it still queued (contract).
        let code = unsafe { (g.exec_destroy)(exec.0) };
        self.check("cuGraphExecDestroy", code)
    }
}
