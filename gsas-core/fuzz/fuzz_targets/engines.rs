//! The service and client engines on arbitrary packets.
//!
//! Service: no panic, every reply is exactly as long as announced and parses, and memory
//! outside the registered segments (guard bytes) never changes. Client: no panic on any
//! reply, and its counters stay consistent.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};

use gsas_core::client::{Client, Completion};
use gsas_core::service::{Prepared, Segment, Service, WordMemory};
use gsas_core::transport::{Capabilities, Ordering as Delivery, Transport, TransportError};
use gsas_core::wire::{GlobalAddr, ReplyRepr, SenderId};
use libfuzzer_sys::fuzz_target;

const GUARD: u64 = 0xa5a5_a5a5_a5a5_a5a5;

/// Accepts every packet and forgets it.
struct Null;

impl Transport for Null {
    type Peer = u16;
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_inline: 64,
            mtu: 96,
            ordering: Delivery::Unordered,
            reliable: false,
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
        let mut buf = vec![0u8; len];
        Ok(fill(&mut buf))
    }
    fn recv<R, F: FnOnce(u16, &[u8]) -> R>(&mut self, _: F) -> Result<Option<R>, TransportError> {
        Ok(None)
    }
}

fuzz_target!(|bytes: &[u8]| {
    // Service: 32 words, segments at words 4..12 (PE 0, seg 0) and 20..24 (PE 0, seg 1).
    let words: Vec<AtomicU64> = (0..32).map(|_| AtomicU64::new(GUARD)).collect();
    let mut service: Service<_, 4> =
        Service::new(SenderId::new(1).unwrap(), WordMemory::new(&words));
    service
        .register(Segment {
            job: 1,
            key: 7,
            pe: 0,
            segment: 0,
            base: 32,
            len: 64,
        })
        .unwrap();
    service
        .register(Segment {
            job: 1,
            key: 7,
            pe: 0,
            segment: 1,
            base: 160,
            len: 32,
        })
        .unwrap();
    // Several packets per input, split on a length byte.
    let mut rest = bytes;
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        let (packet, next) = tail.split_at(n);
        rest = next;
        if let Prepared::Reply(p) = service.prepare(7, packet) {
            let mut out = vec![0u8; p.reply_len()];
            assert_eq!(service.execute(&p, &mut out), Ok(out.len()));
            assert!(ReplyRepr::parse(&out).is_ok());
        }
    }
    for (i, w) in words.iter().enumerate() {
        if !(4..12).contains(&i) && !(20..24).contains(&i) {
            assert_eq!(w.load(Ordering::Relaxed), GUARD, "guard word {i} changed");
        }
    }

    // Client: a few pending operations, then the input as replies.
    let mut net = Null;
    let mut client: Client<u16, 8, 2> = Client::new(SenderId::new(2).unwrap());
    let addr = GlobalAddr::new(0, 0, 0).unwrap();
    client.read(&mut net, 0, 0, 1, addr, 8).unwrap();
    client.read(&mut net, 0, 1, 2, addr, 300).unwrap();
    client.write(&mut net, 0, 0, 3, addr, &[1; 200]).unwrap();
    let mut done = 0usize;
    let mut rest = bytes;
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        let (packet, next) = tail.split_at(n);
        rest = next;
        client.handle_reply(packet, |c| {
            if let Completion::Done { .. } = c {
                done += 1;
            }
        });
    }
    assert_eq!(client.in_flight() + done, 3);
    assert_eq!(
        client.outstanding(0) + client.outstanding(1),
        client.in_flight() as u32
    );
});
