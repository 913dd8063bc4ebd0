//! Reliability layer: exactly-once packet delivery over a transport that drops, duplicates
//! or reorders (UDP).
//!
//! # What it is
//!
//! [`Reliable<T, W>`](Reliable) wraps a [`Transport`](crate::transport::Transport) and is a
//! `Transport` itself, with the same `Peer` type and [`Capabilities::reliable`] set. Every
//! packet sent through it is delivered to the peer exactly once, or the peer is reported
//! unreachable. Packets travel in *frames* (format in [`frame`]): `send` appends packets to
//! the peer's open frame until the frame is full or [`flush`](crate::transport::Transport::flush)
//! / [`poll`](crate::transport::Transport::poll) is called. Each data frame has a 32-bit
//! sequence number, is kept until acknowledged and retransmitted on timeout. Acks ride on
//! data frames going the other way and are otherwise sent on their own after `ack_delay_ns`,
//! at once when a gap or a duplicate is seen, or after every 4 to 8 unacknowledged frames
//! (a quarter of the window, within those bounds).
//!
//! **Order**: packets of one frame are delivered in the order sent; frames may be delivered
//! out of order (a frame is handed over as soon as it arrives, never held for a missing
//! predecessor). The layer therefore reports [`Ordering::Unordered`]: per-peer order is
//! *not* guaranteed.
//!
//! # What it is not
//!
//! No fragmentation (packets above the reported MTU are refused with `TooLarge`), no
//! congestion control beyond the fixed window, no encryption or authentication (a malicious
//! peer can confuse its own session but not another peer's, and no input makes the layer
//! panic), and no clock: time comes from `poll(now_ns)` (or [`Reliable::set_now`]); `send`
//! and `recv` use the last time given, so a caller that sends long after its last `poll`
//! should call `set_now` first.
//!
//! Round-trip samples come only from frames acknowledged after a single transmission
//! (Karn's rule): an ack of a retransmitted frame cannot tell which copy it answers.
//!
//! # Exactly once
//!
//! * A packet is carried by exactly one data frame, identified by (sender epoch, sequence
//!   number). Retransmissions resend that same frame.
//! * The receiver keeps, per peer, a cumulative ack and a 64-frame bitmap above it. A data
//!   frame is delivered only if its number is above the cumulative ack and not in the
//!   bitmap; it is recorded in the same step. Anything else is a duplicate: dropped, counted,
//!   and re-acknowledged, never delivered again.
//! * The receiver forgets a sequence number only when the cumulative ack passes it, and the
//!   cumulative ack passes only numbers that arrived or that the sender promised never to
//!   send again (the `base` field: every number below it was acknowledged or abandoned).
//! * The sender has at most `W <= 64` frames outstanding, so every number it may still send
//!   lies within 64 of the receiver's cumulative ack: the bitmap covers it and 32-bit
//!   wraparound comparisons stay exact.
//! * A sender keeps retransmitting a frame until it is acknowledged or `deadline_ns` passes,
//!   when the peer is declared unreachable ([`PeerEvent::Unreachable`]; sends to it fail with
//!   `Unreachable`). So every packet is delivered once, or its peer is reported.
//! * Epochs: each endpoint has a non-zero 64-bit epoch, larger after every restart (e.g.
//!   boot time in ns, or a persistent counter). Frames carry the sender's epoch and the
//!   receiver's epoch as the sender knows it. A frame with a newer sender epoch resets the
//!   peer's state (its frames to the old incarnation are abandoned,
//!   [`PeerEvent::Restarted`]); a frame with an older sender epoch, or addressed to an older
//!   epoch of the receiver, is dropped (and answered with an ack carrying the current epoch,
//!   so the sender learns of the restart). A frame the sender sent before it had ever heard
//!   from the receiver carries receiver epoch 0 and is accepted by any incarnation: like TCP,
//!   this assumes such a frame does not outlive a restart in the network.
//!
//! Consequently a request is *executed* at most once by a service above this layer, however
//! often the network or the requester repeats it.
//!
//! # Reply cache
//!
//! When the requester retransmits a request because the reply frame was lost, waiting for
//! the reply's own timeout would add a second timeout to the latency. Each delivered data
//! frame `s` from a peer is therefore remembered in a per-peer cache of `W` entries, and bound
//! to the next frame this endpoint fills for that peer (the frame carrying the reply, when a
//! service answers before sending anything else to that peer). When a duplicate of `s`
//! arrives while that reply frame is still unacknowledged and was last sent at least one
//! smoothed round-trip and at least half the minimum retransmission timeout ago, the reply
//! frame is retransmitted at once (counted in [`Stats::reply_cache_hits`]). Correctness
//! never depends on the cache: a wrong or evicted binding only costs a redundant frame,
//! which the peer drops as a duplicate.
//!
//! The floor of `min_rto / 2` keeps the cache from feeding on itself. A requester
//! retransmits only after a timeout of at least `min_rto`, so a duplicate caused by a lost
//! reply always finds the reply that old. A duplicate that arrives sooner comes from a
//! spurious timeout (the peer was descheduled); resending then would hand the peer a
//! duplicate of the reply, which under ping-pong traffic is bound to the peer's *next*
//! request, which it would resend in turn, and so on: on loopback, where the smoothed
//! round-trip time is a few microseconds (or 0, when acks are processed without a fresh
//! `poll`), one spurious timeout used to start an endless echo of duplicates that stalled
//! the connection for seconds.
//!
//! # Lazy packets
//!
//! [`send_lazy`](crate::transport::Transport::send_lazy) appends a packet like `send`, but
//! a frame that holds only such packets is not closed by `flush`: it waits for company, so
//! that many small packets nobody waits on urgently (a service's acknowledgements of
//! non-final bulk-write fragments) share one datagram instead of one each. It goes out as
//! soon as
//!
//! * an ack is owed to the peer at once (every 4 to 8 unacknowledged frames, a gap, a
//!   duplicate):
//!   the frame carries that ack instead of a pure ack frame,
//! * a delayed ack falls due, or `ack_delay_ns` passed since the frame's first packet (at a
//!   `poll`; the same bound as a delayed ack),
//! * a packet sent with `send` joins it (the frame then leaves at the next `flush`), or it
//!   is full.
//!
//! Once closed, a lazy frame is an ordinary data frame: numbered, kept, retransmitted, and
//! bound in the reply cache to the requests it answers. Laziness delays a packet by at most
//! `ack_delay_ns` and changes nothing in the exactly-once argument above.
//!
//! # Resources
//!
//! Caller-provided, fixed at construction: a peer table of [`PeerSlot`]s (one per peer,
//! O(1) lookup through a [`PeerIndex`]: [`DenseIndex`] for integer peers, [`HashIndex`]
//! for hashable ones) and a byte buffer holding one receive buffer of the inner MTU plus a
//! pool of frame buffers shared by all peers (see [`buffer_len`]). Each is a [`Storage`]:
//! lent as `&mut` (an array, slice or `Vec`; the layer borrows it, `no_std`) or, with the
//! `std` feature, handed over as a `Vec` or `Box<[_]>` (the layer owns it and frees it when
//! dropped, so it can be a `Reliable<'static, ..>`; the receive buffer is then split off into
//! an allocation of its own when the layer is built). Nothing is allocated after that. An
//! open or unacknowledged frame holds one buffer. When the peer's window or the pool is full, `send` returns
//! `WouldBlock`: back-pressure until acks free space. The window of a peer starts at 4
//! frames and grows by one per frame it acknowledges, up to `Config::window`; a
//! retransmission timeout takes it back to 4 (TCP's slow start). So a peer that never
//! acknowledges holds at most 4 frames of the shared pool, and the others keep theirs.
//! A receiver whose answers to a peer pile up can also stop taking that peer's new
//! frames ([`Reliable::pause_receive`]: they are dropped unacknowledged and come again).
//!
//! # Admission, refusals and freeing slots
//!
//! A peer gets a slot only when its index says so ([`PeerIndex::admit`], asked on the first
//! frame received from it and before the first send to it): a service admits only peers
//! whose job key it knows, and bounds each job's share. A frame whose sender is refused is
//! dropped and counted by reason (`Stats::refused_*`); a *data* frame is also answered
//! with a refusal frame (at most 64 per 100 ms, so a flood cannot turn the layer into an
//! amplifier), which names the reason and the figures. The sender's layer accepts a
//! refusal only from a peer it has frames outstanding to and only when it echoes its
//! epoch; the peer then fails as by a deadline, but at once and with the reason
//! ([`PeerEvent::Refused`]).
//!
//! Before admission the index may ask an unknown sender to prove its address
//! ([`PeerIndex::challenge`]): its frame is dropped (`Stats::challenged`) and a data frame
//! answered with a challenge carrying a cookie; the sender's layer repeats its frames at
//! once echoing the cookie (`Stats::challenges_received`, no event), and the index
//! admits the echo. Nothing is kept for a sender that never echoes (one that forged its
//! source address never sees the cookie). See the [frame docs](frame).
//!
//! Slots are freed by [`Reliable::release_peer`] (the owner's decision, e.g. a job
//! reclaimed, or one that ended cleanly once its peers were closed for long enough; see
//! "Closing a peer"), by [`Reliable::release_silent`] (idle peers not heard
//! from for a given time), or by eviction of a peer the index names that is idle or has
//! been silent for long enough ([`Admission::Replace`]). A freed peer that shows up again gets a fresh slot: its frames
//! carry its cumulative ack of ours, and the new slot continues our numbering just above
//! it, so the peer takes our next frame as new. The peer's old frames are forgotten with
//! the slot; frames it already had acknowledged are never sent again by an honest peer,
//! and one whose ack was lost is retransmitted within the deadline, so callers free only
//! peers silent for longer than `deadline_ns` (and assume, like TCP, that the network does
//! not hold a datagram that long).
//!
//! # Closing a peer (TIME_WAIT)
//!
//! The end of a session is a distributed protocol: when the owner ends its session with a
//! peer (a service whose job ended on its node), the peer's last frames may still be on
//! their way: a retransmitted request whose reply was lost, a duplicate, the ack of our
//! last reply. Freeing the slot at once would turn them into frames of a stranger (a
//! refusal, or worse, a request taken as new). [`Reliable::close_peer`] keeps the slot
//! instead, closed for new data, until the owner frees it (after at least `deadline_ns`,
//! the longest a peer retransmits):
//!
//! * duplicates of frames delivered before are acknowledged again and answered from the
//!   reply cache, as for an open peer: the peer gets the reply it missed;
//! * acknowledgements free our frames; our frames (replies already made) are still sent
//!   and retransmitted, but one unacknowledged at the deadline is dropped without
//!   [`PeerEvent::Unreachable`] (the peer most likely left and its last ack was lost;
//!   counted in [`Stats::closed_expired`]);
//! * a new data frame (never delivered) is neither delivered nor acknowledged: it is
//!   answered with the refusal given to `close_peer` (rate-limited like every refusal), so
//!   its sender learns at once that what it carries was never delivered
//!   ([`RefusalReason::JobEnded`] for an ended job), instead of retransmitting until its
//!   deadline.
//!
//! Exactly once still holds: a closed slot delivers nothing, and it keeps the receive
//! window that tells duplicates from new frames for as long as the peer may retransmit.
//!
//! # Thread-safety
//!
//! A plain single-owner value (all methods take `&mut self`); `Send` when the inner
//! transport, the peer type and the index are. Share it between threads behind a lock.
//!
//! # Example
//!
//! ```
//! use gsas_core::reliable::{Config, PeerSlot, Reliable};
//! use gsas_core::transport::Transport;
//! use gsas_core::transport::loopback::{LoopbackConfig, LoopbackHub};
//!
//! let mut net = vec![0u8; 2 * 16 * 1100];
//! let hub = LoopbackHub::<2>::new(LoopbackConfig::new(1024), &mut net).unwrap();
//! let mut peers_a = [const { PeerSlot::<usize, 8>::new() }; 2];
//! let mut peers_b = [const { PeerSlot::<usize, 8>::new() }; 2];
//! let (mut buf_a, mut buf_b) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
//! let ep = |i| hub.endpoint(i).unwrap();
//! let mut a = Reliable::<_, 8>::new(ep(0), Config::new(1), &mut peers_a, &mut buf_a).unwrap();
//! let mut b = Reliable::<_, 8>::new(ep(1), Config::new(2), &mut peers_b, &mut buf_b).unwrap();
//! a.send(1, 5, |buf| buf.copy_from_slice(b"hello")).unwrap();
//! a.flush().unwrap();
//! let got = b.recv(|from, data| (from, data.to_vec())).unwrap();
//! assert_eq!(got, Some((0, b"hello".to_vec())));
//! ```
//!
//! A service answers on the same layer: `poll(now)`, then for each packet from `recv` send
//! the reply to the same peer, then `flush()`. The reply then piggybacks the ack of the
//! request and the reply cache applies.

