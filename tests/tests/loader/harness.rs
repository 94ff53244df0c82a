//! Builds graphs with ggml's own API, computes them on a device through ggml's backend API and
//! compares TANDEM_HOST with ggml's CPU backend.

use half::f16;
use llama_cpp_sys_2 as sys;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use std::ffi::{CStr, CString};
use std::sync::OnceLock;
use tandem_graph::ElemType;

/// The two devices every case runs on.
pub struct Devices {
    pub reg: sys::ggml_backend_reg_t,
    pub tandem: sys::ggml_backend_dev_t,
    pub cpu: sys::ggml_backend_dev_t,
}

// SAFETY: ggml's registry objects are process-global and immutable after loading.
unsafe impl Send for Devices {}
// SAFETY: as above.
unsafe impl Sync for Devices {}

/// Loads the plugin once per process and finds TANDEM_HOST and CPU (panics with the reason).
pub fn devices() -> &'static Devices {
    static D: OnceLock<Result<Devices, String>> = OnceLock::new();
    D.get_or_init(load).as_ref().unwrap_or_else(|e| panic!("{e}"))
}

/// Loads the plugin through the real loader and returns its registry.
pub fn load_plugin() -> Result<sys::ggml_backend_reg_t, String> {
    let plugin = tandem_tests::plugin::plugin_path()?;
    let p = CString::new(plugin.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated path; ggml owns the returned registry for the process.
    let reg = unsafe { sys::ggml_backend_load(p.as_ptr()) };
    if reg.is_null() {
        return Err(format!(
            "ggml_backend_load({}) returned NULL; the log lines above ('tandem: ...' or ggml's loader) say why",
            plugin.display()
        ));
    }
    Ok(reg)
}

fn load() -> Result<Devices, String> {
    let reg = load_plugin()?;
    // SAFETY: lookups by NUL-terminated name in ggml's registry.
    let (tandem, cpu) = unsafe {
        (
            sys::ggml_backend_dev_by_name(c"TANDEM_HOST".as_ptr()),
            sys::ggml_backend_dev_by_name(c"CPU".as_ptr()),
        )
    };
    if tandem.is_null() {
        return Err("the plugin loaded but offers no TANDEM_HOST device (is TANDEM_HOST_DEVICE=0 set?)".into());
    }
    if cpu.is_null() {
        return Err("ggml's CPU device is not registered".into());
    }
    Ok(Devices { reg, tandem, cpu })
}

/// How inputs go in and outputs come out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    /// `ggml_backend_tensor_set/get`.
    Sync,
    /// `ggml_backend_tensor_set_async/get_async` + `ggml_backend_synchronize`.
    Async,
    /// `ggml_backend_tensor_set_2d/get_2d`, one row per copy.
    TwoD,
}

/// Where a case's graph is built: a ggml context plus the inputs and their bytes.
pub struct Ctx {
    pub ctx: *mut sys::ggml_context,
    inputs: Vec<(*mut sys::ggml_tensor, Vec<u8>, bool)>,
    rng: Pcg64,
}

impl Ctx {
    fn new_tensor(&mut self, ty: ElemType, ne: &[i64], name: &str) -> *mut sys::ggml_tensor {
        let cname = CString::new(name).unwrap();
        // SAFETY: a live no-alloc context with room for the case's tensors; `ne` has 1..=4 dims.
        unsafe {
            let t = sys::ggml_new_tensor(self.ctx, ty.ggml_id(), ne.len() as i32, ne.as_ptr());
            sys::ggml_set_name(t, cname.as_ptr());
            t
        }
    }

