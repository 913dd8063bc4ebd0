// About 1,000 lines: the transport's tests share the model and emulator helpers above.
//! `ExanetTransport`: regression tests of the bulk release path (deterministic, on the
//! in-process model), direct RDMA, gsas-core client requests carried to a gsas-core
//! service engine end to end through the emulator, the persistent send, and the runtime's
//! PIO path (small packets as one mailbox message, exactly once under faults) over the
//! emulator in process. (The transport conformance suite runs on Exanet with the other
//! transports, in the workspace's `gsas-tests` crate: `tests/tests/transport/conformance.rs`.)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use exanet::regs::nack;
use exanet::{Dest, DriverConfig, ExanetTransport, FailurePolicy, TransportConfig, node_coord};
use exanet_emu::Model;
use exanet_emu::model::{ModelConfig, ModelFabric, ModelRegistrar};
use gsas_core::client::{Client, Completion};
use gsas_core::service::{PortQueue, Segment, Service, WordMemory, refuse_host_actions};
use gsas_core::transport::{Transport, TransportError};
use gsas_core::wire::{AtomicDesc, AtomicOp, AtomicType, GlobalAddr, SenderId};

const LONG: Duration = Duration::from_secs(30);

/// The kit's small configuration (four staging slots each way, 3 s release timeout).
fn cfg() -> TransportConfig {
    gsas_tests::emu::small_transport_config()
}

type ModelTransport = ExanetTransport<Model, ModelRegistrar>;

/// Two transports on a 2-node model fabric (auto mode: every doorbell runs the fabric to
/// completion, so the outcome does not depend on timing). The release timeout is an hour:
/// only a release that really arrives can free a slot.
fn model_pair(
    a_cfg: TransportConfig,
    b_cfg: TransportConfig,
) -> (ModelFabric, ModelTransport, ModelTransport) {
    let f = ModelFabric::new(ModelConfig {
        nodes: 2,
        eps: 1,
        pdid: 1,
        ack_timeout_ns: 1_000_000_000,
    });
    let hour = Duration::from_secs(3600);
    let a = ExanetTransport::new(
        f.endpoint(0, 0),
        f.registrar(0, 0),
        TransportConfig {
            release_timeout: hour,
            ..a_cfg
        },
    )
    .unwrap();
    let b = ExanetTransport::new(
        f.endpoint(1, 0),
        f.registrar(1, 0),
        TransportConfig {
            release_timeout: hour,
            ..b_cfg
        },
    )
    .unwrap();
    (f, a, b)
}

fn bulk(t: &mut ModelTransport, peer: Dest, fill: u8) -> Result<(), TransportError> {
    t.send(peer, 1000, |buf| buf.fill(fill))
}

/// Receives `n` packets' first bytes within a few calls (a pull completes during one call
/// and is seen by the next).
fn take(t: &mut ModelTransport, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    for _ in 0..4 * n + 4 {
        if let Some(first) = t.recv(|_, d| d[0]).unwrap() {
            got.push(first);
            if got.len() == n {
                break;
            }
        }
    }
    got
}

/// Regression (the "lost release"): a sender whose staging slots are all busy must get them
/// back by calling `poll` only, as gsas-core's contract says ("WouldBlock: poll and
/// retry"). Releases used to be read from the mailbox only inside `recv`, so a sender that
/// did not receive kept its slots until the release timeout reclaimed them and reported the
/// healthy receiver as unreachable.
#[test]
fn a_sender_that_only_polls_gets_its_bulk_slots_back() {
    let small = TransportConfig {
        mtu: 4096,
        tx_slots: 2,
        rx_slots: 4,
        ..TransportConfig::default()
    };
    let (_f, mut a, mut b) = model_pair(small, small);
    let pb = b.local_peer();
    bulk(&mut a, pb, 1).unwrap();
    bulk(&mut a, pb, 2).unwrap();
    assert_eq!(bulk(&mut a, pb, 3), Err(TransportError::WouldBlock));
    assert_eq!(take(&mut b, 2), vec![1, 2]);
    // No recv on `a`: poll and retry must be enough (each turn is synchronous here).
    let mut sent = false;
    for _ in 0..3 {
        a.poll(0).unwrap();
        if bulk(&mut a, pb, 3).is_ok() {
            sent = true;
            break;
        }
    }
    assert!(
        sent,
        "send still blocked: the releases were not seen by poll"
    );
    assert_eq!(take(&mut b, 1), vec![3]);
    assert!(a.take_failure().is_none() && b.take_failure().is_none());
    assert_eq!(a.stats().overdue, 0);
}

