//! Decode benchmark through the real libllama: tiny models on ggml's CPU backend and on tandem's
//! TANDEM_HOST device, same thread count and same attention, plus where TANDEM_HOST's
//! `graph_compute` time goes once the plan cache is warm (conversion, memory check, plan lookup,
//! kernels, and the rest).
//!
//! `decode_bench [--threads N] [--runs R] [--tokens T] [--models llama,qwen3moe,llama-large]
//!               [--types f16,q8_0,q4_0] [--attention flash|split] [--json] [--verbose]
//!               [--model-dir DIR]`
//!
//! Each side runs in a process of its own. Once the plugin is loaded, libllama adds TANDEM_HOST
//! (an ACCEL device) to every context, CPU-only ones included, so a "CPU" run in a process that
//! loaded it puts the weights and most nodes on tandem; the ggml side's process never loads the
//! plugin, and traces one prompt pass to prove every node ran in a CPU buffer. Both sides pin
//! the attention (libllama's automatic choice differs between them) and trace that the graph
//! has FLASH_ATTN_EXT exactly when flash attention was asked for.
//!
//! Per model: `--runs` rounds; each round starts one ggml process and one TANDEM_HOST process,
//! each doing a warm-up run (page cache, one-time setup, tandem's first plans) and one run of
//! `--tokens` greedy decode steps. tok/s is the median over the rounds, so both sides see the
//! same drift in machine load. The TANDEM_HOST process then runs once more with node timing on
//! (it costs clock reads) to split the per-graph time into kernels and overhead.
//!
//! Child mode (used by the above): `decode_bench --child ggml|tandem --model FILE [--threads N]
//! [--tokens T] [--attention flash|split]` prints one `result ...` line.

use llama_cpp_sys_2 as sys;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::process::Command;
use tandem_graph::ElemType;
use tandem_tests::llama_run::{greedy_with, trace_prompt, Attention, GreedyRun, Options, Placement};
use tandem_tests::tiny_models::{write_model, Arch, TinyConfig};

const PROMPT: &str = "hello world, the tiny model";

struct Args {
    threads: usize,
    runs: usize,
    tokens: usize,
    models: Vec<String>,
    types: Vec<ElemType>,
    flash: bool,
    json: bool,
    /// Print every child's result line to stderr.
    verbose: bool,
    /// Write the models here and keep them (else a temporary folder, removed at the end).
    model_dir: Option<PathBuf>,
    /// Child mode: the side to run and the model file.
    child: Option<(Side, PathBuf)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Ggml,
    Tandem,
}

impl Side {
    fn flag(self) -> &'static str {
        match self {
            Side::Ggml => "ggml",
            Side::Tandem => "tandem",
        }
    }
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        threads: 2,
        runs: 5,
        tokens: 64,
        models: vec!["llama".into(), "qwen3moe".into(), "llama-large".into()],
        types: vec![ElemType::F16, ElemType::Q8_0, ElemType::Q4_0],
        flash: true,
        json: false,
        verbose: false,
        model_dir: None,
        child: None,
    };
    let mut side = None;
    let mut model = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--threads" => a.threads = num(value()?)?,
            "--runs" => a.runs = num(value()?)?,
            "--tokens" => a.tokens = num(value()?)?,
            "--models" => a.models = value()?.split(',').map(str::to_string).collect(),
            "--types" => {
                a.types = value()?
                    .split(',')
                    .map(|s| ElemType::from_name(s).ok_or(format!("unknown type {s}")))
                    .collect::<Result<_, _>>()?
            }
            "--attention" => {
                a.flash = match value()?.as_str() {
                    "flash" => true,
                    "split" => false,
                    other => return Err(format!("--attention {other}: flash or split")),
                }
            }
            "--json" => a.json = true,
            "--verbose" => a.verbose = true,
            "--model-dir" => a.model_dir = Some(PathBuf::from(value()?)),
            "--child" => {
                side = Some(match value()?.as_str() {
                    "ggml" => Side::Ggml,
                    "tandem" => Side::Tandem,
                    other => return Err(format!("--child {other}: ggml or tandem")),
                })
            }
            "--model" => model = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.runs < 1 || a.threads < 1 || a.tokens < 1 {
        return Err("--runs, --threads and --tokens must be positive".into());
    }
    // libllama's context in `greedy_with` holds 128 positions: the prompt plus every decoded token.
    if a.tokens > 100 {
        return Err("--tokens must be at most 100 (the context holds 128 positions)".into());
    }
    a.child = match (side, model) {
        (Some(s), Some(m)) => Some((s, m)),
        (None, None) => None,
        _ => return Err("--child and --model go together".into()),
    };
    Ok(a)
}