    /// Uniform random values in `[-1, 1)`.
    pub fn uniform(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.rng.random_range(-1.0f32..1.0)).collect()
    }

    /// An input of type `ty` holding `values` (converted/quantized the way ggml stores them).
    pub fn input_values(&mut self, ty: ElemType, ne: &[i64], name: &str, values: &[f32]) -> *mut sys::ggml_tensor {
        let t = self.new_tensor(ty, ne, name);
        let bytes = encode(ty, values, ne[0]);
        self.inputs.push((t, bytes, false));
        t
    }

    /// A random input of type `ty`.
    pub fn input(&mut self, ty: ElemType, ne: &[i64], name: &str) -> *mut sys::ggml_tensor {
        let n = ne.iter().product::<i64>() as usize;
        let v = self.uniform(n);
        self.input_values(ty, ne, name, &v)
    }

    /// An i32 input.
    pub fn input_i32(&mut self, ne: &[i64], name: &str, values: &[i32]) -> *mut sys::ggml_tensor {
        let t = self.new_tensor(ElemType::I32, ne, name);
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.inputs.push((t, bytes, false));
        t
    }

    /// Marks input `t` as written by the graph (an in-place op's target), so it is not checked
    /// for being unchanged.
    pub fn mutable(&mut self, t: *mut sys::ggml_tensor) {
        for i in &mut self.inputs {
            if i.0 == t {
                i.2 = true;
            }
        }
    }
}

/// ggml's bytes for `values` stored as `ty` (rows of `ne0`).
pub fn encode(ty: ElemType, values: &[f32], ne0: i64) -> Vec<u8> {
    match ty {
        ElemType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ElemType::F16 => values.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect(),
        _ => {
            let nrows = values.len() / ne0 as usize;
            tandem_tests::ggml::quantize(ty, values, ne0 as usize, nrows).expect("ggml quantizes whole blocks")
        }
    }
}

/// One output of a case, as f32.
#[derive(Clone, Debug)]
pub struct Output {
    pub name: String,
    pub values: Vec<f32>,
}

/// Frees what a run made, also on early returns.
struct Resources {
    ctx: *mut sys::ggml_context,
    buf: sys::ggml_backend_buffer_t,
}

impl Drop for Resources {
    fn drop(&mut self) {
        // SAFETY: each handle was made by this run and is freed once.
        unsafe {
            if !self.buf.is_null() {
                sys::ggml_backend_buffer_free(self.buf);
            }
            sys::ggml_free(self.ctx);
        }
    }
}

const SENTINEL: u8 = 0xA5;
const SENTINEL_LEN: i64 = 256;

/// A case builder: makes inputs in the context and returns the outputs to compare.
pub type Build<'a> = &'a dyn Fn(&mut Ctx) -> Vec<*mut sys::ggml_tensor>;

/// Builds the case with `seed`, runs it on `backend` and returns its outputs. Checks that every
/// output node is claimed by the device (`supports_op`), that inputs come back unchanged and
/// that a sentinel tensor allocated after everything else is untouched.
pub fn run_on(backend: sys::ggml_backend_t, build: Build, seed: u64, io: Io) -> Result<Vec<Output>, String> {
    // SAFETY: ggml's C API used as documented: a no-alloc context, tensors allocated in one
    // backend buffer, every pointer below made by this function and freed by `Resources`.
    unsafe {
        let params = sys::ggml_init_params {
            mem_size: 512 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead(),
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        };
        let ctx = sys::ggml_init(params);
        let mut res = Resources {
            ctx,
            buf: std::ptr::null_mut(),
        };
        let mut c = Ctx {
            ctx,
            inputs: Vec::new(),
            rng: Pcg64::seed_from_u64(seed),
        };
        let outputs = build(&mut c);
        let sentinel = c.new_tensor(ElemType::I8, &[SENTINEL_LEN], "sentinel");
        let gf = sys::ggml_new_graph(ctx);
        for &o in &outputs {
            // Without the flag ggml's CPU backend may fuse an output away (RMS_NORM+MUL).
            sys::ggml_set_output(o);
            sys::ggml_build_forward_expand(gf, o);
        }
        let dev = sys::ggml_backend_get_device(backend);
        for &o in &outputs {
            if !sys::ggml_backend_dev_supports_op(dev, o) {
                return Err(format!(
                    "{} does not claim {} (supports_op is false)",
                    dev_name(dev),
                    describe(o)
                ));
            }
        }
        res.buf = sys::ggml_backend_alloc_ctx_tensors(ctx, backend);
        if res.buf.is_null() {
            return Err("ggml_backend_alloc_ctx_tensors returned NULL".into());
        }
        for (t, bytes, _) in &c.inputs {
            write(backend, *t, bytes, io);
        }
        write(backend, sentinel, &[SENTINEL; SENTINEL_LEN as usize], Io::Sync);
        if io == Io::Async {
            sys::ggml_backend_synchronize(backend);
        }
        let status = sys::ggml_backend_graph_compute(backend, gf);
        if status != sys::GGML_STATUS_SUCCESS {
            return Err(format!(
                "graph_compute on {} returned status {status} (see the 'tandem:' log line above)",
                dev_name(dev)
            ));
        }
        let mut outs = Vec::new();
        for &o in &outputs {
            let bytes = read(backend, o, io);
            outs.push(Output {
                name: name_of(o),
                values: decode(o, &bytes)?,
            });
        }
        for (t, bytes, mutable) in &c.inputs {
            if !*mutable && read(backend, *t, Io::Sync) != *bytes {
                return Err(format!("input '{}' was modified by the graph", name_of(*t)));
            }
        }
        if read(backend, sentinel, Io::Sync).iter().any(|&b| b != SENTINEL) {
            return Err("the sentinel tensor after the outputs was overwritten".into());
        }
        Ok(outs)
    }
}

