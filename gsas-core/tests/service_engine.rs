//! Service engine tests against word memory and a reference model: every atomic op and
//! datatype, reads and writes at every length and alignment, bulk transfers, refusals with
//! their counters, and guard regions around the segments that must never change.
//!
//! Kept as one file because every test runs against the same reference model and guarded
//! memory defined here.

use std::sync::atomic::{AtomicU64, Ordering};

use gsas_core::service::{Handled, Prepared, Segment, Service, WordMemory};
use gsas_core::wire::{
    AtomicDesc, AtomicOp, AtomicType, ControlCode, ErrorCode, Fragment, GlobalAddr, Packet,
    PacketType, Reply, ReplyRepr, Request, RequestRepr, SenderId,
};
use proptest::prelude::*;

const KEY: u64 = 0x5eed_0000_0000_0001;
const OTHER_KEY: u64 = 0x0bad;
const WORDS: usize = 64; // 512 bytes
const GUARD: u8 = 0xa5;
/// Segment A: PE 3, segment 0, bytes 64..192. Segment B: PE 3, segment 1, bytes 256..320.
const A: (usize, u64) = (64, 128);
const B: (usize, u64) = (256, 64);

fn in_segment(byte: usize) -> bool {
    (A.0..A.0 + A.1 as usize).contains(&byte) || (B.0..B.0 + B.1 as usize).contains(&byte)
}

/// Word memory with guard bytes everywhere, a service with segments A and B, and a
/// reference copy of the bytes.
struct Rig {
    words: Vec<AtomicU64>,
    reference: Vec<u8>,
}

impl Rig {
    fn new() -> Self {
        let reference = vec![GUARD; WORDS * 8];
        let words = (0..WORDS)
            .map(|_| AtomicU64::new(u64::from_le_bytes([GUARD; 8])))
            .collect();
        Rig { words, reference }
    }

    fn bytes(&self) -> Vec<u8> {
        self.words
            .iter()
            .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
            .collect()
    }

    fn assert_matches_reference(&self) {
        let bytes = self.bytes();
        for (i, (&got, &want)) in bytes.iter().zip(&self.reference).enumerate() {
            assert_eq!(got, want, "byte {i} differs from the reference");
            if !in_segment(i) {
                assert_eq!(got, GUARD, "guard byte {i} was touched");
            }
        }
    }
}

/// A service over `words` with segments A and B registered.
fn service(words: &[AtomicU64]) -> Service<WordMemory<'_>, 8> {
    let mut s = Service::new(SenderId::new(77).unwrap(), WordMemory::new(words));
    s.register(Segment {
        job: 1,
        key: KEY,
        pe: 3,
        segment: 0,
        base: A.0,
        len: A.1,
    })
    .unwrap();
    s.register(Segment {
        job: 1,
        key: KEY,
        pe: 3,
        segment: 1,
        base: B.0,
        len: B.1,
    })
    .unwrap();
    s
}

fn a(offset: u64) -> GlobalAddr {
    GlobalAddr::new(3, 0, offset).unwrap()
}

