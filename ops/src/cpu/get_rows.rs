//! GET_ROWS: `dst[:, i10, i11, i12] = src0[:, idx[i10, i11, i12], i11, i12]`, converted to f32
//! (i32 rows are copied as i32). Every index is checked before any row is written.

use super::rs_rowio::{elements_disjoint, load_f32, row_ptr, split_row};
use crate::error::{ensure, need};
use crate::quant::{dequantize_row, QuantError};
use crate::{CpuContext, OpError, Srcs};
use std::sync::OnceLock;
use tandem_graph::{ElemType, Tensor};

/// Whether rows of `ty` can be gathered (quantized ones through `crate::quant`).
fn source_type_ok(ty: ElemType) -> bool {
    matches!(ty, ElemType::F32 | ElemType::F16 | ElemType::BF16 | ElemType::I32)
        || ElemType::WEIGHT_QUANTS.contains(&ty)
}

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let idx = need(dst, srcs, 1)?;
    ensure(source_type_ok(a.ty), dst, srcs, || {
        format!("src0 type {} cannot be gathered", a.ty)
    })?;
    let want = if a.ty == ElemType::I32 {
        ElemType::I32
    } else {
        ElemType::F32
    };
    ensure(dst.ty == want, dst, srcs, || {
        format!("dst must be {want} for {} rows", a.ty)
    })?;
    ensure(idx.ty == ElemType::I32, dst, srcs, || {
        "indices (src1) must be i32".into()
    })?;
    ensure(
        a.ne[2] == idx.ne[1] && a.ne[3] == idx.ne[2] && idx.ne[3] == 1,
        dst,
        srcs,
        || "indices must be [n, src0.ne2, src0.ne3]".into(),
    )?;
    ensure(dst.ne == [a.ne[0], idx.ne[0], idx.ne[1], idx.ne[2]], dst, srcs, || {
        "dst must be [src0.ne0, n, src0.ne2, src0.ne3]".into()
    })?;
    ensure(a.ty.row_size(a.ne[0]).is_some(), dst, srcs, || {
        format!("src0 rows are not a whole number of {} blocks", a.ty)
    })?;
    ensure(a.is_contiguous_rows(), dst, srcs, || {
        "src0 rows are not contiguous".into()
    })?;
    ensure(dst.nb[0] == dst.ty.type_size(), dst, srcs, || {
        "dst rows are not contiguous".into()
    })?;
    ensure(elements_disjoint(dst), dst, srcs, || "dst elements overlap".into())
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (Some(a), Some(idx)) = (srcs[0], srcs[1]) else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    // SAFETY: `idx` is readable (caller); its shape was checked.
    let rows = unsafe { read_indices(dst, srcs, idx, a.ne[1])? };
    let ne0 = a.ne[0] as usize;
    let failed: OnceLock<QuantError> = OnceLock::new();
    ctx.par_chunks_work(rows.len(), 4, rows.len() * ne0, |start, end| {
        let mut scratch = vec![0f32; ne0];
        for r in start..end {
            let (i10, i11, i12) = split_row(dst.ne, r);
            let src =
                (a.data + rows[r] as usize * a.nb[1] + i11 as usize * a.nb[2] + i12 as usize * a.nb[3]) as *const u8;
            let out = row_ptr(dst, i10, i11, i12);
            // SAFETY: the index was validated, so `src` is a row of `a`; `out` is row r of `dst`,
            // written by this task only (rows are disjoint, checked).
            unsafe {
                match a.ty {
                    ElemType::F32 | ElemType::I32 => std::ptr::copy_nonoverlapping(src, out, ne0 * 4),
                    ElemType::F16 | ElemType::BF16 => {
                        load_f32(a.ty, src, a.nb[0], &mut scratch);
                        std::ptr::copy_nonoverlapping(scratch.as_ptr() as *const u8, out, ne0 * 4);
                    }
                    ty => {
                        let Some(bytes) = ty.row_size(ne0 as i64) else { return };
                        let block_row = std::slice::from_raw_parts(src, bytes);
                        if let Err(e) = dequantize_row(ty, block_row, &mut scratch) {
                            let _ = failed.set(e);
                            return;
                        }
                        std::ptr::copy_nonoverlapping(scratch.as_ptr() as *const u8, out, ne0 * 4);
                    }
                }
            }
        }
    });
    match failed.into_inner() {
        Some(e) => Err(OpError::new(dst, srcs, format!("dequantizing src0: {e}"))),
        None => Ok(()),
    }
}

