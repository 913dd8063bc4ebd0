//! Unit tests of token layout and bookkeeping (end-to-end tests are in `tests/client_*.rs`).

use super::*;
use crate::transport::{Capabilities, Ordering};

/// Records sent packets; refuses sends once `budget` is exhausted.
struct Sink {
    caps: Capabilities,
    budget: usize,
    packets: std::vec::Vec<std::vec::Vec<u8>>,
}

impl Sink {
    fn new(max_inline: usize, mtu: usize) -> Self {
        Sink {
            caps: Capabilities {
                max_inline,
                mtu,
                ordering: Ordering::Unordered,
                reliable: false,
                rdma_put: false,
                rdma_get: false,
                atomic_offload: false,
                atomics_coherent_with_cpu: false,
            },
            budget: usize::MAX,
            packets: std::vec::Vec::new(),
        }
    }
}

impl Transport for Sink {
    type Peer = u8;
    fn capabilities(&self) -> Capabilities {
        self.caps
    }
    fn send<R, F: FnOnce(&mut [u8]) -> R>(
        &mut self,
        _: u8,
        len: usize,
        fill: F,
    ) -> Result<R, TransportError> {
        if len > self.caps.mtu {
            return Err(TransportError::TooLarge);
        }
        if self.budget == 0 {
            return Err(TransportError::WouldBlock);
        }
        self.budget -= 1;
        let mut buf = std::vec![0u8; len];
        let r = fill(&mut buf);
        self.packets.push(buf);
        Ok(r)
    }
    fn recv<R, F: FnOnce(u8, &[u8]) -> R>(&mut self, _: F) -> Result<Option<R>, TransportError> {
        Ok(None)
    }
}

fn token_of(packet: &[u8]) -> u32 {
    u32::from_le_bytes(packet[24..28].try_into().unwrap())
}

#[test]
fn token_layout() {
    assert_eq!(Client::<u8, 64, 1>::INDEX_BITS, 7);
    assert_eq!(Client::<u8, 63, 1>::INDEX_BITS, 6);
    assert_eq!(Client::<u8, 1, 1>::INDEX_BITS, 1);
    assert_eq!(Client::<u8, 65535, 1>::INDEX_BITS, 16);
    assert_eq!(Client::<u8, 64, 1>::GEN_MASK, (1 << 25) - 1);

    let mut net = Sink::new(64, 256);
    let mut c: Client<u8, 4, 1> = Client::new(SenderId::new(1).unwrap());
    let addr = GlobalAddr::new(0, 0, 0).unwrap();
    c.read(&mut net, 0, 0, 0, addr, 8).unwrap();
    c.read(&mut net, 0, 0, 0, addr, 8).unwrap();
    // Slot indices 0 and 1 are encoded as 1 and 2, generation 0: token 0 never appears.
    assert_eq!(token_of(&net.packets[0]), 1);
    assert_eq!(token_of(&net.packets[1]), 2);
}

#[test]
fn generations_advance_per_packet_and_across_reuse() {
    let mut net = Sink::new(64, 32 + 64);
    let mut c: Client<u8, 1, 1> = Client::new(SenderId::new(1).unwrap());
    let addr = GlobalAddr::new(0, 0, 0).unwrap();
    // 240 bytes over 64-byte fragments: 4 BULK_READs with generations 0, 1, 2, 3.
    let issued = c.read(&mut net, 0, 0, 0, addr, 240).unwrap();
    assert!(issued.all_sent);
    assert_eq!(issued.packets, 4);
    let tokens: std::vec::Vec<u32> = net.packets.iter().map(|p| token_of(p)).collect();
    assert_eq!(tokens, [1, 1 | 2, 1 | 4, 1 | 6]);
    assert!(c.abort(issued.handle, |_| {}));
    // The next operation in the slot starts at generation 4.
    c.read(&mut net, 0, 0, 0, addr, 4).unwrap();
    assert_eq!(token_of(net.packets.last().unwrap()), 1 | (4 << 1));
}

