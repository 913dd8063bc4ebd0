//! Property tests of the wire formats: `parse(emit(x)) == x` for every representation, and
//! no parse entry point panics on arbitrary bytes.

use gsas_core::wire::{
    AtomicDesc, ControlCode, ErrorCode, Fragment, GlobalAddr, Packet, Reply, ReplyPacket,
    ReplyRepr, Repr, Request, RequestRepr, SenderId, Signal, SignalOp, peek_sender, peek_token,
    peek_type,
};

/// Request bodies [`request`] builds: the nine types, WRITE and BULK_WRITE with a signal.
const REQUEST_KINDS: u8 = 11;
use proptest::collection::vec;
use proptest::prelude::*;

fn sender() -> impl Strategy<Value = SenderId> {
    (0..=SenderId::MAX).prop_map(|v| SenderId::new(v).unwrap())
}

fn addr() -> impl Strategy<Value = GlobalAddr> {
    any::<u64>().prop_map(GlobalAddr::from_raw)
}

fn desc() -> impl Strategy<Value = AtomicDesc> {
    any::<u8>().prop_filter_map("valid descriptor", |b| AtomicDesc::from_byte(b).ok())
}

/// A fragment that can hold `len` bytes: total >= offset + len.
fn fragment(base: GlobalAddr, len: u32, total: u32, offset: u32) -> Fragment {
    let total = total.max(len);
    let offset = offset % (total - len + 1);
    Fragment {
        base,
        total,
        offset,
    }
}

/// Inputs from which one request of each kind is built (the payload must outlive the repr).
#[derive(Debug, Clone)]
struct Inputs {
    sender: SenderId,
    token: u32,
    addr: GlobalAddr,
    data: Vec<u8>,
    desc: AtomicDesc,
    a: u64,
    b: u64,
    total: u32,
    offset: u32,
    code: u8,
}

fn inputs() -> impl Strategy<Value = Inputs> {
    (
        sender(),
        any::<u32>(),
        addr(),
        vec(any::<u8>(), 1..300),
        desc(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<u8>(),
    )
        .prop_map(
            |(sender, token, addr, data, desc, a, b, total, offset, code)| Inputs {
                sender,
                token,
                addr,
                data,
                desc,
                a,
                b,
                total,
                offset,
                code,
            },
        )
}

fn signal(i: &Inputs) -> Signal {
    Signal {
        addr: GlobalAddr::from_raw(i.b),
        op: if i.code % 2 == 0 {
            SignalOp::Set
        } else {
            SignalOp::Add
        },
        value: i.a,
    }
}

/// Request `kind` (0..REQUEST_KINDS) built from `i`.
fn request(kind: u8, i: &Inputs) -> RequestRepr<'_> {
    let len = i.data.len() as u32;
    let body = match kind {
        0 => Request::Read {
            addr: i.addr,
            len: (i.a % 56 + 1) as u8,
        },
        1 => Request::Write {
            addr: i.addr,
            data: &i.data,
        },
        2 => Request::BulkRead {
            frag: fragment(i.addr, (i.a as u32).max(1), i.total, i.offset),
            len: (i.a as u32).max(1),
        },
        3 => Request::BulkWrite {
            frag: fragment(i.addr, len, i.total, i.offset),
            data: &i.data,
        },
        4 => {
            let mask = i.desc.operand_mask();
            let comparand = if i.desc.has_comparand() {
                i.b & mask
            } else {
                0
            };
            Request::Atomic {
                addr: i.addr,
                desc: i.desc,
                operand: i.a & mask,
                comparand,
            }
        }
        5 => Request::Alloc {
            addr: i.addr,
            size: i.a,
        },
        6 => Request::Free { addr: i.addr },
        7 => Request::Fork {
            frag: fragment(i.addr, len, i.total, i.offset),
            data: &i.data,
        },
        8 => Request::Control {
            code: ControlCode::from(i.code),
            arg0: i.a,
            arg1: i.b,
        },
        9 => Request::WriteSignal {
            addr: i.addr,
            data: &i.data,
            signal: signal(i),
        },
        _ => {
            // The final fragment of its transfer.
            let total = i.total.max(len);
            Request::BulkWriteSignal {
                frag: Fragment {
                    base: i.addr,
                    total,
                    offset: total - len,
                },
                data: &i.data,
                signal: signal(i),
            }
        }
    };
    RequestRepr {
        sender: i.sender,
        token: i.token,
        body,
    }
}

