//! Admission, refusals and freed slots of the reliability layer: a "service" endpoint whose
//! index admits only some peers, refuses the others with a refusal frame, frees slots on
//! demand or after silence, and keeps talking to a peer whose slot it freed.

mod reliable_common;
use reliable_common::config;

use gsas_core::reliable::{
    Admission, DenseIndex, PeerEvent, PeerIndex, PeerSlot, Refusal, RefusalReason, Reliable,
    buffer_len,
};
use gsas_core::transport::loopback::{LoopbackConfig, LoopbackHub};
use gsas_core::transport::{Transport, TransportError};

const MTU: usize = 256;
const W: usize = 8;

/// Admits peers in `allowed` only (peer i has slot i); records the peers released.
#[derive(Default)]
struct Gate {
    allowed: Vec<usize>,
    /// Peers with a slot.
    known: Vec<usize>,
    released: Vec<usize>,
    /// Name this victim instead of refusing.
    evict: Option<usize>,
    /// Senders without a slot must echo this cookie first.
    cookie: Option<u64>,
}

impl Gate {
    /// A gate that admits `peer` only.
    fn admitting(peer: usize) -> Gate {
        Gate {
            allowed: vec![peer],
            ..Gate::default()
        }
    }
}

impl PeerIndex<usize> for Gate {
    fn slot(&mut self, peer: usize, capacity: usize) -> Option<usize> {
        let s = DenseIndex.slot(peer, capacity)?;
        if !self.known.contains(&peer) {
            self.known.push(peer);
        }
        Some(s)
    }

    fn find(&self, peer: usize, capacity: usize) -> Option<usize> {
        DenseIndex
            .find(peer, capacity)
            .filter(|_| self.known.contains(&peer))
    }

    fn admit(&mut self, peer: usize, _capacity: usize) -> Admission<usize> {
        let r = Refusal {
            reason: RefusalReason::JobFull,
            in_use: 1,
            limit: 1,
        };
        if let Some(v) = self.evict.take() {
            return Admission::Replace {
                victim: v,
                quiet_ns: 1_000_000_000,
                refusal: r,
            };
        }
        if self.allowed.contains(&peer) {
            Admission::Admit
        } else {
            Admission::Refuse(Refusal {
                reason: RefusalReason::UnknownJob,
                in_use: 0,
                limit: 0,
            })
        }
    }

    fn release(&mut self, peer: usize) {
        self.known.retain(|&p| p != peer);
        self.released.push(peer);
    }

    fn challenge(
        &mut self,
        _peer: usize,
        _epoch: u64,
        echo: Option<u64>,
        _now: u64,
    ) -> Option<u64> {
        let want = self.cookie?;
        (echo != Some(want)).then_some(want)
    }
}

/// Moves packets both ways for a while (time steps past the ack delay, below the
/// retransmission timeout); returns what each side received.
fn pump<A, B>(a: &mut A, b: &mut B, now: u64) -> (Vec<Vec<u8>>, Vec<Vec<u8>>)
where
    A: Transport<Peer = usize>,
    B: Transport<Peer = usize>,
{
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    for i in 0..16 {
        let now = now + i * 101;
        a.poll(now).unwrap();
        b.poll(now).unwrap();
        while let Some(p) = a.recv(|_, d| d.to_vec()).unwrap() {
            got_a.push(p);
        }
        while let Some(p) = b.recv(|_, d| d.to_vec()).unwrap() {
            got_b.push(p);
        }
        a.flush().unwrap();
        b.flush().unwrap();
    }
    (got_a, got_b)
}

