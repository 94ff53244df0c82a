//! Planning and running a graph on a GPU device: each node goes to the first enabled
//! registration that accepts it (fusing the next node where one offers to), everything else to
//! the CPU fallback. Consecutive fallback nodes form one group; a group copies down only the
//! device memory it touches and copies back only what it writes that is used after it.

use super::memory::{MemKind, MemoryMap};
use super::registry::{LaunchCtx, Node, Registry};
use crate::executor::ExecError;
use crate::stats::GraphStats;
use std::collections::HashMap;
use std::ops::Range;
use tandem_graph::{ElemType, Graph, Op, Tensor, TensorId};
use tandem_ops::{CpuContext, Srcs};

/// Where one node (or run of nodes) goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuStep {
    /// A kernel registration for node `index` of `g.nodes`; `span` > 0 when it also computes
    /// nodes `index + 1 ..= index + span` (a fused pair: the next node; a fused chain: the chain,
    /// views included, the launcher given its first and last node).
    Kernel { index: usize, reg: usize, span: usize },
    /// Nodes `range` of `g.nodes` on the CPU fallback (views inside are no-ops).
    Cpu { range: Range<usize> },
    /// A split node: MUL_MAT or MUL_MAT_ID `index` of `g.nodes`, whose weight is in pinned host
    /// memory, computed by the GPU (registration `reg` takes the whole node) and the CPU
    /// together, a share of the rows each ([`super::split`]).
    Split { index: usize, reg: usize },
    /// A matmul of more than 8 columns (a prompt's) whose weight is in pinned host memory: the
    /// weight is copied into device memory at the copy rate and registration `reg` runs on the
    /// copy, instead of its kernel reading the weight over the bus once per tile.
    Staged { index: usize, reg: usize },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuPlan {
    pub steps: Vec<GpuStep>,
    pub kernels: usize,
    pub fused: usize,
    pub cpu_nodes: usize,
    pub noops: usize,
    pub splits: usize,
    /// Matmuls on pinned weights that split mode left whole (they run as any other node), and
    /// the first one's reason.
    pub split_refused: usize,
    pub split_refusal: Option<&'static str>,
    pub staged: usize,
    /// By node index: no node of the graph writes the bytes of that node's first source (its
    /// weights, for a matmul), so a dependent launch may read them before the kernels ahead end.
    pub settled: Vec<bool>,
    /// By node index: for a MUL_MAT_ID, the index of the last node ahead of it that writes the
    /// storage of its expert ids (`None`: no node of the graph does, so they were in place
    /// before the graph started); `None` for every other node.
    pub ids_writer: Vec<Option<usize>>,
    /// By node index: for a MUL_MAT or MUL_MAT_ID, the index of the last node ahead of it that
    /// writes the storage of its activations (src 1), as `ids_writer` for the ids.
    pub act_writer: Vec<Option<usize>>,
    /// Graph inputs in pinned host memory that kernels read ([`staged_inputs`]): copied into
    /// device memory at the start of every run, the kernels reading the copies.
    pub inputs: Vec<StagedInput>,
    /// Device bytes the copies of `inputs` take, one copy each (an upper bound as long as no
    /// copy spans a gap: at run time inputs lying side by side share a copy, [`stage_copies`]).
    pub input_bytes: usize,
}

/// A graph input copied into device memory before the graph runs: its bytes (the span of its
/// elements from its address) at `offset` of the device's input stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagedInput {
    pub id: TensorId,
    pub bytes: usize,
    pub offset: usize,
}

/// Most bytes of graph inputs staged per run; larger inputs are read where they lie.
pub const MAX_STAGED_INPUT_BYTES: usize = 64 << 20;

/// The graph inputs in pinned host memory that kernel steps read and no node of the graph
/// writes (an attention mask, positions, row ids that ggml computed on the CPU into the
/// device's pinned host buffer), laid out 256-byte aligned in an input stage. A kernel reading
/// such a tensor where it lies fetches every access across the bus (an attention kernel reading
/// its mask a tile at a time ran 40x slower than on a device copy); one copy at the copy rate
/// costs a few microseconds. Weights (a matmul's first source) are left to the split and staged
/// steps, and so are inputs past [`MAX_STAGED_INPUT_BYTES`] in all; a graph with a node writing
/// pinned memory stages nothing.
pub fn staged_inputs(g: &Graph, kinds: &[MemKind], steps: &[GpuStep]) -> (Vec<StagedInput>, usize) {
    let computed: std::collections::HashSet<TensorId> = g.nodes.iter().copied().collect();
    // A graph that writes pinned memory (a cache kept there) might write an input's bytes
    // before a kernel reads them: nothing is staged then. Plans are shared by graphs at other
    // addresses, so this does not compare addresses.
    if g.nodes
        .iter()
        .any(|&n| !g.tensor(n).op.is_view() && matches!(kinds[n.index()], MemKind::Pinned { .. }))
    {
        return (Vec::new(), 0);
    }
    let mut out: Vec<StagedInput> = Vec::new();
    let mut total = 0usize;
    for step in steps {
        let (index, span) = match *step {
            GpuStep::Kernel { index, span, .. } => (index, span),
            GpuStep::Staged { index, .. } => (index, 0),
            _ => continue,
        };
        for i in index..=index + span {
            let t = g.tensor(g.nodes[i]);
            for (k, s) in t.src.iter().enumerate() {
                let Some(s) = *s else { continue };
                if k == 0 && matches!(t.op, Op::MulMat | Op::MulMatId) {
                    continue;
                }
                if !matches!(kinds[s.index()], MemKind::Pinned { .. }) || out.iter().any(|x| x.id == s) {
                    continue;
                }
                // Neither computed here nor a view of something computed here.
                let mut root = s;
                while g.tensor(root).op.is_view() {
                    match g.tensor(root).src[0] {
                        Some(up) => root = up,
                        None => break,
                    }
                }
                if computed.contains(&root) {
                    continue;
                }
                let bytes = g.tensor(s).nbytes();
                if bytes == 0 {
                    continue;
                }
                let offset = total.next_multiple_of(256);
                if offset + bytes > MAX_STAGED_INPUT_BYTES {
                    continue;
                }
                total = offset + bytes;
                out.push(StagedInput { id: s, bytes, offset });
            }
        }
    }
    (out, total)
}

/// One copy of a run's staged inputs: `bytes` from host address `src` to `offset` of the
/// device's input stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageCopy {
    pub src: usize,
    pub bytes: usize,
    pub offset: usize,
}

/// Most bytes between two staged inputs of one allocation that one copy still carries across
/// (at the bus's rate a microsecond or less, against the host's and the device's fixed cost of
/// a copy of its own).
pub const STAGE_MERGE_GAP: usize = 16 << 10;

/// The copies that stage a run's inputs, given as (host address, bytes, start of the pinned
/// allocation holding them): inputs that lie within [`STAGE_MERGE_GAP`] of each other in one
/// allocation go down in one copy (ggml lays a graph's inputs out side by side in its compute
/// buffer: tokens, positions, mask, cache row ids). Each copy starts at its first input's address
/// rounded down to 256 bytes where that stays in the allocation, and at a 256-byte aligned stage
/// offset, so an input's stage copy is as aligned as its host bytes up to 256. Returns the copies,
/// each input's stage offset (in the order given) and the stage bytes they take.
pub fn stage_copies(inputs: &[(usize, usize, Option<usize>)]) -> (Vec<StageCopy>, Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&i| inputs[i].0);
    let mut copies: Vec<StageCopy> = Vec::new();
    let mut offsets = vec![0usize; inputs.len()];
    // The open copy's allocation (None: its input's allocation is unknown, so it merges nothing).
    let mut open: Option<Option<usize>> = None;
    let mut total = 0usize;
    for i in order {
        let (addr, bytes, alloc) = inputs[i];
        let joins = match (copies.last(), open) {
            (Some(c), Some(Some(a))) => alloc == Some(a) && addr <= c.src + c.bytes + STAGE_MERGE_GAP,
            _ => false,
        };
        if !joins {
            let down = addr & !255;
            let src = match alloc {
                Some(a) if down >= a => down,
                _ => addr,
            };
            let offset = total.next_multiple_of(256);
            copies.push(StageCopy { src, bytes: 0, offset });
            open = Some(alloc);
        }
        let c = copies.last_mut().expect("pushed above");
        c.bytes = c.bytes.max(addr + bytes - c.src);
        offsets[i] = c.offset + (addr - c.src);
        total = c.offset + c.bytes;
    }
    (copies, offsets, total)
}

/// Memory kind of every tensor of `g` (by tensor index).
pub fn tensor_kinds(g: &Graph, map: &MemoryMap) -> Vec<MemKind> {
    map.kinds(g.tensors.iter().map(|t| (t.data, t.nbytes().max(1))))
}

