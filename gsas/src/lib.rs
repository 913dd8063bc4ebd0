//! gsas: the std runtime of the gsas PGAS stack, as one facade over its crates by role:
//! `gsas-node` (PE side), `gsas-service` (the atomic service), `gsas-launch` (launcher,
//! PMI server, FORK, `gsas-atomicd`), `gsas-transport` (transports and the layers under
//! them) and `gsas-sys` (system calls). It re-exports them under the module paths below.
//!
//! **What it is.** Everything a gsas job needs at run time on Linux:
//!
//! * [`node`]: the node client, "the GSAS API" a PE programs against: bootstrap
//!   ([`node::Node::init`]), put/get/atomics by `(pe, segment, offset)` to any PE (direct
//!   loads, stores and CPU atomics for same-node PEs; atomic services over UDP or Exanet
//!   otherwise),
//!   contexts, quiet and fence, the symmetric heap, `barrier_all`, abort and finalize;
//! * [`service`]: the atomic service that owns a node's shared memory per job and serves
//!   remote requests (embedded in a launcher or a PE, or as the `gsas-atomicd` daemon);
//! * [`launch`]: `oshrun`/`gshrun`, which starts a job on this machine with its own service
//!   thread and a PMI-1 server, or across the nodes of a cluster file with their daemons,
//!   or through `srun` inside a Slurm allocation, and ends it on the first failure;
//! * [`fork`]: remote FORK, how a multi-node launcher has the nodes' daemons start PEs,
//!   authenticated with HMAC-SHA256 under a cluster secret (off unless configured);
//! * the layers underneath: [`pmi`] (PMI-1/PMI-2/PMIx client, PMI-1 server), [`shm`] (memfd segments,
//!   descriptor passing, the data-segment remap, the engine's memory access), [`transport`]
//!   (UDP with the gsas header, Exanet endpoints with the job-key header, the enum of the
//!   two that the reliability layer runs over, the shared-memory ring), [`poll`] (the spin-yield-block
//!   waiter), [`config`] (the table of `GSAS_*` variables) and [`log`] (the logger).
//!
//! The tests that start jobs, daemons and emulators live in the workspace's `tests/` crate
//! (`gsas-tests`), with the test kit that starts them.
//!
//! `docs/runtime.md` is the user's guide: how a job starts, processes, segments, variables,
//! failure behaviour.
//!
//! **What it is not.** Not the OpenSHMEM API (the `shmem` crate builds it on [`node`]), not
//! `no_std` (the protocol core is `gsas-core`), and not a resource manager (the launcher
//! uses the nodes of a cluster file whose daemons run; it picks, binds and queues nothing).
//!
//! **Thread safety.** [`node::Node`] is `Send + Sync` (lock-free direct path, one mutex on
//! the remote path); a bound [`service::Service`] is `Send` and runs on one thread; the
//! other types document their own contract.
//!
//! ```
//! use gsas::node::{Ctx, HEAP, Node, NodeOptions};
//! use gsas_core::wire::{AtomicOp, AtomicType};
//!
//! // Without a launcher this is a job of one PE with an embedded service.
//! let node = Node::init(NodeOptions { heap_size: Some(1 << 20), ..NodeOptions::default() })?;
//! let slot = node.calloc(1, 8)?.expect("8 bytes");
//! node.put(Ctx::DEFAULT, 0, HEAP, slot, &41u64.to_le_bytes())?;
//! let old = node.atomic(Ctx::DEFAULT, 0, HEAP, slot, AtomicOp::FetchInc, AtomicType::U64, 0, 0)?;
//! assert_eq!(old, 41);
//! node.finalize()?;
//! # Ok::<(), gsas::node::NodeError>(())
//! ```

// The role crates under the module paths this crate had before it was split.
pub use gsas_launch::{fork, pmi};
pub use gsas_node as node;
pub use gsas_transport as transport;
pub use gsas_transport::{bell, config, log, poll, shm, watched};

/// The atomic service (`gsas_service`), with the daemon (`gsas_launch::daemon`)
/// and the socket and event wrappers (`gsas_sys`) it used to hold.
pub mod service {
    pub use gsas_launch::daemon;
    pub use gsas_service::*;
    pub use gsas_sys::{event as sys, socket};
}

/// The launcher (`gsas_launch::launch`), with the process wrappers (`gsas_sys::process`)
/// it used to hold.
pub mod launch {
    pub use gsas_launch::launch::*;
    pub use gsas_sys::process as sys;
}
