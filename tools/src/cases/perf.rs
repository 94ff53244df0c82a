//! The perf-ops cases: model-sized shapes (an 8B-class decoder: hidden 4096, FFN 14336, 32
//! heads of 128, 8 KV heads, 32000-token vocabulary; a 128-expert MoE with hidden 2048 and
//! expert FFN 768, top-8), plus a decode-like chain of small nodes for per-node overhead.

use super::{Case, Fill, Setup};
use tandem_graph::params::RopeParams;
use tandem_graph::{ElemType, GluOp, Op, UnaryOp};

/// Layers of the decode-like chain; eight nodes each.
pub const CHAIN_LAYERS: usize = 64;
pub const CHAIN_NODES_PER_LAYER: usize = 8;
/// Name prefix of the chain case (its op is ADD, its last node).
pub const CHAIN_NAME: &str = "DECODE_CHAIN";

fn mul_mat(ty: ElemType, m: i64, k: i64, n: i64) -> Case {
    let name = format!("MUL_MAT(type={ty},m={m},k={k},n={n})");
    Case::new(Op::MulMat, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m])?;
        let b = s.input(ElemType::F32, &[k, n])?;
        s.g.mul_mat(a, b)
    })
    .with_flops(2.0 * (m * n * k) as f64)
}

fn flash_attn_decode(kv_ty: ElemType, n_kv: i64, n_q: i64) -> Case {
    flash_attn_heads(kv_ty, 128, n_kv, n_q, 32, 8)
}

/// Flash attention over `n_kv` cached rows with an all-visible mask (a decode step, or a prompt
/// of `n_q` tokens at that depth).
fn flash_attn_heads(kv_ty: ElemType, d: i64, n_kv: i64, n_q: i64, h: i64, h_kv: i64) -> Case {
    let name = format!("FLASH_ATTN_EXT(kv={kv_ty},d={d},n_kv={n_kv},n_q={n_q},heads={h}/{h_kv})");
    Case::new(Op::FlashAttnExt, name, move |s: &mut Setup| {
        let q = s.input(ElemType::F32, &[d, n_q, h])?;
        let k = s.input(kv_ty, &[d, n_kv, h_kv])?;
        let v = s.input(kv_ty, &[d, n_kv, h_kv])?;
        let mask = s.input_with(ElemType::F16, &[n_kv, n_q], Fill::Mask(0.0))?;
        s.g.flash_attn_ext(q, k, v, Some(mask), None, 1.0 / (d as f32).sqrt(), 0.0, 0.0)
    })
    .with_flops(4.0 * (d * n_kv * n_q * h) as f64)
}

/// A prompt of `n_q` tokens at positions 0.. in a cache of `n_kv` cells, f16 K/V: with `views`
/// as llama.cpp builds it (q a permuted view of the projection, K and V views of a token-major
/// cache), else contiguous; a causal mask (the cells past the prompt masked for every query) or
/// an all-visible one.
fn flash_attn_prompt(d: i64, n_kv: i64, n_q: i64, heads: (i64, i64), causal: bool, views: bool) -> Case {
    let (h, h_kv) = heads;
    let name = format!(
        "FLASH_ATTN_EXT(kv=f16,d={d},n_kv={n_kv},n_q={n_q},heads={h}/{h_kv},{}{})",
        if causal { "causal" } else { "visible" },
        if views { ",views" } else { "" }
    );
    Case::new(Op::FlashAttnExt, name, move |s: &mut Setup| {
        let (q, k, v) = if views {
            let q = s.input(ElemType::F32, &[d, h, n_q])?;
            let k = s.input(ElemType::F16, &[d, h_kv, n_kv])?;
            let v = s.input(ElemType::F16, &[d, h_kv, n_kv])?;
            (
                s.g.permute(q, [0, 2, 1, 3])?,
                s.g.permute(k, [0, 2, 1, 3])?,
                s.g.permute(v, [0, 2, 1, 3])?,
            )
        } else {
            (
                s.input(ElemType::F32, &[d, n_q, h])?,
                s.input(ElemType::F16, &[d, n_kv, h_kv])?,
                s.input(ElemType::F16, &[d, n_kv, h_kv])?,
            )
        };
        let fill = if causal { Fill::Causal(0) } else { Fill::Mask(0.0) };
        let mask = s.input_with(ElemType::F16, &[n_kv, n_q], fill)?;
        s.g.flash_attn_ext(q, k, v, Some(mask), None, 1.0 / (d as f32).sqrt(), 0.0, 0.0)
    })
    .with_flops(4.0 * (d * n_kv * n_q * h) as f64)
}

/// Bytes of one row of `ne0` elements.
fn row(ty: ElemType, ne0: i64) -> usize {
    ty.row_size(ne0).unwrap_or(0)
}

