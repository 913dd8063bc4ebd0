//! The fabric thread: every emulated node's NI engine, the links between them, and the IRQ
//! and registration sockets of every endpoint, driven by one thread.
//!
//! Links ([`FabricMode`]): by default every pair of nodes is joined by a point-to-point link,
//! a connected pair of Unix stream sockets, one end per node ([`super::link`]), and every
//! frame between two nodes crosses the kernel in the ExaNet three-part framing of
//! [`crate::frame`] plus a link checksum; the frames a node emits towards one peer in a
//! round leave in one `write`, and the ends written to are read right after. Frames between
//! endpoints of the same node stay inside the node's NI. [`FabricMode::InProcess`] hands
//! the same sealed datagrams from the sending engine to the receiving one without a system
//! call (faster, for benchmarks of the driver alone). Both modes apply the frame faults
//! (drop, corrupt, latency) at the same point, when a frame leaves its node's outbox.
//!
//! Why one thread for all nodes: on a small host (the reference machine has 2 cores) every
//! thread that polls shared memory competes with the driver processes it serves, and a
//! hand-off to a blocked thread costs a wake-up (about 70 us on a VM). One thread that
//! runs the sending node's engine, writes the frame, reads it from the destination node's
//! end of the link and runs that engine in the same pass needs no thread hand-off.
//!
//! Loop: drain control commands, poll every engine ([`NodeEngine::poll`]: Acquire loads of
//! the doorbells and consumer counters, Release stores of what it publishes), move every
//! due frame (outbox, faults, link, [`NodeEngine::on_frame`]), raise IRQs. Pacing is
//! adaptive:
//! * while a pass did work, the next pass starts at once;
//! * for [`EmuConfig::spin`](super::EmuConfig::spin) after the last work it keeps polling,
//!   yielding the CPU between passes (drivers on the same core run), and looks at the
//!   sockets with a zero-timeout `ppoll` every 100 us;
//! * then it dozes: it sets the doze flag ([`super::wake`]), polls once more, and sleeps
//!   in `ppoll` on all sockets (the wake socket and the node links included) until a
//!   doorbell's wake-up, a socket event, the next engine timer or frame due time, or the
//!   idle limit (growing from 100 us to 10 ms; 1 ms while operations are in flight).
//!
//! Thread safety: the fabric is moved into its thread; it shares only the fault plan and
//! the stop flag, and receives [`FabricCmd`]s over a channel.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use memmap2::MmapRaw;

use super::FabricMode;
use super::link::{self, LinkEnd, MAX_DATAGRAM};
use super::wake::DozeFlag;
use crate::engine::{Net, NodeEngine, Region};
use crate::fault::FaultPlan;
use crate::frame::{FramePacket, MAX_FRAME};
use crate::nva::{Nva, mgmt, mgmt_status};
use gsas_sys::{fd, fdpass, socket};

/// Counters of the fabric thread, readable from other threads (`stats` control command).
#[derive(Debug, Default)]
pub(crate) struct FabricCounters {
    /// Passes over all engines.
    pub passes: AtomicU64,
    /// Frames that left a node's outbox (dropped and corrupted ones included).
    pub frames: AtomicU64,
    /// Times the thread went to sleep.
    pub dozes: AtomicU64,
    /// Wake-up datagrams received (doorbells of drivers that found it dozing, commands).
    pub wakeups: AtomicU64,
    /// Whether it sleeps right now.
    pub dozing: AtomicBool,
    /// Frames dropped by the `drop` fault.
    pub dropped: AtomicU64,
    /// Frames discarded by the receiving link because their checksum was wrong.
    pub corrupted: AtomicU64,
}

/// A management command for the fabric thread.
#[derive(Debug)]
pub(crate) enum FabricCmd {
    SetPdid { node: usize, ep: u16, pdid: u16 },
    SetEnabled { node: usize, ep: u16, on: bool },
}

