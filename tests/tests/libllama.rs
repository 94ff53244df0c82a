//! The real libllama (from `llama-cpp-sys-2`) runs tiny random-weight llama and qwen3moe models:
//! on ggml's CPU backend, and with every layer on tandem's TANDEM_HOST device through the plugin.
//!
//! Every ggml CPU run happens before the plugin is loaded. Once it is, TANDEM_HOST (an ACCEL
//! device) joins every libllama context, CPU-only ones included, and takes the weights and most
//! nodes of a "CPU" run: such a baseline compares tandem with itself, and libllama even picks
//! split attention there (its flash-attention probe sees FLASH_ATTN_EXT land off the CPU).

use llama_cpp_sys_2 as sys;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tandem_graph::ElemType;
use tandem_tests::llama_run::{greedy_with, nmse, trace_prompt, Attention, GreedyRun, NodeOut, Options, Placement};
use tandem_tests::tiny_models::{write_model, Arch, TinyConfig};

const PROMPT: &str = "hello world, the tiny model";
const STEPS: usize = 32;
const THREADS: i32 = 2;
/// ggml's CPU threads spin at every barrier: on a busy 2-core machine two of them decoded
/// these models at ~2 tok/s, one at ~2000 tok/s.
const CPU_THREADS: i32 = 1;

/// One model and what ggml's CPU backend made of it under each of [`contexts`].
struct Baseline {
    cfg: TinyConfig,
    path: PathBuf,
    runs: Vec<(Options, GreedyRun)>,
    /// The first context's run once more, to check determinism.
    again: GreedyRun,
}

impl Baseline {
    fn run(&self, opts: Options) -> &GreedyRun {
        &self
            .runs
            .iter()
            .find(|(o, _)| *o == opts)
            .expect("a baseline for these options")
            .1
    }
}

const FLASH: Options = Options {
    attention: Attention::Flash,
    f32_kv_cache: false,
};
const SPLIT: Options = Options {
    attention: Attention::Split,
    f32_kv_cache: false,
};
const SPLIT_F32_KV: Options = Options {
    attention: Attention::Split,
    f32_kv_cache: true,
};

/// The contexts each model is compared in. f16 models: flash and split attention over
/// libllama's default f16 K/V cache. q8_0/q4_0 models: split attention over an f32 cache (see
/// `tiny_quantized_models_on_tandem_host_match_cpu` for why).
fn contexts(ty: ElemType) -> &'static [Options] {
    if ty == ElemType::F16 {
        &[FLASH, SPLIT]
    } else {
        &[SPLIT_F32_KV]
    }
}

/// The TANDEM_HOST device handle, owned by ggml's registry for the life of the process.
struct Dev(sys::ggml_backend_dev_t);
// SAFETY: a registry device handle is a process-global, immutable-after-load pointer; ggml's
// device functions may be called on it from any thread.
unsafe impl Send for Dev {}
// SAFETY: as above.
unsafe impl Sync for Dev {}

struct Setup {
    baselines: Vec<Baseline>,
    /// ggml CPU's per-node outputs of llama q8_0's prompt pass with flash attention.
    cpu_trace: Vec<NodeOut>,
    tandem: Result<Dev, String>,
}

fn models() -> Vec<TinyConfig> {
    let mut v = Vec::new();
    for arch in [Arch::Llama, Arch::Qwen3Moe] {
        for ty in [ElemType::F16, ElemType::Q8_0, ElemType::Q4_0] {
            v.push(TinyConfig::new(arch, ty));
        }
    }
    v
}

fn name(cfg: &TinyConfig) -> String {
    format!("{} {}", cfg.arch.name(), cfg.weight_type)
}

