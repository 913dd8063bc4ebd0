//! The ring driver against the in-process NI model: rings, wraparound, NACK retry, RDMA
//! ordering, notifications, faults and the interrupt loop.

use std::time::{Duration, Instant};

use exanet::nva::{MemSegment, Nva, Registrar};
use exanet::regs::{class, irq, nack, rdma_status, rdmad};
use exanet::{Dest, DriverConfig, Endpoint, Event, RdmaDesc, RdmaOp, SendError};
use exanet_emu::Model;
use exanet_emu::model::{ModelConfig, ModelFabric};

fn fabric() -> ModelFabric {
    ModelFabric::new(ModelConfig {
        nodes: 4,
        eps: 2,
        pdid: 7,
        ack_timeout_ns: 1_000_000,
    })
}

fn open(f: &ModelFabric, node: usize, ep: usize) -> Endpoint<Model> {
    let cfg = DriverConfig {
        backoff_min: Duration::from_micros(1),
        backoff_max: Duration::from_micros(50),
        ..DriverConfig::default()
    };
    Endpoint::open(f.endpoint(node, ep), cfg).unwrap()
}

/// Runs `progress` until `done` or 10 s (real time: backoffs are real time).
fn until(ep: &mut Endpoint<Model>, mut done: impl FnMut(&mut Endpoint<Model>) -> bool) {
    let start = Instant::now();
    while !done(ep) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "condition not reached within 10 s"
        );
        ep.progress();
        std::thread::sleep(Duration::from_micros(20));
    }
}

fn rdma(
    op: RdmaOp,
    flags: u8,
    len: u32,
    local: Nva,
    remote: Nva,
    dest: Dest,
    cookie: u32,
) -> RdmaDesc {
    RdmaDesc {
        op,
        flags,
        len,
        local,
        remote,
        dest,
        cookie,
    }
}

#[test]
fn identity_and_sender_id() {
    let f = fabric();
    let ep = open(&f, 1, 1);
    let info = ep.info();
    assert_eq!((info.coord, info.ep, info.pdid), (0x1000, 1, 7));
    assert_eq!(info.sender_id(), 7 << 32 | 0x1000 << 10 | 1);
}

#[test]
fn send_recv_both_ways_with_ring_wraparound() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let mut b = open(&f, 2, 1);
    // 200 messages each way: the 16-slot TX ring and the 64-slot RX ring wrap several times.
    for i in 0..200u32 {
        let len = (i % 64 + 1) as usize;
        let msg: Vec<u8> = (0..len).map(|k| (i as usize + k) as u8).collect();
        a.try_send(b.info().dest(), &msg, i as u16).unwrap();
        b.try_send(a.info().dest(), &msg, 0).unwrap();
        let got = b.recv().unwrap();
        assert_eq!(got.data(), &msg[..]);
        assert_eq!(got.src(), a.info().dest());
        assert_eq!(got.class(), class::USER);
        assert_eq!(a.recv().unwrap().data(), &msg[..]);
        a.progress();
        b.progress();
    }
    assert!(b.recv().is_none());
    assert_eq!(a.stats().acked, 200);
    assert_eq!(a.tx_pending(), 0);
}

#[test]
fn bad_lengths_and_destinations_are_refused() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    assert_eq!(
        a.try_send(Dest { coord: 0, ep: 1 }, &[], 0),
        Err(SendError::BadLength(0))
    );
    assert_eq!(
        a.try_send(Dest { coord: 0, ep: 1 }, &[0; 65], 0),
        Err(SendError::BadLength(65))
    );
    let bad = Dest {
        coord: 1 << 22,
        ep: 0,
    };
    assert_eq!(a.try_send(bad, &[1], 0), Err(SendError::BadDest(bad)));
}

#[test]
fn step_mode_delivers_one_packet_per_step() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let mut b = open(&f, 1, 0);
    f.set_step_mode(true);
    a.try_send(b.info().dest(), b"x", 0).unwrap();
    assert!(b.recv().is_none(), "nothing moves before a step");
    assert!(f.step(), "poll pass fetches the descriptor");
    assert_eq!(f.queued(), 1);
    assert!(f.step(), "delivers the message, queues the ack");
    assert_eq!(b.recv().unwrap().data(), b"x");
    assert_eq!(a.progress(), 0, "no ack delivered yet");
    assert!(f.step());
    assert_eq!(a.progress(), 1);
    assert_eq!(a.stats().acked, 1);
}

