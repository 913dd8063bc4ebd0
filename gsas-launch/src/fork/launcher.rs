//! The launcher's side of remote FORK: send the signed requests, then treat the PEs the
//! daemons start like local ones.
//!
//! What it is:
//!
//! * [`send_forks`]: sends FORK requests to daemons over gsas-core's reliability layer on
//!   UDP (the same path as every other request; the request is fragmented to the MTU) and
//!   waits, at most the deadline, for each daemon's verdict: ACK, or ERROR turned into a
//!   [`ForkError`] that says what the code means.
//! * [`RemoteJob`]: the remote half of a job for [`crate::oshrun::job::run_job`]. It
//!   listens for the daemons' stream connections on the launcher address each node reaches
//!   (see [`source_ip`]), sends the FORKs ([`RemoteJob::start`]), accepts a connection only
//!   after a valid Hello, prints the PEs' output (tagged with `[rank] ` when asked), and
//!   reports exits and failures as [`RemoteEvent`]s. [`RemoteJob::terminate`] and
//!   [`RemoteJob::kill`] ask every daemon to end its PEs; dropping a [`RemoteJob`] closes
//!   the connections, which makes the daemons end them too.
//!
//! Failures name the node: `node 1 (loop1, 127.0.0.1:7471): gsas-atomicd did not answer
//! the FORK request within 5.0 s (...)`, or a node that accepted but never connected back
//! within the deadline, or whose connection ended while its PEs ran.
//!
//! What it is not: the PMI server (the job loop runs it; remote PEs reach it over TCP) or
//! the local half of the job.
//!
//! Thread-safety: [`RemoteJob`] is `Send` and used from the job loop's thread only.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gsas_core::client::{Client, ClientError, Completion, HostRequest, OpError, OpHandle};
use gsas_core::reliable::{PeerEvent, Refusal, RefusalReason};
use gsas_core::transport::Transport;
use gsas_core::wire::{ErrorCode, GlobalAddr, SenderId};

use gsas_transport::poll::monotonic_ns;
use gsas_transport::reliable::{OwnedReliable, reliable_config};
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};

use super::request::{ForkRequest, LaunchSpec};
use super::secret::Secret;
use super::stream::{self, Frame, FrameReader, FrameType, STDERR};
use crate::oshrun::merge::Merger;

/// FORK requests in flight at once (more targets are started as earlier ones finish).
const IN_FLIGHT: usize = 64;
/// Frames in flight per daemon.
const WINDOW: usize = 32;
/// Longest time a stream connection may take to send its Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Most stream connections waiting for their Hello.
const MAX_PENDING: usize = 64;
/// Reads of 64 KiB per node connection and call of [`RemoteJob::poll`].
const READS_PER_POLL: usize = 64;

/// Why a daemon did not accept a FORK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForkError {
    /// The daemon answered ERROR with this code.
    Refused(ErrorCode),
    /// No answer within the deadline.
    NoAnswer(Duration),
    /// The daemon's network layer would not keep state for this sender.
    NoSlot(gsas_core::reliable::Refusal),
    /// The request could not be sent (socket or request error).
    Local(String),
}

impl fmt::Display for ForkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A daemon that serves FORK keeps state for senders of jobs it does not know
            // yet (up to a share); one that refuses it for an unknown job does not.
            ForkError::Refused(ErrorCode::NotSupported)
            | ForkError::NoSlot(gsas_core::reliable::Refusal {
                reason: gsas_core::reliable::RefusalReason::UnknownJob,
                ..
            }) => f.write_str(
                "gsas-atomicd refused the FORK: remote process start is not enabled there \
                 (defaults.fork_allowed and defaults.fork_secret_file in its cluster file)",
            ),
            ForkError::Refused(ErrorCode::BadKey) => f.write_str(
                "gsas-atomicd refused the FORK: authentication failed (a different cluster \
                 secret, clocks more than the accepted window apart, or a replayed request; \
                 the daemon's log says which)",
            ),
            ForkError::Refused(ErrorCode::Busy) => {
                f.write_str("gsas-atomicd is busy (too many requests or jobs); retry later")
            }
            ForkError::Refused(ErrorCode::Malformed) => {
                f.write_str("gsas-atomicd refused the FORK as malformed (different gsas versions?)")
            }
            ForkError::Refused(ErrorCode::TooLarge) => f.write_str(
                "gsas-atomicd refused the FORK as too large (a very large environment?)",
            ),
            ForkError::Refused(ErrorCode::HostFailure) => f.write_str(
                "gsas-atomicd could not accept the FORK (the job runs there already, or the \
                 daemon serves another node id; see its log)",
            ),
            ForkError::Refused(code) => write!(f, "gsas-atomicd refused the FORK: {code}"),
            ForkError::NoSlot(r) => write!(
                f,
                "gsas-atomicd refused to keep state for this sender: {r} (remote FORK senders \
                 share 32 slots, at most 8 per source address; oshrun retried until its \
                 deadline)"
            ),
            ForkError::NoAnswer(d) => write!(
                f,
                "gsas-atomicd did not answer the FORK request within {:.1} s (is it running \
                 there, and is its UDP port reachable?)",
                d.as_secs_f64()
            ),
            ForkError::Local(m) => write!(f, "sending the FORK request: {m}"),
        }
    }
}

