//! Wire formats of the gsas protocol: packet views, typed representations, parse and emit.
//!
//! **What it is.** The byte layouts that travel between a client and an atomic service,
//! in smoltcp's `wire` style: [`Packet`] and [`ReplyPacket`] are zero-copy views over any
//! `AsRef<[u8]>` buffer with field accessors (and setters for `AsMut<[u8]>`), offsets kept in
//! a private `mod field`; [`RequestRepr`], [`ReplyRepr`] and [`Repr`] are the checked,
//! high-level forms with `parse`, `emit` and `buffer_len`.
//!
//! **What it is not.** No I/O, no state, no policy: which request goes where, retries and
//! bounds checks against segments belong to [`crate::client`] and [`crate::service`].
//!
//! **Thread safety.** Everything here is plain data (`Copy` values or borrowed views); use
//! it from any thread.
//!
//! **No-panic contract.** Parsing arbitrary bytes never panics: `Packet::new_checked`,
//! `ReplyPacket::new_checked`, [`RequestRepr::parse`], [`ReplyRepr::parse`], [`Repr::parse`],
//! [`peek_type`] and [`peek_token`] return a typed [`Error`] for every malformed input
//! (checked by property tests and a fuzz target). Accessors of a *checked* view never panic.
//! Emitting panics only when the output buffer is shorter than `buffer_len()`.
//! Enumerations read from the wire keep an `Unknown(u8)` variant ([`PacketType`],
//! [`ErrorCode`], [`ControlCode`], [`AtomicOp`], [`AtomicType`]), so decoding a byte never
//! loses information.
//!
//! # Packet types
//!
//! All integers are little-endian. Byte 0 of every packet is its type, so a receiver
//! demultiplexes on one byte: `0x01..=0x09` are requests, `0x80..=0x83` replies.
//!
//! | code | name | layout | answered by |
//! |---|---|---|---|
//! | `0x01` | READ | request (32 B); w2 = length 1..=56 | DATA |
//! | `0x02` | WRITE | request (32 B) [+ signal block (16 B)] + `len` payload bytes; w2 = `len` >= 1 | ACK |
//! | `0x03` | BULK_READ | bulk header (32 B), no payload | one BULK_DATA |
//! | `0x04` | BULK_WRITE | bulk header [+ signal block, final fragment only] + fragment payload | ACK |
//! | `0x05` | ATOMIC | request (32 B), + 8-byte comparand for COMPARE_SWAP (40 B) | DATA (old value, 4 or 8 B) if fetching, else ACK |
//! | `0x06` | ALLOC | request: w1 = address naming (PE, segment), w2 = size | the host |
//! | `0x07` | FREE | request: w1 = address naming (PE, segment), w2 = 0 | the host |
//! | `0x08` | FORK | bulk header + opaque payload (launch spec, defined by the host) | the host |
//! | `0x09` | CONTROL | request: byte 1 = [`ControlCode`], w1, w2 = host-defined arguments | the host |
//! | `0x80` | ACK | reply header (8 B), no payload | |
//! | `0x81` | DATA | reply header + 1..=56 payload bytes | |
//! | `0x82` | BULK_DATA | bulk header + fragment payload | |
//! | `0x83` | ERROR | reply header, byte 1 = [`ErrorCode`] | |
//! | other | `Unknown(u8)` | parse error [`Error::UnknownType`] | ERROR(UnknownType) |
//!
//! ## Request (32 bytes = four u64 words)
//!
//! | bytes | word | field |
//! |---|---|---|
//! | 0 | w0 bits 0..8 | type |
//! | 1 | w0 bits 8..16 | `sub`: 0, except ATOMIC (atomic descriptor), CONTROL (control code) and WRITE with an [attached signal](#attached-signal-write-bulk_write) |
//! | 2..8 | w0 bits 16..64 | sender id (48 bits, [`SenderId`]) |
//! | 8..16 | w1 | global address ([`GlobalAddr`]); CONTROL: first argument |
//! | 16..24 | w2 | length (READ, WRITE), operand (ATOMIC), size (ALLOC), 0 (FREE), second argument (CONTROL) |
//! | 24..28 | w3 low | request token, echoed in the reply |
//! | 28..32 | w3 high | reserved, must be 0 |
//! | 32..40 | w4 | comparand (ATOMIC COMPARE_SWAP only) |
//! | 32.. | | WRITE payload (`len` bytes); with an attached signal: the signal block (32..48), then the payload (48..) |
//!
//! ## Bulk header (32 bytes): BULK_READ, BULK_WRITE, BULK_DATA, FORK
//!
//! | bytes | field |
//! |---|---|
//! | 0 | type |
//! | 1 | flags/status: 0 (requests, except a BULK_WRITE with an [attached signal](#attached-signal-write-bulk_write); BULK_DATA 0 = ok; non-zero values are reserved and rejected) |
//! | 2..8 | sender id (BULK_DATA: the service's id) |
//! | 8..16 | base global address of the whole transfer |
//! | 16..20 | total length of the whole transfer (u32) |
//! | 20..24 | offset of this fragment in the transfer (u32) |
//! | 24..28 | token |
//! | 28..32 | fragment length (u32, >= 1) |
//! | 32.. | fragment payload (BULK_WRITE, BULK_DATA, FORK); none for BULK_READ |
//!
//! Parse checks `offset + fragment length <= total length` and, for packets with a payload,
//! payload present == fragment length (exactly: no padding). BULK_READ asks for `fragment
//! length` bytes at `offset`. Fragments of one transfer may arrive in any order; each is
//! self-describing.
//!
//! ## Attached signal (WRITE, BULK_WRITE)
//!
//! A WRITE, or the *final* fragment of a BULK_WRITE transfer (`offset + fragment length ==
//! total length`), may carry a signal update ([`Signal`]): OpenSHMEM's put-with-signal in
//! one request. Byte 1 (`sub`) is then the ATOMIC descriptor of the update, `0x31` (u64
//! SET) or `0x35` (u64 ADD); 0 means no signal, any other value parses to
//! [`Error::BadAtomic`]. The 16-byte signal block follows the header, before the payload:
//!
//! | bytes | word | field |
//! |---|---|---|
//! | 32..40 | w4 | global address of the signal word (a `u64`, 8-byte aligned) |
//! | 40..48 | w5 | the value stored (SET) or added (ADD) |
//! | 48.. | | the payload (WRITE: `len` bytes; BULK_WRITE: exactly the fragment length) |
//!
//! A BULK_WRITE fragment with a signal that is not the final one parses to
//! [`Error::BadFragment`]. The service checks the signal word like an atomic's target (job,
//! segment, bounds, alignment) *before* writing anything and refuses the whole request if
//! it fails; otherwise it writes the data, then applies the update with release ordering
//! (and wakes the PE as for any update of its memory), then acknowledges. The sender of a
//! bulk transfer sends the final fragment only once every other fragment of the transfer
//! is acknowledged, so the update follows the whole transfer although fragments may be
//! delivered in any order.
//!
//! ## Reply header (8 bytes): ACK, DATA, ERROR
//!
//! | byte | field |
//! |---|---|
//! | 0 | type |
//! | 1 | status: 0 for ACK/DATA, the [`ErrorCode`] for ERROR |
//! | 2 | payload length: 0 (ACK, ERROR), 1..=56 (DATA) |
//! | 3 | flags (reserved, must be 0) |
//! | 4..8 | token (u32) of the request answered |
//! | 8.. | payload |
//!
//! A reply is `8 + payload length` bytes; bytes after it are padding (transports with fixed
//! 64-byte slots pad) and are ignored. Fixed-size requests may be padded likewise.
//!
//! ## Fragment boundaries ([`GRANULE`])
//!
//! Every boundary between two fragments of a bulk transfer (BULK_WRITE, BULK_READ and its
//! BULK_DATA replies, with or without a signal) lies at a target address that is a
//! multiple of [`GRANULE`] (64) bytes, so that no naturally aligned element of any
//! OpenSHMEM type (at most 16 bytes) is split between two packets: a target that watches an
//! aligned `u64` while a transfer lands sees it entirely old or entirely new, never half of
//! each. The client engine chooses fragments that way ([`crate::client`], "Packets
//! chosen"); a receiver accepts any fragmentation (the rule is the sender's), and the
//! other paths that cut data into pieces (the Exanet NI's RDMA frames, the verbs path's
//! requests, the collectives' chunks) use multiples of the same constant.
//!
//! ## Global address (u64)
//!
//! Bits 48..64 = target PE (u16), bits 40..48 = segment id (u8; the runtime uses 0 =
//! symmetric heap, 1 = data segment; the core does not interpret it), bits 0..40 = byte
//! offset in the segment.
//!
//! ## Atomic descriptor (`sub` byte of ATOMIC)
//!
//! Low nibble = operation: 0 FETCH, 1 SET, 2 SWAP, 3 COMPARE_SWAP, 4 FETCH_ADD, 5 ADD,
//! 6 FETCH_INC, 7 INC, 8 FETCH_AND, 9 AND, 10 FETCH_OR, 11 OR, 12 FETCH_XOR, 13 XOR.
//! High nibble = datatype: 0 I32, 1 U32, 2 I64, 3 U64, 4 F32, 5 F64 (the width, 4 or 8
//! bytes, follows from it). Integer types allow every operation; float types FETCH, SET and
//! SWAP only (bitwise moves, no float arithmetic). w2 = operand (for 32-bit types in the low
//! 32 bits, the high 32 bits must be 0; the same holds for the comparand). Fetching
//! operations (FETCH, SWAP, COMPARE_SWAP, FETCH_ADD, FETCH_INC, FETCH_AND/OR/XOR) are
//! answered by DATA with the old value (4 or 8 bytes, little-endian), the others by ACK.
//! An invalid descriptor parses to [`Error::BadAtomic`].
//!
//! ## Codes
//!
//! [`ErrorCode`]: 1 BadKey, 2 NoSegment, 3 OutOfBounds, 4 Misaligned, 5 BadAtomic,
//! 6 UnknownType, 7 Malformed, 8 TooLarge, 9 NotSupported, 10 Busy, 11 HostFailure.
//! [`ControlCode`]: 1 Ping, 2 Join, 3 Leave, 4 JobEnd, 5 Register, 6 Barrier.
//!
//! # Example
//!
//! ```
//! use gsas_core::wire::{GlobalAddr, Packet, Request, RequestRepr, SenderId};
//!
//! let repr = RequestRepr {
//!     sender: SenderId::new(7).unwrap(),
//!     token: 42,
//!     body: Request::Read { addr: GlobalAddr::new(1, 0, 0x100).unwrap(), len: 8 },
//! };
//! let mut buf = [0u8; 32];
//! repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
//! assert_eq!(buf[0], 0x01);
//! let parsed = RequestRepr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap();
//! assert_eq!(parsed, repr);
//! ```

