//! The node client in real jobs on one machine: this test binary's `child_pe` run by
//! `oshrun -n 1, 2, 4, 8` (8 PEs on a 2-core machine must finish), directly and with
//! `GSAS_DIRECT=0` (same-node access through the service's shm rings). Without a launcher
//! `child_pe` runs the same scenarios as a singleton job.

use std::process::{Command, Output};
use std::time::Duration;

use gsas_tests::launch::{launch, run_with_timeout, self_test_argv};

fn oshrun(n: u32, scenario: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd: Command = launch().command(gsas_tests::launch::program("oshrun"));
    cmd.arg("-n")
        .arg(n.to_string())
        .arg("--tag-output")
        .arg("--");
    cmd.args(self_test_argv("child_pe").unwrap());
    cmd.env(gsas_tests::node::SCENARIO, scenario);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_timeout(&mut cmd, Duration::from_secs(900)).unwrap()
}

fn check(n: u32, out: &Output, scenario: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "oshrun -n {n}: {:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    for pe in 0..n {
        let line = format!("[{pe}] PE {pe} of {n}: {scenario} ok");
        assert!(
            stdout.contains(&line),
            "missing {line:?} in:\n{stdout}\n{stderr}"
        );
    }
}

#[test]
fn one_pe() {
    let out = oshrun(1, "all", &[]);
    check(1, &out, "all");
}

#[test]
fn two_pes() {
    let out = oshrun(2, "all", &[]);
    check(2, &out, "all");
}

#[test]
fn four_pes() {
    let out = oshrun(4, "all", &[]);
    check(4, &out, "all");
}

#[test]
fn eight_pes_on_two_cores() {
    let out = oshrun(8, "all", &[]);
    check(8, &out, "all");
}

#[test]
fn through_the_service_rings() {
    let out = oshrun(4, "all", &[("GSAS_DIRECT", "0")]);
    check(4, &out, "all");
}
