//! The node's atomic service when none runs: what a leader PE starts, through a seam.
//!
//! **What it is.** When no `gsas-atomicd` serves a PE's node and no launcher started a
//! service for the job (a singleton `./a.out`, `srun --mpi=pmi2`, `mpiexec.hydra`), the
//! node's leader PE starts one for its node and stops it at `shmem_finalize`, once every
//! PE of the node has left ([`NodeService`]). How it is started is a seam:
//!
//! * by default ([`start_private_daemon`]) the leader runs `gsas-atomicd --private` as a
//!   child process: the PE links nothing of the service (libshmem carries no service
//!   code), the daemon serves only this user (socket mode 0600), ends with the leader
//!   (`PR_SET_PDEATHSIG`) and logs warnings only unless `GSAS_LOG` says otherwise. The
//!   binary is `GSAS_ATOMICD` when set, else the `gsas-atomicd` installed beside the
//!   library or program (`DIR/../bin`, `DIR`, and `DIR/..` of the shared object or
//!   executable that holds this code, which finds `PREFIX/bin` from `PREFIX/lib` and
//!   `target/debug` from `target/debug/deps`; only a file and directory that belong to root
//!   or this user and that nobody else may write), else the first on `PATH`; a PE that runs
//!   under qemu-user starts it under the same emulator. It is started from a thread that
//!   lasts as long as the process (`PR_SET_PDEATHSIG` follows the forking thread), and a
//!   daemon not stopped (a failed `init`, a node client dropped without `finalize`) is
//!   ended when its handle is dropped;
//! * a program that embeds the service library can install another starter with
//!   [`set_service_starter`] before `init` (`gsas_launch::embedded::start_in_process` runs
//!   it as a thread of the leader, as the test kit does for Rust PEs).
//!
//! **What it is not.** Not the daemon (`gsas-launch`'s `gsas-atomicd`) or the service
//! (`gsas-service`).
//!
//! **Thread safety.** The starter is set once per process; a [`NodeService`] is owned by
//! the node client and stopped once.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gsas_transport::config;

/// What the service of a node needs to know, as the leader PE sees it.
#[derive(Clone, Debug)]
pub struct NodeServiceConfig {
    /// The node.
    pub node: u16,
    /// Its name in logs (`pe3 node service`).
    pub name: String,
    /// The UDP address to bind (port 0: any).
    pub udp_bind: SocketAddr,
    /// The control socket to create.
    pub socket: PathBuf,
    /// The job's UDP MTU.
    pub udp_mtu: usize,
    /// The reliability deadline.
    pub deadline: Duration,
    /// The service's busy-poll time after activity.
    pub spin: Duration,
    /// The scheduler slice the service asks for (zero: the system's).
    pub sched_slice: Duration,
    /// The memory the service may hand out, if bounded.
    pub memory_limit: Option<u64>,
    /// The cluster file, when the node is described in one (an Exanet node's endpoints
    /// come from it).
    pub cluster_file: Option<PathBuf>,
    /// The node's Exanet endpoints, when the node is an Exanet node.
    pub exanet: Option<gsas_transport::exanet::ExanetSite>,
    /// The daemon to start (`GSAS_ATOMICD`; `None`: look for it, see the module docs).
    pub daemon: Option<PathBuf>,
}

/// A service this PE started for its node.
pub trait NodeService: Send {
    /// Its control socket.
    fn socket_path(&self) -> &Path;
    /// Stops it (its PEs have left).
    fn stop(self: Box<Self>) -> Result<(), String>;
}

/// Starts a node's service; returns once its control socket accepts connections.
pub type StartService = fn(&NodeServiceConfig) -> Result<Box<dyn NodeService>, String>;

static STARTER: OnceLock<StartService> = OnceLock::new();

/// Installs how this process starts its node's service (before `init`; once). Returns
/// false when a starter was installed already (it stays).
pub fn set_service_starter(start: StartService) -> bool {
    STARTER.set(start).is_ok()
}

/// Starts the node's service with the installed starter, or [`start_private_daemon`].
pub(crate) fn start(cfg: &NodeServiceConfig) -> Result<Box<dyn NodeService>, String> {
    STARTER.get().copied().unwrap_or(start_private_daemon)(cfg)
}

