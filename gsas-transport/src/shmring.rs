//! [`ShmRing`]: a transport over two single-producer/single-consumer rings in shared memory.
//!
//! What it is: the PE <-> local service path of the runtime design (segment 3). One memfd
//! [`Segment`] holds two rings of fixed-size slots: ring 0 carries packets from the PE to
//! the service, ring 1 from the service to the PE. Each process maps the segment and opens
//! its end: [`ShmRing::pe_side`] or [`ShmRing::service_side`]; each end produces into one
//! ring and consumes from the other, lock-free. The transport is reliable and ordered
//! (every packet arrives exactly once, in order), and a full ring is back-pressure:
//! `send` returns [`TransportError::WouldBlock`] *before* running `fill`.
//!
//! # Layout
//!
//! All integers native-endian (both ends run on one machine); offsets in bytes.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `"GSASRING"` |
//! | 8 | 4 | version (1) |
//! | 12 | 4 | slot count `n` (a power of two, 1..=65536) |
//! | 16 | 4 | slot size `s`: largest packet (1..=16 MiB) |
//! | 20 | 4 | slot stride `t` = `8 + s` rounded up to 64 |
//! | 24 | 8 | total length of the layout |
//! | 32 | 96 | zero |
//! | 128 + r·R | 8 | ring `r`: producer index (packets ever published), on its own 128-byte line |
//! | 128 + r·R + 128 | 8 | ring `r`: consumer index (packets ever consumed), on its own 128-byte line |
//! | 128 + r·R + 256 + i·t | 4 | ring `r`, slot `i`: packet length (1..=`s`) |
//! | ... + 4 | 4 | reserved |
//! | ... + 8 | `s` | packet bytes |
//!
//! with `R = 256 + n·t` the size of one ring. The indices are free-running u64 counters;
//! packet `k` lives in slot `k mod n`. The producer writes the slot, then publishes it with
//! a release store of its index; the consumer reads the producer index with an acquire load,
//! reads the slot, then frees it with a release store of its own index, which the producer
//! reads with an acquire load before reusing the slot. Each side caches the other's index
//! and reloads it only when the ring looks full (producer) or empty (consumer), so an
//! uncontended packet costs one store of a shared line each way.
//!
//! # Trust
//!
//! The service does not trust PEs: its end validates the indices and lengths it reads
//! (a corrupt value fails the ring with `Failed(EPROTO)`, never an out-of-bounds access)
//! and stages packets in private buffers in both directions, so a PE scribbling on the
//! shared slots can only garble its own packets. The PE end trusts the service and works in
//! place: `fill` writes straight into the slot and `recv` lends the slot itself.
//!
//! What it is not: a multi-producer queue (one thread per end, `&mut self`), a notification
//! mechanism (the consumer polls; the runtime's waiter spins, then sleeps with bounded
//! timeouts), or a liveness check (a dead peer shows on the control socket).
//!
//! Thread-safety: an end is `Send` (move it to the thread that uses it) but not `Sync`.
//! The two ends may live in different threads or processes.
//!
//! ```
//! use gsas_transport::shm::Segment;
//! use gsas_transport::shmring::{RingConfig, RingPeer, ShmRing};
//! use gsas_core::transport::{Transport, TransportError};
//!
//! let seg = ShmRing::create("job1-pe0-ring", RingConfig::new(2, 64))?;
//! // The PE maps the same file (in real use from the descriptor the service passes it).
//! let pe_map = Segment::map(seg.try_clone_fd()?, "ring (PE side)")?;
//! let mut service = ShmRing::service_side(seg)?;
//! let mut pe = ShmRing::pe_side(pe_map)?;
//!
//! pe.send(RingPeer, 4, |b| b.copy_from_slice(b"req1")).unwrap();
//! pe.send(RingPeer, 4, |b| b.copy_from_slice(b"req2")).unwrap();
//! assert_eq!(pe.send(RingPeer, 4, |_| ()), Err(TransportError::WouldBlock)); // two slots
//! assert_eq!(service.recv(|_, d| d.to_vec()).unwrap(), Some(b"req1".to_vec()));
//! service.send(RingPeer, 3, |b| b.copy_from_slice(b"ack")).unwrap();
//! assert_eq!(pe.recv(|_, d| d.to_vec()).unwrap(), Some(b"ack".to_vec()));
//! # Ok::<(), gsas_transport::shm::ShmError>(())
//! ```

