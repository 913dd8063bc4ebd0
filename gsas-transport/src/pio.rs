//! The PIO path over Exanet: a packet whose frame fits one 64-byte mailbox message travels
//! as exactly that message, outside the reliability layer ([`PioTx`], [`PioRx`], the
//! [`Pio`] hooks that [`OwnedReliable`](super::reliable::OwnedReliable) calls).
//!
//! What it is. The NI reports the fate of every mailbox message (model section 5): `ACKED`
//! means delivered into the destination mailbox exactly once, `NACKED` with `RING_FULL`,
//! `PDID_MISMATCH` or `NO_SUCH_EP` means refused (never delivered), and `UNREACHABLE`
//! means its ack timeout passed: the message *or its ack* was lost, so it may have
//! arrived. So of the reliability layer's work only two things are left for small
//! packets: resending after a NACK or a timeout until a deadline, as the layer resends a
//! lost datagram whatever the NI's reason (the driver does it,
//! `Endpoint::try_send_persistent`), and discarding the second copy that a resend after a lost
//! ack delivers. For that every PIO message carries a 16-byte header in place of the
//! 16-byte job-key header of the reliability frames, with the same magic position and the
//! key at the same offset:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | magic `GP` ([`MAGIC`]) |
//! | 2 | 2 | sequence number of the message in the stream from this endpoint to that one |
//! | 4 | 4 | the sender's incarnation (time-based, newer after every open of the endpoint) |
//! | 8 | 8 | the job key |
//!
//! and the gsas packet follows (up to [`MAX_PACKET`] = 48 bytes: an 8- or 16-byte put, every
//! get and atomic request, replies with up to 40 bytes of data). The receiver keeps per
//! source endpoint a window of 1024 sequence numbers ([`PioRx`]) and drops a number it has
//! seen; it forgets a source's window only after the source was silent for longer than
//! any sender resends ([`FORGET_AFTER`]), however many sources there are, so that a resent
//! put or atomic is never applied twice. No software acknowledgement, timer or window is needed: the NI's ack is the
//! acknowledgement, its timeout the timer, the 16-deep TX ring the window. [`PioHeader`]
//! is the header's wire view (`parse`, `emit`).
//!
//! Why the window is enough: a message is resent right after its timeout is reaped, behind
//! at most the 15 later messages of the TX ring and the driver's queued resends (at most
//! 64), so the copy that a lost ack produces is always far inside the window. A message
//! refused with `RING_FULL` is different: it waits in its sender's resend queue with a
//! backoff that grows to 10 ms, refused again whenever the ring is full, while the
//! sender's later messages take every free place (a node's PEs hammering one service, as
//! GUPS does), so more than 1024 later ones can be delivered before it. The window then
//! moves on and the numbers it leaves behind unseen are remembered as *holes* (at most
//! [`MAX_HOLES`] per stream, oldest forgotten first; a sender never has more than 96
//! messages unfinished): a message behind the window is delivered if it fills a hole and
//! dropped as a copy otherwise. Before holes were remembered such a message was taken
//! for a copy and dropped, and its operation failed at the requester's deadline (`osb_gups`
//! on 8 PEs over the emulator: `shmem_quiet: timed out`). A stream is numbered from 0, so
//! a receiver that first hears a source at a number inside the window starts its window
//! at 0 (the earlier numbers may still come); one that hears it at a later number (it
//! restarted, or forgot the source) starts half a window back. A new incarnation of a
//! sender (a PE restarted on the endpoint) resets its stream; a message of an older one
//! (a straggler of a process that ended) is dropped.
//!
//! What it is not: a path for packets above [`MAX_PACKET`] (they stay in the reliability
//! layer's frames, pulled by RDMA), nor ordered (like the frames, PIO messages to one peer
//! may be delivered out of order when one is resent).
//!
//! Thread-safety: plain single-owner values.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use exanet::Dest;
use gsas_core::transport::{Transport, TransportError};

