//! Tiny random-weight models written as GGUF files through ggml's own `gguf` API, with a
//! working SentencePiece-style vocabulary, for end-to-end runs of the real libllama.
//!
//! Weights are N(0, 0.02)-like with norms at 1, so activations stay in a sane range; the weight
//! bytes come from tandem's own quantizers (byte-identical to ggml's).

use half::f16;
use llama_cpp_sys_2 as sys;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use tandem_graph::ElemType;

/// Which architecture to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Dense llama: GQA attention, SwiGLU FFN, normal RoPE.
    Llama,
    /// Qwen3 MoE: q/k norms, 8 experts with top-2 routing, neox RoPE.
    Qwen3Moe,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen3Moe => "qwen3moe",
        }
    }
}

/// Shape of a tiny model.
#[derive(Clone, Copy, Debug)]
pub struct TinyConfig {
    pub arch: Arch,
    /// Type of the 2-D weight matrices (f16, q8_0 or q4_0); norms stay f32.
    pub weight_type: ElemType,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub n_ff: u32,
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub n_ctx: u32,
    pub seed: u64,
    /// Head size of q/k/v; 0 for `n_embd / n_head` (Qwen3 uses 128 with a 2048-wide model).
    pub head_dim: u32,
    /// Vocabulary size: the working vocabulary padded with unused tokens up to this many (0 for
    /// the working vocabulary alone), so that the output matmul has a real model's size.
    pub n_vocab: u32,
    /// Every weight of one shape and type holds the same random bytes: the file is as large as
    /// a real model's and is written in seconds (for speed runs; outputs are not meaningful).
    pub shared_weights: bool,
    /// llama.cpp's Q4_K_M mix (with `weight_type` q4_K): the output matrix, and the `attn_v`
    /// and `ffn_down` (`ffn_down_exps`) of the layers [`q4_k_m_more_bits`] picks, in q6_K; every
    /// other matrix q4_K. Rows must be multiples of 256.
    pub q4_k_m: bool,
}

/// Whether llama.cpp's Q4_K_M quantization gives layer `i` of `n` six bits in its `attn_v` and
/// `ffn_down` (its `use_more_bits`): the first and last eighth of the layers and every third one
/// between.
pub fn q4_k_m_more_bits(i: u32, n: u32) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

impl TinyConfig {
    pub fn new(arch: Arch, weight_type: ElemType) -> TinyConfig {
        TinyConfig {
            arch,
            weight_type,
            n_layer: 2,
            n_embd: 128,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 256,
            n_expert: if arch == Arch::Qwen3Moe { 8 } else { 0 },
            n_expert_used: if arch == Arch::Qwen3Moe { 2 } else { 0 },
            n_ctx: 256,
            seed: 0x7a4d_e11a,
            head_dim: 0,
            n_vocab: 0,
            shared_weights: false,
            q4_k_m: false,
        }
    }
}

/// The vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte-fallback tokens, then word pieces.
pub fn vocab() -> Vec<(String, f32, i32)> {
    // Token types as llama.cpp numbers them: 1 normal, 2 unknown, 3 control, 6 byte.
    let mut v = vec![
        ("<unk>".to_string(), 0.0, 2),
        ("<s>".to_string(), 0.0, 3),
        ("</s>".to_string(), 0.0, 3),
    ];
    for b in 0..=255u32 {
        v.push((format!("<0x{b:02X}>"), 0.0, 6));
    }
    let pieces = [
        "▁", "e", "t", "a", "o", "i", "n", "s", "h", "r", "d", "l", "u", "c", "m", "w", "f", "g", "y", "p", "b", "▁t",
        "▁a", "he", "in", "er", "an", "re", "on", "▁the", "▁s", "▁w", "or", "en", "▁h", "▁o", "▁c", "▁hello", "▁world",
        "ll", "lo", "▁b", "at", "it", "es", "ou", "▁f", "▁m", "▁d", "▁p", "ing", "▁in", "▁of", "▁and", "▁to", "ed",
    ];
    for (i, p) in pieces.iter().enumerate() {
        // Longer merges score higher, as SentencePiece models do.
        v.push((p.to_string(), -(i as f32) + p.chars().count() as f32 * 10.0, 1));
    }
    v
}

