//! gsas-node: the PE side of the gsas std runtime.
//!
//! **What it is.** [`node`]: the node client, "the GSAS API" a PE programs against:
//! bootstrap ([`node::Node::init`]), put/get/atomics by `(pe, segment, offset)` to any PE
//! (direct loads, stores and CPU atomics for same-node PEs; atomic services over UDP or
//! Exanet otherwise), contexts, quiet and fence, the symmetric heap, `barrier_all`, abort
//! and finalize; [`pmi`], the PMI-1/PMI-2/PMIx client a PE bootstraps with; and
//! [`watch`], what makes a hang explain itself (a dead local service noticed by every
//! wait, the line each PE prints on SIGQUIT, the notes that let `oshrun` name who waits
//! for whom).
//!
//! A PE links this crate, the transports (`gsas-transport`) and the service library
//! (`gsas-service`, which a singleton PE embeds), and nothing of the launcher, the PMI
//! server, remote FORK or the daemon (`gsas-launch`).
//!
//! **Thread safety.** [`node::Node`] is `Send + Sync` (lock-free direct path, one mutex on
//! the remote path).
//!
//! The example of a singleton job is in [`node`].

pub mod node;
pub mod pmi;
pub mod watch;
