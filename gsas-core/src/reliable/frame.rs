//! Wire format of the frames the reliability layer sends on the inner transport.
//!
//! A frame is a 40-byte header followed by zero or more length-prefixed packets. All
//! integers are little-endian.
//!
//! | offset | size | field        | meaning                                                      |
//! |-------:|-----:|--------------|--------------------------------------------------------------|
//! | 0      | 2    | magic        | `0x52 0x67` (`"Rg"`), [`MAGIC`]                              |
//! | 2      | 1    | version      | [`VERSION`] (1)                                              |
//! | 3      | 1    | flags        | bit 0 `DATA`: carries packets and a sequence number; bit 1 `ACK`: `ack` and `sack` are valid; bit 2 `REFUSED` (alone): a refusal, see below; bit 3 `COOKIE` (with `DATA`): `sack` holds the cookie the receiver handed out instead of selective acks (with `ACK`, `ack` stays the cumulative ack), see below; other bits must be 0 |
//! | 4      | 8    | epoch        | sender's epoch, never 0                                      |
//! | 12     | 8    | dest_epoch   | receiver's epoch as the sender knows it; 0 = not known yet   |
//! | 20     | 4    | seq          | frame sequence number (`DATA` only, else 0)                  |
//! | 24     | 4    | base         | sender's oldest unacknowledged sequence number: it will never (re)send anything before `base` |
//! | 28     | 4    | ack          | cumulative ack: every frame up to and including `ack` arrived |
//! | 32     | 8    | sack         | selective ack: bit `i` set = frame `ack + 1 + i` arrived      |
//! | 40     | ...  | packets      | `DATA`: one or more of `[len: u16][len bytes]`; otherwise empty |
//!
//! A *refusal* ([`RefusalRepr`]) has only the `REFUSED` flag and no payload: the sender
//! (a service) will not keep state for the receiver, so it will not take its frames.
//! `dest_epoch` echoes the epoch of the refused frame (proof that the refuser saw it), `seq`
//! holds the reason code ([`RefusalReason`]: 1 unknown job, 2 job full, 3 table full, 4 host
//! share full, 5 job ended, 6 user's share full, 7 challenge), `ack` the number of peers in use and `sack`
//! the limit that was reached; `base` is 0. Receivers that predate refusals drop the frame
//! as malformed (unknown flag).
//!
//! A *challenge* is a refusal with reason 7 ([`RefusalReason::Challenge`]): a receiver that
//! keeps no state for senders it does not know hands the sender of a data frame a cookie
//! (`ack` its high 32 bits, `sack` the low ones) and drops the frame. The sender repeats its
//! data frames with the `COOKIE` flag and the cookie in `sack` (its cumulative ack, if it
//! has one, stays in `ack`; the selective bits are left out) until a frame of the receiver
//! arrives; only a frame with a valid cookie gets a slot. The cookie is the receiver's keyed hash of the sender's
//! address, key and epoch (TCP's SYN cookies, DTLS's HelloVerify): senders that forge their
//! source address never see it, and the receiver keeps nothing for them.
//!
//! Bit 0 of `sack` is always 0 when emitted by this layer (frame `ack + 1` has not arrived,
//! otherwise `ack` would be higher), so 63 frames above the cumulative ack are reported.
//!
//! No-panic contract: [`Frame::new_checked`] and [`FrameRepr::parse`] accept any byte slice
//! and return an error for anything that is not a well-formed frame; after a successful
//! `parse`, [`Frame::packets`] yields exactly the packets the frame carries. The unchecked
//! accessors of [`Frame`] may panic on a buffer shorter than [`HEADER_LEN`]; use them only on
//! a frame from `new_checked`.

use super::seq::Seq;

/// Frame magic, the first two bytes on the wire: `0x52 0x67`.
pub const MAGIC: u16 = 0x6752;
/// Frame format version.
pub const VERSION: u8 = 1;
/// Length of the frame header.
pub const HEADER_LEN: usize = 40;
/// Length of the prefix in front of each packet.
pub const PACKET_PREFIX_LEN: usize = 2;
/// Largest packet one prefix can describe.
pub const MAX_PACKET_LEN: usize = u16::MAX as usize;

