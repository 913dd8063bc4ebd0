//! Communication contexts (OpenSHMEM 1.5 §9.5 "Communication Management"): handles,
//! creation, destruction, `shmem_fence` and `shmem_quiet`.
//!
//! **What it is.** A context is a node-client context ([`gsas_node::Ctx`]: operations are
//! counted per context, so `quiet` and `fence` apply to one context) plus the team whose
//! numbering its RMA and AMO calls use, plus the creation options. `SHMEM_CTX_DEFAULT` is
//! the address of the exported object `gsas_shmem_ctx_default` and stands for the node's
//! default context on the world team with no options; created contexts are heap objects
//! whose handle is their address; `SHMEM_CTX_INVALID` is NULL. [`CtxRef`] is the handle as
//! the internals take it: for the routines without a context argument it is the constant
//! [`CtxRef::DEFAULT`], so their fast paths never look at it.
//!
//! Options (`SHMEM_CTX_PRIVATE`, `SERIALIZED`, `NOSTORE`) are accepted and recorded; they
//! permit optimisations the implementation does not need (every context is thread-safe),
//! so they change nothing. `shmem_ctx_create` is local, not collective; it fails (nonzero,
//! `SHMEM_CTX_INVALID`) when the node's 63 extra contexts are in use, and the library stays
//! usable. Destroying a context quiets it first.
//!
//! **Sessions** (OpenSHMEM 1.6 §9.9.2-9.9.3, `shmem_ctx_session_start`/`_stop`) are recorded per
//! context ([`Session`]). What gsas does with them: on a context in a session with
//! `SHMEM_CTX_SESSION_BATCH`, a blocking put to a PE of another node does not send its
//! frame before returning ([`gsas_node::Node::put_held`]); it waits in the open frame, as
//! non-blocking puts do, for the next operation that sends, the next progress call or the
//! progress keeper's tick, so that a loop of small blocking puts shares frames. (Writes
//! that bypass the frames go at once: Exanet's PIO messages, this node's service ring
//! with `GSAS_DIRECT=0`, verbs.)
//! `shmem_ctx_session_stop` sends what waits. Nothing else changes: completion and ordering
//! are as outside a session (a `quiet` completes the held puts). The `total_ops` hint is
//! recorded and not used. Same-node puts are stores and never wait.
//!
//! **What it is not.** A batch of AMOs or gets: only blocking puts are held.
//!
//! **Thread-safety.** Handles are plain pointers, usable from any thread; under
//! `SHMEM_THREAD_MULTIPLE` threads may share a context or, better, use one each.

use std::ffi::{c_int, c_long, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use gsas_node::Ctx as NodeCtx;

use crate::fatal::fatal;
use crate::state::{self, State};
use crate::team::{self, HandleObject, RawTeam, Team};

/// The C type `shmem_ctx_t`: an opaque pointer.
pub type RawCtx = *const c_void;

/// `SHMEM_CTX_DEFAULT` is `&gsas_shmem_ctx_default`.
#[allow(non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static gsas_shmem_ctx_default: HandleObject =
    HandleObject::new(u64::from_le_bytes(*b"gsasCTXD"));

/// `SHMEM_CTX_PRIVATE`.
pub const CTX_PRIVATE: c_long = 1 << 0;
/// `SHMEM_CTX_SERIALIZED`.
pub const CTX_SERIALIZED: c_long = 1 << 1;
/// `SHMEM_CTX_NOSTORE`.
pub const CTX_NOSTORE: c_long = 1 << 2;
const CTX_OPTIONS: c_long = CTX_PRIVATE | CTX_SERIALIZED | CTX_NOSTORE;

/// A context handle as the internals take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtxRef(pub RawCtx);

// SAFETY: a handle is an address that is only dereferenced through `resolve`, which reads
// immutable data of a live context; handles are meant to be passed between threads.
unsafe impl Send for CtxRef {}
// SAFETY: as above.
unsafe impl Sync for CtxRef {}

impl CtxRef {
    /// `SHMEM_CTX_DEFAULT`.
    pub const DEFAULT: CtxRef = CtxRef((&raw const gsas_shmem_ctx_default).cast());

    /// Whether this is the default context.
    #[inline(always)]
    pub fn is_default(self) -> bool {
        std::ptr::eq(self.0, Self::DEFAULT.0)
    }

    /// Whether this is `SHMEM_CTX_INVALID`.
    #[inline(always)]
    pub fn is_invalid(self) -> bool {
        self.0.is_null()
    }
}

const CTX_MAGIC: u64 = u64::from_le_bytes(*b"gsasCTX!");

/// A created context.
#[derive(Debug)]
pub struct CtxObj {
    magic: u64,
    node_ctx: NodeCtx,
    team: RawTeam,
    options: c_long,
    session: Session,
}

/// `SHMEM_CTX_SESSION_BATCH`: a session option.
pub const SESSION_BATCH: c_long = 1 << 0;
/// `SHMEM_CTX_SESSION_TOTAL_OPS`: a session configuration mask bit.
pub const SESSION_TOTAL_OPS: c_long = 1 << 0;

/// The C type `shmem_ctx_session_config_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    /// The expected largest number of RMA calls in the session (`SIZE_MAX`: not given).
    pub total_ops: usize,
}

