//! gsas-service: the atomic service of the gsas std runtime. It owns a node's shared
//! memory for each job and serves remote reads, writes and atomics. It is a library: the
//! `gsas-atomicd` daemon (crate `gsas-launch`), the launcher and a singleton PE (crate
//! `gsas-node`) embed it. Not the daemon binary or remote FORK (`gsas-launch`), not the
//! node client (`gsas-node`), not the transports (`gsas-transport`).
//!
//! **What it is.** [`Service`] binds a node's two endpoints and runs one loop over them:
//!
//! * a Unix `SOCK_SEQPACKET` **control socket** for the PEs of this node
//!   ([`gsas_control::proto`]: Join, Leave, create/open/free segment, Ping, statistics; descriptors travel
//!   with `SCM_RIGHTS`). Peer credentials (`SO_PEERCRED`) are logged and checked: by
//!   default ([`UidPolicy::SameUser`], embedded services) only the service's own user (and
//!   root) may connect; a daemon uses [`UidPolicy::PerJob`]: anyone may start a job, and
//!   every later PE of that job must have the first PE's user id.
//! * a **UDP socket** bound to the configured address only, carrying gsas-core's
//!   reliability layer over [`gsas_transport::udp::UdpTransport`]. The job key in each
//!   datagram's header is handed to the gsas-core engine with the request, so a wrong key
//!   is refused with ERROR(BadKey) and counted. Replies are batched: every reply produced
//!   while serving a burst goes into the peer's open frame, flushed once per loop turn.
//! * with [`ServiceConfig::exanet`], the node's **Exanet endpoint 0** instead carries the
//!   other nodes' requests (the same reliability layer over
//!   [`gsas_transport::net::NetTransport`], the job key in each packet's header), and the
//!   UDP socket only host actions (ping, remote FORK); PEs that join learn the endpoints
//!   ([`gsas_control::proto::ExanetInfo`]) and open endpoint 1 + their index on the node.
//! * the **shm rings** (segment 3) of local PEs that asked for one (`GSAS_DIRECT=0`),
//!   served like UDP with the PE's job key.
//!
//! Per PE the service creates memfd segments on request (heap 0, data 1, sync 2, ring 3),
//! sized as the PE asks within limits: each segment at most 1 TiB (the reach of a global
//! address), the sync segment at most 16 MiB, and all segments together at most
//! [`ServiceConfig::memory_limit`] (and the shares below); a larger request is refused with
//! a message saying which limit. Segments 0-2 are registered with the engine, which checks every remote request
//! against them (key, PE, segment, bounds, alignment).
//!
//! **Waking waiters.** The doorbell page (a memfd every joined PE maps) also holds one
//! [`Bell`](gsas_transport::bell::Bell) per PE (up to `max_pes`, at most 65536; the slot travels in
//! the Join reply). After applying a WRITE, a BULK_WRITE fragment or a modifying atomic to
//! a PE's heap, data or sync segment, the engine's memory rings that PE's bell: one fence
//! and one relaxed load when no thread of the PE sleeps, a `FUTEX_WAKE` when one does (see
//! [`gsas_transport::bell`]). So a PE sleeping in a wait for a flag set from another node wakes when
//! the flag lands.
//!
//! **Network peers.** The reliability layer keeps state only for peers of jobs this
//! service knows (a PE of the job joined here), each job up to its PE count + 4, and, when
//! remote FORK is served, for up to 32 senders of unknown jobs (see `peers.rs`). Anyone
//! else is refused and counted by reason, and a refused request is answered with a
//! refusal, so the PE fails at once with the reason instead of a time-out. A reclaimed
//! job's peers are freed at once; those of a job that ended cleanly linger (see
//! Reclamation); idle peers silent for twice the deadline are freed too. A peer whose
//! window is full (it does not acknowledge) holds up no other peer's replies.
//!
//! **Memory.** Segments are booked at their full size (every page may be touched)
//! against the node's limit ([`ServiceConfig::memory_limit`]) and, for a daemon, the
//! per-job and per-user limits ([`ServiceConfig::job_memory_limit`],
//! [`ServiceConfig::user_memory_limit`]); a refusal names the limit, where it comes from,
//! the job and the user.
//!
//! **Reclamation.** A job ends when all its PEs that joined have left (Leave), or at once
//! when one PE's control connection ends without Leave (the PE died): its segments are
//! unregistered from the engine and unmapped here, and the memory is gone when the PEs'
//! own mappings go. A reclaimed job's network peers are freed at once (later frames under
//! its key are refused as an unknown job). A job that ended cleanly keeps its peers'
//! reliability state for the deadline, closed for new requests (TCP's TIME_WAIT: the end
//! of a job is a distributed protocol): a PE of another node that repeats a request whose
//! reply was lost (the final barrier's increment) gets the reply from the reply cache, a
//! lost reply is still retransmitted and the PEs' last acknowledgements are taken; a
//! request never executed is refused with
//! [`RefusalReason::JobEnded`](gsas_core::reliable::RefusalReason::JobEnded), and so is a
//! frame of one of the last 1024 ended jobs from a peer without a slot. At most 64 ended
//! jobs linger, and their peers give way first when the peer table is full
//! (`core/segments.rs`, `peers.rs`; `docs/runtime.md`, "The end of a job").
//!
//! **Polling.** The loop busy-polls UDP and the rings for [`ServiceConfig::spin`] after the
//! last activity (checking the control socket every millisecond; after the first
//! [`PURE_SPIN`](gsas_transport::poll::PURE_SPIN) each idle turn yields the CPU, so a PE that shares
//! the core gets it at once, see [`spin_pause`](gsas_transport::poll::spin_pause)), then yields a few times,
//! then blocks in `poll(2)` on every descriptor (UDP, the Exanet endpoint's interrupt line,
//! re-armed before each block, control sockets, a doorbell eventfd the
//! PEs ring after queueing work in a ring while the service sleeps, a shutdown eventfd, the
//! termination signals). The block is bounded: 1 ms while reliability timers are pending,
//! 100 ms otherwise.
//!
//! **Remote FORK** is served only when a [`ForkHandler`] is installed with
//! [`Service::set_fork_handler`] (`gsas-atomicd` installs `gsas_launch::fork::server::ForkServer`
//! when its configuration enables FORK; see `gsas_launch::fork` for the security model).
//! Without one, FORK requests are answered with ERROR(NotSupported); every refusal is
//! counted (`fork.refused`) and logged with the sender's address.
//!
//! **Shutdown.** [`ShutdownHandle::shutdown`] (any thread), or a signal on the
//! [`gsas_sys::event::SignalFd`] given to [`Service::stop_on_signals`], ends the loop; the socket file is
//! removed and every job's memory released.
//!
//! **What it is not.** Not multi-threaded (one loop serves everything; run several services
//! for more), not an authenticator beyond user ids and job keys (the key is a capability
//! in clear text on the network), and not a launcher.
//!
//! **Thread safety.** A bound [`Service`] is `Send`: run it on the calling thread
//! ([`Service::run`], the daemon) or on its own thread ([`Service::spawn`], embedded in
//! `oshrun` or a PE).
//!
//! ```no_run
//! use gsas_service::{Service, ServiceConfig};
//!
//! let config = ServiceConfig::new(0, "127.0.0.1:7470".parse()?, "/tmp/gsas-example.sock".into());
//! let service = Service::bind(config)?.spawn()?;
//! println!("serving on {} and {}", service.udp_addr(), service.socket_path().display());
//! let stats = gsas_control::query_stats(service.socket_path(), std::time::Duration::from_secs(1))?;
//! assert_eq!(stats.get("jobs.active"), Some(0));
//! service.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod core;
mod peers;
pub mod stats;

