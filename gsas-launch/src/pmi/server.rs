//! The PMI-1 server run by gsas's launcher (`oshrun`).
//!
//! Kept as one file because the PMI-1 server is one state machine over its connections
//! (`Server`, each rank's state, the barrier and the key-value space they share).
//!
//! What it is: a process manager's side of the PMI-1 "simple" protocol, answering with
//! Hydra's verbatim reply formats, for ranks connected
//!
//! * over a socketpair created by [`Server::add_local_rank`] and handed to the child as
//!   `PMI_FD` with `PMI_RANK`/`PMI_SIZE` (exactly as Hydra does), or
//! * over TCP to the listener of [`Server::listen_tcp`]: the child gets `PMI_PORT` and
//!   `PMI_ID=<rank>` ([`tcp_env`]) and identifies itself with `cmd=initack pmiid=<rank>`.
//!
//! It keeps one key-value space, runs barriers across all ranks (`barrier_out` to everyone
//! when the last `barrier_in` arrives), acknowledges `finalize`, serves
//! `PMI_process_mapping` from the launcher's node map, and reports what the launcher must
//! act on as [`Event`]s: a rank's `abort`, a rank's connection closing without `finalize`,
//! a TCP connection refused before it identified itself.
//!
//! Beyond Hydra: `response_to_init` says `gsas_notes=1`, and `cmd=gsas_note kind=K
//! value=V` (answered `cmd=gsas_note_result rc=0`) is reported as [`Event::Note`]: gsas's
//! PEs send it, to this server only, to say which call they have been blocked in and that
//! they exit without finalize, so that the launcher can explain a hang. They also send an
//! abort's message as `gsas_message_hex=<hex of its bytes>` (PMI-1 values cannot hold
//! blanks), which [`Event::Abort`] carries decoded; `message=<token>` of other clients is
//! taken as it is.
//!
//! Differences from Hydra, all stricter or simpler: a put is visible to gets at once
//! (Hydra 4.0 publishes at the next barrier; clients must not rely on either); keys with
//! the `PMI_` prefix, keys of 64 characters or more, values of 1024 characters or more
//! and a foreign `kvsname` are refused with `rc=-1` rather than accepted or truncated; an
//! unknown command gets `cmd=error rc=-1` rather than ending the job; a barrier that can
//! no longer complete (a rank finalized, aborted or was lost) is answered at once with
//! `cmd=barrier_out rc=-1 msg=rank_<r>_<state>`, so that waiting ranks fail fast instead
//! of timing out.
//!
//! Robustness: request lines are at most 1024 bytes; a line that is too long, is not
//! printable ASCII, or does not have the `cmd=... key=value` form closes that connection
//! with a logged reason (and an [`Event::Lost`] or [`Event::Rejected`]); the server never
//! panics on input. Replies that a peer does not read are buffered up to 64 KiB, then the
//! connection is dropped.
//!
//! What it is not: PMI-2, PMIx, `spawn`/`mcmd`, multiple key-value spaces, a process
//! launcher (the launcher spawns and reaps processes; it combines `waitpid` with the
//! events here to end the job).
//!
//! Design: one thread, one `poll(2)` loop over non-blocking sockets. The protocol is one
//! short request at a time per rank and the barrier and key-value space are shared
//! state; a single owner needs no locks and scales to thousands of ranks without
//! thousands of threads. [`Server::step`] waits at most the given time;
//! [`Server::run`] loops until every rank is finished or a [`ShutdownHandle`] (usable
//! from any thread) stops it. TCP connections must identify themselves within
//! [`ServerConfig::handshake_timeout`].
//!
//! Thread-safety: `Server` is `Send` (run it on its own thread); `ShutdownHandle` is
//! `Send + Sync + Clone`.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::PmiError;
use super::wire::{LineBuf, MAX_REQUEST_LINE, Message, excerpt, excerpt_bytes, hex_decode};
use super::{PROCESS_MAPPING_KEY, ProcessMapping};

/// `kvsname_max` announced to clients (Hydra's `PMI_MAXKVSLEN`).
pub const KVSNAME_MAX: usize = 256;
/// `keylen_max` announced to clients (Hydra's `PMI_MAXKEYLEN`); keys are shorter.
pub const KEYLEN_MAX: usize = 64;
/// `vallen_max` announced to clients (Hydra's `PMI_MAXVALLEN`); values are shorter.
pub const VALLEN_MAX: usize = 1024;
/// Most keys the key-value space holds (a bound on memory; about 1 KiB each at most).
pub const MAX_KVS_ENTRIES: usize = 1 << 18;
/// Most TCP connections waiting to identify themselves at one time, unless more ranks
/// than this are still to connect: then as many as those ranks
/// (`Server::pending_limit`). Connections beyond it wait in the kernel's accept queue
/// until one identifies or times out; none is refused for it.
pub const MAX_PENDING_CONNECTIONS: usize = 256;
/// Most reply bytes buffered for a peer that does not read.
pub const MAX_UNSENT: usize = 64 * 1024;

