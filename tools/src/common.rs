//! What every subcommand shares: choosing the device, parsing op filters, turning panics into
//! failure text.

use regex::Regex;
use std::sync::{Arc, Mutex};
use tandem_backend::{devices, Config, Device, HostDevice};
use tandem_graph::Op;

/// The device named `name` (case-insensitive; `host` names the host device), or the best one:
/// the first GPU, else the host device.
pub fn pick_device(name: Option<&str>) -> Result<Arc<Device>, String> {
    let all = devices();
    match name {
        None => all
            .into_iter()
            .next()
            .ok_or_else(|| "no device available (TANDEM_HOST_DEVICE=0 and no GPU found)".into()),
        Some(n) => {
            if let Some(d) = all.iter().find(|d| d.name().eq_ignore_ascii_case(n)) {
                return Ok(d.clone());
            }
            if n.eq_ignore_ascii_case("host") || n.eq_ignore_ascii_case("TANDEM_HOST") {
                // The host device is hidden when a GPU is present; asking for it by name still
                // gets it.
                return Ok(Arc::new(Device::Host(HostDevice::new(Config::get().threads))));
            }
            let mut names: Vec<&str> = all.iter().map(|d| d.name()).collect();
            if !names.contains(&"TANDEM_HOST") {
                names.push("TANDEM_HOST (or host)");
            }
            Err(format!("no device named '{n}' (available: {})", names.join(", ")))
        }
    }
}

/// `MUL_MAT,rope` → the ops, or the name that is not an op with the names that are.
pub fn parse_ops(list: Option<&str>) -> Result<Vec<Op>, String> {
    let Some(list) = list else { return Ok(Vec::new()) };
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            Op::from_name(s).ok_or_else(|| {
                let names: Vec<&str> = Op::ALL.iter().map(|o| o.name()).collect();
                format!("unknown op '{s}' (valid: {})", names.join(", "))
            })
        })
        .collect()
}

pub fn parse_regex(p: Option<&str>) -> Result<Option<Regex>, String> {
    p.map(|p| Regex::new(p).map_err(|e| format!("bad pattern: {e}")))
        .transpose()
}

/// Whether a case of `op` named `name` passes the `-o`/`-p` filters.
pub fn selected(op: Op, name: &str, ops: &[Op], pattern: &Option<Regex>) -> bool {
    (ops.is_empty() || ops.contains(&op)) && pattern.as_ref().is_none_or(|p| p.is_match(name))
}

static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Exit status when stdout is closed under us (`tandem info | head -1`): 141, what a shell
/// reports for a process that SIGPIPE ends (128 + 13), as `cat` or `seq` end there. Nothing is
/// printed: the reader has gone on purpose.
pub const BROKEN_PIPE_EXIT: i32 = 141;

/// The text of a panic's payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// Whether a panic is `println!` failing because stdout's reader has gone (EPIPE).
fn is_broken_pipe(text: &str) -> bool {
    text.starts_with("failed printing to stdout") && (text.contains("Broken pipe") || text.contains("os error 32"))
}

/// Ends the process quietly with [`BROKEN_PIPE_EXIT`] when the panic is a broken stdout.
fn exit_on_broken_pipe(info: &std::panic::PanicHookInfo<'_>) {
    if is_broken_pipe(&panic_text(info.payload())) {
        std::process::exit(BROKEN_PIPE_EXIT);
    }
}

/// Keeps the default panic report for real panics, but ends the process quietly when stdout
/// breaks (Rust ignores SIGPIPE, so `println!` panics instead of the process ending).
pub fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        exit_on_broken_pipe(info);
        default(info);
    }));
}

/// Replaces the panic hook with one that records the message and location instead of printing,
/// so a panicking case becomes one FAIL line with the message.
pub fn capture_panics() {
    std::panic::set_hook(Box::new(|info| {
        exit_on_broken_pipe(info);
        let msg = panic_text(info.payload());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let mut last = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner());
        last.get_or_insert(format!("{msg}{at}"));
    }));
}

/// The message of the first panic since the last call.
pub fn take_panic() -> String {
    LAST_PANIC
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_else(|| "panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters() {
        let ops = parse_ops(Some("mul_mat, ROPE")).unwrap();
        assert_eq!(ops, vec![Op::MulMat, Op::Rope]);
        let bad = parse_ops(Some("MUL_MATT")).unwrap_err();
        assert!(
            bad.contains("'MUL_MATT'") && bad.contains("MUL_MAT_ID") && bad.contains("SOFT_MAX"),
            "{bad}"
        );
        let p = parse_regex(Some("type=q4_K")).unwrap();
        assert!(selected(Op::MulMat, "MUL_MAT(type=q4_K,m=1)", &ops, &p));
        assert!(!selected(Op::MulMat, "MUL_MAT(type=q4_0,m=1)", &ops, &p));
        assert!(!selected(Op::Add, "ADD(type=q4_K)", &ops, &p));
        assert!(selected(Op::Add, "ADD", &[], &None));
    }

    #[test]
    fn only_a_broken_stdout_counts_as_a_broken_pipe() {
        assert!(is_broken_pipe("failed printing to stdout: Broken pipe (os error 32)"));
        assert!(!is_broken_pipe(
            "failed printing to stdout: No space left on device (os error 28)"
        ));
        assert!(!is_broken_pipe("index out of bounds: Broken pipe"));
    }
}
