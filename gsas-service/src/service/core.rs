//! The service loop: job table, control connections, serving the network (UDP or Exanet)
//! and rings, polling.
//!
//! See the [module docs](super) for the behaviour. Internals: one [`Core`] owns every
//! descriptor and the gsas-core engine; [`serve_port`] serves one transport (the network or a ring)
//! with the same code; replies that cannot be sent at once (window or ring full) are
//! queued per transport, and no new request is taken from that transport until its queue
//! has drained, so a reply is never lost and memory stays bounded.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{self, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gsas_core::reliable::{PeerEvent, RefusalReason};
use gsas_core::service::{Prepared, Segment as EngineSegment, Service as Engine};
use gsas_core::transport::{Transport, TransportError};
use gsas_core::wire::{
    ControlCode, ErrorCode, PacketType, Request, RequestRepr, SenderId, emit_reply_header,
};

use crate::bell::{Bell, BellRef, slot_offset};
use crate::poll::monotonic_ns;
use crate::shm::{Segment, ShmError, ShmMemory, recv_fds, send_fds};
use crate::transport::exanet::{HEADER_LEN as EXA_HEADER_LEN, WakeLine};
use crate::transport::net::{NetAddr, NetPeer, NetTransport};
use crate::transport::shmring::{RingConfig, RingPeer, ShmRing};
use crate::transport::udp::{UdpConfig, UdpTransport};

use super::net::{OwnedReliable, reliable_config};
use super::peers::{JobIndex, job_share};
use super::proto::{
    ControlReply, ControlRequest, ExanetInfo, JoinInfo, MAX_MESSAGE, SEG_DATA, SEG_HEAP, SEG_RING,
    SEG_SYNC, SEGMENTS, ServiceInfo,
};
use super::socket::{self, PeerCred};
use super::stats::{Counters, Gauges};
use super::sys::{EventFd, SignalFd};
use super::{ForkHandler, ServiceConfig, ServiceError, UidPolicy, Wake};

/// Frames in flight per UDP peer.
pub(crate) const UDP_WINDOW: usize = 32;
/// Segments the engine can hold (over all jobs).
const MAX_SEGMENTS: usize = 4096;
/// Frame buffers of the service's reliability layer.
const UDP_FRAMES: usize = 256;
/// Requests served from one transport per loop turn before the others get a turn.
const BUDGET: usize = 256;
/// Queued replies refused in a row (their peers' windows, or the frame pool, full) after
/// which a pass over the queue stops.
const BLOCKED_SCAN: usize = 64;
/// Largest segment (the reach of a 40-bit offset).
const MAX_SEGMENT: u64 = 1 << 40;
/// Largest sync segment.
const MAX_SYNC: u64 = 16 << 20;
/// Largest ring slot count and total ring segment.
const MAX_RING_BYTES: u64 = 64 << 20;
/// How often control sockets are checked while the loop is busy.
const CONTROL_EVERY: Duration = Duration::from_millis(1);
/// Bound of a block while reliability timers are pending.
const BLOCK_TIMERS: Duration = Duration::from_millis(1);
/// Bound of a block when idle.
const BLOCK_IDLE: Duration = Duration::from_millis(100);
/// How long a reply on a control connection may wait for room.
const CONTROL_SEND_TIMEOUT: Duration = Duration::from_millis(500);
/// Jobs whose end is remembered (for the message a late request gets).
const TOMBSTONES: usize = 64;
/// How often idle peers are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Refusals of one kind logged at warn one by one before only powers of two are.
const LOGGED_REFUSALS: u64 = 8;

type Udp = OwnedReliable<NetTransport, UDP_WINDOW, JobIndex>;
type EngineT = Engine<ShmMemory, MAX_SEGMENTS>;

/// A PE of a job.
struct Pe {
    conn: usize,
    pid: u32,
    left: bool,
    /// Segments 0..=2 (registered with the engine).
    segments: [Option<Arc<Segment>>; 3],
    /// The PE's slot in the doorbell page (its bell), if one was free.
    bell: Option<u32>,
}

/// A job with PEs on this node.
struct Job {
    id: u64,
    key: u64,
    /// The engine's job number.
    number: u32,
    uid: u32,
    npes: u32,
    pes: BTreeMap<u16, Pe>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnState {
    Fresh,
    Joined { key: u64, rank: u16 },
    Left,
}

struct Conn {
    fd: OwnedFd,
    cred: PeerCred,
    state: ConnState,
}

/// A PE's ring and the replies waiting for room in it.
struct RingPort {
    key: u64,
    pe: u16,
    ring: ShmRing,
    pending: VecDeque<Deferred<RingPeer>>,
}

/// The page PEs look at to decide whether to ring the eventfd; it also holds the PEs'
/// bells ([`crate::bell`]), one slot per joined PE.
struct Doorbell {
    page: Arc<Segment>,
    event: EventFd,
    /// Which bell slots belong to a PE.
    taken: Vec<bool>,
}

/// Most bells in the doorbell page (512 KiB of page).
const MAX_BELLS: usize = 1 << 16;

impl Doorbell {
    /// Takes a free bell slot and clears the bell's announcements.
    fn take_bell(&mut self) -> Option<u32> {
        let slot = self.taken.iter().position(|t| !t)?;
        let n = u32::try_from(slot).ok()?;
        Bell::at(&self.page, slot_offset(n))?.reset();
        self.taken[slot] = true;
        Some(n)
    }

    fn release_bell(&mut self, slot: u32) {
        if let Some(t) = self.taken.get_mut(slot as usize) {
            *t = false;
        }
    }

    fn bell(&self, slot: u32) -> Option<BellRef> {
        BellRef::new(Arc::clone(&self.page), slot_offset(slot))
    }