/// Flag bit: the frame carries packets and a sequence number.
pub const FLAG_DATA: u8 = 0x01;
/// Flag bit: the `ack` and `sack` fields are valid.
pub const FLAG_ACK: u8 = 0x02;
/// Flag bit (alone): the frame is a refusal ([`RefusalRepr`]).
pub const FLAG_REFUSED: u8 = 0x04;
/// Flag bit (with `DATA`): `sack` holds the receiver's cookie (no selective acks).
pub const FLAG_COOKIE: u8 = 0x08;

mod field {
    use core::ops::Range;

    pub const MAGIC: Range<usize> = 0..2;
    pub const VERSION: usize = 2;
    pub const FLAGS: usize = 3;
    pub const EPOCH: Range<usize> = 4..12;
    pub const DEST_EPOCH: Range<usize> = 12..20;
    pub const SEQ: Range<usize> = 20..24;
    pub const BASE: Range<usize> = 24..28;
    pub const ACK: Range<usize> = 28..32;
    pub const SACK: Range<usize> = 32..40;
    pub const PAYLOAD: usize = 40;
}

/// Why bytes are not a valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FrameError {
    /// Shorter than the header.
    Truncated,
    /// The magic is wrong.
    BadMagic(u16),
    /// The version is not [`VERSION`].
    BadVersion(u8),
    /// Unknown flag bits are set.
    BadFlags(u8),
    /// The sender epoch is 0.
    ZeroEpoch,
    /// A packet prefix runs past the end of the frame.
    BadPacketList,
    /// A `DATA` frame carries no packet.
    EmptyData,
    /// A frame without `DATA` has bytes after the header.
    TrailingBytes,
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FrameError::Truncated => f.write_str("frame shorter than its 40-byte header"),
            FrameError::BadMagic(m) => write!(f, "bad frame magic {m:#06x}"),
            FrameError::BadVersion(v) => write!(f, "unsupported frame version {v}"),
            FrameError::BadFlags(b) => write!(f, "unknown frame flags {b:#04x}"),
            FrameError::ZeroEpoch => f.write_str("frame sender epoch is 0"),
            FrameError::BadPacketList => f.write_str("packet length runs past the frame end"),
            FrameError::EmptyData => f.write_str("data frame without packets"),
            FrameError::TrailingBytes => f.write_str("bytes after the header of an ack frame"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FrameError {}

fn u16_at(b: &[u8], at: core::ops::Range<usize>) -> u16 {
    let mut v = [0u8; 2];
    v.copy_from_slice(&b[at]);
    u16::from_le_bytes(v)
}

fn u32_at(b: &[u8], at: core::ops::Range<usize>) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[at]);
    u32::from_le_bytes(v)
}

fn u64_at(b: &[u8], at: core::ops::Range<usize>) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at]);
    u64::from_le_bytes(v)
}

/// A view of a frame in a byte buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole header.
    pub fn new_checked(buffer: T) -> Result<Self, FrameError> {
        let frame = Frame::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds a whole header.
    pub fn check_len(&self) -> Result<(), FrameError> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(FrameError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The magic field.
    pub fn magic(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::MAGIC)
    }

    /// The version field.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The flags field.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The sender epoch.
    pub fn epoch(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::EPOCH)
    }

    /// The receiver epoch as the sender knows it (0 = unknown).
    pub fn dest_epoch(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::DEST_EPOCH)
    }

    /// The sequence number.
    pub fn seq(&self) -> Seq {
        Seq(u32_at(self.buffer.as_ref(), field::SEQ))
    }

    /// The sender's oldest unacknowledged sequence number.
    pub fn base(&self) -> Seq {
        Seq(u32_at(self.buffer.as_ref(), field::BASE))
    }

    /// The cumulative ack.
    pub fn ack(&self) -> Seq {
        Seq(u32_at(self.buffer.as_ref(), field::ACK))
    }

    /// The selective-ack bitmap.
    pub fn sack(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::SACK)
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }

    /// The packets of the payload; stops at the first malformed prefix.
    pub fn packets(&self) -> Packets<'_> {
        Packets::new(self.payload())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the magic field.
    pub fn set_magic(&mut self, v: u16) {
        self.bytes_mut()[field::MAGIC].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the version field.
    pub fn set_version(&mut self, v: u8) {
        self.bytes_mut()[field::VERSION] = v;
    }

    /// Sets the flags field.
    pub fn set_flags(&mut self, v: u8) {
        self.bytes_mut()[field::FLAGS] = v;
    }

    /// Sets the sender epoch.
    pub fn set_epoch(&mut self, v: u64) {
        self.bytes_mut()[field::EPOCH].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the receiver epoch.
    pub fn set_dest_epoch(&mut self, v: u64) {
        self.bytes_mut()[field::DEST_EPOCH].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: Seq) {
        self.bytes_mut()[field::SEQ].copy_from_slice(&v.0.to_le_bytes());
    }

    /// Sets the base.
    pub fn set_base(&mut self, v: Seq) {
        self.bytes_mut()[field::BASE].copy_from_slice(&v.0.to_le_bytes());
    }

    /// Sets the cumulative ack.
    pub fn set_ack(&mut self, v: Seq) {
        self.bytes_mut()[field::ACK].copy_from_slice(&v.0.to_le_bytes());
    }

    /// Sets the selective-ack bitmap.
    pub fn set_sack(&mut self, v: u64) {
        self.bytes_mut()[field::SACK].copy_from_slice(&v.to_le_bytes());
    }

    /// The bytes after the header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.bytes_mut()[field::PAYLOAD..]
    }
}

