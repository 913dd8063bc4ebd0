//! Failures in multi-node jobs (two `gsas-atomicd` on loopback, `oshrun --config`):
//!
//! * `kill -9` of a PE, started by a daemon through FORK or by the launcher: `oshrun`
//!   exits non-zero within 2 s naming the PE and its node, no PE of the job survives on
//!   any node, and `/dev/shm` holds nothing of the job;
//! * a killed daemon: a PE's operation to that node fails within the deadline of the
//!   cluster file (1.5 s here) with an error naming the node, the PE aborts the job with
//!   that message, and `oshrun` reports it and exits with the abort code.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gsas::node::{Ctx, HEAP, Node, NodeOptions};
use gsas_core::wire::{AtomicOp, AtomicType};
use gsas_tests::launch::{collect_output, self_test_argv};
use gsas_tests::multinode::{
    ClusterFile, SECRET, daemons, oshrun, pid_alive, secret_file, shipped_config, wait_ready,
};

pub(crate) const ABORT_ON_UNREACHABLE: &str = "abort-on-unreachable";
const ABORT_CODE: i32 = 3;

/// Two PEs on two nodes: after both are ready the harness kills node 1's daemon; PE 0's
/// next operation to PE 1 must fail naming node 1, and PE 0 aborts the job with it.
pub(crate) fn abort_on_unreachable() {
    let dir = PathBuf::from(std::env::var_os(gsas_tests::node::SIGNAL_DIR).expect("GSAS_TEST_DIR"));
    let node = Node::init(NodeOptions {
        heap_size: Some(1 << 20),
        ..NodeOptions::default()
    })
    .unwrap_or_else(|e| panic!("Node::init: {e}"));
    let me = node.rank();
    let slot = node.calloc(1, 8).unwrap().expect("slot");
    node.barrier_all().unwrap();
    node.atomic(
        Ctx::DEFAULT,
        1 - me,
        HEAP,
        slot,
        AtomicOp::Add,
        AtomicType::U64,
        1,
        0,
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("ready-{me}")),
        std::process::id().to_string(),
    )
    .unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    while !dir.join("killed").exists() {
        assert!(
            Instant::now() < until,
            "PE {me}: the daemon was never killed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    if me == 0 {
        let t0 = Instant::now();
        let mut buf = [0u8; 8];
        let e = node
            .get(Ctx::DEFAULT, 1, HEAP, slot, &mut buf)
            .expect_err("a get from a node whose daemon was killed must fail");
        let waited = t0.elapsed();
        assert!(waited < Duration::from_secs(10), "the get took {waited:?}");
        node.abort(ABORT_CODE, &format!("PE 0 gives up: {e}"));
    }
    // PE 1 waits to be ended by the launcher (bounded).
    std::thread::sleep(Duration::from_secs(120));
    panic!("PE {me} was not ended after the abort");
}

fn cluster(dir: &Path, timeout_ms: Option<&str>) -> (ClusterFile, PathBuf) {
    let secret = secret_file(dir, "secret", SECRET, 0o600);
    let mut cf = ClusterFile::from_template(&shipped_config("two-nodes-loopback.toml"), dir)
        .with_fork(&secret);
    if let Some(ms) = timeout_ms {
        cf = cf.with_default("service_timeout_ms", ms);
    }
    let file = cf.write(&dir.join("cluster.toml"));
    (cf, file)
}

