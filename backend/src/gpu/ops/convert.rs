//! GET_ROWS on the GPU (`kernels-hip/src/getrows.hip`): rows of f32, i32, f16, bf16 or a weight
//! quantization gathered by i32 indices into f32 (i32 for i32) rows, with the values the CPU
//! dequantizers give bit for bit. The helpers shared with the copy registrations (stride
//! checks, launch geometry) live here too.
//!
//! An index outside `0..src0.ne[1]` makes the kernel write a zero row (the CPU fails the graph
//! instead); nothing is ever read out of bounds.

use crate::gpu::api::LaunchConfig;
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, LaunchCtx, Node, Registration};
use crate::gpu::safe::KernelArgs;
use tandem_graph::{ElemType, Op, Tensor};

pub const GET_ROWS_FAMILY: &str = "getrows";
/// Threads per block of the row kernels (GET_ROWS and the float copies): their
/// `__launch_bounds__(256)`.
const ROW_BLOCK: u32 = 256;
/// Grid cap in x and y; the kernels' loops are grid-stride, so capping only lengthens them.
const MAX_GRID: i64 = 65_535;

/// `tandem_get_rows_shape`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetRowsShape {
    /// dst extents `[src0.ne0, n, src0.ne2, src0.ne3]`.
    pub ne: [i64; 4],
    /// src0 byte strides.
    pub nbs: [i64; 4],
    /// Index byte strides.
    pub nbi: [i64; 4],
    /// dst byte strides.
    pub nbd: [i64; 4],
    /// `src0.ne[1]`: the valid indices are `0..rows`.
    pub rows: i64,
}
const _: () = assert!(std::mem::size_of::<GetRowsShape>() == 136);

/// Byte strides as the kernels take them; `None` if one does not fit an i64.
pub(crate) fn strides(t: &Tensor) -> Option<[i64; 4]> {
    let mut s = [0i64; 4];
    for (d, &n) in s.iter_mut().zip(&t.nb) {
        *d = i64::try_from(n).ok()?;
    }
    Some(s)
}

/// Elements (or blocks) of the tensor, `None` for a negative extent or an i64 overflow.
pub(crate) fn element_count(ne: [i64; 4]) -> Option<i64> {
    ne.iter()
        .try_fold(1i64, |acc, &n| if n < 0 { None } else { acc.checked_mul(n) })
}

/// Every stride of dims 1..3 is a multiple of `align` (dim 0 too when `with_dim0`).
pub(crate) fn strides_aligned(t: &Tensor, align: usize, with_dim0: bool) -> bool {
    let first = if with_dim0 { 0 } else { 1 };
    t.nb[first..].iter().all(|&n| n.is_multiple_of(align))
}

/// No two elements of `t` share a byte, for elements of `elem_bytes` bytes and `units` of
/// them along dim 0 (blocks for quantized rows): dims of extent > 1 sorted by stride each step
/// over everything the smaller ones span. Sufficient, not necessary; kernels that write `t`
/// from many threads need it so no two threads write one byte.
pub(crate) fn elements_disjoint(t: &Tensor, units: i64, elem_bytes: usize) -> bool {
    let mut dims: Vec<(usize, i64)> = Vec::with_capacity(4);
    if units > 1 {
        dims.push((t.nb[0], units));
    }
    for i in 1..4 {
        if t.ne[i] > 1 {
            dims.push((t.nb[i], t.ne[i]));
        }
    }
    dims.sort_unstable();
    let mut span = elem_bytes as u128;
    for (nb, n) in dims {
        if (nb as u128) < span {
            return false;
        }
        span += (n as u128 - 1) * nb as u128;
    }
    true
}

/// Grid of the row kernels for dst extents `ne`: x covers dim 0 in blocks of 256 threads, y the
/// rows (dims 1..3).
pub fn launch_config(ne: [i64; 4]) -> LaunchConfig {
    let rows = ne[1].max(1) * ne[2].max(1) * ne[3].max(1);
    let gx = ((ne[0].max(1) + ROW_BLOCK as i64 - 1) / ROW_BLOCK as i64).min(MAX_GRID);
    LaunchConfig {
        grid: [gx as u32, rows.min(MAX_GRID) as u32, 1],
        block: [ROW_BLOCK, 1, 1],
        shared_bytes: 0,
    }
}

