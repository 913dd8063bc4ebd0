//! Where the collectives keep their flags: team blocks in the sync segment, words of an
//! active set's `pSync`, and the allocation of team blocks.
//!
//! **What it is.** Every PE's sync segment ([`gsas_node::SYNC`], 1 MiB) starts with the
//! node client's barrier area ([`gsas_node::SYNC_RESERVED`] bytes); after it come
//! [`BLOCK`]-byte team blocks, block `b` at the same offset on every PE, so a block is a
//! symmetric object that same-node PEs map and other nodes reach through their services.
//! Block 0 belongs to `SHMEM_TEAM_WORLD`, block 1 to `SHMEM_TEAM_SHARED`, the others to
//! teams made by splits (a split agrees on a block that is free on every PE of the parent,
//! see [`Blocks`]). A block holds:
//!
//! | offset | what | written by |
//! |---|---|---|
//! | [`ARRIVE`], [`RELEASE`] | one cache-line pair each: the owner's arrival and release tags | the owner (plain release stores), read by same-node members |
//! | [`PUBLISH`], [`PUBLISH_SRC`] | values the owner publishes (a `collect` contribution's size and source), next to its arrival tag | the owner |
//! | [`COUNTERS`] | [`NCOUNTERS`] 64-bit counters ([`Slot`]) | other nodes' PEs, with atomic adds through the services |
//! | [`SPLIT_SRC`], [`SPLIT_DST`] | source and result of the block agreement of a split of this team | the split |
//! | [`CELL_TOTALS`] | the byte totals of every node of a `collect` | the node leaders |
//!
//! Tags are `sequence << 4 | step`: a team numbers its collectives, every member the
//! same, so a tag is never reused and waiting for `tag >= t` cannot confuse consecutive
//! collectives. Counters only grow; the owner remembers how many increments it consumed.
//!
//! **Every increment belongs to its collective.** A counter counts; it does not say whose
//! increment it holds. Increments travel per sender in order (the direct path delivers in
//! order; a put through a service is completed before its increment is sent), but not in
//! order between senders, and a PE may run many collectives ahead of another (a broadcast's
//! root returns at once). So an owner waiting for `k` increments of collective `q` must
//! never be able to count one of a later collective instead. Two rules give that:
//!
//! * **One sender per counter.** [`Slot::Diss`], [`Slot::Bcast`], [`Slot::Gather`],
//!   [`Slot::ReduceUp`] and [`Slot::ReduceDown`] of a PE receive, for the whole life of the
//!   team, from one PE only, whatever the call's root or size: the leader of the cell `2^r`
//!   (or `2^j`, `2^k`) positions before or after this PE's cell, the reduction tree's
//!   fixed parent and children (rooted at cell 0). A broadcast from a root that does not
//!   lead its cell hands the data to its leader first, which sends it on, so that the
//!   sender of `Bcast(j)` never depends on the root. Increments of one sender arrive in the
//!   order sent, and each of its calls sends the counter a fixed number of them, so the
//!   `i`-th increment counted is the sender's `i`-th, of the call the owner waits in.
//! * **Every other cell sends: counters by call parity.** [`Slot::AllToAll`] and
//!   [`Slot::CollectMail`] take one increment from every other cell (leader) in every
//!   call. Each team numbers its calls of that [`Exchange`] kind and uses the counter of
//!   the call number's parity. A PE cannot be two such calls ahead of another one: to
//!   finish call `a + 1` it needs the other's signal of call `a + 1`, sent only after the
//!   other finished call `a`. So while an owner waits in call `a`, nobody sends call
//!   `a + 2`, and increments of call `a + 1` go to the other counter. The team's sequence
//!   number would not do: calls of other kinds in between (a broadcast, which needs no
//!   signal back) let a PE run ahead by any number of sequence numbers.
//!
//! An active set's `pSync` may be reused only after the collective that used it completed
//! on every PE (OpenSHMEM 1.5 §9.9), so its words need neither rule across calls; within a
//! call the same counts hold.
//!
//! An active set has no block: its flags are counters in the caller's `pSync` words
//! ([`Slot::word`], [`ARRIVE_WORD`], ...), each incremented by the PEs that signal the owner
//! and decremented by the owner when it has seen them, so every word is back at
//! `SHMEM_SYNC_VALUE` (0) when the collective returns.
//!
//! **What it is not.** No data buffers: collectives move data between the users' symmetric
//! buffers (a reduction combines node partials in the leaders' `dest`).
//!
//! **Thread-safety.** [`Blocks`] is behind a mutex; the layout is constant.

use std::sync::Mutex;

