//! The daemon's side of remote FORK: authenticate, start the PEs, report to the launcher.
//!
//! What it is: [`ForkServer`], the [`ForkHandler`] `gsas-atomicd` installs when its
//! configuration enables remote FORK. For every FORK it
//!
//! 1. reassembles the fragments (at most [`MAX_ASSEMBLIES`] requests in progress, each
//!    at most one [`super::request::MAX_BODY`]-sized request, forgotten after
//!    [`ASSEMBLY_TIMEOUT`]); every fragment but the last is answered with ACK;
//! 2. checks the whole request: header, HMAC-SHA256 with the cluster secret (constant-time
//!    comparison), the job key against the one in the datagrams' gsas header, the
//!    timestamp window and the nonce cache ([`super::replay`]), the node id, that the job
//!    is not running here already, and the number of jobs ([`ForkServerConfig::max_jobs`]);
//!    a refusal is answered with ERROR (the code says which class of problem, see
//!    [`super::request::RequestError::code`]), counted (`fork.refused.<reason>`) and logged
//!    with the sender's address;
//!
//!    the same request again from the same sender and job key (its nonce remembered, its
//!    MAC valid: the same bytes), or a fragment again of a request of several that was
//!    reassembled lately, is answered as the first time and starts nothing
//!    (`fork.repeated`): the launcher sends its last fragment again when the daemon's
//!    reliability state for it was lost, which happens when its peer slot is given to a
//!    newcomer between the request and its acknowledgement (see the service's peer index);
//!    a fragment that arrives twice with the same bytes is taken once;
//! 3. accepts (ACK) and hands the job to a thread of its own, which connects to the
//!    launcher's stream address, sends the Hello ([`super::stream`]), starts the PEs as
//!    the daemon's user and forwards their output and exit statuses.
//!
//! The PEs get the environment of the request (nothing of the daemon's own), then
//! `GSAS_SERVICE` (this daemon's control socket), `GSAS_NODE`, `GSAS_JOB_ID`,
//! `GSAS_JOB_KEY`, `PMI_PORT`/`PMI_ID` (the launcher's PMI server), and `GSAS_CONFIG`
//! (the daemon's cluster file) unless the request sets it; the request's working
//! directory; standard input from `/dev/null`; `PR_SET_PDEATHSIG(SIGKILL)`, so that a dead
//! daemon takes them down.
//!
//! The job thread ends the PEs (SIGTERM, SIGKILL after the request's grace) when the
//! launcher says so (Terminate, Kill), when the launcher's connection ends, and when one of
//! its PEs could not be started. Every wait in it is bounded: `poll(2)` for at most 10 ms
//! per turn, the connection attempt by [`ForkServerConfig::connect_timeout`], each write by
//! [`WRITE_TIMEOUT`] (a launcher that stops reading counts as gone).
//!
//! What it is not: a sandbox. The PEs run with the daemon's user id and privileges, so a
//! daemon with FORK enabled must run as the job's user or a dedicated unprivileged user,
//! never as root for other people's jobs; anyone who can read the secret file can run
//! commands as that user.
//!
//! Thread-safety: [`ForkServer`] is `Send` and lives in the service loop; each accepted
//! job runs on its own thread and shares only the counters and the set of running jobs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gsas_core::wire::{ErrorCode, Fragment};

use gsas_service::{ForkHandler, ForkProgress};
use gsas_transport::config;

use super::replay::{DEFAULT_CAPACITY, DEFAULT_WINDOW, ReplayError, ReplayGuard};
use super::request::{ForkRequest, HEADER_LEN, MAX_BODY, RequestError, TAG_LEN};
use super::secret::Secret;
use super::stream::{self, FrameReader, FrameType, STDERR, STDOUT};

