//! MUL_MAT and MUL_MAT_ID on several ggml devices through ggml's own backend API, one process,
//! the same weights, activations and graphs on each: tandem's TANDEM0 (the plugin) against
//! llama.cpp's CUDA backend (a `libggml-cuda.so` built from the same ggml sources with
//! `GGML_BACKEND_DL=ON`, see scripts/gpu-peer.sh), or TANDEM_HOST against ggml's CPU.
//!
//! `backend_matmul_peer [--load LIB]... --devices A,B[,...] [--runs R] [--filter S1,S2]
//!                      [--list] [--json]`
//!
//! `--load` loads a dynamic ggml backend (the plugin, libggml-cuda.so) before the devices are
//! looked up by name. For each case and device: the weights are quantized once by ggml
//! (`ggml_quantize_chunk` of seeded random values), then copied to as many tensors on the
//! device as make the bytes the nodes read span at least 512 MiB (ten times the H200's 50 MB
//! L2; at most 64 copies; MUL_MAT_ID reads only its tokens' experts), and one graph holds the
//! copies' nodes in turn, all on the same activations, repeated up to at least 48 nodes where
//! the bytes read between two reads of one copy span 512 MiB (a decode step runs hundreds of
//! matmuls back to back; a graph of five nodes adds its first and last node's edges to every
//! node's time); the graph is computed twice to warm up, then `--runs` times, each wall-clocked around
//! `ggml_backend_graph_compute` (which returns once the device has finished). A node's time is
//! the graph's over its node count; the figures are the median and the fastest run. Every
//! node reads weights that are not in the cache, as a decode step's layers do, and the host
//! queues the nodes while the device runs them, so the time is the device's (each backend's
//! launch costs are included when they exceed its kernels').
//!
//! Every device's first output is compared with ggml's CPU backend on the same node (NMSE,
//! threshold 5e-4 as in `tandem test-ops`); a case that fails it, a failed graph or zero cases
//! run make the tool exit 1.

use llama_cpp_sys_2 as g;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::ffi::{CStr, CString};
use std::time::Instant;
use tandem_graph::ElemType;
use tandem_tests::ggml::{quantize, DeviceGraph};
use tandem_tests::llama_run::nmse;

const ROTATION_BYTES: usize = 512 << 20;
const MAX_COPIES: usize = 64;
/// Nodes of a graph at least: the copies in turn, again as often as needed where the bytes read
/// between two reads of one copy span ROTATION_BYTES (as `tandem perf-ops` chains them).
const CHAIN_MIN_NODES: usize = 48;
const NMSE_LIMIT: f64 = 5e-4;

struct Args {
    load: Vec<String>,
    devices: Vec<String>,
    runs: usize,
    filter: Vec<String>,
    list: bool,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        load: Vec::new(),
        devices: Vec::new(),
        runs: 30,
        filter: Vec::new(),
        list: false,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--load" => a.load.push(value()?),
            "--devices" => a.devices = value()?.split(',').map(str::to_string).collect(),
            "--runs" => a.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--filter" => a.filter = value()?.split(',').map(str::to_string).collect(),
            "--list" => a.list = true,
            "--json" => a.json = true,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.runs < 1 {
        return Err("--runs must be positive".into());
    }
    if a.devices.is_empty() && !a.list {
        return Err("--devices names the ggml devices to compare (e.g. TANDEM0,CUDA0)".into());
    }
    Ok(a)
}

/// One benchmark case: `ggml_mul_mat` of a [k, m] weight and [k, n] f32 activations, or
/// `ggml_mul_mat_id` of [k, m, experts] experts with `used` of them per token over n tokens.
#[derive(Clone, Copy)]
struct Case {
    ty: ElemType,
    m: usize,
    k: usize,
    n: usize,
    /// (experts, used per token) for MUL_MAT_ID.
    moe: Option<(usize, usize)>,
}

impl Case {
    fn name(&self) -> String {
        match self.moe {
            None => format!("MUL_MAT {} m={} k={} n={}", self.ty.name(), self.m, self.k, self.n),
            Some((e, u)) => format!(
                "MUL_MAT_ID {} experts={e} used={u} m={} k={} n={}",
                self.ty.name(),
                self.m,
                self.k,
                self.n
            ),
        }
    }

    fn weight_rows(&self) -> usize {
        self.m * self.moe.map_or(1, |(e, _)| e)
    }

    fn out_len(&self) -> usize {
        self.m * self.n * self.moe.map_or(1, |(_, u)| u)
    }
}

