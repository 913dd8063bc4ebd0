//! Protocol behaviour of the reliability layer, checked frame by frame: a `Reliable` endpoint
//! talks to a raw loopback endpoint whose frames the test writes and reads by hand.

mod reliable_common;
use reliable_common::config;

use gsas_core::reliable::frame::{
    AckRepr, FLAG_ACK, Frame, FrameRepr, HEADER_LEN, Packets, emit_packet_prefix,
};
use gsas_core::reliable::seq::Seq;
use gsas_core::reliable::{
    Config, ConfigError, HashIndex, PeerEvent, PeerSlot, Reliable, buffer_len,
};
use gsas_core::transport::loopback::{LoopbackConfig, LoopbackEndpoint, LoopbackHub};
use gsas_core::transport::{Ordering, Transport, TransportError};

const MTU: usize = 256;
const W: usize = 8;
const SERVICE_EPOCH: u64 = 7;

type Rel<'a, 'h, 's> = Reliable<'a, LoopbackEndpoint<'h, 's, 3>, W>;

fn net_storage() -> Vec<u8> {
    vec![0u8; 3 * 32 * (MTU + 8)]
}

fn peer_table() -> Vec<PeerSlot<usize, W>> {
    vec![PeerSlot::new(); 3]
}

/// A frame from the raw endpoint.
struct Raw {
    epoch: u64,
    dest: u64,
}

impl Raw {
    fn data(&self, seq: u32, base: u32, ack: Option<AckRepr>, packets: &[&[u8]]) -> Vec<u8> {
        let len = HEADER_LEN + packets.iter().map(|p| p.len() + 2).sum::<usize>();
        let mut buf = vec![0u8; len];
        let repr = FrameRepr {
            epoch: self.epoch,
            dest_epoch: self.dest,
            seq: Some(Seq(seq)),
            base: Seq(base),
            ack,
            cookie: None,
        };
        repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
        let mut at = HEADER_LEN;
        for p in packets {
            emit_packet_prefix(&mut buf[at..], p.len())
                .unwrap()
                .copy_from_slice(p);
            at += p.len() + 2;
        }
        buf
    }

    fn ack(&self, base: u32, cum: u32, sack: u64) -> Vec<u8> {
        let mut buf = vec![0u8; HEADER_LEN];
        let repr = FrameRepr {
            epoch: self.epoch,
            dest_epoch: self.dest,
            seq: None,
            base: Seq(base),
            ack: Some(AckRepr {
                cum: Seq(cum),
                sack,
            }),
            cookie: None,
        };
        repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
        buf
    }
}

fn put(raw: &mut LoopbackEndpoint<'_, '_, 3>, to: usize, bytes: &[u8]) {
    raw.send(to, bytes.len(), |b| b.copy_from_slice(bytes))
        .unwrap();
}

/// Every frame waiting at the raw endpoint, parsed.
fn drain(raw: &mut LoopbackEndpoint<'_, '_, 3>) -> Vec<(FrameRepr, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    while let Some(frame) = raw
        .recv(|_, bytes| {
            let frame = Frame::new_checked(bytes).expect("a whole header");
            let repr = FrameRepr::parse(&frame).expect("a valid frame");
            let packets = Packets::new(frame.payload()).map(<[u8]>::to_vec).collect();
            (repr, packets)
        })
        .unwrap()
    {
        out.push(frame);
    }
    out
}

fn recv_one(r: &mut Rel<'_, '_, '_>) -> Option<(usize, Vec<u8>)> {
    r.recv(|from, data| (from, data.to_vec())).unwrap()
}

#[test]
fn construction_errors_are_reported() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; 4096];
    let mut try_config = |c: Config| {
        Rel::new(hub.endpoint(0).unwrap(), c, &mut peers, &mut buf)
            .err()
            .unwrap()
    };
    assert_eq!(try_config(config(0)), ConfigError::ZeroEpoch);
    assert_eq!(
        try_config(Config {
            window: Some(W + 1),
            ..config(1)
        }),
        ConfigError::BadWindow {
            window: W + 1,
            max: W
        }
    );
    assert_eq!(
        try_config(Config {
            max_frame: Some(MTU + 1),
            ..config(1)
        }),
        ConfigError::FrameAboveMtu {
            frame: MTU + 1,
            mtu: MTU
        }
    );
    assert_eq!(
        try_config(Config {
            max_frame: Some(42),
            ..config(1)
        }),
        ConfigError::FrameTooSmall(42)
    );
    assert_eq!(
        try_config(Config {
            ack_delay_ns: 1_000,
            ..config(1)
        }),
        ConfigError::BadTimers
    );
    let mut small = vec![0u8; 2 * (MTU - HEADER_LEN) - 1];
    let err = Rel::new(hub.endpoint(0).unwrap(), config(1), &mut peers, &mut small)
        .err()
        .unwrap();
    assert_eq!(
        err,
        ConfigError::BufferTooSmall {
            needed: 2 * (MTU - HEADER_LEN),
            got: 2 * (MTU - HEADER_LEN) - 1
        }
    );
    let err = Rel::new(hub.endpoint(0).unwrap(), config(1), &mut [], &mut buf)
        .err()
        .unwrap();
    assert_eq!(err, ConfigError::BadPeerTable(0));
}