/// Magic of a PIO message (the first two bytes).
pub const MAGIC: [u8; 2] = *b"GP";
/// Bytes of the PIO header.
pub const HEADER_LEN: usize = 16;
/// Largest gsas packet that travels by PIO (one 64-byte mailbox message with the header).
pub const MAX_PACKET: usize = 64 - HEADER_LEN;
/// Sequence numbers a receiver remembers per source endpoint.
const WINDOW: u16 = 1024;
/// An incarnation older than the current one of its source is a straggler of an ended
/// process only while the current one is younger than this; later it is a new process
/// (incarnations wrap after about 70 minutes).
const QUIET: Duration = Duration::from_secs(10);
/// Numbers a receiver remembers per source endpoint as left behind unseen by its window.
/// A sender has at most 16 messages in its TX ring and 64 queued resends (the driver's
/// `max_queued_retries`; reaping a full ring of NACKs can add 16 more) unfinished at any
/// time, whatever their destinations, so no more than 96 numbers of one stream can still
/// arrive behind the window; the rest of the room is margin.
const MAX_HOLES: usize = 256;
/// Source endpoints remembered before the receiver looks for ones it may forget.
const MAX_STREAMS: usize = 4096;
/// How long a source endpoint must have been silent before its window may be forgotten:
/// longer than any sender resends a message (its deadline, `GSAS_DEADLINE_MS`, is at most
/// an hour), so no copy of a message it sent can still arrive. Until then the window
/// stays, however many sources there are: forgetting a live one would deliver a resent
/// put or atomic a second time.
const FORGET_AFTER: Duration = Duration::from_secs(3700);

/// Field offsets of the PIO header (the table in the module docs).
mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..2;
    pub const SEQ: Range<usize> = 2..4;
    pub const INCARNATION: Range<usize> = 4..8;
    pub const KEY: Range<usize> = 8..16;
}

/// The content of a PIO header, after the wire views of `gsas_core::wire` and the GSX1
/// header: [`PioHeader::parse`] never panics (it refuses a short buffer or another magic),
/// [`PioHeader::emit`] panics only when the buffer is shorter than [`HEADER_LEN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PioHeader {
    /// The message's number in the stream from its source endpoint to its destination.
    pub seq: u16,
    /// The sender's incarnation.
    pub incarnation: u32,
    /// The job key.
    pub key: u64,
}

impl PioHeader {
    /// Reads the header at the start of `msg`; `None` when `msg` is shorter than the header
    /// or does not start with [`MAGIC`].
    #[inline]
    pub fn parse(msg: &[u8]) -> Option<PioHeader> {
        let h = msg.get(..HEADER_LEN)?;
        if h[field::MAGIC] != MAGIC {
            return None;
        }
        let mut seq = [0u8; 2];
        seq.copy_from_slice(&h[field::SEQ]);
        let mut inc = [0u8; 4];
        inc.copy_from_slice(&h[field::INCARNATION]);
        let mut key = [0u8; 8];
        key.copy_from_slice(&h[field::KEY]);
        Some(PioHeader {
            seq: u16::from_le_bytes(seq),
            incarnation: u32::from_le_bytes(inc),
            key: u64::from_le_bytes(key),
        })
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `head`.
    #[inline]
    pub fn emit(&self, head: &mut [u8]) {
        let h = &mut head[..HEADER_LEN];
        h[field::MAGIC].copy_from_slice(&MAGIC);
        h[field::SEQ].copy_from_slice(&self.seq.to_le_bytes());
        h[field::INCARNATION].copy_from_slice(&self.incarnation.to_le_bytes());
        h[field::KEY].copy_from_slice(&self.key.to_le_bytes());
    }
}

/// The hash of an endpoint address for the per-endpoint maps: its 42 bits folded by a
/// multiplication (std's SipHash costs more than the rest of a PIO send; the keys are NI
/// stamped endpoint addresses, not attacker-chosen strings).
#[derive(Default)]
pub struct DestHash(u64);

impl Hasher for DestHash {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0 << 8 | u64::from(b);
        }
    }

    fn write_u16(&mut self, v: u16) {
        self.0 = self.0 << 16 | u64::from(v);
    }

    fn write_u32(&mut self, v: u32) {
        self.0 = self.0 << 32 | u64::from(v);
    }

    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// A map keyed by endpoint address.
