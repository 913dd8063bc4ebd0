//! The harness of the verbs tests: endpoints over the `sideway` binding and their exchange
//! between the roles of a multi-process run ([`verbs_emu::roles`]); the roles are the test
//! binary started again ([`gsas_tests::launch::self_test`], through qemu when the tests run
//! under it).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicPostSendGuard, BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute,
    QueuePairState, SetInlineData, SetScatterGatherEntry, WorkRequestFlags, WorkRequestHandle,
};
pub use verbs_emu::roles::{Role, WAIT, barrier, counters, fetch, process_gone, publish, role};

/// Runs `test`'s roles (see [`verbs_emu::roles::run_roles`]).
pub fn run_roles(test: &str, roles: Vec<Role>, timeout: Duration) {
    verbs_emu::roles::run_roles(
        || gsas_tests::launch::self_test(test).expect("the test binary"),
        roles,
        timeout,
    );
}

/// What a peer needs to reach a queue pair and a memory region.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    pub qpn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    pub psn: u32,
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
}

impl Info {
    pub fn encode(&self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{} {} {gid} {} {} {} {}",
            self.qpn, self.lid, self.psn, self.rkey, self.addr, self.len
        )
    }

    pub fn decode(s: &str) -> Info {
        let w: Vec<&str> = s.split_whitespace().collect();
        assert_eq!(w.len(), 7, "endpoint record '{s}'");
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = u8::from_str_radix(&w[2][2 * i..2 * i + 2], 16).unwrap();
        }
        Info {
            qpn: w[0].parse().unwrap(),
            lid: w[1].parse().unwrap(),
            gid,
            psn: w[3].parse().unwrap(),
            rkey: w[4].parse().unwrap(),
            addr: w[5].parse().unwrap(),
            len: w[6].parse().unwrap(),
        }
    }
}

/// The device named `name`, or (None) the software device, which the roles of a run load.
pub fn open_device(name: Option<&str>) -> Arc<DeviceContext> {
    let list = DeviceList::new().expect("listing verbs devices");
    let n = name.unwrap_or("softverbs0");
    let dev = list
        .iter()
        .find(|d| d.name() == n)
        .unwrap_or_else(|| panic!("verbs device {n} not found"));
    dev.open().expect("opening the verbs device")
}

/// Memory for RDMA, 8-byte aligned (atomics), zeroed.
pub struct Buf(Vec<u64>);

impl Buf {
    pub fn new(bytes: usize) -> Buf {
        Buf(vec![0; bytes.div_ceil(8)])
    }
    pub fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
    pub fn len(&self) -> usize {
        self.0.len() * 8
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a u64 slice viewed as bytes: same memory, alignment 1 suffices.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.len()) }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `bytes`, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.len()) }
    }
    /// The word at byte offset `off` as an atomic (the device updates it concurrently).
    pub fn atomic(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(off % 8 == 0 && off + 8 <= self.len());
        // SAFETY: aligned, in bounds, and every concurrent access (the device thread's
        // atomics, this process's) is atomic.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.0.as_ptr().add(off / 8).cast_mut()) }
    }
}

/// A queue pair with its completion queue, on a port and source GID index.
pub struct Ep {
    pub qp: BasicQueuePair,
    pub cq: Arc<BasicCompletionQueue>,
    pub psn: u32,
    pub port: u8,
    pub gid_index: u8,
}

/// The variable naming the GID index a role uses (default 0).
pub const GID_INDEX: &str = "VERBS_TEST_GID_INDEX";

/// The device's first active port, as the transport's default will be.
pub fn first_active_port(ctx: &DeviceContext) -> u8 {
    let ports = ctx.query_device().expect("query_device").phys_port_cnt();
    (1..=ports)
        .find(|&p| ctx.query_port(p).expect("query_port").port_state() == PortState::Active)
        .unwrap_or_else(|| panic!("none of the {ports} ports is active"))
}

/// The full access a target grants.
pub fn all_access() -> AccessFlags {
    AccessFlags::LocalWrite
        | AccessFlags::RemoteWrite
        | AccessFlags::RemoteRead
        | AccessFlags::RemoteAtomic
}