#[test]
fn capabilities_and_input_errors() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = vec![PeerSlot::new(); 2];
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(hub.endpoint(0).unwrap(), config(9), &mut peers, &mut buf).unwrap();
    let caps = r.capabilities();
    assert!(caps.reliable);
    assert_eq!(caps.ordering, Ordering::Unordered);
    assert_eq!(caps.mtu, MTU - HEADER_LEN - 2);
    assert_eq!(
        r.send(1, caps.mtu + 1, |_| ()),
        Err(TransportError::TooLarge)
    );
    // Peer 2 exists on the hub but not in the two-slot peer table.
    assert_eq!(r.send(2, 1, |_| ()), Err(TransportError::UnknownPeer));
    assert_eq!(r.send(1, caps.mtu, |b| b.fill(1)), Ok(()));
    // Frames from a peer without a slot are counted and dropped.
    let mut raw = hub.endpoint(2).unwrap();
    let stranger = Raw { epoch: 3, dest: 0 };
    put(&mut raw, 0, &stranger.data(1, 1, None, &[b"x"]));
    assert_eq!(recv_one(&mut r), None);
    assert_eq!(r.stats().unknown_peers, 1);
}

#[test]
fn malformed_frames_are_counted_and_dropped() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(hub.endpoint(0).unwrap(), config(9), &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    let good = Raw { epoch: 3, dest: 0 }.data(1, 1, None, &[b"abc"]);
    put(&mut raw, 0, &good[..10]);
    let mut bad_magic = good.clone();
    bad_magic[1] ^= 0xff;
    put(&mut raw, 0, &bad_magic);
    let mut bad_len = good.clone();
    bad_len[HEADER_LEN] = 200;
    put(&mut raw, 0, &bad_len);
    put(&mut raw, 0, &good);
    assert_eq!(recv_one(&mut r), Some((1, b"abc".to_vec())));
    assert_eq!(r.stats().bad_frames, 3);
    assert_eq!(r.stats().frames_received, 1);
}

#[test]
fn packets_are_batched_into_one_frame_and_delivered_in_order() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let (mut pa, mut pb) = (peer_table(), peer_table());
    let (mut ba, mut bb) = (vec![0u8; 8192], vec![0u8; 8192]);
    let mut a = Rel::new(hub.endpoint(0).unwrap(), config(1), &mut pa, &mut ba).unwrap();
    let mut b = Rel::new(hub.endpoint(1).unwrap(), config(2), &mut pb, &mut bb).unwrap();
    for i in 0u8..10 {
        a.send(1, usize::from(i), |buf| buf.fill(i)).unwrap();
    }
    assert_eq!(hub.queued(1), Some(0), "nothing leaves before flush");
    a.flush().unwrap();
    assert_eq!(hub.queued(1), Some(1));
    assert_eq!(a.stats().frames_sent, 1);
    for i in 0u8..10 {
        assert_eq!(recv_one(&mut b), Some((0, vec![i; usize::from(i)])));
    }
    assert_eq!(recv_one(&mut b), None);
    assert_eq!(b.stats().packets_delivered, 10);
    // A frame that fills up goes out without flush.
    let big = a.capabilities().mtu;
    a.send(1, big, |buf| buf.fill(7)).unwrap();
    assert_eq!(hub.queued(1), Some(1));
}

#[test]
fn duplicates_are_dropped_and_reacknowledged() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(
        hub.endpoint(0).unwrap(),
        config(SERVICE_EPOCH),
        &mut peers,
        &mut buf,
    )
    .unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    let peer = Raw { epoch: 3, dest: 0 };
    let frame = peer.data(u32::MAX, u32::MAX, None, &[b"once"]);
    put(&mut raw, 0, &frame);
    put(&mut raw, 0, &frame);
    assert_eq!(recv_one(&mut r), Some((1, b"once".to_vec())));
    assert_eq!(recv_one(&mut r), None);
    assert_eq!(r.stats().duplicates, 1);
    // The duplicate is acknowledged at once (no poll needed), with our epoch.
    let acks = drain(&mut raw);
    assert_eq!(acks.len(), 1);
    let (ack, packets) = &acks[0];
    assert_eq!(ack.epoch, SERVICE_EPOCH);
    assert_eq!(ack.dest_epoch, 3);
    assert_eq!(ack.seq, None);
    assert!(packets.is_empty());
    assert_eq!(
        ack.ack,
        Some(AckRepr {
            cum: Seq(u32::MAX),
            sack: 0
        })
    );
    // Across the wrap: 0 is new, MAX is still a duplicate.
    put(&mut raw, 0, &peer.data(0, 0, None, &[b"next"]));
    put(&mut raw, 0, &frame);
    assert_eq!(recv_one(&mut r), Some((1, b"next".to_vec())));
    assert_eq!(recv_one(&mut r), None);
    assert_eq!(r.stats().duplicates, 2);
}

