//! `tandem offload-bench`: the split node on its own. One GEMV (or MoE expert matmul) whose weight
//! lies in a GPU device's pinned host memory runs with every row on the CPU, every row on the GPU
//! (reading the weight over the bus), at fixed GPU shares in between, and at the share the
//! scheduler learns online (`ShareMode::Auto`). The sum of the two sides' rates is the most a
//! split could reach; the report says how much of it the split gets, how much faster it is than
//! the better side alone, and whether the learnt share is as good as the best fixed one.
//!
//! Every timed call reads weight bytes no cache holds from the calls before: a case rotates over
//! copies of its weight (and, for MUL_MAT_ID, over disjoint sets of experts in each copy) whose
//! reads together span [`ROTATION_BYTES`].

mod cases;
mod chart;
mod results;

pub use cases::{parse_filter, parse_shares, parse_types};

use crate::compare::nmse_of;
use crate::data::case_rng;
use cases::{expert_sets, Case, ROTATION_BYTES};
use rand::Rng;
use rand_pcg::Pcg64;
use regex::Regex;
use results::{gbps, header, row_text, summarize, AutoPoint, BenchReport, CaseResult, Point};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tandem_backend::config::max_threads;
use tandem_backend::gpu::split::{gpu_rows, ShapeReport, ShareMode};
use tandem_backend::gpu::{DeviceAlloc, GpuDevice, PinnedAlloc};
use tandem_backend::{devices, Config, Device, OffloadExec};
use tandem_graph::{ElemType, Graph, GraphBuilder, TensorId};
use tandem_ops::quant::quantize_row;

/// Untimed calls before each timed series (the first of a case also plans the graph and compiles
/// or loads the kernels).
const WARMUP: usize = 2;
/// Calls the learnt share gets to latch before its timed series starts anyway.
const AUTO_MAX_CALLS: usize = 200;
/// Tolerance of a MUL_MAT result (docs: Numerics).
const NMSE_LIMIT: f64 = 5e-4;
/// Weight rows drawn at random; the rest repeat them (quantizing a 14336 × 4096 weight row by row
/// would take longer than measuring it). A prime, so that rows a multiple of the split's 64-row
/// alignment (or an expert) apart differ, and a result taken from the wrong rows shows.
const DISTINCT_ROWS: usize = 251;
/// The rotation step whose result is compared with the CPU's.
const CHECK_VARIANT: usize = 0;
/// Seed of the weights, activations and expert choices.
const SEED: u64 = 42;
/// Device-memory offsets of the activations, result and ids are multiples of this.
const DEVICE_ALIGN: usize = 256;

/// What the bench says where there is no GPU device to measure.
pub const NO_GPU: &str = "offload-bench needs a GPU device (none found: see `tandem info`)";

/// What `tandem offload-bench` was asked for.
pub struct BenchOptions {
    pub types: Vec<ElemType>,
    pub n: i64,
    pub filter: Option<Regex>,
    pub reps: usize,
    pub threads: Option<usize>,
    pub sweep: Vec<f64>,
    pub json: bool,
    pub svg: Option<PathBuf>,
}

/// Runs the selected cases on the GPU device `device` (default: the first); `Ok(true)` when at
/// least one ran and none failed.
pub fn offload_bench(device: Option<&str>, opts: &BenchOptions) -> Result<bool, String> {
    let selected = cases::cases(&opts.types, opts.n, opts.filter.as_ref());
    if selected.is_empty() {
        let all: Vec<String> = cases::cases(&opts.types, opts.n, None)
            .into_iter()
            .map(|c| c.name)
            .collect();
        return Err(format!(
            "--filter '{}' matches no case (cases: {})",
            opts.filter.as_ref().map_or("", |f| f.as_str()),
            all.join(", ")
        ));
    }
    if let Some(t) = opts.threads {
        if t > max_threads() {
            return Err(format!(
                "--threads {t}: at most {} here (four per logical CPU)",
                max_threads()
            ));
        }
    }
    let dev = pick_gpu(device)?;
    let Device::Gpu(g) = &*dev else {
        return Err(NO_GPU.into());
    };
    // The split nodes themselves are measured: the online share's runs stay split even where the
    // GPU alone would run the graph faster (the way trials of a model run).
    g.set_way_trials(false);
    let exec = Config::get().offload_exec;
    if exec != OffloadExec::Split {
        return Err(format!(
            "offload-bench measures split nodes, which TANDEM_OFFLOAD_EXEC={} turns off: unset it or set it to split",
            match exec {
                OffloadExec::Cpu => "cpu",
                OffloadExec::Gpu => "gpu",
                OffloadExec::Split => "split",
            }
        ));
    }
    if let Some(t) = opts.threads {
        g.set_threads(t);
    }
    let threads = g.cpu().n_threads();
    if !opts.json {
        println!(
            "offload-bench: {} ({}), {threads} CPU threads, {} timed calls a share, weights in pinned host memory",
            dev.name(),
            dev.description(),
            opts.reps
        );
        println!("{}", header());
    }
    let mut results = Vec::new();
    for (i, case) in selected.iter().enumerate() {
        let rot = case.rotation();
        eprintln!(
            "offload-bench: {}/{} {}: {} weight copies ({} MiB pinned), {} rotation steps",
            i + 1,
            selected.len(),
            case.name,
            rot.copies,
            (rot.copies * case.weight_bytes()) >> 20,
            rot.variants
        );
        let mut r = blank_result(case);
        if let Err(e) = measure(g, case, opts, &mut r) {
            r.error = Some(e);
        }
        summarize(&mut r);
        if opts.json {
            eprintln!("offload-bench: {}", row_text(&r));
        } else {
            println!("{}", row_text(&r));
        }
        results.push(r);
    }
    let failed = results.iter().filter(|r| r.error.is_some()).count();
    let report = BenchReport {
        device: dev.name().to_string(),
        description: dev.description(),
        threads,
        reps: opts.reps,
        n: opts.n,
        types: opts.types.iter().map(|t| t.name().to_string()).collect(),
        sweep: opts.sweep.clone(),
        rotation_bytes: ROTATION_BYTES,
        cases: results,
    };
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    }
    if let Some(p) = &opts.svg {
        std::fs::write(p, chart::chart(&report)).map_err(|e| format!("--svg {}: {e}", p.display()))?;
    }
    if failed > 0 {
        eprintln!("offload-bench: {failed} of {} cases failed", report.cases.len());
    }
    Ok(failed == 0)
}

