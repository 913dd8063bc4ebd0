//! Remote memory access at the byte level: put, get, p, g, strided, block-strided (ibput,
//! ibget of OpenSHMEM 1.6), non-blocking, and put-with-signal (OpenSHMEM 1.5 §9.6 "Remote
//! Memory Access Routines", §9.8 "Signaling Operations").
//!
//! **What it is.** Every typed, sized and `mem` routine of the C ABI and the Rust API ends
//! in one of these functions with a byte count (element count times element size): no
//! per-type logic below the ABI layer. Each has an inlined fast path for the default
//! context and a small access to a same-node PE's heap (the `shmem_long_p` budget: state
//! words, heap range, PE range, table lookup, store; see `state::Hot`) and an out-of-line
//! general path that checks initialization, resolves the context and its team numbering,
//! translates the symmetric address (heap or data segment), and then either copies
//! directly into the mapping of a same-node PE or calls the node client for a PE on
//! another node.
//!
//! **Semantics** (checklist §2.7): a blocking put returns after local completion (the
//! source may be reused, and a request to another node has been sent, so a flag written
//! with `shmem_p` reaches a waiting target without a quiet; completion needs quiet, a
//! barrier or fence ordering); get and g
//! return with the data; `_nbi` forms return once started and complete at quiet;
//! zero-length transfers do nothing and never dereference their pointers; strides of iput
//! and iget count elements and must be at least 1; those of ibput and ibget (OpenSHMEM 1.6,
//! blocks of `bsize` elements: iput and iget are the case `bsize = 1`) at least `bsize`.
//! A put-with-signal updates the signal
//! (SET or ADD, atomically) only after the data is delivered: for a same-node PE the copy
//! precedes a release atomic; for a PE reached through a service (another node over UDP
//! or Exanet, or this node's service with `GSAS_DIRECT=0`) the signal travels in the
//! write's request and the service applies it after the data (`Node::put_signal`); over
//! verbs the RDMA WRITE is followed by the signal on the same queue pair.
//!
//! **What it is not.** No buffering or aggregation of its own: the node client copies
//! non-blocking payloads it cannot send at once and owns retransmission.
//!
//! **Thread-safety.** Reentrant; concurrent calls from several threads are allowed (the
//! node client serialises its remote path internally).

use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

use gsas_core::wire::{AtomicOp, SignalOp};
use gsas_transport::watched::{self, load_once, store_once};

use crate::ctx_table::{self as ctx, CtxRef};
use crate::fatal::{boundary, fatal};
use crate::state::{self, HOT, State};

/// `SHMEM_SIGNAL_SET`.
pub const SIGNAL_SET: c_int = 0;
/// `SHMEM_SIGNAL_ADD`.
pub const SIGNAL_ADD: c_int = 1;

/// `n * size` bytes; an overflow is a fatal error naming `call`.
#[inline(always)]
pub fn bytes(n: usize, size: usize, call: &str) -> usize {
    match n.checked_mul(size) {
        Some(b) => b,
        None => too_long(n, size, call),
    }
}

#[cold]
#[inline(never)]
fn too_long(n: usize, size: usize, call: &str) -> ! {
    fatal(
        call,
        format_args!("{n} elements of {size} bytes overflow the address space"),
    )
}

/// Blocking put of `n` bytes from local `src` to symmetric `dest` on `pe`.
///
/// # Safety
///
/// `src` readable for `n` bytes (unless `n == 0`); `dest` a symmetric address (checked);
/// `ctx` a context handle from the library.
#[inline(always)]
pub unsafe fn put(ctx: CtxRef, dest: *mut u8, src: *const u8, n: usize, pe: c_int, call: &str) {
    // SAFETY: forwarded.
    unsafe { put_as::<false>(ctx, dest, src, n, pe, call) }
}

