//! Greedy decoding through the real libllama, on a chosen device, recording tokens and logits.

use llama_cpp_sys_2 as sys;
use std::ffi::CString;
use std::path::Path;
use std::time::Instant;

/// What one greedy run produced.
#[derive(Clone, Debug)]
pub struct GreedyRun {
    /// The prompt's tokens followed by the generated ones.
    pub prompt_tokens: Vec<i32>,
    pub generated: Vec<i32>,
    /// Logits of the last position after the prompt and after each generated token.
    pub logits: Vec<Vec<f32>>,
    /// Generated tokens per second over the decode steps (one token per step).
    pub decode_tok_per_s: f64,
}

/// Where the model's layers go.
#[derive(Clone, Copy, Debug)]
pub enum Placement {
    /// ggml's CPU backend only.
    Cpu,
    /// Every layer on this device (e.g. TANDEM_HOST).
    Device(sys::ggml_backend_dev_t),
}

/// Loads `model`, decodes `prompt` and `n_steps` greedy tokens, and frees everything.
pub fn greedy(
    model: &Path,
    placement: Placement,
    prompt: &str,
    n_steps: usize,
    threads: i32,
) -> Result<GreedyRun, String> {
    let path = CString::new(model.to_str().ok_or("non-UTF-8 model path")?).map_err(|e| e.to_string())?;
    // SAFETY: calls into libllama with parameters from its own default constructors; every
    // pointer passed lives until the call returns, and every object made here is freed here.
    unsafe {
        let mut mp = sys::llama_model_default_params();
        let mut devs: [sys::ggml_backend_dev_t; 2] = [std::ptr::null_mut(); 2];
        match placement {
            Placement::Cpu => {
                mp.n_gpu_layers = 0;
                mp.devices = devs.as_mut_ptr();
            }
            Placement::Device(d) => {
                devs[0] = d;
                mp.devices = devs.as_mut_ptr();
                mp.n_gpu_layers = 999;
            }
        }
        let m = sys::llama_model_load_from_file(path.as_ptr(), mp);
        if m.is_null() {
            return Err(format!("libllama could not load {}", model.display()));
        }
        let mut cp = sys::llama_context_default_params();
        cp.n_ctx = 128;
        cp.n_batch = 64;
        cp.n_ubatch = 64;
        cp.n_threads = threads;
        cp.n_threads_batch = threads;
        cp.no_perf = true;
        let ctx = sys::llama_init_from_model(m, cp);
        if ctx.is_null() {
            sys::llama_model_free(m);
            return Err("libllama could not create a context".into());
        }
        let result = decode_loop(m, ctx, prompt, n_steps);
        sys::llama_free(ctx);
        sys::llama_model_free(m);
        result
    }
}

/// # Safety
/// `m` and `ctx` are a live model and its context.
unsafe fn decode_loop(
    m: *mut sys::llama_model,
    ctx: *mut sys::llama_context,
    prompt: &str,
    n_steps: usize,
) -> Result<GreedyRun, String> {
    let vocab = sys::llama_model_get_vocab(m);
    let n_vocab = sys::llama_vocab_n_tokens(vocab) as usize;
    let text = CString::new(prompt).map_err(|e| e.to_string())?;
    let mut toks = vec![0i32; 256];
    let n = sys::llama_tokenize(
        vocab,
        text.as_ptr(),
        prompt.len() as i32,
        toks.as_mut_ptr(),
        toks.len() as i32,
        true,
        false,
    );
    if n <= 1 {
        return Err(format!("prompt {prompt:?} tokenized to {n} tokens"));
    }
    toks.truncate(n as usize);
    let prompt_tokens = toks.clone();
    let mut logits = Vec::new();
    let mut generated = Vec::new();
    let mut batch_toks = toks.clone();
    if sys::llama_decode(ctx, sys::llama_batch_get_one(batch_toks.as_mut_ptr(), n)) != 0 {
        return Err("llama_decode failed on the prompt".into());
    }
    let t0 = Instant::now();
    for step in 0..n_steps {
        let lp = sys::llama_get_logits_ith(ctx, -1);
        if lp.is_null() {
            return Err(format!("no logits at step {step}"));
        }
        let l = std::slice::from_raw_parts(lp, n_vocab).to_vec();
        let next = argmax(&l) as i32;
        logits.push(l);
        generated.push(next);
        let mut one = [next];
        if sys::llama_decode(ctx, sys::llama_batch_get_one(one.as_mut_ptr(), 1)) != 0 {
            return Err(format!("llama_decode failed at step {step}"));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(GreedyRun {
        prompt_tokens,
        generated,
        logits,
        decode_tok_per_s: n_steps as f64 / secs.max(1e-9),
    })
}

/// Index of the largest value (the first on ties).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// Σ(a−b)²/Σa².
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        num += (*x as f64 - *y as f64).powi(2);
        den += (*x as f64).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}
