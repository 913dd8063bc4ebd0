//! Every transport, one suite: the kit's conformance suite (`gsas_tests::conformance`) on
//! the gsas-core loopback double, UDP, reliable UDP (also over a fault injector), the
//! shared-memory ring and Exanet (on the in-process model and over the `exanet-emu`
//! emulator); then each transport between real processes and, for Exanet, a QFDB-sized job
//! of gsas-core services and clients over the emulator.
//!
//! * [`conformance`]: the suite per transport (one call each; see its docs for adding one);
//! * [`shmring`]: the shared-memory ring between threads and between processes;
//! * [`udp_processes`]: reliable UDP with 10% loss between two processes;
//! * [`exanet`]: four emulated nodes, gsas-core's stack over `ExanetTransport`, faults and
//!   an unreachable node.
//!
//! The second process of [`shmring`] and [`udp_processes`] is this binary again:
//! [`child_pe`] plays it.

mod conformance;
mod exanet;
mod shmring;
mod udp_processes;

/// The child entry point: the process a test started plays its part and exits; run as an
/// ordinary test it does nothing.
#[test]
fn child_pe() {
    shmring::child_entry();
    udp_processes::child_entry();
}
