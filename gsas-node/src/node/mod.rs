//! The node client: the GSAS API a PE programs against (the shmem crate builds on it).
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
//! the local service is detected during waits and reported as [`NodeError::ServiceGone`].
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
//! use gsas_node::node::{Ctx, HEAP, Node, NodeOptions};
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
//! # Ok::<(), gsas_node::node::NodeError>(())
//! ```

pub mod boot;
mod error;
mod keeper;
mod local;
mod remote;
mod spin;
mod wake;

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{self, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use gsas_core::client::{ClientError, Issued};
use gsas_core::symheap::{Realloc, Slot, SymHeap};
use gsas_core::wire::{AtomicDesc, AtomicOp, AtomicType, GlobalAddr};

use crate::pmi;
use crate::poll::{PollFd, Progress, WaitConfig, WaitStats, Waiter, monotonic_ns};
use crate::service::{ControlClient, ServiceThread};
use crate::shm::Segment;
use crate::transport::net::NetAddr;
use crate::watched;

pub use error::NodeError;

use keeper::{Keeper, Pulse};
use remote::{OpDesc, Record, Remote, Route, Target};
pub(crate) use wake::PeWake;

/// Segment id of the symmetric heap.
pub const HEAP: u8 = crate::service::proto::SEG_HEAP;
/// Segment id of the data segment (globals; present when remapped).
pub const DATA: u8 = crate::service::proto::SEG_DATA;
/// Segment id of the synchronisation area.
pub const SYNC: u8 = crate::service::proto::SEG_SYNC;
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
pub struct Node {
    rank: u32,
    size: u32,
    node: u16,
    job_id: u64,
    node_of: Vec<u16>,
    local_pes: Vec<u32>,
    routes: Vec<Route>,
    /// `mappings[pe * MAPPED + seg]`: direct mappings (base 0 when not mapped here).
    mappings: Vec<Mapping>,
    /// Own segment sizes by id.
    own_sizes: [u64; MAPPED],
    /// Keeps the mappings alive.
    _maps: Vec<Segment>,
    data: Option<crate::shm::DataSegment>,
    /// The remote path behind its lock, and what its callers publish for the keeper.
    pulse: Arc<Pulse>,
    /// This PE's bell in the service's doorbell page (see [`Node::bell`]).
    bell: Option<crate::bell::BellRef>,
    /// The progress keeper (jobs with other nodes), stopped by finalize.
    keeper: Mutex<Option<Keeper>>,
    control: Mutex<ControlClient>,
    control_fd: OwnedFd,
    /// The UDP socket, woken by replies (none over Exanet).
    udp_fd: Option<OwnedFd>,
    /// Over Exanet: the endpoint's interrupt line, which waits sleep on.
    exanet_wake: Option<PeWake>,
    pmi: Mutex<pmi::Client>,
    heap: Mutex<SymHeap<Vec<Slot>>>,
    contexts: Mutex<u64>,
    barrier_gen: Mutex<u64>,
    finalized: AtomicBool,
    service: Mutex<Option<ServiceThread>>,
    service_path: PathBuf,
    nodes: Vec<(u16, NetAddr)>,
    wait: WaitConfig,
    /// How waits on replies from other nodes spin (see `spin.rs`).
    reply_spin: spin::ReplySpin,
    deadline: Duration,
    boot_timeout: Duration,
    direct: bool,
    ops_started: AtomicU64,
}

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
    pub fn data_segment(&self) -> Option<crate::shm::DataSegment> {
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

    // -------------------------------------------------------------------------------
    // Waiting and progress

    /// Waits until `step` returns a value, driving progress on the remote path in between.
    fn wait_for<R>(
        &self,
        what: &dyn std::fmt::Display,
        limit: Duration,
        step: impl FnMut(&mut Remote) -> Result<Option<R>, NodeError>,
    ) -> Result<R, NodeError> {
        self.wait_with(self.wait, what, limit, step).0
    }

    /// [`Node::wait_for`] for a reply from another node's service (a blocking operation's
    /// result, the completions `quiet` waits for): spins as [`spin::ReplySpin`] advises
    /// and tells it how the wait went.
    fn wait_reply<R>(
        &self,
        what: &dyn std::fmt::Display,
        limit: Duration,
        mut step: impl FnMut(&mut Remote) -> Result<Option<R>, NodeError>,
    ) -> Result<R, NodeError> {
        let plan = self.reply_spin.plan(self.wait);
        let mut looks = 0u32;
        let (r, stats) = self.wait_with(plan.config, what, limit, |remote| {
            looks = looks.saturating_add(1);
            step(remote)
        });
        self.reply_spin.record(plan, stats, looks > 1);
        r
    }

    /// [`Node::wait_for`] with the waiter configuration `config`; also returns the
    /// waiter's counters.
    fn wait_with<R>(
        &self,
        config: WaitConfig,
        what: &dyn std::fmt::Display,
        limit: Duration,
        mut step: impl FnMut(&mut Remote) -> Result<Option<R>, NodeError>,
    ) -> (Result<R, NodeError>, WaitStats) {
        let mut waiter = Waiter::new(config);
        let deadline = Instant::now() + limit;
        // What announces replies: the UDP socket, or the Exanet endpoint's interrupt line
        // (armed before each block). Without either (a closed line) the control socket
        // stands in (poll accepts a descriptor twice) and the bounded blocks poll.
        let line = self.exanet_wake.as_ref().filter(|w| w.usable());
        let wake = match (&self.udp_fd, line) {
            (Some(fd), _) => fd.as_fd(),
            (None, Some(w)) => w.fd.as_fd(),
            (None, None) => self.control_fd.as_fd(),
        };
        let mut fds = [
            PollFd::readable(wake),
            PollFd::readable(self.control_fd.as_fd()),
        ];
        let mut arm_line = || {
            if let Some(w) = line {
                w.arm();
            }
        };
        let arm: Option<&mut dyn FnMut()> = match line {
            Some(_) => Some(&mut arm_line),
            None => None,
        };
        let mut failure = None;
        let mut idle_steps = 0u32;
        let got = waiter.wait_armed(what, deadline, &mut fds, arm, || {
            let mut remote = self.pulse.lock();
            let activity = match self.drive(&mut remote) {
                Ok(a) => a,
                Err(e) => {
                    failure = Some(e);
                    return Progress::Done(None);
                }
            };
            match step(&mut remote) {
                Ok(Some(v)) => Progress::Done(Some(v)),
                Err(e) => {
                    failure = Some(e);
                    Progress::Done(None)
                }
                Ok(None) if activity => Progress::Busy,
                Ok(None) => {
                    drop(remote);
                    idle_steps += 1;
                    if idle_steps % 128 == 0
                        && gsas_sys::socket::peer_closed(self.control_fd.as_fd())
                    {
                        failure = Some(NodeError::ServiceGone {
                            path: self.service_path.clone(),
                        });
                        return Progress::Done(None);
                    }
                    Progress::Idle(None)
                }
            }
        });
        let stats = waiter.stats();
        let r = match got {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(failure
                .unwrap_or_else(|| NodeError::Transport("wait ended without a result".into()))),
            Err(crate::poll::WaitError::TimedOut { what, waited }) => {
                if gsas_sys::socket::peer_closed(self.control_fd.as_fd()) {
                    Err(NodeError::ServiceGone {
                        path: self.service_path.clone(),
                    })
                } else {
                    Err(NodeError::Timeout { what, waited })
                }
            }
            Err(crate::poll::WaitError::Poll(e)) => Err(NodeError::Transport(format!("poll: {e}"))),
        };
        (r, stats)
    }

    /// How long an operation may wait in total: the reliability deadline plus a margin, so
    /// that the layer's own, more precise error comes first.
    fn op_limit(&self) -> Duration {
        self.deadline + self.deadline / 2 + Duration::from_secs(1)
    }

    /// Checks that the local service still holds the control connection.
    ///
    /// Errors: [`NodeError::ServiceGone`] when it closed it (the service stopped or died).
    pub fn check_service(&self) -> Result<(), NodeError> {
        if gsas_sys::socket::peer_closed(self.control_fd.as_fd()) {
            Err(NodeError::ServiceGone {
                path: self.service_path.clone(),
            })
        } else {
            Ok(())
        }
    }

    /// One round of progress on the remote path (timers, open frames sent, replies
    /// received), published for the progress keeper.
    fn drive(&self, remote: &mut Remote) -> Result<bool, NodeError> {
        let r = remote.progress();
        self.pulse.driven(remote, monotonic_ns());
        r
    }

    /// Makes progress on the remote path once without waiting: sends what earlier
    /// non-blocking operations left in open frames, retransmits what is due, receives and
    /// matches replies, sends acknowledgements that are due.
    pub fn progress(&self) -> Result<(), NodeError> {
        self.drive(&mut self.pulse.lock()).map(|_| ())
    }

    /// [`Node::progress`] if the remote path has anything in flight (operations
    /// outstanding, frames not yet acknowledged, acknowledgements possibly owed); otherwise
    /// it returns after one atomic load. For loops that wait for memory to change
    /// (`shmem_test`, `shmem_wait_until`): they keep this PE's own operations moving at
    /// the cost of one round of progress per call while something is in flight.
    #[inline]
    pub fn poke(&self) -> Result<(), NodeError> {
        if self.pulse.pending() {
            self.progress()
        } else {
            Ok(())
        }
    }

    /// This PE's doorbell: the service rings it after applying an update that arrived
    /// from another node (or over the PE ring) to this PE's memory. Hand it to
    /// [`Waiter::wait_bell`](crate::poll::Waiter::wait_bell) when waiting for memory to
    /// change, so that the waiter's sleeps end when such an update lands instead of after
    /// their bounded step. Stores of same-node PEs made directly into this PE's mappings
    /// do not ring it. `None` when the service had no free slot (then waits sleep their
    /// bounded steps as without a bell).
    #[inline]
    pub fn bell(&self) -> Option<&crate::bell::Bell> {
        self.bell.as_ref().map(crate::bell::BellRef::bell)
    }

    /// Starts an operation through the engine of `route`; returns the record index.
    ///
    /// The operation is tried once under the lock; when the operation table or the
    /// transport is full, the call waits (with progress) for room. With `send_now`
    /// (blocking operations) one round of progress follows, which sends the frame holding
    /// the operation and receives the replies that arrived meanwhile. Without it
    /// (non-blocking operations) the operation stays in its open frame, to be joined by
    /// later ones, until the frame is full or the next round of progress (a blocking
    /// operation, a wait or test, `quiet`, or the progress keeper within a tick).
    fn start(
        &self,
        route: Route,
        record: Record,
        send_now: bool,
        op: impl Fn(&mut Remote, u64) -> Result<Option<Issued>, ClientError>,
    ) -> Result<(usize, Issued), NodeError> {
        let desc = record.desc;
        let node = record.node;
        let index;
        {
            let mut remote = self.pulse.lock();
            index = remote.book.insert(record);
            if !send_now && remote.crowded() {
                if let Err(e) = self.drive(&mut remote) {
                    remote.book.remove(index);
                    return Err(e);
                }
            }
            if matches!(route, Route::Net(_)) {
                remote.set_clock();
            }
            match op(&mut remote, index as u64) {
                Ok(Some(issued)) => {
                    set_handle(&mut remote, index, issued);
                    return self.started(&mut remote, route, index, issued, send_now);
                }
                Ok(None) => {}
                Err(e) => {
                    let err = self.client_error(&remote, route, node, &desc, e);
                    remote.book.remove(index);
                    return Err(err);
                }
            }
        }
        let outcome = self.wait_for(
            &format_args!("room to start the {desc}"),
            self.op_limit(),
            |remote| match op(remote, index as u64) {
                Ok(Some(issued)) => {
                    // Under the same lock: a reply may complete the operation as soon as
                    // the lock is released.
                    set_handle(remote, index, issued);
                    Ok(Some(issued))
                }
                Ok(None) => Ok(None),
                Err(e) => Err(self.client_error(remote, route, node, &desc, e)),
            },
        );
        match outcome {
            Ok(issued) => self.started(&mut self.pulse.lock(), route, index, issued, send_now),
            Err(e) => {
                self.pulse.lock().book.remove(index);
                Err(e)
            }
        }
    }

    /// The bookkeeping after operation `index` started and got its handle (see
    /// [`Node::start`]).
    fn started(
        &self,
        remote: &mut Remote,
        route: Route,
        index: usize,
        issued: Issued,
        send_now: bool,
    ) -> Result<(usize, Issued), NodeError> {
        if route == Route::Ring {
            remote.ring_doorbell();
        }
        self.ops_started.fetch_add(1, Ordering::Relaxed);
        self.pulse.mark_pending(!send_now);
        if send_now {
            if let Err(e) = self.drive(remote) {
                abandon(remote, index);
                return Err(e);
            }
        }
        Ok((index, issued))
    }

    fn client_error(
        &self,
        remote: &Remote,
        route: Route,
        node: u16,
        desc: &OpDesc,
        e: ClientError,
    ) -> NodeError {
        match (e, route) {
            (
                ClientError::Transport(gsas_core::transport::TransportError::Unreachable),
                Route::Net(p),
            ) => remote.book.peer_error(node, p.addr),
            (e, _) => NodeError::Transport(format!("{desc}: {e}")),
        }
    }

    /// Waits for the blocking record `index` and returns its result.
    fn finish(&self, index: usize, desc: &OpDesc) -> Result<Option<u64>, NodeError> {
        let r = self.wait_reply(&format_args!("the {desc}"), self.op_limit(), |remote| {
            let done = remote.book.get(index).is_some_and(|r| r.result.is_some());
            if !done {
                return Ok(None);
            }
            let rec = remote.book.remove(index).expect("present");
            Ok(Some(match rec.result.expect("checked above") {
                Ok(v) => Ok(v),
                Err(e) => Err(remote.book.op_error(&rec, e)),
            }))
        });
        match r {
            Ok(v) => v,
            Err(e) => {
                abandon(&mut self.pulse.lock(), index);
                Err(e)
            }
        }
    }

    fn record(
        &self,
        ctx: usize,
        route: Route,
        pe: u32,
        desc: OpDesc,
        blocking: bool,
        target: Target,
    ) -> Record {
        Record {
            ctx,
            route,
            node: self.node_of[pe as usize],
            desc,
            blocking,
            abandoned: false,
            target,
            handle: None,
            result: None,
        }
    }

    // -------------------------------------------------------------------------------
    // RMA

    /// Writes `data` to `offset` of segment `seg` of PE `pe`; returns after local completion
    /// (the data has been copied out of `data`, and a remote write has been sent).
    /// Completion (delivery confirmed, refusals reported) is [`Node::quiet`] on `ctx`.
    pub fn put(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        data: &[u8],
    ) -> Result<(), NodeError> {
        self.put_inner(ctx, pe, seg, offset, data, false)
    }

    /// Like [`Node::put`], but may return before the whole payload is handed to the
    /// transport: the rest is copied and sent by later progress. Completed by
    /// [`Node::quiet`].
    pub fn put_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        data: &[u8],
    ) -> Result<(), NodeError> {
        self.put_inner(ctx, pe, seg, offset, data, true)
    }

    fn put_inner(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        data: &[u8],
        nbi: bool,
    ) -> Result<(), NodeError> {
        if data.is_empty() {
            return self.check_live();
        }
        let addr = self.check_target(pe, seg, offset, data.len())?;
        if let Some(p) = self.direct_ptr(pe, seg, offset, data.len())? {
            // SAFETY: `p .. p + len` lies inside a live shared mapping (checked by
            // direct_ptr); `data` is a valid slice and cannot overlap a mapping of another
            // PE's segment (or is the same bytes if the program copies within its own).
            unsafe { watched::store_once(data.as_ptr(), p, data.len()) };
            return Ok(());
        }
        let ctx = self.ctx_index(ctx)?;
        let route = self.routes[pe as usize];
        let desc = OpDesc {
            kind: "put",
            pe,
            seg,
            offset,
            len: data.len(),
        };
        let rec = self.record(ctx, route, pe, desc, false, Target::Write { payload: None });
        let (index, issued) = self.start(route, rec, !nbi, |remote, tag| match route {
            Route::Net(peer) => remote::try_start(&mut remote.udp, |c, t| {
                c.write(t, peer, ctx, tag, addr, data)
            }),
            Route::Ring => match &mut remote.ring {
                Some(e) => {
                    remote::try_start(e, |c, t| c.write(t, remote::RING, ctx, tag, addr, data))
                }
                None => Err(ClientError::StaleHandle),
            },
            Route::Direct => Err(ClientError::StaleHandle),
        })?;
        if issued.all_sent {
            return Ok(());
        }
        if nbi {
            let mut r = self.pulse.lock();
            if let Some(rec) = r.book.get_mut(index) {
                rec.target = Target::Write {
                    payload: Some(data.to_vec()),
                };
                r.book.unsent.push(index);
            }
            return Ok(());
        }
        // Blocking: send the rest from the caller's buffer.
        let handle = issued.handle;
        self.wait_for(
            &format_args!("sending the {desc}"),
            self.op_limit(),
            |remote| {
                let r = match route {
                    Route::Net(_) => {
                        remote
                            .udp
                            .client
                            .resume(&mut remote.udp.transport, handle, data)
                    }
                    Route::Ring => match &mut remote.ring {
                        Some(e) => e.client.resume(&mut e.transport, handle, data),
                        None => Err(ClientError::StaleHandle),
                    },
                    Route::Direct => Err(ClientError::StaleHandle),
                };
                match r {
                    Ok(s) if s.all_sent => {
                        if route == Route::Ring {
                            remote.ring_doorbell();
                        }
                        Ok(Some(()))
                    }
                    Ok(s) => {
                        if route == Route::Ring && s.packets > 0 {
                            remote.ring_doorbell();
                        }
                        Ok(None)
                    }
                    // Completed (refused) before everything was sent: the error is in the book.
                    Err(ClientError::StaleHandle) => Ok(Some(())),
                    Err(e) => Err(NodeError::Transport(format!("{desc}: {e}"))),
                }
            },
        )?;
        // The last fragments may still be in an open frame.
        self.progress()
    }

    /// Reads `dest.len()` bytes at `offset` of segment `seg` of PE `pe` into `dest`;
    /// returns when the data is there.
    pub fn get(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        dest: &mut [u8],
    ) -> Result<(), NodeError> {
        if dest.is_empty() {
            return self.check_live();
        }
        self.check_target(pe, seg, offset, dest.len())?;
        if let Some(p) = self.direct_ptr(pe, seg, offset, dest.len())? {
            // SAFETY: `p .. p + len` lies inside a live shared mapping; `dest` is a valid,
            // exclusively borrowed slice.
            unsafe { watched::load_once(p, dest.as_mut_ptr(), dest.len()) };
            return Ok(());
        }
        // SAFETY: `dest` stays borrowed (and valid) until this call returns, which waits
        // for the operation; on a failed wait the record stops writing to it.
        let index =
            unsafe { self.get_start(ctx, pe, seg, offset, dest.as_mut_ptr(), dest.len(), true)? };
        let desc = OpDesc {
            kind: "get",
            pe,
            seg,
            offset,
            len: dest.len(),
        };
        self.finish(index, &desc).map(|_| ())
    }

    /// Starts reading `len` bytes at `offset` of segment `seg` of PE `pe` into `dest`;
    /// the data is there after [`Node::quiet`] on `ctx`.
    ///
    /// # Safety
    ///
    /// `dest` must be valid for writes of `len` bytes until `quiet(ctx)` returns (or the
    /// node is dropped), and must not be read or written by anything else until then.
    pub unsafe fn get_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        dest: *mut u8,
        len: usize,
    ) -> Result<(), NodeError> {
        if len == 0 {
            return self.check_live();
        }
        self.check_target(pe, seg, offset, len)?;
        if let Some(p) = self.direct_ptr(pe, seg, offset, len)? {
            // SAFETY: `p .. p + len` lies inside a live mapping; the caller guarantees
            // `dest` is valid for `len` bytes.
            unsafe { watched::load_once(p, dest, len) };
            return Ok(());
        }
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.get_start(ctx, pe, seg, offset, dest, len, false) }.map(|_| ())
    }

    /// Starts a remote read into `dest`.
    ///
    /// # Safety
    ///
    /// `dest` valid for `len` bytes until the record completes (blocking: the caller
    /// waits; non-blocking: until quiet).
    #[allow(clippy::too_many_arguments)]
    unsafe fn get_start(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        dest: *mut u8,
        len: usize,
        blocking: bool,
    ) -> Result<usize, NodeError> {
        let addr = self.check_target(pe, seg, offset, len)?;
        let ctx = self.ctx_index(ctx)?;
        let route = self.routes[pe as usize];
        let desc = OpDesc {
            kind: "get",
            pe,
            seg,
            offset,
            len,
        };
        let rec = self.record(
            ctx,
            route,
            pe,
            desc,
            blocking,
            Target::Read {
                dest: dest as usize,
            },
        );
        let (index, _) = self.start(route, rec, blocking, |remote, tag| match route {
            Route::Net(peer) => {
                remote::try_start(&mut remote.udp, |c, t| c.read(t, peer, ctx, tag, addr, len))
            }
            Route::Ring => match &mut remote.ring {
                Some(e) => {
                    remote::try_start(e, |c, t| c.read(t, remote::RING, ctx, tag, addr, len))
                }
                None => Err(ClientError::StaleHandle),
            },
            Route::Direct => Err(ClientError::StaleHandle),
        })?;
        Ok(index)
    }

    // -------------------------------------------------------------------------------
    // Atomics

    /// Validates an atomic on `pe`'s segment `seg` at `offset` (defined for the type,
    /// operands that fit, a target inside the segment, natural alignment) and returns its
    /// descriptor with the direct pointer when the target is mapped on this node.
    #[allow(clippy::too_many_arguments)]
    fn amo_target(
        &self,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> Result<(AtomicDesc, Option<*mut u8>), NodeError> {
        let desc = Self::amo_desc(op, ty, operand, comparand)?;
        let width = desc.width();
        self.check_target(pe, seg, offset, width)?;
        if offset % width as u64 != 0 {
            return Err(NodeError::Invalid(format!(
                "atomic at offset {offset:#x} is not aligned to {width} bytes"
            )));
        }
        Ok((desc, self.direct_ptr(pe, seg, offset, width)?))
    }

    fn amo_desc(
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> Result<AtomicDesc, NodeError> {
        let desc = AtomicDesc::new(op, ty)
            .map_err(|_| NodeError::Invalid(format!("atomic {op:?} is not defined on {ty:?}")))?;
        let mask = desc.operand_mask();
        if operand & !mask != 0 || (desc.has_comparand() && comparand & !mask != 0) {
            return Err(NodeError::Invalid(format!(
                "atomic operand {operand:#x} or comparand {comparand:#x} does not fit {ty:?}"
            )));
        }
        Ok(desc)
    }

    /// Runs atomic `op` on the `ty` at `offset` of segment `seg` of PE `pe` and returns the
    /// old value (32-bit types zero-extended; floats as bits). Non-fetching operations
    /// (SET, ADD, INC, AND, OR, XOR) also wait for completion and return 0. `comparand` is
    /// used by COMPARE_SWAP only.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> Result<u64, NodeError> {
        let (desc, direct) = self.amo_target(pe, seg, offset, op, ty, operand, comparand)?;
        let width = desc.width();
        if let Some(p) = direct {
            // SAFETY: `p` lies in a live shared mapping, aligned (mapping bases are page
            // aligned and offset is a multiple of the width), accessed atomically by PEs
            // and the service.
            let old = unsafe { local::atomic_at(p, desc, operand, comparand) };
            return Ok(if desc.fetches() { old } else { 0 });
        }
        let index = self.amo_start(ctx, pe, seg, offset, desc, operand, comparand, true, None)?;
        let d = OpDesc {
            kind: "atomic",
            pe,
            seg,
            offset,
            len: width,
        };
        Ok(self.finish(index, &d)?.unwrap_or(0))
    }

    /// Posts a non-fetching atomic (a fetching `op` is executed and its value dropped);
    /// completion needs [`Node::quiet`]. A remote request may wait in its open frame until
    /// the next round of progress (see the [module docs](self)); follow with
    /// [`Node::progress`] to send it at once (a blocking OpenSHMEM AMO does).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> Result<(), NodeError> {
        // SAFETY: no destination is written.
        unsafe { self.amo_nbi(ctx, pe, seg, offset, op, ty, operand, comparand, None) }
    }

    /// Starts a fetching atomic whose old value (`ty`'s width, little-endian) is written to
    /// `dest` by [`Node::quiet`] on `ctx`.
    ///
    /// # Safety
    ///
    /// `dest` must be valid for writes of 4 (32-bit types) or 8 bytes until `quiet(ctx)`
    /// returns and not be accessed by anything else until then.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn atomic_fetch_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
        dest: *mut u8,
    ) -> Result<(), NodeError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.amo_nbi(ctx, pe, seg, offset, op, ty, operand, comparand, Some(dest)) }
    }

    /// # Safety
    ///
    /// `dest`, if given, valid for the width until quiet.
    #[allow(clippy::too_many_arguments)]
    unsafe fn amo_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
        dest: Option<*mut u8>,
    ) -> Result<(), NodeError> {
        let (desc, direct) = self.amo_target(pe, seg, offset, op, ty, operand, comparand)?;
        let width = desc.width();
        if let Some(p) = direct {
            // SAFETY: as in `atomic`.
            let old = unsafe { local::atomic_at(p, desc, operand, comparand) };
            if let Some(d) = dest {
                // SAFETY: the caller guarantees `d` is valid for `width` bytes.
                unsafe { watched::store_once(old.to_le_bytes().as_ptr(), d, width) };
            }
            return Ok(());
        }
        self.amo_start(
            ctx,
            pe,
            seg,
            offset,
            desc,
            operand,
            comparand,
            false,
            dest.map(|d| d as usize),
        )
        .map(|_| ())
    }

    #[allow(clippy::too_many_arguments)]
    fn amo_start(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        desc: AtomicDesc,
        operand: u64,
        comparand: u64,
        blocking: bool,
        dest: Option<usize>,
    ) -> Result<usize, NodeError> {
        let addr = self.check_target(pe, seg, offset, desc.width())?;
        let ctx = self.ctx_index(ctx)?;
        let route = self.routes[pe as usize];
        let d = OpDesc {
            kind: "atomic",
            pe,
            seg,
            offset,
            len: desc.width(),
        };
        let rec = self.record(
            ctx,
            route,
            pe,
            d,
            blocking,
            Target::Atomic {
                dest,
                width: desc.width(),
            },
        );
        let (index, _) = self.start(route, rec, blocking, |remote, tag| match route {
            Route::Net(peer) => remote::try_start(&mut remote.udp, |c, t| {
                c.atomic(t, peer, ctx, tag, addr, desc, operand, comparand)
            }),
            Route::Ring => match &mut remote.ring {
                Some(e) => remote::try_start(e, |c, t| {
                    c.atomic(t, remote::RING, ctx, tag, addr, desc, operand, comparand)
                }),
                None => Err(ClientError::StaleHandle),
            },
            Route::Direct => Err(ClientError::StaleHandle),
        })?;
        Ok(index)
    }

    // -------------------------------------------------------------------------------
    // Contexts, quiet, fence

    /// Creates a context (up to [`MAX_CONTEXTS`] - 1 besides the default).
    pub fn ctx_create(&self) -> Result<Ctx, NodeError> {
        self.check_live()?;
        let mut used = lock(&self.contexts);
        let free = (!*used).trailing_zeros() as usize;
        if free >= MAX_CONTEXTS {
            return Err(NodeError::Invalid(format!(
                "all {MAX_CONTEXTS} contexts are in use"
            )));
        }
        *used |= 1 << free;
        Ok(Ctx(free as u16))
    }

    /// Completes the context's operations and frees it. Destroying the default context is
    /// refused.
    pub fn ctx_destroy(&self, ctx: Ctx) -> Result<(), NodeError> {
        if ctx == Ctx::DEFAULT {
            return Err(NodeError::Invalid(
                "the default context cannot be destroyed".into(),
            ));
        }
        self.quiet(ctx)?;
        *lock(&self.contexts) &= !(1u64 << ctx.index());
        Ok(())
    }

    /// Waits until every operation of `ctx` has completed (remote writes delivered, reads
    /// and fetched values written) and returns the first error of its non-blocking
    /// operations, if any. Ends with a full memory fence.
    pub fn quiet(&self, ctx: Ctx) -> Result<(), NodeError> {
        let i = self.ctx_index(ctx)?;
        self.check_live()?;
        let limit = self.op_limit();
        self.wait_reply(
            &format_args!("the operations of context {i} to complete"),
            limit,
            |remote| {
                Ok((remote.outstanding(i) == 0 && remote.book.unsent.is_empty()).then_some(()))
            },
        )?;
        atomic::fence(Ordering::SeqCst);
        match self
            .pulse
            .lock()
            .book
            .ctx_error
            .get_mut(i)
            .and_then(Option::take)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Orders the delivery of the context's earlier puts and atomics before later ones;
    /// see the [module docs](self) for how.
    pub fn fence(&self, ctx: Ctx) -> Result<(), NodeError> {
        let i = self.ctx_index(ctx)?;
        let pending = self.pulse.lock().outstanding(i) > 0;
        if pending {
            self.quiet(ctx)
        } else {
            atomic::fence(Ordering::Release);
            Ok(())
        }
    }

    // -------------------------------------------------------------------------------
    // Symmetric heap

    /// Allocates `size` bytes of the symmetric heap; `Ok(None)` for size 0. Returns the
    /// offset (the same on every PE that makes the same calls).
    pub fn alloc(&self, size: u64) -> Result<Option<u64>, NodeError> {
        self.check_live()?;
        Ok(lock(&self.heap).malloc(size)?)
    }

    /// Allocates `count * size` zeroed bytes.
    pub fn calloc(&self, count: u64, size: u64) -> Result<Option<u64>, NodeError> {
        self.check_live()?;
        let off = lock(&self.heap).calloc(count, size)?;
        if let Some(off) = off {
            let len = count.saturating_mul(size);
            let base = self.mappings[self.rank as usize * MAPPED + usize::from(HEAP)].base;
            // SAFETY: the allocator returned `off .. off + len` inside this PE's heap
            // mapping, which stays mapped while `self` lives.
            unsafe { std::ptr::write_bytes((base + off as usize) as *mut u8, 0, len as usize) };
        }
        Ok(off)
    }

    /// Allocates `size` bytes aligned to `alignment` (a power of two, at least 8).
    pub fn align(&self, alignment: u64, size: u64) -> Result<Option<u64>, NodeError> {
        self.check_live()?;
        Ok(lock(&self.heap).align(alignment, size)?)
    }

    /// Resizes a block (copying this PE's contents when it moves); see gsas-core's
    /// [`SymHeap::realloc`].
    pub fn realloc(&self, block: Option<u64>, size: u64) -> Result<Option<u64>, NodeError> {
        self.check_live()?;
        let mut heap = lock(&self.heap);
        let r = heap.realloc(block, size)?;
        if let Realloc::Moved { from, to, copy_len } = r {
            let base = self.mappings[self.rank as usize * MAPPED + usize::from(HEAP)].base;
            // SAFETY: both ranges lie in this PE's heap mapping and do not overlap (the
            // allocator guarantees it); the copy happens before the next allocator call.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (base + from as usize) as *const u8,
                    (base + to as usize) as *mut u8,
                    copy_len as usize,
                )
            };
        }
        Ok(r.offset())
    }

    /// Frees a block.
    pub fn free(&self, offset: u64) -> Result<(), NodeError> {
        self.check_live()?;
        Ok(lock(&self.heap).free(offset)?)
    }

    // -------------------------------------------------------------------------------
    // Barrier, abort, finalize

    /// `quiet` on the default context, then a dissemination barrier over all PEs on
    /// counters in the sync segment (atomic adds: CPU atomics for same-node PEs, through
    /// the services otherwise). Waits spin, then yield, then sleep; bounded by the boot
    /// timeout plus the deadline, with an error naming the round and the PE waited for.
    pub fn barrier_all(&self) -> Result<(), NodeError> {
        self.quiet(Ctx::DEFAULT)?;
        let mut generation = lock(&self.barrier_gen);
        *generation += 1;
        let g = *generation;
        let n = self.size;
        if n == 1 {
            return Ok(());
        }
        let mine = self.mappings[self.rank as usize * MAPPED + usize::from(SYNC)].base;
        let mut dist = 1u32;
        let mut round = 0u64;
        while dist < n {
            let to = (self.rank + dist) % n;
            let from = (self.rank + n - dist) % n;
            self.atomic_nbi(
                Ctx::DEFAULT,
                to,
                SYNC,
                round * 64,
                AtomicOp::Add,
                AtomicType::U64,
                1,
                0,
            )?;
            // SAFETY: offset round * 64 < SYNC_RESERVED lies in this PE's own sync mapping,
            // 8-byte aligned; every writer uses atomics.
            let counter =
                unsafe { AtomicU64::from_ptr((mine + (round * 64) as usize) as *mut u64) };
            let limit = self.boot_timeout + self.deadline;
            self.wait_for(
                &format_args!("barrier {g}, round {round}: PE {from}"),
                limit,
                |_| Ok((counter.load(Ordering::Acquire) >= g).then_some(())),
            )?;
            dist = dist.saturating_mul(2);
            round += 1;
        }
        atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    /// Ends the whole job: logs `message`, tells the process manager (PMI abort with
    /// `code`) and exits this process with `code`.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        self.report_abort(code, message);
        std::process::exit(code)
    }

    /// The first half of [`Node::abort`]: logs `message` and tells the process manager
    /// that the job ends with `code` (PMI abort), but leaves ending this process to the
    /// caller; for callers that must not call `exit` (an exit handler: a second `exit`
    /// is undefined behaviour, `_exit` is the way out).
    pub fn report_abort(&self, code: i32, message: &str) {
        log::error!("PE {} aborts the job (code {code}): {message}", self.rank);
        if let Err(e) = lock(&self.pmi).abort(code, message) {
            log::error!("PMI abort: {e}");
        }
    }

    /// Completes every context, waits for all PEs (barrier), leaves the service and says
    /// goodbye to PMI. Further operations fail with [`NodeError::Finalized`]. Calling it
    /// again does nothing.
    pub fn finalize(&self) -> Result<(), NodeError> {
        if self.finalized.load(Ordering::Acquire) {
            return Ok(());
        }
        let used = *lock(&self.contexts);
        for i in (0..MAX_CONTEXTS).filter(|i| used & (1 << i) != 0) {
            self.quiet(Ctx(i as u16))?;
        }
        self.barrier_all()?;
        // The barrier's last increments are non-blocking: complete them before leaving,
        // or the PEs they went to could wait for them in vain.
        self.quiet(Ctx::DEFAULT)?;
        // A PE that cannot settle still leaves the service and PMI (so that neither keeps
        // its state), and then reports the failure.
        let settled = self.settle();
        if let Some(mut keeper) = lock(&self.keeper).take() {
            keeper.stop();
        }
        self.finalized.store(true, Ordering::Release);
        let left = lock(&self.control)
            .leave(self.rank as u16, self.job_id)
            .map_err(NodeError::from)
            .and_then(|()| {
                lock(&self.pmi)
                    .finalize()
                    .map_err(error::pmi("PMI finalize"))
            });
        if let Some(service) = lock(&self.service).take() {
            boot::stop_embedded(service, self.boot_timeout);
        }
        match (settled, left) {
            (Err(e), Err(also)) => {
                log::error!("finalize: after failing to settle, leaving failed too: {also}");
                Err(e)
            }
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
        }
    }

    /// Before leaving, after every operation completed: lets the reliability layer
    /// acknowledge the last replies, so that no service keeps retransmitting a reply to a
    /// closed socket until it declares the PE unreachable. Usually an ack delay (200 us);
    /// bounded by [`SETTLE_LIMIT`] or the reliability deadline, whichever is longer. A PE
    /// that cannot settle does not pretend it left cleanly: the error names the services
    /// and what was outstanding.
    fn settle(&self) -> Result<(), NodeError> {
        let settled = self.wait_for(
            &"the last replies to be acknowledged",
            SETTLE_LIMIT.max(self.deadline),
            |remote| Ok(remote.settled().then_some(())),
        );
        match settled {
            Ok(()) => Ok(()),
            Err(NodeError::Timeout { waited, .. }) => Err(NodeError::Timeout {
                what: format!(
                    "PE {} to settle before leaving ({})",
                    self.rank,
                    self.pulse.lock().unsettled()
                ),
                waited,
            }),
            Err(e) => Err(e),
        }
    }

    /// Operations started through a service since init (diagnostics).
    pub fn remote_ops_started(&self) -> u64 {
        self.ops_started.load(Ordering::Relaxed)
    }
}

/// Records the engine's handle of the operation that record `index` stands for.
fn set_handle(remote: &mut Remote, index: usize, issued: Issued) {
    if let Some(rec) = remote.book.get_mut(index) {
        rec.handle = Some(issued.handle);
    }
}

/// Makes the blocking record `index`, whose caller stops waiting, free itself when the
/// engine completes or aborts the operation (or frees it now if it already completed); late
/// data then goes nowhere.
fn abandon(remote: &mut Remote, index: usize) {
    if remote.book.get(index).is_some_and(|r| r.result.is_some()) {
        // It completed meanwhile: nobody will take the result.
        remote.book.remove(index);
    } else if let Some(rec) = remote.book.get_mut(index) {
        rec.blocking = false;
        rec.abandoned = true;
        if let Target::Read { .. } = rec.target {
            // The caller's buffer is going away: late data must not land there.
            rec.target = Target::Write { payload: None };
        }
        if let Target::Atomic { dest, .. } = &mut rec.target {
            *dest = None;
        }
    }
}

// The node is shared between threads by design (see the module docs); make sure it stays so.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Node>();
};