#[test]
fn full_tx_ring_would_block_until_acks_are_reaped() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let dest = open(&f, 1, 0).info().dest();
    f.set_step_mode(true);
    for i in 0..16 {
        a.try_send(dest, &[i], 0).unwrap();
    }
    assert_eq!(a.try_send(dest, &[99], 0), Err(SendError::WouldBlock));
    f.set_step_mode(false);
    f.settle();
    a.try_send(dest, &[99], 0).unwrap();
}

#[test]
fn forced_nack_is_retried_with_backoff_and_nothing_is_lost() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let mut b = open(&f, 3, 1);
    f.faults()
        .force_nack(b.info().coord, Some(1), nack::RING_FULL, 3);
    a.try_send(b.info().dest(), b"persistent", 0).unwrap();
    a.try_send(b.info().dest(), b"second", 0).unwrap();
    until(&mut a, |a| a.tx_pending() == 0);
    let mut got = Vec::new();
    while let Some(m) = b.recv() {
        got.push(m.data().to_vec());
    }
    got.sort();
    assert_eq!(got, vec![b"persistent".to_vec(), b"second".to_vec()]);
    assert_eq!(a.stats().nacked, 3);
    assert_eq!(a.stats().resent, 3);
    assert!(a.take_failure().is_none());
}

#[test]
fn real_ring_full_nacks_until_the_receiver_drains() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let mut b = open(&f, 1, 0);
    for i in 0..64u8 {
        a.send_timeout(b.info().dest(), &[i], 0, Duration::from_secs(5))
            .unwrap();
    }
    a.try_send(b.info().dest(), &[64], 0).unwrap();
    a.progress();
    assert!(
        a.stats().nacked >= 1,
        "the 65th message is refused while the ring is full"
    );
    for i in 0..=64u8 {
        let deadline = Instant::now() + Duration::from_secs(10);
        let m = loop {
            if let Some(m) = b.recv() {
                break m;
            }
            assert!(Instant::now() < deadline);
            a.progress();
        };
        assert_eq!(m.data(), &[i]);
    }
    until(&mut a, |a| a.tx_pending() == 0);
    assert!(a.take_failure().is_none());
}

#[test]
fn permanent_nacks_and_exhausted_retries_are_reported_with_the_destination() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let b = open(&f, 2, 0);
    f.set_pdid(2, 0, 99);
    a.try_send(b.info().dest(), b"no", 5).unwrap();
    until(&mut a, |a| a.tx_pending() == 0);
    let fail = a.take_failure().unwrap();
    assert_eq!(
        (fail.dest, fail.reason, fail.attempts, fail.tag),
        (b.info().dest(), nack::PDID_MISMATCH, 1, 5)
    );
    assert!(fail.to_string().contains("node 0x002000 ep 0"), "{fail}");

    f.set_pdid(2, 0, 7);
    f.faults().force_nack(0x2000, None, nack::RING_FULL, 1000);
    a.try_send(b.info().dest(), b"busy", 6).unwrap();
    until(&mut a, |a| a.tx_pending() == 0);
    let fail = a.take_failure().unwrap();
    assert_eq!(
        (fail.reason, fail.attempts),
        (nack::RING_FULL, DriverConfig::default().max_attempts)
    );

    a.try_send(
        Dest {
            coord: 0x2000,
            ep: 9,
        },
        b"nobody",
        0,
    )
    .unwrap();
    until(&mut a, |a| a.tx_pending() == 0);
    assert_eq!(a.take_failure().unwrap().reason, nack::NO_SUCH_EP);
}

#[test]
fn unreachable_node_times_out_in_virtual_time() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    f.faults().set_unreachable(0x3000, true);
    a.try_send(
        Dest {
            coord: 0x3000,
            ep: 0,
        },
        b"hello?",
        1,
    )
    .unwrap();
    a.progress();
    assert_eq!(a.tx_pending(), 1, "no answer yet");
    f.advance(Duration::from_millis(2));
    a.progress();
    let fail = a.take_failure().unwrap();
    assert_eq!(fail.reason, nack::UNREACHABLE);
    assert!(
        fail.to_string().contains("node 0x003000 ep 0") && fail.to_string().contains("unreachable"),
        "{fail}"
    );
}

struct Mem {
    seg: MemSegment,
    nva: Nva,
}

fn mem(f: &ModelFabric, node: usize, ep: u16, len: usize) -> Mem {
    let seg = MemSegment::create("model-test", len).unwrap();
    let nva = f.registrar(node, ep).register(&seg).unwrap();
    Mem { seg, nva }
}

