//! The software verbs device through the `sideway` binding, between processes: each test
//! runs its roles as separate processes, each an emulated node (see `common`).
//!
//! `hardware_loopback` runs the same operations on a real HCA: ignored, and selected with
//! `GSAS_VERBS_TEST_DEVICE=<device> cargo test -p verbs-emu --test softverbs -- --ignored`.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::completion::{WorkCompletionOperationType as Op, WorkCompletionStatus as St};
use sideway::ibverbs::queue_pair::{
    QueuePair, QueuePairState, SetScatterGatherEntry, WorkRequestFlags,
};
use verbs_emu::var;

const RUN: Duration = Duration::from_secs(120);

fn unexpected(r: &str) -> ! {
    panic!("unknown role {r}")
}

/// The data path: a multi-fragment WRITE, an inline WRITE, WRITE with immediate, SEND/RECV,
/// and READs, one of which reads back what an earlier WRITE of the same QP wrote.
#[test]
fn write_read_send() {
    match role().as_deref() {
        None => run_roles(
            "write_read_send",
            vec![
                // A two-port device whose second port is up, with two GIDs; the target
                // addresses with the second.
                Role::new("target", 1)
                    .with(var::PORT, "2")
                    .with(var::GID, "fe80::1,::ffff:127.0.0.1")
                    .with(GID_INDEX, "1"),
                Role::new("initiator", 2),
            ],
            RUN,
        ),
        Some("target") => rma_target(),
        Some("initiator") => rma_initiator(),
        Some(r) => unexpected(r),
    }
}

const BIG: usize = 100_000; // four fragments of the device
const IMM: u32 = 0x1234_5678;

fn rma_target() {
    let mut buf = Buf::new(256 * 1024);
    let rbuf = Buf::new(4096);
    buf.bytes_mut()[100_000..150_000].copy_from_slice(&pattern(7, 50_000));
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, all_access());
    let rmr = register(&pd, &rbuf, AccessFlags::LocalWrite);
    let mut ep = new_ep(&ctx, &pd);
    assert_eq!((ep.port, ep.gid_index), (2, 1), "the first active port");
    let me = info(&ctx, &ep, Some(&mr), Some(&buf));
    assert_eq!(
        std::net::Ipv6Addr::from(me.gid).to_string(),
        "::ffff:127.0.0.1"
    );
    publish("target.ep", &me.encode());
    let peer = Info::decode(&fetch("initiator.ep"));
    connect(&mut ep, &peer, DEFAULT);
    post_recv(&mut ep, 1, &rmr, rbuf.addr(), 2048);
    post_recv(&mut ep, 2, &rmr, rbuf.addr() + 2048, 2048);
    barrier("target", &["initiator"], "connected");
    let wcs = wait_cq(&ep.cq, 2);
    assert_eq!(wcs[0].status, St::Success as u32, "{wcs:?}");
    assert_eq!(wcs[0].opcode, Op::ReceiveWithImmediate as u32, "{wcs:?}");
    assert_eq!((wcs[0].wr_id, wcs[0].imm, wcs[0].byte_len), (1, IMM, 4096));
    assert_eq!(wcs[1].status, St::Success as u32, "{wcs:?}");
    assert_eq!(wcs[1].opcode, Op::Receive as u32, "{wcs:?}");
    assert_eq!((wcs[1].wr_id, wcs[1].byte_len), (2, 1000));
    assert_eq!(&rbuf.bytes()[2048..3048], &pattern(3, 1000)[..]);
    barrier("target", &["initiator"], "done");
    let b = buf.bytes();
    assert!(b[..BIG] == pattern(1, BIG)[..], "the big WRITE landed");
    assert_eq!(
        &b[200_000..200_032],
        &pattern(2, 32)[..],
        "the inline WRITE landed"
    );
    assert!(
        b[150_000..154_096] == pattern(4, 4096)[..],
        "the WRITE with immediate landed"
    );
}

