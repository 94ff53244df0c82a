//! ADD/SUB/MUL/DIV with broadcasting (f32, f16, bf16, half with f32 src1), permuted and in place;
//! SCALE, CLAMP, SUM_ROWS, ADD_ID, SQR/SQRT/LOG/SIN/COS, and llama.cpp's MoE output sum (a MUL
//! by the routing weights, views of its rows, ADDs folding them; a GPU may fuse the chain).

use super::{dims, Case, Fill, Setup};
use tandem_graph::{ElemType, Op};

const BINARY_TYPES: [(ElemType, ElemType); 5] = [
    (ElemType::F32, ElemType::F32),
    (ElemType::F16, ElemType::F16),
    (ElemType::BF16, ElemType::BF16),
    (ElemType::F16, ElemType::F32),
    (ElemType::BF16, ElemType::F32),
];

#[derive(Clone, Copy)]
enum Layout {
    Plain,
    /// src0 is a `permute(0, 2, 1, 3)` view.
    Permuted,
    /// The result overwrites src0.
    InPlace,
}

fn binary(op: Op, t0: ElemType, t1: ElemType, a_ne: [i64; 4], b_ne: [i64; 4], layout: Layout) -> Case {
    let tag = match layout {
        Layout::Plain => "",
        Layout::Permuted => ",permuted",
        Layout::InPlace => ",inplace",
    };
    let name = format!("{op}(type={t0},src1={t1},a={},b={}{tag})", dims(&a_ne), dims(&b_ne));
    Case::new(op, name, move |s: &mut Setup| {
        let a = match layout {
            Layout::Permuted => {
                let a0 = s.input(t0, &[a_ne[0], a_ne[2], a_ne[1], a_ne[3]])?;
                s.g.permute(a0, [0, 2, 1, 3])?
            }
            _ => s.input(t0, &a_ne)?,
        };
        // Divisors stay away from zero.
        let fill = if op == Op::Div {
            Fill::Uniform(0.5, 2.0)
        } else {
            Fill::Uniform(-1.0, 1.0)
        };
        let b = s.input_with(t1, &b_ne, fill)?;
        let out = match op {
            Op::Add => s.g.add(a, b)?,
            Op::Sub => s.g.sub(a, b)?,
            Op::Mul => s.g.mul(a, b)?,
            _ => s.g.div(a, b)?,
        };
        if let Layout::InPlace = layout {
            s.make_inplace(out, a);
        }
        Ok(out)
    })
}

/// SQR, SQRT, LOG, SIN, COS; SQRT and LOG on positive inputs.
fn math(op: Op, ty: ElemType, ne: [i64; 4], permuted: bool) -> Case {
    let name = format!(
        "{op}(type={ty},ne={}{})",
        dims(&ne),
        if permuted { ",permuted" } else { "" }
    );
    Case::new(op, name, move |s: &mut Setup| {
        let fill = match op {
            Op::Sqrt | Op::Log => Fill::Uniform(0.05, 4.0),
            _ => Fill::Uniform(-4.0, 4.0),
        };
        let a = if permuted {
            let a0 = s.input_with(ty, &[ne[0], ne[2], ne[1], ne[3]], fill)?;
            s.g.permute(a0, [0, 2, 1, 3])?
        } else {
            s.input_with(ty, &ne, fill)?
        };
        s.g.math(op, a)
    })
}

fn scale(ne: [i64; 4], sc: f32, bias: f32, inplace: bool) -> Case {
    let name = format!(
        "SCALE(ne={},s={sc},b={bias}{})",
        dims(&ne),
        if inplace { ",inplace" } else { "" }
    );
    Case::new(Op::Scale, name, move |s: &mut Setup| {
        let a = s.input(ElemType::F32, &ne)?;
        let out = s.g.scale(a, sc, bias);
        if inplace {
            s.make_inplace(out, a);
        }
        Ok(out)
    })
}

fn clamp(ty: ElemType, ne: [i64; 4], min: f32, max: f32) -> Case {
    let name = format!("CLAMP(type={ty},ne={},min={min},max={max})", dims(&ne));
    Case::new(Op::Clamp, name, move |s: &mut Setup| {
        let a = s.input_with(ty, &ne, Fill::Uniform(-2.0, 2.0))?;
        Ok(s.g.clamp(a, min, max))
    })
}

fn sum_rows(ne: [i64; 4], permuted: bool) -> Case {
    let name = format!("SUM_ROWS(ne={}{})", dims(&ne), if permuted { ",permuted" } else { "" });
    Case::new(Op::SumRows, name, move |s: &mut Setup| {
        let a = if permuted {
            let a0 = s.input(ElemType::F32, &[ne[0], ne[2], ne[1], ne[3]])?;
            s.g.permute(a0, [0, 2, 1, 3])?
        } else {
            s.input(ElemType::F32, &ne)?
        };
        Ok(s.g.sum_rows(a))
    })
}

/// `a [ne0, n_used, n_tokens] + b[:, ids]` with `b [ne0, n_expert]`.
fn add_id(ne0: i64, n_used: i64, n_tokens: i64, n_expert: i64) -> Case {
    let name = format!("ADD_ID(ne0={ne0},used={n_used},tokens={n_tokens},experts={n_expert})");
    Case::new(Op::AddId, name, move |s: &mut Setup| {
        let a = s.input(ElemType::F32, &[ne0, n_used, n_tokens])?;
        let b = s.input(ElemType::F32, &[ne0, n_expert])?;
        let ids = s.input_with(ElemType::I32, &[n_used, n_tokens], Fill::Index(n_expert))?;
        s.g.add_id(a, b, ids)
    })
}

