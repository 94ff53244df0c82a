//! Random rows for tests: weight rows of any dot type made of random bytes with sane scales, so
//! kernels can be tested without a quantizer.

use half::{bf16, f16};
use rand::Rng;
use tandem_graph::ElemType;

/// Byte offsets of the f16 scale (`d`) and min (`m`/`dmin`) of one block, if any.
fn scale_fields(ty: ElemType) -> (Option<usize>, Option<usize>) {
    match ty {
        ElemType::Q4_0 | ElemType::Q5_0 | ElemType::Q8_0 | ElemType::IQ4NL => (Some(0), None),
        ElemType::Q4_1 | ElemType::Q5_1 | ElemType::Q4K | ElemType::Q5K => (Some(0), Some(2)),
        ElemType::Q2K => (Some(80), Some(82)),
        ElemType::Q3K => (Some(108), None),
        ElemType::Q6K => (Some(208), None),
        _ => (None, None),
    }
}

/// `n` uniform values in `[-1, 1)`.
pub fn random_f32(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// One random weight row of `n` elements of `ty`: float types hold values in `[-1, 1)`, block
/// types random quant bytes with scales chosen so elements stay around ±1.
pub fn random_weight_row(rng: &mut impl Rng, ty: ElemType, n: usize) -> Vec<u8> {
    match ty {
        ElemType::F32 => random_f32(rng, n).iter().flat_map(|v| v.to_le_bytes()).collect(),
        ElemType::F16 => random_f32(rng, n)
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
        ElemType::BF16 => random_f32(rng, n)
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
        _ => {
            let size = ty.row_size(n as i64).expect("whole blocks");
            let mut row: Vec<u8> = (0..size).map(|_| rng.random()).collect();
            let (d_at, m_at) = scale_fields(ty);
            // Largest quant magnitude per type, so d * q stays near 1.
            let q_max = match ty {
                ElemType::Q8_0 | ElemType::IQ4NL => 127.0,
                ElemType::Q6K => 32.0 * 127.0,
                ElemType::Q2K => 3.0 * 15.0,
                ElemType::Q3K => 4.0 * 32.0,
                ElemType::Q4K | ElemType::Q5K => 31.0 * 63.0,
                ElemType::Q5_0 | ElemType::Q5_1 => 31.0,
                _ => 15.0,
            };
            for b in row.chunks_exact_mut(ty.type_size()) {
                if let Some(o) = d_at {
                    let d = rng.random_range(0.5f32..1.5) / q_max;
                    b[o..o + 2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
                }
                if let Some(o) = m_at {
                    let m = rng.random_range(0.0f32..1.0) / if ty.block_size() == 32 { 1.0 } else { 63.0 };
                    let m = if ty.block_size() == 32 { -m } else { m };
                    b[o..o + 2].copy_from_slice(&f16::from_f32(m).to_bits().to_le_bytes());
                }
            }
            row
        }
    }
}
