//! C ABI of RMA, non-blocking RMA and put-with-signal (OpenSHMEM 1.5 §9.6, §9.8): typed
//! routines over `rma_types!`, sized routines over `sized_types!`, and the `mem` forms.
//! Every body is a call of `crate::rma` with the byte count.

#[allow(unused_imports)]
use std::ffi::{
    c_char, c_int, c_long, c_longlong, c_schar, c_short, c_uchar, c_uint, c_ulong, c_ulonglong,
    c_ushort, c_void,
};

#[allow(unused_imports)]
use crate::rma::{self as r, bytes};
#[allow(unused_imports)]
use crate::types::LongDouble;

/// The by-value routines of a row: present for `val` rows only.
macro_rules! by_value {
    (val $n:ident $t:ty) => {
        abi! {
            const BY_VALUE;
            twin _p [$n _p] (dest: *mut $t, value: $t, pe: c_int)
                => |ctx, call| r::p(ctx, dest, value, pe, call);
            twin _g [$n _g] (source: *const $t, pe: c_int) -> $t
                => |ctx, call| r::g(ctx, source, pe, call);
        }
    };
    (ptr $n:ident $t:ty) => {
        /// `long double` is passed by value in the C shim.
        pub const BY_VALUE: &[&[&str]] = &[];
    };
}

macro_rules! rma_rows {
    ($($n:ident : $t:ty [$k:ident]),* $(,)?) => {
        $(
            pub mod $n {
                #[allow(unused_imports)]
                use super::*;
                abi! {
                    const OPS;
                    twin _put [$n _put]
                        (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int)
                        => |ctx, call| r::put(
                            ctx, dest.cast(), source.cast(),
                            bytes(nelems, size_of::<$t>(), call), pe, call);
                    twin _get [$n _get]
                        (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int)
                        => |ctx, call| r::get(
                            ctx, dest.cast(), source.cast(),
                            bytes(nelems, size_of::<$t>(), call), pe, call);
                    twin _iput [$n _iput]
                        (dest: *mut $t, source: *const $t, dst: isize, sst: isize,
                         nelems: usize, pe: c_int)
                        => |ctx, call| r::iput(
                            ctx, dest.cast(), source.cast(), dst, sst, size_of::<$t>(),
                            nelems, pe, call);
                    twin _iget [$n _iget]
                        (dest: *mut $t, source: *const $t, dst: isize, sst: isize,
                         nelems: usize, pe: c_int)
                        => |ctx, call| r::iget(
                            ctx, dest.cast(), source.cast(), dst, sst, size_of::<$t>(),
                            nelems, pe, call);
                    twin _put_nbi [$n _put_nbi]
                        (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int)
                        => |ctx, call| r::put_nbi(
                            ctx, dest.cast(), source.cast(),
                            bytes(nelems, size_of::<$t>(), call), pe, call);
                    twin _get_nbi [$n _get_nbi]
                        (dest: *mut $t, source: *const $t, nelems: usize, pe: c_int)
                        => |ctx, call| r::get_nbi(
                            ctx, dest.cast(), source.cast(),
                            bytes(nelems, size_of::<$t>(), call), pe, call);
                    twin _put_signal [$n _put_signal]
                        (dest: *mut $t, source: *const $t, nelems: usize, sig_addr: *mut u64,
                         signal: u64, sig_op: c_int, pe: c_int)
                        => |ctx, call| r::put_signal(
                            ctx, dest.cast(), source.cast(),
                            bytes(nelems, size_of::<$t>(), call), sig_addr, signal, sig_op,
                            pe, false, call);
                    twin _put_signal_nbi [$n _put_signal_nbi]
                        (dest: *mut $t, source: *const $t, nelems: usize, sig_addr: *mut u64,
                         signal: u64, sig_op: c_int, pe: c_int)
                        => |ctx, call| r::put_signal(
                            ctx, dest.cast(), source.cast(),
                            bytes(nelems, size_of::<$t>(), call), sig_addr, signal, sig_op,
                            pe, true, call);
                }
                by_value!($k $n $t);

                /// The names of this row.
                pub fn names(out: &mut Vec<&'static str>) {
                    super::super::extend(out, &[OPS, BY_VALUE]);
                }
            }
        )*

        /// The names of every typed row.
        fn typed_names(out: &mut Vec<&'static str>) {
            $( $n::names(out); )*
        }
    };
}

