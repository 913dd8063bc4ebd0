//! The collectives' own endpoint: signals, and data with them, sent straight to the
//! waiting PE over UDP, not through the services.
//!
//! **What it is.** A cross-node collective signal used to be an atomic add through the
//! receiver's atomic service: PE -> service (another process, which must be running) ->
//! memory -> the waiting PE. On a machine where PEs and services share cores, and on a
//! loaded one, each hop through a process that is not on a CPU costs a scheduling delay
//! or a wake-up (about 70 us on the development VM). Here every PE of a job that spans
//! nodes over UDP owns one more UDP socket, and a collective sends its cross-node signal
//! (a counter increment, the same word the service path would add to) to the receiving
//! PE's socket; the receiver, which is waiting for exactly that signal, polls the socket
//! and applies the increment to its own memory. Data of a step up to
//! `SHMEM_COLL_DIRECT_MAX` bytes travels with its flag (the receiver writes it with
//! [`gsas_transport::watched::store_once`], then increments the flag), so a broadcast or
//! allgather step costs datagrams instead of a put, a quiet (a round trip through the
//! service) and an add. Data larger than a packet (`SHMEM_COLL_DIRECT_CHUNK`, by default
//! what a datagram of the job's UDP MTU holds, see [`chunk`]) is cut into several, applied
//! in order, the flag with the last; mail (data the receiver keeps for the collective to
//! take, see [`Msg`]) is cut into parts the same way. Larger data still goes through the
//! services (their bandwidth path); only its flag comes here.
//!
//! **Reliability: the runtime's one layer.** The packets travel in the frames of
//! `gsas_core::reliable` (through [`OwnedReliable`] over a [`UdpTransport`]), the layer
//! that carries every PE's requests to the services: exactly-once delivery of every
//! packet or a report that its peer is unreachable, selective acknowledgements, a
//! round-trip-time estimate with the runtime's retransmission floor (`MIN_RTO`, 20 ms), a
//! window of frames per peer and a shared pool of frame buffers as back-pressure, and the
//! deadline (`GSAS_DEADLINE_MS`) after which a PE that acknowledges nothing is named in a
//! fatal error instead of being waited for until `SHMEM_WAIT_TIMEOUT`. The layer delivers
//! frames as they arrive, not in order; collectives need order per sender (the data of a
//! step before its flag, mail parts in order, consecutive signals of one sender counted in
//! sequence, see `layout`), so every packet carries its number in the stream from its
//! sender to its receiver ([`header`]) and a receiver applies packets in that order,
//! keeping the few that arrive ahead of a lost one (at most a window of frames) until the
//! gap is filled.
//!
//! **While the program computes.** Every PE with an endpoint runs a keeper thread. When no
//! caller drove the endpoint for a nap ([`TICK`] while frames are in flight, [`IDLE_NAP`]
//! otherwise) and its lock is free, the keeper receives what arrived (applying it) and lets
//! the layer acknowledge and resend. So a frame lost on the network is resent although its
//! sender computes outside the library (the root of a broadcast returns at once), and a PE
//! that computes acknowledges what it was sent within about [`IDLE_NAP`], well below the
//! retransmission floor. It takes no part in collectives: callers that wait drive the
//! endpoint themselves. `shmem_finalize` waits up to [`FLUSH_LIMIT`] until the other PEs
//! acknowledged everything, then stops the keeper.
//!
//! **Security.** A frame counts only if it carries the job key (the capability the
//! services check on every request, see `gsas_transport::udp`): the layer
//! gives no peer state to a sender with another key. A packet from a PE outside the job,
//! from an address other than the one that PE published, or naming memory outside the
//! receiver's segments is dropped.
//!
//! **Point-to-point puts** ([`p2p_put`], `SHMEM_P2P_DIRECT_MAX`, 1 KiB by default). A
//! blocking put (`shmem_p`, `shmem_put`, `shmem_putmem`, ...) to a PE of another node that
//! fits one packet goes to that PE's endpoint too, marked [`URGENT`]: the flag exchange
//! that applications do then wakes no service on either side. A blocking
//! `shmem_put_signal` of such data goes the same way, its signal value in the same packet
//! (applied after the data). The receiver applies it when
//! it drives its endpoint (every wait and test of memory does, [`drive_p2p`]; while such
//! puts flow ([`ACTIVE_FOR`]) a wait that sleeps sleeps on the socket ([`sleep`]),
//! so the put wakes it once, and the keeper passes the doorbell's rings on to it; when no
//! caller drove the endpoint for [`DRIVEN_RECENTLY`] or a thread of the PE sleeps on its
//! doorbell, the keeper thread blocks on the socket and applies it at once), rings the
//! PE's doorbell and acknowledges it: at once when the keeper applied
//! it, else with the PE's next call (its answer to the sender carries the
//! acknowledgement), or the keeper's soon after. A put sent here is never reordered with
//! another write of the PE to the same PE (two writes through a service are ordered by
//! `fence`, as before), by two rules: such a put goes here only while nothing of the PE's
//! is in flight through a service ([`gsas_node::Node::outside_begin`]), and every later
//! operation through a service to that PE, and every `quiet` and `fence`, first waits
//! until every frame to that PE is acknowledged ([`complete`], the node's outside hook).
//! That means every packet was applied there: the layer acknowledges a frame only once all
//! its packets were taken, and a packet held behind a lost one is acknowledged before it
//! is applied, but the lost one is not.
//!
//! **What it is not.** Not used within a node (shared memory is faster), over Exanet (the
//! PEs have no UDP socket there), to PEs reached by RDMA (verbs), or with
//! `SHMEM_COLL_DIRECT_MAX=0`; then every signal and put goes through the services as
//! before. Not for gets, atomics, non-blocking puts (`shmem_put_signal_nbi` included) or
//! puts inside a batch session.
//!
//! **Thread-safety.** One endpoint per process, behind a mutex that the callers and the
//! keeper thread take (the keeper only with `try_lock`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gsas_core::reliable::{Admission, PeerEvent, PeerIndex, Refusal, RefusalReason};
use gsas_core::transport::{Transport, TransportError};
use gsas_core::wire::SignalOp;
use gsas_node::{Ctx as NodeCtx, SYNC};
use gsas_transport::net::NetAddr;
use gsas_transport::reliable::{MapIndex, OwnedReliable, reliable_config};
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};

use super::layout;
use crate::addr::SymAddr;
use crate::fatal::fatal;
use crate::state::State;

mod header;
mod lossy;

use header::{
    HEADER, Header, KIND_ADD, KIND_MAIL, KIND_NOTE, KIND_PART, KIND_PUT, KIND_PUT_ADD,
    KIND_PUT_SIGNAL_ADD, KIND_PUT_SIGNAL_SET, LOSE_ONCE, NOWHERE, SIGNAL_BYTES, URGENT,
};
use lossy::Lossy;

/// How long `shmem_finalize` waits for acknowledgements.
pub const FLUSH_LIMIT: Duration = Duration::from_secs(2);
/// How often the keeper thread looks while frames are in flight (well below the
/// retransmission floor, so a resend is late by at most about this much).
pub const TICK: Duration = Duration::from_millis(2);
/// How often it looks otherwise: frames that arrive while the program computes are
/// acknowledged within about this much (below the retransmission floor, so the sender does
/// not resend).
pub const IDLE_NAP: Duration = Duration::from_millis(10);
/// Frames in flight per peer (the layer's window).
const WINDOW: usize = 32;
/// Frame buffers shared by all peers of one endpoint.
const FRAMES: usize = 64;
/// Socket buffers asked for (the kernel caps them at `net.core.rmem_max`/`wmem_max`).
const SOCKBUF: usize = 4 << 20;
/// Data is cut into packets at multiples of this many bytes of the receiver's address (the
/// runtime's fragment granule), so that no aligned element is split between two packets.
const GRANULE: usize = gsas_core::wire::GRANULE;

/// The signal of a point-to-point put-with-signal ([`p2p_put`]).
#[derive(Clone, Copy, Debug)]
pub struct P2pSignal {
    /// The signal word (8-byte aligned, checked by the caller).
    pub at: SymAddr,
    pub op: SignalOp,
    pub value: u64,
}

