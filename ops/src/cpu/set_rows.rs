//! SET_ROWS: `dst[:, idx[i, i2 % n2, i3 % n3], i2, i3] = convert(src0[:, i, i2, i3])`; dst is a
//! view of src2. Every index is checked before any row is written. When an index repeats
//! within one plane, only the last source row for it is written (the order ggml's single
//! thread would leave), so no two tasks ever write the same row.

use super::rs_rowio::{elements_disjoint, load_f32, row_ptr, split_row};
use crate::error::{ensure, need};
use crate::quant::{quantize_row_from_float_ref, QuantError};
use crate::{CpuContext, OpError, Srcs};
use std::sync::OnceLock;
use tandem_graph::{ElemType, Tensor};

/// Types a row can be written as.
const DST_TYPES: [ElemType; 9] = [
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

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let rows = need(dst, srcs, 0)?;
    let idx = need(dst, srcs, 1)?;
    let a = need(dst, srcs, 2)?;
    ensure(matches!(rows.ty, ElemType::F32 | ElemType::F16), dst, srcs, || {
        format!("rows (src0) must be f32 or f16, not {}", rows.ty)
    })?;
    ensure(matches!(idx.ty, ElemType::I32 | ElemType::I64), dst, srcs, || {
        format!("indices (src1) must be i32 or i64, not {}", idx.ty)
    })?;
    ensure(DST_TYPES.contains(&dst.ty), dst, srcs, || {
        format!("rows cannot be written as {}", dst.ty)
    })?;
    ensure(dst.ty == a.ty && dst.ne == a.ne, dst, srcs, || {
        "dst must have src2's type and shape".into()
    })?;
    ensure(
        rows.ne[0] == dst.ne[0] && rows.ne[2] == dst.ne[2] && rows.ne[3] == dst.ne[3],
        dst,
        srcs,
        || "rows must be [dst.ne0, n, dst.ne2, dst.ne3]".into(),
    )?;
    ensure(
        idx.ne[0] == rows.ne[1]
            && idx.ne[1] > 0
            && idx.ne[2] > 0
            && idx.ne[3] == 1
            && rows.ne[2] % idx.ne[1] == 0
            && rows.ne[3] % idx.ne[2] == 0,
        dst,
        srcs,
        || "indices must be [n, k2, k3] with k2 | ne2 and k3 | ne3".into(),
    )?;
    ensure(dst.ty.row_size(dst.ne[0]).is_some(), dst, srcs, || {
        format!("dst rows are not a whole number of {} blocks", dst.ty)
    })?;
    ensure(dst.is_contiguous_rows(), dst, srcs, || {
        "dst rows are not contiguous".into()
    })?;
    ensure(elements_disjoint(dst), dst, srcs, || "dst elements overlap".into())
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (Some(rows), Some(idx)) = (srcs[0], srcs[1]) else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    // SAFETY: `idx` is readable (caller) with the checked shape.
    let targets = unsafe { read_targets(dst, srcs, idx)? };
    let n = rows.ne[1];
    let ne0 = dst.ne[0] as usize;
    let failed: OnceLock<QuantError> = OnceLock::new();
    let n_src_rows = rows.nrows() as usize;
    // Quantizing a row costs a few operations per element.
    ctx.par_chunks_work(n_src_rows, 4, n_src_rows * ne0 * 4, |start, end| {
        let mut scratch = vec![0f32; ne0];
        for r in start..end {
            let (i, i2, i3) = split_row(rows.ne, r);
            let plane = ((i3 % idx.ne[2]) * idx.ne[1] + i2 % idx.ne[1]) as usize;
            let Some(target) = targets[plane * n as usize + i as usize] else {
                continue;
            };
            let src = row_ptr(rows, i, i2, i3) as *const u8;
            let out = row_ptr(dst, target as i64, i2, i3);
            // SAFETY: `src` is a row of `rows`; `out` is a row of `dst` that only this source row
            // maps to (duplicates were dropped, dst elements are disjoint).
            unsafe {
                if rows.ty == ElemType::F16 && dst.ty == ElemType::F16 && rows.nb[0] == 2 {
                    std::ptr::copy_nonoverlapping(src, out, ne0 * 2);
                    continue;
                }
                load_f32(rows.ty, src, rows.nb[0], &mut scratch);
                if let Err(e) = write_row(dst.ty, &scratch, out) {
                    let _ = failed.set(e);
                    return;
                }
            }
        }
    });
    match failed.into_inner() {
        Some(e) => Err(OpError::new(dst, srcs, format!("quantizing a row: {e}"))),
        None => Ok(()),
    }
}

