//! Per-graph statistics (`TANDEM_STATS=1`).

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    pub nodes: usize,
    pub gpu_dispatches: usize,
    pub cpu_fallback_nodes: usize,
    pub split_nodes: usize,
    pub noop_nodes: usize,
    pub plan_cached: bool,
    pub plan_us: u64,
    pub launch_us: u64,
    pub wall_us: u64,
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
        )
    }
}
