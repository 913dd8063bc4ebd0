//! Copies into and out of memory that another PE may be watching: every byte is accessed
//! once, and every naturally aligned 1, 2, 4 or 8-byte element by one access.
//!
//! **Why it exists.** `memcpy`/`memmove`, and so `ptr::copy`, `ptr::copy_nonoverlapping` and
//! `copy_from_slice`, copy a small size by loading the first and the last chunk and storing
//! both: for 8..=15 bytes two overlapping 8-byte stores, and for a size equal to a chunk
//! size (2, 4, 8, 16, 32, 64 bytes with glibc on x86_64) both stores cover the whole
//! destination. A target that waits for a value, reads it and clears the location can then
//! see the second store bring the old value back after its clear. The same goes for the
//! head and tail chunks of large copies. Memory that another PE observes (a symmetric
//! segment: the heap, the data segment, a collective's buffers; the destination of a get or
//! of a fetching atomic) is therefore written with [`store_once`] and read with
//! [`load_once`], never with the standard copies.
//!
//! **The rule** (ARCHITECTURE.md, "Memory that another process is watching"):
//!
//! * every byte of the watched side is accessed exactly once, in address order;
//! * the copy is cut into pieces aligned to their size on the watched side: 1, 2, 4 and
//!   8-byte pieces by CPU atomics (`Relaxed`; the callers order the copy with fences or
//!   release atomics where the protocol needs it), so an aligned element of a typed
//!   operation is one store (or one load) and is never torn;
//! * copies of [`VECTOR_MIN`] bytes or more move their 16-byte aligned middle with 16-byte
//!   vector accesses (SSE2 on x86_64, NEON on aarch64), four to a loop step, for memcpy's
//!   bandwidth. These are volatile accesses: the compiler may not split, merge, repeat or
//!   turn them into a `memcpy` call. On both targets a 16-byte aligned vector access reads
//!   or writes each of its aligned 8-byte halves as one single-copy-atomic access (x86_64:
//!   aligned SSE accesses are at least quadword-atomic, and atomic as a whole on CPUs with
//!   AVX; aarch64: a 128-bit SIMD access is two single-copy-atomic 64-bit accesses).
//!
//! The other side (the private buffer) is accessed with unaligned loads or stores of the
//! same piece, so a piece is always one instruction on each side. Overlapping ranges (a PE
//! that puts into its own memory) behave as `memmove`.
//!
//! **What it is not.** Not a replacement for `memcpy` into private memory, and no ordering
//! guarantee between pieces beyond address order: a reader that must see a whole buffer
//! waits for a flag written after it (the callers' fences and release stores do that).
//!
//! ```
//! let src = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
//! let mut dst = [0u64; 2];
//! // SAFETY: both ranges are valid for 11 bytes.
//! unsafe { gsas_transport::watched::store_once(src.as_ptr(), dst.as_mut_ptr().cast(), src.len()) };
//! assert_eq!(dst[0].to_le_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
//! assert_eq!(dst[1].to_le_bytes()[..3], [9, 10, 11]);
//! ```

use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering::Relaxed};

/// From this many bytes on, the aligned middle of a copy moves in 16-byte vector accesses.
pub const VECTOR_MIN: usize = 64;

/// Copies `n` bytes from `src` into `dst`, which another PE may be watching (a put's, a
/// get reply's or a fetching atomic's destination): pieces aligned on `dst`.
///
/// # Safety
///
/// `src` readable and `dst` writable for `n` bytes; they may overlap.
#[inline]
pub unsafe fn store_once(src: *const u8, dst: *mut u8, n: usize) {
    // An aligned 8-byte element (the typed one-element put, `shmem_putmem` of 8 bytes) is
    // one store, inline; everything else is one call (a 4-byte element is one piece there).
    if n == 8 && dst as usize % 8 == 0 {
        // SAFETY: `dst` is 8-byte aligned and writable for 8 bytes; `src` readable.
        return unsafe { put_piece::<8>(src, dst) };
    }
    // SAFETY: forwarded.
    unsafe { store_general(src, dst, n) }
}

