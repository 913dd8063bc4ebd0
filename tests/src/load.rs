//! A loaded machine for tests: CPU-bound processes beside a job.
//!
//! **What it is.** [`CpuHogs::start`] starts `n` shells that loop without end (`sh -c
//! 'while :; do :; done'`), each a process that is always runnable, as other users' builds
//! and tests are on a shared machine; dropping the value kills and reaps them (by their
//! process ids). A test runs its job while it holds one.
//!
//! **What it is not.** A benchmark harness or a measure of the load: the hogs only make sure
//! that the job has fewer cores than runnable threads.
//!
//! **Thread-safety.** Each value owns its processes; tests in parallel threads start their
//! own.
//!
//! ```
//! use gsas_tests::load::CpuHogs;
//!
//! let hogs = CpuHogs::start(2);
//! assert_eq!(hogs.pids().len(), 2);
//! drop(hogs); // killed and reaped
//! ```

use std::process::{Child, Command, Stdio};

/// CPU-bound processes, killed when dropped.
pub struct CpuHogs {
    children: Vec<Child>,
}

impl CpuHogs {
    /// Starts `n` of them. Panics when `sh` cannot be started.
    pub fn start(n: usize) -> CpuHogs {
        let children = (0..n)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("starting a CPU-bound sh")
            })
            .collect();
        CpuHogs { children }
    }

    /// Their process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