#[test]
fn acks_are_delayed_unless_a_gap_shows() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(hub.endpoint(0).unwrap(), config(5), &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    let peer = Raw { epoch: 3, dest: 0 };
    r.poll(1_000).unwrap();
    put(&mut raw, 0, &peer.data(10, 10, None, &[b"a"]));
    assert!(recv_one(&mut r).is_some());
    assert!(drain(&mut raw).is_empty(), "in-order data: ack is delayed");
    r.poll(1_099).unwrap();
    assert!(drain(&mut raw).is_empty());
    r.poll(1_100).unwrap();
    let acks = drain(&mut raw);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].0.ack.unwrap().cum, Seq(10));
    // Frame 12 arrives, 11 is missing: ack at once with the SACK bit for 12.
    put(&mut raw, 0, &peer.data(12, 11, None, &[b"c"]));
    assert!(recv_one(&mut r).is_some());
    let acks = drain(&mut raw);
    assert_eq!(acks.len(), 1);
    assert_eq!(
        acks[0].0.ack,
        Some(AckRepr {
            cum: Seq(10),
            sack: 0b10
        })
    );
    // The sender abandons 11 (its base moves to 13): the receiver skips it.
    put(&mut raw, 0, &peer.ack(13, 0, 0));
    assert_eq!(recv_one(&mut r), None);
    r.send(1, 1, |b| b[0] = 1).unwrap();
    r.flush().unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames[0].0.ack.unwrap().cum, Seq(12));
}

#[test]
fn back_pressure_when_the_window_is_full() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    // One 8-byte packet per frame, two frames in flight.
    let c = Config {
        window: Some(2),
        max_frame: Some(HEADER_LEN + 2 + 8),
        ..config(SERVICE_EPOCH)
    };
    let mut r = Rel::new(hub.endpoint(0).unwrap(), c, &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    assert_eq!(r.send(1, 8, |b| b.fill(1)), Ok(()));
    assert_eq!(r.send(1, 8, |b| b.fill(2)), Ok(()));
    assert_eq!(r.send(1, 8, |b| b.fill(3)), Err(TransportError::WouldBlock));
    assert_eq!(r.stats().window_full, 1);
    assert_eq!(r.in_flight(1), 2);
    let frames = drain(&mut raw);
    let first = frames[0].0.seq.unwrap();
    assert_eq!(frames.len(), 2, "both full frames went out");
    assert_eq!(frames[1].0.seq, Some(first.add(1)));
    // An ack of the first frame opens the window again.
    let peer = Raw {
        epoch: 3,
        dest: SERVICE_EPOCH,
    };
    put(&mut raw, 0, &peer.ack(1, first.0, 0));
    assert_eq!(recv_one(&mut r), None);
    assert_eq!(r.stats().frames_acked, 1);
    assert_eq!(r.send(1, 8, |b| b.fill(3)), Ok(()));
}

#[test]
fn back_pressure_when_the_frame_pool_is_empty() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 1)];
    let mut r = Rel::new(hub.endpoint(0).unwrap(), config(5), &mut peers, &mut buf).unwrap();
    assert_eq!(r.pool_usage(), (1, 1));
    assert_eq!(r.send(1, 4, |b| b.fill(1)), Ok(()));
    assert_eq!(r.send(2, 4, |b| b.fill(2)), Err(TransportError::WouldBlock));
    assert_eq!(r.stats().pool_empty, 1);
    // The open frame to peer 1 still takes packets.
    assert_eq!(r.send(1, 4, |b| b.fill(3)), Ok(()));
}

#[test]
fn retransmission_backs_off_until_the_deadline_marks_the_peer_unreachable() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(hub.endpoint(0).unwrap(), config(5), &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    r.send(1, 3, |b| b.copy_from_slice(b"req")).unwrap();
    r.flush().unwrap();
    let mut arrivals = vec![];
    let mut t = 0;
    while t <= 60_000 {
        r.poll(t).unwrap();
        for (repr, packets) in drain(&mut raw) {
            assert_eq!(packets, vec![b"req".to_vec()]);
            arrivals.push((t, repr.seq.unwrap()));
        }
        if r.is_failed(1) {
            break;
        }
        t += 500;
    }
    let times: Vec<u64> = arrivals.iter().map(|a| a.0).collect();
    // RTO 1 us doubling up to the 8 us cap; deadline 50 us.
    assert_eq!(
        times,
        vec![
            0, 1_000, 3_000, 7_000, 15_000, 23_000, 31_000, 39_000, 47_000
        ]
    );
    assert!(arrivals.iter().all(|a| a.1 == arrivals[0].1), "same frame");
    assert_eq!(t, 50_000);
    assert_eq!(r.stats().retransmissions, 8);
    assert_eq!(r.next_event(), Some(PeerEvent::Unreachable(1)));
    assert_eq!(r.next_event(), None);
    assert_eq!(r.failed_peers().collect::<Vec<_>>(), vec![1]);
    assert_eq!(r.send(1, 1, |_| ()), Err(TransportError::Unreachable));
    assert_eq!(r.pool_usage().0, r.pool_usage().1, "frames were released");
    // Nothing more is sent to a failed peer.
    r.poll(200_000).unwrap();
    assert!(drain(&mut raw).is_empty());
    r.reset_peer(1).unwrap();
    assert!(!r.is_failed(1));
    assert_eq!(r.send(1, 1, |b| b[0] = 9), Ok(()));
    r.flush().unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames.len(), 1);
    // The new frame follows the abandoned one, and base tells the peer to skip it.
    assert_eq!(frames[0].0.seq, Some(arrivals[0].1.add(1)));
    assert_eq!(frames[0].0.base, arrivals[0].1.add(1));
}