/// Copies `n` bytes from `src`, which another PE may be writing (a direct get's source),
/// into `dst`: pieces aligned on `src`, so an aligned element is read by one load.
///
/// Ends with an acquire fence ([`get_done`]): a get completes before the caller's later
/// reads, so a program that gets a flag and then the data the flag announces sees the
/// data (aarch64 may otherwise satisfy the later load first; on x86_64 the fence costs no
/// instruction).
///
/// # Safety
///
/// As [`store_once`].
#[inline]
pub unsafe fn load_once(src: *const u8, dst: *mut u8, n: usize) {
    if n == 8 && src as usize % 8 == 0 {
        // SAFETY: `src` is 8-byte aligned and readable for 8 bytes; `dst` writable.
        unsafe { get_piece::<8>(src, dst) };
    } else {
        // SAFETY: forwarded.
        unsafe { load_general(src, dst, n) }
    }
    get_done();
}

/// The end of a get out of watched memory: an acquire fence, so that the get's loads
/// (`Relaxed` pieces) come before every later load and store of the caller, and a writer's
/// release (a put's `shmem_fence`, a signal) seen by the get orders its earlier stores
/// before them. [`load_once`] ends with it; callers of [`load_elem`] call it after their
/// last element.
#[inline(always)]
pub fn get_done() {
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
}

/// Copies one element of `E` bytes into watched `dst`: one store when `E` is 1, 2, 4 or 8
/// and `dst` is aligned to it (the elements of strided puts).
///
/// # Safety
///
/// As [`store_once`] with `n = E`.
#[inline(always)]
pub unsafe fn store_elem<const E: usize>(src: *const u8, dst: *mut u8) {
    // SAFETY: the piece is used only when `dst` is aligned to `E`; else forwarded.
    unsafe {
        match E {
            1 | 2 | 4 | 8 if dst as usize % E == 0 => put_piece::<E>(src, dst),
            _ => store_general(src, dst, E),
        }
    }
}

/// Copies one element of `E` bytes out of watched `src` (the elements of strided gets; the
/// caller ends the get with [`get_done`]).
///
/// # Safety
///
/// As [`store_once`] with `n = E`.
#[inline(always)]
pub unsafe fn load_elem<const E: usize>(src: *const u8, dst: *mut u8) {
    // SAFETY: the piece is used only when `src` is aligned to `E`; else forwarded.
    unsafe {
        match E {
            1 | 2 | 4 | 8 if src as usize % E == 0 => get_piece::<E>(src, dst),
            _ => load_general(src, dst, E),
        }
    }
}

/// The size of the next piece at `addr` with `n > 0` bytes left: the largest power of two
/// that `addr` is aligned to, at most 8 and at most `n`.
#[inline(always)]
fn piece_len(addr: usize, n: usize) -> usize {
    let a = addr | 8;
    let align = a & a.wrapping_neg();
    let fit = if n >= 8 {
        8
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    };
    align.min(fit)
}

/// `dst` (in `src .. src + n`, after `src`) would overwrite source bytes a forward copy
/// has not read yet.
#[inline(always)]
fn overlaps_ahead(src: *const u8, dst: *mut u8, n: usize) -> bool {
    let d = (dst as usize).wrapping_sub(src as usize);
    d > 0 && d < n
}

#[cold]
#[inline(never)]
/// Copies through a private buffer when the destination overlaps the source ahead of it:
/// out of `src` in pieces aligned on `src`, then into `dst` in pieces aligned on `dst`
/// (both ranges are the PE's own memory, which others may watch).
///
/// # Safety
///
/// As [`store_once`].
unsafe fn bounce(src: *const u8, dst: *mut u8, n: usize) {
    let mut tmp = vec![0u8; n];
    // SAFETY: `src` is readable for `n` bytes and `tmp` is a private buffer of `n` bytes;
    // then `tmp` is read and `dst` written for `n` bytes, and they do not overlap.
    unsafe {
        copy::<false>(src, tmp.as_mut_ptr(), n);
        copy::<true>(tmp.as_ptr(), dst, n);
    }
}

/// The out-of-line body of [`store_once`]. It has the C ABI, which cannot unwind, so that
/// callers in `extern "C"` functions (the C ABI's put fast paths) need no landing pad and
/// reach it by a tail jump, without a stack frame of their own.
///
/// # Safety
///
/// As [`store_once`].
#[inline(never)]
pub unsafe extern "C" fn store_general(src: *const u8, dst: *mut u8, n: usize) {
    if overlaps_ahead(src, dst, n) {
        // SAFETY: forwarded.
        return unsafe { bounce(src, dst, n) };
    }
    // SAFETY: forwarded.
    unsafe { copy::<true>(src, dst, n) }
}

