//! shmem: OpenSHMEM 1.6 over gsas, as a Rust API and as the complete C ABI (`libshmem`).
//!
//! **What it is.** A PGAS library: every PE (process) of a job owns a symmetric heap (and,
//! in C programs, its globals and statics), and any PE reads, writes and atomically
//! updates the symmetric objects of any other PE by naming the object and the PE. Under it
//! is the gsas node client ([`gsas_node::Node`]): same-node PEs map each other's segments
//! and are reached with plain loads, stores and CPU atomics; other nodes are reached through
//! their atomic services. This crate provides
//!
//! * the **Rust API** at the crate root: [`init`] returns a [`Shmem`] handle (finalize on
//!   drop or with [`Shmem::finalize`]); typed symmetric allocations [`SymBox`] and
//!   [`SymVec`]; RMA, AMOs, signals, fence and quiet on contexts ([`Ctx`], the default one
//!   through `Deref`); point-to-point waits; locks ([`SymLock`]); teams ([`Team`]) with
//!   their splits ([`OwnedTeam`]) and collectives (sync, broadcast, collect, fcollect,
//!   alltoall(s), reductions with the operations of [`op`]). Element types are bounded by the
//!   specification's type classes as sealed traits ([`Symmetric`], [`AmoStandard`],
//!   [`AmoExtended`], [`AmoBitwise`], [`ReduceBitwise`], [`ReduceMinMax`], [`ReduceArith`]);
//! * the **C ABI**: every routine of OpenSHMEM 1.5 (setup, thread, memory, team, context,
//!   RMA, AMO, signaling, collective, point-to-point, ordering, lock, legacy and profiling
//!   categories) under its `shmem_` name and its `pshmem_` profiling twin, matching
//!   `include/shmem.h`, plus, of OpenSHMEM 1.6, `shmem_team_ptr` ([`Team::ptr`] in Rust),
//!   the interleaved block transfers `shmem_ibput`/`shmem_ibget` (typed, sized, `ctx` and
//!   C11 generic forms; [`Ctx::ibput`], [`Ctx::ibget`]), `shmem_query_initialized`
//!   ([`query_initialized`]), `shmem_[ctx_]signal_add` and `_signal_set`
//!   ([`Ctx::signal_add`], [`Ctx::signal_set`]), `shmem_[ctx_]pe_quiet` ([`Ctx::pe_quiet`]),
//!   the sessions `shmem_ctx_session_start`/`_stop` ([`Ctx::session`]) and the team scans
//!   `shmem_TYPENAME_sum_inscan`/`_sum_exscan` ([`Team::sum_inscan`], [`Team::sum_exscan`]),
//!   and the six cache routines 1.5 removed (`shmem_clear_cache_inv` ... `shmem_udcflush_line`:
//!   no-ops, declared deprecated); the handles `SHMEM_CTX_DEFAULT`, `SHMEM_TEAM_WORLD` and
//!   `SHMEM_TEAM_SHARED` are the addresses of the exported objects `gsas_shmem_ctx_default`,
//!   `gsas_shmem_team_world` and `gsas_shmem_team_shared`. The staticlib build of this crate
//!   is `libshmem.a`; `scripts/install` makes `libshmem.so`, `oshcc` and `oshrun` from it.
//!
//! # Design (decided)
//!
//! * **Global state.** Initialization (module `state`) fills one leaked state read without
//!   locks; the four words the hot paths need live in statics of their own. A symmetric
//!   address is translated to (segment, offset): segment 0 is the symmetric heap, segment 1
//!   the executable's `.data`/`.bss`, which the C library remaps onto shared memory at init
//!   (so globals are symmetric); anything else is a fatal error naming the routine and the
//!   address ("not a symmetric address").
//! * **Hot path.** `shmem_long_p` on the default context to a same-node PE: load heap base,
//!   subtract, compare with the heap limit, compare the PE with the PE count, load the PE's
//!   base from the table, test it, store: 16 instructions per call including the return
//!   (callgrind `Ir`, x86_64), no call and no stack frame. Everything else (another node,
//!   the data segment, other contexts, errors) is out of line, reached by a tail call into
//!   a function with the C ABI (which cannot unwind, so the fast path needs no landing
//!   pad). The hot words are crate-private statics, addressed directly rather than through
//!   the GOT; the Rust API's generic methods therefore call non-generic byte-level
//!   functions instead of inlining the fast paths into user crates.
//! * **C ABI generation** ([`capi`](crate#c-abi-generation)): one type table per operation
//!   class expanded by callback `macro_rules!` into one-line `extern "C"` functions that
//!   call byte-level internals (`rma::put(ctx, dest, src, nbytes, pe)`,
//!   `amo::amo(ctx, op, dtype, ...)` with gsas-core's wire codes): no per-type logic below
//!   the ABI layer. Each routine is one function exported as `pshmem_X`, with `shmem_X` a
//!   weak alias of it (the same code). Every exported function catches panics at the boundary and turns them
//!   into the fatal-error path. `long double` by value and the variadic `shmem_pcontrol`
//!   are in a C shim (`csrc/shim.c`).
//! * **Errors.** OpenSHMEM routines have no error returns for misuse or communication
//!   failures: the library prints `gsas-shmem: PE n: routine: reason` and ends the job
//!   (PMI abort, exit status 255). Initialization, allocation and context creation report
//!   failures as the specification says (nonzero, NULL, `Result` in Rust).
//! * **Semantics** as the specification and the checklist's section 2: blocking puts
//!   complete locally; quiet completes everything of a context (also non-blocking gets and
//!   AMO fetches); fence orders delivery per PE; zero-length transfers never dereference;
//!   strides count elements; `shmem_ptr` works for this PE and every same-node PE, heap and
//!   data; allocators are collective with the exact barrier rules; locks are FIFO ticket
//!   locks; waits spin, yield, then sleep, bounded by `SHMEM_WAIT_TIMEOUT`;
//!   `shmem_global_exit` flushes stdio and ends every PE with its status (0 included: the
//!   job then succeeds); `shmem_align` rounds an alignment below the pointer size up to it;
//!   the allocation routines leave `errno` unchanged.
//! * **Progress** without quiet: a blocking put or AMO to another node has sent its request
//!   when it returns, and every wait and test (`shmem_TYPE_test*`, `shmem_signal_fetch`)
//!   drives this PE's own remote operations while anything is in flight, so a PE that sets
//!   a flag on another node and then polls its own flag never holds the first update back.
//!   A PE that computes without calling the library for a long time is covered by the node
//!   client's progress keeper thread (retransmissions and acknowledgements late by at most
//!   a few milliseconds; jobs spanning several nodes only). Non-blocking operations share
//!   frames and leave at the next call that makes progress, or through the keeper.
//! * **Exit**: a program that exits with status 0 without calling `shmem_finalize` (a
//!   `start_pes` program) is finalized by an exit handler, so the job ends cleanly.
//! * **Contexts** are node-client contexts plus a team (PE numbering) and options;
//!   creation is local and fails cleanly when the node's 63 extra contexts are used up.
//!   Teams are PE lists with a sorted reverse index and a block of the sync segment for
//!   their collectives; splits agree on a free block with a reduction over the parent.
//! * **Collectives** (module `coll`): node-aware. A group's members are cut into *cells*
//!   (runs of consecutive members sharing a node's memory): within a cell flags and data go
//!   through shared memory (one store by the leader releases its whole cell), across cells
//!   the leaders run logarithmic algorithms over the node client (dissemination barrier,
//!   binomial broadcast and reduce, recursive doubling or ring for collect/fcollect, direct
//!   puts for alltoall). Team collectives keep monotonically numbered tags and counters in
//!   the team's block; active-set collectives count in their `pSync`, which is back at
//!   `SHMEM_SYNC_VALUE` on return. Reductions are computed once in member order and copied,
//!   so every PE gets the same bits.
//! * **Environment** ([`env`](mod@env)): one table of variables (`SHMEM_SYMMETRIC_SIZE`,
//!   `SHMEM_VERSION`, `SHMEM_INFO`, `SHMEM_DEBUG`, the `SMA_` aliases, and the gsas
//!   extensions `SHMEM_WAIT_TIMEOUT` and `SHMEM_COLL_*`, the collectives' thresholds) from
//!   which parsing, errors, `SHMEM_INFO` and the docs come.
//!
//! # C ABI generation
//!
//! The tables (`src/capi/mod.rs`) are `macro_rules!` that call a row macro back with all
//! their rows, e.g. `rma_types!(rma_rows)` with rows such as `long: c_long [val]`. The row
//! macro lists each routine once as an `abi!` entry: the pieces of its C name, its
//! parameters and a body calling an internal. `abi!` writes the functions with
//! `#[export_name = concat!("shmem_", ...)]` (no identifier pasting needed) and records
//! the names it exported; a test compares that list with the specification's symbol list
//! (`docs/spec/openshmem-1.5-c-symbols.tsv`) for the categories this crate implements.
//!
//! `examples/token_ring.rs` passes a token around the PEs with put-with-signal
//! (`oshrun -n 4 target/release/examples/token_ring`).
//!
//! # What it is not
//!
//! Not the launcher or the runtime (`gsas-launch`, `gsas-node`).
//!
//! # Thread safety
//!
//! The library provides `SHMEM_THREAD_MULTIPLE`: every routine may be called from any
//! thread; contexts, teams and symmetric objects are `Send + Sync`. The collective calls
//! (allocation, finalize, the collectives of a team or active set, team splits) must be
//! made in the same order on every PE, as the specification requires; collectives on
//! different teams may run on different threads at once.
//!
//! # Example
//!
//! Without a launcher (and no daemon configured) the program is a job of one PE that
//! starts `gsas-atomicd --private` for its node (found beside the program, through
//! `GSAS_ATOMICD`, or on `PATH`); a Rust program that links `gsas-launch` can run that
//! service as a thread instead, as this example does (the hidden first line).
//!
//! ```
//! # gsas_node::node_service::set_service_starter(gsas_launch::embedded::start_in_process);
//! // Without a launcher this is a job of one PE; under `oshrun -n N` every PE runs it.
//! let shmem = shmem::init()?;
//! let (me, n) = (shmem.my_pe(), shmem.n_pes());
//! let counter = shmem.alloc_box(0u64)?;              // collective: same object on all PEs
//! let slots = shmem.alloc_vec::<u32>(n)?;
//! shmem.atomic_add(&counter, 1, 0);                   // count myself on PE 0
//! shmem.p(slots.at(me), me as u32 * 10, (me + 1) % n); // tell my right neighbour
//! shmem.barrier_all();
//! assert_eq!(slots.read((me + n - 1) % n), ((me + n - 1) % n) as u32 * 10);
//! if me == 0 {
//!     assert_eq!(counter.read(), n as u64);
//! }
//! drop((counter, slots));                             // collective frees
//! shmem.finalize()?;
//! # Ok::<(), shmem::Error>(())
//! ```

