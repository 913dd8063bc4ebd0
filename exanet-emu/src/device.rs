//! The NI device state machine shared by the in-process [`Model`](crate::Model) and the
//! `exanet-emu` emulator.
//!
//! Kept as one file because it is one state machine: the NI's poll (doorbells, descriptors,
//! timeouts) and its frame handler update the same endpoint state, as the hardware does.
//!
//! What it is: [`NiDevice`], the NI of one node with its endpoints, working at register
//! level on the maps of each endpoint ([`DevMem`] views, atomics). [`NiDevice::poll`] reads
//! the doorbells (`TX_TAIL`, `CH[c].TAIL`) and the consumer counters with `Acquire` loads,
//! fetches descriptors, sends frames (section 12) through a [`Net`], times out packets that
//! are not acknowledged, writes statuses and records back *in order* and publishes the
//! counters with `Release` stores, then recomputes `IRQ_PENDING`.
//! [`NiDevice::on_frame`] handles a frame from the network: mailbox delivery (with the
//! PDID check, `RING_FULL` refusal and `RX_NACKS`), RDMA write data, read requests and
//! responses, remote notifications and acks.
//!
//! Behaviour choices a driver relies on (ASSUMPTION, consistent with the model):
//! * TX statuses are written back in TX index order: `TX_DONE` is a watermark, and the
//!   status of index `i` is final once `TX_DONE > i`.
//! * A message not acknowledged within the ack timeout ends `NACKED` / `UNREACHABLE`; an
//!   RDMA descriptor whose packets are not acknowledged ends with status `UNREACHABLE`.
//! * A `NO_ACK` message completes `ACKED` when it leaves, `DROPPED` if the destination is
//!   unreachable; a refusal at the destination is counted there (`RX_NACKS`) only.
//! * A TX descriptor with length 0 or above 64 ends `NACKED` with reason
//!   [`NACK_BAD_DESCRIPTOR`] (an emulator extension of the reason codes).
//! * `NOTIFY_REMOTE` is a separate notify packet sent after every data packet was
//!   acknowledged; a `RING_FULL` answer makes the NI hold it and retry (backing off from
//!   20 us to 1 ms); the descriptor completes when it is accepted. `NOTIFY_LOCAL` into a
//!   full own mailbox likewise holds the completion.
//! * A channel keeps at most [`CHANNEL_WINDOW`] packets in flight.
//! * RDMA moves data as a DMA engine does, in packets of `frame::MAX_PAYLOAD` (256) bytes
//!   at offsets `k * 256` from the descriptor's start (a multiple of
//!   `gsas_core::wire::GRANULE`), each read and written in address order with one access
//!   per aligned 1/2/4/8-byte element (`gsas_transport::watched`): a PE watching an aligned
//!   word in registered memory while a WRITE or a READ response lands sees it old or new,
//!   never torn or written twice.
//!
//! What it is not: a timing model (latency is added by the emulator's frame queue), or
//! thread-safe: one thread drives one device (the emulator's fabric thread drives all).

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use gsas_transport::watched::{load_once, store_once};
use memmap2::{MmapOptions, MmapRaw};

use crate::fault::FaultPlan;
use crate::frame::{self, FrameRepr, ack_sub, ptype, resp, write_sub};
use crate::io::DevMem;
use crate::nva::{MAX_REGIONS, Nva, REGION_MASK};
use crate::regs::{
    RDMA_CHANNELS, RDMA_DEPTH, RX_DEPTH, TX_DEPTH, caps0, caps1, class, ep_status, irq, meta, nack,
    notif, off, rdma_status, rdmad, tx_status,
};

/// NACK reason for a malformed TX descriptor (emulator extension).
pub const NACK_BAD_DESCRIPTOR: u8 = 5;
/// Packets in flight per RDMA channel.
pub const CHANNEL_WINDOW: u32 = 64;
const NOTIFY_RETRY_MIN_NS: u64 = 20_000;
const NOTIFY_RETRY_MAX_NS: u64 = 1_000_000;

/// Where the device sends frames.
pub trait Net {
    /// Sends one encoded frame (the destination coordinate is in its header).
    fn send(&mut self, frame: &[u8]);
}

/// Device parameters.
#[derive(Clone, Copy, Debug)]
pub struct DeviceConfig {
    /// How long a packet may stay unacknowledged before the NI gives up (`UNREACHABLE`).
    pub ack_timeout_ns: u64,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            ack_timeout_ns: 100_000_000,
        }
    }
}

/// The four maps of one endpoint, as seen by the device.
#[derive(Clone, Copy, Debug)]
pub struct EpMaps {
    /// map0.
    pub regs: DevMem,
    /// map1.
    pub mbox: DevMem,
    /// map2.
    pub pktz: DevMem,
    /// map3.
    pub rdma: DevMem,
}

/// A registered memory region (emulator translation, option B), mapped into the device's
/// process.
#[derive(Debug)]
pub struct Region {
    ptr: *mut u8,
    len: usize,
    _map: MmapRaw,
}

// SAFETY: the region owns its mapping; data is copied through raw pointers by the one
// thread driving the device, and the other side (the owner process) synchronises through
// the NI counters, as with DMA.
unsafe impl Send for Region {}

