//! MUL_MAT_ID with an expert id out of range, on every usable GPU: the slot of the bad id comes
//! out NaN in all its rows (no weight outside the experts is read), every other slot matches the
//! host device's result with the ids all valid, and nothing else is written. The cases reach the
//! decode forms (one column per slot: f32 and q5_K experts on the GEMV form, q4_0 in units on
//! NVIDIA sm_80+) and the form grouped by expert (16 tokens, on the tensor cores where the device
//! has them). A device that runs the node on the CPU fallback must fail the graph with an error
//! naming the id instead. Without a GPU it prints why it skipped.
//!
//! Run: `cargo test -p tandem-backend --test gpu_expert_ids -- --nocapture`

mod common;

use common::{bytes, floats, gpus_or_skip, nmse, set_bytes, Rng};
use tandem_backend::buffer::allocate_graph;
use tandem_backend::{Device, HostDevice};
use tandem_graph::{ElemType, Graph, GraphBuilder, TensorId};

struct Case {
    what: &'static str,
    ty: ElemType,
    k: i64,
    m: i64,
    n_expert: i64,
    n_used: i64,
    n_tokens: i64,
}

const CASES: &[Case] = &[
    Case {
        what: "GEMV form, f32 experts, one token",
        ty: ElemType::F32,
        k: 256,
        m: 64,
        n_expert: 4,
        n_used: 2,
        n_tokens: 1,
    },
    Case {
        what: "GEMV form, q5_K experts, three tokens",
        ty: ElemType::Q5K,
        k: 2048,
        m: 64,
        n_expert: 6,
        n_used: 2,
        n_tokens: 3,
    },
    Case {
        what: "units, q4_0 experts, one token",
        ty: ElemType::Q4_0,
        k: 2048,
        m: 512,
        n_expert: 8,
        n_used: 2,
        n_tokens: 1,
    },
    Case {
        what: "grouped by expert, q4_0 experts, 16 tokens",
        ty: ElemType::Q4_0,
        k: 2048,
        m: 128,
        n_expert: 8,
        n_used: 2,
        n_tokens: 16,
    },
];

