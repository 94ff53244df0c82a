//! Launchers of the elementwise family (`kernels-hip/src/elementwise.hip`): the shape structs the
//! kernels take by value, their launch geometry, and checks that keep every access in bounds.
//!
//! The `_f32` launchers run the all-f32 entries; [`launch_combine`] and [`launch_map`] run the
//! `_any` entries, which take the op as a code and the element types (f32, f16, bf16) as ggml
//! type ids.

use super::api::{DevicePtr, LaunchConfig};
use super::kernels::{KernelError, Kernels};
use super::safe::{KernelArgs, Stream};
use tandem_graph::{ElemType, GluOp, UnaryOp};

pub const FAMILY: &str = "elementwise";
const BLOCK: u32 = 256;
/// Grid dimensions stay within what every device accepts in y; both kernel loops are
/// grid-stride, so capping only lengthens the loops.
const MAX_GRID: i64 = 65_535;

/// `tandem_binary_shape`: extents and byte strides of dst (= src0 shape), src0 and src1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinaryShape {
    pub ne: [i64; 4],
    pub ne1: [i64; 4],
    pub nb0: [i64; 4],
    pub nb1: [i64; 4],
    pub nbd: [i64; 4],
}
const _: () = assert!(std::mem::size_of::<BinaryShape>() == 160);

/// `tandem_unary_shape`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnaryShape {
    pub ne: [i64; 4],
    pub nbs: [i64; 4],
    pub nbd: [i64; 4],
}
const _: () = assert!(std::mem::size_of::<UnaryShape>() == 96);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinaryOp {
    pub fn entry(self) -> &'static str {
        match self {
            BinaryOp::Add => "tandem_add_f32",
            BinaryOp::Sub => "tandem_sub_f32",
            BinaryOp::Mul => "tandem_mul_f32",
            BinaryOp::Div => "tandem_div_f32",
        }
    }

    /// The CPU result, for tests.
    pub fn apply(self, x: f32, y: f32) -> f32 {
        match self {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div => x / y,
        }
    }
}

/// What [`launch_combine`] computes: a binary op with src1 broadcast, or a GLU gate
/// `act(x) * g` (x as src0, the gate as src1, same shape).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    Binary(BinaryOp),
    Gate(GluOp),
}

impl Combine {
    /// The op code of `tandem_binary_any` (`TANDEM_BIN_*`).
    pub fn code(self) -> i32 {
        match self {
            Combine::Binary(BinaryOp::Add) => 0,
            Combine::Binary(BinaryOp::Sub) => 1,
            Combine::Binary(BinaryOp::Mul) => 2,
            Combine::Binary(BinaryOp::Div) => 3,
            Combine::Gate(GluOp::Reglu) => 16,
            Combine::Gate(GluOp::Geglu) => 17,
            Combine::Gate(GluOp::Swiglu) => 18,
            Combine::Gate(GluOp::GegluErf) => 19,
            Combine::Gate(GluOp::GegluQuick) => 20,
        }
    }
}

/// What [`launch_map`] computes for each element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Map {
    Unary(UnaryOp),
    /// `x * scale + bias`.
    Scale {
        scale: f32,
        bias: f32,
    },
    /// `max(min(x, max), min)`.
    Clamp {
        min: f32,
        max: f32,
    },
}

impl Map {
    /// The op code of `tandem_unary_any` (`TANDEM_UN_*`: ggml's unary ids, then 64 and 65) and
    /// its two float parameters.
    pub fn code(self) -> (i32, f32, f32) {
        match self {
            Map::Unary(op) => (op as i32, 0.0, 0.0),
            Map::Scale { scale, bias } => (64, scale, bias),
            Map::Clamp { min, max } => (65, min, max),
        }
    }
}

