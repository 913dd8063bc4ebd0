//! `gsas-atomicd`: the per-node atomic-service daemon.
//!
//! What it is: the command line of the daemon ([`parse`], [`help`]) and its [`main`]:
//!
//! * `gsas-atomicd --config FILE --node ID`: serve node `ID` of a `board-config` cluster
//!   file: UDP on the node's `bind` address and `udp_port` (nothing else), control socket
//!   `control_socket`, memory limit `memory`, deadline `defaults.service_timeout_ms`. A file
//!   that does not load is refused with the loader's `file:line: key: reason` message.
//! * `gsas-atomicd --listen ADDR:PORT --socket PATH [--node ID]`: the same without a file.
//! * `gsas-atomicd --stats SOCKET` (or `gsas-atomicd stats SOCKET`): print a running
//!   service's counters and exit.
//!
//! The daemon logs through `log` (`--log-level`, else `GSAS_LOG`, else `info`), runs the
//! service loop in its main thread with SIGTERM and SIGINT delivered through a `signalfd`,
//! and removes its socket when it stops. Every PE of a job must have the user id of the
//! job's first PE; the socket itself is open to every user (mode 0666). The UDP MTU is
//! `GSAS_UDP_MTU`, else the file's `defaults.udp_mtu`, else 61440.
//!
//! **Remote FORK** (starting PEs for a multi-node `oshrun`, see [`crate::fork`]) is off
//! unless the cluster file has `defaults.fork_allowed = true` and
//! `defaults.fork_secret_file`, or `--listen` mode is given `--fork-secret FILE`. The
//! secret file is checked before anything is bound (regular file, mode 0600 or stricter,
//! owned by the daemon's user, at least 16 bytes); a file that fails a check stops the
//! daemon with a message naming the file and the check (exit status 2). With FORK
//! enabled the PEs run as the daemon's user: run it as the job's user or a dedicated
//! user, never as root for other people's jobs (a daemon running as root says so in its
//! log).
//!
//! What it is not: a launcher. Thread-safety: [`main`] is a process entry point.

use std::ffi::OsString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use log::LevelFilter;

use crate::fork::secret::Secret;
use crate::fork::server::{ForkServer, ForkServerConfig};
use gsas_control::ControlClient;
use gsas_service::{Service, ServiceConfig, UidPolicy};
use gsas_sys::event::SignalFd;
use gsas_transport::config::RuntimeConfig;

