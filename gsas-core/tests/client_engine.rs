//! Client engine tests: tokens and generations, stale and duplicate replies, fragmentation
//! and out-of-order reassembly, back-pressure and resumption, per-context counters, and
//! end-to-end runs client -> service engine -> client through a tiny in-test loopback.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;

use gsas_core::client::{
    Client, ClientError, Completion, HostRequest, OpError, OpKind, ReplyOutcome, WINDOW,
};
use gsas_core::service::{Handled, Segment, Service, WordMemory};
use gsas_core::transport::{Capabilities, Ordering, Transport, TransportError};
use gsas_core::wire::{
    AtomicDesc, AtomicOp, AtomicType, ControlCode, ErrorCode, GlobalAddr, PacketType, Reply,
    ReplyRepr, Request, SenderId,
};
use proptest::prelude::*;

const KEY: u64 = 42;
const PEER: u16 = 1;
const MEM: usize = 16 * 1024;

/// Loopback towards one service: records what the client sends, with an optional budget of
/// sends after which it reports `WouldBlock`.
struct Net {
    caps: Capabilities,
    sent: VecDeque<Vec<u8>>,
    budget: Option<usize>,
}

impl Net {
    fn new(max_inline: usize, mtu: usize) -> Self {
        Net {
            caps: Capabilities {
                max_inline,
                mtu,
                ordering: Ordering::Unordered,
                reliable: true,
                rdma_put: false,
                rdma_get: false,
                atomic_offload: false,
                atomics_coherent_with_cpu: false,
            },
            sent: VecDeque::new(),
            budget: None,
        }
    }
}

impl Transport for Net {
    type Peer = u16;

    fn capabilities(&self) -> Capabilities {
        self.caps
    }

    fn send<R, F: FnOnce(&mut [u8]) -> R>(
        &mut self,
        peer: u16,
        len: usize,
        fill: F,
    ) -> Result<R, TransportError> {
        if peer != PEER {
            return Err(TransportError::UnknownPeer);
        }
        if len > self.caps.mtu {
            return Err(TransportError::TooLarge);
        }
        if let Some(b) = self.budget.as_mut() {
            if *b == 0 {
                return Err(TransportError::WouldBlock);
            }
            *b -= 1;
        }
        let mut buf = vec![0u8; len];
        let r = fill(&mut buf);
        self.sent.push_back(buf);
        Ok(r)
    }

    fn recv<R, F: FnOnce(u16, &[u8]) -> R>(&mut self, _: F) -> Result<Option<R>, TransportError> {
        Ok(None)
    }
}

/// An owned completion.
#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Data {
        tag: u64,
        ctx: usize,
        offset: u32,
        data: Vec<u8>,
    },
    Done {
        tag: u64,
        ctx: usize,
        kind: OpKind,
        result: Result<Option<u64>, OpError>,
    },
}

fn own(c: Completion<'_>) -> Ev {
    match c {
        Completion::Data {
            tag,
            ctx,
            offset,
            data,
        } => Ev::Data {
            tag,
            ctx,
            offset,
            data: data.to_vec(),
        },
        Completion::Done {
            tag,
            ctx,
            kind,
            result,
        } => Ev::Done {
            tag,
            ctx,
            kind,
            result,
        },
    }
}

type Svc<'a> = Service<WordMemory<'a>, 4>;
type Cl = Client<u16, 32, 2>;

fn words() -> Vec<AtomicU64> {
    (0..MEM / 8).map(|_| AtomicU64::new(0)).collect()
}

fn service(words: &[AtomicU64]) -> Svc<'_> {
    let mut s = Service::new(SenderId::new(100).unwrap(), WordMemory::new(words));
    s.register(Segment {
        job: 1,
        key: KEY,
        pe: PEER,
        segment: 0,
        base: 0,
        len: MEM as u64,
    })
    .unwrap();
    s
}

fn client() -> Cl {
    Client::new(SenderId::new(7).unwrap())
}

fn at(offset: u64) -> GlobalAddr {
    GlobalAddr::new(PEER, 0, offset).unwrap()
}

