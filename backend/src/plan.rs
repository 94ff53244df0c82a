//! The plan: where each node of a graph runs. Plans depend only on the graph's structure
//! (ops, params, types, shapes, strides, wiring), never on addresses, so one plan serves every
//! decode step of the same shape and is cached by a hash of that structure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tandem_graph::{Graph, Op, TensorId, MAX_DIMS, MAX_OP_PARAMS, MAX_SRC};

/// Where one node runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A view: nothing to compute.
    Noop,
    /// tandem's CPU code on the host.
    Cpu,
    /// A GPU kernel registration, by its index in the device's registry.
    Gpu(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub node: TensorId,
    pub placement: Placement,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
}

impl Plan {
    pub fn count(&self, f: impl Fn(&Placement) -> bool) -> usize {
        self.steps.iter().filter(|s| f(&s.placement)).count()
    }
}

/// A hash of everything a plan depends on: every tensor's op, type, shape, strides, op params,
/// output flag, view root, buffer and sources, and the node order; data addresses and view
/// offsets are left out so every decode step of one shape shares a key.
///
/// It runs for every graph, so it mixes whole words on four independent lanes (a folded 64×64→128
/// multiply per word) instead of feeding SipHash field by field.
pub fn structure_key(g: &Graph) -> u64 {
    let mut h = WordHash::new();
    h.words(&[g.nodes.len() as u64, g.tensors.len() as u64]);
    for eight in g.nodes.chunks(8) {
        let id = |j: usize| eight.get(j).map_or(u32::MAX as u64, |n| n.0 as u64);
        h.words(&[
            id(0) | id(1) << 32,
            id(2) | id(3) << 32,
            id(4) | id(5) << 32,
            id(6) | id(7) << 32,
        ]);
    }
    for i in 0..g.tensors.len() {
        hash_tensor(g, TensorId(i as u32), &mut h);
    }
    h.finish()
}

fn hash_tensor(g: &Graph, id: TensorId, h: &mut WordHash) {
    const NONE: u64 = u32::MAX as u64;
    let t = g.tensor(id);
    let slot = |s: Option<TensorId>| s.map_or(NONE, |s| s.0 as u64);
    let mut w = [0u64; 3 + 2 * MAX_DIMS + MAX_OP_PARAMS / 2 + MAX_SRC / 2 + 2];
    w[0] = t.op as u64 | (t.ty as u64) << 16 | (t.output as u64) << 32;
    w[1] = slot(t.view_src);
    w[2] = t.buffer;
    let mut i = 3;
    for d in 0..MAX_DIMS {
        w[i] = t.ne[d] as u64;
        w[i + 1] = t.nb[d] as u64;
        i += 2;
    }
    for p in t.op_params.chunks(2) {
        w[i] = p[0] as u32 as u64 | (p.get(1).map_or(0, |&x| x as u32 as u64) << 32);
        i += 1;
    }
    for s in t.src.chunks(2) {
        w[i] = slot(s[0]) | slot(s.get(1).copied().flatten()) << 32;
        i += 1;
    }
    h.words(&w[..i]);
}

/// Four lanes of `lane = fold(lane ^ word, K)`, where `fold` xors the halves of the 128-bit
/// product: every input bit reaches every output bit within a few words, and the lanes'
/// multiplies overlap in the pipeline. Words go to lanes in fours; a short tail is padded
/// with zeros (the word count, hashed at the end, tells paddings apart).
pub(crate) struct WordHash {
    lanes: [u64; 4],
    count: u64,
}

impl WordHash {
    const K: [u64; 4] = [
        0x9e37_79b9_7f4a_7c15,
        0xc2b2_ae3d_27d4_eb4f,
        0x1656_67b1_9e37_79f9,
        0xd6e8_feb8_6659_fd93,
    ];

    pub(crate) fn new() -> WordHash {
        WordHash {
            lanes: [
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
            ],
            count: 0,
        }
    }

    fn fold(a: u64, b: u64) -> u64 {
        let p = a as u128 * b as u128;
        p as u64 ^ (p >> 64) as u64
    }

