//! Split nodes, on every usable GPU: MUL_MATs of 1, 3 and 8 columns and MUL_MAT_IDs of 1, 3 and
//! 8 tokens (6 experts, 4 used a token), and at 16 the staged form (the weight copied to the
//! device first), whose weight (every type of the GEMV family; 1000 rows, so the shares leave a
//! tail that is no multiple of the row alignment) lies in the device's pinned host memory,
//! followed by an ADD that reads the result, run at GPU shares 0, 1 and 0.37 and then learnt
//! online (`ShareMode::Auto`, eight runs). Every run must be a split (or staged) node whose GPU
//! part ran where its share gave it rows, match the host device's result, and leave every other
//! byte of device memory as it was. Groups of split nodes run the same way through device graphs,
//! and once more with the way trials on (the graph run split and with the GPU alone in turn,
//! `tandem_backend::gpu::ways`), where both ways must match the host. Without a GPU it prints
//! why it skipped.
//!
//! Run: `cargo test -p tandem-backend --test gpu_split -- --nocapture`

mod common;

use common::{bytes, floats, gpus_or_skip, nmse, set_bytes, Rng};
use std::ops::Range;
use tandem_backend::buffer::allocate_graph;
use tandem_backend::config::{Config, OffloadExec};
use tandem_backend::gpu::device::GpuDevice;
use tandem_backend::gpu::memory::DeviceAlloc;
use tandem_backend::gpu::split::ShareMode;
use tandem_backend::{Device, GraphStats, HostDevice};
use tandem_graph::{ElemType, Graph, GraphBuilder};

/// Experts in a MUL_MAT_ID case's weight, and used per token.
const EXPERTS: i64 = 6;
const USED: i64 = 4;

/// One run of `moved` at split share `mode`: the device allocation starts from `image` with the
/// result ranges poisoned (so each run writes its own); gives the run's statistics and the
/// allocation's bytes after it, or an error where a byte outside the results changed.
fn run_poisoned(
    g: &GpuDevice,
    dev: &DeviceAlloc,
    moved: &Graph,
    image: &[u8],
    results: &[Range<usize>],
    mode: ShareMode,
) -> Result<(GraphStats, Vec<u8>), String> {
    g.set_split_share(mode);
    let mut start = image.to_vec();
    for r in results {
        start[r.clone()].fill(0xA5);
    }
    // SAFETY: the allocation holds the image's length.
    unsafe { g.write(dev.ptr(), &start) }.map_err(|e| e.to_string())?;
    // SAFETY: every address of `moved` points into `dev` or the test's pinned weights, alive.
    let stats = unsafe { g.compute(moved) }.map_err(|e| format!("{mode:?}: {e}"))?;
    let mut now = vec![0u8; image.len()];
    // SAFETY: as above.
    unsafe { g.read(dev.ptr(), &mut now) }.map_err(|e| e.to_string())?;
    let outside = (0..now.len()).find(|&i| !results.iter().any(|r| r.contains(&i)) && now[i] != start[i]);
    if let Some(i) = outside {
        return Err(format!("{mode:?}: byte {i} outside the results changed"));
    }
    Ok((stats, now))
}