/// The benchmark shapes: decode GEMVs of a 4096 × 14336 FFN matrix, narrow GEMVs, batched
/// decode, prefill of 512 tokens, and a 128-expert top-8 MoE layer; shapes of `tandem perf-ops`'
/// (tools/src/cases/perf.rs), so that the two tools' figures can be set side by side.
fn cases() -> Vec<Case> {
    let mm = |ty, m, k, n| Case { ty, m, k, n, moe: None };
    let mut v = Vec::new();
    for ty in [
        ElemType::F16,
        ElemType::Q8_0,
        ElemType::Q4_0,
        ElemType::Q4K,
        ElemType::Q6K,
        ElemType::IQ4NL,
    ] {
        v.push(mm(ty, 14336, 4096, 1));
    }
    for m in [1024, 2048, 3072, 4096] {
        v.push(mm(ElemType::Q4_0, m, 4096, 1));
    }
    for ty in [ElemType::Q4_0, ElemType::Q4K] {
        v.push(mm(ty, 14336, 4096, 8));
    }
    for ty in [
        ElemType::F16,
        ElemType::Q8_0,
        ElemType::Q4_0,
        ElemType::Q4K,
        ElemType::IQ4NL,
    ] {
        v.push(mm(ty, 14336, 4096, 512));
    }
    for n in [1, 512] {
        v.push(Case {
            ty: ElemType::Q4_0,
            m: 768,
            k: 2048,
            n,
            moe: Some((128, 8)),
        });
    }
    v
}

/// Host data of a case, shared by every device.
struct Inputs {
    weights: Vec<u8>,
    x: Vec<f32>,
    ids: Vec<i32>,
}

