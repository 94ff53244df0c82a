//! ARGSORT (indices of each f32 row in ascending or descending order) and TOP_K (indices of
//! the k largest, given in descending order). Equal values keep the lower index first; NaN
//! sorts after every number in both orders; -0 equals +0.
//!
//! Each (value, index) pair becomes one u64 whose integer order is the wanted order, so a
//! plain integer sort (or selection, for TOP_K) does the work.

use super::rs_rowio::{elements_disjoint, load_f32, row_ptr, split_row};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::op::SortOrder;
use tandem_graph::{params, ElemType, Op, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    ensure(a.ty == ElemType::F32 && dst.ty == ElemType::I32, dst, srcs, || {
        "sorting takes f32 and gives i32 indices".into()
    })?;
    ensure(a.ne[0] <= i32::MAX as i64, dst, srcs, || {
        "rows longer than i32::MAX".into()
    })?;
    if dst.op == Op::Argsort {
        ensure(params::sort_order(dst).is_some(), dst, srcs, || {
            format!("sort order {} is neither 0 (asc) nor 1 (desc)", dst.param_i32(0))
        })?;
        ensure(a.ne == dst.ne, dst, srcs, || "dst must have src0's shape".into())?;
    } else {
        ensure(
            dst.ne[0] >= 1 && dst.ne[0] <= a.ne[0] && dst.ne[1..] == a.ne[1..],
            dst,
            srcs,
            || format!("dst must be [k, ne1, ne2, ne3] with 1 <= k <= {}", a.ne[0]),
        )?;
    }
    ensure(elements_disjoint(dst), dst, srcs, || "dst elements overlap".into())
}

