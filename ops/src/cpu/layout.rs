//! REPEAT (the source tiled), CONCAT (two sources joined along one dim) and PAD (zeros, or the
//! source wrapped around, before and after each dim): every result element is one source
//! element or zero, copied as bytes. Any element type without blocks (PAD: f32, as ggml's), any
//! source strides; the result's rows are spread over the pool.

use super::ew_rows::{for_row_ranges, row_addr, row_coords};
use crate::error::{ensure, need};
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::{ElemType, Op, Tensor};

/// The padding params `[lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3]` and the circular flag.
pub(crate) fn pad_params(dst: &Tensor) -> ([i64; 8], bool) {
    (std::array::from_fn(|i| dst.param_i32(i) as i64), dst.param_i32(8) != 0)
}

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    ensure(dst.ty.block_size() == 1 && dst.ty == a.ty, dst, srcs, || {
        format!("{} needs one element type without blocks for src0 and dst", dst.op)
    })?;
    ensure(dst.ne.iter().chain(&a.ne).all(|&n| n >= 0), dst, srcs, || {
        "negative size".into()
    })?;
    ensure(dst.nb[0] == dst.ty.type_size(), dst, srcs, || {
        "dst elements are not contiguous".into()
    })?;
    match dst.op {
        Op::Repeat => ensure(
            (0..4).all(|k| a.ne[k] > 0 && dst.ne[k] % a.ne[k] == 0),
            dst,
            srcs,
            || "each dst dim must be a multiple of src0's".into(),
        ),
        Op::Concat => {
            let b = need(dst, srcs, 1)?;
            let d = dst.param_i32(0);
            ensure((0..4).contains(&d), dst, srcs, || format!("dim {d} is not 0..=3"))?;
            let d = d as usize;
            ensure(b.ty == a.ty, dst, srcs, || "src0 and src1 types differ".into())?;
            ensure(
                (0..4).all(|k| {
                    if k == d {
                        dst.ne[k] == a.ne[k] + b.ne[k]
                    } else {
                        a.ne[k] == dst.ne[k] && b.ne[k] == dst.ne[k]
                    }
                }),
                dst,
                srcs,
                || format!("dst must be src0 and src1 joined along dim {d}"),
            )
        }
        Op::Pad => {
            ensure(dst.ty == ElemType::F32, dst, srcs, || "PAD takes and gives f32".into())?;
            let (p, circular) = pad_params(dst);
            ensure(p.iter().all(|&x| x >= 0), dst, srcs, || {
                format!("negative padding {p:?}")
            })?;
            ensure(
                (0..4).all(|k| dst.ne[k] == a.ne[k] + p[2 * k] + p[2 * k + 1]),
                dst,
                srcs,
                || "dst must be src0's shape plus the padding".into(),
            )?;
            ensure(!circular || a.ne.iter().all(|&n| n > 0), dst, srcs, || {
                "circular padding of an empty source".into()
            })
        }
        other => Err(OpError::new(dst, srcs, format!("{other} is not a layout op"))),
    }
}

