//! Backend (stream) entries. Every entry, async ones included, finishes its work before it
//! returns: the host device computes on the calling thread's pool, so `synchronize` and events
//! have nothing left to wait for.
//!
//! `graph_compute` also keeps process-wide totals of where its time goes (conversion, host
//! memory check, plan lookup, kernels), which benchmarks read through `get_proc_address`
//! (`tandem_graph_totals`, `tandem_set_node_timing`).

use crate::abi::{Backend, BackendIface, Buffer, Cgraph, Device as CDevice, Event, GgmlTensor, Guid, Status};
use crate::abi::{STATUS_FAILED, STATUS_SUCCESS};
use crate::convert::{convert_graph, Scratch};
use crate::device::DeviceCtx;
use crate::guard::guard;
use crate::host::host;
use crate::{buffer, log};
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::{addr_of, null};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tandem_backend::{Config, Device, ExecError, GraphStats};
use tandem_graph::Graph;

/// Identifies tandem backends (`ggml_backend_guid`).
static GUID: Guid = [
    0x74, 0x61, 0x6e, 0x64, 0x65, 0x6d, 0x2d, 0x67, 0x67, 0x6d, 0x6c, 0x2d, 0x76, 0x30, 0x2e, 0x31,
];

pub struct BackendCtx {
    pub device: Arc<Device>,
    pub name: CString,
    /// The last converted graph, reused by the next `graph_compute`.
    scratch: Mutex<Scratch>,
}

/// A new backend on `dev`; freed by its `free` entry.
pub fn new_backend(dev: *mut CDevice, ctx: &DeviceCtx) -> *mut Backend {
    let bctx = Box::new(BackendCtx {
        device: ctx.device.clone(),
        name: ctx.name.clone(),
        scratch: Mutex::new(Scratch::default()),
    });
    Box::into_raw(Box::new(Backend {
        guid: addr_of!(GUID).cast_mut(),
        iface: BACKEND_IFACE,
        device: dev,
        context: Box::into_raw(bctx).cast(),
    }))
}

const BACKEND_IFACE: BackendIface = BackendIface {
    get_name: Some(get_name),
    free: Some(free),
    set_tensor_async: Some(set_tensor_async),
    get_tensor_async: Some(get_tensor_async),
    set_tensor_2d_async: Some(set_tensor_2d_async),
    get_tensor_2d_async: Some(get_tensor_2d_async),
    cpy_tensor_async: Some(cpy_tensor_async),
    synchronize: Some(synchronize),
    graph_plan_create: None,
    graph_plan_free: None,
    graph_plan_update: None,
    graph_plan_compute: None,
    graph_compute: Some(graph_compute),
    event_record: Some(event_record),
    event_wait: Some(event_wait),
    graph_optimize: None,
};

/// # Safety
/// `backend` was made by [`new_backend`] and not freed.
unsafe fn ctx<'a>(backend: *mut Backend) -> &'a BackendCtx {
    // SAFETY: the context of tandem's backends is a BackendCtx box.
    unsafe { &*((*backend).context as *const BackendCtx) }
}

unsafe extern "C" fn get_name(backend: *mut Backend) -> *const c_char {
    // SAFETY: ggml calls backend entries with their own backend.
    guard("get_name", null(), || unsafe { ctx(backend) }.name.as_ptr())
}

unsafe extern "C" fn free(backend: *mut Backend) {
    guard("free", (), || {
        // SAFETY: both boxes were made in new_backend; ggml frees a backend once.
        unsafe {
            drop(Box::from_raw((*backend).context as *mut BackendCtx));
            drop(Box::from_raw(backend));
        }
    })
}

