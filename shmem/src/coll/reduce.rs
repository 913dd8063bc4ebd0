//! Reductions: `shmem_TYPENAME_OP_reduce` (teams) and `shmem_TYPENAME_OP_to_all` (active
//! sets), every operation on every type of the specification's tables, in place or not.
//!
//! **What it is.** The result is computed once, in a fixed order, and copied to everyone,
//! so every PE gets the same bits (also for floating point):
//!
//! 1. **Within each cell** every member signals that its `source` is ready; the leader
//!    folds the cell's sources in member order into its own `dest` (reading them through
//!    the shared mappings): `dest = s[first] op s[first+1] op ...`.
//! 2. **Across cells** a binomial tree rooted at cell 0: cell `c` takes its children
//!    `c + 2^j` (for every `2^j` below the lowest set bit of `c`, all for cell 0) in
//!    increasing `j`, each covering the cells `[c + 2^j, c + 2^(j+1))`, so the fold stays in
//!    member order. A child announces that its partial (in its `dest`) is ready with a
//!    counter add; the parent reads it with a get and folds it in. Cell 0's leader then
//!    holds the result and sends it back down the same tree: a put into each child's
//!    `dest`, a quiet, a counter add. A child's `dest` is overwritten only after its parent
//!    read it.
//!    When the number of cells is a power of two, every member of the group has a
//!    collective endpoint (`direct`; asked once per group, so that all leaders choose alike,
//!    also when two cells' leaders share a node) and the whole array fits
//!    `SHMEM_COLL_DIRECT_MAX`, the leaders
//!    instead exchange partials by *recursive doubling*: in step `j` leader `c` mails its
//!    partial to the leader of cell `c ^ 2^j` and both fold `lower op upper` (the lower cell
//!    first), `log2 cells` one-way steps instead of twice as many; the tree of folds, and so
//!    every bit of the result, is the binomial tree's.
//! 3. The leader copies the result into its members' `dest` and releases them.
//!
//! In-place reductions (`dest == source`) work because a member's `dest` is written only
//! after its leader read all of its `source`. No work array is needed: the partials travel
//! in the leaders' `dest`s, so the active-set forms ignore `pWrk` (which the specification
//! allows the implementation to use, not requires).
//!
//! **What it is not.** Not a scan (OpenSHMEM 1.6), and not pipelined by chunks: each hop
//! carries the whole array.
//!
//! **Thread-safety.** As [`Run`].

use super::layout::Slot;
use super::ops::Kernel;
use super::run::{Buf, Line, Run};

/// The children of cell `c` in the binomial tree rooted at cell 0 of `nc` cells, as
/// exponents `j` (the child is `c + 2^j`), in increasing order: each covers the cells
/// `[c + 2^j, c + 2^(j+1))`.
fn children(c: u32, nc: u32) -> impl Iterator<Item = u32> {
    let below = if c == 0 { 32 } else { c.trailing_zeros() };
    (0..below).take_while(move |&j| u64::from(c) + (1u64 << j) < u64::from(nc))
}

