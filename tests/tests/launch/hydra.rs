//! Jobs of the node client started by MPICH's Hydra (`mpiexec.hydra -launcher fork`, the
//! node client's foreign-launcher path): no `GSAS_*` job variables, rank 0 draws the job
//! key and shares it over PMI, and the lowest rank of each node starts the node's embedded
//! atomic service. The PEs run the node tests' full scenario and print a checked result.
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