/// The out-of-line body of [`load_once`] (C ABI: see [`store_general`]).
///
/// # Safety
///
/// As [`store_once`].
#[inline(never)]
pub unsafe extern "C" fn load_general(src: *const u8, dst: *mut u8, n: usize) {
    if overlaps_ahead(src, dst, n) {
        // SAFETY: forwarded.
        return unsafe { bounce(src, dst, n) };
    }
    // SAFETY: forwarded.
    unsafe { copy::<false>(src, dst, n) }
}

/// The forward copy: aligned pieces up to a 16-byte boundary of the watched side, 16-byte
/// vector accesses in the middle (large copies only), aligned pieces for the rest. The
/// watched side is `dst` when `BY_DST`, else `src`.
///
/// # Safety
///
/// `src` readable and `dst` writable for `n` bytes; `dst` not in `src + 1 .. src + n`.
#[inline(always)]
unsafe fn copy<const BY_DST: bool>(mut src: *const u8, mut dst: *mut u8, mut n: usize) {
    let watched = |s: *const u8, d: *mut u8| if BY_DST { d as usize } else { s as usize };
    if n >= VECTOR_MIN && vector::AVAILABLE {
        let head = watched(src, dst).wrapping_neg() % 16;
        // SAFETY: `head < 16 <= n`; forwarded.
        unsafe { pieces::<BY_DST>(src, dst, head) };
        // SAFETY: in bounds (`head <= n`).
        (src, dst, n) = unsafe { (src.add(head), dst.add(head), n - head) };
        let body = n & !15;
        // SAFETY: the watched side is 16-byte aligned here; `body <= n` bytes on each side.
        unsafe { vector::copy::<BY_DST>(src, dst, body) };
        // SAFETY: in bounds.
        (src, dst, n) = unsafe { (src.add(body), dst.add(body), n - body) };
    }
    // SAFETY: forwarded.
    unsafe { pieces::<BY_DST>(src, dst, n) }
}

/// Copies `n` bytes in pieces aligned on the watched side.
///
/// # Safety
///
/// As [`copy`].
#[inline(always)]
unsafe fn pieces<const BY_DST: bool>(mut src: *const u8, mut dst: *mut u8, mut n: usize) {
    while n > 0 {
        let k = piece_len(if BY_DST { dst as usize } else { src as usize }, n);
        // SAFETY: `k <= n` bytes on each side, and the watched side is aligned to `k`.
        unsafe {
            match (k, BY_DST) {
                (8, true) => put_piece::<8>(src, dst),
                (4, true) => put_piece::<4>(src, dst),
                (2, true) => put_piece::<2>(src, dst),
                (_, true) => put_piece::<1>(src, dst),
                (8, false) => get_piece::<8>(src, dst),
                (4, false) => get_piece::<4>(src, dst),
                (2, false) => get_piece::<2>(src, dst),
                (_, false) => get_piece::<1>(src, dst),
            }
            src = src.add(k);
            dst = dst.add(k);
        }
        n -= k;
    }
}

/// One `K`-byte piece: an unaligned load from `src`, one atomic store to `dst`.
///
/// # Safety
///
/// `src` readable and `dst` writable for `K` bytes; `dst` aligned to `K`.
#[inline(always)]
unsafe fn put_piece<const K: usize>(src: *const u8, dst: *mut u8) {
    // SAFETY: the caller's contract; the atomics are created at aligned addresses of
    // writable memory that other processes access only by atomics and single accesses.
    unsafe {
        match K {
            8 => AtomicU64::from_ptr(dst.cast()).store(src.cast::<u64>().read_unaligned(), Relaxed),
            4 => AtomicU32::from_ptr(dst.cast()).store(src.cast::<u32>().read_unaligned(), Relaxed),
            2 => AtomicU16::from_ptr(dst.cast()).store(src.cast::<u16>().read_unaligned(), Relaxed),
            _ => AtomicU8::from_ptr(dst).store(*src, Relaxed),
        }
    }
}

