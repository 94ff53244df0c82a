//! Launchers of the matmul kernels (`kernels-hip/src/gemv.hip`, `gemm.hip`, `mma.hip`): the shape structs
//! the kernels take by value, the q8_1 scratch layout, launch geometry, and the launches.
//!
//! Geometry (see the .hip file heads):
//! - `tandem_quantize_q8_1`: block 256, grid (ceil(k / 256), min(columns, 65535)); one thread
//!   per activation value. Only for GEMVs whose columns do not fit a block's shared memory.
//! - `tandem_gemv_<type>_c1/_c8`, quantized: block 256, grid (ceil(m / (waves * rpw)),
//!   batches); each wave walks up to `rpw` rows alone, the blocks striding over row groups (see
//!   [`rows_per_wave`]; several columns of a 32-value block type: rows in pairs), staged per
//!   wave in 2048-weight chunks (dynamic shared memory, see [`gemv_shared_bytes`]) and summed
//!   with a wave reduction; when the block's q8_1 columns fit ([`gemv_fuses_quantize`]) the
//!   block quantizes them itself and the node is one launch. `tandem_gemv_<t>_s1` (one column
//!   of q4_0, iq4_nl, q4_K where [`gemv_seg_fits`]): block 256, grid (`seg_blocks`, batches);
//!   the waves split the rows into contiguous stretches walked in steps of one 144-byte segment
//!   per lane (dynamic shared memory: the stages and the block's q8_1 column);
//!   `tandem_gemv_<t>_u1` (q4_0, q4_K, q8_0 and q6_K where [`seg_in_units`]) likewise, the waves
//!   taking units of whole rows in turn across the grid, a ring of stages per wave (two, q8_0
//!   three; [`seg_unit_slots`]); where [`SEGU_HELD`] steps per wave cover the units on at most
//!   one block per SM, as few blocks as give every wave that many ([`units_one_per_unit`]),
//!   else about two per SM. Float
//!   weights: block 128, grid (ceil(m / rows), batches), `GEMV_FLOAT_ROWS` rows per block for
//!   one column (else one), each thread loading several 16-byte vectors of every row at once.
//! - `tandem_mul_mat_id_<type>`: as the GEMV of its type, grid.y = n_used * n_tokens;
//!   `tandem_mmid_<t>_u1` (q4_0, q4_K, q8_0 and q6_K where [`mmid_in_units`]): as
//!   `tandem_gemv_<t>_u1` on each slot's expert, grid ([`mmid_units_config`], n_used * n_tokens).
//! - `tandem_gemm_<type>`: block 256, grid (ceil(n / 64), ceil(m / 64), batches); 64 x 64 tiles.
//! - `tandem_mma_<type>` (NVIDIA sm_80+, see [`mma_entry`] and [`mma_tile`]): int8 mma on the
//!   q8_1 copy of src1 for weights in 32-value groups, f16 (bf16) mma on an f16 (bf16) copy of
//!   src1 (`tandem_mma_f16_copy`, `tandem_mma_bf16_copy`) for f16 (bf16) weights; grid (ceil(n /
//!   tile n), ceil(m / tile m), batches). Int8 (32-value block types, q2_K .. q6_K): block 128,
//!   64 x 64 tiles, k steps (four 32-value blocks, or one superblock) in flight through cp.async,
//!   dynamic shared memory [`mmq_shared_bytes`]; f16 and bf16: block 256, 128 x 64 tiles.
//! - `tandem_wgmma_<type>` (NVIDIA sm_90, see [`wgmma_takes`]): f16, bf16 and the 32-value block
//!   types on the f16 (bf16) copy of src1 with warpgroup mma; block 256 (two warpgroups), 128 x
//!   256 tiles, dynamic shared memory [`wgmma_shared_bytes`], a one-dimensional grid split as
//!   the int8 GEMM's below (the block types' split tiles scaled by their columns' scales before
//!   they reach scratch).
//! - `tandem_wgmmq_<type>` (NVIDIA sm_90, the 32-value block types where [`wgmma_takes`] does not,
//!   q4_K and q5_K): int8 warpgroup mma on the q8_1 copy of src1; block 512 (four warpgroups),
//!   128 x 128 tiles, one-dimensional grid over the tiles of all batches, those of the last
//!   partial wave split in up to four k ranges ([`MmSplit`]), dynamic shared memory
//!   [`wgmmq_shared_bytes`]; then, where tiles were split, `tandem_mm_split_sum`: block 128 per 8
//!   columns of a split tile, grid (split tiles, 16).
//! - `tandem_mmv_<type>` (NVIDIA sm_80+, [`mmv_entry`], 3..=8 columns, [`mmv_fits`]): int8 mma on
//!   the q8_1 copy of src1 for batched decode; block 128 (four warps splitting k) per tile of 32
//!   weight rows, each block taking every grid.x-th tile ([`mmv_config`]: at most two blocks per
//!   compute unit), dynamic shared memory [`mmv_shared_bytes`].

use crate::config::F16Prefill;
use crate::gpu::api::{DevicePtr, LaunchConfig};
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, LaunchCtx, Node};
use crate::gpu::safe::KernelArgs;
use tandem_graph::{ElemType, GluOp, Tensor};

pub const GEMV_FAMILY: &str = "gemv";
pub const GEMM_FAMILY: &str = "gemm";
pub const MMA_FAMILY: &str = "mma";
/// Threads and output tile (weight rows x columns) of the f16 tensor-core GEMM of `mma.hip`.
pub const MMA_THREADS: u32 = 256;
pub const MMA_TILE_M: i64 = 128;
pub const MMA_TILE_N: i64 = 64;
/// Threads, output tile and k steps in shared memory of the Hopper GEMMs (`tandem_wgmma_*`,
/// `TANDEM_WGMMA_*` of mma.hip): two warpgroups, each 64 rows of the tile against all its
/// columns; steps of 64 values (a 128-byte f16 row per weight row and activation column).
pub const WGMMA_THREADS: u32 = 256;
pub const WGMMA_TILE_M: i64 = 128;
pub const WGMMA_TILE_N: i64 = 256;
const WGMMA_TILE: (i64, i64) = (WGMMA_TILE_M, WGMMA_TILE_N);
pub const WGMMA_STAGES: i64 = 4;
/// Steps in shared memory of the Hopper f16 GEMM of the 32-value block types
/// (`TANDEM_WGMMA_QSTAGES`).
pub const WGMMA_QSTAGES: i64 = 4;
/// Threads, output tile and k steps in shared memory of the Hopper int8 GEMMs of the 32-value
/// block types (`tandem_wgmmq_*`, `TANDEM_WGMMQ_*` of mma.hip): four
/// warpgroups, each 64 columns of the tile against 64 of its weight rows; steps of 128 values (a
/// 128-byte int8 row per weight row and activation column).
pub const WGMMQ_THREADS: u32 = 512;
pub const WGMMQ_TILE_M: i64 = 128;
pub const WGMMQ_TILE_N: i64 = 128;
const WGMMQ_TILE: (i64, i64) = (WGMMQ_TILE_M, WGMMQ_TILE_N);
pub const WGMMQ_STAGES: i64 = 4;
/// The same for the pipelined int8 GEMM of the quantized types (`TANDEM_MMQ_*`).
pub const MMQ_THREADS: u32 = 128;
pub const MMQ_TILE_M: i64 = 64;
pub const MMQ_TILE_N: i64 = 64;
/// Tensor-core GEMV (`TANDEM_MMV_*` in mma.hip): threads per block (four warps splitting k),
/// weight rows per block, columns, 32-value groups per chunk.
pub const MMV_THREADS: u32 = 128;
pub const MMV_ROWS: i64 = 32;
pub const MMV_COLUMNS: i64 = 8;
pub const MMV_GROUPS: i64 = 8;
/// The fewest columns that take the tensor-core GEMV: with two, the integer-dot GEMV is as fast
/// (H200, q4_0 14336 x 4096: 28.4 vs 29.5 us; at four columns 40.6 vs 30.6).
pub const MMV_MIN_COLUMNS: i64 = 3;
/// Threads of a quantized-GEMV block (`TANDEM_MV_THREADS` of gemv.hip): eight 32-lane waves
/// share one quantized copy of the activations.
pub const GEMV_THREADS: u32 = 256;
/// Threads of a float-weight GEMV block.
pub const GEMV_FLOAT_THREADS: u32 = 128;
/// Rows of a one-column float-weight GEMV block (`TANDEM_MV_FLOAT_ROWS` of gemv.hip): each thread
/// keeps the loads of both rows in flight together. Multi-column blocks take one row.
pub const GEMV_FLOAT_ROWS: i64 = 2;
/// Quantized-GEMV blocks wanted per SM/CU; taller matrices give each wave more rows (fewer
/// blocks, so fewer copies of the activations to quantize). Two fit an H200 SM with the 80-120
/// registers NVRTC 13.0 gives these kernels; measured on one (q4_0 14336 x 4096): three made
/// the grid a second wave of blocks (25.6 vs 18.8 us), three with launch bounds holding the
/// registers to 80 were still slower (20.0 vs 19.1 with two), one left the load latency
/// uncovered (22.7 vs 18.6).
const GEMV_BLOCKS_PER_UNIT: i64 = 2;
/// Weights per staged chunk of a quantized GEMV row (`TANDEM_MV_GROUPS * 32` of gemv.hip).
pub const GEMV_CHUNK: i64 = 2048;
/// Largest q8_1 copy of a block's columns (values plus scale pairs) quantized into shared memory
/// by the GEMV itself: 8192 values, e.g. one column of k = 8192 or eight of k = 1024. Longer
/// columns cost each block more than the separate quantize launch does. With the wave stages (at
/// most 8 x 2 x 2176 bytes) it stays under the 48 KiB every device gives a block.
pub const GEMV_FUSED_ACT_BYTES: i64 = 8192 + 8192 / 32 * 8;
pub const GEMM_THREADS: u32 = 256;
pub const GEMM_TILE: i64 = 64;
const QUANTIZE_THREADS: u32 = 256;
/// Largest grid.y / grid.z every device accepts.
pub const MAX_GRID_YZ: i64 = 65_535;
/// Largest grid.x (CUDA and HIP: 2^31 - 1).
pub const MAX_GRID_X: i64 = i32::MAX as i64;
/// The q8_1 activation copy may not exceed this (a decode step needs a few hundred KiB).
pub const MAX_SCRATCH: usize = 1 << 30;
/// Most columns the GEMV kernels take; wider products go to the GEMM.
pub const GEMV_MAX_COLUMNS: i64 = 8;
/// Longest column the segment GEMV quantizes into shared memory (it always does): with its
/// stages (eight waves of 32 lanes x 144 bytes) a block stays within 100 KiB (in units, k <=
/// 8192 and two stages a wave of 144-byte segments, or k <= 4096 and three of 136 bytes:
/// within 108 KiB).
pub const GEMV_SEG_MAX_K: i64 = 32768;
/// The name `TANDEM_DISABLE_DISPATCH` takes to keep one-column q4_0, iq4_nl, q4_K, q8_0 and q6_K
/// MUL_MAT off the segment GEMV (the row-walk GEMV `_c1` runs instead); `hip.gemv` covers it too.
pub const SEG_SWITCH: &str = "hip.gemv.seg";
/// The name `TANDEM_DISABLE_DISPATCH` takes to keep the segment GEMV in stretches
/// (`tandem_gemv_<t>_s1`) where it would run in units ([`seg_in_units`]; q8_0 and q6_K, which
/// have no stretches, go back to the row walk); [`SEG_SWITCH`] covers it too.
pub const SEG_UNITS_SWITCH: &str = "hip.gemv.seg.units";
/// The name `TANDEM_DISABLE_DISPATCH` takes to keep grids of at most one step a wave on the
/// units walk of two slots (`tandem_gemv_<t>_u1`) rather than its one-slot form
/// (`tandem_gemv_<t>_n1`, [`seg_narrow`]); [`SEG_UNITS_SWITCH`] and [`SEG_SWITCH`] cover it too.
pub const SEG_NARROW_SWITCH: &str = "hip.gemv.seg.units.narrow";

/// `tandem_mm_shape` of gemv.hip, gemm.hip and mma.hip.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MulMatShape {
    pub k: i64,
    pub m: i64,
    pub n: i64,
    pub ne12: i64,
    pub ne13: i64,
    pub r2: i64,
    pub r3: i64,
    pub nb01: i64,
    pub nb02: i64,
    pub nb03: i64,
    pub nb10: i64,
    pub nb11: i64,
    pub nb12: i64,
    pub nb13: i64,
    pub nb1: i64,
    pub nb2: i64,
    pub nb3: i64,
    /// Bit 0 ([`MM_ACT_EARLY`]): the one-column GEMV in units may read and quantize the
    /// activations before its tandem_grid_wait; bits 8..15 ([`MM_GLU_SHIFT`], the segment GEMVs):
    /// a GLU gate applied to the column as it is read; 0 for every other kernel.
    pub flags: i64,
}
const _: () = assert!(std::mem::size_of::<MulMatShape>() == 144);

/// `MulMatShape::flags` bit: the activations are in place before the kernel starts
/// (`LaunchCtx::act_ready`), so `tandem_gemv_<t>_u1` reads and quantizes them before it waits for
/// the kernels ahead, writing nothing but shared memory before the wait (`TANDEM_MM_ACT_EARLY` of
/// gemv.hip).
pub const MM_ACT_EARLY: i64 = 1;

impl MulMatShape {
    /// The shape of `dst = src0 x src1` (MUL_MAT); `None` for an empty broadcast batch.
    pub fn new(dst: &Tensor, src0: &Tensor, src1: &Tensor) -> Option<MulMatShape> {
        if src0.ne[2] <= 0 || src0.ne[3] <= 0 {
            return None;
        }
        Some(MulMatShape {
            k: src0.ne[0],
            m: src0.ne[1],
            n: src1.ne[1],
            ne12: src1.ne[2],
            ne13: src1.ne[3],
            r2: src1.ne[2] / src0.ne[2],
            r3: src1.ne[3] / src0.ne[3],
            nb01: src0.nb[1] as i64,
            nb02: src0.nb[2] as i64,
            nb03: src0.nb[3] as i64,
            nb10: src1.nb[0] as i64,
            nb11: src1.nb[1] as i64,
            nb12: src1.nb[2] as i64,
            nb13: src1.nb[3] as i64,
            nb1: dst.nb[1] as i64,
            nb2: dst.nb[2] as i64,
            nb3: dst.nb[3] as i64,
            flags: 0,
        })
    }

    pub fn batches(&self) -> i64 {
        self.ne12 * self.ne13
    }
}

/// `tandem_mmid_shape` of gemv.hip and mma.hip.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MulMatIdShape {
    pub k: i64,
    pub m: i64,
    pub n_expert: i64,
    pub n_used: i64,
    pub n_tokens: i64,
    pub n_b: i64,
    pub nb01: i64,
    pub nb02: i64,
    pub nb11: i64,
    pub nb12: i64,
    pub ids_nb0: i64,
    pub ids_nb1: i64,
    pub nb1: i64,
    pub nb2: i64,
    pub nb10: i64,
    /// Bit 0 ([`MMID_IDS_EARLY`]): the GEMV-form kernel may read the ids and the experts'
    /// weights before its tandem_grid_wait; bit 1 ([`MMID_ACT_EARLY`]): the units form its
    /// column too.
    pub flags: i64,
}
const _: () = assert!(std::mem::size_of::<MulMatIdShape>() == 128);