fn encode(body: Request<'_>, token: u32) -> Vec<u8> {
    let repr = RequestRepr {
        sender: SenderId::new(9).unwrap(),
        token,
        body,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    buf
}

/// Runs one request; checks that `reply_len` predicted the reply length; returns the
/// reply bytes.
fn run(s: &mut Service<WordMemory<'_>, 8>, key: u64, packet: &[u8]) -> Vec<u8> {
    let Prepared::Reply(pending) = s.prepare(key, packet) else {
        panic!("not a memory request")
    };
    let mut out = vec![0xeeu8; 128 + 32];
    let n = s.execute(&pending, &mut out).unwrap();
    assert_eq!(n, pending.reply_len());
    out.truncate(n);
    out
}

fn refused(reply: &[u8]) -> Option<ErrorCode> {
    match ReplyRepr::parse(reply).unwrap().body {
        Reply::Error(code) => Some(code),
        _ => None,
    }
}

/// Reference semantics of every atomic op on a `width`-byte value.
fn reference_atomic(op: AtomicOp, width: usize, old: u64, operand: u64, comparand: u64) -> u64 {
    let mask = if width == 4 { 0xffff_ffff } else { u64::MAX };
    let new = match op {
        AtomicOp::Fetch => old,
        AtomicOp::Set | AtomicOp::Swap => operand,
        AtomicOp::CompareSwap => {
            if old == comparand {
                operand
            } else {
                old
            }
        }
        AtomicOp::FetchAdd | AtomicOp::Add => old.wrapping_add(operand),
        AtomicOp::FetchInc | AtomicOp::Inc => old.wrapping_add(1),
        AtomicOp::FetchAnd | AtomicOp::And => old & operand,
        AtomicOp::FetchOr | AtomicOp::Or => old | operand,
        AtomicOp::FetchXor | AtomicOp::Xor => old ^ operand,
        AtomicOp::Unknown(_) => unreachable!(),
    };
    new & mask
}

#[test]
fn every_atomic_op_and_datatype() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    let mut reference = rig.reference.clone();
    let values: [u64; 5] = [
        0,
        1,
        0x7fff_ffff,
        0xffff_ffff_ffff_fffe,
        0x8000_0000_1234_5678,
    ];
    let mut checked = 0;
    for byte in 0..=255u8 {
        let Ok(desc) = AtomicDesc::from_byte(byte) else {
            continue;
        };
        let width = desc.width();
        let mask = desc.operand_mask();
        for (n, (&initial, &operand)) in values.iter().zip(values.iter().rev()).enumerate() {
            let offset = (n * 8 + if width == 4 { 4 * (n % 2) } else { 0 }) as u64;
            let at = A.0 + offset as usize;
            // Initial value written through the engine, as a WRITE.
            let init = (initial & mask).to_le_bytes();
            assert_eq!(
                refused(&run(
                    &mut s,
                    KEY,
                    &encode(
                        Request::Write {
                            addr: a(offset),
                            data: &init[..width]
                        },
                        1
                    )
                )),
                None
            );
            reference[at..at + width].copy_from_slice(&init[..width]);

            let comparand = if n % 2 == 0 {
                initial & mask
            } else {
                operand & mask
            };
            let comparand = if desc.has_comparand() { comparand } else { 0 };
            let packet = encode(
                Request::Atomic {
                    addr: a(offset),
                    desc,
                    operand: operand & mask,
                    comparand,
                },
                0x1000 + n as u32,
            );
            let reply = ReplyRepr::parse(&run(&mut s, KEY, &packet))
                .unwrap()
                .owned_body();

            let old = initial & mask;
            let new = reference_atomic(desc.op(), width, old, operand & mask, comparand);
            reference[at..at + width].copy_from_slice(&new.to_le_bytes()[..width]);
            if desc.fetches() {
                assert_eq!(
                    reply,
                    Some(old.to_le_bytes()[..width].to_vec()),
                    "{desc:?} initial {initial:#x}"
                );
            } else {
                assert_eq!(reply, None, "{desc:?} must be answered by ACK");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 62 * 5);
    assert_eq!(rig.bytes(), reference, "memory differs from the reference");
    assert_eq!(s.stats().requests(PacketType::Atomic), 62 * 5);
    assert_eq!(s.stats().total_refusals(), 0);
}

/// The DATA payload of a reply (`None` for ACK); panics on anything else.
trait OwnedBody {
    fn owned_body(&self) -> Option<Vec<u8>>;
}

impl OwnedBody for ReplyRepr<'_> {
    fn owned_body(&self) -> Option<Vec<u8>> {
        match self.body {
            Reply::Ack => None,
            Reply::Data(d) => Some(d.to_vec()),
            other => panic!("unexpected reply {other:?}"),
        }
    }
}

#[test]
fn float_atomics_are_bitwise() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    let f64d = |op| AtomicDesc::new(op, AtomicType::F64).unwrap();
    let f32d = |op| AtomicDesc::new(op, AtomicType::F32).unwrap();
    let x = 2.5f64.to_bits();
    run(
        &mut s,
        KEY,
        &encode(
            Request::Atomic {
                addr: a(16),
                desc: f64d(AtomicOp::Set),
                operand: x,
                comparand: 0,
            },
            1,
        ),
    );
    let r = run(
        &mut s,
        KEY,
        &encode(
            Request::Atomic {
                addr: a(16),
                desc: f64d(AtomicOp::Swap),
                operand: (-1.0f64).to_bits(),
                comparand: 0,
            },
            2,
        ),
    );
    assert_eq!(
        ReplyRepr::parse(&r).unwrap().body,
        Reply::Data(&x.to_le_bytes())
    );
    let y = f32::NAN.to_bits();
    run(
        &mut s,
        KEY,
        &encode(
            Request::Atomic {
                addr: a(4),
                desc: f32d(AtomicOp::Set),
                operand: u64::from(y),
                comparand: 0,
            },
            3,
        ),
    );
    let r = run(
        &mut s,
        KEY,
        &encode(
            Request::Atomic {
                addr: a(4),
                desc: f32d(AtomicOp::Fetch),
                operand: 0,
                comparand: 0,
            },
            4,
        ),
    );
    assert_eq!(
        ReplyRepr::parse(&r).unwrap().body,
        Reply::Data(&y.to_le_bytes()),
        "NaN bits preserved"
    );
    let r = run(
        &mut s,
        KEY,
        &encode(
            Request::Atomic {
                addr: a(16),
                desc: f64d(AtomicOp::Fetch),
                operand: 0,
                comparand: 0,
            },
            5,
        ),
    );
    assert_eq!(
        ReplyRepr::parse(&r).unwrap().body,
        Reply::Data(&(-1.0f64).to_bits().to_le_bytes())
    );
}

