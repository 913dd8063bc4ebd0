//! The ring driver of one endpoint, generic over [`RegIo`].
//!
//! What it is: [`Endpoint`] owns one endpoint's register access and runs the software side
//! of every ring of the model:
//! * **packetizer send** (section 5): [`Endpoint::try_send`] waits for nothing; it writes
//!   the payload with aligned 64-bit stores, then `w0`/`w1`, then rings `TX_TAIL` through
//!   [`RegIo::doorbell`] (to-device barrier first). [`Endpoint::send_timeout`] waits for a
//!   free slot, bounded.
//! * **TX status tracking**: [`Endpoint::progress`] reads `TX_DONE` (a watermark: the
//!   engine writes statuses back in order) and each final status. `ACKED`/`DROPPED` free
//!   the shadow copy; `NACKED` with `RING_FULL` is resent after an exponential backoff
//!   ([`DriverConfig::backoff_min`] doubling up to `backoff_max`) up to
//!   [`DriverConfig::max_attempts`]; other reasons (PDID mismatch, no such endpoint,
//!   unreachable) and exhausted retries become a [`TxFailure`] naming the destination,
//!   collected by [`Endpoint::take_failure`]. A message sent with
//!   [`Endpoint::try_send_persistent`] is resent instead after every NACK, `UNREACHABLE`
//!   (the NI's ack timeout: the message or its ack was lost; it may have arrived, so its
//!   receiver must discard duplicates) included, until a deadline after its first refusal. `TX_NACK_SEEN` is written with `TX_NACKS`.
//!   A TX slot is reused only after its status was read (`TX_TAIL - TX_DONE < 16`), so
//!   no status is ever overwritten unread.
//! * **mailbox receive** (section 4): see [`rx`].
//! * **RDMA** (section 6): see [`rdma`].
//! * **interrupt mode** (section 8): see [`irq`]; polling mode needs nothing but
//!   `IRQ_ENABLE = 0` (the default) and calls to `progress`/`recv`/`rdma_poll`.
//!
//! Ordering: messages from one endpoint to one destination arrive in order unless they are
//! NACKed and resent (then a resent message may arrive after later ones).
//!
//! What it is not: a transport (see [`crate::ExanetTransport`]) or thread-safe: one
//! `Endpoint` is driven through `&mut self` by one thread.

pub mod irq;
pub mod rdma;
pub mod rx;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::error::{Dest, OpenError, SendError, TxFailure};
use crate::io::{Map, RegIo};
use crate::pace::Pacer;
use crate::regs::{
    COORD_MASK, ID_MAGIC, MAX_EP, RDMA_CHANNELS, TX_DEPTH, VERSION_MAJOR, caps0, caps1, ep_status,
    nack, off, tx_status, txd,
};

pub use rdma::{RdmaCompletion, RdmaDesc, RdmaOp};
pub use rx::{Notification, RxMessage};

/// Driver parameters.
#[derive(Clone, Copy, Debug)]
pub struct DriverConfig {
    /// Transmissions of one message before a NACK becomes a failure (>= 1).
    pub max_attempts: u32,
    /// First resend delay after a `RING_FULL` NACK.
    pub backoff_min: Duration,
    /// Largest resend delay.
    pub backoff_max: Duration,
    /// Most NACKed messages waiting for their resend; beyond it `try_send` would block.
    pub max_queued_retries: usize,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            max_attempts: 100,
            backoff_min: Duration::from_micros(5),
            backoff_max: Duration::from_millis(10),
            max_queued_retries: 64,
        }
    }
}

/// Identity of an endpoint, read from its registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpInfo {
    /// Node coordinate.
    pub coord: u32,
    /// Endpoint index.
    pub ep: u16,
    /// Protection domain.
    pub pdid: u16,
}

impl EpInfo {
    /// This endpoint as a destination.
    pub fn dest(&self) -> Dest {
        Dest {
            coord: self.coord,
            ep: self.ep,
        }
    }

    /// The 48-bit gsas sender id: `pdid << 32 | coord << 10 | ep` (model section 1).
    pub fn sender_id(&self) -> u64 {
        u64::from(self.pdid) << 32 | u64::from(self.coord) << 10 | u64::from(self.ep)
    }
}

/// Counters of an endpoint driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpStats {
    /// Messages posted (including resends).
    pub sent: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// NACKs received.
    pub nacked: u64,
    /// Resends made.
    pub resent: u64,
    /// Messages given up on.
    pub failed: u64,
    /// Messages received.
    pub received: u64,
    /// RDMA descriptors posted.
    pub rdma_posted: u64,
}

