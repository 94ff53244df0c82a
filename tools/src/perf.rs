//! `tandem perf-ops`: time per run (median after warm-up) and achieved bandwidth or compute
//! rate of model-sized cases, next to the machine's ceiling measured in the same run: the
//! streaming read bandwidth on the host, the device-to-device copy rate on a GPU.
//!
//! On a GPU every copy of a case lives in device memory (the leaves drawn once on the host and
//! uploaded), and each run is timed with events on the device's stream, after a runway copy that
//! keeps the device busy while the host queues the launches (see `GpuDevice::compute_timed`);
//! ahead of the back-to-back graphs the runway is as many copies as outlast the host's queueing
//! (`time_chain`).
//! Beside each case the same bytes are read once from the same copies by the read probe, timed
//! the same way (`GpuDevice::read_timed`): the floor for any kernel that must read them.

use crate::cases::{perf, Case};
use crate::common::selected;
use crate::data::{case_rng, fill_leaves, Instance};
use crate::progress::Progress;
use rayon::prelude::*;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::time::Instant;
use tandem_backend::gpu::{self, DeviceAlloc, GpuDevice, Timed};
use tandem_backend::{Device, GraphStats};
use tandem_graph::{Graph, Op, TensorId};

pub struct PerfOptions {
    pub ops: Vec<Op>,
    pub pattern: Option<Regex>,
    pub json: bool,
    pub reps: usize,
    pub seed: u64,
}

/// Bytes summed by the host bandwidth probe: far beyond any cache.
const STREAM_BYTES: usize = 1 << 30;
/// Bytes of the device-to-device copy that gives a GPU's copy rate.
const COPY_BYTES: usize = 1 << 30;
/// Weights are rotated through copies until the copies together span at least this much (ten
/// times a 50 MB GPU L2).
const ROTATION_BYTES: usize = 512 << 20;
/// Copies at most: enough that the narrowest weights timed (q4_0 1024 × 4096, 2.4 MB) still span
/// more than [`MIN_WORKING_SET`] (64 copies spanned 152 MB).
const MAX_COPIES: usize = 128;
/// The working set the narrowest GEMV case's copies span at least: the GPU matmul benchmarks'
/// method rotates weights through 250 MB or more, so that a 50 MB L2 does not flatter them.
#[cfg(test)]
const MIN_WORKING_SET: usize = 250_000_000;
/// Rows of a weight drawn at random; the rest repeat them (quantizing 58M values per copy
/// would dominate the run; the bytes streamed are the same).
const DISTINCT_ROWS: usize = 256;
/// Bytes of the copy queued before each timed GPU run: about 0.1 ms at HBM3e rates, time for
/// the host to queue a few dozen launches behind it.
const RUNWAY_BYTES: usize = 256 << 20;
/// Untimed GPU runs per case (the first also compiles or loads the kernels).
const GPU_WARMUP: usize = 5;
/// Untimed runs of the back-to-back graph: its plan is made on the first, and a GPU device with
/// device graphs captures it on the third (`TANDEM_GRAPHS`), so the timed runs replay it. They
/// also measure how long the host takes to queue it.
const CHAIN_WARMUP: usize = 3;
/// The runway ahead of a back-to-back graph lasts at least this many times as long as the host
/// took to queue the graph in its untimed runs, so that the timed stretch holds device time only
/// (the host's pace between launches does not show where every launch is queued before it).
const RUNWAY_MARGIN: f64 = 1.5;
/// Runway copies queued ahead of one back-to-back graph at most.
const MAX_RUNWAY_TIMES: usize = 64;
/// Nodes of the back-to-back graph at least: the copies in turn, again as often as needed. A
/// decode step runs hundreds of matmuls back to back; with only the copies (five of a 117 MB
/// weight) the graph's first kernel, which nothing ahead overlaps, and its last one's tail added
/// about 3 µs to every node on an H200 (twenty-eighth record, docs/performance.md).
const CHAIN_MIN_NODES: usize = 48;

/// The rate a bandwidth-bound case is compared with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Ceiling {
    /// What was measured, in words.
    pub what: String,
    /// Bytes counted per pass (a copy counts its reads and its writes).
    pub bytes: usize,
    pub us_median: f64,
    pub gbps: f64,
}