/// What the server is to announce and serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Number of ranks in the job (at least 1).
    pub size: u32,
    /// Name of the key-value space (a token of fewer than 256 characters).
    pub kvsname: String,
    /// Answer to `get_appnum`.
    pub appnum: i64,
    /// Answer to `get_universe_size` (Hydra answers -1, "unknown").
    pub universe_size: i64,
    /// The debug flag sent in the `initack` handshake.
    pub debug: bool,
    /// Node index of every rank, served as `PMI_process_mapping`; `None` means all ranks
    /// on node 0.
    pub node_of_rank: Option<Vec<u32>>,
    /// How long a TCP connection may take to send `initack` (default 30 s).
    pub handshake_timeout: Duration,
}

impl ServerConfig {
    /// A job of `size` ranks on one node, kvs `kvs_gsas_<pid>`, appnum 0, universe size
    /// `size`, no debug.
    pub fn new(size: u32) -> Self {
        ServerConfig {
            size,
            kvsname: format!("kvs_gsas_{}", std::process::id()),
            appnum: 0,
            universe_size: i64::from(size),
            debug: false,
            node_of_rank: None,
            handshake_timeout: Duration::from_secs(30),
        }
    }
}

/// Something the launcher must know about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The rank sent `finalize` and got its acknowledgement.
    Finalized {
        /// The rank.
        rank: u32,
    },
    /// The rank asked to end the job (`cmd=abort exitcode=N [message=...]`). A missing
    /// or malformed exit code is reported as 1.
    Abort {
        /// The rank.
        rank: u32,
        /// The requested exit status of the job.
        code: i32,
        /// The rank's message, if it sent one.
        message: Option<String>,
    },
    /// The rank's connection ended before `finalize` or `abort`: the process died, closed
    /// the descriptor, or broke the protocol.
    Lost {
        /// The rank.
        rank: u32,
        /// What happened, for the launcher's error message.
        reason: String,
    },
    /// A gsas PE's note (`cmd=gsas_note kind=K value=V`): `wait` and the OpenSHMEM call
    /// it has been blocked in for a second or more (`-`: no longer), `exit` (its program
    /// exits without `shmem_finalize`), `report` (it printed where it waits, after a
    /// SIGQUIT). See `gsas_node::watch`.
    Note {
        /// The rank.
        rank: u32,
        /// What the note is about.
        kind: String,
        /// Its value.
        value: String,
    },
    /// A TCP connection was dropped before it identified itself as a rank.
    Rejected {
        /// The peer address.
        peer: String,
        /// Why.
        reason: String,
    },
}

/// Why [`Server::run`] or [`Server::step`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every rank finalized, aborted or was lost.
    Done,
    /// [`ShutdownHandle::shutdown`] was called.
    Shutdown,
}

struct Wake {
    flag: AtomicBool,
    tx: OwnedFd,
}

/// Stops a running server from any thread.
#[derive(Clone)]
pub struct ShutdownHandle(Arc<Wake>);

impl ShutdownHandle {
    /// Makes the server's current or next `step`/`run` return [`Stop::Shutdown`] promptly.
    pub fn shutdown(&self) {
        self.0.flag.store(true, Ordering::Release);
        // A full pipe already wakes the poll; any error here changes nothing.
        let _ = gsas_sys::fd::send(self.0.tx.as_fd(), &[1]);
    }

    /// Whether shutdown was requested.
    pub fn is_shutdown(&self) -> bool {
        self.0.flag.load(Ordering::Acquire)
    }
}

impl std::fmt::Debug for ShutdownHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShutdownHandle")
            .field("shutdown", &self.is_shutdown())
            .finish()
    }
}

/// The child's end of a rank's socketpair, to be inherited as `PMI_FD`.
#[derive(Debug)]
pub struct ChildEndpoint {
    fd: OwnedFd,
    rank: u32,
    size: u32,
}

