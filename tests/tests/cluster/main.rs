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
//! * [`sixteen`]: sixteen namespaces: every collective at 16 x 2 and 8 x 4 PEs, every pair
//!   of nodes, a PE killed on node 11 (root);
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
mod sixteen;
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
        Some(failure::LATE_LEAVE) => {
            failure::late_leave();
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

/// The variable that makes [`a_pe_without_a_service_starts_one_and_ends_it`] play the PE
/// (`process`: the default starter; `thread`: `gsas_launch::embedded::start_in_process`).
const NODE_SERVICE_CHILD: &str = "GSAS_TEST_NODE_SERVICE";

/// A PE that finds no service for its node (no launcher, no daemon) starts
/// `gsas-atomicd --private` as its child process (the PE links no service code), its
/// operations go through it (`GSAS_DIRECT=0`: puts, gets and atomics through the service),
/// and `finalize` ends it; a program that installs
/// `gsas_launch::embedded::start_in_process` gets a thread instead and no process.
#[test]
fn a_pe_without_a_service_starts_one_and_ends_it() {
    if let Some(mode) = std::env::var_os(NODE_SERVICE_CHILD) {
        node_service_child(&mode.to_string_lossy());
    }
    for mode in ["process", "thread"] {
        let mut cmd =
            gsas_tests::launch::self_test("a_pe_without_a_service_starts_one_and_ends_it").unwrap();
        cmd.env(NODE_SERVICE_CHILD, mode)
            .env("GSAS_DIRECT", "0")
            .env_remove("GSAS_SERVICE")
            .env_remove("GSAS_CONFIG")
            .env_remove("PMI_FD")
            .env_remove("PMI_PORT");
        let out =
            gsas_tests::launch::run_with_timeout(&mut cmd, std::time::Duration::from_secs(300))
                .unwrap();
        let shown = gsas_tests::multinode::show(&out);
        assert!(out.status.success(), "{mode}: {shown}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&format!("node service ok: {mode}")),
            "{mode}: {shown}"
        );
    }
}

/// The child processes of this process whose command line names `gsas-atomicd`: (pid,
/// command line).
fn daemon_children() -> Vec<(u32, String)> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    pids.into_iter()
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            line.contains("gsas-atomicd").then_some((pid, line))
        })
        .collect()
}

fn node_service_child(mode: &str) -> ! {
    use gsas_core::wire::{AtomicOp, AtomicType};
    use gsas_node::{Ctx, HEAP, Node, NodeOptions};
    if mode == "thread" {
        assert!(gsas_node::node_service::set_service_starter(
            gsas_launch::embedded::start_in_process
        ));
    }
    let node = Node::init(NodeOptions {
        heap_size: Some(1 << 20),
        ..NodeOptions::default()
    })
    .unwrap();
    let daemons = daemon_children();
    match mode {
        "process" => {
            assert_eq!(daemons.len(), 1, "{daemons:?}");
            assert!(daemons[0].1.contains("--private"), "{daemons:?}");
        }
        _ => assert!(daemons.is_empty(), "a thread was asked for: {daemons:?}"),
    }
    let slot = node.calloc(1, 8).unwrap().expect("8 bytes");
    node.put(Ctx::DEFAULT, 0, HEAP, slot, &41u64.to_le_bytes())
        .unwrap();
    node.quiet(Ctx::DEFAULT).unwrap();
    let old = node
        .atomic(
            Ctx::DEFAULT,
            0,
            HEAP,
            slot,
            AtomicOp::FetchInc,
            AtomicType::U64,
            0,
            0,
        )
        .unwrap();
    assert_eq!(old, 41);
    let mut back = [0u8; 8];
    node.get(Ctx::DEFAULT, 0, HEAP, slot, &mut back).unwrap();
    assert_eq!(u64::from_le_bytes(back), 42);
    node.finalize().unwrap();
    for (pid, line) in &daemons {
        // Reaped by finalize: no such process any more (not even a zombie).
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{line} (pid {pid}) outlived finalize"
        );
    }
    println!("node service ok: {mode}");
    std::process::exit(0);
}
