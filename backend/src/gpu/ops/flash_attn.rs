//! FLASH_ATTN_EXT of `kernels-hip/src/flash_attn.hip`: q f32; K and V (each) f32, f16, bf16,
//! q4_0, q4_1, q5_0, q5_1, q8_0 or iq4_nl; head sizes that are multiples of 8 up to 1024 (K and V
//! may differ, as DeepSeek's 576 / 512); any GQA ratio; q sequences broadcast over K/V ones;
//! optional f16 mask broadcast over heads and sequences, ALiBi, sinks and logit softcap; K/V as
//! strided views of a cache. Every precision setting runs in f32, except on the tensor-core
//! kernels (NVIDIA sm_80+, f16 K/V, head sizes 64/96/128/256: `tandem_fa_mma_d*` for prompts of
//! at least 32 queries a head, `tandem_fa_mmd_d*` for fewer), which round q and the softmax
//! weights to f16 for the mma as ggml's CUDA kernels do, sums and the softmax staying f32
//! (`TANDEM_DISABLE_DISPATCH=hip.fa.mma` turns them off).
//!
//! One registration, `hip.fa`, picks the kernel shape per node: how many (query, head) rows a
//! block holds, how many kv rows a tile holds (from the shared memory the device grants), and how
//! many blocks split the kv range (flash-decoding) so that a decode step's few kv heads still
//! fill the device; with more than one split a second kernel combines the blocks' partial sums.

use super::rows::non_empty;
use crate::gpu::api::{sm_number, DeviceInfo, DevicePtr, LaunchConfig};
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, LaunchCtx, Node, Registration};
use crate::gpu::safe::KernelArgs;
use tandem_graph::params::FlashAttnParams;
use tandem_graph::{ElemType, Op, Tensor};

pub const FAMILY: &str = "flash_attn";

pub const REGISTRATIONS: &[Registration] = &[Registration {
    name: "hip.fa",
    op: Op::FlashAttnExt,
    fuses: None,
    accepts,
    launch,
}];

/// Threads of a block (`TANDEM_FA_THREADS`).
const THREADS: usize = 128;
/// Most splits of one row (the reduce kernel's shared weights).
const MAX_SPLITS: usize = 1024;
/// Most blocks of a grid's y and z dimensions on every device.
const MAX_GRID_YZ: usize = 65_535;

/// K/V element types the kernels read: every one the CPU fallback reads.
pub const KV_TYPES: [ElemType; 9] = tandem_ops::cpu::FLASH_ATTN_KV_TYPES;

/// `tandem_fa_shape` of flash_attn.hip.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaShape {
    pub nbq: [i64; 4],
    pub nbk: [i64; 4],
    pub nbv: [i64; 4],
    pub nbm: [i64; 4],
    pub nbd: [i64; 4],
    pub nem2: i64,
    pub nem3: i64,
    pub nbsink: i64,
    pub dk: i32,
    pub dv: i32,
    pub n_q: i32,
    pub n_head_kv: i32,
    pub n_kv: i32,
    pub seq_per_kv: i32,
    pub group: i32,
    pub rows: i32,
    pub row_blocks: i32,
    pub kt: i32,
    pub n_splits: i32,
    pub split_len: i32,
    pub k_type: i32,
    pub v_type: i32,
    pub k_bytes: i32,
    pub v_bytes: i32,
    pub k_ss: i32,
    pub v_ss: i32,
    pub k_word: i32,
    pub v_word: i32,
    pub row_groups: i32,
    pub kv_groups: i32,
    pub kv_area: i32,
    pub has_mask: i32,
    pub has_sinks: i32,
    pub q_scale: f32,
    pub softcap: f32,
    pub max_bias: f32,
    pub m0: f32,
    pub m1: f32,
    pub n_head_log2: i32,
    /// Double-buffered tiles copied without waiting (NVIDIA sm_80+, decode variant).
    pub pipe: i32,
}
const _: () = assert!(std::mem::size_of::<FaShape>() == 312);

/// The kernel shapes: the decode kernels hold exactly 4, 8 or 16 rows a block (a GQA group of
/// one to a few queries, padded), with the rows split over `rows / 4` thread groups for the
/// output; the large one holds up to 32 rows, each thread accumulating up to 8 of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// `_r4`, `_r8`, `_r16`.
    Decode(usize),
    /// `_l`.
    Large,
}

/// Rows one output thread accumulates: `OROWS` of the kernels.
const DECODE_OROWS: usize = 4;
const LARGE_OROWS: usize = 8;
const LARGE_ROWS: usize = 32;

/// How a node's work is cut: rows per block, kv rows per tile, the thread groups of the output
/// and the shared memory they take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiling {
    pub variant: Variant,
    pub rows: usize,
    pub kt: usize,
    pub row_groups: usize,
    pub kv_groups: usize,
    pub k_ss: usize,
    pub v_ss: usize,
    pub kv_area: usize,
    pub shared: usize,
}

/// Shared-memory stride of one K or V row. f32/f16/bf16 rows are read in 16-byte words: K rows
/// by `tpk` adjacent lanes, each at every `tpk`-th word, so for `tpk` of 2 or 4 the stride puts
/// the next row's words just past the `tpk` words one row's lanes read in each 128 bytes (no
/// bank conflicts in an eight-lane phase); otherwise (`tpk` 1: V rows, read by adjacent lanes
/// along the row) an odd number of words. Block rows are read in 2-byte units from a 4-byte
/// aligned start, at an odd multiple of 4 bytes.
pub fn shared_stride(ty: ElemType, bytes: usize, tpk: usize) -> usize {
    let unit = if ty.is_quantized() { 4 } else { 16 };
    let mut s = bytes.div_ceil(unit) * unit;
    if unit == 16 && (tpk == 2 || tpk == 4) {
        while (s / 16) % 8 != tpk {
            s += 16;
        }
    } else if (s / unit) % 2 == 0 {
        s += unit;
    }
    s
}

