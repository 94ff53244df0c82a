//! q6_K (sixteen 16-element groups, signed 8-bit group scales, f16 super-scale) and q8_K (the
//! activation format of the k-quant dot products: f32 scale, 8-bit values, 16-element sums).

use super::block_io::{dequantize_blocks, nearest_int, quantize_blocks};
use super::float::{f16_to_f32, f32_to_f16};
use super::ksearch::{symmetric_rmse_quants, GROUP_MAX_EPS};
use half::f16;
use tandem_graph::blocks::*;

fn f(x: f16) -> f32 {
    f16_to_f32(x.to_bits())
}

pub(crate) fn quantize_q6_k(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK_K]| {
        let mut levels = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
        for g in 0..16 {
            scales[g] = symmetric_rmse_quants(32, &x[16 * g..16 * g + 16], &mut levels[16 * g..16 * g + 16]);
            if scales[g].abs() > max_abs_scale {
                max_abs_scale = scales[g].abs();
                max_scale = scales[g];
            }
        }
        let mut b = BlockQ6K::default();
        if max_abs_scale < GROUP_MAX_EPS {
            return b;
        }
        let iscale = -128.0 / max_scale;
        b.d = f16::from_bits(f32_to_f16(1.0 / iscale));
        for g in 0..16 {
            b.scales[g] = 127.min(nearest_int(iscale * scales[g])) as i8;
        }
        let d_all = f(b.d);
        for g in 0..16 {
            let d = d_all * b.scales[g] as f32;
            if d == 0.0 {
                continue;
            }
            for i in 16 * g..16 * g + 16 {
                levels[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as i8;
            }
        }
        // Per 128-element chunk: low nibbles of elements i and i+64 share ql[i], of i+32 and
        // i+96 share ql[i+32]; the four top-bit pairs of i, i+32, i+64, i+96 fill qh[i].
        for chunk in 0..2 {
            let l = &levels[128 * chunk..];
            let (ql, qh) = (&mut b.ql[64 * chunk..], &mut b.qh[32 * chunk..]);
            for i in 0..32 {
                let (q1, q2, q3, q4) = (l[i] as u8, l[i + 32] as u8, l[i + 64] as u8, l[i + 96] as u8);
                ql[i] = (q1 & 0x0f) | ((q3 & 0x0f) << 4);
                ql[i + 32] = (q2 & 0x0f) | ((q4 & 0x0f) << 4);
                qh[i] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
        b
    });
}

pub(crate) fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ6K, y: &mut [f32; QK_K]| {
        let d = f(b.d);
        for chunk in 0..2 {
            let (ql, qh) = (&b.ql[64 * chunk..], &b.qh[32 * chunk..]);
            let sc = &b.scales[8 * chunk..];
            let y = &mut y[128 * chunk..];
            for i in 0..32 {
                let g = i / 16;
                let q1 = ((ql[i] & 0x0f) | ((qh[i] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[i + 32] & 0x0f) | (((qh[i] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4)) as i32 - 32;
                y[i] = d * sc[g] as f32 * q1 as f32;
                y[i + 32] = d * sc[g + 2] as f32 * q2 as f32;
                y[i + 64] = d * sc[g + 4] as f32 * q3 as f32;
                y[i + 96] = d * sc[g + 6] as f32 * q4 as f32;
            }
        }
    });
}

pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK_K]| {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let mut b = BlockQ8K::default();
        if amax == 0.0 {
            return b;
        }
        // -127 rather than -128 keeps every value in i8 after negation (ggml's choice too).
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = 127.min(nearest_int(iscale * v)) as i8;
        }
        for (sum, group) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *sum = group.iter().map(|&q| q as i32).sum::<i32>() as i16;
        }
        b.d = 1.0 / iscale;
        b
    });
}

/// ggml has no q8_K dequantizer in its type table; this is its `dequantize_row_q8_K`.
pub(crate) fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ8K, y: &mut [f32; QK_K]| {
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = b.d * q as f32;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::quantize_row;
    use super::super::test_rows::check_round_trip;
    use tandem_graph::ElemType;

    #[test]
    fn q6_k_round_trip_error_is_bounded() {
        // 64 levels over ±amax: half a step is amax/64, plus the 8-bit group-scale rounding.
        check_round_trip(ElemType::Q6K, 0.03, 5e-4);
    }

    #[test]
    fn q8_k_round_trip_error_is_bounded() {
        // Steps of amax/127 on the test rows' |x| ≤ 2 (E x² = 4/9): NMSE ≈ (2/127)²/12 / (4/9) = 4.6e-5.
        check_round_trip(ElemType::Q8K, 0.005, 1e-4);
    }

    #[test]
    fn q8_k_sums_match_values() {
        let row: Vec<f32> = (0..256).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        let mut q = vec![0u8; 292];
        quantize_row(ElemType::Q8K, &row, &mut q).unwrap();
        for g in 0..16 {
            let sum: i32 = q[4 + 16 * g..4 + 16 * g + 16].iter().map(|&b| b as i8 as i32).sum();
            let stored = i16::from_le_bytes([q[260 + 2 * g], q[261 + 2 * g]]);
            assert_eq!(sum, stored as i32, "group {g}");
        }
    }
}