/// Requests being reassembled at one time.
pub const MAX_ASSEMBLIES: usize = 16;
/// A request whose fragments do not all arrive within this time is forgotten.
pub const ASSEMBLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest blocking write to the launcher.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request (header, body, MAC).
const MAX_REQUEST: usize = HEADER_LEN + MAX_BODY + TAG_LEN;
/// Output read from a PE per frame.
const CHUNK: usize = 64 * 1024;
/// One turn of a job thread's loop.
const TURN: Duration = Duration::from_millis(10);
/// Reads per output pipe and turn.
const CHUNKS_PER_TURN: usize = 4;
/// Reads of an output pipe when its PE has ended (up to 1 MiB).
const CHUNKS_AT_EXIT: usize = 16;
/// After the last PE ended: how long output still open (grandchildren) is forwarded.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// How a [`ForkServer`] is set up.
#[derive(Debug, Clone)]
pub struct ForkServerConfig {
    /// The node this daemon serves; requests for other nodes are refused.
    pub node: u16,
    /// The cluster secret.
    pub secret: Secret,
    /// The daemon's control socket (`GSAS_SERVICE` of the PEs).
    pub control_socket: PathBuf,
    /// The daemon's cluster file (`GSAS_CONFIG` of the PEs), if it has one.
    pub config_file: Option<PathBuf>,
    /// Accepted distance between a request's timestamp and this machine's clock.
    pub window: Duration,
    /// Longest wait for the connection to the launcher's stream address.
    pub connect_timeout: Duration,
    /// Most jobs with PEs started here at one time.
    pub max_jobs: usize,
}

impl ForkServerConfig {
    /// Defaults: a 120 s window, 10 s to connect to the launcher, at most 64 jobs, no
    /// cluster file.
    pub fn new(node: u16, secret: Secret, control_socket: PathBuf) -> Self {
        ForkServerConfig {
            node,
            secret,
            control_socket,
            config_file: None,
            window: DEFAULT_WINDOW,
            connect_timeout: Duration::from_secs(10),
            max_jobs: 64,
        }
    }
}

/// Reasons a FORK is refused, as counter names (`fork.refused.<name>`).
const REASONS: [&str; 9] = [
    "malformed",
    "bad_mac",
    "version",
    "too_large",
    "wrong_key",
    "stale",
    "replay",
    "wrong_node",
    "busy",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    Malformed,
    BadMac,
    Version,
    TooLarge,
    WrongKey,
    Stale,
    Replay,
    WrongNode,
    Busy,
}

/// Who sent a request whose nonce the daemon remembers, and what it was answered.
#[derive(Clone, Copy, Debug)]
struct FirstSeen {
    from: SocketAddr,
    job_key: u64,
    /// `None` while the request is being checked.
    answer: Option<Result<(), ErrorCode>>,
}

/// Counters shared with the job threads.
#[derive(Debug, Default)]
struct Shared {
    accepted: AtomicU64,
    repeated: AtomicU64,
    refused: [AtomicU64; REASONS.len()],
    pes_started: AtomicU64,
    start_failures: AtomicU64,
    jobs_lost: AtomicU64,
    jobs: Mutex<HashSet<u64>>,
}

