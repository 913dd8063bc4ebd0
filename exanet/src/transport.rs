// Over 1,000 lines: one state machine (mailbox sends, stamped bulk slots, pulls, releases, direct RDMA) over shared slot tables.
//! [`ExanetTransport`]: gsas-core's `Transport` over one Exanet endpoint, plus direct RDMA.
//!
//! Kept as one file because `ExanetTransport`'s sends, receives and direct RDMA share one
//! endpoint, its staging segment, TX slots and failure queue; the wire formats are apart in
//! `transport/wire.rs`.
//!
//! What it is (model section 14). Peers are endpoints, `(coord, ep)` ([`ExanetPeer`]).
//! * **Small packets** (1..=64 bytes: every request, compare-swap included, and every
//!   reply) go through the packetizer into the peer's mailbox, one message each. NACKed
//!   messages (`RING_FULL`) are resent by the driver with backoff.
//!   [`ExanetTransport::send_persistent`] sends one that is resent after every NACK, the
//!   NI's ack timeout included, until a deadline (for a layer above that discards the copies a lost
//!   ack produces: the runtime's PIO path).
//! * **Bulk packets** (65..=[`TransportConfig::mtu`] bytes: BULK_WRITE, BULK_DATA and FORK
//!   fragments) are *pulled with the RDMA engine*. The sender's `fill` writes the packet
//!   straight into one of its registered send-staging slots (no copy), then a 16-byte
//!   `BULK_DESC` mailbox message tells the receiver the slot's NVA, length and generation.
//!   The receiver posts an RDMA READ of that NVA into one of its own receive-staging slots;
//!   as soon as the read completes it sends an 8-byte `BULK_RELEASE` back, which frees the
//!   sender's slot, and `recv` later lends the receive slot to the caller.
//!
//!   Why pull and not push (RDMA WRITE + `NOTIFY_REMOTE`): a push needs the sender to own
//!   space in the *receiver's* staging area, i.e. a per-pair reservation and credit
//!   protocol with a handshake, and a service endpoint talks to peers it has never seen.
//!   With a pull every endpoint only manages its own slots; the cost is the same number of
//!   network hops (descriptor, read request, read response). Mailbox fragmentation into
//!   56-byte pieces was rejected: over 70 acknowledged messages per 4 KiB.
//! * **Progress without `recv`.** Every call (`send`, `recv`, `poll`, `rdma_test`) drains
//!   the mailbox: transport-private messages are handled at once (a `BULK_RELEASE` frees
//!   its slot, a `BULK_DESC` starts its pull or waits in a queue for a free receive slot),
//!   user messages move to an inbox of [`RX_DEPTH`] messages that `recv` empties. So a
//!   sender that only calls `poll` and `send` after `WouldBlock` (the gsas-core contract:
//!   "poll and retry") sees its slots come back, and a bulk packet waiting for a receive
//!   slot never hides the messages behind it.
//! * **Back-pressure.** With the inbox (or the queue of waiting `BULK_DESC`s) full, the
//!   mailbox is left as it is and the NI NACKs further messages with `RING_FULL`, which the
//!   senders retry; with no free send slot, `send` returns `WouldBlock`. Releases behind
//!   the waiting head are still handled in place (looking ahead in the ring), so an
//!   endpoint that cannot send until its slots come back (a service blocked on a reply
//!   while requests pile up) never waits for its own inbox.
//! * **Transport-private messages** start with a byte in `0xF8..=0xFF` (`0xFB` BULK_DESC,
//!   `0xFC` BULK_RELEASE); gsas packets never do (their byte 0 is a packet type,
//!   `0x01..=0x09` or `0x80..=0x83`), and `send` refuses a small packet that does with
//!   `Failed(EINVAL)`.
//! * **Direct RDMA** for the runtime: [`ExanetTransport::rdma_write`] and
//!   [`ExanetTransport::rdma_read`] move bytes between a local NVA and a remote `(peer,
//!   NVA)` on channels 1..=3 (channel 0 carries the bulk pulls) without the remote CPU;
//!   [`ExanetTransport::rdma_test`] / [`ExanetTransport::rdma_wait`] poll completion.
//!   Register the node segment with [`ExanetTransport::register`] and exchange base NVAs
//!   (see [`crate::nva`] for the layout); `Capabilities::rdma_put`/`rdma_get` are true.
//!   Atomics always go to the atomic service (`atomic_offload` false).
//!
//! Delivery: reliable (NACKed messages are resent; a message that still cannot be
//! delivered, or a peer that does not answer, is reported through
//! [`ExanetTransport::take_failure`] and once as `Err(Unreachable)` from `poll`; with
//! [`FailurePolicy::Lose`] it is only counted, for use under a reliability layer), unordered
//! (a resent message may overtake later ones, and a bulk packet is delivered after its
//! pull completes).
//!
//! A send-staging slot is normally reused only once its receiver released it. A slot whose
//! release does not come back within [`TransportConfig::release_timeout`] (or whose
//! `BULK_DESC` timed out in the NI, so that it may have arrived) is reported once as a
//! failure of that peer ([`TransportStats::overdue`]) and stays held until the release
//! arrives (an acknowledged descriptor will be pulled by a slow receiver; a dead peer keeps
//! the slots of the packets it was sent). Except with [`FailurePolicy::Lose`] (a
//! reliability layer above resends what counts as lost): there the slot of a `BULK_DESC`
//! that timed out in the NI (lost, or only its acknowledgement lost: the sender cannot
//! tell) is freed at once, and so is a slot whose release is overdue (typically its
//! receiver ended with a resent packet still in its mailbox), so that neither lost
//! descriptors nor departed peers use up the slots. That is safe because of the
//! **generation stamps**: every staged
//! packet is framed by an 8-byte stamp before and after it (magic, slot, generation), and
//! the receiver delivers a pulled packet only if both stamps are those its `BULK_DESC`
//! announced. Before refilling a slot the sender overwrites the previous packet's trailing
//! stamp, then writes the new leading stamp and the packet, then (after a store barrier)
//! the new trailing stamp. A late pull of an older generation therefore either read all of
//! its bytes before the slot was touched (a correct, if duplicate, packet) or finds a stamp
//! that does not match (counted in [`TransportStats::stale_pulls`] and dropped, so the
//! layer above resends): a reused slot is never delivered as the packet a stale descriptor
//! announced. The pull reads in address order (as the emulator's engine does).
//!
//! Thread safety: one thread, through `&mut self`.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use gsas_core::transport::{Capabilities, Ordering, Transport, TransportError};

