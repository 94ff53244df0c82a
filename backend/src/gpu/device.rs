//! A GPU device (`TANDEM<n>`): its context, kernels, registry, memory map, CPU fallback pool
//! and the one stream its graphs run on.

use super::api::{DeviceInfo, DevicePtr, GpuError, GpuResult, LaunchConfig};
use super::exec::{self, GpuPlan, GpuStep};
use super::kernels::Kernels;
use super::memory::{DeviceAlloc, MemKind, MemoryMap, PinnedAlloc};
use super::profile::Profiler;
use super::registry::{LaunchCtx, Node, Registration, Registry, Scratch};
use super::safe::{Context, DeviceBuffer, Event, GraphExec, KernelArgs, Stream};
use super::split::{self, Observation, ShapeReport, ShareMode, SplitKey, SplitScheduler};
use super::ways::{Way, WayChooser};
use super::{GpuBackend, KernelCache};
use crate::config::{Config, OffloadExec};
use crate::executor::ExecError;
use crate::plan::GraphTag;
use crate::stats::{DeviceGraph, GraphStats};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;
use tandem_graph::{Graph, Op, Tensor, TensorId};
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
    /// The CPU fallback's and the split nodes' worker pool; replaced whole when the host asks
    /// for another thread count (a graph holds its own reference).
    cpu: RwLock<Arc<CpuContext>>,
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
    /// What the last tagged graph's run derived from it ([`GraphTag`]).
    tagged: Option<TaggedGraph>,
    /// By plan key of a graph with split nodes: its plan with every split node a kernel over
    /// the bus ([`Way::Gpu`]).
    gpu_plans: HashMap<u64, Arc<GpuPlan>>,
    /// Which way each graph with split nodes runs, tried on the graph itself.
    ways: WayChooser,
    /// Whether graphs with split nodes try both ways while shares are online
    /// ([`GpuDevice::set_way_trials`]).
    way_trials: bool,
    /// By node index of the graph running: the stream's launch count once the node's work was
    /// queued (`Stream::launches`), for `GpuPlan::ids_writer` and `GpuPlan::act_writer`.
    queued_at: Vec<u64>,
    /// By plan key and tensor addresses: the graph last run with that plan there, and its device
    /// graph once it came again unchanged (`GpuDevice::run_as_device_graph`).
    graphs: HashMap<u64, LastGraph>,
    /// Split nodes' shares, learnt per shape.
    split: SplitScheduler,
    /// Device copy of the weight of the staged matmul running (`GpuStep::Staged`).
    weight_stage: Option<DeviceBuffer>,
    /// Device copies of the graph's inputs in pinned memory (`GpuPlan::inputs`). Grows only;
    /// device graphs captured with the old one are dropped when it does.
    input_stage: Option<DeviceBuffer>,
    /// Events of the split nodes of the graph running (by split index in the run): after the
    /// activations' download, before and after the GPU's rows.
    split_events: Vec<[Event; 3]>,
    /// The split calls of the graph running whose GPU time is read once it has finished.
    split_pending: Vec<PendingSplit>,
    /// Device graphs launched by the graph running but not kept: dropped after its final wait.
    retired_graphs: Vec<Segment>,
    /// The registration that takes a split node's GPU part, by the part's shape and alignment.
    split_regs: HashMap<u64, Option<usize>>,
    /// `TANDEM_PROFILE`: step times of every graph, launch by launch ([`super::profile`]).
    profile: Option<Profiler>,
}

/// A tagged graph's memory kinds and plan key, valid for that tag while the memory map's
/// generation is the one they were looked up at.
struct TaggedGraph {
    tag: GraphTag,
    generation: u64,
    kinds: Arc<Vec<MemKind>>,
    key: u64,
}

/// The sources of a split node's GPU part: its weight rows, the activations, the expert ids.
fn part_srcs<'a>(w: &'a Tensor, x: &'a Tensor, ids: &'a Option<Tensor>) -> Srcs<'a> {
    let mut srcs: Srcs<'a> = [None; tandem_graph::MAX_SRC];
    srcs[0] = Some(w);
    srcs[1] = Some(x);
    srcs[2] = ids.as_ref();
    srcs
}

/// One split call waiting for its GPU time (`ExecState::split_pending`).
struct PendingSplit {
    key: SplitKey,
    events: usize,
    gpu_rows: usize,
    cpu_rows: usize,
    cpu_s: f64,
}

/// Runs in a row, launch by launch, of one unchanged graph before the next is captured
/// ([`GpuDevice::run_as_device_graph`]). A capture costs more than the launches it records (the
/// driver instantiates the graph), so a graph is captured only once it has come back twice: a
/// caller that runs each graph twice and then moves on (as `tandem perf-ops` does with its
/// copies) paid a capture every other run and never replayed one (H200, a graph of 384 small
/// kernels: 2.69 ms a run against 1.70 launch by launch, docs/performance.md, thirty-eighth
/// record), while a decode step that repeats hundreds of times loses one run launch by launch.
const RUNS_BEFORE_CAPTURE: u32 = 2;

/// The graph last run with one plan ([`ExecState::graphs`]): its nodes and its tensors'
/// addresses as they were handed over, how often it ran so in a row, and, once it came back
/// often enough, its capture. The plan key (the graph's structure: every tensor's op, type,
/// extents, strides, parameters and sources, and where each lies) is part of the map's key, so
/// the addresses are what is left to compare (a thousand whole tensors took 15 µs a run).
struct LastGraph {
    data: Vec<usize>,
    nodes: Vec<TensorId>,
    /// Runs in a row, launch by launch, of this graph unchanged.
    runs: u32,
    captured: Option<Captured>,
    /// Capturing it failed: it runs launch by launch until it changes.
    failed: bool,
}

/// A graph's kernels captured into device graphs: one for a plan of kernels only, one per
/// stretch of kernels between split nodes otherwise.
struct Captured {
    segments: Vec<Segment>,
    /// The scratch generation its launches were given memory from (`Scratch::generation`).
    scratch_generation: u64,
}

