//! Devices: `TANDEM<n>` per GPU (kernels plus the CPU fallback) and the host device
//! `TANDEM_HOST` (tandem's CPU code only).

use crate::config::Config;
use crate::executor::{check_plan, run_host, ExecError};
use crate::plan::{plan_host, GraphTag, PlanCache};
use crate::stats::GraphStats;
use std::sync::{Arc, RwLock};
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
    /// The worker pool; replaced whole when the host asks for another thread count. A graph
    /// holds its own reference, so a pool being replaced finishes the graph it runs.
    ctx: RwLock<Arc<CpuContext>>,
    plans: PlanCache,
}

impl HostDevice {
    pub fn new(threads: usize) -> HostDevice {
        HostDevice {
            ctx: RwLock::new(Arc::new(CpuContext::new(threads))),
            plans: PlanCache::default(),
        }
    }

    /// The current worker pool.
    pub fn cpu(&self) -> Arc<CpuContext> {
        self.ctx.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Resizes the worker pool to `threads` workers (0 = one per core); a no-op when the size
    /// already matches, so hosts may call it before every graph.
    pub fn set_threads(&self, threads: usize) {
        let want = if threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            threads
        };
        if self.cpu().n_threads() == want {
            return;
        }
        let mut slot = self.ctx.write().unwrap_or_else(|e| e.into_inner());
        if slot.n_threads() != want {
            *slot = Arc::new(CpuContext::new(want));
        }
    }
}

pub enum Device {
    Host(HostDevice),
    Gpu(Box<crate::gpu::GpuDevice>),
}

impl Device {
    pub fn name(&self) -> &str {
        match self {
            Device::Host(_) => "TANDEM_HOST",
            Device::Gpu(g) => g.name(),
        }
    }

    pub fn description(&self) -> String {
        match self {
            Device::Host(h) => format!(
                "tandem host device ({} threads, {})",
                h.cpu().n_threads(),
                cpu_feature_line()
            ),
            Device::Gpu(g) => g.description(),
        }
    }

    pub fn kind(&self) -> DeviceKind {
        match self {
            Device::Host(_) => DeviceKind::Accel,
            Device::Gpu(_) => DeviceKind::Gpu,
        }
    }

    /// Whether this device will really execute `node` (honest `supports_op`).
    pub fn supports(&self, node: &Tensor, srcs: &Srcs) -> bool {
        match self {
            Device::Host(_) => tandem_ops::cpu::check(node, srcs).is_ok(),
            Device::Gpu(g) => g.supports(node, srcs),
        }
    }

    /// Runs `g` (addresses in host memory for the host device). A graph that cannot run fails
    /// before any node runs.
    ///
    /// # Safety
    /// Every tensor's `data` points at `nbytes()` bytes of memory this device can address, valid
    /// for the call and written by nobody else meanwhile.
    pub unsafe fn compute(&self, g: &Graph) -> Result<GraphStats, ExecError> {
        // SAFETY: forwarded contract.
        unsafe { self.compute_tagged(g, None) }
    }

    /// [`Self::compute`] for a graph the caller tagged ([`GraphTag`]): a graph with the tag of
    /// the call before is taken to be that graph again.
    ///
    /// # Safety
    /// As [`Self::compute`]; two calls with one tag pass equal graphs.
    pub unsafe fn compute_tagged(&self, g: &Graph, tag: Option<GraphTag>) -> Result<GraphStats, ExecError> {
        if let Device::Gpu(d) = self {
            // SAFETY: forwarded contract.
            return unsafe { d.compute_tagged(g, tag) };
        }
        let t0 = Instant::now();
        let mut stats = GraphStats {
            nodes: g.nodes.len(),
            ..Default::default()
        };
        match self {
            Device::Host(h) => {
                let (plan, cached) = h.plans.get_or_plan_tagged(g, tag, plan_host);
                stats.plan_cached = cached;
                if !cached {
                    check_plan(g, &plan)?;
                }
                stats.plan_us = t0.elapsed().as_micros() as u64;
                let t1 = Instant::now();
                run_host(&h.cpu(), g, &plan, &mut stats)?;
                stats.launch_us = t1.elapsed().as_micros() as u64;
            }
            Device::Gpu(_) => unreachable!("handled above"),
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
    let gpus = gpu_devices(cfg);
    let want_host = cfg.host_device.unwrap_or(gpus.is_empty());
    let mut all = gpus;
    if want_host {
        all.push(Arc::new(Device::Host(HostDevice::new(cfg.threads))));
    }
    all
}

/// One `TANDEM<n>` per usable GPU, in runtime order; a device that fails to open is left out with
/// one line saying why.
fn gpu_devices(cfg: &Config) -> Vec<Arc<Device>> {
    let mut out = Vec::new();
    for b in crate::gpu::backends() {
        for info in &b.devices {
            match crate::gpu::GpuDevice::new(b, info.ordinal, out.len(), cfg.threads) {
                Ok(d) => out.push(Arc::new(Device::Gpu(Box::new(d)))),
                Err(e) => eprintln!("tandem: GPU {} ({}) left out: {e}", info.ordinal, info.name),
            }
        }
    }
    out
}
