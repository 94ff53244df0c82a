//! Model benchmark through the real libllama, llama-bench style: prompt processing of `--pp`
//! tokens and generation of `--tg` tokens, at a context depth, on one ggml device, with flash
//! attention on or off, repeated, median and spread.
//!
//! `bench_model gen --preset llama8b|qwen3moe --type f16|q8_0|q4_0|q4_K|q4_K_M [--layers N] --out FILE`
//!   writes a random-weight GGUF of a preset's shapes (Llama-3-8B: 4096 wide, 32/8 heads, FFN
//!   14336, vocabulary 128256; Qwen3-30B-A3B: 2048 wide, 32/4 heads of 128, 128 experts of 768,
//!   8 used, vocabulary 151936), 16 and 8 layers by default; `q4_K_M` is llama.cpp's mix (q4_K,
//!   with the output and some layers' `attn_v` and `ffn_down` in q6_K). Weights of one shape
//!   share their random bytes, so writing takes seconds; the tokens a model generates mean
//!   nothing.
//!
//! `bench_model run --model FILE [--model FILE ...] --device DEV[,DEV...] [--flash on|off|both]
//!   [--pp N] [--tg N] [--depth N[,N...]] [--reps N] [--threads N] [--ngl N]
//!   [--override REGEX=BUFT ...] [--no-mmap] [--greedy N] [--load LIB ...] [--json]`
//!   loads each `--load` library with `ggml_backend_load` (tandem's plugin, a CUDA module),
//!   then ggml's own backends, and runs every model × device × flash × depth: one warm-up pass
//!   (kernel compilation, first plans) and `--reps` timed ones, each on a cleared context: the
//!   depth's tokens decoded untimed, then `--pp` prompt tokens in one batch (prefill tok/s) and
//!   `--tg` tokens one at a time (decode tok/s). Times include `llama_synchronize`. Each
//!   context gets a persistent ggml CPU thread pool of `--threads`, as llama.cpp's tools give
//!   theirs. Prints one line per case and, with `--json`, a JSON document on stdout.
//!   `--ngl` and `--override` place weights as llama.cpp's `-ngl` and `-ot` do: the last N
//!   layers on the device (default all), and tensors whose name matches REGEX in buffer type
//!   BUFT: `CPU` (llama.cpp's meaning: the CPU's list, whose first entry is the device's pinned
//!   host memory where it has one), a device's name (its memory) or `<device>_Host` (its
//!   pinned host memory), e.g. `--override exps=CPU`. libllama maps the file and keeps CPU
//!   layers' weights in it unless `--no-mmap` (llama.cpp's `--no-mmap`): then they are read into
//!   the device's pinned host memory (`<device>_Host`), where tandem runs split nodes on them.
//!   `--greedy N` also generates N tokens greedily (argmax of the logits, lowest id on a tie)
//!   after a fixed 16-token prompt on each case's device and on ggml's CPU backend alone (in a
//!   child process that loads no library and no `GGML_BACKEND_PATH`, the model with no device,
//!   every hardware thread; once per model and flash setting), and compares them: a case whose
//!   tokens differ from the CPU's fails, naming the first that differs and the two logits'
//!   margins there (a near tie of the CPU's reads as a margin close to 0). Each case also
//!   reports the largest normalized squared error (NMSE) of its logits against the CPU's over
//!   the steps both fed the same tokens.
//!
//! `bench_model greedy-cpu --model FILE --flash on|off --greedy N [--threads N] [--logits FILE]`
//!   prints that reference: the greedy tokens and each step's margin (best logit minus the
//!   second), as JSON, and writes each step's logits to FILE (f32, native order).
//!
//! Exits non-zero when any case fails or none ran.

use llama_cpp_sys_2 as sys;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tandem_graph::ElemType;
use tandem_tests::tiny_models::{write_model, Arch, TinyConfig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("gen") => gen(&args[1..]),
        Some("run") => run(&args[1..]),
        Some("greedy-cpu") => greedy_cpu_main(&args[1..]),
        _ => Err("usage: bench_model gen ... | bench_model run ... (see the file's doc comment)".into()),
    };
    if let Err(e) = result {
        eprintln!("bench_model: {e}");
        std::process::exit(1);
    }
}

/// `--flag value` pairs and bare `--flag`s.
fn flags(args: &[String], bare: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(f) = it.next() {
        if !f.starts_with("--") {
            return Err(format!("unexpected argument {f}"));
        }
        if bare.contains(&f.as_str()) {
            out.push((f.clone(), String::new()));
        } else {
            let v = it.next().ok_or(format!("{f} needs a value"))?;
            out.push((f.clone(), v.clone()));
        }
    }
    Ok(out)
}

