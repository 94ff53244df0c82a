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
            let names: Vec<&str> = all.iter().map(|d| d.name()).collect();
            Err(format!("no device named '{n}' (available: {})", names.join(", ")))
        }
    }
}

/// `MUL_MAT,rope` → the ops, or the name that is not an op.
pub fn parse_ops(list: Option<&str>) -> Result<Vec<Op>, String> {
    let Some(list) = list else { return Ok(Vec::new()) };
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| Op::from_name(s).ok_or_else(|| format!("unknown op '{s}'")))
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

/// Replaces the panic hook with one that records the message and location instead of printing,
/// so a panicking case becomes one FAIL line with the message.
pub fn capture_panics() {
    std::panic::set_hook(Box::new(|info| {
        let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
            s.to_string()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "panic".to_string()
        };
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
        assert!(parse_ops(Some("MUL_MATT")).is_err());
        let p = parse_regex(Some("type=q4_K")).unwrap();
        assert!(selected(Op::MulMat, "MUL_MAT(type=q4_K,m=1)", &ops, &p));
        assert!(!selected(Op::MulMat, "MUL_MAT(type=q4_0,m=1)", &ops, &p));
        assert!(!selected(Op::Add, "ADD(type=q4_K)", &ops, &p));
        assert!(selected(Op::Add, "ADD", &[], &None));
    }
}
