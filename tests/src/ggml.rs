//! Helpers over ggml's own API for the benchmarks that run ggml backends directly: quantizing
//! with ggml, and a graph whose tensors live in one buffer of a device's backend.

use llama_cpp_sys_2 as g;
use std::ffi::CString;
use tandem_graph::ElemType;

/// `rows` rows of `k` values in `ty`, as ggml quantizes (or converts) them.
pub fn quantize(ty: ElemType, x: &[f32], k: usize, rows: usize) -> Result<Vec<u8>, String> {
    let row = ty
        .row_size(k as i64)
        .ok_or(format!("{} rows of {k} values", ty.name()))?;
    if x.len() != rows * k {
        return Err(format!("{} values for {rows} rows of {k}", x.len()));
    }
    let mut out = vec![0u8; row * rows];
    // SAFETY: x holds rows × k floats and out exactly rows quantized rows; no importance matrix.
    let n = unsafe {
        g::ggml_quantize_init(ty.ggml_id());
        g::ggml_quantize_chunk(
            ty.ggml_id(),
            x.as_ptr(),
            out.as_mut_ptr().cast(),
            0,
            rows as i64,
            k as i64,
            std::ptr::null(),
        )
    };
    if n != out.len() {
        return Err(format!("ggml_quantize_chunk wrote {n} bytes, expected {}", out.len()));
    }
    Ok(out)
}

/// A ggml graph on one device: a no-alloc context holding the tensor headers and the graph, the
/// device's backend, and the one buffer of that backend holding every tensor; freed together.
pub struct DeviceGraph {
    ctx: *mut g::ggml_context,
    backend: g::ggml_backend_t,
    buffer: g::ggml_backend_buffer_t,
    graph: *mut g::ggml_cgraph,
}

impl DeviceGraph {
    /// Opens ggml's device `device` (ggml's CPU with `cpu_threads` threads) and a context for up
    /// to `tensors` tensors and a graph of as many nodes; `build` creates the tensors in the
    /// context and adds the outputs to the graph; then every tensor is allocated on the device.
    ///
    /// # Safety
    /// `build` may only create tensors in the context and expand the graph it is given.
    pub unsafe fn new(
        device: &str,
        tensors: usize,
        cpu_threads: usize,
        build: impl FnOnce(*mut g::ggml_context, *mut g::ggml_cgraph),
    ) -> Result<DeviceGraph, String> {
        let name = CString::new(device).map_err(|e| e.to_string())?;
        // SAFETY: ggml API use as documented: a no-alloc context sized for the tensors and the
        // graph, a backend of a device from ggml's registry, the context's tensors allocated in
        // one buffer of it; every handle made here is freed on the error paths or by Drop.
        unsafe {
            let dev = g::ggml_backend_dev_by_name(name.as_ptr());
            if dev.is_null() {
                return Err(format!("no ggml device named {device}"));
            }
            let params = g::ggml_init_params {
                mem_size: tensors * g::ggml_tensor_overhead() + g::ggml_graph_overhead_custom(tensors, false),
                mem_buffer: std::ptr::null_mut(),
                no_alloc: true,
            };
            let ctx = g::ggml_init(params);
            if ctx.is_null() {
                return Err("ggml_init failed".into());
            }
            let backend = g::ggml_backend_dev_init(dev, std::ptr::null());
            if backend.is_null() {
                g::ggml_free(ctx);
                return Err(format!("ggml_backend_dev_init({device}) failed"));
            }
            if device == "CPU" {
                g::ggml_backend_cpu_set_n_threads(backend, cpu_threads as i32);
            }
            let graph = g::ggml_new_graph_custom(ctx, tensors, false);
            build(ctx, graph);
            let buffer = g::ggml_backend_alloc_ctx_tensors(ctx, backend);
            if buffer.is_null() {
                g::ggml_backend_free(backend);
                g::ggml_free(ctx);
                return Err(format!("{device}: allocating the graph's tensors failed"));
            }
            Ok(DeviceGraph {
                ctx,
                backend,
                buffer,
                graph,
            })
        }
    }

    /// Computes the graph; returns once the device has finished.
    pub fn compute(&self) -> Result<(), String> {
        // SAFETY: the graph, its tensors and the backend were made in new() and are alive.
        let status = unsafe { g::ggml_backend_graph_compute(self.backend, self.graph) };
        if status == g::GGML_STATUS_SUCCESS {
            Ok(())
        } else {
            Err(format!("ggml_backend_graph_compute returned status {status}"))
        }
    }

    /// Copies `data` into tensor `t` of this graph.
    ///
    /// # Safety
    /// `t` is a tensor of this graph's context of at least `data`'s size in bytes.
    pub unsafe fn set<T: Copy>(&self, t: *mut g::ggml_tensor, data: &[T]) {
        // SAFETY: forwarded contract; the tensor was allocated in new().
        unsafe { g::ggml_backend_tensor_set(t, data.as_ptr().cast(), 0, std::mem::size_of_val(data)) };
    }

    /// The first `len` f32 of tensor `t` of this graph.
    ///
    /// # Safety
    /// `t` is an f32 tensor of this graph's context with at least `len` values.
    pub unsafe fn get_f32(&self, t: *mut g::ggml_tensor, len: usize) -> Vec<f32> {
        let mut v = vec![0f32; len];
        // SAFETY: forwarded contract; v holds len f32.
        unsafe { g::ggml_backend_tensor_get(t, v.as_mut_ptr().cast(), 0, 4 * len) };
        v
    }
}

impl Drop for DeviceGraph {
    fn drop(&mut self) {
        // SAFETY: each handle was made in new() and is freed once.
        unsafe {
            g::ggml_backend_buffer_free(self.buffer);
            g::ggml_backend_free(self.backend);
            g::ggml_free(self.ctx);
        }
    }
}