#[test]
fn frames_sent_after_an_idle_spell_carry_the_time_given_by_set_now() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    // One 8-byte packet per frame: each send closes and transmits a frame at once.
    let c = Config {
        max_frame: Some(HEADER_LEN + 2 + 8),
        ..config(SERVICE_EPOCH)
    };
    let mut r = Rel::new(hub.endpoint(0).unwrap(), c, &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    r.poll(1_000).unwrap();
    // Idle for longer than the deadline (50 us), then a frame sent with a fresh clock.
    let later = 1_000 + 200_000;
    r.set_now(later);
    r.set_now(5);
    assert_eq!(r.now(), later, "the clock never goes back");
    r.send(1, 8, |b| b.fill(1)).unwrap();
    assert_eq!(drain(&mut raw).len(), 1);
    // Within its first timeout (1 us) the frame is neither resent nor its peer failed.
    r.poll(later + 500).unwrap();
    assert!(drain(&mut raw).is_empty(), "no spurious retransmission");
    assert!(!r.is_failed(1));
    assert_eq!(r.stats().retransmissions, 0);
    r.poll(later + 1_000).unwrap();
    assert_eq!(drain(&mut raw).len(), 1, "resent after its timeout");

    // Without set_now, the same frame is stamped with the last poll's time: resent at
    // once and its peer failed, because the stale stamp is older than the deadline.
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut stale = Rel::new(hub.endpoint(2).unwrap(), c, &mut peers, &mut buf).unwrap();
    stale.poll(1_000).unwrap();
    stale.send(1, 8, |b| b.fill(2)).unwrap();
    stale.poll(later + 500).unwrap();
    assert!(stale.is_failed(1));
}

#[test]
fn epoch_change_resets_the_peer_state() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(
        hub.endpoint(0).unwrap(),
        config(SERVICE_EPOCH),
        &mut peers,
        &mut buf,
    )
    .unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    let old = Raw { epoch: 5, dest: 0 };
    put(&mut raw, 0, &old.data(100, 100, None, &[b"a"]));
    assert_eq!(recv_one(&mut r), Some((1, b"a".to_vec())));
    r.send(1, 1, |b| b[0] = b'x').unwrap();
    r.flush().unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames[0].0.dest_epoch, 5);
    assert_eq!(r.in_flight(1), 1);

    // The peer restarts with epoch 6; its sequence numbers start over.
    let new = Raw { epoch: 6, dest: 0 };
    put(&mut raw, 0, &new.data(1, 1, None, &[b"b"]));
    assert_eq!(recv_one(&mut r), Some((1, b"b".to_vec())));
    assert_eq!(r.next_event(), Some(PeerEvent::Restarted(1)));
    assert_eq!(r.stats().peer_resets, 1);
    assert_eq!(
        r.in_flight(1),
        0,
        "frames to the old incarnation are abandoned"
    );

    // A late frame of the old incarnation is stale.
    put(&mut raw, 0, &old.data(101, 100, None, &[b"late"]));
    assert_eq!(recv_one(&mut r), None);
    assert_eq!(r.stats().stale_frames, 1);

    // A frame addressed to an older incarnation of *us* is dropped and answered with an
    // ack that carries our current epoch.
    let confused = Raw {
        epoch: 6,
        dest: SERVICE_EPOCH - 1,
    };
    put(&mut raw, 0, &confused.data(2, 1, None, &[b"c"]));
    assert_eq!(recv_one(&mut r), None);
    assert_eq!(r.stats().stale_frames, 2);
    let acks = drain(&mut raw);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].0.epoch, SERVICE_EPOCH);
    assert_eq!(acks[0].0.dest_epoch, 6);

    // New traffic to the new incarnation carries its epoch and acks its frame 1.
    r.send(1, 1, |b| b[0] = b'y').unwrap();
    r.flush().unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames[0].0.dest_epoch, 6);
    assert_eq!(frames[0].0.ack.unwrap().cum, Seq(1));
    assert_eq!(frames[0].1, vec![b"y".to_vec()]);
}