/// llama.cpp's MoE output: `p = x * w` (x `[e, k, t]`, w `[1, k, t]`, or `[e, k, t]` when
/// `full_w`), then `((v0 + v1) + v2) + ...` over the views `v_j` of row j of every token. Judged
/// on the last ADD.
fn moe_sum(e: i64, k: i64, t: i64, full_w: bool) -> Case {
    let name = format!("ADD(moe_sum,e={e},k={k},t={t}{})", if full_w { ",full_w" } else { "" });
    Case::new(Op::Add, name, move |s: &mut Setup| {
        let x = s.input(ElemType::F32, &[e, k, t])?;
        let w = s.input_with(
            ElemType::F32,
            &[if full_w { e } else { 1 }, k, t],
            Fill::Uniform(0.0, 1.0),
        )?;
        let p = s.g.mul(x, w)?;
        let row = e as usize * 4;
        let mut acc = s.g.view(p, &[e, t], &[row * k as usize], 0)?;
        for j in 1..k as usize {
            let v = s.g.view(p, &[e, t], &[row * k as usize], j * row)?;
            acc = s.g.add(acc, v)?;
        }
        Ok(acc)
    })
}

pub fn cases(v: &mut Vec<Case>) {
    let shapes: [([i64; 4], [i64; 4]); 7] = [
        ([16, 5, 1, 1], [16, 5, 1, 1]),
        ([67, 3, 2, 1], [67, 1, 1, 1]),
        ([64, 4, 3, 2], [64, 4, 1, 1]),
        ([64, 4, 3, 2], [1, 4, 3, 2]),
        ([7, 1, 1, 1], [1, 1, 1, 1]),
        ([256, 3, 2, 2], [256, 3, 2, 2]),
        ([32, 6, 4, 1], [16, 3, 2, 1]),
    ];
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
        for (t0, t1) in BINARY_TYPES {
            for (a, b) in shapes {
                v.push(binary(op, t0, t1, a, b, Layout::Plain));
            }
            v.push(binary(op, t0, t1, [32, 5, 3, 1], [32, 1, 3, 1], Layout::Permuted));
            v.push(binary(op, t0, t1, [32, 5, 3, 1], [32, 5, 3, 1], Layout::Permuted));
            v.push(binary(op, t0, t1, [64, 5, 3, 1], [64, 5, 1, 1], Layout::InPlace));
        }
    }
    for ne in [[1, 1, 1, 1], [7, 3, 1, 1], [64, 5, 2, 1], [4096, 2, 1, 1]] {
        for (sc, b) in [(2.0, 0.0), (0.5, 0.25), (-1.5, 3.0)] {
            v.push(scale(ne, sc, b, false));
        }
        v.push(scale(ne, 0.125, 0.0, true));
    }
    for ty in [ElemType::F32, ElemType::F16] {
        for ne in [[7, 3, 1, 1], [64, 5, 2, 1], [1000, 2, 1, 1]] {
            for (min, max) in [(-0.5, 0.5), (0.0, 1.0)] {
                v.push(clamp(ty, ne, min, max));
            }
        }
    }
    for ne in [
        [1, 1, 1, 1],
        [7, 3, 1, 1],
        [67, 5, 2, 1],
        [256, 4, 3, 2],
        [4096, 2, 1, 1],
    ] {
        v.push(sum_rows(ne, false));
    }
    v.push(sum_rows([33, 4, 3, 1], true));
    for op in [Op::Sqr, Op::Sqrt, Op::Log, Op::Sin, Op::Cos] {
        for ty in [ElemType::F32, ElemType::F16] {
            for ne in [[7, 3, 1, 1], [67, 5, 2, 1], [1024, 2, 1, 1]] {
                v.push(math(op, ty, ne, false));
            }
            v.push(math(op, ty, [32, 5, 3, 1], true));
        }
    }
    for (ne0, n_used, n_tokens, n_expert) in [
        (8, 1, 1, 2),
        (64, 2, 1, 4),
        (67, 4, 3, 8),
        (256, 2, 7, 32),
        (32, 8, 2, 8),
    ] {
        v.push(add_id(ne0, n_used, n_tokens, n_expert));
    }
    for (e, k, t) in [
        (64, 8, 3),
        (2048, 8, 2),
        (2048, 8, 37),
        (67, 3, 2),
        (32, 2, 1),
        (4096, 4, 5),
    ] {
        v.push(moe_sum(e, k, t, false));
    }
    v.push(moe_sum(64, 4, 3, true));
    // Long rows through the four-a-thread loops: a row broadcast, a scalar per row.
    v.push(binary(
        Op::Add,
        ElemType::F32,
        ElemType::F32,
        [14336, 3, 1, 1],
        [14336, 1, 1, 1],
        Layout::Plain,
    ));
    v.push(binary(
        Op::Mul,
        ElemType::F32,
        ElemType::F32,
        [2048, 8, 5, 1],
        [1, 8, 5, 1],
        Layout::Plain,
    ));
}
