//! Run-time compilers: NVRTC (NVIDIA) and hiprtc (AMD). Their C APIs are the same calls under two
//! prefixes, so one table type holds either, filled by name at load time.

use super::api::{CompileError, KernelCompiler, RuntimeKind};
use super::loader::{self, open_first, LibReport, SymbolLoader};
use libloading::Library;
use std::ffi::{c_char, c_void, CString};
use std::path::PathBuf;

type Prog = *mut c_void;
type CreateFn = unsafe extern "C" fn(
    *mut Prog,
    *const c_char,
    *const c_char,
    i32,
    *const *const c_char,
    *const *const c_char,
) -> i32;
type CompileFn = unsafe extern "C" fn(Prog, i32, *const *const c_char) -> i32;
type SizeFn = unsafe extern "C" fn(Prog, *mut usize) -> i32;
type BytesFn = unsafe extern "C" fn(Prog, *mut c_char) -> i32;
type DestroyFn = unsafe extern "C" fn(*mut Prog) -> i32;
type VersionFn = unsafe extern "C" fn(*mut i32, *mut i32) -> i32;
type ErrorStringFn = unsafe extern "C" fn(i32) -> *const c_char;

/// One compiler's symbols (`nvrtc*` or `hiprtc*`).
struct RtcSys {
    version: VersionFn,
    create: CreateFn,
    compile: CompileFn,
    log_size: SizeFn,
    log: BytesFn,
    /// Binary output: `nvrtcGetCUBIN*` (real `sm_XX` targets) or `hiprtcGetCode*`.
    code_size: SizeFn,
    code: BytesFn,
    /// NVRTC only: PTX output, for virtual `compute_XX` targets.
    ptx: Option<(SizeFn, BytesFn)>,
    destroy: DestroyFn,
    error_string: ErrorStringFn,
    _lib: Library,
}

impl RtcSys {
    fn load(lib: Library, kind: RuntimeKind) -> Result<RtcSys, String> {
        let mut l = SymbolLoader::new(&lib);
        // Symbol names: (NVRTC, hiprtc).
        let name = |pair: (&'static str, &'static str)| match kind {
            RuntimeKind::Cuda => pair.0,
            RuntimeKind::Hip => pair.1,
        };
        // SAFETY: every type alias above is the C declaration shared by NVRTC and hiprtc for the
        // symbol named; the pointers are stored beside the library, which outlives them.
        let sys = unsafe {
            let version = l.required::<VersionFn>(name(("nvrtcVersion", "hiprtcVersion")));
            let create = l.required::<CreateFn>(name(("nvrtcCreateProgram", "hiprtcCreateProgram")));
            let compile = l.required::<CompileFn>(name(("nvrtcCompileProgram", "hiprtcCompileProgram")));
            let log_size = l.required::<SizeFn>(name(("nvrtcGetProgramLogSize", "hiprtcGetProgramLogSize")));
            let log = l.required::<BytesFn>(name(("nvrtcGetProgramLog", "hiprtcGetProgramLog")));
            let code_size = l.required::<SizeFn>(name(("nvrtcGetCUBINSize", "hiprtcGetCodeSize")));
            let code = l.required::<BytesFn>(name(("nvrtcGetCUBIN", "hiprtcGetCode")));
            let destroy = l.required::<DestroyFn>(name(("nvrtcDestroyProgram", "hiprtcDestroyProgram")));
            let error_string = l.required::<ErrorStringFn>(name(("nvrtcGetErrorString", "hiprtcGetErrorString")));
            let ptx = match kind {
                RuntimeKind::Cuda => l
                    .optional::<SizeFn>("nvrtcGetPTXSize")
                    .zip(l.optional::<BytesFn>("nvrtcGetPTX")),
                RuntimeKind::Hip => None,
            };
            (
                version,
                create,
                compile,
                log_size,
                log,
                code_size,
                code,
                destroy,
                error_string,
                ptx,
            )
        };
        l.finish()?;
        let (version, create, compile, log_size, log, code_size, code, destroy, error_string, ptx) = sys;
        let some = "checked by finish";
        Ok(RtcSys {
            version: version.expect(some),
            create: create.expect(some),
            compile: compile.expect(some),
            log_size: log_size.expect(some),
            log: log.expect(some),
            code_size: code_size.expect(some),
            code: code.expect(some),
            ptx,
            destroy: destroy.expect(some),
            error_string: error_string.expect(some),
            _lib: lib,
        })
    }
}

/// NVRTC or hiprtc behind [`KernelCompiler`].
pub struct RtcCompiler {
    kind: RuntimeKind,
    sys: RtcSys,
    version: (i32, i32),
    /// The library file, for `tandem info`.
    pub path: String,
}