use crate::driver::{DriverConfig, Endpoint, RdmaCompletion, RdmaDesc, RdmaOp, RxMessage};
use crate::error::{Dest, OpenError, RdmaError, RegisterError, TxFailure};
use crate::io::RegIo;
use crate::nva::{MemSegment, Nva, Registrar};
use crate::pace::Pacer;
use crate::regs::{RDMA_CHANNELS, RDMA_DEPTH, RX_DEPTH, class, nack, rdma_status, rdmad};

/// A transport peer: a node coordinate and an endpoint.
pub type ExanetPeer = Dest;

mod wire;

use wire::{
    BULK_DESC, BULK_RELEASE, BulkDescRepr, BulkReleaseRepr, DESC_LEN, RELEASE_LEN, RELEASE_MIN_LEN,
};

const RESERVED_FIRST: u8 = 0xF8;
const PULL_CHANNEL: usize = 0;
/// Driver tag of a `BULK_DESC`: `0x8000 | (generation & 0x7F) << 8 | slot`.
const DESC_TAG: u16 = 0x8000;
/// Driver tag of a `BULK_RELEASE`: `0x4000 | released slot`.
const RELEASE_TAG: u16 = 0x4000;
/// Driver tag of a message sent with [`ExanetTransport::send_persistent`].
const PERSIST_TAG: u16 = 0x2000;
/// Transmissions of one release before it is given up (each one is itself retried by the
/// driver on `RING_FULL`).
const RELEASE_ATTEMPTS: u8 = 8;
/// User messages held between the mailbox and `recv`.
const INBOX_CAP: usize = RX_DEPTH as usize;
/// Bytes of each generation stamp around a staged bulk packet.
const STAMP_LEN: usize = 8;
/// High half of every stamp (`"STMP"`); a stamp of 0 marks a slot being rewritten.
const STAMP_MAGIC: u64 = 0x5354_4D50 << 32;
/// `BULK_RELEASE` status of a pull whose stamps did not match (the slot was reused).
const STALE: u8 = 0xFE;

/// The stamp of generation `generation` of send-staging slot `slot`.
fn stamp(slot: u8, generation: u16) -> u64 {
    STAMP_MAGIC | u64::from(slot) << 16 | u64::from(generation)
}

/// `BULK_DESC`s held while no receive slot is free.
const DESC_QUEUE_CAP: usize = 256;
const MAX_NOTIFICATIONS: usize = 256;

/// Parameters of an [`ExanetTransport`].
#[derive(Clone, Copy, Debug)]
pub struct TransportConfig {
    /// Largest packet `send` accepts (bulk staging slot size), 65..=2^20.
    pub mtu: usize,
    /// Send-staging slots (bulk packets in flight from this endpoint), 1..=255.
    pub tx_slots: usize,
    /// Receive-staging slots (bulk pulls in flight into this endpoint), 1..=16.
    pub rx_slots: usize,
    /// A send-staging slot not released by its receiver within this time is reported as a
    /// failure of that peer (once; the slot stays held until the release arrives, except
    /// under [`FailurePolicy::Lose`], where the packet counts as lost and the slot is
    /// reused).
    pub release_timeout: Duration,
    /// Driver parameters.
    pub driver: DriverConfig,
    /// What happens to a packet that could not be delivered.
    pub on_failure: FailurePolicy,
}

/// What the transport does with a packet it could not deliver (NI timeout, NACKs beyond
/// the driver's attempts, a bulk release overdue).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Queue a [`TxFailure`] for [`ExanetTransport::take_failure`] and make the next `poll`
    /// return `Err(Unreachable)` once (the default: a caller without a reliability layer
    /// learns of every loss).
    #[default]
    Report,
    /// Count it ([`TransportStats::failures`]), log it at debug level, and otherwise treat
    /// it as a lost datagram: for use under gsas-core's `Reliable`, which resends and
    /// declares a peer unreachable at its own deadline.
    Lose,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            mtu: 8192,
            tx_slots: 16,
            rx_slots: 16,
            release_timeout: Duration::from_secs(10),
            driver: DriverConfig::default(),
            on_failure: FailurePolicy::Report,
        }
    }
}

