//! Synchronization: `shmem_team_sync`, `shmem_sync`, and the waiting part of the barriers.
//!
//! **What it is.** [`sync`] returns on a PE only after every member entered it:
//!
//! * **one cell of at most `SHMEM_COLL_FLAT_MAX` members** (the usual single node):
//!   *flat*: every member signals its arrival (one store to its own line for a team) and
//!   waits for every other member's. With two PEs that is one cache-line exchange.
//! * **otherwise** *hierarchical*: the members of a cell arrive through a tree of
//!   sub-leaders of fan-in `SHMEM_COLL_FANIN` (member `i` waits for members `k*i+1 ..=
//!   k*i+k` of its cell, then signals its parent `(i-1)/k`), the cell leaders run a
//!   dissemination barrier among themselves (round `r`: signal the leader `2^r` cells on,
//!   wait for the one `2^r` cells back; `ceil(log2 cells)` rounds, one atomic add through
//!   a service each), and each leader releases its cell with one store that all its
//!   members watch.
//!
//! **What it is not.** Not a quiet: `shmem_barrier_all` and `shmem_barrier` complete the
//! default context first (see the module root); this completes only local stores (the
//! signals are release stores or atomics).
//!
//! **Thread-safety.** As [`Run`].

use super::run::{Line, Run};

/// Waits until every member of the run's group has entered; see the [module docs](self).
pub fn sync(r: &mut Run) {
    let g = r.g;
    let local = g.local();
    let cfg = &r.st.config;
    if g.nc() == 1 && u64::from(local.end - local.start) <= cfg.coll_flat_max {
        r.lpost(Line::Arrive, 1, g.local_others());
        r.lwait(Line::Arrive, 1, g.local_others());
        return;
    }
    let k = cfg.coll_fanin.clamp(1, u64::from(u32::MAX)) as u32;
    let (first, len) = (local.start, local.end - local.start);
    let i = g.me() - first;
    let kids = (1..=k)
        .map(move |j| i as u64 * k as u64 + j as u64)
        .filter(move |&c| c < u64::from(len))
        .map(move |c| first + c as u32);
    r.lwait(Line::Arrive, 1, kids);
    if i > 0 {
        r.lpost(Line::Arrive, 1, [first + (i - 1) / k]);
        r.lwait(Line::Release, 1, [first].into_iter());
        return;
    }
    leaders(r);
    r.lpost(Line::Release, 1, g.local_others());
}

/// The dissemination barrier of the cell leaders (called by leaders only).
pub fn leaders(r: &mut Run) {
    let g = r.g;
    let (nc, c) = (g.nc(), g.my_cell());
    let mut dist = 1u32;
    let mut round = 0u32;
    while dist < nc {
        let to = g.leader((c + dist) % nc);
        let from = g.leader((c + nc - dist) % nc);
        r.rpost(super::layout::Slot::Diss(round), to);
        r.rwait(super::layout::Slot::Diss(round), 1, &[from]);
        dist *= 2;
        round += 1;
    }
}