    fn word(&self) -> &AtomicU32 {
        // Offset 0 of a mapping of at least one page: always valid and aligned.
        self.page
            .atomic_u32(0)
            .expect("doorbell page holds its first word")
    }
}

pub(crate) struct Core {
    cfg: ServiceConfig,
    listener: OwnedFd,
    udp: Udp,
    udp_addr: SocketAddr,
    udp_pending: VecDeque<Deferred<NetPeer>>,
    /// The Exanet endpoint's interrupt line (services on Exanet).
    wake_line: Option<WakeLine>,
    engine: Box<EngineT>,
    conns: Vec<Option<Conn>>,
    jobs: HashMap<u64, Job>,
    tombstones: VecDeque<(u64, String)>,
    next_number: u32,
    memory_used: u64,
    rings: Vec<RingPort>,
    doorbell: Doorbell,
    wake: Arc<Wake>,
    signals: Option<SignalFd>,
    fork: Option<Box<dyn ForkHandler>>,
    counters: Counters,
    scratch: Vec<u8>,
    msg: Vec<u8>,
    uid: u32,
    pid: u32,
    max_reply: usize,
    /// Total bytes of segments allowed, and where the limit comes from (for messages).
    memory_limit: (u64, &'static str),
    /// When idle peers were last looked for.
    last_sweep: Instant,
    /// Refusals of the network layer seen for logging: unknown job, and full shares.
    refusals_logged: [u64; 2],
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
    let context = context.into();
    move |source| ServiceError::Io { context, source }
}

fn shm_err(context: impl Into<String>) -> impl FnOnce(ShmError) -> ServiceError {
    let context = context.into();
    move |source| ServiceError::Shm { context, source }
}

/// `64.0 MiB`, for messages.
fn show(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn seg_name(s: u8) -> &'static str {
    match s {
        SEG_HEAP => "heap",
        SEG_DATA => "data",
        SEG_SYNC => "sync",
        SEG_RING => "ring",
        _ => "?",
    }
}

/// Bytes of physical memory (`u64::MAX` if unknown).
pub fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads system parameters.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && size > 0 {
        (pages as u64).saturating_mul(size as u64)
    } else {
        u64::MAX
    }
}

/// The service's network layer: UDP, or its Exanet endpoint 0 (with its interrupt line)
/// plus the UDP socket for host actions (ping, remote FORK).
fn new_udp(cfg: &ServiceConfig) -> Result<(Udp, Option<WakeLine>), ServiceError> {
    let udp = UdpTransport::bind(
        cfg.udp_bind,
        UdpConfig {
            mtu: cfg.udp_mtu,
            ..UdpConfig::default()
        },
    )
    .map_err(io_err(format!("{}: UDP socket", cfg.name)))?;
    let (net, line, what) = match &cfg.exanet {
        None => (NetTransport::Udp(udp), None, "UDP"),
        Some(site) => {
            // Frames of the same size as over UDP: the Exanet packet's header is as long
            // as the UDP one.
            let (link, line) = site
                .open(0, cfg.udp_mtu.max(EXA_HEADER_LEN + 65), true)
                .map_err(|e| ServiceError::Config(format!("{}: {e}", cfg.name)))?;
            let net = NetTransport::Exanet {
                link: Box::new(link),
                udp: Some(udp),
            };
            (net, line, "Exanet")
        }
    };
    let rc = reliable_config(cfg.deadline);
    let layer = OwnedReliable::with_index(
        net,
        rc,
        cfg.max_peers.max(1),
        UDP_FRAMES,
        JobIndex::default(),
    )
    .map_err(|e| ServiceError::Config(format!("reliability layer over {what}: {e}")))?;
    Ok((layer, line))
}

impl Core {
    pub(crate) fn bind(cfg: ServiceConfig) -> Result<Core, ServiceError> {
        if cfg.max_pes == 0 {
            return Err(ServiceError::Config("max_pes must be at least 1".into()));
        }
        if let Some(parent) = cfg.socket_path.parent() {
            if !parent.as_os_str().is_empty() && !parent.is_dir() {
                std::fs::create_dir_all(parent).map_err(io_err(format!(
                    "creating the socket directory {}",
                    parent.display()
                )))?;
            }
        }
        let (udp, wake_line) = new_udp(&cfg)?;
        let udp_addr = udp
            .inner()
            .udp()
            .map_or(cfg.udp_bind, UdpTransport::local_addr);
        let listener = socket::listen(&cfg.socket_path, cfg.socket_mode).map_err(io_err(
            format!("{}: control socket {}", cfg.name, cfg.socket_path.display()),
        ))?;
        let bells = cfg.max_pes.min(MAX_BELLS);
        let page = Segment::create(
            &format!("gsas-node{}-doorbell", cfg.node),
            crate::bell::page_len(bells),
        )
        .map_err(shm_err("creating the doorbell page"))?;
        let event = EventFd::new().map_err(io_err("creating the doorbell eventfd"))?;
        let wake = Arc::new(Wake {
            flag: atomic::AtomicBool::new(false),
            event: EventFd::new().map_err(io_err("creating the shutdown eventfd"))?,
        });
        let max_reply = udp.capabilities().mtu;
        let mut engine = Box::new(EngineT::new(
            SenderId::new(u64::from(cfg.node)).unwrap_or_default(),
            ShmMemory::new(),
        ));
        engine.set_max_reply_len(max_reply);
        // SAFETY: getuid and getpid cannot fail.
        let (uid, pid) = unsafe { (libc::getuid(), libc::getpid() as u32) };
        let memory_limit = match cfg.memory_limit {
            Some(m) => (
                m,
                "the configured memory limit (GSAS_MEMORY_LIMIT or nodes[].memory)",
            ),
            None => (physical_memory(), "this machine's physical memory"),
        };
        match udp.inner().exanet() {
            Some(link) => log::info!(
                "{}: node {} serving Exanet {} (host actions on UDP {}) and control socket {}",
                cfg.name,
                cfg.node,
                link.local(),
                udp_addr,
                cfg.socket_path.display()
            ),
            None => log::info!(
                "{}: node {} serving UDP {} and control socket {}",
                cfg.name,
                cfg.node,
                udp_addr,
                cfg.socket_path.display()
            ),
        }
        Ok(Core {
            scratch: vec![0u8; max_reply.max(64)],
            msg: vec![0u8; MAX_MESSAGE],
            cfg,
            listener,
            udp,
            udp_addr,
            udp_pending: VecDeque::new(),
            wake_line,
            engine,
            conns: Vec::new(),
            jobs: HashMap::new(),
            tombstones: VecDeque::new(),
            next_number: 1,
            memory_used: 0,
            rings: Vec::new(),
            doorbell: Doorbell {
                page: Arc::new(page),
                event,
                taken: vec![false; bells],
            },
            wake,
            signals: None,
            fork: None,
            counters: Counters::default(),
            uid,
            pid,
            max_reply,
            memory_limit,
            last_sweep: Instant::now(),
            refusals_logged: [0; 2],
        })
    }

    pub(crate) fn socket_path(&self) -> &Path {
        &self.cfg.socket_path
    }

    pub(crate) fn udp_addr(&self) -> SocketAddr {
        self.udp_addr
    }

    pub(crate) fn node(&self) -> u16 {
        self.cfg.node
    }

    pub(crate) fn wake(&self) -> Arc<Wake> {
        Arc::clone(&self.wake)
    }

    pub(crate) fn set_fork_handler(&mut self, handler: Box<dyn ForkHandler>) {
        self.fork = Some(handler);
        // FORK senders talk to us before their job exists here.
        self.udp.index_mut().serve_host_actions(true);
    }

    pub(crate) fn set_signals(&mut self, signals: SignalFd) {
        self.signals = Some(signals);
    }

    // ---------------------------------------------------------------------------------
    // The loop

    pub(crate) fn run(&mut self) -> Result<(), ServiceError> {
        let result = self.run_loop();
        self.cleanup();
        result
    }

    fn run_loop(&mut self) -> Result<(), ServiceError> {
        let mut last_activity = Instant::now();
        let mut last_control = Instant::now();
        let mut yields = 0;
        loop {
            if self.wake.flag.load(Ordering::Acquire) {
                log::info!("{}: shutting down", self.cfg.name);
                return Ok(());
            }
            if self.last_sweep.elapsed() >= SWEEP_EVERY {
                self.sweep_peers();
            }
            let busy = self.step()?;
            let now = Instant::now();
            if busy {
                last_activity = now;
                yields = 0;
            }
            if busy || now.duration_since(last_activity) < self.cfg.spin {
                if now.duration_since(last_control) >= CONTROL_EVERY {
                    self.poll_descriptors(Duration::ZERO)?;
                    last_control = Instant::now();
                }
                if !busy {
                    crate::poll::spin_pause(now.duration_since(last_activity));
                }
                continue;
            }
            if yields < 4 {
                yields += 1;
                std::thread::yield_now();
                continue;
            }
            // Tell ring users we may sleep, then look at the rings once more (the PE side
            // stores its packet, fences, and reads this word; we store, fence, and read the
            // ring: one of the two sees the other).
            self.doorbell.word().store(1, Ordering::Relaxed);
            atomic::fence(Ordering::SeqCst);
            if self.rings.iter().any(|r| r.ring.has_pending()) {
                self.doorbell.word().store(0, Ordering::Relaxed);
                continue;
            }
            if self.udp.inner().work_pending() {
                // An Exanet pull in progress: its completion raises no interrupt.
                self.doorbell.word().store(0, Ordering::Relaxed);
                std::thread::yield_now();
                continue;
            }
            let bound = if self.udp.has_frames_in_use()
                || !self.udp_pending.is_empty()
                || self.rings.iter().any(|r| !r.pending.is_empty())
            {
                BLOCK_TIMERS
            } else {
                BLOCK_IDLE
            };
            let woke = self.poll_descriptors(bound)?;
            self.doorbell.word().store(0, Ordering::Relaxed);
            last_control = Instant::now();
            if woke {
                last_activity = last_control;
                yields = 0;
            }
        }
    }