fn rma_initiator() {
    let mut buf = Buf::new(512 * 1024);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, AccessFlags::LocalWrite);
    let mut ep = new_ep(&ctx, &pd);
    publish("initiator.ep", &info(&ctx, &ep, None, None).encode());
    let peer = Info::decode(&fetch("target.ep"));
    connect(&mut ep, &peer, DEFAULT);
    let b = buf.bytes_mut();
    b[..BIG].copy_from_slice(&pattern(1, BIG));
    b[110_000..114_096].copy_from_slice(&pattern(4, 4096));
    b[120_000..121_000].copy_from_slice(&pattern(3, 1000));
    barrier("initiator", &["target"], "connected");
    let a = buf.addr();
    // Unsignaled big WRITE: it completes silently; the READ of the same bytes after it on
    // this QP must see it (the responder executes in order).
    // SAFETY: the work request's keys and addresses name memory registered on the
    // two endpoints, alive until its completion is polled below.
    post(&mut ep, 10, WorkRequestFlags::none(), |w| unsafe {
        w.setup_write(peer.rkey, peer.addr)
            .setup_sge(mr.lkey(), a, BIG as u32)
    });
    let mut inline = pattern(2, 32);
    write_inline(&mut ep, 11, &inline, &peer, 200_000);
    inline.fill(0); // the data was taken at post time
    // SAFETY: the work request's keys and addresses name memory registered on the
    // two endpoints, alive until its completion is polled below.
    post(&mut ep, 12, WorkRequestFlags::Signaled, |w| unsafe {
        w.setup_write_imm(peer.rkey, peer.addr + 150_000, IMM)
            .setup_sge(mr.lkey(), a + 110_000, 4096)
    });
    // SAFETY: the work request's keys and addresses name memory registered on the
    // two endpoints, alive until its completion is polled below.
    post(&mut ep, 13, WorkRequestFlags::Signaled, |w| unsafe {
        w.setup_send().setup_sge(mr.lkey(), a + 120_000, 1000)
    });
    read(&mut ep, 14, &mr, a + 200_000, 50_000, &peer, 100_000);
    read(&mut ep, 15, &mr, a + 300_000, BIG as u32, &peer, 0);
    let wcs = wait_cq(&ep.cq, 5);
    let got: Vec<(u64, u32, u32)> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    let ok = St::Success as u32;
    assert_eq!(
        got,
        vec![
            (11, ok, Op::Write as u32),
            (12, ok, Op::Write as u32),
            (13, ok, Op::Send as u32),
            (14, ok, Op::Read as u32),
            (15, ok, Op::Read as u32),
        ],
        "completions in posting order, unsignaled ones silent"
    );
    let b = buf.bytes();
    assert!(
        b[200_000..250_000] == pattern(7, 50_000)[..],
        "READ of the target's data"
    );
    assert!(
        b[300_000..300_000 + BIG] == pattern(1, BIG)[..],
        "READ after WRITE"
    );
    barrier("initiator", &["target"], "done");
}

/// NIC atomics from two initiators on one target word while the target's CPU adds to it:
/// every fetch-add happens once, the fetched values are distinct, compare-swap loops count
/// exactly.
#[test]
fn atomics_coherent_under_concurrency() {
    match role().as_deref() {
        None => run_roles(
            "atomics_coherent_under_concurrency",
            vec![
                Role::new("target", 1),
                Role::new("i0", 2),
                Role::new("i1", 3),
            ],
            RUN,
        ),
        Some("target") => atomics_target(),
        Some(r @ ("i0" | "i1")) => atomics_initiator(r),
        Some(r) => unexpected(r),
    }
}

const ADDS: u64 = 300;
const CPU_ADDS: u64 = 1000;
const CAS_INCS: u64 = 100;

