//! FLASH_ATTN_EXT: every K/V type ggml's CPU backend reads (f32, f16, bf16, q8_0, q4_0, q4_1,
//! q5_0, q5_1, iq4_nl), K and V of different types, the head sizes models use (40 … 256 and
//! DeepSeek's 576 / 512), with and without a mask (random or causal, broadcast over heads),
//! GQA, one to many queries, sequences (q sequences broadcast over K/V ones), sinks, logit
//! softcap, ALiBi, the precision setting, K/V as strided views of a cache, and kv lengths from 1
//! to a few thousand (long enough for the GPU to split the kv range over blocks).

use super::{Case, Fill, Setup};
use tandem_graph::{ElemType, Op};

#[derive(Clone, Copy)]
struct FaCase {
    k_ty: ElemType,
    v_ty: ElemType,
    d: i64,
    /// Head size of V (and of the output).
    dv: i64,
    n_kv: i64,
    n_q: i64,
    n_head: i64,
    n_head_kv: i64,
    mask: bool,
    /// A causal mask instead of a random one.
    causal: bool,
    /// With `causal`: kv rows at the end that every query masks (a cache padded past the
    /// sequence, as llama.cpp's is).
    hidden_tail: i64,
    /// Mask planes over heads (1 = broadcast to every head).
    mask_heads: i64,
    /// q sequences, and K/V sequences they broadcast over.
    n_seq: i64,
    n_seq_kv: i64,
    sinks: bool,
    softcap: f32,
    max_bias: f32,
    /// ggml's precision param (0 default, 10 f32).
    prec: i32,
    /// K and V stored `[d, n_head_kv, n_kv]` (a cache laid out token-major) and permuted.
    cache_view: bool,
}

impl FaCase {
    fn base(kv_ty: ElemType, d: i64, n_kv: i64, n_q: i64, n_head: i64, n_head_kv: i64, mask: bool) -> FaCase {
        FaCase {
            k_ty: kv_ty,
            v_ty: kv_ty,
            d,
            dv: d,
            n_kv,
            n_q,
            n_head,
            n_head_kv,
            mask,
            causal: false,
            hidden_tail: 0,
            mask_heads: 1,
            n_seq: 1,
            n_seq_kv: 1,
            sinks: false,
            softcap: 0.0,
            max_bias: 0.0,
            prec: 0,
            cache_view: false,
        }
    }
}

fn flash_attn(c: FaCase) -> Case {
    let mut name = if c.k_ty == c.v_ty {
        format!("FLASH_ATTN_EXT(kv={}", c.k_ty)
    } else {
        format!("FLASH_ATTN_EXT(k={},v={}", c.k_ty, c.v_ty)
    };
    if c.dv == c.d {
        name += &format!(",d={}", c.d);
    } else {
        name += &format!(",dk={},dv={}", c.d, c.dv);
    }
    name += &format!(
        ",n_kv={},n_q={},heads={}/{},mask={}",
        c.n_kv, c.n_q, c.n_head, c.n_head_kv, c.mask as u8
    );
    if c.causal {
        name += ",causal";
    }
    if c.hidden_tail != 0 {
        name += &format!(",hidden_tail={}", c.hidden_tail);
    }
    if c.mask_heads != 1 {
        name += &format!(",mask_heads={}", c.mask_heads);
    }
    if c.n_seq != 1 {
        name += &format!(",seqs={}/{}", c.n_seq, c.n_seq_kv);
    }
    if c.sinks {
        name += ",sinks";
    }
    if c.softcap != 0.0 {
        name += &format!(",softcap={}", c.softcap);
    }
    if c.max_bias != 0.0 {
        name += &format!(",max_bias={}", c.max_bias);
    }
    if c.prec != 0 {
        name += &format!(",prec={}", c.prec);
    }
    if c.cache_view {
        name += ",cache_view";
    }
    name.push(')');
    let flops = 2.0 * ((c.d + c.dv) * c.n_kv * c.n_q * c.n_head * c.n_seq) as f64;
    Case::new(Op::FlashAttnExt, name, move |s: &mut Setup| {
        let q = s.input(ElemType::F32, &[c.d, c.n_q, c.n_head, c.n_seq])?;
        let (k, v) = if c.cache_view {
            let k0 = s.input(c.k_ty, &[c.d, c.n_head_kv, c.n_kv, c.n_seq_kv])?;
            let v0 = s.input(c.v_ty, &[c.dv, c.n_head_kv, c.n_kv, c.n_seq_kv])?;
            (s.g.permute(k0, [0, 2, 1, 3])?, s.g.permute(v0, [0, 2, 1, 3])?)
        } else {
            (
                s.input(c.k_ty, &[c.d, c.n_kv, c.n_head_kv, c.n_seq_kv])?,
                s.input(c.v_ty, &[c.dv, c.n_kv, c.n_head_kv, c.n_seq_kv])?,
            )
        };
        let mask = if c.mask {
            let fill = if c.causal {
                Fill::Causal(c.n_kv - c.n_q - c.hidden_tail)
            } else {
                Fill::Mask(0.3)
            };
            Some(s.input_with(ElemType::F16, &[c.n_kv, c.n_q, c.mask_heads, 1], fill)?)
        } else {
            None
        };
        let sinks = if c.sinks {
            Some(s.input(ElemType::F32, &[c.n_head])?)
        } else {
            None
        };
        let scale = 1.0 / (c.d as f32).sqrt();
        let out = s.g.flash_attn_ext(q, k, v, mask, sinks, scale, c.max_bias, c.softcap)?;
        if c.prec != 0 {
            s.g.tensor_mut(out).set_param_i32(3, c.prec);
        }
        Ok(out)
    })
    .with_flops(flops)
}

