//! The service loop: job table, control connections, serving the network (UDP or Exanet)
//! and rings, polling.
//!
//! See the [module docs](super) for the behaviour. Internals: one [`Core`] owns every
//! descriptor and the gsas-core atomic service; its serve loop
//! ([`AtomicService::serve_port`], the one the tests and benchmarks run too) serves one transport
//! (the network or a ring) with the same code; replies that cannot be sent at once (window
//! or ring full) are queued per transport ([`PortQueue`]) and sent in order per peer, and
//! while they wait new BULK_READ requests are kept as requests, so a reply is never lost
//! and memory stays bounded.
//!
//! Files: this one holds the state ([`Core`], its jobs, PEs, connections, ring ports and
//! doorbell page) and the binding; `event_loop.rs` the loop, its sweeps and the poll;
//! `data_plane.rs` the serving of the network and the rings; `control.rs` the control
//! protocol; `segments.rs` the segment registry and the end of a job.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{self, AtomicU32};
use std::time::{Duration, Instant};

use gsas_core::service::{PortQueue, Service as AtomicService};
use gsas_core::transport::Transport;
use gsas_core::wire::SenderId;

use gsas_transport::bell::{Bell, BellRef, slot_offset};
use gsas_transport::exanet::{HEADER_LEN as EXA_HEADER_LEN, WakeLine};
use gsas_transport::net::{NetPeer, NetTransport};
use gsas_transport::shm::{Segment, ShmError, ShmMemory};
use gsas_transport::shmring::{RingPeer, ShmRing};
use gsas_transport::udp::{UdpConfig, UdpTransport};

use super::peers::{JobIndex, job_share};
use super::stats::{Counters, Gauges};
use super::{ForkHandler, ForkProgress, ServiceConfig, ServiceError, UidPolicy, Wake};
use gsas_control::proto::{
    ControlReply, ControlRequest, ExanetInfo, JoinInfo, MAX_MESSAGE, SEG_DATA, SEG_HEAP, SEG_RING,
    SEG_SYNC, SEGMENTS, ServiceInfo,
};
use gsas_sys::event::{EventFd, SignalFd};
use gsas_sys::socket::{self, PeerCred};
use gsas_transport::reliable::{OwnedReliable, reliable_config};

mod control;
mod data_plane;
mod event_loop;
mod segments;

/// Frames in flight per peer of the inter-node transport (UDP or Exanet).
pub(crate) const NET_WINDOW: usize = 32;
/// Segments the atomic service can hold (over all jobs).
const MAX_SEGMENTS: usize = 4096;
/// Frame buffers of the service's reliability layer.
const NET_FRAMES: usize = 256;
/// Replies of one network peer that may wait for room (its window full: it does not
/// acknowledge) before the service stops taking its new frames: without the bound a peer
/// that reads at full speed and never acknowledges had the service execute every request
/// and keep every reply (tens of MB per deadline), and other jobs' replies waited behind
/// them.
pub(crate) const PEER_QUEUE_CAP: usize = 16;
/// BULK_READ requests of one network peer kept (32 bytes each, executed as its window
/// opens) before the service stops taking its new frames: a get of a well-behaved PE of
/// up to 60 MiB (1,024 fragments) stays below it; a larger one has its next frame wait
/// for a retransmission.
pub(crate) const PEER_KEPT_REQUESTS_CAP: usize = 1024;
/// Requests served from one transport per loop turn before the others get a turn.
const BUDGET: usize = 256;
/// Largest segment (the reach of a 40-bit offset).
const MAX_SEGMENT: u64 = 1 << 40;
/// Largest sync segment.
const MAX_SYNC: u64 = 16 << 20;
/// Largest ring slot count and total ring segment.
const MAX_RING_BYTES: u64 = 64 << 20;
/// How often control sockets are checked while the loop is busy.
const CONTROL_EVERY: Duration = Duration::from_millis(1);
/// Shortest block while reliability timers are pending (see `Core::block_bound`).
const BLOCK_TIMERS: Duration = Duration::from_millis(1);
/// Bound of a block when idle.
const BLOCK_IDLE: Duration = Duration::from_millis(100);
/// How long a reply on a control connection may wait for room.
const CONTROL_SEND_TIMEOUT: Duration = Duration::from_millis(500);
/// Jobs whose end is remembered (for the message a late request gets).
const TOMBSTONES: usize = 64;
/// Most jobs that ended cleanly whose network peers are kept at once (closed, TCP's
/// TIME_WAIT; see `segments.rs`); when one more ends, the oldest one's are freed early.
const LINGERING_JOBS: usize = 64;
/// How often idle peers are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Refusals of one kind logged at warn one by one before only powers of two are.
const LOGGED_REFUSALS: u64 = 8;

