//! gsas-node: the PE side of the gsas std runtime: the node client, "the GSAS API" a PE
//! programs against (the shmem crate builds on it), with [`pmi`], the PMI-1/PMI-2/PMIx
//! client a PE bootstraps with, and [`watch`], what makes a hang explain itself (a dead
//! local service noticed by every wait, the line each PE prints on SIGQUIT, the notes that
//! let `oshrun` name who waits for whom). A PE links this crate, the transports
//! (`gsas-transport`) and the control protocol (`gsas-control`), and nothing of the
//! service (`gsas-service`: when no service runs for its node, the node's leader PE starts
//! `gsas-atomicd --private`, see [`node_service`]), the launcher, the PMI server or remote
//! FORK (`gsas-launch`).
//!
//! **What it is.** [`Node::init`] bootstraps a PE (PMI, job identity, its node, its node's
//! atomic service, its segments, the mappings of its same-node peers; see [`boot`]) and
//! returns a [`Node`] through which the PE reads, writes and updates the memory of any PE
//! by `(pe, segment, offset)`:
//!
//! * **Same-node PEs** are reached directly: their heap, data and sync segments are mapped
//!   in this process, a put is a `memcpy`, an atomic a CPU atomic on the mapping
//!   ([`Node::local_base`] gives the pointer, for `shmem_ptr`). With `GSAS_DIRECT=0` these
//!   operations go through the local service over the PE's shm ring instead.
//! * **Other nodes** are reached through their services: gsas-core's client engine over
//!   `Reliable<NetTransport>` (UDP or Exanet), requests inline or as bulk fragments both ways, any length.
//! * **Other verbs nodes** (`transport = "verbs"`): puts and gets are RDMA WRITE and READ
//!   into the target PE's segments (`verbs.rs`), 64-bit integer atomics NIC atomics when
//!   every device reports `IBV_ATOMIC_GLOB`, other atomics go through the target node's
//!   service over UDP (`GSAS_VERBS_RMA=service` sends everything that way).
//!
//! Segments: [`HEAP`] (0, the symmetric heap, allocated with [`Node::alloc`] and friends,
//! deterministic so offsets agree on every PE), [`DATA`] (1, the executable's globals when
//! [`NodeOptions::remap_data`] is set) and [`SYNC`] (2, a 1 MiB synchronisation area: the
//! first [`SYNC_RESERVED`] bytes belong to [`Node::barrier_all`], the rest to the layer
//! above).
//!
//! **Completion and ordering** (OpenSHMEM semantics):
//!
//! * [`Node::put`] returns after *local* completion (the source may be reused); the data
//!   reaches the target by [`Node::quiet`]. A refusal of a put by the target is reported by
//!   the next `quiet` of its context.
//! * [`Node::put_signal`] updates a signal word after its data: to a PE reached through a
//!   service, in the write's own request (the service applies the signal after the data),
//!   not as a fence and an atomic.
//! * [`Node::get`] and [`Node::atomic`] return with the data / the old value.
//! * `_nbi` operations return once started; [`Node::quiet`] completes them (and writes the
//!   results of [`Node::get_nbi`] and [`Node::atomic_fetch_nbi`]).
//! * [`Node::fence`] orders delivery per context: for same-node PEs it is a release fence
//!   (stores are visible in order); for other nodes it waits until the context's
//!   outstanding operations complete, because the reliability layer does not keep per-peer
//!   order (frames of a burst may be delivered out of order). It is therefore as costly as
//!   `quiet` on the remote path.
//! * Outstanding operations are counted per context; `quiet` is a counter wait with
//!   progress and a deadline.
//!
//! **Progress** on the remote path (what makes operations move without `quiet`):
//!
//! * Blocking operations ([`Node::put`], [`Node::get`], [`Node::atomic`]) send the frame
//!   holding them before they return (and receive the replies that arrived meanwhile): a
//!   put returns at local completion with its request on the wire, so a flag set by a put
//!   reaches the target while the origin does something else.
//! * Non-blocking ones (`_nbi`) share frames: an operation waits in its open frame, for
//!   later ones to join it, until the frame is full or the next round of progress. Rounds
//!   of progress are run by every blocking operation, every wait (quiet, fence, barrier),
//!   [`Node::progress`], [`Node::poke`] (one round only if something is in flight: for
//!   loops that poll memory), and the progress keeper.
//! * The **progress keeper** (jobs with other nodes) is a thread that, while anything is in
//!   flight and no caller has driven progress for a tick (1 ms), runs a round itself when
//!   the lock is free: frames lost while the PE computes are retransmitted, and the
//!   services' reply frames acknowledged, without the program calling back in (a service
//!   that gets no acknowledgement for its deadline declares the PE unreachable). It takes no
//!   part in operations, so it does not add to their latency; see `keeper.rs` for why.
//! * **Waits for replies** (blocking gets and atomics to other nodes, `quiet`) spin for
//!   `GSAS_SPIN_US` before they block in `ppoll`, or only 5 us and without yielding when
//!   most recent waits blocked in the end anyway (more busy processes than cores: spinning
//!   then only delays the service that must answer); see `spin.rs`. They block on the UDP
//!   socket, or over Exanet on the PE's endpoint interrupt line, armed before each block
//!   (`wake.rs`).
//!
//! **Failures.** Every wait is bounded. An operation to a node whose service stops
//! answering fails after the deadline (`GSAS_DEADLINE_MS`) with
//! [`NodeError::Unreachable`] naming the node and address; a broken control connection to
//! the local service is noticed by the watchdog ([`crate::watch`]) as it happens, and
//! every wait then fails within one of its sleep steps with [`NodeError::ServiceGone`].
//! The watchdog also answers SIGQUIT: each wait prints what it waits for.
//!
//! **Files.** This file holds the types, the queries and the argument checks; `progress.rs`
//! the remote path's waits and operation bookkeeping; `rma.rs` put and get; `amo.rs`
//! atomics; `contexts.rs` contexts, quiet and fence; `alloc.rs` the symmetric heap;
//! `lifecycle.rs` barrier, abort, pause, leave and finalize; `boot.rs` init.
//!
//! **What it is not.** No collectives beyond [`Node::barrier_all`], no teams, no typed API
//! (the shmem crate adds them). The heap calls are local: the barriers OpenSHMEM puts
//! around `shmem_malloc` are the caller's.
//!
//! **Thread safety.** `Node` is `Send + Sync`. The direct path takes no lock (table
//! lookups and plain copies / CPU atomics). The remote path serialises on one mutex: each
//! call locks it to start an operation or to make progress, and waits unlock it between
//! polls, so several threads can use the node at once, best each with its own context
//! ([`Node::ctx_create`]). The progress keeper only ever `try_lock`s it.
//!
//! ```no_run
//! use gsas_node::{Ctx, HEAP, Node, NodeOptions};
//! use gsas_core::wire::{AtomicOp, AtomicType};
//!
//! let node = Node::init(NodeOptions::default())?;
//! let (me, n) = (node.rank(), node.size());
//! let counter = node.alloc(8)?.expect("8 bytes");   // the same offset on every PE
//! let slot = node.alloc(8)?.expect("8 bytes");
//! node.barrier_all()?;
//! // Put my rank into my right neighbour's slot; count myself on PE 0.
//! node.put(Ctx::DEFAULT, (me + 1) % n, HEAP, slot, &u64::from(me).to_le_bytes())?;
//! node.atomic(Ctx::DEFAULT, 0, HEAP, counter, AtomicOp::Add, AtomicType::U64, 1, 0)?;
//! node.barrier_all()?;
//! let mut got = [0u8; 8];
//! node.get(Ctx::DEFAULT, me, HEAP, slot, &mut got)?;
//! assert_eq!(u64::from_le_bytes(got), u64::from((me + n - 1) % n));
//! node.finalize()?;
//! # Ok::<(), gsas_node::NodeError>(())
//! ```