/// Non-blocking put: returns once started; complete at quiet. The specification lets the
/// library read the source until then. Over UDP and Exanet (and to same-node PEs) the
/// source may in fact be reused at once (the node client copies what it cannot send
/// immediately); over verbs an RDMA WRITE from a registered source (a symmetric object)
/// larger than the inline limit reads it until `quiet`.
///
/// # Safety
///
/// As [`put`].
#[inline(always)]
pub unsafe fn put_nbi(ctx: CtxRef, dest: *mut u8, src: *const u8, n: usize, pe: c_int, call: &str) {
    // SAFETY: forwarded.
    unsafe { put_as::<true>(ctx, dest, src, n, pe, call) }
}

/// The fast path of [`put`] (`NBI` false) and [`put_nbi`] (`NBI` true): a same-node
/// target within the hot heap window is a plain copy; everything else goes to
/// [`put_general`].
///
/// # Safety
///
/// As [`put`].
#[inline(always)]
unsafe fn put_as<const NBI: bool>(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    n: usize,
    pe: c_int,
    call: &str,
) {
    if ctx.is_default() {
        if let Some(p) = HOT.heap_direct(dest as usize, n, pe) {
            // SAFETY: `p .. p + n` lies in the heap mapping of a same-node PE (checked by
            // `heap_direct`, which also bounds `n`), `src` is readable by the caller's
            // contract; overlap (the target is this PE) is tolerated.
            unsafe { store_once(src, p, n) };
            return;
        }
    }
    // SAFETY: forwarded.
    unsafe { put_general(dest, src, n, pe, ctx, NBI, call) }
}

/// The general path of [`put`] and [`put_nbi`]. It has the C ABI, which cannot unwind
/// (panics become fatal errors inside), so that the fast paths need no landing pad and no
/// stack frame for it; its parameters start in the order of `shmem_putmem`'s, so that the
/// fast path hands them over without moves.
///
/// # Safety
///
/// As [`put`].
#[inline(never)]
#[allow(improper_ctypes_definitions)]
pub unsafe extern "C" fn put_general(
    dest: *mut u8,
    src: *const u8,
    n: usize,
    pe: c_int,
    ctx: CtxRef,
    nbi: bool,
    call: &str,
) {
    // SAFETY: forwarded.
    boundary(call, || unsafe {
        put_general_body(ctx, dest, src, n, pe, nbi, call)
    })
}

/// # Safety
///
/// As [`put`].
unsafe fn put_general_body(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    n: usize,
    pe: c_int,
    nbi: bool,
    call: &str,
) {
    let st = state::live(call);
    if n == 0 {
        return;
    }
    // SAFETY: forwarded.
    let r = unsafe { ctx::resolve(ctx, call) };
    let target = r.world_pe(st, pe, call);
    let sym = st.translate(dest, n, call);
    if let Some(p) = st.direct_ptr(target, sym) {
        // SAFETY: `p .. p + n` lies in the mapping of the target's segment (same length as
        // this PE's, in which `translate` placed the range).
        unsafe { store_once(src, p, n) };
        return;
    }
    // SAFETY: `src` is readable for `n` bytes by the caller's contract.
    let data = unsafe { std::slice::from_raw_parts(src, n) };
    let held = !nbi && r.session.batching();
    // A small blocking put to a PE of another node: straight to its endpoint if it can.
    if !nbi && !held && crate::coll::direct::p2p_put(st, target, sym, data, None, call) {
        return;
    }
    let res = if nbi {
        st.node.put_nbi(r.node_ctx, target, sym.seg, sym.off, data)
    } else if held {
        // A session with SHMEM_CTX_SESSION_BATCH: see `ctx_table`'s sessions.
        st.node.put_held(r.node_ctx, target, sym.seg, sym.off, data)
    } else {
        st.node.put(r.node_ctx, target, sym.seg, sym.off, data)
    };
    if let Err(e) = res {
        fatal(call, e);
    }
}

