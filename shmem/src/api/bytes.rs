//! The byte-level calls of the Rust API: non-generic, never inlined.
//!
//! **What it is.** The generic methods of [`Ctx`](super::Ctx) are instantiated in the
//! user's crate; if they inlined the internals' fast paths, the hot state would have to be
//! an exported symbol reached through the GOT, and the C ABI's `shmem_long_p` would pay an
//! extra load. So they call these functions, which inline the fast paths here.
//!
//! **What it is not.** No checks of their own: the callers check shapes, the internals
//! everything else.
//!
//! **Thread-safety.** As the internals.

use std::ffi::c_int;

use gsas_core::wire::{AtomicOp, AtomicType};

use crate::ctx_table::CtxRef;
use crate::{amo, rma};

/// Blocking or non-blocking put of `n` bytes.
///
/// # Safety
///
/// As [`crate::rma::put`].
#[inline(never)]
pub(super) unsafe fn put(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    n: usize,
    pe: c_int,
    nbi: bool,
    call: &'static str,
) {
    // SAFETY: forwarded.
    unsafe {
        if nbi {
            rma::put_nbi(ctx, dest, src, n, pe, call)
        } else {
            rma::put(ctx, dest, src, n, pe, call)
        }
    }
}

/// Blocking or non-blocking get of `n` bytes.
///
/// # Safety
///
/// As [`crate::rma::get`] / [`crate::rma::get_nbi`].
#[inline(never)]
pub(super) unsafe fn get(
    ctx: CtxRef,
    dest: *mut u8,
    src: *const u8,
    n: usize,
    pe: c_int,
    nbi: bool,
    call: &'static str,
) {
    // SAFETY: forwarded.
    unsafe {
        if nbi {
            rma::get_nbi(ctx, dest, src, n, pe, call)
        } else {
            rma::get(ctx, dest, src, n, pe, call)
        }
    }
}

/// A blocking AMO on bit patterns.
///
/// # Safety
///
/// As [`crate::amo::amo`].
#[allow(clippy::too_many_arguments)]
#[inline(never)]
pub(super) unsafe fn amo(
    ctx: CtxRef,
    op: AtomicOp,
    ty: AtomicType,
    dest: *mut u8,
    operand: u64,
    comparand: u64,
    pe: c_int,
    call: &'static str,
) -> u64 {
    // SAFETY: forwarded.
    unsafe { amo::amo(ctx, op, ty, dest, operand, comparand, pe, call) }
}

/// A non-blocking fetching AMO on bit patterns.
///
/// # Safety
///
/// As [`crate::amo::amo_nbi`].
#[allow(clippy::too_many_arguments)]
#[inline(never)]
pub(super) unsafe fn amo_nbi(
    ctx: CtxRef,
    op: AtomicOp,
    ty: AtomicType,
    fetch: *mut u8,
    dest: *mut u8,
    operand: u64,
    comparand: u64,
    pe: c_int,
    call: &'static str,
) {
    // SAFETY: forwarded.
    unsafe { amo::amo_nbi(ctx, op, ty, fetch, dest, operand, comparand, pe, call) }
}