/// Bytes of a team block.
pub const BLOCK: u64 = 16 << 10;
/// Offset of block 0 in the sync segment.
pub const FIRST: u64 = gsas_node::SYNC_RESERVED;
/// Number of team blocks (the sync segment is 1 MiB).
pub const MAX_BLOCKS: usize = ((1 << 20) - FIRST as usize) / BLOCK as usize;
/// The block of `SHMEM_TEAM_WORLD`.
pub const WORLD_BLOCK: u32 = 0;
/// The block of `SHMEM_TEAM_SHARED`.
pub const SHARED_BLOCK: u32 = 1;

/// The owner's arrival tag.
pub const ARRIVE: u64 = 0;
/// The owner's release tag (on its own cache lines: the prefetcher pairs lines).
pub const RELEASE: u64 = 128;
/// A value the owner publishes for its node, on the arrival tag's cache line (a reader that
/// sees the tag has the value in the same miss).
pub const PUBLISH: u64 = ARRIVE + 8;
/// A second value the owner publishes (the symmetric address of a `collect` source).
pub const PUBLISH_SRC: u64 = ARRIVE + 16;
/// The remote counters.
pub const COUNTERS: u64 = 1024;
/// Number of remote counters.
pub const NCOUNTERS: usize = 4 * LOG_MAX as usize + 5;
/// The block agreement's contribution (one word per block).
pub const SPLIT_SRC: u64 = 2048;
/// The block agreement's result.
pub const SPLIT_DST: u64 = 2048 + 8 * 64;
/// The per-node byte totals of a `collect`.
pub const CELL_TOTALS: u64 = 4096;
/// Most nodes (cells) a team's `collect` supports.
pub const MAX_CELLS: usize = ((BLOCK - CELL_TOTALS) / 8) as usize;
/// The record of this PE's collective endpoint (two words: address, token; see `direct`),
/// in the sync segment's last cache line, after every team block.
pub const ENDPOINT: u64 = (1 << 20) - 64;
/// Most rounds of the logarithmic algorithms (2^16 nodes).
pub const LOG_MAX: u32 = 16;

/// The `pSync` word of an active set's arrival counter.
pub const ARRIVE_WORD: usize = 0;
/// The `pSync` word of an active set's release counter.
pub const RELEASE_WORD: usize = 1;
/// The `pSync` word where an active-set `collect` publishes its size (plus one).
pub const PUBLISH_WORD: usize = 17;
/// The `pSync` word where an active-set `collect` between nodes publishes its source's
/// symmetric address (the word of `Slot::Gather(1)`, which that collect does not use).
pub const PUBLISH_SRC_WORD: usize = 3;

const _: () = {
    assert!(COUNTERS + 8 * NCOUNTERS as u64 <= SPLIT_SRC);
    assert!(MAX_BLOCKS <= 64, "block bitmaps are one word");
    assert!(SPLIT_DST + 8 * 64 <= CELL_TOTALS);
    assert!(FIRST + MAX_BLOCKS as u64 * BLOCK <= ENDPOINT);
};

/// A counter that PEs of other nodes increment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Barrier dissemination round `r`: from the leader `2^r` nodes before.
    Diss(u32),
    /// Broadcast data from the parent `2^j` nodes before (in the root's rotation).
    Bcast(u32),
    /// Allgather step `k`: from the leader `2^k` nodes before (the ring uses step 0).
    Gather(u32),
    /// Reduction partial ready at the child `2^j` nodes after.
    ReduceUp(u32),
    /// Reduction result written by the parent.
    ReduceDown,
    /// All-to-all data of the team's alltoall call with this parity of its number among
    /// the team's alltoall calls ([`Exchange::AllToAll`]).
    AllToAll(u32),
    /// The mail of a one-round `collect` between node leaders, of the call with this parity
    /// of its number among the team's such calls ([`Exchange::CollectMail`]).
    CollectMail(u32),
}

/// The collectives whose counter takes a signal from every other cell (or every other
/// leader) in every call: their counters are kept apart by the parity of the call's number
/// among the team's calls of that kind, which [`Slot`]s of one sender per counter do not
/// need (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// `alltoall`, `alltoalls`.
    AllToAll,
    /// `collect` in one round between node leaders.
    CollectMail,
}

impl Slot {
    /// The counter's index in a team block.
    pub fn index(self) -> usize {
        let l = LOG_MAX as usize;
        match self {
            Slot::Diss(r) => r as usize,
            Slot::Bcast(j) => l + j as usize,
            Slot::Gather(k) => 2 * l + k as usize,
            Slot::ReduceUp(j) => 3 * l + j as usize,
            Slot::ReduceDown => 4 * l,
            Slot::AllToAll(p) => 4 * l + 1 + (p & 1) as usize,
            Slot::CollectMail(p) => 4 * l + 3 + (p & 1) as usize,
        }
    }

    /// The counter's word in an active set's `pSync` (slots used together by one
    /// collective never share a word).
    pub fn word(self) -> usize {
        match self {
            Slot::Diss(j) | Slot::Bcast(j) | Slot::Gather(j) | Slot::ReduceUp(j) => 2 + j as usize,
            Slot::AllToAll(_) | Slot::CollectMail(_) => 2,
            Slot::ReduceDown => 18,
        }
    }
}

