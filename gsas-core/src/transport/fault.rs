//! A fault-injecting wrapper around any transport: drops, duplicates, reorders and delays.
//!
//! What it is: [`FaultInjector`] wraps a [`Transport`] and, driven by its own seeded PRNG
//! (splitmix64), decides for every packet, on the send path and/or the receive path, whether
//! to drop it, duplicate it, hold it back behind later packets (reordering) or hold it for a
//! fixed time (delay). Runs with the same seed and the same calls make the same decisions.
//! [`FaultInjector::stats`] reports what it did. After smoltcp's `phy::FaultInjector`.
//!
//! Decisions, tried in this order with independent probabilities (parts per million):
//! * **drop**: the packet is discarded (on send, `fill` still runs on a scratch slot);
//! * **duplicate**: the packet passes now and a copy is held back, to be released after
//!   `0..=reorder_window` later packets in the same direction;
//! * **reorder**: the packet is held back and released after `1..=reorder_window` later
//!   packets in the same direction, or after `reorder_max_hold_ns`, whichever comes first, so a
//!   packet is displaced by at most `reorder_window` positions and is never stranded when
//!   traffic stops;
//! * **delay**: the packet is held back for `delay_ns`.
//!
//! Held packets live in caller-provided storage: up to `H` of them (fewer if the storage is
//! smaller), each in a slot of the inner MTU. When no slot is free the packet simply passes
//! (counted as `hold_overflows`), so the injector never adds back-pressure of its own. Held
//! send-side packets are released by [`Transport::poll`], [`Transport::flush`] and later
//! sends; held receive-side packets by later [`Transport::recv`] calls. Time is the last
//! `now_ns` given to `poll`.
//!
//! What it is not: a corrupter (bytes are never changed) or a bandwidth model. The wrapped
//! transport's [`Capabilities`] are passed through, except that the result always reports
//! `reliable: false` and [`Ordering::Unordered`].
//!
//! Thread-safety: a plain single-owner value; `Send` when the inner transport and its peer
//! type are.

use heapless::Vec;

use super::{Capabilities, Ordering, Transport, TransportError};

/// One million: a probability of 1.0 in parts per million.
pub const PPM: u32 = 1_000_000;

/// Most packets one `recv` call pulls from the inner transport while all are dropped or held.
const RECV_BUDGET: usize = 64;

/// What to inject. Probabilities are in parts per million (10% is `100_000`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FaultConfig {
    /// Seed of the PRNG.
    pub seed: u64,
    /// Probability that a packet is dropped.
    pub drop_ppm: u32,
    /// Probability that a packet is duplicated.
    pub duplicate_ppm: u32,
    /// Probability that a packet is held back behind later packets.
    pub reorder_ppm: u32,
    /// Largest displacement, in packets, of a reordered or duplicated packet (at least 1 when
    /// `reorder_ppm > 0`).
    pub reorder_window: u32,
    /// Longest time a reordered packet is held when no later packets come.
    pub reorder_max_hold_ns: u64,
    /// Probability that a packet is delayed by `delay_ns`.
    pub delay_ppm: u32,
    /// Added delay of delayed packets.
    pub delay_ns: u64,
    /// Inject faults on packets sent through the injector.
    pub on_send: bool,
    /// Inject faults on packets received through the injector.
    pub on_recv: bool,
}

impl FaultConfig {
    /// No faults at all (every probability zero), on both paths, with the given seed.
    pub const fn none(seed: u64) -> Self {
        FaultConfig {
            seed,
            drop_ppm: 0,
            duplicate_ppm: 0,
            reorder_ppm: 0,
            reorder_window: 1,
            reorder_max_hold_ns: 100_000,
            delay_ppm: 0,
            delay_ns: 0,
            on_send: true,
            on_recv: true,
        }
    }
}

/// Why a [`FaultInjector`] could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FaultConfigError {
    /// A probability is above [`PPM`].
    ProbabilityAboveOne(u32),
    /// `reorder_ppm` or `duplicate_ppm` is non-zero but `reorder_window` is zero.
    ZeroReorderWindow,
    /// The storage does not hold one packet of the inner MTU (a scratch slot is needed).
    StorageTooSmall {
        /// Bytes needed (the inner MTU).
        needed: usize,
        /// Bytes given.
        got: usize,
    },
}