// The internals (crate-private, so that the state the fast paths read is addressed
// directly, not through the GOT, and so that issue 6's modules build on them). Their names
// say their role beside the C ABI's `capi/` and the Rust API's `api/` (`ctx_table` holds the
// context handles that `api::Ctx` wraps, `ticket_lock` the algorithm under `api::SymLock`,
// `p2p_wait` the waits and tests that `capi::p2p` and `api`'s p2p methods call).
pub(crate) mod addr;
pub(crate) mod amo;
pub(crate) mod coll;
pub(crate) mod ctx_table;
pub(crate) mod fatal;
pub(crate) mod lifecycle;
pub(crate) mod memory;
pub(crate) mod p2p_wait;
pub(crate) mod rma;
pub(crate) mod state;
pub(crate) mod team;
pub(crate) mod ticket_lock;
pub(crate) mod wait;

pub mod api;
mod capi;
pub mod env;
pub mod types;

/// Fault injection for the tests of the collectives' direct path (not an API).
#[doc(hidden)]
pub mod testing {
    /// The next direct datagrams this PE sends whose bit is set in `mask` (bit 0: the next
    /// one) are not sent the first time, as if lost on the network (their resends go).
    pub fn coll_drop(mask: u64) {
        crate::coll::direct::drop_next(mask);
    }

