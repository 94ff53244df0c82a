//! A GPU device (`TANDEM<n>`): its context, kernels, registry, memory map, CPU fallback pool
//! and the one stream its graphs run on.

use super::api::{DeviceInfo, DevicePtr, GpuError, GpuResult, LaunchConfig};
use super::exec::{self, GpuPlan, GpuStep};
use super::kernels::Kernels;
use super::memory::{DeviceAlloc, MemKind, MemoryMap, PinnedAlloc};
use super::registry::{LaunchCtx, Node, Registry, Scratch};
use super::safe::{Context, GraphExec, KernelArgs, Stream};
use super::{GpuBackend, KernelCache};
use crate::config::Config;
use crate::executor::ExecError;
use crate::stats::{DeviceGraph, GraphStats};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tandem_graph::{Graph, Tensor, TensorId};
use tandem_ops::{CpuContext, Srcs};

/// Plans kept per device before the cache is cleared.
const PLAN_CACHE_CAP: usize = 256;

pub struct GpuDevice {
    index: usize,
    name: String,
    ctx: Arc<Context>,
    kernels: Kernels,
    registry: Registry,
    mem: Arc<MemoryMap>,
    cpu: CpuContext,
    exec: Mutex<ExecState>,
}

/// Threads and 16-byte loads per thread of `tandem_read_probe` (`TANDEM_READ_PROBE_THREADS`,
/// `TANDEM_READ_PROBE_UNROLL` of copy.hip).
const READ_PROBE_THREADS: u32 = 256;
const READ_PROBE_UNROLL: usize = 4;

struct ExecState {
    stream: Stream,
    scratch: Scratch,
    staging: Option<PinnedAlloc>,
    plans: HashMap<u64, Arc<GpuPlan>>,
    /// By node index of the graph running: the stream's launch count once the node's work was
    /// queued (`Stream::launches`), for `GpuPlan::ids_writer` and `GpuPlan::act_writer`.
    queued_at: Vec<u64>,
    /// By plan key: the graph last run with that plan, and its device graph once it came again
    /// unchanged (`GpuDevice::run_as_device_graph`).
    graphs: HashMap<u64, LastGraph>,
}

/// Runs in a row, launch by launch, of one unchanged graph before the next is captured
/// ([`GpuDevice::run_as_device_graph`]). A capture costs more than the launches it records (the
/// driver instantiates the graph), so a graph is captured only once it has come back twice: a
/// caller that runs each graph twice and then moves on (as `tandem perf-ops` does with its
/// copies) paid a capture every other run and never replayed one (H200, a graph of 384 small
/// kernels: 2.69 ms a run against 1.70 launch by launch, docs/performance.md, thirty-eighth
/// record), while a decode step that repeats hundreds of times loses one run launch by launch.
const RUNS_BEFORE_CAPTURE: u32 = 2;

/// The graph last run with one plan ([`ExecState::graphs`]): its tensors and nodes as they were
/// handed over, how often it ran so in a row, and, once it came back often enough, its capture.
struct LastGraph {
    tensors: Vec<Tensor>,
    nodes: Vec<TensorId>,
    /// Runs in a row, launch by launch, of this graph unchanged.
    runs: u32,
    captured: Option<Captured>,
    /// Capturing it failed: it runs launch by launch until it changes.
    failed: bool,
}

/// A graph's kernels captured into a device graph, with what its replays report.
struct Captured {
    exec: GraphExec,
    /// The scratch generation its launches were given memory from (`Scratch::generation`).
    scratch_generation: u64,
    gpu_dispatches: usize,
}

impl LastGraph {
    fn same(&self, g: &Graph) -> bool {
        self.nodes == g.nodes && self.tensors == g.tensors
    }
}

/// Device-to-device copies queued ahead of a timed stretch ([`GpuDevice::compute_timed`]): `times`
/// copies of `bytes` from `src` to `dst`, which keep the device busy while the host queues what
/// is timed behind them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Runway {
    pub dst: DevicePtr,
    pub src: DevicePtr,
    pub bytes: usize,
    pub times: usize,
}