#[test]
fn reads_and_writes_at_every_length_and_alignment() {
    let mut rig = Rig::new();
    let mut s = service(&rig.words);
    let mut written = 0u64;
    for len in 1..=56usize {
        for align in 0..8u64 {
            let offset = align + (len as u64 * 3 % 40);
            let data: Vec<u8> = (0..len)
                .map(|i| {
                    (i as u8)
                        .wrapping_mul(31)
                        .wrapping_add(len as u8 + align as u8)
                })
                .collect();
            let reply = run(
                &mut s,
                KEY,
                &encode(
                    Request::Write {
                        addr: a(offset),
                        data: &data,
                    },
                    7,
                ),
            );
            assert_eq!(
                ReplyRepr::parse(&reply).unwrap(),
                ReplyRepr {
                    token: 7,
                    body: Reply::Ack
                }
            );
            let at = A.0 + offset as usize;
            rig.reference[at..at + len].copy_from_slice(&data);
            written += len as u64;
            let reply = run(
                &mut s,
                KEY,
                &encode(
                    Request::Read {
                        addr: a(offset),
                        len: len as u8,
                    },
                    8,
                ),
            );
            assert_eq!(
                ReplyRepr::parse(&reply).unwrap(),
                ReplyRepr {
                    token: 8,
                    body: Reply::Data(&data)
                }
            );
        }
    }
    // Whole-segment read via the reference.
    let reply = run(
        &mut s,
        KEY,
        &encode(
            Request::Read {
                addr: a(72),
                len: 56,
            },
            9,
        ),
    );
    assert_eq!(
        ReplyRepr::parse(&reply).unwrap().body,
        Reply::Data(&rig.reference[A.0 + 72..A.0 + 128])
    );
    assert_eq!(s.stats().bytes_written(), written);
    assert_eq!(s.stats().requests(PacketType::Write), 56 * 8);
    drop(s);
    rig.assert_matches_reference();
}

#[test]
fn bulk_transfers_in_any_fragment_order() {
    let mut rig = Rig::new();
    let mut s = service(&rig.words);
    let data: Vec<u8> = (0..100u8).map(|i| i ^ 0x5a).collect();
    let base = a(10);
    // Fragments of 16 bytes sent in reverse order.
    for off in (0..100u32).step_by(16).rev() {
        let end = (off + 16).min(100) as usize;
        let frag = Fragment {
            base,
            total: 100,
            offset: off,
        };
        let reply = run(
            &mut s,
            KEY,
            &encode(
                Request::BulkWrite {
                    frag,
                    data: &data[off as usize..end],
                },
                off,
            ),
        );
        assert_eq!(
            ReplyRepr::parse(&reply).unwrap(),
            ReplyRepr {
                token: off,
                body: Reply::Ack
            }
        );
    }
    rig.reference[A.0 + 10..A.0 + 110].copy_from_slice(&data);
    let mut got = vec![0u8; 100];
    for off in [64u32, 0, 96, 32] {
        let len = 32.min(100 - off);
        let frag = Fragment {
            base,
            total: 100,
            offset: off,
        };
        let reply = run(
            &mut s,
            KEY,
            &encode(Request::BulkRead { frag, len }, 40 + off),
        );
        match ReplyRepr::parse(&reply).unwrap() {
            ReplyRepr {
                token,
                body:
                    Reply::BulkData {
                        sender,
                        frag: f,
                        data: d,
                    },
            } => {
                assert_eq!(token, 40 + off);
                assert_eq!(sender, SenderId::new(77).unwrap());
                assert_eq!(f, frag);
                got[off as usize..(off + len) as usize].copy_from_slice(d);
            }
            other => panic!("expected BULK_DATA, got {other:?}"),
        }
    }
    assert_eq!(got, data);
    assert_eq!(s.stats().bytes_read(), 100);
    assert_eq!(s.stats().bytes_written(), 100);
    drop(s);
    rig.assert_matches_reference();
}