mod alloc;
mod amo;
pub mod boot;
mod contexts;
mod error;
mod keeper;
mod lifecycle;
mod local;
pub use local::atomic_at;
pub mod node_service;
pub mod pmi;
mod progress;
mod remote;
mod rma;
mod spin;
mod verbs;
mod wake;
pub mod watch;

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use gsas_core::symheap::{Slot, SymHeap};
use gsas_core::wire::GlobalAddr;

use crate::node_service::NodeService;

use gsas_control::ControlClient;
use gsas_transport::net::NetAddr;
use gsas_transport::poll::WaitConfig;
use gsas_transport::shm::Segment;

pub use error::NodeError;

use keeper::{Keeper, Pulse};
use remote::Route;
pub(crate) use wake::PeWake;

/// Segment id of the symmetric heap.
pub const HEAP: u8 = gsas_control::proto::SEG_HEAP;
/// Segment id of the data segment (globals; present when remapped).
pub const DATA: u8 = gsas_control::proto::SEG_DATA;
/// Segment id of the synchronisation area.
pub const SYNC: u8 = gsas_control::proto::SEG_SYNC;
/// Bytes at the start of the sync segment used by [`Node::barrier_all`].
pub const SYNC_RESERVED: u64 = 4096;
/// Number of contexts, including [`Ctx::DEFAULT`].
pub const MAX_CONTEXTS: usize = remote::CONTEXTS;

