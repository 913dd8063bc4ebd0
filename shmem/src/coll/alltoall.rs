//! Personalized exchange: `shmem_TYPENAME_alltoall[s]`, `shmem_alltoall[s]mem` and
//! `shmem_alltoall[s]{32,64}`.
//!
//! **What it is.** Block `l` of member `k`'s `source` goes to block `k` of member `l`'s
//! `dest` (OpenSHMEM 1.5 §9.9.7; `alltoalls` strides elements by `sst` in the source and
//! `dst` in the destination, §9.9.8). The data is pairwise by nature, so every member
//! writes its blocks straight into their destinations, visiting the members in ring order
//! from its right neighbour (so that not everyone targets member 0 first): cell members by
//! copies through the shared mappings, other cells straight to the member over the direct
//! path (a contiguous block with its signal in one datagram; a strided one packed as mail,
//! which the receiver scatters into its `dest` after the signals), else with puts through
//! the services (a strided block whose destination is contiguous packed into one put, a
//! strided destination one non-blocking put per element). Then it completes its puts (one
//! quiet), adds one to every other-cell member's counter of this call's parity, signals its
//! cell (one store for a team), and waits for its cell and for the counter to reach the
//! number of members outside its cell. A member cannot run two alltoalls ahead of another
//! one (it needs everyone's blocks), so two counters, by parity of the call's number among
//! the team's alltoalls (not of its sequence number: see `layout`), keep consecutive calls
//! apart.
//!
//! **What it is not.** No aggregation of small blocks per node: each pair of PEs on
//! different nodes exchanges one message each way.
//!
//! **Thread-safety.** As [`Run`].

use super::layout::{Exchange, Slot};
use super::run::{Buf, Line, Run};

/// The shape of the blocks: `nelems` elements of `elem` bytes, strides in elements.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Elements per block.
    pub nelems: usize,
    /// Bytes per element.
    pub elem: usize,
    /// Destination stride (1 for `alltoall`).
    pub dst: usize,
    /// Source stride (1 for `alltoall`).
    pub sst: usize,
}

impl Shape {
    /// Bytes a block spans in the destination (from its first to past its last element).
    pub fn dest_block(&self) -> usize {
        self.nelems * self.dst * self.elem
    }

    /// Bytes a block spans in the source.
    pub fn src_block(&self) -> usize {
        self.nelems * self.sst * self.elem
    }

    /// Bytes of `dest` or `src` the whole exchange covers for `n` members.
    pub fn extent(&self, n: u32, stride: usize) -> usize {
        if self.nelems == 0 {
            return 0;
        }
        ((n as usize * self.nelems - 1) * stride + 1) * self.elem
    }
}

/// The exchange; see the [module docs](self).
///
/// # Safety
///
/// `src` readable over the source extent; `dest` a symmetric object over the destination
/// extent on every member.
pub unsafe fn alltoall(r: &mut Run, dest: Buf, src: *const u8, shape: Shape) {
    let g = r.g;
    let (n, me, my_cell) = (g.n(), g.me(), g.my_cell());
    let mut remote = 0u64;
    let parity = r.exchange_parity(Exchange::AllToAll);
    let block = shape.nelems * shape.elem;
    let mut slow = Vec::new();
    // Members this PE mails a packed block for a strided destination: the same members mail
    // this PE theirs (every member has the shape, and the choice is symmetric).
    let mut mailed = Vec::new();
    for k in 0..n {
        let l = (me + 1 + k) % n;
        let from = src.wrapping_add(l as usize * shape.src_block());
        let at = me as usize * shape.dest_block();
        if g.cell_of(l) == my_cell {
            // SAFETY: block `l` of the source and block `me` of member `l`'s `dest` lie in
            // their extents (the caller's contract).
            unsafe { copy_block(r, l, dest, at, from, shape) };
        } else if r.direct_data(l, block) {
            let slot = Slot::AllToAll(parity);
            if shape.sst == 1 && shape.dst == 1 {
                // Data and signal in one datagram straight to `l`.
                // SAFETY: as above; the blocks are contiguous.
                unsafe { r.send_to(l, dest, at, from, block, Some(slot)) };
            } else if shape.dst == 1 {
                // A strided source, packed, into a contiguous destination.
                // SAFETY: block `l` of the source lies in its extent.
                let packed = unsafe { pack(from, shape) };
                // SAFETY: `packed` holds the block; block `me` of `l`'s `dest` is contiguous.
                unsafe { r.send_to(l, dest, at, packed.as_ptr(), block, Some(slot)) };
            } else {
                // Strided: the block packed as mail, which `l` scatters into its `dest`.
                // SAFETY: block `l` of the source lies in its extent.
                let packed = unsafe { pack(from, shape) };
                r.mail_vec_to(l, &packed, slot);
                mailed.push(l);
            }
            remote += 1;
        } else {
            // SAFETY: as above.
            unsafe { put_block(r, l, dest, at, from, shape) };
            remote += 1;
            slow.push(l);
        }
    }
    if !slow.is_empty() {
        r.quiet();
        for &l in &slow {
            r.rpost(Slot::AllToAll(parity), l);
        }
    }
    r.lpost(Line::Arrive, 1, g.local_others());
    r.lwait(Line::Arrive, 1, g.local_others());
    let outside: Vec<u32> = (0..n).filter(|&l| g.cell_of(l) != my_cell).collect();
    r.rwait(Slot::AllToAll(parity), remote, &outside);
    if !mailed.is_empty() {
        let mut packed = vec![0u8; block];
        for &k in &mailed {
            if !r.take_mail(k, Slot::AllToAll(parity), &mut packed) {
                crate::fatal::fatal(r.call, "internal error: an alltoalls block is missing");
            }
            let to = r.peer(me, dest, k as usize * shape.dest_block());
            // SAFETY: block `k` of this PE's `dest` spans `dest_block` bytes (the caller's
            // contract); the packed block holds `nelems` elements.
            unsafe { scatter(packed.as_ptr(), to, shape) };
        }
    }
}

