//! The collectives' own endpoint: signals, and data with them, sent straight to the
//! waiting PE over UDP, not through the services.
//!
//! **What it is.** A cross-node collective signal used to be an atomic add through the
//! receiver's atomic service: PE -> service (another process, which must be running) ->
//! memory -> the waiting PE. On a machine where PEs and services share cores, and on a
//! loaded one, each hop through a process that is not on a CPU costs a scheduling delay
//! or a wake-up (about 70 us on the development VM). Here every PE of a job that spans
//! nodes over UDP owns one more non-blocking UDP socket, and a collective sends its
//! cross-node signal (a counter increment, the same word the service path would add to)
//! to the receiving PE's socket; the receiver, which is waiting for exactly that signal,
//! polls the socket and applies the increment to its own memory. Data of a step up to
//! `SHMEM_COLL_DIRECT_MAX` bytes travels with its flag (the receiver writes it with
//! [`gsas_transport::watched::store_once`], then increments the flag), so a broadcast or
//! allgather step costs datagrams instead of a put, a quiet (a round trip through the
//! service) and an add. Data larger than a datagram (`SHMEM_COLL_DIRECT_CHUNK`, by default
//! the job's UDP MTU less the [`HEADER`]) is cut into several, delivered in order, the flag
//! with the last; mail (data the receiver keeps for the collective to take, see [`Msg`])
//! is cut into parts the same way. Larger data still goes through the services (their
//! bandwidth path); only its flag comes here.
//!
//! **Reliability.** Datagrams between two PEs carry a sequence number per direction and
//! the cumulative acknowledgement of the other direction. A receiver applies a datagram
//! only when it is the next one in sequence (a duplicate is acknowledged again, one after a
//! gap is dropped), so every increment and every byte is applied exactly once and in order.
//! A sender keeps what was not acknowledged and sends it again after [`RTO`]. It leaves at
//! most a window of bytes unacknowledged per peer (a share of the receive buffer among the
//! PEs of other nodes; the socket asks for 4 MiB buffers, which the kernel caps at
//! `net.core.rmem_max`), and marks a datagram that fills half the window so that the
//! receiver acknowledges it at once; a sender at the window's end waits for
//! acknowledgements like any collective wait. Acknowledgements otherwise travel on the
//! next datagram to that peer, or alone after [`ACK_DELAY`], to the return address of the
//! peer's datagrams (with the token they carry) when this PE never looked the peer up.
//!
//! **While the program computes.** Every PE with an endpoint runs a keeper thread. When no
//! caller drove the endpoint for a nap ([`TICK`] while something is unacknowledged or an
//! acknowledgement is owed, [`IDLE_NAP`] otherwise) and its lock is free, the keeper
//! receives what arrived (applying it), acknowledges at once and resends what is due. So
//! a datagram lost on the network is resent although its sender computes outside the
//! library (the root of a broadcast returns at once), and a PE that computes acknowledges
//! what it was sent within about [`IDLE_NAP`]. It takes no part in collectives: callers
//! that wait drive the endpoint themselves, and the keeper looks only after they left it
//! alone for a whole nap. `shmem_finalize` waits up to [`FLUSH_LIMIT`] until the other PEs
//! acknowledged everything, then stops the keeper.
//!
//! **Security.** Every PE publishes its address and a random 64-bit token in its own sync
//! segment (read by the others through the services, which check the job key); a
//! datagram without the receiver's token, from a PE outside the job, or naming memory
//! outside the receiver's segments is dropped.
//!
//! **What it is not.** Not used within a node (shared memory is faster), over Exanet (the
//! PEs have no UDP socket there), or with `SHMEM_COLL_DIRECT_MAX=0`; then every signal
//! goes through the services as before. Not for point-to-point operations.
//!
//! **Thread-safety.** One endpoint per process, behind a mutex that the callers and the
//! keeper thread take (the keeper only with `try_lock`).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gsas_node::node::{Ctx as NodeCtx, SYNC};
use gsas_transport::transport::net::NetAddr;

use super::layout;
use crate::addr::SymAddr;
use crate::fatal::fatal;
use crate::state::State;

mod header;

