//! Tensors: ggml's `ne`/`nb` shape model, views and where the bytes live.

use crate::op::Op;
use crate::types::ElemType;

pub const MAX_DIMS: usize = 4;
pub const MAX_SRC: usize = 10;
/// `op_params` words (ggml's `GGML_MAX_OP_PARAMS / sizeof(int32_t)`).
pub const MAX_OP_PARAMS: usize = 16;

/// Index of a tensor in its [`crate::Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

impl TensorId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One tensor of a graph: a leaf (op `None`) or a node computed from `src`.
///
/// `data` is the address of element 0 in the address space of the buffer that holds it (a host
/// pointer for host buffers, a device pointer for GPU buffers); 0 means not allocated yet.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub ty: ElemType,
    pub ne: [i64; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
    pub op: Op,
    pub op_params: [i32; MAX_OP_PARAMS],
    pub src: [Option<TensorId>; MAX_SRC],
    /// The tensor whose bytes a view (or an in-place result) shares, and the byte offset into it.
    pub view_src: Option<TensorId>,
    pub view_offs: usize,
    /// Address of the first byte; 0 until allocated.
    pub data: usize,
    /// Which buffer holds the bytes (opaque to this crate; 0 = none/unknown).
    pub buffer: u64,
    /// The host reads this tensor after the graph (ggml's output flag): a fused kernel must
    /// still write it.
    pub output: bool,
}

impl Tensor {
    /// A contiguous tensor of `ty` with shape `ne` (missing dims are 1).
    pub fn new(ty: ElemType, ne: &[i64]) -> Tensor {
        let mut full = [1i64; MAX_DIMS];
        full[..ne.len()].copy_from_slice(ne);
        Tensor {
            name: String::new(),
            ty,
            ne: full,
            nb: contiguous_strides(ty, &full),
            op: Op::None,
            op_params: [0; MAX_OP_PARAMS],
            src: [None; MAX_SRC],
            view_src: None,
            view_offs: 0,
            data: 0,
            buffer: 0,
            output: false,
        }
    }

    pub fn nelements(&self) -> i64 {
        self.ne.iter().product()
    }

    /// Number of rows (`ne[1]*ne[2]*ne[3]`).
    pub fn nrows(&self) -> i64 {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Bytes spanned from the first to one past the last element (`ggml_nbytes`).
    pub fn nbytes(&self) -> usize {
        if self.ne.iter().any(|&n| n <= 0) {
            return 0;
        }
        let bs = self.ty.block_size();
        if bs == 1 {
            let mut n = self.ty.type_size();
            for i in 0..MAX_DIMS {
                n += (self.ne[i] as usize - 1) * self.nb[i];
            }
            n
        } else {
            let mut n = self.ne[0] as usize * self.nb[0] / bs;
            for i in 1..MAX_DIMS {
                n += (self.ne[i] as usize - 1) * self.nb[i];
            }
            n
        }
    }

    /// Rows are stored back to back with no gaps (`ggml_is_contiguous`).
    pub fn is_contiguous(&self) -> bool {
        self.is_contiguous_n(0)
    }

    /// Contiguous from dimension `n` on, ignoring the strides of dims of size 1
    /// (`ggml_is_contiguous_n`).
    pub fn is_contiguous_n(&self, n: usize) -> bool {
        let mut next = self.ty.type_size();
        if self.ne[0] != self.ty.block_size() as i64 && self.nb[0] != next {
            return false;
        }
        next *= (self.ne[0] / self.ty.block_size() as i64).max(0) as usize;
        for i in 1..MAX_DIMS {
            if self.ne[i] != 1 {
                if i > n {
                    if self.nb[i] != next {
                        return false;
                    }
                    next *= self.ne[i] as usize;
                } else {
                    next = self.ne[i] as usize * self.nb[i];
                }
            }
        }
        true
    }

    /// Elements within each row are contiguous (`ggml_is_contiguous_rows`).
    pub fn is_contiguous_rows(&self) -> bool {
        self.ne[0] == self.ty.block_size() as i64 || self.nb[0] == self.ty.type_size()
    }

    pub fn is_view(&self) -> bool {
        self.view_src.is_some()
    }

    /// Byte offset of element `(i0, i1, i2, i3)` from `data` (`i0` must be a block start for
    /// quantized types).
    pub fn offset_of(&self, i: [i64; MAX_DIMS]) -> usize {
        (i[0] as usize / self.ty.block_size()) * self.nb[0]
            + i[1] as usize * self.nb[1]
            + i[2] as usize * self.nb[2]
            + i[3] as usize * self.nb[3]
    }

    /// `ty[ne0,ne1,ne2,ne3]`, used in error messages.
    pub fn describe(&self) -> String {
        format!(
            "{}[{},{},{},{}]",
            self.ty, self.ne[0], self.ne[1], self.ne[2], self.ne[3]
        )
    }

    pub fn param_i32(&self, i: usize) -> i32 {
        self.op_params[i]
    }

    pub fn param_f32(&self, i: usize) -> f32 {
        f32::from_bits(self.op_params[i] as u32)
    }

    pub fn set_param_i32(&mut self, i: usize, v: i32) {
        self.op_params[i] = v;
    }

    pub fn set_param_f32(&mut self, i: usize, v: f32) {
        self.op_params[i] = v.to_bits() as i32;
    }

    /// Same type, shape and strides.
    pub fn same_layout(&self, other: &Tensor) -> bool {
        self.ty == other.ty && self.ne == other.ne && self.nb == other.nb
    }
}

/// ggml's default strides for a contiguous tensor.
pub fn contiguous_strides(ty: ElemType, ne: &[i64; MAX_DIMS]) -> [usize; MAX_DIMS] {
    let mut nb = [0usize; MAX_DIMS];
    nb[0] = ty.type_size();
    nb[1] = nb[0] * (ne[0].max(0) as usize / ty.block_size());
    for i in 2..MAX_DIMS {
        nb[i] = nb[i - 1] * ne[i - 1].max(0) as usize;
    }
    nb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity_and_sizes() {
        let t = Tensor::new(ElemType::F32, &[5, 3, 2]);
        assert_eq!(t.nb, [4, 20, 60, 120]);
        assert!(t.is_contiguous());
        assert_eq!(t.nbytes(), 120);
        let mut p = t.clone();
        p.ne = [3, 5, 2, 1];
        p.nb = [20, 4, 60, 120];
        assert!(!p.is_contiguous());
        assert_eq!(p.nbytes(), 120);
        let q = Tensor::new(ElemType::Q4_0, &[64, 3]);
        assert_eq!(q.nb, [18, 36, 108, 108]);
        assert_eq!(q.nbytes(), 108);
    }
}
