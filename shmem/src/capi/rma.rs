//! C ABI of RMA, non-blocking RMA and put-with-signal (OpenSHMEM 1.5 §9.6, §9.8), with the
//! block-strided ibput and ibget of OpenSHMEM 1.6 (§9.6.1.4 and SHMEM_IBGET): typed
//! routines over `rma_types!`, sized routines over `sized_types!`, and the `mem` forms.
//! Every body is a call of `crate::rma` with the byte count.

use std::ffi::{
    c_char, c_int, c_long, c_longlong, c_schar, c_short, c_uchar, c_uint, c_ulong, c_ulonglong,
    c_ushort, c_void,
};

use crate::rma::{self as r, bytes};
use crate::types::LongDouble;

/// The names of the by-value routines of a row: present for `val` rows only.
macro_rules! by_value {
    (val $n:ident $t:ty) => {
        abi! {
            names;
            twin [$n _p] (dest: *mut $t, value: $t, pe: c_int)
                => |ctx, call| r::p(ctx, dest, value, pe, call);
            twin [$n _g] (source: *const $t, pe: c_int) -> $t
                => |ctx, call| r::g(ctx, source, pe, call);
        }
    };
    // `long double` is passed by value in the C shim.
    (ptr $n:ident $t:ty) => {
        &[]
    };
}

macro_rules! rma_rows {
    ($($n:ident : $t:ty [$k:ident]),* $(,)?) => {
        /// The typed routines, two lists per row (the by-value ones second).
        const TYPED: &[&[&[&str]]] = &[$(
            abi! {
                names;
                twin [$n _put]
                    (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int)
                    => |ctx, call| r::put(
                        ctx, dest.cast(), source.cast(),
                        bytes(nelems, size_of::<$t>(), call), pe, call);
                twin [$n _get]
                    (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int)
                    => |ctx, call| r::get(
                        ctx, dest.cast(), source.cast(),
                        bytes(nelems, size_of::<$t>(), call), pe, call);
                twin [$n _iput]
                    (dest: *mut $t, source: *const $t, dst: isize, sst: isize,
                     nelems: usize, pe: c_int)
                    => |ctx, call| r::iput(
                        ctx, dest.cast(), source.cast(), dst, sst, size_of::<$t>(),
                        nelems, pe, call);
                twin [$n _iget]
                    (dest: *mut $t, source: *const $t, dst: isize, sst: isize,
                     nelems: usize, pe: c_int)
                    => |ctx, call| r::iget(
                        ctx, dest.cast(), source.cast(), dst, sst, size_of::<$t>(),
                        nelems, pe, call);
                twin [$n _ibput]
                    (dest: *mut $t, source: *const $t, dst: isize, sst: isize,
                     bsize: usize, nblocks: usize, pe: c_int)
                    => |ctx, call| r::ibput(
                        ctx, dest.cast(), source.cast(), dst, sst, size_of::<$t>(),
                        bsize, nblocks, pe, call);
                twin [$n _ibget]
                    (dest: *mut $t, source: *const $t, dst: isize, sst: isize,
                     bsize: usize, nblocks: usize, pe: c_int)
                    => |ctx, call| r::ibget(
                        ctx, dest.cast(), source.cast(), dst, sst, size_of::<$t>(),
                        bsize, nblocks, pe, call);
                twin [$n _put_nbi]
                    (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int)
                    => |ctx, call| r::put_nbi(
                        ctx, dest.cast(), source.cast(),
                        bytes(nelems, size_of::<$t>(), call), pe, call);
                twin [$n _get_nbi]
                    (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int)
                    => |ctx, call| r::get_nbi(
                        ctx, dest.cast(), source.cast(),
                        bytes(nelems, size_of::<$t>(), call), pe, call);
                twin [$n _put_signal]
                    (dest: *mut $t, source: *const $t, nelems: usize, sig_addr: *mut u64,
                     signal: u64, sig_op: c_int, pe: c_int)
                    => |ctx, call| r::put_signal(
                        ctx, dest.cast(), source.cast(),
                        bytes(nelems, size_of::<$t>(), call), sig_addr, signal, sig_op,
                        pe, false, call);
                twin [$n _put_signal_nbi]
                    (dest: *mut $t, source: *const $t, nelems: usize, sig_addr: *mut u64,
                     signal: u64, sig_op: c_int, pe: c_int)
                    => |ctx, call| r::put_signal(
                        ctx, dest.cast(), source.cast(),
                        bytes(nelems, size_of::<$t>(), call), sig_addr, signal, sig_op,
                        pe, true, call);
            },
            by_value!($k $n $t)
        ),*];
    };
}

