//! Bad input gives typed errors that name the node, the op and the types: never a panic, never
//! an access outside the tensors, and nothing written when a graph fails.

use tandem_backend::buffer::allocate_graph;
use tandem_backend::{Device, ExecError, HostBuffer, HostDevice};
use tandem_graph::op::SortOrder;
use tandem_graph::{ElemType, GluOp, Graph, GraphBuilder, Op, Tensor, TensorId, UnaryOp};

fn host() -> Device {
    Device::Host(HostDevice::new(2))
}

/// The bytes of tensor `id` (which must be allocated).
fn bytes(g: &Graph, id: TensorId) -> Vec<u8> {
    let t = g.tensor(id);
    // SAFETY: `allocate_graph` gave the tensor `nbytes()` bytes in a buffer the test keeps alive.
    unsafe { std::slice::from_raw_parts(t.data as *const u8, t.nbytes()).to_vec() }
}

fn set_bytes(g: &Graph, id: TensorId, f: impl Fn(&mut [u8])) {
    let t = g.tensor(id);
    // SAFETY: as in `bytes`; the test is the only user of the buffer.
    f(unsafe { std::slice::from_raw_parts_mut(t.data as *mut u8, t.nbytes()) })
}

fn set_indices(g: &Graph, id: TensorId, v: &[i64]) {
    let ty = g.tensor(id).ty;
    set_bytes(g, id, |b| {
        let w = ty.type_size();
        for (c, x) in b.chunks_exact_mut(w).zip(v) {
            if w == 4 {
                c.copy_from_slice(&(*x as i32).to_le_bytes());
            } else {
                c.copy_from_slice(&x.to_le_bytes());
            }
        }
    });
}

/// Allocates `g` and fills every owning tensor with 0x3C (0.0117 as f32, finite), the pattern
/// "untouched" is checked against.
fn allocate(g: &mut Graph) -> HostBuffer {
    let buf = allocate_graph(g, 0).expect("allocation");
    for i in 0..g.tensors.len() {
        if g.tensors[i].view_src.is_none() {
            set_bytes(g, TensorId(i as u32), |b| b.fill(0x3C));
        }
    }
    buf
}

/// Runs `g`, expecting an op error that names `op`, the failing node and its types.
fn expect_op_error(dev: &Device, g: &Graph, op: Op) -> String {
    // SAFETY: every tensor of `g` was placed by `allocate_graph` in a live host buffer.
    let err = unsafe { dev.compute(g) }.expect_err("the graph must fail");
    let msg = err.to_string();
    match &err {
        ExecError::Op { source, .. } => {
            assert_eq!(source.op, op, "{msg}");
            assert!(!source.node.is_empty() && msg.contains(&source.node), "{msg}");
            assert!(!source.dst.is_empty(), "{msg}");
        }
        ExecError::Other { .. } => panic!("expected an op error, got {msg}"),
    }
    assert!(msg.contains(op.name()), "{msg}");
    msg
}

fn push_node(g: &mut Graph, mut t: Tensor, op: Op, srcs: &[TensorId], name: &str) -> TensorId {
    t.op = op;
    t.name = name.to_string();
    for (i, s) in srcs.iter().enumerate() {
        t.src[i] = Some(*s);
    }
    let id = TensorId(g.tensors.len() as u32);
    g.tensors.push(t);
    g.nodes.push(id);
    id
}

#[test]
fn builder_errors_name_op_and_inputs() {
    let mut b = GraphBuilder::new();
    let a = b.new_tensor(ElemType::Q4_0, &[64, 8]);
    let x = b.new_tensor(ElemType::F32, &[32, 2]);
    let e = b.mul_mat(a, x).unwrap_err();
    assert_eq!(e.op, "MUL_MAT");
    assert!(
        e.inputs.contains("q4_0[64,8,1,1]") && e.inputs.contains("f32[32,2,1,1]"),
        "{e}"
    );

    let float_idx = b.new_tensor(ElemType::F32, &[3]);
    assert_eq!(b.get_rows(a, float_idx).unwrap_err().op, "GET_ROWS");
    let y = b.new_tensor(ElemType::F32, &[5, 3]);
    let z = b.new_tensor(ElemType::F32, &[4, 3]);
    let e = b.add(y, z).unwrap_err();
    assert!(
        e.to_string().contains("ADD") && e.to_string().contains("f32[4,3,1,1]"),
        "{e}"
    );
    let half_idx = b.new_tensor(ElemType::F16, &[2]);
    let dst = b.new_tensor(ElemType::F32, &[5, 8]);
    let src = b.new_tensor(ElemType::F32, &[5, 2]);
    assert_eq!(b.set_rows(dst, src, half_idx).unwrap_err().op, "SET_ROWS");
    assert_eq!(b.top_k(y, 6).unwrap_err().op, "TOP_K");
    assert_eq!(b.glu(y, GluOp::Swiglu, false).unwrap_err().op, "GLU");
    assert!(b.try_new_tensor(ElemType::Q4_0, &[33, 2]).is_err());
    assert!(b.try_new_tensor(ElemType::F32, &[-1]).is_err());
}