/// Runs every ggml CPU baseline, then loads the plugin; once per process, whatever test asks first.
fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        tandem_tests::logs::quiet();
        // SAFETY: global libllama initialisation (registers ggml's CPU backend), once.
        unsafe { sys::llama_backend_init() };
        let dir = model_dir();
        let cpu = |path: &PathBuf, opts: Options| {
            greedy_with(path, Placement::Cpu, opts, PROMPT, STEPS, CPU_THREADS)
                .unwrap_or_else(|e| panic!("{} on ggml CPU: {e}", path.display()))
        };
        let baselines: Vec<Baseline> = models()
            .into_iter()
            .map(|cfg| {
                let path = write_model(&dir, &cfg);
                let runs: Vec<(Options, GreedyRun)> =
                    contexts(cfg.weight_type).iter().map(|&o| (o, cpu(&path, o))).collect();
                let again = cpu(&path, runs[0].0);
                Baseline { cfg, path, runs, again }
            })
            .collect();
        let traced = &baselines[1];
        assert_eq!(name(&traced.cfg), "llama q8_0");
        let cpu_trace = trace_prompt(&traced.path, Placement::Cpu, FLASH, PROMPT, CPU_THREADS)
            .unwrap_or_else(|e| panic!("tracing llama q8_0 on ggml CPU: {e}"));
        let tandem = tandem_tests::plugin::plugin_path()
            .and_then(|p| tandem_tests::plugin::load_tandem_host(&p))
            .map(Dev);
        Setup {
            baselines,
            cpu_trace,
            tandem,
        }
    })
}

/// `<tmp>/tandem-tiny-libllama/<pid>`, made empty. The tests share the model files until the
/// process ends, so no test can remove them; folders of processes that are gone go instead.
fn model_dir() -> PathBuf {
    let root = std::env::temp_dir().join("tandem-tiny-libllama");
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let pid = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            std::fs::remove_dir_all(entry.path()).ok();
        }
    }
    let dir = root.join(std::process::id().to_string());
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

fn tandem_dev() -> sys::ggml_backend_dev_t {
    match &setup().tandem {
        Ok(d) => d.0,
        Err(e) => panic!("{e}"),
    }
}

/// Every tiny model loads, tokenizes and decodes deterministically on ggml's CPU backend.
#[test]
fn tiny_models_run_on_ggml_cpu() {
    for b in &setup().baselines {
        let a = &b.runs[0].1;
        assert_eq!(a.generated, b.again.generated, "{}: two CPU runs differ", name(&b.cfg));
        assert_eq!(a.generated.len(), STEPS);
        let distinct: std::collections::BTreeSet<_> = a.generated.iter().collect();
        eprintln!(
            "{}: prompt {} tokens, {} distinct generated, {:.1} tok/s on ggml CPU",
            name(&b.cfg),
            a.prompt_tokens.len(),
            distinct.len(),
            a.decode_tok_per_s
        );
        for (_, run) in &b.runs {
            assert!(
                run.logits.iter().all(|l| l.iter().all(|x| x.is_finite())),
                "{}: non-finite logits",
                name(&b.cfg)
            );
        }
    }
}

/// Every node of the baseline's prompt pass was computed in a ggml CPU buffer: no other
/// backend took part in what the tests call ggml's CPU run.
#[test]
fn cpu_baseline_never_touches_tandem() {
    let trace = &setup().cpu_trace;
    assert!(trace.len() > 50, "only {} nodes traced", trace.len());
    assert!(
        trace.iter().any(|n| n.op == "FLASH_ATTN_EXT"),
        "no flash attention in the traced graph"
    );
    for n in trace {
        assert_eq!(
            n.buffer, "CPU",
            "node {} ({}) of the CPU baseline ran in {}",
            n.name, n.op, n.buffer
        );
    }
}

/// Runs every model of `types` on TANDEM_HOST in each of its [`contexts`] and asserts the ggml
/// CPU baseline's greedy tokens and logits within NMSE 5e-4 at every step.
fn compare_on_tandem_host(types: &[ElemType]) {
    let dev = tandem_dev();
    for b in setup().baselines.iter().filter(|b| types.contains(&b.cfg.weight_type)) {
        for &opts in contexts(b.cfg.weight_type) {
            compare_one(b, opts, dev);
        }
    }
}

fn compare_one(b: &Baseline, opts: Options, dev: sys::ggml_backend_dev_t) {
    compare_on(b, opts, dev, "TANDEM_HOST")
}

