//! Row plumbing shared by the elementwise CPU ops: where a row lives, staging f16/bf16 rows
//! through f32 buffers, and whether rows may be handed to several threads at once.
//!
//! Work is split by rows of the destination. That is only sound when no two tasks can touch the
//! same bytes: the destination must not overlap itself, and a source that overlaps it must be
//! the very same elements (an in-place op). Anything else runs on the calling thread, row by row,
//! so odd aliasing gives ggml's answer-by-order instead of a data race.

use crate::pool::MIN_PARALLEL_WORK;
use crate::CpuContext;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::sync::Mutex;
use tandem_graph::{ElemType, Tensor};

pub(super) fn is_float(ty: ElemType) -> bool {
    matches!(ty, ElemType::F32 | ElemType::F16 | ElemType::BF16)
}

/// `[i1, i2, i3]` of flat row `r` (rows numbered with i1 fastest, then i2, then i3).
pub(super) fn row_coords(t: &Tensor, r: usize) -> [usize; 3] {
    let ne1 = t.ne[1].max(1) as usize;
    let ne2 = t.ne[2].max(1) as usize;
    [r % ne1, (r / ne1) % ne2, r / (ne1 * ne2)]
}

/// Address of flat row `r`.
pub(super) fn row_addr(t: &Tensor, r: usize) -> usize {
    let [i1, i2, i3] = row_coords(t, r);
    t.data + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3]
}

/// Whether every element (block, for quantized types) of `t` has bytes of its own. Checked by
/// ordering the dims by stride: each stride must clear everything spanned by the smaller ones.
pub(super) fn elements_disjoint(t: &Tensor) -> bool {
    let bs = t.ty.block_size() as i64;
    let mut dims = [(0usize, 0usize); 4];
    let mut n = 0;
    for k in 0..4 {
        let count = if k == 0 { t.ne[0] / bs } else { t.ne[k] };
        if count > 1 {
            dims[n] = (t.nb[k], count as usize);
            n += 1;
        }
    }
    dims[..n].sort_unstable();
    let mut span = t.ty.type_size();
    for &(stride, count) in &dims[..n] {
        if stride < span {
            return false;
        }
        span += stride * (count - 1);
    }
    true
}

/// Byte ranges `[a, a + alen)` and `[b, b + blen)` share a byte.
pub(super) fn ranges_overlap(a: usize, alen: usize, b: usize, blen: usize) -> bool {
    alen > 0 && blen > 0 && a < b + blen && b < a + alen
}

fn same_elements(a: &Tensor, b: &Tensor) -> bool {
    a.data == b.data && a.ne == b.ne && a.nb == b.nb && a.ty.type_size() == b.ty.type_size()
}

/// Whether tasks working on disjoint row ranges of `dst` may run at the same time.
fn rows_independent(dst: &Tensor, srcs: &[&Tensor]) -> bool {
    elements_disjoint(dst)
        && srcs
            .iter()
            .all(|s| same_elements(dst, s) || !ranges_overlap(dst.data, dst.nbytes(), s.data, s.nbytes()))
}

/// Runs `f(start, end)` over row ranges covering `0..nrows`: spread over the pool when the rows
/// are independent and there is enough work (`work_per_row` element operations each), else in
/// one piece on this thread.
pub(super) fn for_row_ranges<F>(
    ctx: &CpuContext,
    dst: &Tensor,
    srcs: &[&Tensor],
    nrows: usize,
    work_per_row: usize,
    f: F,
) where
    F: Fn(usize, usize) + Sync + Send,
{
    if nrows == 0 {
        return;
    }
    let enough = nrows.saturating_mul(work_per_row.max(1)) >= MIN_PARALLEL_WORK;
    if enough && nrows > 1 && ctx.n_threads() > 1 && rows_independent(dst, srcs) {
        ctx.par_chunks_work(nrows, 4, nrows.saturating_mul(work_per_row), f);
    } else {
        f(0, nrows);
    }
}

/// Reads `out.len()` elements of float type `ty` from `p`, `stride` bytes apart, as f32.
///
/// # Safety
/// Every read element lies in readable memory that no other thread writes meanwhile.
pub(super) unsafe fn load_f32(ty: ElemType, p: *const u8, stride: usize, out: &mut [f32]) {
    let n = out.len();
    match ty {
        ElemType::F32 if stride == 4 => {
            // SAFETY: n*4 readable bytes per the contract; `out` is a separate buffer.
            unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr() as *mut u8, n * 4) }
        }
        ElemType::F16 if stride == 2 && (p as *const u16).is_aligned() => {
            // SAFETY: aligned, n contiguous f16 per the contract, not written meanwhile.
            unsafe { std::slice::from_raw_parts(p as *const f16, n) }.convert_to_f32_slice(out)
        }
        ElemType::BF16 if stride == 2 && (p as *const u16).is_aligned() => {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts(p as *const bf16, n) }.convert_to_f32_slice(out)
        }
        _ => {
            for (i, o) in out.iter_mut().enumerate() {
                // SAFETY: element i is readable per the contract.
                *o = unsafe { read_elem(ty, p.add(i * stride)) };
            }
        }
    }
}