    /// Frees the slots of network peers that fell silent: idle (nothing in flight or
    /// owed) and not heard from for twice the deadline. A peer that comes back is
    /// admitted again (its job permitting) and continues where it was.
    fn sweep_peers(&mut self) {
        self.last_sweep = Instant::now();
        let silence =
            u64::try_from(self.cfg.deadline.as_nanos().saturating_mul(2)).unwrap_or(u64::MAX);
        let freed = self.udp.release_silent(silence, |_| true);
        if freed > 0 {
            log::debug!(
                "{}: freed {freed} network peers silent for {:.1} s ({} of {} in use)",
                self.cfg.name,
                silence as f64 / 1e9,
                self.udp.index().len(),
                self.udp.peer_capacity()
            );
        }
    }

    /// Logs what the network layer refused since the last call, at warn: the first few of
    /// each kind (an unknown job key; a full job share, table or host share), then every
    /// power of two, so that a flood leaves a trace but not a flood of lines. Every
    /// refusal is counted either way.
    fn log_refusals(&mut self) {
        let Some((peer, r)) = self.udp.index_mut().take_refusal() else {
            return;
        };
        let kind = usize::from(r.reason != RefusalReason::UnknownJob);
        self.refusals_logged[kind] += 1;
        let n = self.refusals_logged[kind];
        if n > LOGGED_REFUSALS && !n.is_power_of_two() {
            return;
        }
        let st = self.udp.stats();
        if kind == 0 {
            log::warn!(
                "{}: refused network peer {} (job key {:#x}): {r}{} ({} frames refused for an unknown job so far)",
                self.cfg.name,
                peer.addr,
                peer.key,
                if self.fork.is_none() {
                    "; a remote FORK would be refused anyway: it is not enabled on this service (defaults.fork_allowed)"
                } else {
                    ""
                },
                st.refused_unknown_job
            );
            return;
        }
        log::warn!(
            "{}: refused network peer {} (job key {:#x}): {r}; peer table {} of {} in use, {} jobs; refused so far: {} job full, {} table full, {} host full, {} unknown job",
            self.cfg.name,
            peer.addr,
            peer.key,
            self.udp.index().len(),
            self.udp.peer_capacity(),
            self.jobs.len(),
            st.refused_job_full,
            st.refused_table_full,
            st.refused_host_full,
            st.refused_unknown_job
        );
    }

