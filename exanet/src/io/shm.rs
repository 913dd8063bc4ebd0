//! [`DevMem`], an atomic view of one map, and [`Shm`], the [`RegIo`] over the emulator's
//! shared mappings.
//!
//! The emulator and the driver share the map files; both sides access them only through
//! `AtomicU32`/`AtomicU64` at aligned offsets, so there is no data race in the Rust sense.
//! Orderings: the driver's doorbells and consumer counters are `Release` stores, its reads
//! of hardware counters `Acquire` loads; the emulator reads doorbells with `Acquire` and
//! publishes counters with `Release`. Ring data is `Relaxed`, ordered by those counters.
//!
//! Doorbells also wake a dozing emulator: when the endpoint directory holds the emulator's
//! `doze` file and `wake` socket, [`Shm::open`] attaches a [`Waker`] and every
//! [`RegIo::doorbell`] is followed by [`Waker::kick`] (a fence and a load; a system call only
//! while the emulator sleeps). See [`crate::emu::wake`].

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use uio_driver::{UioMapping, UioSource};

use super::{Map, RegIo, check};
use crate::emu::wake::Waker;
use crate::error::OpenError;
use crate::regs::MAP_SIZES;

/// A raw view of one map (or any 8-byte aligned shared memory) accessed through atomics.
///
/// It does not own the memory: whoever builds it keeps the memory alive and mapped for as
/// long as the view (and its copies) are used.
#[derive(Clone, Copy, Debug)]
pub struct DevMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a `DevMem` only performs atomic accesses, which are sound from any thread; the
// constructor's contract keeps the memory valid while views exist.
unsafe impl Send for DevMem {}
// SAFETY: as above; all accesses through `&DevMem` are atomic.
unsafe impl Sync for DevMem {}

impl DevMem {
    /// A view of `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is 8-byte aligned and valid for reads and writes of `len` bytes for as long as
    /// this view or a copy of it is used, and every other access to that memory (in this or
    /// another process) is atomic or happens in a process outside Rust's model.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        assert!(ptr as usize % 8 == 0, "DevMem needs 8-byte alignment");
        DevMem { ptr, len }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Base pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    #[inline(always)]
    fn a32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset + 4 <= self.len && offset % 4 == 0,
            "DevMem access {offset:#x}"
        );
        // SAFETY: in bounds and aligned (checked above, base is 8-aligned); the
        // constructor's contract keeps the memory valid and all accesses atomic.
        unsafe { &*self.ptr.add(offset).cast::<AtomicU32>() }
    }

    #[inline(always)]
    fn a64(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset + 8 <= self.len && offset % 8 == 0,
            "DevMem access {offset:#x}"
        );
        // SAFETY: as in `a32`, for 8 bytes.
        unsafe { &*self.ptr.add(offset).cast::<AtomicU64>() }
    }

    /// 32-bit load with `order`.
    #[inline(always)]
    pub fn load32(&self, offset: usize, order: Ordering) -> u32 {
        self.a32(offset).load(order)
    }

    /// 32-bit store with `order`.
    #[inline(always)]
    pub fn store32(&self, offset: usize, value: u32, order: Ordering) {
        self.a32(offset).store(value, order)
    }

    /// 64-bit load with `order`.
    #[inline(always)]
    pub fn load64(&self, offset: usize, order: Ordering) -> u64 {
        self.a64(offset).load(order)
    }

    /// 64-bit store with `order`.
    #[inline(always)]
    pub fn store64(&self, offset: usize, value: u64, order: Ordering) {
        self.a64(offset).store(value, order)
    }

    /// 32-bit fetch-add with `order` (device-side counters).
    #[inline(always)]
    pub fn add32(&self, offset: usize, delta: u32, order: Ordering) -> u32 {
        self.a32(offset).fetch_add(delta, order)
    }

    /// Copies `out.len()` bytes from `offset` with 64-bit relaxed loads (the last word may
    /// be partly used). `offset` is 8-byte aligned.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        for (i, chunk) in out.chunks_mut(8).enumerate() {
            let word = self.load64(offset + i * 8, Ordering::Relaxed).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }

    /// Stores `data` at `offset` with 64-bit relaxed stores, zero-padding the last word.
    pub fn write_bytes(&self, offset: usize, data: &[u8]) {
        for (i, chunk) in data.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.store64(offset + i * 8, u64::from_le_bytes(word), Ordering::Relaxed);
        }
    }
}

