//! ggml-base functions resolved from the host process at init. The plugin has no link-time
//! dependency on ggml: whichever libggml-base the host loaded is the one it talks to, so a
//! plugin built once works with every host built from the same ggml version.

use crate::abi::{Backend, Buffer, BufferIface, BufferType, Cgraph, GgmlTensor, LogLevel};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// The host functions tandem calls.
pub struct HostApi {
    pub buffer_init: unsafe extern "C" fn(*mut BufferType, BufferIface, *mut c_void, usize) -> *mut Buffer,
    pub buffer_is_host: unsafe extern "C" fn(*mut Buffer) -> bool,
    pub buft_is_host: unsafe extern "C" fn(*mut BufferType) -> bool,
    pub synchronize: unsafe extern "C" fn(*mut Backend),
    pub nbytes: unsafe extern "C" fn(*const GgmlTensor) -> usize,
    pub op_name: unsafe extern "C" fn(c_int) -> *const c_char,
    pub type_name: unsafe extern "C" fn(c_int) -> *const c_char,
    pub unary_op_name: unsafe extern "C" fn(c_int) -> *const c_char,
    pub glu_op_name: unsafe extern "C" fn(c_int) -> *const c_char,
    pub graph_n_nodes: unsafe extern "C" fn(*mut Cgraph) -> c_int,
    pub graph_node: unsafe extern "C" fn(*mut Cgraph, c_int) -> *mut GgmlTensor,
    /// `ggml_log_internal(level, fmt, ...)`: routes through the host's log callback. Optional:
    /// without it tandem logs to stderr.
    pub log_internal: Option<unsafe extern "C" fn(LogLevel, *const c_char, ...)>,
}

/// The resolved host functions, or why they could not be resolved. Resolved once.
pub fn host() -> Result<&'static HostApi, &'static str> {
    static HOST: OnceLock<Result<HostApi, String>> = OnceLock::new();
    HOST.get_or_init(resolve).as_ref().map_err(|e| e.as_str())
}

/// Where ggml-base is looked for when the global namespace does not have it (a host that
/// loaded ggml with `RTLD_LOCAL`).
const GGML_BASE_SONAMES: [&str; 2] = ["libggml-base.so", "libggml-base.so.0"];

fn lookup(name: &str) -> Option<*mut c_void> {
    let cname = CString::new(name).ok()?;
    // SAFETY: dlsym with RTLD_DEFAULT searches the global scope; `cname` is NUL-terminated.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, cname.as_ptr()) };
    if !p.is_null() {
        return Some(p);
    }
    for soname in GGML_BASE_SONAMES {
        let cso = CString::new(soname).ok()?;
        // SAFETY: RTLD_NOLOAD only returns a handle if the library is already loaded; it never
        // loads a second copy. The handle is released right after the lookup (the library stays
        // loaded because the host holds it).
        unsafe {
            let h = libc::dlopen(cso.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
            if h.is_null() {
                continue;
            }
            let p = libc::dlsym(h, cname.as_ptr());
            libc::dlclose(h);
            if !p.is_null() {
                return Some(p);
            }
        }
    }
    None
}

/// The ggml functions tandem cannot work without.
const REQUIRED: [&str; 11] = [
    "ggml_backend_buffer_init",
    "ggml_backend_buffer_is_host",
    "ggml_backend_buft_is_host",
    "ggml_backend_synchronize",
    "ggml_nbytes",
    "ggml_op_name",
    "ggml_type_name",
    "ggml_unary_op_name",
    "ggml_glu_op_name",
    "ggml_graph_n_nodes",
    "ggml_graph_node",
];

/// The function `name` as type `F`.
///
/// # Safety
/// `name` resolves (checked by the caller) and `F` is the function pointer type of its C
/// declaration.
unsafe fn sym<F: Copy>(name: &str) -> F {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    let p = lookup(name).unwrap_or(std::ptr::null_mut());
    assert!(!p.is_null(), "{name} vanished between two lookups");
    // SAFETY: a non-null code address of the C function whose type `F` mirrors.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

fn resolve() -> Result<HostApi, String> {
    let missing: Vec<&str> = REQUIRED.iter().copied().filter(|n| lookup(n).is_none()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "the host process does not export ggml-base's {} (a plugin needs a shared build of ggml)",
            missing.join(", ")
        ));
    }
    // SAFETY: every name in REQUIRED resolves (checked above); each field's type is the
    // function's C declaration in ggml 0.26.0 (ggml.h, ggml-backend.h, ggml-backend-impl.h,
    // ggml-impl.h for ggml_log_internal).
    unsafe {
        Ok(HostApi {
            buffer_init: sym("ggml_backend_buffer_init"),
            buffer_is_host: sym("ggml_backend_buffer_is_host"),
            buft_is_host: sym("ggml_backend_buft_is_host"),
            synchronize: sym("ggml_backend_synchronize"),
            nbytes: sym("ggml_nbytes"),
            op_name: sym("ggml_op_name"),
            type_name: sym("ggml_type_name"),
            unary_op_name: sym("ggml_unary_op_name"),
            glu_op_name: sym("ggml_glu_op_name"),
            graph_n_nodes: sym("ggml_graph_n_nodes"),
            graph_node: sym("ggml_graph_node"),
            log_internal: lookup("ggml_log_internal").map(|_| sym("ggml_log_internal")),
        })
    }
}

/// A host name string (`ggml_op_name` etc.) as Rust text; "?" for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives the call.
pub unsafe fn host_str(p: *const c_char) -> String {
    if p.is_null() {
        return "?".into();
    }
    // SAFETY: non-null and NUL-terminated per the contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl HostApi {
    /// ggml's name for op number `op`.
    pub fn op_name_of(&self, op: c_int) -> String {
        // SAFETY: ggml_op_name indexes a static table; callers pass numbers below GGML_OP_COUNT
        // (tandem's own ops, or an op read from a live ggml tensor).
        unsafe { host_str((self.op_name)(op)) }
    }

    /// ggml's name for type number `ty`.
    pub fn type_name_of(&self, ty: c_int) -> String {
        // SAFETY: ggml_type_name returns "NONE" for numbers past GGML_TYPE_COUNT.
        unsafe { host_str((self.type_name)(ty)) }
    }
}