/// `MulMatIdShape::flags` bit: the expert ids are in place before the kernel starts
/// (`LaunchCtx::ids_ready`), so `tandem_mul_mat_id_<t>` of a quantized type reads them, and the
/// first weights of its experts, before it waits for the kernels ahead
/// (`TANDEM_MMID_IDS_EARLY` of gemv.hip).
pub const MMID_IDS_EARLY: i64 = 1;

/// `MulMatIdShape::flags` bit, with [`MMID_IDS_EARLY`]: the activations are in place before the
/// kernel starts (`LaunchCtx::act_ready`), so `tandem_mmid_<t>_u1` reads and quantizes its
/// slot's column before the wait too (`TANDEM_MMID_ACT_EARLY` of gemv.hip).
pub const MMID_ACT_EARLY: i64 = 2;

impl MulMatIdShape {
    pub fn new(dst: &Tensor, src0: &Tensor, src1: &Tensor, ids: &Tensor) -> MulMatIdShape {
        MulMatIdShape {
            k: src0.ne[0],
            m: src0.ne[1],
            n_expert: src0.ne[2],
            n_used: ids.ne[0],
            n_tokens: ids.ne[1],
            n_b: src1.ne[1],
            nb01: src0.nb[1] as i64,
            nb02: src0.nb[2] as i64,
            nb11: src1.nb[1] as i64,
            nb12: src1.nb[2] as i64,
            ids_nb0: ids.nb[0] as i64,
            ids_nb1: ids.nb[1] as i64,
            nb1: dst.nb[1] as i64,
            nb2: dst.nb[2] as i64,
            nb10: src1.nb[0] as i64,
            flags: 0,
        }
    }

    pub fn slots(&self) -> i64 {
        self.n_used * self.n_tokens
    }
}

/// `tandem_q8_shape`: src1 as [k, ne1, ne2, ne3] with byte strides.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Q8Shape {
    pub ne: [i64; 4],
    pub nb: [i64; 4],
}
const _: () = assert!(std::mem::size_of::<Q8Shape>() == 64);

impl Q8Shape {
    pub fn of(src1: &Tensor) -> Q8Shape {
        Q8Shape {
            ne: src1.ne,
            nb: src1.nb.map(|b| b as i64),
        }
    }

    pub fn columns(&self) -> i64 {
        self.ne[1] * self.ne[2] * self.ne[3]
    }
}

/// Byte layout of the q8_1 activation copy of `columns` rows of `k` values: the int8 values
/// (`k` per column), then one (d, d * sum) f32 pair per 32 values. Returns (offset of the pairs,
/// total bytes); `None` when `k` is not a multiple of 32 or the size overflows the limit.
pub fn q8_1_layout(columns: i64, k: i64) -> Option<(usize, usize)> {
    if columns <= 0 || k <= 0 || k % 32 != 0 {
        return None;
    }
    let qs = usize::try_from(columns.checked_mul(k)?).ok()?;
    let ds = qs / 32 * 8;
    let total = qs.checked_add(ds)?;
    (total <= MAX_SCRATCH).then_some((qs, total))
}

/// Entry names of one weight type: (gemv one column, gemv up to eight, mul_mat_id, gemm).
pub fn entries(ty: ElemType) -> Option<[&'static str; 4]> {
    Some(match ty {
        ElemType::F32 => [
            "tandem_gemv_f32_c1",
            "tandem_gemv_f32_c8",
            "tandem_mul_mat_id_f32",
            "tandem_gemm_f32",
        ],
        ElemType::F16 => [
            "tandem_gemv_f16_c1",
            "tandem_gemv_f16_c8",
            "tandem_mul_mat_id_f16",
            "tandem_gemm_f16",
        ],
        ElemType::BF16 => [
            "tandem_gemv_bf16_c1",
            "tandem_gemv_bf16_c8",
            "tandem_mul_mat_id_bf16",
            "tandem_gemm_bf16",
        ],
        ElemType::Q4_0 => [
            "tandem_gemv_q4_0_c1",
            "tandem_gemv_q4_0_c8",
            "tandem_mul_mat_id_q4_0",
            "tandem_gemm_q4_0",
        ],
        ElemType::Q4_1 => [
            "tandem_gemv_q4_1_c1",
            "tandem_gemv_q4_1_c8",
            "tandem_mul_mat_id_q4_1",
            "tandem_gemm_q4_1",
        ],
        ElemType::Q5_0 => [
            "tandem_gemv_q5_0_c1",
            "tandem_gemv_q5_0_c8",
            "tandem_mul_mat_id_q5_0",
            "tandem_gemm_q5_0",
        ],
        ElemType::Q5_1 => [
            "tandem_gemv_q5_1_c1",
            "tandem_gemv_q5_1_c8",
            "tandem_mul_mat_id_q5_1",
            "tandem_gemm_q5_1",
        ],
        ElemType::Q8_0 => [
            "tandem_gemv_q8_0_c1",
            "tandem_gemv_q8_0_c8",
            "tandem_mul_mat_id_q8_0",
            "tandem_gemm_q8_0",
        ],
        ElemType::Q2K => [
            "tandem_gemv_q2_K_c1",
            "tandem_gemv_q2_K_c8",
            "tandem_mul_mat_id_q2_K",
            "tandem_gemm_q2_K",
        ],
        ElemType::Q3K => [
            "tandem_gemv_q3_K_c1",
            "tandem_gemv_q3_K_c8",
            "tandem_mul_mat_id_q3_K",
            "tandem_gemm_q3_K",
        ],
        ElemType::Q4K => [
            "tandem_gemv_q4_K_c1",
            "tandem_gemv_q4_K_c8",
            "tandem_mul_mat_id_q4_K",
            "tandem_gemm_q4_K",
        ],
        ElemType::Q5K => [
            "tandem_gemv_q5_K_c1",
            "tandem_gemv_q5_K_c8",
            "tandem_mul_mat_id_q5_K",
            "tandem_gemm_q5_K",
        ],
        ElemType::Q6K => [
            "tandem_gemv_q6_K_c1",
            "tandem_gemv_q6_K_c8",
            "tandem_mul_mat_id_q6_K",
            "tandem_gemm_q6_K",
        ],
        ElemType::IQ4NL => [
            "tandem_gemv_iq4_nl_c1",
            "tandem_gemv_iq4_nl_c8",
            "tandem_mul_mat_id_iq4_nl",
            "tandem_gemm_iq4_nl",
        ],
        _ => return None,
    })
}

/// The tensor-core GEMM entry for weights of `ty`, if there is one: int8 mma on q8_1 activations
/// for the quantized types (q2_K, q3_K and q6_K, a scale per 16 values: one mma per half group),
/// f16 (bf16) mma for f16 (bf16).
pub fn mma_entry(ty: ElemType) -> Option<&'static str> {
    Some(match ty {
        ElemType::F16 => "tandem_mma_f16",
        ElemType::BF16 => "tandem_mma_bf16",
        ElemType::Q4_0 => "tandem_mma_q4_0",
        ElemType::Q4_1 => "tandem_mma_q4_1",
        ElemType::Q5_0 => "tandem_mma_q5_0",
        ElemType::Q5_1 => "tandem_mma_q5_1",
        ElemType::Q8_0 => "tandem_mma_q8_0",
        ElemType::IQ4NL => "tandem_mma_iq4_nl",
        ElemType::Q4K => "tandem_mma_q4_K",
        ElemType::Q5K => "tandem_mma_q5_K",
        ElemType::Q2K => "tandem_mma_q2_K",
        ElemType::Q3K => "tandem_mma_q3_K",
        ElemType::Q6K => "tandem_mma_q6_K",
        _ => return None,
    })
}

/// The name `TANDEM_DISABLE_DISPATCH` takes to keep MUL_MAT and MUL_MAT_ID off the tensor-core
/// kernels (the portable GEMM and the GEMV-form MUL_MAT_ID run instead).
pub const MMA_SWITCH: &str = "hip.mma";

/// Whether the launchers may use `mma.hip` on a device of compile target `arch`.
fn mma_allowed(arch: &str) -> bool {
    has_mma(arch) && !crate::config::Config::get().is_disabled(MMA_SWITCH)
}

/// Whether the launchers may use the tensor-core GEMV on a device of compile target `arch`.
fn mmv_allowed(arch: &str) -> bool {
    has_mma(arch) && !crate::config::Config::get().is_disabled(MMV_SWITCH)
}

/// Whether a device of compile target `arch` has the mma instructions `mma.hip` uses (NVIDIA
/// sm_80 and newer).
pub fn has_mma(arch: &str) -> bool {
    crate::gpu::api::sm_number(arch).is_some_and(|v| v >= 80)
}

/// Family of the WMMA tiles (`mma.hip` built with their entries).
pub const WMMA_FAMILY: &str = "wmma";

/// The name `TANDEM_DISABLE_DISPATCH` takes to keep prefill off the WMMA tiles (the portable GEMM
/// and the GEMV-form MUL_MAT_ID run instead).
pub const WMMA_SWITCH: &str = "hip.wmma";

/// The WMMA tiles for MUL_MAT prefill with weights of `ty`, if any: f16 (on an f16 copy of the
/// activations) and every quantized type (on the q8_1 copy).
pub fn wmma_entry(ty: ElemType) -> Option<&'static str> {
    Some(match ty {
        ElemType::F16 => "tandem_wmma_f16",
        ElemType::Q4_0 => "tandem_wmma_q4_0",
        ElemType::Q4_1 => "tandem_wmma_q4_1",
        ElemType::Q5_0 => "tandem_wmma_q5_0",
        ElemType::Q5_1 => "tandem_wmma_q5_1",
        ElemType::Q8_0 => "tandem_wmma_q8_0",
        ElemType::IQ4NL => "tandem_wmma_iq4_nl",
        ElemType::Q4K => "tandem_wmma_q4_K",
        ElemType::Q5K => "tandem_wmma_q5_K",
        ElemType::Q2K => "tandem_wmma_q2_K",
        ElemType::Q3K => "tandem_wmma_q3_K",
        ElemType::Q6K => "tandem_wmma_q6_K",
        _ => return None,
    })
}

/// The WMMA tiles for grouped MUL_MAT_ID with experts of `ty`, if any: every quantized type.
pub fn mmid_wmma_entry(ty: ElemType) -> Option<&'static str> {
    Some(match ty {
        ElemType::Q4_0 => "tandem_mmid_wmma_q4_0",
        ElemType::Q4_1 => "tandem_mmid_wmma_q4_1",
        ElemType::Q5_0 => "tandem_mmid_wmma_q5_0",
        ElemType::Q5_1 => "tandem_mmid_wmma_q5_1",
        ElemType::Q8_0 => "tandem_mmid_wmma_q8_0",
        ElemType::IQ4NL => "tandem_mmid_wmma_iq4_nl",
        ElemType::Q4K => "tandem_mmid_wmma_q4_K",
        ElemType::Q5K => "tandem_mmid_wmma_q5_K",
        ElemType::Q2K => "tandem_mmid_wmma_q2_K",
        ElemType::Q3K => "tandem_mmid_wmma_q3_K",
        ElemType::Q6K => "tandem_mmid_wmma_q6_K",
        _ => return None,
    })
}

/// The matrix-instruction register layout of AMD compile target `arch` (`gfx1100:xnack-` and the
/// like) that the `wmma` family's tiles take: 11 for RDNA3 (gfx110x, gfx115x), 12 for RDNA4
/// (gfx120x), 9 for CDNA's MFMA (gfx908, gfx90a, gfx940-942, gfx950; wave64); none elsewhere.
pub fn wmma_native_layout(arch: &str) -> Option<i32> {
    let chip = arch.strip_prefix("gfx")?;
    let chip = chip.split(':').next().unwrap_or(chip);
    match chip {
        "908" | "90a" | "940" | "941" | "942" | "950" => return Some(CDNA_LAYOUT),
        _ => {}
    }
    match chip.get(..3)? {
        "110" | "115" => Some(11),
        "120" => Some(12),
        _ => None,
    }
}

/// The layout value of CDNA's MFMA tiles (`TANDEM_CDNA_LAYOUT`).
pub const CDNA_LAYOUT: i32 = 9;

/// LDS one workgroup may use on AMD GPUs (64 KiB on gfx9 to gfx12; gfx950's 160 KiB is not
/// counted on).
pub const AMD_BLOCK_LDS: u32 = 64 * 1024;

/// The layout the launchers run the `wmma` family's tiles in on a device of compile target `arch`
/// for weights of `ty`: the native one on AMD gfx9 (CDNA) / gfx11 / gfx12 where the tiles' shared
/// memory fits a workgroup's LDS (q6_K's 72 KiB does not: it stays on the portable GEMM there), on
/// NVIDIA the emulated one `TANDEM_WMMA_EMULATE` names; none with
/// `TANDEM_DISABLE_DISPATCH=hip.wmma`.
fn wmma_layout(arch: &str, ty: ElemType) -> Option<i32> {
    let cfg = crate::config::Config::get();
    if cfg.is_disabled(WMMA_SWITCH) {
        return None;
    }
    match wmma_native_layout(arch) {
        Some(layout) => (mmq_shared_bytes(ty) <= AMD_BLOCK_LDS).then_some(layout),
        None => cfg.wmma_emulate.filter(|_| arch.starts_with("sm_")),
    }
}

/// The name `TANDEM_DISABLE_DISPATCH` takes to keep prefill off the Hopper warpgroup-mma GEMMs
/// (the sm_80 mma tiles run instead); `hip.mma` covers it too.
pub const WGMMA_SWITCH: &str = "hip.mma.wgmma";

/// Whether kernels compiled for `target` hold the warpgroup mma of `tandem_wgmma_*`: only
/// Hopper's architecture-specific target `sm_90a` (`rtc::nvrtc_target`; an NVRTC too old for it
/// compiles `sm_90`, whose wgmma entries are stubs).
pub fn has_wgmma(target: &str) -> bool {
    target == "sm_90a"
}

/// Whether the launchers may use the Hopper GEMMs with kernels compiled for `target`.
fn wgmma_allowed(target: &str) -> bool {
    has_wgmma(target) && !crate::config::Config::get().is_disabled(WGMMA_SWITCH)
}

/// The Hopper GEMM for weights of `ty`, if there is one: f16 and bf16 weights as they are, the
/// 32-value block types converted to f16 in shared memory; against an f16 (bf16) copy of the
/// activations.
pub fn wgmma_entry(ty: ElemType) -> Option<&'static str> {
    Some(match ty {
        ElemType::F16 => "tandem_wgmma_f16",
        ElemType::BF16 => "tandem_wgmma_bf16",
        ElemType::Q4_0 => "tandem_wgmma_q4_0",
        ElemType::Q4_1 => "tandem_wgmma_q4_1",
        ElemType::Q5_0 => "tandem_wgmma_q5_0",
        ElemType::Q5_1 => "tandem_wgmma_q5_1",
        ElemType::Q8_0 => "tandem_wgmma_q8_0",
        ElemType::IQ4NL => "tandem_wgmma_iq4_nl",
        _ => return None,
    })
}