use header::{
    ACK_NOW, HEADER, Header, KIND_ACK, KIND_ADD, KIND_MAIL, KIND_NOTE, KIND_PART, KIND_PUT,
    KIND_PUT_ADD, NOWHERE,
};

/// Resend what is not acknowledged after this long (the runtime's floor, `MIN_RTO`: a
/// peer descheduled for a few milliseconds is not a loss).
pub const RTO: Duration = Duration::from_millis(20);
/// Acknowledge alone after this long without a datagram to carry it.
pub const ACK_DELAY: Duration = Duration::from_micros(200);
/// How long `shmem_finalize` waits for acknowledgements.
pub const FLUSH_LIMIT: Duration = Duration::from_secs(2);
/// How often the keeper thread looks while something is unacknowledged or owed (well
/// below [`RTO`], so a resend is late by at most about this much).
pub const TICK: Duration = Duration::from_millis(2);
/// How often it looks otherwise: datagrams that arrive while the program computes are
/// acknowledged within about this much (below [`RTO`], so the sender does not resend).
pub const IDLE_NAP: Duration = Duration::from_millis(10);
/// Unacknowledged datagrams per peer before a sender waits for acknowledgements (besides
/// the byte window, [`Endpoint::window`]).
const WINDOW: usize = 4096;
/// Most data bytes of one datagram (a UDP datagram holds 65507).
const CHUNK_MAX: usize = 60 << 10;
/// Socket buffers asked for (the kernel caps them at `net.core.rmem_max`/`wmem_max`).
const SOCKBUF: usize = 4 << 20;
/// Largest byte window per peer.
const WINDOW_MAX: usize = 1 << 20;

/// What a datagram carries besides its sequence number.
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

#[derive(Default)]
struct Peer {
    /// Address and token, once read (`Some(None)`: the peer has no endpoint).
    addr: Option<Option<(SocketAddr, u64)>>,
    /// Next sequence number to send.
    next: u64,
    /// Sent, not acknowledged: (sequence, datagram, last sent).
    unacked: VecDeque<(u64, Vec<u8>, Instant)>,
    /// Bytes of the datagrams in `unacked`.
    unacked_bytes: usize,
    /// Highest sequence number applied from this peer.
    got: u64,
    /// Since when an acknowledgement is owed.
    owed: Option<Instant>,
}