/// Every K/V type ggml's CPU backend reads.
const KV_TYPES: [ElemType; 9] = tandem_ops::cpu::FLASH_ATTN_KV_TYPES;

pub fn cases(v: &mut Vec<Case>) {
    for kv_ty in KV_TYPES {
        for d in [64, 128] {
            for n_kv in [64, 203] {
                for n_q in [1, 4, 9] {
                    for (n_head, n_head_kv) in [(4, 4), (8, 2)] {
                        for mask in [false, true] {
                            v.push(flash_attn(FaCase::base(kv_ty, d, n_kv, n_q, n_head, n_head_kv, mask)));
                        }
                    }
                }
            }
        }
        for n_q in [1, 5] {
            let base = FaCase::base(kv_ty, 128, 96, n_q, 8, 2, true);
            v.push(flash_attn(FaCase { sinks: true, ..base }));
            v.push(flash_attn(FaCase { softcap: 30.0, ..base }));
            v.push(flash_attn(FaCase { max_bias: 8.0, ..base }));
            v.push(flash_attn(FaCase {
                sinks: true,
                softcap: 30.0,
                ..base
            }));
            v.push(flash_attn(FaCase {
                cache_view: true,
                ..base
            }));
            v.push(flash_attn(FaCase {
                cache_view: true,
                mask: false,
                ..base
            }));
        }
        v.push(flash_attn(FaCase::base(kv_ty, 256, 40, 2, 2, 1, true)));
        v.push(flash_attn(FaCase::base(kv_ty, 64, 1, 1, 2, 2, false)));
        // Long enough that a decode step splits the kv range over blocks, with a ragged end.
        v.push(flash_attn(FaCase::base(kv_ty, 128, 3001, 1, 8, 2, true)));
        v.push(flash_attn(FaCase {
            sinks: true,
            ..FaCase::base(kv_ty, 128, 2048, 2, 8, 2, false)
        }));
    }

    // K and V of different types.
    let pairs = [
        (ElemType::Q8_0, ElemType::F16),
        (ElemType::F16, ElemType::Q4_0),
        (ElemType::Q5_1, ElemType::IQ4NL),
        (ElemType::BF16, ElemType::Q5_0),
        (ElemType::Q4_1, ElemType::F32),
    ];
    for (k_ty, v_ty) in pairs {
        for (n_kv, n_q) in [(77, 1), (300, 7), (1500, 1)] {
            v.push(flash_attn(FaCase {
                v_ty,
                ..FaCase::base(k_ty, 128, n_kv, n_q, 8, 2, true)
            }));
        }
    }

    // Head sizes: those that are not multiples of 32 only with unblocked types.
    for d in [16, 32, 40, 72, 80, 96, 112, 192, 256] {
        let mut tys = vec![ElemType::F16, ElemType::F32];
        if d % 32 == 0 {
            tys.extend([ElemType::Q8_0, ElemType::Q4_0]);
        }
        for ty in tys {
            for (n_kv, n_q) in [(130, 1), (130, 8), (520, 3)] {
                v.push(flash_attn(FaCase::base(ty, d, n_kv, n_q, 8, 2, true)));
            }
        }
    }

    // A llama.cpp prompt and decode step as the tiny test models make them: f16 cache views of
    // 256 cells, mask rows padded past the queries, f32 precision.
    for n_q in [7, 1] {
        v.push(flash_attn(FaCase {
            cache_view: true,
            prec: 10,
            ..FaCase::base(ElemType::F16, 32, 256, n_q, 4, 2, true)
        }));
    }

    // Blocks of an odd number of rows (the large kernel's row state after them).
    for (n_q, n_head) in [(17, 1), (19, 2)] {
        v.push(flash_attn(FaCase::base(ElemType::F16, 64, 100, n_q, n_head, 1, true)));
        v.push(flash_attn(FaCase::base(ElemType::Q4_0, 64, 100, n_q, n_head, 1, true)));
    }

    // DeepSeek's MLA: K 576, V 512, every q head on one kv head.
    for ty in [ElemType::F16, ElemType::Q8_0] {
        for (n_kv, n_q, n_head) in [(100, 1, 16), (700, 1, 16), (64, 7, 16), (37, 2, 128)] {
            v.push(flash_attn(FaCase {
                dv: 512,
                ..FaCase::base(ty, 576, n_kv, n_q, n_head, 1, true)
            }));
        }
    }

    // Prefill: causal masks (whole tiles masked out), many rows a kv head.
    for ty in [ElemType::F16, ElemType::Q8_0, ElemType::Q4_0] {
        for (n_kv, n_q) in [(200, 200), (330, 67), (64, 64)] {
            v.push(flash_attn(FaCase {
                causal: true,
                ..FaCase::base(ty, 128, n_kv, n_q, 8, 2, true)
            }));
        }
        v.push(flash_attn(FaCase {
            causal: true,
            ..FaCase::base(ty, 64, 150, 100, 16, 1, true)
        }));
    }

    // Sequences (q sequences broadcast over K/V ones), per-head mask planes, the precision param.
    for ty in [ElemType::F16, ElemType::Q8_0] {
        let base = FaCase::base(ty, 64, 90, 3, 4, 2, true);
        v.push(flash_attn(FaCase {
            n_seq: 3,
            n_seq_kv: 3,
            ..base
        }));
        v.push(flash_attn(FaCase {
            n_seq: 4,
            n_seq_kv: 2,
            ..base
        }));
        v.push(flash_attn(FaCase { mask_heads: 4, ..base }));
        v.push(flash_attn(FaCase {
            mask_heads: 2,
            max_bias: 4.0,
            ..base
        }));
        v.push(flash_attn(FaCase { prec: 10, ..base }));
        v.push(flash_attn(FaCase {
            cache_view: true,
            n_seq: 2,
            n_seq_kv: 2,
            ..base
        }));
    }

    // Prefill shapes of the tensor-core kernels (f16 K/V, head sizes 64/96/128/256, 32 queries
    // or more a head): ragged kv ends, causal masks over several blocks of queries, no mask,
    // and the options, on 16-byte aligned mask rows (kv lengths that are multiples of 8).
    for d in [64, 96, 128, 256] {
        for (n_kv, n_q, mask, causal) in [
            (104, 40, true, false),
            (203, 33, false, false),
            (520, 130, true, true),
            (128, 64, true, true),
        ] {
            v.push(flash_attn(FaCase {
                causal,
                ..FaCase::base(ElemType::F16, d, n_kv, n_q, 8, 2, mask)
            }));
        }
    }
    tensor_core_options(v, FaCase::base(ElemType::F16, 128, 136, 48, 8, 2, true), 0, false);
    v.push(flash_attn(FaCase {
        causal: true,
        ..FaCase::base(ElemType::F16, 128, 600, 300, 4, 2, true)
    }));

    // Decode and short batches on the tensor-core kernels (f16 K/V, the same head sizes, fewer
    // than 32 queries a head): kv ranges split over many blocks, GQA groups of 1 to 16 rows and
    // groups spread over several blocks, a cache padded past the sequence (tiles at the end
    // that every row masks), no mask with a ragged end.
    for d in [64, 96, 128, 256] {
        v.push(flash_attn(FaCase::base(ElemType::F16, d, 4096, 1, 32, 8, true)));
        v.push(flash_attn(FaCase::base(ElemType::F16, d, 1000, 3, 8, 2, true)));
        v.push(flash_attn(FaCase::base(ElemType::F16, d, 264, 1, 16, 1, true)));
        v.push(flash_attn(FaCase::base(ElemType::F16, d, 200, 5, 8, 1, true)));
        v.push(flash_attn(FaCase::base(ElemType::F16, d, 77, 2, 4, 2, false)));
        v.push(flash_attn(FaCase {
            causal: true,
            hidden_tail: 211,
            ..FaCase::base(ElemType::F16, d, 512, 1, 8, 2, true)
        }));
    }
    tensor_core_options(v, FaCase::base(ElemType::F16, 128, 1536, 2, 8, 2, true), 100, true);
}

/// The options on a tensor-core kernel's shape `base`: sinks, logit softcap, ALiBi with a mask
/// plane per head, a causal mask over cache views with `tail` cells past the sequence and f32
/// precision, and q sequences broadcast over K/V ones (with sinks where `seq_sinks`).
fn tensor_core_options(v: &mut Vec<Case>, base: FaCase, tail: i64, seq_sinks: bool) {
    v.push(flash_attn(FaCase { sinks: true, ..base }));
    v.push(flash_attn(FaCase { softcap: 30.0, ..base }));
    v.push(flash_attn(FaCase {
        max_bias: 8.0,
        mask_heads: 8,
        ..base
    }));
    v.push(flash_attn(FaCase {
        cache_view: true,
        causal: true,
        hidden_tail: tail,
        prec: 10,
        ..base
    }));
    v.push(flash_attn(FaCase {
        n_seq: 4,
        n_seq_kv: 2,
        sinks: seq_sinks,
        ..base
    }));
}
