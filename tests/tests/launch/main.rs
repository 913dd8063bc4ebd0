//! Starting jobs: gsas's `oshrun`, MPICH's Hydra, PMI-1/PMI-2/PMIx, and a real Slurm.
//!
//! * [`oshrun`]: the launcher's options, exit statuses, signals and clean-up, and hangs
//!   that explain themselves (a PE that exits without finalize while the others wait,
//!   SIGQUIT and `--timeout` making every PE say where it waits; PEs of [`shmem_pes`]);
//! * [`node_oshrun`]: the node scenarios as `oshrun -n N` jobs on one node;
//! * [`hydra`]: the node scenarios under `mpiexec.hydra -launcher fork`;
//! * [`pmi_server`]: gsas's PMI-1 server with ranks over socketpairs and TCP;
//! * [`pmi_hydra`]: gsas's PMI client under Hydra (fd and port modes, abort);
//! * [`pmi_singleton`]: no process manager (a singleton), and a refused PMIx launcher;
//! * [`slurm`]: a four-node Slurm cluster of its own running C programs (root, x86_64);
//! * [`scripts`]: the repository's scripts answer `--help` and do nothing else.
//!
//! The ranks and PEs are this binary again in child mode: [`child_pe`] plays the PMI role
//! ([`gsas_tests::pmi::ROLE`]) or runs the node scenario the parent named.

mod hydra;
mod node_oshrun;
mod oshrun;
mod pmi_hydra;
mod pmi_server;
mod pmi_singleton;
mod scripts;
#[path = "../shmem_pes/mod.rs"]
mod shmem_pes;
mod slurm;

/// The child entry point: a rank or PE started by a test runs its role or scenario and
/// exits; run as an ordinary test it does nothing.
#[test]
fn child_pe() {
    if let Some(s) = gsas_tests::node::scenario() {
        shmem_pes::child(&s);
        gsas_tests::node::child();
    } else {
        gsas_tests::pmi::child_entry();
    }
}
