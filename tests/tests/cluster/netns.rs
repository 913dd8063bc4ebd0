//! Multi-node jobs across real network stacks: network namespaces joined by veth pairs to
//! a bridge (in a namespace of its own), addresses only inside them (10.201.0.x/24), one
//! `gsas-atomicd` per node namespace, the launcher in node 0's namespace. Node 0's PEs are
//! started by the launcher; the other nodes' PEs by their daemons through authenticated
//! FORK over the veth links, with PMI and output streams over TCP back to the launcher.
//! The PEs run the node tests' full scenario.
//!
//! Needs root and `ip netns` (CI runs as root). Otherwise each test prints
//! `SKIPPED: <test>: <reason>` on standard error (not captured by the test harness) and
//! returns; with `GSAS_REQUIRE_NETNS=1` a skip is a failure instead. The namespaces are
//! deleted by a guard even when a test fails, and namespaces left by earlier test
//! processes that died are removed first.

use std::process::{Command, Output};
use std::time::Duration;

use gsas_tests::launch::{launch, run_with_timeout, self_test_argv};
use gsas_tests::multinode::{Daemon, SECRET, secret_file, show};
use gsas_tests::netns::{Cluster, assert_nodes_served, cluster_file};

/// Runs the full scenario on `n` namespaces with `pes` PEs; returns the launcher's output.
fn run_cluster(test: &str, tag: &str, n: usize, pes: u32, mtu: u32) -> Option<Output> {
    let ns = Cluster::or_skip(test, tag, n)?;
    let dir = gsas_tests::node::scratch_dir(&format!("netns-{tag}"));
    let secret = secret_file(&dir, "secret", SECRET, 0o600);
    let file = cluster_file(&dir, n, mtu, &secret);
    let daemons = ns.daemons(&file, &dir);
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.nodes[0]])
        .args(launch().prefix())
        .arg(gsas_tests::launch::program("oshrun"))
        .arg("--config")
        .arg(&file)
        .args(["-n", &pes.to_string(), "--tag-output", "--"])
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "all")
        .env_remove("GSAS_UDP_MTU")
        .env_remove("GSAS_DEADLINE_MS");
    let out = run_with_timeout(&mut cmd, Duration::from_secs(900)).unwrap();
    assert!(out.status.success(), "{}", show(&out));
    // The veth links carry 1500 bytes: datagrams larger than 1472 are fragmented, which
    // each node's first PE says once; at 1472 nobody does.
    let warnings = String::from_utf8_lossy(&out.stderr)
        .matches("exceed the path MTU to node(s)")
        .count();
    if gsas_tests::attack::emulated() {
        // qemu-user does not emulate getsockopt(IP_MTU): the check finds no MTU there.
        gsas_tests::skip::note(
            &format!("{test} (path MTU warning)"),
            "qemu-user does not emulate getsockopt(IP_MTU)",
        );
    } else if mtu > 1472 {
        assert_eq!(warnings, n, "one path MTU warning per node: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("1500 bytes; each is sent as"),
            "{}",
            show(&out)
        );
    } else {
        assert_eq!(warnings, 0, "{}", show(&out));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    for pe in 0..pes {
        let line = format!("[{pe}] PE {pe} of {pes}: all ok");
        assert!(stdout.contains(&line), "missing {line:?}: {}", show(&out));
    }
    for (i, d) in daemons.iter().enumerate() {
        let st = d.stats();
        assert!(st.get("requests.bulk_write").unwrap() > 0, "node {i}: {st}");
    }
    assert_nodes_served(&daemons);
    drop(daemons);
    drop(ns);
    std::fs::remove_dir_all(&dir).unwrap();
    Some(out)
}

#[test]
fn two_namespaces_joined_by_veth() {
    run_cluster("two_namespaces_joined_by_veth", "a", 2, 4, 61440);
}

#[test]
fn four_namespaces_with_ethernet_sized_datagrams() {
    if !gsas_tests::multinode::heavy_test_runs("four_namespaces_with_ethernet_sized_datagrams") {
        return;
    }
    run_cluster(
        "four_namespaces_with_ethernet_sized_datagrams",
        "b",
        4,
        4,
        1472,
    );
}