/// # Safety
/// `t` is allocated in a buffer `backend` can write.
unsafe fn write(backend: sys::ggml_backend_t, t: *mut sys::ggml_tensor, bytes: &[u8], io: Io) {
    // SAFETY: per the contract; `bytes` is exactly the tensor's size (checked by ggml).
    unsafe {
        match io {
            Io::Sync => sys::ggml_backend_tensor_set(t, bytes.as_ptr().cast(), 0, bytes.len()),
            Io::Async => sys::ggml_backend_tensor_set_async(backend, t, bytes.as_ptr().cast(), 0, bytes.len()),
            Io::TwoD => {
                let row = (*t).nb[1].min(bytes.len()).max(1);
                let rows = bytes.len() / row;
                sys::ggml_backend_tensor_set_2d(t, bytes.as_ptr().cast(), 0, row, rows, row, row);
                let done = rows * row;
                if done < bytes.len() {
                    sys::ggml_backend_tensor_set(t, bytes[done..].as_ptr().cast(), done, bytes.len() - done);
                }
            }
        }
    }
}

/// # Safety
/// `t` is allocated in a buffer `backend` can read.
unsafe fn read(backend: sys::ggml_backend_t, t: *mut sys::ggml_tensor, io: Io) -> Vec<u8> {
    // SAFETY: per the contract; the vector holds the tensor's bytes.
    unsafe {
        let n = sys::ggml_nbytes(t);
        let mut out = vec![0u8; n];
        match io {
            Io::Sync => sys::ggml_backend_tensor_get(t, out.as_mut_ptr().cast(), 0, n),
            Io::Async => {
                sys::ggml_backend_tensor_get_async(backend, t, out.as_mut_ptr().cast(), 0, n);
                sys::ggml_backend_synchronize(backend);
            }
            Io::TwoD => {
                let row = (*t).nb[1].min(n).max(1);
                let rows = n / row;
                sys::ggml_backend_tensor_get_2d(t, out.as_mut_ptr().cast(), 0, row, rows, row, row);
                if rows * row < n {
                    let done = rows * row;
                    sys::ggml_backend_tensor_get(t, out[done..].as_mut_ptr().cast(), done, n - done);
                }
            }
        }
        out
    }
}

/// # Safety
/// `t` is a live tensor.
unsafe fn decode(t: *mut sys::ggml_tensor, bytes: &[u8]) -> Result<Vec<f32>, String> {
    // SAFETY: per the contract.
    let (ty, contiguous) = unsafe { ((*t).type_, sys::ggml_is_contiguous(t)) };
    if !contiguous {
        return Err(format!("output '{}' is not contiguous", unsafe { name_of(t) }));
    }
    Ok(match ElemType::from_ggml(ty) {
        Some(ElemType::F32) => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        Some(ElemType::F16) => bytes
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Some(ElemType::I32) => bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as f32)
            .collect(),
        Some(q) if q.is_quantized() => {
            let n = bytes.len() / q.type_size() * q.block_size();
            let mut out = vec![0f32; n];
            // SAFETY: ggml's row dequantizer for a type it knows, over whole blocks.
            let f = unsafe { (*sys::ggml_get_type_traits(q.ggml_id())).to_float }.ok_or("no to_float")?;
            unsafe { f(bytes.as_ptr().cast(), out.as_mut_ptr(), n as i64) };
            out
        }
        _ => return Err(format!("output type {ty} not decoded by the harness")),
    })
}

