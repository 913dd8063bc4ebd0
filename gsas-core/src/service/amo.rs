//! The atomic kernel: the one place where an atomic operation becomes a CPU atomic.
//!
//! [`AmoKind::from_wire`] maps the 14 wire operations ([`AtomicOp`]) onto the 8 memory
//! operations (INC is ADD 1; fetching and non-fetching variants share one kind), and
//! [`AmoKind::run32`] / [`AmoKind::run64`] execute a kind on a `core::sync::atomic` word.
//! The service's memory (the std runtime's shared-memory mappings and [`WordMemory`]), the
//! PE's direct path to same-node mappings (`gsas_node`, `shmem::amo`) all call these, so
//! direct and service atomics are done the same way by construction: same instruction,
//! same ordering, same result.
//!
//! Orderings: read-modify-writes `AcqRel`, fetch `Acquire`, set `Release`; a failed
//! compare-swap loads `Acquire`. Results are the old value, except for SET, which returns 0
//! (nobody asks for its old value, and a plain store is cheaper than a swap).
//!
//! Signedness: ADD is two's complement wrapping, the same for signed and unsigned types;
//! AND/OR/XOR and compare-swap work on bit patterns, so float types (fetch, set and swap
//! only, as the wire allows) need no arithmetic either. The wire has no
//! min/max operations (OpenSHMEM 1.5 defines none), so the kernel has none.
//!
//! What it is not: the pointer cast. Callers that hold raw pointers (shared-memory
//! mappings) make the `&AtomicU32` / `&AtomicU64` with `from_ptr` under their own safety
//! contract; this crate has no `unsafe` code.
//!
//! [`WordMemory`]: super::WordMemory

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::wire::AtomicOp;

/// A resolved atomic operation, as executed on memory. [`AmoKind::from_wire`] maps the 14
/// wire operations onto these (INC = ADD 1; fetching and non-fetching variants share one
/// kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AmoKind {
    /// Load the value.
    Fetch,
    /// Store the operand (the returned value is 0).
    Set,
    /// Exchange with the operand.
    Swap,
    /// Store the operand if the value equals the comparand.
    CompareSwap,
    /// Wrapping add of the operand (two's complement: the same for signed and unsigned).
    Add,
    /// Bitwise AND.
    And,
    /// Bitwise OR.
    Or,
    /// Bitwise XOR.
    Xor,
}

/// Expands the kernel once per width, from one body.
macro_rules! kernel {
    ($(#[$doc:meta])* $name:ident, $atomic:ty, $int:ty) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(self, word: &$atomic, operand: $int, comparand: $int) -> $int {
            let (ar, acq, rel) = (Ordering::AcqRel, Ordering::Acquire, Ordering::Release);
            match self {
                AmoKind::Fetch => word.load(acq),
                AmoKind::Set => {
                    word.store(operand, rel);
                    0
                }
                AmoKind::Swap => word.swap(operand, ar),
                AmoKind::CompareSwap => match word.compare_exchange(comparand, operand, ar, acq) {
                    Ok(old) | Err(old) => old,
                },
                AmoKind::Add => word.fetch_add(operand, ar),
                AmoKind::And => word.fetch_and(operand, ar),
                AmoKind::Or => word.fetch_or(operand, ar),
                AmoKind::Xor => word.fetch_xor(operand, ar),
            }
        }
    };
}