#[derive(Clone, Copy, Debug)]
struct Shadow {
    dest: Dest,
    len: u8,
    data: [u8; 64],
    tag: u16,
    attempts: u32,
    no_ack: bool,
    live: bool,
    /// Resend after every NACK for a while ([`Endpoint::try_send_persistent`]).
    persist: Persist,
}

/// How long a message is resent after NACKs.
#[derive(Clone, Copy, Debug)]
enum Persist {
    /// Not (the default: `RING_FULL` up to `max_attempts`, nothing else).
    No,
    /// For this long after its first refusal (no clock is read while all goes well).
    For(Duration),
    /// Until then.
    Until(Instant),
}

impl Shadow {
    const EMPTY: Shadow = Shadow {
        dest: Dest { coord: 0, ep: 0 },
        len: 0,
        data: [0; 64],
        tag: 0,
        attempts: 0,
        no_ack: false,
        live: false,
        persist: Persist::No,
    };
}

#[derive(Clone, Copy, Debug)]
struct Retry {
    due: Instant,
    shadow: Shadow,
}

#[derive(Clone, Copy, Debug, Default)]
struct ChState {
    tail: u32,
    done: u32,
}

/// The driver of one endpoint (see the module docs).
#[derive(Debug)]
pub struct Endpoint<R: RegIo> {
    io: R,
    info: EpInfo,
    cfg: DriverConfig,
    tx_tail: u32,
    tx_done: u32,
    nack_seen: u32,
    shadows: [Shadow; TX_DEPTH as usize],
    retries: VecDeque<Retry>,
    failures: VecDeque<TxFailure>,
    rx_cons: u32,
    rx_prod: u32,
    rx_cached: Option<RxMessage>,
    ch: [ChState; RDMA_CHANNELS],
    stats: EpStats,
}

impl<R: RegIo> Endpoint<R> {
    /// Opens the endpoint behind `io`: checks `ID`, `VERSION`, the capabilities and
    /// `EP_STATUS.ENABLED`, reads the identity and takes over the ring counters as they are.
    pub fn open(io: R, cfg: DriverConfig) -> Result<Self, OpenError> {
        let id = io.read32(Map::Regs, off::ID);
        if id != ID_MAGIC {
            return Err(OpenError::BadId(id));
        }
        let version = io.read32(Map::Regs, off::VERSION);
        if version >> 16 != VERSION_MAJOR {
            return Err(OpenError::BadVersion(version));
        }
        let (c0, c1) = (
            io.read32(Map::Regs, off::CAPS0),
            io.read32(Map::Regs, off::CAPS1),
        );
        if c0 & 0x00FF_FFFF != caps0::VALUE || c1 & caps1::MAX_PAYLOAD_MASK < 64 {
            return Err(OpenError::BadCaps {
                caps0: c0,
                caps1: c1,
            });
        }
        if io.read_counter(off::EP_STATUS) & ep_status::ENABLED == 0 {
            return Err(OpenError::Disabled);
        }
        let info = EpInfo {
            coord: io.read32(Map::Regs, off::NODE_COORD) & COORD_MASK,
            ep: (io.read32(Map::Regs, off::EP_ID) & MAX_EP) as u16,
            pdid: io.read32(Map::Regs, off::PDID) as u16,
        };
        let tx_tail = io.read32(Map::Regs, off::TX_TAIL);
        let ch = core::array::from_fn(|c| {
            let tail = io.read32(Map::Regs, off::ch_tail(c));
            ChState { tail, done: tail }
        });
        let rx_cons = io.read32(Map::Regs, off::RX_CONS);
        Ok(Endpoint {
            info,
            cfg: DriverConfig {
                max_attempts: cfg.max_attempts.max(1),
                ..cfg
            },
            tx_tail,
            // Statuses of descriptors posted by an earlier owner are not ours: start at tail.
            tx_done: tx_tail,
            nack_seen: io.read32(Map::Regs, off::TX_NACKS),
            shadows: [Shadow::EMPTY; TX_DEPTH as usize],
            retries: VecDeque::new(),
            failures: VecDeque::new(),
            rx_cons,
            rx_prod: rx_cons,
            rx_cached: None,
            ch,
            stats: EpStats::default(),
            io,
        })
    }

    /// Identity of this endpoint.
    pub fn info(&self) -> EpInfo {
        self.info
    }

    /// The register access (for diagnostics and tests).
    pub fn io(&self) -> &R {
        &self.io
    }

    /// Counters.
    pub fn stats(&self) -> EpStats {
        self.stats
    }

    /// Messages posted whose final status is not known yet, plus queued resends.
    pub fn tx_pending(&self) -> usize {
        self.tx_tail.wrapping_sub(self.tx_done) as usize + self.retries.len()
    }

