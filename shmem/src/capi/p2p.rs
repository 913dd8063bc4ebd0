//! C ABI of point-to-point synchronization (OpenSHMEM 1.5 §9.10) over `p2p_types!`, the
//! deprecated short/ushort forms and `shmem_TYPENAME_wait`. Every body is a call of
//! `crate::p2p_wait` with the row's [`ScalarKind`](crate::types::ScalarKind) and the comparison values as integers.

use std::ffi::{c_int, c_long, c_longlong, c_short, c_uint, c_ulong, c_ulonglong, c_ushort};

use crate::p2p_wait::{self as q, Cmp, Set, Values};
use crate::types::Scalar;

/// The set of a multi-element routine.
#[inline(always)]
fn set<T: Scalar>(
    ivars: *mut T,
    nelems: usize,
    status: *const c_int,
    cmp: c_int,
    values: Values,
    call: &str,
) -> Set {
    Set {
        ivars: ivars.cast_const().cast(),
        nelems,
        status,
        kind: T::KIND,
        cmp: Cmp::from_c(cmp, call),
        values,
    }
}

/// `shmem_TYPENAME_wait_until`.
///
/// # Safety
///
/// As [`crate::p2p_wait::wait_until`].
#[inline(always)]
unsafe fn wait_until<T: Scalar>(ivar: *mut T, cmp: c_int, value: T, call: &str) {
    // SAFETY: forwarded.
    unsafe {
        q::wait_until(
            ivar.cast_const().cast(),
            T::KIND,
            Cmp::from_c(cmp, call),
            value.to_i128(),
            call,
        )
    };
}

/// `shmem_TYPENAME_test`.
///
/// # Safety
///
/// As [`crate::p2p_wait::test`].
#[inline(always)]
unsafe fn test<T: Scalar>(ivar: *mut T, cmp: c_int, value: T, call: &str) -> c_int {
    // SAFETY: forwarded.
    c_int::from(unsafe {
        q::test(
            ivar.cast_const().cast(),
            T::KIND,
            Cmp::from_c(cmp, call),
            value.to_i128(),
            call,
        )
    })
}

macro_rules! p2p_rows {
    ($($n:ident : $t:ty),* $(,)?) => {
        /// The wait_until and test routines of OpenSHMEM 1.5, per type.
        const CURRENT: &[&[&[&str]]] = &[$(
            abi! {
                names;
                plain [$n _wait_until] (ivar: *mut $t, cmp: c_int, cmp_value: $t)
                    => |call| wait_until(ivar, cmp, cmp_value, call);
                plain [$n _test] (ivar: *mut $t, cmp: c_int, cmp_value: $t) -> c_int
                    => |call| test(ivar, cmp, cmp_value, call);
                plain [$n _wait_until_all_vector]
                    (ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int,
                     cmp_values: *const $t)
                    => |call| q::wait_until_all(
                        set(ivars, nelems, status, cmp,
                            Values::Each(cmp_values.cast()), call),
                        call);
                plain [$n _wait_until_any_vector]
                    (ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int,
                     cmp_values: *const $t) -> usize
                    => |call| q::wait_until_any(
                        set(ivars, nelems, status, cmp,
                            Values::Each(cmp_values.cast()), call),
                        call);
                plain [$n _wait_until_some_vector]
                    (ivars: *mut $t, nelems: usize, indices: *mut usize,
                     status: *const c_int, cmp: c_int, cmp_values: *const $t) -> usize
                    => |call| q::wait_until_some(
                        set(ivars, nelems, status, cmp,
                            Values::Each(cmp_values.cast()), call),
                        indices, call);
                plain [$n _test_all_vector]
                    (ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int,
                     cmp_values: *const $t) -> c_int
                    => |call| q::test_all(
                        set(ivars, nelems, status, cmp,
                            Values::Each(cmp_values.cast()), call),
                        call);
                plain [$n _test_any_vector]
                    (ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int,
                     cmp_values: *const $t) -> usize
                    => |call| q::test_any(
                        set(ivars, nelems, status, cmp,
                            Values::Each(cmp_values.cast()), call),
                        call);
                plain [$n _test_some_vector]
                    (ivars: *mut $t, nelems: usize, indices: *mut usize,
                     status: *const c_int, cmp: c_int, cmp_values: *const $t) -> usize
                    => |call| q::test_some(
                        set(ivars, nelems, status, cmp,
                            Values::Each(cmp_values.cast()), call),
                        indices, call);
            }
        ),*];
    };
}

