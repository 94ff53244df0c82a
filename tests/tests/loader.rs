//! The real ggml (shared build from `llama-cpp-sys-2`) loads `libggml_tandem.so` with
//! `ggml_backend_load`, enumerates TANDEM_HOST, and computes graphs built with ggml's own API on
//! TANDEM_HOST and on ggml's CPU backend; results must agree within DESIGN.md's thresholds.
//! Each op family is its own test so one missing CPU kernel does not hide the others.
//!
//! The plugin is the cdylib cargo builds beside the test binaries (`tandem-capi` is a dependency
//! of this crate), or `$TANDEM_PLUGIN`. Tests that need a different environment
//! (`TANDEM_HOST_DEVICE=0`, an injected panic) re-run this binary as a child process.

#[path = "loader/harness.rs"]
mod harness;

use harness::{check_case, compare, dev_name, devices, run_on, BackendHandle, Ctx, Io};
use llama_cpp_sys_2 as sys;
use std::ffi::{CStr, CString};
use std::process::Command;
use tandem_graph::ElemType;

/// MUL_MAT / MUL_MAT_ID / FLASH_ATTN_EXT.
const TOL_MATMUL: f64 = 5e-4;
const TOL_SOFTMAX: f64 = 1e-6;
/// Elementwise, norms, rope, get_rows, copies.
const TOL_EXACTISH: f64 = 1e-7;

/// Names `t` (outputs are reported by name).
///
/// # Safety
/// `t` is a live tensor.
unsafe fn named(t: *mut sys::ggml_tensor, name: &str) -> *mut sys::ggml_tensor {
    let c = CString::new(name).unwrap();
    // SAFETY: per the contract; ggml copies the name.
    unsafe { sys::ggml_set_name(t, c.as_ptr()) }
}

use ElemType::{F16, F32, Q4_0, Q8_0};

// ---------------------------------------------------------------- registry and devices

#[test]
fn enumerates_tandem_host() {
    let d = devices();
    // SAFETY: ggml's registry/device API on handles it returned; out-structs are plain data.
    unsafe {
        assert_eq!(
            CStr::from_ptr(sys::ggml_backend_reg_name(d.reg)).to_str().unwrap(),
            "TANDEM"
        );
        let n = sys::ggml_backend_reg_dev_count(d.reg);
        let names: Vec<String> = (0..n)
            .map(|i| dev_name(sys::ggml_backend_reg_dev_get(d.reg, i)))
            .collect();
        assert!(names.iter().any(|n| n == "TANDEM_HOST"), "devices: {names:?}");
        assert_eq!(sys::ggml_backend_dev_backend_reg(d.tandem), d.reg);
        assert_eq!(
            sys::ggml_backend_dev_type(d.tandem),
            sys::GGML_BACKEND_DEVICE_TYPE_ACCEL
        );
        let mut props: sys::ggml_backend_dev_props = std::mem::zeroed();
        sys::ggml_backend_dev_get_props(d.tandem, &mut props);
        assert_eq!(CStr::from_ptr(props.name).to_str().unwrap(), "TANDEM_HOST");
        let desc = CStr::from_ptr(props.description).to_string_lossy();
        assert!(desc.contains("tandem"), "description {desc:?}");
        assert!(props.memory_total > 0 && props.memory_free <= props.memory_total);
        assert!(props.caps.async_ && props.caps.events && props.caps.buffer_from_host_ptr && props.caps.mmap_support);
        let buft = sys::ggml_backend_dev_buffer_type(d.tandem);
        assert_eq!(
            CStr::from_ptr(sys::ggml_backend_buft_name(buft)).to_str().unwrap(),
            "TANDEM_HOST"
        );
        assert!(sys::ggml_backend_buft_is_host(buft));
        assert!(sys::ggml_backend_dev_supports_buft(d.tandem, buft));
        // ggml's CPU buffers are host memory the host device reads directly.
        assert!(sys::ggml_backend_dev_supports_buft(
            d.tandem,
            sys::ggml_backend_dev_buffer_type(d.cpu)
        ));

        for f in [
            "ggml_backend_set_n_threads",
            "ggml_backend_get_features",
            "ggml_backend_dev_get_extra_bufts",
        ] {
            let c = CString::new(f).unwrap();
            assert!(
                !sys::ggml_backend_reg_get_proc_address(d.reg, c.as_ptr()).is_null(),
                "{f}"
            );
        }
        assert!(sys::ggml_backend_reg_get_proc_address(d.reg, c"ggml_backend_no_such_function".as_ptr()).is_null());

        let feats: sys::ggml_backend_get_features_t = std::mem::transmute(sys::ggml_backend_reg_get_proc_address(
            d.reg,
            c"ggml_backend_get_features".as_ptr(),
        ));
        let mut f = feats.unwrap()(d.reg);
        let mut n_feats = 0;
        while !(*f).name.is_null() {
            assert!(!(*f).value.is_null());
            n_feats += 1;
            f = f.add(1);
        }
        assert!(n_feats < 64);
        let extra: sys::ggml_backend_dev_get_extra_bufts_t = std::mem::transmute(
            sys::ggml_backend_reg_get_proc_address(d.reg, c"ggml_backend_dev_get_extra_bufts".as_ptr()),
        );
        assert!(
            (*extra.unwrap()(d.tandem)).is_null(),
            "extra buffer types list is empty"
        );

        let b = BackendHandle::new(d.tandem);
        assert_eq!(
            CStr::from_ptr(sys::ggml_backend_name(b.0)).to_str().unwrap(),
            "TANDEM_HOST"
        );
        let set_threads: sys::ggml_backend_set_n_threads_t = std::mem::transmute(
            sys::ggml_backend_reg_get_proc_address(d.reg, c"ggml_backend_set_n_threads".as_ptr()),
        );
        set_threads.unwrap()(b.0, 3);
        sys::ggml_backend_synchronize(b.0);
    }
}