#[test]
fn an_unreachable_node_is_named_within_the_deadline() {
    let test = "an_unreachable_node_is_named_within_the_deadline";
    let Some(ns) = Cluster::or_skip(test, "c", 2) else {
        return;
    };
    let dir = gsas_tests::node::scratch_dir("netns-c");
    let secret = secret_file(&dir, "secret", SECRET, 0o600);
    let file = cluster_file(&dir, 2, 61440, &secret);
    let _d0 = Daemon::start_with(&ns.exec(0), &file, 0, &dir.join("node0.sock"));
    // No daemon in node 1's namespace: the FORK goes unanswered.
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.nodes[0]])
        .args(launch().prefix())
        .arg(gsas_tests::launch::program("oshrun"))
        .arg("--config")
        .arg(&file)
        .args(["-n", "2", "true"])
        .env("GSAS_DEADLINE_MS", "1000");
    let t0 = std::time::Instant::now();
    let out = run_with_timeout(&mut cmd, Duration::from_secs(300)).unwrap();
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("oshrun: node 1 (ns1, 10.201.0.2:7470): gsas-atomicd did not answer the FORK request within"),
        "{err}"
    );
    assert!(took < Duration::from_secs(60), "{took:?}");
    drop(ns);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `netns-cluster` (the kit's tool for measuring by hand, docs/runtime.md) makes its nodes,
/// says how to run a job there, a job run that way succeeds, and at the end of its
/// standard input it stops its daemons and deletes its namespaces.
#[test]
fn the_netns_cluster_tool_runs_a_job_and_leaves_nothing() {
    use std::io::BufRead;
    let test = "the_netns_cluster_tool_runs_a_job_and_leaves_nothing";
    if gsas_tests::attack::emulated() {
        // A tool for the host that measures; its pieces (namespaces, cluster file,
        // daemons, FORK) run under qemu in this file's other tests.
        gsas_tests::skip::note(test, "a host tool, not run under qemu-user");
        return;
    }
    if !gsas_tests::skip::is_root() {
        gsas_tests::skip::skip(
            test,
            gsas_tests::skip::REQUIRE_NETNS,
            "not running as root (network namespaces need CAP_SYS_ADMIN)",
        );
        return;
    }
    let dir = gsas_tests::node::scratch_dir("netns-tool");
    let mut tool = launch()
        .command(gsas_tests::launch::package_bin(
            "gsas-tests",
            "netns-cluster",
        ))
        .args(["2", "--max-peers", "64", "--stdin", "--dir"])
        .arg(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let stdin = tool.stdin.take().unwrap();
    let mut lines = std::io::BufReader::new(tool.stdout.take().unwrap()).lines();
    // The line that shows the command: `  ip netns exec NS .../oshrun --config FILE ...`.
    let shown = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.trim_start().starts_with("ip netns exec "))
        .expect("netns-cluster printed no command");
    let ns = shown.split_whitespace().nth(3).unwrap().to_owned();
    let file = dir.join("cluster.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.matches("max_peers = 64").count(), 2, "{text}");
    assert!(
        shown.contains(&format!("--config {}", file.display())),
        "{shown}"
    );
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns])
        .args(launch().prefix())
        .arg(gsas_tests::launch::program("oshrun"))
        .arg("--config")
        .arg(&file)
        .args(["-n", "4", "--fork", "--"])
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "all")
        .env_remove("GSAS_UDP_MTU")
        .env_remove("GSAS_DEADLINE_MS");
    let out = run_with_timeout(&mut cmd, Duration::from_secs(600)).unwrap();
    assert!(out.status.success(), "{}", show(&out));
    drop(stdin);
    let status = gsas_tests::launch::wait_timeout(&mut tool, Duration::from_secs(60)).unwrap();
    assert!(status.success(), "netns-cluster: {status}");
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    let prefix = ns.trim_end_matches("-0");
    assert!(
        !left.contains(prefix),
        "namespaces of {prefix} left: {left}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
