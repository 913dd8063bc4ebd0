//! Multi-process tests on the software device: each *role* is a process, an emulated node
//! of its own, and the roles meet through files in a scratch directory that is also the
//! device's rendezvous directory.
//!
//! The parent calls [`run_roles`] with a command that starts the running test binary again
//! (so that the same test function plays the role it finds in [`ROLE`]); each role
//! [`publish`]es what its peers need (queue pair numbers, keys, addresses), [`fetch`]es
//! theirs and meets them at [`barrier`]s. A failed check in a role panics, which fails its
//! process and so the parent's test. Every wait is bounded by [`WAIT`].

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::Node;

/// The variable naming the role a child plays.
pub const ROLE: &str = "VERBS_TEST_ROLE";
/// The variable naming the scratch directory of a run.
pub const DIR: &str = "VERBS_TEST_DIR";
/// How long a role waits for its peer at a barrier or for a completion.
pub const WAIT: Duration = Duration::from_secs(60);

/// The role this process plays (None: the test runs as the parent).
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// The scratch directory of this role's run.
pub fn dir() -> PathBuf {
    PathBuf::from(std::env::var_os(DIR).expect("VERBS_TEST_DIR"))
}

/// A fresh directory with a short path (it holds the device's socket paths).
fn scratch() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "sv-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One role of a run: its name and how its node differs from the default.
pub struct Role {
    /// The role's name, which the child process receives to pick its part of the test.
    pub name: &'static str,
    /// The LID of the role's software device (its "node" on the emulated fabric).
    pub lid: u16,
    /// Extra environment of the role's process (fault plans, ports, GIDs).
    pub env: Vec<(&'static str, String)>,
}

impl Role {
    /// A role named `name` on the device with LID `lid`, with the default environment.
    pub fn new(name: &'static str, lid: u16) -> Role {
        Role {
            name,
            lid,
            env: Vec::new(),
        }
    }

    /// The same role with `var=value` added to its environment.
    pub fn with(mut self, var: &'static str, value: &str) -> Role {
        self.env.push((var, value.to_owned()));
        self
    }
}

/// Runs every role concurrently, each a process from `command` (the test binary again, in
/// practice `gsas_tests::launch::self_test(test_name)`), and requires every role to succeed
/// within `timeout`; the first that fails ends the others, and so does the timeout. Panics
/// with the roles' output otherwise.
pub fn run_roles(command: impl Fn() -> Command, roles: Vec<Role>, timeout: Duration) {
    let dir = scratch();
    let children: Vec<_> = roles
        .iter()
        .map(|r| {
            let mut cmd = command();
            let mut node = Node::new(&dir, r.lid);
            for (k, v) in &r.env {
                node = node.with(k, v.as_str());
            }
            node.apply(&mut cmd);
            cmd.env(ROLE, r.name)
                .env(DIR, &dir)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            (r.name, cmd.spawn().expect("starting a role"))
        })
        .collect();
    // A role that fails ends the run: the others would only wait for it at a barrier.
    let mut children = children;
    let t0 = Instant::now();
    loop {
        let mut running = 0;
        let mut failed = false;
        for (_, child) in children.iter_mut() {
            match child.try_wait().expect("waiting for a role") {
                None => running += 1,
                Some(status) => failed |= !status.success(),
            }
        }
        if running == 0 {
            break;
        }
        if failed || t0.elapsed() > timeout {
            if !failed {
                eprintln!("run_roles: the roles did not finish within {timeout:?}: killed");
            }
            for (_, child) in children.iter_mut() {
                let _ = child.kill();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut failures = Vec::new();
    for (name, child) in children {
        match collect_output(child) {
            Ok(out) if out.status.success() => {
                // What the role reported (libtest shows it with --nocapture or on failure).
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    let noise = ["running ", "test ", "."]
                        .iter()
                        .any(|n| line.starts_with(n));
                    if !noise && !line.trim().is_empty() {
                        println!("role {name}: {line}");
                    }
                }
            }
            Ok(out) => failures.push(format!(
                "role {name}: {}\n--- stdout\n{}--- stderr\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => failures.push(format!("role {name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `text` as `<dir>/<name>` atomically.
pub fn publish(name: &str, text: &str) {
    let d = dir();
    let tmp = d.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, d.join(name)).unwrap();
}

/// Waits for `<dir>/<name>` and returns its text.
pub fn fetch(name: &str) -> String {
    let p = dir().join(name);
    let t0 = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(&p) {
            return s;
        }
        assert!(t0.elapsed() < WAIT, "waited {WAIT:?} for {}", p.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every role in `roles` reaches barrier `tag` before any leaves it.
pub fn barrier(me: &str, roles: &[&str], tag: &str) {
    publish(&format!("{me}.{tag}.barrier"), "");
    for r in roles {
        fetch(&format!("{r}.{tag}.barrier"));
    }
}

/// The output of an exited (or killed) role.
fn collect_output(mut child: Child) -> std::io::Result<Output> {
    let status = child.wait()?;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut o) = child.stdout.take() {
        o.read_to_end(&mut stdout)?;
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_end(&mut stderr)?;
    }
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Whether process `pid` has exited (gone, or a zombie not yet reaped).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// The software device's counters in this process (a role's): packets sent, dropped by fault
/// injection, retransmissions, duplicates answered, sequence NAKs, RNR NAKs, completions
/// delivered to completion queues, and late timeouts (retransmission timeouts not counted
/// against the retry count because the responder had not yet read what was sent).
pub fn counters() -> [u64; 8] {
    let mut out = [0u64; 8];
    // SAFETY: the binding loaded libibverbs.so.1 (the software device in a role); the symbol
    // has this signature in csrc/device.c.
    unsafe {
        let h = libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_NOLOAD,
        );
        assert!(!h.is_null(), "libibverbs.so.1 is not loaded");
        let f = libc::dlsym(h, c"softverbs_counters".as_ptr());
        assert!(!f.is_null(), "libibverbs.so.1 is not the software device");
        let f: extern "C" fn(*mut u64, usize) -> usize = std::mem::transmute(f);
        assert_eq!(f(out.as_mut_ptr(), out.len()), out.len());
    }
    out
}
