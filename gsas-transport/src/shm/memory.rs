//! [`ShmMemory`]: the service engine's memory access over mapped shared-memory segments.
//!
//! What it is: an implementation of gsas-core's [`Memory`] trait over a set of
//! [`Segment`]s mapped into the service process. A gsas-core service segment's `base` is
//! the *address* of the data in this process (`segment.addr()` for a whole mapping); the
//! engine has checked bounds and alignment before it calls in, and `ShmMemory` checks again
//! that the range lies inside one of its mappings (a cheap binary search) so that it stays
//! sound whatever it is called with.
//!
//! * Reads and writes are [`load_once`] and [`store_once`] (every byte once, aligned
//!   elements by one access: PEs watch this memory); a write is preceded by a release fence
//!   and a read followed by an acquire fence, so a put followed by a flag write reaches a
//!   local reader in that order.
//! * Atomics are CPU atomics of the requested width: `AtomicU32::from_ptr` for 32-bit
//!   operations, `AtomicU64::from_ptr` for 64-bit ones (compare-and-swap, swap, fetch-add,
//!   and/or/xor as the single instructions or LL/SC loops of the CPU). Read-modify-writes
//!   are `AcqRel`, fetches `Acquire`, sets `Release`. Float SET/SWAP/FETCH arrive as bit
//!   patterns and are executed bitwise, so they are exact.
//!
//! * **Doorbells.** A mapping inserted with [`ShmMemory::insert_with_bell`] rings its
//!   [`Bell`](crate::bell::Bell) after every write and every atomic except a fetch: one
//!   fence and one relaxed load when nobody sleeps on it, a `FUTEX_WAKE` when its PE has
//!   announced a sleeping waiter (see [`crate::bell`]).
//!
//! Same-node PEs access the same memory directly with their own CPU atomics, and the two
//! kinds of access are coherent because both are plain CPU atomics on the same physical
//! pages.
//!
//! What it is not: a bounds checker for requests (the engine does that against the segment
//! table) or an owner of the segment table. Register a mapping here *before* registering
//! the gsas-core segment with the engine, and unregister it from the engine *before*
//! removing it here.
//!
//! Thread-safety: `Send + Sync`. The set of mappings sits behind a `RwLock`: every access
//! holds the read lock while it touches memory, so [`ShmMemory::remove`] (write lock) waits
//! for accesses in flight, and a mapping is never unmapped under a running access.
//!
//! ```
//! use std::sync::Arc;
//! use gsas_transport::shm::{Segment, ShmMemory};
//! use gsas_core::service::{AmoKind, Memory, Segment as ServiceSegment};
//!
//! let memory = ShmMemory::new();
//! let heap = Arc::new(Segment::create("pe0-heap", 1 << 16)?);
//! memory.insert(heap.clone())?;
//! let seg = ServiceSegment { job: 1, key: 9, pe: 0, segment: 0, base: heap.addr(), len: 1 << 16 };
//! assert!(memory.contains(seg.base, seg.len));
//! memory.write(&seg, 16, &7u64.to_le_bytes());
//! assert_eq!(memory.atomic64(&seg, 16, AmoKind::Add, 5, 0), 7);
//! assert_eq!(memory.atomic32(&seg, 16, AmoKind::Fetch, 0, 0), 12);
//! # Ok::<(), gsas_transport::shm::ShmError>(())
//! ```

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use gsas_core::service::{AmoKind, Memory, Segment as ServiceSegment};

use super::{Segment, ShmError};
use crate::bell::BellRef;
use crate::watched::{load_once, store_once};

/// A mapping and the bell of the PE it belongs to.
#[derive(Debug)]
struct Region {
    segment: Arc<Segment>,
    bell: Option<BellRef>,
}

impl Region {
    #[inline]
    fn addr(&self) -> usize {
        self.segment.addr()
    }

