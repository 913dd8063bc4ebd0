//! `oshrun --config` on loopback clusters: the shipped `configs/two-nodes-loopback.toml`
//! and `configs/four-nodes-loopback.toml`, regenerated with free ports and control sockets
//! in a scratch directory, one `gsas-atomicd` per node started by the test. PEs spread over
//! the nodes run the node tests' full scenario (puts and gets from 1 byte to 4 MiB, above
//! the UDP MTU, every atomic with exact results, counters every PE updates on every PE,
//! barriers, contexts, threads). Also: `--ppn` placement, and a node whose daemon is not
//! running named in the error.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use gsas_tests::launch::{run_with_timeout, self_test_argv};
use gsas_tests::multinode::{
    ClusterFile, Daemon, RELAXED_DEADLINE_MS, check_pes, daemons, oshrun, scenario_job,
    shipped_config, show,
};

fn run_all(file: &Path, n: u32, extra: &[&str]) -> Output {
    run_scenario(file, n, extra, "all")
}

/// `oshrun --config FILE -n N --tag-output EXTRA... -- <this binary as child_pe>` running
/// the node tests' `scenario`.
fn run_scenario(file: &Path, n: u32, extra: &[&str], scenario: &str) -> Output {
    let mut cmd = scenario_job(file, n, extra, scenario);
    run_with_timeout(&mut cmd, Duration::from_secs(900)).unwrap()
}

/// The daemon of `node` refused no peer for a full table or job share. (A refused unknown
/// job is possible: a PE's last acknowledgement that arrives after the job ended there.)
fn no_peer_refused_for_capacity(node: u16, st: &gsas_control::StatsReport) {
    for name in ["reliable.refused_table_full", "reliable.refused_job_full"] {
        assert_eq!(st.get(name), Some(0), "node {node}: {st}");
    }
}

/// Every daemon served remote traffic of the job and refused nothing.
fn check_traffic(ds: &[Daemon]) {
    for d in ds {
        let st = d.stats();
        assert!(
            st.get("requests.bulk_write").unwrap() > 0,
            "node {}: {st}",
            d.node
        );
        assert!(
            st.get("requests.bulk_read").unwrap() > 0,
            "node {}: {st}",
            d.node
        );
        assert!(
            st.get("requests.atomic").unwrap() > 0,
            "node {}: {st}",
            d.node
        );
        assert_eq!(st.get("refused.total"), Some(0), "node {}: {st}", d.node);
        // Every PE settled before leaving: no reply was left to a closed socket.
        assert_eq!(
            st.get("reliable.peers_failed"),
            Some(0),
            "node {}: {st}",
            d.node
        );
        assert_eq!(st.get("replies.dropped"), Some(0), "node {}: {st}", d.node);
        no_peer_refused_for_capacity(d.node, &st);
        assert_eq!(st.get("jobs.started"), Some(1), "node {}: {st}", d.node);
        assert_eq!(st.get("jobs.active"), Some(0), "node {}: {st}", d.node);
    }
}

/// The shipped two-node loopback cluster in a scratch directory named after `tag`, with
/// the relaxed deadline and whatever `edit` changes, and a daemon per node.
fn two_nodes(
    tag: &str,
    edit: impl FnOnce(ClusterFile) -> ClusterFile,
) -> (PathBuf, ClusterFile, PathBuf, Vec<Daemon>) {
    let dir = gsas_tests::node::scratch_dir(tag);
    let cf = edit(
        ClusterFile::from_template(&shipped_config("two-nodes-loopback.toml"), &dir)
            .with_default("service_timeout_ms", RELAXED_DEADLINE_MS),
    );
    let file = cf.write(&dir.join("cluster.toml"));
    let ds = daemons(&cf, &file);
    (dir, cf, file, ds)
}

