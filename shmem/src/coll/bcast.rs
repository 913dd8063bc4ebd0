//! Broadcast: `shmem_TYPENAME_broadcast`, `shmem_broadcastmem` and `shmem_broadcast{32,64}`.
//!
//! **What it is.** The root's `source` reaches every member's `dest` with one transfer per
//! cell (node):
//!
//! 1. **Within the root's cell** the root copies the data into every other member's `dest`
//!    through the shared mappings and releases them with one store (a team) or one add per
//!    member (an active set). When another cell exists and the root does not lead its own
//!    cell, it copies into the leader's `dest` first and tells the leader alone (one more
//!    signal), so that the leader can send the data on while the root copies to the rest.
//! 2. **Across cells**, a binomial tree over the cells rotated so that the root's cell is
//!    first, between the cells' *leaders* (the root's cell's too: the root itself when it
//!    leads, else its leader after the hand-over above). A leader at rotated position `v`
//!    receives the data from position `v - 2^j` (`2^j` the highest power of two in `v`):
//!    the parent puts it straight into the leader's `dest` and adds one to the leader's
//!    counter for distance `2^j` (in one datagram over the direct path; a put, a quiet and
//!    an add through the services otherwise). It then forwards to positions `v + 2^k` for
//!    every `2^k > v` inside the group, farthest first, and copies the data into its cell
//!    members' `dest`s and releases them. `ceil(log2 cells)` steps; the root sends
//!    `ceil(log2 cells)` messages instead of one per PE.
//!
//! The sender of the counter for distance `2^j` is always the leader of the cell `2^j`
//! positions before, whichever PE is the root: two broadcasts in a row from different
//! roots of one node do not signal a counter from two PEs, whose increments could arrive
//! out of order (see `layout`).
//!
//! Nobody waits for the root's data to be consumed: the specification requires `dest` to
//! be ready on every PE before any PE calls the broadcast, so the root and forwarding PEs
//! return as soon as their copies are done. An active-set broadcast does not write the
//! root's `dest`; a team broadcast does (OpenSHMEM 1.5 §9.9.4).
//!
//! **What it is not.** Not pipelined: every hop carries the whole message (the node
//! client fragments it into MTU-sized packets).
//!
//! **Thread-safety.** As [`Run`].

use super::layout::Slot;
use super::run::{Buf, Line, Run};

/// The children of rotated position `v` in a binomial tree of `nc` positions, as exponents
/// `k` (the child is `v + 2^k`), farthest first.
fn children(v: u32, nc: u32) -> impl Iterator<Item = u32> {
    let first = if v == 0 { 0 } else { v.ilog2() + 1 };
    (first..32)
        .take_while(move |&k| u64::from(v) + (1u64 << k) < u64::from(nc))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
}