/// Regression: a `BULK_DESC` that must wait for a receive slot (the only one holds a packet
/// the application has not taken yet) may not hide the messages behind it in the mailbox:
/// here a release that frees the receiver's own send slot and a small packet.
#[test]
fn a_waiting_bulk_descriptor_does_not_hide_the_messages_behind_it() {
    let one = TransportConfig {
        mtu: 4096,
        tx_slots: 1,
        rx_slots: 1,
        ..TransportConfig::default()
    };
    let (_f, mut a, mut b) = model_pair(cfg(), one);
    let (pa, pb) = (a.local_peer(), b.local_peer());
    bulk(&mut a, pb, 1).unwrap();
    b.poll(0).unwrap(); // pulled into b's only receive slot, not taken by the application
    bulk(&mut a, pb, 2).unwrap(); // its descriptor waits for that slot
    a.send(pb, 8, |buf| buf.fill(0x33)).unwrap();
    bulk(&mut b, pa, 9).unwrap(); // b's only send slot
    // `a` pulls it and releases it; the release lands behind the waiting descriptor.
    let mut sent = false;
    for _ in 0..3 {
        a.poll(0).unwrap();
        b.poll(0).unwrap();
        if bulk(&mut b, pa, 10).is_ok() {
            sent = true;
            break;
        }
    }
    assert!(
        sent,
        "b's send slot was not released: the release is stuck behind the descriptor"
    );
    let mut at_b = Vec::new();
    let start = Instant::now();
    while at_b.len() < 3 {
        assert!(start.elapsed() < LONG, "b received only {at_b:?}");
        if let Some(p) = b.recv(|_, d| (d.len(), d[0])).unwrap() {
            at_b.push(p);
        }
        a.poll(0).unwrap();
    }
    at_b.sort_unstable();
    assert_eq!(at_b, vec![(8, 0x33), (1000, 1), (1000, 2)]);
    assert_eq!(take(&mut a, 2), vec![9, 10]);
    assert!(a.take_failure().is_none() && b.take_failure().is_none());
}

/// Regression: with its inbox full (the application is not receiving, e.g. a service that
/// waits to send a reply while requests keep coming), an endpoint still sees the releases
/// queued behind the user messages in its mailbox, so its blocked send completes.
#[test]
fn releases_behind_a_full_inbox_still_free_the_send_slots() {
    let one = TransportConfig {
        mtu: 4096,
        tx_slots: 1,
        rx_slots: 1,
        ..TransportConfig::default()
    };
    let (_f, mut a, mut b) = model_pair(one, cfg());
    let (pa, pb) = (a.local_peer(), b.local_peer());
    let small = |t: &mut ModelTransport, other: &mut ModelTransport, i: u8| {
        for _ in 0..100 {
            if t.send(pa, 8, |buf| buf.fill(i)).is_ok() {
                return;
            }
            t.poll(0).unwrap();
            other.poll(0).unwrap();
        }
        panic!("small send {i} blocked");
    };
    // 64 requests fill a's inbox (moved there by a's poll), 10 more wait in its ring.
    for i in 0..64 {
        small(&mut b, &mut a, i);
    }
    a.poll(0).unwrap();
    for i in 64..74 {
        small(&mut b, &mut a, i);
    }
    bulk(&mut a, pb, 7).unwrap(); // a's only send slot
    assert_eq!(take(&mut b, 1), vec![7]); // pulled; the release queues behind the 10
    let mut sent = false;
    for _ in 0..3 {
        a.poll(0).unwrap();
        b.poll(0).unwrap();
        if bulk(&mut a, pb, 8).is_ok() {
            sent = true;
            break;
        }
    }
    assert!(sent, "the release behind the full inbox was not seen");
    let mut got: Vec<u8> = (0..74).map(|_| take(&mut a, 1)[0]).collect();
    got.sort_unstable();
    assert_eq!(got, (0..74).collect::<Vec<u8>>());
    assert_eq!(take(&mut b, 1), vec![8]);
    assert!(a.take_failure().is_none() && b.take_failure().is_none());
}

/// A release the driver gives up on (its destination NACKed it `max_attempts` times) is
/// sent again by the transport, so the sender's slot still comes back and nobody is
/// reported as failed.
#[test]
fn a_release_refused_until_the_driver_gives_up_is_sent_again() {
    let impatient = TransportConfig {
        mtu: 4096,
        tx_slots: 1,
        rx_slots: 1,
        driver: DriverConfig {
            max_attempts: 2,
            backoff_min: Duration::from_micros(1),
            backoff_max: Duration::from_micros(10),
            ..DriverConfig::default()
        },
        ..TransportConfig::default()
    };
    let (f, mut a, mut b) = model_pair(impatient, impatient);
    let (pa, pb) = (a.local_peer(), b.local_peer());
    bulk(&mut a, pb, 4).unwrap();
    // The next two mailbox deliveries to `a` (the release, then its one resend by the
    // driver) are refused as if a's ring were full.
    f.faults()
        .force_nack(pa.coord, Some(pa.ep), nack::RING_FULL, 2);
    assert_eq!(take(&mut b, 1), vec![4]);
    let start = Instant::now();
    while bulk(&mut a, pb, 5).is_err() {
        assert!(start.elapsed() < LONG, "a's slot never came back");
        b.poll(0).unwrap();
        a.poll(0).unwrap();
        std::thread::sleep(Duration::from_micros(20));
    }
    assert_eq!(b.stats().releases_resent, 1);
    assert!(a.take_failure().is_none() && b.take_failure().is_none());
    assert_eq!(take(&mut b, 1), vec![5]);
}

