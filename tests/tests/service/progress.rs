//! Progress on the remote path without the program's help: two nodes on loopback (an
//! in-process atomic service each, one PE each), and PEs that stop calling the node client
//! right after an operation.
//!
//! * **Blocking operations are sent before they return**: each PE writes a flag into the
//!   other's heap with a blocking put (then, in a second round, with a posted atomic
//!   followed by `progress`), then both spin on plain loads of their own flag and call
//!   nothing until it arrives.
//! * **Non-blocking operations leave while the PE computes**: the same with `put_nbi`,
//!   which shares frames and is sent by the progress keeper.
//! * **The progress keeper acknowledges for a computing PE**: each PE runs a fetching
//!   atomic on the other node, then sleeps three times the services' reliability deadline
//!   without calling the node client, then runs another. The service's reply frame of the
//!   first atomic stays unacknowledged unless something polls the PE's socket; a service
//!   declares a peer unreachable after its deadline and drops its replies from then on, so
//!   without the keeper the second atomic never completes.
//!
//! Child mode as in the other node tests: the parent sets [`SCENARIO`] and starts this test
//! binary again through `self_test_argv("child_pe")`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gsas_core::wire::{AtomicOp, AtomicType};
use gsas_launch::oshrun::job::{JobSpec, PeLaunch, run_job};
use gsas_launch::oshrun::pe_env;
use gsas_node::{Ctx, HEAP, Node, NodeOptions};
use gsas_tests::launch::self_test_argv;

/// The variable naming the scenario a child runs.
const SCENARIO: &str = "GSAS_PROGRESS_SCENARIO";
/// The services' reliability deadline: short, to keep the test short, but long enough that
/// a PE and the services starved by a loaded machine (qemu, more processes than cores)
/// still exchange an acknowledgement in time.
const SERVICE_DEADLINE: Duration = Duration::from_secs(3);
/// How long a plain-load wait may take before the check fails.
const FLAG_LIMIT: Duration = Duration::from_secs(60);

/// In a child PE (the parent set [`SCENARIO`]): runs the scenario and ends the process;
/// otherwise returns at once. Called by the binary's `child_pe`.
pub(crate) fn child() {
    if let Ok(s) = std::env::var(SCENARIO) {
        let node = Node::init(NodeOptions {
            heap_size: Some(1 << 20),
            ..NodeOptions::default()
        })
        .unwrap_or_else(|e| panic!("Node::init: {e}"));
        match s.as_str() {
            "flags" => flags(&node),
            "computing" => computing(&node),
            other => panic!("unknown scenario {other}"),
        }
        node.finalize()
            .unwrap_or_else(|e| panic!("PE {}: finalize: {e}", node.rank()));
        std::process::exit(0);
    }
}

/// The word at `offset` of this PE's heap, for plain loads.
fn own_word(node: &Node, offset: u64) -> &AtomicU64 {
    let base = node.local_base(node.rank(), HEAP).expect("own heap mapped");
    // SAFETY: `offset` is an 8-byte aligned offset inside this PE's heap (allocated by the
    // caller), which stays mapped while `node` lives; other writers use atomics or the
    // service's stores of whole words.
    unsafe { AtomicU64::from_ptr(base.as_ptr().add(offset as usize).cast()) }
}

/// Spins on plain loads, calling nothing, until the word at `offset` is `want`.
fn load_until(node: &Node, offset: u64, want: u64, what: &str) {
    let word = own_word(node, offset);
    let t0 = Instant::now();
    while word.load(Ordering::Acquire) != want {
        assert!(
            t0.elapsed() < FLAG_LIMIT,
            "PE {}: {what}: {want} never arrived while nobody called the node client (it is {})",
            node.rank(),
            word.load(Ordering::Acquire)
        );
        std::hint::spin_loop();
    }
}