impl Runway {
    /// Queues the copies on `stream`.
    ///
    /// # Safety
    /// `src .. src + bytes` and `dst .. dst + bytes` are device memory of the stream's device.
    unsafe fn queue(&self, stream: &Stream) -> GpuResult<()> {
        for _ in 0..self.times {
            // SAFETY: forwarded contract.
            unsafe { stream.copy_dtod_async(self.dst, self.src, self.bytes) }.map_err(|mut e| {
                e.message = format!("runway copy: {}", e.message);
                e
            })?;
        }
        Ok(())
    }
}

/// A timed stretch of work on a stream: device milliseconds between the events around it, host
/// microseconds it took to queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timed {
    pub ms: f32,
    pub queue_us: f64,
}

impl GpuDevice {
    /// Opens device `ordinal` of `backend` as `TANDEM<index>`.
    pub fn new(backend: &GpuBackend, ordinal: usize, index: usize, threads: usize) -> GpuResult<GpuDevice> {
        let ctx = Context::new(backend.runtime.clone(), ordinal)?;
        let stream = ctx.stream()?;
        let kernels = Kernels::new(ctx.clone(), backend.compiler.clone(), KernelCache::global());
        Ok(GpuDevice {
            index,
            name: format!("TANDEM{index}"),
            kernels,
            registry: Registry::new(Config::get()),
            mem: Arc::new(MemoryMap::default()),
            cpu: CpuContext::new(threads),
            exec: Mutex::new(ExecState {
                stream,
                scratch: Scratch::new(ctx.clone()),
                staging: None,
                plans: HashMap::new(),
                queued_at: Vec::new(),
                graphs: HashMap::new(),
            }),
            ctx,
        })
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn info(&self) -> &DeviceInfo {
        self.ctx.info()
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn cpu(&self) -> &CpuContext {
        &self.cpu
    }

    pub fn memory_map(&self) -> &Arc<MemoryMap> {
        &self.mem
    }

    pub fn description(&self) -> String {
        let i = self.info();
        format!(
            "{} ({}, {} CUs, {} MiB)",
            i.name,
            i.arch,
            i.compute_units,
            i.total_memory >> 20
        )
    }

    /// (free, total) device memory.
    pub fn memory(&self) -> (u64, u64) {
        self.ctx
            .mem_info()
            .unwrap_or((self.info().total_memory, self.info().total_memory))
    }

    /// Device memory, registered so graphs placed in it are recognised.
    pub fn alloc(&self, len: usize) -> GpuResult<DeviceAlloc> {
        DeviceAlloc::new(&self.ctx, &self.mem, len)
    }

    /// Pinned host memory mapped into the device, registered likewise.
    pub fn alloc_pinned(&self, len: usize) -> GpuResult<PinnedAlloc> {
        PinnedAlloc::new(&self.ctx, &self.mem, len)
    }

    /// Where `addr..addr+len` lives for this device.
    pub fn kind_of(&self, addr: usize, len: usize) -> MemKind {
        self.mem.kind(addr, len)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ExecState> {
        self.exec.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Copies host bytes to device memory and waits.
    ///
    /// # Safety
    /// `dst..dst+src.len()` is device memory of this device.
    pub unsafe fn write(&self, dst: DevicePtr, src: &[u8]) -> GpuResult<()> {
        let st = self.state();
        // SAFETY: forwarded contract; `src` stays borrowed until the sync.
        unsafe { st.stream.copy_htod_async(dst, src.as_ptr(), src.len())? };
        st.stream.synchronize()
    }

    /// Copies device memory to host bytes and waits.
    ///
    /// # Safety
    /// `src..src+dst.len()` is device memory of this device.
    pub unsafe fn read(&self, src: DevicePtr, dst: &mut [u8]) -> GpuResult<()> {
        let st = self.state();
        // SAFETY: forwarded contract; `dst` stays borrowed until the sync.
        unsafe { st.stream.copy_dtoh_async(dst.as_mut_ptr(), src, dst.len())? };
        st.stream.synchronize()
    }

    /// Copies between two device ranges and waits.
    ///
    /// # Safety
    /// Both ranges are device memory of this device.
    pub unsafe fn copy(&self, dst: DevicePtr, src: DevicePtr, bytes: usize) -> GpuResult<()> {
        let st = self.state();
        self.ctx.bind()?;
        // SAFETY: forwarded contract.
        unsafe { st.stream.copy_dtod_async(dst, src, bytes)? };
        st.stream.synchronize()
    }

    /// Fills a device range and waits.
    ///
    /// # Safety
    /// The range is device memory of this device.
    pub unsafe fn memset(&self, dst: DevicePtr, value: u8, bytes: usize) -> GpuResult<()> {
        let st = self.state();
        self.ctx.bind()?;
        // SAFETY: forwarded contract.
        unsafe { st.stream.memset_async(dst, value, bytes)? };
        st.stream.synchronize()
    }

    pub fn synchronize(&self) -> GpuResult<()> {
        self.state().stream.synchronize()
    }

    /// Whether a kernel registration takes `node` (ignoring where its memory is).
    pub fn has_kernel(&self, node: &Tensor, srcs: &Srcs) -> bool {
        self.registry.choose(&Node { dst: node, srcs: *srcs }, None).is_some()
    }

    /// Honest `supports_op`: a kernel takes the node, or the CPU fallback (which this device runs
    /// itself) does.
    pub fn supports(&self, node: &Tensor, srcs: &Srcs) -> bool {
        self.has_kernel(node, srcs) || tandem_ops::cpu::check(node, srcs).is_ok()
    }

    /// Whether this device can run a repeated graph as a device graph (its runtime has them).
    pub fn has_device_graphs(&self) -> bool {
        self.state().stream.has_graphs()
    }

    /// The plan `compute` would use for `g` as it is placed now.
    pub fn plan(&self, g: &Graph) -> Result<GpuPlan, ExecError> {
        let kinds = exec::tensor_kinds(g, &self.mem);
        exec::plan(g, &kinds, &self.registry, false)
    }

    /// Runs `g`, whose tensors live in this device's allocations or in host memory, and waits
    /// for it. A graph that cannot be planned fails before anything runs.
    ///
    /// # Safety
    /// Every tensor's `data` addresses `nbytes()` bytes of the memory it claims to be in, valid
    /// for the call and used by nobody else meanwhile.
    pub unsafe fn compute(&self, g: &Graph) -> Result<GraphStats, ExecError> {
        // SAFETY: forwarded contract.
        unsafe { self.compute_with(g, None) }.map(|(stats, _)| stats)
    }

    /// [`Self::compute`], and with `timing` the device time in milliseconds between events
    /// recorded before the first step and after the last (after the optional runway copy).
    ///
    /// # Safety
    /// As [`Self::compute`]; a runway's ranges are device memory of this device, unused by `g`.
    unsafe fn compute_with(
        &self,
        g: &Graph,
        timing: Option<Option<Runway>>,
    ) -> Result<(GraphStats, Option<f32>), ExecError> {
        // Failures of the graph as a whole (binding the device, the final wait) name no node.
        let other = |reason: String| ExecError::Other {
            index: 0,
            node: "(whole graph)".into(),
            reason,
        };
        let events = match timing {
            Some(_) => Some((
                self.ctx.event().map_err(|e| other(e.to_string()))?,
                self.ctx.event().map_err(|e| other(e.to_string()))?,
            )),
            None => None,
        };
        let t0 = Instant::now();
        let cfg = Config::get();
        let mut stats = GraphStats {
            nodes: g.nodes.len(),
            ..Default::default()
        };
        let mut st = self.state();
        self.ctx.bind().map_err(|e| other(e.to_string()))?;
        let kinds = exec::tensor_kinds(g, &self.mem);
        let key = exec::plan_key(g, &kinds);
        let plan = match st.plans.get(&key) {
            Some(p) => {
                stats.plan_cached = true;
                p.clone()
            }
            None => {
                let p = Arc::new(exec::plan(g, &kinds, &self.registry, cfg.log_dispatch)?);
                if st.plans.len() >= PLAN_CACHE_CAP {
                    st.plans.clear();
                }
                st.plans.insert(key, p.clone());
                p
            }
        };
        stats.noop_nodes = plan.noops;
        stats.plan_us = t0.elapsed().as_micros() as u64;
        let t1 = Instant::now();
        if let Some(Some(runway)) = timing {
            // SAFETY: forwarded contract.
            unsafe { runway.queue(&st.stream) }.map_err(|e| other(e.to_string()))?;
        }
        if let Some((start, _)) = &events {
            start.record(&st.stream).map_err(|e| other(e.to_string()))?;
        }
        // From the first step, as `events_around` counts it: the runway's copies are not part of
        // what the host takes to queue the graph.
        let t2 = Instant::now();
        let whole_kernels = plan.steps.iter().all(|s| matches!(s, GpuStep::Kernel { .. }));
        let result = if cfg.graphs && whole_kernels && st.stream.has_graphs() {
            self.run_as_device_graph(&mut st, g, &kinds, &plan, key, &mut stats)
        } else {
            self.run(&mut st, g, &kinds, &plan, &mut stats)
        };
        stats.queue_us = t2.elapsed().as_micros() as u64;
        let recorded = events.as_ref().map(|(_, end)| end.record(&st.stream));
        let synced = st.stream.synchronize();
        st.scratch.release_retired();
        result?;
        synced.map_err(|e| other(format!("waiting for the graph: {e}")))?;
        stats.launch_us = t1.elapsed().as_micros() as u64;
        stats.wall_us = t0.elapsed().as_micros() as u64;
        let ms = match (&events, recorded) {
            (Some((start, end)), Some(r)) => {
                r.map_err(|e| other(e.to_string()))?;
                Some(start.elapsed_ms(end).map_err(|e| other(e.to_string()))?)
            }
            _ => None,
        };
        if cfg.stats {
            match ms {
                Some(ms) => eprintln!("tandem: {}: {stats} device_us={:.1}", self.name, ms * 1e3),
                None => eprintln!("tandem: {}: {stats}", self.name),
            }
        }
        Ok((stats, ms))
    }

    /// [`Self::run`] for a plan of kernels only, through a device graph where the same graph
    /// (every tensor and node as before, the scratch memory unchanged) comes again: after
    /// [`RUNS_BEFORE_CAPTURE`] runs in a row launch by launch, the next is captured and launched
    /// as one, and from then on the graph is replayed with one launch.
    /// A graph that cannot be captured runs launch by launch (said once on stderr) until it
    /// changes.
    ///
    /// # Safety
    /// As [`Self::compute`].
    unsafe fn run_as_device_graph(
        &self,
        st: &mut ExecState,
        g: &Graph,
        kinds: &[MemKind],
        plan: &GpuPlan,
        key: u64,
        stats: &mut GraphStats,
    ) -> Result<(), ExecError> {
        let other = |reason: String| ExecError::Other {
            index: 0,
            node: "(whole graph)".into(),
            reason,
        };
        let generation = st.scratch.generation();
        let last = st.graphs.get(&key).filter(|last| last.same(g));
        if let Some(c) = last
            .and_then(|l| l.captured.as_ref())
            .filter(|c| c.scratch_generation == generation)
        {
            // SAFETY: the captured launches are this graph's, with its addresses, which the
            // caller keeps valid (`compute`'s contract); their scratch memory is still current.
            unsafe { c.exec.launch(&st.stream) }.map_err(|e| other(format!("replaying the device graph: {e}")))?;
            stats.gpu_dispatches = c.gpu_dispatches;
            stats.device_graph = Some(DeviceGraph::Replayed);
            return Ok(());
        }
        // Came back often enough (or captured before, with scratch memory since replaced).
        if last.is_some_and(|l| !l.failed && (l.runs >= RUNS_BEFORE_CAPTURE || l.captured.is_some())) {
            // Capture it. Nothing captured runs, so a failed capture leaves only the run launch
            // by launch below.
            let captured = match st.stream.begin_capture() {
                Ok(()) => {
                    let queued = self.run(st, g, kinds, plan, stats);
                    let ended = st.stream.end_capture();
                    match (queued, ended) {
                        (Ok(()), Ok(exec)) => Ok(exec),
                        (Err(e), _) => Err(e.to_string()),
                        (Ok(()), Err(e)) => Err(e.to_string()),
                    }
                }
                Err(e) => Err(e.to_string()),
            };
            let entry = st.graphs.get_mut(&key).expect("looked up above");
            match captured {
                Ok(exec) => {
                    // SAFETY: as the replay above; the scratch buffers it was given stay until
                    // this run's end (`Scratch::release_retired` after the final wait).
                    unsafe { exec.launch(&st.stream) }
                        .map_err(|e| other(format!("launching the captured device graph: {e}")))?;
                    stats.device_graph = Some(DeviceGraph::Captured);
                    // Kept only if every launch took the scratch buffer that stays current; if
                    // it grew meanwhile, the next run captures again.
                    if st.scratch.generation() == generation {
                        entry.captured = Some(Captured {
                            exec,
                            scratch_generation: generation,
                            gpu_dispatches: stats.gpu_dispatches,
                        });
                    }
                    return Ok(());
                }
                Err(reason) => {
                    entry.failed = true;
                    eprintln!(
                        "tandem: {}: this graph of {} nodes runs launch by launch: it could not be captured as a device graph ({reason})",
                        self.name,
                        g.nodes.len()
                    );
                    stats.gpu_dispatches = 0;
                }
            }
        } else if last.is_some() {
            let entry = st.graphs.get_mut(&key).expect("looked up above");
            entry.runs = entry.runs.saturating_add(1);
        } else if let Some(entry) = st.graphs.get_mut(&key) {
            // Another graph with this plan: it takes the place (and the allocations) of the
            // last; the run that queued that one's capture has finished (`compute` waits).
            entry.tensors.clone_from(&g.tensors);
            entry.nodes.clone_from(&g.nodes);
            entry.runs = 1;
            entry.captured = None;
            entry.failed = false;
        } else {
            if st.graphs.len() >= PLAN_CACHE_CAP {
                st.graphs.clear();
            }
            st.graphs.insert(
                key,
                LastGraph {
                    tensors: g.tensors.clone(),
                    nodes: g.nodes.clone(),
                    runs: 1,
                    captured: None,
                    failed: false,
                },
            );
        }
        self.run(st, g, kinds, plan, stats)
    }

    /// # Safety
    /// As [`Self::compute`].
    unsafe fn run(
        &self,
        st: &mut ExecState,
        g: &Graph,
        kinds: &[MemKind],
        plan: &GpuPlan,
        stats: &mut GraphStats,
    ) -> Result<(), ExecError> {
        st.queued_at.clear();
        st.queued_at.resize(g.nodes.len(), 0);
        for step in &plan.steps {
            match step {
                GpuStep::Kernel { index, reg, fused } => {
                    // The ids are in place when no node of the graph writes them, or when the
                    // kernel that last did has finished before this one can start.
                    let ready = |writers: &[Option<usize>]| match writers.get(*index).copied().flatten() {
                        Some(w) => st.stream.finished_before_next(st.queued_at[w]),
                        None => true,
                    };
                    let ids_ready = ready(&plan.ids_writer);
                    // The same for a matmul's activations (unless TANDEM_EARLY_ACTIVATIONS=0 has
                    // every kernel wait before it reads them, as when the kernel ahead writes them).
                    let act_ready = ready(&plan.act_writer) && Config::get().early_activations;
                    let lc = LaunchCtx {
                        kernels: &self.kernels,
                        stream: &st.stream,
                        info: self.ctx.info(),
                        scratch: &st.scratch,
                        settled: plan.settled.get(*index).copied().unwrap_or(false),
                        ids_ready,
                        act_ready,
                    };
                    // SAFETY: forwarded contract; kinds were read from this device's map.
                    unsafe { exec::launch_step(&lc, g, kinds, &self.registry, *index, *reg, *fused)? };
                    stats.gpu_dispatches += 1;
                    let at = st.stream.launches();
                    st.queued_at[*index] = at;
                    if *fused {
                        st.queued_at[*index + 1] = at;
                    }
                }
                GpuStep::Cpu { range } => {
                    // SAFETY: forwarded contract.
                    unsafe { self.run_group(st, g, kinds, range.clone(), stats)? };
                    let at = st.stream.launches();
                    st.queued_at[range.clone()].fill(at);
                }
            }
        }
        Ok(())
    }

    /// # Safety
    /// As [`Self::compute`].
    unsafe fn run_group(
        &self,
        st: &mut ExecState,
        g: &Graph,
        kinds: &[MemKind],
        range: std::ops::Range<usize>,
        stats: &mut GraphStats,
    ) -> Result<(), ExecError> {
        let first = range.start;
        let fail = |e: GpuError| ExecError::Other {
            index: first,
            node: g.tensor(g.nodes[first]).name.clone(),
            reason: format!("CPU fallback copies: {e}"),
        };
        let (intervals, total) = exec::stage_group(g, kinds, range.clone());
        if st.staging.as_ref().is_none_or(|s| s.len() < total) {
            // The old staging buffer may still feed queued uploads: wait before freeing it.
            st.stream.synchronize().map_err(fail)?;
            st.staging = None;
            let size = total.next_power_of_two().max(1 << 20);
            st.staging = Some(self.alloc_pinned(size).map_err(fail)?);
        }
        let base = st.staging.as_ref().map(|s| s.host_ptr() as usize).unwrap_or(0);
        for iv in intervals.iter().filter(|iv| iv.download) {
            // SAFETY: the interval is device memory (its tensors are); staging holds `total`
            // bytes and is not touched by the CPU until the sync below.
            unsafe {
                st.stream
                    .copy_dtoh_async(
                        (base + iv.staging) as *mut u8,
                        DevicePtr(iv.start as u64),
                        iv.end - iv.start,
                    )
                    .map_err(fail)?
            };
        }
        st.stream.synchronize().map_err(fail)?;
        // SAFETY: downloads are complete, GPU work before this group is finished, and the
        // staging buffer is ours alone until the uploads below are queued.
        unsafe { exec::run_cpu_group(&self.cpu, g, kinds, range, &intervals, base, stats)? };
        for iv in intervals.iter().filter(|iv| iv.upload) {
            // SAFETY: staging stays untouched until the stream has passed these copies (the next
            // group synchronizes before writing it).
            unsafe {
                st.stream
                    .copy_htod_async(
                        DevicePtr(iv.start as u64),
                        (base + iv.staging) as *const u8,
                        iv.end - iv.start,
                    )
                    .map_err(fail)?
            };
        }
        Ok(())
    }

    /// As [`Self::compute`], plus the device time of the graph in milliseconds: events recorded
    /// on the stream before the first step and after the last one (launch gaps and CPU-fallback
    /// groups between them count; planning does not).
    ///
    /// `runway`: device-to-device copies queued before the start event ([`Runway`]). They keep
    /// the device busy while the host queues the graph's launches, so a graph of short kernels
    /// is timed without the host's launch latency in front of its first kernel, and, where the
    /// runway outlasts the queueing (`GraphStats::queue_us`), without the host's pace between
    /// them (the copy also evicts the previous run's data from the cache).
    ///
    /// # Safety
    /// As [`Self::compute`]; the runway's ranges are device memory of this device, unused by `g`.
    pub unsafe fn compute_timed(&self, g: &Graph, runway: Option<Runway>) -> Result<(GraphStats, f32), ExecError> {
        // SAFETY: forwarded contract.
        let (stats, ms) = unsafe { self.compute_with(g, Some(runway)) }?;
        Ok((stats, ms.unwrap_or(0.0)))
    }

    /// What `queue` puts on the stream took: device milliseconds from events recorded around
    /// it, and host microseconds to queue it; `before` is a runway queued ahead of the start
    /// event (as in [`Self::compute_timed`]).
    ///
    /// # Safety
    /// `before`'s ranges are device memory of this device; `queue` queues only work whose
    /// contract its caller meets.
    unsafe fn events_around(
        &self,
        before: Option<Runway>,
        queue: impl FnOnce(&Stream) -> GpuResult<()>,
    ) -> GpuResult<Timed> {
        let start = self.ctx.event()?;
        let end = self.ctx.event()?;
        let st = self.state();
        self.ctx.bind()?;
        if let Some(runway) = before {
            // SAFETY: forwarded contract.
            unsafe { runway.queue(&st.stream) }?;
        }
        start.record(&st.stream)?;
        let t0 = Instant::now();
        queue(&st.stream)?;
        let queue_us = t0.elapsed().as_secs_f64() * 1e6;
        end.record(&st.stream)?;
        st.stream.synchronize()?;
        Ok(Timed {
            ms: start.elapsed_ms(&end)?,
            queue_us,
        })
    }

    /// Device time in milliseconds of one device-to-device copy of `bytes`, from events recorded
    /// around it on the stream (the copy rate benchmarks compare with).
    ///
    /// # Safety
    /// Both ranges are device memory of this device.
    pub unsafe fn copy_timed(&self, dst: DevicePtr, src: DevicePtr, bytes: usize) -> GpuResult<f32> {
        // SAFETY: forwarded contract.
        unsafe { self.events_around(None, |stream| stream.copy_dtod_async(dst, src, bytes)) }.map(|t| t.ms)
    }

    /// Device time in milliseconds of reading the `bytes` at `src` once with `tandem_read_probe`
    /// (16-byte streaming loads, as a weight-streaming kernel reads), from events around the one
    /// launch, behind `runway` as in [`Self::compute_timed`]: what a kernel that must read those
    /// bytes can take at best. The runway's destination also serves as the probe's scratch word.
    ///
    /// # Safety
    /// `src .. src + bytes` and the runway's ranges are device memory of this device.
    pub unsafe fn read_timed(&self, src: DevicePtr, bytes: usize, runway: Runway) -> Result<f32, String> {
        // SAFETY: forwarded contract.
        unsafe { self.read_chain_timed(&[src], bytes, runway) }.map(|t| t.ms)
    }

    /// [`Self::read_timed`] of the `bytes` at each of `srcs` in turn, back to back in one timed
    /// stretch (as dependent launches where the device has them, so each read may start before
    /// the one ahead ends): the floor for kernels that read those bytes one after another. Also
    /// the host time it took to queue them ([`Timed`]).
    ///
    /// # Safety
    /// Each `src .. src + bytes` and the runway's ranges are device memory of this device, and
    /// nothing writes the sources meanwhile.
    pub unsafe fn read_chain_timed(&self, srcs: &[DevicePtr], bytes: usize, runway: Runway) -> Result<Timed, String> {
        let f = self
            .kernels
            .function("copy", "tandem_read_probe")
            .map_err(|e| e.to_string())?;
        let n16 = bytes / 16;
        let blocks = n16.div_ceil(READ_PROBE_THREADS as usize * READ_PROBE_UNROLL).max(1);
        let grid_x = u32::try_from(blocks).map_err(|_| format!("read probe: {bytes} bytes is too many"))?;
        let cfg = LaunchConfig {
            grid: [grid_x, 1, 1],
            block: [READ_PROBE_THREADS, 1, 1],
            shared_bytes: 0,
        };
        let queue = |stream: &Stream| -> GpuResult<()> {
            for &src in srcs {
                let mut args = KernelArgs::new();
                args.push(src).push(n16 as i64).push(0x9e37_79b9u32).push(runway.dst);
                // SAFETY: the kernel takes (const uint4*, i64, u32, u32*) as pushed; it reads the
                // n16 whole 16-byte words from src (inside the caller's range, written by nothing
                // queued) before its tandem_grid_wait, and after it may write 4 bytes at the
                // runway's destination, which holds its bytes (>= 4).
                unsafe { stream.launch_dependent(&f, cfg, &mut args) }?;
            }
            Ok(())
        };
        // SAFETY: the runway is the caller's.
        unsafe { self.events_around(Some(runway), queue) }.map_err(|e| e.to_string())
    }

    /// Runs `g` whose tensors all live in `host` (an image of `host.len()` bytes at host address
    /// `host_base`, as the op harness lays it out): copies the image to device memory, runs the
    /// graph there, and copies it back.
    ///
    /// # Safety
    /// Every tensor's `data` lies in `host_base..host_base + host.len()` with its bytes.
    pub unsafe fn compute_mirrored(&self, g: &Graph, host: &mut [u8], host_base: usize) -> Result<GraphStats, String> {
        let dev = self.alloc(host.len()).map_err(|e| e.to_string())?;
        // SAFETY: the allocation holds `host.len()` bytes.
        unsafe { self.write(dev.ptr(), host) }.map_err(|e| e.to_string())?;
        let mut moved = g.clone();
        let base = dev.ptr().0 as usize;
        for t in moved.tensors.iter_mut() {
            if t.data != 0 {
                t.data = t.data - host_base + base;
            }
        }
        // SAFETY: every address now points into `dev` at the same offset as in the image.
        let stats = unsafe { self.compute(&moved) }.map_err(|e| e.to_string())?;
        // SAFETY: as the write above.
        unsafe { self.read(dev.ptr(), host) }.map_err(|e| e.to_string())?;
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::{READ_PROBE_THREADS, READ_PROBE_UNROLL};

    #[test]
    fn read_probe_geometry_matches_its_kernel() {
        let src = tandem_kernels_hip::find("copy").unwrap().source;
        for text in [
            format!("#define TANDEM_READ_PROBE_THREADS {READ_PROBE_THREADS}\n"),
            format!("#define TANDEM_READ_PROBE_UNROLL {READ_PROBE_UNROLL}\n"),
        ] {
            assert!(src.contains(&text), "{text}");
        }
    }
}
