//! `tandem perf-ops`: time per run (median after warm-up) and achieved bandwidth or compute
//! rate of model-sized cases, next to the machine's streaming read bandwidth measured in the
//! same run.

use crate::cases::{perf, Case};
use crate::common::selected;
use crate::data::{case_rng, fill_leaves, Instance};
use rayon::prelude::*;
use regex::Regex;
use serde::Serialize;
use std::hint::black_box;
use std::time::Instant;
use tandem_backend::Device;
use tandem_graph::Op;

pub struct PerfOptions {
    pub ops: Vec<Op>,
    pub pattern: Option<Regex>,
    pub json: bool,
    pub reps: usize,
    pub seed: u64,
}

/// Bytes summed by the bandwidth probe: far beyond any cache.
const STREAM_BYTES: usize = 1 << 30;
/// Weights are rotated through copies until the copies together span at least this much.
const ROTATION_BYTES: usize = 512 << 20;
const MAX_COPIES: usize = 64;
/// Rows of a weight drawn at random; the rest repeat them (quantizing 58M values per copy
/// would dominate the run; the bytes streamed are the same).
const DISTINCT_ROWS: usize = 256;

#[derive(Serialize)]
struct StreamResult {
    buffer_bytes: usize,
    threads: usize,
    gbps: f64,
}

#[derive(Serialize)]
struct CaseResult {
    name: String,
    op: String,
    /// Null when the case failed.
    us_median: Option<f64>,
    us_min: Option<f64>,
    reps: usize,
    /// Copies of the graph rotated through, so weights come from memory, not cache.
    copies: usize,
    /// Bytes one run reads and writes: every leaf (weights with their scales, inputs) plus the
    /// output, or only the part an op touches (GET_ROWS, SET_ROWS, MUL_MAT_ID).
    bytes: usize,
    gbps: Option<f64>,
    ratio_to_stream: Option<f64>,
    flops: f64,
    tflops: Option<f64>,
    error: Option<String>,
}

#[derive(Serialize)]
struct PerfReport {
    device: String,
    description: String,
    cpu_features: Vec<&'static str>,
    stream_read: StreamResult,
    cases: Vec<CaseResult>,
}

/// Runs the selected perf cases; true when at least one ran and none failed.
pub fn perf_ops(dev: &Device, opts: &PerfOptions) -> bool {
    let threads = device_threads(dev);
    let stream = match stream_read(threads) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("perf-ops: streaming read probe failed: {e}");
            return false;
        }
    };
    if !opts.json {
        println!(
            "perf-ops: device {} ({})\nstream read: {} MiB, {} threads: {:.1} GB/s (median of 5 passes)",
            dev.name(),
            dev.description(),
            stream.buffer_bytes >> 20,
            stream.threads,
            stream.gbps
        );
        println!(
            "{:<66} {:>10} {:>8} {:>7} {:>8}",
            "case", "us/run", "GB/s", "stream", "TFLOP/s"
        );
    }
    let mut results = Vec::new();
    for case in perf::cases()
        .iter()
        .filter(|c| selected(c.op, &c.name, &opts.ops, &opts.pattern))
    {
        let r = measure(dev, case, opts, stream.gbps);
        if !opts.json {
            print_row(&r);
        }
        results.push(r);
    }
    let ok = !results.is_empty() && results.iter().all(|r| r.error.is_none());
    if opts.json {
        let report = PerfReport {
            device: dev.name().to_string(),
            description: dev.description(),
            cpu_features: tandem_ops::simd::features().names(),
            stream_read: stream,
            cases: results,
        };
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("perf-ops: {e}");
                return false;
            }
        }
    } else if !ok {
        println!("perf-ops: failed (see the errors above, or no case matched)");
    }
    ok
}

fn print_row(r: &CaseResult) {
    match (&r.error, r.us_median, r.gbps, r.ratio_to_stream) {
        (None, Some(us), Some(gbps), Some(ratio)) => {
            let tf = r.tflops.map(|t| format!("{t:.3}")).unwrap_or_else(|| "-".into());
            println!("{:<66} {us:>10.1} {gbps:>8.1} {ratio:>7.2} {tf:>8}", r.name);
        }
        (Some(e), ..) => println!("{:<66} FAIL: {e}", r.name),
        _ => println!("{:<66} FAIL: no measurement", r.name),
    }
}

