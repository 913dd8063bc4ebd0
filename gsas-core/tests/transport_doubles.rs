//! The transport test doubles: loopback network, fault injector and tracer.

use std::time::{Duration, Instant};

use gsas_core::transport::fault::{FaultConfig, FaultInjector, FaultStats, PPM};
use gsas_core::transport::loopback::{LoopbackConfig, LoopbackEndpoint, LoopbackHub};
use gsas_core::transport::tracer::{CountingSink, Direction, Tracer};
use gsas_core::transport::{Ordering, Transport, TransportError};

const MTU: usize = 64;

fn storage(endpoints: usize, slots: usize) -> Vec<u8> {
    vec![0u8; endpoints * slots * (MTU + 8)]
}

fn send_id<T: Transport>(t: &mut T, to: T::Peer, id: u32) -> Result<(), TransportError> {
    t.send(to, 4, |b| b.copy_from_slice(&id.to_le_bytes()))
}

fn recv_ids<T: Transport>(t: &mut T) -> Vec<u32> {
    let mut ids = vec![];
    while let Some(id) = t
        .recv(|_, d| u32::from_le_bytes(d.try_into().unwrap()))
        .unwrap()
    {
        ids.push(id);
    }
    ids
}

#[test]
fn loopback_routes_between_endpoints_in_order() {
    let mut s = storage(4, 16);
    let hub = LoopbackHub::<4>::new(LoopbackConfig::new(MTU), &mut s).unwrap();
    let mut eps: Vec<_> = (0..4).map(|i| hub.endpoint(i).unwrap()).collect();
    for (from, ep) in eps.iter_mut().enumerate() {
        for to in 0..4 {
            for k in 0..3u8 {
                let tag = [from as u8, to as u8, k];
                ep.send(to, 3, |b| b.copy_from_slice(&tag)).unwrap();
            }
        }
    }
    for (to, ep) in eps.iter_mut().enumerate() {
        let mut got = vec![];
        while let Some(p) = ep.recv(|from, d| (from, d.to_vec())).unwrap() {
            got.push(p);
        }
        let want: Vec<_> = (0..4)
            .flat_map(|from| (0..3u8).map(move |k| (from, vec![from as u8, to as u8, k])))
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn loopback_reports_errors_and_back_pressure() {
    let mut s = storage(2, 3);
    let config = LoopbackConfig {
        max_inline: 32,
        ordering: Ordering::Unordered,
        ..LoopbackConfig::new(MTU)
    };
    let hub = LoopbackHub::<2>::new(config, &mut s).unwrap();
    assert!(matches!(hub.endpoint(2), Err(TransportError::UnknownPeer)));
    let mut a = hub.endpoint(0).unwrap();
    let caps = a.capabilities();
    assert_eq!(
        (caps.mtu, caps.max_inline, caps.ordering, caps.reliable),
        (MTU, 32, Ordering::Unordered, true)
    );
    assert_eq!(a.send(5, 1, |_| ()), Err(TransportError::UnknownPeer));
    assert_eq!(a.send(1, MTU + 1, |_| ()), Err(TransportError::TooLarge));
    assert_eq!(hub.queue_capacity(), 3);
    let mut ran = 0;
    for _ in 0..3 {
        a.send(1, MTU, |b| {
            b.fill(1);
            ran += 1;
        })
        .unwrap();
    }
    assert_eq!(a.send(1, 1, |_| ran += 1), Err(TransportError::WouldBlock));
    assert_eq!(ran, 3, "fill does not run without a slot");
    assert_eq!(hub.queued(1), Some(3));
    let mut b = hub.endpoint(1).unwrap();
    assert_eq!(b.recv(|from, d| (from, d.len())).unwrap(), Some((0, MTU)));
    assert!(a.send(1, 1, |_| ()).is_ok());
}

#[test]
fn loopback_endpoints_work_across_threads() {
    const COUNT: u32 = 5_000;
    let mut s = storage(2, 8);
    let hub = LoopbackHub::<2>::new(LoopbackConfig::new(MTU), &mut s).unwrap();
    let limit = Duration::from_secs(120);
    let run = |me: usize| {
        let mut ep: LoopbackEndpoint<'_, '_, 2> = hub.endpoint(me).unwrap();
        let start = Instant::now();
        let (mut next_send, mut next_recv) = (0u32, 0u32);
        while next_send < COUNT || next_recv < COUNT {
            assert!(
                start.elapsed() < limit,
                "endpoint {me} stalled: sent {next_send}, received {next_recv}"
            );
            if next_send < COUNT {
                match send_id(&mut ep, 1 - me, next_send) {
                    Ok(()) => next_send += 1,
                    Err(TransportError::WouldBlock) => std::thread::yield_now(),
                    Err(e) => panic!("send failed: {e}"),
                }
            }
            if let Some(id) = ep
                .recv(|_, d| u32::from_le_bytes(d.try_into().unwrap()))
                .unwrap()
            {
                assert_eq!(id, next_recv, "per-peer order across threads");
                next_recv += 1;
            }
        }
    };
    std::thread::scope(|scope| {
        scope.spawn(|| run(0));
        scope.spawn(|| run(1));
    });
}

/// A two-endpoint hub; the injector wraps endpoint 0, the test reads endpoint 1 directly.
macro_rules! injector_setup {
    ($hub:ident, $inj:ident, $rx:ident, $config:expr) => {
        let mut net = storage(2, 256);
        let $hub = LoopbackHub::<2>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
        let mut hold = vec![0u8; 17 * MTU];
        let mut $inj =
            FaultInjector::<_, 16>::new($hub.endpoint(0).unwrap(), $config, &mut hold).unwrap();
        let mut $rx = $hub.endpoint(1).unwrap();
    };
}

#[test]
fn no_faults_means_plain_passage() {
    injector_setup!(hub, inj, rx, FaultConfig::none(1));
    for id in 0..100 {
        send_id(&mut inj, 1, id).unwrap();
    }
    assert_eq!(recv_ids(&mut rx), (0..100).collect::<Vec<_>>());
    assert_eq!(
        inj.stats(),
        FaultStats {
            passed: 100,
            ..FaultStats::default()
        }
    );
    let caps = inj.capabilities();
    assert!(!caps.reliable);
    assert_eq!(caps.ordering, Ordering::Unordered);
    assert_eq!(caps.mtu, MTU);
    assert_eq!(send_id(&mut inj, 5, 0), Err(TransportError::UnknownPeer));
    assert_eq!(inj.send(1, MTU + 1, |_| ()), Err(TransportError::TooLarge));
    let _ = hub;
}

#[test]
fn drops_run_fill_and_hit_the_configured_rate() {
    let config = FaultConfig {
        drop_ppm: PPM / 10,
        ..FaultConfig::none(42)
    };
    injector_setup!(hub, inj, rx, config);
    let mut delivered = 0;
    let mut filled = 0;
    for id in 0..20_000u32 {
        inj.send(1, 4, |b| {
            b.copy_from_slice(&id.to_le_bytes());
            filled += 1;
        })
        .unwrap();
        delivered += recv_ids(&mut rx).len();
    }
    assert_eq!(filled, 20_000);
    let stats = inj.stats();
    assert_eq!(stats.dropped + stats.passed, 20_000);
    assert_eq!(delivered as u64, stats.passed);
    assert!(
        (1_700..2_300).contains(&stats.dropped),
        "10% of 20000 dropped: {}",
        stats.dropped
    );
    let _ = hub;
}

#[test]
fn duplicates_arrive_twice() {
    let config = FaultConfig {
        duplicate_ppm: PPM,
        reorder_window: 3,
        ..FaultConfig::none(7)
    };
    injector_setup!(hub, inj, rx, config);
    let mut got = vec![];
    for id in 0..200 {
        send_id(&mut inj, 1, id).unwrap();
        got.extend(recv_ids(&mut rx));
    }
    // Copies still held are released by time.
    inj.poll(1_000_000).unwrap();
    got.extend(recv_ids(&mut rx));
    assert_eq!(inj.held(), 0);
    got.sort_unstable();
    let want: Vec<u32> = (0..200).flat_map(|i| [i, i]).collect();
    assert_eq!(got, want);
    assert_eq!(inj.stats().duplicated, 200);
    let _ = hub;
}

#[test]
fn reordering_stays_within_the_window() {
    const K: u32 = 8;
    let config = FaultConfig {
        reorder_ppm: PPM / 4,
        reorder_window: K,
        ..FaultConfig::none(99)
    };
    injector_setup!(hub, inj, rx, config);
    let mut arrivals = vec![];
    for id in 0..5_000 {
        send_id(&mut inj, 1, id).unwrap();
        arrivals.extend(recv_ids(&mut rx));
    }
    inj.poll(1_000_000).unwrap();
    arrivals.extend(recv_ids(&mut rx));
    let mut sorted = arrivals.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..5_000).collect::<Vec<_>>(),
        "nothing lost or doubled"
    );
    assert_ne!(arrivals, sorted, "some packets were reordered");
    // No packet is overtaken by more than K later packets.
    for (pos, &id) in arrivals.iter().enumerate() {
        let overtaken_by = arrivals[..pos].iter().filter(|&&other| other > id).count();
        assert!(
            overtaken_by <= K as usize,
            "packet {id} overtaken by {overtaken_by}"
        );
    }
    let stats = inj.stats();
    assert!(stats.reordered > 1_000, "about a quarter held: {stats:?}");
    assert_eq!(stats.hold_overflows, 0);
    let _ = hub;
}