fn atomics_target() {
    let buf = Buf::new(4096);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, all_access());
    let mut eps: Vec<Ep> = (0..2).map(|_| new_ep(&ctx, &pd)).collect();
    for (i, ep) in eps.iter().enumerate() {
        publish(
            &format!("target.ep{i}"),
            &info(&ctx, ep, Some(&mr), Some(&buf)).encode(),
        );
    }
    for (i, ep) in eps.iter_mut().enumerate() {
        let peer = Info::decode(&fetch(&format!("i{i}.ep")));
        connect(ep, &peer, DEFAULT);
    }
    barrier("target", &["i0", "i1"], "connected");
    // The CPU adds in the high half while the NICs add in the low half.
    for _ in 0..CPU_ADDS {
        buf.atomic(0).fetch_add(1 << 32, Ordering::SeqCst);
        std::thread::yield_now();
    }
    barrier("target", &["i0", "i1"], "done");
    assert_eq!(
        buf.atomic(0).load(Ordering::SeqCst),
        (CPU_ADDS << 32) + 2 * ADDS
    );
    assert_eq!(buf.atomic(8).load(Ordering::SeqCst), 2 * CAS_INCS);
    let mut low: Vec<u64> = ["i0", "i1"]
        .iter()
        .flat_map(|r| {
            fetch(&format!("{r}.fetched"))
                .split_whitespace()
                .map(|v| v.parse::<u64>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    low.sort_unstable();
    assert_eq!(
        low,
        (0..2 * ADDS).collect::<Vec<_>>(),
        "each fetch-add once"
    );
}

fn atomics_initiator(me: &str) {
    let idx = &me[1..];
    let buf = Buf::new(16 * 8 + 8);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, AccessFlags::LocalWrite);
    let mut ep = new_ep(&ctx, &pd);
    publish(&format!("{me}.ep"), &info(&ctx, &ep, None, None).encode());
    let peer = Info::decode(&fetch(&format!("target.ep{idx}")));
    connect(&mut ep, &peer, DEFAULT);
    barrier(me, &["target"], "connected");
    // Fetch-adds, 16 in flight, each into its own result slot.
    let mut fetched = Vec::new();
    let mut posted = 0u64;
    let mut done = 0u64;
    while done < ADDS {
        while posted < ADDS && posted - done < 16 {
            let slot = buf.addr() + (posted % 16) * 8;
            fetch_add(&mut ep, posted, &mr, slot, &peer, 0, 1);
            posted += 1;
        }
        for wc in wait_cq(&ep.cq, 1) {
            assert_eq!(wc.status, St::Success as u32, "{wc:?}");
            assert_eq!(wc.opcode, Op::FetchAndAdd as u32);
            let v = buf
                .atomic(((wc.wr_id % 16) * 8) as usize)
                .load(Ordering::SeqCst);
            fetched.push(v & 0xffff_ffff);
            done += 1;
        }
    }
    // Increment the second word by compare-swap loops.
    let res = buf.addr() + 16 * 8;
    let mut expect = 0u64;
    let mut incs = 0;
    while incs < CAS_INCS {
        compare_swap(&mut ep, 1000, &mr, res, &peer, 8, expect, expect + 1);
        let wc = wait_cq(&ep.cq, 1)[0];
        assert_eq!(
            (wc.status, wc.opcode),
            (St::Success as u32, Op::CompareAndSwap as u32)
        );
        let old = buf.atomic(16 * 8).load(Ordering::SeqCst);
        if old == expect {
            incs += 1;
            expect += 1;
        } else {
            expect = old;
        }
    }
    let text: Vec<String> = fetched.iter().map(u64::to_string).collect();
    publish(&format!("{me}.fetched"), &text.join(" "));
    barrier(me, &["target"], "done");
}

/// Remote access errors (bad key, out of bounds, missing rights, injected key fault), a
/// local protection error and RNR retry exhaustion: each fails the request with its status,
/// flushes what follows, and leaves both queue pairs in the error state; the target's
/// memory is untouched.
#[test]
fn access_errors_and_flush() {
    match role().as_deref() {
        None => run_roles(
            "access_errors_and_flush",
            vec![
                Role::new("target", 1).with(var::FAULTS, "rkey=1"),
                Role::new("initiator", 2),
            ],
            RUN,
        ),
        Some("target") => errors_target(),
        Some("initiator") => errors_initiator(),
        Some(r) => unexpected(r),
    }
}

const CASES: usize = 7;
/// Cases whose failure is the responder's (its QP enters the error state too).
const REMOTE_CASES: [usize; 5] = [0, 1, 2, 3, 4];

fn errors_target() {
    let rw = Buf::new(4096);
    let ro = Buf::new(4096);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let rw_mr = register(
        &pd,
        &rw,
        AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead,
    );
    let ro_mr = register(&pd, &ro, AccessFlags::RemoteRead);
    let mut eps: Vec<Ep> = (0..CASES).map(|_| new_ep(&ctx, &pd)).collect();
    for (i, ep) in eps.iter().enumerate() {
        let (mr, b) = if i == 3 { (&ro_mr, &ro) } else { (&rw_mr, &rw) };
        publish(
            &format!("target.ep{i}"),
            &info(&ctx, ep, Some(mr), Some(b)).encode(),
        );
    }
    for (i, ep) in eps.iter_mut().enumerate() {
        connect(
            ep,
            &Info::decode(&fetch(&format!("initiator.ep{i}"))),
            DEFAULT,
        );
    }
    barrier("target", &["initiator"], "connected");
    barrier("target", &["initiator"], "done");
    for i in REMOTE_CASES {
        assert_eq!(
            eps[i].qp.state(),
            QueuePairState::Error,
            "target QP of case {i}"
        );
    }
    assert!(rw.bytes().iter().all(|&b| b == 0), "no failed WRITE landed");
}

fn errors_initiator() {
    let buf = Buf::new(8192);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, AccessFlags::LocalWrite);
    let mut eps: Vec<Ep> = (0..CASES).map(|_| new_ep(&ctx, &pd)).collect();
    for (i, ep) in eps.iter().enumerate() {
        publish(
            &format!("initiator.ep{i}"),
            &info(&ctx, ep, None, None).encode(),
        );
    }
    let peers: Vec<Info> = (0..CASES)
        .map(|i| Info::decode(&fetch(&format!("target.ep{i}"))))
        .collect();
    for (i, ep) in eps.iter_mut().enumerate() {
        let mut p = DEFAULT;
        p.grh = i % 2 == 0; // LID-only and GRH addressing alike
        if i == 6 {
            p.rnr_retry = 1;
        }
        connect(ep, &peers[i], p);
    }
    barrier("initiator", &["target"], "connected");
    let a = buf.addr();
    let expect_fail = |ep: &mut Ep, status: St, what: &str| {
        // The failing request, then one more that must be flushed.
        let wcs = wait_cq(&ep.cq, 1);
        assert_eq!(wcs[0].wr_id, 1, "{what}: {wcs:?}");
        assert_eq!(wcs[0].status, status as u32, "{what}: {wcs:?}");
        // SAFETY: the work request's keys and addresses name memory registered on the
        // two endpoints, alive until its completion is polled below.
        post(ep, 2, WorkRequestFlags::Signaled, |w| unsafe {
            w.setup_write(0, 0).setup_sge(mr.lkey(), a, 8)
        });
        let wcs = wait_cq(&ep.cq, 1);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status),
            (2, St::WorkRequestFlushedError as u32),
            "{what}"
        );
        assert_eq!(ep.qp.state(), QueuePairState::Error, "{what}");
    };
    // Case 0 first: the target's injected key fault takes the first access it serves.
    let p = peers[0];
    write(&mut eps[0], 1, &mr, a, 64, &p, 0);
    expect_fail(&mut eps[0], St::RemoteAccessError, "injected rkey fault");
    let mut bad = peers[1];
    bad.rkey ^= 0x0010_0000;
    write(&mut eps[1], 1, &mr, a, 64, &bad, 0);
    expect_fail(&mut eps[1], St::RemoteAccessError, "bad rkey");
    let p = peers[2];
    write(&mut eps[2], 1, &mr, a, 64, &p, p.len - 32);
    expect_fail(&mut eps[2], St::RemoteAccessError, "out of bounds");
    // Case 3: a read-only region reads, but refuses a WRITE.
    let p = peers[3];
    read(&mut eps[3], 0, &mr, a, 64, &p, 0);
    let wcs = wait_cq(&eps[3].cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (0, St::Success as u32));
    write(&mut eps[3], 1, &mr, a, 64, &p, 0);
    expect_fail(
        &mut eps[3],
        St::RemoteAccessError,
        "write to a read-only region",
    );
    let p = peers[4];
    fetch_add(&mut eps[4], 1, &mr, a, &p, 0, 1);
    expect_fail(
        &mut eps[4],
        St::RemoteAccessError,
        "atomic without the atomic right",
    );
    // Case 5: a local key that does not exist.
    let p = peers[5];
    // SAFETY: the work request's keys and addresses name memory registered on the
    // two endpoints, alive until its completion is polled below.
    post(&mut eps[5], 1, WorkRequestFlags::Signaled, |w| unsafe {
        w.setup_write(p.rkey, p.addr)
            .setup_sge(mr.lkey() ^ 0x0010_0000, a, 64)
    });
    expect_fail(&mut eps[5], St::LocalProtectionError, "bad lkey");
    // Case 6: a SEND with no receive posted, RNR retry 1.
    // SAFETY: the work request's keys and addresses name memory registered on the
    // two endpoints, alive until its completion is polled below.
    post(&mut eps[6], 1, WorkRequestFlags::Signaled, |w| unsafe {
        w.setup_send().setup_sge(mr.lkey(), a, 64)
    });
    expect_fail(
        &mut eps[6],
        St::ResponderNotReadyRetryCounterExceededError,
        "RNR retry exceeded",
    );
    barrier("initiator", &["target"], "done");
}

