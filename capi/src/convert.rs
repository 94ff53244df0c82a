//! ggml tensors and graphs → tandem's graph model. Only the public `struct ggml_tensor` fields
//! and ggml's graph accessors are read; tensors are deduplicated by address, nodes keep ggml's
//! order, and a tensor's `buffer` is the address of its ggml buffer.

use crate::abi::{Cgraph, GgmlTensor, MAX_SRC, TENSOR_FLAG_COMPUTE};
use crate::host::HostApi;
use std::collections::HashMap;
use std::ffi::c_int;
use tandem_graph::{ElemType, Graph, Op, Tensor, TensorId, MAX_OP_PARAMS};

/// A tensor ggml handed over that tandem cannot represent.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertError {
    /// Index of the node in ggml's graph (`None` for a single-node conversion).
    pub index: Option<usize>,
    pub node: String,
    pub op: String,
    pub types: String,
    pub reason: String,
}

impl std::fmt::Display for ConvertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(i) = self.index {
            write!(f, "node {i} ")?;
        }
        write!(f, "'{}' ({}; {}): {}", self.node, self.op, self.types, self.reason)
    }
}

/// Builds a [`Graph`] from ggml tensors, one tensor per distinct address.
pub struct Converter<'h> {
    host: &'h HostApi,
    graph: Graph,
    ids: HashMap<*const GgmlTensor, TensorId>,
}

impl<'h> Converter<'h> {
    pub fn new(host: &'h HostApi) -> Self {
        Converter {
            host,
            graph: Graph::default(),
            ids: HashMap::new(),
        }
    }

    pub fn finish(self) -> Graph {
        self.graph
    }

    /// Adds `t` as a node (computed, in order) with its sources.
    ///
    /// # Safety
    /// `t` and every tensor reachable through `src`/`view_src` are live `ggml_tensor`s.
    pub unsafe fn add_node(&mut self, t: *const GgmlTensor, index: Option<usize>) -> Result<TensorId, ConvertError> {
        // SAFETY: live per the contract.
        let raw = unsafe { &*t };
        let Some(op) = Op::from_ggml(raw.op as u32) else {
            // SAFETY: live per the contract.
            return Err(unsafe { self.error(raw, index, "op not known to tandem") });
        };
        // SAFETY: live per the contract (also for the error path).
        let id = unsafe { self.add_tensor(t, Some(op)) }.map_err(|r| unsafe { self.error(raw, index, &r) })?;
        for (slot, &s) in raw.src.iter().enumerate() {
            if s.is_null() {
                continue;
            }
            // SAFETY: sources of a live tensor are live.
            let sid = unsafe { self.add_tensor(s, None) }
                // SAFETY: live per the contract.
                .map_err(|r| unsafe { self.error(raw, index, &format!("src{slot}: {r}")) })?;
            self.graph.tensor_mut(id).src[slot] = Some(sid);
        }
        self.graph.nodes.push(id);
        Ok(id)
    }

    /// Adds `t` (once) with its fields and its view root; `op` overrides the tensor's own op
    /// for nodes. Sources of a non-node tensor are not followed: it is an input here, already
    /// computed, and only its bytes and aliasing matter.
    ///
    /// # Safety
    /// `t` and its `view_src` are live `ggml_tensor`s.
    unsafe fn add_tensor(&mut self, t: *const GgmlTensor, op: Option<Op>) -> Result<TensorId, String> {
        if let Some(&id) = self.ids.get(&t) {
            if let Some(op) = op {
                self.graph.tensor_mut(id).op = op;
            }
            return Ok(id);
        }
        // SAFETY: live per the contract.
        let raw = unsafe { &*t };
        let ty = ElemType::from_ggml(raw.type_ as u32).ok_or_else(|| {
            format!(
                "'{}' has type {} which tandem does not know",
                name_of(raw),
                self.host.type_name_of(raw.type_)
            )
        })?;
        let mut op_params = [0i32; MAX_OP_PARAMS];
        let n = op_params.len().min(raw.op_params.len());
        op_params[..n].copy_from_slice(&raw.op_params[..n]);
        let tensor = Tensor {
            name: name_of(raw),
            ty,
            ne: raw.ne,
            nb: raw.nb,
            op: op.or_else(|| Op::from_ggml(raw.op as u32)).unwrap_or(Op::None),
            op_params,
            src: [None; tandem_graph::MAX_SRC],
            view_src: None,
            view_offs: raw.view_offs,
            data: raw.data as usize,
            buffer: raw.buffer as u64,
        };
        let id = TensorId(self.graph.tensors.len() as u32);
        self.graph.tensors.push(tensor);
        self.ids.insert(t, id);
        if !raw.view_src.is_null() && !std::ptr::eq(raw.view_src, t) {
            // SAFETY: the view root of a live tensor is live. ggml always points `view_src` at
            // the root owner, so this recursion is one level deep.
            let root = unsafe { self.add_tensor(raw.view_src, None) }?;
            self.graph.tensor_mut(id).view_src = Some(root);
        }
        Ok(id)
    }

    /// # Safety
    /// `raw` is a live `ggml_tensor` whose sources are live.
    unsafe fn error(&self, raw: &GgmlTensor, index: Option<usize>, reason: &str) -> ConvertError {
        ConvertError {
            index,
            node: name_of(raw),
            op: self.host.op_name_of(raw.op),
            // SAFETY: per this function's contract.
            types: unsafe { types_of(self.host, raw) },
            reason: reason.to_string(),
        }
    }
}

/// Converts ggml's graph: every node flagged for computation, in order.
///
/// # Safety
/// `cgraph` is a live graph whose tensors stay live for the call.
pub unsafe fn convert_graph(host: &HostApi, cgraph: *mut Cgraph) -> Result<Graph, ConvertError> {
    let mut conv = Converter::new(host);
    // SAFETY: accessor functions of the host's ggml on a live graph.
    let n = unsafe { (host.graph_n_nodes)(cgraph) }.max(0);
    for i in 0..n {
        // SAFETY: 0 <= i < n_nodes.
        let node = unsafe { (host.graph_node)(cgraph, i as c_int) };
        if node.is_null() {
            continue;
        }
        // SAFETY: nodes of a live graph are live.
        if unsafe { (*node).flags } & TENSOR_FLAG_COMPUTE == 0 {
            continue;
        }
        // SAFETY: as above.
        unsafe { conv.add_node(node, Some(i as usize)) }?;
    }
    Ok(conv.finish())
}

/// The node's name (up to the first NUL of ggml's fixed 64-byte field).
pub fn name_of(t: &GgmlTensor) -> String {
    let bytes: Vec<u8> = t.name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `dst ty[ne..]; src0 ty[ne..], ...` in ggml's type names, for log lines.
///
/// # Safety
/// `t`'s non-null `src` pointers point at live tensors.
pub unsafe fn types_of(host: &HostApi, t: &GgmlTensor) -> String {
    let shape = |x: &GgmlTensor| {
        format!(
            "{}[{},{},{},{}]",
            host.type_name_of(x.type_),
            x.ne[0],
            x.ne[1],
            x.ne[2],
            x.ne[3]
        )
    };
    let mut s = format!("dst {}", shape(t));
    for (i, &p) in t.src.iter().enumerate().take(MAX_SRC) {
        if !p.is_null() {
            // SAFETY: sources of a live tensor are live.
            let src = unsafe { &*p };
            s.push_str(&format!(", src{i} {}", shape(src)));
        }
    }
    s
}