/// Converts one row into `ty` at `out`.
///
/// # Safety
/// `out` points at `ty.row_size(v.len())` writable bytes no other thread touches.
unsafe fn write_row(ty: ElemType, v: &[f32], out: *mut u8) -> Result<(), QuantError> {
    match ty {
        ElemType::F32 | ElemType::F16 | ElemType::BF16 => {
            // SAFETY: a contiguous row of v.len() elements of `ty` (caller).
            unsafe { super::rs_rowio::store_f32(ty, out, ty.type_size(), v) };
            Ok(())
        }
        _ => {
            let len = ty.row_size(v.len() as i64).unwrap_or(0);
            // SAFETY: `len` writable bytes at `out` (caller).
            let bytes = unsafe { std::slice::from_raw_parts_mut(out, len) };
            // ggml's CPU backend writes rows with the type's `from_float` (for iq4_nl the
            // single-pass quantizer, not the model files' scale search).
            quantize_row_from_float_ref(ty, v, bytes)
        }
    }
}

/// For each index plane (k2, k3) and source row i, the dst row it writes, or `None` when a
/// later source row of the same plane writes that dst row too. Fails on the first index
/// outside `0..dst.ne1`.
///
/// # Safety
/// `idx` is a readable i32/i64 tensor.
unsafe fn read_targets(dst: &Tensor, srcs: &Srcs, idx: &Tensor) -> Result<Vec<Option<u32>>, OpError> {
    let n = idx.ne[0] as usize;
    let planes = (idx.ne[1] * idx.ne[2]) as usize;
    let mut out = Vec::with_capacity(n * planes);
    for p in 0..planes {
        let (k2, k3) = (p as i64 % idx.ne[1], p as i64 / idx.ne[1]);
        for i in 0..n {
            let at = idx.data + i * idx.nb[0] + k2 as usize * idx.nb[1] + k3 as usize * idx.nb[2];
            // SAFETY: the position is within idx.ne (caller guarantees the bytes).
            let v = unsafe {
                match idx.ty {
                    ElemType::I64 => (at as *const i64).read_unaligned(),
                    _ => (at as *const i32).read_unaligned() as i64,
                }
            };
            if v < 0 || v >= dst.ne[1] {
                return Err(OpError::new(
                    dst,
                    srcs,
                    format!("index {v} at [{i}, {k2}, {k3}] is outside 0..{}", dst.ne[1]),
                ));
            }
            out.push(Some(v as u32));
        }
        drop_overwritten(&mut out[p * n..]);
    }
    Ok(out)
}