pub mod frame;
mod index;
mod layer;
mod peer;
mod pool;
mod rtt;
pub mod seq;
mod storage;
mod window;

pub use frame::RefusalReason;
pub use index::{Admission, DenseIndex, HashIndex, PeerIndex};
pub use layer::Reliable;
pub use peer::PeerSlot;
pub use storage::Storage;
pub use window::MAX_WINDOW;

#[cfg(doc)]
use crate::transport::{Capabilities, Ordering};

/// Settings of a [`Reliable`] layer. Times are nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Config {
    /// This endpoint's epoch: non-zero, and larger after every restart of the endpoint.
    pub epoch: u64,
    /// Frames in flight per peer; `None` means `W`. At most `W`.
    pub window: Option<usize>,
    /// Largest frame sent; `None` means the inner MTU. The packet MTU of the layer is this
    /// minus 42 bytes (header and one packet prefix).
    pub max_frame: Option<usize>,
    /// Longest time an ack is held back hoping to ride on a data frame.
    pub ack_delay_ns: u64,
    /// Retransmission timeout before the first round-trip sample.
    pub initial_rto_ns: u64,
    /// Lower bound of the retransmission timeout; must exceed `ack_delay_ns`.
    pub min_rto_ns: u64,
    /// Upper bound of the retransmission timeout, also after backoff.
    pub max_rto_ns: u64,
    /// A frame unacknowledged this long after it was closed makes its peer unreachable.
    pub deadline_ns: u64,
}