/// Sends `packet` under `key` and checks that it is refused with `code`.
fn check_refused(s: &mut Service<WordMemory<'_>, 8>, key: u64, packet: &[u8], code: ErrorCode) {
    let reply = run(s, key, packet);
    assert_eq!(
        ReplyRepr::parse(&reply).unwrap().body,
        Reply::Error(code),
        "packet {packet:02x?}"
    );
}

/// Refusals for the key, the segment and the bounds (11 of them).
fn refuse_addresses(s: &mut Service<WordMemory<'_>, 8>) {
    let read = |addr: GlobalAddr, len: u8| encode(Request::Read { addr, len }, 0x77);
    let check = check_refused;
    check(s, OTHER_KEY, &read(a(0), 8), ErrorCode::BadKey);
    check(
        s,
        KEY,
        &read(GlobalAddr::new(4, 0, 0).unwrap(), 8),
        ErrorCode::NoSegment,
    );
    check(
        s,
        KEY,
        &read(GlobalAddr::new(3, 2, 0).unwrap(), 8),
        ErrorCode::NoSegment,
    );
    check(s, KEY, &read(a(121), 8), ErrorCode::OutOfBounds);
    check(s, KEY, &read(a(128), 1), ErrorCode::OutOfBounds);
    check(
        s,
        KEY,
        &read(a(GlobalAddr::MAX_OFFSET), 56),
        ErrorCode::OutOfBounds,
    );
    check(
        s,
        KEY,
        &encode(
            Request::Write {
                addr: a(127),
                data: &[1, 2],
            },
            1,
        ),
        ErrorCode::OutOfBounds,
    );
    // Segment B is 64 bytes: a bulk transfer of 65 is refused in every fragment.
    let b = GlobalAddr::new(3, 1, 0).unwrap();
    let frag = Fragment {
        base: b,
        total: 65,
        offset: 0,
    };
    check(
        s,
        KEY,
        &encode(
            Request::BulkWrite {
                frag,
                data: &[0; 8],
            },
            1,
        ),
        ErrorCode::OutOfBounds,
    );
    check(
        s,
        KEY,
        &encode(Request::BulkRead { frag, len: 8 }, 1),
        ErrorCode::OutOfBounds,
    );
    let far = Fragment {
        base: GlobalAddr::new(3, 1, GlobalAddr::MAX_OFFSET).unwrap(),
        total: u32::MAX,
        offset: u32::MAX - 1,
    };
    check(
        s,
        KEY,
        &encode(Request::BulkRead { frag: far, len: 1 }, 1),
        ErrorCode::OutOfBounds,
    );
}

/// Refusals of atomics: misaligned (5), out of bounds (1), bad descriptor (2).
fn refuse_atomics(s: &mut Service<WordMemory<'_>, 8>) {
    let check = check_refused;
    let u64d = AtomicDesc::new(AtomicOp::FetchAdd, AtomicType::U64).unwrap();
    let i32d = AtomicDesc::new(AtomicOp::Inc, AtomicType::I32).unwrap();
    for off in [1u64, 2, 4, 7] {
        check(
            s,
            KEY,
            &encode(
                Request::Atomic {
                    addr: a(off),
                    desc: u64d,
                    operand: 1,
                    comparand: 0,
                },
                1,
            ),
            ErrorCode::Misaligned,
        );
    }
    check(
        s,
        KEY,
        &encode(
            Request::Atomic {
                addr: a(6),
                desc: i32d,
                operand: 0,
                comparand: 0,
            },
            1,
        ),
        ErrorCode::Misaligned,
    );
    check(
        s,
        KEY,
        &encode(
            Request::Atomic {
                addr: a(124),
                desc: u64d,
                operand: 1,
                comparand: 0,
            },
            1,
        ),
        ErrorCode::OutOfBounds,
    );
    let mut bad = encode(
        Request::Atomic {
            addr: a(0),
            desc: u64d,
            operand: 1,
            comparand: 0,
        },
        0x55,
    );
    bad[1] = 0x44; // F32 FETCH_ADD
    check(s, KEY, &bad, ErrorCode::BadAtomic);
    bad[1] = 0x0f; // op 15
    check(s, KEY, &bad, ErrorCode::BadAtomic);
}