/// Shared memory of a block: K/V tiles (or the output sums) then q, scores and the row state.
fn shared_bytes(kv_area: usize, rows: usize, dk: usize, kt: usize) -> usize {
    kv_area + rows * (dk + kt + 6) * 4 + rows * 8 + 8
}

/// The tiling of a node with `group_rows` rows per kv head within `budget` bytes of shared
/// memory, `buffers` K/V tiles deep (2 when pipelined), or `None` when nothing fits.
pub fn tiling(
    dk: usize,
    dv: usize,
    group_rows: usize,
    k: (ElemType, usize),
    v: (ElemType, usize),
    budget: usize,
    buffers: usize,
) -> Option<Tiling> {
    let chunks = dv / 8;
    if dk == 0 || dv == 0 || !dk.is_multiple_of(8) || !dv.is_multiple_of(8) || chunks > THREADS || group_rows == 0 {
        return None;
    }
    let max_row_groups = THREADS / chunks;
    // A decode kernel holding the whole group where one fits (padded rows cost some work, no
    // bounds), else the large kernel over blocks of up to 32 rows (fewer where the output
    // threads or the shared memory run out).
    let decode = [4usize, 8, 16]
        .into_iter()
        .find(|&r| group_rows <= r && r / DECODE_OROWS <= max_row_groups)
        .map(|r| (Variant::Decode(r), r, r / DECODE_OROWS));
    let most = LARGE_ROWS.min(LARGE_OROWS * max_row_groups);
    let first = if group_rows <= most {
        group_rows
    } else {
        group_rows.div_ceil(group_rows.div_ceil(most))
    };
    let large = std::iter::successors(Some(first), |&r| (r > 1).then(|| r.div_ceil(2)))
        .map(|r| (Variant::Large, r, r.div_ceil(LARGE_OROWS)));
    let shapes = decode.into_iter().chain(large);
    // Pipelined tiles: 32 rows, so that more blocks share an SM and each has a tile in flight.
    let kts: &[usize] = if buffers > 1 {
        &[32, 16, 64, 8]
    } else {
        &[64, 32, 16, 8]
    };
    for (variant, rows, row_groups) in shapes {
        for &kt in kts {
            let (k_ss, v_ss) = (shared_stride(k.0, k.1, THREADS / kt), shared_stride(v.0, v.1, 1));
            let tiles = buffers * kt * (k_ss + v_ss);
            let out = (rows * dv * 4).saturating_sub(rows * (dk + kt) * 4);
            let kv_area = tiles.max(out).div_ceil(16) * 16;
            let shared = shared_bytes(kv_area, rows, dk, kt);
            if shared <= budget {
                return Some(Tiling {
                    variant,
                    rows,
                    kt,
                    row_groups,
                    kv_groups: max_row_groups / row_groups,
                    k_ss,
                    v_ss,
                    kv_area,
                    shared,
                });
            }
        }
    }
    None
}

/// Dynamic shared memory a block may take on `info`'s device, and what one SM / CU holds.
fn shared_budget(info: &DeviceInfo) -> (usize, usize) {
    match sm_number(&info.arch) {
        Some(90) => (96 * 1024, 228 * 1024),
        Some(80) => (96 * 1024, 164 * 1024),
        Some(sm) if sm >= 80 => (96 * 1024, 100 * 1024),
        Some(_) => (48 * 1024, 96 * 1024),
        None => (64 * 1024, 64 * 1024),
    }
}

/// Blocks of the decode variant one SM keeps (`TANDEM_FA_SMALL_BLOCKS`: its register cap).
const SMALL_BLOCKS_PER_SM: usize = 5;

/// kv splits of a grid of `base` blocks over `n_kv` rows in tiles of `kt`: enough blocks for
/// `target`, whole tiles per split, at most [`MAX_SPLITS`]. Returns (splits, rows per split).
pub fn splits(base: usize, n_kv: usize, kt: usize, target: usize) -> (usize, usize) {
    let tiles = n_kv.div_ceil(kt).max(1);
    if base >= target {
        return (1, tiles * kt);
    }
    let want = target.div_ceil(base.max(1)).clamp(1, tiles.min(MAX_SPLITS));
    let per = tiles.div_ceil(want);
    (tiles.div_ceil(per), per * kt)
}

fn elem_strides(t: &Tensor) -> Option<[i64; 4]> {
    let align = if t.ty.is_quantized() { 2 } else { t.ty.type_size() };
    super::rows::aligned_strides(t, align)
}

