//! The 32-element formats: q4_0, q4_1, q5_0, q5_1, q8_0, q8_1. Every float operation follows the
//! order of ggml's reference quantizers so the bytes come out identical, including C's
//! float-to-byte casts (truncation of the 32-bit conversion).

use super::block_io::{c_cast_i32, dequantize_blocks, quantize_blocks};
use super::float::{f16_to_f32, f32_to_f16};
use half::f16;
use tandem_graph::blocks::*;

const QK: usize = 32;

fn h(x: f32) -> f16 {
    f16::from_bits(f32_to_f16(x))
}

fn f(x: f16) -> f32 {
    f16_to_f32(x.to_bits())
}

/// The value with the largest magnitude (the first one on ties), and that magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// The largest magnitude, with C's `MAX(a, b)` semantics (a NaN on the right wins).
fn absmax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| if m > v.abs() { m } else { v.abs() })
}

/// Minimum and maximum starting from ±FLT_MAX, as ggml's `_1` quantizers scan.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

fn inverse_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// C's `(int8_t)v` through x86's 32-bit truncation, widened back to int.
fn as_c_i8(v: f32) -> i32 {
    c_cast_i32(v) as i8 as i32
}

pub(crate) fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK]| {
        let (max, _) = signed_absmax(x);
        let d = max / -8.0;
        let id = inverse_or_zero(d);
        let mut b = BlockQ4_0 {
            d: h(d),
            ..Default::default()
        };
        for j in 0..QK / 2 {
            let lo = 15.min(as_c_i8(x[j] * id + 8.5)) as u8;
            let hi = 15.min(as_c_i8(x[j + QK / 2] * id + 8.5)) as u8;
            b.qs[j] = lo | (hi << 4);
        }
        b
    });
}

pub(crate) fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ4_0, y: &mut [f32; QK]| {
        let d = f(b.d);
        for j in 0..QK / 2 {
            y[j] = ((b.qs[j] & 0x0f) as i32 - 8) as f32 * d;
            y[j + QK / 2] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
        }
    });
}

pub(crate) fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK]| {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse_or_zero(d);
        let mut b = BlockQ4_1 {
            d: h(d),
            m: h(min),
            ..Default::default()
        };
        for j in 0..QK / 2 {
            let lo = 15.min(as_c_i8((x[j] - min) * id + 0.5)) as u8;
            let hi = 15.min(as_c_i8((x[j + QK / 2] - min) * id + 0.5)) as u8;
            b.qs[j] = lo | (hi << 4);
        }
        b
    });
}

pub(crate) fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ4_1, y: &mut [f32; QK]| {
        let (d, m) = (f(b.d), f(b.m));
        for j in 0..QK / 2 {
            y[j] = (b.qs[j] & 0x0f) as f32 * d + m;
            y[j + QK / 2] = (b.qs[j] >> 4) as f32 * d + m;
        }
    });
}

pub(crate) fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK]| {
        let (max, _) = signed_absmax(x);
        let d = max / -16.0;
        let id = inverse_or_zero(d);
        let mut b = BlockQ5_0 {
            d: h(d),
            ..Default::default()
        };
        let mut high_bits = 0u32;
        for j in 0..QK / 2 {
            let lo = 31.min(as_c_i8(x[j] * id + 16.5)) as u8;
            let hi = 31.min(as_c_i8(x[j + QK / 2] * id + 16.5)) as u8;
            b.qs[j] = (lo & 0x0f) | ((hi & 0x0f) << 4);
            high_bits |= (((lo & 0x10) >> 4) as u32) << j;
            high_bits |= (((hi & 0x10) >> 4) as u32) << (j + QK / 2);
        }
        b.qh = high_bits.to_le_bytes();
        b
    });
}

/// The 5-bit values of a q5 block, before subtracting any offset.
fn q5_values(qs: &[u8; 16], qh: [u8; 4]) -> [i32; QK] {
    let high_bits = u32::from_le_bytes(qh);
    let mut q = [0i32; QK];
    for j in 0..QK / 2 {
        q[j] = ((qs[j] & 0x0f) as u32 | (((high_bits >> j) << 4) & 0x10)) as i32;
        q[j + QK / 2] = ((qs[j] >> 4) as u32 | ((high_bits >> (j + 12)) & 0x10)) as i32;
    }
    q
}

pub(crate) fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ5_0, y: &mut [f32; QK]| {
        let d = f(b.d);
        for (y, q) in y.iter_mut().zip(q5_values(&b.qs, b.qh)) {
            *y = (q - 16) as f32 * d;
        }
    });
}