impl Config {
    /// Defaults for a LAN: window `W`, frames of the inner MTU, 200 us ack delay, RTO 10 ms
    /// initially and within 1 ms ..= 500 ms, deadline 10 s.
    pub const fn new(epoch: u64) -> Self {
        Config {
            epoch,
            window: None,
            max_frame: None,
            ack_delay_ns: 200_000,
            initial_rto_ns: 10_000_000,
            min_rto_ns: 1_000_000,
            max_rto_ns: 500_000_000,
            deadline_ns: 10_000_000_000,
        }
    }
}

/// Why a [`Reliable`] layer could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ConfigError {
    /// The epoch is 0 (reserved for "unknown").
    ZeroEpoch,
    /// The window is 0 or above `W`.
    BadWindow {
        /// The configured window.
        window: usize,
        /// `W`, the largest window.
        max: usize,
    },
    /// The frame size is above the inner MTU.
    FrameAboveMtu {
        /// The configured frame size.
        frame: usize,
        /// The inner transport's MTU.
        mtu: usize,
    },
    /// The frame size leaves no room for a packet (at least 43 bytes are needed).
    FrameTooSmall(usize),
    /// The timers are inconsistent: `0 < ack_delay < min_rto <= initial_rto <= max_rto` and
    /// `deadline > 0` must hold.
    BadTimers,
    /// The peer table is empty or too large.
    BadPeerTable(usize),
    /// The buffer does not hold the receive buffer and one frame.
    BufferTooSmall {
        /// Bytes needed at least.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::ZeroEpoch => f.write_str("the epoch must not be 0"),
            ConfigError::BadWindow { window, max } => {
                write!(f, "window {window} is not in 1..={max}")
            }
            ConfigError::FrameAboveMtu { frame, mtu } => {
                write!(f, "frame size {frame} exceeds the inner MTU {mtu}")
            }
            ConfigError::FrameTooSmall(frame) => {
                write!(f, "frame size {frame} leaves no room for a packet (minimum 43)")
            }
            ConfigError::BadTimers => f.write_str(
                "timers must satisfy 0 < ack_delay < min_rto <= initial_rto <= max_rto and deadline > 0",
            ),
            ConfigError::BadPeerTable(n) => write!(f, "peer table of {n} slots (need 1..2^32-1)"),
            ConfigError::BufferTooSmall { needed, got } => write!(
                f,
                "buffer of {got} bytes is too small: the receive buffer and one frame need {needed}"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ConfigError {}

/// Counters of a [`Reliable`] layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stats {
    /// Packets accepted by `send`.
    pub packets_sent: u64,
    /// Packets handed to `recv` callers.
    pub packets_delivered: u64,
    /// Data frames transmitted for the first time.
    pub frames_sent: u64,
    /// Data frame retransmissions (timeouts and reply-cache hits).
    pub retransmissions: u64,
    /// Frames of ours acknowledged by their peer.
    pub frames_acked: u64,
    /// Pure ack frames sent.
    pub acks_sent: u64,
    /// Well-formed frames received.
    pub frames_received: u64,
    /// Duplicate data frames dropped (and re-acknowledged).
    pub duplicates: u64,
    /// Reply frames retransmitted at once because a request arrived again.
    pub reply_cache_hits: u64,
    /// Frames dropped as malformed or larger than the receive buffer.
    pub bad_frames: u64,
    /// Frames dropped for an old sender epoch or a wrong receiver epoch.
    pub stale_frames: u64,
    /// Frames dropped because their sender has no slot and was refused one (the sum of
    /// the seven `refused_*` counters).
    pub unknown_peers: u64,
    /// Frames refused a slot: the index knows no job for the sender.
    pub refused_unknown_job: u64,
    /// Frames refused a slot: the sender's job has all the peers it may have.
    pub refused_job_full: u64,
    /// Frames refused a slot: the peer table is full.
    pub refused_table_full: u64,
    /// Frames refused a slot: the share of peers without a job is full.
    pub refused_host_full: u64,
    /// Frames refused a slot: the sender's job ended here.
    pub refused_job_ended: u64,
    /// Frames refused a slot: the user of the sender's job has all the peers one user may
    /// have.
    pub refused_user_full: u64,
    /// Frames refused a slot: the sender's job was reclaimed here.
    pub refused_job_reclaimed: u64,
    /// New data frames from a closed peer ([`Reliable::close_peer`]), refused and not
    /// delivered.
    pub closed_refused: u64,
    /// Closed peers whose frames were still unacknowledged at the deadline: the frames
    /// were dropped, without an event.
    pub closed_expired: u64,
    /// Refusals sent (at most 64 per 100 ms; only data frames are answered).
    pub refusals_sent: u64,
    /// Refusals received that failed a peer ([`PeerEvent::Refused`]).
    pub refusals_received: u64,
    /// Challenges received ([`RefusalReason::Challenge`]) that had our frames repeated
    /// with their cookie (not counted in `refusals_received`).
    pub challenges_received: u64,
    /// Frames of senders without a slot dropped because they did not echo a valid cookie
    /// (the index asked for one, [`PeerIndex::challenge`]); a data frame is answered with
    /// a challenge (counted in `refusals_sent`).
    pub challenged: u64,
    /// Of `challenged`: frames that echoed a cookie that was not (or no longer) valid.
    pub bad_cookies: u64,
    /// Frames not opened because the index kept the peer's share of the pool
    /// ([`PeerIndex::may_take_frame`]); the packet waits (`WouldBlock`).
    pub pool_share_full: u64,
    /// New data frames dropped unacknowledged because their peer was paused
    /// ([`Reliable::pause_receive`]).
    pub paused_drops: u64,
    /// Refusals received and ignored (wrong epoch, or nothing was sent to that peer).
    pub refusals_ignored: u64,
    /// Peer slots freed ([`Reliable::release_peer`], [`Reliable::release_silent`], or
    /// evicted for a newcomer).
    pub peers_released: u64,
    /// Data frames too far ahead of the receive window.
    pub out_of_window: u64,
    /// Acks ignored because they acknowledge frames never sent.
    pub bad_acks: u64,
    /// Peers seen with a new epoch.
    pub peer_resets: u64,
    /// Peers declared unreachable.
    pub peers_failed: u64,
    /// `send` calls refused because the peer's window was full.
    pub window_full: u64,
    /// `send` calls refused because the frame pool was empty.
    pub pool_empty: u64,
}

/// Something that happened to a peer, reported once by [`Reliable::next_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PeerEvent<P> {
    /// A frame stayed unacknowledged past the deadline: the peer's unacknowledged packets
    /// were discarded and `send` to it fails with `Unreachable` until
    /// [`Reliable::reset_peer`] or until it shows up with a new epoch.
    Unreachable(P),
    /// The peer restarted (a frame with a newer epoch arrived): packets not acknowledged by
    /// its previous incarnation were discarded.
    Restarted(P),
    /// The peer refused to keep state for this endpoint (a service whose table, or whose
    /// share for the job, is full; or that knows no such job): its packets were discarded
    /// and `send` to it fails with `Unreachable`, as after [`PeerEvent::Unreachable`].
    Refused(P, Refusal),
}