/// The ggml type id the `_any` entries take for an element type they read and write (f32, f16,
/// bf16), `None` for any other type.
pub fn float_type_id(ty: ElemType) -> Option<i32> {
    match ty {
        ElemType::F32 | ElemType::F16 | ElemType::BF16 => Some(ty.ggml_id() as i32),
        _ => None,
    }
}

/// Byte strides of a contiguous f32 tensor of extents `ne`.
pub fn contiguous_f32(ne: [i64; 4]) -> [i64; 4] {
    [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]]
}

/// Number of elements, `None` for a negative extent or an overflow.
fn elements(ne: [i64; 4]) -> Option<i64> {
    ne.iter()
        .try_fold(1i64, |acc, &n| if n < 0 { None } else { acc.checked_mul(n) })
}

impl BinaryShape {
    /// All-contiguous shape with `src1` of extents `ne1` broadcast over `ne`.
    pub fn contiguous(ne: [i64; 4], ne1: [i64; 4]) -> BinaryShape {
        BinaryShape {
            ne,
            ne1,
            nb0: contiguous_f32(ne),
            nb1: contiguous_f32(ne1),
            nbd: contiguous_f32(ne),
        }
    }

    /// ggml's repeat rule: each src1 extent is positive and divides the dst extent.
    pub fn check(&self) -> Result<(), String> {
        elements(self.ne).ok_or("bad dst extents")?;
        for i in 0..4 {
            if self.ne1[i] <= 0 || self.ne[i] % self.ne1[i] != 0 {
                return Err(format!(
                    "src1 extent {} does not repeat into {} (dim {i})",
                    self.ne1[i], self.ne[i]
                ));
            }
        }
        Ok(())
    }
}

/// `tandem_add_id_shape`: dst/src0 extents and strides, src1's element and row strides, the ids'
/// strides and src1's row count (valid ids are `0..rows_b`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddIdShape {
    pub ne: [i64; 4],
    pub nba: [i64; 4],
    pub nbd: [i64; 4],
    pub nbb0: i64,
    pub nbb1: i64,
    pub nbi0: i64,
    pub nbi1: i64,
    pub rows_b: i64,
}
const _: () = assert!(std::mem::size_of::<AddIdShape>() == 136);

/// `tandem_moe_sum_shape`: the MoE weighted sum's extents and byte strides.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoeSumShape {
    /// Values per expert row, experts used, tokens.
    pub e: i64,
    pub k: i64,
    pub t: i64,
    pub nbx1: i64,
    pub nbx2: i64,
    pub nbw0: i64,
    pub nbw1: i64,
    pub nbw2: i64,
    pub nbd1: i64,
}
const _: () = assert!(std::mem::size_of::<MoeSumShape>() == 72);

/// Grid for extents `ne`: x covers dim 0 in blocks of 256, y the rows (dims 1..3).
pub fn launch_config(ne: [i64; 4]) -> LaunchConfig {
    launch_config_by(ne, 1)
}

/// As [`launch_config`] with each thread taking `per_thread` consecutive elements of a row.
fn launch_config_by(ne: [i64; 4], per_thread: i64) -> LaunchConfig {
    let rows = ne[1].max(1) * ne[2].max(1) * ne[3].max(1);
    let per_block = BLOCK as i64 * per_thread;
    let gx = ((ne[0].max(1) + per_block - 1) / per_block).min(MAX_GRID);
    LaunchConfig {
        grid: [gx as u32, rows.min(MAX_GRID) as u32, 1],
        block: [BLOCK, 1, 1],
        shared_bytes: 0,
    }
}

/// Whether `p` and the row strides (dims 1..3) keep every row 16-byte aligned.
fn rows_aligned16(p: DevicePtr, nb: &[i64; 4]) -> bool {
    (p.0 | nb[1] as u64 | nb[2] as u64 | nb[3] as u64) & 15 == 0
}