    /// Whether a TX slot is free without reaping.
    #[inline]
    pub fn tx_slot_free(&self) -> bool {
        self.tx_tail.wrapping_sub(self.tx_done) < TX_DEPTH
    }

    /// Whether [`try_send`](Self::try_send) would post now (reaps statuses first if the
    /// ring looks full).
    pub fn can_send(&mut self) -> bool {
        let free = |e: &Self| e.tx_slot_free() && e.retries.len() < e.cfg.max_queued_retries;
        if !free(self) {
            self.progress();
        }
        free(self)
    }

    /// Next failed message, if any.
    pub fn take_failure(&mut self) -> Option<TxFailure> {
        self.failures.pop_front()
    }

    fn check_dest(dest: Dest) -> Result<(), SendError> {
        if dest.coord & !COORD_MASK != 0 || u32::from(dest.ep) > MAX_EP {
            return Err(SendError::BadDest(dest));
        }
        Ok(())
    }

    /// Posts `data` (1..=64 bytes) to `dest` if a TX slot is free; returns the absolute
    /// TX index. Never waits: [`SendError::WouldBlock`] when the ring is full or too many
    /// resends are queued.
    #[inline]
    pub fn try_send(&mut self, dest: Dest, data: &[u8], tag: u16) -> Result<u32, SendError> {
        self.try_send_with(dest, data.len(), tag, false, |buf| {
            buf.copy_from_slice(data)
        })
    }

    /// As [`try_send`](Self::try_send) with `NO_ACK` (fire and forget: never resent, never
    /// reported as failed).
    pub fn try_send_no_ack(&mut self, dest: Dest, data: &[u8], tag: u16) -> Result<u32, SendError> {
        self.try_send_with(dest, data.len(), tag, true, |buf| buf.copy_from_slice(data))
    }