// The system calls and the reliability runner this module used to hold, now in their crates.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use gsas_core::transport::TransportError;
use gsas_core::wire::{ErrorCode, Fragment};

pub use self::core::{default_memory_limit, physical_memory};
pub use gsas_transport::reliable::{INITIAL_RTO, MIN_RTO, reliable_config};

use gsas_transport::shm::ShmError;

/// Who may use a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UidPolicy {
    /// Only the service's own user id (and root).
    SameUser,
    /// Any user may start a job; every PE of a job must have the user id of its first PE.
    PerJob,
}

/// How a service is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceConfig {
    /// The node id this service serves.
    pub node: u16,
    /// Name in log messages.
    pub name: String,
    /// UDP address to bind (never a wildcard unless configured so).
    pub udp_bind: SocketAddr,
    /// Path of the control socket.
    pub socket_path: PathBuf,
    /// Permissions of the control socket file.
    pub socket_mode: u32,
    /// Largest UDP payload including the 16-byte gsas header (`GSAS_UDP_MTU`).
    pub udp_mtu: usize,
    /// A peer that does not acknowledge for this long is declared unreachable.
    pub deadline: Duration,
    /// Busy-poll time after the last activity (`GSAS_SERVICE_SPIN_US`).
    pub spin: Duration,
    /// The scheduler slice the service's thread asks for (`GSAS_SCHED_SLICE_US`; zero
    /// leaves the kernel's): woken by a datagram, it preempts compute-bound processes.
    pub sched_slice: Duration,
    /// Total bytes of segments the service hands out; `None`: only the per-segment limits.
    pub memory_limit: Option<u64>,
    /// Bytes of segments one job may book; `None`: no per-job limit (an embedded service,
    /// whose node is the user's own).
    pub job_memory_limit: Option<u64>,
    /// Bytes of segments the jobs of one user id may book together; `None`: no per-user
    /// limit.
    pub user_memory_limit: Option<u64>,
    /// Where the per-job and per-user limits come from, for refusal messages.
    pub memory_source: MemorySource,
    /// Who may connect.
    pub uid_policy: UidPolicy,
    /// PEs of users other than root (and the service's own) join only under an allocation
    /// that root declared ([`ControlRequest::Declare`](gsas_control::proto::ControlRequest::Declare),
    /// `defaults.require_allocation`); its figures then bound the user instead of the
    /// shares.
    pub require_allocation: bool,
    /// Most network peers (PE sockets of all jobs) the reliability layer keeps state for;
    /// each job may have its PE count + 4 of them.
    pub max_peers: usize,
    /// Most PEs joined at once, over all jobs.
    pub max_pes: usize,
    /// The share of the node's PEs ([`max_pes`](Self::max_pes)), network peers
    /// ([`max_peers`](Self::max_peers)) and control connections that the jobs of one user
    /// id may hold together, in percent; `None`: no per-user shares (an embedded service,
    /// which serves its own user only). See [`UserShares`].
    pub user_share_percent: Option<u8>,
    /// Serve other nodes over these Exanet endpoints (endpoint 0 for the service, the
    /// others handed to the PEs that join) instead of UDP; the UDP socket then carries
    /// host actions only (ping, remote FORK). `None`: UDP.
    pub exanet: Option<gsas_transport::exanet::ExanetSite>,
    /// The launcher of every PE that joins reports each PE that ends badly (`oshrun`'s
    /// own service): a job reclaimed because a PE's control connection ended without
    /// Leave is then logged at info, not warn, so that a failure is printed once, by the
    /// launcher. A node's daemon keeps the warning (its log is the administrator's).
    pub quiet_reclaims: bool,
}