/// Clears every entry whose value appears again later in `plane`.
fn drop_overwritten(plane: &mut [Option<u32>]) {
    let mut order: Vec<(u32, usize)> = plane
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (v, i)))
        .collect();
    order.sort_unstable();
    for w in order.windows(2) {
        if w[0].0 == w[1].0 {
            plane[w[0].1] = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::rs_testutil::{both_fail_untouched, both_reject, cpu_vs_ref, Mem};
    use tandem_graph::{ElemType, GraphBuilder, TensorId};

    /// rows [ne0, n, 4, 2] written into a [ne0, 9, 4, 2] table through indices [n, 2, 1].
    fn scatter(src_ty: ElemType, dst_ty: ElemType, idx_ty: ElemType, ne0: i64, idx: &[i64]) -> (Mem, TensorId) {
        let n = idx.len() as i64 / 2;
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(dst_ty, &[ne0, 9, 4, 2]);
        let b = g.new_tensor(src_ty, &[ne0, n, 4, 2]);
        let c = g.new_tensor(idx_ty, &[n, 2, 1]);
        let d = g.set_rows(a, b, c).unwrap();
        let mut m = Mem::new(g.build());
        m.fill_uniform(b, -4.0, 4.0, 21);
        let mut k = 0;
        m.fill(c, |_| {
            k += 1;
            idx[k - 1] as f64
        });
        if !dst_ty.is_quantized() {
            m.fill_uniform(a, -1.0, 1.0, 22);
        }
        (m, d)
    }

    #[test]
    fn plain_types_match_reference() {
        let idx = [8, 0, 3, 5, 1, 2, 7, 6];
        for src_ty in [ElemType::F32, ElemType::F16] {
            for dst_ty in [ElemType::F32, ElemType::F16, ElemType::BF16] {
                for idx_ty in [ElemType::I32, ElemType::I64] {
                    let (m, d) = scatter(src_ty, dst_ty, idx_ty, 19, &idx);
                    let (c, r) = cpu_vs_ref(&m, d);
                    assert_eq!(c, r, "{src_ty} -> {dst_ty} ({idx_ty})");
                }
            }
        }
    }

    #[test]
    fn repeated_index_keeps_the_last_row() {
        let (m, d) = scatter(
            ElemType::F32,
            ElemType::F32,
            ElemType::I32,
            5,
            &[2, 4, 2, 2, 1, 1, 0, 3],
        );
        let (c, r) = cpu_vs_ref(&m, d);
        assert_eq!(c, r);
    }

    #[test]
    fn quantized_rows_equal_the_quantizer() {
        for ty in super::DST_TYPES.into_iter().filter(|t| t.is_quantized()) {
            if !crate::quant::can_quantize(ty) {
                continue;
            }
            let (m, d) = scatter(ElemType::F32, ty, ElemType::I64, 64, &[3, 0, 8, 1, 2, 5, 4, 7]);
            let r = m.duplicate();
            m.run_cpu(d).unwrap();
            r.run_ref(d).unwrap();
            m.check_guards();
            assert_eq!(m.bytes(d), r.bytes(d), "{ty}");
            // One row checked directly: source row 1 of plane (i2=1, i3=0) went to dst row 5.
            let t = m.t(d).clone();
            let rs = ty.row_size(64).unwrap();
            let src = m.t(TensorId(1)).clone();
            let vals: Vec<f32> = (0..64)
                // SAFETY: in-bounds element of the rows tensor.
                .map(|i0| unsafe { crate::data::read_f64(&src, [i0, 1, 1, 0]) } as f32)
                .collect();
            let mut want = vec![0u8; rs];
            crate::quant::quantize_row_from_float_ref(ty, &vals, &mut want).unwrap();
            let at = t.offset_of([0, 5, 1, 0]);
            assert_eq!(&m.bytes(d)[at..at + rs], &want[..], "{ty}");
        }
    }

    #[test]
    fn strided_rows_into_a_view() {
        let mut g = GraphBuilder::new();
        let cache = g.new_tensor(ElemType::F16, &[16, 12, 3, 2]);
        // Columns 4..12 of every row: a non-contiguous destination like a KV-cache slice.
        let a = g.view(cache, &[8, 12, 3, 2], &[32, 384, 1152], 8).unwrap();
        let wide = g.new_tensor(ElemType::F32, &[8, 3, 5, 2]);
        // [8, 5, 3, 2] with rows 96 bytes apart and planes 32 bytes apart.
        let b = g.permute(wide, [0, 2, 1, 3]).unwrap();
        let c = g.new_tensor(ElemType::I32, &[5, 1, 1]);
        let d = g.set_rows(a, b, c).unwrap();
        let mut m = Mem::new(g.build());
        m.fill_uniform(wide, -2.0, 2.0, 9);
        m.fill_uniform(cache, -1.0, 1.0, 10);
        m.fill(c, |i| [11, 0, 4, 7, 2][i[0] as usize] as f64);
        let r = m.duplicate();
        m.run_cpu(d).unwrap();
        r.run_ref(d).unwrap();
        m.check_guards();
        assert_eq!(m.read(cache), r.read(cache));
    }

    #[test]
    fn bad_index_fails_before_writing() {
        for bad in [-3i64, 9] {
            let (m, d) = scatter(ElemType::F32, ElemType::F32, ElemType::I64, 4, &[0, 1, 2, 3, bad, 5]);
            both_fail_untouched(&m, d, &format!("index {bad} at [1, 1, 0]"));
        }
    }

    #[test]
    fn shape_and_type_errors() {
        let (mut m, d) = scatter(ElemType::F32, ElemType::F32, ElemType::I32, 4, &[0, 1]);
        m.g.tensor_mut(d).ty = ElemType::Q4K;
        both_reject(&m, d, "q4_K");
        m.g.tensor_mut(d).ty = ElemType::F32;
        m.g.tensor_mut(TensorId(2)).ty = ElemType::I16;
        both_reject(&m, d, "i16");
        m.g.tensor_mut(TensorId(2)).ty = ElemType::I32;
        m.g.tensor_mut(TensorId(2)).ne[1] = 3;
        both_reject(&m, d, "indices");
        let (mut m, d) = scatter(ElemType::F32, ElemType::Q8_0, ElemType::I32, 32, &[0, 1]);
        for t in [TensorId(0), d, TensorId(1)] {
            m.g.tensor_mut(t).ne[0] = 48;
        }
        both_reject(&m, d, "blocks");
    }
}