    pub(crate) fn words(&mut self, ws: &[u64]) {
        let mut quads = ws.chunks_exact(4);
        for q in &mut quads {
            self.quad([q[0], q[1], q[2], q[3]]);
        }
        let rest = quads.remainder();
        if !rest.is_empty() {
            let mut q = [0u64; 4];
            q[..rest.len()].copy_from_slice(rest);
            self.quad(q);
        }
        self.count += ws.len() as u64;
    }

    fn quad(&mut self, q: [u64; 4]) {
        for l in 0..4 {
            self.lanes[l] = Self::fold(self.lanes[l] ^ q[l], Self::K[l]);
        }
    }

    pub(crate) fn finish(&self) -> u64 {
        let [a, b, c, d] = self.lanes;
        let x = Self::fold(a ^ Self::K[2], b ^ Self::K[3]) ^ Self::fold(c ^ Self::K[0], d ^ Self::K[1]);
        Self::fold(x ^ self.count, Self::K[0])
    }
}

/// Plans for the host device: every computing node on the CPU, views as no-ops.
pub fn plan_host(g: &Graph) -> Plan {
    let steps = g
        .nodes
        .iter()
        .map(|&node| {
            let op = g.tensor(node).op;
            let placement = if op.is_view() || op == Op::None {
                Placement::Noop
            } else {
                Placement::Cpu
            };
            Step { node, placement }
        })
        .collect();
    Plan { steps }
}

/// What a caller knows of a graph it hands a device again: two calls with the same tag carry
/// the same graph, every field of every tensor alike (the plugin tags each graph it converts
/// afresh and hands a graph it found unchanged with the tag of its conversion). A device may
/// then reuse what it derived from the graph last time (its structure key, its tensors' memory
/// kinds) instead of deriving it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphTag(pub u64);

/// Plans keyed by [`structure_key`]; bounded so a host that builds ever-new graph shapes does
/// not grow it without limit.
#[derive(Default)]
pub struct PlanCache {
    map: Mutex<HashMap<u64, Arc<Plan>>>,
    /// The tag and structure key of the last graph planned or looked up with a tag.
    last: Mutex<Option<(GraphTag, u64)>>,
}

const PLAN_CACHE_CAP: usize = 256;

impl PlanCache {
    /// The cached plan for `g`, or a new one from `make`; the flag says whether it was cached.
    pub fn get_or_plan(&self, g: &Graph, make: impl FnOnce(&Graph) -> Plan) -> (Arc<Plan>, bool) {
        self.get_or_plan_tagged(g, None, make)
    }

    /// As [`Self::get_or_plan`]; a graph with the tag of the last tagged call is the same graph
    /// ([`GraphTag`]), whose structure key is not computed again.
    pub fn get_or_plan_tagged(
        &self,
        g: &Graph,
        tag: Option<GraphTag>,
        make: impl FnOnce(&Graph) -> Plan,
    ) -> (Arc<Plan>, bool) {
        let key = {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            match (tag, *last) {
                (Some(t), Some((lt, key))) if t == lt => key,
                _ => {
                    let key = structure_key(g);
                    *last = tag.map(|t| (t, key));
                    key
                }
            }
        };
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = map.get(&key) {
            if p.steps.len() == g.nodes.len() {
                return (p.clone(), true);
            }
        }
        let plan = Arc::new(make(g));
        if map.len() >= PLAN_CACHE_CAP {
            map.clear();
        }
        map.insert(key, plan.clone());
        (plan, false)
    }
}

#[cfg(test)]
mod structure_key_tests {
    use super::*;
    use tandem_graph::{ElemType, Tensor};

