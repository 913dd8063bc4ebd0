//! Harness of the multi-node tests: cluster files generated from the shipped loopback
//! configs (fresh ports, control sockets in a scratch directory, so tests run
//! concurrently), `gsas-atomicd` processes started and stopped by the test, secret files,
//! and `oshrun` commands.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::launch::launch;
use gsas_control::{ControlClient, StatsReport};
use gsas_service::{Service, ServiceConfig, ServiceThread};

/// `service_timeout_ms` of functional tests: generous, so that a loaded machine (more
/// processes than cores, qemu) does not turn slowness into "no answer" errors. Failure
/// tests set short deadlines of their own.
pub const RELAXED_DEADLINE_MS: &str = "60000";
/// A cluster secret for tests.
pub const SECRET: &str = "gsas-test-cluster-secret-0123456789";

/// The seed of a run of the collective checker (`shmem/examples/coll_check.rs`):
/// `GSAS_COLL_CHECK_SEED`, else from the clock (so it changes every run; the checker
/// prints it, and a failure names it).
pub fn coll_check_seed() -> u64 {
    std::env::var("GSAS_COLL_CHECK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 % 1_000_000_007)
        })
}

/// Whether a test that moves thousands of small datagrams should run: always natively;
/// under qemu-user (the aarch64 tests on an x86_64 host) only with `GSAS_QEMU_FULL=1`,
/// because emulation makes each datagram's path (two daemons and the PEs, all emulated)
/// so slow that such a test alone takes minutes. The code paths they cover are the same
/// as those of the 61440-byte tests, which do run under qemu. A skip prints
/// `SKIPPED: <test>: ...` on standard error, outside the harness's capture.
pub fn heavy_test_runs(test: &str) -> bool {
    let emulated = matches!(launch(), crate::launch::Launch::Emulated { .. });
    if !emulated || std::env::var_os("GSAS_QEMU_FULL").is_some_and(|v| v == "1") {
        return true;
    }
    crate::skip::note(
        test,
        "thousands of 1472-byte datagrams are too slow under qemu (GSAS_QEMU_FULL=1 runs it)",
    );
    false
}