    #[inline]
    fn ring(&self) {
        if let Some(b) = &self.bell {
            b.bell().ring();
        }
    }
}

/// The engine's [`Memory`] over mapped shared-memory segments; see the [module docs](self).
#[derive(Debug, Default)]
pub struct ShmMemory {
    /// Mappings sorted by address; they never overlap (distinct live mappings).
    regions: RwLock<Vec<Region>>,
}

impl ShmMemory {
    /// No mappings yet.
    pub fn new() -> Self {
        ShmMemory::default()
    }

    fn regions(&self) -> RwLockReadGuard<'_, Vec<Region>> {
        // A panic while holding the lock cannot leave the vector inconsistent (insert and
        // remove complete or do nothing), so a poisoned lock is still usable.
        self.regions.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `segment`'s mapping accessible.
    ///
    /// Errors: [`ShmError::Invalid`] if the same mapping was inserted already.
    pub fn insert(&self, segment: Arc<Segment>) -> Result<(), ShmError> {
        self.insert_region(segment, None)
    }

    /// Makes `segment`'s mapping accessible and rings `bell` after every update of it
    /// (see the [module docs](self)).
    ///
    /// Errors: [`ShmError::Invalid`] if the same mapping was inserted already.
    pub fn insert_with_bell(&self, segment: Arc<Segment>, bell: BellRef) -> Result<(), ShmError> {
        self.insert_region(segment, Some(bell))
    }

    fn insert_region(&self, segment: Arc<Segment>, bell: Option<BellRef>) -> Result<(), ShmError> {
        let mut regions = self.regions.write().unwrap_or_else(PoisonError::into_inner);
        let at = regions.partition_point(|r| r.addr() < segment.addr());
        if regions.get(at).is_some_and(|r| r.addr() == segment.addr()) {
            return Err(ShmError::invalid(
                format!("mapping of segment {:?}", segment.name()),
                "inserted twice",
            ));
        }
        regions.insert(at, Region { segment, bell });
        Ok(())
    }

    /// Removes the mapping that starts at `addr` and returns it (it is unmapped when the
    /// last `Arc` goes). Waits for accesses in flight.
    pub fn remove(&self, addr: usize) -> Option<Arc<Segment>> {
        let mut regions = self.regions.write().unwrap_or_else(PoisonError::into_inner);
        let at = regions.binary_search_by_key(&addr, |r| r.addr()).ok()?;
        Some(regions.remove(at).segment)
    }

    /// Number of mappings.
    pub fn len(&self) -> usize {
        self.regions().len()
    }

    /// Whether there are no mappings.
    pub fn is_empty(&self) -> bool {
        self.regions().is_empty()
    }

    /// The address of `seg.base + offset` if `len` bytes there lie in one mapping of
    /// `regions`. Panics otherwise: the engine's checks make that impossible, and a panic
    /// is the sound answer to a caller that bypassed them.
    #[inline]
    fn locate<'r>(
        regions: &'r [Region],
        seg: &ServiceSegment,
        offset: u64,
        len: usize,
    ) -> (*mut u8, &'r Region) {
        let addr = usize::try_from(offset)
            .ok()
            .and_then(|o| seg.base.checked_add(o));
        if let Some(addr) = addr {
            let at = regions.partition_point(|r| r.addr() <= addr);
            if let Some(r) = at.checked_sub(1).map(|i| &regions[i]) {
                if r.segment.contains(addr, len) {
                    // Within the mapping: the pointer arithmetic stays in bounds.
                    return (r.segment.as_ptr().wrapping_add(addr - r.addr()), r);
                }
            }
        }
        panic!(
            "shared-memory access outside every mapping: segment (key {:#x}, pe {}, id {}) base {:#x} offset {offset} length {len}",
            seg.key, seg.pe, seg.segment, seg.base
        );
    }
}