/// The kernel entry gathering rows of `ty`.
pub fn get_rows_entry(ty: ElemType) -> Option<&'static str> {
    Some(match ty {
        ElemType::F32 | ElemType::I32 => "tandem_get_rows_b32",
        ElemType::F16 => "tandem_get_rows_f16",
        ElemType::BF16 => "tandem_get_rows_bf16",
        ElemType::Q4_0 => "tandem_get_rows_q4_0",
        ElemType::Q4_1 => "tandem_get_rows_q4_1",
        ElemType::Q5_0 => "tandem_get_rows_q5_0",
        ElemType::Q5_1 => "tandem_get_rows_q5_1",
        ElemType::Q8_0 => "tandem_get_rows_q8_0",
        ElemType::Q2K => "tandem_get_rows_q2_K",
        ElemType::Q3K => "tandem_get_rows_q3_K",
        ElemType::Q4K => "tandem_get_rows_q4_K",
        ElemType::Q5K => "tandem_get_rows_q5_K",
        ElemType::Q6K => "tandem_get_rows_q6_K",
        ElemType::IQ4NL => "tandem_get_rows_iq4_nl",
        _ => return None,
    })
}

/// Alignment the kernel needs of src0's row strides: 4 for 4-byte elements, 2 for everything
/// else (f16/bf16 and every block starts with or holds u16 scales).
fn src_align(ty: ElemType) -> usize {
    if ty.type_size() == 4 && ty.block_size() == 1 {
        4
    } else {
        2
    }
}

/// Whether the GET_ROWS kernel of `ty` runs `node` exactly as the CPU would.
pub fn get_rows_ok(node: &Node<'_>, ty: ElemType) -> bool {
    let dst = node.dst;
    let (Some(a), Some(idx)) = (node.src(0), node.src(1)) else {
        return false;
    };
    if a.ty != ty || get_rows_entry(ty).is_none() {
        return false;
    }
    let out_ty = if ty == ElemType::I32 {
        ElemType::I32
    } else {
        ElemType::F32
    };
    if dst.ty != out_ty || idx.ty != ElemType::I32 {
        return false;
    }
    if a.ne[2] != idx.ne[1] || a.ne[3] != idx.ne[2] || idx.ne[3] != 1 {
        return false;
    }
    if dst.ne != [a.ne[0], idx.ne[0], idx.ne[1], idx.ne[2]] {
        return false;
    }
    if element_count(a.ne).is_none() || element_count(dst.ne).is_none() {
        return false;
    }
    if a.ne[0] % ty.block_size() as i64 != 0 || !a.is_contiguous_rows() {
        return false;
    }
    if !strides_aligned(a, src_align(ty), false) || !strides_aligned(idx, 4, true) {
        return false;
    }
    if dst.nb[0] != 4 || !strides_aligned(dst, 4, true) || !elements_disjoint(dst, dst.ne[0], 4) {
        return false;
    }
    strides(a).is_some() && strides(idx).is_some() && strides(dst).is_some()
}

/// The kernel's shape argument for an accepted node.
pub fn get_rows_shape(a: &Tensor, idx: &Tensor, dst: &Tensor) -> Option<GetRowsShape> {
    Some(GetRowsShape {
        ne: dst.ne,
        nbs: strides(a)?,
        nbi: strides(idx)?,
        nbd: strides(dst)?,
        rows: a.ne[1],
    })
}

