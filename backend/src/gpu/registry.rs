//! The dispatch registry: named registrations, each an op, a predicate over the node (types,
//! shapes, strides, params) and a launcher. The planner gives a node to the first enabled
//! registration whose predicate accepts it; everything else runs on the CPU fallback.
//!
//! A registration may fuse the node that follows (e.g. RMS_NORM then MUL): the planner offers the
//! next node only when it is the sole consumer of this node's result and that result is not a
//! graph output, so the fused kernel may skip writing it. Or it may fuse a chain the planner
//! recognizes (`exec::fused_chain`): then `next` is the chain's last node, and the launcher finds
//! the nodes between through it. Fused kernels read sources that a later node of the chain may
//! overwrite through [`read_apart`].

use super::api::{DeviceInfo, DevicePtr, GpuError};
use super::kernels::{KernelError, Kernels};
use super::safe::{Context, DeviceBuffer, Stream};
use crate::config::Config;
use std::sync::{Arc, Mutex};
use tandem_graph::{Graph, Op, Tensor, TensorId};
use tandem_ops::Srcs;

/// One node as predicates and launchers see it. Inside a launcher every `data` is a device
/// address (device memory or mapped pinned host memory); predicates must not look at `data`.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    pub dst: &'a Tensor,
    pub srcs: Srcs<'a>,
}

impl<'a> Node<'a> {
    /// Node `id` of `g` with its sources.
    pub fn of(g: &'a Graph, id: TensorId) -> Node<'a> {
        Node {
            dst: g.tensor(id),
            srcs: g.srcs(id),
        }
    }

    pub fn src(&self, i: usize) -> Option<&'a Tensor> {
        self.srcs.get(i).copied().flatten()
    }
}

/// The names of the registrations in `regs` for node `id`'s op that accept it unfused (tests of
/// the predicates).
#[cfg(test)]
pub(crate) fn accepting(regs: &[Registration], g: &Graph, id: TensorId) -> Vec<&'static str> {
    let n = Node::of(g, id);
    regs.iter()
        .filter(|r| r.op == n.dst.op && (r.accepts)(&n, None))
        .map(|r| r.name)
        .collect()
}

/// The device address of a tensor's first byte (launchers only).
pub fn dptr(t: &Tensor) -> DevicePtr {
    DevicePtr(t.data as u64)
}

/// What a launcher may use: the device's kernels, the stream to queue on, what the device is,
/// and scratch memory.
#[derive(Clone, Copy)]
pub struct LaunchCtx<'a> {
    pub kernels: &'a Kernels,
    pub stream: &'a Stream,
    pub info: &'a DeviceInfo,
    pub scratch: &'a Scratch,
    /// No node of the graph writes the node's first source (`GpuPlan::settled`): a launcher may
    /// queue a kernel that reads it before its tandem_grid_wait as a dependent launch.
    pub settled: bool,
    /// A MUL_MAT_ID's expert ids (src 2) are in place before the kernel starts, even as a
    /// dependent launch: no node of the graph writes them, or the kernel that last did has
    /// finished by then (`GpuPlan::ids_writer`, `Stream::finished_before_next`). Then the kernel
    /// may read them, and the experts' weights, before its tandem_grid_wait.
    pub ids_ready: bool,
    /// A matmul's activations (src 1) are in place before the kernel starts, even as a dependent
    /// launch, in the same sense (`GpuPlan::act_writer`): then a kernel may read them, though
    /// still write nothing, before its tandem_grid_wait.
    pub act_ready: bool,
}

/// Predicate: whether the registration runs `node` (with `next` fused, for fusing
/// registrations; `next` is always `None` for the others). Declines with early returns.
pub type Accepts = fn(node: &Node<'_>, next: Option<&Node<'_>>) -> bool;

/// Launcher: queues the kernel(s) for `node` (and `next` when fused) on `ctx.stream`.
///
/// # Safety
/// The predicate accepted the node; every tensor's `data` is a device address covering the
/// tensor's bytes, valid until the stream has run the work.
pub type Launch = unsafe fn(ctx: &LaunchCtx<'_>, node: &Node<'_>, next: Option<&Node<'_>>) -> Result<(), KernelError>;

pub struct Registration {
    /// `hip.<op>[_<variant>]`, e.g. `hip.rms_norm_mul_f32`.
    pub name: &'static str,
    pub op: Op,
    /// The op of the following node this registration absorbs, if it fuses.
    pub fuses: Option<Op>,
    pub accepts: Accepts,
    pub launch: Launch,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name)
    }
}