/// Whether weights of `ty` are 16-bit floats (f16, bf16), which the tensor cores take as they are,
/// against a copy of the activations in the same type (as the CPU's dot products round them).
pub fn half_weights(ty: ElemType) -> bool {
    matches!(ty, ElemType::F16 | ElemType::BF16)
}

/// Whether prefill of shape `s` with weights of `ty` goes to the Hopper GEMM: f16 and bf16
/// always (their activations are rounded to f16 / bf16 as the CPU's dot products round them);
/// the 32-value block types as `f16_prefill` says, by default where n passes one tile of the
/// Hopper int8 GEMM (128 columns). There it takes about half the int8 GEMM's time where its tiles
/// fill the device, and where they are few both split k ([`MmSplit`]). Its activations are
/// rounded to q8 as the CPU rounds them, but weights and activations then meet as f16 products
/// where the CPU and the int8 GEMMs sum integers: results within the matmul tolerance (about
/// 2^-12 relative against 2^-24), yet greedy tokens of small models can differ.
pub fn wgmma_takes(ty: ElemType, f16_prefill: F16Prefill, s: &MulMatShape) -> bool {
    let blocks = match f16_prefill {
        F16Prefill::Never => false,
        F16Prefill::Wide => s.n > WGMMQ_TILE_N,
        F16Prefill::Always => true,
    };
    wgmma_entry(ty).is_some() && (half_weights(ty) || blocks)
}

/// Whether weights of `ty` at `base` with shape `s` can take the Hopper GEMM. f16 and bf16: it
/// copies 16-byte pieces of weight rows and of the activation copy (rows of k halves), so k, the
/// row stride and every batch's base must be multiples of 16 bytes. Block types: each k step is
/// two whole blocks per row, copied as the 16-byte units around them, so k must be a multiple of
/// 64, rows 4-byte aligned and less than 16 MiB apart (32-bit offsets within a tile) and every
/// batch's base 16-byte aligned (a step's first unit never starts before the weights).
pub fn wgmma_fits(ty: ElemType, base: DevicePtr, s: &MulMatShape) -> bool {
    if wgmma_entry(ty).is_none() {
        return false;
    }
    if half_weights(ty) {
        return s.k % 8 == 0 && (base.0 as i64 | s.nb01 | s.nb02 | s.nb03) % 16 == 0;
    }
    s.k % 64 == 0 && s.nb01 % 4 == 0 && s.nb01 < WGMMQ_MAX_ROW_BYTES && (base.0 as i64 | s.nb02 | s.nb03) % 16 == 0
}

/// Bytes a row of the block types' Hopper GEMM stages per k step: its two blocks, from 0, 4, 8 or
/// 12 bytes into the first 16-byte unit around them (`tandem_wgmma_qlayout::WROW`).
fn wgmma_raw_row(ty: ElemType) -> i64 {
    (12 + 2 * ty.type_size() as i64 + 15) / 16 * 16
}

/// Dynamic shared memory of a Hopper GEMM block for weights of `ty`: f16 and bf16,
/// `WGMMA_STAGES` steps of weight rows and activation columns; block types, three f16 weight
/// tiles plus `WGMMA_QSTAGES` steps of activation columns and raw weight units
/// ([`wgmma_raw_row`] per row, padded to 1024 bytes so that every step's swizzled activation tile
/// stays 1024-byte aligned); each plus 1024 bytes to align the first step.
pub fn wgmma_shared_bytes(ty: ElemType) -> u32 {
    let (a, b) = (WGMMA_TILE_M * 128, WGMMA_TILE_N * 128);
    let bytes = if half_weights(ty) {
        WGMMA_STAGES * (a + b)
    } else {
        let raw = (WGMMA_TILE_M * wgmma_raw_row(ty) + 1023) / 1024 * 1024;
        3 * a + WGMMA_QSTAGES * (b + raw)
    };
    (bytes + 1024) as u32
}

/// The Hopper f16 GEMM of weights of `ty` (f16, bf16 or a 32-value block type) over the tiles
/// and parts of `split` (one-dimensional grid).
pub fn wgmma_config(ty: ElemType, split: &MmSplit) -> LaunchConfig {
    split.config(WGMMA_THREADS, wgmma_shared_bytes(ty))
}

/// The Hopper int8 GEMM for weights of `ty` (the 32-value block types, q4_K and q5_K), if there
/// is one. (Grouped
/// MUL_MAT_ID keeps the 64 x 64 int8 tiles: an expert's few tokens would fill a fraction of a
/// 128-column tile, whose scaling work is per column all the same.)
pub fn wgmmq_entry(ty: ElemType) -> Option<&'static str> {
    Some(match ty {
        ElemType::Q4_0 => "tandem_wgmmq_q4_0",
        ElemType::Q4_1 => "tandem_wgmmq_q4_1",
        ElemType::Q5_0 => "tandem_wgmmq_q5_0",
        ElemType::Q5_1 => "tandem_wgmmq_q5_1",
        ElemType::Q8_0 => "tandem_wgmmq_q8_0",
        ElemType::IQ4NL => "tandem_wgmmq_iq4_nl",
        ElemType::Q4K => "tandem_wgmmq_q4_K",
        ElemType::Q5K => "tandem_wgmmq_q5_K",
        _ => return None,
    })
}

/// Whether weights of `ty` at `base` with shape `s` can take the Hopper int8 GEMM: each k step is
/// four whole blocks per row, copied as the 16-byte units around it (from up to 8 bytes before
/// it), so k must be a multiple of 128, rows and batch bases 8-byte aligned and the weights'
/// base 16-byte aligned (the bytes before any step then lie inside the weights); for q4_K and
/// q5_K half a superblock, the whole superblock copied, so rows and batch bases 16-byte aligned.
/// A tile's rows lie within 32-bit offsets of its first ([`WGMMQ_MAX_ROW_BYTES`]).
pub fn wgmmq_fits(ty: ElemType, base: DevicePtr, s: &MulMatShape) -> bool {
    wgmmq_entry(ty).is_some()
        && s.k > 0
        && s.k % 128 == 0
        && (s.nb01 | s.nb02 | s.nb03) % wgmmq_staging(ty).1 == 0
        && s.nb01 < WGMMQ_MAX_ROW_BYTES
        && base.0.is_multiple_of(16)
}

/// The Hopper int8 GEMM's copies address a tile's 128 weight rows as 32-bit offsets (row × row
/// stride) from its first: row strides below 16 MiB (15.8 M q8_0 values a row) keep them so.
pub const WGMMQ_MAX_ROW_BYTES: i64 = 1 << 24;

/// How the Hopper int8 GEMM stages a weight row's k step (`tandem_wgmmq_layout` in mma.hip):
/// the bytes of its staged row, and the alignment it needs of rows and batch bases. The 32-value
/// block types' four blocks are copied as the 16-byte units around them (8-byte aligned, up to 8
/// bytes before them); q4_K and q5_K stage their superblock's bytes before the quants and the
/// half of the 128 quant bytes the step reads (superblocks 16-byte aligned).
fn wgmmq_staging(ty: ElemType) -> (i64, i64) {
    let bytes = ty.type_size() as i64;
    if ty.block_size() == 32 {
        ((4 * bytes + 8 + 15) / 16 * 16, 8)
    } else {
        (bytes - 64, 16)
    }
}

/// Dynamic shared memory of a Hopper int8 GEMM block for weights of `ty`: two int8 weight tiles,
/// for the types with an offset ([`wgmmq_tensor_offsets`]) two tf32 tiles of those offsets, then
/// the weight scales (d per row and group, f32, padded) and two sets of converted activation
/// scales (d and -12582912 d per column and group, f32, and with an offset s as two tf32), all
/// padded to 1024 bytes; then `WGMMQ_STAGES` steps of activation columns, their (d, s) pairs and
/// the raw weight blocks (four per row as the 16-byte units around them, or the superblock bytes
/// the step reads, padded to 1024 bytes); plus 1024 bytes to align the first tile.
pub fn wgmmq_shared_bytes(ty: ElemType) -> u32 {
    let offsets = wgmmq_tensor_offsets(ty);
    let tile = WGMMQ_TILE_M * 128;
    let mins = if offsets { WGMMQ_TILE_M * 64 } else { 0 };
    // d of 4 groups x 4 rows of 36 floats (32 weight rows and padding).
    let scales = 4 * 4 * 36 * 4;
    let acts = if offsets { 4 } else { 2 } * WGMMQ_TILE_N * 4 * 4;
    let pairs = 4 * WGMMQ_TILE_N * 8;
    let raw = (WGMMQ_TILE_M * wgmmq_staging(ty).0 + 1023) / 1024 * 1024;
    let fixed = (2 * (tile + mins + scales + acts) + 1023) / 1024 * 1024;
    (fixed + WGMMQ_STAGES * (WGMMQ_TILE_N * 128 + pairs + raw) + 1024) as u32
}

/// Whether weights of `ty` have an offset per group (q4_1, q5_1, q4_K, q5_K: weights d q + m),
/// which the Hopper int8 GEMM adds as m times the activations' group sums with tf32 mma.
pub fn wgmmq_tensor_offsets(ty: ElemType) -> bool {
    matches!(ty, ElemType::Q4_1 | ElemType::Q5_1 | ElemType::Q4K | ElemType::Q5K)
}

/// The Hopper int8 GEMM's launch over the tiles and parts of `split` (one-dimensional grid).
pub fn wgmmq_config(ty: ElemType, split: &MmSplit) -> LaunchConfig {
    split.config(WGMMQ_THREADS, wgmmq_shared_bytes(ty))
}

/// Most k ranges a tile of a GEMM's last wave is split into, and fewest k steps in a range.
pub const SPLIT_MAX_PARTS: i64 = 4;
pub const SPLIT_MIN_STEPS: i64 = 4;
/// Threads of `tandem_mm_split_sum` (one per row of a tile) and the tile columns each takes.
pub const SPLIT_SUM_THREADS: u32 = 128;
pub const SPLIT_SUM_COLUMNS: i64 = 8;

/// `tandem_mm_split` of mma.hip: a GEMM's output tiles over a one-dimensional grid, where the
/// tiles of the last, partial wave are each split into `parts` k ranges so that the wave fills
/// more of the device. Tile t = column tile + tiles_x * (row tile + tiles_y * batch); tiles below
/// `whole` take a block each, the rest `parts` blocks each. Part 0 of a split tile writes its
/// sums to dst, part p > 0 to `partial`, and `tandem_mm_split_sum` adds those to dst in part
/// order (the same sums whichever block finishes first).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmSplit {
    pub tiles_x: i64,
    pub tiles_y: i64,
    pub tiles: i64,
    pub whole: i64,
    pub parts: i64,
    /// Device address of the parts' scratch.
    pub partial: u64,
}
const _: () = assert!(std::mem::size_of::<MmSplit>() == 48);

/// The output tiles of `s` in tiles of `tile` (weight rows, columns): tiles across the columns,
/// tiles across the weight rows, and all tiles of all batches.
fn output_tiles(s: &MulMatShape, tile: (i64, i64)) -> (i64, i64, i64) {
    let over = |x: i64, t: i64| (x.max(1) + t - 1) / t;
    let (tiles_x, tiles_y) = (over(s.n, tile.1), over(s.m, tile.0));
    (tiles_x, tiles_y, tiles_x * tiles_y * s.batches().max(1))
}

impl MmSplit {
    /// The split of `s` in tiles of `tile` (weight rows, columns) with k in `steps` steps, when
    /// `resident` blocks run at once: the tiles past the last whole wave are split into as many
    /// parts as the idle blocks allow (at most [`SPLIT_MAX_PARTS`], at least
    /// [`SPLIT_MIN_STEPS`] steps each), none when the last wave is more than half full.
    pub fn new(s: &MulMatShape, tile: (i64, i64), steps: i64, resident: i64) -> MmSplit {
        let (tiles_x, tiles_y, tiles) = output_tiles(s, tile);
        let rest = tiles % resident.max(1);
        let parts = if rest == 0 {
            1
        } else {
            (resident / rest)
                .min(SPLIT_MAX_PARTS)
                .min(steps / SPLIT_MIN_STEPS)
                .max(1)
        };
        MmSplit {
            tiles_x,
            tiles_y,
            tiles,
            whole: if parts > 1 { tiles - rest } else { tiles },
            parts,
            partial: 0,
        }
    }

    /// Tiles split into parts.
    pub fn split_tiles(&self) -> i64 {
        self.tiles - self.whole
    }

    /// Blocks of the GEMM's grid.
    pub fn blocks(&self) -> i64 {
        self.whole + self.parts * self.split_tiles()
    }

    /// The GEMM's launch: a block of `threads` per tile or part, one-dimensional grid.
    pub fn config(&self, threads: u32, shared_bytes: u32) -> LaunchConfig {
        LaunchConfig {
            grid: [self.blocks().clamp(1, MAX_GRID_X) as u32, 1, 1],
            block: [threads, 1, 1],
            shared_bytes,
        }
    }

    /// Scratch bytes of the parts past the first, tiles of `tile_values` f32 sums.
    pub fn partial_bytes(&self, tile_values: i64) -> usize {
        ((self.parts - 1) * self.split_tiles() * tile_values * 4) as usize
    }
}

/// `tandem_mm_split_sum`'s launch for tiles of `tile` (rows, columns): a block per
/// [`SPLIT_SUM_COLUMNS`] columns of a split tile, a thread per row.
pub fn split_sum_config(split: &MmSplit, tile: (i64, i64)) -> LaunchConfig {
    let groups = (tile.1 + SPLIT_SUM_COLUMNS - 1) / SPLIT_SUM_COLUMNS;
    LaunchConfig {
        grid: [split.split_tiles().clamp(1, MAX_GRID_X) as u32, groups as u32, 1],
        block: [SPLIT_SUM_THREADS, 1, 1],
        shared_bytes: 0,
    }
}

/// The tensor-core GEMV for [`MMV_MIN_COLUMNS`]..=8 columns with weights of `ty`
/// (`tandem_mmv_<type>`): the 32-value block types and q2_K .. q6_K.
pub fn mmv_entry(ty: ElemType) -> Option<&'static str> {
    Some(match ty {
        ElemType::Q4_0 => "tandem_mmv_q4_0",
        ElemType::Q4_1 => "tandem_mmv_q4_1",
        ElemType::Q5_0 => "tandem_mmv_q5_0",
        ElemType::Q5_1 => "tandem_mmv_q5_1",
        ElemType::Q8_0 => "tandem_mmv_q8_0",
        ElemType::IQ4NL => "tandem_mmv_iq4_nl",
        ElemType::Q4K => "tandem_mmv_q4_K",
        ElemType::Q5K => "tandem_mmv_q5_K",
        ElemType::Q2K => "tandem_mmv_q2_K",
        ElemType::Q3K => "tandem_mmv_q3_K",
        ElemType::Q6K => "tandem_mmv_q6_K",
        _ => return None,
    })
}

/// The name `TANDEM_DISABLE_DISPATCH` takes to keep few-column MUL_MAT off the tensor-core GEMV
/// (the integer-dot GEMV runs instead); `hip.mma` covers it too.
pub const MMV_SWITCH: &str = "hip.mma.mmv";