/// Segments a PE maps of each same-node peer.
const MAPPED: usize = 3;

/// How long finalize waits, at least, for its last acknowledgements once every operation
/// completed (one ack delay, 200 us, when the PE gets the CPU); the limit is the larger of
/// this and the reliability deadline, so that a PE sharing a loaded (or emulated) core does
/// not fail a clean finalize: a service silent for that long is unreachable anyway.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);

/// A communication context: operations are counted per context, and `quiet`/`fence`
/// apply to one context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ctx(u16);

impl Ctx {
    /// The default context (always exists).
    pub const DEFAULT: Ctx = Ctx(0);

    /// The context's index (0 for the default).
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// What the program asks of [`Node::init`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeOptions {
    /// Symmetric heap size per PE. `None`: `defaults.symmetric_size` of the cluster file,
    /// else 64 MiB.
    pub heap_size: Option<u64>,
    /// Remap the executable's globals onto shared memory (segment [`DATA`]). Must be asked
    /// before the process starts any thread (the C library does; Rust programs usually do
    /// not need it).
    pub remap_data: bool,
    /// Deadline for answers from other nodes' services. `None`: `GSAS_DEADLINE_MS`, the
    /// cluster file's `defaults.service_timeout_ms`, else 10 s.
    pub deadline: Option<Duration>,
    /// Metadata slots of the symmetric heap allocator (live blocks need at most 2n + 1).
    pub heap_slots: usize,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            heap_size: None,
            remap_data: false,
            deadline: None,
            heap_slots: 1 << 16,
        }
    }
}

/// How a PE's segment is reachable from here.
#[derive(Clone, Copy, Debug, Default)]
struct Mapping {
    base: usize,
    len: u64,
}