fn num(flag: &str, v: &str) -> Result<usize, String> {
    v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"))
}

fn gen(args: &[String]) -> Result<(), String> {
    let (mut preset, mut ty, mut layers, mut out) = (None, None, None, None);
    let mut k_mix = false;
    for (f, v) in flags(args, &[])? {
        match f.as_str() {
            "--preset" => preset = Some(v),
            "--type" if v.eq_ignore_ascii_case("q4_k_m") => {
                ty = Some(ElemType::Q4K);
                k_mix = true;
            }
            "--type" => ty = Some(ElemType::from_name(&v).ok_or(format!("--type {v}: unknown type"))?),
            "--layers" => layers = Some(num(&f, &v)? as u32),
            "--out" => out = Some(PathBuf::from(v)),
            _ => return Err(format!("gen: unknown flag {f}")),
        }
    }
    let ty = ty.ok_or("gen needs --type")?;
    if !matches!(ty, ElemType::F16 | ElemType::Q8_0 | ElemType::Q4_0 | ElemType::Q4K) {
        return Err(format!("--type {ty}: one of f16, q8_0, q4_0, q4_K, q4_K_M"));
    }
    let out = out.ok_or("gen needs --out")?;
    let cfg = match preset.as_deref() {
        Some("llama8b") => TinyConfig {
            n_layer: layers.unwrap_or(16),
            n_embd: 4096,
            n_head: 32,
            n_head_kv: 8,
            n_ff: 14336,
            n_ctx: 40960,
            n_vocab: 128256,
            shared_weights: true,
            q4_k_m: k_mix,
            ..TinyConfig::new(Arch::Llama, ty)
        },
        Some("qwen3moe") => TinyConfig {
            n_layer: layers.unwrap_or(8),
            n_embd: 2048,
            n_head: 32,
            n_head_kv: 4,
            head_dim: 128,
            n_ff: 768,
            n_expert: 128,
            n_expert_used: 8,
            n_ctx: 40960,
            n_vocab: 151936,
            shared_weights: true,
            q4_k_m: k_mix,
            ..TinyConfig::new(Arch::Qwen3Moe, ty)
        },
        Some(p) => return Err(format!("--preset {p}: llama8b or qwen3moe")),
        None => return Err("gen needs --preset".into()),
    };
    if cfg.n_layer == 0 {
        return Err("--layers must be positive".into());
    }
    let dir = out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let t0 = Instant::now();
    let written = write_model(dir, &cfg);
    std::fs::rename(&written, &out).map_err(|e| format!("renaming to {}: {e}", out.display()))?;
    let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "bench_model: wrote {} ({:.2} GB) in {:.1} s",
        out.display(),
        bytes as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flash {
    On,
    Off,
}

struct RunArgs {
    models: Vec<PathBuf>,
    devices: Vec<String>,
    flash: Vec<Flash>,
    pp: usize,
    tg: usize,
    depths: Vec<usize>,
    reps: usize,
    threads: usize,
    ngl: i32,
    overrides: Vec<(String, String)>,
    no_mmap: bool,
    loads: Vec<PathBuf>,
    json: bool,
    greedy: usize,
}

fn parse_run(args: &[String]) -> Result<RunArgs, String> {
    let mut a = RunArgs {
        models: Vec::new(),
        devices: Vec::new(),
        flash: vec![Flash::On],
        pp: 512,
        tg: 128,
        depths: vec![0],
        reps: 3,
        threads: 4,
        ngl: 999,
        overrides: Vec::new(),
        no_mmap: false,
        loads: Vec::new(),
        json: false,
        greedy: 0,
    };
    for (f, v) in flags(args, &["--json", "--no-mmap"])? {
        match f.as_str() {
            "--model" => a.models.push(PathBuf::from(v)),
            "--device" => a.devices.extend(v.split(',').map(str::to_string)),
            "--flash" => {
                a.flash = match v.as_str() {
                    "on" => vec![Flash::On],
                    "off" => vec![Flash::Off],
                    "both" => vec![Flash::On, Flash::Off],
                    _ => return Err(format!("--flash {v}: on, off or both")),
                }
            }
            "--pp" => a.pp = num(&f, &v)?,
            "--tg" => a.tg = num(&f, &v)?,
            "--depth" => a.depths = v.split(',').map(|d| num(&f, d)).collect::<Result<_, _>>()?,
            "--reps" => a.reps = num(&f, &v)?,
            "--threads" => a.threads = num(&f, &v)?,
            "--ngl" => a.ngl = i32::try_from(num(&f, &v)?).map_err(|_| format!("--ngl {v}: too large"))?,
            "--override" => {
                let (re, buft) = v
                    .rsplit_once('=')
                    .filter(|(re, b)| !re.is_empty() && !b.is_empty())
                    .ok_or(format!("--override {v}: REGEX=BUFT, e.g. exps=CPU"))?;
                a.overrides.push((re.to_string(), buft.to_string()));
            }
            "--load" => a.loads.push(PathBuf::from(v)),
            "--greedy" => a.greedy = num(&f, &v)?,
            "--json" => a.json = true,
            "--no-mmap" => a.no_mmap = true,
            _ => return Err(format!("run: unknown flag {f}")),
        }
    }
    if a.models.is_empty() || a.devices.is_empty() {
        return Err("run needs --model and --device".into());
    }
    if a.reps == 0 || a.threads == 0 || (a.pp == 0 && a.tg == 0) {
        return Err("--reps and --threads must be positive, and --pp or --tg too".into());
    }
    Ok(a)
}

/// Median, min and max of `v` (not empty).
fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    (s[s.len() / 2], s[0], s[s.len() - 1])
}

