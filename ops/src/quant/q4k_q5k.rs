//! q4_K and q5_K: 256-element super-blocks of eight 32-element groups, each `x ≈ d·sc·q - dmin·m`
//! with 6-bit `sc`/`m` packed into 12 bytes and f16 `d`/`dmin`.

use super::block_io::{dequantize_blocks, nearest_int, quantize_blocks};
use super::float::{f16_to_f32, f32_to_f16};
use super::ksearch::{affine_quants, pack_scale_min_k4, scale_min_k4, AffineSearch};
use half::f16;
use tandem_graph::blocks::*;

fn h(x: f32) -> f16 {
    f16::from_bits(f32_to_f16(x))
}

fn f(x: f16) -> f32 {
    f16_to_f32(x.to_bits())
}

/// What q4_K and q5_K share: the per-group affine search, the 6-bit scale/min quantization and
/// the final re-quantization of the levels against the rounded scales.
struct AffineSuperBlock {
    d: f16,
    dmin: f16,
    scales: [u8; K_SCALE_SIZE],
    levels: [u8; QK_K],
}

fn quantize_affine_super_block(x: &[f32; QK_K], search: &AffineSearch) -> AffineSuperBlock {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for g in 0..8 {
        let xg = &x[32 * g..32 * g + 32];
        // Weights: the group's RMS plus each value's magnitude.
        let mut sum_x2 = 0f32;
        for v in xg {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0f32; 32];
        for (w, v) in weights.iter_mut().zip(xg) {
            *w = av_x + v.abs();
        }
        (scales[g], mins[g]) = affine_quants(search, xg, &weights, &mut levels[32 * g..32 * g + 32]);
        if scales[g] > max_scale {
            max_scale = scales[g];
        }
        if mins[g] > max_min {
            max_min = mins[g];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    for g in 0..8 {
        ls[g] = (nearest_int(inv_scale * scales[g]) as u8).min(63);
        lm[g] = (nearest_int(inv_min * mins[g]) as u8).min(63);
    }
    let packed = pack_scale_min_k4(&ls, &lm);
    let (d, dmin) = (h(max_scale / 63.0), h(max_min / 63.0));
    let nmax = search.nmax;
    for g in 0..8 {
        let (sc, m) = scale_min_k4(g, &packed);
        let dg = f(d) * sc as f32;
        if dg == 0.0 {
            continue;
        }
        let dm = f(dmin) * m as f32;
        for i in 32 * g..32 * g + 32 {
            levels[i] = nearest_int((x[i] + dm) / dg).clamp(0, nmax) as u8;
        }
    }
    AffineSuperBlock {
        d,
        dmin,
        scales: packed,
        levels,
    }
}

/// Per pair of groups (64 values): `(d1, m1, d2, m2)` for the first and second group.
fn group_pair_scales(d: f16, dmin: f16, scales: &[u8; K_SCALE_SIZE], pair: usize) -> (f32, f32, f32, f32) {
    let (d, min) = (f(d), f(dmin));
    let (sc1, m1) = scale_min_k4(2 * pair, scales);
    let (sc2, m2) = scale_min_k4(2 * pair + 1, scales);
    (d * sc1 as f32, min * m1 as f32, d * sc2 as f32, min * m2 as f32)
}

const Q4_K_SEARCH: AffineSearch = AffineSearch {
    nmax: 15,
    rmin: -1.0,
    rdelta: 0.1,
    nstep: 20,
    use_mad: false,
};
const Q5_K_SEARCH: AffineSearch = AffineSearch {
    nmax: 31,
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
    use_mad: false,
};

pub(crate) fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK_K]| {
        let sb = quantize_affine_super_block(x, &Q4_K_SEARCH);
        let mut qs = [0u8; QK_K / 2];
        // Each 32-byte chunk holds a pair of groups: the first in the low nibbles.
        for pair in 0..4 {
            let l = &sb.levels[64 * pair..];
            for i in 0..32 {
                qs[32 * pair + i] = l[i] | (l[i + 32] << 4);
            }
        }
        BlockQ4K {
            d: sb.d,
            dmin: sb.dmin,
            scales: sb.scales,
            qs,
        }
    });
}

pub(crate) fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ4K, y: &mut [f32; QK_K]| {
        for pair in 0..4 {
            let (d1, m1, d2, m2) = group_pair_scales(b.d, b.dmin, &b.scales, pair);
            let (q, y) = (&b.qs[32 * pair..32 * pair + 32], &mut y[64 * pair..64 * pair + 64]);
            for i in 0..32 {
                y[i] = d1 * (q[i] & 0x0f) as f32 - m1;
                y[i + 32] = d2 * (q[i] >> 4) as f32 - m2;
            }
        }
    });
}

pub(crate) fn quantize_q5_k(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, |x: &[f32; QK_K]| {
        let sb = quantize_affine_super_block(x, &Q5_K_SEARCH);
        let (mut qs, mut qh) = ([0u8; QK_K / 2], [0u8; QK_K / 8]);
        // As q4_K for the low nibbles; the fifth bit of element i of pair p goes to bit 2p (first
        // group) or 2p+1 (second group) of qh[i].
        for pair in 0..4 {
            let l = &sb.levels[64 * pair..];
            for i in 0..32 {
                let (mut l1, mut l2) = (l[i], l[i + 32]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[i] |= 1 << (2 * pair);
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[i] |= 2 << (2 * pair);
                }
                qs[32 * pair + i] = l1 | (l2 << 4);
            }
        }
        BlockQ5K {
            d: sb.d,
            dmin: sb.dmin,
            scales: sb.scales,
            qh,
            qs,
        }
    });
}

pub(crate) fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ5K, y: &mut [f32; QK_K]| {
        for pair in 0..4 {
            let (d1, m1, d2, m2) = group_pair_scales(b.d, b.dmin, &b.scales, pair);
            let (q, y) = (&b.qs[32 * pair..32 * pair + 32], &mut y[64 * pair..64 * pair + 64]);
            let (u1, u2) = (1u8 << (2 * pair), 2u8 << (2 * pair));
            for i in 0..32 {
                let h1 = if b.qh[i] & u1 != 0 { 16 } else { 0 };
                let h2 = if b.qh[i] & u2 != 0 { 16 } else { 0 };
                y[i] = d1 * ((q[i] & 0x0f) + h1) as f32 - m1;
                y[i + 32] = d2 * ((q[i] >> 4) + h2) as f32 - m2;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::test_rows::check_round_trip;
    use tandem_graph::ElemType;

    #[test]
    fn q4_k_round_trip_error_is_bounded() {
        // 16 levels over a group's range (≤ 2·amax): half a step is amax/15, plus the 6-bit
        // scale and min rounding.
        check_round_trip(ElemType::Q4K, 0.12, 0.01);
    }

    #[test]
    fn q5_k_round_trip_error_is_bounded() {
        check_round_trip(ElemType::Q5K, 0.06, 0.003);
    }
}