#[test]
fn direct_rdma_through_the_transport() {
    let emu = common::start("trdma", 2, &[]);
    let mut a = emu.paths.open_transport(0, 0, cfg()).unwrap();
    let mut b = emu.paths.open_transport(2, 0, cfg()).unwrap();
    let sa = exanet::nva::MemSegment::create("a", 1 << 20).unwrap();
    let sb = exanet::nva::MemSegment::create("b", 1 << 20).unwrap();
    let (na, nb) = (a.register(&sa).unwrap(), b.register(&sb).unwrap());
    let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i >> 3) as u8).collect();
    sa.write(0, &data).unwrap();
    let h = a
        .rdma_write(na, b.local_peer(), nb, 1 << 20, true, 5)
        .unwrap();
    assert_eq!(a.rdma_wait(h, LONG).unwrap(), 1 << 20);
    let mut out = vec![0u8; 1 << 20];
    sb.read(0, &mut out).unwrap();
    assert!(out == data);
    let n = common::wait_for(LONG, "the remote notification", || {
        let _ = b.recv(|_, _| panic!("no packet expected"));
        b.take_notification()
    });
    assert_eq!((n.cookie, n.len), (5, 1 << 20));
    let h = a
        .rdma_read(na.add(100), b.local_peer(), nb.add(5000), 777)
        .unwrap();
    assert_eq!(a.rdma_wait(h, LONG).unwrap(), 777);
    let mut back = vec![0u8; 777];
    sa.read(100, &mut back).unwrap();
    assert!(back[..] == data[5000..5777]);
    let h = a
        .rdma_read(na, b.local_peer(), nb.add((1 << 20) - 10), 100)
        .unwrap();
    let err = a.rdma_wait(h, LONG).unwrap_err();
    assert!(
        err.to_string().contains("remote translation fault")
            && err.to_string().contains("node 0x002000"),
        "{err}"
    );
}

const KEY: u64 = 0xFEED;

