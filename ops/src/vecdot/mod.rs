//! Dot products of weight rows with activation rows quantized the way ggml's CPU backend does.
//!
//! A matmul converts each activation row (a column of src1) once into [`vec_dot_type`] of the
//! weight type with [`quantize_activation`], then takes one [`DotFn`] per (weight row, column).
//! Every weight type has a scalar kernel; on x86-64 with AVX2+FMA+F16C an AVX2 kernel replaces it,
//! and with AVX-512F/BW too an AVX-512 kernel (its VNNI variant where present) for the hot types.
//! The choice is made once per process ([`dot_fn`]), so the hot loop is an indirect call per row.

mod act;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_kquant;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;
mod scalar_kquant;

use std::sync::OnceLock;
use tandem_graph::ElemType;

/// `f(n, weight_row, act_row)`: the dot product of `n` elements.
///
/// # Safety
/// `weight_row` points at `ty.row_size(n)` readable bytes of the weight type, `act_row` at
/// `vec_dot_type(ty).row_size(n)` bytes of the activation type, and `n` is a whole number of
/// blocks of both. No alignment is required.
pub type DotFn = unsafe fn(usize, *const u8, *const u8) -> f32;

/// A dot product could not be taken: names the type and what does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("vec_dot {ty}: {reason}")]
pub struct VecDotError {
    pub ty: ElemType,
    pub reason: String,
}

/// The activation format ggml pairs with weight type `ty` (its `vec_dot_type`).
pub fn vec_dot_type(ty: ElemType) -> ElemType {
    match ty {
        ElemType::Q4_0 | ElemType::Q5_0 | ElemType::Q8_0 | ElemType::IQ4NL => ElemType::Q8_0,
        ElemType::Q4_1 | ElemType::Q5_1 => ElemType::Q8_1,
        ElemType::Q2K | ElemType::Q3K | ElemType::Q4K | ElemType::Q5K | ElemType::Q6K => ElemType::Q8K,
        other => other,
    }
}

/// Weight types with a dot kernel here.
pub const WEIGHT_TYPES: [ElemType; 14] = [
    ElemType::F32,
    ElemType::F16,
    ElemType::BF16,
    ElemType::Q4_0,
    ElemType::Q4_1,
    ElemType::Q5_0,
    ElemType::Q5_1,
    ElemType::Q8_0,
    ElemType::Q2K,
    ElemType::Q3K,
    ElemType::Q4K,
    ElemType::Q5K,
    ElemType::Q6K,
    ElemType::IQ4NL,
];

/// Whether `ty` can be the weight of a dot product.
pub fn supports(ty: ElemType) -> bool {
    WEIGHT_TYPES.contains(&ty)
}

/// The scalar kernel of weight type `ty`.
pub fn scalar_dot_fn(ty: ElemType) -> Option<DotFn> {
    let f: DotFn = match ty {
        ElemType::F32 => scalar::dot_f32,
        ElemType::F16 => scalar::dot_f16,
        ElemType::BF16 => scalar::dot_bf16,
        ElemType::Q4_0 => scalar::dot_q4_0,
        ElemType::Q4_1 => scalar::dot_q4_1,
        ElemType::Q5_0 => scalar::dot_q5_0,
        ElemType::Q5_1 => scalar::dot_q5_1,
        ElemType::Q8_0 => scalar::dot_q8_0,
        ElemType::IQ4NL => scalar::dot_iq4_nl,
        ElemType::Q2K => scalar_kquant::dot_q2_k,
        ElemType::Q3K => scalar_kquant::dot_q3_k,
        ElemType::Q4K => scalar_kquant::dot_q4_k,
        ElemType::Q5K => scalar_kquant::dot_q5_k,
        ElemType::Q6K => scalar_kquant::dot_q6_k,
        _ => return None,
    };
    Some(f)
}

/// The AVX-512 kernel of weight type `ty` (the `vpdpbusd` variant when `vnni`, for the types
/// that have one), if there is one and this CPU can run it.
pub fn avx512_dot_fn(ty: ElemType, vnni: bool) -> Option<DotFn> {
    #[cfg(target_arch = "x86_64")]
    {
        let f = crate::simd::features();
        if !(f.has_avx2_fma() && f.avx512f && f.avx512bw) || (vnni && !f.avx512vnni) {
            return None;
        }
        let k: DotFn = match (ty, vnni) {
            (ElemType::F16, false) => avx512::dot_f16,
            (ElemType::Q8_0, false) => avx512::dot_q8_0,
            (ElemType::Q4_0, false) => avx512::dot_q4_0,
            (ElemType::Q8_0, true) => avx512::dot_q8_0_vnni,
            (ElemType::Q4_0, true) => avx512::dot_q4_0_vnni,
            _ => return None,
        };
        Some(k)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (ty, vnni);
        None
    }
}