impl std::error::Error for ForkError {}

/// One FORK to send.
#[derive(Debug, Clone)]
pub struct ForkTarget {
    /// The daemon's UDP address.
    pub daemon: SocketAddr,
    /// The signed request ([`ForkRequest::emit`]).
    pub request: Vec<u8>,
}

/// The address this machine uses as source towards `dest` (the route's choice), found
/// with a connected UDP socket; no packet is sent.
pub fn source_ip(dest: SocketAddr) -> std::io::Result<IpAddr> {
    let any = match dest {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let s = UdpSocket::bind(SocketAddr::new(any, 0))?;
    s.connect(dest)?;
    Ok(s.local_addr()?.ip())
}

/// Whether `ip` is an address of this machine (loopback, or one an interface holds here;
/// tested by binding a socket to it).
pub fn is_local_ip(ip: IpAddr) -> bool {
    ip.is_loopback() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Sends `targets` their FORK requests with job key `key` from a socket bound to
/// `bind_ip`, with datagrams of at most `mtu` bytes, and waits for every verdict (at most
/// `deadline` without an answer from a daemon). Returns one result per target, in order.
///
/// A daemon that refused the request a slot because its peer table or its share for host
/// actions was full (busy with other launchers, or someone keeping it full) never
/// executed it: the request is sent again, from a new sender, after a pause that grows
/// from 50 ms to 1 s, until `deadline` has passed since the first try.
pub fn send_forks(
    bind_ip: IpAddr,
    key: u64,
    mtu: usize,
    deadline: Duration,
    targets: &[ForkTarget],
) -> Vec<Result<(), ForkError>> {
    let until = Instant::now() + deadline;
    let mut results: Vec<Option<Result<(), ForkError>>> = vec![None; targets.len()];
    let mut pause = Duration::from_millis(50);
    loop {
        let todo: Vec<usize> = (0..targets.len())
            .filter(|&i| results[i].as_ref().is_none_or(retryable))
            .collect();
        let round: Vec<ForkTarget> = todo.iter().map(|&i| targets[i].clone()).collect();
        // A later round has what is left of the deadline (at least a second).
        let left = until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1))
            .min(deadline);
        let got = match Sender::new(bind_ip, key, mtu, left, round.len()) {
            Ok(mut s) => s.run(&round, left),
            Err(e) => round
                .iter()
                .map(|_| Err(ForkError::Local(e.clone())))
                .collect(),
        };
        for (&i, r) in todo.iter().zip(got) {
            results[i] = Some(r);
        }
        let again = results.iter().flatten().filter(|r| retryable(r)).count();
        if again == 0 || Instant::now() + pause >= until {
            break;
        }
        log::info!(
            "{again} FORK request(s) refused for a full peer table; trying again in {} ms",
            pause.as_millis()
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(ForkError::Local("not sent".into()))))
        .collect()
}

/// Whether a FORK's outcome is a refusal for room, which a later try may not meet.
fn retryable(r: &Result<(), ForkError>) -> bool {
    matches!(
        r,
        Err(ForkError::NoSlot(Refusal {
            reason: RefusalReason::HostFull | RefusalReason::TableFull,
            ..
        }))
    )
}

struct Sender {
    layer: OwnedReliable<UdpTransport, WINDOW>,
    client: Box<Client<UdpPeer, IN_FLIGHT, 1>>,
    key: u64,
}