/// What a packet carries besides its number.
#[derive(Clone, Copy, Debug)]
pub enum Msg<'a> {
    /// An increment of the receiver's flag word (8-byte aligned).
    Add(SymAddr),
    /// Bytes for the receiver's memory at the address, then an increment of the flag.
    PutAdd(SymAddr, &'a [u8], SymAddr),
    /// Bytes for the receiver's memory, no flag (more data or a flag follows).
    Put(SymAddr, &'a [u8]),
    /// Bytes for the receiver's mailbox of (sender, flag), then an increment of the flag:
    /// data the receiver takes with [`take_mail`] instead of reading it from the sender.
    Mail(&'a [u8], SymAddr),
    /// Bytes for the receiver's mailbox of (sender, key), no flag: the receiver waits for
    /// them with [`has_note`] and takes them with [`take_note`].
    Note(u64, &'a [u8]),
}

/// The mailbox segment byte of notes (no segment has it).
const NOTE: u8 = 0xff;

/// The layer's peer index: slots by address in order of first appearance, for frames with
/// the job key only.
struct JobPeers {
    map: MapIndex<UdpPeer>,
    key: u64,
}

impl PeerIndex<UdpPeer> for JobPeers {
    fn slot(&mut self, peer: UdpPeer, capacity: usize) -> Option<usize> {
        self.map.slot(peer, capacity)
    }

    fn find(&self, peer: UdpPeer, capacity: usize) -> Option<usize> {
        self.map.find(peer, capacity)
    }

    fn admit(&mut self, peer: UdpPeer, _capacity: usize) -> Admission<UdpPeer> {
        if peer.key == self.key {
            Admission::Admit
        } else {
            Admission::Refuse(Refusal {
                reason: RefusalReason::UnknownJob,
                in_use: 0,
                limit: 0,
            })
        }
    }
}

type Net = OwnedReliable<Lossy, WINDOW, JobPeers>;

/// What this PE knows of another PE's endpoint, and the order of the packets between them.
#[derive(Default)]
struct Peer {
    /// Its address, once read or heard from (`Some(None)`: the peer has no endpoint).
    addr: Option<Option<SocketAddr>>,
    /// Number of the next packet to it.
    next_out: u64,
    /// Number of the next packet from it to apply.
    next_in: u64,
    /// Packets from it that arrived ahead of `next_in`, by number.
    ahead: BTreeMap<u64, Vec<u8>>,
}

type MailKey = (u32, u8, u64);

/// Buffers kept for reuse, at most [`SPARE_BYTES`] of them.
#[derive(Default)]
struct Spare {
    list: Vec<Vec<u8>>,
    bytes: usize,
}

/// Most bytes of buffers kept for reuse.
const SPARE_BYTES: usize = 4 << 20;

impl Spare {
    /// An empty buffer (a reused one if any).
    fn take(&mut self) -> Vec<u8> {
        let mut v = self.list.pop().unwrap_or_default();
        self.bytes -= v.capacity();
        v.clear();
        v
    }

    /// Keeps `v` for reuse if there is room.
    fn give(&mut self, v: Vec<u8>) {
        if v.capacity() > 0 && self.bytes + v.capacity() <= SPARE_BYTES {
            self.bytes += v.capacity();
            self.list.push(v);
        }
    }
}

/// What arrives: the order per sender, the mailboxes.
struct Inbox {
    peers: Vec<Peer>,
    /// Mail by (sender, flag segment, flag offset), in arrival order.
    mail: HashMap<MailKey, VecDeque<Vec<u8>>>,
    /// The parts of mail still arriving, by the same key.
    parts: HashMap<MailKey, Vec<u8>>,
    /// Buffers to reuse (mail taken, packets held): fresh large allocations cost page
    /// faults every time, since the allocator returns them to the system.
    spare: Spare,
    /// When the last data frame arrived (its acknowledgement may still be owed).
    last_in: Instant,
    /// Senders of point-to-point puts applied in this round: acknowledged at its end.
    urgent: Vec<SocketAddr>,
    /// Senders owed an acknowledgement of point-to-point puts applied by a caller's drive
    /// (since [`Shared::owed_since`]).
    owed: Vec<SocketAddr>,
}

struct Endpoint {
    net: Net,
    inbox: Inbox,
    job_key: u64,
    /// Data bytes per packet.
    chunk: usize,
    /// The PEs this PE sent point-to-point puts that may not be acknowledged yet (their
    /// marks in [`Shared::dirty`] are set).
    dirty: Vec<u32>,
    /// The PEs a point-to-point put is being handed to the layer for (one entry per
    /// put; `push` may wait without the lock).
    sending: Vec<u32>,
}

/// The endpoint and what its keeper thread watches.
struct Shared {
    ep: Mutex<Endpoint>,
    /// The socket, for waiting on it without the lock.
    fd: RawFd,
    /// [`now_ns`] when a caller last drove the endpoint.
    last_drive: AtomicU64,
    /// Frames were in flight at the last drive.
    pending: AtomicBool,
    stop: AtomicBool,
    keeper: Mutex<Option<JoinHandle<()>>>,
    /// Most bytes of a point-to-point put sent here (`SHMEM_P2P_DIRECT_MAX`; 0: none).
    p2p_max: usize,
    /// Per world PE: point-to-point puts to it may not be acknowledged yet (set and
    /// cleared under the lock, read without it by [`complete`]).
    dirty: Vec<AtomicBool>,
    /// Point-to-point puts sent, and applied from others (for tests and `SHMEM_DEBUG`).
    p2p_sent: AtomicU64,
    /// The keeper thread, for [`sleeping`].
    keeper_thread: OnceLock<std::thread::Thread>,
    /// [`now_ns`] when acknowledgements of point-to-point puts were first left owed by a
    /// caller's drive (0: none are): the keeper sends them after [`ACK_SOON`].
    owed_since: AtomicU64,
    /// The keeper sent the last owed acknowledgements (the program made no call that did
    /// within [`ACK_SOON`]).
    keeper_acked: AtomicBool,
    /// A thread of this PE sleeps on the socket ([`sleep`]): `1 << 32 | seq`, the doorbell
    /// sequence its announcement read; 0 when none does.
    bridge: AtomicU64,
    /// Signalled by the keeper when the doorbell rang after `bridge`'s sequence: it ends
    /// that thread's sleep (`None`: no eventfd could be made; then nobody sleeps on the
    /// socket).
    rung: Option<gsas_sys::event::EventFd>,
    /// Threads of this PE in [`sleep`] that sleep on the doorbell, not on the socket: the
    /// keeper watches the socket for them.
    bell_sleepers: AtomicU32,
}

static EP: OnceLock<Option<Shared>> = OnceLock::new();

fn shared() -> Option<&'static Shared> {
    EP.get().and_then(Option::as_ref)
}

fn ep() -> Option<&'static Mutex<Endpoint>> {
    shared().map(|s| &s.ep)
}

fn lock(m: &Mutex<Endpoint>) -> MutexGuard<'_, Endpoint> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Nanoseconds since the first call (a monotonic clock).
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The word that publishes this PE's endpoint: IPv4 address << 16 | port, bit 63 set.
fn encode(a: SocketAddrV4) -> u64 {
    1 << 63 | u64::from(a.ip().to_bits()) << 16 | u64::from(a.port())
}

fn decode(w: u64) -> Option<SocketAddr> {
    (w >> 63 == 1).then(|| {
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from_bits((w >> 16) as u32),
            w as u16,
        ))
    })
}

