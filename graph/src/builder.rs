//! Assembling graphs in Rust with ggml's shape rules.
//!
//! Each method mirrors the ggml constructor of the same name: same result shape and type, same
//! `op_params` layout, same source slots; where ggml asserts, this returns a [`GraphError`]
//! naming the op, the inputs and the broken rule.

use crate::error::GraphError;
use crate::graph::Graph;
use crate::op::{GluOp, Op, SortOrder, UnaryOp};
use crate::params::RopeParams;
use crate::tensor::{contiguous_strides, Tensor, TensorId, MAX_DIMS};
use crate::types::ElemType;

type Result<T> = std::result::Result<T, GraphError>;

#[derive(Default)]
pub struct GraphBuilder {
    g: Graph,
}

impl GraphBuilder {
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    pub fn tensor(&self, id: TensorId) -> &Tensor {
        self.g.tensor(id)
    }

    pub fn tensor_mut(&mut self, id: TensorId) -> &mut Tensor {
        self.g.tensor_mut(id)
    }

    /// Finishes the graph; nodes are in creation order.
    pub fn build(self) -> Graph {
        self.g
    }

    /// A new leaf (input or weight) of `ty` and shape `ne` (1 to 4 dims).
    pub fn new_tensor(&mut self, ty: ElemType, ne: &[i64]) -> TensorId {
        assert!(!ne.is_empty() && ne.len() <= MAX_DIMS, "1 to 4 dims");
        let t = Tensor::new(ty, ne);
        self.push(t, false)
    }

    /// Like [`Self::new_tensor`] but fallible on a row that is not a whole number of blocks or a
    /// negative size.
    pub fn try_new_tensor(&mut self, ty: ElemType, ne: &[i64]) -> Result<TensorId> {
        if ne.is_empty() || ne.len() > MAX_DIMS {
            return Err(err("NONE", &[], format!("{} dims given, 1 to 4 allowed", ne.len())));
        }
        if ne.iter().any(|&n| n < 0) {
            return Err(err("NONE", &[], format!("negative size {ne:?}")));
        }
        if ty.row_size(ne[0]).is_none() {
            return Err(err(
                "NONE",
                &[],
                format!(
                    "{ty} rows need a multiple of {} elements, got {}",
                    ty.block_size(),
                    ne[0]
                ),
            ));
        }
        Ok(self.new_tensor(ty, ne))
    }

    pub fn set_name(&mut self, id: TensorId, name: &str) {
        self.g.tensor_mut(id).name = name.to_string();
    }

    fn push(&mut self, t: Tensor, is_node: bool) -> TensorId {
        let id = TensorId(self.g.tensors.len() as u32);
        self.g.tensors.push(t);
        if is_node {
            self.g.nodes.push(id);
        }
        id
    }

    fn t(&self, id: TensorId) -> &Tensor {
        self.g.tensor(id)
    }

    /// A node of `op` with a fresh contiguous result.
    fn node(&mut self, op: Op, ty: ElemType, ne: [i64; 4], src: &[Option<TensorId>]) -> TensorId {
        let mut t = Tensor::new(ty, &ne);
        t.op = op;
        for (i, s) in src.iter().enumerate() {
            t.src[i] = *s;
        }
        t.name = format!("{}-{}", op.name().to_lowercase(), self.g.tensors.len());
        self.push(t, true)
    }

    /// A node whose result shares the bytes of `base` with the given shape/strides/offset.
    fn view_node(
        &mut self,
        op: Op,
        base: TensorId,
        ne: [i64; 4],
        nb: [usize; 4],
        offs: usize,
        src: &[Option<TensorId>],
    ) -> TensorId {
        let b = self.t(base);
        let (root, root_offs) = match b.view_src {
            Some(r) => (r, b.view_offs),
            None => (base, 0),
        };
        let mut t = Tensor::new(b.ty, &ne);
        t.nb = nb;
        t.op = op;
        t.view_src = Some(root);
        t.view_offs = root_offs + offs;
        for (i, s) in src.iter().enumerate() {
            t.src[i] = *s;
        }
        t.name = format!("{}-{}", op.name().to_lowercase(), self.g.tensors.len());
        self.push(t, true)
    }