fn key(arch: Arch, k: &str) -> CString {
    CString::new(format!("{}.{k}", arch.name())).unwrap()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Tensor bytes already made, by (type, shape).
type SharedBytes = std::collections::HashMap<(ElemType, Vec<i64>), &'static [u8]>;

struct Writer {
    gguf: *mut sys::gguf_context,
    ctx: *mut sys::ggml_context,
    rng: Pcg64,
    /// With shared weights: the bytes already made for a (type, shape).
    shared: Option<SharedBytes>,
}

impl Writer {
    /// Adds tensor `name` of `ty` and shape `ne` with values `f(rng)`.
    fn tensor(&mut self, name: &str, ty: ElemType, ne: &[i64], f: impl FnMut(&mut Pcg64) -> f32) {
        let key = (ty, ne.to_vec());
        let bytes: &'static [u8] = match self.shared.as_ref().and_then(|m| m.get(&key)) {
            Some(b) => b,
            None => {
                // gguf keeps the pointer until the file is written: the bytes live as long as the
                // process (a writer runs once per model file).
                let b: &'static [u8] = Box::leak(self.values(ty, ne, f).into_boxed_slice());
                if let Some(m) = self.shared.as_mut() {
                    m.insert(key, b);
                }
                b
            }
        };
        let name_c = c(name);
        // SAFETY: ctx is a live ggml context with room for the tensor header (no_alloc); the
        // tensor's data pointer is set to `bytes`, which lives for the rest of the process.
        unsafe {
            let t = match ne.len() {
                1 => sys::ggml_new_tensor_1d(self.ctx, ty.ggml_id(), ne[0]),
                2 => sys::ggml_new_tensor_2d(self.ctx, ty.ggml_id(), ne[0], ne[1]),
                _ => sys::ggml_new_tensor_3d(self.ctx, ty.ggml_id(), ne[0], ne[1], ne[2]),
            };
            sys::ggml_set_name(t, name_c.as_ptr());
            sys::gguf_add_tensor(self.gguf, t);
            sys::gguf_set_tensor_data(self.gguf, name_c.as_ptr(), bytes.as_ptr() as *const _);
        }
    }

    /// The bytes of a tensor of `ty` and shape `ne` with values `f(rng)`.
    fn values(&mut self, ty: ElemType, ne: &[i64], mut f: impl FnMut(&mut Pcg64) -> f32) -> Vec<u8> {
        let n: i64 = ne.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| f(&mut self.rng)).collect();
        let row = ne[0] as usize;
        let row_bytes = ty.row_size(ne[0]).expect("whole blocks");
        let mut bytes = vec![0u8; row_bytes * (n as usize / row)];
        for (src, dst) in vals.chunks(row).zip(bytes.chunks_mut(row_bytes)) {
            match ty {
                ElemType::F32 => dst.copy_from_slice(&src.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>()),
                ElemType::F16 => dst.copy_from_slice(
                    &src.iter()
                        .flat_map(|x| f16::from_f32(*x).to_le_bytes())
                        .collect::<Vec<_>>(),
                ),
                _ => tandem_ops::quant::quantize_row(ty, src, dst).expect("quantizing a tiny-model weight"),
            }
        }
        bytes
    }

    fn weight(&mut self, name: &str, ty: ElemType, ne: &[i64]) {
        let scale = 1.0 / (ne[0] as f32).sqrt();
        self.tensor(name, ty, ne, |r| (r.random::<f32>() * 2.0 - 1.0) * scale * 0.8);
    }

    fn norm(&mut self, name: &str, n: i64) {
        self.tensor(name, ElemType::F32, &[n], |r| 1.0 + (r.random::<f32>() - 0.5) * 0.2);
    }
}

