//! The [`Reliable`] transport: sending, receiving, acknowledging and timers.
//!
//! Kept as one file because it is one state machine: the send, receive, acknowledgement and
//! timer paths all update the same `Core` (windows, peers, pool), and read best side by side.
//!
//! See the [module docs](super) for the protocol and its guarantees. Internally the layer is
//! split into the inner transport and a `Core` holding everything else, so that closures
//! handed to the inner transport can update the core while the transport is borrowed.

use crate::transport::{Capabilities, Ordering, Transport, TransportError};

use super::frame::{
    self, FLAG_REFUSED, Frame, FrameRepr, HEADER_LEN, MAX_PACKET_LEN, PACKET_PREFIX_LEN, Packets,
    RefusalReason, RefusalRepr,
};
use super::index::{Admission, DenseIndex, PeerIndex};
use super::peer::{
    CacheEntry, CacheState, EVENT_REFUSED, EVENT_RESTARTED, EVENT_UNREACHABLE, INITIAL_CWND, NEVER,
    NO_SLOT, PeerSlot,
};
use super::pool::Pool;
use super::rtt::RttEstimator;
use super::seq::Seq;
use super::storage::Storage;
use super::window::{MAX_WINDOW, RxVerdict, RxWindow, TxSlot, TxState, TxWindow};
use super::{Config, ConfigError, PeerEvent, Refusal, Stats};

/// Refusals sent per [`REFUSAL_WINDOW_NS`] at most.
const REFUSALS_PER_WINDOW: u32 = 64;
/// See [`REFUSALS_PER_WINDOW`].
const REFUSAL_WINDOW_NS: u64 = 100_000_000;
/// Challenges sent per [`REFUSAL_WINDOW_NS`] at most: a budget of their own, so that a flood
/// of refused frames does not leave a real sender's first frame unanswered (a challenge
/// is a 40-byte header, no larger than the frame it answers: no amplification).
const CHALLENGES_PER_WINDOW: u32 = 1024;

/// Most frames one `recv` call takes from the inner transport without finding a packet to
/// deliver (acks, duplicates, garbage) before it returns `Ok(None)`.
const RECV_BUDGET: usize = 64;

/// Data frames received without acking before an ack goes out at once: a quarter of the
/// window, at least [`ACK_EVERY_MIN`] and at most [`ACK_EVERY_MAX`] (see [`ack_every`]).
const ACK_EVERY_MIN: u32 = 4;
/// See [`ACK_EVERY_MIN`].
const ACK_EVERY_MAX: u32 = 8;

/// The immediate-ack threshold for a `window` of frames: with the runtime's 32-frame
/// window a one-way stream (bulk writes, whose fragment ACKs wait) is acknowledged every 8
/// frames, so a 1 MiB put of 18 fragments costs its sender about 3 acknowledgement
/// datagrams instead of 5; smaller windows keep an ack every 4 frames, so that a sender
/// never waits long for window space.
const fn ack_every(window: usize) -> u32 {
    let quarter = (window / 4) as u32;
    if quarter < ACK_EVERY_MIN {
        ACK_EVERY_MIN
    } else if quarter > ACK_EVERY_MAX {
        ACK_EVERY_MAX
    } else {
        quarter
    }
}

/// What to do right after a received frame, once the inner transport is free again.
#[derive(Clone, Copy, Debug)]
struct Action<P> {
    slot: usize,
    ack_now: bool,
    resend: Option<Seq>,
    /// Send a refusal to this peer (not in the table), echoing its epoch.
    refuse: Option<(P, u64, Refusal)>,
}

impl<P> Action<P> {
    const NONE: Action<P> = Action {
        slot: 0,
        ack_now: false,
        resend: None,
        refuse: None,
    };
}

/// Everything except the inner transport.
struct Core<'a, P, const W: usize, I> {
    config: Config,
    window: usize,
    caps: Capabilities,
    /// Payload bytes of one of our frames.
    payload_cap: usize,
    index: I,
    peers: Storage<'a, PeerSlot<P, W>>,
    pool: Pool<'a>,
    /// Packets of a received frame not yet handed out: `rx_buf[start..end]` from `peer`.
    rx_buf: Storage<'a, u8>,
    rx_pending: Option<(P, usize, usize)>,
    now: u64,
    /// No timer expires before this time.
    next_wake: u64,
    open_frames: usize,
    /// Open frames holding only lazy packets (`hold_until != NEVER`): `flush` leaves them.
    held_frames: usize,
    active_head: u32,
    /// Event bits set over all peers.
    pending_events: usize,
    /// A fatal inner error met where it could not be returned; reported by `poll`/`flush`.
    fatal: Option<TransportError>,
    /// The first sequence number of every fresh slot.
    first: Seq,
    /// Start of the current refusal window and refusals sent in it.
    refusal_window: (u64, u32),
    /// The same for challenges ([`CHALLENGES_PER_WINDOW`]).
    challenge_window: (u64, u32),
    stats: Stats,
}

/// A reliable transport over `T`; see the [module docs](super).
///
/// `W` (1..=64) is the largest window in frames per peer and the size of the per-peer reply
/// cache; `I` maps peers to slots of the peer table ([`DenseIndex`] for integer peers).
pub struct Reliable<'a, T: Transport, const W: usize, I = DenseIndex> {
    inner: T,
    core: Core<'a, T::Peer, W, I>,
}

impl<'a, T: Transport, const W: usize, I: PeerIndex<T::Peer>> Reliable<'a, T, W, I> {
    const WINDOW_FITS: () = assert!(W >= 1 && W <= MAX_WINDOW, "the window W must be in 1..=64");

    /// Builds the layer with a default-constructed peer index.
    ///
    /// `peers` is the peer table (one slot per peer the layer may talk to); `buffers` holds
    /// the receive buffer and the frame pool (size it with [`buffer_len`](super::buffer_len)).
    /// Each is a [`Storage`]: a slice, array or `Vec` lent as `&mut` (the layer borrows it
    /// for `'a`) or, with the `std` feature, a `Vec` or `Box<[_]>` given by value (the layer
    /// owns it and frees it when dropped; `'a` may then be `'static`).
    ///
    /// Errors: [`ConfigError`] for a zero epoch, a window outside `1..=W`, a frame size
    /// above the inner MTU or below 43 bytes, inconsistent timers, an empty peer table, or
    /// a buffer smaller than the receive buffer plus one frame.
    pub fn new(
        inner: T,
        config: Config,
        peers: impl Into<Storage<'a, PeerSlot<T::Peer, W>>>,
        buffers: impl Into<Storage<'a, u8>>,
    ) -> Result<Self, ConfigError>
    where
        I: Default,
    {
        Self::with_index(inner, config, peers, buffers, I::default())
    }