impl Memory for ShmMemory {
    fn contains(&self, base: usize, len: u64) -> bool {
        let Ok(len) = usize::try_from(len) else {
            return false;
        };
        let regions = self.regions();
        let at = regions.partition_point(|r| r.addr() <= base);
        at.checked_sub(1)
            .is_some_and(|i| regions[i].segment.contains(base, len))
    }

    #[inline]
    fn read(&self, seg: &ServiceSegment, offset: u64, out: &mut [u8]) {
        let regions = self.regions();
        let (src, _) = Self::locate(&regions, seg, offset, out.len());
        // SAFETY: `src .. src + out.len()` lies in a live mapping (checked by `locate`;
        // the read lock keeps it mapped); `out` is a private Rust buffer, so the ranges do
        // not overlap. Concurrent writers are other processes or threads using raw copies
        // and atomics on shared memory, never Rust references.
        unsafe { load_once(src, out.as_mut_ptr(), out.len()) };
        fence(Ordering::Acquire);
    }

    #[inline]
    fn write(&self, seg: &ServiceSegment, offset: u64, data: &[u8]) {
        let regions = self.regions();
        let (dst, region) = Self::locate(&regions, seg, offset, data.len());
        fence(Ordering::Release);
        // SAFETY: as in `read`, with the mapping writable (all segments are mapped
        // read-write) and `data` a private Rust buffer.
        unsafe { store_once(data.as_ptr(), dst, data.len()) };
        region.ring();
    }

    #[inline]
    fn atomic32(
        &self,
        seg: &ServiceSegment,
        offset: u64,
        op: AmoKind,
        operand: u32,
        comparand: u32,
    ) -> u32 {
        let regions = self.regions();
        let (p, region) = Self::locate(&regions, seg, offset, 4);
        assert!(
            p as usize % 4 == 0,
            "misaligned 32-bit atomic at {p:p} (the engine checks alignment)"
        );
        // SAFETY: `p` is 4-byte aligned (asserted) and the 4 bytes lie in a live mapping
        // that the read lock keeps mapped until `a` is dropped at the end of this call;
        // shared memory is accessed concurrently only through atomics and raw copies.
        let a = unsafe { AtomicU32::from_ptr(p.cast::<u32>()) };
        let old = match op {
            AmoKind::Fetch => a.load(Ordering::Acquire),
            AmoKind::Set => {
                a.store(operand, Ordering::Release);
                0
            }
            AmoKind::Swap => a.swap(operand, Ordering::AcqRel),
            AmoKind::CompareSwap => {
                match a.compare_exchange(comparand, operand, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(v) | Err(v) => v,
                }
            }
            AmoKind::Add => a.fetch_add(operand, Ordering::AcqRel),
            AmoKind::And => a.fetch_and(operand, Ordering::AcqRel),
            AmoKind::Or => a.fetch_or(operand, Ordering::AcqRel),
            AmoKind::Xor => a.fetch_xor(operand, Ordering::AcqRel),
        };
        if !matches!(op, AmoKind::Fetch) {
            region.ring();
        }
        old
    }

