//! The ring driver against the real `exanet-emu` process (4 emulated nodes): packets both
//! ways, RDMA between nodes, fault injection through the control socket, interrupts.

mod common;

use std::time::{Duration, Instant};

use common::{EmuProc, wait_for};
use exanet::nva::{MemSegment, Nva, Registrar};
use exanet::regs::{class, irq, nack, rdma_status, rdmad};
use exanet::{Dest, DriverConfig, Endpoint, Event, RdmaCompletion, RdmaDesc, RdmaOp, Shm};
use exanet_emu::emu::EmuStats;

const LONG: Duration = Duration::from_secs(30);

fn open(emu: &EmuProc, node: usize, ep: usize) -> Endpoint<Shm> {
    Endpoint::open(
        emu.paths.open_shm(node, ep).unwrap(),
        DriverConfig::default(),
    )
    .unwrap()
}

fn recv(ep: &mut Endpoint<Shm>) -> exanet::RxMessage {
    wait_for(LONG, "a message", || {
        ep.progress();
        ep.recv()
    })
}

fn rdma_one(ep: &mut Endpoint<Shm>, ch: usize, desc: RdmaDesc) -> RdmaCompletion {
    ep.rdma_post(ch, &desc).unwrap();
    wait_for(LONG, "an RDMA completion", || {
        let mut rec = None;
        ep.rdma_poll(ch, |c| rec = Some(c));
        rec
    })
}

#[test]
fn layout_sysfs_and_identity() {
    let emu = common::start("layout", 2, &[]);
    let topo = std::fs::read_to_string(emu.root().join("topology")).unwrap();
    assert!(topo.contains("node 3 coord 0x3000\n"), "{topo}");
    assert!(topo.contains("fabric sockets"), "{topo}");
    let dev = uio_driver::UioPaths::new(
        emu.root().join("node2/sys/class/uio"),
        emu.root().join("node2/dev"),
    )
    .find("exanet-ep1")
    .unwrap();
    assert_eq!(dev.maps().len(), 4);
    assert_eq!(dev.map(1).unwrap().size, 0x2000);
    assert_eq!(dev.map(3).unwrap().name.as_deref(), Some("rdma"));
    let ep = open(&emu, 2, 1);
    assert_eq!(
        (ep.info().coord, ep.info().ep, ep.info().pdid),
        (0x2000, 1, 1)
    );
    assert_eq!(emu.paths.control("ping").unwrap(), "pong");
    assert!(
        emu.paths
            .control("nack 7 0 1")
            .unwrap_err()
            .to_string()
            .contains("no node 7")
    );
}

#[test]
fn packets_both_ways_between_nodes() {
    let emu = common::start("packets", 2, &[]);
    let mut a = open(&emu, 0, 0);
    let mut b = open(&emu, 3, 1);
    for round in 0..100u32 {
        let msg: Vec<u8> = (0..(round % 64 + 1)).map(|i| (i + round) as u8).collect();
        a.send_timeout(b.info().dest(), &msg, 0, LONG).unwrap();
        let got = recv(&mut b);
        assert_eq!(
            (got.data(), got.src(), got.class()),
            (&msg[..], a.info().dest(), class::USER)
        );
        b.send_timeout(a.info().dest(), &msg, 0, LONG).unwrap();
        assert_eq!(recv(&mut a).data(), &msg[..]);
    }
    assert!(a.wait_tx_idle(LONG) && b.wait_tx_idle(LONG));
    assert_eq!(a.stats().acked, 100);
    assert!(a.take_failure().is_none());
}

struct Mem {
    seg: MemSegment,
    nva: Nva,
    _reg: exanet::nva::EmuRegistrar,
}

fn mem(emu: &EmuProc, node: usize, ep: usize, len: usize) -> Mem {
    let seg = MemSegment::create("emu-test", len).unwrap();
    let mut reg = emu.paths.registrar(node, ep).unwrap();
    let nva = reg.register(&seg).unwrap();
    Mem {
        seg,
        nva,
        _reg: reg,
    }
}