    /// Builds the layer with the given peer index; see [`Reliable::new`].
    pub fn with_index(
        inner: T,
        config: Config,
        peers: impl Into<Storage<'a, PeerSlot<T::Peer, W>>>,
        buffers: impl Into<Storage<'a, u8>>,
        index: I,
    ) -> Result<Self, ConfigError> {
        let () = Self::WINDOW_FITS;
        let (mut peers, buffers) = (peers.into(), buffers.into());
        if config.epoch == 0 {
            return Err(ConfigError::ZeroEpoch);
        }
        let window = config.window.unwrap_or(W);
        if window == 0 || window > W {
            return Err(ConfigError::BadWindow { window, max: W });
        }
        let inner_caps = inner.capabilities();
        let frame_size = config.max_frame.unwrap_or(inner_caps.mtu);
        if frame_size > inner_caps.mtu {
            return Err(ConfigError::FrameAboveMtu {
                frame: frame_size,
                mtu: inner_caps.mtu,
            });
        }
        if frame_size < HEADER_LEN + PACKET_PREFIX_LEN + 1 {
            return Err(ConfigError::FrameTooSmall(frame_size));
        }
        let timers_ok = config.ack_delay_ns > 0
            && config.ack_delay_ns < config.min_rto_ns
            && config.min_rto_ns <= config.initial_rto_ns
            && config.initial_rto_ns <= config.max_rto_ns
            && config.deadline_ns > 0;
        if !timers_ok {
            return Err(ConfigError::BadTimers);
        }
        if peers.is_empty() || peers.len() >= NO_SLOT as usize {
            return Err(ConfigError::BadPeerTable(peers.len()));
        }
        let payload_cap = frame_size - HEADER_LEN;
        let rx_len = inner_caps.mtu - HEADER_LEN;
        let needed = rx_len + payload_cap;
        if buffers.len() < needed {
            return Err(ConfigError::BufferTooSmall {
                needed,
                got: buffers.len(),
            });
        }
        let (rx_buf, pool_buf) = buffers.into_split(rx_len);
        let first = Seq(config.epoch as u32);
        for slot in peers.iter_mut() {
            slot.reset(first, config.initial_rto_ns);
        }
        let mtu = (payload_cap - PACKET_PREFIX_LEN).min(MAX_PACKET_LEN);
        let caps = Capabilities {
            max_inline: inner_caps.max_inline.min(mtu),
            mtu,
            ordering: Ordering::Unordered,
            reliable: true,
            rdma_put: false,
            rdma_get: false,
            atomic_offload: false,
            atomics_coherent_with_cpu: inner_caps.atomics_coherent_with_cpu,
        };
        Ok(Reliable {
            inner,
            core: Core {
                config,
                window,
                caps,
                payload_cap,
                index,
                peers,
                pool: Pool::new(pool_buf, payload_cap),
                rx_buf,
                rx_pending: None,
                now: 0,
                next_wake: NEVER,
                open_frames: 0,
                held_frames: 0,
                active_head: NO_SLOT,
                pending_events: 0,
                fatal: None,
                first,
                refusal_window: (0, 0),
                challenge_window: (0, 0),
                stats: Stats::default(),
            },
        })
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.core.stats
    }

    /// This endpoint's epoch.
    pub fn epoch(&self) -> u64 {
        self.core.config.epoch
    }

    /// The last time given to `poll` or [`set_now`](Reliable::set_now).
    pub fn now(&self) -> u64 {
        self.core.now
    }

    /// Advances the layer's clock to `now_ns` (never backwards) without driving timers or
    /// touching the inner transport: one store, for callers about to `send` after time
    /// passed since their last `poll`.
    ///
    /// `send` stamps the frames it closes and transmits with the clock, so frames sent long
    /// after the last `poll` would look as old as that poll: their retransmission timeout
    /// would already have expired at the next `poll` (a spurious retransmission), and after
    /// an idle spell longer than `deadline_ns` the peer would be declared unreachable at
    /// once.
    pub fn set_now(&mut self, now_ns: u64) {
        self.core.now = self.core.now.max(now_ns);
    }

    /// The earliest time (on the clock given to `poll`) at which `poll` may have timer
    /// work: a retransmission, a deadline, a delayed ack, a held lazy frame, or a send the
    /// inner transport pushed back; `None` when no timer is pending. It may be earlier
    /// than needed (freeing frames does not push it back), never later: an owner that
    /// sleeps until then (or until a frame arrives) misses nothing, and one whose only
    /// work is a closed peer's backed-off retransmissions sleeps between them.
    pub fn next_timer(&self) -> Option<u64> {
        (self.core.next_wake != NEVER).then_some(self.core.next_wake)
    }

    /// Frame buffers in the pool, and how many are free.
    pub fn pool_usage(&self) -> (u32, u32) {
        (self.core.pool.capacity(), self.core.pool.available())
    }

    /// Frames in `peer`'s send window: the open frame, frames not yet acknowledged, and
    /// acknowledged ones still behind an unacknowledged one. 0 for a peer without a slot.
    pub fn in_flight(&self, peer: T::Peer) -> usize {
        let c = &self.core;
        c.index
            .find(peer, c.peers.len())
            .map_or(0, |s| c.peers[s].tx.len())
    }

    /// Whether `peer` has been declared unreachable.
    pub fn is_failed(&self, peer: T::Peer) -> bool {
        let c = &self.core;
        c.index
            .find(peer, c.peers.len())
            .is_some_and(|s| c.peers[s].failed)
    }

    /// Sends the acknowledgement owed to `peer` now instead of after `ack_delay_ns` (or
    /// with the next frame to it): for a receiver that has just *applied* what the peer
    /// sent and knows the peer waits for that (a point-to-point put whose sender is in
    /// `shmem_quiet`). `Ok(false)` when nothing is owed, the peer has no slot, or the
    /// inner transport pushed back (the ack then stays owed and the next `poll` sends it).
    ///
    /// Errors: a failed inner transport.
    pub fn acknowledge_now(&mut self, peer: T::Peer) -> Result<bool, TransportError> {
        let c = &self.core;
        let Some(slot) = c.index.find(peer, c.peers.len()) else {
            return Ok(false);
        };
        let p = &c.peers[slot];
        if p.ack_due == NEVER && p.rx_unacked == 0 {
            return Ok(false);
        }
        self.send_ack(slot)
    }