/// Counters of a transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Small packets sent.
    pub small_sent: u64,
    /// Bulk packets sent.
    pub bulk_sent: u64,
    /// Packets delivered to `recv` callers.
    pub delivered: u64,
    /// Bulk pulls that failed (packet lost, sender told).
    pub pull_errors: u64,
    /// Bulk packets whose release was overdue (reported as failures).
    pub overdue: u64,
    /// Releases resent after the driver gave up on them.
    pub releases_resent: u64,
    /// Packets that could not be delivered (reported or lost, see [`FailurePolicy`]).
    pub failures: u64,
    /// Notifications dropped because the queue was full.
    pub notifications_dropped: u64,
    /// Bulk packets pulled from a slot that its sender had reused meanwhile (stamps did
    /// not match): dropped.
    pub stale_pulls: u64,
    /// Send-staging slots freed without a release (the packet was presumed lost, with
    /// [`FailurePolicy::Lose`]).
    pub slots_reclaimed: u64,
}

#[derive(Clone, Copy, Debug)]
struct TxSlot {
    busy: bool,
    /// Reported as a failure already (release overdue or descriptor timed out).
    overdue: bool,
    generation: u16,
    /// Bytes of the packet staged last (where its trailing stamp is).
    len: u32,
    peer: Dest,
    since: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxSlot {
    Free,
    Pulling {
        peer: Dest,
        src_slot: u8,
        generation: u16,
        len: u32,
        index: u32,
    },
    Ready {
        peer: Dest,
        len: u32,
    },
}

/// A `BULK_DESC` waiting for a receive slot.
#[derive(Clone, Copy, Debug)]
struct PendingPull {
    peer: Dest,
    src_slot: u8,
    generation: u16,
    len: u32,
    nva: Nva,
}

/// A `BULK_RELEASE` to send (or resend).
#[derive(Clone, Copy, Debug)]
struct Release {
    peer: Dest,
    slot: u8,
    generation: u16,
    status: u8,
    attempts: u8,
}

impl Release {
    fn message(&self) -> [u8; RELEASE_LEN] {
        BulkReleaseRepr {
            slot: self.slot,
            generation: self.generation,
            status: self.status,
        }
        .to_bytes()
    }
}

/// Names an RDMA operation started with [`ExanetTransport::rdma_write`] or `rdma_read`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub struct RdmaHandle {
    channel: usize,
    index: u32,
    dest: Dest,
}

/// gsas-core's `Transport` over an Exanet endpoint (see the module docs).
pub struct ExanetTransport<R: RegIo, G: Registrar> {
    ep: Endpoint<R>,
    registrar: G,
    cfg: TransportConfig,
    staging: MemSegment,
    staging_nva: Nva,
    tx: Vec<TxSlot>,
    rx: Vec<RxSlot>,
    ready: VecDeque<usize>,
    inbox: VecDeque<RxMessage>,
    /// Messages behind the ring's head already searched for releases by `look_ahead`.
    scanned: u32,
    pulls: VecDeque<PendingPull>,
    releases: VecDeque<Release>,
    /// The last release sent for each `(peer, slot)`, to resend it if the driver gives up.
    sent_releases: HashMap<(Dest, u8), Release>,
    failures: VecDeque<TxFailure>,
    new_failure: bool,
    /// Messages of `send_persistent` that were not delivered by their deadline.
    lost: VecDeque<TxFailure>,
    notifications: VecDeque<crate::driver::Notification>,
    done: Vec<RdmaCompletion>,
    untaken: [u32; RDMA_CHANNELS],
    next_channel: usize,
    stats: TransportStats,
}