/// What the daemon was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Serve a node described by a cluster file.
    Config {
        /// The cluster file.
        file: PathBuf,
        /// The node id.
        node: u16,
        /// `--log-level`.
        log_level: Option<LevelFilter>,
        /// `--private` (see [`Command::Listen::private`]) with `--listen` and `--socket`
        /// in place of the node entry's UDP address and control socket.
        private: Option<(SocketAddr, PathBuf)>,
    },
    /// Serve with explicit addresses.
    Listen {
        /// UDP address.
        listen: SocketAddr,
        /// Control socket.
        socket: PathBuf,
        /// Node id (default 0).
        node: u16,
        /// `--log-level`.
        log_level: Option<LevelFilter>,
        /// `--fork-secret FILE`: serve remote FORK authenticated with this secret.
        fork_secret: Option<PathBuf>,
        /// `--private`: the node service a PE starts when no daemon serves its node
        /// (`gsas_node::node_service`): only this user's PEs, a control socket of mode
        /// 0600, no remote FORK, warnings only unless `--log-level` or `GSAS_LOG` say more.
        private: bool,
    },
    /// Print a running service's counters.
    Stats {
        /// Its control socket.
        socket: PathBuf,
        /// `--explain`: each line with its kind (counter or gauge) and meaning.
        explain: bool,
    },
    /// Declare an allocation on the service at `socket` (as root).
    Declare {
        /// Its control socket.
        socket: PathBuf,
        /// The allocation's id.
        id: u64,
        /// The user it is for.
        uid: u32,
        /// PEs on this node.
        pes: u32,
        /// The largest job it allows (0: any).
        job_pes: u32,
        /// Bytes of segments (0: the per-user share).
        memory: u64,
    },
    /// End an allocation on the service at `socket` (as root).
    Undeclare {
        /// Its control socket.
        socket: PathBuf,
        /// The allocation's id.
        id: u64,
    },
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// The help text.
pub fn help() -> String {
    "\
gsas-atomicd: the gsas atomic service of one node

Usage:
  gsas-atomicd --config FILE --node ID [--log-level LEVEL]
  gsas-atomicd --listen ADDR:PORT --socket PATH [--node ID] [--fork-secret FILE]
               [--log-level LEVEL]
  gsas-atomicd --private [--config FILE] --node ID --listen ADDR:PORT --socket PATH
  gsas-atomicd --stats SOCKET [--explain]     (also: gsas-atomicd stats SOCKET)
  gsas-atomicd declare SOCKET --id ID --user USER --pes N [--job-pes N] [--memory SIZE]
  gsas-atomicd undeclare SOCKET --id ID

Serves remote reads, writes and atomics for the PEs of this node over UDP or Exanet,
and hands out their shared memory over the Unix control socket. With --config, the
node's entry of the cluster file gives the UDP address (bind, udp_port), the control
socket, the memory limits (memory; job_memory and user_memory, half of it each by
default, so that no one user books the node), the peer table (max_peers), the
transport (transport; GSAS_TRANSPORT overrides it) with, for exanet, the coordinate
(coord) and the endpoints (uio_devices, or the emulated node of
GSAS_EXANET_EMU=<exanet-emu root>), and its defaults the deadline
(service_timeout_ms), the UDP MTU (udp_mtu) and remote FORK (fork_allowed,
fork_secret_file). Over Exanet the UDP socket still carries host actions (ping, remote
FORK). SIGTERM or SIGINT stop it cleanly.

Remote FORK lets a multi-node oshrun start PEs here; it is off unless enabled, and
only requests signed with the cluster secret (a 0600 file owned by this user) are
served. The PEs run as this daemon's user: never enable it in a daemon that runs as
root for other people's jobs.

Allocations: with defaults.require_allocation = true in the cluster file, the daemon
admits the PEs of a user other than root only under an allocation that root declared
on this node (declare, e.g. from a Slurm prolog with --id $SLURM_JOB_ID --user
$SLURM_JOB_USER; undeclare from the epilog): up to --pes PEs here, in jobs of up to
--job-pes PEs (default: any), with up to --memory of segments (default: the per-user
share). Running PEs outlive their allocation's end; new ones are refused.

Options:
  --config FILE       cluster file (board-config TOML)
  --node ID           node id in the cluster file (default 0 with --listen)
  --listen ADDR:PORT  UDP address to bind (without --config)
  --socket PATH       control socket path (without --config)
  --fork-secret FILE  serve remote FORK signed with the secret in FILE (with --listen)
  --private           the service a PE starts for its node when no daemon runs there:
                      only this user's PEs (control socket mode 0600), no remote FORK,
                      warnings only by default; with --config, --listen and --socket
                      replace the node entry's addresses
  --log-level LEVEL   off, error, warn, info, debug or trace (default: GSAS_LOG, or info)
  --stats SOCKET      print the counters of the service at SOCKET and exit; counters
                      only grow for the life of the service, gauges say how things are
  --explain           with --stats: print each line's kind and meaning beside it
  -h, --help          print this help
  -V, --version       print the version

Examples:
  gsas-atomicd --config /etc/gsas/cluster.toml --node 2
  gsas-atomicd --listen 127.0.0.1:7470 --socket /tmp/gsas-node0.sock
  gsas-atomicd --stats /run/gsas/atomicd.sock --explain
"
    .into()
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    let mut it = args.into_iter().peekable();
    let mut config = None;
    let mut node = None;
    let mut listen = None;
    let mut socket = None;
    let mut log_level = None;
    let mut stats = None;
    let mut explain = false;
    let mut fork_secret = None;
    let mut private = false;
    if it
        .peek()
        .is_some_and(|a| a == "declare" || a == "undeclare")
    {
        let verb = it.next().unwrap_or_default();
        return parse_allocation(verb == "declare", it);
    }
    if it.peek().is_some_and(|a| a == "stats") {
        it.next();
        let s = it.next().ok_or("stats needs the service's socket path")?;
        let explain = match it.next() {
            None => false,
            Some(a) if a == "--explain" => true,
            Some(a) => return Err(format!("unknown argument {a:?} after stats SOCKET")),
        };
        return Ok(Command::Stats {
            socket: s.into(),
            explain,
        });
    }
    while let Some(arg) = it.next() {
        let a = arg.to_string_lossy().into_owned();
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (a.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().map(|v| v.to_string_lossy().into_owned()))
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--config" => config = Some(PathBuf::from(value("--config")?)),
            "--node" => {
                let v = value("--node")?;
                node = Some(
                    v.trim()
                        .parse::<u16>()
                        .map_err(|_| format!("--node {v:?}: not a node id (0..=65535)"))?,
                );
            }
            "--listen" => {
                let v = value("--listen")?;
                listen = Some(v.parse::<SocketAddr>().map_err(|_| {
                    format!("--listen {v:?}: not an address such as 127.0.0.1:7470")
                })?);
            }
            "--socket" => socket = Some(PathBuf::from(value("--socket")?)),
            "--stats" => stats = Some(PathBuf::from(value("--stats")?)),
            "--explain" => explain = true,
            "--private" => private = true,
            "--fork-secret" => fork_secret = Some(PathBuf::from(value("--fork-secret")?)),
            "--log-level" => {
                let v = value("--log-level")?;
                log_level = Some(v.trim().parse::<LevelFilter>().map_err(|_| {
                    format!("--log-level {v:?}: not one of off, error, warn, info, debug, trace")
                })?);
            }
            _ => return Err(format!("unknown argument {a:?} (see --help)")),
        }
    }
    if let Some(socket) = stats {
        return Ok(Command::Stats { socket, explain });
    }
    if explain {
        return Err("--explain goes with --stats SOCKET".into());
    }
    if private && fork_secret.is_some() {
        return Err("--private serves no remote FORK: drop --fork-secret".into());
    }
    match (config, listen, socket) {
        (Some(file), Some(listen), Some(socket)) if private => Ok(Command::Config {
            file,
            node: node.ok_or("--config needs --node ID")?,
            log_level,
            private: Some((listen, socket)),
        }),
        (Some(_), _, _) if private => {
            Err("--private with --config needs --listen ADDR:PORT and --socket PATH".into())
        }
        (Some(_), _, _) if fork_secret.is_some() => Err(
            "--fork-secret goes with --listen; with --config set defaults.fork_allowed and defaults.fork_secret_file in the cluster file"
                .into(),
        ),
        (Some(file), None, None) => {
            let node = node.ok_or("--config needs --node ID")?;
            Ok(Command::Config {
                file,
                node,
                log_level,
                private: None,
            })
        }
        (None, Some(listen), Some(socket)) => Ok(Command::Listen {
            listen,
            socket,
            node: node.unwrap_or(0),
            log_level,
            fork_secret,
            private,
        }),
        (Some(_), _, _) => Err("--config cannot be combined with --listen or --socket".into()),
        (None, Some(_), None) => Err("--listen needs --socket PATH".into()),
        (None, None, Some(_)) => Err("--socket needs --listen ADDR:PORT".into()),
        (None, None, None) => Err(
            "nothing to serve: give --config FILE --node ID, or --listen ADDR:PORT --socket PATH (see --help)"
                .into(),
        ),
    }
}