rma_types!(rma_rows);

macro_rules! sized_rows {
    ($($m:ident : $bits:literal => $bytes:literal),* $(,)?) => {
        /// The sized routines, per block size.
        const SIZED: &[&[&[&str]]] = &[$(
            abi! {
                names;
                twin [put $bits]
                    (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
                    => |ctx, call| r::put(
                        ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                        pe, call);
                twin [get $bits]
                    (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
                    => |ctx, call| r::get(
                        ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                        pe, call);
                twin [iput $bits]
                    (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize,
                     nelems: usize, pe: c_int)
                    => |ctx, call| r::iput(
                        ctx, dest.cast(), source.cast(), dst, sst, $bytes, nelems, pe,
                        call);
                twin [iget $bits]
                    (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize,
                     nelems: usize, pe: c_int)
                    => |ctx, call| r::iget(
                        ctx, dest.cast(), source.cast(), dst, sst, $bytes, nelems, pe,
                        call);
                twin [ibput $bits]
                    (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize,
                     bsize: usize, nblocks: usize, pe: c_int)
                    => |ctx, call| r::ibput(
                        ctx, dest.cast(), source.cast(), dst, sst, $bytes, bsize, nblocks,
                        pe, call);
                twin [ibget $bits]
                    (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize,
                     bsize: usize, nblocks: usize, pe: c_int)
                    => |ctx, call| r::ibget(
                        ctx, dest.cast(), source.cast(), dst, sst, $bytes, bsize, nblocks,
                        pe, call);
                twin [put $bits _nbi]
                    (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
                    => |ctx, call| r::put_nbi(
                        ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                        pe, call);
                twin [get $bits _nbi]
                    (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
                    => |ctx, call| r::get_nbi(
                        ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                        pe, call);
                twin [put $bits _signal]
                    (dest: *mut c_void, source: *const c_void, nelems: usize,
                     sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int)
                    => |ctx, call| r::put_signal(
                        ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                        sig_addr, signal, sig_op, pe, false, call);
                twin [put $bits _signal_nbi]
                    (dest: *mut c_void, source: *const c_void, nelems: usize,
                     sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int)
                    => |ctx, call| r::put_signal(
                        ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                        sig_addr, signal, sig_op, pe, true, call);
            }
        ),*];
    };
}

sized_types!(sized_rows);

abi! {
    /// The `mem` forms: byte counts.
    const MEM;
    twin [putmem]
        (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
        => |ctx, call| r::put(ctx, dest.cast(), source.cast(), nelems, pe, call);
    twin [getmem]
        (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
        => |ctx, call| r::get(ctx, dest.cast(), source.cast(), nelems, pe, call);
    twin [putmem_nbi]
        (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
        => |ctx, call| r::put_nbi(ctx, dest.cast(), source.cast(), nelems, pe, call);
    twin [getmem_nbi]
        (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
        => |ctx, call| r::get_nbi(ctx, dest.cast(), source.cast(), nelems, pe, call);
    twin [putmem_signal]
        (dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64,
         signal: u64, sig_op: c_int, pe: c_int)
        => |ctx, call| r::put_signal(
            ctx, dest.cast(), source.cast(), nelems, sig_addr, signal, sig_op, pe, false,
            call);
    twin [putmem_signal_nbi]
        (dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64,
         signal: u64, sig_op: c_int, pe: c_int)
        => |ctx, call| r::put_signal(
            ctx, dest.cast(), source.cast(), nelems, sig_addr, signal, sig_op, pe, true,
            call);
}

/// The names of this module.
pub fn names(out: &mut Vec<&'static str>) {
    super::extend(out, TYPED);
    super::extend(out, SIZED);
    super::extend(out, &[MEM]);
}
