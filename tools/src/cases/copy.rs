//! CPY between f32/f16/bf16 (contiguous, permuted, transposed, reshaped), f32 → q8_0, q4_0, q4_1,
//! q5_0, q5_1, iq4_nl (bytes must equal `quantize_row`'s), CONT of views and DUP.

use super::{dims, Case, Setup};
use crate::compare::Check;
use tandem_graph::{ElemType, Op, TensorId};

const FLOATS: [ElemType; 3] = [ElemType::F32, ElemType::F16, ElemType::BF16];
const QUANT_DSTS: [ElemType; 6] = [
    ElemType::Q8_0,
    ElemType::Q4_0,
    ElemType::Q4_1,
    ElemType::Q5_0,
    ElemType::Q5_1,
    ElemType::IQ4NL,
];

#[derive(Clone, Copy, PartialEq)]
enum Source {
    Contiguous,
    /// `permute(0, 2, 1, 3)` of a tensor stored with dims 1 and 2 swapped.
    Permuted,
    /// `transpose` of a `[ne1, ne0]` tensor: element stride is a whole row.
    Transposed,
}

impl Source {
    fn tag(self) -> &'static str {
        match self {
            Source::Contiguous => "",
            Source::Permuted => ",permuted",
            Source::Transposed => ",transposed",
        }
    }
}

/// A source of logical shape `ne` laid out per `src`.
fn source(s: &mut Setup, ty: ElemType, ne: [i64; 4], src: Source) -> Result<TensorId, tandem_graph::GraphError> {
    match src {
        Source::Contiguous => s.input(ty, &ne),
        Source::Permuted => {
            let a = s.input(ty, &[ne[0], ne[2], ne[1], ne[3]])?;
            s.g.permute(a, [0, 2, 1, 3])
        }
        Source::Transposed => {
            let a = s.input(ty, &[ne[1], ne[0], ne[2], ne[3]])?;
            Ok(s.g.transpose(a))
        }
    }
}

/// `cpy(src, dst)` with `src` of shape `ne` and `dst` of shape `dst_ne` (same element count).
fn cpy(from: ElemType, to: ElemType, ne: [i64; 4], dst_ne: [i64; 4], src: Source) -> Case {
    let name = format!(
        "CPY(src={from},dst={to},ne={},dst_ne={}{})",
        dims(&ne),
        dims(&dst_ne),
        src.tag()
    );
    let check = if to.is_quantized() {
        Check::Bytes
    } else {
        Check::for_op(Op::Cpy)
    };
    Case::new(Op::Cpy, name, move |s: &mut Setup| {
        let a = source(s, from, ne, src)?;
        let b = s.input(to, &dst_ne)?;
        s.g.cpy(a, b)
    })
    .with_check(check)
}

fn cont(ty: ElemType, ne: [i64; 4], src: Source, reshape: Option<[i64; 4]>) -> Case {
    let name = format!(
        "CONT(type={ty},ne={}{}{})",
        dims(&ne),
        src.tag(),
        reshape.map(|r| format!(",to={}", dims(&r))).unwrap_or_default()
    );
    Case::new(Op::Cont, name, move |s: &mut Setup| {
        let a = source(s, ty, ne, src)?;
        match reshape {
            Some(r) => s.g.cont_shape(a, &r),
            None => Ok(s.g.cont(a)),
        }
    })
}

fn dup(ty: ElemType, ne: [i64; 4], src: Source) -> Case {
    let name = format!("DUP(type={ty},ne={}{})", dims(&ne), src.tag());
    Case::new(Op::Dup, name, move |s: &mut Setup| {
        let a = source(s, ty, ne, src)?;
        Ok(s.g.dup(a))
    })
}

pub fn cases(v: &mut Vec<Case>) {
    for from in FLOATS {
        for to in FLOATS {
            v.push(cpy(from, to, [67, 5, 1, 1], [67, 5, 1, 1], Source::Contiguous));
            v.push(cpy(from, to, [64, 3, 2, 2], [64, 3, 2, 2], Source::Contiguous));
            v.push(cpy(from, to, [16, 5, 3, 1], [16, 5, 3, 1], Source::Permuted));
            v.push(cpy(from, to, [7, 9, 1, 1], [7, 9, 1, 1], Source::Transposed));
            v.push(cpy(from, to, [12, 5, 1, 1], [60, 1, 1, 1], Source::Contiguous));
            v.push(cpy(from, to, [8, 6, 3, 1], [48, 3, 1, 1], Source::Permuted));
        }
    }
    for to in QUANT_DSTS {
        v.push(cpy(ElemType::F32, to, [64, 3, 1, 1], [64, 3, 1, 1], Source::Contiguous));
        v.push(cpy(
            ElemType::F32,
            to,
            [256, 4, 2, 1],
            [256, 4, 2, 1],
            Source::Contiguous,
        ));
        v.push(cpy(ElemType::F32, to, [32, 5, 3, 1], [32, 5, 3, 1], Source::Permuted));
        v.push(cpy(
            ElemType::F32,
            to,
            [128, 6, 1, 1],
            [256, 3, 1, 1],
            Source::Contiguous,
        ));
        v.push(cpy(
            ElemType::F32,
            to,
            [4096, 1, 1, 1],
            [4096, 1, 1, 1],
            Source::Contiguous,
        ));
    }
    for ty in FLOATS {
        v.push(cont(ty, [16, 5, 3, 1], Source::Permuted, None));
        v.push(cont(ty, [7, 9, 2, 1], Source::Transposed, None));
        v.push(cont(ty, [67, 4, 1, 1], Source::Contiguous, None));
        v.push(cont(ty, [16, 5, 3, 1], Source::Permuted, Some([80, 3, 1, 1])));
        v.push(cont(ty, [7, 9, 1, 1], Source::Transposed, Some([63, 1, 1, 1])));
        v.push(dup(ty, [67, 4, 1, 1], Source::Contiguous));
        v.push(dup(ty, [16, 5, 3, 1], Source::Permuted));
    }
}