/// `declare SOCKET ...` (`declare`) or `undeclare SOCKET --id ID`: the arguments after the
/// verb.
fn parse_allocation(
    declare: bool,
    mut it: impl Iterator<Item = OsString>,
) -> Result<Command, String> {
    let verb = if declare { "declare" } else { "undeclare" };
    let socket = PathBuf::from(
        it.next()
            .ok_or_else(|| format!("{verb} needs the service's socket path"))?,
    );
    let (mut id, mut uid, mut pes, mut job_pes, mut memory) = (None, None, None, 0u32, 0u64);
    while let Some(arg) = it.next() {
        let a = arg.to_string_lossy().into_owned();
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (a.clone(), None),
        };
        let v = match inline.or_else(|| it.next().map(|v| v.to_string_lossy().into_owned())) {
            Some(v) => v,
            None => return Err(format!("{flag} needs a value")),
        };
        let number = |what: &str| -> Result<u64, String> {
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("{flag} {v:?}: not {what}"))
        };
        match flag.as_str() {
            "--id" => id = Some(number("a number")?),
            "--user" | "--uid" if declare => uid = Some(user_id(&v)?),
            "--pes" if declare => {
                let n = number("a PE count")?;
                pes = Some(
                    u32::try_from(n)
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or(format!("--pes {v:?}: 1..=4294967295"))?,
                );
            }
            "--job-pes" if declare => {
                job_pes = u32::try_from(number("a PE count")?)
                    .map_err(|_| format!("--job-pes {v:?}: at most 4294967295"))?;
            }
            "--memory" if declare => {
                memory = board_config::parse_size(&v)
                    .map_err(|e| format!("--memory {v:?}: {e} (a size such as 16g)"))?;
            }
            _ => return Err(format!("{verb}: unknown argument {a:?} (see --help)")),
        }
    }
    let id = id.ok_or_else(|| format!("{verb} needs --id ID (e.g. the Slurm job id)"))?;
    if !declare {
        return Ok(Command::Undeclare { socket, id });
    }
    Ok(Command::Declare {
        socket,
        id,
        uid: uid.ok_or("declare needs --user USER (a name or a numeric uid)")?,
        pes: pes.ok_or("declare needs --pes N (PEs the user may run on this node)")?,
        job_pes,
        memory,
    })
}

/// A user name or numeric uid.
fn user_id(v: &str) -> Result<u32, String> {
    if let Ok(n) = v.trim().parse::<u32>() {
        return Ok(n);
    }
    let name = std::ffi::CString::new(v.trim()).map_err(|_| format!("--user {v:?}: not a name"))?;
    // SAFETY: getpwnam reads the passwd database for a NUL-terminated name; the result is
    // read at once on this thread (the only one of this command).
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(format!("--user {v:?}: no such user"));
    }
    // SAFETY: a non-null passwd entry from getpwnam.
    Ok(unsafe { (*pw).pw_uid })
}

