//! The transport conformance suite, instantiated for every transport: the gsas-core
//! loopback double, `UdpTransport` on 127.0.0.1, `Reliable<UdpTransport>` (also over a
//! lossy, duplicating, reordering `FaultInjector`), and `ShmRing`.

use std::time::Duration;

use gsas::shm::Segment;
use gsas::transport::conformance::{self, Pair, back_pressure, many_packets};
use gsas::transport::shmring::{RingConfig, RingPeer, ShmRing};
use gsas::transport::udp::{UdpConfig, UdpPeer, UdpTransport};
use gsas_core::reliable::{Config, HashIndex, PeerSlot, Reliable, buffer_len};
use gsas_core::transport::Transport;
use gsas_core::transport::fault::{FaultConfig, FaultInjector};
use gsas_core::transport::loopback::{LoopbackConfig, LoopbackHub};

/// Frames in flight per peer in these tests.
const W: usize = 16;
/// Peer slots of a reliability layer (one peer is used).
const PEERS: usize = 2;
/// A job key for the UDP header.
const KEY: u64 = 0x6a6f_625f_6b65_7921;

type Index = HashIndex<UdpPeer, 4>;

fn udp(mtu: usize) -> UdpTransport {
    UdpTransport::bind(
        "127.0.0.1:0".parse().unwrap(),
        UdpConfig {
            mtu,
            ..UdpConfig::default()
        },
    )
    .unwrap()
}

fn peer(t: &UdpTransport) -> UdpPeer {
    UdpPeer {
        addr: t.local_addr(),
        key: KEY,
    }
}

fn timeout() -> Duration {
    // Generous: the suite also runs under qemu while other builds share the machine.
    Duration::from_secs(120)
}

#[test]
fn loopback_double() {
    let mut storage = vec![0u8; 2 * 64 * (1472 + 8)];
    let hub = LoopbackHub::<2>::new(LoopbackConfig::default(), &mut storage).unwrap();
    let mut pair = Pair::new(hub.endpoint(0).unwrap(), 1, hub.endpoint(1).unwrap(), 0);
    pair.timeout = timeout();
    conformance::run_all(&mut pair);
    let bp = back_pressure(&mut pair, 1000, 100);
    assert!(bp.pushed_back && bp.accepted == hub.queue_capacity());
}

#[test]
fn udp_raw() {
    let (a, b) = (udp(8192), udp(8192));
    let (pa, pb) = (peer(&a), peer(&b));
    let mut pair = Pair::new(a, pb, b, pa);
    pair.timeout = timeout();
    assert!(!pair.a.capabilities().reliable);
    conformance::run_all(&mut pair);
    // The claim "unreliable" is honest: with the receiver not draining, UDP neither pushes
    // back nor keeps everything; datagrams beyond the receive buffer are lost.
    let (_, rcvbuf) = pair.b.socket_buffers().unwrap();
    let limit = 3 * rcvbuf / 8000 + 100;
    let bp = back_pressure(&mut pair, limit, 8000);
    if !bp.pushed_back {
        assert!(
            bp.delivered < bp.accepted,
            "UDP kept all of {} datagrams beyond its {rcvbuf}-byte buffer",
            bp.accepted
        );
    }
}

#[test]
fn udp_default_mtu_sizes() {
    // The default MTU (60 KiB datagrams): every size class up to it.
    let (a, b) = (
        udp(gsas::transport::udp::DEFAULT_MTU),
        udp(gsas::transport::udp::DEFAULT_MTU),
    );
    let (pa, pb) = (peer(&a), peer(&b));
    let mut pair = Pair::new(a, pb, b, pa);
    pair.timeout = timeout();
    conformance::sizes_up_to_mtu(&mut pair);
    conformance::too_large(&mut pair);
}

/// Runs the suite on `Reliable` over `inner_a`/`inner_b`, which reach each other.
macro_rules! reliable_pair {
    ($inner_a:expr, $inner_b:expr, $pa:expr, $pb:expr, |$pair:ident| $body:block) => {{
        let (inner_a, inner_b) = ($inner_a, $inner_b);
        let mtu = inner_a.capabilities().mtu;
        let mut slots_a = [const { PeerSlot::<UdpPeer, W>::new() }; PEERS];
        let mut slots_b = [const { PeerSlot::<UdpPeer, W>::new() }; PEERS];
        let mut buf_a = vec![0u8; buffer_len(mtu, mtu, PEERS * W)];
        let mut buf_b = vec![0u8; buffer_len(mtu, mtu, PEERS * W)];
        let a: Reliable<'_, _, W, Index> =
            Reliable::new(inner_a, Config::new(11), &mut slots_a, &mut buf_a).unwrap();
        let b: Reliable<'_, _, W, Index> =
            Reliable::new(inner_b, Config::new(22), &mut slots_b, &mut buf_b).unwrap();
        let mut $pair = Pair::new(a, $pb, b, $pa);
        $pair.timeout = timeout();
        $body
    }};
}

