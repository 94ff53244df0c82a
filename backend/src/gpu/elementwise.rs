//! Launchers of the elementwise family (`kernels-hip/src/elementwise.hip`): the shape structs the
//! kernels take by value, their launch geometry, and checks that keep every access in bounds.

use super::api::{DevicePtr, LaunchConfig};
use super::kernels::{KernelError, Kernels};
use super::safe::{KernelArgs, Stream};

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

/// Grid for extents `ne`: x covers dim 0 in blocks of 256, y the rows (dims 1..3).
pub fn launch_config(ne: [i64; 4]) -> LaunchConfig {
    let rows = ne[1].max(1) * ne[2].max(1) * ne[3].max(1);
    let gx = ((ne[0].max(1) + BLOCK as i64 - 1) / BLOCK as i64).min(MAX_GRID);
    LaunchConfig {
        grid: [gx as u32, rows.min(MAX_GRID) as u32, 1],
        block: [BLOCK, 1, 1],
        shared_bytes: 0,
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
    // SAFETY: the parameter list is (const char*, const char*, char*, tandem_binary_shape) and
    // the caller vouches for the memory.
    unsafe { s.launch(&f, launch_config(shape.ne), &mut args) }.map_err(KernelError::Gpu)
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
    // SAFETY: the parameter list is (const char*, char*, tandem_unary_shape, float, float).
    unsafe { s.launch(&f, launch_config(shape.ne), &mut args) }.map_err(KernelError::Gpu)
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
    // SAFETY: the parameter list is (const char*, char*, tandem_unary_shape).
    unsafe { s.launch(&f, launch_config(shape.ne), &mut args) }.map_err(KernelError::Gpu)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
