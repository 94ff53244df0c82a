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

pub(crate) const PARTS: &[&[Registration]] = &[
    binary::REGISTRATIONS,
    rows::REGISTRATIONS,
    softmax::REGISTRATIONS,
    argsort::REGISTRATIONS,
    rope::REGISTRATIONS,
    convert::REGISTRATIONS,
    copy::REGISTRATIONS,
    setrows::REGISTRATIONS,
    matmul::REGISTRATIONS,
    flash_attn::REGISTRATIONS,
];