impl Shared {
    fn jobs(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A request of fragments: the sender, the job key and the request's base address.
type RequestId = (SocketAddr, u64, u64);

struct Assembly {
    buf: Vec<u8>,
    /// Fragments received: offset -> length.
    pieces: BTreeMap<usize, usize>,
    received: usize,
    started: Instant,
}

/// The FORK handler of a daemon; see the [module docs](self).
pub struct ForkServer {
    cfg: ForkServerConfig,
    replay: ReplayGuard<FirstSeen>,
    assemblies: HashMap<RequestId, Assembly>,
    /// Requests of several fragments reassembled lately, with their answer: a fragment of
    /// one coming again (its acknowledgement was lost with the sender's slot) gets that
    /// answer (at most [`MAX_ASSEMBLIES`] of them, each for [`ASSEMBLY_TIMEOUT`]).
    completed: HashMap<RequestId, (Instant, Result<(), ErrorCode>)>,
    shared: Arc<Shared>,
    refusals: u64,
}

impl std::fmt::Debug for ForkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkServer")
            .field("node", &self.cfg.node)
            .field("jobs", &self.shared.jobs().len())
            .finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl ForkServer {
    /// A handler with `cfg`.
    pub fn new(cfg: ForkServerConfig) -> ForkServer {
        ForkServer {
            replay: ReplayGuard::new(cfg.window, DEFAULT_CAPACITY),
            cfg,
            assemblies: HashMap::new(),
            completed: HashMap::new(),
            shared: Arc::new(Shared::default()),
            refusals: 0,
        }
    }

    fn refuse(
        &mut self,
        from: SocketAddr,
        reason: Reason,
        why: &str,
        code: ErrorCode,
    ) -> ErrorCode {
        self.shared.refused[reason as usize].fetch_add(1, Ordering::Relaxed);
        self.refusals += 1;
        // Every refusal is counted; the log is kept readable under a flood.
        if self.refusals <= 32 || self.refusals.is_power_of_two() {
            log::warn!(
                "FORK from {from} refused: {why} ({} refused so far)",
                self.refusals
            );
        }
        code
    }

    /// Takes one fragment; returns the whole request once every fragment is there.
    fn assemble(
        &mut self,
        from: SocketAddr,
        job_key: u64,
        frag: Fragment,
        data: &[u8],
    ) -> Result<Option<Vec<u8>>, ErrorCode> {
        let total = frag.total as usize;
        if total > MAX_REQUEST {
            let why = format!("request of {total} bytes (at most {MAX_REQUEST})");
            return Err(self.refuse(from, Reason::TooLarge, &why, ErrorCode::TooLarge));
        }
        if frag.offset == 0 && data.len() == total {
            return Ok(Some(data.to_vec()));
        }
        let now = Instant::now();
        self.assemblies
            .retain(|_, a| now.duration_since(a.started) < ASSEMBLY_TIMEOUT);
        let key = (from, job_key, frag.base.raw());
        if !self.assemblies.contains_key(&key) && self.assemblies.len() >= MAX_ASSEMBLIES {
            let why = format!("{MAX_ASSEMBLIES} requests are being reassembled already");
            return Err(self.refuse(from, Reason::Busy, &why, ErrorCode::Busy));
        }
        let a = self.assemblies.entry(key).or_insert_with(|| Assembly {
            buf: vec![0; total],
            pieces: BTreeMap::new(),
            received: 0,
            started: now,
        });
        let start = frag.offset as usize;
        let end = start.saturating_add(data.len());
        if a.buf.len() == total && a.pieces.get(&start) == Some(&data.len()) {
            if a.buf[start..end] == *data {
                // The same fragment again (its acknowledgement was lost with the sender's
                // slot): taken once.
                return Ok(None);
            }
        } else {
            let before = a.pieces.range(..=start).next_back();
            let after = a.pieces.range(start..).next();
            let overlaps = before.is_some_and(|(&o, &l)| o + l > start)
                || after.is_some_and(|(&o, _)| o < end);
            if a.buf.len() == total && end <= total && !overlaps {
                a.pieces.insert(start, data.len());
                a.buf[start..end].copy_from_slice(data);
                a.received += data.len();
                return Ok(if a.received < total {
                    None
                } else {
                    self.assemblies.remove(&key).map(|a| a.buf)
                });
            }
        }
        self.assemblies.remove(&key);
        let why = "fragments that do not fit together";
        Err(self.refuse(from, Reason::Malformed, why, ErrorCode::Malformed))
    }

    /// Checks a whole request and starts its job.
    fn accept(&mut self, from: SocketAddr, job_key: u64, bytes: &[u8]) -> Result<(), ErrorCode> {
        let req = match ForkRequest::parse(bytes, &self.cfg.secret) {
            Ok(r) => r,
            Err(e) => {
                let reason = match e {
                    RequestError::BadMac => Reason::BadMac,
                    RequestError::BadVersion(_) => Reason::Version,
                    RequestError::TooLarge(_) => Reason::TooLarge,
                    _ => Reason::Malformed,
                };
                return Err(self.refuse(from, reason, &e.to_string(), e.code()));
            }
        };
        if req.job_key != job_key {
            let why = "the request's job key differs from its datagrams' key";
            return Err(self.refuse(from, Reason::WrongKey, why, ErrorCode::BadKey));
        }
        let first = FirstSeen {
            from,
            job_key,
            answer: None,
        };
        if let Err(e) = self
            .replay
            .check(req.nonce, req.timestamp_ms, now_ms(), first)
        {
            if let Some(answer) = self.repeat(&req.nonce, from, job_key, e) {
                return answer;
            }
            let (reason, code) = match e {
                ReplayError::Stale { .. } => (Reason::Stale, ErrorCode::BadKey),
                ReplayError::Replayed => (Reason::Replay, ErrorCode::BadKey),
                ReplayError::Full => (Reason::Busy, ErrorCode::Busy),
            };
            return Err(self.refuse(from, reason, &e.to_string(), code));
        }
        let nonce = req.nonce;
        let answer = self.start(from, req);
        if let Some(seen) = self.replay.seen_mut(&nonce) {
            seen.answer = Some(answer);
        }
        answer
    }

    /// The answer to a request whose nonce was seen before (`e` is
    /// [`ReplayError::Replayed`]), when it comes again from the sender and job key that
    /// sent it first and was answered: the same answer (counted in `fork.repeated`).
    /// `None`: a replay, refused by the caller.
    fn repeat(
        &mut self,
        nonce: &[u8; 16],
        from: SocketAddr,
        job_key: u64,
        e: ReplayError,
    ) -> Option<Result<(), ErrorCode>> {
        if e != ReplayError::Replayed {
            return None;
        }
        let first = self.replay.seen(nonce)?;
        if first.from != from || first.job_key != job_key {
            return None;
        }
        let answer = first.answer?;
        let n = self.shared.repeated.fetch_add(1, Ordering::Relaxed) + 1;
        // Counted always; logged so that a flood of copies keeps the log readable.
        if n <= 32 || n.is_power_of_two() {
            log::info!(
                "FORK from {from}: the same request again, answered as before ({answer:?}; {n} so far)"
            );
        }
        Some(answer)
    }

    /// Starts the job of an authenticated, fresh request, unless it is for another node,
    /// runs here already or too many jobs run.
    fn start(&mut self, from: SocketAddr, req: ForkRequest) -> Result<(), ErrorCode> {
        if req.node != self.cfg.node {
            let why = format!(
                "the request is for node {}, this daemon serves node {}",
                req.node, self.cfg.node
            );
            return Err(self.refuse(from, Reason::WrongNode, &why, ErrorCode::HostFailure));
        }
        {
            let mut jobs = self.shared.jobs();
            if jobs.contains(&req.job_id) {
                drop(jobs);
                let why = format!("job {:016x} has PEs here already", req.job_id);
                return Err(self.refuse(from, Reason::Busy, &why, ErrorCode::HostFailure));
            }
            if jobs.len() >= self.cfg.max_jobs {
                drop(jobs);
                let why = format!("{} jobs run here already", self.cfg.max_jobs);
                return Err(self.refuse(from, Reason::Busy, &why, ErrorCode::Busy));
            }
            jobs.insert(req.job_id);
        }
        let job_id = req.job_id;
        log::info!(
            "FORK from {from} accepted: job {job_id:016x}, {} PE(s) (ranks {}..={} of {}) of {}",
            req.spec.ranks.len(),
            req.spec.ranks.first().copied().unwrap_or(0),
            req.spec.ranks.last().copied().unwrap_or(0),
            req.spec.size,
            Path::new(&req.spec.argv[0]).display()
        );
        let job = JobThread {
            req,
            secret: self.cfg.secret.clone(),
            node: self.cfg.node,
            control_socket: self.cfg.control_socket.clone(),
            config_file: self.cfg.config_file.clone(),
            connect_timeout: self.cfg.connect_timeout,
            shared: Arc::clone(&self.shared),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("gsas-fork-{job_id:016x}"))
            .spawn(move || job.run());
        if let Err(e) = spawned {
            self.shared.jobs().remove(&job_id);
            log::error!("FORK for job {job_id:016x}: cannot start a thread: {e}");
            return Err(ErrorCode::HostFailure);
        }
        self.shared.accepted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl ForkHandler for ForkServer {
    fn fork(
        &mut self,
        from: SocketAddr,
        job_key: u64,
        frag: Fragment,
        data: &[u8],
    ) -> Result<ForkProgress, ErrorCode> {
        let whole = frag.offset == 0 && data.len() == frag.total as usize;
        let key = (from, job_key, frag.base.raw());
        if !whole {
            let now = Instant::now();
            self.completed
                .retain(|_, (at, _)| now.duration_since(*at) < ASSEMBLY_TIMEOUT);
            if let Some(&(_, answer)) = self.completed.get(&key) {
                self.shared.repeated.fetch_add(1, Ordering::Relaxed);
                return answer.map(|()| ForkProgress::Accepted);
            }
        }
        let Some(bytes) = self.assemble(from, job_key, frag, data)? else {
            return Ok(ForkProgress::Fragment);
        };
        let answer = self.accept(from, job_key, &bytes);
        if !whole {
            if self.completed.len() >= MAX_ASSEMBLIES {
                let oldest = self.completed.iter().min_by_key(|(_, (at, _))| *at);
                if let Some(k) = oldest.map(|(k, _)| *k) {
                    self.completed.remove(&k);
                }
            }
            self.completed.insert(key, (Instant::now(), answer));
        }
        answer.map(|()| ForkProgress::Accepted)
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let s = &self.shared;
        let mut out = vec![
            (
                "fork.accepted".to_owned(),
                s.accepted.load(Ordering::Relaxed),
            ),
            (
                "fork.repeated".to_owned(),
                s.repeated.load(Ordering::Relaxed),
            ),
            ("fork.jobs_active".to_owned(), s.jobs().len() as u64),
            (
                "fork.pes_started".to_owned(),
                s.pes_started.load(Ordering::Relaxed),
            ),
            (
                "fork.start_failures".to_owned(),
                s.start_failures.load(Ordering::Relaxed),
            ),
            (
                "fork.jobs_lost".to_owned(),
                s.jobs_lost.load(Ordering::Relaxed),
            ),
        ];
        for (i, name) in REASONS.iter().enumerate() {
            out.push((
                format!("fork.refused.{name}"),
                s.refused[i].load(Ordering::Relaxed),
            ));
        }
        out
    }
}

/// One accepted job, run on its own thread.
struct JobThread {
    req: ForkRequest,
    secret: Secret,
    node: u16,
    control_socket: PathBuf,
    config_file: Option<PathBuf>,
    connect_timeout: Duration,
    shared: Arc<Shared>,
}

/// An output pipe of a PE.
enum Pipe {
    Out(ChildStdout),
    Err(ChildStderr),
}

impl Pipe {
    fn stream(&self) -> u8 {
        match self {
            Pipe::Out(_) => STDOUT,
            Pipe::Err(_) => STDERR,
        }
    }

    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Pipe::Out(p) => p.as_fd(),
            Pipe::Err(p) => p.as_fd(),
        }
    }

    fn raw(&self) -> i32 {
        self.fd().as_raw_fd()
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Pipe::Out(p) => p.read(buf),
            Pipe::Err(p) => p.read(buf),
        }
    }
}

struct Pe {
    rank: u32,
    child: Child,
    pipes: Vec<Pipe>,
    done: bool,
}

/// The launcher connection of a job thread; `None` once it failed.
struct Link {
    tcp: Option<TcpStream>,
    reader: FrameReader,
    job: u64,
}

impl Link {
    fn send(&mut self, ty: FrameType, stream_no: u8, rank: u32, payload: &[u8]) {
        let Some(tcp) = self.tcp.as_mut() else {
            return;
        };
        let frame = stream::encode(ty, stream_no, rank, payload);
        if let Err(e) = tcp.write_all(&frame) {
            log::warn!(
                "job {:016x}: writing to the launcher failed ({e}); ending the job's PEs",
                self.job
            );
            self.tcp = None;
        }
    }
}

/// How the PEs of a job are being ended.
#[derive(Clone, Copy, Debug)]
enum Ending {
    Running,
    Terminating { kill_at: Instant },
    Killed,
}

impl JobThread {
    fn run(self) {
        let job = self.req.job_id;
        let started = self.run_inner();
        if !started {
            self.shared.jobs_lost.fetch_add(1, Ordering::Relaxed);
        }
        self.shared.jobs().remove(&job);
        log::info!("job {job:016x}: every PE started here has ended");
    }