    // ---- views -------------------------------------------------------------------------

    /// `ggml_view_4d`: shape `ne`, row strides `nb1..nb3`, byte `offset` into `a`.
    pub fn view(&mut self, a: TensorId, ne: &[i64], nb: &[usize], offset: usize) -> Result<TensorId> {
        let at = self.t(a).clone();
        let mut full_ne = [1i64; 4];
        full_ne[..ne.len()].copy_from_slice(ne);
        let mut full_nb = contiguous_strides(at.ty, &full_ne);
        for (i, s) in nb.iter().enumerate() {
            full_nb[i + 1] = *s;
        }
        // Later dims of size 1 keep ggml's convention nb[i] = nb[i-1]*ne[i-1].
        for i in nb.len() + 1..MAX_DIMS {
            full_nb[i] = full_nb[i - 1] * full_ne[i - 1] as usize;
        }
        let mut v = Tensor::new(at.ty, &full_ne);
        v.nb = full_nb;
        if full_ne.iter().all(|&n| n > 0) && offset + v.nbytes() > at.nbytes().max(self.root_bytes(a)) {
            return Err(err(
                "VIEW",
                &[&at],
                format!("view of {} bytes at offset {offset} runs past the source", v.nbytes()),
            ));
        }
        let id = self.view_node(Op::View, a, full_ne, full_nb, offset, &[Some(a)]);
        let offs = offset as u64;
        let tm = self.g.tensor_mut(id);
        tm.op_params[0] = offs as u32 as i32;
        tm.op_params[1] = (offs >> 32) as u32 as i32;
        Ok(id)
    }

    fn root_bytes(&self, a: TensorId) -> usize {
        let (root, offs) = self.g.storage_root(a);
        self.t(root).nbytes().saturating_sub(offs)
    }

    /// `ggml_reshape_*`: same bytes, new shape; `a` must be contiguous.
    pub fn reshape(&mut self, a: TensorId, ne: &[i64]) -> Result<TensorId> {
        let at = self.t(a).clone();
        let mut full = [1i64; 4];
        full[..ne.len()].copy_from_slice(ne);
        if !at.is_contiguous() {
            return Err(err("RESHAPE", &[&at], "source is not contiguous".into()));
        }
        if full.iter().product::<i64>() != at.nelements() {
            return Err(err(
                "RESHAPE",
                &[&at],
                format!("{full:?} has a different element count"),
            ));
        }
        let nb = contiguous_strides(at.ty, &full);
        Ok(self.view_node(Op::Reshape, a, full, nb, 0, &[Some(a)]))
    }

    /// `ggml_permute`: source dim `i` moves to position `axes[i]`.
    pub fn permute(&mut self, a: TensorId, axes: [usize; 4]) -> Result<TensorId> {
        let at = self.t(a).clone();
        let mut seen = [false; 4];
        for &x in &axes {
            if x >= 4 || seen[x] {
                return Err(err(
                    "PERMUTE",
                    &[&at],
                    format!("axes {axes:?} are not a permutation of 0..4"),
                ));
            }
            seen[x] = true;
        }
        let mut ne = [0i64; 4];
        let mut nb = [0usize; 4];
        for i in 0..4 {
            ne[axes[i]] = at.ne[i];
            nb[axes[i]] = at.nb[i];
        }
        let id = self.view_node(Op::Permute, a, ne, nb, 0, &[Some(a)]);
        for i in 0..4 {
            self.g.tensor_mut(id).op_params[i] = axes[i] as i32;
        }
        Ok(id)
    }