/// The GPU device named `name` (case-insensitive), or the first.
fn pick_gpu(name: Option<&str>) -> Result<Arc<Device>, String> {
    let gpus: Vec<Arc<Device>> = devices()
        .into_iter()
        .filter(|d| matches!(**d, Device::Gpu(_)))
        .collect();
    let Some(first) = gpus.first() else {
        return Err(NO_GPU.into());
    };
    match name {
        None => Ok(first.clone()),
        Some(n) => gpus
            .iter()
            .find(|d| d.name().eq_ignore_ascii_case(n))
            .cloned()
            .ok_or_else(|| {
                let names: Vec<&str> = gpus.iter().map(|d| d.name()).collect();
                format!(
                    "--device {n}: no GPU device of that name (GPU devices: {})",
                    names.join(", ")
                )
            }),
    }
}

fn blank_result(case: &Case) -> CaseResult {
    let rot = case.rotation();
    CaseResult {
        name: case.name.clone(),
        preset: case.proj.preset.into(),
        projection: case.proj.name.into(),
        op: if case.is_moe() { "MUL_MAT_ID" } else { "MUL_MAT" }.into(),
        ty: case.ty.name().into(),
        k: case.proj.k,
        m: case.proj.m,
        n: case.n,
        experts: case.proj.experts,
        used: case.proj.used,
        weight_bytes: case.weight_bytes(),
        read_bytes: case.read_bytes(),
        copies: rot.copies,
        variants: rot.variants,
        pinned_bytes: rot.copies * case.weight_bytes(),
        working_set_bytes: rot.variants * case.read_bytes(),
        ..Default::default()
    }
}

/// A case's graph (weight, activations, ids, result) placed for one rotation step, and the memory
/// it lives in.
struct Bench<'a> {
    g: &'a GpuDevice,
    /// One graph per rotation step.
    graphs: Vec<Graph>,
    next: usize,
    dev: DeviceAlloc,
    y_off: usize,
    y_bytes: usize,
    /// Held for `graphs`' weight addresses.
    _pinned: Vec<PinnedAlloc>,
}