/// Whether weights of `ty` at `base` with shape `s` can take the tensor-core GEMV: from
/// [`MMV_MIN_COLUMNS`] to 8 columns; it copies weight rows in 16-byte units of eight 32-value
/// groups, so rows and batch bases must be 16-byte aligned (q2_K, q3_K and q6_K, whose chunks
/// start at any even offset, are copied as the 16-byte units around each row's chunk: 2 bytes,
/// which their rows always are); k is whole groups (a last, partial chunk of groups is copied
/// in part).
pub fn mmv_fits(ty: ElemType, base: DevicePtr, s: &MulMatShape) -> bool {
    let align = if windowed(ty) { 2 } else { 16 };
    mmv_entry(ty).is_some()
        && (MMV_MIN_COLUMNS..=GEMV_MAX_COLUMNS).contains(&s.n)
        && s.k > 0
        && s.k % 32 == 0
        && (base.0 as i64 | s.nb01 | s.nb02 | s.nb03) % align == 0
}

/// Whether the int8 tensor-core kernels copy `ty`'s weights as the 16-byte units around each
/// row's step (`WINDOW` in mma.hip): the 84-, 110- and 210-byte superblocks of q2_K, q3_K and
/// q6_K start only 4- or 2-byte aligned.
fn windowed(ty: ElemType) -> bool {
    matches!(ty, ElemType::Q2K | ElemType::Q3K | ElemType::Q6K)
}

/// Bytes of a weight row's staged step of `bytes` in the int8 tensor-core kernels: its 16-byte
/// units (for [`windowed`] types the units around it, up to 14 bytes before), padded to an odd
/// number of units so that the eight rows a fragment load touches start in distinct bank quads.
fn staged_row(ty: ElemType, bytes: i64) -> i64 {
    let units = if windowed(ty) {
        (bytes + 14 + 15) / 16
    } else {
        (bytes + 15) / 16
    };
    (units | 1) * 16
}

/// Shared bytes of one warp's stage of the tensor-core GEMV for `ty` and the stages per warp
/// (`tandem_mmv_stage` in mma.hip): 32 weight rows of one chunk (eight groups; the 84-, 110- and
/// 210-byte chunks of q2_K, q3_K and q6_K start 4- or 2-byte aligned and take the 16-byte units
/// around them, up to 14 bytes before) padded to an odd number of 16-byte units, eight
/// activation columns of 272 bytes, 64 (d, d * sum) pairs; three stages where rows take at most
/// 208 bytes, else two.
fn mmv_stage(ty: ElemType) -> (i64, i64) {
    let chunk = ty.row_size(MMV_GROUPS * 32).unwrap_or(0) as i64;
    let pad = staged_row(ty, chunk);
    let bytes = MMV_ROWS * pad + MMV_COLUMNS * (MMV_GROUPS * 32 + 16) + MMV_GROUPS * MMV_COLUMNS * 8;
    (bytes, if pad > 208 { 2 } else { 3 })
}

/// Dynamic shared memory of a tensor-core GEMV block: every warp's ring of stages, then the
/// partial sums of a tile of all warps but the first ([`MMV_ROWS`] x [`MMV_COLUMNS`] floats
/// each), which the first adds to its own.
pub fn mmv_shared_bytes(ty: ElemType) -> u32 {
    let (bytes, stages) = mmv_stage(ty);
    let warps = i64::from(MMV_THREADS / 32);
    (warps * stages * bytes + (warps - 1) * MMV_ROWS * MMV_COLUMNS * 4) as u32
}

/// Blocks of the tensor-core GEMV per compute unit the grid is sized for: two fit an SM's shared
/// memory on sm_80 and sm_90 (`mmv_shared_bytes` up to about 100 KiB).
pub const MMV_BLOCKS_PER_CU: i64 = 2;

/// Blocks of [`MMV_THREADS`] per batch, each taking every `grid.x`-th tile of [`MMV_ROWS`] weight
/// rows: as many as the tiles, but no more than [`MMV_BLOCKS_PER_CU`] per compute unit over all
/// batches, so that the blocks stay resident and their copies run on from tile to tile.
pub fn mmv_config(ty: ElemType, s: &MulMatShape, compute_units: u32) -> LaunchConfig {
    let tiles = (s.m.max(1) + MMV_ROWS - 1) / MMV_ROWS;
    let batches = s.batches().clamp(1, MAX_GRID_YZ);
    let resident = (MMV_BLOCKS_PER_CU * i64::from(compute_units.max(1)) + batches - 1) / batches;
    LaunchConfig {
        grid: [tiles.min(resident).min(MAX_GRID_X) as u32, batches as u32, 1],
        block: [MMV_THREADS, 1, 1],
        shared_bytes: mmv_shared_bytes(ty),
    }
}

/// Threads and output tile (rows, columns) of the tensor-core kernels for weights of `ty`.
pub fn mma_tile(ty: ElemType) -> (u32, i64, i64) {
    match ty {
        ElemType::F16 | ElemType::BF16 => (MMA_THREADS, MMA_TILE_M, MMA_TILE_N),
        _ => (MMQ_THREADS, MMQ_TILE_M, MMQ_TILE_N),
    }
}

pub fn mma_config(ty: ElemType, s: &MulMatShape) -> LaunchConfig {
    let (threads, tm, tn) = mma_tile(ty);
    LaunchConfig {
        shared_bytes: mmq_shared_bytes(ty),
        ..tile_grid((s.n, tn), (s.m, tm), s.batches(), threads)
    }
}

/// Dynamic shared memory of the int8 tiles (`tandem_mmq_smem` of mma.hip; 0 for f16 weights):
/// two k steps of [`MMQ_TILE_M`] raw weight rows (four 32-value blocks, or one superblock, per
/// step; the 84-, 110- and 210-byte superblocks of q2_K, q3_K and q6_K start 4- or 2-byte aligned
/// and take the 16-byte units around them, up to 14 bytes before) padded to an odd number of
/// 16-byte units, [`MMQ_TILE_N`] activation rows of the step's values plus 16 bytes, and their
/// (d, s) pairs.
pub fn mmq_shared_bytes(ty: ElemType) -> u32 {
    if !ty.is_quantized() {
        return 0;
    }
    let groups: i64 = if ty.block_size() == 32 { 4 } else { 8 };
    let step = ty.row_size(groups * 32).unwrap_or(0) as i64;
    let pad = staged_row(ty, step);
    (2 * (MMQ_TILE_M * pad + MMQ_TILE_N * (groups * 32 + 16) + groups * MMQ_TILE_N * 8)) as u32
}

/// Whether weights of `ty` meet q8_1 activations (else f32 activations are read directly).
pub fn uses_q8_1(ty: ElemType) -> bool {
    ty.is_quantized()
}

/// Values of a column each thread of `tandem_mma_f16_copy` converts (`TANDEM_MMA_COPY_VALUES`).
pub const MMA_COPY_VALUES: u32 = 4;

/// Geometry of a per-value activation kernel whose threads take `per_thread` consecutive values
/// of a column: block 256, grid (ceil(k / (256 * per_thread)), min(columns, 65535)).
pub fn convert_config(q: &Q8Shape, per_thread: u32) -> LaunchConfig {
    let per_block = i64::from(QUANTIZE_THREADS * per_thread.max(1));
    LaunchConfig {
        grid: [
            ((q.ne[0].max(1) + per_block - 1) / per_block).min(MAX_GRID_X) as u32,
            q.columns().clamp(1, MAX_GRID_YZ) as u32,
            1,
        ],
        block: [QUANTIZE_THREADS, 1, 1],
        shared_bytes: 0,
    }
}

/// Values of a column each thread of `tandem_quantize_q8_1` quantizes (`TANDEM_Q8_VALUES`).
pub const QUANTIZE_VALUES: u32 = 4;

pub fn quantize_config(q: &Q8Shape) -> LaunchConfig {
    convert_config(q, QUANTIZE_VALUES)
}

/// Bytes of a segment of the segment GEMV of `ty` (`T::BYTES` of gemv.hip), if it has one: whole
/// 32-weight groups that a lane reads as one piece, eight q4_0 or iq4_nl blocks or one q4_K
/// superblock (144 bytes), four q8_0 blocks (136 bytes), one q6_K superblock (210 bytes).
pub fn seg_bytes(ty: ElemType) -> Option<i64> {
    match ty {
        ElemType::Q4_0 | ElemType::IQ4NL | ElemType::Q4K => Some(144),
        ElemType::Q8_0 => Some(136),
        ElemType::Q6K => Some(210),
        _ => None,
    }
}

/// The segment GEMV of `ty` in stretches (`tandem_gemv_<t>_s1`): q4_0, iq4_nl and q4_K. Not
/// q8_0: in stretches, the kernel's first version was slower than the row walk on an H200
/// (14336 x 4096: 19.6 against 18.3 µs back to back), so q8_0 takes segments only in units, and
/// so does q6_K.
pub fn seg_entry(ty: ElemType) -> Option<&'static str> {
    match ty {
        ElemType::Q4_0 => Some("tandem_gemv_q4_0_s1"),
        ElemType::IQ4NL => Some("tandem_gemv_iq4_nl_s1"),
        ElemType::Q4K => Some("tandem_gemv_q4_K_s1"),
        _ => None,
    }
}

/// The segment GEMV of `ty` that takes its rows in units across the grid
/// (`tandem_gemv_<t>_u1`, see [`seg_in_units`]): q4_0, q4_K, q8_0 and q6_K. Not iq4_nl: on an H200
/// (14336 x 4096) it gained 0.2 µs back to back (13.6 -> 13.4) but lost 1.8 one at a time
/// (17.7 -> 19.5).
pub fn seg_units_entry(ty: ElemType) -> Option<&'static str> {
    match ty {
        ElemType::Q4_0 => Some("tandem_gemv_q4_0_u1"),
        ElemType::Q4K => Some("tandem_gemv_q4_K_u1"),
        ElemType::Q8_0 => Some("tandem_gemv_q8_0_u1"),
        ElemType::Q6K => Some("tandem_gemv_q6_K_u1"),
        _ => None,
    }
}

/// The units walk of `ty` with one stage slot a wave (`tandem_gemv_<t>_n1`), for grids in which
/// no wave has more than one step ([`seg_narrow`]): the types of [`seg_units_entry`].
pub fn seg_narrow_entry(ty: ElemType) -> Option<&'static str> {
    match ty {
        ElemType::Q4_0 => Some("tandem_gemv_q4_0_n1"),
        ElemType::Q4K => Some("tandem_gemv_q4_K_n1"),
        ElemType::Q8_0 => Some("tandem_gemv_q8_0_n1"),
        ElemType::Q6K => Some("tandem_gemv_q6_K_n1"),
        _ => None,
    }
}

/// Segments of a row of `k` weights of `ty` (0 for types without a segment GEMV).
fn seg_segments(ty: ElemType, k: i64) -> i64 {
    seg_bytes(ty).map_or(0, |bytes| ty.row_size(k.max(0)).unwrap_or(0) as i64 / bytes)
}

/// Whether the segment GEMV of rows of `k` weights of `ty` runs in units on a device of compile
/// target `arch` with `warp_size`-lane waves (`tandem_gemv_<t>_u1`: units of whole rows that
/// fill a step, taken in turn across the grid, a ring of stage slots filled by cp.async) rather
/// than in stretches (`tandem_gemv_<t>_s1`: each wave one stretch of rows, one slot refilled
/// from registers; q8_0 and q6_K have none and take the row walk). Units need cp.async
/// ([`seg_slots`]), rows of S segments with S dividing `warp_size` (every lane busy in every
/// step) and whole 16-byte units (the copies' size: q4_0, q4_K: k = 256, 512, .. 8192 with 32
/// lanes; q8_0: k = 256 .. 4096; q6_K: k = 2048, 4096), and two blocks' shared memory within an
/// SM's ([`seg_sm_shared`]); [`SEG_UNITS_SWITCH`] turns them off. Measured on an H200
/// (back to back, µs): q4_0 14336 x 4096 11.6 -> 11.0 and 3072 x 4096 5.0 -> 4.6 in units, but
/// 4096 x 14336 (a row in two steps, the second three quarters full) 13.4 -> 13.8, so other
/// rows stay in stretches.
pub fn seg_in_units(ty: ElemType, k: i64, warp_size: u32, arch: &str) -> bool {
    seg_units_entry(ty).is_some()
        && seg_slots(arch) == 2
        && seg_segments(ty, k) > 0
        && i64::from(warp_size) % seg_segments(ty, k) == 0
        && seg_segments(ty, k) * seg_bytes(ty).unwrap_or(0) % 16 == 0
        && 2 * (seg_block_shared(ty, k, gemv_waves(warp_size), warp_size, true) + SEG_BLOCK_RESERVED)
            <= seg_sm_shared(arch)
        && !crate::config::Config::get().is_disabled(SEG_UNITS_SWITCH)
}

/// Shared memory the driver keeps beside each block's own (NVIDIA: 1 KiB).
const SEG_BLOCK_RESERVED: i64 = 1024;

/// Shared memory of one SM on a device of compile target `arch`, for the two blocks per SM of
/// the segment GEMV in units: sm_90 and sm_100 228 KiB, sm_80 and sm_87 164 KiB, other NVIDIA
/// sm_8x+ 100 KiB, elsewhere a workgroup's LDS on AMD ([`AMD_BLOCK_LDS`]).
pub fn seg_sm_shared(arch: &str) -> i64 {
    match crate::gpu::api::sm_number(arch) {
        Some(90 | 100 | 103) => 228 * 1024,
        Some(80 | 87) => 164 * 1024,
        Some(v) if v >= 80 => 100 * 1024,
        _ => i64::from(AMD_BLOCK_LDS),
    }
}

/// Dynamic shared memory of a segment-GEMV block of `waves` waves of `warp_size` lanes for rows
/// of `k` weights of `ty`: each wave's stage slots (a segment per lane; [`seg_unit_slots`] in
/// units, one in stretches and in the one-slot units walk), then the block's q8_1 column (and
/// for q6_K, [`seg_parts`], the sums of its 16-value halves).
fn seg_block_shared(ty: ElemType, k: i64, waves: i64, warp_size: u32, in_units: bool) -> i64 {
    seg_block_shared_slots(ty, k, waves, warp_size, if in_units { seg_unit_slots(ty) } else { 1 })
}

/// As [`seg_block_shared`] with `slots` stage slots a wave.
fn seg_block_shared_slots(ty: ElemType, k: i64, waves: i64, warp_size: u32, slots: i64) -> i64 {
    let bytes = seg_bytes(ty).unwrap_or(0);
    let parts = if seg_parts(ty) { k / 16 * 4 } else { 0 };
    waves * slots * i64::from(warp_size) * bytes + gemv_act_bytes(k, 1) + parts
}

/// Whether the segment GEMV of `ty` keeps the activations' sums per 16 values beside its q8_1
/// column (`T::PARTS` of gemv.hip): q6_K, whose scales cover 16 values (on an H200, 14336 x 4096
/// back to back: 15.0 µs, against 15.1 with each lane summing them with dp4a).
pub fn seg_parts(ty: ElemType) -> bool {
    ty == ElemType::Q6K
}

