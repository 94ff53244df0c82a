//! MUL_MAT and MUL_MAT_ID, slowly: each weight row is dequantized to f32 and multiplied with
//! src1's elements (read at their strides) in f64. No activation quantization, no threads.

use crate::cpu::matmul::check_with;
use crate::data::{read_f64, write_f64};
use crate::error::need;
use crate::{quant, OpError, Srcs};
use half::{bf16, f16};
use tandem_graph::{ElemType, Op, Tensor};

/// Weight types the reference can read: the floats directly, block types through the
/// dequantizers.
fn readable(ty: ElemType) -> bool {
    ty.is_float() || quant::can_dequantize(ty)
}

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    check_with(dst, srcs, readable)
}

/// Row `(i1, i2, i3)` of `src0` as f32.
///
/// # Safety
/// `t.data` points at its `nbytes()` and the row exists.
unsafe fn weight_row(t: &Tensor, i1: usize, i2: usize, i3: usize) -> Result<Vec<f32>, String> {
    let k = t.ne[0] as usize;
    let at = t.data + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
    let size = t.ty.row_size(k as i64).ok_or("row is not whole blocks")?;
    // SAFETY: rows are contiguous (check) and inside the tensor (caller contract).
    let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, size) };
    let mut row = vec![0f32; k];
    match t.ty {
        ElemType::F32 => {
            for (v, b) in row.iter_mut().zip(bytes.chunks_exact(4)) {
                *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        ElemType::F16 => {
            for (v, b) in row.iter_mut().zip(bytes.chunks_exact(2)) {
                *v = f16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        ElemType::BF16 => {
            for (v, b) in row.iter_mut().zip(bytes.chunks_exact(2)) {
                *v = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        ty => quant::dequantize_row(ty, bytes, &mut row).map_err(|e| e.to_string())?,
    }
    Ok(row)
}

/// `Σ w[i] * src1[i, i1, i2, i3]` in f64.
///
/// # Safety
/// `src1.data` points at its `nbytes()` and the row exists.
unsafe fn dot_column(w: &[f32], src1: &Tensor, i1: i64, i2: i64, i3: i64) -> f64 {
    let mut sum = 0.0f64;
    for (i, &x) in w.iter().enumerate() {
        // SAFETY: the element is inside src1 (caller contract).
        sum += x as f64 * unsafe { read_f64(src1, [i as i64, i1, i2, i3]) };
    }
    sum
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    check(dst, srcs)?;
    let (src0, src1) = (need(dst, srcs, 0)?, need(dst, srcs, 1)?);
    let fail = |e: String| OpError::new(dst, srcs, e);
    if dst.op == Op::MulMat {
        let (r2, r3) = (src1.ne[2] / src0.ne[2], src1.ne[3] / src0.ne[3]);
        for i3 in 0..dst.ne[3] {
            for i2 in 0..dst.ne[2] {
                for i0 in 0..dst.ne[0] {
                    // SAFETY: broadcast indices stay inside src0 (check).
                    let w = unsafe { weight_row(src0, i0 as usize, (i2 / r2) as usize, (i3 / r3) as usize) }
                        .map_err(fail)?;
                    for i1 in 0..dst.ne[1] {
                        // SAFETY: column (i1, i2, i3) exists in src1 and (i0, i1, i2, i3) in dst.
                        unsafe { write_f64(dst, [i0, i1, i2, i3], dot_column(&w, src1, i1, i2, i3)) };
                    }
                }
            }
        }
        return Ok(());
    }
    let ids = need(dst, srcs, 2)?;
    let (n_used, n_tokens, n_b) = (ids.ne[0], ids.ne[1], src1.ne[1]);
    // Every id is checked before the first write.
    let mut experts = Vec::new();
    for t in 0..n_tokens {
        for u in 0..n_used {
            // SAFETY: (u, t) is inside ids.
            let e = unsafe { read_f64(ids, [u, t, 0, 0]) } as i64;
            if e < 0 || e >= src0.ne[2] {
                return Err(fail(format!(
                    "ids[{u}, {t}] = {e} is not an expert index (0..{})",
                    src0.ne[2]
                )));
            }
            experts.push(e);
        }
    }
    for t in 0..n_tokens {
        for u in 0..n_used {
            let e = experts[(t * n_used + u) as usize] as usize;
            for i0 in 0..dst.ne[0] {
                // SAFETY: expert e and row i0 exist in src0.
                let w = unsafe { weight_row(src0, i0 as usize, e, 0) }.map_err(fail)?;
                // SAFETY: src1 row (u % n_b, t) and dst (i0, u, t) exist (check).
                unsafe { write_f64(dst, [i0, u, t, 0], dot_column(&w, src1, u % n_b, t, 0)) };
            }
        }
    }
    Ok(())
}