fn accepts_get_rows<const T: u32>(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    let Some(ty) = ElemType::from_ggml(T) else {
        return false;
    };
    next.is_none() && get_rows_ok(node, ty)
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch_get_rows(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    const CALL: &str = "launch_get_rows";
    let (Some(a), Some(idx)) = (node.src(0), node.src(1)) else {
        return Err(launch_error(CALL, "GET_ROWS needs two sources"));
    };
    let entry = get_rows_entry(a.ty).ok_or_else(|| launch_error(CALL, format!("no kernel for {}", a.ty)))?;
    let shape = get_rows_shape(a, idx, node.dst).ok_or_else(|| launch_error(CALL, "strides out of range"))?;
    if element_count(shape.ne).unwrap_or(0) == 0 {
        return Ok(());
    }
    let f = ctx.kernels.function(GET_ROWS_FAMILY, entry)?;
    let mut args = KernelArgs::new();
    args.push(dptr(a)).push(dptr(idx)).push(dptr(node.dst)).push(shape);
    // SAFETY: the parameter list is (const char*, const char*, char*, tandem_get_rows_shape);
    // the predicate checked the shapes and strides against the tensors, whose device memory
    // the caller vouches for; indices are bounds-checked in the kernel.
    unsafe { ctx.stream.launch(&f, launch_config(shape.ne), &mut args) }.map_err(KernelError::Gpu)
}

const fn get_rows(name: &'static str, accepts: crate::gpu::registry::Accepts) -> Registration {
    Registration {
        name,
        op: Op::GetRows,
        fuses: None,
        accepts,
        launch: launch_get_rows,
    }
}

pub const REGISTRATIONS: &[Registration] = &[
    get_rows("hip.get_rows_f32", accepts_get_rows::<{ ElemType::F32 as u32 }>),
    get_rows("hip.get_rows_i32", accepts_get_rows::<{ ElemType::I32 as u32 }>),
    get_rows("hip.get_rows_f16", accepts_get_rows::<{ ElemType::F16 as u32 }>),
    get_rows("hip.get_rows_bf16", accepts_get_rows::<{ ElemType::BF16 as u32 }>),
    get_rows("hip.get_rows_q4_0", accepts_get_rows::<{ ElemType::Q4_0 as u32 }>),
    get_rows("hip.get_rows_q4_1", accepts_get_rows::<{ ElemType::Q4_1 as u32 }>),
    get_rows("hip.get_rows_q5_0", accepts_get_rows::<{ ElemType::Q5_0 as u32 }>),
    get_rows("hip.get_rows_q5_1", accepts_get_rows::<{ ElemType::Q5_1 as u32 }>),
    get_rows("hip.get_rows_q8_0", accepts_get_rows::<{ ElemType::Q8_0 as u32 }>),
    get_rows("hip.get_rows_q2_K", accepts_get_rows::<{ ElemType::Q2K as u32 }>),
    get_rows("hip.get_rows_q3_K", accepts_get_rows::<{ ElemType::Q3K as u32 }>),
    get_rows("hip.get_rows_q4_K", accepts_get_rows::<{ ElemType::Q4K as u32 }>),
    get_rows("hip.get_rows_q5_K", accepts_get_rows::<{ ElemType::Q5K as u32 }>),
    get_rows("hip.get_rows_q6_K", accepts_get_rows::<{ ElemType::Q6K as u32 }>),
    get_rows("hip.get_rows_iq4_nl", accepts_get_rows::<{ ElemType::IQ4NL as u32 }>),
];

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::{Graph, GraphBuilder, TensorId};

    const TYPES: [ElemType; 15] = [
        ElemType::F32,
        ElemType::I32,
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

    /// GET_ROWS of a `[ne0, 10, 2, 3]` table with `[4, 2, 3]` indices.
    fn gather(ty: ElemType, ne0: i64) -> (Graph, TensorId) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ty, &[ne0, 10, 2, 3]);
        let b = g.new_tensor(ElemType::I32, &[4, 2, 3]);
        let d = g.get_rows(a, b).unwrap();
        (g.build(), d)
    }

    /// The registrations that accept `id`.
    fn accepted_by(g: &Graph, id: TensorId) -> Vec<&'static str> {
        let n = Node::of(g, id);
        REGISTRATIONS
            .iter()
            .filter(|r| r.op == n.dst.op && (r.accepts)(&n, None))
            .map(|r| r.name)
            .collect()
    }

    #[test]
    fn each_type_has_exactly_its_registration() {
        for ty in TYPES {
            let ne0 = 2 * ty.block_size() as i64;
            let (g, d) = gather(ty, ne0);
            assert_eq!(accepted_by(&g, d), vec![format!("hip.get_rows_{}", ty.name())], "{ty}");
            let entry = get_rows_entry(ty).unwrap();
            let fam = tandem_kernels_hip::find(GET_ROWS_FAMILY).unwrap();
            assert!(fam.entries.contains(&entry), "{entry}");
        }
        assert_eq!(REGISTRATIONS.len(), TYPES.len());
        for ty in [ElemType::Q8K, ElemType::Q8_1, ElemType::F64] {
            assert!(get_rows_entry(ty).is_none());
        }
    }

    #[test]
    fn declines_what_the_kernel_cannot_do_exactly() {
        // Wrong dst type, and a fused next node.
        let (mut g, d) = gather(ElemType::F32, 8);
        assert!(!accepts_get_rows::<{ ElemType::F32 as u32 }>(
            &Node::of(&g, d),
            Some(&Node::of(&g, d))
        ));
        g.tensor_mut(d).ty = ElemType::F16;
        assert!(accepted_by(&g, d).is_empty());
        // i64 indices.
        let (mut g, d) = gather(ElemType::Q8_0, 64);
        let idx = g.tensor(d).src[1].unwrap();
        g.tensor_mut(idx).ty = ElemType::I64;
        assert!(accepted_by(&g, d).is_empty());
        // Quantized rows whose blocks are not back to back.
        let (mut g, d) = gather(ElemType::Q4_0, 64);
        let a = g.tensor(d).src[0].unwrap();
        g.tensor_mut(a).nb[0] = 20;
        assert!(accepted_by(&g, d).is_empty());
        // A row stride that breaks the f32 alignment; a dst whose rows overlap.
        let (mut g, d) = gather(ElemType::F32, 8);
        let a = g.tensor(d).src[0].unwrap();
        g.tensor_mut(a).nb[1] = 30;
        assert!(accepted_by(&g, d).is_empty());
        let (mut g, d) = gather(ElemType::F32, 8);
        g.tensor_mut(d).nb[1] = 16;
        assert!(accepted_by(&g, d).is_empty());
        // Batch dims that do not match the indices.
        let (mut g, d) = gather(ElemType::F16, 8);
        g.tensor_mut(d).ne[2] = 1;
        assert!(accepted_by(&g, d).is_empty());
    }

    #[test]
    fn strided_tables_and_transposed_indices_are_accepted() {
        let mut g = GraphBuilder::new();
        let base = g.new_tensor(ElemType::F32, &[20, 6, 3]);
        let a = g.view(base, &[13, 3, 3], &[160, 480], 8).unwrap();
        let ib = g.new_tensor(ElemType::I32, &[3, 4]);
        let b = g.transpose(ib);
        let d = g.get_rows(a, b).unwrap();
        let g = g.build();
        assert_eq!(accepted_by(&g, d), vec!["hip.get_rows_f32"]);
        let (ta, ti, td) = (g.tensor(a), g.tensor(b), g.tensor(d));
        let s = get_rows_shape(ta, ti, td).unwrap();
        assert_eq!(s.ne, [13, 4, 3, 1]);
        assert_eq!(s.nbs, [4, 160, 480, 1440]);
        assert_eq!(s.nbi, [12, 4, 48, 48]);
        assert_eq!(s.nbd, [4, 52, 208, 624]);
        assert_eq!(s.rows, 3);
        let c = launch_config(s.ne);
        assert_eq!((c.grid, c.block), ([1, 12, 1], [256, 1, 1]));
        assert_eq!(launch_config([100_000_000, 1, 1, 1]).grid, [65_535, 1, 1]);
        assert_eq!(launch_config([4096, 1 << 20, 1, 1]).grid, [16, 65_535, 1]);
    }

    #[test]
    fn disjointness_and_alignment_helpers() {
        let t = Tensor::new(ElemType::F32, &[5, 4, 3]);
        assert!(elements_disjoint(&t, 5, 4));
        let mut p = t.clone();
        p.nb.swap(1, 2);
        p.ne.swap(1, 2);
        assert!(elements_disjoint(&p, 5, 4));
        let mut o = t.clone();
        o.nb[2] = 40; // planes 40 bytes apart but 80 bytes long
        assert!(!elements_disjoint(&o, 5, 4));
        let mut bc = t.clone();
        bc.nb[1] = 0;
        assert!(!elements_disjoint(&bc, 5, 4));
        let q = Tensor::new(ElemType::Q8_0, &[32, 3]);
        assert!(elements_disjoint(&q, 1, 34));
        assert!(strides_aligned(&q, 2, true) && !strides_aligned(&q, 4, false));
        assert_eq!(element_count([2, 3, 4, 5]), Some(120));
        assert_eq!(element_count([2, -1, 4, 5]), None);
        assert_eq!(element_count([i64::MAX, 2, 1, 1]), None);
    }
}