use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering as Mo};

use gsas_core::transport::{Capabilities, Ordering, Transport, TransportError};

use crate::shm::{Segment, ShmError};

/// The magic at offset 0.
pub const RING_MAGIC: [u8; 8] = *b"GSASRING";
/// The layout version.
pub const RING_VERSION: u32 = 1;
/// Most slots per ring.
pub const MAX_SLOTS: u32 = 1 << 16;
/// Largest slot size.
pub const MAX_SLOT_SIZE: u32 = 16 << 20;

/// Distance between fields written by different sides (two 64-byte lines, so that the
/// adjacent-line prefetcher of x86 does not couple them either).
const LINE: usize = 128;
/// Bytes in front of the packet in a slot: length and reserved.
const SLOT_HEADER: usize = 8;

mod field {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const SLOTS: usize = 12;
    pub const SLOT_SIZE: usize = 16;
    pub const STRIDE: usize = 20;
    pub const TOTAL: usize = 24;
    /// Ring offsets relative to the ring's start.
    pub const PRODUCER: usize = 0;
    pub const CONSUMER: usize = super::LINE;
    pub const SLOTS_START: usize = 2 * super::LINE;
}

/// Shape of the rings: slots per ring and the largest packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Slots per ring: a power of two in `1..=65536`.
    pub slots: u32,
    /// Largest packet in bytes (`1..=16 MiB`); also the transport MTU.
    pub slot_size: u32,
}

impl RingConfig {
    /// A configuration with `slots` slots of `slot_size` bytes per ring.
    pub const fn new(slots: u32, slot_size: u32) -> Self {
        RingConfig { slots, slot_size }
    }

    /// Bytes between the starts of two slots.
    pub const fn stride(&self) -> usize {
        (SLOT_HEADER + self.slot_size as usize).div_ceil(64) * 64
    }

    /// Bytes of one ring: two index lines and the slots.
    pub const fn ring_len(&self) -> usize {
        2 * LINE + self.slots as usize * self.stride()
    }

    /// Bytes of the whole layout (header and two rings): the segment size.
    pub const fn segment_len(&self) -> usize {
        LINE + 2 * self.ring_len()
    }

    /// Checks the ranges.
    ///
    /// Errors: [`ShmError::Invalid`] naming the bad field.
    pub fn validate(&self) -> Result<(), ShmError> {
        if !self.slots.is_power_of_two() || self.slots > MAX_SLOTS {
            return Err(ShmError::invalid(
                "ring slot count",
                format!("{} is not a power of two in 1..={MAX_SLOTS}", self.slots),
            ));
        }
        if self.slot_size == 0 || self.slot_size > MAX_SLOT_SIZE {
            return Err(ShmError::invalid(
                "ring slot size",
                format!("{} is not in 1..={MAX_SLOT_SIZE}", self.slot_size),
            ));
        }
        Ok(())
    }
}

impl Default for RingConfig {
    /// 128 slots of 8 KiB: 1 MiB per direction.
    fn default() -> Self {
        RingConfig::new(128, 8192)
    }
}

/// The one peer of a ring end: the other end. Converts to peer index 0, so a ring can sit
/// under layers keyed by a dense index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RingPeer;

impl From<RingPeer> for usize {
    fn from(_: RingPeer) -> usize {
        0
    }
}