impl ServiceConfig {
    /// An embedded service's defaults: name `gsas service`, socket mode 0600, UDP MTU
    /// 61440, deadline 10 s, 200 us of spinning, no memory limit (total, per job or per
    /// user), [`UidPolicy::SameUser`], 1024 peers, 1024 PEs.
    pub fn new(node: u16, udp_bind: SocketAddr, socket_path: PathBuf) -> Self {
        ServiceConfig {
            node,
            name: "gsas service".into(),
            udp_bind,
            socket_path,
            socket_mode: 0o600,
            udp_mtu: gsas_transport::config::DEFAULT_UDP_MTU,
            deadline: Duration::from_millis(gsas_transport::config::DEFAULT_DEADLINE_MS),
            spin: Duration::from_micros(gsas_transport::config::DEFAULT_SERVICE_SPIN_US),
            sched_slice: Duration::from_micros(gsas_transport::config::DEFAULT_SCHED_SLICE_US),
            memory_limit: None,
            job_memory_limit: None,
            user_memory_limit: None,
            memory_source: MemorySource::default(),
            uid_policy: UidPolicy::SameUser,
            require_allocation: false,
            max_peers: 1024,
            max_pes: 1024,
            user_share_percent: None,
            exanet: None,
            quiet_reclaims: false,
        }
    }