/// Where NVRTC is looked for: `TANDEM_NVRTC` (a file), the sonames, CUDA folders, and the
/// `nvidia-cuda-nvrtc` PyPI wheels (CUDA 13: `nvidia/cu13/lib`, CUDA 12: `nvidia/cuda_nvrtc/lib`).
pub fn nvrtc_candidates() -> Vec<String> {
    let names = ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"];
    let mut out: Vec<String> = std::env::var("TANDEM_NVRTC")
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    let mut dirs = Vec::new();
    if let Some(p) = std::env::var_os("CUDA_PATH") {
        dirs.push(PathBuf::from(p).join("lib64"));
    }
    dirs.push("/usr/local/cuda/lib64".into());
    out.extend(loader::candidates(&names, &dirs));
    for site in loader::python_package_dirs() {
        out.push(
            site.join("nvidia/cu13/lib/libnvrtc.so.13")
                .to_string_lossy()
                .into_owned(),
        );
        out.push(
            site.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
                .to_string_lossy()
                .into_owned(),
        );
    }
    out
}

/// Where hiprtc is looked for: `TANDEM_HIPRTC`, `libhiprtc` (ROCm 6+), then `libamdhip64`
/// itself, which carries the hiprtc symbols in ROCm 5.
pub fn hiprtc_candidates() -> Vec<String> {
    let names = ["libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5"];
    let mut out: Vec<String> = std::env::var("TANDEM_HIPRTC")
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    out.extend(loader::candidates(&names, &super::hip::rocm_dirs()));
    out.extend(super::hip::hip_candidates());
    out
}

impl RtcCompiler {
    /// Loads NVRTC (`RuntimeKind::Cuda`) or hiprtc (`RuntimeKind::Hip`).
    pub fn load(kind: RuntimeKind) -> (Option<RtcCompiler>, LibReport) {
        let (what, cands) = match kind {
            RuntimeKind::Cuda => ("NVRTC", nvrtc_candidates()),
            RuntimeKind::Hip => ("hiprtc", hiprtc_candidates()),
        };
        // A library can open yet lack the symbols (a libamdhip64 of ROCm 6+ has no hiprtc):
        // keep looking through the remaining candidates then.
        let mut report = LibReport {
            what,
            ..Default::default()
        };
        let mut rest = cands.as_slice();
        while !rest.is_empty() {
            let (lib, rep) = open_first(what, rest);
            let consumed = rep.tried.len();
            report.tried.extend(rep.tried.iter().cloned());
            let Some(lib) = lib else {
                report.error = report.error.take().or(rep.error);
                break;
            };
            let path = rep.found.clone().unwrap_or_default();
            match RtcSys::load(lib, kind) {
                Ok(sys) => {
                    let mut c = RtcCompiler {
                        kind,
                        sys,
                        version: (0, 0),
                        path: path.clone(),
                    };
                    let (mut major, mut minor) = (0, 0);
                    // SAFETY: writes two ints.
                    if unsafe { (c.sys.version)(&mut major, &mut minor) } == 0 {
                        c.version = (major, minor);
                    }
                    report.found = Some(path);
                    report.error = None;
                    return (Some(c), report);
                }
                Err(e) => report.error = Some(format!("{path}: {e}")),
            }
            rest = &rest[consumed.min(rest.len())..];
        }
        (None, report)
    }

    pub fn kind(&self) -> RuntimeKind {
        self.kind
    }

    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    fn error_text(&self, code: i32) -> String {
        // SAFETY: returns a static string for any code.
        let s = unsafe { loader::c_str((self.sys.error_string)(code)) };
        if s.is_empty() {
            format!("error {code}")
        } else {
            s
        }
    }

    /// The program's log (warnings or errors); empty if none.
    fn program_log(&self, prog: Prog) -> String {
        let mut n = 0usize;
        // SAFETY: live program; writes one size.
        if unsafe { (self.sys.log_size)(prog, &mut n) } != 0 || n == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; n];
        // SAFETY: the buffer holds the `n` bytes the compiler said it needs.
        if unsafe { (self.sys.log)(prog, buf.as_mut_ptr().cast()) } != 0 {
            return String::new();
        }
        String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string()
    }
}

/// Owns a program handle so every exit path destroys it.
struct Program<'a> {
    c: &'a RtcCompiler,
    prog: Prog,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: created by `create`, destroyed exactly once here.
        unsafe { (self.c.sys.destroy)(&mut self.prog) };
    }
}

/// The NVRTC target for a device of compile target `arch`: Hopper (`sm_90`) gets its
/// architecture-specific `sm_90a`, which the warpgroup mma of `mma.hip` needs (the code then
/// loads on sm_90 devices only, which is what it is compiled for), where the compiler knows it
/// (NVRTC 12.0 and newer).
pub fn nvrtc_target(arch: &str, version: (i32, i32)) -> String {
    if arch == "sm_90" && version.0 >= 12 {
        "sm_90a".into()
    } else {
        arch.into()
    }
}

