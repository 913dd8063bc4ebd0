//! Failures in multi-node jobs (two `gsas-atomicd` on loopback, `oshrun --config`):
//!
//! * `kill -9` of a PE, started by a daemon through FORK or by the launcher: `oshrun`
//!   exits non-zero within 2 s naming the PE and its node, no PE of the job survives on
//!   any node, and `/dev/shm` holds nothing of the job;
//! * a killed daemon: a PE's operation to that node fails within the deadline of the
//!   cluster file (1.5 s here) with an error naming the node, the PE aborts the job with
//!   that message, and `oshrun` reports it and exits with the abort code;
//! * a daemon killed (SIGKILL) or stopped (SIGTERM) under its own PEs while they wait
//!   (`shmem_long_wait_until`, a `shmem_long_test` loop, `shmem_barrier_all`, a reduction,
//!   `shmem_set_lock` of a lock on the same node): a PE notices within its wait and ends the job with
//!   `the local atomic service (control socket ...) closed the connection`, long before
//!   the job's time limit;
//! * a service that answers its PEs' Leave after more than 10 s (stopped, here) fails no
//!   job that completed: a control request waits as long as the job's deadline;
//! * a PE started through FORK that exits without `shmem_finalize` while the others wait
//!   is named by `oshrun` with what they wait in; `--timeout` makes every PE, forked ones
//!   included, say where it waits.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gsas_core::wire::{AtomicOp, AtomicType};
use gsas_node::{Ctx, HEAP, Node, NodeOptions};
use gsas_tests::launch::{collect_output, self_test_argv};
use gsas_tests::multinode::{
    ClusterFile, SECRET, daemons, oshrun, pid_alive, secret_file, shipped_config, wait_ready,
};

pub(crate) const ABORT_ON_UNREACHABLE: &str = "abort-on-unreachable";
pub(crate) const LATE_LEAVE: &str = "late-leave";
const ABORT_CODE: i32 = 3;
/// How long [`a_service_slower_than_ten_seconds_at_leave_fails_no_job`] stops node 0's
/// daemon: longer than the 10 s a control request used to be given, shorter than the
/// cluster file's deadline.
const LEAVE_STOP: Duration = Duration::from_secs(13);

/// A PE of a job whose harness signals through files: the directory, and the node client.
fn harnessed_pe() -> (PathBuf, Node) {
    let dir = PathBuf::from(std::env::var_os(gsas_tests::node::SIGNAL_DIR).expect("GSAS_TEST_DIR"));
    let node = Node::init(NodeOptions {
        heap_size: Some(1 << 20),
        ..NodeOptions::default()
    })
    .unwrap_or_else(|e| panic!("Node::init: {e}"));
    (dir, node)
}

/// Tells the harness that PE `me` is ready (its pid in `dir/ready-<me>`, see `wait_ready`).
fn say_ready(dir: &Path, me: u32) {
    std::fs::write(
        dir.join(format!("ready-{me}")),
        std::process::id().to_string(),
    )
    .unwrap();
}

