//! C ABI of the routines that are not per type: setup and queries (§9.1), thread support
//! (§9.2), memory management (§9.3), team queries (§9.4), contexts and their sessions
//! (§9.5), signal fetch, add, set and wait (§9.8, §9.10), the deprecated `long` waits,
//! ordering with the per-PE quiet (§9.11, §9.12), locks and the legacy names. Of OpenSHMEM
//! 1.6: `shmem_query_initialized`, `shmem_team_ptr`, `shmem_[ctx_]signal_add`,
//! `shmem_[ctx_]signal_set`, `shmem_[ctx_]pe_quiet`, `shmem_ctx_session_start`/`_stop`.

use std::ffi::{c_char, c_int, c_long, c_void};

use crate::ctx_table::{self as ctx, CtxRef, RawCtx, SessionConfig};
use crate::fatal::{end_job, fatal, flush_stdio};
use crate::memory;
use crate::p2p_wait::{self as p2p, Cmp};
use crate::rma::{self as r, SIGNAL_ADD, SIGNAL_SET};
use crate::state::{self, InitOptions, THREAD_MULTIPLE};
use crate::team::{self, RawTeam};
use crate::ticket_lock;
use crate::types::ScalarKind;

/// `shmem_team_config_t`.
#[repr(C)]
#[derive(Debug)]
pub struct TeamConfig {
    /// `num_contexts`.
    pub num_contexts: c_int,
}

/// `SHMEM_TEAM_NUM_CONTEXTS`.
pub(super) const TEAM_NUM_CONTEXTS: c_long = 1 << 0;

/// `shmem_init`: the C library remaps the data segment so that globals are symmetric. An
/// invalid environment variable (a usage error) ends the process with the reason and exit
/// status 2 (as `oshrun`, which checks the variables before it starts PEs, does); a failed
/// bootstrap ends the job with the reason.
fn init(call: &str) {
    match crate::lifecycle::init(InitOptions {
        remap_data: true,
        thread_level: THREAD_MULTIPLE,
    }) {
        Ok(_) => {}
        Err(e @ state::InitError::Env(_)) => {
            flush_stdio();
            gsas_transport::eprintln_whole!("gsas-shmem: {call}: {e}");
            std::process::exit(2);
        }
        Err(e) => fatal(call, e),
    }
}

/// `shmem_init_thread`: 0 on success, nonzero (with the reason on standard error) on
/// failure.
///
/// # Safety
///
/// `provided` writable or NULL.
unsafe fn init_thread(requested: c_int, provided: *mut c_int, call: &str) -> c_int {
    let level = requested.clamp(0, THREAD_MULTIPLE);
    if requested < 0 {
        gsas_transport::eprintln_whole!(
            "gsas-shmem: {call}: thread level {requested} is not a SHMEM_THREAD_* level"
        );
        return 1;
    }
    match crate::lifecycle::init(InitOptions {
        remap_data: true,
        thread_level: level,
    }) {
        Ok(st) => {
            if !provided.is_null() {
                // SAFETY: non-null and writable by the caller's contract.
                unsafe { provided.write(st.thread_level()) };
            }
            0
        }
        Err(e) => {
            flush_stdio();
            gsas_transport::eprintln_whole!("gsas-shmem: {call}: {e}");
            1
        }
    }
}

/// `shmem_global_exit`: flushes stdio and ends every PE with `status`.
fn global_exit(status: c_int, call: &str) -> std::convert::Infallible {
    let me = state::get().map_or(String::new(), |s| format!("PE {} ", s.me));
    end_job(status, &format!("{me}called {call}({status})"))
}

/// `shmem_ptr`: a local pointer to `dest` on `pe`, or NULL.
fn ptr(dest: *const c_void, pe: c_int, call: &str) -> *mut c_void {
    let st = state::live(call);
    u32::try_from(pe)
        .ok()
        .and_then(|pe| st.local_ptr(dest as usize, pe))
        .map_or(std::ptr::null_mut(), |p| p.as_ptr().cast())
}

