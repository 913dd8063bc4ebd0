//! gsas-transport: the transports of the gsas std runtime and the layers every PE and
//! service runs under them.
//!
//! **What it is.**
//!
//! * [`transport`]: UDP with the gsas header, Exanet endpoints with the job-key header,
//!   the enum of the two ([`transport::net`]), the reliability runner over it
//!   ([`transport::reliable::OwnedReliable`]), the shared-memory ring, and the
//!   conformance suite every transport runs;
//! * [`shm`]: memfd segments, descriptor passing, the data-segment remap, the engine's
//!   memory access;
//! * [`bell`] (doorbells between a service and its PEs), [`watched`] (copies of memory that
//!   another party watches), [`poll`] (the spin-yield-block waiter);
//! * [`config`] (the table of `GSAS_*` variables) and [`log`] (the logger).
//!
//! **What it is not.** Not the service (`gsas-service`), the node client (`gsas-node`) or
//! the launcher (`gsas-launch`); not the system-call wrappers (`gsas-sys`).
//!
//! **Thread safety.** Each transport is a single-owner value (`Send`); the other types
//! document their own contract.

pub mod bell;
pub mod config;
pub mod log;
pub mod poll;
pub mod shm;
pub mod transport;
pub mod watched;
