//! Host memory: aligned byte buffers and the allocation of a graph's tensors into them.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use tandem_graph::Graph;

/// Alignment of every host buffer and of every tensor placed by [`allocate_graph`].
pub const HOST_ALIGN: usize = 64;

/// A zero-initialised, 64-byte aligned host allocation.
pub struct HostBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer owns its allocation; access goes through &/&mut or raw addresses whose
// synchronisation is the executor's job.
unsafe impl Send for HostBuffer {}
// SAFETY: as above.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Allocates `len` bytes (at least one, so the address is never dangling).
    pub fn new(len: usize) -> Result<HostBuffer, String> {
        let layout =
            Layout::from_size_align(len.max(1), HOST_ALIGN).map_err(|e| format!("host buffer of {len} bytes: {e}"))?;
        // SAFETY: the layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(format!("host buffer of {len} bytes: out of memory"));
        }
        Ok(HostBuffer { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for the buffer's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len bytes and uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align_unchecked(self.len.max(1), HOST_ALIGN)) }
    }
}

/// Places every tensor of `g` that owns its bytes (no `view_src`) in one new host buffer, and
/// points views at their root. Tensors that already have an address keep it. `pad` extra bytes
/// are left after each tensor (the op harness writes sentinels there).
pub fn allocate_graph(g: &mut Graph, pad: usize) -> Result<HostBuffer, String> {
    let mut offsets = vec![None; g.tensors.len()];
    let mut total = 0usize;
    for (i, t) in g.tensors.iter().enumerate() {
        if t.view_src.is_none() && t.data == 0 {
            offsets[i] = Some(total);
            total += (t.nbytes() + pad).next_multiple_of(HOST_ALIGN);
        }
    }
    let buf = HostBuffer::new(total)?;
    for (i, off) in offsets.iter().enumerate() {
        if let Some(off) = off {
            g.tensors[i].data = buf.addr() + off;
        }
    }
    for i in 0..g.tensors.len() {
        if let Some(root) = g.tensors[i].view_src {
            let base = g.tensor(root).data;
            g.tensors[i].data = base + g.tensors[i].view_offs;
        }
    }
    Ok(buf)
}