/// `shmem_team_ptr` (OpenSHMEM 1.6): [`ptr`] with `pe` numbered in `team`; NULL for
/// `SHMEM_TEAM_INVALID` or a PE number outside the team.
///
/// # Safety
///
/// `team` a team handle from the library.
unsafe fn team_ptr(team: RawTeam, dest: *const c_void, pe: c_int, call: &str) -> *mut c_void {
    let st = state::live(call);
    // SAFETY: forwarded.
    let Some(t) = (unsafe { team::resolve(team, call) }) else {
        return std::ptr::null_mut();
    };
    u32::try_from(pe)
        .ok()
        .and_then(|pe| t.world_pe(pe))
        .and_then(|world| st.local_ptr(dest as usize, world))
        .map_or(std::ptr::null_mut(), |p| p.as_ptr().cast())
}

/// `shmem_addr_accessible`.
fn addr_accessible(addr: *const c_void, pe: c_int, call: &str) -> c_int {
    let st = state::live(call);
    let pe_ok = u32::try_from(pe).is_ok_and(|p| p < st.npes);
    c_int::from(pe_ok && st.segs.translate(addr as usize, 1).is_some())
}

/// `shmem_info_get_name`.
///
/// # Safety
///
/// `name` writable for `SHMEM_MAX_NAME_LEN` bytes, or NULL.
unsafe fn info_get_name(name: *mut c_char) {
    if name.is_null() {
        return;
    }
    let v = crate::VENDOR_STRING.as_bytes();
    // SAFETY: the caller provides SHMEM_MAX_NAME_LEN (256) bytes; the vendor string and its
    // terminator are far shorter.
    unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr().cast::<c_char>(), name, v.len());
        name.add(v.len()).write(0);
    }
}

/// `shmem_team_translate_pe`.
///
/// # Safety
///
/// Team handles from the library.
unsafe fn translate_pe(src: RawTeam, src_pe: c_int, dest: RawTeam, call: &str) -> c_int {
    // SAFETY: forwarded.
    let (s, d) = unsafe { (team::resolve(src, call), team::resolve(dest, call)) };
    match (s, d, u32::try_from(src_pe)) {
        (Some(s), Some(d), Ok(pe)) => s.translate(pe, d).map_or(-1, |p| p as c_int),
        _ => -1,
    }
}

