//! Closing a peer (TCP's TIME_WAIT) in the reliability layer, frame by frame: a service
//! endpoint whose session with a requester ended (its job ended on its node) keeps the
//! requester's slot closed for new data. The requester's last frames still arrive: a
//! retransmitted request whose reply was lost gets that reply (and is not run again), a
//! reply whose request was acknowledged is still retransmitted, a new request is refused
//! and never delivered, and a reply whose acknowledgement was lost (the requester left)
//! is dropped at the deadline without an event.

mod reliable_common;
use reliable_common::config;

use gsas_core::reliable::frame::{
    AckRepr, FLAG_REFUSED, Frame, FrameRepr, HEADER_LEN, Packets, RefusalRepr, emit_packet_prefix,
};
use gsas_core::reliable::seq::Seq;
use gsas_core::reliable::{PeerEvent, PeerSlot, Refusal, RefusalReason, Reliable, buffer_len};
use gsas_core::transport::Transport;
use gsas_core::transport::loopback::{LoopbackConfig, LoopbackEndpoint, LoopbackHub};

const MTU: usize = 256;
const W: usize = 8;
const SERVICE_EPOCH: u64 = 7;
const REQUESTER_EPOCH: u64 = 3;
/// The requester's endpoint on the hub.
const REQUESTER: usize = 1;

type Rel<'a, 'h, 's> = Reliable<'a, LoopbackEndpoint<'h, 's, 3>, W>;

const ENDED: Refusal = Refusal {
    reason: RefusalReason::JobEnded,
    in_use: 0,
    limit: 0,
};

/// What arrives at the raw requester.
#[derive(Debug)]
enum Got {
    Frame(FrameRepr, Vec<Vec<u8>>),
    Refusal(RefusalRepr),
}

/// A data frame of the requester: `seq`, with `base` and an optional ack.
fn data(seq: u32, base: u32, ack: Option<AckRepr>, packet: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER_LEN + 2 + packet.len()];
    FrameRepr {
        epoch: REQUESTER_EPOCH,
        dest_epoch: if ack.is_some() { SERVICE_EPOCH } else { 0 },
        seq: Some(Seq(seq)),
        base: Seq(base),
        ack,
        cookie: None,
    }
    .emit(&mut Frame::new_unchecked(&mut buf[..]));
    emit_packet_prefix(&mut buf[HEADER_LEN..], packet.len())
        .unwrap()
        .copy_from_slice(packet);
    buf
}

/// A pure ack of the requester: every service frame up to `cum` arrived.
fn ack(base: u32, cum: Seq) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER_LEN];
    FrameRepr {
        epoch: REQUESTER_EPOCH,
        dest_epoch: SERVICE_EPOCH,
        seq: None,
        base: Seq(base),
        ack: Some(AckRepr { cum, sack: 0 }),
        cookie: None,
    }
    .emit(&mut Frame::new_unchecked(&mut buf[..]));
    buf
}

fn put(raw: &mut LoopbackEndpoint<'_, '_, 3>, bytes: &[u8]) {
    raw.send(0, bytes.len(), |b| b.copy_from_slice(bytes))
        .unwrap();
}

/// Everything waiting at the raw requester, parsed.
fn drain(raw: &mut LoopbackEndpoint<'_, '_, 3>) -> Vec<Got> {
    let mut out = Vec::new();
    while let Some(got) = raw
        .recv(|_, bytes| {
            let frame = Frame::new_checked(bytes).expect("a whole header");
            if frame.flags() == FLAG_REFUSED {
                return Got::Refusal(RefusalRepr::parse(&frame).expect("a valid refusal"));
            }
            let repr = FrameRepr::parse(&frame).expect("a valid frame");
            let packets = Packets::new(frame.payload()).map(<[u8]>::to_vec).collect();
            Got::Frame(repr, packets)
        })
        .unwrap()
    {
        out.push(got);
    }
    out
}

/// Serves what arrived: every request is "executed" (counted) and answered with `reply`.
fn serve(service: &mut Rel<'_, '_, '_>, executed: &mut Vec<Vec<u8>>, reply: &[u8]) {
    while let Some((from, req)) = service.recv(|f, d| (f, d.to_vec())).unwrap() {
        executed.push(req);
        service
            .send(from, reply.len(), |b| b.copy_from_slice(reply))
            .unwrap();
    }
    service.flush().unwrap();
}

