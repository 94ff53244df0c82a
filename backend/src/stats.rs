//! Per-graph statistics (`TANDEM_STATS=1`).

use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    pub nodes: usize,
    pub gpu_dispatches: usize,
    pub cpu_fallback_nodes: usize,
    pub split_nodes: usize,
    /// Matmuls on pinned weights that split mode ran whole, and the first one's reason
    /// (`exec::split_refusal`).
    pub split_refused: usize,
    pub split_refusal: Option<&'static str>,
    /// GPU: matmuls whose weight was copied from pinned host memory before its kernel ran.
    pub staged_nodes: usize,
    pub noop_nodes: usize,
    pub plan_cached: bool,
    pub plan_us: u64,
    pub launch_us: u64,
    /// GPU: host microseconds from the first step until the last launch was queued (the part
    /// of `launch_us` before the final wait); 0 on the host device.
    pub queue_us: u64,
    /// GPU: host microseconds of `queue_us` spent queueing the copies of the graph's inputs into
    /// device memory (`exec::staged_inputs`); 0 where none are staged.
    pub stage_us: u64,
    pub wall_us: u64,
    /// Nanoseconds spent inside the CPU nodes' kernels (their check, work and pool fork/join),
    /// summed; measured only while [`node_timing`] is on, else 0.
    pub kernel_ns: u64,
    /// GPU: the graph ran as a device graph: captured this time (and then launched), or replayed
    /// from an earlier capture with one launch.
    pub device_graph: Option<DeviceGraph>,
    /// GPU: a graph with split nodes ran with the GPU reading every host weight alone (the way
    /// its trials found faster, or on trial).
    pub whole_gpu: bool,
}

/// How a GPU graph's kernels were queued when not one by one ([`GraphStats::device_graph`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceGraph {
    Captured,
    Replayed,
}

impl std::fmt::Display for GraphStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "nodes={} gpu={} cpu_fallback={} split={} noop={} plan_us={}{} launch_us={} wall_us={}",
            self.nodes,
            self.gpu_dispatches,
            self.cpu_fallback_nodes,
            self.split_nodes,
            self.noop_nodes,
            self.plan_us,
            if self.plan_cached { " (cached)" } else { "" },
            self.launch_us,
            self.wall_us
        )?;
        if self.staged_nodes > 0 {
            write!(f, " staged={}", self.staged_nodes)?;
        }
        if self.split_refused > 0 {
            write!(
                f,
                " split_refused={} ({})",
                self.split_refused,
                self.split_refusal.unwrap_or("-")
            )?;
        }
        if self.whole_gpu {
            write!(f, " way=whole_gpu")?;
        }
        if self.queue_us > 0 {
            write!(f, " queue_us={}", self.queue_us)?;
        }
        if self.stage_us > 0 {
            write!(f, " stage_us={}", self.stage_us)?;
        }
        if self.kernel_ns > 0 {
            write!(f, " kernel_us={}", self.kernel_ns / 1000)?;
        }
        match self.device_graph {
            Some(DeviceGraph::Captured) => write!(f, " graph=captured")?,
            Some(DeviceGraph::Replayed) => write!(f, " graph=replayed")?,
            None => {}
        }
        Ok(())
    }
}

static NODE_TIMING: AtomicBool = AtomicBool::new(false);

/// Turns per-node kernel timing on or off for every device of the process (benchmarks do, to
/// split a graph's wall time into kernel time and tandem's own overhead).
pub fn set_node_timing(on: bool) {
    NODE_TIMING.store(on, Ordering::Relaxed);
}

/// Whether executors time each CPU node: on while [`set_node_timing`] says so or under
/// `TANDEM_STATS=1`. Off by default: it adds two clock reads per node.
pub fn node_timing() -> bool {
    NODE_TIMING.load(Ordering::Relaxed) || crate::config::Config::get().stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_kernel_time_only_when_measured() {
        let mut s = GraphStats {
            nodes: 3,
            plan_cached: true,
            ..Default::default()
        };
        let line = s.to_string();
        assert!(line.contains("nodes=3") && line.contains("(cached)"), "{line}");
        assert!(!line.contains("kernel_us"), "{line}");
        s.kernel_ns = 12_345;
        assert!(s.to_string().ends_with(" kernel_us=12"), "{s}");
    }
}
