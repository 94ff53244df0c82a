//! On every usable GPU: each elementwise and ROPE registration runs cases like the harness's
//! (broadcasts, permuted views, in place, f16/bf16 mixes, every UNARY and GLU sub-op, ADD_ID,
//! rope modes with factors and YaRN) and is compared with tandem's f64 reference: NMSE <= 1e-7,
//! no NaN, and no byte outside dst's elements changed. Without a GPU it prints why it skipped.

use crate::gpu::registry::{LaunchCtx, Node, Registration, Scratch};
use crate::gpu::{backends, Context, KernelCache, Kernels};
use std::sync::Arc;
use tandem_graph::params::RopeParams;
use tandem_graph::{ElemType, GluOp, Graph, GraphBuilder, TensorId, UnaryOp};
use tandem_ops::data::{indices, read_f64, write_f64};

type Build = Box<dyn Fn(&mut GraphBuilder) -> TensorId>;

fn xorshift(s: &mut u64) -> f64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    (*s >> 11) as f64 / (1u64 << 53) as f64
}

/// Lays every tensor that owns bytes into one arena (256-byte aligned, 64 bytes apart); views
/// and in-place results point into their base. Returns the arena size.
fn place(g: &mut Graph, base: usize) -> usize {
    let mut at = 0usize;
    for i in 0..g.tensors.len() {
        if g.tensors[i].view_src.is_none() {
            g.tensors[i].data = base + at;
            at += (g.tensors[i].nbytes() + 64).next_multiple_of(256);
        }
    }
    for i in 0..g.tensors.len() {
        if let Some(v) = g.tensors[i].view_src {
            g.tensors[i].data = g.tensors[v.index()].data + g.tensors[i].view_offs;
        }
    }
    at
}

/// Input values for leaf `t` of node `dst`: indices in range for i32 (positions, ids), factors
/// in [0.5, 2], divisors away from zero, the rest in [-3, 3].
fn value(g: &Graph, dst: TensorId, leaf: usize, s: &mut u64) -> f64 {
    let d = g.tensor(dst);
    let t = &g.tensors[leaf];
    let slot = d.src.iter().position(|x| x.map(|x| x.index()) == Some(leaf));
    let r = xorshift(s);
    if t.ty == ElemType::I32 {
        let n = match d.op {
            tandem_graph::Op::AddId => g.tensor(d.src[1].unwrap()).ne[1],
            _ => 512,
        };
        return (r * n as f64).floor();
    }
    match (d.op, slot) {
        (tandem_graph::Op::Div, Some(1)) => 0.5 + 1.5 * r,
        (tandem_graph::Op::Rope, Some(2)) => 0.5 + 1.5 * r,
        _ => 6.0 * r - 3.0,
    }
}

struct Outcome {
    name: &'static str,
    nmse: f64,
}