    /// What one user may hold at once ([`user_share_percent`](Self::user_share_percent)
    /// of each resource, at least one), or `None` without per-user shares.
    pub fn user_shares(&self) -> Option<UserShares> {
        let pct = usize::from(self.user_share_percent?.min(100));
        let part = |n: usize| (n.saturating_mul(pct) / 100).max(1);
        let pes = part(self.max_pes);
        Some(UserShares {
            pes,
            peers: part(self.max_peers),
            connections: pes.saturating_add(CONNECTION_SLACK),
        })
    }
}

/// Control connections a user may hold beyond its PE share (launchers, `gsas-atomicd
/// --stats`, PEs that are connecting).
pub const CONNECTION_SLACK: usize = 16;

/// What the jobs of one user id may hold together on a node
/// ([`ServiceConfig::user_shares`]): joined PEs, network peers (of the reliability
/// layer), and control connections (each holds a descriptor of the service's; a PE's
/// segments, also descriptors, are bounded through its PE count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserShares {
    /// PEs joined at once.
    pub pes: usize,
    /// Network peers with a slot.
    pub peers: usize,
    /// Open control connections.
    pub connections: usize,
}

/// Where the per-job and per-user memory limits of a service come from (the cluster-file
/// key, or how a default was derived), named in refusals.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MemorySource {
    /// Of [`ServiceConfig::job_memory_limit`].
    pub job: String,
    /// Of [`ServiceConfig::user_memory_limit`].
    pub user: String,
}

/// Executes remote FORK requests; see [`Service::set_fork_handler`]. The daemon's
/// implementation is `gsas_launch::fork::server::ForkServer`.
pub trait ForkHandler: Send {
    /// Handles one fragment of a launch specification sent by `from` with job key
    /// `job_key`. `Ok` is answered with ACK, `Err(code)` with ERROR(code) (and counted in
    /// `fork.refused`). Called on the service's thread: it must not block.
    /// [`ForkProgress::Accepted`] says the sender proved it holds the cluster's secret (a
    /// whole request with a valid MAC): its host slot is then kept like a job's, while
    /// senders that proved nothing give way to a newcomer at once (see `peers`).
    fn fork(
        &mut self,
        from: SocketAddr,
        job_key: u64,
        frag: Fragment,
        data: &[u8],
    ) -> Result<ForkProgress, ErrorCode>;

    /// Counters added to the service's statistics as `name value` lines (names start
    /// with `fork.`). None by default.
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}

/// What a [`ForkHandler`] made of a fragment it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkProgress {
    /// Kept until the request is whole; nothing about the sender is known yet.
    Fragment,
    /// A whole request, authenticated and accepted.
    Accepted,
}

/// An error of the service or of a client talking to it.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServiceError {
    /// The configuration cannot work.
    Config(String),
    /// A system call failed.
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// Shared memory could not be set up.
    Shm {
        /// What was being done.
        context: String,
        /// The error.
        source: ShmError,
    },
    /// The UDP transport failed.
    Transport {
        /// What was being done.
        context: String,
        /// The error.
        source: TransportError,
    },
    /// A control request failed (a client of the service's own, e.g. in a test kit).
    Control(gsas_control::ControlError),
    /// The service thread panicked.
    Panicked(String),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Config(m) => write!(f, "service configuration: {m}"),
            ServiceError::Io { context, source } => write!(f, "{context}: {source}"),
            ServiceError::Shm { context, source } => write!(f, "{context}: {source}"),
            ServiceError::Transport { context, source } => write!(f, "{context}: {source}"),
            ServiceError::Control(e) => e.fmt(f),
            ServiceError::Panicked(m) => write!(f, "the service thread panicked: {m}"),
        }
    }
}

impl std::error::Error for ServiceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServiceError::Io { source, .. } => Some(source),
            ServiceError::Shm { source, .. } => Some(source),
            ServiceError::Transport { source, .. } => Some(source),
            ServiceError::Control(e) => Some(e),
            _ => None,
        }
    }
}

