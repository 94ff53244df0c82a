//! Which memory a tensor address belongs to. A GPU device records every allocation it makes
//! (device memory and pinned, device-mapped host memory); the planner asks where each tensor
//! lives to decide whether a kernel can reach it and whether the CPU fallback needs a copy.

use super::api::{DevicePtr, GpuResult};
use super::safe::{Context, DeviceBuffer, PinnedHostBuffer};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Where a range of bytes lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// Device memory: kernels use the address as it is; the CPU needs a staging copy.
    Device,
    /// Pinned host memory mapped into the device: the CPU uses the address, kernels use
    /// `address + delta` (0 on unified-address systems).
    Pinned { delta: i64 },
    /// Memory tandem did not allocate (plain host memory): the CPU only.
    Host,
}

impl MemKind {
    pub fn gpu_visible(self) -> bool {
        !matches!(self, MemKind::Host)
    }

    pub fn cpu_visible(self) -> bool {
        !matches!(self, MemKind::Device)
    }
}

#[derive(Clone, Copy, Debug)]
struct Region {
    len: usize,
    kind: MemKind,
}

/// Address ranges of one device's allocations.
#[derive(Default)]
pub struct MemoryMap {
    regions: RwLock<BTreeMap<usize, Region>>,
    /// Bumped by every allocation and release ([`Self::generation`]).
    generation: AtomicU64,
}

impl MemoryMap {
    fn insert(&self, start: usize, len: usize, kind: MemKind) {
        let mut map = self.regions.write().unwrap_or_else(|p| p.into_inner());
        map.insert(start, Region { len, kind });
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn remove(&self, start: usize) {
        let mut map = self.regions.write().unwrap_or_else(|p| p.into_inner());
        map.remove(&start);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// A number that changes whenever an allocation is added or released: kinds looked up at
    /// one generation hold while it lasts.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The kind of `[addr, addr + len)`; `Host` when the range is not inside one allocation.
    pub fn kind(&self, addr: usize, len: usize) -> MemKind {
        let map = self.regions.read().unwrap_or_else(|p| p.into_inner());
        Self::holding(&map, addr, len).map_or(MemKind::Host, |(_, _, kind)| kind)
    }

    /// [`Self::kind`] of every range, under one lock, address 0 (nothing allocated) being `Host`;
    /// a range inside the allocation of the one before it is answered without a search (a
    /// graph's tensors lie in a few buffers, and the lookups of a thousand tensors are paid on
    /// every graph run).
    pub fn kinds(&self, ranges: impl Iterator<Item = (usize, usize)>) -> Vec<MemKind> {
        let map = self.regions.read().unwrap_or_else(|p| p.into_inner());
        let mut last: Option<(usize, usize, MemKind)> = None;
        ranges
            .map(|(addr, len)| {
                if addr == 0 {
                    return MemKind::Host;
                }
                if let Some((start, end, kind)) = last {
                    if addr >= start && addr.saturating_add(len) <= end {
                        return kind;
                    }
                }
                last = Self::holding(&map, addr, len);
                last.map_or(MemKind::Host, |(_, _, kind)| kind)
            })
            .collect()
    }

    /// The start and end of the allocation holding `[addr, addr + len)`, if one does.
    pub fn allocation(&self, addr: usize, len: usize) -> Option<(usize, usize)> {
        let map = self.regions.read().unwrap_or_else(|p| p.into_inner());
        Self::holding(&map, addr, len).map(|(start, end, _)| (start, end))
    }

    /// The allocation holding `[addr, addr + len)`: its start, end and kind.
    fn holding(map: &BTreeMap<usize, Region>, addr: usize, len: usize) -> Option<(usize, usize, MemKind)> {
        let (&start, r) = map.range(..=addr).next_back()?;
        let end = start + r.len.max(1);
        (addr.saturating_add(len) <= end).then_some((start, end, r.kind))
    }
}

/// A device allocation registered in its device's map for as long as it lives.
pub struct DeviceAlloc {
    buf: DeviceBuffer,
    map: Arc<MemoryMap>,
}

impl DeviceAlloc {
    pub fn new(ctx: &Arc<Context>, map: &Arc<MemoryMap>, len: usize) -> GpuResult<DeviceAlloc> {
        let buf = ctx.alloc(len)?;
        map.insert(buf.ptr().0 as usize, len, MemKind::Device);
        Ok(DeviceAlloc { buf, map: map.clone() })
    }

    pub fn ptr(&self) -> DevicePtr {
        self.buf.ptr()
    }

    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        self.map.remove(self.buf.ptr().0 as usize);
    }
}

/// Pinned host memory registered in its device's map for as long as it lives.
pub struct PinnedAlloc {
    buf: PinnedHostBuffer,
    map: Arc<MemoryMap>,
}

impl PinnedAlloc {
    pub fn new(ctx: &Arc<Context>, map: &Arc<MemoryMap>, len: usize) -> GpuResult<PinnedAlloc> {
        let buf = ctx.alloc_pinned(len)?;
        let delta = buf.device_ptr().0 as i64 - buf.host_ptr() as i64;
        map.insert(buf.host_ptr() as usize, len, MemKind::Pinned { delta });
        Ok(PinnedAlloc { buf, map: map.clone() })
    }

    pub fn host_ptr(&self) -> *mut u8 {
        self.buf.host_ptr()
    }

    pub fn device_ptr(&self) -> DevicePtr {
        self.buf.device_ptr()
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

impl Drop for PinnedAlloc {
    fn drop(&mut self) {
        self.map.remove(self.buf.host_ptr() as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_to_the_allocation_holding_them() {
        let m = MemoryMap::default();
        m.insert(1000, 100, MemKind::Device);
        m.insert(5000, 50, MemKind::Pinned { delta: 7 });
        assert_eq!(m.kind(1000, 100), MemKind::Device);
        assert_eq!(m.kind(1050, 10), MemKind::Device);
        assert_eq!(m.kind(1050, 60), MemKind::Host, "runs past the end");
        assert_eq!(m.kind(999, 1), MemKind::Host);
        assert_eq!(m.kind(5049, 1), MemKind::Pinned { delta: 7 });
        assert_eq!(m.kind(9000, 1), MemKind::Host);
        m.remove(1000);
        assert_eq!(m.kind(1000, 1), MemKind::Host);
    }

    #[test]
    fn many_ranges_resolve_as_one_at_a_time() {
        let m = MemoryMap::default();
        m.insert(1000, 100, MemKind::Device);
        m.insert(1100, 100, MemKind::Pinned { delta: -3 });
        m.insert(5000, 50, MemKind::Device);
        // Runs within one allocation, across two, past an end, between, address 0.
        let ranges = [
            (1000, 10),
            (1010, 90),
            (1090, 20),
            (1100, 1),
            (1150, 50),
            (1150, 51),
            (1020, 5),
            (3000, 1),
            (5000, 50),
            (5010, 41),
            (0, 1),
            (0, 0),
        ];
        let one_by_one: Vec<MemKind> = ranges
            .iter()
            .map(|&(a, l)| if a == 0 { MemKind::Host } else { m.kind(a, l) })
            .collect();
        assert_eq!(m.kinds(ranges.iter().copied()), one_by_one);
        assert_eq!(one_by_one[2], MemKind::Host, "crosses into the next allocation");
        assert_eq!(one_by_one[4], MemKind::Pinned { delta: -3 });
    }
}
