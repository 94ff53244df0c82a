//! Moving one row between tensor bytes and an f32 scratch slice, for any element stride and any
//! address alignment. The row ops compute on such a copy, so a node whose result shares its
//! source's bytes (ggml's in-place variants) reads its whole row before writing it.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use tandem_graph::{ElemType, Tensor};

/// Reads `out.len()` elements starting at `p`, `stride` bytes apart. `ty` is f16, bf16 or
/// (anything else) f32.
///
/// # Safety
/// Every element read lies in readable memory.
pub unsafe fn load_f32(ty: ElemType, p: *const u8, stride: usize, out: &mut [f32]) {
    let n = out.len();
    match ty {
        ElemType::F16 | ElemType::BF16 => {
            if stride == 2 && (p as usize) & 1 == 0 {
                if ty == ElemType::F16 {
                    // SAFETY: n contiguous, aligned halves are readable (caller).
                    std::slice::from_raw_parts(p as *const f16, n).convert_to_f32_slice(out);
                } else {
                    // SAFETY: as above.
                    std::slice::from_raw_parts(p as *const bf16, n).convert_to_f32_slice(out);
                }
                return;
            }
            for (i, o) in out.iter_mut().enumerate() {
                // SAFETY: element i is readable (caller).
                let bits = (p.add(i * stride) as *const u16).read_unaligned();
                *o = if ty == ElemType::F16 {
                    f16::from_bits(bits).to_f32()
                } else {
                    bf16::from_bits(bits).to_f32()
                };
            }
        }
        _ => {
            if stride == 4 {
                // SAFETY: 4n contiguous bytes are readable (caller); `out` is a distinct allocation.
                std::ptr::copy_nonoverlapping(p, out.as_mut_ptr() as *mut u8, n * 4);
                return;
            }
            for (i, o) in out.iter_mut().enumerate() {
                // SAFETY: element i is readable (caller).
                *o = (p.add(i * stride) as *const f32).read_unaligned();
            }
        }
    }
}

/// Writes `v` to `p`, `stride` bytes apart, converting to `ty` (f16, bf16 or, for anything
/// else, f32) with round-to-nearest-even.
///
/// # Safety
/// Every element written lies in writable memory no other thread touches meanwhile.
pub unsafe fn store_f32(ty: ElemType, p: *mut u8, stride: usize, v: &[f32]) {
    let n = v.len();
    match ty {
        ElemType::F16 | ElemType::BF16 => {
            if stride == 2 && (p as usize) & 1 == 0 {
                if ty == ElemType::F16 {
                    // SAFETY: n contiguous, aligned halves are writable and unshared (caller).
                    std::slice::from_raw_parts_mut(p as *mut f16, n).convert_from_f32_slice(v);
                } else {
                    // SAFETY: as above.
                    std::slice::from_raw_parts_mut(p as *mut bf16, n).convert_from_f32_slice(v);
                }
                return;
            }
            for (i, &x) in v.iter().enumerate() {
                let bits = if ty == ElemType::F16 {
                    f16::from_f32(x).to_bits()
                } else {
                    bf16::from_f32(x).to_bits()
                };
                // SAFETY: element i is writable (caller).
                (p.add(i * stride) as *mut u16).write_unaligned(bits);
            }
        }
        _ => {
            if stride == 4 {
                // SAFETY: 4n contiguous bytes are writable (caller); `v` is a distinct allocation.
                std::ptr::copy_nonoverlapping(v.as_ptr() as *const u8, p, n * 4);
                return;
            }
            for (i, &x) in v.iter().enumerate() {
                // SAFETY: element i is writable (caller).
                (p.add(i * stride) as *mut f32).write_unaligned(x);
            }
        }
    }
}

/// Address of row `[_, i1, i2, i3]` of `t`.
pub fn row_ptr(t: &Tensor, i1: i64, i2: i64, i3: i64) -> *mut u8 {
    (t.data + i1 as usize * t.nb[1] + i2 as usize * t.nb[2] + i3 as usize * t.nb[3]) as *mut u8
}

/// Splits a flat row number of shape `ne` into `(i1, i2, i3)`.
pub fn split_row(ne: [i64; 4], r: usize) -> (i64, i64, i64) {
    let r = r as i64;
    (r % ne[1], (r / ne[1]) % ne[2], r / (ne[1] * ne[2]))
}

/// No two distinct elements (blocks, for quantized types) of `t` share a byte, so tasks
/// writing different rows never race. Sufficient, not necessary: each dimension's stride,
/// taken in increasing order, must step over everything the smaller ones span.
pub fn elements_disjoint(t: &Tensor) -> bool {
    let mut dims: Vec<(usize, i64)> = Vec::with_capacity(4);
    let n0 = t.ne[0] / t.ty.block_size() as i64;
    if n0 > 1 {
        dims.push((t.nb[0], n0));
    }
    for i in 1..4 {
        if t.ne[i] > 1 {
            dims.push((t.nb[i], t.ne[i]));
        }
    }
    dims.sort_unstable();
    let mut extent = t.ty.type_size();
    for (nb, ne) in dims {
        if nb < extent {
            return false;
        }
        extent += nb * (ne as usize - 1);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_and_unaligned_rows_round_trip() {
        let vals = [1.5f32, -2.25, 3.0, 0.1];
        for ty in [ElemType::F32, ElemType::F16, ElemType::BF16] {
            for (stride, offs) in [(ty.type_size(), 0usize), (ty.type_size(), 1), (12, 3)] {
                let mut buf = vec![0u8; 64];
                let mut back = [0f32; 4];
                // SAFETY: 4 elements at `stride` from `offs` stay within the 64-byte buffer.
                unsafe {
                    let p = buf.as_mut_ptr().add(offs);
                    store_f32(ty, p, stride, &vals);
                    load_f32(ty, p, stride, &mut back);
                }
                for (a, b) in vals.iter().zip(back) {
                    let tol = if ty == ElemType::F32 { 0.0 } else { 0.01 * a.abs() };
                    assert!((a - b).abs() <= tol, "{ty} stride {stride} offs {offs}: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn disjointness() {
        let t = Tensor::new(ElemType::F32, &[4, 3, 2]);
        assert!(elements_disjoint(&t));
        let mut tr = t.clone();
        tr.ne = [3, 4, 2, 1];
        tr.nb = [16, 4, 48, 96];
        assert!(elements_disjoint(&tr));
        let mut bad = t.clone();
        bad.nb[1] = 8;
        assert!(!elements_disjoint(&bad));
        let q = Tensor::new(ElemType::Q8_0, &[64, 5]);
        assert!(elements_disjoint(&q));
        assert_eq!(split_row([7, 3, 4, 5], 3 * 4 + 3 + 2), (2, 1, 1));
    }
}