#[test]
fn refusals_are_answered_and_counted() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    refuse_addresses(&mut s);
    refuse_atomics(&mut s);
    let read = |addr: GlobalAddr, len: u8| encode(Request::Read { addr, len }, 0x77);
    let check = check_refused;
    let mut unknown = read(a(0), 8);
    unknown[0] = 0x42;
    check(&mut s, KEY, &unknown, ErrorCode::UnknownType);
    check(&mut s, KEY, &read(a(0), 8)[..20], ErrorCode::Malformed);
    let mut huge = read(a(0), 8);
    huge[16] = 57;
    check(&mut s, KEY, &huge, ErrorCode::TooLarge);

    let st = s.stats();
    assert_eq!(st.refusals(ErrorCode::BadKey), 1);
    assert_eq!(st.refusals(ErrorCode::NoSegment), 2);
    assert_eq!(st.refusals(ErrorCode::OutOfBounds), 8);
    assert_eq!(st.refusals(ErrorCode::Misaligned), 5);
    assert_eq!(st.refusals(ErrorCode::BadAtomic), 2);
    assert_eq!(st.refusals(ErrorCode::UnknownType), 1);
    assert_eq!(st.refusals(ErrorCode::Malformed), 1);
    assert_eq!(st.refusals(ErrorCode::TooLarge), 1);
    assert_eq!(st.total_refusals(), 21);
    assert_eq!(st.requests(PacketType::Unknown(0x42)), 1);
    assert_eq!(st.bytes_read() + st.bytes_written(), 0);
    drop(s);
    Rig::new().assert_matches_reference();
    rig.assert_matches_reference();
}

#[test]
fn error_replies_echo_the_token() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    let reply = run(
        &mut s,
        OTHER_KEY,
        &encode(Request::Read { addr: a(0), len: 4 }, 0xabcd_0123),
    );
    assert_eq!(reply, [0x83, 1, 0, 0, 0x23, 0x01, 0xcd, 0xab]);
    // A packet too short to carry a token is answered with token 0.
    let reply = run(&mut s, KEY, &[0x01, 0, 0]);
    assert_eq!(reply, [0x83, 7, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn replies_and_empty_packets_are_dropped() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    let mut out = [0u8; 64];
    assert_eq!(s.handle(KEY, &[], &mut out), Ok(Handled::Dropped));
    assert_eq!(
        s.handle(KEY, &[0x83, 7, 0, 0, 1, 0, 0, 0], &mut out),
        Ok(Handled::Dropped)
    );
    assert_eq!(s.handle(KEY, &[0x80; 40], &mut out), Ok(Handled::Dropped));
    assert_eq!(s.stats().dropped(), 3);
    assert_eq!(s.stats().total_refusals(), 0);
}

#[test]
fn host_actions_are_handed_back() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    let mut out = [0u8; 64];
    let control = encode(
        Request::Control {
            code: ControlCode::Join,
            arg0: 1,
            arg1: 2,
        },
        5,
    );
    match s.handle(OTHER_KEY, &control, &mut out).unwrap() {
        Handled::Host(RequestRepr {
            token: 5,
            body:
                Request::Control {
                    code: ControlCode::Join,
                    arg0: 1,
                    arg1: 2,
                },
            ..
        }) => {}
        other => panic!("expected the CONTROL back, got {other:?}"),
    }
    let alloc = encode(
        Request::Alloc {
            addr: a(0),
            size: 4096,
        },
        6,
    );
    assert!(matches!(
        s.prepare(KEY, &alloc),
        Prepared::Host(RequestRepr {
            body: Request::Alloc { size: 4096, .. },
            ..
        })
    ));
    let free = encode(Request::Free { addr: a(0) }, 7);
    assert!(matches!(s.prepare(KEY, &free), Prepared::Host(_)));
    let fork = encode(
        Request::Fork {
            frag: Fragment {
                base: a(0),
                total: 3,
                offset: 0,
            },
            data: b"run",
        },
        8,
    );
    assert!(matches!(
        s.prepare(KEY, &fork),
        Prepared::Host(RequestRepr {
            body: Request::Fork { data: b"run", .. },
            ..
        })
    ));
    assert_eq!(s.stats().requests(PacketType::Control), 1);
    assert_eq!(s.stats().requests(PacketType::Fork), 1);
    assert_eq!(out, [0u8; 64], "nothing written for host actions");
}

