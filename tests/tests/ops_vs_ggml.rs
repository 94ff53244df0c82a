//! Ops built with ggml's own API (`ggml_sub`, `ggml_concat`, `ggml_pad_ext`, …) computed by
//! ggml's CPU backend and by TANDEM_HOST through the plugin's C ABI, on the same inputs: the
//! op params as ggml lays them out reach tandem intact, and both give the same values.

use llama_cpp_sys_2 as g;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use tandem_tests::plugin::{load_tandem_host, plugin_path};

type Build = unsafe fn(*mut g::ggml_context, *mut g::ggml_tensor, *mut g::ggml_tensor) -> *mut g::ggml_tensor;

/// Builds `op` on two f32 inputs `[12, 5, 3, 2]` (the second `[12, 5, 3, 1]` and filled from
/// `lo..hi`) on `dev`'s backend and returns the result as f32.
unsafe fn run(dev: g::ggml_backend_dev_t, op: Build, lo: f32, hi: f32) -> Result<Vec<f32>, String> {
    unsafe {
        let ctx = g::ggml_init(g::ggml_init_params {
            mem_size: 16 * g::ggml_tensor_overhead() + g::ggml_graph_overhead(),
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        });
        let a = g::ggml_new_tensor_4d(ctx, g::GGML_TYPE_F32, 12, 5, 3, 2);
        let b = g::ggml_new_tensor_4d(ctx, g::GGML_TYPE_F32, 12, 5, 3, 1);
        let out = op(ctx, a, b);
        let graph = g::ggml_new_graph(ctx);
        g::ggml_build_forward_expand(graph, out);
        let backend = g::ggml_backend_dev_init(dev, std::ptr::null());
        if backend.is_null() {
            g::ggml_free(ctx);
            return Err("backend init failed".into());
        }
        let buffer = g::ggml_backend_alloc_ctx_tensors(ctx, backend);
        let mut rng = Pcg64::seed_from_u64(5);
        for t in [a, b] {
            let vals: Vec<f32> = (0..g::ggml_nelements(t)).map(|_| rng.random_range(lo..hi)).collect();
            g::ggml_backend_tensor_set(t, vals.as_ptr().cast(), 0, g::ggml_nbytes(t));
        }
        let status = g::ggml_backend_graph_compute(backend, graph);
        let mut got = vec![0f32; g::ggml_nelements(out) as usize];
        if status == g::GGML_STATUS_SUCCESS {
            g::ggml_backend_tensor_get(out, got.as_mut_ptr().cast(), 0, g::ggml_nbytes(out));
        }
        g::ggml_backend_buffer_free(buffer);
        g::ggml_backend_free(backend);
        g::ggml_free(ctx);
        if status != g::GGML_STATUS_SUCCESS {
            return Err(format!("graph compute returned status {status}"));
        }
        Ok(got)
    }
}

macro_rules! ops {
    ($($name:literal, $lo:expr, $hi:expr, |$ctx:ident, $a:ident, $b:ident| $body:expr;)*) => {
        vec![$({
            unsafe fn f($ctx: *mut g::ggml_context, $a: *mut g::ggml_tensor, $b: *mut g::ggml_tensor) -> *mut g::ggml_tensor {
                let _ = (&$a, &$b);
                // SAFETY: ggml builds the node from live tensors of `ctx`.
                unsafe { $body }
            }
            ($name, f as Build, $lo, $hi)
        }),*]
    };
}

#[test]
fn new_ops_match_ggml_cpu_through_the_plugin() {
    // Beside a GPU the plugin offers TANDEM_HOST only when asked; the variable is read at load.
    std::env::set_var("TANDEM_HOST_DEVICE", "1");
    let plugin = plugin_path().expect("the plugin beside the tests");
    let tandem = load_tandem_host(&plugin).expect("TANDEM_HOST loads");
    // SAFETY: the name is NUL-terminated; ggml's registry owns the device.
    let cpu = unsafe { g::ggml_backend_dev_by_name(c"CPU".as_ptr()) };
    assert!(!cpu.is_null(), "ggml's CPU backend is registered");
    let cases = ops! {
        "SUB (src1 broadcast)", -1.0, 1.0, |c, a, b| g::ggml_sub(c, a, b);
        "SQR", -2.0, 2.0, |c, a, b| g::ggml_sqr(c, a);
        "SQRT", 0.01, 4.0, |c, a, b| g::ggml_sqrt(c, a);
        "LOG", 0.01, 4.0, |c, a, b| g::ggml_log(c, a);
        "SIN", -4.0, 4.0, |c, a, b| g::ggml_sin(c, a);
        "COS", -4.0, 4.0, |c, a, b| g::ggml_cos(c, a);
        "FLOOR", -3.0, 3.0, |c, a, b| g::ggml_floor(c, a);
        "CEIL", -3.0, 3.0, |c, a, b| g::ggml_ceil(c, a);
        "ROUND", -3.0, 3.0, |c, a, b| g::ggml_round(c, a);
        "TRUNC", -3.0, 3.0, |c, a, b| g::ggml_trunc(c, a);
        "L2_NORM", -1.0, 1.0, |c, a, b| g::ggml_l2_norm(c, a, 1e-6);
        "REPEAT", -1.0, 1.0, |c, a, b| g::ggml_repeat_4d(c, b, 24, 10, 3, 2);
        "CONCAT dim 1", -1.0, 1.0, |c, a, b| g::ggml_concat(c, b, b, 1);
        "CONCAT dim 3", -1.0, 1.0, |c, a, b| g::ggml_concat(c, a, b, 3);
        "CONCAT of a transposed view", -1.0, 1.0, |c, a, b| g::ggml_concat(c, g::ggml_transpose(c, b), g::ggml_transpose(c, b), 0);
        "PAD", -1.0, 1.0, |c, a, b| g::ggml_pad_ext(c, a, 1, 2, 0, 3, 2, 0, 0, 1);
        "PAD circular", -1.0, 1.0, |c, a, b| g::ggml_pad_ext_circular(c, a, 1, 2, 0, 3, 2, 0, 0, 1);
    };
    let mut failed = Vec::new();
    for (name, op, lo, hi) in cases {
        // SAFETY: both devices are live for the process; `op` builds from the given tensors.
        let (want, got) = unsafe { (run(cpu, op, lo, hi), run(tandem, op, lo, hi)) };
        let (want, got) = match (want, got) {
            (Ok(w), Ok(g)) => (w, g),
            (w, g) => {
                failed.push(format!("{name}: ggml {:?}, tandem {:?}", w.err(), g.err()));
                continue;
            }
        };
        let worst = want
            .iter()
            .zip(&got)
            .map(|(w, g)| (w - g).abs() / w.abs().max(1.0))
            // A NaN on either side counts as the worst difference (max would drop it).
            .map(|d| if d.is_nan() { f32::INFINITY } else { d })
            .fold(0f32, f32::max);
        println!(
            "{name:<28} {} values, largest relative difference {worst:.2e}",
            want.len()
        );
        if want.len() != got.len() || worst > 2e-6 {
            failed.push(format!("{name}: largest relative difference {worst:e}"));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