/// `ggml_backend_set_n_threads` (through `get_proc_address`): resizes the worker pool of the
/// host device (and of a GPU device: its CPU fallback and split nodes), as ggml's CPU backend
/// follows its host's thread count. A positive `TANDEM_THREADS`
/// pins the pool and wins; hosts call this before every graph, and an unchanged count costs
/// nothing.
pub unsafe extern "C" fn set_n_threads(backend: *mut Backend, n_threads: c_int) {
    guard("set_n_threads", (), || {
        if backend.is_null() || n_threads <= 0 || Config::get().threads > 0 {
            return;
        }
        // SAFETY: ggml resolves this function through tandem's registry and calls it with
        // tandem's backends only.
        let n = (n_threads as usize).min(tandem_backend::config::max_threads());
        match &*unsafe { ctx(backend) }.device {
            Device::Host(h) => h.set_threads(n),
            Device::Gpu(g) => g.set_threads(n),
        }
    })
}

/// Where `graph_compute`'s time went, summed over graphs since the last reset. Graphs that
/// found their plan cached are summed; graphs that planned anew are only counted, so the sums
/// describe the steady state of a decode loop.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphTotals {
    /// Successful graphs with a cached plan (the ones summed below).
    pub graphs: u64,
    pub nodes: u64,
    /// `graph_compute` from entry to return.
    pub total_ns: u64,
    /// ggml graph → tandem graph.
    pub convert_ns: u64,
    /// Checking that every buffer is host memory.
    pub check_ns: u64,
    /// The device's compute call: plan lookup plus execution.
    pub compute_ns: u64,
    /// Plan lookup (structure key and cache), as the device measured it, in µs.
    pub plan_us: u64,
    /// Inside the nodes' CPU kernels; 0 unless node timing is on.
    pub kernel_ns: u64,
    /// Successful graphs that planned anew (not in the sums).
    pub cold_graphs: u64,
}

static TOTALS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];

fn add_totals(t: &GraphTotals) {
    let v = [
        t.graphs,
        t.nodes,
        t.total_ns,
        t.convert_ns,
        t.check_ns,
        t.compute_ns,
        t.plan_us,
        t.kernel_ns,
        t.cold_graphs,
    ];
    for (slot, x) in TOTALS.iter().zip(v) {
        if x != 0 {
            slot.fetch_add(x, Ordering::Relaxed);
        }
    }
}

/// `tandem_graph_totals` (through `get_proc_address`): copies the totals to `out` (when not
/// NULL), then zeroes them if `reset`.
pub unsafe extern "C" fn graph_totals(out: *mut GraphTotals, reset: bool) {
    guard("graph_totals", (), || {
        let read = |i: usize| {
            if reset {
                TOTALS[i].swap(0, Ordering::Relaxed)
            } else {
                TOTALS[i].load(Ordering::Relaxed)
            }
        };
        let t = GraphTotals {
            graphs: read(0),
            nodes: read(1),
            total_ns: read(2),
            convert_ns: read(3),
            check_ns: read(4),
            compute_ns: read(5),
            plan_us: read(6),
            kernel_ns: read(7),
            cold_graphs: read(8),
        };
        if !out.is_null() {
            // SAFETY: the caller passes room for one GraphTotals.
            unsafe { out.write(t) };
        }
    })
}

/// `tandem_set_node_timing` (through `get_proc_address`): times every CPU node's kernel, so
/// the totals can tell kernel time from tandem's overhead. Off by default.
pub unsafe extern "C" fn set_node_timing(on: bool) {
    guard("set_node_timing", (), || tandem_backend::stats::set_node_timing(on))
}

/// The buffer that holds `t`'s bytes (a view's root owns them).
///
/// # Safety
/// `t` and its `view_src` are live.
unsafe fn buffer_of(t: *const GgmlTensor) -> *mut Buffer {
    // SAFETY: per the contract.
    unsafe {
        if (*t).view_src.is_null() {
            (*t).buffer
        } else {
            (*(*t).view_src).buffer
        }
    }
}

unsafe extern "C" fn set_tensor_async(
    _backend: *mut Backend,
    tensor: *mut GgmlTensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: ggml passes a live tensor and `size` readable bytes.
    guard("set_tensor_async", (), || unsafe {
        let buf = buffer_of(tensor);
        if !buf.is_null() {
            buffer::set_2d(buf, tensor, data, offset, size, 1, 0, 0)
        }
    })
}