/// Opens the endpoint and publishes it in this PE's sync segment, starts its keeper
/// thread; then a barrier of all PEs, so that every PE's word is final before any is read.
/// Every PE calls this (the barrier is taken whenever the job spans nodes, whatever this
/// PE's settings).
pub fn setup(st: &'static State) {
    let nodes = st.node.nodes();
    if nodes.len() < 2 {
        let _ = EP.set(None);
        return;
    }
    let mine = nodes
        .iter()
        .find(|(id, _)| *id == st.node.node_id())
        .map(|(_, a)| *a);
    let ip = match mine {
        Some(NetAddr::Udp(SocketAddr::V4(a))) if st.config.coll_direct_max > 0 => Some(*a.ip()),
        _ => None,
    };
    let ep = ip.and_then(|ip| open(st, ip));
    let word = ep
        .as_ref()
        .map_or(0, |e| match e.net.inner().udp.local_addr() {
            SocketAddr::V4(a) => encode(a),
            SocketAddr::V6(_) => 0,
        });
    publish(st, word);
    let _ = EP.set(ep.filter(|_| word != 0).map(|e| Shared {
        fd: e.net.inner().udp.as_raw_fd(),
        ep: Mutex::new(e),
        last_drive: AtomicU64::new(0),
        pending: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        keeper: Mutex::new(None),
        p2p_max: usize::try_from(st.config.p2p_direct_max).unwrap_or(usize::MAX),
        dirty: (0..st.npes).map(|_| AtomicBool::new(false)).collect(),
        p2p_sent: AtomicU64::new(0),
        keeper_thread: OnceLock::new(),
        owed_since: AtomicU64::new(0),
        keeper_acked: AtomicBool::new(false),
        bridge: AtomicU64::new(0),
        rung: gsas_sys::event::EventFd::new().ok(),
        bell_sleepers: AtomicU32::new(0),
    }));
    // Receiving point-to-point puts is on wherever the endpoint is (a PE with
    // SHMEM_P2P_DIRECT_MAX=0 may still be sent some by PEs without it); the limit only
    // decides what this PE sends.
    if shared().is_some() {
        P2P.store(true, Ordering::Relaxed);
        st.node.set_outside_hook(Box::new(move |pe| {
            complete(st, pe);
            Ok(())
        }));
    }
    if let Some(sh) = shared() {
        match std::thread::Builder::new()
            .name("gsas-coll-keeper".into())
            .spawn(move || keep(st, sh))
        {
            Ok(t) => {
                let _ = sh.keeper_thread.set(t.thread().clone());
                *sh.keeper.lock().unwrap_or_else(PoisonError::into_inner) = Some(t);
            }
            Err(e) => fatal(
                "shmem_init",
                format_args!("starting the collectives' keeper thread: {e}"),
            ),
        }
    }
    if let Err(e) = st.node.barrier_all() {
        fatal("shmem_init", e);
    }
}

/// The endpoint on `ip`, or `None` (after saying why when debugging) if it cannot be made:
/// then this PE's collectives use the services.
fn open(st: &State, ip: Ipv4Addr) -> Option<Endpoint> {
    let why = match build(st, ip) {
        Ok(e) => return Some(e),
        Err(why) => why,
    };
    if st.config.debug {
        gsas_transport::eprintln_whole!(
            "gsas-shmem: PE {}: no collective endpoint ({why}): collectives use the services",
            st.me
        );
    }
    None
}

fn build(st: &State, ip: Ipv4Addr) -> Result<Endpoint, String> {
    let udp = UdpTransport::bind(
        SocketAddr::new(IpAddr::V4(ip), 0),
        UdpConfig {
            mtu: st.node.udp_mtu(),
            socket_buffer: SOCKBUF,
        },
    )
    .map_err(|e| format!("a UDP socket on {ip}: {e}"))?;
    let job_key = st.node.job_key();
    let index = JobPeers {
        map: MapIndex::default(),
        key: job_key,
    };
    let net = Net::with_index(
        Lossy::new(udp),
        reliable_config(st.node.deadline()),
        st.npes as usize,
        FRAMES,
        index,
    )
    .map_err(|e| format!("the reliability layer: {e}"))?;
    let chunk = chunk(st, net.capabilities().mtu);
    Ok(Endpoint {
        net,
        inbox: Inbox {
            peers: (0..st.npes)
                .map(|_| Peer {
                    next_out: 1,
                    next_in: 1,
                    ..Peer::default()
                })
                .collect(),
            mail: HashMap::new(),
            parts: HashMap::new(),
            spare: Spare::default(),
            last_in: Instant::now(),
            urgent: Vec::new(),
            owed: Vec::new(),
        },
        job_key,
        chunk,
        dirty: Vec::new(),
        sending: Vec::new(),
    })
}

/// Writes this PE's endpoint word (0: none) into its sync segment.
fn publish(st: &State, w: u64) {
    let base = st
        .mapped_base(st.me, SYNC)
        .unwrap_or_else(|| fatal("shmem_init", "this PE's sync segment is not mapped"));
    let p = base + layout::ENDPOINT as usize;
    // SAFETY: the first word of the endpoint record of this PE's own sync segment
    // (aligned, mapped for the life of the job); readers use atomics or the service.
    unsafe { AtomicU64::from_ptr(p as *mut u64) }.store(w, Ordering::Release);
}

/// The endpoint of PE `pe` (read through its service once, then remembered), with the
/// endpoint's lock `e` (of `m`) held on return. Once known it costs nothing more than the
/// lock the caller holds. The first time, the read through the service is made without
/// the lock, so that this PE's keeper (and every other thread) still acknowledges the
/// frames sent to it meanwhile: on a crowded machine such a read can take seconds, and
/// the peers that send to this PE must not take it for gone. Two threads may both read
/// it; they read the same record (a PE publishes its endpoint once, before the last
/// start-up barrier).
fn peer_addr<'a>(
    st: &State,
    m: &'a Mutex<Endpoint>,
    e: MutexGuard<'a, Endpoint>,
    pe: u32,
    call: &str,
) -> (MutexGuard<'a, Endpoint>, Option<SocketAddr>) {
    if let Some(a) = e.inbox.peers[pe as usize].addr {
        return (e, a);
    }
    drop(e);
    let mut rec = [0u8; 8];
    if let Err(err) = st
        .node
        .get(NodeCtx::DEFAULT, pe, SYNC, layout::ENDPOINT, &mut rec)
    {
        fatal(call, err);
    }
    let a = decode(u64::from_le_bytes(rec));
    let mut e = lock(m);
    e.inbox.peers[pe as usize].addr = Some(a);
    (e, a)
}

/// Whether signals to world PE `pe` (of another node) go straight to it.
pub fn reaches(st: &State, pe: u32, call: &str) -> bool {
    let Some(m) = ep() else { return false };
    if st.node.is_local(pe) {
        return false;
    }
    peer_addr(st, m, lock(m), pe, call).1.is_some()
}

/// Whether world PE `pe` (of any node) has a collective endpoint: for choices that every
/// PE of a group must make alike (a PE without one reaches no one and no one reaches it).
pub fn has_endpoint(st: &State, pe: u32, call: &str) -> bool {
    let Some(m) = ep() else { return false };
    peer_addr(st, m, lock(m), pe, call).1.is_some()
}

/// Most data bytes one step sends with its flag (`SHMEM_COLL_DIRECT_MAX`).
pub fn data_max(st: &State) -> usize {
    usize::try_from(st.config.coll_direct_max).unwrap_or(usize::MAX)
}

/// Data bytes per packet: `SHMEM_COLL_DIRECT_CHUNK`, else what one packet of the layer
/// (MTU `packet_mtu`) holds after the [`HEADER`]; at most that, and a multiple of
/// [`GRANULE`] (the data of a step is cut at multiples of it).
fn chunk(st: &State, packet_mtu: usize) -> usize {
    let most = packet_mtu.saturating_sub(HEADER);
    let c = st
        .config
        .coll_direct_chunk
        .map_or(most, |c| usize::try_from(c).unwrap_or(most).min(most));
    (c / GRANULE * GRANULE).max(GRANULE.min(most))
}

/// Bytes of the packet that carries data from `off` of `len` bytes, at most `chunk`: put
/// data (destination offset `dest`, segments start on pages) is cut at multiples of
/// [`GRANULE`] of its destination address, so only the first piece may be shorter; mail is
/// cut every `chunk` bytes.
fn piece(dest: Option<u64>, off: usize, len: usize, chunk: usize) -> usize {
    let room = match dest {
        Some(d) if off == 0 => chunk.saturating_sub(d as usize % GRANULE).max(1),
        _ => chunk,
    };
    (len - off).min(room)
}

