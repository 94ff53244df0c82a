//! The panic barrier at every entry point: no unwind ever crosses into C. A caught panic becomes
//! the entry's failure value plus one log line.
//!
//! `TANDEM_TEST_PANIC=<entry>` makes the named entry panic on purpose, so tests can prove the
//! barrier works through the real loader (entry names are the ABI function names, e.g.
//! `graph_compute`, `supports_op`, `alloc_buffer`).

use crate::log;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

/// Runs `f`; on a panic logs one line naming `entry` and returns `fallback`.
pub fn guard<R>(entry: &'static str, fallback: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(|| {
        inject_panic(entry);
        f()
    })) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            log::error(&format!("{entry}: internal error caught at the ABI boundary: {what}"));
            fallback
        }
    }
}

fn inject_panic(entry: &str) {
    static TARGET: OnceLock<Option<String>> = OnceLock::new();
    let target = TARGET.get_or_init(|| std::env::var("TANDEM_TEST_PANIC").ok().filter(|s| !s.is_empty()));
    if let Some(t) = target {
        if t == entry {
            panic!("injected by TANDEM_TEST_PANIC={t}");
        }
    }
}
