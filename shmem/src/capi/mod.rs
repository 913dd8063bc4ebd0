//! The C ABI: every `shmem_*` routine of OpenSHMEM 1.5 (all categories of the symbol list)
//! and its `pshmem_*` profiling twin, generated from type tables.
//!
//! **What it is.** One type table per operation class, transcribed from the
//! specification's tables (checklist §1.1) and matching the X-macro tables of
//! `include/shmem.h`:
//!
//! | table | rows | routines |
//! |---|---|---|
//! | `rma_types!` | 24 standard RMA types | put, p, iput, get, g, iget, ibput, ibget (1.6), put_nbi, get_nbi, put_signal\[_nbi\] |
//! | `sized_types!` | 8, 16, 32, 64, 128 bits | put, iput, get, iget, ibput, ibget (1.6), put_nbi, get_nbi, put_signal\[_nbi\] with `{SIZE}` |
//! | `amo_ext_types!` / `amo_std_types!` / `amo_bit_types!` | 14 / 12 / 7 | the AMOs and their `_nbi` forms |
//! | `amo_depr_ext_types!` / `amo_depr_std_types!` | 5 / 3 | the pre-1.4 AMO names |
//! | `p2p_types!` / `p2p_depr_types!` / `wait_depr_types!` | 12 / 2 / 4 | wait_until, test and the multi forms; deprecated ones |
//! | `rma_types!` again | 24 | broadcast, collect, fcollect, alltoall, alltoalls (teams) |
//! | `to_all_sizes!` | 32, 64 bits | the active-set broadcast, collect, fcollect, alltoall(s) |
//! | `reduce_bit_types!` / `reduce_minmax_types!` / `reduce_arith_types!` | 14 / 24 / 26 | team reductions AND/OR/XOR, MAX/MIN, SUM/PROD |
//! | `to_all_bit_types!` / `to_all_minmax_types!` / `to_all_arith_types!` | 4 / 7 / 9 | the active-set `_to_all` reductions |
//!
//! A table is a `macro_rules!` that calls back a row macro with all its rows; the row
//! macro emits, per row, one-line `extern "C"` functions through `abi!`. An
//! `abi!` entry names the routine by the pieces of its C name and gives the body, a call of
//! a byte-level internal (`rma::put`, `amo::typed`, `p2p::wait_until`, ...) with a context
//! handle and the routine's name. The entry kind decides what is exported:
//!
//! * `twin`: `shmem_X`, `pshmem_X` (default context) and `shmem_ctx_X`, `pshmem_ctx_X`
//!   (leading `shmem_ctx_t`);
//! * `plain`: `shmem_X` and `pshmem_X`;
//! * `noreturn`: the same, for `shmem_global_exit`;
//! * `legacy`: `X` and `pX` (`start_pes`/`pstart_pes`, `shmalloc`/`pshmalloc`, ...).
//!
//! Each pair is one function: the body is exported under the profiling name, the standard
//! name is a weak alias of it (`abi_fn!`, `weak_alias!`).
//!
//! The export names are built with `concat!` in `#[export_name]`, so no identifier pasting
//! is needed; the same expansion records every exported name in a `NAMES` constant, which
//! [`abi_names`] collects and a test compares with the specification's symbol list. Every
//! body runs inside `fatal::boundary`, which turns a panic into the fatal-error path naming
//! the routine. The `long double` by-value routines and the variadic `shmem_pcontrol` are in
//! the C shim (`csrc/shim.c`, listed in [`SHIM_NAMES`]); [`shim`] exports the byte-level
//! RMA they call.
//!
//! The collectives (`coll.rs`, `reduce.rs`) call `crate::coll` (`coll::broadcast(on, dest,
//! src, nbytes, root)`, `coll::reduce(on, op, dtype, dest, src, n)`, ...) with `On::Team` or
//! an `On::Set` active set; the team splits and `shmem_team_destroy` (`teams.rs`) call
//! `crate::team::split`.
//!
//! **What it is not.** No logic: every routine is a one-line call of an internal.
//!
//! **Thread-safety.** As the internals: every routine may be called from any thread under
//! `SHMEM_THREAD_MULTIPLE`.

// The exported functions are reached through their export names only.
#![allow(clippy::too_many_arguments, clippy::missing_safety_doc, unused_unsafe)]