pub fn new_ep(ctx: &Arc<DeviceContext>, pd: &Arc<ProtectionDomain>) -> Ep {
    let cq = ctx
        .create_cq_builder()
        .setup_cqe(1024)
        .build()
        .expect("creating a CQ");
    let qp = pd
        .create_qp_builder()
        .setup_max_send_wr(256)
        .setup_max_recv_wr(64)
        .setup_max_send_sge(4)
        .setup_max_recv_sge(4)
        .setup_max_inline_data(64)
        .setup_send_cq(Arc::clone(&cq))
        .setup_recv_cq(Arc::clone(&cq))
        .build()
        .expect("creating a QP");
    let psn = (std::process::id().wrapping_mul(2_654_435_761) ^ qp.qp_number()) & 0xff_ffff;
    let gid_index = std::env::var(GID_INDEX).map_or(0, |v| v.parse().expect(GID_INDEX));
    Ep {
        qp,
        cq,
        psn,
        port: first_active_port(ctx),
        gid_index,
    }
}

pub fn register(pd: &Arc<ProtectionDomain>, buf: &Buf, access: AccessFlags) -> Arc<MemoryRegion> {
    // SAFETY: the buffers outlive their registrations in every test (they are declared first
    // and dropped last).
    unsafe { pd.reg_mr(buf.addr() as usize, buf.len(), access) }.expect("registering memory")
}

/// This endpoint's record for its peer.
pub fn info(ctx: &DeviceContext, ep: &Ep, mr: Option<&MemoryRegion>, buf: Option<&Buf>) -> Info {
    let port = ctx.query_port(ep.port).expect("query_port");
    let gid: Ipv6 = ctx
        .query_gid(ep.port, ep.gid_index.into())
        .expect("query_gid")
        .into();
    Info {
        qpn: ep.qp.qp_number(),
        lid: port.lid(),
        gid: gid.octets(),
        psn: ep.psn,
        rkey: mr.map_or(0, |m| m.rkey()),
        addr: buf.map_or(0, Buf::addr),
        len: buf.map_or(0, |b| b.len() as u64),
    }
}

type Ipv6 = std::net::Ipv6Addr;

/// Transport parameters of a connection.
#[derive(Clone, Copy)]
pub struct Params {
    pub access: AccessFlags,
    pub grh: bool,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
}

pub const DEFAULT: Params = Params {
    access: AccessFlags::LocalWrite
        .or(AccessFlags::RemoteWrite)
        .or(AccessFlags::RemoteRead)
        .or(AccessFlags::RemoteAtomic),
    grh: true,
    // 1.07 s per attempt, 8 attempts: a machine loaded by a parallel test run does not fail
    // the connection (the tests of timeouts set their own).
    timeout: 18,
    retry_cnt: 7,
    rnr_retry: 7,
};

/// RESET -> INIT -> RTR -> RTS towards `peer`, as a real connect does.
pub fn connect(ep: &mut Ep, peer: &Info, p: Params) {
    let mut a = QueuePairAttribute::new();
    a.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(ep.port)
        .setup_access_flags(p.access);
    ep.qp.modify(&a).expect("RESET -> INIT");
    let mut av = AddressHandleAttribute::new();
    av.setup_dest_lid(peer.lid)
        .setup_port(ep.port)
        .setup_service_level(0);
    if p.grh {
        av.setup_grh_src_gid_index(ep.gid_index)
            .setup_grh_dest_gid(&Gid::from(Ipv6::from(peer.gid)))
            .setup_grh_hop_limit(1);
    }
    let mut a = QueuePairAttribute::new();
    a.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(Mtu::Mtu4096)
        .setup_dest_qp_num(peer.qpn)
        .setup_rq_psn(peer.psn)
        .setup_max_dest_read_atomic(16)
        .setup_min_rnr_timer(12)
        .setup_address_vector(&av);
    ep.qp.modify(&a).expect("INIT -> RTR");
    let mut a = QueuePairAttribute::new();
    a.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(ep.psn)
        .setup_timeout(p.timeout)
        .setup_retry_cnt(p.retry_cnt)
        .setup_rnr_retry(p.rnr_retry)
        .setup_max_read_atomic(16);
    ep.qp.modify(&a).expect("RTR -> RTS");
}