/// Blocking get of `n` bytes from symmetric `src` on `pe` into local `dest`.
///
/// # Safety
///
/// `dest` writable for `n` bytes (unless `n == 0`) and not otherwise accessed meanwhile;
/// `src` a symmetric address (checked); `ctx` a context handle from the library.
#[inline(always)]
pub unsafe fn get(ctx: CtxRef, dest: *mut u8, src: *const u8, n: usize, pe: c_int, call: &str) {
    // SAFETY: forwarded.
    unsafe { get_as::<false>(ctx, dest, src, n, pe, call) }
}

/// Non-blocking get: `dest` holds the data after quiet on `ctx`.
///
/// # Safety
///
/// As [`get`], and `dest` must stay valid and untouched until quiet on `ctx` returns.
#[inline(always)]
pub unsafe fn get_nbi(ctx: CtxRef, dest: *mut u8, src: *const u8, n: usize, pe: c_int, call: &str) {
    // SAFETY: forwarded.
    unsafe { get_as::<true>(ctx, dest, src, n, pe, call) }
}

/// The fast path of [`get`] (`NBI` false) and [`get_nbi`] (`NBI` true), as [`put_as`].
///
/// # Safety
///
/// As [`get_nbi`] when `NBI`, else as [`get`].
#[inline(always)]
unsafe fn get_as<const NBI: bool>(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    n: usize,
    pe: c_int,
    call: &str,
) {
    if ctx.is_default() {
        if let Some(p) = HOT.heap_direct(src as usize, n, pe) {
            // SAFETY: `p .. p + n` lies in a same-node heap mapping (`n <= SMALL`); `dest` is
            // writable by the caller's contract.
            unsafe { load_once(p, dest, n) };
            return;
        }
    }
    // SAFETY: forwarded.
    unsafe { get_general(dest, src, n, pe, ctx, NBI, call) }
}

/// The general path of [`get`] and [`get_nbi`] (C ABI: see [`put_general`]).
///
/// # Safety
///
/// As [`get_nbi`].
#[inline(never)]
#[allow(improper_ctypes_definitions)]
pub unsafe extern "C" fn get_general(
    dest: *mut u8,
    src: *const u8,
    n: usize,
    pe: c_int,
    ctx: CtxRef,
    nbi: bool,
    call: &str,
) {
    // SAFETY: forwarded.
    boundary(call, || unsafe {
        get_general_body(ctx, dest, src, n, pe, nbi, call)
    })
}

/// # Safety
///
/// As [`get_nbi`].
unsafe fn get_general_body(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    n: usize,
    pe: c_int,
    nbi: bool,
    call: &str,
) {
    let st = state::live(call);
    if n == 0 {
        return;
    }
    // SAFETY: forwarded.
    let r = unsafe { ctx::resolve(ctx, call) };
    let target = r.world_pe(st, pe, call);
    let sym = st.translate(src, n, call);
    if let Some(p) = st.direct_ptr(target, sym) {
        // SAFETY: `p .. p + n` lies in the target's mapped segment; `dest` is writable.
        unsafe { load_once(p, dest, n) };
        return;
    }
    let res = if nbi {
        // SAFETY: the caller keeps `dest` valid until quiet on this context.
        unsafe {
            st.node
                .get_nbi(r.node_ctx, target, sym.seg, sym.off, dest, n)
        }
    } else {
        // SAFETY: `dest` is writable for `n` bytes and exclusively ours during the call.
        let out = unsafe { std::slice::from_raw_parts_mut(dest, n) };
        st.node.get(r.node_ctx, target, sym.seg, sym.off, out)
    };
    if let Err(e) = res {
        fatal(call, e);
    }
}

