//! Registrations by kernel family; each module lists its `REGISTRATIONS` and holds their
//! predicates and launchers.

use super::registry::Registration;

pub mod binary;
pub mod convert;
pub mod matmul;
pub mod rope;
pub mod rows;

pub(crate) const PARTS: &[&[Registration]] = &[
    binary::REGISTRATIONS,
    rows::REGISTRATIONS,
    rope::REGISTRATIONS,
    convert::REGISTRATIONS,
    matmul::REGISTRATIONS,
];
