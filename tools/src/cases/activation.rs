//! UNARY (every ggml unary op tandem knows) and GLU (every gate, swapped halves, split inputs,
//! split views of one fused tensor), f32 and f16.

use super::{dims, Case, Fill, Setup};
use tandem_graph::{ElemType, GluOp, Op, UnaryOp};

#[derive(Clone, Copy, PartialEq)]
enum UnaryLayout {
    Plain,
    Permuted,
    InPlace,
}

fn unary(op: UnaryOp, ty: ElemType, ne: [i64; 4], layout: UnaryLayout) -> Case {
    let tag = match layout {
        UnaryLayout::Plain => "",
        UnaryLayout::Permuted => ",permuted",
        UnaryLayout::InPlace => ",inplace",
    };
    let name = format!("UNARY(op={},type={ty},ne={}{tag})", op.name(), dims(&ne));
    Case::new(Op::Unary, name, move |s: &mut Setup| {
        let fill = Fill::Uniform(-3.0, 3.0);
        let a = if layout == UnaryLayout::Permuted {
            let a0 = s.input_with(ty, &[ne[0], ne[2], ne[1], ne[3]], fill)?;
            s.g.permute(a0, [0, 2, 1, 3])?
        } else {
            s.input_with(ty, &ne, fill)?
        };
        let out = s.g.unary(a, op)?;
        if layout == UnaryLayout::InPlace {
            s.make_inplace(out, a);
        }
        Ok(out)
    })
}

#[derive(Clone, Copy, PartialEq)]
enum GluForm {
    /// One input, first half gated by the second.
    Fused { swapped: bool },
    /// Two inputs.
    Split,
    /// Two strided views of one fused `[2*ne0, ...]` tensor, as llama.cpp builds them.
    SplitViews,
}

fn glu(op: GluOp, ty: ElemType, ne: [i64; 3], form: GluForm) -> Case {
    let tag = match form {
        GluForm::Fused { swapped: false } => "",
        GluForm::Fused { swapped: true } => ",swapped",
        GluForm::Split => ",split",
        GluForm::SplitViews => ",split_views",
    };
    let name = format!("GLU(op={},type={ty},ne={}{tag})", op.name(), dims(&ne));
    Case::new(Op::Glu, name, move |s: &mut Setup| {
        let fill = Fill::Uniform(-3.0, 3.0);
        match form {
            GluForm::Fused { swapped } => {
                let a = s.input_with(ty, &[2 * ne[0], ne[1], ne[2]], fill)?;
                s.g.glu(a, op, swapped)
            }
            GluForm::Split => {
                let a = s.input_with(ty, &ne, fill)?;
                let b = s.input_with(ty, &ne, fill)?;
                s.g.glu_split(a, b, op)
            }
            GluForm::SplitViews => {
                let f = s.input_with(ty, &[2 * ne[0], ne[1], ne[2]], fill)?;
                let t = s.g.tensor(f).clone();
                let a = s.g.view(f, &ne, &[t.nb[1], t.nb[2]], 0)?;
                let b = s.g.view(f, &ne, &[t.nb[1], t.nb[2]], ne[0] as usize * ty.type_size())?;
                s.g.glu_split(a, b, op)
            }
        }
    })
}

pub fn cases(v: &mut Vec<Case>) {
    for op in UnaryOp::ALL {
        for ty in [ElemType::F32, ElemType::F16] {
            for ne in [[7, 1, 1, 1], [64, 5, 1, 1], [67, 3, 2, 1], [256, 4, 1, 2]] {
                v.push(unary(op, ty, ne, UnaryLayout::Plain));
            }
            v.push(unary(op, ty, [32, 5, 3, 1], UnaryLayout::Permuted));
            v.push(unary(op, ty, [48, 3, 1, 1], UnaryLayout::InPlace));
        }
    }
    for op in GluOp::ALL {
        for ty in [ElemType::F32, ElemType::F16] {
            for ne in [[32, 3, 1], [67, 5, 1], [256, 2, 3]] {
                for form in [
                    GluForm::Fused { swapped: false },
                    GluForm::Fused { swapped: true },
                    GluForm::Split,
                ] {
                    v.push(glu(op, ty, ne, form));
                }
            }
            v.push(glu(op, ty, [64, 4, 1], GluForm::SplitViews));
            v.push(glu(op, ty, [67, 3, 2], GluForm::SplitViews));
        }
    }
}
