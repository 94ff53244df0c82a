//! CPY, CONT, DUP: element `k` of src0 (in flat order, i0 fastest) becomes element `k` of dst,
//! whatever the two shapes and strides. Same type: a byte copy; f32/f16/bf16 among each other:
//! converted through f32; a float source into q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl: each dst row is
//! gathered and quantized with ggml's reference quantizer; a quantized source into a float dst:
//! each src row is dequantized and scattered.
//!
//! The flat order is walked in runs: the longest pieces that stay inside one row of the tensor
//! on the other side, so contiguous layouts turn into a few long copies.

use super::ew_rows::{for_row_ranges, is_float, load_f32, row_addr, store_f32, FirstError};
use crate::error::{ensure, need};
use crate::quant::{dequantize_row, quantize_row_from_float_ref};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::{ElemType, Tensor};

/// Quantized types a float source can be copied into.
const QUANT_TARGETS: [ElemType; 6] = [
    ElemType::Q8_0,
    ElemType::Q4_0,
    ElemType::Q4_1,
    ElemType::Q5_0,
    ElemType::Q5_1,
    ElemType::IQ4NL,
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Bytes,
    Convert,
    Quantize,
    Dequantize,
}

fn kind(src: ElemType, dst: ElemType) -> Option<Kind> {
    if src == dst && !src.is_quantized() {
        Some(Kind::Bytes)
    } else if is_float(src) && is_float(dst) {
        Some(Kind::Convert)
    } else if is_float(src) && QUANT_TARGETS.contains(&dst) {
        Some(Kind::Quantize)
    } else if src.is_quantized() && is_float(dst) {
        Some(Kind::Dequantize)
    } else {
        None
    }
}

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    for t in [dst, a] {
        ensure(t.ne.iter().all(|&n| n >= 0), dst, srcs, || "negative size".into())?;
    }
    ensure(dst.nelements() == a.nelements(), dst, srcs, || {
        format!("element counts differ ({} vs {})", a.nelements(), dst.nelements())
    })?;
    let k = kind(a.ty, dst.ty);
    ensure(k.is_some(), dst, srcs, || {
        format!("copying {} into {} is not supported", a.ty, dst.ty)
    })?;
    for (t, side) in [(dst, "dst"), (a, "src0")] {
        if t.ty.is_quantized() {
            let bs = t.ty.block_size() as i64;
            ensure(t.ne[0] % bs == 0, dst, srcs, || {
                format!("{side} rows are not a whole number of {bs}-element blocks")
            })?;
            ensure(t.nb[0] == t.ty.type_size(), dst, srcs, || {
                format!("{side} blocks are not contiguous")
            })?;
        }
    }
    Ok(())
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let Some(k) = kind(a.ty, dst.ty) else {
        return Err(OpError::new(
            dst,
            srcs,
            format!("copying {} into {} is not supported", a.ty, dst.ty),
        ));
    };
    let failure = FirstError::default();
    let n0 = dst.ne[0] as usize;
    // SAFETY (all arms): every run and row lies inside its tensor (equal element counts and
    // block geometry checked); tasks write disjoint dst rows, or disjoint flat ranges of dst
    // for the dequantize case (for_row_ranges decides).
    match k {
        Kind::Bytes | Kind::Convert => for_row_ranges(ctx, dst, &[a], dst.nrows() as usize, n0, |start, end| {
            let mut buf = Vec::new();
            for r in start..end {
                let drow = row_addr(dst, r);
                for_each_run(a, r * n0, n0, |s, off, len| {
                    let d = drow + off * dst.nb[0];
                    // SAFETY: see above.
                    unsafe {
                        if k == Kind::Bytes {
                            copy_same_type(a.ty.type_size(), s, a.nb[0], d, dst.nb[0], len);
                        } else {
                            buf.resize(len, 0.0);
                            load_f32(a.ty, s as *const u8, a.nb[0], &mut buf);
                            store_f32(dst.ty, d as *mut u8, dst.nb[0], &buf);
                        }
                    }
                });
            }
        }),
        Kind::Quantize => {
            let row_bytes = dst.ty.row_size(dst.ne[0]).unwrap_or(0);
            for_row_ranges(ctx, dst, &[a], dst.nrows() as usize, n0, |start, end| {
                let mut buf = vec![0f32; n0];
                for r in start..end {
                    for_each_run(a, r * n0, n0, |s, off, len| {
                        // SAFETY: see above; `buf` is this task's own.
                        unsafe { load_f32(a.ty, s as *const u8, a.nb[0], &mut buf[off..off + len]) }
                    });
                    // SAFETY: dst's row r is `row_bytes` contiguous bytes (blocks contiguous,
                    // checked) that only this task writes.
                    let out = unsafe { std::slice::from_raw_parts_mut(row_addr(dst, r) as *mut u8, row_bytes) };
                    // As ggml's CPU backend: the type's `from_float` (iq4_nl: single pass).
                    if let Err(e) = quantize_row_from_float_ref(dst.ty, &buf, out) {
                        failure.set(format!("quantizing a row: {e}"));
                        return;
                    }
                }
            })
        }
        Kind::Dequantize => {
            let m0 = a.ne[0] as usize;
            let row_bytes = a.ty.row_size(a.ne[0]).unwrap_or(0);
            for_row_ranges(ctx, dst, &[a], a.nrows() as usize, m0, |start, end| {
                let mut buf = vec![0f32; m0];
                for r in start..end {
                    // SAFETY: src0's row r is `row_bytes` contiguous readable bytes.
                    let bytes = unsafe { std::slice::from_raw_parts(row_addr(a, r) as *const u8, row_bytes) };
                    if let Err(e) = dequantize_row(a.ty, bytes, &mut buf) {
                        failure.set(format!("dequantizing a row: {e}"));
                        return;
                    }
                    for_each_run(dst, r * m0, m0, |d, off, len| {
                        // SAFETY: see above.
                        unsafe { store_f32(dst.ty, d as *mut u8, dst.nb[0], &buf[off..off + len]) }
                    });
                }
            })
        }
    }
    match failure.take() {
        Some(msg) => Err(OpError::new(dst, srcs, msg)),
        None => Ok(()),
    }
}