impl core::fmt::Display for FaultConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FaultConfigError::ProbabilityAboveOne(ppm) => {
                write!(f, "fault probability {ppm} ppm is above {PPM} ppm")
            }
            FaultConfigError::ZeroReorderWindow => {
                f.write_str("reordering or duplication needs a reorder window of at least 1")
            }
            FaultConfigError::StorageTooSmall { needed, got } => write!(
                f,
                "fault injector storage of {got} bytes is smaller than one packet ({needed})"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FaultConfigError {}

/// Counts of what a [`FaultInjector`] did, over both directions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FaultStats {
    /// Packets passed on untouched.
    pub passed: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Packets held back behind later ones.
    pub reordered: u64,
    /// Packets delayed.
    pub delayed: u64,
    /// Packets that passed untouched because no hold slot was free.
    pub hold_overflows: u64,
    /// Held packets released.
    pub released: u64,
}

/// Which path a held packet is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Send,
    Recv,
}

/// A countdown value that never reaches zero: release by time only.
const NO_COUNTDOWN: u32 = u32::MAX;

/// A packet held back.
#[derive(Clone, Copy, Debug)]
struct Held<P> {
    path: Path,
    peer: P,
    slot: usize,
    len: usize,
    /// Packets still to pass in the same direction before release.
    countdown: u32,
    /// Release no later than this time.
    release_at: u64,
}

impl<P> Held<P> {
    fn due(&self, now: u64) -> bool {
        self.countdown == 0 || now >= self.release_at
    }
}

/// What happens to one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Pass,
    Drop,
    /// Pass now and hold a copy with this countdown.
    Duplicate(u32),
    /// Hold with this countdown and release time.
    Hold {
        countdown: u32,
        release_at: u64,
        reorder: bool,
    },
}

/// Everything but the inner transport, so that closures given to it can borrow this.
struct Faults<'a, P, const H: usize> {
    config: FaultConfig,
    rng: u64,
    now: u64,
    mtu: usize,
    /// Slot 0 is the scratch slot for dropped packets; slots 1.. hold packets.
    storage: &'a mut [u8],
    slots: usize,
    used: [bool; H],
    held: Vec<Held<P>, H>,
    stats: FaultStats,
    /// An error of the inner transport met while releasing held packets inside a `send`
    /// that itself succeeded; returned by the next `poll` or `flush`.
    deferred: Option<TransportError>,
}

