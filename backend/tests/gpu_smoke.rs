//! GPU smoke test: on every usable device, JIT the elementwise family (cold, then from the disk
//! cache), move data with every copy kind, launch each kernel on contiguous, broadcast and
//! strided shapes, and compare with the CPU. Without a GPU it prints why it skipped.
//!
//! Run: `cargo test -p tandem-backend --test gpu_smoke -- --nocapture`

use std::sync::Arc;
use std::time::Instant;
use tandem_backend::gpu::elementwise::{
    contiguous_f32, launch_binary, launch_scale, launch_silu, BinaryOp, BinaryShape, UnaryShape,
};
use tandem_backend::gpu::{self, Context, GpuBackend, KernelCache, Kernels, Origin, Stream};

type TestResult = Result<(), String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Deterministic values in about [-2, 2], away from zero (they are also divisors).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let v = (s >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0;
            if v.abs() < 0.05 {
                0.5
            } else {
                v
            }
        })
        .collect()
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// f32 at element (i0..i3) of a strided tensor stored in `b`.
fn at(b: &[u8], nb: [i64; 4], i: [i64; 4]) -> f32 {
    let off = (0..4).map(|d| i[d] * nb[d]).sum::<i64>() as usize;
    f32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn indices(ne: [i64; 4]) -> impl Iterator<Item = [i64; 4]> {
    let n = ne.iter().product::<i64>();
    (0..n).map(move |mut k| {
        let mut i = [0i64; 4];
        for d in 0..4 {
            i[d] = k % ne[d];
            k /= ne[d];
        }
        i
    })
}

/// Bytes a strided tensor spans.
fn span(ne: [i64; 4], nb: [i64; 4]) -> usize {
    (0..4).map(|d| (ne[d] - 1) * nb[d]).sum::<i64>() as usize + 4
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum::<f64>().max(1e-30);
    num / den
}

/// Sentinel bytes around each output: 64 bytes before and after must survive the kernel.
const GUARD: usize = 64;
const SENTINEL: u8 = 0xA5;

fn binary_case(k: &Kernels, s: &Stream, op: BinaryOp, name: &str, shape: BinaryShape) -> TestResult {
    let ctx = k.context();
    let (n0, n1) = (span(shape.ne, shape.nb0), span(shape.ne1, shape.nb1));
    let nd = span(shape.ne, shape.nbd);
    let a = to_bytes(&values(n0 / 4 + 1, 1))[..n0].to_vec();
    let b = to_bytes(&values(n1 / 4 + 1, 2))[..n1].to_vec();
    let (da, db) = (ctx.alloc(n0).map_err(err)?, ctx.alloc(n1).map_err(err)?);
    let dd = ctx.alloc(nd + 2 * GUARD).map_err(err)?;
    s.write(&da, 0, &a).map_err(err)?;
    s.write(&db, 0, &b).map_err(err)?;
    s.memset(&dd, 0, SENTINEL, dd.len()).map_err(err)?;
    // SAFETY: every buffer spans its tensor's strided extent (computed by `span`), the output
    // sits inside its guards, and the stream is synchronized before the buffers drop.
    unsafe { launch_binary(k, s, op, da.ptr(), db.ptr(), dd.ptr().offset(GUARD), &shape) }.map_err(err)?;
    let mut out = vec![0u8; dd.len()];
    s.read(&dd, 0, &mut out).map_err(err)?;
    check_guards(&out, nd, name)?;
    let body = &out[GUARD..GUARD + nd];
    let mut bad = 0;
    for i in indices(shape.ne) {
        let j = [0, 1, 2, 3].map(|d| i[d] % shape.ne1[d]);
        let want = op.apply(at(&a, shape.nb0, i), at(&b, shape.nb1, j));
        let got = at(body, shape.nbd, i);
        // One IEEE operation per element: the GPU result must be bit-identical.
        if got.to_bits() != want.to_bits() {
            if bad < 3 {
                eprintln!("    {name}: {i:?}: got {got}, want {want}");
            }
            bad += 1;
        }
    }
    if bad > 0 {
        return Err(format!("{name}: {bad} elements differ"));
    }
    eprintln!("  ok   {name}");
    Ok(())
}

fn check_guards(out: &[u8], nd: usize, name: &str) -> TestResult {
    let before = out[..GUARD].iter().all(|&x| x == SENTINEL);
    let after = out[GUARD + nd..].iter().all(|&x| x == SENTINEL);
    if before && after {
        Ok(())
    } else {
        Err(format!(
            "{name}: wrote outside the output (before ok: {before}, after ok: {after})"
        ))
    }
}

fn unary_case(k: &Kernels, s: &Stream, name: &str, shape: UnaryShape, scale: Option<(f32, f32)>) -> TestResult {
    let ctx = k.context();
    let (ns, nd) = (span(shape.ne, shape.nbs), span(shape.ne, shape.nbd));
    let src = to_bytes(&values(ns / 4 + 1, 3))[..ns].to_vec();
    let ds = ctx.alloc(ns).map_err(err)?;
    let dd = ctx.alloc(nd + 2 * GUARD).map_err(err)?;
    s.write(&ds, 0, &src).map_err(err)?;
    s.memset(&dd, 0, SENTINEL, dd.len()).map_err(err)?;
    let dst = dd.ptr().offset(GUARD);
    // SAFETY: as in `binary_case`.
    unsafe {
        match scale {
            Some((sc, bias)) => launch_scale(k, s, ds.ptr(), dst, &shape, sc, bias),
            None => launch_silu(k, s, ds.ptr(), dst, &shape),
        }
    }
    .map_err(err)?;
    let mut out = vec![0u8; dd.len()];
    s.read(&dd, 0, &mut out).map_err(err)?;
    check_guards(&out, nd, name)?;
    let body = &out[GUARD..GUARD + nd];
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for i in indices(shape.ne) {
        let x = at(&src, shape.nbs, i);
        want.push(match scale {
            Some((sc, bias)) => x * sc + bias,
            None => x / (1.0 + (-x).exp()),
        });
        got.push(at(body, shape.nbd, i));
    }
    if got.iter().any(|v| !v.is_finite()) {
        return Err(format!("{name}: non-finite output"));
    }
    let e = nmse(&got, &want);
    if e > 1e-7 {
        return Err(format!("{name}: NMSE {e:e} > 1e-7"));
    }
    eprintln!("  ok   {name} (NMSE {e:.1e})");
    Ok(())
}

/// Pinned host memory used directly by a kernel (the split-GEMV path), DtoD copies and events.
fn pinned_and_events(k: &Kernels, s: &Stream) -> TestResult {
    let ctx = k.context();
    let n = 1 << 20;
    let a = values(n, 4);
    let b = values(n, 5);
    let mut pa = ctx.alloc_pinned(4 * n).map_err(err)?;
    let pout = ctx.alloc_pinned(4 * n).map_err(err)?;
    pa.as_mut_slice().copy_from_slice(&to_bytes(&a));
    let db = ctx.alloc(4 * n).map_err(err)?;
    let db2 = ctx.alloc(4 * n).map_err(err)?;
    s.write(&db, 0, &to_bytes(&b)).map_err(err)?;
    s.copy(&db2, 0, &db, 0, 4 * n).map_err(err)?;
    let shape = BinaryShape::contiguous([n as i64, 1, 1, 1], [n as i64, 1, 1, 1]);
    let (start, end) = (ctx.event().map_err(err)?, ctx.event().map_err(err)?);
    start.record(s).map_err(err)?;
    // SAFETY: src0 and dst are mapped pinned buffers of 4n bytes, src1 a device buffer of 4n;
    // the stream is synchronized (event) before any of them is read or dropped.
    unsafe {
        launch_binary(
            k,
            s,
            BinaryOp::Add,
            pa.device_ptr(),
            db2.ptr(),
            pout.device_ptr(),
            &shape,
        )
    }
    .map_err(err)?;
    end.record(s).map_err(err)?;
    end.synchronize().map_err(err)?;
    let ms = start.elapsed_ms(&end).map_err(err)?;
    let got = from_bytes(pout.as_slice());
    let bad = got
        .iter()
        .zip(a.iter().zip(&b))
        .filter(|(g, (x, y))| g.to_bits() != (*x + *y).to_bits())
        .count();
    if bad > 0 {
        return Err(format!("pinned add: {bad} elements differ"));
    }
    let gbs = 12.0 * n as f64 / (ms as f64 * 1e-3) / 1e9;
    eprintln!(
        "  ok   pinned host-mapped add, 1M f32 ({ms:.3} ms by events, {gbs:.1} GB/s incl. PCIe reads and writes)"
    );
    Ok(())
}

fn run_device(b: &GpuBackend, ordinal: usize) -> TestResult {
    let ctx = Context::new(b.runtime.clone(), ordinal).map_err(err)?;
    let info = ctx.info().clone();
    let (free, total) = ctx.mem_info().map_err(err)?;
    eprintln!(
        "device {ordinal}: {} {} ({} units, wave {}), {:.1}/{:.1} GiB free, compiler {}",
        info.name,
        info.arch,
        info.compute_units,
        info.warp_size,
        free as f64 / 1073741824.0,
        total as f64 / 1073741824.0,
        b.compiler.id()
    );
    // JIT cold (empty cache folder), then warm from disk with a fresh cache object.
    let dir = std::env::temp_dir().join(format!("tandem-gpu-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (label, want) in [("cold", Origin::Compiled), ("warm", Origin::Disk)] {
        let k = Kernels::new(
            ctx.clone(),
            b.compiler.clone(),
            Arc::new(KernelCache::new(Some(dir.clone()))),
        );
        let t0 = Instant::now();
        k.module("elementwise", None).map_err(err)?;
        let rec = &k.records()[0];
        eprintln!(
            "  jit  elementwise {label}: {:.1} ms ({:?}, {} bytes)",
            t0.elapsed().as_secs_f64() * 1e3,
            rec.origin,
            rec.bytes
        );
        if rec.origin != want {
            return Err(format!("{label} JIT came from {:?}, expected {want:?}", rec.origin));
        }
    }
    let k = Kernels::new(
        ctx.clone(),
        b.compiler.clone(),
        Arc::new(KernelCache::new(Some(dir.clone()))),
    );
    let s = ctx.stream().map_err(err)?;

    let mut failures = Vec::new();
    let mut record = |r: TestResult| {
        if let Err(e) = r {
            eprintln!("  FAIL {e}");
            failures.push(e);
        }
    };
    // Transposed view of a [5, 7] tensor: dims 0 and 1 swapped through the strides.
    let transposed = [7 * 4, 4, 7 * 5 * 4, 7 * 5 * 4];
    let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
    for op in ops {
        let e = op.entry();
        record(binary_case(
            &k,
            &s,
            op,
            &format!("{e} same shape [1000,3,2,2]"),
            BinaryShape::contiguous([1000, 3, 2, 2], [1000, 3, 2, 2]),
        ));
        record(binary_case(
            &k,
            &s,
            op,
            &format!("{e} row broadcast [4096,33,1,1]+[4096,1,1,1]"),
            BinaryShape::contiguous([4096, 33, 1, 1], [4096, 1, 1, 1]),
        ));
        record(binary_case(
            &k,
            &s,
            op,
            &format!("{e} repeat [300,4,6,2]+[100,2,3,1]"),
            BinaryShape::contiguous([300, 4, 6, 2], [100, 2, 3, 1]),
        ));
        record(binary_case(
            &k,
            &s,
            op,
            &format!("{e} scalar [70001,1,1,1]+[1,1,1,1]"),
            BinaryShape::contiguous([70001, 1, 1, 1], [1, 1, 1, 1]),
        ));
        let mut t = BinaryShape::contiguous([5, 7, 1, 1], [5, 7, 1, 1]);
        t.nb0 = transposed;
        record(binary_case(&k, &s, op, &format!("{e} transposed src0 [5,7]"), t));
    }
    // Many rows: more than the 65535-row grid, so the row loop strides.
    record(binary_case(
        &k,
        &s,
        BinaryOp::Add,
        "tandem_add_f32 rows [3,70000,1,1]",
        BinaryShape::contiguous([3, 70000, 1, 1], [3, 1, 1, 1]),
    ));
    let c = |ne: [i64; 4]| UnaryShape {
        ne,
        nbs: contiguous_f32(ne),
        nbd: contiguous_f32(ne),
    };
    record(unary_case(
        &k,
        &s,
        "tandem_scale_f32 [4096,17,2,1] *0.125+0.5",
        c([4096, 17, 2, 1]),
        Some((0.125, 0.5)),
    ));
    record(unary_case(
        &k,
        &s,
        "tandem_silu_f32 [14336,5,1,1]",
        c([14336, 5, 1, 1]),
        None,
    ));
    let mut tu = c([5, 7, 1, 1]);
    tu.nbs = transposed;
    record(unary_case(&k, &s, "tandem_silu_f32 transposed src [5,7]", tu, None));
    record(pinned_and_events(&k, &s));
    let _ = std::fs::remove_dir_all(&dir);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{} case(s) failed on device {ordinal}", failures.len()))
    }
}

#[test]
fn gpu_smoke() {
    let report = gpu::report();
    eprintln!("{report}");
    let backends = gpu::backends();
    if backends.is_empty() {
        eprintln!("SKIP gpu_smoke: no usable GPU ({})", report.info_line());
        return;
    }
    let mut failed = Vec::new();
    let mut devices = 0;
    for b in backends {
        for d in &b.devices {
            devices += 1;
            if let Err(e) = run_device(b, d.ordinal) {
                eprintln!("FAIL {}: {e}", b.runtime.kind().name());
                failed.push(e);
            }
        }
    }
    assert!(devices > 0, "backends without devices");
    assert!(failed.is_empty(), "gpu_smoke failed: {failed:?}");
    eprintln!("gpu_smoke: {devices} device(s) passed");
}