// ---------------------------------------------------------------- buffers, copies, events

#[test]
fn buffer_entries_round_trip() {
    let d = devices();
    let b = BackendHandle::new(d.tandem);
    let cpu = BackendHandle::new(d.cpu);
    // SAFETY: ggml's tensor/buffer API on tensors allocated below; every slice passed holds the
    // byte counts given.
    unsafe {
        let ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: 16 * sys::ggml_tensor_overhead(),
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        });
        let t = sys::ggml_new_tensor_2d(ctx, F32.ggml_id(), 16, 8);
        let buf = sys::ggml_backend_alloc_ctx_tensors(ctx, b.0);
        assert!(!buf.is_null());
        assert!(sys::ggml_backend_buffer_is_host(buf));
        assert_eq!(
            CStr::from_ptr(sys::ggml_backend_buffer_name(buf)).to_str().unwrap(),
            "TANDEM_HOST"
        );
        assert_eq!(sys::ggml_backend_buffer_get_base(buf) as usize % 32, 0);
        let n = sys::ggml_nbytes(t);
        let src: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
        let mut back = vec![0u8; n];
        sys::ggml_backend_tensor_set(t, src.as_ptr().cast(), 0, n);
        sys::ggml_backend_tensor_get(t, back.as_mut_ptr().cast(), 0, n);
        assert_eq!(back, src);

        sys::ggml_backend_tensor_memset(t, 0xEE, 8, 20);
        sys::ggml_backend_tensor_get(t, back.as_mut_ptr().cast(), 0, n);
        assert_eq!(&back[..8], &src[..8]);
        assert!(back[8..28].iter().all(|&x| x == 0xEE));
        assert_eq!(&back[28..], &src[28..]);

        // 2-D: 5 copies of 12 bytes, 64 apart in the tensor and 12 apart in host memory.
        let rows: Vec<u8> = (0..60).map(|i| 100 + i as u8).collect();
        sys::ggml_backend_tensor_set_2d(t, rows.as_ptr().cast(), 4, 12, 5, 64, 12);
        let mut rows_back = vec![0u8; 60];
        sys::ggml_backend_tensor_get_2d(t, rows_back.as_mut_ptr().cast(), 4, 12, 5, 64, 12);
        assert_eq!(rows_back, rows);
        sys::ggml_backend_tensor_get(t, back.as_mut_ptr().cast(), 0, n);
        assert_eq!(&back[4..16], &rows[..12]);
        assert_eq!(&back[68..80], &rows[12..24]);

        sys::ggml_backend_buffer_clear(buf, 0x11);
        sys::ggml_backend_tensor_get(t, back.as_mut_ptr().cast(), 0, n);
        assert!(back.iter().all(|&x| x == 0x11));

        // Copy from a CPU-backend tensor through the async copy entry, fenced by an event.
        let cctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: 4 * sys::ggml_tensor_overhead(),
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        });
        let ct = sys::ggml_new_tensor_2d(cctx, F32.ggml_id(), 16, 8);
        let cbuf = sys::ggml_backend_alloc_ctx_tensors(cctx, cpu.0);
        sys::ggml_backend_tensor_set(ct, src.as_ptr().cast(), 0, n);
        sys::ggml_backend_tensor_copy_async(cpu.0, b.0, ct, t);
        let ev = sys::ggml_backend_event_new(d.tandem);
        assert!(!ev.is_null());
        sys::ggml_backend_event_record(ev, b.0);
        sys::ggml_backend_event_wait(b.0, ev);
        sys::ggml_backend_event_synchronize(ev);
        sys::ggml_backend_event_free(ev);
        sys::ggml_backend_tensor_get(t, back.as_mut_ptr().cast(), 0, n);
        assert_eq!(back, src);

        // A buffer over host memory tandem does not own (how llama.cpp maps model files).
        let mut host_mem = vec![0u8; 4096];
        let hb = sys::ggml_backend_dev_buffer_from_host_ptr(d.tandem, host_mem.as_mut_ptr().cast(), 4096, 4096);
        assert!(!hb.is_null());
        assert_eq!(
            sys::ggml_backend_buffer_get_base(hb) as usize,
            host_mem.as_ptr() as usize
        );
        sys::ggml_backend_buffer_clear(hb, 0x42);
        sys::ggml_backend_buffer_free(hb);
        assert!(host_mem.iter().all(|&x| x == 0x42));

        sys::ggml_backend_buffer_free(cbuf);
        sys::ggml_free(cctx);
        sys::ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
}

