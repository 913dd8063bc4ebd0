//! Reliable-connected endpoints: connection, one-sided requests, completions.
//!
//! Requests are numbered in posting order (the work request id is the number). Only every
//! `depth / 2`-th request, and those whose result the caller waits for, are signalled; a
//! completion of request n means every request before n is complete too, since an RC queue
//! pair completes in order. So `done` (all requests below it are complete) advances with
//! each signalled completion, and the send queue is full when `posted - done == depth`.
//!
//! Waits end with the device's verdict, never with a clock of the driver's own: a reliable
//! connection completes every request, successfully or with an error such as retry-exceeded
//! once the peer stops answering for `(1 + retry_cnt)` timeouts ([`Timing`]), so the queue
//! pair's retransmission timer is the one place that decides that a peer is gone (one
//! reliability layer, not two). A wait polls in a tight loop for [`SPIN`], then sleeps
//! between polls, so that a long wait leaves the CPU to what it waits for (on the software
//! device, the peer's emulated NIC is a thread of another process on the same machine).

use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionQueue};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairAttributeMask, QueuePairState,
};

use crate::{Error, Nic, Region, RemoteKey};

/// The inline size asked for at queue pair creation (the device may grant more).
const WANT_INLINE: u32 = 256;
/// How long a wait polls the completion queue in a tight loop (yielding between polls)
/// before it starts to sleep between polls: an HCA completes a request in microseconds, so
/// only waits for a slow or busy peer get that far.
const SPIN: Duration = Duration::from_micros(100);
/// The first sleep between polls after [`SPIN`]; each next one is twice as long, up to
/// [`MAX_NAP`].
const FIRST_NAP: Duration = Duration::from_micros(20);
/// The longest sleep between two polls of a wait: a completion waits at most this long to
/// be noticed.
const MAX_NAP: Duration = Duration::from_millis(1);

/// The kind of a request, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// An RDMA WRITE.
    Put,
    /// An RDMA READ.
    Get,
    /// A 64-bit fetch-add on the NIC.
    FetchAdd,
    /// A 64-bit compare-swap on the NIC.
    CompareSwap,
    /// The zero-byte WRITE that quiet waits for.
    Quiet,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Put => "put (RDMA WRITE)",
            Op::Get => "get (RDMA READ)",
            Op::FetchAdd => "fetch-add",
            Op::CompareSwap => "compare-swap",
            Op::Quiet => "quiet (RDMA WRITE of 0 bytes)",
        })
    }
}

/// Retransmission parameters of a connection (`ibv_modify_qp` to RTS): the time to an
/// error when the peer is gone is about `4.096 us * 2^timeout * (1 + retry_cnt)`, and it
/// bounds every wait of the driver.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The local ACK timeout exponent (`4.096 us * 2^timeout` per attempt).
    pub timeout: u8,
    /// Retransmissions before retry-exceeded.
    pub retry_cnt: u8,
    /// Retries after receiver-not-ready before an RNR error (7: without limit on hardware).
    pub rnr_retry: u8,
}