/// Serves requests on `t` until `stop`, with the service's serve loop
/// (`Service::serve_port`, the daemon's).
fn serve(mut t: ExanetTransport<exanet::Shm, exanet::nva::EmuRegistrar>, stop: Arc<AtomicBool>) {
    let words: Vec<AtomicU64> = (0..8192).map(|_| AtomicU64::new(0)).collect();
    let id = SenderId::new(t.sender_id()).unwrap();
    let mut service: Service<_, 4> = Service::new(id, WordMemory::new(&words));
    service
        .register(Segment {
            job: 1,
            key: KEY,
            pe: 0,
            segment: 0,
            base: 0,
            len: 65536,
        })
        .unwrap();
    let mut queue = PortQueue::new();
    let mut scratch = vec![0u8; t.capabilities().mtu];
    let mut waiting_since = None;
    while !stop.load(Ordering::Acquire) {
        let served = service
            .serve_port(
                &mut t,
                &mut queue,
                &mut scratch,
                64,
                |_| KEY,
                refuse_host_actions,
            )
            .unwrap_or_else(|e| panic!("serve: {e}"));
        assert_eq!(served.dropped + served.scratch_short, 0, "{served:?}");
        // A reply may wait for room, but not for ever.
        if queue.is_empty() {
            waiting_since = None;
        } else {
            let since = *waiting_since.get_or_insert_with(Instant::now);
            assert!(since.elapsed() < LONG, "service could not reply");
        }
        if served.moved == 0 {
            let _ = t.poll(0);
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

type Cl = Client<Dest, 64, 1>;

/// Drives the client until context 0 has nothing outstanding; returns data pieces and the
/// last Done result.
fn drive(
    client: &mut Cl,
    t: &mut ExanetTransport<exanet::Shm, exanet::nva::EmuRegistrar>,
    payload: &[u8],
    handle: Option<gsas_core::client::OpHandle>,
) -> (Vec<(u32, Vec<u8>)>, Option<u64>) {
    let mut data = Vec::new();
    let mut fetched = None;
    let start = Instant::now();
    while client.outstanding(0) > 0 {
        assert!(start.elapsed() < LONG, "operation did not complete");
        if let Some(h) = handle {
            if client.is_pending(h) {
                let _ = client.resume(t, h, payload);
            }
        }
        let _ = client.pump(t);
        let got = t.recv(|_, d| d.to_vec()).unwrap();
        match got {
            Some(reply) => {
                client.handle_reply(&reply, |c| match c {
                    Completion::Data {
                        offset, data: d, ..
                    } => data.push((offset, d.to_vec())),
                    Completion::Done { result, .. } => fetched = result.expect("operation failed"),
                });
            }
            None => {
                let _ = t.poll(0);
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }
    (data, fetched)
}

#[test]
fn gsas_client_requests_reach_a_gsas_service_end_to_end() {
    let emu = common::start("e2e", 2, &[]);
    let mut t = emu
        .paths
        .open_transport(0, 0, TransportConfig::default())
        .unwrap();
    let service_t = emu
        .paths
        .open_transport(1, 0, TransportConfig::default())
        .unwrap();
    let server = service_t.local_peer();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let th = std::thread::spawn(move || serve(service_t, stop2));
    let mut client: Cl = Client::new(SenderId::new(t.sender_id()).unwrap());
    let at = |off| GlobalAddr::new(0, 0, off).unwrap();

    // 8-byte write and read.
    client
        .write(
            &mut t,
            server,
            0,
            1,
            at(64),
            &0x1122_3344_5566_7788u64.to_le_bytes(),
        )
        .unwrap();
    drive(&mut client, &mut t, &[], None);
    client.read(&mut t, server, 0, 2, at(64), 8).unwrap();
    let (data, _) = drive(&mut client, &mut t, &[], None);
    assert_eq!(
        data,
        vec![(0, 0x1122_3344_5566_7788u64.to_le_bytes().to_vec())]
    );

    // Atomics: fetch-add and compare-swap (a 40-byte request).
    let fadd = AtomicDesc::new(AtomicOp::FetchAdd, AtomicType::U64).unwrap();
    client
        .atomic(&mut t, server, 0, 3, at(64), fadd, 8, 0)
        .unwrap();
    assert_eq!(
        drive(&mut client, &mut t, &[], None).1,
        Some(0x1122_3344_5566_7788)
    );
    let cas = AtomicDesc::new(AtomicOp::CompareSwap, AtomicType::U64).unwrap();
    client
        .atomic(&mut t, server, 0, 4, at(64), cas, 42, 0x1122_3344_5566_7790)
        .unwrap();
    assert_eq!(
        drive(&mut client, &mut t, &[], None).1,
        Some(0x1122_3344_5566_7790)
    );
    client.read(&mut t, server, 0, 5, at(64), 8).unwrap();
    assert_eq!(
        drive(&mut client, &mut t, &[], None).0[0].1,
        42u64.to_le_bytes().to_vec()
    );

    // Bulk write and read of 20 000 bytes (fragments larger than the 256-byte wire payload).
    let bulk: Vec<u8> = (0..20_000u32).map(|i| (i * 13 % 256) as u8).collect();
    let issued = client.write(&mut t, server, 0, 6, at(1024), &bulk).unwrap();
    drive(&mut client, &mut t, &bulk, Some(issued.handle));
    client
        .read(&mut t, server, 0, 7, at(1024), bulk.len())
        .unwrap();
    let (pieces, _) = drive(&mut client, &mut t, &[], None);
    let mut back = vec![0u8; bulk.len()];
    for (off, piece) in pieces {
        back[off as usize..off as usize + piece.len()].copy_from_slice(&piece);
    }
    assert!(back == bulk, "bulk data differs");
    assert!(t.stats().bulk_sent >= 3, "{:?}", t.stats());
    stop.store(true, Ordering::Release);
    th.join().unwrap();
}

// Bulk-slot release and reclaim over the model (the driver's unit tests before the model
// moved to this crate).

fn slot_link(f: &ModelFabric, node: usize) -> ExanetTransport<Model, ModelRegistrar> {
    slot_link_with(f, node, FailurePolicy::Lose, Duration::from_secs(10))
}

fn slot_link_with(
    f: &ModelFabric,
    node: usize,
    on_failure: FailurePolicy,
    release_timeout: Duration,
) -> ExanetTransport<Model, ModelRegistrar> {
    let cfg = TransportConfig {
        mtu: 4096,
        tx_slots: 1,
        rx_slots: 2,
        on_failure,
        release_timeout,
        ..TransportConfig::default()
    };
    ExanetTransport::new(f.endpoint(node, 0), f.registrar(node, 0), cfg).unwrap()
}

/// A bulk packet whose receiver never pulls it (a process that ended with it in its
/// mailbox): after the release timeout, under `FailurePolicy::Lose` its slot is reused
/// (else departed peers would hold every slot), and a late pull of the old descriptor
/// is dropped; under `FailurePolicy::Report` the slot stays held.
#[test]
fn an_unreleased_slot_is_reused_after_the_timeout_only_under_a_reliability_layer() {
    let timeout = Duration::from_millis(30);
    for policy in [FailurePolicy::Lose, FailurePolicy::Report] {
        let f = ModelFabric::new(ModelConfig::default());
        let mut a = slot_link_with(&f, 0, policy, timeout);
        let mut b = slot_link_with(&f, 1, policy, timeout);
        let to_b = b.local_peer();
        a.send(to_b, 300, |buf| buf.fill(1)).unwrap();
        // b does not run: the descriptor waits in its mailbox, acknowledged.
        std::thread::sleep(timeout + Duration::from_millis(20));
        let _ = a.poll(0);
        assert_eq!(a.stats().overdue, 1, "{policy:?}: {:?}", a.stats());
        let reused = policy == FailurePolicy::Lose;
        assert_eq!(a.bulk_in_flight(), usize::from(!reused), "{policy:?}");
        let second = a.send(to_b, 200, |buf| buf.fill(2));
        assert_eq!(second.is_ok(), reused, "{policy:?}: {:?}", second.err());
        let mut got = Vec::new();
        for _ in 0..100 {
            if let Some(p) = b.recv(|_, d| d.to_vec()).unwrap() {
                got.push(p);
            }
            let _ = a.poll(0);
        }
        if reused {
            assert_eq!(got, [vec![2u8; 200]], "only the second packet is delivered");
            assert_eq!(b.stats().stale_pulls, 1, "{:?}", b.stats());
        } else {
            assert_eq!(got, [vec![1u8; 300]], "the slow receiver gets the packet");
        }
        assert_eq!(a.bulk_in_flight(), 0, "{policy:?}: the slot came back");
    }
}

/// A `BULK_DESC` whose acknowledgement is lost (so it did arrive) frees its slot under
/// `FailurePolicy::Lose`; the slot is refilled, and the receiver's late pull of the old
/// descriptor finds the new stamps and drops it, while the new packet is delivered.
#[test]
fn a_reclaimed_slot_is_never_delivered_for_a_stale_descriptor() {
    let f = ModelFabric::new(ModelConfig::default());
    let mut a = slot_link(&f, 0);
    let mut b = slot_link(&f, 1);
    let to_b = b.local_peer();
    f.set_step_mode(true);
    a.send(to_b, 300, |buf| buf.fill(1)).unwrap();
    // One poll pass: a's engine emits the descriptor; one delivery: b's mailbox takes it
    // and b's engine queues the acknowledgement, which is lost on the way back.
    assert!(f.step());
    assert!(f.queued() > 0, "the descriptor is on the wire");
    assert!(f.step());
    f.faults().set_unreachable(node_coord(1), true);
    for _ in 0..1000 {
        if f.queued() == 0 {
            break;
        }
        f.step();
    }
    assert_eq!(f.queued(), 0, "the unreachable node's frames are dropped");
    f.faults().set_unreachable(node_coord(1), false);
    f.set_step_mode(false);
    f.advance(Duration::from_millis(5));
    a.poll(0).unwrap();
    assert_eq!(a.stats().failures, 1, "{:?}", a.stats());
    assert_eq!(a.stats().slots_reclaimed, 1, "{:?}", a.stats());
    assert_eq!(a.bulk_in_flight(), 0);
    // The only slot is reused for a second packet while b has not pulled the first.
    a.send(to_b, 200, |buf| buf.fill(2)).unwrap();
    let mut got = Vec::new();
    for _ in 0..100 {
        if let Some(p) = b.recv(|_, d| d.to_vec()).unwrap() {
            got.push(p);
        }
        a.poll(0).unwrap();
    }
    assert_eq!(got, [vec![2u8; 200]], "only the second packet is delivered");
    assert_eq!(b.stats().stale_pulls, 1, "{:?}", b.stats());
    assert_eq!(a.bulk_in_flight(), 0, "the second packet was released");
    // And the slot keeps working.
    a.send(to_b, 100, |buf| buf.fill(3)).unwrap();
    let mut third = None;
    for _ in 0..100 {
        if let Some(p) = b.recv(|_, d| d.to_vec()).unwrap() {
            third = Some(p);
            break;
        }
    }
    assert_eq!(third, Some(vec![3u8; 100]));
}

/// A persistent message whose acknowledgement is lost is resent, so it arrives twice
/// (the layer above discards the copy); one to a node that stays unreachable is given
/// up once its deadline after the first refusal passed, and reported by `take_lost`.
#[test]
fn a_persistent_message_is_resent_after_a_lost_ack_and_given_up_at_its_deadline() {
    let f = ModelFabric::new(ModelConfig::default());
    let mut a = slot_link(&f, 0);
    let mut b = slot_link(&f, 1);
    let to_b = b.local_peer();
    f.set_step_mode(true);
    a.send_persistent(to_b, 8, Duration::from_secs(10), |buf| buf.fill(7))
        .unwrap();
    assert!(f.step());
    assert!(f.step(), "delivered; the ack is queued");
    f.faults().set_unreachable(node_coord(1), true);
    while f.queued() > 0 {
        f.step();
    }
    f.faults().set_unreachable(node_coord(1), false);
    f.set_step_mode(false);
    f.advance(Duration::from_millis(5));
    let mut got = Vec::new();
    for _ in 0..100 {
        a.poll(0).unwrap();
        while let Some(p) = b.recv(|_, d| d.to_vec()).unwrap() {
            got.push(p);
        }
    }
    assert_eq!(
        got,
        [vec![7u8; 8], vec![7u8; 8]],
        "the original and the resend"
    );
    assert!(a.take_lost().is_none());
    assert_eq!(a.endpoint().stats().resent, 1);
    f.faults().set_unreachable(node_coord(1), true);
    a.send_persistent(to_b, 8, Duration::from_millis(20), |buf| buf.fill(8))
        .unwrap();
    let start = Instant::now();
    let lost = loop {
        f.advance(Duration::from_millis(5));
        a.poll(0).unwrap();
        if let Some(l) = a.take_lost() {
            break l;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never given up");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!((lost.dest, lost.reason), (to_b, nack::UNREACHABLE));
    assert!(lost.attempts > 1, "resent before the deadline: {lost:?}");
    assert!(start.elapsed() >= Duration::from_millis(20));
}

/// The runtime's PIO path (`gsas_transport::pio`) over the emulator in
/// process: the reliability layer the services and PEs use, over an Exanet endpoint of
/// node 0 and one of node 1.
mod pio_over_the_emulator {
    use std::collections::HashSet;
    use std::time::{Duration, Instant};

    use exanet::node_coord;
    use exanet_emu::emu::{EmuConfig, EmuStats, Emulator};
    use gsas_core::reliable::PeerEvent;
    use gsas_core::transport::{Transport, TransportError};

    use gsas_transport::exanet::ExanetSite;
    use gsas_transport::net::{NetAddr, NetPeer, NetTransport};
    use gsas_transport::pio::MAX_PACKET;
    use gsas_transport::poll::monotonic_ns;
    use gsas_transport::reliable::{OwnedReliable, reliable_config};

    type Layer = OwnedReliable<NetTransport, 8>;
    const KEY: u64 = 0x5EED;

    fn layer(root: &std::path::Path, node: usize, deadline: Duration) -> Layer {
        let site = ExanetSite::emulated(root, node_coord(node)).unwrap();
        let (link, _) = site.open(1, 8192, false).unwrap();
        let net = NetTransport::Exanet {
            link: Box::new(link),
            udp: None,
        };
        OwnedReliable::new(net, reliable_config(deadline), 4, 16).unwrap()
    }

    fn peer_of(l: &Layer) -> NetPeer {
        NetPeer {
            addr: l.inner().local_addr(),
            key: KEY,
        }
    }

    struct Pair {
        emu: Option<Emulator>,
        a: Layer,
        b: Layer,
        to_b: NetPeer,
        root: std::path::PathBuf,
        got: Vec<Vec<u8>>,
    }

    impl Drop for Pair {
        fn drop(&mut self) {
            if let Some(e) = self.emu.take() {
                let _ = e.shutdown();
            }
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn pair(tag: &str, deadline: Duration, ack_timeout: Duration) -> Pair {
        let root = std::env::temp_dir().join(format!("gsas-pio-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut cfg = EmuConfig::new(&root);
        cfg.nodes = 2;
        cfg.eps = 2;
        cfg.ack_timeout = ack_timeout;
        let emu = Emulator::start(cfg).unwrap();
        emu.paths().wait_ready(Duration::from_secs(30)).unwrap();
        let a = layer(&root, 0, deadline);
        let b = layer(&root, 1, deadline);
        let to_b = peer_of(&b);
        Pair {
            emu: Some(emu),
            a,
            b,
            to_b,
            root,
            got: Vec::new(),
        }
    }

    impl Pair {
        fn stats(&self) -> EmuStats {
            self.emu.as_ref().unwrap().stats()
        }

        /// One round: both sides polled, what `b` received collected.
        fn pump(&mut self) {
            let now = monotonic_ns();
            self.a.poll(now).unwrap();
            self.a.flush().unwrap();
            self.b.poll(now).unwrap();
            while let Some((from, d)) = self.b.recv(|from, d| (from, d.to_vec())).unwrap() {
                assert_eq!(from.key, KEY);
                assert_eq!(from.addr, self.a.inner().local_addr());
                self.got.push(d);
            }
        }

        /// Drives both sides until `b` received `n` packets in all or `limit` passed;
        /// returns them.
        fn receive_for(&mut self, n: usize, limit: Duration) -> Vec<Vec<u8>> {
            let start = Instant::now();
            while self.got.len() < n && start.elapsed() < limit {
                self.pump();
                std::thread::yield_now();
            }
            std::mem::take(&mut self.got)
        }

        fn receive(&mut self, n: usize) -> Vec<Vec<u8>> {
            self.receive_for(n, Duration::from_secs(30))
        }

        /// Sends `packet` to `b`, driving both sides while the transport is busy.
        fn send(&mut self, packet: &[u8]) {
            let to_b = self.to_b;
            loop {
                match self
                    .a
                    .send(to_b, packet.len(), |b| b.copy_from_slice(packet))
                {
                    Ok(()) => return,
                    Err(TransportError::WouldBlock) => self.pump(),
                    Err(e) => panic!("send: {e:?}"),
                }
            }
        }
    }

    /// The boundary: the largest packet that fits (48 bytes: a 16-byte put, since a
    /// request header is 32 bytes) is exactly one mailbox message and no RDMA; the
    /// smallest that does not (49 bytes) is a reliability frame pulled by RDMA.
    #[test]
    fn the_largest_packet_that_fits_is_one_message_and_the_next_size_is_pulled() {
        assert_eq!(MAX_PACKET, gsas_core::wire::HEADER_LEN + 16);
        // A generous ack timeout: a spurious resend (a slow emulator under qemu) would count.
        let mut p = pair("edge", Duration::from_secs(10), Duration::from_secs(5));
        for len in [1, 8, MAX_PACKET] {
            let before = p.stats();
            let packet: Vec<u8> = (0..len as u8).collect();
            p.send(&packet);
            assert_eq!(p.receive(1), [packet], "{len} bytes");
            let after = p.stats();
            assert_eq!(after.mailbox - before.mailbox, 1, "{len} bytes: {after:?}");
            assert_eq!(
                after.read_req - before.read_req,
                0,
                "{len} bytes: {after:?}"
            );
        }
        let before = p.stats();
        let packet = vec![7u8; MAX_PACKET + 1];
        p.send(&packet);
        assert_eq!(p.receive(1), [packet]);
        let after = p.stats();
        assert!(
            after.read_req > before.read_req,
            "pulled by RDMA: {after:?}"
        );
        let st = p.a.inner().exanet().unwrap().stats();
        assert_eq!(st.bulk_sent, 1, "{st:?}");
    }

    /// Messages and acknowledgements dropped, corrupted and NACKed while 300 PIO packets
    /// go from a to b: each is delivered exactly once, and the copies that resends
    /// after lost acknowledgements produced were discarded.
    #[test]
    fn under_faults_no_pio_packet_is_lost_or_duplicated() {
        let mut p = pair(
            "faults",
            Duration::from_secs(20),
            Duration::from_millis(100),
        );
        let (n0, n1) = (node_coord(0), node_coord(1));
        let mut sent = HashSet::new();
        // One kind of fault per round of 50 packets: lost acknowledgements (the
        // message arrived: its resend is a copy), corrupted acknowledgements, lost
        // messages, refusals (ring full, PDID mismatch, unreachable).
        for round in 0..6u32 {
            let faults = p.emu.as_ref().unwrap().faults();
            match round {
                0 => faults.drop_frames(n1, 3),
                1 => faults.corrupt_frames(n1, 2),
                2 => faults.drop_frames(n0, 3),
                3 => faults.force_nack(n1, Some(1), exanet::regs::nack::RING_FULL, 5),
                4 => faults.force_nack(n1, Some(1), exanet::regs::nack::PDID_MISMATCH, 2),
                _ => faults.force_nack(n1, Some(1), exanet::regs::nack::UNREACHABLE, 2),
            }
            for i in 0..50u32 {
                let packet = (round * 1000 + i).to_le_bytes();
                sent.insert(packet.to_vec());
                p.send(&packet);
            }
        }
        let got = p.receive(300);
        // Late copies would come within an ack timeout or two: look a little longer.
        let extra = p.receive_for(usize::MAX, Duration::from_millis(400));
        assert!(p.a.next_event().is_none(), "nothing given up");
        assert_eq!(got.len(), 300, "all delivered");
        assert!(extra.is_empty(), "duplicates delivered: {extra:?}");
        let unique: HashSet<Vec<u8>> = got.into_iter().collect();
        assert_eq!(unique, sent, "each once");
        let link = p.b.inner().exanet().unwrap();
        assert!(link.pio_duplicates() >= 5, "acks were lost, so copies came");
        let st = p.stats();
        assert!(st.dropped >= 6 && st.corrupted >= 2, "{st:?}");
    }

    /// A receiver that takes its packets slowly keeps its mailbox full: the sender's
    /// messages are refused (`RING_FULL`) and wait in its resend queue, backing off up to
    /// 10 ms, while its later messages take the places the receiver frees, so some fall
    /// more than the receiver's window of 1,024 numbers behind (as the requests of 4 PEs
    /// updating one service in `osb_gups` did). Each packet is still delivered exactly
    /// once; before the receiver remembered the numbers its window left behind, those
    /// were dropped as copies.
    #[test]
    fn a_slow_receiver_gets_every_pio_packet_once_however_far_behind_a_refused_one_falls() {
        let mut p = pair("slow", Duration::from_secs(120), Duration::from_secs(5));
        // 20,000 packets, and more (up to 80,000) until one came from behind the window.
        let mut total = 20_000u32;
        let to_b = p.to_b;
        let (mut next, mut copies) = (0u32, 0u32);
        let mut got = HashSet::new();
        let (start, mut heard) = (Instant::now(), Instant::now());
        // Until all arrived, or nothing arrived for 10 s (a resend backs off 10 ms at most).
        while got.len() < total as usize && heard.elapsed() < Duration::from_secs(10) {
            if next == total && total < 80_000 && p.b.inner().exanet().unwrap().pio_late() == 0 {
                total += 20_000;
            }
            while next < total {
                let packet = next.to_le_bytes();
                match p.a.send(to_b, 4, |b| b.copy_from_slice(&packet)) {
                    Ok(()) => next += 1,
                    Err(TransportError::WouldBlock) => break,
                    Err(e) => panic!("send {next}: {e:?}"),
                }
            }
            let now = monotonic_ns();
            p.a.poll(now).unwrap();
            p.a.flush().unwrap();
            p.b.poll(now).unwrap();
            // One packet per 100 us at most: the receiver falls behind and its mailbox
            // fills.
            if let Some(d) = p.b.recv(|_, d| d.to_vec()).unwrap() {
                copies += u32::from(!got.insert(d));
                heard = Instant::now();
            }
            let t = Instant::now();
            while t.elapsed() < Duration::from_micros(100) {
                std::hint::spin_loop();
            }
        }
        let link = p.b.inner().exanet().unwrap();
        let (late, duplicates) = (link.pio_late(), link.pio_duplicates());
        let sender = p.a.inner().exanet().unwrap().stats();
        eprintln!(
            "{} of {total} delivered in {:.1} s; {late} from behind the window; {duplicates} copies dropped; sender: {sender:?}; emulator: {:?}",
            got.len(),
            start.elapsed().as_secs_f64(),
            p.stats()
        );
        assert!(p.a.next_event().is_none(), "nothing given up");
        assert_eq!(copies, 0, "nothing delivered twice");
        assert_eq!(got.len(), total as usize, "every packet delivered");
        // Whether a refused packet falls more than a window behind depends on the
        // scheduler: on a quiet machine it does within 20,000-60,000 packets; with more
        // runnable threads than cores it may not within 80,000. Then only exactly-once
        // delivery was checked here, and it says so loudly; the pio unit tests cover the
        // case deterministically.
        if late == 0 {
            eprintln!(
                "NOTE: a_slow_receiver_gets_every_pio_packet_once...: no packet came from \
                 behind the window in this run (a loaded machine?): only exactly-once \
                 delivery was checked; gsas-transport's pio unit tests cover the late case"
            );
        }
    }

    /// A peer that does not answer: the PIO message is resent until the deadline, then
    /// the peer is reported unreachable and later sends to it fail.
    #[test]
    fn an_unreachable_peer_is_reported_at_the_deadline() {
        let deadline = Duration::from_millis(600);
        let mut p = pair("dead", deadline, Duration::from_millis(100));
        let faults = p.emu.as_ref().unwrap().faults();
        faults.set_unreachable(node_coord(1), true);
        let start = Instant::now();
        p.send(b"hello");
        let to_b = p.to_b;
        let ev = loop {
            p.a.poll(monotonic_ns()).unwrap();
            if let Some(ev) = p.a.next_event() {
                break ev;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "no event");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(ev, PeerEvent::Unreachable(to_b));
        assert!(start.elapsed() >= deadline, "{:?}", start.elapsed());
        assert_eq!(
            p.a.send(to_b, 5, |b| b.copy_from_slice(b"again")),
            Err(TransportError::Unreachable)
        );
        assert!(matches!(p.a.inner().local_addr(), NetAddr::Exanet(_)));
    }
}