/// A loopback hub of three endpoints: `svc` (endpoint 0, a layer whose [`Gate`] admits
/// peer 1 only), and the tables and buffers for two more layers.
macro_rules! three_endpoints {
    ($hub:ident, $len:ident, $svc:ident, $p1:ident, $b1:ident, $p2:ident, $b2:ident) => {
        let mut net = vec![0u8; 3 * 32 * (MTU + 8)];
        let $hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
        let (mut ps, mut $p1, mut $p2) = (
            vec![PeerSlot::<usize, W>::new(); 3],
            vec![PeerSlot::<usize, W>::new(); 3],
            vec![PeerSlot::<usize, W>::new(); 3],
        );
        let $len = buffer_len(MTU, MTU, 16);
        let (mut bs, mut $b1, mut $b2) = (vec![0u8; $len], vec![0u8; $len], vec![0u8; $len]);
        let gate = Gate {
            allowed: vec![1],
            ..Gate::default()
        };
        let mut $svc = Reliable::<_, W, Gate>::with_index(
            $hub.endpoint(0).unwrap(),
            config(7),
            &mut ps,
            &mut bs,
            gate,
        )
        .unwrap();
    };
}

/// A loopback hub of two endpoints: `$svc` (endpoint 0, a layer with index `$gate`) and
/// `$pe` (endpoint 1, a plain layer).
macro_rules! two_endpoints {
    ($svc:ident, $pe:ident, $gate:expr) => {
        let mut net = vec![0u8; 2 * 64 * (MTU + 8)];
        let hub = LoopbackHub::<2>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
        let (mut ps, mut pp) = (
            vec![PeerSlot::<usize, W>::new(); 2],
            vec![PeerSlot::<usize, W>::new(); 2],
        );
        let len = buffer_len(MTU, MTU, 16);
        let (mut bs, mut bp) = (vec![0u8; len], vec![0u8; len]);
        let mut $svc = Reliable::<_, W, Gate>::with_index(
            hub.endpoint(0).unwrap(),
            config(7),
            &mut ps,
            &mut bs,
            $gate,
        )
        .unwrap();
        let mut $pe =
            Reliable::<_, W>::new(hub.endpoint(1).unwrap(), config(11), &mut pp, &mut bp).unwrap();
    };
}

#[test]
fn a_peer_the_index_refuses_gets_no_slot_and_its_sender_learns_why() {
    three_endpoints!(hub, len, svc, p1, b1, p2, b2);
    let mut good =
        Reliable::<_, W>::new(hub.endpoint(1).unwrap(), config(11), &mut p1, &mut b1).unwrap();
    let mut bad =
        Reliable::<_, W>::new(hub.endpoint(2).unwrap(), config(13), &mut p2, &mut b2).unwrap();

    good.send(0, 4, |b| b.copy_from_slice(b"good")).unwrap();
    bad.send(0, 3, |b| b.copy_from_slice(b"bad")).unwrap();
    good.flush().unwrap();
    bad.flush().unwrap();
    let mut got = Vec::new();
    while let Some(p) = svc.recv(|from, d| (from, d.to_vec())).unwrap() {
        got.push(p);
    }
    assert_eq!(
        got,
        vec![(1, b"good".to_vec())],
        "only the admitted peer is served"
    );
    let st = svc.stats();
    assert_eq!(
        (st.unknown_peers, st.refused_unknown_job, st.refusals_sent),
        (1, 1, 1)
    );
    // The refused sender fails its peer at once, with the reason.
    bad.poll(1).unwrap();
    assert_eq!(bad.recv(|_, _| ()).unwrap(), None);
    assert_eq!(
        bad.next_event(),
        Some(PeerEvent::Refused(
            0,
            Refusal {
                reason: RefusalReason::UnknownJob,
                in_use: 0,
                limit: 0
            }
        ))
    );
    assert_eq!(
        bad.send(0, 1, |b| b[0] = 0),
        Err(TransportError::Unreachable)
    );
    assert_eq!(bad.stats().refusals_received, 1);
    // A refusal is not accepted from a peer nothing was sent to, nor with a wrong epoch:
    // replaying the one `bad` got at `good` changes nothing.
    good.poll(1).unwrap();
    while good.recv(|_, _| ()).unwrap().is_some() {}
    assert_eq!(good.next_event(), None);
    // Pure acks from a refused peer are dropped without an answer.
    let sent_before = svc.stats().refusals_sent;
    svc.index_mut().allowed.clear();
    svc.release_peer(1);
    good.send(0, 1, |b| b[0] = 1).unwrap();
    good.flush().unwrap();
    while svc.recv(|_, _| ()).unwrap().is_some() {}
    assert_eq!(svc.stats().refusals_sent, sent_before + 1);
}

