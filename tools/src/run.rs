//! `tandem test-ops`: every case on the device and on the scalar reference, compared.

use crate::cases::{self, Case};
use crate::common::{capture_panics, selected, take_panic};
use crate::compare::{check_quantized_copy, compare, Check};
use crate::data::{case_rng, fill_leaves, Instance};
use crate::progress::Progress;
use regex::Regex;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;
use tandem_backend::{Device, GraphStats};
use tandem_graph::{Op, TensorId};

pub struct TestOptions {
    pub ops: Vec<Op>,
    pub pattern: Option<Regex>,
    pub seed: u64,
    pub verbose: bool,
}

/// What happened to one case.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Passed; the measurement (e.g. `nmse 1.2e-9`).
    Pass(String),
    Fail(String),
    Skip(String),
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
    /// Nodes run by GPU kernels and by the CPU fallback (devices other than the host).
    gpu_nodes: usize,
    fallback_nodes: usize,
}

/// Runs the selected cases; true when at least one ran and none failed.
pub fn test_ops(dev: &Device, opts: &TestOptions) -> bool {
    capture_panics();
    let cases: Vec<Case> = cases::all()
        .into_iter()
        .filter(|c| selected(c.op, &c.name, &opts.ops, &opts.pattern))
        .collect();
    println!(
        "test-ops: device {} ({}), seed {}, {} cases",
        dev.name(),
        dev.description(),
        opts.seed,
        cases.len()
    );
    let t0 = Instant::now();
    let mut per_op: BTreeMap<Op, Tally> = BTreeMap::new();
    let mut progress = Progress::new("test-ops", "cases", cases.len());
    for case in &cases {
        let (outcome, stats) = catch_unwind(AssertUnwindSafe(|| run_case_stats(dev, case, opts.seed)))
            .unwrap_or_else(|_| (Outcome::Fail(format!("panicked: {}", take_panic())), None));
        let tally = per_op.entry(case.op).or_default();
        if let Some(s) = stats {
            tally.gpu_nodes += s.gpu_dispatches;
            tally.fallback_nodes += s.cpu_fallback_nodes;
        }
        match &outcome {
            Outcome::Pass(m) => {
                tally.passed += 1;
                if opts.verbose {
                    progress.println(&format!("  {}: OK ({m})", case.name));
                }
            }
            Outcome::Fail(why) => {
                tally.failed += 1;
                progress.println(&format!("  {}: FAIL: {why}", case.name));
            }
            Outcome::Skip(why) => {
                tally.skipped += 1;
                if opts.verbose {
                    progress.println(&format!("  {}: SKIP({why})", case.name));
                }
            }
        }
        progress.step(&case.name);
    }
    progress.finish();
    let mut total = Tally::default();
    println!("per op:");
    for (op, t) in &per_op {
        let placement = if is_host(dev) {
            String::new()
        } else {
            format!(
                " (nodes: {} on GPU kernels, {} on the CPU fallback)",
                t.gpu_nodes, t.fallback_nodes
            )
        };
        println!(
            "  {:<15} {} passed, {} failed, {} skipped{placement}",
            op.name(),
            t.passed,
            t.failed,
            t.skipped
        );
        total.passed += t.passed;
        total.failed += t.failed;
        total.skipped += t.skipped;
    }
    println!("time: {:.1} s", t0.elapsed().as_secs_f64());
    println!(
        "test-ops: {} passed, {} failed, {} skipped",
        total.passed, total.failed, total.skipped
    );
    if total.passed + total.failed == 0 {
        println!("test-ops: no case ran");
    }
    total.failed == 0 && total.passed > 0
}

/// Builds, fills and runs one case on `dev` and on the reference, and judges the output.
#[cfg(test)]
pub fn run_case(dev: &Device, case: &Case, seed: u64) -> Outcome {
    run_case_stats(dev, case, seed).0
}

/// Builds, fills and runs one case on `dev` and on the reference, and judges the output, with
/// the device's statistics of the run, when it ran.
fn run_case_stats(dev: &Device, case: &Case, seed: u64) -> (Outcome, Option<GraphStats>) {
    match run_case_inner(dev, case, seed) {
        Ok((o, s)) => (o, s),
        Err(why) => (Outcome::Fail(why), None),
    }
}