    /// The peers currently declared unreachable (scans the peer table).
    pub fn failed_peers(&self) -> impl Iterator<Item = T::Peer> + '_ {
        self.core
            .peers
            .iter()
            .filter(|p| p.failed)
            .filter_map(|p| p.addr)
    }

    /// The next unreported peer event, if any. O(1) when there is none; scans the peer table
    /// otherwise.
    pub fn next_event(&mut self) -> Option<PeerEvent<T::Peer>> {
        let c = &mut self.core;
        if c.pending_events == 0 {
            return None;
        }
        for p in c.peers.iter_mut().filter(|p| p.events != 0) {
            let Some(addr) = p.addr else {
                continue;
            };
            c.pending_events -= 1;
            if p.events & EVENT_REFUSED != 0 {
                p.events &= !EVENT_REFUSED;
                if let Some(r) = p.refusal {
                    return Some(PeerEvent::Refused(addr, r));
                }
                continue;
            }
            if p.events & EVENT_UNREACHABLE != 0 {
                p.events &= !EVENT_UNREACHABLE;
                return Some(PeerEvent::Unreachable(addr));
            }
            p.events &= !EVENT_RESTARTED;
            return Some(PeerEvent::Restarted(addr));
        }
        c.pending_events = 0;
        None
    }

    /// Lets `send` reach a peer declared unreachable again (its sequence numbers continue;
    /// the peer skips the abandoned ones).
    ///
    /// Errors: [`TransportError::UnknownPeer`] if the peer has no slot.
    pub fn reset_peer(&mut self, peer: T::Peer) -> Result<(), TransportError> {
        let c = &mut self.core;
        let slot = c
            .index
            .find(peer, c.peers.len())
            .ok_or(TransportError::UnknownPeer)?;
        let p = &mut c.peers[slot];
        p.failed = false;
        p.rtt = RttEstimator::new(c.config.initial_rto_ns);
        Ok(())
    }

    /// Frees `peer`'s slot at once (e.g. its job ended): frames to it are abandoned,
    /// unreported events dropped, and the index told ([`PeerIndex::release`]). Returns
    /// whether the peer had a slot. If the peer sends again it is admitted afresh.
    pub fn release_peer(&mut self, peer: T::Peer) -> bool {
        let c = &mut self.core;
        match c.index.find(peer, c.peers.len()) {
            Some(slot) => {
                c.release_slot(slot, peer);
                true
            }
            None => false,
        }
    }

    /// Closes `peer` for new data, keeping its slot: TCP's TIME_WAIT for a peer whose
    /// session the owner ended (a service's job ended on its node). Until the slot is
    /// freed ([`release_peer`](Self::release_peer), [`release_silent`](Self::release_silent),
    /// or evicted for a newcomer), frames from the peer are taken as before except that a
    /// *new* data frame (one never delivered) is neither delivered nor acknowledged but
    /// answered with a refusal naming `refusal` (its sender learns that what it carries
    /// was never delivered). Duplicates of frames delivered before are still acknowledged
    /// and answered from the reply cache, acknowledgements still free our frames, and our
    /// frames to the peer are still sent and retransmitted; one still unacknowledged at
    /// the deadline is dropped without an event (the peer most likely left and its last
    /// acknowledgement was lost; [`Stats::closed_expired`](super::Stats)). Returns whether
    /// the peer has a slot. See "Closing a peer" in the [module docs](super).
    pub fn close_peer(&mut self, peer: T::Peer, refusal: Refusal) -> bool {
        let c = &mut self.core;
        match c.index.find(peer, c.peers.len()) {
            Some(slot) => {
                c.peers[slot].closed = Some(refusal);
                true
            }
            None => false,
        }
    }

    /// Stops (`paused`) or resumes taking new data frames from `peer`: while paused, a
    /// data frame not received before is dropped unacknowledged (`Stats::paused_drops`),
    /// so the sender's window fills and it retransmits later; duplicates are still
    /// acknowledged and answered from the reply cache. For a receiver whose answers to
    /// `peer` cannot leave (its window is full: the peer does not acknowledge) and pile
    /// up: the pile stops growing. Returns whether the peer has a slot.
    pub fn pause_receive(&mut self, peer: T::Peer, paused: bool) -> bool {
        let c = &mut self.core;
        match c.index.find(peer, c.peers.len()) {
            Some(slot) => {
                c.peers[slot].rx_paused = paused;
                true
            }
            None => false,
        }
    }

    /// Whether `peer` has a slot closed by [`close_peer`](Self::close_peer).
    pub fn is_closed(&self, peer: T::Peer) -> bool {
        let c = &self.core;
        c.index
            .find(peer, c.peers.len())
            .is_some_and(|s| c.peers[s].closed.is_some())
    }

    /// Frees the slots of idle peers (nothing in flight or owed, no unreported event) not
    /// heard from for `silent_ns` or longer, for which `pick` says yes. Scans the table;
    /// returns how many were freed. Choose `silent_ns` above `deadline_ns` (see "Admission,
    /// refusals and freeing slots" in the [module docs](super)).
    pub fn release_silent(
        &mut self,
        silent_ns: u64,
        mut pick: impl FnMut(T::Peer) -> bool,
    ) -> usize {
        let c = &mut self.core;
        let mut freed = 0;
        for slot in 0..c.peers.len() {
            let p = &c.peers[slot];
            let Some(addr) = p.addr else {
                continue;
            };
            if p.is_releasable() && c.now.saturating_sub(p.last_heard) >= silent_ns && pick(addr) {
                c.release_slot(slot, addr);
                freed += 1;
            }
        }
        freed
    }

    /// The peer index.
    pub fn index(&self) -> &I {
        &self.core.index
    }

    /// The peer index, mutably (to change what it admits).
    pub fn index_mut(&mut self) -> &mut I {
        &mut self.core.index
    }

    /// The inner transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The inner transport, mutably. Sending or receiving on it directly bypasses the layer.
    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// `send` and `send_lazy`: appends a packet to the open frame of `peer`.
    fn append<R, F>(
        &mut self,
        peer: T::Peer,
        len: usize,
        fill: F,
        lazy: bool,
    ) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let c = &mut self.core;
        let slot = match c.index.find(peer, c.peers.len()) {
            Some(s) => s,
            None => c.admit(peer).map_err(|_| TransportError::UnknownPeer)?,
        };
        if c.peers[slot].failed {
            return Err(TransportError::Unreachable);
        }
        if len > c.caps.mtu {
            return Err(TransportError::TooLarge);
        }
        c.peers[slot].addr = Some(peer);
        let need = PACKET_PREFIX_LEN + len;
        if c.peers[slot].open && c.peers[slot].open_len + need > c.payload_cap {
            self.close_and_transmit(slot)?;
        }
        let c = &mut self.core;
        if !c.peers[slot].open {
            c.open_frame(slot)?;
            if lazy {
                let hold_until = c.now.saturating_add(c.config.ack_delay_ns);
                c.peers[slot].hold_until = hold_until;
                c.held_frames += 1;
                c.next_wake = c.next_wake.min(hold_until);
            }
        } else if !lazy {
            c.unhold(slot);
        }
        let p = &mut c.peers[slot];
        let seq = p.tx.next.sub(1);
        let block = p.tx.slot(seq).block;
        let at = p.open_len;
        let room = &mut c.pool.block_mut(block)[at..];
        let Some(dst) = frame::emit_packet_prefix(room, len) else {
            // Cannot happen: the frame has room for `need` bytes and len <= MAX_PACKET_LEN.
            return Err(TransportError::TooLarge);
        };
        let result = fill(dst);
        p.open_len += need;
        if p.awaiting != 0 {
            let mut bits = p.awaiting;
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                p.cache[i].state = CacheState::Answered;
                p.cache[i].mine = seq;
                bits &= bits - 1;
            }
            p.awaiting = 0;
        }
        c.stats.packets_sent += 1;
        if c.payload_cap - p.open_len <= PACKET_PREFIX_LEN {
            // The packet is in the frame now and will be (re)sent; a fatal inner error
            // must not make the caller believe otherwise, so it is reported by poll/flush.
            if let Err(e) = self.close_and_transmit(slot) {
                self.core.fatal = Some(e);
            }
        }
        Ok(result)
    }

    /// Sends frame `seq` to the peer in `slot` with a fresh header (first transmission or
    /// retransmission). `Ok(false)` when the inner transport pushed back or the peer failed.
    fn transmit(&mut self, slot: usize, seq: Seq) -> Result<bool, TransportError> {
        let Self { inner, core } = self;
        let Some(addr) = core.peers[slot].addr else {
            return Ok(false);
        };
        let tx = *core.peers[slot].tx.slot(seq);
        let repr = core.header(slot, Some(seq));
        let payload = &core.pool.block(tx.block)[..tx.len as usize];
        let mut head = [0u8; HEADER_LEN];
        repr.emit(&mut Frame::new_unchecked(&mut head[..]));
        // Gathered: a transport that can send from two buffers (UDP) does not copy the
        // kept payload into its own datagram buffer first.
        let sent = inner.send_parts(addr, &head, payload);
        if core.after_send(slot, sent)? {
            core.on_transmitted(slot, seq);
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Sends a pure ack to the peer in `slot`.
    fn send_ack(&mut self, slot: usize) -> Result<bool, TransportError> {
        let Self { inner, core } = self;
        let Some(addr) = core.peers[slot].addr else {
            return Ok(false);
        };
        let repr = core.header(slot, None);
        let sent = inner.send(addr, HEADER_LEN, |buf| {
            repr.emit(&mut Frame::new_unchecked(&mut *buf));
        });
        if core.after_send(slot, sent)? {
            core.stats.acks_sent += 1;
            core.acked_now(slot);
            Ok(true)
        } else {
            // Owed still: the next poll tries again (unless the peer just failed).
            let now = core.now;
            let p = &mut core.peers[slot];
            if !p.failed {
                p.ack_due = p.ack_due.min(now);
                core.activate(slot);
            }
            Ok(false)
        }
    }

    /// Closes the open frame of `slot`, if any, and tries to transmit it.
    fn close_and_transmit(&mut self, slot: usize) -> Result<(), TransportError> {
        if let Some(seq) = self.core.close_open(slot) {
            self.transmit(slot, seq)?;
        }
        Ok(())
    }

    /// Does what a received frame asked for once the inner transport is free.
    fn after_frame(&mut self, action: Action<T::Peer>) {
        if let Some((peer, their_epoch, refusal)) = action.refuse {
            let repr = RefusalRepr {
                epoch: self.core.config.epoch,
                dest_epoch: their_epoch,
                reason: refusal.reason,
                in_use: refusal.in_use,
                limit: refusal.limit,
            };
            let sent = self.inner.send(peer, HEADER_LEN, |buf| {
                repr.emit(&mut Frame::new_unchecked(&mut *buf));
            });
            // A refusal is a courtesy: one that cannot go out now is not retried.
            if sent.is_ok() {
                self.core.stats.refusals_sent += 1;
            }
            return;
        }
        let mut result = Ok(());
        if let Some(seq) = action.resend {
            match self.transmit(action.slot, seq) {
                Ok(true) => {
                    self.core.stats.reply_cache_hits += 1;
                    // The resent frame carried the ack.
                    return;
                }
                Ok(false) => {}
                Err(e) => result = Err(e),
            }
        }
        if result.is_ok() && action.ack_now && self.core.peers[action.slot].hold_until != NEVER {
            // Lazy packets are waiting for company: the ack is their company.
            if let Some(seq) = self.core.close_open(action.slot) {
                match self.transmit(action.slot, seq) {
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(e) => result = Err(e),
                }
            }
        }
        if result.is_ok() && action.ack_now {
            result = self.send_ack(action.slot).map(|_| ());
        }
        if let Err(e) = result {
            self.core.fatal = Some(e);
        }
    }

    /// Works through the active peers: closes and transmits open frames, and when `timers`
    /// is set also retransmits, declares peers unreachable and sends delayed acks.
    fn walk(&mut self, timers: bool) -> Result<(), TransportError> {
        if timers {
            self.core.next_wake = NEVER;
        }
        let mut prev = NO_SLOT;
        let mut cur = self.core.active_head;
        while cur != NO_SLOT {
            let slot = cur as usize;
            let next = self.core.peers[slot].next_active;
            self.service(slot, timers)?;
            let c = &mut self.core;
            if c.peers[slot].is_idle() {
                if prev == NO_SLOT {
                    c.active_head = next;
                } else {
                    c.peers[prev as usize].next_active = next;
                }
                c.peers[slot].active = false;
                c.peers[slot].next_active = NO_SLOT;
            } else {
                prev = cur;
            }
            cur = next;
        }
        Ok(())
    }

    fn service(&mut self, slot: usize, timers: bool) -> Result<(), TransportError> {
        let now = self.core.now;
        let mut wake = NEVER;
        let p = &self.core.peers[slot];
        if p.hold_until != NEVER && now < p.hold_until && now < p.ack_due {
            // Lazy packets only, and no ack owed yet: wait for company until the bound.
            wake = p.hold_until;
        } else {
            self.close_and_transmit(slot)?;
        }
        let (deadline, max_rto) = (self.core.config.deadline_ns, self.core.config.max_rto_ns);
        let mut blocked = false;
        let mut seq = self.core.peers[slot].tx.base;
        while seq != self.core.peers[slot].tx.next {
            let p = &self.core.peers[slot];
            let tx = *p.tx.slot(seq);
            let fail_at = tx.closed_at.saturating_add(deadline);
            match tx.state {
                TxState::Free | TxState::Open => {}
                TxState::Queued | TxState::InFlight if timers && now >= fail_at => {
                    self.core.fail_peer(slot);
                    return Ok(());
                }
                TxState::Queued => {
                    if blocked || !self.transmit(slot, seq)? {
                        blocked = true;
                        wake = now;
                    }
                    wake = wake.min(fail_at);
                }
                TxState::InFlight if timers => {
                    let mut rto_at = tx
                        .last_sent
                        .saturating_add(p.rtt.timeout(tx.retries, max_rto));
                    if now >= rto_at {
                        // A timeout: the peer goes back to a few frames at a time.
                        let p = &mut self.core.peers[slot];
                        p.cwnd = p.cwnd.min(INITIAL_CWND);
                        if !blocked && self.transmit(slot, seq)? {
                            rto_at = now.saturating_add(
                                self.core.peers[slot]
                                    .rtt
                                    .timeout(tx.retries.saturating_add(1), max_rto),
                            );
                        } else {
                            blocked = true;
                            rto_at = now;
                        }
                    }
                    wake = wake.min(rto_at).min(fail_at);
                }
                TxState::InFlight => {}
            }
            if self.core.peers[slot].failed {
                return Ok(());
            }
            seq = seq.add(1);
        }
        if timers {
            let due = self.core.peers[slot].ack_due;
            if due <= now && !self.send_ack(slot)? {
                wake = now;
            }
            wake = wake.min(self.core.peers[slot].ack_due);
        }
        self.core.next_wake = self.core.next_wake.min(wake);
        Ok(())
    }
}

impl<P: Copy + Eq + core::fmt::Debug, const W: usize, I: PeerIndex<P>> Core<'_, P, W, I> {
    /// The header of a frame to the peer in `slot`, with our current ack for it.
    fn header(&self, slot: usize, seq: Option<Seq>) -> FrameRepr {
        let p = &self.peers[slot];
        FrameRepr {
            epoch: self.config.epoch,
            dest_epoch: p.their_epoch,
            seq,
            base: p.tx.base,
            ack: (p.their_epoch != 0).then(|| p.rx.ack()),
            // Echoed on data frames until the peer answers.
            cookie: (p.cookie != 0).then_some(p.cookie),
        }
    }

    /// Classifies the result of an inner send: `Ok(true)` sent, `Ok(false)` not sent (busy
    /// or the peer failed), `Err` for a failed transport.
    fn after_send(
        &mut self,
        slot: usize,
        sent: Result<(), TransportError>,
    ) -> Result<bool, TransportError> {
        match sent {
            Ok(()) => Ok(true),
            Err(TransportError::WouldBlock) => {
                self.next_wake = self.now;
                Ok(false)
            }
            Err(TransportError::Failed(code)) => {
                // Try again at the next poll or flush, in case the transport recovers.
                self.next_wake = self.now;
                Err(TransportError::Failed(code))
            }
            Err(_) => {
                // The inner transport cannot reach this peer at all.
                self.fail_peer(slot);
                Ok(false)
            }
        }
    }

    /// Bookkeeping after frame `seq` of `slot` went out.
    fn on_transmitted(&mut self, slot: usize, seq: Seq) {
        let now = self.now;
        let max_rto = self.config.max_rto_ns;
        let p = &mut self.peers[slot];
        let had_ack = p.their_epoch != 0;
        let tx = p.tx.slot_mut(seq);
        if tx.state == TxState::Queued {
            tx.state = TxState::InFlight;
            self.stats.frames_sent += 1;
        } else {
            tx.retries = tx.retries.saturating_add(1);
            self.stats.retransmissions += 1;
        }
        tx.last_sent = now;
        let rto_at = now.saturating_add(p.rtt.timeout(tx.retries, max_rto));
        self.next_wake = self.next_wake.min(rto_at);
        if had_ack {
            self.acked_now(slot);
        }
        self.activate(slot);
    }

    /// The peer in `slot` just got our current ack.
    fn acked_now(&mut self, slot: usize) {
        let p = &mut self.peers[slot];
        p.ack_due = NEVER;
        p.rx_unacked = 0;
    }

    /// Makes an acknowledgement to the peer in `slot` due now (sent at the next poll).
    fn ack_due_now(&mut self, slot: usize) {
        let now = self.now;
        let p = &mut self.peers[slot];
        p.ack_due = p.ack_due.min(now);
        self.next_wake = self.next_wake.min(now);
        self.activate(slot);
    }

    /// Puts `slot` on the active list.
    fn activate(&mut self, slot: usize) {
        let p = &mut self.peers[slot];
        if !p.active {
            p.active = true;
            p.next_active = self.active_head;
            self.active_head = slot as u32;
        }
    }

    fn raise(&mut self, slot: usize, event: u8) {
        let p = &mut self.peers[slot];
        if p.events & event == 0 {
            p.events |= event;
            self.pending_events += 1;
        }
    }

    /// Frees every frame of `slot` (sent, queued or open).
    fn abandon_frames(&mut self, slot: usize) {
        let p = &mut self.peers[slot];
        let pool = &mut self.pool;
        let mut freed = 0isize;
        p.tx.abandon(|tx| {
            pool.release(tx.block);
            freed += 1;
        });
        if let (Some(peer), true) = (p.addr, freed > 0) {
            self.index.frames_held(peer, -freed);
        }
        let p = &mut self.peers[slot];
        if p.open {
            p.open = false;
            p.open_len = 0;
            self.open_frames -= 1;
        }
        self.unhold(slot);
    }

    /// The open frame of `slot` (if held) goes out at the next `flush` like any other.
    fn unhold(&mut self, slot: usize) {
        let p = &mut self.peers[slot];
        if p.hold_until != NEVER {
            p.hold_until = NEVER;
            self.held_frames -= 1;
        }
    }

    /// Declares the peer in `slot` unreachable.
    fn fail_peer(&mut self, slot: usize) {
        self.fail_peer_with(slot, EVENT_UNREACHABLE);
    }

    /// Fails the peer in `slot` and raises `event` for it. A closed peer that would be
    /// declared unreachable only loses its frames, without an event (see
    /// [`Reliable::close_peer`]).
    fn fail_peer_with(&mut self, slot: usize, event: u8) {
        if self.peers[slot].failed {
            return;
        }
        if self.peers[slot].closed.is_some() && event == EVENT_UNREACHABLE {
            self.abandon_frames(slot);
            self.stats.closed_expired += 1;
            // `walk` may have skipped this slot's delayed ack when the deadline struck.
            self.next_wake = self.next_wake.min(self.peers[slot].ack_due);
            return;
        }
        self.abandon_frames(slot);
        let p = &mut self.peers[slot];
        p.failed = true;
        p.ack_due = NEVER;
        p.clear_cache();
        self.stats.peers_failed += 1;
        self.raise(slot, event);
    }

    /// Admits `peer`, which has no slot, and gives it one (see [`PeerIndex::admit`]).
    fn admit(&mut self, peer: P) -> Result<usize, Refusal> {
        let cap = self.peers.len();
        match self.index.admit(peer, cap) {
            Admission::Admit => {}
            Admission::Refuse(r) => return Err(r),
            Admission::Replace {
                victim,
                quiet_ns,
                refusal,
            } => {
                let now = self.now;
                let slot = self
                    .index
                    .find(victim, cap)
                    .filter(|&s| {
                        let p = &self.peers[s];
                        p.is_releasable() || now.saturating_sub(p.last_heard) >= quiet_ns
                    })
                    .ok_or(refusal)?;
                self.release_slot(slot, victim);
            }
        }
        let full = Refusal {
            reason: RefusalReason::TableFull,
            in_use: u32::try_from(cap).unwrap_or(u32::MAX),
            limit: u32::try_from(cap).unwrap_or(u32::MAX),
        };
        let slot = self.index.slot(peer, cap).ok_or(full)?;
        let p = &mut self.peers[slot];
        p.addr = Some(peer);
        p.last_heard = self.now;
        Ok(slot)
    }

    /// Frees `slot` (held by `peer`): abandons its frames, drops its events, resets it
    /// for the next peer and tells the index.
    fn release_slot(&mut self, slot: usize, peer: P) {
        self.abandon_frames(slot);
        let initial_rto = self.config.initial_rto_ns;
        let p = &mut self.peers[slot];
        self.pending_events -= p.events.count_ones() as usize;
        // The active list is threaded through the slots: keep the links, `walk` unlinks
        // the slot once it is idle (a reset slot is).
        let (active, next) = (p.active, p.next_active);
        p.reset(self.first, initial_rto);
        p.active = active;
        p.next_active = next;
        if self.rx_pending.is_some_and(|(from, _, _)| from == peer) {
            self.rx_pending = None;
        }
        self.index.release(peer);
        self.stats.peers_released += 1;
    }

    /// Counts a frame refused a slot, and decides whether to answer it.
    fn on_refused(&mut self, peer: P, repr: &FrameRepr, refusal: Refusal, action: &mut Action<P>) {
        self.stats.unknown_peers += 1;
        let s = &mut self.stats;
        match refusal.reason {
            RefusalReason::UnknownJob => s.refused_unknown_job += 1,
            RefusalReason::JobFull => s.refused_job_full += 1,
            RefusalReason::HostFull => s.refused_host_full += 1,
            RefusalReason::JobEnded => s.refused_job_ended += 1,
            RefusalReason::UserFull => s.refused_user_full += 1,
            RefusalReason::JobReclaimed => s.refused_job_reclaimed += 1,
            RefusalReason::TableFull | RefusalReason::Unknown(_) | RefusalReason::Challenge => {
                s.refused_table_full += 1
            }
        }
        self.answer_refusal(peer, repr, refusal, action);
    }

    /// Answers the data frame `repr` of `peer` with `refusal` (at most
    /// [`REFUSALS_PER_WINDOW`] per [`REFUSAL_WINDOW_NS`]); other frames get no answer.
    fn answer_refusal(
        &mut self,
        peer: P,
        repr: &FrameRepr,
        refusal: Refusal,
        action: &mut Action<P>,
    ) {
        if repr.seq.is_none() {
            return;
        }
        let ((start, sent), most) = if refusal.reason == RefusalReason::Challenge {
            (&mut self.challenge_window, CHALLENGES_PER_WINDOW)
        } else {
            (&mut self.refusal_window, REFUSALS_PER_WINDOW)
        };
        if self.now >= start.saturating_add(REFUSAL_WINDOW_NS) {
            *start = self.now;
            *sent = 0;
        }
        if *sent < most {
            *sent += 1;
            action.refuse = Some((peer, repr.epoch, refusal));
        }
    }

    /// Whether `peer` (no slot) must first echo a cookie ([`PeerIndex::challenge`]): then
    /// its frame is dropped, counted, and a data frame answered with the challenge.
    fn challenged(&mut self, peer: P, repr: &FrameRepr, action: &mut Action<P>) -> bool {
        let Some(cookie) = self
            .index
            .challenge(peer, repr.epoch, repr.cookie, self.now)
        else {
            return false;
        };
        self.stats.challenged += 1;
        if repr.cookie.is_some() {
            self.stats.bad_cookies += 1;
        }
        self.answer_refusal(peer, repr, Refusal::challenge(cookie), action);
        true
    }

    /// A refusal arrived from `peer`: fail it if it answers something we sent; a
    /// challenge instead has our frames go out again at once, echoing its cookie.
    fn on_refusal(&mut self, peer: P, r: RefusalRepr) {
        let slot = self.index.find(peer, self.peers.len());
        let Some(slot) = slot.filter(|&s| {
            let p = &self.peers[s];
            r.dest_epoch == self.config.epoch && !p.failed && (!p.tx.is_empty() || p.open)
        }) else {
            self.stats.refusals_ignored += 1;
            return;
        };
        if r.reason == RefusalReason::Challenge {
            let cookie = Refusal::challenge(0);
            let cookie = Refusal {
                in_use: r.in_use,
                limit: r.limit,
                reason: cookie.reason,
            }
            .cookie();
            self.stats.challenges_received += 1;
            let p = &mut self.peers[slot];
            if cookie == 0 {
                return;
            }
            // Echoed until a frame of the peer arrives (also when it knew us before and
            // forgot us: a slot freed for silence).
            p.cookie = cookie;
            // Every frame in flight is due again now.
            let mut seq = p.tx.base;
            while seq != p.tx.next {
                let tx = p.tx.slot_mut(seq);
                if tx.state == TxState::InFlight {
                    tx.last_sent = 0;
                }
                seq = seq.add(1);
            }
            self.next_wake = self.now;
            self.activate(slot);
            return;
        }
        self.stats.refusals_received += 1;
        self.peers[slot].refusal = Some(Refusal {
            reason: r.reason,
            in_use: r.in_use,
            limit: r.limit,
        });
        self.fail_peer_with(slot, EVENT_REFUSED);
    }

    /// The peer in `slot` restarted with `repr.epoch`: start over with it.
    fn restart_peer(&mut self, slot: usize, repr: &FrameRepr) {
        self.abandon_frames(slot);
        let initial_rto = self.config.initial_rto_ns;
        let p = &mut self.peers[slot];
        p.their_epoch = repr.epoch;
        p.rx = RxWindow::new(repr.base);
        p.failed = false;
        p.clear_cache();
        p.rtt = RttEstimator::new(initial_rto);
        p.cwnd = INITIAL_CWND;
        p.ack_due = NEVER;
        p.rx_unacked = 0;
        self.stats.peer_resets += 1;
        self.raise(slot, EVENT_RESTARTED);
    }

    /// Opens a new frame for `slot`.
    fn open_frame(&mut self, slot: usize) -> Result<(), TransportError> {
        let p = &mut self.peers[slot];
        if p.tx.len() >= self.window.min(usize::from(p.cwnd)) {
            self.stats.window_full += 1;
            return Err(TransportError::WouldBlock);
        }
        let peer = p.addr;
        let pool_size = self.pool.capacity() as usize;
        if let Some(peer) = peer {
            if !self.index.may_take_frame(peer, pool_size) {
                self.stats.pool_share_full += 1;
                return Err(TransportError::WouldBlock);
            }
        }
        let Some(block) = self.pool.alloc() else {
            self.stats.pool_empty += 1;
            return Err(TransportError::WouldBlock);
        };
        if let Some(peer) = peer {
            self.index.frames_held(peer, 1);
        }
        let p = &mut self.peers[slot];
        let entry = TxSlot {
            state: TxState::Open,
            block,
            ..TxSlot::EMPTY
        };
        if p.tx.push(self.window, entry).is_none() {
            // Unreachable given the check above; keep the pool consistent regardless.
            self.pool.release(block);
            if let Some(peer) = peer {
                self.index.frames_held(peer, -1);
            }
            self.stats.window_full += 1;
            return Err(TransportError::WouldBlock);
        }
        p.open = true;
        p.open_len = 0;
        self.open_frames += 1;
        self.activate(slot);
        Ok(())
    }

    /// Closes the open frame of `slot`; returns its sequence number.
    fn close_open(&mut self, slot: usize) -> Option<Seq> {
        let now = self.now;
        let p = &mut self.peers[slot];
        if !p.open {
            return None;
        }
        let seq = p.tx.next.sub(1);
        let len = p.open_len as u32;
        let tx = p.tx.slot_mut(seq);
        tx.state = TxState::Queued;
        tx.len = len;
        tx.closed_at = now;
        p.open = false;
        p.open_len = 0;
        self.open_frames -= 1;
        self.unhold(slot);
        Some(seq)
    }

    /// Hands the next buffered packet to `f`.
    fn deliver_buffered<R, F>(&mut self, f: &mut Option<F>) -> Option<R>
    where
        F: FnOnce(P, &[u8]) -> R,
    {
        let (peer, start, end) = self.rx_pending?;
        let mut packets = Packets::new(&self.rx_buf[start..end]);
        let Some(packet) = packets.next() else {
            self.rx_pending = None;
            return None;
        };
        let rest = packets.rest().len();
        self.rx_pending = (rest > 0).then_some((peer, end - rest, end));
        let f = f.take()?;
        self.stats.packets_delivered += 1;
        Some(f(peer, packet))
    }

    /// Processes one frame from the inner transport; returns `f`'s result if a packet was
    /// delivered. Follow-up sends are left in `action`.
    fn on_frame<R, F>(
        &mut self,
        peer: P,
        bytes: &[u8],
        f: &mut Option<F>,
        action: &mut Action<P>,
    ) -> Option<R>
    where
        F: FnOnce(P, &[u8]) -> R,
    {
        let Ok(frame) = Frame::new_checked(bytes) else {
            self.stats.bad_frames += 1;
            return None;
        };
        if frame.flags() == FLAG_REFUSED {
            match RefusalRepr::parse(&frame) {
                Ok(r) => self.on_refusal(peer, r),
                Err(_) => self.stats.bad_frames += 1,
            }
            return None;
        }
        let Ok(repr) = FrameRepr::parse(&frame) else {
            self.stats.bad_frames += 1;
            return None;
        };
        if frame.payload().len() > self.rx_buf.len() {
            self.stats.bad_frames += 1;
            return None;
        }
        let slot = match self.index.find(peer, self.peers.len()) {
            Some(s) => s,
            None if self.challenged(peer, &repr, action) => return None,
            None => match self.admit(peer) {
                Ok(s) => s,
                Err(refusal) => {
                    self.on_refused(peer, &repr, refusal, action);
                    return None;
                }
            },
        };
        self.stats.frames_received += 1;
        action.slot = slot;
        let first = self.first;
        let p = &mut self.peers[slot];
        p.addr = Some(peer);
        p.last_heard = self.now;
        // It answers: it took our frame, no more cookie to echo.
        p.cookie = 0;

        // Sender epoch: first contact, restart, or a stale frame of an old incarnation.
        if p.their_epoch == 0 {
            p.their_epoch = repr.epoch;
            p.rx = RxWindow::new(repr.base);
            // A peer that knows this incarnation but has a fresh slot here (its old one was
            // freed) tells us with its ack how far it got: continue our numbering above it,
            // so that it takes our next frame as new.
            let fresh = p.tx.is_empty() && !p.open && p.tx.next == first;
            if fresh && repr.dest_epoch == self.config.epoch {
                if let Some(ack) = repr.ack {
                    p.tx = TxWindow::new(ack.cum.add(1));
                }
            }
        } else if repr.epoch < p.their_epoch {
            self.stats.stale_frames += 1;
            return None;
        } else if repr.epoch > p.their_epoch {
            self.restart_peer(slot, &repr);
        }
        // Receiver epoch: drop frames meant for an earlier incarnation of this endpoint,
        // and tell the sender who we are now.
        if repr.dest_epoch != 0 && repr.dest_epoch != self.config.epoch {
            self.stats.stale_frames += 1;
            action.ack_now = true;
            return None;
        }
        if let Some(ack) = repr.ack {
            self.process_ack(slot, ack);
        }
        let p = &mut self.peers[slot];
        p.rx.advance_to(repr.base);
        let seq = repr.seq?;
        if f.is_none() {
            // Cannot deliver (never happens: recv returns after a delivery); let the sender
            // retransmit rather than record a frame nobody saw.
            return None;
        }
        if p.rx_paused && matches!(p.rx.peek(seq), RxVerdict::New { .. }) {
            // Paused: not taken, not acknowledged; the sender tries again later.
            self.stats.paused_drops += 1;
            return None;
        }
        if let (Some(refusal), RxVerdict::New { .. }) = (p.closed, p.rx.peek(seq)) {
            // Closed: a frame never delivered stays undelivered and unacknowledged, and
            // its sender learns why (duplicates of delivered ones go on below).
            self.stats.closed_refused += 1;
            self.answer_refusal(peer, &repr, refusal, action);
            return None;
        }
        match p.rx.accept(seq) {
            RxVerdict::Duplicate => {
                self.stats.duplicates += 1;
                action.ack_now = true;
                action.resend = self.cached_reply(slot, seq);
                None
            }
            RxVerdict::OutOfWindow => {
                self.stats.out_of_window += 1;
                action.ack_now = true;
                None
            }
            RxVerdict::New { ack_now } => {
                let bit = seq.0 as usize % W;
                p.cache[bit] = CacheEntry {
                    state: CacheState::Awaiting,
                    theirs: seq,
                    mine: Seq(0),
                };
                p.awaiting |= 1 << bit;
                p.rx_unacked += 1;
                if ack_now || p.rx_unacked >= ack_every(self.window) {
                    action.ack_now = true;
                } else if p.ack_due == NEVER {
                    p.ack_due = self.now.saturating_add(self.config.ack_delay_ns);
                    self.next_wake = self.next_wake.min(p.ack_due);
                    self.activate(slot);
                }
                let mut packets = frame.packets();
                let first = packets.next()?;
                let rest = packets.rest();
                if !rest.is_empty() {
                    self.rx_buf[..rest.len()].copy_from_slice(rest);
                    self.rx_pending = Some((peer, 0, rest.len()));
                }
                self.stats.packets_delivered += 1;
                f.take().map(|f| f(peer, first))
            }
        }
    }

    /// Applies an ack from the peer in `slot` to our send window.
    fn process_ack(&mut self, slot: usize, ack: frame::AckRepr) {
        let now = self.now;
        let (min_rto, max_rto) = (self.config.min_rto_ns, self.config.max_rto_ns);
        let p = &mut self.peers[slot];
        let pool = &mut self.pool;
        let stats = &mut self.stats;
        let rtt = &mut p.rtt;
        let mut acked = 0u16;
        let accepted = p.tx.apply_ack(ack, |_, tx| {
            pool.release(tx.block);
            stats.frames_acked += 1;
            acked = acked.saturating_add(1);
            if tx.retries == 0 {
                rtt.sample(now.saturating_sub(tx.last_sent), min_rto, max_rto);
            }
        });
        let most = u16::try_from(self.window).unwrap_or(u16::MAX);
        p.cwnd = p.cwnd.saturating_add(acked).min(most);
        if let (Some(peer), true) = (p.addr, acked > 0) {
            self.index.frames_held(peer, -(acked as isize));
        }
        if !accepted {
            stats.bad_acks += 1;
        }
    }

    /// The reply frame to resend at once for a duplicate of the peer's frame `seq`, if any.
    fn cached_reply(&self, slot: usize, seq: Seq) -> Option<Seq> {
        let p = &self.peers[slot];
        let entry = p.cache[seq.0 as usize % W];
        if entry.state != CacheState::Answered || entry.theirs != seq {
            return None;
        }
        let mine = entry.mine;
        if !p.tx.contains(mine) {
            return None;
        }
        let tx = p.tx.slot(mine);
        let quiet_for = self.now.saturating_sub(tx.last_sent);
        // See "Reply cache" in the module docs for the floor.
        let min_quiet = p.rtt.srtt().max(self.config.min_rto_ns / 2);
        (tx.state == TxState::InFlight && quiet_for >= min_quiet).then_some(mine)
    }
}