/// One case: a MUL_MAT of `n` columns, or with `moe` a MUL_MAT_ID of `n` tokens.
fn case(gpu: &Device, ty: ElemType, n: i64, moe: bool) -> Result<(), String> {
    let Device::Gpu(g) = gpu else {
        return Err("not a GPU device".into());
    };
    // Split nodes themselves are under test: every Auto run splits.
    g.set_way_trials(false);
    let (k, m) = (512i64, 1000i64);
    let mut b = GraphBuilder::new();
    let (w, x, ids, y, bias);
    if moe {
        w = b.new_tensor(ty, &[k, m, EXPERTS]);
        x = b.new_tensor(ElemType::F32, &[k, 1, n]);
        let i = b.new_tensor(ElemType::I32, &[USED, n]);
        y = b.mul_mat_id(w, x, i).map_err(|e| e.to_string())?;
        bias = b.new_tensor(ElemType::F32, &[m, USED, n]);
        ids = Some(i);
    } else {
        w = b.new_tensor(ty, &[k, m]);
        x = b.new_tensor(ElemType::F32, &[k, n]);
        y = b.mul_mat(w, x).map_err(|e| e.to_string())?;
        bias = b.new_tensor(ElemType::F32, &[m, n]);
        ids = None;
    }
    let out = b.add(y, bias).map_err(|e| e.to_string())?;
    let mut graph = b.build();
    let mut buf = allocate_graph(&mut graph, 0)?;
    let mut rng = Rng(0x5eed_0001 ^ (n as u32) ^ ((ty as u32) << 8) ^ (u32::from(moe) << 16));
    if let Some(i) = ids {
        // Each token's experts: distinct, in a shuffled order.
        set_bytes(&graph, i, |ib| {
            for (t, tok) in ib.chunks_exact_mut(4 * USED as usize).enumerate() {
                let first = (rng.unit().abs() * 1000.0) as usize + t;
                for (s, c) in tok.chunks_exact_mut(4).enumerate() {
                    let e = ((first + s * 5) % EXPERTS as usize) as i32;
                    c.copy_from_slice(&e.to_le_bytes());
                }
            }
        });
    }
    // The weight: rows of random values through the type's quantizer.
    set_bytes(&graph, w, |wb| {
        let rows = m * if moe { EXPERTS } else { 1 };
        let row_bytes = wb.len() / rows as usize;
        let vals: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
        for (r, row) in wb.chunks_exact_mut(row_bytes).enumerate() {
            let shifted: Vec<f32> = vals.iter().map(|v| v * (1.0 + (r % 7) as f32 * 0.1)).collect();
            tandem_ops::quant::quantize_row(ty, &shifted, row).expect("quantizable row");
        }
    });
    for id in [x, bias] {
        set_bytes(&graph, id, |bb| {
            for c in bb.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.unit().to_le_bytes());
            }
        });
    }
    let host = Device::Host(HostDevice::new(2));
    // SAFETY: every tensor lies in `buf`, which outlives the call.
    unsafe { host.compute(&graph) }.map_err(|e| format!("host: {e}"))?;
    let want = floats(&bytes(&graph, out));

    // The weight in pinned host memory, everything else in one device allocation.
    let (base, len) = (buf.addr(), buf.len());
    let image = buf.as_mut_slice()[..len].to_vec();
    let wt = graph.tensor(w);
    let pinned = g.alloc_pinned(wt.nbytes()).map_err(|e| e.to_string())?;
    // SAFETY: the pinned allocation holds the weight's bytes; nothing else uses it yet.
    unsafe { std::ptr::copy_nonoverlapping(wt.data as *const u8, pinned.host_ptr(), wt.nbytes()) };
    let dev = g.alloc(len).map_err(|e| e.to_string())?;
    let mut moved = graph.clone();
    for (i, t) in moved.tensors.iter_mut().enumerate() {
        if i == w.index() {
            t.data = pinned.host_ptr() as usize;
        } else if t.data != 0 {
            t.data = t.data - base + dev.ptr().0 as usize;
        }
    }
    let off = |id| graph.tensor(id).data - base;
    let results = [
        off(y)..off(y) + graph.tensor(y).nbytes(),
        off(out)..off(out) + graph.tensor(out).nbytes(),
    ];
    let split = Config::get().offload_exec == OffloadExec::Split;
    let mut modes = vec![ShareMode::Fixed(0.0), ShareMode::Fixed(1.0), ShareMode::Fixed(0.37)];
    modes.extend([ShareMode::Auto; 8]);
    for mode in modes {
        let (stats, now) = run_poisoned(g, &dev, &moved, &image, &results, mode)?;
        // Past 8 columns or tokens the weight is copied to the device instead (staged).
        let staged = n > 8;
        let want_splits = usize::from(split && !staged);
        if stats.split_nodes != want_splits
            || stats.staged_nodes != usize::from(staged)
            || stats.cpu_fallback_nodes != 0
        {
            return Err(format!(
                "{mode:?}: {} split, {} staged, {} fallback nodes (want {want_splits}, {}, 0)",
                stats.split_nodes,
                stats.staged_nodes,
                stats.cpu_fallback_nodes,
                usize::from(staged)
            ));
        }
        // The ADD's kernel, and the split's GPU part where its share gives it rows (so a part
        // that no kernel took, leaving every row to the CPU, fails here).
        let want_kernels = match mode {
            ShareMode::Fixed(s) if want_splits == 1 && s == 0.0 => 1,
            ShareMode::Fixed(_) => 2,
            ShareMode::Auto => stats.gpu_dispatches.clamp(1, 2),
        };
        if stats.gpu_dispatches != want_kernels {
            return Err(format!(
                "{mode:?}: {} kernels ran (want {want_kernels})",
                stats.gpu_dispatches
            ));
        }
        let e = nmse(&floats(&now[results[1].clone()]), &want);
        if e.is_nan() || e > 5e-4 {
            return Err(format!("{mode:?}: NMSE {e:.3e} against the host"));
        }
    }
    let report = g.split_report();
    let shares: Vec<String> = report
        .iter()
        .filter(|r| r.key.ty == ty && r.key.experts == if moe { EXPERTS } else { 0 })
        .filter(|r| r.key.n == if moe { n * USED } else { n })
        .map(|r| format!("{:.2}", r.share))
        .collect();
    let what = if moe { "MUL_MAT_ID tokens" } else { "MUL_MAT n" };
    eprintln!("  ok   {ty} {what}={n}: learnt share {}", shares.join(","));
    Ok(())
}

