//! Random ggml graphs through the plugin's C ABI on TANDEM_HOST, with sentinel bytes around
//! every tensor (see `tandem_tests::fuzz_graphs`).
//!
//! `fuzz_graphs --cases N --seed S`: cases use seeds S, S+1, …, S+N-1, so a failing case is
//! re-run alone with `--cases 1 --seed <its seed>`. Exits non-zero on any failure or no cases.

use std::process::ExitCode;
use std::time::Instant;
use tandem_tests::fuzz_graphs::Fuzzer;

fn main() -> ExitCode {
    let mut cases = 10_000u64;
    let mut seed = 1u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = |v: Option<String>| v.and_then(|v| v.parse::<u64>().ok());
        match a.as_str() {
            "--cases" => match value(args.next()) {
                Some(n) => cases = n,
                None => return usage("--cases needs a number"),
            },
            "--seed" => match value(args.next()) {
                Some(n) => seed = n,
                None => return usage("--seed needs a number"),
            },
            "-h" | "--help" => {
                println!("usage: fuzz_graphs [--cases N (10000)] [--seed S (1)]");
                return ExitCode::SUCCESS;
            }
            other => return usage(&format!("unknown option {other}")),
        }
    }
    let fuzzer = match Fuzzer::new() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fuzz_graphs: {e}");
            return ExitCode::FAILURE;
        }
    };
    let t0 = Instant::now();
    println!("fuzz_graphs: {cases} graphs from seed {seed}");
    let s = fuzzer.run(seed, cases, |s| {
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "{} graphs, {:.0}/s, {} computed, {} refused, {} failed",
            s.cases,
            s.cases as f64 / secs,
            s.computed,
            s.refusals.values().sum::<u64>(),
            s.failed
        );
    });
    let secs = t0.elapsed().as_secs_f64();
    println!("refusals by reason:");
    for (reason, n) in &s.refusals {
        println!("  {n:>9}  {reason}");
    }
    for f in &s.failures {
        println!("FAILED {f}");
    }
    println!(
        "{} passed, {} failed ({} computed, {} refused; panics {}, overruns {}) in {secs:.1} s, {:.0} graphs/s",
        s.cases - s.failed,
        s.failed,
        s.computed,
        s.refusals.values().sum::<u64>(),
        s.panics,
        s.overruns,
        s.cases as f64 / secs.max(1e-9)
    );
    if s.failed > 0 || s.cases == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("fuzz_graphs: {msg}\nusage: fuzz_graphs [--cases N] [--seed S]");
    ExitCode::from(2)
}