/// `shmem_TYPE_p`: one element by value. The fast path keeps the value in a register; only
/// the general path stores it to memory.
///
/// # Safety
///
/// As [`put`] with `src` the value.
#[inline(always)]
pub unsafe fn p<T: Copy>(ctx: CtxRef, dest: *mut T, value: T, pe: c_int, call: &str) {
    if ctx.is_default() {
        if let Some(q) = HOT.heap_direct(dest as usize, size_of::<T>(), pe) {
            // SAFETY: `q .. q + size_of::<T>()` lies in a same-node heap mapping.
            unsafe { std::ptr::write_unaligned(q.cast::<T>(), value) };
            return;
        }
    }
    // SAFETY: forwarded.
    unsafe { p_general(dest, value, pe, ctx, call) }
}

/// The general path of [`p`] (C ABI: see [`put_general`]). The parameters come in the
/// order of `shmem_TYPE_p`'s, so that the fast path hands them over without moves.
///
/// # Safety
///
/// As [`p`].
#[inline(never)]
#[allow(improper_ctypes_definitions)]
unsafe extern "C" fn p_general<T: Copy>(
    dest: *mut T,
    value: T,
    pe: c_int,
    ctx: CtxRef,
    call: &str,
) {
    // SAFETY: the value is a local, readable for its size. A panic inside becomes a fatal
    // error naming the call (this function cannot unwind).
    boundary(call, || unsafe {
        put_general_body(
            ctx,
            dest.cast(),
            (&raw const value).cast(),
            size_of::<T>(),
            pe,
            false,
            call,
        )
    })
}

/// `shmem_TYPE_g`: one element by value (fast path as [`p`]).
///
/// # Safety
///
/// As [`get`]; `T` must be plain data valid for every bit pattern (the ABI types are).
#[inline(always)]
pub unsafe fn g<T: Copy>(ctx: CtxRef, src: *const T, pe: c_int, call: &str) -> T {
    if ctx.is_default() {
        if let Some(q) = HOT.heap_direct(src as usize, size_of::<T>(), pe) {
            let mut v = std::mem::MaybeUninit::<T>::uninit();
            // SAFETY: `q .. q + size_of::<T>()` lies in a same-node heap mapping that another
            // PE may be writing: one load per aligned element, then the get's acquire fence
            // (`load_once`); `v` has room for it and `T` is plain data valid for every bit
            // pattern.
            return unsafe {
                load_once(q, v.as_mut_ptr().cast(), size_of::<T>());
                v.assume_init()
            };
        }
    }
    // SAFETY: forwarded.
    unsafe { g_general(src, pe, ctx, call) }
}

/// The general path of [`g`] (C ABI, parameters in the order of `shmem_TYPE_g`'s).
///
/// # Safety
///
/// As [`g`].
#[inline(never)]
#[allow(improper_ctypes_definitions)]
unsafe extern "C" fn g_general<T: Copy>(src: *const T, pe: c_int, ctx: CtxRef, call: &str) -> T {
    let mut v = MaybeUninit::<T>::uninit();
    // SAFETY: `v` is writable for its size; after the get every byte is written (a panic
    // inside becomes a fatal error naming the call, so `v` is never read unwritten).
    boundary(call, || unsafe {
        get_general_body(
            ctx,
            v.as_mut_ptr().cast(),
            src.cast(),
            size_of::<T>(),
            pe,
            false,
            call,
        );
        v.assume_init()
    })
}

/// The byte layout of a block-strided transfer (`ibput`/`ibget`; `iput`/`iget` are the
/// case of one element per block): `nblocks` blocks of `block` bytes, whose starts are `dst`
/// bytes apart at the destination and `sst` bytes apart at the source.
#[derive(Clone, Copy)]
struct Blocks {
    nblocks: usize,
    block: usize,
    dst: usize,
    sst: usize,
}