/// The one data frame in `got`: its sequence number and packets.
fn the_reply(got: &[Got]) -> (Seq, Vec<Vec<u8>>) {
    let data: Vec<_> = got
        .iter()
        .filter_map(|g| match g {
            Got::Frame(r, p) if r.seq.is_some() => Some((r.seq.unwrap(), p.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(data.len(), 1, "{got:?}");
    data[0].clone()
}

macro_rules! service {
    ($hub:ident, $service:ident, $requester:ident) => {
        let mut net = vec![0u8; 3 * 32 * (MTU + 8)];
        let $hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
        let mut peers = vec![PeerSlot::<usize, W>::new(); 3];
        let mut buf = vec![0u8; buffer_len(MTU, MTU, 8)];
        let mut $service = Rel::new(
            $hub.endpoint(0).unwrap(),
            config(SERVICE_EPOCH),
            &mut peers,
            &mut buf,
        )
        .unwrap();
        let mut $requester = $hub.endpoint(REQUESTER).unwrap();
    };
}

#[test]
fn a_closed_peer_gets_the_reply_it_lost_and_nothing_runs_twice() {
    service!(hub, service, requester);
    let request = data(50, 50, None, b"add");
    put(&mut requester, &request);
    let mut executed = Vec::new();
    serve(&mut service, &mut executed, b"done");
    // The reply is lost (drained, never read); then the job ends on the service's node.
    let (reply_seq, _) = the_reply(&drain(&mut requester));
    assert!(service.close_peer(REQUESTER, ENDED));
    assert!(service.is_closed(REQUESTER));

    // The requester retransmits after its timeout: the service answers with the reply
    // from its cache and does not deliver the request again.
    service.poll(600).unwrap();
    put(&mut requester, &request);
    serve(&mut service, &mut executed, b"again");
    assert_eq!(executed, vec![b"add".to_vec()]);
    let got = drain(&mut requester);
    let (seq, packets) = the_reply(&got);
    assert_eq!((seq, packets), (reply_seq, vec![b"done".to_vec()]));
    assert_eq!(service.stats().reply_cache_hits, 1);
    assert_eq!(service.stats().closed_refused, 0);

    // The requester acknowledges it: nothing is left for the peer, and no event came.
    put(&mut requester, &ack(51, reply_seq));
    serve(&mut service, &mut executed, b"again");
    assert_eq!(service.in_flight(REQUESTER), 0);
    service.poll(1_000_000).unwrap();
    assert!(drain(&mut requester).is_empty());
    assert_eq!(service.next_event(), None);
    assert_eq!(service.stats().closed_expired, 0);
    assert!(service.release_peer(REQUESTER));
}

#[test]
fn a_reply_whose_request_was_acknowledged_is_still_retransmitted_after_closing() {
    // The request was delivered twice (the network duplicated it): the early duplicate
    // got a pure ack, so the requester will not retransmit; the reply is lost. Only the
    // service's own retransmission can complete the operation, closed or not.
    service!(hub, service, requester);
    let request = data(50, 50, None, b"add");
    put(&mut requester, &request);
    let mut executed = Vec::new();
    serve(&mut service, &mut executed, b"done");
    service.poll(100).unwrap();
    put(&mut requester, &request);
    serve(&mut service, &mut executed, b"again");
    assert_eq!(executed.len(), 1);
    let got = drain(&mut requester);
    let (reply_seq, _) = the_reply(&got);
    assert!(
        got.iter()
            .any(|g| matches!(g, Got::Frame(r, _) if r.seq.is_none()
                && r.ack.map(|a| a.cum) == Some(Seq(50)))),
        "the duplicate was acknowledged: {got:?}"
    );
    service.close_peer(REQUESTER, ENDED);
    // Past the retransmission timeout (1 us in these tests' config) the reply goes out
    // again.
    service.poll(5_000).unwrap();
    let (seq, packets) = the_reply(&drain(&mut requester));
    assert_eq!((seq, packets), (reply_seq, vec![b"done".to_vec()]));
    assert_eq!(service.stats().retransmissions, 1);
}

#[test]
fn new_data_from_a_closed_peer_is_refused_and_never_delivered() {
    service!(hub, service, requester);
    put(&mut requester, &data(50, 50, None, b"first"));
    let mut executed = Vec::new();
    serve(&mut service, &mut executed, b"done");
    let (reply_seq, _) = the_reply(&drain(&mut requester));
    service.close_peer(REQUESTER, ENDED);

    // A request the service never saw, sent after the job ended there (carrying the ack
    // of the reply), twice: refused both times, never delivered, never acknowledged.
    let late = data(
        51,
        51,
        Some(AckRepr {
            cum: reply_seq,
            sack: 0,
        }),
        b"late",
    );
    for round in 1..=2u64 {
        put(&mut requester, &late);
        serve(&mut service, &mut executed, b"no");
        assert_eq!(executed, vec![b"first".to_vec()]);
        let got = drain(&mut requester);
        assert_eq!(got.len(), 1, "{got:?}");
        let Got::Refusal(r) = &got[0] else {
            panic!("a refusal, not {got:?}")
        };
        assert_eq!(r.reason, RefusalReason::JobEnded);
        assert_eq!(
            r.dest_epoch, REQUESTER_EPOCH,
            "echoes the refused frame's epoch"
        );
        assert_eq!(service.stats().closed_refused, round);
    }
    // The ack the late frame carried was taken: the reply is acknowledged.
    assert_eq!(service.in_flight(REQUESTER), 0);
    // A duplicate of the first request shows what the service acknowledges: 50, not 51.
    service.poll(100).unwrap();
    put(&mut requester, &data(50, 50, None, b"first"));
    serve(&mut service, &mut executed, b"no");
    let got = drain(&mut requester);
    assert!(
        matches!(&got[..], [Got::Frame(r, p)] if r.seq.is_none() && p.is_empty()
            && r.ack.map(|a| a.cum) == Some(Seq(50))),
        "{got:?}"
    );
    assert_eq!(executed.len(), 1);
}

#[test]
fn a_closed_peer_that_left_loses_its_replies_at_the_deadline_without_an_event() {
    service!(hub, service, requester);
    put(&mut requester, &data(50, 50, None, b"add"));
    let mut executed = Vec::new();
    serve(&mut service, &mut executed, b"done");
    // The requester got the reply, but its acknowledgement was lost and it left.
    drain(&mut requester);
    service.close_peer(REQUESTER, ENDED);
    // The owner may sleep until the next retransmission: the gaps grow (backoff, up to
    // max_rto = 8 us here) and nothing is due in between.
    let mut now = 0;
    let mut gaps = Vec::new();
    while let Some(at) = service.next_timer() {
        assert!(at >= now, "a timer in the past: {at} < {now}");
        service.poll(at - 1).unwrap();
        assert_eq!(
            service.next_timer(),
            Some(at),
            "nothing happens before the timer"
        );
        gaps.push(at - now);
        now = at;
        service.poll(now).unwrap();
        assert!(now < 200_000, "timers until {now}");
    }
    // Frames closed at 0: the last timer is the deadline (50 us here).
    assert_eq!(now, 50_000, "{gaps:?}");
    assert!(gaps.iter().all(|&g| g <= 8_000), "{gaps:?}");
    assert!(
        gaps.iter().filter(|&&g| g == 8_000).count() >= 3,
        "{gaps:?}"
    );
    let st = service.stats();
    assert!(st.retransmissions > 0, "{st:?}");
    assert_eq!(st.closed_expired, 1, "{st:?}");
    assert_eq!(st.peers_failed, 0, "{st:?}");
    assert_eq!(service.next_event(), None);
    assert!(!service.is_failed(REQUESTER));
    assert_eq!(service.in_flight(REQUESTER), 0);
    // Nothing more goes out, and the slot can be freed as silent.
    drain(&mut requester);
    service.poll(now + 1_000_000).unwrap();
    assert!(drain(&mut requester).is_empty());
    assert_eq!(service.release_silent(0, |_| true), 1);
}

#[test]
fn a_requester_learns_that_the_job_ended_from_the_refusal() {
    // Both ends are layers: the requester's layer reports the refusal as an event with
    // the reason, and abandons the request.
    let mut net = vec![0u8; 3 * 32 * (MTU + 8)];
    let hub = LoopbackHub::<3>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let (mut ps, mut pr) = (
        vec![PeerSlot::<usize, W>::new(); 3],
        vec![PeerSlot::<usize, W>::new(); 3],
    );
    let (mut bs, mut br) = (
        vec![0u8; buffer_len(MTU, MTU, 8)],
        vec![0u8; buffer_len(MTU, MTU, 8)],
    );
    let mut service = Rel::new(
        hub.endpoint(0).unwrap(),
        config(SERVICE_EPOCH),
        &mut ps,
        &mut bs,
    )
    .unwrap();
    let mut requester = Rel::new(
        hub.endpoint(REQUESTER).unwrap(),
        config(REQUESTER_EPOCH),
        &mut pr,
        &mut br,
    )
    .unwrap();
    requester
        .send(0, 5, |b| b.copy_from_slice(b"first"))
        .unwrap();
    requester.flush().unwrap();
    let mut executed = Vec::new();
    serve(&mut service, &mut executed, b"done");
    assert_eq!(
        requester.recv(|_, d| d.to_vec()).unwrap(),
        Some(b"done".to_vec())
    );
    service.close_peer(REQUESTER, ENDED);
    requester
        .send(0, 4, |b| b.copy_from_slice(b"late"))
        .unwrap();
    requester.flush().unwrap();
    serve(&mut service, &mut executed, b"no");
    assert_eq!(requester.recv(|_, d| d.to_vec()).unwrap(), None);
    assert_eq!(requester.next_event(), Some(PeerEvent::Refused(0, ENDED)));
    assert_eq!(requester.in_flight(0), 0);
    assert_eq!(executed, vec![b"first".to_vec()]);
}
