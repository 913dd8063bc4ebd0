//! C ABI of the synchronization and data-movement collectives (OpenSHMEM 1.5 §9.9.1 -
//! §9.9.8): barriers and syncs, then broadcast, collect, fcollect, alltoall and alltoalls
//! per type (`rma_types!`, team forms), in `mem` forms (bytes, teams) and per block size
//! (`to_all_sizes!`, the deprecated active-set forms). Every body is a call of
//! `crate::coll` with a byte count (element count times size) or the element shape.

use std::ffi::{
    c_char, c_int, c_long, c_longlong, c_schar, c_short, c_uchar, c_uint, c_ulong, c_ulonglong,
    c_ushort, c_void,
};

use crate::coll::{self, ActiveSet, On};
use crate::rma::bytes;
use crate::team::RawTeam;
use crate::types::LongDouble;

/// The active set of a deprecated routine's arguments.
#[inline(always)]
fn set(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) -> On {
    On::Set(ActiveSet {
        start,
        log_stride,
        size,
        psync,
    })
}

abi! {
    const SYNC;
    plain [barrier_all] () => |call| coll::barrier_all(call);
    plain [barrier]
        (pe_start: c_int, log_pe_stride: c_int, pe_size: c_int, p_sync: *mut c_long)
        => |call| coll::barrier(
            ActiveSet { start: pe_start, log_stride: log_pe_stride, size: pe_size, psync: p_sync },
            call,
        );
    plain [sync_all] () => |call| coll::sync_all(call);
    plain [team_sync] (team: RawTeam) -> c_int
        => |call| coll::sync(On::Team(team), call);
    plain [sync]
        (pe_start: c_int, log_pe_stride: c_int, pe_size: c_int, p_sync: *mut c_long)
        => |call| {
            coll::sync(set(pe_start, log_pe_stride, pe_size, p_sync), call);
        };
}

macro_rules! coll_rows {
    ($($n:ident : $t:ty [$k:ident]),* $(,)?) => {
        /// The team data-movement collectives, per type.
        const TYPED: &[&[&[&str]]] = &[$(
            abi! {
                names;
                plain [$n _broadcast]
                    (team: RawTeam, dest: *mut $t, source: *const $t, nelems: usize,
                     pe_root: c_int) -> c_int
                    => |call| coll::broadcast(
                        On::Team(team), dest.cast(), source.cast(),
                        bytes(nelems, size_of::<$t>(), call), pe_root, call);
                plain [$n _collect]
                    (team: RawTeam, dest: *mut $t, source: *const $t, nelems: usize)
                    -> c_int
                    => |call| coll::collect(
                        On::Team(team), dest.cast(), source.cast(),
                        bytes(nelems, size_of::<$t>(), call), call);
                plain [$n _fcollect]
                    (team: RawTeam, dest: *mut $t, source: *const $t, nelems: usize)
                    -> c_int
                    => |call| coll::fcollect(
                        On::Team(team), dest.cast(), source.cast(),
                        bytes(nelems, size_of::<$t>(), call), call);
                plain [$n _alltoall]
                    (team: RawTeam, dest: *mut $t, source: *const $t, nelems: usize)
                    -> c_int
                    => |call| coll::alltoall(
                        On::Team(team), dest.cast(), source.cast(), 1, 1,
                        size_of::<$t>(), nelems, call);
                plain [$n _alltoalls]
                    (team: RawTeam, dest: *mut $t, source: *const $t, dst: isize,
                     sst: isize, nelems: usize) -> c_int
                    => |call| coll::alltoall(
                        On::Team(team), dest.cast(), source.cast(), dst, sst,
                        size_of::<$t>(), nelems, call);
            }
        ),*];
    };
}

rma_types!(coll_rows);

abi! {
    /// The `mem` forms: byte counts, teams.
    const MEM;
    plain [broadcastmem]
        (team: RawTeam, dest: *mut c_void, source: *const c_void, nelems: usize,
         pe_root: c_int) -> c_int
        => |call| coll::broadcast(
            On::Team(team), dest.cast(), source.cast(), nelems, pe_root, call);
    plain [collectmem]
        (team: RawTeam, dest: *mut c_void, source: *const c_void, nelems: usize) -> c_int
        => |call| coll::collect(On::Team(team), dest.cast(), source.cast(), nelems, call);
    plain [fcollectmem]
        (team: RawTeam, dest: *mut c_void, source: *const c_void, nelems: usize) -> c_int
        => |call| coll::fcollect(On::Team(team), dest.cast(), source.cast(), nelems, call);
    plain [alltoallmem]
        (team: RawTeam, dest: *mut c_void, source: *const c_void, nelems: usize) -> c_int
        => |call| coll::alltoall(
            On::Team(team), dest.cast(), source.cast(), 1, 1, 1, nelems, call);
    plain [alltoallsmem]
        (team: RawTeam, dest: *mut c_void, source: *const c_void, dst: isize, sst: isize,
         nelems: usize) -> c_int
        => |call| coll::alltoall(
            On::Team(team), dest.cast(), source.cast(), dst, sst, 1, nelems, call);
}

macro_rules! sized_rows {
    ($($m:ident : $bits:literal => $bytes:literal),* $(,)?) => {
        /// The deprecated active-set forms, per block size.
        const SIZED: &[&[&[&str]]] = &[$(
            abi! {
                names;
                plain [broadcast $bits]
                    (dest: *mut c_void, source: *const c_void, nelems: usize,
                     pe_root: c_int, pe_start: c_int, log_pe_stride: c_int,
                     pe_size: c_int, p_sync: *mut c_long)
                    => |call| {
                        coll::broadcast(
                            set(pe_start, log_pe_stride, pe_size, p_sync),
                            dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                            pe_root, call);
                    };
                plain [collect $bits]
                    (dest: *mut c_void, source: *const c_void, nelems: usize,
                     pe_start: c_int, log_pe_stride: c_int, pe_size: c_int,
                     p_sync: *mut c_long)
                    => |call| {
                        coll::collect(
                            set(pe_start, log_pe_stride, pe_size, p_sync),
                            dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                            call);
                    };
                plain [fcollect $bits]
                    (dest: *mut c_void, source: *const c_void, nelems: usize,
                     pe_start: c_int, log_pe_stride: c_int, pe_size: c_int,
                     p_sync: *mut c_long)
                    => |call| {
                        coll::fcollect(
                            set(pe_start, log_pe_stride, pe_size, p_sync),
                            dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                            call);
                    };
                plain [alltoall $bits]
                    (dest: *mut c_void, source: *const c_void, nelems: usize,
                     pe_start: c_int, log_pe_stride: c_int, pe_size: c_int,
                     p_sync: *mut c_long)
                    => |call| {
                        coll::alltoall(
                            set(pe_start, log_pe_stride, pe_size, p_sync),
                            dest.cast(), source.cast(), 1, 1, $bytes, nelems, call);
                    };
                plain [alltoalls $bits]
                    (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize,
                     nelems: usize, pe_start: c_int, log_pe_stride: c_int,
                     pe_size: c_int, p_sync: *mut c_long)
                    => |call| {
                        coll::alltoall(
                            set(pe_start, log_pe_stride, pe_size, p_sync),
                            dest.cast(), source.cast(), dst, sst, $bytes, nelems, call);
                    };
            }
        ),*];
    };
}

to_all_sizes!(sized_rows);

/// The names of this module.
pub fn names(out: &mut Vec<&'static str>) {
    super::extend(out, &[SYNC]);
    super::extend(out, TYPED);
    super::extend(out, &[MEM]);
    super::extend(out, SIZED);
}