/// Whether weights of `ty` at `base` with shape `s` take the segment GEMV on a device of `units`
/// SMs/CUs with `warp_size`-lane waves: in units ([`seg_in_units`]) or, for types that have
/// them ([`seg_entry`]), in stretches; one column, k a multiple of 256 up to
/// [`GEMV_SEG_MAX_K`], rows back to back (a wave's rows are one run of segments) and batch bases
/// 16-byte aligned, segments enough to fill a step of every wave of one block per SM/CU
/// (narrower matrices were faster on the row walk, q4_0 1024 x 4096 on an H200 with the
/// kernel's first version: 4.3 against 4.8 µs back to back), and a block's shared memory within
/// what a device of compile target `arch` gives one ([`seg_shared_limit`]).
pub fn gemv_seg_fits(
    ty: ElemType,
    base: DevicePtr,
    s: &MulMatShape,
    waves: i64,
    warp_size: u32,
    units: u32,
    arch: &str,
) -> bool {
    let in_units = seg_in_units(ty, s.k, warp_size, arch);
    if seg_bytes(ty).is_none() || !(in_units || seg_entry(ty).is_some()) {
        return false;
    }
    s.n == 1
        && s.k > 0
        && s.k % 256 == 0
        && s.k <= GEMV_SEG_MAX_K
        && ty.row_size(s.k).is_some_and(|r| r as i64 == s.nb01)
        && (base.0 as i64 | s.nb02 | s.nb03) % 16 == 0
        && s.batches() <= MAX_GRID_YZ
        && s.m <= i64::from(i32::MAX)
        && (in_units || s.m * seg_segments(ty, s.k) >= i64::from(units.max(1)) * waves * i64::from(warp_size))
        && gemv_seg_config(ty, s, waves, warp_size, units, in_units, false).shared_bytes <= seg_shared_limit(arch)
}

/// Shared memory one segment-GEMV block may take on a device of compile target `arch`: the
/// opt-in limit of sm_80 and sm_90 (163 KiB and more), of the other NVIDIA sm_8x (99 KiB), and
/// elsewhere a workgroup's LDS on AMD ([`AMD_BLOCK_LDS`], also within older NVIDIA GPUs' limit).
pub fn seg_shared_limit(arch: &str) -> u32 {
    match crate::gpu::api::sm_number(arch) {
        Some(80 | 90) => 163 * 1024,
        Some(v) if v >= 80 => 99 * 1024,
        _ => AMD_BLOCK_LDS,
    }
}

/// Stage slots per wave a device of compile target `arch` can ring: two or more where cp.async
/// fills some while the lanes dot another (NVIDIA sm_80 and newer; reported as two, the fewest a
/// ring takes, [`seg_unit_slots`] the number per type), else one.
pub fn seg_slots(arch: &str) -> i64 {
    if has_mma(arch) {
        2
    } else {
        1
    }
}

/// Stage slots per wave of the segment GEMV of `ty` in units (`SLOTS` of gemv.hip's
/// `tandem_gemv_segu`): q8_0 three, two steps in flight while one is dotted (on an H200, 14336 x
/// 4096 back to back: 17.3 µs, against 21.5 with two slots and 18.4 on the row walk); q4_0 and
/// q4_K two (with three, in blocks of six waves so that two fit an SM: 10.7 against 10.8 µs at
/// 14336 x 4096, but 5.4 against 4.8 at 3072 x 4096 and 6.5 against 5.7 at 4096 x 4096).
pub fn seg_unit_slots(ty: ElemType) -> i64 {
    if ty == ElemType::Q8_0 {
        3
    } else {
        2
    }
}

/// Blocks of a segment GEMV: about one per SM/CU in stretches, two in units (two slots), no more
/// than give every wave a row (stretches) or a unit (warp_size / S rows of S segments). Measured
/// on an H200 (q4_0 14336 x 4096, µs back to back): in units 11.6 with one block per SM, 11.0
/// with two, 12.5 with three (only two fit); in stretches the kernel's first version was no
/// faster with two than with one and slower for iq4_nl (14.3 against 16.1).
/// `work`: the walk's units of a batch ([`seg_work`]).
fn seg_blocks(work: i64, waves: i64, units: u32, in_units: bool) -> i64 {
    let per_unit = if in_units { 2 } else { 1 };
    (per_unit * i64::from(units.max(1)))
        .min((work + waves - 1) / waves)
        .max(1)
}

/// What the waves of a segment GEMV take of each batch: its units (warp_size / S rows of S
/// segments) in units, its rows in stretches.
fn seg_work(ty: ElemType, s: &MulMatShape, warp_size: u32, in_units: bool) -> i64 {
    let rows = if in_units {
        (i64::from(warp_size) / seg_segments(ty, s.k).max(1)).max(1)
    } else {
        1
    };
    (s.m.max(1) + rows - 1) / rows
}

/// Steps whose sums a wave of the units walk holds until its wait for the kernels ahead
/// (`TANDEM_SEGU_HELD` of gemv.hip): a dependent launch with its column in place dots that many
/// before it waits.
pub const SEGU_HELD: i64 = 2;

/// Blocks of a units walk of `work` units that at most `SEGU_HELD` steps per wave cover with at
/// most one block per SM/CU, if any; `None` where it takes more steps (two blocks per SM then
/// keep more copies in flight). Each SM then holds at most one block of this kernel and room for
/// those of the next, which read, quantize and dot their share while this one ends (a dependent
/// launch). Every wave takes `SEGU_HELD` steps, on as few blocks as that needs (the last wave
/// may take fewer): each block reads and quantizes the whole column, so fewer blocks read it
/// less often (H200, q4_0 x 4096 back to back: 2048 rows 1.59-1.60 µs on 64 blocks against
/// 1.93-1.95 on 128 of one step a wave, 1024 rows 1.19-1.20 on 32 against 1.26-1.33 on 64,
/// docs/performance.md, thirty-fourth record; 3072 rows 2.36-2.37 on 96 against 2.59-2.60 on
/// 132, 4096 rows 2.80-2.83 on 128 against 2.89, thirty-fifth record).
pub fn units_one_per_unit(work: i64, waves: i64, units: u32) -> Option<i64> {
    let sms = i64::from(units.max(1));
    let waves = waves.max(1);
    let work = work.max(1);
    (work <= sms * waves * SEGU_HELD).then(|| (work + waves * SEGU_HELD - 1) / (waves * SEGU_HELD))
}

/// Whether a units walk queued now runs its first steps while the kernel ahead still runs: it
/// reads its column early (`early`, the ACT_EARLY flags) and goes out as a dependent launch
/// that overlaps what is ahead. Only then does one block per SM ([`units_one_per_unit`]) pay:
/// with its column read after the wait, two blocks per SM were faster (H200: MoE q4_0 at one
/// token 4.66 against 5.39 µs back to back, docs/performance.md, twenty-ninth record).
fn overlaps_ahead(ctx: &LaunchCtx<'_>, early: bool) -> bool {
    early && ctx.settled && ctx.stream.context().dependent_launch()
}

/// Launch geometry of the segment GEMV of `ty`, in units or stretches ([`seg_in_units`]):
/// `waves` waves of `warp_size` lanes per block, `seg_blocks` of them, one grid row per batch;
/// shared memory for each wave's stages (a segment per lane, two slots in units, one in
/// stretches) and the quantized column.
pub fn gemv_seg_config(
    ty: ElemType,
    s: &MulMatShape,
    waves: i64,
    warp_size: u32,
    units: u32,
    in_units: bool,
    overlapped: bool,
) -> LaunchConfig {
    let blocks = seg_grid_blocks(ty, s, waves, warp_size, units, in_units, overlapped);
    let shared = if seg_narrow(ty, s, waves, warp_size, units, in_units, overlapped) {
        seg_block_shared_slots(ty, s.k, waves, warp_size, 1)
    } else {
        seg_block_shared(ty, s.k, waves, warp_size, in_units)
    };
    LaunchConfig {
        grid: [blocks as u32, s.batches().clamp(1, MAX_GRID_YZ) as u32, 1],
        block: [GEMV_THREADS, 1, 1],
        shared_bytes: shared as u32,
    }
}

/// Blocks (grid.x) of the segment GEMV, as [`gemv_seg_config`] gives them.
fn seg_grid_blocks(
    ty: ElemType,
    s: &MulMatShape,
    waves: i64,
    warp_size: u32,
    units: u32,
    in_units: bool,
    overlapped: bool,
) -> i64 {
    let work = seg_work(ty, s, warp_size, in_units);
    (in_units && overlapped && s.batches() == 1)
        .then(|| units_one_per_unit(work, waves, units))
        .flatten()
        .unwrap_or_else(|| seg_blocks(work, waves, units, in_units))
}

/// Whether the segment GEMV in units of `ty` over `s` takes its one-slot form
/// (`tandem_gemv_<t>_n1`, [`seg_narrow_entry`]): where its grid ([`gemv_seg_config`]) gives no
/// wave more than one step, a second stage slot is never filled, so the block needs half the
/// stage memory, and the kernel is held to the registers that let three blocks share an SM (80
/// on an H200, against 110-128 for `_u1`): back to back, a block of the kernel two places
/// behind then starts its reads beside this kernel's and the next one's rather than once this
/// one's have left. Only for a walk that overlaps the kernel ahead (`overlapped`, its column read
/// before its wait): with the column read after the wait it was slower (H200, q4_0 x 4096, back
/// to back: 1024 / 2048 rows 4.53 / 5.44 µs against 3.99 / 4.75 on `_u1`). One-batch grids that
/// overlap give every wave [`SEGU_HELD`] steps ([`units_one_per_unit`]), so it serves those of
/// one block and grids of several batches. Not with [`SEG_NARROW_SWITCH`] given.
pub fn seg_narrow(
    ty: ElemType,
    s: &MulMatShape,
    waves: i64,
    warp_size: u32,
    units: u32,
    in_units: bool,
    overlapped: bool,
) -> bool {
    in_units
        && overlapped
        && seg_narrow_entry(ty).is_some()
        && seg_grid_blocks(ty, s, waves, warp_size, units, in_units, overlapped) * waves.max(1)
            >= seg_work(ty, s, warp_size, in_units)
        && !crate::config::Config::get().is_disabled(SEG_NARROW_SWITCH)
}

/// Waves of one GEMV block on a device with `warp_size`-lane waves.
pub fn gemv_waves(warp_size: u32) -> i64 {
    (GEMV_THREADS / warp_size.clamp(1, GEMV_THREADS)).max(1) as i64
}

/// Rows each GEMV wave walks for `rows` rows (over all batches or slots): as many as it takes
/// for the grid to hold about `GEMV_BLOCKS_PER_UNIT` blocks per SM/CU (the blocks stride over
/// the rows, so the grid always works on one compact stretch of the matrix, and each block
/// quantizes its activations once for all its rows).
pub fn rows_per_wave(rows: i64, waves: i64, units: u32) -> i64 {
    let wanted = GEMV_BLOCKS_PER_UNIT * i64::from(units.max(1)) * waves.max(1);
    ((rows.max(1) + wanted - 1) / wanted).max(1)
}

/// Bytes of a block's q8_1 copy of `columns` columns of `k` values: the int8 values, then one
/// float2 per 32 (as `tandem_mv_quant_block` lays them out behind the wave stages).
pub fn gemv_act_bytes(k: i64, columns: i64) -> i64 {
    columns * k + columns * (k / 32) * 8
}

/// Whether a quantized GEMV block quantizes its `columns` columns itself (one launch).
pub fn gemv_fuses_quantize(k: i64, columns: i64) -> bool {
    gemv_act_bytes(k, columns) <= GEMV_FUSED_ACT_BYTES
}

/// Bytes after a GEMV block's shared data that its aligned word loads may touch (they read up to
/// 2 bytes past the last block of a chunk, `tandem_aligned_words` in gemv.hip).
pub const GEMV_SHARED_PAD: i64 = 16;

/// Staged chunks per wave of a quantized GEMV of `ty` over `columns` columns: two where the
/// multi-column kernel walks its rows in pairs (the 32-value block types, `tandem_mv_pairs` in
/// gemv.hip), else one (one-column kernels `_c1` and MUL_MAT_ID, superblock types).
pub fn gemv_stages(ty: ElemType, columns: i64) -> i64 {
    if columns > 1 && ty.block_size() == 32 {
        2
    } else {
        1
    }
}

/// Dynamic shared memory of a GEMV block: `stages` staged chunks per wave (quantized weights,
/// see [`gemv_stages`]) plus the block's q8_1 columns when it quantizes them, plus
/// [`GEMV_SHARED_PAD`].
pub fn gemv_shared_bytes(ty: ElemType, waves: i64, stages: i64, fused_act: Option<i64>) -> u32 {
    if !uses_q8_1(ty) {
        return 0;
    }
    let chunk = ty.row_size(GEMV_CHUNK).unwrap_or(0) as i64;
    (waves * stages * chunk + fused_act.unwrap_or(0) + GEMV_SHARED_PAD) as u32
}

/// One block per `per_block` rows and batch; callers have bounded both (predicates).
pub fn gemv_config(ty: ElemType, rows: i64, batches: i64, per_block: i64, shared_bytes: u32) -> LaunchConfig {
    let threads = if uses_q8_1(ty) {
        GEMV_THREADS
    } else {
        GEMV_FLOAT_THREADS
    };
    let per_block = per_block.max(1);
    let blocks = (rows.max(1) + per_block - 1) / per_block;
    LaunchConfig {
        grid: [blocks.min(MAX_GRID_X) as u32, batches.clamp(1, MAX_GRID_YZ) as u32, 1],
        block: [threads, 1, 1],
        shared_bytes,
    }
}

/// Grid of (columns, rows, z) tiles: ceil(x / tile) along the first two, clamped to the limits
/// every device has; `threads` per block.
fn tile_grid(cols: (i64, i64), rows: (i64, i64), z: i64, threads: u32) -> LaunchConfig {
    let tiles = |(x, t): (i64, i64)| (x.max(1) + t - 1) / t;
    LaunchConfig {
        grid: [
            tiles(cols).min(MAX_GRID_X) as u32,
            tiles(rows).min(MAX_GRID_YZ) as u32,
            z.clamp(1, MAX_GRID_YZ) as u32,
        ],
        block: [threads, 1, 1],
        shared_bytes: 0,
    }
}

pub fn gemm_config(s: &MulMatShape) -> LaunchConfig {
    tile_grid((s.n, GEMM_TILE), (s.m, GEMM_TILE), s.batches(), GEMM_THREADS)
}

/// Whether the grids of a MUL_MAT of this shape fit every device's limits.
pub fn mul_mat_fits(s: &MulMatShape) -> bool {
    let tiles_m = (s.m + GEMM_TILE - 1) / GEMM_TILE;
    s.m > 0 && s.m <= MAX_GRID_X && s.batches() > 0 && s.batches() <= MAX_GRID_YZ && tiles_m <= MAX_GRID_YZ
}

