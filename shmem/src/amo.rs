//! Atomic memory operations at the byte level (OpenSHMEM 1.5 §9.7 "Atomic Memory
//! Operations").
//!
//! **What it is.** [`amo`] and [`amo_nbi`] take the operation and the datatype as
//! gsas-core wire codes ([`AtomicOp`], [`AtomicType`]) and operands as 64-bit patterns:
//! every typed AMO routine of the C ABI and the Rust API is a conversion into these (see
//! [`crate::types::Scalar`]). For a same-node PE the operation is a CPU atomic of the
//! type's width on the mapping (`lock xadd`, `ldaddal`, ...: fetch-add on the default
//! context is inlined down to that); for another node the node client sends it to that
//! node's atomic service, which executes it with CPU atomics on the same pages, so both
//! kinds stay coherent (one atomicity domain per job).
//!
//! Fetching operations return the old value. Non-fetching ones (set, inc, add, and, or,
//! xor) to another node return once sent (the request is on the wire: a flag set this way
//! reaches a target that waits for it without the origin calling quiet) and complete at
//! quiet (the specification allows it). [`amo_nbi`] starts a fetching operation whose result is written at quiet.
//! Orderings of the direct path: read-modify-writes `AcqRel`, fetch `Acquire`, set
//! `Release` (as the service).
//!
//! **What it is not.** No float arithmetic: float types allow fetch, set and swap only (bit
//! moves), as the wire protocol.
//!
//! **Thread-safety.** Reentrant.

use gsas_core::wire::{AtomicOp, AtomicType};
use gsas_node::atomic_at;
use std::ffi::c_int;

use crate::ctx_table::{self as ctx, CtxRef};
use crate::fatal::{boundary, fatal};
use crate::state::{self, HOT};
use crate::types::Scalar;

/// Width in bytes of an atomic type (8 for unknown codes, which never reach here).
#[inline(always)]
fn width(ty: AtomicType) -> usize {
    match ty {
        AtomicType::I32 | AtomicType::U32 | AtomicType::F32 => 4,
        _ => 8,
    }
}

/// A blocking AMO on the `ty` at symmetric `dest` of `pe`; returns the old value of
/// fetching operations (zero-extended bit pattern), 0 otherwise.
///
/// # Safety
///
/// `dest` a symmetric address (checked, also its alignment); `ctx` a context handle from
/// the library.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn amo(
    ctx: CtxRef,
    op: AtomicOp,
    ty: AtomicType,
    dest: *mut u8,
    operand: u64,
    comparand: u64,
    pe: c_int,
    call: &str,
) -> u64 {
    let w = width(ty);
    if ctx.is_default() && (dest as usize) & (w - 1) == 0 {
        if let Some(p) = HOT.heap_direct(dest as usize, w, pe) {
            // SAFETY: `p` is in a same-node heap mapping, aligned like `dest` (mapping bases
            // are page aligned); heap words targeted by AMOs are accessed atomically.
            return unsafe { atomic_at(p, op, w, operand, comparand) };
        }
    }
    // SAFETY: forwarded.
    unsafe { amo_general(ctx, op, ty, dest, operand, comparand, pe, None, call) }
}

/// A fetching AMO whose old value is written to local `fetch` by quiet on `ctx`.
///
/// # Safety
///
/// As [`amo`]; `fetch` writable for the type's width and untouched until quiet.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn amo_nbi(
    ctx: CtxRef,
    op: AtomicOp,
    ty: AtomicType,
    fetch: *mut u8,
    dest: *mut u8,
    operand: u64,
    comparand: u64,
    pe: c_int,
    call: &str,
) {
    // SAFETY: forwarded.
    unsafe { amo_general(ctx, op, ty, dest, operand, comparand, pe, Some(fetch), call) };
}

/// The general path: checks, translation, direct or remote. It has the C ABI, which
/// cannot unwind (panics become fatal errors inside), so that the fast path needs no frame
/// for it.
///
/// # Safety
///
/// As [`amo`] / [`amo_nbi`].
#[allow(clippy::too_many_arguments, improper_ctypes_definitions)]
#[inline(never)]
unsafe extern "C" fn amo_general(
    ctx: CtxRef,
    op: AtomicOp,
    ty: AtomicType,
    dest: *mut u8,
    operand: u64,
    comparand: u64,
    pe: c_int,
    fetch: Option<*mut u8>,
    call: &str,
) -> u64 {
    // SAFETY: forwarded.
    boundary(call, || unsafe {
        amo_general_body(ctx, op, ty, dest, operand, comparand, pe, fetch, call)
    })
}

