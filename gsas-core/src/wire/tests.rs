//! Round trips on hand-written byte arrays for every packet type, and parse errors.

use super::*;

fn sender(id: u64) -> SenderId {
    SenderId::new(id).unwrap()
}

fn addr(pe: u16, seg: u8, off: u64) -> GlobalAddr {
    GlobalAddr::new(pe, seg, off).unwrap()
}

/// Parses `bytes` as a request, compares with `repr`, emits `repr` and compares the bytes.
fn request_round_trip(bytes: &[u8], repr: RequestRepr<'_>) {
    let parsed = RequestRepr::parse(&Packet::new_checked(bytes).unwrap()).unwrap();
    assert_eq!(parsed, repr);
    assert_eq!(Repr::parse(bytes).unwrap(), Repr::Request(repr));
    assert_eq!(repr.buffer_len(), bytes.len());
    let mut out = [0x5au8; 128];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    assert_eq!(&out[..bytes.len()], bytes);
    assert!(
        out[bytes.len()..].iter().all(|&b| b == 0x5a),
        "emit wrote past buffer_len"
    );
    // Every strict prefix is refused, never a panic.
    for cut in 0..bytes.len() {
        assert!(
            Repr::parse(&bytes[..cut]).is_err(),
            "prefix of {cut} bytes parsed"
        );
    }
}

fn reply_round_trip(bytes: &[u8], repr: ReplyRepr<'_>) {
    assert_eq!(ReplyRepr::parse(bytes).unwrap(), repr);
    assert_eq!(Repr::parse(bytes).unwrap(), Repr::Reply(repr));
    assert_eq!(repr.buffer_len(), bytes.len());
    let mut out = [0x5au8; 128];
    repr.emit(&mut out);
    assert_eq!(&out[..bytes.len()], bytes);
    assert!(
        out[bytes.len()..].iter().all(|&b| b == 0x5a),
        "emit wrote past buffer_len"
    );
    for cut in 0..bytes.len() {
        assert!(
            Repr::parse(&bytes[..cut]).is_err(),
            "prefix of {cut} bytes parsed"
        );
    }
}

#[rustfmt::skip]
const READ: [u8; 32] = [
    0x01, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, // type, sub, sender
    0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, // pe 2, seg 0, offset 0x100
    0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 8
    0xef, 0xbe, 0xad, 0xde, 0x00, 0x00, 0x00, 0x00, // token
];

#[test]
fn read_bytes() {
    request_round_trip(
        &READ,
        RequestRepr {
            sender: sender(0x0605_0403_0201),
            token: 0xdead_beef,
            body: Request::Read {
                addr: addr(2, 0, 0x100),
                len: 8,
            },
        },
    );
}

#[test]
fn write_bytes() {
    #[rustfmt::skip]
    let bytes = [
        0x02, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x10, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x00, // pe 3, seg 1, offset 0x10
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xaa, 0xbb, 0xcc,
    ];
    request_round_trip(
        &bytes,
        RequestRepr {
            sender: sender(1),
            token: 5,
            body: Request::Write {
                addr: addr(3, 1, 0x10),
                data: &[0xaa, 0xbb, 0xcc],
            },
        },
    );
}

#[test]
fn bulk_read_bytes() {
    #[rustfmt::skip]
    let bytes = [
        0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, // pe 1, seg 0, offset 0x1000
        0x00, 0x20, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, // total 0x2000, offset 0x800
        0x09, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, // token 9, fragment 0x400
    ];
    request_round_trip(
        &bytes,
        RequestRepr {
            sender: sender(1),
            token: 9,
            body: Request::BulkRead {
                frag: Fragment {
                    base: addr(1, 0, 0x1000),
                    total: 0x2000,
                    offset: 0x800,
                },
                len: 0x400,
            },
        },
    );
}