/// Whether f32 rows of `ne0` values go four a thread: `ne0` a multiple of four and every operand
/// (address, byte strides) contiguous in dim 0 with 16-byte-aligned rows.
fn rows4(ne0: i64, operands: &[(DevicePtr, &[i64; 4])]) -> bool {
    ne0 % 4 == 0 && operands.iter().all(|(p, nb)| nb[0] == 4 && rows_aligned16(*p, nb))
}

/// Elements a thread of the f32 binary loop takes: four where the kernel takes its vector path
/// (`tandem_binary_rows4`: contiguous, 16-byte-aligned rows of a multiple of four, src1's row as
/// long or one value), else one. The kernel decides by the same test; this only sizes the grid.
fn binary_per_thread(all_f32: bool, shape: &BinaryShape, src0: DevicePtr, src1: DevicePtr, dst: DevicePtr) -> i64 {
    let n = shape.ne[0];
    let src1_ok = shape.ne1[0] == 1 || (shape.ne1[0] == n && rows4(n, &[(src1, &shape.nb1)]));
    if all_f32 && src1_ok && rows4(n, &[(src0, &shape.nb0), (dst, &shape.nbd)]) {
        4
    } else {
        1
    }
}

/// As [`binary_per_thread`] for the unary loop.
fn unary_per_thread(all_f32: bool, shape: &UnaryShape, src: DevicePtr, dst: DevicePtr) -> i64 {
    if all_f32 && rows4(shape.ne[0], &[(src, &shape.nbs), (dst, &shape.nbd)]) {
        4
    } else {
        1
    }
}