    /// Drives timers and serves UDP and every ring once. Returns whether anything moved.
    fn step(&mut self) -> Result<bool, ServiceError> {
        let udp_err = |source| ServiceError::Transport {
            context: "network transport of the service".into(),
            source,
        };
        self.udp.poll(monotonic_ns()).map_err(udp_err)?;
        let mut busy = false;
        {
            let Core {
                udp,
                udp_pending,
                engine,
                scratch,
                counters,
                fork,
                ..
            } = self;
            let served = serve_port(
                engine,
                udp,
                udp_pending,
                scratch,
                counters,
                |p: &NetPeer| p.key,
                |peer: NetPeer, repr: RequestRepr<'_>, out: &mut [u8], counters: &mut Counters| {
                    udp_host_action(fork, peer, repr, out, counters)
                },
            )
            .map_err(udp_err)?;
            busy |= served > 0;
        }
        let mut broken = Vec::new();
        for (i, port) in self.rings.iter_mut().enumerate() {
            let key = port.key;
            let served = serve_port(
                &mut self.engine,
                &mut port.ring,
                &mut port.pending,
                &mut self.scratch,
                &mut self.counters,
                |_: &RingPeer| key,
                |_: RingPeer, repr: RequestRepr<'_>, out: &mut [u8], _: &mut Counters| {
                    refuse(out, repr.token, ErrorCode::NotSupported)
                },
            );
            match served {
                Ok(n) => {
                    self.counters.ring_requests += n as u64;
                    busy |= n > 0;
                }
                Err(e) => {
                    log::warn!("ring of PE {} failed ({e}); no longer served", port.pe);
                    broken.push(i);
                }
            }
        }
        for i in broken.into_iter().rev() {
            self.rings.remove(i);
        }
        self.udp.flush().map_err(udp_err)?;
        self.log_refusals();
        while let Some(ev) = self.udp.next_event() {
            match ev {
                PeerEvent::Unreachable(p) => {
                    log::info!(
                        "{}: peer {} (job key {:#x}) stopped answering; its unacknowledged replies are dropped",
                        self.cfg.name,
                        p.addr,
                        p.key
                    );
                    // A service only answers: if the peer speaks again, answer it (its
                    // receive state stays, so its requests are still executed once); if it
                    // does not, its slot is freed when it ends or falls silent.
                    let _ = self.udp.reset_peer(p);
                }
                PeerEvent::Restarted(p) => {
                    log::debug!("{}: peer {} restarted", self.cfg.name, p.addr)
                }
                PeerEvent::Refused(p, r) => log::warn!(
                    "{}: peer {} (job key {:#x}) refused us: {r}",
                    self.cfg.name,
                    p.addr,
                    p.key
                ),
            }
        }
        Ok(busy)
    }

    /// Waits at most `timeout` on every descriptor and handles what is ready. Returns
    /// whether anything was.
    fn poll_descriptors(&mut self, timeout: Duration) -> Result<bool, ServiceError> {
        let mut fds = Vec::with_capacity(5 + self.conns.len());
        let mut push = |fd: i32, events: libc::c_short| {
            fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            })
        };
        push(self.wake.event.as_fd().as_raw_fd(), libc::POLLIN);
        push(self.listener.as_raw_fd(), libc::POLLIN);
        let udp = self.udp.inner().udp();
        let mut udp_events = libc::POLLIN;
        if udp.is_some_and(UdpTransport::wants_write) {
            udp_events |= libc::POLLOUT;
        }
        push(udp.map_or(-1, AsRawFd::as_raw_fd), udp_events);
        push(self.doorbell.event.as_fd().as_raw_fd(), libc::POLLIN);
        push(
            self.signals.as_ref().map_or(-1, SignalFd::raw_fd),
            libc::POLLIN,
        );
        let wake_at = fds.len();
        let timeout = match &mut self.wake_line {
            Some(line) => {
                line.arm();
                match line.fd() {
                    Some(fd) => {
                        fds.push(libc::pollfd {
                            fd: fd.as_raw_fd(),
                            events: libc::POLLIN,
                            revents: 0,
                        });
                        timeout
                    }
                    None => {
                        fds.push(libc::pollfd {
                            fd: -1,
                            events: 0,
                            revents: 0,
                        });
                        timeout.min(crate::transport::exanet::POLL_FALLBACK)
                    }
                }
            }
            None => timeout,
        };
        let first_conn = fds.len();
        let mut owners = Vec::with_capacity(self.conns.len());
        for (i, c) in self.conns.iter().enumerate() {
            if let Some(c) = c {
                fds.push(libc::pollfd {
                    fd: c.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                owners.push(i);
            }
        }
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a valid array of pollfd for the kernel to update; every
        // descriptor in it is owned by `self` and stays open during the call (-1 entries
        // are ignored by poll).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(ServiceError::Io {
                context: "poll(2) in the service loop".into(),
                source: e,
            });
        }
        if n == 0 {
            return Ok(false);
        }
        if fds[0].revents != 0 {
            self.wake.event.drain();
        }
        if fds[3].revents != 0 {
            self.doorbell.event.drain();
        }
        if let Some(line) = &mut self.wake_line {
            if fds.get(wake_at).is_some_and(|f| f.revents != 0) {
                line.drain();
            }
        }
        if fds[4].revents != 0 {
            if let Some(Ok(Some(sig))) = self.signals.as_ref().map(SignalFd::read) {
                log::info!(
                    "{}: received {}",
                    self.cfg.name,
                    gsas_sys::process::describe_signal(sig)
                );
                self.wake.flag.store(true, Ordering::Release);
            }
        }
        for (k, &i) in owners.iter().enumerate() {
            if fds[first_conn + k].revents != 0 {
                self.serve_conn(i);
            }
        }
        if fds[1].revents != 0 {
            self.accept_all();
        }
        Ok(true)
    }

    fn cleanup(&mut self) {
        let keys: Vec<u64> = self.jobs.keys().copied().collect();
        for key in keys {
            self.drop_job(key, "the service stopped".into());
        }
        self.conns.clear();
        if let Err(e) = std::fs::remove_file(&self.cfg.socket_path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!(
                    "{}: removing {}: {e}",
                    self.cfg.name,
                    self.cfg.socket_path.display()
                );
            }
        }
    }

    // ---------------------------------------------------------------------------------
    // Control connections

    fn accept_all(&mut self) {
        loop {
            match socket::accept(self.listener.as_fd()) {
                Ok(Some(fd)) => {
                    let cred = match socket::peer_cred(fd.as_fd()) {
                        Ok(c) => c,
                        Err(e) => {
                            log::warn!("{}: reading peer credentials: {e}", self.cfg.name);
                            continue;
                        }
                    };
                    if self.cfg.uid_policy == UidPolicy::SameUser
                        && cred.uid != self.uid
                        && cred.uid != 0
                    {
                        self.counters.uid_refused += 1;
                        log::warn!(
                            "{}: connection from pid {} uid {} refused (this service serves uid {} only)",
                            self.cfg.name,
                            cred.pid,
                            cred.uid,
                            self.uid
                        );
                        continue;
                    }
                    self.counters.connections += 1;
                    log::debug!(
                        "{}: connection from pid {} uid {} gid {}",
                        self.cfg.name,
                        cred.pid,
                        cred.uid,
                        cred.gid
                    );
                    let conn = Conn {
                        fd,
                        cred,
                        state: ConnState::Fresh,
                    };
                    match self.conns.iter().position(Option::is_none) {
                        Some(i) => self.conns[i] = Some(conn),
                        None => self.conns.push(Some(conn)),
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    log::warn!("{}: accept: {e}", self.cfg.name);
                    return;
                }
            }
        }
    }

    /// Handles the messages waiting on connection `i`.
    fn serve_conn(&mut self, i: usize) {
        for _ in 0..16 {
            let Some(conn) = self.conns.get(i).and_then(Option::as_ref) else {
                return;
            };
            let received = recv_fds(&conn.fd, &mut self.msg, Duration::ZERO);
            let (n, stray) = match received {
                Ok(x) => x,
                Err(ShmError::TimedOut { .. }) => return,
                Err(ShmError::Closed { .. }) => {
                    self.close_conn(i, true);
                    return;
                }
                Err(e @ (ShmError::MessageTruncated { .. } | ShmError::FdsTruncated { .. })) => {
                    self.counters.messages += 1;
                    self.counters.refused += 1;
                    let msg = e.to_string();
                    self.reply(
                        i,
                        0,
                        ControlReply::Error {
                            code: ErrorCode::Malformed,
                            message: &msg,
                        },
                        &[],
                    );
                    continue;
                }
                Err(e) => {
                    log::warn!("{}: receiving on a control connection: {e}", self.cfg.name);
                    self.close_conn(i, true);
                    return;
                }
            };
            self.counters.messages += 1;
            let bytes = self.msg[..n].to_vec();
            let parsed = ControlRequest::parse(&bytes);
            let wants_fd = matches!(parsed, Ok((_, ControlRequest::RegisterSegment { .. })));
            let mut attached = stray;
            if !wants_fd && !attached.is_empty() {
                log::warn!(
                    "{}: pid {} sent {} descriptors with a control message; closed them",
                    self.cfg.name,
                    conn.cred.pid,
                    attached.len()
                );
                attached.clear();
            }
            let (token, outcome) = match parsed {
                Ok((token, req)) => (token, self.handle(i, req, attached)),
                Err(e) => (
                    gsas_core::wire::peek_token(&bytes),
                    Err((e.code(), e.to_string())),
                ),
            };
            match outcome {
                Ok(Outcome::Ack) => self.reply(i, token, ControlReply::Ack, &[]),
                Ok(Outcome::Data(d, fds)) => {
                    let borrowed: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
                    self.reply(i, token, ControlReply::Data(&d), &borrowed)
                }
                Ok(Outcome::Stats(text)) => self.reply(i, token, ControlReply::Stats(&text), &[]),
                Err((code, message)) => {
                    self.counters.refused += 1;
                    log::debug!("{}: refused a control request: {message}", self.cfg.name);
                    self.reply(
                        i,
                        token,
                        ControlReply::Error {
                            code,
                            message: &message,
                        },
                        &[],
                    )
                }
            }
        }
    }

    /// Sends a reply on connection `i`; closes it if that fails.
    fn reply(
        &mut self,
        i: usize,
        token: u32,
        reply: ControlReply<'_>,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) {
        let mut buf = [0u8; MAX_MESSAGE];
        let n = reply.emit(token, &mut buf);
        let Some(conn) = self.conns.get(i).and_then(Option::as_ref) else {
            return;
        };
        if let Err(e) = send_fds(&conn.fd, &buf[..n], fds, CONTROL_SEND_TIMEOUT) {
            log::warn!(
                "{}: replying to pid {}: {e}; closing the connection",
                self.cfg.name,
                conn.cred.pid
            );
            self.close_conn(i, true);
        }
    }

    /// Closes connection `i`. `eof`: it ended without Leave, so a joined PE died.
    fn close_conn(&mut self, i: usize, eof: bool) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::take) else {
            return;
        };
        if let (true, ConnState::Joined { key, rank }) = (eof, conn.state) {
            let Some(job) = self.jobs.get(&key) else {
                return;
            };
            let reason = format!(
                "PE {rank} (pid {}) of job {:016x} closed its control connection without Leave",
                conn.cred.pid, job.id
            );
            log::warn!("{}: {reason}; reclaiming the job", self.cfg.name);
            self.counters.jobs_reclaimed += 1;
            self.drop_job(key, reason);
        }
    }

    fn handle(
        &mut self,
        i: usize,
        req: ControlRequest,
        mut attached: Vec<OwnedFd>,
    ) -> Result<Outcome, (ErrorCode, String)> {
        let (state, cred) = match self.conns.get(i).and_then(Option::as_ref) {
            Some(c) => (c.state, c.cred),
            None => return Err((ErrorCode::HostFailure, "connection gone".into())),
        };
        match req {
            ControlRequest::Ping => Ok(Outcome::Ack),
            ControlRequest::Stats => Ok(Outcome::Stats(self.stats_text())),
            ControlRequest::Join {
                rank,
                job_id,
                job_key,
                info,
            } => {
                if state != ConnState::Fresh {
                    return Err((
                        ErrorCode::NotSupported,
                        "this connection has joined already".into(),
                    ));
                }
                self.join(i, cred, rank, job_id, job_key, info)
            }
            _ => {
                let (key, rank) = match state {
                    ConnState::Joined { key, rank } => (key, rank),
                    ConnState::Fresh => {
                        return Err((ErrorCode::NotSupported, "Join first".into()));
                    }
                    ConnState::Left => {
                        return Err((ErrorCode::NotSupported, "this PE has left its job".into()));
                    }
                };
                if !self.jobs.contains_key(&key) {
                    let reason = self
                        .tombstones
                        .iter()
                        .find(|(k, _)| *k == key)
                        .map_or("the job no longer exists".to_string(), |(_, r)| {
                            format!("the job was reclaimed: {r}")
                        });
                    return Err((ErrorCode::BadKey, reason));
                }
                match req {
                    ControlRequest::Leave { .. } => {
                        self.leave(i, key, rank);
                        Ok(Outcome::Ack)
                    }
                    ControlRequest::CreateSegment { pe, segment, size } => {
                        self.create_segment(key, rank, pe, segment, size)
                    }
                    ControlRequest::OpenSegment { pe, segment } => {
                        self.open_segment(key, pe, segment)
                    }
                    ControlRequest::FreeSegment { pe, segment } => {
                        self.free_segment(key, rank, pe, segment)
                    }
                    ControlRequest::RegisterSegment { pe, segment, size } => {
                        let fd = match (attached.pop(), attached.is_empty()) {
                            (Some(fd), true) => fd,
                            _ => {
                                return Err((
                                    ErrorCode::Malformed,
                                    "Register needs exactly one descriptor attached".into(),
                                ));
                            }
                        };
                        self.register_segment(key, rank, pe, segment, size, fd)
                    }
                    _ => Err((ErrorCode::NotSupported, "unexpected request".into())),
                }
            }
        }
    }

    fn join(
        &mut self,
        i: usize,
        cred: PeerCred,
        rank: u16,
        job_id: u64,
        job_key: u64,
        info: JoinInfo,
    ) -> Result<Outcome, (ErrorCode, String)> {
        if info.node != self.cfg.node {
            return Err((
                ErrorCode::NotSupported,
                format!(
                    "this service serves node {}, but PE {rank} believes it runs on node {}",
                    self.cfg.node, info.node
                ),
            ));
        }
        if info.npes == 0 || u32::from(rank) >= info.npes {
            return Err((
                ErrorCode::Malformed,
                format!("rank {rank} in a job of {} PEs", info.npes),
            ));
        }
        if job_key == 0 {
            return Err((ErrorCode::BadKey, "job key 0 is not allowed".into()));
        }
        let joined: usize = self.jobs.values().map(|j| j.pes.len()).sum();
        if joined >= self.cfg.max_pes {
            return Err((
                ErrorCode::Busy,
                format!(
                    "this service serves {} PEs already (its limit)",
                    self.cfg.max_pes
                ),
            ));
        }
        if let Some(job) = self.jobs.get(&job_key) {
            if job.id != job_id {
                return Err((
                    ErrorCode::BadKey,
                    "the job key belongs to another job".into(),
                ));
            }
            if job.uid != cred.uid && cred.uid != 0 {
                self.counters.uid_refused += 1;
                return Err((
                    ErrorCode::BadKey,
                    format!(
                        "job {job_id:016x} belongs to uid {}, not {}",
                        job.uid, cred.uid
                    ),
                ));
            }
            if job.npes != info.npes {
                return Err((
                    ErrorCode::Malformed,
                    format!("job {job_id:016x} has {} PEs, not {}", job.npes, info.npes),
                ));
            }
            if job.pes.contains_key(&rank) {
                return Err((
                    ErrorCode::Busy,
                    format!("PE {rank} of job {job_id:016x} has joined already"),
                ));
            }
        } else {
            if self.jobs.values().any(|j| j.id == job_id) {
                return Err((
                    ErrorCode::BadKey,
                    format!("job {job_id:016x} is running with another key"),
                ));
            }
            let number = self.next_number;
            self.next_number = self.next_number.checked_add(1).unwrap_or(1);
            self.jobs.insert(
                job_key,
                Job {
                    id: job_id,
                    key: job_key,
                    number,
                    uid: cred.uid,
                    npes: info.npes,
                    pes: BTreeMap::new(),
                },
            );
            self.counters.jobs_started += 1;
            let share = job_share(info.npes, self.udp.peer_capacity());
            self.udp.index_mut().admit_job(job_key, share);
            log::info!(
                "{}: job {job_id:016x} started ({} PEs in total, uid {})",
                self.cfg.name,
                info.npes,
                cred.uid
            );
        }
        let bell = self.doorbell.take_bell();
        let job = self
            .jobs
            .get_mut(&job_key)
            .expect("inserted or found above");
        job.pes.insert(
            rank,
            Pe {
                conn: i,
                pid: cred.pid,
                left: false,
                segments: [None, None, None],
                bell,
            },
        );
        if let Some(Some(c)) = self.conns.get_mut(i) {
            c.state = ConnState::Joined { key: job_key, rank };
        }
        log::debug!(
            "{}: PE {rank} (pid {}) joined job {job_id:016x}",
            self.cfg.name,
            cred.pid
        );
        let info = ServiceInfo {
            node: self.cfg.node,
            udp: self.udp_addr,
            pid: self.pid,
            udp_mtu: self.cfg.udp_mtu as u32,
            bell,
            exanet: self.cfg.exanet.as_ref().map(ExanetInfo::of),
        };
        let dup_failed = |e: String| {
            (
                ErrorCode::HostFailure,
                format!("duplicating the doorbell: {e}"),
            )
        };
        let page = self
            .doorbell
            .page
            .try_clone_fd()
            .map_err(|e| dup_failed(e.to_string()))?;
        let event = self
            .doorbell
            .event
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| dup_failed(e.to_string()))?;
        Ok(Outcome::Data(info.encode(), vec![page, event]))
    }

    fn leave(&mut self, i: usize, key: u64, rank: u16) {
        if let Some(Some(c)) = self.conns.get_mut(i) {
            c.state = ConnState::Left;
        }
        let Some(job) = self.jobs.get_mut(&key) else {
            return;
        };
        if let Some(pe) = job.pes.get_mut(&rank) {
            pe.left = true;
        }
        log::debug!("{}: PE {rank} left job {:016x}", self.cfg.name, job.id);
        if job.pes.values().all(|p| p.left) {
            let reason = format!("job {:016x} ended (every PE left)", job.id);
            log::info!("{}: {reason}", self.cfg.name);
            self.counters.jobs_ended += 1;
            self.drop_job(key, reason);
        }
    }

    fn create_segment(
        &mut self,
        key: u64,
        rank: u16,
        pe: u16,
        segment: u8,
        size: u64,
    ) -> Result<Outcome, (ErrorCode, String)> {
        if pe != rank {
            return Err((
                ErrorCode::NotSupported,
                format!("PE {rank} may create only its own segments, not PE {pe}'s"),
            ));
        }
        if usize::from(segment) >= SEGMENTS {
            return Err((
                ErrorCode::NoSegment,
                format!("segment id {segment} (ids are 0..={})", SEGMENTS - 1),
            ));
        }
        let page = crate::shm::page_size() as u64;
        let (len, ring) = if segment == SEG_RING {
            let slots = (size >> 32) as u32;
            let slot_size = (size as u32).min(self.max_reply as u32);
            let rc = RingConfig::new(slots, slot_size);
            rc.validate()
                .map_err(|e| (ErrorCode::Malformed, e.to_string()))?;
            (rc.segment_len() as u64, Some(rc))
        } else {
            (size.div_ceil(page).saturating_mul(page), None)
        };
        self.check_limits(key, pe, segment, len)?;
        let job = self.jobs.get(&key).expect("checked by the caller");
        let job_id = job.id;
        let exists = match segment {
            SEG_RING => self.rings.iter().any(|r| r.key == key && r.pe == pe),
            s => job
                .pes
                .get(&pe)
                .is_some_and(|p| p.segments[usize::from(s)].is_some()),
        };
        if exists {
            return Err((
                ErrorCode::Busy,
                format!(
                    "the {} segment of PE {pe} exists already",
                    seg_name(segment)
                ),
            ));
        }
        let name = format!("gsas-job{job_id:016x}-pe{pe}-{}", seg_name(segment));
        let host = |e: ShmError| (ErrorCode::HostFailure, format!("creating {name}: {e}"));
        if let Some(rc) = ring {
            let seg = ShmRing::create(&name, rc).map_err(host)?;
            let fd = seg.try_clone_fd().map_err(host)?;
            let ring = ShmRing::service_side(seg).map_err(host)?;
            self.rings.push(RingPort {
                key,
                pe,
                ring,
                pending: VecDeque::new(),
            });
            self.memory_used += len;
            return Ok(Outcome::Data(len.to_le_bytes().to_vec(), vec![fd]));
        }
        let bytes = usize::try_from(len).map_err(|_| {
            (
                ErrorCode::TooLarge,
                format!("{} does not fit this machine's address space", show(len)),
            )
        })?;
        let seg = Segment::create(&name, bytes).map_err(host)?;
        let fd = seg.try_clone_fd().map_err(host)?;
        self.install(key, pe, segment, seg)?;
        Ok(Outcome::Data(len.to_le_bytes().to_vec(), vec![fd]))
    }

    /// Bytes of segments job `key` has booked here.
    fn job_booked(&self, key: u64) -> u64 {
        let segments: u64 = self.jobs.get(&key).map_or(0, |j| {
            j.pes
                .values()
                .flat_map(|p| p.segments.iter().flatten())
                .map(|s| s.len() as u64)
                .sum()
        });
        let rings: u64 = self
            .rings
            .iter()
            .filter(|r| r.key == key)
            .map(|r| r.ring.segment().len() as u64)
            .sum();
        segments + rings
    }

    /// Checks a segment of `len` bytes for job `key` against the per-kind limits, the
    /// node's total, and the job's and its user's shares.
    fn check_limits(
        &self,
        key: u64,
        pe: u16,
        segment: u8,
        len: u64,
    ) -> Result<(), (ErrorCode, String)> {
        let limit = match segment {
            SEG_SYNC => MAX_SYNC,
            SEG_RING => MAX_RING_BYTES,
            _ => MAX_SEGMENT,
        };
        if len > limit {
            return Err((
                ErrorCode::TooLarge,
                format!(
                    "the {} segment of PE {pe} asks for {}, more than the {} a {} segment may have",
                    seg_name(segment),
                    show(len),
                    show(limit),
                    seg_name(segment)
                ),
            ));
        }
        let (total, source) = self.memory_limit;
        if self.memory_used.saturating_add(len) > total {
            return Err((
                ErrorCode::TooLarge,
                format!(
                    "the {} segment of PE {pe} asks for {}, but only {} of the {} of {source} are left",
                    seg_name(segment),
                    show(len),
                    show(total.saturating_sub(self.memory_used)),
                    show(total)
                ),
            ));
        }
        self.check_shares(key, pe, segment, len)
    }

    /// The per-job and per-user limits (see [`ServiceConfig::job_memory_limit`]).
    fn check_shares(
        &self,
        key: u64,
        pe: u16,
        segment: u8,
        len: u64,
    ) -> Result<(), (ErrorCode, String)> {
        let Some(job) = self.jobs.get(&key) else {
            return Ok(());
        };
        let what = format!(
            "the {} segment of PE {pe} asks for {}",
            seg_name(segment),
            show(len)
        );
        let job_booked = self.job_booked(key);
        if let Some(limit) = self.cfg.job_memory_limit {
            if job_booked.saturating_add(len) > limit {
                return Err((
                    ErrorCode::TooLarge,
                    format!(
                        "{what}, but job {:016x} of uid {} has {} of its per-job limit of {} booked on this node ({})",
                        job.id,
                        job.uid,
                        show(job_booked),
                        show(limit),
                        self.cfg.memory_source.job
                    ),
                ));
            }
        }
        if let Some(limit) = self.cfg.user_memory_limit {
            let user_booked: u64 = self
                .jobs
                .values()
                .filter(|j| j.uid == job.uid)
                .map(|j| self.job_booked(j.key))
                .sum();
            if user_booked.saturating_add(len) > limit {
                return Err((
                    ErrorCode::TooLarge,
                    format!(
                        "{what}, but uid {} ({}) has {} of its per-user limit of {} booked on this node over {} job(s) ({})",
                        job.uid,
                        gsas_sys::socket::user_name(job.uid),
                        show(user_booked),
                        show(limit),
                        self.jobs.values().filter(|j| j.uid == job.uid).count(),
                        self.cfg.memory_source.user
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Maps a segment, makes the engine serve it and records it for PE `pe` of job `key`.
    fn install(
        &mut self,
        key: u64,
        pe: u16,
        segment: u8,
        seg: Segment,
    ) -> Result<(), (ErrorCode, String)> {
        let job = self.jobs.get(&key).expect("checked by the caller");
        let number = job.number;
        let len = seg.len() as u64;
        let seg = Arc::new(seg);
        let name = seg.name().to_owned();
        // Updates of the PE's memory ring its bell (see crate::bell).
        let bell = job.pes.get(&pe).and_then(|p| p.bell);
        match bell.and_then(|b| self.doorbell.bell(b)) {
            Some(bell) => self
                .engine
                .memory()
                .insert_with_bell(Arc::clone(&seg), bell),
            None => self.engine.memory().insert(Arc::clone(&seg)),
        }
        .map_err(|e| (ErrorCode::HostFailure, format!("mapping {name}: {e}")))?;
        let registered = self.engine.register(EngineSegment {
            job: number,
            key,
            pe,
            segment,
            base: seg.addr(),
            len,
        });
        if let Err(e) = registered {
            self.engine.memory().remove(seg.addr());
            return Err((ErrorCode::HostFailure, format!("registering {name}: {e}")));
        }
        self.memory_used += len;
        let job = self.jobs.get_mut(&key).expect("checked by the caller");
        if let Some(p) = job.pes.get_mut(&pe) {
            p.segments[usize::from(segment)] = Some(seg);
        }
        log::debug!("{}: serving {name} ({})", self.cfg.name, show(len));
        Ok(())
    }

    fn register_segment(
        &mut self,
        key: u64,
        rank: u16,
        pe: u16,
        segment: u8,
        size: u64,
        fd: OwnedFd,
    ) -> Result<Outcome, (ErrorCode, String)> {
        if pe != rank {
            return Err((
                ErrorCode::NotSupported,
                format!("PE {rank} may register only its own segments, not PE {pe}'s"),
            ));
        }
        if !matches!(segment, SEG_HEAP | SEG_DATA | SEG_SYNC) {
            return Err((
                ErrorCode::NotSupported,
                format!("segment {segment} cannot be registered"),
            ));
        }
        self.check_limits(key, pe, segment, size)?;
        let job = self.jobs.get(&key).expect("checked by the caller");
        if job
            .pes
            .get(&pe)
            .is_some_and(|p| p.segments[usize::from(segment)].is_some())
        {
            return Err((
                ErrorCode::Busy,
                format!(
                    "the {} segment of PE {pe} exists already",
                    seg_name(segment)
                ),
            ));
        }
        // SAFETY: fcntl(F_GET_SEALS) on a descriptor we own; no memory is passed.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err((
                ErrorCode::NotSupported,
                format!(
                    "the {} segment of PE {pe} is not a memfd sealed against shrinking",
                    seg_name(segment)
                ),
            ));
        }
        let len = usize::try_from(size).map_err(|_| {
            (
                ErrorCode::TooLarge,
                format!("{} does not fit this machine's address space", show(size)),
            )
        })?;
        let name = format!(
            "gsas-job{:016x}-pe{pe}-{} (registered)",
            job.id,
            seg_name(segment)
        );
        let seg = Segment::map_len(fd, len, &name)
            .map_err(|e| (ErrorCode::HostFailure, format!("mapping {name}: {e}")))?;
        self.install(key, pe, segment, seg)?;
        Ok(Outcome::Data(size.to_le_bytes().to_vec(), Vec::new()))
    }

    fn open_segment(
        &mut self,
        key: u64,
        pe: u16,
        segment: u8,
    ) -> Result<Outcome, (ErrorCode, String)> {
        if segment == SEG_RING || usize::from(segment) >= SEGMENTS {
            return Err((
                ErrorCode::NotSupported,
                format!("segment {segment} of other PEs cannot be opened"),
            ));
        }
        let job = self.jobs.get(&key).expect("checked by the caller");
        let Some(p) = job.pes.get(&pe) else {
            return Err((
                ErrorCode::NoSegment,
                format!("PE {pe} has not joined job {:016x} on this node", job.id),
            ));
        };
        let Some(seg) = &p.segments[usize::from(segment)] else {
            return Err((
                ErrorCode::NoSegment,
                format!("PE {pe} has no {} segment", seg_name(segment)),
            ));
        };
        let fd = seg
            .try_clone_fd()
            .map_err(|e| (ErrorCode::HostFailure, e.to_string()))?;
        Ok(Outcome::Data(
            (seg.len() as u64).to_le_bytes().to_vec(),
            vec![fd],
        ))
    }

    fn free_segment(
        &mut self,
        key: u64,
        rank: u16,
        pe: u16,
        segment: u8,
    ) -> Result<Outcome, (ErrorCode, String)> {
        if pe != rank {
            return Err((
                ErrorCode::NotSupported,
                format!("PE {rank} may free only its own segments"),
            ));
        }
        if segment == SEG_RING {
            let before = self.rings.len();
            let mut freed = 0;
            self.rings.retain(|r| {
                let mine = r.key == key && r.pe == pe;
                if mine {
                    freed += r.ring.segment().len() as u64;
                }
                !mine
            });
            if self.rings.len() == before {
                return Err((ErrorCode::NoSegment, format!("PE {pe} has no ring")));
            }
            self.memory_used -= freed;
            return Ok(Outcome::Ack);
        }
        let job = self.jobs.get_mut(&key).expect("checked by the caller");
        let seg = job
            .pes
            .get_mut(&pe)
            .and_then(|p| p.segments.get_mut(usize::from(segment)))
            .and_then(Option::take);
        let Some(seg) = seg else {
            return Err((
                ErrorCode::NoSegment,
                format!("PE {pe} has no segment {segment}"),
            ));
        };
        self.engine.unregister(key, pe, segment);
        self.engine.memory().remove(seg.addr());
        self.memory_used -= seg.len() as u64;
        Ok(Outcome::Ack)
    }

    /// Unregisters and releases everything of job `key`.
    fn drop_job(&mut self, key: u64, reason: String) {
        let Some(job) = self.jobs.remove(&key) else {
            return;
        };
        self.engine.unregister_job(job.number);
        for (rank, p) in &job.pes {
            if let Some(b) = p.bell {
                self.doorbell.release_bell(b);
            }
            for seg in p.segments.iter().flatten() {
                self.engine.memory().remove(seg.addr());
                self.memory_used = self.memory_used.saturating_sub(seg.len() as u64);
            }
            log::debug!(
                "{}: released the segments of PE {rank} (pid {}, connection {})",
                self.cfg.name,
                p.pid,
                p.conn
            );
        }
        let mut freed = 0u64;
        self.rings.retain(|r| {
            let mine = r.key == key;
            if mine {
                freed += r.ring.segment().len() as u64;
            }
            !mine
        });
        self.memory_used = self.memory_used.saturating_sub(freed);
        if self.tombstones.len() == TOMBSTONES {
            self.tombstones.pop_front();
        }
        self.tombstones.push_back((job.key, reason));
        for peer in self.udp.index_mut().forget_job(key) {
            self.udp.release_peer(peer);
        }
    }

    fn gauges(&self) -> Gauges {
        Gauges {
            jobs: self.jobs.len() as u64,
            pes: self
                .jobs
                .values()
                .map(|j| j.pes.values().filter(|p| !p.left).count() as u64)
                .sum(),
            segments: self.engine.segments().len() as u64 + self.rings.len() as u64,
            memory: self.memory_used,
            connections: self.conns.iter().flatten().count() as u64,
            peers: self.udp.index().len() as u64,
            host_peers: self.udp.index().host_peers() as u64,
            peer_limit: self.udp.peer_capacity() as u64,
            memory_limit: self.memory_limit.0,
        }
    }

    fn stats_text(&self) -> String {
        let mut text = super::stats::render(
            self.engine.stats(),
            &self.udp.stats(),
            &self
                .udp
                .inner()
                .udp()
                .map(UdpTransport::stats)
                .unwrap_or_default(),
            &self.counters,
            &self.gauges(),
        );
        if let Some(link) = self.udp.inner().exanet() {
            let st = link.stats();
            for (name, value) in [
                ("exanet.small_sent", st.small_sent),
                ("exanet.bulk_sent", st.bulk_sent),
                ("exanet.delivered", st.delivered),
                ("exanet.pull_errors", st.pull_errors),
                ("exanet.failures", st.failures),
                ("exanet.foreign_dropped", link.dropped()),
            ] {
                text.push_str(&format!("{name} {value}\n"));
            }
        }
        if let Some(handler) = &self.fork {
            for (name, value) in handler.counters() {
                text.push_str(&format!("{name} {value}\n"));
            }
        }
        text
    }
}

/// What a control request produced.
enum Outcome {
    Ack,
    Data(Vec<u8>, Vec<OwnedFd>),
    Stats(String),
}

/// Writes an ERROR reply with `code` and returns its length.
fn refuse(out: &mut [u8], token: u32, code: ErrorCode) -> usize {
    emit_reply_header(out, PacketType::Error, code.into(), 0, token);
    gsas_core::wire::REPLY_HEADER_LEN
}

/// Host actions arriving over UDP: Ping is answered, FORK goes to the hook (or is
/// refused), everything else is refused.
fn udp_host_action(
    fork: &mut Option<Box<dyn ForkHandler>>,
    peer: NetPeer,
    repr: RequestRepr<'_>,
    out: &mut [u8],
    counters: &mut Counters,
) -> usize {
    match repr.body {
        Request::Control {
            code: ControlCode::Ping,
            ..
        } => {
            emit_reply_header(out, PacketType::Ack, 0, 0, repr.token);
            gsas_core::wire::REPLY_HEADER_LEN
        }
        Request::Fork { frag, data } => match (fork, peer.addr) {
            (Some(handler), NetAddr::Udp(from)) => match handler.fork(from, peer.key, frag, data) {
                Ok(()) => {
                    emit_reply_header(out, PacketType::Ack, 0, 0, repr.token);
                    gsas_core::wire::REPLY_HEADER_LEN
                }
                Err(code) => {
                    // The handler logs its refusals with the reason.
                    counters.fork_refused += 1;
                    refuse(out, repr.token, code)
                }
            },
            (Some(_), NetAddr::Exanet(from)) => {
                counters.fork_refused += 1;
                log::warn!("FORK request from exanet {from} refused: remote FORK comes over UDP");
                refuse(out, repr.token, ErrorCode::NotSupported)
            }
            (None, _) => {
                counters.fork_refused += 1;
                // Every refusal is counted; the log stays readable under a flood.
                if counters.fork_refused <= 32 || counters.fork_refused.is_power_of_two() {
                    log::warn!(
                        "FORK request from {} refused: remote FORK is not enabled on this service (defaults.fork_allowed) ({} refused so far)",
                        peer.addr,
                        counters.fork_refused
                    );
                }
                refuse(out, repr.token, ErrorCode::NotSupported)
            }
        },
        _ => refuse(out, repr.token, ErrorCode::NotSupported),
    }
}

/// Work for a transport that could not be done at once: a reply waiting for room, or a
/// bulk-read request whose (large) reply would have to wait behind others.
pub(crate) enum Deferred<P> {
    Reply(P, Vec<u8>),
    Request(P, u64, Vec<u8>),
}

/// Sends queued replies and executes stashed requests while the transport takes them.
///
/// A peer whose window is full (it does not acknowledge: slow, gone, or hostile) must not
/// hold up the replies to everyone else: its entries stay queued, in order, and the pass
/// goes on with the other peers' entries. The pass stops after [`BLOCKED_SCAN`] refusals
/// in a row (the shared frame pool, not one peer, is then full).
fn drain<T: Transport>(
    engine: &mut EngineT,
    transport: &mut T,
    pending: &mut VecDeque<Deferred<T::Peer>>,
    scratch: &mut [u8],
    counters: &mut Counters,
) -> Result<usize, TransportError> {
    let mut sent = 0;
    let mut blocked: Vec<T::Peer> = Vec::new();
    let mut refused_in_a_row = 0;
    let mut i = 0;
    while i < pending.len() && refused_in_a_row < BLOCKED_SCAN {
        let entry = &mut pending[i];
        let peer = match entry {
            Deferred::Reply(peer, _) | Deferred::Request(peer, _, _) => *peer,
        };
        if blocked.contains(&peer) {
            i += 1;
            continue;
        }
        let n = match entry {
            Deferred::Reply(_, bytes) => {
                let n = bytes.len();
                scratch[..n].copy_from_slice(bytes);
                n
            }
            Deferred::Request(_, key, req) => {
                let n = match engine.prepare(*key, req) {
                    Prepared::Reply(p) => engine.execute(&p, scratch).unwrap_or(0),
                    Prepared::Host(repr) => refuse(scratch, repr.token, ErrorCode::NotSupported),
                    Prepared::Drop => 0,
                };
                if n == 0 {
                    pending.remove(i);
                    continue;
                }
                // Executed now: keep the reply, not the request, if it has to wait.
                *entry = Deferred::Reply(peer, scratch[..n].to_vec());
                n
            }
        };
        match transport.send(peer, n, |slot| slot.copy_from_slice(&scratch[..n])) {
            Ok(()) => {
                pending.remove(i);
                sent += 1;
                refused_in_a_row = 0;
            }
            Err(TransportError::WouldBlock) => {
                blocked.push(peer);
                refused_in_a_row += 1;
                i += 1;
            }
            Err(
                TransportError::Unreachable
                | TransportError::UnknownPeer
                | TransportError::TooLarge,
            ) => {
                counters.replies_dropped += 1;
                pending.remove(i);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}

/// What one received packet produced.
enum Got<P> {
    /// A reply of this many bytes in `scratch`; whether it may wait
    /// ([`gsas_core::service::Pending::may_wait`]: sent with `send_lazy`).
    Reply(P, usize, bool),
    Stash(P, u64, Vec<u8>),
}

/// Serves one transport: sends what is queued, then takes up to [`BUDGET`] requests,
/// executing each inside `recv` into `scratch` and sending the reply. Returns how many
/// packets moved.
///
/// The transport is always read, even while replies wait for room: acknowledgements that
/// open the window arrive that way. While replies wait, new BULK_READ requests (whose
/// replies are large) are stashed as requests (32 bytes) and executed in order when
/// room appears, so at most one large reply per transport waits in memory; other
/// requests are executed and their small replies queued.
fn serve_port<T, K, H>(
    engine: &mut EngineT,
    transport: &mut T,
    pending: &mut VecDeque<Deferred<T::Peer>>,
    scratch: &mut [u8],
    counters: &mut Counters,
    key_of: K,
    mut host: H,
) -> Result<usize, TransportError>
where
    T: Transport,
    K: Fn(&T::Peer) -> u64,
    H: FnMut(T::Peer, RequestRepr<'_>, &mut [u8], &mut Counters) -> usize,
{
    let mut moved = if pending.is_empty() {
        0
    } else {
        drain(engine, transport, pending, scratch, counters)?
    };
    for _ in 0..BUDGET {
        let blocked = !pending.is_empty();
        let got = transport.recv(|peer, packet| {
            let key = key_of(&peer);
            if blocked && gsas_core::wire::peek_type(packet) == Some(PacketType::BulkRead) {
                let keep = packet.len().min(gsas_core::wire::HEADER_LEN);
                return Got::Stash(peer, key, packet[..keep].to_vec());
            }
            let (n, lazy) = match engine.prepare(key, packet) {
                Prepared::Reply(p) => {
                    let n = engine.execute(&p, scratch).unwrap_or_else(|e| {
                        log::error!("reply buffer of {} bytes too small: {e}", scratch.len());
                        0
                    });
                    (n, p.may_wait())
                }
                Prepared::Host(repr) => (host(peer, repr, scratch, counters), false),
                Prepared::Drop => (0, false),
            };
            Got::Reply(peer, n, lazy)
        })?;
        let Some(got) = got else {
            break;
        };
        moved += 1;
        match got {
            Got::Stash(peer, key, req) => {
                counters.replies_deferred += 1;
                pending.push_back(Deferred::Request(peer, key, req));
            }
            Got::Reply(_, 0, _) => {}
            Got::Reply(peer, n, _) if !pending.is_empty() => {
                counters.replies_deferred += 1;
                pending.push_back(Deferred::Reply(peer, scratch[..n].to_vec()));
            }
            Got::Reply(peer, n, lazy) => {
                let fill = |slot: &mut [u8]| slot.copy_from_slice(&scratch[..n]);
                let sent = if lazy {
                    transport.send_lazy(peer, n, fill)
                } else {
                    transport.send(peer, n, fill)
                };
                match sent {
                    Ok(()) => {}
                    Err(TransportError::WouldBlock) => {
                        counters.replies_deferred += 1;
                        pending.push_back(Deferred::Reply(peer, scratch[..n].to_vec()));
                    }
                    Err(
                        TransportError::Unreachable
                        | TransportError::UnknownPeer
                        | TransportError::TooLarge,
                    ) => {
                        counters.replies_dropped += 1;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(moved)
}
