//! The plan: where each node of a graph runs. Plans depend only on the graph's structure
//! (ops, params, types, shapes, strides, wiring), never on addresses, so one plan serves every
//! decode step of the same shape and is cached by a hash of that structure.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use tandem_graph::{Graph, Op, TensorId};

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

/// A hash of everything a plan depends on.
pub fn structure_key(g: &Graph) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    g.nodes.len().hash(&mut h);
    for &id in &g.nodes {
        hash_tensor(g, id, &mut h);
        for s in g.tensor(id).src.iter().flatten() {
            s.hash(&mut h);
            hash_tensor(g, *s, &mut h);
        }
    }
    h.finish()
}

fn hash_tensor(g: &Graph, id: TensorId, h: &mut impl Hasher) {
    let t = g.tensor(id);
    (
        t.op as u32,
        t.ty as u32,
        t.ne,
        t.nb,
        t.op_params,
        t.view_src.is_some(),
        t.buffer,
    )
        .hash(h);
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

/// Plans keyed by [`structure_key`]; bounded so a host that builds ever-new graph shapes does
/// not grow it without limit.
#[derive(Default)]
pub struct PlanCache {
    map: Mutex<HashMap<u64, Arc<Plan>>>,
}

const PLAN_CACHE_CAP: usize = 256;

impl PlanCache {
    /// The cached plan for `g`, or a new one from `make`; the flag says whether it was cached.
    pub fn get_or_plan(&self, g: &Graph, make: impl FnOnce(&Graph) -> Plan) -> (Arc<Plan>, bool) {
        let key = structure_key(g);
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
