//! ROPE registrations (`kernels-hip/src/rope.hip`): normal and neox modes, frequency factors,
//! YaRN, partial rotation with ggml's rotation offset (`op_params[15]`), f32 or f16 rows with any
//! element-aligned strides, in place. Multi-section and vision modes are declined (the CPU op
//! refuses them too). The YaRN ramp ends are computed here exactly as tandem's CPU op computes
//! them (in f32: their floor/ceil make the rounding matter).

use super::binary::{elements_disjoint, well_formed};
use crate::gpu::api::{DevicePtr, LaunchConfig};
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, LaunchCtx, Node, Registration};
use crate::gpu::safe::KernelArgs;
use tandem_graph::op::{ROPE_TYPE_NEOX, ROPE_TYPE_NORMAL};
use tandem_graph::params::RopeParams;
use tandem_graph::{ElemType, Op, Tensor};

pub const REGISTRATIONS: &[Registration] = &[
    ROPE_SET_ROWS,
    Registration {
        name: "hip.rope_f32",
        op: Op::Rope,
        fuses: None,
        accepts: accepts_f32,
        launch: launch_rope,
    },
    Registration {
        name: "hip.rope_f16",
        op: Op::Rope,
        fuses: None,
        accepts: accepts_f16,
        launch: launch_rope,
    },
];

/// A token's K rotated and stored into the KV cache in one launch: ROPE (f32, one token,
/// contiguous), a view of its result as one row, and the SET_ROWS of that row into an f16 or f32
/// cache (`exec::rope_set_rows_chain` finds them); the rotated values go to both.
pub const ROPE_SET_ROWS: Registration = Registration {
    name: "hip.rope_set_rows",
    op: Op::Rope,
    fuses: Some(Op::SetRows),
    accepts: accepts_rope_set_rows,
    launch: launch_rope_set_rows,
};

const FAMILY: &str = "rope";
const BLOCK: u32 = 256;
/// `op_params` word holding the first rotated dimension (`ggml_rope_set_offset`).
const N_OFFS_PARAM: usize = 15;
/// Largest `n_dims / 2` the kernel's shared cos/sin table takes (32 KiB, below every device's
/// 48 KiB of shared memory per block without opt-in).
const MAX_PAIRS: i64 = 4096;
/// Row elements (copies and pairs) one block aims at per token, to size the head runs: one a
/// thread, so that a decode token's threads each read their unit while the block builds its
/// angle table (a block of 1024 units, four a thread one after the other, took 4.2 µs for a
/// token's 32 heads of 128 on an H100, in a decode step's kernel trace).
const UNITS_PER_BLOCK: i64 = BLOCK as i64;
const MAX_GRID: i64 = 65_535;

/// `tandem_rope_shape` in rope.hip.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RopeShape {
    pub ne: [i64; 4],
    pub nbs: [i64; 4],
    pub nbd: [i64; 4],
    pub nbp: i64,
    pub nbf: i64,
    pub freq_base: f64,
    pub freq_scale: f64,
    pub ext_factor: f64,
    pub mscale: f64,
    pub corr0: f32,
    pub corr1: f32,
    pub n_dims: i32,
    pub n_offs: i32,
    pub neox: i32,
    pub has_ff: i32,
    pub ty: i32,
    /// With a fused SET_ROWS ([`ROPE_SET_ROWS`]): the cache's ggml type id; -1 without.
    pub cty: i32,
    pub cnb1: i64,
    pub crows: i64,
    pub idx64: i32,
    pub pad: i32,
}
const _: () = assert!(std::mem::size_of::<RopeShape>() == 200);

/// The pair indices where YaRN's ramp starts and ends: where `n_rot` full turns fit into
/// `n_ctx_orig` positions, floored/ceiled and kept inside `0..n_dims`.
fn yarn_corr_dims(p: &RopeParams) -> [f32; 2] {
    let pair_of = |n_rot: f32| {
        let turns = p.n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI);
        p.n_dims as f32 * turns.ln() / (2.0 * p.freq_base.ln())
    };
    let start = pair_of(p.beta_fast).floor();
    let end = pair_of(p.beta_slow).ceil();
    [start.max(0.0), end.min(p.n_dims as f32 - 1.0)]
}