#[test]
fn rdma_write_read_complete_in_order_and_channel_ring_wraps() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let b = open(&f, 1, 1);
    let la = mem(&f, 0, 0, 1 << 16);
    let rb = mem(&f, 1, 1, 1 << 17);
    let pattern: Vec<u8> = (0..1 << 16).map(|i: u32| (i * 7 + 3) as u8).collect();
    la.seg.write(0, &pattern).unwrap();
    f.set_step_mode(true);
    let mut posted = Vec::new();
    // 40 descriptors of growing size on one channel (wraps the 16-deep ring), in batches.
    let mut next = 0u32;
    let mut completions = Vec::new();
    while completions.len() < 40 {
        while next < 40 && a.rdma_outstanding(2) < 16 {
            let len = 1 + next * 997;
            let d = rdma(
                RdmaOp::Write,
                0,
                len,
                la.nva,
                rb.nva.add(u64::from(next) * 1024),
                b.info().dest(),
                next,
            );
            posted.push(a.rdma_post(2, &d).unwrap());
            next += 1;
        }
        assert!(f.step() || f.queued() == 0);
        for _ in 0..7 {
            f.step();
        }
        a.rdma_poll(2, |c| completions.push(c));
    }
    let indices: Vec<u32> = completions.iter().map(|c| c.index).collect();
    assert_eq!(indices, posted, "records appear in posting order");
    for (k, c) in completions.iter().enumerate() {
        assert_eq!(
            (c.status, c.cookie, c.bytes, c.channel),
            (rdma_status::OK, k as u32, 1 + k as u32 * 997, 2)
        );
    }
    f.set_step_mode(false);
    // The last write (index 39) is intact at its offset.
    let mut out = vec![0u8; 1 + 39 * 997];
    rb.seg.read(39 * 1024, &mut out).unwrap();
    assert_eq!(out, pattern[..out.len()]);
    // Read it back into another local place.
    let d = rdma(
        RdmaOp::Read,
        rdmad::FENCE,
        5000,
        la.nva.add(40_000),
        rb.nva.add(39 * 1024),
        b.info().dest(),
        77,
    );
    a.rdma_post(0, &d).unwrap();
    let mut rec = None;
    a.rdma_poll(0, |c| rec = Some(c));
    assert_eq!(rec.unwrap().status, rdma_status::OK);
    let mut back = vec![0u8; 5000];
    la.seg.read(40_000, &mut back).unwrap();
    assert_eq!(back, pattern[..5000]);
}

#[test]
fn rdma_faults_are_reported_per_descriptor_and_the_channel_continues() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let b = open(&f, 1, 0);
    let la = mem(&f, 0, 0, 4096);
    let rb = mem(&f, 1, 0, 4096);
    let dest = b.info().dest();
    let posts = [
        rdma(RdmaOp::Write, 0, 100, la.nva, rb.nva.add(4000), dest, 1), // runs past the region
        rdma(RdmaOp::Write, 0, 100, Nva::new(9, 0), rb.nva, dest, 2),   // unregistered local
        rdma(RdmaOp::Write, 0, 100, la.nva, rb.nva, dest, 3),           // forced remote fault
        rdma(
            RdmaOp::Write,
            rdmad::NOTIFY_REMOTE,
            100,
            la.nva,
            rb.nva,
            dest,
            4,
        ), // fine
        rdma(
            RdmaOp::Read,
            rdmad::NOTIFY_REMOTE,
            100,
            la.nva,
            rb.nva,
            dest,
            5,
        ), // bad: notify on read
        rdma(
            RdmaOp::Write,
            0,
            100,
            la.nva,
            rb.nva,
            Dest {
                coord: 0x2000,
                ep: 1,
            },
            6,
        ), // other PDID
    ];
    f.set_pdid(2, 1, 3);
    for d in &posts[..2] {
        a.rdma_post(1, d).unwrap();
    }
    f.faults().force_xlat_fault(0x1000, Some(0), 1);
    f.set_step_mode(true);
    for d in &posts[2..] {
        a.rdma_post(1, d).unwrap();
    }
    f.set_step_mode(false);
    f.settle();
    let mut got = Vec::new();
    a.rdma_poll(1, |c| got.push((c.cookie, c.status)));
    assert_eq!(
        got,
        vec![
            (1, rdma_status::REMOTE_XLAT_FAULT),
            (2, rdma_status::LOCAL_XLAT_FAULT),
            (3, rdma_status::REMOTE_XLAT_FAULT),
            (4, rdma_status::OK),
            (5, rdma_status::BAD_DESCRIPTOR),
            (6, rdma_status::REMOTE_PDID_MISMATCH),
        ]
    );
}