#[test]
fn table_changes_between_prepare_and_execute_are_rechecked() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    let packet = encode(
        Request::Write {
            addr: a(0),
            data: &[1; 8],
        },
        3,
    );
    let Prepared::Reply(pending) = s.prepare(KEY, &packet) else {
        panic!()
    };
    assert_eq!(pending.refusal(), None);
    assert_eq!(s.unregister(KEY, 3, 0).unwrap().base, A.0);
    let mut out = [0u8; 8];
    assert_eq!(s.execute(&pending, &mut out), Ok(8));
    assert_eq!(
        ReplyRepr::parse(&out).unwrap().body,
        Reply::Error(ErrorCode::NoSegment)
    );
    assert_eq!(s.stats().bytes_written(), 0);
    drop(s);
    rig.assert_matches_reference();
}

#[test]
fn reply_buffer_too_small_executes_nothing() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    let packet = encode(
        Request::Read {
            addr: a(0),
            len: 16,
        },
        3,
    );
    let Prepared::Reply(pending) = s.prepare(KEY, &packet) else {
        panic!()
    };
    assert_eq!(pending.reply_len(), 24);
    let mut out = [0u8; 23];
    assert_eq!(s.execute(&pending, &mut out).unwrap_err().needed, 24);
    assert_eq!(s.stats().bytes_read(), 0);
}

#[test]
fn registration_checks_memory_and_jobs() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    use gsas_core::service::RegisterError;
    let seg = Segment {
        job: 2,
        key: 99,
        pe: 0,
        segment: 0,
        base: 504,
        len: 16,
    };
    assert_eq!(s.register(seg), Err(RegisterError::OutsideMemory));
    assert_eq!(
        s.register(Segment {
            base: 500,
            len: 8,
            ..seg
        }),
        Err(RegisterError::MisalignedBase)
    );
    s.register(Segment { len: 8, ..seg }).unwrap();
    s.register(Segment {
        segment: 1,
        base: 0,
        len: 8,
        ..seg
    })
    .unwrap();
    assert_eq!(s.segments().len(), 4);
    assert_eq!(s.unregister_job(2), 2);
    assert_eq!(s.unregister_job(1), 2);
    assert!(s.segments().is_empty());
    let reply = run(
        &mut s,
        KEY,
        &encode(Request::Read { addr: a(0), len: 4 }, 1),
    );
    assert_eq!(refused(&reply), Some(ErrorCode::BadKey));
}

#[test]
fn concurrent_atomics_through_two_engines_sharing_memory() {
    let rig = Rig::new();
    let desc = AtomicDesc::new(AtomicOp::FetchAdd, AtomicType::U32).unwrap();
    let packet = encode(
        Request::Atomic {
            addr: a(4),
            desc,
            operand: 1,
            comparand: 0,
        },
        1,
    );
    let zero = encode(
        Request::Write {
            addr: a(0),
            data: &[0; 8],
        },
        1,
    );
    run(&mut service(&rig.words), KEY, &zero);
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                let mut s = service(&rig.words);
                for _ in 0..5000 {
                    run(&mut s, KEY, &packet);
                }
            });
        }
    });
    let r = run(
        &mut service(&rig.words),
        KEY,
        &encode(Request::Read { addr: a(0), len: 8 }, 2),
    );
    let mut want = [0u8; 8];
    want[4..].copy_from_slice(&15000u32.to_le_bytes());
    assert_eq!(
        ReplyRepr::parse(&r).unwrap().body,
        Reply::Data(&want),
        "lost updates or the low half changed"
    );
}