    /// Posts a `len`-byte message whose bytes `fill` writes (into a staging buffer: device
    /// memory is written only with aligned 64-bit stores).
    #[inline]
    pub fn try_send_with(
        &mut self,
        dest: Dest,
        len: usize,
        tag: u16,
        no_ack: bool,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u32, SendError> {
        self.try_send_inner(dest, len, tag, no_ack, Persist::No, fill)
    }

    /// As [`try_send_with`](Self::try_send_with) for a message that is resent after every
    /// NACK for `deadline` after its first refusal (then it fails with the last reason),
    /// as a reliability layer resends a lost datagram: `RING_FULL` and the other refusals
    /// after the backoff, `UNREACHABLE` (the NI's ack timeout) at once. After a timeout the
    /// message may have arrived (only its ack was lost), so the receiver must discard
    /// duplicates.
    #[inline]
    pub fn try_send_persistent(
        &mut self,
        dest: Dest,
        len: usize,
        tag: u16,
        deadline: Duration,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u32, SendError> {
        self.try_send_inner(dest, len, tag, false, Persist::For(deadline), fill)
    }

    #[inline]
    fn try_send_inner(
        &mut self,
        dest: Dest,
        len: usize,
        tag: u16,
        no_ack: bool,
        persist: Persist,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u32, SendError> {
        if !(1..=64).contains(&len) {
            return Err(SendError::BadLength(len));
        }
        Self::check_dest(dest)?;
        if !self.tx_slot_free() || self.retries.len() >= self.cfg.max_queued_retries {
            self.progress();
            if !self.tx_slot_free() || self.retries.len() >= self.cfg.max_queued_retries {
                return Err(SendError::WouldBlock);
            }
        }
        let mut shadow = Shadow {
            dest,
            len: len as u8,
            tag,
            attempts: 1,
            no_ack,
            live: true,
            persist,
            ..Shadow::EMPTY
        };
        fill(&mut shadow.data[..len]);
        Ok(self.post(shadow))
    }

    /// Waits (bounded by `timeout`: a few spins, then yielding the CPU for 2 ms, then
    /// sleeps growing to 1 ms) for a TX slot and posts.
    pub fn send_timeout(
        &mut self,
        dest: Dest,
        data: &[u8],
        tag: u16,
        timeout: Duration,
    ) -> Result<u32, SendError> {
        let start = Instant::now();
        let mut pacer = Pacer::new();
        loop {
            match self.try_send(dest, data, tag) {
                Err(SendError::WouldBlock) => {}
                other => return other,
            }
            if start.elapsed() >= timeout {
                return Err(SendError::Timeout {
                    dest,
                    waited: start.elapsed(),
                });
            }
            pacer.pause();
        }
    }

    /// Writes the slot and descriptor and rings the doorbell (section 5, steps 2-4).
    #[inline]
    fn post(&mut self, shadow: Shadow) -> u32 {
        let index = self.tx_tail;
        let j = (index % TX_DEPTH) as usize;
        let len = usize::from(shadow.len);
        let slot = off::tx_slot(j);
        for (k, chunk) in shadow.data[..len.div_ceil(8) * 8]
            .chunks_exact(8)
            .enumerate()
        {
            let word = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
            self.io.write64(Map::Pktz, slot + 8 * k, word);
        }
        self.io.write32(
            Map::Pktz,
            off::tx_desc(j, 0),
            txd::w0(shadow.dest.coord, u32::from(shadow.dest.ep)),
        );
        self.io.write32(
            Map::Pktz,
            off::tx_desc(j, 1),
            txd::w1(len as u32, shadow.no_ack, shadow.tag),
        );
        self.tx_tail = index.wrapping_add(1);
        self.shadows[j] = shadow;
        self.stats.sent += 1;
        self.io.doorbell(off::TX_TAIL, self.tx_tail);
        index
    }

    fn backoff(&self, attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(20);
        self.cfg
            .backoff_min
            .saturating_mul(1 << shift)
            .min(self.cfg.backoff_max)
    }

    /// Reaps final TX statuses, schedules or gives up on NACKed messages, acknowledges the
    /// NACK count and posts resends that are due. Returns the statuses reaped.
    pub fn progress(&mut self) -> usize {
        let reaped = self.reap_tx();
        if self.retries.is_empty() {
            return reaped;
        }
        let now = Instant::now();
        while self.tx_slot_free() {
            match self.retries.front() {
                Some(r) if r.due <= now => {
                    let mut shadow = self.retries.pop_front().expect("front exists").shadow;
                    shadow.attempts += 1;
                    self.stats.resent += 1;
                    self.post(shadow);
                }
                _ => break,
            }
        }
        reaped
    }

    fn reap_tx(&mut self) -> usize {
        let done = self.io.read_counter(off::TX_DONE);
        let mut reaped = 0;
        while self.tx_done != done && self.tx_done != self.tx_tail {
            let index = self.tx_done;
            let j = (index % TX_DEPTH) as usize;
            let seq = self.io.read32(Map::Pktz, off::tx_desc(j, 3));
            let w2 = self.io.read32(Map::Pktz, off::tx_desc(j, 2));
            debug_assert_eq!(seq, index, "TX status write-back out of order");
            let mut shadow = std::mem::replace(&mut self.shadows[j], Shadow::EMPTY);
            self.tx_done = index.wrapping_add(1);
            reaped += 1;
            if !shadow.live {
                continue;
            }
            match w2 & txd::STATUS_MASK {
                tx_status::NACKED => {
                    self.stats.nacked += 1;
                    let reason = (w2 >> txd::REASON_SHIFT) as u8;
                    let now = Instant::now();
                    if let Persist::For(d) = shadow.persist {
                        shadow.persist = Persist::Until(now + d);
                    }
                    let persists = matches!(shadow.persist, Persist::Until(u) if now < u);
                    let retry = persists
                        || (reason == nack::RING_FULL && shadow.attempts < self.cfg.max_attempts);
                    if retry {
                        // After an ack timeout the wait is behind us: resend at once.
                        let due = if reason == nack::UNREACHABLE {
                            now
                        } else {
                            now + self.backoff(shadow.attempts.min(self.cfg.max_attempts))
                        };
                        // Keep the queue sorted by due time (backoffs differ per message).
                        let at = self
                            .retries
                            .iter()
                            .position(|r| r.due > due)
                            .unwrap_or(self.retries.len());
                        self.retries.insert(at, Retry { due, shadow });
                    } else {
                        self.stats.failed += 1;
                        let failure = TxFailure {
                            dest: shadow.dest,
                            reason,
                            attempts: shadow.attempts,
                            tag: shadow.tag,
                        };
                        log::debug!("exanet {}: {failure}", self.info.dest());
                        self.failures.push_back(failure);
                    }
                }
                _ => self.stats.acked += 1,
            }
        }
        let nacks = self.io.read_counter(off::TX_NACKS);
        if nacks != self.nack_seen {
            self.nack_seen = nacks;
            self.io.release_counter(off::TX_NACK_SEEN, nacks);
        }
        reaped
    }

    /// NACKed messages waiting for their resend (no interrupt announces when one is due:
    /// an owner that sleeps on the interrupt line keeps polling while there are any).
    pub fn retries_pending(&self) -> usize {
        self.retries.len()
    }

    /// Waits (bounded) until every posted message has a final status and no resend is
    /// queued. Returns false on timeout.
    pub fn wait_tx_idle(&mut self, timeout: Duration) -> bool {
        let start = Instant::now();
        let mut pacer = Pacer::new();
        loop {
            self.progress();
            if self.tx_pending() == 0 {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            pacer.pause();
        }
    }
}