/// Iterator over the length-prefixed packets of a frame payload.
#[derive(Clone, Debug)]
pub struct Packets<'p> {
    rest: &'p [u8],
}

impl<'p> Packets<'p> {
    /// Iterates over the packets in `payload` (the bytes after a frame header).
    pub const fn new(payload: &'p [u8]) -> Self {
        Packets { rest: payload }
    }

    /// The bytes not yet iterated over.
    pub const fn rest(&self) -> &'p [u8] {
        self.rest
    }
}

impl<'p> Iterator for Packets<'p> {
    type Item = &'p [u8];

    fn next(&mut self) -> Option<&'p [u8]> {
        let (prefix, after) = self.rest.split_first_chunk::<PACKET_PREFIX_LEN>()?;
        let len = u16::from_le_bytes(*prefix) as usize;
        if after.len() < len {
            self.rest = &[];
            return None;
        }
        let (packet, rest) = after.split_at(len);
        self.rest = rest;
        Some(packet)
    }
}

/// Checks that `payload` is a sequence of whole length-prefixed packets; returns their count.
pub fn check_packets(payload: &[u8]) -> Result<usize, FrameError> {
    let mut packets = Packets::new(payload);
    let mut count = 0;
    while !packets.rest().is_empty() {
        if packets.next().is_none() {
            return Err(FrameError::BadPacketList);
        }
        count += 1;
    }
    Ok(count)
}

/// Writes one packet prefix and returns the bytes after it; `None` if it does not fit or
/// `len` exceeds [`MAX_PACKET_LEN`].
pub fn emit_packet_prefix(buf: &mut [u8], len: usize) -> Option<&mut [u8]> {
    let len16 = u16::try_from(len).ok()?;
    if buf.len() < PACKET_PREFIX_LEN + len {
        return None;
    }
    buf[..PACKET_PREFIX_LEN].copy_from_slice(&len16.to_le_bytes());
    Some(&mut buf[PACKET_PREFIX_LEN..PACKET_PREFIX_LEN + len])
}

/// Acknowledgement fields of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AckRepr {
    /// Every frame up to and including this one arrived.
    pub cum: Seq,
    /// Bit `i` set: frame `cum + 1 + i` arrived.
    pub sack: u64,
}

/// The meaning of a frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FrameRepr {
    /// Sender epoch (non-zero).
    pub epoch: u64,
    /// Receiver epoch as the sender knows it; 0 = unknown.
    pub dest_epoch: u64,
    /// `Some` for a data frame (`DATA` flag), with its sequence number.
    pub seq: Option<Seq>,
    /// The sender's oldest unacknowledged sequence number.
    pub base: Seq,
    /// `Some` when the frame acknowledges (`ACK` flag).
    pub ack: Option<AckRepr>,
    /// `Some` when a data frame echoes the receiver's cookie (`COOKIE` flag; its ack, if
    /// any, then carries no selective bits).
    pub cookie: Option<u64>,
}

