//! The vector primitives of the attention kernel: f32 dot, axpy, scale, exp, and row
//! conversion of f16/bf16/q8_0/q4_0 K/V rows to f32. Each has an AVX2+FMA+F16C path picked once
//! per op run (`Simd::detect`) and a scalar path that is also the reference for the SIMD one.

use half::f16;
use tandem_graph::ElemType;

/// Which code path the primitives take; chosen once per op run.
#[derive(Clone, Copy, Debug)]
pub(super) struct Simd {
    avx2: bool,
}

impl Simd {
    pub(super) fn detect() -> Simd {
        Simd {
            avx2: cfg!(target_arch = "x86_64") && crate::simd::features().has_avx2_fma(),
        }
    }

    #[cfg(test)]
    pub(super) fn scalar() -> Simd {
        Simd { avx2: false }
    }

    /// `Σ a[i]·b[i]` over the shorter length.
    pub(super) fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `detect` saw AVX2, FMA and F16C on this CPU.
            return unsafe { x86::dot(&a[..n], &b[..n]) };
        }
        dot_scalar(&a[..n], &b[..n])
    }

    /// `y[i] += a·x[i]` over the shorter length.
    pub(super) fn axpy(self, y: &mut [f32], x: &[f32], a: f32) {
        let n = y.len().min(x.len());
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: as in `dot`.
            return unsafe { x86::axpy(&mut y[..n], &x[..n], a) };
        }
        for (yi, xi) in y[..n].iter_mut().zip(&x[..n]) {
            *yi += a * xi;
        }
    }

    /// `out[j] = q · rows[j]` for the `out.len()` rows of `q.len()` floats stored back to back in
    /// `rows`.
    pub(super) fn dots(self, q: &[f32], rows: &[f32], out: &mut [f32]) {
        let d = q.len();
        let n = out.len().min(rows.len() / d.max(1));
        let mut j = 0;
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            while j + 4 <= n {
                // SAFETY: as in `dot`; rows j..j+4 lie inside `rows`.
                let r = unsafe { x86::dot4(q, &rows[j * d..(j + 4) * d]) };
                out[j..j + 4].copy_from_slice(&r);
                j += 4;
            }
        }
        while j < n {
            out[j] = self.dot(q, &rows[j * d..(j + 1) * d]);
            j += 1;
        }
    }

    /// `acc[e] += Σ_j w[j] · rows[j][e]` for the `w.len()` rows of `acc.len()` floats stored back
    /// to back in `rows`; rows with weight 0 are skipped.
    pub(super) fn weighted_sum(self, acc: &mut [f32], rows: &[f32], w: &[f32]) {
        let d = acc.len();
        let n = w.len().min(rows.len() / d.max(1));
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: as in `dot`; `rows` holds at least `n · d` floats.
            return unsafe { x86::weighted_sum(acc, &rows[..n * d], &w[..n]) };
        }
        for (j, &wj) in w[..n].iter().enumerate() {
            if wj != 0.0 {
                self.axpy(acc, &rows[j * d..(j + 1) * d], wj);
            }
        }
    }

    /// `y[i] *= a`.
    pub(super) fn scale(self, y: &mut [f32], a: f32) {
        for yi in y.iter_mut() {
            *yi *= a;
        }
    }

    /// `x[i] = exp(x[i])` in place; `-inf` gives exactly 0.
    pub(super) fn exp_in_place(self, x: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: as in `dot`.
            return unsafe { x86::exp_in_place(x) };
        }
        for xi in x.iter_mut() {
            *xi = xi.exp();
        }
    }

    /// Expands one row of `ty` (`src` holds exactly `ty.row_size(dst.len())` bytes) to f32.
    /// Only the K/V types the attention check admits reach here; the block types without a fast
    /// path here go through the quantizers' dequantizer.
    pub(super) fn row_to_f32(self, ty: ElemType, src: &[u8], dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 && matches!(ty, ElemType::BF16 | ElemType::Q8_0 | ElemType::Q4_0) {
            let n = match ty {
                ElemType::BF16 => dst.len().min(src.len() / 2),
                ElemType::Q8_0 => 32 * (dst.len() / 32).min(src.len() / 34),
                _ => 32 * (dst.len() / 32).min(src.len() / 18),
            };
            // SAFETY: as in `dot`; `n` elements fit in both `src` and `dst`.
            return unsafe { x86::row_to_f32(ty, src, &mut dst[..n]) };
        }
        match ty {
            ElemType::F32 => {
                for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
                    *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            ElemType::F16 => self.f16_to_f32(src, dst),
            ElemType::BF16 => {
                for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *d = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
                }
            }
            ElemType::Q8_0 => {
                for (out, blk) in dst.chunks_exact_mut(32).zip(src.chunks_exact(34)) {
                    let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                    for (o, &q) in out.iter_mut().zip(&blk[2..]) {
                        *o = d * (q as i8) as f32;
                    }
                }
            }
            ElemType::Q4_0 => {
                for (out, blk) in dst.chunks_exact_mut(32).zip(src.chunks_exact(18)) {
                    let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                    let (lo, hi) = out.split_at_mut(16);
                    for j in 0..16 {
                        let b = blk[2 + j];
                        lo[j] = d * ((b & 0x0f) as i32 - 8) as f32;
                        hi[j] = d * ((b >> 4) as i32 - 8) as f32;
                    }
                }
            }
            _ => {
                // The attention check admits only types the dequantizer knows, with whole blocks.
                let _ = crate::quant::dequantize_row(ty, src, dst);
            }
        }
    }

    /// f16 little-endian bytes to f32 (any alignment).
    pub(super) fn f16_to_f32(self, src: &[u8], dst: &mut [f32]) {
        let n = dst.len().min(src.len() / 2);
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: as in `dot`; `src` holds at least `2 * n` bytes.
            return unsafe { x86::f16_to_f32(&src[..2 * n], &mut dst[..n]) };
        }
        for (d, c) in dst[..n].iter_mut().zip(src.chunks_exact(2)) {
            *d = f16::from_le_bytes([c[0], c[1]]).to_f32();
        }
    }
}

fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    // Four partial sums: shorter dependency chains, and the same summation shape as the SIMD path.
    let mut s = [0f32; 4];
    let (ca, ra) = (a.chunks_exact(4), a.chunks_exact(4).remainder());
    for (x, y) in ca.zip(b.chunks_exact(4)) {
        for i in 0..4 {
            s[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(&b[a.len() - ra.len()..]).map(|(x, y)| x * y).sum();
    (s[0] + s[1]) + (s[2] + s[3]) + tail
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU has AVX2 and FMA; `a.len() == b.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads below): every load reads 8 floats at index `i + 8k < n`.
        while i + 32 <= n {
            for (k, ak) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_ps(pa.add(i + 8 * k));
                let y = _mm256_loadu_ps(pb.add(i + 8 * k));
                *ak = _mm256_fmadd_ps(x, y, *ak);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[0]);
            i += 8;
        }
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut s = hsum(v);
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }

    /// # Safety
    /// The CPU has AVX2 and FMA; `y.len() == x.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn axpy(y: &mut [f32], x: &[f32], a: f32) {
        let n = y.len();
        let (py, px) = (y.as_mut_ptr(), x.as_ptr());
        let va = _mm256_set1_ps(a);
        let mut i = 0;
        // SAFETY (all accesses below): 8 floats at index `i < n - 7`, then single ones below `n`.
        while i + 8 <= n {
            let r = _mm256_fmadd_ps(_mm256_loadu_ps(px.add(i)), va, _mm256_loadu_ps(py.add(i)));
            _mm256_storeu_ps(py.add(i), r);
            i += 8;
        }
        while i < n {
            *py.add(i) += a * *px.add(i);
            i += 1;
        }
    }

    /// One `q` against four rows stored back to back in `k` (`k.len() == 4 * q.len()`); two
    /// accumulators per row keep eight FMA chains in flight.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `k.len() >= 4 * q.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot4(q: &[f32], k: &[f32]) -> [f32; 4] {
        let d = q.len();
        let (pq, pk) = (q.as_ptr(), k.as_ptr());
        let mut a = [_mm256_setzero_ps(); 8];
        let mut i = 0;
        // SAFETY (all loads below): q element i + 15 < d, row r element i + 15 < d, and row r
        // starts at r · d inside `k`.
        while i + 16 <= d {
            let (x0, x1) = (_mm256_loadu_ps(pq.add(i)), _mm256_loadu_ps(pq.add(i + 8)));
            for r in 0..4 {
                let row = pk.add(r * d + i);
                a[2 * r] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(row), a[2 * r]);
                a[2 * r + 1] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(row.add(8)), a[2 * r + 1]);
            }
            i += 16;
        }
        while i + 8 <= d {
            let x = _mm256_loadu_ps(pq.add(i));
            for r in 0..4 {
                a[2 * r] = _mm256_fmadd_ps(x, _mm256_loadu_ps(pk.add(r * d + i)), a[2 * r]);
            }
            i += 8;
        }
        let mut out = [0f32; 4];
        for r in 0..4 {
            out[r] = hsum(_mm256_add_ps(a[2 * r], a[2 * r + 1]));
            for e in i..d {
                out[r] += *pq.add(e) * *pk.add(r * d + e);
            }
        }
        out
    }

    /// `acc += Σ_j w[j] · rows[j]`, 64 columns of `acc` held in registers across all rows.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `rows.len() >= w.len() * acc.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn weighted_sum(acc: &mut [f32], rows: &[f32], w: &[f32]) {
        let d = acc.len();
        let (pa, pr) = (acc.as_mut_ptr(), rows.as_ptr());
        let mut e = 0;
        // SAFETY (all accesses below): columns e..e+64 (then e..e+8, then e) are below d, and
        // row j starts at j · d inside `rows`.
        while e + 64 <= d {
            let mut a = [_mm256_setzero_ps(); 8];
            for (t, at) in a.iter_mut().enumerate() {
                *at = _mm256_loadu_ps(pa.add(e + 8 * t));
            }
            for (j, &wj) in w.iter().enumerate() {
                if wj == 0.0 {
                    continue;
                }
                let vw = _mm256_set1_ps(wj);
                let row = pr.add(j * d + e);
                for (t, at) in a.iter_mut().enumerate() {
                    *at = _mm256_fmadd_ps(vw, _mm256_loadu_ps(row.add(8 * t)), *at);
                }
            }
            for (t, at) in a.iter().enumerate() {
                _mm256_storeu_ps(pa.add(e + 8 * t), *at);
            }
            e += 64;
        }
        while e + 8 <= d {
            let mut a = _mm256_loadu_ps(pa.add(e));
            for (j, &wj) in w.iter().enumerate() {
                if wj != 0.0 {
                    a = _mm256_fmadd_ps(_mm256_set1_ps(wj), _mm256_loadu_ps(pr.add(j * d + e)), a);
                }
            }
            _mm256_storeu_ps(pa.add(e), a);
            e += 8;
        }
        while e < d {
            for (j, &wj) in w.iter().enumerate() {
                if wj != 0.0 {
                    *pa.add(e) += wj * *pr.add(j * d + e);
                }
            }
            e += 1;
        }
    }

    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `src.len() >= 2 * dst.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
        let n = dst.len();
        let (ps, pd) = (src.as_ptr(), dst.as_mut_ptr());
        let mut i = 0;
        // SAFETY (all accesses below): 8 halves (16 bytes) at element `i < n - 7`, then single
        // ones below `n`; `src` holds `2 * n` bytes.
        while i + 8 <= n {
            let h = _mm_loadu_si128(ps.add(2 * i) as *const __m128i);
            _mm256_storeu_ps(pd.add(i), _mm256_cvtph_ps(h));
            i += 8;
        }
        while i < n {
            *pd.add(i) = half::f16::from_le_bytes([*ps.add(2 * i), *ps.add(2 * i + 1)]).to_f32();
            i += 1;
        }
    }

    /// bf16, q8_0 or q4_0 bytes to f32 (whole blocks: `dst.len()` a multiple of 32 for the
    /// quantized types).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `src` holds the bytes of `dst.len()` elements of `ty`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn row_to_f32(ty: tandem_graph::ElemType, src: &[u8], dst: &mut [f32]) {
        use tandem_graph::ElemType;
        let (ps, pd, n) = (src.as_ptr(), dst.as_mut_ptr(), dst.len());
        match ty {
            ElemType::BF16 => {
                let mut i = 0;
                // SAFETY (all accesses below): elements i..i+8 (then i) are below n; `src`
                // holds 2 · n bytes.
                while i + 8 <= n {
                    let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(ps.add(2 * i) as *const __m128i));
                    _mm256_storeu_ps(pd.add(i), _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
                    i += 8;
                }
                while i < n {
                    let b = u16::from_le_bytes([*ps.add(2 * i), *ps.add(2 * i + 1)]);
                    *pd.add(i) = f32::from_bits((b as u32) << 16);
                    i += 1;
                }
            }
            ElemType::Q8_0 => {
                for blk in 0..n / 32 {
                    // SAFETY: block `blk` is 34 bytes at 34 · blk, its 32 outputs at 32 · blk.
                    let b = ps.add(34 * blk);
                    let d = _mm256_set1_ps(half::f16::from_le_bytes([*b, *b.add(1)]).to_f32());
                    for part in 0..4 {
                        let q = _mm_loadl_epi64(b.add(2 + 8 * part) as *const __m128i);
                        let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                        _mm256_storeu_ps(pd.add(32 * blk + 8 * part), _mm256_mul_ps(f, d));
                    }
                }
            }
            ElemType::Q4_0 => {
                let low = _mm_set1_epi8(0x0f);
                let eight = _mm_set1_epi8(8);
                for blk in 0..n / 32 {
                    // SAFETY: block `blk` is 18 bytes at 18 · blk, its 32 outputs at 32 · blk.
                    let b = ps.add(18 * blk);
                    let d = _mm256_set1_ps(half::f16::from_le_bytes([*b, *b.add(1)]).to_f32());
                    let qs = _mm_loadu_si128(b.add(2) as *const __m128i);
                    // Low nibbles are elements 0..16, high nibbles 16..32; both offset by 8.
                    let lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);
                    let hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);
                    for (half_idx, v) in [lo, hi].into_iter().enumerate() {
                        let out = pd.add(32 * blk + 16 * half_idx);
                        let f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
                        let f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
                        _mm256_storeu_ps(out, _mm256_mul_ps(f0, d));
                        _mm256_storeu_ps(out.add(8), _mm256_mul_ps(f1, d));
                    }
                }
            }
            _ => {}
        }
    }

    /// `exp` of 8 lanes: range reduction `x = k·ln2 + r`, a degree-6 polynomial for `e^r` on
    /// `|r| <= ln2/2`, and `2^k` built in the exponent bits. Relative error about 2e-7 against
    /// `f32::exp` (measured over 1e6 points of [-87, 88] in `tests::simd_exp_matches_libm`).
    /// Inputs below -87.3 flush to 0 (including -inf); inputs above 88.7 give +inf.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp8(x: __m256) -> __m256 {
        let log2e = _mm256_set1_ps(std::f32::consts::LOG2_E);
        let ln2_hi = _mm256_set1_ps(0.693_145_75);
        let ln2_lo = _mm256_set1_ps(1.428_606_8e-6);
        let lo = _mm256_set1_ps(-87.336_54);
        let hi = _mm256_set1_ps(88.722_84);
        let xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
        let k = _mm256_round_ps(_mm256_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        let r = _mm256_fnmadd_ps(k, ln2_hi, xc);
        let r = _mm256_fnmadd_ps(k, ln2_lo, r);
        // Taylor coefficients 1/n! for n = 6..0, Horner form.
        let mut p = _mm256_set1_ps(1.0 / 720.0);
        for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        // 2^k for k in [-126, 128]: split in two factors so k = 128 and k = -126 stay finite
        // normal numbers until the final product.
        let ki = _mm256_cvtps_epi32(k);
        let k1 = _mm256_srai_epi32(ki, 1);
        let k2 = _mm256_sub_epi32(ki, k1);
        let bias = _mm256_set1_epi32(127);
        let f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
        let f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
        let y = _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
        // Below the clamp the true value is under f32's normal range: return 0; above, +inf.
        let under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
        let over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
        let y = _mm256_andnot_ps(under, y);
        _mm256_blendv_ps(y, _mm256_set1_ps(f32::INFINITY), over)
    }

    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_in_place(x: &mut [f32]) {
        let n = x.len();
        let p = x.as_mut_ptr();
        let mut i = 0;
        // SAFETY (all accesses below): 8 floats at index `i < n - 7`, then single ones below `n`.
        while i + 8 <= n {
            _mm256_storeu_ps(p.add(i), exp8(_mm256_loadu_ps(p.add(i))));
            i += 8;
        }
        while i < n {
            *p.add(i) = (*p.add(i)).exp();
            i += 1;
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_matches_scalar() {
        let simd = Simd::detect();
        let scalar = Simd::scalar();
        for n in [1usize, 7, 8, 31, 32, 33, 64, 129] {
            let a: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.25).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 13 % 7) as f32 - 3.0) * 0.5).collect();
            let (d1, d2) = (simd.dot(&a, &b), scalar.dot(&a, &b));
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!(
                (d1 as f64 - exact).abs() < 1e-4 && (d2 as f64 - exact).abs() < 1e-4,
                "n={n}"
            );
            let mut y1 = b.clone();
            let mut y2 = b.clone();
            simd.axpy(&mut y1, &a, 0.75);
            scalar.axpy(&mut y2, &a, 0.75);
            assert_eq!(y1, y2, "axpy n={n}");
            let bytes: Vec<u8> = a.iter().flat_map(|x| f16::from_f32(*x).to_le_bytes()).collect();
            let (mut h1, mut h2) = (vec![0f32; n], vec![0f32; n]);
            simd.f16_to_f32(&bytes, &mut h1);
            scalar.f16_to_f32(&bytes, &mut h2);
            assert_eq!(h1, h2, "f16 n={n}");
            assert_eq!(h1, a, "f16 values are exact halves");
        }
    }

    #[test]
    fn multi_row_kernels_match_scalar() {
        let simd = Simd::detect();
        let scalar = Simd::scalar();
        for d in [8usize, 40, 64, 72, 128, 136] {
            for n in [1usize, 3, 4, 9, 32] {
                let q: Vec<f32> = (0..d).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1).collect();
                let rows: Vec<f32> = (0..n * d).map(|i| ((i * 11 % 17) as f32 - 8.0) * 0.05).collect();
                let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
                simd.dots(&q, &rows, &mut a);
                scalar.dots(&q, &rows, &mut b);
                for j in 0..n {
                    let exact: f64 = (0..d).map(|e| q[e] as f64 * rows[j * d + e] as f64).sum();
                    assert!((a[j] as f64 - exact).abs() < 1e-4, "dots d={d} n={n} j={j}");
                    assert!((b[j] as f64 - exact).abs() < 1e-4, "scalar dots d={d} n={n} j={j}");
                }
                let w: Vec<f32> = (0..n)
                    .map(|j| if j % 3 == 1 { 0.0 } else { 0.5 + j as f32 * 0.1 })
                    .collect();
                let (mut x, mut y) = (q.clone(), q.clone());
                simd.weighted_sum(&mut x, &rows, &w);
                scalar.weighted_sum(&mut y, &rows, &w);
                for e in 0..d {
                    let exact = q[e] as f64 + (0..n).map(|j| w[j] as f64 * rows[j * d + e] as f64).sum::<f64>();
                    assert!((x[e] as f64 - exact).abs() < 1e-5, "weighted_sum d={d} n={n} e={e}");
                    assert!(
                        (y[e] as f64 - exact).abs() < 1e-5,
                        "scalar weighted_sum d={d} n={n} e={e}"
                    );
                }
            }
        }
    }

    #[test]
    fn simd_exp_matches_libm() {
        let simd = Simd::detect();
        let n = 1_000_000;
        let mut xs: Vec<f32> = (0..n).map(|i| -87.0 + 175.0 * i as f32 / n as f32).collect();
        let want: Vec<f32> = xs.iter().map(|x| x.exp()).collect();
        simd.exp_in_place(&mut xs);
        let worst = xs
            .iter()
            .zip(&want)
            .map(|(g, w)| ((g - w) / w).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-6, "worst relative error {worst}");
        let mut edge = vec![
            f32::NEG_INFINITY,
            -1000.0,
            -88.0,
            0.0,
            89.0,
            f32::INFINITY,
            -0.0,
            1.0,
            2.0,
        ];
        simd.exp_in_place(&mut edge);
        assert_eq!(&edge[..3], &[0.0, 0.0, 0.0]);
        assert_eq!(edge[3], 1.0);
        assert_eq!(edge[4], f32::INFINITY);
        assert_eq!(edge[5], f32::INFINITY);
        assert_eq!(edge[6], 1.0);
        assert!((edge[7] - std::f32::consts::E).abs() < 1e-6);
    }

    #[test]
    fn quant_rows_expand() {
        let simd = Simd::detect();
        // One q8_0 block: d = 0.5, qs = -16..16.
        let mut q8 = f16::from_f32(0.5).to_le_bytes().to_vec();
        q8.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let mut out = vec![0f32; 32];
        simd.row_to_f32(ElemType::Q8_0, &q8, &mut out);
        assert!(out.iter().enumerate().all(|(i, &x)| x == 0.5 * (i as f32 - 16.0)));
        // One q4_0 block: d = 2, byte j = (j & 15) | (15 - j) << 4.
        let mut q4 = f16::from_f32(2.0).to_le_bytes().to_vec();
        q4.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        simd.row_to_f32(ElemType::Q4_0, &q4, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], 2.0 * (j as f32 - 8.0));
            assert_eq!(out[16 + j], 2.0 * (7.0 - j as f32));
        }
        // Whole rows of several blocks: the SIMD path against the scalar one.
        let bytes: Vec<u8> = (0..34 * 4).map(|i| ((i * 97 + 13) % 251) as u8).collect();
        for (ty, n) in [(ElemType::Q8_0, 128usize), (ElemType::Q4_0, 224), (ElemType::BF16, 61)] {
            let src = &bytes[..ty.row_size(n as i64).unwrap()];
            let mut src = src.to_vec();
            if ty != ElemType::BF16 {
                // Keep the block scales finite.
                for blk in src.chunks_exact_mut(ty.type_size()) {
                    blk[..2].copy_from_slice(&f16::from_f32(0.37).to_le_bytes());
                }
            }
            let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
            simd.row_to_f32(ty, &src, &mut a);
            Simd::scalar().row_to_f32(ty, &src, &mut b);
            assert_eq!(a, b, "{ty}");
        }
        let bf: Vec<u8> = [1.5f32, -2.25]
            .iter()
            .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
            .collect();
        let mut o2 = [0f32; 2];
        simd.row_to_f32(ElemType::BF16, &bf, &mut o2);
        assert_eq!(o2, [1.5, -2.25]);
    }
}