#[test]
fn notifications_local_and_remote_and_held_when_the_remote_ring_is_full() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let mut b = open(&f, 1, 0);
    let la = mem(&f, 0, 0, 4096);
    let rb = mem(&f, 1, 0, 4096);
    let d = rdma(
        RdmaOp::Write,
        rdmad::NOTIFY_REMOTE | rdmad::NOTIFY_LOCAL,
        64,
        la.nva,
        rb.nva.add(128),
        b.info().dest(),
        0xC0,
    );
    a.rdma_post(3, &d).unwrap();
    let local = a.recv().unwrap();
    assert_eq!(local.class(), class::RDMA_LOCAL_CMPL);
    let n = local.notification().unwrap();
    assert_eq!(
        (n.class, n.status, n.cookie, n.len, n.nva, n.peer, n.channel),
        (1, 0, 0xC0, 64, la.nva.0, b.info().dest(), 3)
    );
    let remote = b.recv().unwrap();
    assert_eq!(remote.class(), class::RDMA_REMOTE_NOTIFY);
    let n = remote.notification().unwrap();
    assert_eq!(
        (n.class, n.cookie, n.len, n.nva, n.peer),
        (2, 0xC0, 64, rb.nva.0 + 128, a.info().dest())
    );

    // Fill b's mailbox: the notification is held, the descriptor does not complete.
    for i in 0..64u8 {
        a.send_timeout(b.info().dest(), &[i], 0, Duration::from_secs(5))
            .unwrap();
    }
    until(&mut a, |a| a.tx_pending() == 0);
    a.rdma_poll(3, |_| {});
    let d = rdma(
        RdmaOp::Write,
        rdmad::NOTIFY_REMOTE,
        8,
        la.nva,
        rb.nva,
        b.info().dest(),
        0xD0,
    );
    a.rdma_post(3, &d).unwrap();
    f.advance(Duration::from_micros(500));
    assert_eq!(
        a.rdma_poll(3, |_| {}),
        0,
        "held while the remote ring is full"
    );
    for _ in 0..64 {
        assert_eq!(b.recv().unwrap().class(), class::USER);
    }
    f.advance(Duration::from_millis(2));
    let mut rec = None;
    assert_eq!(a.rdma_poll(3, |c| rec = Some(c)), 1);
    assert_eq!(rec.unwrap().status, rdma_status::OK);
    assert_eq!(b.recv().unwrap().notification().unwrap().cookie, 0xD0);
}

#[test]
fn irq_mode_loop_with_a_fake_line() {
    let f = fabric();
    let mut a = open(&f, 0, 0);
    let mut b = open(&f, 1, 0);
    let mut line = f.irq(1, 0);
    b.set_irq_enable(irq::MBOX | irq::TX_NACK | irq::RDMA);
    // Nothing pending: no interrupt.
    assert!(
        !b.service_irq(&mut line, Duration::from_millis(1), |_| panic!(
            "no event expected"
        ))
        .unwrap()
    );
    a.try_send(b.info().dest(), b"one", 0).unwrap();
    a.try_send(b.info().dest(), b"two", 0).unwrap();
    let mut got = Vec::new();
    assert!(
        b.service_irq(&mut line, Duration::from_millis(1), |e| {
            if let Event::Message(m) = e {
                got.push(m.data().to_vec())
            }
        })
        .unwrap()
    );
    assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()]);
    // Drained: the level is low, no interrupt.
    assert!(
        !b.service_irq(&mut line, Duration::from_millis(1), |_| panic!(
            "no event expected"
        ))
        .unwrap()
    );

    // An RDMA completion with the IRQ flag, and a NACK, raise it too.
    let lb = mem(&f, 1, 0, 4096);
    let ra = mem(&f, 0, 0, 4096);
    let d = rdma(
        RdmaOp::Read,
        rdmad::IRQ,
        32,
        lb.nva,
        ra.nva,
        a.info().dest(),
        9,
    );
    b.rdma_post(0, &d).unwrap();
    f.set_pdid(0, 0, 1);
    b.try_send(a.info().dest(), b"refused", 3).unwrap();
    let mut events = Vec::new();
    while b
        .service_irq(&mut line, Duration::from_millis(1), |e| {
            events.push(format!("{e:?}"))
        })
        .unwrap()
    {}
    assert!(
        events
            .iter()
            .any(|e| e.contains("Rdma") && e.contains("cookie: 9")),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e.contains("TxFailure")), "{events:?}");
    assert!(line_count(&mut line) >= 2);
}

fn line_count(line: &mut impl uio_driver::IrqSource) -> u32 {
    line.count().unwrap()
}