impl Blocks {
    /// Checks the strides (`dst`, `sst` elements, each at least `bsize`: a fatal error
    /// naming `call` otherwise) and converts everything to bytes (an overflow is a fatal
    /// error). `bsize` and `nblocks` are not zero.
    fn new(
        dst: isize,
        sst: isize,
        elem: usize,
        bsize: usize,
        nblocks: usize,
        call: &str,
    ) -> Blocks {
        let scale = |n: usize| {
            n.checked_mul(elem)
                .unwrap_or_else(|| too_long(n, elem, call))
        };
        Blocks {
            nblocks,
            block: scale(bsize),
            dst: scale(stride(dst, bsize, "destination", call)),
            sst: scale(stride(sst, bsize, "source", call)),
        }
    }

    /// The byte extent of the blocks with stride `stride` bytes.
    fn extent(self, stride: usize, call: &str) -> usize {
        (self.nblocks - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(self.block))
            .unwrap_or_else(|| too_long(self.nblocks, self.block, call))
    }

    /// The bytes moved.
    fn payload(self) -> usize {
        // Cannot overflow: the blocks fit in their extent, which was computed checked.
        self.nblocks * self.block
    }
}

/// A stride of `s` elements, at least `bsize` (OpenSHMEM 1.6 §9.6.1.4; for `iput` and
/// `iget`, `bsize` is 1): anything less, zero and negative strides included, is a fatal
/// error naming `call`.
fn stride(s: isize, bsize: usize, which: &str, call: &str) -> usize {
    match usize::try_from(s) {
        Ok(s) if s >= bsize => s,
        _ => fatal(
            call,
            format_args!(
                "the {which} stride is {s}; strides count elements and must be at least \
                 {bsize}{}",
                if bsize > 1 { " (the block size)" } else { "" }
            ),
        ),
    }
}

/// Copies `n` elements of `E` bytes with byte strides, each element by one access on the
/// watched side (`dst` when `INTO_WATCHED`, else `src`) when it is aligned.
///
/// # Safety
///
/// Both strided ranges valid for their accesses.
#[inline(always)]
unsafe fn strided_fixed<const E: usize, const INTO_WATCHED: bool>(
    src: *const u8,
    sst: usize,
    dst: *mut u8,
    dstr: usize,
    n: usize,
) {
    for i in 0..n {
        // SAFETY: the caller guarantees every element of both strided ranges is valid.
        unsafe {
            let (s, d) = (src.add(i * sst), dst.add(i * dstr));
            if INTO_WATCHED {
                watched::store_elem::<E>(s, d)
            } else {
                watched::load_elem::<E>(s, d)
            }
        }
    }
    if !INTO_WATCHED {
        watched::get_done();
    }
}

/// Copies the blocks of `b` (elements of `elem` bytes) from `src` to `dst`; the watched
/// side (a same-node PE's segment) is `dst` when `INTO_WATCHED`, else `src` (see
/// `gsas_transport::watched`). A block of one element of 1, 2, 4 or 8 bytes (`iput`,
/// `iget`) is one access; a longer block is one copy, in aligned pieces, so that every
/// aligned element is still one access.
///
/// # Safety
///
/// Every block of both strided ranges valid for its accesses.
unsafe fn strided_copy<const INTO_WATCHED: bool>(
    src: *const u8,
    dst: *mut u8,
    b: Blocks,
    elem: usize,
) {
    let (sst, dstr, n) = (b.sst, b.dst, b.nblocks);
    // SAFETY: forwarded to the element and block copies.
    unsafe {
        match (b.block == elem, elem) {
            (true, 1) => strided_fixed::<1, INTO_WATCHED>(src, sst, dst, dstr, n),
            (true, 2) => strided_fixed::<2, INTO_WATCHED>(src, sst, dst, dstr, n),
            (true, 4) => strided_fixed::<4, INTO_WATCHED>(src, sst, dst, dstr, n),
            (true, 8) => strided_fixed::<8, INTO_WATCHED>(src, sst, dst, dstr, n),
            _ => {
                for i in 0..n {
                    let (s, d) = (src.add(i * sst), dst.add(i * dstr));
                    if INTO_WATCHED {
                        store_once(s, d, b.block)
                    } else {
                        load_once(s, d, b.block)
                    }
                }
            }
        }
    }
}