fn compare_on(b: &Baseline, opts: Options, dev: sys::ggml_backend_dev_t, dev_name: &str) {
    compare_placed(b, opts, Placement::Device(dev), dev_name)
}

fn compare_placed(b: &Baseline, opts: Options, placement: Placement, dev_name: &str) {
    let name = format!(
        "{} ({:?}{})",
        name(&b.cfg),
        opts.attention,
        if opts.f32_kv_cache { ", f32 K/V" } else { "" }
    );
    let cpu = b.run(opts);
    let tan = greedy_with(&b.path, placement, opts, PROMPT, STEPS, THREADS)
        .unwrap_or_else(|e| panic!("{name} on {dev_name}: {e}"));
    let per_step: Vec<f64> = cpu.logits.iter().zip(&tan.logits).map(|(a, b)| nmse(a, b)).collect();
    let worst = per_step.iter().copied().fold(0.0, f64::max);
    eprintln!(
            "{name}: decode {:.1} tok/s ggml CPU vs {:.1} tok/s {dev_name}; logits NMSE first step {:.1e}, worst {worst:.1e}",
            cpu.decode_tok_per_s, tan.decode_tok_per_s, per_step[0]
        );
    assert_eq!(cpu.generated, tan.generated, "{name}: greedy tokens differ");
    assert!(worst <= 5e-4, "{name}: logits NMSE {worst:.3e} > 5e-4");
}

/// ggml loads tandem's plugin; every layer of the f16 models on TANDEM_HOST gives the CPU's
/// greedy tokens and logits, with flash attention and with split attention.
#[test]
fn tiny_f16_models_on_tandem_host_match_cpu() {
    compare_on_tandem_host(&[ElemType::F16]);
}

/// The same for q8_0 and q4_0 weights, with split attention over an f32 K/V cache; logits agree
/// to NMSE ~6e-15 after the prompt. Every matmul here quantizes its activations to q8_0, which
/// turns any difference that moves a value across a rounding boundary into q8_0 rounding noise:
/// - With flash attention ggml's CPU rounds q and its V accumulator to f16 (prompts under 64
///   tokens, and decode): its FLASH_ATTN_EXT is 1.4e-7 NMSE off an f64 reference where tandem's
///   is 5e-15 (`flash_attention_is_closer_to_f64_on_tandem`); the next matmuls grow that to
///   logits NMSE 1.0e-4..1.6e-4 and greedy tokens part (llama q8_0 at step 21).
/// - With an f16 cache, tandem and ggml summing q8_0 dot products in different orders (1-ulp
///   differences, NMSE 6e-15) flipped one f16 rounding of qwen3moe q8_0's K cache (9.8e-4); that
///   grew to logits NMSE 5.7e-5 and tokens parted at step 3.
#[test]
fn tiny_quantized_models_on_tandem_host_match_cpu() {
    compare_on_tandem_host(&[ElemType::Q8_0, ElemType::Q4_0]);
}

/// Every tiny model with every layer on the first GPU device, `TANDEM0`: GPU kernels where a
/// registration takes the node, tandem's CPU fallback elsewhere (run it with
/// `TANDEM_DISABLE_DISPATCH=hip.gemv,hip.mul_mat` to put the matmuls and attention on the
/// fallback). Same tokens and logits as ggml's CPU. Skips, saying so, without a GPU.
#[test]
fn tiny_models_on_tandem_gpu_match_cpu() {
    let s = setup();
    if let Err(e) = &s.tandem {
        panic!("{e}");
    }
    // SAFETY: a registry lookup with a NUL-terminated name; the handle is ggml's.
    let dev = unsafe { sys::ggml_backend_dev_by_name(c"TANDEM0".as_ptr()) };
    if dev.is_null() {
        eprintln!("SKIP tiny_models_on_tandem_gpu_match_cpu: no GPU device TANDEM0 (`tandem info` says why)");
        return;
    }
    for b in &s.baselines {
        for &opts in contexts(b.cfg.weight_type) {
            compare_on(b, opts, dev, "TANDEM0");
        }
    }
}