/// The fastest SIMD kernel of weight type `ty` this CPU can run: AVX-512 (VNNI first) where
/// there is one, else AVX2.
pub fn simd_dot_fn(ty: ElemType) -> Option<DotFn> {
    if let Some(f) = avx512_dot_fn(ty, true).or_else(|| avx512_dot_fn(ty, false)) {
        return Some(f);
    }
    #[cfg(target_arch = "x86_64")]
    {
        if crate::simd::features().has_avx2_fma() {
            let f: DotFn = match ty {
                ElemType::F32 => avx2::dot_f32,
                ElemType::F16 => avx2::dot_f16,
                ElemType::BF16 => avx2::dot_bf16,
                ElemType::Q4_0 => avx2::dot_q4_0,
                ElemType::Q4_1 => avx2::dot_q4_1,
                ElemType::Q5_0 => avx2::dot_q5_0,
                ElemType::Q5_1 => avx2::dot_q5_1,
                ElemType::Q8_0 => avx2::dot_q8_0,
                ElemType::IQ4NL => avx2::dot_iq4_nl,
                ElemType::Q2K => avx2_kquant::dot_q2_k,
                ElemType::Q3K => avx2_kquant::dot_q3_k,
                ElemType::Q4K => avx2_kquant::dot_q4_k,
                ElemType::Q5K => avx2_kquant::dot_q5_k,
                ElemType::Q6K => avx2_kquant::dot_q6_k,
                _ => return None,
            };
            return Some(f);
        }
    }
    let _ = ty;
    None
}

/// Kernels indexed by ggml type id, chosen once.
const TABLE_LEN: usize = 32;

/// The fastest kernel of weight type `ty` on this CPU (chosen once per process).
pub fn dot_fn(ty: ElemType) -> Option<DotFn> {
    static TABLE: OnceLock<[Option<DotFn>; TABLE_LEN]> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t: [Option<DotFn>; TABLE_LEN] = [None; TABLE_LEN];
        for ty in WEIGHT_TYPES {
            t[ty.ggml_id() as usize] = simd_dot_fn(ty).or_else(|| scalar_dot_fn(ty));
        }
        t
    });
    table.get(ty.ggml_id() as usize).copied().flatten()
}

/// Activation formats [`quantize_activation`] can produce.
pub fn can_quantize_activation(ty: ElemType) -> bool {
    matches!(
        ty,
        ElemType::F32 | ElemType::F16 | ElemType::BF16 | ElemType::Q8_0 | ElemType::Q8_1 | ElemType::Q8K
    )
}

/// Converts `src` into activation format `ty` in `dst` (exactly `ty.row_size(src.len())` bytes).
pub fn quantize_activation(ty: ElemType, src: &[f32], dst: &mut [u8]) -> Result<(), VecDotError> {
    let err = |reason: String| VecDotError { ty, reason };
    let need = ty.row_size(src.len() as i64).ok_or_else(|| {
        err(format!(
            "{} elements are not whole blocks of {}",
            src.len(),
            ty.block_size()
        ))
    })?;
    if dst.len() != need {
        return Err(err(format!("destination has {} bytes, needs {need}", dst.len())));
    }
    match ty {
        ElemType::F32 => act::to_f32(src, dst),
        ElemType::F16 => act::to_f16(src, dst),
        ElemType::BF16 => act::to_bf16(src, dst),
        ElemType::Q8_0 => act::to_q8_0(src, dst),
        ElemType::Q8_1 => act::to_q8_1(src, dst),
        ElemType::Q8K => act::to_q8_k(src, dst),
        _ => return Err(err("not an activation format".into())),
    }
    Ok(())
}

/// Checks the sizes of one dot product of weight type `ty`.
fn check_rows(ty: ElemType, n: usize, w: &[u8], a: &[u8]) -> Result<(), VecDotError> {
    let err = |reason: String| VecDotError { ty, reason };
    if !supports(ty) {
        return Err(err("no dot kernel for this weight type".into()));
    }
    let act = vec_dot_type(ty);
    let (Some(wn), Some(an)) = (ty.row_size(n as i64), act.row_size(n as i64)) else {
        return Err(err(format!("{n} elements are not whole blocks")));
    };
    if w.len() != wn || a.len() != an {
        return Err(err(format!(
            "rows of {} and {} bytes, need {wn} ({ty}) and {an} ({act})",
            w.len(),
            a.len()
        )));
    }
    Ok(())
}

/// The dot product of `n` elements of weight row `w` (type `ty`) and activation row `a`
/// (type [`vec_dot_type`]`(ty)`), with the fastest kernel on this CPU.
pub fn vec_dot(ty: ElemType, n: usize, w: &[u8], a: &[u8]) -> Result<f32, VecDotError> {
    check_rows(ty, n, w, a)?;
    let f = dot_fn(ty).ok_or_else(|| VecDotError {
        ty,
        reason: "no dot kernel".into(),
    })?;
    // SAFETY: check_rows proved both slices hold exactly n elements of their types.
    Ok(unsafe { f(n, w.as_ptr(), a.as_ptr()) })
}

/// As [`vec_dot`], always with the scalar kernel.
pub fn vec_dot_scalar(ty: ElemType, n: usize, w: &[u8], a: &[u8]) -> Result<f32, VecDotError> {
    check_rows(ty, n, w, a)?;
    let f = scalar_dot_fn(ty).ok_or_else(|| VecDotError {
        ty,
        reason: "no dot kernel".into(),
    })?;
    // SAFETY: as in vec_dot.
    Ok(unsafe { f(n, w.as_ptr(), a.as_ptr()) })
}

#[cfg(test)]
pub(crate) mod testgen;
#[cfg(test)]
mod tests;