mod addr;
mod atomic;
mod codes;
mod packet;
mod reply;
mod repr;
mod signal;
#[cfg(test)]
mod tests;

pub use addr::{GlobalAddr, SenderId};
pub use atomic::{AtomicDesc, AtomicOp, AtomicType};
pub use codes::{ControlCode, ErrorCode, PacketType};
pub use packet::{CSWAP_LEN, HEADER_LEN, Packet};
pub use reply::{MAX_INLINE_DATA, REPLY_HEADER_LEN, ReplyPacket};
pub use repr::{Fragment, Reply, ReplyRepr, Repr, Request, RequestRepr, emit_reply_header};
pub use signal::{SIGNAL_LEN, Signal, SignalOp};

/// The granule of every fragment and chunk boundary, in bytes: pieces of a transfer start
/// at target addresses that are multiples of it (see "Fragment boundaries" above).
///
/// 64 because it is a multiple of the largest element of every OpenSHMEM type (16 bytes:
/// `long double`, the complex types; the ones written by one store are 1, 2, 4 and 8
/// bytes), is one cache line on x86_64 and on the aarch64 cores gsas targets (so the two
/// receivers of adjacent fragments never write one line), and is a multiple of the
/// 16-byte vector step of the watched copy. It costs at most 63 bytes of each fragment (a
/// 61,382-byte UDP payload carries 61,312 bytes of data instead of 61,350; 1,472 bytes
/// carry 1,344 instead of 1,382).
pub const GRANULE: usize = 64;