type DestMap<V> = HashMap<Dest, V, BuildHasherDefault<DestHash>>;

/// The transport hooks of the PIO path; the defaults are a transport without one.
pub trait Pio: Transport {
    /// Whether a packet of `len` bytes to `peer` goes by PIO.
    #[inline]
    fn pio_fits(&self, _peer: &Self::Peer, _len: usize) -> bool {
        false
    }

    /// Sends a packet by PIO, resent by the NI driver for `deadline` after its first
    /// refusal.
    fn pio_send<R, F>(
        &mut self,
        _peer: Self::Peer,
        _len: usize,
        _deadline: Duration,
        _fill: F,
    ) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        Err(TransportError::TooLarge)
    }

    /// Whether a packet received by PIO waits for [`pio_recv`](Self::pio_recv).
    #[inline]
    fn pio_ready(&self) -> bool {
        false
    }

    /// Hands the next packet received by PIO to `f`, if any.
    fn pio_recv<R, F>(&mut self, _f: F) -> Option<R>
    where
        F: FnOnce(Self::Peer, &[u8]) -> R,
    {
        None
    }

    /// The next peer a PIO packet could not be delivered to by its deadline.
    fn pio_lost(&mut self) -> Option<Self::Peer> {
        None
    }

    /// Whether PIO messages wait for their final status or their resend.
    fn pio_pending(&self) -> bool {
        false
    }
}

/// No PIO path on the in-process loopback (tests of the layer).
impl<const N: usize> Pio for gsas_core::transport::loopback::LoopbackEndpoint<'_, '_, N> {}

/// A time-based incarnation: microseconds of the wall clock, wrapping.
pub fn fresh_incarnation() -> u32 {
    (super::reliable::fresh_epoch() / 1000) as u32
}

/// The sending side: a sequence number per destination endpoint, and the key last used
/// (to name the peer of a message lost at its deadline).
#[derive(Debug)]
pub struct PioTx {
    incarnation: u32,
    streams: DestMap<(u16, u64)>,
}

impl PioTx {
    /// A sender of incarnation `incarnation`.
    pub fn new(incarnation: u32) -> PioTx {
        PioTx {
            incarnation,
            streams: DestMap::default(),
        }
    }

    /// Writes the header of the next message to `dest` with `key` into `head`.
    #[inline]
    pub fn header(&mut self, dest: Dest, key: u64, head: &mut [u8]) {
        let s = self.streams.entry(dest).or_insert((0, key));
        let seq = s.0;
        *s = (seq.wrapping_add(1), key);
        PioHeader {
            seq,
            incarnation: self.incarnation,
            key,
        }
        .emit(head);
    }

    /// The key last sent to `dest` (0 if none).
    pub fn key_of(&self, dest: Dest) -> u64 {
        self.streams.get(&dest).map_or(0, |s| s.1)
    }
}

/// What the receiver remembers of one source endpoint.
#[derive(Debug)]
struct Stream {
    incarnation: u32,
    /// Every number before `next` counts as seen.
    next: u16,
    /// Bit `x % WINDOW`: number `x` in `next..next + WINDOW` was seen.
    seen: [u64; WINDOW as usize / 64],
    /// When this incarnation was first heard.
    since: Instant,
    /// When this source was last heard.
    last: Instant,
    /// Numbers the window left behind unseen, oldest first (at most [`MAX_HOLES`]): a
    /// message the NI refused while more than [`WINDOW`] later ones were delivered, still
    /// in its sender's resend queue.
    holes: VecDeque<u16>,
}

/// What [`Stream::accept`] found a number to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Not seen before, inside the window or ahead of it.
    New,
    /// Not seen before, behind the window (a hole it left).
    Late,
    /// Seen: a copy.
    Copy,
}

impl Stream {
    /// The stream of a source first heard (or heard in a new incarnation) with number
    /// `first`. A sender numbers each stream from 0, so when `first` is inside the window
    /// every earlier number is still to come (it may be in its sender's resend queue);
    /// later (a receiver that restarted or forgot the source) half the window is left for
    /// stragglers.
    fn new(incarnation: u32, first: u16, now: Instant) -> Stream {
        Stream {
            incarnation,
            next: if first < WINDOW {
                0
            } else {
                first.wrapping_sub(WINDOW / 2)
            },
            seen: [0; WINDOW as usize / 64],
            since: now,
            last: now,
            holes: VecDeque::new(),
        }
    }