/// Runs every queued request through the service and returns the replies.
fn serve(net: &mut Net, svc: &mut Svc<'_>) -> Vec<Vec<u8>> {
    let mut replies = Vec::new();
    while let Some(packet) = net.sent.pop_front() {
        let mut out = vec![0u8; 1 << 16];
        match svc.handle(KEY, &packet, &mut out) {
            Ok(gsas_core::service::Handled::Replied(n)) => {
                out.truncate(n);
                replies.push(out);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    replies
}

fn deliver<const N: usize, const C: usize>(
    c: &mut Client<u16, N, C>,
    replies: &[Vec<u8>],
) -> (Vec<Ev>, Vec<ReplyOutcome>) {
    let mut events = Vec::new();
    let mut outcomes = Vec::new();
    for r in replies {
        outcomes.push(c.handle_reply(r, |e| events.push(own(e))));
    }
    (events, outcomes)
}

/// Serves and delivers everything until nothing is queued.
fn settle(c: &mut Cl, net: &mut Net, svc: &mut Svc<'_>) -> Vec<Ev> {
    let mut events = Vec::new();
    loop {
        let replies = serve(net, svc);
        if replies.is_empty() {
            return events;
        }
        events.extend(deliver(c, &replies).0);
        c.pump(net).unwrap();
    }
}

/// Assembles the data events of `tag` into a buffer of `len` bytes; checks every byte was
/// delivered exactly once.
fn assemble(events: &[Ev], tag: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut seen = vec![false; len];
    for e in events {
        if let Ev::Data {
            tag: t,
            offset,
            data,
            ..
        } = e
        {
            if *t == tag {
                for (i, &b) in data.iter().enumerate() {
                    let at = *offset as usize + i;
                    assert!(!seen[at], "byte {at} delivered twice");
                    seen[at] = true;
                    out[at] = b;
                }
            }
        }
    }
    assert!(seen.iter().all(|&s| s), "missing bytes");
    out
}

fn done(events: &[Ev], tag: u64) -> Vec<Result<Option<u64>, OpError>> {
    events
        .iter()
        .filter_map(|e| match e {
            Ev::Done { tag: t, result, .. } if *t == tag => Some(*result),
            _ => None,
        })
        .collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

#[test]
fn inline_and_bulk_round_trips() {
    let w = words();
    let mut svc = service(&w);
    let mut net = Net::new(64, 1024);
    let mut c = client();

    let small = pattern(8, 1);
    let issued = c.write(&mut net, PEER, 0, 1, at(16), &small).unwrap();
    assert!(issued.all_sent && issued.packets == 1);
    assert_eq!(net.sent[0][0], u8::from(PacketType::Write));
    let big = pattern(5000, 2);
    let issued = c.write(&mut net, PEER, 0, 2, at(1000), &big).unwrap();
    assert_eq!(issued.packets, 5000usize.div_ceil(1024 - 32) as u32);
    assert!(
        net.sent
            .iter()
            .skip(1)
            .all(|p| p[0] == u8::from(PacketType::BulkWrite) && p.len() <= 1024)
    );
    assert_eq!(c.outstanding(0), 2);
    let ev = settle(&mut c, &mut net, &mut svc);
    assert_eq!(done(&ev, 1), [Ok(None)]);
    assert_eq!(done(&ev, 2), [Ok(None)]);
    assert_eq!(c.outstanding(0), 0);

    c.read(&mut net, PEER, 1, 3, at(16), 8).unwrap();
    assert_eq!(net.sent[0][0], u8::from(PacketType::Read));
    c.read(&mut net, PEER, 1, 4, at(1000), 5000).unwrap();
    assert!(
        net.sent
            .iter()
            .skip(1)
            .all(|p| p[0] == u8::from(PacketType::BulkRead))
    );
    let ev = settle(&mut c, &mut net, &mut svc);
    assert_eq!(assemble(&ev, 3, 8), small);
    assert_eq!(assemble(&ev, 4, 5000), big);
    assert_eq!(done(&ev, 4), [Ok(None)]);
    assert!(
        ev.iter()
            .all(|e| !matches!(e, Ev::Data { ctx, .. } | Ev::Done { ctx, .. } if *ctx != 1))
    );
    assert_eq!(svc.stats().bytes_written(), 5008);
    assert_eq!(svc.stats().bytes_read(), 5008);
    assert_eq!(c.stats().started, 4);
    assert_eq!(c.stats().completed, 4);
}

/// A transport whose inline size exceeds its MTU (a small MTU with 128-byte slots): a write
/// or read that would fit the slot but not the MTU goes bulk instead of failing with
/// `TooLarge` (found by `random_traffic_matches_reference` with mtu = 33 and a 2-byte
/// write, when fragments could be 1 byte long).
#[test]
fn inline_choice_is_bounded_by_the_mtu() {
    let w = words();
    let mut svc = service(&w);
    let mut net = Net::new(128, 100);
    let mut c = client();
    let data = pattern(80, 9);
    let issued = c.write(&mut net, PEER, 0, 1, at(0), &data).unwrap();
    assert!(issued.all_sent, "{issued:?}");
    assert!(
        net.sent
            .iter()
            .all(|p| p[0] == u8::from(PacketType::BulkWrite) && p.len() <= 100)
    );
    c.read(&mut net, PEER, 0, 2, at(0), 80).unwrap();
    let ev = settle(&mut c, &mut net, &mut svc);
    assert_eq!(done(&ev, 1), [Ok(None)]);
    assert_eq!(assemble(&ev, 2, 80), data);
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn inline_choice_follows_capabilities() {
    let w = words();
    let mut svc = service(&w);
    // Inline slots of 40 bytes: a 16-byte read (24-byte reply) is inline, a 40-byte read
    // (48-byte reply) is not; an 8-byte write (40 bytes) is inline, a 9-byte write is not.
    let mut net = Net::new(40, 256);
    let mut c = client();
    c.read(&mut net, PEER, 0, 1, at(0), 16).unwrap();
    c.read(&mut net, PEER, 0, 2, at(0), 40).unwrap();
    c.write(&mut net, PEER, 0, 3, at(0), &[1; 8]).unwrap();
    c.write(&mut net, PEER, 0, 4, at(0), &[1; 9]).unwrap();
    let types: Vec<u8> = net.sent.iter().map(|p| p[0]).collect();
    assert_eq!(types, [0x01, 0x03, 0x02, 0x04]);
    settle(&mut c, &mut net, &mut svc);
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn atomics_end_to_end() {
    let w = words();
    let mut svc = service(&w);
    let mut net = Net::new(64, 256);
    let mut c = client();
    let d = |op, ty| AtomicDesc::new(op, ty).unwrap();
    c.atomic(
        &mut net,
        PEER,
        0,
        1,
        at(8),
        d(AtomicOp::Set, AtomicType::U64),
        40,
        0,
    )
    .unwrap();
    c.atomic(
        &mut net,
        PEER,
        0,
        2,
        at(8),
        d(AtomicOp::FetchAdd, AtomicType::U64),
        2,
        0,
    )
    .unwrap();
    c.atomic(
        &mut net,
        PEER,
        0,
        3,
        at(8),
        d(AtomicOp::Fetch, AtomicType::I64),
        0,
        0,
    )
    .unwrap();
    c.atomic(
        &mut net,
        PEER,
        0,
        4,
        at(4),
        d(AtomicOp::CompareSwap, AtomicType::U32),
        9,
        0,
    )
    .unwrap();
    c.atomic(
        &mut net,
        PEER,
        0,
        5,
        at(4),
        d(AtomicOp::CompareSwap, AtomicType::U32),
        7,
        0,
    )
    .unwrap();
    c.atomic(
        &mut net,
        PEER,
        0,
        6,
        at(4),
        d(AtomicOp::FetchInc, AtomicType::I32),
        0,
        0,
    )
    .unwrap();
    assert_eq!(net.sent[3].len(), 40, "compare-swap carries the comparand");
    let ev = settle(&mut c, &mut net, &mut svc);
    assert_eq!(done(&ev, 1), [Ok(None)]);
    assert_eq!(done(&ev, 2), [Ok(Some(40))]);
    assert_eq!(done(&ev, 3), [Ok(Some(42))]);
    assert_eq!(done(&ev, 4), [Ok(Some(0))]);
    assert_eq!(done(&ev, 5), [Ok(Some(9))], "comparand 0 does not match 9");
    assert_eq!(done(&ev, 6), [Ok(Some(9))]);
    assert!(ev.iter().all(|e| matches!(
        e,
        Ev::Done {
            kind: OpKind::Atomic,
            ..
        }
    )));
}

#[test]
fn out_of_order_and_duplicated_bulk_replies() {
    let w = words();
    let mut svc = service(&w);
    let data = pattern(3000, 9);
    let mut net = Net::new(64, 32 + 256);
    let mut c = client();
    c.write(&mut net, PEER, 0, 1, at(100), &data).unwrap();
    settle(&mut c, &mut net, &mut svc);
    c.read(&mut net, PEER, 0, 2, at(100), 3000).unwrap();
    let mut replies = serve(&mut net, &mut svc);
    assert_eq!(replies.len(), 12);
    replies.reverse();
    let dup: Vec<Vec<u8>> = replies
        .iter()
        .flat_map(|r| [r.clone(), r.clone()])
        .collect();
    let (ev, outcomes) = deliver(&mut c, &dup);
    assert_eq!(assemble(&ev, 2, 3000), data);
    assert_eq!(done(&ev, 2), [Ok(None)]);
    let stale = outcomes
        .iter()
        .filter(|o| **o == ReplyOutcome::Stale)
        .count();
    assert_eq!(stale, 12, "every duplicate is recognised");
    assert_eq!(c.stats().stale, 12);
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == ReplyOutcome::Matched { completed: true })
            .count(),
        1
    );
}

#[test]
fn stale_replies_after_slot_reuse_are_ignored() {
    let w = words();
    let mut svc = service(&w);
    let mut net = Net::new(64, 256);
    let mut c: Client<u16, 1, 1> = Client::new(SenderId::new(7).unwrap());
    c.read(&mut net, PEER, 0, 1, at(0), 8).unwrap();
    let first = serve(&mut net, &mut svc);
    let mut events = Vec::new();
    c.handle_reply(&first[0], |e| events.push(own(e)));
    assert_eq!(events.len(), 2);
    // The only slot is reused by a second operation; the first reply comes again.
    c.write(&mut net, PEER, 0, 2, at(0), &[5; 4]).unwrap();
    assert_eq!(
        c.handle_reply(&first[0], |_| panic!("stale reply delivered")),
        ReplyOutcome::Stale
    );
    let second = serve(&mut net, &mut svc);
    assert_ne!(
        first[0][4..8],
        second[0][4..8],
        "tokens differ across reuse"
    );
    let mut events = Vec::new();
    assert_eq!(
        c.handle_reply(&second[0], |e| events.push(own(e))),
        ReplyOutcome::Matched { completed: true }
    );
    assert_eq!(
        events,
        [Ev::Done {
            tag: 2,
            ctx: 0,
            kind: OpKind::Write,
            result: Ok(None)
        }]
    );
    // Tokens that name no slot at all.
    assert_eq!(
        c.handle_reply(&[0x80, 0, 0, 0, 0, 0, 0, 0], |_| panic!()),
        ReplyOutcome::Stale
    );
    assert_eq!(
        c.handle_reply(&[0x80, 0, 0, 0, 2, 0, 0, 0], |_| panic!()),
        ReplyOutcome::Stale
    );
    assert_eq!(c.stats().stale, 3);
}

#[test]
fn op_table_full_is_busy() {
    let w = words();
    let mut svc = service(&w);
    let mut net = Net::new(64, 256);
    let mut c: Client<u16, 2, 1> = Client::new(SenderId::new(7).unwrap());
    c.read(&mut net, PEER, 0, 1, at(0), 8).unwrap();
    c.read(&mut net, PEER, 0, 2, at(0), 8).unwrap();
    assert_eq!(
        c.read(&mut net, PEER, 0, 3, at(0), 8),
        Err(ClientError::Busy)
    );
    assert_eq!(net.sent.len(), 2);
    let replies = serve(&mut net, &mut svc);
    deliver(&mut c, &replies[..1]);
    c.read(&mut net, PEER, 0, 3, at(0), 8).unwrap();
    assert_eq!(c.in_flight(), 2);
}

#[test]
fn would_block_on_first_packet_leaves_nothing() {
    let mut net = Net::new(64, 256);
    net.budget = Some(0);
    let mut c = client();
    assert_eq!(
        c.write(&mut net, PEER, 0, 1, at(0), &[1; 4000]),
        Err(ClientError::WouldBlock)
    );
    assert_eq!(
        c.read(&mut net, PEER, 0, 1, at(0), 4),
        Err(ClientError::WouldBlock)
    );
    assert_eq!(
        (c.in_flight(), c.outstanding(0), c.stats().started),
        (0, 0, 0)
    );
    assert_eq!(
        c.read(&mut net, 9, 0, 1, at(0), 4),
        Err(ClientError::Transport(TransportError::UnknownPeer))
    );
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn partial_bulk_write_resumes_without_resending() {
    let w = words();
    let mut svc = service(&w);
    // 128-byte fragments: 1280 bytes are 10 fragments.
    let mut net = Net::new(64, 32 + 128);
    let mut c = client();
    let data = pattern(1280, 3);
    net.budget = Some(3);
    let issued = c.write(&mut net, PEER, 0, 1, at(0), &data).unwrap();
    assert_eq!((issued.all_sent, issued.packets), (false, 3));
    // Replies for the first fragments arrive while the rest is pending.
    let replies = serve(&mut net, &mut svc);
    let (ev, _) = deliver(&mut c, &replies);
    assert!(
        ev.is_empty(),
        "not complete before every fragment is answered"
    );
    assert_eq!(
        c.resume(&mut net, issued.handle, &data[..1279]),
        Err(ClientError::PayloadMismatch)
    );
    net.budget = Some(0);
    assert_eq!(c.resume(&mut net, issued.handle, &data).unwrap().packets, 0);
    let mut rounds = 0;
    loop {
        net.budget = Some(2);
        let r = c.resume(&mut net, issued.handle, &data).unwrap();
        rounds += 1;
        if r.all_sent {
            break;
        }
        assert_eq!(r.packets, 2);
    }
    assert_eq!(rounds, 4);
    net.budget = None;
    let ev = settle(&mut c, &mut net, &mut svc);
    assert_eq!(done(&ev, 1), [Ok(None)]);
    assert_eq!(
        svc.stats().requests(PacketType::BulkWrite),
        10,
        "each fragment sent once"
    );
    assert_eq!(svc.stats().bytes_written(), 1280);
    assert_eq!(
        c.resume(&mut net, issued.handle, &data),
        Err(ClientError::StaleHandle)
    );
    c.read(&mut net, PEER, 0, 2, at(0), 1280).unwrap();
    let ev = settle(&mut c, &mut net, &mut svc);
    assert_eq!(assemble(&ev, 2, 1280), data);
}

#[test]
fn window_limits_fragments_in_flight() {
    let w = words();
    let mut svc = service(&w);
    // 64-byte fragments (one granule): a 6400-byte write needs 100 packets, at most WINDOW
    // unanswered.
    let mut net = Net::new(32, 96);
    let mut c = client();
    let data = pattern(6400, 5);
    let issued = c.write(&mut net, PEER, 0, 1, at(0), &data).unwrap();
    assert_eq!((issued.all_sent, issued.packets), (false, WINDOW));
    assert_eq!(
        c.resume(&mut net, issued.handle, &data).unwrap().packets,
        0,
        "window full"
    );
    // Answer only the first 10 fragments: 10 more may go.
    let replies = serve(&mut net, &mut svc);
    deliver(&mut c, &replies[..10]);
    assert_eq!(
        c.resume(&mut net, issued.handle, &data).unwrap().packets,
        10
    );
    deliver(&mut c, &replies[10..]);
    let r = c.resume(&mut net, issued.handle, &data).unwrap();
    assert!(r.all_sent);
    assert_eq!(r.packets, 100 - WINDOW - 10);
    let ev = settle(&mut c, &mut net, &mut svc);
    assert_eq!(done(&ev, 1), [Ok(None)]);

    // A read of 100 fragments continues through `pump`.
    c.read(&mut net, PEER, 0, 2, at(0), 6400).unwrap();
    assert_eq!(net.sent.len(), WINDOW as usize);
    assert_eq!(c.pump(&mut net).unwrap(), 0);
    let ev = settle(&mut c, &mut net, &mut svc);
    assert_eq!(assemble(&ev, 2, 6400), data);
    assert_eq!(c.pump(&mut net).unwrap(), 0);
}

#[test]
fn per_context_counters() {
    let w = words();
    let mut svc = service(&w);
    let mut net = Net::new(64, 256);
    let mut c = client();
    for i in 0..3 {
        c.write(&mut net, PEER, 0, i, at(0), &[1; 8]).unwrap();
    }
    c.read(&mut net, PEER, 1, 9, at(0), 8).unwrap();
    assert_eq!(
        (c.outstanding(0), c.outstanding(1), c.outstanding(2)),
        (3, 1, 0)
    );
    assert_eq!(
        c.read(&mut net, PEER, 2, 9, at(0), 8),
        Err(ClientError::BadContext)
    );
    let replies = serve(&mut net, &mut svc);
    deliver(&mut c, &replies[3..]);
    assert_eq!((c.outstanding(0), c.outstanding(1)), (3, 0));
    deliver(&mut c, &replies[..2]);
    assert_eq!(c.outstanding(0), 1);
    deliver(&mut c, &replies[2..3]);
    assert_eq!(c.outstanding(0), 0);
}

#[test]
fn remote_errors_complete_the_operation() {
    let w = words();
    let mut svc = service(&w);
    let mut net = Net::new(32, 96);
    let mut c = client();
    // Unknown PE: every fragment is refused; the read stops sending after the error and
    // completes once the fragments already sent are answered.
    let bad = GlobalAddr::new(PEER, 5, 0).unwrap();
    c.read(&mut net, PEER, 0, 1, bad, 6400).unwrap();
    assert_eq!(net.sent.len(), WINDOW as usize);
    let replies = serve(&mut net, &mut svc);
    let (ev, _) = deliver(&mut c, &replies);
    assert_eq!(done(&ev, 1), [Err(OpError::Remote(ErrorCode::NoSegment))]);
    assert!(
        ev.iter().all(|e| matches!(e, Ev::Done { .. })),
        "no data from a refused read"
    );
    assert_eq!(
        c.pump(&mut net).unwrap(),
        0,
        "nothing more sent after the error"
    );
    assert_eq!(c.stats().remote_errors, u64::from(WINDOW));

    let mut net = Net::new(64, 256);
    c.write(&mut net, PEER, 0, 2, at(MEM as u64 - 4), &[1; 8])
        .unwrap();
    let ev = settle(&mut c, &mut net, &mut svc);
    assert_eq!(done(&ev, 2), [Err(OpError::Remote(ErrorCode::OutOfBounds))]);
    assert_eq!(c.outstanding(0), 0);
}

#[test]
fn mismatched_replies_fail_the_operation() {
    let mut net = Net::new(64, 256);
    let mut c = client();
    c.read(&mut net, PEER, 0, 1, at(0), 8).unwrap();
    let token = u32::from_le_bytes(net.sent[0][24..28].try_into().unwrap());
    let mut ack = [0u8; 8];
    ReplyRepr {
        token,
        body: Reply::Ack,
    }
    .emit(&mut ack);
    let mut events = Vec::new();
    c.handle_reply(&ack, |e| events.push(own(e)));
    assert_eq!(
        events,
        [Ev::Done {
            tag: 1,
            ctx: 0,
            kind: OpKind::Read,
            result: Err(OpError::BadReply)
        }]
    );
    // DATA of the wrong length for an 8-byte read.
    c.read(&mut net, PEER, 0, 2, at(0), 8).unwrap();
    let token = u32::from_le_bytes(net.sent[1][24..28].try_into().unwrap());
    let mut data = [0u8; 12];
    ReplyRepr {
        token,
        body: Reply::Data(&[1, 2, 3, 4]),
    }
    .emit(&mut data);
    let mut events = Vec::new();
    c.handle_reply(&data, |e| events.push(own(e)));
    assert_eq!(done(&events, 2), [Err(OpError::BadReply)]);
    assert_eq!(c.stats().bad_replies, 2);
    assert!(matches!(
        c.handle_reply(&[0x81, 0, 9, 0], |_| {}),
        ReplyOutcome::Malformed(_)
    ));
    assert!(matches!(
        c.handle_reply(&[0x01; 32], |_| {}),
        ReplyOutcome::Malformed(_)
    ));
    assert_eq!(c.stats().malformed, 2);
}

#[test]
fn abort_and_fail_peer() {
    let w = words();
    let mut svc = service(&w);
    let mut net = Net::new(64, 256);
    let mut c = client();
    let a = c.read(&mut net, PEER, 0, 1, at(0), 8).unwrap();
    c.write(&mut net, PEER, 1, 2, at(0), &[1; 8]).unwrap();
    c.atomic(
        &mut net,
        PEER,
        1,
        3,
        at(0),
        AtomicDesc::new(AtomicOp::Inc, AtomicType::U64).unwrap(),
        0,
        0,
    )
    .unwrap();
    let mut events = Vec::new();
    assert!(c.abort(a.handle, |e| events.push(own(e))));
    assert!(!c.abort(a.handle, |_| panic!()));
    assert!(!c.is_pending(a.handle));
    assert_eq!(
        events,
        [Ev::Done {
            tag: 1,
            ctx: 0,
            kind: OpKind::Read,
            result: Err(OpError::Aborted)
        }]
    );
    assert_eq!(c.fail_peer(PEER + 1, |_| panic!()), 0);
    let mut events = Vec::new();
    assert_eq!(c.fail_peer(PEER, |e| events.push(own(e))), 2);
    assert_eq!(events.len(), 2);
    assert_eq!(
        (c.outstanding(0), c.outstanding(1), c.in_flight()),
        (0, 0, 0)
    );
    // Late replies for the aborted operations are stale.
    let replies = serve(&mut net, &mut svc);
    let (ev, outcomes) = deliver(&mut c, &replies);
    assert!(ev.is_empty());
    assert!(outcomes.iter().all(|o| *o == ReplyOutcome::Stale));
}

#[test]
fn host_requests_are_matched_like_everything_else() {
    let w = words();
    let mut svc = service(&w);
    let mut net = Net::new(64, 32 + 64);
    let mut c = client();
    c.host_request(
        &mut net,
        PEER,
        0,
        1,
        HostRequest::Control {
            code: ControlCode::Ping,
            arg0: 3,
            arg1: 4,
        },
    )
    .unwrap();
    c.host_request(
        &mut net,
        PEER,
        0,
        2,
        HostRequest::Alloc {
            addr: at(0),
            size: 4096,
        },
    )
    .unwrap();
    let spec = pattern(150, 4);
    let fork = c
        .host_request(
            &mut net,
            PEER,
            0,
            3,
            HostRequest::Fork {
                addr: at(0),
                spec: &spec,
            },
        )
        .unwrap();
    assert_eq!(fork.packets, 3, "FORK fragmented to the MTU");
    let mut replies = Vec::new();
    let mut fork_spec = vec![0u8; 150];
    while let Some(packet) = net.sent.pop_front() {
        let mut out = [0u8; 64];
        match svc.handle(KEY, &packet, &mut out).unwrap() {
            Handled::Host(repr) => {
                let body = match repr.body {
                    Request::Control {
                        code: ControlCode::Ping,
                        arg0: 3,
                        arg1: 4,
                    } => Reply::Data(&[0xaa, 0xbb]),
                    Request::Alloc { size: 4096, .. } => Reply::Error(ErrorCode::HostFailure),
                    Request::Fork { frag, data } => {
                        fork_spec[frag.offset as usize..][..data.len()].copy_from_slice(data);
                        Reply::Ack
                    }
                    other => panic!("unexpected host action {other:?}"),
                };
                let reply = ReplyRepr {
                    token: repr.token,
                    body,
                };
                let mut bytes = vec![0u8; reply.buffer_len()];
                reply.emit(&mut bytes);
                replies.push(bytes);
            }
            other => panic!("expected a host action, got {other:?}"),
        }
    }
    assert_eq!(fork_spec, spec);
    let (ev, _) = deliver(&mut c, &replies);
    assert_eq!(
        ev[0],
        Ev::Data {
            tag: 1,
            ctx: 0,
            offset: 0,
            data: vec![0xaa, 0xbb]
        }
    );
    assert_eq!(done(&ev, 1), [Ok(None)]);
    assert_eq!(done(&ev, 2), [Err(OpError::Remote(ErrorCode::HostFailure))]);
    assert_eq!(done(&ev, 3), [Ok(None)]);
    assert!(
        ev.iter()
            .all(|e| !matches!(e, Ev::Done { kind, .. } if *kind != OpKind::Host))
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random writes and reads of random sizes over a random MTU (from the smallest that
    /// carries one granule per fragment), replies delivered in a random order with random
    /// duplicates: memory and read data match a reference.
    #[test]
    fn random_traffic_matches_reference(
        mtu in 96usize..600,
        ops in prop::collection::vec((any::<bool>(), 0usize..4000, 1usize..3000, any::<u8>()), 1..12),
        order in any::<u64>(),
    ) {
        let w = words();
        let mut svc = service(&w);
        let mut net = Net::new(64, mtu);
        let mut c = client();
        let mut reference = vec![0u8; MEM];
        let mut rng = order | 1;
        let mut next = move || { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; rng };
        for (tag, &(is_write, offset, len, seed)) in ops.iter().enumerate() {
            let len = len.min(MEM - offset);
            let tag = tag as u64;
            let data = pattern(len, seed);
            let mut issued = if is_write {
                c.write(&mut net, PEER, 0, tag, at(offset as u64), &data).unwrap()
            } else {
                c.read(&mut net, PEER, 0, tag, at(offset as u64), len).unwrap()
            };
            let mut events = Vec::new();
            loop {
                let mut replies = serve(&mut net, &mut svc);
                if replies.is_empty() && issued.all_sent {
                    break;
                }
                for i in (1..replies.len()).rev() {
                    replies.swap(i, next() as usize % (i + 1));
                }
                if !replies.is_empty() && next() % 3 == 0 {
                    let d = replies[next() as usize % replies.len()].clone();
                    replies.push(d);
                }
                events.extend(deliver(&mut c, &replies).0);
                if !issued.all_sent {
                    issued = c.resume(&mut net, issued.handle, if is_write { &data } else { &[] }).unwrap();
                }
            }
            prop_assert_eq!(done(&events, tag), [Ok(None)]);
            if is_write {
                reference[offset..offset + len].copy_from_slice(&data);
            } else {
                prop_assert_eq!(assemble(&events, tag, len), reference[offset..offset + len].to_vec());
            }
        }
        prop_assert_eq!(c.in_flight(), 0);
        let mut all = vec![0u8; MEM];
        use gsas_core::service::Memory;
        svc.memory().read(svc.segments().iter().next().unwrap(), 0, &mut all);
        prop_assert!(all == reference, "memory differs from the reference");
    }
}