impl Peer {
    /// Whether a datagram of `len` data bytes may be sent now (a window of `window` bytes).
    fn fits(&self, len: usize, window: usize) -> bool {
        self.unacked.is_empty()
            || (self.unacked.len() < WINDOW && self.unacked_bytes + HEADER + len <= window)
    }
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

struct Endpoint {
    sock: UdpSocket,
    token: u64,
    peers: Vec<Peer>,
    buf: Vec<u8>,
    /// Mail by (sender, flag segment, flag offset), in arrival order.
    mail: HashMap<MailKey, VecDeque<Vec<u8>>>,
    /// The parts of mail still arriving, by the same key.
    parts: HashMap<MailKey, Vec<u8>>,
    /// Buffers to reuse (datagrams acknowledged, mail taken): fresh large allocations cost
    /// page faults every time, since the allocator returns them to the system.
    spare: Spare,
    /// Bytes (headers included) a sender leaves unacknowledged per peer: a share of the
    /// receive buffer (the same on every PE) among the PEs of other nodes.
    window: usize,
}

/// The endpoint and what its keeper thread watches.
struct Shared {
    ep: Mutex<Endpoint>,
    /// The socket, for waiting on it without the lock.
    fd: RawFd,
    /// [`now_ns`] when a caller last drove the endpoint.
    last_drive: AtomicU64,
    /// Something was unacknowledged or owed at the last drive.
    pending: AtomicBool,
    stop: AtomicBool,
    keeper: Mutex<Option<JoinHandle<()>>>,
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
        .map_or(0, |(sock, token, _)| match sock.local_addr() {
            Ok(SocketAddr::V4(a)) => {
                publish(st, 1, *token);
                encode(a)
            }
            _ => 0,
        });
    publish(st, 0, word);
    let _ = EP.set(ep.filter(|_| word != 0).map(|(sock, token, rcvbuf)| {
        let remote = (st.npes as usize)
            .saturating_sub(st.node.local_pes().len())
            .max(1);
        let chunk = chunk(st);
        Shared {
            fd: sock.as_raw_fd(),
            ep: Mutex::new(Endpoint {
                sock,
                token,
                peers: (0..st.npes).map(|_| Peer::default()).collect(),
                buf: vec![0; 65536],
                mail: HashMap::new(),
                parts: HashMap::new(),
                spare: Spare::default(),
                // Half the buffer (the kernel counts its overhead in it), shared.
                window: (rcvbuf / 2 / remote).clamp(2 * (HEADER + chunk), WINDOW_MAX),
            }),
            last_drive: AtomicU64::new(0),
            pending: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            keeper: Mutex::new(None),
        }
    }));
    if let Some(sh) = shared() {
        match std::thread::Builder::new()
            .name("gsas-coll-keeper".into())
            .spawn(move || keep(st, sh))
        {
            Ok(t) => *sh.keeper.lock().unwrap_or_else(PoisonError::into_inner) = Some(t),
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

/// The socket, its token and its receive buffer.
fn open(st: &State, ip: Ipv4Addr) -> Option<(UdpSocket, u64, usize)> {
    let sock = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ip), 0)).ok()?;
    sock.set_nonblocking(true).ok()?;
    let rcvbuf = gsas_sys::fd::socket_buffers(sock.as_fd(), SOCKBUF).unwrap_or(0);
    match gsas_sys::process::random_nonzero_u64() {
        Ok(token) => Some((sock, token, rcvbuf)),
        Err(e) => {
            if st.config.debug {
                eprintln!(
                    "gsas-shmem: PE {}: no random token ({e}): collectives use the services",
                    st.me
                );
            }
            None
        }
    }
}

/// Writes word `i` of this PE's endpoint record.
fn publish(st: &State, i: u64, w: u64) {
    let base = st
        .mapped_base(st.me, SYNC)
        .unwrap_or_else(|| fatal("shmem_init", "this PE's sync segment is not mapped"));
    let p = base + (layout::ENDPOINT + 8 * i) as usize;
    // SAFETY: word `i < 2` of the endpoint record of this PE's own sync segment (aligned,
    // mapped for the life of the job); readers use atomics or the service.
    unsafe { AtomicU64::from_ptr(p as *mut u64) }.store(w, Ordering::Release);
}

/// The endpoint of PE `pe` (read through its service once, then remembered).
fn peer_addr(st: &State, e: &mut Endpoint, pe: u32, call: &str) -> Option<(SocketAddr, u64)> {
    let p = &mut e.peers[pe as usize];
    if let Some(a) = p.addr {
        return a;
    }
    let mut rec = [0u8; 16];
    if let Err(err) = st
        .node
        .get(NodeCtx::DEFAULT, pe, SYNC, layout::ENDPOINT, &mut rec)
    {
        fatal(call, err);
    }
    let w = u64::from_le_bytes(rec[..8].try_into().expect("8 bytes"));
    let token = u64::from_le_bytes(rec[8..].try_into().expect("8 bytes"));
    let a = decode(w).filter(|_| token != 0).map(|a| (a, token));
    p.addr = Some(a);
    a
}

/// Whether signals to world PE `pe` (of another node) go straight to it.
pub fn reaches(st: &State, pe: u32, call: &str) -> bool {
    let Some(m) = ep() else { return false };
    if st.node.is_local(pe) {
        return false;
    }
    let mut e = lock(m);
    peer_addr(st, &mut e, pe, call).is_some()
}

/// Whether world PE `pe` (of any node) has a collective endpoint: for choices that every
/// PE of a group must make alike (a PE without one reaches no one and no one reaches it).
pub fn has_endpoint(st: &State, pe: u32, call: &str) -> bool {
    let Some(m) = ep() else { return false };
    let mut e = lock(m);
    peer_addr(st, &mut e, pe, call).is_some()
}

/// Most data bytes one step sends with its flag (`SHMEM_COLL_DIRECT_MAX`).
pub fn data_max(st: &State) -> usize {
    usize::try_from(st.config.coll_direct_max).unwrap_or(usize::MAX)
}

/// Data bytes per datagram: `SHMEM_COLL_DIRECT_CHUNK`, else the job's UDP MTU less the
/// header; at most [`CHUNK_MAX`].
fn chunk(st: &State) -> usize {
    let c = st.config.coll_direct_chunk.map_or_else(
        || st.node.udp_mtu().saturating_sub(HEADER),
        |c| usize::try_from(c).unwrap_or(CHUNK_MAX),
    );
    c.clamp(1, CHUNK_MAX)
}

/// Sends `msg` to world PE `pe` (which [`reaches`]): data larger than a datagram goes in
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
    let chunk = chunk(st);
    let mut off = 0;
    loop {
        let n = (data.len() - off).min(chunk);
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
        push(st, sh, pe, (k, f, part_at), &data[off..off + n], call);
        off += n;
        if last {
            return;
        }
    }
}