#[test]
fn delayed_packets_wait_for_poll_time() {
    let config = FaultConfig {
        delay_ppm: PPM,
        delay_ns: 5_000,
        ..FaultConfig::none(3)
    };
    injector_setup!(hub, inj, rx, config);
    inj.poll(1_000).unwrap();
    for id in 0..10 {
        send_id(&mut inj, 1, id).unwrap();
    }
    assert!(recv_ids(&mut rx).is_empty());
    assert_eq!(inj.held(), 10);
    inj.poll(5_999).unwrap();
    assert!(recv_ids(&mut rx).is_empty());
    inj.poll(6_000).unwrap();
    assert_eq!(recv_ids(&mut rx), (0..10).collect::<Vec<_>>());
    assert_eq!(inj.stats().delayed, 10);
    assert_eq!(inj.stats().released, 10);
    let _ = hub;
}

#[test]
fn full_hold_storage_lets_packets_pass() {
    let config = FaultConfig {
        delay_ppm: PPM,
        delay_ns: 5_000,
        ..FaultConfig::none(3)
    };
    let mut net = storage(2, 64);
    let hub = LoopbackHub::<2>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    // Scratch slot plus two hold slots.
    let mut hold = vec![0u8; 3 * MTU];
    let mut inj = FaultInjector::<_, 16>::new(hub.endpoint(0).unwrap(), config, &mut hold).unwrap();
    let mut rx = hub.endpoint(1).unwrap();
    for id in 0..5 {
        send_id(&mut inj, 1, id).unwrap();
    }
    assert_eq!(recv_ids(&mut rx), vec![2, 3, 4]);
    assert_eq!(inj.stats().hold_overflows, 3);
    inj.poll(10_000).unwrap();
    assert_eq!(recv_ids(&mut rx), vec![0, 1]);
}

