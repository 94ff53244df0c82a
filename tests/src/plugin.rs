//! Finding and loading tandem's plugin into the real ggml.

use llama_cpp_sys_2 as sys;
use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// The plugin's file name as cargo builds it (the install step renames it to
/// `libggml-tandem.so`).
pub const PLUGIN_FILE: &str = "libggml_tandem.so";

/// The plugin to load: `$TANDEM_PLUGIN` if set, else the cdylib cargo built beside this test
/// binary (the tests crate depends on tandem-capi so it is always built with the tests).
pub fn plugin_path() -> Result<PathBuf, String> {
    // Every test that loads the plugin asks for it first: the place to quiet ggml's loader.
    crate::logs::quiet();
    if let Ok(p) = std::env::var("TANDEM_PLUGIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("TANDEM_PLUGIN={} is not a file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir = exe.parent().ok_or("test binary has no folder")?;
    for cand in [
        dir.join(PLUGIN_FILE),
        dir.join("deps").join(PLUGIN_FILE),
        dir.join("..").join(PLUGIN_FILE),
    ] {
        if cand.is_file() {
            return Ok(cand);
        }
    }
    Err(format!(
        "{PLUGIN_FILE} not found beside {} (build tandem-capi first)",
        exe.display()
    ))
}

/// Loads the plugin with `ggml_backend_load` (before libllama initialises, so ggml's own
/// backends are loaded explicitly too) and returns the TANDEM_HOST device.
pub fn load_tandem_host(plugin: &std::path::Path) -> Result<sys::ggml_backend_dev_t, String> {
    let p = CString::new(plugin.to_str().ok_or("non-UTF-8 plugin path")?).map_err(|e| e.to_string())?;
    // SAFETY: ggml's registry calls with valid NUL-terminated strings; the returned handles are
    // owned by ggml's global registry for the life of the process.
    unsafe {
        let reg = sys::ggml_backend_load(p.as_ptr());
        if reg.is_null() {
            return Err(format!("ggml_backend_load({}) returned NULL", plugin.display()));
        }
        let name = CStr::from_ptr(sys::ggml_backend_reg_name(reg))
            .to_string_lossy()
            .into_owned();
        if name != "TANDEM" {
            return Err(format!("plugin registered as {name:?}, expected \"TANDEM\""));
        }
        sys::ggml_backend_load_all();
        let dev = sys::ggml_backend_dev_by_name(c"TANDEM_HOST".as_ptr());
        if dev.is_null() {
            return Err(
                "the plugin loaded but offers no TANDEM_HOST device (with a GPU present it needs TANDEM_HOST_DEVICE=1)"
                    .into(),
            );
        }
        Ok(dev)
    }
}