/// Which end of the rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Produces into ring 0, consumes ring 1; works in place.
    Pe,
    /// Produces into ring 1, consumes ring 0; validates and stages.
    Service,
}

/// Counters of one ring end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Packets sent.
    pub sent: u64,
    /// Packets received.
    pub received: u64,
    /// `send` calls refused because the ring was full.
    pub full: u64,
}

/// One ring as seen by one end.
#[derive(Debug)]
struct RingView {
    /// Start of the ring in the mapping.
    base: *mut u8,
    /// Our own index (producer index when producing, consumer index when consuming).
    mine: u64,
    /// The last value read of the other side's index.
    theirs: u64,
}

/// One end of a pair of shared-memory rings; see the [module docs](self).
#[derive(Debug)]
pub struct ShmRing {
    seg: Segment,
    side: Side,
    config: RingConfig,
    stride: usize,
    tx: RingView,
    rx: RingView,
    /// Private copy of packets (service side only).
    staging: Option<Box<[u8]>>,
    /// Set when the other end wrote an impossible index or length.
    broken: bool,
    stats: RingStats,
}

// SAFETY: the raw pointers point into `seg`'s mapping, which the value owns and which is
// valid from any thread; an end has no thread affinity.
unsafe impl Send for ShmRing {}

/// An error for a layout that does not match.
fn bad_layout(seg: &Segment, reason: String) -> ShmError {
    ShmError::invalid(format!("ring segment {:?}", seg.name()), reason)
}

impl ShmRing {
    /// Creates a memfd segment named `name` holding two empty rings of shape `config`.
    ///
    /// Errors: [`ShmError::Invalid`] for a bad configuration, [`ShmError::Os`] if the
    /// segment cannot be created.
    pub fn create(name: &str, config: RingConfig) -> Result<Segment, ShmError> {
        config.validate()?;
        let seg = Segment::create(name, config.segment_len())?;
        // A fresh memfd reads as zeros: indices start at 0. Write the header.
        seg.write(field::MAGIC, &RING_MAGIC)?;
        seg.write(field::VERSION, &RING_VERSION.to_ne_bytes())?;
        seg.write(field::SLOTS, &config.slots.to_ne_bytes())?;
        seg.write(field::SLOT_SIZE, &config.slot_size.to_ne_bytes())?;
        seg.write(field::STRIDE, &(config.stride() as u32).to_ne_bytes())?;
        seg.write(field::TOTAL, &(config.segment_len() as u64).to_ne_bytes())?;
        Ok(seg)
    }

    /// Opens the service's end of the rings in `seg` (taking ownership of the mapping).
    ///
    /// Errors: [`ShmError::Invalid`] if the segment does not hold a valid ring layout.
    pub fn service_side(seg: Segment) -> Result<ShmRing, ShmError> {
        Self::open(seg, Side::Service)
    }

    /// Opens the PE's end of the rings in `seg` (taking ownership of the mapping).
    ///
    /// Errors: [`ShmError::Invalid`] if the segment does not hold a valid ring layout.
    pub fn pe_side(seg: Segment) -> Result<ShmRing, ShmError> {
        Self::open(seg, Side::Pe)
    }