struct Case {
    model: String,
    device: String,
    flash: Flash,
    depth: usize,
    pp_tok_s: Vec<f64>,
    tg_tok_s: Vec<f64>,
    error: Option<String>,
    /// With `--greedy`: the device's greedy tokens and the CPU backend's.
    greedy: Option<(Greedy, Greedy)>,
}

/// Greedy tokens and, per token, its logit's lead over the next best, and every step's logits
/// (one vocabulary-long row each).
#[derive(Clone, Debug, Default, PartialEq)]
struct Greedy {
    tokens: Vec<i32>,
    margins: Vec<f32>,
    logits: Vec<f32>,
}

/// The largest NMSE of `dev`'s logits against `cpu`'s over the steps fed the same tokens (up
/// to and including the first whose argmax differs).
fn logits_nmse(dev: &Greedy, cpu: &Greedy) -> Option<f64> {
    let steps = dev.tokens.len().min(cpu.tokens.len());
    if steps == 0 || dev.logits.len() != cpu.logits.len() || !cpu.logits.len().is_multiple_of(cpu.tokens.len()) {
        return None;
    }
    let row = cpu.logits.len() / cpu.tokens.len();
    let same = first_difference(&dev.tokens, &cpu.tokens).map_or(steps, |i| (i + 1).min(steps));
    (0..same)
        .map(|i| {
            let (a, b) = (&dev.logits[i * row..(i + 1) * row], &cpu.logits[i * row..(i + 1) * row]);
            let err: f64 = a.iter().zip(b).map(|(&x, &y)| (x as f64 - y as f64).powi(2)).sum();
            let norm: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum();
            err / norm.max(f64::MIN_POSITIVE)
        })
        .reduce(f64::max)
}

/// Where two greedy token lists first differ (a shorter list differs where it ends).
fn first_difference(a: &[i32], b: &[i32]) -> Option<usize> {
    let n = a.len().min(b.len());
    (0..n).find(|&i| a[i] != b[i]).or((a.len() != b.len()).then_some(n))
}