fn desc(
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
fn rdma_write_and_read_between_nodes() {
    let emu = common::start("rdma", 2, &[]);
    let mut a = open(&emu, 1, 0);
    let mut b = open(&emu, 2, 1);
    let la = mem(&emu, 1, 0, 1 << 20);
    let rb = mem(&emu, 2, 1, 1 << 20);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    la.seg.write(0, &data).unwrap();
    let rec = rdma_one(
        &mut a,
        1,
        desc(
            RdmaOp::Write,
            rdmad::NOTIFY_REMOTE,
            300_000,
            la.nva,
            rb.nva.add(4096),
            b.info().dest(),
            11,
        ),
    );
    assert_eq!(
        (rec.status, rec.bytes, rec.cookie),
        (rdma_status::OK, 300_000, 11)
    );
    let mut out = vec![0u8; 300_000];
    rb.seg.read(4096, &mut out).unwrap();
    assert!(out == data, "remote bytes differ");
    let note = recv(&mut b);
    assert_eq!(note.class(), class::RDMA_REMOTE_NOTIFY);
    let n = note.notification().unwrap();
    assert_eq!(
        (n.cookie, n.len, n.nva, n.peer),
        (11, 300_000, rb.nva.0 + 4096, a.info().dest())
    );
    // Read it back from the other side into a fresh place.
    let rec = rdma_one(
        &mut b,
        0,
        desc(
            RdmaOp::Read,
            0,
            100_000,
            rb.nva.add(600_000),
            la.nva.add(1000),
            a.info().dest(),
            12,
        ),
    );
    assert_eq!((rec.status, rec.bytes), (rdma_status::OK, 100_000));
    let mut back = vec![0u8; 100_000];
    rb.seg.read(600_000, &mut back).unwrap();
    assert!(back[..] == data[1000..101_000]);
    // Several descriptors on one channel complete in order.
    for k in 0..5u32 {
        a.rdma_post(
            3,
            &desc(
                RdmaOp::Write,
                0,
                1000 * (5 - k),
                la.nva,
                rb.nva,
                b.info().dest(),
                k,
            ),
        )
        .unwrap();
    }
    let mut cookies = Vec::new();
    wait_for(LONG, "five completions", || {
        a.rdma_poll(3, |c| cookies.push((c.cookie, c.status)));
        (cookies.len() == 5).then_some(())
    });
    assert_eq!(
        cookies,
        (0..5).map(|k| (k, rdma_status::OK)).collect::<Vec<_>>()
    );
}

#[test]
fn forced_nack_and_ring_full_lose_nothing() {
    let emu = common::start("nack", 2, &[]);
    let mut a = open(&emu, 0, 0);
    let mut b = open(&emu, 1, 0);
    emu.paths.control("nack 1 0 5 ring-full").unwrap();
    for i in 0..10u8 {
        a.send_timeout(b.info().dest(), &[i], 0, LONG).unwrap();
    }
    // 150 more; the receiver drains only once the full 64-slot ring made the NI NACK
    // (beyond the 5 forced ones) and the driver retry.
    let mut got = Vec::new();
    let mut next = 10u8;
    let start = Instant::now();
    while got.len() < 160 {
        assert!(
            start.elapsed() < LONG,
            "only {} of 160 messages arrived",
            got.len()
        );
        while next < 160 && a.try_send(b.info().dest(), &[next], 0).is_ok() {
            next += 1;
        }
        a.progress();
        if a.stats().nacked > 5 || next == 160 {
            while let Some(m) = b.recv() {
                got.push(m.data()[0]);
            }
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    got.sort_unstable();
    assert_eq!(got, (0..160).collect::<Vec<u8>>());
    assert!(a.wait_tx_idle(LONG));
    assert!(a.stats().nacked > 5, "the ring filled up: {:?}", a.stats());
    assert!(a.take_failure().is_none());
}

/// Waits until the emulator's counters satisfy `ok`.
fn wait_stats(emu: &EmuProc, what: &str, ok: impl Fn(&EmuStats) -> bool) -> EmuStats {
    wait_for(LONG, what, || {
        let s = EmuStats::parse(&emu.paths.control("stats").unwrap()).unwrap();
        ok(&s).then_some(s)
    })
}

#[test]
fn dropped_and_corrupted_frames_are_lost_on_the_socket_links_and_reported() {
    let emu = common::start("lossy", 1, &["--ack-timeout-ms", "200"]);
    let mut a = open(&emu, 0, 0);
    let mut b = open(&emu, 1, 0);
    let to_b = b.info().dest();
    let expect_failure = |a: &mut Endpoint<Shm>| {
        let f = wait_for(LONG, "the failure report", || {
            a.progress();
            a.take_failure()
        });
        assert_eq!((f.dest, f.reason), (to_b, nack::UNREACHABLE), "{f}");
    };
    // A dropped message: never delivered, reported by the sender's NI after its timeout.
    emu.paths.control("drop 0 1").unwrap();
    a.try_send(to_b, b"lost", 0).unwrap();
    expect_failure(&mut a);
    assert!(b.recv().is_none(), "a dropped frame was delivered");
    // A corrupted message: the receiving link's checksum discards it.
    emu.paths.control("corrupt 0 1").unwrap();
    a.try_send(to_b, b"damaged", 0).unwrap();
    expect_failure(&mut a);
    assert!(b.recv().is_none(), "a corrupted frame was delivered");
    // A corrupted ack: the message arrives, yet the sender cannot know (the layer above
    // must resend and discard the duplicate).
    emu.paths.control("corrupt 1 1").unwrap();
    a.try_send(to_b, b"arrived", 0).unwrap();
    assert_eq!(recv(&mut b).data(), b"arrived");
    expect_failure(&mut a);
    let s = wait_stats(&emu, "the loss counters", |s| {
        s.dropped == 1 && s.corrupted == 2
    });
    assert!(s.frames >= 4, "{s}");
    // The links work as before once the rules are used up.
    a.send_timeout(to_b, b"intact", 0, LONG).unwrap();
    assert_eq!(recv(&mut b).data(), b"intact");
    assert!(a.take_failure().is_none());
    let faults = emu.paths.control("faults").unwrap();
    assert!(faults.contains("drop=[] corrupt=[]"), "{faults}");
}

#[test]
fn the_in_process_fabric_carries_the_same_traffic() {
    let emu = common::start("inproc", 1, &["--fabric", "in-process"]);
    let topo = std::fs::read_to_string(emu.root().join("topology")).unwrap();
    assert!(topo.contains("fabric in-process"), "{topo}");
    let mut a = open(&emu, 0, 0);
    let mut b = open(&emu, 3, 0);
    // 100 messages into a 64-slot ring: the NACKed ones are resent, possibly out of order.
    for i in 0..100u8 {
        a.send_timeout(b.info().dest(), &[i; 40], 0, LONG).unwrap();
    }
    let mut got: Vec<Vec<u8>> = Vec::new();
    let start = Instant::now();
    while got.len() < 100 {
        assert!(start.elapsed() < LONG, "only {} of 100 arrived", got.len());
        a.progress();
        while let Some(m) = b.recv() {
            got.push(m.data().to_vec());
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    got.sort();
    assert_eq!(got, (0..100u8).map(|i| vec![i; 40]).collect::<Vec<_>>());
    emu.paths.control("drop * 1").unwrap();
    emu.paths.control("corrupt 0 1").unwrap();
    assert!(a.try_send(b.info().dest(), b"x", 0).is_ok());
    assert!(a.try_send(b.info().dest(), b"y", 0).is_ok());
    wait_stats(&emu, "one drop and one corruption", |s| {
        s.dropped == 1 && s.corrupted == 1
    });
}

#[test]
fn unreachable_node_is_reported_in_bounded_time_naming_the_node() {
    let emu = common::start("unreach", 1, &["--ack-timeout-ms", "200"]);
    let mut a = open(&emu, 0, 0);
    let la = mem(&emu, 0, 0, 4096);
    emu.paths.control("unreachable 3 on").unwrap();
    let start = Instant::now();
    a.send_timeout(
        Dest {
            coord: 0x3000,
            ep: 0,
        },
        b"anyone?",
        9,
        LONG,
    )
    .unwrap();
    let fail = wait_for(LONG, "the failure", || {
        a.progress();
        a.take_failure()
    });
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(
        (fail.reason, fail.tag, fail.dest),
        (
            nack::UNREACHABLE,
            9,
            Dest {
                coord: 0x3000,
                ep: 0
            }
        )
    );
    assert!(fail.to_string().contains("node 0x003000 ep 0"), "{fail}");
    let rec = rdma_one(
        &mut a,
        0,
        desc(
            RdmaOp::Write,
            0,
            64,
            la.nva,
            Nva::new(0, 0),
            Dest {
                coord: 0x3000,
                ep: 0,
            },
            1,
        ),
    );
    assert_eq!(rec.status, rdma_status::UNREACHABLE);
    // Reachable again: traffic flows.
    emu.paths.control("unreachable 3 off").unwrap();
    let mut d = open(&emu, 3, 0);
    a.send_timeout(d.info().dest(), b"back", 0, LONG).unwrap();
    assert_eq!(recv(&mut d).data(), b"back");
}

#[test]
fn translation_faults_and_pdid_mismatch_are_reported() {
    let emu = common::start("xlat", 2, &[]);
    let mut a = open(&emu, 0, 1);
    let b = open(&emu, 2, 0);
    let la = mem(&emu, 0, 1, 8192);
    let rb = mem(&emu, 2, 0, 8192);
    emu.paths.control("xlat 2 0 1").unwrap();
    let dest = b.info().dest();
    let rec = rdma_one(
        &mut a,
        0,
        desc(RdmaOp::Write, 0, 100, la.nva, rb.nva, dest, 1),
    );
    assert_eq!(rec.status, rdma_status::REMOTE_XLAT_FAULT);
    let rec = rdma_one(
        &mut a,
        0,
        desc(RdmaOp::Write, 0, 100, la.nva, rb.nva, dest, 2),
    );
    assert_eq!(rec.status, rdma_status::OK);
    let rec = rdma_one(
        &mut a,
        0,
        desc(RdmaOp::Read, 0, 100, la.nva, rb.nva.add(8150), dest, 3),
    );
    assert_eq!(rec.status, rdma_status::REMOTE_XLAT_FAULT);
    let rec = rdma_one(
        &mut a,
        0,
        desc(RdmaOp::Read, 0, 100, Nva::new(77, 0), rb.nva, dest, 4),
    );
    assert_eq!(rec.status, rdma_status::LOCAL_XLAT_FAULT);
    emu.paths.control("pdid 2 0 42").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let rec = rdma_one(
        &mut a,
        0,
        desc(RdmaOp::Write, 0, 100, la.nva, rb.nva, dest, 5),
    );
    assert_eq!(rec.status, rdma_status::REMOTE_PDID_MISMATCH);
    a.send_timeout(dest, b"x", 4, LONG).unwrap();
    let fail = wait_for(LONG, "the PDID failure", || {
        a.progress();
        a.take_failure()
    });
    assert_eq!((fail.reason, fail.dest), (nack::PDID_MISMATCH, dest));
}

#[test]
fn interrupt_mode_through_the_emulator_irq_socket() {
    let emu = common::start("irq", 2, &[]);
    let mut a = open(&emu, 0, 0);
    let mut b = open(&emu, 1, 1);
    let mut line = emu.paths.irq(1, 1).unwrap();
    b.set_irq_enable(irq::MBOX);
    assert!(
        !b.service_irq(&mut line, Duration::from_millis(20), |_| panic!(
            "nothing pending"
        ))
        .unwrap()
    );
    a.send_timeout(b.info().dest(), b"wake up", 0, LONG)
        .unwrap();
    let mut got = Vec::new();
    let start = Instant::now();
    while got.is_empty() {
        assert!(start.elapsed() < LONG);
        b.service_irq(&mut line, Duration::from_millis(100), |e| {
            if let Event::Message(m) = e {
                got.push(m.data().to_vec());
            }
        })
        .unwrap();
    }
    assert_eq!(got, vec![b"wake up".to_vec()]);
    assert!(uio_driver::IrqSource::count(&mut line).unwrap() >= 1);
}

/// A doorbell that finds the emulator dozing wakes it through the doze flag and the wake
/// socket (rather than waiting for its next timed wake-up): the wake-up count rises.
#[test]
fn a_doorbell_wakes_the_dozing_emulator() {
    let emu = common::start("wake", 1, &["--spin-us", "0"]);
    let mut a = open(&emu, 0, 0);
    let mut b = open(&emu, 1, 0);
    assert!(a.io().has_waker() && b.io().has_waker());
    let stats = || EmuStats::parse(&emu.paths.control("stats").unwrap()).unwrap();
    let mut woken = false;
    // A timed wake-up between seeing the doze and ringing the doorbell makes a round
    // inconclusive; a few rounds settle it.
    for round in 0..20u8 {
        wait_for(LONG, "the emulator to doze", || {
            stats().dozing.then_some(())
        });
        let before = stats().wakeups;
        a.send_timeout(b.info().dest(), &[round], 0, LONG).unwrap();
        assert_eq!(recv(&mut b).data(), &[round]);
        if stats().wakeups > before {
            woken = true;
            break;
        }
    }
    assert!(woken, "no doorbell woke the dozing emulator: {}", stats());
    // The frame count is published at the end of the pass that delivered the message.
    let after = wait_for(LONG, "the frames to be counted", || {
        Some(stats()).filter(|s| s.frames >= 2)
    });
    assert!(after.dozes > 0, "{after}");
}

#[test]
fn sigterm_removes_the_root() {
    let mut emu = common::start("sigterm", 1, &[]);
    let root = emu.root().to_path_buf();
    assert!(root.join("node0/ep0/map0").exists());
    assert!(emu.terminate(), "clean exit on SIGTERM");
    assert!(!root.exists(), "root removed");
}
