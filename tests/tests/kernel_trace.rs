//! scripts/kernel_trace.py (the per-token kernel timelines of scripts/kernel_trace.c's traces)
//! on made-up traces whose figures are known.

use std::path::PathBuf;
use std::process::{Command, Output};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/kernel_trace.py")
}

/// A folder of this test's own (the tests run in parallel and each removes its folder).
fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tandem-kernel-trace-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(test: &str, trace: &str, extra: &[&str]) -> (Output, PathBuf) {
    let dir = temp_dir(test);
    let path = dir.join(format!("trace-{}.txt", trace.len()));
    std::fs::write(&path, trace).unwrap();
    let out = Command::new("python3")
        .arg(script())
        .arg(&path)
        .args(extra)
        .output()
        .expect("python3 runs scripts/kernel_trace.py");
    (out, dir)
}

/// Ten tandem steps (3 kernels: 3 + 20 + 4 µs with 1 µs gaps, 100 µs apart) and ten steps of
/// another backend (2 kernels, one of them overlapping the next by 1 µs), in nanoseconds.
fn made_up() -> String {
    let mut s = String::new();
    let mut t: u64 = 1_000_000;
    for _ in 0..10 {
        for (name, us) in [("tandem_get_rows", 3), ("tandem_gemv_q4_0_u1", 20), ("tandem_rope", 4)] {
            s += &format!("{t} {} 7 {name}\n", t + us * 1000);
            t += us * 1000 + 1000;
        }
        t += 100_000;
    }
    for _ in 0..10 {
        s += &format!("{t} {} 9 k_get_rows\n", t + 3000);
        s += &format!("{} {} 9 mul_mat_vec_q<2>\n", t + 2000, t + 27_000);
        t += 80_000;
    }
    s
}

#[test]
fn steps_walls_and_busy_time_come_out_as_made() {
    let json = temp_dir("steps").join("summary.json");
    let (out, dir) = run("steps", &made_up(), &["--positions", "--json", json.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary = std::fs::read_to_string(&json).unwrap();
    assert!(summary.contains("\"busy_us\": 27.0"), "{summary}");
    // tandem: 27 µs of kernels in a span of 29 (two 1 µs gaps), a step every 130 µs.
    assert!(
        text.contains("tandem: 10 steps of 3 kernels: wall 130.0 us, span 29.0, busy 27.0 (20.8 % of wall)"),
        "{text}"
    );
    assert!(text.contains("20.00  tandem_gemv_q4_0_u1"), "{text}");
    // The other backend's second kernel starts 1 µs before the first ends: busy is their union.
    assert!(
        text.contains("other: 10 steps of 2 kernels: wall 80.0 us, span 27.0, busy 27.0"),
        "{text}"
    );
    assert!(text.contains("-1.00  mul_mat_vec_q<2>"), "{text}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_empty_trace_fails() {
    let (out, dir) = run("empty", "", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no kernel records"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_missing_trace_and_a_gap_not_above_zero_are_named() {
    let out = Command::new("python3")
        .arg(script())
        .arg("/nonexistent/trace.txt")
        .output()
        .expect("python3 runs scripts/kernel_trace.py");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the trace /nonexistent/trace.txt"));
    let (out, dir) = run("gap", &made_up(), &["--gap", "-5"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--gap -5.0"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(dir).ok();
}
