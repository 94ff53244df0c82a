//! One log line per event, through the host's logger (`ggml_log_internal`, which honours the
//! callback a host installed with `ggml_log_set`) so tandem's lines land where ggml's do; stderr
//! when the host's logger cannot be resolved.

use crate::abi::{LogLevel, LOG_LEVEL_DEBUG, LOG_LEVEL_ERROR};
use crate::host::host;
use std::ffi::CString;

pub fn error(msg: &str) {
    emit(LOG_LEVEL_ERROR, msg);
}

pub fn debug(msg: &str) {
    emit(LOG_LEVEL_DEBUG, msg);
}

fn emit(level: LogLevel, msg: &str) {
    let line = format!("tandem: {}\n", msg.trim_end());
    if let Some(log) = host().ok().and_then(|h| h.log_internal) {
        // Interior NULs would cut the line short; replace them rather than drop the message.
        let text = CString::new(line.replace('\0', " ")).unwrap_or_default();
        // SAFETY: ggml_log_internal is printf-like; "%s" with one NUL-terminated string argument
        // matches its format, so no text of ours is ever interpreted as a format.
        unsafe { log(level, c"%s".as_ptr(), text.as_ptr()) };
    } else {
        eprint!("{line}");
    }
}
