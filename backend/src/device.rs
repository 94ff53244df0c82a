//! Devices: the host device now; GPU devices join as another placement of the same plan.

use crate::config::Config;
use crate::executor::{check_plan, run_host, ExecError};
use crate::plan::{plan_host, PlanCache};
use crate::stats::GraphStats;
use std::sync::Arc;
use std::time::Instant;
use tandem_graph::{Graph, Tensor};
use tandem_ops::{CpuContext, Srcs};

/// ggml's device types, as the plugin reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Gpu,
    Accel,
}

/// The host device, `TANDEM_HOST`: every node on tandem's CPU code.
pub struct HostDevice {
    ctx: CpuContext,
    plans: PlanCache,
}

impl HostDevice {
    pub fn new(threads: usize) -> HostDevice {
        HostDevice {
            ctx: CpuContext::new(threads),
            plans: PlanCache::default(),
        }
    }

    pub fn cpu(&self) -> &CpuContext {
        &self.ctx
    }
}

pub enum Device {
    Host(HostDevice),
}

impl Device {
    pub fn name(&self) -> &str {
        match self {
            Device::Host(_) => "TANDEM_HOST",
        }
    }

    pub fn description(&self) -> String {
        match self {
            Device::Host(h) => format!(
                "tandem host device ({} threads, {})",
                h.ctx.n_threads(),
                cpu_feature_line()
            ),
        }
    }

    pub fn kind(&self) -> DeviceKind {
        match self {
            Device::Host(_) => DeviceKind::Accel,
        }
    }

    /// Whether this device will really execute `node` (honest `supports_op`).
    pub fn supports(&self, node: &Tensor, srcs: &Srcs) -> bool {
        match self {
            Device::Host(_) => tandem_ops::cpu::check(node, srcs).is_ok(),
        }
    }

    /// Runs `g` (addresses in host memory for the host device). A graph that cannot run fails
    /// before any node runs.
    ///
    /// # Safety
    /// Every tensor's `data` points at `nbytes()` bytes of memory this device can address, valid
    /// for the call and written by nobody else meanwhile.
    pub unsafe fn compute(&self, g: &Graph) -> Result<GraphStats, ExecError> {
        let t0 = Instant::now();
        let mut stats = GraphStats {
            nodes: g.nodes.len(),
            ..Default::default()
        };
        match self {
            Device::Host(h) => {
                let (plan, cached) = h.plans.get_or_plan(g, plan_host);
                stats.plan_cached = cached;
                if !cached {
                    check_plan(g, &plan)?;
                }
                stats.plan_us = t0.elapsed().as_micros() as u64;
                let t1 = Instant::now();
                run_host(&h.ctx, g, &plan, &mut stats)?;
                stats.launch_us = t1.elapsed().as_micros() as u64;
            }
        }
        stats.wall_us = t0.elapsed().as_micros() as u64;
        if Config::get().stats {
            eprintln!("tandem: {}: {stats}", self.name());
        }
        Ok(stats)
    }
}

fn cpu_feature_line() -> String {
    let f = tandem_ops::simd::features().names();
    if f.is_empty() {
        "scalar".into()
    } else {
        f.join("+")
    }
}

/// The devices tandem offers: GPUs (none until a GPU runtime is present) and the host device
/// when there is no GPU or `TANDEM_HOST_DEVICE=1`; `TANDEM_HOST_DEVICE=0` hides it.
pub fn devices() -> Vec<Arc<Device>> {
    let cfg = Config::get();
    let gpus: Vec<Arc<Device>> = Vec::new();
    let want_host = cfg.host_device.unwrap_or(gpus.is_empty());
    let mut all = gpus;
    if want_host {
        all.push(Arc::new(Device::Host(HostDevice::new(cfg.threads))));
    }
    all
}
