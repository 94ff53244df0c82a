//! Test support for the elementwise ops: host memory for a built graph (guard bytes around every
//! buffer, views pointing into their owner), random inputs, and a CPU-vs-reference comparison.

use crate::data::{indices, read_f64, write_f64};
use crate::{CpuContext, OpError};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use std::sync::OnceLock;
use tandem_graph::{Graph, Tensor, TensorId};

const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xA5;

/// A pool with more workers than this machine may have cores, so splitting is exercised.
pub(crate) fn ctx() -> &'static CpuContext {
    static CTX: OnceLock<CpuContext> = OnceLock::new();
    CTX.get_or_init(|| CpuContext::new(4))
}

/// How to fill a leaf.
#[derive(Clone, Debug)]
pub(crate) enum Fill {
    /// Uniform in `[lo, hi)`.
    Uniform(f64, f64),
    /// Uniform magnitude in `[0.5, 3)`, random sign (safe divisors).
    AwayFromZero,
    /// These values in flat order (ints or floats).
    Values(Vec<f64>),
    /// These raw bytes from the start of the tensor.
    Bytes(Vec<u8>),
}

/// Host memory for every tensor of a graph: one buffer per owner, views resolved.
pub(crate) struct Mem {
    bufs: Vec<(TensorId, Vec<u8>)>,
}

impl Mem {
    /// Gives every tensor of `g` an address: owners get fresh zeroed buffers between guards.
    pub(crate) fn alloc(g: &mut Graph) -> Mem {
        let mut bufs = Vec::new();
        for k in 0..g.tensors.len() {
            if g.tensors[k].view_src.is_none() {
                let n = g.tensors[k].nbytes();
                let mut b = vec![GUARD_BYTE; n + 2 * GUARD];
                b[GUARD..GUARD + n].fill(0);
                g.tensors[k].data = b.as_ptr() as usize + GUARD;
                bufs.push((TensorId(k as u32), b));
            }
        }
        for k in 0..g.tensors.len() {
            if let Some(root) = g.tensors[k].view_src {
                g.tensors[k].data = g.tensors[root.index()].data + g.tensors[k].view_offs;
            }
        }
        Mem { bufs }
    }

    /// A copy of `g` with memory holding the same bytes as `self`.
    pub(crate) fn duplicate(&self, g: &Graph) -> (Graph, Mem) {
        let mut g2 = g.clone();
        let mut m2 = Mem::alloc(&mut g2);
        for ((_, to), (_, from)) in m2.bufs.iter_mut().zip(&self.bufs) {
            to.copy_from_slice(from);
        }
        (g2, m2)
    }

    pub(crate) fn guards_intact(&self) -> bool {
        self.bufs.iter().all(|(_, b)| {
            let n = b.len();
            b[..GUARD].iter().chain(&b[n - GUARD..]).all(|&x| x == GUARD_BYTE)
        })
    }

    /// The bytes of owner `id` (without guards).
    pub(crate) fn bytes(&self, id: TensorId) -> &[u8] {
        let b = &self.bufs.iter().find(|(t, _)| *t == id).expect("an owning tensor").1;
        &b[GUARD..b.len() - GUARD]
    }
}

/// Writes `fill` into tensor `t` (which must have memory).
pub(crate) fn fill(t: &Tensor, fill: &Fill, rng: &mut Pcg64) {
    if let Fill::Bytes(bytes) = fill {
        assert!(bytes.len() <= t.nbytes());
        // SAFETY: the tensor owns at least nbytes() bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), t.data as *mut u8, bytes.len()) };
        return;
    }
    for (k, i) in indices(t.ne).enumerate() {
        let v = match fill {
            Fill::Uniform(lo, hi) => rng.random_range(*lo..*hi),
            Fill::AwayFromZero => {
                let m = rng.random_range(0.5..3.0);
                if rng.random_bool(0.5) {
                    m
                } else {
                    -m
                }
            }
            Fill::Values(v) => v[k % v.len()],
            Fill::Bytes(_) => unreachable!(),
        };
        // SAFETY: i is within t's shape and t has memory.
        unsafe { write_f64(t, i, v) };
    }
}

/// Computes every node of `g` in order with the CPU fallback (`cpu`) or the reference.
pub(crate) fn run_graph(g: &Graph, cpu: bool) -> Result<(), OpError> {
    for &id in &g.nodes {
        let t = g.tensor(id);
        let srcs = g.srcs(id);
        // SAFETY: Mem::alloc gave every tensor nbytes() of memory; single caller.
        unsafe {
            if cpu {
                super::compute(ctx(), t, &srcs)?;
            } else {
                crate::reference::compute(t, &srcs)?;
            }
        }
    }
    Ok(())
}

/// Values of a non-quantized tensor in flat order.
pub(crate) fn values(t: &Tensor) -> Vec<f64> {
    // SAFETY: indices are within the shape and the tensor has memory.
    indices(t.ne).map(|i| unsafe { read_f64(t, i) }).collect()
}

/// Σ(a−b)² / Σa²; equal infinities count as equal, any NaN makes it infinite.
pub(crate) fn nmse(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        if x.is_nan() || y.is_nan() {
            return f64::INFINITY;
        }
        if x.is_infinite() || y.is_infinite() {
            if x != y {
                return f64::INFINITY;
            }
            continue;
        }
        num += (x - y) * (x - y);
        den += x * x;
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Fills the leaves (`Uniform(-3, 3)` unless `fills` says otherwise), runs the graph with the
/// CPU fallback and with the reference on identical copies, and returns both results of `out`
/// in flat order, after checking that no guard byte changed.
pub(crate) fn run_both(mut g: Graph, out: TensorId, fills: &[(TensorId, Fill)], seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mem = Mem::alloc(&mut g);
    let mut rng = Pcg64::seed_from_u64(seed);
    for id in g.leaves() {
        let t = g.tensor(id);
        if t.view_src.is_some() {
            continue;
        }
        match fills.iter().find(|(f, _)| *f == id) {
            Some((_, f)) => fill(t, f, &mut rng),
            None if t.ty.is_float() => fill(t, &Fill::Uniform(-3.0, 3.0), &mut rng),
            None => {}
        }
    }
    let (g_ref, mem_ref) = mem.duplicate(&g);
    run_graph(&g, true).expect("cpu run");
    run_graph(&g_ref, false).expect("reference run");
    assert!(mem.guards_intact() && mem_ref.guards_intact(), "a guard byte changed");
    (values(g.tensor(out)), values(g_ref.tensor(out)))
}

/// [`run_both`] and an NMSE bound.
#[track_caller]
pub(crate) fn assert_close(g: Graph, out: TensorId, fills: &[(TensorId, Fill)], tol: f64) {
    let what = g.tensor(out).describe();
    let (cpu, reference) = run_both(g, out, fills, 7);
    assert!(!cpu.is_empty(), "{what}: empty result");
    let e = nmse(&reference, &cpu);
    assert!(e <= tol, "{what}: nmse {e:e} > {tol:e}");
}

/// The NMSE bound for elementwise ops.
pub(crate) const TOL: f64 = 1e-7;