impl<R: RegIo, G: Registrar> std::fmt::Debug for ExanetTransport<R, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExanetTransport")
            .field("endpoint", &self.ep.info())
            .field("mtu", &self.cfg.mtu)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<R: RegIo, G: Registrar> ExanetTransport<R, G> {
    /// Opens the endpoint behind `io`, creates and registers its staging memory through
    /// `registrar`.
    pub fn new(io: R, mut registrar: G, cfg: TransportConfig) -> Result<Self, OpenError> {
        let bad = |what: &str| {
            OpenError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                what.to_owned(),
            ))
        };
        if !(65..=1 << 20).contains(&cfg.mtu) {
            return Err(bad("TransportConfig::mtu must be 65..=1048576"));
        }
        if !(1..=255).contains(&cfg.tx_slots) || !(1..=RDMA_DEPTH as usize).contains(&cfg.rx_slots)
        {
            return Err(bad(
                "TransportConfig: tx_slots must be 1..=255 and rx_slots 1..=16",
            ));
        }
        let ep = Endpoint::open(io, cfg.driver)?;
        let info = ep.info();
        let staging = MemSegment::create(
            &format!("exanet-staging-{:x}-{}", info.coord, info.ep),
            (cfg.tx_slots + cfg.rx_slots) * (cfg.mtu + 2 * STAMP_LEN),
        )?;
        let staging_nva = registrar.register(&staging)?;
        let now = Instant::now();
        Ok(ExanetTransport {
            ep,
            registrar,
            staging,
            staging_nva,
            tx: vec![
                TxSlot {
                    busy: false,
                    overdue: false,
                    generation: 0,
                    len: 0,
                    peer: info.dest(),
                    since: now
                };
                cfg.tx_slots
            ],
            rx: vec![RxSlot::Free; cfg.rx_slots],
            cfg,
            ready: VecDeque::new(),
            inbox: VecDeque::with_capacity(INBOX_CAP),
            scanned: 0,
            pulls: VecDeque::new(),
            releases: VecDeque::new(),
            sent_releases: HashMap::new(),
            failures: VecDeque::new(),
            new_failure: false,
            lost: VecDeque::new(),
            notifications: VecDeque::new(),
            done: Vec::new(),
            untaken: [0; RDMA_CHANNELS],
            next_channel: 1,
            stats: TransportStats::default(),
        })
    }

    /// The endpoint driver.
    pub fn endpoint(&mut self) -> &mut Endpoint<R> {
        &mut self.ep
    }

    /// This endpoint as a peer of others.
    pub fn local_peer(&self) -> ExanetPeer {
        self.ep.info().dest()
    }

    /// The gsas sender id of this endpoint (`pdid << 32 | coord << 10 | ep`).
    pub fn sender_id(&self) -> u64 {
        self.ep.info().sender_id()
    }

    /// Counters.
    pub fn stats(&self) -> TransportStats {
        self.stats
    }

    /// Bulk packets sent whose release has not come back yet.
    pub fn bulk_in_flight(&self) -> usize {
        self.tx.iter().filter(|s| s.busy).count()
    }

    /// Whether the transport has work of its own in progress that no interrupt announces:
    /// bulk pulls waiting or running (their completion makes a packet deliverable) or
    /// releases waiting to be sent. An owner that sleeps on the endpoint's interrupt line
    /// should keep polling while this is true.
    pub fn work_pending(&self) -> bool {
        !self.pulls.is_empty()
            || !self.releases.is_empty()
            || self.ep.retries_pending() > 0
            || self.rx.iter().any(|s| matches!(s, RxSlot::Pulling { .. }))
    }

    /// Next undeliverable message or unresponsive peer, if any.
    pub fn take_failure(&mut self) -> Option<TxFailure> {
        self.failures.pop_front()
    }

    /// Sends a small packet (1..=64 bytes) as one mailbox message that the driver resends
    /// after every NACK, the NI's ack timeout (`UNREACHABLE`) included, for `deadline`
    /// after its first refusal ([`Endpoint::try_send_persistent`]). One that is still not
    /// delivered then is reported
    /// through [`take_lost`](Self::take_lost), whatever the [`FailurePolicy`]. A message
    /// whose acknowledgement was lost arrives twice: this is for a layer above that
    /// numbers its messages and discards duplicates (the runtime's PIO path).
    pub fn send_persistent<T, F>(
        &mut self,
        peer: ExanetPeer,
        len: usize,
        deadline: Duration,
        fill: F,
    ) -> Result<T, TransportError>
    where
        F: FnOnce(&mut [u8]) -> T,
    {
        if len > 64 {
            return Err(TransportError::TooLarge);
        }
        self.send_small(peer, len, Some(deadline), fill)
    }

    /// Mailbox messages posted whose final status is not known yet, plus queued resends.
    pub fn tx_pending(&self) -> usize {
        self.ep.tx_pending()
    }

    /// Next message of [`send_persistent`](Self::send_persistent) given up at its
    /// deadline, if any.
    pub fn take_lost(&mut self) -> Option<TxFailure> {
        self.lost.pop_front()
    }

    /// Checks the destination and the length, and that the driver can post a message now
    /// (reaping statuses first when it looks full).
    #[inline]
    fn ready_to_send(&mut self, peer: ExanetPeer, len: usize) -> Result<(), TransportError> {
        if len == 0
            || peer.coord > crate::regs::COORD_MASK
            || u32::from(peer.ep) > crate::regs::MAX_EP
        {
            return Err(TransportError::Failed(libc::EINVAL));
        }
        if !self.ep.can_send() {
            self.pump();
            if !self.ep.can_send() {
                return Err(TransportError::WouldBlock);
            }
        }
        Ok(())
    }

    /// One mailbox message (`len` 1..=64), persistent for `deadline` when given.
    #[inline]
    fn send_small<T, F>(
        &mut self,
        peer: ExanetPeer,
        len: usize,
        deadline: Option<Duration>,
        fill: F,
    ) -> Result<T, TransportError>
    where
        F: FnOnce(&mut [u8]) -> T,
    {
        self.ready_to_send(peer, len)?;
        let mut buf = [0u8; 64];
        let out = fill(&mut buf[..len]);
        if buf[0] >= RESERVED_FIRST {
            return Err(TransportError::Failed(libc::EINVAL));
        }
        let data = &buf[..len];
        let sent = match deadline {
            None => self.ep.try_send(peer, data, 0),
            Some(d) => self
                .ep
                .try_send_persistent(peer, len, PERSIST_TAG, d, |b| b.copy_from_slice(data)),
        };
        sent.map_err(|_| TransportError::WouldBlock)?;
        self.stats.small_sent += 1;
        Ok(out)
    }

    /// Next RDMA notification received (`NOTIFY_REMOTE` from a peer's write into our
    /// memory, `NOTIFY_LOCAL` of our own operations, error reports).
    pub fn take_notification(&mut self) -> Option<crate::driver::Notification> {
        self.notifications.pop_front()
    }

    /// Registers `seg` for RDMA and returns the NVA of its first byte.
    pub fn register(&mut self, seg: &MemSegment) -> Result<Nva, RegisterError> {
        self.registrar.register(seg)
    }

    /// Undoes [`register`](Self::register).
    pub fn unregister(&mut self, base: Nva) -> Result<(), RegisterError> {
        self.registrar.unregister(base)
    }

    /// Offset of staging slot `slot` (its leading stamp; the packet follows it).
    fn slot_off(&self, slot: usize) -> usize {
        slot * (self.cfg.mtu + 2 * STAMP_LEN)
    }

    /// Frees send slot `slot` whose packet is presumed lost, when the policy allows it
    /// (see the module docs on generation stamps).
    fn reclaim(&mut self, slot: usize) {
        if self.cfg.on_failure == FailurePolicy::Lose && self.tx[slot].busy {
            self.tx[slot].busy = false;
            self.tx[slot].overdue = false;
            self.stats.slots_reclaimed += 1;
        }
    }

    fn fail(&mut self, failure: TxFailure) {
        self.stats.failures += 1;
        match self.cfg.on_failure {
            FailurePolicy::Report => {
                self.failures.push_back(failure);
                self.new_failure = true;
            }
            FailurePolicy::Lose => log::debug!("exanet: lost: {failure}"),
        }
    }

    /// Drives everything: TX statuses and resends, pull completions, the mailbox, waiting
    /// pulls and releases.
    fn pump(&mut self) {
        self.ep.progress();
        while let Some(f) = self.ep.take_failure() {
            self.tx_failure(f);
        }
        let mut records = [None; RDMA_DEPTH as usize];
        let mut n = 0;
        self.ep.rdma_poll(PULL_CHANNEL, |rec| {
            records[n] = Some(rec);
            n += 1;
        });
        for rec in records.iter().flatten() {
            self.pull_done(*rec);
        }
        for ch in 1..RDMA_CHANNELS {
            let done = &mut self.done;
            self.ep.rdma_poll(ch, |rec| done.push(rec));
        }
        self.drain();
        self.start_pulls();
        self.send_releases();
    }

    /// A message the driver gave up on.
    fn tx_failure(&mut self, f: TxFailure) {
        if f.tag & DESC_TAG != 0 {
            let slot = usize::from(f.tag & 0xFF);
            let generation = (f.tag >> 8) & 0x7F;
            if let Some(s) = self
                .tx
                .get_mut(slot)
                .filter(|s| s.busy && s.peer == f.dest && s.generation & 0x7F == generation)
            {
                let reported = s.overdue;
                let maybe_arrived = f.reason == nack::UNREACHABLE;
                if maybe_arrived {
                    // The descriptor may have arrived (only its ack was lost): a pull of the
                    // slot may still come, so the slot stays held until released, unless
                    // the stamps make its reuse safe (`reclaim`).
                    s.overdue = true;
                } else {
                    // Refused: the receiver never saw it.
                    s.busy = false;
                    s.overdue = false;
                }
                if !reported {
                    self.fail(TxFailure { tag: 0, ..f });
                }
                if maybe_arrived {
                    self.reclaim(slot);
                }
            }
        } else if f.tag & RELEASE_TAG != 0 {
            let slot = (f.tag & 0xFF) as u8;
            let Some(mut r) = self.sent_releases.remove(&(f.dest, slot)) else {
                return;
            };
            let retry = matches!(f.reason, nack::RING_FULL | nack::UNREACHABLE);
            if retry && r.attempts < RELEASE_ATTEMPTS {
                r.attempts += 1;
                self.stats.releases_resent += 1;
                self.releases.push_back(r);
            } else {
                log::warn!(
                    "exanet {}: gave up releasing bulk slot {slot} of {}: {f}",
                    self.ep.info().dest(),
                    f.dest
                );
            }
        } else if f.tag == PERSIST_TAG {
            self.stats.failures += 1;
            self.lost.push_back(f);
        } else {
            self.fail(f);
        }
    }

    /// Moves mailbox messages to where they belong (see the module docs); stops at a
    /// message that has no room yet, and then looks ahead for releases.
    fn drain(&mut self) {
        if !self.drain_in_order() {
            self.look_ahead();
        }
    }

    /// Releases behind a message that must stay at the head of the ring (a full inbox,
    /// a full queue of waiting pulls) are handled where they are, without consuming them:
    /// otherwise a sender that waits for its slots while its inbox is full (a service
    /// blocked on a reply) would wait for ever. Handling a release is idempotent (it frees
    /// the slot only if the slot still holds that generation), so meeting it again at the
    /// head later is harmless.
    fn look_ahead(&mut self) {
        let mut n = self.scanned.max(1);
        while let Some(msg) = self.ep.rx_peek_nth(n) {
            let data = msg.data();
            if msg.class() == class::USER
                && data[0] == BULK_RELEASE
                && data.len() >= RELEASE_MIN_LEN
            {
                self.on_release(msg.src(), data);
            }
            n += 1;
        }
        self.scanned = n;
    }

    /// Consumes messages in ring order; returns false when one had to stay.
    fn drain_in_order(&mut self) -> bool {
        while let Some(msg) = self.ep.rx_peek().copied() {
            if msg.class() != class::USER {
                self.pop();
                self.note_notification(&msg);
                continue;
            }
            let data = msg.data();
            match data[0] {
                BULK_RELEASE => {
                    self.pop();
                    if data.len() >= RELEASE_MIN_LEN {
                        self.on_release(msg.src(), data);
                    }
                }
                BULK_DESC => {
                    if self.pulls.len() >= DESC_QUEUE_CAP {
                        return false;
                    }
                    self.pop();
                    if data.len() >= DESC_LEN {
                        self.on_desc(msg.src(), data);
                    }
                }
                b if b >= RESERVED_FIRST => {
                    self.pop();
                    log::debug!(
                        "exanet {}: ignored private message {b:#04x} from {}",
                        self.ep.info().dest(),
                        msg.src()
                    );
                }
                _ => {
                    if self.inbox.len() >= INBOX_CAP {
                        return false;
                    }
                    self.pop();
                    self.inbox.push_back(msg);
                }
            }
        }
        true
    }

    /// Consumes the ring's head message.
    fn pop(&mut self) {
        self.ep.rx_pop();
        self.scanned = self.scanned.saturating_sub(1);
    }

    fn on_desc(&mut self, src: Dest, data: &[u8]) {
        let Ok(BulkDescRepr {
            slot: src_slot,
            generation,
            len,
            nva,
        }) = BulkDescRepr::parse(data)
        else {
            return;
        };
        let nva = Nva(nva);
        if len == 0 || len as usize > self.cfg.mtu {
            log::warn!(
                "exanet {}: refused a bulk packet of {len} bytes from {src} (mtu {})",
                self.ep.info().dest(),
                self.cfg.mtu
            );
            self.stats.pull_errors += 1;
            self.queue_release(src, src_slot, generation, rdma_status::BAD_DESCRIPTOR as u8);
            return;
        }
        self.pulls.push_back(PendingPull {
            peer: src,
            src_slot,
            generation,
            len,
            nva,
        });
    }

    fn on_release(&mut self, src: Dest, data: &[u8]) {
        let Ok(release) = BulkReleaseRepr::parse(data) else {
            return;
        };
        let slot = usize::from(release.slot);
        let generation = release.generation;
        let Some(s) = self
            .tx
            .get_mut(slot)
            .filter(|s| s.busy && s.generation == generation && s.peer == src)
        else {
            return;
        };
        s.busy = false;
        let reported = std::mem::take(&mut s.overdue);
        if release.status != 0 && !reported {
            log::warn!(
                "exanet: bulk packet to {src} lost: the receiver's pull failed ({})",
                rdma_status::name(u32::from(release.status))
            );
            self.fail(TxFailure {
                dest: src,
                reason: nack::NO_SUCH_EP,
                attempts: 1,
                tag: 0,
            });
        }
    }

    /// Starts the pulls of waiting `BULK_DESC`s while receive slots and descriptors are free.
    fn start_pulls(&mut self) {
        while let Some(p) = self.pulls.front().copied() {
            let Some(r) = self.rx.iter().position(|s| *s == RxSlot::Free) else {
                return;
            };
            if self.ep.rdma_outstanding(PULL_CHANNEL) >= RDMA_DEPTH {
                return;
            }
            let desc = RdmaDesc {
                op: RdmaOp::Read,
                flags: 0,
                len: p.len + 2 * STAMP_LEN as u32,
                local: self
                    .staging_nva
                    .add(self.slot_off(self.cfg.tx_slots + r) as u64),
                remote: p.nva,
                dest: p.peer,
                cookie: r as u32,
            };
            match self.ep.rdma_post(PULL_CHANNEL, &desc) {
                Ok(index) => {
                    self.pulls.pop_front();
                    self.rx[r] = RxSlot::Pulling {
                        peer: p.peer,
                        src_slot: p.src_slot,
                        generation: p.generation,
                        len: p.len,
                        index,
                    };
                }
                Err(e) => {
                    log::debug!("exanet {}: pull not posted: {e}", self.ep.info().dest());
                    return;
                }
            }
        }
    }

    fn pull_done(&mut self, rec: RdmaCompletion) {
        let Some(r) = self
            .rx
            .iter()
            .position(|s| matches!(s, RxSlot::Pulling { index, .. } if *index == rec.index))
        else {
            return;
        };
        let RxSlot::Pulling {
            peer,
            src_slot,
            generation,
            len,
            ..
        } = self.rx[r]
        else {
            return;
        };
        if rec.status == rdma_status::OK && rec.bytes == len + 2 * STAMP_LEN as u32 {
            let off = self.slot_off(self.cfg.tx_slots + r);
            let (mut head, mut tail) = ([0u8; STAMP_LEN], [0u8; STAMP_LEN]);
            crate::io::from_device_barrier();
            let read = self
                .staging
                .read(off, &mut head)
                .and_then(|()| self.staging.read(off + STAMP_LEN + len as usize, &mut tail));
            let want = stamp(src_slot, generation);
            if read.is_ok() && u64::from_le_bytes(head) == want && u64::from_le_bytes(tail) == want
            {
                self.rx[r] = RxSlot::Ready { peer, len };
                self.ready.push_back(r);
                self.queue_release(peer, src_slot, generation, 0);
            } else {
                log::debug!(
                    "exanet {}: bulk packet from {peer} (slot {src_slot}, generation {generation}) was overwritten before the pull: dropped",
                    self.ep.info().dest()
                );
                self.stats.stale_pulls += 1;
                self.rx[r] = RxSlot::Free;
                self.queue_release(peer, src_slot, generation, STALE);
            }
        } else {
            log::warn!(
                "exanet {}: bulk pull of {len} bytes from {peer} failed: {}",
                self.ep.info().dest(),
                rdma_status::name(rec.status)
            );
            self.stats.pull_errors += 1;
            self.rx[r] = RxSlot::Free;
            self.queue_release(peer, src_slot, generation, rec.status.max(1) as u8);
        }
    }

    fn queue_release(&mut self, peer: Dest, slot: u8, generation: u16, status: u8) {
        self.releases.push_back(Release {
            peer,
            slot,
            generation,
            status,
            attempts: 1,
        });
    }

    fn send_releases(&mut self) {
        while let Some(r) = self.releases.front().copied() {
            if self
                .ep
                .try_send(r.peer, &r.message(), RELEASE_TAG | u16::from(r.slot))
                .is_err()
            {
                return;
            }
            self.releases.pop_front();
            self.sent_releases.insert((r.peer, r.slot), r);
        }
    }

    fn pick_channel(&mut self) -> Option<usize> {
        for _ in 1..RDMA_CHANNELS {
            let ch = self.next_channel;
            self.next_channel = if ch + 1 >= RDMA_CHANNELS { 1 } else { ch + 1 };
            if self.ep.rdma_outstanding(ch) + self.untaken[ch] < RDMA_DEPTH {
                return Some(ch);
            }
        }
        None
    }

    fn rdma(&mut self, desc: RdmaDesc) -> Result<RdmaHandle, RdmaError> {
        if desc.len == 0 {
            return Err(RdmaError::BadLength(0));
        }
        self.pump();
        let ch = self.pick_channel().ok_or(RdmaError::WouldBlock)?;
        let index = self.ep.rdma_post(ch, &desc)?;
        self.untaken[ch] += 1;
        Ok(RdmaHandle {
            channel: ch,
            index,
            dest: desc.dest,
        })
    }

    /// Starts an RDMA WRITE of `len` bytes from local `local` to `remote` at `peer`. With
    /// `notify`, the peer's mailbox receives a `NOTIFY_REMOTE` notification (with `cookie`)
    /// once the data is visible. Completion (from [`rdma_test`](Self::rdma_test)) means
    /// remote completion: the data is in the peer's memory.
    pub fn rdma_write(
        &mut self,
        local: Nva,
        peer: ExanetPeer,
        remote: Nva,
        len: u32,
        notify: bool,
        cookie: u32,
    ) -> Result<RdmaHandle, RdmaError> {
        let flags = if notify { rdmad::NOTIFY_REMOTE } else { 0 };
        self.rdma(RdmaDesc {
            op: RdmaOp::Write,
            flags,
            len,
            local,
            remote,
            dest: peer,
            cookie,
        })
    }

    /// Starts an RDMA READ of `len` bytes from `remote` at `peer` into local `local`.
    pub fn rdma_read(
        &mut self,
        local: Nva,
        peer: ExanetPeer,
        remote: Nva,
        len: u32,
    ) -> Result<RdmaHandle, RdmaError> {
        self.rdma(RdmaDesc {
            op: RdmaOp::Read,
            flags: 0,
            len,
            local,
            remote,
            dest: peer,
            cookie: 0,
        })
    }

    /// `Some(Ok(bytes))` or `Some(Err(..))` once the operation completed (the handle is then
    /// spent), `None` while it runs.
    pub fn rdma_test(&mut self, h: RdmaHandle) -> Option<Result<u32, RdmaError>> {
        self.pump();
        let at = self
            .done
            .iter()
            .position(|c| c.channel == h.channel && c.index == h.index)?;
        let c = self.done.swap_remove(at);
        self.untaken[h.channel] -= 1;
        Some(if c.status == rdma_status::OK {
            Ok(c.bytes)
        } else {
            Err(RdmaError::Failed {
                dest: h.dest,
                status: c.status,
                bytes: c.bytes,
            })
        })
    }

    /// Waits (bounded) for an RDMA operation; returns the bytes moved.
    pub fn rdma_wait(&mut self, h: RdmaHandle, timeout: Duration) -> Result<u32, RdmaError> {
        let start = Instant::now();
        let mut pacer = Pacer::new();
        loop {
            if let Some(r) = self.rdma_test(h) {
                return r;
            }
            if start.elapsed() >= timeout {
                return Err(RdmaError::Timeout {
                    dest: h.dest,
                    waited: start.elapsed(),
                });
            }
            pacer.pause();
        }
    }

    fn note_notification(&mut self, msg: &RxMessage) {
        if let Some(n) = msg.notification() {
            if self.notifications.len() >= MAX_NOTIFICATIONS {
                self.notifications.pop_front();
                self.stats.notifications_dropped += 1;
            }
            self.notifications.push_back(n);
        }
    }
}

