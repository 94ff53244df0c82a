//! What a FLASH_ATTN_EXT node must look like to run (here and in the reference): the tensors,
//! shapes, strides and params `ggml_flash_attn_ext` (+ `_add_sinks`, `_set_prec`) produces and
//! ggml's CPU kernel relies on.

use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::params::FlashAttnParams;
use tandem_graph::{ElemType, Tensor};

/// ggml's `GGML_PREC_DEFAULT` and `GGML_PREC_F32`; `BF16` and `F16` only allow a narrower
/// accumulator than the f32 one used here, so they are served too.
const PRECISIONS: [i32; 4] = [0, 10, 15, 20];

/// K/V element types the kernel reads (ggml's CPU backend reads the same).
pub const KV_TYPES: [ElemType; 9] = [
    ElemType::F32,
    ElemType::F16,
    ElemType::BF16,
    ElemType::Q8_0,
    ElemType::Q4_0,
    ElemType::Q4_1,
    ElemType::Q5_0,
    ElemType::Q5_1,
    ElemType::IQ4NL,
];

/// The sizes of a checked node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct FaShape {
    /// Head size of q/k.
    pub dk: usize,
    /// Head size of v (and of each output row).
    pub dv: usize,
    pub n_q: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_seq: usize,
    pub n_kv: usize,
    /// q sequences per k/v sequence (`n_seq / k.ne[3]`).
    pub seq_per_kv: usize,
    pub params: FlashAttnParams,
}

impl FaShape {
    /// q heads per kv head.
    pub fn group(&self) -> usize {
        self.n_head / self.n_head_kv
    }
}

/// Validates `dst = flash_attn_ext(q, k, v, mask?, sinks?)` and returns its sizes.
pub(super) fn validate(dst: &Tensor, srcs: &Srcs) -> Result<FaShape, OpError> {
    let q = need(dst, srcs, 0)?;
    let k = need(dst, srcs, 1)?;
    let v = need(dst, srcs, 2)?;
    let fail = |cond: bool, why: &dyn Fn() -> String| ensure(cond, dst, srcs, why);

    for (name, t) in [("dst", dst), ("q", q), ("k", k), ("v", v)] {
        fail(t.ne.iter().all(|&n| n >= 0), &|| format!("{name} has a negative size"))?;
    }
    fail(q.ty == ElemType::F32, &|| format!("q must be f32, got {}", q.ty))?;
    fail(dst.ty == ElemType::F32, &|| format!("dst must be f32, got {}", dst.ty))?;
    for (name, t) in [("k", k), ("v", v)] {
        fail(KV_TYPES.contains(&t.ty), &|| {
            format!(
                "{name} type {} is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl",
                t.ty
            )
        })?;
        fail(t.ty.row_size(t.ne[0]).is_some(), &|| {
            format!("{name} rows of {} are not whole {} blocks", t.ne[0], t.ty)
        })?;
        fail(t.nb[0] == t.ty.type_size(), &|| {
            format!("{name} rows must be contiguous")
        })?;
    }
    fail(k.ne[0] == q.ne[0], &|| {
        format!("k head size {} != q head size {}", k.ne[0], q.ne[0])
    })?;
    fail(v.ne[1] == k.ne[1], &|| {
        format!("v has {} kv rows, k has {}", v.ne[1], k.ne[1])
    })?;
    fail(v.ne[2] == k.ne[2] && v.ne[3] == k.ne[3], &|| {
        "k and v must have the same heads and sequences".into()
    })?;
    fail(k.ne[2] > 0 && q.ne[2] % k.ne[2] == 0, &|| {
        format!("{} q heads are not a multiple of {} kv heads", q.ne[2], k.ne[2])
    })?;
    fail(k.ne[3] > 0 && q.ne[3] % k.ne[3] == 0, &|| {
        format!("{} q sequences are not a multiple of {} kv sequences", q.ne[3], k.ne[3])
    })?;
    let want = [v.ne[0], q.ne[2], q.ne[1], q.ne[3]];
    fail(dst.ne == want, &|| {
        format!("dst must be {want:?} (dv, n_head, n_q, n_seq)")
    })?;
    fail(dst.nb[0] == 4, &|| "dst rows must be contiguous".into())?;

    let params = FlashAttnParams::read(dst);
    fail(params.scale.is_finite(), &|| {
        format!("scale {} is not finite", params.scale)
    })?;
    fail(params.max_bias.is_finite() && params.max_bias >= 0.0, &|| {
        format!("max_bias {} must be finite and >= 0", params.max_bias)
    })?;
    fail(params.logit_softcap.is_finite(), &|| {
        format!("logit_softcap {} is not finite", params.logit_softcap)
    })?;
    fail(PRECISIONS.contains(&params.prec), &|| {
        format!("precision {} is not default, f32, bf16 or f16", params.prec)
    })?;

    match srcs[3] {
        Some(m) => {
            fail(m.ty == ElemType::F16, &|| format!("mask must be f16, got {}", m.ty))?;
            fail(m.ne.iter().all(|&n| n > 0), &|| "mask has an empty dimension".into())?;
            fail(m.nb[0] == 2, &|| "mask rows must be contiguous".into())?;
            fail(m.ne[0] >= k.ne[1] && m.ne[1] >= q.ne[1], &|| {
                format!("mask must cover [{}, {}]", k.ne[1], q.ne[1])
            })?;
            fail(q.ne[2] % m.ne[2] == 0 && q.ne[3] % m.ne[3] == 0, &|| {
                "mask must broadcast over heads and sequences".into()
            })?;
        }
        None => fail(params.max_bias == 0.0, &|| "max_bias (ALiBi) needs a mask".into())?,
    }
    if let Some(s) = srcs[4] {
        fail(s.ty == ElemType::F32, &|| format!("sinks must be f32, got {}", s.ty))?;
        fail(s.ne == [q.ne[2], 1, 1, 1], &|| {
            format!("sinks must be [{}] (one per head)", q.ne[2])
        })?;
    }
    fail(srcs[5..].iter().all(|s| s.is_none()), &|| {
        "unexpected sources after sinks".into()
    })?;

    Ok(FaShape {
        dk: q.ne[0] as usize,
        dv: v.ne[0] as usize,
        n_q: q.ne[1] as usize,
        n_head: q.ne[2] as usize,
        n_head_kv: k.ne[2] as usize,
        n_seq: q.ne[3] as usize,
        n_kv: k.ne[1] as usize,
        seq_per_kv: (q.ne[3] / k.ne[3]) as usize,
        params,
    })
}

/// ALiBi slope of each head (all 1 without max_bias), computed in f32 like ggml.
pub(super) fn alibi_slopes(n_head: usize, max_bias: f32) -> Vec<f32> {
    if max_bias <= 0.0 || n_head == 0 {
        return vec![1.0; n_head];
    }
    let n_log2 = 1u32 << (n_head as f64).log2().floor() as u32;
    let m0 = 2f32.powf(-max_bias / n_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_log2 as f32);
    (0..n_head as u32)
        .map(|h| {
            if h < n_log2 {
                m0.powf((h + 1) as f32)
            } else {
                m1.powf((2 * (h - n_log2) + 1) as f32)
            }
        })
        .collect()
}