/// Every registration tandem has, in priority order (fusing ones before plain ones of an op).
pub fn all() -> Vec<&'static Registration> {
    let mut v: Vec<&'static Registration> = super::ops::PARTS.iter().flat_map(|p| p.iter()).collect();
    // Stable: within one op, fusing registrations are tried first.
    v.sort_by_key(|r| r.fuses.is_none());
    v
}

/// Names that `TANDEM_DISABLE_DISPATCH` acts on without being registrations: the launchers ask
/// `Config::is_disabled` about them to choose among a registration's kernel forms.
pub const SWITCHES: [&str; 9] = {
    use super::ops::matmul_launch as m;
    [
        m::MMA_SWITCH,
        m::WGMMA_SWITCH,
        m::MMV_SWITCH,
        m::WMMA_SWITCH,
        m::SEG_SWITCH,
        m::SEG_UNITS_SWITCH,
        m::SEG_NARROW_SWITCH,
        m::MMID_UNITS_SWITCH,
        super::ops::flash_attn::MMA_SWITCH,
    ]
};

/// Every name a `TANDEM_DISABLE_DISPATCH` entry can match by prefix: the registrations and
/// [`SWITCHES`].
pub fn disable_names() -> Vec<&'static str> {
    all().iter().map(|r| r.name).chain(SWITCHES).collect()
}

/// The registrations of one device with `TANDEM_DISABLE_DISPATCH` applied.
pub struct Registry {
    regs: Vec<&'static Registration>,
    enabled: Vec<bool>,
    logged: Vec<std::sync::atomic::AtomicBool>,
}

impl Registry {
    pub fn new(cfg: &Config) -> Registry {
        Registry::with(all(), cfg)
    }

    pub fn with(regs: Vec<&'static Registration>, cfg: &Config) -> Registry {
        let enabled = regs.iter().map(|r| !cfg.is_disabled(r.name)).collect();
        let logged = regs.iter().map(|_| Default::default()).collect();
        Registry { regs, enabled, logged }
    }

    pub fn get(&self, index: usize) -> &'static Registration {
        self.regs[index]
    }

    pub fn len(&self) -> usize {
        self.regs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regs.is_empty()
    }

    /// (registration, enabled) pairs, for `tandem support` and docs.
    pub fn iter(&self) -> impl Iterator<Item = (&'static Registration, bool)> + '_ {
        self.regs.iter().copied().zip(self.enabled.iter().copied())
    }

    /// The first enabled registration accepting `node` (fused with `next` when offered and a
    /// fusing registration takes it): its index and whether it fused.
    pub fn choose(&self, node: &Node<'_>, next: Option<&Node<'_>>) -> Option<(usize, bool)> {
        let op = node.dst.op;
        for (i, r) in self.regs.iter().enumerate() {
            if r.op != op || !self.enabled[i] {
                continue;
            }
            match (r.fuses, next) {
                (Some(f), Some(n)) if n.dst.op == f => {
                    if (r.accepts)(node, Some(n)) {
                        return Some((i, true));
                    }
                }
                (Some(_), _) => {}
                (None, _) => {
                    if (r.accepts)(node, None) {
                        return Some((i, false));
                    }
                }
            }
        }
        None
    }

    /// Prints the registration's name the first time it is chosen (`TANDEM_LOG_DISPATCH=1`).
    pub fn log_first_use(&self, index: usize) {
        use std::sync::atomic::Ordering;
        if !self.logged[index].swap(true, Ordering::Relaxed) {
            eprintln!("tandem: dispatch {}", self.regs[index].name);
        }
    }
}

/// Device scratch memory for launchers (e.g. a quantized copy of an activation). One region at a
/// time: a launcher's region is valid for the work it queues, because the stream runs the next
/// launcher's work after it. Growing keeps the old buffer until [`Scratch::release_retired`].
pub struct Scratch {
    ctx: Arc<Context>,
    inner: Mutex<ScratchInner>,
}

#[derive(Default)]
struct ScratchInner {
    current: Option<DeviceBuffer>,
    retired: Vec<DeviceBuffer>,
    /// How many buffers have been current so far ([`Scratch::generation`]).
    generation: u64,
}

impl Scratch {
    pub fn new(ctx: Arc<Context>) -> Scratch {
        Scratch {
            ctx,
            inner: Mutex::new(ScratchInner::default()),
        }
    }