fn run(args: &[String]) -> Result<(), String> {
    let a = parse_run(args)?;
    // SAFETY: ggml's registry calls with NUL-terminated paths; the registrations live for the
    // process.
    unsafe {
        for lib in &a.loads {
            let p = CString::new(lib.to_str().ok_or("non-UTF-8 path")?).map_err(|e| e.to_string())?;
            if sys::ggml_backend_load(p.as_ptr()).is_null() {
                return Err(format!("ggml_backend_load({}) failed", lib.display()));
            }
        }
        sys::ggml_backend_load_all();
        sys::llama_backend_init();
    }
    let mut cases = Vec::new();
    // The CPU backend's greedy tokens per model and flash setting, made when first needed.
    let mut reference: Vec<(PathBuf, Flash, Result<Greedy, String>)> = Vec::new();
    for model in &a.models {
        for dev_name in &a.devices {
            let dn = CString::new(dev_name.as_str()).map_err(|e| e.to_string())?;
            // SAFETY: a lookup by NUL-terminated name in ggml's registry.
            let dev = unsafe { sys::ggml_backend_dev_by_name(dn.as_ptr()) };
            if dev.is_null() {
                return Err(format!(
                    "no ggml device {dev_name} (devices: {})",
                    device_names().join(", ")
                ));
            }
            for &flash in &a.flash {
                let model_name = model
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let case = |depth: usize, pp_tok_s: Vec<f64>, tg_tok_s: Vec<f64>, error: Option<String>| Case {
                    model: model_name.clone(),
                    device: dev_name.clone(),
                    flash,
                    depth,
                    pp_tok_s,
                    tg_tok_s,
                    error,
                    greedy: None,
                };
                match bench_one(model, dev, flash, &a) {
                    Ok((per_depth, tokens)) => {
                        // Greedy tokens go with the first depth's case.
                        let mut greedy = match tokens {
                            Some(t) => {
                                if !reference.iter().any(|(m, f, _)| m == model && *f == flash) {
                                    eprintln!("bench_model: greedy tokens of {model_name} on ggml's CPU backend");
                                    let r = greedy_on_cpu(model, flash, &a);
                                    reference.push((model.clone(), flash, r));
                                }
                                let (_, _, r) = reference
                                    .iter()
                                    .find(|(m, f, _)| m == model && *f == flash)
                                    .expect("pushed above");
                                Some(r.clone().map(|cpu| (t, cpu)))
                            }
                            None => None,
                        };
                        for (depth, pp, tg) in per_depth {
                            let mut c = case(depth, pp, tg, None);
                            match greedy.take() {
                                Some(Ok((t, cpu))) => {
                                    if let Some(i) = first_difference(&t.tokens, &cpu.tokens) {
                                        let at = |g: &Greedy| match (g.tokens.get(i), g.margins.get(i)) {
                                            (Some(x), Some(m)) => format!("{x} (margin {m:.3e})"),
                                            _ => "none".to_string(),
                                        };
                                        c.error = Some(format!(
                                            "greedy token {i} is {}, ggml's CPU backend's {}; logits NMSE up to there {:.1e} (tokens {:?} against {:?})",
                                            at(&t),
                                            at(&cpu),
                                            logits_nmse(&t, &cpu).unwrap_or(f64::NAN),
                                            t.tokens,
                                            cpu.tokens
                                        ));
                                    }
                                    c.greedy = Some((t, cpu));
                                }
                                Some(Err(e)) => c.error = Some(format!("greedy tokens on ggml's CPU backend: {e}")),
                                None => {}
                            }
                            cases.push(c);
                            print_case(&cases[cases.len() - 1], &a);
                        }
                    }
                    Err(e) => {
                        cases.push(case(0, Vec::new(), Vec::new(), Some(e)));
                        print_case(&cases[cases.len() - 1], &a);
                    }
                }
            }
        }
    }
    if a.json {
        println!("{}", json(&cases, &a));
    }
    let failed = cases.iter().filter(|c| c.error.is_some()).count();
    if cases.is_empty() || failed > 0 {
        return Err(format!("{failed} of {} cases failed", cases.len()));
    }
    Ok(())
}

fn device_names() -> Vec<String> {
    // SAFETY: enumerates ggml's device registry; names are NUL-terminated and live as long as it.
    unsafe {
        (0..sys::ggml_backend_dev_count())
            .map(|i| {
                CStr::from_ptr(sys::ggml_backend_dev_name(sys::ggml_backend_dev_get(i)))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }
}

fn print_case(c: &Case, a: &RunArgs) {
    let flash = if c.flash == Flash::On { "on" } else { "off" };
    let head = format!(
        "{:<28} {:<8} flash={:<3} depth={:<6}",
        c.model, c.device, flash, c.depth
    );
    match &c.error {
        Some(e) => eprintln!("{head} FAILED: {e}"),
        None => {
            let show = |n: usize, v: &[f64], what: &str| {
                if n == 0 || v.is_empty() {
                    return String::new();
                }
                let (m, lo, hi) = stats(v);
                format!("  {what}{n} {m:9.1} tok/s ({lo:.1}-{hi:.1})")
            };
            let greedy = match &c.greedy {
                Some((t, cpu)) => format!(
                    "  greedy{}: equal to CPU (logits NMSE {:.1e})",
                    t.tokens.len(),
                    logits_nmse(t, cpu).unwrap_or(f64::NAN)
                ),
                None => String::new(),
            };
            eprintln!(
                "{head}{}{}{greedy}",
                show(a.pp, &c.pp_tok_s, "pp"),
                show(a.tg, &c.tg_tok_s, "tg")
            );
        }
    }
}

fn json(cases: &[Case], a: &RunArgs) -> String {
    let rows: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            let med = |v: &[f64]| if v.is_empty() { None } else { Some(stats(v).0) };
            serde_json::json!({
                "model": c.model,
                "device": c.device,
                "flash": c.flash == Flash::On,
                "depth": c.depth,
                "pp": a.pp,
                "tg": a.tg,
                "pp_tok_s_median": med(&c.pp_tok_s),
                "tg_tok_s_median": med(&c.tg_tok_s),
                "pp_tok_s": c.pp_tok_s,
                "tg_tok_s": c.tg_tok_s,
                "greedy_tokens": c.greedy.as_ref().map(|g| &g.0.tokens),
                "greedy_tokens_cpu": c.greedy.as_ref().map(|g| &g.1.tokens),
                "greedy_margins_cpu": c.greedy.as_ref().map(|g| &g.1.margins),
                "greedy_equal_cpu": c.greedy.as_ref().map(|(t, cpu)| first_difference(&t.tokens, &cpu.tokens).is_none()),
                "greedy_logits_nmse_max": c.greedy.as_ref().and_then(|(t, cpu)| logits_nmse(t, cpu)),
                "error": c.error,
            })
        })
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({
        "threads": a.threads,
        "ngl": a.ngl,
        "no_mmap": a.no_mmap,
        "overrides": a.overrides.iter().map(|(re, b)| format!("{re}={b}")).collect::<Vec<_>>(),
        "reps": a.reps,
        "greedy": a.greedy,
        "cases": rows,
    }))
    .unwrap_or_default()
}

