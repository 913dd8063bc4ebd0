//! Register access: the [`RegIo`] trait, its implementations and the device barriers.
//!
//! What it is (model section 13): the ring driver is generic over [`RegIo`], so the same
//! code runs over
//! * [`Mmio`]: a real UIO mapping (`uio_driver::UioMapping`), with aligned 32/64-bit
//!   volatile accesses (never `memcpy`), [`to_device_barrier`] (`dmb oshst`) before every
//!   doorbell and [`from_device_barrier`] (`dmb oshld`) after every hardware-counter read;
//! * [`Shm`]: the emulator's shared mapping, with `AtomicU32`/`AtomicU64` accesses,
//!   `Release` stores for doorbells and `Acquire` loads for hardware counters (the emulator
//!   uses the mirror orderings);
//! * `exanet_emu::Model` (crate `exanet-emu`): the in-process deterministic NI model for
//!   unit tests, where a doorbell write synchronously runs the device state machine (or
//!   queues it in step mode).
//!
//! Every access names the map ([`Map`]) and a byte offset from [`crate::regs::off`]. An
//! access outside the map or misaligned panics (a driver bug, never a data-dependent
//! condition); with constant offsets the check folds away.
//!
//! # Barriers
//!
//! A doorbell must not become visible to the device before the descriptor and payload
//! stores that precede it, and data loads must not be satisfied before the counter load
//! that says the data is there. On arm64 UIO maps are device memory in the outer-shareable
//! domain, so the barriers are `dmb oshst` (Linux `dma_wmb`) and `dmb oshld` (`dma_rmb`);
//! a Rust `fence` emits `dmb ish*` (inner shareable), which does not order against the
//! device. [`from_device_barrier`] is also used before a *consumer* counter store
//! (`RX_CONS`): on ARMv8 `DMB LD` orders earlier loads against later loads *and* stores, so
//! the slot loads complete before the slot is handed back.
//!
//! On x86_64 the barriers are compiler fences only. The UIO maps of an x86 emulator run are
//! ordinary write-back shared memory (no UC/WC mapping is ever created), and x86-TSO keeps
//! stores in program order with respect to other stores and loads in order with respect to
//! other loads, so only the compiler must be kept from reordering. The `Shm` backend's
//! atomics give the same guarantee to the Rust memory model.
//!
//! Checked disassembly (aarch64, `aarch64-linux-gnu-objdump -d` of the release build of
//! `Endpoint::<Mmio>::try_send`): the payload and descriptor stores (`str x`/`str w`) are
//! followed by `dmb oshst` and then the single `str w` to `TX_TAIL`; the counter read in
//! `reap_tx` is `ldr w` followed by `dmb oshld`. No `memcpy` call and no `dmb ish` appear
//! on the doorbell path.
//!
//! Thread safety: [`Mmio`] and [`Shm`] are `Send + Sync` but the driver owns one instance
//! per endpoint; two writers of the same ring would race as they would on hardware.
//! `exanet_emu::Model` is single-threaded (`!Send`).

mod mmio;
mod shm;

pub use mmio::Mmio;
pub use shm::{DevMem, Shm};

use crate::regs::MAP_SIZES;

/// The four maps of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Map {
    /// map0: control/status registers.
    Regs = 0,
    /// map1: RX mailbox ring.
    Mbox = 1,
    /// map2: TX packetizer ring.
    Pktz = 2,
    /// map3: RDMA descriptor and record rings.
    Rdma = 3,
}

impl Map {
    /// The map's size in bytes.
    #[inline(always)]
    pub const fn size(self) -> usize {
        MAP_SIZES[self as usize]
    }
}

/// Register access of one endpoint.
///
/// All methods take `&self`: device memory has interior mutability. Offsets come from
/// [`crate::regs::off`]; an offset outside the map or not aligned to the access width
/// panics.
pub trait RegIo {
    /// Aligned 32-bit load (software-owned registers, ring words the device wrote before a
    /// counter that was read with [`read_counter`](Self::read_counter)).
    fn read32(&self, map: Map, offset: usize) -> u32;
    /// Aligned 32-bit store.
    fn write32(&self, map: Map, offset: usize, value: u32);
    /// Aligned 64-bit load.
    fn read64(&self, map: Map, offset: usize) -> u64;
    /// Aligned 64-bit store.
    fn write64(&self, map: Map, offset: usize, value: u64);
    /// Loads a hardware-owned counter in map0 and orders every later load after it
    /// (`from_device_barrier` / `Acquire`).
    fn read_counter(&self, offset: usize) -> u32;
    /// Rings a doorbell in map0: orders every earlier store before it
    /// (`to_device_barrier` / `Release`), then stores `value`.
    fn doorbell(&self, offset: usize, value: u32);
    /// Stores a consumer counter in map0 (`RX_CONS`, `*_SEEN`): orders every earlier load
    /// before it, so memory handed back to the device is no longer read.
    fn release_counter(&self, offset: usize, value: u32);
}

/// Checks that a `width`-byte access at `offset` lies inside `map` and is aligned.
#[inline(always)]
pub fn check(map: Map, offset: usize, width: usize) {
    assert!(
        offset <= map.size() - width && offset % width == 0,
        "exanet: {width}-byte access at {offset:#x} outside or misaligned in map {map:?}"
    );
}

/// Orders every earlier store before every later store as seen by the device: `dmb oshst`
/// on aarch64, a compiler fence on x86_64 (see the module docs). Call it between writing a
/// descriptor and writing its doorbell.
#[inline(always)]
pub fn to_device_barrier() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshst` only orders memory accesses; it reads and writes no registers or
    // memory visible to Rust. Without `nomem` the asm is also a compiler barrier.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "aarch64"))]
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
}

/// Orders an earlier load of a device counter before every later load and store: `dmb
/// oshld` on aarch64, a compiler fence on x86_64. Call it after reading `RX_PROD`,
/// `TX_DONE` or `CH[c].DONE` and before reading the data they cover.
#[inline(always)]
pub fn from_device_barrier() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshld` only orders memory accesses; no registers or memory change.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "aarch64"))]
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
}