/// The default starter: `gsas-atomicd --private` as a child process (see the
/// [module docs](self)).
pub fn start_private_daemon(cfg: &NodeServiceConfig) -> Result<Box<dyn NodeService>, String> {
    let bin = daemon_binary(cfg.daemon.as_deref())?;
    // A PE under qemu-user (a cross-built program tried on another host) starts the
    // daemon under the same emulator.
    let mut cmd = match gsas_sys::process::user_mode_emulation() {
        None => Command::new(&bin),
        Some(e) => {
            let mut c = Command::new(e.emulator);
            c.arg("-L").arg(e.sysroot).arg(&bin);
            c
        }
    };
    cmd.arg("--private");
    match (&cfg.exanet, &cfg.cluster_file) {
        (Some(_), Some(file)) => {
            cmd.arg("--config").arg(file);
        }
        (Some(_), None) => {
            return Err("an Exanet node's service needs the cluster file (GSAS_CONFIG)".into());
        }
        (None, _) => {}
    }
    cmd.arg("--node")
        .arg(cfg.node.to_string())
        .arg("--listen")
        .arg(cfg.udp_bind.to_string())
        .arg("--socket")
        .arg(&cfg.socket)
        .stdin(Stdio::null());
    let deadline_ms = u64::try_from(cfg.deadline.as_millis()).unwrap_or(u64::MAX);
    let mut env: Vec<(&str, OsString)> = vec![
        (config::GSAS_UDP_MTU.name, cfg.udp_mtu.to_string().into()),
        (
            config::GSAS_DEADLINE_MS.name,
            deadline_ms.to_string().into(),
        ),
        (
            config::GSAS_SERVICE_SPIN_US.name,
            cfg.spin.as_micros().to_string().into(),
        ),
        (
            config::GSAS_SCHED_SLICE_US.name,
            cfg.sched_slice.as_micros().to_string().into(),
        ),
    ];
    if let Some(m) = cfg.memory_limit {
        env.push((config::GSAS_MEMORY_LIMIT.name, m.to_string().into()));
    }
    cmd.envs(env);
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (`prctl`, `getppid`, `_exit`). The service ends with the PE
    // that started it (its PEs are gone or going).
    unsafe {
        cmd.pre_exec(move || gsas_sys::process::child_set_pdeathsig(parent, libc::SIGTERM));
    }
    let child =
        spawn_from_lasting_thread(cmd).map_err(|e| format!("starting {}: {e}", bin.display()))?;
    let mut daemon = PrivateDaemon {
        child,
        socket: cfg.socket.clone(),
        bin,
        reaped: false,
    };
    // On an error the daemon is dropped, which ends it.
    daemon.wait_ready(cfg.deadline.max(READY_AT_LEAST))?;
    log::info!(
        "started {} --private for node {} (pid {}) at {}",
        daemon.bin.display(),
        cfg.node,
        daemon.child.id(),
        cfg.socket.display()
    );
    Ok(Box::new(daemon))
}

/// The least time a private daemon gets to bind its sockets.
const READY_AT_LEAST: Duration = Duration::from_secs(10);

/// How long a private daemon gets to stop on SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Spawns `cmd` from a thread that lasts as long as the process: `PR_SET_PDEATHSIG` fires
/// when the *thread* that forked ends, and the thread that calls `init` may end long before
/// the PEs are done with their service.
fn spawn_from_lasting_thread(mut cmd: Command) -> std::io::Result<Child> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("gsas-node-service".into())
        .spawn(move || {
            let _ = tx.send(cmd.spawn());
            loop {
                std::thread::park();
            }
        })?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the spawning thread ended"))?
}

/// `gsas-atomicd --private`, a child of this PE; ended when dropped unless stopped.
struct PrivateDaemon {
    child: Child,
    socket: PathBuf,
    bin: PathBuf,
    /// Whether the child was reaped.
    reaped: bool,
}