/// Queues the q8_1 copy of `src1` into scratch; returns (values, pairs) addresses.
///
/// # Safety
/// `src1` is a device tensor of f32 whose every element is reachable through its strides.
unsafe fn quantize_src1(ctx: &LaunchCtx<'_>, src1: &Tensor) -> Result<(DevicePtr, DevicePtr), KernelError> {
    // SAFETY: forwarded.
    unsafe { quantize_src1_with(ctx, src1, 0) }.map(|(qs, ds, _)| (qs, ds))
}

/// As [`quantize_src1`], with `extra` more bytes of scratch after the copy (256-byte aligned),
/// whose address is returned third.
///
/// # Safety
/// As [`quantize_src1`].
unsafe fn quantize_src1_with(
    ctx: &LaunchCtx<'_>,
    src1: &Tensor,
    extra: usize,
) -> Result<(DevicePtr, DevicePtr, DevicePtr), KernelError> {
    let q = Q8Shape::of(src1);
    let (ds_at, bytes) =
        q8_1_layout(q.columns(), q.ne[0]).ok_or_else(|| launch_error("quantize_q8_1", "bad activation shape"))?;
    let extra_at = bytes.next_multiple_of(256);
    let base = ctx.scratch.get(extra_at + extra)?;
    let (qs, ds) = (base, base.offset(ds_at));
    let f = ctx.kernels.function(GEMV_FAMILY, "tandem_quantize_q8_1")?;
    let mut args = KernelArgs::new();
    args.push(dptr(src1)).push(qs).push(ds).push(q);
    // SAFETY: (const char*, i8*, float2*, tandem_q8_shape); src1 is readable through its
    // strides (caller), the scratch region holds `bytes` laid out as q8_1_layout says.
    unsafe { ctx.stream.launch(&f, quantize_config(&q), &mut args) }.map_err(KernelError::Gpu)?;
    Ok((qs, ds, base.offset(extra_at)))
}

/// Queues `entry` of `family`, which writes each value of `src1` converted to `elem_bytes`
/// bytes into scratch (contiguous, column by column; grid as [`quantize_config`]), and returns
/// the copy's address and that of `extra` more bytes of scratch after it (256-byte aligned).
///
/// # Safety
/// As [`quantize_src1`]; the entry's parameters are (const char* src, out*, tandem_q8_shape).
unsafe fn convert_src1(
    ctx: &LaunchCtx<'_>,
    src1: &Tensor,
    family: &str,
    entry: &str,
    elem_bytes: i64,
    values_per_thread: u32,
    extra: usize,
) -> Result<(DevicePtr, DevicePtr), KernelError> {
    let q = Q8Shape::of(src1);
    let bytes = usize::try_from(q.columns().saturating_mul(q.ne[0]).saturating_mul(elem_bytes))
        .map_err(|_| launch_error("convert_src1", "bad activation shape"))?;
    let extra_at = bytes.next_multiple_of(256);
    let out = ctx.scratch.get(extra_at + extra)?;
    let f = ctx.kernels.function(family, entry)?;
    let mut args = KernelArgs::new();
    args.push(dptr(src1)).push(out).push(q);
    // SAFETY: src1 is readable through its strides (caller) and the scratch region holds
    // k * columns converted values.
    unsafe { ctx.stream.launch(&f, convert_config(&q, values_per_thread), &mut args) }.map_err(KernelError::Gpu)?;
    Ok((out, out.offset(extra_at)))
}

/// The activation copy a tensor-core GEMM reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MmaActs {
    /// `tandem_quantize_q8_1`: the int8 tiles and the Hopper int8 GEMM.
    Q8_1,
    /// `tandem_mma_f16_copy`: f16 weights.
    F16,
    /// `tandem_mma_bf16_copy`: bf16 weights.
    Bf16,
    /// `tandem_mma_f16_q8_copy`: the block types' Hopper GEMM.
    F16Q8,
}

/// Queues the f16 copy of `src1` (`tandem_mma_f16_copy`; with `bf16` the bf16 copy,
/// `tandem_mma_bf16_copy`) for the f16 (bf16) mma GEMM; `extra` bytes of scratch follow the copy,
/// their address returned second.
///
/// # Safety
/// As [`quantize_src1`].
unsafe fn half_src1(
    ctx: &LaunchCtx<'_>,
    src1: &Tensor,
    bf16: bool,
    extra: usize,
) -> Result<(DevicePtr, DevicePtr), KernelError> {
    let entry = if bf16 {
        "tandem_mma_bf16_copy"
    } else {
        "tandem_mma_f16_copy"
    };
    // SAFETY: forwarded; (const char*, u16*, tandem_mma_src_shape = tandem_q8_shape's layout).
    unsafe { convert_src1(ctx, src1, MMA_FAMILY, entry, 2, MMA_COPY_VALUES, extra) }
}

/// Bytes of scratch after the q8-rounded f16 copy of `k`-value columns that the block types'
/// Hopper GEMM may read: one tile of columns, so that its tiles copy every column unmasked (the
/// values read there reach only the tile columns past n, which it does not store).
pub fn wgmma_acts_padding(k: i64) -> i64 {
    WGMMA_TILE_N * k * 2
}

/// Queues the q8-rounded f16 copy of `src1` (`tandem_mma_f16_q8_copy`) for the Hopper GEMM of
/// the 32-value block types, followed by [`wgmma_acts_padding`] bytes of scratch, the columns'
/// scales (an f32 each) and `extra` bytes (256-byte aligned) for the GEMM's split tiles; returns
/// the copy's address, the scales' and the extra bytes'.
///
/// # Safety
/// As [`quantize_src1`].
unsafe fn f16_q8_src1(
    ctx: &LaunchCtx<'_>,
    src1: &Tensor,
    extra: usize,
) -> Result<(DevicePtr, DevicePtr, DevicePtr), KernelError> {
    let q = Q8Shape::of(src1);
    let (scales_at, bytes) =
        f16_q8_layout(q.columns(), q.ne[0]).ok_or_else(|| launch_error("f16_q8_copy", "bad activation shape"))?;
    let extra_at = bytes.next_multiple_of(256);
    let total = extra_at
        .checked_add(extra)
        .filter(|&t| t <= MAX_SCRATCH)
        .ok_or_else(|| launch_error("f16_q8_copy", "activations and split sums exceed the scratch limit"))?;
    let xh = ctx.scratch.get(total)?;
    let scales = xh.offset(scales_at);
    let f = ctx.kernels.function(MMA_FAMILY, "tandem_mma_f16_q8_copy")?;
    let mut args = KernelArgs::new();
    args.push(dptr(src1)).push(xh).push(scales).push(q);
    // SAFETY: (const char*, u16*, float*, tandem_mma_src_shape = tandem_q8_shape's layout); src1
    // is readable through its strides (caller), the scratch region holds the copy, the padding
    // and a scale per column.
    unsafe { ctx.stream.launch(&f, column_blocks_config(&q), &mut args) }.map_err(KernelError::Gpu)?;
    Ok((xh, scales, xh.offset(extra_at)))
}

/// Where the column scales of `tandem_mma_f16_q8_copy`'s copy of `columns` columns of `k` values
/// start (after the copy, rounded up to 256 bytes, and [`wgmma_acts_padding`]), and the bytes of
/// scratch all of it takes; None past `MAX_SCRATCH`.
fn f16_q8_layout(columns: i64, k: i64) -> Option<(usize, usize)> {
    let copy = u64::try_from(columns.checked_mul(k)?.checked_mul(2)?).ok()?;
    let scales_at = i64::try_from(copy.checked_next_multiple_of(256)?)
        .ok()?
        .checked_add(wgmma_acts_padding(k))?;
    let bytes = scales_at.checked_add(columns.checked_mul(4)?)?;
    (columns >= 0 && k >= 0 && bytes <= MAX_SCRATCH as i64).then_some((scales_at as usize, bytes as usize))
}

/// One block of [`QUANTIZE_THREADS`] per column of `q` (grid.y, the kernel striding past
/// [`MAX_GRID_YZ`]): `tandem_mma_f16_q8_copy`.
pub fn column_blocks_config(q: &Q8Shape) -> LaunchConfig {
    LaunchConfig {
        grid: [1, q.columns().clamp(1, MAX_GRID_YZ) as u32, 1],
        block: [QUANTIZE_THREADS, 1, 1],
        shared_bytes: 0,
    }
}

/// Weight types whose CPU dot products quantize activations to q8_0 or q8_1 (32-value blocks,
/// f16 scale), which `round_src1` reproduces.
pub fn rounds_activations(ty: ElemType) -> bool {
    matches!(tandem_ops::vecdot::vec_dot_type(ty), ElemType::Q8_0 | ElemType::Q8_1) && ty.is_quantized()
}

/// Queues the rounding of `src1` to q8 values (as f32, contiguous, in scratch) and returns the
/// tensor that describes the copy.
///
/// # Safety
/// As [`quantize_src1`].
unsafe fn round_src1(ctx: &LaunchCtx<'_>, src1: &Tensor) -> Result<Tensor, KernelError> {
    let q = Q8Shape::of(src1);
    if q.ne[0] <= 0 || q.ne[0] % 32 != 0 {
        return Err(launch_error(
            "q8_round",
            "activation rows are not whole 32-value blocks",
        ));
    }
    // SAFETY: forwarded; (const char*, float*, tandem_q8_shape).
    let (out, _) = unsafe { convert_src1(ctx, src1, GEMV_FAMILY, "tandem_q8_round_f32", 4, 1, 0) }?;
    let mut t = src1.clone();
    t.data = out.0 as usize;
    t.nb = tandem_graph::tensor::contiguous_strides(ElemType::F32, &t.ne);
    Ok(t)
}

fn aligned(p: DevicePtr, to: u64) -> bool {
    p.0.is_multiple_of(to)
}

/// The device alignment the kernels assume: weight rows 2-byte (4 for f32), activations and
/// outputs 4-byte.
fn check_alignment(call: &'static str, w: &Tensor, src1: &Tensor, dst: &Tensor) -> Result<(), KernelError> {
    let wa = if w.ty == ElemType::F32 { 4 } else { 2 };
    if aligned(dptr(w), wa) && aligned(dptr(src1), 4) && aligned(dptr(dst), 4) {
        Ok(())
    } else {
        Err(launch_error(call, "tensor data is not aligned to its element size"))
    }
}

/// MUL_MAT with at most eight columns: quantize the activations (quantized weights), then one
/// GEMV pass over the weights.
///
/// # Safety
/// [`crate::gpu::registry::Launch`]'s contract; the gemv predicate accepted `node`.
pub unsafe fn launch_gemv(ctx: &LaunchCtx<'_>, node: &Node<'_>) -> Result<(), KernelError> {
    let (w, src1) = match (node.src(0), node.src(1)) {
        (Some(w), Some(x)) => (w, x),
        _ => return Err(launch_error("gemv", "MUL_MAT without two sources")),
    };
    let s = MulMatShape::new(node.dst, w, src1).ok_or_else(|| launch_error("gemv", "empty batch"))?;
    check_alignment("gemv", w, src1, node.dst)?;
    if let Some(entry) = mmv_entry(w.ty).filter(|_| mmv_allowed(&ctx.info.arch) && mmv_fits(w.ty, dptr(w), &s)) {
        if q8_1_layout(Q8Shape::of(src1).columns(), s.k).is_some() && s.batches() <= MAX_GRID_YZ {
            let f = ctx.kernels.function(MMA_FAMILY, entry)?;
            // SAFETY: forwarded; src1 is a device f32 tensor (predicate).
            let (qs, ds) = unsafe { quantize_src1(ctx, src1) }?;
            let mut args = KernelArgs::new();
            args.push(dptr(w)).push(qs).push(ds).push(dptr(node.dst)).push(s);
            // SAFETY: (w, aq, ads, dst, tandem_mm_shape); rows past m, columns past n and groups
            // past k copy nothing; rows and batch bases are 16-byte aligned (`mmv_fits`), so the
            // 16-byte copies stay inside each row; the q8_1 copy holds every column of every batch.
            return unsafe {
                ctx.stream
                    .launch(&f, mmv_config(w.ty, &s, ctx.info.compute_units), &mut args)
            }
            .map_err(KernelError::Gpu);
        }
    }
    // SAFETY: forwarded.
    if unsafe { launch_seg(ctx, w, src1, None, node.dst, &s) }? {
        return Ok(());
    }
    let waves = gemv_waves(ctx.info.warp_size);
    let names = entries(w.ty).ok_or_else(|| launch_error("gemv", "no kernel for this weight type"))?;
    let f = ctx
        .kernels
        .function(GEMV_FAMILY, if s.n == 1 { names[0] } else { names[1] })?;
    // Quantized weights: waves * rpw rows per block; float weights: GEMV_FLOAT_ROWS rows per
    // block for one column, else one.
    let per_block = if uses_q8_1(w.ty) {
        waves * rows_per_wave(s.m * s.batches(), waves, ctx.info.compute_units)
    } else if s.n == 1 {
        GEMV_FLOAT_ROWS
    } else {
        1
    };
    let mut args = KernelArgs::new();
    args.push(dptr(w));
    let mut fused = None;
    if uses_q8_1(w.ty) {
        args.push(dptr(src1));
        if gemv_fuses_quantize(s.k, s.n) {
            fused = Some(gemv_act_bytes(s.k, s.n));
            args.push(DevicePtr(0)).push(DevicePtr(0));
        } else {
            // SAFETY: forwarded; src1 is a device f32 tensor (predicate).
            let (qs, ds) = unsafe { quantize_src1(ctx, src1) }?;
            args.push(qs).push(ds);
        }
    } else {
        args.push(dptr(src1));
    }
    args.push(dptr(node.dst)).push(s);
    let shared = gemv_shared_bytes(w.ty, waves, gemv_stages(w.ty, s.n), fused);
    let cfg = gemv_config(w.ty, s.m, s.batches(), per_block, shared);
    // SAFETY: the kernel's parameters are (w, [src1, aq, ads | src1], dst, tandem_mm_shape) as
    // pushed (aq = ads = null: the block quantizes src1 itself, with the shared memory counted
    // above); every row, column and output the grid reaches lies inside the tensors. The GEMVs
    // read only the weights before tandem_grid_wait, and as a dependent launch only where no node
    // of the graph writes them (`settled`).
    unsafe { launch_decode(ctx, &f, cfg, &mut args) }
}

/// A GLU gate a one-column segment GEMV computes as it reads its column (`TANDEM_MM_GLU_SHIFT`
/// in gemv.hip): the column is `op(src1, g)` elementwise, `g` laid out as src1.
#[derive(Clone, Copy, Debug)]
pub struct GluGate {
    pub g: DevicePtr,
    pub op: GluOp,
}

/// Bit of `MulMatShape::flags` where the GLU gate's op (+ 1) starts (`TANDEM_MM_GLU_SHIFT`).
pub const MM_GLU_SHIFT: i64 = 8;