/// `shmem_TYPE_iput` (OpenSHMEM 1.5 §9.6.3): `nelems` elements of `elem` bytes from local
/// `src` (stride `sst` elements) to symmetric `dest` on `pe` (stride `dst` elements); local
/// completion. The case `bsize = 1` of [`ibput`].
///
/// # Safety
///
/// `src` readable at every strided element; `dest` symmetric (checked).
#[allow(clippy::too_many_arguments)]
pub unsafe fn iput(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    dst: isize,
    sst: isize,
    elem: usize,
    nelems: usize,
    pe: c_int,
    call: &str,
) {
    // SAFETY: forwarded.
    unsafe { ibput(ctx, dest, src, dst, sst, elem, 1, nelems, pe, call) }
}

/// `shmem_TYPE_ibput` (OpenSHMEM 1.6 §9.6.1.4): `nblocks` blocks of `bsize` elements of
/// `elem` bytes from local `src` (block starts `sst` elements apart) to symmetric `dest` on
/// `pe` (block starts `dst` elements apart); returns when `src` may be reused (local
/// completion, as [`put`]).
///
/// Zero `nblocks` or `bsize` does nothing and dereferences no pointer (the strides are not
/// checked either). A stride below `bsize` (zero and negative ones included: the
/// specification requires `stride >= bsize`) is a fatal error naming `call`, as is a
/// destination extent outside the symmetric segments.
///
/// Each block moves as one transfer: to a same-node PE one copy into its mapping (no
/// staging buffer); to a PE on another node, when the destination blocks are contiguous
/// (`dst == bsize`), one put of the gathered blocks, otherwise one request per block
/// (`Node::put_held`: blocking puts whose small writes share frames, sent by the progress
/// call before returning; over verbs each RDMA WRITE completes before the next block, so
/// the source is not read after the return). One packed request carrying every block and
/// its offset is possible later; today the services know contiguous writes only.
///
/// # Safety
///
/// `src` readable at every block; `dest` symmetric (checked).
#[allow(clippy::too_many_arguments)]
pub unsafe fn ibput(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    dst: isize,
    sst: isize,
    elem: usize,
    bsize: usize,
    nblocks: usize,
    pe: c_int,
    call: &str,
) {
    let st = state::live(call);
    if nblocks == 0 || bsize == 0 {
        return;
    }
    let b = Blocks::new(dst, sst, elem, bsize, nblocks, call);
    // SAFETY: forwarded.
    let r = unsafe { ctx::resolve(ctx, call) };
    let target = r.world_pe(st, pe, call);
    let sym = st.translate(dest, b.extent(b.dst, call), call);
    // The local extent must be addressable too (an overflow is a fatal error).
    b.extent(b.sst, call);
    if let Some(p) = st.direct_ptr(target, sym) {
        // SAFETY: the destination extent lies in the target's mapping; the source blocks
        // are readable by the caller's contract.
        unsafe { strided_copy::<true>(src, p, b, elem) };
        return;
    }
    let res = if b.dst == b.block {
        // Contiguous at the target: gather locally (unless the source is contiguous too),
        // send once.
        let total = b.payload();
        let gathered;
        let data = if b.sst == b.block {
            // SAFETY: the source blocks are contiguous and readable.
            unsafe { std::slice::from_raw_parts(src, total) }
        } else {
            let mut buf = vec![0u8; total];
            let packed = Blocks { dst: b.block, ..b };
            // SAFETY: `buf` holds every block back to back; the source blocks are readable.
            unsafe { strided_copy::<false>(src, buf.as_mut_ptr(), packed, elem) };
            gathered = buf;
            &gathered[..]
        };
        st.node.put(r.node_ctx, target, sym.seg, sym.off, data)
    } else {
        // One request per block, sharing frames: each block is a blocking put that may wait
        // in its open frame (`put_held`: over UDP the bytes are copied into the frame, a
        // block too large for it is sent from the caller's buffer before the call returns,
        // and over verbs the RDMA WRITE completes, so the source may be reused on return
        // whatever the route); the frames leave with the progress call at the end.
        (0..nblocks)
            .try_for_each(|i| {
                // SAFETY: block `i` of the source is readable.
                let blk = unsafe { std::slice::from_raw_parts(src.add(i * b.sst), b.block) };
                let off = sym.off + (i * b.dst) as u64;
                st.node.put_held(r.node_ctx, target, sym.seg, off, blk)
            })
            .and_then(|()| st.node.progress())
    };
    if let Err(e) = res {
        fatal(call, e);
    }
}