/// The target process dies: the initiator's next requests end in retry-exceeded after its
/// QP's timeout and retry count, and everything after is flushed.
#[test]
fn peer_death_retry_exceeded_then_flush() {
    match role().as_deref() {
        None => run_roles(
            "peer_death_retry_exceeded_then_flush",
            vec![Role::new("target", 1), Role::new("initiator", 2)],
            RUN,
        ),
        Some("target") => death_target(),
        Some("initiator") => death_initiator(),
        Some(r) => unexpected(r),
    }
}

fn death_target() {
    let buf = Buf::new(4096);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, all_access());
    let mut ep = new_ep(&ctx, &pd);
    publish(
        "target.ep",
        &info(&ctx, &ep, Some(&mr), Some(&buf)).encode(),
    );
    connect(&mut ep, &Info::decode(&fetch("initiator.ep")), DEFAULT);
    publish("target.pid", &std::process::id().to_string());
    barrier("target", &["initiator"], "alive");
    // Die without closing anything (the socket files stay, as after a crash).
    // SAFETY: _exit ends the process; nothing runs after it.
    unsafe { libc::_exit(0) }
}

const DEATH_TIMEOUT: u8 = 14; // 4.096 us * 2^14 = 67 ms
const DEATH_RETRIES: u8 = 3;

fn death_initiator() {
    let buf = Buf::new(4096);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, AccessFlags::LocalWrite);
    let mut ep = new_ep(&ctx, &pd);
    publish("initiator.ep", &info(&ctx, &ep, None, None).encode());
    let peer = Info::decode(&fetch("target.ep"));
    let mut p = DEFAULT;
    p.timeout = DEATH_TIMEOUT;
    p.retry_cnt = DEATH_RETRIES;
    connect(&mut ep, &peer, p);
    let a = buf.addr();
    write(&mut ep, 1, &mr, a, 64, &peer, 0);
    assert_eq!(
        wait_cq(&ep.cq, 1)[0].status,
        St::Success as u32,
        "the link works"
    );
    let pid: u32 = fetch("target.pid").parse().unwrap();
    barrier("initiator", &["target"], "alive");
    let t0 = Instant::now();
    while !process_gone(pid) {
        assert!(t0.elapsed() < WAIT, "the target did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    for id in 2..5 {
        write(&mut ep, id, &mr, a, 64, &peer, 0);
    }
    let wcs = wait_cq(&ep.cq, 3);
    let took = t0.elapsed();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (2, St::RetryCounterExceededError as u32),
        "{wcs:?}"
    );
    for (w, id) in wcs[1..].iter().zip(3..) {
        assert_eq!(
            (w.wr_id, w.status),
            (id, St::WorkRequestFlushedError as u32),
            "{wcs:?}"
        );
    }
    // 1 + retry_cnt timeouts of 67 ms each.
    let min = Duration::from_micros(4 << DEATH_TIMEOUT) * (1 + DEATH_RETRIES as u32);
    assert!(took >= min, "retry exceeded after {took:?}, before {min:?}");
    assert_eq!(ep.qp.state(), QueuePairState::Error);
    // Work posted to a QP in the error state is flushed at once.
    write(&mut ep, 9, &mr, a, 64, &peer, 0);
    let w = wait_cq(&ep.cq, 1)[0];
    assert_eq!((w.wr_id, w.status), (9, St::WorkRequestFlushedError as u32));
    println!("retry exceeded after {took:?} (at least {min:?})");
}

