//! A conformance suite for [`Transport`] implementations: one set of checks, run against
//! every transport.
//!
//! What it is: functions that take a [`Pair`] of connected endpoints (any two transports,
//! possibly of different types, that can reach each other) and check what every gsas
//! transport must do, adjusting what they demand to the [`Capabilities`] the endpoints
//! claim, so that the claims are tested too:
//!
//! * [`sizes_up_to_mtu`]: packets of every size class from 1 byte to the MTU, and around
//!   the largest inline packet, arrive intact, in both directions, from the right peer;
//! * [`too_large`]: one byte above the MTU is refused with `TooLarge` and `fill` does not run;
//! * [`back_pressure`]: sending without the receiver draining ends in `WouldBlock` (where
//!   `fill` does not run) for reliable transports, which may not drop; unreliable ones
//!   either push back or lose packets. After draining, sending works again;
//! * [`many_packets`]: a stream of packets with sequence numbers: a reliable transport
//!   delivers each exactly once, a per-peer ordered one in order; an unreliable one never
//!   delivers a packet twice or garbled.
//!
//! Every packet starts with [`FIRST_BYTE`], a gsas packet type, as the runtime's packets
//! do (a transport may keep other first bytes for itself).
//!
//! [`run_all`] runs them in order. Checks panic with a message naming the check and what
//! went wrong, like assertions. Endpoints are driven from the calling thread: between
//! attempts the suite calls `poll(monotonic_ns())` and `flush` on both, so layers with
//! timers (the reliability layer) make progress. Every loop is bounded by
//! [`Pair::timeout`].
//!
//! **Adding a transport** takes one test in `tests/tests/transport/conformance.rs`: build
//! two endpoints that reach each other, put them in a [`Pair`] with the names each has for
//! the other, and call [`run_all`]; then assert what the transport claims beyond the suite
//! (its exact capabilities, how many packets it accepts before pushing back).
//!
//! What it is not: a performance test, or part of the runtime (only tests use it).
//!
//! Thread-safety: the functions use the pair from the calling thread only.
//!
//! ```
//! use std::time::Duration;
//! use gsas_tests::conformance::{self, Pair};
//! use gsas_core::transport::loopback::{LoopbackConfig, LoopbackHub};
//!
//! let mut storage = vec![0u8; 2 * 64 * (512 + 8)];
//! let hub = LoopbackHub::<2>::new(LoopbackConfig::new(512), &mut storage).unwrap();
//! let mut pair = Pair::new(hub.endpoint(0).unwrap(), 1, hub.endpoint(1).unwrap(), 0);
//! pair.timeout = Duration::from_secs(30);
//! conformance::run_all(&mut pair);
//! ```

use std::collections::HashSet;
use std::time::{Duration, Instant};

use gsas_core::transport::{Capabilities, Ordering, Transport, TransportError};

use gsas_transport::poll::monotonic_ns;

/// Two endpoints that reach each other.
pub struct Pair<A: Transport, B: Transport> {
    /// The first endpoint.
    pub a: A,
    /// How `a` names `b`.
    pub b_at_a: A::Peer,
    /// The second endpoint.
    pub b: B,
    /// How `b` names `a` (what `b`'s `recv` reports for packets from `a`).
    pub a_at_b: B::Peer,
    /// Longest wait of any single step of a check.
    pub timeout: Duration,
}

impl<A: Transport, B: Transport> Pair<A, B> {
    /// A pair with a 60-second step timeout. Both endpoints are polled once, so that layers
    /// that take time from `poll` (the reliability layer) start at the current time.
    ///
    /// Panics if a first `poll` fails.
    pub fn new(a: A, b_at_a: A::Peer, b: B, a_at_b: B::Peer) -> Self {
        let mut pair = Pair {
            a,
            b_at_a,
            b,
            a_at_b,
            timeout: Duration::from_secs(60),
        };
        pair.pump();
        pair
    }