fn run_case(k: &Kernels, ctx: &Arc<Context>, regs: &[&'static Registration], build: &Build) -> Result<Outcome, String> {
    let mut b = GraphBuilder::new();
    let out = build(&mut b);
    let mut g = b.build();
    // Host arena for the reference, device arena for the kernel; same layout.
    let size = place(&mut g, 0);
    let mut init = vec![0xA5u8; size];
    let mut ig = g.clone();
    place(&mut ig, init.as_mut_ptr() as usize);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ out.0 as u64;
    for i in 0..ig.tensors.len() {
        if ig.tensors[i].view_src.is_none() && ig.tensors[i].op == tandem_graph::Op::None {
            for ix in indices(ig.tensors[i].ne) {
                let v = value(&g, out, i, &mut seed);
                // SAFETY: the tensor lies inside `init` (placed above).
                unsafe { write_f64(&ig.tensors[i], ix, v) };
            }
        }
    }
    // f64 reference on a host copy.
    let mut host = init.clone();
    let hbase = host.as_mut_ptr() as usize;
    let mut hg = g.clone();
    place(&mut hg, hbase);
    // SAFETY: every tensor's data points into `host`, which spans them all.
    unsafe { tandem_ops::reference::compute(hg.tensor(out), &hg.srcs(out)) }.map_err(|e| e.to_string())?;

    let stream = ctx.stream().map_err(|e| e.to_string())?;
    let buf = ctx.alloc(size).map_err(|e| e.to_string())?;
    stream.write(&buf, 0, &init).map_err(|e| e.to_string())?;
    let dbase = buf.ptr().0 as usize;
    let mut dg = g.clone();
    place(&mut dg, dbase);
    let node = Node::of(&dg, out);
    let reg = regs
        .iter()
        .find(|r| r.op == node.dst.op && (r.accepts)(&node, None))
        .ok_or("no registration accepts the node")?;
    let scratch = Scratch::new(ctx.clone());
    let lctx = LaunchCtx {
        kernels: k,
        stream: &stream,
        info: ctx.info(),
        scratch: &scratch,
        settled: false,
        ids_ready: false,
        act_ready: false,
    };
    // SAFETY: every tensor's data is a device address inside `buf`, which spans them all and
    // lives until the stream is synchronized below.
    unsafe { (reg.launch)(&lctx, &node, None) }.map_err(|e| e.to_string())?;
    stream.synchronize().map_err(|e| e.to_string())?;
    let mut got = vec![0u8; size];
    stream.read(&buf, 0, &mut got).map_err(|e| e.to_string())?;

    let mut gg = g.clone();
    place(&mut gg, got.as_ptr() as usize);
    let (dh, dd, dr) = (hg.tensor(out), dg.tensor(out), gg.tensor(out));
    let mut is_dst = vec![false; size];
    let (mut num, mut den) = (0f64, 0f64);
    for ix in indices(dd.ne) {
        let off = dd.data - dbase + dd.offset_of(ix);
        is_dst[off..off + dd.ty.type_size()].fill(true);
        // SAFETY: dst lies inside `got` and `host` as placed.
        let (x, want) = unsafe { (read_f64(dr, ix), read_f64(dh, ix)) };
        if x.is_nan() != want.is_nan() {
            return Err(format!("{}: NaN mismatch at {ix:?}: got {x}, want {want}", reg.name));
        }
        if !want.is_nan() {
            num += (x - want).powi(2);
            den += want * want;
        }
    }
    if let Some(p) = (0..size).find(|&p| !is_dst[p] && got[p] != init[p]) {
        return Err(format!("{}: byte {p} outside dst changed", reg.name));
    }
    Ok(Outcome {
        name: reg.name,
        nmse: num / den.max(1e-30),
    })
}

fn cases() -> Vec<(String, Build)> {
    use ElemType::{BF16, F16, F32};
    let mut v: Vec<(String, Build)> = Vec::new();
    let shapes: [([i64; 4], [i64; 4]); 5] = [
        ([67, 3, 2, 1], [67, 1, 1, 1]),
        ([64, 4, 3, 2], [1, 4, 3, 2]),
        ([7, 1, 1, 1], [1, 1, 1, 1]),
        ([32, 6, 4, 1], [16, 3, 2, 1]),
        ([256, 3, 2, 2], [256, 3, 2, 2]),
    ];
    for op in 0..3 {
        for (t0, t1) in [(F32, F32), (F16, F16), (BF16, BF16), (F16, F32), (BF16, F32)] {
            for (a_ne, b_ne) in shapes {
                v.push((
                    format!("binary{op} {t0}/{t1} {a_ne:?} {b_ne:?}"),
                    Box::new(move |g: &mut GraphBuilder| {
                        let a = g.new_tensor(t0, &a_ne);
                        let b = g.new_tensor(t1, &b_ne);
                        [GraphBuilder::add, GraphBuilder::mul, GraphBuilder::div][op](g, a, b).unwrap()
                    }),
                ));
            }
            v.push((
                format!("binary{op} {t0}/{t1} permuted"),
                Box::new(move |g: &mut GraphBuilder| {
                    let a0 = g.new_tensor(t0, &[32, 3, 5]);
                    let a = g.permute(a0, [0, 2, 1, 3]).unwrap();
                    let b = g.new_tensor(t1, &[32, 1, 3]);
                    [GraphBuilder::add, GraphBuilder::mul, GraphBuilder::div][op](g, a, b).unwrap()
                }),
            ));
            v.push((
                format!("binary{op} {t0}/{t1} inplace"),
                Box::new(move |g: &mut GraphBuilder| {
                    let a = g.new_tensor(t0, &[64, 5, 3]);
                    let b = g.new_tensor(t1, &[64, 5, 1]);
                    let n = [GraphBuilder::add, GraphBuilder::mul, GraphBuilder::div][op](g, a, b).unwrap();
                    g.tensor_mut(n).view_src = Some(a);
                    n
                }),
            ));
        }
    }
    for op in UnaryOp::ALL {
        for ty in [F32, F16] {
            v.push((
                format!("unary {} {ty}", op.name()),
                Box::new(move |g: &mut GraphBuilder| {
                    let a0 = g.new_tensor(ty, &[67, 3, 2]);
                    let a = g.permute(a0, [0, 2, 1, 3]).unwrap();
                    g.unary(a, op).unwrap()
                }),
            ));
        }
    }
    v.push((
        "unary gelu inplace".into(),
        Box::new(|g: &mut GraphBuilder| {
            let a = g.new_tensor(F32, &[4096, 3]);
            let n = g.unary(a, UnaryOp::Gelu).unwrap();
            g.tensor_mut(n).view_src = Some(a);
            n
        }),
    ));
    for ty in [F32, F16] {
        v.push((
            format!("scale {ty}"),
            Box::new(move |g: &mut GraphBuilder| {
                let a = g.new_tensor(ty, &[64, 5, 2]);
                g.scale(a, -1.5, 3.0)
            }),
        ));
        v.push((
            format!("clamp {ty}"),
            Box::new(move |g: &mut GraphBuilder| {
                let a = g.new_tensor(ty, &[1000, 2]);
                g.clamp(a, -0.5, 0.5)
            }),
        ));
    }
    for op in GluOp::ALL {
        for ty in [F32, F16] {
            for form in 0..4 {
                v.push((
                    format!("glu {} {ty} form {form}", op.name()),
                    Box::new(move |g: &mut GraphBuilder| match form {
                        0 | 1 => {
                            let a = g.new_tensor(ty, &[2 * 67, 5, 2]);
                            g.glu(a, op, form == 1).unwrap()
                        }
                        2 => {
                            let a = g.new_tensor(ty, &[67, 5, 2]);
                            let b = g.new_tensor(ty, &[67, 5, 2]);
                            g.glu_split(a, b, op).unwrap()
                        }
                        _ => {
                            let f = g.new_tensor(ty, &[2 * 67, 3, 2]);
                            let nb = g.tensor(f).nb;
                            let x = g.view(f, &[67, 3, 2], &[nb[1], nb[2]], 0).unwrap();
                            let y = g.view(f, &[67, 3, 2], &[nb[1], nb[2]], 67 * ty.type_size()).unwrap();
                            g.glu_split(x, y, op).unwrap()
                        }
                    }),
                ));
            }
        }
    }
    for (ne0, used, tokens, experts) in [(8, 1, 1, 2), (67, 4, 3, 8), (256, 2, 7, 32)] {
        v.push((
            format!("add_id {ne0} {used} {tokens} {experts}"),
            Box::new(move |g: &mut GraphBuilder| {
                let a = g.new_tensor(F32, &[ne0, used, tokens]);
                let b = g.new_tensor(F32, &[ne0, experts]);
                let ids = g.new_tensor(ElemType::I32, &[used, tokens]);
                g.add_id(a, b, ids).unwrap()
            }),
        ));
    }
    for ty in [F32, F16] {
        for neox in [false, true] {
            for (head_dim, n_dims) in [(128, 128), (80, 40), (64, 32)] {
                for ff in [false, true] {
                    for yarn in [false, true] {
                        for layout in 0..3 {
                            v.push((
                                format!(
                                    "rope {ty} neox {neox} {head_dim}/{n_dims} ff {ff} yarn {yarn} layout {layout}"
                                ),
                                Box::new(move |g: &mut GraphBuilder| {
                                    let a = match layout {
                                        1 => {
                                            let full = g.new_tensor(ty, &[head_dim, 16, 7]);
                                            let nb = g.tensor(full).nb;
                                            g.view(full, &[head_dim, 8, 7], &[nb[1], nb[2]], 0).unwrap()
                                        }
                                        _ => g.new_tensor(ty, &[head_dim, 8, 7]),
                                    };
                                    let pos = g.new_tensor(ElemType::I32, &[7]);
                                    let f = ff.then(|| g.new_tensor(F32, &[n_dims / 2]));
                                    let mut p = RopeParams::llama(n_dims as i32, neox);
                                    if yarn {
                                        p.freq_scale = 0.25;
                                        p.ext_factor = 1.0;
                                        p.attn_factor = 1.1;
                                        p.freq_base = 500000.0;
                                    }
                                    let n = g.rope(a, pos, f, p).unwrap();
                                    if layout == 2 {
                                        g.tensor_mut(n).view_src = Some(a);
                                    }
                                    n
                                }),
                            ));
                        }
                    }
                }
            }
        }
    }
    v
}

#[test]
fn elementwise_and_rope_kernels_match_the_reference_on_gpu() {
    let Some(b) = backends().first() else {
        eprintln!("SKIP elementwise_and_rope_kernels_match_the_reference_on_gpu: no usable GPU");
        return;
    };
    let ctx = Context::new(b.runtime.clone(), 0).unwrap();
    let k = Kernels::new(ctx.clone(), b.compiler.clone(), Arc::new(KernelCache::new(None)));
    let regs: Vec<&'static Registration> = super::REGISTRATIONS
        .iter()
        .chain(super::super::rope::REGISTRATIONS)
        .collect();
    let mut failures = Vec::new();
    let mut worst = 0f64;
    let all = cases();
    for (name, build) in &all {
        match run_case(&k, &ctx, &regs, build) {
            Ok(o) if o.nmse <= 1e-7 => worst = worst.max(o.nmse),
            Ok(o) => failures.push(format!("{name} ({}): NMSE {:e}", o.name, o.nmse)),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    eprintln!(
        "{} cases, {} failed, worst passing NMSE {worst:e}",
        all.len(),
        failures.len()
    );
    for f in &failures {
        eprintln!("  FAIL {f}");
    }
    assert!(failures.is_empty());
}
