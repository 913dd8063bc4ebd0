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

/// `eprintln!` in one write: the line is formatted first and written whole. Standard
/// error is unbuffered, and `eprintln!` writes its pieces one by one, so lines of the
/// launcher and of its PEs, which share the pipe, came out interleaved mid-line
/// (`oshrunpe2[10048] error: ...` then `: PE 3 ... aborted the job`).
#[macro_export]
macro_rules! eprintln_whole {
    ($($arg:tt)*) => {{
        let mut line = ::std::format!($($arg)*);
        line.push('\n');
        $crate::log::write_stderr(line.as_bytes());
    }};
}
