//! ROPE: normal and neox, f32 and f16, partial rotation (n_dims < head_dim), frequency factors,
//! YaRN scaling, strided views and in place.

use super::{Case, Fill, Setup};
use tandem_graph::params::RopeParams;
use tandem_graph::{ElemType, Op};

#[derive(Clone, Copy)]
struct RopeCase {
    ty: ElemType,
    neox: bool,
    head_dim: i64,
    n_dims: i64,
    n_head: i64,
    n_tokens: i64,
    freq_factors: bool,
    yarn: bool,
    /// Rotate a view of the first `n_head` heads of a tensor holding twice as many.
    view: bool,
    inplace: bool,
}

fn rope(c: RopeCase) -> Case {
    let name = format!(
        "ROPE(type={},mode={},head_dim={},n_dims={},heads={},tokens={},ff={},yarn={}{}{})",
        c.ty,
        if c.neox { "neox" } else { "normal" },
        c.head_dim,
        c.n_dims,
        c.n_head,
        c.n_tokens,
        c.freq_factors as u8,
        c.yarn as u8,
        if c.view { ",view" } else { "" },
        if c.inplace { ",inplace" } else { "" },
    );
    Case::new(Op::Rope, name, move |s: &mut Setup| {
        let a = if c.view {
            let full = s.input(c.ty, &[c.head_dim, 2 * c.n_head, c.n_tokens])?;
            let t = s.g.tensor(full).clone();
            s.g.view(full, &[c.head_dim, c.n_head, c.n_tokens], &[t.nb[1], t.nb[2]], 0)?
        } else {
            s.input(c.ty, &[c.head_dim, c.n_head, c.n_tokens])?
        };
        let pos = s.input_with(ElemType::I32, &[c.n_tokens], Fill::Index(512))?;
        let ff = if c.freq_factors {
            Some(s.input_with(ElemType::F32, &[c.n_dims / 2], Fill::Uniform(0.5, 2.0))?)
        } else {
            None
        };
        let mut p = RopeParams::llama(c.n_dims as i32, c.neox);
        if c.yarn {
            p.freq_scale = 0.25;
            p.ext_factor = 1.0;
            p.attn_factor = 1.1;
            p.freq_base = 500000.0;
        }
        let out = s.g.rope(a, pos, ff, p)?;
        if c.inplace {
            s.make_inplace(out, a);
        }
        Ok(out)
    })
}

/// A K cache store: the ROPE of `n_tokens` tokens of `n_head` heads, viewed as rows of
/// `head_dim * n_head` values and stored by SET_ROWS into a cache of 16 rows of type `cache`
/// (the chain a GPU may run as one kernel for one token); judged on the cache.
fn rope_store(
    cache: ElemType,
    idx_ty: ElemType,
    neox: bool,
    head_dim: i64,
    n_dims: i64,
    n_head: i64,
    n_tokens: i64,
) -> Case {
    let name = format!(
        "SET_ROWS(type={cache},idx={idx_ty},x=ROPE(mode={},head_dim={head_dim},n_dims={n_dims},heads={n_head},tokens={n_tokens}))",
        if neox { "neox" } else { "normal" },
    );
    Case::new(Op::SetRows, name, move |s: &mut Setup| {
        let k = s.input(ElemType::F32, &[head_dim, n_head, n_tokens])?;
        let pos = s.input_with(ElemType::I32, &[n_tokens], Fill::Index(512))?;
        let dst = s.input(cache, &[head_dim * n_head, 16])?;
        let idx = s.input_with(idx_ty, &[n_tokens], Fill::DistinctIndex(16))?;
        let r = s.g.rope(k, pos, None, RopeParams::llama(n_dims as i32, neox))?;
        let rows = s.g.reshape(r, &[head_dim * n_head, n_tokens])?;
        s.g.set_rows(dst, rows, idx)
    })
}

pub fn cases(v: &mut Vec<Case>) {
    for (cache, idx_ty) in [(ElemType::F16, ElemType::I64), (ElemType::F32, ElemType::I32)] {
        for neox in [false, true] {
            v.push(rope_store(cache, idx_ty, neox, 128, 128, 8, 1));
            v.push(rope_store(cache, idx_ty, neox, 64, 32, 3, 1));
        }
        v.push(rope_store(cache, idx_ty, false, 128, 128, 8, 4));
    }
    for ty in [ElemType::F32, ElemType::F16] {
        for neox in [false, true] {
            for head_dim in [64, 80, 128] {
                for n_dims in [head_dim, head_dim / 2] {
                    for freq_factors in [false, true] {
                        for yarn in [false, true] {
                            v.push(rope(RopeCase {
                                ty,
                                neox,
                                head_dim,
                                n_dims,
                                n_head: 3,
                                n_tokens: 5,
                                freq_factors,
                                yarn,
                                view: false,
                                inplace: false,
                            }));
                        }
                    }
                }
            }
            for (view, inplace) in [(true, false), (false, true)] {
                for (n_head, n_tokens) in [(1, 1), (8, 7)] {
                    v.push(rope(RopeCase {
                        ty,
                        neox,
                        head_dim: 128,
                        n_dims: 128,
                        n_head,
                        n_tokens,
                        freq_factors: false,
                        yarn: false,
                        view,
                        inplace,
                    }));
                }
            }
        }
    }
}
