//! Runs a plan: nodes in order, each where the plan put it.

use crate::plan::{Placement, Plan};
use crate::stats::GraphStats;
use tandem_graph::{Graph, TensorId};
use tandem_ops::{CpuContext, OpError};

/// A graph failed: the failing node's index and the op error naming node, op and types.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecError {
    #[error("node {index}: {source}")]
    Op { index: usize, source: OpError },
    #[error("node {index} ('{node}'): {reason}")]
    Other { index: usize, node: String, reason: String },
}

/// Checks that every CPU-placed node can run before anything is written, so a graph that
/// cannot run fails without touching its outputs.
pub fn check_plan(g: &Graph, plan: &Plan) -> Result<(), ExecError> {
    for (index, step) in plan.steps.iter().enumerate() {
        if step.placement == Placement::Cpu {
            tandem_ops::cpu::check(g.tensor(step.node), &g.srcs(step.node))
                .map_err(|source| ExecError::Op { index, source })?;
        }
    }
    Ok(())
}

/// Runs every step of `plan` on the host.
///
/// # Safety
/// Every tensor of `g` has `data` pointing at `nbytes()` bytes of host memory that stay valid
/// and unaliased by other writers for the duration of the call.
pub unsafe fn run_host(ctx: &CpuContext, g: &Graph, plan: &Plan, stats: &mut GraphStats) -> Result<(), ExecError> {
    let timed = crate::stats::node_timing();
    for (index, step) in plan.steps.iter().enumerate() {
        match step.placement {
            Placement::Noop => stats.noop_nodes += 1,
            Placement::Cpu => {
                let t0 = timed.then(std::time::Instant::now);
                run_cpu_node(ctx, g, step.node).map_err(|source| ExecError::Op { index, source })?;
                if let Some(t0) = t0 {
                    stats.kernel_ns += t0.elapsed().as_nanos() as u64;
                }
                stats.cpu_fallback_nodes += 1;
            }
            Placement::Gpu(_) => {
                return Err(ExecError::Other {
                    index,
                    node: g.tensor(step.node).name.clone(),
                    reason: "GPU placement on the host device".into(),
                })
            }
        }
    }
    Ok(())
}

/// # Safety
/// As [`run_host`].
unsafe fn run_cpu_node(ctx: &CpuContext, g: &Graph, node: TensorId) -> Result<(), OpError> {
    let t = g.tensor(node);
    if t.nelements() > 0 && t.data == 0 {
        return Err(OpError::new(t, &g.srcs(node), "result has no memory (not allocated)"));
    }
    let srcs = g.srcs(node);
    if let Some(i) = srcs
        .iter()
        .position(|s| s.is_some_and(|s| s.nelements() > 0 && s.data == 0))
    {
        return Err(OpError::new(t, &srcs, format!("src{i} has no memory (not allocated)")));
    }
    tandem_ops::cpu::compute(ctx, t, &srcs)
}