/// Sends one datagram of `kind`, flag and data address `what` to `pe`, waiting first for
/// room in the window.
fn push(st: &State, sh: &Shared, pe: u32, what: (u8, SymAddr, SymAddr), data: &[u8], call: &str) {
    let (kind, flag, at) = what;
    let mut e = lock(&sh.ep);
    let Some((addr, token)) = peer_addr(st, &mut e, pe, call) else {
        fatal(
            call,
            "internal error: a direct signal to a PE without an endpoint",
        );
    };
    let window = e.window;
    if !e.peers[pe as usize].fits(data.len(), window) {
        drop(e);
        super::wait::wait_on(
            st,
            call,
            true,
            || lock(&sh.ep).peers[pe as usize].fits(data.len(), window),
            || {
                let e = lock(&sh.ep);
                let p = &e.peers[pe as usize];
                format!(
                    "PE {pe} to acknowledge collective datagrams ({} of {} bytes unacknowledged)",
                    p.unacked_bytes, window
                )
            },
        );
        e = lock(&sh.ep);
    }
    let own = e.token;
    let mut d = e.spare.take();
    let p = &mut e.peers[pe as usize];
    p.next += 1;
    p.owed = None;
    p.unacked_bytes += HEADER + data.len();
    let flags = if p.unacked_bytes >= window / 2 {
        ACK_NOW
    } else {
        0
    };
    let seq = p.next;
    d.resize(HEADER, 0);
    Header {
        kind,
        flags,
        from: st.me,
        token,
        seq,
        ack: p.got,
        flag,
        at,
        reply_token: own,
    }
    .emit(&mut d);
    d.extend_from_slice(data);
    if !dropped() {
        xmit(&e.sock, &d, addr);
    }
    e.peers[pe as usize]
        .unacked
        .push_back((seq, d, Instant::now()));
    sh.pending.store(true, Ordering::Relaxed);
}

/// The datagrams [`drop_next`] marks, by position from the next one.
static DROP: AtomicU64 = AtomicU64::new(0);

/// Tests: the next datagrams whose bit is set in `mask` are lost on their first sending.
pub fn drop_next(mask: u64) {
    DROP.store(mask, Ordering::Relaxed);
}

/// Whether the datagram about to go is to be lost (one relaxed load when none is).
#[inline]
fn dropped() -> bool {
    if DROP.load(Ordering::Relaxed) == 0 {
        return false;
    }
    DROP.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| Some(m >> 1))
        .is_ok_and(|m| m & 1 != 0)
}

/// Sends a datagram; a full socket buffer is waited out briefly, after that the
/// datagram goes again after [`RTO`].
fn xmit(sock: &UdpSocket, d: &[u8], addr: SocketAddr) {
    for _ in 0..10 {
        match sock.send_to(d, addr) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let _ =
                    gsas_sys::fd::wait_fd(sock.as_fd(), libc::POLLOUT, Duration::from_millis(1));
            }
            _ => return,
        }
    }
}

/// Blocks until a datagram can be read from this PE's endpoint or `timeout` passed (the
/// caller then drives it); false, at once, when this PE has no endpoint.
pub fn nap(timeout: Duration) -> bool {
    let Some(sh) = shared() else { return false };
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
        .mail
        .get_mut(&(from, flag.seg, flag.off))?
        .pop_front()
}