#[test]
fn receive_side_faults() {
    let mut net = storage(2, 64);
    let hub = LoopbackHub::<2>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut tx = hub.endpoint(0).unwrap();
    let mut hold = vec![0u8; 17 * MTU];
    let config = FaultConfig {
        drop_ppm: PPM / 2,
        duplicate_ppm: PPM / 4,
        reorder_window: 2,
        on_send: false,
        ..FaultConfig::none(11)
    };
    let mut rx = FaultInjector::<_, 16>::new(hub.endpoint(1).unwrap(), config, &mut hold).unwrap();
    let mut got = vec![];
    for round in 0..10u32 {
        for id in round * 40..(round + 1) * 40 {
            send_id(&mut tx, 1, id).unwrap();
        }
        got.extend(recv_ids(&mut rx));
    }
    rx.poll(1_000_000).unwrap();
    got.extend(recv_ids(&mut rx));
    let stats = rx.stats();
    assert_eq!(got.len() as u64, stats.passed + stats.duplicated);
    assert_eq!(stats.passed + stats.dropped, 400);
    assert!(stats.dropped > 100 && stats.duplicated > 10, "{stats:?}");
    assert!(got.iter().all(|&id| id < 400));
}

#[test]
fn same_seed_same_faults() {
    let run = |seed: u64| {
        let config = FaultConfig {
            drop_ppm: PPM / 10,
            duplicate_ppm: PPM / 20,
            reorder_ppm: PPM / 10,
            reorder_window: 4,
            ..FaultConfig::none(seed)
        };
        injector_setup!(hub, inj, rx, config);
        let mut got = vec![];
        for id in 0..2_000 {
            send_id(&mut inj, 1, id).unwrap();
            got.extend(recv_ids(&mut rx));
        }
        let _ = hub;
        (got, inj.stats())
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5).0, run(6).0);
}

#[test]
fn tracer_shows_every_packet_to_the_sink() {
    let mut net = storage(2, 16);
    let hub = LoopbackHub::<2>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut log: Vec<(Direction, usize, Vec<u8>)> = vec![];
    {
        let sink = |d: Direction, peer: usize, bytes: &[u8]| log.push((d, peer, bytes.to_vec()));
        let mut a = Tracer::new(hub.endpoint(0).unwrap(), sink);
        let mut b = Tracer::new(hub.endpoint(1).unwrap(), CountingSink::default());
        a.send(1, 3, |buf| buf.copy_from_slice(b"abc")).unwrap();
        b.send(0, 2, |buf| buf.copy_from_slice(b"xy")).unwrap();
        b.send(0, 1, |buf| buf[0] = b'z').unwrap();
        assert_eq!(b.recv(|_, d| d.to_vec()).unwrap(), Some(b"abc".to_vec()));
        assert_eq!(a.recv(|_, d| d.len()).unwrap(), Some(2));
        assert_eq!(a.recv(|_, d| d.len()).unwrap(), Some(1));
        assert_eq!(a.recv(|_, d| d.len()).unwrap(), None);
        assert_eq!(
            *b.sink(),
            CountingSink {
                sent_packets: 2,
                sent_bytes: 3,
                received_packets: 1,
                received_bytes: 3,
            }
        );
        assert_eq!(a.capabilities(), hub.endpoint(0).unwrap().capabilities());
    }
    assert_eq!(
        log,
        vec![
            (Direction::Send, 1, b"abc".to_vec()),
            (Direction::Recv, 1, b"xy".to_vec()),
            (Direction::Recv, 1, b"z".to_vec()),
        ]
    );
}