/// A context's session: whether one is open, its options and its `total_ops` hint.
#[derive(Debug)]
pub struct Session {
    /// [`Session::OPEN`] while a session is open, ORed with its options (low 32 bits).
    state: AtomicU64,
    total_ops: AtomicUsize,
}

impl Session {
    const OPEN: u64 = 1 << 63;

    /// No session open.
    pub const fn new() -> Session {
        Session {
            state: AtomicU64::new(0),
            total_ops: AtomicUsize::new(usize::MAX),
        }
    }

    /// Whether a session with `SHMEM_CTX_SESSION_BATCH` is open.
    #[inline]
    pub fn batching(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s & Self::OPEN != 0 && s & SESSION_BATCH as u64 != 0
    }

    /// The options of the open session, `None` when none is open.
    pub fn options(&self) -> Option<c_long> {
        let s = self.state.load(Ordering::Relaxed);
        (s & Self::OPEN != 0).then_some((s & 0xffff_ffff) as c_long)
    }

    /// The `total_ops` hint of the open (or last) session.
    pub fn total_ops(&self) -> usize {
        self.total_ops.load(Ordering::Relaxed)
    }
}

impl Default for Session {
    fn default() -> Session {
        Session::new()
    }
}

/// The session of `SHMEM_CTX_DEFAULT`.
static DEFAULT_SESSION: Session = Session::new();

/// What a context handle stands for.
#[derive(Clone, Copy, Debug)]
pub struct Resolved {
    /// The node-client context.
    pub node_ctx: NodeCtx,
    /// Its team (`None`: the world team, identity numbering).
    pub team: Option<&'static Team>,
    /// Its session record.
    pub session: &'static Session,
}

/// The context behind a handle; `SHMEM_CTX_INVALID` or a handle that is not a live
/// context is a fatal error naming `call`.
///
/// # Safety
///
/// A handle other than the predefined ones must point to readable memory (a context handle
/// the program got from the library).
pub unsafe fn resolve(ctx: CtxRef, call: &str) -> Resolved {
    if ctx.is_default() {
        return Resolved {
            node_ctx: NodeCtx::DEFAULT,
            team: None,
            session: &DEFAULT_SESSION,
        };
    }
    if ctx.is_invalid() {
        fatal(call, "the context is SHMEM_CTX_INVALID");
    }
    // SAFETY: the caller guarantees the handle came from `shmem_ctx_create`, i.e. a leaked
    // `CtxObj`.
    let obj = unsafe { &*ctx.0.cast::<CtxObj>() };
    if obj.magic != CTX_MAGIC {
        fatal(
            call,
            format_args!("{:p} is not a context handle (destroyed context?)", ctx.0),
        );
    }
    let team = if obj.team == team::world_handle() {
        None
    } else {
        // SAFETY: the team handle was checked when the context was created, and a team
        // outlives its contexts.
        unsafe { team::resolve(obj.team, call) }
    };
    Resolved {
        node_ctx: obj.node_ctx,
        team,
        session: &obj.session,
    }
}