/// The repository's `configs/NAME`.
pub fn shipped_config(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A cluster file made from a template: every `udp_port` gets a free port, every
/// `control_socket` a path in `dir`, and `defaults` get the given keys (replacing a key the
/// template sets).
#[derive(Debug, Clone)]
pub struct ClusterFile {
    /// The text.
    pub text: String,
    /// Control socket of every node, in file order.
    pub sockets: Vec<PathBuf>,
    /// UDP port of every node, in file order.
    pub ports: Vec<u16>,
}

impl ClusterFile {
    /// Makes the file from `template`.
    pub fn from_template(template: &str, dir: &Path) -> ClusterFile {
        let mut sockets = Vec::new();
        let mut ports = Vec::new();
        // Held until every port is chosen, so that one file never gets a port twice.
        let mut probes = Vec::new();
        let mut out = String::new();
        for line in template.lines() {
            let key = line.split('=').next().unwrap_or("").trim();
            if key == "udp_port" {
                let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                let p = probe.local_addr().unwrap().port();
                probes.push(probe);
                ports.push(p);
                out.push_str(&format!("udp_port = {p}\n"));
            } else if key == "control_socket" {
                let s = dir.join(format!("node{}.sock", sockets.len()));
                out.push_str(&format!("control_socket = \"{}\"\n", s.display()));
                sockets.push(s);
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        ClusterFile {
            text: out,
            sockets,
            ports,
        }
    }

    /// A copy with `key = value` in `[defaults]` (value written as TOML).
    pub fn with_default(&self, key: &str, value: &str) -> ClusterFile {
        let mut out = String::new();
        let mut in_defaults = false;
        let mut done = false;
        for line in self.text.lines() {
            let t = line.trim();
            if t.starts_with('[') {
                if in_defaults && !done {
                    out.push_str(&format!("{key} = {value}\n"));
                    done = true;
                }
                in_defaults = t == "[defaults]";
            }
            if in_defaults && t.split('=').next().map(str::trim) == Some(key) {
                if !done {
                    out.push_str(&format!("{key} = {value}\n"));
                    done = true;
                }
                continue;
            }
            out.push_str(line);
            out.push('\n');
        }
        assert!(
            done,
            "the template has no [defaults] table followed by another table"
        );
        ClusterFile {
            text: out,
            ..self.clone()
        }
    }

    /// With remote FORK enabled and `secret` as the secret file.
    pub fn with_fork(&self, secret: &Path) -> ClusterFile {
        self.with_default("fork_allowed", "true")
            .with_default("fork_secret_file", &format!("\"{}\"", secret.display()))
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, &self.text).unwrap();
        path.to_owned()
    }
}

/// Writes `secret` to `dir/name` with `mode`.
pub fn secret_file(dir: &Path, name: &str, secret: &str, mode: u32) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

/// A running `gsas-atomicd`; killed when dropped.
pub struct Daemon {
    /// The process.
    pub child: Child,
    /// Its control socket.
    pub socket: PathBuf,
    /// Its node.
    pub node: u16,
    /// Its standard error.
    pub log: PathBuf,
}

impl Daemon {
    /// What it wrote on standard error so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Starts `gsas-atomicd --config file --node node` (prefixed by `wrap`, e.g.
    /// `ip netns exec NS`) and waits until it answers on `socket`.
    pub fn start_with(wrap: &[&str], file: &Path, node: u16, socket: &Path) -> Daemon {
        Daemon::start_with_env(wrap, file, node, socket, &[])
    }

    /// [`Daemon::start_with`] with extra environment variables (e.g. `GSAS_EXANET_EMU`).
    pub fn start_with_env(
        wrap: &[&str],
        file: &Path,
        node: u16,
        socket: &Path,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Daemon {
        let mut cmd = if wrap.is_empty() {
            launch().command(crate::launch::program("gsas-atomicd"))
        } else {
            let mut c = Command::new(wrap[0]);
            c.args(&wrap[1..]);
            c.args(launch().prefix());
            c.arg(crate::launch::program("gsas-atomicd"));
            c
        };
        cmd.arg("--config")
            .arg(file)
            .arg("--node")
            .arg(node.to_string())
            .arg("--log-level")
            .arg("warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // A file, not a pipe: a daemon that logs much must never block on a full pipe.
        let log = socket.with_extension("log");
        cmd.stderr(std::fs::File::create(&log).expect("daemon log file"));
        let child = cmd.spawn().expect("starting gsas-atomicd");
        let mut d = Daemon {
            child,
            socket: socket.to_owned(),
            node,
            log,
        };
        let until = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(mut c) = ControlClient::connect(socket, Duration::from_secs(1)) {
                if c.ping().is_ok() {
                    return d;
                }
            }
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!(
                    "gsas-atomicd for node {node} exited with {status}: {}",
                    d.log_text()
                );
            }
            assert!(
                Instant::now() < until,
                "gsas-atomicd for node {node} did not answer on {}",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the daemon of node `node` of `cf`, written at `file`.
    pub fn start(cf: &ClusterFile, file: &Path, node: u16) -> Daemon {
        Daemon::start_with(&[], file, node, &cf.sockets[node as usize])
    }

    /// Its counters.
    pub fn stats(&self) -> StatsReport {
        gsas_control::query_stats(&self.socket, Duration::from_secs(10)).unwrap()
    }

    /// Kills it (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SIGTERM first: the daemon removes its socket.
        // SAFETY: kill has no memory arguments.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }
}

/// Starts the daemons of every node of `cf` (written at `file`).
pub fn daemons(cf: &ClusterFile, file: &Path) -> Vec<Daemon> {
    (0..cf.sockets.len() as u16)
        .map(|n| Daemon::start(cf, file, n))
        .collect()
}

/// An `oshrun` command (through qemu when the tests run emulated).
pub fn oshrun() -> Command {
    launch().command(crate::launch::program("oshrun"))
}

/// `oshrun --config file -n n --tag-output EXTRA... -- <this test binary as child_pe>`
/// running the child scenario `scenario` (the caller adds what its PEs need besides).
pub fn scenario_job(file: &Path, n: u32, extra: &[&str], scenario: &str) -> Command {
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(file)
        .arg("-n")
        .arg(n.to_string())
        .arg("--tag-output")
        .args(extra)
        .arg("--")
        .args(crate::launch::self_test_argv("child_pe").unwrap())
        .env(crate::node::SCENARIO, scenario);
    cmd
}

/// Whether process `pid` exists.
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks whether the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// Waits until `dir/ready-<rank>` exists for every rank and returns the pids written in
/// them; panics after `limit` or if `child` ends first.
pub fn wait_ready(dir: &Path, n: u32, child: &mut Child, limit: Duration) -> Vec<u32> {
    let until = Instant::now() + limit;
    let mut pids = Vec::new();
    for pe in 0..n {
        let f = dir.join(format!("ready-{pe}"));
        loop {
            if let Ok(text) = std::fs::read_to_string(&f) {
                if let Ok(pid) = text.trim().parse() {
                    pids.push(pid);
                    break;
                }
            }
            if Instant::now() > until || child.try_wait().unwrap().is_some() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                let _ = child.kill();
                panic!("PE {pe} never became ready: {err}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    pids
}

/// stdout and stderr of an output, for messages.
pub fn show(o: &std::process::Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Asserts that an `oshrun --tag-output` job of `n` PEs succeeded and that every PE printed
/// `PE i of n: <scenario> ok`.
pub fn check_pes(n: u32, scenario: &str, out: &std::process::Output) {
    assert!(out.status.success(), "{}", show(out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for pe in 0..n {
        let line = format!("[{pe}] PE {pe} of {n}: {scenario} ok");
        assert!(stdout.contains(&line), "missing {line:?}: {}", show(out));
    }
}

/// One in-process atomic service per node `0..nodes` on loopback UDP, each with its control
/// socket `node<i>.sock` in `dir`, as `oshrun` and `gsas-atomicd` would run them; `adjust`
/// changes each configuration first (a shorter deadline, ...). Panics when one cannot
/// start.
pub fn service_threads(
    dir: &Path,
    nodes: u16,
    adjust: impl Fn(&mut ServiceConfig),
) -> Vec<ServiceThread> {
    (0..nodes)
        .map(|node| {
            let mut cfg = ServiceConfig::new(
                node,
                "127.0.0.1:0".parse().unwrap(),
                dir.join(format!("node{node}.sock")),
            );
            adjust(&mut cfg);
            Service::bind(cfg).unwrap().spawn().unwrap()
        })
        .collect()
}
