//! Broadcast: `shmem_TYPENAME_broadcast`, `shmem_broadcastmem` and `shmem_broadcast{32,64}`.
//!
//! **What it is.** The root's `source` reaches every member's `dest` with one transfer per
//! cell (node):
//!
//! 1. **Across cells**, a binomial tree over the cells rotated so that the root's cell is
//!    first. The *representative* of the root's cell is the root, of every other cell its
//!    leader. A representative at rotated position `v` receives the data from position
//!    `v - 2^j` (`2^j` the highest power of two in `v`): the parent puts it straight into
//!    the representative's `dest`, completes it (quiet) and adds one to the
//!    representative's counter for distance `2^j`. It then forwards to positions `v + 2^k`
//!    for every `2^k > v` inside the group, farthest first. `ceil(log2 cells)` steps; the
//!    root sends `ceil(log2 cells)` messages instead of one per PE.
//! 2. **Within each cell** the representative copies the data into every other member's
//!    `dest` through the shared mappings and releases them with one store (a team) or one
//!    add per member (an active set).
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
    let rep = |cell: u32| {
        if cell == root_cell {
            root
        } else {
            g.leader(cell)
        }
    };
    let my_rep = rep(c);
    if my_rep != me {
        r.lwait(Line::Release, 1, [my_rep].into_iter());
        return;
    }
    let data: *const u8 = if me == root { src } else { dest.local };
    if nc > 1 {
        let v = (c + nc - root_cell) % nc;
        if v != 0 {
            let j = v.ilog2();
            let parent = rep((c + nc - (1 << j)) % nc);
            r.rwait(Slot::Bcast(j), 1, &[parent]);
        }
        let kids: Vec<(u32, u32)> = children(v, nc)
            .map(|k| (k, rep((c + (1 << k)) % nc)))
            .collect();
        for &(_, kid) in &kids {
            // SAFETY: `data` holds `n` bytes (the root's source or this PE's received
            // `dest`); `dest` has `n` bytes on every member.
            unsafe { r.put_to(kid, dest, 0, data, n) };
        }
        if !kids.is_empty() {
            r.quiet();
            for &(k, kid) in &kids {
                r.rpost(Slot::Bcast(k), kid);
            }
        }
    }
    for m in g.local_others() {
        // SAFETY: as above; `m` is a member of this PE's cell.
        unsafe { r.copy_to(m, dest, 0, data, n) };
    }
    if me == root && write_root && dest.local.cast_const() != src {
        // SAFETY: this PE's `dest` holds `n` bytes; source and destination are the same
        // object or disjoint (`store_once` behaves as memmove either way).
        unsafe { gsas_transport::watched::store_once(src, dest.local, n) };
    }
    r.lpost(Line::Release, 1, g.local_others());
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