    #[inline]
    fn atomic64(
        &self,
        seg: &ServiceSegment,
        offset: u64,
        op: AmoKind,
        operand: u64,
        comparand: u64,
    ) -> u64 {
        let regions = self.regions();
        let (p, region) = Self::locate(&regions, seg, offset, 8);
        assert!(
            p as usize % 8 == 0,
            "misaligned 64-bit atomic at {p:p} (the engine checks alignment)"
        );
        // SAFETY: as in `atomic32`, with 8 bytes and 8-byte alignment.
        let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
        let old = match op {
            AmoKind::Fetch => a.load(Ordering::Acquire),
            AmoKind::Set => {
                a.store(operand, Ordering::Release);
                0
            }
            AmoKind::Swap => a.swap(operand, Ordering::AcqRel),
            AmoKind::CompareSwap => {
                match a.compare_exchange(comparand, operand, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(v) | Err(v) => v,
                }
            }
            AmoKind::Add => a.fetch_add(operand, Ordering::AcqRel),
            AmoKind::And => a.fetch_and(operand, Ordering::AcqRel),
            AmoKind::Or => a.fetch_or(operand, Ordering::AcqRel),
            AmoKind::Xor => a.fetch_xor(operand, Ordering::AcqRel),
        };
        if !matches!(op, AmoKind::Fetch) {
            region.ring();
        }
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(len: usize) -> (ShmMemory, Arc<Segment>, ServiceSegment) {
        let m = ShmMemory::new();
        let s = Arc::new(Segment::create("memory-test", len).unwrap());
        m.insert(s.clone()).unwrap();
        let seg = ServiceSegment {
            job: 1,
            key: 2,
            pe: 3,
            segment: 0,
            base: s.addr(),
            len: len as u64,
        };
        (m, s, seg)
    }

    #[test]
    fn bytes_round_trip_and_reach_the_segment() {
        let (m, s, seg) = setup(8192);
        m.write(&seg, 4093, b"abcdefg");
        let mut out = [0u8; 7];
        m.read(&seg, 4093, &mut out);
        assert_eq!(&out, b"abcdefg");
        let mut direct = [0u8; 7];
        s.read(4093, &mut direct).unwrap();
        assert_eq!(&direct, b"abcdefg");
    }

    #[test]
    fn atomics_have_their_width() {
        let (m, s, seg) = setup(4096);
        s.atomic_u64(8).unwrap().store(u64::MAX, Ordering::Relaxed);
        // 32-bit add wraps within its word and leaves the neighbour alone.
        assert_eq!(m.atomic32(&seg, 8, AmoKind::Add, 1, 0), u32::MAX);
        assert_eq!(
            s.atomic_u64(8).unwrap().load(Ordering::Relaxed),
            0xffff_ffff_0000_0000
        );
        assert_eq!(m.atomic32(&seg, 12, AmoKind::CompareSwap, 5, 1), u32::MAX);
        assert_eq!(
            m.atomic32(&seg, 12, AmoKind::CompareSwap, 5, u32::MAX),
            u32::MAX
        );
        assert_eq!(m.atomic32(&seg, 12, AmoKind::Swap, 6, 0), 5);
        assert_eq!(m.atomic32(&seg, 12, AmoKind::Xor, 3, 0), 6);
        assert_eq!(m.atomic32(&seg, 12, AmoKind::Or, 8, 0), 5);
        assert_eq!(m.atomic32(&seg, 12, AmoKind::And, 12, 0), 13);
        m.atomic32(&seg, 12, AmoKind::Set, 77, 0);
        assert_eq!(m.atomic32(&seg, 12, AmoKind::Fetch, 0, 0), 77);
        assert_eq!(m.atomic64(&seg, 16, AmoKind::Add, u64::MAX, 0), 0);
        assert_eq!(m.atomic64(&seg, 16, AmoKind::Add, 2, 0), u64::MAX);
        assert_eq!(m.atomic64(&seg, 16, AmoKind::CompareSwap, 9, 0), 1);
        assert_eq!(m.atomic64(&seg, 16, AmoKind::CompareSwap, 9, 1), 1);
        assert_eq!(m.atomic64(&seg, 16, AmoKind::Swap, 0xf0, 0), 9);
        assert_eq!(m.atomic64(&seg, 16, AmoKind::And, 0x3c, 0), 0xf0);
        assert_eq!(m.atomic64(&seg, 16, AmoKind::Or, 1, 0), 0x30);
        assert_eq!(m.atomic64(&seg, 16, AmoKind::Xor, 0x31, 0), 0x31);
        m.atomic64(&seg, 16, AmoKind::Set, 1.5f64.to_bits(), 0);
        assert_eq!(
            f64::from_bits(m.atomic64(&seg, 16, AmoKind::Fetch, 0, 0)),
            1.5
        );
    }

    #[test]
    fn contains_and_removal() {
        let (m, s, seg) = setup(4096);
        let other = Arc::new(Segment::create("other", 4096).unwrap());
        m.insert(other.clone()).unwrap();
        assert!(m.insert(other.clone()).is_err(), "twice");
        assert_eq!(m.len(), 2);
        assert!(m.contains(seg.base, 4096));
        assert!(!m.contains(seg.base, 4097));
        assert!(m.contains(other.addr() + 4000, 96));
        assert!(!m.contains(other.addr() + 4000, 97));
        assert!(!m.contains(usize::MAX, 2));
        assert!(Arc::ptr_eq(&m.remove(s.addr()).unwrap(), &s));
        assert!(m.remove(s.addr()).is_none());
        assert!(!m.contains(seg.base, 1));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn updates_ring_the_bell_only_when_someone_sleeps() {
        use crate::bell::{BellRef, page_len, slot_offset};
        let page = Arc::new(Segment::create("memory-test-bells", page_len(2)).unwrap());
        let bell = BellRef::new(Arc::clone(&page), slot_offset(1)).unwrap();
        let m = ShmMemory::new();
        let s = Arc::new(Segment::create("memory-test-rung", 4096).unwrap());
        m.insert_with_bell(s.clone(), bell.clone()).unwrap();
        let (plain, _plain_seg, plain_ss) = setup(4096);
        let seg = ServiceSegment {
            job: 1,
            key: 2,
            pe: 4,
            segment: 0,
            base: s.addr(),
            len: 4096,
        };
        let b = bell.bell();
        // Nobody sleeps: updates leave the sequence alone.
        m.write(&seg, 0, &[1u8; 8]);
        m.atomic64(&seg, 8, AmoKind::Add, 1, 0);
        assert_eq!(b.seq(), 0);
        let sleeper = b.announce();
        // A sleeper: every write and modifying atomic rings, fetches and reads do not.
        m.write(&seg, 0, &[2u8; 8]);
        assert_eq!(b.seq(), 1);
        m.atomic32(&seg, 16, AmoKind::Set, 5, 0);
        m.atomic64(&seg, 8, AmoKind::CompareSwap, 7, 1);
        assert_eq!(b.seq(), 3);
        m.atomic64(&seg, 8, AmoKind::Fetch, 0, 0);
        m.atomic32(&seg, 16, AmoKind::Fetch, 0, 0);
        m.read(&seg, 0, &mut [0u8; 8]);
        assert_eq!(b.seq(), 3);
        // A mapping without a bell rings nothing.
        plain.write(&plain_ss, 0, &[3u8; 8]);
        assert_eq!(b.seq(), 3);
        assert!(sleeper.rung());
        drop(sleeper);
        m.write(&seg, 0, &[4u8; 8]);
        assert_eq!(b.seq(), 3, "the sleeper left");
        assert!(Arc::ptr_eq(&m.remove(s.addr()).unwrap(), &s));
    }

    #[test]
    #[should_panic(expected = "outside every mapping")]
    fn access_outside_panics_instead_of_touching_memory() {
        let (m, _s, seg) = setup(4096);
        m.write(&seg, 4090, &[0u8; 7]);
    }

    #[test]
    fn concurrent_32_bit_adds_are_atomic() {
        let (m, s, seg) = setup(4096);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..5000 {
                        m.atomic32(&seg, 4, AmoKind::Add, 1, 0);
                        m.atomic64(&seg, 8, AmoKind::Add, 3, 0);
                    }
                });
            }
        });
        assert_eq!(s.atomic_u32(4).unwrap().load(Ordering::Relaxed), 20_000);
        assert_eq!(s.atomic_u64(8).unwrap().load(Ordering::Relaxed), 60_000);
        assert_eq!(s.atomic_u32(0).unwrap().load(Ordering::Relaxed), 0);
    }
}