impl Resolved {
    /// The world PE of context PE `pe` (numbered in the context's team); an out-of-range
    /// PE is a fatal error naming `call`.
    #[inline]
    pub fn world_pe(&self, st: &State, pe: c_int, call: &str) -> u32 {
        match self.team {
            None => st.check_pe(pe, call),
            Some(t) => match u32::try_from(pe).ok().and_then(|p| t.world_pe(p)) {
                Some(g) => g,
                None => fatal(
                    call,
                    format_args!("PE {pe} is not in the context's team ({} PEs)", t.n_pes()),
                ),
            },
        }
    }
}

/// `shmem_team_create_ctx` (OpenSHMEM 1.5 §9.5.2): a context on `team`. Returns 0 and
/// stores the handle, or nonzero and `SHMEM_CTX_INVALID`.
///
/// # Safety
///
/// `out` must be valid for a write (it may be NULL: then nonzero is returned); `team` a
/// team handle from the library.
pub unsafe fn create(team: RawTeam, options: c_long, out: *mut RawCtx, call: &str) -> c_int {
    if out.is_null() {
        debug(call, "the ctx argument is NULL");
        return 1;
    }
    // SAFETY: `out` is non-null and valid for writes by the caller's contract.
    unsafe { out.write(std::ptr::null()) };
    let st = state::live(call);
    // SAFETY: forwarded from the caller's contract.
    let Some(t) = (unsafe { team::resolve(team, call) }) else {
        debug(call, "the team is SHMEM_TEAM_INVALID");
        return 1;
    };
    if options & !CTX_OPTIONS != 0 {
        debug(call, format_args!("unknown options {options:#x}"));
        return 1;
    }
    if t.my_pe().is_none() {
        debug(call, "this PE is not a member of the team");
        return 1;
    }
    let node_ctx = match st.node.ctx_create() {
        Ok(c) => c,
        Err(e) => {
            debug(call, e);
            return 1;
        }
    };
    let obj = Box::new(CtxObj {
        magic: CTX_MAGIC,
        node_ctx,
        team,
        options,
        session: Session::new(),
    });
    let handle: RawCtx = Box::into_raw(obj).cast_const().cast();
    t.contexts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(handle as usize);
    // SAFETY: as above.
    unsafe { out.write(handle) };
    0
}

/// `shmem_ctx_destroy` (OpenSHMEM 1.5 §9.5.3): quiets and frees a created context;
/// `SHMEM_CTX_INVALID` is a no-op, `SHMEM_CTX_DEFAULT` a fatal error.
///
/// # Safety
///
/// `ctx` must be a context handle from the library, not used afterwards.
pub unsafe fn destroy(ctx: CtxRef, call: &str) {
    if ctx.is_invalid() {
        return;
    }
    if ctx.is_default() {
        fatal(call, "SHMEM_CTX_DEFAULT cannot be destroyed");
    }
    let st = state::live(call);
    // SAFETY: forwarded from the caller's contract.
    let r = unsafe { resolve(ctx, call) };
    if let Err(e) = st.node.ctx_destroy(r.node_ctx) {
        fatal(call, e);
    }
    let team = r.team.unwrap_or_else(|| team::world(call));
    team.contexts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .retain(|&h| h != ctx.0 as usize);
    let obj = ctx.0.cast::<CtxObj>().cast_mut();
    // SAFETY: the handle is a leaked `Box<CtxObj>` (checked by `resolve`); clearing the
    // magic makes a later use of the stale handle recognisable while the memory is intact.
    unsafe {
        (*obj).magic = 0;
        drop(Box::from_raw(obj));
    }
}

/// The options a context was created with (0 for the default context).
///
/// # Safety
///
/// `ctx` a context handle from the library.
pub unsafe fn options(ctx: CtxRef, call: &str) -> c_long {
    if ctx.is_default() || ctx.is_invalid() {
        return 0;
    }
    // SAFETY: forwarded; `resolve` validated the object.
    unsafe {
        resolve(ctx, call);
        (*ctx.0.cast::<CtxObj>()).options
    }
}

