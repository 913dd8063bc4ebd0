//! The flag ping-pong (`shmem/examples/flag_pingpong.rs`) between two loopback nodes of
//! one PE each, beside the stage's CPU-bound processes: 20,000 round trips of each pattern
//! (`p` + `quiet` against `wait_until`, `p` against `wait_until`, `p` against a `test`
//! loop, `put_signal` of 8 bytes against `signal_wait_until`), every value checked, within `oshrun --timeout 60`. A waiting PE that keeps the
//! CPU from its node's service (or a service that keeps it from the PE) stretches each
//! round trip to milliseconds: 20,000 of them then take minutes. The round trips are
//! printed; their speed is measured by `scripts/bench` (family `flag`), not asserted here.

use std::time::Duration;

use gsas_tests::launch::{example, launch, program, run_with_timeout};
use gsas_tests::multinode::{daemons, show};

use crate::coll_check::loopback_file;

const ROUNDS: u64 = 20_000;
/// The job's limit (`oshrun --timeout`): far above the few seconds the 20,000 round trips
/// take beside two CPU-bound processes, far below the minutes they took when a waiter
/// starved its service.
const LIMIT: Duration = Duration::from_secs(60);

fn pingpong(mode: &str) {
    let test = format!("pingpong_{mode}");
    let dir = gsas_tests::node::scratch_dir(&test);
    let cf = loopback_file(&dir, 2, 61440);
    let file = cf.write(&dir.join("cluster.toml"));
    let ds = daemons(&cf, &file);
    let mut cmd = launch().command(program("oshrun"));
    cmd.arg("--config")
        .arg(&file)
        .args(["-n", "2", "--timeout", &LIMIT.as_secs().to_string(), "--"])
        .arg(example("shmem", "flag_pingpong", &["verbs"]))
        .args([mode, &ROUNDS.to_string()]);
    let out = run_with_timeout(&mut cmd, LIMIT + Duration::from_secs(30)).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = format!("flag_pingpong: {ROUNDS} rounds of {mode} between PE 0 and PE 1");
    assert!(
        out.status.success() && stdout.contains(&line),
        "{test}: {}",
        show(&out)
    );
    let summary = stdout.lines().find(|l| l.contains(&line)).unwrap_or("");
    eprintln!("{test}: {summary}");
    drop(ds);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn put_quiet_against_wait_until() {
    pingpong("quiet");
}

#[test]
fn p_against_wait_until() {
    pingpong("wait");
}

#[test]
fn p_against_a_test_loop() {
    pingpong("test");
}

#[test]
fn put_signal_against_signal_wait_until() {
    pingpong("signal");
}
