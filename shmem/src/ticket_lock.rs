//! Distributed locks (OpenSHMEM 1.5 §9.12 "Distributed Locking Routines"): a FIFO-fair
//! ticket lock built from AMOs.
//!
//! **What it is.** The lock is a symmetric `long`, zero on every PE before first use. Only
//! PE 0's copy is used: its high 32 bits are the next ticket to hand out, its low 32 bits
//! the ticket being served. `shmem_set_lock` takes a ticket with one fetch-add of 2^32 and
//! waits until the served ticket equals it: PEs acquire the lock in the order they took
//! tickets, which is the "first-come, first-served" the specification requires.
//! `shmem_clear_lock` quiets the default context (so that the holder's puts are delivered
//! before the next holder runs) and advances the served ticket with a compare-and-swap that
//! wraps inside the low half. `shmem_test_lock` takes a ticket only if the lock is free
//! (compare-and-swap from "next == served") and returns 0 when it acquired the lock, 1
//! otherwise. Waiting PEs poll the word (a CPU atomic load on the same node, a fetch
//! through the service otherwise) with the spin/yield/sleep policy of [`crate::wait`].
//!
//! Clearing a lock that is not held, and waiting longer than `SHMEM_WAIT_TIMEOUT`, end the
//! job with a message. Any other misuse (a second set by the holder, touching the word by
//! other means) is undefined behaviour as in the specification.
//!
//! **What it is not.** Not reentrant, and not a local mutex: threads of one PE compete for
//! the same lock like PEs do.
//!
//! **Thread-safety.** Any thread may call these.

use std::ffi::{c_int, c_long};

use gsas_core::wire::{AtomicOp, AtomicType};

use crate::amo::amo;
use crate::ctx_table::{self as ctx, CtxRef};
use crate::fatal::fatal;
use crate::state;
use crate::wait::{What, wait_for};

/// The PE whose copy of the lock word holds the state.
const HOME: c_int = 0;
const TICKET: u64 = 1 << 32;

fn next(word: u64) -> u32 {
    (word >> 32) as u32
}

fn serving(word: u64) -> u32 {
    word as u32
}

/// # Safety
///
/// `lock` a symmetric, 8-byte aligned `long` (checked).
unsafe fn op(lock: *mut c_long, op: AtomicOp, operand: u64, comparand: u64, call: &str) -> u64 {
    // SAFETY: forwarded; `amo` checks the address and alignment.
    unsafe {
        amo(
            CtxRef::DEFAULT,
            op,
            AtomicType::U64,
            lock.cast(),
            operand,
            comparand,
            HOME,
            call,
        )
    }
}

/// `shmem_set_lock`: waits for the lock; returns the ticket (the position in the order of
/// acquisition, modulo 2^32).
///
/// # Safety
///
/// `lock` a symmetric `long` used only as a lock.
pub unsafe fn set_lock(lock: *mut c_long, call: &str) -> u32 {
    let st = state::live(call);
    // SAFETY: forwarded.
    let word = unsafe { op(lock, AtomicOp::FetchAdd, TICKET, 0, call) };
    let ticket = next(word);
    if serving(word) == ticket {
        return ticket;
    }
    let what = What(|f| write!(f, "lock {lock:p} to serve ticket {ticket}"));
    wait_for(st, call, what, || {
        // SAFETY: forwarded.
        let w = unsafe { op(lock, AtomicOp::Fetch, 0, 0, call) };
        (serving(w) == ticket).then_some(ticket)
    })
}

/// `shmem_clear_lock`: quiets the default context, then passes the lock on.
///
/// # Safety
///
/// As [`set_lock`]; the caller holds the lock.
pub unsafe fn clear_lock(lock: *mut c_long, call: &str) {
    state::live(call);
    // SAFETY: the default context is always valid.
    unsafe { ctx::quiet(CtxRef::DEFAULT, call) };
    // SAFETY: forwarded.
    let mut word = unsafe { op(lock, AtomicOp::Fetch, 0, 0, call) };
    loop {
        if next(word) == serving(word) {
            fatal(
                call,
                format_args!(
                    "the lock {lock:p} is not held (shmem_clear_lock without shmem_set_lock)"
                ),
            );
        }
        let new = (word & !0xffff_ffff) | u64::from(serving(word).wrapping_add(1));
        // SAFETY: forwarded.
        let got = unsafe { op(lock, AtomicOp::CompareSwap, new, word, call) };
        if got == word {
            return;
        }
        word = got;
    }
}

/// `shmem_test_lock`: 0 if the lock was free and is now held by the caller, 1 otherwise.
///
/// # Safety
///
/// As [`set_lock`].
pub unsafe fn test_lock(lock: *mut c_long, call: &str) -> c_int {
    // SAFETY: forwarded.
    c_int::from(unsafe { try_lock(lock, call) }.is_none())
}

/// The lock and its ticket if it is free now (the work of [`test_lock`]).
///
/// # Safety
///
/// As [`set_lock`].
pub unsafe fn try_lock(lock: *mut c_long, call: &str) -> Option<u32> {
    state::live(call);
    // SAFETY: forwarded.
    let word = unsafe { op(lock, AtomicOp::Fetch, 0, 0, call) };
    if next(word) != serving(word) {
        return None;
    }
    // SAFETY: forwarded.
    let got = unsafe {
        op(
            lock,
            AtomicOp::CompareSwap,
            word.wrapping_add(TICKET),
            word,
            call,
        )
    };
    (got == word).then_some(next(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_halves() {
        let w = (7u64 << 32) | 5;
        assert_eq!((next(w), serving(w)), (7, 5));
        // The served ticket wraps inside the low half without touching the next ticket.
        let w = (3u64 << 32) | 0xffff_ffff;
        let new = (w & !0xffff_ffff) | u64::from(serving(w).wrapping_add(1));
        assert_eq!((next(new), serving(new)), (3, 0));
        // Taking a ticket wraps inside the high half.
        let w = 0xffff_ffff_0000_0001u64;
        assert_eq!(next(w.wrapping_add(TICKET)), 0);
        assert_eq!(serving(w.wrapping_add(TICKET)), 1);
    }
}
