//! Concatenation: `fcollect` (every member contributes the same size) and `collect` (sizes
//! differ), team and active-set forms.
//!
//! **What it is.** Member `i`'s block lands at its offset in every member's `dest`
//! (offsets in member order):
//!
//! 1. Every member copies its block into the `dest` of every member of its cell (the
//!    specification requires `dest` to be ready everywhere before anyone calls), then
//!    signals it. In a single cell everyone waits for everyone and is done.
//! 2. With several cells the leader waits for its cell, then the leaders exchange their
//!    cells' ranges (contiguous: cells are runs of consecutive members), writing straight
//!    into each other's `dest`: by *recursive doubling* (dissemination allgather: in step
//!    `k` send everything held so far, up to `2^k` cells, to the leader `2^k` cells on;
//!    `ceil(log2 cells)` steps) or, for three or more cells whose largest range has at least
//!    `SHMEM_COLL_RING_MIN` bytes, over a *ring* (`cells - 1` steps of one range each to
//!    the next leader). Every step is puts, one quiet, one counter add.
//! 3. The leader copies the other cells' ranges into its members' `dest` and releases them.
//!
//! `collect` between nodes whose PEs all reach each other directly (the collectives'
//! endpoint, `direct`; at most 64 nodes) takes **one round**: every member publishes its
//! size and its source's symmetric address (the specification requires a symmetric
//! source) and signals its leader; the leader reads its members' blocks through the shared
//! mappings and mails its node's sizes and blocks to every other leader (several datagrams
//! when large); with every node's mail in hand it writes all blocks, in member order, into
//! each of its members' `dest` (every byte once) and releases them. Team and active-set
//! forms alike; the active set's `pSync` words are cleared by their owners before they
//! return. Otherwise:
//!
//! `collect` first agrees on the offsets: each member publishes its size (team: its block
//! line; single cell: everyone reads everyone's), the leaders sum their cells and gather
//! the cell totals into the block's table with the same allgather (8 bytes per cell), and
//! each member derives its offset. An active-set `collect` has no block to gather totals
//! into, so it is flat: each member publishes its size (plus one) in its `pSync`, reads
//! every member's (across cells with gets, retried until published), puts its block into
//! every member's `dest`, quiets, and ends with a barrier of the active set, after which
//! its published word is cleared.
//!
//! **What it is not.** No scratch buffers: everything moves between the users' `dest`s.
//!
//! **Thread-safety.** As [`Run`].

use super::barrier;
use super::layout::{self, Exchange, Slot};
use super::run::{Buf, Line, Run};
use super::wait::wait;
use crate::fatal::fatal;
use std::sync::atomic::Ordering;

/// Where the blocks of a concatenation go: this PE's block and every cell's range.
struct Plan {
    /// This PE's `(offset, length)` in `dest`.
    mine: (usize, usize),
    /// Every cell's `(offset, length)`.
    cells: Vec<(usize, usize)>,
    /// The total length.
    total: usize,
}

/// `fcollect` of `n` bytes per member.
///
/// # Safety
///
/// `src` readable for `n` bytes; `dest` a symmetric object of `n * members` bytes on every
/// member.
pub unsafe fn fcollect(r: &mut Run, dest: Buf, src: *const u8, n: usize) {
    let g = r.g;
    let cells = (0..g.nc())
        .map(|c| {
            let m = g.cell(c);
            (m.start as usize * n, (m.end - m.start) as usize * n)
        })
        .collect();
    let plan = Plan {
        mine: (g.me() as usize * n, n),
        cells,
        total: g.n() as usize * n,
    };
    // SAFETY: forwarded.
    unsafe { allgather(r, dest, src, &plan, 1) };
}