#[test]
fn argument_errors() {
    let mut net = Sink::new(64, 32);
    let mut c: Client<u8, 2, 2> = Client::new(SenderId::new(1).unwrap());
    let addr = GlobalAddr::new(0, 0, 0).unwrap();
    assert_eq!(
        c.read(&mut net, 0, 2, 0, addr, 8),
        Err(ClientError::BadContext)
    );
    assert_eq!(
        c.read(&mut net, 0, 0, 0, addr, 0),
        Err(ClientError::ZeroLength)
    );
    assert_eq!(
        c.write(&mut net, 0, 0, 0, addr, &[]),
        Err(ClientError::ZeroLength)
    );
    // mtu 32 leaves no room for a bulk fragment.
    assert_eq!(
        c.read(&mut net, 0, 0, 0, addr, 100),
        Err(ClientError::TransportTooSmall)
    );
    let d32 = AtomicDesc::new(crate::wire::AtomicOp::Add, crate::wire::AtomicType::U32).unwrap();
    assert_eq!(
        c.atomic(&mut net, 0, 0, 0, addr, d32, 1 << 32, 0),
        Err(ClientError::BadOperand)
    );
    assert_eq!(
        transfer_len(u32::MAX as usize + 1),
        Err(ClientError::TooLarge)
    );
    assert_eq!(c.in_flight(), 0);
    assert!(net.packets.is_empty());
}

/// A bulk operation's fragments as sent: (offset, length, carries the signal).
type Pieces = std::vec::Vec<(u32, u32, bool)>;

/// What [`drive`] starts.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Read,
    Write,
    WriteSignal,
}

/// Starts `kind` of `len` bytes at `offset` over a transport of MTU `mtu` and answers every
/// packet (ACK, or BULK_DATA with the bytes asked for) until the operation completes;
/// returns its fragments in the order sent. Panics if a packet exceeds the MTU (the sink
/// refuses it) or a reply does not match.
fn drive(kind: Kind, mtu: usize, offset: u64, len: usize) -> Result<Pieces, ClientError> {
    let mut net = Sink::new(64, mtu);
    let mut c: Client<u8, 4, 1> = Client::new(SenderId::new(1).unwrap());
    let addr = GlobalAddr::new(0, 0, offset).unwrap();
    let payload = std::vec![0x5Au8; len];
    let signal = Signal {
        addr: GlobalAddr::new(0, 1, 0).unwrap(),
        op: crate::wire::SignalOp::Set,
        value: 1,
    };
    let issued = match kind {
        Kind::Read => c.read(&mut net, 0, 0, 7, addr, len)?,
        Kind::Write => c.write(&mut net, 0, 0, 7, addr, &payload)?,
        Kind::WriteSignal => c.write_signal(&mut net, 0, 0, 7, addr, &payload, signal)?,
    };
    let mut pieces = Pieces::new();
    let mut done = false;
    let mut reply = std::vec![0u8; mtu];
    while !done {
        let sent = core::mem::take(&mut net.packets);
        assert!(!sent.is_empty(), "{kind:?} stalled after {pieces:?}");
        for p in &sent {
            let repr = RequestRepr::parse(&Packet::new_checked(&p[..]).unwrap()).unwrap();
            let body = match repr.body {
                Request::BulkRead { frag, len } => {
                    pieces.push((frag.offset, len, false));
                    Reply::BulkData {
                        sender: SenderId::new(2).unwrap(),
                        frag,
                        data: &payload[..len as usize],
                    }
                }
                Request::BulkWrite { frag, data } => {
                    pieces.push((frag.offset, data.len() as u32, false));
                    Reply::Ack
                }
                Request::BulkWriteSignal { frag, data, .. } => {
                    pieces.push((frag.offset, data.len() as u32, true));
                    Reply::Ack
                }
                other => panic!("{kind:?}: not a bulk request: {other:?}"),
            };
            let r = ReplyRepr {
                token: repr.token,
                body,
            };
            let n = r.buffer_len();
            r.emit(&mut reply[..n]);
            c.handle_reply(&reply[..n], |e| {
                if let Completion::Done { result, .. } = e {
                    assert_eq!(result, Ok(None), "{kind:?}");
                    done = true;
                }
            });
        }
        if !done {
            match kind {
                Kind::Read => {
                    c.pump(&mut net).unwrap();
                }
                Kind::Write | Kind::WriteSignal => {
                    c.resume(&mut net, issued.handle, &payload).unwrap();
                }
            }
        }
    }
    Ok(pieces)
}

/// Transport MTUs for the boundary tests: odd and even, small and the runtime's (61382 is
/// UDP's default 61440 less the 16-byte UDP and the 42-byte frame headers, 1414 the same of
/// 1472, 8176 the Exanet transport's default).
const MTUS: [usize; 16] = [
    96, 97, 111, 112, 127, 129, 200, 255, 1000, 1023, 1111, 1414, 4099, 8176, 9001, 61382,
];