/// Builds the service configuration for node `node` of the cluster file `file`.
pub fn config_from_file(file: &std::path::Path, node: u16) -> Result<ServiceConfig, String> {
    daemon_config(file, node).map(|d| d.service)
}

/// What a daemon serving a node of a cluster file needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonConfig {
    /// The service.
    pub service: ServiceConfig,
    /// The cluster's UDP MTU (`defaults.udp_mtu`).
    pub udp_mtu: usize,
    /// The secret file when remote FORK is enabled (`defaults.fork_allowed`).
    pub fork_secret: Option<PathBuf>,
    /// The node's entry (transport, coordinate and UIO devices for Exanet).
    pub node: board_config::Node,
}

/// Reads node `node` of the cluster file `file`: the service configuration, the UDP MTU
/// and whether (and with which secret) remote FORK is enabled.
pub fn daemon_config(file: &std::path::Path, node: u16) -> Result<DaemonConfig, String> {
    let cluster = board_config::Cluster::load(file).map_err(|e| e.to_string())?;
    let n = cluster.node(node).ok_or_else(|| {
        let ids: Vec<String> = cluster.node_ids().map(|i| i.to_string()).collect();
        format!(
            "{}: node {node} is not in the cluster (nodes: {})",
            file.display(),
            ids.join(", ")
        )
    })?;
    let index = cluster
        .nodes()
        .iter()
        .position(|x| x.id == node)
        .unwrap_or(0);
    let addrs: Vec<SocketAddr> = (n.bind.as_str(), n.udp_port)
        .to_socket_addrs()
        .map_err(|e| {
            format!(
                "{}: nodes[{index}].bind = {:?}: {e}",
                file.display(),
                n.bind
            )
        })?
        .collect();
    let udp = addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| {
            format!(
                "{}: nodes[{index}].bind = {:?} has no address",
                file.display(),
                n.bind
            )
        })?;
    let mut cfg = ServiceConfig::new(node, udp, PathBuf::from(&n.control_socket));
    cfg.memory_limit = n.memory;
    let d = cluster.defaults();
    cfg.deadline = Duration::from_millis(u64::from(d.service_timeout_ms));
    cfg.udp_mtu = d.udp_mtu as usize;
    cfg.require_allocation = d.require_allocation;
    Ok(DaemonConfig {
        service: cfg,
        udp_mtu: d.udp_mtu as usize,
        fork_secret: d
            .fork_allowed
            .then(|| d.fork_secret_file.clone().map(PathBuf::from))
            .flatten(),
        node: n.clone(),
    })
}

/// A daemon's per-job and per-user memory limits and peer table: the node's
/// `job_memory`, `user_memory` and `max_peers` in the cluster file, else half of the
/// node's limit (`memory` or `GSAS_MEMORY_LIMIT`, else 90% of the physical memory) for each
/// share, so that no one user can book the whole node; and half of the PEs, peers and
/// control connections per user (`ServiceConfig::user_shares`).
fn set_shares(cfg: &mut ServiceConfig, node: Option<&board_config::Node>) {
    let whole = cfg
        .memory_limit
        .unwrap_or_else(gsas_service::default_memory_limit);
    let half = u64::try_from(
        u128::from(whole) * u128::from(board_config::keys::DEFAULT_MEMORY_SHARE_PERCENT) / 100,
    )
    .unwrap_or(u64::MAX);
    let index = |key: &str| match node {
        Some(n) => format!("nodes[] entry of node {}: {key}", n.id),
        None => key.to_owned(),
    };
    let source = |set: Option<u64>, key: &str| match set {
        Some(_) => index(key),
        None => format!(
            "by default half of the node's limit; raise it with {}",
            index(key)
        ),
    };
    let (job, user) = node.map_or((None, None), |n| (n.job_memory, n.user_memory));
    cfg.job_memory_limit = Some(job.unwrap_or(half));
    cfg.user_memory_limit = Some(user.unwrap_or(half));
    cfg.memory_source = gsas_service::MemorySource {
        job: source(job, "job_memory"),
        user: source(user, "user_memory"),
    };
    if let Some(n) = node {
        cfg.max_peers = n.max_peers as usize;
    }
    // Every user may connect (mode 0666): no user's jobs may hold more than this share of
    // the node's PEs, network peers and control connections, whatever PE count they claim.
    cfg.user_share_percent = Some(board_config::keys::DEFAULT_MEMORY_SHARE_PERCENT as u8);
}

/// The effective user id of this process.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Runs the daemon with the process's arguments and exits.
pub fn main() -> ! {
    std::process::exit(run(std::env::args_os().skip(1)))
}

