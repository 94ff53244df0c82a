//! AMD: HIP (`libamdhip64`) loaded at run time. `HipSys` is the raw symbol table; `HipRuntime`
//! gives the same calls as the CUDA driver through the shared `GpuRuntime` trait.

use super::api::*;
use super::loader::{self, open_first, symbol_table, LibReport};
use std::ffi::{c_char, c_void, CString};
use std::path::PathBuf;

type Ptr = *mut c_void;

symbol_table! {
    /// The HIP calls tandem uses; HIP's module API mirrors the CUDA driver's one for one.
    pub struct HipSys {
        hipInit: fn(u32) -> i32;
        hipDriverGetVersion: fn(*mut i32) -> i32;
        hipGetDeviceCount: fn(*mut i32) -> i32;
        hipDeviceGet: fn(*mut i32, i32) -> i32;
        hipDeviceGetName: fn(*mut c_char, i32, i32) -> i32;
        hipDeviceGetAttribute: fn(*mut i32, i32, i32) -> i32;
        hipDeviceTotalMem: fn(*mut usize, i32) -> i32;
        hipSetDevice: fn(i32) -> i32;
        hipDeviceSynchronize: fn() -> i32;
        hipMemGetInfo: fn(*mut usize, *mut usize) -> i32;
        hipModuleLoadData: fn(*mut Ptr, *const c_void) -> i32;
        hipModuleUnload: fn(Ptr) -> i32;
        hipModuleGetFunction: fn(*mut Ptr, Ptr, *const c_char) -> i32;
        hipModuleLaunchKernel: fn(Ptr, u32, u32, u32, u32, u32, u32, u32, Ptr, *mut *mut c_void, *mut *mut c_void) -> i32;
        hipMalloc: fn(*mut Ptr, usize) -> i32;
        hipFree: fn(Ptr) -> i32;
        hipHostMalloc: fn(*mut Ptr, usize, u32) -> i32;
        hipHostFree: fn(Ptr) -> i32;
        hipHostGetDevicePointer: fn(*mut Ptr, Ptr, u32) -> i32;
        hipMemcpyHtoDAsync: fn(Ptr, *const c_void, usize, Ptr) -> i32;
        hipMemcpyDtoHAsync: fn(Ptr, Ptr, usize, Ptr) -> i32;
        hipMemcpyDtoDAsync: fn(Ptr, Ptr, usize, Ptr) -> i32;
        hipMemsetD8Async: fn(Ptr, u8, usize, Ptr) -> i32;
        hipStreamCreateWithFlags: fn(*mut Ptr, u32) -> i32;
        hipStreamDestroy: fn(Ptr) -> i32;
        hipStreamSynchronize: fn(Ptr) -> i32;
        hipStreamWaitEvent: fn(Ptr, Ptr, u32) -> i32;
        hipEventCreateWithFlags: fn(*mut Ptr, u32) -> i32;
        hipEventRecord: fn(Ptr, Ptr) -> i32;
        hipEventSynchronize: fn(Ptr) -> i32;
        hipEventElapsedTime: fn(*mut f32, Ptr, Ptr) -> i32;
        hipEventDestroy: fn(Ptr) -> i32;
        hipGetErrorName: fn(i32) -> *const c_char;
        hipGetErrorString: fn(i32) -> *const c_char;
    }
}

// hipDeviceAttribute_t values of the CUDA-compatible block (hip_runtime_api.h of ROCm 5.2).
const ATTR_CAN_MAP_HOST_MEMORY: i32 = 3;
const ATTR_INTEGRATED: i32 = 16;
const ATTR_MULTIPROCESSOR_COUNT: i32 = 63;
const HOST_MALLOC_PORTABLE: u32 = 0x1;
const HOST_MALLOC_MAPPED: u32 = 0x2;
const STREAM_NON_BLOCKING: u32 = 0x1;
const EVENT_DEFAULT: u32 = 0x0;
/// Bytes handed to `hipGetDeviceProperties*`: the ROCm 5 struct is 792 bytes, ROCm 6's about
/// 1.5 KiB; the margin guards against later growth.
const PROPS_BYTES: usize = 16 * 1024;