/// MUL_MAT_ID as a MoE FFN's gate/up projection: `experts` matrices of `m x k`, `used` of them
/// per token, `tokens` tokens sharing one activation row per token.
fn mul_mat_id(ty: ElemType, m: i64, k: i64, experts: i64, used: i64, tokens: i64) -> Case {
    let name = format!("MUL_MAT_ID(type={ty},m={m},k={k},experts={experts},used={used},tokens={tokens})");
    // Experts read: every one a token picks. With distinct random picks per token, the chance
    // that some expert stays unpicked is below experts * (1 - used/experts)^tokens; count all
    // once that is under 1e-6, else (one token) the `used` ones.
    let untouched = experts as f64 * (1.0 - used as f64 / experts as f64).powi(tokens as i32);
    let read = if untouched < 1e-6 {
        experts
    } else {
        used.min(experts) * tokens.min(experts)
    };
    let bytes = read as usize * m as usize * row(ty, k)
        + (k * tokens) as usize * 4
        + (used * tokens) as usize * 4
        + (m * used * tokens) as usize * 4;
    Case::new(Op::MulMatId, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m, experts])?;
        let b = s.input(ElemType::F32, &[k, 1, tokens])?;
        let ids = s.input_with(ElemType::I32, &[used, tokens], Fill::DistinctIndex(experts))?;
        s.g.mul_mat_id(a, b, ids)
    })
    .with_flops(2.0 * (m * k * used * tokens) as f64)
    .with_bytes(bytes)
}

/// A decode step's small-node skeleton on one token: per layer RMS_NORM, MUL (norm weight),
/// SCALE, ADD (residual), RMS_NORM, MUL, UNARY(SILU), ADD; every tensor 4096x1 f32. Its time
/// per node is the executor's launch overhead, not arithmetic.
fn decode_chain(layers: usize) -> Case {
    let name = format!(
        "{CHAIN_NAME}(layers={layers},nodes={},ne=4096x1)",
        layers * CHAIN_NODES_PER_LAYER
    );
    Case::new(Op::Add, name, move |s: &mut Setup| {
        let mut x = s.input(ElemType::F32, &[4096, 1])?;
        for _ in 0..layers {
            let g1 = s.input(ElemType::F32, &[4096])?;
            let g2 = s.input(ElemType::F32, &[4096])?;
            let n = s.g.rms_norm(x, 1e-5);
            let n = s.g.mul(n, g1)?;
            let a = s.g.scale(n, 0.5, 0.0);
            x = s.g.add(x, a)?;
            let f = s.g.rms_norm(x, 1e-5);
            let f = s.g.mul(f, g2)?;
            let u = s.g.unary(f, UnaryOp::Silu)?;
            x = s.g.add(x, u)?;
        }
        Ok(x)
    })
}

