//! Writes with an attached signal (put-with-signal in one request): the service writes the
//! data, then updates the signal word, and refuses a bad signal before writing anything;
//! the client sends the final fragment of a bulk write, which carries the signal, only
//! once every other fragment is acknowledged, so the signal follows the whole transfer
//! however the fragments are delivered.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering as Mem};

use gsas_core::client::{Client, Completion, OpError};
use gsas_core::service::{AmoKind, Handled, Memory, Segment, Service, WordMemory};
use gsas_core::transport::{Capabilities, Ordering, Transport, TransportError};
use gsas_core::wire::{
    ErrorCode, GlobalAddr, Packet, Reply, ReplyRepr, Request, RequestRepr, SIGNAL_LEN, SenderId,
    Signal, SignalOp,
};

const KEY: u64 = 0x51;
const PE: u16 = 2;
/// Heap: bytes 0..4096 of the words; the signal words live in a second segment.
const HEAP_LEN: u64 = 4096;
const SIG_BASE: usize = 4096;
const SIG_LEN: u64 = 64;
const WORDS: usize = (4096 + 64) / 8;

/// What the service did to memory, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Write {
        segment: u8,
        offset: u64,
        len: usize,
    },
    Atomic {
        segment: u8,
        offset: u64,
        kind: AmoKind,
        operand: u64,
    },
}

/// Word memory that logs every write and atomic.
struct Logged<'a> {
    inner: WordMemory<'a>,
    log: RefCell<Vec<Event>>,
}

impl Memory for Logged<'_> {
    fn contains(&self, base: usize, len: u64) -> bool {
        self.inner.contains(base, len)
    }
    fn read(&self, seg: &Segment, offset: u64, out: &mut [u8]) {
        self.inner.read(seg, offset, out)
    }
    fn write(&self, seg: &Segment, offset: u64, data: &[u8]) {
        self.log.borrow_mut().push(Event::Write {
            segment: seg.segment,
            offset,
            len: data.len(),
        });
        self.inner.write(seg, offset, data)
    }
    fn atomic32(&self, seg: &Segment, offset: u64, op: AmoKind, operand: u32, cmp: u32) -> u32 {
        self.inner.atomic32(seg, offset, op, operand, cmp)
    }
    fn atomic64(&self, seg: &Segment, offset: u64, op: AmoKind, operand: u64, cmp: u64) -> u64 {
        self.log.borrow_mut().push(Event::Atomic {
            segment: seg.segment,
            offset,
            kind: op,
            operand,
        });
        self.inner.atomic64(seg, offset, op, operand, cmp)
    }
}

fn service(words: &[AtomicU64]) -> Service<Logged<'_>, 4> {
    let memory = Logged {
        inner: WordMemory::new(words),
        log: RefCell::new(Vec::new()),
    };
    let mut s = Service::new(SenderId::new(1).unwrap(), memory);
    for (segment, base, len) in [(0, 0, HEAP_LEN), (1, SIG_BASE, SIG_LEN)] {
        s.register(Segment {
            job: 1,
            key: KEY,
            pe: PE,
            segment,
            base,
            len,
        })
        .unwrap();
    }
    s
}

fn heap(offset: u64) -> GlobalAddr {
    GlobalAddr::new(PE, 0, offset).unwrap()
}

fn sig(offset: u64) -> GlobalAddr {
    GlobalAddr::new(PE, 1, offset).unwrap()
}

fn words() -> Vec<AtomicU64> {
    (0..WORDS).map(|_| AtomicU64::new(0)).collect()
}

fn byte(words: &[AtomicU64], at: usize) -> u8 {
    words[at / 8].load(Mem::Relaxed).to_le_bytes()[at % 8]
}

