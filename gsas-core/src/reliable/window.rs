//! Receive and send windows of one peer: pure bookkeeping, no I/O.
//!
//! [`RxWindow`] remembers which frames arrived (a cumulative ack plus a 64-bit bitmap above
//! it) and classifies each arriving sequence number as new or duplicate. [`TxWindow`] is the
//! ring of frames sent but not yet acknowledged, indexed by `seq % W`, so every lookup is
//! O(1) and an ack walks only the frames in flight.

use super::frame::AckRepr;
use super::seq::Seq;

/// Largest window, in frames: the width of the selective-ack bitmap.
pub const MAX_WINDOW: usize = 64;

/// What the receive window says about an arriving data frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RxVerdict {
    /// Not seen before: deliver it. `ack_now` is true when the frame opens the first hole
    /// (frames before it are missing and nothing was missing so far) or fills the hole at
    /// the cumulative ack: the sender should hear about either at once. Further frames
    /// arriving while a hole is known are acknowledged with the normal delay.
    New { ack_now: bool },
    /// At or below the cumulative ack, or already recorded: drop and re-ack.
    Duplicate,
    /// More than [`MAX_WINDOW`] above the cumulative ack: an honest sender never does this.
    OutOfWindow,
}

/// Frames received from one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RxWindow {
    /// Every frame up to and including `cum` arrived (or was abandoned by the sender).
    cum: Seq,
    /// Bit `i`: frame `cum + 1 + i` arrived. Bit 0 is always clear.
    rcvd: u64,
}

impl RxWindow {
    /// A window that expects `base` next.
    pub(crate) const fn new(base: Seq) -> Self {
        RxWindow {
            cum: base.sub(1),
            rcvd: 0,
        }
    }

    pub(crate) fn ack(&self) -> AckRepr {
        AckRepr {
            cum: self.cum,
            sack: self.rcvd,
        }
    }

    /// Moves `cum + 1 .. base` forward as well: the sender promises never to send any of
    /// them again (they were acknowledged, or abandoned after a restart of this endpoint).
    pub(crate) fn advance_to(&mut self, base: Seq) {
        let d = base.sub(1).distance(self.cum);
        if d <= 0 {
            return;
        }
        self.rcvd = if d >= 64 { 0 } else { self.rcvd >> d };
        self.cum = base.sub(1);
        self.normalize();
    }

    /// Records the arrival of `seq` and says whether it is new.
    pub(crate) fn accept(&mut self, seq: Seq) -> RxVerdict {
        let verdict = self.peek(seq);
        if let RxVerdict::New { .. } = verdict {
            // `peek` said `seq` lies 1..=64 above the cumulative ack.
            self.rcvd |= 1u64 << (seq.distance(self.cum) - 1);
            self.normalize();
        }
        verdict
    }

    /// What [`accept`](Self::accept) would say about `seq`, without recording it.
    pub(crate) fn peek(&self, seq: Seq) -> RxVerdict {
        let d = seq.distance(self.cum);
        if d <= 0 {
            return RxVerdict::Duplicate;
        }
        if d as usize > MAX_WINDOW {
            return RxVerdict::OutOfWindow;
        }
        let bit = 1u64 << (d - 1);
        if self.rcvd & bit != 0 {
            return RxVerdict::Duplicate;
        }
        RxVerdict::New {
            ack_now: (self.rcvd != 0) == (d == 1),
        }
    }

    fn normalize(&mut self) {
        let n = self.rcvd.trailing_ones();
        self.rcvd = if n >= 64 { 0 } else { self.rcvd >> n };
        self.cum = self.cum.add(n);
    }
}

/// State of one entry of the send window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxState {
    /// No frame, or the frame was acknowledged.
    Free,
    /// The frame still takes packets (the newest entry only).
    Open,
    /// Closed, waiting for its first transmission.
    Queued,
    /// Transmitted at least once and not acknowledged yet.
    InFlight,
}

/// One frame of the send window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TxSlot {
    pub(crate) state: TxState,
    /// Pool block holding the frame payload.
    pub(crate) block: u32,
    /// Payload bytes (packets with their prefixes).
    pub(crate) len: u32,
    /// When the frame was closed (the deadline counts from here).
    pub(crate) closed_at: u64,
    /// Last (re)transmission.
    pub(crate) last_sent: u64,
    /// Retransmissions so far.
    pub(crate) retries: u16,
}

impl TxSlot {
    pub(crate) const EMPTY: TxSlot = TxSlot {
        state: TxState::Free,
        block: 0,
        len: 0,
        closed_at: 0,
        last_sent: 0,
        retries: 0,
    };
}

/// Frames sent to one peer and not yet acknowledged: sequence numbers `base .. next`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TxWindow<const W: usize> {
    pub(crate) base: Seq,
    pub(crate) next: Seq,
    slots: [TxSlot; W],
}