/// The cases; `batched` adds those that are slow on a CPU (MUL_MAT and MUL_MAT_ID at 512 tokens),
/// which perf-ops runs on GPU devices only.
pub fn cases(batched: bool) -> Vec<Case> {
    let mut v = Vec::new();
    // The headline decode types (docs/performance.md) first, then every other MUL_MAT weight type
    // but f32, so a slow kernel of any of them shows.
    let decode = [
        ElemType::F16,
        ElemType::Q8_0,
        ElemType::Q4_0,
        ElemType::Q4K,
        ElemType::Q6K,
    ];
    let others = [
        ElemType::IQ4NL,
        ElemType::BF16,
        ElemType::Q4_1,
        ElemType::Q5_0,
        ElemType::Q5_1,
        ElemType::Q2K,
        ElemType::Q3K,
        ElemType::Q5K,
    ];
    for ty in decode.into_iter().chain(others) {
        v.push(mul_mat(ty, 14336, 4096, 1));
    }
    for ty in [ElemType::Q4_0, ElemType::Q4K] {
        v.push(mul_mat(ty, 14336, 4096, 8));
        v.push(mul_mat(ty, 4096, 14336, 1));
    }
    // Batched decode (several sequences or draft tokens): the multi-column GEMV.
    for ty in [ElemType::Q8_0, ElemType::Q2K, ElemType::Q3K, ElemType::Q6K] {
        v.push(mul_mat(ty, 14336, 4096, 8));
    }
    for n in [2, 4] {
        v.push(mul_mat(ElemType::Q4_0, 14336, 4096, n));
    }
    // Batched decode of the other shapes: attention projections (narrow) and the FFN's down
    // projection (long rows).
    for m in [1024, 4096] {
        v.push(mul_mat(ElemType::Q4_0, m, 4096, 8));
    }
    v.push(mul_mat(ElemType::Q4K, 4096, 14336, 8));
    // ... and in q6_K with rows that are not 16-byte aligned (13B-class, 54 superblocks).
    v.push(mul_mat(ElemType::Q6K, 5120, 13824, 8));
    v.push(mul_mat(ElemType::Q6K, 32000, 4096, 1));
    // Narrow GEMVs (attention projections, small models): too few rows to fill a big GPU.
    for m in [1024, 2048, 3072] {
        v.push(mul_mat(ElemType::Q4_0, m, 4096, 1));
    }
    v.push(mul_mat(ElemType::Q4_0, 4096, 4096, 1));
    // f16 decode of the other shapes: an attention projection and the FFN's down projection.
    v.push(mul_mat(ElemType::F16, 4096, 4096, 1));
    v.push(mul_mat(ElemType::F16, 4096, 14336, 1));
    if batched {
        for ty in [
            ElemType::Q4_0,
            ElemType::Q8_0,
            ElemType::F16,
            ElemType::Q4K,
            ElemType::Q5K,
            ElemType::Q6K,
            ElemType::Q3K,
            ElemType::Q2K,
            ElemType::IQ4NL,
            ElemType::Q4_1,
            ElemType::Q5_0,
            ElemType::Q5_1,
            ElemType::BF16,
        ] {
            v.push(mul_mat(ty, 14336, 4096, 512));
        }
        // The FFN down projection of a 13B-class model in q6_K: rows of 54 superblocks, 4-byte
        // aligned.
        v.push(mul_mat(ElemType::Q6K, 5120, 13824, 512));
        // Prefill of an 8B-class model's key or value projection (1024 rows) and its attention
        // output projection: fewer output tiles than a big GPU holds at once, or a last wave
        // far from full.
        for ty in [ElemType::Q4_0, ElemType::Q4K, ElemType::F16] {
            v.push(mul_mat(ty, 1024, 4096, 512));
            v.push(mul_mat(ty, 4096, 4096, 512));
        }
        // Short prompts and prefill chunks: the GEMMs' tiles of 128 or 256 columns part used.
        for n in [16, 64, 128, 256] {
            for ty in [ElemType::Q4_0, ElemType::Q8_0] {
                v.push(mul_mat(ty, 14336, 4096, n));
            }
        }
    }
    v.push(mul_mat_id(ElemType::Q4_0, 768, 2048, 128, 8, 1));
    if batched {
        v.push(mul_mat_id(ElemType::Q4_0, 768, 2048, 128, 8, 512));
    }
    v.push(
        Case::new(
            Op::MulMatId,
            "MUL_MAT_ID(type=q4_K,m=2048,k=4096,experts=32,used=4,tokens=1)".into(),
            |s| {
                let a = s.input(ElemType::Q4K, &[4096, 2048, 32])?;
                let b = s.input(ElemType::F32, &[4096, 1, 1])?;
                let ids = s.input_with(ElemType::I32, &[4, 1], Fill::DistinctIndex(32))?;
                s.g.mul_mat_id(a, b, ids)
            },
        )
        .with_flops(2.0 * (2048 * 4096 * 4) as f64)
        // Four of the 32 experts are read, plus the activations, ids and output.
        .with_bytes(4 * 2048 * row(ElemType::Q4K, 4096) + 4096 * 4 + 4 * 4 + 4 * 2048 * 4),
    );
    for kv in [ElemType::F16, ElemType::Q8_0] {
        v.push(flash_attn_decode(kv, 4096, 1));
    }
    v.push(flash_attn_decode(ElemType::F16, 1024, 16));
    // The shapes llama.cpp's CUDA backend was measured on: Llama-3-8B heads at 16K, and a
    // 256-wide head with 16 q heads per kv head (Gemma-like) at 20K, decode and a 512-token prompt.
    for kv in [ElemType::F16, ElemType::Q8_0] {
        v.push(flash_attn_heads(kv, 128, 16384, 1, 32, 8));
        v.push(flash_attn_heads(kv, 256, 20000, 1, 32, 2));
    }
    v.push(flash_attn_heads(ElemType::F16, 256, 20000, 512, 32, 2));
    // A 512-token prompt of Llama-3-8B heads at a 4K depth.
    v.push(flash_attn_heads(ElemType::F16, 128, 4608, 512, 32, 8));
    // A 512-token prompt in a 768-cell cache, as llama.cpp's graphs hold it, and two neighbours.
    v.push(flash_attn_prompt(128, 768, 512, (32, 8), true, true));
    v.push(flash_attn_prompt(128, 768, 512, (32, 8), false, true));
    v.push(flash_attn_prompt(128, 768, 512, (32, 8), true, false));
    v.push(Case::new(Op::RmsNorm, "RMS_NORM(ne=4096x1)".into(), |s| {
        let a = s.input(ElemType::F32, &[4096, 1])?;
        Ok(s.g.rms_norm(a, 1e-5))
    }));
    v.push(Case::new(
        Op::Rope,
        "ROPE(type=f32,mode=neox,head_dim=128,heads=32,tokens=1)".into(),
        |s| {
            let a = s.input(ElemType::F32, &[128, 32, 1])?;
            let pos = s.input_with(ElemType::I32, &[1], Fill::Index(4096))?;
            s.g.rope(a, pos, None, RopeParams::llama(128, true))
        },
    ));
    v.push(Case::new(Op::SoftMax, "SOFT_MAX(ne=4096x32,mask=f16)".into(), |s| {
        let a = s.input(ElemType::F32, &[4096, 32])?;
        let m = s.input_with(ElemType::F16, &[4096, 32], Fill::Mask(0.1))?;
        s.g.soft_max(a, Some(m), None, 0.088, 0.0)
    }));
    v.push(Case::new(
        Op::Glu,
        "GLU(op=SWIGLU,type=f32,ne=14336x1,split)".into(),
        |s| {
            let a = s.input(ElemType::F32, &[14336, 1])?;
            let b = s.input(ElemType::F32, &[14336, 1])?;
            s.g.glu_split(a, b, GluOp::Swiglu)
        },
    ));
    v.push(
        Case::new(Op::GetRows, "GET_ROWS(type=q4_K,ne0=4096,rows=32000,n=1)".into(), |s| {
            let a = s.input(ElemType::Q4K, &[4096, 32000])?;
            let i = s.input_with(ElemType::I32, &[1], Fill::Index(32000))?;
            s.g.get_rows(a, i)
        })
        // One row read, plus the index and the f32 row written.
        .with_bytes(row(ElemType::Q4K, 4096) + 4 + 4096 * 4),
    );
    v.push(
        Case::new(Op::SetRows, "SET_ROWS(type=f16,ne0=1024,rows=4096,n=1)".into(), |s| {
            let a = s.input(ElemType::F16, &[1024, 4096])?;
            let b = s.input(ElemType::F32, &[1024, 1])?;
            let i = s.input_with(ElemType::I64, &[1], Fill::Index(4096))?;
            s.g.set_rows(a, b, i)
        })
        // One f32 row read, the index, one f16 row written.
        .with_bytes(1024 * 4 + 8 + 1024 * 2),
    );
    v.push(Case::new(Op::Add, "ADD(type=f32,ne=4096x8)".into(), |s| {
        let a = s.input(ElemType::F32, &[4096, 8])?;
        let b = s.input(ElemType::F32, &[4096, 8])?;
        s.g.add(a, b)
    }));
    v.push(Case::new(Op::TopK, "TOP_K(ne=32000x1,k=40)".into(), |s| {
        let a = s.input_with(ElemType::F32, &[32000, 1], Fill::Distinct)?;
        s.g.top_k(a, 40)
    }));
    v.push(decode_chain(CHAIN_LAYERS));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn cases_build_with_unique_names() {
        let all = cases(true);
        assert!(all.len() > cases(false).len());
        let mut names = HashSet::new();
        for c in &all {
            assert!(names.insert(c.name.clone()), "duplicate {}", c.name);
            let (g, out, _) = c.instantiate().unwrap_or_else(|e| panic!("{}: {e}", c.name));
            assert_eq!(g.tensor(out).op, c.op, "{}", c.name);
        }
        for want in [
            "MUL_MAT(type=q4_0,m=1024,k=4096,n=1)",
            "MUL_MAT(type=f16,m=14336,k=4096,n=512)",
            "MUL_MAT_ID(type=q4_0,m=768,k=2048,experts=128,used=8,tokens=512)",
        ] {
            assert!(names.contains(want), "missing {want}");
        }
    }

    #[test]
    fn decode_chain_has_over_512_small_nodes() {
        let c = decode_chain(CHAIN_LAYERS);
        let (g, _, _) = c.instantiate().unwrap();
        assert_eq!(g.nodes.len(), CHAIN_LAYERS * CHAIN_NODES_PER_LAYER);
        assert!(g.nodes.len() >= 512);
        assert!(g.nodes.iter().all(|&n| g.tensor(n).nelements() == 4096));
    }

    #[test]
    fn mul_mat_id_counts_the_experts_it_reads() {
        let one = mul_mat_id(ElemType::Q4_0, 768, 2048, 128, 8, 1);
        let all = mul_mat_id(ElemType::Q4_0, 768, 2048, 128, 8, 512);
        let w = 768 * row(ElemType::Q4_0, 2048);
        assert_eq!(one.bytes.unwrap(), 8 * w + 2048 * 4 + 8 * 4 + 768 * 8 * 4);
        assert!(all.bytes.unwrap() >= 128 * w);
        assert!(all.bytes.unwrap() < 129 * w + (2048 * 512 + 8 * 512 + 768 * 8 * 512) * 4);
    }
}