/// Waits (bounded) until the harness created `dir/name`.
fn await_file(dir: &Path, name: &str, me: u32) {
    let until = Instant::now() + Duration::from_secs(120);
    while !dir.join(name).exists() {
        assert!(
            Instant::now() < until,
            "PE {me}: no {name} from the harness"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Two PEs on two nodes: both complete the job (a barrier, then the pause of the last
/// finalize) and say they are ready; once the harness stopped node 0's daemon, they leave
/// their services, node 0's answering only when the harness lets it run again.
pub(crate) fn late_leave() {
    let (dir, node) = harnessed_pe();
    let me = node.rank();
    node.barrier_all().unwrap();
    node.pause().unwrap();
    say_ready(&dir, me);
    await_file(&dir, "stopped", me);
    node.leave()
        .unwrap_or_else(|e| panic!("PE {me}: leaving the job: {e}"));
}

/// Two PEs on two nodes: after both are ready the harness kills node 1's daemon; PE 0's
/// next operation to PE 1 must fail naming node 1, and PE 0 aborts the job with it.
pub(crate) fn abort_on_unreachable() {
    let (dir, node) = harnessed_pe();
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
    say_ready(&dir, me);
    await_file(&dir, "killed", me);
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

#[test]
fn a_udp_mtu_unlike_the_services_is_named_at_start() {
    // Before: the PEs' datagrams of the other size were never answered, and the job ended
    // by a time-out that did not mention the MTU.
    let dir = gsas_tests::node::scratch_dir("mtu-mismatch");
    let (cf, file) = cluster(&dir, None);
    let _ds = daemons(&cf, &file);
    let out = collect_output(
        oshrun()
            .arg("--config")
            .arg(&file)
            .args(["-n", "2", "--timeout", "120", "--"])
            .args(self_test_argv("child_pe").unwrap())
            .env(gsas_tests::node::SCENARIO, "hang")
            .env(gsas_tests::node::SIGNAL_DIR, &dir)
            .env("GSAS_UDP_MTU", "1472")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(300),
    )
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("GSAS_UDP_MTU=1472 but the atomic service of node 0")
            && err.contains("uses 61440"),
        "{err}"
    );
    assert!(
        !err.contains("ran longer than"),
        "ended by the time limit: {err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
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
    let got = unsafe { libc::kill(pids[victim] as libc::pid_t, libc::SIGKILL) };
    assert_eq!(got, 0);
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

/// `oshrun --config FILE -n 4 --fork EXTRA -- <the child PE>` running `scenario` with
/// `GSAS_TEST_DIR` = `dir`; stdin and stdout null, stderr piped.
fn forked_job(file: &Path, dir: &Path, extra: &[&str], scenario: &str) -> Command {
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(file)
        .args(["-n", "4", "--fork"])
        .args(extra)
        .arg("--")
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, scenario)
        .env(gsas_tests::node::SIGNAL_DIR, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn kill_9_of_the_launcher_makes_the_daemons_end_their_pes() {
    let dir = gsas_tests::node::scratch_dir("fail-kill-launcher");
    let (cf, file) = cluster(&dir, None);
    let ds = daemons(&cf, &file);
    let mut cmd = forked_job(&file, &dir, &[], "hang");
    cmd.stderr(Stdio::null());
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

/// `oshrun --config file -n 2 OPTIONS -- <a PE of scenario>` with the harness's signal
/// directory `dir`, the cluster file's deadline and standard error piped, once both PEs
/// are ready: the launcher and the PEs' pids.
fn harnessed_job(
    dir: &Path,
    file: &Path,
    options: &[&str],
    scenario: &str,
) -> (std::process::Child, Vec<u32>) {
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(file)
        .args(["-n", "2"])
        .args(options)
        .arg("--")
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, scenario)
        .env(gsas_tests::node::SIGNAL_DIR, dir)
        .env_remove("GSAS_DEADLINE_MS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pids = wait_ready(dir, 2, &mut child, Duration::from_secs(300));
    (child, pids)
}

#[test]
fn a_killed_daemon_fails_operations_and_aborts_the_job_naming_the_node() {
    let dir = gsas_tests::node::scratch_dir("fail-daemon");
    let (cf, file) = cluster(&dir, Some("1500"));
    let mut ds = daemons(&cf, &file);
    let (child, pids) = harnessed_job(&dir, &file, &[], ABORT_ON_UNREACHABLE);
    ds[1].kill();
    std::fs::write(dir.join("killed"), b"").unwrap();
    let t0 = Instant::now();
    let out = collect_output(child, Duration::from_secs(120)).unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(ABORT_CODE), "{err}");
    // The PE logs the error (Node::abort), and oshrun prints it as the PE wrote it (gsas's
    // PEs send it to gsas's PMI server in hex, blanks and all).
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
        pids[0], message
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

/// A job that completed must not fail at exit because its node's service answered the PE's
/// Leave late: a control request waits as long as the job's deadline (the cluster file's
/// 30 s here), not a fixed 10 s. Node 0's daemon is stopped (SIGSTOP) for [`LEAVE_STOP`]
/// after both PEs finished and before they leave. Before, PE 0 failed with `waiting for the
/// reply to Leave ...: timed out after 10.0 s` and `oshrun` exited 255; so did PEs of a
/// 512-PE job over sixteen namespaces on this 2-CPU machine whose service was that slow.
#[test]
fn a_service_slower_than_ten_seconds_at_leave_fails_no_job() {
    let dir = gsas_tests::node::scratch_dir("late-leave");
    let (cf, file) = cluster(&dir, Some("30000"));
    let ds = daemons(&cf, &file);
    let (child, pids) = harnessed_job(&dir, &file, &["--timeout", "120"], LATE_LEAVE);
    let daemon = ds[0].child.id() as libc::pid_t;
    /// Lets the daemon run again however the test ends.
    struct Resume(libc::pid_t);
    impl Drop for Resume {
        fn drop(&mut self) {
            // SAFETY: a signal to the test's own daemon process.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(daemon, libc::SIGSTOP) }, 0);
    let resume = Resume(daemon);
    std::fs::write(dir.join("stopped"), b"").unwrap();
    let t0 = Instant::now();
    std::thread::sleep(LEAVE_STOP);
    // PE 0 is still there, waiting for its Leave to be answered (not exited, nor a zombie
    // of its stopped daemon): the stop did meet the Leave.
    let state = std::fs::read_to_string(format!("/proc/{}/stat", pids[0])).unwrap_or_default();
    let state = state
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next());
    assert!(
        matches!(state, Some(s) if s != "Z" && s != "X"),
        "PE 0 (pid {}) ended while its daemon was stopped: {state:?}",
        pids[0]
    );
    drop(resume);
    let out = collect_output(child, Duration::from_secs(120)).unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("Leave"),
        "a PE reported its Leave although the job passed: {err}"
    );
    eprintln!(
        "failure: node 0's service stopped {} s at the PEs' Leave: job passed, {:.1} s after the stop",
        LEAVE_STOP.as_secs(),
        took.as_secs_f64()
    );
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `oshrun --config file -n 4 --timeout 120 [--fork] -- <a PE of shmem_pes' scenario>`
/// with standard error piped.
fn shmem_job(
    file: &Path,
    dir: &Path,
    fork: bool,
    scenario: &str,
    env: &[(&str, &str)],
) -> std::process::Child {
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(file)
        .args(["-n", "4", "--timeout", "120"]);
    if fork {
        cmd.arg("--fork");
    }
    cmd.arg("--")
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, scenario)
        .env(gsas_tests::node::SIGNAL_DIR, dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

/// Two nodes of two PEs, all started by the launcher (so that they outlive a daemon):
/// once every PE waits as `scenario` has it, node 1's daemon gets `signal`. A PE of node
/// 1 must notice within its wait, end the job with the documented message naming `call`
/// and the daemon's socket, and the job must end by that abort, not by its time limit.
fn daemon_death_is_explained(name: &str, scenario: &str, call: &str, signal: i32) {
    node_death_is_explained(name, scenario, call, signal, 1, &[2, 3]);
}

/// [`daemon_death_is_explained`] with the daemon of `node` and the PEs `waiters` of that
/// node that wait in `call`.
fn node_death_is_explained(
    name: &str,
    scenario: &str,
    call: &str,
    signal: i32,
    node: usize,
    waiters: &[usize],
) {
    let dir = gsas_tests::node::scratch_dir(name);
    let (cf, file) = cluster(&dir, None);
    let ds = daemons(&cf, &file);
    let mut child = shmem_job(&file, &dir, false, scenario, &[]);
    let pids = wait_ready(&dir, 4, &mut child, Duration::from_secs(300));
    // SAFETY: kill has no memory arguments.
    let got = unsafe { libc::kill(ds[node].child.id() as libc::pid_t, signal) };
    assert_eq!(got, 0);
    let out = collect_output(child, Duration::from_secs(300)).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "{err}");
    let want = format!(
        "{call}: the local atomic service (control socket {}) closed the connection: it stopped or died",
        cf.sockets[node].display()
    );
    // Every waiting PE of the node notices; the first abort ends the job.
    assert!(
        waiters.iter().any(|&pe| {
            gsas_tests::launch::pe_line(&err, pe as u32, &want).is_some()
                && err.contains(&format!(
                    "oshrun: PE {pe} (pid {}) aborted the job with code 255",
                    pids[pe]
                ))
        }),
        "none of PEs {waiters:?} ended the job saying {want:?}: {err}"
    );
    for pid in &pids {
        assert!(!pid_alive(*pid), "PE pid {pid} survived: {err}");
    }
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_daemon_killed_under_pes_in_wait_until_is_noticed_and_named() {
    daemon_death_is_explained(
        "dead-wait-kill",
        crate::shmem_pes::WAIT_UNTIL,
        "shmem_long_wait_until",
        libc::SIGKILL,
    );
}

#[test]
fn a_daemon_stopped_under_pes_in_wait_until_is_noticed_and_named() {
    daemon_death_is_explained(
        "dead-wait-term",
        crate::shmem_pes::WAIT_UNTIL,
        "shmem_long_wait_until",
        libc::SIGTERM,
    );
}

#[test]
fn a_daemon_killed_under_pes_in_a_barrier_is_noticed_and_named() {
    daemon_death_is_explained(
        "dead-barrier-kill",
        crate::shmem_pes::BARRIER,
        "shmem_barrier_all",
        libc::SIGKILL,
    );
}

#[test]
fn a_daemon_stopped_under_pes_in_a_barrier_is_noticed_and_named() {
    daemon_death_is_explained(
        "dead-barrier-term",
        crate::shmem_pes::BARRIER,
        "shmem_barrier_all",
        libc::SIGTERM,
    );
}

#[test]
fn a_daemon_killed_under_pes_in_a_collective_is_noticed_and_named() {
    daemon_death_is_explained(
        "dead-coll-kill",
        crate::shmem_pes::COLLECTIVE,
        "shmem_long_sum_reduce",
        libc::SIGKILL,
    );
}

#[test]
fn a_daemon_stopped_under_pes_in_a_collective_is_noticed_and_named() {
    daemon_death_is_explained(
        "dead-coll-term",
        crate::shmem_pes::COLLECTIVE,
        "shmem_long_sum_reduce",
        libc::SIGTERM,
    );
}

#[test]
fn a_daemon_killed_under_pes_polling_with_test_is_noticed_and_named() {
    daemon_death_is_explained(
        "dead-test-kill",
        crate::shmem_pes::TEST_LOOP,
        "shmem_long_test",
        libc::SIGKILL,
    );
}

#[test]
fn a_daemon_killed_under_a_pe_waiting_for_a_lock_is_noticed_and_named() {
    // PE 1 waits for the lock PE 0 (same node) holds: by CPU atomics, no operation
    // through a service that could fail.
    node_death_is_explained(
        "dead-lock-kill",
        crate::shmem_pes::LOCK,
        "shmem_set_lock",
        libc::SIGKILL,
        0,
        &[1],
    );
}

#[test]
fn a_forked_pe_that_exits_without_finalize_is_named_with_the_call_the_others_wait_in() {
    let dir = gsas_tests::node::scratch_dir("fork-exit-early");
    let (cf, file) = cluster(&dir, None);
    let ds = daemons(&cf, &file);
    let mut child = shmem_job(
        &file,
        &dir,
        true,
        crate::shmem_pes::EXIT_EARLY,
        &[(crate::shmem_pes::VICTIM, "3")],
    );
    let pids = wait_ready(&dir, 4, &mut child, Duration::from_secs(300));
    let out = collect_output(child, Duration::from_secs(300)).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let want = format!(
        "oshrun: PE 3 (pid {} on node 1 (loop1, 127.0.0.1:{})) exited with status 0 without \
         calling shmem_finalize; PEs 0-2 are in shmem_barrier_all; terminating the job",
        pids[3], cf.ports[1]
    );
    assert!(err.contains(&want), "{err}");
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_same_diagnostic_of_forked_pes_on_two_nodes_is_printed_once_with_the_pe_list() {
    let dir = gsas_tests::node::scratch_dir("fork-merge");
    let (cf, file) = cluster(&dir, None);
    let ds = daemons(&cf, &file);
    let mut cmd = forked_job(&file, &dir, &[], crate::shmem_pes::SAME_WORDS);
    let out = collect_output(cmd.spawn().unwrap(), Duration::from_secs(300)).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Lines of PEs on both nodes, arriving through the daemons' streams, are merged (one
    // line when the four said it within the merge window; at worst a few), each PE once.
    let lists = gsas_tests::launch::pes_saying(&err, " the same words on every PE");
    let mut all: Vec<u32> = lists.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, [0, 1, 2, 3], "{err}");
    assert!(lists.len() < 4, "nothing merged: {err}");
    let logs = gsas_tests::launch::pes_saying(&err, "warn: the same warning on every PE");
    assert!(
        logs.len() < 4 && logs.iter().map(Vec::len).sum::<usize>() == 4,
        "{err}"
    );
    for pe in 0..4 {
        assert_eq!(
            gsas_tests::launch::pes_saying(&err, &format!(" words of PE {pe} alone")),
            [vec![pe]],
            "{err}"
        );
    }
    drop(ds);
    let _ = cf;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_timeout_makes_forked_pes_say_where_they_wait() {
    let dir = gsas_tests::node::scratch_dir("fork-timeout");
    let (cf, file) = cluster(&dir, None);
    let ds = daemons(&cf, &file);
    let mut cmd = forked_job(
        &file,
        &dir,
        &["--timeout", "15"],
        crate::shmem_pes::WAIT_UNTIL,
    );
    let out = collect_output(cmd.spawn().unwrap(), Duration::from_secs(300)).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{err}");
    for pe in 0..4 {
        assert!(
            gsas_tests::launch::pe_line(
                &err,
                pe,
                " in shmem_long_wait_until: waiting for the variable at 0x"
            )
            .is_some(),
            "no line of PE {pe}: {err}"
        );
    }
    assert!(
        err.contains("oshrun: the job ran longer than 15.0 s; terminating the job"),
        "{err}"
    );
    drop(ds);
    let _ = cf;
    std::fs::remove_dir_all(&dir).unwrap();
}