/// The kernel's shape for a ROPE node, `None` for a node it does not run exactly.
fn rope_shape(node: &Node<'_>, ty: ElemType) -> Option<RopeShape> {
    let (a, pos) = (node.src(0)?, node.src(1)?);
    let ff = node.src(2);
    let d = node.dst;
    if a.ty != ty || d.ty != ty || d.ne != a.ne {
        return None;
    }
    if !(well_formed(a) && well_formed(d) && well_formed(pos) && elements_disjoint(d)) {
        return None;
    }
    let p = RopeParams::read(d);
    if p.mode != ROPE_TYPE_NORMAL && p.mode != ROPE_TYPE_NEOX {
        return None;
    }
    if pos.ty != ElemType::I32 || pos.ne[0] != a.ne[2] || pos.nelements() != pos.ne[0] {
        return None;
    }
    let n_offs = d.param_i32(N_OFFS_PARAM);
    if p.n_dims < 0 || p.n_dims % 2 != 0 || n_offs < 0 || n_offs % 2 != 0 {
        return None;
    }
    let half = (p.n_dims / 2) as i64;
    if n_offs as i64 + p.n_dims as i64 > a.ne[0] || half > MAX_PAIRS {
        return None;
    }
    if let Some(f) = ff {
        if f.ty != ElemType::F32 || f.ne[0] < half || !well_formed(f) {
            return None;
        }
    }
    let mut mscale = p.attn_factor as f64;
    if p.ext_factor != 0.0 {
        mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale as f64).ln();
    }
    let [corr0, corr1] = yarn_corr_dims(&p);
    Some(RopeShape {
        ne: a.ne,
        nbs: a.nb.map(|b| b as i64),
        nbd: d.nb.map(|b| b as i64),
        nbp: pos.nb[0] as i64,
        nbf: ff.map_or(0, |f| f.nb[0] as i64),
        freq_base: p.freq_base as f64,
        freq_scale: p.freq_scale as f64,
        ext_factor: p.ext_factor as f64,
        mscale,
        corr0,
        corr1,
        n_dims: p.n_dims,
        n_offs,
        neox: (p.mode == ROPE_TYPE_NEOX) as i32,
        has_ff: ff.is_some() as i32,
        ty: ty.ggml_id() as i32,
        cty: -1,
        cnb1: 0,
        crows: 0,
        idx64: 0,
        pad: 0,
    })
}

fn accepts_f32(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    rope_shape(node, ElemType::F32).is_some()
}

fn accepts_f16(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    rope_shape(node, ElemType::F16).is_some()
}

/// x: runs of heads sized so a block has about [`UNITS_PER_BLOCK`] row elements per token; y:
/// tokens (dims 2 and 3). Both capped; the kernel's loops cover any grid. Dynamic shared memory:
/// the cos and sin tables.
fn launch_config(s: &RopeShape) -> LaunchConfig {
    let half = (s.n_dims / 2) as i64;
    let units = (s.ne[0] - half).max(1);
    let heads_per_block = (UNITS_PER_BLOCK / units).max(1);
    let gx = ((s.ne[1].max(1) + heads_per_block - 1) / heads_per_block).min(MAX_GRID);
    let gy = (s.ne[2].max(1) * s.ne[3].max(1)).min(MAX_GRID);
    LaunchConfig {
        grid: [gx as u32, gy as u32, 1],
        block: [BLOCK, 1, 1],
        shared_bytes: (2 * half * 4) as u32,
    }
}