    /// The smaller of the two MTUs.
    pub fn mtu(&self) -> usize {
        self.a.capabilities().mtu.min(self.b.capabilities().mtu)
    }

    /// Drives timers and flushes both endpoints.
    pub fn pump(&mut self) {
        let now = monotonic_ns();
        let checked = |what: &str, r: Result<(), TransportError>| {
            if let Err(e) = r {
                panic!("{what} failed: {e}");
            }
        };
        checked("a.poll", self.a.poll(now));
        checked("a.flush", self.a.flush());
        checked("b.poll", self.b.poll(now));
        checked("b.flush", self.b.flush());
    }

    /// Lets `a` take in what arrived for it (acknowledgements of a reliability layer) when
    /// no packets for it are expected; panics if one arrives.
    pub fn absorb_a(&mut self, check: &str) {
        match self.a.recv(|_, data| data.len()) {
            Ok(None) => {}
            Ok(Some(len)) => panic!("{check}: a received an unexpected {len}-byte packet"),
            Err(e) => panic!("{check}: a.recv failed: {e}"),
        }
    }

    /// [`Pair::absorb_a`] for `b`.
    pub fn absorb_b(&mut self, check: &str) {
        match self.b.recv(|_, data| data.len()) {
            Ok(None) => {}
            Ok(Some(len)) => panic!("{check}: b received an unexpected {len}-byte packet"),
            Err(e) => panic!("{check}: b.recv failed: {e}"),
        }
    }
}

/// What [`back_pressure`] observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackPressure {
    /// Packets `send` accepted before it pushed back (or the limit was reached).
    pub accepted: usize,
    /// Whether `send` returned `WouldBlock`.
    pub pushed_back: bool,
    /// Of the accepted packets, how many arrived.
    pub delivered: usize,
}

/// What [`many_packets`] observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    /// Packets sent.
    pub sent: usize,
    /// Distinct packets delivered.
    pub delivered: usize,
    /// Packets delivered before one with a lower sequence number.
    pub out_of_order: usize,
}

/// Byte 0 of every packet the suite sends: a gsas packet type (`0x01`). Transports may
/// keep other first bytes for messages of their own (Exanet: `0xF8..=0xFF`) and refuse
/// them from `send`; a gsas packet never starts with one.
pub const FIRST_BYTE: u8 = 0x01;

/// Bytes a packet needs to carry its whole tag ([`FIRST_BYTE`], then 8 tag bytes).
pub const TAGGED_LEN: usize = 9;

/// Writes the test pattern of packet `tag` into `buf`: [`FIRST_BYTE`], the tag's
/// little-endian bytes (as many as fit), then bytes derived from the tag and position.
pub fn fill_pattern(buf: &mut [u8], tag: u64) {
    let Some((first, rest)) = buf.split_first_mut() else {
        return;
    };
    *first = FIRST_BYTE;
    let t = tag.to_le_bytes();
    let head = rest.len().min(8);
    rest[..head].copy_from_slice(&t[..head]);
    for (j, b) in rest.iter_mut().enumerate().skip(head) {
        *b = (tag as u8).wrapping_add(j as u8).wrapping_mul(31);
    }
}

/// The tag of a packet of at least [`TAGGED_LEN`] bytes if its bytes match the pattern.
pub fn check_pattern(data: &[u8]) -> Option<u64> {
    let tag = u64::from_le_bytes(data.get(1..TAGGED_LEN)?.try_into().ok()?);
    let mut expect = vec![0u8; data.len()];
    fill_pattern(&mut expect, tag);
    (expect == data).then_some(tag)
}

/// Runs every check: capabilities, sizes, too large, many packets, back-pressure.
pub fn run_all<A: Transport, B: Transport>(pair: &mut Pair<A, B>)
where
    A::Peer: PartialEq,
    B::Peer: PartialEq,
{
    capabilities_are_consistent(pair);
    sizes_up_to_mtu(pair);
    too_large(pair);
    many_packets(pair, 2_000, 64.min(pair.mtu()));
    // A reliable transport must push back within this many packets; an unreliable one
    // need not, so it gets a smaller limit.
    let limit = if pair.a.capabilities().reliable {
        200_000
    } else {
        2_000
    };
    back_pressure(pair, limit, 256.min(pair.mtu()));
}

