//! ggml tensors and graphs → tandem's graph model. Only the public `struct ggml_tensor` fields
//! and ggml's graph accessors are read; tensors are deduplicated by address, nodes keep ggml's
//! order, and a tensor's `buffer` is the address of its ggml buffer.

use crate::abi::{Cgraph, GgmlTensor, MAX_SRC, TENSOR_FLAG_COMPUTE, TENSOR_FLAG_OUTPUT};
use crate::host::HostApi;
use std::collections::HashMap;
use std::ffi::c_int;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
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

/// The graph of the last conversion and its lookup tables, kept between calls so a decode
/// step reuses their allocations instead of building them anew.
#[derive(Default)]
pub struct Scratch {
    graph: Graph,
    /// Tensor address → its id in `graph`.
    ids: HashMap<usize, TensorId, BuildHasherDefault<AddrHasher>>,
    /// The ggml tensor each id came from: names are read from there only when a message needs
    /// them. Valid only while the converted ggml graph is (during the call that converted it).
    origin: Vec<*const GgmlTensor>,
    /// ggml's node list of the last graph converted whole (every entry, with whether it was
    /// flagged for computation) ...
    nodes: Vec<(*const GgmlTensor, bool)>,
    /// ... and the bytes of each tensor in `origin` that conversion reads ([`key_of`]), so that
    /// the same graph handed over again (a decode step after the one before) is recognised
    /// without converting it anew.
    keys: Vec<u8>,
    /// Whether `graph` is the whole conversion of `nodes` and `keys` (not after a failure).
    whole: bool,
    /// The tag of the graph's conversion, unique in the process ([`Scratch::tag`]).
    tag: u64,
}

/// The bytes of a `ggml_tensor` that conversion reads: its type, then everything from `buffer`
/// to `data` (no padding lies between those fields); not the name, `extra` or padding.
const KEY_HEAD: usize = std::mem::size_of::<c_int>();
const KEY_FROM: usize = std::mem::offset_of!(GgmlTensor, buffer);
const KEY_TO: usize = std::mem::offset_of!(GgmlTensor, name);
const KEY_LEN: usize = KEY_HEAD + KEY_TO - KEY_FROM;
const _: () = assert!(std::mem::offset_of!(GgmlTensor, type_) == 0 && KEY_TO > KEY_FROM);

/// # Safety
/// `t` is a live `ggml_tensor`.
unsafe fn key_of(t: *const GgmlTensor) -> [&'static [u8]; 2] {
    let p = t as *const u8;
    // SAFETY: both ranges lie inside the live tensor and hold initialised fields (the type, and
    // the pointer/integer fields from `buffer` to `data`, which are laid out without gaps).
    unsafe {
        [
            std::slice::from_raw_parts(p, KEY_HEAD),
            std::slice::from_raw_parts(p.add(KEY_FROM), KEY_TO - KEY_FROM),
        ]
    }
}

impl Scratch {
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// A number given to each graph converted whole and kept while the graph is found
    /// unchanged: two calls with one tag hand over the same graph (a device's `GraphTag`).
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Gives every tensor its ggml name, for messages; the hot path leaves names empty.
    ///
    /// # Safety
    /// The ggml tensors of the last conversion are still live.
    pub unsafe fn fill_names(&mut self) {
        for (t, &p) in self.graph.tensors.iter_mut().zip(&self.origin) {
            if t.name.is_empty() {
                // SAFETY: per the contract.
                t.name = name_of(unsafe { &*p });
            }
        }
    }

    fn clear(&mut self) {
        self.graph.tensors.clear();
        self.graph.nodes.clear();
        self.ids.clear();
        self.origin.clear();
        self.nodes.clear();
        self.keys.clear();
        self.whole = false;
    }

    /// Records what the graph just converted whole was made of.
    ///
    /// # Safety
    /// Every tensor in `origin` is live.
    unsafe fn record_keys(&mut self) {
        static NEXT_TAG: AtomicU64 = AtomicU64::new(1);
        self.tag = NEXT_TAG.fetch_add(1, Ordering::Relaxed);
        self.keys.clear();
        self.keys.reserve(self.origin.len() * KEY_LEN);
        for &t in &self.origin {
            // SAFETY: per the contract.
            for part in unsafe { key_of(t) } {
                self.keys.extend_from_slice(part);
            }
        }
        self.whole = true;
    }

