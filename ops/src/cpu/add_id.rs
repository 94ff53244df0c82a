//! ADD_ID: `dst[:, i1, i2] = src0[:, i1, i2] + src1[:, ids[i1, i2]]` (the per-expert bias of a
//! mixture-of-experts layer), f32. Every id is validated before anything is written.

use super::ew_rows::{for_row_ranges, load_f32, plain_f32_row, ranges_overlap, row_addr, row_coords, store_f32};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::{ElemType, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (a, b, ids) = (need(dst, srcs, 0)?, need(dst, srcs, 1)?, need(dst, srcs, 2)?);
    for t in [dst, a, b] {
        ensure(t.ty == ElemType::F32, dst, srcs, || {
            format!("{} is not supported, only f32", t.ty)
        })?;
    }
    ensure(ids.ty == ElemType::I32, dst, srcs, || {
        format!("ids must be i32, not {}", ids.ty)
    })?;
    for t in [dst, a, b, ids] {
        ensure(t.ne.iter().all(|&n| n >= 0), dst, srcs, || "negative size".into())?;
    }
    ensure(dst.ne == a.ne, dst, srcs, || "dst and src0 shapes differ".into())?;
    ensure(b.ne[0] == a.ne[0], dst, srcs, || {
        "src1 rows differ in length from src0's".into()
    })?;
    ensure(ids.ne[0] == a.ne[1] && ids.ne[1] == a.ne[2], dst, srcs, || {
        "ids must be [src0.ne1, src0.ne2]".into()
    })
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (a, b, ids) = (need(dst, srcs, 0)?, need(dst, srcs, 1)?, need(dst, srcs, 2)?);
    let n_rows_b = b.ne[1];
    let id_at = |i1: usize, i2: usize| {
        // SAFETY: i1 < ids.ne0 and i2 < ids.ne1 (ids shape checked against src0's).
        unsafe { ((ids.data + i1 * ids.nb[0] + i2 * ids.nb[1]) as *const i32).read_unaligned() }
    };
    for i2 in 0..a.ne[2] as usize {
        for i1 in 0..a.ne[1] as usize {
            let id = id_at(i1, i2);
            if id < 0 || id as i64 >= n_rows_b {
                return Err(OpError::new(
                    dst,
                    srcs,
                    format!("ids[{i1}, {i2}] = {id} is outside src1's rows 0..{n_rows_b}"),
                ));
            }
        }
    }
    let n0 = dst.ne[0] as usize;
    for_row_ranges(ctx, dst, &[a, b, ids], dst.nrows() as usize, n0, |start, end| {
        let (mut xbuf, mut ybuf) = (Vec::new(), Vec::new());
        for r in start..end {
            let [i1, i2, _] = row_coords(dst, r);
            let (d, x) = (row_addr(dst, r), row_addr(a, r));
            let y = b.data + id_at(i1, i2) as usize * b.nb[1];
            let direct = plain_f32_row(dst, d)
                && plain_f32_row(a, x)
                && plain_f32_row(b, y)
                && (d == x || !ranges_overlap(d, n0 * 4, x, n0 * 4))
                && !ranges_overlap(d, n0 * 4, y, n0 * 4);
            // SAFETY: rows lie inside their tensors (shapes checked, ids validated above); the
            // task owns dst's row (for_row_ranges); slices only for aligned f32 rows that are
            // dst's own row (in place) or share no byte with it.
            unsafe {
                if direct && d == x {
                    let ys = std::slice::from_raw_parts(y as *const f32, n0);
                    let z = std::slice::from_raw_parts_mut(d as *mut f32, n0);
                    z.iter_mut().zip(ys).for_each(|(zi, &yi)| *zi += yi);
                } else if direct {
                    let ys = std::slice::from_raw_parts(y as *const f32, n0);
                    let xs = std::slice::from_raw_parts(x as *const f32, n0);
                    let z = std::slice::from_raw_parts_mut(d as *mut f32, n0);
                    z.iter_mut().zip(xs).zip(ys).for_each(|((zi, &xi), &yi)| *zi = xi + yi);
                } else {
                    xbuf.resize(n0, 0.0);
                    ybuf.resize(n0, 0.0);
                    load_f32(a.ty, x as *const u8, a.nb[0], &mut xbuf);
                    load_f32(b.ty, y as *const u8, b.nb[0], &mut ybuf);
                    xbuf.iter_mut().zip(&ybuf).for_each(|(xi, &yi)| *xi += yi);
                    store_f32(dst.ty, d as *mut u8, dst.nb[0], &xbuf);
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::ew_testutil::{assert_close, Fill, Mem, TOL};
    use tandem_graph::{ElemType, Graph, GraphBuilder, TensorId};

    /// src0 [ne0, n_used, n_tokens], src1 [ne0, n_expert], ids [n_used, n_tokens].
    fn case(ne0: i64, n_used: i64, n_tokens: i64, n_expert: i64) -> (Graph, TensorId, TensorId) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[ne0, n_used, n_tokens]);
        let b = g.new_tensor(ElemType::F32, &[ne0, n_expert]);
        let ids = g.new_tensor(ElemType::I32, &[n_used, n_tokens]);
        let n = g.add_id(a, b, ids).unwrap();
        (g.build(), n, ids)
    }

    fn ids_values(n: usize, n_expert: usize) -> Fill {
        Fill::Values((0..n).map(|k| ((k * 7 + 3) % n_expert) as f64).collect())
    }

    #[test]
    fn matches_reference() {
        let (g, n, ids) = case(37, 4, 5, 8);
        assert_close(g, n, &[(ids, ids_values(20, 8))], TOL);
        let (g, n, ids) = case(2880, 4, 16, 32);
        assert_close(g, n, &[(ids, ids_values(64, 32))], TOL);
    }

    #[test]
    fn bad_id_is_an_error_and_nothing_is_written() {
        for bad in [8.0, -1.0] {
            let (mut g, n, ids) = case(16, 2, 3, 8);
            let mem = Mem::alloc(&mut g);
            let mut values = vec![1.0; 6];
            values[4] = bad;
            let mut rng = rand::SeedableRng::seed_from_u64(1);
            super::super::ew_testutil::fill(g.tensor(ids), &Fill::Values(values), &mut rng);
            let before = mem.bytes(n).to_vec();
            let e = super::super::ew_testutil::run_graph(&g, true).unwrap_err();
            assert!(e.reason.contains(&format!("ids[0, 2] = {bad}")), "{e}");
            assert_eq!(mem.bytes(n), &before[..], "dst changed");
            assert!(super::super::ew_testutil::run_graph(&g, false).is_err());
        }
    }

    #[test]
    fn rejects_bad_shapes_and_types() {
        let (g, n, _) = case(16, 2, 3, 8);
        let srcs = g.srcs(n);
        let dst = g.tensor(n);
        assert!(super::check(dst, &srcs).is_ok());
        let mut bad = g.clone();
        bad.tensors[2].ty = ElemType::I64;
        assert!(super::check(dst, &bad.srcs(n)).unwrap_err().reason.contains("i32"));
        let mut bad = g.clone();
        bad.tensors[2].ne = [3, 2, 1, 1];
        assert!(super::check(dst, &bad.srcs(n)).is_err());
        assert!(crate::reference::check(dst, &bad.srcs(n)).is_err());
        let mut bad = g.clone();
        bad.tensors[1].ne[0] = 15;
        assert!(super::check(dst, &bad.srcs(n)).is_err());
    }
}
