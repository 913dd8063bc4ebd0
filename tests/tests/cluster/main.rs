//! Jobs over several nodes, and how they fail: the runtime's PEs, daemons and launcher as
//! real processes on loopback UDP, in network namespaces, and over the Exanet emulator.
//!
//! * [`loopback`]: `oshrun --config` jobs over two and four loopback nodes, MTUs, floods;
//! * [`services`]: two in-process services and the launcher's job runner, a killed service;
//! * [`failure`]: killed PEs, launchers and daemons end the job with the right message (a
//!   daemon killed under PEs that wait in every kind of wait, PEs of [`shmem_pes`]);
//! * [`fork`]: remote FORK (authentication, replay, output streams, a real job);
//! * [`exanet`]: jobs over an emulated QFDB (four nodes), with link faults and a cut node;
//! * [`demo`]: `scripts/demo --transport udp|exanet|verbs` as users run it, and its clean-up;
//! * [`netns`]: nodes in network namespaces joined by veth links (root);
//! * [`job_end`]: many short jobs in a row over lossy namespaces: every one ends cleanly;
//! * [`verbs`]: jobs across two emulated verbs nodes (RDMA on the software verbs device),
//!   the switch through the services, a node cut off, and a PE stopped beside CPU hogs;
//! * [`lossy_soak`]: a service and a client over a lossy link (namespaces and nftables as
//!   root, a lossy relay on loopback otherwise);
//! * [`put_signal`]: writes with an attached signal over the lossy relay, each signal
//!   watched for by an observer that then checks every byte of the data.
//!
//! The PEs are this binary again in child mode: [`child_pe`] runs the scenario the parent
//! named (the kit's `node` scenarios, or one of a module's own).

mod demo;
mod exanet;
mod failure;
mod fork;
mod job_end;
mod loopback;
mod lossy_soak;
mod netns;
mod put_signal;
mod services;
#[path = "../shmem_pes/mod.rs"]
mod shmem_pes;
mod verbs;

/// The child entry point: a PE started by a test's launcher runs its scenario and exits;
/// run as an ordinary test it does nothing.
#[test]
fn child_pe() {
    if let Some(s) = gsas_tests::node::scenario() {
        shmem_pes::child(&s);
    }
    match gsas_tests::node::scenario().as_deref() {
        Some(exanet::UNREACHABLE) => exanet::unreachable_child(),
        Some(s @ (verbs::VERBS | verbs::VERBS_CUT | verbs::VERBS_STOPPED)) => verbs::child(s),
        Some(failure::ABORT_ON_UNREACHABLE) => {
            failure::abort_on_unreachable();
            std::process::exit(0);
        }
        _ => gsas_tests::node::child(),
    }
}

/// Without a launcher a PE is a job of one with an embedded service: every node scenario
/// runs in this test's process.
#[test]
fn every_scenario_in_a_singleton_job() {
    assert!(gsas_tests::node::scenario().is_none());
    gsas_tests::node::run("all");
}