/// Why a peer was refused a slot, with the figures of the limit reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Refusal {
    /// Which limit.
    pub reason: RefusalReason,
    /// Peers in use under that limit.
    pub in_use: u32,
    /// The limit.
    pub limit: u32,
}

impl Refusal {
    /// A challenge carrying `cookie` (its high half in `in_use`, the low one in `limit`).
    pub const fn challenge(cookie: u64) -> Refusal {
        Refusal {
            reason: RefusalReason::Challenge,
            in_use: (cookie >> 32) as u32,
            limit: cookie as u32,
        }
    }

    /// The cookie of a [`RefusalReason::Challenge`].
    pub const fn cookie(&self) -> u64 {
        ((self.in_use as u64) << 32) | self.limit as u64
    }
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.reason {
            RefusalReason::UnknownJob
            | RefusalReason::JobEnded
            | RefusalReason::JobReclaimed
            | RefusalReason::Challenge => write!(f, "{}", self.reason),
            _ => write!(
                f,
                "{} ({} of {} in use)",
                self.reason, self.in_use, self.limit
            ),
        }
    }
}

/// Bytes of buffer a [`Reliable`] needs to hold `frames` frames of `frame_size` bytes, with
/// `inner_mtu` the inner transport's MTU (for the receive buffer). Give at least
/// `peers * window` frames for full windows to every peer at once.
pub const fn buffer_len(inner_mtu: usize, frame_size: usize, frames: usize) -> usize {
    inner_mtu.saturating_sub(frame::HEADER_LEN)
        + frames * frame_size.saturating_sub(frame::HEADER_LEN)
}