impl<T: Transport, const W: usize, I: PeerIndex<T::Peer>> Transport for Reliable<'_, T, W, I> {
    type Peer = T::Peer;

    fn capabilities(&self) -> Capabilities {
        self.core.caps
    }

    /// Appends the packet to the peer's open frame (opening one if needed). The frame goes
    /// out when it is full, on `flush`, or on `poll`.
    ///
    /// Errors: `UnknownPeer` (no slot), `Unreachable` (declared unreachable), `TooLarge`
    /// (above the MTU), `WouldBlock` (window or frame pool full), or a fatal error of the
    /// inner transport while pushing out a full frame.
    #[inline]
    fn send<R, F>(&mut self, peer: T::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        self.append(peer, len, fill, false)
    }

    /// As [`send`](Transport::send), but a frame holding only lazy packets stays open past
    /// `flush` until an ack is owed to the peer (it then carries the ack), a non-lazy packet
    /// joins it, it is full, or `ack_delay_ns` after its first packet (at a `poll`). See
    /// "Lazy packets" in the [module docs](super).
    #[inline]
    fn send_lazy<R, F>(&mut self, peer: T::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        self.append(peer, len, fill, true)
    }

    /// Hands over the next packet: first the rest of the last frame, then from new frames.
    /// Acks, duplicates and malformed frames are consumed on the way (at most 64 frames per
    /// call before `Ok(None)`).
    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(T::Peer, &[u8]) -> R,
    {
        let mut f = Some(f);
        if let Some(result) = self.core.deliver_buffered(&mut f) {
            return Ok(Some(result));
        }
        for _ in 0..RECV_BUDGET {
            let mut action = Action::NONE;
            let Self { inner, core } = self;
            let got = inner.recv(|peer, bytes| core.on_frame(peer, bytes, &mut f, &mut action))?;
            if action.ack_now && core.rx_pending.is_some() {
                // Packets of this frame wait in the receive buffer, not yet delivered: an
                // acknowledgement now would say the frame arrived before its owner took
                // all of it (a peer may read that as "applied"). It becomes due at once
                // instead and leaves at the next poll, after the caller drained them.
                action.ack_now = false;
                core.ack_due_now(action.slot);
            }
            if action.ack_now || action.resend.is_some() || action.refuse.is_some() {
                self.after_frame(action);
            }
            match got {
                None => return Ok(None),
                Some(Some(result)) => return Ok(Some(result)),
                Some(None) => {}
            }
        }
        Ok(None)
    }

    /// Closes every open frame and transmits frames still waiting for the inner transport,
    /// then flushes the inner transport.
    fn flush(&mut self) -> Result<(), TransportError> {
        if let Some(e) = self.core.fatal.take() {
            return Err(e);
        }
        if self.core.open_frames > self.core.held_frames || self.core.now >= self.core.next_wake {
            self.walk(false)?;
        }
        self.inner.flush()
    }

    /// Sets the time, polls the inner transport, and drives the timers: flushes open frames,
    /// retransmits frames whose timeout expired, sends delayed acks, and declares peers
    /// unreachable past the deadline (see [`Reliable::next_event`]). Cheap when no timer is
    /// due and no frame is open.
    fn poll(&mut self, now_ns: u64) -> Result<(), TransportError> {
        self.core.now = self.core.now.max(now_ns);
        self.inner.poll(now_ns)?;
        if let Some(e) = self.core.fatal.take() {
            return Err(e);
        }
        if self.core.open_frames > self.core.held_frames || self.core.now >= self.core.next_wake {
            self.walk(true)?;
            self.inner.flush()?;
        }
        Ok(())
    }
}