impl<const W: usize> TxWindow<W> {
    pub(crate) const fn new(first: Seq) -> Self {
        TxWindow {
            base: first,
            next: first,
            slots: [TxSlot::EMPTY; W],
        }
    }

    /// Frames in the window (including acknowledged ones not yet passed by `base`).
    pub(crate) fn len(&self) -> usize {
        self.next.distance(self.base) as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.base == self.next
    }

    pub(crate) fn slot(&self, seq: Seq) -> &TxSlot {
        &self.slots[seq.0 as usize % W]
    }

    pub(crate) fn slot_mut(&mut self, seq: Seq) -> &mut TxSlot {
        &mut self.slots[seq.0 as usize % W]
    }

    /// Whether `seq` is in `base .. next`.
    pub(crate) fn contains(&self, seq: Seq) -> bool {
        !seq.is_before(self.base) && seq.is_before(self.next)
    }

    /// Appends a new entry and returns its sequence number, or `None` when `limit` entries
    /// (at most `W`) are in use.
    pub(crate) fn push(&mut self, limit: usize, slot: TxSlot) -> Option<Seq> {
        if self.len() >= limit.min(W) {
            return None;
        }
        let seq = self.next;
        *self.slot_mut(seq) = slot;
        self.next = seq.add(1);
        Some(seq)
    }

    /// Applies an ack: every in-flight frame it covers becomes free and is passed to
    /// `acked` (with its sequence number) first. Then `base` moves past freed entries.
    /// An ack that claims frames never sent (cumulative ack at or beyond `next`) is ignored;
    /// returns whether the ack was accepted.
    pub(crate) fn apply_ack(&mut self, ack: AckRepr, mut acked: impl FnMut(Seq, &TxSlot)) -> bool {
        if !ack.cum.is_before(self.next) {
            return false;
        }
        let mut seq = self.base;
        while seq != self.next {
            let covered = if !seq.is_after(ack.cum) {
                true
            } else {
                let d = seq.distance(ack.cum) as u32;
                d <= 64 && ack.sack & (1u64 << (d - 1)) != 0
            };
            let slot = self.slot_mut(seq);
            if covered && slot.state == TxState::InFlight {
                acked(seq, slot);
                slot.state = TxState::Free;
            }
            seq = seq.add(1);
        }
        self.advance_base();
        true
    }

    /// Moves `base` past freed entries.
    pub(crate) fn advance_base(&mut self) {
        while self.base != self.next && self.slot(self.base).state == TxState::Free {
            self.base = self.base.add(1);
        }
    }