#[test]
fn a_freed_peer_that_comes_back_is_served_exactly_once_in_both_directions() {
    two_endpoints!(svc, pe, Gate::admitting(1));
    let mut now = 10;
    for round in 0..5u8 {
        // A request, its reply, and their acks.
        now += 2_000;
        pe.set_now(now);
        pe.send(0, 1, |b| b[0] = round).unwrap();
        let (to_pe, to_svc) = pump(&mut pe, &mut svc, now);
        assert!(to_pe.is_empty());
        assert_eq!(to_svc, vec![vec![round]], "round {round}");
        now += 2_000;
        svc.set_now(now);
        svc.send(1, 1, |b| b[0] = 100 + round).unwrap();
        let (to_pe, to_svc) = pump(&mut pe, &mut svc, now);
        assert_eq!(
            (to_pe, to_svc),
            (vec![vec![100 + round]], vec![]),
            "round {round}"
        );
        // Let every delayed ack go out, then go silent long enough to be freed.
        now += 10_000;
        pump(&mut pe, &mut svc, now);
        now += 100_000;
        svc.poll(now).unwrap();
        assert_eq!(svc.release_silent(60_000, |_| false), 0, "pick says no");
        assert_eq!(svc.release_silent(60_000, |p| p == 1), 1, "round {round}");
        assert_eq!(svc.index().released.len(), usize::from(round) + 1);
    }
    assert_eq!(svc.stats().peers_released, 5);
    assert_eq!(svc.stats().duplicates, 0);
    assert_eq!(
        pe.stats().duplicates,
        0,
        "the service's numbering went on above the PE's ack"
    );
    assert_eq!(pe.next_event(), None);
}

#[test]
fn an_idle_victim_is_evicted_for_a_newcomer_but_a_busy_one_is_not() {
    three_endpoints!(hub, len, svc, p1, b1, p2, b2);
    let mut one =
        Reliable::<_, W>::new(hub.endpoint(1).unwrap(), config(11), &mut p1, &mut b1).unwrap();
    let mut two =
        Reliable::<_, W>::new(hub.endpoint(2).unwrap(), config(13), &mut p2, &mut b2).unwrap();
    one.send(0, 1, |b| b[0] = 1).unwrap();
    one.flush().unwrap();
    assert!(svc.recv(|_, _| ()).unwrap().is_some());
    // Peer 1 is owed an ack: not idle, so naming it as the victim refuses peer 2.
    svc.index_mut().evict = Some(1);
    two.send(0, 1, |b| b[0] = 2).unwrap();
    two.flush().unwrap();
    assert_eq!(svc.recv(|_, _| ()).unwrap(), None);
    assert_eq!(svc.stats().refused_job_full, 1);
    // Once acknowledged, peer 1 is idle and gives way to peer 2.
    svc.poll(1_000_000).unwrap();
    svc.index_mut().evict = Some(1);
    let mut two_b = vec![PeerSlot::<usize, W>::new(); 3];
    let mut two_buf = vec![0u8; len];
    // The refused layer failed its peer: peer 2 comes back as a new incarnation.
    let mut two = Reliable::<_, W>::new(
        hub.endpoint(2).unwrap(),
        config(17),
        &mut two_b,
        &mut two_buf,
    )
    .unwrap();
    while two.recv(|_, _| ()).unwrap().is_some() {}
    two.send(0, 1, |b| b[0] = 3).unwrap();
    two.flush().unwrap();
    let got = svc.recv(|from, d| (from, d.to_vec())).unwrap();
    assert_eq!(got, Some((2, vec![3])));
    assert_eq!(svc.stats().peers_released, 1);
}