/// The buffer type `--override` names: `CPU`, a device's name (its memory) or `<device>_Host`
/// (its pinned host memory).
fn buffer_type(name: &str) -> Result<sys::ggml_backend_buffer_type_t, String> {
    // SAFETY: lookups in ggml's registry by NUL-terminated names; buffer types live as long as it.
    unsafe {
        if name == "CPU" {
            return Ok(sys::ggml_backend_cpu_buffer_type());
        }
        let (dev_name, host) = match name.strip_suffix("_Host") {
            Some(d) => (d, true),
            None => (name, false),
        };
        let dn = CString::new(dev_name).map_err(|e| e.to_string())?;
        let dev = sys::ggml_backend_dev_by_name(dn.as_ptr());
        let buft = if dev.is_null() {
            std::ptr::null_mut()
        } else if host {
            sys::ggml_backend_dev_host_buffer_type(dev)
        } else {
            sys::ggml_backend_dev_buffer_type(dev)
        };
        if buft.is_null() {
            return Err(format!(
                "--override: no buffer type {name} (CPU, a device or <device>_Host; devices: {})",
                device_names().join(", ")
            ));
        }
        Ok(buft)
    }
}

type DepthResult = (usize, Vec<f64>, Vec<f64>);

/// Loads `model` on `dev`, and per depth: a warm-up then `reps` timed passes; then, with
/// `--greedy`, the greedy tokens.
fn bench_one(
    model: &Path,
    dev: sys::ggml_backend_dev_t,
    flash: Flash,
    a: &RunArgs,
) -> Result<(Vec<DepthResult>, Option<Greedy>), String> {
    let path = CString::new(model.to_str().ok_or("non-UTF-8 model path")?).map_err(|e| e.to_string())?;
    let max_depth = a.depths.iter().copied().max().unwrap_or(0);
    // SAFETY: libllama calls with parameters from its own default constructors; the device
    // list is NULL-terminated and outlives the load; every object made here is freed here.
    unsafe {
        let mut mp = sys::llama_model_default_params();
        // A null device: no device at all (ggml's CPU backend alone, the greedy reference).
        let mut devs: [sys::ggml_backend_dev_t; 2] = [dev, std::ptr::null_mut()];
        mp.devices = devs.as_mut_ptr();
        mp.n_gpu_layers = a.ngl;
        if a.no_mmap {
            mp.load_mode = sys::LLAMA_LOAD_MODE_NONE;
        }
        // The patterns live until the model is loaded; the list ends with a NULL pattern.
        let patterns: Vec<CString> = a
            .overrides
            .iter()
            .map(|(re, _)| CString::new(re.as_str()).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let mut ot: Vec<sys::llama_model_tensor_buft_override> = Vec::new();
        for (p, (_, name)) in patterns.iter().zip(&a.overrides) {
            ot.push(sys::llama_model_tensor_buft_override {
                pattern: p.as_ptr(),
                buft: buffer_type(name)?,
            });
        }
        ot.push(sys::llama_model_tensor_buft_override {
            pattern: std::ptr::null(),
            buft: std::ptr::null_mut(),
        });
        if !a.overrides.is_empty() {
            mp.tensor_buft_overrides = ot.as_ptr();
        }
        let m = sys::llama_model_load_from_file(path.as_ptr(), mp);
        if m.is_null() {
            return Err(format!("libllama could not load {}", model.display()));
        }
        let mut cp = sys::llama_context_default_params();
        cp.n_ctx = (max_depth + a.pp + a.tg + a.greedy.max(GREEDY_PROMPT) + 256) as u32;
        cp.n_batch = 512;
        cp.n_ubatch = 512;
        cp.n_threads = a.threads as i32;
        cp.n_threads_batch = a.threads as i32;
        cp.no_perf = true;
        cp.flash_attn_type = match flash {
            Flash::On => sys::LLAMA_FLASH_ATTN_TYPE_ENABLED,
            Flash::Off => sys::LLAMA_FLASH_ATTN_TYPE_DISABLED,
        };
        let ctx = sys::llama_init_from_model(m, cp);
        if ctx.is_null() {
            sys::llama_model_free(m);
            return Err("libllama could not create a context".into());
        }
        // llama.cpp's tools (llama-cli, llama-server, llama-bench) give the context a persistent
        // CPU thread pool; without one, ggml's CPU backend starts and joins its threads for every
        // graph it runs, a cost each hand-off between a device and the CPU would pay.
        let pool = CpuThreadPool::attach(ctx, a.threads);
        let n_vocab = sys::llama_vocab_n_tokens(sys::llama_model_get_vocab(m)).max(1);
        let result = (|| {
            let mut out = Vec::new();
            for &depth in &a.depths {
                if a.reps == 0 {
                    break;
                }
                let (mut pp, mut tg) = (Vec::new(), Vec::new());
                for rep in 0..=a.reps {
                    let (p, t) = pass(ctx, n_vocab, depth, a.pp, a.tg)?;
                    // Pass 0 warms up (kernel compilation, first plans, allocations).
                    if rep > 0 {
                        pp.extend(p);
                        tg.extend(t);
                    }
                }
                out.push((depth, pp, tg));
            }
            let tokens = if a.greedy > 0 {
                Some(greedy(ctx, n_vocab, a.greedy)?)
            } else {
                None
            };
            Ok((out, tokens))
        })();
        sys::llama_free(ctx);
        drop(pool);
        sys::llama_model_free(m);
        result
    }
}

/// A ggml CPU thread pool attached to a context, as llama.cpp's tools attach one; freed after
/// the context. Where ggml's CPU backend is missing or offers no pools, nothing is attached and
/// ggml makes its threads per graph.
struct CpuThreadPool {
    pool: *mut sys::ggml_threadpool,
    free: Option<unsafe extern "C" fn(*mut sys::ggml_threadpool)>,
}

impl CpuThreadPool {
    /// # Safety
    /// `ctx` is a live context; the pool must be dropped after `llama_free(ctx)`.
    unsafe fn attach(ctx: *mut sys::llama_context, threads: usize) -> CpuThreadPool {
        let none = CpuThreadPool {
            pool: std::ptr::null_mut(),
            free: None,
        };
        let cpu = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
        if cpu.is_null() {
            return none;
        }
        let reg = sys::ggml_backend_dev_backend_reg(cpu);
        let new = sys::ggml_backend_reg_get_proc_address(reg, c"ggml_threadpool_new".as_ptr());
        let free = sys::ggml_backend_reg_get_proc_address(reg, c"ggml_threadpool_free".as_ptr());
        if new.is_null() || free.is_null() {
            return none;
        }
        type New = unsafe extern "C" fn(*mut sys::ggml_threadpool_params) -> *mut sys::ggml_threadpool;
        type Free = unsafe extern "C" fn(*mut sys::ggml_threadpool);
        // SAFETY: ggml's CPU registry hands out these two entries under these names with these
        // signatures (ggml-cpu.h).
        let new = std::mem::transmute::<*mut std::ffi::c_void, New>(new);
        let free = std::mem::transmute::<*mut std::ffi::c_void, Free>(free);
        let mut params = sys::ggml_threadpool_params_default(threads as i32);
        let pool = new(&mut params);
        if pool.is_null() {
            eprintln!("bench_model: ggml_threadpool_new({threads}) failed; ggml makes threads per graph");
            return none;
        }
        sys::llama_attach_threadpool(ctx, pool, std::ptr::null_mut());
        CpuThreadPool { pool, free: Some(free) }
    }
}

impl Drop for CpuThreadPool {
    fn drop(&mut self) {
        if let Some(free) = self.free {
            // SAFETY: made by `attach`, freed once, after the context that used it.
            unsafe { free(self.pool) };
        }
    }
}

/// Prompt tokens ahead of the greedy generation.
const GREEDY_PROMPT: usize = 16;

/// `model`'s greedy tokens on ggml's CPU backend alone: `bench_model greedy-cpu` in a child
/// process that loads no library (a plugin in this process may add devices to every context,
/// as llama.cpp adds every accelerator) and sees no `GGML_BACKEND_PATH`.
fn greedy_on_cpu(model: &Path, flash: Flash, a: &RunArgs) -> Result<Greedy, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let threads = std::thread::available_parallelism().map_or(a.threads, |n| n.get().max(a.threads));
    let logits = std::env::temp_dir().join(format!("bench_model-greedy-{}.f32", std::process::id()));
    let out = std::process::Command::new(exe)
        .arg("greedy-cpu")
        .arg("--model")
        .arg(model)
        .arg("--logits")
        .arg(&logits)
        .args(["--flash", if flash == Flash::On { "on" } else { "off" }])
        .args(["--greedy", &a.greedy.to_string(), "--threads", &threads.to_string()])
        .env_remove("GGML_BACKEND_PATH")
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("starting bench_model greedy-cpu: {e}"))?;
    let bytes = std::fs::read(&logits);
    let _ = std::fs::remove_file(&logits);
    if !out.status.success() {
        return Err(format!("bench_model greedy-cpu failed ({})", out.status));
    }
    let bytes = bytes.map_err(|e| format!("reading {}: {e}", logits.display()))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("greedy-cpu's output: {e}"))?;
    let list = |k: &str| {
        v[k].as_array()
            .cloned()
            .ok_or(format!("greedy-cpu's output has no {k}"))
    };
    let g = Greedy {
        tokens: list("tokens")?
            .iter()
            .filter_map(|x| x.as_i64())
            .map(|x| x as i32)
            .collect(),
        margins: list("margins")?
            .iter()
            .filter_map(|x| x.as_f64())
            .map(|x| x as f32)
            .collect(),
        logits: bytes
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    };
    if g.tokens.len() != a.greedy || g.margins.len() != a.greedy {
        return Err(format!("greedy-cpu gave {} tokens, not {}", g.tokens.len(), a.greedy));
    }
    Ok(g)
}