impl FrameRepr {
    /// Parses and validates a frame, including its packet list.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<FrameRepr, FrameError> {
        frame.check_len()?;
        if frame.magic() != MAGIC {
            return Err(FrameError::BadMagic(frame.magic()));
        }
        if frame.version() != VERSION {
            return Err(FrameError::BadVersion(frame.version()));
        }
        let flags = frame.flags();
        let cookie_ok = flags & FLAG_COOKIE == 0 || flags & FLAG_DATA != 0;
        if flags & !(FLAG_DATA | FLAG_ACK | FLAG_COOKIE) != 0 || !cookie_ok {
            return Err(FrameError::BadFlags(flags));
        }
        if frame.epoch() == 0 {
            return Err(FrameError::ZeroEpoch);
        }
        let seq = if flags & FLAG_DATA != 0 {
            if check_packets(frame.payload())? == 0 {
                return Err(FrameError::EmptyData);
            }
            Some(frame.seq())
        } else {
            if !frame.payload().is_empty() {
                return Err(FrameError::TrailingBytes);
            }
            None
        };
        let cookie = (flags & FLAG_COOKIE != 0).then(|| frame.sack());
        let ack = (flags & FLAG_ACK != 0).then(|| AckRepr {
            cum: frame.ack(),
            sack: if cookie.is_some() { 0 } else { frame.sack() },
        });
        Ok(FrameRepr {
            epoch: frame.epoch(),
            dest_epoch: frame.dest_epoch(),
            seq,
            base: frame.base(),
            ack,
            cookie,
        })
    }

    /// Length of the header this representation emits.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `frame` (the payload is left alone). A cookie goes out only
    /// on a data frame, in the `sack` field (the ack's selective bits are left out).
    ///
    /// Panics if the buffer is shorter than [`HEADER_LEN`] (a caller bug, never input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        let mut flags = 0;
        if self.seq.is_some() {
            flags |= FLAG_DATA;
        }
        if self.ack.is_some() {
            flags |= FLAG_ACK;
        }
        let cookie = self.cookie.filter(|_| flags & FLAG_DATA != 0);
        if cookie.is_some() {
            flags |= FLAG_COOKIE;
        }
        let mut ack = self.ack.unwrap_or(AckRepr {
            cum: Seq(0),
            sack: 0,
        });
        if let Some(c) = cookie {
            ack.sack = c;
        }
        frame.set_magic(MAGIC);
        frame.set_version(VERSION);
        frame.set_flags(flags);
        frame.set_epoch(self.epoch);
        frame.set_dest_epoch(self.dest_epoch);
        frame.set_seq(self.seq.unwrap_or(Seq(0)));
        frame.set_base(self.base);
        frame.set_ack(ack.cum);
        frame.set_sack(ack.sack);
    }
}

/// Why a peer refused to keep state for the sender of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RefusalReason {
    /// The frame's job key names no job the receiver knows.
    UnknownJob,
    /// The job already has as many peers as the receiver allows per job.
    JobFull,
    /// The receiver's peer table is full.
    TableFull,
    /// Peers without a job (host actions such as remote FORK) fill their share of the
    /// table.
    HostFull,
    /// The frame's job ended on the receiver's node (every PE of it there left cleanly):
    /// its data frame is new to the receiver, so what it carries was never executed. An
    /// answer of a receiver that keeps an ended job's peers closed (see "Closing a peer"
    /// in the [layer docs](super)) or remembers the ended job's key.
    JobEnded,
    /// The job's user (the uid that started it on the receiver's node) has as many peers
    /// as the receiver allows per user, over all of the user's jobs there.
    UserFull,
    /// The frame's job was reclaimed on the receiver's node (a PE of it there ended
    /// without finalizing, or the service stopped): whatever the frame carries was not
    /// executed, and no operation of the job will be there any more.
    JobReclaimed,
    /// Not a refusal for good: the receiver keeps no state for an unknown sender until it
    /// echoes the cookie this carries ([`Refusal::cookie`](super::Refusal::cookie)); see the module docs.
    Challenge,
    /// A code this version does not know.
    Unknown(u8),
}

impl RefusalReason {
    /// The wire code.
    pub const fn code(self) -> u8 {
        match self {
            RefusalReason::UnknownJob => 1,
            RefusalReason::JobFull => 2,
            RefusalReason::TableFull => 3,
            RefusalReason::HostFull => 4,
            RefusalReason::JobEnded => 5,
            RefusalReason::UserFull => 6,
            RefusalReason::Challenge => 7,
            RefusalReason::JobReclaimed => 8,
            RefusalReason::Unknown(c) => c,
        }
    }
}

