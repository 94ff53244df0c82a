//! Helpers shared by the GPU integration tests: the usable GPU devices, a deterministic
//! generator, the bytes of a graph's host-allocated tensors, and the error measure the op
//! harness uses.
#![allow(dead_code)]

use std::sync::Arc;

use tandem_backend::{devices, Device};
use tandem_graph::{Graph, TensorId};

/// The usable GPU devices; where there is none, prints `SKIP <test>: no usable GPU device` and
/// gives `None`.
pub fn gpus_or_skip(test: &str) -> Option<Vec<Arc<Device>>> {
    let gpus: Vec<_> = devices()
        .into_iter()
        .filter(|d| matches!(**d, Device::Gpu(_)))
        .collect();
    if gpus.is_empty() {
        eprintln!("SKIP {test}: no usable GPU device");
        return None;
    }
    Some(gpus)
}

/// A small deterministic generator (xorshift32).
pub struct Rng(pub u32);
impl Rng {
    pub fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }
}

/// The bytes of tensor `id`.
pub fn bytes(g: &Graph, id: TensorId) -> Vec<u8> {
    let t = g.tensor(id);
    // SAFETY: `allocate_graph` gave the tensor `nbytes()` bytes in a buffer the test keeps alive
    // for as long as it uses the graph.
    unsafe { std::slice::from_raw_parts(t.data as *const u8, t.nbytes()).to_vec() }
}

/// Lets `f` change the bytes of tensor `id`.
pub fn set_bytes(g: &Graph, id: TensorId, f: impl FnOnce(&mut [u8])) {
    let t = g.tensor(id);
    // SAFETY: as in `bytes`; the test is the buffer's only user.
    f(unsafe { std::slice::from_raw_parts_mut(t.data as *mut u8, t.nbytes()) })
}

pub fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Normalized mean squared error of `got` against `want`.
pub fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in got.iter().zip(want) {
        num += (f64::from(*a) - f64::from(*b)).powi(2);
        den += f64::from(*b).powi(2);
    }
    num / den.max(f64::MIN_POSITIVE)
}