    fn open(seg: Segment, side: Side) -> Result<ShmRing, ShmError> {
        if seg.len() < LINE {
            return Err(bad_layout(
                &seg,
                format!("{} bytes hold no header", seg.len()),
            ));
        }
        let mut header = [0u8; 32];
        seg.read(0, &mut header)?;
        let u32_at = |at: usize| u32::from_ne_bytes(header[at..at + 4].try_into().expect("4"));
        if header[..8] != RING_MAGIC {
            return Err(bad_layout(&seg, "no ring magic".into()));
        }
        let version = u32_at(field::VERSION);
        if version != RING_VERSION {
            return Err(bad_layout(
                &seg,
                format!("layout version {version}, expected {RING_VERSION}"),
            ));
        }
        let config = RingConfig::new(u32_at(field::SLOTS), u32_at(field::SLOT_SIZE));
        config
            .validate()
            .map_err(|e| bad_layout(&seg, e.to_string()))?;
        let stride = u32_at(field::STRIDE) as usize;
        let total = u64::from_ne_bytes(
            header[field::TOTAL..field::TOTAL + 8]
                .try_into()
                .expect("8"),
        );
        if stride != config.stride() || total != config.segment_len() as u64 {
            return Err(bad_layout(
                &seg,
                "stride or total length inconsistent".into(),
            ));
        }
        if seg.len() < config.segment_len() {
            return Err(bad_layout(
                &seg,
                format!(
                    "{} bytes mapped, the layout needs {}",
                    seg.len(),
                    config.segment_len()
                ),
            ));
        }
        let ring = |r: usize| {
            // In bounds: LINE + 2 * ring_len == segment_len <= seg.len().
            seg.as_ptr().wrapping_add(LINE + r * config.ring_len())
        };
        let (tx_ring, rx_ring) = match side {
            Side::Pe => (ring(0), ring(1)),
            Side::Service => (ring(1), ring(0)),
        };
        let mut end = ShmRing {
            side,
            config,
            stride,
            tx: RingView {
                base: tx_ring,
                mine: 0,
                theirs: 0,
            },
            rx: RingView {
                base: rx_ring,
                mine: 0,
                theirs: 0,
            },
            staging: (side == Side::Service)
                .then(|| vec![0u8; config.slot_size as usize].into_boxed_slice()),
            broken: false,
            stats: RingStats::default(),
            seg,
        };
        // Pick up where a previous incarnation of this end left off.
        end.tx.mine = end.index(end.tx.base, field::PRODUCER).load(Mo::Acquire);
        end.tx.theirs = end.index(end.tx.base, field::CONSUMER).load(Mo::Acquire);
        end.rx.mine = end.index(end.rx.base, field::CONSUMER).load(Mo::Acquire);
        end.rx.theirs = end.index(end.rx.base, field::PRODUCER).load(Mo::Acquire);
        let slots = u64::from(config.slots);
        if end.tx.mine.wrapping_sub(end.tx.theirs) > slots
            || end.rx.theirs.wrapping_sub(end.rx.mine) > slots
        {
            return Err(bad_layout(&end.seg, "ring indices out of range".into()));
        }
        Ok(end)
    }

    /// The index word at `offset` of the ring starting at `ring`.
    fn index(&self, ring: *mut u8, offset: usize) -> &AtomicU64 {
        // SAFETY: `ring + offset` is one of the two index words of a ring inside our
        // mapping (validated in `open`), 8-byte aligned (page-aligned mapping, offsets
        // multiples of 128), and the mapping lives as long as `self`. Both ends access
        // the word only atomically.
        unsafe { AtomicU64::from_ptr(ring.add(offset).cast::<u64>()) }
    }

    /// Start of slot `k mod n` of the ring starting at `ring`.
    fn slot(&self, ring: *mut u8, k: u64) -> *mut u8 {
        let i = (k & u64::from(self.config.slots - 1)) as usize;
        // In bounds: i < slots, and the ring's slots lie inside the mapping.
        ring.wrapping_add(field::SLOTS_START + i * self.stride)
    }

    /// Which end this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The ring shape.
    pub fn config(&self) -> RingConfig {
        self.config
    }

    /// The mapped segment.
    pub fn segment(&self) -> &Segment {
        &self.seg
    }

    /// The counters.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Whether a packet is waiting to be received (one acquire load).
    pub fn has_pending(&self) -> bool {
        self.index(self.rx.base, field::PRODUCER).load(Mo::Acquire) != self.rx.mine
    }

    fn fail(&mut self) -> TransportError {
        if !self.broken {
            log::error!(
                "ring {:?}: the other end wrote an impossible index or length; ring closed",
                self.seg.name()
            );
        }
        self.broken = true;
        TransportError::Failed(libc::EPROTO)
    }
}