/// The rope's shape with the fused SET_ROWS's cache filled in, for a ROPE of one token whose
/// result (contiguous f32) the SET_ROWS stores as one row: its values a view of that result
/// ([heads * head_dim, 1], offset 0), one i64 or i32 index, an f16 or f32 cache of such rows.
fn rope_set_rows_shape(rope: &Node<'_>, set: &Node<'_>) -> Option<RopeShape> {
    let d = rope.dst;
    let (v, idx, cache) = (set.src(0)?, set.src(1)?, set.dst);
    let one_token = d.ne[2] == 1 && d.ne[3] == 1 && d.is_contiguous();
    let row = v.ty == ElemType::F32 && v.ne == [d.ne[0] * d.ne[1], 1, 1, 1] && v.view_offs == 0;
    let index = matches!(idx.ty, ElemType::I64 | ElemType::I32) && idx.nelements() == 1;
    let cty = match cache.ty {
        ElemType::F16 | ElemType::F32 => cache.ty.ggml_id() as i32,
        _ => return None,
    };
    let rows = cache.ne[0] == v.ne[0] && cache.nb[0] == cache.ty.type_size() && cache.ne[2] == 1 && cache.ne[3] == 1;
    if !(one_token && row && index && rows) || tandem_ops::cpu::check(cache, &set.srcs).is_err() {
        return None;
    }
    Some(RopeShape {
        cty,
        cnb1: cache.nb[1] as i64,
        crows: cache.ne[1],
        idx64: (idx.ty == ElemType::I64) as i32,
        ..rope_shape(rope, ElemType::F32)?
    })
}

fn accepts_rope_set_rows(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    next.is_some_and(|set| set.dst.op == Op::SetRows && rope_set_rows_shape(node, set).is_some())
}

/// # Safety
/// See [`crate::gpu::registry::Launch`].
unsafe fn launch_rope_set_rows(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    next: Option<&Node<'_>>,
) -> Result<(), KernelError> {
    let set = next.ok_or_else(|| launch_error("hip.rope_set_rows", "no SET_ROWS"))?;
    let shape = rope_set_rows_shape(node, set)
        .ok_or_else(|| launch_error("hip.rope_set_rows", "not a ROPE and SET_ROWS the kernel runs"))?;
    let idx = set
        .src(1)
        .ok_or_else(|| launch_error("hip.rope_set_rows", "no index"))?;
    // SAFETY: forwarded; the cache rows and the index are the SET_ROWS's, whose shapes the
    // predicate checked (the kernel range-checks the index).
    unsafe { queue_rope(ctx, node, shape, dptr(set.dst), dptr(idx)) }
}

/// # Safety
/// See [`crate::gpu::registry::Launch`].
unsafe fn launch_rope(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let d: &Tensor = node.dst;
    let shape = rope_shape(node, d.ty).ok_or_else(|| launch_error("hip.rope", "not a ROPE node the kernel runs"))?;
    // SAFETY: forwarded; without a cache (`cty` -1) the kernel reads neither address.
    unsafe { queue_rope(ctx, node, shape, DevicePtr(0), DevicePtr(0)) }
}