/// A MUL_MAT whose row lengths differ, built by hand past the builder's checks, fails before
/// any node runs: the earlier node's output stays as it was.
#[test]
fn hand_built_shape_mismatch_fails_before_anything_runs() {
    let mut b = GraphBuilder::new();
    let x = b.new_tensor(ElemType::F32, &[64, 4]);
    let first = b.scale(x, 2.0, 0.0);
    let mut g = b.build();
    let w = TensorId(g.tensors.len() as u32);
    g.tensors.push(Tensor::new(ElemType::F32, &[64, 8]));
    let act = TensorId(g.tensors.len() as u32);
    g.tensors.push(Tensor::new(ElemType::F32, &[32, 2]));
    push_node(
        &mut g,
        Tensor::new(ElemType::F32, &[8, 2]),
        Op::MulMat,
        &[w, act],
        "bad_matmul",
    );
    let _buf = allocate(&mut g);
    let before = bytes(&g, first);
    let msg = expect_op_error(&host(), &g, Op::MulMat);
    assert!(msg.contains("bad_matmul"), "{msg}");
    assert!(msg.contains("f32[64,8,1,1]") && msg.contains("f32[32,2,1,1]"), "{msg}");
    assert_eq!(
        bytes(&g, first),
        before,
        "the first node ran although the graph could not"
    );
}

#[test]
fn missing_source_and_wrong_result_shape_are_errors() {
    let mut g = Graph::default();
    g.tensors.push(Tensor::new(ElemType::F32, &[16, 2]));
    push_node(
        &mut g,
        Tensor::new(ElemType::F32, &[2, 2]),
        Op::MulMat,
        &[TensorId(0)],
        "one_source",
    );
    let _buf = allocate(&mut g);
    expect_op_error(&host(), &g, Op::MulMat);

    let mut g = Graph::default();
    g.tensors.push(Tensor::new(ElemType::F32, &[16, 2]));
    g.tensors.push(Tensor::new(ElemType::F32, &[16, 2]));
    // The result claims more elements than the sources have.
    push_node(
        &mut g,
        Tensor::new(ElemType::F32, &[16, 3]),
        Op::Add,
        &[TensorId(0), TensorId(1)],
        "wide_add",
    );
    let _buf = allocate(&mut g);
    expect_op_error(&host(), &g, Op::Add);
}

#[test]
fn unsupported_type_combinations_are_declined_and_fail() {
    let dev = host();
    let mut b = GraphBuilder::new();
    let a = b.new_tensor(ElemType::Q4_0, &[64, 2]);
    let c = b.new_tensor(ElemType::I32, &[64, 2]);
    let sum = b.add(a, c).unwrap();
    let mut g = b.build();
    assert!(!dev.supports(g.tensor(sum), &g.srcs(sum)));
    let _buf = allocate(&mut g);
    let msg = expect_op_error(&dev, &g, Op::Add);
    assert!(msg.contains("q4_0") && msg.contains("i32"), "{msg}");

    // Activations in a quantized type: not something the CPU matmul takes.
    let mut b = GraphBuilder::new();
    let w = b.new_tensor(ElemType::F32, &[64, 4]);
    let x = b.new_tensor(ElemType::Q8_0, &[64, 2]);
    let mm = b.mul_mat(w, x).unwrap();
    let mut g = b.build();
    assert!(!dev.supports(g.tensor(mm), &g.srcs(mm)));
    let _buf = allocate(&mut g);
    expect_op_error(&dev, &g, Op::MulMat);
}

#[test]
fn unknown_op_params_are_errors() {
    let dev = host();
    let mut b = GraphBuilder::new();
    let a = b.new_tensor(ElemType::F32, &[8, 2]);
    let u = b.unary(a, UnaryOp::Silu).unwrap();
    b.tensor_mut(u).set_param_i32(0, 99);
    let s = b.argsort(a, SortOrder::Asc);
    b.tensor_mut(s).set_param_i32(0, 7);
    let mut g = b.build();
    let _buf = allocate(&mut g);
    expect_op_error(&dev, &g, Op::Unary);
    g.nodes.retain(|&n| n != u);
    expect_op_error(&dev, &g, Op::Argsort);
}

/// Runs `g` with an index tensor holding `bad`, expecting `op` to fail and `out` to keep its
/// bytes.
fn check_bad_index(mut g: Graph, idx: TensorId, out: TensorId, op: Op, good_then_bad: &[i64]) {
    let _buf = allocate(&mut g);
    set_indices(&g, idx, good_then_bad);
    let before = bytes(&g, out);
    let msg = expect_op_error(&host(), &g, op);
    assert_eq!(bytes(&g, out), before, "{op} wrote its output before failing: {msg}");
}