/// # Safety
/// `t` is a live tensor.
pub unsafe fn name_of(t: *const sys::ggml_tensor) -> String {
    // SAFETY: ggml's name field is NUL-terminated within its 64 bytes.
    unsafe { CStr::from_ptr((*t).name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// `name (OP, type[ne])` for messages.
///
/// # Safety
/// `t` is a live tensor.
unsafe fn describe(t: *const sys::ggml_tensor) -> String {
    // SAFETY: per the contract; ggml's name functions return static strings.
    unsafe {
        let op = CStr::from_ptr(sys::ggml_op_desc(t)).to_string_lossy();
        let ty = CStr::from_ptr(sys::ggml_type_name((*t).type_)).to_string_lossy();
        let ne = (*t).ne;
        format!("'{}' ({op}, {ty}[{},{},{},{}])", name_of(t), ne[0], ne[1], ne[2], ne[3])
    }
}

pub fn dev_name(dev: sys::ggml_backend_dev_t) -> String {
    // SAFETY: a registered device returns a static name.
    unsafe { CStr::from_ptr(sys::ggml_backend_dev_name(dev)) }
        .to_string_lossy()
        .into_owned()
}

/// A backend on `dev`, freed on drop.
pub struct BackendHandle(pub sys::ggml_backend_t);

impl BackendHandle {
    pub fn new(dev: sys::ggml_backend_dev_t) -> BackendHandle {
        // SAFETY: a registered device; NULL params.
        let b = unsafe { sys::ggml_backend_dev_init(dev, std::ptr::null()) };
        assert!(!b.is_null(), "ggml_backend_dev_init({}) returned NULL", dev_name(dev));
        BackendHandle(b)
    }
}

impl Drop for BackendHandle {
    fn drop(&mut self) {
        // SAFETY: made by ggml_backend_dev_init, freed once.
        unsafe { sys::ggml_backend_free(self.0) }
    }
}

/// NMSE = Σ(a−b)²/Σa² of `b` against the reference `a`.
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (x as f64).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Runs `build` on ggml's CPU and on TANDEM_HOST with the same inputs and compares every
/// output: finite, same length, NMSE ≤ `tol` (DESIGN.md's thresholds).
pub fn check_case(case: &str, tol: f64, io: Io, build: Build) {
    let d = devices();
    let (cpu, tan) = (BackendHandle::new(d.cpu), BackendHandle::new(d.tandem));
    let want = run_on(cpu.0, build, 7, Io::Sync).unwrap_or_else(|e| panic!("{case} on ggml CPU: {e}"));
    let got = run_on(tan.0, build, 7, io).unwrap_or_else(|e| panic!("{case} on TANDEM_HOST: {e}"));
    compare(case, tol, &want, &got);
}

/// Compares outputs of the reference (`want`) and tandem (`got`).
pub fn compare(case: &str, tol: f64, want: &[Output], got: &[Output]) {
    assert_eq!(want.len(), got.len(), "{case}: output count");
    for (w, g) in want.iter().zip(got) {
        assert_eq!(w.values.len(), g.values.len(), "{case}/{}: length", w.name);
        assert!(
            w.values.iter().all(|v| v.is_finite()),
            "{case}/{}: ggml CPU produced NaN/Inf",
            w.name
        );
        assert!(
            g.values.iter().all(|v| v.is_finite()),
            "{case}/{}: TANDEM_HOST produced NaN/Inf",
            w.name
        );
        let e = nmse(&w.values, &g.values);
        assert!(e <= tol, "{case}/{}: NMSE {e:.3e} > {tol:.0e} vs ggml CPU", w.name);
    }
}
