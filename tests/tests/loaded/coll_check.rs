//! The randomized collective checker (`shmem/examples/coll_check.rs`) as jobs of the
//! loaded stage: `oshrun --config` over loopback daemons (three nodes of 3 + 2 + 2 PEs,
//! four of 4 + 3 + 3 + 3 and of 2 + 1 + 1 + 1, placed in blocks by `oshrun`), with 1472-byte
//! datagrams so that the boundaries are many and cheap, `SHMEM_COLL_DIRECT_MAX` low in two
//! jobs so that its boundary is crossed too, one job with every signal through the services
//! (`SHMEM_COLL_DIRECT_MAX=0`, `GSAS_DIRECT=0`), one of large sizes at the default MTU, and,
//! as root, three network namespaces whose nftables drop 10% and duplicate 5% of the UDP
//! datagrams between nodes. Each job runs 10,000 collectives (fewer where the network
//! loses or the sizes are large) from a seed that is printed (`GSAS_COLL_CHECK_SEED` sets
//! it; by default it changes every run), and checks every result exactly on every PE.
//! Three jobs (2 + 1 + 1 + 1 PEs, the one through the services, the lossy one) split their
//! collectives over several initialization cycles (`--cycles`: `shmem_init` ..
//! `shmem_finalize` again and again in one process, OpenSHMEM 1.6).
//! `GSAS_LOADED_VERBOSE=1` prints each job's whole output (with `SHMEM_DEBUG=1`, the
//! collective endpoints' counters).

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use gsas_tests::launch::{example, launch, program, run_with_timeout};
use gsas_tests::multinode::{ClusterFile, SECRET, daemons, secret_file, show};
use gsas_tests::netns::{Cluster, cluster_file};

/// Longest a job may take (it is given to `oshrun --timeout` too).
const LIMIT: Duration = Duration::from_secs(900);

/// The checker, built for this target.
fn checker() -> PathBuf {
    example("shmem", "coll_check", &["verbs"])
}

/// The seed of this run: `GSAS_COLL_CHECK_SEED`, else from the clock.
fn seed() -> u64 {
    gsas_tests::multinode::coll_check_seed()
}

/// The checker's arguments: `count` collectives over `cycles` initialization cycles.
fn args(count: u64, seed: u64, max_bytes: usize, cycles: u64) -> Vec<String> {
    [
        "--count".to_string(),
        count.to_string(),
        "--seed".into(),
        seed.to_string(),
        "--max-bytes".into(),
        max_bytes.to_string(),
        "--progress".into(),
        "2000".into(),
        "--cycles".into(),
        cycles.to_string(),
    ]
    .into()
}

/// The `--cycles` of the checker's arguments `a`.
fn cycles_of(a: &[String]) -> u64 {
    a.iter()
        .position(|x| x == "--cycles")
        .and_then(|i| a.get(i + 1)?.parse().ok())
        .unwrap_or(1)
}

/// A cluster file of `nodes` loopback nodes with `udp_mtu = mtu`.
pub(crate) fn loopback_file(dir: &std::path::Path, nodes: usize, mtu: u32) -> ClusterFile {
    let mut t = format!(
        "[cluster]\nname = \"loaded\"\n\n[defaults]\nsymmetric_size = \"64m\"\nudp_mtu = {mtu}\n"
    );
    for i in 0..nodes {
        t.push_str(&format!(
            "\n[[nodes]]\nid = {i}\nname = \"n{i}\"\nhost = \"127.0.0.1\"\nudp_port = 0\n\
             control_socket = \"x\"\nmemory = \"4g\"\n"
        ));
    }
    ClusterFile::from_template(&t, dir)
}