p2p_types!(p2p_rows);

macro_rules! p2p_depr_rows {
    ($($n:ident : $t:ty),* $(,)?) => {
        /// The deprecated short and unsigned short wait_until and test.
        const DEPR: &[&[&[&str]]] = &[$(
            abi! {
                names;
                plain [$n _wait_until]
                    (ivar: *mut $t, cmp: c_int, cmp_value: $t)
                    => |call| wait_until(ivar, cmp, cmp_value, call);
                plain [$n _test] (ivar: *mut $t, cmp: c_int, cmp_value: $t) -> c_int
                    => |call| test(ivar, cmp, cmp_value, call);
            }
        ),*];
    };
}

p2p_depr_types!(p2p_depr_rows);

/// The multi-variable wait_until and test with one comparison value (`_all`, `_any`,
/// `_some`), over the table `$list` names: OpenSHMEM 1.5's types (`MULTI`), and short and
/// unsigned short (`MULTI_SHORT`: not OpenSHMEM routines, but Sandia OpenSHMEM and Open MPI
/// have them, and the C11 generics of programs written for them take `short`).
macro_rules! p2p_multi_rows {
    ($list:ident; $($n:ident : $t:ty),* $(,)?) => {
        const $list: &[&[&[&str]]] = &[$(
            abi! {
                names;
                plain [$n _wait_until_all]
                    (ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int,
                     cmp_value: $t)
                    => |call| q::wait_until_all(
                        set(ivars, nelems, status, cmp, Values::One(cmp_value.to_i128()), call),
                        call);
                plain [$n _wait_until_any]
                    (ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int,
                     cmp_value: $t) -> usize
                    => |call| q::wait_until_any(
                        set(ivars, nelems, status, cmp, Values::One(cmp_value.to_i128()), call),
                        call);
                plain [$n _wait_until_some]
                    (ivars: *mut $t, nelems: usize, indices: *mut usize,
                     status: *const c_int, cmp: c_int, cmp_value: $t) -> usize
                    => |call| q::wait_until_some(
                        set(ivars, nelems, status, cmp, Values::One(cmp_value.to_i128()), call),
                        indices, call);
                plain [$n _test_all]
                    (ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int,
                     cmp_value: $t) -> c_int
                    => |call| q::test_all(
                        set(ivars, nelems, status, cmp, Values::One(cmp_value.to_i128()), call),
                        call);
                plain [$n _test_any]
                    (ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int,
                     cmp_value: $t) -> usize
                    => |call| q::test_any(
                        set(ivars, nelems, status, cmp, Values::One(cmp_value.to_i128()), call),
                        call);
                plain [$n _test_some]
                    (ivars: *mut $t, nelems: usize, indices: *mut usize,
                     status: *const c_int, cmp: c_int, cmp_value: $t) -> usize
                    => |call| q::test_some(
                        set(ivars, nelems, status, cmp, Values::One(cmp_value.to_i128()), call),
                        indices, call);
            }
        ),*];
    };
}
macro_rules! p2p_multi {
    ($($rows:tt)*) => {
        p2p_multi_rows!(MULTI; $($rows)*);
    };
}
macro_rules! p2p_multi_short {
    ($($rows:tt)*) => {
        p2p_multi_rows!(MULTI_SHORT; $($rows)*);
    };
}

p2p_types!(p2p_multi);
p2p_depr_types!(p2p_multi_short);

macro_rules! wait_depr_rows {
    ($($n:ident : $t:ty),* $(,)?) => {
        /// The deprecated `shmem_TYPENAME_wait`: wait until the value differs.
        const WAIT: &[&[&[&str]]] = &[$(
            abi! {
                names;
                plain [$n _wait] (ivar: *mut $t, cmp_value: $t)
                    => |call| wait_until(ivar, Cmp::Ne.to_c(), cmp_value, call);
            }
        ),*];
    };
}

wait_depr_types!(wait_depr_rows);

/// The names of this module.
pub fn names(out: &mut Vec<&'static str>) {
    super::extend(out, CURRENT);
    super::extend(out, MULTI);
    super::extend(out, DEPR);
    super::extend(out, MULTI_SHORT);
    super::extend(out, WAIT);
}