impl Sender {
    fn new(
        bind_ip: IpAddr,
        key: u64,
        mtu: usize,
        deadline: Duration,
        peers: usize,
    ) -> Result<Sender, String> {
        let udp = UdpTransport::bind(
            SocketAddr::new(bind_ip, 0),
            UdpConfig {
                mtu,
                ..UdpConfig::default()
            },
        )
        .map_err(|e| format!("UDP socket on {bind_ip}: {e}"))?;
        let rc = reliable_config(deadline);
        let layer = OwnedReliable::new(udp, rc, peers.max(1), 2 * WINDOW)
            .map_err(|e| format!("reliability layer: {e}"))?;
        Ok(Sender {
            layer,
            client: Box::new(Client::new(SenderId::new(0).unwrap_or_default())),
            key,
        })
    }

    fn run(&mut self, targets: &[ForkTarget], deadline: Duration) -> Vec<Result<(), ForkError>> {
        let mut results: Vec<Option<Result<(), ForkError>>> = vec![None; targets.len()];
        let mut handles: Vec<Option<OpHandle>> = vec![None; targets.len()];
        let mut unsent: Vec<usize> = Vec::new();
        let mut next = 0;
        let t0 = Instant::now();
        // The reliability layer declares a silent daemon unreachable after `deadline`;
        // this outer limit only guards against a request that never gets a first slot.
        let limit = t0 + deadline + Duration::from_secs(2);
        loop {
            // Start requests while the engine has room.
            while next < targets.len() && self.client.in_flight() < IN_FLIGHT {
                let t = &targets[next];
                let peer = UdpPeer {
                    addr: t.daemon,
                    key: self.key,
                };
                let req = HostRequest::Fork {
                    addr: GlobalAddr::from_raw(next as u64),
                    spec: &t.request,
                };
                match self
                    .client
                    .host_request(&mut self.layer, peer, 0, next as u64, req)
                {
                    Ok(issued) => {
                        handles[next] = Some(issued.handle);
                        if !issued.all_sent {
                            unsent.push(next);
                        }
                        next += 1;
                    }
                    Err(ClientError::WouldBlock | ClientError::Busy) => break,
                    Err(e) => {
                        results[next] = Some(Err(ForkError::Local(e.to_string())));
                        next += 1;
                    }
                }
            }
            // More fragments of large requests.
            unsent.retain(|&i| {
                let Some(h) = handles[i] else { return false };
                match self.client.resume(&mut self.layer, h, &targets[i].request) {
                    Ok(issued) => !issued.all_sent,
                    Err(ClientError::StaleHandle) => false,
                    Err(e) => {
                        results[i] = Some(Err(ForkError::Local(e.to_string())));
                        false
                    }
                }
            });
            let _ = self.layer.poll(monotonic_ns());
            let _ = self.layer.flush();
            let mut moved = false;
            loop {
                let client = &mut self.client;
                let got = self.layer.recv(|_, reply| {
                    client.handle_reply(reply, |c| record(c, &mut results));
                });
                match got {
                    Ok(Some(())) => moved = true,
                    Ok(None) | Err(_) => break,
                }
            }
            while let Some(ev) = self.layer.next_event() {
                let (peer, refusal) = match ev {
                    PeerEvent::Unreachable(peer) | PeerEvent::Restarted(peer) => (peer, None),
                    PeerEvent::Refused(peer, r) => (peer, Some(r)),
                };
                let mut failed = Vec::new();
                self.client.fail_peer(peer, |c| {
                    if let Completion::Done { tag, .. } = c {
                        failed.push(tag as usize);
                    }
                });
                for i in failed {
                    results[i] = Some(Err(match refusal {
                        Some(r) => ForkError::NoSlot(r),
                        None => ForkError::NoAnswer(t0.elapsed()),
                    }));
                }
            }
            if next == targets.len() && results.iter().all(Option::is_some) {
                break;
            }
            if Instant::now() >= limit {
                for r in results.iter_mut().filter(|r| r.is_none()) {
                    *r = Some(Err(ForkError::NoAnswer(t0.elapsed())));
                }
                break;
            }
            if !moved {
                let mut pfd = libc::pollfd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(&self.layer.inner().as_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the duration of the call; 1 ms at most.
                unsafe { libc::poll(&mut pfd, 1, 1) };
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Err(ForkError::NoAnswer(t0.elapsed()))))
            .collect()
    }
}

fn record(c: Completion<'_>, results: &mut [Option<Result<(), ForkError>>]) {
    if let Completion::Done { tag, result, .. } = c {
        let r = match result {
            Ok(_) => Ok(()),
            Err(OpError::Remote(code)) => Err(ForkError::Refused(code)),
            Err(OpError::BadReply) => {
                Err(ForkError::Local("the daemon's reply does not match".into()))
            }
            Err(OpError::Aborted) => Err(ForkError::Local("aborted".into())),
        };
        if let Some(slot) = results.get_mut(tag as usize) {
            slot.get_or_insert(r);
        }
    }
}

/// A node whose PEs a daemon starts.
#[derive(Debug, Clone)]
pub struct RemoteNode {
    /// Node id.
    pub id: u16,
    /// For messages, e.g. `node 1 (loop1, 10.201.0.2:7470)`.
    pub label: String,
    /// The daemon's UDP address.
    pub daemon: SocketAddr,
    /// The ranks it runs (strictly increasing).
    pub ranks: Vec<u32>,
}

/// Everything a [`RemoteJob`] needs.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// Job id.
    pub job_id: u64,
    /// Job key.
    pub job_key: u64,
    /// Ranks in the whole job.
    pub size: u32,
    /// The cluster secret.
    pub secret: Secret,
    /// Program and arguments as the daemons execute them.
    pub argv: Vec<OsString>,
    /// Environment of the remote PEs (the daemons add the job's own variables).
    pub env: Vec<(OsString, OsString)>,
    /// Working directory of the remote PEs.
    pub cwd: PathBuf,
    /// Time between SIGTERM and SIGKILL when the job is ended.
    pub grace: Duration,
    /// Longest wait for a daemon's answer to the FORK, and then for its connection.
    pub deadline: Duration,
    /// UDP payload bytes per datagram.
    pub mtu: usize,
    /// Prefix output lines with `[rank] `.
    pub tag_output: bool,
    /// The nodes.
    pub nodes: Vec<RemoteNode>,
}