#[test]
fn two_nodes_from_the_shipped_config() {
    let (dir, _, file, ds) = two_nodes("mn-two", |cf| cf);
    let out = run_all(&file, 4, &[]);
    check_pes(4, "all", &out);
    check_traffic(&ds);
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn four_nodes_with_uneven_blocks() {
    let dir = gsas_tests::node::scratch_dir("mn-four");
    let cf = ClusterFile::from_template(&shipped_config("four-nodes-loopback.toml"), &dir)
        .with_default("service_timeout_ms", RELAXED_DEADLINE_MS);
    let file = cf.write(&dir.join("cluster.toml"));
    let ds = daemons(&cf, &file);
    // Six PEs on four nodes: 2, 2, 1, 1.
    let out = run_all(&file, 6, &[]);
    check_pes(6, "all", &out);
    check_traffic(&ds);
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ppn_fills_nodes_in_order_and_the_mtu_comes_from_the_file() {
    let dir = gsas_tests::node::scratch_dir("mn-ppn");
    let cf = ClusterFile::from_template(&shipped_config("four-nodes-loopback.toml"), &dir)
        .with_default("service_timeout_ms", RELAXED_DEADLINE_MS)
        .with_default("udp_mtu", "8192");
    let file = cf.write(&dir.join("cluster.toml"));
    let _ds = daemons(&cf, &file);
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(&file)
        .args(["-n", "5", "--ppn", "3", "--tag-output", "sh", "-c"])
        .arg("echo rank=$PMI_RANK node=$GSAS_NODE mtu=$GSAS_UDP_MTU")
        .env_remove("GSAS_UDP_MTU");
    let out = run_with_timeout(&mut cmd, Duration::from_secs(300)).unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (rank, node) in [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1)] {
        let line = format!("[{rank}] rank={rank} node={node} mtu=8192");
        assert!(stdout.contains(&line), "missing {line:?}: {}", show(&out));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_real_job_with_a_small_mtu() {
    // 1472-byte datagrams (Ethernet without jumbo frames): many fragments per transfer.
    if !gsas_tests::multinode::heavy_test_runs("the_real_job_with_a_small_mtu") {
        return;
    }
    let dir = gsas_tests::node::scratch_dir("mn-mtu");
    let cf = ClusterFile::from_template(&shipped_config("two-nodes-loopback.toml"), &dir)
        .with_default("service_timeout_ms", RELAXED_DEADLINE_MS)
        .with_default("udp_mtu", "1472");
    let file = cf.write(&dir.join("cluster.toml"));
    let ds = daemons(&cf, &file);
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(&file)
        .args(["-n", "2", "--tag-output", "--"])
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "rma")
        .env_remove("GSAS_UDP_MTU");
    let out = run_with_timeout(&mut cmd, Duration::from_secs(900)).unwrap();
    assert!(out.status.success(), "{}", show(&out));
    for pe in 0..2 {
        let line = format!("[{pe}] PE {pe} of 2: rma ok");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&line),
            "{}",
            show(&out)
        );
    }
    for d in &ds {
        let st = d.stats();
        // 4 MiB in 1344-byte fragments: thousands of requests per direction.
        assert!(st.get("requests.bulk_write").unwrap() > 2000, "{st}");
        assert_eq!(st.get("udp.oversized"), Some(0), "{st}");
    }
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_node_without_its_daemon_is_named() {
    let dir = gsas_tests::node::scratch_dir("mn-missing");
    let cf = ClusterFile::from_template(&shipped_config("two-nodes-loopback.toml"), &dir);
    let file = cf.write(&dir.join("cluster.toml"));
    let _d0 = Daemon::start(&cf, &file, 0);
    let mut cmd = oshrun();
    cmd.arg("--config").arg(&file).args(["-n", "2", "true"]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(120)).unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "oshrun: node 1 (loop1, 127.0.0.1:{}): no gsas-atomicd answers at {}",
        cf.ports[1],
        cf.sockets[1].display()
    );
    assert!(err.contains(&want), "{err}");
    assert!(err.contains("gsas-atomicd --config"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn configuration_errors_are_reported_before_anything_starts() {
    let dir = gsas_tests::node::scratch_dir("mn-bad");
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "[cluster]\nname = \"x\"\n\n[[nodes]]\nid = 0\nhost = \"127.0.0.1\"\nudp_prot = 7\n",
    )
    .unwrap();
    let mut cmd = oshrun();
    cmd.arg("--config").arg(&file).args(["-n", "2", "true"]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(120)).unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:7") && err.contains("udp_prot"),
        "{err}"
    );
    // More PEs than --ppn allows.
    let cf = ClusterFile::from_template(&shipped_config("two-nodes-loopback.toml"), &dir);
    let file = cf.write(&dir.join("cluster.toml"));
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(&file)
        .args(["-n", "5", "--ppn", "2", "true"]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(120)).unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("5 PEs do not fit on 2 node(s)"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_real_job_runs_through_a_flood_of_forged_frames() {
    // Two daemons, each flooded with well-formed frames under random job keys (what
    // locked every new job out after about 1,100 of them) while a two-node job of 4 PEs
    // checks every atomic exactly; then a second job after the flood.
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (dir, cf, file, ds) = two_nodes("mn-flood", |cf| cf);
    let stop = Arc::new(AtomicBool::new(false));
    let flooders: Vec<_> = cf
        .ports
        .iter()
        .enumerate()
        .map(|(i, &port)| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let to = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                let mut sent = 0;
                // At least 2,000 frames (what locked every new job out), at most 20,000
                // (about 15,000 a second while the job runs).
                while (!stop.load(Ordering::Relaxed) || sent < 2000) && sent < 20_000 {
                    gsas_tests::attack::flood(to, 200, 0x5eed_0000 + (i as u64) * 1_000_000 + sent);
                    sent += 200;
                    std::thread::sleep(Duration::from_millis(10));
                }
                sent
            })
        })
        .collect();
    let during = run_scenario(&file, 4, &[], "amo");
    stop.store(true, Ordering::Relaxed);
    let sent: Vec<u64> = flooders.into_iter().map(|t| t.join().unwrap()).collect();
    check_pes(4, "amo", &during);
    let after = run_scenario(&file, 4, &[], "amo");
    check_pes(4, "amo", &after);
    for (d, sent) in ds.iter().zip(sent) {
        let st = d.stats();
        // Every forged frame was refused (give or take datagrams the kernel dropped under
        // load: at most 5%), plus perhaps a PE's last acknowledgement after its job ended here.
        let refused = st.get("reliable.refused_unknown_job").unwrap();
        assert!(
            refused >= sent - sent / 20 && refused <= sent + 16,
            "node {}: {sent} sent: {st}",
            d.node
        );
        assert_eq!(st.get("jobs.started"), Some(2), "node {}: {st}", d.node);
        assert_eq!(
            st.get("reliable.peers_failed"),
            Some(0),
            "node {}: {st}",
            d.node
        );
        // Only the two ended jobs' peers are left, lingering for the deadline.
        assert_eq!(
            st.get("peers.known"),
            st.get("peers.lingering"),
            "node {}: {st}",
            d.node
        );
    }
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn short_jobs_run_beside_a_long_one_on_small_peer_tables() {
    // Peer tables of 16 per daemon (`nodes[].max_peers`), a long job of 4 PEs (2 per node)
    // holding its peers, and 12 short 8-PE jobs (4 per node) one after the other: each
    // short job adds 4 peers per daemon. A table freed only when no job is left would be
    // full after three short jobs; freed per job (an ended job's lingering peers give way
    // to the next job's), every one runs.
    use std::process::Stdio;
    // Under qemu 5 (still more than the three a table freed only when no job is left
    // would take).
    let short_jobs: usize = if gsas_tests::attack::full_length(
        "short_jobs_run_beside_a_long_one_on_small_peer_tables",
        "5 short jobs instead of 12",
    ) {
        12
    } else {
        5
    };
    let (dir, _, file, ds) = two_nodes("mn-loop", |mut cf| {
        cf.text = cf
            .text
            .replace("[[nodes]]\n", "[[nodes]]\nmax_peers = 16\n");
        cf
    });
    let signals = dir.join("signals");
    std::fs::create_dir_all(&signals).unwrap();
    let mut long = oshrun();
    long.arg("--config")
        .arg(&file)
        .args(["-n", "4", "--ppn", "2", "--"])
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "hang")
        .env(gsas_tests::node::SIGNAL_DIR, &signals)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut long = long.spawn().unwrap();
    gsas_tests::multinode::wait_ready(&signals, 4, &mut long, Duration::from_secs(120));
    for job in 1..=short_jobs {
        let out = run_scenario(&file, 8, &["--ppn", "4"], "amo");
        assert!(out.status.success(), "short job {job}: {}", show(&out));
    }
    let _ = long.kill();
    let _ = long.wait();
    for d in &ds {
        let st = d.stats();
        assert_eq!(st.get("peers.limit"), Some(16), "node {}: {st}", d.node);
        no_peer_refused_for_capacity(d.node, &st);
        // Every short job's peers were freed (given way to the next jobs' peers), or
        // still linger after the end of their job.
        let freed_or_lingering =
            st.get("reliable.peers_released").unwrap() + st.get("peers.lingering").unwrap();
        assert!(
            freed_or_lingering >= 4 * short_jobs as u64,
            "node {}: {st}",
            d.node
        );
    }
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}
