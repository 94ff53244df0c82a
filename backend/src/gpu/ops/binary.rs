//! Elementwise registrations: ADD/MUL/DIV with broadcasting, GLU, UNARY, SCALE, CLAMP, ADD_ID, and
//! the MoE output's MUL by the routing weights fused with the ADD chain that sums it.
//!
//! Each op has an `_f32` registration (every tensor f32) and a `_half` one (any other mix of f32,
//! f16 and bf16, the mixes tandem's CPU ops take); UNARY is one registration per type group for
//! all seventeen sub-ops. Predicates accept any byte strides that are multiples of the element
//! size (views, permutations) and dst exactly in place on a source; they decline what the CPU
//! check would refuse, so the CPU fallback keeps reporting those errors.
//!
//! ADD_ID cannot fail on the GPU the way the CPU op does on an id outside src1's rows: such a
//! row of dst becomes NaN (src1 is never read out of bounds) so the bad input stays visible.

use crate::gpu::elementwise::{
    float_type_id, launch_add_id, launch_binary, launch_combine, launch_map, launch_moe_sum, AddIdShape, BinaryOp,
    BinaryShape, Combine, Map, MoeSumShape, UnaryShape,
};
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, read_apart, LaunchCtx, Node, Registration};
use tandem_graph::params::{clamp_params, glu_op, scale_params, unary_op};
use tandem_graph::{ElemType, Op, Tensor};

pub const REGISTRATIONS: &[Registration] = &[
    Registration {
        name: "hip.moe_sum_f32",
        op: Op::Mul,
        fuses: Some(Op::Add),
        accepts: accepts_moe_sum,
        launch: launch_moe_sum_node,
    },
    reg("hip.add_f32", Op::Add, accepts_binary_f32, launch_binary_f32),
    reg("hip.sub_f32", Op::Sub, accepts_binary_f32, launch_binary_f32),
    reg("hip.mul_f32", Op::Mul, accepts_binary_f32, launch_binary_f32),
    reg("hip.div_f32", Op::Div, accepts_binary_f32, launch_binary_f32),
    reg("hip.add_half", Op::Add, accepts_binary_half, launch_binary_typed),
    reg("hip.sub_half", Op::Sub, accepts_binary_half, launch_binary_typed),
    reg("hip.mul_half", Op::Mul, accepts_binary_half, launch_binary_typed),
    reg("hip.div_half", Op::Div, accepts_binary_half, launch_binary_typed),
    reg("hip.glu_f32", Op::Glu, accepts_glu_f32, launch_glu),
    reg("hip.glu_half", Op::Glu, accepts_glu_half, launch_glu),
    reg("hip.unary_f32", Op::Unary, accepts_map_f32, launch_map_node),
    reg("hip.unary_half", Op::Unary, accepts_map_half, launch_map_node),
    reg("hip.scale_f32", Op::Scale, accepts_map_f32, launch_map_node),
    reg("hip.scale_half", Op::Scale, accepts_map_half, launch_map_node),
    reg("hip.clamp_f32", Op::Clamp, accepts_map_f32, launch_map_node),
    reg("hip.clamp_half", Op::Clamp, accepts_map_half, launch_map_node),
    reg("hip.add_id_f32", Op::AddId, accepts_add_id, launch_add_id_node),
];

const fn reg(
    name: &'static str,
    op: Op,
    accepts: crate::gpu::registry::Accepts,
    launch: crate::gpu::registry::Launch,
) -> Registration {
    Registration {
        name,
        op,
        fuses: None,
        accepts,
        launch,
    }
}

// ---------------------------------------------------------------- shared checks (rope.rs too)

/// Extents are non-negative, every stride and the view offset are multiples of the element size
/// (so every access is aligned), and the element count fits an i64.
pub(super) fn well_formed(t: &Tensor) -> bool {
    let size = t.ty.type_size();
    if size == 0 || t.ty.block_size() != 1 {
        return false;
    }
    if t.ne.iter().any(|&n| n < 0) || t.ne.iter().try_fold(1i64, |acc, &n| acc.checked_mul(n)).is_none() {
        return false;
    }
    t.nb.iter().all(|&b| b.is_multiple_of(size) && i64::try_from(b).is_ok()) && t.view_offs.is_multiple_of(size)
}