/// Broadcasts `n` bytes from member `root`'s `src` to every member's `dest`;
/// `write_root`: whether the root's own `dest` receives them (team broadcasts).
///
/// # Safety
///
/// On the root `src` is readable for `n` bytes; `dest` is a symmetric object of at least
/// `n` bytes on every member.
pub unsafe fn broadcast(
    r: &mut Run,
    dest: Buf,
    src: *const u8,
    n: usize,
    root: u32,
    write_root: bool,
) {
    let g = r.g;
    let (nc, c, me) = (g.nc(), g.my_cell(), g.me());
    let root_cell = g.cell_of(root);
    let leader = g.leader(c);
    // The root hands the data to its cell's leader when that leader sends it on.
    let hand_over = nc > 1 && c == root_cell && leader != root;
    if me == root {
        if hand_over {
            // SAFETY: `src` holds `n` bytes; `dest` has `n` bytes on every member.
            unsafe { r.copy_to(leader, dest, 0, src, n) };
            r.lpost(Line::Arrive, 2, [leader]);
        } else if nc > 1 {
            // SAFETY: as above.
            unsafe { forward(r, dest, src, n, root_cell) };
        }
        let rest: Vec<u32> = g
            .local_others()
            .filter(|&m| !(hand_over && m == leader))
            .collect();
        for &m in &rest {
            // SAFETY: as above; `m` is a member of this PE's cell.
            unsafe { r.copy_to(m, dest, 0, src, n) };
        }
        if write_root && dest.local.cast_const() != src {
            // SAFETY: this PE's `dest` holds `n` bytes; source and destination are the same
            // object or disjoint (`store_once` behaves as memmove either way).
            unsafe { gsas_transport::watched::store_once(src, dest.local, n) };
        }
        r.lpost(Line::Release, 1, rest);
        return;
    }
    if hand_over && me == leader {
        r.lwait(Line::Arrive, 2, [root].into_iter());
        // SAFETY: the root copied the data into this PE's `dest` before its signal.
        unsafe { forward(r, dest, dest.local, n, root_cell) };
        return;
    }
    if c == root_cell || me != leader {
        let from = if c == root_cell { root } else { leader };
        r.lwait(Line::Release, 1, [from].into_iter());
        return;
    }
    // The leader of another cell: receive, send on, copy to the cell.
    // SAFETY: the data arrives in this PE's `dest` (`n` bytes) before the signal.
    unsafe { forward(r, dest, dest.local, n, root_cell) };
    for m in g.local_others() {
        // SAFETY: as above; `m` is a member of this PE's cell.
        unsafe { r.copy_to(m, dest, 0, dest.local, n) };
    }
    r.lpost(Line::Release, 1, g.local_others());
}

/// The tree across cells, on this cell's leader (or the root leading its cell): waits for
/// the parent's data unless this is the root's cell, then sends `data` to the children's
/// leaders.
///
/// # Safety
///
/// `data` holds the broadcast's `n` bytes once the parent's signal arrived (the root's
/// source, or this PE's `dest`); `dest` has `n` bytes on every member.
unsafe fn forward(r: &mut Run, dest: Buf, data: *const u8, n: usize, root_cell: u32) {
    let g = r.g;
    let (nc, c) = (g.nc(), g.my_cell());
    let v = (c + nc - root_cell) % nc;
    if v != 0 {
        let j = v.ilog2();
        let parent = g.leader((c + nc - (1 << j)) % nc);
        r.rwait(Slot::Bcast(j), 1, &[parent]);
    }
    let kids: Vec<(u32, u32)> = children(v, nc)
        .map(|k| (k, g.leader((c + (1 << k)) % nc)))
        .collect();
    // Kids reached directly get data and signal in one datagram; the others a put through
    // their services, completed before their signals.
    let (fast, slow): (Vec<_>, Vec<_>) = kids.iter().partition(|&&(_, kid)| r.direct_data(kid, n));
    for &(k, kid) in &fast {
        // SAFETY: the caller's contract.
        unsafe { r.send_to(kid, dest, 0, data, n, Some(Slot::Bcast(k))) };
    }
    for &(_, kid) in &slow {
        // SAFETY: as above.
        unsafe { r.put_to(kid, dest, 0, data, n) };
    }
    if !slow.is_empty() {
        r.quiet();
        for &(k, kid) in &slow {
            r.rpost(Slot::Bcast(k), kid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::children;

    #[test]
    fn every_position_has_one_parent_at_its_highest_bit() {
        for nc in 1..70u32 {
            let mut parent = vec![None; nc as usize];
            for v in 0..nc {
                let kids: Vec<u32> = children(v, nc).collect();
                assert!(kids.windows(2).all(|w| w[0] > w[1]), "farthest first");
                for k in kids {
                    let child = v + (1 << k);
                    assert!(
                        parent[child as usize].replace(v).is_none(),
                        "nc {nc}: {child} twice"
                    );
                    // The receiver finds its parent 2^j back, 2^j its highest bit.
                    assert_eq!(child.ilog2(), k);
                }
            }
            assert!(parent[0].is_none());
            assert!(
                parent[1..].iter().all(Option::is_some),
                "nc {nc}: unreached positions"
            );
        }
    }
}
