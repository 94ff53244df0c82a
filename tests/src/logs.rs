//! ggml's and libllama's log lines in the tests: only warnings and errors pass, unless
//! `TANDEM_TEST_VERBOSE=1`. Loading a model logs every tensor and every backend; over the
//! suite that was about 7,000 lines around cargo test's results.

use llama_cpp_sys_2 as sys;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Once;

/// Whether `TANDEM_TEST_VERBOSE` asks for every log line (1/true/on/yes).
pub fn verbose() -> bool {
    std::env::var("TANDEM_TEST_VERBOSE")
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes"))
}

/// Whether a line of this level is shown by default. CONT continues the line before it, which
/// the callback cannot see, so continuations are dropped with the lines they continue (and
/// with warnings' too: ggml continues few of those).
fn shown(level: sys::ggml_log_level) -> bool {
    level == sys::GGML_LOG_LEVEL_WARN || level == sys::GGML_LOG_LEVEL_ERROR
}

/// Passes warnings and errors on to stderr; drops the rest.
unsafe extern "C" fn warnings_only(level: sys::ggml_log_level, text: *const c_char, _user: *mut c_void) {
    if shown(level) && !text.is_null() {
        // SAFETY: ggml passes a NUL-terminated line that lives for the call.
        eprint!("{}", unsafe { CStr::from_ptr(text) }.to_string_lossy());
    }
}

/// Installs the filter once per process (libllama's logger, which sets ggml's too), before
/// the first backend is loaded; with `TANDEM_TEST_VERBOSE=1` it leaves the default logger.
pub fn quiet() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if !verbose() {
            // SAFETY: the callback is a plain function that lives for the whole process and
            // ignores its user pointer.
            unsafe { sys::llama_log_set(Some(warnings_only), std::ptr::null_mut()) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_warnings_and_errors_are_shown() {
        assert!(shown(sys::GGML_LOG_LEVEL_WARN) && shown(sys::GGML_LOG_LEVEL_ERROR));
        for level in [
            sys::GGML_LOG_LEVEL_INFO,
            sys::GGML_LOG_LEVEL_DEBUG,
            sys::GGML_LOG_LEVEL_CONT,
        ] {
            assert!(!shown(level));
        }
    }
}
