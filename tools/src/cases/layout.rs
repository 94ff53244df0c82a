//! REPEAT (tiling along every dim), CONCAT (along each dim, from strided sources) and PAD (zeros
//! before and after each dim, and wrapped around).

use super::{dims, Case, Setup};
use tandem_graph::{ElemType, Op};

fn repeat(ty: ElemType, ne: [i64; 4], to: [i64; 4]) -> Case {
    let name = format!("REPEAT(type={ty},ne={},to={})", dims(&ne), dims(&to));
    Case::new(Op::Repeat, name, move |s: &mut Setup| {
        let a = s.input(ty, &ne)?;
        s.g.repeat(a, to)
    })
}

fn concat(ty: ElemType, a_ne: [i64; 4], b_ne: [i64; 4], dim: usize, permuted: bool) -> Case {
    let name = format!(
        "CONCAT(type={ty},a={},b={},dim={dim}{})",
        dims(&a_ne),
        dims(&b_ne),
        if permuted { ",permuted" } else { "" }
    );
    Case::new(Op::Concat, name, move |s: &mut Setup| {
        let a = if permuted {
            let a0 = s.input(ty, &[a_ne[0], a_ne[2], a_ne[1], a_ne[3]])?;
            s.g.permute(a0, [0, 2, 1, 3])?
        } else {
            s.input(ty, &a_ne)?
        };
        let b = s.input(ty, &b_ne)?;
        s.g.concat(a, b, dim)
    })
}

fn pad(ne: [i64; 4], pads: [i32; 8], circular: bool) -> Case {
    let p: Vec<String> = pads.iter().map(|p| p.to_string()).collect();
    let name = format!(
        "PAD(ne={},pads={}{})",
        dims(&ne),
        p.join("/"),
        if circular { ",circular" } else { "" }
    );
    Case::new(Op::Pad, name, move |s: &mut Setup| {
        let a = s.input(ElemType::F32, &ne)?;
        s.g.pad(a, pads, circular)
    })
}

pub fn cases(v: &mut Vec<Case>) {
    for ty in [ElemType::F32, ElemType::F16] {
        for (ne, to) in [
            ([1, 1, 1, 1], [7, 3, 1, 1]),
            ([16, 1, 1, 1], [16, 5, 1, 1]),
            ([5, 3, 1, 1], [10, 6, 4, 2]),
            ([64, 2, 3, 1], [64, 2, 6, 2]),
        ] {
            v.push(repeat(ty, ne, to));
        }
        for dim in 0..4 {
            let a = [16, 5, 3, 2];
            let mut b = a;
            b[dim] = [7, 2, 4, 1][dim];
            v.push(concat(ty, a, b, dim, false));
        }
        v.push(concat(ty, [32, 4, 3, 1], [32, 4, 2, 1], 2, true));
        v.push(concat(ty, [32, 4, 3, 1], [8, 4, 3, 1], 0, true));
    }
    for (ne, pads) in [
        ([16, 5, 1, 1], [0, 3, 0, 0, 0, 0, 0, 0]),
        ([16, 5, 1, 1], [2, 1, 1, 2, 0, 0, 0, 0]),
        ([7, 3, 2, 2], [1, 1, 1, 1, 1, 1, 1, 1]),
        ([64, 4, 3, 1], [0, 0, 0, 4, 2, 0, 0, 0]),
    ] {
        for circular in [false, true] {
            v.push(pad(ne, pads, circular));
        }
    }
}