/// An empty buffer for mail, reused if one is spare.
pub fn buffer() -> Vec<u8> {
    ep().map_or_else(Vec::new, |m| lock(m).spare.take())
}

/// Gives a buffer (of [`take_mail_any`] or [`buffer`]) back for reuse.
pub fn recycle(v: Vec<u8>) {
    if let Some(m) = ep() {
        lock(m).spare.give(v);
    }
}

/// Whether a note from world PE `from` under `key` arrived (drives the endpoint first).
pub fn has_note(st: &State, from: u32, key: u64) -> bool {
    let Some(sh) = shared() else { return false };
    let mut e = lock(&sh.ep);
    drive_locked(st, sh, &mut e, false);
    e.mail
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
    let Some(q) = e.mail.get_mut(&(from, key.0, key.1)) else {
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
    e.spare.give(d);
    true
}

/// Receives and applies what arrived, sends owed acknowledgements and due retransmissions.
/// Cheap when nothing is pending: one `recv` that finds nothing.
#[inline]
pub fn drive(st: &State) {
    if let Some(sh) = shared() {
        let mut e = lock(&sh.ep);
        drive_locked(st, sh, &mut e, false);
    }
}

/// One round of [`drive`] by a caller (`force_acks`: owed acknowledgements go out now).
fn drive_locked(st: &State, sh: &Shared, e: &mut Endpoint, force_acks: bool) {
    sh.last_drive.store(now_ns(), Ordering::Relaxed);
    let busy = round(st, e, force_acks);
    sh.pending.store(busy, Ordering::Relaxed);
}

/// Receives, acknowledges, resends; returns whether anything is left unacknowledged or
/// owed.
fn round(st: &State, e: &mut Endpoint, force_acks: bool) -> bool {
    let mut buf = std::mem::take(&mut e.buf);
    while let Ok((n, src)) = e.sock.recv_from(&mut buf) {
        receive(st, e, &buf[..n], src);
    }
    e.buf = buf;
    let Endpoint {
        sock,
        peers,
        token: own,
        ..
    } = &mut *e;
    let own = *own;
    if peers
        .iter()
        .all(|p| p.owed.is_none() && p.unacked.is_empty())
    {
        return false;
    }
    let t = Instant::now();
    for p in peers.iter_mut() {
        let Some(Some((addr, token))) = p.addr else {
            continue;
        };
        if let Some(since) = p.owed
            && (force_acks || t.duration_since(since) >= ACK_DELAY)
        {
            let mut d = [0u8; HEADER];
            Header {
                kind: KIND_ACK,
                flags: 0,
                from: st.me,
                token,
                seq: 0,
                ack: p.got,
                flag: NOWHERE,
                at: NOWHERE,
                reply_token: own,
            }
            .emit(&mut d);
            xmit(sock, &d, addr);
            p.owed = None;
        }
        for (_, d, sent) in p.unacked.iter_mut() {
            if t.duration_since(*sent) >= RTO {
                Header::set_ack(d, p.got);
                xmit(sock, d, addr);
                *sent = t;
            }
        }
    }
    true
}

/// The keeper thread: while the program computes outside the library, it receives,
/// acknowledges and resends every [`TICK`] while something is pending and every
/// [`IDLE_NAP`] otherwise, whenever no caller drove the endpoint for that long and the
/// lock is free.
fn keep(st: &'static State, sh: &'static Shared) {
    while !sh.stop.load(Ordering::Acquire) {
        let nap = if sh.pending.load(Ordering::Relaxed) {
            TICK
        } else {
            IDLE_NAP
        };
        std::thread::park_timeout(nap);
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let idle = now_ns().saturating_sub(sh.last_drive.load(Ordering::Relaxed));
        if idle < nap.as_nanos() as u64 {
            continue;
        }
        let mut e = match sh.ep.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => continue,
        };
        let busy = round(st, &mut e, true);
        sh.pending.store(busy, Ordering::Relaxed);
    }
}