/// `shmem_team_get_config`.
///
/// # Safety
///
/// `team` a team handle; `config` writable or NULL.
unsafe fn team_get_config(
    team: RawTeam,
    mask: c_long,
    config: *mut TeamConfig,
    call: &str,
) -> c_int {
    // SAFETY: forwarded.
    let Some(t) = (unsafe { team::resolve(team, call) }) else {
        return 1;
    };
    if mask & TEAM_NUM_CONTEXTS != 0 {
        if config.is_null() {
            return 1;
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { (*config).num_contexts = t.num_contexts() };
    }
    0
}

abi! {
    const SETUP;
    plain [init] () => |call| init(call);
    plain [finalize] () => |call| crate::lifecycle::finalize(call);
    plain [my_pe] () -> c_int => |call| state::live(call).me as c_int;
    plain [n_pes] () -> c_int => |call| state::live(call).npes as c_int;
    noreturn [global_exit] (status: c_int) => |call| global_exit(status, call);
    plain [pe_accessible] (pe: c_int) -> c_int
        => |call| c_int::from(u32::try_from(pe).is_ok_and(|p| p < state::live(call).npes));
    plain [addr_accessible] (addr: *const c_void, pe: c_int) -> c_int
        => |call| addr_accessible(addr, pe, call);
    plain [ptr] (dest: *const c_void, pe: c_int) -> *mut c_void => |call| ptr(dest, pe, call);
    plain [info_get_version] (major: *mut c_int, minor: *mut c_int)
        => |call| {
            let _ = call;
            if !major.is_null() {
                major.write(crate::MAJOR_VERSION);
            }
            if !minor.is_null() {
                minor.write(crate::MINOR_VERSION);
            }
        };
    plain [info_get_name] (name: *mut c_char) => |call| {
        let _ = call;
        info_get_name(name)
    };
    plain [init_thread] (requested: c_int, provided: *mut c_int) -> c_int
        => |call| init_thread(requested, provided, call);
    plain [query_thread] (provided: *mut c_int) => |call| {
        let st = state::live(call);
        if !provided.is_null() {
            provided.write(st.thread_level());
        }
    };
    plain [query_initialized] (initialized: *mut c_int) => |call| {
        // Any time, in any state (1.6 §9.1.5): nothing here needs the library running.
        let _ = call;
        if !initialized.is_null() {
            initialized.write(c_int::from(state::is_running()));
        }
    };
}

abi! {
    const MEMORY;
    plain [malloc] (size: usize) -> *mut c_void => |call| memory::malloc(size, call);
    plain [free] (ptr: *mut c_void) => |call| memory::free(ptr, call);
    plain [realloc] (ptr: *mut c_void, size: usize) -> *mut c_void
        => |call| memory::realloc(ptr, size, call);
    plain [align] (alignment: usize, size: usize) -> *mut c_void
        => |call| memory::align(alignment, size, call);
    plain [malloc_with_hints] (size: usize, hints: c_long) -> *mut c_void
        => |call| memory::malloc_with_hints(size, hints, call);
    plain [calloc] (count: usize, size: usize) -> *mut c_void
        => |call| memory::calloc(count, size, call);
}

abi! {
    const TEAMS_AND_CONTEXTS;
    plain [team_my_pe] (team: RawTeam) -> c_int
        => |call| team::resolve(team, call)
            .and_then(|t| t.my_pe())
            .map_or(-1, |p| p as c_int);
    plain [team_n_pes] (team: RawTeam) -> c_int
        => |call| team::resolve(team, call).map_or(-1, |t| t.n_pes() as c_int);
    plain [team_translate_pe]
        (src_team: RawTeam, src_pe: c_int, dest_team: RawTeam) -> c_int
        => |call| translate_pe(src_team, src_pe, dest_team, call);
    plain [team_get_config]
        (team: RawTeam, config_mask: c_long, config: *mut TeamConfig) -> c_int
        => |call| team_get_config(team, config_mask, config, call);
    plain [team_ptr] (team: RawTeam, dest: *const c_void, pe: c_int) -> *mut c_void
        => |call| team_ptr(team, dest, pe, call);
    plain [ctx_create] (options: c_long, ctx: *mut RawCtx) -> c_int
        => |call| ctx::create(team::world_handle(), options, ctx, call);
    plain [team_create_ctx] (team: RawTeam, options: c_long, ctx: *mut RawCtx)
        -> c_int
        => |call| ctx::create(team, options, ctx, call);
    plain [ctx_destroy] (ctx: RawCtx) => |call| ctx::destroy(CtxRef(ctx), call);
    plain [ctx_get_team] (ctx: RawCtx, team: *mut RawTeam) -> c_int
        => |call| ctx::get_team(CtxRef(ctx), team, call);
    plain [ctx_session_start]
        (ctx: RawCtx, options: c_long, config: *const SessionConfig, config_mask: c_long)
        => |call| ctx::session_start(CtxRef(ctx), options, config, config_mask, call);
    plain [ctx_session_stop] (ctx: RawCtx) => |call| ctx::session_stop(CtxRef(ctx), call);
}

abi! {
    const SYNC;
    plain [signal_fetch] (sig_addr: *const u64) -> u64
        => |call| p2p::signal_fetch(sig_addr, call);
    twin [signal_add] (sig_addr: *mut u64, signal: u64, pe: c_int)
        => |ctx, call| r::put_signal(
            ctx, std::ptr::null_mut(), std::ptr::null(), 0, sig_addr, signal, SIGNAL_ADD, pe,
            false, call);
    twin [signal_set] (sig_addr: *mut u64, signal: u64, pe: c_int)
        => |ctx, call| r::put_signal(
            ctx, std::ptr::null_mut(), std::ptr::null(), 0, sig_addr, signal, SIGNAL_SET, pe,
            false, call);
    plain [signal_wait_until] (sig_addr: *mut u64, cmp: c_int, cmp_value: u64)
        -> u64
        => |call| p2p::signal_wait_until(sig_addr, Cmp::from_c(cmp, call), cmp_value, call);
    plain [wait_until] (ivar: *mut c_long, cmp: c_int, cmp_value: c_long)
        => |call| {
            p2p::wait_until(
                ivar.cast_const().cast(),
                ScalarKind::I64,
                Cmp::from_c(cmp, call),
                i128::from(cmp_value),
                call,
            );
        };
    plain [wait] (ivar: *mut c_long, cmp_value: c_long) => |call| {
        p2p::wait_until(
            ivar.cast_const().cast(),
            ScalarKind::I64,
            Cmp::Ne,
            i128::from(cmp_value),
            call,
        );
    };
    twin [fence] () => |ctx, call| ctx::fence(ctx, call);
    twin [quiet] () => |ctx, call| ctx::quiet(ctx, call);
    twin [pe_quiet] (target_pes: *const c_int, npes: usize)
        => |ctx, call| ctx::pe_quiet(ctx, target_pes, npes, call);
    plain [set_lock] (lock: *mut c_long) => |call| {
        ticket_lock::set_lock(lock, call);
    };
    plain [clear_lock] (lock: *mut c_long) => |call| ticket_lock::clear_lock(lock, call);
    plain [test_lock] (lock: *mut c_long) -> c_int
        => |call| ticket_lock::test_lock(lock, call);
}

abi! {
    const LEGACY;
    legacy [start_pes] (npes: c_int) => |call| {
        let _ = npes;
        if !state::is_running() {
            init(call);
        }
    };
    legacy [_my_pe] () -> c_int => |call| state::live(call).me as c_int;
    legacy [_num_pes] () -> c_int => |call| state::live(call).npes as c_int;
    legacy [shmalloc] (size: usize) -> *mut c_void => |call| memory::malloc(size, call);
    legacy [shfree] (ptr: *mut c_void) => |call| memory::free(ptr, call);
    legacy [shrealloc] (ptr: *mut c_void, size: usize) -> *mut c_void
        => |call| memory::realloc(ptr, size, call);
    legacy [shmemalign] (alignment: usize, size: usize) -> *mut c_void
        => |call| memory::align(alignment, size, call);
}

// The cache management routines (deprecated in OpenSHMEM 1.3, removed in 1.5), kept so that
// older programs link: no-ops, since there is nothing to invalidate or flush (PEs of a node
// share cache-coherent memory, and data from other nodes is written by the node's service
// with ordinary stores). shmem.h declares them deprecated, so calls compile with a warning.
abi! {
    const CACHE;
    plain [clear_cache_inv] () => |call| {
        let _ = call;
    };
    plain [set_cache_inv] () => |call| {
        let _ = call;
    };
    plain [clear_cache_line_inv] (dest: *mut c_void) => |call| {
        let _ = (dest, call);
    };
    plain [set_cache_line_inv] (dest: *mut c_void) => |call| {
        let _ = (dest, call);
    };
    plain [udcflush] () => |call| {
        let _ = call;
    };
    plain [udcflush_line] (dest: *mut c_void) => |call| {
        let _ = (dest, call);
    };
}

/// The names of this module.
pub fn names(out: &mut Vec<&'static str>) {
    super::extend(
        out,
        &[SETUP, MEMORY, TEAMS_AND_CONTEXTS, SYNC, LEGACY, CACHE],
    );
}
