//! gsas-service: the atomic service of the gsas std runtime.
//!
//! **What it is.** [`service`]: the service that owns a node's shared memory per job and
//! serves remote requests (puts, gets, atomics) over the node's transport (UDP or Exanet)
//! and its PEs' shared-memory rings, with its control protocol ([`service::proto`]), the
//! control client ([`service::ControlClient`]) and its statistics. It is a library: the
//! `gsas-atomicd` daemon (crate `gsas-launch`), the launcher and a singleton PE (crate
//! `gsas-node`) embed it.
//!
//! **What it is not.** Not the daemon binary or remote FORK (`gsas-launch`), not the node
//! client (`gsas-node`), not the transports (`gsas-transport`).
//!
//! **Thread safety.** A bound [`service::Service`] is `Send` and runs on one thread.

pub mod service;

// The layers underneath under the names the moved modules use (`crate::shm`, ...).
use gsas_transport::{bell, config, poll, shm, transport};