    fn bit(x: u16) -> (usize, u64) {
        let i = usize::from(x % WINDOW);
        (i / 64, 1u64 << (i % 64))
    }

    /// Records `seq` and says whether it was new, late or a copy.
    fn accept(&mut self, seq: u16) -> Seen {
        let mut d = seq.wrapping_sub(self.next);
        if d >= u16::MAX / 2 {
            // Behind the window: new only if the window left it behind unseen.
            return match self.holes.iter().position(|&h| h == seq) {
                Some(i) => {
                    self.holes.remove(i);
                    Seen::Late
                }
                None => Seen::Copy,
            };
        }
        while d >= WINDOW {
            // Leave the oldest number behind (remembered as a hole if it was not seen).
            self.advance();
            d -= 1;
        }
        let (w, b) = Stream::bit(seq);
        if self.seen[w] & b != 0 {
            return Seen::Copy;
        }
        self.seen[w] |= b;
        while {
            let (w, b) = Stream::bit(self.next);
            self.seen[w] & b != 0
        } {
            self.advance();
        }
        Seen::New
    }

    fn advance(&mut self) {
        let (w, b) = Stream::bit(self.next);
        if self.seen[w] & b == 0 {
            if self.holes.len() == MAX_HOLES {
                self.holes.pop_front();
            }
            self.holes.push_back(self.next);
        }
        self.seen[w] &= !b;
        self.next = self.next.wrapping_add(1);
    }
}

/// The receiving side: duplicate suppression per source endpoint (see the module docs).
#[derive(Debug, Default)]
pub struct PioRx {
    streams: DestMap<Stream>,
    /// Messages dropped as duplicates or stragglers of an older incarnation.
    pub dropped: u64,
    /// Messages delivered from behind their stream's window (refused with `RING_FULL`
    /// while more than a window of later ones arrived), since the receiver was made.
    late: u64,
}

impl PioRx {
    /// Parses the header of a message from `src`: `Some(key)` if its packet is to be
    /// delivered, `None` if it is a duplicate, a straggler or malformed (counted).
    pub fn accept(&mut self, src: Dest, msg: &[u8]) -> Option<u64> {
        let Some(PioHeader {
            seq,
            incarnation: inc,
            key,
        }) = PioHeader::parse(msg)
        else {
            self.dropped += 1;
            return None;
        };
        let now = Instant::now();
        if self.streams.len() >= MAX_STREAMS && !self.streams.contains_key(&src) {
            self.forget_silent(now);
        }
        let s = self
            .streams
            .entry(src)
            .or_insert_with(|| Stream::new(inc, seq, now));
        if s.incarnation != inc {
            let newer = (inc.wrapping_sub(s.incarnation) as i32) > 0;
            if !newer && now.duration_since(s.since) < QUIET {
                self.dropped += 1;
                return None;
            }
            *s = Stream::new(inc, seq, now);
        }
        s.last = now;
        match s.accept(seq) {
            Seen::New => Some(key),
            Seen::Late => {
                self.late += 1;
                Some(key)
            }
            Seen::Copy => {
                self.dropped += 1;
                None
            }
        }
    }

    /// Forgets the sources silent for [`FORGET_AFTER`] (none, while every one may still
    /// resend: then the table grows).
    fn forget_silent(&mut self, now: Instant) {
        self.streams
            .retain(|_, s| now.duration_since(s.last) < FORGET_AFTER);
    }

    /// Messages delivered from behind their stream's window: each one was dropped as a
    /// copy before holes were remembered (see the module docs).
    pub fn late(&self) -> u64 {
        self.late
    }