    /// At least `bytes` bytes of device memory, 256-byte aligned.
    pub fn get(&self, bytes: usize) -> Result<DevicePtr, KernelError> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = &g.current {
            if b.len() >= bytes {
                return Ok(b.ptr());
            }
        }
        let size = bytes.next_power_of_two().max(1 << 20);
        let buf = self.ctx.alloc(size).map_err(KernelError::Gpu)?;
        let ptr = buf.ptr();
        if let Some(old) = g.current.replace(buf) {
            g.retired.push(old);
        }
        g.generation += 1;
        Ok(ptr)
    }

    /// Changes whenever [`Self::get`] hands out a new buffer: work captured while one generation
    /// was current may be replayed only while it still is (the buffers before it are freed).
    pub fn generation(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).generation
    }

    /// Frees buffers replaced by growth; call when the stream is idle.
    pub fn release_retired(&self) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).retired.clear();
    }
}

/// Whether a kernel that writes `w` while it still reads `r` may change bytes of `r` before it
/// reads them: their byte spans meet and they are not the same elements (one address, extents
/// and strides: a row-local kernel reads such a row before it writes it). A fused chain needs
/// this check where ggml's allocator, which expects the chain's nodes one after another, freed a
/// source after the chain's first node and placed a later node's result over its bytes.
pub fn clobbers(w: &Tensor, r: &Tensor) -> bool {
    if w.data == 0 || r.data == 0 {
        return false;
    }
    let (ws, we) = (w.data, w.data + w.nbytes());
    let (rs, re) = (r.data, r.data + r.nbytes());
    let same = w.data == r.data && w.ne == r.ne && w.nb == r.nb && w.ty.type_size() == r.ty.type_size();
    ws < re && rs < we && !same
}

/// Where a fused kernel reads each of `reads` from: the tensor's own bytes, or, where writing one
/// of `writes` could clobber them first ([`clobbers`]), a copy of its byte span in scratch memory
/// queued ahead of the kernel (same strides from the returned address). The launcher must not
/// take scratch memory for anything else.
///
/// # Safety
/// As [`Launch`]: every tensor's `data` is a device address covering its bytes.
pub unsafe fn read_apart<const N: usize>(
    ctx: &LaunchCtx<'_>,
    reads: [&Tensor; N],
    writes: &[&Tensor],
) -> Result<[DevicePtr; N], KernelError> {
    let mut out = reads.map(dptr);
    let hit = reads.map(|r| writes.iter().any(|w| clobbers(w, r)));
    if !hit.contains(&true) {
        return Ok(out);
    }
    let at = |n: usize| n.div_ceil(256) * 256;
    let total: usize = (0..N).filter(|&i| hit[i]).map(|i| at(reads[i].nbytes())).sum();
    let base = ctx.scratch.get(total)?;
    let mut off = 0;
    for i in (0..N).filter(|&i| hit[i]) {
        let (r, to) = (reads[i], base.offset(off));
        // SAFETY: r's span is device memory (caller); the scratch region holds `total` bytes.
        unsafe { ctx.stream.copy_dtod_async(to, dptr(r), r.nbytes()) }.map_err(KernelError::Gpu)?;
        out[i] = to;
        off += at(r.nbytes());
    }
    Ok(out)
}

/// A launcher's error for a node its predicate should have declined.
pub fn launch_error(call: &'static str, message: impl Into<String>) -> KernelError {
    KernelError::Gpu(GpuError::other(call, message))
}

#[cfg(test)]
mod tests {
    use super::clobbers;
    use tandem_graph::{ElemType, Tensor};

    fn at(data: usize, ne: &[i64]) -> Tensor {
        let mut t = Tensor::new(ElemType::F32, ne);
        t.data = data;
        t
    }

    /// Spans that meet clobber unless they are the same elements; apart, or not yet placed, they
    /// do not.
    #[test]
    fn writes_clobber_reads_they_overlap_out_of_step() {
        let r = at(4096, &[64, 4]);
        assert!(!clobbers(&at(4096, &[64, 4]), &r), "the same elements");
        assert!(clobbers(&at(4096 + 256, &[64, 4]), &r), "one row on");
        assert!(clobbers(&at(4096 - 256, &[64, 4]), &r), "one row back");
        assert!(clobbers(&at(4096, &[32, 8]), &r), "same bytes, other rows");
        assert!(!clobbers(&at(4096 + 1024, &[64, 4]), &r), "right after");
        assert!(!clobbers(&at(4096 - 1024, &[64, 4]), &r), "right before");
        assert!(!clobbers(&at(0, &[64, 4]), &r), "not placed");
    }
}
