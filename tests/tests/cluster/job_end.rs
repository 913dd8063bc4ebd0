//! The end of a job over a lossy network: many short jobs in a row on three nodes in
//! network namespaces, with nftables in every node's namespace dropping 10% and
//! duplicating 5% of the datagrams it sends from or to the services' port (requests,
//! replies, acknowledgements; the launcher's remote FORK too). Every job must end with
//! status 0 and every PE print its line: a reply of the final barrier lost while the
//! target node's PEs finish and leave must not fail the requester's `finalize` (issue 25,
//! item 5; "The end of a job is a distributed protocol" in `docs/runtime.md`).
//!
//! * `jobs_that_only_end_survive_a_lossy_network`: init, barrier, finalize; 20 jobs of 6
//!   PEs (2 per node).
//! * `jobs_that_work_to_the_end_survive_a_lossy_network`: puts, adds and fetch-adds to
//!   every PE, checked exactly, then reads from every PE right before finalize; 10 jobs.
//!
//! The daemons serve every job of a test in turn (so the state they keep for ended jobs
//! meets the next jobs). After the jobs: every job started and ended on every node, and
//! no daemon logged a warning (a late acknowledgement or retransmission of an ended job is
//! no error). Needs root, `ip netns` and `nft`; otherwise each test prints
//! `SKIPPED: <test>: <reason>` and returns (`GSAS_REQUIRE_NETNS=1` makes that a failure).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gsas_tests::launch::{launch, run_with_timeout, self_test_argv};
use gsas_tests::multinode::{SECRET, secret_file, show};

use gsas_tests::netns::{Cluster, cluster_file};

/// The services' UDP port in the namespaces' cluster file.
const SERVICE_PORT: u16 = 7470;
/// Percent of the services' datagrams dropped, and duplicated, by every node.
const DROP: u32 = 10;
const DUP: u32 = 5;
const NODES: usize = 3;
const PES: u32 = 6;

/// Whether a job of [`PES`] PEs running `scenario` succeeded, with every PE's line.
fn succeeded(out: &Output, scenario: &str) -> bool {
    let stdout = String::from_utf8_lossy(&out.stdout);
    out.status.success()
        && (0..PES).all(|pe| stdout.contains(&format!("[{pe}] PE {pe} of {PES}: {scenario} ok")))
}

/// The lines of a failed job worth reading (errors, panic messages), at most a few.
fn gist(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let mut picked = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.contains(" error:") || l.contains("oshrun:") {
            picked.push(*l);
        } else if l.contains("panicked") {
            // The message is on the next line.
            picked.extend(lines.get(i + 1));
        }
    }
    picked.truncate(6);
    format!("{}: {}", out.status, picked.join(" | "))
}

/// Runs `runs` jobs of `scenario` one after the other on [`NODES`] lossy namespaces.
fn repeated_jobs(test: &str, tag: &str, scenario: &str, runs: u32) {
    let Some(ns) = Cluster::or_skip(test, tag, NODES) else {
        return;
    };
    let dir = gsas_tests::node::scratch_dir(&format!("job-end-{tag}"));
    let secret = secret_file(&dir, "secret", SECRET, 0o600);
    let file = cluster_file(&dir, NODES, 61440, &secret);
    // The services' datagrams, both ways: requests, replies, acknowledgements.
    let (to, from) = (
        format!("udp dport {SERVICE_PORT}"),
        format!("udp sport {SERVICE_PORT}"),
    );
    ns.lossy_matching(&[&to, &from], DROP, DUP).unwrap();
    let daemons = ns.daemons(&file, &dir);
    let t0 = Instant::now();
    let mut failed: Vec<(u32, Output)> = Vec::new();
    let mut slowest = (0, Duration::ZERO);
    for run in 0..runs {
        let started = Instant::now();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns.nodes[0]])
            .args(launch().prefix())
            .arg(gsas_tests::launch::program("oshrun"))
            .arg("--config")
            .arg(&file)
            .args(["-n", &PES.to_string(), "--tag-output", "--"])
            .args(self_test_argv("child_pe").unwrap())
            .env(gsas_tests::node::SCENARIO, scenario)
            .env_remove("GSAS_UDP_MTU")
            .env_remove("GSAS_DEADLINE_MS");
        let out = run_with_timeout(&mut cmd, Duration::from_secs(300)).unwrap();
        let took = started.elapsed();
        if took > slowest.1 {
            slowest = (run, took);
        }
        if !succeeded(&out, scenario) {
            eprintln!(
                "{test}: job {run} failed after {:.1} s: {}",
                took.as_secs_f64(),
                gist(&out)
            );
            failed.push((run, out));
        }
    }
    eprintln!(
        "{test}: {} of {runs} jobs of {PES} PEs on {NODES} nodes failed, {DROP}% of the services' datagrams dropped and {DUP}% duplicated ({:.1} s; the slowest, job {}, {:.1} s)",
        failed.len(),
        t0.elapsed().as_secs_f64(),
        slowest.0,
        slowest.1.as_secs_f64()
    );
    if let Some((run, out)) = failed.first() {
        panic!(
            "{} of {runs} jobs failed; job {run}: {}",
            failed.len(),
            show(out)
        );
    }
    let total = |name: &str| -> u64 {
        daemons
            .iter()
            .map(|d| d.stats().get(name).unwrap_or(0))
            .sum()
    };
    let (retx, dups, hits) = (
        total("reliable.retransmissions"),
        total("reliable.duplicates"),
        total("reliable.reply_cache_hits"),
    );
    let (closed_refused, closed_expired) = (
        total("reliable.closed_refused"),
        total("reliable.closed_expired"),
    );
    eprintln!(
        "{test}: the daemons retransmitted {retx} frames, dropped {dups} duplicates, answered {hits} repeated requests from their reply cache, refused {closed_refused} new requests of ended jobs and gave up on {closed_expired} replies to PEs that had left"
    );
    // The network did drop and duplicate.
    assert!(
        retx > 0 && dups > 0,
        "{retx} retransmissions, {dups} duplicates"
    );
    for (i, d) in daemons.iter().enumerate() {
        let st = d.stats();
        assert_eq!(st.get("jobs.active"), Some(0), "node {i}: {st}");
        let started = st.get("jobs.started").unwrap();
        assert_eq!(st.get("jobs.ended"), Some(started), "node {i}: {st}");
        assert_eq!(st.get("jobs.reclaimed"), Some(0), "node {i}: {st}");
        let log = d.log_text();
        let complaints: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" warn:") || l.contains(" error:"))
            // Said once at start (the tests run as root).
            .filter(|l| !l.contains("remote FORK is enabled in a daemon running as root"))
            .collect();
        assert!(
            complaints.is_empty(),
            "node {i} logged warnings or errors about jobs that ended cleanly:\n{log}"
        );
    }
    drop(daemons);
    drop(ns);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn jobs_that_only_end_survive_a_lossy_network() {
    repeated_jobs("jobs_that_only_end_survive_a_lossy_network", "e", "end", 20);
}

#[test]
fn jobs_that_work_to_the_end_survive_a_lossy_network() {
    repeated_jobs(
        "jobs_that_work_to_the_end_survive_a_lossy_network",
        "w",
        "end-after-work",
        10,
    );
}
