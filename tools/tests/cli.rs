//! The `tandem` binary against bad input: each case's exit status and message. The runs use
//! `TANDEM_RUNTIME=none`, so the host device is the only one whatever GPUs the machine has.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;

/// Exit status of a run whose stdout reader went away (`tools/src/common.rs`).
const BROKEN_PIPE_EXIT: i32 = 141;
/// Exit status of a refused command line or argument (clap's and `tandem`'s own).
const USAGE_EXIT: i32 = 2;

fn tandem(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tandem"));
    c.args(args).env("TANDEM_RUNTIME", "none");
    for var in [
        "TANDEM_THREADS",
        "TANDEM_HOST_DEVICE",
        "TANDEM_DISABLE_DISPATCH",
        "TANDEM_STATS",
    ] {
        c.env_remove(var);
    }
    c
}

/// Held while a test spawns: a fork in another test's thread would carry a copy of a pipe's
/// read end into its child until that child's exec, and keep a "closed" stdout open.
static SPAWN: Mutex<()> = Mutex::new(());

fn spawn(c: &mut Command) -> Child {
    let _only_us = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    c.spawn().expect("spawning tandem")
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = tandem(args);
    c.envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawn(&mut c).wait_with_output().expect("running tandem")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `args` with a stdout whose reader is already gone, as `| head` leaves it once it has
/// its lines: every write fails with EPIPE. A socket pair with one end dropped before the spawn
/// makes that certain (with a pipe, the child could fill the pipe's buffer before the test
/// closed its end).
fn run_with_closed_stdout(args: &[&str]) -> Output {
    let (ours, theirs) = UnixStream::pair().expect("socket pair");
    drop(ours);
    let mut c = tandem(args);
    c.stdout(Stdio::from(OwnedFd::from(theirs))).stderr(Stdio::piped());
    spawn(&mut c).wait_with_output().expect("running tandem")
}

#[test]
fn a_closed_stdout_ends_quietly() {
    for args in [
        &["info"][..],
        &["kernels"],
        &["test-ops", "-v", "-o", "ADD"],
        &["support", "-o", "MUL_MAT"],
    ] {
        let o = run_with_closed_stdout(args);
        assert_eq!(o.status.code(), Some(BROKEN_PIPE_EXIT), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn zero_reps_is_an_error() {
    let o = run(&["perf-ops", "--reps", "0"], &[]);
    assert_eq!(o.status.code(), Some(USAGE_EXIT));
    assert!(stderr(&o).contains("--reps"), "{}", stderr(&o));
}

#[test]
fn an_unknown_device_is_an_error_naming_the_devices() {
    for args in [
        &["kernels", "-d", "NOPE"][..],
        &["kernels", "--build", "-d", "NOPE"],
        &["test-ops", "-d", "NOPE"],
    ] {
        let o = run(args, &[]);
        assert_eq!(o.status.code(), Some(USAGE_EXIT), "{args:?}");
        let e = stderr(&o);
        assert!(e.contains("'NOPE'") && e.contains("TANDEM_HOST"), "{args:?}: {e}");
    }
}

#[test]
fn an_unknown_op_lists_the_op_names() {
    let o = run(&["test-ops", "-o", "NOT_AN_OP"], &[]);
    assert_eq!(o.status.code(), Some(USAGE_EXIT));
    let e = stderr(&o);
    assert!(
        e.contains("NOT_AN_OP") && e.contains("MUL_MAT") && e.contains("FLASH_ATTN_EXT"),
        "{e}"
    );
}

#[test]
fn a_bad_pattern_is_an_error() {
    let o = run(&["test-ops", "-p", "MUL_MAT("], &[]);
    assert_eq!(o.status.code(), Some(USAGE_EXIT));
    assert!(stderr(&o).contains("bad pattern"), "{}", stderr(&o));
}

/// Every bad `TANDEM_*` value is one warning line naming the variable, the value and what is
/// used instead, and the run goes on with that.
#[test]
fn bad_environment_values_warn_once_and_run_on() {
    for (var, value, says) in [
        ("TANDEM_THREADS", "abc", "using the default (0: one per core)"),
        ("TANDEM_THREADS", "100000", "using "),
        ("TANDEM_HOST_DEVICE", "maybe", "using the default"),
        ("TANDEM_STATS", "2", "using the default (off)"),
        ("TANDEM_GRAPHS", "nope", "using the default (on)"),
        ("TANDEM_F16_PREFILL", "banana", "using the default (auto"),
        ("TANDEM_DISABLE_DISPATCH", "zzz", "matches no registration"),
    ] {
        let o = run(&["info"], &[(var, value)]);
        assert_eq!(o.status.code(), Some(0), "{var}={value}: {}", stderr(&o));
        let e = stderr(&o);
        let warnings: Vec<&str> = e.lines().filter(|l| l.starts_with("tandem: warning:")).collect();
        assert_eq!(warnings.len(), 1, "{var}={value}: {e}");
        assert!(
            warnings[0].contains(var) && warnings[0].contains(value) && warnings[0].contains(says),
            "{var}={value}: {}",
            warnings[0]
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(var)),
            "{var} not shown by info"
        );
    }
}

/// A thread count far above the machine's is clamped: the harness still runs (100000 threads
/// aborted the process).
#[test]
fn a_huge_thread_count_runs_clamped() {
    let o = run(&["test-ops", "-o", "ADD", "-p", "ADD"], &[("TANDEM_THREADS", "100000")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("TANDEM_THREADS=100000 is above"), "{}", stderr(&o));
}

/// `info` shows each setting's source.
#[test]
fn info_shows_values_and_sources() {
    let o = run(&["info"], &[("TANDEM_STATS", "yes")]);
    let out = String::from_utf8_lossy(&o.stdout);
    let line = |var: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(var))
            .unwrap_or("")
            .to_string()
    };
    assert!(line("TANDEM_STATS").ends_with("on (env)"), "{}", line("TANDEM_STATS"));
    assert!(
        line("TANDEM_GRAPHS").ends_with("on (default)"),
        "{}",
        line("TANDEM_GRAPHS")
    );
    assert!(
        line("TANDEM_THREADS").ends_with("(default)"),
        "{}",
        line("TANDEM_THREADS")
    );
}
