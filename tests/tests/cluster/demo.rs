//! `scripts/demo --transport udp|exanet|verbs`: the README's demo job across two nodes of
//! this machine, started the way a user starts it (the script itself, under `bash`).
//!
//! The script's own build is a release build of the launcher, the daemon, the emulator and
//! the example, minutes of compiling that the test command does not otherwise do (it builds
//! the debug profile). So these tests point the script at this build's debug programs
//! (`GSAS_DEMO_BIN_DIR`, which makes it build nothing); everything after the build is the
//! script as users run it: the cluster file, the daemons (and `exanet-emu`), the wait until
//! each answers, `oshrun --config`, the clean-up.
//!
//! Each run gets a `TMPDIR` of its own, so that "nothing left behind" is exact: afterwards
//! that directory must be empty (the script's temporary directory with the cluster file,
//! control sockets, logs and emulator root is gone) and no process may still name it on its
//! command line (the daemons and the emulator are started with paths inside it).

use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use gsas_tests::launch::{
    Launch, collect_output, example, launch, package_bin, program, run_with_timeout,
};
use gsas_tests::multinode::show;

/// What the example prints on PE 0 when every check of a 4-PE job passed.
const CHECK: &str = "4 PEs, 3 laps: 12 visits counted on PE 0";

/// A bound for one run of the script (its own job timeout is a third of it).
const RUN_LIMIT: Duration = Duration::from_secs(360);

/// A fresh, empty `TMPDIR` for one run (short: the script puts Unix sockets below it).
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gsas-dt-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether the tests run on another architecture than the kernel's (qemu-user, with or
/// without binfmt_misc).
fn foreign_target() -> bool {
    matches!(launch(), Launch::Emulated { .. })
        || std::fs::read_to_string("/proc/sys/kernel/arch")
            .is_ok_and(|k| k.trim() != std::env::consts::ARCH)
}

/// `bash scripts/demo ARGS...` on this build's programs, with `tmp` as its `TMPDIR`; `None`
/// (after a loud skip) when the tests run under qemu: the script starts the programs
/// natively, so the x86_64 stage runs these tests.
fn demo(test: &str, tmp: &Path, args: &[&str]) -> Option<Command> {
    if foreign_target() {
        gsas_tests::skip::note(
            test,
            "scripts/demo starts the programs natively; the x86_64 stage runs it",
        );
        return None;
    }
    let bin = program("oshrun").parent().unwrap().to_path_buf();
    // shmem's feature `verbs` (off by default) for every transport: the verbs case needs it,
    // and one build for all keeps a concurrent test from replacing the program.
    let ring = example("shmem", "token_ring", &["verbs"]);
    assert_eq!(ring, bin.join("examples/token_ring"));
    let mut cmd = Command::new("bash");
    cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/demo"))
        .args(args)
        .env("GSAS_DEMO_BIN_DIR", &bin)
        .env("GSAS_DEMO_TIMEOUT", (RUN_LIMIT.as_secs() / 3).to_string())
        .env("TMPDIR", tmp);
    Some(cmd)
}

/// The script's temporary directory, from its `demo: cluster file DIR/cluster.toml` line.
fn cluster_dir(out: &Output) -> PathBuf {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("demo: cluster file "))
        .unwrap_or_else(|| panic!("no 'demo: cluster file' line: {}", show(out)));
    Path::new(line).parent().unwrap().to_path_buf()
}

/// Asserts that the run with `TMPDIR=tmp` left nothing: `tmp` is empty and no process names
/// it; then removes `tmp`.
fn assert_nothing_left(tmp: &Path, out: &Output) {
    let left: Vec<PathBuf> = std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{}", show(out));
    let needle = tmp.as_os_str().as_bytes();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        assert!(
            !cmdline.windows(needle.len()).any(|w| w == needle),
            "process {} still runs: {}\n{}",
            entry.file_name().to_string_lossy(),
            String::from_utf8_lossy(&cmdline).replace('\0', " "),
            show(out)
        );
    }
    std::fs::remove_dir(tmp).unwrap();
}

/// Runs the demo over `transport` with 4 PEs and checks that it announced `says` (its words
/// for the transport), the job's outcome and the clean-up.
fn runs_across_two_nodes(test: &str, transport: &str, says: &str) {
    let tmp = scratch(transport);
    let Some(mut cmd) = demo(test, &tmp, &["4", "--transport", transport]) else {
        return;
    };
    let out = run_with_timeout(&mut cmd, RUN_LIMIT).unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(CHECK), "no check line: {}", show(&out));
    let announced =
        format!("demo: 4 PEs on 2 nodes of this machine (2 + 2, in rank order), transport {says}");
    assert!(
        stdout.contains(&announced),
        "no {announced:?}: {}",
        show(&out)
    );
    for node in 0..2 {
        let up = format!("demo: node {node}: gsas-atomicd pid ");
        assert!(
            stdout.contains(&up),
            "node {node} not reported: {}",
            show(&out)
        );
    }
    assert!(!cluster_dir(&out).exists());
    assert_nothing_left(&tmp, &out);
}

#[test]
fn demo_over_udp() {
    runs_across_two_nodes("cluster::demo::demo_over_udp", "udp", "UDP over loopback");
}

#[test]
fn demo_over_exanet() {
    runs_across_two_nodes(
        "cluster::demo::demo_over_exanet",
        "exanet",
        "Exanet, emulated by exanet-emu",
    );
}

/// Over verbs, the job runs across two emulated verbs nodes (the software verbs device).
#[test]
fn demo_over_verbs() {
    let test = "cluster::demo::demo_over_verbs";
    if !foreign_target() {
        package_bin("verbs-emu", "softverbs-env");
    }
    runs_across_two_nodes(test, "verbs", "verbs on the software verbs device");
}

/// Ctrl-C (SIGINT to the script's process group, as a terminal sends it) while the daemons
/// start: exit status 130, and the daemons, the emulator and the directory are gone.
#[test]
fn demo_interrupted_cleans_up() {
    let tmp = scratch("int");
    let Some(mut cmd) = demo(
        "cluster::demo::demo_interrupted_cleans_up",
        &tmp,
        &["4", "--transport", "exanet"],
    ) else {
        return;
    };
    // The script must see Ctrl-C as a terminal would deliver it, also when this test was
    // started with SIGINT ignored (a background job of a non-interactive shell inherits
    // that, and bash cannot trap a signal ignored at its start).
    // SAFETY: signal(2) is async-signal-safe; nothing else runs in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read stdout until the cluster file is announced (the daemons are about to start),
    // keeping what was read; the rest of it is collected below.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line.starts_with("demo: cluster file ") {
                tx.send(()).unwrap();
            }
            lines.push(line);
        }
        lines
    });
    let announced = rx.recv_timeout(RUN_LIMIT / 3);
    let pgid = child.id() as libc::pid_t;
    // SAFETY: kill has no memory-safety preconditions; the group is the script's own.
    unsafe { libc::kill(-pgid, libc::SIGINT) };
    let mut out = collect_output(child, RUN_LIMIT / 3).unwrap();
    out.stdout = reader.join().unwrap().join("\n").into_bytes();
    assert!(
        announced.is_ok(),
        "no cluster file announced: {}",
        show(&out)
    );
    assert_eq!(out.status.code(), Some(130), "{}", show(&out));
    assert!(out.status.signal().is_none());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("demo: interrupted"),
        "{}",
        show(&out)
    );
    assert!(!cluster_dir(&out).exists());
    assert_nothing_left(&tmp, &out);
}