impl Default for Timing {
    /// 67 ms per attempt, 7 retries: about half a second to retry-exceeded.
    fn default() -> Timing {
        Timing {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

/// What a peer needs to connect to an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address {
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The GID at the chosen index (RoCE, or InfiniBand across subnets).
    pub gid: [u8; 16],
    /// The queue pair number.
    pub qpn: u32,
    /// The first packet sequence number.
    pub psn: u32,
}

impl Address {
    /// The record a bootstrap publishes (`lid:gid:qpn:psn`, hexadecimal).
    pub fn encode(&self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!("{:x}:{gid}:{:x}:{:x}", self.lid, self.qpn, self.psn)
    }

    /// Parses [`Address::encode`]'s record.
    pub fn decode(s: &str) -> Result<Address, Error> {
        let bad = || Error::BadRecord(format!("address '{s}' (expected lid:gid:qpn:psn)"));
        let w: Vec<&str> = s.split(':').collect();
        if w.len() != 4 || w[1].len() != 32 {
            return Err(bad());
        }
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = u8::from_str_radix(&w[1][2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Address {
            lid: u16::from_str_radix(w[0], 16).map_err(|_| bad())?,
            gid,
            qpn: u32::from_str_radix(w[2], 16).map_err(|_| bad())?,
            psn: u32::from_str_radix(w[3], 16).map_err(|_| bad())? & 0xff_ffff,
        })
    }
}

/// A reliable-connected queue pair towards one peer, with its own completion queue.
pub struct Endpoint {
    qp: BasicQueuePair,
    cq: Arc<BasicCompletionQueue>,
    peer: String,
    me: Address,
    port: u8,
    gid_index: u8,
    depth: u32,
    max_inline: u32,
    /// Requests posted so far (the next request's number).
    posted: u64,
    /// Every request below this number is complete.
    done: u64,
    /// Number of the last signalled request plus one (0: none).
    signalled: u64,
    /// The operation of request n, at n % depth.
    ops: Vec<Op>,
    fence_next: bool,
    last_target: Option<RemoteKey>,
    failed: Option<(Op, String)>,
}

fn verbs_err(call: &'static str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Verbs(call, std::io::Error::other(e))
}

impl Endpoint {
    pub(crate) fn new(nic: &Nic, peer: &str, depth: u32) -> Result<Endpoint, Error> {
        let depth = depth.max(2);
        let cq = nic
            .ctx
            .create_cq_builder()
            .setup_cqe(depth)
            .build()
            .map_err(|e| verbs_err("ibv_create_cq", e))?;
        let qp = nic
            .pd
            .create_qp_builder()
            .setup_max_send_wr(depth)
            .setup_max_recv_wr(1)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(WANT_INLINE)
            .setup_send_cq(Arc::clone(&cq))
            .setup_recv_cq(Arc::clone(&cq))
            .build()
            .map_err(|e| verbs_err("ibv_create_qp", e))?;
        let (_, init) = qp
            .query(QueuePairAttributeMask::Capabilities)
            .map_err(|e| verbs_err("ibv_query_qp", e))?;
        let caps = nic.caps();
        // A PSN that differs between runs and queue pairs, as real connects choose.
        let psn = (std::process::id() ^ qp.qp_number().rotate_left(8)).wrapping_mul(2_654_435_761)
            & 0xff_ffff;
        Ok(Endpoint {
            me: Address {
                lid: caps.lid,
                gid: caps.gid,
                qpn: qp.qp_number(),
                psn,
            },
            qp,
            cq,
            peer: peer.to_owned(),
            port: caps.port,
            gid_index: caps.gid_index,
            depth,
            max_inline: init.max_inline_data(),
            posted: 0,
            done: 0,
            signalled: 0,
            ops: vec![Op::Put; depth as usize],
            fence_next: false,
            last_target: None,
            failed: None,
        })
    }

    /// This endpoint's address, for the peer's [`Endpoint::connect`].
    pub fn address(&self) -> Address {
        self.me
    }

    /// Bytes a put may carry inline (no registration, copied at post time).
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// Connects to `remote` (RESET -> INIT -> RTR -> RTS), granting the peer remote READ,
    /// WRITE and atomics on this side's registered memory. Uses the GID (a GRH) when the
    /// peer has no LID (RoCE) or is on another subnet prefix, the LID otherwise.
    pub fn connect(&mut self, remote: &Address, t: Timing) -> Result<(), Error> {
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(self.port)
            .setup_access_flags(
                AccessFlags::LocalWrite
                    | AccessFlags::RemoteWrite
                    | AccessFlags::RemoteRead
                    | AccessFlags::RemoteAtomic,
            );
        self.qp
            .modify(&a)
            .map_err(|e| verbs_err("modify_qp(INIT)", e))?;
        let mut av = AddressHandleAttribute::new();
        av.setup_dest_lid(remote.lid).setup_port(self.port);
        if remote.lid == 0 || remote.gid[..8] != self.me.gid[..8] {
            av.setup_grh_src_gid_index(self.gid_index)
                .setup_grh_dest_gid(&Gid::from(std::net::Ipv6Addr::from(remote.gid)))
                .setup_grh_hop_limit(64);
        }
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(Mtu::Mtu1024)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(16)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&av);
        self.qp
            .modify(&a)
            .map_err(|e| verbs_err("modify_qp(RTR)", e))?;
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.me.psn)
            .setup_timeout(t.timeout)
            .setup_retry_cnt(t.retry_cnt)
            .setup_rnr_retry(t.rnr_retry)
            .setup_max_read_atomic(16);
        self.qp
            .modify(&a)
            .map_err(|e| verbs_err("modify_qp(RTS)", e))
    }

    /// Orders the next request after every earlier READ and atomic (`IBV_SEND_FENCE`).
    pub fn fence(&mut self) {
        self.fence_next = true;
    }

    /// RDMA WRITE of `src` to `dst.addr + offset`: inline when it fits
    /// ([`Endpoint::max_inline`]), otherwise from `src_region`, which must contain `src`.
    /// Complete (and `src` reusable) after [`Endpoint::quiet`]; an inline `src` is reusable
    /// at once.
    pub fn put(
        &mut self,
        src: &[u8],
        src_region: Option<&Region>,
        dst: RemoteKey,
        offset: u64,
    ) -> Result<(), Error> {
        let inline = src.len() <= self.max_inline as usize;
        let lkey = match (inline, src_region) {
            (true, _) => 0,
            (false, Some(r)) if r.contains(src.as_ptr() as u64, src.len() as u64) => r.lkey(),
            _ => {
                return Err(Error::NotRegistered {
                    len: src.len(),
                    max_inline: self.max_inline,
                });
            }
        };
        let sge = rdma_mummy_sys::ibv_sge {
            addr: src.as_ptr() as u64,
            length: src.len() as u32,
            lkey,
        };
        let flags = if inline {
            rdma_mummy_sys::ibv_send_flags::IBV_SEND_INLINE.0
        } else {
            0
        };
        let write = rdma_mummy_sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        self.post_rdma(Op::Put, write, flags, sge, dst, offset, false)
            .map(drop)
    }

    /// RDMA READ of `len` bytes at `src.addr + offset` into `dst` at `dst_offset`; the data
    /// is there after [`Endpoint::quiet`].
    pub fn get(
        &mut self,
        dst: &Region,
        dst_offset: u64,
        len: u32,
        src: RemoteKey,
        offset: u64,
    ) -> Result<(), Error> {
        self.read(dst, dst_offset, len, src, offset, false)
            .map(drop)
    }

    /// [`Endpoint::get`] that waits until the data is there: the READ is signalled and its
    /// own completion ends the wait (no 0-byte WRITE after it, as [`Endpoint::quiet`] may
    /// need).
    pub fn get_wait(
        &mut self,
        dst: &Region,
        dst_offset: u64,
        len: u32,
        src: RemoteKey,
        offset: u64,
    ) -> Result<(), Error> {
        let n = self.read(dst, dst_offset, len, src, offset, true)?;
        self.wait_done(n + 1)
    }

    /// Posts the READ of [`Endpoint::get`]; returns its number.
    fn read(
        &mut self,
        dst: &Region,
        dst_offset: u64,
        len: u32,
        src: RemoteKey,
        offset: u64,
        signal: bool,
    ) -> Result<u64, Error> {
        let d = dst.remote_key();
        assert!(
            dst_offset + u64::from(len) <= d.len,
            "get beyond its region"
        );
        let sge = rdma_mummy_sys::ibv_sge {
            addr: d.addr + dst_offset,
            length: len,
            lkey: dst.lkey(),
        };
        let read = rdma_mummy_sys::ibv_wr_opcode::IBV_WR_RDMA_READ;
        self.post_rdma(Op::Get, read, 0, sge, src, offset, signal)
    }

    /// Posts an RDMA WRITE or READ of `sge` at `remote.addr + offset`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn post_rdma(
        &mut self,
        op: Op,
        opcode: rdma_mummy_sys::ibv_wr_opcode::Type,
        flags: u32,
        sge: rdma_mummy_sys::ibv_sge,
        remote: RemoteKey,
        offset: u64,
        signal: bool,
    ) -> Result<u64, Error> {
        let rdma = rdma_mummy_sys::rdma_t {
            remote_addr: remote.addr + offset,
            rkey: remote.rkey,
        };
        self.post(
            op,
            flags,
            signal,
            sge,
            |wr| {
                wr.opcode = opcode;
                wr.wr.rdma = rdma;
            },
            remote,
        )
    }