impl<P: Copy, const H: usize> Faults<'_, P, H> {
    fn next_u64(&mut self) -> u64 {
        // splitmix64.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn chance(&mut self, ppm: u32) -> bool {
        ppm != 0 && self.next_u64() % u64::from(PPM) < u64::from(ppm)
    }

    /// A uniform value in `lo..=hi`.
    fn between(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi - lo) + 1;
        lo + (self.next_u64() % span) as u32
    }

    fn decide(&mut self) -> Decision {
        let c = self.config;
        if self.chance(c.drop_ppm) {
            Decision::Drop
        } else if self.chance(c.duplicate_ppm) {
            Decision::Duplicate(self.between(0, c.reorder_window))
        } else if self.chance(c.reorder_ppm) {
            Decision::Hold {
                countdown: self.between(1, c.reorder_window),
                release_at: self.now.saturating_add(c.reorder_max_hold_ns),
                reorder: true,
            }
        } else if self.chance(c.delay_ppm) {
            Decision::Hold {
                countdown: NO_COUNTDOWN,
                release_at: self.now.saturating_add(c.delay_ns),
                reorder: false,
            }
        } else {
            Decision::Pass
        }
    }

    fn slot_mut(&mut self, slot: usize) -> &mut [u8] {
        let start = slot * self.mtu;
        &mut self.storage[start..start + self.mtu]
    }

    fn slot(&self, slot: usize) -> &[u8] {
        let start = slot * self.mtu;
        &self.storage[start..start + self.mtu]
    }

    /// A free hold slot (never the scratch slot 0), or `None`.
    fn alloc(&mut self) -> Option<usize> {
        if self.held.is_full() {
            return None;
        }
        let free = (1..self.slots).find(|&s| !self.used[s - 1])?;
        self.used[free - 1] = true;
        Some(free)
    }

    fn free(&mut self, slot: usize) {
        self.used[slot - 1] = false;
    }

    /// Records a held packet whose bytes are already in `slot`.
    fn hold(&mut self, path: Path, peer: P, slot: usize, len: usize, countdown: u32, at: u64) {
        let held = Held {
            path,
            peer,
            slot,
            len,
            countdown,
            release_at: at,
        };
        // `alloc` checked there is room.
        if self.held.push(held).is_err() {
            self.free(slot);
        }
    }

    /// One more packet went out on `path`: move the countdowns of held packets on it.
    fn tick(&mut self, path: Path) {
        for h in self.held.iter_mut().filter(|h| h.path == path) {
            if h.countdown != NO_COUNTDOWN && h.countdown > 0 {
                h.countdown -= 1;
            }
        }
    }

    /// Index of the oldest held packet on `path` that is due now.
    fn due(&self, path: Path) -> Option<usize> {
        let now = self.now;
        self.held.iter().position(|h| h.path == path && h.due(now))
    }

    /// Receive path: decides on one packet the inner transport delivered. Returns `f`'s
    /// result if the packet is handed to the caller now.
    fn on_received<R, F>(&mut self, peer: P, data: &[u8], f: &mut Option<F>) -> Option<R>
    where
        F: FnOnce(P, &[u8]) -> R,
    {
        let decision = if self.config.on_recv {
            self.decide()
        } else {
            Decision::Pass
        };
        match decision {
            Decision::Pass => {}
            Decision::Drop => {
                self.stats.dropped += 1;
                return None;
            }
            Decision::Duplicate(countdown) => match self.alloc() {
                Some(slot) => {
                    self.slot_mut(slot)[..data.len()].copy_from_slice(data);
                    let at = self.now.saturating_add(self.config.reorder_max_hold_ns);
                    self.hold(Path::Recv, peer, slot, data.len(), countdown, at);
                    self.stats.duplicated += 1;
                }
                None => self.stats.hold_overflows += 1,
            },
            Decision::Hold {
                countdown,
                release_at,
                reorder,
            } => match self.alloc() {
                Some(slot) => {
                    self.slot_mut(slot)[..data.len()].copy_from_slice(data);
                    self.hold(Path::Recv, peer, slot, data.len(), countdown, release_at);
                    if reorder {
                        self.stats.reordered += 1;
                    } else {
                        self.stats.delayed += 1;
                    }
                    return None;
                }
                None => self.stats.hold_overflows += 1,
            },
        }
        self.stats.passed += 1;
        self.tick(Path::Recv);
        f.take().map(|f| f(peer, data))
    }
}

/// A transport wrapper that injects faults; see the [module docs](self).
///
/// `H` is the largest number of packets held back at once.
pub struct FaultInjector<'a, T: Transport, const H: usize = 16> {
    inner: T,
    faults: Faults<'a, T::Peer, H>,
}

impl<'a, T: Transport, const H: usize> FaultInjector<'a, T, H> {
    /// Wraps `inner`. `storage` holds a scratch slot plus up to `H` held packets, each of the
    /// inner MTU; at least one MTU is required.
    ///
    /// Errors: [`FaultConfigError`] for probabilities above one, a zero reorder window with
    /// reordering or duplication on, or storage below one MTU.
    pub fn new(
        inner: T,
        config: FaultConfig,
        storage: &'a mut [u8],
    ) -> Result<Self, FaultConfigError> {
        for ppm in [
            config.drop_ppm,
            config.duplicate_ppm,
            config.reorder_ppm,
            config.delay_ppm,
        ] {
            if ppm > PPM {
                return Err(FaultConfigError::ProbabilityAboveOne(ppm));
            }
        }
        if config.reorder_window == 0 && (config.reorder_ppm > 0 || config.duplicate_ppm > 0) {
            return Err(FaultConfigError::ZeroReorderWindow);
        }
        let mtu = inner.capabilities().mtu.max(1);
        if storage.len() < mtu {
            return Err(FaultConfigError::StorageTooSmall {
                needed: mtu,
                got: storage.len(),
            });
        }
        let slots = (storage.len() / mtu).min(H + 1);
        Ok(FaultInjector {
            inner,
            faults: Faults {
                config,
                rng: config.seed,
                now: 0,
                mtu,
                storage,
                slots,
                used: [false; H],
                held: Vec::new(),
                stats: FaultStats::default(),
                deferred: None,
            },
        })
    }