// ---------------------------------------------------------------- op families

#[test]
fn op_add() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("add", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        let a = c.input(F32, &[64, 5, 3], "a");
        let b = c.input(F32, &[64, 5, 3], "b");
        let row = c.input(F32, &[64, 1, 3], "row");
        vec![
            named(sys::ggml_add(c.ctx, a, b), "a+b"),
            named(sys::ggml_add(c.ctx, a, row), "a+row"),
        ]
    });
}

#[test]
fn op_mul() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("mul", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        let a = c.input(F32, &[96, 4, 2], "a");
        let b = c.input(F32, &[96, 4, 2], "b");
        let w = c.input(F32, &[96], "w");
        vec![
            named(sys::ggml_mul(c.ctx, a, b), "a*b"),
            named(sys::ggml_mul(c.ctx, a, w), "a*w"),
        ]
    });
}

#[test]
fn op_rms_norm() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("rms_norm", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        let x = c.input(F32, &[256, 7], "x");
        let w = c.input(F32, &[256], "w");
        let n = named(sys::ggml_rms_norm(c.ctx, x, 1e-6), "norm");
        vec![n, named(sys::ggml_mul(c.ctx, n, w), "norm*w")]
    });
}

#[test]
fn op_soft_max() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("soft_max", TOL_SOFTMAX, Io::Sync, &|c: &mut Ctx| unsafe {
        let x = c.input(F32, &[32, 6, 4], "x");
        // A causal mask: query i sees keys 0..=i+26.
        let mask: Vec<f32> = (0..6)
            .flat_map(|i| (0..32).map(move |j| if j <= i + 26 { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        let m = c.input_values(F32, &[32, 6], "mask", &mask);
        vec![
            named(sys::ggml_soft_max(c.ctx, x), "softmax"),
            named(sys::ggml_soft_max_ext(c.ctx, x, m, 0.125, 0.0), "softmax_masked"),
        ]
    });
}

#[test]
fn op_rope() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("rope", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        let x = c.input(F32, &[64, 4, 5], "x");
        let pos = c.input_i32(&[5], "pos", &[3, 4, 5, 6, 90]);
        let rope = |mode: i32, n_dims: i32, name: &str| {
            named(
                sys::ggml_rope_ext(
                    c.ctx,
                    x,
                    pos,
                    std::ptr::null_mut(),
                    n_dims,
                    mode,
                    4096,
                    10000.0,
                    1.0,
                    0.0,
                    1.0,
                    32.0,
                    1.0,
                ),
                name,
            )
        };
        vec![
            rope(0, 64, "rope_normal"),
            rope(2, 64, "rope_neox"),
            rope(2, 32, "rope_neox_partial"),
        ]
    });
}