/// The team blocks of this PE: which are in use, and the last sequence number each block's
/// team used (so that a new team on the block starts above every tag still in memory).
#[derive(Debug)]
pub struct Blocks {
    used: u64,
    last_seq: [u64; 64],
}

/// See [`Blocks`].
pub static BLOCKS: Mutex<Blocks> = Mutex::new(Blocks {
    used: (1 << WORLD_BLOCK) | (1 << SHARED_BLOCK),
    last_seq: [0; 64],
});

/// A word of a block agreement meaning "in use on some PE".
pub const IN_USE: u64 = u64::MAX;

impl Blocks {
    /// This PE's contribution to a block agreement: per block, [`IN_USE`] or the last
    /// sequence number used on it (blocks beyond [`MAX_BLOCKS`] are in use).
    pub fn contribution(&self) -> [u64; 64] {
        std::array::from_fn(|b| {
            if b >= MAX_BLOCKS || self.used & (1 << b) != 0 {
                IN_USE
            } else {
                self.last_seq[b]
            }
        })
    }

    /// Whether block `b` is free here.
    pub fn is_free(&self, b: usize) -> bool {
        b < MAX_BLOCKS && self.used & (1 << b) == 0
    }

    /// Marks block `b` used.
    pub fn claim(&mut self, b: u32) {
        self.used |= 1 << b;
    }

    /// Marks block `b` free; its team's last sequence number was `seq`.
    pub fn release(&mut self, b: u32, seq: u64) {
        self.used &= !(1 << b);
        self.last_seq[b as usize] = self.last_seq[b as usize].max(seq);
    }
}

/// The `want` lowest blocks free on every PE of an agreement whose element-wise maximum is
/// `agreed`, each with the sequence number its new team starts after.
pub fn choose(agreed: &[u64; 64], want: usize) -> Option<Vec<(u32, u64)>> {
    let free: Vec<(u32, u64)> = (0..MAX_BLOCKS)
        .filter(|&b| agreed[b] != IN_USE)
        .map(|b| (b as u32, agreed[b]))
        .take(want)
        .collect();
    (free.len() == want).then_some(free)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_distinct_and_fit() {
        let mut seen = std::collections::BTreeSet::new();
        for j in 0..LOG_MAX {
            for s in [
                Slot::Diss(j),
                Slot::Bcast(j),
                Slot::Gather(j),
                Slot::ReduceUp(j),
            ] {
                assert!(seen.insert(s.index()), "{s:?}");
                assert!(s.index() < NCOUNTERS);
            }
        }
        for s in [
            Slot::ReduceDown,
            Slot::AllToAll(0),
            Slot::AllToAll(1),
            Slot::CollectMail(0),
            Slot::CollectMail(1),
        ] {
            assert!(seen.insert(s.index()), "{s:?}");
            assert!(s.index() < NCOUNTERS);
        }
        assert_eq!(Slot::AllToAll(2).index(), Slot::AllToAll(0).index());
        assert_eq!(seen.len(), NCOUNTERS);
        // pSync words: within the sizes of shmem.h, apart from the words used together.
        assert!(Slot::Diss(13).word() < 16, "barrier pSync: 16 words");
        assert!(
            Slot::Gather(15).word() < 18 && PUBLISH_WORD < 18,
            "collect pSync: 18"
        );
        assert!(Slot::ReduceDown.word() < 35 && Slot::ReduceUp(15).word() != 18);
        for w in [
            Slot::Bcast(0).word(),
            Slot::AllToAll(0).word(),
            Slot::CollectMail(0).word(),
        ] {
            assert!(w != ARRIVE_WORD && w != RELEASE_WORD);
        }
        const { assert!(MAX_CELLS >= 1024 && MAX_BLOCKS == 63) };
    }

    #[test]
    fn block_agreement() {
        let mut here = Blocks {
            used: 0b11,
            last_seq: [0; 64],
        };
        here.claim(2);
        here.release(2, 40);
        here.claim(3);
        let mine = here.contribution();
        assert_eq!(
            (mine[0], mine[2], mine[3], mine[4]),
            (IN_USE, 40, IN_USE, 0)
        );
        assert_eq!(mine[MAX_BLOCKS], IN_USE);
        // Another PE uses block 4 and used block 2 up to 55.
        let mut other = mine;
        other[3] = 0;
        other[4] = IN_USE;
        other[2] = 55;
        let agreed: [u64; 64] = std::array::from_fn(|b| mine[b].max(other[b]));
        assert_eq!(choose(&agreed, 2), Some(vec![(2, 55), (5, 0)]));
        let all_used = [IN_USE; 64];
        assert_eq!(choose(&all_used, 1), None);
        assert!(here.is_free(4) && !here.is_free(3) && !here.is_free(MAX_BLOCKS));
    }
}