/// No two elements of `t` share bytes (checked on the dims of more than one element, sorted by
/// stride): every thread then writes bytes no other thread writes.
pub(super) fn elements_disjoint(t: &Tensor) -> bool {
    let mut dims: Vec<(usize, i64)> = (0..4).filter(|&i| t.ne[i] > 1).map(|i| (t.nb[i], t.ne[i])).collect();
    dims.sort_unstable();
    let mut span = t.ty.type_size();
    for (nb, ne) in dims {
        if nb < span {
            return false;
        }
        let Some(s) = (ne as usize - 1).checked_mul(nb).and_then(|x| x.checked_add(span)) else {
            return false;
        };
        span = s;
    }
    true
}

fn strides(t: &Tensor) -> [i64; 4] {
    t.nb.map(|b| b as i64)
}

/// The ggml ids of `ts` when all are f32/f16/bf16 and, per `all_f32`, all f32 or not all f32.
fn float_ids<const N: usize>(ts: [&Tensor; N], all_f32: bool) -> Option<[i32; N]> {
    let mut ids = [0i32; N];
    for (id, t) in ids.iter_mut().zip(ts) {
        *id = float_type_id(t.ty)?;
    }
    let f32_only = ts.iter().all(|t| t.ty == ElemType::F32);
    (f32_only == all_f32).then_some(ids)
}

// ---------------------------------------------------------------- ADD / SUB / MUL / DIV

fn binary_op(op: Op) -> Option<BinaryOp> {
    match op {
        Op::Add => Some(BinaryOp::Add),
        Op::Sub => Some(BinaryOp::Sub),
        Op::Mul => Some(BinaryOp::Mul),
        Op::Div => Some(BinaryOp::Div),
        _ => None,
    }
}

/// dst = src0 shape, src1 repeating into it (each extent positive and dividing src0's).
fn binary_shape_ok(node: &Node<'_>, all_f32: bool) -> bool {
    let (Some(a), Some(b)) = (node.src(0), node.src(1)) else {
        return false;
    };
    let d = node.dst;
    if binary_op(d.op).is_none() || float_ids([a, b, d], all_f32).is_none() {
        return false;
    }
    if !(well_formed(a) && well_formed(b) && well_formed(d) && elements_disjoint(d)) {
        return false;
    }
    d.ne == a.ne && (0..4).all(|k| b.ne[k] > 0 && a.ne[k] % b.ne[k] == 0)
}

fn accepts_binary_f32(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    binary_shape_ok(node, true)
}

fn accepts_binary_half(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    binary_shape_ok(node, false)
}

fn binary_shape(a: &Tensor, b: &Tensor, d: &Tensor) -> BinaryShape {
    BinaryShape {
        ne: d.ne,
        ne1: b.ne,
        nb0: strides(a),
        nb1: strides(b),
        nbd: strides(d),
    }
}

fn sources2<'a>(node: &Node<'a>, call: &'static str) -> Result<(&'a Tensor, &'a Tensor), KernelError> {
    match (node.src(0), node.src(1)) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(launch_error(call, "missing source")),
    }
}

/// # Safety
/// See [`crate::gpu::registry::Launch`].
unsafe fn launch_binary_f32(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let (a, b) = sources2(node, "hip.binary_f32")?;
    let d = node.dst;
    let op = binary_op(d.op).ok_or_else(|| launch_error("hip.binary_f32", "not a binary op"))?;
    let shape = binary_shape(a, b, d);
    // SAFETY: the predicate checked types (f32), shapes and strides; the registry contract gives
    // device addresses covering each tensor.
    unsafe { launch_binary(ctx.kernels, ctx.stream, op, dptr(a), dptr(b), dptr(d), &shape) }
}

/// # Safety
/// See [`crate::gpu::registry::Launch`].
unsafe fn launch_binary_typed(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    _next: Option<&Node<'_>>,
) -> Result<(), KernelError> {
    let (a, b) = sources2(node, "hip.binary_half")?;
    let d = node.dst;
    let op = binary_op(d.op).ok_or_else(|| launch_error("hip.binary_half", "not a binary op"))?;
    let types = float_ids([a, b, d], false).ok_or_else(|| launch_error("hip.binary_half", "element types"))?;
    let shape = binary_shape(a, b, d);
    // SAFETY: as in launch_binary_f32, with the types the kernel is told.
    unsafe {
        launch_combine(
            ctx.kernels,
            ctx.stream,
            Combine::Binary(op),
            types,
            dptr(a),
            dptr(b),
            dptr(d),
            &shape,
        )
    }
}

