//! Scalar dot kernels of the float and 32-element block formats. Each kernel turns its raw
//! pointers into slices of the exact row size once, then works on safe slices.

use super::act::{Q8_0_BYTES, Q8_1_BYTES};
use half::{bf16, f16};
use tandem_graph::blocks::KVALUES_IQ4NL;

/// The f16 at `b[0..2]` as f32.
#[inline]
pub(super) fn f16_at(b: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// `n * size` bytes at `p` as a slice.
///
/// # Safety
/// `p` points at `n * size` readable bytes that live for the call.
#[inline]
pub(super) unsafe fn bytes<'a>(p: *const u8, n: usize, size: usize) -> &'a [u8] {
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(p, n * size) }
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_f32(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: both rows hold n f32 (DotFn contract).
    let (w, a) = unsafe { (bytes(w, n, 4), bytes(a, n, 4)) };
    let mut sum = 0.0f64;
    for (x, y) in w.chunks_exact(4).zip(a.chunks_exact(4)) {
        let x = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        let y = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        sum += (x * y) as f64;
    }
    sum as f32
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_f16(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: both rows hold n f16 (DotFn contract).
    let (w, a) = unsafe { (bytes(w, n, 2), bytes(a, n, 2)) };
    let mut sum = 0.0f64;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        sum += (f16_at(x) * f16_at(y)) as f64;
    }
    sum as f32
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_bf16(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: both rows hold n bf16 (DotFn contract).
    let (w, a) = unsafe { (bytes(w, n, 2), bytes(a, n, 2)) };
    let mut sum = 0.0f64;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        let x = bf16::from_bits(u16::from_le_bytes([x[0], x[1]])).to_f32();
        let y = bf16::from_bits(u16::from_le_bytes([y[0], y[1]])).to_f32();
        sum += (x * y) as f64;
    }
    sum as f32
}

/// Σ over blocks of `scale(w_block, a_block) * Σ q_w[j] * q_a[j]`, the shape every
/// 32-element format shares; `decode` yields the block's 32 weight quants and its f32 factors
/// `(d, m)` so that the block contributes `d_w d_a Σ q q_a + m s_a`.
#[inline]
fn dot_blocks<const WB: usize, const AB: usize>(
    n: usize,
    w: &[u8],
    a: &[u8],
    decode: impl Fn(&[u8], &mut [i32; 32]) -> (f32, f32),
) -> f32 {
    let mut sum = 0.0f32;
    let mut q = [0i32; 32];
    for (wb, ab) in w.chunks_exact(WB).zip(a.chunks_exact(AB)).take(n / 32) {
        let (d, m) = decode(wb, &mut q);
        let qa = &ab[AB - 32..];
        let isum: i32 = q.iter().zip(qa).map(|(&x, &y)| x * (y as i8 as i32)).sum();
        let da = f16_at(ab);
        // The q8_1 block sum `s` sits after `d`; q8_0 has none (m is 0 for its weights).
        let sa = if AB == Q8_1_BYTES { f16_at(&ab[2..]) } else { 0.0 };
        sum += d * da * isum as f32 + m * sa;
    }
    sum
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q4_0(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract: n/32 blocks of each format.
    let (w, a) = unsafe { (bytes(w, n / 32, 18), bytes(a, n / 32, Q8_0_BYTES)) };
    dot_blocks::<18, Q8_0_BYTES>(n, w, a, |b, q| {
        for j in 0..16 {
            q[j] = (b[2 + j] & 0xF) as i32 - 8;
            q[j + 16] = (b[2 + j] >> 4) as i32 - 8;
        }
        (f16_at(b), 0.0)
    })
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q4_1(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract.
    let (w, a) = unsafe { (bytes(w, n / 32, 20), bytes(a, n / 32, Q8_1_BYTES)) };
    dot_blocks::<20, Q8_1_BYTES>(n, w, a, |b, q| {
        for j in 0..16 {
            q[j] = (b[4 + j] & 0xF) as i32;
            q[j + 16] = (b[4 + j] >> 4) as i32;
        }
        (f16_at(b), f16_at(&b[2..]))
    })
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q5_0(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract.
    let (w, a) = unsafe { (bytes(w, n / 32, 22), bytes(a, n / 32, Q8_0_BYTES)) };
    dot_blocks::<22, Q8_0_BYTES>(n, w, a, |b, q| {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        for j in 0..16 {
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            q[j] = ((b[6 + j] & 0xF) as u32 | h0) as i32 - 16;
            q[j + 16] = ((b[6 + j] >> 4) as u32 | h1) as i32 - 16;
        }
        (f16_at(b), 0.0)
    })
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q5_1(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract.
    let (w, a) = unsafe { (bytes(w, n / 32, 24), bytes(a, n / 32, Q8_1_BYTES)) };
    dot_blocks::<24, Q8_1_BYTES>(n, w, a, |b, q| {
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        for j in 0..16 {
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            q[j] = ((b[8 + j] & 0xF) as u32 | h0) as i32;
            q[j + 16] = ((b[8 + j] >> 4) as u32 | h1) as i32;
        }
        (f16_at(b), f16_at(&b[2..]))
    })
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_q8_0(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract.
    let (w, a) = unsafe { (bytes(w, n / 32, 34), bytes(a, n / 32, Q8_0_BYTES)) };
    dot_blocks::<34, Q8_0_BYTES>(n, w, a, |b, q| {
        for j in 0..32 {
            q[j] = b[2 + j] as i8 as i32;
        }
        (f16_at(b), 0.0)
    })
}

/// # Safety
/// See [`super::DotFn`].
pub unsafe fn dot_iq4_nl(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: DotFn contract.
    let (w, a) = unsafe { (bytes(w, n / 32, 18), bytes(a, n / 32, Q8_0_BYTES)) };
    dot_blocks::<18, Q8_0_BYTES>(n, w, a, |b, q| {
        for j in 0..16 {
            q[j] = KVALUES_IQ4NL[(b[2 + j] & 0xF) as usize] as i32;
            q[j + 16] = KVALUES_IQ4NL[(b[2 + j] >> 4) as usize] as i32;
        }
        (f16_at(b), 0.0)
    })
}