/// Folders the ROCm libraries live in besides the system search path.
pub fn rocm_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(p) = std::env::var_os("ROCM_PATH") {
        dirs.push(PathBuf::from(p).join("lib"));
    }
    dirs.push("/opt/rocm/lib".into());
    dirs
}

pub fn hip_candidates() -> Vec<String> {
    loader::candidates(
        &[
            "libamdhip64.so",
            "libamdhip64.so.7",
            "libamdhip64.so.6",
            "libamdhip64.so.5",
        ],
        &rocm_dirs(),
    )
}

type GetProps = unsafe extern "C" fn(*mut c_void, i32) -> i32;

pub struct HipRuntime {
    sys: HipSys,
    /// `hipGetDevicePropertiesR0600` (ROCm 6+) or `hipGetDeviceProperties`, only for the arch name.
    get_props: Option<GetProps>,
    init: GpuResult<()>,
}

impl HipRuntime {
    pub fn load() -> (Option<HipRuntime>, LibReport) {
        let (lib, mut report) = open_first("HIP runtime", &hip_candidates());
        let Some(lib) = lib else { return (None, report) };
        let l = loader::SymbolLoader::new(&lib);
        // SAFETY: both symbols are `hipError_t f(hipDeviceProp_t*, int)`; the struct is written
        // into a buffer larger than either layout.
        let get_props = unsafe {
            l.optional::<GetProps>("hipGetDevicePropertiesR0600")
                .or_else(|| l.optional::<GetProps>("hipGetDeviceProperties"))
        };
        let sys = match HipSys::load(lib) {
            Ok(s) => s,
            Err(e) => {
                report.error = Some(e);
                return (None, report);
            }
        };
        let mut rt = HipRuntime {
            sys,
            get_props,
            init: Ok(()),
        };
        // SAFETY: flags must be 0; without a GPU (no /dev/kfd) it returns an error code.
        let code = unsafe { (rt.sys.hipInit)(0) };
        rt.init = rt.check("hipInit", code);
        (Some(rt), report)
    }

    fn check(&self, call: &'static str, code: i32) -> GpuResult<()> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: both return pointers to static strings for any code.
        let (name, text) = unsafe {
            (
                loader::c_str((self.sys.hipGetErrorName)(code)),
                loader::c_str((self.sys.hipGetErrorString)(code)),
            )
        };
        let message = if text.is_empty() || text == name {
            name
        } else {
            format!("{name}: {text}")
        };
        Err(GpuError { call, code, message })
    }

    fn device(&self, ordinal: usize) -> GpuResult<i32> {
        self.init.clone()?;
        let mut dev = 0;
        // SAFETY: writes one hipDevice_t; a bad ordinal is an error code.
        let code = unsafe { (self.sys.hipDeviceGet)(&mut dev, ordinal as i32) };
        self.check("hipDeviceGet", code).map(|_| dev)
    }

    fn attribute(&self, dev: i32, attr: i32) -> GpuResult<i32> {
        let mut v = 0;
        // SAFETY: writes one int.
        let code = unsafe { (self.sys.hipDeviceGetAttribute)(&mut v, attr, dev) };
        self.check("hipDeviceGetAttribute", code).map(|_| v)
    }

    /// The `gfxNNNN` name. No attribute carries it and the properties struct changed layout in
    /// ROCm 6, so the struct is read into a large zeroed buffer and searched for the one
    /// `gfx<hex>` string in it (`gcnArchName`, e.g. `gfx1100:sramecc-:xnack-`).
    fn arch_name(&self, ordinal: usize) -> GpuResult<String> {
        let get = self
            .get_props
            .ok_or_else(|| GpuError::other("hipGetDeviceProperties", "symbol missing"))?;
        let mut buf = vec![0u64; PROPS_BYTES / 8];
        // SAFETY: the buffer is 8-byte aligned and larger than any hipDeviceProp_t layout.
        let code = unsafe { get(buf.as_mut_ptr().cast(), ordinal as i32) };
        self.check("hipGetDeviceProperties", code)?;
        // SAFETY: reinterpreting the initialised u64 buffer as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), PROPS_BYTES) };
        find_gfx_name(bytes).ok_or_else(|| GpuError::other("hipGetDeviceProperties", "no gfx arch name in properties"))
    }
}

