//! Element access on raw tensor bytes, for ops whose inner loops are not the bottleneck.
//!
//! Every function here is `unsafe`: the caller guarantees `t.data` points at `t.nbytes()`
//! readable bytes (writable for the `write_*` functions) and that indices are within `t.ne`.

use half::{bf16, f16};
use tandem_graph::{ElemType, Tensor};

/// Address of element `i` (`i[0]` must start a block for quantized types).
///
/// # Safety
/// `i` is within `t.ne`.
pub unsafe fn elem_ptr(t: &Tensor, i: [i64; 4]) -> *mut u8 {
    (t.data + t.offset_of(i)) as *mut u8
}

/// Reads a scalar of an f32/f16/bf16/i32/i64/i16/i8/f64 tensor as f64.
///
/// # Safety
/// See the module docs.
pub unsafe fn read_f64(t: &Tensor, i: [i64; 4]) -> f64 {
    let p = elem_ptr(t, i);
    match t.ty {
        ElemType::F32 => (p as *const f32).read_unaligned() as f64,
        ElemType::F16 => f16::from_bits((p as *const u16).read_unaligned()).to_f64(),
        ElemType::BF16 => bf16::from_bits((p as *const u16).read_unaligned()).to_f64(),
        ElemType::I32 => (p as *const i32).read_unaligned() as f64,
        ElemType::I64 => (p as *const i64).read_unaligned() as f64,
        ElemType::I16 => (p as *const i16).read_unaligned() as f64,
        ElemType::I8 => (p as *const i8).read_unaligned() as f64,
        ElemType::F64 => (p as *const f64).read_unaligned(),
        other => panic!("read_f64 on quantized type {other}"),
    }
}

/// Reads an index from an i32 or i64 tensor.
///
/// # Safety
/// See the module docs.
pub unsafe fn read_index(t: &Tensor, i: [i64; 4]) -> i64 {
    let p = elem_ptr(t, i);
    match t.ty {
        ElemType::I32 => (p as *const i32).read_unaligned() as i64,
        ElemType::I64 => (p as *const i64).read_unaligned(),
        other => panic!("read_index on {other}"),
    }
}

/// Writes a scalar to an f32/f16/bf16/i32 tensor (rounding to nearest for the halves).
///
/// # Safety
/// See the module docs.
pub unsafe fn write_f64(t: &Tensor, i: [i64; 4], v: f64) {
    let p = elem_ptr(t, i);
    match t.ty {
        ElemType::F32 => (p as *mut f32).write_unaligned(v as f32),
        ElemType::F16 => (p as *mut u16).write_unaligned(f16::from_f32(v as f32).to_bits()),
        ElemType::BF16 => (p as *mut u16).write_unaligned(bf16::from_f32(v as f32).to_bits()),
        ElemType::I32 => (p as *mut i32).write_unaligned(v as i32),
        ElemType::I64 => (p as *mut i64).write_unaligned(v as i64),
        ElemType::F64 => (p as *mut f64).write_unaligned(v),
        other => panic!("write_f64 on {other}"),
    }
}

/// Every index `[i0, i1, i2, i3]` of `ne`, i0 fastest.
pub fn indices(ne: [i64; 4]) -> impl Iterator<Item = [i64; 4]> {
    let n = if ne.iter().any(|&x| x <= 0) {
        0
    } else {
        ne.iter().product::<i64>()
    };
    (0..n).map(move |mut k| {
        let i0 = k % ne[0];
        k /= ne[0];
        let i1 = k % ne[1];
        k /= ne[1];
        let i2 = k % ne[2];
        k /= ne[2];
        [i0, i1, i2, k]
    })
}

/// Every row index `[0, i1, i2, i3]` of `ne`.
pub fn rows(ne: [i64; 4]) -> impl Iterator<Item = [i64; 4]> {
    indices([1, ne[1], ne[2], ne[3]])
}

/// Splits a flat row number into `[0, i1, i2, i3]`.
pub fn row_index(ne: [i64; 4], r: i64) -> [i64; 4] {
    [0, r % ne[1], (r / ne[1]) % ne[2], r / (ne[1] * ne[2])]
}
