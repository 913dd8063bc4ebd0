//! Sixteen nodes on one machine: sixteen network namespaces on one bridge, one
//! `gsas-atomicd` in each, the launcher in node 0's namespace and every other node's PEs
//! started through FORK over the veth links, 1472-byte datagrams (Ethernet-sized, so that
//! every transfer is cut into many). One test, in four jobs on the same daemons:
//!
//! * the randomized collective checker (`shmem/examples/coll_check.rs`: every collective
//!   in team and active-set forms, on the world team, split teams and active sets, sizes
//!   around the datagram boundaries, every result checked exactly on every PE) at 16 x 2
//!   PEs,
//! * the same at 8 x 4 PEs (`--ppn 4`: the first eight nodes),
//! * point-to-point and atomics between every pair of PEs, so of nodes, at 16 x 2 (the
//!   kit's `pairs` scenario: a 3000-byte put into and get from every other PE, fetch-add,
//!   add, increment and or from every PE into every PE, each result checked),
//! * a PE on node 11 killed with SIGKILL while the 32 PEs wait: the job ends with status
//!   137 and the line that names the PE, its pid and node 11, and no PE survives it.
//!
//! Needs root (a loud skip otherwise, a failure with `GSAS_REQUIRE_NETNS=1`). Under
//! qemu-user it is skipped with a note unless `GSAS_QEMU_FULL=1`: sixteen emulated daemons
//! and 32 emulated PEs on two cores take many minutes, and the code paths are those of the
//! two- and four-namespace tests, which run there.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gsas_tests::launch::{collect_output, example, launch, program, run_with_timeout};
use gsas_tests::multinode::{SECRET, coll_check_seed, pid_alive, secret_file, show, wait_ready};
use gsas_tests::netns::{Cluster, address, assert_nodes_served, cluster_file};

/// Nodes of the cluster.
const NODES: usize = 16;
/// Longest one job may take (also given to `oshrun --timeout`).
const LIMIT: Duration = Duration::from_secs(600);
/// The node whose PE is killed.
const VICTIM_NODE: usize = 11;

/// `oshrun --config FILE -n PES --timeout .. [--ppn PPN]` in node 0's namespace; the
/// caller adds the program.
fn oshrun(ns: &Cluster, file: &std::path::Path, pes: u32, ppn: Option<u32>) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.nodes[0]])
        .args(launch().prefix())
        .arg(program("oshrun"))
        .arg("--config")
        .arg(file)
        .args(["-n", &pes.to_string(), "--timeout"])
        .arg(LIMIT.as_secs().to_string());
    if let Some(k) = ppn {
        cmd.args(["--ppn", &k.to_string()]);
    }
    cmd.env_remove("GSAS_UDP_MTU")
        .env_remove("GSAS_DEADLINE_MS");
    cmd
}

/// The collective checker at `pes` PEs (`ppn` per node): `count` collectives from `seed`.
fn coll_check(ns: &Cluster, file: &std::path::Path, pes: u32, ppn: u32, count: u32, seed: u64) {
    let mut cmd = oshrun(ns, file, pes, Some(ppn));
    cmd.arg("--")
        .arg(example("shmem", "coll_check", &["verbs"]))
        .args(["--count", &count.to_string(), "--seed", &seed.to_string()])
        .args(["--max-bytes", "6000", "--progress", "0"]);
    let t0 = Instant::now();
    let out = run_with_timeout(&mut cmd, LIMIT + Duration::from_secs(60)).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = format!("coll_check: {count} collectives on {pes} PEs checked exactly");
    assert!(
        out.status.success() && stdout.contains(&line),
        "{} x {ppn} PEs, seed {seed} (GSAS_COLL_CHECK_SEED={seed} repeats it): {}",
        pes / ppn,
        show(&out)
    );
    let summary = stdout.lines().find(|l| l.contains(&line)).unwrap_or("");
    eprintln!(
        "sixteen nodes: {} x {ppn} PEs in {:.1} s: {summary}",
        pes / ppn,
        t0.elapsed().as_secs_f64()
    );
}