/// All indices in dst row order, each checked against `0..n_rows`.
///
/// # Safety
/// `idx` is a readable i32 tensor.
unsafe fn read_indices(dst: &Tensor, srcs: &Srcs, idx: &Tensor, n_rows: i64) -> Result<Vec<u32>, OpError> {
    let n = (idx.ne[0] * idx.ne[1] * idx.ne[2]) as usize;
    let mut out = Vec::with_capacity(n);
    for r in 0..n {
        let (i10, i11, i12) = (
            r as i64 % idx.ne[0],
            (r as i64 / idx.ne[0]) % idx.ne[1],
            r as i64 / (idx.ne[0] * idx.ne[1]),
        );
        let p = idx.data + i10 as usize * idx.nb[0] + i11 as usize * idx.nb[1] + i12 as usize * idx.nb[2];
        // SAFETY: the position is within idx.ne (caller guarantees the bytes).
        let v = unsafe { (p as *const i32).read_unaligned() } as i64;
        if v < 0 || v >= n_rows {
            return Err(OpError::new(
                dst,
                srcs,
                format!("index {v} at [{i10}, {i11}, {i12}] is outside 0..{n_rows}"),
            ));
        }
        out.push(v as u32);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::rs_testutil::{both_fail_untouched, both_reject, cpu_vs_ref, nmse, Mem};
    use tandem_graph::{ElemType, GraphBuilder, TensorId};

    /// A graph gathering `idx` rows of a [ne0, n_rows, 2, 2] table; returns (mem, table, ids, node).
    fn gather(ty: ElemType, ne0: i64, n_rows: i64, idx: &[i32]) -> (Mem, TensorId, TensorId, TensorId) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ty, &[ne0, n_rows, 2, 2]);
        let n = idx.len() as i64 / 4;
        let b = g.new_tensor(ElemType::I32, &[n, 2, 2]);
        let d = g.get_rows(a, b).unwrap();
        let mut m = Mem::new(g.build());
        let mut k = 0;
        m.fill(b, |_| {
            k += 1;
            idx[k - 1] as f64
        });
        (m, a, b, d)
    }

    #[test]
    fn plain_types_match_reference() {
        let idx = [3, 0, 3, 1, 2, 2, 0, 4, 1, 1, 1, 1];
        for ty in [ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I32] {
            let (mut m, a, _, d) = gather(ty, 37, 5, &idx);
            if ty == ElemType::I32 {
                m.fill(a, |i| (i[0] * 1000 + i[1] * 10 + i[2] * 3 + i[3]) as f64 - 7000.0);
            } else {
                m.fill_uniform(a, -3.0, 3.0, 11);
            }
            let (c, r) = cpu_vs_ref(&m, d);
            assert_eq!(c, r, "{ty}");
            // Spot-check one element against the table itself.
            let table = m.read(a);
            let k = 37 + 5; // dst [5, 1, 0, 0] takes row idx[1] = 0 of plane (0, 0)
            assert_eq!(c[k], table[5], "{ty}");
        }
    }

    #[test]
    fn quantized_types_match_reference() {
        for ty in ElemType::WEIGHT_QUANTS {
            if !crate::quant::can_dequantize(ty) {
                continue;
            }
            let ne0 = ty.block_size() as i64 * 2;
            let (mut m, a, _, d) = gather(ty, ne0, 3, &[2, 0, 1, 1, 0, 2, 2, 2]);
            // Random blocks; masking every byte with 0x3b keeps each f16 scale finite and below 2.
            let mut r = super::super::rs_testutil::rng(5);
            let n = m.t(a).nbytes();
            let bytes: Vec<u8> = (0..n).map(|_| rand::Rng::random::<u8>(&mut r) & 0x3b).collect();
            m.set_bytes(a, &bytes);
            let (c, rf) = cpu_vs_ref(&m, d);
            assert!(nmse(&c, &rf) <= 1e-7, "{ty}");
        }
    }

    #[test]
    fn non_contiguous_table_and_indices() {
        let mut g = GraphBuilder::new();
        let base = g.new_tensor(ElemType::F32, &[20, 6, 3]);
        // Every other row of `base`, first 13 columns: rows 80 bytes... 160 bytes apart.
        let a = g.view(base, &[13, 3, 3], &[160, 480], 8).unwrap();
        let ib = g.new_tensor(ElemType::I32, &[3, 4]);
        let b = g.transpose(ib);
        let d = g.get_rows(a, b).unwrap();
        let mut m = Mem::new(g.build());
        m.fill_uniform(base, -1.0, 1.0, 3);
        m.fill(ib, |i| ((i[0] + 2 * i[1]) % 3) as f64);
        let (c, r) = cpu_vs_ref(&m, d);
        assert_eq!(c, r);
    }

    #[test]
    fn bad_index_fails_before_writing() {
        for bad in [-1, 5] {
            let (mut m, a, _, d) = gather(ElemType::F32, 8, 5, &[0, 1, 2, 3, 4, 0, bad, 1]);
            m.fill_uniform(a, -1.0, 1.0, 1);
            both_fail_untouched(&m, d, &format!("index {bad} at [0, 1, 1]"));
        }
    }

    #[test]
    fn shape_and_type_errors() {
        let (mut m, _, b, d) = gather(ElemType::F32, 8, 5, &[0; 8]);
        m.g.tensor_mut(d).ty = ElemType::F16;
        both_reject(&m, d, "dst must be f32");
        m.g.tensor_mut(d).ty = ElemType::F32;
        m.g.tensor_mut(b).ty = ElemType::I64;
        both_reject(&m, d, "i32");
        m.g.tensor_mut(b).ty = ElemType::I32;
        m.g.tensor_mut(d).ne[1] = 3;
        both_reject(&m, d, "dst must be");
        let (mut m, a, _, d) = gather(ElemType::F32, 8, 5, &[0; 8]);
        m.g.tensor_mut(a).ty = ElemType::Q8K;
        both_reject(&m, d, "q8_K");
    }
}