impl From<gsas_control::ControlError> for ServiceError {
    fn from(e: gsas_control::ControlError) -> Self {
        ServiceError::Control(e)
    }
}

/// Shared between a running loop and its [`ShutdownHandle`]s.
#[derive(Debug)]
struct Wake {
    flag: AtomicBool,
    event: gsas_sys::event::EventFd,
}

/// Stops a running service from any thread.
#[derive(Debug, Clone)]
pub struct ShutdownHandle(Arc<Wake>);

impl ShutdownHandle {
    /// Asks the loop to stop; it does so within one turn.
    pub fn shutdown(&self) {
        self.0.flag.store(true, Ordering::Release);
        self.0.event.signal();
    }

    /// Whether shutdown was asked for.
    pub fn is_shutdown(&self) -> bool {
        self.0.flag.load(Ordering::Acquire)
    }
}

/// A bound service, ready to run.
pub struct Service {
    core: Box<core::Core>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("socket", &self.socket_path())
            .field("udp", &self.udp_addr())
            .finish_non_exhaustive()
    }
}

impl Service {
    /// Binds the UDP socket and the control socket and prepares the loop.
    ///
    /// Errors: the bind errors name the address or path (an address in use, a socket path
    /// where another service answers, a path that is too long), [`ServiceError::Config`]
    /// for inconsistent settings.
    pub fn bind(config: ServiceConfig) -> Result<Service, ServiceError> {
        Ok(Service {
            core: Box::new(core::Core::bind(config)?),
        })
    }

    /// The control socket path.
    pub fn socket_path(&self) -> &Path {
        self.core.socket_path()
    }

    /// The bound UDP address (with the actual port).
    pub fn udp_addr(&self) -> SocketAddr {
        self.core.udp_addr()
    }

    /// A handle that stops the loop.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.core.wake())
    }

    /// Installs the FORK hook: FORK fragments are then handed to `handler` instead of being
    /// refused with ERROR(NotSupported).
    pub fn set_fork_handler(&mut self, handler: Box<dyn ForkHandler>) {
        self.core.set_fork_handler(handler);
    }

    /// Stops the loop when a signal arrives on `signals` (the daemon's SIGTERM/SIGINT).
    pub fn stop_on_signals(&mut self, signals: gsas_sys::event::SignalFd) {
        self.core.set_signals(signals);
    }

    /// Runs the loop in the calling thread until shutdown; removes the socket file and
    /// releases every job's memory before returning.
    ///
    /// Errors: a failure of the UDP socket or of `poll(2)` (the loop cannot go on).
    pub fn run(mut self) -> Result<(), ServiceError> {
        self.core.run()
    }

    /// Runs the loop on a new thread.
    pub fn spawn(self) -> Result<ServiceThread, ServiceError> {
        let shutdown = self.shutdown_handle();
        let path = self.socket_path().to_owned();
        let udp = self.udp_addr();
        let name = format!("gsas-svc-{}", self.core.node());
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || self.run())
            .map_err(|source| ServiceError::Io {
                context: "starting the service thread".into(),
                source,
            })?;
        Ok(ServiceThread {
            handle: Some(handle),
            shutdown,
            path,
            udp,
        })
    }
}

/// A service running on its own thread; dropping it stops the service.
#[derive(Debug)]
pub struct ServiceThread {
    handle: Option<JoinHandle<Result<(), ServiceError>>>,
    shutdown: ShutdownHandle,
    path: PathBuf,
    udp: SocketAddr,
}

impl ServiceThread {
    /// The control socket path.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// The bound UDP address.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp
    }

    /// A handle that stops the service.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Whether the loop has ended (stopped, or failed).
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the service and waits for its thread; returns the loop's result.
    pub fn stop(mut self) -> Result<(), ServiceError> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), ServiceError> {
        self.shutdown.shutdown();
        match self.handle.take() {
            None => Ok(()),
            Some(h) => match h.join() {
                Ok(r) => r,
                Err(p) => Err(ServiceError::Panicked(
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default(),
                )),
            },
        }
    }
}

impl Drop for ServiceThread {
    fn drop(&mut self) {
        if let Err(e) = self.stop_inner() {
            log::warn!("service at {}: {e}", self.path.display());
        }
    }
}
