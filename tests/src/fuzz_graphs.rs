//! Random ggml graphs through the plugin's C ABI: each case builds a small graph with ggml's own
//! API (shapes with 0/1 extents, views, permutes, reshapes, every op family with random types),
//! then often breaks one node the way only a hand-made struct can (a null or foreign source, a
//! type or shape that no longer matches its strides, random op params, another op id, a source
//! that was never allocated). Every tensor gets its own span of one TANDEM_HOST buffer with
//! sentinel bytes between the spans; the graph is computed with `ggml_backend_graph_compute`.
//!
//! A case passes when the call returns, no sentinel changed, and a `GGML_STATUS_FAILED` came
//! with a logged line (success is allowed: ggml's API built a graph the device accepts).
//! Constructors are only called with arguments ggml's own asserts accept, so ggml never aborts.

use crate::plugin;
use llama_cpp_sys_2 as g;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

/// Bytes of sentinel between and around the tensors' spans.
const GAP: usize = 64;
const SENTINEL: u8 = 0xA5;
const MAX_TENSORS: usize = 64;

/// The tandem error lines logged since the last [`take_log`].
static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

unsafe extern "C" fn collect_log(level: g::ggml_log_level, text: *const c_char, _user: *mut c_void) {
    if level == g::GGML_LOG_LEVEL_ERROR && !text.is_null() {
        // SAFETY: ggml passes a NUL-terminated line that lives for the call.
        let line = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
        LOG.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
}

fn take_log() -> Vec<String> {
    std::mem::take(&mut *LOG.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Outcome counts over a run.
#[derive(Default, Debug)]
pub struct Summary {
    pub cases: u64,
    pub computed: u64,
    /// Refusals by reason (the logged message with names and numbers stripped).
    pub refusals: BTreeMap<String, u64>,
    /// Failed cases: a description of each (the first few are kept whole).
    pub failures: Vec<String>,
    pub failed: u64,
    pub overruns: u64,
    pub panics: u64,
}

/// The loaded plugin's TANDEM_HOST backend, shared by every case.
pub struct Fuzzer {
    backend: g::ggml_backend_t,
    buft: g::ggml_backend_buffer_type_t,
}

impl Fuzzer {
    pub fn new() -> Result<Fuzzer, String> {
        let path = plugin::plugin_path()?;
        let dev = plugin::load_tandem_host(&path)?;
        // SAFETY: ggml's device API on a device from its registry; the log callback is a plain
        // function living for the process.
        unsafe {
            let backend = g::ggml_backend_dev_init(dev, std::ptr::null());
            if backend.is_null() {
                return Err("ggml_backend_dev_init(TANDEM_HOST) failed".into());
            }
            g::ggml_log_set(Some(collect_log), std::ptr::null_mut());
            Ok(Fuzzer {
                backend,
                buft: g::ggml_backend_dev_buffer_type(dev),
            })
        }
    }

    /// Runs cases `seed, seed+1, ...` (`cases` of them), calling `progress` now and then.
    pub fn run(&self, seed: u64, cases: u64, mut progress: impl FnMut(&Summary)) -> Summary {
        let mut s = Summary::default();
        for i in 0..cases {
            let case_seed = seed.wrapping_add(i);
            // SAFETY: each case builds and frees its own context and buffer.
            unsafe { self.case(case_seed, &mut s) };
            s.cases += 1;
            if s.cases % 10_000 == 0 {
                progress(&s);
            }
        }
        s
    }

    unsafe fn case(&self, seed: u64, s: &mut Summary) {
        let mut rng = Pcg64::seed_from_u64(seed);
        // SAFETY (whole case): ggml's API as documented on the context, tensors and buffer made
        // here; fields are changed only on tensors of this context, before allocation.
        unsafe {
            let params = g::ggml_init_params {
                mem_size: MAX_TENSORS * g::ggml_tensor_overhead() + g::ggml_graph_overhead_custom(MAX_TENSORS, false),
                mem_buffer: std::ptr::null_mut(),
                no_alloc: true,
            };
            let ctx = g::ggml_init(params);
            let stray_ctx = g::ggml_init(g::ggml_init_params {
                mem_size: 4 * g::ggml_tensor_overhead(),
                mem_buffer: std::ptr::null_mut(),
                no_alloc: true,
            });
            let graph = g::ggml_new_graph_custom(ctx, MAX_TENSORS, false);
            let nodes = build(ctx, graph, &mut rng);
            if !nodes.is_empty() && rng.random_bool(0.5) {
                let victim = nodes[rng.random_range(0..nodes.len())];
                mutate(victim, ctx, stray_ctx, &mut rng);
            }
            match self.allocate_and_compute(ctx, graph, &mut rng) {
                Ok(outcome) => match outcome {
                    Outcome::Computed => s.computed += 1,
                    Outcome::Refused(reason) => *s.refusals.entry(reason).or_default() += 1,
                    Outcome::Panicked(line) => {
                        s.panics += 1;
                        s.fail(seed, format!("caught panic: {line}"));
                    }
                },
                Err(e) => {
                    if e.starts_with("sentinel") {
                        s.overruns += 1;
                    }
                    s.fail(seed, e);
                }
            }
            g::ggml_free(stray_ctx);
            g::ggml_free(ctx);
        }
    }

    /// Places every tensor of `ctx` in one buffer with sentinels around each span, fills the
    /// leaves with random bytes, computes, and checks the sentinels.
    unsafe fn allocate_and_compute(
        &self,
        ctx: *mut g::ggml_context,
        graph: *mut g::ggml_cgraph,
        rng: &mut Pcg64,
    ) -> Result<Outcome, String> {
        // SAFETY: as in case().
        unsafe {
            let align = g::ggml_backend_buft_get_alignment(self.buft).max(1);
            let mut roots = Vec::new();
            let mut views = Vec::new();
            let mut t = g::ggml_get_first_tensor(ctx);
            let mut end = GAP;
            while !t.is_null() {
                if (*t).view_src.is_null() {
                    let off = end.next_multiple_of(align);
                    let n = g::ggml_backend_buft_get_alloc_size(self.buft, t);
                    roots.push((t, off, n));
                    end = off + n + GAP;
                } else {
                    views.push(t);
                }
                t = g::ggml_get_next_tensor(ctx, t);
            }
            let total = end.next_multiple_of(align);
            let buffer = g::ggml_backend_buft_alloc_buffer(self.buft, total);
            if buffer.is_null() {
                return Err(format!("allocating {total} bytes failed"));
            }
            let base = g::ggml_backend_buffer_get_base(buffer) as *mut u8;
            std::ptr::write_bytes(base, SENTINEL, total);
            let result = (|| {
                for &(t, off, n) in &roots {
                    if g::ggml_backend_tensor_alloc(buffer, t, base.add(off).cast()) != g::GGML_STATUS_SUCCESS {
                        return Err(format!("ggml_backend_tensor_alloc refused {n} bytes"));
                    }
                    if (*t).op == g::GGML_OP_NONE && n > 0 {
                        let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                        std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(off), n);
                    }
                }
                for &v in &views {
                    if (*v).buffer.is_null() && g::ggml_backend_view_init(v) != g::GGML_STATUS_SUCCESS {
                        return Err("ggml_backend_view_init failed".into());
                    }
                }
                take_log();
                let status = g::ggml_backend_graph_compute(self.backend, graph);
                let log = take_log();
                check_sentinels(base, total, &roots)?;
                if let Some(p) = log.iter().find(|l| l.contains("panic")) {
                    return Ok(Outcome::Panicked(p.trim_end().to_string()));
                }
                match status {
                    g::GGML_STATUS_SUCCESS => Ok(Outcome::Computed),
                    g::GGML_STATUS_FAILED => match log.first() {
                        Some(line) => Ok(Outcome::Refused(reason_of(line))),
                        None => Err("GGML_STATUS_FAILED without a logged line".into()),
                    },
                    other => Err(format!("status {other}, not SUCCESS or FAILED")),
                }
            })();
            g::ggml_backend_buffer_free(buffer);
            result
        }
    }
}

impl Drop for Fuzzer {
    fn drop(&mut self) {
        // SAFETY: made in new(), freed once.
        unsafe { g::ggml_backend_free(self.backend) };
    }
}

enum Outcome {
    Computed,
    Refused(String),
    Panicked(String),
}

impl Summary {
    fn fail(&mut self, seed: u64, what: String) {
        self.failed += 1;
        if self.failures.len() < 20 {
            self.failures.push(format!("seed {seed}: {what}"));
        }
    }
}

/// The gaps before, between and after the spans must still hold the sentinel.
unsafe fn check_sentinels(
    base: *const u8,
    total: usize,
    roots: &[(*mut g::ggml_tensor, usize, usize)],
) -> Result<(), String> {
    let mut spans: Vec<(usize, usize)> = roots.iter().map(|&(_, off, n)| (off, off + n)).collect();
    spans.sort();
    let mut at = 0;
    for (start, stop) in spans.into_iter().chain([(total, total)]) {
        for i in at..start {
            // SAFETY: i < total, inside the buffer.
            if unsafe { *base.add(i) } != SENTINEL {
                return Err(format!("sentinel overwritten at byte {i} of {total}"));
            }
        }
        at = stop;
    }
    Ok(())
}

/// A refusal's reason without the node name and numbers, so reasons can be counted.
fn reason_of(line: &str) -> String {
    let msg = line.trim().trim_start_matches("tandem:").trim();
    let msg = msg.split_once("graph_compute").map_or(msg, |(_, m)| m);
    let msg = msg.rsplit_once("): ").map_or(msg, |(_, m)| m);
    let mut out = String::new();
    let mut in_quote = false;
    for c in msg.trim_start_matches([':', ' ']).chars() {
        match c {
            '\'' | '"' | '`' => in_quote = !in_quote,
            _ if in_quote => {}
            '0'..='9' => {
                if !out.ends_with('N') {
                    out.push('N');
                }
            }
            _ => out.push(c),
        }
        if out.len() >= 72 {
            break;
        }
    }
    out
}

/// Types ggml can size (the removed Q4_2/Q4_3 ids have no block size).
const TYPES: &[g::ggml_type] = &[
    g::GGML_TYPE_F32,
    g::GGML_TYPE_F16,
    g::GGML_TYPE_BF16,
    g::GGML_TYPE_Q4_0,
    g::GGML_TYPE_Q4_1,
    g::GGML_TYPE_Q5_0,
    g::GGML_TYPE_Q5_1,
    g::GGML_TYPE_Q8_0,
    g::GGML_TYPE_Q2_K,
    g::GGML_TYPE_Q4_K,
    g::GGML_TYPE_Q6_K,
    g::GGML_TYPE_I8,
    g::GGML_TYPE_I16,
    g::GGML_TYPE_I32,
    g::GGML_TYPE_F64,
];

fn pick_type(rng: &mut Pcg64) -> g::ggml_type {
    // Mostly the float types the ops are written for.
    match rng.random_range(0..10) {
        0..=4 => g::GGML_TYPE_F32,
        5..=6 => g::GGML_TYPE_F16,
        _ => TYPES[rng.random_range(0..TYPES.len())],
    }
}

/// A type of one value per block, for operands whose extents must match another tensor's.
fn pick_plain_type(rng: &mut Pcg64) -> g::ggml_type {
    loop {
        let ty = pick_type(rng);
        // SAFETY: a valid type id.
        if unsafe { g::ggml_blck_size(ty) } == 1 {
            return ty;
        }
    }
}

fn extent(rng: &mut Pcg64) -> i64 {
    match rng.random_range(0..10) {
        0 => 0,
        1..=3 => 1,
        4..=6 => rng.random_range(2..=8),
        _ => [16, 32, 33, 64][rng.random_range(0..4)],
    }
}

unsafe fn contiguous(t: *mut g::ggml_tensor) -> bool {
    // SAFETY: t is live.
    unsafe { g::ggml_is_contiguous(t) }
}

/// ggml's `ggml_is_padded_1d` (not exported), which `ggml_scale` asserts.
unsafe fn padded_1d(t: *mut g::ggml_tensor) -> bool {
    // SAFETY: t is live.
    let t = unsafe { &*t };
    // SAFETY: as above.
    t.nb[0] == unsafe { g::ggml_type_size(t.type_) }
        && t.nb[2] == t.nb[1] * t.ne[1] as usize
        && t.nb[3] == t.nb[2] * t.ne[2] as usize
}

/// Builds up to a dozen nodes from random leaves; returns the nodes (not the leaves).
unsafe fn build(ctx: *mut g::ggml_context, graph: *mut g::ggml_cgraph, rng: &mut Pcg64) -> Vec<*mut g::ggml_tensor> {
    // SAFETY: (whole fn) constructors are called only with arguments their asserts accept.
    unsafe {
        let mut pool: Vec<*mut g::ggml_tensor> = Vec::new();
        let mut nodes = Vec::new();
        // ggml sizes a block-quantized row only when ne0 is a whole number of blocks.
        let leaf = |ty: g::ggml_type, ne: [i64; 4]| {
            let blck = g::ggml_blck_size(ty);
            let ne0 = if blck > 1 { blck * (ne[0] % 3) } else { ne[0] };
            g::ggml_new_tensor_4d(ctx, ty, ne0, ne[1], ne[2], ne[3])
        };
        for _ in 0..rng.random_range(1..=3) {
            let ne = [extent(rng), extent(rng), extent(rng), extent(rng)];
            let ty = if rng.random_bool(0.8) {
                g::GGML_TYPE_F32
            } else {
                pick_type(rng)
            };
            pool.push(leaf(ty, ne));
        }
        for _ in 0..rng.random_range(1..=10) {
            if pool.len() + 4 >= MAX_TENSORS / 2 {
                break;
            }
            let a = pool[rng.random_range(0..pool.len())];
            let ne = (*a).ne;
            let empty = ne.contains(&0);
            let node = match rng.random_range(0..17) {
                0..=3 => {
                    // Binary op with a broadcast second operand.
                    let mut bne = ne;
                    if !empty {
                        for d in &mut bne {
                            if rng.random_bool(0.4) {
                                *d = 1;
                            }
                        }
                    }
                    let ty = if rng.random_bool(0.8) {
                        g::GGML_TYPE_F32
                    } else {
                        pick_plain_type(rng)
                    };
                    let b = leaf(ty, bne);
                    match rng.random_range(0..4) {
                        0 => g::ggml_add(ctx, a, b),
                        1 => g::ggml_mul(ctx, a, b),
                        2 => g::ggml_sub(ctx, a, b),
                        _ => g::ggml_div(ctx, a, b),
                    }
                }
                4 if padded_1d(a) => g::ggml_scale(ctx, a, rng.random_range(-2.0..2.0)),
                5 => {
                    let n = g::ggml_nelements(a);
                    let b = if rng.random_bool(0.5) {
                        leaf(pick_plain_type(rng), ne)
                    } else {
                        leaf(pick_plain_type(rng), [n, 1, 1, 1])
                    };
                    g::ggml_cpy(ctx, a, b)
                }
                6 => g::ggml_cont(ctx, a),
                7 if ne[2] > 0 && ne[3] > 0 && !g::ggml_is_transposed(a) => {
                    let r = rng.random_range(1..=2);
                    let ty = if rng.random_bool(0.8) {
                        g::GGML_TYPE_F32
                    } else {
                        pick_plain_type(rng)
                    };
                    let b = leaf(ty, [ne[0], extent(rng), ne[2] * r, ne[3]]);
                    g::ggml_mul_mat(ctx, a, b)
                }
                8 if contiguous(a) => {
                    g::ggml_soft_max_ext(ctx, a, std::ptr::null_mut(), rng.random_range(0.0..2.0), 0.0)
                }
                9 => g::ggml_rms_norm(ctx, a, 1e-6),
                10 => g::ggml_norm(ctx, a, 1e-5),
                11 => {
                    let b = leaf(g::GGML_TYPE_I32, [extent(rng), ne[2], ne[3], 1]);
                    g::ggml_get_rows(ctx, a, b)
                }
                12 if g::ggml_is_contiguous_1(a) => {
                    if rng.random_bool(0.5) {
                        g::ggml_silu(ctx, a)
                    } else {
                        g::ggml_gelu(ctx, a)
                    }
                }
                13 => g::ggml_sum_rows(ctx, a),
                // A permuted quantized row is no whole number of blocks: plain types only.
                14 if g::ggml_blck_size((*a).type_) == 1 => {
                    let mut axes = [0, 1, 2, 3];
                    for i in (1..4).rev() {
                        axes.swap(i, rng.random_range(0..=i));
                    }
                    if rng.random_bool(0.3) {
                        g::ggml_transpose(ctx, a)
                    } else {
                        g::ggml_permute(ctx, a, axes[0], axes[1], axes[2], axes[3])
                    }
                }
                // ggml sizes a reshaped quantized row only in whole blocks: plain types only.
                15 if contiguous(a) && g::ggml_blck_size((*a).type_) == 1 => {
                    let n = g::ggml_nelements(a);
                    let mut shape = [1i64; 4];
                    shape[rng.random_range(0..4)] = n;
                    if rng.random_bool(0.5) && ne[0] > 0 && n % ne[0] == 0 {
                        shape = [ne[0], 1, 1, 1];
                        shape[rng.random_range(1..4)] = n / ne[0];
                    }
                    g::ggml_reshape_4d(ctx, a, shape[0], shape[1], shape[2], shape[3])
                }
                16 => match view_of(ctx, a, rng) {
                    Some(v) => v,
                    None => continue,
                },
                _ => continue,
            };
            if node.is_null() {
                continue;
            }
            g::ggml_build_forward_expand(graph, node);
            pool.push(node);
            nodes.push(node);
        }
        nodes
    }
}

/// A view of `a` with random extents no larger than a's, a's strides (sometimes swapped for
/// odd ones) and an offset that keeps it inside `a`; `None` when none fits.
unsafe fn view_of(ctx: *mut g::ggml_context, a: *mut g::ggml_tensor, rng: &mut Pcg64) -> Option<*mut g::ggml_tensor> {
    // SAFETY: a is live; the view is made only when ggml's bound check would pass.
    unsafe {
        if g::ggml_blck_size((*a).type_) != 1 {
            return None;
        }
        let ts = g::ggml_type_size((*a).type_);
        let ne: [i64; 4] = std::array::from_fn(|d| rng.random_range(0..=(*a).ne[d].max(0)));
        let mut nb = (*a).nb;
        if rng.random_bool(0.3) {
            nb[1] = ts * rng.random_range(1..=3);
        }
        if rng.random_bool(0.3) {
            nb.swap(1, 2);
        }
        let size = if ne.contains(&0) {
            0
        } else {
            ts + (0..4).map(|d| (ne[d] as usize - 1) * nb[d]).sum::<usize>()
        };
        // ggml bounds a view by its packed size; the strided span must fit too.
        let size = size.max(ts * ne.iter().product::<i64>() as usize);
        let whole = g::ggml_nbytes(a);
        if size > whole {
            return None;
        }
        let offset = (rng.random_range(0..=(whole - size)) / ts) * ts;
        Some(g::ggml_view_4d(
            ctx, a, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], offset,
        ))
    }
}

/// Breaks `t` (a node, not a view) the way a hand-made struct can.
unsafe fn mutate(t: *mut g::ggml_tensor, ctx: *mut g::ggml_context, stray: *mut g::ggml_context, rng: &mut Pcg64) {
    // SAFETY: t is a live tensor of ctx, not yet allocated.
    unsafe {
        // Views of t were bounded by its size: only a tensor without views may change size.
        let mut viewed = false;
        let mut o = g::ggml_get_first_tensor(ctx);
        while !o.is_null() {
            viewed |= std::ptr::eq((*o).view_src, t);
            o = g::ggml_get_next_tensor(ctx, o);
        }
        let resizable = (*t).view_src.is_null() && !viewed;
        let t = &mut *t;
        match rng.random_range(0..7) {
            0 => t.src[rng.random_range(0..3)] = std::ptr::null_mut(),
            1 => {
                // Another tensor of the context (often of another shape or type).
                let mut o = g::ggml_get_first_tensor(ctx);
                for _ in 0..rng.random_range(0..8) {
                    let n = g::ggml_get_next_tensor(ctx, o);
                    if n.is_null() {
                        break;
                    }
                    o = n;
                }
                if !std::ptr::eq(o, t) {
                    t.src[rng.random_range(0..3)] = o;
                }
            }
            2 if resizable => t.type_ = TYPES[rng.random_range(0..TYPES.len())],
            3 if resizable => t.ne[rng.random_range(0..4)] = extent(rng),
            4 => {
                for p in &mut t.op_params[..rng.random_range(1..=16)] {
                    *p = rng.random();
                }
            }
            5 => t.op = rng.random_range(1..g::GGML_OP_COUNT),
            6 => {
                // A source that was never allocated (no buffer, no data).
                let s = g::ggml_new_tensor_2d(stray, g::GGML_TYPE_F32, extent(rng), extent(rng));
                if !s.is_null() {
                    t.src[rng.random_range(0..2)] = s;
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_written_between_spans_is_caught() {
        let mut buf = vec![SENTINEL; 256];
        let spans = [(std::ptr::null_mut(), 64, 32), (std::ptr::null_mut(), 160, 0)];
        // SAFETY: the spans lie inside buf.
        unsafe {
            buf[64..96].fill(0);
            assert!(check_sentinels(buf.as_ptr(), buf.len(), &spans).is_ok());
            for at in [0, 63, 96, 160, 255] {
                let mut bad = buf.clone();
                bad[at] = 0;
                assert!(check_sentinels(bad.as_ptr(), bad.len(), &spans).is_err(), "byte {at}");
            }
        }
    }

    #[test]
    fn reasons_drop_names_and_numbers() {
        let line = "tandem: TANDEM_HOST: graph_compute failed: node 3 'x' (ADD; f32): src1 does not repeat onto src0 ([3, 1])\n";
        assert_eq!(reason_of(line), "srcN does not repeat onto srcN ([N, N])");
    }
}