/// `bench_model greedy-cpu`: [`greedy`] on ggml's CPU backend alone, as JSON on stdout.
fn greedy_cpu_main(args: &[String]) -> Result<(), String> {
    let (mut model, mut flash, mut n, mut threads, mut logits) = (None, Flash::On, 0, 4, None);
    for (f, v) in flags(args, &[])? {
        match f.as_str() {
            "--model" => model = Some(PathBuf::from(v)),
            "--flash" => {
                flash = match v.as_str() {
                    "on" => Flash::On,
                    "off" => Flash::Off,
                    _ => return Err(format!("--flash {v}: on or off")),
                }
            }
            "--greedy" => n = num(&f, &v)?,
            "--threads" => threads = num(&f, &v)?,
            "--logits" => logits = Some(PathBuf::from(v)),
            _ => return Err(format!("greedy-cpu: unknown flag {f}")),
        }
    }
    let model = model.ok_or("greedy-cpu needs --model")?;
    if n == 0 || threads == 0 {
        return Err("greedy-cpu needs a positive --greedy and --threads".into());
    }
    let a = RunArgs {
        models: Vec::new(),
        devices: Vec::new(),
        flash: vec![flash],
        pp: 0,
        tg: 0,
        depths: vec![0],
        reps: 0,
        threads,
        ngl: 0,
        overrides: Vec::new(),
        no_mmap: false,
        loads: Vec::new(),
        json: false,
        greedy: n,
    };
    // SAFETY: ggml's registry of its own backends, then libllama's global init.
    unsafe {
        sys::ggml_backend_load_all();
        sys::llama_backend_init();
    }
    let (_, g) = bench_one(&model, std::ptr::null_mut(), flash, &a)?;
    let g = g.ok_or("no greedy tokens")?;
    if let Some(path) = logits {
        let bytes: Vec<u8> = g.logits.iter().flat_map(|x| x.to_ne_bytes()).collect();
        std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    println!("{}", serde_json::json!({ "tokens": g.tokens, "margins": g.margins }));
    Ok(())
}

/// On a cleared context: a fixed prompt of [`GREEDY_PROMPT`] tokens, then `n` tokens each the
/// argmax of the last logits (the lowest id among equal ones), fed back one at a time.
///
/// # Safety
/// `ctx` is a live context whose window holds `GREEDY_PROMPT + n` tokens.
unsafe fn greedy(ctx: *mut sys::llama_context, n_vocab: i32, n: usize) -> Result<Greedy, String> {
    sys::llama_memory_clear(sys::llama_get_memory(ctx), true);
    let mut prompt: Vec<i32> = (0..GREEDY_PROMPT)
        .map(|i| ((i as u64 * 2_654_435_761) % n_vocab as u64) as i32)
        .collect();
    let decode = |toks: &mut [i32]| -> Result<(), String> {
        if sys::llama_decode(ctx, sys::llama_batch_get_one(toks.as_mut_ptr(), toks.len() as i32)) != 0 {
            return Err(format!("llama_decode of {} tokens failed", toks.len()));
        }
        Ok(())
    };
    decode(&mut prompt)?;
    let mut out = Greedy::default();
    for _ in 0..n {
        let logits = sys::llama_get_logits_ith(ctx, -1);
        if logits.is_null() {
            return Err("libllama returned no logits".into());
        }
        let row = std::slice::from_raw_parts(logits, n_vocab as usize);
        let mut best = 0usize;
        for (i, &x) in row.iter().enumerate() {
            if x.is_nan() {
                return Err(format!("logit {i} of token {} is NaN", out.tokens.len()));
            }
            if x > row[best] {
                best = i;
            }
        }
        let second = row
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != best)
            .map(|(_, &x)| x)
            .fold(f32::NEG_INFINITY, f32::max);
        out.tokens.push(best as i32);
        out.margins.push(row[best] - second);
        out.logits.extend_from_slice(row);
        let mut one = [best as i32];
        decode(&mut one)?;
    }
    sys::llama_synchronize(ctx);
    Ok(out)
}