#[test]
fn out_of_range_get_rows_indices_write_nothing() {
    for bad in [4, -1, i32::MAX as i64] {
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[8, 4]);
        let i = b.new_tensor(ElemType::I32, &[3]);
        let out = b.get_rows(a, i).unwrap();
        check_bad_index(b.build(), i, out, Op::GetRows, &[0, 2, bad]);
    }
    let mut b = GraphBuilder::new();
    let a = b.new_tensor(ElemType::Q4_0, &[64, 4]);
    let i = b.new_tensor(ElemType::I32, &[2]);
    let out = b.get_rows(a, i).unwrap();
    check_bad_index(b.build(), i, out, Op::GetRows, &[1, 9]);
}

#[test]
fn out_of_range_set_rows_indices_write_nothing() {
    for (dst_ty, idx_ty) in [
        (ElemType::F32, ElemType::I64),
        (ElemType::F16, ElemType::I32),
        (ElemType::Q8_0, ElemType::I64),
    ] {
        for bad in [4, -1, i64::MAX] {
            let mut b = GraphBuilder::new();
            let dst = b.new_tensor(dst_ty, &[32, 4]);
            let src = b.new_tensor(ElemType::F32, &[32, 2]);
            let i = b.new_tensor(idx_ty, &[2]);
            let out = b.set_rows(dst, src, i).unwrap();
            // `out` is a view of `dst`: the whole destination must be untouched, including the
            // row the valid index names.
            check_bad_index(b.build(), i, out, Op::SetRows, &[1, bad]);
        }
    }
}

#[test]
fn out_of_range_expert_ids_write_nothing() {
    for bad in [4, -2] {
        let mut b = GraphBuilder::new();
        let experts = b.new_tensor(ElemType::F32, &[32, 8, 4]);
        let x = b.new_tensor(ElemType::F32, &[32, 1, 2]);
        let ids = b.new_tensor(ElemType::I32, &[2, 2]);
        let out = b.mul_mat_id(experts, x, ids).unwrap();
        check_bad_index(b.build(), ids, out, Op::MulMatId, &[0, 1, 3, bad]);

        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[16, 2, 3]);
        let bias = b.new_tensor(ElemType::F32, &[16, 4]);
        let ids = b.new_tensor(ElemType::I32, &[2, 3]);
        let out = b.add_id(a, bias, ids).unwrap();
        check_bad_index(b.build(), ids, out, Op::AddId, &[0, 1, 2, 3, 0, bad]);
    }
}

/// Zero-sized tensors either compute (nothing) or fail with an op error; never a panic.
#[test]
fn zero_sized_tensors_work_or_fail_cleanly() {
    let mut graphs = Vec::new();
    let mut b = GraphBuilder::new();
    let a = b.new_tensor(ElemType::F32, &[0, 4]);
    let c = b.new_tensor(ElemType::F32, &[0, 4]);
    b.add(a, c).unwrap();
    graphs.push(b.build());
    let mut b = GraphBuilder::new();
    let w = b.new_tensor(ElemType::Q4_0, &[64, 8]);
    let x = b.new_tensor(ElemType::F32, &[64, 0]);
    b.mul_mat(w, x).unwrap();
    graphs.push(b.build());
    let mut b = GraphBuilder::new();
    let t = b.new_tensor(ElemType::F16, &[16, 4]);
    let i = b.new_tensor(ElemType::I32, &[0]);
    b.get_rows(t, i).unwrap();
    graphs.push(b.build());
    let mut b = GraphBuilder::new();
    let s = b.new_tensor(ElemType::F32, &[8, 0]);
    let s = b.soft_max(s, None, None, 1.0, 0.0).unwrap();
    b.rms_norm(s, 1e-5);
    graphs.push(b.build());
    let dev = host();
    for mut g in graphs {
        let _buf = allocate(&mut g);
        // SAFETY: allocated above; zero-sized tensors have no bytes to touch.
        match unsafe { dev.compute(&g) } {
            Ok(_) => {}
            Err(ExecError::Op { source, .. }) => assert!(!source.node.is_empty()),
            Err(e) => panic!("unexpected error kind: {e}"),
        }
    }
}

#[test]
fn unallocated_tensors_are_errors() {
    let dev = host();
    let mut b = GraphBuilder::new();
    let a = b.new_tensor(ElemType::F32, &[8, 2]);
    b.scale(a, 2.0, 0.0);
    let g = b.build();
    // SAFETY: no tensor has an address; the device must refuse rather than dereference 0.
    let e = unsafe { dev.compute(&g) }.expect_err("an unallocated graph must fail");
    assert!(e.to_string().contains("SCALE"), "{e}");

    // Only the source lacks memory.
    let mut b = GraphBuilder::new();
    let a = b.new_tensor(ElemType::F32, &[8, 2]);
    let out = b.scale(a, 2.0, 0.0);
    let mut g = b.build();
    let buf = HostBuffer::new(g.tensor(out).nbytes()).unwrap();
    g.tensor_mut(out).data = buf.addr();
    // SAFETY: the result has memory; the source's address is 0 and must be refused.
    let e = unsafe { dev.compute(&g) }.expect_err("an unallocated source must fail");
    assert!(e.to_string().contains("SCALE"), "{e}");
}