/// A responder whose process is alive but does not run (SIGSTOP, the deterministic form of
/// a process an overloaded machine does not schedule) is late, not gone: requests to it
/// stay outstanding for four times the queue pair's retry budget, none completes or fails,
/// and once it runs again all of them complete with the right data, each executed once. A
/// responder stopped for good is charged again after `SOFTVERBS_LATE_LIMIT_MS` and ends in
/// retry-exceeded.
#[test]
fn a_stopped_responder_is_late_not_gone() {
    match role().as_deref() {
        None => run_roles(
            "a_stopped_responder_is_late_not_gone",
            vec![
                Role::new("target", 1),
                Role::new("initiator", 2).with(var::LATE_LIMIT_MS, &LATE_LIMIT_MS.to_string()),
            ],
            RUN,
        ),
        Some("target") => {
            let buf = Buf::new(4096);
            let ctx = open_device(None);
            let pd = ctx.alloc_pd().unwrap();
            let mr = register(&pd, &buf, all_access());
            let mut ep = new_ep(&ctx, &pd);
            publish(
                "target.ep",
                &info(&ctx, &ep, Some(&mr), Some(&buf)).encode(),
            );
            connect(&mut ep, &Info::decode(&fetch("initiator.ep")), DEFAULT);
            publish("target.pid", &std::process::id().to_string());
            barrier("target", &["initiator"], "done");
            assert_eq!(&buf.bytes()[..8], &pattern(6, 8)[..], "the WRITE landed");
            assert_eq!(buf.atomic(64).load(Ordering::SeqCst), 1, "one fetch-add");
        }
        Some("initiator") => stopped_initiator(),
        Some(r) => unexpected(r),
    }
}

/// The initiator's limit on a responder that does not read.
const LATE_LIMIT_MS: u64 = 3000;
/// The initiator's queue pair: 67 ms per attempt, 1 + 3 attempts (268 ms).
const STOP_TIMEOUT: u8 = 14;
const STOP_RETRIES: u8 = 3;

/// Sends `sig` to `pid` and waits until the process is stopped (`T` in `/proc/<pid>/stat`)
/// or, with `stopped` false, no longer is.
fn signal_and_wait(pid: u32, sig: i32, stopped: bool) {
    // SAFETY: kill has no memory effects; `pid` is the target role's process.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill {pid}");
    let t0 = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let state = stat.rsplit_once(')').unwrap().1.trim_start().chars().next();
        if (state == Some('T')) == stopped {
            return;
        }
        assert!(t0.elapsed() < WAIT, "process {pid} in state {state:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn stopped_initiator() {
    let mut buf = Buf::new(4096);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, AccessFlags::LocalWrite);
    let mut ep = new_ep(&ctx, &pd);
    publish("initiator.ep", &info(&ctx, &ep, None, None).encode());
    let peer = Info::decode(&fetch("target.ep"));
    let mut p = DEFAULT;
    p.timeout = STOP_TIMEOUT;
    p.retry_cnt = STOP_RETRIES;
    connect(&mut ep, &peer, p);
    let pid: u32 = fetch("target.pid").parse().unwrap();
    let a = buf.addr();
    buf.bytes_mut()[..8].copy_from_slice(&pattern(6, 8));
    // Stopped for four retry budgets: a WRITE, a READ of it and a fetch-add wait.
    let budget = Duration::from_micros(4 << STOP_TIMEOUT) * (1 + u32::from(STOP_RETRIES));
    signal_and_wait(pid, libc::SIGSTOP, true);
    write(&mut ep, 1, &mr, a, 8, &peer, 0);
    read(&mut ep, 2, &mr, a + 512, 8, &peer, 0);
    fetch_add(&mut ep, 3, &mr, a + 1024, &peer, 64, 1);
    std::thread::sleep(budget * 4);
    let early = poll_cq(&ep.cq);
    assert!(
        early.is_empty(),
        "requests to a stopped responder ended (status 12: retry exceeded): {early:?}"
    );
    let late = counters()[7];
    assert!(late > 0, "no timeout while the responder was stopped");
    signal_and_wait(pid, libc::SIGCONT, false);
    let wcs = wait_cq(&ep.cq, 3);
    for (w, id) in wcs.iter().zip(1..) {
        assert_eq!((w.wr_id, w.status), (id, St::Success as u32), "{wcs:?}");
    }
    assert_eq!(&buf.bytes()[512..520], &pattern(6, 8)[..], "the READ");
    assert_eq!(
        buf.atomic(1024).load(Ordering::SeqCst),
        0,
        "fetched before the add"
    );
    // Stopped for good: after the late limit its timeouts count again.
    signal_and_wait(pid, libc::SIGSTOP, true);
    let before = counters()[7];
    write(&mut ep, 4, &mr, a, 8, &peer, 0);
    let w = wait_cq(&ep.cq, 1)[0];
    assert_eq!(
        (w.wr_id, w.status),
        (4, St::RetryCounterExceededError as u32)
    );
    assert!(counters()[7] > before, "the late limit was not reached");
    signal_and_wait(pid, libc::SIGCONT, false);
    barrier("initiator", &["target"], "done");
    println!("{late} timeouts not charged while the responder was stopped");
}