/// `shmem_TYPE_iget` (OpenSHMEM 1.5 §9.6.6): `nelems` elements from symmetric `src` on `pe`
/// (stride `sst` elements) into local `dest` (stride `dst` elements). The case `bsize = 1`
/// of [`ibget`].
///
/// # Safety
///
/// `dest` writable at every strided element; `src` symmetric (checked).
#[allow(clippy::too_many_arguments)]
pub unsafe fn iget(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    dst: isize,
    sst: isize,
    elem: usize,
    nelems: usize,
    pe: c_int,
    call: &str,
) {
    // SAFETY: forwarded.
    unsafe { ibget(ctx, dest, src, dst, sst, elem, 1, nelems, pe, call) }
}

/// `shmem_TYPE_ibget` (OpenSHMEM 1.6, SHMEM_IBGET): `nblocks` blocks of `bsize` elements of
/// `elem` bytes from symmetric `src` on `pe` (block starts `sst` elements apart) into local
/// `dest` (block starts `dst` elements apart); returns with the data.
///
/// Inputs are checked as in [`ibput`] (the source extent must lie in a symmetric segment).
/// From a same-node PE each block is one copy out of its mapping; from a PE on another node
/// a dense source extent (at most 8 times the payload, or 64 KiB) is read at once and the
/// blocks picked from it, otherwise each block is one read (`Node::get`). One packed
/// request for every block is possible later.
///
/// # Safety
///
/// `dest` writable at every block; `src` symmetric (checked).
#[allow(clippy::too_many_arguments)]
pub unsafe fn ibget(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    dst: isize,
    sst: isize,
    elem: usize,
    bsize: usize,
    nblocks: usize,
    pe: c_int,
    call: &str,
) {
    let st = state::live(call);
    if nblocks == 0 || bsize == 0 {
        return;
    }
    let b = Blocks::new(dst, sst, elem, bsize, nblocks, call);
    // SAFETY: forwarded.
    let r = unsafe { ctx::resolve(ctx, call) };
    let target = r.world_pe(st, pe, call);
    let span = b.extent(b.sst, call);
    let sym = st.translate(src, span, call);
    // The local extent must be addressable too (an overflow is a fatal error).
    b.extent(b.dst, call);
    if let Some(p) = st.direct_ptr(target, sym) {
        // SAFETY: the source extent lies in the target's mapping; the destination blocks
        // are writable by the caller's contract.
        unsafe { strided_copy::<false>(p, dest, b, elem) };
        return;
    }
    let res = if span <= (8 * b.payload()).max(64 << 10) {
        // Dense enough: one read of the whole extent, then pick the blocks.
        let mut buf = vec![0u8; span];
        st.node
            .get(r.node_ctx, target, sym.seg, sym.off, &mut buf)
            .map(|()| {
                // SAFETY: `buf` covers the extent; the destination blocks are writable.
                unsafe { strided_copy::<true>(buf.as_ptr(), dest, b, elem) }
            })
    } else {
        (0..nblocks).try_for_each(|i| {
            // SAFETY: block `i` of the destination is writable.
            let blk = unsafe { std::slice::from_raw_parts_mut(dest.add(i * b.dst), b.block) };
            let off = sym.off + (i * b.sst) as u64;
            st.node.get(r.node_ctx, target, sym.seg, off, blk)
        })
    };
    if let Err(e) = res {
        fatal(call, e);
    }
}