/// Plan cache key: the graph's structure, where each tensor lives, and each address's alignment
/// (predicates may take a view only at an aligned offset; the structure key leaves offsets out).
pub fn plan_key(g: &Graph, kinds: &[MemKind]) -> u64 {
    // Whole words, as the structure key mixes them (it runs for every graph): two per tensor,
    // its kind with its address modulo 16, and a pinned tensor's device delta (else 0).
    let mut h = crate::plan::WordHash::new();
    h.words(&[crate::plan::structure_key(g), kinds.len() as u64]);
    let mut buf = [0u64; 64];
    let mut n = 0;
    for (t, k) in g.tensors.iter().zip(kinds) {
        let (code, delta) = match *k {
            MemKind::Device => (0, 0),
            MemKind::Pinned { delta } => (1, delta as u64),
            MemKind::Host => (2, 0),
        };
        buf[n] = code | ((t.data % 16) as u64) << 8;
        buf[n + 1] = delta;
        n += 2;
        if n == buf.len() {
            h.words(&buf);
            n = 0;
        }
    }
    h.words(&buf[..n]);
    h.finish()
}

/// How many places read each tensor: as a source of a node, or as the root of a view.
fn consumers(g: &Graph) -> Vec<u32> {
    let mut n = vec![0u32; g.tensors.len()];
    for &id in &g.nodes {
        for s in g.tensor(id).src.iter().flatten() {
            n[s.index()] += 1;
        }
    }
    for t in &g.tensors {
        if let Some(v) = t.view_src {
            n[v.index()] += 1;
        }
    }
    n
}

fn is_noop(t: &Tensor) -> bool {
    t.op.is_view() || t.op == Op::None
}

fn gpu_visible(g: &Graph, kinds: &[MemKind], id: TensorId) -> bool {
    let t = g.tensor(id);
    kinds[id.index()].gpu_visible() && t.src.iter().flatten().all(|s| kinds[s.index()].gpu_visible())
}

impl GpuPlan {
    fn refuse_split(&mut self, why: &'static str) {
        self.split_refused += 1;
        self.split_refusal.get_or_insert(why);
    }
}

/// Why MUL_MAT or MUL_MAT_ID `id`, whose weight is in pinned host memory, may not run as a
/// split node; `None` when it may: a MUL_MAT of at most 8 columns on one weight matrix (in
/// ggml's row layout), or a MUL_MAT_ID of at most 8 tokens, whose activations (and expert ids)
/// and result are contiguous tensors that the device sees, the result not in pinned memory, and
/// that the CPU code can run. Also `None` for nodes that are no such matmul.
pub fn split_refusal(g: &Graph, kinds: &[MemKind], id: TensorId) -> Option<&'static str> {
    use tandem_graph::ElemType;
    let t = g.tensor(id);
    let (Some(w), Some(x)) = (t.src[0], t.src[1]) else {
        return None;
    };
    if !matches!(t.op, Op::MulMat | Op::MulMatId) || !matches!(kinds[w.index()], MemKind::Pinned { .. }) {
        return None;
    }
    let (wt, xt) = (g.tensor(w), g.tensor(x));
    let refuse = |bad: bool, why: &'static str| if bad { Err(why) } else { Ok(()) };
    let check = || -> Result<(), &'static str> {
        match t.op {
            Op::MulMat => {
                refuse(wt.ne[2] != 1 || wt.ne[3] != 1, "batched weight")?;
                refuse(xt.ne[2] != 1 || xt.ne[3] != 1, "batched activations")?;
                refuse(xt.ne[1] > 8, "more than 8 columns")?;
            }
            _ => {
                let ids = t.src[2].ok_or("no expert ids")?;
                let it = g.tensor(ids);
                refuse(!kinds[ids.index()].gpu_visible(), "expert ids not on the device")?;
                refuse(
                    it.ty != ElemType::I32 || !it.is_contiguous(),
                    "expert ids not contiguous i32",
                )?;
                refuse(xt.ne[2] > 8, "more than 8 tokens")?;
            }
        }
        refuse(!kinds[x.index()].gpu_visible(), "activations not on the device")?;
        refuse(
            !kinds[id.index()].gpu_visible() || matches!(kinds[id.index()], MemKind::Pinned { .. }),
            "result not in device memory",
        )?;
        refuse(
            t.ty != ElemType::F32 || xt.ty != ElemType::F32 || !t.is_contiguous() || !xt.is_contiguous(),
            "activations or result not contiguous f32",
        )?;
        refuse(wt.nb[0] != wt.ty.type_size(), "weight rows not contiguous")?;
        refuse(
            tandem_ops::cpu::check(t, &g.srcs(id)).is_err(),
            "the CPU code does not run it",
        )
    };
    check().err()
}

/// Whether matmul `id` copies its weight from pinned host memory into device memory first
/// ([`GpuStep::Staged`]): more than 8 columns (MUL_MAT) or tokens (MUL_MAT_ID), one contiguous
/// weight.
pub fn stages_weight(g: &Graph, kinds: &[MemKind], id: TensorId) -> bool {
    let t = g.tensor(id);
    let (Some(w), Some(x)) = (t.src[0], t.src[1]) else {
        return false;
    };
    let (wt, xt) = (g.tensor(w), g.tensor(x));
    let wide = match t.op {
        Op::MulMat => xt.ne[1] * xt.ne[2] * xt.ne[3] > 8,
        Op::MulMatId => xt.ne[2] > 8,
        _ => false,
    };
    wide && matches!(kinds[w.index()], MemKind::Pinned { .. }) && wt.is_contiguous()
}

/// Launches registration `reg` on matmul `index` as [`launch_step`] does, its weight read from
/// device address `weight` (a copy of it) instead of where it lies.
///
/// # Safety
/// As [`launch_step`]; `weight` holds the weight's bytes by the time the stream runs the kernel.
pub unsafe fn launch_on_weight(
    ctx: &LaunchCtx<'_>,
    g: &Graph,
    kinds: &[MemKind],
    registry: &Registry,
    index: usize,
    reg: usize,
    weight: usize,
) -> Result<(), ExecError> {
    let id = g.nodes[index];
    let t = g.tensor(id);
    let r = registry.get(reg);
    let owned: Vec<Option<Tensor>> = t
        .src
        .iter()
        .enumerate()
        .map(|(k, s)| {
            s.map(|s| {
                let addr = if k == 0 {
                    weight
                } else {
                    device_addr(g.tensor(s), kinds[s.index()])
                };
                moved(g.tensor(s), addr)
            })
        })
        .collect();
    let dst = moved(t, device_addr(t, kinds[id.index()]));
    let mut srcs: Srcs<'_> = [None; tandem_graph::MAX_SRC];
    for (s, o) in srcs.iter_mut().zip(&owned) {
        *s = o.as_ref();
    }
    // SAFETY: forwarded contract; the predicate accepted the node at plan time (addresses do not
    // enter its shape rules).
    unsafe { (r.launch)(ctx, &Node { dst: &dst, srcs }, None) }.map_err(|e| ExecError::Other {
        index,
        node: t.name.clone(),
        reason: format!("{} ({}) on a staged weight: {e}", r.name, t.op),
    })
}

/// How many split steps from `steps[at]` on (at least one) run as one group: consecutive split
/// nodes that read the same activations (and, for MUL_MAT_ID, the same expert ids), as the
/// q/k/v projections of a layer or its ffn gate and up do. A group downloads its input once and
/// queues every GPU part before the CPU computes its rows of each, so the GPU runs the parts
/// back to back while the CPU works ([`super::device`]'s `run_splits`).
pub fn split_group_len(g: &Graph, steps: &[GpuStep], at: usize) -> usize {
    let inputs = |s: &GpuStep| match s {
        GpuStep::Split { index, .. } => {
            let t = g.tensor(g.nodes[*index]);
            Some((t.src[1], if t.op == Op::MulMatId { t.src[2] } else { None }))
        }
        _ => None,
    };
    let Some(first) = inputs(&steps[at]) else { return 1 };
    1 + steps[at + 1..].iter().take_while(|s| inputs(s) == Some(first)).count()
}

/// Whether node `id` may run as a split node ([`split_refusal`] has no reason against it and
/// its weight is in pinned host memory).
pub fn splittable(g: &Graph, kinds: &[MemKind], id: TensorId) -> bool {
    let t = g.tensor(id);
    matches!(t.op, Op::MulMat | Op::MulMatId)
        && t.src[0].is_some_and(|w| matches!(kinds[w.index()], MemKind::Pinned { .. }))
        && split_refusal(g, kinds, id).is_none()
}

