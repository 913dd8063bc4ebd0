//! The transport conformance suite, instantiated for every transport: the gsas-core
//! loopback double, `UdpTransport` on 127.0.0.1, `Reliable<UdpTransport>` (also over a
//! lossy, duplicating, reordering `FaultInjector`), `ShmRing`, and `ExanetTransport` on
//! the in-process model and over the `exanet-emu` emulator. A new transport is one more
//! test here: a [`Pair`] of its endpoints and [`conformance::run_all`].

use std::time::Duration;

use exanet::{Dest, ExanetTransport};
use exanet_emu::model::{ModelConfig, ModelFabric};
use gsas_core::reliable::{Config, HashIndex, PeerSlot, Reliable, buffer_len};
use gsas_core::transport::fault::{FaultConfig, FaultInjector};
use gsas_core::transport::loopback::{LoopbackConfig, LoopbackHub};
use gsas_core::transport::{Transport, TransportError};
use gsas_tests::conformance::{self, Pair, back_pressure, many_packets};
use gsas_tests::emu::{Emu, small_transport_config};
use gsas_transport::shm::Segment;
use gsas_transport::shmring::{RingConfig, RingPeer, ShmRing};
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};

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
        udp(gsas_transport::udp::DEFAULT_MTU),
        udp(gsas_transport::udp::DEFAULT_MTU),
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

/// The suite on two Exanet endpoints, then what Exanet claims beyond it: its exact
/// capabilities, a packet of no bytes and one starting with a transport-private byte
/// refused, and bulk packets (above 64 bytes) pushed back after exactly the four staging
/// slots.
fn exanet_suite<T: Transport<Peer = Dest>>(
    a: T,
    pa: Dest,
    b: T,
    pb: Dest,
    bulk_in_flight: impl Fn(&T) -> usize,
) -> Pair<T, T> {
    let caps = a.capabilities();
    assert_eq!(
        (
            caps.max_inline,
            caps.mtu,
            caps.reliable,
            caps.rdma_put,
            caps.rdma_get,
            caps.atomic_offload
        ),
        (64, 4096, true, true, true, false)
    );
    let mut pair = Pair::new(a, pb, b, pa);
    pair.timeout = timeout();
    conformance::run_all(&mut pair);
    assert!(matches!(
        pair.a.send(pb, 0, |_| ()),
        Err(TransportError::Failed(_))
    ));
    assert!(matches!(
        pair.a.send(pb, 8, |b| b[0] = 0xFB),
        Err(TransportError::Failed(_))
    ));
    // The releases of the suite's last bulk packets come back first.
    let until = std::time::Instant::now() + timeout();
    while bulk_in_flight(&pair.a) > 0 {
        pair.pump();
        pair.absorb_a("exanet releases");
        pair.absorb_b("exanet releases");
        assert!(
            std::time::Instant::now() < until,
            "bulk slots never released"
        );
    }
    let bp = back_pressure(&mut pair, 1000, 1000);
    assert_eq!((bp.accepted, bp.pushed_back, bp.delivered), (4, true, 4));
    pair
}

#[test]
fn exanet_on_the_model() {
    let f = ModelFabric::new(ModelConfig {
        nodes: 2,
        eps: 1,
        pdid: 1,
        ack_timeout_ns: 1_000_000_000,
    });
    let a = ExanetTransport::new(
        f.endpoint(0, 0),
        f.registrar(0, 0),
        small_transport_config(),
    )
    .unwrap();
    let b = ExanetTransport::new(
        f.endpoint(1, 0),
        f.registrar(1, 0),
        small_transport_config(),
    )
    .unwrap();
    let (pa, pb) = (a.local_peer(), b.local_peer());
    let mut pair = exanet_suite(a, pa, b, pb, |t| t.bulk_in_flight());
    assert_eq!(pair.a.stats().pull_errors + pair.b.stats().pull_errors, 0);
    let (fa, fb) = (pair.a.take_failure(), pair.b.take_failure());
    assert!(fa.is_none() && fb.is_none(), "{fa:?} {fb:?}");
    assert_eq!(pair.a.stats().overdue + pair.b.stats().overdue, 0);
}

#[test]
fn exanet_over_the_emulator() {
    let emu = Emu::start("conf", 2, &[]);
    let a = emu
        .paths
        .open_transport(0, 1, small_transport_config())
        .unwrap();
    let b = emu
        .paths
        .open_transport(3, 0, small_transport_config())
        .unwrap();
    let (pa, pb) = (a.local_peer(), b.local_peer());
    let mut pair = exanet_suite(a, pa, b, pb, |t| t.bulk_in_flight());
    let (fa, fb) = (pair.a.take_failure(), pair.b.take_failure());
    assert!(fa.is_none() && fb.is_none(), "{fa:?} {fb:?}");
    assert_eq!(pair.a.stats().overdue + pair.b.stats().overdue, 0);
}