/// Calls `f(address, offset, len)` for the pieces of flat elements `start..start + n` of `t`
/// (a non-quantized tensor, or a quantized one walked only by whole rows), each piece inside
/// one row; `offset` counts from `start`.
fn for_each_run(t: &Tensor, start: usize, n: usize, mut f: impl FnMut(usize, usize, usize)) {
    let ne0 = t.ne[0] as usize;
    if ne0 == 0 {
        return;
    }
    let (mut r, mut i0, mut done) = (start / ne0, start % ne0, 0);
    while done < n {
        let len = (ne0 - i0).min(n - done);
        f(row_addr(t, r) + i0 * t.nb[0], done, len);
        done += len;
        i0 = 0;
        r += 1;
    }
}

/// Copies `n` elements of `size` bytes from `s` to `d`, `ss` and `ds` bytes apart (overlap-safe
/// for contiguous runs; strided runs go element by element).
///
/// # Safety
/// Both runs lie in valid memory; nothing else touches `d`'s elements meanwhile.
unsafe fn copy_same_type(size: usize, s: usize, ss: usize, d: usize, ds: usize, n: usize) {
    // SAFETY: per the contract.
    unsafe {
        if ss == size && ds == size {
            std::ptr::copy(s as *const u8, d as *mut u8, n * size);
            return;
        }
        match size {
            2 => copy_strided::<u16>(s, ss, d, ds, n),
            4 => copy_strided::<u32>(s, ss, d, ds, n),
            8 => copy_strided::<u64>(s, ss, d, ds, n),
            _ => {
                for i in 0..n {
                    std::ptr::copy((s + i * ss) as *const u8, (d + i * ds) as *mut u8, size);
                }
            }
        }
    }
}