fn options(args: &Args) -> Options {
    Options {
        attention: if args.flash { Attention::Flash } else { Attention::Split },
        f32_kv_cache: false,
    }
}

/// The model configurations named by `--models`, one per weight type.
fn configs(args: &Args) -> Result<Vec<(String, TinyConfig)>, String> {
    let mut out = Vec::new();
    for m in &args.models {
        for &ty in &args.types {
            let cfg = match m.as_str() {
                "llama" => TinyConfig::new(Arch::Llama, ty),
                "qwen3moe" => TinyConfig::new(Arch::Qwen3Moe, ty),
                // Big enough that the matmuls, not the per-node overhead, dominate a step.
                "llama-large" => TinyConfig {
                    n_layer: 8,
                    n_embd: 512,
                    n_head: 8,
                    n_head_kv: 4,
                    n_ff: 1536,
                    ..TinyConfig::new(Arch::Llama, ty)
                },
                other => return Err(format!("unknown model {other} (llama, qwen3moe, llama-large)")),
            };
            out.push((m.clone(), cfg));
        }
    }
    Ok(out)
}

/// Mirrors `ggml_tandem::GraphTotals`, which the plugin fills.
type Totals = ggml_tandem::GraphTotals;

/// The plugin's benchmark entries, resolved through ggml's `get_proc_address`.
struct Probe {
    totals: unsafe extern "C" fn(*mut Totals, bool),
    node_timing: unsafe extern "C" fn(bool),
}

impl Probe {
    fn resolve(dev: sys::ggml_backend_dev_t) -> Result<Probe, String> {
        // SAFETY: ggml registry calls with a live device and NUL-terminated names; the returned
        // addresses are the plugin's functions with the signatures it documents.
        unsafe {
            let reg = sys::ggml_backend_dev_backend_reg(dev);
            let totals = sys::ggml_backend_reg_get_proc_address(reg, c"tandem_graph_totals".as_ptr());
            let timing = sys::ggml_backend_reg_get_proc_address(reg, c"tandem_set_node_timing".as_ptr());
            if totals.is_null() || timing.is_null() {
                return Err("the plugin does not offer tandem_graph_totals / tandem_set_node_timing".into());
            }
            Ok(Probe {
                totals: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut Totals, bool)>(totals),
                node_timing: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(bool)>(timing),
            })
        }
    }

    /// The totals since the last call (and zeroes them).
    fn take(&self) -> Totals {
        let mut t = Totals::default();
        // SAFETY: `t` is room for one Totals.
        unsafe { (self.totals)(&mut t, true) };
        t
    }

    fn set_node_timing(&self, on: bool) {
        // SAFETY: plain flag setter.
        unsafe { (self.node_timing)(on) }
    }
}

/// Passes warnings and errors on; drops libllama's and ggml's chatter about loading.
unsafe extern "C" fn quiet_log(level: sys::ggml_log_level, text: *const c_char, _user: *mut c_void) {
    if level == sys::GGML_LOG_LEVEL_WARN || level == sys::GGML_LOG_LEVEL_ERROR {
        // SAFETY: ggml passes a NUL-terminated line.
        eprint!("{}", unsafe { CStr::from_ptr(text) }.to_string_lossy());
    }
}

/// Whether a backend registered under `name` is in this process.
fn registered(name: &CStr) -> bool {
    // SAFETY: registry lookup with a NUL-terminated name.
    !unsafe { sys::ggml_backend_reg_by_name(name.as_ptr()) }.is_null()
}

