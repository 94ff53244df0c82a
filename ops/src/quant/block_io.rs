//! Moving blocks between byte rows and the `#[repr(C)]` block structs, and the few C numeric
//! conversions the reference quantizers depend on bit for bit.

use std::mem::size_of;
use tandem_graph::blocks::*;

/// A block struct that may be read from and written to arbitrary bytes.
///
/// # Safety
/// Implementors are `#[repr(C)]`, contain only integers, `f16`/`f32` and arrays of them (every
/// bit pattern is a valid value) and have no padding bytes (their size equals the sum of their
/// fields, which `graph::blocks` const-asserts).
pub(crate) unsafe trait PlainBlock: Copy + Default {}

// SAFETY: all listed structs satisfy the trait's contract (see the size asserts in graph::blocks).
unsafe impl PlainBlock for BlockQ4_0 {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ4_1 {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ5_0 {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ5_1 {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ8_0 {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ8_1 {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ2K {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ3K {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ4K {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ5K {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ6K {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockQ8K {}
// SAFETY: as above.
unsafe impl PlainBlock for BlockIQ4NL {}

/// Reads the block at the start of `bytes` (which must hold at least one block).
pub(crate) fn read_block<B: PlainBlock>(bytes: &[u8]) -> B {
    let bytes = &bytes[..size_of::<B>()];
    // SAFETY: `bytes` holds exactly size_of::<B>() readable bytes, any bit pattern is a valid B
    // (PlainBlock contract) and read_unaligned has no alignment requirement.
    unsafe { bytes.as_ptr().cast::<B>().read_unaligned() }
}

/// Writes `block` to the start of `bytes` (which must have room for one block).
pub(crate) fn write_block<B: PlainBlock>(bytes: &mut [u8], block: &B) {
    let bytes = &mut bytes[..size_of::<B>()];
    // SAFETY: `bytes` holds exactly size_of::<B>() writable bytes; B has no padding, so every
    // byte written is initialized; write_unaligned has no alignment requirement.
    unsafe { bytes.as_mut_ptr().cast::<B>().write_unaligned(*block) }
}

/// Quantizes `src` block by block; the caller has checked that `src` holds `dst.len() /
/// size_of::<B>()` blocks of `N` values.
pub(crate) fn quantize_blocks<B: PlainBlock, const N: usize>(
    src: &[f32],
    dst: &mut [u8],
    mut quantize: impl FnMut(&[f32; N]) -> B,
) {
    for (x, out) in src.chunks_exact(N).zip(dst.chunks_exact_mut(size_of::<B>())) {
        let x: &[f32; N] = x.try_into().expect("chunks_exact yields N values");
        write_block(out, &quantize(x));
    }
}

/// Dequantizes `src` block by block; the caller has checked the sizes as for [`quantize_blocks`].
pub(crate) fn dequantize_blocks<B: PlainBlock, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    mut dequantize: impl FnMut(&B, &mut [f32; N]),
) {
    for (bytes, y) in src.chunks_exact(size_of::<B>()).zip(dst.chunks_exact_mut(N)) {
        let y: &mut [f32; N] = y.try_into().expect("chunks_exact_mut yields N values");
        dequantize(&read_block::<B>(bytes), y);
    }
}

/// ggml's `nearest_int`: rounds by adding 1.5·2²³ and reading the low mantissa bits, so halves go
/// to even. Outside ±2²² the result wraps exactly as ggml's does.
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let shifted = (x + 12582912.0f32).to_bits() as i32;
    (shifted & 0x007f_ffff) - 0x0040_0000
}

/// A C float-to-integer cast as x86 performs it (`cvttss2si`): truncation toward zero, and
/// `i32::MIN` for NaN or out-of-range values. Narrower C casts take the low bits of this.
#[inline]
pub(crate) fn c_cast_i32(x: f32) -> i32 {
    if x.is_nan() || !(-2147483648.0f32..2147483648.0f32).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_halves_to_even() {
        let cases = [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (3.49, 3),
            (-7.51, -8),
            (0.0, 0),
        ];
        for (x, want) in cases {
            assert_eq!(nearest_int(x), want, "{x}");
        }
    }

    #[test]
    fn c_cast_matches_x86_truncation() {
        assert_eq!(c_cast_i32(2.9), 2);
        assert_eq!(c_cast_i32(-2.9), -2);
        assert_eq!(c_cast_i32(f32::NAN), i32::MIN);
        assert_eq!(c_cast_i32(3e9), i32::MIN);
        assert_eq!(c_cast_i32(-3e9), i32::MIN);
        assert_eq!(c_cast_i32(-2147483648.0), i32::MIN);
    }

    #[test]
    fn blocks_round_trip_through_bytes() {
        let mut b = BlockQ8K {
            d: 1.5,
            ..Default::default()
        };
        b.qs[7] = -3;
        b.bsums[15] = -1234;
        let mut bytes = vec![0u8; size_of::<BlockQ8K>() + 3];
        write_block(&mut bytes[3..], &b);
        assert_eq!(read_block::<BlockQ8K>(&bytes[3..]), b);
        assert_eq!(&bytes[3..7], &1.5f32.to_le_bytes());
    }
}