pub(crate) fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK]| {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse_or_zero(d);
        let mut b = BlockQ5_1 {
            d: h(d),
            m: h(min),
            ..Default::default()
        };
        let mut high_bits = 0u32;
        for j in 0..QK / 2 {
            let lo = c_cast_i32((x[j] - min) * id + 0.5) as u8;
            let hi = c_cast_i32((x[j + QK / 2] - min) * id + 0.5) as u8;
            b.qs[j] = (lo & 0x0f) | ((hi & 0x0f) << 4);
            high_bits |= (((lo & 0x10) >> 4) as u32) << j;
            high_bits |= (((hi & 0x10) >> 4) as u32) << (j + QK / 2);
        }
        b.qh = high_bits.to_le_bytes();
        b
    });
}

pub(crate) fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ5_1, y: &mut [f32; QK]| {
        let (d, m) = (f(b.d), f(b.m));
        for (y, q) in y.iter_mut().zip(q5_values(&b.qs, b.qh)) {
            *y = q as f32 * d + m;
        }
    });
}

/// The common part of q8_0 and q8_1: the scale and the rounded values (C's `roundf` is half
/// away from zero, which is Rust's `round`).
fn quantize_8bit(x: &[f32; QK]) -> (f32, [i8; QK]) {
    let d = absmax(x) / 127.0;
    let id = inverse_or_zero(d);
    let mut qs = [0i8; QK];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = c_cast_i32((v * id).round()) as i8;
    }
    (d, qs)
}

pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK]| {
        let (d, qs) = quantize_8bit(x);
        BlockQ8_0 { d: h(d), qs }
    });
}

pub(crate) fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ8_0, y: &mut [f32; QK]| {
        let d = f(b.d);
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = q as f32 * d;
        }
    });
}

pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK]| {
        let (d, qs) = quantize_8bit(x);
        let sum: i32 = qs.iter().map(|&q| q as i32).sum();
        BlockQ8_1 {
            d: h(d),
            s: h(sum as f32 * d),
            qs,
        }
    });
}

/// q8_1 has no dequantizer in ggml; this reads the values back as `qs * d` like q8_0.
pub(crate) fn dequantize_q8_1(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ8_1, y: &mut [f32; QK]| {
        let d = f(b.d);
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = q as f32 * d;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::{dequantize_row, quantize_row, test_rows::edge_rows};
    use tandem_graph::ElemType;

    /// Largest |x - dequant(quant(x))| allowed per block, as a fraction of the block's range.
    fn bound(ty: ElemType) -> f32 {
        match ty {
            ElemType::Q4_0 | ElemType::Q4_1 => 1.0 / 14.0,
            ElemType::Q5_0 | ElemType::Q5_1 => 1.0 / 30.0,
            _ => 1.0 / 250.0,
        }
    }

    #[test]
    fn round_trip_error_is_bounded() {
        let types = [
            ElemType::Q4_0,
            ElemType::Q4_1,
            ElemType::Q5_0,
            ElemType::Q5_1,
            ElemType::Q8_0,
            ElemType::Q8_1,
        ];
        for ty in types {
            for row in edge_rows(64) {
                let mut q = vec![0u8; ty.row_size(64).unwrap()];
                quantize_row(ty, &row, &mut q).unwrap();
                let mut y = vec![0f32; 64];
                dequantize_row(ty, &q, &mut y).unwrap();
                for (xb, yb) in row.chunks(32).zip(y.chunks(32)) {
                    let range = xb.iter().fold(0f32, |m, v| m.max(v.abs())) * 2.0;
                    for (a, b) in xb.iter().zip(yb) {
                        // Half the f16 step of the scale adds a little on top of the grid error.
                        let tol = range * bound(ty) * 1.01 + 1e-30;
                        assert!((a - b).abs() <= tol, "{ty}: {a:e} -> {b:e} (tol {tol:e})");
                    }
                }
            }
        }
    }

    #[test]
    fn zero_rows_give_zero_blocks() {
        let row = [0f32; 32];
        let mut q = [0xffu8; 34];
        quantize_row(ElemType::Q8_0, &row, &mut q).unwrap();
        assert!(q.iter().all(|&b| b == 0));
        let mut q = [0u8; 18];
        quantize_row(ElemType::Q4_0, &row, &mut q).unwrap();
        // The scale is max / -8 = -0.0 (f16 0x8000), as in ggml.
        assert_eq!(&q[..2], &[0, 0x80]);
        assert!(q[2..].iter().all(|&b| b == 0x88), "zero sits at level 8");
    }

    #[test]
    fn q8_1_sum_matches_values() {
        let row: Vec<f32> = (0..32).map(|i| (i as f32 - 10.0) * 0.37).collect();
        let mut q = [0u8; 36];
        quantize_row(ElemType::Q8_1, &row, &mut q).unwrap();
        let d = half::f16::from_le_bytes([q[0], q[1]]).to_f32();
        let s = half::f16::from_le_bytes([q[2], q[3]]).to_f32();
        let sum: i32 = q[4..].iter().map(|&b| b as i8 as i32).sum();
        assert!((s - sum as f32 * d).abs() <= s.abs() * 1e-3);
    }
}