impl ChildEndpoint {
    /// The rank this endpoint belongs to.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The descriptor (close-on-exec in this process).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The descriptor itself, for launchers that set up the child their own way: they
    /// must clear its close-on-exec flag in the child only, set `PMI_FD`, `PMI_RANK` and
    /// `PMI_SIZE`, and close it in the launcher after spawning.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// Spawns `cmd` with this endpoint inherited as `PMI_FD` and `PMI_RANK`/`PMI_SIZE` set
    /// (`PMI_PORT`/`PMI_ID` removed), then closes the launcher's copy, so that the server
    /// sees end-of-file when the child exits. Other children never inherit it.
    pub fn spawn(self, cmd: &mut Command) -> io::Result<Child> {
        let raw = self.fd.as_raw_fd();
        cmd.env("PMI_FD", raw.to_string())
            .env("PMI_RANK", self.rank.to_string())
            .env("PMI_SIZE", self.size.to_string())
            .env_remove("PMI_PORT")
            .env_remove("PMI_ID");
        // SAFETY: the hook runs in the forked child before exec and only calls fcntl,
        // which is async-signal-safe; `raw` stays open in the parent (self.fd is alive
        // until after spawn returns), so the child's copy names the same socket.
        unsafe {
            cmd.pre_exec(move || gsas_sys::fd::clear_cloexec(raw));
        }
        let child = cmd.spawn();
        drop(self);
        child
    }
}