/// Something the job loop must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteEvent {
    /// A remote PE ended.
    Exited {
        /// Its rank.
        rank: u32,
        /// Its pid on its node.
        pid: u32,
        /// Its node (label).
        node: String,
        /// How it ended.
        status: ExitStatus,
    },
    /// A node failed the job: a PE could not start, the daemon never connected back, or
    /// its connection ended while PEs ran.
    Failed {
        /// The node (label).
        node: String,
        /// What happened.
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RankState {
    Waiting,
    Running { pid: u32 },
    Ended { pid: u32 },
}

struct NodeState {
    node: RemoteNode,
    nonce: [u8; 16],
    local_ip: IpAddr,
    conn: Option<Conn>,
    /// When the FORK was accepted (the daemon must connect back within the deadline).
    accepted_at: Option<Instant>,
    /// Done received, or the node given up.
    closed: bool,
}

struct Conn {
    tcp: TcpStream,
    reader: FrameReader,
}

struct Pending {
    tcp: TcpStream,
    reader: FrameReader,
    since: Instant,
    peer: SocketAddr,
}

/// Order sent to every daemon (and to daemons that connect later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    None,
    Terminate(Duration),
    Kill,
}

/// The remote half of a job; see the [module docs](self).
pub struct RemoteJob {
    cfg: RemoteConfig,
    listeners: Vec<(IpAddr, TcpListener)>,
    nodes: Vec<NodeState>,
    pending: Vec<Pending>,
    ranks: HashMap<u32, (usize, RankState)>,
    order: Order,
    /// Partial output lines per (rank, stream) when tagging or merging.
    partial: HashMap<(u32, u8), Vec<u8>>,
    /// Where the PEs' standard-error lines go when diagnostics are merged.
    merger: Option<Arc<Merger>>,
    /// Receive buffer.
    buf: Vec<u8>,
}

impl fmt::Debug for RemoteJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteJob")
            .field("job_id", &format_args!("{:016x}", self.cfg.job_id))
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

fn random_nonce() -> std::io::Result<[u8; 16]> {
    let a = gsas_sys::process::random_u64()?;
    let b = gsas_sys::process::random_u64()?;
    let mut n = [0u8; 16];
    n[..8].copy_from_slice(&a.to_le_bytes());
    n[8..].copy_from_slice(&b.to_le_bytes());
    Ok(n)
}