struct MgmtConn {
    sock: OwnedFd,
    regions: Vec<u8>,
}

/// The sockets and IRQ line state of one endpoint.
pub(crate) struct EpIo {
    irq_listener: OwnedFd,
    mgmt_listener: OwnedFd,
    irq_conn: Option<OwnedFd>,
    unmasked: bool,
    count: u32,
    ctl: [u8; 4],
    ctl_fill: usize,
    mgmt: Vec<MgmtConn>,
    _maps: Vec<MmapRaw>,
}

impl EpIo {
    pub(crate) fn new(irq_listener: OwnedFd, mgmt_listener: OwnedFd, maps: Vec<MmapRaw>) -> Self {
        EpIo {
            irq_listener,
            mgmt_listener,
            irq_conn: None,
            unmasked: false,
            count: 0,
            ctl: [0; 4],
            ctl_fill: 0,
            mgmt: Vec::new(),
            _maps: maps,
        }
    }
}

/// One emulated node: its NI engine and its endpoints' sockets.
pub(crate) struct NodeSlot {
    pub engine: NodeEngine,
    pub eps: Vec<EpIo>,
}

struct Frame {
    due: u64,
    src: usize,
    len: usize,
    buf: [u8; MAX_FRAME],
}

/// Frames between nodes, in emission order (every frame gets the same added latency, so
/// this is also due order). The queue keeps its capacity: no allocation per frame.
#[derive(Default)]
struct FrameQueue {
    queue: VecDeque<Frame>,
}

struct QueueNet<'a> {
    frames: &'a mut FrameQueue,
    due: u64,
    src: usize,
}

impl Net for QueueNet<'_> {
    fn send(&mut self, frame: &[u8]) {
        let mut buf = [0u8; MAX_FRAME];
        let len = frame.len().min(MAX_FRAME);
        buf[..len].copy_from_slice(&frame[..len]);
        self.frames.queue.push_back(Frame {
            due: self.due,
            src: self.src,
            len,
            buf,
        });
    }
}

/// A sealed datagram on its way from node `src` to node `dst`.
#[derive(Clone, Copy)]
struct Outgoing {
    src: usize,
    dst: usize,
    len: usize,
}

/// Buffers of the link path, allocated once.
struct LinkBufs {
    /// Sealed datagrams of the current batch (indexed like `out`).
    pool: Vec<[u8; MAX_DATAGRAM]>,
    out: Vec<Outgoing>,
}

impl LinkBufs {
    fn new() -> Self {
        LinkBufs {
            pool: vec![[0u8; MAX_DATAGRAM]; OUT_BATCH],
            out: Vec::with_capacity(OUT_BATCH),
        }
    }
}

/// Frames taken from the outbox per batch.
const OUT_BATCH: usize = 256;

/// Most frames delivered in one pass (a bound, not a limit in practice: the engines keep at
/// most a window of packets in flight).
const FRAMES_PER_PASS: usize = 65_536;
/// How often the sockets are looked at while the thread spins.
const SOCKET_PERIOD: Duration = Duration::from_micros(100);
/// First and last idle sleep.
const SLEEP_MIN: Duration = Duration::from_micros(100);
const SLEEP_IDLE_MAX: Duration = Duration::from_millis(10);
/// Longest sleep while some operation is in flight (timers, held notifications).
const SLEEP_BUSY_MAX: Duration = Duration::from_millis(1);

/// What a `pollfd` entry belongs to.
#[derive(Clone, Copy)]
enum FdRole {
    Wake,
    Link,
    Ep(usize, usize),
}

