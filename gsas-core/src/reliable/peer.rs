//! The state the reliability layer keeps per peer, in caller-provided table slots.

use super::rtt::RttEstimator;
use super::seq::Seq;
use super::window::{RxWindow, TxWindow};

/// A time that never comes.
pub(crate) const NEVER: u64 = u64::MAX;
/// End of the intrusive active list.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// Event bit: the peer was declared unreachable.
pub(crate) const EVENT_UNREACHABLE: u8 = 0x01;
/// Event bit: the peer restarted (new epoch).
pub(crate) const EVENT_RESTARTED: u8 = 0x02;
/// Frames a peer may have in our send window (open, queued or in flight) before it
/// acknowledged any: it grows by one per frame acknowledged, up to the window, and falls
/// back to this after a retransmission timeout (TCP's slow start). A peer that never
/// acknowledges thus holds at most this many frames of the shared pool.
pub(crate) const INITIAL_CWND: u16 = 4;

/// Event bit: the peer refused us a slot ([`PeerSlot::refusal`] says why).
pub(crate) const EVENT_REFUSED: u8 = 0x04;

/// State of a reply-cache entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CacheState {
    Empty,
    /// A data frame was delivered; its answer is the next frame this endpoint fills.
    Awaiting,
    /// The answer went into frame `mine`.
    Answered,
}

/// One reply-cache entry: the peer's data frame `theirs` was answered by our frame `mine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheEntry {
    pub(crate) state: CacheState,
    pub(crate) theirs: Seq,
    pub(crate) mine: Seq,
}

impl CacheEntry {
    pub(crate) const EMPTY: CacheEntry = CacheEntry {
        state: CacheState::Empty,
        theirs: Seq(0),
        mine: Seq(0),
    };
}

/// One slot of the peer table a [`Reliable`](super::Reliable) works in.
///
/// The caller provides the table as a [`Storage`](super::Storage) (`&mut` an array, slice
/// or `Vec`, or with the `std` feature a `Vec` given by value), so the number of peers is
/// chosen at run time without allocation in the core. Create slots with
/// [`PeerSlot::new`]; the layer resets them when it is built. The contents are private.
#[derive(Clone, Debug)]
pub struct PeerSlot<P, const W: usize> {
    /// The peer's transport address, once it was used.
    pub(crate) addr: Option<P>,
    /// The peer's epoch as last seen; 0 = never heard from.
    pub(crate) their_epoch: u64,
    pub(crate) failed: bool,
    /// Unreported events (`EVENT_*` bits).
    pub(crate) events: u8,
    /// Why the peer refused us, with [`EVENT_REFUSED`].
    pub(crate) refusal: Option<super::Refusal>,
    /// When the last frame from the peer arrived (or the slot was assigned).
    pub(crate) last_heard: u64,
    /// Closed for new data ([`Reliable::close_peer`](super::Reliable::close_peer)): new
    /// data frames are answered with this refusal.
    pub(crate) closed: Option<super::Refusal>,
    /// Frames the peer may have in our send window now (see [`INITIAL_CWND`]).
    pub(crate) cwnd: u16,
    /// New data frames of the peer are not taken ([`Reliable::pause_receive`](super::Reliable::pause_receive)).
    pub(crate) rx_paused: bool,
    /// The cookie the peer challenged us with (0: none): our data frames echo it (without
    /// an ack) until a frame of the peer arrives.
    pub(crate) cookie: u64,

    pub(crate) tx: TxWindow<W>,
    /// Whether the newest window entry is an open frame.
    pub(crate) open: bool,
    /// Payload bytes in the open frame.
    pub(crate) open_len: usize,
    /// The open frame holds only lazy packets and may stay open past `flush` until this
    /// time; [`NEVER`] when there is no such frame.
    pub(crate) hold_until: u64,
    pub(crate) rtt: RttEstimator,

    pub(crate) rx: RxWindow,
    /// When a delayed ack is due; [`NEVER`] when none is owed.
    pub(crate) ack_due: u64,
    /// Data frames received since the last ack went out.
    pub(crate) rx_unacked: u32,

    /// Reply cache, indexed by the peer's sequence number modulo `W`.
    pub(crate) cache: [CacheEntry; W],
    /// Cache entries in state `Awaiting` (bit per entry; `W <= 64`).
    pub(crate) awaiting: u64,

    /// Member of the active list (has frames, an open frame or an ack owed).
    pub(crate) active: bool,
    pub(crate) next_active: u32,
}

impl<P: Copy, const W: usize> PeerSlot<P, W> {
    /// An unused slot.
    pub const fn new() -> Self {
        PeerSlot {
            addr: None,
            their_epoch: 0,
            failed: false,
            events: 0,
            refusal: None,
            last_heard: 0,
            closed: None,
            cwnd: INITIAL_CWND,
            rx_paused: false,
            cookie: 0,
            tx: TxWindow::new(Seq(0)),
            open: false,
            open_len: 0,
            hold_until: NEVER,
            rtt: RttEstimator::new(0),
            rx: RxWindow::new(Seq(0)),
            ack_due: NEVER,
            rx_unacked: 0,
            cache: [CacheEntry::EMPTY; W],
            awaiting: 0,
            active: false,
            next_active: NO_SLOT,
        }
    }

    /// Resets the slot for a layer with this first sequence number and initial timeout.
    pub(crate) fn reset(&mut self, first: Seq, initial_rto: u64) {
        *self = PeerSlot::new();
        self.tx = TxWindow::new(first);
        self.rtt = RttEstimator::new(initial_rto);
    }

    /// Nothing to do for this peer until a new event.
    pub(crate) fn is_idle(&self) -> bool {
        self.tx.is_empty() && !self.open && self.ack_due == NEVER
    }

    /// The slot may be freed without losing anything: idle and no event unreported.
    pub(crate) fn is_releasable(&self) -> bool {
        self.is_idle() && self.events == 0
    }

    /// Forgets the reply cache.
    pub(crate) fn clear_cache(&mut self) {
        self.cache = [CacheEntry::EMPTY; W];
        self.awaiting = 0;
    }
}

impl<P: Copy, const W: usize> Default for PeerSlot<P, W> {
    fn default() -> Self {
        Self::new()
    }
}