/// # Safety
/// As [`copy_same_type`] with `size_of::<T>()` bytes per element.
unsafe fn copy_strided<T: Copy>(s: usize, ss: usize, d: usize, ds: usize, n: usize) {
    for i in 0..n {
        // SAFETY: per the contract; unaligned access needs no alignment.
        unsafe { ((d + i * ds) as *mut T).write_unaligned(((s + i * ss) as *const T).read_unaligned()) }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ew_testutil::{assert_close, run_both, run_graph, Fill, Mem, TOL};
    use crate::quant::{can_dequantize, can_quantize};
    use rand::SeedableRng;
    use tandem_graph::{ElemType, Graph, GraphBuilder, TensorId};

    use ElemType::{BF16, F16, F32, I32};

    /// CPY of a fresh `ts` tensor into a fresh `td` tensor.
    fn cpy_case(ts: ElemType, s_ne: &[i64], td: ElemType, d_ne: &[i64]) -> (Graph, TensorId) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ts, s_ne);
        let b = g.new_tensor(td, d_ne);
        let n = g.cpy(a, b).unwrap();
        (g.build(), n)
    }

    #[test]
    fn float_conversions_any_shapes() {
        for ts in [F32, F16, BF16] {
            for td in [F32, F16, BF16] {
                let (g, n) = cpy_case(ts, &[6, 10, 3], td, &[15, 12]);
                assert_close(g, n, &[], TOL);
                let (g, n) = cpy_case(ts, &[7], td, &[1, 7]);
                assert_close(g, n, &[], TOL);
            }
        }
        let (g, n) = cpy_case(F32, &[4096, 20], F16, &[4096, 20]);
        assert_close(g, n, &[], TOL);
    }

    #[test]
    fn cont_and_dup_of_permuted_views() {
        for ty in [F32, F16, I32] {
            let mut g = GraphBuilder::new();
            let a = g.new_tensor(ty, &[5, 7, 3, 2]);
            let p = g.permute(a, [2, 0, 3, 1]).unwrap();
            let c = g.cont(p);
            let d = g.dup(p);
            let r = g.cont_shape(p, &[14, 15]).unwrap();
            let graph = g.build();
            let ints = Fill::Values((0..210).map(|k| k as f64 - 100.0).collect());
            let fills = if ty == I32 { vec![(a, ints)] } else { vec![] };
            for out in [c, d, r] {
                let (cpu, reference) = run_both(graph.clone(), out, &fills, 11);
                assert_eq!(cpu, reference, "{ty}");
            }
        }
    }

    #[test]
    fn into_strided_and_transposed_destinations() {
        // dst rows with gaps between them.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(F32, &[9, 8]);
        let big = g.new_tensor(F16, &[12, 8]);
        let v = g.view(big, &[9, 8], &[24], 4).unwrap();
        let n = g.cpy(a, v).unwrap();
        assert_close(g.build(), n, &[], TOL);
        // Transposed dst, transposed src.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(BF16, &[33, 300]);
        let ta = g.transpose(a);
        let b = g.new_tensor(F32, &[33, 300]);
        let tb = g.transpose(b);
        let n = g.cpy(ta, tb).unwrap();
        assert_close(g.build(), n, &[], TOL);
    }

    #[test]
    fn quantize_rows_like_the_quantizer() {
        for ty in super::QUANT_TARGETS {
            let mut g = GraphBuilder::new();
            let a = g.new_tensor(F32, &[32, 6, 4]);
            let p = g.permute(a, [1, 0, 2, 3]).unwrap(); // [6, 32, 4]
            let b = g.new_tensor(ty, &[64, 12]);
            let n = g.cpy(p, b).unwrap();
            let mut graph = g.build();
            let mem = Mem::alloc(&mut graph);
            let mut rng = rand_pcg::Pcg64::seed_from_u64(2);
            super::super::ew_testutil::fill(graph.tensor(a), &Fill::Uniform(-2.0, 2.0), &mut rng);
            let (graph_ref, mem_ref) = mem.duplicate(&graph);
            let cpu = run_graph(&graph, true);
            if can_quantize(ty) {
                cpu.unwrap();
                run_graph(&graph_ref, false).unwrap();
                assert_eq!(mem.bytes(b), mem_ref.bytes(b), "{ty}");
                assert!(mem.bytes(b).iter().any(|&x| x != 0));
            } else {
                let e = cpu.unwrap_err();
                assert!(e.reason.contains("quantizing") && e.reason.contains(ty.name()), "{e}");
                assert!(run_graph(&graph_ref, false).is_err());
            }
            assert!(mem.guards_intact() && mem_ref.guards_intact());
            let _ = n;
        }
    }

    #[test]
    fn dequantize_into_any_layout() {
        // q8_0 blocks: f16 scale 1/64, then 32 signed quants.
        let mut bytes = Vec::new();
        for blk in 0..12u32 {
            bytes.extend_from_slice(&half::f16::from_f32(1.0 / 64.0).to_bits().to_le_bytes());
            bytes.extend((0..32u32).map(|k| ((k * 37 + blk * 11) % 255) as u8));
        }
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::Q8_0, &[64, 6]);
        let b = g.new_tensor(F32, &[6, 64]);
        let tb = g.transpose(b);
        let n = g.cpy(a, tb).unwrap();
        let graph = g.build();
        if can_dequantize(ElemType::Q8_0) {
            let (cpu, reference) = run_both(graph, n, &[(a, Fill::Bytes(bytes))], 1);
            assert_eq!(cpu, reference);
            assert!(cpu.iter().any(|&v| v != 0.0));
        } else {
            let mut graph = graph;
            let _mem = Mem::alloc(&mut graph);
            let e = run_graph(&graph, true).unwrap_err();
            assert!(e.reason.contains("dequantizing"), "{e}");
        }
    }

    #[test]
    fn rejects_unsupported_pairs_and_counts() {
        let (g, n) = cpy_case(F32, &[32, 2], F32, &[64]);
        assert!(super::check(g.tensor(n), &g.srcs(n)).is_ok());
        for (ts, td) in [
            (ElemType::Q8_0, ElemType::Q4_0),
            (F32, ElemType::Q4K),
            (I32, F32),
            (F32, I32),
        ] {
            let mut bad = g.clone();
            bad.tensors[0].ty = ts;
            bad.tensors[0].nb = tandem_graph::tensor::contiguous_strides(ts, &bad.tensors[0].ne);
            let mut dst = g.tensor(n).clone();
            dst.ty = td;
            dst.nb = tandem_graph::tensor::contiguous_strides(td, &dst.ne);
            let e = super::check(&dst, &bad.srcs(n)).unwrap_err();
            assert!(e.reason.contains("not supported"), "{ts} -> {td}: {e}");
            assert!(crate::reference::check(&dst, &bad.srcs(n)).is_err());
        }
        let mut dst = g.tensor(n).clone();
        dst.ne = [63, 1, 1, 1];
        assert!(super::check(&dst, &g.srcs(n))
            .unwrap_err()
            .reason
            .contains("element counts"));
        // A quantized dst whose blocks are not contiguous.
        let (g, n) = cpy_case(F32, &[64, 2], ElemType::Q8_0, &[64, 2]);
        let mut dst = g.tensor(n).clone();
        dst.nb[0] = 40;
        assert!(super::check(&dst, &g.srcs(n))
            .unwrap_err()
            .reason
            .contains("contiguous"));
    }
}