/// Team `collect` of this PE's `n` bytes; the total is `dest`'s length on every member.
///
/// # Safety
///
/// `src` readable for `n` bytes; `dest` a symmetric object large enough for the total on
/// every member (or NULL when the total is 0).
pub unsafe fn collect_team(r: &mut Run, dest: *mut u8, src: *const u8, n: usize, call: &str) {
    // SAFETY: forwarded.
    if unsafe { collect_leaders(r, dest, src, n, call, 0) } {
        return;
    }
    let g = r.g;
    let local = g.local();
    r.published(g.me()).store(n as u64, Ordering::Relaxed);
    let size_of = |r: &Run, m: u32| r.published(m).load(Ordering::Relaxed) as usize;
    let cells: Vec<(usize, usize)> = if g.nc() == 1 {
        r.lpost(Line::Arrive, 1, g.local_others());
        r.lwait(Line::Arrive, 1, g.local_others());
        vec![(0, local.clone().map(|m| size_of(r, m)).sum())]
    } else {
        if g.nc() as usize > layout::MAX_CELLS {
            crate::fatal::fatal(
                call,
                format_args!(
                    "a team collect supports at most {} nodes; the team spans {}",
                    layout::MAX_CELLS,
                    g.nc()
                ),
            );
        }
        let leader = g.leader(g.my_cell());
        let table = r
            .block_buf(layout::CELL_TOTALS)
            .expect("teams have a block");
        if g.is_leader() {
            r.lwait(Line::Arrive, 1, g.local_others());
            let total: usize = local.clone().map(|m| size_of(r, m)).sum();
            let slot = table.local.wrapping_add(8 * g.my_cell() as usize);
            // SAFETY: word `my_cell` of the totals table of this PE's block (bounded by
            // MAX_CELLS above), written only here and by other leaders' puts of their own
            // words.
            unsafe { std::ptr::write_volatile(slot.cast::<u64>(), total as u64) };
            let words = (0..g.nc()).map(|c| (8 * c as usize, 8)).collect::<Vec<_>>();
            // SAFETY: the table holds `nc` words on every leader.
            unsafe { exchange(r, table, &words) };
            r.lpost(Line::Release, 1, g.local_others());
        } else {
            r.lpost(Line::Arrive, 1, [leader]);
            r.lwait(Line::Release, 1, [leader].into_iter());
        }
        let base = r.peer(leader, table, 0).cast::<u64>();
        let mut off = 0usize;
        (0..g.nc() as usize)
            .map(|c| {
                // SAFETY: word `c < nc <= MAX_CELLS` of the leader's table, complete after
                // its release (acquired by the wait above).
                let len = unsafe { std::ptr::read_volatile(base.add(c)) } as usize;
                off += len;
                (off - len, len)
            })
            .collect()
    };
    // Offsets inside this PE's cell.
    let (cell_off, _) = cells[g.my_cell() as usize];
    let before: usize = (local.start..g.me()).map(|m| size_of(r, m)).sum();
    let total = cells.iter().map(|c| c.1).sum();
    if total == 0 {
        return;
    }
    let dest = Buf {
        sym: r.st.translate(dest, total, call),
        local: dest,
    };
    let plan = Plan {
        mine: (cell_off + before, n),
        cells,
        total,
    };
    // SAFETY: forwarded; the plan's ranges lie inside `total` bytes.
    unsafe { allgather(r, dest, src, &plan, 2) };
}

/// The three phases of the module docs for a known plan (`step` numbers the signals).
///
/// # Safety
///
/// `src` readable for `plan.mine.1` bytes; `dest` holds `plan.total` bytes everywhere.
unsafe fn allgather(r: &mut Run, dest: Buf, src: *const u8, plan: &Plan, step: u32) {
    let g = r.g;
    let (off, len) = plan.mine;
    for m in g.local() {
        // SAFETY: `off + len <= total`, the size of `dest` on every member.
        unsafe { r.copy_to(m, dest, off, src, len) };
    }
    if g.nc() == 1 {
        r.lpost(Line::Arrive, step, g.local_others());
        r.lwait(Line::Arrive, step, g.local_others());
        return;
    }
    let leader = g.leader(g.my_cell());
    if !g.is_leader() {
        r.lpost(Line::Arrive, step, [leader]);
        r.lwait(Line::Release, step, [leader].into_iter());
        return;
    }
    r.lwait(Line::Arrive, step, g.local_others());
    // SAFETY: forwarded.
    unsafe { exchange(r, dest, &plan.cells) };
    let (lo, n) = plan.cells[g.my_cell() as usize];
    let hi = lo + n;
    for m in g.local_others() {
        // SAFETY: both ranges lie in `dest`, complete here after the exchange.
        unsafe {
            r.copy_to(m, dest, 0, dest.local, lo);
            r.copy_to(m, dest, hi, dest.local.add(hi), plan.total - hi);
        }
    }
    r.lpost(Line::Release, step, g.local_others());
}

