//! The Rust API: a typed, borrow-checked face over the same internals as the C ABI.
//!
//! **What it is.** [`init`] (or [`init_thread`], [`init_with`]) starts the library and
//! returns a [`Shmem`] handle; the handle dereferences to the default [`Ctx`], on which all
//! RMA, AMO, signal and ordering routines are methods; [`Shmem`] itself adds queries,
//! collective allocation ([`SymVec`], [`SymBox`], [`SymLock`]), point-to-point waits,
//! teams and context creation; [`Team`] has the collectives (sync, broadcast, collect,
//! fcollect, alltoall(s), reductions with the operations of [`op`]) and the splits. Every method cites the section of OpenSHMEM 1.5 it
//! implements ("§9.6.1" is section 9.6.1 of the 1.5 document).
//!
//! Conventions: PE numbers are `usize` (numbered in the context's team); a symmetric
//! object is named by a [`SymSlice`] (from `&SymVec`, `&SymBox`, or `.slice(..)`/`.at(i)`);
//! shape errors (a source longer than the destination, an index out of bounds) panic;
//! misuse the C ABI also reports (a PE out of range) and communication failures end the
//! job through the library's fatal-error path, as in C. A PE that panics while it holds a
//! [`SymVec`], [`SymBox`], [`OwnedTeam`] or the [`Shmem`] handle ends the job when the
//! unwinding reaches their drop: freeing them is a collective that the other PEs are not
//! in, so waiting would hang the job until `SHMEM_WAIT_TIMEOUT`.
//!
//! **What it is not.** Not safe against other PEs: symmetric memory is written by remote
//! PEs at any time, so local access goes through element-wise `Relaxed` atomic reads and
//! writes ([`SymVec::read`], [`SymVec::write`]) or through `unsafe` slices whose contract is that
//! no remote PE writes meanwhile.
//!
//! **Thread-safety.** Everything is `Send + Sync`; the library runs at
//! `SHMEM_THREAD_MULTIPLE` whatever level is requested. Collective calls (allocation,
//! freeing on drop, finalize) must be made in the same order on every PE.

mod bytes;
mod coll;
mod ctx;
mod lock;
mod p2p;
mod sym;
mod team;

use std::ffi::c_int;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

pub use coll::{OwnedTeam, ReduceOp, TeamConfig, op};
pub use ctx::{Ctx, CtxOptions, Nbi, Session, SessionOptions, SignalOp};
pub use lock::{LockGuard, SymLock};
pub use p2p::CmpValues;
pub use sym::{SymBox, SymSlice, SymVec};
pub use team::Team;

use crate::ctx_table::CtxRef;
use crate::state::{self, InitError, InitOptions};
use crate::types::Symmetric;

/// Thread levels (OpenSHMEM 1.5 §9.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ThreadLevel {
    /// `SHMEM_THREAD_SINGLE`.
    Single = 0,
    /// `SHMEM_THREAD_FUNNELED`.
    Funneled = 1,
    /// `SHMEM_THREAD_SERIALIZED`.
    Serialized = 2,
    /// `SHMEM_THREAD_MULTIPLE`.
    Multiple = 3,
}

impl ThreadLevel {
    fn from_c(level: c_int) -> ThreadLevel {
        match level {
            0 => ThreadLevel::Single,
            1 => ThreadLevel::Funneled,
            2 => ThreadLevel::Serialized,
            _ => ThreadLevel::Multiple,
        }
    }
}

/// What went wrong in a routine that reports failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Initialization failed (environment, bootstrap, from an exit handler after the
    /// library's own).
    Init,
    /// The symmetric heap cannot hold the allocation.
    OutOfMemory,
    /// A context could not be created.
    Context,
    /// An argument the routine checks is invalid.
    InvalidArgument,
}

/// An error of the Rust API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<InitError> for Error {
    fn from(e: InitError) -> Error {
        Error::new(ErrorKind::Init, e.to_string())
    }
}

/// Options of [`init_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Requested thread level.
    pub thread_level: ThreadLevel,
    /// Make the executable's globals symmetric by remapping the data segment onto shared
    /// memory (what the C library does). Must be requested before the process starts any
    /// other thread; Rust programs rarely need it.
    pub remap_data: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            thread_level: ThreadLevel::Single,
            remap_data: false,
        }
    }
}

/// The running library; see the [module docs](self). Dropping it finalizes (a
/// collective: every PE must drop or finalize its handle).
#[derive(Debug)]
pub struct Shmem {
    default: Ctx<'static>,
    level: ThreadLevel,
    finalized: AtomicBool,
}

/// `shmem_init` (OpenSHMEM 1.5 §9.1.1): starts the library (a collective over all PEs).
/// Without a launcher the process is a job of one PE. After the last [`Shmem::finalize`] it
/// starts a new initialization cycle of the same job (OpenSHMEM 1.6; an empty symmetric
/// heap, the same PEs).
///
/// Errors: [`ErrorKind::Init`] with the reason (an invalid environment variable names the
/// variable and its value).
pub fn init() -> Result<Shmem, Error> {
    init_with(Options::default())
}

/// `shmem_init_thread` (OpenSHMEM 1.5 §9.2.1). The library provides
/// [`ThreadLevel::Multiple`] behaviour at every level; [`Shmem::thread_level`] reports the
/// requested level.
///
/// Errors: as [`init`].
pub fn init_thread(level: ThreadLevel) -> Result<Shmem, Error> {
    init_with(Options {
        thread_level: level,
        ..Options::default()
    })
}

