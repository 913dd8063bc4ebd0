//! A QFDB-sized job on the emulator: four emulated nodes (the real `exanet-emu` process,
//! frames between the nodes over its socket links), each with a gsas-core
//! service engine on endpoint 0 and one PE on endpoint 1. Both speak through gsas-core's
//! reliability layer over an [`ExanetTransport`] with [`FailurePolicy::Lose`], the stack the
//! gsas runtime uses on its remote path.
//!
//! Every PE writes a 20 000-byte pattern (79 wire payloads' worth, sent as bulk packets
//! pulled by RDMA) into every node's segment, adds to a counter on every node 20 times with
//! fetch-add, then reads everything back; the contents and the counters are checked exactly.
//! The job runs once on a clean fabric and once with dropped, corrupted, refused and delayed
//! frames, which must change nothing in the results. A node made unreachable makes the
//! operations to it fail within the layer's deadline, with an error naming the node.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use exanet::nva::EmuRegistrar;
use exanet::{Dest, ExanetTransport, FailurePolicy, Shm, TransportConfig};
use exanet_emu::emu::EmuStats;
use gsas_core::client::{Client, Completion, OpHandle};
use gsas_core::reliable::{Config, HashIndex, PeerEvent, PeerSlot, Reliable, buffer_len};
use gsas_core::service::{Segment, Service, WordMemory};
use gsas_core::transport::{Transport, TransportError};
use gsas_core::wire::{AtomicDesc, AtomicOp, AtomicType, GlobalAddr, SenderId};
use gsas_tests::emu::Emu;

const NODES: usize = 4;
const KEY: u64 = 0x00DD_BA11;
const SEGMENT: usize = 256 * 1024;
const BULK: usize = 20_000;
const ADDS: u64 = 20;
/// Bound of every wait of the job (a loaded 2-core host, or qemu).
const JOB_LIMIT: Duration = Duration::from_secs(300);
const W: usize = 16;

type Link = ExanetTransport<Shm, EmuRegistrar>;
type Layer<'a> = Reliable<'a, Link, W, HashIndex<Dest, 16>>;
type Cl = Client<Dest, 64, 1>;

fn now_ns(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64 + 1
}

fn link(emu: &Emu, node: usize, ep: usize) -> Link {
    let cfg = TransportConfig {
        mtu: 8192,
        on_failure: FailurePolicy::Lose,
        ..TransportConfig::default()
    };
    emu.paths.open_transport(node, ep, cfg).unwrap()
}

fn layer_config(epoch: u64, deadline: Duration) -> Config {
    Config {
        deadline_ns: deadline.as_nanos() as u64,
        ..Config::new(epoch)
    }
}

/// Offset of PE `pe`'s bulk pattern in every segment.
fn bulk_at(pe: usize) -> u64 {
    4096 + (pe * 32 * 1024) as u64
}

fn pattern(pe: usize) -> Vec<u8> {
    (0..BULK)
        .map(|i| (i as u32 * 7 + pe as u32 * 31) as u8)
        .collect()
}

/// A node's service: serves until `stop` is set.
fn service(t: Link, node: usize, stop: Arc<AtomicU64>) {
    let words: Vec<AtomicU64> = (0..SEGMENT / 8).map(|_| AtomicU64::new(0)).collect();
    let id = SenderId::new(t.sender_id()).unwrap();
    let mut svc: Service<_, 4> = Service::new(id, WordMemory::new(&words));
    svc.register(Segment {
        job: 1,
        key: KEY,
        pe: node as u16,
        segment: 0,
        base: 0,
        len: SEGMENT as u64,
    })
    .unwrap();
    let mut peers = [const { PeerSlot::<Dest, W>::new() }; 16];
    let mut buffers = vec![0u8; buffer_len(8192, 8192, 64)];
    let epoch = Instant::now();
    let mut rel: Layer<'_> = Reliable::new(
        t,
        layer_config(100 + node as u64, Duration::from_secs(120)),
        &mut peers,
        &mut buffers,
    )
    .unwrap();
    while stop.load(Ordering::Acquire) == 0 {
        rel.poll(now_ns(epoch)).unwrap();
        while rel.next_event().is_some() {}
        match rel.recv(|p, d| (p, d.to_vec())).unwrap() {
            Some((peer, pkt)) => {
                let start = Instant::now();
                loop {
                    match svc.serve(&mut rel, peer, KEY, &pkt) {
                        Ok(_) => break,
                        Err(TransportError::WouldBlock) => {
                            assert!(start.elapsed() < JOB_LIMIT, "node {node}: cannot reply");
                            rel.poll(now_ns(epoch)).unwrap();
                        }
                        Err(e) => panic!("node {node}: serve: {e}"),
                    }
                }
                rel.flush().unwrap();
            }
            None => thread::sleep(Duration::from_micros(50)),
        }
    }
}