#[test]
fn early_duplicate_gets_an_ack_not_the_cached_reply() {
    // A duplicate that arrives sooner than min_rto / 2 after the reply went out comes from
    // a spurious timeout of the requester: the reply is on its way, resending it would only
    // feed an echo of duplicates between the two ends.
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut service = Rel::new(
        hub.endpoint(0).unwrap(),
        config(SERVICE_EPOCH),
        &mut peers,
        &mut buf,
    )
    .unwrap();
    let mut client = hub.endpoint(1).unwrap();
    let peer = Raw { epoch: 3, dest: 0 };
    let request = peer.data(50, 50, None, &[b"fetch-add"]);
    put(&mut client, 0, &request);
    let (from, _) = recv_one(&mut service).unwrap();
    service
        .send(from, 5, |b| b.copy_from_slice(b"reply"))
        .unwrap();
    service.flush().unwrap();
    assert_eq!(drain(&mut client).len(), 1);

    service.poll(100).unwrap();
    put(&mut client, 0, &request);
    assert_eq!(recv_one(&mut service), None);
    assert_eq!(service.stats().duplicates, 1);
    assert_eq!(service.stats().reply_cache_hits, 0);
    let answer = drain(&mut client);
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0].0.seq, None, "a pure ack, not the reply");
    assert_eq!(answer[0].0.ack.map(|a| a.cum), Some(Seq(50)));
}

#[test]
fn reply_cache_resends_the_reply_to_a_repeated_request_at_once() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut service = Rel::new(
        hub.endpoint(0).unwrap(),
        config(SERVICE_EPOCH),
        &mut peers,
        &mut buf,
    )
    .unwrap();
    let mut client = hub.endpoint(1).unwrap();
    let peer = Raw { epoch: 3, dest: 0 };
    let request = peer.data(50, 50, None, &[b"fetch-add"]);
    put(&mut client, 0, &request);

    // The service executes the request once and answers on the same layer.
    let mut executed = 0;
    while let Some((from, req)) = recv_one(&mut service) {
        assert_eq!(req, b"fetch-add");
        executed += 1;
        service
            .send(from, 5, |b| b.copy_from_slice(b"reply"))
            .unwrap();
    }
    service.flush().unwrap();
    let replies = drain(&mut client);
    assert_eq!(replies.len(), 1);
    let reply_seq = replies[0].0.seq.unwrap();
    assert_eq!(
        replies[0].0.ack.unwrap().cum,
        Seq(50),
        "reply carries the ack"
    );

    // The reply is lost; the client retransmits the request (after its timeout, at least
    // min_rto = 1000 later; the service's clock says 600 since the reply went out, above
    // the cache's floor of min_rto / 2 and below the reply's own timeout). The service does not execute it again, and resends the reply without
    // waiting for its own timeout.
    service.poll(600).unwrap();
    put(&mut client, 0, &request);
    while let Some((_, _)) = recv_one(&mut service) {
        executed += 1;
    }
    assert_eq!(executed, 1);
    assert_eq!(service.stats().duplicates, 1);
    assert_eq!(service.stats().reply_cache_hits, 1);
    let again = drain(&mut client);
    assert_eq!(again.len(), 1, "the reply frame, carrying the ack");
    assert_eq!(again[0].0.seq, Some(reply_seq));
    assert_eq!(again[0].1, vec![b"reply".to_vec()]);

    // Once the client acknowledged the reply, a stray duplicate only gets a pure ack.
    let acked = Raw {
        epoch: 3,
        dest: SERVICE_EPOCH,
    };
    put(&mut client, 0, &acked.ack(51, reply_seq.0, 0));
    put(&mut client, 0, &request);
    assert_eq!(recv_one(&mut service), None);
    assert_eq!(service.stats().reply_cache_hits, 1);
    let last = drain(&mut client);
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].0.seq, None);
    assert_eq!(last[0].0.ack.map(|a| a.cum), Some(Seq(50)));
    let flags = {
        let mut b = [0u8; HEADER_LEN];
        last[0].0.emit(&mut Frame::new_unchecked(&mut b[..]));
        b[3]
    };
    assert_eq!(flags, FLAG_ACK);
}

#[test]
fn sequence_numbers_wrap_in_operation() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let (mut pa, mut pb) = (peer_table(), peer_table());
    let (mut ba, mut bb) = (vec![0u8; 8192], vec![0u8; 8192]);
    // The first sequence number comes from the low bits of the epoch: start 8 before the wrap.
    let mut a = Rel::new(
        hub.endpoint(0).unwrap(),
        config(0x1_ffff_fff8),
        &mut pa,
        &mut ba,
    )
    .unwrap();
    let mut b = Rel::new(
        hub.endpoint(1).unwrap(),
        config(0x2_ffff_fffc),
        &mut pb,
        &mut bb,
    )
    .unwrap();
    let mut got_a = vec![];
    let mut got_b = vec![];
    let mut now = 0;
    for i in 0u32..40 {
        a.send(1, 4, |buf| buf.copy_from_slice(&i.to_le_bytes()))
            .unwrap();
        a.flush().unwrap();
        b.send(0, 4, |buf| buf.copy_from_slice(&(i + 1000).to_le_bytes()))
            .unwrap();
        b.flush().unwrap();
        now += 50;
        a.poll(now).unwrap();
        b.poll(now).unwrap();
        while let Some((_, d)) = recv_one(&mut b) {
            got_b.push(u32::from_le_bytes(d.try_into().unwrap()));
        }
        while let Some((_, d)) = recv_one(&mut a) {
            got_a.push(u32::from_le_bytes(d.try_into().unwrap()));
        }
    }
    // Let the delayed acks (100 ns) go out well before any timeout (1 us).
    for _ in 0..20 {
        now += 100;
        for r in [&mut a, &mut b] {
            r.poll(now).unwrap();
            assert_eq!(recv_one(r), None);
        }
    }
    assert_eq!(got_b, (0..40).collect::<Vec<_>>());
    assert_eq!(got_a, (1000..1040).collect::<Vec<_>>());
    assert_eq!(a.in_flight(1), 0);
    assert_eq!(b.in_flight(0), 0);
    assert_eq!(a.stats().retransmissions + b.stats().retransmissions, 0);
}