impl Region {
    /// Maps `len` bytes of `fd` from offset 0.
    pub fn map(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> std::io::Result<Region> {
        let st = nix_fstat_len(fd)?;
        if len == 0 || st < len as u64 || len as u64 > REGION_MASK + 1 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "region length",
            ));
        }
        let map = MmapOptions::new().len(len).map_raw(fd.as_raw_fd())?;
        Ok(Region {
            ptr: map.as_mut_ptr(),
            len,
            _map: map,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn nix_fstat_len(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: plain old data; zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` a valid buffer for the call.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

#[derive(Debug)]
struct TxPend {
    index: u32,
    deadline: u64,
    result: Option<(u32, u8)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Data packets being sent/acknowledged.
    Data,
    /// Remote notification to send (at `retry_at`) or in flight.
    Notify {
        in_flight: bool,
        retry_at: u64,
        delay: u64,
    },
    /// Finished (status final); waiting for in-order completion.
    Done,
}

#[derive(Debug)]
struct Op {
    index: u32,
    opcode: u8,
    flags: u8,
    len: u32,
    local: u64,
    remote: u64,
    coord: u32,
    ep: u16,
    cookie: u32,
    /// Packets issued, answered.
    issued: u32,
    answered: u32,
    packets: u32,
    bytes_done: u32,
    status: u32,
    stage: Stage,
    deadline: u64,
}

impl Op {
    fn finished(&self) -> bool {
        self.stage == Stage::Done
    }
}

#[derive(Debug, Default)]
struct Chan {
    next: u32,
    ops: VecDeque<Op>,
}

struct Ep {
    id: u16,
    maps: EpMaps,
    pdid: u16,
    enabled: bool,
    regions: Vec<Option<Region>>,
    tx_next: u32,
    tx: VecDeque<TxPend>,
    ch: [Chan; RDMA_CHANNELS],
    level: bool,
    rx_prod: u32,
}

/// The NI of one node (see the module docs).
pub struct NiDevice {
    coord: u32,
    eps: Vec<Ep>,
    cfg: DeviceConfig,
    faults: Arc<FaultPlan>,
    buf: Box<[u8; frame::MAX_FRAME]>,
}

impl std::fmt::Debug for NiDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NiDevice")
            .field("coord", &self.coord)
            .field("eps", &self.eps.len())
            .finish()
    }
}

fn resp_to_nack(code: u8) -> u8 {
    match code {
        resp::RING_FULL => nack::RING_FULL,
        resp::PDID_MISMATCH => nack::PDID_MISMATCH,
        resp::UNREACHABLE => nack::UNREACHABLE,
        _ => nack::NO_SUCH_EP,
    }
}

fn resp_to_rdma(code: u8) -> u32 {
    match code {
        resp::OK => rdma_status::OK,
        resp::PDID_MISMATCH => rdma_status::REMOTE_PDID_MISMATCH,
        resp::XLAT_FAULT => rdma_status::REMOTE_XLAT_FAULT,
        resp::UNREACHABLE => rdma_status::UNREACHABLE,
        resp::BAD_REQUEST => rdma_status::BAD_DESCRIPTOR,
        _ => rdma_status::REMOTE_EP_DISABLED,
    }
}

/// Encodes `f` into `buf` and sends it, unless its destination is unreachable.
fn send_frame(faults: &FaultPlan, buf: &mut [u8], net: &mut impl Net, f: &FrameRepr<'_>) {
    if !faults.is_unreachable(f.dst_coord) {
        let n = f.emit(buf);
        net.send(&buf[..n]);
    }
}

/// Builds a 64-byte notification message (section 7).
#[allow(clippy::too_many_arguments)]
pub fn notification(
    class: u8,
    status: u32,
    cookie: u32,
    len: u64,
    nva: u64,
    peer_coord: u32,
    peer_ep: u32,
    channel: u32,
) -> [u8; 64] {
    let mut m = [0u8; 64];
    m[notif::MAGIC_OFF..][..4].copy_from_slice(&notif::MAGIC.to_le_bytes());
    m[notif::CLASS_OFF..][..4].copy_from_slice(&u32::from(class).to_le_bytes());
    m[notif::STATUS_OFF..][..4].copy_from_slice(&status.to_le_bytes());
    m[notif::COOKIE_OFF..][..4].copy_from_slice(&cookie.to_le_bytes());
    m[notif::LEN_OFF..][..8].copy_from_slice(&len.to_le_bytes());
    m[notif::NVA_OFF..][..8].copy_from_slice(&nva.to_le_bytes());
    m[notif::PEER_COORD_OFF..][..4].copy_from_slice(&peer_coord.to_le_bytes());
    m[notif::PEER_EP_OFF..][..4].copy_from_slice(&peer_ep.to_le_bytes());
    m[notif::CHANNEL_OFF..][..4].copy_from_slice(&channel.to_le_bytes());
    m
}

/// Where an endpoint's frames come from.
#[derive(Clone, Copy)]
struct Origin {
    pdid: u16,
    coord: u32,
    ep: u16,
}

/// Sends the remote notification (`RDMA_REMOTE_NOTIFY`) of `op`, an operation of channel
/// `c`, once its data are all acknowledged.
fn send_notify(
    op: &Op,
    c: usize,
    from: Origin,
    faults: &FaultPlan,
    buf: &mut [u8],
    net: &mut impl Net,
) {
    let msg = notification(
        class::RDMA_REMOTE_NOTIFY,
        rdma_status::OK,
        op.cookie,
        u64::from(op.len),
        op.remote,
        from.coord,
        u32::from(from.ep),
        0,
    );
    let f = FrameRepr {
        pdid: from.pdid,
        dst_coord: op.coord,
        ptype: ptype::NOTIFY,
        resp: 0,
        dst_va: u64::from(op.ep),
        dst_ep: op.ep,
        sub: 0,
        no_ack: false,
        src_coord: from.coord,
        src_ep: from.ep,
        tid: (c as u32) << 30 | (op.index & 0x3FFF_FFFF),
        seq: op.packets,
        first: true,
        last: true,
        notif: true,
        payload: &msg,
    };
    send_frame(faults, buf, net, &f);
}

impl NiDevice {
    /// An NI at `coord` with no endpoints.
    pub fn new(coord: u32, cfg: DeviceConfig, faults: Arc<FaultPlan>) -> Self {
        NiDevice {
            coord,
            eps: Vec::new(),
            cfg,
            faults,
            buf: Box::new([0; frame::MAX_FRAME]),
        }
    }

    /// The node coordinate.
    pub fn coord(&self) -> u32 {
        self.coord
    }

    /// Number of endpoints.
    pub fn endpoints(&self) -> usize {
        self.eps.len()
    }

    /// Adds endpoint `id` over `maps` (zeroed memory) with `pdid`, and writes its
    /// identification registers. Endpoints must be added in id order starting at 0.
    pub fn add_endpoint(&mut self, maps: EpMaps, pdid: u16) -> u16 {
        let id = self.eps.len() as u16;
        let r = maps.regs;
        r.store32(off::ID, crate::regs::ID_MAGIC, Relaxed);
        r.store32(off::VERSION, crate::regs::VERSION_0_1, Relaxed);
        r.store32(off::CAPS0, caps0::VALUE, Relaxed);
        r.store32(off::CAPS1, caps1::VALUE, Relaxed);
        r.store32(off::NODE_COORD, self.coord, Relaxed);
        r.store32(off::EP_ID, u32::from(id), Relaxed);
        r.store32(off::PDID, u32::from(pdid), Relaxed);
        r.store32(off::EP_STATUS, ep_status::ENABLED, Release);
        self.eps.push(Ep {
            id,
            maps,
            pdid,
            enabled: true,
            regions: (0..MAX_REGIONS).map(|_| None).collect(),
            tx_next: r.load32(off::TX_TAIL, Acquire),
            tx: VecDeque::new(),
            ch: Default::default(),
            level: false,
            rx_prod: r.load32(off::RX_PROD, Relaxed),
        });
        let ep = self.eps.last_mut().expect("just pushed");
        for (c, ch) in ep.ch.iter_mut().enumerate() {
            ch.next = r.load32(off::ch_tail(c), Acquire);
        }
        id
    }

    /// Changes the PDID of endpoint `ep` (management path).
    pub fn set_pdid(&mut self, ep: u16, pdid: u16) -> bool {
        let Some(e) = self.eps.get_mut(usize::from(ep)) else {
            return false;
        };
        e.pdid = pdid;
        e.maps.regs.store32(off::PDID, u32::from(pdid), Release);
        true
    }

    /// Enables or disables endpoint `ep` (management path).
    pub fn set_enabled(&mut self, ep: u16, enabled: bool) -> bool {
        let Some(e) = self.eps.get_mut(usize::from(ep)) else {
            return false;
        };
        e.enabled = enabled;
        let status = e.maps.regs.load32(off::EP_STATUS, Relaxed) & !ep_status::ENABLED;
        e.maps.regs.store32(
            off::EP_STATUS,
            status | if enabled { ep_status::ENABLED } else { 0 },
            Release,
        );
        true
    }

    /// Registers `region` for endpoint `ep` as id `want` (or the lowest free id) and
    /// returns the id.
    pub fn register_region(&mut self, ep: u16, want: Option<u8>, region: Region) -> Option<u8> {
        let e = self.eps.get_mut(usize::from(ep))?;
        let id = match want {
            Some(id) => (e.regions[usize::from(id)].is_none()).then_some(id)?,
            None => e.regions.iter().position(Option::is_none)? as u8,
        };
        e.regions[usize::from(id)] = Some(region);
        Some(id)
    }

    /// Removes region `id` of endpoint `ep`; returns whether it existed.
    pub fn unregister_region(&mut self, ep: u16, id: u8) -> bool {
        self.eps
            .get_mut(usize::from(ep))
            .and_then(|e| e.regions[usize::from(id)].take())
            .is_some()
    }

    /// The IRQ output level of endpoint `ep` (`(IRQ_ENABLE & IRQ_PENDING) != 0`) as of the
    /// last [`poll`](Self::poll) or [`on_frame`](Self::on_frame).
    pub fn irq_level(&self, ep: u16) -> bool {
        self.eps.get(usize::from(ep)).is_some_and(|e| e.level)
    }

    /// Whether anything is in flight (TX awaiting acks, RDMA operations).
    pub fn busy(&self) -> bool {
        self.eps
            .iter()
            .any(|e| !e.tx.is_empty() || e.ch.iter().any(|c| !c.ops.is_empty()))
    }

    /// The earliest virtual time (ns) at which [`poll`](Self::poll) has timer work (an ack
    /// timeout or a notification retry), if any. Work that waits for software instead (a
    /// `NOTIFY_LOCAL` held by a full own mailbox) shows only in [`busy`](Self::busy).
    pub fn next_deadline(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut at = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        for e in &self.eps {
            e.tx.iter()
                .filter(|p| p.result.is_none())
                .for_each(|p| at(p.deadline));
            for op in e.ch.iter().flat_map(|c| c.ops.iter()) {
                match op.stage {
                    Stage::Notify {
                        in_flight: false,
                        retry_at,
                        ..
                    } => at(retry_at),
                    Stage::Done => {}
                    _ => at(op.deadline),
                }
            }
        }
        next
    }

    /// Translates `nva..nva+len` of endpoint `e` into a pointer.
    fn translate(regions: &[Option<Region>], nva: u64, len: usize) -> Option<*mut u8> {
        let nva = Nva(nva);
        let region = regions[usize::from(nva.region())].as_ref()?;
        let start = usize::try_from(nva.offset()).ok()?;
        let end = start.checked_add(len)?;
        (end <= region.len).then(|| region.ptr.wrapping_add(start))
    }

    fn emit(&mut self, net: &mut impl Net, f: &FrameRepr<'_>) {
        send_frame(&self.faults, &mut self.buf[..], net, f);
    }

    /// Runs every endpoint's state machine once; returns whether anything changed.
    pub fn poll(&mut self, now: u64, net: &mut impl Net) -> bool {
        let mut busy = false;
        for i in 0..self.eps.len() {
            busy |= self.poll_tx(i, now, net);
            for c in 0..RDMA_CHANNELS {
                busy |= self.poll_channel(i, c, now, net);
            }
            busy |= self.update_irq(i);
        }
        busy
    }

    fn poll_tx(&mut self, i: usize, now: u64, net: &mut impl Net) -> bool {
        let mut busy = false;
        let coord = self.coord;
        let timeout = self.cfg.ack_timeout_ns;
        let tail = self.eps[i].maps.regs.load32(off::TX_TAIL, Acquire);
        while self.eps[i].tx_next != tail {
            busy = true;
            let e = &mut self.eps[i];
            let index = e.tx_next;
            let j = (index % TX_DEPTH) as usize;
            let w0 = e.maps.pktz.load32(off::tx_desc(j, 0), Relaxed);
            let w1 = e.maps.pktz.load32(off::tx_desc(j, 1), Relaxed);
            let len = (w1 & crate::regs::txd::LEN_MASK) as usize;
            let no_ack = w1 & crate::regs::txd::NO_ACK != 0;
            let mut payload = [0u8; 64];
            let valid = (1..=64).contains(&len);
            if valid {
                e.maps.pktz.read_bytes(off::tx_slot(j), &mut payload[..len]);
            }
            e.tx_next = index.wrapping_add(1);
            e.maps.regs.store32(off::TX_HEAD, e.tx_next, Release);
            let dst_coord = w0 & crate::regs::COORD_MASK;
            let dst_ep = (w0 >> crate::regs::txd::DST_EP_SHIFT) as u16;
            let mut pend = TxPend {
                index,
                deadline: now.saturating_add(timeout),
                result: None,
            };
            if !valid {
                pend.result = Some((tx_status::NACKED, NACK_BAD_DESCRIPTOR));
            } else if !e.enabled {
                pend.result = Some((tx_status::NACKED, nack::NO_SUCH_EP));
            } else {
                let (pdid, src_ep) = (e.pdid, e.id);
                if no_ack {
                    let dropped = self.faults.is_unreachable(dst_coord);
                    pend.result = Some((
                        if dropped {
                            tx_status::DROPPED
                        } else {
                            tx_status::ACKED
                        },
                        0,
                    ));
                }
                let f = FrameRepr {
                    pdid,
                    dst_coord,
                    ptype: ptype::WRITE,
                    resp: 0,
                    dst_va: u64::from(dst_ep),
                    dst_ep,
                    sub: write_sub::MAILBOX,
                    no_ack,
                    src_coord: coord,
                    src_ep,
                    tid: index,
                    seq: 0,
                    first: true,
                    last: true,
                    notif: false,
                    payload: &payload[..len],
                };
                self.emit(net, &f);
            }
            self.eps[i].tx.push_back(pend);
        }
        let e = &mut self.eps[i];
        for p in e.tx.iter_mut() {
            if p.result.is_none() && now > p.deadline {
                p.result = Some((tx_status::NACKED, nack::UNREACHABLE));
            }
        }
        busy | Self::retire_tx(e)
    }

    /// Writes back final TX statuses in index order.
    fn retire_tx(e: &mut Ep) -> bool {
        let mut any = false;
        while let Some(&TxPend {
            index,
            result: Some((status, reason)),
            ..
        }) = e.tx.front()
        {
            any = true;
            let j = (index % TX_DEPTH) as usize;
            e.maps.pktz.store32(
                off::tx_desc(j, 2),
                crate::regs::txd::w2(status, reason),
                Relaxed,
            );
            e.maps.pktz.store32(off::tx_desc(j, 3), index, Release);
            if status == tx_status::NACKED {
                e.maps.regs.add32(off::TX_NACKS, 1, Release);
            }
            e.maps
                .regs
                .store32(off::TX_DONE, index.wrapping_add(1), Release);
            e.tx.pop_front();
        }
        any
    }

    fn poll_channel(&mut self, i: usize, c: usize, now: u64, net: &mut impl Net) -> bool {
        let mut busy = false;
        let e = &mut self.eps[i];
        let tail = e.maps.regs.load32(off::ch_tail(c), Acquire);
        while e.ch[c].next != tail && e.ch[c].ops.len() < RDMA_DEPTH as usize {
            busy = true;
            let index = e.ch[c].next;
            let k = (index % RDMA_DEPTH) as usize;
            let q = |w| e.maps.rdma.load64(off::rdma_desc(c, k, w), Relaxed);
            let (q0, q1, q2, q3) = (q(0), q(1), q(2), q(3));
            e.ch[c].next = index.wrapping_add(1);
            e.maps.regs.store32(off::ch_head(c), e.ch[c].next, Release);
            let opcode = q0 as u8;
            let flags = (q0 >> 8) as u8;
            let len = (q0 >> 32) as u32;
            let mut op = Op {
                index,
                opcode,
                flags,
                len,
                local: q1 & crate::regs::NVA_MASK,
                remote: q2 & crate::regs::NVA_MASK,
                coord: (q3 as u32) & crate::regs::COORD_MASK,
                ep: ((q3 >> 22) & 0x3FF) as u16,
                cookie: (q3 >> 32) as u32,
                issued: 0,
                answered: 0,
                packets: len.div_ceil(frame::MAX_PAYLOAD as u32),
                bytes_done: 0,
                status: rdma_status::OK,
                stage: Stage::Data,
                deadline: now.saturating_add(self.cfg.ack_timeout_ns),
            };
            let bad = flags & !rdmad::FLAGS_ALL != 0
                || (q0 >> 16) as u16 != 0
                || !matches!(opcode, rdmad::OP_WRITE | rdmad::OP_READ | rdmad::OP_NOP)
                || (opcode != rdmad::OP_NOP && len == 0)
                || (opcode != rdmad::OP_WRITE && flags & rdmad::NOTIFY_REMOTE != 0);
            if bad {
                op.status = rdma_status::BAD_DESCRIPTOR;
                op.stage = Stage::Done;
            } else if opcode == rdmad::OP_NOP {
                op.stage = Stage::Done;
            } else if Self::translate(&e.regions, op.local, len as usize).is_none() {
                op.status = rdma_status::LOCAL_XLAT_FAULT;
                op.stage = Stage::Done;
            } else if !e.enabled {
                op.status = rdma_status::REMOTE_EP_DISABLED;
                op.stage = Stage::Done;
            }
            e.ch[c].ops.push_back(op);
        }
        busy |= self.issue(i, c, now, net);
        busy | self.complete(i, c)
    }

    /// Sends packets of the channel's operations within the window, handles timeouts and
    /// remote notifications.
    fn issue(&mut self, i: usize, c: usize, now: u64, net: &mut impl Net) -> bool {
        let NiDevice {
            eps,
            buf,
            faults,
            coord,
            cfg,
        } = self;
        let (coord, timeout) = (*coord, cfg.ack_timeout_ns);
        let Ep {
            ch,
            regions,
            pdid,
            id,
            ..
        } = &mut eps[i];
        let (pdid, src_ep) = (*pdid, *id);
        let ops = &mut ch[c].ops;
        let mut in_flight: u32 = ops.iter().map(|o| o.issued - o.answered).sum();
        let mut busy = false;
        for (n, op) in ops.iter_mut().enumerate() {
            if op.stage == Stage::Done {
                continue;
            }
            if op.flags & rdmad::FENCE != 0 && n > 0 {
                break;
            }
            let outstanding = op.issued != op.answered
                || matches!(
                    op.stage,
                    Stage::Notify {
                        in_flight: true,
                        ..
                    }
                );
            if outstanding && now > op.deadline {
                op.status = rdma_status::UNREACHABLE;
                op.stage = Stage::Done;
                busy = true;
                continue;
            }
            if op.stage == Stage::Data && op.status != rdma_status::OK {
                if op.issued == op.answered {
                    op.stage = Stage::Done;
                    busy = true;
                }
                continue;
            }
            if op.stage == Stage::Data && op.answered == op.packets {
                busy = true;
                if op.flags & rdmad::NOTIFY_REMOTE == 0 {
                    op.stage = Stage::Done;
                    continue;
                }
                op.stage = Stage::Notify {
                    in_flight: false,
                    retry_at: now,
                    delay: NOTIFY_RETRY_MIN_NS,
                };
            }
            if let Stage::Notify {
                in_flight: false,
                retry_at,
                delay,
            } = op.stage
            {
                if now >= retry_at {
                    busy = true;
                    op.stage = Stage::Notify {
                        in_flight: true,
                        retry_at,
                        delay,
                    };
                    op.deadline = now.saturating_add(timeout);
                    let from = Origin {
                        pdid,
                        coord,
                        ep: src_ep,
                    };
                    send_notify(op, c, from, faults, &mut buf[..], net);
                }
                continue;
            }
            while op.stage == Stage::Data && op.issued < op.packets && in_flight < CHANNEL_WINDOW {
                busy = true;
                let seq = op.issued;
                let offset = u64::from(seq) * frame::MAX_PAYLOAD as u64;
                let chunk = (u64::from(op.len) - offset).min(frame::MAX_PAYLOAD as u64) as usize;
                let mut data = [0u8; frame::MAX_PAYLOAD];
                let (ty, sub, plen) = if op.opcode == rdmad::OP_WRITE {
                    let Some(src) = Self::translate(regions, op.local + offset, chunk) else {
                        op.status = rdma_status::LOCAL_XLAT_FAULT;
                        break;
                    };
                    // SAFETY: `translate` proved `chunk` bytes at `src` lie inside a region
                    // mapped by this device; `data` is a private buffer of at least `chunk`.
                    unsafe { load_once(src, data.as_mut_ptr(), chunk) };
                    (ptype::WRITE, write_sub::RDMA, chunk)
                } else {
                    data[..8].copy_from_slice(&(op.local + offset).to_le_bytes());
                    data[8..12].copy_from_slice(&(chunk as u32).to_le_bytes());
                    (ptype::READ_REQ, 0, 16)
                };
                let f = FrameRepr {
                    pdid,
                    dst_coord: op.coord,
                    ptype: ty,
                    resp: 0,
                    dst_va: (op.remote + offset) & crate::regs::NVA_MASK,
                    dst_ep: op.ep,
                    sub,
                    no_ack: false,
                    src_coord: coord,
                    src_ep,
                    tid: (c as u32) << 30 | (op.index & 0x3FFF_FFFF),
                    seq,
                    first: seq == 0,
                    last: seq + 1 == op.packets,
                    notif: false,
                    payload: &data[..plen],
                };
                op.issued += 1;
                op.deadline = now.saturating_add(timeout);
                in_flight += 1;
                send_frame(faults, &mut buf[..], net, &f);
            }
        }
        busy
    }

    /// Writes completion records in order for finished operations.
    fn complete(&mut self, i: usize, c: usize) -> bool {
        let mut any = false;
        let coord = self.coord;
        loop {
            let e = &mut self.eps[i];
            let Some(op) = e.ch[c].ops.front() else { break };
            if !op.finished() {
                break;
            }
            if op.flags & rdmad::NOTIFY_LOCAL != 0 {
                let msg = notification(
                    class::RDMA_LOCAL_CMPL,
                    op.status,
                    op.cookie,
                    u64::from(op.len),
                    op.local,
                    op.coord,
                    u32::from(op.ep),
                    c as u32,
                );
                let (pdid, id) = (e.pdid, e.id);
                if Self::deliver(
                    e,
                    meta::pack(coord, u32::from(id), pdid, 64, class::RDMA_LOCAL_CMPL),
                    &msg,
                )
                .is_err()
                {
                    break;
                }
            }
            let op = e.ch[c].ops.pop_front().expect("front exists");
            let k = (op.index % RDMA_DEPTH) as usize;
            let bytes = if op.status == rdma_status::OK {
                op.len
            } else {
                op.bytes_done
            };
            let rdma = e.maps.rdma;
            rdma.store32(off::rdma_record(c, k, 0), op.status, Relaxed);
            rdma.store32(off::rdma_record(c, k, 1), bytes, Relaxed);
            rdma.store32(off::rdma_record(c, k, 2), op.cookie, Relaxed);
            rdma.store32(off::rdma_record(c, k, 3), op.index, Release);
            if op.flags & rdmad::IRQ != 0 {
                e.maps.regs.add32(off::ch_irq_cnt(c), 1, Release);
            }
            e.maps
                .regs
                .store32(off::ch_done(c), op.index.wrapping_add(1), Release);
            any = true;
        }
        any
    }

    /// Writes one message into the mailbox of `e`; `Err(RING_FULL)` when full.
    fn deliver(e: &mut Ep, meta_word: u64, payload: &[u8]) -> Result<(), u8> {
        let cons = e.maps.regs.load32(off::RX_CONS, Acquire);
        if e.rx_prod.wrapping_sub(cons) >= RX_DEPTH {
            return Err(resp::RING_FULL);
        }
        let slot = (e.rx_prod % RX_DEPTH) as usize;
        e.maps.mbox.write_bytes(off::mbox_slot(slot), payload);
        e.maps
            .mbox
            .store64(off::mbox_meta(slot), meta_word, Relaxed);
        e.rx_prod = e.rx_prod.wrapping_add(1);
        e.maps.regs.store32(off::RX_PROD, e.rx_prod, Release);
        Ok(())
    }

    /// Recomputes `IRQ_PENDING` and the output level of endpoint `i`; returns whether the
    /// level rose.
    fn update_irq(&mut self, i: usize) -> bool {
        let e = &mut self.eps[i];
        let r = e.maps.regs;
        let cons = r.load32(off::RX_CONS, Acquire);
        let thresh = r.load32(off::RX_IRQ_THRESH, Relaxed).max(1);
        let mut pending = 0;
        if e.rx_prod.wrapping_sub(cons) >= thresh {
            pending |= irq::MBOX;
        }
        if r.load32(off::TX_NACKS, Relaxed) != r.load32(off::TX_NACK_SEEN, Acquire) {
            pending |= irq::TX_NACK;
        }
        if (0..RDMA_CHANNELS).any(|c| {
            r.load32(off::ch_irq_cnt(c), Relaxed) != r.load32(off::ch_irq_seen(c), Acquire)
        }) {
            pending |= irq::RDMA;
        }
        if r.load32(off::EP_STATUS, Relaxed) & ep_status::FATAL != 0 {
            pending |= irq::FATAL;
        }
        if r.load32(off::IRQ_PENDING, Relaxed) != pending {
            r.store32(off::IRQ_PENDING, pending, Release);
        }
        let level = r.load32(off::IRQ_ENABLE, Acquire) & pending != 0;
        let rose = level && !e.level;
        if rose {
            r.add32(off::IRQ_COUNT, 1, Release);
        }
        e.level = level;
        rose
    }

    /// Handles one frame from the network; returns whether it was for this node.
    pub fn on_frame(&mut self, bytes: &[u8], now: u64, net: &mut impl Net) -> bool {
        let Ok(f) = FrameRepr::parse(bytes) else {
            log::warn!(
                "node {:#x}: dropped a malformed frame of {} bytes",
                self.coord,
                bytes.len()
            );
            return false;
        };
        if f.dst_coord != self.coord
            || self.faults.is_unreachable(f.src_coord)
            || self.faults.is_unreachable(self.coord)
        {
            return false;
        }
        let ep = usize::from(f.dst_ep);
        match (f.ptype, f.sub) {
            (ptype::WRITE, write_sub::MAILBOX) | (ptype::NOTIFY, _) => {
                let code = self.mailbox_in(&f);
                if !f.no_ack {
                    let sub = if f.ptype == ptype::NOTIFY {
                        ack_sub::NOTIFY
                    } else {
                        ack_sub::MAILBOX
                    };
                    self.answer(net, &f, code, sub, 0, &[]);
                }
            }
            (ptype::WRITE, _) => {
                let code = self.remote_access(&f, f.payload.len()).map_or_else(
                    |code| code,
                    |dst| {
                        // SAFETY: `remote_access` translated exactly `payload.len()` bytes
                        // at `dst` inside a region mapped by this device; the payload is a
                        // private buffer.
                        unsafe { store_once(f.payload.as_ptr(), dst, f.payload.len()) };
                        resp::OK
                    },
                );
                self.answer(net, &f, code, ack_sub::RDMA_WRITE, 0, &[]);
            }
            (ptype::READ_REQ, _) => {
                let (local, len) = if f.payload.len() >= 12 {
                    let l = f.payload;
                    (
                        u64::from_le_bytes(l[..8].try_into().expect("8 bytes")),
                        u32::from_le_bytes(l[8..12].try_into().expect("4 bytes")) as usize,
                    )
                } else {
                    (0, usize::MAX)
                };
                let mut data = [0u8; frame::MAX_PAYLOAD];
                let code = if len == 0 || len > frame::MAX_PAYLOAD {
                    resp::BAD_REQUEST
                } else {
                    self.remote_access(&f, len).map_or_else(
                        |code| code,
                        |src| {
                            // SAFETY: `remote_access` translated `len` bytes at `src`; `data`
                            // is a private buffer of at least `len`.
                            unsafe { load_once(src, data.as_mut_ptr(), len) };
                            resp::OK
                        },
                    )
                };
                let payload = if code == resp::OK {
                    &data[..len]
                } else {
                    &[][..]
                };
                self.answer(net, &f, code, ack_sub::READ_RESP, local, payload);
            }
            (ptype::ACK, _) if ep < self.eps.len() => self.ack_in(ep, &f, now),
            _ => {
                log::debug!(
                    "node {:#x}: ignored frame type {} sub {}",
                    self.coord,
                    f.ptype,
                    f.sub
                );
                return false;
            }
        }
        if ep < self.eps.len() {
            self.update_irq(ep);
        }
        true
    }

    fn mailbox_in(&mut self, f: &FrameRepr<'_>) -> u8 {
        let coord = self.coord;
        let Some(e) = self.eps.get_mut(usize::from(f.dst_ep)) else {
            return resp::NO_SUCH_EP;
        };
        if !e.enabled {
            return resp::NO_SUCH_EP;
        }
        let refuse = |e: &mut Ep, code| {
            e.maps.regs.add32(off::RX_NACKS, 1, Release);
            code
        };
        if f.pdid != e.pdid {
            return refuse(e, resp::PDID_MISMATCH);
        }
        if f.payload.is_empty() || f.payload.len() > 64 {
            return resp::BAD_REQUEST;
        }
        if let Some(reason) = self.faults.take_nack(coord, e.id) {
            let code = match reason {
                nack::PDID_MISMATCH => resp::PDID_MISMATCH,
                nack::NO_SUCH_EP => resp::NO_SUCH_EP,
                nack::UNREACHABLE => resp::UNREACHABLE,
                _ => resp::RING_FULL,
            };
            return refuse(e, code);
        }
        let class = if f.ptype == ptype::NOTIFY {
            class::RDMA_REMOTE_NOTIFY
        } else {
            class::USER
        };
        let m = meta::pack(
            f.src_coord,
            u32::from(f.src_ep),
            f.pdid,
            f.payload.len() as u32,
            class,
        );
        match Self::deliver(e, m, f.payload) {
            Ok(()) => resp::OK,
            Err(code) => refuse(e, code),
        }
    }

    /// Checks and translates a remote RDMA access of `len` bytes at `f.dst_va`.
    fn remote_access(&mut self, f: &FrameRepr<'_>, len: usize) -> Result<*mut u8, u8> {
        let coord = self.coord;
        let e = self
            .eps
            .get(usize::from(f.dst_ep))
            .ok_or(resp::EP_DISABLED)?;
        if !e.enabled {
            return Err(resp::EP_DISABLED);
        }
        if f.pdid != e.pdid {
            return Err(resp::PDID_MISMATCH);
        }
        if self.faults.take_xlat_fault(coord, e.id) {
            return Err(resp::XLAT_FAULT);
        }
        Self::translate(&e.regions, f.dst_va, len).ok_or(resp::XLAT_FAULT)
    }

    fn answer(
        &mut self,
        net: &mut impl Net,
        f: &FrameRepr<'_>,
        code: u8,
        sub: u8,
        dst_va: u64,
        payload: &[u8],
    ) {
        let pdid = self
            .eps
            .get(usize::from(f.dst_ep))
            .map_or(f.pdid, |e| e.pdid);
        let a = FrameRepr {
            pdid,
            dst_coord: f.src_coord,
            ptype: ptype::ACK,
            resp: code,
            dst_va: if sub == ack_sub::READ_RESP {
                dst_va
            } else {
                u64::from(f.src_ep)
            },
            dst_ep: f.src_ep,
            sub,
            no_ack: false,
            src_coord: self.coord,
            src_ep: f.dst_ep,
            tid: f.tid,
            seq: f.seq,
            first: f.first,
            last: f.last,
            notif: false,
            payload,
        };
        self.emit(net, &a);
    }

    fn ack_in(&mut self, ep: usize, f: &FrameRepr<'_>, now: u64) {
        let timeout = self.cfg.ack_timeout_ns;
        let e = &mut self.eps[ep];
        if f.sub == ack_sub::MAILBOX {
            if let Some(p) =
                e.tx.iter_mut()
                    .find(|p| p.index == f.tid && p.result.is_none())
            {
                p.result = Some(if f.resp == resp::OK {
                    (tx_status::ACKED, 0)
                } else {
                    (tx_status::NACKED, resp_to_nack(f.resp))
                });
            }
            Self::retire_tx(e);
            return;
        }
        let c = (f.tid >> 30) as usize;
        let idx = f.tid & 0x3FFF_FFFF;
        let mut data_dst = None;
        {
            let Some(op) = e.ch[c]
                .ops
                .iter_mut()
                .find(|o| o.index & 0x3FFF_FFFF == idx && o.stage != Stage::Done)
            else {
                return;
            };
            op.deadline = now.saturating_add(timeout);
            match f.sub {
                ack_sub::NOTIFY => {
                    if let Stage::Notify { delay, .. } = op.stage {
                        if f.resp == resp::OK {
                            op.stage = Stage::Done;
                        } else if f.resp == resp::RING_FULL {
                            let next = (delay * 2).min(NOTIFY_RETRY_MAX_NS);
                            op.stage = Stage::Notify {
                                in_flight: false,
                                retry_at: now.saturating_add(delay),
                                delay: next,
                            };
                        } else {
                            op.status = resp_to_rdma(f.resp);
                            op.stage = Stage::Done;
                        }
                    }
                    return;
                }
                ack_sub::RDMA_WRITE | ack_sub::READ_RESP => {
                    if op.stage != Stage::Data || f.seq >= op.issued {
                        return;
                    }
                    op.answered += 1;
                    if f.resp != resp::OK {
                        if op.status == rdma_status::OK {
                            op.status = resp_to_rdma(f.resp);
                        }
                    } else if op.status == rdma_status::OK {
                        let chunk = (op.len as u64 - u64::from(f.seq) * frame::MAX_PAYLOAD as u64)
                            .min(frame::MAX_PAYLOAD as u64)
                            as u32;
                        if f.sub == ack_sub::READ_RESP {
                            data_dst = Some((f.dst_va, chunk));
                        }
                        op.bytes_done += chunk;
                    }
                }
                _ => return,
            }
        }
        if let Some((nva, chunk)) = data_dst {
            let ok = f.payload.len() == chunk as usize;
            let dst = Self::translate(&e.regions, nva, chunk as usize);
            match (ok, dst) {
                (true, Some(dst)) => {
                    // SAFETY: `translate` proved `chunk` bytes at `dst` inside a region of
                    // this endpoint; the payload has exactly `chunk` bytes.
                    unsafe { store_once(f.payload.as_ptr(), dst, chunk as usize) };
                }
                _ => {
                    if let Some(op) = e.ch[c]
                        .ops
                        .iter_mut()
                        .find(|o| o.index & 0x3FFF_FFFF == idx)
                    {
                        op.status = if ok {
                            rdma_status::LOCAL_XLAT_FAULT
                        } else {
                            rdma_status::BAD_DESCRIPTOR
                        };
                    }
                }
            }
        }
        if let Some(op) = e.ch[c]
            .ops
            .iter_mut()
            .find(|o| o.index & 0x3FFF_FFFF == idx)
        {
            if op.status != rdma_status::OK && op.issued == op.answered {
                op.stage = Stage::Done;
            }
        }
    }
}