/// One side's run in this process; prints the `result` line the parent reads.
fn child(side: Side, model: &Path, args: &Args) -> Result<(), String> {
    let opts = options(args);
    let threads = args.threads as i32;
    // SAFETY: the log callback is a plain function that lives for the whole process.
    unsafe { sys::llama_log_set(Some(quiet_log), std::ptr::null_mut()) };
    let (placement, probe) = match side {
        Side::Ggml => {
            // SAFETY: global libllama setup, once, before any model is loaded.
            unsafe { sys::llama_backend_init() };
            if registered(c"TANDEM") {
                return Err("the ggml side's process has the plugin loaded".into());
            }
            (Placement::Cpu, None)
        }
        Side::Tandem => {
            let plugin = tandem_tests::plugin::plugin_path()?;
            let dev = tandem_tests::plugin::load_tandem_host(&plugin)?;
            // SAFETY: as above; the plugin is loaded and ggml's backends with it.
            unsafe { sys::llama_backend_init() };
            (Placement::Device(dev), Some(Probe::resolve(dev)?))
        }
    };
    // Which buffers the prompt pass's nodes ran in, and whether attention is what was asked.
    let trace = trace_prompt(model, placement, opts, PROMPT, threads)?;
    if trace.len() < 20 {
        return Err(format!("only {} nodes traced", trace.len()));
    }
    let mut buffers: BTreeMap<String, usize> = BTreeMap::new();
    for n in &trace {
        *buffers.entry(n.buffer.clone()).or_default() += 1;
    }
    let fa_nodes: Vec<_> = trace.iter().filter(|n| n.op == "FLASH_ATTN_EXT").collect();
    if args.flash == fa_nodes.is_empty() {
        return Err(format!(
            "asked for {} attention, the graph has {} FLASH_ATTN_EXT nodes",
            if args.flash { "flash" } else { "split" },
            fa_nodes.len()
        ));
    }
    match side {
        Side::Ggml => {
            if let Some(n) = trace.iter().find(|n| n.buffer != "CPU") {
                return Err(format!("node {} ({}) ran in buffer {:?}", n.name, n.op, n.buffer));
            }
        }
        Side::Tandem => {
            if let Some(n) = fa_nodes.iter().find(|n| !n.buffer.starts_with("TANDEM")) {
                return Err(format!("flash attention node {} ran in buffer {:?}", n.name, n.buffer));
            }
        }
    }
    let run = || -> Result<GreedyRun, String> { greedy_with(model, placement, opts, PROMPT, args.tokens, threads) };
    run()?; // warm-up
    let mut line = String::from("result");
    let mut put = |k: &str, v: String| line.push_str(&format!(" {k}={v}"));
    if let Some(p) = &probe {
        p.take();
    }
    let timed = run()?;
    put("tok_s", format!("{:.3}", timed.decode_tok_per_s));
    let toks: Vec<String> = timed.generated.iter().map(|t| t.to_string()).collect();
    put("tokens", toks.join(","));
    put(
        "buffers",
        buffers
            .iter()
            .map(|(b, n)| format!("{b}:{n}"))
            .collect::<Vec<_>>()
            .join(","),
    );
    if let Some(p) = &probe {
        let w = p.take();
        p.set_node_timing(true);
        let timed_nodes = run();
        p.set_node_timing(false);
        timed_nodes?;
        let k = p.take();
        for (name, v) in [
            ("graphs", w.graphs),
            ("cold", w.cold_graphs),
            ("nodes", w.nodes),
            ("total_ns", w.total_ns),
            ("convert_ns", w.convert_ns),
            ("check_ns", w.check_ns),
            ("plan_us", w.plan_us),
            ("k_graphs", k.graphs),
            ("k_total_ns", k.total_ns),
            ("k_kernel_ns", k.kernel_ns),
        ] {
            put(name, v.to_string());
        }
    }
    println!("{line}");
    Ok(())
}

/// What one child process reported.
struct ChildResult {
    fields: BTreeMap<String, String>,
}

impl ChildResult {
    fn num(&self, key: &str) -> Result<f64, String> {
        self.fields
            .get(key)
            .ok_or(format!("child result lacks {key}"))?
            .parse::<f64>()
            .map_err(|e| format!("{key}: {e}"))
    }

    fn text(&self, key: &str) -> &str {
        self.fields.get(key).map_or("", String::as_str)
    }
}

fn spawn_child(side: Side, model: &Path, args: &Args) -> Result<ChildResult, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out = Command::new(exe)
        .arg("--child")
        .arg(side.flag())
        .arg("--model")
        .arg(model)
        .args(["--threads", &args.threads.to_string()])
        .args(["--tokens", &args.tokens.to_string()])
        .args(["--attention", if args.flash { "flash" } else { "split" }])
        .output()
        .map_err(|e| format!("starting the {} child: {e}", side.flag()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{} child failed ({}): {}",
            side.flag(),
            out.status,
            stderr.trim()
        ));
    }
    let line = stdout.lines().find(|l| l.starts_with("result")).ok_or(format!(
        "{} child printed no result; stderr: {}",
        side.flag(),
        stderr.trim()
    ))?;
    if args.verbose {
        eprintln!("{} {}", side.flag(), line);
    }
    let fields = line
        .split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    Ok(ChildResult { fields })
}