/// The fabric thread's state (see the module docs).
pub(crate) struct Fabric {
    pub nodes: Vec<NodeSlot>,
    pub coords: Vec<u32>,
    pub wake: UnixDatagram,
    pub doze: DozeFlag,
    pub faults: Arc<FaultPlan>,
    pub stop: Arc<AtomicBool>,
    pub cmds: Receiver<FabricCmd>,
    pub epoch: Instant,
    pub spin: Duration,
    pub counters: Arc<FabricCounters>,
    /// `links[n][m]`: node n's end of the link to node m (`None` for n == m, and
    /// everywhere in [`FabricMode::InProcess`]).
    links: Vec<Vec<Option<LinkEnd>>>,
    /// `unread[n][m]`: bytes were written towards node n's end of the link to m since
    /// it was last read. Unix stream sockets queue the bytes inside `write`, so only those
    /// ends (or all, after a readable poll) are read.
    unread: Vec<Vec<bool>>,
    /// A link was polled readable: read every end in the next pass.
    links_readable: bool,
    bufs: LinkBufs,
    frames: FrameQueue,
    fds: Vec<libc::pollfd>,
    roles: Vec<FdRole>,
}

impl Fabric {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        nodes: Vec<NodeSlot>,
        wake: UnixDatagram,
        doze: DozeFlag,
        faults: Arc<FaultPlan>,
        stop: Arc<AtomicBool>,
        cmds: Receiver<FabricCmd>,
        epoch: Instant,
        spin: Duration,
        counters: Arc<FabricCounters>,
        links: Vec<Vec<Option<LinkEnd>>>,
    ) -> Self {
        let coords = nodes.iter().map(|n| n.engine.coord()).collect();
        Fabric {
            nodes,
            coords,
            wake,
            doze,
            faults,
            stop,
            cmds,
            epoch,
            spin,
            counters,
            unread: vec![vec![false; links.len()]; links.len()],
            links,
            links_readable: false,
            bufs: LinkBufs::new(),
            frames: FrameQueue::default(),
            fds: Vec::new(),
            roles: Vec::new(),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Runs until the stop flag is set.
    pub(crate) fn run(mut self) {
        // Short sleeps should be short: the default 50 us timer slack would double them.
        // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches no memory.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        let nodes = self.nodes.len();
        let eps: usize = self.nodes.iter().map(|n| n.eps.len()).sum();
        let mode = if self.links.is_empty() {
            FabricMode::InProcess
        } else {
            FabricMode::Sockets
        };
        log::info!("fabric up: {nodes} node(s), {eps} endpoint(s), links {mode:?}");
        let mut last_work = Instant::now();
        let mut last_sockets = Instant::now();
        let mut sleep = SLEEP_MIN;
        while !self.stop.load(Ordering::Acquire) {
            let now = self.now();
            let mut worked = self.pass(now);
            if last_sockets.elapsed() >= SOCKET_PERIOD {
                last_sockets = Instant::now();
                worked |= self.sockets(Duration::ZERO);
            }
            if worked {
                last_work = Instant::now();
                sleep = SLEEP_MIN;
                continue;
            }
            if last_work.elapsed() < self.spin {
                std::thread::yield_now();
                continue;
            }
            if self.doze(sleep) {
                last_work = Instant::now();
                sleep = SLEEP_MIN;
            } else {
                sleep = (sleep * 2).min(SLEEP_IDLE_MAX);
            }
            last_sockets = Instant::now();
        }
        log::info!("fabric stopped");
    }

    /// Announces the doze, looks at everything once more, then sleeps (bounded by `limit`,
    /// the next timer and the next due frame). Returns whether there was work.
    fn doze(&mut self, limit: Duration) -> bool {
        self.doze.set(true);
        let now = self.now();
        if self.pass(now) {
            self.doze.set(false);
            return true;
        }
        let busy = self.nodes.iter().any(|n| n.engine.busy());
        let mut timeout = if busy {
            limit.min(SLEEP_BUSY_MAX)
        } else {
            limit
        };
        let timers = self
            .nodes
            .iter()
            .filter_map(|n| n.engine.next_deadline())
            .chain(self.frames.queue.front().map(|f| f.due))
            .min();
        if let Some(t) = timers {
            timeout = timeout.min(Duration::from_nanos(t.saturating_sub(now) + 1_000));
        }
        self.counters.dozes.fetch_add(1, Ordering::Relaxed);
        self.counters.dozing.store(true, Ordering::Relaxed);
        let worked = self.sockets(timeout);
        self.counters.dozing.store(false, Ordering::Relaxed);
        self.doze.set(false);
        worked
    }

    /// One pass over commands, engines, frames and IRQ lines; returns whether anything
    /// happened.
    fn pass(&mut self, now: u64) -> bool {
        self.counters.passes.fetch_add(1, Ordering::Relaxed);
        let mut worked = false;
        while let Ok(cmd) = self.cmds.try_recv() {
            worked = true;
            match cmd {
                FabricCmd::SetPdid { node, ep, pdid } => {
                    self.nodes[node].engine.set_pdid(ep, pdid);
                }
                FabricCmd::SetEnabled { node, ep, on } => {
                    self.nodes[node].engine.set_enabled(ep, on);
                }
            }
        }
        let due = now + self.faults.latency_ns();
        for (src, node) in self.nodes.iter_mut().enumerate() {
            worked |= node.engine.poll(
                now,
                &mut QueueNet {
                    frames: &mut self.frames,
                    due,
                    src,
                },
            );
        }
        worked |= self.deliver(now, due);
        self.raise_irqs();
        worked
    }

    /// The node index of `coord` (coordinates are [`crate::node_coord`] of the index).
    fn node_of(&self, coord: u32) -> Option<usize> {
        let fpga = (coord >> 12 & 3) as usize;
        let (x, y, z) = (
            (coord & 0xF) as usize,
            (coord >> 4 & 0xF) as usize,
            (coord >> 8 & 0xF) as usize,
        );
        let idx = fpga + 4 * x + 64 * y + 1024 * z;
        (self.coords.get(idx) == Some(&coord)).then_some(idx)
    }

    /// Moves every due frame: outbox, frame faults, link (socket or in process), receiving
    /// engine (whose answers join the outbox). Returns whether any frame moved.
    fn deliver(&mut self, now: u64, due: u64) -> bool {
        let mut moved = 0;
        loop {
            self.bufs.out.clear();
            while self.bufs.out.len() < OUT_BATCH {
                match self.frames.queue.front() {
                    Some(f) if f.due <= now => {}
                    _ => break,
                }
                let frame = self.frames.queue.pop_front().expect("front exists");
                moved += 1;
                self.stage(&frame);
            }
            let staged = !self.bufs.out.is_empty();
            for i in 0..self.bufs.out.len() {
                let o = self.bufs.out[i];
                if self.links.is_empty() || o.src == o.dst {
                    // In process, or within one node (the NI's own loopback).
                    let datagram = self.bufs.pool[i];
                    self.receive(o.dst, &datagram[..o.len], now, due);
                } else if let Some(end) = self.links[o.src][o.dst].as_mut() {
                    end.push(&self.bufs.pool[i][..o.len]);
                }
            }
            let (flushed, received) = if self.links.is_empty() {
                (false, false)
            } else {
                (self.flush_links(), self.receive_links(now, due))
            };
            if (!staged && !flushed && !received) || moved >= FRAMES_PER_PASS {
                break;
            }
        }
        if moved > 0 {
            self.counters
                .frames
                .fetch_add(moved as u64, Ordering::Relaxed);
        }
        moved > 0
    }

    /// Applies the frame faults to `frame` and, unless it is dropped, seals it into the
    /// next pool buffer.
    fn stage(&mut self, frame: &Frame) {
        let bytes = &frame.buf[..frame.len];
        let dst = match FramePacket::new_checked(bytes).map(|p| p.dst_coord()) {
            Ok(dst) => match self.node_of(dst) {
                Some(i) => i,
                None => {
                    log::debug!("no node at {dst:#x}; frame dropped");
                    return;
                }
            },
            Err(e) => {
                log::warn!("malformed frame dropped: {e}");
                return;
            }
        };
        let src_coord = self.coords[frame.src];
        if self.faults.take_drop(src_coord) {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            log::debug!("fault: dropped a frame from {src_coord:#x}");
            return;
        }
        let slot = self.bufs.out.len();
        let buf = &mut self.bufs.pool[slot];
        buf[..frame.len].copy_from_slice(bytes);
        let len = link::seal(buf, frame.len);
        if self.faults.take_corrupt(src_coord) {
            // A bit in the middle of the frame; the receiving link's check discards it.
            buf[frame.len / 2] ^= 0x08;
            log::debug!("fault: corrupted a frame from {src_coord:#x}");
        }
        self.bufs.out.push(Outgoing {
            src: frame.src,
            dst,
            len,
        });
    }

    /// Writes every link end's queued records (one `write` per end); returns whether any
    /// bytes left. Records a full socket does not take stay queued, in order, for the
    /// next round (the reader is this thread, which drains the peer ends next).
    fn flush_links(&mut self) -> bool {
        let mut any = false;
        for n in 0..self.links.len() {
            for m in 0..self.links.len() {
                let Some(end) = self.links[n][m].as_mut() else {
                    continue;
                };
                if !end.has_output() {
                    continue;
                }
                match end.flush() {
                    Ok(0) => {}
                    Ok(_) => {
                        any = true;
                        self.unread[m][n] = true;
                    }
                    Err(e) => log::warn!("link {n} -> {m}: write failed: {e}"),
                }
            }
        }
        any
    }

    /// Reads the link ends that were written to (every end after a readable poll) and
    /// hands each frame to the end's node; returns whether any frame came.
    fn receive_links(&mut self, now: u64, due: u64) -> bool {
        let mut any = false;
        let all = std::mem::take(&mut self.links_readable);
        for n in 0..self.links.len() {
            for m in 0..self.links.len() {
                if !(all || self.unread[n][m]) {
                    continue;
                }
                self.unread[n][m] = false;
                // Taken out for the call, so that the callback may use the whole fabric.
                let Some(mut end) = self.links[n][m].take() else {
                    continue;
                };
                match end.receive(|datagram| self.receive(n, datagram, now, due)) {
                    Ok(count) => any |= count > 0,
                    Err(e) => log::warn!("link {m} -> {n}: read failed: {e}"),
                }
                self.links[n][m] = Some(end);
            }
        }
        any
    }

    /// Checks a datagram's link checksum and hands its frame to node `dst`'s engine.
    fn receive(&mut self, dst: usize, datagram: &[u8], now: u64, due: u64) {
        match link::open(datagram) {
            Some(frame) => {
                self.nodes[dst].engine.on_frame(
                    frame,
                    now,
                    &mut QueueNet {
                        frames: &mut self.frames,
                        due,
                        src: dst,
                    },
                );
            }
            None => {
                self.counters.corrupted.fetch_add(1, Ordering::Relaxed);
                log::debug!("node {dst}: link check failed; frame discarded");
            }
        }
    }

    /// Polls every socket for at most `timeout` and services the ready ones; returns
    /// whether any was.
    fn sockets(&mut self, timeout: Duration) -> bool {
        self.fds.clear();
        self.roles.clear();
        let entry = |fd: i32| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        self.fds.push(entry(self.wake.as_raw_fd()));
        self.roles.push(FdRole::Wake);
        for end in self.links.iter().flatten().flatten() {
            self.fds.push(entry(end.raw_fd()));
            self.roles.push(FdRole::Link);
        }
        for (n, node) in self.nodes.iter().enumerate() {
            for (k, ep) in node.eps.iter().enumerate() {
                let fds = [&ep.irq_listener, &ep.mgmt_listener]
                    .into_iter()
                    .chain(ep.irq_conn.as_ref())
                    .chain(ep.mgmt.iter().map(|m| &m.sock));
                for fd in fds {
                    self.fds.push(entry(fd.as_raw_fd()));
                    self.roles.push(FdRole::Ep(n, k));
                }
            }
        }
        match fd::ppoll(&mut self.fds, timeout) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) => {
                log::warn!("fabric: ppoll failed: {e}");
                std::thread::sleep(timeout);
                return false;
            }
        }
        let mut worked = false;
        let mut last = None;
        for i in 0..self.fds.len() {
            if self.fds[i].revents == 0 {
                continue;
            }
            match self.roles[i] {
                FdRole::Wake => {
                    let mut buf = [0u8; 16];
                    while self.wake.recv(&mut buf).is_ok() {
                        self.counters.wakeups.fetch_add(1, Ordering::Relaxed);
                    }
                    worked = true;
                }
                FdRole::Link => {
                    self.links_readable = true;
                    worked = true;
                }
                FdRole::Ep(n, k) if last != Some((n, k)) => {
                    last = Some((n, k));
                    worked |= self.service_irq(n, k);
                    worked |= self.service_mgmt(n, k);
                }
                FdRole::Ep(..) => {}
            }
        }
        worked
    }

    fn service_irq(&mut self, n: usize, k: usize) -> bool {
        let mut worked = false;
        let ep = &mut self.nodes[n].eps[k];
        match socket::accept(ep.irq_listener.as_fd()) {
            Ok(Some(conn)) => {
                worked = true;
                ep.irq_conn = Some(conn);
                ep.unmasked = false;
                ep.ctl_fill = 0;
            }
            Ok(None) => {}
            Err(e) => log::warn!("node {n} ep {k}: irq accept failed: {e}"),
        }
        let Some(conn) = &ep.irq_conn else {
            return worked;
        };
        loop {
            let want = &mut ep.ctl[ep.ctl_fill..];
            // SAFETY: `want` is writable memory of `want.len()` bytes alive across the call;
            // the descriptor is open.
            let got = unsafe {
                libc::recv(
                    conn.as_raw_fd(),
                    want.as_mut_ptr().cast(),
                    want.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if got < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted {
                    ep.irq_conn = None;
                }
                break;
            }
            if got == 0 {
                ep.irq_conn = None;
                ep.unmasked = false;
                break;
            }
            worked = true;
            ep.ctl_fill += got as usize;
            if ep.ctl_fill == 4 {
                ep.ctl_fill = 0;
                ep.unmasked = u32::from_ne_bytes(ep.ctl) != 0;
            }
        }
        worked
    }

    /// Sends an interrupt count on every unmasked line whose level is high, then masks it
    /// (`uio_pdrv_genirq` semantics).
    fn raise_irqs(&mut self) {
        for node in &mut self.nodes {
            for (k, ep) in node.eps.iter_mut().enumerate() {
                let Some(conn) = &ep.irq_conn else { continue };
                if !ep.unmasked || !node.engine.irq_level(k as u16) {
                    continue;
                }
                ep.count = ep.count.wrapping_add(1);
                let bytes = ep.count.to_ne_bytes();
                // SAFETY: `bytes` is 4 readable bytes alive across the call; the socket is
                // open.
                let sent = unsafe {
                    libc::send(
                        conn.as_raw_fd(),
                        bytes.as_ptr().cast(),
                        4,
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    )
                };
                if sent == 4 {
                    ep.unmasked = false;
                } else {
                    ep.count = ep.count.wrapping_sub(1);
                    if sent < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                        ep.irq_conn = None;
                    }
                }
            }
        }
    }

    fn service_mgmt(&mut self, n: usize, k: usize) -> bool {
        let mut worked = false;
        let ep = &mut self.nodes[n].eps[k];
        match socket::accept(ep.mgmt_listener.as_fd()) {
            Ok(Some(sock)) => {
                worked = true;
                ep.mgmt.push(MgmtConn {
                    sock,
                    regions: Vec::new(),
                });
            }
            Ok(None) => {}
            Err(e) => log::warn!("node {n} ep {k}: mgmt accept failed: {e}"),
        }
        let mut c = 0;
        while c < self.nodes[n].eps[k].mgmt.len() {
            let mut req = [0u8; 64];
            let got = fdpass::recv_with_fd(self.nodes[n].eps[k].mgmt[c].sock.as_fd(), &mut req);
            match got {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => c += 1,
                Ok((0, _)) | Err(_) => {
                    worked = true;
                    let conn = self.nodes[n].eps[k].mgmt.swap_remove(c);
                    for id in conn.regions {
                        self.nodes[n].engine.unregister_region(k as u16, id);
                    }
                    log::debug!("node {n} ep {k}: registration connection closed");
                }
                Ok((len, fd)) => {
                    worked = true;
                    let (status, nva) = self.mgmt_request(n, k, c, &req[..len], fd);
                    let mut reply = [0u8; mgmt::REPLY_LEN];
                    reply[0..4].copy_from_slice(&mgmt::MAGIC.to_le_bytes());
                    reply[4..8].copy_from_slice(&status.to_le_bytes());
                    reply[8..16].copy_from_slice(&nva.to_le_bytes());
                    let sock = self.nodes[n].eps[k].mgmt[c].sock.as_fd();
                    if let Err(e) = fdpass::send_with_fd(sock, &[io::IoSlice::new(&reply)], None) {
                        log::warn!("node {n} ep {k}: mgmt reply failed: {e}");
                    }
                    c += 1;
                }
            }
        }
        worked
    }

    fn mgmt_request(
        &mut self,
        n: usize,
        k: usize,
        c: usize,
        req: &[u8],
        fd: Option<OwnedFd>,
    ) -> (u32, u64) {
        let u32_at = |o: usize| u32::from_le_bytes(req[o..o + 4].try_into().expect("4 bytes"));
        if req.len() != mgmt::REQUEST_LEN || u32_at(0) != mgmt::MAGIC {
            return (mgmt_status::BAD_REQUEST, 0);
        }
        let region = u32_at(8);
        let len = u64::from_le_bytes(req[16..24].try_into().expect("8 bytes"));
        let node = &mut self.nodes[n];
        match u32_at(4) {
            mgmt::OP_REGISTER => {
                let Some(fd) = fd else {
                    return (mgmt_status::BAD_REQUEST, 0);
                };
                if len == 0 || len > crate::nva::REGION_MASK + 1 {
                    return (mgmt_status::BAD_LENGTH, 0);
                }
                let want = match region {
                    mgmt::ANY_REGION => None,
                    r if r < crate::nva::MAX_REGIONS as u32 => Some(r as u8),
                    _ => return (mgmt_status::NO_REGION, 0),
                };
                let Ok(mapped) = Region::map(fd.as_fd(), len as usize) else {
                    return (mgmt_status::MAP_FAILED, 0);
                };
                match node.engine.register_region(k as u16, want, mapped) {
                    Some(id) => {
                        node.eps[k].mgmt[c].regions.push(id);
                        log::debug!("node {n} ep {k}: region {id} registered ({len} bytes)");
                        (mgmt_status::OK, Nva::new(id, 0).0)
                    }
                    None => (mgmt_status::NO_REGION, 0),
                }
            }
            mgmt::OP_UNREGISTER => {
                let conn = &mut node.eps[k].mgmt[c];
                let Some(pos) = conn.regions.iter().position(|r| u32::from(*r) == region) else {
                    return (mgmt_status::NO_SUCH_REGION, 0);
                };
                conn.regions.swap_remove(pos);
                node.engine.unregister_region(k as u16, region as u8);
                (mgmt_status::OK, Nva::new(region as u8, 0).0)
            }
            _ => (mgmt_status::BAD_REQUEST, 0),
        }
    }
}