    /// A matmul of a weight and an input, then an add of a bias view: enough fields to vary.
    fn graph() -> Graph {
        let mut g = Graph::default();
        let mut w = Tensor::new(ElemType::Q8_0, &[64, 32]);
        w.buffer = 0x1000;
        let x = Tensor::new(ElemType::F32, &[64, 1]);
        let mut mm = Tensor::new(ElemType::F32, &[32, 1]);
        mm.op = Op::MulMat;
        mm.src[0] = Some(TensorId(0));
        mm.src[1] = Some(TensorId(1));
        let mut b = Tensor::new(ElemType::F32, &[32, 1]);
        b.op = Op::View;
        b.view_src = Some(TensorId(1));
        let mut add = Tensor::new(ElemType::F32, &[32, 1]);
        add.op = Op::Add;
        add.src[0] = Some(TensorId(2));
        add.src[1] = Some(TensorId(3));
        g.tensors = vec![w, x, mm, b, add];
        g.nodes = vec![TensorId(2), TensorId(3), TensorId(4)];
        g
    }

    /// A tagged graph comes back with its plan; another tag, or none, looks the plan up by the
    /// graph's own key.
    #[test]
    fn tagged_graphs_find_their_plans() {
        let cache = PlanCache::default();
        let made = std::cell::Cell::new(0);
        let make = |g: &Graph| {
            made.set(made.get() + 1);
            plan_host(g)
        };
        let g = graph();
        let mut other = graph();
        other.tensors[2].ne = [16, 1, 1, 1];
        let (p1, cached) = cache.get_or_plan_tagged(&g, Some(GraphTag(7)), make);
        assert!(!cached);
        let (p2, cached) = cache.get_or_plan_tagged(&g, Some(GraphTag(7)), make);
        assert!(cached && Arc::ptr_eq(&p1, &p2));
        let (p3, cached) = cache.get_or_plan_tagged(&other, Some(GraphTag(8)), make);
        assert!(!cached && !Arc::ptr_eq(&p1, &p3));
        assert!(Arc::ptr_eq(
            &cache.get_or_plan_tagged(&g, Some(GraphTag(9)), make).0,
            &p1
        ));
        assert!(Arc::ptr_eq(&cache.get_or_plan(&other, make).0, &p3));
        assert_eq!(made.get(), 2);
    }

    #[test]
    fn addresses_do_not_change_the_key() {
        let a = graph();
        let mut b = graph();
        for (i, t) in b.tensors.iter_mut().enumerate() {
            t.data = 0x7f00_0000_0000 + i * 4096;
            t.view_offs = 64 * i;
            t.name = format!("t{i}");
        }
        assert_eq!(structure_key(&a), structure_key(&b));
    }

    #[test]
    fn every_structural_field_changes_the_key() {
        let base = structure_key(&graph());
        type Edit = (&'static str, fn(&mut Graph));
        let edits: Vec<Edit> = vec![
            ("op", |g| g.tensors[4].op = Op::Mul),
            ("type", |g| g.tensors[0].ty = ElemType::Q4_0),
            ("ne", |g| g.tensors[1].ne[1] = 2),
            ("nb", |g| g.tensors[3].nb[1] = 256),
            ("op_params low", |g| g.tensors[4].op_params[0] = 1),
            ("op_params high", |g| g.tensors[4].op_params[15] = i32::MIN),
            ("output", |g| g.tensors[4].output = true),
            ("view root", |g| g.tensors[3].view_src = Some(TensorId(2))),
            ("view-ness", |g| g.tensors[3].view_src = None),
            ("buffer", |g| g.tensors[0].buffer = 0x2000),
            ("buffer high bit", |g| g.tensors[0].buffer |= 1 << 63),
            ("wiring", |g| g.tensors[4].src.swap(0, 1)),
            ("src slot", |g| g.tensors[4].src[9] = Some(TensorId(0))),
            ("node order", |g| g.nodes.swap(0, 1)),
            ("node count", |g| {
                g.nodes.pop();
            }),
        ];
        let mut seen = vec![base];
        for (what, edit) in edits {
            let mut g = graph();
            edit(&mut g);
            let k = structure_key(&g);
            assert!(
                !seen.contains(&k),
                "editing the {what} left the key equal to an earlier one"
            );
            seen.push(k);
        }
    }
}