struct Row {
    model: String,
    ty: ElemType,
    shape: String,
    ggml_tps: f64,
    tandem_tps: f64,
    /// Leading generated tokens both sides agree on, least over the rounds (of `--tokens`).
    agree: usize,
    /// Graphs per `llama_decode` call on TANDEM_HOST (warm and cold, timed runs).
    graphs_per_token: f64,
    nodes_per_graph: f64,
    /// Per warm graph, µs, summed over the timed runs (node timing off).
    graph_us: f64,
    convert_us: f64,
    check_us: f64,
    plan_us: f64,
    /// Per warm graph, µs, median over the runs with node timing on.
    kernel_us: f64,
    overhead_us: f64,
    /// Buffers the TANDEM_HOST side's traced nodes ran in, `name:count`.
    tandem_buffers: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench_model(name: &str, cfg: &TinyConfig, dir: &Path, args: &Args) -> Result<Row, String> {
    let path = write_model(dir, cfg);
    let label = format!("{name} {}", cfg.weight_type.name());
    let (mut ggml, mut tandem, mut kernel, mut overhead) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut agree = args.tokens;
    let mut sums = [0f64; 7];
    let mut buffers = String::new();
    for _ in 0..args.runs {
        let g = spawn_child(Side::Ggml, &path, args).map_err(|e| format!("{label}: {e}"))?;
        let t = spawn_child(Side::Tandem, &path, args).map_err(|e| format!("{label}: {e}"))?;
        ggml.push(g.num("tok_s")?);
        tandem.push(t.num("tok_s")?);
        let prefix = g
            .text("tokens")
            .split(',')
            .zip(t.text("tokens").split(','))
            .take_while(|(a, b)| a == b);
        agree = agree.min(prefix.count());
        for (s, key) in sums.iter_mut().zip([
            "graphs",
            "cold",
            "nodes",
            "total_ns",
            "convert_ns",
            "check_ns",
            "plan_us",
        ]) {
            *s += t.num(key)?;
        }
        let kg = t.num("k_graphs")?;
        if kg > 0.0 {
            let (total, kern) = (t.num("k_total_ns")?, t.num("k_kernel_ns")?);
            kernel.push(kern / kg / 1000.0);
            overhead.push((total - kern).max(0.0) / kg / 1000.0);
        }
        buffers = t.text("buffers").to_string();
    }
    let [graphs, cold, nodes, total_ns, convert_ns, check_ns, plan_us] = sums;
    if graphs == 0.0 || kernel.is_empty() {
        return Err(format!("{label}: TANDEM_HOST ran no graph with a cached plan"));
    }
    Ok(Row {
        model: name.to_string(),
        ty: cfg.weight_type,
        shape: format!("{}x{} ff{}", cfg.n_layer, cfg.n_embd, cfg.n_ff),
        ggml_tps: median(ggml),
        tandem_tps: median(tandem),
        agree,
        graphs_per_token: (graphs + cold) / (args.runs * (args.tokens + 1)) as f64,
        nodes_per_graph: nodes / graphs,
        graph_us: total_ns / graphs / 1000.0,
        convert_us: convert_ns / graphs / 1000.0,
        check_us: check_ns / graphs / 1000.0,
        plan_us: plan_us / graphs,
        kernel_us: median(kernel),
        overhead_us: median(overhead),
        tandem_buffers: buffers,
    })
}

fn print_table(rows: &[Row], args: &Args) {
    println!(
        "decode {} tokens, {} threads, {} attention, f16 K/V cache, median of {} rounds; per-graph columns are \
         TANDEM_HOST graphs with a warm plan cache (µs); the ggml side ran in a process without the plugin, \
         every traced node in a CPU buffer",
        args.tokens,
        args.threads,
        if args.flash { "flash" } else { "split" },
        args.runs
    );
    println!(
        "{:<12} {:<5} {:<15} {:>9} {:>9} {:>6} {:>5} {:>6} {:>7} {:>8} {:>8} {:>7} {:>6} {:>6} {:>5}",
        "model",
        "type",
        "shape",
        "ggml t/s",
        "tndm t/s",
        "ratio",
        "g/tok",
        "nodes",
        "graph",
        "kernel",
        "overhd",
        "convert",
        "check",
        "plan",
        "agree"
    );
    for r in rows {
        println!(
            "{:<12} {:<5} {:<15} {:>9.1} {:>9.1} {:>6.2} {:>5.1} {:>6.0} {:>7.1} {:>8.1} {:>8.1} {:>7.1} {:>6.1} {:>6.1} {:>5}",
            r.model,
            r.ty.name(),
            r.shape,
            r.ggml_tps,
            r.tandem_tps,
            r.tandem_tps / r.ggml_tps,
            r.graphs_per_token,
            r.nodes_per_graph,
            r.graph_us,
            r.kernel_us,
            r.overhead_us,
            r.convert_us,
            r.check_us,
            r.plan_us,
            r.agree
        );
    }
    if let Some(r) = rows.first() {
        println!(
            "TANDEM_HOST side's traced nodes by buffer ({} {}): {}",
            r.model,
            r.ty.name(),
            r.tandem_buffers
        );
    }
}

fn print_json(rows: &[Row], args: &Args) {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                concat!(
                    "{{\"model\":\"{}\",\"type\":\"{}\",\"shape\":\"{}\",\"ggml_tok_s\":{:.3},",
                    "\"tandem_tok_s\":{:.3},\"ratio\":{:.4},\"agree_tokens\":{},\"graphs_per_token\":{:.3},",
                    "\"nodes_per_graph\":{:.1},\"graph_us\":{:.2},\"kernel_us\":{:.2},\"overhead_us\":{:.2},",
                    "\"convert_us\":{:.2},\"check_us\":{:.2},\"plan_us\":{:.2},\"tandem_buffers\":\"{}\"}}"
                ),
                r.model,
                r.ty.name(),
                r.shape,
                r.ggml_tps,
                r.tandem_tps,
                r.tandem_tps / r.ggml_tps,
                r.agree,
                r.graphs_per_token,
                r.nodes_per_graph,
                r.graph_us,
                r.kernel_us,
                r.overhead_us,
                r.convert_us,
                r.check_us,
                r.plan_us,
                r.tandem_buffers
            )
        })
        .collect();
    println!(
        "{{\"threads\":{},\"runs\":{},\"tokens\":{},\"attention\":\"{}\",\"kv_cache\":\"f16\",\"results\":[{}]}}",
        args.threads,
        args.runs,
        args.tokens,
        if args.flash { "flash" } else { "split" },
        items.join(",")
    );
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("decode_bench: {e}");
            std::process::exit(2);
        }
    };
    if let Some((side, model)) = &args.child {
        if let Err(e) = child(*side, model, &args) {
            eprintln!("decode_bench {}: {e}", side.flag());
            std::process::exit(1);
        }
        return;
    }
    if std::env::var_os("TANDEM_THREADS").is_some() {
        eprintln!("decode_bench: note: TANDEM_THREADS is set and pins tandem's pool over --threads");
    }
    let result = (|| -> Result<Vec<Row>, String> {
        let cases = configs(&args)?;
        // Found now so a missing plugin fails before any model is written.
        tandem_tests::plugin::plugin_path()?;
        let temp = std::env::temp_dir().join(format!("tandem-decode-bench-{}", std::process::id()));
        let root = args.model_dir.clone().unwrap_or(temp);
        let mut rows = Vec::new();
        let res = (|| {
            for (name, cfg) in &cases {
                let dir: PathBuf = root.join(name);
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let row = bench_model(name, cfg, &dir, &args)?;
                eprintln!(
                    "{} {}: ggml {:.1} tok/s, TANDEM_HOST {:.1} tok/s, overhead {:.1} µs/graph",
                    row.model,
                    row.ty.name(),
                    row.ggml_tps,
                    row.tandem_tps,
                    row.overhead_us
                );
                rows.push(row);
            }
            Ok(())
        })();
        if args.model_dir.is_none() {
            std::fs::remove_dir_all(&root).ok();
        }
        res.map(|()| rows)
    })();
    match result {
        Ok(rows) if !rows.is_empty() => {
            if args.json {
                print_json(&rows, &args);
            } else {
                print_table(&rows, &args);
            }
        }
        Ok(_) => {
            eprintln!("decode_bench: no case ran");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("decode_bench: {e}");
            std::process::exit(1);
        }
    }
}