/// One pass on a cleared context: `depth` tokens untimed, then the timed prompt and generation.
///
/// # Safety
/// `ctx` is a live context whose window holds `depth + pp + tg` tokens.
unsafe fn pass(
    ctx: *mut sys::llama_context,
    n_vocab: i32,
    depth: usize,
    pp: usize,
    tg: usize,
) -> Result<(Option<f64>, Option<f64>), String> {
    sys::llama_memory_clear(sys::llama_get_memory(ctx), true);
    // Token ids spread over the vocabulary, the same every pass.
    let token = |i: usize| ((i as u64 * 2_654_435_761) % n_vocab as u64) as i32;
    let decode = |toks: &mut [i32]| -> Result<(), String> {
        for chunk in toks.chunks_mut(512) {
            if sys::llama_decode(ctx, sys::llama_batch_get_one(chunk.as_mut_ptr(), chunk.len() as i32)) != 0 {
                return Err(format!("llama_decode of {} tokens failed", chunk.len()));
            }
        }
        sys::llama_synchronize(ctx);
        Ok(())
    };
    if depth > 0 {
        let mut d: Vec<i32> = (0..depth).map(token).collect();
        decode(&mut d)?;
    }
    let mut pp_rate = None;
    if pp > 0 {
        let mut p: Vec<i32> = (depth..depth + pp).map(token).collect();
        let t0 = Instant::now();
        decode(&mut p)?;
        pp_rate = Some(pp as f64 / t0.elapsed().as_secs_f64());
    }
    let mut tg_rate = None;
    if tg > 0 {
        let t0 = Instant::now();
        for i in 0..tg {
            let mut one = [token(depth + pp + i)];
            decode(&mut one)?;
        }
        tg_rate = Some(tg as f64 / t0.elapsed().as_secs_f64());
    }
    Ok((pp_rate, tg_rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_lists_differ_where_a_token_or_the_length_does() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 5, 3], &[1, 2, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
        assert_eq!(first_difference(&[], &[]), None);
    }

    #[test]
    fn logits_are_compared_up_to_the_first_differing_token() {
        let cpu = Greedy {
            tokens: vec![0, 1, 1],
            margins: vec![1.0; 3],
            logits: vec![2.0, 1.0, 1.0, 2.0, 1.0, 2.0],
        };
        let mut dev = cpu.clone();
        assert_eq!(logits_nmse(&dev, &cpu), Some(0.0));
        // Step 1's logits differ by 0.1 in one entry of norm^2 5: NMSE 0.002; step 2 (after
        // the differing token) is not compared however far off it is.
        dev.tokens = vec![0, 0, 7];
        dev.logits = vec![2.0, 1.0, 1.1, 2.0, 100.0, -100.0];
        let e = logits_nmse(&dev, &cpu).unwrap();
        assert!((e - 0.01 / 5.0).abs() < 1e-6, "{e}");
        // Rows of another length cannot be compared.
        dev.logits.pop();
        assert_eq!(logits_nmse(&dev, &cpu), None);
    }
}