/// A completion, copied out of the binding's poller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub imm: u32,
}

/// The completions there are now (none when the queue is empty).
pub fn poll_cq(cq: &BasicCompletionQueue) -> Vec<Wc> {
    match cq.start_poll() {
        Ok(poller) => poller
            .map(|wc| Wc {
                wr_id: wc.wr_id(),
                status: wc.status(),
                opcode: wc.opcode(),
                byte_len: wc.byte_len(),
                imm: wc.imm_data(),
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Waits for `n` completions (at most [`WAIT`]).
pub fn wait_cq(cq: &BasicCompletionQueue, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.len() < n {
        let now = poll_cq(cq);
        if !now.is_empty() {
            got.extend(now);
        } else {
            assert!(
                t0.elapsed() < WAIT,
                "{} of {n} completions after {WAIT:?}: {got:?}",
                got.len()
            );
            std::thread::yield_now();
        }
    }
    got
}

/// Posts one work request built by `f` with `flags`.
pub fn post(
    ep: &mut Ep,
    wr_id: u64,
    flags: WorkRequestFlags,
    f: impl FnOnce(WorkRequestHandle<'_, BasicPostSendGuard<'_>>),
) {
    let mut g = ep.qp.start_post_send();
    f(g.construct_wr(wr_id, flags));
    g.post().expect("post_send");
}

pub fn write(ep: &mut Ep, id: u64, mr: &MemoryRegion, local: u64, len: u32, peer: &Info, off: u64) {
    post(ep, id, WorkRequestFlags::Signaled, |w| unsafe {
        // SAFETY: the local buffer is registered and outlives the request (tests wait for it).
        w.setup_write(peer.rkey, peer.addr + off)
            .setup_sge(mr.lkey(), local, len)
    });
}

pub fn read(ep: &mut Ep, id: u64, mr: &MemoryRegion, local: u64, len: u32, peer: &Info, off: u64) {
    post(ep, id, WorkRequestFlags::Signaled, |w| unsafe {
        // SAFETY: as in `write`.
        w.setup_read(peer.rkey, peer.addr + off)
            .setup_sge(mr.lkey(), local, len)
    });
}

pub fn write_inline(ep: &mut Ep, id: u64, data: &[u8], peer: &Info, off: u64) {
    post(
        ep,
        id,
        WorkRequestFlags::Signaled | WorkRequestFlags::Inline,
        |w| {
            w.setup_write(peer.rkey, peer.addr + off)
                .setup_inline_data(data)
        },
    );
}

pub fn fetch_add(
    ep: &mut Ep,
    id: u64,
    mr: &MemoryRegion,
    local: u64,
    peer: &Info,
    off: u64,
    add: u64,
) {
    post(ep, id, WorkRequestFlags::Signaled, |w| unsafe {
        // SAFETY: as in `write`.
        w.setup_atomic_fetch_add(peer.rkey, peer.addr + off, add)
            .setup_sge(mr.lkey(), local, 8)
    });
}

#[allow(clippy::too_many_arguments)]
pub fn compare_swap(
    ep: &mut Ep,
    id: u64,
    mr: &MemoryRegion,
    local: u64,
    peer: &Info,
    off: u64,
    compare: u64,
    swap: u64,
) {
    post(ep, id, WorkRequestFlags::Signaled, |w| unsafe {
        // SAFETY: as in `write`.
        w.setup_atomic_compare_swap(peer.rkey, peer.addr + off, compare, swap)
            .setup_sge(mr.lkey(), local, 8)
    });
}

pub fn post_recv(ep: &mut Ep, id: u64, mr: &MemoryRegion, local: u64, len: u32) {
    let mut g = ep.qp.start_post_recv();
    // SAFETY: the receive buffer is registered and outlives the request.
    unsafe { g.construct_wr(id).setup_sge(mr.lkey(), local, len) };
    g.post().expect("post_recv");
}

/// A deterministic byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