impl From<u8> for RefusalReason {
    fn from(c: u8) -> Self {
        match c {
            1 => RefusalReason::UnknownJob,
            2 => RefusalReason::JobFull,
            3 => RefusalReason::TableFull,
            4 => RefusalReason::HostFull,
            5 => RefusalReason::JobEnded,
            6 => RefusalReason::UserFull,
            7 => RefusalReason::Challenge,
            8 => RefusalReason::JobReclaimed,
            c => RefusalReason::Unknown(c),
        }
    }
}

impl core::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RefusalReason::UnknownJob => f.write_str("no job with this key is known there"),
            RefusalReason::JobFull => f.write_str("the job has as many peers as allowed per job"),
            RefusalReason::TableFull => f.write_str("its peer table is full"),
            RefusalReason::HostFull => {
                f.write_str("its share of the peer table for host actions is full")
            }
            RefusalReason::JobEnded => {
                f.write_str("the job has ended there (every PE of it on that node finalized)")
            }
            RefusalReason::UserFull => f.write_str(
                "the job's user has as many peers there as one user may have (its share of the peer table)",
            ),
            RefusalReason::JobReclaimed => f.write_str(
                "the job was reclaimed there (a PE of it on that node ended without \
                 shmem_finalize, or that node's service stopped it); see that PE's exit",
            ),
            RefusalReason::Challenge => {
                f.write_str("it asks the sender to echo a cookie before it keeps any state")
            }
            RefusalReason::Unknown(c) => write!(
                f,
                "refusal code {c}, which this release does not know: the other side runs \
                 another gsas release (the launcher, the PEs and every node's gsas-atomicd \
                 must be the same release)"
            ),
        }
    }
}

/// A refusal: what a receiver that will not keep state for a sender answers instead of an
/// acknowledgement (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RefusalRepr {
    /// The refuser's epoch (non-zero).
    pub epoch: u64,
    /// The epoch of the refused frame's sender.
    pub dest_epoch: u64,
    /// Why.
    pub reason: RefusalReason,
    /// Peers in use in the limit that was reached.
    pub in_use: u32,
    /// That limit.
    pub limit: u32,
}

