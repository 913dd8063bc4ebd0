//! The fabric thread: every emulated node's NI engine, the frames between them, and the IRQ
//! and registration sockets of every endpoint, driven by one thread.
//!
//! Why one thread for all nodes: on a small host (the reference machine has 2 cores) every
//! thread that polls shared memory competes with the driver processes it serves, and a
//! hand-off to a blocked thread costs a wake-up (about 70 us on a VM). One thread that
//! runs the sending node's engine, hands the frame to the receiving node's engine in the
//! same pass and carries the ack back needs no hand-off and no system call per frame.
//! Frames keep the ExaNet three-part encoding of [`crate::frame`] (encoded by the sender,
//! parsed by the receiver); they travel through an in-process queue (model section 12
//! allows in-process channels), which also holds them for the `latency` fault.
//!
//! Loop: drain control commands, poll every engine ([`NodeEngine::poll`]: Acquire loads of
//! the doorbells and consumer counters, Release stores of what it publishes), deliver every
//! due frame ([`NodeEngine::on_frame`]), raise IRQs. Pacing is adaptive:
//! * while a pass did work, the next pass starts at once;
//! * for [`EmuConfig::spin`](super::EmuConfig::spin) after the last work it keeps polling,
//!   yielding the CPU between passes (drivers on the same core run), and looks at the
//!   sockets with a zero-timeout `ppoll` every 100 us;
//! * then it dozes: it sets the doze flag ([`super::wake`]), polls once more, and sleeps
//!   in `ppoll` on all sockets (the wake socket included) until a doorbell's wake-up, a
//!   socket event, the next engine timer or frame due time, or the idle limit (growing from
//!   100 us to 10 ms; 1 ms while operations are in flight).
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

use super::wake::DozeFlag;
use crate::engine::{Net, NodeEngine, Region};
use crate::fault::FaultPlan;
use crate::frame::{FramePacket, MAX_FRAME};
use crate::nva::{Nva, mgmt, mgmt_status};
use crate::sys;

/// Counters of the fabric thread, readable from other threads (`stats` control command).
#[derive(Debug, Default)]
pub(crate) struct FabricCounters {
    /// Passes over all engines.
    pub passes: AtomicU64,
    /// Frames delivered between engines.
    pub frames: AtomicU64,
    /// Times the thread went to sleep.
    pub dozes: AtomicU64,
    /// Wake-up datagrams received (doorbells of drivers that found it dozing, commands).
    pub wakeups: AtomicU64,
    /// Whether it sleeps right now.
    pub dozing: AtomicBool,
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
}

impl Net for QueueNet<'_> {
    fn send(&mut self, frame: &[u8]) {
        let mut buf = [0u8; MAX_FRAME];
        let len = frame.len().min(MAX_FRAME);
        buf[..len].copy_from_slice(&frame[..len]);
        self.frames.queue.push_back(Frame {
            due: self.due,
            len,
            buf,
        });
    }
}

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
        log::info!("fabric up: {nodes} node(s), {eps} endpoint(s)");
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
        for node in &mut self.nodes {
            worked |= node.engine.poll(
                now,
                &mut QueueNet {
                    frames: &mut self.frames,
                    due,
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

    /// Hands every due frame to its destination engine (answers join the queue).
    fn deliver(&mut self, now: u64, due: u64) -> bool {
        let mut n = 0;
        while n < FRAMES_PER_PASS {
            match self.frames.queue.front() {
                Some(f) if f.due <= now => {}
                _ => break,
            }
            let frame = self.frames.queue.pop_front().expect("front exists");
            n += 1;
            let bytes = &frame.buf[..frame.len];
            match FramePacket::new_checked(bytes).map(|p| p.dst_coord()) {
                Ok(dst) => match self.node_of(dst) {
                    Some(i) => {
                        self.nodes[i].engine.on_frame(
                            bytes,
                            now,
                            &mut QueueNet {
                                frames: &mut self.frames,
                                due,
                            },
                        );
                    }
                    None => log::debug!("no node at {dst:#x}; frame dropped"),
                },
                Err(e) => log::warn!("malformed frame dropped: {e}"),
            }
        }
        if n > 0 {
            self.counters.frames.fetch_add(n as u64, Ordering::Relaxed);
        }
        n > 0
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
        match sys::ppoll(&mut self.fds, timeout) {
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
        match sys::accept(ep.irq_listener.as_fd()) {
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
        match sys::accept(ep.mgmt_listener.as_fd()) {
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
            let got = sys::recv_with_fd(self.nodes[n].eps[k].mgmt[c].sock.as_fd(), &mut req);
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
                    if let Err(e) = sys::send_with_fd(sock, &[io::IoSlice::new(&reply)], None) {
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
