//! ARGSORT (ascending, descending) and TOP_K on rows of distinct values, so the expected
//! order and index sets are unique.

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
}
