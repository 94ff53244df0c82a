//! NORM, RMS_NORM and L2_NORM: odd and model-sized rows, two epsilons, permuted input, in place; a
//! norm followed by the MUL by a weight (the pair a GPU may fuse), judged on the MUL's result; and
//! a residual ADD met by the next RMS_NORM and MUL (the chain a GPU may fuse), judged on a second
//! ADD that reads both the first sum and the MUL's result, as the next residual does.

use super::{dims, Case, Setup};
use tandem_graph::{ElemType, Op};

fn norm(op: Op, ne: [i64; 4], eps: f32, permuted: bool, inplace: bool) -> Case {
    let name = format!(
        "{op}(ne={},eps={eps:e}{}{})",
        dims(&ne),
        if permuted { ",permuted" } else { "" },
        if inplace { ",inplace" } else { "" }
    );
    Case::new(op, name, move |s: &mut Setup| {
        let a = if permuted {
            let a0 = s.input(ElemType::F32, &[ne[0], ne[2], ne[1], ne[3]])?;
            s.g.permute(a0, [0, 2, 1, 3])?
        } else {
            s.input(ElemType::F32, &ne)?
        };
        let out = match op {
            Op::Norm => s.g.norm(a, eps),
            Op::L2Norm => s.g.l2_norm(a, eps),
            _ => s.g.rms_norm(a, eps),
        };
        if inplace {
            s.make_inplace(out, a);
        }
        Ok(out)
    })
}

/// `norm(x) * w` (`w` of extents `wne`, repeated over x), or `w * norm(x)` when `w_first`
/// (then `w` has x's extents).
fn norm_mul(op: Op, ne: [i64; 4], wne: [i64; 4], w_first: bool) -> Case {
    let name = format!(
        "MUL({op}(ne={},eps=1e-6),w={}{})",
        dims(&ne),
        dims(&wne),
        if w_first { ",w_first" } else { "" }
    );
    Case::new(Op::Mul, name, move |s: &mut Setup| {
        let x = s.input(ElemType::F32, &ne)?;
        let w = s.input(ElemType::F32, &wne)?;
        let n = if op == Op::Norm {
            s.g.norm(x, 1e-6)
        } else {
            s.g.rms_norm(x, 1e-6)
        };
        if w_first {
            s.g.mul(w, n)
        } else {
            s.g.mul(n, w)
        }
    })
}

/// `s = x + y; out = rms_norm(s) * w` (`w * rms_norm(s)` when `w_first`), judged on `out + s`;
/// `inplace`: the sum written over x.
fn add_norm_mul(ne: [i64; 4], wne: [i64; 4], w_first: bool, inplace: bool) -> Case {
    let name = format!(
        "ADD(MUL(RMS_NORM(ADD(ne={})),w={}{}){})",
        dims(&ne),
        dims(&wne),
        if w_first { ",w_first" } else { "" },
        if inplace { ",inplace" } else { "" }
    );
    Case::new(Op::Add, name, move |s: &mut Setup| {
        let x = s.input(ElemType::F32, &ne)?;
        let y = s.input(ElemType::F32, &ne)?;
        let w = s.input(ElemType::F32, &wne)?;
        let sum = s.g.add(x, y)?;
        if inplace {
            s.make_inplace(sum, x);
        }
        let n = s.g.rms_norm(sum, 1e-5);
        let out = if w_first { s.g.mul(w, n)? } else { s.g.mul(n, w)? };
        s.g.add(out, sum)
    })
}

/// The residual chain with the MUL's result placed one row into the bytes of the ADD's first
/// operand, as ggml's allocator may place it once the ADD has run: a kernel fusing the chain must
/// read that operand before anything overwrites it (with more rows than a GPU holds blocks at
/// once, a block reading its row after another wrote over it is certain). Judged on `out + s`.
fn add_norm_mul_over_operand(n: i64, rows: i64) -> Case {
    let name = format!("ADD(MUL(RMS_NORM(ADD(ne={n}x{rows})),w={n}),over_operand)");
    Case::new(Op::Add, name, move |s: &mut Setup| {
        let big = s.input(ElemType::F32, &[n, rows + 1])?;
        let row = n as usize * 4;
        let x = s.g.view(big, &[n, rows], &[row], 0)?;
        let y = s.input(ElemType::F32, &[n, rows])?;
        let w = s.input(ElemType::F32, &[n])?;
        let sum = s.g.add(x, y)?;
        let norm = s.g.rms_norm(sum, 1e-5);
        let out = s.g.mul(norm, w)?;
        let t = s.g.tensor_mut(out);
        t.view_src = Some(big);
        t.view_offs = row;
        s.g.add(out, sum)
    })
}

pub fn cases(v: &mut Vec<Case>) {
    for op in [Op::Norm, Op::RmsNorm, Op::L2Norm] {
        for ne in [
            [1, 3, 1, 1],
            [7, 3, 1, 1],
            [64, 5, 1, 1],
            [67, 2, 3, 1],
            [1000, 2, 1, 1],
            [4096, 2, 1, 1],
            [5120, 1, 1, 1],
            [256, 3, 2, 2],
        ] {
            for eps in [1e-5, 1e-6] {
                v.push(norm(op, ne, eps, false, false));
            }
        }
        v.push(norm(op, [64, 5, 3, 1], 1e-6, true, false));
        v.push(norm(op, [128, 4, 1, 1], 1e-6, false, true));
    }
    for op in [Op::Norm, Op::RmsNorm] {
        v.push(norm_mul(op, [4096, 5, 1, 1], [4096, 1, 1, 1], false));
        v.push(norm_mul(op, [67, 3, 2, 1], [67, 1, 2, 1], false));
        v.push(norm_mul(op, [256, 4, 1, 1], [256, 4, 1, 1], true));
    }
    v.push(add_norm_mul([4096, 1, 1, 1], [4096, 1, 1, 1], false, false));
    v.push(add_norm_mul([2048, 7, 1, 1], [2048, 1, 1, 1], false, false));
    v.push(add_norm_mul([67, 3, 2, 1], [67, 1, 2, 1], false, false));
    v.push(add_norm_mul([256, 4, 1, 1], [256, 4, 1, 1], true, false));
    v.push(add_norm_mul([4096, 3, 1, 1], [4096, 1, 1, 1], false, true));
    v.push(add_norm_mul_over_operand(1024, 4000));
}