unsafe extern "C" fn get_tensor_async(
    _backend: *mut Backend,
    tensor: *const GgmlTensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: ggml passes a live tensor and `size` writable bytes.
    guard("get_tensor_async", (), || unsafe {
        let buf = buffer_of(tensor);
        if !buf.is_null() {
            buffer::get_2d(buf, tensor, data, offset, size, 1, 0, 0)
        }
    })
}

unsafe extern "C" fn set_tensor_2d_async(
    _backend: *mut Backend,
    tensor: *mut GgmlTensor,
    data: *const c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    // SAFETY: ggml passes a live tensor and n_copies readable rows.
    guard("set_tensor_2d_async", (), || unsafe {
        let buf = buffer_of(tensor);
        if !buf.is_null() {
            buffer::set_2d(buf, tensor, data, offset, size, n_copies, stride_tensor, stride_data)
        }
    })
}

unsafe extern "C" fn get_tensor_2d_async(
    _backend: *mut Backend,
    tensor: *const GgmlTensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    // SAFETY: ggml passes a live tensor and n_copies writable rows.
    guard("get_tensor_2d_async", (), || unsafe {
        let buf = buffer_of(tensor);
        if !buf.is_null() {
            buffer::get_2d(buf, tensor, data, offset, size, n_copies, stride_tensor, stride_data)
        }
    })
}

/// Copies between host-memory tensors; anything else is left to ggml's generic path.
unsafe extern "C" fn cpy_tensor_async(
    backend_src: *mut Backend,
    backend_dst: *mut Backend,
    src: *const GgmlTensor,
    dst: *mut GgmlTensor,
) -> bool {
    guard("cpy_tensor_async", false, || {
        let Ok(h) = host() else { return false };
        // SAFETY: ggml passes live backends and tensors of equal layout.
        unsafe {
            let (sbuf, dbuf) = (buffer_of(src), buffer_of(dst));
            if sbuf.is_null() || dbuf.is_null() || !(h.buffer_is_host)(sbuf) || !(h.buffer_is_host)(dbuf) {
                return false;
            }
            // The source backend may still be writing `src`: wait for it as ggml's fallback would.
            if !backend_src.is_null() && backend_src != backend_dst {
                (h.synchronize)(backend_src);
            }
            buffer::copy_host_tensor(dbuf, src, dst, (h.nbytes)(src))
        }
    })
}

unsafe extern "C" fn synchronize(_backend: *mut Backend) {
    // Nothing is ever pending when an entry returns.
}

unsafe extern "C" fn event_record(_backend: *mut Backend, _event: *mut Event) {}

unsafe extern "C" fn event_wait(_backend: *mut Backend, _event: *mut Event) {}

unsafe extern "C" fn graph_compute(backend: *mut Backend, cgraph: *mut Cgraph) -> Status {
    guard("graph_compute", STATUS_FAILED, || {
        let t0 = Instant::now();
        // SAFETY: ggml calls backend entries with their own backend.
        let bctx = unsafe { ctx(backend) };
        let name = bctx.device.name();
        let h = match host() {
            Ok(h) => h,
            Err(e) => {
                log::error(&format!("{name}: graph_compute: {e}"));
                return STATUS_FAILED;
            }
        };
        // One graph at a time per backend, as ggml drives it; the lock only guards the reuse.
        let mut scratch = bctx.scratch.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: ggml passes a live graph whose tensors stay live during the call.
        let reused = match unsafe { convert_graph(h, cgraph, &mut scratch) } {
            Ok(reused) => reused,
            Err(e) => {
                log::error(&format!("{name}: graph_compute: {e}"));
                return STATUS_FAILED;
            }
        };
        let t1 = Instant::now();
        let gpu = match &*bctx.device {
            Device::Gpu(g) => Some(&**g),
            Device::Host(_) => None,
        };
        if buffer::check_host_memory(h, scratch.graph(), gpu).is_err() {
            // Names are left out of the hot path: fill them in and check again for the message.
            // SAFETY: the graph's ggml tensors are live for this call.
            unsafe { scratch.fill_names() };
            let e = buffer::check_host_memory(h, scratch.graph(), gpu)
                .err()
                .unwrap_or_default();
            log::error(&format!("{name}: graph_compute: {e}"));
            return STATUS_FAILED;
        }
        let t2 = Instant::now();
        let tag = Some(tandem_backend::GraphTag(scratch.tag()));
        // SAFETY: every tensor's bytes live in host memory or this device's memory (checked
        // above) that ggml keeps allocated and does not touch while the graph runs; the scratch
        // keeps a tag for exactly one graph (`Scratch::tag`).
        match unsafe { bctx.device.compute_tagged(scratch.graph(), tag) } {
            Ok(stats) => {
                record(&stats, reused, t0, t1, t2);
                STATUS_SUCCESS
            }
            Err(mut e) => {
                // SAFETY: as above.
                unsafe { scratch.fill_names() };
                name_failed_node(&mut e, scratch.graph());
                log::error(&format!("{name}: graph_compute failed: {e}"));
                STATUS_FAILED
            }
        }
    })
}