    /// Returns false when the launcher could not be reached (no PE was started).
    fn run_inner(&self) -> bool {
        let req = &self.req;
        let spec = &req.spec;
        let tcp = match TcpStream::connect_timeout(&spec.stream, self.connect_timeout) {
            Ok(t) => t,
            Err(e) => {
                log::warn!(
                    "job {:016x}: cannot connect to the launcher at {} ({e}); no PE started",
                    req.job_id,
                    spec.stream
                );
                return false;
            }
        };
        let _ = tcp.set_nodelay(true);
        if let Err(e) = tcp.set_write_timeout(Some(WRITE_TIMEOUT)) {
            log::warn!("job {:016x}: setting the write timeout: {e}", req.job_id);
        }
        let mut link = Link {
            tcp: Some(tcp),
            reader: FrameReader::new(),
            job: req.job_id,
        };
        let hello =
            stream::hello_payload(&self.secret, req.job_id, req.job_key, self.node, &req.nonce);
        link.send(FrameType::Hello, 0, 0, &hello);
        // The clone shares the socket (and its blocking mode): it is read only when poll(2)
        // says it is readable, so that writes stay blocking (bounded by WRITE_TIMEOUT).
        let reader = link.tcp.as_ref().and_then(|t| t.try_clone().ok());
        let grace = Duration::from_millis(u64::from(spec.grace_ms));
        let mut ending = Ending::Running;
        let mut pes = Vec::with_capacity(spec.ranks.len());
        for &rank in &spec.ranks {
            if !matches!(ending, Ending::Running) {
                break;
            }
            match self.spawn(rank) {
                Ok(pe) => {
                    self.shared.pes_started.fetch_add(1, Ordering::Relaxed);
                    link.send(FrameType::Started, 0, rank, &pe.child.id().to_le_bytes());
                    pes.push(pe);
                }
                Err(msg) => {
                    self.shared.start_failures.fetch_add(1, Ordering::Relaxed);
                    log::warn!("job {:016x}: {msg}", req.job_id);
                    link.send(FrameType::StartFailed, 0, rank, msg.as_bytes());
                    terminate(&mut pes);
                    ending = Ending::Terminating {
                        kill_at: Instant::now() + grace,
                    };
                }
            }
        }
        self.supervise(&mut pes, &mut link, reader, ending, grace);
        link.send(FrameType::Done, 0, 0, &[]);
        true
    }