/// The session record of a context; `None` for `SHMEM_CTX_INVALID`.
///
/// # Safety
///
/// `ctx` a context handle from the library.
pub unsafe fn session(ctx: CtxRef, call: &str) -> Option<&'static Session> {
    if ctx.is_invalid() {
        return None;
    }
    // SAFETY: forwarded.
    Some(unsafe { resolve(ctx, call) }.session)
}

/// `shmem_ctx_session_start` (OpenSHMEM 1.6 §9.9.2): opens a session on `ctx`, or ORs
/// `options` into the open one; `config`'s fields named in `config_mask` replace the
/// session's (`SHMEM_CTX_SESSION_TOTAL_OPS`: `total_ops`). `SHMEM_CTX_INVALID` is a no-op.
/// Unknown option bits are kept and have no effect; a mask naming a field with a NULL
/// `config` is a fatal error naming `call`. See the [module docs](self) for what a
/// session changes.
///
/// # Safety
///
/// `ctx` a context handle from the library; `config` NULL or valid for a read.
pub unsafe fn session_start(
    ctx: CtxRef,
    options: c_long,
    config: *const SessionConfig,
    config_mask: c_long,
    call: &str,
) {
    state::live(call);
    // SAFETY: forwarded.
    let Some(s) = (unsafe { session(ctx, call) }) else {
        return;
    };
    let was_open = s.state.load(Ordering::Relaxed) & Session::OPEN != 0;
    if config_mask & SESSION_TOTAL_OPS != 0 {
        if config.is_null() {
            fatal(
                call,
                "config is NULL but config_mask includes SHMEM_CTX_SESSION_TOTAL_OPS",
            );
        }
        // SAFETY: non-null, readable by the caller's contract.
        let total = unsafe { (*config).total_ops };
        s.total_ops.store(total, Ordering::Relaxed);
    } else if !was_open {
        s.total_ops.store(usize::MAX, Ordering::Relaxed);
    }
    s.state.fetch_or(
        Session::OPEN | (options as u64 & 0xffff_ffff),
        Ordering::Relaxed,
    );
}

/// `shmem_ctx_session_stop` (OpenSHMEM 1.6 §9.9.3): closes the session of `ctx` and sends
/// the puts it held (without waiting for their completion: that is `quiet`'s). No session
/// open, or `SHMEM_CTX_INVALID`: no effect.
///
/// # Safety
///
/// `ctx` a context handle from the library.
pub unsafe fn session_stop(ctx: CtxRef, call: &str) {
    let st = state::live(call);
    // SAFETY: forwarded.
    let Some(s) = (unsafe { session(ctx, call) }) else {
        return;
    };
    if s.state.swap(0, Ordering::Relaxed) & Session::OPEN == 0 {
        return;
    }
    // A held put marked the remote path pending (and woke the progress keeper, which sends
    // it if nothing else does); with nothing pending this is one load.
    if let Err(e) = st.node.poke() {
        fatal(call, e);
    }
}

/// `shmem_ctx_get_team` (OpenSHMEM 1.5 §9.5.4).
///
/// # Safety
///
/// `out` valid for a write or NULL; `ctx` a context handle from the library.
pub unsafe fn get_team(ctx: CtxRef, out: *mut RawTeam, call: &str) -> c_int {
    if out.is_null() {
        debug(call, "the team argument is NULL");
        return 1;
    }
    if ctx.is_invalid() {
        // SAFETY: `out` is non-null and valid by the caller's contract.
        unsafe { out.write(std::ptr::null()) };
        return 1;
    }
    let team = if ctx.is_default() {
        team::world_handle()
    } else {
        // SAFETY: forwarded from the caller's contract; `resolve` validated the object.
        unsafe {
            resolve(ctx, call);
            (*ctx.0.cast::<CtxObj>()).team
        }
    };
    // SAFETY: as above.
    unsafe { out.write(team) };
    0
}

/// Whether `ctx` is the default context of a settled node (see `state::Hot::settled`):
/// its quiet and fence then only fence memory.
#[inline(always)]
fn settled_default(ctx: CtxRef) -> bool {
    ctx.is_default() && state::HOT.settled()
}