/// Writes the model described by `cfg` into `dir` and returns its path.
pub fn write_model(dir: &Path, cfg: &TinyConfig) -> PathBuf {
    assert!(
        !cfg.q4_k_m || cfg.weight_type == ElemType::Q4K,
        "the Q4_K_M mix is of q4_K weights"
    );
    let type_name = if cfg.q4_k_m { "q4_K_M" } else { cfg.weight_type.name() };
    let path = dir.join(format!("tiny-{}-{type_name}.gguf", cfg.arch.name()));
    let a = cfg.arch;
    let wt = cfg.weight_type;
    let mut voc = vocab();
    // Token type 5: unused (never produced by the tokenizer).
    for i in voc.len()..cfg.n_vocab as usize {
        voc.push((format!("<unused{i}>"), 0.0, 5));
    }
    let n_vocab = voc.len() as i64;
    let (e, h, hkv, ff) = (
        cfg.n_embd as i64,
        cfg.n_head as i64,
        cfg.n_head_kv as i64,
        cfg.n_ff as i64,
    );
    let head_dim = if cfg.head_dim > 0 { cfg.head_dim as i64 } else { e / h };
    // SAFETY: plain calls into ggml's gguf/ggml API with valid, NUL-terminated strings and
    // pointers that outlive each call; the contexts are freed at the end.
    unsafe {
        let gguf = sys::gguf_init_empty();
        sys::gguf_set_val_str(gguf, c("general.architecture").as_ptr(), c(a.name()).as_ptr());
        sys::gguf_set_val_str(gguf, c("general.name").as_ptr(), c("tandem tiny test model").as_ptr());
        sys::gguf_set_val_u32(gguf, key(a, "context_length").as_ptr(), cfg.n_ctx);
        sys::gguf_set_val_u32(gguf, key(a, "embedding_length").as_ptr(), cfg.n_embd);
        sys::gguf_set_val_u32(gguf, key(a, "block_count").as_ptr(), cfg.n_layer);
        sys::gguf_set_val_u32(gguf, key(a, "feed_forward_length").as_ptr(), cfg.n_ff);
        sys::gguf_set_val_u32(gguf, key(a, "attention.head_count").as_ptr(), cfg.n_head);
        sys::gguf_set_val_u32(gguf, key(a, "attention.head_count_kv").as_ptr(), cfg.n_head_kv);
        sys::gguf_set_val_u32(gguf, key(a, "rope.dimension_count").as_ptr(), head_dim as u32);
        sys::gguf_set_val_f32(gguf, key(a, "rope.freq_base").as_ptr(), 10000.0);
        sys::gguf_set_val_f32(gguf, key(a, "attention.layer_norm_rms_epsilon").as_ptr(), 1e-5);
        sys::gguf_set_val_u32(gguf, key(a, "vocab_size").as_ptr(), n_vocab as u32);
        if a == Arch::Qwen3Moe {
            sys::gguf_set_val_u32(gguf, key(a, "expert_count").as_ptr(), cfg.n_expert);
            sys::gguf_set_val_u32(gguf, key(a, "expert_used_count").as_ptr(), cfg.n_expert_used);
            sys::gguf_set_val_u32(gguf, key(a, "expert_feed_forward_length").as_ptr(), cfg.n_ff);
        }
        if a == Arch::Qwen3Moe || cfg.head_dim > 0 {
            sys::gguf_set_val_u32(gguf, key(a, "attention.key_length").as_ptr(), head_dim as u32);
            sys::gguf_set_val_u32(gguf, key(a, "attention.value_length").as_ptr(), head_dim as u32);
        }
        sys::gguf_set_val_str(gguf, c("tokenizer.ggml.model").as_ptr(), c("llama").as_ptr());
        let toks: Vec<CString> = voc.iter().map(|(t, _, _)| c(t)).collect();
        let tok_ptrs: Vec<*const std::os::raw::c_char> = toks.iter().map(|t| t.as_ptr()).collect();
        sys::gguf_set_arr_str(
            gguf,
            c("tokenizer.ggml.tokens").as_ptr(),
            tok_ptrs.as_ptr() as *mut _,
            toks.len(),
        );
        let scores: Vec<f32> = voc.iter().map(|v| v.1).collect();
        sys::gguf_set_arr_data(
            gguf,
            c("tokenizer.ggml.scores").as_ptr(),
            sys::GGUF_TYPE_FLOAT32,
            scores.as_ptr() as *const _,
            scores.len(),
        );
        let types: Vec<i32> = voc.iter().map(|v| v.2).collect();
        sys::gguf_set_arr_data(
            gguf,
            c("tokenizer.ggml.token_type").as_ptr(),
            sys::GGUF_TYPE_INT32,
            types.as_ptr() as *const _,
            types.len(),
        );
        sys::gguf_set_val_u32(gguf, c("tokenizer.ggml.bos_token_id").as_ptr(), 1);
        sys::gguf_set_val_u32(gguf, c("tokenizer.ggml.eos_token_id").as_ptr(), 2);
        sys::gguf_set_val_u32(gguf, c("tokenizer.ggml.unknown_token_id").as_ptr(), 0);
        sys::gguf_set_val_bool(gguf, c("tokenizer.ggml.add_bos_token").as_ptr(), true);

        let params = sys::ggml_init_params {
            mem_size: 4 << 20,
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        };
        let ctx = sys::ggml_init(params);
        let mut w = Writer {
            gguf,
            ctx,
            rng: Pcg64::seed_from_u64(cfg.seed ^ wt.ggml_id() as u64),
            shared: cfg.shared_weights.then(Default::default),
        };
        // The embedding is read by GET_ROWS; keep it f16 for q4_0 models as llama.cpp's converters do.
        w.weight(
            "token_embd.weight",
            if wt == ElemType::Q4_0 { ElemType::F16 } else { wt },
            &[e, n_vocab],
        );
        w.norm("output_norm.weight", e);
        let six = |more: bool| if cfg.q4_k_m && more { ElemType::Q6K } else { wt };
        w.weight("output.weight", six(true), &[e, n_vocab]);
        for l in 0..cfg.n_layer {
            let b = |n: &str| format!("blk.{l}.{n}.weight");
            // Q4_K_M's layers with six-bit attn_v and ffn_down.
            let vd = six(q4_k_m_more_bits(l, cfg.n_layer));
            w.norm(&b("attn_norm"), e);
            w.weight(&b("attn_q"), wt, &[e, head_dim * h]);
            w.weight(&b("attn_k"), wt, &[e, head_dim * hkv]);
            w.weight(&b("attn_v"), vd, &[e, head_dim * hkv]);
            w.weight(&b("attn_output"), wt, &[head_dim * h, e]);
            w.norm(&b("ffn_norm"), e);
            match a {
                Arch::Llama => {
                    w.weight(&b("ffn_gate"), wt, &[e, ff]);
                    w.weight(&b("ffn_up"), wt, &[e, ff]);
                    w.weight(&b("ffn_down"), vd, &[ff, e]);
                }
                Arch::Qwen3Moe => {
                    let ne = cfg.n_expert as i64;
                    w.norm(&b("attn_q_norm"), head_dim);
                    w.norm(&b("attn_k_norm"), head_dim);
                    w.tensor(&b("ffn_gate_inp"), ElemType::F32, &[e, ne], |r| {
                        (r.random::<f32>() * 2.0 - 1.0) * 0.3
                    });
                    w.weight(&b("ffn_gate_exps"), wt, &[e, ff, ne]);
                    w.weight(&b("ffn_up_exps"), wt, &[e, ff, ne]);
                    w.weight(&b("ffn_down_exps"), vd, &[ff, e, ne]);
                }
            }
        }
        let path_c = c(path.to_str().expect("utf-8 temp path"));
        let ok = sys::gguf_write_to_file(gguf, path_c.as_ptr(), false);
        sys::gguf_free(gguf);
        sys::ggml_free(ctx);
        assert!(ok, "writing {}", path.display());
    }
    path
}