/// What the executor reported for a case's graph (medians over the timed runs).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct GraphSummary {
    pub nodes: usize,
    pub gpu_dispatches: usize,
    pub cpu_fallback_nodes: usize,
    /// Host time from the first launch until the graph finished (GraphStats::launch_us).
    pub launch_us_median: f64,
    pub wall_us_per_node: f64,
    pub launch_us_per_node: f64,
    /// Device time per node (events; equals host time on the host device).
    pub device_us_per_node: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CaseResult {
    pub name: String,
    pub op: String,
    /// Device time per run (events on a GPU, host clock on the host); null when the case failed.
    pub us_median: Option<f64>,
    pub us_min: Option<f64>,
    /// Host time per run around the whole `compute` call (on a GPU from runs without the
    /// runway copy, so it includes the launch latency in front of the first kernel).
    pub wall_us_median: Option<f64>,
    pub reps: usize,
    /// Copies of the graph rotated through, so weights come from memory, not cache.
    pub copies: usize,
    /// GPU: nodes of the back-to-back graph (the copies in turn, repeated up to
    /// [`CHAIN_MIN_NODES`] where each copy's reads lie [`ROTATION_BYTES`] apart).
    #[serde(default)]
    pub chain_nodes: usize,
    /// Bytes of all copies together.
    pub working_set_bytes: usize,
    /// Bytes one run reads and writes: every leaf (weights with their scales, inputs) plus the
    /// output, or only the part an op touches (GET_ROWS, SET_ROWS, MUL_MAT_ID).
    pub bytes: usize,
    pub gbps: Option<f64>,
    pub ratio_to_ceiling: Option<f64>,
    /// GPU: device time of one streaming read of the run's bytes (at most one copy's bytes)
    /// from the same rotated copies, timed the same way, median over as many runs: what any
    /// kernel that reads those bytes takes at best here, launch included.
    pub read_us_median: Option<f64>,
    /// `read_us_median / us_median`: 1.0 means as fast as only reading the bytes.
    pub ratio_to_read: Option<f64>,
    /// GPU: device time per node of one graph that holds the copies' nodes in turn, back to back
    /// (`chain_nodes` of them), as a decode step's layers run (each reading weights not in the
    /// cache; a kernel may start before the one ahead ends where the device has dependent
    /// launches), median over the timed graphs.
    #[serde(default)]
    pub chain_us_median: Option<f64>,
    #[serde(default)]
    pub chain_gbps: Option<f64>,
    /// GPU: device time per node of the read probe over the same copies in the same order, back
    /// to back (as dependent launches where the device has them).
    #[serde(default)]
    pub chain_read_us_median: Option<f64>,
    /// GPU: how the back-to-back graph was queued behind its runway.
    #[serde(default)]
    pub chain_queue: Option<ChainQueue>,
    /// GPU: the same for the read probe's back-to-back launches.
    #[serde(default)]
    pub chain_read_queue: Option<ChainQueue>,
    pub flops: f64,
    pub tflops: Option<f64>,
    pub graph: Option<GraphSummary>,
    pub error: Option<String>,
}

/// How a back-to-back stretch was queued: the host's time per node to queue it (median over the
/// timed runs), how long the runway ahead of it kept the device busy (copies of the runway's
/// bytes at the copy rate of [`Ceiling`]), and in how many timed runs the queueing outlasted the
/// runway (there the device may have waited for the host, and the figure shows the host's pace).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ChainQueue {
    pub queue_us_per_node: f64,
    pub runway_us: f64,
    pub host_paced_runs: usize,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PerfReport {
    pub device: String,
    pub description: String,
    /// "gpu" or "host".
    pub kind: String,
    pub cpu_features: Vec<String>,
    pub ceiling: Ceiling,
    pub cases: Vec<CaseResult>,
}

/// One timed run.
struct Sample {
    us: f64,
    wall_us: f64,
    stats: GraphStats,
}

/// Device buffers of the runway copy.
struct Runway {
    src: DeviceAlloc,
    dst: DeviceAlloc,
}

impl Runway {
    /// `times` copies of the runway's [`RUNWAY_BYTES`].
    fn copies(&self, times: usize) -> gpu::Runway {
        gpu::Runway {
            dst: self.dst.ptr(),
            src: self.src.ptr(),
            bytes: RUNWAY_BYTES,
            times,
        }
    }
}