/// Where result element `i` comes from: `(source index, its coordinates)`, or `None` for a zero.
#[inline(always)]
fn source(
    dst: &Tensor,
    a: &Tensor,
    b: Option<&Tensor>,
    pads: &([i64; 8], bool),
    i: [i64; 4],
) -> Option<(usize, [i64; 4])> {
    match dst.op {
        Op::Repeat => Some((0, std::array::from_fn(|k| i[k] % a.ne[k]))),
        Op::Concat => {
            let d = dst.param_i32(0) as usize;
            if i[d] < a.ne[d] {
                Some((0, i))
            } else {
                let mut j = i;
                j[d] -= a.ne[d];
                b.map(|_| (1, j))
            }
        }
        _ => {
            let (p, circular) = pads;
            let mut j = [0i64; 4];
            for k in 0..4 {
                let x = i[k] - p[2 * k];
                j[k] = if *circular {
                    x.rem_euclid(a.ne[k])
                } else if x < 0 || x >= a.ne[k] {
                    return None;
                } else {
                    x
                };
            }
            Some((0, j))
        }
    }
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let a = need(dst, srcs, 0)?;
    let b = srcs[1];
    let pads = pad_params(dst);
    let es = dst.ty.type_size();
    let n0 = dst.ne[0] as usize;
    let ins: Vec<&Tensor> = [Some(a), b].into_iter().flatten().collect();
    for_row_ranges(ctx, dst, &ins, dst.nrows() as usize, n0, |start, end| {
        for r in start..end {
            let [i1, i2, i3] = row_coords(dst, r);
            let row = row_addr(dst, r);
            for i0 in 0..n0 {
                let i = [i0 as i64, i1 as i64, i2 as i64, i3 as i64];
                let to = (row + i0 * es) as *mut u8;
                // SAFETY: `i` is inside dst and the source coordinates inside their tensor
                // (shapes checked); the task owns dst's row (for_row_ranges).
                unsafe {
                    match source(dst, a, b, &pads, i) {
                        Some((s, j)) => {
                            let t = if s == 0 { a } else { b.expect("CONCAT has src1") };
                            let from = (t.data + t.offset_of(j)) as *const u8;
                            std::ptr::copy(from, to, es);
                        }
                        None => std::ptr::write_bytes(to, 0, es),
                    }
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::rs_testutil::{cpu_vs_ref, Mem};
    use tandem_graph::{ElemType, GraphBuilder};

    /// Params a host could send that the builder never makes: a dim past 3, negative padding,
    /// a quantized type. The check names what is wrong.
    #[test]
    fn bad_params_are_refused_with_a_reason() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[8, 2]);
        let c = g.concat(a, a, 1).unwrap();
        let p = g.pad(a, [1, 0, 0, 0, 0, 0, 0, 0], false).unwrap();
        let q = g.new_tensor(ElemType::Q8_0, &[32, 2]);
        let r = g.repeat(q, [32, 4, 1, 1]).unwrap();
        let mut g = g.build();
        g.tensor_mut(c).set_param_i32(0, 5);
        g.tensor_mut(p).set_param_i32(0, -1);
        for (id, want) in [(c, "dim 5"), (p, "negative padding"), (r, "without blocks")] {
            let err = crate::cpu::check(g.tensor(id), &g.srcs(id)).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn repeat_concat_pad_match_the_reference() {
        for ty in [ElemType::F32, ElemType::F16, ElemType::I32] {
            let mut g = GraphBuilder::new();
            let a = g.new_tensor(ty, &[5, 3, 2, 1]);
            let b = g.new_tensor(ty, &[5, 4, 2, 1]);
            let r = g.repeat(a, [10, 6, 2, 3]).unwrap();
            let c = g.concat(a, b, 1).unwrap();
            let mut m = Mem::new(g.build());
            m.fill_uniform(a, -1.0, 1.0, 1);
            m.fill_uniform(b, -1.0, 1.0, 2);
            for d in [r, c] {
                let (x, y) = cpu_vs_ref(&m, d);
                assert_eq!(x, y, "{ty}");
            }
        }
        for circular in [false, true] {
            let mut g = GraphBuilder::new();
            let base = g.new_tensor(ElemType::F32, &[6, 4, 3]);
            let a = g.transpose(base);
            let p = g.pad(a, [1, 2, 0, 3, 2, 0, 0, 1], circular).unwrap();
            let mut m = Mem::new(g.build());
            m.fill_uniform(base, -1.0, 1.0, 3);
            let (x, y) = cpu_vs_ref(&m, p);
            assert_eq!(x, y, "circular {circular}");
            assert_eq!(x.iter().filter(|&&v| v == 0.0).count() > 0, !circular);
        }
    }
}