impl Bench<'_> {
    /// Runs rotation step `v` once; its host time in µs.
    fn call(&mut self, v: usize) -> Result<f64, String> {
        let t0 = Instant::now();
        // SAFETY: every address of the graph points into `self.dev` or `self._pinned`, which live
        // as long as `self`, and nothing else uses them during the call.
        let stats = unsafe { self.g.compute(&self.graphs[v]) }.map_err(|e| e.to_string())?;
        let us = t0.elapsed().as_secs_f64() * 1e6;
        if stats.split_nodes != 1 {
            return Err(format!(
                "the node did not split ({} split nodes, {} GPU dispatches, {} CPU-fallback nodes)",
                stats.split_nodes, stats.gpu_dispatches, stats.cpu_fallback_nodes
            ));
        }
        Ok(us)
    }

    /// Runs the next rotation step.
    fn step(&mut self) -> Result<f64, String> {
        let v = self.next;
        self.next = (v + 1) % self.graphs.len();
        self.call(v)
    }

    /// [`WARMUP`] untimed steps, then `reps` timed ones: (median, least) µs.
    fn timed(&mut self, reps: usize) -> Result<(f64, f64), String> {
        for _ in 0..WARMUP {
            self.step()?;
        }
        let mut us = (0..reps).map(|_| self.step()).collect::<Result<Vec<f64>, String>>()?;
        us.sort_by(f64::total_cmp);
        Ok((us[us.len() / 2], us[0]))
    }

    /// The result of [`CHECK_VARIANT`], run once more.
    fn output(&mut self) -> Result<Vec<f32>, String> {
        self.call(CHECK_VARIANT)?;
        let mut b = vec![0u8; self.y_bytes];
        // SAFETY: the result lies at `y_off` inside `dev`, `y_bytes` long.
        unsafe { self.g.read(self.dev.ptr().offset(self.y_off), &mut b) }.map_err(|e| e.to_string())?;
        let v: Vec<f32> = b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        match v.iter().position(|x| !x.is_finite()) {
            Some(i) => Err(format!("result element {i} is {}", v[i])),
            None => Ok(v),
        }
    }

    /// One share's timed calls and check against `reference` (none: this is the reference).
    fn point(
        &mut self,
        m: i64,
        share: f64,
        reps: usize,
        reference: Option<&[f32]>,
    ) -> Result<(Point, Vec<f32>), String> {
        let what = |e: String| format!("share {share}: {e}");
        self.g.set_split_share(ShareMode::Fixed(share));
        let (us_median, us_min) = self.timed(reps).map_err(what)?;
        let out = self.output().map_err(what)?;
        let nmse = reference.map_or(Ok(0.0), |want| check(&out, want).map_err(what))?;
        let point = Point {
            share,
            gpu_rows: gpu_rows(m as usize, share),
            us_median,
            us_min,
            gbps: 0.0,
            nmse,
        };
        Ok((point, out))
    }
}

/// NMSE of `got` against `want`; an error beyond [`NMSE_LIMIT`].
fn check(got: &[f32], want: &[f32]) -> Result<f64, String> {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (a, b) in got.iter().zip(want) {
        err += (f64::from(*a) - f64::from(*b)).powi(2);
        norm += f64::from(*b).powi(2);
    }
    let e = nmse_of(err, norm);
    if e <= NMSE_LIMIT {
        Ok(e)
    } else {
        Err(format!(
            "NMSE {e:.3e} against the CPU-only result (limit {NMSE_LIMIT:e})"
        ))
    }
}

/// Measures one case into `r`: CPU only (the reference), GPU only, the sweep, the learnt share.
fn measure(g: &GpuDevice, case: &Case, opts: &BenchOptions, r: &mut CaseResult) -> Result<(), String> {
    let mut b = prepare(g, case)?;
    let m = case.proj.m;
    let bytes = case.read_bytes();
    let rate = |mut p: Point| {
        p.gbps = gbps(bytes, p.us_median);
        p
    };
    let (cpu, reference) = b.point(m, 0.0, opts.reps, None)?;
    r.cpu_only = Some(rate(cpu));
    r.gpu_only = Some(rate(b.point(m, 1.0, opts.reps, Some(&reference))?.0));
    for &s in &opts.sweep {
        let p = b.point(m, s, opts.reps, Some(&reference))?.0;
        r.sweep.push(rate(p));
    }
    // The scheduler has seen this shape's fixed-share calls (their rates carry over); its
    // share starts where a new shape's does and moves only in this mode.
    g.set_split_share(ShareMode::Auto);
    let key = case.split_key();
    let shape = || g.split_report().into_iter().find(|s| s.key == key);
    let mut calls_to_latch = None;
    for call in 1..=AUTO_MAX_CALLS {
        b.step().map_err(|e| format!("auto: {e}"))?;
        if shape().is_some_and(|s| s.latched) {
            calls_to_latch = Some(call);
            break;
        }
    }
    let (us_median, us_min) = b.timed(opts.reps).map_err(|e| format!("auto: {e}"))?;
    let learnt: ShapeReport = shape().ok_or("auto: the scheduler reports no state for this shape")?;
    let out = b.output().map_err(|e| format!("auto: {e}"))?;
    let nmse = check(&out, &reference).map_err(|e| format!("auto: {e}"))?;
    r.auto = Some(AutoPoint {
        point: rate(Point {
            share: learnt.share,
            gpu_rows: gpu_rows(m as usize, learnt.share),
            us_median,
            us_min,
            gbps: 0.0,
            nmse,
        }),
        calls_to_latch,
        latched: learnt.latched,
        gpu_rows_per_s: learnt.gpu_rows_per_s,
        cpu_rows_per_s: learnt.cpu_rows_per_s,
    });
    Ok(())
}