    /// `ggml_transpose`: swaps dims 0 and 1.
    pub fn transpose(&mut self, a: TensorId) -> TensorId {
        let at = self.t(a).clone();
        let mut ne = at.ne;
        let mut nb = at.nb;
        ne.swap(0, 1);
        nb.swap(0, 1);
        self.view_node(Op::Transpose, a, ne, nb, 0, &[Some(a)])
    }

    // ---- copies ------------------------------------------------------------------------

    /// `ggml_cpy`: converts `a` into `b`'s type and layout; the result is a view of `b`.
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (at, bt) = (self.t(a).clone(), self.t(b).clone());
        if at.nelements() != bt.nelements() {
            return Err(err("CPY", &[&at, &bt], "element counts differ".into()));
        }
        Ok(self.view_node(Op::Cpy, b, bt.ne, bt.nb, 0, &[Some(a), Some(b)]))
    }

    /// `ggml_cont`: a contiguous copy of `a` with the same shape.
    pub fn cont(&mut self, a: TensorId) -> TensorId {
        let at = self.t(a).clone();
        self.node(Op::Cont, at.ty, at.ne, &[Some(a)])
    }

    /// `ggml_cont_4d`: a contiguous copy of `a` reshaped to `ne`.
    pub fn cont_shape(&mut self, a: TensorId, ne: &[i64]) -> Result<TensorId> {
        let at = self.t(a).clone();
        let mut full = [1i64; 4];
        full[..ne.len()].copy_from_slice(ne);
        if full.iter().product::<i64>() != at.nelements() {
            return Err(err("CONT", &[&at], format!("{full:?} has a different element count")));
        }
        Ok(self.node(Op::Cont, at.ty, full, &[Some(a)]))
    }

    /// `ggml_dup`: a contiguous copy of `a`.
    pub fn dup(&mut self, a: TensorId) -> TensorId {
        let at = self.t(a).clone();
        self.node(Op::Dup, at.ty, at.ne, &[Some(a)])
    }

    // ---- elementwise -------------------------------------------------------------------

    fn binary(&mut self, op: Op, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (at, bt) = (self.t(a).clone(), self.t(b).clone());
        if !can_repeat(&bt, &at) {
            return Err(err(op.name(), &[&at, &bt], "src1 does not broadcast to src0".into()));
        }
        Ok(self.node(op, at.ty, at.ne, &[Some(a), Some(b)]))
    }

    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Add, a, b)
    }

    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Mul, a, b)
    }

    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Div, a, b)
    }

    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Sub, a, b)
    }

    /// `ggml_sqr`, `ggml_sqrt`, `ggml_log`, `ggml_sin`, `ggml_cos`: `op` applied to every element.
    pub fn math(&mut self, op: Op, a: TensorId) -> Result<TensorId> {
        let at = self.t(a).clone();
        if !matches!(op, Op::Sqr | Op::Sqrt | Op::Log | Op::Sin | Op::Cos) {
            return Err(err(op.name(), &[&at], "not an elementwise math op".into()));
        }
        Ok(self.node(op, at.ty, at.ne, &[Some(a)]))
    }

    /// `ggml_repeat_4d`: `a` tiled to `ne` (each a multiple of `a`'s).
    pub fn repeat(&mut self, a: TensorId, ne: [i64; 4]) -> Result<TensorId> {
        let at = self.t(a).clone();
        if (0..4).any(|k| at.ne[k] <= 0 || ne[k] % at.ne[k] != 0) {
            return Err(err(
                "REPEAT",
                &[&at],
                format!("{ne:?} is not a multiple of the source's shape"),
            ));
        }
        Ok(self.node(Op::Repeat, at.ty, ne, &[Some(a)]))
    }

    /// `ggml_concat`: `a` and `b` joined along `dim` (their other dims equal).
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        let (at, bt) = (self.t(a).clone(), self.t(b).clone());
        if dim > 3 || at.ty != bt.ty || (0..4).any(|k| k != dim && at.ne[k] != bt.ne[k]) {
            return Err(err(
                "CONCAT",
                &[&at, &bt],
                format!("needs one type and equal dims but dim {dim} (0..=3)"),
            ));
        }
        let mut ne = at.ne;
        ne[dim] += bt.ne[dim];
        let id = self.node(Op::Concat, at.ty, ne, &[Some(a), Some(b)]);
        self.g.tensor_mut(id).set_param_i32(0, dim as i32);
        Ok(id)
    }

    /// `ggml_pad_ext` (`circular`: `ggml_pad_ext_circular`): `pads` = `[lp0, rp0, lp1, rp1, lp2,
    /// rp2, lp3, rp3]` elements added before and after each dim, zeros (or the source wrapped
    /// around).
    pub fn pad(&mut self, a: TensorId, pads: [i32; 8], circular: bool) -> Result<TensorId> {
        let at = self.t(a).clone();
        if pads.iter().any(|&p| p < 0) {
            return Err(err("PAD", &[&at], format!("negative padding {pads:?}")));
        }
        let ne = std::array::from_fn(|k| at.ne[k] + pads[2 * k] as i64 + pads[2 * k + 1] as i64);
        let id = self.node(Op::Pad, at.ty, ne, &[Some(a)]);
        let t = self.g.tensor_mut(id);
        for (i, &p) in pads.iter().enumerate() {
            t.set_param_i32(i, p);
        }
        t.set_param_i32(8, circular as i32);
        Ok(id)
    }

    /// `ggml_add_id`: `a[:, i1, i2] + b[:, ids[i1, i2]]`.
    pub fn add_id(&mut self, a: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        let (at, bt, it) = (self.t(a).clone(), self.t(b).clone(), self.t(ids).clone());
        if at.ne[0] != bt.ne[0] || at.ne[1] != it.ne[0] || at.ne[2] != it.ne[1] || it.ty != ElemType::I32 {
            return Err(err(
                "ADD_ID",
                &[&at, &bt, &it],
                "needs a.ne0 == b.ne0, a.ne1 == ids.ne0, a.ne2 == ids.ne1, i32 ids".into(),
            ));
        }
        Ok(self.node(Op::AddId, at.ty, at.ne, &[Some(a), Some(b), Some(ids)]))
    }

    /// `ggml_scale_bias`: `a * s + b`.
    pub fn scale(&mut self, a: TensorId, s: f32, b: f32) -> TensorId {
        let at = self.t(a).clone();
        let id = self.node(Op::Scale, at.ty, at.ne, &[Some(a)]);
        let t = self.g.tensor_mut(id);
        t.set_param_f32(0, s);
        t.set_param_f32(1, b);
        id
    }

    pub fn clamp(&mut self, a: TensorId, min: f32, max: f32) -> TensorId {
        let at = self.t(a).clone();
        let id = self.node(Op::Clamp, at.ty, at.ne, &[Some(a)]);
        let t = self.g.tensor_mut(id);
        t.set_param_f32(0, min);
        t.set_param_f32(1, max);
        id
    }

    pub fn sum_rows(&mut self, a: TensorId) -> TensorId {
        let at = self.t(a).clone();
        self.node(Op::SumRows, at.ty, [1, at.ne[1], at.ne[2], at.ne[3]], &[Some(a)])
    }

    pub fn unary(&mut self, a: TensorId, op: UnaryOp) -> Result<TensorId> {
        let at = self.t(a).clone();
        if !at.is_contiguous_rows() {
            return Err(err("UNARY", &[&at], "rows are not contiguous".into()));
        }
        let id = self.node(Op::Unary, at.ty, at.ne, &[Some(a)]);
        self.g.tensor_mut(id).set_param_i32(0, op as i32);
        Ok(id)
    }

    /// `ggml_glu`: the first half of each row gated by the second (or swapped).
    pub fn glu(&mut self, a: TensorId, op: GluOp, swapped: bool) -> Result<TensorId> {
        let at = self.t(a).clone();
        if !at.is_contiguous_n(1) || at.ne[0] % 2 != 0 {
            return Err(err("GLU", &[&at], "needs contiguous rows of even length".into()));
        }
        let id = self.node(Op::Glu, at.ty, [at.ne[0] / 2, at.ne[1], at.ne[2], at.ne[3]], &[Some(a)]);
        let t = self.g.tensor_mut(id);
        t.set_param_i32(0, op as i32);
        t.set_param_i32(1, swapped as i32);
        Ok(id)
    }

    /// `ggml_glu_split`: `act(a) * b`.
    pub fn glu_split(&mut self, a: TensorId, b: TensorId, op: GluOp) -> Result<TensorId> {
        let (at, bt) = (self.t(a).clone(), self.t(b).clone());
        if !at.is_contiguous_n(1) || !bt.is_contiguous_n(1) || at.ne != bt.ne || at.ty != bt.ty {
            return Err(err(
                "GLU",
                &[&at, &bt],
                "needs two same-shape, same-type tensors with contiguous rows".into(),
            ));
        }
        let id = self.node(Op::Glu, at.ty, at.ne, &[Some(a), Some(b)]);
        self.g.tensor_mut(id).set_param_i32(0, op as i32);
        Ok(id)
    }

    // ---- normalisation, rope, softmax -----------------------------------------------------

    pub fn norm(&mut self, a: TensorId, eps: f32) -> TensorId {
        let at = self.t(a).clone();
        let id = self.node(Op::Norm, at.ty, at.ne, &[Some(a)]);
        self.g.tensor_mut(id).set_param_f32(0, eps);
        id
    }

    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> TensorId {
        let at = self.t(a).clone();
        let id = self.node(Op::RmsNorm, at.ty, at.ne, &[Some(a)]);
        self.g.tensor_mut(id).set_param_f32(0, eps);
        id
    }

    /// `ggml_l2_norm`: each row divided by its Euclidean length (at least `eps`).
    pub fn l2_norm(&mut self, a: TensorId, eps: f32) -> TensorId {
        let at = self.t(a).clone();
        let id = self.node(Op::L2Norm, at.ty, at.ne, &[Some(a)]);
        self.g.tensor_mut(id).set_param_f32(0, eps);
        id
    }

    /// `ggml_rope_ext`: `pos` is i32 with one position per `a.ne[2]`; `freq_factors` optional.
    pub fn rope(
        &mut self,
        a: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        p: RopeParams,
    ) -> Result<TensorId> {
        let (at, pt) = (self.t(a).clone(), self.t(pos).clone());
        if pt.ty != ElemType::I32 || pt.ne[1] * pt.ne[2] * pt.ne[3] != 1 || pt.ne[0] != at.ne[2] {
            return Err(err(
                "ROPE",
                &[&at, &pt],
                "positions must be an i32 vector of a.ne2 entries".into(),
            ));
        }
        if p.n_dims <= 0 || p.n_dims as i64 > at.ne[0] || p.n_dims % 2 != 0 {
            return Err(err(
                "ROPE",
                &[&at],
                format!("n_dims {} must be even and within ne0", p.n_dims),
            ));
        }
        if p.mode & 1 != 0 || p.mode & crate::op::ROPE_TYPE_MROPE != 0 {
            return Err(err("ROPE", &[&at], format!("rope mode {} is not supported", p.mode)));
        }
        if let Some(ff) = freq_factors {
            let ft = self.t(ff).clone();
            if ft.ty != ElemType::F32 || ft.ne[0] < p.n_dims as i64 / 2 {
                return Err(err(
                    "ROPE",
                    &[&at, &ft],
                    "freq factors must be f32 with n_dims/2 entries".into(),
                ));
            }
        }
        let id = self.node(Op::Rope, at.ty, at.ne, &[Some(a), Some(pos), freq_factors]);
        p.write(self.g.tensor_mut(id));
        Ok(id)
    }

    /// `ggml_soft_max_ext` (+ `ggml_soft_max_add_sinks`): `softmax(a*scale + mask*slope)` per row.
    pub fn soft_max(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        sinks: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        let at = self.t(a).clone();
        if !at.is_contiguous() {
            return Err(err("SOFT_MAX", &[&at], "source is not contiguous".into()));
        }
        if let Some(m) = mask {
            let mt = self.t(m).clone();
            let ok = matches!(mt.ty, ElemType::F16 | ElemType::F32)
                && mt.is_contiguous()
                && mt.ne[0] == at.ne[0]
                && mt.ne[1] >= at.ne[1]
                && at.ne[2] % mt.ne[2] == 0
                && at.ne[3] % mt.ne[3] == 0;
            if !ok {
                return Err(err(
                    "SOFT_MAX",
                    &[&at, &mt],
                    "mask must be f16/f32, contiguous, ne0 equal, ne1 >= rows, broadcast over ne2/ne3".into(),
                ));
            }
        }
        if max_bias > 0.0 && mask.is_none() {
            return Err(err("SOFT_MAX", &[&at], "max_bias needs a mask".into()));
        }
        if let Some(s) = sinks {
            let st = self.t(s).clone();
            if st.ty != ElemType::F32 || st.ne[0] != at.ne[2] {
                return Err(err(
                    "SOFT_MAX",
                    &[&at, &st],
                    "sinks must be f32 with one value per head (a.ne2)".into(),
                ));
            }
        }
        let id = self.node(Op::SoftMax, at.ty, at.ne, &[Some(a), mask, sinks]);
        let t = self.g.tensor_mut(id);
        t.set_param_f32(0, scale);
        t.set_param_f32(1, max_bias);
        Ok(id)
    }

    // ---- matmul ------------------------------------------------------------------------

    /// `ggml_mul_mat`: `dst[i1, j] = a[:, i1] · b[:, j]`, batches of `b` broadcasting over `a`.
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (at, bt) = (self.t(a).clone(), self.t(b).clone());
        if at.ne[0] != bt.ne[0] || bt.ne[2] % at.ne[2] != 0 || bt.ne[3] % at.ne[3] != 0 {
            return Err(err(
                "MUL_MAT",
                &[&at, &bt],
                "needs a.ne0 == b.ne0 and b's batches a multiple of a's".into(),
            ));
        }
        if at.nb[0] > at.nb[1] {
            return Err(err("MUL_MAT", &[&at, &bt], "src0 is transposed".into()));
        }
        Ok(self.node(
            Op::MulMat,
            ElemType::F32,
            [at.ne[1], bt.ne[1], bt.ne[2], bt.ne[3]],
            &[Some(a), Some(b)],
        ))
    }

    /// `ggml_mul_mat_id`: expert matrices `as` [k, m, n_expert], `b` [k, n_b, n_tokens],
    /// `ids` i32 [n_used, n_tokens] → [m, n_used, n_tokens].
    pub fn mul_mat_id(&mut self, as_: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        let (at, bt, it) = (self.t(as_).clone(), self.t(b).clone(), self.t(ids).clone());
        let ok = at.nb[0] <= at.nb[1]
            && it.ty == ElemType::I32
            && at.ne[3] == 1
            && bt.ne[3] == 1
            && it.ne[2] == 1
            && it.ne[3] == 1
            && it.ne[1] == bt.ne[2]
            && at.ne[0] == bt.ne[0]
            && bt.ne[1] > 0
            && it.ne[0] % bt.ne[1] == 0;
        if !ok {
            return Err(err(
                "MUL_MAT_ID",
                &[&at, &bt, &it],
                "shapes do not fit ggml_mul_mat_id's rules".into(),
            ));
        }
        Ok(self.node(
            Op::MulMatId,
            ElemType::F32,
            [at.ne[1], it.ne[0], bt.ne[2], 1],
            &[Some(as_), Some(b), Some(ids)],
        ))
    }

    // ---- rows --------------------------------------------------------------------------

    /// `ggml_get_rows`: rows of `a` picked by i32 `b` [n, a.ne2, a.ne3] → f32 (i32 stays i32).
    pub fn get_rows(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let (at, bt) = (self.t(a).clone(), self.t(b).clone());
        if at.ne[2] != bt.ne[1] || at.ne[3] != bt.ne[2] || bt.ne[3] != 1 || bt.ty != ElemType::I32 {
            return Err(err(
                "GET_ROWS",
                &[&at, &bt],
                "indices must be i32 [n, a.ne2, a.ne3]".into(),
            ));
        }
        let ty = if at.ty == ElemType::I32 {
            ElemType::I32
        } else {
            ElemType::F32
        };
        Ok(self.node(
            Op::GetRows,
            ty,
            [at.ne[0], bt.ne[0], bt.ne[1], bt.ne[2]],
            &[Some(a), Some(b)],
        ))
    }

    /// `ggml_set_rows`: writes rows of `b` into `a` at indices `c`; the result is a view of `a`.
    pub fn set_rows(&mut self, a: TensorId, b: TensorId, c: TensorId) -> Result<TensorId> {
        let (at, bt, ct) = (self.t(a).clone(), self.t(b).clone(), self.t(c).clone());
        let ok = at.ne[0] == bt.ne[0]
            && at.ne[2] == bt.ne[2]
            && at.ne[3] == bt.ne[3]
            && bt.ne[1] == ct.ne[0]
            && ct.ne[1] > 0
            && ct.ne[2] > 0
            && bt.ne[2] % ct.ne[1] == 0
            && bt.ne[3] % ct.ne[2] == 0
            && ct.ne[3] == 1
            && matches!(bt.ty, ElemType::F32 | ElemType::F16)
            && matches!(ct.ty, ElemType::I64 | ElemType::I32)
            && at.is_contiguous_rows()
            && bt.is_contiguous_rows();
        if !ok {
            return Err(err(
                "SET_ROWS",
                &[&at, &bt, &ct],
                "shapes or types do not fit ggml_set_rows's rules".into(),
            ));
        }
        Ok(self.view_node(Op::SetRows, a, at.ne, at.nb, 0, &[Some(b), Some(c), Some(a)]))
    }

    // ---- sorting -----------------------------------------------------------------------

    pub fn argsort(&mut self, a: TensorId, order: SortOrder) -> TensorId {
        let at = self.t(a).clone();
        let id = self.node(Op::Argsort, ElemType::I32, at.ne, &[Some(a)]);
        self.g.tensor_mut(id).set_param_i32(0, order as i32);
        id
    }

    /// `ggml_top_k`: indices of the `k` largest values of each row (in no particular order).
    pub fn top_k(&mut self, a: TensorId, k: i64) -> Result<TensorId> {
        let at = self.t(a).clone();
        if k <= 0 || k > at.ne[0] {
            return Err(err("TOP_K", &[&at], format!("k = {k} must be in 1..=ne0")));
        }
        Ok(self.node(Op::TopK, ElemType::I32, [k, at.ne[1], at.ne[2], at.ne[3]], &[Some(a)]))
    }

    // ---- attention ---------------------------------------------------------------------

    /// `ggml_flash_attn_ext` (+ sinks): q [d, n_q, h, s], k [d, n_kv, h_kv, s], v [dv, n_kv,
    /// h_kv, s], mask f16 [n_kv, n_q_pad, ...] → f32 [dv, h, n_q, s].
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_ext(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        sinks: Option<TensorId>,
        scale: f32,
        max_bias: f32,
        logit_softcap: f32,
    ) -> Result<TensorId> {
        let (qt, kt, vt) = (self.t(q).clone(), self.t(k).clone(), self.t(v).clone());
        let ok = kt.ne[0] == qt.ne[0]
            && kt.ne[2] > 0
            && qt.ne[2] % kt.ne[2] == 0
            && kt.ne[3] > 0
            && qt.ne[3] % kt.ne[3] == 0
            && vt.ne[3] == kt.ne[3]
            && vt.ne[1] == kt.ne[1]
            && vt.ne[2] == kt.ne[2];
        if !ok {
            return Err(err(
                "FLASH_ATTN_EXT",
                &[&qt, &kt, &vt],
                "q/k/v shapes do not fit".into(),
            ));
        }
        if let Some(m) = mask {
            let mt = self.t(m).clone();
            let ok = mt.ty == ElemType::F16
                && mt.is_contiguous()
                && mt.ne[0] == kt.ne[1]
                && mt.ne[1] >= qt.ne[1]
                && qt.ne[2] % mt.ne[2] == 0
                && qt.ne[3] % mt.ne[3] == 0;
            if !ok {
                return Err(err(
                    "FLASH_ATTN_EXT",
                    &[&qt, &kt, &mt],
                    "mask must be contiguous f16 [n_kv, >= n_q, ...] broadcasting over heads".into(),
                ));
            }
        }
        if max_bias > 0.0 && mask.is_none() {
            return Err(err("FLASH_ATTN_EXT", &[&qt], "max_bias needs a mask".into()));
        }
        if let Some(s) = sinks {
            let st = self.t(s).clone();
            if st.ty != ElemType::F32 || st.ne[0] != qt.ne[2] {
                return Err(err(
                    "FLASH_ATTN_EXT",
                    &[&qt, &st],
                    "sinks must be f32 with one value per head".into(),
                ));
            }
        }
        let id = self.node(
            Op::FlashAttnExt,
            ElemType::F32,
            [vt.ne[0], qt.ne[2], qt.ne[1], qt.ne[3]],
            &[Some(q), Some(k), Some(v), mask, sinks],
        );
        let t = self.g.tensor_mut(id);
        t.set_param_f32(0, scale);
        t.set_param_f32(1, max_bias);
        t.set_param_f32(2, logit_softcap);
        Ok(id)
    }
}