fn run_case_inner(dev: &Device, case: &Case, seed: u64) -> Result<(Outcome, Option<GraphStats>), String> {
    let (graph, out, fills) = case.instantiate().map_err(|e| format!("building the graph: {e}"))?;
    for &n in &graph.nodes {
        let t = graph.tensor(n);
        if t.op.is_view() {
            continue;
        }
        if !dev.supports(t, &graph.srcs(n)) {
            let what = format!(
                "device does not support node '{}' ({}, {})",
                t.name,
                t.op,
                describe_srcs(&graph, n)
            );
            // The host device must run every node; another device may decline.
            return if is_host(dev) {
                Err(what)
            } else {
                Ok((Outcome::Skip(what), None))
            };
        }
    }
    let mut reference = Instance::new(&graph)?;
    let mut device = Instance::new(&graph)?;
    let mut rng = case_rng(seed, &case.name);
    fill_leaves(&graph, &fills, &mut rng, usize::MAX, &mut [&mut reference, &mut device])?;
    for inst in [&mut reference, &mut device] {
        inst.poison_nodes();
        inst.write_sentinels();
    }

    for &n in &reference.graph.nodes {
        let g = &reference.graph;
        // SAFETY: `allocate_graph` gave every tensor `nbytes()` bytes (plus padding) in the
        // instance's buffer, which outlives the call; nothing else touches it meanwhile.
        unsafe { tandem_ops::reference::compute(g.tensor(n), &g.srcs(n)) }.map_err(|e| format!("reference: {e}"))?;
    }
    reference.check_sentinels().map_err(|e| format!("reference {e}"))?;

    let stats = match dev {
        Device::Gpu(g) => {
            let (graph, image, base) = device.image();
            // SAFETY: every tensor lies in the instance's image with its bytes.
            unsafe { g.compute_mirrored(graph, image, base) }.map_err(|e| format!("device: {e}"))?
        }
        // SAFETY: as above, for the device's copy (host memory, which the host device addresses).
        Device::Host(_) => unsafe { dev.compute(&device.graph) }.map_err(|e| format!("device: {e}"))?,
    };
    device.check_sentinels().map_err(|e| format!("device {e}"))?;

    judge(case, &reference, &device, out).map(|m| (Outcome::Pass(m), Some(stats)))
}

fn judge(case: &Case, reference: &Instance, device: &Instance, out: TensorId) -> Result<String, String> {
    let (r, d) = (reference.graph.tensor(out), device.graph.tensor(out));
    let src0 = d.src[0].map(|s| device.graph.tensor(s));
    let check = if r.ty.is_quantized() { Check::Bytes } else { case.check };
    // SAFETY: both outputs and their sources live in their instances' buffers with `nbytes()`
    // bytes each.
    let verdict = unsafe { compare(check, r, d, src0) }?;
    if d.op == Op::Cpy && d.ty.is_quantized() {
        if let Some(src) = src0 {
            // SAFETY: as above.
            unsafe { check_quantized_copy(src, d) }?;
        }
    }
    Ok(verdict)
}

/// The host device must support every case; other devices may decline some.
fn is_host(dev: &Device) -> bool {
    matches!(dev, Device::Host(_))
}

fn describe_srcs(g: &tandem_graph::Graph, n: TensorId) -> String {
    g.srcs(n)
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|t| format!("src{i} {}", t.describe())))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::Fill;
    use tandem_backend::HostDevice;
    use tandem_graph::ElemType;

    fn host() -> Device {
        Device::Host(HostDevice::new(1))
    }

    #[test]
    fn a_sound_case_passes_with_a_measurement() {
        let case = Case::new(Op::Add, "ADD(test)".into(), |s| {
            let a = s.input(ElemType::F32, &[33, 3])?;
            let b = s.input(ElemType::F32, &[33, 1])?;
            s.g.add(a, b)
        });
        match run_case(&host(), &case, 7) {
            Outcome::Pass(m) => assert!(m.starts_with("nmse"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_are_failures_with_their_text() {
        let bad_graph = Case::new(Op::Add, "ADD(bad)".into(), |s| {
            let a = s.input(ElemType::F32, &[5, 3])?;
            let b = s.input(ElemType::F32, &[4, 3])?;
            s.g.add(a, b)
        });
        match run_case(&host(), &bad_graph, 7) {
            Outcome::Fail(why) => assert!(why.contains("building the graph") && why.contains("ADD"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Indices drawn from [-1, 1) include -1: both sides must refuse, and the case fails.
        let bad_index = Case::new(Op::GetRows, "GET_ROWS(bad)".into(), |s| {
            let a = s.input(ElemType::F32, &[8, 4])?;
            let i = s.input_with(ElemType::I32, &[64], Fill::Uniform(-1.0, 0.0))?;
            s.g.get_rows(a, i)
        });
        match run_case(&host(), &bad_index, 7) {
            Outcome::Fail(why) => assert!(why.contains("GET_ROWS"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