/// Queues the segment GEMV (`tandem_gemv_<t>_s1`, `_u1` or `_n1`) of `w` on `src1` into `dst` where
/// this device runs one for the shape; `Ok(false)` (nothing queued) where it does not. With
/// `glu` the column is that gate's result, computed as the kernel reads it; the column is then
/// read after the wait for the kernels ahead (they write the gate's operands).
///
/// # Safety
/// As [`launch_gemv`]; with `glu`, `glu.g` holds as many f32 values as src1, with its strides.
pub unsafe fn launch_seg(
    ctx: &LaunchCtx<'_>,
    w: &Tensor,
    src1: &Tensor,
    glu: Option<GluGate>,
    dst: &Tensor,
    s: &MulMatShape,
) -> Result<bool, KernelError> {
    let waves = gemv_waves(ctx.info.warp_size);
    let (warp, units) = (ctx.info.warp_size, ctx.info.compute_units);
    let seg = gemv_seg_fits(w.ty, dptr(w), s, waves, warp, units, &ctx.info.arch)
        && !crate::config::Config::get().is_disabled(SEG_SWITCH);
    let in_units = seg && seg_in_units(w.ty, s.k, warp, &ctx.info.arch);
    // In units the column is read and quantized before the wait where it is in place.
    let early = if in_units && ctx.act_ready && glu.is_none() {
        MM_ACT_EARLY
    } else {
        0
    };
    let overlapped = overlaps_ahead(ctx, early != 0);
    let narrow = seg_narrow(w.ty, s, waves, warp, units, in_units, overlapped);
    let Some(entry) = if narrow {
        seg_narrow_entry(w.ty)
    } else if in_units {
        seg_units_entry(w.ty)
    } else {
        seg_entry(w.ty)
    }
    .filter(|_| seg) else {
        return Ok(false);
    };
    let f = ctx.kernels.function(GEMV_FAMILY, entry)?;
    let cfg = gemv_seg_config(w.ty, s, waves, warp, units, in_units, overlapped);
    let gate = glu.map_or(0, |g| (g.op as i64 + 1) << MM_GLU_SHIFT);
    let mut args = KernelArgs::new();
    args.push(dptr(w))
        .push(dptr(src1))
        .push(glu.map_or(DevicePtr(0), |g| g.g))
        .push(dptr(dst))
        .push(MulMatShape {
            flags: early | gate,
            ..*s
        });
    // SAFETY: (w, src1, gb, dst, tandem_mm_shape); the grid's waves take rows [0, m) of each
    // batch (stretches or units), whose weights are `m * nb01` contiguous bytes from a
    // 16-byte-aligned base (`gemv_seg_fits`), read in 16-byte units up to that end; the block
    // quantizes src1's one column (with a gate, op(src1, gb) read at the same offsets) into the
    // shared memory counted by the config, before tandem_grid_wait only with MM_ACT_EARLY (no
    // kernel ahead of it still writes src1). Dependent launch as in `launch_decode`, but for
    // the stretch walk.
    unsafe {
        if in_units || narrow {
            launch_decode(ctx, &f, cfg, &mut args)
        } else {
            // The stretch walk (a dense FFN's down projection, k 14336) as a dependent launch
            // took 25.6 µs from its start and 19.9 of a layer's time behind the GLU gate, against
            // 13.2 as an ordinary launch (H200, dense Q4_0 decode, kernel trace of the run,
            // forty-seventh record): one block per SM, its blocks wait beside the kernel ahead
            // with one step loaded, and its column (all k values) is read and quantized only
            // after the wait.
            ctx.stream.launch(&f, cfg, &mut args).map_err(KernelError::Gpu)
        }
    }
    .map(|()| true)
}

/// Queues a decode GEMV: a dependent launch where no node of the graph writes its weights
/// (`ctx.settled`), else an ordinary one.
///
/// # Safety
/// As for the stream's launches: `args` are the kernel's parameters, valid for `cfg`'s grid; the
/// kernel reads nothing but its weights before tandem_grid_wait.
unsafe fn launch_decode(
    ctx: &LaunchCtx<'_>,
    f: &crate::gpu::safe::Function,
    cfg: LaunchConfig,
    args: &mut KernelArgs,
) -> Result<(), KernelError> {
    // SAFETY: forwarded from the caller.
    unsafe {
        if ctx.settled {
            ctx.stream.launch_dependent(f, cfg, args)
        } else {
            ctx.stream.launch(f, cfg, args)
        }
    }
    .map_err(KernelError::Gpu)
}

/// Whether the activation copy a matrix-instruction GEMM reads fits the scratch memory: the q8_1
/// copy of `columns` columns of `k` values (`q8`), else their f16 copy.
fn acts_copy_fits(q8: bool, columns: i64, k: i64) -> bool {
    if q8 {
        q8_1_layout(columns, k).is_some()
    } else {
        columns
            .checked_mul(k)
            .and_then(|v| v.checked_mul(2))
            .is_some_and(|b| b <= MAX_SCRATCH as i64)
    }
}

/// MUL_MAT with more than eight columns: the tensor-core GEMM where the device and the weight
/// type have one, else the portable tiled GEMM on f32 activations.
///
/// # Safety
/// As for [`launch_gemv`], for the gemm predicate.
pub unsafe fn launch_gemm(ctx: &LaunchCtx<'_>, node: &Node<'_>) -> Result<(), KernelError> {
    let (w, src1) = match (node.src(0), node.src(1)) {
        (Some(w), Some(x)) => (w, x),
        _ => return Err(launch_error("gemm", "MUL_MAT without two sources")),
    };
    check_alignment("gemm", w, src1, node.dst)?;
    if let (Some(entry), Some(layout)) = (wmma_entry(w.ty), wmma_layout(&ctx.info.arch, w.ty)) {
        let s = MulMatShape::new(node.dst, w, src1).ok_or_else(|| launch_error("gemm", "empty batch"))?;
        let fits = acts_copy_fits(uses_q8_1(w.ty), Q8Shape::of(src1).columns(), s.k);
        let tile_m = mma_tile(w.ty).1;
        if fits && (s.m + tile_m - 1) / tile_m <= MAX_GRID_YZ && s.batches() <= MAX_GRID_YZ {
            let f = ctx.kernels.function(WMMA_FAMILY, entry)?;
            let mut args = KernelArgs::new();
            args.push(dptr(w));
            if uses_q8_1(w.ty) {
                // SAFETY: forwarded; src1 is a device f32 tensor (predicate).
                let (qs, ds) = unsafe { quantize_src1(ctx, src1) }?;
                args.push(qs).push(ds);
            } else {
                // SAFETY: forwarded; src1 is a device f32 tensor (predicate); the copy kernel is
                // `tandem_mma_f16_copy` under the wmma family's name.
                args.push(
                    unsafe { convert_src1(ctx, src1, WMMA_FAMILY, "tandem_wmma_f16_copy", 2, MMA_COPY_VALUES, 0) }?.0,
                );
            }
            args.push(dptr(node.dst)).push(s).push(layout);
            // SAFETY: (w, aq, ads | xh, dst, tandem_mm_shape, int layout); tiles past m, n or k
            // are masked in the kernel; the q8_1 or f16 copy holds every column of every batch.
            return unsafe { ctx.stream.launch(&f, mma_config(w.ty, &s), &mut args) }.map_err(KernelError::Gpu);
        }
    }
    if let Some(entry) = mma_entry(w.ty).filter(|_| mma_allowed(&ctx.info.arch)) {
        let s = MulMatShape::new(node.dst, w, src1).ok_or_else(|| launch_error("gemm", "empty batch"))?;
        let columns = Q8Shape::of(src1).columns();
        let units = i64::from(ctx.info.compute_units.max(1));
        let f16_prefill = crate::config::Config::get().f16_prefill;
        let hopper = wgmma_allowed(ctx.kernels.target());
        let wgmma =
            wgmma_entry(w.ty).filter(|_| hopper && wgmma_takes(w.ty, f16_prefill, &s) && wgmma_fits(w.ty, dptr(w), &s));
        let wgmmq = wgmmq_entry(w.ty).filter(|_| hopper && wgmma.is_none() && wgmmq_fits(w.ty, dptr(w), &s));
        // The activations the kernel reads: q8_1 for the int8 GEMMs, else an f16 copy (rounded to
        // q8 first for the block types' Hopper GEMM).
        let acts = match (wgmma.is_some(), uses_q8_1(w.ty)) {
            (false, true) => MmaActs::Q8_1,
            (true, true) => MmaActs::F16Q8,
            (_, false) if w.ty == ElemType::BF16 => MmaActs::Bf16,
            (_, false) => MmaActs::F16,
        };
        let fits = match acts {
            MmaActs::F16Q8 => f16_q8_layout(columns, s.k).is_some(),
            _ => acts_copy_fits(acts == MmaActs::Q8_1, columns, s.k),
        };
        // The Hopper GEMMs of f16 and bf16 weights and the Hopper int8 GEMM (one block per SM each)
        // run their tiles over a one-dimensional grid whose last wave is split in k ranges
        // ([`MmSplit`]).
        let (entry, cfg, mut split, tile_m) = match (wgmma, wgmmq) {
            (Some(e), _) => {
                let split = MmSplit::new(&s, WGMMA_TILE, (s.k + 63) / 64, units);
                (e, wgmma_config(w.ty, &split), Some((split, WGMMA_TILE)), WGMMA_TILE_M)
            }
            (None, Some(e)) => {
                let split = MmSplit::new(&s, WGMMQ_TILE, s.k / 128, units);
                (e, wgmmq_config(w.ty, &split), Some((split, WGMMQ_TILE)), WGMMQ_TILE_M)
            }
            (None, None) => (entry, mma_config(w.ty, &s), None, mma_tile(w.ty).1),
        };
        let grid_ok = match &split {
            Some((sp, _)) => sp.blocks() <= MAX_GRID_X,
            None => (s.m + tile_m - 1) / tile_m <= MAX_GRID_YZ,
        };
        if fits && grid_ok {
            let f = ctx.kernels.function(MMA_FAMILY, entry)?;
            let mut args = KernelArgs::new();
            args.push(dptr(w));
            let extra = split.as_ref().map_or(0, |(sp, tile)| sp.partial_bytes(tile.0 * tile.1));
            // Each activation copy is followed by `extra` bytes of scratch for the split tiles.
            let partial = match acts {
                MmaActs::Q8_1 => {
                    // SAFETY: forwarded; src1 is a device f32 tensor (predicate).
                    let (qs, ds, partial) = unsafe { quantize_src1_with(ctx, src1, extra) }?;
                    args.push(qs).push(ds);
                    partial
                }
                MmaActs::F16 | MmaActs::Bf16 => {
                    // SAFETY: forwarded; src1 is a device f32 tensor (predicate).
                    let (xh, partial) = unsafe { half_src1(ctx, src1, acts == MmaActs::Bf16, extra) }?;
                    args.push(xh);
                    partial
                }
                MmaActs::F16Q8 => {
                    // SAFETY: forwarded; src1 is a device f32 tensor (predicate).
                    let (xh, scales, partial) = unsafe { f16_q8_src1(ctx, src1, extra) }?;
                    args.push(xh).push(scales);
                    partial
                }
            };
            if let Some((sp, _)) = split.as_mut() {
                sp.partial = partial.0;
            }
            args.push(dptr(node.dst)).push(s);
            let Some((split, tile)) = split else {
                // SAFETY: (w, [aq, ads | xh], dst, tandem_mm_shape); tiles past m, n or k are
                // masked in the kernel; the q8_1 or f16 copy holds every column of every batch;
                // the Hopper f16 GEMMs' copies were checked by `wgmma_fits`.
                return unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu);
            };
            args.push(split);
            // SAFETY: (w, [aq, ads | xh], dst, tandem_mm_shape, tandem_mm_split); tiles past m,
            // n or k are masked in the kernel, the q8_1 or f16 copy holds every column of every
            // batch, the copies were checked by `wgmma_fits` / `wgmmq_fits`; the grid is
            // `split.blocks()` and `split.partial` holds `partial_bytes` of scratch.
            unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)?;
            if split.parts > 1 {
                let f = ctx.kernels.function(MMA_FAMILY, "tandem_mm_split_sum")?;
                let mut args = KernelArgs::new();
                args.push(dptr(node.dst)).push(s).push(split).push(tile.0).push(tile.1);
                // SAFETY: (dst, tandem_mm_shape, tandem_mm_split, bm, bn) as the GEMM just
                // queued on this stream wrote them.
                unsafe { ctx.stream.launch(&f, split_sum_config(&split, tile), &mut args) }
                    .map_err(KernelError::Gpu)?;
            }
            return Ok(());
        }
    }
    // Weights whose CPU dot products take q8_0/q8_1 activations meet activations rounded the same
    // way, so prefill gives the CPU's results up to f32 summation order.
    let rounded;
    let src1 = if rounds_activations(w.ty) {
        // SAFETY: forwarded; src1 is a device f32 tensor (predicate).
        rounded = unsafe { round_src1(ctx, src1) }?;
        &rounded
    } else {
        src1
    };
    let s = MulMatShape::new(node.dst, w, src1).ok_or_else(|| launch_error("gemm", "empty batch"))?;
    let names = entries(w.ty).ok_or_else(|| launch_error("gemm", "no kernel for this weight type"))?;
    let (parts, chunk) = gemm_k_parts(&s, i64::from(ctx.info.compute_units.max(1)));
    if w.ty == ElemType::F32 && parts > 1 {
        let bytes =
            usize::try_from(parts * s.m * s.n * 4).map_err(|_| launch_error("gemm", "partial sums too large"))?;
        let partial = ctx.scratch.get(bytes)?;
        let f = ctx.kernels.function(GEMM_FAMILY, "tandem_gemm_f32_parts")?;
        let mut args = KernelArgs::new();
        args.push(dptr(w))
            .push(dptr(src1))
            .push(dptr(node.dst))
            .push(s)
            .push(partial)
            .push(chunk);
        let mut cfg = gemm_config(&s);
        cfg.grid[2] = parts as u32;
        // SAFETY: (w, src1, dst, tandem_mm_shape, char* partial, i64 chunk); part z reads k in
        // [z * chunk, min(k, (z + 1) * chunk)) and writes its m x n sums at partial + z * m * n
        // floats, inside the `parts * m * n` floats of scratch.
        unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)?;
        let f = ctx.kernels.function(GEMM_FAMILY, "tandem_gemm_sum_parts")?;
        let mut args = KernelArgs::new();
        args.push(partial).push(dptr(node.dst)).push(s).push(parts);
        let cfg = LaunchConfig {
            grid: [((s.m + 255) / 256) as u32, s.n.min(MAX_GRID_YZ) as u32, 1],
            block: [256, 1, 1],
            shared_bytes: 0,
        };
        // SAFETY: (const char* partial, char* dst, tandem_mm_shape, i64 parts); one thread per
        // row below m, columns grid-strided below n.
        return unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu);
    }
    let f = ctx.kernels.function(GEMM_FAMILY, names[3])?;
    let mut args = KernelArgs::new();
    args.push(dptr(w)).push(dptr(src1)).push(dptr(node.dst)).push(s);
    // SAFETY: (w, src1, dst, tandem_mm_shape); tiles past m, n or k are masked in the kernel.
    unsafe { ctx.stream.launch(&f, gemm_config(&s), &mut args) }.map_err(KernelError::Gpu)
}

