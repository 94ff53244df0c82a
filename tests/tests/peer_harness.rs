//! The backend peer harness (`backend_matmul_peer`, run on a GPU machine by scripts/gpu-peer.sh)
//! on what every machine has: TANDEM_HOST against ggml's CPU backend, one small case; and its
//! failures exit non-zero with the reason.

use std::process::{Command, Output};
use tandem_tests::plugin::plugin_path;

fn harness(args: &[&str]) -> Output {
    let plugin = plugin_path().expect("the plugin beside the tests");
    Command::new(env!("CARGO_BIN_EXE_backend_matmul_peer"))
        .arg("--load")
        .arg(plugin)
        .args(args)
        // TANDEM_HOST is offered beside a GPU only when asked for.
        .env("TANDEM_HOST_DEVICE", "1")
        .output()
        .expect("backend_matmul_peer runs")
}

#[test]
fn peer_harness_times_and_checks_both_devices() {
    let out = harness(&[
        "--devices",
        "TANDEM_HOST,CPU",
        "--filter",
        "MUL_MAT q4_0 m=1024 k=4096 n=1",
        "--runs",
        "2",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains(r#""devices":["TANDEM_HOST","CPU"]"#), "{stdout}");
    assert_eq!(stdout.matches(r#""case":"#).count(), 1, "{stdout}");
    assert!(
        stdout.contains(r#""case":"MUL_MAT q4_0 m=1024 k=4096 n=1""#),
        "{stdout}"
    );
    assert!(stdout.contains(r#""copies":64"#), "{stdout}");
    // Both devices' results, each compared with ggml's CPU: tandem's integer dots give ggml's sums.
    for dev in ["TANDEM_HOST", "CPU"] {
        let at = stdout
            .find(&format!(r#""device":"{dev}""#))
            .unwrap_or_else(|| panic!("{dev}: {stdout}"));
        let rest = &stdout[at..];
        let nmse: f64 = rest[rest.find(r#""nmse":"#).unwrap() + 7..]
            .split(['}', ','])
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|e| panic!("{dev}: {e}: {stdout}"));
        assert!(nmse < 1e-10, "{dev}: nmse {nmse}");
    }
}

#[test]
fn peer_harness_fails_loudly() {
    let out = harness(&[
        "--devices",
        "NO_SUCH_DEVICE,CPU",
        "--filter",
        "q4_0 m=1024",
        "--runs",
        "1",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no ggml device named NO_SUCH_DEVICE"), "{stderr}");

    let out = harness(&["--devices", "TANDEM_HOST,CPU", "--filter", "no such case"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no case matches --filter no such case"), "{stderr}");
}