fn inputs(c: &Case) -> Result<Inputs, String> {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
    let w: Vec<f32> = (0..c.weight_rows() * c.k)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let weights = quantize(c.ty, &w, c.k, c.weight_rows())?;
    let x: Vec<f32> = (0..c.k * c.n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let mut ids = Vec::new();
    if let Some((experts, used)) = c.moe {
        for _ in 0..c.n {
            let mut picked: Vec<i32> = Vec::with_capacity(used);
            while picked.len() < used {
                let e = rng.random_range(0..experts as i32);
                if !picked.contains(&e) {
                    picked.push(e);
                }
            }
            ids.extend(picked);
        }
    }
    Ok(Inputs { weights, x, ids })
}

/// The weight bytes one node reads: all of them, or for MUL_MAT_ID the experts its tokens use.
fn bytes_read(c: &Case, inp: &Inputs) -> usize {
    match c.moe {
        None => inp.weights.len(),
        Some((experts, _)) => {
            let mut seen = vec![false; experts];
            for &e in &inp.ids {
                seen[e as usize] = true;
            }
            inp.weights.len() / experts * seen.iter().filter(|s| **s).count()
        }
    }
}

/// Copies of the weights for nodes that read `read_bytes` of each: enough that the bytes read
/// span ROTATION_BYTES (MUL_MAT_ID reads only its tokens' experts), at least two.
fn copies_for(read_bytes: usize) -> usize {
    ROTATION_BYTES.div_ceil(read_bytes.max(1)).clamp(2, MAX_COPIES)
}

/// Nodes of the graph over `copies` copies whose nodes read `read_bytes` each: the copies in
/// turn, repeated up to CHAIN_MIN_NODES where the bytes read between two reads of one copy span
/// ROTATION_BYTES (so no cache holds them), else each once.
fn nodes_for(copies: usize, read_bytes: usize) -> usize {
    if copies.saturating_mul(read_bytes) >= ROTATION_BYTES {
        CHAIN_MIN_NODES.div_ceil(copies) * copies
    } else {
        copies
    }
}

/// A graph of `nodes` nodes of one case on one device over `copies` copies of the weights (node
/// i reads copy i % copies), its tensors in the device's buffer.
struct Bench {
    graph: DeviceGraph,
    first_out: *mut g::ggml_tensor,
}

impl Bench {
    fn new(dev_name: &str, c: &Case, inp: &Inputs, copies: usize, nodes: usize) -> Result<Bench, String> {
        let (k, m, n) = (c.k as i64, c.m as i64, c.n as i64);
        let f32_id = ElemType::F32.ggml_id();
        let mut weights = Vec::with_capacity(copies);
        let (mut x, mut ids, mut first_out) = (std::ptr::null_mut(), None, std::ptr::null_mut());
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: the closure only creates tensors in the context and expands the graph; the
        // data copied in below has each tensor's size (weights: the quantized rows of all copies'
        // shape; x: k × n f32; ids: used × n i32).
        unsafe {
            let graph = DeviceGraph::new(dev_name, copies + 2 * nodes + 8, threads, |ctx, gf| {
                x = match c.moe {
                    None => g::ggml_new_tensor_2d(ctx, f32_id, k, n),
                    Some((_, used)) => {
                        ids = Some(g::ggml_new_tensor_2d(ctx, ElemType::I32.ggml_id(), used as i64, n));
                        g::ggml_new_tensor_3d(ctx, f32_id, k, 1, n)
                    }
                };
                for _ in 0..copies {
                    weights.push(match c.moe {
                        Some((experts, _)) => g::ggml_new_tensor_3d(ctx, c.ty.ggml_id(), k, m, experts as i64),
                        None => g::ggml_new_tensor_2d(ctx, c.ty.ggml_id(), k, m),
                    });
                }
                for i in 0..nodes {
                    let w = weights[i % copies];
                    let out = match ids {
                        Some(ids) => g::ggml_mul_mat_id(ctx, w, x, ids),
                        None => g::ggml_mul_mat(ctx, w, x),
                    };
                    if i == 0 {
                        first_out = out;
                    }
                    g::ggml_build_forward_expand(gf, out);
                }
            })
            .map_err(|e| {
                format!(
                    "{e} ({copies} copies of {} weight bytes, {nodes} nodes)",
                    inp.weights.len()
                )
            })?;
            for &w in &weights {
                graph.set(w, &inp.weights);
            }
            graph.set(x, &inp.x);
            if let Some(ids) = ids {
                graph.set(ids, &inp.ids);
            }
            Ok(Bench { graph, first_out })
        }
    }

    fn compute(&self) -> Result<(), String> {
        self.graph.compute()
    }

    fn first_output(&self, len: usize) -> Vec<f32> {
        // SAFETY: the first node's output is f32 and holds len values (Case::out_len).
        unsafe { self.graph.get_f32(self.first_out, len) }
    }
}

/// One device's figures for a case, as `--json` prints them (tools/src/peer_report.rs reads them).
#[derive(Serialize)]
struct DeviceResult {
    device: String,
    us_median: f64,
    us_min: f64,
    /// Weight bytes the node reads over its median time, GB/s.
    read_gbs: f64,
    /// Against ggml's CPU backend; JSON has no NaN, so a non-finite one is written as null.
    nmse: f64,
}

#[derive(Serialize)]
struct CaseResult {
    #[serde(rename = "case")]
    name: String,
    weight_bytes: usize,
    read_bytes: usize,
    copies: usize,
    nodes: usize,
    results: Vec<DeviceResult>,
}

fn run_case(args: &Args, c: &Case) -> Result<CaseResult, String> {
    let name = c.name();
    let inp = inputs(c)?;
    let read_bytes = bytes_read(c, &inp);
    let copies = copies_for(read_bytes);
    let nodes = nodes_for(copies, read_bytes);
    let reference = {
        let b = Bench::new("CPU", c, &inp, 1, 1).map_err(|e| format!("{name}: reference: {e}"))?;
        b.compute().map_err(|e| format!("{name}: reference on CPU: {e}"))?;
        b.first_output(c.out_len())
    };
    let mut results = Vec::new();
    for dev in &args.devices {
        let b = Bench::new(dev, c, &inp, copies, nodes).map_err(|e| format!("{name}: {e}"))?;
        for _ in 0..2 {
            b.compute().map_err(|e| format!("{name} on {dev}: {e}"))?;
        }
        let mut us = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            let t = Instant::now();
            b.compute().map_err(|e| format!("{name} on {dev}: {e}"))?;
            us.push(t.elapsed().as_secs_f64() * 1e6 / nodes as f64);
        }
        us.sort_by(f64::total_cmp);
        let out = b.first_output(c.out_len());
        results.push(DeviceResult {
            device: dev.clone(),
            us_median: us[us.len() / 2],
            us_min: us[0],
            read_gbs: read_bytes as f64 / (us[us.len() / 2] * 1e-6) / 1e9,
            nmse: nmse(&reference, &out),
        });
        eprintln!(
            "backend_matmul_peer: {name} on {dev}: {:.1} µs per node (median of {}, {nodes} nodes over {copies} copies per graph)",
            us[us.len() / 2],
            args.runs
        );
    }
    Ok(CaseResult {
        name,
        weight_bytes: inp.weights.len(),
        read_bytes,
        copies,
        nodes,
        results,
    })
}