/// The kernel's shape for `node` on a device with `budget` bytes of shared memory per block,
/// without the launch-time fields (copy widths and splits), or `None` when the kernels do not
/// run it exactly.
pub fn fa_shape(node: &Node<'_>, budget: usize, buffers: usize) -> Option<(FaShape, Tiling)> {
    let dst = node.dst;
    let (q, k, v) = (node.src(0)?, node.src(1)?, node.src(2)?);
    // ggml's own admission rules (the CPU fallback's), then what the kernel needs on top.
    tandem_ops::cpu::check(dst, &node.srcs).ok()?;
    if !KV_TYPES.contains(&k.ty) || !KV_TYPES.contains(&v.ty) || q.nb[0] != 4 || !non_empty(q.ne) {
        return None;
    }
    let [dk, n_q, n_head, n_seq] = q.ne;
    let (dv, n_kv, n_head_kv) = (v.ne[0], k.ne[1], k.ne[2]);
    let group = n_head / n_head_kv;
    let group_rows = usize::try_from(group.checked_mul(n_q)?).ok()?;
    let k_bytes = k.ty.row_size(dk)?;
    let v_bytes = v.ty.row_size(dv)?;
    if n_kv > i32::MAX as i64 / 2 || group_rows > i32::MAX as usize / 2 || dk > 1024 {
        return None;
    }
    let t = tiling(
        dk as usize,
        dv as usize,
        group_rows,
        (k.ty, k_bytes),
        (v.ty, v_bytes),
        budget,
        buffers,
    )?;
    let row_blocks = group_rows.div_ceil(t.rows);
    if row_blocks * n_head_kv as usize > MAX_GRID_YZ || n_seq as usize > MAX_GRID_YZ {
        return None;
    }
    let p = FlashAttnParams::read(dst);
    let mut s = FaShape {
        nbq: super::rows::aligned_strides(q, 4)?,
        nbk: elem_strides(k)?,
        nbv: elem_strides(v)?,
        nbd: super::rows::aligned_strides(dst, 4)?,
        nem2: 1,
        nem3: 1,
        dk: dk as i32,
        dv: dv as i32,
        n_q: n_q as i32,
        n_head_kv: n_head_kv as i32,
        n_kv: n_kv as i32,
        seq_per_kv: (n_seq / k.ne[3]) as i32,
        group: group as i32,
        rows: t.rows as i32,
        row_blocks: row_blocks as i32,
        kt: t.kt as i32,
        n_splits: 1,
        split_len: (n_kv.max(1) as usize).div_ceil(t.kt) as i32 * t.kt as i32,
        k_type: k.ty.ggml_id() as i32,
        v_type: v.ty.ggml_id() as i32,
        k_bytes: k_bytes as i32,
        v_bytes: v_bytes as i32,
        k_ss: t.k_ss as i32,
        v_ss: t.v_ss as i32,
        k_word: 2,
        v_word: 2,
        row_groups: t.row_groups as i32,
        kv_groups: t.kv_groups as i32,
        kv_area: t.kv_area as i32,
        q_scale: if p.logit_softcap != 0.0 {
            p.scale / p.logit_softcap
        } else {
            p.scale
        },
        softcap: p.logit_softcap,
        max_bias: p.max_bias,
        m0: 1.0,
        m1: 1.0,
        ..Default::default()
    };
    if let Some(m) = node.src(3) {
        s.has_mask = 1;
        s.nbm = super::rows::aligned_strides(m, 2)?;
        s.nem2 = m.ne[2];
        s.nem3 = m.ne[3];
        (s.n_head_log2, s.m0, s.m1) = super::softmax::alibi_bases(p.max_bias, n_head as u32);
    }
    if let Some(sk) = node.src(4) {
        s.has_sinks = 1;
        s.nbsink = super::rows::aligned_strides(sk, 4)?[0];
    }
    Some((s, t))
}

fn accepts(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    // The smallest budget of any device: a node that fits it fits every device.
    fa_shape(node, 48 * 1024, 1).is_some()
}

/// The widest copy word (16, 4 or 2 bytes) that divides a row's bytes, its shared stride and
/// every address the copies start from.
pub fn copy_word(t: &Tensor, row_bytes: usize, shared_stride: usize) -> i32 {
    let addr = t.data as u64;
    for w in [16u64, 4] {
        let ok = (row_bytes as u64).is_multiple_of(w)
            && (shared_stride as u64).is_multiple_of(w)
            && addr.is_multiple_of(w)
            && t.nb[1..].iter().all(|&b| (b as u64).is_multiple_of(w));
        if ok {
            return w as i32;
        }
    }
    2
}

/// The kernel entry for a node's K/V types and variant.
pub fn entry(k: ElemType, v: ElemType, variant: Variant) -> &'static str {
    let types = match (k, v) {
        (ElemType::F16, ElemType::F16) => 0,
        (ElemType::Q8_0, ElemType::Q8_0) => 1,
        _ => 2,
    };
    const NAMES: [[&str; 4]; 3] = [
        [
            "tandem_fa_f16_r4",
            "tandem_fa_f16_r8",
            "tandem_fa_f16_r16",
            "tandem_fa_f16_l",
        ],
        [
            "tandem_fa_q8_0_r4",
            "tandem_fa_q8_0_r8",
            "tandem_fa_q8_0_r16",
            "tandem_fa_q8_0_l",
        ],
        [
            "tandem_fa_any_r4",
            "tandem_fa_any_r8",
            "tandem_fa_any_r16",
            "tandem_fa_any_l",
        ],
    ];
    let shape = match variant {
        Variant::Decode(4) => 0,
        Variant::Decode(8) => 1,
        Variant::Decode(_) => 2,
        Variant::Large => 3,
    };
    NAMES[types][shape]
}

/// `TANDEM_DISABLE_DISPATCH` name of the tensor-core prefill kernels (`tandem_fa_mma_d*`):
/// disabled, every node runs on the kernels above.
pub const MMA_SWITCH: &str = "hip.fa.mma";

/// Fewest queries a head for which the tensor-core kernels run a node (a block holds 64).
pub const MMA_MIN_QUERIES: i64 = 32;

/// Query rows of a tensor-core block (`TANDEM_FA_MMA_ROWS`).
const MMA_ROWS: usize = 64;