impl<R: RegIo, G: Registrar> Transport for ExanetTransport<R, G> {
    type Peer = ExanetPeer;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_inline: 64,
            mtu: self.cfg.mtu,
            ordering: Ordering::Unordered,
            reliable: true,
            rdma_put: true,
            rdma_get: true,
            atomic_offload: false,
            atomics_coherent_with_cpu: false,
        }
    }

    fn send<T, F>(&mut self, peer: ExanetPeer, len: usize, fill: F) -> Result<T, TransportError>
    where
        F: FnOnce(&mut [u8]) -> T,
    {
        if len > self.cfg.mtu {
            return Err(TransportError::TooLarge);
        }
        if len <= 64 {
            return self.send_small(peer, len, None, fill);
        }
        self.ready_to_send(peer, len)?;
        let slot = match self.tx.iter().position(|s| !s.busy) {
            Some(slot) => slot,
            None => {
                self.pump();
                self.tx
                    .iter()
                    .position(|s| !s.busy)
                    .ok_or(TransportError::WouldBlock)?
            }
        };
        let off = self.slot_off(slot);
        let generation = self.tx[slot].generation.wrapping_add(1);
        let new = stamp(slot as u8, generation).to_le_bytes();
        let bad = |_| TransportError::Failed(libc::EINVAL);
        // Stamps (see the module docs): the old trailing stamp goes first, so that a late
        // pull of the previous packet that reads anything written below also reads a
        // stamp that does not match.
        let old_tail = off + STAMP_LEN + self.tx[slot].len as usize;
        self.staging.write(old_tail, &[0; STAMP_LEN]).map_err(bad)?;
        crate::io::to_device_barrier();
        self.staging.write(off, &new).map_err(bad)?;
        // SAFETY: send-staging slot `slot` is free: no RDMA operation writes it (receive
        // pulls land in the receive-staging slots, never here) and no other slice of it
        // exists. A late pull of an older packet may still read it from outside the
        // process, which `slice_mut` allows: the stamps make the receiver drop such a read.
        let buf = unsafe { self.staging.slice_mut(off + STAMP_LEN, len) }.map_err(bad)?;
        let out = fill(buf);
        crate::io::to_device_barrier();
        self.staging
            .write(off + STAMP_LEN + len, &new)
            .map_err(bad)?;
        let s = &mut self.tx[slot];
        s.generation = generation;
        s.len = len as u32;
        let desc = BulkDescRepr {
            slot: slot as u8,
            generation: s.generation,
            len: len as u32,
            nva: self.staging_nva.add(off as u64).0,
        }
        .to_bytes();
        let tag = DESC_TAG | (s.generation & 0x7F) << 8 | slot as u16;
        self.ep
            .try_send(peer, &desc, tag)
            .map_err(|_| TransportError::WouldBlock)?;
        self.tx[slot] = TxSlot {
            busy: true,
            overdue: false,
            generation: self.tx[slot].generation,
            len: len as u32,
            peer,
            since: Instant::now(),
        };
        self.stats.bulk_sent += 1;
        Ok(out)
    }

    fn recv<T, F>(&mut self, f: F) -> Result<Option<T>, TransportError>
    where
        F: FnOnce(ExanetPeer, &[u8]) -> T,
    {
        self.pump();
        if let Some(r) = self.ready.pop_front() {
            let RxSlot::Ready { peer, len } = self.rx[r] else {
                return Err(TransportError::Failed(libc::EIO));
            };
            let off = self.slot_off(self.cfg.tx_slots + r) + STAMP_LEN;
            // SAFETY: receive slot `r` is Ready: its pull completed and no other operation
            // targets it until it is freed below, after `f` returned.
            let data = unsafe { self.staging.slice(off, len as usize) }
                .map_err(|_| TransportError::Failed(libc::EIO))?;
            let out = f(peer, data);
            self.rx[r] = RxSlot::Free;
            self.stats.delivered += 1;
            self.start_pulls();
            return Ok(Some(out));
        }
        match self.inbox.pop_front() {
            Some(msg) => {
                self.stats.delivered += 1;
                Ok(Some(f(msg.src(), msg.data())))
            }
            None => Ok(None),
        }
    }

    fn poll(&mut self, _now_ns: u64) -> Result<(), TransportError> {
        self.pump();
        let timeout = self.cfg.release_timeout;
        let now = Instant::now();
        for slot in 0..self.tx.len() {
            let s = self.tx[slot];
            if s.busy && !s.overdue && now.saturating_duration_since(s.since) > timeout {
                self.tx[slot].overdue = true;
                self.stats.overdue += 1;
                // Under FailurePolicy::Lose (a reliability layer above) the packet counts
                // as lost and `reclaim` frees the slot: the stamps make a late pull safe and
                // the layer resends what was not acknowledged. Typically the receiver is
                // gone, a process that ended with a resent reply in its mailbox; holding the
                // slot until that endpoint is opened again would let departed peers use up
                // every slot. Under FailurePolicy::Report the slot stays held: the
                // descriptor was acknowledged, so the receiver may only be slow, and the
                // caller has no layer to repair a loss.
                if self.cfg.on_failure == FailurePolicy::Lose {
                    log::debug!(
                        "exanet: {} did not release a bulk packet within {timeout:?}: presumed lost, slot {slot} reused",
                        s.peer
                    );
                } else {
                    log::warn!(
                        "exanet: {} did not release a bulk packet within {timeout:?}",
                        s.peer
                    );
                }
                self.fail(TxFailure {
                    dest: s.peer,
                    reason: nack::UNREACHABLE,
                    attempts: 1,
                    tag: 0,
                });
                self.reclaim(slot);
            }
        }
        if std::mem::take(&mut self.new_failure) {
            return Err(TransportError::Unreachable);
        }
        Ok(())
    }
}
