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
//!   [--override REGEX=BUFT ...] [--no-mmap] [--load LIB ...] [--json]`
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
                };
                match bench_one(model, dev, flash, &a) {
                    Ok(per_depth) => {
                        for (depth, pp, tg) in per_depth {
                            cases.push(case(depth, pp, tg, None));
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
            eprintln!(
                "{head}{}{}",
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

/// Loads `model` on `dev`, and per depth: a warm-up then `reps` timed passes.
fn bench_one(
    model: &Path,
    dev: sys::ggml_backend_dev_t,
    flash: Flash,
    a: &RunArgs,
) -> Result<Vec<DepthResult>, String> {
    let path = CString::new(model.to_str().ok_or("non-UTF-8 model path")?).map_err(|e| e.to_string())?;
    let max_depth = a.depths.iter().copied().max().unwrap_or(0);
    // SAFETY: libllama calls with parameters from its own default constructors; the device
    // list is NULL-terminated and outlives the load; every object made here is freed here.
    unsafe {
        let mut mp = sys::llama_model_default_params();
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
        cp.n_ctx = (max_depth + a.pp + a.tg + 256) as u32;
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
            Ok(out)
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