/// How a node runs on the tensor-core prefill kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaPlan {
    pub entry: &'static str,
    /// kv rows a tile.
    pub kt: usize,
    /// K/V tiles in flight: 2 (the next copied while this one is multiplied) or 1.
    pub stages: usize,
    pub shared: usize,
}

/// Dynamic shared memory a block of the tensor-core kernels may take on an sm_`sm` device.
fn mma_budget(sm: u32) -> usize {
    match sm {
        90 => 227 * 1024,
        80 | 87 => 163 * 1024,
        _ => 99 * 1024,
    }
}

/// Whether every byte address `t`'s rows start at (and its data) is a multiple of `align`.
fn rows_aligned(t: &Tensor, align: u64) -> bool {
    (t.data as u64).is_multiple_of(align) && t.nb[1..].iter().all(|&b| (b as u64).is_multiple_of(align))
}

/// What both tensor-core kernel families need of `node`: an NVIDIA sm_80+ device, f16 K and V
/// of one head size, K/V (and mask) rows at 16-byte aligned addresses, and at least
/// [`MMA_MIN_QUERIES`] queries a head for a `prompt`, fewer otherwise. Returns the SM version
/// and the head size.
fn tensor_core_node(node: &Node<'_>, arch: &str, prompt: bool) -> Option<(u32, usize)> {
    let sm = sm_number(arch).filter(|&sm| sm >= 80)?;
    let (q, k, v) = (node.src(0)?, node.src(1)?, node.src(2)?);
    if k.ty != ElemType::F16 || v.ty != ElemType::F16 || (q.ne[1] >= MMA_MIN_QUERIES) != prompt || k.ne[0] != v.ne[0] {
        return None;
    }
    if !rows_aligned(k, 16) || !rows_aligned(v, 16) || node.src(3).is_some_and(|m| !rows_aligned(m, 16)) {
        return None;
    }
    Some((sm, usize::try_from(k.ne[0]).ok()?))
}

/// The tensor-core kernel for `node` on a device of compile target `arch`, or `None` where the
/// kernels above run it: K and V f16 with one head size of 64, 96, 128 or 256, at least
/// [`MMA_MIN_QUERIES`] queries, K/V rows (and mask rows) at 16-byte aligned addresses, an
/// NVIDIA sm_80+ device.
pub fn mma_plan(node: &Node<'_>, arch: &str) -> Option<MmaPlan> {
    let (sm, d) = tensor_core_node(node, arch, true)?;
    let (entry, kt) = match d {
        64 => ("tandem_fa_mma_d64", 64),
        96 => ("tandem_fa_mma_d96", 64),
        128 => ("tandem_fa_mma_d128", 64),
        256 => ("tandem_fa_mma_d256", 32),
        _ => return None,
    };
    let q = node.src(0)?;
    if q.ne[2] as usize > MAX_GRID_YZ || q.ne[3] as usize > MAX_GRID_YZ {
        return None;
    }
    let ss = 2 * d + 16;
    let (stages, shared) = mma_stages(ss, kt, mma_budget(sm))?;
    Some(MmaPlan {
        entry,
        kt,
        stages,
        shared,
    })
}

/// K/V tiles in flight (2 or 1) and the shared bytes of a block (64 q rows and the tiles, rows
/// `ss` bytes apart) within `budget`.
fn mma_stages(ss: usize, kt: usize, budget: usize) -> Option<(usize, usize)> {
    [2usize, 1]
        .into_iter()
        .map(|st| (st, ss * (MMA_ROWS + 2 * st * kt)))
        .find(|&(_, bytes)| bytes <= budget)
}