/// A random request aimed at or around the segments (or random bytes).
fn any_request() -> impl Strategy<Value = Vec<u8>> {
    let addr = (
        prop::sample::select(vec![3u16, 4]),
        0u8..3,
        prop_oneof![
            0u64..200,
            (GlobalAddr::MAX_OFFSET - 64)..=GlobalAddr::MAX_OFFSET
        ],
    )
        .prop_map(|(pe, seg, off)| GlobalAddr::new(pe, seg, off).unwrap());
    let data = prop::collection::vec(any::<u8>(), 1..150);
    prop_oneof![
        (addr.clone(), 1u8..=56).prop_map(|(addr, len)| encode(Request::Read { addr, len }, 1)),
        (addr.clone(), data.clone())
            .prop_map(|(addr, data)| encode(Request::Write { addr, data: &data }, 2)),
        (addr.clone(), data, 0u32..200, 0u32..100).prop_map(|(base, data, total, offset)| {
            let total = total.max(data.len() as u32);
            let offset = offset.min(total - data.len() as u32);
            encode(
                Request::BulkWrite {
                    frag: Fragment {
                        base,
                        total,
                        offset,
                    },
                    data: &data,
                },
                3,
            )
        }),
        (addr.clone(), 1u32..200, 0u32..200).prop_map(|(base, len, offset)| {
            encode(
                Request::BulkRead {
                    frag: Fragment {
                        base,
                        total: offset + len,
                        offset,
                    },
                    len,
                },
                4,
            )
        }),
        (addr, any::<u8>(), any::<u64>(), any::<u64>()).prop_filter_map(
            "valid descriptor",
            |(addr, d, x, y)| {
                let desc = AtomicDesc::from_byte(d).ok()?;
                let m = desc.operand_mask();
                let comparand = if desc.has_comparand() { y & m } else { 0 };
                Some(encode(
                    Request::Atomic {
                        addr,
                        desc,
                        operand: x & m,
                        comparand,
                    },
                    5,
                ))
            }
        ),
        prop::collection::vec(any::<u8>(), 0..80),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever arrives, bytes outside the segments never change and every request gets
    /// exactly the reply length announced (or is dropped / handed to the host).
    #[test]
    fn memory_outside_segments_is_never_touched(requests in prop::collection::vec(any_request(), 1..60)) {
        let rig = Rig::new();
        let mut s = service(&rig.words);
        for packet in &requests {
            let key = if packet.len() % 7 == 0 { OTHER_KEY } else { KEY };
            if let Prepared::Reply(pending) = s.prepare(key, packet) {
                let mut out = vec![0u8; pending.reply_len()];
                prop_assert_eq!(s.execute(&pending, &mut out), Ok(out.len()));
                prop_assert!(ReplyRepr::parse(&out).is_ok());
            }
        }
        for (i, b) in rig.bytes().into_iter().enumerate() {
            if !in_segment(i) {
                prop_assert_eq!(b, GUARD, "guard byte {} changed", i);
            }
        }
    }
}

/// Collects replies (with whether each was sent lazily); refuses sends while `blocked`.
struct Replies {
    mtu: usize,
    blocked: bool,
    sent: Vec<(u8, Vec<u8>)>,
    lazy: Vec<bool>,
}

impl gsas_core::transport::Transport for Replies {
    type Peer = u8;
    fn capabilities(&self) -> gsas_core::transport::Capabilities {
        gsas_core::transport::Capabilities {
            max_inline: 64,
            mtu: self.mtu,
            ordering: gsas_core::transport::Ordering::PerPeer,
            reliable: true,
            rdma_put: false,
            rdma_get: false,
            atomic_offload: false,
            atomics_coherent_with_cpu: false,
        }
    }
    fn send<R, F: FnOnce(&mut [u8]) -> R>(
        &mut self,
        peer: u8,
        len: usize,
        fill: F,
    ) -> Result<R, gsas_core::transport::TransportError> {
        if self.blocked {
            return Err(gsas_core::transport::TransportError::WouldBlock);
        }
        assert!(len <= self.mtu, "service asked for a slot above the MTU");
        let mut buf = vec![0u8; len];
        let r = fill(&mut buf);
        self.sent.push((peer, buf));
        self.lazy.push(false);
        Ok(r)
    }
    fn send_lazy<R, F: FnOnce(&mut [u8]) -> R>(
        &mut self,
        peer: u8,
        len: usize,
        fill: F,
    ) -> Result<R, gsas_core::transport::TransportError> {
        let r = self.send(peer, len, fill)?;
        *self.lazy.last_mut().expect("just sent") = true;
        Ok(r)
    }
    fn recv<R, F: FnOnce(u8, &[u8]) -> R>(
        &mut self,
        _: F,
    ) -> Result<Option<R>, gsas_core::transport::TransportError> {
        Ok(None)
    }
}

#[test]
fn serve_sizes_replies_to_the_transport() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    let mut net = Replies {
        mtu: 32 + 64,
        blocked: false,
        sent: Vec::new(),
        lazy: Vec::new(),
    };
    let write = encode(
        Request::Write {
            addr: a(0),
            data: &[9; 16],
        },
        1,
    );
    net.blocked = true;
    assert_eq!(
        s.serve(&mut net, 4, KEY, &write),
        Err(gsas_core::transport::TransportError::WouldBlock)
    );
    assert_eq!(
        s.stats().bytes_written(),
        0,
        "nothing executed without a reply slot"
    );
    net.blocked = false;
    assert_eq!(s.serve(&mut net, 4, KEY, &write), Ok(Handled::Replied(8)));
    let frag = Fragment {
        base: a(0),
        total: 128,
        offset: 0,
    };
    let small = encode(Request::BulkRead { frag, len: 64 }, 2);
    assert_eq!(s.serve(&mut net, 4, KEY, &small), Ok(Handled::Replied(96)));
    let big = encode(Request::BulkRead { frag, len: 65 }, 3);
    assert_eq!(s.serve(&mut net, 4, KEY, &big), Ok(Handled::Replied(8)));
    let replies: Vec<_> = net
        .sent
        .iter()
        .map(|(_, r)| ReplyRepr::parse(r).unwrap())
        .collect();
    assert_eq!(replies[0].body, Reply::Ack);
    let Reply::BulkData { data, .. } = replies[1].body else {
        panic!("expected BULK_DATA")
    };
    assert_eq!(data.len(), 64);
    assert_eq!(data[..16], [9; 16]);
    assert!(data[16..].iter().all(|&b| b == GUARD));
    assert_eq!(
        replies[2],
        ReplyRepr {
            token: 3,
            body: Reply::Error(ErrorCode::TooLarge)
        }
    );
    assert_eq!(s.stats().refusals(ErrorCode::TooLarge), 1);
    assert!(net.sent.iter().all(|(peer, _)| *peer == 4));

    // The same limit without a transport.
    s.set_max_reply_len(32 + 64);
    assert_eq!(refused(&run(&mut s, KEY, &big)), Some(ErrorCode::TooLarge));
    assert_eq!(refused(&run(&mut s, KEY, &small)), None);
}