/// A key whose unsigned order is the ascending order of `v`, with NaN last and -0 == +0.
fn ascending_key(v: f32) -> u32 {
    if v.is_nan() {
        return u32::MAX;
    }
    let bits = (v + 0.0).to_bits();
    if bits >> 31 == 1 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// As [`ascending_key`] but for descending order (NaN still last).
fn descending_key(v: f32) -> u32 {
    if v.is_nan() {
        u32::MAX
    } else {
        // Numbers (infinities included) have ascending keys in 0x007f_ffff..=0xff80_0000, so
        // the complement stays below u32::MAX too.
        !ascending_key(v)
    }
}

/// Collects the `k` smallest of `keys` (distinct) into `buf`, in no order. `buf` holds at most
/// 2k candidates; when full it is cut to its k smallest, whose largest becomes the bound that
/// rejects most later keys with one comparison.
fn smallest_k(keys: impl Iterator<Item = u64>, k: usize, buf: &mut Vec<u64>) {
    let mut bound = u64::MAX;
    for key in keys {
        if key >= bound {
            continue;
        }
        buf.push(key);
        if buf.len() == 2 * k {
            buf.select_nth_unstable(k - 1);
            buf.truncate(k);
            bound = buf[k - 1];
        }
    }
    if buf.len() > k {
        buf.select_nth_unstable(k - 1);
        buf.truncate(k);
    }
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let Some(a) = srcs[0] else {
        return Err(OpError::new(dst, srcs, "missing source"));
    };
    let desc = dst.op == Op::TopK || params::sort_order(dst) == Some(SortOrder::Desc);
    let k = dst.ne[0] as usize;
    let ne0 = a.ne[0] as usize;
    // A comparison sort: about ne0 · log2(ne0) steps a row, counted as 8 per element.
    let nrows = a.nrows() as usize;
    ctx.par_chunks_work(nrows, 4, nrows * ne0 * 8, |start, end| {
        let mut vals = vec![0f32; ne0];
        let mut keys: Vec<u64> = Vec::with_capacity(ne0);
        for r in start..end {
            let (i1, i2, i3) = split_row(a.ne, r);
            // SAFETY: row r of `a` is readable.
            unsafe { load_f32(ElemType::F32, row_ptr(a, i1, i2, i3), a.nb[0], &mut vals) };
            let all = vals.iter().enumerate().map(|(i, &v)| {
                let key = if desc { descending_key(v) } else { ascending_key(v) };
                (key as u64) << 32 | i as u64
            });
            keys.clear();
            if k < ne0 {
                smallest_k(all, k, &mut keys);
            } else {
                keys.extend(all);
            }
            keys.sort_unstable();
            let out = row_ptr(dst, i1, i2, i3);
            for (j, key) in keys.iter().enumerate() {
                // SAFETY: j < dst.ne0; row r of `dst` is written by this task only (elements
                // disjoint, checked).
                unsafe { (out.add(j * dst.nb[0]) as *mut i32).write_unaligned(*key as u32 as i32) };
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::rs_testutil::{both_reject, rng, Mem};
    use rand::seq::SliceRandom;
    use tandem_graph::op::SortOrder;
    use tandem_graph::{ElemType, GraphBuilder, TensorId};

    fn run_both(m: &Mem, d: TensorId) -> (Vec<f64>, Vec<f64>) {
        let r = m.duplicate();
        m.run_cpu(d).unwrap();
        r.run_ref(d).unwrap();
        m.check_guards();
        (m.read(d), r.read(d))
    }

    /// Rows of distinct values (a shuffled ramp) in a [ne0, 3, 2] tensor.
    fn distinct(ne0: i64, seed: u64) -> (GraphBuilder, TensorId, Vec<f64>) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[ne0, 3, 2]);
        let mut r = rng(seed);
        let mut vals = Vec::new();
        for _ in 0..6 {
            let mut row: Vec<f64> = (0..ne0).map(|i| i as f64 * 0.37 - 9.0).collect();
            row.shuffle(&mut r);
            vals.extend(row);
        }
        (g, a, vals)
    }

    #[test]
    fn argsort_both_orders_on_distinct_values() {
        for ne0 in [1i64, 2, 17, 1000] {
            for order in [SortOrder::Asc, SortOrder::Desc] {
                let (mut g, a, vals) = distinct(ne0, ne0 as u64);
                let d = g.argsort(a, order);
                let mut m = Mem::new(g.build());
                let mut it = vals.iter();
                m.fill(a, |_| *it.next().unwrap());
                let (c, r) = run_both(&m, d);
                assert_eq!(c, r, "ne0 {ne0} {order:?}");
                let row0: Vec<f64> = c[..ne0 as usize].iter().map(|&i| vals[i as usize]).collect();
                let sorted = row0.windows(2).all(|w| {
                    if order == SortOrder::Asc {
                        w[0] < w[1]
                    } else {
                        w[0] > w[1]
                    }
                });
                assert!(sorted, "ne0 {ne0} {order:?}");
            }
        }
    }

    #[test]
    fn ties_nan_and_signed_zero_are_deterministic() {
        let row = [2.0, f64::NAN, -0.0, 2.0, 0.0, f64::NEG_INFINITY, f64::INFINITY, -1.0];
        let want_asc = [5, 7, 2, 4, 0, 3, 6, 1];
        let want_desc = [6, 0, 3, 2, 4, 7, 5, 1];
        for (order, want) in [(SortOrder::Asc, want_asc), (SortOrder::Desc, want_desc)] {
            let mut g = GraphBuilder::new();
            let a = g.new_tensor(ElemType::F32, &[8]);
            let d = g.argsort(a, order);
            let mut m = Mem::new(g.build());
            m.fill(a, |i| row[i[0] as usize]);
            let (c, r) = run_both(&m, d);
            let want: Vec<f64> = want.iter().map(|&i| i as f64).collect();
            assert_eq!(c, want, "{order:?}");
            assert_eq!(r, want, "{order:?}");
        }
    }

    #[test]
    fn top_k_sets_and_order() {
        for (ne0, k) in [(1i64, 1i64), (17, 1), (17, 5), (1000, 40), (64, 64)] {
            let (mut g, base, vals) = distinct(ne0, 7 + k as u64);
            // Read through a transposed-twice view: strided rows exercise the general load.
            let a = g.permute(base, [0, 2, 1, 3]).unwrap();
            let d = g.top_k(a, k).unwrap();
            let mut m = Mem::new(g.build());
            let mut it = vals.iter();
            m.fill(base, |_| *it.next().unwrap());
            let (c, r) = run_both(&m, d);
            assert_eq!(c, r, "ne0 {ne0} k {k}");
            let src = m.read(a);
            for row in 0..6 {
                let got: Vec<f64> = c[row * k as usize..(row + 1) * k as usize]
                    .iter()
                    .map(|&i| src[row * ne0 as usize + i as usize])
                    .collect();
                let mut all = src[row * ne0 as usize..(row + 1) * ne0 as usize].to_vec();
                all.sort_by(|x, y| y.partial_cmp(x).unwrap());
                assert_eq!(got, all[..k as usize], "ne0 {ne0} k {k} row {row}");
            }
        }
    }

    #[test]
    fn bad_params() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[8, 2]);
        let s = g.argsort(a, SortOrder::Asc);
        let t = g.top_k(a, 3).unwrap();
        let mut m = Mem::new(g.build());
        m.g.tensor_mut(s).set_param_i32(0, 2);
        both_reject(&m, s, "sort order 2");
        m.g.tensor_mut(t).ne[0] = 9;
        both_reject(&m, t, "k");
        m.g.tensor_mut(t).ne[0] = 3;
        m.g.tensor_mut(t).ty = ElemType::I64;
        both_reject(&m, t, "i32");
    }
}