// ---------------------------------------------------------------- MoE weighted sum

/// The MoE sum's shape for `mul` (the experts' rows times their weights, `[e, k, t]`) and the
/// last ADD of the chain summing its k views (`[e, t]`), when every tensor is f32 with
/// contiguous rows and the chain's last view is where the plan's chain puts it. The plan
/// (`exec::moe_sum_chain`) checks the whole chain; this checks what the kernel reads and writes.
fn moe_sum_shape(mul: &Node<'_>, last: &Node<'_>) -> Option<MoeSumShape> {
    let (x, w) = (mul.src(0)?, mul.src(1)?);
    let (m, d) = (mul.dst, last.dst);
    if m.op != Op::Mul || d.op != Op::Add {
        return None;
    }
    if [x, w, m, d].iter().any(|t| t.ty != ElemType::F32 || !well_formed(t)) {
        return None;
    }
    let [e, k, t, one] = m.ne;
    if k < 2 || one != 1 || x.ne != m.ne || !(w.ne[0] == 1 || w.ne[0] == e) || w.ne[1..] != m.ne[1..] {
        return None;
    }
    if x.nb[0] != 4 || m.nb[0] != 4 || d.nb[0] != 4 || (w.ne[0] > 1 && w.nb[0] != 4) {
        return None;
    }
    if d.ne != [e, t, 1, 1] || !elements_disjoint(d) {
        return None;
    }
    // The chain's last view: row k - 1 of every token of the product.
    let at = m.data.checked_add((k as usize - 1).checked_mul(m.nb[1])?)?;
    let view_last = [last.src(0), last.src(1)]
        .into_iter()
        .flatten()
        .any(|v| v.data == at && v.ne == [e, t, 1, 1] && v.nb[1] == m.nb[2]);
    if !view_last {
        return None;
    }
    Some(MoeSumShape {
        e,
        k,
        t,
        nbx1: x.nb[1] as i64,
        nbx2: x.nb[2] as i64,
        nbw0: if w.ne[0] == 1 { 0 } else { w.nb[0] as i64 },
        nbw1: w.nb[1] as i64,
        nbw2: w.nb[2] as i64,
        nbd1: d.nb[1] as i64,
    })
}

fn accepts_moe_sum(node: &Node<'_>, next: Option<&Node<'_>>) -> bool {
    next.is_some_and(|last| moe_sum_shape(node, last).is_some())
}

/// # Safety
/// See [`crate::gpu::registry::Launch`]; `next` is the chain's last ADD.
unsafe fn launch_moe_sum_node(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    next: Option<&Node<'_>>,
) -> Result<(), KernelError> {
    let last = next.ok_or_else(|| launch_error("hip.moe_sum_f32", "no ADD chain"))?;
    let shape = moe_sum_shape(node, last).ok_or_else(|| launch_error("hip.moe_sum_f32", "not a MoE sum"))?;
    let (x, w) = sources2(node, "hip.moe_sum_f32")?;
    // SAFETY: the registry contract gives device addresses covering each tensor.
    let at = unsafe { read_apart(ctx, [x, w], &[last.dst]) }?;
    // SAFETY: the predicate checked types, extents and strides; x and w are read where read_apart
    // says, with their own strides. The product itself is never written: only the chain's views
    // read it, and the plan fused them all.
    unsafe { launch_moe_sum(ctx.kernels, ctx.stream, at[0], at[1], dptr(last.dst), &shape) }
}

// ---------------------------------------------------------------- GLU

/// The GLU kernel's operands: x and gate tensors (strides), the byte offsets of their first
/// element from those tensors' data, and the shape the kernel walks.
struct GluPlan<'a> {
    x: &'a Tensor,
    g: &'a Tensor,
    x_off: usize,
    g_off: usize,
    shape: BinaryShape,
    op: Combine,
}