/// Queues entry `name` of the family on `grid` blocks with the parameters every FLASH_ATTN_EXT
/// entry takes: `(const char* q, k, v, mask, sinks, char* dst, float* partial,
/// tandem_fa_shape)`, absent mask and sinks as null.
///
/// # Safety
/// As [`crate::gpu::registry::Launch`]; `s` was made and checked for this node by the caller
/// (strides, extents, copy widths, the entry's alignment needs), and `partial` holds every
/// split's sums of every row where the entry writes them (more than one split).
unsafe fn queue_entry(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    name: &str,
    grid: [u32; 3],
    shared: usize,
    partial: DevicePtr,
    s: FaShape,
) -> Result<(), KernelError> {
    let opt = |t: Option<&Tensor>| t.map(dptr).unwrap_or(DevicePtr(0));
    let f = ctx.kernels.function(FAMILY, name)?;
    let mut args = KernelArgs::new();
    for i in 0..5 {
        args.push(opt(node.src(i)));
    }
    args.push(dptr(node.dst)).push(partial).push(s);
    let cfg = LaunchConfig {
        grid,
        block: [THREADS as u32, 1, 1],
        shared_bytes: shared as u32,
    };
    // SAFETY: the parameters match the entry's, as the caller's contract says.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// Queues `tandem_fa_reduce` over `rows` rows: blocks of 32 output columns per row.
///
/// # Safety
/// As [`queue_entry`]; a kernel queued ahead on the stream wrote every row's splits into
/// `partial` (maxima in natural units).
unsafe fn queue_reduce(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    partial: DevicePtr,
    s: FaShape,
    rows: usize,
) -> Result<(), KernelError> {
    let opt = |t: Option<&Tensor>| t.map(dptr).unwrap_or(DevicePtr(0));
    let r = ctx.kernels.function(FAMILY, "tandem_fa_reduce")?;
    let mut args = KernelArgs::new();
    args.push(partial).push(opt(node.src(4))).push(dptr(node.dst)).push(s);
    let cfg = LaunchConfig {
        grid: [rows as u32, (s.dv as u32).div_ceil(32), 1],
        block: [THREADS as u32, 1, 1],
        shared_bytes: 0,
    };
    // SAFETY: (const float* partial, const char* sinks, char* dst, tandem_fa_shape), as the
    // caller's contract says.
    unsafe { ctx.stream.launch(&r, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// How a node runs on the tensor-core decode kernels (`tandem_fa_mmd_d*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmdPlan {
    pub entry: &'static str,
    pub stages: usize,
    pub shared: usize,
}

/// kv rows a tile of the decode kernels (four warps of 16).
const MMD_KT: usize = 64;

/// The tensor-core decode kernel for `node` (fewer than [`MMA_MIN_QUERIES`] queries a head;
/// otherwise as [`mma_plan`]), or `None`.
pub fn mmd_plan(node: &Node<'_>, arch: &str) -> Option<MmdPlan> {
    let (sm, d) = tensor_core_node(node, arch, false)?;
    let entry = match d {
        64 => "tandem_fa_mmd_d64",
        96 => "tandem_fa_mmd_d96",
        128 => "tandem_fa_mmd_d128",
        256 => "tandem_fa_mmd_d256",
        _ => return None,
    };
    let budget = mma_budget(sm);
    let (stages, shared) = [3usize, 2, 1]
        .into_iter()
        .map(|st| (st, mmd_shared(d, st)))
        .find(|&(_, bytes)| bytes <= budget)?;
    Some(MmdPlan { entry, stages, shared })
}

/// Shared memory of a decode block of head size `d` with `stages` stages a warp: the 16 q rows
/// and each of the four warps' ring of its 16 K and 16 V rows a stage (rows `2 d + 16` bytes
/// apart), or the warps' outputs, maxima and sums at the end if those take more.
fn mmd_shared(d: usize, stages: usize) -> usize {
    let ss = 2 * d + 16;
    let combine = 4 * 16 * (d + 2) * 4;
    (ss * (16 + 4 * stages * 32)).max(combine)
}

/// Queues the tensor-core decode kernel of `plan` for `node`: blocks of 16 (query, head) rows
/// of a kv head, the kv range split over enough blocks to fill the device, and
/// `tandem_fa_reduce` after them where there is more than one split.
///
/// # Safety
/// As [`crate::gpu::registry::Launch`], with `plan` from [`mmd_plan`] for this node.
unsafe fn launch_mmd(ctx: &LaunchCtx<'_>, node: &Node<'_>, plan: MmdPlan) -> Result<(), KernelError> {
    let fail = |m: &str| launch_error("launch_flash_attn", m.to_string());
    let (mut s, _) = fa_shape(node, 48 * 1024, 1).ok_or_else(|| fail("node not accepted"))?;
    // The decode kernel's stages a warp (1 to 3).
    s.pipe = plan.stages as i32;
    let q = node.src(0).ok_or_else(|| fail("q is required"))?;
    let n_seq = q.ne[3] as usize;
    let group_rows = (s.group * s.n_q) as usize;
    let row_blocks = group_rows.div_ceil(16);
    let ys = row_blocks * s.n_head_kv as usize;
    if ys > MAX_GRID_YZ {
        return Err(fail("too many row blocks"));
    }
    let base = ys * n_seq;
    let per_sm = (mma_budget(sm_number(&ctx.info.arch).unwrap_or(80)) / plan.shared.max(1)).clamp(1, 8);
    let target = ctx.info.compute_units.max(1) as usize * per_sm;
    let (n_splits, split_len) = splits(base, s.n_kv as usize, MMD_KT, target);
    s.n_splits = n_splits as i32;
    s.split_len = split_len as i32;
    let rows_total = group_rows * s.n_head_kv as usize * n_seq;
    let partial = if n_splits > 1 {
        ctx.scratch.get(rows_total * n_splits * (s.dv as usize + 4) * 4)?
    } else {
        DevicePtr(0)
    };
    let grid = [n_splits as u32, ys as u32, n_seq as u32];
    // SAFETY: `mmd_plan` checked the K/V types, head sizes and the alignment of every row the
    // kernel copies or scans, `fa_shape` the strides and extents; `partial` holds every split's
    // sums of every row when there is more than one split, which the reduce then combines.
    unsafe { queue_entry(ctx, node, plan.entry, grid, plan.shared, partial, s) }?;
    if n_splits > 1 {
        // SAFETY: as above.
        unsafe { queue_reduce(ctx, node, partial, s, rows_total) }?;
    }
    Ok(())
}

/// Queues the tensor-core kernel of `plan` for `node`: one block per 64 queries of a head.
///
/// # Safety
/// As [`crate::gpu::registry::Launch`], with `plan` from [`mma_plan`] for this node.
unsafe fn launch_mma(ctx: &LaunchCtx<'_>, node: &Node<'_>, plan: MmaPlan) -> Result<(), KernelError> {
    let fail = |m: &str| launch_error("launch_flash_attn", m.to_string());
    let (mut s, _) = fa_shape(node, 48 * 1024, 1).ok_or_else(|| fail("node not accepted"))?;
    s.pipe = i32::from(plan.stages == 2);
    let q = node.src(0).ok_or_else(|| fail("q is required"))?;
    let grid = [
        (q.ne[1] as usize).div_ceil(MMA_ROWS) as u32,
        q.ne[2] as u32,
        q.ne[3] as u32,
    ];
    // SAFETY: `mma_plan` checked the K/V types, head sizes and the 16-byte alignment of every
    // K/V/mask row the kernel copies or scans, `fa_shape` the strides and extents; the kernel
    // does not use `partial`.
    unsafe { queue_entry(ctx, node, plan.entry, grid, plan.shared, DevicePtr(0), s) }
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    if !crate::config::Config::get().is_disabled(MMA_SWITCH) {
        if let Some(plan) = mma_plan(node, &ctx.info.arch) {
            // SAFETY: as this function's own contract, with the plan made for this node.
            return unsafe { launch_mma(ctx, node, plan) };
        }
        if let Some(plan) = mmd_plan(node, &ctx.info.arch) {
            // SAFETY: likewise.
            return unsafe { launch_mmd(ctx, node, plan) };
        }
    }
    let fail = |m: &str| launch_error("launch_flash_attn", m.to_string());
    let (budget, per_sm) = shared_budget(ctx.info);
    let (Some(q), Some(k), Some(v)) = (node.src(0), node.src(1), node.src(2)) else {
        return Err(fail("q, k and v are required"));
    };
    // Pipelined (cp.async, 4- or 16-byte words) where the decode variant runs on sm_80+.
    let async_copies = sm_number(&ctx.info.arch).is_some_and(|sm| sm >= 80);
    let piped = if async_copies { fa_shape(node, budget, 2) } else { None }.filter(|(s, t)| {
        matches!(t.variant, Variant::Decode(_))
            && copy_word(k, s.k_bytes as usize, t.k_ss) >= 4
            && copy_word(v, s.v_bytes as usize, t.v_ss) >= 4
    });
    let (mut s, t) = match piped {
        Some((mut s, t)) => {
            s.pipe = 1;
            (s, t)
        }
        None => fa_shape(node, budget, 1).ok_or_else(|| fail("node not accepted"))?,
    };
    s.k_word = copy_word(k, s.k_bytes as usize, t.k_ss);
    s.v_word = copy_word(v, s.v_bytes as usize, t.v_ss);
    let n_seq = q.ne[3] as usize;
    let base = s.row_blocks as usize * s.n_head_kv as usize * n_seq;
    let mut per_cu = (per_sm / t.shared.max(1)).clamp(1, 8);
    if matches!(t.variant, Variant::Decode(_)) {
        per_cu = per_cu.min(SMALL_BLOCKS_PER_SM);
    }
    let target = ctx.info.compute_units.max(1) as usize * per_cu;
    let (n_splits, split_len) = splits(base, s.n_kv as usize, t.kt, target);
    s.n_splits = n_splits as i32;
    s.split_len = split_len as i32;

    let group_rows = (s.group * s.n_q) as usize;
    let rows_total = group_rows * s.n_head_kv as usize * n_seq;
    let partial = if n_splits > 1 {
        let bytes = rows_total * n_splits * (s.dv as usize + 4) * 4;
        ctx.scratch.get(bytes)?
    } else {
        DevicePtr(0)
    };
    let grid = [n_splits as u32, (s.row_blocks * s.n_head_kv) as u32, n_seq as u32];
    // SAFETY: the shape's strides, extents and copy widths were checked against the tensors
    // above; `partial` holds every split's sums of every row when there is more than one split.
    unsafe { queue_entry(ctx, node, entry(k.ty, v.ty, t.variant), grid, t.shared, partial, s) }?;
    if n_splits > 1 {
        // SAFETY: the first kernel wrote every row's splits into `partial` ahead on the stream.
        unsafe { queue_reduce(ctx, node, partial, s, rows_total) }?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::GraphBuilder;

    #[test]
    fn strides_spread_each_read_over_the_banks() {
        // K rows read by 4 lanes each (32-row tiles): the next row 64 bytes on in each 128.
        assert_eq!(shared_stride(ElemType::F16, 256, 4), 320);
        assert_eq!(shared_stride(ElemType::F16, 256, 2), 288);
        assert_eq!(shared_stride(ElemType::F16, 256, 1), 272);
        assert_eq!(shared_stride(ElemType::F16, 80, 1), 80);
        assert_eq!(shared_stride(ElemType::F32, 160, 16), 176);
        assert_eq!(shared_stride(ElemType::Q8_0, 136, 4), 140);
        assert_eq!(shared_stride(ElemType::Q4_0, 18, 1), 20);
        assert_eq!(shared_stride(ElemType::Q5_0, 22, 2), 28);
    }

    #[test]
    fn tilings_fit_their_budget_and_cover_every_row() {
        for (dk, dv) in [(40, 40), (64, 64), (72, 72), (128, 128), (256, 256), (576, 512)] {
            for rows in [1usize, 4, 5, 8, 16, 17, 128, 2048] {
                for (budget, buffers) in [(48 * 1024, 1), (64 * 1024, 1), (96 * 1024, 1), (96 * 1024, 2)] {
                    let k = (ElemType::F16, dk * 2);
                    let Some(t) = tiling(dk, dv, rows, k, (ElemType::F16, dv * 2), budget, buffers) else {
                        panic!("no tiling for {dk}/{dv} rows {rows} budget {budget} x{buffers}");
                    };
                    assert!(t.shared <= budget);
                    match t.variant {
                        Variant::Decode(r) => {
                            assert!(rows <= r && t.rows == r && t.row_groups * DECODE_OROWS == r, "{t:?}")
                        }
                        Variant::Large => {
                            assert!(
                                t.rows <= LARGE_ROWS && t.rows.div_ceil(t.row_groups) <= LARGE_OROWS,
                                "{t:?}"
                            )
                        }
                    }
                    assert!(t.row_groups * t.kv_groups * (dv / 8) <= THREADS, "{t:?}");
                    assert!(t.kv_groups >= 1);
                    // The output sums fit before the row state.
                    assert!(t.rows * dv * 4 <= t.kv_area + t.rows * (dk + t.kt) * 4);
                    assert!(t.kv_area >= buffers * t.kt * (t.k_ss + t.v_ss));
                }
            }
        }
        // Decode of a Llama-3-8B layer: its 4 q heads per kv head in one block, 8 kv groups.
        let f16 = |d: usize| (ElemType::F16, d * 2);
        let t = tiling(128, 128, 4, f16(128), f16(128), 96 * 1024, 1).unwrap();
        assert_eq!(
            (t.variant, t.rows, t.kt, t.row_groups, t.kv_groups),
            (Variant::Decode(4), 4, 64, 1, 8)
        );
        // Pipelined: two tiles of 32 rows.
        let t = tiling(128, 128, 5, f16(128), f16(128), 96 * 1024, 2).unwrap();
        assert_eq!(
            (t.variant, t.kt, t.kv_area),
            (Variant::Decode(8), 32, 2 * 32 * (320 + 272))
        );
        // Prefill: 32 rows.
        let t = tiling(128, 128, 4 * 512, f16(128), f16(128), 96 * 1024, 1).unwrap();
        assert_eq!(
            (t.variant, t.rows, t.row_groups, t.kv_groups),
            (Variant::Large, 32, 4, 2)
        );
        assert!(tiling(128, 1032, 4, f16(128), f16(1032), 96 * 1024, 1).is_none());
        assert!(tiling(12, 12, 4, f16(12), f16(12), 96 * 1024, 1).is_none());
    }

    #[test]
    fn splits_fill_the_device_with_whole_tiles() {
        // 8 kv heads over 16384 rows: 528 wanted, 66 splits of 4 tiles -> 64 splits of 256 rows.
        assert_eq!(splits(8, 16384, 64, 528), (64, 256));
        assert_eq!(splits(600, 16384, 64, 528), (1, 16384));
        assert_eq!(splits(8, 1, 64, 528), (1, 64));
        assert_eq!(splits(1, 1 << 20, 64, 1 << 20), (1024, 1024));
        let (n, len) = splits(3, 1000, 32, 100);
        assert!(n * len >= 1000 && (n - 1) * len < 1000 && len % 32 == 0);
    }

    #[test]
    fn accepts_every_kv_type_and_declines_what_the_kernel_cannot_run() {
        let mut b = GraphBuilder::new();
        let q = b.new_tensor(ElemType::F32, &[128, 1, 32, 1]);
        let mut nodes = Vec::new();
        for ty in KV_TYPES {
            let k = b.new_tensor(ty, &[128, 300, 8, 1]);
            let v = b.new_tensor(ElemType::F16, &[128, 300, 8, 1]);
            let m = b.new_tensor(ElemType::F16, &[300, 1, 1, 1]);
            nodes.push(b.flash_attn_ext(q, k, v, Some(m), None, 0.1, 0.0, 0.0).unwrap());
        }
        let q12 = b.new_tensor(ElemType::F32, &[12, 1, 4, 1]);
        let k12 = b.new_tensor(ElemType::F16, &[12, 10, 4, 1]);
        let odd = b.flash_attn_ext(q12, k12, k12, None, None, 0.1, 0.0, 0.0).unwrap();
        let kk = b.new_tensor(ElemType::Q4K, &[256, 10, 8, 1]);
        let q256 = b.new_tensor(ElemType::F32, &[256, 1, 8, 1]);
        let kquant = b.flash_attn_ext(q256, kk, kk, None, None, 0.1, 0.0, 0.0).unwrap();
        let g = b.build();
        for &n in &nodes {
            let node = Node::of(&g, n);
            assert!(accepts(&node, None), "{:?}", node.src(1).unwrap().ty);
            let (s, t) = fa_shape(&node, 96 * 1024, 1).unwrap();
            assert_eq!((s.group, s.rows, s.row_blocks, s.n_kv, s.has_mask), (4, 4, 1, 300, 1));
            assert_eq!(t.variant, Variant::Decode(4));
            assert_eq!(s.k_type as u32, node.src(1).unwrap().ty.ggml_id());
            assert!(t.shared <= 96 * 1024);
        }
        // A head size that is not a multiple of 8.
        assert!(!accepts(&Node::of(&g, odd), None));
        // A K type the CPU fallback does not read either.
        assert!(!accepts(&Node::of(&g, kquant), None));
    }

    #[test]
    fn tensor_core_kernels_take_f16_prefill_of_their_head_sizes() {
        let mut b = GraphBuilder::new();
        let mut node = |dk: i64, n_q: i64, ty: ElemType| {
            let q = b.new_tensor(ElemType::F32, &[dk, n_q, 32, 1]);
            let k = b.new_tensor(ty, &[dk, 1024, 8, 1]);
            let v = b.new_tensor(ty, &[dk, 1024, 8, 1]);
            let m = b.new_tensor(ElemType::F16, &[1024, n_q, 1, 1]);
            b.flash_attn_ext(q, k, v, Some(m), None, 0.1, 0.0, 0.0).unwrap()
        };
        let d128 = node(128, 512, ElemType::F16);
        let d256 = node(256, 512, ElemType::F16);
        let d80 = node(80, 512, ElemType::F16);
        let few = node(128, MMA_MIN_QUERIES - 1, ElemType::F16);
        let q8 = node(128, 512, ElemType::Q8_0);
        let g = b.build();
        let plan = |n, arch| mma_plan(&Node::of(&g, n), arch);
        assert_eq!(
            plan(d128, "sm_90"),
            Some(MmaPlan {
                entry: "tandem_fa_mma_d128",
                kt: 64,
                stages: 2,
                shared: 272 * (64 + 4 * 64)
            })
        );
        let p256 = plan(d256, "sm_90").unwrap();
        assert_eq!((p256.entry, p256.kt, p256.stages), ("tandem_fa_mma_d256", 32, 2));
        assert!(plan(d256, "sm_89").unwrap().shared <= 99 * 1024);
        // Where a block gets less shared memory, one K/V tile at a time, or none.
        assert_eq!(mma_stages(528, 32, 80 * 1024), Some((1, 528 * (64 + 2 * 32))));
        assert_eq!(mma_stages(528, 32, 48 * 1024), None);
        // Other head sizes, few queries, quantized K/V and devices without mma: the kernels above.
        for (n, arch) in [
            (d80, "sm_90"),
            (few, "sm_90"),
            (q8, "sm_90"),
            (d128, "sm_75"),
            (d128, "gfx1100"),
        ] {
            assert_eq!(plan(n, arch), None, "{arch}");
        }
        let fam = tandem_kernels_hip::find(FAMILY).unwrap();
        for e in [
            "tandem_fa_mma_d64",
            "tandem_fa_mma_d96",
            "tandem_fa_mma_d128",
            "tandem_fa_mma_d256",
        ] {
            assert!(fam.entries.contains(&e));
        }
    }

    #[test]
    fn tensor_core_decode_takes_f16_short_batches() {
        let mut b = GraphBuilder::new();
        let mut node = |dk: i64, n_q: i64, ty: ElemType| {
            let q = b.new_tensor(ElemType::F32, &[dk, n_q, 32, 1]);
            let k = b.new_tensor(ty, &[dk, 4096, 8, 1]);
            let v = b.new_tensor(ty, &[dk, 4096, 8, 1]);
            let m = b.new_tensor(ElemType::F16, &[4096, n_q, 1, 1]);
            b.flash_attn_ext(q, k, v, Some(m), None, 0.1, 0.0, 0.0).unwrap()
        };
        let one = node(128, 1, ElemType::F16);
        let batch = node(256, MMA_MIN_QUERIES - 1, ElemType::F16);
        let prompt = node(128, MMA_MIN_QUERIES, ElemType::F16);
        let q8 = node(128, 1, ElemType::Q8_0);
        let d80 = node(80, 1, ElemType::F16);
        let g = b.build();
        let plan = |n, arch| mmd_plan(&Node::of(&g, n), arch);
        assert_eq!(
            plan(one, "sm_90"),
            Some(MmdPlan {
                entry: "tandem_fa_mmd_d128",
                stages: 3,
                shared: 272 * (16 + 4 * 3 * 32)
            })
        );
        // Two such blocks fit an H100's / H200's SM (228 KiB, 1 KiB reserved a block); a 99 KiB
        // device takes two stages a warp.
        let p = plan(one, "sm_90").unwrap();
        assert!(2 * (p.shared + 1024) <= 228 * 1024);
        assert_eq!(plan(one, "sm_86").map(|p| p.stages), Some(2));
        assert_eq!(plan(batch, "sm_90").map(|p| p.stages), Some(3));
        let p = plan(batch, "sm_89").unwrap();
        assert_eq!(p.entry, "tandem_fa_mmd_d256");
        assert!(p.shared <= 99 * 1024 && p.shared >= 4 * 16 * 258 * 4);
        // A prompt is the prefill kernel's; other types, head sizes and devices the f32 kernels'.
        assert!(plan(prompt, "sm_90").is_none() && mma_plan(&Node::of(&g, prompt), "sm_90").is_some());
        for (n, arch) in [(q8, "sm_90"), (d80, "sm_90"), (one, "sm_75"), (one, "gfx942")] {
            assert_eq!(plan(n, arch), None, "{arch}");
        }
        let fam = tandem_kernels_hip::find(FAMILY).unwrap();
        for e in [
            "tandem_fa_mmd_d64",
            "tandem_fa_mmd_d96",
            "tandem_fa_mmd_d128",
            "tandem_fa_mmd_d256",
        ] {
            assert!(fam.entries.contains(&e));
        }
    }

    #[test]
    fn entries_by_types() {
        assert_eq!(
            entry(ElemType::F16, ElemType::F16, Variant::Decode(4)),
            "tandem_fa_f16_r4"
        );
        assert_eq!(
            entry(ElemType::Q8_0, ElemType::Q8_0, Variant::Large),
            "tandem_fa_q8_0_l"
        );
        assert_eq!(
            entry(ElemType::Q8_0, ElemType::F16, Variant::Decode(16)),
            "tandem_fa_any_r16"
        );
        assert_eq!(
            entry(ElemType::IQ4NL, ElemType::Q5_1, Variant::Large),
            "tandem_fa_any_l"
        );
        // Every entry is in the catalog.
        let fam = tandem_kernels_hip::find(FAMILY).unwrap();
        for k in [ElemType::F16, ElemType::Q8_0, ElemType::Q4_0] {
            for v in [
                Variant::Decode(4),
                Variant::Decode(8),
                Variant::Decode(16),
                Variant::Large,
            ] {
                assert!(fam.entries.contains(&entry(k, k, v)));
            }
        }
        assert!(fam.entries.contains(&"tandem_fa_reduce"));
    }
}
