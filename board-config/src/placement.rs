//! Placement of a job's PEs (ranks) on nodes.
//!
//! What it is: [`place`], which gives every node a contiguous block of ranks, in node order,
//! and [`Placement`], which answers which node a rank is on, which ranks a node holds, and
//! local ranks and sizes (what `SHMEM_TEAM_SHARED` and the launcher need).
//!
//! Policy:
//! * without `ppn`, ranks are spread evenly: each node gets `n_pes / nodes` ranks and the
//!   first `n_pes % nodes` nodes one more (2 nodes, 5 PEs: node 0 holds 0..=2, node 1
//!   holds 3..=4). Nodes may end up with no rank when `n_pes < nodes`;
//! * with `ppn`, each node is filled with `ppn` ranks before the next one is used; the last
//!   used node may hold fewer, later nodes none. `n_pes > ppn * nodes` is an error.
//!
//! What it is not: a process launcher or a core binder; it does not look at `cores`
//! (oversubscription is the caller's decision).
//!
//! Thread safety: `Placement` is immutable after construction (`Send + Sync`).

use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

/// Why [`place`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementError {
    /// `n_pes` was 0.
    NoPes,
    /// The node list was empty.
    NoNodes,
    /// `ppn` was `Some(0)`.
    ZeroPpn,
    /// A node id appears twice in the node list.
    DuplicateNode(u16),
    /// `n_pes > ppn * nodes`.
    TooManyPes {
        /// PEs asked for.
        n_pes: u32,
        /// PEs per node asked for.
        ppn: u32,
        /// Nodes available.
        nodes: usize,
    },
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoPes => f.write_str("cannot place a job of 0 PEs"),
            Self::NoNodes => f.write_str("cannot place PEs on an empty node list"),
            Self::ZeroPpn => f.write_str("PEs per node must be at least 1"),
            Self::DuplicateNode(id) => write!(f, "node {id} appears twice in the node list"),
            Self::TooManyPes { n_pes, ppn, nodes } => write!(
                f,
                "{n_pes} PEs do not fit on {nodes} node(s) with {ppn} PE(s) per node (at most {})",
                u64::from(ppn) * nodes as u64
            ),
        }
    }
}

impl core::error::Error for PlacementError {}

/// Ranks assigned to nodes in contiguous blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Node ids in placement order.
    nodes: Vec<u16>,
    /// `starts[i]..starts[i + 1]` are the ranks of `nodes[i]`; `starts.len() == nodes.len() + 1`.
    starts: Vec<u32>,
    /// `(node id, index in nodes)`, sorted by id.
    by_id: Vec<(u16, usize)>,
}

/// Places `n_pes` ranks on `nodes` (ids, in placement order); see the module docs for the
/// policy.
pub fn place(n_pes: u32, nodes: &[u16], ppn: Option<u32>) -> Result<Placement, PlacementError> {
    if n_pes == 0 {
        return Err(PlacementError::NoPes);
    }
    if nodes.is_empty() {
        return Err(PlacementError::NoNodes);
    }
    let mut by_id: Vec<(u16, usize)> = nodes.iter().copied().zip(0..).collect();
    by_id.sort_unstable();
    if let Some(w) = by_id.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(PlacementError::DuplicateNode(w[0].0));
    }
    let count = nodes.len() as u64;
    let mut starts = Vec::with_capacity(nodes.len() + 1);
    starts.push(0u32);
    match ppn {
        Some(0) => return Err(PlacementError::ZeroPpn),
        Some(ppn) => {
            if u64::from(n_pes) > u64::from(ppn) * count {
                return Err(PlacementError::TooManyPes {
                    n_pes,
                    ppn,
                    nodes: nodes.len(),
                });
            }
            let mut next = 0u32;
            for _ in nodes {
                next = next.saturating_add(ppn).min(n_pes);
                starts.push(next);
            }
        }
        None => {
            // count <= 65536 since ids are distinct u16s, so both fit in u32.
            let base = (u64::from(n_pes) / count) as u32;
            let extra = (u64::from(n_pes) % count) as usize;
            let mut next = 0u32;
            for i in 0..nodes.len() {
                next += base + u32::from(i < extra);
                starts.push(next);
            }
        }
    }
    Ok(Placement {
        nodes: nodes.to_vec(),
        starts,
        by_id,
    })
}

impl Placement {
    /// Total number of PEs.
    pub fn n_pes(&self) -> u32 {
        self.starts[self.starts.len() - 1]
    }

    /// Node ids in placement order (including nodes that received no rank).
    pub fn nodes(&self) -> &[u16] {
        &self.nodes
    }

    fn index_of(&self, node: u16) -> Option<usize> {
        self.by_id
            .binary_search_by_key(&node, |&(id, _)| id)
            .ok()
            .map(|i| self.by_id[i].1)
    }

    fn index_of_pe(&self, pe: u32) -> Option<usize> {
        if pe >= self.n_pes() {
            return None;
        }
        // The first block whose end is past `pe`; empty blocks are skipped naturally.
        Some(self.starts[1..].partition_point(|&end| end <= pe))
    }

    /// The node that holds rank `pe`; `None` if `pe >= n_pes`.
    pub fn node_of(&self, pe: u32) -> Option<u16> {
        self.index_of_pe(pe).map(|i| self.nodes[i])
    }

    /// The ranks held by `node` (possibly empty); `None` if the node is not in the placement.
    pub fn pes_of(&self, node: u16) -> Option<Range<u32>> {
        self.index_of(node)
            .map(|i| self.starts[i]..self.starts[i + 1])
    }

