//! SET_ROWS on the GPU (`kernels-hip/src/setrows.hip`): f32 source rows scattered by i32 or i64
//! indices into rows of the destination (a view of the KV cache; the node's result aliases src2,
//! so the write is in place), converted to f32/f16/bf16 with the CPU's rounding or quantized to
//! q8_0/q4_0/q4_1/q5_0/q5_1 with the CPU quantizer's exact bytes. llama.cpp writes its K and V
//! caches this way every step, so keeping it on the GPU avoids staging a whole cache per layer.
//!
//! Differences from the CPU, which fails a graph with an index outside `0..dst.ne1`: the kernel
//! skips such a row (writes nothing for it, never out of bounds). Repeated indices within one
//! plane keep the CPU's rule (the last source row wins): for n > 1 the launcher first builds a
//! per-plane hash table in scratch (clear + mark kernels) that the write kernel consults.
//! f16 sources and iq4_nl destinations stay on the CPU.

use super::convert::{element_count, elements_disjoint, strides, strides_aligned};
use crate::gpu::api::{DevicePtr, LaunchConfig};
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, Accepts, LaunchCtx, Node, Registration};
use crate::gpu::safe::KernelArgs;
use tandem_graph::{ElemType, Op, Tensor};

pub const SET_ROWS_FAMILY: &str = "setrows";
/// Threads per block of every SET_ROWS kernel: their `__launch_bounds__(256)`.
const BLOCK: u32 = 256;
/// Grid cap; every kernel loops grid-stride, so capping only lengthens the loop.
const MAX_GRID: i64 = 65_535;
/// Largest dedup table (all planes) a launch may take from scratch; bigger nodes stay on the CPU.
/// 12 bytes per slot and >= 2 slots per source row: a 512-token prefill of a transposed V cache
/// with 1024 values per token (524,288 one-element rows) needs 12 MiB.
const MAX_TABLE_BYTES: i64 = 256 << 20;
/// Bytes per dedup slot: a u64 key and an i32 row.
const SLOT_BYTES: i64 = 12;

/// `tandem_set_rows_shape`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetRowsShape {
    /// src0 extents `[dst.ne0, n, dst.ne2, dst.ne3]`.
    pub ne: [i64; 4],
    /// src0 byte strides.
    pub nbs: [i64; 4],
    /// Index byte strides.
    pub nbi: [i64; 4],
    /// dst byte strides.
    pub nbd: [i64; 4],
    /// dst.ne1: the valid indices are `0..rows`.
    pub rows: i64,
    /// Index planes along dims 2 and 3 (they divide src0.ne2 and src0.ne3).
    pub idx_ne1: i64,
    pub idx_ne2: i64,
    /// Dedup slots per index plane (a power of two), 0 when no index can repeat.
    pub table: i64,
}
const _: () = assert!(std::mem::size_of::<SetRowsShape>() == 160);

/// The write kernel for rows converted to `dst` and indices of `idx`.
pub fn set_rows_entry(dst: ElemType, idx: ElemType) -> Option<&'static str> {
    use ElemType::*;
    Some(match (dst, idx) {
        (F32, I32) => "tandem_set_rows_f32_i32",
        (F32, I64) => "tandem_set_rows_f32_i64",
        (F16, I32) => "tandem_set_rows_f16_i32",
        (F16, I64) => "tandem_set_rows_f16_i64",
        (BF16, I32) => "tandem_set_rows_bf16_i32",
        (BF16, I64) => "tandem_set_rows_bf16_i64",
        (Q8_0, I32) => "tandem_set_rows_q8_0_i32",
        (Q8_0, I64) => "tandem_set_rows_q8_0_i64",
        (Q4_0, I32) => "tandem_set_rows_q4_0_i32",
        (Q4_0, I64) => "tandem_set_rows_q4_0_i64",
        (Q4_1, I32) => "tandem_set_rows_q4_1_i32",
        (Q4_1, I64) => "tandem_set_rows_q4_1_i64",
        (Q5_0, I32) => "tandem_set_rows_q5_0_i32",
        (Q5_0, I64) => "tandem_set_rows_q5_0_i64",
        (Q5_1, I32) => "tandem_set_rows_q5_1_i32",
        (Q5_1, I64) => "tandem_set_rows_q5_1_i64",
        _ => return None,
    })
}