fn flags(node: &Node) {
    let other = 1 - node.rank();
    assert_ne!(
        node.node_of(other),
        node.node_of(node.rank()),
        "PEs on one node"
    );
    let flag = node.alloc(64).unwrap().expect("64 bytes");
    node.barrier_all().unwrap();
    // A blocking put.
    let v = 100 + u64::from(node.rank());
    node.put(Ctx::DEFAULT, other, HEAP, flag, &v.to_le_bytes())
        .unwrap();
    load_until(node, flag, 100 + u64::from(other), "blocking put");
    // A posted atomic and one round of progress (what a blocking OpenSHMEM AMO does).
    node.atomic_nbi(
        Ctx::DEFAULT,
        other,
        HEAP,
        flag + 8,
        AtomicOp::Set,
        AtomicType::U64,
        200 + u64::from(node.rank()),
        0,
    )
    .unwrap();
    node.progress().unwrap();
    load_until(node, flag + 8, 200 + u64::from(other), "posted atomic");
    // A non-blocking put, and no call at all afterwards.
    let v = 300 + u64::from(node.rank());
    node.put_nbi(Ctx::DEFAULT, other, HEAP, flag + 16, &v.to_le_bytes())
        .unwrap();
    load_until(node, flag + 16, 300 + u64::from(other), "non-blocking put");
    node.quiet(Ctx::DEFAULT).unwrap();
    node.barrier_all().unwrap();
}

fn computing(node: &Node) {
    let other = 1 - node.rank();
    let counter = node.alloc(8).unwrap().expect("8 bytes");
    node.barrier_all().unwrap();
    let fetch_add = || {
        node.atomic(
            Ctx::DEFAULT,
            other,
            HEAP,
            counter,
            AtomicOp::FetchAdd,
            AtomicType::U64,
            1,
            0,
        )
    };
    assert_eq!(fetch_add().unwrap(), 0);
    // Compute (here: sleep) without calling the node client for three service deadlines.
    std::thread::sleep(3 * SERVICE_DEADLINE);
    match fetch_add() {
        Ok(old) => assert_eq!(old, 1),
        Err(e) => panic!(
            "PE {}: the fetching atomic after a long computation failed: {e}",
            node.rank()
        ),
    }
    node.barrier_all().unwrap();
    assert_eq!(own_word(node, counter).load(Ordering::Acquire), 2);
}

/// Runs `scenario` as a job of two PEs on two in-process services; returns the services'
/// `reliable.peers_failed` counters.
fn two_nodes(scenario: &str) -> Vec<u64> {
    let dir = std::env::temp_dir().join(format!("gsas-progress-{scenario}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let services =
        gsas_tests::multinode::service_threads(&dir, 2, |cfg| cfg.deadline = SERVICE_DEADLINE);
    let sockets: Vec<PathBuf> = services
        .iter()
        .map(|s| s.socket_path().to_owned())
        .collect();
    let argv = self_test_argv("child_pe").unwrap();
    let job_id = 0x2000 + u64::from(std::process::id());
    let job_key = 0xbeef_0000_0000_0000 | u64::from(std::process::id());
    let pes = (0..2u32)
        .map(|rank| {
            let mut env = pe_env(
                sockets[rank as usize].as_os_str(),
                job_id,
                job_key,
                rank as u16,
            );
            env.push((SCENARIO.into(), scenario.into()));
            // Long enough for the PEs' own waits, short enough for a quick failure.
            env.push((OsString::from("GSAS_DEADLINE_MS"), OsString::from("10000")));
            PeLaunch {
                rank,
                program: argv[0].clone(),
                args: argv[1..].to_vec(),
                env,
            }
        })
        .collect();
    let mut spec = JobSpec::single_node(pes);
    spec.node_of_rank = vec![0, 1];
    spec.tag_output = true;
    spec.time_limit = Some(Duration::from_secs(600));
    let report = run_job(spec).unwrap();
    assert_eq!(report.exit_code, 0, "{report:?}");
    // Long enough for a service to give up on a PE that left without acknowledging its
    // last replies.
    std::thread::sleep(2 * SERVICE_DEADLINE);
    let failed = services
        .iter()
        .map(|s| {
            gsas_control::query_stats(s.socket_path(), Duration::from_secs(5))
                .unwrap()
                .get("reliable.peers_failed")
                .unwrap()
        })
        .collect();
    for s in services {
        s.stop().unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
    failed
}

#[test]
fn blocking_operations_reach_a_peer_that_calls_nothing() {
    assert_eq!(
        two_nodes("flags"),
        [0, 0],
        "a service declared a PE unreachable"
    );
}

#[test]
fn the_keeper_acknowledges_while_the_pe_computes() {
    let failed = two_nodes("computing");
    // No service gave up on a PE: not while it computed (the keeper acknowledged), and not
    // after the job (finalize waits until the last replies are acknowledged).
    assert_eq!(failed, [0, 0], "a service declared a PE unreachable");
}