/// Reduces `n` bytes (`count` elements) of every member's `src` into every member's `dest`
/// with `k`.
///
/// # Safety
///
/// `src` and `dest` symmetric objects of `n` bytes on every member, identical or disjoint;
/// `k` a kernel of their element type.
pub unsafe fn reduce(r: &mut Run, dest: Buf, src: Buf, n: usize, count: usize, k: Kernel) {
    let g = r.g;
    let leader = g.leader(g.my_cell());
    if !g.is_leader() {
        r.lpost(Line::Arrive, 1, [leader]);
        r.lwait(Line::Release, 1, [leader].into_iter());
        return;
    }
    r.lwait(Line::Arrive, 1, g.local_others());
    if dest.local != src.local {
        // SAFETY: both hold `n` bytes here and are disjoint.
        unsafe { gsas_transport::watched::store_once(src.local, dest.local, n) };
    }
    for m in g.local_others() {
        let theirs = r.peer(m, src, 0);
        // SAFETY: `theirs` maps member `m`'s source (`n` bytes), ready since its arrival.
        unsafe { k(dest.local, theirs, count) };
    }
    let (nc, c) = (g.nc(), g.my_cell());
    // Every leader must choose alike: the exchange needs every member's endpoint (a
    // same-node leader, which `direct_data` would refuse, is mailed too).
    if nc > 1 && nc.is_power_of_two() && n <= super::direct::data_max(r.st) && r.all_direct() {
        // SAFETY: forwarded.
        unsafe { exchange(r, dest, n, count, k) };
    } else if nc > 1 {
        let kids: Vec<(u32, u32)> = children(c, nc)
            .map(|j| (j, g.leader(c + (1 << j))))
            .collect();
        let mut partial = vec![0u8; if kids.is_empty() { 0 } else { n }];
        for &(j, kid) in &kids {
            r.rwait(Slot::ReduceUp(j), 1, &[kid]);
            // A child that reaches this PE directly mailed its partial with the signal;
            // otherwise it is read from the child's `dest`.
            if !r.take_mail(kid, Slot::ReduceUp(j), &mut partial) {
                // SAFETY: `partial` holds `n` bytes; the child's `dest` holds its partial.
                unsafe { r.get_from(kid, dest, 0, partial.as_mut_ptr(), n) };
            }
            // SAFETY: both hold `count` elements.
            unsafe { k(dest.local, partial.as_ptr(), count) };
        }
        if c != 0 {
            let j = c.trailing_zeros();
            let parent = g.leader(c - (1 << j));
            if r.direct_data(parent, n) {
                // SAFETY: this PE's `dest` holds its partial (`n` bytes).
                unsafe { r.mail_to(parent, dest.local, n, Slot::ReduceUp(j)) };
            } else {
                r.rpost(Slot::ReduceUp(j), parent);
            }
            r.rwait(Slot::ReduceDown, 1, &[parent]);
        }
        let (fast, slow): (Vec<_>, Vec<_>) = kids
            .iter()
            .rev()
            .partition(|&&(_, kid)| r.direct_data(kid, n));
        for &(_, kid) in &fast {
            // SAFETY: this PE's `dest` holds the result; the child's holds `n` bytes.
            unsafe { r.send_to(kid, dest, 0, dest.local, n, Some(Slot::ReduceDown)) };
        }
        for &(_, kid) in &slow {
            // SAFETY: as above.
            unsafe { r.put_to(kid, dest, 0, dest.local, n) };
        }
        if !slow.is_empty() {
            r.quiet();
            for &(_, kid) in &slow {
                r.rpost(Slot::ReduceDown, kid);
            }
        }
    }
    for m in g.local_others() {
        // SAFETY: the result is in this PE's `dest`; member `m`'s `dest` holds `n` bytes and
        // its source was read above.
        unsafe { r.copy_to(m, dest, 0, dest.local, n) };
    }
    r.lpost(Line::Release, 1, g.local_others());
}

/// Recursive doubling between the leaders of a power-of-two number of cells, reached
/// directly: in step `j` each leader mails its partial to the leader of cell `c ^ 2^j` and
/// combines the two as `lower op upper` (the cell with the lower number first), so both
/// hold the same bits, those of the binomial tree's fold.
///
/// # Safety
///
/// As [`reduce`]; this PE leads its cell and its `dest` holds the cell's partial.
unsafe fn exchange(r: &mut Run, dest: Buf, n: usize, count: usize, k: Kernel) {
    let g = r.g;
    let (nc, c) = (g.nc(), g.my_cell());
    let mut other = super::direct::buffer();
    other.resize(n, 0);
    let mut j = 0u32;
    while 1u32 << j < nc {
        let partner = c ^ (1 << j);
        let pl = g.leader(partner);
        // SAFETY: this PE's `dest` holds its partial (`n` bytes).
        unsafe { r.mail_to(pl, dest.local, n, Slot::ReduceUp(j)) };
        r.rwait(Slot::ReduceUp(j), 1, &[pl]);
        if !r.take_mail(pl, Slot::ReduceUp(j), &mut other) {
            crate::fatal::fatal(r.call, "internal error: a partial reduction is missing");
        }
        // SAFETY: both hold `count` elements; `dest` is this PE's own (no other PE reads it
        // before the release).
        unsafe {
            if c < partner {
                k(dest.local, other.as_ptr(), count);
            } else {
                k(other.as_mut_ptr(), dest.local, count);
                gsas_transport::watched::store_once(other.as_ptr(), dest.local, n);
            }
        }
        j += 1;
    }
    super::direct::recycle(other);
}

#[cfg(test)]
mod tests {
    use super::children;

    /// The cells whose partials reach cell `c`, in the order they are folded.
    fn covered(c: u32, nc: u32) -> Vec<u32> {
        let mut out = vec![c];
        for j in children(c, nc) {
            out.extend(covered(c + (1 << j), nc));
        }
        out
    }

    #[test]
    fn the_tree_folds_every_cell_once_in_order() {
        for nc in 1..70u32 {
            assert_eq!(covered(0, nc), (0..nc).collect::<Vec<_>>(), "nc {nc}");
            for c in 1..nc {
                // A child's lowest set bit names the counter its parent waits on.
                let j = c.trailing_zeros();
                assert!(children(c - (1 << j), nc).any(|k| k == j));
            }
        }
    }
}