/// Runs the selected perf cases; true when at least one ran and none failed.
pub fn perf_ops(dev: &Device, opts: &PerfOptions) -> bool {
    let (ceiling, runway) = match dev {
        Device::Host(h) => (stream_read(h.cpu().n_threads()), None),
        Device::Gpu(g) => match gpu_setup(g) {
            Ok((c, r)) => (Ok(c), Some(r)),
            Err(e) => (Err(e), None),
        },
    };
    let ceiling = match ceiling {
        Ok(c) => c,
        Err(e) => {
            eprintln!("perf-ops: measuring the ceiling failed: {e}");
            return false;
        }
    };
    if !opts.json {
        println!(
            "perf-ops: device {} ({})\nceiling: {}: {:.1} GB/s",
            dev.name(),
            dev.description(),
            ceiling.what,
            ceiling.gbps
        );
        println!(
            "{:<72} {:>10} {:>10} {:>8} {:>6} {:>8} {:>8} {:>7} {:>8} {:>8} {:>8}",
            "case",
            "us/run",
            "wall us",
            "GB/s",
            "ceil",
            "TFLOP/s",
            "read us",
            "of read",
            "b2b us",
            "b2b GB/s",
            "b2b read"
        );
    }
    let gpu = matches!(dev, Device::Gpu(_));
    let mut results = Vec::new();
    let cases: Vec<Case> = perf::cases(gpu)
        .into_iter()
        .filter(|c| selected(c.op, &c.name, &opts.ops, &opts.pattern))
        .collect();
    let mut progress = Progress::new("perf-ops", "cases", cases.len());
    for case in &cases {
        let r = measure(dev, runway.as_ref(), case, opts, ceiling.gbps);
        if opts.json {
            progress.suspend(|| eprintln!("perf-ops: {}", row_text(&r)));
        } else {
            progress.println(&row_text(&r));
        }
        results.push(r);
        progress.step(&case.name);
    }
    progress.finish();
    let ok = !results.is_empty() && results.iter().all(|r| r.error.is_none());
    if opts.json {
        let report = PerfReport {
            device: dev.name().to_string(),
            description: dev.description(),
            kind: if gpu { "gpu" } else { "host" }.into(),
            cpu_features: tandem_ops::simd::features()
                .names()
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ceiling,
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

fn row_text(r: &CaseResult) -> String {
    match (&r.error, r.us_median, r.gbps, r.ratio_to_ceiling) {
        (None, Some(us), Some(gbps), Some(ratio)) => {
            let tf = r.tflops.map(|t| format!("{t:.3}")).unwrap_or_else(|| "-".into());
            let wall = r.wall_us_median.unwrap_or(us);
            let read = r
                .read_us_median
                .map(|x| format!("{x:.1}"))
                .unwrap_or_else(|| "-".into());
            let of_read = r.ratio_to_read.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
            let one = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
            let (b2b, b2b_gbps, b2b_read) = (one(r.chain_us_median), one(r.chain_gbps), one(r.chain_read_us_median));
            let mut line = format!(
                "{:<72} {us:>10.1} {wall:>10.1} {gbps:>8.1} {ratio:>6.2} {tf:>8} {read:>8} {of_read:>7} {b2b:>8} {b2b_gbps:>8} {b2b_read:>8}",
                r.name
            );
            if let Some(g) = r.graph.as_ref().filter(|g| g.nodes >= 64) {
                line += &format!(
                    "  [{} nodes, {} GPU, {} CPU: {:.2} us/node wall, {:.2} launch, {:.2} device]",
                    g.nodes,
                    g.gpu_dispatches,
                    g.cpu_fallback_nodes,
                    g.wall_us_per_node,
                    g.launch_us_per_node,
                    g.device_us_per_node
                );
            }
            line
        }
        (Some(e), ..) => format!("{:<72} FAIL: {e}", r.name),
        _ => format!("{:<72} FAIL: no measurement", r.name),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn measure(dev: &Device, runway: Option<&Runway>, case: &Case, opts: &PerfOptions, ceiling_gbps: f64) -> CaseResult {
    let mut r = CaseResult {
        name: case.name.clone(),
        op: case.op.name().to_string(),
        reps: opts.reps.max(1),
        flops: case.flops,
        ..Default::default()
    };
    let timed = match (dev, runway) {
        (Device::Gpu(g), Some(rw)) => time_gpu(dev, g, rw, ceiling_gbps, case, opts, &mut r),
        (Device::Gpu(_), None) => Err("no runway buffers".into()),
        (Device::Host(_), _) => time_host(dev, case, opts, &mut r),
    };
    match timed {
        Ok(samples) => summarize(&mut r, &samples, ceiling_gbps),
        Err(e) => r.error = Some(e),
    }
    r
}

fn summarize(r: &mut CaseResult, samples: &[Sample], ceiling_gbps: f64) {
    let mut us: Vec<f64> = samples.iter().map(|s| s.us).collect();
    let mut wall: Vec<f64> = samples.iter().map(|s| s.wall_us).collect();
    let mut launch: Vec<f64> = samples.iter().map(|s| s.stats.launch_us as f64).collect();
    let med = median(&mut us);
    let wall_med = median(&mut wall);
    let gbps = r.bytes as f64 / (med * 1e-6) / 1e9;
    r.us_median = Some(med);
    r.us_min = us.first().copied();
    r.wall_us_median = Some(wall_med);
    r.gbps = Some(gbps);
    r.ratio_to_ceiling = Some(gbps / ceiling_gbps);
    r.ratio_to_read = r.read_us_median.map(|read| read / med);
    if r.flops > 0.0 {
        r.tflops = Some(r.flops / (med * 1e-6) / 1e12);
    }
    if let Some(last) = samples.last() {
        let n = last.stats.nodes.max(1) as f64;
        let launch_med = median(&mut launch);
        r.graph = Some(GraphSummary {
            nodes: last.stats.nodes,
            gpu_dispatches: last.stats.gpu_dispatches,
            cpu_fallback_nodes: last.stats.cpu_fallback_nodes,
            launch_us_median: launch_med,
            wall_us_per_node: wall_med / n,
            launch_us_per_node: launch_med / n,
            device_us_per_node: med / n,
        });
    }
}

type Fills = std::collections::HashMap<tandem_graph::TensorId, crate::cases::Fill>;

/// Builds the case's graph, checks the device takes every node, and returns the graph, the leaf
/// fills and the bytes a run touches.
fn prepare(dev: &Device, case: &Case) -> Result<(Graph, Fills, usize), String> {
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
    Ok((graph, fills, case.bytes.unwrap_or(allocated)))
}

/// Copies needed for a working set of at least [`ROTATION_BYTES`].
fn copies_for(image_bytes: usize) -> usize {
    ROTATION_BYTES.div_ceil(image_bytes.max(1)).clamp(1, MAX_COPIES)
}

/// Copies of a GPU case whose runs read `read_bytes` of each `image_bytes` copy, with `room`
/// bytes to hold them: enough that the bytes read span [`ROTATION_BYTES`] (MUL_MAT_ID reads
/// only its experts), as far as [`MAX_COPIES`] and the room allow, and never fewer than
/// [`copies_for`] the image.
fn gpu_copies(image_bytes: usize, read_bytes: usize, room: usize) -> usize {
    let least = copies_for(image_bytes);
    let wanted = copies_for(read_bytes.min(image_bytes));
    wanted.min(room / image_bytes.max(1)).max(least)
}

/// Node order of the back-to-back graph over `copies` copies whose runs read `read_bytes` each:
/// the copies in turn, repeated until there are [`CHAIN_MIN_NODES`] when the bytes read between
/// two reads of one copy span [`ROTATION_BYTES`] (so the cache cannot hold them), else once.
fn chain_order(copies: usize, read_bytes: usize) -> Vec<usize> {
    let turns = if copies.saturating_mul(read_bytes) >= ROTATION_BYTES {
        CHAIN_MIN_NODES.div_ceil(copies.max(1))
    } else {
        1
    };
    (0..turns * copies).map(|i| i % copies).collect()
}

fn time_host(dev: &Device, case: &Case, opts: &PerfOptions, r: &mut CaseResult) -> Result<Vec<Sample>, String> {
    let (graph, fills, bytes) = prepare(dev, case)?;
    r.bytes = bytes;
    let mut copies = vec![Instance::new(&graph)?];
    let image = copies[0].image().1.len();
    r.copies = copies_for(image);
    r.working_set_bytes = r.copies * image;
    for _ in 1..r.copies {
        copies.push(Instance::new(&graph)?);
    }
    let mut rng = case_rng(opts.seed, &case.name);
    let mut refs: Vec<&mut Instance> = copies.iter_mut().collect();
    fill_leaves(&graph, &fills, &mut rng, DISTINCT_ROWS, &mut refs)?;
    let run = |i: usize| -> Result<Sample, String> {
        let inst = &copies[i % copies.len()];
        let t0 = Instant::now();
        // SAFETY: every tensor of the instance lives in its host buffer, allocated by
        // `allocate_graph` with `nbytes()` bytes each; nothing else uses it meanwhile.
        let stats = unsafe { dev.compute(&inst.graph) }.map_err(|e| e.to_string())?;
        let us = t0.elapsed().as_secs_f64() * 1e6;
        Ok(Sample { us, wall_us: us, stats })
    };
    for i in 0..copies.len().min(3) {
        run(i)?;
    }
    (0..r.reps).map(run).collect()
}

fn time_gpu(
    dev: &Device,
    g: &GpuDevice,
    runway: &Runway,
    copy_gbps: f64,
    case: &Case,
    opts: &PerfOptions,
    r: &mut CaseResult,
) -> Result<Vec<Sample>, String> {
    let dev_err = |e: tandem_backend::gpu::GpuError| format!("device: {e}");
    let (graph, fills, bytes) = prepare(dev, case)?;
    r.bytes = bytes;
    let mut host = Instance::new(&graph)?;
    let mut rng = case_rng(opts.seed, &case.name);
    fill_leaves(&graph, &fills, &mut rng, DISTINCT_ROWS, &mut [&mut host])?;
    let (host_graph, image, host_base) = host.image();
    let (free, _) = g.memory();
    let room = usize::try_from(free / 2).unwrap_or(usize::MAX);
    r.copies = gpu_copies(image.len(), r.bytes, room);
    r.working_set_bytes = r.copies * image.len();
    if r.working_set_bytes > room {
        return Err(format!(
            "{} copies of {} bytes do not fit in half of the {free} free bytes",
            r.copies,
            image.len()
        ));
    }
    let mut allocs = Vec::with_capacity(r.copies);
    let mut graphs = Vec::with_capacity(r.copies);
    for _ in 0..r.copies {
        let a = g.alloc(image.len()).map_err(dev_err)?;
        // SAFETY: the allocation holds `image.len()` bytes.
        unsafe { g.write(a.ptr(), image) }.map_err(dev_err)?;
        graphs.push(rebased(host_graph, host_base, a.ptr().0 as usize));
        allocs.push(a);
    }
    let runway_copy = runway.copies(1);
    let way = Some(runway_copy);
    // Each sample pairs an event-timed run behind the runway (device time) with a plain run of
    // the next copy (host wall time and the executor's stats, free of the runway's wait).
    let run = |i: usize| -> Result<Sample, String> {
        // SAFETY: every address of the graph points into its own allocation at the offset it has
        // in the host image, which holds every tensor's bytes; the runway buffers are separate
        // allocations of RUNWAY_BYTES each.
        let (_, ms) = unsafe { g.compute_timed(&graphs[i % graphs.len()], way) }.map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        // SAFETY: as above.
        let stats = unsafe { g.compute(&graphs[(i + 1) % graphs.len()]) }.map_err(|e| e.to_string())?;
        Ok(Sample {
            us: ms as f64 * 1e3,
            wall_us: t0.elapsed().as_secs_f64() * 1e6,
            stats,
        })
    };
    for i in 0..GPU_WARMUP.max(graphs.len().min(8)) {
        run(i)?;
    }
    let samples = (0..r.reps).map(run).collect::<Result<Vec<_>, _>>()?;
    // The same bytes read by the probe from the same copies, in the same conditions.
    let read_bytes = r.bytes.min(image.len());
    r.read_us_median = Some(median_after(GPU_WARMUP, r.reps, |i| {
        // SAFETY: the probe reads `read_bytes` <= the allocation's length from its start; the
        // runway buffers are separate allocations of RUNWAY_BYTES each.
        let ms = unsafe { g.read_timed(allocs[i % allocs.len()].ptr(), read_bytes, runway_copy) }
            .map_err(|e| format!("read probe: {e}"))?;
        Ok(ms as f64 * 1e3)
    })?);
    // The copies' nodes in turn in one graph, back to back.
    let order = chain_order(graphs.len(), read_bytes);
    r.chain_nodes = order.len();
    let chain = chained(&order.iter().map(|&i| &graphs[i]).collect::<Vec<_>>());
    let per = order.len() as f64;
    let (chain_us, queue) = time_chain(runway, copy_gbps, per, r.reps, |way| {
        // SAFETY: as `run` above: each copy's tensors lie in its own allocation.
        let (stats, ms) = unsafe { g.compute_timed(&chain, Some(way)) }.map_err(|e| format!("back to back: {e}"))?;
        Ok(Timed {
            ms,
            queue_us: stats.queue_us as f64,
        })
    })?;
    warn_host_paced(&r.name, "back-to-back graph", &queue, r.reps);
    r.chain_us_median = Some(chain_us);
    r.chain_gbps = Some(r.bytes as f64 / (chain_us * 1e-6) / 1e9);
    r.chain_queue = Some(queue);
    let starts: Vec<_> = order.iter().map(|&i| allocs[i].ptr()).collect();
    let (read_us, read_queue) = time_chain(runway, copy_gbps, per, r.reps, |way| {
        // SAFETY: the probe reads `read_bytes` <= each allocation's length from its start; the
        // runway buffers are separate allocations.
        unsafe { g.read_chain_timed(&starts, read_bytes, way) }.map_err(|e| format!("read probe, back to back: {e}"))
    })?;
    warn_host_paced(&r.name, "read probe's back-to-back launches", &read_queue, r.reps);
    r.chain_read_us_median = Some(read_us);
    r.chain_read_queue = Some(read_queue);
    drop(allocs);
    Ok(samples)
}

/// Device µs per node (median over `reps` timed runs) of a back-to-back stretch of `per` nodes
/// that `timed` queues behind the runway it is given, and how it was queued. The
/// [`CHAIN_WARMUP`] untimed runs go behind one runway copy; the timed ones behind as many as
/// make the runway last [`RUNWAY_MARGIN`] times the longest queueing of those (at the copy rate
/// `copy_gbps`, read + write), at most [`MAX_RUNWAY_TIMES`].
fn time_chain(
    runway: &Runway,
    copy_gbps: f64,
    per: f64,
    reps: usize,
    mut timed: impl FnMut(gpu::Runway) -> Result<Timed, String>,
) -> Result<(f64, ChainQueue), String> {
    let once_us = 2.0 * RUNWAY_BYTES as f64 / (copy_gbps.max(1.0) * 1e3);
    time_chain_with(once_us, per, reps, |times| timed(runway.copies(times)))
}

/// [`time_chain`] with runway copies of `once_us` each; `timed(times)` runs the stretch behind
/// `times` of them.
fn time_chain_with(
    once_us: f64,
    per: f64,
    reps: usize,
    mut timed: impl FnMut(usize) -> Result<Timed, String>,
) -> Result<(f64, ChainQueue), String> {
    let mut queued = 0.0f64;
    for _ in 0..CHAIN_WARMUP {
        queued = queued.max(timed(1)?.queue_us);
    }
    let times = runway_times(queued, once_us);
    let runway_us = times as f64 * once_us;
    let (mut us, mut queue) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    let mut host_paced_runs = 0;
    for _ in 0..reps.max(1) {
        let t = timed(times)?;
        us.push(t.ms as f64 * 1e3 / per);
        queue.push(t.queue_us / per);
        host_paced_runs += usize::from(t.queue_us > runway_us);
    }
    Ok((
        median(&mut us),
        ChainQueue {
            queue_us_per_node: median(&mut queue),
            runway_us,
            host_paced_runs,
        },
    ))
}

/// Runway copies of `once_us` each that last [`RUNWAY_MARGIN`] times `queued_us`: at least one,
/// at most [`MAX_RUNWAY_TIMES`].
fn runway_times(queued_us: f64, once_us: f64) -> usize {
    let want = (RUNWAY_MARGIN * queued_us / once_us.max(1e-3)).ceil();
    if want.is_finite() && want >= 1.0 {
        (want as usize).min(MAX_RUNWAY_TIMES)
    } else {
        1
    }
}

/// Says on stderr where the host took longer to queue a back-to-back stretch than its runway
/// lasted in more than half of the timed runs: its figure may show the host's pace.
fn warn_host_paced(case: &str, what: &str, q: &ChainQueue, reps: usize) {
    if 2 * q.host_paced_runs > reps {
        eprintln!(
            "perf-ops: {case}: the host queued the {what} more slowly than its runway of {:.0} µs lasted \
             in {} of {reps} runs ({:.2} µs a node); the back-to-back figure may show the host's pace",
            q.runway_us, q.host_paced_runs, q.queue_us_per_node
        );
    }
}

/// The median of `measure(i)` over i = warmup .. warmup + reps, after the untimed i < warmup.
fn median_after(
    warmup: usize,
    reps: usize,
    mut measure: impl FnMut(usize) -> Result<f64, String>,
) -> Result<f64, String> {
    let mut v = Vec::with_capacity(reps);
    for i in 0..warmup + reps {
        let x = measure(i)?;
        if i >= warmup {
            v.push(x);
        }
    }
    Ok(median(&mut v))
}

/// One graph holding the tensors and nodes of every graph of `graphs`, in order (ids shifted).
fn chained(graphs: &[&Graph]) -> Graph {
    let mut out = Graph {
        tensors: Vec::new(),
        nodes: Vec::new(),
    };
    for g in graphs {
        let base = out.tensors.len() as u32;
        let shift = |id: TensorId| TensorId(id.0 + base);
        out.tensors.extend(g.tensors.iter().map(|t| {
            let mut t = t.clone();
            for s in t.src.iter_mut().flatten() {
                *s = shift(*s);
            }
            t.view_src = t.view_src.map(shift);
            t
        }));
        out.nodes.extend(g.nodes.iter().map(|&n| shift(n)));
    }
    out
}

/// `g` with every address moved from the host image at `from` to the same offset at `to`.
fn rebased(g: &Graph, from: usize, to: usize) -> Graph {
    let mut moved = g.clone();
    for t in moved.tensors.iter_mut() {
        if t.data != 0 {
            t.data = t.data - from + to;
        }
    }
    moved
}

/// The GPU's copy rate (a device-to-device copy of [`COPY_BYTES`], events, median of 10 after
/// 2 untimed) and the runway buffers.
fn gpu_setup(g: &GpuDevice) -> Result<(Ceiling, Runway), String> {
    let dev_err = |e: tandem_backend::gpu::GpuError| format!("device: {e}");
    let src = g.alloc(COPY_BYTES).map_err(dev_err)?;
    let dst = g.alloc(COPY_BYTES).map_err(dev_err)?;
    // SAFETY: both allocations hold COPY_BYTES bytes.
    unsafe { g.memset(src.ptr(), 0x5a, COPY_BYTES) }.map_err(dev_err)?;
    let mut us = Vec::new();
    for pass in 0..12 {
        // SAFETY: as above.
        let ms = unsafe { g.copy_timed(dst.ptr(), src.ptr(), COPY_BYTES) }.map_err(dev_err)?;
        if pass >= 2 {
            us.push(ms as f64 * 1e3);
        }
    }
    let med = median(&mut us);
    drop((src, dst));
    let runway = Runway {
        src: g.alloc(RUNWAY_BYTES).map_err(dev_err)?,
        dst: g.alloc(RUNWAY_BYTES).map_err(dev_err)?,
    };
    // SAFETY: the runway source holds RUNWAY_BYTES bytes.
    unsafe { g.memset(runway.src.ptr(), 0x3c, RUNWAY_BYTES) }.map_err(dev_err)?;
    Ok((
        Ceiling {
            what: format!(
                "device-to-device copy of {} MiB (read + write), events, median of 10",
                COPY_BYTES >> 20
            ),
            bytes: 2 * COPY_BYTES,
            us_median: med,
            gbps: 2.0 * COPY_BYTES as f64 / (med * 1e-6) / 1e9,
        },
        runway,
    ))
}

/// Multi-threaded sum over a buffer far larger than the caches: the read bandwidth a
/// bandwidth-bound op can hope for on this machine.
fn stream_read(threads: usize) -> Result<Ceiling, String> {
    let buf = vec![1.0f32; STREAM_BYTES / 4];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| e.to_string())?;
    let mut us = Vec::new();
    for pass in 0..6 {
        let t0 = Instant::now();
        let s: f32 = pool.install(|| buf.par_chunks(1 << 18).map(sum_chunk).sum());
        black_box(s);
        if pass > 0 {
            us.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    let med = median(&mut us);
    Ok(Ceiling {
        what: format!(
            "stream read of {} MiB, {threads} threads, median of 5",
            STREAM_BYTES >> 20
        ),
        bytes: STREAM_BYTES,
        us_median: med,
        gbps: STREAM_BYTES as f64 / (med * 1e-6) / 1e9,
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

    #[test]
    fn summary_takes_medians_and_rates() {
        let mut r = CaseResult {
            bytes: 4_000_000,
            flops: 8e6,
            ..Default::default()
        };
        let samples: Vec<Sample> = [4.0, 1.0, 2.0]
            .iter()
            .map(|&us| Sample {
                us,
                wall_us: us * 10.0,
                stats: GraphStats {
                    nodes: 2,
                    launch_us: (us * 5.0) as u64,
                    ..Default::default()
                },
            })
            .collect();
        r.read_us_median = Some(1.5);
        summarize(&mut r, &samples, 1000.0);
        assert_eq!(r.ratio_to_read, Some(0.75));
        assert_eq!(r.us_median, Some(2.0));
        assert_eq!(r.us_min, Some(1.0));
        assert_eq!(r.wall_us_median, Some(20.0));
        assert!((r.gbps.unwrap() - 2000.0).abs() < 1e-9);
        assert!((r.ratio_to_ceiling.unwrap() - 2.0).abs() < 1e-12);
        assert!((r.tflops.unwrap() - 4.0).abs() < 1e-12);
        let g = r.graph.unwrap();
        assert_eq!(g.nodes, 2);
        assert_eq!(g.wall_us_per_node, 10.0);
        assert_eq!(g.launch_us_per_node, 5.0);
        assert_eq!(g.device_us_per_node, 1.0);
    }

    #[test]
    fn medians_leave_the_warmup_out_and_stop_at_an_error() {
        let mut seen = Vec::new();
        let m = median_after(2, 3, |i| {
            seen.push(i);
            Ok(if i < 2 { 1e9 } else { i as f64 })
        });
        assert_eq!(m, Ok(3.0));
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert_eq!(median_after(0, 3, |_| Err("boom".into())), Err("boom".to_string()));
    }

    #[test]
    fn the_runway_outlasts_the_queueing_seen() {
        // 200 µs of queueing, copies of 127 µs: 300 µs wanted, three copies (381 µs).
        assert_eq!(runway_times(200.0, 127.0), 3);
        // Fast queueing still gets one copy; endless queueing no more than the cap.
        assert_eq!(runway_times(1.0, 127.0), 1);
        assert_eq!(runway_times(0.0, 127.0), 1);
        assert_eq!(runway_times(1e9, 127.0), MAX_RUNWAY_TIMES);
        assert_eq!(runway_times(f64::NAN, 127.0), 1);
    }

    #[test]
    fn time_chain_lengthens_the_runway_and_counts_host_paced_runs() {
        // A runway buffer pair is not needed to test the arithmetic: the closure sees the runway
        // it is given. 256 MiB at 4000 GB/s (read + write): 134.2 µs a copy.
        let once = 2.0 * RUNWAY_BYTES as f64 / 4e6;
        let mut seen = Vec::new();
        let mut calls = 0usize;
        let (us, q) = time_chain_with(once, 4.0, 3, |times| {
            seen.push(times);
            calls += 1;
            // Warm-up runs queue in 300 µs; timed runs in 100, 100 and 500 µs.
            let timed = calls.saturating_sub(CHAIN_WARMUP);
            let queue_us = if calls <= CHAIN_WARMUP {
                300.0
            } else if timed == 3 {
                500.0
            } else {
                100.0
            };
            Ok(Timed {
                ms: 0.004 * (timed + 2) as f32,
                queue_us,
            })
        })
        .unwrap();
        // 1.5 x 300 µs = 450 µs: four copies (537 µs).
        let mut want = vec![1; CHAIN_WARMUP];
        want.extend([4, 4, 4]);
        assert_eq!(seen, want);
        assert!((q.runway_us - 4.0 * once).abs() < 1e-9);
        assert_eq!(q.host_paced_runs, 0);
        assert_eq!(q.queue_us_per_node, 25.0);
        // Timed runs took 12, 16 and 20 µs for four nodes: median 4 µs a node.
        assert!((us - 4.0).abs() < 1e-6, "{us}");
        let (_, q) = time_chain_with(once, 1.0, 2, |_| {
            Ok(Timed {
                ms: 0.001,
                queue_us: 1000.0,
            })
        })
        .unwrap();
        // 1.5 x 1000 µs: twelve copies (1611 µs) outlast every timed run's queueing.
        assert_eq!(q.host_paced_runs, 0);
        let mut n = 0;
        let (_, q) = time_chain_with(once, 1.0, 2, |_| {
            n += 1;
            Ok(Timed {
                ms: 0.001,
                queue_us: if n <= CHAIN_WARMUP { 10.0 } else { 1000.0 },
            })
        })
        .unwrap();
        // One copy planned from fast warm-ups; both timed runs then outlast it.
        assert_eq!(q.host_paced_runs, 2);
    }

    #[test]
    fn chains_repeat_the_copies_only_where_the_cache_cannot_hold_them() {
        // Five copies of a 117 MB weight: ten turns, each copy's reads 470 MB apart.
        let order = chain_order(5, 117 << 20);
        assert_eq!(order.len(), 50);
        assert_eq!(&order[..7], &[0, 1, 2, 3, 4, 0, 1]);
        // 64 copies of 2 MB read: 128 MB between two reads of one copy, so each once.
        assert_eq!(chain_order(64, 2 << 20), (0..64).collect::<Vec<_>>());
        // Exactly ROTATION_BYTES in turn: repeated up to at least CHAIN_MIN_NODES.
        let order = chain_order(7, ROTATION_BYTES / 7 + 1);
        assert!(order.len() >= CHAIN_MIN_NODES && order.len().is_multiple_of(7));
    }

    #[test]
    fn the_narrowest_gemv_rotates_through_the_working_set_asked_for() {
        // MUL_MAT(type=q4_0,m=1024,k=4096,n=1): 1024 rows of 128 blocks of 18 bytes, and the
        // column and the output.
        let image = 1024 * 128 * 18 + 4096 * 4 + 1024 * 4;
        assert!(
            copies_for(image) * image >= MIN_WORKING_SET,
            "{} copies",
            copies_for(image)
        );
    }

    #[test]
    fn gpu_copies_follow_the_bytes_read_as_far_as_room_allows() {
        let mb = 1 << 20;
        // A GEMV reads its whole copy: as many copies as for the image.
        assert_eq!(gpu_copies(117 * mb, 117 * mb, usize::MAX), copies_for(117 * mb));
        // MUL_MAT_ID reading 7 of 113 MB: copies for the 7 MB (74), up to MAX_COPIES.
        assert_eq!(gpu_copies(113 * mb, 7 * mb, usize::MAX), copies_for(7 * mb));
        assert_eq!(copies_for(7 * mb), 74);
        assert_eq!(gpu_copies(113 * mb, mb, usize::MAX), MAX_COPIES);
        assert_eq!(gpu_copies(113 * mb, 7 * mb, 2048 * mb), 18);
        // Never fewer than the image needs, even where the room is short (the caller then
        // reports that they do not fit).
        assert_eq!(gpu_copies(113 * mb, 7 * mb, 100 * mb), copies_for(113 * mb));
    }

    #[test]
    fn chaining_shifts_every_reference() {
        let mut b = tandem_graph::GraphBuilder::new();
        let x = b.new_tensor(tandem_graph::ElemType::F32, &[4]);
        let y = b.scale(x, 2.0, 0.0);
        b.scale(y, 3.0, 0.0);
        let g = b.build();
        let c = chained(&[&g, &g]);
        let n = g.tensors.len() as u32;
        assert_eq!(c.tensors.len(), 2 * g.tensors.len());
        assert_eq!(c.nodes.len(), 2 * g.nodes.len());
        for (i, &id) in c.nodes.iter().enumerate() {
            let orig = g.nodes[i % g.nodes.len()];
            let shift = if i < g.nodes.len() { 0 } else { n };
            assert_eq!(id.0, orig.0 + shift);
            let (t, o) = (c.tensor(id), g.tensor(orig));
            assert_eq!(t.op, o.op);
            for (a, b) in t.src.iter().zip(o.src.iter()) {
                assert_eq!(a.map(|s| s.0), b.map(|s| s.0 + shift));
            }
        }
    }

    #[test]
    fn rebasing_keeps_offsets_and_unallocated_tensors() {
        let mut b = tandem_graph::GraphBuilder::new();
        let x = b.new_tensor(tandem_graph::ElemType::F32, &[4]);
        let y = b.scale(x, 2.0, 0.0);
        let mut g = b.build();
        g.tensors[x.index()].data = 0x1000;
        g.tensors[y.index()].data = 0x1040;
        let m = rebased(&g, 0x1000, 0x9000);
        assert_eq!(m.tensor(x).data, 0x9000);
        assert_eq!(m.tensor(y).data, 0x9040);
    }
}