/// Plans `g`; `log` prints each registration's first use; `split` makes MUL_MATs on weights in
/// pinned host memory split nodes where [`splittable`]. A fallback node the CPU code cannot run
/// fails the plan (nothing has run yet).
pub fn plan(g: &Graph, kinds: &[MemKind], registry: &Registry, log: bool, split: bool) -> Result<GpuPlan, ExecError> {
    let uses = consumers(g);
    let mut p = GpuPlan::default();
    let mut cpu_start: Option<usize> = None;
    let mut i = 0;
    let close = |p: &mut GpuPlan, start: &mut Option<usize>, end: usize| {
        if let Some(s) = start.take() {
            p.steps.push(GpuStep::Cpu { range: s..end });
        }
    };
    while i < g.nodes.len() {
        let id = g.nodes[i];
        let t = g.tensor(id);
        if is_noop(t) {
            p.noops += 1;
            i += 1;
            continue;
        }
        let mut chosen = None;
        if stages_weight(g, kinds, id) && gpu_visible(g, kinds, id) {
            if let Some((reg, _)) = registry.choose(&Node::of(g, id), None) {
                close(&mut p, &mut cpu_start, i);
                if log {
                    registry.log_first_use(reg);
                }
                p.steps.push(GpuStep::Staged { index: i, reg });
                p.staged += 1;
                i += 1;
                continue;
            }
        }
        if split && splittable(g, kinds, id) {
            let whole = gpu_visible(g, kinds, id)
                .then(|| registry.choose(&Node::of(g, id), None))
                .flatten();
            if let Some((reg, _)) = whole {
                close(&mut p, &mut cpu_start, i);
                if log {
                    registry.log_first_use(reg);
                }
                p.steps.push(GpuStep::Split { index: i, reg });
                p.splits += 1;
                i += 1;
                continue;
            }
            p.refuse_split("no GPU kernel takes the whole node");
        } else if split {
            if let Some(why) = split_refusal(g, kinds, id) {
                p.refuse_split(why);
            }
        }
        // A node fuses the one after it, or a whole chain (the MoE output's weighted sum).
        let mut span = 1;
        if gpu_visible(g, kinds, id) {
            let node = Node::of(g, id);
            let chain = fused_chain(g, kinds, i, &uses);
            let next = match chain {
                Some(last) => {
                    span = last - i;
                    Some(g.nodes[last])
                }
                // Not a matmul that runs apart, on its weight in pinned host memory.
                None => g.nodes.get(i + 1).copied().filter(|&n| {
                    let nt = g.tensor(n);
                    !is_noop(nt)
                        && uses[id.index()] == 1
                        && !t.output
                        && nt.src.contains(&Some(id))
                        && gpu_visible(g, kinds, n)
                        && !stages_weight(g, kinds, n)
                        && !(split && splittable(g, kinds, n))
                }),
            };
            let next_node = next.map(|n| Node::of(g, n));
            chosen = registry.choose(&node, next_node.as_ref());
        }
        match chosen {
            Some((reg, fused)) => {
                close(&mut p, &mut cpu_start, i);
                if log {
                    registry.log_first_use(reg);
                }
                let span = if fused { span } else { 0 };
                p.steps.push(GpuStep::Kernel { index: i, reg, span });
                p.kernels += 1;
                if fused {
                    p.fused += 1;
                    p.noops += g.nodes[i + 1..=i + span]
                        .iter()
                        .filter(|&&n| is_noop(g.tensor(n)))
                        .count();
                    i += span;
                }
            }
            None => {
                tandem_ops::cpu::check(t, &g.srcs(id)).map_err(|source| ExecError::Op { index: i, source })?;
                cpu_start.get_or_insert(i);
                p.cpu_nodes += 1;
            }
        }
        i += 1;
    }
    close(&mut p, &mut cpu_start, g.nodes.len());
    (p.inputs, p.input_bytes) = staged_inputs(g, kinds, &p.steps);
    p.settled = settled_sources(g);
    p.ids_writer = ids_writers(g);
    p.act_writer = act_writers(g);
    Ok(p)
}

/// The last node of a chain of nodes from node `i` on that one registration computes whole
/// (the registration then gets node `i` and that last node): [`moe_sum_chain`],
/// [`topk_moe_chain`], [`sum_clamp_div_chain`] or [`add_norm_chain`].
pub fn fused_chain(g: &Graph, kinds: &[MemKind], i: usize, uses: &[u32]) -> Option<usize> {
    match g.tensor(g.nodes[i]).op {
        Op::MulMat => sibling_chain(g, kinds, i),
        Op::Rope => rope_set_rows_chain(g, kinds, i),
        Op::Mul => moe_sum_chain(g, kinds, i, uses),
        Op::SoftMax => topk_moe_chain(g, kinds, i, uses),
        Op::SumRows => sum_clamp_div_chain(g, kinds, i, uses),
        Op::Add => add_norm_chain(g, kinds, i, uses),
        _ => None,
    }
}

/// A MUL_MAT from node `i` and the next node but views, a MUL_MAT on the same activations (a
/// layer's projections of one normed column): returns the second's index. Not where the second
/// reads the first's result, nor where either weight lies in pinned host memory (split nodes and
/// staged weights run apart).
pub fn sibling_chain(g: &Graph, kinds: &[MemKind], i: usize) -> Option<usize> {
    let a = g.nodes[i];
    let at = g.tensor(a);
    let j = next_node(g, i)?;
    let b = g.nodes[j];
    let bt = g.tensor(b);
    let in_device = |t: &Tensor| t.src[0].is_some_and(|w| kinds[w.index()] == MemKind::Device);
    let siblings = bt.op == Op::MulMat
        && at.src[1].is_some()
        && bt.src[1] == at.src[1]
        && !bt.src.contains(&Some(a))
        && in_device(at)
        && in_device(bt)
        && gpu_visible(g, kinds, b);
    siblings.then_some(j)
}

/// The index of the first node after node `i` that is not a view (or other no-op).
fn next_node(g: &Graph, i: usize) -> Option<usize> {
    (i + 1..g.nodes.len()).find(|&j| !is_noop(g.tensor(g.nodes[j])))
}

/// A ROPE from node `i` and, after views only, the SET_ROWS that stores a view of its result
/// (a K cache store): returns the SET_ROWS's index. The fused kernel writes the ROPE's result
/// too, so other readers of it do not matter.
pub fn rope_set_rows_chain(g: &Graph, kinds: &[MemKind], i: usize) -> Option<usize> {
    let r = g.nodes[i];
    let j = next_node(g, i)?;
    let st = g.tensor(g.nodes[j]);
    let stores = st.op == Op::SetRows
        && st.src[0].is_some_and(|v| g.storage_root(v) == (r, 0))
        && gpu_visible(g, kinds, g.nodes[j]);
    stores.then_some(j)
}

/// A residual ADD met by the next norm from node `i`: `s = ADD(x, y)`, `n = RMS_NORM(s)`,
/// `MUL(n, w)` (either operand order), consecutive, `n` read by the MUL only; returns the MUL's
/// index. `s` itself may be read later (the fused kernel writes it).
pub fn add_norm_chain(g: &Graph, kinds: &[MemKind], i: usize, uses: &[u32]) -> Option<usize> {
    let ([s, n, _], [_, nt, mt]) = three_nodes(g, kinds, i, [Op::Add, Op::RmsNorm, Op::Mul])?;
    let chained = nt.src[0] == Some(s)
        && mt.src.contains(&Some(n))
        && !mt.src.contains(&Some(s))
        && !nt.output
        && uses[n.index()] == 1;
    chained.then_some(i + 2)
}