/// The weight copies in pinned memory, the activations, result and every step's ids in one device
/// allocation, and a graph per rotation step.
fn prepare<'a>(g: &'a GpuDevice, case: &Case) -> Result<Bench<'a>, String> {
    let (k, m, n) = (case.proj.k, case.proj.m, case.n);
    let rot = case.rotation();
    let mut rng = case_rng(SEED, &case.name);
    let mut gb = GraphBuilder::new();
    let (w, x, ids, y);
    if case.is_moe() {
        w = gb.new_tensor(case.ty, &[k, m, case.proj.experts]);
        x = gb.new_tensor(ElemType::F32, &[k, 1, n]);
        let i = gb.new_tensor(ElemType::I32, &[case.proj.used, n]);
        y = gb.mul_mat_id(w, x, i).map_err(|e| e.to_string())?;
        ids = Some(i);
    } else {
        w = gb.new_tensor(case.ty, &[k, m]);
        x = gb.new_tensor(ElemType::F32, &[k, n]);
        y = gb.mul_mat(w, x).map_err(|e| e.to_string())?;
        ids = None;
    }
    let graph = gb.build();
    if let Some(t) = graph.tensors.iter().enumerate().find_map(|(i, t)| {
        let placed = i == w.index() || i == x.index() || i == y.index() || ids.is_some_and(|d| d.index() == i);
        (!placed).then_some(t)
    }) {
        return Err(format!(
            "the graph has a tensor the bench does not place: {}",
            t.describe()
        ));
    }
    let size = |id: TensorId| graph.tensor(id).nbytes().next_multiple_of(DEVICE_ALIGN);
    let (x_off, y_off) = (0, size(x));
    let ids_off = y_off + size(y);
    let ids_stride = ids.map_or(0, size);
    let len = ids_off + rot.variants * ids_stride;

    let image = weight_image(case, &mut rng)?;
    let mut pinned = Vec::with_capacity(rot.copies);
    for _ in 0..rot.copies {
        let p = g
            .alloc_pinned(image.len())
            .map_err(|e| format!("pinned memory for a weight copy: {e}"))?;
        // SAFETY: the allocation holds `image.len()` bytes and nothing uses it yet.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), p.host_ptr(), image.len()) };
        pinned.push(p);
    }
    let dev = g.alloc(len).map_err(|e| format!("device memory: {e}"))?;
    let mut init = vec![0u8; len];
    let xs: Vec<u8> = (0..k * n)
        .flat_map(|_| rng.random_range(-1.0f32..1.0).to_le_bytes())
        .collect();
    init[x_off..x_off + xs.len()].copy_from_slice(&xs);
    let sets = expert_sets(case, rot, &mut rng);
    for (v, set) in sets.iter().enumerate() {
        let at = ids_off + v * ids_stride;
        for (j, e) in set.iter().enumerate() {
            init[at + 4 * j..at + 4 * j + 4].copy_from_slice(&e.to_le_bytes());
        }
    }
    // SAFETY: the allocation is `len` bytes long.
    unsafe { g.write(dev.ptr(), &init) }.map_err(|e| e.to_string())?;

    let base = dev.ptr().0 as usize;
    let graphs = (0..rot.variants)
        .map(|v| {
            let mut gv = graph.clone();
            gv.tensor_mut(w).data = pinned[v / rot.sets_per_copy].host_ptr() as usize;
            gv.tensor_mut(x).data = base + x_off;
            gv.tensor_mut(y).data = base + y_off;
            if let Some(i) = ids {
                gv.tensor_mut(i).data = base + ids_off + v * ids_stride;
            }
            gv
        })
        .collect::<Vec<Graph>>();
    Ok(Bench {
        g,
        graphs,
        next: 0,
        dev,
        y_off,
        y_bytes: graph.tensor(y).nbytes(),
        _pinned: pinned,
    })
}

/// One copy of the weight: [`DISTINCT_ROWS`] rows of values in [-1, 1) through the type's
/// quantizer, repeated.
fn weight_image(case: &Case, rng: &mut Pcg64) -> Result<Vec<u8>, String> {
    let k = case.proj.k as usize;
    let row_bytes = case
        .ty
        .row_size(case.proj.k)
        .ok_or_else(|| format!("k={k} is no whole number of {} blocks", case.ty))?;
    let rows = case.weight_bytes() / row_bytes;
    let drawn = rows.min(DISTINCT_ROWS);
    let mut out = vec![0u8; rows * row_bytes];
    let mut vals = vec![0f32; k];
    for row in out.chunks_exact_mut(row_bytes).take(drawn) {
        vals.iter_mut().for_each(|v| *v = rng.random_range(-1.0..1.0));
        quantize_row(case.ty, &vals, row).map_err(|e| e.to_string())?;
    }
    for r in drawn..rows {
        let from = (r % drawn) * row_bytes;
        out.copy_within(from..from + row_bytes, r * row_bytes);
    }
    Ok(out)
}