type NetLayer = OwnedReliable<NetTransport, NET_WINDOW, JobIndex>;
type ShmService = AtomicService<ShmMemory, MAX_SEGMENTS>;

/// A PE of a job.
struct Pe {
    conn: usize,
    pid: u32,
    left: bool,
    /// Segments 0..=2 (registered with the atomic service).
    segments: [Option<Arc<Segment>>; 3],
    /// The PE's slot in the doorbell page (its bell), if one was free.
    bell: Option<u32>,
}

/// A job with PEs on this node.
struct Job {
    id: u64,
    key: u64,
    /// The atomic service's job number.
    number: u32,
    uid: u32,
    npes: u32,
    pes: BTreeMap<u16, Pe>,
}

/// An allocation root declared: what one user may run on this node under it.
#[derive(Clone, Copy, Debug)]
struct Allocation {
    uid: u32,
    pes: u32,
    job_pes: u32,
    memory: u64,
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
    pending: PortQueue<RingPeer>,
}

/// The page PEs look at to decide whether to ring the eventfd; it also holds the PEs'
/// bells ([`gsas_transport::bell`]), one slot per joined PE.
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
    net: NetLayer,
    udp_addr: SocketAddr,
    net_pending: PortQueue<NetPeer>,
    /// Network peers whose new frames are not taken (their replies pile up,
    /// [`PEER_QUEUE_CAP`]).
    paused: Vec<NetPeer>,
    /// The Exanet endpoint's interrupt line (services on Exanet).
    wake_line: Option<WakeLine>,
    service: Box<ShmService>,
    conns: Vec<Option<Conn>>,
    jobs: HashMap<u64, Job>,
    /// Allocations root declared, by id (see [`ServiceConfig::require_allocation`]).
    allocations: HashMap<u64, Allocation>,
    tombstones: VecDeque<(u64, String)>,
    /// Jobs that ended cleanly whose network peers linger (closed in the layer), oldest
    /// first, with the time from which they may be freed.
    lingering: VecDeque<(u64, Instant)>,
    next_number: u32,
    memory_used: u64,
    rings: Vec<RingPort>,
    doorbell: Doorbell,
    wake: Arc<Wake>,
    signals: Option<SignalFd>,
    fork: Option<Box<dyn ForkHandler>>,
    /// Host peers whose FORK request was accepted in the current pass (handed to the peer
    /// index after it).
    proven: Vec<NetPeer>,
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
    /// Refusals of the network layer seen for logging: unknown job, full shares, and
    /// frames of jobs that ended here.
    refusals_logged: [u64; 3],
    /// A descriptor held in reserve (`/dev/null`): when the process is out of descriptors
    /// it is closed to accept, refuse and close the pending control connection.
    spare_fd: Option<OwnedFd>,
    /// Until when the listener is left out of the poll set (out of descriptors, no spare).
    accept_paused_until: Option<Instant>,
    /// Connections refused for lack of descriptors since the last warning, and when that
    /// warning was written.
    fd_refusals: (u64, Option<Instant>),
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

/// The node's memory limit when neither `GSAS_MEMORY_LIMIT` nor `nodes[].memory` sets one,
/// in percent of its physical memory: the rest stays for the operating system and the
/// programs' own (not symmetric) memory, so that two users' shares together cannot take
/// the whole machine.
pub const DEFAULT_NODE_MEMORY_PERCENT: u64 = 90;

