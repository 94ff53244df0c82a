//! ADD_ID in f64: `dst[:, i1, i2] = src0[:, i1, i2] + src1[:, ids[i1, i2]]`, ids checked first.

use crate::data::{indices, read_f64, read_index, write_f64};
use crate::error::{ensure, need};
use crate::{OpError, Srcs};
use tandem_graph::{ElemType, Tensor};

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (a, b, ids) = (need(dst, srcs, 0)?, need(dst, srcs, 1)?, need(dst, srcs, 2)?);
    ensure([dst.ty, a.ty, b.ty] == [ElemType::F32; 3], dst, srcs, || {
        "only f32".into()
    })?;
    ensure(ids.ty == ElemType::I32, dst, srcs, || "ids must be i32".into())?;
    ensure(
        [dst, a, b, ids].iter().all(|t| t.ne.iter().all(|&n| n >= 0)),
        dst,
        srcs,
        || "negative size".into(),
    )?;
    ensure(
        dst.ne == a.ne && b.ne[0] == a.ne[0] && ids.ne[0] == a.ne[1] && ids.ne[1] == a.ne[2],
        dst,
        srcs,
        || "shapes do not fit".into(),
    )
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let (a, b, ids) = (need(dst, srcs, 0)?, need(dst, srcs, 1)?, need(dst, srcs, 2)?);
    for [i1, i2, _, _] in indices([ids.ne[0], ids.ne[1], 1, 1]) {
        // SAFETY: within ids' shape.
        let id = unsafe { read_index(ids, [i1, i2, 0, 0]) };
        if id < 0 || id >= b.ne[1] {
            return Err(OpError::new(
                dst,
                srcs,
                format!("ids[{i1}, {i2}] = {id} is not a row of src1"),
            ));
        }
    }
    for i in indices(dst.ne) {
        // SAFETY: i within dst/src0; the id was validated against src1's rows.
        unsafe {
            let id = read_index(ids, [i[1], i[2], 0, 0]);
            let v = read_f64(a, i) + read_f64(b, [i[0], id, 0, 0]);
            write_f64(dst, i, v);
        }
    }
    Ok(())
}