fn device_threads(dev: &Device) -> usize {
    match dev {
        Device::Host(h) => h.cpu().n_threads(),
    }
}

fn measure(dev: &Device, case: &Case, opts: &PerfOptions, stream_gbps: f64) -> CaseResult {
    let mut r = CaseResult {
        name: case.name.clone(),
        op: case.op.name().to_string(),
        us_median: None,
        us_min: None,
        reps: opts.reps,
        copies: 0,
        bytes: 0,
        gbps: None,
        ratio_to_stream: None,
        flops: case.flops,
        tflops: None,
        error: None,
    };
    match time_case(dev, case, opts, &mut r) {
        Ok(mut us) => {
            us.sort_by(f64::total_cmp);
            let med = us[us.len() / 2];
            let gbps = r.bytes as f64 / (med * 1e-6) / 1e9;
            r.us_median = Some(med);
            r.us_min = us.first().copied();
            r.gbps = Some(gbps);
            r.ratio_to_stream = Some(gbps / stream_gbps);
            if case.flops > 0.0 {
                r.tflops = Some(case.flops / (med * 1e-6) / 1e12);
            }
        }
        Err(e) => r.error = Some(e),
    }
    r
}

/// Microseconds of each timed run.
fn time_case(dev: &Device, case: &Case, opts: &PerfOptions, r: &mut CaseResult) -> Result<Vec<f64>, String> {
    let (graph, out, fills) = case.instantiate().map_err(|e| format!("building the graph: {e}"))?;
    for &n in &graph.nodes {
        let t = graph.tensor(n);
        if !t.op.is_view() && !dev.supports(t, &graph.srcs(n)) {
            return Err(format!("device does not support node '{}' ({})", t.name, t.op));
        }
    }
    let allocated = graph
        .leaves()
        .iter()
        .map(|&l| graph.tensor(l))
        .filter(|t| t.view_src.is_none())
        .map(|t| t.nbytes())
        .sum::<usize>()
        + graph.tensor(out).nbytes();
    r.bytes = case.bytes.unwrap_or(allocated);
    r.copies = ROTATION_BYTES.div_ceil(allocated.max(1)).clamp(1, MAX_COPIES);
    let mut copies = (0..r.copies)
        .map(|_| Instance::new(&graph))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rng = case_rng(opts.seed, &case.name);
    let mut refs: Vec<&mut Instance> = copies.iter_mut().collect();
    fill_leaves(&graph, &fills, &mut rng, DISTINCT_ROWS, &mut refs)?;
    let run = |i: usize| -> Result<f64, String> {
        let inst = &copies[i % copies.len()];
        let t0 = Instant::now();
        // SAFETY: every tensor of the instance lives in its host buffer, allocated by
        // `allocate_graph` with `nbytes()` bytes each; nothing else uses it meanwhile.
        unsafe { dev.compute(&inst.graph) }.map_err(|e| e.to_string())?;
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    };
    for i in 0..copies.len().min(3) {
        run(i)?;
    }
    (0..opts.reps.max(1)).map(run).collect()
}

/// Multi-threaded sum over a buffer far larger than the caches: the read bandwidth a
/// bandwidth-bound op can hope for on this machine.
fn stream_read(threads: usize) -> Result<StreamResult, String> {
    let buf = vec![1.0f32; STREAM_BYTES / 4];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| e.to_string())?;
    let mut secs = Vec::new();
    for pass in 0..6 {
        let t0 = Instant::now();
        let s: f32 = pool.install(|| buf.par_chunks(1 << 18).map(sum_chunk).sum());
        black_box(s);
        if pass > 0 {
            secs.push(t0.elapsed().as_secs_f64());
        }
    }
    secs.sort_by(f64::total_cmp);
    Ok(StreamResult {
        buffer_bytes: STREAM_BYTES,
        threads,
        gbps: STREAM_BYTES as f64 / secs[secs.len() / 2] / 1e9,
    })
}

/// Sixteen independent accumulators so the loop vectorises and is limited by memory only.
fn sum_chunk(x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let mut it = x.chunks_exact(16);
    for c in &mut it {
        for i in 0..16 {
            acc[i] += c[i];
        }
    }
    acc.iter().sum::<f32>() + it.remainder().iter().sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_chunk_adds_everything() {
        let v: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        assert_eq!(sum_chunk(&v), 499500.0);
        assert_eq!(sum_chunk(&v[..7]), 21.0);
    }
}
