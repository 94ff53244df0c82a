//! A compute graph: every tensor it touches and the nodes to compute, in order.

use crate::tensor::{Tensor, TensorId};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// Every tensor, leaves and nodes; `TensorId` indexes this.
    pub tensors: Vec<Tensor>,
    /// The nodes to compute, in execution order.
    pub nodes: Vec<TensorId>,
}

impl Graph {
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    pub fn tensor_mut(&mut self, id: TensorId) -> &mut Tensor {
        &mut self.tensors[id.index()]
    }

    /// Sources of `id`, by slot (holes stay `None`, as in ggml).
    pub fn srcs(&self, id: TensorId) -> [Option<&Tensor>; crate::MAX_SRC] {
        let t = self.tensor(id);
        std::array::from_fn(|i| t.src[i].map(|s| self.tensor(s)))
    }

    /// Tensors that are no node's result: inputs and weights.
    pub fn leaves(&self) -> Vec<TensorId> {
        let mut is_node = vec![false; self.tensors.len()];
        for n in &self.nodes {
            is_node[n.index()] = true;
        }
        (0..self.tensors.len() as u32)
            .map(TensorId)
            .filter(|id| !is_node[id.index()])
            .collect()
    }

    /// The tensor that owns the bytes of `id` and the byte offset of `id` in it. As in ggml,
    /// `view_src` always names the root owner (a view of a view points at the root).
    pub fn storage_root(&self, id: TensorId) -> (TensorId, usize) {
        let t = self.tensor(id);
        match t.view_src {
            Some(root) => (root, t.view_offs),
            None => (id, 0),
        }
    }
}