/// Nodes `i`, `i + 1`, `i + 2` when their ops are `ops` and the last two are GPU-visible (the
/// planner checks the first).
fn three_nodes<'g>(
    g: &'g Graph,
    kinds: &[MemKind],
    i: usize,
    ops: [Op; 3],
) -> Option<([TensorId; 3], [&'g Tensor; 3])> {
    let ids = [g.nodes[i], *g.nodes.get(i + 1)?, *g.nodes.get(i + 2)?];
    let ts = ids.map(|id| g.tensor(id));
    let fits = (0..3).all(|j| ts[j].op == ops[j]) && gpu_visible(g, kinds, ids[1]) && gpu_visible(g, kinds, ids[2]);
    fits.then_some((ids, ts))
}

/// A MoE router as llama.cpp builds it from node `i`, a SOFT_MAX `p` of the logits (no mask):
/// a RESHAPE of `p` to `[1, e, t]`, a descending ARGSORT of `p`, a VIEW of its first k columns
/// (the experts' ids, which later nodes read), and the GET_ROWS of the reshaped probabilities at
/// those ids, in any order but with nothing else in between and nothing else reading `p`, the
/// reshape or the ARGSORT; returns the GET_ROWS's index. The fused kernel writes the ids (the
/// ARGSORT's first k columns) and the GET_ROWS's result, nothing of `p` or the rest of the
/// ARGSORT.
pub fn topk_moe_chain(g: &Graph, kinds: &[MemKind], i: usize, uses: &[u32]) -> Option<usize> {
    let p = g.nodes[i];
    let pt = g.tensor(p);
    if pt.op != Op::SoftMax || pt.output || pt.src[1].is_some() || pt.src[2].is_some() {
        return None;
    }
    let (mut reshape, mut sort, mut ids) = (None, None, None);
    for (j, &id) in g.nodes.iter().enumerate().skip(i + 1).take(4) {
        let t = g.tensor(id);
        if !gpu_visible(g, kinds, id) {
            return None;
        }
        match t.op {
            Op::Reshape if t.src[0] == Some(p) && reshape.is_none() && !t.output && uses[id.index()] == 1 => {
                reshape = Some(id)
            }
            Op::Argsort if t.src[0] == Some(p) && sort.is_none() && !t.output && uses[id.index()] == 2 => {
                sort = Some(id)
            }
            Op::View if sort.is_some() && t.src[0] == sort && t.view_offs == 0 && ids.is_none() => ids = Some(id),
            Op::GetRows if reshape.is_some() && ids.is_some() && t.src[0] == reshape && t.src[1] == ids => {
                // p read by the reshape (as source and view root) and the ARGSORT only.
                return (uses[p.index()] == 3).then_some(j);
            }
            _ => return None,
        }
    }
    None
}

/// llama.cpp's normalization of MoE weights from node `i`: `s = SUM_ROWS(x)`, `c = CLAMP(s)`,
/// `DIV(x, c)`, consecutive, `s` and `c` read by nothing else; returns the DIV's index.
pub fn sum_clamp_div_chain(g: &Graph, kinds: &[MemKind], i: usize, uses: &[u32]) -> Option<usize> {
    let ([s, c, _], [st, ct, dt]) = three_nodes(g, kinds, i, [Op::SumRows, Op::Clamp, Op::Div])?;
    let chained = ct.src[0] == Some(s)
        && dt.src[0] == st.src[0]
        && dt.src[1] == Some(c)
        && !st.output
        && !ct.output
        && uses[s.index()] == 1
        && uses[c.index()] == 1;
    chained.then_some(i + 2)
}

/// The index of the last node of the chain starting at node `i` that sums a MUL's rows, as
/// llama.cpp adds up a MoE layer's experts: `p = MUL(x [e, k, t], w)`, then k VIEWs of `p`
/// (view j: row j of every token, `[e, t]`), then k - 1 ADDs folding them in order,
/// `((v0 + v1) + v2) + ...` (either operand order), with nothing else in between and nothing
/// else reading `p`, the views or the partial sums; every node in device memory. `None` when
/// the nodes from `i` on are not such a chain.
pub fn moe_sum_chain(g: &Graph, kinds: &[MemKind], i: usize, uses: &[u32]) -> Option<usize> {
    let m = g.nodes[i];
    let mt = g.tensor(m);
    let k = mt.ne[1];
    if mt.op != Op::Mul || mt.output || !(2..=64).contains(&k) || mt.ne[3] != 1 || mt.ty != ElemType::F32 {
        return None;
    }
    let row = [mt.ne[0], mt.ne[2], 1, 1];
    let mut views: Vec<Option<TensorId>> = vec![None; k as usize];
    let mut refs_of_m = 0u32;
    let mut acc: Option<TensorId> = None;
    let mut adds = 0;
    let mut j = i + 1;
    while adds < k - 1 {
        let id = *g.nodes.get(j)?;
        let t = g.tensor(id);
        if !gpu_visible(g, kinds, id) {
            return None;
        }
        if t.op == Op::View && t.view_src == Some(m) && !t.output {
            let at = t.view_offs.checked_sub(mt.view_offs)?;
            let slot = at / mt.nb[1];
            if at % mt.nb[1] != 0 || slot >= views.len() || views[slot].is_some() {
                return None;
            }
            if t.ne != row || t.nb[1] != mt.nb[2] || uses[id.index()] != 1 {
                return None;
            }
            views[slot] = Some(id);
            refs_of_m += 1 + t.src.iter().filter(|&&s| s == Some(m)).count() as u32;
        } else if t.op == Op::Add {
            let next = views[adds as usize + 1]?;
            let prev = acc.or(views[0])?;
            let pair = (t.src[0]?, t.src[1]?);
            if pair != (prev, next) && pair != (next, prev) || t.ne != row || t.ty != ElemType::F32 {
                return None;
            }
            adds += 1;
            // Only the last sum may be read outside the chain.
            if adds < k - 1 && (uses[id.index()] != 1 || t.output) {
                return None;
            }
            acc = Some(id);
        } else {
            return None;
        }
        j += 1;
    }
    (uses[m.index()] == refs_of_m && views.iter().all(Option::is_some)).then_some(j - 1)
}

/// For each MUL_MAT_ID node, the index of the last node ahead of it that writes into the storage
/// of its ids (src 2); `None` where none does and for every other node. By ids, as
/// [`settled_sources`].
fn ids_writers(g: &Graph) -> Vec<Option<usize>> {
    src_writers(g, 2, &[Op::MulMatId])
}

/// For each MUL_MAT and MUL_MAT_ID node, the index of the last node ahead of it that writes into
/// the storage of its activations (src 1); `None` where none does and for every other node.
fn act_writers(g: &Graph) -> Vec<Option<usize>> {
    src_writers(g, 1, &[Op::MulMat, Op::MulMatId])
}

/// For each node whose op is one of `ops`, the index of the last node ahead of it that writes
/// into the storage of its source `src`; `None` where none does and for every other node.
fn src_writers(g: &Graph, src: usize, ops: &[Op]) -> Vec<Option<usize>> {
    let mut last = vec![None; g.tensors.len()];
    g.nodes
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let t = g.tensor(id);
            let writer = match t.src.get(src).copied().flatten() {
                Some(s) if ops.contains(&t.op) => last[g.storage_root(s).0.index()],
                _ => None,
            };
            if !is_noop(t) {
                last[g.storage_root(id).0.index()] = Some(i);
            }
            writer
        })
        .collect()
}

/// For each node, whether no node of `g` writes the storage of its first source: that source is
/// a leaf (or a view of one) and no node writes into the same root (as SET_ROWS writes a cache).
/// By ids, not addresses, so the answer holds for every graph of the same structure.
fn settled_sources(g: &Graph) -> Vec<bool> {
    let mut written = vec![false; g.tensors.len()];
    for &id in &g.nodes {
        if !is_noop(g.tensor(id)) {
            written[g.storage_root(id).0.index()] = true;
        }
    }
    g.nodes
        .iter()
        .map(|&id| g.tensor(id).src[0].is_some_and(|s| !written[g.storage_root(s).0.index()]))
        .collect()
}

/// A tensor with its address moved to where the executing side sees it.
fn moved(t: &Tensor, data: usize) -> Tensor {
    let mut c = t.clone();
    c.data = data;
    c
}

/// The device address of a GPU-visible tensor.
pub fn device_addr(t: &Tensor, kind: MemKind) -> usize {
    match kind {
        MemKind::Pinned { delta } => (t.data as i64 + delta) as usize,
        _ => t.data,
    }
}

/// Queues the kernel of one step. Tensors in pinned memory with a non-zero host/device delta are
/// passed as copies carrying their device address.
///
/// # Safety
/// Every tensor of the step lives where `kinds` says, valid until the stream has run the work.
pub unsafe fn launch_step(
    ctx: &LaunchCtx<'_>,
    g: &Graph,
    kinds: &[MemKind],
    registry: &Registry,
    index: usize,
    reg: usize,
    span: usize,
) -> Result<(), ExecError> {
    // The node, and the last one it fuses; no allocation on the launch path.
    let fused = span > 0;
    let pair = [g.nodes[index], g.nodes[index + span]];
    let ids = &pair[..1 + usize::from(fused)];
    let needs_move = ids.iter().any(|&id| {
        std::iter::once(id)
            .chain(g.tensor(id).src.iter().flatten().copied())
            .any(|s| matches!(kinds[s.index()], MemKind::Pinned { delta } if delta != 0))
    });
    let r = registry.get(reg);
    let fail = |e: super::KernelError| ExecError::Other {
        index,
        node: g.tensor(ids[0]).name.clone(),
        reason: format!("{} ({}): {e}", r.name, g.tensor(ids[0]).op),
    };
    if !needs_move {
        let node = Node::of(g, ids[0]);
        let next = fused.then(|| Node::of(g, ids[1]));
        // SAFETY: forwarded contract; the predicate accepted these nodes at plan time.
        return unsafe { (r.launch)(ctx, &node, next.as_ref()) }.map_err(fail);
    }
    let mut copies: HashMap<TensorId, Tensor> = HashMap::new();
    for &id in ids {
        for s in std::iter::once(id).chain(g.tensor(id).src.iter().flatten().copied()) {
            copies
                .entry(s)
                .or_insert_with(|| moved(g.tensor(s), device_addr(g.tensor(s), kinds[s.index()])));
        }
    }
    let view = |id: TensorId| -> (&Tensor, Srcs<'_>) {
        let t = &copies[&id];
        let mut srcs: Srcs<'_> = [None; tandem_graph::MAX_SRC];
        for (k, s) in g.tensor(id).src.iter().enumerate() {
            srcs[k] = s.map(|s| &copies[&s]);
        }
        (t, srcs)
    };
    let (d0, s0) = view(ids[0]);
    let node = Node { dst: d0, srcs: s0 };
    let next = fused.then(|| {
        let (d1, s1) = view(ids[1]);
        Node { dst: d1, srcs: s1 }
    });
    // SAFETY: as above, with every address moved to the device's view of it.
    unsafe { (r.launch)(ctx, &node, next.as_ref()) }.map_err(fail)
}