/// The weight types of the GEMV family.
const TYPES: [ElemType; 14] = [
    ElemType::F32,
    ElemType::F16,
    ElemType::BF16,
    ElemType::Q8_0,
    ElemType::Q4_0,
    ElemType::Q4_1,
    ElemType::Q5_0,
    ElemType::Q5_1,
    ElemType::IQ4NL,
    ElemType::Q2K,
    ElemType::Q3K,
    ElemType::Q4K,
    ElemType::Q5K,
    ElemType::Q6K,
];

#[test]
fn split_nodes_match_the_host_at_every_share() {
    let Some(gpus) = gpus_or_skip("split_nodes_match_the_host_at_every_share") else {
        return;
    };
    if Config::get().offload_exec != OffloadExec::Split {
        eprintln!("note: TANDEM_OFFLOAD_EXEC is not split; checking that no node splits");
    }
    let mut failed = Vec::new();
    for d in &gpus {
        eprintln!("{}: {}", d.name(), d.description());
        for ty in TYPES {
            for moe in [false, true] {
                for n in [1, 3, 8, 16] {
                    if let Err(e) = case(d, ty, n, moe) {
                        let what = if moe { "MUL_MAT_ID tokens" } else { "MUL_MAT n" };
                        eprintln!("  FAIL {ty} {what}={n}: {e}");
                        failed.push(format!("{ty} {what}={n}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failed.is_empty(), "{} case(s) failed: {failed:?}", failed.len());
}

/// A group of split nodes on one input, as a layer sends them: q/k/v projections of different
/// heights on one activation column (MUL_MAT), or an ffn's gate and up experts on one token's
/// activations and expert ids (MUL_MAT_ID), then an ADD of two results. Run repeatedly, at fixed
/// shares and learnt ones: the stretches of kernels between the splits are captured into device
/// graphs and replayed where the runtime has them, and every run must match the host. With
/// `trials`, the learnt runs are the way chooser's first three blocks and one more run: eight
/// split runs while the shares settle, eight measured split runs, eight with the GPU alone, then
/// the faster way.
fn group_case(gpu: &Device, ty: ElemType, moe: bool, trials: bool) -> Result<(), String> {
    let Device::Gpu(g) = gpu else {
        return Err("not a GPU device".into());
    };
    g.set_way_trials(trials);
    let k = 512i64;
    let heights: &[i64] = if moe { &[768, 768] } else { &[1000, 256, 256] };
    let mut b = GraphBuilder::new();
    let (x, ids) = if moe {
        (
            b.new_tensor(ElemType::F32, &[k, 1, 1]),
            Some(b.new_tensor(ElemType::I32, &[USED, 1])),
        )
    } else {
        (b.new_tensor(ElemType::F32, &[k, 1]), None)
    };
    let mut ws = Vec::new();
    let mut ys = Vec::new();
    for &m in heights {
        let w = if moe {
            b.new_tensor(ty, &[k, m, EXPERTS])
        } else {
            b.new_tensor(ty, &[k, m])
        };
        let y = match ids {
            Some(i) => b.mul_mat_id(w, x, i),
            None => b.mul_mat(w, x),
        }
        .map_err(|e| e.to_string())?;
        ws.push(w);
        ys.push(y);
    }
    let n = ys.len();
    let out = b.add(ys[n - 2], ys[n - 1]).map_err(|e| e.to_string())?;
    let mut graph = b.build();
    let mut buf = allocate_graph(&mut graph, 0)?;
    let mut rng = Rng(0x5eed_0101 ^ ((ty as u32) << 8) ^ (u32::from(moe) << 16));
    if let Some(i) = ids {
        set_bytes(&graph, i, |ib| {
            for (s, c) in ib.chunks_exact_mut(4).enumerate() {
                c.copy_from_slice(&(((s * 5 + 1) % EXPERTS as usize) as i32).to_le_bytes());
            }
        });
    }
    for &w in &ws {
        set_bytes(&graph, w, |wb| {
            let row_bytes = k as usize / ty.block_size() * ty.type_size();
            for row in wb.chunks_exact_mut(row_bytes) {
                let vals: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
                tandem_ops::quant::quantize_row(ty, &vals, row).expect("quantizable row");
            }
        });
    }
    set_bytes(&graph, x, |bb| {
        for c in bb.chunks_exact_mut(4) {
            c.copy_from_slice(&rng.unit().to_le_bytes());
        }
    });
    let host = Device::Host(HostDevice::new(2));
    // SAFETY: every tensor lies in `buf`, which outlives the call.
    unsafe { host.compute(&graph) }.map_err(|e| format!("host: {e}"))?;
    let want: Vec<Vec<f32>> = ys.iter().chain([&out]).map(|&y| floats(&bytes(&graph, y))).collect();

    // The weights in one pinned allocation, everything else in one device allocation.
    let (base, len) = (buf.addr(), buf.len());
    let image = buf.as_mut_slice()[..len].to_vec();
    let total: usize = ws.iter().map(|&w| graph.tensor(w).nbytes().next_multiple_of(256)).sum();
    let pinned = g.alloc_pinned(total).map_err(|e| e.to_string())?;
    let mut moved = graph.clone();
    let mut at = 0;
    for &w in &ws {
        let wt = graph.tensor(w);
        // SAFETY: the pinned allocation holds every weight's bytes at its offset; nothing else
        // uses it yet.
        unsafe { std::ptr::copy_nonoverlapping(wt.data as *const u8, pinned.host_ptr().add(at), wt.nbytes()) };
        moved.tensor_mut(w).data = pinned.host_ptr() as usize + at;
        at += wt.nbytes().next_multiple_of(256);
    }
    let dev = g.alloc(len).map_err(|e| e.to_string())?;
    for (i, t) in moved.tensors.iter_mut().enumerate() {
        if !ws.iter().any(|w| w.index() == i) && t.data != 0 {
            t.data = t.data - base + dev.ptr().0 as usize;
        }
    }
    let off = |id| graph.tensor(id).data - base;
    let results: Vec<_> = ys
        .iter()
        .chain([&out])
        .map(|&y| off(y)..off(y) + graph.tensor(y).nbytes())
        .collect();
    let split = Config::get().offload_exec == OffloadExec::Split;
    let mut modes = vec![ShareMode::Fixed(0.0), ShareMode::Fixed(1.0)];
    modes.extend([ShareMode::Fixed(0.37); 4]);
    let block = tandem_backend::gpu::ways::RUNS_PER_ADDRESS as usize;
    modes.extend(vec![ShareMode::Auto; if trials { 3 * block + 1 } else { 8 }]);
    let mut graphs = Vec::new();
    let mut whole_gpu_runs = Vec::new();
    for (run, mode) in modes.into_iter().enumerate() {
        let (stats, now) = run_poisoned(g, &dev, &moved, &image, &results, mode)?;
        if stats.whole_gpu {
            whole_gpu_runs.push(run);
        }
        let want_splits = if split && !stats.whole_gpu { n } else { 0 };
        if stats.split_nodes != want_splits || stats.cpu_fallback_nodes != 0 {
            return Err(format!(
                "{mode:?}: {} split, {} fallback nodes (want {want_splits}, 0)",
                stats.split_nodes, stats.cpu_fallback_nodes
            ));
        }
        graphs.push(stats.device_graph);
        for (r, w) in results.iter().zip(&want) {
            let e = nmse(&floats(&now[r.clone()]), w);
            if e.is_nan() || e > 5e-4 {
                return Err(format!("{mode:?}: NMSE {e:.3e} against the host"));
            }
        }
    }
    // The trials' whole-GPU block: the eight runs after the six fixed-share ones and the two
    // split blocks (and maybe the run after it, if that way won).
    if trials && split {
        let first = 6 + 2 * block;
        let want: Vec<usize> = (first..first + block).collect();
        if whole_gpu_runs.get(..block) != Some(&want[..]) {
            return Err(format!("whole-GPU runs {whole_gpu_runs:?}, want {want:?} first"));
        }
    } else if !whole_gpu_runs.is_empty() {
        return Err(format!("runs {whole_gpu_runs:?} left the split nodes to the GPU alone"));
    }
    // The same graph ran 14 times or more: with device graphs on, it was captured and then
    // replayed.
    if Config::get().graphs && g.has_device_graphs() {
        use tandem_backend::DeviceGraph;
        if !graphs.contains(&Some(DeviceGraph::Captured)) || !graphs.contains(&Some(DeviceGraph::Replayed)) {
            return Err(format!("never captured and replayed as device graphs: {graphs:?}"));
        }
    }
    let what = if moe { "MUL_MAT_ID gate/up" } else { "MUL_MAT q/k/v" };
    let how = if trials { ", both ways tried" } else { "" };
    eprintln!("  ok   {ty} {what} group{how}");
    Ok(())
}

#[test]
fn split_groups_match_the_host_through_device_graphs() {
    let Some(gpus) = gpus_or_skip("split_groups_match_the_host_through_device_graphs") else {
        return;
    };
    let mut failed = Vec::new();
    for d in &gpus {
        eprintln!("{}: {}", d.name(), d.description());
        for ty in [ElemType::F16, ElemType::Q8_0, ElemType::Q4_0, ElemType::Q4K] {
            for moe in [false, true] {
                for trials in [false, true] {
                    if let Err(e) = group_case(d, ty, moe, trials) {
                        eprintln!("  FAIL {ty} moe={moe} trials={trials}: {e}");
                        failed.push(format!("{ty} moe={moe} trials={trials}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failed.is_empty(), "{} case(s) failed: {failed:?}", failed.len());
}