/// Layer 0 and the output layer in TANDEM0's pinned host memory (libllama's `-ngl 1 --no-mmap`), where
/// tandem runs their matmuls as split nodes (`TANDEM_OFFLOAD_EXEC`, GPU and CPU rows together),
/// layer 1 on the GPU: the CPU's greedy tokens and logits, in every context of the model.
#[test]
fn tiny_models_with_host_layers_on_tandem_gpu_match_cpu() {
    let s = setup();
    if let Err(e) = &s.tandem {
        panic!("{e}");
    }
    // SAFETY: a registry lookup with a NUL-terminated name; the handle is ggml's.
    let dev = unsafe { sys::ggml_backend_dev_by_name(c"TANDEM0".as_ptr()) };
    if dev.is_null() {
        eprintln!(
            "SKIP tiny_models_with_host_layers_on_tandem_gpu_match_cpu: no GPU device TANDEM0 (`tandem info` says why)"
        );
        return;
    }
    for b in &s.baselines {
        for &opts in contexts(b.cfg.weight_type) {
            compare_placed(b, opts, Placement::Layers(dev, 1), "TANDEM0 (-ngl 1)");
        }
    }
}

/// FLASH_ATTN_EXT of both layers of llama q8_0's prompt, from each side's own q and f16 K/V
/// cache, against causal attention in f64: tandem stays at f32 rounding, ggml's CPU does not.
#[test]
fn flash_attention_is_closer_to_f64_on_tandem() {
    let s = setup();
    let b = &s.baselines[1];
    let tan = trace_prompt(&b.path, Placement::Device(tandem_dev()), FLASH, PROMPT, THREADS)
        .unwrap_or_else(|e| panic!("tracing llama q8_0 on TANDEM_HOST: {e}"));
    for layer in 0..b.cfg.n_layer as usize {
        let err = |t: &[NodeOut]| {
            let out = t
                .iter()
                .filter(|n| n.op == "FLASH_ATTN_EXT")
                .nth(layer)
                .expect("a FLASH_ATTN_EXT node");
            nmse_f64(&attention_f64(t, layer), &out.values)
        };
        let (cpu, tandem) = (err(&s.cpu_trace), err(&tan));
        eprintln!("layer {layer}: FLASH_ATTN_EXT NMSE vs f64: ggml CPU {cpu:.2e}, TANDEM_HOST {tandem:.2e}");
        assert!(
            tandem < 1e-12,
            "layer {layer}: tandem's flash attention is {tandem:.2e} off f64"
        );
        assert!(tandem < cpu, "layer {layer}: tandem {tandem:.2e} vs ggml CPU {cpu:.2e}");
    }
}

/// Causal single-sequence attention in f64 from a trace's roped q (`Qcur-L`, [d, head, token])
/// and the f16 K/V cache rows written by SET_ROWS ([d * kv_head, cell]); output [d, head, token].
fn attention_f64(t: &[NodeOut], layer: usize) -> Vec<f64> {
    let find = |name: String, op: &str| {
        t.iter()
            .find(|n| n.name == name && n.op == op && !n.values.is_empty())
            .unwrap_or_else(|| panic!("no {name} ({op}) in the trace"))
    };
    let q = find(format!("Qcur-{layer}"), "ROPE");
    let k = find(format!("cache_k_l{layer} (view)"), "SET_ROWS");
    let v = find(format!("cache_v_l{layer} (view)"), "SET_ROWS");
    let (d, n_head, n_tok) = (q.ne[0] as usize, q.ne[1] as usize, q.ne[2] as usize);
    let (k_row, v_row) = (k.ne[0] as usize, v.ne[0] as usize);
    let group = n_head / (k_row / d);
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0f64; d * n_head * n_tok];
    for tok in 0..n_tok {
        for h in 0..n_head {
            let kv = (h / group) * d;
            let qr = &q.values[(tok * n_head + h) * d..][..d];
            // The prompt fills cells 0..n_tok in order; token `tok` sees cells 0..=tok.
            let s: Vec<f64> = (0..=tok)
                .map(|j| {
                    let kr = &k.values[j * k_row + kv..][..d];
                    scale * qr.iter().zip(kr).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>()
                })
                .collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = w.iter().sum();
            for e in 0..d {
                let acc: f64 = w
                    .iter()
                    .enumerate()
                    .map(|(j, wj)| wj * v.values[j * v_row + kv + e] as f64)
                    .sum();
                out[(tok * n_head + h) * d + e] = acc / z;
            }
        }
    }
    out
}

