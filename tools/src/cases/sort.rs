//! ARGSORT (ascending, descending) and TOP_K on rows of distinct values, so the expected
//! order and index sets are unique; and llama.cpp's MoE router (softmax, the top k by a
//! descending ARGSORT, the GET_ROWS of their probabilities, normalized or not), which a GPU may
//! fuse.

use super::{dims, Case, Fill, Setup};
use tandem_graph::op::SortOrder;
use tandem_graph::{ElemType, Op};

fn argsort(ne: [i64; 4], order: SortOrder) -> Case {
    let o = if order == SortOrder::Asc { "asc" } else { "desc" };
    let name = format!("ARGSORT(ne={},order={o})", dims(&ne));
    Case::new(Op::Argsort, name, move |s: &mut Setup| {
        let a = s.input_with(ElemType::F32, &ne, Fill::Distinct)?;
        Ok(s.g.argsort(a, order))
    })
}

fn top_k(ne: [i64; 4], k: i64) -> Case {
    let name = format!("TOP_K(ne={},k={k})", dims(&ne));
    Case::new(Op::TopK, name, move |s: &mut Setup| {
        let a = s.input_with(ElemType::F32, &ne, Fill::Distinct)?;
        s.g.top_k(a, k)
    })
}

/// llama.cpp's MoE router over `e` experts for `t` tokens, picking `k`: the probabilities of the
/// chosen experts (`[1, k, t]`), or divided by their clamped sum when `norm` (`[k, t]`, the DIV
/// that llama.cpp reshapes back). Distinct logits, so
/// the chosen set and its order are unique; the weights tell which experts were chosen.
fn moe_router(e: i64, k: i64, t: i64, norm: bool) -> Case {
    let op = if norm { Op::Div } else { Op::GetRows };
    let name = format!("{op}(moe_router,experts={e},k={k},tokens={t})");
    Case::new(op, name, move |s: &mut Setup| {
        let logits = s.input_with(ElemType::F32, &[e, t], Fill::Distinct)?;
        let p = s.g.soft_max(logits, None, None, 1.0, 0.0)?;
        let sorted = s.g.argsort(p, SortOrder::Desc);
        let nb1 = s.g.tensor(sorted).nb[1];
        let ids = s.g.view(sorted, &[k, t], &[nb1], 0)?;
        let p3 = s.g.reshape(p, &[1, e, t])?;
        let w = s.g.get_rows(p3, ids)?;
        if !norm {
            return Ok(w);
        }
        let w2 = s.g.reshape(w, &[k, t])?;
        let sum = s.g.sum_rows(w2);
        let sum = s.g.clamp(sum, 6.1035156e-5, f32::INFINITY);
        s.g.div(w2, sum)
    })
}

pub fn cases(v: &mut Vec<Case>) {
    for order in [SortOrder::Asc, SortOrder::Desc] {
        for ncols in [1, 2, 7, 16, 33, 100, 1024] {
            for nrows in [1, 5] {
                v.push(argsort([ncols, nrows, 1, 1], order));
            }
        }
        v.push(argsort([64, 3, 2, 2], order));
        v.push(argsort([4096, 2, 1, 1], order));
    }
    for ncols in [8, 100, 1000, 4096, 32000] {
        for k in [1, 4, 8, 40] {
            if k <= ncols {
                v.push(top_k([ncols, 3, 1, 1], k));
            }
        }
    }
    v.push(top_k([64, 3, 2, 2], 5));
    v.push(top_k([7, 1, 1, 1], 7));
    for (e, k, t) in [
        (128, 8, 1),
        (128, 8, 7),
        (128, 8, 512),
        (64, 4, 3),
        (256, 8, 5),
        (60, 4, 2),
        (2048, 16, 2),
        (8, 8, 3),
    ] {
        v.push(moe_router(e, k, t, true));
    }
    v.push(moe_router(128, 8, 5, false));
    v.push(moe_router(32, 1, 4, false));
}