/// The node client; see the [module docs](self).
///
/// The fields fall into six groups (kept flat, not sub-structs, so that the direct path's
/// table lookups stay one load from `&Node`):
/// * identity: `rank`, `size`, `node`, `job_id`, `node_of`, `local_pes`, `nodes`;
/// * the direct path: `mappings`, `own_sizes`, `_maps`, `data`, `direct` (read without a lock);
/// * the remote path (`progress.rs`, `rma.rs`, `amo.rs`): `routes`, `pulse` (the one lock
///   the remote operations serialise on), `bell`, `keeper`, `udp_fd`, `exanet_wake`,
///   `reply_spin`, `ops_started`;
/// * the local service and the process manager: `control`, `control_fd`, `service`,
///   `service_path`, `pmi`, `watch_token` (the watchdog, `crate::watch`);
/// * per-PE state behind its own lock: `heap` (`alloc.rs`), `contexts` (`contexts.rs`),
///   `barrier_gen` (`lifecycle.rs`), `finalized`;
/// * timing: `wait`, `deadline`, `boot_timeout`.
pub struct Node {
    rank: u32,
    size: u32,
    node: u16,
    job_id: u64,
    /// The job key: the capability every packet of the job carries (services admit only
    /// keys they know; the collectives' direct endpoints only their job's).
    job_key: u64,
    /// UDP payload bytes per datagram of the job (its services' `udp_mtu`).
    udp_mtu: usize,
    node_of: Vec<u16>,
    local_pes: Vec<u32>,
    routes: Vec<Route>,
    /// `mappings[pe * MAPPED + seg]`: direct mappings (base 0 when not mapped here).
    mappings: Vec<Mapping>,
    /// Own segment sizes by id.
    own_sizes: [u64; MAPPED],
    /// Keeps the mappings alive: this PE's own segments, and its same-node peers' (without
    /// their descriptors, so that a node of many PEs does not run out of them).
    _maps: Vec<Segment>,
    _views: Vec<gsas_transport::shm::View>,
    data: Option<gsas_transport::shm::DataSegment>,
    /// The remote path behind its lock, and what its callers publish for the keeper.
    pulse: Arc<Pulse>,
    /// Whether other PEs' updates reach this PE's memory without its service, so that no
    /// bell rings for them (see [`Node::unbelled_updates`]).
    unbelled: bool,
    /// This PE's bell in the service's doorbell page (see [`Node::bell`]).
    bell: Option<gsas_transport::bell::BellRef>,
    /// The progress keeper (jobs with other nodes), stopped by leave (finalize).
    keeper: Mutex<Option<Keeper>>,
    control: Mutex<ControlClient>,
    control_fd: OwnedFd,
    /// The UDP socket, woken by replies (none over Exanet).
    udp_fd: Option<OwnedFd>,
    /// Over Exanet: the endpoint's interrupt line, which waits sleep on.
    exanet_wake: Option<PeWake>,
    /// Shared with the watchdog (`crate::watch`), which sends the launcher its notes.
    pmi: Arc<Mutex<pmi::Client>>,
    /// This node's registration with the watchdog.
    watch_token: u64,
    heap: Mutex<SymHeap<Vec<Slot>>>,
    contexts: Mutex<u64>,
    barrier_gen: Mutex<u64>,
    finalized: AtomicBool,
    service: Mutex<Option<Box<dyn NodeService>>>,
    service_path: PathBuf,
    nodes: Vec<(u16, NetAddr)>,
    wait: WaitConfig,
    /// How waits on replies from other nodes spin (see `spin.rs`).
    reply_spin: spin::ReplySpin,
    deadline: Duration,
    boot_timeout: Duration,
    direct: bool,
    ops_started: AtomicU64,
    /// Nothing of any context is in flight or unreported: set by a quiet that found every
    /// engine idle, every context without an error and nothing left to send; cleared when
    /// an operation starts. Both under the remote path's lock, so a reader that sees it
    /// set (one relaxed load, [`Node::settled_word`]) has nothing to complete that was started
    /// before its call.
    settled: AtomicBool,
    /// Writes of this PE sent on a path outside the node (the OpenSHMEM layer's
    /// point-to-point puts straight to another PE's endpoint) may be incomplete: set by
    /// [`Node::outside_begin`] under the remote path's lock, cleared by
    /// [`Node::outside_done`]. While it is set the node is never marked settled, and
    /// `quiet`, `fence` and every operation through a service first call the hook.
    outside: AtomicBool,
    /// What completes those writes (all of them, or those to one PE), set once by the
    /// layer that sends them ([`Node::set_outside_hook`]).
    outside_hook: std::sync::OnceLock<OutsideHook>,
}

