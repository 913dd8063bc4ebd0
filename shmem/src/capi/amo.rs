//! C ABI of the AMOs and non-blocking fetching AMOs (OpenSHMEM 1.5 §9.7) over
//! `amo_ext_types!`, `amo_std_types!`, `amo_bit_types!`, and the deprecated pre-1.4
//! names. Every body is a call of `crate::amo::typed[_nbi]` with a wire operation code; the
//! datatype code comes from the row's Rust type ([`Scalar`]).

use std::ffi::{c_int, c_long, c_longlong, c_uint, c_ulong, c_ulonglong};

use gsas_core::wire::AtomicOp::{self, *};

use crate::amo::{typed, typed_nbi};
use crate::ctx_table::CtxRef;
use crate::types::Scalar;

/// A blocking AMO with one operand.
///
/// # Safety
///
/// As [`crate::amo::amo`].
#[inline(always)]
unsafe fn op1<T: Scalar>(
    ctx: CtxRef,
    op: AtomicOp,
    dest: *mut T,
    v: T,
    pe: c_int,
    call: &str,
) -> T {
    // SAFETY: forwarded.
    unsafe { typed(ctx, op, dest, v, T::from_bits(0), pe, call) }
}

/// A blocking AMO without operand.
///
/// # Safety
///
/// As [`crate::amo::amo`].
#[inline(always)]
unsafe fn op0<T: Scalar>(ctx: CtxRef, op: AtomicOp, dest: *const T, pe: c_int, call: &str) -> T {
    // SAFETY: forwarded.
    unsafe { op1(ctx, op, dest.cast_mut(), T::from_bits(0), pe, call) }
}

/// A non-blocking fetching AMO with one operand.
///
/// # Safety
///
/// As [`crate::amo::amo_nbi`].
#[inline(always)]
unsafe fn nbi1<T: Scalar>(
    ctx: CtxRef,
    op: AtomicOp,
    fetch: *mut T,
    dest: *const T,
    v: T,
    pe: c_int,
    call: &str,
) {
    // SAFETY: forwarded.
    unsafe {
        typed_nbi(
            ctx,
            op,
            fetch,
            dest.cast_mut(),
            v,
            T::from_bits(0),
            pe,
            call,
        )
    }
}