impl Transport for ShmRing {
    type Peer = RingPeer;

    fn capabilities(&self) -> Capabilities {
        let size = self.config.slot_size as usize;
        Capabilities {
            max_inline: size,
            mtu: size,
            ordering: Ordering::PerPeer,
            reliable: true,
            rdma_put: false,
            rdma_get: false,
            atomic_offload: false,
            atomics_coherent_with_cpu: true,
        }
    }

    /// Writes the packet into the next free slot and publishes it.
    ///
    /// Errors: `TooLarge` above the slot size; `WouldBlock` when the ring is full (`fill`
    /// does not run); `Failed(EPROTO)` once the other end corrupted the ring.
    fn send<R, F>(&mut self, _peer: RingPeer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if self.broken {
            return Err(TransportError::Failed(libc::EPROTO));
        }
        if len > self.config.slot_size as usize {
            return Err(TransportError::TooLarge);
        }
        let slots = u64::from(self.config.slots);
        if self.tx.mine.wrapping_sub(self.tx.theirs) >= slots {
            let consumed = self.index(self.tx.base, field::CONSUMER).load(Mo::Acquire);
            if self.tx.mine.wrapping_sub(consumed) > slots {
                return Err(self.fail());
            }
            self.tx.theirs = consumed;
            if self.tx.mine.wrapping_sub(consumed) >= slots {
                self.stats.full += 1;
                return Err(TransportError::WouldBlock);
            }
        }
        let slot = self.slot(self.tx.base, self.tx.mine);
        // The slot's packet area `slot + 8 .. slot + 8 + len` (len <= slot_size, checked
        // above) has been released by the consumer (we are less than `slots` ahead of its
        // index) and will not be read by it until we publish.
        let result = match self.staging.as_deref_mut() {
            Some(stage) => {
                let result = fill(&mut stage[..len]);
                // SAFETY: copies into the released packet area (see above) from a private
                // buffer of at least `len` bytes.
                unsafe { ptr::copy_nonoverlapping(stage.as_ptr(), slot.add(SLOT_HEADER), len) };
                result
            }
            None => {
                // SAFETY: the released packet area (see above) is ours alone until we
                // publish, so lending it mutably to `fill` is exclusive.
                let buf = unsafe { std::slice::from_raw_parts_mut(slot.add(SLOT_HEADER), len) };
                fill(buf)
            }
        };
        // SAFETY: the length word is the first 4 bytes of the same released slot, 8-byte
        // aligned (slots start at multiples of 64 in a page-aligned mapping).
        unsafe { ptr::write_volatile(slot.cast::<u32>(), len as u32) };
        self.tx.mine = self.tx.mine.wrapping_add(1);
        self.index(self.tx.base, field::PRODUCER)
            .store(self.tx.mine, Mo::Release);
        self.stats.sent += 1;
        Ok(result)
    }