/// The node's memory limit when none is configured: [`DEFAULT_NODE_MEMORY_PERCENT`] of
/// [`physical_memory`] (`u64::MAX` if unknown).
pub fn default_memory_limit() -> u64 {
    let phys = physical_memory();
    if phys == u64::MAX {
        return phys;
    }
    u64::try_from(u128::from(phys) * u128::from(DEFAULT_NODE_MEMORY_PERCENT) / 100)
        .unwrap_or(u64::MAX)
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
fn new_net(cfg: &ServiceConfig) -> Result<(NetLayer, Option<WakeLine>), ServiceError> {
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
    let mut index = JobIndex::default();
    index.set_user_limit(cfg.user_shares().map(|s| s.peers));
    let layer = OwnedReliable::with_index(net, rc, cfg.max_peers.max(1), NET_FRAMES, index)
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
        let (net, wake_line) = new_net(&cfg)?;
        let udp_addr = net
            .inner()
            .udp()
            .map_or(cfg.udp_bind, UdpTransport::local_addr);
        let listener = socket::listen(&cfg.socket_path, cfg.socket_mode).map_err(io_err(
            format!("{}: control socket {}", cfg.name, cfg.socket_path.display()),
        ))?;
        let bells = cfg.max_pes.min(MAX_BELLS);
        let page = Segment::create(
            &format!("gsas-node{}-doorbell", cfg.node),
            gsas_transport::bell::page_len(bells),
        )
        .map_err(shm_err("creating the doorbell page"))?;
        let event = EventFd::new().map_err(io_err("creating the doorbell eventfd"))?;
        let wake = Arc::new(Wake {
            flag: atomic::AtomicBool::new(false),
            event: EventFd::new().map_err(io_err("creating the shutdown eventfd"))?,
        });
        let max_reply = net.capabilities().mtu;
        let mut service = Box::new(ShmService::new(
            SenderId::new(u64::from(cfg.node)).unwrap_or_default(),
            ShmMemory::new(),
        ));
        service.set_max_reply_len(max_reply);
        // SAFETY: getuid and getpid cannot fail.
        let (uid, pid) = unsafe { (libc::getuid(), libc::getpid() as u32) };
        let memory_limit = match cfg.memory_limit {
            Some(m) => (
                m,
                "the node's memory limit (GSAS_MEMORY_LIMIT, else `memory` in its nodes[] \
                 entry of the cluster file)",
            ),
            None => (
                default_memory_limit(),
                "90% of this machine's physical memory (the node's limit when neither \
                 GSAS_MEMORY_LIMIT nor `memory` in its nodes[] entry of the cluster file \
                 sets one)",
            ),
        };
        match net.inner().exanet() {
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
            net,
            udp_addr,
            net_pending: PortQueue::new(),
            paused: Vec::new(),
            wake_line,
            service,
            conns: Vec::new(),
            jobs: HashMap::new(),
            allocations: HashMap::new(),
            tombstones: VecDeque::new(),
            lingering: VecDeque::new(),
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
            proven: Vec::new(),
            counters: Counters::default(),
            uid,
            pid,
            max_reply,
            memory_limit,
            last_sweep: Instant::now(),
            refusals_logged: [0; 3],
            spare_fd: control::spare_descriptor(),
            accept_paused_until: None,
            fd_refusals: (0, None),
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
        self.net.index_mut().serve_host_actions(true);
    }

    pub(crate) fn set_signals(&mut self, signals: SignalFd) {
        self.signals = Some(signals);
    }
}

/// What a control request produced.
enum Outcome {
    Ack,
    Data(Vec<u8>, Vec<OwnedFd>),
    Stats(String),
    /// An encoded [`gsas_control::proto::SegmentBatch`] and its descriptors.
    Segments(Vec<u8>, Vec<OwnedFd>),
}
