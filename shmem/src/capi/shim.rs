//! The byte-level RMA the C shim (`csrc/shim.c`) calls for the `long double` by-value
//! routines: `gsas_shmem_put_bytes` and `gsas_shmem_get_bytes`, exported with the
//! `gsas_shmem_` prefix (not OpenSHMEM names; the install's version script exports them
//! because the shim is part of the library).

use std::ffi::{CStr, c_char, c_int, c_void};

use crate::ctx_table::{CtxRef, RawCtx};
use crate::fatal::boundary;
use crate::rma;

/// The routine name passed by the shim (a string literal).
///
/// # Safety
///
/// `call` a NUL-terminated string or NULL.
unsafe fn name<'a>(call: *const c_char) -> &'a str {
    if call.is_null() {
        return "shmem_longdouble";
    }
    // SAFETY: the shim passes string literals.
    unsafe { CStr::from_ptr(call) }
        .to_str()
        .unwrap_or("shmem_longdouble")
}

/// Blocking put of `nbytes` for the shim.
///
/// # Safety
///
/// As `shmem_putmem`; `call` a string literal naming the routine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gsas_shmem_put_bytes(
    ctx: RawCtx,
    dest: *mut c_void,
    source: *const c_void,
    nbytes: usize,
    pe: c_int,
    call: *const c_char,
) {
    boundary("gsas_shmem_put_bytes", move || {
        // SAFETY: forwarded from the shim's contract.
        unsafe {
            rma::put(
                CtxRef(ctx),
                dest.cast(),
                source.cast(),
                nbytes,
                pe,
                name(call),
            )
        }
    })
}

/// Blocking get of `nbytes` for the shim.
///
/// # Safety
///
/// As `shmem_getmem`; `call` a string literal naming the routine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gsas_shmem_get_bytes(
    ctx: RawCtx,
    dest: *mut c_void,
    source: *const c_void,
    nbytes: usize,
    pe: c_int,
    call: *const c_char,
) {
    boundary("gsas_shmem_get_bytes", move || {
        // SAFETY: forwarded from the shim's contract.
        unsafe {
            rma::get(
                CtxRef(ctx),
                dest.cast(),
                source.cast(),
                nbytes,
                pe,
                name(call),
            )
        }
    })
}