    /// Starts one PE.
    fn spawn(&self, rank: u32) -> Result<Pe, String> {
        let req = &self.req;
        let spec = &req.spec;
        let program = resolve(&spec.argv[0], &spec.cwd, &spec.env)
            .map_err(|why| format!("PE {rank} cannot be started on node {}: {why}", self.node))?;
        let mut cmd = Command::new(&program);
        cmd.args(&spec.argv[1..])
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in crate::oshrun::pe_env(
            self.control_socket.as_os_str(),
            req.job_id,
            req.job_key,
            self.node,
        ) {
            cmd.env(k, v);
        }
        for (k, v) in crate::pmi::tcp_env(&spec.pmi.to_string(), rank) {
            cmd.env(k, v);
        }
        let has_config = spec
            .env
            .iter()
            .any(|(k, _)| k.as_bytes() == config::GSAS_CONFIG.name.as_bytes());
        if let (Some(file), false) = (&self.config_file, has_config) {
            cmd.env(config::GSAS_CONFIG.name, file);
        }
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the hook runs in the forked child before exec and calls only prctl,
        // getppid, _exit and pthread_sigmask, which are async-signal-safe; it touches no
        // memory of the parent. (The daemon reads SIGTERM and SIGINT from a signalfd with
        // them blocked; the PEs must not inherit the mask.)
        unsafe {
            cmd.pre_exec(move || {
                gsas_sys::process::child_clear_signal_mask()?;
                gsas_sys::process::child_set_pdeathsig(parent, libc::SIGKILL)
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "PE {rank} cannot be started on node {}: {}: {e}",
                self.node,
                program.display()
            )
        })?;
        let mut pipes = Vec::new();
        if let Some(o) = child.stdout.take() {
            pipes.push(Pipe::Out(o));
        }
        if let Some(e) = child.stderr.take() {
            pipes.push(Pipe::Err(e));
        }
        for p in &pipes {
            if let Err(e) = gsas_sys::socket::set_nonblocking(p.fd(), true) {
                log::warn!("PE {rank}: output pipe: {e}");
            }
        }
        log::debug!(
            "job {:016x}: PE {rank} started as pid {}",
            req.job_id,
            child.id()
        );
        Ok(Pe {
            rank,
            child,
            pipes,
            done: false,
        })
    }

