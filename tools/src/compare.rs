//! Judging a device's output against the reference's: NMSE with the thresholds of DESIGN.md,
//! exact integers, top-k index sets, quantized bytes; NaN/Inf and sentinel checks.

use tandem_graph::{Op, Tensor};
use tandem_ops::data::{indices, read_f64, rows};
use tandem_ops::quant::quantize_row_from_float_ref;

/// How an output is judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Check {
    /// `Σ(a−b)²/Σa² ≤` the threshold, `a` the reference; every value finite.
    Nmse(f64),
    /// Every element equal (integer outputs such as ARGSORT).
    Exact,
    /// Each row holds the same set of indices (TOP_K returns its k indices in no fixed order).
    IndexSets,
    /// Quantized output: the bytes equal the reference's.
    Bytes,
}

impl Check {
    /// The DESIGN.md threshold for `op`.
    pub fn for_op(op: Op) -> Check {
        match op {
            Op::MulMat | Op::MulMatId | Op::FlashAttnExt => Check::Nmse(5e-4),
            Op::SoftMax => Check::Nmse(1e-6),
            Op::Argsort => Check::Exact,
            Op::TopK => Check::IndexSets,
            _ => Check::Nmse(1e-7),
        }
    }
}

/// Compares `device` against `reference` (same type and layout, different bytes). `src0` is
/// the node's first source, for the index range of TOP_K. Returns a short measurement on
/// success, the reason on failure.
///
/// # Safety
/// Both tensors' `data` point at `nbytes()` readable bytes.
pub unsafe fn compare(
    check: Check,
    reference: &Tensor,
    device: &Tensor,
    src0: Option<&Tensor>,
) -> Result<String, String> {
    if reference.ty.is_quantized() {
        return compare_bytes(reference, device);
    }
    match check {
        Check::Nmse(limit) => compare_nmse(reference, device, limit),
        Check::Exact => compare_exact(reference, device),
        Check::IndexSets => compare_index_sets(reference, device, src0.map(|s| s.ne[0])),
        Check::Bytes => compare_bytes(reference, device),
    }
}

unsafe fn compare_nmse(r: &Tensor, d: &Tensor, limit: f64) -> Result<String, String> {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    let mut worst = (0.0f64, [0i64; 4], 0.0f64, 0.0f64);
    for i in indices(r.ne) {
        let a = read_f64(r, i);
        let b = read_f64(d, i);
        if !a.is_finite() {
            return Err(format!("reference value {a} at {i:?}"));
        }
        if !b.is_finite() {
            return Err(format!("device value {b} at {i:?} (reference {a})"));
        }
        let diff = (a - b) * (a - b);
        err += diff;
        norm += a * a;
        if diff > worst.0 {
            worst = (diff, i, a, b);
        }
    }
    let nmse = nmse_of(err, norm);
    if nmse <= limit {
        Ok(format!("nmse {nmse:.2e}"))
    } else {
        Err(format!(
            "nmse {nmse:.3e} > {limit:e}; largest difference at {:?}: reference {} device {}",
            worst.1, worst.2, worst.3
        ))
    }
}

