//! Fixtures shared by the gsas benchmarks (`cargo bench -p gsas-bench`).
//!
//! What it is: a service engine over word memory with a realistic segment table, and
//! request packets encoded once up front, so that a benchmark measures only the engine.
//! What it is not: part of any runtime; nothing here is used outside benchmarks.
//! Thread safety: fixtures are plain values; each benchmark owns its own.

use std::sync::atomic::AtomicU64;

use gsas_core::service::{Segment, Service, WordMemory};
use gsas_core::wire::{GlobalAddr, Packet, Request, RequestRepr, SenderId};

/// Job key of the benchmarked requests.
pub const KEY: u64 = 0x1234_5678_9abc_def0;
/// PE whose segment the requests address.
pub const PE: u16 = 5;
/// Bytes of word memory per segment.
pub const SEGMENT_LEN: usize = 64 * 1024;
/// Segments registered (4 jobs x 2 PEs x 2 segments), so lookups search a real table.
pub const SEGMENTS: usize = 16;

/// Word memory backing every segment.
pub fn memory() -> Vec<AtomicU64> {
    (0..SEGMENTS * SEGMENT_LEN / 8)
        .map(|_| AtomicU64::new(0))
        .collect()
}

/// A service over `words` with [`SEGMENTS`] segments of [`SEGMENT_LEN`] bytes registered;
/// the benchmarked job (`KEY`, PE [`PE`], segment 0) is one of them.
pub fn service(words: &[AtomicU64]) -> Service<WordMemory<'_>, 32> {
    let mut s = Service::new(SenderId::new(1).expect("small id"), WordMemory::new(words));
    let mut n = 0;
    for job in 0..4u32 {
        let key = if job == 2 {
            KEY
        } else {
            0x1000 + u64::from(job)
        };
        for pe in [PE, PE + 1] {
            for segment in 0..2u8 {
                let seg = Segment {
                    job,
                    key,
                    pe,
                    segment,
                    base: n * SEGMENT_LEN,
                    len: SEGMENT_LEN as u64,
                };
                s.register(seg).expect("fixture segments fit the memory");
                n += 1;
            }
        }
    }
    s
}

/// The global address `offset` bytes into the benchmarked segment.
pub fn addr(offset: u64) -> GlobalAddr {
    GlobalAddr::new(PE, 0, offset).expect("offset fits 40 bits")
}

/// Encodes a request with a fixed sender and `token`.
pub fn encode(body: Request<'_>, token: u32) -> Vec<u8> {
    let repr = RequestRepr {
        sender: SenderId::new(2).expect("small id"),
        token,
        body,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsas_core::service::Handled;
    use gsas_core::wire::{Reply, ReplyRepr};

    #[test]
    fn fixture_serves_the_benchmarked_segment() {
        let words = memory();
        let mut s = service(&words);
        assert_eq!(s.segments().len(), SEGMENTS);
        let mut out = [0u8; 64];
        let write = encode(
            Request::Write {
                addr: addr(8),
                data: &[7; 8],
            },
            1,
        );
        assert_eq!(s.handle(KEY, &write, &mut out), Ok(Handled::Replied(8)));
        let read = encode(
            Request::Read {
                addr: addr(8),
                len: 8,
            },
            2,
        );
        assert_eq!(s.handle(KEY, &read, &mut out), Ok(Handled::Replied(16)));
        assert_eq!(
            ReplyRepr::parse(&out[..16]).unwrap().body,
            Reply::Data(&[7; 8])
        );
        assert_eq!(s.stats().total_refusals(), 0);
    }
}