/// The leaders' allgather of the cells' ranges `cells` of `buf` (see the module docs).
///
/// # Safety
///
/// This PE leads its cell; `buf` holds every range on every leader, this cell's range
/// complete here.
unsafe fn exchange(r: &mut Run, buf: Buf, cells: &[(usize, usize)]) {
    let g = r.g;
    let (nc, c) = (g.nc(), g.my_cell());
    let largest = cells.iter().map(|x| x.1).max().unwrap_or(0) as u64;
    if nc > 2 && largest >= r.st.config.coll_ring_min {
        let (next, prev) = (g.leader((c + 1) % nc), g.leader((c + nc - 1) % nc));
        for s in 0..nc - 1 {
            // SAFETY: at step `s` this PE holds cell `c - s` (its own, then the one
            // received in the step before).
            unsafe { send(r, buf, cells, next, &[(c + nc - s) % nc], Slot::Gather(0)) };
            r.rwait(Slot::Gather(0), 1, &[prev]);
        }
        return;
    }
    let mut have = 1u32;
    let mut k = 0u32;
    while have < nc {
        let cnt = have.min(nc - have);
        let held = held_cells(c, nc, cnt);
        let to = g.leader((c + have) % nc);
        // SAFETY: after step `k - 1` this PE holds cells `c - have + 1 ..= c`.
        unsafe { send(r, buf, cells, to, &held, Slot::Gather(k)) };
        r.rwait(Slot::Gather(k), 1, &[g.leader((c + nc - have) % nc)]);
        have += cnt;
        k += 1;
    }
}

/// The `cnt` cells a leader of cell `c` sends in a dissemination step: its own and the
/// ones before it.
fn held_cells(c: u32, nc: u32, cnt: u32) -> Vec<u32> {
    (0..cnt).map(|i| (c + nc - i) % nc).collect()
}

/// Puts the ranges of `list` (cells) to member `to`, one put per run of consecutive cells,
/// completes them and signals `slot`.
///
/// # Safety
///
/// This PE holds the ranges; they lie inside `buf` on every leader.
unsafe fn send(r: &mut Run, buf: Buf, cells: &[(usize, usize)], to: u32, list: &[u32], slot: Slot) {
    let mut list = list.to_vec();
    list.sort_unstable();
    let mut runs = Vec::new();
    let mut i = 0;
    while i < list.len() {
        let mut j = i;
        while j + 1 < list.len() && list[j + 1] == list[j] + 1 {
            j += 1;
        }
        let lo = cells[list[i] as usize].0;
        let (hlo, hn) = cells[list[j] as usize];
        runs.push((lo, hlo + hn - lo));
        i = j + 1;
    }
    // Straight to the leader when every run fits a datagram: data, then the signal with
    // the last run (delivered in order), no round trip through a service.
    if runs.iter().all(|&(_, len)| r.direct_data(to, len)) {
        let last = runs.len().saturating_sub(1);
        for (k, &(lo, len)) in runs.iter().enumerate() {
            let signal = (k == last).then_some(slot);
            // SAFETY: the caller's contract.
            unsafe { r.send_to(to, buf, lo, buf.local.add(lo), len, signal) };
        }
        if runs.is_empty() {
            r.rpost(slot, to);
        }
        return;
    }
    for (lo, len) in runs {
        // SAFETY: the caller's contract.
        unsafe { r.put_to(to, buf, lo, buf.local.add(lo), len) };
    }
    r.quiet();
    r.rpost(slot, to);
}