/// Runs a hanging 4-PE job on two nodes, kills PE `victim` with SIGKILL and checks the end.
fn kill_9_ends_the_job(name: &str, fork: bool, victim: usize) {
    let dir = gsas_tests::node::scratch_dir(name);
    let (cf, file) = cluster(&dir, None);
    let _ds = daemons(&cf, &file);
    let shm_before = gsas_tests::node::dev_shm();
    let mut cmd = oshrun();
    cmd.arg("--config").arg(&file).args(["-n", "4"]);
    if fork {
        cmd.arg("--fork");
    }
    cmd.arg("--")
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "hang")
        .env(gsas_tests::node::SIGNAL_DIR, &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pids = wait_ready(&dir, 4, &mut child, Duration::from_secs(300));
    // SAFETY: kill has no memory arguments.
    assert_eq!(
        unsafe { libc::kill(pids[victim] as libc::pid_t, libc::SIGKILL) },
        0
    );
    let t0 = Instant::now();
    let out = collect_output(child, Duration::from_secs(60)).unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{err}");
    assert!(took < Duration::from_secs(2), "oshrun took {took:?}: {err}");
    let node = victim / 2;
    let want = if fork {
        format!(
            "oshrun: PE {victim} (pid {} on node {node} (loop{node}, 127.0.0.1:{})) was killed by signal 9 (SIGKILL); terminating the job",
            pids[victim], cf.ports[node]
        )
    } else {
        format!(
            "oshrun: PE {victim} (pid {}) was killed by signal 9 (SIGKILL); terminating the job",
            pids[victim]
        )
    };
    assert!(err.contains(&want), "{err}");
    for pid in &pids {
        assert!(!pid_alive(*pid), "PE pid {pid} survived the job: {err}");
    }
    let new: Vec<_> = gsas_tests::node::dev_shm()
        .difference(&shm_before)
        .filter(|n| n.contains("gsas"))
        .cloned()
        .collect();
    assert!(new.is_empty(), "the job left {new:?} in /dev/shm");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kill_9_of_a_forked_pe_ends_the_job_everywhere_within_2_s() {
    kill_9_ends_the_job("fail-kill-forked", true, 3);
}

#[test]
fn kill_9_of_a_launcher_started_pe_ends_the_job_everywhere_within_2_s() {
    kill_9_ends_the_job("fail-kill-local", false, 1);
}

#[test]
fn kill_9_of_the_launcher_makes_the_daemons_end_their_pes() {
    let dir = gsas_tests::node::scratch_dir("fail-kill-launcher");
    let (cf, file) = cluster(&dir, None);
    let ds = daemons(&cf, &file);
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(&file)
        .args(["-n", "4", "--fork", "--"])
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "hang")
        .env(gsas_tests::node::SIGNAL_DIR, &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let pids = wait_ready(&dir, 4, &mut child, Duration::from_secs(300));
    child.kill().unwrap();
    child.wait().unwrap();
    // The daemons see the launcher's connections end and end the PEs (SIGTERM).
    let until = Instant::now() + Duration::from_secs(30);
    while pids.iter().any(|&p| pid_alive(p)) {
        assert!(
            Instant::now() < until,
            "PEs survived their launcher: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for d in &ds {
        let until = Instant::now() + Duration::from_secs(30);
        while d.stats().get("fork.jobs_active") != Some(0) {
            assert!(
                Instant::now() < until,
                "node {}: the job stayed active",
                d.node
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            d.log_text().contains("the launcher's connection ended"),
            "{}",
            d.log_text()
        );
    }
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_killed_daemon_fails_operations_and_aborts_the_job_naming_the_node() {
    let dir = gsas_tests::node::scratch_dir("fail-daemon");
    let (cf, file) = cluster(&dir, Some("1500"));
    let mut ds = daemons(&cf, &file);
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(&file)
        .args(["-n", "2", "--"])
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, ABORT_ON_UNREACHABLE)
        .env(gsas_tests::node::SIGNAL_DIR, &dir)
        .env_remove("GSAS_DEADLINE_MS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pids = wait_ready(&dir, 2, &mut child, Duration::from_secs(300));
    ds[1].kill();
    std::fs::write(dir.join("killed"), b"").unwrap();
    let t0 = Instant::now();
    let out = collect_output(child, Duration::from_secs(120)).unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(ABORT_CODE), "{err}");
    // The PE logs the error as it is; PMI-1 carries the message with '_' for blanks.
    let message = format!(
        "PE 0 gives up: node 1 (127.0.0.1:{}): no answer for 1.5 s",
        cf.ports[1]
    );
    assert!(
        err.contains(&format!(
            "PE 0 aborts the job (code {ABORT_CODE}): {message}"
        )),
        "{err}"
    );
    let want = format!(
        "oshrun: PE 0 (pid {}) aborted the job with code {ABORT_CODE}: {}; terminating the job",
        pids[0],
        message.replace(' ', "_")
    );
    assert!(err.contains(&want), "{err}");
    assert!(
        took < Duration::from_secs(15),
        "the job took {took:?} to end: {err}"
    );
    for pid in &pids {
        assert!(!pid_alive(*pid), "PE pid {pid} survived: {err}");
    }
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}