/// Why bytes did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Error {
    /// The buffer is shorter than the layout requires.
    Truncated,
    /// Byte 0 is not a known packet type.
    UnknownType(u8),
    /// A known packet type in the wrong place (a reply given to the request parser or the
    /// other way round).
    UnexpectedType(PacketType),
    /// A reserved field is not zero.
    Reserved,
    /// A length field is outside its range (zero-length READ/WRITE/DATA, payload on ACK or
    /// ERROR).
    BadLength,
    /// A length exceeds what the packet type allows (READ or DATA over 56 bytes).
    TooLarge,
    /// A bulk fragment is inconsistent: zero length, `offset + length > total`, payload
    /// length different from the fragment length, or a signal attached to a fragment that
    /// is not the final one of its transfer.
    BadFragment,
    /// Invalid atomic descriptor, a 32-bit operand/comparand with non-zero high bits, or an
    /// attached signal whose operation is not a u64 SET or ADD.
    BadAtomic,
}

impl Error {
    /// The [`ErrorCode`] a service answers this parse error with.
    #[inline]
    pub fn code(self) -> ErrorCode {
        match self {
            Error::UnknownType(_) => ErrorCode::UnknownType,
            Error::BadAtomic => ErrorCode::BadAtomic,
            Error::TooLarge => ErrorCode::TooLarge,
            Error::UnexpectedType(_)
            | Error::Truncated
            | Error::Reserved
            | Error::BadLength
            | Error::BadFragment => ErrorCode::Malformed,
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("packet truncated"),
            Error::UnknownType(t) => write!(f, "unknown packet type {t:#04x}"),
            Error::UnexpectedType(t) => write!(f, "unexpected packet type {t:?}"),
            Error::Reserved => f.write_str("reserved field not zero"),
            Error::BadLength => f.write_str("length field out of range"),
            Error::TooLarge => f.write_str("length exceeds 56 bytes"),
            Error::BadFragment => f.write_str("inconsistent bulk fragment"),
            Error::BadAtomic => f.write_str("invalid atomic descriptor or operand"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// The packet type of `bytes` (byte 0); `None` for an empty buffer. Never panics.
#[inline]
pub fn peek_type(bytes: &[u8]) -> Option<PacketType> {
    bytes.first().map(|&b| PacketType::from(b))
}

/// Best-effort token of any packet, for answering a packet that did not parse: the reply
/// header token for reply types, word 3's low half for everything else at least 32 bytes
/// long, 0 otherwise. Never panics.
#[inline]
pub fn peek_token(bytes: &[u8]) -> u32 {
    let range = match peek_type(bytes) {
        Some(PacketType::Ack | PacketType::Data | PacketType::Error) => 4..8,
        _ => 24..28,
    };
    match bytes.get(range) {
        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    }
}

/// Sender id of a packet in the 32-byte header format (every request and BULK_DATA);
/// `None` for shorter buffers and reply-header packets. Lets a host resolve the sender's
/// job key before handing the request to the service. Never panics.
#[inline]
pub fn peek_sender(bytes: &[u8]) -> Option<SenderId> {
    match peek_type(bytes)? {
        PacketType::Ack | PacketType::Data | PacketType::Error => None,
        _ if bytes.len() < HEADER_LEN => None,
        _ => Some(Packet::new_unchecked(bytes).sender()),
    }
}