macro_rules! ext_rows {
    ($($n:ident : $t:ty),* $(,)?) => {
        /// The extended AMOs, per type.
        const EXT: &[&[&[&str]]] = &[$(
            abi! {
                names;
                twin [$n _atomic_fetch] (source: *const $t, pe: c_int) -> $t
                    => |ctx, call| op0(ctx, Fetch, source, pe, call);
                twin [$n _atomic_set] (dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| { op1(ctx, Set, dest, value, pe, call); };
                twin [$n _atomic_swap] (dest: *mut $t, value: $t, pe: c_int) -> $t
                    => |ctx, call| op1(ctx, Swap, dest, value, pe, call);
                twin [$n _atomic_fetch_nbi]
                    (fetch: *mut $t, source: *const $t, pe: c_int)
                    => |ctx, call| nbi1(ctx, Fetch, fetch, source, <$t as Scalar>::from_bits(0), pe, call);
                twin [$n _atomic_swap_nbi]
                    (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| nbi1(ctx, Swap, fetch, dest, value, pe, call);
            }
        ),*];
    };
}

amo_ext_types!(ext_rows);

macro_rules! std_rows {
    ($($n:ident : $t:ty),* $(,)?) => {
        /// The standard AMOs, per type.
        const STANDARD: &[&[&[&str]]] = &[$(
            abi! {
                names;
                twin [$n _atomic_compare_swap]
                    (dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t
                    => |ctx, call| typed(ctx, CompareSwap, dest, value, cond, pe, call);
                twin [$n _atomic_fetch_inc] (dest: *mut $t, pe: c_int) -> $t
                    => |ctx, call| op0(ctx, FetchInc, dest, pe, call);
                twin [$n _atomic_inc] (dest: *mut $t, pe: c_int)
                    => |ctx, call| { op0(ctx, Inc, dest, pe, call); };
                twin [$n _atomic_fetch_add]
                    (dest: *mut $t, value: $t, pe: c_int) -> $t
                    => |ctx, call| op1(ctx, FetchAdd, dest, value, pe, call);
                twin [$n _atomic_add] (dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| { op1(ctx, Add, dest, value, pe, call); };
                twin [$n _atomic_compare_swap_nbi]
                    (fetch: *mut $t, dest: *mut $t, cond: $t, value: $t, pe: c_int)
                    => |ctx, call| typed_nbi(ctx, CompareSwap, fetch, dest, value, cond, pe, call);
                twin [$n _atomic_fetch_inc_nbi]
                    (fetch: *mut $t, dest: *mut $t, pe: c_int)
                    => |ctx, call| nbi1(ctx, FetchInc, fetch, dest, <$t as Scalar>::from_bits(0), pe, call);
                twin [$n _atomic_fetch_add_nbi]
                    (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| nbi1(ctx, FetchAdd, fetch, dest, value, pe, call);
            }
        ),*];
    };
}

amo_std_types!(std_rows);

macro_rules! bit_rows {
    ($($n:ident : $t:ty),* $(,)?) => {
        /// The bitwise AMOs, per type.
        const BITWISE: &[&[&[&str]]] = &[$(
            abi! {
                names;
                twin [$n _atomic_fetch_and]
                    (dest: *mut $t, value: $t, pe: c_int) -> $t
                    => |ctx, call| op1(ctx, FetchAnd, dest, value, pe, call);
                twin [$n _atomic_and] (dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| { op1(ctx, And, dest, value, pe, call); };
                twin [$n _atomic_fetch_or]
                    (dest: *mut $t, value: $t, pe: c_int) -> $t
                    => |ctx, call| op1(ctx, FetchOr, dest, value, pe, call);
                twin [$n _atomic_or] (dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| { op1(ctx, Or, dest, value, pe, call); };
                twin [$n _atomic_fetch_xor]
                    (dest: *mut $t, value: $t, pe: c_int) -> $t
                    => |ctx, call| op1(ctx, FetchXor, dest, value, pe, call);
                twin [$n _atomic_xor] (dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| { op1(ctx, Xor, dest, value, pe, call); };
                twin [$n _atomic_fetch_and_nbi]
                    (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| nbi1(ctx, FetchAnd, fetch, dest, value, pe, call);
                twin [$n _atomic_fetch_or_nbi]
                    (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| nbi1(ctx, FetchOr, fetch, dest, value, pe, call);
                twin [$n _atomic_fetch_xor_nbi]
                    (fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int)
                    => |ctx, call| nbi1(ctx, FetchXor, fetch, dest, value, pe, call);
            }
        ),*];
    };
}

amo_bit_types!(bit_rows);

macro_rules! depr_ext_rows {
    ($($n:ident : $t:ty),* $(,)?) => {
        /// Deprecated (1.4) `shmem_TYPENAME_fetch`, `_set`, `_swap`: the default context.
        const DEPR_EXT: &[&[&[&str]]] = &[$(
            abi! {
                names;
                plain [$n _fetch] (source: *const $t, pe: c_int) -> $t
                    => |call| op0(CtxRef::DEFAULT, Fetch, source, pe, call);
                plain [$n _set] (dest: *mut $t, value: $t, pe: c_int)
                    => |call| { op1(CtxRef::DEFAULT, Set, dest, value, pe, call); };
                plain [$n _swap] (dest: *mut $t, value: $t, pe: c_int) -> $t
                    => |call| op1(CtxRef::DEFAULT, Swap, dest, value, pe, call);
            }
        ),*];
    };
}

amo_depr_ext_types!(depr_ext_rows);

macro_rules! depr_std_rows {
    ($($n:ident : $t:ty),* $(,)?) => {
        /// Deprecated (1.4) `shmem_TYPENAME_cswap`, `_finc`, `_inc`, `_fadd`, `_add`.
        const DEPR_STD: &[&[&[&str]]] = &[$(
            abi! {
                names;
                plain [$n _cswap] (dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t
                    => |call| typed(CtxRef::DEFAULT, CompareSwap, dest, value, cond, pe, call);
                plain [$n _finc] (dest: *mut $t, pe: c_int) -> $t
                    => |call| op0(CtxRef::DEFAULT, FetchInc, dest, pe, call);
                plain [$n _inc] (dest: *mut $t, pe: c_int)
                    => |call| { op0(CtxRef::DEFAULT, Inc, dest, pe, call); };
                plain [$n _fadd] (dest: *mut $t, value: $t, pe: c_int) -> $t
                    => |call| op1(CtxRef::DEFAULT, FetchAdd, dest, value, pe, call);
                plain [$n _add] (dest: *mut $t, value: $t, pe: c_int)
                    => |call| { op1(CtxRef::DEFAULT, Add, dest, value, pe, call); };
            }
        ),*];
    };
}

amo_depr_std_types!(depr_std_rows);

/// Ties the C ABI's type tables to the Rust API's type classes
/// ([`crate::types::AmoStandard`], [`AmoExtended`](crate::types::AmoExtended),
/// [`AmoBitwise`](crate::types::AmoBitwise)): every row type of a table implements the
/// trait of its class, or the crate does not compile. (The Rust classes list each Rust type
/// once; the tables list C names, several of which are the same Rust type.)
macro_rules! std_class {
    ($($n:ident : $t:ty),* $(,)?) => {
        const _: fn() = || {
            fn has<T: crate::types::AmoStandard>() {}
            $( has::<$t>(); )*
        };
    };
}
macro_rules! ext_class {
    ($($n:ident : $t:ty),* $(,)?) => {
        const _: fn() = || {
            fn has<T: crate::types::AmoExtended>() {}
            $( has::<$t>(); )*
        };
    };
}
macro_rules! bit_class {
    ($($n:ident : $t:ty),* $(,)?) => {
        const _: fn() = || {
            fn has<T: crate::types::AmoBitwise>() {}
            $( has::<$t>(); )*
        };
    };
}
amo_std_types!(std_class);
amo_ext_types!(ext_class);
amo_bit_types!(bit_class);

/// The names of this module.
pub fn names(out: &mut Vec<&'static str>) {
    super::extend(out, EXT);
    super::extend(out, STANDARD);
    super::extend(out, BITWISE);
    super::extend(out, DEPR_EXT);
    super::extend(out, DEPR_STD);
}