/// Asserts that the checker job succeeded and every collective was checked, in `cycles`
/// initialization cycles; prints its summary (the seed and the figures) for the stage's log.
fn check(test: &str, out: &Output, count: u64, npes: u32, cycles: u64) {
    if std::env::var_os("GSAS_LOADED_VERBOSE").is_some() {
        eprintln!("{test}: {}", show(out));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = format!("coll_check: {count} collectives on {npes} PEs checked exactly");
    assert!(
        out.status.success() && stdout.contains(&line),
        "{test}: {}",
        show(out)
    );
    let summary = stdout.lines().find(|l| l.contains(&line)).unwrap_or("");
    if cycles > 1 {
        assert!(
            summary.contains(&format!(", {cycles} initialization cycles)")),
            "{test}: the summary does not name {cycles} initialization cycles: {summary}"
        );
    }
    eprintln!("{test}: {summary}");
}

/// `coll_check` on `nodes` loopback daemons with `npes` PEs.
fn loopback(test: &str, nodes: usize, npes: u32, mtu: u32, env: &[(&str, &str)], a: &[String]) {
    let dir = gsas_tests::node::scratch_dir(test);
    let cf = loopback_file(&dir, nodes, mtu);
    let file = cf.write(&dir.join("cluster.toml"));
    let ds = daemons(&cf, &file);
    let mut cmd = launch().command(program("oshrun"));
    cmd.arg("--config")
        .arg(&file)
        .args([
            "-n",
            &npes.to_string(),
            "--timeout",
            &LIMIT.as_secs().to_string(),
        ])
        .arg("--")
        .arg(checker())
        .args(a)
        .envs(env.iter().copied());
    let out = run_with_timeout(&mut cmd, LIMIT + Duration::from_secs(60)).unwrap();
    let count: u64 = a[1].parse().unwrap();
    check(test, &out, count, npes, cycles_of(a));
    drop(ds);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn three_nodes_of_three_two_and_two_pes() {
    let s = seed();
    loopback(
        "three_nodes_of_three_two_and_two_pes",
        3,
        7,
        1472,
        &[("SHMEM_COLL_DIRECT_MAX", "4k")],
        &args(10_000, s, 12_000, 1),
    );
}

#[test]
fn four_nodes_of_four_three_three_and_three_pes() {
    let s = seed();
    loopback(
        "four_nodes_of_four_three_three_and_three_pes",
        4,
        13,
        1472,
        &[],
        &args(10_000, s, 6_000, 1),
    );
}

#[test]
fn four_nodes_of_two_one_one_and_one_pe() {
    let s = seed();
    loopback(
        "four_nodes_of_two_one_one_and_one_pe",
        4,
        5,
        1472,
        &[("SHMEM_COLL_DIRECT_MAX", "2k")],
        &args(10_000, s, 12_000, 5),
    );
}

/// Every signal and every byte through the services (`SHMEM_COLL_DIRECT_MAX=0`), and with
/// `GSAS_DIRECT=0` every PE a cell of its own (same-node PEs through the service too).
#[test]
fn three_nodes_through_the_services() {
    let s = seed();
    loopback(
        "three_nodes_through_the_services",
        3,
        6,
        1472,
        &[("SHMEM_COLL_DIRECT_MAX", "0"), ("GSAS_DIRECT", "0")],
        &args(2_000, s, 6_000, 3),
    );
}

/// Sizes up to 300,000 bytes around the boundaries of the default 61440-byte datagrams
/// and of `SHMEM_COLL_DIRECT_MAX` (256 KiB).
#[test]
fn three_nodes_with_large_sizes() {
    let s = seed();
    loopback(
        "three_nodes_with_large_sizes",
        3,
        3,
        61440,
        &[],
        &args(600, s, 300_000, 1),
    );
}

/// Three nodes in network namespaces (two PEs each, the remote ones started by FORK),
/// nftables dropping 10% and duplicating 5% of every UDP datagram between them.
#[test]
fn three_namespaces_dropping_and_duplicating_datagrams() {
    const TEST: &str = "three_namespaces_dropping_and_duplicating_datagrams";
    let Some(ns) = Cluster::or_skip(TEST, "L", 3) else {
        return;
    };
    let dir = gsas_tests::node::scratch_dir("loaded-netns");
    let secret = secret_file(&dir, "secret", SECRET, 0o600);
    let file = cluster_file(&dir, 3, 1472, &secret);
    let ds = ns.daemons(&file, &dir);
    ns.lossy(10, 5).unwrap();
    let count = 4_000;
    let a = args(count, seed(), 8_000, 4);
    let mut cmd = std::process::Command::new("ip");
    cmd.args(["netns", "exec", &ns.nodes[0]])
        .args(launch().prefix())
        .arg(program("oshrun"))
        .arg("--config")
        .arg(&file)
        .args(["-n", "6", "--timeout", &LIMIT.as_secs().to_string(), "--"])
        .arg(checker())
        .args(&a)
        .env_remove("GSAS_UDP_MTU")
        .env_remove("GSAS_DEADLINE_MS");
    let out = run_with_timeout(&mut cmd, LIMIT + Duration::from_secs(60)).unwrap();
    let (dropped, duplicated) = ns.loss_counts().unwrap();
    check(TEST, &out, count, 6, cycles_of(&a));
    eprintln!("{TEST}: nftables dropped {dropped} and duplicated {duplicated} datagrams");
    if std::env::var_os("GSAS_LOADED_VERBOSE").is_some() {
        for d in &ds {
            eprintln!("{TEST}: node {}: {}", d.node, d.stats());
        }
    }
    assert!(dropped > 0 && duplicated > 0, "no loss was injected");
    drop(ds);
    drop(ns);
    let _ = std::fs::remove_dir_all(&dir);
}