/// Exports the routines of one list and gives their names.
///
/// `abi! { const NAMES; entries }` is an item: `const NAMES: &[&[&str]]`, whose initializer
/// holds the exported functions. `abi! { names; entries }` is the same as an expression (a
/// block with the functions and then their names), for the rows of a type table, which
/// gather their lists into one constant. Either way no module is made: the bodies see the
/// items of the module the table is expanded in, and nothing is glob-imported.
macro_rules! abi {
    ($(#[doc = $doc:literal])* const $names:ident; $($entries:tt)*) => {
        /// The exported names of this list.
        $(#[doc = $doc])*
        pub const $names: &[&[&str]] = abi!(names; $($entries)*);
    };
    (names; $(
        $kind:ident [$($piece:tt)+] ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?
            => |$($cl:ident),+| $body:expr;
    )*) => {{
        $( abi_fn!($kind [$($piece)+] ($($arg : $ty),*) ($($ret)?) ($($cl),+) $body); )*
        &[ $( abi_names!($kind [$($piece)+]) ),* ]
    }};
}

/// The names one `abi!` entry exports.
macro_rules! abi_names {
    (twin [$($p:tt)+]) => {
        &[
            concat!("shmem_", $(stringify!($p)),+),
            concat!("pshmem_", $(stringify!($p)),+),
            concat!("shmem_ctx_", $(stringify!($p)),+),
            concat!("pshmem_ctx_", $(stringify!($p)),+),
        ]
    };
    (plain [$($p:tt)+]) => {
        &[concat!("shmem_", $(stringify!($p)),+), concat!("pshmem_", $(stringify!($p)),+)]
    };
    (noreturn [$($p:tt)+]) => {
        &[concat!("shmem_", $(stringify!($p)),+), concat!("pshmem_", $(stringify!($p)),+)]
    };
    (legacy [$($p:tt)+]) => {
        &[concat!($(stringify!($p)),+), concat!("p", $(stringify!($p)),+)]
    };
}

/// Exports `$alias` as a weak alias of the function exported as `$target` (same address,
/// same code). A statement inside that function: assembler directives only (`.weak`,
/// `.set`; no instruction), so the alias is always emitted in the object file that defines
/// the function, as `.set` needs. `.weak`, so that a definition of the same name elsewhere
/// (a profiling tool's `shmem_X`, statically linked) takes precedence.
macro_rules! weak_alias {
    ($alias:expr, $target:expr) => {
        // SAFETY: directives only: no instruction is emitted, no register or memory touched.
        unsafe {
            ::core::arch::asm!(
                concat!(".weak ", $alias, "\n.set ", $alias, ", ", $target),
                options(nomem, nostack, preserves_flags)
            )
        }
    };
}

/// The functions of one `abi!` entry, in an anonymous `const` block of their own (their
/// Rust names, `pshmem`, `pshmem_ctx`, ..., are local to it; the export names are what
/// count). Each routine has one body, exported under its profiling name (`pshmem_X`,
/// `pX`), and its standard name is a weak alias of it ([`weak_alias`]): the profiling
/// interface (a tool defines `shmem_X` and calls `pshmem_X`) works in both the shared
/// and the static library, and the library's text holds each routine once. Messages name
/// the standard name.
macro_rules! abi_fn {
    (twin [$($p:tt)+] ($($arg:ident : $ty:ty),*) ($($ret:ty)?) ($c:ident, $call:ident)
        $body:expr) => {
        const _: () = {
            #[unsafe(export_name = concat!("pshmem_", $(stringify!($p)),+))]
            unsafe extern "C" fn pshmem($($arg: $ty),*) $(-> $ret)? {
                weak_alias!(concat!("shmem_", $(stringify!($p)),+), concat!("pshmem_", $(stringify!($p)),+));
                let $c = $crate::ctx_table::CtxRef::DEFAULT;
                let $call: &'static str = concat!("shmem_", $(stringify!($p)),+);
                // SAFETY: the C caller upholds the routine's contract (valid, symmetric
                // pointers and sizes within them, a live context), which is all the body needs.
                $crate::fatal::boundary($call, move || unsafe { $body })
            }
            #[unsafe(export_name = concat!("pshmem_ctx_", $(stringify!($p)),+))]
            unsafe extern "C" fn pshmem_ctx(
                ctx_handle: $crate::ctx_table::RawCtx $(, $arg: $ty)*
            ) $(-> $ret)? {
                weak_alias!(
                    concat!("shmem_ctx_", $(stringify!($p)),+),
                    concat!("pshmem_ctx_", $(stringify!($p)),+)
                );
                let $c = $crate::ctx_table::CtxRef(ctx_handle);
                let $call: &'static str = concat!("shmem_ctx_", $(stringify!($p)),+);
                // SAFETY: the C caller upholds the routine's contract (valid, symmetric
                // pointers and sizes within them, a live context), which is all the body needs.
                $crate::fatal::boundary($call, move || unsafe { $body })
            }
        };
    };
    (plain [$($p:tt)+] ($($arg:ident : $ty:ty),*) ($($ret:ty)?) ($call:ident)
        $body:expr) => {
        const _: () = {
            #[unsafe(export_name = concat!("pshmem_", $(stringify!($p)),+))]
            unsafe extern "C" fn pshmem($($arg: $ty),*) $(-> $ret)? {
                weak_alias!(concat!("shmem_", $(stringify!($p)),+), concat!("pshmem_", $(stringify!($p)),+));
                let $call: &'static str = concat!("shmem_", $(stringify!($p)),+);
                // SAFETY: the C caller upholds the routine's contract (valid, symmetric
                // pointers and sizes within them, a live context), which is all the body needs.
                $crate::fatal::boundary($call, move || unsafe { $body })
            }
        };
    };
    (noreturn [$($p:tt)+] ($($arg:ident : $ty:ty),*) () ($call:ident) $body:expr) => {
        const _: () = {
            #[unsafe(export_name = concat!("pshmem_", $(stringify!($p)),+))]
            unsafe extern "C" fn pshmem($($arg: $ty),*) -> ! {
                weak_alias!(concat!("shmem_", $(stringify!($p)),+), concat!("pshmem_", $(stringify!($p)),+));
                let $call: &'static str = concat!("shmem_", $(stringify!($p)),+);
                // SAFETY: the C caller upholds the routine's contract, which is all the body
                // needs.
                $crate::fatal::boundary_noreturn($call, move || unsafe { $body })
            }
        };
    };
    (legacy [$($p:tt)+] ($($arg:ident : $ty:ty),*) ($($ret:ty)?) ($call:ident)
        $body:expr) => {
        const _: () = {
            #[unsafe(export_name = concat!("p", $(stringify!($p)),+))]
            unsafe extern "C" fn profiling($($arg: $ty),*) $(-> $ret)? {
                weak_alias!(concat!($(stringify!($p)),+), concat!("p", $(stringify!($p)),+));
                let $call: &'static str = concat!($(stringify!($p)),+);
                // SAFETY: the C caller upholds the routine's contract (valid, symmetric
                // pointers and sizes within them, a live context), which is all the body needs.
                $crate::fatal::boundary($call, move || unsafe { $body })
            }
        };
    };
}

/// Standard RMA types (OpenSHMEM 1.5 Table 9): `TYPENAME: Rust type [val|ptr]`. `ptr`
/// rows (`long double`) have no by-value routines here: `p` and `g` are in the C shim.
macro_rules! rma_types {
    ($cb:ident) => {
        $cb! {
            float: f32 [val],
            double: f64 [val],
            longdouble: LongDouble [ptr],
            char: c_char [val],
            schar: c_schar [val],
            short: c_short [val],
            int: c_int [val],
            long: c_long [val],
            longlong: c_longlong [val],
            uchar: c_uchar [val],
            ushort: c_ushort [val],
            uint: c_uint [val],
            ulong: c_ulong [val],
            ulonglong: c_ulonglong [val],
            int8: i8 [val],
            int16: i16 [val],
            int32: i32 [val],
            int64: i64 [val],
            uint8: u8 [val],
            uint16: u16 [val],
            uint32: u32 [val],
            uint64: u64 [val],
            size: usize [val],
            ptrdiff: isize [val],
        }
    };
}

/// Block sizes of the sized RMA routines: `name: bits => bytes` (the name labels the row).
macro_rules! sized_types {
    ($cb:ident) => {
        $cb! {
            s8: 8 => 1,
            s16: 16 => 2,
            s32: 32 => 4,
            s64: 64 => 8,
            s128: 128 => 16,
        }
    };
}

/// Standard AMO types (Table 10), also the 1.5 point-to-point types.
macro_rules! amo_std_types {
    ($cb:ident) => {
        $cb! {
            int: c_int,
            long: c_long,
            longlong: c_longlong,
            uint: c_uint,
            ulong: c_ulong,
            ulonglong: c_ulonglong,
            int32: i32,
            int64: i64,
            uint32: u32,
            uint64: u64,
            size: usize,
            ptrdiff: isize,
        }
    };
}

/// Extended AMO types (Table 11): the standard ones plus float and double.
macro_rules! amo_ext_types {
    ($cb:ident) => {
        $cb! {
            float: f32,
            double: f64,
            int: c_int,
            long: c_long,
            longlong: c_longlong,
            uint: c_uint,
            ulong: c_ulong,
            ulonglong: c_ulonglong,
            int32: i32,
            int64: i64,
            uint32: u32,
            uint64: u64,
            size: usize,
            ptrdiff: isize,
        }
    };
}

/// Bitwise AMO types (Table 12).
macro_rules! amo_bit_types {
    ($cb:ident) => {
        $cb! {
            uint: c_uint,
            ulong: c_ulong,
            ulonglong: c_ulonglong,
            int32: i32,
            int64: i64,
            uint32: u32,
            uint64: u64,
        }
    };
}

/// The types of the deprecated fetch, set and swap names.
macro_rules! amo_depr_ext_types {
    ($cb:ident) => {
        $cb! {
            float: f32,
            double: f64,
            int: c_int,
            long: c_long,
            longlong: c_longlong,
        }
    };
}

/// The types of the deprecated cswap, finc, inc, fadd and add names.
macro_rules! amo_depr_std_types {
    ($cb:ident) => {
        $cb! {
            int: c_int,
            long: c_long,
            longlong: c_longlong,
        }
    };
}

/// Point-to-point types (1.5): the standard AMO types.
macro_rules! p2p_types {
    ($cb:ident) => {
        amo_std_types!($cb);
    };
}

/// The 1.4 point-to-point types 1.5 deprecated (wait_until and test only).
macro_rules! p2p_depr_types {
    ($cb:ident) => {
        $cb! {
            short: c_short,
            ushort: c_ushort,
        }
    };
}

/// The types of the deprecated `shmem_TYPENAME_wait`.
macro_rules! wait_depr_types {
    ($cb:ident) => {
        $cb! {
            short: c_short,
            int: c_int,
            long: c_long,
            longlong: c_longlong,
        }
    };
}

/// Team reductions AND, OR, XOR (OpenSHMEM 1.5 Table "Reduction Types", T-bit): 14 rows.
macro_rules! reduce_bit_types {
    ($cb:ident) => {
        $cb! {
            uchar: c_uchar,
            ushort: c_ushort,
            uint: c_uint,
            ulong: c_ulong,
            ulonglong: c_ulonglong,
            int8: i8,
            int16: i16,
            int32: i32,
            int64: i64,
            uint8: u8,
            uint16: u16,
            uint32: u32,
            uint64: u64,
            size: usize,
        }
    };
}

/// Team reductions MAX, MIN (T-mm): the 24 standard RMA types.
macro_rules! reduce_minmax_types {
    ($cb:ident) => {
        $cb! {
            char: c_char,
            schar: c_schar,
            short: c_short,
            int: c_int,
            long: c_long,
            longlong: c_longlong,
            ptrdiff: isize,
            uchar: c_uchar,
            ushort: c_ushort,
            uint: c_uint,
            ulong: c_ulong,
            ulonglong: c_ulonglong,
            int8: i8,
            int16: i16,
            int32: i32,
            int64: i64,
            uint8: u8,
            uint16: u16,
            uint32: u32,
            uint64: u64,
            size: usize,
            float: f32,
            double: f64,
            longdouble: LongDouble,
        }
    };
}

/// Team reductions SUM, PROD (T-sp): the MAX/MIN types and the two complex types.
macro_rules! reduce_arith_types {
    ($cb:ident) => {
        $cb! {
            char: c_char,
            schar: c_schar,
            short: c_short,
            int: c_int,
            long: c_long,
            longlong: c_longlong,
            ptrdiff: isize,
            uchar: c_uchar,
            ushort: c_ushort,
            uint: c_uint,
            ulong: c_ulong,
            ulonglong: c_ulonglong,
            int8: i8,
            int16: i16,
            int32: i32,
            int64: i64,
            uint8: u8,
            uint16: u16,
            uint32: u32,
            uint64: u64,
            size: usize,
            float: f32,
            double: f64,
            longdouble: LongDouble,
            complexd: Complex64,
            complexf: Complex32,
        }
    };
}

/// Active-set reductions AND, OR, XOR (A-bit): 4 rows.
macro_rules! to_all_bit_types {
    ($cb:ident) => {
        $cb! {
            short: c_short,
            int: c_int,
            long: c_long,
            longlong: c_longlong,
        }
    };
}

/// Active-set reductions MAX, MIN (A-mm): 7 rows.
macro_rules! to_all_minmax_types {
    ($cb:ident) => {
        $cb! {
            short: c_short,
            int: c_int,
            long: c_long,
            longlong: c_longlong,
            float: f32,
            double: f64,
            longdouble: LongDouble,
        }
    };
}

/// Active-set reductions SUM, PROD (A-sp): 9 rows.
macro_rules! to_all_arith_types {
    ($cb:ident) => {
        $cb! {
            short: c_short,
            int: c_int,
            long: c_long,
            longlong: c_longlong,
            float: f32,
            double: f64,
            longdouble: LongDouble,
            complexd: Complex64,
            complexf: Complex32,
        }
    };
}

/// Block sizes of the active-set data-movement collectives: `name: bits => bytes` (the name labels the row).
macro_rules! to_all_sizes {
    ($cb:ident) => {
        $cb! {
            s32: 32 => 4,
            s64: 64 => 8,
        }
    };
}

mod amo;
mod coll;
mod p2p;
mod reduce;
mod rma;
mod setup;
pub(crate) mod shim;
mod teams;

/// Names exported by the C shim (`csrc/shim.c`).
pub const SHIM_NAMES: &[&str] = &[
    "shmem_longdouble_p",
    "shmem_ctx_longdouble_p",
    "shmem_longdouble_g",
    "shmem_ctx_longdouble_g",
    "shmem_pcontrol",
    "pshmem_longdouble_p",
    "pshmem_ctx_longdouble_p",
    "pshmem_longdouble_g",
    "pshmem_ctx_longdouble_g",
    "pshmem_pcontrol",
];

/// Every OpenSHMEM name this library exports from Rust (without [`SHIM_NAMES`]), in
/// generation order.
pub fn abi_names() -> Vec<&'static str> {
    let mut out = Vec::new();
    setup::names(&mut out);
    rma::names(&mut out);
    amo::names(&mut out);
    p2p::names(&mut out);
    teams::names(&mut out);
    coll::names(&mut out);
    reduce::names(&mut out);
    out
}

/// Appends the names of `lists` to `out`.
fn extend(out: &mut Vec<&'static str>, lists: &[&[&[&'static str]]]) {
    for list in lists {
        for group in *list {
            out.extend_from_slice(group);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The profiling twin of a name (`pshmem_X`, or `pX` for the legacy names).
    fn twin(name: &str) -> String {
        format!("p{name}")
    }

    /// The names of the symbol tables: OpenSHMEM 1.5's, and what gsas exports besides.
    fn expected() -> BTreeSet<String> {
        let mut set = BTreeSet::new();
        for table in [
            include_str!("../../../docs/spec/openshmem-1.5-c-symbols.tsv"),
            include_str!("../../../docs/spec/gsas-beyond-1.5-c-symbols.tsv"),
        ] {
            let mut header = true;
            for line in table.lines() {
                if std::mem::take(&mut header) {
                    assert!(line.starts_with("symbol\t"), "{line}");
                    continue;
                }
                let cols: Vec<&str> = line.split('\t').collect();
                assert!(cols.len() >= 3, "{line}");
                set.insert(cols[0].to_string());
                set.insert(twin(cols[0]));
            }
        }
        set
    }

    #[test]
    fn generated_names_equal_the_specification_list() {
        let generated = abi_names();
        let mut got: BTreeSet<String> = BTreeSet::new();
        for n in generated.iter().chain(SHIM_NAMES) {
            assert!(got.insert(n.to_string()), "{n} is exported twice");
        }
        let want = expected();
        let missing: Vec<_> = want.difference(&got).collect();
        let extra: Vec<_> = got.difference(&want).collect();
        assert!(missing.is_empty(), "not exported: {missing:?}");
        assert!(extra.is_empty(), "not in the specification list: {extra:?}");
        // Every routine of the 1.5 list and the 196 beyond it (178 of 1.6, 6 cache routines,
        // 12 short and unsigned short multi-variable waits and tests), each with its twin.
        assert_eq!(got.len(), 2 * (1610 + 196));
    }

    #[test]
    fn shim_names_are_the_shims_definitions() {
        let shim = include_str!("../../csrc/shim.c");
        // The shim defines each routine once, as pshmem_X through its macro, and makes
        // shmem_X a weak alias of it.
        assert!(shim.contains("GSAS_SHIM_LONGDOUBLE(pshmem_)"));
        for name in SHIM_NAMES {
            if let Some(rest) = name.strip_prefix("pshmem_") {
                assert!(
                    shim.contains(&format!("PREFIX##{rest}(")),
                    "csrc/shim.c does not define pshmem_{rest}"
                );
            } else {
                let rest = name.strip_prefix("shmem_").expect("shmem_ prefix");
                assert!(
                    shim.contains(&format!("#pragma weak shmem_{rest} = pshmem_{rest}")),
                    "csrc/shim.c does not alias shmem_{rest}"
                );
            }
        }
        let defined = shim.matches("PREFIX##").count();
        assert_eq!(
            defined * 2,
            SHIM_NAMES.len(),
            "every shim definition is listed"
        );
    }
}