    /// Rank of `pe` among the PEs of its node; `None` if `pe >= n_pes`.
    pub fn local_rank(&self, pe: u32) -> Option<u32> {
        self.index_of_pe(pe).map(|i| pe - self.starts[i])
    }

    /// Number of PEs on `node`; `None` if the node is not in the placement.
    pub fn local_size(&self, node: u16) -> Option<u32> {
        self.pes_of(node).map(|r| r.end - r.start)
    }

    /// `(node id, ranks)` for every node, in placement order.
    pub fn blocks(&self) -> impl Iterator<Item = (u16, Range<u32>)> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, self.starts[i]..self.starts[i + 1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks the invariants every placement must satisfy.
    fn check_consistent(p: &Placement, n_pes: u32) {
        assert_eq!(p.n_pes(), n_pes);
        let mut next = 0;
        for (node, pes) in p.blocks() {
            assert_eq!(pes.start, next, "blocks are contiguous");
            next = pes.end;
            assert_eq!(p.pes_of(node), Some(pes.clone()));
            assert_eq!(p.local_size(node), Some(pes.end - pes.start));
            for (local, pe) in pes.enumerate() {
                assert_eq!(p.node_of(pe), Some(node));
                assert_eq!(p.local_rank(pe), Some(local as u32));
            }
        }
        assert_eq!(next, n_pes);
        assert_eq!(p.node_of(n_pes), None);
        assert_eq!(p.local_rank(n_pes), None);
    }

    #[test]
    fn two_nodes_five_pes_remainder_goes_first() {
        let p = place(5, &[0, 1], None).unwrap();
        assert_eq!(p.pes_of(0), Some(0..3));
        assert_eq!(p.pes_of(1), Some(3..5));
        assert_eq!(p.node_of(2), Some(0));
        assert_eq!(p.node_of(3), Some(1));
        assert_eq!(p.local_rank(4), Some(1));
        assert_eq!(p.local_size(0), Some(3));
        assert_eq!(p.local_size(1), Some(2));
        check_consistent(&p, 5);
    }

    #[test]
    fn node_ids_need_not_be_indices() {
        let p = place(7, &[42, 7, 9], None).unwrap();
        assert_eq!(p.nodes(), [42, 7, 9]);
        assert_eq!(p.pes_of(42), Some(0..3));
        assert_eq!(p.pes_of(7), Some(3..5));
        assert_eq!(p.pes_of(9), Some(5..7));
        assert_eq!(p.pes_of(8), None);
        assert_eq!(p.local_size(8), None);
        check_consistent(&p, 7);
    }

    #[test]
    fn fewer_pes_than_nodes_leaves_empty_nodes() {
        let p = place(2, &[0, 1, 2, 3], None).unwrap();
        assert_eq!(p.pes_of(0), Some(0..1));
        assert_eq!(p.pes_of(1), Some(1..2));
        assert_eq!(p.pes_of(2), Some(2..2));
        assert_eq!(p.local_size(3), Some(0));
        check_consistent(&p, 2);
    }

    #[test]
    fn ppn_fills_nodes_in_order() {
        let p = place(5, &[0, 1, 2], Some(2)).unwrap();
        assert_eq!(p.pes_of(0), Some(0..2));
        assert_eq!(p.pes_of(1), Some(2..4));
        assert_eq!(p.pes_of(2), Some(4..5));
        check_consistent(&p, 5);
        let p = place(3, &[0, 1, 2], Some(4)).unwrap();
        assert_eq!(p.pes_of(0), Some(0..3));
        assert_eq!(p.local_size(1), Some(0));
        check_consistent(&p, 3);
        let p = place(6, &[0, 1, 2], Some(2)).unwrap();
        assert_eq!(p.local_size(2), Some(2));
        check_consistent(&p, 6);
    }

    #[test]
    fn every_shape_is_consistent() {
        for nodes in 1..=6u16 {
            let ids: Vec<u16> = (0..nodes).rev().collect();
            for n_pes in 1..=20 {
                check_consistent(&place(n_pes, &ids, None).unwrap(), n_pes);
                for ppn in 1..=5 {
                    match place(n_pes, &ids, Some(ppn)) {
                        Ok(p) => check_consistent(&p, n_pes),
                        Err(e) => {
                            assert!(n_pes > ppn * u32::from(nodes));
                            assert!(matches!(e, PlacementError::TooManyPes { .. }));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn large_counts_do_not_overflow() {
        let p = place(u32::MAX, &[0, 1], Some(u32::MAX)).unwrap();
        assert_eq!(p.pes_of(0), Some(0..u32::MAX));
        assert_eq!(p.local_size(1), Some(0));
        let p = place(u32::MAX, &[0, 1], None).unwrap();
        assert_eq!(p.pes_of(1), Some(u32::MAX / 2 + 1..u32::MAX));
        assert_eq!(p.node_of(u32::MAX - 1), Some(1));
    }

    #[test]
    fn errors() {
        assert_eq!(place(0, &[0], None), Err(PlacementError::NoPes));
        assert_eq!(place(1, &[], None), Err(PlacementError::NoNodes));
        assert_eq!(place(1, &[0], Some(0)), Err(PlacementError::ZeroPpn));
        assert_eq!(
            place(2, &[3, 1, 3], None),
            Err(PlacementError::DuplicateNode(3))
        );
        let err = place(7, &[0, 1, 2], Some(2)).unwrap_err();
        assert_eq!(
            err,
            PlacementError::TooManyPes {
                n_pes: 7,
                ppn: 2,
                nodes: 3
            }
        );
        assert_eq!(
            alloc::format!("{err}"),
            "7 PEs do not fit on 3 node(s) with 2 PE(s) per node (at most 6)"
        );
    }
}
