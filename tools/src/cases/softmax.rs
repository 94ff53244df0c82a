//! SOFT_MAX: no mask, f16/f32 masks (full, broadcast over heads, padded rows), scale, ALiBi
//! slopes, attention sinks, in place.

use super::{dims, Case, Fill, Setup};
use tandem_graph::{ElemType, Op};

#[derive(Clone, Copy)]
struct SoftMaxCase {
    ne: [i64; 4],
    /// Mask type and whether it broadcasts over dims 2 and 3 (one head) and has padded rows.
    mask: Option<(ElemType, bool)>,
    scale: f32,
    max_bias: f32,
    sinks: bool,
    inplace: bool,
}

fn soft_max(c: SoftMaxCase) -> Case {
    let mask = match c.mask {
        None => "none".to_string(),
        Some((ty, bcast)) => format!("{ty}{}", if bcast { "_bcast" } else { "" }),
    };
    let name = format!(
        "SOFT_MAX(ne={},mask={mask},scale={},max_bias={},sinks={}{})",
        dims(&c.ne),
        c.scale,
        c.max_bias,
        c.sinks as u8,
        if c.inplace { ",inplace" } else { "" }
    );
    Case::new(Op::SoftMax, name, move |s: &mut Setup| {
        let a = s.input_with(ElemType::F32, &c.ne, Fill::Uniform(-4.0, 4.0))?;
        let mask = match c.mask {
            None => None,
            Some((ty, bcast)) => {
                let ne = if bcast {
                    [c.ne[0], c.ne[1] + 3, 1, 1]
                } else {
                    [c.ne[0], c.ne[1], c.ne[2], c.ne[3]]
                };
                Some(s.input_with(ty, &ne, Fill::Mask(0.25))?)
            }
        };
        let sinks = if c.sinks {
            Some(s.input(ElemType::F32, &[c.ne[2]])?)
        } else {
            None
        };
        let out = s.g.soft_max(a, mask, sinks, c.scale, c.max_bias)?;
        if c.inplace {
            s.make_inplace(out, a);
        }
        Ok(out)
    })
}

pub fn cases(v: &mut Vec<Case>) {
    let shapes = [
        [16, 4, 1, 1],
        [67, 5, 3, 1],
        [256, 8, 4, 2],
        [1000, 1, 2, 1],
        [7, 3, 8, 1],
        [32, 32, 2, 1],
    ];
    for ne in shapes {
        let masks = [
            None,
            Some((ElemType::F16, false)),
            Some((ElemType::F32, false)),
            Some((ElemType::F16, true)),
            Some((ElemType::F32, true)),
        ];
        for mask in masks {
            for scale in [1.0, 0.125] {
                let biases: &[f32] = if mask.is_some() { &[0.0, 8.0] } else { &[0.0] };
                for &max_bias in biases {
                    for sinks in [false, true] {
                        v.push(soft_max(SoftMaxCase {
                            ne,
                            mask,
                            scale,
                            max_bias,
                            sinks,
                            inplace: false,
                        }));
                    }
                }
            }
        }
        v.push(soft_max(SoftMaxCase {
            ne,
            mask: Some((ElemType::F16, true)),
            scale: 0.5,
            max_bias: 0.0,
            sinks: false,
            inplace: true,
        }));
    }
}
