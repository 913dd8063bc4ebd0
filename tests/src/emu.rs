//! A running `exanet-emu` (the Exanet NI emulator standing in for a QFDB's hardware) with a
//! root directory of its own, for the tests that put transports, daemons and jobs on it.
//!
//! [`Emu::start`] runs the emulator of [`exanet_emu_command`] (the host build named by
//! `GSAS_TEST_EXANET_EMU`, natively, else this target's, under qemu-user when the tests run
//! there) with four nodes, waits (bounded) until it is ready, and on drop sends SIGTERM,
//! waits (bounded) and removes the root.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use exanet::TransportConfig;
use exanet::emu::EmuPaths;

use crate::launch::exanet_emu_command;

/// A running emulator process; SIGTERM and cleanup on drop.
pub struct Emu {
    /// Where its endpoints, mailboxes and control socket are.
    pub paths: EmuPaths,
    child: Child,
}

impl Emu {
    /// Starts `exanet-emu --root <tmp> --nodes 4 --eps <eps> --log warn` plus `extra`
    /// arguments and waits up to 120 s for it to be ready (panics otherwise, saying what
    /// the process was doing, or when it exits early).
    pub fn start(tag: &str, eps: usize, extra: &[&str]) -> Emu {
        Emu::start_with(exanet_emu_command(), tag, eps, extra)
    }

    /// [`Emu::start`] with the emulator `cmd` starts (for the emulator's own tests, which
    /// run the build of their target, never the host's).
    pub fn start_with(cmd: Command, tag: &str, eps: usize, extra: &[&str]) -> Emu {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("gsas-exa-{tag}-{}-{n}", std::process::id()));
        let child = spawn_ready(cmd, &root, eps, extra, READY_WITHIN);
        Emu {
            paths: EmuPaths::new(&root),
            child,
        }
    }

    /// Its root directory.
    pub fn root(&self) -> &Path {
        self.paths.root()
    }

    /// Sends a control command (`stats`, `unreachable 1 on`, ...) and returns the answer;
    /// panics on error. (`exanet_emu::emu::EmuStats::parse` reads the answer to `stats`.)
    pub fn control(&self, command: &str) -> String {
        self.paths
            .control(command)
            .unwrap_or_else(|e| panic!("emulator command {command:?}: {e}"))
    }

    /// Sends SIGTERM and waits (at most 30 s, then SIGKILL) for it to exit; returns whether
    /// it exited with status 0.
    pub fn terminate(&mut self) -> bool {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            if Instant::now() >= until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.terminate();
        }
        let _ = std::fs::remove_dir_all(self.paths.root());
    }
}

/// How long [`Emu::start`] waits for the emulator's `ready` file. Natively it appears in
/// milliseconds; under qemu-user in seconds.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// Starts `cmd --root <root> --nodes 4 --eps <eps> --log warn <extra...>` (an emptied
/// `root`) and waits up to `within` for its `ready` file. Panics when it exits first, or
/// when it is not ready in time (after killing it), saying what the process was doing.
pub fn spawn_ready(
    mut cmd: Command,
    root: &Path,
    eps: usize,
    extra: &[&str],
    within: Duration,
) -> Child {
    let _ = std::fs::remove_dir_all(root);
    cmd.arg("--root")
        .arg(root)
        .args(["--nodes", "4", "--eps", &eps.to_string(), "--log", "warn"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let paths = EmuPaths::new(root);
    let until = Instant::now() + within;
    while paths.wait_ready(Duration::from_millis(20)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{cmd:?} exited early with {status}");
        }
        if Instant::now() >= until {
            let why = not_ready_report(child.id(), root);
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(root);
            panic!("{cmd:?} not ready within {within:?}: {why}");
        }
    }
    child
}

/// What an emulator that did not get ready was doing, for the panic message: its
/// scheduler state and the kernel function it sleeps in (`/proc/<pid>/status`, `wchan`),
/// the machine's load, and the files it had created in its root.
fn not_ready_report(pid: u32, root: &Path) -> String {
    let state = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("State:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut files: Vec<String> = std::fs::read_dir(root)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    format!(
        "pid {pid} in state {state} (sleeping in {:?}), load average {}; {} holds [{}]",
        wchan.trim(),
        load.trim(),
        root.display(),
        files.join(", ")
    )
}

/// Polls `f` until it returns `Some`, at most `timeout` (panics naming `what` then).
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// An `ExanetTransport` configuration for tests: 4 KiB packets, four staging slots each
/// way (so that back-pressure comes after four bulk packets), and a release timeout short
/// enough that a lost release fails a test (the peer is reported as failed) but long enough
/// for a loaded 2-core host.
pub fn small_transport_config() -> TransportConfig {
    TransportConfig {
        mtu: 4096,
        tx_slots: 4,
        rx_slots: 4,
        release_timeout: Duration::from_secs(3),
        ..TransportConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that never writes `ready` is killed after the wait and named with what it
    /// was doing (a shell sleeping stands in for a stuck emulator).
    #[test]
    fn an_emulator_that_never_gets_ready_is_reported_with_its_state() {
        let root = std::env::temp_dir().join(format!("gsas-exa-stuck-{}", std::process::id()));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 60"]);
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            spawn_ready(cmd, &root, 1, &[], Duration::from_millis(300))
        }))
        .expect_err("a process without a ready file passed");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("not ready within 300ms"), "{msg}");
        assert!(msg.contains("in state S (sleeping)"), "{msg}");
        assert!(!root.exists(), "{} left behind", root.display());
    }
}
