//! GET_ROWS over every type and SET_ROWS into float and quantized rows with i32/i64 indices.

use super::{dims, Case, Fill, Setup};
use crate::compare::Check;
use tandem_graph::{ElemType, Op};

const GET_ROWS_TYPES: [ElemType; 15] = [
    ElemType::F32,
    ElemType::F16,
    ElemType::BF16,
    ElemType::I32,
    ElemType::Q4_0,
    ElemType::Q4_1,
    ElemType::Q5_0,
    ElemType::Q5_1,
    ElemType::Q8_0,
    ElemType::Q2K,
    ElemType::Q3K,
    ElemType::Q4K,
    ElemType::Q5K,
    ElemType::Q6K,
    ElemType::IQ4NL,
];

const SET_ROWS_TYPES: [ElemType; 9] = [
    ElemType::F32,
    ElemType::F16,
    ElemType::BF16,
    ElemType::Q8_0,
    ElemType::Q4_0,
    ElemType::Q4_1,
    ElemType::Q5_0,
    ElemType::Q5_1,
    ElemType::IQ4NL,
];

/// Rows `[ne0, n_rows, b2, b3]`, `n` indices per batch.
fn get_rows(ty: ElemType, ne0: i64, n_rows: i64, n: i64, b: [i64; 2]) -> Case {
    let name = format!("GET_ROWS(type={ty},ne0={ne0},rows={n_rows},n={n},b={})", dims(&b));
    Case::new(Op::GetRows, name, move |s: &mut Setup| {
        let fill = if ty == ElemType::I32 {
            Fill::Uniform(-1000.0, 1000.0)
        } else {
            Fill::Uniform(-1.0, 1.0)
        };
        let a = s.input_with(ty, &[ne0, n_rows, b[0], b[1]], fill)?;
        let idx = s.input_with(ElemType::I32, &[n, b[0], b[1]], Fill::Index(n_rows))?;
        s.g.get_rows(a, idx)
    })
}

/// `n` rows per batch written into `[ne0, 16, b2, b3]`; indices `[n, c1, c2]` broadcast over
/// the batches and distinct within each index row, so no two writes hit one row.
fn set_rows(ty: ElemType, idx_ty: ElemType, ne0: i64, n: i64, b: [i64; 2], c: [i64; 2]) -> Case {
    const N_ROWS: i64 = 16;
    let name = format!(
        "SET_ROWS(type={ty},idx={idx_ty},ne0={ne0},n={n},b={},idx_b={})",
        dims(&b),
        dims(&c)
    );
    let check = if ty.is_quantized() {
        Check::Bytes
    } else {
        Check::for_op(Op::SetRows)
    };
    Case::new(Op::SetRows, name, move |s: &mut Setup| {
        let dst = s.input(ty, &[ne0, N_ROWS, b[0], b[1]])?;
        let src = s.input(ElemType::F32, &[ne0, n, b[0], b[1]])?;
        let idx = s.input_with(idx_ty, &[n, c[0], c[1]], Fill::DistinctIndex(N_ROWS))?;
        s.g.set_rows(dst, src, idx)
    })
    .with_check(check)
}

pub fn cases(v: &mut Vec<Case>) {
    for ty in GET_ROWS_TYPES {
        let ne0s: &[i64] = if ty.is_quantized() { &[256, 512] } else { &[7, 67, 256] };
        for &ne0 in ne0s {
            for (n_rows, n, b) in [(10, 1, [1, 1]), (10, 5, [1, 1]), (33, 16, [2, 1]), (7, 3, [2, 3])] {
                v.push(get_rows(ty, ne0, n_rows, n, b));
            }
        }
    }
    for ty in SET_ROWS_TYPES {
        for idx_ty in [ElemType::I32, ElemType::I64] {
            for ne0 in [64, 256] {
                for (n, b, c) in [
                    (1, [1, 1], [1, 1]),
                    (5, [1, 1], [1, 1]),
                    (7, [2, 1], [1, 1]),
                    (4, [2, 3], [2, 3]),
                    (16, [3, 2], [3, 1]),
                ] {
                    v.push(set_rows(ty, idx_ty, ne0, n, b, c));
                }
            }
        }
    }
}