/// Sends `msg` to world PE `pe` (which [`reaches`]): data larger than a packet goes in
/// several, in order, the flag (or the mail) with the last.
pub fn send(st: &State, pe: u32, msg: Msg<'_>, call: &str) {
    let sh = shared().unwrap_or_else(|| fatal(call, "internal error: no collective endpoint"));
    let (kind, flag, at, data) = match msg {
        Msg::Add(f) => (KIND_ADD, f, NOWHERE, &[][..]),
        Msg::PutAdd(at, d, f) => (KIND_PUT_ADD, f, at, d),
        Msg::Put(at, d) => (KIND_PUT, NOWHERE, at, d),
        Msg::Mail(d, f) => (KIND_MAIL, f, NOWHERE, d),
        Msg::Note(key, d) => (
            KIND_NOTE,
            SymAddr {
                seg: NOTE,
                off: key,
            },
            NOWHERE,
            d,
        ),
    };
    let put = matches!(kind, KIND_PUT | KIND_PUT_ADD);
    let (mut e, addr) = peer_addr(st, &sh.ep, lock(&sh.ep), pe, call);
    let Some(addr) = addr else {
        fatal(
            call,
            "internal error: a direct signal to a PE without an endpoint",
        );
    };
    let to = UdpPeer {
        addr,
        key: e.job_key,
    };
    let chunk = e.chunk;
    let mut off = 0;
    loop {
        let n = piece(put.then_some(at.off), off, data.len(), chunk);
        let last = off + n == data.len();
        let part_at = if put {
            SymAddr {
                seg: at.seg,
                off: at.off + off as u64,
            }
        } else {
            at
        };
        let (k, f) = match (last, put) {
            (true, _) => (kind, flag),
            (false, true) => (KIND_PUT, NOWHERE),
            (false, false) => (KIND_PART, flag),
        };
        e = push(
            st,
            sh,
            e,
            (pe, to),
            (k, 0, f, part_at),
            (&data[off..off + n], &[]),
            call,
        );
        off += n;
        if last {
            break;
        }
    }
    if let Err(err) = e.net.flush() {
        transport_failed(st, &e, err, call);
    }
    sh.pending.store(true, Ordering::Relaxed);
}

/// Hands one packet of `kind`, header flags, flag and data address for PE `pe` (at `to`),
/// whose payload is `data` then `tail`, to the layer, waiting for room in the window or
/// the pool first; returns the lock.
fn push<'a>(
    st: &State,
    sh: &'a Shared,
    mut e: MutexGuard<'a, Endpoint>,
    (pe, to): (u32, UdpPeer),
    (kind, flags, flag, at): (u8, u8, SymAddr, SymAddr),
    (data, tail): (&[u8], &[u8]),
    call: &str,
) -> MutexGuard<'a, Endpoint> {
    let lose = dropped();
    if lose {
        e.net.inner_mut().armed += 1;
    }
    loop {
        let seq = e.inbox.peers[pe as usize].next_out;
        let h = Header {
            kind,
            flags: flags | if lose { LOSE_ONCE } else { 0 },
            from: st.me,
            seq,
            flag,
            at,
        };
        e.net.set_now(now_ns());
        match e.net.send(to, HEADER + data.len() + tail.len(), |b| {
            h.emit(b);
            let (d, t) = b[HEADER..].split_at_mut(data.len());
            d.copy_from_slice(data);
            t.copy_from_slice(tail);
        }) {
            Ok(()) => {
                e.inbox.peers[pe as usize].next_out += 1;
                return e;
            }
            Err(TransportError::WouldBlock) => {}
            Err(err) => transport_failed(st, &e, err, call),
        }
        // The window to `pe` or the pool is full: acknowledgements free it.
        drop(e);
        let room = || {
            let mut e = lock(&sh.ep);
            drive_locked(st, sh, &mut e);
            e.net.in_flight(to) < WINDOW && e.net.pool_usage().1 > 0
        };
        super::wait::wait_on(st, call, true, room, || {
            let e = lock(&sh.ep);
            format!(
                "PE {pe} to acknowledge collective frames ({} in flight to it, {} of {FRAMES} frame buffers free)",
                e.net.in_flight(to),
                e.net.pool_usage().1
            )
        });
        e = lock(&sh.ep);
    }
}

/// A failure of the endpoint's transport: the end of the job, naming `call`.
fn transport_failed(st: &State, e: &Endpoint, err: TransportError, call: &str) -> ! {
    let who = match err {
        TransportError::Unreachable => {
            let dead: Vec<String> = e.net.failed_peers().map(|p| e.inbox.name(p.addr)).collect();
            format!(" ({})", dead.join(", "))
        }
        _ => String::new(),
    };
    fatal(
        call,
        format_args!("PE {}: the collectives' endpoint failed: {err}{who}", st.me),
    )
}

/// Point-to-point puts this PE applied (see [`received`]).
static RECEIVED: AtomicU64 = AtomicU64::new(0);

/// [`now_ns`] when this PE last sent or applied a point-to-point put (see [`active`]).
static LAST_P2P: AtomicU64 = AtomicU64::new(0);

/// How long after the last point-to-point put sent or applied the endpoint counts as busy
/// with them: the keeper then looks every `TICK` and watches the socket, and every wait
/// drives the endpoint on every look. Otherwise both keep the collectives' cadence (a
/// keeper looking every `TICK` in every PE of a job cost the emulated aarch64 test
/// stage, 8 PEs under qemu on 2 CPUs, nearly twice its time).
const ACTIVE_FOR: Duration = Duration::from_millis(100);

/// Whether point-to-point puts went through this PE's endpoint lately ([`ACTIVE_FOR`]).
#[inline]
fn active() -> bool {
    let last = LAST_P2P.load(Ordering::Relaxed);
    last != 0 && now_ns().saturating_sub(last) < ACTIVE_FOR.as_nanos() as u64
}

/// How many point-to-point puts this PE applied so far: a waiter that sees it change knows
/// that such puts flow to it.
#[inline]
pub fn received() -> u64 {
    RECEIVED.load(Ordering::Relaxed)
}

/// Whether point-to-point puts may go through the endpoint (`SHMEM_P2P_DIRECT_MAX` above 0
/// and the endpoint open): waits and tests then drive it ([`drive_p2p`]).
static P2P: AtomicBool = AtomicBool::new(false);

/// A blocking put of `data` to `at` of world PE `pe` (of another node) sent straight to
/// that PE's endpoint, if it can go there: point-to-point puts are on
/// (`SHMEM_P2P_DIRECT_MAX`), `data` fits it and one packet, the PE has an endpoint, and
/// nothing of this PE's is in flight through a service ([`gsas_node::Node::outside_begin`]:
/// so that it overtakes nothing). Returns whether it was sent; `false` leaves the put to
/// the services. The target applies it when it drives its endpoint (a wait, a test, any
/// collective; its keeper thread at once when it sleeps in a wait or has not driven its
/// endpoint for [`DRIVEN_RECENTLY`]) and acknowledges it (see `round`); `shmem_quiet`
/// and `shmem_fence` wait for that acknowledgement ([`complete`]).
///
/// With `signal` (`shmem_put_signal`), the same packet carries the signal: the target
/// applies the data, then the signal update, so a waiter that sees the signal sees the
/// data (the packet must hold the data and the 8-byte value).
pub fn p2p_put(
    st: &State,
    pe: u32,
    at: SymAddr,
    data: &[u8],
    signal: Option<P2pSignal>,
    call: &str,
) -> bool {
    let Some(sh) = shared() else { return false };
    if data.len() > sh.p2p_max || !st.node.writes_through_network_service(pe) {
        return false;
    }
    let e = lock(&sh.ep);
    let room = match signal {
        Some(_) => e.chunk.saturating_sub(SIGNAL_BYTES),
        None => e.chunk,
    };
    if room == 0 || piece(Some(at.off), 0, data.len(), room) != data.len() {
        return false;
    }
    let (mut e, addr) = peer_addr(st, &sh.ep, e, pe, call);
    let Some(addr) = addr else {
        return false;
    };
    // Under the endpoint's lock: `complete` clears the node's mark under it too.
    if !st.node.outside_begin() {
        return false;
    }
    if !sh.dirty[pe as usize].swap(true, Ordering::AcqRel) {
        e.dirty.push(pe);
    }
    let to = UdpPeer {
        addr,
        key: e.job_key,
    };
    // `push` may let go of the lock to wait for room: while it does, a `complete` of
    // another thread must not take this PE's puts for done (see `complete`).
    e.sending.push(pe);
    let (kind, flag, value) = match signal {
        None => (KIND_PUT, NOWHERE, None),
        Some(P2pSignal { at, op, value }) => {
            let kind = match op {
                SignalOp::Set => KIND_PUT_SIGNAL_SET,
                SignalOp::Add => KIND_PUT_SIGNAL_ADD,
            };
            (kind, at, Some(value.to_le_bytes()))
        }
    };
    let tail = value.as_ref().map_or(&[][..], |v| &v[..]);
    e = push(
        st,
        sh,
        e,
        (pe, to),
        (kind, URGENT, flag, at),
        (data, tail),
        call,
    );
    if let Some(i) = e.sending.iter().position(|&q| q == pe) {
        e.sending.swap_remove(i);
    }
    if let Err(err) = e.net.flush() {
        transport_failed(st, &e, err, call);
    }
    sh.pending.store(true, Ordering::Relaxed);
    sh.p2p_sent.fetch_add(1, Ordering::Relaxed);
    LAST_P2P.store(now_ns(), Ordering::Relaxed);
    true
}