fn mul_mat_case(ty: ElemType) {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case(&format!("mul_mat_{ty}"), TOL_MATMUL, Io::Sync, &|c: &mut Ctx| unsafe {
        let w = c.input(ty, &[256, 48], "w");
        let x1 = c.input(F32, &[256, 1], "x1");
        let x7 = c.input(F32, &[256, 7], "x7");
        vec![
            named(sys::ggml_mul_mat(c.ctx, w, x1), "gemv"),
            named(sys::ggml_mul_mat(c.ctx, w, x7), "gemm"),
        ]
    });
}

#[test]
fn op_mul_mat_f16() {
    mul_mat_case(F16);
}

#[test]
fn op_mul_mat_q8_0() {
    mul_mat_case(Q8_0);
}

#[test]
fn op_mul_mat_q4_0() {
    mul_mat_case(Q4_0);
}

#[test]
fn op_get_rows() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("get_rows", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        let ids = c.input_i32(&[4], "ids", &[3, 0, 9, 3]);
        [F32, F16, Q8_0, Q4_0]
            .into_iter()
            .map(|ty| {
                let table = c.input(ty, &[64, 10], &format!("table_{ty}"));
                named(sys::ggml_get_rows(c.ctx, table, ids), &format!("rows_{ty}"))
            })
            .collect()
    });
}

#[test]
fn op_cpy() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("cpy", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        let a = c.input(F32, &[64, 6], "a");
        let h = c.input(F16, &[64, 6], "h");
        let to_f16 = c.input(F16, &[64, 6], "dst_f16");
        let to_f32 = c.input(F32, &[64, 6], "dst_f32");
        let to_q8 = c.input(Q8_0, &[64, 6], "dst_q8_0");
        for t in [to_f16, to_f32, to_q8] {
            c.mutable(t);
        }
        let p = sys::ggml_permute(c.ctx, c.input(F32, &[8, 6, 4], "p"), 1, 0, 2, 3);
        vec![
            named(sys::ggml_cpy(c.ctx, a, to_f16), "f32->f16"),
            named(sys::ggml_cpy(c.ctx, h, to_f32), "f16->f32"),
            named(sys::ggml_cpy(c.ctx, a, to_q8), "f32->q8_0"),
            named(sys::ggml_cont(c.ctx, p), "cont(permuted)"),
        ]
    });
}

#[test]
fn op_glu() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("glu", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        let a = c.input(F32, &[128, 5], "a");
        let g = c.input(F32, &[64, 5], "gate");
        let u = c.input(F32, &[64, 5], "up");
        vec![
            named(sys::ggml_swiglu(c.ctx, a), "swiglu"),
            named(sys::ggml_swiglu_split(c.ctx, g, u), "swiglu_split"),
        ]
    });
}

#[test]
fn op_glu_geglu() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("geglu", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        let a = c.input(F32, &[128, 5], "a");
        vec![named(sys::ggml_geglu(c.ctx, a), "geglu")]
    });
}

// ---------------------------------------------------------------- layouts and graph shapes

#[test]
fn views_and_permuted_inputs() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("views", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        // Rows stay contiguous (ggml's CPU binary ops need that); dims 1 and 2 swap.
        let a = c.input(F32, &[16, 8, 4], "a");
        let b = c.input(F32, &[16, 4, 8], "b");
        let pa = sys::ggml_permute(c.ctx, a, 0, 2, 1, 3);
        let m = c.input(F32, &[12, 9], "m");
        let x = c.input(F32, &[32, 10], "x");
        let nb1 = (*x).nb[1];
        let rows = sys::ggml_view_2d(c.ctx, x, 32, 4, nb1, 3 * nb1);
        vec![
            named(sys::ggml_add(c.ctx, pa, b), "permuted+b"),
            named(sys::ggml_cont(c.ctx, sys::ggml_transpose(c.ctx, m)), "cont(transpose)"),
            named(sys::ggml_rms_norm(c.ctx, rows, 1e-5), "norm(view rows 3..7)"),
        ]
    });
}