/// `ggml_can_repeat(b, a)`: every dim of `a` is a multiple of `b`'s.
pub fn can_repeat(b: &Tensor, a: &Tensor) -> bool {
    if b.ne.contains(&0) {
        return a.ne.contains(&0) || b.nelements() == 0;
    }
    (0..4).all(|i| a.ne[i] % b.ne[i] == 0)
}

fn err(op: &'static str, inputs: &[&Tensor], reason: String) -> GraphError {
    GraphError {
        op,
        inputs: inputs.iter().map(|t| t.describe()).collect::<Vec<_>>().join(", "),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mul_mat_shapes_and_errors() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::Q4_0, &[64, 10]);
        let b = g.new_tensor(ElemType::F32, &[64, 3, 2]);
        let c = g.mul_mat(a, b).unwrap();
        assert_eq!(g.tensor(c).ne, [10, 3, 2, 1]);
        let bad = g.new_tensor(ElemType::F32, &[32, 3]);
        let e = g.mul_mat(a, bad).unwrap_err();
        assert!(
            e.to_string().contains("MUL_MAT") && e.to_string().contains("q4_0[64,10,1,1]"),
            "{e}"
        );
    }

    #[test]
    fn views_point_at_the_root() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[8, 4]);
        let v = g.view(a, &[4, 4], &[32], 16).unwrap();
        let p = g.transpose(v);
        let t = g.tensor(p);
        assert_eq!(t.view_src, Some(a));
        assert_eq!(t.view_offs, 16);
        assert_eq!(t.ne, [4, 4, 1, 1]);
        assert_eq!(t.nb, [32, 4, 128, 128]);
        assert!(g.view(a, &[8, 4], &[32], 4).is_err());
    }

    #[test]
    fn permute_moves_dims() {
        let mut g = GraphBuilder::new();
        let a = g.new_tensor(ElemType::F32, &[2, 3, 5, 7]);
        let p = g.permute(a, [0, 2, 1, 3]).unwrap();
        assert_eq!(g.tensor(p).ne, [2, 5, 3, 7]);
        assert_eq!(g.tensor(p).nb, [4, 24, 8, 120]);
    }
}