/// Issue 25 item 4: every boundary between two fragments of a bulk read, write and write
/// with a signal lies at a target offset that is a multiple of the granule, for every MTU
/// and start offset; the fragments tile the transfer, each fits the MTU, all but the first
/// and the last have the full fragment size (a multiple of the granule) and no more
/// fragments are sent than that needs.
#[test]
fn bulk_fragment_boundaries_fall_on_the_granule() {
    let g = GRANULE as u64;
    for mtu in MTUS {
        for kind in [Kind::Read, Kind::Write, Kind::WriteSignal] {
            let extra = if matches!(kind, Kind::WriteSignal) {
                SIGNAL_LEN
            } else {
                0
            };
            let full = ((mtu - HEADER_LEN - extra) / GRANULE * GRANULE) as u64;
            if full == 0 {
                assert_eq!(
                    drive(kind, mtu, 0, 1000),
                    Err(ClientError::TransportTooSmall)
                );
                continue;
            }
            for offset in [0u64, 1, 7, 8, 24, 56, 63, 64, 4096 + 40] {
                // Several fragments but at most the window's worth for small MTUs; 128 KiB
                // (the case) where that is few fragments.
                let lens = [
                    (full * 3 + 17).min(128 << 10) as usize,
                    (full * 5 - 8) as usize,
                    (128usize << 10).min(full as usize * 40),
                ];
                for len in lens {
                    let pieces = drive(kind, mtu, offset, len).unwrap();
                    let what = format!("{kind:?} mtu {mtu} offset {offset} len {len}");
                    let mut at = 0u64;
                    for (i, &(o, n, signal)) in pieces.iter().enumerate() {
                        let last = i + 1 == pieces.len();
                        assert_eq!(u64::from(o), at, "{what}: fragment {i} {pieces:?}");
                        if i > 0 {
                            assert_eq!((offset + at) % g, 0, "{what}: boundary at {at}");
                        }
                        assert!(u64::from(n) <= full, "{what}: fragment {i} of {n}");
                        if i > 0 && !last {
                            assert_eq!(u64::from(n), full, "{what}: fragment {i}");
                        }
                        assert_eq!(signal, last && extra > 0, "{what}: fragment {i}");
                        at += u64::from(n);
                    }
                    assert_eq!(at, len as u64, "{what}: {pieces:?}");
                    let head = offset % g;
                    assert_eq!(
                        pieces.len() as u64,
                        (len as u64 + head).div_ceil(full),
                        "{what}"
                    );
                }
            }
        }
    }
}

/// The fragment sizes of the runtime's transports (the table in the module docs).
#[test]
fn fragment_sizes_are_multiples_of_the_granule() {
    assert_eq!(fragment_size(61382, 0), Ok(61312));
    assert_eq!(fragment_size(61382, SIGNAL_LEN), Ok(61312));
    assert_eq!(fragment_size(1414, 0), Ok(1344));
    assert_eq!(fragment_size(1414, SIGNAL_LEN), Ok(1344));
    for mtu in 0..5000 {
        for extra in [0, SIGNAL_LEN] {
            match fragment_size(mtu, extra) {
                Ok(n) => {
                    assert_eq!(n as usize % GRANULE, 0, "mtu {mtu}");
                    assert!(HEADER_LEN + extra + n as usize <= mtu, "mtu {mtu}");
                    assert!(HEADER_LEN + extra + n as usize + GRANULE > mtu, "mtu {mtu}");
                }
                Err(e) => {
                    assert_eq!(e, ClientError::TransportTooSmall);
                    assert!(mtu < HEADER_LEN + extra + GRANULE, "mtu {mtu}");
                }
            }
        }
    }
    // 128 KiB to offset 0 over UDP's default MTU: 61312 + 61312 + 8448.
    assert_eq!(
        drive(Kind::Write, 61382, 0, 128 << 10).unwrap(),
        [
            (0, 61312, false),
            (61312, 61312, false),
            (122624, 8448, false)
        ]
    );
    // Too small for one granule: refused, nothing sent.
    assert_eq!(
        drive(Kind::Write, HEADER_LEN + GRANULE - 1, 0, 1000),
        Err(ClientError::TransportTooSmall)
    );
    assert_eq!(
        drive(
            Kind::WriteSignal,
            HEADER_LEN + SIGNAL_LEN + GRANULE - 1,
            0,
            1000
        ),
        Err(ClientError::TransportTooSmall)
    );
    assert!(
        drive(
            Kind::WriteSignal,
            HEADER_LEN + SIGNAL_LEN + GRANULE,
            0,
            1000
        )
        .is_ok()
    );
}