impl RemoteJob {
    /// Prepares the remote half: finds the launcher address each node reaches and listens
    /// there for the daemons' streams. Errors name the node.
    pub fn new(cfg: RemoteConfig) -> Result<RemoteJob, String> {
        let mut listeners: Vec<(IpAddr, TcpListener)> = Vec::new();
        let mut nodes = Vec::with_capacity(cfg.nodes.len());
        let mut ranks = HashMap::new();
        for (i, n) in cfg.nodes.iter().enumerate() {
            let ip = source_ip(n.daemon)
                .map_err(|e| format!("{}: no route from this machine: {e}", n.label))?;
            if !listeners.iter().any(|(l, _)| *l == ip) {
                let l = TcpListener::bind(SocketAddr::new(ip, 0))
                    .map_err(|e| format!("listening for the daemons' streams on {ip}: {e}"))?;
                l.set_nonblocking(true)
                    .map_err(|e| format!("stream listener on {ip}: {e}"))?;
                listeners.push((ip, l));
            }
            for &r in &n.ranks {
                ranks.insert(r, (i, RankState::Waiting));
            }
            nodes.push(NodeState {
                node: n.clone(),
                nonce: random_nonce().map_err(|e| format!("drawing a nonce: {e}"))?,
                local_ip: ip,
                conn: None,
                accepted_at: None,
                closed: false,
            });
        }
        Ok(RemoteJob {
            cfg,
            listeners,
            nodes,
            pending: Vec::new(),
            ranks,
            order: Order::None,
            partial: HashMap::new(),
            merger: None,
            buf: vec![0u8; 64 * 1024],
        })
    }

    /// Sends the remote PEs' standard-error lines through `merger` (the same diagnostic of
    /// many PEs printed once, [`crate::oshrun::merge`]); `None`: printed as they come.
    pub fn set_merger(&mut self, merger: Option<Arc<Merger>>) {
        self.merger = merger;
    }

    /// The launcher addresses the nodes reach (the PMI server must listen on each).
    pub fn listen_ips(&self) -> Vec<IpAddr> {
        self.listeners.iter().map(|(ip, _)| *ip).collect()
    }

    /// The node label and pid of a remote rank, for messages.
    pub fn describe_rank(&self, rank: u32) -> Option<(String, u32)> {
        let (i, st) = self.ranks.get(&rank)?;
        let pid = match st {
            RankState::Running { pid } | RankState::Ended { pid } => *pid,
            RankState::Waiting => 0,
        };
        Some((self.nodes[*i].node.label.clone(), pid))
    }