/// The mark kernel (dedup table fill) for indices of `idx`.
fn mark_entry(idx: ElemType) -> Option<&'static str> {
    match idx {
        ElemType::I32 => Some("tandem_set_rows_mark_i32"),
        ElemType::I64 => Some("tandem_set_rows_mark_i64"),
        _ => None,
    }
}

/// Dedup slots per index plane for `n` source rows: none when one row cannot repeat an index,
/// else the power of two >= 2n (open addressing stays short at half load).
pub fn dedup_slots(n: i64) -> i64 {
    if n <= 1 {
        0
    } else {
        (2 * n as u64).next_power_of_two() as i64
    }
}

/// Scratch bytes of the dedup table for `n` rows and `planes` index planes; `None` past what the
/// kernels address (rows are stored as i32) or on overflow.
fn table_bytes(n: i64, planes: i64) -> Option<i64> {
    if n > i32::MAX as i64 || planes < 0 {
        return None;
    }
    dedup_slots(n).checked_mul(planes)?.checked_mul(SLOT_BYTES)
}

/// Whether the SET_ROWS kernel writing `dst_ty` runs `node` exactly as the CPU would.
pub fn set_rows_ok(node: &Node<'_>, dst_ty: ElemType) -> bool {
    let dst = node.dst;
    let (Some(a), Some(idx), Some(cache)) = (node.src(0), node.src(1), node.src(2)) else {
        return false;
    };
    if dst.ty != dst_ty || a.ty != ElemType::F32 || set_rows_entry(dst_ty, idx.ty).is_none() {
        return false;
    }
    if cache.ty != dst.ty || cache.ne != dst.ne {
        return false;
    }
    if a.ne[0] != dst.ne[0] || a.ne[2] != dst.ne[2] || a.ne[3] != dst.ne[3] || idx.ne[0] != a.ne[1] {
        return false;
    }
    if idx.ne[1] <= 0 || idx.ne[2] <= 0 || idx.ne[3] != 1 {
        return false;
    }
    if a.ne[2] % idx.ne[1] != 0 || a.ne[3] % idx.ne[2] != 0 {
        return false;
    }
    if element_count(a.ne).is_none() || element_count(dst.ne).is_none() || element_count(idx.ne).is_none() {
        return false;
    }
    match table_bytes(a.ne[1], idx.ne[1] * idx.ne[2]) {
        Some(b) if b <= MAX_TABLE_BYTES => {}
        _ => return false,
    }
    let (bs, unit) = (dst_ty.block_size() as i64, dst_ty.type_size());
    if dst.ne[0] % bs != 0 || dst.nb[0] != unit {
        return false;
    }
    // f32 elements need 4-byte strides; f16/bf16 elements and every block (u16 scales) need 2.
    let dst_align = if dst_ty == ElemType::F32 { 4 } else { 2 };
    if !strides_aligned(dst, dst_align, false) || !elements_disjoint(dst, dst.ne[0] / bs, unit) {
        return false;
    }
    if !strides_aligned(a, 4, true) || !strides_aligned(idx, idx.ty.type_size(), true) {
        return false;
    }
    strides(a).is_some() && strides(idx).is_some() && strides(dst).is_some()
}

/// The kernels' shape argument for an accepted node.
pub fn set_rows_shape(a: &Tensor, idx: &Tensor, dst: &Tensor) -> Option<SetRowsShape> {
    Some(SetRowsShape {
        ne: a.ne,
        nbs: strides(a)?,
        nbi: strides(idx)?,
        nbd: strides(dst)?,
        rows: dst.ne[1],
        idx_ne1: idx.ne[1],
        idx_ne2: idx.ne[2],
        table: dedup_slots(a.ne[1]),
    })
}