/// [`RegIo`] over the emulator's shared map files (see the module docs).
#[derive(Debug)]
pub struct Shm {
    views: [DevMem; 4],
    waker: Option<Waker>,
    _maps: Vec<UioMapping>,
}

impl Shm {
    /// Maps map0..map3 of `source` (an [`uio_driver::EmuSource`] for the emulator) and
    /// checks their sizes against the model. Attaches the emulator's doorbell [`Waker`]
    /// when map0's directory provides one (a broken one is logged and left out: doorbells
    /// are then seen at the emulator's next timed wake-up).
    pub fn open<S: UioSource>(source: &S) -> Result<Self, OpenError> {
        let mut maps = Vec::with_capacity(4);
        for (index, size) in MAP_SIZES.iter().enumerate() {
            let map = source.open_map(index)?;
            if map.len() < *size {
                return Err(OpenError::MapTooSmall {
                    device: source.device_name().to_owned(),
                    map: index,
                    len: map.len(),
                    needed: *size,
                });
            }
            maps.push(map);
        }
        // SAFETY: each mapping is page aligned, at least MAP_SIZES[i] bytes long, and is
        // kept alive in `_maps` as long as the views; all accesses through `Shm` and the
        // emulator are atomic.
        let views =
            core::array::from_fn(|i| unsafe { DevMem::new(maps[i].as_ptr(), MAP_SIZES[i]) });
        let dir = maps[0].path().parent().map(std::path::Path::to_path_buf);
        let waker = match dir.as_deref().map(Waker::open).transpose() {
            Ok(w) => w.flatten(),
            Err(e) => {
                log::warn!(
                    "{}: no doorbell wake-ups for this endpoint: {e}",
                    source.device_name()
                );
                None
            }
        };
        Ok(Shm {
            views,
            waker,
            _maps: maps,
        })
    }

    /// Whether doorbells wake a dozing emulator (see the module docs).
    pub fn has_waker(&self) -> bool {
        self.waker.is_some()
    }

    /// The atomic view of `map`.
    pub fn view(&self, map: Map) -> DevMem {
        self.views[map as usize]
    }
}

impl RegIo for Shm {
    #[inline(always)]
    fn read32(&self, map: Map, offset: usize) -> u32 {
        check(map, offset, 4);
        self.views[map as usize].load32(offset, Ordering::Relaxed)
    }
    #[inline(always)]
    fn write32(&self, map: Map, offset: usize, value: u32) {
        check(map, offset, 4);
        self.views[map as usize].store32(offset, value, Ordering::Relaxed)
    }
    #[inline(always)]
    fn read64(&self, map: Map, offset: usize) -> u64 {
        check(map, offset, 8);
        self.views[map as usize].load64(offset, Ordering::Relaxed)
    }
    #[inline(always)]
    fn write64(&self, map: Map, offset: usize, value: u64) {
        check(map, offset, 8);
        self.views[map as usize].store64(offset, value, Ordering::Relaxed)
    }
    #[inline(always)]
    fn read_counter(&self, offset: usize) -> u32 {
        check(Map::Regs, offset, 4);
        self.views[0].load32(offset, Ordering::Acquire)
    }
    #[inline(always)]
    fn doorbell(&self, offset: usize, value: u32) {
        check(Map::Regs, offset, 4);
        self.views[0].store32(offset, value, Ordering::Release);
        if let Some(w) = &self.waker {
            w.kick();
        }
    }
    #[inline(always)]
    fn release_counter(&self, offset: usize, value: u32) {
        check(Map::Regs, offset, 4);
        self.views[0].store32(offset, value, Ordering::Release)
    }
}