/// The kit's `pairs` scenario at 16 x 2 PEs; every PE must say it is done.
fn pairs(ns: &Cluster, file: &std::path::Path) {
    let pes = 2 * NODES as u32;
    let mut cmd = oshrun(ns, file, pes, Some(2));
    cmd.args(["--tag-output", "--"])
        .args(gsas_tests::launch::self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "pairs");
    let t0 = Instant::now();
    let out = run_with_timeout(&mut cmd, LIMIT + Duration::from_secs(60)).unwrap();
    assert!(out.status.success(), "pairs: {}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for pe in 0..pes {
        let line = format!("[{pe}] PE {pe} of {pes}: pairs ok");
        assert!(stdout.contains(&line), "missing {line:?}: {}", show(&out));
    }
    eprintln!(
        "sixteen nodes: pairs at 16 x 2 PEs in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// 16 x 2 PEs that wait; the first PE of node [`VICTIM_NODE`] is killed.
fn killed_pe(ns: &Cluster, file: &std::path::Path, dir: &std::path::Path) {
    let pes = 2 * NODES as u32;
    let mut cmd = oshrun(ns, file, pes, Some(2));
    cmd.arg("--")
        .args(gsas_tests::launch::self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "hang")
        .env(gsas_tests::node::SIGNAL_DIR, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pids = wait_ready(dir, pes, &mut child, LIMIT);
    let victim = 2 * VICTIM_NODE;
    // SAFETY: kill has no memory arguments.
    let got = unsafe { libc::kill(pids[victim] as libc::pid_t, libc::SIGKILL) };
    assert_eq!(got, 0);
    let out = collect_output(child, Duration::from_secs(120)).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{err}");
    let want = format!(
        "oshrun: PE {victim} (pid {} on node {VICTIM_NODE} (ns{VICTIM_NODE}, {}:7470)) was killed by signal 9 (SIGKILL); terminating the job",
        pids[victim],
        address(VICTIM_NODE)
    );
    assert!(err.contains(&want), "{err}");
    // The others are ended by the launcher and their daemons, on every node.
    let until = Instant::now() + Duration::from_secs(30);
    while pids.iter().any(|&p| pid_alive(p)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let alive: Vec<_> = pids.iter().filter(|&&p| pid_alive(p)).collect();
    assert!(alive.is_empty(), "PEs {alive:?} survived the job: {err}");
}

#[test]
fn sixteen_namespaces_run_every_collective_every_pair_and_lose_a_pe() {
    const TEST: &str = "sixteen_namespaces_run_every_collective_every_pair_and_lose_a_pe";
    if gsas_tests::attack::emulated() && std::env::var_os("GSAS_QEMU_FULL").is_none_or(|v| v != "1")
    {
        gsas_tests::skip::note(
            TEST,
            "16 emulated daemons and 32 emulated PEs are too slow under qemu (GSAS_QEMU_FULL=1 runs it)",
        );
        return;
    }
    let Some(ns) = Cluster::or_skip(TEST, "S", NODES) else {
        return;
    };
    let dir = gsas_tests::node::scratch_dir("netns-16");
    let secret = secret_file(&dir, "secret", SECRET, 0o600);
    let file = cluster_file(&dir, NODES, 1472, &secret);
    let ds = ns.daemons(&file, &dir);
    let seed = coll_check_seed();
    let pes = 2 * NODES as u32;
    coll_check(&ns, &file, pes, 2, 400, seed);
    coll_check(&ns, &file, pes, 4, 400, seed);
    pairs(&ns, &file);
    // Every node served PEs and refused nothing; nodes 1..15 started theirs by FORK.
    assert_nodes_served(&ds);
    killed_pe(&ns, &file, &dir);
    drop(ds);
    drop(ns);
    let _ = std::fs::remove_dir_all(&dir);
}