impl AmoKind {
    /// Maps a wire operation onto a memory operation and its effective operand (INC is ADD
    /// of 1, FETCH ignores the operand). An unknown code (which a validated descriptor
    /// never holds) becomes a harmless FETCH.
    #[inline(always)]
    pub fn from_wire(op: AtomicOp, operand: u64) -> (AmoKind, u64) {
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

    kernel!(
        /// Runs this operation on a 32-bit word with one CPU atomic; returns the old value
        /// (0 for [`AmoKind::Set`]).
        run32,
        AtomicU32,
        u32
    );

    kernel!(
        /// Runs this operation on a 64-bit word with one CPU atomic; returns the old value
        /// (0 for [`AmoKind::Set`]).
        run64,
        AtomicU64,
        u64
    );

    /// The new value for `old` (for [`AmoKind::CompareSwap`], `None` when it does not
    /// match; for [`AmoKind::Fetch`] always `None`). Works on any width given as `u64`;
    /// callers mask 32-bit results. For memory that has no CPU atomic of the width (a
    /// 32-bit operation inside a 64-bit word, run as a compare-exchange loop); the tests
    /// check it against [`AmoKind::run32`] / [`AmoKind::run64`].
    #[inline]
    pub fn apply(self, old: u64, operand: u64, comparand: u64) -> Option<u64> {
        match self {
            AmoKind::Fetch => None,
            AmoKind::Set | AmoKind::Swap => Some(operand),
            AmoKind::CompareSwap => (old == comparand).then_some(operand),
            AmoKind::Add => Some(old.wrapping_add(operand)),
            AmoKind::And => Some(old & operand),
            AmoKind::Or => Some(old | operand),
            AmoKind::Xor => Some(old ^ operand),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every wire operation on every wire type, through the kernel, against a model written
    //! with the types' own arithmetic (signed values included), at both widths.

    use super::*;
    use crate::wire::{AtomicDesc, AtomicType};

    const OPS: [AtomicOp; 14] = [
        AtomicOp::Fetch,
        AtomicOp::Set,
        AtomicOp::Swap,
        AtomicOp::CompareSwap,
        AtomicOp::FetchAdd,
        AtomicOp::Add,
        AtomicOp::FetchInc,
        AtomicOp::Inc,
        AtomicOp::FetchAnd,
        AtomicOp::And,
        AtomicOp::FetchOr,
        AtomicOp::Or,
        AtomicOp::FetchXor,
        AtomicOp::Xor,
    ];
    const TYPES: [AtomicType; 6] = [
        AtomicType::I32,
        AtomicType::U32,
        AtomicType::I64,
        AtomicType::U64,
        AtomicType::F32,
        AtomicType::F64,
    ];

    /// Values as `i128` so that the model is written in each type's own arithmetic.
    fn model(ty: AtomicType, op: AtomicOp, old: i128, x: i128, c: i128) -> (i128, i128) {
        let (min, max, signed) = match ty {
            AtomicType::I32 => (i128::from(i32::MIN), i128::from(i32::MAX), true),
            AtomicType::I64 => (i128::from(i64::MIN), i128::from(i64::MAX), true),
            AtomicType::U32 | AtomicType::F32 => (0, i128::from(u32::MAX), false),
            _ => (0, i128::from(u64::MAX), false),
        };
        let span = max - min + 1;
        let wrap = |v: i128| (v - min).rem_euclid(span) + min;
        // Bit operations on the two's complement pattern of the type's width.
        let bits = |v: i128| (v - if signed && v < 0 { -span } else { 0 }) as u128;
        let unbits = |b: u128| {
            let b = b as i128;
            if signed && b > max { b - span } else { b }
        };
        let new = match op {
            AtomicOp::Fetch => old,
            AtomicOp::Set | AtomicOp::Swap => x,
            AtomicOp::CompareSwap => {
                if old == c {
                    x
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd | AtomicOp::Add => wrap(old + x),
            AtomicOp::FetchInc | AtomicOp::Inc => wrap(old + 1),
            AtomicOp::FetchAnd | AtomicOp::And => unbits(bits(old) & bits(x)),
            AtomicOp::FetchOr | AtomicOp::Or => unbits(bits(old) | bits(x)),
            AtomicOp::FetchXor | AtomicOp::Xor => unbits(bits(old) ^ bits(x)),
            AtomicOp::Unknown(_) => unreachable!(),
        };
        let returned = if op == AtomicOp::Set { 0 } else { old };
        (returned, new)
    }

    /// Interesting values of each type (as `i128`).
    fn samples(ty: AtomicType) -> &'static [i128] {
        match ty {
            AtomicType::I32 => &[
                0,
                1,
                -1,
                7,
                -8,
                0x5a5a_5a5a,
                i32::MIN as i128,
                i32::MAX as i128,
            ],
            AtomicType::I64 => &[0, 1, -1, 7, -8, 1 << 40, i64::MIN as i128, i64::MAX as i128],
            AtomicType::U32 | AtomicType::F32 => &[0, 1, 7, 0x8000_0000, 0xdead_beef, 0xffff_ffff],
            _ => &[0, 1, 7, 1 << 63, 0xdead_beef_0bad_f00d, u64::MAX as i128],
        }
    }

    fn to_bits(ty: AtomicType, v: i128) -> u64 {
        match ty {
            AtomicType::I32 => u64::from(v as i32 as u32),
            AtomicType::I64 => v as i64 as u64,
            _ => v as u64,
        }
    }

    fn from_bits(ty: AtomicType, b: u64) -> i128 {
        match ty {
            AtomicType::I32 => i128::from(b as u32 as i32),
            AtomicType::U32 | AtomicType::F32 => i128::from(b as u32),
            AtomicType::I64 => i128::from(b as i64),
            _ => i128::from(b),
        }
    }

    #[test]
    fn every_op_on_every_type_matches_the_model() {
        let mut cases = 0;
        for ty in TYPES {
            for op in OPS {
                let Ok(desc) = AtomicDesc::new(op, ty) else {
                    // Floats: no arithmetic or bitwise operations on the wire.
                    assert!(matches!(ty, AtomicType::F32 | AtomicType::F64));
                    continue;
                };
                for &old in samples(ty) {
                    for &x in samples(ty) {
                        // The comparand both matching and not.
                        for c in [old, x] {
                            let (want_ret, want_new) = model(ty, op, old, x, c);
                            let (kind, operand) = AmoKind::from_wire(op, to_bits(ty, x));
                            let comparand = to_bits(ty, c);
                            let (ret, new) = if desc.width() == 4 {
                                let w = AtomicU32::new(to_bits(ty, old) as u32);
                                let r = kind.run32(&w, operand as u32, comparand as u32);
                                (u64::from(r), u64::from(w.into_inner()))
                            } else {
                                let w = AtomicU64::new(to_bits(ty, old));
                                let r = kind.run64(&w, operand, comparand);
                                (r, w.into_inner())
                            };
                            let ctx = (ty, op, old, x, c);
                            assert_eq!(from_bits(ty, ret), want_ret, "returned {ctx:?}");
                            assert_eq!(from_bits(ty, new), want_new, "stored {ctx:?}");
                            // `apply` (the compare-exchange-loop path) agrees.
                            let mask = if desc.width() == 4 {
                                0xffff_ffff
                            } else {
                                u64::MAX
                            };
                            let applied = kind
                                .apply(to_bits(ty, old), operand, comparand)
                                .map_or(to_bits(ty, old), |v| v & mask);
                            assert_eq!(applied, new, "apply {ctx:?}");
                            cases += 1;
                        }
                    }
                }
            }
        }
        // 4 integer types x 14 ops + 2 float types x 3 ops (fetch, set, swap), each over
        // its samples and two comparands: nothing was skipped wholesale.
        // (I32, I64: 8 samples; U32, U64, F32, F64: 6.)
        assert_eq!(
            cases,
            2 * (14 * 8 * 8 * 2) + 2 * (14 * 6 * 6 * 2) + 2 * (3 * 6 * 6 * 2)
        );
    }

    #[test]
    fn from_wire_maps_increments_and_fetches() {
        assert_eq!(AmoKind::from_wire(AtomicOp::Inc, 99), (AmoKind::Add, 1));
        assert_eq!(
            AmoKind::from_wire(AtomicOp::FetchInc, 99),
            (AmoKind::Add, 1)
        );
        assert_eq!(AmoKind::from_wire(AtomicOp::Fetch, 99), (AmoKind::Fetch, 0));
        assert_eq!(
            AmoKind::from_wire(AtomicOp::Unknown(15), 9),
            (AmoKind::Fetch, 0)
        );
        assert_eq!(AmoKind::from_wire(AtomicOp::Xor, 9), (AmoKind::Xor, 9));
    }
}