    /// Point-to-point puts this PE sent straight to other PEs' endpoints
    /// (`SHMEM_P2P_DIRECT_MAX`), and those it applied from others.
    pub fn p2p_direct_counts() -> (u64, u64) {
        crate::coll::direct::p2p_counts()
    }

    /// How often a wait or test of this PE slept on its endpoint's socket (while
    /// point-to-point puts come through it), and how many of those sleeps a doorbell ring
    /// (an update applied by the node's service) ended, passed on by the keeper thread.
    pub fn socket_sleeps() -> (u64, u64) {
        crate::coll::direct::socket_sleeps()
    }

    /// Acknowledgements of point-to-point puts this PE sent in datagrams of their own (not
    /// carried by a put of its own to the sender): at once, and late (by the keeper
    /// thread, for what the program's calls left owed).
    pub fn p2p_acks_alone() -> (u64, u64) {
        crate::coll::direct::acks_alone()
    }
}

pub use api::{
    CmpValues, Ctx, CtxOptions, Error, ErrorKind, LockGuard, Nbi, Options, OwnedTeam, ReduceOp,
    Session, SessionOptions, Shmem, SignalOp, SymBox, SymLock, SymSlice, SymVec, Team, TeamConfig,
    ThreadLevel, init, init_thread, init_with, op, query_initialized,
};
pub use capi::{SHIM_NAMES, abi_names};
pub use fatal::FATAL_EXIT_CODE;
pub use p2p_wait::Cmp;
pub use types::{
    AmoBitwise, AmoExtended, AmoStandard, Complex32, Complex64, LongDouble, ReduceArith,
    ReduceBitwise, ReduceMinMax, Symmetric,
};

/// `SHMEM_MAJOR_VERSION`.
pub const MAJOR_VERSION: i32 = 1;
/// `SHMEM_MINOR_VERSION`.
pub const MINOR_VERSION: i32 = 6;
/// `SHMEM_VENDOR_STRING`: the name `shmem_info_get_name` returns.
pub const VENDOR_STRING: &str = "gsas";
/// `SHMEM_MAX_NAME_LEN`.
pub const MAX_NAME_LEN: usize = 256;

/// The line `SHMEM_VERSION` prints.
pub fn version_line() -> String {
    format!(
        "{VENDOR_STRING} OpenSHMEM {MAJOR_VERSION}.{MINOR_VERSION} (gsas shmem {})",
        env!("CARGO_PKG_VERSION")
    )
}