#[test]
fn hash_index_maps_sparse_peers_to_dense_slots() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    // Two slots for the peers 2 and 1, in order of first use.
    let mut peers = vec![PeerSlot::new(); 2];
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Reliable::<_, W, HashIndex<usize, 4>>::with_index(
        hub.endpoint(0).unwrap(),
        config(5),
        &mut peers,
        &mut buf,
        HashIndex::new(),
    )
    .unwrap();
    let (mut p1, mut p2) = (hub.endpoint(1).unwrap(), hub.endpoint(2).unwrap());
    r.send(2, 1, |b| b[0] = 2).unwrap();
    r.send(1, 1, |b| b[0] = 1).unwrap();
    assert_eq!(r.send(0, 1, |_| ()), Err(TransportError::UnknownPeer));
    r.flush().unwrap();
    assert_eq!(drain(&mut p1)[0].1, vec![vec![1u8]]);
    assert_eq!(drain(&mut p2)[0].1, vec![vec![2u8]]);
    assert_eq!((r.in_flight(1), r.in_flight(2), r.in_flight(0)), (1, 1, 0));
    // Frames from both peers find their slots.
    let peer = Raw { epoch: 3, dest: 5 };
    put(&mut p2, 0, &peer.data(1, 1, None, &[b"from 2"]));
    put(&mut p1, 0, &peer.data(1, 1, None, &[b"from 1"]));
    assert_eq!(recv_one_any(&mut r), Some((2, b"from 2".to_vec())));
    assert_eq!(recv_one_any(&mut r), Some((1, b"from 1".to_vec())));
    assert_eq!(r.stats().unknown_peers, 0);
}

fn recv_one_any<T: Transport<Peer = usize>>(r: &mut T) -> Option<(usize, Vec<u8>)> {
    r.recv(|from, data| (from, data.to_vec())).unwrap()
}

/// A transport whose sends fail with `Failed(5)` while `broken` is set.
struct Flaky<T> {
    inner: T,
    broken: bool,
}

impl<T: Transport> Transport for Flaky<T> {
    type Peer = T::Peer;

    fn capabilities(&self) -> gsas_core::transport::Capabilities {
        self.inner.capabilities()
    }

    fn send<R, F>(&mut self, peer: T::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if self.broken {
            return Err(TransportError::Failed(5));
        }
        self.inner.send(peer, len, fill)
    }

    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(T::Peer, &[u8]) -> R,
    {
        self.inner.recv(f)
    }
}

#[test]
fn inner_failures_are_reported_and_frames_survive_them() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let flaky = Flaky {
        inner: hub.endpoint(0).unwrap(),
        broken: false,
    };
    let mut r = Reliable::<_, W>::new(flaky, config(5), &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();

    // A flush that meets a failed transport reports it; the frame stays queued.
    r.send(1, 1, |b| b[0] = 1).unwrap();
    r.inner_mut().broken = true;
    assert_eq!(r.flush(), Err(TransportError::Failed(5)));
    r.inner_mut().broken = false;
    r.flush().unwrap();
    assert_eq!(drain(&mut raw)[0].1, vec![vec![1u8]]);

    // A send that fills a frame succeeds (the packet is queued), and the failure met while
    // pushing the frame out is reported by the next poll.
    r.inner_mut().broken = true;
    let mtu = r.capabilities().mtu;
    assert_eq!(r.send(1, mtu, |b| b.fill(2)), Ok(()));
    assert_eq!(r.poll(10), Err(TransportError::Failed(5)));
    r.inner_mut().broken = false;
    r.poll(20).unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].1, vec![vec![2u8; mtu]]);
    assert_eq!(r.stats().frames_sent, 2);
}