    /// Frees every entry, passing each one still holding a frame to `release`, and makes the
    /// window empty at `next` (nothing before it will ever be sent again).
    pub(crate) fn abandon(&mut self, mut release: impl FnMut(&TxSlot)) {
        let mut seq = self.base;
        while seq != self.next {
            let slot = self.slot_mut(seq);
            if slot.state != TxState::Free {
                release(slot);
                slot.state = TxState::Free;
            }
            seq = seq.add(1);
        }
        self.base = self.next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_arrivals_advance_the_cumulative_ack() {
        let mut rx = RxWindow::new(Seq(10));
        assert_eq!(rx.ack().cum, Seq(9));
        assert_eq!(rx.accept(Seq(10)), RxVerdict::New { ack_now: false });
        assert_eq!(rx.accept(Seq(11)), RxVerdict::New { ack_now: false });
        assert_eq!(
            rx.ack(),
            AckRepr {
                cum: Seq(11),
                sack: 0
            }
        );
        assert_eq!(rx.accept(Seq(11)), RxVerdict::Duplicate);
        assert_eq!(rx.accept(Seq(3)), RxVerdict::Duplicate);
    }

    #[test]
    fn gaps_are_reported_and_filled_across_wraparound() {
        let mut rx = RxWindow::new(Seq(u32::MAX - 1));
        // Frames MAX-1 and MAX are missing; 0 and 2 arrive.
        assert_eq!(rx.accept(Seq(0)), RxVerdict::New { ack_now: true });
        assert_eq!(rx.accept(Seq(2)), RxVerdict::New { ack_now: false });
        assert_eq!(
            rx.ack(),
            AckRepr {
                cum: Seq(u32::MAX - 2),
                sack: 0b10100
            }
        );
        assert_eq!(rx.accept(Seq(0)), RxVerdict::Duplicate);
        assert_eq!(
            rx.accept(Seq(u32::MAX - 1)),
            RxVerdict::New { ack_now: true }
        );
        // Filling the hole before 0 moves the cumulative ack across the wrap to 0.
        assert_eq!(rx.accept(Seq(u32::MAX)), RxVerdict::New { ack_now: true });
        assert_eq!(
            rx.ack(),
            AckRepr {
                cum: Seq(0),
                sack: 0b10
            }
        );
        assert_eq!(rx.accept(Seq(1)), RxVerdict::New { ack_now: true });
        assert_eq!(
            rx.ack(),
            AckRepr {
                cum: Seq(2),
                sack: 0
            }
        );
        assert_eq!(rx.accept(Seq(3)), RxVerdict::New { ack_now: false });
    }

    #[test]
    fn window_edges() {
        let mut rx = RxWindow::new(Seq(100));
        // cum = 99: 99 + 64 is the last acceptable frame, 99 + 65 is out of the window.
        assert_eq!(rx.accept(Seq(99 + 65)), RxVerdict::OutOfWindow);
        assert_eq!(rx.accept(Seq(99 + 64)), RxVerdict::New { ack_now: true });
        assert_eq!(rx.ack().sack, 1 << 63);
        assert_eq!(rx.accept(Seq(99 + 64)), RxVerdict::Duplicate);
        // Far behind (half the sequence space) is a duplicate, never "new".
        assert_eq!(rx.accept(Seq(99).sub(0x7fff_0000)), RxVerdict::Duplicate);
    }

    #[test]
    fn base_advance_skips_abandoned_frames() {
        let mut rx = RxWindow::new(Seq(0));
        assert_eq!(rx.accept(Seq(5)), RxVerdict::New { ack_now: true });
        rx.advance_to(Seq(3));
        assert_eq!(
            rx.ack(),
            AckRepr {
                cum: Seq(2),
                sack: 0b100
            }
        );
        rx.advance_to(Seq(5));
        // 5 had arrived, so the cumulative ack moves past it.
        assert_eq!(
            rx.ack(),
            AckRepr {
                cum: Seq(5),
                sack: 0
            }
        );
        // A base far ahead clears everything.
        rx.advance_to(Seq(1000));
        assert_eq!(
            rx.ack(),
            AckRepr {
                cum: Seq(999),
                sack: 0
            }
        );
        // An older base changes nothing.
        rx.advance_to(Seq(10));
        assert_eq!(rx.ack().cum, Seq(999));
        assert_eq!(rx.accept(Seq(999)), RxVerdict::Duplicate);
    }

    fn in_flight() -> TxSlot {
        TxSlot {
            state: TxState::InFlight,
            ..TxSlot::EMPTY
        }
    }

    #[test]
    fn send_window_limits_and_acks() {
        let mut tx = TxWindow::<4>::new(Seq(u32::MAX - 1));
        for _ in 0..3 {
            assert!(tx.push(3, in_flight()).is_some());
        }
        assert_eq!(tx.push(3, in_flight()), None, "configured limit 3");
        assert_eq!(tx.push(8, in_flight()), Some(Seq(1)));
        assert_eq!(tx.push(8, in_flight()), None, "capacity W = 4");
        assert_eq!(tx.len(), 4);
        // SACK of frame 0 only (cum = MAX - 2, bit for MAX-2+1+i = 0 -> i = 2).
        let mut acked = Vec::new();
        let ok = tx.apply_ack(
            AckRepr {
                cum: Seq(u32::MAX - 2),
                sack: 0b100,
            },
            |s, _| acked.push(s),
        );
        assert!(ok);
        assert_eq!(acked, vec![Seq(0)]);
        assert_eq!(
            tx.base,
            Seq(u32::MAX - 1),
            "base waits for the oldest frame"
        );
        // Cumulative ack of MAX: frames MAX-1 and MAX, then base passes the SACKed 0.
        acked.clear();
        tx.apply_ack(
            AckRepr {
                cum: Seq(u32::MAX),
                sack: 0,
            },
            |s, _| acked.push(s),
        );
        assert_eq!(acked, vec![Seq(u32::MAX - 1), Seq(u32::MAX)]);
        assert_eq!(tx.base, Seq(1));
        assert_eq!(tx.len(), 1);
        // An ack for a frame never sent is refused.
        assert!(!tx.apply_ack(
            AckRepr {
                cum: Seq(2),
                sack: 0
            },
            |_, _| panic!()
        ));
        // A repeated old ack frees nothing more.
        assert!(tx.apply_ack(
            AckRepr {
                cum: Seq(u32::MAX),
                sack: 0
            },
            |_, _| panic!()
        ));
    }

    #[test]
    fn queued_frames_are_not_acknowledged_and_abandon_frees_all() {
        let mut tx = TxWindow::<4>::new(Seq(7));
        tx.push(4, in_flight());
        tx.push(
            4,
            TxSlot {
                state: TxState::Queued,
                ..TxSlot::EMPTY
            },
        );
        let mut acked = 0;
        // An ack claiming the never-transmitted frame 8 frees only the in-flight frame 7.
        tx.apply_ack(
            AckRepr {
                cum: Seq(8),
                sack: 0,
            },
            |_, _| acked += 1,
        );
        assert_eq!(acked, 1);
        assert_eq!(tx.base, Seq(8));
        let mut released = 0;
        tx.abandon(|_| released += 1);
        assert_eq!(released, 1);
        assert!(tx.is_empty());
        assert_eq!(tx.base, Seq(9));
    }
}
