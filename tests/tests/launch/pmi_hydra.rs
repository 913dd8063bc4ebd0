//! gsas's PMI client under MPICH's Hydra (`mpiexec.hydra`, Debian package `mpich`):
//! `-launcher fork` jobs whose ranks are this test binary in child mode (through
//! `qemu-aarch64 -L /` when the tests run emulated). These tests fail, never skip, when
//! Hydra is not installed.

use std::process::{Command, Output};
use std::time::Duration;

use gsas_tests::launch;
use gsas_tests::pmi::{ABORT_CODE, BAD_RANK, EXPECT_NODES, ROLE, WAIT_AFTER_ABORT};

/// `mpiexec.hydra -launcher fork [extra] -n N <this binary's `child_pe`, role `role`>`.
fn hydra_job(role: &str, n: u32, extra: &[&str]) -> Command {
    let mut cmd = launch::hydra_fork();
    cmd.args(extra)
        .args(["-n", &n.to_string()])
        .args(launch::self_test_argv("child_pe").unwrap())
        .env(ROLE, role);
    cmd
}

fn run(cmd: &mut Command) -> Output {
    launch::run_with_timeout(cmd, Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("mpiexec.hydra: {e}"))
}

fn show(o: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_all_ranks_ok(o: &Output, n: u32) {
    assert!(o.status.success(), "{}", show(o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for r in 0..n {
        assert!(
            stdout.contains(&format!("pmi-child rank {r} of {n} ok")),
            "rank {r} did not report success\n{}",
            show(o)
        );
    }
}

#[test]
fn hydra_fd_mode_four_ranks_exchange() {
    let o = run(hydra_job("exchange", 4, &[]).env(EXPECT_NODES, "0,0,0,0"));
    assert_all_ranks_ok(&o, 4);
}

#[test]
fn hydra_pmi_port_mode_exchange() {
    let o = run(hydra_job("exchange", 3, &["-pmi-port"]).env(EXPECT_NODES, "0,0,0"));
    assert_all_ranks_ok(&o, 3);
}

#[test]
fn hydra_abort_sets_the_exit_code() {
    // No rank exits by itself with ABORT_CODE: the aborting rank waits to be killed and
    // the others wait in the barrier, so the status can only come from `cmd=abort`.
    let o = run(hydra_job("abort", 3, &[])
        .env(BAD_RANK, "1")
        .env(WAIT_AFTER_ABORT, "1"));
    assert_eq!(o.status.code(), Some(ABORT_CODE), "{}", show(&o));
}