    /// Whether `cgraph` is the graph last converted whole: the same node list, and every tensor
    /// conversion read with the same bytes (so the same tensors reached, and the same graph).
    ///
    /// # Safety
    /// `cgraph` is a live graph; the tensors of the last conversion that are still reachable
    /// from it are live (checked in ggml's order: a tensor is read only once every pointer that
    /// led to it compared equal).
    unsafe fn same_graph(&self, host: &HostApi, cgraph: *mut Cgraph) -> bool {
        if !self.whole {
            return false;
        }
        // SAFETY: accessor of the host's ggml on a live graph.
        let n = unsafe { (host.graph_n_nodes)(cgraph) }.max(0) as usize;
        if n != self.nodes.len() {
            return false;
        }
        for (i, &last) in self.nodes.iter().enumerate() {
            // SAFETY: 0 <= i < n_nodes; nodes of a live graph are live.
            if unsafe { node_entry(host, cgraph, i) } != last {
                return false;
            }
        }
        for (t, key) in self.origin.iter().zip(self.keys.chunks_exact(KEY_LEN)) {
            // SAFETY: `t` was reached in the same order through pointers (node list, sources,
            // view roots) that compared equal above or in an earlier key, so it is a tensor of
            // this live graph.
            let [head, rest] = unsafe { key_of(*t) };
            if head != &key[..KEY_HEAD] || rest != &key[KEY_HEAD..] {
                return false;
            }
        }
        true
    }
}

/// Hashes a tensor address with one folded 64×64→128 multiply: hashbrown reads both the top
/// and the bottom bits of a hash, and the fold spreads the address's bits into both, where
/// SipHash would spend most of a lookup hashing eight bytes.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ b as u64);
        }
    }

    fn write_u64(&mut self, n: u64) {
        let p = (n ^ self.0) as u128 * 0x9e37_79b9_7f4a_7c15u128;
        self.0 = p as u64 ^ (p >> 64) as u64;
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// ggml op and type numbers below this are looked up in a table; ggml 0.26 has under 100 of each.
const TABLE: usize = 128;

/// `Op::from_ggml` through a table built once: the conversion asks for every tensor, and the
/// graph crate's lookup walks the list of ops.
fn op_of(id: c_int) -> Option<Op> {
    static T: OnceLock<[Option<Op>; TABLE]> = OnceLock::new();
    let t = T.get_or_init(|| std::array::from_fn(|i| Op::from_ggml(i as u32)));
    usize::try_from(id).ok().and_then(|i| t.get(i).copied().flatten())
}

/// `ElemType::from_ggml` through a table, as [`op_of`].
fn type_of(id: c_int) -> Option<ElemType> {
    static T: OnceLock<[Option<ElemType>; TABLE]> = OnceLock::new();
    let t = T.get_or_init(|| std::array::from_fn(|i| ElemType::from_ggml(i as u32)));
    usize::try_from(id).ok().and_then(|i| t.get(i).copied().flatten())
}

/// Builds a [`Graph`] from ggml tensors, one tensor per distinct address. Tensor names stay
/// empty (see [`Scratch::fill_names`]).
pub struct Converter<'h> {
    host: &'h HostApi,
    s: Scratch,
}

impl<'h> Converter<'h> {
    pub fn new(host: &'h HostApi) -> Self {
        Self::with_scratch(host, Scratch::default())
    }

    /// A converter that fills `s` (emptied first), keeping its allocations.
    pub fn with_scratch(host: &'h HostApi, mut s: Scratch) -> Self {
        s.clear();
        Converter { host, s }
    }

    pub fn finish(self) -> Graph {
        self.s.graph
    }

    pub fn into_scratch(self) -> Scratch {
        self.s
    }