/// One stretch of a plan's kernel steps captured as a device graph, and how many kernel
/// dispatches its replay stands for.
struct Segment {
    exec: GraphExec,
    gpu_dispatches: usize,
}

/// How [`GpuDevice::run_with`] queues stretches of kernel steps.
enum Graphs<'a> {
    /// Launch by launch.
    Off,
    /// Each stretch captured into a device graph (pushed here) and launched; the first capture
    /// that fails leaves its reason here and the rest of the run launch by launch.
    Capture {
        segments: &'a mut Vec<Segment>,
        failure: &'a mut Option<String>,
    },
    /// Each stretch replayed from its device graph, in order.
    Replay(&'a [Segment]),
}

impl LastGraph {
    fn same(&self, g: &Graph) -> bool {
        self.nodes == g.nodes
            && self.data.len() == g.tensors.len()
            && self.data.iter().zip(&g.tensors).all(|(&d, t)| d == t.data)
    }

    fn addresses(g: &Graph) -> Vec<usize> {
        g.tensors.iter().map(|t| t.data).collect()
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
            cpu: RwLock::new(Arc::new(CpuContext::new(threads))),
            exec: Mutex::new(ExecState {
                stream,
                scratch: Scratch::new(ctx.clone()),
                staging: None,
                plans: HashMap::new(),
                tagged: None,
                gpu_plans: HashMap::new(),
                ways: WayChooser::new(),
                way_trials: true,
                queued_at: Vec::new(),
                graphs: HashMap::new(),
                split: SplitScheduler::new(
                    Config::get().split_share.map_or(ShareMode::Auto, ShareMode::Fixed),
                    Config::get().trace_split,
                ),
                split_events: Vec::new(),
                split_pending: Vec::new(),
                retired_graphs: Vec::new(),
                split_regs: HashMap::new(),
                weight_stage: None,
                input_stage: None,
                profile: Config::get().profile.map(Profiler::new),
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

    /// What a launcher gets for a kernel queued on `st`'s stream ([`LaunchCtx`]'s flags).
    fn launch_ctx<'a>(&'a self, st: &'a ExecState, settled: bool, ids_ready: bool, act_ready: bool) -> LaunchCtx<'a> {
        LaunchCtx {
            kernels: &self.kernels,
            stream: &st.stream,
            info: self.ctx.info(),
            scratch: &st.scratch,
            settled,
            ids_ready,
            act_ready,
        }
    }

    /// The current worker pool of the CPU fallback and the split nodes.
    pub fn cpu(&self) -> Arc<CpuContext> {
        self.cpu.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Resizes the worker pool to `threads` (0 = one per core); a no-op when the size matches.
    pub fn set_threads(&self, threads: usize) {
        let want = if threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            threads
        };
        if self.cpu().n_threads() != want {
            *self.cpu.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(CpuContext::new(want));
        }
    }

    /// How split nodes choose their GPU share from now on (`TANDEM_SPLIT_SHARE` at start).
    pub fn set_split_share(&self, mode: ShareMode) {
        self.state().split.set_mode(mode);
    }

    /// Whether graphs with split nodes are also tried with the GPU reading every host weight
    /// alone, and run the faster way (on by default, while shares are online; a fixed share
    /// always splits). Tools that measure the split nodes themselves turn it off.
    pub fn set_way_trials(&self, on: bool) {
        self.state().way_trials = on;
    }

    /// Every split shape run so far: its share and the two sides' rates.
    pub fn split_report(&self) -> Vec<ShapeReport> {
        self.state().split.report()
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
        exec::plan(
            g,
            &kinds,
            &self.registry,
            false,
            Config::get().offload_exec == OffloadExec::Split,
        )
    }

    /// Runs `g`, whose tensors live in this device's allocations or in host memory, and waits
    /// for it. A graph that cannot be planned fails before anything runs.
    ///
    /// # Safety
    /// Every tensor's `data` addresses `nbytes()` bytes of the memory it claims to be in, valid
    /// for the call and used by nobody else meanwhile.
    pub unsafe fn compute(&self, g: &Graph) -> Result<GraphStats, ExecError> {
        // SAFETY: forwarded contract.
        unsafe { self.compute_tagged(g, None) }
    }

    /// [`Self::compute`] for a tagged graph ([`GraphTag`]): the graph of the last call with the
    /// same tag again, whose memory kinds and plan key are not looked up again while no
    /// allocation has come or gone.
    ///
    /// # Safety
    /// As [`Self::compute`]; two calls with one tag pass equal graphs.
    pub unsafe fn compute_tagged(&self, g: &Graph, tag: Option<GraphTag>) -> Result<GraphStats, ExecError> {
        // Under `TANDEM_STATS` the statistics line also says the device time from the first
        // step to the last (`device_us`): against `wall_us` it shows how much of a graph's
        // time the GPU was working or waiting inside it.
        let timing = Config::get().stats.then_some(None);
        // SAFETY: forwarded contract.
        unsafe { self.compute_with(g, timing, tag) }.map(|(stats, _)| stats)
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
        tag: Option<GraphTag>,
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
        let generation = self.mem.generation();
        let (kinds, key) = match (&st.tagged, tag) {
            (Some(t), Some(tag)) if t.tag == tag && t.generation == generation => (t.kinds.clone(), t.key),
            _ => {
                let kinds = Arc::new(exec::tensor_kinds(g, &self.mem));
                let key = exec::plan_key(g, &kinds);
                st.tagged = tag.map(|tag| TaggedGraph {
                    tag,
                    generation,
                    kinds: kinds.clone(),
                    key,
                });
                (kinds, key)
            }
        };
        let split_mode = cfg.offload_exec == OffloadExec::Split;
        let mut plan = match st.plans.get(&key) {
            Some(p) => {
                stats.plan_cached = true;
                p.clone()
            }
            None => {
                let p = Arc::new(exec::plan(g, &kinds, &self.registry, cfg.log_dispatch, split_mode)?);
                if st.plans.len() >= PLAN_CACHE_CAP {
                    st.plans.clear();
                }
                st.plans.insert(key, p.clone());
                p
            }
        };
        // The graph's tensor addresses: device graphs are kept per plan and addresses (a
        // hybrid model's layers, each a graph of its own between ggml's CPU work, share a plan),
        // and the way chooser counts the address sets of a plan.
        // Hashed only where needed (the trials below, device graphs), once.
        let addresses = || {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            key.hash(&mut h);
            for t in &g.tensors {
                t.data.hash(&mut h);
            }
            h.finish()
        };
        // A graph with split nodes runs them split or with the GPU alone, whichever the trials
        // found faster for this plan.
        let choosing = st.way_trials
            && st.split.mode() == ShareMode::Auto
            && plan.steps.iter().any(|s| matches!(s, GpuStep::Split { .. }));
        let mut at = None;
        let way = if choosing {
            st.ways.way(key, *at.insert(addresses()))
        } else {
            Way::Split
        };
        if way == Way::Gpu {
            plan = match st.gpu_plans.get(&key) {
                Some(p) => p.clone(),
                None => {
                    let p = Arc::new(exec::plan(g, &kinds, &self.registry, cfg.log_dispatch, false)?);
                    if st.gpu_plans.len() >= PLAN_CACHE_CAP {
                        st.gpu_plans.clear();
                    }
                    st.gpu_plans.insert(key, p.clone());
                    p
                }
            };
            stats.whole_gpu = true;
        }
        stats.noop_nodes = plan.noops;
        stats.split_refused = plan.split_refused;
        stats.split_refusal = plan.split_refusal;
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
        // Graph inputs in pinned memory that kernels read go down first; the kernels see them as
        // pinned tensors whose device view is the copy.
        let staged_kinds;
        let kinds: &[MemKind] = if plan.inputs.is_empty() {
            &kinds
        } else {
            // SAFETY: forwarded contract: the inputs' host bytes are valid until the graph ends.
            staged_kinds = unsafe { self.stage_inputs(&mut st, g, &kinds, &plan) }?;
            stats.stage_us = (t2.elapsed().as_micros() as u64).max(1);
            &staged_kinds
        };
        // Kernels, and split nodes between them, run through device graphs; a plan with
        // fallback groups or staged weights runs launch by launch.
        let capturable = plan
            .steps
            .iter()
            .all(|s| matches!(s, GpuStep::Kernel { .. } | GpuStep::Split { .. }))
            && plan.steps.iter().any(|s| matches!(s, GpuStep::Kernel { .. }));
        let result = if cfg.graphs && capturable && st.stream.has_graphs() && st.profile.is_none() {
            // Graphs of one plan at other addresses are kept apart, so each can come again, and
            // so are the two ways of one graph.
            let at = at.unwrap_or_else(addresses);
            let graph_key = if way == Way::Gpu {
                at ^ 0x9e37_79b9_7f4a_7c15
            } else {
                at
            };
            self.run_as_device_graph(&mut st, g, kinds, &plan, graph_key, &mut stats)
        } else {
            self.run_with(&mut st, g, kinds, &plan, &mut stats, Graphs::Off)
        };
        stats.queue_us = t2.elapsed().as_micros() as u64;
        let recorded = events.as_ref().map(|(_, end)| end.record(&st.stream));
        let synced = st.stream.synchronize();
        st.scratch.release_retired();
        st.retired_graphs.clear();
        let pending = std::mem::take(&mut st.split_pending);
        result?;
        synced.map_err(|e| other(format!("waiting for the graph: {e}")))?;
        if let Some(p) = st.profile.as_mut() {
            let table = p
                .finish(
                    key,
                    |step| self.step_label(g, &plan, step),
                    |runs| {
                        format!(
                            "tandem: {}: profile of {runs} runs of a graph of {} nodes ({} steps), launch by launch:",
                            self.name,
                            g.nodes.len(),
                            plan.steps.len()
                        )
                    },
                )
                .map_err(|e| other(format!("reading the profile's events: {e}")))?;
            if let Some(t) = table {
                eprintln!("{t}");
            }
        }
        self.observe_splits(&mut st, pending);
        stats.launch_us = t1.elapsed().as_micros() as u64;
        stats.wall_us = t0.elapsed().as_micros() as u64;
        if choosing {
            if let Some(d) = st.ways.record(key, way, t0.elapsed().as_secs_f64()) {
                if cfg.trace_split {
                    eprintln!("tandem: {}: {d}", self.name);
                }
            }
        }
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

    /// [`Self::run_with`] through device graphs where the same graph (every tensor and node as
    /// before, the scratch memory unchanged) comes again: after [`RUNS_BEFORE_CAPTURE`] runs in a
    /// row launch by launch, the next is captured and launched, and from then on replayed. A plan
    /// of kernels only is one device graph, one launch; a plan with split nodes is one device
    /// graph per stretch of kernels between them, the split nodes running in between as always.
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
        let generation = st.scratch.generation();
        let last = st.graphs.get(&key).filter(|last| last.same(g));
        let replay = last
            .and_then(|l| l.captured.as_ref())
            .is_some_and(|c| c.scratch_generation == generation);
        if replay {
            let entry = st.graphs.get_mut(&key).expect("looked up above");
            let c = entry.captured.take().expect("checked above");
            // SAFETY: the captured launches are this graph's, with its addresses, which the
            // caller keeps valid (`compute`'s contract); their scratch memory is still current.
            let ran = unsafe { self.run_with(st, g, kinds, plan, stats, Graphs::Replay(&c.segments)) };
            st.graphs.get_mut(&key).expect("kept").captured = Some(c);
            ran?;
            stats.device_graph = Some(DeviceGraph::Replayed);
            return Ok(());
        }
        // Came back often enough (or captured before, with scratch memory since replaced).
        if last.is_some_and(|l| !l.failed && (l.runs >= RUNS_BEFORE_CAPTURE || l.captured.is_some())) {
            let mut segments = Vec::new();
            let mut failure = None;
            // SAFETY: forwarded contract.
            unsafe {
                self.run_with(
                    st,
                    g,
                    kinds,
                    plan,
                    stats,
                    Graphs::Capture {
                        segments: &mut segments,
                        failure: &mut failure,
                    },
                )
            }?;
            let entry = st.graphs.get_mut(&key).expect("looked up above");
            entry.captured = None;
            match failure {
                None => {
                    stats.device_graph = Some(DeviceGraph::Captured);
                    // Kept only if every launch took the scratch buffer that stays current; if
                    // it grew meanwhile, the next run captures again. The old captures, if any,
                    // are dropped after this run's final wait (`compute` waits before returning
                    // and the entry outlives it).
                    if st.scratch.generation() == generation {
                        entry.captured = Some(Captured {
                            segments,
                            scratch_generation: generation,
                        });
                    } else {
                        st.retired_graphs.extend(segments);
                    }
                }
                Some(reason) => {
                    entry.failed = true;
                    st.retired_graphs.extend(segments);
                    eprintln!(
                        "tandem: {}: this graph of {} nodes runs launch by launch: it could not be captured as a device graph ({reason})",
                        self.name,
                        g.nodes.len()
                    );
                }
            }
            return Ok(());
        } else if last.is_some() {
            let entry = st.graphs.get_mut(&key).expect("looked up above");
            entry.runs = entry.runs.saturating_add(1);
        } else if let Some(entry) = st.graphs.get_mut(&key) {
            // Another graph with this plan and addresses: it takes the place (and the
            // allocations) of the last; the run that queued that one's capture has finished
            // (`compute` waits).
            entry.data = LastGraph::addresses(g);
            entry.nodes.clone_from(&g.nodes);
            entry.runs = 1;
            entry.captured = None;
            entry.failed = false;
        } else {
            if st.graphs.len() >= PLAN_CACHE_CAP {
                // Graphs that never came again go first; the captured ones (finished: `compute`
                // waits for every run) only when they alone fill the cache.
                st.graphs.retain(|_, l| l.captured.is_some());
                if st.graphs.len() >= PLAN_CACHE_CAP {
                    st.graphs.clear();
                }
            }
            st.graphs.insert(
                key,
                LastGraph {
                    data: LastGraph::addresses(g),
                    nodes: g.nodes.clone(),
                    runs: 1,
                    captured: None,
                    failed: false,
                },
            );
        }
        // SAFETY: forwarded contract.
        unsafe { self.run_with(st, g, kinds, plan, stats, Graphs::Off) }
    }

    /// Runs the plan's steps in order; with `graphs` other than `Off` each stretch of kernel steps
    /// is captured into a device graph and launched, or replayed from one.
    ///
    /// # Safety
    /// As [`Self::compute`]; a replay's segments were captured from this plan on this graph.
    unsafe fn run_with(
        &self,
        st: &mut ExecState,
        g: &Graph,
        kinds: &[MemKind],
        plan: &GpuPlan,
        stats: &mut GraphStats,
        mut graphs: Graphs<'_>,
    ) -> Result<(), ExecError> {
        let other = |reason: String| ExecError::Other {
            index: 0,
            node: "(whole graph)".into(),
            reason,
        };
        st.queued_at.clear();
        st.queued_at.resize(g.nodes.len(), 0);
        if let Some(p) = st.profile.as_mut() {
            p.begin(&self.ctx, &st.stream).map_err(|e| other(e.to_string()))?;
        }
        let mut segment = 0;
        let mut s = 0;
        while s < plan.steps.len() {
            let at_step = s;
            let stretch = plan.steps[s..]
                .iter()
                .take_while(|x| matches!(x, GpuStep::Kernel { .. }))
                .count();
            if stretch > 0 && !matches!(graphs, Graphs::Off) {
                let steps = &plan.steps[s..s + stretch];
                match &mut graphs {
                    Graphs::Replay(segments) => {
                        let Some(seg) = segments.get(segment) else {
                            return Err(other("the device graphs do not match the plan".into()));
                        };
                        // SAFETY: forwarded contract.
                        unsafe { seg.exec.launch(&st.stream) }
                            .map_err(|e| other(format!("replaying the device graph: {e}")))?;
                        stats.gpu_dispatches += seg.gpu_dispatches;
                    }
                    Graphs::Capture { segments, failure } => {
                        // Nothing captured runs: a failed capture runs its stretch launch by
                        // launch, and the rest of the graph too.
                        let before = stats.gpu_dispatches;
                        let captured = match st.stream.begin_capture() {
                            Ok(()) => {
                                // SAFETY: forwarded contract.
                                let queued = unsafe { self.run_kernels(st, g, kinds, plan, steps, stats) };
                                let ended = st.stream.end_capture();
                                match (queued, ended) {
                                    (Ok(()), Ok(exec)) => Ok(exec),
                                    (Err(e), _) => Err(e.to_string()),
                                    (Ok(()), Err(e)) => Err(e.to_string()),
                                }
                            }
                            Err(e) => Err(e.to_string()),
                        };
                        match captured {
                            Ok(exec) => {
                                // SAFETY: as the replay above; the scratch buffers it was given
                                // stay until this run's end (`Scratch::release_retired` after
                                // the final wait).
                                unsafe { exec.launch(&st.stream) }
                                    .map_err(|e| other(format!("launching the captured device graph: {e}")))?;
                                segments.push(Segment {
                                    exec,
                                    gpu_dispatches: stats.gpu_dispatches - before,
                                });
                            }
                            Err(reason) => {
                                stats.gpu_dispatches = before;
                                **failure = Some(reason);
                                graphs = Graphs::Off;
                                // SAFETY: forwarded contract.
                                unsafe { self.run_kernels(st, g, kinds, plan, steps, stats)? };
                            }
                        }
                    }
                    Graphs::Off => unreachable!("checked above"),
                }
                let at = st.stream.launches();
                for step in steps {
                    if let GpuStep::Kernel { index, span, .. } = step {
                        st.queued_at[*index..=*index + *span].fill(at);
                    }
                }
                segment += 1;
                s += stretch;
                continue;
            }
            match &plan.steps[s] {
                GpuStep::Kernel { .. } => {
                    // SAFETY: forwarded contract.
                    unsafe { self.run_kernels(st, g, kinds, plan, &plan.steps[s..s + 1], stats)? };
                    s += 1;
                }
                GpuStep::Staged { index, reg } => {
                    // SAFETY: forwarded contract.
                    unsafe { self.run_staged(st, g, kinds, *index, *reg)? };
                    stats.gpu_dispatches += 1;
                    stats.staged_nodes += 1;
                    st.queued_at[*index] = st.stream.launches();
                    s += 1;
                }
                GpuStep::Split { .. } => {
                    let n = exec::split_group_len(g, &plan.steps, s);
                    let members: Vec<(usize, usize)> = plan.steps[s..s + n]
                        .iter()
                        .filter_map(|x| match x {
                            GpuStep::Split { index, reg } => Some((*index, *reg)),
                            _ => None,
                        })
                        .collect();
                    // SAFETY: forwarded contract.
                    unsafe { self.run_splits(st, g, kinds, plan, &members, stats)? };
                    let at = st.stream.launches();
                    for (index, _) in members {
                        st.queued_at[index] = at;
                    }
                    s += n;
                }
                GpuStep::Cpu { range } => {
                    // SAFETY: forwarded contract.
                    unsafe { self.run_group(st, g, kinds, range.clone(), stats)? };
                    let at = st.stream.launches();
                    st.queued_at[range.clone()].fill(at);
                    s += 1;
                }
            }
            if let Some(p) = st.profile.as_mut() {
                p.mark(&self.ctx, &st.stream, at_step)
                    .map_err(|e| other(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// `TANDEM_PROFILE`'s label for plan step `step`: the registration and what it computes (a
    /// matmul's weight type, its ne0 × ne1 (row length × rows) and the activation columns, else
    /// the result's type and extents), so a model's layers add up under one label per kernel
    /// and shape.
    fn step_label(&self, g: &Graph, plan: &GpuPlan, step: usize) -> String {
        let node = |index: usize| {
            let t = g.tensor(g.nodes[index]);
            match t.op {
                Op::MulMat | Op::MulMatId => match t.src[0].map(|w| g.tensor(w)) {
                    Some(w) => format!("{} {} {}x{} n={}", t.op, w.ty, w.ne[0], w.ne[1], t.ne[1] * t.ne[2]),
                    None => t.op.to_string(),
                },
                _ => format!("{} {} [{},{},{},{}]", t.op, t.ty, t.ne[0], t.ne[1], t.ne[2], t.ne[3]),
            }
        };
        match plan.steps.get(step) {
            Some(GpuStep::Kernel { index, reg, span }) => {
                let mut l = format!("{} {}", self.registry.get(*reg).name, node(*index));
                if *span > 0 {
                    let _ = write!(l, " (+{span} nodes)");
                }
                l
            }
            Some(GpuStep::Staged { index, reg }) => {
                format!("staged {} {}", self.registry.get(*reg).name, node(*index))
            }
            Some(GpuStep::Split { index, .. }) => format!("split group from {}", node(*index)),
            Some(GpuStep::Cpu { range }) => {
                let first = range
                    .clone()
                    .map(|i| g.tensor(g.nodes[i]))
                    .find(|t| !t.op.is_view())
                    .map_or("(views)".to_string(), |t| t.op.to_string());
                format!("cpu fallback from {first} ({} nodes)", range.len())
            }
            None => "(unknown step)".to_string(),
        }
    }

    /// Launches kernel steps one by one.
    ///
    /// # Safety
    /// As [`Self::compute`]; `steps` are [`GpuStep::Kernel`]s of `plan`.
    unsafe fn run_kernels(
        &self,
        st: &mut ExecState,
        g: &Graph,
        kinds: &[MemKind],
        plan: &GpuPlan,
        steps: &[GpuStep],
        stats: &mut GraphStats,
    ) -> Result<(), ExecError> {
        for step in steps {
            let GpuStep::Kernel { index, reg, span } = step else {
                continue;
            };
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
            // A dependent launch reads the weights of every matmul the step computes before it
            // waits (a pair of GEMVs: both; a gate fused into the GEMV reading it: the GEMV's).
            let last = *index + *span;
            let matmul = |i: usize| matches!(g.tensor(g.nodes[i]).op, Op::MulMat | Op::MulMatId);
            let settled_at = |i: usize| plan.settled.get(i).copied().unwrap_or(false);
            let settled = match (matmul(*index), matmul(last)) {
                (_, false) => settled_at(*index),
                (false, true) => settled_at(last),
                (true, true) => settled_at(*index) && settled_at(last),
            };
            let lc = self.launch_ctx(st, settled, ids_ready, act_ready);
            // SAFETY: forwarded contract; kinds were read from this device's map.
            unsafe { exec::launch_step(&lc, g, kinds, &self.registry, *index, *reg, *span)? };
            stats.gpu_dispatches += 1;
            let at = st.stream.launches();
            st.queued_at[*index..=*index + *span].fill(at);
        }
        Ok(())
    }

    /// A group of split nodes ([`GpuStep::Split`], [`exec::split_group_len`]): for each, the GPU
    /// computes rows `[0, g)` of MUL_MAT `index` (of every expert, for a MUL_MAT_ID) reading its
    /// weight over the bus, the CPU rows `[g, m)` from the same host bytes, `g` from the node's
    /// share ([`split::gpu_rows`]). The shared activations (and expert ids) come down once, every
    /// GPU part is queued, and the CPU computes its rows of each node while they run; each node's
    /// CPU rows go up behind the GPU parts, so whatever reads a result next is queued after both.
    ///
    /// # Safety
    /// As [`Self::compute`]; the plan found every node [`exec::splittable`], all reading the same
    /// activations (and ids).
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_splits(
        &self,
        st: &mut ExecState,
        g: &Graph,
        kinds: &[MemKind],
        plan: &GpuPlan,
        members: &[(usize, usize)],
        stats: &mut GraphStats,
    ) -> Result<(), ExecError> {
        let (first, _) = members[0];
        let fail_at = |index: usize, reason: String| {
            let t = g.tensor(g.nodes[index]);
            ExecError::Other {
                index,
                node: t.name.clone(),
                reason: format!("split {}: {reason}", t.op),
            }
        };
        let fail = |reason: String| fail_at(first, reason);
        let dev = |id: TensorId| exec::device_addr(g.tensor(id), kinds[id.index()]);
        let t0 = g.tensor(g.nodes[first]);
        let Some(x_id) = t0.src[1] else {
            return Err(fail("no activations".into()));
        };
        let ids_id = t0.src[2].filter(|_| t0.op == Op::MulMatId);
        if t0.op == Op::MulMatId && ids_id.is_none() {
            return Err(fail("no expert ids".into()));
        }
        let x = g.tensor(x_id);
        let mut xg = x.clone();
        xg.data = dev(x_id);
        let ig = ids_id.map(|i| {
            let mut t = g.tensor(i).clone();
            t.data = dev(i);
            t
        });
        // The staging layout: `[x | ids | CPU rows of each node]`.
        let x_bytes = x.nbytes();
        let ids_bytes = ids_id.map_or(0, |i| g.tensor(i).nbytes());
        let ids_off = x_bytes.next_multiple_of(64);
        let mut total = (ids_off + ids_bytes).next_multiple_of(64);
        struct Part<'a> {
            index: usize,
            t: &'a Tensor,
            w: &'a Tensor,
            key: SplitKey,
            gpu_rows: usize,
            cpu_rows: usize,
            cols: usize,
            dg: Tensor,
            wg: Tensor,
            sub_reg: Option<&'static Registration>,
            out_off: usize,
            events: usize,
        }
        let mut parts = Vec::with_capacity(members.len());
        for &(index, reg) in members {
            let id = g.nodes[index];
            let t = g.tensor(id);
            let Some(w_id) = t.src[0] else {
                return Err(fail_at(index, "no weight".into()));
            };
            let w = g.tensor(w_id);
            let m = t.ne[0] as usize;
            // Result columns: MUL_MAT's columns, or MUL_MAT_ID's slots times tokens (contiguous).
            let cols = (t.ne[1] * t.ne[2] * t.ne[3]) as usize;
            let key = SplitKey {
                ty: w.ty,
                k: w.ne[0],
                m: t.ne[0],
                n: t.ne[1] * t.ne[2],
                experts: if t.op == Op::MulMatId { w.ne[2] } else { 0 },
            };
            // The GPU's part as a node of its own: the weight's first rows (of every expert), the
            // result's first rows (same strides), every address as the device sees it. A shape no
            // registration takes leaves the GPU without rows.
            let mut gpu_rows = split::gpu_rows(m, st.split.share(key));
            let mut wg = w.clone();
            wg.data = dev(w_id);
            let mut dg = t.clone();
            dg.data = dev(id);
            let mut sub_reg = None;
            if gpu_rows > 0 && gpu_rows < m {
                wg.ne[1] = gpu_rows as i64;
                dg.ne[0] = gpu_rows as i64;
                // The part's result rows keep the whole result's column stride, which the matmul
                // kernels follow (they write through the result's strides) but the shape rules
                // (ggml's: a contiguous result) refuse: ask about the same part with a contiguous
                // result.
                let mut probe = dg.clone();
                probe.nb[1] = 4 * gpu_rows;
                probe.nb[2] = probe.nb[1] * t.ne[1] as usize;
                probe.nb[3] = probe.nb[2] * t.ne[2] as usize;
                // The registration a part takes is looked up once per shape and alignment.
                let shape = {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    for t in [&wg, &xg, &probe].into_iter().chain(ig.as_ref()) {
                        (t.ty, t.op, t.ne, t.nb, t.data % 256).hash(&mut h);
                    }
                    h.finish()
                };
                let chosen = match st.split_regs.get(&shape) {
                    Some(&c) => c,
                    None => {
                        let srcs = part_srcs(&wg, &xg, &ig);
                        let c = self.registry.choose(&Node { dst: &probe, srcs }, None).map(|(r, _)| r);
                        if st.split_regs.len() >= PLAN_CACHE_CAP {
                            st.split_regs.clear();
                        }
                        st.split_regs.insert(shape, c);
                        c
                    }
                };
                sub_reg = chosen.map(|r| self.registry.get(r));
                if sub_reg.is_none() {
                    // No kernel for a part: the GPU takes the whole node, as outside split mode.
                    gpu_rows = m;
                    wg.ne[1] = w.ne[1];
                    dg.ne[0] = t.ne[0];
                }
            }
            if gpu_rows == m {
                sub_reg = Some(self.registry.get(reg));
            }
            let cpu_rows = m - gpu_rows;
            let out_off = total;
            if cpu_rows > 0 {
                total = (total + cpu_rows * cols * 4).next_multiple_of(64);
            }
            let events = st.split_pending.len() + parts.len();
            parts.push(Part {
                index,
                t,
                w,
                key,
                gpu_rows,
                cpu_rows,
                cols,
                dg,
                wg,
                sub_reg,
                out_off,
                events,
            });
        }
        let need_events = st.split_pending.len() + parts.len();
        while st.split_events.len() < need_events {
            let e = || self.ctx.event().map_err(|e| fail(e.to_string()));
            st.split_events.push([e()?, e()?, e()?]);
        }
        let any_cpu = parts.iter().any(|p| p.cpu_rows > 0);
        if any_cpu && st.staging.as_ref().is_none_or(|s| s.len() < total) {
            // The old staging buffer may still feed queued uploads: wait before freeing it.
            st.stream.synchronize().map_err(|e| fail(e.to_string()))?;
            st.staging = None;
            let size = total.next_power_of_two().max(1 << 20);
            st.staging = Some(self.alloc_pinned(size).map_err(|e| fail(e.to_string()))?);
        }
        let base = st.staging.as_ref().map(|s| s.host_ptr() as usize).unwrap_or(0);
        let staging_dev = st.staging.as_ref().map(|s| s.device_ptr().0 as usize).unwrap_or(0);
        let ev_x = &st.split_events[parts[0].events][0];
        if any_cpu {
            // SAFETY: the activations (and ids) are contiguous device-visible memory of these
            // sizes (`splittable` checked); staging holds `total` bytes and its earlier users are
            // ordered before these copies on the stream.
            unsafe {
                st.stream
                    .copy_dtoh_async(base as *mut u8, DevicePtr(xg.data as u64), x_bytes)
                    .map_err(|e| fail(e.to_string()))?;
                if let Some(i) = &ig {
                    st.stream
                        .copy_dtoh_async((base + ids_off) as *mut u8, DevicePtr(i.data as u64), ids_bytes)
                        .map_err(|e| fail(e.to_string()))?;
                }
            }
            ev_x.record(&st.stream).map_err(|e| fail(e.to_string()))?;
        }
        // The CPU starts on its rows only once every GPU part is queued: that wait counts as
        // the CPU's time (its first part's), so the shares leave the GPU the rows it can run
        // meanwhile.
        let launching = Instant::now();
        for p in &parts {
            let Some(r) = p.sub_reg else { continue };
            let [_, ev0, ev1] = &st.split_events[p.events];
            let lc = self.launch_ctx(st, plan.settled.get(p.index).copied().unwrap_or(false), true, false);
            let srcs = part_srcs(&p.wg, &xg, &ig);
            ev0.record(&st.stream).map_err(|e| fail_at(p.index, e.to_string()))?;
            // SAFETY: the node's rows `[0, gpu_rows)` at device addresses; the registration
            // accepted this shape.
            unsafe { (r.launch)(&lc, &Node { dst: &p.dg, srcs }, None) }
                .map_err(|e| fail_at(p.index, format!("{} ({}): {e}", r.name, p.t.op)))?;
            ev1.record(&st.stream).map_err(|e| fail_at(p.index, e.to_string()))?;
            stats.gpu_dispatches += 1;
        }
        let mut launch_s = launching.elapsed().as_secs_f64();
        if any_cpu {
            ev_x.synchronize().map_err(|e| fail(e.to_string()))?;
        }
        // The CPU's inputs, the same for every node of the group: the staged activations and ids.
        let mut xc = x.clone();
        xc.data = base;
        let ic = ids_id.map(|i| {
            let mut t = g.tensor(i).clone();
            t.data = base + ids_off;
            t
        });
        let cpu = self.cpu();
        for p in &parts {
            let mut cpu_s = 0.0;
            if p.cpu_rows > 0 {
                let t0 = Instant::now();
                cpu_s = std::mem::take(&mut launch_s);
                let (t, w) = (p.t, p.w);
                let mut wc = w.clone();
                wc.ne[1] = p.cpu_rows as i64;
                wc.data = w.data + p.gpu_rows * w.nb[1];
                let mut dc = t.clone();
                dc.ne[0] = p.cpu_rows as i64;
                let row = 4 * p.cpu_rows;
                dc.nb = [4, row, row * t.ne[1] as usize, row * (t.ne[1] * t.ne[2]) as usize];
                dc.data = base + p.out_off;
                let mut srcs: Srcs<'_> = [None; tandem_graph::MAX_SRC];
                srcs[0] = Some(&wc);
                srcs[1] = Some(&xc);
                srcs[2] = ic.as_ref();
                // SAFETY: the weight's rows `[gpu_rows, m)` are host memory (pinned); the
                // activations' and ids' copies are complete (the event) and the output rows are
                // staging's, this node's alone.
                unsafe { tandem_ops::cpu::compute(&cpu, &dc, &srcs) }
                    .map_err(|source| ExecError::Op { index: p.index, source })?;
                cpu_s += t0.elapsed().as_secs_f64();
                if p.cols == 1 {
                    // SAFETY: the result's rows `[gpu_rows, m)`; staging stays untouched until
                    // the stream has passed this copy.
                    unsafe {
                        st.stream.copy_htod_async(
                            DevicePtr((p.dg.data + p.gpu_rows * 4) as u64),
                            (base + p.out_off) as *const u8,
                            row,
                        )
                    }
                    .map_err(|e| fail_at(p.index, e.to_string()))?;
                } else {
                    // Several columns (MUL_MAT_ID's slots): one copy kernel reads the CPU's rows
                    // from staging through the device's mapping and writes them into every
                    // column's rows `[gpu_rows, m)`, instead of one small upload per column.
                    let mut src = dc.clone();
                    src.data = staging_dev + p.out_off;
                    let mut dst = t.clone();
                    dst.ne[0] = p.cpu_rows as i64;
                    dst.data = p.dg.data + p.gpu_rows * 4;
                    let lc = self.launch_ctx(st, false, true, false);
                    // SAFETY: staging (pinned, device-mapped) holds the rows, untouched until the
                    // stream has passed this kernel; `dst` is the result's rows in device memory.
                    unsafe { super::ops::copy::copy_tensor(&lc, &src, &dst) }
                        .map_err(|e| fail_at(p.index, format!("uploading the CPU's rows: {e}")))?;
                }
            }
            stats.split_nodes += 1;
            st.split_pending.push(PendingSplit {
                key: p.key,
                events: p.events,
                gpu_rows: if p.sub_reg.is_some() { p.gpu_rows } else { 0 },
                cpu_rows: p.cpu_rows,
                cpu_s,
            });
        }
        Ok(())
    }

    /// A matmul on a weight in pinned host memory with more columns than a split node takes
    /// ([`GpuStep::Staged`]): the weight is copied into a device buffer kept for this (grown as
    /// needed), then the kernel runs on the copy. Both are queued on the stream, so the next
    /// staged copy waits for this kernel.
    ///
    /// # Safety
    /// As [`Self::compute`]; the plan found the node [`exec::stages_weight`].
    unsafe fn run_staged(
        &self,
        st: &mut ExecState,
        g: &Graph,
        kinds: &[MemKind],
        index: usize,
        reg: usize,
    ) -> Result<(), ExecError> {
        let t = g.tensor(g.nodes[index]);
        let fail = |reason: String| ExecError::Other {
            index,
            node: t.name.clone(),
            reason: format!("staging {}'s weight: {reason}", t.op),
        };
        let w_id = t.src[0].ok_or_else(|| fail("no weight".into()))?;
        let w = g.tensor(w_id);
        let bytes = w.nbytes();
        if st.weight_stage.as_ref().is_none_or(|b| b.len() < bytes) {
            // Kernels queued earlier may still read the old copy.
            st.stream.synchronize().map_err(|e| fail(e.to_string()))?;
            st.weight_stage = None;
            let size = bytes.next_multiple_of(1 << 20);
            st.weight_stage = Some(self.ctx.alloc(size).map_err(|e| fail(e.to_string()))?);
        }
        let stage = st
            .weight_stage
            .as_ref()
            .map(|b| b.ptr())
            .ok_or_else(|| fail("no buffer".into()))?;
        // SAFETY: the weight is `bytes` of pinned host memory (contiguous, `stages_weight`); the
        // buffer holds at least that, and earlier kernels reading it are ahead on the stream.
        unsafe { st.stream.copy_htod_async(stage, w.data as *const u8, bytes) }.map_err(|e| fail(e.to_string()))?;
        let lc = self.launch_ctx(st, false, false, false);
        // SAFETY: forwarded contract; the copy is queued ahead of the kernel.
        unsafe { exec::launch_on_weight(&lc, g, kinds, &self.registry, index, reg, stage.0 as usize) }
    }

    /// Queues the copies of `plan.inputs` into the device's input stage (grown first if needed,
    /// after the stream has drained, dropping the device graphs that read the old one) and
    /// returns `kinds` with each input's device view moved to its copy.
    ///
    /// # Safety
    /// As [`Self::compute`]: the inputs' bytes stay valid until the stream has run the copies.
    unsafe fn stage_inputs(
        &self,
        st: &mut ExecState,
        g: &Graph,
        kinds: &[MemKind],
        plan: &GpuPlan,
    ) -> Result<Vec<MemKind>, ExecError> {
        let fail = |reason: String| ExecError::Other {
            index: 0,
            node: String::new(),
            reason: format!("copying the graph's inputs to the device: {reason}"),
        };
        // Inputs side by side in one allocation go down in one copy (`stage_copies`).
        let spans: Vec<(usize, usize, Option<usize>)> = plan
            .inputs
            .iter()
            .map(|input| {
                let at = g.tensor(input.id).data;
                (
                    at,
                    input.bytes,
                    self.mem.allocation(at, input.bytes).map(|(start, _)| start),
                )
            })
            .collect();
        let (copies, offsets, need) = exec::stage_copies(&spans);
        if st.input_stage.as_ref().is_none_or(|b| b.len() < need) {
            st.stream.synchronize().map_err(|e| fail(e.to_string()))?;
            st.graphs.clear();
            st.input_stage = None;
            let size = need.next_power_of_two().max(1 << 20);
            st.input_stage = Some(self.ctx.alloc(size).map_err(|e| fail(e.to_string()))?);
        }
        let base = st
            .input_stage
            .as_ref()
            .map(|b| b.ptr().0)
            .ok_or_else(|| fail("no buffer".into()))?;
        for c in &copies {
            // SAFETY: the copy's bytes lie in one pinned allocation (its inputs' spans and the
            // bytes between them, `stage_copies`), the stage holds `need`; kernels of the last
            // run reading the stage are ahead on the stream.
            unsafe {
                st.stream
                    .copy_htod_async(DevicePtr(base + c.offset as u64), c.src as *const u8, c.bytes)
            }
            .map_err(|e| fail(format!("{} bytes from {:#x}: {e}", c.bytes, c.src)))?;
        }
        let mut moved = kinds.to_vec();
        for (input, offset) in plan.inputs.iter().zip(offsets) {
            let t = g.tensor(input.id);
            moved[input.id.index()] = MemKind::Pinned {
                delta: (base + offset as u64) as i64 - t.data as i64,
            };
        }
        Ok(moved)
    }

    /// Feeds the finished graph's split calls to the scheduler (their GPU times are final now)
    /// and prints its trace lines.
    fn observe_splits(&self, st: &mut ExecState, pending: Vec<PendingSplit>) {
        for p in pending {
            let gpu_s = if p.gpu_rows > 0 {
                let [_, e0, e1] = &st.split_events[p.events];
                match e0.elapsed_ms(e1) {
                    Ok(ms) => ms as f64 * 1e-3,
                    Err(_) => continue,
                }
            } else {
                0.0
            };
            let o = Observation {
                gpu_rows: p.gpu_rows,
                gpu_s,
                cpu_rows: p.cpu_rows,
                cpu_s: p.cpu_s,
            };
            if let Some(line) = st.split.observe(p.key, o) {
                eprintln!("tandem: {}: {line}", self.name);
            }
        }
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
        unsafe { exec::run_cpu_group(&self.cpu(), g, kinds, range, &intervals, base, stats)? };
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
        let (stats, ms) = unsafe { self.compute_with(g, Some(runway), None) }?;
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