/// Weights of `ty` whose every scale is a finite, normal f16 and whose quants are random bytes;
/// f32 weights uniform in [-1, 1).
fn fill_weights(ty: ElemType, b: &mut [u8], rng: &mut Rng) {
    if ty == ElemType::F32 {
        for c in b.chunks_exact_mut(4) {
            c.copy_from_slice(&rng.unit().to_le_bytes());
        }
        return;
    }
    for x in b.iter_mut() {
        *x = rng.next() as u8;
    }
    let block = ty.type_size();
    // The f16 scales: q4_0's d at the block's start; q5_K's d and dmin there too.
    let scales = if ty == ElemType::Q5K { 2 } else { 1 };
    for blk in b.chunks_exact_mut(block) {
        for s in 0..scales {
            // 0x2800 ..= 0x28ff: about 0.031 .. 0.035.
            let h = 0x2800u16 | (rng.next() & 0xff) as u16;
            blk[2 * s..2 * s + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
}

fn set_ids(g: &Graph, ids: TensorId, v: &[i32]) {
    set_bytes(g, ids, |b| {
        for (c, x) in b.chunks_exact_mut(4).zip(v) {
            c.copy_from_slice(&x.to_le_bytes());
        }
    });
}

/// Runs `case` on `gpu` with the id of slot (used 1, last token) set to `bad`.
fn run_case(gpu: &Device, case: &Case, bad: i32) -> Result<(), String> {
    let Device::Gpu(g) = gpu else {
        return Err("not a GPU device".into());
    };
    let mut b = GraphBuilder::new();
    let experts = b.new_tensor(case.ty, &[case.k, case.m, case.n_expert]);
    let x = b.new_tensor(ElemType::F32, &[case.k, case.n_used, case.n_tokens]);
    let ids = b.new_tensor(ElemType::I32, &[case.n_used, case.n_tokens]);
    let out = b.mul_mat_id(experts, x, ids).map_err(|e| e.to_string())?;
    let mut graph = b.build();
    let mut buf = allocate_graph(&mut graph, 0)?;
    let mut rng = Rng(0x9E37_79B9 ^ (case.k as u32).wrapping_mul(31) ^ case.m as u32);
    set_bytes(&graph, experts, |b| fill_weights(case.ty, b, &mut rng));
    set_bytes(&graph, x, |b| fill_weights(ElemType::F32, b, &mut rng));
    let slots = (case.n_used * case.n_tokens) as usize;
    let good: Vec<i32> = (0..slots)
        .map(|q| ((q * 3 + q / case.n_used as usize) % case.n_expert as usize) as i32)
        .collect();
    set_ids(&graph, ids, &good);
    // The reference: the host device with every id valid.
    let host = Device::Host(HostDevice::new(2));
    // SAFETY: every tensor of the graph lies in `buf`, which outlives the call.
    unsafe { host.compute(&graph) }.map_err(|e| format!("host: {e}"))?;
    let want = floats(&bytes(&graph, out));
    // The bad slot: used 1 of the last token.
    let bad_slot = slots - case.n_used as usize + 1;
    let mut ids_bad = good.clone();
    ids_bad[bad_slot] = bad;
    set_ids(&graph, ids, &ids_bad);
    set_bytes(&graph, out, |b| b.fill(0));
    let weights_before = bytes(&graph, experts);
    let (base, len) = (buf.addr(), buf.len());
    // SAFETY: every tensor lies in the buffer's `len` bytes at `base`.
    let run = unsafe { g.compute_mirrored(&graph, &mut buf.as_mut_slice()[..len], base) };
    let stats = match run {
        Ok(s) => s,
        // The CPU fallback checks the ids before it writes.
        Err(e) if e.contains("not an expert index") && e.contains(&bad.to_string()) => {
            eprintln!(
                "  {}: id {bad}: the graph failed as it should on the CPU fallback: {e}",
                case.what
            );
            return Ok(());
        }
        Err(e) => return Err(format!("{}: id {bad}: {e}", case.what)),
    };
    if stats.cpu_fallback_nodes > 0 {
        return Err(format!(
            "{}: id {bad}: the node ran on the CPU fallback and the graph succeeded",
            case.what
        ));
    }
    if bytes(&graph, experts) != weights_before {
        return Err(format!("{}: id {bad}: the experts changed", case.what));
    }
    let got = floats(&bytes(&graph, out));
    let m = case.m as usize;
    let mut got_good = Vec::new();
    let mut want_good = Vec::new();
    for q in 0..slots {
        let (g_rows, w_rows) = (&got[q * m..(q + 1) * m], &want[q * m..(q + 1) * m]);
        if q == bad_slot {
            if let Some(r) = g_rows.iter().position(|v| !v.is_nan()) {
                return Err(format!(
                    "{}: id {bad}: row {r} of the bad slot is {} rather than NaN",
                    case.what, g_rows[r]
                ));
            }
        } else {
            if let Some(r) = g_rows.iter().position(|v| !v.is_finite()) {
                return Err(format!("{}: id {bad}: slot {q} row {r} is {}", case.what, g_rows[r]));
            }
            got_good.extend_from_slice(g_rows);
            want_good.extend_from_slice(w_rows);
        }
    }
    let e = nmse(&got_good, &want_good);
    if e > 5e-4 {
        return Err(format!(
            "{}: id {bad}: the other slots' NMSE against the host is {e:.3e}",
            case.what
        ));
    }
    eprintln!("  {}: id {bad}: bad slot NaN, other slots NMSE {e:.1e}", case.what);
    Ok(())
}

#[test]
fn bad_expert_ids_give_nan_slots_on_the_gpu() {
    let Some(gpus) = gpus_or_skip("bad_expert_ids_give_nan_slots_on_the_gpu") else {
        return;
    };
    let mut failed = Vec::new();
    let mut ran = 0;
    for d in &gpus {
        eprintln!("{}: {}", d.name(), d.description());
        for case in CASES {
            for bad in [-1, case.n_expert as i32, i32::MAX] {
                ran += 1;
                if let Err(e) = run_case(d, case, bad) {
                    eprintln!("  FAIL {e}");
                    failed.push(e);
                }
            }
        }
    }
    assert!(ran > 0, "no case ran");
    assert!(failed.is_empty(), "{} case(s) failed: {failed:?}", failed.len());
}
