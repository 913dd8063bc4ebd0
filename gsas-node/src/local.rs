//! Direct access to mapped segments of same-node PEs: copies and CPU atomics.
//!
//! What it is: the lock-free fast path. A PE maps the heap, data and sync segments of
//! every PE of its node (descriptors from the service), so a put is a `memcpy` into the
//! target's mapping and an atomic is a CPU atomic of the requested width on it. The
//! service executes remote atomics with CPU atomics on its own mapping of the same pages,
//! so both kinds stay coherent; both run the one atomic kernel of
//! [`gsas_core::service::AmoKind`] (this module only makes the atomic reference).
//!
//! Ordering: atomics use the orderings of the service's memory access (read-modify-writes
//! `AcqRel`, fetches `Acquire`, sets `Release`); plain copies carry no ordering of their
//! own: `fence` issues a release fence and `quiet` a full fence.
//!
//! What it is not: bounds checking (the caller checks against the mapping's length).
//! Thread-safety: free functions on raw pointers; their callers guarantee validity.

use std::sync::atomic::{AtomicU32, AtomicU64};

use gsas_core::service::AmoKind;
use gsas_core::wire::AtomicOp;

/// Runs the wire atomic `op` on the `width`-byte word (4 or 8) at `ptr` with one CPU
/// atomic of gsas-core's kernel ([`AmoKind`], the one the service runs) and returns the old
/// value (32-bit values zero-extended; 0 for SET, whose old value nobody asks for). The one
/// local atomic helper of the PE side: this crate's direct path and libshmem's call it.
///
/// # Safety
///
/// `ptr` must be valid for reads and writes of `width` bytes, naturally aligned, and only
/// accessed atomically by others while this runs (shared memory of a segment).
#[inline(always)]
pub unsafe fn atomic_at(
    ptr: *mut u8,
    op: AtomicOp,
    width: usize,
    operand: u64,
    comparand: u64,
) -> u64 {
    let (kind, operand) = AmoKind::from_wire(op, operand);
    if width == 4 {
        // SAFETY: the caller guarantees a valid, 4-byte aligned location accessed
        // atomically by everyone else.
        let a = unsafe { AtomicU32::from_ptr(ptr.cast::<u32>()) };
        u64::from(kind.run32(a, operand as u32, comparand as u32))
    } else {
        // SAFETY: as above, for an 8-byte aligned location.
        let a = unsafe { AtomicU64::from_ptr(ptr.cast::<u64>()) };
        kind.run64(a, operand, comparand)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsas_core::wire::{AtomicDesc, AtomicType};

    fn d(op: AtomicOp, ty: AtomicType) -> AtomicDesc {
        AtomicDesc::new(op, ty).unwrap()
    }

    #[test]
    fn every_operation_on_both_widths() {
        let mut word = [0u64; 2];
        let p = word.as_mut_ptr().cast::<u8>();
        // SAFETY: `word` is a live, aligned local array accessed only through these calls.
        unsafe {
            assert_eq!(
                atomic_at(
                    p,
                    AtomicOp::Set,
                    d(AtomicOp::Set, AtomicType::U64).width(),
                    10,
                    0
                ),
                0
            );
            assert_eq!(
                atomic_at(
                    p,
                    AtomicOp::FetchAdd,
                    d(AtomicOp::FetchAdd, AtomicType::U64).width(),
                    5,
                    0
                ),
                10
            );
            assert_eq!(
                atomic_at(
                    p,
                    AtomicOp::FetchInc,
                    d(AtomicOp::FetchInc, AtomicType::I64).width(),
                    0,
                    0
                ),
                15
            );
            assert_eq!(
                atomic_at(
                    p,
                    AtomicOp::CompareSwap,
                    d(AtomicOp::CompareSwap, AtomicType::U64).width(),
                    99,
                    3
                ),
                16
            );
            assert_eq!(
                atomic_at(
                    p,
                    AtomicOp::CompareSwap,
                    d(AtomicOp::CompareSwap, AtomicType::U64).width(),
                    99,
                    16
                ),
                16
            );
            assert_eq!(
                atomic_at(
                    p,
                    AtomicOp::FetchXor,
                    d(AtomicOp::FetchXor, AtomicType::U64).width(),
                    0xff,
                    0
                ),
                99
            );
            assert_eq!(
                atomic_at(
                    p,
                    AtomicOp::FetchAnd,
                    d(AtomicOp::FetchAnd, AtomicType::U64).width(),
                    0xf0,
                    0
                ),
                99 ^ 0xff
            );
            assert_eq!(
                atomic_at(
                    p,
                    AtomicOp::Fetch,
                    d(AtomicOp::Fetch, AtomicType::U64).width(),
                    0,
                    0
                ),
                (99 ^ 0xff) & 0xf0
            );
            // 32-bit on the upper half of word 1 leaves the lower half alone.
            let q = p.add(12);
            assert_eq!(
                atomic_at(
                    q,
                    AtomicOp::Swap,
                    d(AtomicOp::Swap, AtomicType::U32).width(),
                    0xffff_ffff,
                    0
                ),
                0
            );
            assert_eq!(
                atomic_at(
                    q,
                    AtomicOp::FetchAdd,
                    d(AtomicOp::FetchAdd, AtomicType::I32).width(),
                    2,
                    0
                ),
                0xffff_ffff
            );
            assert_eq!(
                atomic_at(
                    q,
                    AtomicOp::FetchOr,
                    d(AtomicOp::FetchOr, AtomicType::U32).width(),
                    0x10,
                    0
                ),
                1
            );
            assert_eq!(
                atomic_at(
                    p.add(8),
                    AtomicOp::Fetch,
                    d(AtomicOp::Fetch, AtomicType::U32).width(),
                    0,
                    0
                ),
                0
            );
            assert_eq!(word[1] >> 32, 0x11);
            let f = 1.5f64.to_bits();
            atomic_at(
                p,
                AtomicOp::Set,
                d(AtomicOp::Set, AtomicType::F64).width(),
                f,
                0,
            );
            assert_eq!(
                atomic_at(
                    p,
                    AtomicOp::Swap,
                    d(AtomicOp::Swap, AtomicType::F64).width(),
                    2.5f64.to_bits(),
                    0
                ),
                f
            );
        }
    }
}
