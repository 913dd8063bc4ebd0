//! Jobs of the node client started by MPICH's Hydra (`mpiexec.hydra -launcher fork`, the
//! node client's foreign-launcher path): no `GSAS_*` job variables, rank 0 draws the job
//! key and shares it over PMI, and the lowest rank of each node starts the node's embedded
//! atomic service. The PEs run the node tests' full scenario and print a checked result;
//! a PE of the OpenSHMEM library answers a SIGQUIT sent to it with where it waits.
//! These tests fail, never skip, when Hydra is not installed (CI installs `mpich`).

use std::process::{Command, Output};
use std::time::Duration;

use gsas_tests::launch::{run_with_timeout, self_test_argv};

/// `mpiexec.hydra -launcher fork` with a clean gsas environment, running the full scenario.
fn hydra() -> Command {
    let mut cmd = gsas_tests::launch::hydra_fork();
    cmd.env(gsas_tests::node::SCENARIO, "all");
    cmd
}

fn check(out: &Output, n: u32) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    for pe in 0..n {
        let line = format!("PE {pe} of {n}: all ok");
        assert!(
            stdout.contains(&line),
            "missing {line:?}:\n{stdout}\n{stderr}"
        );
    }
}

#[test]
fn four_pes_on_one_node() {
    let mut cmd = hydra();
    cmd.args(["-n", "4"])
        .args(self_test_argv("child_pe").unwrap());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(900)).unwrap();
    check(&out, 4);
}

#[test]
fn two_nodes_by_gsas_node_with_embedded_services() {
    // Hydra's MPMD form gives each block its own environment: two "nodes" of two PEs,
    // each with an embedded service in its lowest rank, talking UDP to each other.
    let argv = self_test_argv("child_pe").unwrap();
    let mut cmd = hydra();
    cmd.args(["-n", "2", "-env", "GSAS_NODE", "0"])
        .args(&argv)
        .arg(":")
        .args(["-n", "2", "-env", "GSAS_NODE", "1"])
        .args(&argv);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(900)).unwrap();
    check(&out, 4);
}

#[test]
fn two_verbs_nodes_by_gsas_node_with_embedded_services() {
    // The same two nodes with `GSAS_TRANSPORT=verbs`: each block is an emulated verbs node
    // of the software device (its own LID), so that PEs of different nodes reach each other
    // by RDMA; the full scenario must pass and every PE must report its verbs path.
    let argv = self_test_argv("child_pe").unwrap();
    let dir = gsas_tests::node::scratch_dir("hydra-verbs");
    let mut cmd = hydra();
    cmd.env("GSAS_TRANSPORT", "verbs")
        .env("GSAS_LOG", "info")
        .env("LD_LIBRARY_PATH", verbs_emu::library_path())
        .env("SOFTVERBS_DIR", &dir);
    for node in ["0", "1"] {
        let lid = if node == "0" { "1" } else { "2" };
        if node == "1" {
            cmd.arg(":");
        }
        cmd.args([
            "-n",
            "2",
            "-env",
            "GSAS_NODE",
            node,
            "-env",
            "SOFTVERBS_LID",
            lid,
        ])
        .args(&argv);
    }
    let out = run_with_timeout(&mut cmd, Duration::from_secs(900)).unwrap();
    check(&out, 4);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for lid in ["1", "2"] {
        let pes = stderr
            .lines()
            .filter(|l| l.contains(&format!(": verbs on softverbs0 port 1 (LID {lid},")))
            .filter(|l| l.ends_with("2 queue pair(s)"))
            .count();
        assert_eq!(
            pes, 2,
            "PEs on verbs with LID {lid} and 2 queue pairs:\n{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn under_hydra_a_pe_says_where_it_waits_on_sigquit_and_goes_on() {
    // Nobody takes the PEs' notes under Hydra, and mpiexec.hydra ends the job on a
    // SIGQUIT of its own; a SIGQUIT sent to a PE itself makes it print its line.
    use std::io::BufRead;
    let dir = gsas_tests::node::scratch_dir("hydra-sigquit");
    let mut child = gsas_tests::launch::hydra_fork()
        .args(["-n", "2"])
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, crate::shmem_pes::WAIT_UNTIL)
        .env(gsas_tests::node::SIGNAL_DIR, &dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let pids = gsas_tests::multinode::wait_ready(&dir, 2, &mut child, Duration::from_secs(300));
    let want = "PE 1: in shmem_long_wait_until: waiting for the variable at 0x";
    let mut seen = Vec::new();
    // Ready a moment before it waits: ask until it answers from its wait.
    'ask: for _ in 0..30 {
        // SAFETY: kill has no memory arguments.
        let got = unsafe { libc::kill(pids[1] as libc::pid_t, libc::SIGQUIT) };
        assert_eq!(got, 0);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < until {
            if let Ok(l) = lines.recv_timeout(Duration::from_millis(100)) {
                let found = l.starts_with(want);
                seen.push(l);
                if found {
                    break 'ask;
                }
            }
        }
    }
    assert!(seen.iter().any(|l| l.starts_with(want)), "{seen:#?}");
    // It went on waiting: both PEs still run.
    for pid in &pids {
        // SAFETY: signal 0 only checks that the process exists.
        let got = unsafe { libc::kill(*pid as libc::pid_t, 0) };
        assert_eq!(got, 0, "{seen:#?}");
    }
    for pid in &pids {
        // SAFETY: kill has no memory arguments.
        unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
    }
    gsas_tests::launch::wait_timeout(&mut child, Duration::from_secs(120)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
