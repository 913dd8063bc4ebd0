//! How the reliability layer finds a peer's state in O(1).
//!
//! The state of each peer lives in a slot of a caller-provided table. A [`PeerIndex`] maps
//! a transport peer to its slot: [`DenseIndex`] for peers that already are small integers
//! (loopback endpoint indices, ranks), [`HashIndex`] for any hashable peer (socket addresses),
//! assigning slots in order of first appearance.

use core::hash::{Hash, Hasher};

use super::Refusal;

/// What a [`PeerIndex`] says about a peer that has no slot yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Admission<P> {
    /// Give it a slot (if the table has a free one).
    Admit,
    /// Give it the slot of `victim` (already known to the index) if that peer is idle
    /// (nothing in flight, nothing owed, no unreported event) or has not been heard from
    /// for `quiet_ns` (its frames are then abandoned). Otherwise refuse with `refusal`.
    Replace {
        /// The peer whose slot is offered.
        victim: P,
        /// How long the victim must have been silent to be evicted while busy.
        quiet_ns: u64,
        /// The answer if the victim may not be evicted.
        refusal: Refusal,
    },
    /// Refuse: the peer gets no slot and its frames are dropped.
    Refuse(Refusal),
}

/// Maps peers to slots `0..capacity` of the peer table, and decides who may have one.
pub trait PeerIndex<P> {
    /// The slot of `peer`, assigning a free one if the peer is new; `None` when the peer
    /// cannot have a slot (out of range, or the table is full).
    fn slot(&mut self, peer: P, capacity: usize) -> Option<usize>;

    /// The slot of `peer` if it has one; never assigns.
    fn find(&self, peer: P, capacity: usize) -> Option<usize>;

    /// Whether `peer`, which has no slot, may have one: asked before [`slot`](Self::slot)
    /// assigns one, on receipt of a frame and before a first send. By default everyone
    /// is admitted.
    fn admit(&mut self, peer: P, capacity: usize) -> Admission<P> {
        let _ = (peer, capacity);
        Admission::Admit
    }

    /// Whether `peer`, which has no slot, must first prove its address: asked on receipt
    /// of its frame, before [`admit`](Self::admit), with the sender's `epoch`, the cookie
    /// the frame echoes (if any) and the layer's clock. `Some(cookie)`: the frame is
    /// dropped and a data frame is answered with a challenge carrying `cookie` (see
    /// "challenge" in the [frame docs](super::frame)); `None`: admission goes on. By
    /// default nobody is challenged.
    fn challenge(&mut self, peer: P, epoch: u64, cookie: Option<u64>, now_ns: u64) -> Option<u64> {
        let _ = (peer, epoch, cookie, now_ns);
        None
    }

    /// Whether `peer` may take one more frame of the shared pool of `pool` frames (asked
    /// before each new frame to it); [`frames_held`](Self::frames_held) reports what it
    /// took and gave back. By default always: the pool is first come, first served.
    fn may_take_frame(&mut self, peer: P, pool: usize) -> bool {
        let _ = (peer, pool);
        true
    }

    /// `peer` took (`delta` > 0) or gave back (`delta` < 0) frames of the pool. By default
    /// nothing is counted.
    fn frames_held(&mut self, peer: P, delta: isize) {
        let _ = (peer, delta);
    }

    /// Forgets `peer`: its slot may be handed out again. By default slots are never
    /// reassigned (the layer still resets the slot's state).
    fn release(&mut self, peer: P) {
        let _ = peer;
    }
}

/// Peers are integers `0..capacity` and are their own slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DenseIndex;

impl<P: TryInto<usize>> PeerIndex<P> for DenseIndex {
    #[inline]
    fn slot(&mut self, peer: P, capacity: usize) -> Option<usize> {
        self.find(peer, capacity)
    }

    #[inline]
    fn find(&self, peer: P, capacity: usize) -> Option<usize> {
        peer.try_into().ok().filter(|&i| i < capacity)
    }
}

/// FNV-1a, a small hasher good enough for spreading peer addresses.
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// An open-addressing hash table of up to `N` peers (`N` should be about twice the number of
/// peers for short probes). Slots are handed out densely in order of first appearance.
#[derive(Clone, Debug)]
pub struct HashIndex<P, const N: usize> {
    entries: [Option<(P, u32)>; N],
    assigned: usize,
}

impl<P: Copy, const N: usize> HashIndex<P, N> {
    /// An empty table.
    pub const fn new() -> Self {
        HashIndex {
            entries: [None; N],
            assigned: 0,
        }
    }

    /// Peers that have a slot.
    pub fn len(&self) -> usize {
        self.assigned
    }

    /// Whether no peer has a slot yet.
    pub fn is_empty(&self) -> bool {
        self.assigned == 0
    }
}

impl<P: Copy, const N: usize> Default for HashIndex<P, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Copy + Eq + Hash, const N: usize> HashIndex<P, N> {
    /// Position of `peer` in `entries`, or of the empty entry where it would go; `None` when
    /// the table is full and `peer` is absent.
    fn probe(&self, peer: P) -> Option<usize> {
        if N == 0 {
            return None;
        }
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        peer.hash(&mut h);
        let start = (h.finish() % N as u64) as usize;
        (0..N)
            .map(|i| (start + i) % N)
            .find(|&at| match self.entries[at] {
                None => true,
                Some((p, _)) => p == peer,
            })
    }
}

impl<P: Copy + Eq + Hash, const N: usize> PeerIndex<P> for HashIndex<P, N> {
    fn slot(&mut self, peer: P, capacity: usize) -> Option<usize> {
        let at = self.probe(peer)?;
        if let Some((_, slot)) = self.entries[at] {
            return Some(slot as usize);
        }
        if self.assigned >= capacity {
            return None;
        }
        let slot = self.assigned;
        self.entries[at] = Some((peer, u32::try_from(slot).ok()?));
        self.assigned += 1;
        Some(slot)
    }

    fn find(&self, peer: P, capacity: usize) -> Option<usize> {
        let (_, slot) = self.entries[self.probe(peer)?]?;
        Some(slot as usize).filter(|&s| s < capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_index_is_identity_within_capacity() {
        let mut d = DenseIndex;
        assert_eq!(d.slot(3usize, 4), Some(3));
        assert_eq!(d.slot(4usize, 4), None);
        assert_eq!(d.find(2u32, 4), Some(2));
        assert_eq!(PeerIndex::<i32>::find(&d, -1, 4), None);
    }

    #[test]
    fn hash_index_assigns_dense_slots_and_fills_up() {
        let mut h = HashIndex::<(u32, u16), 4>::new();
        assert_eq!(h.slot((10, 1), 3), Some(0));
        assert_eq!(h.slot((20, 1), 3), Some(1));
        assert_eq!(h.slot((10, 1), 3), Some(0));
        assert_eq!(h.find((20, 1), 3), Some(1));
        assert_eq!(h.find((30, 1), 3), None);
        assert_eq!(h.slot((30, 1), 3), Some(2));
        assert_eq!(h.slot((40, 1), 3), None, "capacity 3 reached");
        assert_eq!(h.len(), 3);
        // The table itself holds 4; a fifth distinct peer finds no entry at all.
        assert_eq!(h.slot((40, 1), 9), Some(3));
        assert_eq!(h.slot((50, 1), 9), None);
        assert_eq!(h.find((40, 1), 9), Some(3));
    }
}