impl PrivateDaemon {
    /// Waits until the control socket answers a ping, or the daemon exits (its own
    /// message is on standard error), or `limit` passes.
    fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(200);
        loop {
            let exited = self.child.try_wait().map_err(|e| e.to_string())?;
            if let Some(status) = exited {
                self.reaped = true;
                return Err(format!(
                    "{} --private ended before serving ({status}); its message is above",
                    self.bin.display()
                ));
            }
            let ready = self.socket.exists()
                && gsas_control::ControlClient::connect(&self.socket, Duration::from_secs(1))
                    .and_then(|mut c| c.ping())
                    .is_ok();
            if ready {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "{} --private did not serve {} within {:.1} s",
                    self.bin.display(),
                    self.socket.display(),
                    limit.as_secs_f64()
                ));
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then SIGKILL after [`STOP_GRACE`]; reaps the child.
    fn terminate(&mut self) -> Result<(), String> {
        if self.reaped {
            return Ok(());
        }
        self.reaped = true;
        let pid = self.child.id();
        // Our own child, not reaped yet: the pid is still its own.
        let _ = gsas_sys::process::kill(pid, libc::SIGTERM);
        let until = Instant::now() + STOP_GRACE;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(format!("the node's service (pid {pid}) ended: {status}"));
                }
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(2)),
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!(
                        "the node's service (pid {pid}) did not stop within {:.0} s: killed",
                        STOP_GRACE.as_secs_f64()
                    ));
                }
                Err(e) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!("waiting for the node's service (pid {pid}): {e}"));
                }
            }
        }
    }
}

impl Drop for PrivateDaemon {
    /// A daemon not stopped (a failed `init` after it started, a node client dropped
    /// without `finalize`) is ended, not left behind.
    fn drop(&mut self) {
        if let Err(e) = self.terminate() {
            log::warn!("{e}");
        }
    }
}

impl NodeService for PrivateDaemon {
    fn socket_path(&self) -> &Path {
        &self.socket
    }

    fn stop(mut self: Box<Self>) -> Result<(), String> {
        self.terminate()
    }
}

/// The `gsas-atomicd` to start (see the [module docs](self)).
fn daemon_binary(given: Option<&Path>) -> Result<PathBuf, String> {
    const NAME: &str = "gsas-atomicd";
    if let Some(p) = given {
        return if is_executable(p) {
            Ok(p.to_owned())
        } else {
            Err(format!(
                "{}={}: no such executable",
                config::GSAS_ATOMICD.name,
                p.display()
            ))
        };
    }
    // Beside the library or program: only where nobody but root and this user can put a
    // file (a program in /tmp must not run another user's /tmp/gsas-atomicd).
    let mut beside = Vec::new();
    for file in [own_object(), std::env::current_exe().ok()]
        .into_iter()
        .flatten()
    {
        if let Some(dir) = file.parent() {
            beside.push(dir.join("../bin"));
            beside.push(dir.to_owned());
            beside.push(dir.join(".."));
        }
    }
    let on_path = || {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(NAME))
            .find(|p| is_executable(p))
    };
    beside
        .iter()
        .map(|d| d.join(NAME))
        .find(|p| is_executable(p) && trusted(p))
        .or_else(on_path)
        .ok_or_else(|| {
            format!(
                "no {NAME} found to serve this node (beside the library or program, or on PATH); \
                 install gsas (scripts/install), set GSAS_ATOMICD=/path/to/{NAME}, or start a \
                 daemon for the node (gsas-atomicd --config FILE --node ID)"
            )
        })
}

/// Whether `p` and its directory belong to root or this user, and nobody else may write
/// them.
fn trusted(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let ok = |m: std::fs::Metadata| (m.uid() == 0 || m.uid() == me) && m.mode() & 0o022 == 0;
    let Ok(file) = std::fs::canonicalize(p) else {
        return false;
    };
    let dir_ok = file
        .parent()
        .and_then(|d| std::fs::metadata(d).ok())
        .is_some_and(ok);
    dir_ok && std::fs::metadata(&file).is_ok_and(ok)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The shared object (or executable) that holds this code: `libshmem.so` for a C program.
fn own_object() -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    let here = (own_object as *const ()).cast::<libc::c_void>();
    // SAFETY: `dladdr` only reads the address and fills `info`.
    let found = unsafe { libc::dladdr(here, info.as_mut_ptr()) } != 0;
    // SAFETY: `dladdr` succeeded, so `info` is initialized.
    let info = unsafe { info.assume_init() };
    if !found || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: `dli_fname` is a NUL-terminated path owned by the dynamic linker.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.to_bytes()),
    );
    std::fs::canonicalize(path).ok()
}