/// `shmem_put_signal[_nbi]`: put `n` bytes, then update the signal word `sig` on the same
/// PE with `signal` (`SHMEM_SIGNAL_SET` or `SHMEM_SIGNAL_ADD`) once the data is delivered.
///
/// # Safety
///
/// As [`put`]; `sig` a symmetric, 8-byte aligned `uint64_t` (checked).
#[allow(clippy::too_many_arguments)]
pub unsafe fn put_signal(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    n: usize,
    sig: *mut u64,
    signal: u64,
    sig_op: c_int,
    pe: c_int,
    nbi: bool,
    call: &str,
) {
    let st = state::live(call);
    let op = match sig_op {
        SIGNAL_SET => SignalOp::Set,
        SIGNAL_ADD => SignalOp::Add,
        other => fatal(
            call,
            format_args!(
                "sig_op {other} is neither SHMEM_SIGNAL_SET ({SIGNAL_SET}) nor SHMEM_SIGNAL_ADD ({SIGNAL_ADD})"
            ),
        ),
    };
    // SAFETY: forwarded.
    let r = unsafe { ctx::resolve(ctx, call) };
    let target = r.world_pe(st, pe, call);
    let sig_sym = st.translate(sig.cast_const().cast(), 8, call);
    if sig_sym.off % 8 != 0 {
        fatal(
            call,
            format_args!("the signal address {sig:p} is not 8-byte aligned"),
        );
    }
    if n > 0 {
        let sym = st.translate(dest, n, call);
        if let Some(p) = st.direct_ptr(target, sym) {
            // SAFETY: as in `put_general`.
            unsafe { store_once(src, p, n) };
        } else {
            // SAFETY: `src` is readable for `n` bytes by the caller's contract.
            let data = unsafe { std::slice::from_raw_parts(src, n) };
            // A small blocking one to a PE of another node: data and signal in one packet
            // straight to its endpoint if it can (as `put_general_body`).
            let straight = crate::coll::direct::P2pSignal {
                at: sig_sym,
                op,
                value: signal,
            };
            if !nbi && crate::coll::direct::p2p_put(st, target, sym, data, Some(straight), call) {
                return;
            }
            // The node client sends the signal with the data where a service applies both
            // (one request), and falls back to put + signal elsewhere (verbs).
            let res = st.node.put_signal(
                r.node_ctx,
                target,
                sym.seg,
                sym.off,
                data,
                sig_sym.seg,
                sig_sym.off,
                op,
                signal,
                nbi,
            );
            if let Err(e) = res {
                fatal(call, e);
            }
            return;
        }
    }
    signal_update(
        st,
        r.node_ctx,
        target,
        sig_sym,
        op.atomic_op(),
        signal,
        call,
    );
}

/// Applies SET/ADD to a signal word after the data before it is delivered.
fn signal_update(
    st: &State,
    node_ctx: gsas_node::Ctx,
    target: u32,
    sig: crate::addr::SymAddr,
    op: AtomicOp,
    signal: u64,
    call: &str,
) {
    if let Some(p) = st.direct_ptr(target, sig) {
        // SAFETY: `p` is an 8-byte aligned word in a same-node mapping (offset checked);
        // every signal update and read uses atomics. Release orders the data copy before.
        let word = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
        match op {
            AtomicOp::Set => word.store(signal, Ordering::Release),
            _ => {
                word.fetch_add(signal, Ordering::AcqRel);
            }
        }
        return;
    }
    // Another node: the node client delivers the signal after the data and sends it before
    // returning (the target may be waiting for it).
    let res = st
        .node
        .signal(node_ctx, target, sig.seg, sig.off, op, signal);
    if let Err(e) = res {
        fatal(call, e);
    }
}
