//! Byte-exact mirrors of ggml's quant blocks (`ggml-common.h`). Sizes are const-asserted so a
//! GGUF's bytes can be reinterpreted in place.

use half::f16;
use std::mem::size_of;

/// Elements per block of the k-quant formats.
pub const QK_K: usize = crate::types::QK_K;
/// Bytes of packed 6-bit scales/mins in q4_K and q5_K (and of q3_K's scales).
pub const K_SCALE_SIZE: usize = 12;

/// 4-bit, one scale: x = d * (q - 8).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; 16],
}

/// 4-bit, scale and min: x = d * q + m.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; 16],
}

/// 5-bit, one scale: x = d * (q - 16); the fifth bits live in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

/// 5-bit, scale and min.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

/// 8-bit, one scale.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; 32],
}

/// 8-bit with the block sum: `s = d * sum(qs)` (activation format for the `_1` weights).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; 32],
}

/// 2-bit k-quant: 16 sub-blocks of 16 with 4-bit scales and mins.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}

/// 3-bit k-quant: 2 low bits in `qs`, the high bit in `hmask`, 6-bit scales.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}

/// 4-bit k-quant: 8 sub-blocks of 32 with 6-bit scales and mins.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}

/// 5-bit k-quant.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// 6-bit k-quant: 16 sub-blocks of 16 with 8-bit scales.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

/// 8-bit activation format of the k-quant dot products, with sums of 16-element groups.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

/// 4-bit non-linear: indices into ggml's 16-entry `kvalues_iq4nl` table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockIQ4NL {
    pub d: f16,
    pub qs: [u8; 16],
}

/// ggml's `kvalues_iq4nl`: the 16 levels of iq4_nl.
pub const KVALUES_IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

const _: () = assert!(size_of::<BlockQ4_0>() == 18);
const _: () = assert!(size_of::<BlockQ4_1>() == 20);
const _: () = assert!(size_of::<BlockQ5_0>() == 22);
const _: () = assert!(size_of::<BlockQ5_1>() == 24);
const _: () = assert!(size_of::<BlockQ8_0>() == 34);
const _: () = assert!(size_of::<BlockQ8_1>() == 36);
const _: () = assert!(size_of::<BlockQ2K>() == 84);
const _: () = assert!(size_of::<BlockQ3K>() == 110);
const _: () = assert!(size_of::<BlockQ4K>() == 144);
const _: () = assert!(size_of::<BlockQ5K>() == 176);
const _: () = assert!(size_of::<BlockQ6K>() == 210);
const _: () = assert!(size_of::<BlockQ8K>() == 292);
const _: () = assert!(size_of::<BlockIQ4NL>() == 18);

macro_rules! impl_zeroed {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                // SAFETY: every field is an integer, an f16/f32 or an array of them; all-zero
                // bytes are a valid value of each.
                unsafe { std::mem::zeroed() }
            }
        }
    )*};
}
impl_zeroed!(BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K);