/// `shmem_query_initialized` (OpenSHMEM 1.6 §9.1.5): whether the library is initialized
/// and not yet finalized. May be called at any time, from any thread.
pub fn query_initialized() -> bool {
    state::is_running()
}

/// [`init`] with [`Options`].
///
/// Errors: as [`init`].
pub fn init_with(options: Options) -> Result<Shmem, Error> {
    let st = crate::lifecycle::init(InitOptions {
        remap_data: options.remap_data,
        thread_level: options.thread_level as c_int,
    })?;
    Ok(Shmem {
        default: Ctx::predefined(CtxRef::DEFAULT),
        level: ThreadLevel::from_c(st.thread_level()),
        finalized: AtomicBool::new(false),
    })
}

impl std::ops::Deref for Shmem {
    type Target = Ctx<'static>;

    /// The default context (`SHMEM_CTX_DEFAULT`).
    fn deref(&self) -> &Ctx<'static> {
        &self.default
    }
}

fn live(call: &str) -> &'static state::State {
    state::live(call)
}

/// A PE number as the internals take it (out of range stays out of range).
pub(crate) fn c_pe(pe: usize) -> c_int {
    c_int::try_from(pe).unwrap_or(c_int::MAX)
}

impl Shmem {
    /// `shmem_my_pe` (OpenSHMEM 1.5 §9.1.2).
    pub fn my_pe(&self) -> usize {
        live("shmem::Shmem::my_pe").me as usize
    }

    /// `shmem_n_pes` (OpenSHMEM 1.5 §9.1.3).
    pub fn n_pes(&self) -> usize {
        live("shmem::Shmem::n_pes").npes as usize
    }

    /// The thread level requested at initialization (`shmem_query_thread`, §9.2.2).
    pub fn thread_level(&self) -> ThreadLevel {
        self.level
    }

    /// `shmem_pe_accessible` (OpenSHMEM 1.5 §9.1.6): whether `pe` is a PE of the job.
    pub fn pe_accessible(&self, pe: usize) -> bool {
        pe < self.n_pes()
    }

    /// `shmem_addr_accessible` (OpenSHMEM 1.5 §9.1.7): whether `addr` is a symmetric
    /// address that RMA can reach on `pe`.
    pub fn addr_accessible<T>(&self, addr: *const T, pe: usize) -> bool {
        let st = live("shmem::Shmem::addr_accessible");
        pe < st.npes as usize && st.segs.translate(addr as usize, 1).is_some()
    }

    /// `shmem_ptr` (OpenSHMEM 1.5 §9.1.8): a local pointer to `obj` on `pe` if `pe` is this
    /// PE or a same-node PE (then loads and stores through it reach `pe`'s memory).
    pub fn ptr<'a, T: Symmetric>(
        &self,
        obj: impl Into<SymSlice<'a, T>>,
        pe: usize,
    ) -> Option<std::ptr::NonNull<T>> {
        let st = live("shmem::Shmem::ptr");
        st.local_ptr(obj.into().as_ptr() as usize, u32::try_from(pe).ok()?)
            .map(std::ptr::NonNull::cast)
    }

    /// `shmem_barrier_all` (OpenSHMEM 1.5 §9.9.1): quiet on the default context, then wait
    /// for every PE (the node-aware barrier of the world team).
    pub fn barrier_all(&self) {
        crate::coll::barrier_all("shmem::Shmem::barrier_all");
    }

    /// `shmem_sync_all` (OpenSHMEM 1.5 §9.9.3): wait for every PE; completes local stores
    /// only (no quiet).
    pub fn sync_all(&self) {
        crate::coll::sync_all("shmem::Shmem::sync_all");
    }

    /// `shmem_finalize` (OpenSHMEM 1.5 §9.1.4): completes all communication and waits for
    /// every PE; the last one frees the symmetric heap (the PE leaves the job when the
    /// process exits, and may [`init`] again before). Symmetric objects must be dropped
    /// before (the borrow checker makes sure).
    ///
    /// Errors: none today; the `Result` leaves room for reporting a failed leave.
    pub fn finalize(self) -> Result<(), Error> {
        self.finalize_once();
        Ok(())
    }

    fn finalize_once(&self) {
        if !self.finalized.swap(true, Ordering::AcqRel) {
            crate::fatal::not_while_panicking("shmem::Shmem::finalize");
            crate::lifecycle::finalize("shmem::Shmem::finalize");
        }
    }

    /// The world team (`SHMEM_TEAM_WORLD`).
    pub fn team_world(&self) -> Team<'_> {
        Team::predefined(crate::team::world_handle())
    }

    /// The shared team (`SHMEM_TEAM_SHARED`): the PEs whose memory [`Shmem::ptr`] reaches.
    pub fn team_shared(&self) -> Team<'_> {
        Team::predefined(crate::team::shared_handle())
    }

    /// `shmem_ctx_create` (OpenSHMEM 1.5 §9.5.1): a context on the world team. Not
    /// collective.
    ///
    /// Errors: [`ErrorKind::Context`] when no context is left (the library stays usable).
    pub fn ctx_create(&self, options: CtxOptions) -> Result<Ctx<'_>, Error> {
        self.team_world().create_ctx(options)
    }

    /// `shmem_global_exit` (OpenSHMEM 1.5 §9.1.5): flushes output and ends every PE of the
    /// job with `status`.
    pub fn global_exit(&self, status: i32) -> ! {
        crate::fatal::end_job(status, &format!("shmem::Shmem::global_exit({status})"))
    }
}

impl Drop for Shmem {
    fn drop(&mut self) {
        self.finalize_once();
    }
}