/// A dead link (the target's device sends nothing, fault `unreachable`): the initiator's
/// WRITE reaches the target and lands, but no acknowledgement comes back, so it ends in
/// retry-exceeded; a delayed link (`delay-us`) only slows things down.
#[test]
fn unreachable_and_delayed_links() {
    match role().as_deref() {
        None => run_roles(
            "unreachable_and_delayed_links",
            vec![
                Role::new("target", 1).with(var::FAULTS, "unreachable"),
                Role::new("initiator", 2).with(var::FAULTS, "delay-us=2000"),
            ],
            RUN,
        ),
        Some("target") => {
            let buf = Buf::new(4096);
            let ctx = open_device(None);
            let pd = ctx.alloc_pd().unwrap();
            let mr = register(&pd, &buf, all_access());
            let mut ep = new_ep(&ctx, &pd);
            let me = info(&ctx, &ep, Some(&mr), Some(&buf));
            publish("target.ep", &me.encode());
            connect(&mut ep, &Info::decode(&fetch("initiator.ep")), DEFAULT);
            barrier("target", &["initiator"], "done");
            assert_eq!(&buf.bytes()[..8], &pattern(5, 8)[..], "the request arrived");
        }
        Some("initiator") => {
            let buf = Buf::new(4096);
            let ctx = open_device(None);
            let pd = ctx.alloc_pd().unwrap();
            let _mr = register(&pd, &buf, AccessFlags::LocalWrite);
            let mut ep = new_ep(&ctx, &pd);
            publish("initiator.ep", &info(&ctx, &ep, None, None).encode());
            let peer = Info::decode(&fetch("target.ep"));
            let mut p = DEFAULT;
            p.timeout = 14;
            p.retry_cnt = 1;
            connect(&mut ep, &peer, p);
            let t0 = Instant::now();
            write_inline(&mut ep, 1, &pattern(5, 8), &peer, 0);
            let w = wait_cq(&ep.cq, 1)[0];
            assert_eq!(
                (w.wr_id, w.status),
                (1, St::RetryCounterExceededError as u32)
            );
            let took = t0.elapsed();
            // Two attempts of 67 ms, each packet held 2 ms first.
            assert!(took >= Duration::from_millis(2 * 67 + 4), "after {took:?}");
            let [sent, ..] = counters();
            assert_eq!(sent, 2, "the request and one retransmission");
            barrier("initiator", &["target"], "done");
        }
        Some(r) => unexpected(r),
    }
}

/// Lost packets both ways (fault injection): go-back-N retransmission recovers every
/// WRITE, READ and atomic, and duplicates never execute twice.
#[test]
fn lost_packets_are_retransmitted_exactly_once() {
    match role().as_deref() {
        None => run_roles(
            "lost_packets_are_retransmitted_exactly_once",
            vec![
                Role::new("target", 1)
                    .with(var::FAULTS, "drop-every=7")
                    .with(var::MIN_TIMEOUT_MS, "20"),
                Role::new("initiator", 2)
                    .with(var::FAULTS, "drop-every=11,drop=2")
                    .with(var::MIN_TIMEOUT_MS, "20"),
            ],
            RUN,
        ),
        Some("target") => lossy_target(),
        Some("initiator") => lossy_initiator(),
        Some(r) => unexpected(r),
    }
}

/// Losses are recovered by the timer: 134 ms per attempt keeps the run short, and 8
/// attempts without progress (1 s) are far from a loaded machine's pauses.
const LOSSY: Params = Params {
    timeout: 15,
    ..DEFAULT
};
const LOSSY_ADDS: u64 = 50;
const LOSSY_WRITES: usize = 6;
const LOSSY_LEN: usize = 40_000; // two fragments

fn lossy_target() {
    let buf = Buf::new(LOSSY_WRITES * LOSSY_LEN + 64);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, all_access());
    let mut ep = new_ep(&ctx, &pd);
    publish(
        "target.ep",
        &info(&ctx, &ep, Some(&mr), Some(&buf)).encode(),
    );
    connect(&mut ep, &Info::decode(&fetch("initiator.ep")), LOSSY);
    barrier("target", &["initiator"], "done");
    let end = LOSSY_WRITES * LOSSY_LEN;
    assert_eq!(
        buf.atomic(end).load(Ordering::SeqCst),
        LOSSY_ADDS,
        "each add once"
    );
    for i in 0..LOSSY_WRITES {
        let b = &buf.bytes()[i * LOSSY_LEN..(i + 1) * LOSSY_LEN];
        assert!(b == pattern(i as u8, LOSSY_LEN), "write {i}");
    }
    let [_, dropped, _, duplicates, ..] = counters();
    assert!(dropped > 0, "drops injected: {:?}", counters());
    assert!(
        duplicates > 0,
        "lost answers made duplicates: {:?}",
        counters()
    );
}