/// Queues `dst = src0 op src1` (f32, src1 broadcast).
///
/// # Safety
/// The three addresses hold f32 tensors laid out as `shape` says (every element reached through
/// the strides is inside device memory of this context) until the stream has run the kernel.
pub unsafe fn launch_binary(
    k: &Kernels,
    s: &Stream,
    op: BinaryOp,
    src0: DevicePtr,
    src1: DevicePtr,
    dst: DevicePtr,
    shape: &BinaryShape,
) -> Result<(), KernelError> {
    shape
        .check()
        .map_err(|e| KernelError::Gpu(super::GpuError::other("launch_binary", e)))?;
    if elements(shape.ne) == Some(0) {
        return Ok(());
    }
    let f = k.function(FAMILY, op.entry())?;
    let mut args = KernelArgs::new();
    args.push(src0).push(src1).push(dst).push(*shape);
    let cfg = launch_config_by(shape.ne, binary_per_thread(true, shape, src0, src1, dst));
    // SAFETY: the parameter list is (const char*, const char*, char*, tandem_binary_shape) and
    // the caller vouches for the memory.
    unsafe { s.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// Queues `dst = src * scale + bias` (f32).
///
/// # Safety
/// As for [`launch_binary`], for `src` and `dst` laid out as `shape`.
pub unsafe fn launch_scale(
    k: &Kernels,
    s: &Stream,
    src: DevicePtr,
    dst: DevicePtr,
    shape: &UnaryShape,
    scale: f32,
    bias: f32,
) -> Result<(), KernelError> {
    if elements(shape.ne).ok_or_else(|| KernelError::Gpu(super::GpuError::other("launch_scale", "bad extents")))? == 0 {
        return Ok(());
    }
    let f = k.function(FAMILY, "tandem_scale_f32")?;
    let mut args = KernelArgs::new();
    args.push(src).push(dst).push(*shape).push(scale).push(bias);
    let cfg = launch_config_by(shape.ne, unary_per_thread(true, shape, src, dst));
    // SAFETY: the parameter list is (const char*, char*, tandem_unary_shape, float, float).
    unsafe { s.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// Queues `dst = silu(src)` (f32).
///
/// # Safety
/// As for [`launch_scale`].
pub unsafe fn launch_silu(
    k: &Kernels,
    s: &Stream,
    src: DevicePtr,
    dst: DevicePtr,
    shape: &UnaryShape,
) -> Result<(), KernelError> {
    if elements(shape.ne).ok_or_else(|| KernelError::Gpu(super::GpuError::other("launch_silu", "bad extents")))? == 0 {
        return Ok(());
    }
    let f = k.function(FAMILY, "tandem_silu_f32")?;
    let mut args = KernelArgs::new();
    args.push(src).push(dst).push(*shape);
    let cfg = launch_config_by(shape.ne, unary_per_thread(true, shape, src, dst));
    // SAFETY: the parameter list is (const char*, char*, tandem_unary_shape).
    unsafe { s.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

fn bad_extents(call: &'static str) -> KernelError {
    KernelError::Gpu(super::GpuError::other(call, "bad extents"))
}

/// Queues `dst = op(src0, src1)` with src1 broadcast (gates: same shape), any mix of the
/// element types whose ggml ids `types` = [src0, src1, dst] gives (see [`float_type_id`]).
///
/// # Safety
/// The three addresses hold tensors of those types laid out as `shape` says (every element
/// reached through the strides is inside device memory of this context, aligned to its type)
/// until the stream has run the kernel.
pub unsafe fn launch_combine(
    k: &Kernels,
    s: &Stream,
    op: Combine,
    types: [i32; 3],
    src0: DevicePtr,
    src1: DevicePtr,
    dst: DevicePtr,
    shape: &BinaryShape,
) -> Result<(), KernelError> {
    shape
        .check()
        .map_err(|e| KernelError::Gpu(super::GpuError::other("launch_combine", e)))?;
    if elements(shape.ne) == Some(0) {
        return Ok(());
    }
    let per_thread = binary_per_thread(types == [0; 3], shape, src0, src1, dst);
    let cfg = launch_config_by(shape.ne, per_thread);
    if let (Combine::Gate(g), 4) = (op, per_thread) {
        if let Some(entry) = gate4_entry(g, shape) {
            let f = k.function(FAMILY, entry)?;
            let mut args = KernelArgs::new();
            args.push(src0).push(src1).push(dst).push(*shape);
            // SAFETY: the parameter list is (const char*, const char*, char*,
            // tandem_binary_shape); the rows are f32, contiguous and 16-byte aligned
            // (`binary_per_thread`), two-dimensional (`gate4_entry`), and the caller vouches
            // for the memory.
            return unsafe { s.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu);
        }
    }
    let f = k.function(FAMILY, "tandem_binary_any")?;
    let mut args = KernelArgs::new();
    args.push(src0).push(src1).push(dst).push(*shape);
    args.push(op.code()).push(types[0]).push(types[1]).push(types[2]);
    // SAFETY: the parameter list is (const char*, const char*, char*, tandem_binary_shape, int,
    // int, int, int) and the caller vouches for the memory.
    unsafe { s.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// The short entry of gate `g` for an all-f32 gate whose rows go four values a thread: two
/// dimensions (the kernel walks rows by `nb[1]` only) and extents that fit its 32-bit indices;
/// `None` leaves the node to `tandem_binary_any`.
fn gate4_entry(g: GluOp, shape: &BinaryShape) -> Option<&'static str> {
    let fits = shape.ne[2] == 1 && shape.ne[3] == 1 && shape.ne[0] <= i32::MAX as i64 && shape.ne[1] <= i32::MAX as i64;
    fits.then_some(match g {
        GluOp::Swiglu => "tandem_swiglu4_f32",
        GluOp::Geglu => "tandem_geglu4_f32",
        GluOp::Reglu => "tandem_reglu4_f32",
        GluOp::GegluErf => "tandem_geglu_erf4_f32",
        GluOp::GegluQuick => "tandem_geglu_quick4_f32",
    })
}

/// Queues `dst = f(src)` for `op`, element types `types` = [src, dst] as ggml ids.
///
/// # Safety
/// As for [`launch_combine`], for `src` and `dst` laid out as `shape`.
pub unsafe fn launch_map(
    k: &Kernels,
    s: &Stream,
    op: Map,
    types: [i32; 2],
    src: DevicePtr,
    dst: DevicePtr,
    shape: &UnaryShape,
) -> Result<(), KernelError> {
    if elements(shape.ne).ok_or_else(|| bad_extents("launch_map"))? == 0 {
        return Ok(());
    }
    let (code, p0, p1) = op.code();
    let f = k.function(FAMILY, "tandem_unary_any")?;
    let mut args = KernelArgs::new();
    args.push(src).push(dst).push(*shape);
    args.push(code).push(types[0]).push(types[1]).push(p0).push(p1);
    let cfg = launch_config_by(shape.ne, unary_per_thread(types == [0; 2], shape, src, dst));
    // SAFETY: the parameter list is (const char*, char*, tandem_unary_shape, int, int, int,
    // float, float) and the caller vouches for the memory.
    unsafe { s.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// Queues the weighted sum of MoE expert outputs, `dst[:, t] = sum over k, in order, of
/// x[:, k, t] * w[k, t]` (f32), each product and sum rounded on its own.
///
/// # Safety
/// x, w and dst hold f32 tensors laid out as `shape` says (x and dst contiguous in dim 0) until
/// the stream has run the kernel.
pub unsafe fn launch_moe_sum(
    k: &Kernels,
    s: &Stream,
    x: DevicePtr,
    w: DevicePtr,
    dst: DevicePtr,
    shape: &MoeSumShape,
) -> Result<(), KernelError> {
    if shape.e <= 0 || shape.k <= 0 || shape.t <= 0 {
        return Err(bad_extents("launch_moe_sum"));
    }
    let f = k.function(FAMILY, "tandem_moe_sum_f32")?;
    let mut args = KernelArgs::new();
    args.push(x).push(w).push(dst).push(*shape);
    let vec = shape.nbw0 == 0
        && rows4(
            shape.e,
            &[(x, &[4, shape.nbx1, shape.nbx2, 0]), (dst, &[4, shape.nbd1, 0, 0])],
        );
    let cfg = launch_config_by([shape.e, shape.t, 1, 1], if vec { 4 } else { 1 });
    // SAFETY: the parameter list is (const char*, const char*, char*, tandem_moe_sum_shape) and
    // the caller vouches for the memory.
    unsafe { s.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

/// Queues `dst = src0 + src1[:, ids]` (f32; ids i32). An id outside `0..shape.rows_b` makes its
/// row NaN and reads nothing of src1.
///
/// # Safety
/// As for [`launch_combine`]: src0 and dst laid out as `shape`, src1 holding `rows_b` rows of
/// `ne[0]` f32 at the given strides, ids holding `ne[1] x ne[2]` i32 at theirs.
pub unsafe fn launch_add_id(
    k: &Kernels,
    s: &Stream,
    src0: DevicePtr,
    src1: DevicePtr,
    ids: DevicePtr,
    dst: DevicePtr,
    shape: &AddIdShape,
) -> Result<(), KernelError> {
    if elements(shape.ne).ok_or_else(|| bad_extents("launch_add_id"))? == 0 {
        return Ok(());
    }
    let f = k.function(FAMILY, "tandem_add_id_f32")?;
    let mut args = KernelArgs::new();
    args.push(src0).push(src1).push(ids).push(dst).push(*shape);
    // SAFETY: the parameter list is (const char*, const char*, const char*, char*,
    // tandem_add_id_shape) and the caller vouches for the memory.
    unsafe { s.launch(&f, launch_config(shape.ne), &mut args) }.map_err(KernelError::Gpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_dimensional_gates_take_their_short_entries() {
        let fam = tandem_kernels_hip::find(FAMILY).unwrap();
        for g in GluOp::ALL {
            let shape = BinaryShape::contiguous([14336, 512, 1, 1], [14336, 512, 1, 1]);
            let e = gate4_entry(g, &shape).unwrap();
            assert!(fam.entries.contains(&e), "{e}");
            // Three dimensions stay with tandem_binary_any.
            assert_eq!(
                gate4_entry(g, &BinaryShape::contiguous([64, 4, 2, 1], [64, 4, 2, 1])),
                None
            );
        }
        // A 14336-wide decode row: 14 blocks of 256 threads, four values each.
        let c = launch_config_by([14336, 1, 1, 1], 4);
        assert_eq!(c.grid, [14, 1, 1]);
    }

    #[test]
    fn shapes_check_the_repeat_rule_and_grids_cover_the_tensor() {
        assert!(BinaryShape::contiguous([8, 4, 2, 1], [8, 1, 2, 1]).check().is_ok());
        assert!(BinaryShape::contiguous([8, 4, 2, 1], [3, 1, 1, 1]).check().is_err());
        assert!(BinaryShape::contiguous([8, 4, 2, 1], [8, 0, 1, 1]).check().is_err());
        assert!(BinaryShape::contiguous([-1, 4, 2, 1], [1, 1, 1, 1]).check().is_err());
        let c = launch_config([4096, 32, 1, 1]);
        assert_eq!((c.grid, c.block), ([16, 32, 1], [256, 1, 1]));
        let big = launch_config([100_000_000, 1, 1, 1]);
        assert_eq!(big.grid[0], 65_535);
        let rows = launch_config([1, 1 << 20, 1, 1]);
        assert_eq!(rows.grid, [1, 65_535, 1]);
        assert_eq!(contiguous_f32([3, 5, 7, 2]), [4, 12, 60, 420]);
    }

    #[test]
    fn op_codes_match_the_kernel_defines() {
        let src = tandem_kernels_hip::find(FAMILY).unwrap().source;
        let binary = [
            (Combine::Binary(BinaryOp::Add), "TANDEM_BIN_ADD"),
            (Combine::Binary(BinaryOp::Sub), "TANDEM_BIN_SUB"),
            (Combine::Binary(BinaryOp::Mul), "TANDEM_BIN_MUL"),
            (Combine::Binary(BinaryOp::Div), "TANDEM_BIN_DIV"),
            (Combine::Gate(GluOp::Reglu), "TANDEM_BIN_REGLU"),
            (Combine::Gate(GluOp::Geglu), "TANDEM_BIN_GEGLU"),
            (Combine::Gate(GluOp::Swiglu), "TANDEM_BIN_SWIGLU"),
            (Combine::Gate(GluOp::GegluErf), "TANDEM_BIN_GEGLU_ERF"),
            (Combine::Gate(GluOp::GegluQuick), "TANDEM_BIN_GEGLU_QUICK"),
        ];
        for (op, name) in binary {
            let line = format!("#define {name} {}\n", op.code());
            assert!(src.contains(&line), "{line}");
        }
        for op in UnaryOp::ALL {
            let name = format!("TANDEM_UN_{} ", op.name());
            let line = format!("#define {name}{}\n", Map::Unary(op).code().0);
            assert!(src.contains(&line), "{line}");
        }
        let scale = Map::Scale { scale: 2.0, bias: 0.5 }.code();
        assert_eq!(scale, (64, 2.0, 0.5));
        assert!(src.contains("#define TANDEM_UN_SCALE 64\n") && src.contains("#define TANDEM_UN_CLAMP 65\n"));
        assert_eq!(Map::Clamp { min: -1.0, max: 1.0 }.code(), (65, -1.0, 1.0));
        for (ty, id) in [(ElemType::F32, 0), (ElemType::F16, 1), (ElemType::BF16, 30)] {
            assert_eq!(float_type_id(ty), Some(id));
        }
        assert!(src.contains("#define TANDEM_EW_BF16 30\n"));
        assert_eq!(float_type_id(ElemType::Q8_0), None);
        assert_eq!(float_type_id(ElemType::I32), None);
    }
}