    /// How many sources the receiver remembers (for tests and diagnostics).
    pub fn sources(&self) -> usize {
        self.streams.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Dest = Dest { coord: 1, ep: 1 };

    fn msg(seq: u16, inc: u32, key: u64) -> [u8; 16] {
        let mut tx = PioTx::new(inc);
        tx.streams.insert(A, (seq, key));
        let mut h = [0u8; 16];
        tx.header(A, key, &mut h);
        h
    }

    #[test]
    fn the_header_has_its_documented_bytes_and_parse_refuses_what_is_not_one() {
        let h = PioHeader {
            seq: 0x0201,
            incarnation: 0x0605_0403,
            key: 0x0e0d_0c0b_0a09_0807,
        };
        let mut b = [0xffu8; 20];
        h.emit(&mut b);
        assert_eq!(
            b[..16],
            [b'G', b'P', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
        );
        assert_eq!(b[16..], [0xff; 4], "nothing written past the header");
        assert_eq!(PioHeader::parse(&b), Some(h));
        for n in 0..HEADER_LEN {
            assert_eq!(PioHeader::parse(&b[..n]), None, "{n} bytes");
        }
        b[1] = b'X';
        assert_eq!(PioHeader::parse(&b), None, "another magic");
        // The job-key header of the frames is not a PIO header.
        assert_eq!(
            PioHeader::parse(b"GSX1\0\0\0\0\x07\x08\x09\x0a\x0b\x0c\x0d\x0e"),
            None
        );
    }

    #[test]
    fn duplicates_are_dropped_and_late_numbers_delivered() {
        let mut rx = PioRx::default();
        assert_eq!(rx.accept(A, &msg(0, 7, 9)), Some(9));
        assert_eq!(rx.accept(A, &msg(2, 7, 9)), Some(9), "a gap is fine");
        assert_eq!(rx.accept(A, &msg(2, 7, 9)), None, "a duplicate is not");
        assert_eq!(
            rx.accept(A, &msg(1, 7, 9)),
            Some(9),
            "a resent message fills it"
        );
        assert_eq!(rx.accept(A, &msg(1, 7, 9)), None);
        assert_eq!(rx.accept(A, &msg(0, 7, 9)), None);
        // Across the wrap of the 16-bit numbers and far beyond the window.
        for seq in 3..=u16::MAX {
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), Some(9), "{seq}");
        }
        for seq in 0..3000u16 {
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), Some(9), "{seq}");
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), None, "{seq}");
        }
        assert_eq!(rx.dropped, 3003);
    }

    #[test]
    fn a_message_refused_while_more_than_a_window_of_later_ones_arrived_is_delivered_once() {
        // osb_gups on 8 PEs over the emulator: a request refused with RING_FULL waited in
        // its sender's resend queue while thousands of later ones were delivered; it was
        // then taken for a copy and dropped, and shmem_quiet timed out.
        let mut rx = PioRx::default();
        let late = [3u16, 700, 701, 2500];
        for seq in 0..6000u16 {
            if !late.contains(&seq) {
                assert_eq!(rx.accept(A, &msg(seq, 7, 9)), Some(9), "{seq}");
            }
        }
        for seq in late {
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), Some(9), "late {seq}");
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), None, "a copy of late {seq}");
        }
        // Numbers that were delivered stay copies, behind the window as inside it.
        for seq in [0u16, 4, 699, 702, 2499, 5999] {
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), None, "{seq}");
        }
        assert_eq!(rx.dropped, 10);
        assert_eq!(rx.late(), 4, "all four came from behind the window");
        assert!(rx.streams[&A].holes.is_empty());
        // Across the wrap of the numbers: a hole left at 65,530 is filled after 0..3000.
        for seq in 6000..=u16::MAX {
            if seq != 65_530 {
                assert_eq!(rx.accept(A, &msg(seq, 7, 9)), Some(9), "{seq}");
            }
        }
        for seq in 0..3000u16 {
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), Some(9), "{seq}");
        }
        assert_eq!(rx.accept(A, &msg(65_530, 7, 9)), Some(9));
        assert_eq!(rx.accept(A, &msg(65_530, 7, 9)), None);
    }

    #[test]
    fn a_source_first_heard_late_in_its_stream_still_gets_its_earlier_messages() {
        // The first message to arrive is number 600: 0..600 were refused (RING_FULL) and
        // are still being resent; before, the window started at 88 and dropped 0..88.
        let mut rx = PioRx::default();
        assert_eq!(rx.accept(A, &msg(600, 7, 9)), Some(9));
        for seq in (0..600u16).rev() {
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), Some(9), "{seq}");
        }
        for seq in 0..=600u16 {
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), None, "a copy of {seq}");
        }
        // A receiver that hears a source first far into its stream (it restarted) keeps
        // half a window for stragglers.
        let b = Dest { coord: 2, ep: 1 };
        let at = |seq: u16| {
            let mut tx = PioTx::new(7);
            tx.streams.insert(b, (seq, 9));
            let mut h = [0u8; 16];
            tx.header(b, 9, &mut h);
            h
        };
        assert_eq!(rx.accept(b, &at(5000)), Some(9));
        assert_eq!(rx.accept(b, &at(5000 - 512)), Some(9));
        assert_eq!(rx.accept(b, &at(5000 - 513)), None);
    }

    #[test]
    fn the_holes_a_stream_remembers_are_bounded_and_the_oldest_go_first() {
        let mut rx = PioRx::default();
        // Every other number of 0..2 * (MAX_HOLES + 10) is missing, then the window moves
        // far past them: only the newest MAX_HOLES are remembered.
        let n = 2 * (MAX_HOLES as u16 + 10);
        for seq in (0..n).step_by(2) {
            assert_eq!(rx.accept(A, &msg(seq, 7, 9)), Some(9));
        }
        assert_eq!(rx.accept(A, &msg(n - 1 + WINDOW, 7, 9)), Some(9));
        let holes = &rx.streams[&A].holes;
        assert_eq!(holes.len(), MAX_HOLES);
        assert_eq!(
            holes.front(),
            Some(&21),
            "the 10 oldest odd numbers went first"
        );
        assert_eq!(
            rx.accept(A, &msg(19, 7, 9)),
            None,
            "forgotten: taken for a copy"
        );
        assert_eq!(rx.accept(A, &msg(21, 7, 9)), Some(9));
        assert_eq!(rx.accept(A, &msg(n - 1, 7, 9)), Some(9));
    }

    #[test]
    fn a_new_incarnation_resets_and_an_old_one_is_a_straggler() {
        let mut rx = PioRx::default();
        for seq in 100..110 {
            assert!(rx.accept(A, &msg(seq, 5, 1)).is_some());
        }
        assert_eq!(rx.accept(A, &msg(0, 6, 2)), Some(2), "restarted at 0");
        assert_eq!(rx.accept(A, &msg(105, 5, 1)), None, "the old process");
        assert_eq!(rx.accept(A, &msg(1, 6, 2)), Some(2));
        assert_eq!(rx.accept(A, &msg(2, 6, 2)), Some(2));
        assert_eq!(rx.accept(A, &[0u8; 15]), None, "too short");
    }

    #[test]
    fn many_sources_keep_their_windows_until_they_fall_silent() {
        // Issue 25: beyond 4,096 sources the one silent longest was forgotten, so a resend
        // of its last put or atomic was delivered a second time.
        let mut rx = PioRx::default();
        let src = |i: u32| Dest {
            coord: i / 8,
            ep: (i % 8) as u16,
        };
        let n = MAX_STREAMS as u32 + 1000;
        for i in 0..n {
            let mut tx = PioTx::new(3);
            tx.streams.insert(src(i), (40, 1));
            let mut h = [0u8; 16];
            tx.header(src(i), 1, &mut h);
            assert_eq!(rx.accept(src(i), &h), Some(1), "source {i}");
        }
        assert_eq!(rx.sources(), n as usize);
        for i in [0, 1, n / 2, n - 1] {
            let mut tx = PioTx::new(3);
            tx.streams.insert(src(i), (40, 1));
            let mut h = [0u8; 16];
            tx.header(src(i), 1, &mut h);
            assert_eq!(rx.accept(src(i), &h), None, "the resend of source {i}");
        }
        assert_eq!(rx.dropped, 4);
        // Silent for longer than any sender resends: forgotten.
        rx.forget_silent(Instant::now() + FORGET_AFTER + Duration::from_secs(1));
        assert_eq!(rx.sources(), 0);
    }
}
