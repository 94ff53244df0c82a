//! MUL_MAT decode benchmark: tandem's CPU fallback against ggml's CPU backend, same weights,
//! same thread count, one process, plus the machine's streaming read bandwidth measured in the
//! same run (the ceiling a memory-bound GEMV can reach).
//!
//! `matmul_vs_ggml [--threads N] [--runs R] [--k K] [--m M] [--n N] [--types f16,q8_0,...] [--json]`

use llama_cpp_sys_2 as g;
use rand::{Rng, SeedableRng};
use std::time::Instant;
use tandem_graph::{ElemType, Op, Tensor, MAX_SRC};
use tandem_ops::CpuContext;
use tandem_tests::ggml::{quantize, DeviceGraph};

struct Args {
    threads: usize,
    runs: usize,
    k: usize,
    m: usize,
    /// Columns of src1 (1 = decode).
    n: usize,
    types: Vec<ElemType>,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        runs: 30,
        k: 4096,
        m: 14336,
        n: 1,
        types: vec![
            ElemType::F16,
            ElemType::Q8_0,
            ElemType::Q4_0,
            ElemType::Q4K,
            ElemType::Q6K,
        ],
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--threads" => a.threads = num(value()?)?,
            "--runs" => a.runs = num(value()?)?,
            "--k" => a.k = num(value()?)?,
            "--m" => a.m = num(value()?)?,
            "--n" => a.n = num(value()?)?,
            "--types" => {
                a.types = value()?
                    .split(',')
                    .map(|s| ElemType::from_name(s).ok_or(format!("unknown type {s}")))
                    .collect::<Result<_, _>>()?
            }
            "--json" => a.json = true,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.runs < 1 || a.threads < 1 {
        return Err("--runs and --threads must be positive".into());
    }
    Ok(a)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `f` `runs` times after 3 warm-up calls; returns the median in seconds.
fn time_median(runs: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// Streaming read bandwidth in GB/s: `threads` threads each sum a disjoint part of a 1 GiB
/// buffer; best of 5 passes.
fn read_bandwidth(threads: usize) -> f64 {
    let words = (1usize << 30) / 8;
    let buf: Vec<u64> = (0..words as u64).collect();
    let part = words.div_ceil(threads);
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = Instant::now();
        let total: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = buf
                .chunks(part)
                .map(|c| {
                    s.spawn(move || {
                        let mut acc = [0u64; 8];
                        for ch in c.chunks_exact(8) {
                            for i in 0..8 {
                                acc[i] = acc[i].wrapping_add(ch[i]);
                            }
                        }
                        acc.iter().fold(0u64, |a, b| a.wrapping_add(*b))
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .fold(0u64, |a, b| a.wrapping_add(b))
        });
        std::hint::black_box(total);
        best = best.max((words * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// ggml's CPU backend computing one `ggml_mul_mat` of a [k, m] weight and [k, n] f32 columns.
struct GgmlMulMat {
    graph: DeviceGraph,
    out: *mut g::ggml_tensor,
}

impl GgmlMulMat {
    fn new(
        ty: ElemType,
        k: usize,
        m: usize,
        n: usize,
        weights: &[u8],
        x: &[f32],
        threads: usize,
    ) -> Result<GgmlMulMat, String> {
        let (mut a, mut b, mut out) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: the closure only creates the three tensors and expands the graph; weights and
        // x hold the sizes of a and b.
        unsafe {
            let graph = DeviceGraph::new("CPU", 8, threads, |ctx, gf| {
                a = g::ggml_new_tensor_2d(ctx, ty.ggml_id(), k as i64, m as i64);
                b = g::ggml_new_tensor_2d(ctx, ElemType::F32.ggml_id(), k as i64, n as i64);
                out = g::ggml_mul_mat(ctx, a, b);
                g::ggml_build_forward_expand(gf, out);
            })?;
            graph.set(a, weights);
            graph.set(b, x);
            Ok(GgmlMulMat { graph, out })
        }
    }

    fn compute(&self) {
        self.graph.compute().expect("ggml graph compute");
    }

    fn result(&self, len: usize) -> Vec<f32> {
        // SAFETY: the output is f32 and holds m × n = len values.
        unsafe { self.graph.get_f32(self.out, len) }
    }
}

struct Row {
    ty: ElemType,
    weight_mb: f64,
    tandem_ms: f64,
    ggml_ms: f64,
    nmse: f64,
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("matmul_vs_ggml: {e}");
            std::process::exit(2);
        }
    };
    let (k, m, n) = (args.k, args.m, args.n);
    let bandwidth = read_bandwidth(args.threads);
    let mut rng = rand_pcg::Pcg64::seed_from_u64(42);
    let w: Vec<f32> = (0..k * m).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let x: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let ctx = CpuContext::new(args.threads);
    let mut rows = Vec::new();
    for &ty in &args.types {
        let weights = quantize(ty, &w, k, m).expect("ggml quantizes the weights");
        // tandem: the same bytes and columns, through the CPU fallback's entry point.
        let mut a = Tensor::new(ty, &[k as i64, m as i64]);
        a.data = weights.as_ptr() as usize;
        let mut b = Tensor::new(ElemType::F32, &[k as i64, n as i64]);
        b.data = x.as_ptr() as usize;
        let mut out = vec![0f32; m * n];
        let mut dst = Tensor::new(ElemType::F32, &[m as i64, n as i64]);
        dst.op = Op::MulMat;
        dst.data = out.as_mut_ptr() as usize;
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(&a);
        srcs[1] = Some(&b);
        // SAFETY: a, b and dst point at live buffers of their nbytes().
        let run = || unsafe { tandem_ops::cpu::compute(&ctx, &dst, &srcs) }.expect("tandem MUL_MAT");
        let tandem_s = time_median(args.runs, run);
        let ours = out.clone();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let peer = GgmlMulMat::new(ty, k, m, n, &weights, &x, args.threads).unwrap_or_else(|e| {
            eprintln!("matmul_vs_ggml: {e}");
            std::process::exit(1);
        });
        let ggml_s = time_median(args.runs, || peer.compute());
        let theirs = peer.result(m * n);
        drop(peer);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let err: f64 = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
            .sum();
        let norm: f64 = theirs.iter().map(|b| (*b as f64).powi(2)).sum();
        rows.push(Row {
            ty,
            weight_mb: weights.len() as f64 / 1e6,
            tandem_ms: tandem_s * 1e3,
            ggml_ms: ggml_s * 1e3,
            nmse: err / norm,
        });
    }
    let gbs = |r: &Row, ms: f64| r.weight_mb / ms; // MB per ms = GB/s
    if args.json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"type\":\"{}\",\"weight_mb\":{:.3},\"tandem_ms\":{:.4},\"ggml_ms\":{:.4},\"tandem_gbs\":{:.2},\"ggml_gbs\":{:.2},\"speedup\":{:.3},\"nmse\":{:.3e}}}",
                    r.ty,
                    r.weight_mb,
                    r.tandem_ms,
                    r.ggml_ms,
                    gbs(r, r.tandem_ms),
                    gbs(r, r.ggml_ms),
                    r.ggml_ms / r.tandem_ms,
                    r.nmse
                )
            })
            .collect();
        println!(
            "{{\"k\":{k},\"m\":{m},\"n\":{n},\"threads\":{},\"runs\":{},\"read_bandwidth_gbs\":{bandwidth:.2},\"results\":[{}]}}",
            args.threads,
            args.runs,
            items.join(",")
        );
    } else {
        println!(
            "MUL_MAT k={k} m={m} n={n}, {} threads, median of {} runs; streaming read bandwidth {bandwidth:.1} GB/s",
            args.threads, args.runs
        );
        println!(
            "{:<7} {:>9} {:>10} {:>10} {:>9} {:>9} {:>8} {:>10}",
            "type", "weight MB", "tandem ms", "ggml ms", "tandem %", "ggml %", "speedup", "nmse"
        );
        for r in &rows {
            println!(
                "{:<7} {:>9.1} {:>10.3} {:>10.3} {:>8.0}% {:>8.0}% {:>7.2}x {:>10.2e}",
                r.ty.name(),
                r.weight_mb,
                r.tandem_ms,
                r.ggml_ms,
                100.0 * gbs(r, r.tandem_ms) / bandwidth,
                100.0 * gbs(r, r.ggml_ms) / bandwidth,
                r.ggml_ms / r.tandem_ms,
                r.nmse
            );
        }
    }
    // A NaN NMSE counts as bad too.
    let bad = rows.iter().filter(|r| r.nmse.is_nan() || r.nmse > 5e-4).count();
    if bad > 0 || rows.is_empty() {
        eprintln!("matmul_vs_ggml: {bad} type(s) disagree with ggml beyond NMSE 5e-4");
        std::process::exit(1);
    }
}