/// Completes the writes a path outside the node sent: to every PE (`None`) or to one.
pub type OutsideHook = Box<dyn Fn(Option<u32>) -> Result<(), NodeError> + Send + Sync>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("node", &self.node)
            .field("job_id", &format_args!("{:016x}", self.job_id))
            .field("direct", &self.direct)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Bootstraps this PE; see [`boot`] for the steps.
    ///
    /// Errors: [`NodeError`] naming the step that failed (PMI, environment, cluster file,
    /// service discovery, Join, segments, mapping).
    pub fn init(options: NodeOptions) -> Result<Node, NodeError> {
        boot::init(options)
    }

    // -------------------------------------------------------------------------------
    // Queries

    /// This PE's rank.
    #[inline]
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of PEs.
    #[inline]
    pub fn size(&self) -> u32 {
        self.size
    }

    /// This PE's node id.
    pub fn node_id(&self) -> u16 {
        self.node
    }

    /// The job id.
    pub fn job_id(&self) -> u64 {
        self.job_id
    }

    /// The job key (see the field).
    pub fn job_key(&self) -> u64 {
        self.job_key
    }

    /// How long a peer may leave a packet unacknowledged before it is declared
    /// unreachable (`GSAS_DEADLINE_MS`).
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// UDP payload bytes per datagram of the job (`GSAS_UDP_MTU`, the services' `udp_mtu`).
    pub fn udp_mtu(&self) -> usize {
        self.udp_mtu
    }

    /// The node id of PE `pe` (`None` if `pe` is out of range).
    pub fn node_of(&self, pe: u32) -> Option<u16> {
        self.node_of.get(pe as usize).copied()
    }

    /// The PEs on this node, in rank order (this PE included).
    pub fn local_pes(&self) -> &[u32] {
        &self.local_pes
    }

    /// Whether `pe` runs on this node.
    #[inline]
    pub fn is_local(&self, pe: u32) -> bool {
        self.node_of.get(pe as usize) == Some(&self.node)
    }

    /// Whether this PE's writes to `pe` go through a service on the network (another node
    /// over UDP or Exanet), not into a mapping, through the shm ring or by RDMA.
    #[inline]
    pub fn writes_through_network_service(&self, pe: u32) -> bool {
        matches!(self.routes.get(pe as usize), Some(remote::Route::Net(_)))
    }

    /// A pointer to offset 0 of segment `seg` of PE `pe` if that segment is mapped in this
    /// process (this PE, and same-node PEs unless `GSAS_DIRECT=0`): a table lookup.
    #[inline]
    pub fn local_base(&self, pe: u32, seg: u8) -> Option<NonNull<u8>> {
        let m = self.mappings.get(pe as usize * MAPPED + usize::from(seg))?;
        if usize::from(seg) >= MAPPED {
            return None;
        }
        NonNull::new(m.base as *mut u8)
    }

    /// Size of this PE's segment `seg` (0 if absent); every PE of a job has the same sizes.
    pub fn segment_size(&self, seg: u8) -> u64 {
        self.own_sizes.get(usize::from(seg)).copied().unwrap_or(0)
    }

    /// The remapped data segment (address range of the globals), if any.
    pub fn data_segment(&self) -> Option<gsas_transport::shm::DataSegment> {
        self.data
    }

    /// Whether same-node PEs are reached directly (`GSAS_DIRECT`).
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// The nodes of the job with their services' addresses (UDP or Exanet).
    pub fn nodes(&self) -> &[(u16, NetAddr)] {
        &self.nodes
    }

    /// The control socket of this node's service.
    pub fn service_socket(&self) -> &std::path::Path {
        &self.service_path
    }

    // -------------------------------------------------------------------------------
    // Argument checks

    fn check_live(&self) -> Result<(), NodeError> {
        if self.finalized.load(Ordering::Acquire) {
            Err(NodeError::Finalized)
        } else {
            Ok(())
        }
    }

    fn check_target(
        &self,
        pe: u32,
        seg: u8,
        offset: u64,
        len: usize,
    ) -> Result<GlobalAddr, NodeError> {
        self.check_live()?;
        if pe >= self.size {
            return Err(NodeError::Invalid(format!(
                "PE {pe} does not exist (the job has {} PEs)",
                self.size
            )));
        }
        if usize::from(seg) >= MAPPED {
            return Err(NodeError::Invalid(format!(
                "segment {seg} is not a data segment (0 heap, 1 data, 2 sync)"
            )));
        }
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|e| e > GlobalAddr::MAX_OFFSET + 1) {
            return Err(NodeError::Invalid(format!(
                "offset {offset:#x} + {len} bytes is beyond the reach of a global address"
            )));
        }
        GlobalAddr::new(pe as u16, seg, offset).ok_or_else(|| {
            NodeError::Invalid(format!("offset {offset:#x} does not fit a global address"))
        })
    }

    /// The direct pointer for `len` bytes at `offset` of `seg` of `pe`, if mapped here.
    #[inline]
    fn direct_ptr(
        &self,
        pe: u32,
        seg: u8,
        offset: u64,
        len: usize,
    ) -> Result<Option<*mut u8>, NodeError> {
        if self.routes[pe as usize] != Route::Direct {
            return Ok(None);
        }
        let m = self.mappings[pe as usize * MAPPED + usize::from(seg)];
        if m.base == 0 {
            return Err(NodeError::Invalid(format!("PE {pe} has no segment {seg}")));
        }
        match offset.checked_add(len as u64) {
            Some(end) if end <= m.len => Ok(Some((m.base + offset as usize) as *mut u8)),
            _ => Err(NodeError::Invalid(format!(
                "{len} bytes at offset {offset:#x} are outside segment {seg} of PE {pe} ({} bytes)",
                m.len
            ))),
        }
    }

    fn ctx_index(&self, ctx: Ctx) -> Result<usize, NodeError> {
        let i = ctx.index();
        if i >= MAX_CONTEXTS || *lock(&self.contexts) & (1 << i) == 0 {
            return Err(NodeError::Invalid(format!("context {i} does not exist")));
        }
        Ok(i)
    }
}

// The node is shared between threads by design (see the module docs); make sure it stays so.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Node>();
};
