//! One module per kernel family group; each lists its `KernelSource`s.

use crate::{KernelSource, KernelUnit};

mod convert;
mod elementwise;
mod matmul;
mod rope;
mod rows;

pub(crate) const PARTS: &[&[KernelSource]] = &[
    elementwise::FAMILIES,
    rope::FAMILIES,
    rows::FAMILIES,
    convert::FAMILIES,
    matmul::FAMILIES,
];

pub(crate) const GEMV_UNITS: &[KernelUnit] = matmul::GEMV_UNITS;
pub(crate) const FLASH_ATTN_UNITS: &[KernelUnit] = rows::FLASH_ATTN_UNITS;
pub(crate) const MMA_UNITS: &[KernelUnit] = matmul::MMA_UNITS;
pub(crate) const ELEMENTWISE_UNITS: &[KernelUnit] = elementwise::ELEMENTWISE_UNITS;
pub(crate) const SETROWS_UNITS: &[KernelUnit] = convert::SETROWS_UNITS;
pub(crate) const COPY_UNITS: &[KernelUnit] = convert::COPY_UNITS;