    /// Adds `t` as a node (computed, in order) with its sources.
    ///
    /// # Safety
    /// `t` and every tensor reachable through `src`/`view_src` are live `ggml_tensor`s.
    pub unsafe fn add_node(&mut self, t: *const GgmlTensor, index: Option<usize>) -> Result<TensorId, ConvertError> {
        // SAFETY: live per the contract.
        let raw = unsafe { &*t };
        let Some(op) = op_of(raw.op) else {
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
            self.s.graph.tensor_mut(id).src[slot] = Some(sid);
        }
        self.s.graph.nodes.push(id);
        Ok(id)
    }

    /// Adds `t` (once) with its fields and its view root; `op` overrides the tensor's own op
    /// for nodes. Sources of a non-node tensor are not followed: it is an input here, already
    /// computed, and only its bytes and aliasing matter.
    ///
    /// # Safety
    /// `t` and its `view_src` are live `ggml_tensor`s.
    unsafe fn add_tensor(&mut self, t: *const GgmlTensor, op: Option<Op>) -> Result<TensorId, String> {
        if let Some(&id) = self.s.ids.get(&(t as usize)) {
            if let Some(op) = op {
                self.s.graph.tensor_mut(id).op = op;
            }
            return Ok(id);
        }
        // SAFETY: live per the contract.
        let raw = unsafe { &*t };
        let ty = type_of(raw.type_).ok_or_else(|| {
            format!(
                "'{}' has type {} which tandem does not know",
                name_of(raw),
                self.host.type_name_of(raw.type_)
            )
        })?;
        let mut op_params = [0i32; MAX_OP_PARAMS];
        let n = op_params.len().min(raw.op_params.len());
        op_params[..n].copy_from_slice(&raw.op_params[..n]);
        let id = TensorId(self.s.graph.tensors.len() as u32);
        self.s.graph.tensors.push(Tensor {
            name: String::new(),
            ty,
            ne: raw.ne,
            nb: raw.nb,
            op: op.or_else(|| op_of(raw.op)).unwrap_or(Op::None),
            op_params,
            src: [None; tandem_graph::MAX_SRC],
            view_src: None,
            view_offs: raw.view_offs,
            data: raw.data as usize,
            buffer: raw.buffer as u64,
            output: raw.flags & TENSOR_FLAG_OUTPUT != 0,
        });
        self.s.origin.push(t);
        self.s.ids.insert(t as usize, id);
        if !raw.view_src.is_null() && !std::ptr::eq(raw.view_src, t) {
            // SAFETY: the view root of a live tensor is live. ggml always points `view_src` at
            // the root owner, so this recursion is one level deep.
            let root = unsafe { self.add_tensor(raw.view_src, None) }?;
            self.s.graph.tensor_mut(id).view_src = Some(root);
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

/// Converts ggml's graph into `scratch` (its previous content is replaced): every node flagged
/// for computation, in order. Returns whether the graph was the one converted last time,
/// which `scratch` then already holds.
///
/// # Safety
/// `cgraph` is a live graph whose tensors stay live for the call.
pub unsafe fn convert_graph(host: &HostApi, cgraph: *mut Cgraph, scratch: &mut Scratch) -> Result<bool, ConvertError> {
    // SAFETY: per the contract.
    if unsafe { scratch.same_graph(host, cgraph) } {
        return Ok(true);
    }
    let mut conv = Converter::with_scratch(host, std::mem::take(scratch));
    // SAFETY: per the contract.
    let r = unsafe { add_nodes(&mut conv, host, cgraph) };
    *scratch = conv.into_scratch();
    if r.is_ok() {
        // SAFETY: the tensors just converted are live for this call.
        unsafe { scratch.record_keys() };
    }
    r.map(|()| false)
}

/// # Safety
/// As [`convert_graph`].
unsafe fn add_nodes(conv: &mut Converter, host: &HostApi, cgraph: *mut Cgraph) -> Result<(), ConvertError> {
    // SAFETY: accessor functions of the host's ggml on a live graph.
    let n = unsafe { (host.graph_n_nodes)(cgraph) }.max(0);
    for i in 0..n {
        // SAFETY: 0 <= i < n_nodes; nodes of a live graph are live.
        let (node, computed) = unsafe { node_entry(host, cgraph, i as usize) };
        conv.s.nodes.push((node, computed));
        if !computed {
            continue;
        }
        // SAFETY: as above.
        unsafe { conv.add_node(node, Some(i as usize)) }?;
    }
    Ok(())
}

/// Node `i` of ggml's graph and whether it is flagged for computation (a null node is not).
///
/// # Safety
/// `cgraph` is a live graph and `i` below its node count.
unsafe fn node_entry(host: &HostApi, cgraph: *mut Cgraph, i: usize) -> (*const GgmlTensor, bool) {
    // SAFETY: per the contract.
    let node = unsafe { (host.graph_node)(cgraph, i as c_int) } as *const GgmlTensor;
    // SAFETY: nodes of a live graph are live.
    let computed = !node.is_null() && unsafe { (*node).flags } & TENSOR_FLAG_COMPUTE != 0;
    (node, computed)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{Backend, Buffer, BufferIface, BufferType, LogLevel};
    use std::collections::HashSet;
    use std::ffi::{c_char, c_void};
    use std::hash::BuildHasher;

    /// A stand-in for ggml's graph: its node list.
    struct FakeGraph(Vec<*mut GgmlTensor>);

    unsafe extern "C" fn n_nodes(g: *mut Cgraph) -> c_int {
        // SAFETY: the tests pass a FakeGraph, not borrowed elsewhere during the call.
        let g = unsafe { &*(g as *const FakeGraph) };
        g.0.len() as c_int
    }
    unsafe extern "C" fn node(g: *mut Cgraph, i: c_int) -> *mut GgmlTensor {
        // SAFETY: as above, with i below the count.
        let g = unsafe { &*(g as *const FakeGraph) };
        g.0[i as usize]
    }
    unsafe extern "C" fn no_name(_: c_int) -> *const c_char {
        c"?".as_ptr()
    }
    unsafe extern "C" fn no_init(_: *mut BufferType, _: BufferIface, _: *mut c_void, _: usize) -> *mut Buffer {
        std::ptr::null_mut()
    }
    unsafe extern "C" fn no_is_host(_: *mut Buffer) -> bool {
        true
    }
    unsafe extern "C" fn no_buft_is_host(_: *mut BufferType) -> bool {
        true
    }
    unsafe extern "C" fn no_sync(_: *mut Backend) {}
    unsafe extern "C" fn no_nbytes(_: *const GgmlTensor) -> usize {
        0
    }

    fn fake_host() -> HostApi {
        HostApi {
            buffer_init: no_init,
            buffer_is_host: no_is_host,
            buft_is_host: no_buft_is_host,
            synchronize: no_sync,
            nbytes: no_nbytes,
            op_name: no_name,
            type_name: no_name,
            unary_op_name: no_name,
            glu_op_name: no_name,
            graph_n_nodes: n_nodes,
            graph_node: node,
            log_internal: None::<unsafe extern "C" fn(LogLevel, *const c_char, ...)>,
        }
    }

    /// A zeroed ggml tensor of `ne0` f32 values, owned by the caller (`Box::from_raw`).
    fn tensor(ne0: i64, op: Op) -> *mut GgmlTensor {
        // SAFETY: every field of ggml_tensor is valid all-zero (null pointers, zero numbers).
        let mut t: Box<GgmlTensor> = Box::new(unsafe { std::mem::zeroed() });
        t.type_ = ElemType::F32.ggml_id() as c_int;
        t.ne = [ne0, 1, 1, 1];
        t.nb = [4, 4 * ne0 as usize, 4 * ne0 as usize, 4 * ne0 as usize];
        t.op = op.ggml_id() as c_int;
        Box::into_raw(t)
    }

    /// A decode step's graph handed over again unchanged is recognised and not converted anew;
    /// any change to a field conversion reads, to the node list or to a node's flag is not.
    #[test]
    fn the_same_graph_again_is_reused_and_any_change_converts_it() {
        let host = fake_host();
        let (a, b) = (tensor(8, Op::None), tensor(8, Op::None));
        let (sum, sq) = (tensor(8, Op::Add), tensor(8, Op::Mul));
        // SAFETY (every access through these pointers): they stay valid until freed at the end,
        // and no reference to them outlives a statement.
        unsafe {
            (*sum).flags = TENSOR_FLAG_COMPUTE;
            (*sum).src[0] = a;
            (*sum).src[1] = b;
            (*sq).flags = TENSOR_FLAG_COMPUTE;
            (*sq).src[0] = sum;
            (*sq).src[1] = sum;
        }
        let mut g = FakeGraph(vec![sum, sq]);
        let cg = &mut g as *mut FakeGraph as *mut Cgraph;
        let mut scratch = Scratch::default();
        // SAFETY: the fake graph and its tensors are live for every call.
        let convert = |s: &mut Scratch| unsafe { convert_graph(&host, cg, s) }.unwrap();
        assert!(!convert(&mut scratch));
        let first = scratch.graph().clone();
        let tag = scratch.tag();
        assert_eq!((first.nodes.len(), first.tensors.len()), (2, 4));
        assert!(convert(&mut scratch));
        assert_eq!(scratch.graph(), &first);
        assert_eq!(scratch.tag(), tag, "a graph found unchanged keeps its tag");

        // A source's extent, an op parameter, a data address: converted anew, and the graph
        // says so.
        unsafe { (*b).ne[0] = 4 };
        assert!(!convert(&mut scratch));
        assert_ne!(scratch.tag(), tag, "a graph converted anew gets a tag of its own");
        assert_eq!(scratch.graph().tensors.iter().filter(|t| t.ne[0] == 4).count(), 1);
        assert!(convert(&mut scratch));
        unsafe { (*sq).op_params[0] = 7 };
        assert!(!convert(&mut scratch));
        assert!(convert(&mut scratch));
        unsafe { (*a).data = 0x1000 as *mut c_void };
        assert!(!convert(&mut scratch));
        assert!(scratch.graph().tensors.iter().any(|t| t.data == 0x1000));
        // A node no longer flagged for computation, then flagged again.
        unsafe { (*sq).flags = 0 };
        assert!(!convert(&mut scratch));
        assert_eq!(scratch.graph().nodes.len(), 1);
        unsafe { (*sq).flags = TENSOR_FLAG_COMPUTE };
        assert!(!convert(&mut scratch));
        assert_eq!(scratch.graph().nodes.len(), 2);
        // Another node list.
        unsafe { (*(cg as *mut FakeGraph)).0.pop() };
        assert!(!convert(&mut scratch));
        assert_eq!(scratch.graph().nodes.len(), 1);
        for t in [a, b, sum, sq] {
            // SAFETY: made by Box::into_raw above, freed once.
            drop(unsafe { Box::from_raw(t) });
        }
    }

    #[test]
    fn tables_agree_with_the_graph_crate() {
        for id in -3..200 {
            assert_eq!(op_of(id), u32::try_from(id).ok().and_then(Op::from_ggml), "op {id}");
            assert_eq!(
                type_of(id),
                u32::try_from(id).ok().and_then(ElemType::from_ggml),
                "type {id}"
            );
        }
    }

    /// ggml tensors sit 336 + 32 bytes apart in a context; their hashes must differ in the low
    /// bits (the bucket) and the top 7 bits (hashbrown's tag) alike.
    #[test]
    fn address_hash_spreads_tensor_strides() {
        let b = BuildHasherDefault::<AddrHasher>::default();
        let hashes: Vec<u64> = (0..4096usize)
            .map(|i| b.hash_one(0x7f12_3450_0000usize + i * 368))
            .collect();
        let low: HashSet<u64> = hashes.iter().map(|h| h & 0xfff).collect();
        let top: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(
            low.len() > 2400,
            "only {} distinct low 12-bit buckets of 4096",
            low.len()
        );
        assert_eq!(top.len(), 128, "top 7 bits do not cover all tags");
    }
}