    /// What the injector has done so far.
    pub fn stats(&self) -> FaultStats {
        self.faults.stats
    }

    /// Packets currently held back (both directions).
    pub fn held(&self) -> usize {
        self.faults.held.len()
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The wrapped transport, mutably (bypassing the injector).
    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Unwraps the inner transport; held packets are discarded.
    pub fn into_inner(self) -> T {
        self.inner
    }

    /// Sends every due send-side held packet, oldest first, until the inner transport pushes
    /// back.
    fn release_sends(&mut self) -> Result<(), TransportError> {
        while let Some(i) = self.faults.due(Path::Send) {
            let h = self.faults.held[i];
            let faults = &mut self.faults;
            match self.inner.send(h.peer, h.len, |buf| {
                buf.copy_from_slice(&faults.slot(h.slot)[..h.len]);
            }) {
                Ok(()) => {}
                Err(TransportError::WouldBlock) => return Ok(()),
                Err(e) => {
                    self.faults.held.remove(i);
                    self.faults.free(h.slot);
                    return Err(e);
                }
            }
            self.faults.held.remove(i);
            self.faults.free(h.slot);
            self.faults.stats.released += 1;
            self.faults.tick(Path::Send);
        }
        Ok(())
    }
}

impl<T: Transport, const H: usize> Transport for FaultInjector<'_, T, H> {
    type Peer = T::Peer;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reliable: false,
            ordering: Ordering::Unordered,
            ..self.inner.capabilities()
        }
    }

    fn send<R, F>(&mut self, peer: T::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if len > self.faults.mtu {
            return Err(TransportError::TooLarge);
        }
        let decision = if self.faults.config.on_send {
            self.faults.decide()
        } else {
            Decision::Pass
        };
        let result = match decision {
            Decision::Pass => self.inner.send(peer, len, fill)?,
            Decision::Drop => {
                let result = fill(&mut self.faults.slot_mut(0)[..len]);
                self.faults.stats.dropped += 1;
                return Ok(result);
            }
            Decision::Duplicate(countdown) => {
                let copy = self.faults.alloc();
                let faults = &mut self.faults;
                let sent = self.inner.send(peer, len, |buf| {
                    let result = fill(buf);
                    if let Some(slot) = copy {
                        faults.slot_mut(slot)[..len].copy_from_slice(buf);
                    }
                    result
                });
                match (sent, copy) {
                    (Ok(result), Some(slot)) => {
                        let at = faults.now.saturating_add(faults.config.reorder_max_hold_ns);
                        faults.hold(Path::Send, peer, slot, len, countdown, at);
                        faults.stats.duplicated += 1;
                        result
                    }
                    (Ok(result), None) => {
                        faults.stats.hold_overflows += 1;
                        result
                    }
                    (Err(e), copy) => {
                        if let Some(slot) = copy {
                            faults.free(slot);
                        }
                        return Err(e);
                    }
                }
            }
            Decision::Hold {
                countdown,
                release_at,
                reorder,
            } => match self.faults.alloc() {
                Some(slot) => {
                    let result = fill(&mut self.faults.slot_mut(slot)[..len]);
                    self.faults
                        .hold(Path::Send, peer, slot, len, countdown, release_at);
                    if reorder {
                        self.faults.stats.reordered += 1;
                    } else {
                        self.faults.stats.delayed += 1;
                    }
                    return Ok(result);
                }
                None => {
                    self.faults.stats.hold_overflows += 1;
                    self.inner.send(peer, len, fill)?
                }
            },
        };
        self.faults.stats.passed += 1;
        self.faults.tick(Path::Send);
        if let Err(e) = self.release_sends() {
            self.faults.deferred = Some(e);
        }
        Ok(result)
    }

    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(T::Peer, &[u8]) -> R,
    {
        if let Some(i) = self.faults.due(Path::Recv) {
            let h = self.faults.held.remove(i);
            let result = f(h.peer, &self.faults.slot(h.slot)[..h.len]);
            self.faults.free(h.slot);
            self.faults.stats.released += 1;
            self.faults.tick(Path::Recv);
            return Ok(Some(result));
        }
        let mut f = Some(f);
        for _ in 0..RECV_BUDGET {
            let faults = &mut self.faults;
            match self
                .inner
                .recv(|peer, data| faults.on_received(peer, data, &mut f))?
            {
                None => return Ok(None),
                Some(Some(result)) => return Ok(Some(result)),
                Some(None) => {}
            }
            // The packet was dropped or held; a held one may already be due (zero delay).
            if let Some(i) = self.faults.due(Path::Recv) {
                let h = self.faults.held.remove(i);
                let result = f
                    .take()
                    .map(|f| f(h.peer, &self.faults.slot(h.slot)[..h.len]));
                self.faults.free(h.slot);
                self.faults.stats.released += 1;
                self.faults.tick(Path::Recv);
                return Ok(result);
            }
        }
        Ok(None)
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        if let Some(e) = self.faults.deferred.take() {
            return Err(e);
        }
        self.release_sends()?;
        self.inner.flush()
    }

    fn poll(&mut self, now_ns: u64) -> Result<(), TransportError> {
        self.faults.now = self.faults.now.max(now_ns);
        if let Some(e) = self.faults.deferred.take() {
            return Err(e);
        }
        self.inner.poll(now_ns)?;
        self.release_sends()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::loopback::{LoopbackConfig, LoopbackHub};

    #[test]
    fn rejects_bad_configurations() {
        let mut hub_storage = vec![0u8; 2 * (64 + 8) * 4];
        let hub = LoopbackHub::<2>::new(LoopbackConfig::new(64), &mut hub_storage).unwrap();
        let mut storage = [0u8; 64];
        let config = FaultConfig {
            drop_ppm: PPM + 1,
            ..FaultConfig::none(1)
        };
        let ep = hub.endpoint(0).unwrap();
        assert_eq!(
            FaultInjector::<_, 4>::new(ep, config, &mut storage).err(),
            Some(FaultConfigError::ProbabilityAboveOne(PPM + 1))
        );
        let config = FaultConfig {
            reorder_ppm: 1,
            reorder_window: 0,
            ..FaultConfig::none(1)
        };
        let ep = hub.endpoint(0).unwrap();
        assert_eq!(
            FaultInjector::<_, 4>::new(ep, config, &mut storage).err(),
            Some(FaultConfigError::ZeroReorderWindow)
        );
        let ep = hub.endpoint(0).unwrap();
        assert_eq!(
            FaultInjector::<_, 4>::new(ep, FaultConfig::none(1), &mut storage[..63]).err(),
            Some(FaultConfigError::StorageTooSmall {
                needed: 64,
                got: 63
            })
        );
    }

    #[test]
    fn splitmix_is_deterministic_and_within_bounds() {
        let mut hub_storage = vec![0u8; 2 * (64 + 8) * 4];
        let hub = LoopbackHub::<2>::new(LoopbackConfig::new(64), &mut hub_storage).unwrap();
        let mut s1 = [0u8; 64];
        let mut s2 = [0u8; 64];
        let mut a =
            FaultInjector::<_, 4>::new(hub.endpoint(0).unwrap(), FaultConfig::none(7), &mut s1)
                .unwrap();
        let mut b =
            FaultInjector::<_, 4>::new(hub.endpoint(1).unwrap(), FaultConfig::none(7), &mut s2)
                .unwrap();
        for _ in 0..1000 {
            let x = a.faults.between(3, 9);
            assert_eq!(x, b.faults.between(3, 9));
            assert!((3..=9).contains(&x));
        }
        let hits = (0..100_000).filter(|_| a.faults.chance(100_000)).count();
        assert!(
            (9_000..11_000).contains(&hits),
            "10% chance hit {hits} times"
        );
        assert!(!a.faults.chance(0));
        assert!(a.faults.chance(PPM));
    }
}