fn lossy_initiator() {
    let mut buf = Buf::new(2 * LOSSY_LEN + 8);
    let ctx = open_device(None);
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, AccessFlags::LocalWrite);
    let mut ep = new_ep(&ctx, &pd);
    publish("initiator.ep", &info(&ctx, &ep, None, None).encode());
    let peer = Info::decode(&fetch("target.ep"));
    connect(&mut ep, &peer, LOSSY);
    let a = buf.addr();
    let end = (LOSSY_WRITES * LOSSY_LEN) as u64;
    for i in 0..LOSSY_WRITES {
        buf.bytes_mut()[..LOSSY_LEN].copy_from_slice(&pattern(i as u8, LOSSY_LEN));
        write(
            &mut ep,
            1,
            &mr,
            a,
            LOSSY_LEN as u32,
            &peer,
            (i * LOSSY_LEN) as u64,
        );
        read(
            &mut ep,
            2,
            &mr,
            a + LOSSY_LEN as u64,
            LOSSY_LEN as u32,
            &peer,
            (i * LOSSY_LEN) as u64,
        );
        let wcs = wait_cq(&ep.cq, 2);
        assert!(
            wcs.iter().all(|w| w.status == St::Success as u32),
            "{wcs:?}"
        );
        let b = buf.bytes();
        assert!(
            b[LOSSY_LEN..2 * LOSSY_LEN] == b[..LOSSY_LEN],
            "read back write {i}"
        );
    }
    let slot = a + 2 * LOSSY_LEN as u64;
    for n in 0..LOSSY_ADDS {
        fetch_add(&mut ep, n, &mr, slot, &peer, end, 1);
        let w = wait_cq(&ep.cq, 1)[0];
        assert_eq!(w.status, St::Success as u32, "{w:?}");
        assert_eq!(
            buf.atomic(2 * LOSSY_LEN).load(Ordering::SeqCst),
            n,
            "fetched value"
        );
    }
    barrier("initiator", &["target"], "done");
    let [sent, dropped, retransmits, ..] = counters();
    assert!(
        dropped >= 2 + sent / 11 - 1,
        "drops injected: {:?}",
        counters()
    );
    assert!(
        retransmits > 0,
        "losses recovered by retransmission: {:?}",
        counters()
    );
    println!("initiator: {sent} packets sent, {dropped} dropped, {retransmits} retransmissions");
}

/// The structures the binding was generated from (rdma-mummy-sys's bundled headers) have
/// the sizes and offsets the device was compiled with (the system's `<infiniband/verbs.h>`);
/// the extended context, which grows towards lower addresses, agrees in each field's
/// distance from its end.
/// Several devices in one process (`SOFTVERBS_DEVICES`), as the processes of two emulated
/// nodes started by one launcher see them: each device has its own name, LID, GID and
/// faults, and queue pairs of two devices of one process reach each other as two nodes.
#[test]
fn several_devices_in_one_process() {
    match role().as_deref() {
        None => run_roles(
            "several_devices_in_one_process",
            vec![
                Role::new("nodes", 10)
                    .with(var::DEVICES, "3")
                    .with(var::MIN_TIMEOUT_MS, "20")
                    .with("SOFTVERBS_FAULTS_2", "unreachable"),
            ],
            RUN,
        ),
        Some("nodes") => several_devices(),
        Some(r) => unexpected(r),
    }
}

fn several_devices() {
    use sideway::ibverbs::device::DeviceInfo;
    let list = sideway::ibverbs::device::DeviceList::new().expect("listing devices");
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    assert_eq!(names, ["softverbs0", "softverbs1", "softverbs2"]);
    let (a, b) = (
        open_device(Some("softverbs0")),
        open_device(Some("softverbs1")),
    );
    let mut src = Buf::new(4096);
    let dst = Buf::new(4096);
    src.bytes_mut().copy_from_slice(&pattern(3, 4096));
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ma, mb) = (
        register(&pa, &src, all_access()),
        register(&pb, &dst, all_access()),
    );
    let (mut ea, mut eb) = (new_ep(&a, &pa), new_ep(&b, &pb));
    let ia = info(&a, &ea, Some(&ma), Some(&src));
    let ib = info(&b, &eb, Some(&mb), Some(&dst));
    // Device i: LID 10 + i, GID fe80::<LID>.
    assert_eq!((ia.lid, ib.lid), (10, 11));
    assert_eq!(std::net::Ipv6Addr::from(ib.gid).to_string(), "fe80::b");
    connect(&mut ea, &ib, DEFAULT);
    connect(&mut eb, &ia, DEFAULT);
    write(&mut ea, 1, &ma, src.addr(), 4096, &ib, 0);
    read(&mut ea, 2, &ma, src.addr() + 2048, 8, &ib, 8);
    let wcs = wait_cq(&ea.cq, 2);
    assert!(
        wcs.iter().all(|w| w.status == St::Success as u32),
        "{wcs:?}"
    );
    assert_eq!(dst.bytes(), &pattern(3, 4096)[..]);
    assert_eq!(&src.bytes()[2048..2056], &pattern(3, 4096)[8..16]);
    // Device 2 is cut off (its own faults): a WRITE from it is never acknowledged.
    let c = open_device(Some("softverbs2"));
    let pc = c.alloc_pd().unwrap();
    let mc = register(&pc, &src, all_access());
    let mut ec = new_ep(&c, &pc);
    let mut eb2 = new_ep(&b, &pb);
    let ic = info(&c, &ec, Some(&mc), Some(&src));
    assert_eq!(ic.lid, 12);
    let ib2 = info(&b, &eb2, Some(&mb), Some(&dst));
    let quick = Params {
        timeout: 1,
        retry_cnt: 1,
        ..DEFAULT
    };
    connect(&mut ec, &ib2, quick);
    connect(&mut eb2, &ic, quick);
    write(&mut ec, 3, &mc, src.addr(), 8, &ib2, 0);
    let wcs = wait_cq(&ec.cq, 1);
    assert_eq!(
        wcs[0].status,
        St::RetryCounterExceededError as u32,
        "{wcs:?}"
    );
    println!(
        "softverbs0..2: LIDs 10..12; WRITE and READ between two devices of one process; device 2 unreachable"
    );
}