/// `PMI_PORT`/`PMI_ID` for a rank that connects over TCP to `host_port` (the listener's
/// address as reachable from the rank's host).
pub fn tcp_env(host_port: &str, rank: u32) -> [(&'static str, String); 2] {
    [
        ("PMI_PORT", host_port.to_owned()),
        ("PMI_ID", rank.to_string()),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RankState {
    /// Not connected yet (TCP ranks) or never registered.
    Waiting,
    Active {
        conn: usize,
    },
    Finalized,
    Aborted,
    Lost,
}

impl RankState {
    fn finished(self) -> Option<&'static str> {
        match self {
            RankState::Finalized => Some("finalized"),
            RankState::Aborted => Some("aborted"),
            RankState::Lost => Some("lost"),
            RankState::Waiting | RankState::Active { .. } => None,
        }
    }
}

struct Conn {
    fd: OwnedFd,
    rank: Option<u32>,
    peer: String,
    rx: LineBuf,
    tx: Vec<u8>,
    opened: Instant,
    in_barrier: bool,
}

/// The PMI-1 server. See the module documentation.
pub struct Server {
    config: ServerConfig,
    mapping: String,
    ranks: Vec<RankState>,
    conns: Vec<Option<Conn>>,
    listener: Option<TcpListener>,
    kvs: HashMap<String, String>,
    barrier_count: u32,
    /// Ranks that sent `init` (a process that never did is no PE of the library).
    initialized: Vec<bool>,
    wake: Arc<Wake>,
    wake_rx: OwnedFd,
    events: Vec<Event>,
}

const _: () = {
    const fn assert_send<T: Send>() {}
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send::<Server>();
    assert_send_sync::<ShutdownHandle>();
};

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("size", &self.config.size)
            .field("kvsname", &self.config.kvsname)
            .field("ranks", &self.ranks)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A server for `config.size` ranks; none is connected yet.
    pub fn new(config: ServerConfig) -> Result<Server, PmiError> {
        if config.size == 0 {
            return Err(PmiError::Invalid("server for a job of 0 ranks".into()));
        }
        if config.kvsname.is_empty()
            || config.kvsname.len() >= KVSNAME_MAX
            || !super::wire::is_token(&config.kvsname)
        {
            return Err(PmiError::Invalid(format!(
                "kvsname {:?} must be 1 to {} printable characters without space or '='",
                config.kvsname,
                KVSNAME_MAX - 1
            )));
        }
        let mapping = match &config.node_of_rank {
            None => format!("(vector,(0,1,{}))", config.size),
            Some(t) if t.len() == config.size as usize => {
                ProcessMapping::from_node_of_rank(t).to_string()
            }
            Some(t) => {
                return Err(PmiError::Invalid(format!(
                    "node map has {} entries for {} ranks",
                    t.len(),
                    config.size
                )));
            }
        };
        if mapping.len() >= VALLEN_MAX {
            return Err(PmiError::Invalid(format!(
                "the node map gives a PMI_process_mapping of {} characters, more than the \
                 {} a PMI value may have; place ranks in contiguous blocks per node",
                mapping.len(),
                VALLEN_MAX - 1
            )));
        }
        let (wake_rx, tx) =
            gsas_sys::fd::pipe().map_err(|e| PmiError::io("creating the wake-up pipe", e))?;
        Ok(Server {
            ranks: vec![RankState::Waiting; config.size as usize],
            initialized: vec![false; config.size as usize],
            config,
            mapping,
            conns: Vec::new(),
            listener: None,
            kvs: HashMap::new(),
            barrier_count: 0,
            wake: Arc::new(Wake {
                flag: AtomicBool::new(false),
                tx,
            }),
            wake_rx,
            events: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The `PMI_process_mapping` value served.
    pub fn process_mapping(&self) -> &str {
        &self.mapping
    }

    /// Whether `rank` sent `init` (its process talked PMI, as every PE of the library
    /// does; a plain program started by the launcher does not).
    pub fn initialized(&self, rank: u32) -> bool {
        self.initialized.get(rank as usize) == Some(&true)
    }

    /// A handle that stops [`Server::run`] from another thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(Arc::clone(&self.wake))
    }

    /// Creates the socketpair of `rank` and returns the end to give to its process.
    pub fn add_local_rank(&mut self, rank: u32) -> Result<ChildEndpoint, PmiError> {
        self.check_unclaimed(rank)?;
        let (ours, theirs) = gsas_sys::fd::socketpair()
            .map_err(|e| PmiError::io(format!("socketpair for rank {rank}"), e))?;
        gsas_sys::fd::set_nonblocking_cloexec(ours.as_fd())
            .map_err(|e| PmiError::io(format!("configuring the socket of rank {rank}"), e))?;
        let idx = self.insert_conn(Conn {
            fd: ours,
            rank: Some(rank),
            peer: format!("rank {rank} (socketpair)"),
            rx: LineBuf::new(MAX_REQUEST_LINE),
            tx: Vec::new(),
            opened: Instant::now(),
            in_barrier: false,
        });
        self.ranks[rank as usize] = RankState::Active { conn: idx };
        Ok(ChildEndpoint {
            fd: theirs,
            rank,
            size: self.config.size,
        })
    }

    /// Listens for TCP ranks on `addr` (port 0 picks a free port) and returns the bound
    /// address. Every rank without a socketpair may then connect with `pmiid=<rank>`.
    pub fn listen_tcp(&mut self, addr: SocketAddr) -> Result<SocketAddr, PmiError> {
        if self.listener.is_some() {
            return Err(PmiError::Invalid(
                "the server already listens on TCP".into(),
            ));
        }
        let l = TcpListener::bind(addr).map_err(|e| PmiError::io(format!("binding {addr}"), e))?;
        l.set_nonblocking(true)
            .map_err(|e| PmiError::io("configuring the TCP listener", e))?;
        gsas_sys::socket::widen_backlog(l.as_fd())
            .map_err(|e| PmiError::io("widening the TCP listener's queue", e))?;
        let local = l
            .local_addr()
            .map_err(|e| PmiError::io("reading the listener address", e))?;
        self.listener = Some(l);
        Ok(local)
    }

    /// Serves until every rank is finished ([`Stop::Done`]) or shutdown is requested,
    /// calling `on_event` for every event as it happens.
    pub fn run(&mut self, mut on_event: impl FnMut(Event)) -> Result<Stop, PmiError> {
        loop {
            if let Some(stop) = self.step(Duration::from_millis(500), &mut on_event)? {
                return Ok(stop);
            }
        }
    }

    /// Waits at most `timeout` for activity, serves it, and reports events. Returns
    /// `Some(stop)` when the job is over or shutdown was requested.
    pub fn step(
        &mut self,
        timeout: Duration,
        mut on_event: impl FnMut(Event),
    ) -> Result<Option<Stop>, PmiError> {
        let stop = self.step_inner(timeout);
        for e in self.events.drain(..) {
            on_event(e);
        }
        stop
    }

    fn step_inner(&mut self, timeout: Duration) -> Result<Option<Stop>, PmiError> {
        if let Some(stop) = self.stop_reason() {
            return Ok(Some(stop));
        }
        let now = Instant::now();
        let mut wait = timeout;
        for c in self.conns.iter().flatten() {
            if c.rank.is_none() {
                let limit = c.opened + self.config.handshake_timeout;
                wait = wait.min(limit.saturating_duration_since(now));
            }
        }
        let mut fds = vec![libc::pollfd {
            fd: self.wake_rx.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // At the pending limit the listener is left out: its queue waits for a slot.
        let pending = self.pending();
        if let Some(l) = self
            .listener
            .as_ref()
            .filter(|_| pending < self.pending_limit())
        {
            fds.push(libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let first_conn = fds.len();
        let mut owners = Vec::with_capacity(self.conns.len());
        for (i, c) in self.conns.iter().enumerate() {
            if let Some(c) = c {
                let mut events = libc::POLLIN;
                if !c.tx.is_empty() {
                    events |= libc::POLLOUT;
                }
                fds.push(libc::pollfd {
                    fd: c.fd.as_raw_fd(),
                    events,
                    revents: 0,
                });
                owners.push(i);
            }
        }
        gsas_sys::fd::poll(&mut fds, wait)
            .map_err(|e| PmiError::io("poll in the PMI server", e))?;

        if fds[0].revents != 0 {
            let mut buf = [0u8; 64];
            while matches!(gsas_sys::fd::read(self.wake_rx.as_fd(), &mut buf), Ok(n) if n > 0) {}
        }
        if self.wake.flag.load(Ordering::Acquire) {
            return Ok(Some(Stop::Shutdown));
        }
        if first_conn == 2 && fds[1].revents != 0 {
            self.accept_all();
        }
        for (pfd, &i) in fds[first_conn..].iter().zip(&owners) {
            if pfd.revents & libc::POLLOUT != 0 {
                self.flush(i);
            }
            if pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                self.serve_readable(i);
            }
        }
        self.expire_handshakes();
        Ok(self.stop_reason())
    }

    fn stop_reason(&self) -> Option<Stop> {
        if self.wake.flag.load(Ordering::Acquire) {
            Some(Stop::Shutdown)
        } else if self.ranks.iter().all(|r| r.finished().is_some())
            // Deliver the last finalize_ack before the launcher drops the server.
            && self.conns.iter().flatten().all(|c| c.tx.is_empty())
        {
            Some(Stop::Done)
        } else {
            None
        }
    }

    fn check_unclaimed(&self, rank: u32) -> Result<(), PmiError> {
        match self.ranks.get(rank as usize) {
            None => Err(PmiError::Invalid(format!(
                "rank {rank} is outside the job of {} ranks",
                self.config.size
            ))),
            Some(RankState::Waiting) => Ok(()),
            Some(_) => Err(PmiError::Invalid(format!(
                "rank {rank} is already connected"
            ))),
        }
    }

    fn insert_conn(&mut self, c: Conn) -> usize {
        if let Some(i) = self.conns.iter().position(Option::is_none) {
            self.conns[i] = Some(c);
            i
        } else {
            self.conns.push(Some(c));
            self.conns.len() - 1
        }
    }

    fn accept_all(&mut self) {
        loop {
            let Some(l) = &self.listener else { return };
            if self.pending() >= self.pending_limit() {
                // The rest stay queued in the kernel until a slot frees (an identify or
                // a handshake timeout); the listener is polled again then.
                log::debug!(
                    "PMI server: {} connections waiting to identify; accepting more later",
                    self.pending()
                );
                return;
            }
            let (stream, peer) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // ECONNABORTED, EMFILE...: nothing to serve; try again at the next poll.
                    log::warn!("PMI server: accept failed: {e}");
                    return;
                }
            };
            let peer = peer.to_string();
            let _ = stream.set_nodelay(true);
            let fd = OwnedFd::from(stream);
            if let Err(e) = gsas_sys::fd::set_nonblocking_cloexec(fd.as_fd()) {
                self.reject(peer, format!("cannot configure the socket: {e}"));
                continue;
            }
            log::debug!("PMI server: connection from {peer}");
            self.insert_conn(Conn {
                fd,
                rank: None,
                peer,
                rx: LineBuf::new(MAX_REQUEST_LINE),
                tx: Vec::new(),
                opened: Instant::now(),
                in_barrier: false,
            });
        }
    }

    /// Connections accepted that have not yet identified a rank.
    fn pending(&self) -> usize {
        self.conns
            .iter()
            .flatten()
            .filter(|c| c.rank.is_none())
            .count()
    }

    /// How many connections may wait to identify at once: [`MAX_PENDING_CONNECTIONS`],
    /// or every rank still to connect when there are more (a job of 1,024 remote ranks
    /// connects all at once; a bound below that would hold back ranks of the job).
    fn pending_limit(&self) -> usize {
        let waiting = self
            .ranks
            .iter()
            .filter(|r| matches!(r, RankState::Waiting))
            .count();
        MAX_PENDING_CONNECTIONS.max(waiting)
    }

    fn reject(&mut self, peer: String, reason: String) {
        log::warn!("PMI server: rejected connection from {peer}: {reason}");
        self.events.push(Event::Rejected { peer, reason });
    }

    fn expire_handshakes(&mut self) {
        let now = Instant::now();
        let limit = self.config.handshake_timeout;
        let late: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                c.as_ref()
                    .filter(|c| c.rank.is_none() && now.duration_since(c.opened) >= limit)
                    .map(|_| i)
            })
            .collect();
        for i in late {
            self.close(
                i,
                format!("no cmd=initack within {:.1} s", limit.as_secs_f64()),
            );
        }
    }

    /// Reads what is available on connection `i` and serves complete lines.
    fn serve_readable(&mut self, i: usize) {
        let mut buf = [0u8; 4096];
        // Bounded: a peer cannot keep the loop here; the next poll comes back for more.
        for _ in 0..16 {
            let Some(c) = self.conns[i].as_mut() else {
                return;
            };
            let ended = match gsas_sys::fd::read(c.fd.as_fd(), &mut buf) {
                Ok(0) => "the process closed its PMI connection (exited or crashed)".to_owned(),
                Ok(n) => {
                    c.rx.extend(&buf[..n]);
                    self.serve_lines(i);
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A peer that exits with unread replies resets the connection.
                Err(e) => format!("the PMI connection failed ({e}); the process exited or crashed"),
            };
            self.serve_lines(i);
            self.close(i, format!("{ended} without finalize"));
            return;
        }
    }

    fn serve_lines(&mut self, i: usize) {
        loop {
            let Some(c) = self.conns[i].as_mut() else {
                return;
            };
            let line = match c.rx.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return,
                Err(e) => {
                    self.close(i, format!("protocol error: {e}"));
                    return;
                }
            };
            log::trace!(
                "PMI server < {}: {}",
                c.peer,
                String::from_utf8_lossy(&line)
            );
            if let Err(reason) = self.handle_line(i, &line) {
                self.close(i, reason);
                return;
            }
        }
    }

    /// Serves one request; `Err(reason)` means: drop this connection.
    fn handle_line(&mut self, i: usize, line: &[u8]) -> Result<(), String> {
        let msg = Message::parse(line)
            .map_err(|e| format!("protocol error: {e} in: {}", excerpt_bytes(line)))?;
        let Some(conn) = self.conns[i].as_ref() else {
            return Ok(());
        };
        let Some(rank) = conn.rank else {
            return self.identify(i, &msg);
        };
        if let Some(state) = self.ranks[rank as usize].finished() {
            return Err(format!(
                "cmd={} from rank {rank} after it {state}",
                msg.cmd()
            ));
        }
        match msg.cmd() {
            "initack" => {
                if msg.get_int("pmiid") == Ok(Some(i64::from(rank))) {
                    self.reply_initack(i, rank);
                    Ok(())
                } else {
                    Err(format!(
                        "cmd=initack pmiid={} on the connection of rank {rank}",
                        msg.get("pmiid").unwrap_or("<missing>")
                    ))
                }
            }
            "init" => {
                self.on_init(i, rank, &msg);
                Ok(())
            }
            "gsas_note" => {
                let kind = msg.get("kind").unwrap_or("").to_owned();
                let value = msg.get("value").unwrap_or("").to_owned();
                log::debug!("PMI server: rank {rank} notes {kind}={value}");
                self.events.push(Event::Note { rank, kind, value });
                self.reply(i, Message::new("gsas_note_result").with("rc", 0));
                Ok(())
            }
            "get_maxes" => {
                self.reply(
                    i,
                    Message::new("maxes")
                        .with("kvsname_max", KVSNAME_MAX)
                        .with("keylen_max", KEYLEN_MAX)
                        .with("vallen_max", VALLEN_MAX),
                );
                Ok(())
            }
            "get_appnum" => {
                let n = self.config.appnum;
                self.reply(i, Message::new("appnum").with("appnum", n));
                Ok(())
            }
            "get_my_kvsname" => {
                let k = self.config.kvsname.clone();
                self.reply(i, Message::new("my_kvsname").with("kvsname", k));
                Ok(())
            }
            "get_universe_size" => {
                let n = self.config.universe_size;
                self.reply(i, Message::new("universe_size").with("size", n));
                Ok(())
            }
            "put" => {
                let r = self.put(&msg);
                let reply = match r {
                    Ok(()) => Message::new("put_result")
                        .with("rc", 0)
                        .with("msg", "success"),
                    Err(why) => Message::new("put_result").with("rc", -1).with("msg", why),
                };
                self.reply(i, reply);
                Ok(())
            }
            "get" => {
                let reply = match self.get(&msg) {
                    Ok(v) => Message::new("get_result")
                        .with("rc", 0)
                        .with("msg", "success")
                        .with("value", v),
                    Err(why) => Message::new("get_result")
                        .with("rc", -1)
                        .with("msg", why)
                        .with("value", "unknown"),
                };
                self.reply(i, reply);
                Ok(())
            }
            "barrier_in" => {
                let Some(c) = self.conns[i].as_mut() else {
                    return Ok(());
                };
                if c.in_barrier {
                    return Err(format!(
                        "rank {rank} sent barrier_in twice without waiting for barrier_out"
                    ));
                }
                c.in_barrier = true;
                self.barrier_count += 1;
                self.settle_barrier();
                Ok(())
            }
            "finalize" => {
                self.reply(i, Message::new("finalize_ack"));
                // The reply may have failed and the rank been reported lost already.
                if self.ranks[rank as usize] == (RankState::Active { conn: i }) {
                    self.ranks[rank as usize] = RankState::Finalized;
                    log::debug!("PMI server: rank {rank} finalized");
                    self.events.push(Event::Finalized { rank });
                    self.settle_barrier();
                }
                Ok(())
            }
            "abort" => {
                self.on_abort(rank, &msg);
                Ok(())
            }
            other => {
                log::warn!("PMI server: rank {rank} sent unknown command {other:?}");
                let mut name: String = other.chars().take(64).collect();
                name.insert_str(0, "unknown_command_");
                self.reply(i, Message::new("error").with("rc", -1).with("msg", name));
                Ok(())
            }
        }
    }

    /// `cmd=init`: PMI version 1 is accepted (and the server says it takes gsas's notes).
    fn on_init(&mut self, i: usize, rank: u32, msg: &Message) {
        let rc = if msg.get_int("pmi_version") == Ok(Some(1)) {
            0
        } else {
            -1
        };
        let mut reply = Message::new("response_to_init")
            .with("pmi_version", 1)
            .with("pmi_subversion", 1)
            .with("rc", rc);
        if rc == 0 {
            // gsas's PEs send their notes (cmd=gsas_note) only to a server that
            // says it takes them; Hydra's clients ignore the key.
            reply = reply.with("gsas_notes", 1);
            self.initialized[rank as usize] = true;
        }
        self.reply(i, reply);
    }

    /// `cmd=abort`: the rank ends the job with its exit code and message.
    fn on_abort(&mut self, rank: u32, msg: &Message) {
        let (code, note) = match msg.get_int("exitcode") {
            Ok(Some(c)) => match i32::try_from(c) {
                Ok(c) => (c, None),
                Err(_) => (1, Some(format!("exit code {c} out of range"))),
            },
            Ok(None) => (1, Some("no exit code given".to_owned())),
            Err(bad) => (1, Some(format!("bad exit code {bad:?}"))),
        };
        // gsas's PEs send the message in hex (`gsas_message_hex`), blanks and all; other
        // clients (MPICH's) send a token in `message`.
        let text = msg
            .get("gsas_message_hex")
            .and_then(hex_decode)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .or_else(|| msg.get("message").map(str::to_owned));
        let message = match (text, note) {
            (Some(m), None) => Some(m),
            (Some(m), Some(n)) => Some(format!("{m} ({n})")),
            (None, n) => n,
        };
        // The launcher reports the abort (once, with the message): this is its trace.
        log::info!(
            "PMI server: rank {rank} aborts the job with code {code}: {}",
            message.as_deref().unwrap_or("(no message)")
        );
        self.ranks[rank as usize] = RankState::Aborted;
        self.events.push(Event::Abort {
            rank,
            code,
            message,
        });
        self.settle_barrier();
    }

    /// The first line of a TCP connection: `cmd=initack pmiid=<rank>`.
    fn identify(&mut self, i: usize, msg: &Message) -> Result<(), String> {
        if msg.cmd() != "initack" {
            return Err(format!(
                "expected cmd=initack pmiid=<rank> first, got cmd={}",
                excerpt(msg.cmd())
            ));
        }
        let rank = match msg.get_int("pmiid") {
            Ok(Some(id)) => u32::try_from(id).ok().filter(|&r| r < self.config.size),
            _ => None,
        }
        .ok_or_else(|| {
            format!(
                "cmd=initack pmiid={} is not a rank of this job of {}",
                msg.get("pmiid").unwrap_or("<missing>"),
                self.config.size
            )
        })?;
        self.check_unclaimed(rank).map_err(|e| e.to_string())?;
        if let Some(c) = self.conns[i].as_mut() {
            c.rank = Some(rank);
            c.peer = format!("rank {rank} ({})", c.peer);
        }
        self.ranks[rank as usize] = RankState::Active { conn: i };
        log::debug!("PMI server: rank {rank} connected over TCP");
        self.reply_initack(i, rank);
        Ok(())
    }

    fn reply_initack(&mut self, i: usize, rank: u32) {
        let size = self.config.size;
        let debug = u8::from(self.config.debug);
        self.reply(i, Message::new("initack"));
        self.reply(i, Message::new("set").with("size", size));
        self.reply(i, Message::new("set").with("rank", rank));
        self.reply(i, Message::new("set").with("debug", debug));
    }

    fn put(&mut self, msg: &Message) -> Result<(), &'static str> {
        let (Some(kvs), Some(key), Some(value)) =
            (msg.get("kvsname"), msg.get("key"), msg.get("value"))
        else {
            return Err("put_needs_kvsname_key_and_value");
        };
        if kvs != self.config.kvsname {
            return Err("unknown_kvsname");
        }
        if key.is_empty() || key.len() >= KEYLEN_MAX {
            return Err("key_length_not_1_to_63");
        }
        if value.len() >= VALLEN_MAX {
            return Err("value_longer_than_1023");
        }
        if key.starts_with("PMI_") {
            return Err("keys_with_PMI_prefix_are_reserved");
        }
        if self.kvs.len() >= MAX_KVS_ENTRIES && !self.kvs.contains_key(key) {
            return Err("key_value_space_full");
        }
        self.kvs.insert(key.to_owned(), value.to_owned());
        Ok(())
    }

    fn get(&self, msg: &Message) -> Result<String, String> {
        let (Some(kvs), Some(key)) = (msg.get("kvsname"), msg.get("key")) else {
            return Err("get_needs_kvsname_and_key".into());
        };
        if kvs != self.config.kvsname {
            return Err("unknown_kvsname".into());
        }
        if key == PROCESS_MAPPING_KEY {
            return Ok(self.mapping.clone());
        }
        self.kvs
            .get(key)
            .cloned()
            .ok_or_else(|| format!("key_{key}_not_found"))
    }

    /// Completes the barrier when every rank is in it, or fails it when a rank can no
    /// longer enter it.
    fn settle_barrier(&mut self) {
        if self.barrier_count == 0 {
            return;
        }
        let reply = if self.barrier_count == self.config.size {
            Message::new("barrier_out")
        } else if let Some((r, state)) = ["aborted", "lost", "finalized"].iter().find_map(|want| {
            // Name the rank whose fate explains the failure best: an abort or a loss
            // rather than a rank that finalized after an earlier failed barrier.
            self.ranks
                .iter()
                .position(|s| s.finished() == Some(want))
                .map(|r| (r, *want))
        }) {
            log::warn!("PMI server: barrier cannot complete: rank {r} {state}");
            Message::new("barrier_out")
                .with("rc", -1)
                .with("msg", format!("rank_{r}_{state}"))
        } else {
            return;
        };
        let waiting: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().filter(|c| c.in_barrier).map(|_| i))
            .collect();
        for i in waiting {
            if let Some(c) = self.conns[i].as_mut() {
                c.in_barrier = false;
            }
            self.reply(i, reply.clone());
        }
        self.barrier_count = 0;
    }

    fn reply(&mut self, i: usize, msg: Message) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        let line = msg.to_line();
        log::trace!("PMI server > {}: {}", c.peer, line.trim_end());
        c.tx.extend_from_slice(line.as_bytes());
        self.flush(i);
    }

    fn flush(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        while !c.tx.is_empty() {
            match gsas_sys::fd::send(c.fd.as_fd(), &c.tx) {
                Ok(n) => {
                    c.tx.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.close(i, format!("sending to the process failed: {e}"));
                    return;
                }
            }
        }
        if c.tx.len() > MAX_UNSENT {
            self.close(
                i,
                format!("the process does not read its PMI responses ({MAX_UNSENT} bytes unsent)"),
            );
        }
    }

    /// Drops connection `i`, reporting a lost rank or a rejected peer.
    fn close(&mut self, i: usize, reason: String) {
        let Some(c) = self.conns[i].take() else {
            return;
        };
        let reason = if c.rx.pending().is_empty() {
            reason
        } else {
            format!(
                "{reason}, in the middle of a line: {}",
                excerpt_bytes(c.rx.pending())
            )
        };
        if c.in_barrier {
            self.barrier_count -= 1;
        }
        match c.rank {
            None => self.reject(c.peer, reason),
            Some(rank) => {
                if self.ranks[rank as usize] == (RankState::Active { conn: i }) {
                    // The launcher reports the PE's end (its status, or that it exited
                    // without finalize): this is its trace.
                    log::info!("PMI server: rank {rank} lost: {reason}");
                    self.ranks[rank as usize] = RankState::Lost;
                    self.events.push(Event::Lost { rank, reason });
                } else {
                    log::debug!("PMI server: connection of finished rank {rank} closed: {reason}");
                }
            }
        }
        self.settle_barrier();
    }
}
