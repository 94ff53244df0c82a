//! The scale searches of ggml's k-quant reference quantizers (`make_qx_quants` with rmse type 1,
//! `make_q3_quants` with rmse, `make_qkx2_quants`) and the 6-bit scale/min packing of q4_K and
//! q5_K. Sums are accumulated in f32 in index order and every product is grouped as ggml groups
//! it (left to right), because a different grouping changes the chosen levels.

use super::block_io::nearest_int;

/// ggml's `GROUP_MAX_EPS`: groups whose largest magnitude is below this quantize to zero.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// The value with the largest magnitude (first on ties) and that magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Symmetric levels in `[-nmax, nmax)`, weighted by x² (ggml's rmse type 1): tries the scale
/// `-nmax/max` and 18 nearby ones, keeping the best least-squares fit. Writes `levels[i] + nmax`
/// to `out` and returns the scale.
pub(crate) fn symmetric_rmse_quants(nmax: i32, x: &[f32], out: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let fit = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let assign = |iscale: f32, out: &mut [i8]| {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = (nmax + level(iscale, v)) as i8;
        }
    };
    let iscale = -(nmax as f32) / max;
    assign(iscale, out);
    let (sumlx, suml2) = fit(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        let (sumlx, suml2) = fit(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            assign(iscale, out);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants` with rmse: levels in `[-nmax, nmax)` from `-nmax/max`, then up to 5
/// passes that move single levels when that improves the x²-weighted fit. Writes `level + nmax`.
pub(crate) fn q3_rmse_quants(nmax: i32, x: &[f32], out: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (o, &v) in out.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = l as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for (o, &v) in out.iter_mut().zip(x) {
            let w = v * v;
            let cur = *o as f32;
            let mut slx = sumlx - w * v * cur;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * cur * cur;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *o as i32 {
                    let nl = new_l as f32;
                    slx += w * v * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *o = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    for o in out.iter_mut() {
        *o += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The knobs of [`affine_quants`]: the search tries `nmax + rmin + rdelta·k` for `k` in
/// `0..=nstep`; `use_mad` weighs absolute instead of squared errors.
pub(crate) struct AffineSearch {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// ggml's `make_qkx2_quants`: levels in `[0, nmax]` for `x ≈ scale·l - min` with `min ≥ 0`,
/// chosen by a weighted least-squares search. Writes the levels, returns `(scale, min)`.
pub(crate) fn affine_quants(p: &AffineSearch, x: &[f32], weights: &[f32], out: &mut [u8]) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        out.fill(0);
        return (0.0, -min);
    }
    let nmax = p.nmax as f32;
    let error_of = |scale: f32, min: f32, levels: &[u8]| {
        let mut err = 0.0f32;
        for i in 0..n {
            let diff = scale * levels[i] as f32 + min - x[i];
            let diff = if p.use_mad { diff.abs() } else { diff * diff };
            err += weights[i] * diff;
        }
        err
    };
    let iscale = nmax / (max - min);
    let mut scale = 1.0 / iscale;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = nearest_int(iscale * (v - min)).clamp(0, p.nmax) as u8;
    }
    let mut best_error = error_of(scale, min, out);
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut trial = [0u8; 32];
    let trial = &mut trial[..n];
    for step in 0..=p.nstep {
        let iscale = (p.rmin + p.rdelta * step as f32 + nmax) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax);
            trial[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let err = error_of(this_scale, this_min, trial);
            if err < best_error {
                out.copy_from_slice(trial);
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Packs eight 6-bit scales and mins into q4_K/q5_K's 12 bytes: the first four of each in the
/// low 6 bits of bytes 0..8, the last four split into nibbles (bytes 8..12) and the spare top two
/// bits of bytes 0..8.
pub(crate) fn pack_scale_min_k4(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for j in 0..8 {
        let (ls, lm) = (scales[j], mins[j]);
        if j < 4 {
            out[j] = ls;
            out[j + 4] = lm;
        } else {
            out[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            out[j - 4] |= (ls >> 4) << 6;
            out[j] |= (lm >> 4) << 6;
        }
    }
    out
}

/// Scale and min of sub-block `j` from q4_K/q5_K's packed 12 bytes (ggml's `get_scale_min_k4`).
pub(crate) fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_min_packing_round_trips() {
        let scales = [0, 63, 17, 42, 5, 63, 32, 1];
        let mins = [63, 0, 9, 33, 60, 2, 31, 48];
        let packed = pack_scale_min_k4(&scales, &mins);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &packed), (scales[j], mins[j]), "sub-block {j}");
        }
    }

    #[test]
    fn affine_search_fits_a_ramp_exactly() {
        let x: Vec<f32> = (0..32).map(|i| 0.25 * (i % 16) as f32 - 1.0).collect();
        let w = vec![1.0f32; 32];
        let mut l = [0u8; 32];
        let p = AffineSearch {
            nmax: 15,
            rmin: -1.0,
            rdelta: 0.1,
            nstep: 20,
            use_mad: false,
        };
        let (scale, min) = affine_quants(&p, &x, &w, &mut l);
        for i in 0..32 {
            assert!((scale * l[i] as f32 - min - x[i]).abs() < 1e-5, "{i}");
        }
    }

    #[test]
    fn symmetric_search_reproduces_levels() {
        let x: Vec<f32> = (0..16).map(|i| 0.5 * (i as f32 - 8.0)).collect();
        let mut l = [0i8; 16];
        let scale = symmetric_rmse_quants(32, &x, &mut l);
        for i in 0..16 {
            let back = scale * (l[i] as i32 - 32) as f32;
            assert!(
                (back - x[i]).abs() <= scale.abs() * 0.5 + 1e-6,
                "{i}: {back} vs {}",
                x[i]
            );
        }
        let zeros = [0f32; 16];
        assert_eq!(symmetric_rmse_quants(32, &zeros, &mut l), 0.0);
        assert!(l.iter().all(|&v| v == 0));
    }
}