#[test]
fn a_challenged_sender_echoes_the_cookie_and_is_served_once() {
    let cookie = 0xc00c_1e00_0000_0042;
    two_endpoints!(
        svc,
        pe,
        Gate {
            allowed: vec![1],
            cookie: Some(cookie),
            ..Gate::default()
        }
    );
    pe.send(0, 5, |b| b.copy_from_slice(b"hello")).unwrap();
    pe.flush().unwrap();
    // The first frame gets no slot and is not delivered: it is answered with a challenge.
    assert_eq!(svc.recv(|_, d| d.to_vec()).unwrap(), None);
    assert_eq!(svc.index().known, Vec::<usize>::new());
    let st = svc.stats();
    assert_eq!(
        (
            st.challenged,
            st.bad_cookies,
            st.refusals_sent,
            st.unknown_peers
        ),
        (1, 0, 1, 0)
    );
    // The sender repeats its frame with the cookie at once (no timeout), without an event,
    // and it is delivered exactly once.
    let (to_pe, to_svc) = pump(&mut pe, &mut svc, 1);
    assert_eq!((to_pe, to_svc), (vec![], vec![b"hello".to_vec()]));
    assert_eq!(pe.next_event(), None);
    assert_eq!(pe.stats().challenges_received, 1);
    assert_eq!(pe.stats().refusals_received, 0);
    assert_eq!(svc.index().known, vec![1]);
    // Both ways from then on, no more cookies needed.
    svc.send(1, 5, |b| b.copy_from_slice(b"world")).unwrap();
    pe.send(0, 3, |b| b.copy_from_slice(b"bye")).unwrap();
    let (to_pe, to_svc) = pump(&mut pe, &mut svc, 10_000);
    assert_eq!(
        (to_pe, to_svc),
        (vec![b"world".to_vec()], vec![b"bye".to_vec()])
    );
    let st = svc.stats();
    assert_eq!((st.challenged, st.duplicates), (1, 0));
    // Both sides acknowledge: nothing stays in flight, nothing is resent later.
    let _ = pump(&mut pe, &mut svc, 20_000);
    assert_eq!((svc.in_flight(1), pe.in_flight(0)), (0, 0));
    let resent = svc.stats().retransmissions;
    let _ = pump(&mut pe, &mut svc, 40_000);
    assert_eq!(svc.stats().retransmissions, resent);
    assert_eq!(pe.next_event(), None);
}

#[test]
fn a_paused_peer_is_not_taken_until_resumed_then_exactly_once() {
    two_endpoints!(svc, pe, Gate::admitting(1));
    pe.send(0, 3, |b| b.copy_from_slice(b"one")).unwrap();
    let (_, got) = pump(&mut pe, &mut svc, 1);
    assert_eq!(got, vec![b"one".to_vec()]);
    assert!(svc.pause_receive(1, true));
    assert!(!svc.pause_receive(5, true), "no slot, nothing paused");
    // While paused: new frames are neither delivered nor acknowledged; the sender keeps
    // them and retransmits.
    pe.send(0, 3, |b| b.copy_from_slice(b"two")).unwrap();
    let (_, got) = pump(&mut pe, &mut svc, 5_000);
    assert!(got.is_empty(), "{got:?}");
    let dropped = svc.stats().paused_drops;
    assert!(dropped >= 1, "{:?}", svc.stats());
    let (_, got) = pump(&mut pe, &mut svc, 10_000);
    assert!(got.is_empty());
    assert!(
        svc.stats().paused_drops > dropped,
        "retransmitted meanwhile"
    );
    assert_eq!(pe.next_event(), None);
    // Resumed (before the sender's deadline): the next retransmission is taken, once.
    assert!(svc.pause_receive(1, false));
    let (_, got) = pump(&mut pe, &mut svc, 20_000);
    assert_eq!(got, vec![b"two".to_vec()]);
    let (_, got) = pump(&mut pe, &mut svc, 30_000);
    assert!(got.is_empty());
    assert_eq!(pe.next_event(), None);
}
