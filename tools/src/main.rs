//! `tandem`: the op harness (`test-ops`), benchmarks (`perf-ops`, `offload-bench`), the support
//! table and device information.

mod cases;
mod cli;
mod common;
mod compare;
mod data;
mod info;
mod kernels;
mod offload_bench;
mod peer_report;
mod perf;
mod progress;
mod report;
mod run;
mod support;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    match dispatch(Cli::parse().command) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("tandem: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs one subcommand; `Ok(false)` means it ran and found failures (or ran nothing).
fn dispatch(cmd: Command) -> Result<bool, String> {
    match cmd {
        Command::TestOps {
            device,
            ops,
            pattern,
            seed,
            verbose,
        } => {
            let opts = run::TestOptions {
                ops: common::parse_ops(ops.as_deref())?,
                pattern: common::parse_regex(pattern.as_deref())?,
                seed,
                verbose,
            };
            let dev = common::pick_device(device.as_deref())?;
            Ok(run::test_ops(&dev, &opts))
        }
        Command::PerfOps {
            device,
            ops,
            pattern,
            json,
            reps,
            seed,
        } => {
            let opts = perf::PerfOptions {
                ops: common::parse_ops(ops.as_deref())?,
                pattern: common::parse_regex(pattern.as_deref())?,
                json,
                reps,
                seed,
            };
            let dev = common::pick_device(device.as_deref())?;
            Ok(perf::perf_ops(&dev, &opts))
        }
        Command::PerfReport { perf, torch, md, svg } => {
            report::perf_report(&perf, torch.as_deref(), md.as_deref(), svg.as_deref())
        }
        Command::PeerReport { peer, md, svg } => peer_report::peer_report(&peer, md.as_deref(), svg.as_deref()),
        Command::Support { device, ops } => {
            let dev = common::pick_device(device.as_deref())?;
            Ok(support::support(&dev, &common::parse_ops(ops.as_deref())?))
        }
        Command::Info => {
            info::info();
            Ok(true)
        }
        Command::Kernels { build, device } => kernels::kernels(build, device.as_deref()),
        Command::OffloadBench {
            device,
            types,
            n,
            filter,
            reps,
            threads,
            sweep,
            json,
            svg,
        } => {
            let opts = offload_bench::BenchOptions {
                types: offload_bench::parse_types(&types)?,
                n,
                filter: offload_bench::parse_filter(filter.as_deref())?,
                reps,
                threads,
                sweep: offload_bench::parse_shares(&sweep)?,
                json,
                svg,
            };
            offload_bench::offload_bench(device.as_deref(), &opts)
        }
    }
}