fn encode(body: Request<'_>) -> Vec<u8> {
    let repr = RequestRepr {
        sender: SenderId::new(9).unwrap(),
        token: 5,
        body,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    buf
}

fn handle(s: &mut Service<Logged<'_>, 4>, packet: &[u8]) -> Reply<'static> {
    let mut out = [0u8; 64];
    let Ok(Handled::Replied(n)) = s.handle(KEY, packet, &mut out) else {
        panic!("no reply");
    };
    match ReplyRepr::parse(&out[..n]).unwrap().body {
        Reply::Ack => Reply::Ack,
        Reply::Error(code) => Reply::Error(code),
        other => panic!("unexpected reply {other:?}"),
    }
}

#[test]
fn the_service_writes_the_data_then_applies_the_signal() {
    let w = words();
    let mut s = service(&w);
    let data: Vec<u8> = (1..=100).collect();
    for (op, value, want) in [(SignalOp::Set, 7, 7), (SignalOp::Add, 5, 12)] {
        s.memory().log.borrow_mut().clear();
        let packet = encode(Request::WriteSignal {
            addr: heap(3),
            data: &data,
            signal: Signal {
                addr: sig(8),
                op,
                value,
            },
        });
        assert_eq!(handle(&mut s, &packet), Reply::Ack);
        let kind = if op == SignalOp::Set {
            AmoKind::Set
        } else {
            AmoKind::Add
        };
        assert_eq!(
            *s.memory().log.borrow(),
            [
                Event::Write {
                    segment: 0,
                    offset: 3,
                    len: 100
                },
                Event::Atomic {
                    segment: 1,
                    offset: 8,
                    kind,
                    operand: value
                },
            ]
        );
        assert_eq!(w[(SIG_BASE + 8) / 8].load(Mem::Relaxed), want);
        for (i, &b) in data.iter().enumerate() {
            assert_eq!(byte(&w, 3 + i), b, "byte {i}");
        }
    }
}

#[test]
fn a_bad_signal_is_refused_and_nothing_is_written() {
    let w = words();
    let mut s = service(&w);
    let data = [0xeeu8; 16];
    let other_pe = GlobalAddr::new(PE + 1, 1, 0).unwrap();
    for (at, code) in [
        (sig(60), ErrorCode::OutOfBounds),
        (sig(64), ErrorCode::OutOfBounds),
        (sig(4), ErrorCode::Misaligned),
        (GlobalAddr::new(PE, 7, 0).unwrap(), ErrorCode::NoSegment),
        (other_pe, ErrorCode::NoSegment),
    ] {
        let signal = Signal {
            addr: at,
            op: SignalOp::Set,
            value: 1,
        };
        let inline = encode(Request::WriteSignal {
            addr: heap(0),
            data: &data,
            signal,
        });
        assert_eq!(handle(&mut s, &inline), Reply::Error(code), "{at:?}");
        let bulk = encode(Request::BulkWriteSignal {
            frag: gsas_core::wire::Fragment {
                base: heap(0),
                total: 32,
                offset: 16,
            },
            data: &data,
            signal,
        });
        assert_eq!(handle(&mut s, &bulk), Reply::Error(code), "{at:?}");
    }
    // An operation other than SET/ADD on the wire.
    let mut bad = encode(Request::WriteSignal {
        addr: heap(0),
        data: &data,
        signal: Signal {
            addr: sig(0),
            op: SignalOp::Add,
            value: 1,
        },
    });
    bad[1] = 0x34; // u64 FETCH_ADD
    assert_eq!(handle(&mut s, &bad), Reply::Error(ErrorCode::BadAtomic));
    // A good signal with data out of bounds: refused whole too.
    let past = encode(Request::WriteSignal {
        addr: heap(HEAP_LEN - 8),
        data: &data,
        signal: Signal {
            addr: sig(0),
            op: SignalOp::Set,
            value: 1,
        },
    });
    assert_eq!(handle(&mut s, &past), Reply::Error(ErrorCode::OutOfBounds));
    assert!(s.memory().log.borrow().is_empty(), "memory touched");
    assert!(w.iter().all(|x| x.load(Mem::Relaxed) == 0));
    assert_eq!(s.stats().refusals(ErrorCode::OutOfBounds), 5);
}

/// Records what the client sends.
struct Net {
    mtu: usize,
    sent: VecDeque<Vec<u8>>,
}

impl Transport for Net {
    type Peer = u16;
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_inline: self.mtu,
            mtu: self.mtu,
            ordering: Ordering::Unordered,
            reliable: true,
            rdma_put: false,
            rdma_get: false,
            atomic_offload: false,
            atomics_coherent_with_cpu: false,
        }
    }
    fn send<R, F: FnOnce(&mut [u8]) -> R>(
        &mut self,
        _: u16,
        len: usize,
        fill: F,
    ) -> Result<R, TransportError> {
        let mut b = vec![0u8; len];
        let r = fill(&mut b);
        self.sent.push_back(b);
        Ok(r)
    }
    fn recv<R, F: FnOnce(u16, &[u8]) -> R>(&mut self, _: F) -> Result<Option<R>, TransportError> {
        Ok(None)
    }
}