#[test]
fn reliable_udp() {
    let (a, b) = (udp(16_384), udp(16_384));
    let (pa, pb) = (peer(&a), peer(&b));
    reliable_pair!(a, b, pa, pb, |pair| {
        assert!(pair.a.capabilities().reliable);
        conformance::run_all(&mut pair);
        assert_eq!(pair.a.stats().peers_failed, 0);
    });
}

#[test]
fn reliable_udp_exactly_once_under_loss_duplication_and_reordering() {
    let (a, b) = (udp(4096), udp(4096));
    let (pa, pb) = (peer(&a), peer(&b));
    let faults = |seed| FaultConfig {
        drop_ppm: 100_000,
        duplicate_ppm: 20_000,
        reorder_ppm: 50_000,
        reorder_window: 4,
        ..FaultConfig::none(seed)
    };
    let mut hold_a = vec![0u8; 4096 * 17];
    let mut hold_b = vec![0u8; 4096 * 17];
    let fa = FaultInjector::<_, 16>::new(a, faults(1), &mut hold_a).unwrap();
    let fb = FaultInjector::<_, 16>::new(b, faults(2), &mut hold_b).unwrap();
    assert!(
        !fa.capabilities().reliable,
        "a fault injector never claims reliability"
    );
    reliable_pair!(fa, fb, pa, pb, |pair| {
        assert!(pair.a.capabilities().reliable);
        let s = many_packets(&mut pair, 5_000, 200);
        assert_eq!(s.delivered, 5_000);
        conformance::sizes_up_to_mtu(&mut pair);
        let bp = back_pressure(&mut pair, 200_000, 300);
        assert!(bp.pushed_back);
        let lost = pair.a.inner().stats().dropped + pair.b.inner().stats().dropped;
        assert!(lost > 100, "the injectors dropped only {lost} frames");
        assert!(pair.a.stats().retransmissions > 0);
        assert!(pair.b.stats().duplicates + pair.a.stats().duplicates > 0);
    });
}

fn ring_pair(config: RingConfig) -> Pair<ShmRing, ShmRing> {
    let seg = ShmRing::create("conformance-ring", config).unwrap();
    let pe_map = Segment::map(seg.try_clone_fd().unwrap(), "conformance-ring (PE)").unwrap();
    let mut pair = Pair::new(
        ShmRing::pe_side(pe_map).unwrap(),
        RingPeer,
        ShmRing::service_side(seg).unwrap(),
        RingPeer,
    );
    pair.timeout = timeout();
    pair
}

#[test]
fn shm_ring() {
    let mut pair = ring_pair(RingConfig::new(64, 4096));
    conformance::run_all(&mut pair);
    let bp = back_pressure(&mut pair, 1000, 100);
    assert_eq!((bp.accepted, bp.pushed_back, bp.delivered), (64, true, 64));
    // And the other direction: the service end producing.
    let mut reversed = ring_pair(RingConfig::new(8, 512));
    std::mem::swap(&mut reversed.a, &mut reversed.b);
    conformance::run_all(&mut reversed);
}

#[test]
fn shm_ring_under_a_fault_injector_is_not_claimed_reliable() {
    let config = RingConfig::new(64, 1024);
    let seg = ShmRing::create("lossy-ring", config).unwrap();
    let pe_map = Segment::map(seg.try_clone_fd().unwrap(), "lossy-ring (PE)").unwrap();
    let mut hold = vec![0u8; 1024 * 9];
    let lossy = FaultInjector::<_, 8>::new(
        ShmRing::pe_side(pe_map).unwrap(),
        FaultConfig {
            drop_ppm: 200_000,
            ..FaultConfig::none(5)
        },
        &mut hold,
    )
    .unwrap();
    let mut pair = Pair::new(
        lossy,
        RingPeer,
        ShmRing::service_side(seg).unwrap(),
        RingPeer,
    );
    pair.timeout = timeout();
    let s = many_packets(&mut pair, 1000, 64);
    // Judged as unreliable: losses are allowed and happened, nothing was duplicated.
    assert!(s.delivered < 1000 && s.delivered > 600, "{s:?}");
    assert_eq!(s.out_of_order, 0);
}