fn nmse_f64(reference: &[f64], x: &[f32]) -> f64 {
    assert_eq!(reference.len(), x.len());
    let num: f64 = reference.iter().zip(x).map(|(r, v)| (r - *v as f64).powi(2)).sum();
    num / reference.iter().map(|r| r * r).sum::<f64>()
}

/// The Q4_K_M mix the benchmark writes (`bench_model gen --type q4_K_M`) is llama.cpp's: the
/// output matrix and, in the layers `use_more_bits` picks, `attn_v` and `ffn_down` in q6_K,
/// every other matrix in q4_K; and libllama loads and decodes such a model.
#[test]
fn q4_k_m_models_have_llama_cpps_mix_and_decode() {
    // Beside the baselines' files (model_dir() would empty the folder they share).
    let dir = setup().baselines[0]
        .path
        .parent()
        .expect("a model folder")
        .join("q4_k_m");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    // Eight layers: six bits in layers 0, 3, 6 and 7 (the first and last eighth, every third
    // between).
    let picked: Vec<u32> = (0..8)
        .filter(|&l| tandem_tests::tiny_models::q4_k_m_more_bits(l, 8))
        .collect();
    assert_eq!(picked, [0, 3, 6, 7]);
    for arch in [Arch::Llama, Arch::Qwen3Moe] {
        let cfg = TinyConfig {
            n_layer: 8,
            n_embd: 256,
            n_ff: if arch == Arch::Llama { 512 } else { 256 },
            q4_k_m: true,
            ..TinyConfig::new(arch, ElemType::Q4K)
        };
        let path = write_model(&dir, &cfg);
        let down = if arch == Arch::Llama {
            "ffn_down"
        } else {
            "ffn_down_exps"
        };
        let mut want = vec![
            ("token_embd.weight".to_string(), ElemType::Q4K),
            ("output.weight".to_string(), ElemType::Q6K),
        ];
        for l in 0..8u32 {
            let six = if picked.contains(&l) {
                ElemType::Q6K
            } else {
                ElemType::Q4K
            };
            want.push((format!("blk.{l}.attn_q.weight"), ElemType::Q4K));
            want.push((format!("blk.{l}.attn_k.weight"), ElemType::Q4K));
            want.push((format!("blk.{l}.attn_v.weight"), six));
            want.push((format!("blk.{l}.attn_output.weight"), ElemType::Q4K));
            want.push((format!("blk.{l}.{down}.weight"), six));
        }
        let path_c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: gguf reads the file it just wrote; the context is freed below and every name
        // is a NUL-terminated string that outlives its call.
        unsafe {
            let params = sys::gguf_init_params {
                no_alloc: true,
                ctx: std::ptr::null_mut(),
            };
            let g = sys::gguf_init_from_file(path_c.as_ptr(), params);
            assert!(!g.is_null(), "reading {}", path.display());
            for (name, ty) in &want {
                let n = std::ffi::CString::new(name.as_str()).unwrap();
                let id = sys::gguf_find_tensor(g, n.as_ptr());
                assert!(id >= 0, "{}: no tensor {name}", path.display());
                assert_eq!(
                    sys::gguf_get_tensor_type(g, id),
                    ty.ggml_id(),
                    "{}: {name} should be {ty}",
                    path.display()
                );
            }
            sys::gguf_free(g);
        }
        let run = greedy_with(&path, Placement::Cpu, SPLIT_F32_KV, PROMPT, 4, CPU_THREADS)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(run.generated.len(), 4, "{}", path.display());
        assert!(
            run.logits.iter().flatten().all(|x| x.is_finite()),
            "{}: logits not finite",
            path.display()
        );
    }
}
