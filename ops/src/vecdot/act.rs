//! Activation quantizers: src1 rows into the format the weight's dot kernel reads.
//!
//! They run once per column, against `m` dot products per column, so plain loops the compiler
//! vectorizes are enough. The rounding follows ggml's quantizers (nearest, ties to even as its
//! SIMD paths do), so a column quantized here and by ggml agrees to the last bit in almost
//! every element.

use half::{bf16, f16};
use tandem_graph::blocks::QK_K;

/// Sizes of the activation blocks in bytes.
pub const Q8_0_BYTES: usize = 34;
pub const Q8_1_BYTES: usize = 36;
pub const Q8_K_BYTES: usize = 292;

pub fn to_f32(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(4).zip(src) {
        d.copy_from_slice(&s.to_le_bytes());
    }
}

pub fn to_f16(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&f16::from_f32(*s).to_bits().to_le_bytes());
    }
}

pub fn to_bf16(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&bf16::from_f32(*s).to_bits().to_le_bytes());
    }
}

fn abs_max(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// `x` rounded to the nearest integer, ties to even, for |x| <= 2^22 (quants are within ±128):
/// past 1.5·2^23 floats are whole numbers, so the addition rounds in the FPU's default
/// nearest-even mode and the subtraction is exact. `round_ties_even` compiles to a call of
/// libm's `rintf` on baseline x86-64, which was 11% of a tiny q4_0 model's decode time (perf).
fn round_quant(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (x + MAGIC) - MAGIC
}

/// One block of 32: scale `amax / 127`, then `qs = round(x / d)`; returns (d, Σqs).
fn q8_block(x: &[f32], qs: &mut [u8]) -> (f32, i32) {
    let d = abs_max(x) / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (q, v) in qs.iter_mut().zip(x) {
        let r = round_quant(v * id) as i32;
        sum += r;
        *q = r as i8 as u8;
    }
    (d, sum)
}

pub fn to_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(Q8_0_BYTES)) {
        let (d, _) = q8_block(x, &mut b[2..]);
        b[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
    }
}

pub fn to_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(Q8_1_BYTES)) {
        let (d, sum) = q8_block(x, &mut b[4..]);
        b[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        b[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_bits().to_le_bytes());
    }
}

/// q8_K: the scale comes from the signed element of largest magnitude (`d = max / -127`), and
/// sums of every 16 quants are stored for the k-quant kernels' min/offset terms.
pub fn to_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        b.fill(0);
        if amax == 0.0 {
            continue;
        }
        let iscale = -127.0 / max;
        let (head, rest) = b.split_at_mut(4);
        let (qs, bsums) = rest.split_at_mut(QK_K);
        for (q, v) in qs.iter_mut().zip(x) {
            *q = (round_quant(iscale * v) as i32).min(127) as i8 as u8;
        }
        for (g, s) in qs.chunks_exact(16).zip(bsums.chunks_exact_mut(2)) {
            let sum: i32 = g.iter().map(|&q| q as i8 as i32).sum();
            s.copy_from_slice(&(sum as i16).to_le_bytes());
        }
        head.copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::round_quant;

    #[test]
    fn round_quant_is_round_ties_even_over_the_quant_range() {
        // Every float in ±200 with its low 9 mantissa bits stepped (covers every .5 tie), plus
        // the specials.
        let mut bits = 0u32;
        while bits < 0x4348_0000 {
            for x in [f32::from_bits(bits), -f32::from_bits(bits)] {
                assert_eq!(round_quant(x) as i32, x.round_ties_even() as i32, "{x}");
            }
            bits += 0x200;
        }
        for x in [
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -1.5,
            126.5,
            127.5,
            -127.5,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ] {
            assert_eq!(round_quant(x) as i32, x.round_ties_even() as i32, "{x}");
        }
    }
}
