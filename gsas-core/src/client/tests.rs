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
    let mut net = Sink::new(64, 32 + 16);
    let mut c: Client<u8, 1, 1> = Client::new(SenderId::new(1).unwrap());
    let addr = GlobalAddr::new(0, 0, 0).unwrap();
    // 60 bytes over 16-byte fragments: 4 BULK_READs with generations 0, 1, 2, 3.
    let issued = c.read(&mut net, 0, 0, 0, addr, 60).unwrap();
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