/// The first `gfx` + hex digits that starts a C string in `bytes`, without feature suffixes.
pub(crate) fn find_gfx_name(bytes: &[u8]) -> Option<String> {
    (0..bytes.len().saturating_sub(4)).find_map(|i| {
        if (i > 0 && bytes[i - 1] != 0) || !bytes[i..].starts_with(b"gfx") {
            return None;
        }
        let digits = bytes[i + 3..].iter().take_while(|b| b.is_ascii_hexdigit()).count();
        let end = bytes.get(i + 3 + digits).copied();
        (digits >= 3 && matches!(end, Some(0) | Some(b':')))
            .then(|| String::from_utf8_lossy(&bytes[i..i + 3 + digits]).into_owned())
    })
}

/// Wave size HIP compiles for by default: 64 on GCN/CDNA (gfx9 and older), 32 on RDNA (gfx10+).
pub(crate) fn default_wave_size(arch: &str) -> u32 {
    let digits = arch.trim_start_matches("gfx");
    if digits.len() >= 4 {
        32
    } else {
        64
    }
}

impl GpuRuntime for HipRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Hip
    }

    fn driver_version(&self) -> GpuResult<i32> {
        let mut v = 0;
        // SAFETY: writes one int.
        let code = unsafe { (self.sys.hipDriverGetVersion)(&mut v) };
        self.check("hipDriverGetVersion", code).map(|_| v)
    }

    fn device_count(&self) -> GpuResult<usize> {
        self.init.clone()?;
        let mut n = 0;
        // SAFETY: writes one int.
        let code = unsafe { (self.sys.hipGetDeviceCount)(&mut n) };
        self.check("hipGetDeviceCount", code).map(|_| n.max(0) as usize)
    }

    fn device_info(&self, ordinal: usize) -> GpuResult<DeviceInfo> {
        let dev = self.device(ordinal)?;
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds `len` bytes; HIP NUL-terminates within them.
        let code = unsafe { (self.sys.hipDeviceGetName)(name.as_mut_ptr(), name.len() as i32, dev) };
        self.check("hipDeviceGetName", code)?;
        let mut total = 0usize;
        // SAFETY: writes one size_t.
        let code = unsafe { (self.sys.hipDeviceTotalMem)(&mut total, dev) };
        self.check("hipDeviceTotalMem", code)?;
        let arch = self.arch_name(ordinal)?;
        Ok(DeviceInfo {
            ordinal,
            // SAFETY: zero-initialised and NUL-terminated.
            name: unsafe { loader::c_str(name.as_ptr()) },
            warp_size: default_wave_size(&arch),
            arch,
            compute_units: self.attribute(dev, ATTR_MULTIPROCESSOR_COUNT)?.max(0) as u32,
            total_memory: total as u64,
            can_map_host_memory: self.attribute(dev, ATTR_CAN_MAP_HOST_MEMORY)? != 0,
            integrated: self.attribute(dev, ATTR_INTEGRATED)? != 0,
        })
    }

    fn context_retain(&self, ordinal: usize) -> GpuResult<RawContext> {
        self.device(ordinal)?;
        Ok(RawContext(std::ptr::null_mut()))
    }

    unsafe fn context_release(&self, _ordinal: usize, _ctx: RawContext) -> GpuResult<()> {
        Ok(())
    }

    unsafe fn context_bind(&self, ordinal: usize, _ctx: RawContext) -> GpuResult<()> {
        // SAFETY: plain call; a bad ordinal is an error code.
        let code = unsafe { (self.sys.hipSetDevice)(ordinal as i32) };
        self.check("hipSetDevice", code)
    }

    fn context_synchronize(&self) -> GpuResult<()> {
        // SAFETY: plain call on the current device.
        let code = unsafe { (self.sys.hipDeviceSynchronize)() };
        self.check("hipDeviceSynchronize", code)
    }

    fn mem_info(&self) -> GpuResult<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two size_t values.
        let code = unsafe { (self.sys.hipMemGetInfo)(&mut free, &mut total) };
        self.check("hipMemGetInfo", code).map(|_| (free as u64, total as u64))
    }

    unsafe fn module_load(&self, image: &[u8]) -> GpuResult<RawModule> {
        let mut m: Ptr = std::ptr::null_mut();
        // SAFETY: complete code object per the contract; HIP copies it.
        let code = unsafe { (self.sys.hipModuleLoadData)(&mut m, image.as_ptr().cast()) };
        self.check("hipModuleLoadData", code).map(|_| RawModule(m))
    }

    unsafe fn module_unload(&self, module: RawModule) -> GpuResult<()> {
        // SAFETY: live module unloaded once (contract).
        let code = unsafe { (self.sys.hipModuleUnload)(module.0) };
        self.check("hipModuleUnload", code)
    }

    unsafe fn module_function(&self, module: RawModule, name: &str) -> GpuResult<RawFunction> {
        let cname = CString::new(name).map_err(|_| GpuError::other("hipModuleGetFunction", "name has a NUL"))?;
        let mut f: Ptr = std::ptr::null_mut();
        // SAFETY: live module; NUL-terminated name.
        let code = unsafe { (self.sys.hipModuleGetFunction)(&mut f, module.0, cname.as_ptr()) };
        self.check("hipModuleGetFunction", code).map(|_| RawFunction(f))
    }

    unsafe fn launch(
        &self,
        function: RawFunction,
        cfg: LaunchConfig,
        stream: RawStream,
        params: &mut [*mut c_void],
    ) -> GpuResult<()> {
        let [gx, gy, gz] = cfg.grid;
        let [bx, by, bz] = cfg.block;
        // SAFETY: the caller guarantees `params` matches the kernel's parameter list.
        let code = unsafe {
            (self.sys.hipModuleLaunchKernel)(
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
        self.check("hipModuleLaunchKernel", code)
    }

    fn mem_alloc(&self, bytes: usize) -> GpuResult<DevicePtr> {
        let mut p: Ptr = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        let code = unsafe { (self.sys.hipMalloc)(&mut p, bytes) };
        self.check("hipMalloc", code).map(|_| DevicePtr(p as u64))
    }

    unsafe fn mem_free(&self, ptr: DevicePtr) -> GpuResult<()> {
        // SAFETY: allocation from hipMalloc freed once (contract).
        let code = unsafe { (self.sys.hipFree)(ptr.0 as Ptr) };
        self.check("hipFree", code)
    }

    fn host_alloc_mapped(&self, bytes: usize) -> GpuResult<*mut u8> {
        let mut p: Ptr = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        let code = unsafe { (self.sys.hipHostMalloc)(&mut p, bytes, HOST_MALLOC_PORTABLE | HOST_MALLOC_MAPPED) };
        self.check("hipHostMalloc", code).map(|_| p.cast())
    }

    unsafe fn host_free(&self, ptr: *mut u8) -> GpuResult<()> {
        // SAFETY: allocation from hipHostMalloc freed once (contract).
        let code = unsafe { (self.sys.hipHostFree)(ptr.cast()) };
        self.check("hipHostFree", code)
    }

    unsafe fn host_device_pointer(&self, host: *mut u8) -> GpuResult<DevicePtr> {
        let mut d: Ptr = std::ptr::null_mut();
        // SAFETY: mapped pinned memory (contract); flags must be 0.
        let code = unsafe { (self.sys.hipHostGetDevicePointer)(&mut d, host.cast(), 0) };
        self.check("hipHostGetDevicePointer", code).map(|_| DevicePtr(d as u64))
    }

    unsafe fn copy_htod_async(&self, dst: DevicePtr, src: *const u8, bytes: usize, s: RawStream) -> GpuResult<()> {
        // SAFETY: ranges valid per the contract.
        let code = unsafe { (self.sys.hipMemcpyHtoDAsync)(dst.0 as Ptr, src.cast(), bytes, s.0) };
        self.check("hipMemcpyHtoDAsync", code)
    }

    unsafe fn copy_dtoh_async(&self, dst: *mut u8, src: DevicePtr, bytes: usize, s: RawStream) -> GpuResult<()> {
        // SAFETY: ranges valid per the contract.
        let code = unsafe { (self.sys.hipMemcpyDtoHAsync)(dst.cast(), src.0 as Ptr, bytes, s.0) };
        self.check("hipMemcpyDtoHAsync", code)
    }

    unsafe fn copy_dtod_async(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, s: RawStream) -> GpuResult<()> {
        // SAFETY: ranges valid per the contract.
        let code = unsafe { (self.sys.hipMemcpyDtoDAsync)(dst.0 as Ptr, src.0 as Ptr, bytes, s.0) };
        self.check("hipMemcpyDtoDAsync", code)
    }

    unsafe fn memset_d8_async(&self, dst: DevicePtr, value: u8, bytes: usize, s: RawStream) -> GpuResult<()> {
        // SAFETY: range valid per the contract.
        let code = unsafe { (self.sys.hipMemsetD8Async)(dst.0 as Ptr, value, bytes, s.0) };
        self.check("hipMemsetD8Async", code)
    }

    fn stream_create(&self) -> GpuResult<RawStream> {
        let mut s: Ptr = std::ptr::null_mut();
        // SAFETY: writes one stream handle on the current device.
        let code = unsafe { (self.sys.hipStreamCreateWithFlags)(&mut s, STREAM_NON_BLOCKING) };
        self.check("hipStreamCreateWithFlags", code).map(|_| RawStream(s))
    }

    unsafe fn stream_destroy(&self, s: RawStream) -> GpuResult<()> {
        // SAFETY: live stream destroyed once (contract).
        let code = unsafe { (self.sys.hipStreamDestroy)(s.0) };
        self.check("hipStreamDestroy", code)
    }

    unsafe fn stream_synchronize(&self, s: RawStream) -> GpuResult<()> {
        // SAFETY: live stream (contract).
        let code = unsafe { (self.sys.hipStreamSynchronize)(s.0) };
        self.check("hipStreamSynchronize", code)
    }

    unsafe fn stream_wait_event(&self, s: RawStream, e: RawEvent) -> GpuResult<()> {
        // SAFETY: live handles (contract); flags must be 0.
        let code = unsafe { (self.sys.hipStreamWaitEvent)(s.0, e.0, 0) };
        self.check("hipStreamWaitEvent", code)
    }

    fn event_create(&self) -> GpuResult<RawEvent> {
        let mut e: Ptr = std::ptr::null_mut();
        // SAFETY: writes one event handle.
        let code = unsafe { (self.sys.hipEventCreateWithFlags)(&mut e, EVENT_DEFAULT) };
        self.check("hipEventCreateWithFlags", code).map(|_| RawEvent(e))
    }

    unsafe fn event_destroy(&self, e: RawEvent) -> GpuResult<()> {
        // SAFETY: live event destroyed once (contract).
        let code = unsafe { (self.sys.hipEventDestroy)(e.0) };
        self.check("hipEventDestroy", code)
    }

    unsafe fn event_record(&self, e: RawEvent, s: RawStream) -> GpuResult<()> {
        // SAFETY: live handles (contract).
        let code = unsafe { (self.sys.hipEventRecord)(e.0, s.0) };
        self.check("hipEventRecord", code)
    }

    unsafe fn event_synchronize(&self, e: RawEvent) -> GpuResult<()> {
        // SAFETY: live event (contract).
        let code = unsafe { (self.sys.hipEventSynchronize)(e.0) };
        self.check("hipEventSynchronize", code)
    }

    unsafe fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> GpuResult<f32> {
        let mut ms = 0f32;
        // SAFETY: live, recorded events (contract).
        let code = unsafe { (self.sys.hipEventElapsedTime)(&mut ms, start.0, end.0) };
        self.check("hipEventElapsedTime", code).map(|_| ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_name_is_found_in_either_props_layout() {
        let mut b = vec![0u8; 2048];
        b[..22].copy_from_slice(b"AMD Radeon RX 7900 XTX");
        b[396..396 + 23].copy_from_slice(b"gfx1100:sramecc-:xnack-");
        assert_eq!(find_gfx_name(&b).as_deref(), Some("gfx1100"));
        let mut c = vec![0u8; 2048];
        c[700..707].copy_from_slice(b"gfx90a:");
        assert_eq!(find_gfx_name(&c).as_deref(), Some("gfx90a"));
        // Not at a string start, or no terminator: no match.
        let mut d = vec![0u8; 64];
        d[10..20].copy_from_slice(b"xgfx1100\0\0");
        assert_eq!(find_gfx_name(&d), None);
        assert_eq!(default_wave_size("gfx1100"), 32);
        assert_eq!(default_wave_size("gfx90a"), 64);
        assert_eq!(default_wave_size("gfx942"), 64);
    }
}