#[test]
fn layout_matches_the_binding() {
    use rdma_mummy_sys as sys;
    use std::mem::{offset_of, size_of};
    let lib = verbs_emu::library_dir().join("libibverbs.so.1");
    let cpath = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading our own library (no constructors) and looking up a function with the
    // signature it was compiled with.
    let sizeof = unsafe {
        let h = libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen {}", lib.display());
        let f = libc::dlsym(h, c"softverbs_sizeof".as_ptr());
        assert!(!f.is_null());
        std::mem::transmute::<*mut libc::c_void, extern "C" fn(*const libc::c_char) -> usize>(f)
    };
    let checks = [
        (c"ibv_context", size_of::<sys::ibv_context>()),
        (c"ibv_context_ops", size_of::<sys::ibv_context_ops>()),
        (
            c"verbs_context.query_port.tail",
            size_of::<sys::verbs_context>() - offset_of!(sys::verbs_context, query_port),
        ),
        (
            c"verbs_context.query_device_ex.tail",
            size_of::<sys::verbs_context>() - offset_of!(sys::verbs_context, query_device_ex),
        ),
        (
            c"ibv_context.ops.post_send",
            offset_of!(sys::ibv_context, ops.post_send),
        ),
        (
            c"ibv_context.ops.poll_cq",
            offset_of!(sys::ibv_context, ops.poll_cq),
        ),
        (c"ibv_qp", size_of::<sys::ibv_qp>()),
        (c"ibv_cq", size_of::<sys::ibv_cq>()),
        (c"ibv_mr", size_of::<sys::ibv_mr>()),
        (c"ibv_pd", size_of::<sys::ibv_pd>()),
        (c"ibv_wc", size_of::<sys::ibv_wc>()),
        (c"ibv_send_wr", size_of::<sys::ibv_send_wr>()),
        (c"ibv_recv_wr", size_of::<sys::ibv_recv_wr>()),
        (c"ibv_sge", size_of::<sys::ibv_sge>()),
        (c"ibv_qp_attr", size_of::<sys::ibv_qp_attr>()),
        (c"ibv_qp_init_attr", size_of::<sys::ibv_qp_init_attr>()),
        // The binding's port attributes have a newer field at the end (the device zeroes
        // what it does not know); the fields before it agree.
        (
            c"ibv_port_attr.port_cap_flags2",
            offset_of!(sys::ibv_port_attr, port_cap_flags2),
        ),
        (c"ibv_device_attr", size_of::<sys::ibv_device_attr>()),
        (c"ibv_device", size_of::<sys::ibv_device>()),
    ];
    for (name, rust) in checks {
        assert_eq!(sizeof(name.as_ptr()), rust, "layout of {name:?}");
    }
}

/// WRITE, READ and the atomics between two queue pairs of one real HCA (loopback through
/// its port). Never passes without one: it fails when the variable is unset, when the
/// device is missing, or when the library loaded is the software device.
#[test]
#[ignore = "needs an RDMA device: GSAS_VERBS_TEST_DEVICE=<device> ... -- --ignored hardware_loopback"]
fn hardware_loopback() {
    let name = verbs_emu::hardware_device();
    let mut buf = Buf::new(64 * 1024);
    let ctx = open_device(Some(&name));
    let pd = ctx.alloc_pd().unwrap();
    let mr = register(&pd, &buf, all_access());
    let mut a = new_ep(&ctx, &pd);
    let mut b = new_ep(&ctx, &pd);
    let ia = info(&ctx, &a, Some(&mr), Some(&buf));
    let ib = info(&ctx, &b, Some(&mr), Some(&buf));
    let mut p = DEFAULT;
    p.grh = ctx.query_port(1).unwrap().lid() == 0; // RoCE has no LIDs
    connect(&mut a, &ib, p);
    connect(&mut b, &ia, p);
    buf.bytes_mut()[..4096].copy_from_slice(&pattern(9, 4096));
    let base = buf.addr();
    write(&mut a, 1, &mr, base, 4096, &ib, 8192);
    read(&mut a, 2, &mr, base + 16384, 4096, &ib, 8192);
    buf.atomic(32768).store(5, Ordering::SeqCst);
    fetch_add(&mut a, 3, &mr, base + 40000, &ib, 32768, 10);
    compare_swap(&mut a, 4, &mr, base + 40008, &ib, 32768, 15, 100);
    let wcs = wait_cq(&a.cq, 4);
    assert!(
        wcs.iter().all(|w| w.status == St::Success as u32),
        "{wcs:?}"
    );
    let bytes = buf.bytes();
    assert!(bytes[8192..12288] == pattern(9, 4096)[..]);
    assert!(bytes[16384..20480] == pattern(9, 4096)[..]);
    assert_eq!(buf.atomic(40000).load(Ordering::SeqCst), 5);
    assert_eq!(buf.atomic(40008).load(Ordering::SeqCst), 15);
    assert_eq!(buf.atomic(32768).load(Ordering::SeqCst), 100);
}