/// The claimed capabilities are self-consistent: an MTU above 0 and `max_inline` within it.
/// (Whether the reliability and order claims hold is checked by [`many_packets`] and
/// [`back_pressure`].)
pub fn capabilities_are_consistent<A: Transport, B: Transport>(pair: &mut Pair<A, B>) {
    for (side, c) in [("a", pair.a.capabilities()), ("b", pair.b.capabilities())] {
        assert!(c.mtu > 0, "capabilities of {side}: MTU 0");
        assert!(
            c.max_inline <= c.mtu,
            "capabilities of {side}: max_inline {} above MTU {}",
            c.max_inline,
            c.mtu
        );
    }
}

/// Sends `len` bytes tagged `tag` from `a` to `b` and returns once `b` has it; panics on a
/// timeout or on a wrong packet. For reliable transports nothing else may be in flight.
fn one_way<A: Transport, B: Transport>(pair: &mut Pair<A, B>, len: usize, tag: u64, reverse: bool)
where
    A::Peer: PartialEq,
    B::Peer: PartialEq,
{
    let deadline = Instant::now() + pair.timeout;
    let direction = if reverse { "b -> a" } else { "a -> b" };
    loop {
        let sent = if reverse {
            pair.b.send(pair.a_at_b, len, |buf| fill_pattern(buf, tag))
        } else {
            pair.a.send(pair.b_at_a, len, |buf| fill_pattern(buf, tag))
        };
        match sent {
            Ok(()) => break,
            Err(TransportError::WouldBlock) => {
                // Both ends take in what arrived: the sender its acknowledgements, the
                // receiver the retransmissions of frames whose acknowledgement was lost
                // (it answers them with a new one). Without the receiver's part a full
                // send window never opened again when the last acknowledgement of the
                // previous check was lost: the sender was declared unreachable after
                // its deadline (the slow-start window of 4 made that window fill).
                pair.pump();
                pair.absorb_a("sizes_up_to_mtu");
                pair.absorb_b("sizes_up_to_mtu");
            }
            Err(e) => panic!("sizes_up_to_mtu: send of {len} bytes {direction} failed: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "sizes_up_to_mtu: send of {len} bytes {direction} kept returning WouldBlock"
        );
    }
    let mut expect = vec![0u8; len];
    fill_pattern(&mut expect, tag);
    loop {
        pair.pump();
        let got = if reverse {
            let want = pair.b_at_a;
            pair.a
                .recv(|peer, data| (peer == want, data == &expect[..], data.len()))
        } else {
            let want = pair.a_at_b;
            pair.b
                .recv(|peer, data| (peer == want, data == &expect[..], data.len()))
        };
        match got {
            Ok(Some((peer_ok, bytes_ok, got_len))) => {
                assert!(
                    peer_ok,
                    "sizes_up_to_mtu: {direction} packet of {len} bytes reported the wrong peer"
                );
                assert!(
                    bytes_ok,
                    "sizes_up_to_mtu: {direction} expected {len} pattern bytes (tag {tag}), got {got_len} different bytes"
                );
                return;
            }
            Ok(None) => {}
            Err(e) => panic!("sizes_up_to_mtu: recv {direction} failed: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "sizes_up_to_mtu: the {len}-byte packet {direction} did not arrive within {:?}",
            pair.timeout
        );
        std::hint::spin_loop();
    }
}

/// Sizes 1..=64, then powers of two and their neighbours, then MTU-1 and MTU.
pub fn size_classes(mtu: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = (1..=64.min(mtu)).collect();
    let mut p = 128;
    while p < mtu {
        sizes.extend([p - 1, p, p + 1]);
        p *= 2;
    }
    sizes.extend([mtu.saturating_sub(1), mtu]);
    sizes.retain(|&s| s >= 1 && s <= mtu);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Packets of every size class up to the MTU, and around the largest inline packet
/// (`max_inline` - 1, + 0, + 1), arrive intact in both directions, from the right peer.
pub fn sizes_up_to_mtu<A: Transport, B: Transport>(pair: &mut Pair<A, B>)
where
    A::Peer: PartialEq,
    B::Peer: PartialEq,
{
    let mtu = pair.mtu();
    let inline = pair
        .a
        .capabilities()
        .max_inline
        .min(pair.b.capabilities().max_inline);
    let mut sizes = size_classes(mtu);
    sizes.extend([inline.saturating_sub(1), inline, inline + 1]);
    sizes.retain(|&s| s >= 1 && s <= mtu);
    sizes.sort_unstable();
    sizes.dedup();
    for (i, len) in sizes.into_iter().enumerate() {
        one_way(pair, len, i as u64 * 2, false);
        one_way(pair, len, i as u64 * 2 + 1, true);
    }
}

/// One byte above the MTU is refused with `TooLarge` without running `fill`, at both ends.
pub fn too_large<A: Transport, B: Transport>(pair: &mut Pair<A, B>) {
    let mut ran = false;
    let mtu = pair.a.capabilities().mtu;
    assert_eq!(
        pair.a.send(pair.b_at_a, mtu + 1, |_| ran = true),
        Err(TransportError::TooLarge),
        "too_large: a accepted {} bytes with an MTU of {mtu}",
        mtu + 1
    );
    let mtu = pair.b.capabilities().mtu;
    assert_eq!(
        pair.b.send(pair.a_at_b, mtu + 1, |_| ran = true),
        Err(TransportError::TooLarge),
        "too_large: b accepted {} bytes with an MTU of {mtu}",
        mtu + 1
    );
    assert!(!ran, "too_large: fill ran for a refused packet");
}

/// Receives everything `b` has until `want` distinct tags arrived or, for an unreliable
/// transport, nothing arrived for a quiet period. Records tags in order.
fn drain_b<A: Transport, B: Transport>(
    pair: &mut Pair<A, B>,
    len: usize,
    want: usize,
    check: &str,
    seen: &mut Vec<u64>,
) {
    let reliable = pair.a.capabilities().reliable;
    let quiet = Duration::from_millis(300);
    let deadline = Instant::now() + pair.timeout;
    let mut last = Instant::now();
    let mut distinct: HashSet<u64> = seen.iter().copied().collect();
    while distinct.len() < want {
        pair.pump();
        pair.absorb_a(check);
        match pair.b.recv(|_, data| (data.len(), check_pattern(data))) {
            Ok(Some((got_len, tag))) => {
                assert_eq!(got_len, len, "{check}: a packet changed size");
                let tag = tag.unwrap_or_else(|| panic!("{check}: a packet arrived garbled"));
                seen.push(tag);
                distinct.insert(tag);
                last = Instant::now();
            }
            Ok(None) => {
                if !reliable && last.elapsed() > quiet {
                    return;
                }
            }
            Err(e) => panic!("{check}: recv failed: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "{check}: only {} of {want} packets arrived within {:?}",
            distinct.len(),
            pair.timeout
        );
    }
}

/// Checks the received tags against `0..sent` and the claimed capabilities.
fn judge(caps: Capabilities, check: &str, sent: usize, seen: &[u64]) -> Stream {
    let mut distinct = HashSet::new();
    let mut out_of_order = 0;
    let mut highest = None;
    for &tag in seen {
        assert!(
            (tag as usize) < sent,
            "{check}: packet {tag} was never sent (only {sent} were)"
        );
        assert!(
            distinct.insert(tag),
            "{check}: packet {tag} was delivered twice"
        );
        if highest.is_some_and(|h| tag < h) {
            out_of_order += 1;
        }
        highest = highest.max(Some(tag));
    }
    if caps.reliable {
        assert_eq!(
            distinct.len(),
            sent,
            "{check}: a transport that claims to be reliable lost {} of {sent} packets",
            sent - distinct.len()
        );
    }
    if caps.ordering == Ordering::PerPeer {
        assert_eq!(
            out_of_order, 0,
            "{check}: a transport that claims per-peer order reordered {out_of_order} packets"
        );
    }
    Stream {
        sent,
        delivered: distinct.len(),
        out_of_order,
    }
}

/// Streams `count` packets of `len` bytes (at least [`TAGGED_LEN`]) from `a` to `b`, receiving while
/// sending, and judges the result by the claimed capabilities (see the module docs).
pub fn many_packets<A: Transport, B: Transport>(
    pair: &mut Pair<A, B>,
    count: usize,
    len: usize,
) -> Stream {
    const CHECK: &str = "many_packets";
    assert!(
        len >= TAGGED_LEN,
        "{CHECK}: packets need {TAGGED_LEN} bytes for their sequence number"
    );
    let caps = pair.a.capabilities();
    let mut seen = Vec::with_capacity(count);
    let deadline = Instant::now() + pair.timeout;
    let mut next = 0usize;
    while next < count {
        match pair
            .a
            .send(pair.b_at_a, len, |buf| fill_pattern(buf, next as u64))
        {
            Ok(()) => next += 1,
            Err(TransportError::WouldBlock) => {
                pair.pump();
                pair.absorb_a(CHECK);
            }
            Err(e) => panic!("{CHECK}: send of packet {next} failed: {e}"),
        }
        // Receive whatever is there, so that neither side's buffers overflow.
        loop {
            match pair.b.recv(|_, data| (data.len(), check_pattern(data))) {
                Ok(Some((got_len, tag))) => {
                    assert_eq!(got_len, len, "{CHECK}: a packet changed size");
                    seen.push(tag.unwrap_or_else(|| panic!("{CHECK}: a packet arrived garbled")));
                }
                Ok(None) => break,
                Err(e) => panic!("{CHECK}: recv failed: {e}"),
            }
        }
        assert!(
            Instant::now() < deadline,
            "{CHECK}: sent only {next} of {count} packets within {:?}",
            pair.timeout
        );
    }
    drain_b(pair, len, count, CHECK, &mut seen);
    judge(caps, CHECK, count, &seen)
}

/// Sends packets of `len` bytes (at least [`TAGGED_LEN`]) from `a` without `b` receiving until `send`
/// pushes back or `limit` packets were accepted; then drains `b` and judges delivery by the
/// claimed capabilities. A reliable transport must push back before `limit`. Afterwards
/// `a` must be able to send again.
pub fn back_pressure<A: Transport, B: Transport>(
    pair: &mut Pair<A, B>,
    limit: usize,
    len: usize,
) -> BackPressure {
    const CHECK: &str = "back_pressure";
    assert!(
        len >= TAGGED_LEN,
        "{CHECK}: packets need {TAGGED_LEN} bytes for their sequence number"
    );
    let caps = pair.a.capabilities();
    let mut accepted = 0usize;
    let mut pushed_back = false;
    while accepted < limit {
        let mut ran = false;
        match pair.a.send(pair.b_at_a, len, |buf| {
            ran = true;
            fill_pattern(buf, accepted as u64)
        }) {
            Ok(()) => accepted += 1,
            Err(TransportError::WouldBlock) => {
                assert!(!ran, "{CHECK}: fill ran although send returned WouldBlock");
                pushed_back = true;
                break;
            }
            Err(e) => panic!("{CHECK}: send of packet {accepted} failed: {e}"),
        }
        // Let layers with timers push frames out, but never receive at b.
        let now = monotonic_ns();
        if let Err(e) = pair.a.poll(now) {
            panic!("{CHECK}: a.poll failed: {e}");
        }
    }
    if caps.reliable {
        assert!(
            pushed_back,
            "{CHECK}: a reliable transport accepted {limit} packets without the receiver \
             draining and never pushed back"
        );
    }
    let mut seen = Vec::with_capacity(accepted);
    drain_b(pair, len, accepted, CHECK, &mut seen);
    let stream = judge(caps, CHECK, accepted, &seen);
    // Room again: one more packet goes through.
    let extra = accepted as u64;
    let deadline = Instant::now() + pair.timeout;
    loop {
        match pair
            .a
            .send(pair.b_at_a, len, |buf| fill_pattern(buf, extra))
        {
            Ok(()) => break,
            Err(TransportError::WouldBlock) => {
                // b takes in retransmissions too (see `one_way`): b drained every packet,
                // but an acknowledgement it sent may have been lost.
                pair.pump();
                pair.absorb_a(CHECK);
                pair.absorb_b(CHECK);
            }
            Err(e) => panic!("{CHECK}: send after draining failed: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "{CHECK}: a still pushes back {:?} after b drained",
            pair.timeout
        );
    }
    let mut tail = Vec::new();
    drain_b(pair, len, 1, CHECK, &mut tail);
    if caps.reliable {
        assert_eq!(tail, [extra], "{CHECK}: the packet sent after draining");
    }
    BackPressure {
        accepted,
        pushed_back,
        delivered: stream.delivered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_round_trip_and_detect_damage() {
        let mut buf = vec![0u8; 100];
        fill_pattern(&mut buf, 77);
        assert_eq!(check_pattern(&buf), Some(77));
        buf[50] ^= 1;
        assert_eq!(check_pattern(&buf), None);
        assert_eq!(check_pattern(&buf[..7]), None);
        assert_eq!(check_pattern(&buf[..TAGGED_LEN - 1]), None);
        let mut small = [0u8; 3];
        fill_pattern(&mut small, 0x03_0201);
        assert_eq!(small, [FIRST_BYTE, 1, 2]);
    }

    #[test]
    fn every_packet_starts_with_a_packet_type_and_short_ones_keep_their_bytes() {
        for len in 1..=TAGGED_LEN + 2 {
            for tag in [0u64, 0xF8, 0xFB, 0xFF, u64::MAX] {
                let mut buf = vec![0u8; len];
                fill_pattern(&mut buf, tag);
                assert_eq!(buf[0], FIRST_BYTE, "len {len} tag {tag:#x}");
                let head = (len - 1).min(8);
                assert_eq!(buf[1..1 + head], tag.to_le_bytes()[..head]);
                let whole = check_pattern(&buf);
                assert_eq!(whole, (len >= TAGGED_LEN).then_some(tag), "len {len}");
            }
        }
    }

    #[test]
    fn size_classes_cover_the_edges() {
        let s = size_classes(1000);
        assert_eq!(&s[..3], &[1, 2, 3]);
        assert!(s.contains(&64) && s.contains(&127) && s.contains(&513));
        assert_eq!(&s[s.len() - 2..], &[999, 1000]);
        assert_eq!(size_classes(5), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn judge_holds_claims_to_account() {
        let reliable_ordered = Capabilities {
            max_inline: 8,
            mtu: 8,
            ordering: Ordering::PerPeer,
            reliable: true,
            rdma_put: false,
            rdma_get: false,
            atomic_offload: false,
            atomics_coherent_with_cpu: true,
        };
        let unreliable = Capabilities {
            ordering: Ordering::Unordered,
            reliable: false,
            ..reliable_ordered
        };
        assert_eq!(
            judge(unreliable, "t", 4, &[0, 2, 1]),
            Stream {
                sent: 4,
                delivered: 3,
                out_of_order: 1
            }
        );
        let lost = std::panic::catch_unwind(|| judge(reliable_ordered, "t", 4, &[0, 1, 2]));
        assert!(lost.is_err());
        let reordered = std::panic::catch_unwind(|| judge(reliable_ordered, "t", 3, &[0, 2, 1]));
        assert!(reordered.is_err());
        let twice = std::panic::catch_unwind(|| judge(unreliable, "t", 3, &[0, 0]));
        assert!(twice.is_err());
    }
}