impl RefusalRepr {
    /// Parses a refusal; any other frame (or a malformed one) is an error.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<RefusalRepr, FrameError> {
        frame.check_len()?;
        if frame.magic() != MAGIC {
            return Err(FrameError::BadMagic(frame.magic()));
        }
        if frame.version() != VERSION {
            return Err(FrameError::BadVersion(frame.version()));
        }
        if frame.flags() != FLAG_REFUSED {
            return Err(FrameError::BadFlags(frame.flags()));
        }
        if frame.epoch() == 0 {
            return Err(FrameError::ZeroEpoch);
        }
        if !frame.payload().is_empty() {
            return Err(FrameError::TrailingBytes);
        }
        Ok(RefusalRepr {
            epoch: frame.epoch(),
            dest_epoch: frame.dest_epoch(),
            reason: RefusalReason::from(frame.seq().0.min(255) as u8),
            in_use: frame.ack().0,
            limit: u32::try_from(frame.sack()).unwrap_or(u32::MAX),
        })
    }

    /// Writes the whole refusal (it has no payload) into `frame`.
    ///
    /// Panics if the buffer is shorter than [`HEADER_LEN`] (a caller bug, never input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_magic(MAGIC);
        frame.set_version(VERSION);
        frame.set_flags(FLAG_REFUSED);
        frame.set_epoch(self.epoch);
        frame.set_dest_epoch(self.dest_epoch);
        frame.set_seq(Seq(u32::from(self.reason.code())));
        frame.set_base(Seq(0));
        frame.set_ack(Seq(self.in_use));
        frame.set_sack(u64::from(self.limit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_rides_in_sack_beside_the_cumulative_ack() {
        let repr = FrameRepr {
            epoch: 5,
            dest_epoch: 0,
            seq: Some(Seq(9)),
            base: Seq(9),
            ack: Some(AckRepr {
                cum: Seq(4),
                sack: 0b110,
            }),
            cookie: Some(0xdead_beef_0000_0001),
        };
        let mut buf = [0u8; HEADER_LEN + 3];
        repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
        emit_packet_prefix(&mut buf[HEADER_LEN..], 1).unwrap()[0] = 7;
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(f.flags(), FLAG_DATA | FLAG_ACK | FLAG_COOKIE);
        let back = FrameRepr::parse(&f).unwrap();
        assert_eq!(back.cookie, repr.cookie);
        assert_eq!(
            back.ack,
            Some(AckRepr {
                cum: Seq(4),
                sack: 0
            }),
            "the cumulative ack stays, the selective bits give way"
        );
        // Not on a pure ack: the flag is refused there, and never emitted.
        let mut buf = [0u8; HEADER_LEN];
        FrameRepr { seq: None, ..repr }.emit(&mut Frame::new_unchecked(&mut buf[..]));
        assert_eq!(buf[3], FLAG_ACK);
        buf[3] = FLAG_ACK | FLAG_COOKIE;
        assert_eq!(
            FrameRepr::parse(&Frame::new_checked(&buf[..]).unwrap()),
            Err(FrameError::BadFlags(FLAG_ACK | FLAG_COOKIE))
        );
    }

    #[test]
    fn refusal_round_trip_and_is_not_a_frame() {
        let r = RefusalRepr {
            epoch: 9,
            dest_epoch: 0x77,
            reason: RefusalReason::JobFull,
            in_use: 12,
            limit: 12,
        };
        let mut buf = [0u8; HEADER_LEN];
        r.emit(&mut Frame::new_unchecked(&mut buf[..]));
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(RefusalRepr::parse(&f), Ok(r));
        assert_eq!(
            FrameRepr::parse(&f),
            Err(FrameError::BadFlags(FLAG_REFUSED))
        );
        assert_eq!(
            RefusalRepr::parse(&Frame::new_checked(&ACK_FRAME[..]).unwrap()),
            Err(FrameError::BadFlags(FLAG_ACK))
        );
        assert_eq!(RefusalReason::from(200), RefusalReason::Unknown(200));
        // A code of a later release says so, and what to do.
        let text = std::format!("{}", RefusalReason::from(200));
        assert!(
            text.contains("refusal code 200") && text.contains("same release"),
            "{text}"
        );
        for c in 1..=8 {
            assert_eq!(RefusalReason::from(c).code(), c);
            assert!(!matches!(RefusalReason::from(c), RefusalReason::Unknown(_)));
        }
    }

    /// A data+ack frame: epoch 0x0102030405060708, dest 0x11, seq 0xfffffffe, base 0xfffffffd,
    /// ack 7, sack 0b1010, packets "ab" and "".
    const DATA_FRAME: [u8; 46] = [
        0x52, 0x67, 0x01, 0x03, //
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, //
        0x11, 0, 0, 0, 0, 0, 0, 0, //
        0xfe, 0xff, 0xff, 0xff, //
        0xfd, 0xff, 0xff, 0xff, //
        0x07, 0, 0, 0, //
        0x0a, 0, 0, 0, 0, 0, 0, 0, //
        0x02, 0x00, b'a', b'b', //
        0x00, 0x00,
    ];

    const ACK_FRAME: [u8; 40] = [
        0x52, 0x67, 0x01, 0x02, //
        0x2a, 0, 0, 0, 0, 0, 0, 0, //
        0, 0, 0, 0, 0, 0, 0, 0, //
        0, 0, 0, 0, //
        0x05, 0, 0, 0, //
        0x04, 0, 0, 0, //
        0, 0, 0, 0, 0, 0, 0, 0x80,
    ];

    fn data_repr() -> FrameRepr {
        FrameRepr {
            epoch: 0x0102_0304_0506_0708,
            dest_epoch: 0x11,
            seq: Some(Seq(0xffff_fffe)),
            base: Seq(0xffff_fffd),
            ack: Some(AckRepr {
                cum: Seq(7),
                sack: 0b1010,
            }),
            cookie: None,
        }
    }

    #[test]
    fn parses_a_data_frame() {
        let frame = Frame::new_checked(&DATA_FRAME[..]).unwrap();
        assert_eq!(FrameRepr::parse(&frame), Ok(data_repr()));
        let packets: Vec<&[u8]> = frame.packets().collect();
        assert_eq!(packets, vec![&b"ab"[..], &b""[..]]);
    }

    #[test]
    fn emits_a_data_frame() {
        let mut buf = [0u8; 46];
        let mut frame = Frame::new_unchecked(&mut buf[..]);
        data_repr().emit(&mut frame);
        let payload = frame.payload_mut();
        emit_packet_prefix(payload, 2)
            .unwrap()
            .copy_from_slice(b"ab");
        emit_packet_prefix(&mut payload[4..], 0).unwrap();
        assert_eq!(buf, DATA_FRAME);
    }

    #[test]
    fn ack_frame_round_trip() {
        let repr = FrameRepr {
            epoch: 42,
            dest_epoch: 0,
            seq: None,
            base: Seq(5),
            ack: Some(AckRepr {
                cum: Seq(4),
                sack: 1 << 63,
            }),
            cookie: None,
        };
        let frame = Frame::new_checked(&ACK_FRAME[..]).unwrap();
        assert_eq!(FrameRepr::parse(&frame), Ok(repr));
        let mut buf = [0xffu8; 40];
        repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, ACK_FRAME);
    }

    #[test]
    fn rejects_malformed_frames() {
        let parse = |b: &[u8]| Frame::new_checked(b).and_then(|f| FrameRepr::parse(&f));
        assert_eq!(parse(&DATA_FRAME[..39]), Err(FrameError::Truncated));
        let mut b = DATA_FRAME;
        b[0] = 0;
        assert_eq!(parse(&b), Err(FrameError::BadMagic(0x6700)));
        let mut b = DATA_FRAME;
        b[2] = 2;
        assert_eq!(parse(&b), Err(FrameError::BadVersion(2)));
        let mut b = DATA_FRAME;
        b[3] = 0x07;
        assert_eq!(parse(&b), Err(FrameError::BadFlags(0x07)));
        let mut b = DATA_FRAME;
        b[4..12].fill(0);
        assert_eq!(parse(&b), Err(FrameError::ZeroEpoch));
        // The last prefix announces one byte that is not there.
        let mut b = DATA_FRAME;
        b[44] = 1;
        assert_eq!(parse(&b), Err(FrameError::BadPacketList));
        // A lone prefix byte.
        assert_eq!(parse(&DATA_FRAME[..45]), Err(FrameError::BadPacketList));
        // Data flag with no packets.
        assert_eq!(parse(&DATA_FRAME[..40]), Err(FrameError::EmptyData));
        // Ack frame with a payload.
        let mut b = DATA_FRAME;
        b[3] = FLAG_ACK;
        assert_eq!(parse(&b), Err(FrameError::TrailingBytes));
    }

    #[test]
    fn packet_prefix_bounds() {
        let mut buf = [0u8; 5];
        assert!(emit_packet_prefix(&mut buf, 4).is_none());
        assert_eq!(emit_packet_prefix(&mut buf, 3).map(|b| b.len()), Some(3));
        assert!(emit_packet_prefix(&mut [0u8; 70_000], 65_536).is_none());
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes() {
        // Deterministic pseudo-random inputs, valid header with a random tail, and random
        // everything; parse must return, and a successful parse must describe a sane frame.
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20_000 {
            let len = (next() % 120) as usize;
            let mut buf = [0u8; 120];
            for b in buf.iter_mut() {
                *b = next() as u8;
            }
            if round % 2 == 0 && len >= HEADER_LEN {
                buf[..HEADER_LEN].copy_from_slice(&DATA_FRAME[..HEADER_LEN]);
            }
            if round % 7 == 0 && len >= HEADER_LEN {
                buf[3] = FLAG_REFUSED;
            }
            let bytes = &buf[..len];
            if let Ok(r) = Frame::new_checked(bytes).and_then(|f| RefusalRepr::parse(&f)) {
                // A refusal re-emits to a header that parses to the same thing (the reason
                // code keeps its low byte).
                let mut out = [0u8; HEADER_LEN];
                r.emit(&mut Frame::new_unchecked(&mut out[..]));
                assert_eq!(RefusalRepr::parse(&Frame::new_unchecked(&out[..])), Ok(r));
            }
            if let Ok(frame) = Frame::new_checked(bytes) {
                if let Ok(repr) = FrameRepr::parse(&frame) {
                    let total: usize = frame.packets().map(|p| p.len() + 2).sum();
                    assert_eq!(total, frame.payload().len());
                    assert_eq!(repr.seq.is_some(), total > 0);
                }
            }
        }
    }
}
