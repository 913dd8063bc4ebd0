//! Starting the real `exanet-emu` process from a test, natively or through qemu-user.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use exanet::emu::EmuPaths;

/// The words to put before a program of this target: empty natively; `qemu-<arch> -L /`
/// when the kernel runs another architecture and binfmt_misc has no handler (the aarch64
/// tests run as `qemu-aarch64 -L / test-binary`, whose `exec` goes to the host kernel).
pub fn launcher() -> Vec<String> {
    let arch = std::env::consts::ARCH;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/arch")
        .map(|s| s.trim().to_owned())
        .ok();
    let foreign = kernel.as_deref().is_some_and(|k| k != arch);
    let binfmt = std::fs::read_to_string(format!("/proc/sys/fs/binfmt_misc/qemu-{arch}"))
        .is_ok_and(|s| s.starts_with("enabled"));
    if foreign && !binfmt {
        let sysroot = std::env::var("QEMU_LD_PREFIX").unwrap_or_else(|_| "/".into());
        vec![format!("qemu-{arch}"), "-L".into(), sysroot]
    } else {
        Vec::new()
    }
}

/// A running emulator process with its own temporary root; SIGTERM and cleanup on drop.
pub struct EmuProc {
    pub paths: EmuPaths,
    child: Child,
}

impl EmuProc {
    /// Starts `exanet-emu --root <tmp> --nodes 4 --eps <eps>` plus `extra` arguments.
    pub fn start(tag: &str, eps: usize, extra: &[&str]) -> EmuProc {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("exemu-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let exe = env!("CARGO_BIN_EXE_exanet-emu");
        let mut words = launcher();
        words.push(exe.to_owned());
        let mut cmd = Command::new(&words[0]);
        cmd.args(&words[1..])
            .arg("--root")
            .arg(&root)
            .args(["--nodes", "4", "--eps", &eps.to_string(), "--log", "warn"])
            .args(extra)
            .stdin(Stdio::null());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {words:?}: {e}"));
        let paths = EmuPaths::new(&root);
        let start = Instant::now();
        while paths.wait_ready(Duration::from_millis(50)).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("exanet-emu exited early with {status}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "exanet-emu not ready within 60 s"
            );
        }
        EmuProc { paths, child }
    }

    pub fn root(&self) -> PathBuf {
        self.paths.root().to_path_buf()
    }

    /// Sends SIGTERM and waits (bounded) for a clean exit; returns whether it exited 0.
    pub fn terminate(&mut self) -> bool {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for EmuProc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.terminate();
        }
        let _ = std::fs::remove_dir_all(self.paths.root());
    }
}

/// Polls `f` until it returns `Some`, at most `timeout`.
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
