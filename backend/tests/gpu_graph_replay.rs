//! Device graphs, on every usable GPU: one graph (RMS_NORM, a q4_0 MUL_MAT of one column in the
//! decode kernels, ADD) kept at the same device addresses and run five times with new input
//! values before each run. The first two runs go launch by launch, the third captures it into a
//! device graph and the later ones replay that (where the runtime has device graphs and
//! `TANDEM_GRAPHS` leaves them on; the test checks which happened from each run's stats), and
//! every run must match the host device's result for that run's inputs. A run after the inputs moved must not replay. Without
//! a GPU it prints why it skipped.
//!
//! Run: `cargo test -p tandem-backend --test gpu_graph_replay -- --nocapture`

mod common;

use common::{bytes, floats, gpus_or_skip, nmse, set_bytes, Rng};
use tandem_backend::buffer::allocate_graph;
use tandem_backend::config::Config;
use tandem_backend::gpu::{DeviceAlloc, GpuDevice};
use tandem_backend::{Device, DeviceGraph, HostDevice};
use tandem_graph::{ElemType, Graph, GraphBuilder, TensorId};

/// A device allocation holding `image` (the graph's host buffer, at host address `base`), and
/// the graph with every address moved into it.
fn upload(g: &GpuDevice, graph: &Graph, image: &[u8], base: usize) -> Result<(DeviceAlloc, Graph), String> {
    let dev = g.alloc(image.len()).map_err(|e| e.to_string())?;
    // SAFETY: the allocation holds the image's length.
    unsafe { g.write(dev.ptr(), image) }.map_err(|e| e.to_string())?;
    let mut moved = graph.clone();
    for t in moved.tensors.iter_mut() {
        if t.data != 0 {
            t.data = t.data - base + dev.ptr().0 as usize;
        }
    }
    Ok((dev, moved))
}

fn run_on(gpu: &Device) -> Result<(), String> {
    let Device::Gpu(g) = gpu else {
        return Err("not a GPU device".into());
    };
    let (k, m) = (4096i64, 1024i64);
    let mut b = GraphBuilder::new();
    let w = b.new_tensor(ElemType::Q4_0, &[k, m]);
    let x = b.new_tensor(ElemType::F32, &[k, 1]);
    let bias = b.new_tensor(ElemType::F32, &[m, 1]);
    let norm = b.rms_norm(x, 1e-6);
    let y = b.mul_mat(w, norm).map_err(|e| e.to_string())?;
    let out = b.add(y, bias).map_err(|e| e.to_string())?;
    let mut graph = b.build();
    let mut buf = allocate_graph(&mut graph, 0)?;
    let mut rng = Rng(0x1234_5679);
    set_bytes(&graph, w, |wb| {
        for v in wb.iter_mut() {
            *v = rng.next() as u8;
        }
        for blk in wb.chunks_exact_mut(ElemType::Q4_0.type_size()) {
            // f16 scales 0x2800 ..= 0x28ff: about 0.031 .. 0.035.
            let h = 0x2800u16 | (rng.next() & 0xff) as u16;
            blk[..2].copy_from_slice(&h.to_le_bytes());
        }
    });
    let fill = |id: TensorId, rng: &mut Rng| {
        set_bytes(&graph, id, |b| {
            for c in b.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.unit().to_le_bytes());
            }
        })
    };
    fill(bias, &mut rng);
    // The image at its device address, and the graph moved there.
    let (base, len) = (buf.addr(), buf.len());
    let (dev, moved) = upload(g, &graph, &buf.as_mut_slice()[..len], base)?;
    let offset = |id: TensorId| graph.tensor(id).data - base;
    let host = Device::Host(HostDevice::new(2));
    let graphs = Config::get().graphs;
    let mut seen = Vec::new();
    for run in 0..5 {
        fill(x, &mut rng);
        // SAFETY: every tensor of the graph lies in `buf`, which outlives the call.
        unsafe { host.compute(&graph) }.map_err(|e| format!("host: {e}"))?;
        let want = floats(&bytes(&graph, out));
        // SAFETY: x's bytes lie at its offset in the allocation.
        unsafe { g.write(dev.ptr().offset(offset(x)), &bytes(&graph, x)) }.map_err(|e| e.to_string())?;
        // SAFETY: every address of `moved` points into `dev` at the offset it has in the image.
        let stats = unsafe { g.compute(&moved) }.map_err(|e| format!("run {run}: {e}"))?;
        let mut got = vec![0u8; (m * 4) as usize];
        // SAFETY: the output's bytes lie at its offset in the allocation.
        unsafe { g.read(dev.ptr().offset(offset(out)), &mut got) }.map_err(|e| e.to_string())?;
        let e = nmse(&floats(&got), &want);
        eprintln!("  run {run}: {:?}, NMSE {e:.1e} against the host", stats.device_graph);
        if e.is_nan() || e > 5e-4 {
            return Err(format!(
                "run {run} ({:?}): NMSE {e:.3e} against the host",
                stats.device_graph
            ));
        }
        if stats.cpu_fallback_nodes > 0 {
            return Err(format!(
                "run {run}: {} nodes on the CPU fallback",
                stats.cpu_fallback_nodes
            ));
        }
        seen.push(stats.device_graph);
    }
    let captures = g.has_device_graphs() && graphs;
    let expected = if captures {
        vec![
            None,
            None,
            Some(DeviceGraph::Captured),
            Some(DeviceGraph::Replayed),
            Some(DeviceGraph::Replayed),
        ]
    } else {
        vec![None; 5]
    };
    if seen != expected {
        return Err(format!("device graphs {seen:?}, expected {expected:?}"));
    }
    // The same graph at other addresses: runs launch by launch, right.
    let (dev2, moved2) = upload(g, &graph, &buf.as_mut_slice()[..len], base)?;
    // SAFETY: as above.
    let stats = unsafe { g.compute(&moved2) }.map_err(|e| format!("moved: {e}"))?;
    if stats.device_graph.is_some() {
        return Err(format!("a graph at new addresses ran as {:?}", stats.device_graph));
    }
    let mut got = vec![0u8; (m * 4) as usize];
    // SAFETY: as above.
    unsafe { g.read(dev2.ptr().offset(offset(out)), &mut got) }.map_err(|e| e.to_string())?;
    let e = nmse(&floats(&got), &floats(&bytes(&graph, out)));
    if e.is_nan() || e > 5e-4 {
        return Err(format!("moved graph: NMSE {e:.3e} against the host"));
    }
    eprintln!("  moved: launch by launch, NMSE {e:.1e}");
    Ok(())
}

#[test]
fn repeated_graphs_replay_and_match_the_host() {
    let Some(gpus) = gpus_or_skip("repeated_graphs_replay_and_match_the_host") else {
        return;
    };
    let mut failed = Vec::new();
    for d in &gpus {
        eprintln!("{}: {}", d.name(), d.description());
        if let Err(e) = run_on(d) {
            eprintln!("  FAIL {e}");
            failed.push(e);
        }
    }
    assert!(failed.is_empty(), "{} device(s) failed: {failed:?}", failed.len());
}