/// What the kernel does for a GLU node, `None` when the node is not one the CPU would run.
fn glu_plan<'a>(node: &Node<'a>) -> Option<GluPlan<'a>> {
    let a = node.src(0)?;
    let d = node.dst;
    let (op, swapped) = glu_op(d);
    let op = op?;
    let (g, x_off, g_off) = match node.src(1) {
        Some(b) => {
            if b.ne != a.ne || d.ne != a.ne {
                return None;
            }
            (b, 0, 0)
        }
        None => {
            let want = [a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]];
            if a.ne[0] % 2 != 0 || d.ne != want {
                return None;
            }
            // x and g are the two halves of each src0 row; `swapped` puts x second.
            let half = (d.ne[0] as usize).checked_mul(a.nb[0])?;
            if swapped {
                (a, half, 0)
            } else {
                (a, 0, half)
            }
        }
    };
    Some(GluPlan {
        x: a,
        g,
        x_off,
        g_off,
        shape: BinaryShape {
            ne: d.ne,
            ne1: d.ne,
            nb0: strides(a),
            nb1: strides(g),
            nbd: strides(d),
        },
        op: Combine::Gate(op),
    })
}

fn accepts_glu(node: &Node<'_>, all_f32: bool) -> bool {
    let Some(a) = node.src(0) else {
        return false;
    };
    let d = node.dst;
    let g = node.src(1).unwrap_or(a);
    if float_ids([a, g, d], all_f32).is_none() {
        return false;
    }
    if !(well_formed(a) && well_formed(g) && well_formed(d) && elements_disjoint(d)) {
        return false;
    }
    glu_plan(node).is_some()
}

pub(crate) fn accepts_glu_f32(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    accepts_glu(node, true)
}

fn accepts_glu_half(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    accepts_glu(node, false)
}

/// # Safety
/// See [`crate::gpu::registry::Launch`].
pub(crate) unsafe fn launch_glu(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    _next: Option<&Node<'_>>,
) -> Result<(), KernelError> {
    let p = glu_plan(node).ok_or_else(|| launch_error("hip.glu", "not a GLU node the kernel runs"))?;
    let d = node.dst;
    let types = [p.x.ty, p.g.ty, d.ty].map(float_type_id);
    let [Some(tx), Some(tg), Some(td)] = types else {
        return Err(launch_error("hip.glu", "element types"));
    };
    // SAFETY: the predicate checked types, shapes and strides; x and g start inside their
    // tensors (at most half a src0 row in) and the kernel walks dst's shape over them.
    unsafe {
        launch_combine(
            ctx.kernels,
            ctx.stream,
            p.op,
            [tx, tg, td],
            dptr(p.x).offset(p.x_off),
            dptr(p.g).offset(p.g_off),
            dptr(d),
            &p.shape,
        )
    }
}

// ---------------------------------------------------------------- UNARY / SCALE / CLAMP

fn map_of(d: &Tensor) -> Option<Map> {
    match d.op {
        Op::Unary => unary_op(d).map(Map::Unary),
        Op::Scale => {
            let (scale, bias) = scale_params(d);
            Some(Map::Scale { scale, bias })
        }
        Op::Clamp => {
            let (min, max) = clamp_params(d);
            Some(Map::Clamp { min, max })
        }
        _ => None,
    }
}

fn accepts_map(node: &Node<'_>, all_f32: bool) -> bool {
    let Some(a) = node.src(0) else {
        return false;
    };
    let d = node.dst;
    if map_of(d).is_none() || float_ids([a, d], all_f32).is_none() {
        return false;
    }
    well_formed(a) && well_formed(d) && elements_disjoint(d) && d.ne == a.ne
}

fn accepts_map_f32(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    accepts_map(node, true)
}

fn accepts_map_half(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    accepts_map(node, false)
}

/// # Safety
/// See [`crate::gpu::registry::Launch`].
unsafe fn launch_map_node(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let a = node.src(0).ok_or_else(|| launch_error("hip.unary", "missing source"))?;
    let d = node.dst;
    let op = map_of(d).ok_or_else(|| launch_error("hip.unary", "unknown op"))?;
    let (Some(ts), Some(td)) = (float_type_id(a.ty), float_type_id(d.ty)) else {
        return Err(launch_error("hip.unary", "element types"));
    };
    let shape = UnaryShape {
        ne: d.ne,
        nbs: strides(a),
        nbd: strides(d),
    };
    // SAFETY: the predicate checked types, shapes and strides.
    unsafe { launch_map(ctx.kernels, ctx.stream, op, [ts, td], dptr(a), dptr(d), &shape) }
}

// ---------------------------------------------------------------- ADD_ID