/// Puts the failing node's name into `e`: errors raised on the hot path, where tensors carry
/// no names, name the node `''`.
fn name_failed_node(e: &mut ExecError, g: &Graph) {
    let named = |index: usize| g.nodes.get(index).map(|&id| g.tensor(id).name.clone());
    if let ExecError::Op { index, source } = e {
        if source.node.is_empty() {
            source.node = named(*index).unwrap_or_default();
        }
    }
    if let ExecError::Other { index, node, .. } = e {
        if node.is_empty() {
            *node = named(*index).unwrap_or_default();
        }
    }
}

/// Adds one successful graph to the totals; `t0..t1` converted it (or found it `reused`: the
/// graph converted last time), `t1..t2` checked its memory, and the device computed it from
/// `t2` on.
fn record(stats: &GraphStats, reused: bool, t0: Instant, t1: Instant, t2: Instant) {
    let end = Instant::now();
    let ns = |a: Instant, b: Instant| b.duration_since(a).as_nanos() as u64;
    if Config::get().stats {
        eprintln!(
            "tandem: graph_compute convert_us={}{} check_us={} total_us={}",
            ns(t0, t1) / 1000,
            if reused { " (reused)" } else { "" },
            ns(t1, t2) / 1000,
            ns(t0, end) / 1000
        );
    }
    if !stats.plan_cached {
        add_totals(&GraphTotals {
            cold_graphs: 1,
            ..Default::default()
        });
        return;
    }
    add_totals(&GraphTotals {
        graphs: 1,
        nodes: stats.nodes as u64,
        total_ns: ns(t0, end),
        convert_ns: ns(t0, t1),
        check_ns: ns(t1, t2),
        compute_ns: ns(t2, end),
        plan_us: stats.plan_us,
        kernel_ns: stats.kernel_ns,
        cold_graphs: 0,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::{ElemType, Op, Tensor, TensorId};
    use tandem_ops::OpError;

    #[test]
    fn failed_node_gets_its_name_back() {
        let mut g = Graph::default();
        let mut x = Tensor::new(ElemType::F32, &[4]);
        x.name = "x".into();
        let mut y = Tensor::new(ElemType::F32, &[4]);
        y.op = Op::Add;
        y.name = "y".into();
        g.tensors = vec![x, y];
        g.nodes = vec![TensorId(1)];
        let mut unnamed = g.clone();
        unnamed.tensors[1].name.clear();
        let source = OpError::new(unnamed.tensor(TensorId(1)), &unnamed.srcs(TensorId(1)), "bad");
        let mut e = ExecError::Op { index: 0, source };
        name_failed_node(&mut e, &g);
        assert!(e.to_string().contains("'y'"), "{e}");
        let mut other = ExecError::Other {
            index: 0,
            node: String::new(),
            reason: "r".into(),
        };
        name_failed_node(&mut other, &g);
        assert!(other.to_string().contains("('y')"), "{other}");
        // An index past the nodes leaves the message as it was.
        let mut past = ExecError::Other {
            index: 7,
            node: String::new(),
            reason: "r".into(),
        };
        name_failed_node(&mut past, &g);
        assert!(past.to_string().contains("('')"), "{past}");
    }
}