/// Active-set `collect` (flat; see the module docs).
///
/// # Safety
///
/// As [`collect_team`].
pub unsafe fn collect_set(r: &mut Run, dest: *mut u8, src: *const u8, n: usize, call: &str) {
    // SAFETY: forwarded.
    if unsafe { collect_leaders(r, dest, src, n, call, 1) } {
        return;
    }
    let g = r.g;
    let (st, me) = (r.st, g.me());
    r.published(me).store(n as u64 + 1, Ordering::Release);
    let psync = r.psync_buf(layout::PUBLISH_WORD);
    // Members of other cells reached directly get this PE's size as a note (and its block
    // as another when it fits a datagram) instead of reading the pSync word and being
    // put to through the services; the choice is the same on both sides of a pair.
    let direct: Vec<bool> = (0..g.n())
        .map(|m| g.cell_of(m) != g.my_cell() && r.direct_data(m, 0))
        .collect();
    for m in (0..g.n()).filter(|&m| direct[m as usize]) {
        r.note_to(m, NOTE_SIZE, &(n as u64).to_le_bytes());
    }
    let mut sizes = vec![0usize; g.n() as usize];
    for m in 0..g.n() {
        let local = g.cell_of(m) == g.my_cell();
        let mut got = 0u64;
        wait(
            st,
            call,
            || {
                got = if local {
                    r.published(m).load(Ordering::Acquire)
                } else if direct[m as usize] {
                    let mut w = [0u8; 8];
                    if !r.take_note(m, NOTE_SIZE, &mut w) {
                        return false;
                    }
                    u64::from_le_bytes(w) + 1
                } else {
                    let mut w = [0u8; 8];
                    // SAFETY: `w` is writable for 8 bytes; the word is in the pSync.
                    unsafe { r.get_from(m, psync, 0, w.as_mut_ptr(), 8) };
                    u64::from_ne_bytes(w)
                };
                got != 0
            },
            || format!("PE {} to publish its collect size in pSync", g.world(m)),
        );
        sizes[m as usize] = (got - 1) as usize;
    }
    let total: usize = sizes.iter().sum();
    let noted = |m: u32, len: usize| direct[m as usize] && r.direct_data(m, len);
    if total > 0 {
        let off: usize = sizes[..me as usize].iter().sum();
        let dest = Buf {
            sym: st.translate(dest, total, call),
            local: dest,
        };
        for m in 0..g.n() {
            // SAFETY: `off + n <= total`, the size of `dest` everywhere; `src` holds `n`.
            unsafe {
                if g.cell_of(m) == g.my_cell() {
                    r.copy_to(m, dest, off, src, n);
                } else if noted(m, n) {
                    if n > 0 {
                        r.note_to(m, NOTE_DATA, std::slice::from_raw_parts(src, n));
                    }
                } else {
                    r.put_to(m, dest, off, src, n);
                }
            }
        }
        r.quiet();
        for m in (0..g.n()).filter(|&m| sizes[m as usize] > 0 && noted(m, sizes[m as usize])) {
            let (at, len) = (sizes[..m as usize].iter().sum::<usize>(), sizes[m as usize]);
            let mut block = vec![0u8; len];
            wait(
                st,
                call,
                || r.take_note(m, NOTE_DATA, &mut block),
                || format!("PE {} to send its collect block", g.world(m)),
            );
            // SAFETY: `at + len <= total`; this PE's `dest` holds the total.
            unsafe { gsas_transport::watched::store_once(block.as_ptr(), dest.local.add(at), len) };
        }
    }
    barrier::sync(r);
    r.published(me).store(0, Ordering::Release);
}

/// Most cells of a [`collect_leaders`] (each leader sends one mail to every other).
const MAIL_CELLS: u32 = 64;

