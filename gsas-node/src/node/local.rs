//! Direct access to mapped segments of same-node PEs: copies and CPU atomics.
//!
//! What it is: the lock-free fast path. A PE maps the heap, data and sync segments of
//! every PE of its node (descriptors from the service), so a put is a `memcpy` into the
//! target's mapping and an atomic is a CPU atomic of the requested width on it. The
//! service executes remote atomics with CPU atomics on its own mapping of the same pages,
//! so both kinds stay coherent.
//!
//! Ordering: atomics use the orderings of the service's memory access (read-modify-writes
//! `AcqRel`, fetches `Acquire`, sets `Release`); plain copies carry no ordering of their
//! own: `fence` issues a release fence and `quiet` a full fence.
//!
//! What it is not: bounds checking (the caller checks against the mapping's length).
//! Thread-safety: free functions on raw pointers; their callers guarantee validity.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use gsas_core::service::AmoKind;
use gsas_core::wire::{AtomicDesc, AtomicOp};

/// Maps a wire operation onto a memory operation and its effective operand (as the
/// service engine does: INC is ADD 1, fetching and non-fetching share a kind).
pub(crate) fn amo_kind(op: AtomicOp, operand: u64) -> (AmoKind, u64) {
    match op {
        AtomicOp::Fetch => (AmoKind::Fetch, 0),
        AtomicOp::Set => (AmoKind::Set, operand),
        AtomicOp::Swap => (AmoKind::Swap, operand),
        AtomicOp::CompareSwap => (AmoKind::CompareSwap, operand),
        AtomicOp::FetchAdd | AtomicOp::Add => (AmoKind::Add, operand),
        AtomicOp::FetchInc | AtomicOp::Inc => (AmoKind::Add, 1),
        AtomicOp::FetchAnd | AtomicOp::And => (AmoKind::And, operand),
        AtomicOp::FetchOr | AtomicOp::Or => (AmoKind::Or, operand),
        AtomicOp::FetchXor | AtomicOp::Xor => (AmoKind::Xor, operand),
        AtomicOp::Unknown(_) => (AmoKind::Fetch, 0),
    }
}

/// Runs the atomic `desc` at `ptr` and returns the old value (32-bit values
/// zero-extended; 0 for SET, whose old value nobody asks for).
///
/// # Safety
///
/// `ptr` must be valid for reads and writes of `desc.width()` bytes, naturally aligned, and
/// only accessed atomically by others while this runs (shared memory of a segment).
#[inline]
pub(crate) unsafe fn atomic_at(
    ptr: *mut u8,
    desc: AtomicDesc,
    operand: u64,
    comparand: u64,
) -> u64 {
    let (kind, operand) = amo_kind(desc.op(), operand);
    if desc.width() == 4 {
        // SAFETY: the caller guarantees a valid, 4-byte aligned location accessed
        // atomically by everyone else.
        let a = unsafe { AtomicU32::from_ptr(ptr.cast::<u32>()) };
        let (v, c) = (operand as u32, comparand as u32);
        u64::from(match kind {
            AmoKind::Fetch => a.load(Ordering::Acquire),
            AmoKind::Set => {
                a.store(v, Ordering::Release);
                0
            }
            AmoKind::Swap => a.swap(v, Ordering::AcqRel),
            AmoKind::CompareSwap => {
                match a.compare_exchange(c, v, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(old) | Err(old) => old,
                }
            }
            AmoKind::Add => a.fetch_add(v, Ordering::AcqRel),
            AmoKind::And => a.fetch_and(v, Ordering::AcqRel),
            AmoKind::Or => a.fetch_or(v, Ordering::AcqRel),
            AmoKind::Xor => a.fetch_xor(v, Ordering::AcqRel),
        })
    } else {
        // SAFETY: as above, for an 8-byte aligned location.
        let a = unsafe { AtomicU64::from_ptr(ptr.cast::<u64>()) };
        match kind {
            AmoKind::Fetch => a.load(Ordering::Acquire),
            AmoKind::Set => {
                a.store(operand, Ordering::Release);
                0
            }
            AmoKind::Swap => a.swap(operand, Ordering::AcqRel),
            AmoKind::CompareSwap => {
                match a.compare_exchange(comparand, operand, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(old) | Err(old) => old,
                }
            }
            AmoKind::Add => a.fetch_add(operand, Ordering::AcqRel),
            AmoKind::And => a.fetch_and(operand, Ordering::AcqRel),
            AmoKind::Or => a.fetch_or(operand, Ordering::AcqRel),
            AmoKind::Xor => a.fetch_xor(operand, Ordering::AcqRel),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsas_core::wire::AtomicType;

    fn d(op: AtomicOp, ty: AtomicType) -> AtomicDesc {
        AtomicDesc::new(op, ty).unwrap()
    }

    #[test]
    fn every_operation_on_both_widths() {
        let mut word = [0u64; 2];
        let p = word.as_mut_ptr().cast::<u8>();
        // SAFETY: `word` is a live, aligned local array accessed only through these calls.
        unsafe {
            assert_eq!(atomic_at(p, d(AtomicOp::Set, AtomicType::U64), 10, 0), 0);
            assert_eq!(
                atomic_at(p, d(AtomicOp::FetchAdd, AtomicType::U64), 5, 0),
                10
            );
            assert_eq!(
                atomic_at(p, d(AtomicOp::FetchInc, AtomicType::I64), 0, 0),
                15
            );
            assert_eq!(
                atomic_at(p, d(AtomicOp::CompareSwap, AtomicType::U64), 99, 3),
                16
            );
            assert_eq!(
                atomic_at(p, d(AtomicOp::CompareSwap, AtomicType::U64), 99, 16),
                16
            );
            assert_eq!(
                atomic_at(p, d(AtomicOp::FetchXor, AtomicType::U64), 0xff, 0),
                99
            );
            assert_eq!(
                atomic_at(p, d(AtomicOp::FetchAnd, AtomicType::U64), 0xf0, 0),
                99 ^ 0xff
            );
            assert_eq!(
                atomic_at(p, d(AtomicOp::Fetch, AtomicType::U64), 0, 0),
                (99 ^ 0xff) & 0xf0
            );
            // 32-bit on the upper half of word 1 leaves the lower half alone.
            let q = p.add(12);
            assert_eq!(
                atomic_at(q, d(AtomicOp::Swap, AtomicType::U32), 0xffff_ffff, 0),
                0
            );
            assert_eq!(
                atomic_at(q, d(AtomicOp::FetchAdd, AtomicType::I32), 2, 0),
                0xffff_ffff
            );
            assert_eq!(
                atomic_at(q, d(AtomicOp::FetchOr, AtomicType::U32), 0x10, 0),
                1
            );
            assert_eq!(
                atomic_at(p.add(8), d(AtomicOp::Fetch, AtomicType::U32), 0, 0),
                0
            );
            assert_eq!(word[1] >> 32, 0x11);
            let f = 1.5f64.to_bits();
            atomic_at(p, d(AtomicOp::Set, AtomicType::F64), f, 0);
            assert_eq!(
                atomic_at(p, d(AtomicOp::Swap, AtomicType::F64), 2.5f64.to_bits(), 0),
                f
            );
        }
    }
}
