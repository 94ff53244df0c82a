//! Test support for the row ops: host memory for a built graph (one allocation per storage
//! root, guard bytes on both sides), filling inputs, running a node on the CPU and on the
//! reference, and comparing.

use crate::{CpuContext, OpError, Srcs};
use rand::{Rng, SeedableRng};
use std::sync::OnceLock;
use tandem_graph::{Graph, Tensor, TensorId};

const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xA5;

/// A graph whose tensors all point into owned host memory.
pub struct Mem {
    pub g: Graph,
    /// Per storage root: the allocation (u64 for 8-byte alignment) and the usable byte count.
    bufs: Vec<Option<(Vec<u64>, usize)>>,
}

impl Mem {
    pub fn new(g: Graph) -> Mem {
        let mut bufs: Vec<Option<(Vec<u64>, usize)>> = vec![None; g.tensors.len()];
        for (i, t) in g.tensors.iter().enumerate() {
            if t.view_src.is_none() {
                let n = t.nbytes();
                let mut v = vec![0u64; (n + 2 * GUARD).div_ceil(8)];
                // SAFETY: the Vec holds at least n + 2*GUARD bytes.
                let bytes = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, n + 2 * GUARD) };
                bytes.fill(GUARD_BYTE);
                bufs[i] = Some((v, n));
            }
        }
        let mut m = Mem { g, bufs };
        m.point();
        m
    }

    /// Sets every tensor's `data` from its root's allocation.
    fn point(&mut self) {
        for i in 0..self.g.tensors.len() {
            let (root, offs) = self.g.storage_root(TensorId(i as u32));
            let base = self.bufs[root.index()]
                .as_ref()
                .map(|(v, _)| v.as_ptr() as usize)
                .unwrap();
            self.g.tensors[i].data = base + GUARD + offs;
        }
    }

    /// A deep copy with its own memory.
    pub fn duplicate(&self) -> Mem {
        let mut m = Mem {
            g: self.g.clone(),
            bufs: self.bufs.clone(),
        };
        m.point();
        m
    }

    pub fn t(&self, id: TensorId) -> &Tensor {
        self.g.tensor(id)
    }

    pub fn srcs(&self, id: TensorId) -> Srcs<'_> {
        self.g.srcs(id)
    }

    /// Writes `f(index)` into every element of a plain-typed tensor.
    pub fn fill(&mut self, id: TensorId, mut f: impl FnMut([i64; 4]) -> f64) {
        let t = self.g.tensor(id).clone();
        for i in crate::data::indices(t.ne) {
            // SAFETY: `t.data` points into its root's allocation, which covers every element.
            unsafe { crate::data::write_f64(&t, i, f(i)) };
        }
    }

    /// Uniform random values in `[lo, hi)`.
    pub fn fill_uniform(&mut self, id: TensorId, lo: f64, hi: f64, seed: u64) {
        let mut r = rng(seed);
        self.fill(id, |_| r.random_range(lo..hi));
    }

    /// Copies `bytes` to the start of the tensor's storage.
    pub fn set_bytes(&mut self, id: TensorId, bytes: &[u8]) {
        let t = self.g.tensor(id);
        assert!(bytes.len() <= t.nbytes());
        // SAFETY: the tensor owns at least nbytes() bytes at `data`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), t.data as *mut u8, bytes.len()) };
    }

    /// The `nbytes()` bytes of a tensor.
    pub fn bytes(&self, id: TensorId) -> Vec<u8> {
        let t = self.g.tensor(id);
        // SAFETY: the tensor owns nbytes() bytes at `data`.
        unsafe { std::slice::from_raw_parts(t.data as *const u8, t.nbytes()).to_vec() }
    }

    /// Every element of a plain-typed tensor, i0 fastest.
    pub fn read(&self, id: TensorId) -> Vec<f64> {
        let t = self.g.tensor(id);
        // SAFETY: as in `fill`.
        crate::data::indices(t.ne)
            .map(|i| unsafe { crate::data::read_f64(t, i) })
            .collect()
    }

    /// Panics if any guard byte around an allocation changed.
    pub fn check_guards(&self) {
        for (i, b) in self.bufs.iter().enumerate() {
            if let Some((v, n)) = b {
                // SAFETY: the Vec holds n + 2*GUARD bytes.
                let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, n + 2 * GUARD) };
                let bad = bytes[..GUARD]
                    .iter()
                    .chain(&bytes[GUARD + n..])
                    .any(|&x| x != GUARD_BYTE);
                assert!(!bad, "guard bytes of tensor {i} were overwritten");
            }
        }
    }

    pub fn run_cpu(&self, id: TensorId) -> Result<(), OpError> {
        // SAFETY: every tensor points into memory owned by `self`, nothing else runs on it.
        unsafe { crate::cpu::compute(ctx(), self.t(id), &self.srcs(id)) }
    }

    pub fn run_ref(&self, id: TensorId) -> Result<(), OpError> {
        // SAFETY: as above.
        unsafe { crate::reference::compute(self.t(id), &self.srcs(id)) }
    }
}

/// Runs node `id` on the CPU in `m` and on the reference in a copy of it (taken before either
/// runs); returns both results read as f64, after checking guards and NaN/Inf.
pub fn cpu_vs_ref(m: &Mem, id: TensorId) -> (Vec<f64>, Vec<f64>) {
    let r = m.duplicate();
    m.run_cpu(id).unwrap();
    r.run_ref(id).unwrap();
    m.check_guards();
    r.check_guards();
    let (a, b) = (m.read(id), r.read(id));
    assert!(a.iter().all(|v| v.is_finite()), "cpu result has NaN/Inf");
    assert!(b.iter().all(|v| v.is_finite()), "reference result has NaN/Inf");
    (a, b)
}

/// Σ(a−b)² / Σb², with `b` the reference.
pub fn nmse(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// A pool of three workers, so every test splits work unevenly.
pub fn ctx() -> &'static CpuContext {
    static C: OnceLock<CpuContext> = OnceLock::new();
    C.get_or_init(|| CpuContext::new(3))
}

pub fn rng(seed: u64) -> rand_pcg::Pcg64 {
    rand_pcg::Pcg64::seed_from_u64(seed)
}

/// Asserts that both the CPU and the reference reject node `id` with a message containing `what`.
pub fn both_reject(m: &Mem, id: TensorId, what: &str) {
    let srcs = m.srcs(id);
    let t = m.t(id);
    let e1 = crate::cpu::check(t, &srcs).err().map(|e| e.to_string());
    let e2 = crate::reference::check(t, &srcs).err().map(|e| e.to_string());
    for e in [e1, e2] {
        let e = e.unwrap_or_else(|| panic!("expected an error about '{what}'"));
        assert!(e.contains(what), "error '{e}' does not mention '{what}'");
    }
}

/// Asserts that running node `id` fails on both sides with `what` in the message and leaves
/// the output bytes as they were.
pub fn both_fail_untouched(m: &Mem, id: TensorId, what: &str) {
    let before = m.bytes(id);
    let r = m.duplicate();
    let e1 = m.run_cpu(id).unwrap_err().to_string();
    let e2 = r.run_ref(id).unwrap_err().to_string();
    for e in [e1, e2] {
        assert!(e.contains(what), "error '{e}' does not mention '{what}'");
    }
    assert_eq!(m.bytes(id), before, "cpu wrote before failing");
    assert_eq!(r.bytes(id), before, "reference wrote before failing");
}