/// One merged range of device memory a fallback group touches, and its place in staging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    pub start: usize,
    pub end: usize,
    /// Offset in the staging buffer (same alignment mod 64 as `start`).
    pub staging: usize,
    /// Copy down before the group: something in it is read, or not wholly rewritten.
    pub download: bool,
    /// Copy back after the group: something in it is written and used afterwards.
    pub upload: bool,
}

/// The staging layout of a fallback group over `g.nodes[range]`: every device-memory tensor it
/// reads or writes, merged into intervals. Returns the intervals and the staging bytes needed.
pub fn stage_group(g: &Graph, kinds: &[MemKind], range: Range<usize>) -> (Vec<Interval>, usize) {
    let uses = consumers(g);
    let group: Vec<TensorId> = g.nodes[range.clone()].to_vec();
    let in_group = |id: TensorId| group.contains(&id);
    // Consumers inside the group, per tensor.
    let mut inner_uses: HashMap<TensorId, u32> = HashMap::new();
    for &id in &group {
        for s in g.tensor(id).src.iter().flatten() {
            *inner_uses.entry(*s).or_default() += 1;
        }
    }
    // (start, end, fresh, crosses, read)
    let mut spans: Vec<(usize, usize, bool, bool, bool)> = Vec::new();
    let mut add = |t: &Tensor, written: bool, read: bool, crosses: bool| {
        let len = t.nbytes();
        if len == 0 {
            return;
        }
        // A written span is fresh when the group rewrites all of it; a read span does not spoil
        // freshness (a read from outside the group sets `read`, which downloads anyway).
        let fresh = !written || (t.view_src.is_none() && t.is_contiguous());
        spans.push((t.data, t.data + len, fresh, written && crosses, read));
    };
    for &id in &group {
        let t = g.tensor(id);
        if is_noop(t) {
            continue;
        }
        if kinds[id.index()] == MemKind::Device {
            let used_inside = inner_uses.get(&id).copied().unwrap_or(0);
            // Views of the result count among its uses; a view made inside the group and read
            // only inside still counts as a crossing use, which only costs a copy.
            let crosses = t.output || t.view_src.is_some() || uses[id.index()] == 0 || used_inside < uses[id.index()];
            add(t, true, false, crosses);
        }
        for s in t.src.iter().flatten() {
            if kinds[s.index()] == MemKind::Device {
                let st = g.tensor(*s);
                let produced_here = in_group(*s) && !is_noop(st);
                add(st, false, !produced_here, false);
            }
        }
    }
    spans.sort_by_key(|s| (s.0, s.1));
    let mut out: Vec<Interval> = Vec::new();
    let mut fresh_all: Vec<bool> = Vec::new();
    for (start, end, fresh, crosses, read) in spans {
        match out.last_mut() {
            Some(last) if start < last.end => {
                last.end = last.end.max(end);
                last.upload |= crosses;
                last.download |= read;
                let f = fresh_all.last_mut().expect("parallel to out");
                *f &= fresh;
            }
            _ => {
                out.push(Interval {
                    start,
                    end,
                    staging: 0,
                    download: read,
                    upload: crosses,
                });
                fresh_all.push(fresh);
            }
        }
    }
    let mut total = 0usize;
    for (iv, fresh) in out.iter_mut().zip(fresh_all) {
        // A range not wholly made of fresh results keeps bytes the group does not write: copy
        // it down so copying it back does not clobber them.
        iv.download |= !fresh;
        let skew = iv.start % 64;
        total = total.next_multiple_of(64) + skew;
        iv.staging = total;
        total += iv.end - iv.start;
    }
    (out, total)
}

