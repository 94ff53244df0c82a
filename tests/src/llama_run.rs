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
    /// No offload: ggml's CPU backend, plus every ACCEL device registered in the process (libllama
    /// adds those to each context, and TANDEM_HOST is one once the plugin is loaded). A pure
    /// ggml CPU run needs the plugin not loaded yet.
    Cpu,
    /// Every layer on this device (e.g. TANDEM_HOST).
    Device(sys::ggml_backend_dev_t),
    /// The last N layers on this device, as llama.cpp's `-ngl N --no-mmap`; the others, and the
    /// output layer unless N exceeds the layer count, in the memory libllama picks for CPU
    /// layers when it does not map the file: a GPU device's pinned host memory where it has one.
    Layers(sys::ggml_backend_dev_t, i32),
}

/// How libllama builds attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// libllama decides (flash attention where the layer's device runs FLASH_ATTN_EXT).
    Auto,
    /// One FLASH_ATTN_EXT node per layer.
    Flash,
    /// MUL_MAT (K·Q), SOFT_MAX, MUL_MAT (V·softmax).
    Split,
}

/// How libllama sets up a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    pub attention: Attention,
    /// Keep the K/V cache in f32 instead of libllama's default f16.
    pub f32_kv_cache: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            attention: Attention::Auto,
            f32_kv_cache: false,
        }
    }
}

impl Attention {
    fn llama_type(self) -> sys::llama_flash_attn_type {
        match self {
            Attention::Auto => sys::LLAMA_FLASH_ATTN_TYPE_AUTO,
            Attention::Flash => sys::LLAMA_FLASH_ATTN_TYPE_ENABLED,
            Attention::Split => sys::LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }
    }
}

/// Loads `model`, decodes `prompt` and `n_steps` greedy tokens, and frees everything.
pub fn greedy(
    model: &Path,
    placement: Placement,
    prompt: &str,
    n_steps: usize,
    threads: i32,
) -> Result<GreedyRun, String> {
    greedy_with(model, placement, Options::default(), prompt, n_steps, threads)
}

/// [`greedy`] with the context set up by `opts`.
pub fn greedy_with(
    model: &Path,
    placement: Placement,
    opts: Options,
    prompt: &str,
    n_steps: usize,
    threads: i32,
) -> Result<GreedyRun, String> {
    // SAFETY: `with_context` hands a live model and context to the closure.
    with_context(model, placement, opts, threads, None, |m, ctx| unsafe {
        decode_loop(m, ctx, prompt, n_steps)
    })
}

/// One graph node's output as ggml's scheduler evaluated it.
#[derive(Clone, Debug)]
pub struct NodeOut {
    pub name: String,
    pub op: String,
    /// ggml type id of the output.
    pub ty: u32,
    pub ne: [i64; 4],
    /// Name of the buffer holding the output (which backend computed it).
    pub buffer: String,
    /// The values as f32 when the output is a contiguous f32 or f16 tensor, else empty.
    pub values: Vec<f32>,
}

/// Loads `model` and decodes `prompt` once, recording every node's output through
/// libllama's eval callback (which makes the scheduler run the graph node by node).
pub fn trace_prompt(
    model: &Path,
    placement: Placement,
    opts: Options,
    prompt: &str,
    threads: i32,
) -> Result<Vec<NodeOut>, String> {
    let mut nodes: Vec<NodeOut> = Vec::new();
    let user = &mut nodes as *mut Vec<NodeOut> as *mut std::ffi::c_void;
    with_context(model, placement, opts, threads, Some((record_node, user)), |m, ctx| {
        // SAFETY: `with_context` hands a live model and context to the closure.
        unsafe { decode_loop(m, ctx, prompt, 0) }.map(|_| ())
    })?;
    Ok(nodes)
}

/// The eval callback: asks for every node, then copies its output.
///
/// # Safety
/// `t` is a computed tensor of the running graph; `user` is the `Vec<NodeOut>` of `trace_prompt`.
unsafe extern "C" fn record_node(t: *mut sys::ggml_tensor, ask: bool, user: *mut std::ffi::c_void) -> bool {
    if ask {
        return true;
    }
    let text = |p: *const std::os::raw::c_char| {
        // SAFETY: ggml returns NUL-terminated names that live as long as the tensor or buffer.
        unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    // SAFETY: the scheduler passes a live, computed tensor and the user pointer given to libllama
    // (the Vec of `trace_prompt`, borrowed by nothing else while the graph runs); its bytes are
    // read through ggml's own copy-out, `nbytes` of them, into a buffer of that size.
    unsafe {
        let out = &mut *(user as *mut Vec<NodeOut>);
        let tr = &*t;
        let buffer = if tr.buffer.is_null() {
            String::new()
        } else {
            text(sys::ggml_backend_buffer_name(tr.buffer))
        };
        let readable = !tr.buffer.is_null() && sys::ggml_is_contiguous(t);
        let mut values = Vec::new();
        if readable && (tr.type_ == sys::GGML_TYPE_F32 || tr.type_ == sys::GGML_TYPE_F16) {
            let n = sys::ggml_nbytes(t);
            let mut bytes = vec![0u8; n];
            sys::ggml_backend_tensor_get(t, bytes.as_mut_ptr().cast(), 0, n);
            values = if tr.type_ == sys::GGML_TYPE_F32 {
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect()
            } else {
                bytes
                    .chunks_exact(2)
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect()
            };
        }
        out.push(NodeOut {
            name: text(tr.name.as_ptr()),
            op: text(sys::ggml_op_desc(t)),
            ty: tr.type_,
            ne: tr.ne,
            buffer,
            values,
        });
    }
    true
}

type EvalCallback = (
    unsafe extern "C" fn(*mut sys::ggml_tensor, bool, *mut std::ffi::c_void) -> bool,
    *mut std::ffi::c_void,
);

/// Loads `model` with `placement`, makes a context, runs `f` on both and frees everything.
fn with_context<T>(
    model: &Path,
    placement: Placement,
    opts: Options,
    threads: i32,
    eval: Option<EvalCallback>,
    f: impl FnOnce(*mut sys::llama_model, *mut sys::llama_context) -> Result<T, String>,
) -> Result<T, String> {
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
            Placement::Layers(d, n) => {
                devs[0] = d;
                mp.devices = devs.as_mut_ptr();
                mp.n_gpu_layers = n;
                mp.load_mode = sys::LLAMA_LOAD_MODE_NONE;
            }
        }
        crate::logs::quiet();
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
        cp.flash_attn_type = opts.attention.llama_type();
        if opts.f32_kv_cache {
            cp.type_k = sys::GGML_TYPE_F32;
            cp.type_v = sys::GGML_TYPE_F32;
        }
        if let Some((cb, user)) = eval {
            cp.cb_eval = Some(cb);
            cp.cb_eval_user_data = user;
        }
        let ctx = sys::llama_init_from_model(m, cp);
        if ctx.is_null() {
            sys::llama_model_free(m);
            return Err("libllama could not create a context".into());
        }
        let result = f(m, ctx);
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