/// `err / norm`, with an all-zero reference counting as exact only when the device is too.
pub fn nmse_of(err: f64, norm: f64) -> f64 {
    if norm > 0.0 {
        err / norm
    } else if err == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

unsafe fn compare_exact(r: &Tensor, d: &Tensor) -> Result<String, String> {
    let mut bad = 0usize;
    let mut first = None;
    for i in indices(r.ne) {
        let (a, b) = (read_f64(r, i), read_f64(d, i));
        if a != b && !(a.is_nan() && b.is_nan()) {
            bad += 1;
            first.get_or_insert((i, a, b));
        }
    }
    match first {
        None => Ok("exact".into()),
        Some((i, a, b)) => Err(format!(
            "{bad} elements differ; first at {i:?}: reference {a} device {b}"
        )),
    }
}

unsafe fn compare_index_sets(r: &Tensor, d: &Tensor, range: Option<i64>) -> Result<String, String> {
    let k = r.ne[0];
    for row in rows(r.ne) {
        let read = |t: &Tensor| -> Vec<i64> {
            let mut v: Vec<i64> = (0..k)
                .map(|i0| read_f64(t, [i0, row[1], row[2], row[3]]) as i64)
                .collect();
            v.sort_unstable();
            v
        };
        let (a, b) = (read(r), read(d));
        if let Some(n) = range {
            if let Some(bad) = b.iter().find(|&&x| x < 0 || x >= n) {
                return Err(format!("row {row:?}: index {bad} outside 0..{n}"));
            }
        }
        if a != b {
            return Err(format!("row {row:?}: reference indices {a:?}, device {b:?}"));
        }
    }
    Ok("index sets equal".into())
}

unsafe fn compare_bytes(r: &Tensor, d: &Tensor) -> Result<String, String> {
    let row_bytes = r.ty.row_size(r.ne[0]).ok_or("row is not a whole number of blocks")?;
    for (n, row) in rows(r.ne).enumerate() {
        let (a, b) = (row_slice(r, row, row_bytes), row_slice(d, row, row_bytes));
        if let Some(pos) = a.iter().zip(b).position(|(x, y)| x != y) {
            return Err(format!(
                "row {n} {row:?}: bytes differ from the reference's at byte {pos} (block {})",
                pos / r.ty.type_size()
            ));
        }
    }
    Ok("bytes equal".into())
}

/// # Safety
/// `t.data` covers `row` and `len` bytes from its start.
unsafe fn row_slice(t: &Tensor, row: [i64; 4], len: usize) -> &[u8] {
    // SAFETY: the caller guarantees the row lies within the tensor's bytes.
    unsafe { std::slice::from_raw_parts((t.data + t.offset_of(row)) as *const u8, len) }
}

/// Checks that `dst` (a quantized copy of `src`) holds exactly what the type's `from_float`
/// (`quantize_row_from_float_ref`, what ggml's CPU backend copies with) makes of `src`'s values
/// taken in logical order, `dst.ne0` at a time.
///
/// # Safety
/// Both tensors' `data` point at `nbytes()` readable bytes; `src` is f32/f16/bf16.
pub unsafe fn check_quantized_copy(src: &Tensor, dst: &Tensor) -> Result<(), String> {
    let values: Vec<f32> = indices(src.ne).map(|i| read_f64(src, i) as f32).collect();
    let ne0 = dst.ne[0] as usize;
    let row_bytes = dst
        .ty
        .row_size(dst.ne[0])
        .ok_or("dst row is not a whole number of blocks")?;
    let mut expect = vec![0u8; row_bytes];
    for (n, row) in rows(dst.ne).enumerate() {
        let chunk = values
            .get(n * ne0..(n + 1) * ne0)
            .ok_or("source has fewer elements than the destination")?;
        quantize_row_from_float_ref(dst.ty, chunk, &mut expect).map_err(|e| format!("quantizing: {e}"))?;
        let got = row_slice(dst, row, row_bytes);
        if let Some(pos) = expect.iter().zip(got).position(|(x, y)| x != y) {
            return Err(format!("row {n}: bytes differ from the quantizer's at byte {pos}"));
        }
    }
    Ok(())
}

/// Bytes written after every tensor; a changed byte means something wrote past its end.
pub const SENTINEL: [u8; 8] = [0xDE, 0xAD, 0xBE, 0xEF, 0x5A, 0xA5, 0xC3, 0x3C];

/// Fills `pad` with the sentinel pattern.
pub fn write_sentinel(pad: &mut [u8]) {
    for (i, b) in pad.iter_mut().enumerate() {
        *b = SENTINEL[i % SENTINEL.len()];
    }
}

/// The first position in `pad` where the pattern is broken.
pub fn sentinel_broken(pad: &[u8]) -> Option<usize> {
    pad.iter()
        .enumerate()
        .position(|(i, b)| *b != SENTINEL[i % SENTINEL.len()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::ElemType;

    fn tensor_over(v: &mut [f32], ne: &[i64]) -> Tensor {
        let mut t = Tensor::new(ElemType::F32, ne);
        t.data = v.as_mut_ptr() as usize;
        t
    }

    #[test]
    fn nmse_passes_and_fails_at_the_threshold() {
        let mut a = vec![1.0f32, 2.0, 3.0, 4.0];
        let mut b = vec![1.0f32, 2.0, 3.0, 4.001];
        let (ta, tb) = (tensor_over(&mut a, &[4]), tensor_over(&mut b, &[4]));
        // err = 1e-6, norm = 30: nmse = 3.3e-8.
        // SAFETY: both tensors point at 4 live f32.
        unsafe {
            assert!(compare(Check::Nmse(1e-7), &ta, &tb, None).is_ok());
            assert!(compare(Check::Nmse(1e-8), &ta, &tb, None).is_err());
        }
        assert_eq!(nmse_of(0.0, 0.0), 0.0);
        assert!(nmse_of(1.0, 0.0).is_infinite());
    }

    #[test]
    fn non_finite_device_values_fail() {
        let mut a = vec![1.0f32, 2.0];
        let mut b = vec![1.0f32, f32::NAN];
        let (ta, tb) = (tensor_over(&mut a, &[2]), tensor_over(&mut b, &[2]));
        // SAFETY: both tensors point at 2 live f32.
        let e = unsafe { compare(Check::Nmse(1.0), &ta, &tb, None) }.unwrap_err();
        assert!(e.contains("NaN"), "{e}");
    }

    #[test]
    fn index_sets_ignore_order_but_not_content() {
        let mut a = vec![3i32, 1, 2, 0, 5, 4];
        let mut b = vec![1i32, 2, 3, 4, 0, 5];
        let mut c = vec![1i32, 2, 3, 4, 0, 0];
        let mk = |v: &mut Vec<i32>| {
            let mut t = Tensor::new(ElemType::I32, &[3, 2]);
            t.data = v.as_mut_ptr() as usize;
            t
        };
        let (ta, tb, tc) = (mk(&mut a), mk(&mut b), mk(&mut c));
        // SAFETY: each tensor points at 6 live i32.
        unsafe {
            assert!(compare(Check::IndexSets, &ta, &tb, None).is_ok());
            assert!(compare(Check::IndexSets, &ta, &tc, None).is_err());
            assert!(compare(Check::Exact, &ta, &tb, None).is_err());
            let narrow = Tensor::new(ElemType::F32, &[4, 2]);
            assert!(compare(Check::IndexSets, &ta, &tb, Some(&narrow)).is_err());
        }
    }

    #[test]
    fn sentinels_detect_a_changed_byte() {
        let mut pad = [0u8; 20];
        write_sentinel(&mut pad);
        assert_eq!(sentinel_broken(&pad), None);
        pad[11] ^= 1;
        assert_eq!(sentinel_broken(&pad), Some(11));
    }
}