/// One `K`-byte piece: one atomic load from `src`, an unaligned store to `dst`.
///
/// # Safety
///
/// `src` readable and `dst` writable for `K` bytes; `src` aligned to `K`.
#[inline(always)]
unsafe fn get_piece<const K: usize>(src: *const u8, dst: *mut u8) {
    // SAFETY: as in `put_piece`, with the roles exchanged.
    unsafe {
        match K {
            8 => dst
                .cast::<u64>()
                .write_unaligned(AtomicU64::from_ptr(src.cast_mut().cast()).load(Relaxed)),
            4 => dst
                .cast::<u32>()
                .write_unaligned(AtomicU32::from_ptr(src.cast_mut().cast()).load(Relaxed)),
            2 => dst
                .cast::<u16>()
                .write_unaligned(AtomicU16::from_ptr(src.cast_mut().cast()).load(Relaxed)),
            _ => *dst = AtomicU8::from_ptr(src.cast_mut()).load(Relaxed),
        }
    }
}

/// The 16-byte vector copy of the middle of large copies.
mod vector {
    /// Whether this architecture has the 16-byte accesses (else 8-byte pieces do it all).
    pub const AVAILABLE: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

    /// Copies `n` (a multiple of 16) bytes in 16-byte accesses, four to a loop step.
    ///
    /// # Safety
    ///
    /// Both ranges valid for `n` bytes, the watched one (`dst` when `BY_DST`, else `src`)
    /// 16-byte aligned, `dst` not in `src + 1 .. src + n`.
    #[inline(always)]
    pub unsafe fn copy<const BY_DST: bool>(src: *const u8, dst: *mut u8, n: usize) {
        // SAFETY: `at + 16 <= n` in every call below; the watched side stays 16-byte
        // aligned because `at` is a multiple of 16.
        let one = |at: usize| unsafe { copy16::<BY_DST>(src.add(at), dst.add(at)) };
        let mut at = 0;
        while at + 64 <= n {
            one(at);
            one(at + 16);
            one(at + 32);
            one(at + 48);
            at += 64;
        }
        while at < n {
            one(at);
            at += 16;
        }
    }