/// # Safety
/// As [`crate::gpu::registry::Launch`]; with `shape.cty` >= 0, `cache` holds `crows` rows of
/// `cnb1` bytes, each of `ne[0] * ne[1]` elements, and `idx` one index.
unsafe fn queue_rope(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    shape: RopeShape,
    cache: DevicePtr,
    idx: DevicePtr,
) -> Result<(), KernelError> {
    let d: &Tensor = node.dst;
    if d.ne.contains(&0) {
        return Ok(());
    }
    let (Some(a), Some(pos)) = (node.src(0), node.src(1)) else {
        return Err(launch_error("hip.rope", "missing source"));
    };
    // Without factors the kernel never reads src2; any address does.
    let ff = node.src(2).map_or(dptr(pos), dptr);
    let f = ctx.kernels.function(FAMILY, "tandem_rope")?;
    let mut args = KernelArgs::new();
    args.push(dptr(a))
        .push(dptr(pos))
        .push(ff)
        .push(dptr(d))
        .push(shape)
        .push(cache)
        .push(idx);
    // SAFETY: the parameter list is (const char*, const char*, const char*, char*,
    // tandem_rope_shape, char*, const char*); the predicate checked types, shapes, strides and
    // the table size; the registry contract gives device addresses covering each tensor.
    unsafe { ctx.stream.launch(&f, launch_config(&shape), &mut args) }.map_err(KernelError::Gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::registry::accepting;
    use tandem_graph::{Graph, GraphBuilder, TensorId};

    fn chosen(g: &Graph, id: TensorId) -> Vec<&'static str> {
        accepting(REGISTRATIONS, g, id)
    }

    fn case(ty: ElemType, head_dim: i64, p: RopeParams, ff: bool) -> (Graph, TensorId) {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ty, &[head_dim, 3, 5]);
        let pos = g.new_tensor(ElemType::I32, &[5]);
        let f = ff.then(|| g.new_tensor(ElemType::F32, &[p.n_dims as i64 / 2]));
        let d = g.rope(a, pos, f, p).unwrap();
        (g.build(), d)
    }

    /// ROPE of `tokens` tokens (8 heads of 128), reshaped to rows, SET_ROWS into a `cache` cache.
    fn store(cache: ElemType, tokens: i64) -> (Graph, TensorId, TensorId) {
        let mut g = GraphBuilder::new();
        let k = g.new_tensor(ElemType::F32, &[128, 8, tokens]);
        let pos = g.new_tensor(ElemType::I32, &[tokens]);
        let c = g.new_tensor(cache, &[1024, 32]);
        let idx = g.new_tensor(ElemType::I64, &[tokens]);
        let r = g.rope(k, pos, None, RopeParams::llama(128, false)).unwrap();
        let rows = g.reshape(r, &[1024, tokens]).unwrap();
        let set = g.set_rows(c, rows, idx).unwrap();
        (g.build(), r, set)
    }

    #[test]
    fn one_tokens_k_store_fuses_into_the_rope() {
        let (g, r, set) = store(ElemType::F16, 1);
        let s = rope_set_rows_shape(&Node::of(&g, r), &Node::of(&g, set)).unwrap();
        assert_eq!((s.cty, s.cnb1, s.crows, s.idx64), (1, 2048, 32, 1));
        assert!(accepts_rope_set_rows(&Node::of(&g, r), Some(&Node::of(&g, set))));
        // Several tokens (their indices may repeat) or a quantized cache: apart.
        let (g2, r2, set2) = store(ElemType::F16, 4);
        assert!(!accepts_rope_set_rows(&Node::of(&g2, r2), Some(&Node::of(&g2, set2))));
        let (g3, r3, set3) = store(ElemType::Q8_0, 1);
        assert!(!accepts_rope_set_rows(&Node::of(&g3, r3), Some(&Node::of(&g3, set3))));
        // The plain rope leaves the cache alone.
        assert_eq!(rope_shape(&Node::of(&g, r), ElemType::F32).unwrap().cty, -1);
    }

    #[test]
    fn accepts_modes_types_and_fills_the_shape() {
        for (ty, want) in [(ElemType::F32, "hip.rope_f32"), (ElemType::F16, "hip.rope_f16")] {
            for neox in [false, true] {
                for ff in [false, true] {
                    let (g, d) = case(ty, 80, RopeParams::llama(32, neox), ff);
                    assert_eq!(chosen(&g, d), vec![want]);
                    let s = rope_shape(&Node::of(&g, d), ty).unwrap();
                    let es = ty.type_size() as i64;
                    assert_eq!(s.ne, [80, 3, 5, 1]);
                    assert_eq!(s.nbs, [es, 80 * es, 240 * es, 1200 * es]);
                    assert_eq!(s.nbd, s.nbs);
                    assert_eq!((s.nbp, s.nbf), (4, if ff { 4 } else { 0 }));
                    assert_eq!((s.n_dims, s.n_offs, s.neox, s.has_ff), (32, 0, neox as i32, ff as i32));
                    assert_eq!(
                        (s.freq_base, s.freq_scale, s.ext_factor, s.mscale),
                        (10000.0, 1.0, 0.0, 1.0)
                    );
                    let c = launch_config(&s);
                    // 64 units per row: 4 heads per block, so all 3 heads in one block.
                    assert_eq!((c.grid, c.block, c.shared_bytes), ([1, 5, 1], [256, 1, 1], 128));
                }
            }
        }
    }

    #[test]
    fn yarn_constants_match_the_cpu_formula() {
        let p = RopeParams {
            freq_scale: 0.25,
            ext_factor: 1.0,
            attn_factor: 1.1,
            freq_base: 500000.0,
            ..RopeParams::llama(128, true)
        };
        let (g, d) = case(ElemType::F32, 128, p, false);
        let s = rope_shape(&Node::of(&g, d), ElemType::F32).unwrap();
        // ggml's ggml_rope_yarn_corr_dims for n_ctx_orig 4096, base 5e5, 128 dims: 20 and 46
        // after floor/ceil (computed by hand from its formula).
        let dim = |r: f64| 128.0 * (4096.0 / (r * 2.0 * std::f64::consts::PI)).ln() / (2.0 * 500000f64.ln());
        assert_eq!(s.corr0, dim(32.0).floor() as f32);
        assert_eq!(s.corr1, dim(1.0).ceil() as f32);
        assert!((s.mscale - 1.1f32 as f64 * (1.0 + 0.1 * 4f64.ln())).abs() < 1e-12);
        assert_eq!(s.ext_factor, 1.0);
    }

    #[test]
    fn declines_what_the_kernel_does_not_run() {
        let (g, d) = case(ElemType::F32, 16, RopeParams::llama(16, false), true);
        assert_eq!(chosen(&g, d), vec!["hip.rope_f32"]);
        let with = |f: &dyn Fn(&mut Graph)| {
            let mut b = g.clone();
            f(&mut b);
            chosen(&b, d)
        };
        for mode in [1, 8, 24, 40] {
            assert!(
                with(&|b| b.tensors[d.index()].set_param_i32(2, mode)).is_empty(),
                "mode {mode}"
            );
        }
        assert!(with(&|b| b.tensors[d.index()].set_param_i32(1, 15)).is_empty());
        assert!(with(&|b| b.tensors[d.index()].set_param_i32(1, 18)).is_empty());
        assert!(with(&|b| b.tensors[d.index()].set_param_i32(N_OFFS_PARAM, 2)).is_empty());
        assert!(with(&|b| b.tensors[2].ne[0] = 7).is_empty());
        assert!(with(&|b| b.tensors[2].ty = ElemType::F16).is_empty());
        assert!(with(&|b| b.tensors[1].ne[0] = 2).is_empty());
        assert!(with(&|b| b.tensors[1].ty = ElemType::I64).is_empty());
        assert!(with(&|b| b.tensors[d.index()].ty = ElemType::F16).is_empty());
        assert!(with(&|b| b.tensors[0].ty = ElemType::BF16).is_empty());
        // A rotation offset that fits is taken.
        let mut b = g.clone();
        b.tensors[d.index()].set_param_i32(1, 8);
        b.tensors[d.index()].set_param_i32(N_OFFS_PARAM, 4);
        assert_eq!(chosen(&b, d), vec!["hip.rope_f32"]);
        let s = rope_shape(&Node::of(&b, d), ElemType::F32).unwrap();
        assert_eq!((s.n_dims, s.n_offs), (8, 4));
    }

    #[test]
    fn grid_respects_limits() {
        let mut s = RopeShape {
            ne: [128, 1 << 20, 1 << 17, 1],
            n_dims: 128,
            ..Default::default()
        };
        let c = launch_config(&s);
        assert_eq!(c.grid, [65_535, 65_535, 1]);
        assert_eq!(c.shared_bytes, 512);
        s.ne = [128, 32, 1, 1];
        assert_eq!(launch_config(&s).grid, [8, 1, 1]);
        s.n_dims = 0;
        s.ne = [7, 1, 1, 1];
        assert_eq!(launch_config(&s).shared_bytes, 0);
    }
}