#[test]
fn lazy_packets_wait_for_company_until_the_ack_delay() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(hub.endpoint(0).unwrap(), config(5), &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    let peer = Raw { epoch: 3, dest: 0 };

    // A lazy answer to a request stays back at flush; the delayed ack takes it along.
    r.poll(1_000).unwrap();
    put(&mut raw, 0, &peer.data(10, 10, None, &[b"req"]));
    assert!(recv_one(&mut r).is_some());
    r.send_lazy(1, 3, |b| b.copy_from_slice(b"ok1")).unwrap();
    r.flush().unwrap();
    assert!(drain(&mut raw).is_empty(), "a lazy packet waits past flush");
    r.poll(1_099).unwrap();
    assert!(
        drain(&mut raw).is_empty(),
        "and past polls before the bound"
    );
    r.poll(1_100).unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames.len(), 1);
    let seq = frames[0].0.seq.expect("a data frame, not a pure ack");
    assert_eq!(frames[0].1, vec![b"ok1".to_vec()]);
    assert_eq!(frames[0].0.ack.unwrap().cum, Seq(10), "carrying the ack");
    assert_eq!(r.stats().acks_sent, 0);

    // Without an ack owed the bound still holds: ack_delay after the first lazy packet.
    r.send_lazy(1, 3, |b| b.copy_from_slice(b"ok2")).unwrap();
    r.poll(1_150).unwrap();
    r.send_lazy(1, 3, |b| b.copy_from_slice(b"ok3")).unwrap();
    r.flush().unwrap();
    r.poll(1_199).unwrap();
    assert!(drain(&mut raw).is_empty());
    r.poll(1_200).unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].0.seq, Some(seq.add(1)));
    assert_eq!(frames[0].1, vec![b"ok2".to_vec(), b"ok3".to_vec()]);

    // An ordinary packet joining a lazy frame makes it leave at the next flush.
    r.send_lazy(1, 3, |b| b.copy_from_slice(b"ok4")).unwrap();
    r.send(1, 3, |b| b.copy_from_slice(b"now")).unwrap();
    r.flush().unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].1, vec![b"ok4".to_vec(), b"now".to_vec()]);

    // A lazy packet joining an ordinary frame does not hold it back.
    r.send(1, 3, |b| b.copy_from_slice(b"now")).unwrap();
    r.send_lazy(1, 3, |b| b.copy_from_slice(b"ok5")).unwrap();
    r.flush().unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].1, vec![b"now".to_vec(), b"ok5".to_vec()]);

    // A lazy frame that fills up goes out at once (the peer acknowledges what it got
    // first: four frames unacknowledged are as many as a new peer may have).
    put(&mut raw, 0, &peer.ack(11, seq.add(3).0, 0));
    assert!(recv_one(&mut r).is_none());
    let big = r.capabilities().mtu;
    r.send_lazy(1, big, |b| b.fill(7)).unwrap();
    assert_eq!(drain(&mut raw).len(), 1);
}

#[test]
fn an_ack_owed_at_once_carries_the_lazy_packets() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(hub.endpoint(0).unwrap(), config(5), &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    let peer = Raw { epoch: 3, dest: 0 };
    r.poll(1_000).unwrap();
    // Four requests in a row (an ack is owed at once after the fourth), each answered
    // lazily, as a service answers bulk-write fragments; flush after each, as it does.
    let mut seen = Vec::new();
    for i in 0..4u8 {
        put(
            &mut raw,
            0,
            &peer.data(20 + u32::from(i), 20, None, &[&[i]]),
        );
        let (from, req) = recv_one(&mut r).unwrap();
        r.send_lazy(from, 1, |b| b[0] = req[0]).unwrap();
        r.flush().unwrap();
        seen.extend(drain(&mut raw));
    }
    // The fourth request found the first three answers waiting: they left with its ack,
    // in one data frame and without a pure ack.
    assert_eq!(seen.len(), 1, "one datagram for four requests so far");
    assert_eq!(seen[0].1, vec![vec![0], vec![1], vec![2]]);
    assert_eq!(seen[0].0.ack.unwrap().cum, Seq(23));
    assert_eq!(r.stats().acks_sent, 0);
    assert_eq!(r.stats().frames_sent, 1);
    // The fourth answer waits for the bound (ack delay) and is then a normal data frame:
    // kept until acknowledged and retransmitted when it is not.
    r.poll(1_100).unwrap();
    let last = drain(&mut raw);
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].1, vec![vec![3]]);
    let seq = last[0].0.seq.unwrap();
    r.poll(1_100 + 1_000).unwrap();
    let again = drain(&mut raw);
    assert!(
        again
            .iter()
            .any(|(f, p)| f.seq == Some(seq) && p == &vec![vec![3]]),
        "the unacknowledged lazy frame is retransmitted: {again:?}"
    );
    assert!(r.stats().retransmissions >= 1);

    // A duplicate request (an ack owed at once) also takes a waiting lazy answer along.
    put(&mut raw, 0, &peer.data(24, 20, None, &[&[4]]));
    let (from, req) = recv_one(&mut r).unwrap();
    r.send_lazy(from, 1, |b| b[0] = req[0]).unwrap();
    r.flush().unwrap();
    assert!(drain(&mut raw).is_empty());
    put(&mut raw, 0, &peer.data(24, 20, None, &[&[4]]));
    assert_eq!(recv_one(&mut r), None, "a duplicate is not delivered");
    let frames = drain(&mut raw);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].1, vec![vec![4]]);
    assert_eq!(frames[0].0.ack.unwrap().cum, Seq(24));
    assert_eq!(r.stats().acks_sent, 0);
}