/// A PE's client and its layer, with the loop that drives them.
struct Pe<'a> {
    me: usize,
    client: Cl,
    rel: Layer<'a>,
    epoch: Instant,
    next_tag: u64,
}

/// How an operation ended.
type Outcome = Result<(Vec<(u32, Vec<u8>)>, Option<u64>), String>;

impl Pe<'_> {
    fn tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    /// Drives the client until nothing is outstanding; returns data pieces and the last
    /// fetched value, or the failure (a peer declared unreachable, an operation error).
    fn drive(&mut self, payload: &[u8], handle: Option<OpHandle>, limit: Duration) -> Outcome {
        let mut data = Vec::new();
        let mut fetched = None;
        let mut failure = None;
        let start = Instant::now();
        while self.client.outstanding(0) > 0 {
            if start.elapsed() > limit {
                return Err(format!(
                    "PE {}: operation not finished within {limit:?}",
                    self.me
                ));
            }
            self.rel.poll(now_ns(self.epoch)).unwrap();
            while let Some(ev) = self.rel.next_event() {
                if let PeerEvent::Unreachable(peer) = ev {
                    self.client.fail_peer(peer, |c| {
                        if let Completion::Done { result: Err(e), .. } = c {
                            failure = Some(format!("{peer} unreachable: {e:?}"));
                        }
                    });
                }
            }
            if let Some(h) = handle {
                if self.client.is_pending(h) {
                    let _ = self.client.resume(&mut self.rel, h, payload);
                }
            }
            let _ = self.client.pump(&mut self.rel);
            self.rel.flush().unwrap();
            match self.rel.recv(|_, d| d.to_vec()).unwrap() {
                Some(reply) => {
                    self.client.handle_reply(&reply, |c| match c {
                        Completion::Data {
                            offset, data: d, ..
                        } => data.push((offset, d.to_vec())),
                        Completion::Done { result, .. } => match result {
                            Ok(v) => fetched = v,
                            Err(e) => failure = Some(format!("operation failed: {e:?}")),
                        },
                    });
                }
                None => thread::sleep(Duration::from_micros(50)),
            }
        }
        match failure {
            Some(f) => Err(f),
            None => Ok((data, fetched)),
        }
    }

    fn write(&mut self, server: Dest, at: GlobalAddr, bytes: &[u8]) {
        let tag = self.tag();
        let issued = self
            .client
            .write(&mut self.rel, server, 0, tag, at, bytes)
            .unwrap();
        self.drive(bytes, Some(issued.handle), JOB_LIMIT)
            .unwrap_or_else(|e| panic!("PE {} write to {server}: {e}", self.me));
    }

    fn read(&mut self, server: Dest, at: GlobalAddr, len: usize) -> Outcome {
        let tag = self.tag();
        self.client
            .read(&mut self.rel, server, 0, tag, at, len)
            .unwrap();
        let (pieces, _) = self.drive(&[], None, JOB_LIMIT)?;
        let mut back = vec![0u8; len];
        for (off, piece) in pieces {
            back[off as usize..off as usize + piece.len()].copy_from_slice(&piece);
        }
        Ok((vec![(0, back)], None))
    }

    fn fetch_add(&mut self, server: Dest, at: GlobalAddr, v: u64) -> u64 {
        let tag = self.tag();
        let fadd = AtomicDesc::new(AtomicOp::FetchAdd, AtomicType::U64).unwrap();
        self.client
            .atomic(&mut self.rel, server, 0, tag, at, fadd, v, 0)
            .unwrap();
        self.drive(&[], None, JOB_LIMIT)
            .unwrap_or_else(|e| panic!("PE {} fetch-add at {server}: {e}", self.me))
            .1
            .expect("fetch-add returns the old value")
    }
}