fn list_devices() {
    // SAFETY: registry enumeration; the names are NUL-terminated strings owned by ggml.
    unsafe {
        for i in 0..g::ggml_backend_dev_count() {
            let d = g::ggml_backend_dev_get(i);
            println!(
                "{}: {}",
                CStr::from_ptr(g::ggml_backend_dev_name(d)).to_string_lossy(),
                CStr::from_ptr(g::ggml_backend_dev_description(d)).to_string_lossy()
            );
        }
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("backend_matmul_peer: {e}");
            std::process::exit(2);
        }
    };
    for lib in &args.load {
        let p = CString::new(lib.as_str()).unwrap_or_default();
        // SAFETY: ggml's loader with a NUL-terminated path; the registration it returns is owned
        // by ggml's registry for the life of the process.
        if unsafe { g::ggml_backend_load(p.as_ptr()) }.is_null() {
            eprintln!("backend_matmul_peer: ggml_backend_load({lib}) returned NULL (ggml's log above says why)");
            std::process::exit(1);
        }
    }
    if args.list {
        list_devices();
        return;
    }
    for dev in &args.devices {
        let name = CString::new(dev.as_str()).unwrap_or_default();
        // SAFETY: a registry lookup with a NUL-terminated name.
        if unsafe { g::ggml_backend_dev_by_name(name.as_ptr()) }.is_null() {
            eprintln!("backend_matmul_peer: no ggml device named {dev} (see --list)");
            std::process::exit(1);
        }
    }
    let chosen: Vec<Case> = cases()
        .into_iter()
        .filter(|c| args.filter.is_empty() || args.filter.iter().any(|f| c.name().contains(f.as_str())))
        .collect();
    if chosen.is_empty() {
        eprintln!(
            "backend_matmul_peer: no case matches --filter {}",
            args.filter.join(",")
        );
        std::process::exit(1);
    }
    let mut done = Vec::new();
    for c in &chosen {
        match run_case(&args, c) {
            Ok(r) => done.push(r),
            Err(e) => {
                eprintln!("backend_matmul_peer: {e}");
                std::process::exit(1);
            }
        }
    }
    if args.json {
        #[derive(Serialize)]
        struct Report<'a> {
            tool: &'static str,
            runs: usize,
            devices: &'a [String],
            cases: &'a [CaseResult],
        }
        let report = Report {
            tool: "backend_matmul_peer",
            runs: args.runs,
            devices: &args.devices,
            cases: &done,
        };
        match serde_json::to_string(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("backend_matmul_peer: JSON: {e}");
                std::process::exit(1);
            }
        }
    } else {
        let first = &args.devices[0];
        println!(
            "µs per node, median of {} graphs (each node on its own weight copy); last column: each other device's time over {first}'s",
            args.runs
        );
        for r in &done {
            let base = r.results[0].us_median;
            let per: Vec<String> = r
                .results
                .iter()
                .map(|d| {
                    format!(
                        "{} {:.1} ({:.2} TB/s, nmse {:.1e})",
                        d.device,
                        d.us_median,
                        d.read_gbs / 1e3,
                        d.nmse
                    )
                })
                .collect();
            let ratios: Vec<String> = r.results[1..]
                .iter()
                .map(|d| format!("{:.2}x", d.us_median / base))
                .collect();
            println!("{:<58} {}  {}", r.name, per.join("  "), ratios.join(" "));
        }
    }
    let bad: Vec<String> = done
        .iter()
        .flat_map(|r| {
            r.results
                .iter()
                .filter(|d| d.nmse.is_nan() || d.nmse > NMSE_LIMIT)
                .map(move |d| format!("{} on {} (nmse {:.3e})", r.name, d.device, d.nmse))
        })
        .collect();
    if !bad.is_empty() {
        eprintln!(
            "backend_matmul_peer: {} result(s) differ from ggml CPU beyond NMSE {NMSE_LIMIT:e}: {}",
            bad.len(),
            bad.join("; ")
        );
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graphs_repeat_the_copies_only_where_the_cache_cannot_hold_them() {
        let mb = 1 << 20;
        // 117 MB read per node: five copies, ten turns (50 nodes).
        assert_eq!(copies_for(117 * mb), 5);
        assert_eq!(nodes_for(5, 117 * mb), 50);
        // MUL_MAT_ID reading 7 MB of its experts: 64 copies, 448 MB between two reads of one
        // copy, so each once.
        assert_eq!(copies_for(7 * mb), MAX_COPIES);
        assert_eq!(nodes_for(MAX_COPIES, 7 * mb), MAX_COPIES);
        // At least two copies however large.
        assert_eq!(copies_for(4096 * mb), 2);
        assert_eq!(nodes_for(2, 4096 * mb), CHAIN_MIN_NODES);
    }
}