fn signal_of(packet: &[u8]) -> Option<Signal> {
    match RequestRepr::parse(&Packet::new_checked(packet).unwrap())
        .unwrap()
        .body
    {
        Request::WriteSignal { signal, .. } | Request::BulkWriteSignal { signal, .. } => {
            Some(signal)
        }
        Request::Write { .. } | Request::BulkWrite { .. } => None,
        other => panic!("not a write: {other:?}"),
    }
}

#[test]
fn a_write_that_fits_one_packet_carries_its_signal() {
    let w = words();
    let mut s = service(&w);
    let mut net = Net {
        mtu: 32 + SIGNAL_LEN + 64,
        sent: VecDeque::new(),
    };
    let mut client: Client<u16, 8, 1> = Client::new(SenderId::new(9).unwrap());
    let signal = Signal {
        addr: sig(0),
        op: SignalOp::Add,
        value: 3,
    };
    let issued = client
        .write_signal(&mut net, 1, 0, 77, heap(0), &[0x42; 64], signal)
        .unwrap();
    assert!(issued.all_sent && issued.packets == 1);
    let packet = net.sent.pop_front().unwrap();
    assert_eq!(signal_of(&packet), Some(signal));
    let mut out = [0u8; 64];
    let Ok(Handled::Replied(n)) = s.handle(KEY, &packet, &mut out) else {
        panic!("no reply")
    };
    let mut done = Vec::new();
    client.handle_reply(&out[..n], |c| {
        if let Completion::Done { tag, result, .. } = c {
            done.push((tag, result))
        }
    });
    assert_eq!(done, [(77, Ok(None))]);
    assert_eq!(w[SIG_BASE / 8].load(Mem::Relaxed), 3);
    // One byte more than fits: two fragments, the signal on the second.
    let issued = client
        .write_signal(&mut net, 1, 0, 78, heap(0), &[0x43; 65], signal)
        .unwrap();
    assert!(!issued.all_sent && issued.packets == 1);
    assert_eq!(signal_of(&net.sent[0]), None);
}