fn reply(kind: u8, i: &Inputs) -> ReplyRepr<'_> {
    let body = match kind {
        0 => Reply::Ack,
        1 => Reply::Data(&i.data[..i.data.len().min(56)]),
        2 => Reply::Error(ErrorCode::from(i.code)),
        _ => Reply::BulkData {
            sender: i.sender,
            frag: fragment(i.addr, i.data.len() as u32, i.total, i.offset),
            data: &i.data,
        },
    };
    ReplyRepr {
        token: i.token,
        body,
    }
}

/// Calls every accessor of both views and every parser; none may panic.
fn poke(bytes: &[u8]) {
    let _ = peek_type(bytes);
    let _ = peek_token(bytes);
    let _ = peek_sender(bytes);
    if let Ok(p) = Packet::new_checked(bytes) {
        let _ = (
            p.packet_type(),
            p.sub(),
            p.sender(),
            p.addr(),
            p.arg(),
            p.total_len(),
        );
        let _ = (
            p.frag_offset(),
            p.token(),
            p.token_high(),
            p.frag_len(),
            p.payload(),
        );
        if p.len() >= 40 {
            let _ = p.comparand();
        }
        let _ = RequestRepr::parse(&p);
    }
    if let Ok(p) = ReplyPacket::new_checked(bytes) {
        let _ = (
            p.packet_type(),
            p.status(),
            p.payload_len(),
            p.flags(),
            p.token(),
            p.payload(),
        );
    }
    let _ = RequestRepr::parse(&Packet::new_unchecked(bytes));
    let _ = ReplyRepr::parse(bytes);
    if let Ok(repr) = Repr::parse(bytes) {
        // Whatever parses re-emits to bytes that parse to the same thing.
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut out);
        assert_eq!(Repr::parse(&out).unwrap(), repr);
    }
}

/// Byte 0 drawn mostly from the known types so that parsing gets past the type check.
fn packet_bytes() -> impl Strategy<Value = Vec<u8>> {
    let first = prop_oneof![
        3 => prop::sample::select(vec![1u8, 2, 3, 4, 5, 6, 7, 8, 9, 0x80, 0x81, 0x82, 0x83]),
        1 => any::<u8>(),
    ];
    (first, vec(any::<u8>(), 0..120)).prop_map(|(f, mut rest)| {
        rest.insert(0, f);
        rest
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn request_round_trip(kind in 0u8..REQUEST_KINDS, i in inputs()) {
        let repr = request(kind, &i);
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        let parsed = RequestRepr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap();
        prop_assert_eq!(parsed, repr);
        prop_assert_eq!(Repr::parse(&buf).unwrap(), Repr::Request(repr));
        prop_assert_eq!(peek_token(&buf), repr.token);
        prop_assert_eq!(peek_sender(&buf), Some(repr.sender));
    }

    #[test]
    fn reply_round_trip(kind in 0u8..4, i in inputs()) {
        let repr = reply(kind, &i);
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf);
        prop_assert_eq!(ReplyRepr::parse(&buf).unwrap(), repr);
        prop_assert_eq!(Repr::parse(&buf).unwrap(), Repr::Reply(repr));
        prop_assert_eq!(peek_token(&buf), repr.token);
    }

    #[test]
    fn global_addr_round_trip(pe in any::<u16>(), seg in any::<u8>(), off in 0..=GlobalAddr::MAX_OFFSET) {
        let a = GlobalAddr::new(pe, seg, off).unwrap();
        prop_assert_eq!((a.pe(), a.segment(), a.offset()), (pe, seg, off));
        prop_assert_eq!(GlobalAddr::from_raw(a.raw()), a);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in packet_bytes()) {
        poke(&bytes);
    }

    #[test]
    fn mutated_packets_never_panic(kind in 0u8..REQUEST_KINDS + 4, i in inputs(), flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in any::<prop::sample::Index>()) {
        let mut buf = if kind < REQUEST_KINDS {
            let repr = request(kind, &i);
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
            buf
        } else {
            let repr = reply(kind - REQUEST_KINDS, &i);
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf);
            buf
        };
        for (at, value) in flips {
            let at = at.index(buf.len());
            buf[at] = value;
        }
        poke(&buf);
        let cut = cut.index(buf.len() + 1);
        poke(&buf[..cut]);
    }
}
