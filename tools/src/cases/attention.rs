//! FLASH_ATTN_EXT: f16/bf16/q8_0/q4_0 K and V, with and without a mask, GQA, one and several
//! queries, sinks, logit softcap, ALiBi, and K/V as strided views of a cache.

use super::{Case, Fill, Setup};
use tandem_graph::{ElemType, Op};

#[derive(Clone, Copy)]
struct FaCase {
    kv_ty: ElemType,
    d: i64,
    n_kv: i64,
    n_q: i64,
    n_head: i64,
    n_head_kv: i64,
    mask: bool,
    sinks: bool,
    softcap: f32,
    max_bias: f32,
    /// K and V stored `[d, n_head_kv, n_kv]` (a cache laid out token-major) and permuted.
    cache_view: bool,
}

impl FaCase {
    fn base(kv_ty: ElemType, d: i64, n_kv: i64, n_q: i64, n_head: i64, n_head_kv: i64, mask: bool) -> FaCase {
        FaCase {
            kv_ty,
            d,
            n_kv,
            n_q,
            n_head,
            n_head_kv,
            mask,
            sinks: false,
            softcap: 0.0,
            max_bias: 0.0,
            cache_view: false,
        }
    }
}

fn flash_attn(c: FaCase) -> Case {
    let mut name = format!(
        "FLASH_ATTN_EXT(kv={},d={},n_kv={},n_q={},heads={}/{},mask={}",
        c.kv_ty, c.d, c.n_kv, c.n_q, c.n_head, c.n_head_kv, c.mask as u8
    );
    if c.sinks {
        name += ",sinks";
    }
    if c.softcap != 0.0 {
        name += &format!(",softcap={}", c.softcap);
    }
    if c.max_bias != 0.0 {
        name += &format!(",max_bias={}", c.max_bias);
    }
    if c.cache_view {
        name += ",cache_view";
    }
    name.push(')');
    let flops = 4.0 * (c.d * c.n_kv * c.n_q * c.n_head) as f64;
    Case::new(Op::FlashAttnExt, name, move |s: &mut Setup| {
        let q = s.input(ElemType::F32, &[c.d, c.n_q, c.n_head])?;
        let (k, v) = if c.cache_view {
            let k0 = s.input(c.kv_ty, &[c.d, c.n_head_kv, c.n_kv])?;
            let v0 = s.input(c.kv_ty, &[c.d, c.n_head_kv, c.n_kv])?;
            (s.g.permute(k0, [0, 2, 1, 3])?, s.g.permute(v0, [0, 2, 1, 3])?)
        } else {
            (
                s.input(c.kv_ty, &[c.d, c.n_kv, c.n_head_kv])?,
                s.input(c.kv_ty, &[c.d, c.n_kv, c.n_head_kv])?,
            )
        };
        let mask = if c.mask {
            Some(s.input_with(ElemType::F16, &[c.n_kv, c.n_q], Fill::Mask(0.3))?)
        } else {
            None
        };
        let sinks = if c.sinks {
            Some(s.input(ElemType::F32, &[c.n_head])?)
        } else {
            None
        };
        let scale = 1.0 / (c.d as f32).sqrt();
        s.g.flash_attn_ext(q, k, v, mask, sinks, scale, c.max_bias, c.softcap)
    })
    .with_flops(flops)
}

pub fn cases(v: &mut Vec<Case>) {
    for kv_ty in [ElemType::F16, ElemType::BF16, ElemType::Q8_0, ElemType::Q4_0] {
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
    }
}