/// The `nelems` elements of a source block at `from` (stride `sst`), packed.
///
/// # Safety
///
/// `from` readable over the block's strided extent.
unsafe fn pack(from: *const u8, s: Shape) -> Vec<u8> {
    let mut packed = Vec::with_capacity(s.nelems * s.elem);
    for i in 0..s.nelems {
        // SAFETY: element `i` of the strided source block.
        let e = unsafe { std::slice::from_raw_parts(from.add(i * s.sst * s.elem), s.elem) };
        packed.extend_from_slice(e);
    }
    packed
}

/// Writes `nelems` packed elements into a destination block at `to` (stride `dst`), each
/// element once (other PEs may watch `dest`).
///
/// # Safety
///
/// `packed` holds the block; `to` writable over its strided extent.
unsafe fn scatter(packed: *const u8, to: *mut u8, s: Shape) {
    for i in 0..s.nelems {
        // SAFETY: element `i` of both.
        unsafe {
            gsas_transport::watched::store_once(
                packed.add(i * s.elem),
                to.add(i * s.dst * s.elem),
                s.elem,
            )
        };
    }
}

/// Copies one block to cell member `l`.
///
/// # Safety
///
/// As [`alltoall`].
unsafe fn copy_block(r: &Run, l: u32, dest: Buf, at: usize, from: *const u8, s: Shape) {
    if s.dst == 1 && s.sst == 1 {
        // SAFETY: forwarded.
        unsafe { r.copy_to(l, dest, at, from, s.nelems * s.elem) };
        return;
    }
    if s.nelems == 0 {
        return;
    }
    let base = r.peer(l, dest, at);
    for i in 0..s.nelems {
        // SAFETY: element `i` of the block in both strided extents.
        unsafe {
            gsas_transport::watched::store_once(
                from.add(i * s.sst * s.elem),
                base.add(i * s.dst * s.elem),
                s.elem,
            )
        };
    }
}

/// Puts one block to member `l` of another cell (completed by the caller's quiet).
///
/// # Safety
///
/// As [`alltoall`].
unsafe fn put_block(r: &Run, l: u32, dest: Buf, at: usize, from: *const u8, s: Shape) {
    if s.sst == 1 && s.dst == 1 {
        // SAFETY: forwarded.
        unsafe { r.put_to(l, dest, at, from, s.nelems * s.elem) };
    } else if s.dst == 1 {
        // SAFETY: forwarded.
        let packed = unsafe { pack(from, s) };
        // SAFETY: `packed` holds the block; the destination is contiguous.
        unsafe { r.put_to(l, dest, at, packed.as_ptr(), packed.len()) };
    } else {
        // One request per element, sharing frames, completed by the quiet.
        for i in 0..s.nelems {
            // SAFETY: element `i` in both strided extents.
            unsafe {
                r.put_nbi_to(
                    l,
                    dest,
                    at + i * s.dst * s.elem,
                    from.add(i * s.sst * s.elem),
                    s.elem,
                )
            };
        }
    }
}
