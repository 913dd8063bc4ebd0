//! C ABI of the reductions (OpenSHMEM 1.5 §9.9.9): `shmem_TYPENAME_OP_reduce` (teams) over
//! `reduce_bit_types!`, `reduce_minmax_types!` and `reduce_arith_types!`, and the deprecated
//! `shmem_TYPENAME_OP_to_all` (active sets) over the `to_all_*_types!` tables. Every body is a
//! call of `crate::coll::reduce` with the operation and the element type's code
//! ([`Elem::DTYPE`]); `long double` arithmetic happens in the C helper. The active-set forms
//! do not use `pWrk` (see `crate::coll` for why none is needed). The team scans of OpenSHMEM
//! 1.6, `shmem_TYPENAME_sum_inscan` and `_sum_exscan`, over `reduce_arith_types!`, call
//! `crate::coll::scan`.

use std::ffi::{
    c_char, c_int, c_long, c_longlong, c_schar, c_short, c_uchar, c_uint, c_ulong, c_ulonglong,
    c_ushort,
};

use crate::coll::ops::Elem;
use crate::coll::{self, ActiveSet, On, Op};
use crate::fatal::fatal;
use crate::team::RawTeam;
use crate::types::{Complex32, Complex64, LongDouble};

/// A team reduction.
///
/// # Safety
///
/// As [`coll::reduce`].
#[inline(always)]
unsafe fn team_reduce<T: Elem>(
    team: RawTeam,
    op: Op,
    dest: *mut T,
    source: *const T,
    nreduce: usize,
    call: &str,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        coll::reduce(
            On::Team(team),
            op,
            T::DTYPE,
            dest.cast(),
            source.cast(),
            nreduce,
            call,
        )
    }
}

/// A team scan (OpenSHMEM 1.6 `sum_inscan`, `sum_exscan`).
///
/// # Safety
///
/// As [`coll::scan`].
#[inline(always)]
unsafe fn team_scan<T: Elem>(
    team: RawTeam,
    dest: *mut T,
    source: *const T,
    nelems: usize,
    exclusive: bool,
    call: &str,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        coll::scan(
            team,
            T::DTYPE,
            dest.cast(),
            source.cast(),
            nelems,
            exclusive,
            call,
        )
    }
}

/// An active-set reduction; `pWrk` is not needed.
///
/// # Safety
///
/// As [`coll::reduce`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn active_set_reduce<T: Elem>(
    op: Op,
    dest: *mut T,
    source: *const T,
    nreduce: c_int,
    start: c_int,
    log_stride: c_int,
    size: c_int,
    psync: *mut c_long,
    call: &str,
) {
    let Ok(n) = usize::try_from(nreduce) else {
        fatal(call, format_args!("nreduce {nreduce} is negative"));
    };
    let set = ActiveSet {
        start,
        log_stride,
        size,
        psync,
    };
    // SAFETY: forwarded.
    unsafe {
        coll::reduce(
            On::Set(set),
            op,
            T::DTYPE,
            dest.cast(),
            source.cast(),
            n,
            call,
        )
    };
}

/// The team reductions of one class: one list of names per row.
macro_rules! team_rows {
    ($class:ident $ops:tt $($n:ident : $t:ty),* $(,)?) => {
        /// The team reductions of one class.
        const $class: &[&[&[&str]]] = &[$( team_row!($n $t $ops) ),*];
    };
}

/// The team reductions of one row: a routine per operation of the class.
macro_rules! team_row {
    ($n:ident $t:ty [$($suffix:ident $code:ident),+]) => {
        abi! {
            names;
            $(
                plain [$n $suffix]
                    (team: RawTeam, dest: *mut $t, source: *const $t, nreduce: usize)
                    -> c_int
                    => |call| team_reduce(team, Op::$code, dest, source, nreduce, call);
            )+
        }
    };
}

/// The active-set reductions of one class: one list of names per row.
macro_rules! to_all_rows {
    ($class:ident $ops:tt $($n:ident : $t:ty),* $(,)?) => {
        /// The active-set reductions of one class.
        const $class: &[&[&[&str]]] = &[$( to_all_row!($n $t $ops) ),*];
    };
}

/// The active-set reductions of one row: a routine per operation of the class.
macro_rules! to_all_row {
    ($n:ident $t:ty [$($suffix:ident $code:ident),+]) => {
        abi! {
            names;
            $(
                plain [$n $suffix]
                    (dest: *mut $t, source: *const $t, nreduce: c_int, pe_start: c_int,
                     log_pe_stride: c_int, pe_size: c_int, p_wrk: *mut $t,
                     p_sync: *mut c_long)
                    => |call| {
                        let _ = p_wrk;
                        active_set_reduce(
                            Op::$code, dest, source, nreduce, pe_start, log_pe_stride,
                            pe_size, p_sync, call);
                    };
            )+
        }
    };
}

macro_rules! bit_team {
    ($($rows:tt)*) => {
        team_rows!(BIT [_and_reduce And, _or_reduce Or, _xor_reduce Xor] $($rows)*);
    };
}
macro_rules! minmax_team {
    ($($rows:tt)*) => {
        team_rows!(MINMAX [_max_reduce Max, _min_reduce Min] $($rows)*);
    };
}
macro_rules! arith_team {
    ($($rows:tt)*) => {
        team_rows!(ARITH [_sum_reduce Sum, _prod_reduce Prod] $($rows)*);
    };
}
macro_rules! bit_to_all {
    ($($rows:tt)*) => {
        to_all_rows!(BIT_TO_ALL [_and_to_all And, _or_to_all Or, _xor_to_all Xor] $($rows)*);
    };
}
macro_rules! minmax_to_all {
    ($($rows:tt)*) => {
        to_all_rows!(MINMAX_TO_ALL [_max_to_all Max, _min_to_all Min] $($rows)*);
    };
}
macro_rules! arith_to_all {
    ($($rows:tt)*) => {
        to_all_rows!(ARITH_TO_ALL [_sum_to_all Sum, _prod_to_all Prod] $($rows)*);
    };
}

/// The team scans of OpenSHMEM 1.6 over the SUM types: `sum_inscan`, `sum_exscan`.
macro_rules! scan_rows {
    ($($n:ident : $t:ty),* $(,)?) => {
        const SCAN: &[&[&[&str]]] = &[$(
            abi! {
                names;
                plain [$n _sum_inscan]
                    (team: RawTeam, dest: *mut $t, source: *const $t, nelems: usize) -> c_int
                    => |call| team_scan(team, dest, source, nelems, false, call);
                plain [$n _sum_exscan]
                    (team: RawTeam, dest: *mut $t, source: *const $t, nelems: usize) -> c_int
                    => |call| team_scan(team, dest, source, nelems, true, call);
            }
        ),*];
    };
}

reduce_bit_types!(bit_team);
reduce_minmax_types!(minmax_team);
reduce_arith_types!(arith_team);
to_all_bit_types!(bit_to_all);
to_all_minmax_types!(minmax_to_all);
to_all_arith_types!(arith_to_all);
reduce_arith_types!(scan_rows);

/// The names of this module.
pub fn names(out: &mut Vec<&'static str>) {
    super::extend(out, BIT);
    super::extend(out, MINMAX);
    super::extend(out, ARITH);
    super::extend(out, BIT_TO_ALL);
    super::extend(out, MINMAX_TO_ALL);
    super::extend(out, ARITH_TO_ALL);
    super::extend(out, SCAN);
}
