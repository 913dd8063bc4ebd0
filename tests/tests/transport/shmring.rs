//! `ShmRing` between threads and between processes: the service end and the PE end echo
//! packets through the two rings, with the ring segment's descriptor passed with
//! `SCM_RIGHTS` to a re-executed child process.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use gsas_core::transport::{Transport, TransportError};
use gsas_tests::conformance::{check_pattern, fill_pattern};
use gsas_tests::launch::{self, wait_timeout};
use gsas_transport::poll::{Progress, WaitConfig, Waiter};
use gsas_transport::shm::{Segment, recv_fds, send_fds, seqpacket_pair};
use gsas_transport::shmring::{RingConfig, RingPeer, ShmRing};

/// Packets each test sends through the PE -> service ring and back.
const PACKETS: u64 = 20_000;
/// The last packet: tells the echoing end to stop.
const STOP: u64 = u64::MAX;
/// Where the child finds its end of the control socket.
const CHILD_FD: i32 = 100;
const CHILD_ENV: &str = "GSAS_TEST_RING_CHILD";

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(180)
}

fn len_of(k: u64) -> usize {
    gsas_tests::conformance::TAGGED_LEN + (k % 200) as usize
}

/// Sends `count` packets from `ring` (pipelined, as far as the ring has room) and checks
/// that they come back in order, re-tagged by the echoing end (bit 63 of the tag set).
fn drive(ring: &mut ShmRing, count: u64) {
    let mut waiter = Waiter::new(WaitConfig::default());
    let mut next_send = 0u64;
    let mut next_recv = 0u64;
    while next_recv < count {
        waiter
            .wait("an echo from the other end", deadline(), &mut [], || {
                let mut busy = false;
                while next_send < count {
                    let k = next_send;
                    match ring.send(RingPeer, len_of(k), |b| fill_pattern(b, k)) {
                        Ok(()) => {
                            next_send += 1;
                            busy = true;
                        }
                        Err(TransportError::WouldBlock) => break,
                        Err(e) => panic!("send {k}: {e}"),
                    }
                }
                match ring.recv(|_, d| (d.len(), check_pattern(d))) {
                    Ok(Some((len, tag))) => {
                        let want = next_recv | 1 << 63;
                        assert_eq!(tag, Some(want), "echo {next_recv} garbled or out of order");
                        assert_eq!(len, len_of(next_recv));
                        next_recv += 1;
                        Progress::Done(())
                    }
                    Ok(None) if busy => Progress::Busy,
                    Ok(None) => Progress::Idle(None),
                    Err(e) => panic!("recv: {e}"),
                }
            })
            .unwrap();
    }
    let mut stopped = false;
    Waiter::new(WaitConfig::default())
        .wait_until("room for the stop packet", deadline(), || {
            stopped = ring
                .send(RingPeer, gsas_tests::conformance::TAGGED_LEN, |b| {
                    fill_pattern(b, STOP)
                })
                .is_ok();
            stopped
        })
        .unwrap();
}

/// Echoes packets back with bit 63 of the tag set until the stop packet.
fn echo(ring: &mut ShmRing) -> u64 {
    let mut waiter = Waiter::new(WaitConfig::default());
    let mut echoed = 0;
    loop {
        let got = waiter
            .wait("a packet to echo", deadline(), &mut [], || {
                match ring.recv(|_, d| (d.len(), check_pattern(d))) {
                    Ok(Some(got)) => Progress::Done(got),
                    Ok(None) => Progress::Idle(None),
                    Err(e) => panic!("echo recv: {e}"),
                }
            })
            .unwrap();
        let (len, tag) = got;
        let tag = tag.expect("a garbled packet arrived");
        if tag == STOP {
            return echoed;
        }
        waiter
            .wait_until("room to echo", deadline(), || {
                match ring.send(RingPeer, len, |b| fill_pattern(b, tag | 1 << 63)) {
                    Ok(()) => true,
                    Err(TransportError::WouldBlock) => false,
                    Err(e) => panic!("echo send: {e}"),
                }
            })
            .unwrap();
        echoed += 1;
    }
}

#[test]
fn between_threads() {
    let seg = ShmRing::create("ring-threads", RingConfig::new(16, 256)).unwrap();
    let pe_map = Segment::map(seg.try_clone_fd().unwrap(), "ring-threads (PE)").unwrap();
    let mut service = ShmRing::service_side(seg).unwrap();
    let echoer = std::thread::spawn(move || echo(&mut service));
    let mut pe = ShmRing::pe_side(pe_map).unwrap();
    drive(&mut pe, PACKETS);
    assert_eq!(echoer.join().unwrap(), PACKETS);
    assert_eq!(pe.stats().received, PACKETS);
}

/// The child: receives the ring segment over the inherited socket, opens the PE end and
/// echoes until the stop packet.
fn child() -> i32 {
    // SAFETY: the parent put a socket at CHILD_FD for us (dup2 before exec) and nothing
    // else in this process owns that descriptor.
    let sock = unsafe { OwnedFd::from_raw_fd(CHILD_FD) };
    let mut msg = [0u8; 16];
    let (n, mut fds) = recv_fds(&sock, &mut msg, Duration::from_secs(120)).expect("recv_fds");
    assert_eq!(&msg[..n], b"ring");
    assert_eq!(fds.len(), 1);
    let seg = Segment::map(fds.pop().unwrap(), "ring (child PE)").expect("map");
    let mut pe = ShmRing::pe_side(seg).expect("pe side");
    let echoed = echo(&mut pe);
    send_fds(&sock, &echoed.to_le_bytes(), &[], Duration::from_secs(60)).expect("report");
    0
}

/// In the child [`between_processes`] starts: echoes and ends the process. Otherwise
/// returns at once. Called by the binary's `child_pe`.
pub(crate) fn child_entry() {
    if std::env::var_os(CHILD_ENV).is_some() {
        std::process::exit(child());
    }
}

#[test]
fn between_processes() {
    let (ours, theirs) = seqpacket_pair().unwrap();
    let theirs_raw = theirs.as_raw_fd();
    let mut cmd = launch::self_test("child_pe").unwrap();
    cmd.env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: between fork and exec only the async-signal-safe dup2 runs; it places the
    // child's end of the socket at CHILD_FD without close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(theirs_raw, CHILD_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(theirs);

    // The service creates the ring and passes it; the PE echoes; the service drives.
    let seg = ShmRing::create("ring-processes", RingConfig::new(32, 1024)).unwrap();
    send_fds(&ours, b"ring", &[seg.fd()], Duration::from_secs(60)).unwrap();
    let mut service = ShmRing::service_side(seg).unwrap();
    drive(&mut service, PACKETS);
    let mut report = [0u8; 8];
    let (n, _) = recv_fds(&ours, &mut report, Duration::from_secs(120)).unwrap();
    assert_eq!(n, 8);
    assert_eq!(u64::from_le_bytes(report), PACKETS);
    let status = wait_timeout(&mut child, Duration::from_secs(120)).unwrap();
    assert!(status.success(), "child: {status}");
    assert_eq!(service.stats().sent, PACKETS + 1);
}
