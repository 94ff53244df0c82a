//! q2_K and q3_K: 256-element super-blocks of sixteen 16-element groups with 4-bit (q2_K, plus
//! 4-bit mins) or 6-bit (q3_K) group scales under one f16 super-scale.

use super::block_io::{dequantize_blocks, nearest_int, quantize_blocks};
use super::float::{f16_to_f32, f32_to_f16};
use super::ksearch::{affine_quants, q3_rmse_quants, AffineSearch};
use half::f16;
use tandem_graph::blocks::*;

fn h(x: f32) -> f16 {
    f16::from_bits(f32_to_f16(x))
}

fn f(x: f16) -> f32 {
    f16_to_f32(x.to_bits())
}

/// 2-bit levels packed four to a byte: byte `l` of each 32-byte chunk holds elements `l`, `l+32`,
/// `l+64` and `l+96` of the chunk's 128 (low bits first).
fn pack_2bit(levels: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for half in 0..QK_K / 128 {
        let (l, q) = (&levels[128 * half..], &mut qs[32 * half..]);
        for i in 0..32 {
            q[i] = l[i] | (l[i + 32] << 2) | (l[i + 64] << 4) | (l[i + 96] << 6);
        }
    }
    qs
}

pub(crate) fn quantize_q2_k(src: &[f32], dst: &mut [u8]) {
    const SEARCH: AffineSearch = AffineSearch {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    quantize_blocks(src, dst, |x: &[f32; QK_K]| {
        let mut levels = [0u8; QK_K];
        let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for g in 0..16 {
            let xg = &x[16 * g..16 * g + 16];
            let mut weights = [0f32; 16];
            for (w, v) in weights.iter_mut().zip(xg) {
                *w = v.abs();
            }
            (scales[g], mins[g]) = affine_quants(&SEARCH, xg, &weights, &mut levels[16 * g..16 * g + 16]);
            if scales[g] > max_scale {
                max_scale = scales[g];
            }
            if mins[g] > max_min {
                max_min = mins[g];
            }
        }
        let mut b = BlockQ2K::default();
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for g in 0..16 {
                b.scales[g] = nearest_int(iscale * scales[g]) as u8;
            }
            b.d = h(max_scale / 15.0);
        }
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for g in 0..16 {
                b.scales[g] |= (nearest_int(iscale * mins[g]) << 4) as u8;
            }
            b.dmin = h(max_min / 15.0);
        }
        // Re-quantize against the rounded scales; groups whose scale rounded to zero keep the
        // levels of the search.
        let (d_all, dmin_all) = (f(b.d), f(b.dmin));
        for g in 0..16 {
            let d = d_all * (b.scales[g] & 0x0f) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * (b.scales[g] >> 4) as f32;
            for i in 16 * g..16 * g + 16 {
                levels[i] = nearest_int((x[i] + dm) / d).clamp(0, 3) as u8;
            }
        }
        b.qs = pack_2bit(&levels);
        b
    });
}

pub(crate) fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ2K, y: &mut [f32; QK_K]| {
        let (d, min) = (f(b.d), f(b.dmin));
        // Group g lives in 128-element chunk g/8; within it, pairs of groups share a 2-bit field.
        for g in 0..16 {
            let (chunk, part) = (g / 8, g % 8);
            let shift = 2 * (part / 2);
            let q = &b.qs[32 * chunk + 16 * (part % 2)..];
            let sc = b.scales[g];
            let (dl, ml) = (d * (sc & 0x0f) as f32, min * (sc >> 4) as f32);
            for l in 0..16 {
                y[16 * g + l] = dl * ((q[l] >> shift) & 3) as f32 - ml;
            }
        }
    });
}

/// The sixteen signed 6-bit group scales of a q3_K block: low nibbles in bytes 0..8 (groups
/// 0..8 low, 8..16 high), the top two bits in bytes 8..12.
fn q3_k_scale(packed: &[u8; 12], g: usize) -> i32 {
    let low = if g < 8 { packed[g] & 0x0f } else { packed[g - 8] >> 4 };
    let high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
    (low | (high << 4)) as i32 - 32
}

pub(crate) fn quantize_q3_k(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK_K]| {
        let mut levels = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0f32, 0f32);
        for g in 0..16 {
            scales[g] = q3_rmse_quants(4, &x[16 * g..16 * g + 16], &mut levels[16 * g..16 * g + 16]);
            if scales[g].abs() > amax {
                amax = scales[g].abs();
                max_scale = scales[g];
            }
        }
        let mut b = BlockQ3K::default();
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for g in 0..16 {
                let l = ((nearest_int(iscale * scales[g]) as i8 as i32).clamp(-32, 31) + 32) as u8;
                if g < 8 {
                    b.scales[g] = l & 0x0f;
                } else {
                    b.scales[g - 8] |= (l & 0x0f) << 4;
                }
                b.scales[8 + g % 4] |= (l >> 4) << (2 * (g / 4));
            }
            b.d = h(1.0 / iscale);
        }
        let d_all = f(b.d);
        for g in 0..16 {
            let d = d_all * q3_k_scale(&b.scales, g) as f32;
            if d == 0.0 {
                continue;
            }
            for i in 16 * g..16 * g + 16 {
                levels[i] = (nearest_int(x[i] / d).clamp(-4, 3) + 4) as i8;
            }
        }
        // Levels are 0..8: the bit of value 4 goes to hmask (element j sets bit j/32 of byte
        // j%32), the low two bits to qs.
        let mut low = [0u8; QK_K];
        for (j, (&l, lo)) in levels.iter().zip(low.iter_mut()).enumerate() {
            let mut l = l;
            if l > 3 {
                b.hmask[j % 32] |= 1 << (j / 32);
                l -= 4;
            }
            *lo = l as u8;
        }
        b.qs = pack_2bit(&low);
        b
    });
}

pub(crate) fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ3K, y: &mut [f32; QK_K]| {
        let d_all = f(b.d);
        for g in 0..16 {
            let (chunk, part) = (g / 8, g % 8);
            let shift = 2 * (part / 2);
            let offset = 16 * (part % 2);
            let q = &b.qs[32 * chunk + offset..];
            let hm = &b.hmask[offset..];
            let mask = 1u8 << (4 * chunk + part / 2);
            let dl = d_all * q3_k_scale(&b.scales, g) as f32;
            for l in 0..16 {
                let sub = if hm[l] & mask != 0 { 0 } else { 4 };
                y[16 * g + l] = dl * (((q[l] >> shift) & 3) as i32 - sub) as f32;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::test_rows::check_round_trip;
    use tandem_graph::ElemType;

    #[test]
    fn q2_k_round_trip_error_is_bounded() {
        // Four levels over a group's range (up to 2·amax): half a step is amax/3, plus the
        // rounding of 4-bit scales and mins.
        check_round_trip(ElemType::Q2K, 0.45, 0.15);
    }

    #[test]
    fn q3_k_round_trip_error_is_bounded() {
        // Levels -4..3 of about amax/4: the side opposite the largest value may clip by a whole
        // step, plus the 6-bit scale rounding.
        check_round_trip(ElemType::Q3K, 0.3, 0.05);
    }
}