/// # Safety
///
/// As [`amo`] / [`amo_nbi`].
#[allow(clippy::too_many_arguments)]
unsafe fn amo_general_body(
    ctx: CtxRef,
    op: AtomicOp,
    ty: AtomicType,
    dest: *mut u8,
    operand: u64,
    comparand: u64,
    pe: c_int,
    fetch: Option<*mut u8>,
    call: &str,
) -> u64 {
    let st = state::live(call);
    let w = width(ty);
    // SAFETY: forwarded.
    let r = unsafe { ctx::resolve(ctx, call) };
    let target = r.world_pe(st, pe, call);
    let sym = st.translate(dest, w, call);
    if sym.off % w as u64 != 0 {
        fatal(
            call,
            format_args!("{dest:p} is not aligned to the {w} bytes of the atomic type"),
        );
    }
    if let Some(p) = st.direct_ptr(target, sym) {
        // SAFETY: an aligned word in a same-node mapping, accessed atomically.
        let old = unsafe { atomic_at(p, op, w, operand, comparand) };
        if let Some(f) = fetch {
            // SAFETY: `f` is writable for `w` bytes by the caller's contract.
            unsafe { write_word(f, old, w) };
        }
        return old;
    }
    let res = match fetch {
        // SAFETY: the caller keeps `f` valid until quiet.
        Some(f) => unsafe {
            st.node.atomic_fetch_nbi(
                r.node_ctx, target, sym.seg, sym.off, op, ty, operand, comparand, f,
            )
        }
        .map(|()| 0),
        None if op.fetches() => st.node.atomic(
            r.node_ctx, target, sym.seg, sym.off, op, ty, operand, comparand,
        ),
        // Sent before returning: the node client would keep it in its open frame.
        None => st
            .node
            .atomic_nbi(
                r.node_ctx, target, sym.seg, sym.off, op, ty, operand, comparand,
            )
            .and_then(|()| st.node.progress())
            .map(|()| 0),
    };
    res.unwrap_or_else(|e| fatal(call, e))
}

/// Writes the low `w` bytes of `v` (native order) to `f`.
///
/// # Safety
///
/// `f` writable for `w` bytes.
unsafe fn write_word(f: *mut u8, v: u64, w: usize) {
    // SAFETY: the caller guarantees `f` is writable for `w` (4 or 8) bytes.
    unsafe {
        if w == 4 {
            std::ptr::write_unaligned(f.cast::<u32>(), v as u32);
        } else {
            std::ptr::write_unaligned(f.cast::<u64>(), v);
        }
    }
}

/// A typed blocking AMO: converts `T` to and from the bit patterns of [`amo`].
///
/// # Safety
///
/// As [`amo`].
#[inline(always)]
pub unsafe fn typed<T: Scalar>(
    ctx: CtxRef,
    op: AtomicOp,
    dest: *mut T,
    operand: T,
    comparand: T,
    pe: c_int,
    call: &str,
) -> T {
    // SAFETY: forwarded.
    T::from_bits(unsafe {
        amo(
            ctx,
            op,
            T::KIND.atomic(),
            dest.cast(),
            operand.to_bits(),
            comparand.to_bits(),
            pe,
            call,
        )
    })
}

/// A typed non-blocking fetching AMO.
///
/// # Safety
///
/// As [`amo_nbi`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn typed_nbi<T: Scalar>(
    ctx: CtxRef,
    op: AtomicOp,
    fetch: *mut T,
    dest: *mut T,
    operand: T,
    comparand: T,
    pe: c_int,
    call: &str,
) {
    // SAFETY: forwarded.
    unsafe {
        amo_nbi(
            ctx,
            op,
            T::KIND.atomic(),
            fetch.cast(),
            dest.cast(),
            operand.to_bits(),
            comparand.to_bits(),
            pe,
            call,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_result_is_written_at_its_width() {
        // (The atomics themselves are gsas_node::atomic_at's, tested there.)
        // SAFETY: `out` is a live local array of 8 bytes.
        unsafe {
            let mut out = [0u8; 8];
            write_word(out.as_mut_ptr(), 0x1122_3344_5566_7788, 4);
            assert_eq!(
                u32::from_ne_bytes(out[..4].try_into().unwrap()),
                0x5566_7788
            );
            assert_eq!(out[4..], [0; 4]);
        }
    }
}