/// Runs one fallback group on the CPU with device-memory tensors moved to `staging_base`
/// (a host address) per `intervals`.
///
/// # Safety
/// Host-visible tensors are valid host memory; the staging copies of device tensors are in
/// place (downloads completed) and nothing else uses them during the call.
pub unsafe fn run_cpu_group(
    cpu: &CpuContext,
    g: &Graph,
    kinds: &[MemKind],
    range: Range<usize>,
    intervals: &[Interval],
    staging_base: usize,
    stats: &mut GraphStats,
) -> Result<(), ExecError> {
    let host_addr = |t: &Tensor, kind: MemKind| -> usize {
        if kind != MemKind::Device || t.data == 0 {
            return t.data;
        }
        let iv = intervals
            .iter()
            .find(|iv| t.data >= iv.start && t.data < iv.end)
            .expect("every device tensor of the group is staged");
        staging_base + iv.staging + (t.data - iv.start)
    };
    for index in range {
        let id = g.nodes[index];
        let t = g.tensor(id);
        if is_noop(t) {
            continue;
        }
        let all = std::iter::once(id).chain(t.src.iter().flatten().copied());
        let mut copies: HashMap<TensorId, Tensor> = HashMap::new();
        for s in all {
            let st = g.tensor(s);
            let kind = kinds[s.index()];
            if kind == MemKind::Device {
                copies.entry(s).or_insert_with(|| moved(st, host_addr(st, kind)));
            }
        }
        let pick = |s: TensorId| copies.get(&s).unwrap_or_else(|| g.tensor(s));
        let dst = pick(id);
        let mut srcs: Srcs<'_> = [None; tandem_graph::MAX_SRC];
        for (k, s) in t.src.iter().enumerate() {
            srcs[k] = s.map(pick);
        }
        if let Some(k) = srcs
            .iter()
            .position(|s| s.is_some_and(|s| s.nelements() > 0 && s.data == 0))
        {
            return Err(ExecError::Op {
                index,
                source: tandem_ops::OpError::new(dst, &srcs, format!("src{k} has no memory (not allocated)")),
            });
        }
        // SAFETY: forwarded contract: every address is host memory covering the tensor.
        unsafe { tandem_ops::cpu::compute(cpu, dst, &srcs) }.map_err(|source| ExecError::Op { index, source })?;
        stats.cpu_fallback_nodes += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::{ElemType, GraphBuilder};

    /// a, b on the device; c = a + b (CPU), d = c * c (CPU), e = d + a (CPU): only e crosses.
    #[test]
    fn fallback_groups_copy_down_reads_and_copy_back_what_crosses() {
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[16]);
        let y = b.new_tensor(ElemType::F32, &[16]);
        let c = b.add(x, y).unwrap();
        let d = b.mul(c, c).unwrap();
        let e = b.add(d, x).unwrap();
        let mut g = b.build();
        for (k, t) in g.tensors.iter_mut().enumerate() {
            t.data = 0x1000 + k * 0x100;
        }
        let kinds = vec![MemKind::Device; g.tensors.len()];
        let (iv, total) = stage_group(&g, &kinds, 0..g.nodes.len());
        assert_eq!(iv.len(), 5);
        let by_start = |id: TensorId| iv.iter().find(|v| v.start == g.tensor(id).data).unwrap().clone();
        assert!(by_start(x).download && !by_start(x).upload);
        assert!(by_start(y).download && !by_start(y).upload);
        assert!(!by_start(c).download && !by_start(c).upload, "{:?}", by_start(c));
        assert!(!by_start(d).upload);
        assert!(by_start(e).upload && !by_start(e).download);
        assert!(total >= 5 * 64);
        for v in &iv {
            assert_eq!((v.staging % 64), v.start % 64);
        }
    }

    /// Weights (leaves no node writes) are settled; a cache that SET_ROWS writes in the same
    /// graph is not, through any view of it; nor is a node's result, nor a node without sources.
    #[test]
    fn settled_sources_are_those_no_node_writes() {
        let mut b = GraphBuilder::new();
        let w = b.new_tensor(ElemType::Q4_0, &[64, 8]);
        let x = b.new_tensor(ElemType::F32, &[64, 1]);
        let h = b.mul_mat(w, x).unwrap();
        let cache = b.new_tensor(ElemType::F32, &[8, 4]);
        let rows = b.new_tensor(ElemType::I64, &[1]);
        let h2 = b.reshape(h, &[8, 1]).unwrap();
        let write = b.set_rows(cache, h2, rows).unwrap();
        let k = b.view(cache, &[8, 4], &[4, 32], 0).unwrap();
        let q = b.new_tensor(ElemType::F32, &[8, 1]);
        let kq = b.mul_mat(k, q).unwrap();
        let w2 = b.new_tensor(ElemType::F32, &[4, 4]);
        let chained = b.mul_mat(kq, w2).unwrap();
        let g = b.build();
        let at = |id: TensorId| g.nodes.iter().position(|&n| n == id).unwrap();
        let settled = settled_sources(&g);
        assert_eq!(settled.len(), g.nodes.len());
        assert!(settled[at(h)], "a weight leaf");
        assert!(!settled[at(write)], "SET_ROWS' first source is the cache it writes");
        assert!(!settled[at(kq)], "a view of a cache SET_ROWS writes");
        assert!(!settled[at(chained)], "a node's result");
    }

    /// A MUL_MAT_ID's ids writer is the last node ahead of it that writes their storage (through
    /// a view too); ids no node writes have none, and no other node has one.
    #[test]
    fn ids_writers_are_the_last_nodes_writing_the_ids() {
        let mut b = GraphBuilder::new();
        let experts = b.new_tensor(ElemType::Q4_0, &[64, 16, 8]);
        let x = b.new_tensor(ElemType::F32, &[64, 1, 1]);
        let given = b.new_tensor(ElemType::I32, &[2, 1]);
        let from_input = b.mul_mat_id(experts, x, given).unwrap();
        let logits = b.new_tensor(ElemType::F32, &[8, 1]);
        let chosen = b.top_k(logits, 2).unwrap();
        let other = b.add(logits, logits).unwrap();
        let first = b.mul_mat_id(experts, x, chosen).unwrap();
        let second = b.mul_mat_id(experts, x, chosen).unwrap();
        let sorted = b.argsort(logits, tandem_graph::op::SortOrder::Desc);
        let top = b.view(sorted, &[2, 1], &[4, 32], 0).unwrap();
        let through_view = b.mul_mat_id(experts, x, top).unwrap();
        let g = b.build();
        let at = |id: TensorId| g.nodes.iter().position(|&n| n == id).unwrap();
        let w = ids_writers(&g);
        assert_eq!(w.len(), g.nodes.len());
        assert_eq!(w[at(from_input)], None, "ids no node writes");
        assert_eq!(w[at(first)], Some(at(chosen)), "TOP_K wrote them, ADD came between");
        assert_eq!(
            w[at(second)],
            Some(at(chosen)),
            "a MUL_MAT_ID between writes its own dst"
        );
        assert_eq!(w[at(through_view)], Some(at(sorted)), "a view of ARGSORT's result");
        assert!(w[at(other)].is_none() && w[at(chosen)].is_none() && w[at(sorted)].is_none());
    }

    /// A matmul's activations writer is the last node ahead of it that writes their storage;
    /// activations no node writes have none, and nodes that are no matmul have none.
    #[test]
    fn act_writers_are_the_last_nodes_writing_the_activations() {
        let mut b = GraphBuilder::new();
        let w = b.new_tensor(ElemType::Q4_0, &[64, 64]);
        let experts = b.new_tensor(ElemType::Q4_0, &[64, 16, 8]);
        let x = b.new_tensor(ElemType::F32, &[64, 1]);
        let ids = b.new_tensor(ElemType::I32, &[2, 1]);
        let from_input = b.mul_mat(w, x).unwrap();
        let normed = b.rms_norm(x, 1e-5);
        let gate = b.mul_mat(w, normed).unwrap();
        let up = b.mul_mat(w, normed).unwrap();
        let moe = b.mul_mat_id(experts, normed, ids).unwrap();
        let chained = b.mul_mat(w, gate).unwrap();
        let g = b.build();
        let at = |id: TensorId| g.nodes.iter().position(|&n| n == id).unwrap();
        let a = act_writers(&g);
        assert_eq!(a.len(), g.nodes.len());
        assert_eq!(a[at(from_input)], None, "activations no node writes");
        assert_eq!(a[at(gate)], Some(at(normed)));
        assert_eq!(a[at(up)], Some(at(normed)), "another matmul between writes its own dst");
        assert_eq!(a[at(moe)], Some(at(normed)));
        assert_eq!(a[at(chained)], Some(at(gate)));
        assert_eq!(a[at(normed)], None, "not a matmul");
    }

    use crate::config::Config;
    use crate::gpu::registry::{LaunchCtx, Node, Registration, Registry};
    use crate::gpu::KernelError;

    fn accept_any(_: &Node<'_>, _: Option<&Node<'_>>) -> bool {
        true
    }
    fn accept_fused(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
        next.is_some_and(|n| n.srcs[0].is_some_and(|s| std::ptr::eq(s, node.dst)))
    }
    unsafe fn no_launch(_: &LaunchCtx<'_>, _: &Node<'_>, _: Option<&Node<'_>>) -> Result<(), KernelError> {
        Ok(())
    }
    static ADD: Registration = Registration {
        name: "test.add",
        op: Op::Add,
        fuses: None,
        accepts: accept_any,
        launch: no_launch,
    };
    static NORM_MUL: Registration = Registration {
        name: "test.rms_norm_mul",
        op: Op::RmsNorm,
        fuses: Some(Op::Mul),
        accepts: accept_fused,
        launch: no_launch,
    };

    static MUL_MAT: Registration = Registration {
        name: "test.mul_mat",
        op: Op::MulMat,
        fuses: None,
        accepts: accept_any,
        launch: no_launch,
    };

    fn registry(disable: &str) -> Registry {
        let cfg = Config::from_lookup(|k| (k == "TANDEM_DISABLE_DISPATCH").then(|| disable.to_string()));
        Registry::with(vec![&NORM_MUL, &ADD, &MUL_MAT], &cfg)
    }

    /// MUL_MATs on weights in pinned host memory become split nodes in split mode, where their
    /// shapes allow; in device memory, past 8 columns or outside split mode they take kernels.
    #[test]
    fn matmuls_on_pinned_weights_split() {
        let mut b = GraphBuilder::new();
        let w = b.new_tensor(ElemType::Q4_0, &[256, 512]);
        let x = b.new_tensor(ElemType::F32, &[256, 1]);
        let wide = b.new_tensor(ElemType::F32, &[256, 9]);
        let y = b.mul_mat(w, x).unwrap();
        let z = b.mul_mat(w, wide).unwrap();
        b.add(y, y).unwrap();
        let g = b.build();
        let mut kinds = vec![MemKind::Device; g.tensors.len()];
        kinds[w.index()] = MemKind::Pinned { delta: 0 };
        let reg = |i| GpuStep::Kernel {
            index: i,
            reg: 2,
            span: 0,
        };
        let p = plan(&g, &kinds, &registry(""), false, true).unwrap();
        assert_eq!(p.steps[0], GpuStep::Split { index: 0, reg: 2 });
        assert_eq!(
            p.steps[1],
            GpuStep::Staged { index: 1, reg: 2 },
            "9 columns copy the weight"
        );
        assert_eq!((p.splits, p.staged, p.kernels, p.split_refused), (1, 1, 1, 0));
        // A strided view of a weight still splits (each side reads its rows through the
        // strides) but does not stage: a kernel reads it in place, and the plan says why it did
        // not split.
        let mut strided = g.clone();
        strided.tensor_mut(w).nb[1] *= 2;
        let p = plan(&strided, &kinds, &registry(""), false, true).unwrap();
        assert_eq!((p.steps[1].clone(), p.splits), (reg(1), 1));
        assert_eq!((p.split_refused, p.split_refusal), (1, Some("more than 8 columns")));
        let p = plan(&g, &kinds, &registry(""), false, false).unwrap();
        assert_eq!((p.steps[0].clone(), p.splits), (reg(0), 0), "not in split mode");
        let device = vec![MemKind::Device; g.tensors.len()];
        let p = plan(&g, &device, &registry(""), false, true).unwrap();
        assert_eq!((p.steps[0].clone(), p.splits), (reg(0), 0), "weights in device memory");
        // No kernel for the whole node: no split either, the CPU fallback runs it.
        let p = plan(&g, &kinds, &registry("test.mul_mat"), false, true).unwrap();
        assert_eq!(p.steps[0], GpuStep::Cpu { range: 0..2 });
        assert_eq!(p.split_refusal, Some("no GPU kernel takes the whole node"));
        let _ = z;
    }

    /// Graph inputs in pinned memory that kernels read are staged, 256-byte aligned: directly,
    /// through a view, as a matmul's activations; a matmul's weight, a tensor the graph computes
    /// and inputs of a graph that writes pinned memory are not.
    #[test]
    fn pinned_inputs_of_kernels_are_staged() {
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[64, 4]);
        let mask = b.new_tensor(ElemType::F32, &[64, 4]);
        let flat = b.new_tensor(ElemType::F32, &[256]);
        let w = b.new_tensor(ElemType::F32, &[64, 32]);
        let x = b.new_tensor(ElemType::F32, &[64, 9]);
        b.add(a, mask).unwrap();
        let v = b.reshape(flat, &[64, 4]).unwrap();
        b.add(a, v).unwrap();
        b.mul_mat(w, x).unwrap();
        let g = b.build();
        let mut kinds = vec![MemKind::Device; g.tensors.len()];
        for t in [mask, flat, v, w, x] {
            kinds[t.index()] = MemKind::Pinned { delta: 0 };
        }
        let p = plan(&g, &kinds, &registry(""), false, true).unwrap();
        let ids: Vec<(TensorId, usize, usize)> = p.inputs.iter().map(|i| (i.id, i.bytes, i.offset)).collect();
        assert_eq!(ids, vec![(mask, 1024, 0), (v, 1024, 1024), (x, 64 * 9 * 4, 2048)]);
        assert_eq!(p.input_bytes, 2048 + 64 * 9 * 4);
        // The weight, 9 columns from pinned memory, is copied by its staged step instead.
        assert!(p.steps.contains(&GpuStep::Staged { index: 3, reg: 2 }));

        // A tensor the graph computes into pinned memory: its readers see it where it lies,
        // and nothing else is staged either.
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[64, 4]);
        let mask = b.new_tensor(ElemType::F32, &[64, 4]);
        let c = b.add(a, a).unwrap();
        b.add(c, mask).unwrap();
        let g = b.build();
        let mut kinds = vec![MemKind::Device; g.tensors.len()];
        kinds[c.index()] = MemKind::Pinned { delta: 0 };
        kinds[mask.index()] = MemKind::Pinned { delta: 0 };
        let p = plan(&g, &kinds, &registry(""), false, true).unwrap();
        assert_eq!((p.inputs.len(), p.input_bytes), (0, 0));
    }

    /// Inputs close together in one allocation share a copy that starts 256-aligned; a gap past
    /// the bound, another allocation or an unknown one starts a copy of its own.
    #[test]
    fn staged_inputs_side_by_side_go_down_in_one_copy() {
        let a = 0x10_0000usize;
        let b = 0x80_0000usize;
        let inputs = [
            (a + 0x1040, 64, Some(a)),                                  // positions
            (a + 0x1000, 8, Some(a)),                                   // tokens (first by address)
            (a + 0x2000 + 16, 512, Some(a)),                            // mask
            (a + 0x2000 + 16 + 512 + STAGE_MERGE_GAP + 1, 32, Some(a)), // past the gap
            (b + 0x100, 16, Some(b)),                                   // another allocation
            (b + 0x120, 16, None),                                      // allocation unknown
        ];
        let (copies, offsets, total) = stage_copies(&inputs);
        let far = a + 0x2000 + 16 + 512 + STAGE_MERGE_GAP + 1;
        assert_eq!(
            copies,
            vec![
                StageCopy {
                    src: a + 0x1000,
                    bytes: 0x1000 + 16 + 512,
                    offset: 0
                },
                StageCopy {
                    src: far & !255,
                    bytes: (far & 255) + 32,
                    offset: 0x1300
                },
                StageCopy {
                    src: b + 0x100,
                    bytes: 16,
                    offset: 0x1400
                },
                StageCopy {
                    src: b + 0x120,
                    bytes: 16,
                    offset: 0x1500
                },
            ]
        );
        assert_eq!(offsets, vec![0x40, 0, 0x1010, 0x1300 + (far & 255), 0x1400, 0x1500]);
        assert_eq!(total, 0x1510);
        // Every input's bytes lie inside its copy, at the same place relative to the copy's
        // source, and keep their host alignment modulo 16.
        for (i, &(addr, bytes, _)) in inputs.iter().enumerate() {
            let c = copies
                .iter()
                .find(|c| offsets[i] >= c.offset && offsets[i] + bytes <= c.offset + c.bytes)
                .expect("inside a copy");
            assert_eq!(addr - c.src, offsets[i] - c.offset);
            assert_eq!(offsets[i] % 16, addr % 16);
        }
        assert_eq!(stage_copies(&[]), (vec![], vec![], 0));
    }

    /// Split nodes on the same activations group (q/k/v, gate/up); a split on other
    /// activations, or any other step in between, starts a new group.
    #[test]
    fn split_nodes_on_the_same_activations_group() {
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[256, 1]);
        let ws: Vec<_> = (0..3).map(|_| b.new_tensor(ElemType::Q4_0, &[256, 256])).collect();
        let q = b.mul_mat(ws[0], x).unwrap();
        let k = b.mul_mat(ws[1], x).unwrap();
        let v = b.mul_mat(ws[2], x).unwrap();
        let s = b.add(q, k).unwrap();
        let o = b.mul_mat(ws[0], s).unwrap();
        let o2 = b.mul_mat(ws[1], s).unwrap();
        let y = b.mul_mat(ws[2], v).unwrap();
        let g = b.build();
        let mut kinds = vec![MemKind::Device; g.tensors.len()];
        for w in &ws {
            kinds[w.index()] = MemKind::Pinned { delta: 0 };
        }
        let p = plan(&g, &kinds, &registry(""), false, true).unwrap();
        assert_eq!(p.splits, 6);
        let lens: Vec<usize> = (0..p.steps.len()).map(|i| split_group_len(&g, &p.steps, i)).collect();
        // steps: q k v | add | o o2 | y
        assert_eq!(lens, vec![3, 2, 1, 1, 2, 1, 1]);
        let _ = (o, o2, y);
    }

    /// x -> rms_norm -> mul(w) -> add(x) -> scale -> add: the norm fuses its MUL, the ADDs get
    /// kernels, SCALE falls back alone; host-memory tensors and disabled registrations fall back.
    #[test]
    fn planning_fuses_sole_consumers_and_groups_the_fallback() {
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[64, 2]);
        let w = b.new_tensor(ElemType::F32, &[64]);
        let n = b.rms_norm(x, 1e-6);
        let m = b.mul(n, w).unwrap();
        let a = b.add(m, x).unwrap();
        let s = b.scale(a, 0.5, 0.0);
        b.add(s, x).unwrap();
        let g = b.build();
        let kinds = vec![MemKind::Device; g.tensors.len()];
        let p = plan(&g, &kinds, &registry(""), false, false).unwrap();
        assert_eq!(
            p.steps,
            vec![
                GpuStep::Kernel {
                    index: 0,
                    reg: 0,
                    span: 1
                },
                GpuStep::Kernel {
                    index: 2,
                    reg: 1,
                    span: 0
                },
                GpuStep::Cpu { range: 3..4 },
                GpuStep::Kernel {
                    index: 4,
                    reg: 1,
                    span: 0
                },
            ]
        );
        assert_eq!((p.kernels, p.fused, p.cpu_nodes), (3, 1, 1));

        // The norm's result marked as an output may not be fused away; the MUL then falls back.
        let mut out = g.clone();
        out.tensor_mut(g.nodes[0]).output = true;
        let p = plan(&out, &kinds, &registry(""), false, false).unwrap();
        assert_eq!(p.steps[0], GpuStep::Cpu { range: 0..2 });

        // Everything in plain host memory, or every registration disabled: all on the CPU.
        let host = vec![MemKind::Host; g.tensors.len()];
        let p = plan(&g, &host, &registry(""), false, false).unwrap();
        assert_eq!(p.steps, vec![GpuStep::Cpu { range: 0..5 }]);
        let p = plan(&g, &kinds, &registry("test."), false, false).unwrap();
        assert_eq!(p.steps, vec![GpuStep::Cpu { range: 0..5 }]);
        // Disabling only the fused registration leaves the ADDs on kernels.
        let p = plan(&g, &kinds, &registry("test.rms_norm_mul"), false, false).unwrap();
        assert_eq!(p.kernels, 2);
        assert_eq!(p.steps[0], GpuStep::Cpu { range: 0..2 });
    }

    /// llama.cpp's MoE sum, `p = x * w`, views of p's rows, ADDs folding them in order: one
    /// chain the plan fuses whole; other orders, extra readers and outputs inside are not.
    #[test]
    fn the_moe_sum_chain_is_found_whole() {
        // (graph, index of the MUL, tensors of the views and the ADDs)
        fn build(k: usize, order: &[usize], swap_last: bool) -> (Graph, Vec<TensorId>) {
            let mut b = GraphBuilder::new();
            let x = b.new_tensor(ElemType::F32, &[8, k as i64, 3]);
            let w = b.new_tensor(ElemType::F32, &[1, k as i64, 3]);
            let p = b.mul(x, w).unwrap();
            let nb1 = 8 * 4;
            let views: Vec<TensorId> = (0..k)
                .map(|j| b.view(p, &[8, 3], &[nb1 * k], j * nb1).unwrap())
                .collect();
            let mut acc = views[order[0]];
            let mut ids = views.clone();
            for (n, &j) in order.iter().enumerate().skip(1) {
                acc = if swap_last && n == k - 1 {
                    b.add(views[j], acc)
                } else {
                    b.add(acc, views[j])
                }
                .unwrap();
                ids.push(acc);
            }
            (b.build(), ids)
        }
        let (g, ids) = build(4, &[0, 1, 2, 3], false);
        let kinds = vec![MemKind::Device; g.tensors.len()];
        let uses = consumers(&g);
        let mul = g.nodes.iter().position(|&n| g.tensor(n).op == Op::Mul).unwrap();
        let last = g.nodes.iter().position(|&n| n == *ids.last().unwrap()).unwrap();
        assert_eq!(moe_sum_chain(&g, &kinds, mul, &uses), Some(last));
        let (g2, _) = build(4, &[0, 1, 2, 3], true);
        assert_eq!(
            moe_sum_chain(&g2, &kinds, mul, &consumers(&g2)),
            Some(last),
            "operands either way"
        );
        // Summed out of order: the fused kernel's rounding would differ.
        let (g3, _) = build(4, &[0, 2, 1, 3], false);
        assert_eq!(moe_sum_chain(&g3, &kinds, mul, &consumers(&g3)), None);
        // A partial sum read by the host, a view in host memory: not a chain.
        let mut out = g.clone();
        out.tensor_mut(ids[5]).output = true;
        assert_eq!(moe_sum_chain(&out, &kinds, mul, &uses), None);
        let mut host = kinds.clone();
        host[ids[2].index()] = MemKind::Host;
        assert_eq!(moe_sum_chain(&g, &host, mul, &uses), None);
        // The last sum may be an output.
        let mut out = g.clone();
        out.tensor_mut(*ids.last().unwrap()).output = true;
        assert_eq!(moe_sum_chain(&out, &kinds, mul, &uses), Some(last));
        // Something else reading the product.
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[8, 2, 3]);
        let w = b.new_tensor(ElemType::F32, &[1, 2, 3]);
        let p = b.mul(x, w).unwrap();
        let v0 = b.view(p, &[8, 3], &[64], 0).unwrap();
        let v1 = b.view(p, &[8, 3], &[64], 32).unwrap();
        b.add(v0, v1).unwrap();
        b.scale(p, 2.0, 0.0);
        let g4 = b.build();
        let kinds4 = vec![MemKind::Device; g4.tensors.len()];
        assert_eq!(moe_sum_chain(&g4, &kinds4, 0, &consumers(&g4)), None);
    }

    /// A residual ADD, the RMS_NORM of its sum and the MUL by the norm's weight: a chain from the
    /// ADD to the MUL, with the sum read again later; not where something else reads the norm,
    /// the norm is an output, or the MUL reads the sum itself.
    /// A ROPE and, after a reshape, the SET_ROWS storing it make a chain; a SET_ROWS of
    /// something else does not.
    #[test]
    fn a_rope_and_its_cache_store_chain() {
        let mut b = GraphBuilder::new();
        let k = b.new_tensor(ElemType::F32, &[64, 2, 1]);
        let other = b.new_tensor(ElemType::F32, &[128, 1]);
        let pos = b.new_tensor(ElemType::I32, &[1]);
        let cache = b.new_tensor(ElemType::F16, &[128, 8]);
        let idx = b.new_tensor(ElemType::I64, &[1]);
        let r = b
            .rope(k, pos, None, tandem_graph::params::RopeParams::llama(64, false))
            .unwrap();
        let rows = b.reshape(r, &[128, 1]).unwrap();
        b.set_rows(cache, rows, idx).unwrap();
        b.rope(k, pos, None, tandem_graph::params::RopeParams::llama(64, true))
            .unwrap();
        b.set_rows(cache, other, idx).unwrap();
        let g = b.build();
        let kinds = vec![MemKind::Device; g.tensors.len()];
        let at = |i: usize| g.tensor(g.nodes[i]).op;
        assert_eq!(
            (at(0), at(2), at(3), at(4)),
            (Op::Rope, Op::SetRows, Op::Rope, Op::SetRows)
        );
        assert_eq!(rope_set_rows_chain(&g, &kinds, 0), Some(2));
        assert_eq!(fused_chain(&g, &kinds, 0, &consumers(&g)), Some(2));
        assert_eq!(rope_set_rows_chain(&g, &kinds, 3), None);
    }

    /// Two MUL_MATs on one column with only views between pair up; not when the second reads
    /// the first's result, reads another column, or either weight lies in pinned host memory.
    #[test]
    fn sibling_matmuls_pair_up() {
        fn build(second_reads_first: bool, other_column: bool) -> (Graph, [TensorId; 2]) {
            let mut b = GraphBuilder::new();
            let w1 = b.new_tensor(ElemType::Q4_0, &[64, 64]);
            let w2 = b.new_tensor(ElemType::Q4_0, &[64, 64]);
            let x = b.new_tensor(ElemType::F32, &[64, 1]);
            let y = b.new_tensor(ElemType::F32, &[64, 1]);
            let v = b.mul_mat(w1, x).unwrap();
            b.reshape(v, &[64]).unwrap();
            let col = if second_reads_first {
                v
            } else if other_column {
                y
            } else {
                x
            };
            b.mul_mat(w2, col).unwrap();
            (b.build(), [w1, w2])
        }
        let (g, [w1, w2]) = build(false, false);
        let kinds = vec![MemKind::Device; g.tensors.len()];
        assert_eq!(sibling_chain(&g, &kinds, 0), Some(2));
        assert_eq!(fused_chain(&g, &kinds, 0, &consumers(&g)), Some(2));
        assert_eq!(sibling_chain(&g, &kinds, 2), None);
        for (reads, other) in [(true, false), (false, true)] {
            let (g2, _) = build(reads, other);
            assert_eq!(sibling_chain(&g2, &kinds, 0), None, "{reads} {other}");
        }
        for w in [w1, w2] {
            let mut pinned = kinds.clone();
            pinned[w.index()] = MemKind::Pinned { delta: 0 };
            assert_eq!(sibling_chain(&g, &pinned, 0), None);
        }
    }

    #[test]
    fn the_residual_add_norm_chain_is_found() {
        fn build(extra_norm_reader: bool, mul_reads_sum: bool) -> Graph {
            let mut b = GraphBuilder::new();
            let x = b.new_tensor(ElemType::F32, &[64, 2]);
            let y = b.new_tensor(ElemType::F32, &[64, 2]);
            let w = b.new_tensor(ElemType::F32, &[64]);
            let s = b.add(x, y).unwrap();
            let n = b.rms_norm(s, 1e-6);
            let m = if mul_reads_sum {
                b.mul(n, s).unwrap()
            } else {
                b.mul(n, w).unwrap()
            };
            let r = b.add(m, s).unwrap();
            if extra_norm_reader {
                b.add(r, n).unwrap();
            }
            b.build()
        }
        let g = build(false, false);
        let kinds = vec![MemKind::Device; g.tensors.len()];
        assert_eq!(add_norm_chain(&g, &kinds, 0, &consumers(&g)), Some(2));
        assert_eq!(fused_chain(&g, &kinds, 0, &consumers(&g)), Some(2));
        // The second ADD starts no chain.
        assert_eq!(add_norm_chain(&g, &kinds, 3, &consumers(&g)), None);
        let g2 = build(true, false);
        assert_eq!(add_norm_chain(&g2, &kinds, 0, &consumers(&g2)), None);
        let g3 = build(false, true);
        assert_eq!(add_norm_chain(&g3, &kinds, 0, &consumers(&g3)), None);
        let mut out = g.clone();
        out.tensor_mut(g.nodes[1]).output = true;
        assert_eq!(add_norm_chain(&out, &kinds, 0, &consumers(&out)), None);
        let mut host = kinds.clone();
        host[g.nodes[2].index()] = MemKind::Host;
        assert_eq!(add_norm_chain(&g, &host, 0, &consumers(&g)), None);
    }

    #[test]
    fn a_fallback_node_the_cpu_cannot_run_fails_the_plan() {
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[8]);
        let s = b.scale(x, 2.0, 0.0);
        let mut g = b.build();
        // A type the CPU's SCALE does not take.
        g.tensor_mut(s).ty = ElemType::Q4_0;
        let kinds = vec![MemKind::Device; g.tensors.len()];
        let e = plan(&g, &kinds, &registry(""), false, false).unwrap_err();
        assert!(e.to_string().contains("SCALE"), "{e}");
    }

    #[test]
    fn in_place_writes_are_copied_down_first_and_back_after() {
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[16]);
        let y = b.new_tensor(ElemType::F32, &[8]);
        let v = b.view(x, &[8], &[32], 16).unwrap();
        b.cpy(y, v).unwrap();
        let mut g = b.build();
        for (k, t) in g.tensors.iter_mut().enumerate() {
            if t.view_src.is_none() {
                t.data = 0x10000 + k * 0x1000;
            }
        }
        let root = g.tensor(x).data;
        for t in g.tensors.iter_mut() {
            if t.view_src.is_some() {
                t.data = root + t.view_offs;
            }
        }
        let kinds = vec![MemKind::Device; g.tensors.len()];
        let first_cpu = g.nodes.iter().position(|&n| !is_noop(g.tensor(n))).unwrap();
        let (iv, _) = stage_group(&g, &kinds, first_cpu..g.nodes.len());
        let into = iv.iter().find(|i| i.start <= root + 16 && root + 16 < i.end).unwrap();
        assert!(into.upload && into.download, "{into:?}");
    }
}