fn addr(node: usize, off: u64) -> GlobalAddr {
    GlobalAddr::new(node as u16, 0, off).unwrap()
}

/// The whole job of PE `me`: writes, atomics, then (after every PE wrote) reads and checks.
fn pe_job(t: Link, me: usize, services: [Dest; NODES], all_wrote: Arc<Barrier>) {
    let mut peers = [const { PeerSlot::<Dest, W>::new() }; 16];
    let mut buffers = vec![0u8; buffer_len(8192, 8192, 64)];
    let client = Cl::new(SenderId::new(t.sender_id()).unwrap());
    let rel: Layer<'_> = Reliable::new(
        t,
        layer_config(1 + me as u64, Duration::from_secs(120)),
        &mut peers,
        &mut buffers,
    )
    .unwrap();
    let mut pe = Pe {
        me,
        client,
        rel,
        epoch: Instant::now(),
        next_tag: 0,
    };
    let mine = pattern(me);
    for (node, server) in services.iter().enumerate() {
        pe.write(*server, addr(node, bulk_at(me)), &mine);
    }
    let mut olds = Vec::new();
    for _ in 0..ADDS {
        for (node, server) in services.iter().enumerate() {
            olds.push(pe.fetch_add(*server, addr(node, 8 * node as u64), 1 + node as u64));
        }
    }
    // Every old value is distinct per counter (no add lost or applied twice).
    for node in 0..NODES {
        let mut seen: Vec<u64> = olds.iter().skip(node).step_by(NODES).copied().collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len() as u64, ADDS, "PE {me}: fetch-add results repeat");
    }
    all_wrote.wait();
    for (node, server) in services.iter().enumerate() {
        for writer in 0..NODES {
            let back = pe
                .read(*server, addr(node, bulk_at(writer)), BULK)
                .unwrap_or_else(|e| panic!("PE {me} read: {e}"));
            assert!(
                back.0[0].1 == pattern(writer),
                "PE {me}: node {node} holds wrong bytes of PE {writer}"
            );
        }
        let counter = pe
            .read(*server, addr(node, 8 * node as u64), 8)
            .unwrap_or_else(|e| panic!("PE {me} read: {e}"));
        let total = u64::from_le_bytes(counter.0[0].1[..8].try_into().unwrap());
        assert_eq!(
            total,
            NODES as u64 * ADDS * (1 + node as u64),
            "counter of node {node}"
        );
    }
    all_wrote.wait();
}