    /// Sends every node its FORK, the PEs reaching PMI at the address of `pmi` on the
    /// node's launcher address; waits (bounded by the deadline) for every verdict. The
    /// first refusal or silence is returned as an error naming the node.
    pub fn start(&mut self, pmi: &[SocketAddr]) -> Result<(), String> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut by_ip: HashMap<IpAddr, Vec<usize>> = HashMap::new();
        let mut requests = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            let pmi_addr = pmi
                .iter()
                .find(|a| a.ip() == n.local_ip)
                .copied()
                .ok_or_else(|| format!("no PMI listener on {}", n.local_ip))?;
            let stream_addr = self
                .listeners
                .iter()
                .find(|(ip, _)| *ip == n.local_ip)
                .and_then(|(_, l)| l.local_addr().ok())
                .ok_or_else(|| format!("no stream listener on {}", n.local_ip))?;
            let req = ForkRequest {
                node: n.node.id,
                job_id: self.cfg.job_id,
                job_key: self.cfg.job_key,
                nonce: n.nonce,
                timestamp_ms: now_ms,
                spec: LaunchSpec {
                    size: self.cfg.size,
                    ranks: n.node.ranks.clone(),
                    grace_ms: u32::try_from(self.cfg.grace.as_millis()).unwrap_or(u32::MAX),
                    pmi: pmi_addr,
                    stream: stream_addr,
                    cwd: self.cfg.cwd.clone(),
                    argv: self.cfg.argv.clone(),
                    env: self.cfg.env.clone(),
                },
            };
            let bytes = req
                .emit(&self.cfg.secret)
                .map_err(|e| format!("{}: the FORK request: {e}", n.node.label))?;
            by_ip.entry(n.local_ip).or_default().push(i);
            requests.push(bytes);
        }
        for (ip, idx) in by_ip {
            let targets: Vec<ForkTarget> = idx
                .iter()
                .map(|&i| ForkTarget {
                    daemon: self.nodes[i].node.daemon,
                    request: std::mem::take(&mut requests[i]),
                })
                .collect();
            let results = send_forks(
                ip,
                self.cfg.job_key,
                self.cfg.mtu,
                self.cfg.deadline,
                &targets,
            );
            let mut first_error = None;
            for (&i, r) in idx.iter().zip(results) {
                match r {
                    Ok(()) => {
                        log::info!("{}: FORK accepted", self.nodes[i].node.label);
                        self.nodes[i].accepted_at = Some(Instant::now());
                    }
                    Err(e) => {
                        first_error.get_or_insert(format!("{}: {e}", self.nodes[i].node.label));
                    }
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether every remote PE has ended (or will never run).
    pub fn all_ended(&self) -> bool {
        self.ranks
            .values()
            .all(|(_, s)| matches!(s, RankState::Ended { .. }))
    }

    /// Whether remote rank `rank` was reported ended (`None`: not a rank of this half).
    pub fn has_ended(&self, rank: u32) -> Option<bool> {
        let (_, st) = self.ranks.get(&rank)?;
        Some(matches!(st, RankState::Ended { .. }))
    }

    /// The ranks of this half.
    pub fn ranks(&self) -> Vec<u32> {
        let mut r: Vec<u32> = self.ranks.keys().copied().collect();
        r.sort_unstable();
        r
    }

    /// Asks every daemon to send SIGQUIT to its PEs that handle it: each gsas PE prints
    /// the call it is in and what it waits for. Daemons that connect later are not asked.
    pub fn ask_reports(&mut self) {
        let frame = stream::encode(FrameType::Report, 0, 0, &[]);
        for n in self.nodes.iter_mut() {
            if let Some(c) = n.conn.as_mut() {
                if let Err(e) = c.tcp.write_all(&frame) {
                    log::warn!("{}: asking for the PEs' reports: {e}", n.node.label);
                }
            }
        }
    }

    /// Asks every daemon to end its PEs: SIGTERM, SIGKILL after `grace`.
    pub fn terminate(&mut self, grace: Duration) {
        if self.order == Order::None {
            self.order = Order::Terminate(grace);
            self.send_order();
        }
    }

    /// Asks every daemon to kill its PEs now.
    pub fn kill(&mut self) {
        if self.order != Order::Kill {
            self.order = Order::Kill;
            self.send_order();
        }
    }

    fn send_order(&mut self) {
        let frame = match self.order {
            Order::None => return,
            Order::Terminate(g) => stream::encode(
                FrameType::Terminate,
                0,
                0,
                &u32::try_from(g.as_millis())
                    .unwrap_or(u32::MAX)
                    .to_le_bytes(),
            ),
            Order::Kill => stream::encode(FrameType::Kill, 0, 0, &[]),
        };
        for n in self.nodes.iter_mut() {
            if let Some(c) = n.conn.as_mut() {
                if let Err(e) = c.tcp.write_all(&frame) {
                    log::warn!("{}: sending the order to end the job: {e}", n.node.label);
                }
            }
        }
    }

    /// Accepts connections, reads frames, prints output and reports what happened.
    pub fn poll(&mut self, events: &mut Vec<RemoteEvent>) {
        self.accept();
        self.check_pending();
        let mut buf = std::mem::take(&mut self.buf);
        for i in 0..self.nodes.len() {
            let mut frames = Vec::new();
            let mut lost: Option<String> = None;
            if let Some(c) = self.nodes[i].conn.as_mut() {
                // Bounded, so that a node printing without pause cannot starve the loop.
                for _ in 0..READS_PER_POLL {
                    match c.tcp.read(&mut buf) {
                        Ok(0) => {
                            lost = Some("the daemon closed the connection".into());
                            break;
                        }
                        Ok(n) => c.reader.push(&buf[..n]),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => {
                            lost = Some(format!("the connection failed: {e}"));
                            break;
                        }
                    }
                }
                loop {
                    match c.reader.next_frame() {
                        Ok(Some(f)) => frames.push(f),
                        Ok(None) => break,
                        Err(e) => {
                            lost = Some(format!("the daemon's stream is corrupt: {e}"));
                            break;
                        }
                    }
                }
            }
            for f in frames {
                self.handle(i, f, events);
            }
            if let Some(why) = lost {
                self.node_lost(i, &why, events);
            }
        }
        self.buf = buf;
        // Daemons that accepted but never connected back.
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            let late = n.conn.is_none()
                && !n.closed
                && n.accepted_at
                    .is_some_and(|t| t.elapsed() > self.cfg.deadline);
            if late {
                let why = format!(
                    "gsas-atomicd accepted the FORK but did not connect back to this launcher \
                     within {:.1} s (is a firewall in the way?)",
                    self.cfg.deadline.as_secs_f64()
                );
                self.node_lost(i, &why, events);
            }
        }
    }

    fn node_lost(&mut self, i: usize, why: &str, events: &mut Vec<RemoteEvent>) {
        let n = &mut self.nodes[i];
        n.conn = None;
        if n.closed {
            return;
        }
        n.closed = true;
        let label = n.node.label.clone();
        let mut open = Vec::new();
        for (rank, (node, st)) in self.ranks.iter_mut() {
            if *node != i {
                continue;
            }
            match *st {
                RankState::Ended { .. } => {}
                RankState::Running { pid } => {
                    open.push(*rank);
                    *st = RankState::Ended { pid };
                }
                RankState::Waiting => {
                    open.push(*rank);
                    *st = RankState::Ended { pid: 0 };
                }
            }
        }
        if !open.is_empty() {
            open.sort_unstable();
            events.push(RemoteEvent::Failed {
                node: label,
                message: format!("{why} while PE(s) {open:?} had not been reported ended"),
            });
        }
    }

    fn handle(&mut self, i: usize, f: Frame, events: &mut Vec<RemoteEvent>) {
        let label = self.nodes[i].node.label.clone();
        let owned = self.ranks.get(&f.rank).is_some_and(|(n, _)| *n == i);
        match f.ty {
            FrameType::Output if owned => self.output(f.rank, f.stream, &f.payload),
            FrameType::Started if owned => {
                if let Some(pid) = stream::parse_u32(&f.payload) {
                    if let Some((_, st)) = self.ranks.get_mut(&f.rank) {
                        *st = RankState::Running { pid };
                    }
                    log::debug!("{label}: PE {} started as pid {pid}", f.rank);
                }
            }
            FrameType::Exited if owned => {
                let Some((pid, raw)) = stream::parse_exited(&f.payload) else {
                    log::warn!("{label}: unreadable exit report for PE {}", f.rank);
                    return;
                };
                if let Some((_, st)) = self.ranks.get_mut(&f.rank) {
                    if matches!(st, RankState::Ended { .. }) {
                        return;
                    }
                    *st = RankState::Ended { pid };
                }
                self.flush_rank(f.rank);
                events.push(RemoteEvent::Exited {
                    rank: f.rank,
                    pid,
                    node: label,
                    status: ExitStatus::from_raw(raw),
                });
            }
            FrameType::StartFailed if owned => {
                if let Some((_, st)) = self.ranks.get_mut(&f.rank) {
                    *st = RankState::Ended { pid: 0 };
                }
                events.push(RemoteEvent::Failed {
                    node: label,
                    message: String::from_utf8_lossy(&f.payload).into_owned(),
                });
            }
            FrameType::Done => {
                self.nodes[i].closed = true;
                self.nodes[i].conn = None;
                // PEs the daemon never reported cannot run any more.
                for (node, st) in self.ranks.values_mut() {
                    if *node == i && !matches!(st, RankState::Ended { .. }) {
                        *st = RankState::Ended { pid: 0 };
                    }
                }
            }
            other => log::warn!(
                "{label}: unexpected {other:?} frame about rank {}; ignored",
                f.rank
            ),
        }
    }

    fn output(&mut self, rank: u32, stream_no: u8, data: &[u8]) {
        let merged = self.merger.as_ref().filter(|_| stream_no == STDERR);
        if !self.cfg.tag_output && merged.is_none() {
            write_out(stream_no, data);
            return;
        }
        let buf = self.partial.entry((rank, stream_no)).or_default();
        buf.extend_from_slice(data);
        let Some(last_nl) = buf.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let rest = buf.split_off(last_nl + 1);
        if let Some(m) = merged {
            for line in buf.split_inclusive(|&b| b == b'\n') {
                m.line(rank, line);
            }
        } else {
            let mut text = Vec::with_capacity(buf.len() + 16);
            for line in buf.split_inclusive(|&b| b == b'\n') {
                text.extend_from_slice(format!("[{rank}] ").as_bytes());
                text.extend_from_slice(line);
            }
            write_out(stream_no, &text);
        }
        *buf = rest;
    }

    fn flush_rank(&mut self, rank: u32) {
        for st in [stream::STDOUT, STDERR] {
            if let Some(mut b) = self.partial.remove(&(rank, st)) {
                if b.is_empty() {
                    continue;
                }
                b.push(b'\n');
                match self.merger.as_ref().filter(|_| st == STDERR) {
                    Some(m) => m.line(rank, &b),
                    None => {
                        let mut text = format!("[{rank}] ").into_bytes();
                        text.extend_from_slice(&b);
                        write_out(st, &text);
                    }
                }
            }
        }
    }

    /// Waits (at most `limit`) until every node has sent Done or closed, so that output
    /// written just before the PEs ended is printed; then prints partial lines.
    pub fn finish(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        let mut ignored = Vec::new();
        while self.nodes.iter().any(|n| n.conn.is_some() && !n.closed) && Instant::now() < until {
            self.poll(&mut ignored);
            std::thread::sleep(Duration::from_millis(5));
        }
        let ranks: Vec<u32> = self.partial.keys().map(|(r, _)| *r).collect();
        for r in ranks {
            self.flush_rank(r);
        }
    }

    fn accept(&mut self) {
        for (_, l) in &self.listeners {
            loop {
                match l.accept() {
                    Ok((tcp, peer)) => {
                        if self.pending.len() >= MAX_PENDING {
                            log::warn!("stream connection from {peer} dropped: too many waiting");
                            continue;
                        }
                        if tcp.set_nonblocking(true).is_err() {
                            continue;
                        }
                        let _ = tcp.set_nodelay(true);
                        let _ = tcp.set_write_timeout(Some(Duration::from_secs(5)));
                        self.pending.push(Pending {
                            tcp,
                            reader: FrameReader::new(),
                            since: Instant::now(),
                            peer,
                        });
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::warn!("accepting a stream connection: {e}");
                        break;
                    }
                }
            }
        }
    }

    /// Reads the Hello of waiting connections; a valid one attaches the connection to its
    /// node, anything else closes it.
    fn check_pending(&mut self) {
        let mut buf = [0u8; 256];
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            let mut closed = false;
            loop {
                match p.tcp.read(&mut buf) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => {
                        p.reader.push(&buf[..n]);
                        if p.reader.pending() >= stream::FRAME_HEADER + stream::HELLO_LEN {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
            let verdict = match p.reader.next_frame() {
                Ok(Some(f)) if f.ty == FrameType::Hello => {
                    let nonces: Vec<(u16, [u8; 16], bool)> = self
                        .nodes
                        .iter()
                        .map(|n| (n.node.id, n.nonce, n.conn.is_none() && !n.closed))
                        .collect();
                    stream::check_hello(
                        &self.cfg.secret,
                        self.cfg.job_id,
                        self.cfg.job_key,
                        &f.payload,
                        |id| {
                            nonces
                                .iter()
                                .find(|(n, _, free)| *n == id && *free)
                                .map(|(_, nonce, _)| *nonce)
                        },
                    )
                    .map(Some)
                    .map_err(|e| e.0)
                }
                Ok(Some(f)) => Err(format!("first frame is {:?}, not Hello", f.ty)),
                Ok(None) if closed => Err("closed before its Hello".into()),
                Ok(None) if p.since.elapsed() > HELLO_TIMEOUT => {
                    Err(format!("no Hello within {} s", HELLO_TIMEOUT.as_secs()))
                }
                Ok(None) => Ok(None),
                Err(e) => Err(e.0),
            };
            match verdict {
                Ok(None) => i += 1,
                Ok(Some(node_id)) => {
                    let p = self.pending.swap_remove(i);
                    if let Some(n) = self.nodes.iter_mut().find(|n| n.node.id == node_id) {
                        log::debug!("{}: stream connected from {}", n.node.label, p.peer);
                        n.conn = Some(Conn {
                            tcp: p.tcp,
                            reader: p.reader,
                        });
                    }
                    // A daemon that connects after the job was ended is told at once.
                    if self.order != Order::None {
                        self.send_order();
                    }
                }
                Err(why) => {
                    let p = self.pending.swap_remove(i);
                    log::warn!("stream connection from {} refused: {why}", p.peer);
                }
            }
        }
    }
}

fn write_out(stream_no: u8, data: &[u8]) {
    // One write per chunk keeps lines of different PEs whole; a closed stdout is not the
    // job's failure.
    let _ = if stream_no == STDERR {
        std::io::stderr().lock().write_all(data)
    } else {
        std::io::stdout().lock().write_all(data)
    };
}

#[cfg(test)]
mod tests;