/// Waits until the point-to-point puts this PE sent to world PE `pe` (`None`: to every
/// PE) are acknowledged, i.e. applied by their targets: the node's hook
/// ([`gsas_node::Node::set_outside_hook`]) for `quiet`, `fence` and every operation through a
/// service. When none is left to any PE the node's mark is cleared.
fn complete(st: &State, pe: Option<u32>) {
    let Some(sh) = shared() else { return };
    if let Some(p) = pe {
        // Without the lock: a PE to which no put of this PE is outstanding (the common
        // case of every operation through a service, `peer_addr`'s read of an endpoint
        // record among them) needs nothing.
        if !sh
            .dirty
            .get(p as usize)
            .is_some_and(|d| d.load(Ordering::Acquire))
        {
            return;
        }
    }
    let call = "shmem (completing point-to-point puts)";
    let done = || {
        let mut e = lock(&sh.ep);
        drive_locked(st, sh, &mut e);
        let key = e.job_key;
        let mut left = false;
        let Endpoint {
            net,
            inbox,
            dirty,
            sending,
            ..
        } = &mut *e;
        dirty.retain(|&q| {
            let addr = inbox.peers[q as usize].addr.flatten();
            let busy = sending.contains(&q)
                || addr.is_some_and(|addr| net.in_flight(UdpPeer { addr, key }) > 0);
            if busy {
                left |= pe.is_none_or(|p| p == q);
            } else {
                sh.dirty[q as usize].store(false, Ordering::Release);
            }
            busy
        });
        if dirty.is_empty() {
            st.node.outside_done();
        }
        !left
    };
    if done() {
        return;
    }
    super::wait::wait_on(st, call, true, done, || {
        let e = lock(&sh.ep);
        format!(
            "acknowledgements of point-to-point puts from PE(s) {:?}",
            e.dirty
        )
    });
}

