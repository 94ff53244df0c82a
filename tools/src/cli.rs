//! Command-line interface of `tandem`.

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "tandem",
    version,
    about = "tandem: op tests, benchmarks and device information"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Runs every op case on a device and compares it with the scalar reference.
    TestOps {
        /// Device name (see `tandem info`); default: the best device.
        #[arg(short = 'd', long)]
        device: Option<String>,
        /// Only these ops, comma-separated (ggml names, e.g. MUL_MAT,ROPE).
        #[arg(short = 'o', long)]
        ops: Option<String>,
        /// Only cases whose name matches this regular expression.
        #[arg(short = 'p', long)]
        pattern: Option<String>,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Print every case, not only failures.
        #[arg(short = 'v', long)]
        verbose: bool,
    },
    /// Times model-sized op cases and compares them with the machine's read bandwidth.
    PerfOps {
        /// Device name (see `tandem info`); default: the best device.
        #[arg(short = 'd', long)]
        device: Option<String>,
        /// Only these ops, comma-separated (ggml names, e.g. MUL_MAT,GET_ROWS).
        #[arg(short = 'o', long)]
        ops: Option<String>,
        /// Only cases whose name matches this regular expression.
        #[arg(short = 'p', long)]
        pattern: Option<String>,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
        /// Timed runs per case (after warm-up); at least 1.
        #[arg(long, default_value_t = 20, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        reps: usize,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Writes a markdown table and an SVG chart from the JSON of `perf-ops --json` (and of
    /// `scripts/torch-peer.py`, when given).
    PerfReport {
        /// The perf-ops JSON.
        perf: std::path::PathBuf,
        /// The torch peer's JSON from the same device command.
        #[arg(long)]
        torch: Option<std::path::PathBuf>,
        /// Where the markdown goes (default: stdout).
        #[arg(long)]
        md: Option<std::path::PathBuf>,
        /// Where the SVG chart goes (default: none).
        #[arg(long)]
        svg: Option<std::path::PathBuf>,
    },
    /// Writes a markdown table and an SVG chart from the JSON of `backend_matmul_peer --json`
    /// (tandem's device against another ggml backend in one process; scripts/gpu-peer.sh).
    PeerReport {
        /// The peer harness's JSON.
        peer: std::path::PathBuf,
        /// Where the markdown goes (default: stdout).
        #[arg(long)]
        md: Option<std::path::PathBuf>,
        /// Where the SVG chart goes (default: none).
        #[arg(long)]
        svg: Option<std::path::PathBuf>,
    },
    /// Shows which op × type combinations the device claims.
    Support {
        /// Device name (see `tandem info`); default: the best device.
        #[arg(short = 'd', long)]
        device: Option<String>,
        /// Only these ops, comma-separated (ggml names).
        #[arg(short = 'o', long)]
        ops: Option<String>,
    },
    /// Measures the split node: one GEMV (MoE expert matmul) of Llama-3-8B's and Qwen3-30B-A3B's
    /// shapes whose weight lies in a GPU device's pinned host memory, computed by the CPU alone,
    /// the GPU alone, and both at fixed and at learnt shares.
    OffloadBench {
        /// GPU device name (see `tandem info`); default: the first GPU.
        #[arg(short = 'd', long)]
        device: Option<String>,
        /// Weight types, comma-separated (ggml names).
        #[arg(long, default_value = "f16,q8_0,q4_0,q4_K")]
        types: String,
        /// Columns of each MUL_MAT, tokens of each MUL_MAT_ID (1 to 8: the widths a node splits at).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..=8))]
        n: i64,
        /// Only cases whose name (e.g. llama3-8b.ffn_down.q4_K.n1) matches this regular expression.
        #[arg(long)]
        filter: Option<String>,
        /// Timed calls per share (after warm-up); at least 1.
        #[arg(long, default_value_t = 20, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        reps: usize,
        /// CPU worker threads of the device's pool (the split's CPU side); default: as configured
        /// (TANDEM_THREADS).
        #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        threads: Option<usize>,
        /// Fixed GPU shares to time, comma-separated, each in [0, 1].
        #[arg(long, default_value = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9")]
        sweep: String,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
        /// Where an SVG chart of the rates goes (default: none).
        #[arg(long)]
        svg: Option<std::path::PathBuf>,
    },
    /// Devices, CPU features, threads, registrations and the environment settings in effect.
    Info,
    /// Lists the kernel catalog; `--build` compiles (or loads from the cache) every family for
    /// every GPU device present.
    Kernels {
        /// Compile every family for the GPU devices (or load it from the disk cache) and print
        /// the time each took.
        #[arg(long)]
        build: bool,
        /// Only this device (default: every GPU device); must name a device `tandem info` lists.
        #[arg(short = 'd', long)]
        device: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every option and argument of every subcommand says what it is for.
    #[test]
    fn every_option_has_help() {
        let mut missing = Vec::new();
        let cli = Cli::command();
        for sub in cli.get_subcommands() {
            if sub.get_about().is_none() {
                missing.push(sub.get_name().to_string());
            }
            for arg in sub.get_arguments() {
                if arg.get_help().is_none() && !matches!(arg.get_id().as_str(), "help" | "version") {
                    missing.push(format!("{} {}", sub.get_name(), arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn zero_reps_is_refused() {
        let err = Cli::try_parse_from(["tandem", "perf-ops", "--reps", "0"]).unwrap_err();
        assert!(err.to_string().contains("--reps"), "{err}");
        assert!(Cli::try_parse_from(["tandem", "perf-ops", "--reps", "1"]).is_ok());
    }

    #[test]
    fn offload_bench_flags_are_bounded() {
        for (flag, bad) in [("--reps", "0"), ("--n", "0"), ("--n", "9"), ("--threads", "0")] {
            let err = Cli::try_parse_from(["tandem", "offload-bench", flag, bad]).unwrap_err();
            assert!(err.to_string().contains(flag), "{flag} {bad}: {err}");
        }
        let Command::OffloadBench { n, reps, threads, .. } =
            Cli::try_parse_from(["tandem", "offload-bench", "--n", "8"])
                .unwrap()
                .command
        else {
            panic!("not offload-bench");
        };
        assert_eq!((n, reps, threads), (8, 20, None));
    }
}