#[test]
fn mul_mat_permuted_inputs() {
    // Attention's KQ: both operands are permuted views, K in f16 as in a KV cache.
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("kq", TOL_MATMUL, Io::Sync, &|c: &mut Ctx| unsafe {
        let q = c.input(F32, &[64, 4, 3], "q");
        let k = c.input(F16, &[64, 4, 6], "k");
        let qp = sys::ggml_permute(c.ctx, q, 0, 2, 1, 3);
        let kp = sys::ggml_permute(c.ctx, k, 0, 2, 1, 3);
        vec![named(sys::ggml_mul_mat(c.ctx, kp, qp), "kq")]
    });
}

#[test]
fn in_place_ops() {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    check_case("in_place", TOL_EXACTISH, Io::Sync, &|c: &mut Ctx| unsafe {
        let a = c.input(F32, &[64, 3], "a");
        let b = c.input(F32, &[64, 3], "b");
        c.mutable(a);
        let s = sys::ggml_add_inplace(c.ctx, a, b);
        let s = sys::ggml_scale_inplace(c.ctx, s, 0.5);
        let n = c.input(F32, &[64, 3], "n");
        c.mutable(n);
        vec![
            named(s, "(a+b)*0.5 in a"),
            named(sys::ggml_rms_norm_inplace(c.ctx, n, 1e-6), "norm in n"),
        ]
    });
}

#[test]
fn several_graphs_in_a_row() {
    // The same backends run alternating graph shapes with fresh data: the plan cache must
    // serve each shape without mixing them up.
    let d = devices();
    let (cpu, tan) = (BackendHandle::new(d.cpu), BackendHandle::new(d.tandem));
    // SAFETY: ggml graph constructors on tensors of the case's context.
    let norm = |c: &mut Ctx| unsafe {
        let x = c.input(F32, &[128, 3], "x");
        let w = c.input(F32, &[128], "w");
        vec![named(
            sys::ggml_mul(c.ctx, sys::ggml_rms_norm(c.ctx, x, 1e-6), w),
            "norm*w",
        )]
    };
    // SAFETY: ggml graph constructors on tensors of the case's context.
    let gemv = |c: &mut Ctx| unsafe {
        let w = c.input(Q8_0, &[128, 32], "w");
        let x = c.input(F32, &[128, 1], "x");
        vec![named(sys::ggml_mul_mat(c.ctx, w, x), "gemv")]
    };
    for seed in 1..=3u64 {
        for (name, tol, build) in [
            ("norm", TOL_EXACTISH, &norm as harness::Build),
            ("gemv", TOL_MATMUL, &gemv as harness::Build),
        ] {
            let want = run_on(cpu.0, build, seed, Io::Sync).unwrap_or_else(|e| panic!("{name} on CPU: {e}"));
            let got =
                run_on(tan.0, build, seed, Io::Sync).unwrap_or_else(|e| panic!("{name} #{seed} on TANDEM_HOST: {e}"));
            compare(&format!("{name} #{seed}"), tol, &want, &got);
        }
    }
}

fn norm_add(c: &mut Ctx) -> Vec<*mut sys::ggml_tensor> {
    // SAFETY: ggml graph constructors on tensors of the case's context.
    unsafe {
        let x = c.input(F32, &[64, 5], "x");
        let y = c.input(F32, &[64, 5], "y");
        vec![named(
            sys::ggml_add(c.ctx, sys::ggml_rms_norm(c.ctx, x, 1e-6), y),
            "norm(x)+y",
        )]
    }
}

#[test]
fn async_set_get() {
    check_case("async", TOL_EXACTISH, Io::Async, &norm_add);
}

#[test]
fn two_d_set_get() {
    check_case("2d", TOL_EXACTISH, Io::TwoD, &norm_add);
}

// ---------------------------------------------------------------- robustness