/// Runs the job on `emu`: services on endpoint 0, PEs on endpoint 1 of every node.
fn run_job(emu: &Emu) {
    let stop = Arc::new(AtomicU64::new(0));
    let mut services = Vec::new();
    let mut dests = [Dest { coord: 0, ep: 0 }; NODES];
    for (node, dest) in dests.iter_mut().enumerate() {
        let t = link(emu, node, 0);
        *dest = t.local_peer();
        let stop = Arc::clone(&stop);
        services.push(thread::spawn(move || service(t, node, stop)));
    }
    let barrier = Arc::new(Barrier::new(NODES));
    let pes: Vec<_> = (0..NODES)
        .map(|me| {
            let t = link(emu, me, 1);
            let b = Arc::clone(&barrier);
            thread::spawn(move || pe_job(t, me, dests, b))
        })
        .collect();
    // The PE panics carry their PE number; the first one is re-raised once the services
    // are stopped.
    let failed = pes.into_iter().filter_map(|p| p.join().err()).next();
    stop.store(1, Ordering::Release);
    for s in services {
        s.join().unwrap();
    }
    if let Some(e) = failed {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn a_four_node_job_over_exanet_gets_exact_results() {
    let emu = Emu::start("job", 2, &[]);
    run_job(&emu);
    let s = EmuStats::parse(&emu.paths.control("stats").unwrap()).unwrap();
    assert_eq!((s.dropped, s.corrupted), (0, 0), "{s}");
    assert!(
        s.frames > 4 * 4 * 80,
        "the bulk data crossed the fabric: {s}"
    );
}

#[test]
fn dropped_corrupted_refused_and_delayed_frames_change_nothing() {
    // A shorter NI ack timeout, so that each lost frame costs 0.5 s, not 1 s. Not much
    // shorter: under qemu on a loaded host a pull of 8 KiB can take 100 ms, and a timeout
    // that fires on slow but healthy traffic turns every bulk packet into a resend.
    let emu = Emu::start(
        "lossyjob",
        2,
        &[
            "--ack-timeout-ms",
            "500",
            "--fault",
            "drop * 4",
            "--fault",
            "corrupt * 4",
            "--fault",
            "nack 1 0 20 ring-full",
            "--fault",
            "nack 2 1 20 ring-full",
            "--fault",
            "latency 50",
        ],
    );
    run_job(&emu);
    let s = EmuStats::parse(&emu.paths.control("stats").unwrap()).unwrap();
    assert_eq!(
        (s.dropped, s.corrupted),
        (4, 4),
        "every injected loss happened: {s}"
    );
    let faults = emu.paths.control("faults").unwrap();
    assert!(
        faults.contains("nack=[]"),
        "every forced NACK was used: {faults}"
    );
}

#[test]
fn an_unreachable_node_fails_operations_within_the_deadline_naming_it() {
    let emu = Emu::start("deadnode", 2, &["--ack-timeout-ms", "100"]);
    let stop = Arc::new(AtomicU64::new(0));
    let mut services = Vec::new();
    let mut dests = [Dest { coord: 0, ep: 0 }; NODES];
    for (node, dest) in dests.iter_mut().enumerate() {
        let t = link(&emu, node, 0);
        *dest = t.local_peer();
        let stop = Arc::clone(&stop);
        services.push(thread::spawn(move || service(t, node, stop)));
    }
    let t = link(&emu, 0, 1);
    let mut peers = [const { PeerSlot::<Dest, W>::new() }; 16];
    let mut buffers = vec![0u8; buffer_len(8192, 8192, 64)];
    let client = Cl::new(SenderId::new(t.sender_id()).unwrap());
    let deadline = Duration::from_secs(2);
    let rel: Layer<'_> =
        Reliable::new(t, layer_config(9, deadline), &mut peers, &mut buffers).unwrap();
    let mut pe = Pe {
        me: 0,
        client,
        rel,
        epoch: Instant::now(),
        next_tag: 0,
    };
    // Node 3 answers first ...
    pe.write(dests[3], addr(3, 64), &[5u8; 64]);
    // ... then dies: every frame to and from it vanishes.
    emu.paths.control("unreachable 3 on").unwrap();
    let start = Instant::now();
    let err = pe
        .read(dests[3], addr(3, 64), 64)
        .expect_err("a read from a dead node succeeded");
    let took = start.elapsed();
    assert!(err.contains("node 0x003000"), "error names the node: {err}");
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(30),
        "failed after {took:?} with a {deadline:?} deadline"
    );
    // The other nodes are unaffected.
    let back = pe.read(dests[2], addr(2, 0), 8).unwrap();
    assert_eq!(back.0[0].1, vec![0u8; 8]);
    stop.store(1, Ordering::Release);
    for s in services {
        s.join().unwrap();
    }
}