    /// NIC fetch-add on the 8-byte word at `dst.addr + offset`; waits for the old value,
    /// which lands in `scratch` at `scratch_offset`.
    pub fn fetch_add(
        &mut self,
        scratch: &Region,
        scratch_offset: u64,
        dst: RemoteKey,
        offset: u64,
        add: u64,
    ) -> Result<u64, Error> {
        self.atomic(Op::FetchAdd, scratch, scratch_offset, dst, offset, add, 0)
    }

    /// NIC compare-swap on the 8-byte word at `dst.addr + offset`; waits for the old value.
    #[allow(clippy::too_many_arguments)]
    pub fn compare_swap(
        &mut self,
        scratch: &Region,
        scratch_offset: u64,
        dst: RemoteKey,
        offset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, Error> {
        self.atomic(
            Op::CompareSwap,
            scratch,
            scratch_offset,
            dst,
            offset,
            compare,
            swap,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        op: Op,
        scratch: &Region,
        scratch_offset: u64,
        dst: RemoteKey,
        offset: u64,
        operand: u64,
        swap: u64,
    ) -> Result<u64, Error> {
        let s = scratch.remote_key();
        assert!(
            scratch_offset % 8 == 0 && scratch_offset + 8 <= s.len,
            "atomic result slot"
        );
        let sge = rdma_mummy_sys::ibv_sge {
            addr: s.addr + scratch_offset,
            length: 8,
            lkey: scratch.lkey(),
        };
        let n = self.post(
            op,
            0,
            true,
            sge,
            |wr| {
                wr.opcode = if op == Op::FetchAdd {
                    rdma_mummy_sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD
                } else {
                    rdma_mummy_sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP
                };
                wr.wr.atomic = rdma_mummy_sys::atomic_t {
                    remote_addr: dst.addr + offset,
                    compare_add: operand,
                    swap,
                    rkey: dst.rkey,
                };
            },
            dst,
        )?;
        self.wait_done(n + 1)?;
        // SAFETY: the slot is inside registered memory that the caller keeps valid
        // (Nic::register's contract) and 8-byte aligned; the NIC finished writing it.
        Ok(unsafe { std::ptr::read_volatile((s.addr + scratch_offset) as *const u64) })
    }

    /// Posts one request; returns its number. `WouldBlock` when the send queue is full even
    /// after polling once. Inlined: the caller's constant flags fold away (as a call it cost
    /// 34 more instructions per put, `examples/put_icount.rs`).
    #[inline(always)]
    fn post(
        &mut self,
        op: Op,
        flags: u32,
        signal: bool,
        mut sge: rdma_mummy_sys::ibv_sge,
        fill: impl FnOnce(&mut rdma_mummy_sys::ibv_send_wr),
        target: RemoteKey,
    ) -> Result<u64, Error> {
        if self.posted - self.done >= u64::from(self.depth) {
            self.progress()?;
            if self.posted - self.done >= u64::from(self.depth) {
                return Err(Error::WouldBlock);
            }
        }
        self.check_failed()?;
        let n = self.posted;
        let signal = signal || n + 1 - self.signalled >= u64::from(self.depth / 2);
        // SAFETY: an all-zero ibv_send_wr is valid (null pointers, zero numbers and unions
        // of plain integers).
        let mut wr: rdma_mummy_sys::ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
        wr.wr_id = n;
        if sge.length > 0 {
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
        } // 0 bytes: no scatter list, the request carries no data

        wr.send_flags = flags
            | if signal {
                rdma_mummy_sys::ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            }
            | if self.fence_next {
                rdma_mummy_sys::ibv_send_flags::IBV_SEND_FENCE.0
            } else {
                0
            };
        fill(&mut wr);
        let mut bad: *mut rdma_mummy_sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the queue pair is alive (owned by self); `wr` and `sge` live across the
        // call, and the provider copies them (inline data included) before returning.
        let rc = unsafe { rdma_mummy_sys::ibv_post_send(self.qp.qp().as_ptr(), &mut wr, &mut bad) };
        if rc == libc::ENOMEM {
            return Err(Error::WouldBlock);
        }
        if rc != 0 {
            return Err(Error::Verbs(
                "ibv_post_send",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        self.ops[(n % u64::from(self.depth)) as usize] = op;
        self.posted += 1;
        if signal {
            self.signalled = n + 1;
        }
        self.fence_next = false;
        self.last_target = Some(target);
        Ok(n)
    }

    fn check_failed(&self) -> Result<(), Error> {
        match &self.failed {
            Some((op, status)) => Err(Error::Completion {
                peer: self.peer.clone(),
                op: *op,
                status: status.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Polls the completion queue once; returns how many requests completed. A failed
    /// request is an error now and for every later call (the queue pair is in error).
    pub fn progress(&mut self) -> Result<u64, Error> {
        self.check_failed()?;
        // SAFETY: zeroed completions are valid plain data; the provider fills `n` of them.
        let mut wc: [rdma_mummy_sys::ibv_wc; 16] = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: the completion queue is alive (owned by self) and `wc` has 16 entries.
        let n = unsafe {
            rdma_mummy_sys::ibv_poll_cq(self.cq.cq().as_ptr(), wc.len() as i32, wc.as_mut_ptr())
        };
        if n < 0 {
            return Err(Error::Verbs(
                "ibv_poll_cq",
                std::io::Error::from_raw_os_error(-n),
            ));
        }
        let before = self.done;
        for w in &wc[..n as usize] {
            if w.status != rdma_mummy_sys::ibv_wc_status::IBV_WC_SUCCESS {
                let op = self.ops[(w.wr_id % u64::from(self.depth)) as usize];
                // SAFETY: ibv_wc_status_str returns a static C string (or NULL when the
                // library lacks it).
                let s = unsafe { rdma_mummy_sys::ibv_wc_status_str(w.status) };
                let status = if s.is_null() {
                    format!("status {}", w.status)
                } else {
                    // SAFETY: non-null, NUL-terminated, static.
                    unsafe { std::ffi::CStr::from_ptr(s) }
                        .to_string_lossy()
                        .into_owned()
                };
                self.failed = Some((op, status));
                return self.check_failed().map(|_| 0);
            }
            self.done = self.done.max(w.wr_id + 1);
        }
        Ok(self.done - before)
    }

    /// Waits until every request below `target` is complete, or one failed. `target` must
    /// be a signalled request's number plus one (or below `done`): only signalled requests
    /// complete visibly.
    fn wait_done(&mut self, target: u64) -> Result<(), Error> {
        debug_assert!(
            target <= self.signalled.max(self.done),
            "a wait nothing ends"
        );
        let mut pause = Pause::new();
        while self.done < target {
            if self.progress()? == 0 {
                pause.wait();
            } else {
                pause = Pause::new();
            }
        }
        Ok(())
    }

    /// Waits until the full send queue has room (its oldest signalled request completed;
    /// one in every `depth / 2` is signalled, so a full queue holds one), after
    /// [`Error::WouldBlock`]. When the queue is not full by this endpoint's count (the
    /// provider refused a post with `ENOMEM`), polls once so that completions free the
    /// provider's slots, and returns.
    pub fn wait_room(&mut self) -> Result<(), Error> {
        self.check_failed()?;
        if self.posted - self.done >= u64::from(self.depth) {
            self.wait_done(self.done + 1)
        } else {
            self.progress().map(drop)
        }
    }

    /// Waits until every request posted so far is complete (puts delivered, gets landed).
    /// When the last request was not signalled, a signalled 0-byte RDMA WRITE follows it
    /// (completions come in order).
    pub fn quiet(&mut self) -> Result<(), Error> {
        self.check_failed()?;
        if self.done == self.posted {
            return Ok(());
        }
        if self.signalled != self.posted {
            let target = self.last_target.expect("a request was posted");
            let sge = rdma_mummy_sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            };
            let write = rdma_mummy_sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
            loop {
                match self.post_rdma(Op::Quiet, write, 0, sge, target, 0, true) {
                    Err(Error::WouldBlock) => self.wait_room()?,
                    r => {
                        r?;
                        break;
                    }
                }
            }
        }
        self.wait_done(self.posted)
    }

    /// Requests posted and not yet known complete.
    pub fn outstanding(&self) -> u64 {
        self.posted - self.done
    }
}

/// The pace of a wait: polls back to back (yielding the CPU in between) for [`SPIN`], then
/// sleeps between polls, [`FIRST_NAP`] doubling up to [`MAX_NAP`].
struct Pause {
    since: Instant,
    nap: Duration,
}

impl Pause {
    fn new() -> Pause {
        Pause {
            since: Instant::now(),
            nap: FIRST_NAP,
        }
    }

    fn wait(&mut self) {
        if self.since.elapsed() < SPIN {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.nap);
            self.nap = (self.nap * 2).min(MAX_NAP);
        }
    }
}

impl Region {
    fn contains(&self, addr: u64, len: u64) -> bool {
        let k = self.remote_key();
        addr >= k.addr && addr - k.addr <= k.len && len <= k.len - (addr - k.addr)
    }
}