/// A graph whose only node is a view: needs no kernel, so it shows the device still works.
///
/// # Safety
/// `backend` is live.
unsafe fn run_view_graph(backend: sys::ggml_backend_t) -> sys::ggml_status {
    // SAFETY: ggml's API on objects made and freed here.
    unsafe {
        let ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: 8 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead(),
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        });
        let a = sys::ggml_new_tensor_2d(ctx, F32.ggml_id(), 8, 4);
        let r = sys::ggml_reshape_1d(ctx, a, 32);
        let gf = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(gf, r);
        let buf = sys::ggml_backend_alloc_ctx_tensors(ctx, backend);
        let status = sys::ggml_backend_graph_compute(backend, gf);
        sys::ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
        status
    }
}

#[test]
fn unsupported_node_fails_cleanly() {
    let d = devices();
    let b = BackendHandle::new(d.tandem);
    // SAFETY: ggml's API on objects made and freed here.
    unsafe {
        let ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: 8 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead(),
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        });
        let a = sys::ggml_new_tensor_1d(ctx, F32.ggml_id(), 16);
        // CUMSUM is an op tandem does not know.
        let sq = named(sys::ggml_cumsum(ctx, a), "unsupported_cumsum");
        let gf = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(gf, sq);
        assert!(
            !sys::ggml_backend_dev_supports_op(d.tandem, sq),
            "supports_op must refuse CUMSUM"
        );
        let buf = sys::ggml_backend_alloc_ctx_tensors(ctx, b.0);
        let status = sys::ggml_backend_graph_compute(b.0, gf);
        assert_eq!(status, sys::GGML_STATUS_FAILED, "a graph with an unknown op must fail");
        sys::ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
        // The same backend keeps working.
        assert_eq!(run_view_graph(b.0), sys::GGML_STATUS_SUCCESS);
    }
}

/// Set in a child process to the name of the test it runs.
const CHILD_ENV: &str = "TANDEM_LOADER_CHILD";

fn is_child(test: &str) -> bool {
    std::env::var(CHILD_ENV).as_deref() == Ok(test)
}

/// Re-runs this test binary for exactly `test` with extra environment; returns (ok, stdout,
/// stderr).
fn run_child(test: &str, envs: &[(&str, &str)]) -> (bool, String, String) {
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, test)
        .envs(envs.iter().copied())
        .output()
        .expect("spawning the child test process");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn zero_devices_is_clean() {
    let (ok, stdout, stderr) = run_child("child_zero_devices", &[("TANDEM_HOST_DEVICE", "0")]);
    assert!(
        ok && stdout.contains("ZERO_DEVICES_OK"),
        "child failed:\n{stdout}\n{stderr}"
    );
}

#[test]
fn child_zero_devices() {
    if !is_child("child_zero_devices") {
        return;
    }
    let reg = harness::load_plugin().unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: ggml's registry API on handles it returned.
    unsafe {
        assert_eq!(sys::ggml_backend_reg_dev_count(reg), 0);
        assert!(sys::ggml_backend_dev_by_name(c"TANDEM_HOST".as_ptr()).is_null());
        let cpu = sys::ggml_backend_dev_by_name(c"CPU".as_ptr());
        assert!(!cpu.is_null(), "ggml's own devices are unaffected");
        let b = BackendHandle::new(cpu);
        assert_eq!(run_view_graph(b.0), sys::GGML_STATUS_SUCCESS);
    }
    println!("ZERO_DEVICES_OK");
}

#[test]
fn injected_panic_is_caught() {
    let (ok, stdout, stderr) = run_child("child_injected_panic", &[("TANDEM_TEST_PANIC", "graph_compute")]);
    assert!(
        ok && stdout.contains("PANIC_CAUGHT_OK"),
        "child failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("graph_compute: internal error caught at the ABI boundary"),
        "the caught panic is reported:\n{stderr}"
    );
}

#[test]
fn child_injected_panic() {
    if !is_child("child_injected_panic") {
        return;
    }
    let d = devices();
    let b = BackendHandle::new(d.tandem);
    // SAFETY: graphs on live backends.
    unsafe {
        assert_eq!(
            run_view_graph(b.0),
            sys::GGML_STATUS_FAILED,
            "the panic becomes a failed status"
        );
        let cpu = BackendHandle::new(d.cpu);
        assert_eq!(
            run_view_graph(cpu.0),
            sys::GGML_STATUS_SUCCESS,
            "the host keeps running"
        );
    }
    println!("PANIC_CAUGHT_OK");
}