/// Runs the daemon for `args`; returns the exit status (0 after a clean stop, 1 when the
/// service fails, 2 for bad arguments or configuration).
pub fn run(args: impl IntoIterator<Item = OsString>) -> i32 {
    let cmd = match parse(args) {
        Ok(c) => c,
        Err(e) => {
            gsas_transport::eprintln_whole!("gsas-atomicd: {e}");
            return 2;
        }
    };
    let setup = match cmd {
        Command::Help => {
            print!("{}", help());
            return 0;
        }
        Command::Version => {
            println!("gsas-atomicd (gsas) {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Command::Declare {
            socket,
            id,
            uid,
            pes,
            job_pes,
            memory,
        } => {
            let done = ControlClient::connect(&socket, CLIENT_TIMEOUT)
                .and_then(|mut c| c.declare(id, uid, pes, job_pes, memory));
            let what = format!(
                "allocation {id} declared on {}: uid {uid}, {pes} PEs",
                socket.display()
            );
            return client_outcome("declare", done, what);
        }
        Command::Undeclare { socket, id } => {
            let done =
                ControlClient::connect(&socket, CLIENT_TIMEOUT).and_then(|mut c| c.undeclare(id));
            let what = format!("allocation {id} ended on {}", socket.display());
            return client_outcome("undeclare", done, what);
        }
        Command::Stats { socket, explain } => {
            return match gsas_control::query_stats(&socket, CLIENT_TIMEOUT) {
                Ok(report) if explain => {
                    print!("{}", report.explained());
                    0
                }
                Ok(report) => {
                    print!("{report}");
                    0
                }
                Err(e) => {
                    gsas_transport::eprintln_whole!("gsas-atomicd: {e}");
                    1
                }
            };
        }
        Command::Config {
            file,
            node,
            log_level,
            private,
        } => match daemon_config(&file, node) {
            Ok(mut d) => {
                if let Some((listen, socket)) = &private {
                    d.service.udp_bind = *listen;
                    d.service.socket_path = socket.clone();
                }
                Setup {
                    cfg: d.service,
                    level: log_level,
                    fork_secret: d.fork_secret.filter(|_| private.is_none()),
                    config_file: Some(std::path::absolute(&file).unwrap_or(file)),
                    file_mtu: Some(d.udp_mtu),
                    file_node: Some(d.node),
                    private: private.is_some(),
                }
            }
            Err(e) => {
                gsas_transport::eprintln_whole!("gsas-atomicd: {e}");
                return 2;
            }
        },
        Command::Listen {
            listen,
            socket,
            node,
            log_level,
            fork_secret,
            private,
        } => Setup {
            cfg: ServiceConfig::new(node, listen, socket),
            level: log_level,
            fork_secret,
            config_file: None,
            file_mtu: None,
            file_node: None,
            private,
        },
    };
    match serve(setup) {
        Ok(()) => 0,
        Err((code, message)) => {
            if !message.is_empty() {
                gsas_transport::eprintln_whole!("gsas-atomicd: {message}");
            }
            code
        }
    }
}

/// How long `declare`, `undeclare` and `stats` wait for the daemon.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The exit status of `declare` / `undeclare`, after saying what happened.
fn client_outcome(
    command: &str,
    done: Result<(), gsas_control::ControlError>,
    what: String,
) -> i32 {
    match done {
        Ok(()) => {
            println!("gsas-atomicd: {what}");
            0
        }
        Err(e) => {
            gsas_transport::eprintln_whole!("gsas-atomicd: {command}: {e}");
            1
        }
    }
}

/// What a serving daemon starts from: the service configuration of the command line or the
/// cluster file, with the cluster file's node entry and MTU when there is one.
struct Setup {
    cfg: ServiceConfig,
    level: Option<LevelFilter>,
    fork_secret: Option<PathBuf>,
    config_file: Option<PathBuf>,
    file_mtu: Option<usize>,
    file_node: Option<board_config::Node>,
    /// `--private`.
    private: bool,
}

/// Checks the FORK secret, completes the configuration from the environment, binds the
/// service and serves until a signal stops it. Errors: (exit status, message; an empty
/// message was logged already).
fn serve(setup: Setup) -> Result<(), (i32, String)> {
    let Setup {
        mut cfg,
        level,
        fork_secret,
        config_file,
        file_mtu,
        file_node,
        private,
    } = setup;
    // The secret is checked before anything is bound: a daemon that would serve FORK
    // with an exposed secret does not start at all.
    let secret = match &fork_secret {
        None => None,
        Some(path) => Some(
            Secret::load(path, euid())
                .map_err(|e| (2, format!("remote FORK is enabled, but {e}")))?,
        ),
    };
    let env = RuntimeConfig::from_env().map_err(|e| (2, e.to_string()))?;
    gsas_transport::log::init(
        "gsas-atomicd",
        level.or(env.log).or(Some(if private {
            LevelFilter::Warn
        } else {
            LevelFilter::Info
        })),
    );
    // Every PE holds a control connection and its segments' descriptors here: the soft
    // limit of 1024 that systemd and shells give ran out at about 340 PEs.
    match gsas_sys::process::raise_nofile_limit(None) {
        Ok((before, after)) if after > before => {
            log::info!(
                "gsas-atomicd: descriptor limit (RLIMIT_NOFILE) raised from {before} to {after}"
            )
        }
        Ok((limit, _)) => log::info!("gsas-atomicd: descriptor limit (RLIMIT_NOFILE) {limit}"),
        Err(e) => log::warn!("gsas-atomicd: raising the descriptor limit (RLIMIT_NOFILE): {e}"),
    }
    configure(&mut cfg, &env, file_mtu, file_node.as_ref()).map_err(|e| (2, e))?;
    if private {
        // One user's service: no shares between users, no allocations (as a service
        // thread of oshrun).
        cfg.name = format!("gsas-atomicd node {} (private)", cfg.node);
        cfg.uid_policy = UidPolicy::SameUser;
        cfg.socket_mode = 0o600;
        cfg.user_share_percent = None;
        cfg.job_memory_limit = None;
        cfg.user_memory_limit = None;
        cfg.require_allocation = false;
    }
    let (node, deadline) = (cfg.node, cfg.deadline);
    let signals = SignalFd::block(&[libc::SIGTERM, libc::SIGINT])
        .map_err(|e| (1, format!("blocking SIGTERM/SIGINT: {e}")))?;
    let mut service = Service::bind(cfg).map_err(|e| (1, e.to_string()))?;
    if let Some(secret) = secret {
        let socket = std::path::absolute(service.socket_path())
            .unwrap_or_else(|_| service.socket_path().to_owned());
        let mut fc = ForkServerConfig::new(node, secret, socket);
        fc.config_file = config_file;
        fc.connect_timeout = deadline;
        service.set_fork_handler(Box::new(ForkServer::new(fc)));
        log::info!(
            "remote FORK enabled (secret {}); PEs run as uid {}",
            fork_secret
                .as_deref()
                .unwrap_or(std::path::Path::new("?"))
                .display(),
            euid()
        );
        if euid() == 0 {
            log::warn!(
                "remote FORK is enabled in a daemon running as root: PEs of every authenticated request run as root"
            );
        }
    }
    service.stop_on_signals(signals);
    service.run().map_err(|e| {
        log::error!("{e}");
        (1, String::new())
    })
}

/// The daemon's part of the service configuration: its name and policies, and what the
/// environment (`GSAS_*`) and the cluster file's node entry set.
fn configure(
    cfg: &mut ServiceConfig,
    env: &RuntimeConfig,
    file_mtu: Option<usize>,
    file_node: Option<&board_config::Node>,
) -> Result<(), String> {
    cfg.name = format!("gsas-atomicd node {}", cfg.node);
    cfg.uid_policy = UidPolicy::PerJob;
    cfg.socket_mode = 0o666;
    cfg.spin = Duration::from_micros(env.service_spin_us);
    cfg.sched_slice = Duration::from_micros(env.sched_slice_us);
    cfg.udp_mtu = match (
        file_mtu,
        std::env::var_os(gsas_transport::config::GSAS_UDP_MTU.name),
    ) {
        (Some(m), None) => m,
        _ => env.udp_mtu,
    };
    if let Some(m) = env.memory_limit {
        cfg.memory_limit = Some(m);
    }
    set_shares(cfg, file_node);
    if let Some(ms) = env.deadline_ms {
        cfg.deadline = Duration::from_millis(ms);
    }
    cfg.exanet = match (file_node, env.transport) {
        (Some(n), _) => gsas_transport::exanet::exanet_site(n, env)?,
        (None, Some(gsas_transport::config::TransportKind::Exanet)) => {
            return Err("GSAS_TRANSPORT=exanet needs --config: the node's coordinate and Exanet endpoints come from the cluster file".into());
        }
        (None, _) => None,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn command_lines() {
        assert_eq!(
            p(&["--config", "/etc/c.toml", "--node", "3"]).unwrap(),
            Command::Config {
                file: "/etc/c.toml".into(),
                node: 3,
                log_level: None,
                private: None,
            }
        );
        assert_eq!(
            p(&[
                "--listen=127.0.0.1:7",
                "--socket",
                "/tmp/s",
                "--log-level",
                "debug"
            ])
            .unwrap(),
            Command::Listen {
                listen: "127.0.0.1:7".parse().unwrap(),
                socket: "/tmp/s".into(),
                node: 0,
                log_level: Some(LevelFilter::Debug),
                fork_secret: None,
                private: false,
            }
        );
        assert_eq!(
            p(&[
                "--private",
                "--config",
                "/c",
                "--node",
                "2",
                "--listen",
                "10.0.0.2:0",
                "--socket",
                "/run/s"
            ])
            .unwrap(),
            Command::Config {
                file: "/c".into(),
                node: 2,
                log_level: None,
                private: Some(("10.0.0.2:0".parse().unwrap(), "/run/s".into())),
            }
        );
        assert!(
            p(&["--private", "--config", "/c", "--node", "2"])
                .unwrap_err()
                .contains("--private with --config needs --listen")
        );
        assert!(
            p(&[
                "--private",
                "--listen",
                "127.0.0.1:0",
                "--socket",
                "/s",
                "--fork-secret",
                "/f"
            ])
            .unwrap_err()
            .contains("no remote FORK")
        );
        assert!(matches!(
            p(&["--listen", "127.0.0.1:7", "--socket", "/tmp/s", "--fork-secret", "/f"]).unwrap(),
            Command::Listen { fork_secret: Some(f), .. } if f == std::path::Path::new("/f")
        ));
        assert!(
            p(&["--config", "/c", "--node", "1", "--fork-secret", "/f"])
                .unwrap_err()
                .contains("defaults.fork_allowed")
        );
        assert_eq!(
            p(&["stats", "/tmp/s"]).unwrap(),
            Command::Stats {
                socket: "/tmp/s".into(),
                explain: false
            }
        );
        assert_eq!(
            p(&["--stats", "/tmp/s", "--explain"]).unwrap(),
            Command::Stats {
                socket: "/tmp/s".into(),
                explain: true
            }
        );
        assert!(p(&["--explain"]).unwrap_err().contains("--stats"));
        assert_eq!(p(&["-h"]).unwrap(), Command::Help);
    }

    #[test]
    fn shares_default_to_half_of_the_node_and_name_their_key() {
        let coord = board_config::Coord::from_index(3).unwrap();
        let mut n = board_config::Node::new(3, coord, "127.0.0.1");
        let mut cfg = ServiceConfig::new(3, "127.0.0.1:0".parse().unwrap(), "/tmp/x".into());
        cfg.memory_limit = Some(10 << 30);
        set_shares(&mut cfg, Some(&n));
        assert_eq!(cfg.job_memory_limit, Some(5 << 30));
        assert_eq!(cfg.user_memory_limit, Some(5 << 30));
        assert!(
            cfg.memory_source.user.contains("half")
                && cfg.memory_source.user.contains("user_memory")
        );
        n.job_memory = Some(1 << 30);
        n.max_peers = 64;
        set_shares(&mut cfg, Some(&n));
        assert_eq!(cfg.job_memory_limit, Some(1 << 30));
        assert_eq!(cfg.memory_source.job, "nodes[] entry of node 3: job_memory");
        assert_eq!(cfg.max_peers, 64);
    }

    #[test]
    fn allocation_command_lines() {
        assert_eq!(
            p(&[
                "declare",
                "/run/s",
                "--id",
                "42",
                "--user",
                "0",
                "--pes",
                "8",
                "--job-pes=64",
                "--memory",
                "16g"
            ])
            .unwrap(),
            Command::Declare {
                socket: "/run/s".into(),
                id: 42,
                uid: 0,
                pes: 8,
                job_pes: 64,
                memory: 16 << 30,
            }
        );
        assert_eq!(
            p(&[
                "declare", "/run/s", "--id", "1", "--user", "root", "--pes", "1"
            ])
            .unwrap(),
            Command::Declare {
                socket: "/run/s".into(),
                id: 1,
                uid: 0,
                pes: 1,
                job_pes: 0,
                memory: 0,
            }
        );
        assert_eq!(
            p(&["undeclare", "/run/s", "--id", "42"]).unwrap(),
            Command::Undeclare {
                socket: "/run/s".into(),
                id: 42
            }
        );
        let err = |a: &[&str]| p(a).unwrap_err();
        assert!(err(&["declare"]).contains("socket path"));
        assert!(err(&["declare", "/s", "--user", "0", "--pes", "1"]).contains("--id"));
        assert!(err(&["declare", "/s", "--id", "1", "--pes", "1"]).contains("--user"));
        assert!(err(&["declare", "/s", "--id", "1", "--user", "0"]).contains("--pes"));
        assert!(err(&["declare", "/s", "--id", "1", "--user", "0", "--pes", "0"]).contains("1..="));
        assert!(
            err(&[
                "declare",
                "/s",
                "--id",
                "1",
                "--user",
                "no-such-user-x",
                "--pes",
                "1"
            ])
            .contains("no such user")
        );
        assert!(err(&["undeclare", "/s", "--id", "1", "--pes", "3"]).contains("unknown argument"));
        assert!(
            err(&[
                "declare", "/s", "--id", "1", "--user", "0", "--pes", "1", "--memory", "lots"
            ])
            .contains("--memory")
        );
    }

    #[test]
    fn bad_command_lines() {
        assert!(p(&[]).unwrap_err().contains("nothing to serve"));
        assert!(p(&["--config", "x"]).unwrap_err().contains("--node"));
        assert!(
            p(&["--listen", "nowhere"])
                .unwrap_err()
                .contains("not an address")
        );
        assert!(
            p(&["--listen", "127.0.0.1:1"])
                .unwrap_err()
                .contains("--socket")
        );
        assert!(p(&["--node", "x"]).unwrap_err().contains("not a node id"));
        assert!(
            p(&["--frobnicate"])
                .unwrap_err()
                .contains("unknown argument")
        );
        assert!(
            p(&["--config", "x", "--node", "0", "--socket", "y"])
                .unwrap_err()
                .contains("cannot be combined")
        );
    }

    #[test]
    fn config_file_errors_name_file_line_and_key() {
        let dir = gsas_sys::socket::runtime_dir(None).unwrap();
        let file = dir.join(format!("daemon-unit-{}.toml", std::process::id()));
        std::fs::write(
            &file,
            "[cluster]\nname = \"t\"\n\n[[nodes]]\nid = 0\nhost = \"127.0.0.1\"\nudp_port = 70000\n",
        )
        .unwrap();
        let e = config_from_file(&file, 0).unwrap_err();
        assert!(e.contains(":7:") && e.contains("udp_port"), "{e}");
        std::fs::write(
            &file,
            "[cluster]\nname = \"t\"\n\n[[nodes]]\nid = 0\nhost = \"127.0.0.1\"\nudp_port = 7999\n",
        )
        .unwrap();
        let c = config_from_file(&file, 0).unwrap();
        assert_eq!(c.udp_bind, "127.0.0.1:7999".parse().unwrap());
        let d = daemon_config(&file, 0).unwrap();
        assert_eq!((d.udp_mtu, d.fork_secret), (61440, None));
        std::fs::write(
            &file,
            "[cluster]\nname = \"t\"\n[defaults]\nudp_mtu = 1472\nfork_allowed = true\nfork_secret_file = \"/etc/gsas/s\"\n\n[[nodes]]\nid = 0\nhost = \"127.0.0.1\"\nudp_port = 7999\n",
        )
        .unwrap();
        let d = daemon_config(&file, 0).unwrap();
        assert_eq!(d.udp_mtu, 1472);
        assert_eq!(d.service.udp_mtu, 1472);
        assert_eq!(
            d.fork_secret.as_deref(),
            Some(std::path::Path::new("/etc/gsas/s"))
        );
        assert!(
            config_from_file(&file, 4)
                .unwrap_err()
                .contains("node 4 is not in the cluster")
        );
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn verbs_nodes_are_served_as_ip_nodes() {
        // A verbs node's service is an IP node's: UDP at bind:udp_port, no Exanet; the PEs
        // do the RDMA (docs/verbs.md).
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../configs/two-nodes-verbs-emu.toml"
        );
        let d = daemon_config(std::path::Path::new(file), 1).unwrap();
        assert_eq!(d.node.transport, board_config::Transport::Verbs);
        assert_eq!(d.node.verbs_device.as_deref(), Some("softverbs1"));
        assert_eq!(d.service.udp_bind, "127.0.0.1:7481".parse().unwrap());
        assert_eq!(
            gsas_transport::exanet::exanet_site(&d.node, &RuntimeConfig::default()),
            Ok(None)
        );
    }

    #[test]
    fn exanet_nodes_are_served() {
        let qfdb = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/qfdb.toml");
        let d = daemon_config(std::path::Path::new(qfdb), 2).unwrap();
        let env = RuntimeConfig::default();
        let site = gsas_transport::exanet::exanet_site(&d.node, &env)
            .unwrap()
            .expect("exanet node");
        assert_eq!(site.coord, 0x2000);
        assert_eq!(
            site.source,
            gsas_transport::exanet::ExanetSource::Uio {
                devices: (0..5).map(|k| format!("exanet-ep{k}")).collect()
            }
        );
        // GSAS_TRANSPORT overrides the file; a missing emulator is named.
        let udp = RuntimeConfig {
            transport: Some(gsas_transport::config::TransportKind::Udp),
            ..RuntimeConfig::default()
        };
        assert_eq!(gsas_transport::exanet::exanet_site(&d.node, &udp), Ok(None));
        let emu = RuntimeConfig {
            exanet_emu: Some("/nonexistent/exa".into()),
            ..RuntimeConfig::default()
        };
        let e = gsas_transport::exanet::exanet_site(&d.node, &emu).unwrap_err();
        assert!(
            e.contains("node 2 (qfdb0-f2)") && e.contains("no Exanet emulator at /nonexistent/exa"),
            "{e}"
        );
    }
}
