//! `Reliable<UdpTransport>` between two processes over loopback, with a fault injector
//! under the reliability layer on both sides dropping 10% of the frames: 10,000 packets
//! are all delivered, each exactly once.
//!
//! The parent receives; a re-executed copy of this test binary sends. The parent's
//! address goes to the child in the environment; the child's address is learned from its
//! first frame.

use std::process::Stdio;
use std::time::{Duration, Instant};

use gsas_core::reliable::{Config, HashIndex, PeerSlot, Reliable, buffer_len};
use gsas_core::transport::fault::{FaultConfig, FaultInjector};
use gsas_core::transport::{Transport, TransportError};
use gsas_tests::conformance::{check_pattern, fill_pattern};
use gsas_tests::launch;
use gsas_transport::poll::{PollFd, Progress, WaitConfig, Waiter, monotonic_ns};
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};
use std::os::fd::AsFd;

const PACKETS: u64 = 10_000;
const KEY: u64 = 0x7465_7374_6b65_7900;
const W: usize = 32;
const MTU: usize = 8192;
const ADDR_ENV: &str = "GSAS_TEST_UDP_PARENT";

type Link<'a> = Reliable<'a, FaultInjector<'a, UdpTransport, 16>, W, HashIndex<UdpPeer, 8>>;

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(240)
}

fn lossy(seed: u64) -> FaultConfig {
    FaultConfig {
        drop_ppm: 100_000,
        ..FaultConfig::none(seed)
    }
}

fn len_of(k: u64) -> usize {
    gsas_tests::conformance::TAGGED_LEN + (k * 7 % 300) as usize
}

/// Builds the layered transport in caller-provided storage and runs `body` with it.
fn with_link<R>(seed: u64, epoch: u64, body: impl FnOnce(&mut Link<'_>) -> R) -> R {
    let udp = UdpTransport::bind(
        "127.0.0.1:0".parse().unwrap(),
        UdpConfig {
            mtu: MTU,
            ..UdpConfig::default()
        },
    )
    .unwrap();
    let mtu = udp.capabilities().mtu;
    let mut hold = vec![0u8; mtu * 17];
    let faults = FaultInjector::<_, 16>::new(udp, lossy(seed), &mut hold).unwrap();
    let mut slots = [const { PeerSlot::<UdpPeer, W>::new() }; 4];
    let mut buffers = vec![0u8; buffer_len(mtu, mtu, 2 * W)];
    let mut link: Link<'_> =
        Reliable::new(faults, Config::new(epoch), &mut slots, &mut buffers).unwrap();
    body(&mut link)
}

/// The child: sends every packet, then waits until all are acknowledged.
fn sender(parent: UdpPeer) -> i32 {
    with_link(7, 2, |link| {
        let mut waiter = Waiter::new(WaitConfig::default());
        let mut next = 0u64;
        let fd = link.inner().inner().as_fd().try_clone_to_owned().unwrap();
        waiter
            .wait(
                "all packets sent and acknowledged",
                deadline(),
                &mut [PollFd::readable(fd.as_fd())],
                || {
                    link.poll(monotonic_ns()).expect("poll");
                    // Acks arrive through recv; the parent sends no packets.
                    if link.recv(|_, _| ()).expect("recv").is_some() {
                        panic!("the receiver sent a packet");
                    }
                    let mut busy = false;
                    while next < PACKETS {
                        let k = next;
                        match link.send(parent, len_of(k), |b| fill_pattern(b, k)) {
                            Ok(()) => {
                                next += 1;
                                busy = true;
                            }
                            Err(TransportError::WouldBlock) => break,
                            Err(e) => panic!("send {k}: {e}"),
                        }
                    }
                    link.flush().expect("flush");
                    if next == PACKETS && link.in_flight(parent) == 0 {
                        Progress::Done(())
                    } else if busy {
                        Progress::Busy
                    } else {
                        Progress::Idle(None)
                    }
                },
            )
            .unwrap();
        let s = link.stats();
        assert!(
            link.inner().stats().dropped > 0,
            "the injector dropped nothing"
        );
        assert!(s.retransmissions > 0, "{s:?}");
        eprintln!(
            "sender: {} packets in {} frames, {} retransmissions, {} dropped by the injector",
            s.packets_sent,
            s.frames_sent,
            s.retransmissions,
            link.inner().stats().dropped
        );
        0
    })
}

/// In the sender the test starts: sends and ends the process. Otherwise returns at once.
/// Called by the binary's `child_pe`.
pub(crate) fn child_entry() {
    if let Some(addr) = std::env::var_os(ADDR_ENV) {
        let addr = addr.to_str().unwrap().parse().unwrap();
        std::process::exit(sender(UdpPeer { addr, key: KEY }));
    }
}

#[test]
fn ten_thousand_packets_exactly_once_with_ten_percent_loss() {
    with_link(3, 1, |link| {
        let me = link.inner().inner().local_addr();
        let mut cmd = launch::self_test("child_pe").unwrap();
        cmd.env(ADDR_ENV, me.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();

        let mut seen = vec![false; PACKETS as usize];
        let mut distinct = 0u64;
        let mut from = None;
        let mut exited = None;
        let fd = link.inner().inner().as_fd().try_clone_to_owned().unwrap();
        let mut waiter = Waiter::new(WaitConfig::default());
        let result = waiter.wait(
            "all packets and the sender's exit",
            deadline(),
            &mut [PollFd::readable(fd.as_fd())],
            || {
                link.poll(monotonic_ns()).expect("poll");
                let mut busy = false;
                while let Some((peer, tag)) = link
                    .recv(|peer, d| (peer, check_pattern(d).map(|t| (t, d.len()))))
                    .expect("recv")
                {
                    let (tag, len) = tag.expect("a garbled packet arrived");
                    assert_eq!(len, len_of(tag));
                    assert!(tag < PACKETS, "packet {tag} was never sent");
                    assert!(!seen[tag as usize], "packet {tag} delivered twice");
                    assert_eq!(peer.key, KEY);
                    assert!(from.is_none_or(|f| f == peer), "packets from two peers");
                    from = Some(peer);
                    seen[tag as usize] = true;
                    distinct += 1;
                    busy = true;
                }
                link.flush().expect("flush");
                // Keep acknowledging until the sender saw every ack and exited.
                if exited.is_none() {
                    exited = child.try_wait().expect("try_wait");
                }
                match exited {
                    Some(status) => Progress::Done(status),
                    None if busy => Progress::Busy,
                    None => Progress::Idle(None),
                }
            },
        );
        let status = match result {
            Ok(status) => status,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{e} ({distinct} of {PACKETS} packets arrived)");
            }
        };
        assert!(status.success(), "sender: {status}");
        assert_eq!(
            distinct, PACKETS,
            "the sender finished but packets are missing"
        );
        assert!(
            link.inner().stats().dropped > 0,
            "the receiver's injector dropped nothing"
        );
        assert_eq!(link.stats().packets_delivered, PACKETS);
    });
}