/// The final fragment (with the signal) waits until every other fragment is answered, in
/// whatever order they are delivered and answered; then the service applies the signal
/// after the last data.
#[test]
fn a_bulk_write_applies_its_signal_after_every_fragment() {
    let w = words();
    let mut s = service(&w);
    // Fragments of 112 - 32 - 16 = 64 bytes, cut at multiples of 64 of the target offset:
    // 1000 bytes at offset 40 are 24 bytes, 15 x 64 bytes and 16 bytes, 17 fragments.
    let mut net = Net {
        mtu: 112,
        sent: VecDeque::new(),
    };
    let mut client: Client<u16, 8, 1> = Client::new(SenderId::new(9).unwrap());
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251 + 1) as u8).collect();
    let signal = Signal {
        addr: sig(16),
        op: SignalOp::Set,
        value: 0xfeed,
    };
    let issued = client
        .write_signal(&mut net, 1, 0, 5, heap(40), &data, signal)
        .unwrap();
    assert_eq!(issued.packets, 16, "every fragment but the final one");
    assert!(!issued.all_sent);
    let mut early: Vec<Vec<u8>> = net.sent.drain(..).collect();
    assert!(early.iter().all(|p| signal_of(p).is_none()));
    // Delivered in reverse order (the reliability layer may reorder frames).
    early.reverse();
    let mut replies = Vec::new();
    for p in &early {
        let mut out = [0u8; 64];
        let Ok(Handled::Replied(n)) = s.handle(KEY, p, &mut out) else {
            panic!("no reply")
        };
        replies.push(out[..n].to_vec());
        // Nothing more may go out while fragments are unanswered.
        assert_eq!(
            client
                .resume(&mut net, issued.handle, &data)
                .unwrap()
                .packets,
            0
        );
    }
    assert_eq!(w[(SIG_BASE + 16) / 8].load(Mem::Relaxed), 0);
    // Answers in another order; the final fragment goes out only after the last one.
    let last = replies.remove(7);
    for r in replies.iter().rev() {
        client.handle_reply(r, |_| {});
        let again = client.resume(&mut net, issued.handle, &data).unwrap();
        assert_eq!(again.packets, 0, "final fragment sent before every ACK");
    }
    client.handle_reply(&last, |_| {});
    let again = client.resume(&mut net, issued.handle, &data).unwrap();
    assert!(again.all_sent && again.packets == 1);
    let fin = net.sent.pop_front().unwrap();
    assert_eq!(signal_of(&fin), Some(signal));
    s.memory().log.borrow_mut().clear();
    let mut out = [0u8; 64];
    let Ok(Handled::Replied(n)) = s.handle(KEY, &fin, &mut out) else {
        panic!("no reply")
    };
    let log = s.memory().log.borrow().clone();
    assert_eq!(log.len(), 2);
    assert!(matches!(log[0], Event::Write { offset, len, .. } if offset + len as u64 == 1040));
    assert!(matches!(
        log[1],
        Event::Atomic {
            segment: 1,
            offset: 16,
            ..
        }
    ));
    assert_eq!(w[(SIG_BASE + 16) / 8].load(Mem::Relaxed), 0xfeed);
    for (i, &b) in data.iter().enumerate() {
        assert_eq!(byte(&w, 40 + i), b, "byte {i}");
    }
    let mut done = Vec::new();
    client.handle_reply(&out[..n], |c| {
        if let Completion::Done { tag, result, .. } = c {
            done.push((tag, result))
        }
    });
    assert_eq!(done, [(5, Ok(None))]);
}

/// A refused signal fails the operation with the service's code (what `quiet` reports).
#[test]
fn a_refused_signal_fails_the_write() {
    let w = words();
    let mut s = service(&w);
    let mut net = Net {
        mtu: 256,
        sent: VecDeque::new(),
    };
    let mut client: Client<u16, 8, 1> = Client::new(SenderId::new(9).unwrap());
    let signal = Signal {
        addr: sig(12),
        op: SignalOp::Set,
        value: 1,
    };
    client
        .write_signal(&mut net, 1, 0, 6, heap(0), &[1; 8], signal)
        .unwrap();
    let p = net.sent.pop_front().unwrap();
    let mut out = [0u8; 64];
    let Ok(Handled::Replied(n)) = s.handle(KEY, &p, &mut out) else {
        panic!("no reply")
    };
    let mut done = Vec::new();
    client.handle_reply(&out[..n], |c| {
        if let Completion::Done { result, .. } = c {
            done.push(result)
        }
    });
    assert_eq!(done, [Err(OpError::Remote(ErrorCode::Misaligned))]);
    assert!(w.iter().all(|x| x.load(Mem::Relaxed) == 0));
}