/// Data frames from the raw peer until the layer sends a pure ack at once (before its ack
/// delay), for a layer with a window of `W2` frames.
fn frames_until_immediate_ack<const W2: usize>() -> u32 {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = vec![PeerSlot::<usize, W2>::new(); 3];
    let mut buf = vec![0u8; buffer_len(MTU, MTU, W2)];
    let config = Config {
        ack_delay_ns: 1_000_000,
        min_rto_ns: 2_000_000,
        initial_rto_ns: 2_000_000,
        max_rto_ns: 8_000_000,
        deadline_ns: 50_000_000,
        ..Config::new(5)
    };
    let mut r: Reliable<'_, _, W2> =
        Reliable::new(hub.endpoint(0).unwrap(), config, &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    let peer = Raw { epoch: 3, dest: 0 };
    r.poll(1_000).unwrap();
    for i in 0..64u32 {
        put(&mut raw, 0, &peer.data(20 + i, 20, None, &[&[i as u8]]));
        assert!(recv_one_any(&mut r).is_some());
        r.flush().unwrap();
        let acks: Vec<_> = drain(&mut raw)
            .into_iter()
            .filter_map(|(f, _)| f.ack)
            .collect();
        if let Some(ack) = acks.first() {
            assert_eq!(ack.cum, Seq(20 + i), "the ack covers every frame so far");
            return i + 1;
        }
    }
    panic!("no immediate ack in 64 frames");
}

#[test]
fn immediate_acks_come_every_quarter_window_between_4_and_8_frames() {
    // The runtime's 32-frame window: a one-way stream is acknowledged every 8 frames.
    assert_eq!(frames_until_immediate_ack::<32>(), 8);
    assert_eq!(frames_until_immediate_ack::<64>(), 8);
    assert_eq!(frames_until_immediate_ack::<24>(), 6);
    // Small windows keep an ack every 4 frames.
    assert_eq!(frames_until_immediate_ack::<16>(), 4);
    assert_eq!(frames_until_immediate_ack::<8>(), 4);
}

#[test]
fn an_owed_ack_goes_at_once_when_asked_and_only_when_owed() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(hub.endpoint(0).unwrap(), config(5), &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    let peer = Raw { epoch: 3, dest: 0 };
    r.poll(1_000).unwrap();
    // Nothing received from the peer yet: nothing owed, nothing sent.
    assert!(!r.acknowledge_now(1).unwrap());
    put(&mut raw, 0, &peer.data(30, 30, None, &[b"put"]));
    assert!(recv_one(&mut r).is_some());
    r.flush().unwrap();
    assert!(drain(&mut raw).is_empty(), "one frame: the ack is delayed");
    // Asked: the ack leaves now, before the delay, and covers the frame.
    assert!(r.acknowledge_now(1).unwrap());
    r.flush().unwrap();
    let frames = drain(&mut raw);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].0.seq, None, "a pure ack");
    assert_eq!(frames[0].0.ack.unwrap().cum, Seq(30));
    assert_eq!(r.stats().acks_sent, 1);
    // Nothing owed any more: no second ack now, none when the delay would have passed.
    assert!(!r.acknowledge_now(1).unwrap());
    r.poll(1_000 + 1_000).unwrap();
    assert!(drain(&mut raw).is_empty());
    assert_eq!(r.stats().acks_sent, 1);
}

#[test]
fn an_immediate_ack_waits_until_every_packet_of_its_frame_was_taken() {
    let mut net = net_storage();
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut peers = peer_table();
    let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
    let mut r = Rel::new(hub.endpoint(0).unwrap(), config(5), &mut peers, &mut buf).unwrap();
    let mut raw = hub.endpoint(1).unwrap();
    let peer = Raw { epoch: 3, dest: 0 };
    r.poll(1_000).unwrap();
    put(&mut raw, 0, &peer.data(10, 10, None, &[b"a"]));
    assert!(recv_one(&mut r).is_some());
    // Frame 12 of two packets arrives, 11 is missing: an ack is owed at once (the gap),
    // but the second packet has not been taken yet.
    put(&mut raw, 0, &peer.data(12, 11, None, &[b"b1", b"b2"]));
    assert_eq!(recv_one(&mut r).map(|(_, p)| p), Some(b"b1".to_vec()));
    assert!(
        drain(&mut raw).is_empty(),
        "no ack while a packet of the frame is still buffered"
    );
    assert_eq!(recv_one(&mut r).map(|(_, p)| p), Some(b"b2".to_vec()));
    // Due now: the next poll sends it, before the ack delay.
    r.poll(1_001).unwrap();
    let acks = drain(&mut raw);
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(
        acks[0].0.ack,
        Some(AckRepr {
            cum: Seq(10),
            sack: 0b10
        })
    );
}
