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
        #[arg(short = 'd', long)]
        device: Option<String>,
        #[arg(short = 'o', long)]
        ops: Option<String>,
        #[arg(short = 'p', long)]
        pattern: Option<String>,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
        /// Timed runs per case (after warm-up).
        #[arg(long, default_value_t = 20)]
        reps: usize,
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
        #[arg(short = 'd', long)]
        device: Option<String>,
        #[arg(short = 'o', long)]
        ops: Option<String>,
    },
    /// Devices, CPU features, threads, registrations and the environment settings in effect.
    Info,
    /// Lists the kernel catalog; `--build` compiles (or loads from the cache) every family for
    /// every GPU device present.
    Kernels {
        #[arg(long)]
        build: bool,
        /// Only this device (default: every GPU device).
        #[arg(short = 'd', long)]
        device: Option<String>,
    },
}