/// Split-k of the portable f32 GEMM (`tandem_gemm_f32_parts`): (parts, values of k per part).
/// Where one batch's 64 x 64 tiles would leave more than half of the device's `units` idle (a
/// MoE router's 128 rows give 2 tiles a 64-column stripe) and k is long, k is cut into parts of
/// at least 256 values (a multiple of the 32-value step) so that the device gets about two
/// blocks a unit; the parts' sums are added in order afterwards. (1, k) otherwise.
pub fn gemm_k_parts(s: &MulMatShape, units: i64) -> (i64, i64) {
    let tiles = ((s.n + GEMM_TILE - 1) / GEMM_TILE) * ((s.m + GEMM_TILE - 1) / GEMM_TILE);
    if s.batches() != 1 || tiles * 2 > units || s.k < 512 {
        return (1, s.k);
    }
    let want = ((2 * units + tiles - 1) / tiles).min(s.k / 256).clamp(1, 64);
    let chunk = ((s.k + want - 1) / want + 31) / 32 * 32;
    ((s.k + chunk - 1) / chunk, chunk)
}

/// MUL_MAT_ID in GEMV form: one block per (rows, slot); only the selected experts are read.
///
/// # Safety
/// As for [`launch_gemv`], for the mul_mat_id predicate; ids is a device i32 tensor.
pub unsafe fn launch_mul_mat_id(ctx: &LaunchCtx<'_>, node: &Node<'_>) -> Result<(), KernelError> {
    let (w, src1, ids) = match (node.src(0), node.src(1), node.src(2)) {
        (Some(w), Some(x), Some(i)) => (w, x, i),
        _ => return Err(launch_error("mul_mat_id", "MUL_MAT_ID without three sources")),
    };
    check_alignment("mul_mat_id", w, src1, node.dst)?;
    if !aligned(dptr(ids), 4) {
        return Err(launch_error("mul_mat_id", "ids data is not 4-byte aligned"));
    }
    let s = MulMatIdShape::new(node.dst, w, src1, ids);
    let grouped = match (mmid_wmma_entry(w.ty), wmma_layout(&ctx.info.arch, w.ty)) {
        (Some(entry), Some(layout)) => Some(GroupedTiles {
            family: WMMA_FAMILY,
            route: "tandem_wmma_route",
            entry,
            layout: Some(layout),
        }),
        _ => mmid_mma_entry(w.ty)
            .filter(|_| mma_allowed(&ctx.info.arch))
            .map(|entry| GroupedTiles {
                family: MMA_FAMILY,
                route: "tandem_mmid_route",
                entry,
                layout: None,
            }),
    };
    if let (Some(tiles), Some(lists_bytes)) = (grouped, mmid_grouped_bytes(&s)) {
        // SAFETY: forwarded.
        return unsafe { launch_mul_mat_id_grouped(ctx, node, w, src1, ids, &s, tiles, lists_bytes) };
    }
    let waves = gemv_waves(ctx.info.warp_size);
    let (warp, units) = (ctx.info.warp_size, ctx.info.compute_units);
    // The experts may be read before the wait where the ids are in place ahead of the kernel and
    // no node writes the experts (float experts always wait first).
    let early = ctx.ids_ready && ctx.settled && uses_q8_1(w.ty);
    let flags = if early { MMID_IDS_EARLY } else { 0 };
    if let Some(entry) = mmid_units_entry(w.ty).filter(|_| mmid_in_units(w.ty, dptr(w), &s, warp, &ctx.info.arch)) {
        let f = ctx.kernels.function(GEMV_FAMILY, entry)?;
        let flags = if early && ctx.act_ready {
            flags | MMID_ACT_EARLY
        } else {
            flags
        };
        let s = MulMatIdShape { flags, ..s };
        let mut args = KernelArgs::new();
        args.push(dptr(w))
            .push(dptr(src1))
            .push(dptr(ids))
            .push(dptr(node.dst))
            .push(s);
        // SAFETY: (w, src1, ids, dst, tandem_mmid_shape); each slot's expert (checked on the
        // device before any weight is read) has m rows of `nb01` bytes back to back from a
        // 16-byte-aligned base (`mmid_in_units`), read in 16-byte units up to their end; the
        // block quantizes its slot's column into the shared memory the config counts. It reads
        // only the ids and weights before tandem_grid_wait, and those only with MMID_IDS_EARLY
        // (as below), and its column only with MMID_ACT_EARLY, set where `ctx.act_ready` says
        // no kernel ahead of it still writes it, so it may be a dependent launch.
        return unsafe {
            ctx.stream.launch_dependent(
                &f,
                mmid_units_config(
                    w.ty,
                    &s,
                    waves,
                    warp,
                    units,
                    overlaps_ahead(ctx, s.flags & MMID_ACT_EARLY != 0),
                ),
                &mut args,
            )
        }
        .map_err(KernelError::Gpu);
    }
    let names = entries(w.ty).ok_or_else(|| launch_error("mul_mat_id", "no kernel for this weight type"))?;
    let f = ctx.kernels.function(GEMV_FAMILY, names[2])?;
    let per_block = if uses_q8_1(w.ty) {
        waves * rows_per_wave(s.m * s.slots(), waves, ctx.info.compute_units)
    } else {
        1
    };
    let mut args = KernelArgs::new();
    args.push(dptr(w));
    let mut fused = None;
    if uses_q8_1(w.ty) {
        args.push(dptr(src1));
        if gemv_fuses_quantize(s.k, 1) {
            fused = Some(gemv_act_bytes(s.k, 1));
            args.push(DevicePtr(0)).push(DevicePtr(0));
        } else {
            // SAFETY: forwarded; src1 is a device f32 tensor (predicate).
            let (qs, ds) = unsafe { quantize_src1(ctx, src1) }?;
            args.push(qs).push(ds);
        }
    } else {
        args.push(dptr(src1));
    }
    let s = MulMatIdShape { flags, ..s };
    args.push(dptr(ids)).push(dptr(node.dst)).push(s);
    let cfg = gemv_config(
        w.ty,
        s.m,
        s.slots(),
        per_block,
        gemv_shared_bytes(w.ty, waves, 1, fused),
    );
    // SAFETY: (w, [src1, aq, ads | src1], ids, dst, tandem_mmid_shape) as pushed; expert indices
    // are checked on the device before any weight is read. The kernel calls tandem_grid_wait
    // before it reads anything but the ids and weights, and reads those before it only with
    // MMID_IDS_EARLY, set where `ctx.ids_ready` says no kernel ahead of it still writes the ids
    // and `ctx.settled` that none writes the experts, so it may be a dependent launch.
    unsafe { ctx.stream.launch_dependent(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// The name `TANDEM_DISABLE_DISPATCH` takes to keep MUL_MAT_ID off its units form
/// (`tandem_mmid_<t>_u1`; the GEMV form `tandem_mul_mat_id_<t>` runs instead).
/// [`SEG_UNITS_SWITCH`] keeps it off too.
pub const MMID_UNITS_SWITCH: &str = "hip.mmid.units";

/// MUL_MAT_ID in units (`tandem_mmid_<t>_u1`: each slot's expert walked as the one-column
/// segment GEMV walks a batch in units) for experts of `ty`: q4_0, q4_K, q8_0 and q6_K.
pub fn mmid_units_entry(ty: ElemType) -> Option<&'static str> {
    match ty {
        ElemType::Q4_0 => Some("tandem_mmid_q4_0_u1"),
        ElemType::Q4K => Some("tandem_mmid_q4_K_u1"),
        ElemType::Q8_0 => Some("tandem_mmid_q8_0_u1"),
        ElemType::Q6K => Some("tandem_mmid_q6_K_u1"),
        _ => None,
    }
}

/// Whether a GEMV-form MUL_MAT_ID (at most [`GEMV_MAX_COLUMNS`] tokens) of experts of `ty` at
/// `base` with shape `s` runs in units on a device with `warp_size`-lane waves and compile
/// target `arch`: rows of `k` weights that the one-column GEMV takes in
/// units ([`seg_in_units`]), k a multiple of 256, each expert's rows back to back and every
/// expert's base 16-byte aligned, the block's shared memory within a block's limit, and
/// [`MMID_UNITS_SWITCH`] not given.
pub fn mmid_in_units(ty: ElemType, base: DevicePtr, s: &MulMatIdShape, warp_size: u32, arch: &str) -> bool {
    mmid_units_entry(ty).is_some()
        && s.n_tokens <= GEMV_MAX_COLUMNS
        && s.k > 0
        && s.k % 256 == 0
        && seg_in_units(ty, s.k, warp_size, arch)
        && ty.row_size(s.k).is_some_and(|r| r as i64 == s.nb01)
        && (base.0 as i64 | s.nb02) % 16 == 0
        && s.m > 0
        && s.m <= i64::from(i32::MAX)
        && s.slots() <= MAX_GRID_YZ
        && seg_block_shared(ty, s.k, gemv_waves(warp_size), warp_size, true) <= i64::from(seg_shared_limit(arch))
        && !crate::config::Config::get().is_disabled(MMID_UNITS_SWITCH)
}

/// Launch geometry of `tandem_mmid_<t>_u1`: one grid row per slot, and per slot as many
/// blocks of `waves` waves as give the grid about two per SM/CU over all slots (as the
/// one-column GEMV in units), no more than give every wave a unit.
pub fn mmid_units_config(
    ty: ElemType,
    s: &MulMatIdShape,
    waves: i64,
    warp_size: u32,
    units: u32,
    overlapped: bool,
) -> LaunchConfig {
    let rows = (i64::from(warp_size) / seg_segments(ty, s.k).max(1)).max(1);
    let work = (s.m.max(1) + rows - 1) / rows;
    let slots = s.slots().max(1);
    // As the GEMV's units walk: at most one block per SM where the slots' units fit SEGU_HELD
    // steps per wave so, else about two.
    let sms = i64::from(units.max(1));
    let one_per_sm = overlapped && slots <= sms && units_one_per_unit(work * slots, waves, units).is_some();
    let wanted = if one_per_sm {
        sms / slots
    } else {
        (2 * sms + slots - 1) / slots
    };
    let per_slot = wanted.min((work + waves - 1) / waves).max(1);
    LaunchConfig {
        grid: [per_slot as u32, slots.min(MAX_GRID_YZ) as u32, 1],
        block: [GEMV_THREADS, 1, 1],
        shared_bytes: seg_block_shared(ty, s.k, waves, warp_size, true) as u32,
    }
}

/// The tensor-core MUL_MAT_ID entry (tokens grouped by expert) for experts of `ty`, if any.
pub fn mmid_mma_entry(ty: ElemType) -> Option<&'static str> {
    Some(match ty {
        ElemType::Q4_0 => "tandem_mmid_mma_q4_0",
        ElemType::Q4_1 => "tandem_mmid_mma_q4_1",
        ElemType::Q5_0 => "tandem_mmid_mma_q5_0",
        ElemType::Q5_1 => "tandem_mmid_mma_q5_1",
        ElemType::Q8_0 => "tandem_mmid_mma_q8_0",
        ElemType::IQ4NL => "tandem_mmid_mma_iq4_nl",
        ElemType::Q4K => "tandem_mmid_mma_q4_K",
        ElemType::Q5K => "tandem_mmid_mma_q5_K",
        ElemType::Q2K => "tandem_mmid_mma_q2_K",
        ElemType::Q3K => "tandem_mmid_mma_q3_K",
        ElemType::Q6K => "tandem_mmid_mma_q6_K",
        _ => return None,
    })
}

/// Most experts `tandem_mmid_route` sorts (its shared counters).
pub const MMID_MAX_EXPERTS: i64 = 4096;

/// Bytes of the expert counts and slot lists of a grouped MUL_MAT_ID, or `None` when the
/// node keeps the GEMV form: at most [`GEMV_MAX_COLUMNS`] tokens, too many experts, or lists
/// beyond the scratch limit.
pub fn mmid_grouped_bytes(s: &MulMatIdShape) -> Option<usize> {
    if s.n_tokens <= GEMV_MAX_COLUMNS || s.n_expert > MMID_MAX_EXPERTS || s.n_expert <= 0 {
        return None;
    }
    let lists = s
        .n_expert
        .checked_mul(s.slots())?
        .checked_add(s.n_expert)?
        .checked_mul(4)?;
    usize::try_from(lists).ok().filter(|&b| b <= MAX_SCRATCH)
}

pub fn mmid_mma_config(ty: ElemType, s: &MulMatIdShape) -> LaunchConfig {
    let (threads, tm, tn) = mma_tile(ty);
    LaunchConfig {
        shared_bytes: mmq_shared_bytes(ty),
        ..tile_grid((s.n_tokens, tn), (s.m, tm), s.n_expert, threads)
    }
}

/// The kernels of a grouped MUL_MAT_ID: their family, the routing entry, the per-expert GEMM and,
/// for the WMMA tiles, their register layout (an extra argument).
struct GroupedTiles {
    family: &'static str,
    route: &'static str,
    entry: &'static str,
    layout: Option<i32>,
}

/// MUL_MAT_ID with more than eight tokens on matrix instructions: the activations' q8_1 copy,
/// the slots sorted by expert on the device (`tandem_mmid_route`; `tandem_wmma_route` for the
/// WMMA tiles), then one GEMM per expert over its tokens (`tandem_mmid_mma_<type>` or
/// `tandem_mmid_wmma_<type>`), each expert's weights read once per 64 of them.
///
/// # Safety
/// As [`launch_mul_mat_id`].
#[allow(clippy::too_many_arguments)]
unsafe fn launch_mul_mat_id_grouped(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    w: &Tensor,
    src1: &Tensor,
    ids: &Tensor,
    s: &MulMatIdShape,
    tiles: GroupedTiles,
    lists_bytes: usize,
) -> Result<(), KernelError> {
    let GroupedTiles {
        family,
        route,
        entry,
        layout,
    } = tiles;
    // SAFETY: forwarded; src1 is a device f32 tensor (predicate).
    let (qs, ds, counts) = unsafe { quantize_src1_with(ctx, src1, lists_bytes) }?;
    let lists = counts.offset(s.n_expert as usize * 4);
    let route = ctx.kernels.function(family, route)?;
    let mut args = KernelArgs::new();
    args.push(dptr(ids))
        .push(counts)
        .push(lists)
        .push(dptr(node.dst))
        .push(*s);
    let one = LaunchConfig {
        grid: [1, 1, 1],
        block: [1024, 1, 1],
        shared_bytes: 0,
    };
    // SAFETY: (const char* ids, i32* counts, i32* lists, char* dst, tandem_mmid_shape); the
    // scratch tail holds n_expert counts and n_expert * slots list entries; n_expert is at most
    // MMID_MAX_EXPERTS (mmid_grouped_bytes).
    unsafe { ctx.stream.launch(&route, one, &mut args) }.map_err(KernelError::Gpu)?;
    let f = ctx.kernels.function(family, entry)?;
    let mut args = KernelArgs::new();
    args.push(dptr(w))
        .push(qs)
        .push(ds)
        .push(counts)
        .push(lists)
        .push(dptr(node.dst))
        .push(*s);
    if let Some(layout) = layout {
        args.push(layout);
    }
    // SAFETY: (w, aq, ads, counts, lists, dst, tandem_mmid_shape[, int layout] for the WMMA
    // tiles); every listed slot has a valid expert and its q8_1 column exists; rows past m are
    // masked in the kernel.
    unsafe { ctx.stream.launch(&f, mmid_mma_config(w.ty, s), &mut args) }.map_err(KernelError::Gpu)
}