fn add_id_shape<'a>(node: &Node<'a>) -> Option<(AddIdShape, [&'a Tensor; 3])> {
    let (a, b, ids) = (node.src(0)?, node.src(1)?, node.src(2)?);
    let d = node.dst;
    if [d, a, b].iter().any(|t| t.ty != ElemType::F32) || ids.ty != ElemType::I32 {
        return None;
    }
    if ![d, a, b, ids].iter().all(|t| well_formed(t)) || !elements_disjoint(d) {
        return None;
    }
    if d.ne != a.ne || b.ne[0] != a.ne[0] || ids.ne[0] != a.ne[1] || ids.ne[1] != a.ne[2] {
        return None;
    }
    let shape = AddIdShape {
        ne: d.ne,
        nba: strides(a),
        nbd: strides(d),
        nbb0: b.nb[0] as i64,
        nbb1: b.nb[1] as i64,
        nbi0: ids.nb[0] as i64,
        nbi1: ids.nb[1] as i64,
        rows_b: b.ne[1],
    };
    Some((shape, [a, b, ids]))
}

fn accepts_add_id(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    add_id_shape(node).is_some()
}

/// # Safety
/// See [`crate::gpu::registry::Launch`].
unsafe fn launch_add_id_node(
    ctx: &LaunchCtx<'_>,
    node: &Node<'_>,
    _next: Option<&Node<'_>>,
) -> Result<(), KernelError> {
    let (shape, [a, b, ids]) =
        add_id_shape(node).ok_or_else(|| launch_error("hip.add_id_f32", "not an ADD_ID node"))?;
    // SAFETY: the predicate checked types, shapes and strides; ids outside src1's rows are
    // handled in the kernel without reading src1.
    unsafe {
        launch_add_id(
            ctx.kernels,
            ctx.stream,
            dptr(a),
            dptr(b),
            dptr(ids),
            dptr(node.dst),
            &shape,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::registry::accepting;
    use tandem_graph::{GluOp, Graph, GraphBuilder, TensorId, UnaryOp};

    fn chosen(g: &Graph, id: TensorId) -> Vec<&'static str> {
        accepting(REGISTRATIONS, g, id)
    }

    #[test]
    fn registration_names_are_unique_and_ops_match() {
        let mut names: Vec<_> = REGISTRATIONS.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REGISTRATIONS.len());
        assert!(REGISTRATIONS.iter().all(|r| r.name.starts_with("hip.")));
        // Only the MoE sum fuses (its ADD chain).
        let fusing: Vec<_> = REGISTRATIONS
            .iter()
            .filter(|r| r.fuses.is_some())
            .map(|r| r.name)
            .collect();
        assert_eq!(fusing, ["hip.moe_sum_f32"]);
    }

    #[test]
    fn binary_types_pick_one_registration() {
        use ElemType::{BF16, F16, F32};
        for (t0, t1, want) in [
            (F32, F32, "hip.add_f32"),
            (F16, F16, "hip.add_half"),
            (BF16, BF16, "hip.add_half"),
            (F16, F32, "hip.add_half"),
            (BF16, F32, "hip.add_half"),
        ] {
            let mut g = GraphBuilder::new();
            let a = g.new_tensor(t0, &[64, 4, 3, 2]);
            let b = g.new_tensor(t1, &[1, 4, 3, 2]);
            let n = g.add(a, b).unwrap();
            let s = g.sub(a, b).unwrap();
            let g = g.build();
            assert_eq!(chosen(&g, n), vec![want]);
            assert_eq!(chosen(&g, s), vec![want.replace("add", "sub")]);
        }
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(F32, &[32, 6, 4]);
        let b = g.new_tensor(F32, &[16, 3, 2]);
        let m = g.mul(a, b).unwrap();
        let d = g.div(a, b).unwrap();
        let g = g.build();
        assert_eq!(chosen(&g, m), vec!["hip.mul_f32"]);
        assert_eq!(chosen(&g, d), vec!["hip.div_f32"]);
    }

    #[test]
    fn binary_declines_what_it_cannot_run() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[8, 4]);
        let b = g.new_tensor(ElemType::F32, &[8, 2]);
        let n = g.add(a, b).unwrap();
        let g = g.build();
        assert_eq!(chosen(&g, n), vec!["hip.add_f32"]);
        // src1 that does not repeat into src0.
        let mut bad = g.clone();
        bad.tensors[b.index()].ne = [8, 3, 1, 1];
        assert!(chosen(&bad, n).is_empty());
        // Quantized and integer operands.
        let mut bad = g.clone();
        bad.tensors[a.index()].ty = ElemType::I32;
        assert!(chosen(&bad, n).is_empty());
        // A stride that would misalign f32 loads.
        let mut bad = g.clone();
        bad.tensors[a.index()].nb[1] = 34;
        assert!(chosen(&bad, n).is_empty());
        let mut bad = g.clone();
        bad.tensors[n.index()].view_offs = 2;
        assert!(chosen(&bad, n).is_empty());
        // dst elements overlapping each other (a broadcast-like stride of 0).
        let mut bad = g.clone();
        bad.tensors[n.index()].nb[1] = 0;
        assert!(chosen(&bad, n).is_empty());
        // Missing src1.
        let mut bad = g.clone();
        bad.tensors[n.index()].src[1] = None;
        assert!(chosen(&bad, n).is_empty());
    }

    #[test]
    fn binary_shape_takes_views_strides() {
        let mut g = GraphBuilder::new();
        let a0 = g.new_tensor(ElemType::F32, &[32, 3, 5]);
        let a = g.permute(a0, [0, 2, 1, 3]).unwrap(); // [32, 5, 3]
        let b = g.new_tensor(ElemType::F32, &[32, 1, 3]);
        let n = g.mul(a, b).unwrap();
        let g = g.build();
        assert_eq!(chosen(&g, n), vec!["hip.mul_f32"]);
        let nd = Node::of(&g, n);
        let s = binary_shape(nd.src(0).unwrap(), nd.src(1).unwrap(), nd.dst);
        assert_eq!(s.ne, [32, 5, 3, 1]);
        assert_eq!(s.ne1, [32, 1, 3, 1]);
        assert_eq!(s.nb0, [4, 384, 128, 1920]);
        assert_eq!(s.nbd, [4, 128, 640, 1920]);
        assert!(s.check().is_ok());
    }

    #[test]
    fn glu_forms_and_plans() {
        for op in GluOp::ALL {
            for swapped in [false, true] {
                let mut g = GraphBuilder::new();
                let a = g.new_tensor(ElemType::F32, &[2 * 37, 5, 3]);
                let n = g.glu(a, op, swapped).unwrap();
                let g = g.build();
                assert_eq!(chosen(&g, n), vec!["hip.glu_f32"]);
                let p = glu_plan(&Node::of(&g, n)).unwrap();
                let half = 37 * 4;
                assert_eq!((p.x_off, p.g_off), if swapped { (half, 0) } else { (0, half) });
                assert_eq!(p.shape.ne, [37, 5, 3, 1]);
                assert_eq!(p.shape.ne1, p.shape.ne);
                assert_eq!(p.shape.nb0, [4, 296, 1480, 4440]);
                assert_eq!(p.shape.nb1, p.shape.nb0);
                assert_eq!(p.shape.nbd, [4, 148, 740, 2220]);
                assert_eq!(p.op, Combine::Gate(op));
            }
        }
        // Two sources, and two views of one fused tensor; f16 goes to the half registration.
        let mut g = GraphBuilder::new();
        let f = g.new_tensor(ElemType::F16, &[128, 4, 2]);
        let nb = g.tensor(f).nb;
        let x = g.view(f, &[64, 4, 2], &[nb[1], nb[2]], 0).unwrap();
        let y = g.view(f, &[64, 4, 2], &[nb[1], nb[2]], 128).unwrap();
        let n = g.glu_split(x, y, GluOp::Swiglu).unwrap();
        let g = g.build();
        assert_eq!(chosen(&g, n), vec!["hip.glu_half"]);
        let p = glu_plan(&Node::of(&g, n)).unwrap();
        assert_eq!((p.x_off, p.g_off), (0, 0));
        assert_eq!(p.shape.nb0, [2, 256, 1024, 2048]);

        // Unknown sub-op and odd rows decline.
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[16, 2]);
        let n = g.glu(a, GluOp::Geglu, false).unwrap();
        let g = g.build();
        let mut bad = g.clone();
        bad.tensors[n.index()].op_params[0] = 3;
        assert!(chosen(&bad, n).is_empty());
        let mut bad = g.clone();
        bad.tensors[a.index()].ne = [15, 2, 1, 1];
        assert!(chosen(&bad, n).is_empty());
    }

    #[test]
    fn unary_scale_clamp() {
        for op in UnaryOp::ALL {
            for (ty, want) in [(ElemType::F32, "hip.unary_f32"), (ElemType::BF16, "hip.unary_half")] {
                let mut g = GraphBuilder::new();
                let a = g.new_tensor(ty, &[67, 3, 2]);
                let n = g.unary(a, op).unwrap();
                let g = g.build();
                assert_eq!(chosen(&g, n), vec![want]);
                assert_eq!(map_of(g.tensor(n)), Some(Map::Unary(op)));
            }
        }
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[45, 7]);
        let h = g.new_tensor(ElemType::F16, &[45, 7]);
        let s = g.scale(a, 0.125, -1.5);
        let c = g.clamp(h, -1.75, 0.25);
        let u = g.unary(a, UnaryOp::Relu).unwrap();
        let g = g.build();
        assert_eq!(chosen(&g, s), vec!["hip.scale_f32"]);
        assert_eq!(chosen(&g, c), vec!["hip.clamp_half"]);
        assert_eq!(
            map_of(g.tensor(s)),
            Some(Map::Scale {
                scale: 0.125,
                bias: -1.5
            })
        );
        assert_eq!(map_of(g.tensor(c)), Some(Map::Clamp { min: -1.75, max: 0.25 }));
        let mut bad = g.clone();
        bad.tensors[u.index()].op_params[0] = 99;
        assert!(chosen(&bad, u).is_empty());
        let mut bad = g.clone();
        bad.tensors[s.index()].ne = [45, 8, 1, 1];
        assert!(chosen(&bad, s).is_empty());
        let mut bad = g;
        bad.tensors[a.index()].ty = ElemType::Q8_0;
        assert!(chosen(&bad, s).is_empty());
    }

    #[test]
    fn add_id_shape_and_declines() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[67, 4, 3]);
        let b = g.new_tensor(ElemType::F32, &[67, 8]);
        let ids = g.new_tensor(ElemType::I32, &[4, 3]);
        let n = g.add_id(a, b, ids).unwrap();
        let g = g.build();
        assert_eq!(chosen(&g, n), vec!["hip.add_id_f32"]);
        let (s, _) = add_id_shape(&Node::of(&g, n)).unwrap();
        assert_eq!(s.ne, [67, 4, 3, 1]);
        assert_eq!(s.nba, [4, 268, 1072, 3216]);
        assert_eq!((s.nbb0, s.nbb1, s.nbi0, s.nbi1, s.rows_b), (4, 268, 4, 16, 8));
        let mut bad = g.clone();
        bad.tensors[ids.index()].ty = ElemType::I64;
        assert!(chosen(&bad, n).is_empty());
        let mut bad = g.clone();
        bad.tensors[ids.index()].ne = [3, 4, 1, 1];
        assert!(chosen(&bad, n).is_empty());
        let mut bad = g.clone();
        bad.tensors[b.index()].ne[0] = 66;
        assert!(chosen(&bad, n).is_empty());
        let mut bad = g;
        bad.tensors[b.index()].ty = ElemType::F16;
        assert!(chosen(&bad, n).is_empty());
    }

    #[test]
    fn disjointness_and_form() {
        let mut t = Tensor::new(ElemType::F32, &[8, 4, 2]);
        assert!(well_formed(&t) && elements_disjoint(&t));
        t.nb = [4, 64, 256, 512]; // gaps between rows: fine
        assert!(elements_disjoint(&t));
        t.nb = [4, 16, 256, 512]; // rows overlap
        assert!(!elements_disjoint(&t));
        t.nb = [4, 32, 0, 512];
        assert!(!elements_disjoint(&t));
        let t = Tensor::new(ElemType::F32, &[1, 1, 1, 1]);
        assert!(elements_disjoint(&t));
        let mut t = Tensor::new(ElemType::F16, &[8]);
        t.view_offs = 3;
        assert!(!well_formed(&t));
        let t = Tensor::new(ElemType::Q4_0, &[64]);
        assert!(!well_formed(&t));
    }
}

#[cfg(test)]
#[path = "elementwise_gpu_tests.rs"]
mod gpu_tests;
