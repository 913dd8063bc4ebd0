//! The repository's scripts answer `--help` with their usage and do nothing else (a user's
//! first `scripts/test-all --help` once started the whole test suite), and refuse an
//! unknown argument with status 2.
//!
//! "Nothing else" is checked, not timed: each script runs with a `PATH` whose first
//! directory holds stand-ins for `cargo`, `rustup`, `qemu-aarch64` and `nft` that record
//! their call; none may be called.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gsas_tests::install::workspace_root;
use gsas_tests::launch::run_with_timeout;

/// The scripts a user runs, with the text their usage must contain.
const SCRIPTS: &[(&str, &str)] = &[
    ("scripts/test-all", "scripts/test-all --quick"),
    ("scripts/loaded", "scripts/loaded -- CMD"),
    ("scripts/demo", "usage: scripts/demo"),
    ("scripts/install", "scripts/install --prefix DIR"),
    ("scripts/bench", "usage: scripts/bench"),
    ("cross/aarch64.sh", "cross/aarch64.sh build"),
    ("cross/bundle.sh", "cross/bundle.sh [--out FILE.tar.gz]"),
    ("cross/bundle-test.sh", "cross/bundle-test.sh --help"),
    (
        "scripts/hca-check",
        "scripts/hca-check [--device NAME] [--list]",
    ),
];

/// Scripts whose unknown arguments are refused with status 2 (the others take a
/// program's arguments or a count).
const STRICT: &[&str] = &[
    "scripts/test-all",
    "cross/bundle-test.sh",
    "scripts/hca-check",
];

/// A directory of stand-ins that write their name into `called` and fail.
fn stand_ins(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let called = dir.join("called");
    for tool in ["cargo", "rustup", "qemu-aarch64", "nft"] {
        let p = bin.join(tool);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho {tool} \"$@\" >> '{}'\nexit 1\n",
                called.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    called
}

fn run(script: &str, arg: &str, dir: &Path) -> std::process::Output {
    run_with(script, &[arg], dir, &[])
}

fn run_with(
    script: &str,
    args: &[&str],
    dir: &Path,
    env: &[(&str, &Path)],
) -> std::process::Output {
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.arg(workspace_root().join(script))
        .args(args)
        .current_dir(dir)
        .env("PATH", path)
        .envs(env.iter().copied());
    // The limit only keeps a broken script from hanging the suite.
    run_with_timeout(&mut cmd, Duration::from_secs(120)).unwrap()
}

#[test]
fn every_script_answers_help_and_does_nothing_else() {
    let dir = gsas_tests::node::scratch_dir("scripts-help");
    let called = stand_ins(&dir);
    for &(script, usage) in SCRIPTS {
        for flag in ["--help", "-h"] {
            let o = run(script, flag, &dir);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{script} {flag}: {:?}\n{out}\n{}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                out.contains(usage),
                "{script} {flag}: no {usage:?} in\n{out}"
            );
            let calls = std::fs::read_to_string(&called).unwrap_or_default();
            assert!(
                calls.is_empty(),
                "{script} {flag} ran tools instead of printing its usage:\n{calls}"
            );
        }
    }
    for &script in STRICT {
        let o = run(script, "--no-such-option", &dir);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{script}: {err}");
        assert!(err.contains("--no-such-option"), "{script}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `scripts/hca-check` without an RDMA device says so and exits 1; with one it lists its
/// ports; a device without an active port, or a named device that is not there, ends it
/// before any test runs. The devices come from a made-up sysfs directory, so this runs
/// the same on a machine with an HCA.
#[test]
fn the_hca_check_refuses_without_a_device() {
    let dir = gsas_tests::node::scratch_dir("hca-check");
    let called = stand_ins(&dir);
    let sysfs = dir.join("infiniband");
    std::fs::create_dir_all(&sysfs).unwrap();
    let env = [("HCA_CHECK_SYSFS", sysfs.as_path())];
    let o = run_with("scripts/hca-check", &[], &dir, &env);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no RDMA device on this machine"), "{err}");
    let port = sysfs.join("mlx5_0/ports/1");
    std::fs::create_dir_all(&port).unwrap();
    std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
    std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
    let o = run_with("scripts/hca-check", &["--list"], &dir, &env);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("mlx5_0") && out.contains("port 1: DOWN (Ethernet)"),
        "{out}"
    );
    let o = run_with("scripts/hca-check", &[], &dir, &env);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no device has an ACTIVE port"), "{err}");
    let o = run_with("scripts/hca-check", &["--device", "mlx5_9"], &dir, &env);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no device 'mlx5_9' (devices: mlx5_0)"),
        "{err}"
    );
    let calls = std::fs::read_to_string(&called).unwrap_or_default();
    assert!(
        calls.is_empty(),
        "ran tests without a usable device:\n{calls}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