    /// Hands the oldest packet to `f` and frees its slot.
    ///
    /// Errors: `Failed(EPROTO)` once the other end corrupted the ring.
    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(RingPeer, &[u8]) -> R,
    {
        if self.broken {
            return Err(TransportError::Failed(libc::EPROTO));
        }
        if self.rx.mine == self.rx.theirs {
            let published = self.index(self.rx.base, field::PRODUCER).load(Mo::Acquire);
            if published.wrapping_sub(self.rx.mine) > u64::from(self.config.slots) {
                return Err(self.fail());
            }
            self.rx.theirs = published;
            if published == self.rx.mine {
                return Ok(None);
            }
        }
        let slot = self.slot(self.rx.base, self.rx.mine);
        // SAFETY: the slot was published by the producer (its index is past ours, read
        // with acquire), lies in our mapping, and its length word is 4-byte aligned.
        let len = unsafe { ptr::read_volatile(slot.cast::<u32>()) } as usize;
        if len > self.config.slot_size as usize {
            return Err(self.fail());
        }
        let consumed = self.rx.mine.wrapping_add(1);
        let result = if let Some(stage) = self.staging.as_deref_mut() {
            // SAFETY: `slot + 8 .. + len` lies in the published slot (len checked against
            // the slot size); `stage` is private and at least that long.
            unsafe { ptr::copy_nonoverlapping(slot.add(SLOT_HEADER), stage.as_mut_ptr(), len) };
            // The copy is private: free the slot before running `f`.
            self.rx.mine = consumed;
            self.index(self.rx.base, field::CONSUMER)
                .store(consumed, Mo::Release);
            let stage = self.staging.as_deref().unwrap_or_default();
            f(RingPeer, &stage[..len])
        } else {
            // SAFETY: as above; the producer does not touch the slot until we store our
            // index below, after `f` returned, so the bytes do not change while lent.
            let data = unsafe { std::slice::from_raw_parts(slot.add(SLOT_HEADER), len) };
            let result = f(RingPeer, data);
            self.rx.mine = consumed;
            self.index(self.rx.base, field::CONSUMER)
                .store(consumed, Mo::Release);
            result
        };
        self.stats.received += 1;
        Ok(Some(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(config: RingConfig) -> (ShmRing, ShmRing) {
        let seg = ShmRing::create("unit-ring", config).unwrap();
        let other = Segment::map(seg.try_clone_fd().unwrap(), "unit-ring pe").unwrap();
        (
            ShmRing::service_side(seg).unwrap(),
            ShmRing::pe_side(other).unwrap(),
        )
    }

    #[test]
    fn layout_numbers() {
        let c = RingConfig::new(4, 100);
        assert_eq!(c.stride(), 128);
        assert_eq!(c.ring_len(), 256 + 4 * 128);
        assert_eq!(c.segment_len(), 128 + 2 * (256 + 512));
        assert_eq!(RingConfig::new(1, 56).stride(), 64);
        assert_eq!(RingConfig::new(1, 57).stride(), 128);
    }

    #[test]
    fn bad_configs_and_layouts_are_refused() {
        for (slots, size) in [
            (3, 64),
            (0, 64),
            (1 << 17, 64),
            (4, 0),
            (4, MAX_SLOT_SIZE + 1),
        ] {
            let e = ShmRing::create("bad", RingConfig::new(slots, size)).unwrap_err();
            assert!(e.to_string().contains("ring slot"), "{e}");
        }
        let plain = Segment::create("plain", 4096).unwrap();
        let e = ShmRing::pe_side(plain).unwrap_err();
        assert!(e.to_string().contains("no ring magic"), "{e}");
        let seg = ShmRing::create("short", RingConfig::new(4, 64)).unwrap();
        let short = Segment::map_len(seg.try_clone_fd().unwrap(), 256, "short view").unwrap();
        let e = ShmRing::pe_side(short).unwrap_err();
        assert!(e.to_string().contains("256 bytes mapped"), "{e}");
    }

    #[test]
    fn wraps_around_in_both_directions_in_order() {
        let (mut svc, mut pe) = pair(RingConfig::new(4, 64));
        for round in 0u32..50 {
            for k in 0..3u32 {
                let v = round * 3 + k;
                pe.send(RingPeer, 4, |b| b.copy_from_slice(&v.to_le_bytes()))
                    .unwrap();
            }
            for k in 0..3u32 {
                let v = round * 3 + k;
                let got = svc
                    .recv(|_, d| u32::from_le_bytes(d.try_into().unwrap()))
                    .unwrap();
                assert_eq!(got, Some(v));
                svc.send(RingPeer, 1 + k as usize, |b| b.fill(k as u8))
                    .unwrap();
            }
            for k in 0..3u8 {
                assert_eq!(
                    pe.recv(|_, d| d.to_vec()).unwrap(),
                    Some(vec![k; 1 + k as usize])
                );
            }
        }
        assert_eq!(svc.recv(|_, _| ()).unwrap(), None);
        assert_eq!(pe.stats().sent, 150);
        assert_eq!(svc.stats().received, 150);
    }

    #[test]
    fn full_ring_refuses_before_filling_and_frees_after_recv() {
        let (mut svc, mut pe) = pair(RingConfig::new(2, 8));
        pe.send(RingPeer, 8, |b| b.fill(1)).unwrap();
        pe.send(RingPeer, 8, |b| b.fill(2)).unwrap();
        let mut ran = false;
        assert_eq!(
            pe.send(RingPeer, 1, |_| ran = true),
            Err(TransportError::WouldBlock)
        );
        assert!(!ran);
        assert_eq!(pe.stats().full, 1);
        assert_eq!(pe.send(RingPeer, 9, |_| ()), Err(TransportError::TooLarge));
        assert!(svc.has_pending());
        assert_eq!(svc.recv(|_, d| d[0]).unwrap(), Some(1));
        pe.send(RingPeer, 1, |b| b[0] = 3).unwrap();
        assert_eq!(svc.recv(|_, d| d[0]).unwrap(), Some(2));
        assert_eq!(svc.recv(|_, d| d[0]).unwrap(), Some(3));
        assert!(!svc.has_pending());
    }

    #[test]
    fn corrupt_indices_and_lengths_fail_the_service_end() {
        let (mut svc, mut pe) = pair(RingConfig::new(4, 16));
        pe.send(RingPeer, 4, |b| b.fill(0)).unwrap();
        // A hostile PE writes a length beyond the slot size.
        let slot = svc.slot(svc.rx.base, 0);
        // SAFETY: the length word of slot 0 of ring 0, inside the test's own mapping.
        unsafe { ptr::write_volatile(slot.cast::<u32>(), 17) };
        assert_eq!(
            svc.recv(|_, _| ()),
            Err(TransportError::Failed(libc::EPROTO))
        );
        assert_eq!(
            svc.send(RingPeer, 1, |_| ()),
            Err(TransportError::Failed(libc::EPROTO))
        );

        let (mut svc, pe) = pair(RingConfig::new(4, 16));
        pe.index(pe.tx.base, field::PRODUCER)
            .store(1000, Mo::Release);
        assert_eq!(
            svc.recv(|_, _| ()),
            Err(TransportError::Failed(libc::EPROTO))
        );
    }

    #[test]
    fn reopening_an_end_continues_at_the_shared_indices() {
        let seg = ShmRing::create("reopen", RingConfig::new(4, 16)).unwrap();
        let fd = seg.try_clone_fd().unwrap();
        let mut svc = ShmRing::service_side(seg).unwrap();
        {
            let mut pe =
                ShmRing::pe_side(Segment::map(fd.try_clone().unwrap(), "pe1").unwrap()).unwrap();
            pe.send(RingPeer, 1, |b| b[0] = 1).unwrap();
            pe.send(RingPeer, 1, |b| b[0] = 2).unwrap();
        }
        assert_eq!(svc.recv(|_, d| d[0]).unwrap(), Some(1));
        let mut pe = ShmRing::pe_side(Segment::map(fd, "pe2").unwrap()).unwrap();
        pe.send(RingPeer, 1, |b| b[0] = 3).unwrap();
        assert_eq!(svc.recv(|_, d| d[0]).unwrap(), Some(2));
        assert_eq!(svc.recv(|_, d| d[0]).unwrap(), Some(3));
    }

    #[test]
    fn capabilities_are_reliable_and_ordered() {
        let (svc, _pe) = pair(RingConfig::default());
        let c = svc.capabilities();
        assert!(c.reliable);
        assert_eq!(c.ordering, Ordering::PerPeer);
        assert_eq!(c.mtu, 8192);
        assert_eq!(usize::from(RingPeer), 0);
    }
}
