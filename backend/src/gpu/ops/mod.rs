//! Registrations by kernel family; each module lists its `REGISTRATIONS` and holds their
//! predicates and launchers.

use super::registry::Registration;

pub mod argsort;
pub mod binary;
pub mod convert;
pub mod copy;
pub mod flash_attn;
pub mod matmul;
pub mod matmul_launch;
pub mod rope;
pub mod rows;
pub mod setrows;
pub mod softmax;

/// In the registry's order: the first enabled registration that accepts a node takes it, so a
/// registration fusing a chain from an op comes before that op's plain ones (rows' residual
/// ADD + norm before binary's ADD). `matmul::GLU_GEMV` is not among them yet (see there).
pub(crate) const PARTS: &[&[Registration]] = &[
    &[matmul::GEMV_PAIR],
    rows::REGISTRATIONS,
    binary::REGISTRATIONS,
    softmax::REGISTRATIONS,
    argsort::REGISTRATIONS,
    rope::REGISTRATIONS,
    convert::REGISTRATIONS,
    copy::REGISTRATIONS,
    setrows::REGISTRATIONS,
    matmul::REGISTRATIONS,
    flash_attn::REGISTRATIONS,
];