/// A 1-D grid of 256-thread blocks over `items` work items, capped at `MAX_GRID` blocks.
pub fn flat_launch_config(items: i64) -> LaunchConfig {
    let gx = ((items.max(1) + BLOCK as i64 - 1) / BLOCK as i64).clamp(1, MAX_GRID);
    LaunchConfig {
        grid: [gx as u32, 1, 1],
        block: [BLOCK, 1, 1],
        shared_bytes: 0,
    }
}

/// Work items of the write kernel: one per element (float rows) or block (quantized rows).
pub fn write_items(shape: &SetRowsShape, dst_ty: ElemType) -> i64 {
    let units = shape.ne[0] / dst_ty.block_size() as i64;
    units * shape.ne[1] * shape.ne[2] * shape.ne[3]
}

fn accepts_set_rows<const D: u32>(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    let Some(ty) = ElemType::from_ggml(D) else {
        return false;
    };
    next.is_none() && set_rows_ok(node, ty)
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch_set_rows(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    const CALL: &str = "launch_set_rows";
    let dst = node.dst;
    let (Some(a), Some(idx)) = (node.src(0), node.src(1)) else {
        return Err(launch_error(CALL, "SET_ROWS needs rows and indices"));
    };
    let entry = set_rows_entry(dst.ty, idx.ty)
        .ok_or_else(|| launch_error(CALL, format!("no kernel for {} rows by {}", dst.ty, idx.ty)))?;
    let shape = set_rows_shape(a, idx, dst).ok_or_else(|| launch_error(CALL, "strides out of range"))?;
    let items = write_items(&shape, dst.ty);
    if items <= 0 || shape.rows <= 0 {
        return Ok(());
    }
    let (mut keys, mut lasts) = (DevicePtr(0), DevicePtr(0));
    if shape.table > 0 {
        let slots = shape.table * shape.idx_ne1 * shape.idx_ne2;
        let bytes = table_bytes(shape.ne[1], shape.idx_ne1 * shape.idx_ne2)
            .ok_or_else(|| launch_error(CALL, "dedup table too large"))?;
        keys = ctx.scratch.get(bytes as usize)?;
        lasts = keys.offset(slots as usize * 8);
        let clear = ctx.kernels.function(SET_ROWS_FAMILY, "tandem_set_rows_clear")?;
        let mut args = KernelArgs::new();
        args.push(keys).push(lasts).push(slots);
        // SAFETY: the parameter list is (u64*, i32*, i64); scratch holds `slots` u64 keys and
        // `slots` i32 rows from `keys` on, 256-byte aligned, and stays valid for queued work.
        unsafe { ctx.stream.launch(&clear, flat_launch_config(slots), &mut args) }.map_err(KernelError::Gpu)?;
        let mark_name = mark_entry(idx.ty).ok_or_else(|| launch_error(CALL, "bad index type"))?;
        let mark = ctx.kernels.function(SET_ROWS_FAMILY, mark_name)?;
        let mut args = KernelArgs::new();
        args.push(dptr(idx)).push(keys).push(lasts).push(shape);
        let marks = shape.ne[1] * shape.idx_ne1 * shape.idx_ne2;
        // SAFETY: the parameter list is (const char*, u64*, i32*, tandem_set_rows_shape); the
        // predicate checked the index tensor's shape and strides; the table is as above.
        unsafe { ctx.stream.launch(&mark, flat_launch_config(marks), &mut args) }.map_err(KernelError::Gpu)?;
    }
    let f = ctx.kernels.function(SET_ROWS_FAMILY, entry)?;
    let mut args = KernelArgs::new();
    args.push(dptr(a))
        .push(dptr(idx))
        .push(dptr(dst))
        .push(keys)
        .push(lasts)
        .push(shape);
    // SAFETY: the parameter list is (const char*, const char*, char*, const u64*, const i32*,
    // tandem_set_rows_shape); the predicate checked shapes, strides and block geometry against
    // the tensors, whose device memory the caller vouches for; indices are range-checked in the
    // kernel, and the table (when `shape.table` > 0) was filled by the launches above.
    unsafe { ctx.stream.launch(&f, flat_launch_config(items), &mut args) }.map_err(KernelError::Gpu)
}

const fn set_rows(name: &'static str, accepts: Accepts) -> Registration {
    Registration {
        name,
        op: Op::SetRows,
        fuses: None,
        accepts,
        launch: launch_set_rows,
    }
}

pub const REGISTRATIONS: &[Registration] = &[
    set_rows("hip.set_rows_f32", accepts_set_rows::<{ ElemType::F32 as u32 }>),
    set_rows("hip.set_rows_f16", accepts_set_rows::<{ ElemType::F16 as u32 }>),
    set_rows("hip.set_rows_bf16", accepts_set_rows::<{ ElemType::BF16 as u32 }>),
    set_rows("hip.set_rows_q8_0", accepts_set_rows::<{ ElemType::Q8_0 as u32 }>),
    set_rows("hip.set_rows_q4_0", accepts_set_rows::<{ ElemType::Q4_0 as u32 }>),
    set_rows("hip.set_rows_q4_1", accepts_set_rows::<{ ElemType::Q4_1 as u32 }>),
    set_rows("hip.set_rows_q5_0", accepts_set_rows::<{ ElemType::Q5_0 as u32 }>),
    set_rows("hip.set_rows_q5_1", accepts_set_rows::<{ ElemType::Q5_1 as u32 }>),
];

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::{Graph, GraphBuilder, TensorId};

    /// The destination types of the harness's SET_ROWS cases (tools/src/cases/rows.rs).
    const HARNESS_TYPES: [ElemType; 9] = [
        ElemType::F32,
        ElemType::F16,
        ElemType::BF16,
        ElemType::Q8_0,
        ElemType::Q4_0,
        ElemType::Q4_1,
        ElemType::Q5_0,
        ElemType::Q5_1,
        ElemType::IQ4NL,
    ];

    fn accepted_by(g: &Graph, id: TensorId) -> Vec<&'static str> {
        let n = Node::of(g, id);
        REGISTRATIONS
            .iter()
            .filter(|r| r.op == n.dst.op && (r.accepts)(&n, None))
            .map(|r| r.name)
            .collect()
    }

    /// The harness's case: `n` f32 rows per batch written into `[ne0, 16, b2, b3]` through
    /// indices `[n, c1, c2]`.
    fn harness_case(ty: ElemType, idx_ty: ElemType, ne0: i64, n: i64, b: [i64; 2], c: [i64; 2]) -> (Graph, TensorId) {
        let mut g = GraphBuilder::new();
        let dst = g.new_tensor(ty, &[ne0, 16, b[0], b[1]]);
        let src = g.new_tensor(ElemType::F32, &[ne0, n, b[0], b[1]]);
        let idx = g.new_tensor(idx_ty, &[n, c[0], c[1]]);
        let d = g.set_rows(dst, src, idx).unwrap();
        (g.build(), d)
    }

    #[test]
    fn every_harness_case_finds_exactly_its_registration() {
        let mut accepted = 0;
        let mut total = 0;
        for ty in HARNESS_TYPES {
            for idx_ty in [ElemType::I32, ElemType::I64] {
                for ne0 in [64, 256] {
                    for (n, b, c) in [
                        (1, [1, 1], [1, 1]),
                        (5, [1, 1], [1, 1]),
                        (7, [2, 1], [1, 1]),
                        (4, [2, 3], [2, 3]),
                        (16, [3, 2], [3, 1]),
                    ] {
                        total += 1;
                        let (g, d) = harness_case(ty, idx_ty, ne0, n, b, c);
                        let got = accepted_by(&g, d);
                        if ty == ElemType::IQ4NL {
                            assert!(got.is_empty(), "{ty} {idx_ty} {ne0} {n}");
                            continue;
                        }
                        assert_eq!(
                            got,
                            vec![format!("hip.set_rows_{}", ty.name())],
                            "{ty} {idx_ty} {ne0} {n}"
                        );
                        accepted += 1;
                        let s = set_rows_shape(
                            g.tensor(g.tensor(d).src[0].unwrap()),
                            g.tensor(g.tensor(d).src[1].unwrap()),
                            g.tensor(d),
                        )
                        .unwrap();
                        assert_eq!(s.table, dedup_slots(n));
                    }
                }
            }
        }
        assert_eq!((accepted, total), (160, 180));
    }

    #[test]
    fn entries_exist_for_every_registration() {
        let fam = tandem_kernels_hip::find(SET_ROWS_FAMILY).unwrap();
        for r in REGISTRATIONS {
            let ty = ElemType::from_name(r.name.strip_prefix("hip.set_rows_").unwrap()).unwrap();
            for idx in [ElemType::I32, ElemType::I64] {
                let e = set_rows_entry(ty, idx).unwrap();
                assert!(fam.entries.contains(&e), "{e}");
                assert!(fam.entries.contains(&mark_entry(idx).unwrap()));
            }
            assert!(set_rows_entry(ty, ElemType::I16).is_none());
        }
        assert!(fam.entries.contains(&"tandem_set_rows_clear"));
        assert!(set_rows_entry(ElemType::IQ4NL, ElemType::I64).is_none());
        let names: std::collections::HashSet<_> = REGISTRATIONS.iter().map(|r| r.name).collect();
        assert_eq!(names.len(), REGISTRATIONS.len());
    }

    #[test]
    fn declines_what_the_kernels_cannot_do_exactly() {
        let f32_ok = accepts_set_rows::<{ ElemType::F32 as u32 }>;
        // A fused next node.
        let (g, d) = harness_case(ElemType::F32, ElemType::I64, 64, 5, [1, 1], [1, 1]);
        assert!(f32_ok(&Node::of(&g, d), None));
        assert!(!f32_ok(&Node::of(&g, d), Some(&Node::of(&g, d))));
        // f16 source rows.
        let mut b = GraphBuilder::new();
        let dst = b.new_tensor(ElemType::F16, &[64, 16]);
        let src = b.new_tensor(ElemType::F16, &[64, 3]);
        let idx = b.new_tensor(ElemType::I64, &[3]);
        let d = b.set_rows(dst, src, idx).unwrap();
        assert!(accepted_by(&b.build(), d).is_empty());
        // A destination type without a kernel, and quantized rows that are not whole blocks.
        let (mut g, d) = harness_case(ElemType::F32, ElemType::I32, 64, 5, [1, 1], [1, 1]);
        for t in [d, g.tensor(d).src[2].unwrap()] {
            g.tensor_mut(t).ty = ElemType::Q4K;
        }
        assert!(accepted_by(&g, d).is_empty());
        let (g, d) = harness_case(ElemType::Q8_0, ElemType::I32, 48, 5, [1, 1], [1, 1]);
        assert!(accepted_by(&g, d).is_empty());
        // Overlapping destination rows; misaligned f32 row strides; blocks not back to back.
        let (mut g, d) = harness_case(ElemType::F32, ElemType::I32, 64, 5, [1, 1], [1, 1]);
        g.tensor_mut(d).nb[1] = 128;
        assert!(accepted_by(&g, d).is_empty());
        let (mut g, d) = harness_case(ElemType::F16, ElemType::I32, 64, 5, [1, 1], [1, 1]);
        let a = g.tensor(d).src[0].unwrap();
        g.tensor_mut(a).nb[1] = 258;
        assert!(accepted_by(&g, d).is_empty());
        let (mut g, d) = harness_case(ElemType::Q4_0, ElemType::I32, 64, 5, [1, 1], [1, 1]);
        g.tensor_mut(d).nb[0] = 20;
        assert!(accepted_by(&g, d).is_empty());
        // Index shapes outside ggml's broadcast rules, and a dst that is not src2's shape.
        let (mut g, d) = harness_case(ElemType::F32, ElemType::I64, 64, 4, [2, 3], [2, 3]);
        let i = g.tensor(d).src[1].unwrap();
        g.tensor_mut(i).ne[1] = 4;
        assert!(accepted_by(&g, d).is_empty());
        let (mut g, d) = harness_case(ElemType::F32, ElemType::I64, 64, 4, [2, 3], [2, 3]);
        let i = g.tensor(d).src[1].unwrap();
        g.tensor_mut(i).ne[3] = 2;
        assert!(accepted_by(&g, d).is_empty());
        let (mut g, d) = harness_case(ElemType::F32, ElemType::I64, 64, 4, [2, 3], [2, 3]);
        let i = g.tensor(d).src[1].unwrap();
        g.tensor_mut(i).nb[0] = 4; // i64 indices 4 bytes apart
        assert!(accepted_by(&g, d).is_empty());
        // A dedup table over the scratch cap.
        let (g, d) = harness_case(ElemType::F32, ElemType::I64, 1, 1 << 24, [1, 1], [1, 1]);
        assert!(accepted_by(&g, d).is_empty());
    }

    #[test]
    fn kv_cache_views_fill_the_shape() {
        // Columns 4..12 of an f16 cache [16, 12, 3, 2]; rows permuted out of a wider tensor;
        // transposed i32 indices (one plane per dim-2 batch).
        let mut g = GraphBuilder::new();
        let cache = g.new_tensor(ElemType::F16, &[16, 12, 3, 2]);
        let a = g.view(cache, &[8, 12, 3, 2], &[32, 384, 1152], 8).unwrap();
        let wide = g.new_tensor(ElemType::F32, &[8, 3, 5, 2]);
        let b = g.permute(wide, [0, 2, 1, 3]).unwrap();
        let ib = g.new_tensor(ElemType::I32, &[3, 5]);
        let c = g.transpose(ib);
        let d = g.set_rows(a, b, c).unwrap();
        let g = g.build();
        assert_eq!(accepted_by(&g, d), vec!["hip.set_rows_f16"]);
        let t = g.tensor(d);
        // The result is the cache view itself: same base tensor, offset and strides.
        assert_eq!(t.view_src, Some(cache));
        assert_eq!((t.view_offs, t.nb), (g.tensor(a).view_offs, g.tensor(a).nb));
        let s = set_rows_shape(g.tensor(b), g.tensor(c), t).unwrap();
        assert_eq!(s.ne, [8, 5, 3, 2]);
        assert_eq!(s.nbs, [4, 96, 32, 480]);
        assert_eq!(s.nbi, [12, 4, 60, 60]);
        assert_eq!(s.nbd, [2, 32, 384, 1152]);
        assert_eq!((s.rows, s.idx_ne1, s.idx_ne2, s.table), (12, 3, 1, 16));
        assert_eq!(write_items(&s, ElemType::F16), 8 * 5 * 3 * 2);
        // The transposed V cache of llama.cpp: one-element rows, many of them.
        let mut g = GraphBuilder::new();
        let v = g.new_tensor(ElemType::F16, &[1, 4096 * 1024]);
        let src = g.new_tensor(ElemType::F32, &[1, 512 * 1024]);
        let idx = g.new_tensor(ElemType::I64, &[512 * 1024]);
        let d = g.set_rows(v, src, idx).unwrap();
        let g = g.build();
        assert_eq!(accepted_by(&g, d), vec!["hip.set_rows_f16"]);
        assert_eq!(table_bytes(512 * 1024, 1), Some(12 << 20));
    }

    #[test]
    fn dedup_tables_and_grids_stay_in_limits() {
        assert_eq!(dedup_slots(1), 0);
        assert_eq!(dedup_slots(0), 0);
        assert_eq!(dedup_slots(2), 4);
        assert_eq!(dedup_slots(5), 16);
        assert_eq!(dedup_slots(16), 32);
        assert_eq!(table_bytes(1, 6), Some(0));
        assert_eq!(table_bytes(4, 6), Some(8 * 6 * 12));
        assert_eq!(table_bytes(i64::MAX / 2, 1 << 20), None);
        for (items, gx) in [(0, 1), (1, 1), (256, 1), (257, 2), (1024, 4), (1 << 40, 65_535)] {
            let c = flat_launch_config(items);
            assert_eq!((c.grid, c.block), ([gx, 1, 1], [256, 1, 1]), "{items}");
        }
        let s = SetRowsShape {
            ne: [4096, 3, 2, 1],
            ..Default::default()
        };
        assert_eq!(write_items(&s, ElemType::Q8_0), 128 * 6);
        assert_eq!(write_items(&s, ElemType::BF16), 4096 * 6);
    }
}