    /// The job's loop: forwards output, reports exits, obeys the launcher; returns when
    /// every PE has ended and its output is forwarded (bounded after the last exit).
    fn supervise(
        &self,
        pes: &mut [Pe],
        link: &mut Link,
        mut reader: Option<TcpStream>,
        mut ending: Ending,
        grace: Duration,
    ) {
        let job = self.req.job_id;
        let mut buf = vec![0u8; CHUNK];
        let mut all_done_at: Option<Instant> = None;
        loop {
            // Block (bounded) until a pipe or the launcher has something.
            let mut fds: Vec<libc::pollfd> = pes
                .iter()
                .flat_map(|p| p.pipes.iter())
                .map(|p| libc::pollfd {
                    fd: p.raw(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            if let Some(r) = &reader {
                fds.push(libc::pollfd {
                    fd: r.as_fd().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            // SAFETY: `fds` is a valid array of pollfd for the call; the timeout is bounded.
            let ready = unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    TURN.as_millis() as libc::c_int,
                )
            };
            let launcher_ready =
                ready > 0 && reader.is_some() && fds.last().is_some_and(|f| f.revents != 0);
            for pe in pes.iter_mut() {
                forward_output(pe, link, &mut buf, CHUNKS_PER_TURN);
            }
            // Orders from the launcher: one read, which poll(2) said will not block.
            let mut lost = false;
            if let Some(r) = reader.as_mut() {
                if launcher_ready {
                    match r.read(&mut buf) {
                        Ok(0) => lost = true,
                        Ok(n) => link.reader.push(&buf[..n]),
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => lost = true,
                    }
                }
                loop {
                    match link.reader.next_frame() {
                        Ok(Some(f)) => match f.ty {
                            FrameType::Terminate => {
                                let g = stream::parse_u32(&f.payload)
                                    .map_or(grace, |ms| Duration::from_millis(u64::from(ms)));
                                if matches!(ending, Ending::Running) {
                                    log::info!("job {job:016x}: the launcher ends the job");
                                    terminate(pes);
                                    ending = Ending::Terminating {
                                        kill_at: Instant::now() + g,
                                    };
                                }
                            }
                            FrameType::Kill => {
                                kill(pes);
                                ending = Ending::Killed;
                            }
                            FrameType::Report => ask_reports(pes),
                            other => log::debug!("job {job:016x}: ignored frame {other:?}"),
                        },
                        Ok(None) => break,
                        Err(e) => {
                            log::warn!("job {job:016x}: launcher stream: {e}");
                            lost = true;
                            break;
                        }
                    }
                }
            }
            if lost || (link.tcp.is_none() && reader.is_some()) {
                reader = None;
                link.tcp = None;
                if matches!(ending, Ending::Running) {
                    log::warn!(
                        "job {job:016x}: the launcher's connection ended; ending the job's PEs"
                    );
                    terminate(pes);
                    ending = Ending::Terminating {
                        kill_at: Instant::now() + grace,
                    };
                }
            }
            if let Ending::Terminating { kill_at } = ending {
                if Instant::now() >= kill_at {
                    kill(pes);
                    ending = Ending::Killed;
                }
            }
            // Exits, each after the PE's output that is there already.
            for pe in pes.iter_mut().filter(|p| !p.done) {
                match pe.child.try_wait() {
                    Ok(Some(status)) => {
                        pe.done = true;
                        // What the PE wrote before it ended goes first (bounded: a
                        // descendant may keep the pipe open and writing).
                        forward_output(pe, link, &mut buf, CHUNKS_AT_EXIT);
                        log::debug!("job {job:016x}: PE {} ended: {status}", pe.rank);
                        link.send(
                            FrameType::Exited,
                            0,
                            pe.rank,
                            &stream::exited_payload(pe.child.id(), status.into_raw()),
                        );
                    }
                    Ok(None) => {}
                    Err(e) => {
                        log::warn!("job {job:016x}: waiting for PE {}: {e}", pe.rank);
                        pe.done = true;
                        link.send(
                            FrameType::Exited,
                            0,
                            pe.rank,
                            &stream::exited_payload(pe.child.id(), libc::SIGKILL),
                        );
                    }
                }
            }
            if pes.iter().all(|p| p.done) {
                let at = *all_done_at.get_or_insert_with(Instant::now);
                let open = pes.iter().any(|p| !p.pipes.is_empty());
                if !open || at.elapsed() >= DRAIN_AFTER_EXIT {
                    return;
                }
            }
        }
    }
}

/// Forwards what `pe`'s pipes hold now, at most `chunks` reads per pipe (a PE that writes
/// without pause must not starve the loop); closes pipes at end of file.
fn forward_output(pe: &mut Pe, link: &mut Link, buf: &mut [u8], chunks: usize) {
    let rank = pe.rank;
    pe.pipes.retain_mut(|p| {
        for _ in 0..chunks {
            match p.read(buf) {
                Ok(0) => return false,
                Ok(n) => link.send(FrameType::Output, p.stream(), rank, &buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    });
}

fn terminate(pes: &mut [Pe]) {
    for p in pes.iter().filter(|p| !p.done) {
        if let Err(e) = gsas_sys::process::kill(p.child.id(), libc::SIGTERM) {
            log::warn!("SIGTERM to PE {} (pid {}): {e}", p.rank, p.child.id());
        }
    }
}

/// SIGQUIT to every PE that handles it (a gsas PE prints where it waits); a PE without a
/// handler (the library not initialized yet) would die of it, so it is left alone.
fn ask_reports(pes: &mut [Pe]) {
    for p in pes.iter().filter(|p| !p.done) {
        let pid = p.child.id();
        if !gsas_sys::process::catches_signal(pid, libc::SIGQUIT) {
            log::info!(
                "PE {} (pid {pid}) has no SIGQUIT handler: not asked",
                p.rank
            );
        } else if let Err(e) = gsas_sys::process::kill(pid, libc::SIGQUIT) {
            log::warn!("SIGQUIT to PE {} (pid {pid}): {e}", p.rank);
        }
    }
}

fn kill(pes: &mut [Pe]) {
    for p in pes.iter_mut().filter(|p| !p.done) {
        if let Err(e) = p.child.kill() {
            log::warn!("SIGKILL to PE {} (pid {}): {e}", p.rank, p.child.id());
        }
    }
}

/// Finds the program the way the launcher would on this machine: a name with `/` is taken
/// relative to the working directory, a plain name is searched on the request's `PATH`.
fn resolve(program: &OsStr, cwd: &Path, env: &[(OsString, OsString)]) -> Result<PathBuf, String> {
    let p = Path::new(program);
    if program.as_bytes().contains(&b'/') {
        let full = cwd.join(p);
        return crate::oshrun::args::resolve_program(full.as_os_str(), None).map_err(|e| e.0);
    }
    let path = env
        .iter()
        .find(|(k, _)| k.as_bytes() == b"PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PATH"));
    crate::oshrun::args::resolve_program(program, path.as_deref()).map_err(|e| e.0)
}

#[cfg(test)]
mod tests;
