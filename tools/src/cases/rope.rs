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

pub fn cases(v: &mut Vec<Case>) {
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