rma_types!(rma_rows);

macro_rules! sized_rows {
    ($($m:ident : $bits:literal => $bytes:literal),* $(,)?) => {
        $(
            pub mod $m {
                #[allow(unused_imports)]
                use super::*;
                abi! {
                    const OPS;
                    twin put [put $bits]
                        (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
                        => |ctx, call| r::put(
                            ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                            pe, call);
                    twin get [get $bits]
                        (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
                        => |ctx, call| r::get(
                            ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                            pe, call);
                    twin iput [iput $bits]
                        (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize,
                         nelems: usize, pe: c_int)
                        => |ctx, call| r::iput(
                            ctx, dest.cast(), source.cast(), dst, sst, $bytes, nelems, pe,
                            call);
                    twin iget [iget $bits]
                        (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize,
                         nelems: usize, pe: c_int)
                        => |ctx, call| r::iget(
                            ctx, dest.cast(), source.cast(), dst, sst, $bytes, nelems, pe,
                            call);
                    twin put_nbi [put $bits _nbi]
                        (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
                        => |ctx, call| r::put_nbi(
                            ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                            pe, call);
                    twin get_nbi [get $bits _nbi]
                        (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
                        => |ctx, call| r::get_nbi(
                            ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                            pe, call);
                    twin put_signal [put $bits _signal]
                        (dest: *mut c_void, source: *const c_void, nelems: usize,
                         sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int)
                        => |ctx, call| r::put_signal(
                            ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                            sig_addr, signal, sig_op, pe, false, call);
                    twin put_signal_nbi [put $bits _signal_nbi]
                        (dest: *mut c_void, source: *const c_void, nelems: usize,
                         sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int)
                        => |ctx, call| r::put_signal(
                            ctx, dest.cast(), source.cast(), bytes(nelems, $bytes, call),
                            sig_addr, signal, sig_op, pe, true, call);
                }
            }
        )*

        /// The names of every sized row.
        fn sized_names(out: &mut Vec<&'static str>) {
            super::extend(out, &[$($m::OPS),*]);
        }
    };
}

sized_types!(sized_rows);

/// The `mem` forms: byte counts.
pub mod mem {
    #[allow(unused_imports)]
    use super::*;
    abi! {
        const OPS;
        twin putmem [putmem]
            (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
            => |ctx, call| r::put(ctx, dest.cast(), source.cast(), nelems, pe, call);
        twin getmem [getmem]
            (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
            => |ctx, call| r::get(ctx, dest.cast(), source.cast(), nelems, pe, call);
        twin putmem_nbi [putmem_nbi]
            (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
            => |ctx, call| r::put_nbi(ctx, dest.cast(), source.cast(), nelems, pe, call);
        twin getmem_nbi [getmem_nbi]
            (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int)
            => |ctx, call| r::get_nbi(ctx, dest.cast(), source.cast(), nelems, pe, call);
        twin putmem_signal [putmem_signal]
            (dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64,
             signal: u64, sig_op: c_int, pe: c_int)
            => |ctx, call| r::put_signal(
                ctx, dest.cast(), source.cast(), nelems, sig_addr, signal, sig_op, pe, false,
                call);
        twin putmem_signal_nbi [putmem_signal_nbi]
            (dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64,
             signal: u64, sig_op: c_int, pe: c_int)
            => |ctx, call| r::put_signal(
                ctx, dest.cast(), source.cast(), nelems, sig_addr, signal, sig_op, pe, true,
                call);
    }
}

/// The names of this module.
pub fn names(out: &mut Vec<&'static str>) {
    typed_names(out);
    sized_names(out);
    super::extend(out, &[mem::OPS]);
}