/// Writes `src` as float type `ty` to `p`, `stride` bytes apart.
///
/// # Safety
/// Every written element lies in writable memory that no other thread touches meanwhile.
pub(super) unsafe fn store_f32(ty: ElemType, p: *mut u8, stride: usize, src: &[f32]) {
    let n = src.len();
    match ty {
        ElemType::F32 if stride == 4 => {
            // SAFETY: n*4 writable bytes per the contract; `src` is a separate buffer.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr() as *const u8, p, n * 4) }
        }
        ElemType::F16 if stride == 2 && (p as *const u16).is_aligned() => {
            // SAFETY: aligned, n contiguous f16, exclusively ours per the contract.
            unsafe { std::slice::from_raw_parts_mut(p as *mut f16, n) }.convert_from_f32_slice(src)
        }
        ElemType::BF16 if stride == 2 && (p as *const u16).is_aligned() => {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts_mut(p as *mut bf16, n) }.convert_from_f32_slice(src)
        }
        _ => {
            for (i, &v) in src.iter().enumerate() {
                // SAFETY: element i is writable per the contract.
                unsafe { write_elem(ty, p.add(i * stride), v) };
            }
        }
    }
}

/// One float element as f32 (0 for non-float types, which checks exclude).
///
/// # Safety
/// `p` points at a readable element of `ty`.
pub(super) unsafe fn read_elem(ty: ElemType, p: *const u8) -> f32 {
    // SAFETY: per the contract; unaligned reads need no alignment.
    unsafe {
        match ty {
            ElemType::F32 => (p as *const f32).read_unaligned(),
            ElemType::F16 => f16::from_bits((p as *const u16).read_unaligned()).to_f32(),
            ElemType::BF16 => bf16::from_bits((p as *const u16).read_unaligned()).to_f32(),
            _ => 0.0,
        }
    }
}

/// Writes one float element (nothing for non-float types, which checks exclude).
///
/// # Safety
/// `p` points at a writable element of `ty`.
pub(super) unsafe fn write_elem(ty: ElemType, p: *mut u8, v: f32) {
    // SAFETY: per the contract; unaligned writes need no alignment.
    unsafe {
        match ty {
            ElemType::F32 => (p as *mut f32).write_unaligned(v),
            ElemType::F16 => (p as *mut u16).write_unaligned(f16::from_f32(v).to_bits()),
            ElemType::BF16 => (p as *mut u16).write_unaligned(bf16::from_f32(v).to_bits()),
            _ => {}
        }
    }
}

/// A contiguous, aligned f32 row at `addr` (the fast paths' precondition).
pub(super) fn plain_f32_row(t: &Tensor, addr: usize) -> bool {
    t.ty == ElemType::F32 && t.nb[0] == 4 && (addr as *const f32).is_aligned()
}

/// The first error any task hit; tasks keep going, the op reports it at the end.
#[derive(Default)]
pub(super) struct FirstError(Mutex<Option<String>>);

impl FirstError {
    pub(super) fn set(&self, msg: String) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(msg);
        }
    }

    pub(super) fn take(self) -> Option<String> {
        self.0.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_overlap_detection() {
        let t = Tensor::new(ElemType::F32, &[5, 3, 2]);
        assert!(elements_disjoint(&t));
        let mut p = t.clone();
        p.ne = [3, 5, 2, 1];
        p.nb = [20, 4, 60, 120];
        assert!(elements_disjoint(&p));
        let mut bcast = t.clone();
        bcast.nb[1] = 0;
        assert!(!elements_disjoint(&bcast));
        let mut overlapping_rows = t.clone();
        overlapping_rows.nb[1] = 8;
        assert!(!elements_disjoint(&overlapping_rows));
        let q = Tensor::new(ElemType::Q8_0, &[64, 3]);
        assert!(elements_disjoint(&q));
    }

    #[test]
    fn strided_load_store_round_trip() {
        let mut bytes = vec![0u8; 64];
        let vals = [1.5f32, -2.25, 3.0, 0.5];
        for ty in [ElemType::F32, ElemType::F16, ElemType::BF16] {
            for stride in [ty.type_size(), 8] {
                let mut out = [0f32; 4];
                // SAFETY: 4 elements at `stride` <= 8 bytes fit the 64-byte buffer.
                unsafe {
                    store_f32(ty, bytes.as_mut_ptr(), stride, &vals);
                    load_f32(ty, bytes.as_ptr(), stride, &mut out);
                }
                assert_eq!(out, vals, "{ty} stride {stride}");
            }
        }
    }
}