/// One datagram from `src`.
fn receive(st: &State, e: &mut Endpoint, b: &[u8], src: SocketAddr) {
    let Some(Header {
        kind,
        flags,
        from,
        token,
        seq,
        ack,
        flag,
        at,
        reply_token,
    }) = Header::parse(b)
    else {
        return;
    };
    if token != e.token || from >= st.npes || from == st.me {
        return;
    }
    let Endpoint { peers, spare, .. } = e;
    let p = &mut peers[from as usize];
    if p.addr.is_none() {
        // It carries this PE's token, so it comes from a PE of the job: acknowledgements
        // go back to where it came from, with its token.
        p.addr = Some(Some((src, reply_token)));
    }
    while let Some((s, d, _)) = p.unacked.front() {
        if *s > ack {
            break;
        }
        p.unacked_bytes -= d.len();
        if let Some((_, d, _)) = p.unacked.pop_front() {
            spare.give(d);
        }
    }
    if !matches!(
        kind,
        KIND_ADD | KIND_PUT_ADD | KIND_PUT | KIND_MAIL | KIND_NOTE | KIND_PART
    ) {
        return;
    }
    if seq != p.got + 1 {
        // A duplicate (acknowledge it again now) or one after a gap (dropped; resent).
        if seq <= p.got {
            p.owed = Some(Instant::now() - ACK_DELAY);
        }
        return;
    }
    p.got = seq;
    if flags & ACK_NOW != 0 {
        p.owed = Some(Instant::now() - ACK_DELAY);
    } else {
        p.owed.get_or_insert_with(Instant::now);
    }
    let data = &b[HEADER..];
    let key = (from, flag.seg, flag.off);
    match kind {
        KIND_PART => {
            let Endpoint { parts, spare, .. } = e;
            parts
                .entry(key)
                .or_insert_with(|| spare.take())
                .extend_from_slice(data);
            return;
        }
        KIND_NOTE => {
            let d = whole(e, key, data);
            e.mail.entry(key).or_default().push_back(d);
            return;
        }
        _ => {}
    }
    // A datagram naming memory outside this PE's segments is consumed and ignored.
    let fp = if kind == KIND_PUT {
        None
    } else {
        let Some(fp) = local(st, flag, 8).filter(|p| *p as usize % 8 == 0) else {
            return;
        };
        Some(fp)
    };
    if matches!(kind, KIND_PUT_ADD | KIND_PUT) {
        let Some(dp) = local(st, at, data.len()) else {
            return;
        };
        // SAFETY: `dp` maps `data.len()` bytes of this PE's segment (checked by `local`);
        // other processes watch it, so every byte is written once.
        unsafe { gsas_transport::watched::store_once(data.as_ptr(), dp, data.len()) };
    } else if kind == KIND_MAIL {
        let d = whole(e, key, data);
        e.mail.entry(key).or_default().push_back(d);
    }
    if let Some(fp) = fp {
        // SAFETY: an aligned word of this PE's own segment (checked); all writers use
        // atomics.
        unsafe { AtomicU64::from_ptr(fp.cast::<u64>()) }.fetch_add(1, Ordering::AcqRel);
    }
}

/// The whole of a mail or note whose last part is `last`.
fn whole(e: &mut Endpoint, key: MailKey, last: &[u8]) -> Vec<u8> {
    let mut d = e.parts.remove(&key).unwrap_or_else(|| e.spare.take());
    d.extend_from_slice(last);
    d
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

/// Before the job is left: owed acknowledgements out, everything this PE sent
/// acknowledged (for at most [`FLUSH_LIMIT`]), then the keeper thread stopped.
pub fn flush(st: &State) {
    let Some(sh) = shared() else { return };
    let start = Instant::now();
    let done = loop {
        {
            let mut e = lock(&sh.ep);
            drive_locked(st, sh, &mut e, true);
            if e.peers.iter().all(|p| p.unacked.is_empty()) {
                break true;
            }
        }
        if start.elapsed() >= FLUSH_LIMIT {
            break false;
        }
        std::thread::sleep(Duration::from_micros(50));
    };
    if !done && st.config.debug {
        eprintln!(
            "gsas-shmem: PE {}: some collective signals were not acknowledged at finalize",
            st.me
        );
    }
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