/// `shmem_ctx_quiet` (OpenSHMEM 1.5 §9.11.2): completes every operation of the context;
/// `SHMEM_CTX_INVALID` is a no-op.
///
/// # Safety
///
/// `ctx` a context handle from the library.
#[inline(always)]
pub unsafe fn quiet(ctx: CtxRef, call: &str) {
    // Nothing of any context is in flight or unreported (the node is settled): every
    // earlier operation was a direct load, store or CPU atomic, or has completed; make
    // them visible. The default context of a settled node needs no state lookup.
    if settled_default(ctx) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        return;
    }
    // SAFETY: forwarded.
    unsafe { quiet_slow(ctx, call) }
}

/// The rest of [`quiet`].
///
/// # Safety
///
/// As [`quiet`].
#[inline(never)]
unsafe fn quiet_slow(ctx: CtxRef, call: &str) {
    if ctx.is_invalid() {
        return;
    }
    let st = state::live(call);
    if st.node.remote_ops_started() == 0 {
        // Nothing ever went through a service: every earlier operation was a direct load,
        // store or CPU atomic; make them visible.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        return;
    }
    // SAFETY: forwarded.
    let r = unsafe { resolve(ctx, call) };
    if let Err(e) = st.node.quiet(r.node_ctx) {
        fatal(call, e);
    }
}

/// `shmem_pe_quiet` / `shmem_ctx_pe_quiet` (OpenSHMEM 1.6 §9.12.3): completes the
/// context's operations to the `npes` PEs of `target_pes` (numbered in the context's team).
/// When every one of them is a same-node PE whose memory this PE maps, every operation to
/// it was a store, a load or a CPU atomic and is complete: a memory fence makes them
/// visible. Otherwise the context is quieted whole (the specification allows more, never
/// less). `npes == 0` returns at once (`target_pes` is not read); a PE out of range is a
/// fatal error naming `call`, as for every routine.
///
/// # Safety
///
/// `ctx` a context handle from the library; `target_pes` valid for `npes` reads.
pub unsafe fn pe_quiet(ctx: CtxRef, target_pes: *const c_int, npes: usize, call: &str) {
    if npes == 0 || ctx.is_invalid() {
        return;
    }
    let st = state::live(call);
    if target_pes.is_null() {
        fatal(call, format_args!("target_pes is NULL with npes = {npes}"));
    }
    // SAFETY: forwarded.
    let r = unsafe { resolve(ctx, call) };
    // SAFETY: non-null and valid for `npes` reads by the caller's contract.
    let pes = unsafe { std::slice::from_raw_parts(target_pes, npes) };
    let mut all_direct = true;
    for &pe in pes {
        all_direct &= st.direct_pe(r.world_pe(st, pe, call));
    }
    if all_direct {
        std::sync::atomic::fence(Ordering::SeqCst);
        return;
    }
    // SAFETY: forwarded.
    unsafe { quiet(ctx, call) }
}

/// `shmem_ctx_fence` (OpenSHMEM 1.5 §9.11.1): orders the delivery of the context's
/// earlier puts, AMOs and signals before its later ones, per PE; `SHMEM_CTX_INVALID` is a
/// no-op.
///
/// # Safety
///
/// `ctx` a context handle from the library.
#[inline(always)]
pub unsafe fn fence(ctx: CtxRef, call: &str) {
    if settled_default(ctx) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        return;
    }
    // SAFETY: forwarded.
    unsafe { fence_slow(ctx, call) }
}

/// The rest of [`fence`].
///
/// # Safety
///
/// As [`fence`].
#[inline(never)]
unsafe fn fence_slow(ctx: CtxRef, call: &str) {
    if ctx.is_invalid() {
        return;
    }
    let st = state::live(call);
    if st.node.remote_ops_started() == 0 {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        return;
    }
    // SAFETY: forwarded.
    let r = unsafe { resolve(ctx, call) };
    if let Err(e) = st.node.fence(r.node_ctx) {
        fatal(call, e);
    }
}

/// Prints a diagnostic when `SHMEM_DEBUG` is set.
pub(crate) fn debug(call: &str, message: impl std::fmt::Display) {
    if let Some(st) = state::get() {
        if st.config.debug {
            gsas_transport::eprintln_whole!("gsas-shmem: PE {}: {call}: {message}", st.me);
        }
    }
}