fn cstring(program: &str, what: &str, s: &str) -> Result<CString, CompileError> {
    CString::new(s).map_err(|_| CompileError {
        program: program.to_string(),
        message: format!("{what} contains a NUL byte"),
        log: String::new(),
    })
}

impl KernelCompiler for RtcCompiler {
    fn id(&self) -> String {
        let name = match self.kind {
            RuntimeKind::Cuda => "nvrtc",
            RuntimeKind::Hip => "hiprtc",
        };
        format!("{name} {}.{}", self.version.0, self.version.1)
    }

    fn arch_options(&self, arch: &str) -> Vec<String> {
        match self.kind {
            RuntimeKind::Cuda => vec![
                format!("--gpu-architecture={}", nvrtc_target(arch, self.version)),
                "-std=c++17".into(),
            ],
            RuntimeKind::Hip => vec![format!("--offload-arch={arch}"), "-std=c++17".into(), "-O3".into()],
        }
    }

    fn compile(
        &self,
        name: &str,
        source: &str,
        headers: &[(&str, &str)],
        options: &[String],
    ) -> Result<Vec<u8>, CompileError> {
        let fail = |message: String, log: String| CompileError {
            program: name.to_string(),
            message,
            log,
        };
        let c_name = cstring(name, "program name", name)?;
        let c_src = cstring(name, "source", source)?;
        let c_hdr_names = headers
            .iter()
            .map(|(n, _)| cstring(name, "header name", n))
            .collect::<Result<Vec<_>, _>>()?;
        let c_hdrs = headers
            .iter()
            .map(|(_, s)| cstring(name, "header", s))
            .collect::<Result<Vec<_>, _>>()?;
        let c_opts = options
            .iter()
            .map(|o| cstring(name, "option", o))
            .collect::<Result<Vec<_>, _>>()?;
        let hdr_ptrs: Vec<*const c_char> = c_hdrs.iter().map(|s| s.as_ptr()).collect();
        let hdr_name_ptrs: Vec<*const c_char> = c_hdr_names.iter().map(|s| s.as_ptr()).collect();
        let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|s| s.as_ptr()).collect();

        let mut prog: Prog = std::ptr::null_mut();
        // SAFETY: all strings are NUL-terminated and outlive the call; the arrays have
        // `headers.len()` entries each; the compiler copies what it keeps.
        let code = unsafe {
            (self.sys.create)(
                &mut prog,
                c_src.as_ptr(),
                c_name.as_ptr(),
                headers.len() as i32,
                hdr_ptrs.as_ptr(),
                hdr_name_ptrs.as_ptr(),
            )
        };
        if code != 0 {
            return Err(fail(
                format!("create program: {}", self.error_text(code)),
                String::new(),
            ));
        }
        let prog = Program { c: self, prog };
        // SAFETY: live program; `opt_ptrs` holds `len` NUL-terminated options.
        let code = unsafe { (self.sys.compile)(prog.prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
        if code != 0 {
            return Err(fail(self.error_text(code), self.program_log(prog.prog)));
        }
        let virtual_arch = options.iter().any(|o| o.contains("=compute_"));
        let (size_fn, bytes_fn) = match (virtual_arch, self.sys.ptx) {
            (true, Some(ptx)) => ptx,
            _ => (self.sys.code_size, self.sys.code),
        };
        let mut n = 0usize;
        // SAFETY: live, compiled program; writes one size.
        let code = unsafe { size_fn(prog.prog, &mut n) };
        if code != 0 || n == 0 {
            return Err(fail(
                format!("no code object: {}", self.error_text(code)),
                self.program_log(prog.prog),
            ));
        }
        let mut out = vec![0u8; n];
        // SAFETY: the buffer holds the `n` bytes the compiler reported.
        let code = unsafe { bytes_fn(prog.prog, out.as_mut_ptr().cast()) };
        if code != 0 {
            return Err(fail(
                format!("get code: {}", self.error_text(code)),
                self.program_log(prog.prog),
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::nvrtc_target;

    #[test]
    fn hopper_gets_its_feature_target_where_nvrtc_knows_it() {
        assert_eq!(nvrtc_target("sm_90", (13, 0)), "sm_90a");
        assert_eq!(nvrtc_target("sm_90", (12, 0)), "sm_90a");
        assert_eq!(nvrtc_target("sm_90", (11, 8)), "sm_90");
        assert_eq!(nvrtc_target("sm_89", (13, 0)), "sm_89");
        assert_eq!(nvrtc_target("sm_100", (13, 0)), "sm_100");
    }
}