#[test]
fn only_acks_of_non_final_bulk_write_fragments_may_wait() {
    let rig = Rig::new();
    let mut s = service(&rig.words);
    let data = [3u8; 40];
    let frag = |total: u32, offset: u32| Fragment {
        base: a(0),
        total,
        offset,
    };
    let bulk_write = |total, offset, len: usize| {
        encode(
            Request::BulkWrite {
                frag: frag(total, offset),
                data: &data[..len],
            },
            offset + 1,
        )
    };
    let may_wait = |s: &mut Service<WordMemory<'_>, 8>, key: u64, packet: &[u8]| match s
        .prepare(key, packet)
    {
        Prepared::Reply(p) => p.may_wait(),
        other => panic!("not a memory request: {other:?}"),
    };
    // Fragments of a 100-byte transfer: all but the last by offset may wait, whatever
    // order they come in.
    assert!(may_wait(&mut s, KEY, &bulk_write(100, 0, 40)));
    assert!(may_wait(&mut s, KEY, &bulk_write(100, 40, 40)));
    assert!(!may_wait(&mut s, KEY, &bulk_write(100, 80, 20)));
    assert!(
        !may_wait(&mut s, KEY, &bulk_write(40, 0, 40)),
        "a one-fragment transfer"
    );
    // Refusals go out at once: a wrong key, a transfer beyond the segment.
    assert!(!may_wait(&mut s, OTHER_KEY, &bulk_write(100, 0, 40)));
    assert!(!may_wait(&mut s, KEY, &bulk_write(4096, 0, 40)));
    // Everything else answers an operation: never lazy.
    let others = [
        encode(Request::Read { addr: a(0), len: 8 }, 1),
        encode(
            Request::Write {
                addr: a(0),
                data: &data[..8],
            },
            2,
        ),
        encode(
            Request::BulkRead {
                frag: frag(100, 0),
                len: 40,
            },
            3,
        ),
        encode(
            Request::Atomic {
                addr: a(0),
                desc: AtomicDesc::new(AtomicOp::Add, AtomicType::U64).unwrap(),
                operand: 1,
                comparand: 0,
            },
            4,
        ),
    ];
    for packet in &others {
        assert!(!may_wait(&mut s, KEY, packet));
    }
    // Malformed packets (refused at parse) do not wait either.
    let mut bad = bulk_write(100, 0, 40);
    bad.truncate(50);
    assert!(!may_wait(&mut s, KEY, &bad));

    // `serve` sends exactly the replies that may wait with send_lazy.
    let mut net = Replies {
        mtu: 256,
        blocked: false,
        sent: Vec::new(),
        lazy: Vec::new(),
    };
    for packet in [
        bulk_write(100, 0, 40),
        bulk_write(100, 40, 40),
        bulk_write(100, 80, 20),
        others[0].clone(),
        bulk_write(4096, 0, 40),
    ] {
        assert!(matches!(
            s.serve(&mut net, 4, KEY, &packet),
            Ok(Handled::Replied(_))
        ));
    }
    assert_eq!(net.lazy, [true, true, false, false, false]);
    assert!(
        net.sent
            .iter()
            .take(3)
            .all(|(_, r)| ReplyRepr::parse(r).unwrap().body == Reply::Ack)
    );
}