/// Receives and applies what arrived on the endpoint, if point-to-point puts may come
/// through it: the waits and tests of memory call it ([`crate::wait::progress`]). One
/// load when they may not.
#[inline]
pub fn drive_p2p(st: &State) {
    thread_local! {
        static LOOKS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    if !P2P.load(Ordering::Relaxed) {
        return;
    }
    // While no point-to-point put went through lately, every 16th look receives (a first
    // put is still taken within a few looks; the keeper takes it when the PE sleeps).
    let n = LOOKS.get().wrapping_add(1);
    LOOKS.set(n);
    if n % 16 == 0 || active() {
        if let Some(sh) = shared() {
            drive_holding(st, sh, &mut lock(&sh.ep));
        }
    }
}

/// A wait or test of memory found its condition false (or cannot tell, `shmem_signal_fetch`):
/// the acknowledgements its looks left owed ([`drive_holding`]) go now, since no answer of
/// the program's will carry them soon. One load when none are owed.
#[inline]
pub fn release_owed() {
    if let Some(sh) = shared() {
        send_owed(sh);
    }
}

/// A thread of this PE announced itself on its doorbell and is about to sleep (a wait or a
/// test, in [`sleep`]): what it owes goes, and it looks once more.
#[inline]
pub fn sleeping() {
    if !P2P.load(Ordering::Relaxed) {
        return;
    }
    if let Some(sh) = shared() {
        send_owed(sh);
        // One look before the sleep, whatever `drive_p2p` skipped.
        if let Some(st) = crate::state::get() {
            drive(st);
        }
    }
}

/// The sleep of a wait or test on this PE's memory that announced `sleeper` on the
/// doorbell; returns whether it was woken (a ring, or a datagram on the endpoint), as
/// [`Sleeper::sleep`](gsas_transport::bell::Sleeper::sleep) does.
///
/// While point-to-point puts come through the endpoint ([`active`]) and `on_socket` (the
/// waits; not the naps of a `shmem_test` loop, see `crate::wait::tested`), the thread
/// blocks on the endpoint's socket itself, so that such a put wakes it once: it applies the put in
/// its next step. A ring of the doorbell (an update the node's service applied) reaches it
/// through the keeper thread, which sleeps on the bell on its behalf (past the sequence
/// its announcement read, so a ring between the re-check and the block is not lost) and
/// signals an eventfd that the sleeper polls too. Before, the put woke the keeper, which
/// applied it and rang the bell, which woke the sleeper: two wake-ups, each one a
/// scheduling delay on a machine with more runnable threads than CPUs. Otherwise (no
/// endpoint, no puts lately, not `on_socket`, another thread of the PE already sleeping on
/// the socket) it is the plain sleep on the bell, with the keeper watching the socket
/// meanwhile (see `watching`), as before.
pub fn sleep(
    sleeper: &gsas_transport::bell::Sleeper<'_>,
    timeout: Duration,
    on_socket: bool,
) -> bool {
    let Some(sh) = shared().filter(|_| P2P.load(Ordering::Relaxed) && active()) else {
        return sleeper.sleep(timeout);
    };
    let word = 1 << 32 | u64::from(sleeper.seq());
    let rung = sh.rung.as_ref().filter(|_| {
        on_socket
            && sh
                .bridge
                .compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    });
    let Some(rung) = rung else {
        // The keeper watches the socket meanwhile (see `watching`), so that a put that
        // arrives is applied, and this sleeper woken, at once.
        sh.bell_sleepers.fetch_add(1, Ordering::AcqRel);
        if let Some(t) = sh.keeper_thread.get() {
            t.unpark();
        }
        let woken = sleeper.sleep(timeout);
        sh.bell_sleepers.fetch_sub(1, Ordering::AcqRel);
        return woken;
    };
    SOCKET_SLEEPS.fetch_add(1, Ordering::Relaxed);
    if let Some(t) = sh.keeper_thread.get() {
        t.unpark();
    }
    let mut fds = [
        libc::pollfd {
            fd: sh.fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: rung.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // A ring before this point is seen here (no block); one after it signals `rung`.
    let woken = sleeper.rung()
        || gsas_sys::fd::ppoll(&mut fds, timeout).is_ok_and(|n| n > 0)
        || sleeper.rung();
    sh.bridge.store(0, Ordering::Release);
    // Read only when it fired: no system call on a put's wake-up. A signal the keeper
    // sends after this (it saw the bridge before the store above) ends the next such sleep
    // at once, which then drains it.
    if fds[1].revents != 0 {
        rung.drain();
    }
    woken
}

/// The keeper's part of [`sleep`]: while a thread sleeps on the socket, wait (at most
/// `limit`) for the doorbell to ring past the sequence that thread read, and pass the ring
/// on. `passed` is the bridge word of the last ring passed on (one ring, one signal).
/// Returns false when no thread sleeps on the socket.
fn bridge_ring(st: &State, sh: &Shared, passed: &mut u64, limit: Duration) -> bool {
    let word = sh.bridge.load(Ordering::Acquire);
    let (Some(bell), Some(rung)) = (st.node.bell(), sh.rung.as_ref()) else {
        return false;
    };
    if word == 0 {
        return false;
    }
    if word == *passed {
        // Passed on already: the sleeper wakes and takes it; until then, nothing to do.
        std::thread::park_timeout(limit);
        return true;
    }
    if bell.sleep_past(word as u32, limit) && sh.bridge.load(Ordering::Acquire) == word {
        rung.signal();
        *passed = word;
        RINGS_PASSED.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// Acknowledgements of point-to-point puts sent in datagrams of their own (not carried by
/// a frame of the PE's): at once (by a caller, or by the keeper for a put it applied), and
/// late (by the keeper, [`ACK_SOON`] after a caller left them owed).
static ACKS_PROMPT: AtomicU64 = AtomicU64::new(0);
static ACKS_LATE: AtomicU64 = AtomicU64::new(0);

/// Acknowledgements of point-to-point puts this PE sent alone (each a datagram, and a wake
/// of its sender's quiet): at once (a wait or test that found its condition false, a
/// sleep, the keeper for a put it applied), and late (the keeper, for what a caller left
/// owed); for tests.
pub fn acks_alone() -> (u64, u64) {
    (
        ACKS_PROMPT.load(Ordering::Relaxed),
        ACKS_LATE.load(Ordering::Relaxed),
    )
}

/// Sleeps of [`sleep`] on the socket, and doorbell rings the keeper passed on to them.
static SOCKET_SLEEPS: AtomicU64 = AtomicU64::new(0);
static RINGS_PASSED: AtomicU64 = AtomicU64::new(0);

/// How often a wait or test of this PE slept on its endpoint's socket ([`sleep`]), and how
/// many of those sleeps a doorbell ring passed on by the keeper ended.
pub fn socket_sleeps() -> (u64, u64) {
    (
        SOCKET_SLEEPS.load(Ordering::Relaxed),
        RINGS_PASSED.load(Ordering::Relaxed),
    )
}

/// Before this PE sleeps: the acknowledgements a caller's drive left owed go now (their
/// senders may wait in a quiet; no answer of this PE's will carry them soon).
fn send_owed(sh: &Shared) {
    if sh.owed_since.load(Ordering::Relaxed) != 0 {
        if let Some(st) = crate::state::get() {
            acknowledge_owed(st, sh, &mut lock(&sh.ep), false);
        }
    }
}

/// Point-to-point puts this PE sent through its endpoint, and applied from others.
pub fn p2p_counts() -> (u64, u64) {
    shared().map_or((0, 0), |sh| {
        (sh.p2p_sent.load(Ordering::Relaxed), received())
    })
}

/// The datagrams [`drop_next`] marks, by position from the next one.
static DROP: AtomicU64 = AtomicU64::new(0);

/// Tests: the next packets whose bit is set in `mask` (bit 0: the next one) are lost with
/// their frame on its first transmission.
pub fn drop_next(mask: u64) {
    DROP.store(mask, Ordering::Relaxed);
}

/// Whether the packet about to go is to be lost once (one relaxed load when none is).
#[inline]
fn dropped() -> bool {
    if DROP.load(Ordering::Relaxed) == 0 {
        return false;
    }
    DROP.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| Some(m >> 1))
        .is_ok_and(|m| m & 1 != 0)
}

/// Blocks until a datagram can be read from this PE's endpoint or `timeout` passed (the
/// caller then drives it); false, at once, when this PE has no endpoint.
pub fn nap(timeout: Duration) -> bool {
    let Some(sh) = shared() else { return false };
    send_owed(sh);
    // SAFETY: the endpoint's socket, open for the life of the process (the endpoint is
    // never dropped).
    let fd = unsafe { BorrowedFd::borrow_raw(sh.fd) };
    // A failed poll (EINTR is retried inside) is a nap cut short: the caller looks again.
    let _ = gsas_sys::fd::wait_fd(fd, libc::POLLIN, timeout);
    true
}

/// Takes the oldest mail from world PE `from` for `flag` into `out` (its length); false
/// when there is none (the sender then left the data in its own memory).
pub fn take_mail(from: u32, flag: SymAddr, out: &mut [u8], call: &str) -> bool {
    take(from, (flag.seg, flag.off), out, call)
}

/// Takes the oldest mail from world PE `from` for `flag`, whatever its length.
pub fn take_mail_any(from: u32, flag: SymAddr) -> Option<Vec<u8>> {
    lock(ep()?)
        .inbox
        .mail
        .get_mut(&(from, flag.seg, flag.off))?
        .pop_front()
}

/// An empty buffer for mail, reused if one is spare.
pub fn buffer() -> Vec<u8> {
    ep().map_or_else(Vec::new, |m| lock(m).inbox.spare.take())
}

/// Gives a buffer (of [`take_mail_any`] or [`buffer`]) back for reuse.
pub fn recycle(v: Vec<u8>) {
    if let Some(m) = ep() {
        lock(m).inbox.spare.give(v);
    }
}

/// Whether a note from world PE `from` under `key` arrived (drives the endpoint first).
pub fn has_note(st: &State, from: u32, key: u64) -> bool {
    let Some(sh) = shared() else { return false };
    let mut e = lock(&sh.ep);
    drive_locked(st, sh, &mut e);
    e.inbox
        .mail
        .get(&(from, NOTE, key))
        .is_some_and(|q| !q.is_empty())
}

/// Takes the oldest note from world PE `from` under `key` into `out` (its length).
pub fn take_note(from: u32, key: u64, out: &mut [u8], call: &str) -> bool {
    take(from, (NOTE, key), out, call)
}

fn take(from: u32, key: (u8, u64), out: &mut [u8], call: &str) -> bool {
    let Some(m) = ep() else { return false };
    let mut e = lock(m);
    let inbox = &mut e.inbox;
    let Some(q) = inbox.mail.get_mut(&(from, key.0, key.1)) else {
        return false;
    };
    let Some(d) = q.pop_front() else { return false };
    if d.len() != out.len() {
        fatal(
            call,
            format_args!(
                "internal error: {} bytes of mail from PE {from}, {} expected",
                d.len(),
                out.len()
            ),
        );
    }
    out.copy_from_slice(&d);
    inbox.spare.give(d);
    true
}

/// Receives and applies what arrived; lets the layer acknowledge and resend. Cheap when
/// nothing is pending: one `recv` that finds nothing.
#[inline]
pub fn drive(st: &State) {
    if let Some(sh) = shared() {
        let mut e = lock(&sh.ep);
        drive_locked(st, sh, &mut e);
    }
}

/// One round of [`drive`] by a caller.
fn drive_locked(st: &State, sh: &Shared, e: &mut Endpoint) {
    acknowledge_owed(st, sh, e, false);
    drive_holding(st, sh, e);
}

/// [`drive_locked`] without sending the acknowledgements owed: for the looks of waits and
/// tests of memory ([`drive_p2p`]), which send them once their condition was found false
/// ([`release_owed`]). A look that finds its condition returns to the program, whose answer
/// (the next round of a flag exchange) then carries them; sent at the look, each would
/// wake its sender's quiet once more before that answer came.
fn drive_holding(st: &State, sh: &Shared, e: &mut Endpoint) {
    sh.last_drive.store(now_ns(), Ordering::Relaxed);
    let busy = round(st, e, false);
    sh.pending.store(busy, Ordering::Relaxed);
}

/// Sends the acknowledgements owed to the PEs at `to` now (those that a frame to them
/// carried already cost nothing); `late`: the keeper sends what a caller left owed (for
/// [`acks_alone`]).
fn acknowledge(st: &State, e: &mut Endpoint, to: &[SocketAddr], late: bool) {
    let key = e.job_key;
    for &addr in to {
        match e.net.acknowledge_now(UdpPeer { addr, key }) {
            Ok(false) => {}
            Ok(true) => {
                let count = if late { &ACKS_LATE } else { &ACKS_PROMPT };
                count.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => transport_failed(st, e, err, "shmem (acknowledging point-to-point puts)"),
        }
    }
    if let Err(err) = e.net.flush() {
        transport_failed(st, e, err, "shmem (acknowledging point-to-point puts)");
    }
}

/// Sends the acknowledgements of point-to-point puts that a caller's drive left owed.
fn acknowledge_owed(st: &State, sh: &Shared, e: &mut Endpoint, by_keeper: bool) {
    if !e.inbox.owed.is_empty() {
        let mut owed = std::mem::take(&mut e.inbox.owed);
        acknowledge(st, e, &owed, by_keeper);
        owed.clear();
        e.inbox.owed = owed;
        sh.owed_since.store(0, Ordering::Relaxed);
        sh.keeper_acked.store(by_keeper, Ordering::Relaxed);
    }
}

/// How long an acknowledgement of a point-to-point put that a caller's drive left owed
/// waits for the program's next call before the keeper sends it (the reliability layer's
/// delayed-acknowledgement bound).
const ACK_SOON: Duration = Duration::from_micros(200);

/// Polls the layer (resends, acknowledgements, deadlines), receives and applies what
/// arrived, reports a peer that became unreachable; returns whether frames are in flight.
/// `by_keeper`: the keeper thread drives, not a caller (see the acknowledgements below).
fn round(st: &State, e: &mut Endpoint, by_keeper: bool) -> bool {
    let call = "shmem collectives";
    if let Err(err) = e.net.poll(now_ns()) {
        transport_failed(st, e, err, call);
    }
    let Endpoint { net, inbox, .. } = e;
    let failed = loop {
        match net.recv(|peer, data| inbox.accept(st, peer.addr, data)) {
            Ok(Some(())) => {}
            Ok(None) => break None,
            Err(err) => break Some(err),
        }
    };
    if let Some(err) = failed {
        transport_failed(st, e, err, call);
    }
    if !e.inbox.urgent.is_empty() {
        // Point-to-point puts were applied (the stores are done): a thread of this PE may
        // sleep on the doorbell waiting for the data, and their senders may wait in a
        // quiet for the acknowledgement. The keeper sends it at once (this PE was not
        // driving: it sleeps or computes). A caller that drove the endpoint (a wait or a
        // test, about to return to the program) leaves it owed: the program's answer, a
        // put to the same PE, carries it in its frame, or the caller's next drive sends
        // it, or the keeper after [`ACK_SOON`]; an acknowledgement sent here would be
        // on the critical path of every flag exchange (a loopback send costs the
        // receiver's network processing too: 12 us of a 28 us round trip).
        let urgent = std::mem::take(&mut e.inbox.urgent);
        if let Some(bell) = st.node.bell() {
            bell.ring();
        }
        if by_keeper {
            acknowledge(st, e, &urgent, false);
        } else {
            for a in urgent {
                if !e.inbox.owed.contains(&a) {
                    e.inbox.owed.push(a);
                }
            }
            if let Some(sh) = shared() {
                // The keeper's cue (see `keep`); 0 means none. When the program's next
                // call did not send the last ones (the keeper had to), wake the keeper now
                // rather than at its next look (up to `TICK`): this PE computes after its
                // waits, and its senders wait in quiets.
                let first = sh
                    .owed_since
                    .compare_exchange(0, now_ns().max(1), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok();
                if first && sh.keeper_acked.load(Ordering::Relaxed) {
                    if let Some(t) = sh.keeper_thread.get() {
                        t.unpark();
                    }
                }
            }
        }
    }
    if let Some(ev) = e.net.next_event() {
        let (peer, what) = match ev {
            PeerEvent::Unreachable(p) => (
                p,
                format!(
                    "acknowledged no collective frame for {:.1} s (GSAS_DEADLINE_MS)",
                    st.node.deadline().as_secs_f64()
                ),
            ),
            PeerEvent::Restarted(p) => (p, "restarted its collective endpoint".to_owned()),
            PeerEvent::Refused(p, r) => (p, format!("refused this PE's frames ({:?})", r.reason)),
        };
        fatal(call, format_args!("{} {what}", e.inbox.name(peer.addr)));
    }
    e.net.has_frames_in_use()
}

impl Inbox {
    /// The PE at `addr`, for messages.
    fn name(&self, addr: SocketAddr) -> String {
        match self.peers.iter().position(|p| p.addr == Some(Some(addr))) {
            Some(pe) => format!("PE {pe} ({addr})"),
            None => format!("the PE at {addr}"),
        }
    }

    /// One packet from `src`: applied if it is the next from its sender (then the packets
    /// held behind it), held if it arrived ahead, dropped if it is not one of the job's.
    fn accept(&mut self, st: &State, src: SocketAddr, b: &[u8]) {
        let Some(h) = Header::parse(b) else { return };
        if h.from >= st.npes || h.from == st.me {
            return;
        }
        self.last_in = Instant::now();
        let p = &mut self.peers[h.from as usize];
        match p.addr {
            // It carries the job key: remember where the PE is (no read through its service).
            None => p.addr = Some(Some(src)),
            Some(Some(a)) if a == src => {}
            // Another address than the PE published: not that PE.
            Some(_) => return,
        }
        if h.seq != p.next_in {
            if h.seq > p.next_in {
                let mut d = self.spare.take();
                d.extend_from_slice(b);
                p.ahead.insert(h.seq, d);
            }
            return;
        }
        self.apply(st, h, &b[HEADER..]);
        let pe = h.from as usize;
        let mut urgent = h.flags & URGENT != 0;
        self.peers[pe].next_in += 1;
        loop {
            let p = &mut self.peers[pe];
            let next = p.next_in;
            let Some(d) = p.ahead.remove(&next) else {
                break;
            };
            p.next_in += 1;
            if let Some(h) = Header::parse(&d) {
                self.apply(st, h, &d[HEADER..]);
                urgent |= h.flags & URGENT != 0;
            }
            self.spare.give(d);
        }
        if urgent && !self.urgent.contains(&src) {
            self.urgent.push(src);
        }
    }

    /// Does what packet `h` with `data` says, in order.
    fn apply(&mut self, st: &State, h: Header, data: &[u8]) {
        let key = (h.from, h.flag.seg, h.flag.off);
        match h.kind {
            KIND_PART => {
                let Inbox { parts, spare, .. } = self;
                parts
                    .entry(key)
                    .or_insert_with(|| spare.take())
                    .extend_from_slice(data);
                return;
            }
            KIND_NOTE => {
                let d = self.whole(key, data);
                self.mail.entry(key).or_default().push_back(d);
                return;
            }
            _ => {}
        }
        // A put-with-signal's value is its last 8 bytes.
        let (data, signal) = match h.kind {
            KIND_PUT_SIGNAL_SET | KIND_PUT_SIGNAL_ADD => {
                let Some(cut) = data.len().checked_sub(SIGNAL_BYTES) else {
                    return;
                };
                let (d, v) = data.split_at(cut);
                let mut w = [0u8; SIGNAL_BYTES];
                w.copy_from_slice(v);
                let op = if h.kind == KIND_PUT_SIGNAL_SET {
                    SignalOp::Set
                } else {
                    SignalOp::Add
                };
                (d, Some((op, u64::from_le_bytes(w))))
            }
            _ => (data, None),
        };
        // A packet naming memory outside this PE's segments is consumed and ignored.
        let fp = if h.kind == KIND_PUT {
            None
        } else {
            let Some(fp) = local(st, h.flag, 8).filter(|p| *p as usize % 8 == 0) else {
                return;
            };
            Some(fp)
        };
        if h.kind != KIND_ADD && h.kind != KIND_MAIL {
            let Some(dp) = local(st, h.at, data.len()) else {
                return;
            };
            if h.flags & URGENT != 0 {
                RECEIVED.fetch_add(1, Ordering::Relaxed);
                LAST_P2P.store(now_ns(), Ordering::Relaxed);
            }
            // SAFETY: `dp` maps `data.len()` bytes of this PE's segment (checked by `local`);
            // other processes watch it, so every byte is written once.
            unsafe { gsas_transport::watched::store_once(data.as_ptr(), dp, data.len()) };
        } else if h.kind == KIND_MAIL {
            let d = self.whole(key, data);
            self.mail.entry(key).or_default().push_back(d);
        }
        if let Some(fp) = fp {
            // SAFETY: an aligned word of this PE's own segment (checked); all writers use
            // atomics.
            let word = unsafe { AtomicU64::from_ptr(fp.cast::<u64>()) };
            // After the data: a reader that sees the flag or signal sees the data.
            match signal {
                Some((SignalOp::Set, v)) => {
                    word.swap(v, Ordering::AcqRel);
                }
                Some((SignalOp::Add, v)) => {
                    word.fetch_add(v, Ordering::AcqRel);
                }
                None => {
                    word.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
    }

    /// The whole of a mail or note whose last part is `last`.
    fn whole(&mut self, key: MailKey, last: &[u8]) -> Vec<u8> {
        let mut d = self.parts.remove(&key).unwrap_or_else(|| self.spare.take());
        d.extend_from_slice(last);
        d
    }
}

/// The keeper thread: while the program computes outside the library, it receives and
/// lets the layer acknowledge and resend every [`TICK`] while frames are in flight and
/// every [`IDLE_NAP`] otherwise, whenever no caller drove the endpoint for that long and
/// the lock is free.
fn keep(st: &'static State, sh: &'static Shared) {
    let mut passed = 0;
    while !sh.stop.load(Ordering::Acquire) {
        let nap = if sh.pending.load(Ordering::Relaxed) {
            TICK
        } else {
            IDLE_NAP
        };
        let owed = sh.owed_since.load(Ordering::Relaxed);
        let watch = watching(sh);
        if bridge_ring(st, sh, &mut passed, nap.min(TICK)) {
            // A thread of this PE sleeps on the socket and applies what arrives; the
            // keeper's rounds below still resend and acknowledge when it sleeps long.
        } else if owed != 0 {
            // A caller left acknowledgements owed: send them unless the program's next
            // call does within `ACK_SOON`.
            let due = owed + ACK_SOON.as_nanos() as u64;
            let wait = due.saturating_sub(now_ns());
            if wait > 0 {
                std::thread::park_timeout(Duration::from_nanos(wait));
            }
            match sh.ep.try_lock() {
                Ok(mut e) => acknowledge_owed(st, sh, &mut e, true),
                Err(TryLockError::Poisoned(p)) => {
                    acknowledge_owed(st, sh, &mut p.into_inner(), true)
                }
                Err(TryLockError::WouldBlock) => std::thread::sleep(KEEPER_BACKOFF),
            }
            continue;
        } else if watch {
            // Point-to-point puts come here and this PE does not drive the endpoint (it
            // computes, or a thread sleeps on its doorbell, see `sleep`): block on the
            // socket, so that what arrives is applied, acknowledged and the sleeper woken
            // at once, as a service would.
            // SAFETY: the endpoint's socket, open for the life of the process.
            let fd = unsafe { BorrowedFd::borrow_raw(sh.fd) };
            // At most `TICK`: owed acknowledgements and `stop` are looked at in between.
            let _ = gsas_sys::fd::wait_fd(fd, libc::POLLIN, nap.min(TICK));
        } else {
            // A caller drives the endpoint (or only collectives use it): look now and then.
            std::thread::park_timeout(if active() { nap.min(TICK) } else { nap });
        }
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let idle = now_ns().saturating_sub(sh.last_drive.load(Ordering::Relaxed));
        if idle < nap.as_nanos() as u64 && !watch {
            continue;
        }
        let mut e = match sh.ep.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // A caller drives the endpoint: it takes what arrived.
                std::thread::sleep(KEEPER_BACKOFF);
                continue;
            }
        };
        acknowledge_owed(st, sh, &mut e, true);
        let busy = round(st, &mut e, true);
        sh.pending.store(busy, Ordering::Relaxed);
    }
}

/// How long the keeper steps back when a caller holds the endpoint.
const KEEPER_BACKOFF: Duration = Duration::from_micros(20);

/// How long after its last drive by a caller a PE counts as not driving its endpoint (it
/// computes outside the library): the keeper then watches the socket.
const DRIVEN_RECENTLY: Duration = Duration::from_millis(1);

/// Whether the keeper watches the socket: point-to-point puts come through the endpoint,
/// and a thread of this PE sleeps on its doorbell or no caller drove the endpoint for
/// [`DRIVEN_RECENTLY`].
fn watching(sh: &Shared) -> bool {
    // Not for a thread that sleeps on the socket itself ([`sleep`]): a keeper on the socket
    // too would be woken by every datagram as well, and take some of them (acknowledging
    // each alone).
    P2P.load(Ordering::Relaxed)
        && active()
        && sh.bridge.load(Ordering::Relaxed) == 0
        && (sh.bell_sleepers.load(Ordering::Acquire) > 0
            || now_ns().saturating_sub(sh.last_drive.load(Ordering::Relaxed))
                >= DRIVEN_RECENTLY.as_nanos() as u64)
}

/// This PE's address of `len` bytes at `at`, if inside one of its segments.
fn local(st: &State, at: SymAddr, len: usize) -> Option<*mut u8> {
    let size = st.node.segment_size(at.seg);
    let end = at.off.checked_add(len as u64)?;
    if end > size || at.seg as usize >= 3 {
        return None;
    }
    let base = st.mapped_base(st.me, at.seg)?;
    Some((base + at.off as usize) as *mut u8)
}

/// At the last finalize: everything this PE sent acknowledged (for at most
/// [`FLUSH_LIMIT`]) and acknowledgements of what it received last sent. The keeper thread
/// goes on (a later initialization uses the endpoint again) until [`stop`].
pub fn flush(st: &State) {
    let Some(sh) = shared() else { return };
    let start = Instant::now();
    // Acknowledgements owed go out after the layer's ack delay (200 us) at a poll.
    let settle = Duration::from_millis(1);
    let done = loop {
        {
            let mut e = lock(&sh.ep);
            drive_locked(st, sh, &mut e);
            if !e.net.has_frames_in_use() && e.inbox.last_in.elapsed() >= settle {
                break true;
            }
        }
        if start.elapsed() >= FLUSH_LIMIT {
            break false;
        }
        std::thread::sleep(Duration::from_micros(50));
    };
    if st.config.debug {
        let e = lock(&sh.ep);
        let s = e.net.stats();
        gsas_transport::eprintln_whole!(
            "gsas-shmem: PE {}: collective endpoint: {} packets sent, {} delivered; {} frames sent, \
             {} resent, {} acknowledged; {} acknowledgements sent; {} frames received, {} \
             duplicates; {} point-to-point puts sent, {} applied{}",
            st.me,
            s.packets_sent,
            s.packets_delivered,
            s.frames_sent,
            s.retransmissions,
            s.frames_acked,
            s.acks_sent,
            s.frames_received,
            s.duplicates,
            sh.p2p_sent.load(Ordering::Relaxed),
            received(),
            if done {
                ""
            } else {
                "; some frames were not acknowledged at finalize"
            }
        );
    }
}

/// Before the job is left (at exit): stops the keeper thread.
pub fn stop() {
    let Some(sh) = shared() else { return };
    sh.stop.store(true, Ordering::Release);
    let keeper = sh
        .keeper
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(t) = keeper {
        t.thread().unpark();
        let _ = t.join();
    }
}

#[cfg(test)]
mod tests {
    use super::{GRANULE, piece};

    #[test]
    fn put_data_is_cut_at_multiples_of_the_granule_of_its_destination() {
        for chunk in [64, 128, 1344, 61312] {
            for dest in [0u64, 1, 8, 60, 64, 100, 4096 + 24] {
                for len in [
                    0,
                    1,
                    63,
                    64,
                    65,
                    chunk - 1,
                    chunk,
                    chunk + 1,
                    3 * chunk + 17,
                ] {
                    let mut off = 0;
                    loop {
                        let n = piece(Some(dest), off, len, chunk);
                        assert!(n <= chunk, "chunk {chunk} dest {dest} len {len}: {n}");
                        off += n;
                        if off == len {
                            break;
                        }
                        assert!(n > 0);
                        assert_eq!(
                            (dest as usize + off) % GRANULE,
                            0,
                            "chunk {chunk} dest {dest} len {len}: a cut at {off}"
                        );
                    }
                    // Mail: every chunk bytes.
                    let mut off = 0;
                    while off < len {
                        let n = piece(None, off, len, chunk);
                        assert_eq!(n, chunk.min(len - off));
                        off += n;
                    }
                }
            }
        }
    }
}