/// `collect` between nodes in one round when every member of another cell is reached
/// directly (module docs); false, having done nothing, otherwise. `bias` is added to the
/// published size (1 for an active set, whose `pSync` words are 0 when unpublished).
///
/// # Safety
///
/// As [`collect_team`].
unsafe fn collect_leaders(
    r: &mut Run,
    dest: *mut u8,
    src: *const u8,
    n: usize,
    call: &str,
    bias: u64,
) -> bool {
    let g = r.g;
    let (nc, me, my_cell) = (g.nc(), g.me(), g.my_cell());
    // Every member must choose alike: all of them have an endpoint (the same-node ones
    // included, whose choice would otherwise differ from this PE's).
    if nc == 1 || nc > MAIL_CELLS || !r.all_direct() {
        return false;
    }
    let st = r.st;
    let leader = g.leader(my_cell);
    // The source's symmetric address, for the leader to read the block through its mapping
    // (the specification requires a symmetric source).
    let at = if n > 0 {
        let a = st.translate(src, n, call);
        u64::from(a.seg) << 56 | a.off
    } else {
        0
    };
    r.published_src(me).store(at, Ordering::Relaxed);
    r.published(me).store(n as u64 + bias, Ordering::Release);
    if !g.is_leader() {
        r.lpost(Line::Arrive, 1, [leader]);
        r.lwait(Line::Release, 1, [leader].into_iter());
        clear(r, me, bias);
        return true;
    }
    r.lwait(Line::Arrive, 1, g.local_others());
    // This cell's mail: every member's size, then the blocks in member order.
    let local = g.local();
    let sizes: Vec<usize> = local
        .clone()
        .map(|m| (r.published(m).load(Ordering::Acquire) - bias) as usize)
        .collect();
    let mut mail = super::direct::buffer();
    for &l in &sizes {
        mail.extend_from_slice(&(l as u64).to_le_bytes());
    }
    for (m, &len) in local.clone().zip(&sizes) {
        if len == 0 {
            continue;
        }
        let w = r.published_src(m).load(Ordering::Relaxed);
        let sym = crate::addr::SymAddr {
            seg: (w >> 56) as u8,
            off: w & ((1 << 56) - 1),
        };
        let p = if m == me {
            src
        } else {
            st.direct_ptr(g.world(m), sym).unwrap_or_else(|| {
                fatal(
                    call,
                    format_args!(
                        "internal error: the source of PE {} is not mapped",
                        g.world(m)
                    ),
                )
            })
        };
        // SAFETY: member `m`'s source holds `len` bytes (it published them and waits for
        // the release); only read.
        mail.extend_from_slice(unsafe { std::slice::from_raw_parts(p, len) });
    }
    let others: Vec<u32> = (0..nc)
        .filter(|&c| c != my_cell)
        .map(|c| g.leader(c))
        .collect();
    // Every other leader signals this counter: kept apart by call parity (see `layout`).
    let slot = Slot::CollectMail(r.exchange_parity(Exchange::CollectMail));
    for &l in &others {
        r.mail_vec_to(l, &mail, slot);
    }
    r.rwait(slot, others.len() as u64, &others);
    // Every cell's mail and where its blocks start (after its sizes), in cell order.
    let mut cells: Vec<(Vec<u8>, usize)> = Vec::with_capacity(nc as usize);
    for c in 0..nc {
        let got = if c == my_cell {
            std::mem::take(&mut mail)
        } else {
            r.take_mail_any(g.leader(c), slot)
                .unwrap_or_else(|| fatal(call, "internal error: a node's collect data is missing"))
        };
        let head = 8 * g.cell(c).len();
        let sum: u64 = got.get(..head).map_or(u64::MAX, |h| {
            h.chunks(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
                .sum()
        });
        if sum != (got.len() - head.min(got.len())) as u64 {
            fatal(
                call,
                "internal error: a node's collect data has the wrong length",
            );
        }
        cells.push((got, head));
    }
    let total: usize = cells.iter().map(|(m, head)| m.len() - head).sum();
    if total > 0 {
        let dest = Buf {
            sym: st.translate(dest, total, call),
            local: dest,
        };
        for m in local {
            let mut off = 0;
            for (mail, head) in &cells {
                let blocks = &mail[*head..];
                // SAFETY: the cells' blocks add up to `total`, the size of `dest` on every
                // member; each byte is written once.
                unsafe { r.copy_to(m, dest, off, blocks.as_ptr(), blocks.len()) };
                off += blocks.len();
            }
        }
    }
    for (mail, _) in cells {
        super::direct::recycle(mail);
    }
    r.lpost(Line::Release, 1, g.local_others());
    clear(r, me, bias);
    true
}

/// Clears what member `me` published for an active set (its `pSync` words back at 0).
fn clear(r: &Run, me: u32, bias: u64) {
    if bias > 0 {
        r.published_src(me).store(0, Ordering::Relaxed);
        r.published(me).store(0, Ordering::Release);
    }
}

/// Note keys of the active-set `collect`: the size, the block.
const NOTE_SIZE: u64 = 1;
const NOTE_DATA: u64 = 2;

#[cfg(test)]
mod tests {
    use super::held_cells;

    #[test]
    fn dissemination_gives_every_leader_every_cell_once() {
        for nc in 1..40u32 {
            let mut has: Vec<Vec<bool>> =
                (0..nc).map(|c| (0..nc).map(|x| x == c).collect()).collect();
            let mut have = 1u32;
            while have < nc {
                let cnt = have.min(nc - have);
                let before = has.clone();
                for c in 0..nc {
                    let to = ((c + have) % nc) as usize;
                    for x in held_cells(c, nc, cnt) {
                        assert!(
                            before[c as usize][x as usize],
                            "nc {nc}: {c} sends {x} it lacks"
                        );
                        assert!(!has[to][x as usize], "nc {nc}: {to} gets {x} twice");
                        has[to][x as usize] = true;
                    }
                }
                have += cnt;
            }
            assert!(has.iter().all(|h| h.iter().all(|&b| b)), "nc {nc}");
        }
    }
}