    /// One 16-byte SSE2 access on each side: volatile `movdqa` on the watched side,
    /// `movdqu` on the other.
    ///
    /// # Safety
    ///
    /// Both valid for 16 bytes, the watched one 16-byte aligned.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn copy16<const BY_DST: bool>(s: *const u8, d: *mut u8) {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        // SAFETY: the caller's contract; SSE2 is part of the x86_64 baseline.
        unsafe {
            let (s, d) = (s.cast::<__m128i>(), d.cast::<__m128i>());
            if BY_DST {
                d.write_volatile(_mm_loadu_si128(s));
            } else {
                _mm_storeu_si128(d, s.read_volatile());
            }
        }
    }

    /// One 16-byte NEON access on each side: volatile `ldr`/`str` of a q register on the
    /// watched side, `ld1`/`st1` on the other.
    ///
    /// # Safety
    ///
    /// Both valid for 16 bytes, the watched one 16-byte aligned.
    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn copy16<const BY_DST: bool>(s: *const u8, d: *mut u8) {
        use std::arch::aarch64::{uint8x16_t, vld1q_u8, vst1q_u8};
        // SAFETY: the caller's contract; NEON is part of the aarch64 baseline.
        unsafe {
            if BY_DST {
                d.cast::<uint8x16_t>().write_volatile(vld1q_u8(s));
            } else {
                vst1q_u8(d, s.cast::<uint8x16_t>().read_volatile());
            }
        }
    }

    /// Never called (`AVAILABLE` is false).
    ///
    /// # Safety
    ///
    /// Never called.
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    #[inline(always)]
    unsafe fn copy16<const BY_DST: bool>(_: *const u8, _: *mut u8) {
        unreachable!("no 16-byte vector copy on this architecture")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size 0..=200 at every source and destination offset 0..16: the bytes arrive,
    /// and nothing outside the destination range changes.
    #[test]
    fn both_directions_copy_every_size_at_every_alignment() {
        for n in 0..=200usize {
            for so in 0..16 {
                for d_off in 0..16 {
                    let src: Vec<u8> = (0..n + 32).map(|i| (i * 7 + 3) as u8).collect();
                    for by_dst in [true, false] {
                        let mut dst = vec![0xEEu8; n + 48];
                        let (s, d) = (src[so..].as_ptr(), dst[d_off..].as_mut_ptr());
                        // SAFETY: both ranges lie in their vectors.
                        unsafe {
                            if by_dst {
                                store_once(s, d, n)
                            } else {
                                load_once(s, d, n)
                            }
                        }
                        assert_eq!(
                            &dst[d_off..d_off + n],
                            &src[so..so + n],
                            "n {n} so {so} do {d_off}"
                        );
                        assert!(dst[..d_off].iter().all(|&b| b == 0xEE));
                        assert!(dst[d_off + n..].iter().all(|&b| b == 0xEE));
                    }
                }
            }
        }
    }

    #[test]
    fn overlapping_ranges_behave_as_memmove() {
        for n in [1usize, 7, 8, 15, 16, 63, 64, 65, 300] {
            for shift in [1usize, 3, 8, 17] {
                for forward in [true, false] {
                    let init: Vec<u8> = (0..n + 40).map(|i| i as u8).collect();
                    let (mut a, mut b) = (init.clone(), init.clone());
                    let (s, d) = if forward { (0, shift) } else { (shift, 0) };
                    b.copy_within(s..s + n, d);
                    let p = a.as_mut_ptr();
                    // SAFETY: both ranges lie in `a`.
                    unsafe { store_once(p.add(s), p.add(d), n) };
                    assert_eq!(a, b, "n {n} shift {shift} forward {forward}");
                    let mut a = init.clone();
                    let p = a.as_mut_ptr();
                    // SAFETY: as above.
                    unsafe { load_once(p.add(s), p.add(d), n) };
                    assert_eq!(a, b, "load n {n} shift {shift} forward {forward}");
                }
            }
        }
    }

    #[test]
    fn pieces_are_the_largest_aligned_power_of_two_that_fits() {
        assert_eq!(piece_len(0x1000, 100), 8);
        assert_eq!(piece_len(0x1004, 100), 4);
        assert_eq!(piece_len(0x1002, 100), 2);
        assert_eq!(piece_len(0x1001, 100), 1);
        assert_eq!(piece_len(0x1000, 7), 4);
        assert_eq!(piece_len(0x1000, 3), 2);
        assert_eq!(piece_len(0x1000, 1), 1);
        assert_eq!(piece_len(0x1004, 3), 2);
        assert_eq!(piece_len(0x1008, 8), 8);
        assert!(!overlaps_ahead(8 as *const u8, 8 as *mut u8, 8));
        assert!(overlaps_ahead(8 as *const u8, 9 as *mut u8, 8));
        assert!(overlaps_ahead(8 as *const u8, 15 as *mut u8, 8));
        assert!(!overlaps_ahead(8 as *const u8, 16 as *mut u8, 8));
        assert!(!overlaps_ahead(9 as *const u8, 8 as *mut u8, 8));
        assert!(!overlaps_ahead(8 as *const u8, 9 as *mut u8, 0));
    }

    /// A watcher thread clears each value it sees and checks the exact sequence: with a
    /// copy that stores a byte twice (as `ptr::copy` does for 8, 12, 16, 32, 64 bytes), the
    /// old value comes back after a clear. Both halves of the watched word carry the
    /// sequence number, so a re-write of either half is seen.
    #[test]
    fn a_watcher_that_clears_never_sees_an_old_value_again() {
        use std::sync::atomic::{AtomicU64, Ordering};
        for n in [8usize, 12, 32, 64] {
            let words = n.div_ceil(8) + 1;
            let buf: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
            let flag = &buf[0];
            let rounds = 2_000u64;
            let value = |k: u64| (k << 32) | k;
            std::thread::scope(|s| {
                s.spawn(|| {
                    let mut src = vec![0xA5u8; n];
                    for k in 1..=rounds {
                        src[..8].copy_from_slice(&value(k).to_le_bytes());
                        let mut spins = 0u32;
                        while flag.load(Ordering::Acquire) != 0 {
                            spins += 1;
                            if spins % 256 == 0 {
                                std::thread::yield_now();
                            }
                            std::hint::spin_loop();
                        }
                        // SAFETY: `buf` holds at least `n` bytes.
                        unsafe { store_once(src.as_ptr(), flag.as_ptr().cast(), n) };
                    }
                });
                let (mut want, mut spins) = (1, 0u32);
                while want <= rounds {
                    let v = flag.load(Ordering::Acquire);
                    if v == 0 {
                        spins += 1;
                        if spins % 256 == 0 {
                            std::thread::yield_now();
                        }
                        std::hint::spin_loop();
                        continue;
                    }
                    assert_eq!(v, value(want), "n {n}: an old value came back");
                    flag.store(0, Ordering::Release);
                    want += 1;
                }
            });
        }
    }
}