#[test]
fn bulk_write_bytes() {
    #[rustfmt::skip]
    let bytes = [
        0x04, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
        0x08, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, // total 8, offset 4
        0x0a, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, // token 10, fragment 4
        0x01, 0x02, 0x03, 0x04,
    ];
    request_round_trip(
        &bytes,
        RequestRepr {
            sender: sender(1),
            token: 10,
            body: Request::BulkWrite {
                frag: Fragment {
                    base: addr(1, 0, 0x1000),
                    total: 8,
                    offset: 4,
                },
                data: &[1, 2, 3, 4],
            },
        },
    );
}

#[test]
fn atomic_bytes() {
    #[rustfmt::skip]
    let fadd = [
        0x05, 0x34, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, // FETCH_ADD U64
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    request_round_trip(
        &fadd,
        RequestRepr {
            sender: sender(2),
            token: 0x100,
            body: Request::Atomic {
                addr: addr(0, 0, 8),
                desc: AtomicDesc::new(AtomicOp::FetchAdd, AtomicType::U64).unwrap(),
                operand: 1,
                comparand: 0,
            },
        },
    );
    #[rustfmt::skip]
    let cswap = [
        0x05, 0x03, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, // COMPARE_SWAP I32
        0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // operand 7
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // comparand 5
    ];
    request_round_trip(
        &cswap,
        RequestRepr {
            sender: sender(2),
            token: 1,
            body: Request::Atomic {
                addr: addr(0, 0, 4),
                desc: AtomicDesc::new(AtomicOp::CompareSwap, AtomicType::I32).unwrap(),
                operand: 7,
                comparand: 5,
            },
        },
    );
}

#[test]
fn host_request_bytes() {
    #[rustfmt::skip]
    let alloc = [
        0x06, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, // pe 4
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // size 0x10000
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    request_round_trip(
        &alloc,
        RequestRepr {
            sender: sender(1),
            token: 3,
            body: Request::Alloc {
                addr: addr(4, 0, 0),
                size: 0x10000,
            },
        },
    );
    let mut free = alloc;
    free[0] = 0x07;
    free[16..24].fill(0);
    free[24] = 4;
    request_round_trip(
        &free,
        RequestRepr {
            sender: sender(1),
            token: 4,
            body: Request::Free {
                addr: addr(4, 0, 0),
            },
        },
    );
    #[rustfmt::skip]
    let fork = [
        0x08, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // total 3, offset 0
        0x06, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, // token 6, fragment 3
        b'a', b'b', b'c',
    ];
    request_round_trip(
        &fork,
        RequestRepr {
            sender: sender(1),
            token: 6,
            body: Request::Fork {
                frag: Fragment {
                    base: GlobalAddr::from_raw(0),
                    total: 3,
                    offset: 0,
                },
                data: b"abc",
            },
        },
    );
    #[rustfmt::skip]
    let control = [
        0x09, 0x06, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // Barrier
        0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x22, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    request_round_trip(
        &control,
        RequestRepr {
            sender: sender(1),
            token: 7,
            body: Request::Control {
                code: ControlCode::Barrier,
                arg0: 0x11,
                arg1: 0x22,
            },
        },
    );
    let mut unknown_control = control;
    unknown_control[1] = 0xf0;
    let parsed = RequestRepr::parse(&Packet::new_checked(&unknown_control[..]).unwrap()).unwrap();
    assert!(matches!(
        parsed.body,
        Request::Control {
            code: ControlCode::Unknown(0xf0),
            ..
        }
    ));
}

#[test]
fn reply_bytes() {
    reply_round_trip(
        &[0x80, 0, 0, 0, 0x05, 0, 0, 0],
        ReplyRepr {
            token: 5,
            body: Reply::Ack,
        },
    );
    reply_round_trip(
        &[0x81, 0, 4, 0, 0x06, 0, 0, 0, 1, 2, 3, 4],
        ReplyRepr {
            token: 6,
            body: Reply::Data(&[1, 2, 3, 4]),
        },
    );
    reply_round_trip(
        &[0x83, 3, 0, 0, 0x07, 0, 0, 0x01],
        ReplyRepr {
            token: 0x0100_0007,
            body: Reply::Error(ErrorCode::OutOfBounds),
        },
    );
    #[rustfmt::skip]
    let bulk = [
        0x82, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, // service id 9
        0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
        0x06, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, // total 6, offset 4
        0x0b, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, // token 11, fragment 2
        0xfe, 0xff,
    ];
    reply_round_trip(
        &bulk,
        ReplyRepr {
            token: 11,
            body: Reply::BulkData {
                sender: sender(9),
                frag: Fragment {
                    base: addr(1, 0, 0x1000),
                    total: 6,
                    offset: 4,
                },
                data: &[0xfe, 0xff],
            },
        },
    );
}

#[test]
fn padding_is_ignored_where_allowed() {
    let mut padded = [0u8; 64];
    padded[..32].copy_from_slice(&READ);
    padded[40] = 0x77;
    assert!(matches!(
        Repr::parse(&padded).unwrap(),
        Repr::Request(RequestRepr {
            body: Request::Read { len: 8, .. },
            ..
        })
    ));
    let mut data = [0u8; 64];
    data[..10].copy_from_slice(&[0x81, 0, 2, 0, 1, 0, 0, 0, 9, 8]);
    data[10] = 0x99;
    assert_eq!(
        ReplyRepr::parse(&data).unwrap(),
        ReplyRepr {
            token: 1,
            body: Reply::Data(&[9, 8])
        }
    );
}

fn request_err(bytes: &[u8]) -> Error {
    RequestRepr::parse(&Packet::new_unchecked(bytes)).unwrap_err()
}

#[test]
fn request_errors() {
    assert_eq!(Repr::parse(&[]), Err(Error::Truncated));
    assert_eq!(request_err(&READ[..31]), Error::Truncated);
    let mut b = READ;
    b[1] = 1;
    assert_eq!(request_err(&b), Error::Reserved);
    let mut b = READ;
    b[31] = 1;
    assert_eq!(request_err(&b), Error::Reserved);
    let mut b = READ;
    b[16] = 0;
    assert_eq!(request_err(&b), Error::BadLength);
    b[16] = 57;
    assert_eq!(request_err(&b), Error::TooLarge);
    assert_eq!(Error::TooLarge.code(), ErrorCode::TooLarge);
    b[16] = 0;
    b[23] = 1; // a huge length, not just one above 56
    assert_eq!(request_err(&b), Error::TooLarge);

    let mut w = [0u8; 36];
    w[0] = 0x02;
    w[16] = 5; // declares 5 bytes, 4 present
    assert_eq!(request_err(&w), Error::Truncated);
    w[16] = 0;
    assert_eq!(request_err(&w), Error::BadLength);

    let mut bulk = [0u8; 36];
    bulk[0] = 0x04;
    bulk[16] = 8; // total 8
    bulk[20] = 6; // offset 6
    bulk[28] = 4; // fragment 4: 6 + 4 > 8
    assert_eq!(request_err(&bulk), Error::BadFragment);
    bulk[20] = 4;
    assert!(RequestRepr::parse(&Packet::new_unchecked(&bulk[..])).is_ok());
    assert_eq!(request_err(&bulk[..35]), Error::BadFragment);
    let mut long = [0u8; 40];
    long[..36].copy_from_slice(&bulk);
    assert_eq!(
        request_err(&long),
        Error::BadFragment,
        "bulk payload must be exact"
    );
    bulk[28] = 0;
    assert_eq!(
        request_err(&bulk[..32]),
        Error::BadFragment,
        "zero-length fragment"
    );
    // Offsets near u32::MAX do not overflow.
    let mut br = [0u8; 32];
    br[0] = 0x03;
    br[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    br[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    br[28..32].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(request_err(&br), Error::BadFragment);

    let mut free = [0u8; 32];
    free[0] = 0x07;
    free[16] = 1;
    assert_eq!(request_err(&free), Error::Reserved);

    assert_eq!(request_err(&[0x0a; 32]), Error::UnknownType(0x0a));
    assert_eq!(Repr::parse(&[0x7f]), Err(Error::UnknownType(0x7f)));
    assert_eq!(Repr::parse(&[0xff; 64]), Err(Error::UnknownType(0xff)));
    let ack = [0x80, 0, 0, 0, 0, 0, 0, 0];
    let mut ack32 = [0u8; 32];
    ack32[..8].copy_from_slice(&ack);
    assert_eq!(request_err(&ack32), Error::UnexpectedType(PacketType::Ack));
    assert_eq!(
        ReplyRepr::parse(&READ),
        Err(Error::UnexpectedType(PacketType::Read))
    );
}

#[test]
fn atomic_errors() {
    let mut a = [0u8; 32];
    a[0] = 0x05;
    a[1] = 0x44; // F32 FETCH_ADD
    assert_eq!(request_err(&a), Error::BadAtomic);
    assert_eq!(Error::BadAtomic.code(), ErrorCode::BadAtomic);
    a[1] = 0x0e; // op 14
    assert_eq!(request_err(&a), Error::BadAtomic);
    a[1] = 0x64; // type 6
    assert_eq!(request_err(&a), Error::BadAtomic);
    a[1] = 0x15; // U32 ADD, operand with high bits
    a[20] = 1;
    assert_eq!(request_err(&a), Error::BadAtomic);
    a[1] = 0x35; // U64 ADD: fine
    assert!(RequestRepr::parse(&Packet::new_unchecked(&a[..])).is_ok());
    let mut c = [0u8; 40];
    c[0] = 0x05;
    c[1] = 0x13; // U32 COMPARE_SWAP, comparand with high bits
    c[36] = 1;
    assert_eq!(request_err(&c), Error::BadAtomic);
    assert_eq!(request_err(&c[..39]), Error::Truncated);
    c[36] = 0;
    assert!(RequestRepr::parse(&Packet::new_unchecked(&c[..])).is_ok());
}

#[test]
fn reply_errors() {
    assert_eq!(ReplyRepr::parse(&[]), Err(Error::Truncated));
    assert_eq!(
        ReplyRepr::parse(&[0x80, 0, 0, 0, 0, 0, 0]),
        Err(Error::Truncated)
    );
    assert_eq!(
        ReplyRepr::parse(&[0x80, 1, 0, 0, 0, 0, 0, 0]),
        Err(Error::Reserved)
    );
    assert_eq!(
        ReplyRepr::parse(&[0x80, 0, 0, 1, 0, 0, 0, 0]),
        Err(Error::Reserved)
    );
    assert_eq!(
        ReplyRepr::parse(&[0x80, 0, 1, 0, 0, 0, 0, 0, 0]),
        Err(Error::BadLength)
    );
    assert_eq!(
        ReplyRepr::parse(&[0x81, 0, 0, 0, 0, 0, 0, 0]),
        Err(Error::BadLength)
    );
    assert_eq!(
        ReplyRepr::parse(&[0x81, 0, 2, 0, 0, 0, 0, 0, 1]),
        Err(Error::Truncated)
    );
    let mut big = [0u8; 8 + 57];
    big[0] = 0x81;
    big[2] = 57;
    assert_eq!(ReplyRepr::parse(&big), Err(Error::TooLarge));
    assert_eq!(
        ReplyRepr::parse(&[0x83, 7, 1, 0, 0, 0, 0, 0, 0]),
        Err(Error::BadLength)
    );
    assert_eq!(
        ReplyRepr::parse(&[0x83, 200, 0, 0, 1, 0, 0, 0])
            .unwrap()
            .body,
        Reply::Error(ErrorCode::Unknown(200))
    );
    let mut bulk = [0u8; 34];
    bulk[0] = 0x82;
    bulk[1] = 1;
    bulk[16] = 2;
    bulk[28] = 2;
    assert_eq!(ReplyRepr::parse(&bulk), Err(Error::Reserved));
    bulk[1] = 0;
    assert!(ReplyRepr::parse(&bulk).is_ok());
    assert_eq!(ReplyRepr::parse(&bulk[..33]), Err(Error::BadFragment));
    assert_eq!(ReplyRepr::parse(&bulk[..31]), Err(Error::Truncated));
}

#[test]
fn peeks() {
    assert_eq!(peek_type(&[]), None);
    assert_eq!(peek_type(&READ), Some(PacketType::Read));
    assert_eq!(peek_token(&READ), 0xdead_beef);
    assert_eq!(peek_token(&READ[..27]), 0);
    assert_eq!(peek_token(&[0x83, 1, 0, 0, 9, 0, 0, 0]), 9);
    assert_eq!(peek_token(&[0x42; 27]), 0);
    assert_eq!(peek_sender(&READ), Some(sender(0x0605_0403_0201)));
    assert_eq!(peek_sender(&READ[..31]), None);
    assert_eq!(peek_sender(&[0x80; 32]), None);
}

#[test]
fn write_with_signal_bytes() {
    #[rustfmt::skip]
    let bytes = [
        0x02, 0x35, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // WRITE, signal ADD (u64), sender 1
        0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, // pe 3, seg 0, offset 0x10
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // len 3
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // token 7
        0x40, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x00, // signal: pe 3, seg 1, offset 0x40
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // value 2
        0xaa, 0xbb, 0xcc,                               // data
    ];
    let repr = RequestRepr {
        sender: sender(1),
        token: 7,
        body: Request::WriteSignal {
            addr: addr(3, 0, 0x10),
            data: &[0xaa, 0xbb, 0xcc],
            signal: Signal {
                addr: addr(3, 1, 0x40),
                op: SignalOp::Add,
                value: 2,
            },
        },
    };
    request_round_trip(&bytes, repr);
    // SET is 0x31; other descriptors are refused.
    let mut set = bytes;
    set[1] = 0x31;
    let parsed = RequestRepr::parse(&Packet::new_checked(&set[..]).unwrap()).unwrap();
    assert!(matches!(
        parsed.body,
        Request::WriteSignal {
            signal: Signal {
                op: SignalOp::Set,
                ..
            },
            ..
        }
    ));
    for bad in [0x34u8, 0x11, 0x21, 0x51, 0x0f, 0xff] {
        let mut b = bytes;
        b[1] = bad;
        assert_eq!(
            RequestRepr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::BadAtomic),
            "sub {bad:#x}"
        );
    }
}

#[test]
fn bulk_write_with_signal_bytes() {
    #[rustfmt::skip]
    let bytes = [
        0x04, 0x31, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, // BULK_WRITE, signal SET, sender 2
        0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, // base: pe 1, seg 0, offset 0x1000
        0x0a, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, // total 10, offset 8
        0x09, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, // token 9, fragment length 2
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, // signal: pe 1, seg 0, offset 8
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // value u64::MAX
        0x11, 0x22,                                     // the final 2 bytes
    ];
    let repr = RequestRepr {
        sender: sender(2),
        token: 9,
        body: Request::BulkWriteSignal {
            frag: Fragment {
                base: addr(1, 0, 0x1000),
                total: 10,
                offset: 8,
            },
            data: &[0x11, 0x22],
            signal: Signal {
                addr: addr(1, 0, 8),
                op: SignalOp::Set,
                value: u64::MAX,
            },
        },
    };
    request_round_trip(&bytes, repr);
    fn parse(b: &[u8]) -> Result<RequestRepr<'_>, Error> {
        RequestRepr::parse(&Packet::new_checked(b).unwrap())
    }
    // A signal on a fragment that does not end the transfer.
    let mut early = bytes;
    early[16] = 0x0b; // total 11
    assert_eq!(parse(&early), Err(Error::BadFragment));
    // Payload not exactly signal block + fragment.
    assert_eq!(parse(&bytes[..49]), Err(Error::BadFragment));
    let mut long = [0u8; 51];
    long[..50].copy_from_slice(&bytes);
    assert_eq!(parse(&long), Err(Error::BadFragment));
    assert_eq!(parse(&bytes[..40]), Err(Error::Truncated));
    // A bad operation.
    let mut bad = bytes;
    bad[1] = 0x33;
    assert_eq!(parse(&bad), Err(Error::BadAtomic));
    // FORK keeps sub 0.
    let mut fork = bytes;
    fork[0] = 0x08;
    assert_eq!(parse(&fork), Err(Error::Reserved));
}
