//! The transport-private mailbox messages of [`ExanetTransport`](super::ExanetTransport):
//! `BULK_DESC` and `BULK_RELEASE`, as wire views.
//!
//! `BULK_DESC` (16 bytes, sender to receiver: "pull my staged packet"):
//!
//! | bytes | field | value |
//! |---|---|---|
//! | 0 | type | `0xFB` |
//! | 1 | slot | the sender's send-staging slot |
//! | 2..4 | generation | u16, little-endian: the slot's generation (its stamps) |
//! | 4..8 | len | u32, little-endian: bytes of the packet |
//! | 8..16 | nva | u64, little-endian: NVA of the slot's leading stamp |
//!
//! `BULK_RELEASE` (8 bytes, receiver to sender: "your slot is free"; 5 are read):
//!
//! | bytes | field | value |
//! |---|---|---|
//! | 0 | type | `0xFC` |
//! | 1 | slot | the sender's slot being released |
//! | 2..4 | generation | u16, little-endian |
//! | 4 | status | 0 (pulled), an RDMA status, or `0xFE` (stale: the stamps did not match) |
//! | 5..8 | reserved | 0, ignored on receipt |
//!
//! After smoltcp's `wire` modules (as gsas-core's `wire`): a view over any byte buffer with
//! field offsets in a private `mod field`, `new_checked` for untrusted input, and a `Repr`
//! with `parse` and `emit`. Parsing never panics; `emit` panics only when the buffer is
//! shorter than the message. Thread-safety: plain data.

/// Byte 0 of a `BULK_DESC`.
pub const BULK_DESC: u8 = 0xFB;
/// Byte 0 of a `BULK_RELEASE`.
pub const BULK_RELEASE: u8 = 0xFC;
/// Length of a `BULK_DESC`.
pub const DESC_LEN: usize = 16;
/// Length of a `BULK_RELEASE` as sent.
pub const RELEASE_LEN: usize = 8;
/// Bytes of a `BULK_RELEASE` a receiver reads (type to status).
pub const RELEASE_MIN_LEN: usize = 5;

mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const SLOT: usize = 1;
    pub const GENERATION: Range<usize> = 2..4;
    pub const LEN: Range<usize> = 4..8;
    pub const NVA: Range<usize> = 8..16;
    pub const STATUS: usize = 4;
    pub const RESERVED: Range<usize> = 5..8;
}

/// The message is shorter than its fixed part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncated;

fn u16_at(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_le_bytes([b[r.start], b[r.start + 1]])
}

/// A view of a `BULK_DESC` at the start of a buffer.
#[derive(Clone, Copy, Debug)]
pub struct BulkDesc<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BulkDesc<T> {
    /// Wraps a buffer without checks (accessors panic if it is shorter than [`DESC_LEN`]).
    pub const fn new_unchecked(buffer: T) -> Self {
        BulkDesc { buffer }
    }

    /// Wraps a buffer after checking its length (the type byte is the caller's dispatch).
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        if buffer.as_ref().len() < DESC_LEN {
            return Err(Truncated);
        }
        Ok(BulkDesc { buffer })
    }

    /// The sender's slot.
    pub fn slot(&self) -> u8 {
        self.buffer.as_ref()[field::SLOT]
    }

    /// The slot's generation.
    pub fn generation(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::GENERATION)
    }

    /// Bytes of the staged packet.
    pub fn packet_len(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::LEN];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// NVA of the staged slot.
    pub fn nva(&self) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&self.buffer.as_ref()[field::NVA]);
        u64::from_le_bytes(v)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BulkDesc<T> {
    /// Writes every field (type byte included).
    pub fn set(&mut self, slot: u8, generation: u16, len: u32, nva: u64) {
        let b = self.buffer.as_mut();
        b[field::TYPE] = BULK_DESC;
        b[field::SLOT] = slot;
        b[field::GENERATION].copy_from_slice(&generation.to_le_bytes());
        b[field::LEN].copy_from_slice(&len.to_le_bytes());
        b[field::NVA].copy_from_slice(&nva.to_le_bytes());
    }
}

/// The fields of a `BULK_DESC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkDescRepr {
    /// The sender's send-staging slot.
    pub slot: u8,
    /// The slot's generation.
    pub generation: u16,
    /// Bytes of the staged packet.
    pub len: u32,
    /// NVA of the slot (its leading stamp).
    pub nva: u64,
}

impl BulkDescRepr {
    /// Reads a `BULK_DESC` (its type byte is not checked: the receiver dispatched on it).
    pub fn parse(bytes: &[u8]) -> Result<Self, Truncated> {
        let d = BulkDesc::new_checked(bytes)?;
        Ok(BulkDescRepr {
            slot: d.slot(),
            generation: d.generation(),
            len: d.packet_len(),
            nva: d.nva(),
        })
    }

    /// The message.
    pub fn to_bytes(self) -> [u8; DESC_LEN] {
        let mut out = [0u8; DESC_LEN];
        BulkDesc::new_unchecked(&mut out[..]).set(self.slot, self.generation, self.len, self.nva);
        out
    }
}

/// A view of a `BULK_RELEASE` at the start of a buffer.
#[derive(Clone, Copy, Debug)]
pub struct BulkRelease<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BulkRelease<T> {
    /// Wraps a buffer after checking its length.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        if buffer.as_ref().len() < RELEASE_MIN_LEN {
            return Err(Truncated);
        }
        Ok(BulkRelease { buffer })
    }

    /// The released slot.
    pub fn slot(&self) -> u8 {
        self.buffer.as_ref()[field::SLOT]
    }

    /// Its generation.
    pub fn generation(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::GENERATION)
    }

    /// 0 when pulled, else why the pull failed.
    pub fn status(&self) -> u8 {
        self.buffer.as_ref()[field::STATUS]
    }
}

/// The fields of a `BULK_RELEASE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkReleaseRepr {
    /// The released slot.
    pub slot: u8,
    /// Its generation.
    pub generation: u16,
    /// 0 when pulled, else why the pull failed.
    pub status: u8,
}

impl BulkReleaseRepr {
    /// Reads a `BULK_RELEASE` (the type byte is the caller's dispatch).
    pub fn parse(bytes: &[u8]) -> Result<Self, Truncated> {
        let r = BulkRelease::new_checked(bytes)?;
        Ok(BulkReleaseRepr {
            slot: r.slot(),
            generation: r.generation(),
            status: r.status(),
        })
    }

    /// The message (reserved bytes 0).
    pub fn to_bytes(self) -> [u8; RELEASE_LEN] {
        let mut out = [0u8; RELEASE_LEN];
        out[field::TYPE] = BULK_RELEASE;
        out[field::SLOT] = self.slot;
        out[field::GENERATION].copy_from_slice(&self.generation.to_le_bytes());
        out[field::STATUS] = self.status;
        out[field::RESERVED].fill(0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desc_bytes_are_the_documented_layout_and_round_trip() {
        let r = BulkDescRepr {
            slot: 7,
            generation: 0x1234,
            len: 0x0001_0002,
            nva: 0x1122_3344_5566_7788,
        };
        let b = r.to_bytes();
        assert_eq!(
            b,
            [
                0xFB, 7, 0x34, 0x12, 0x02, 0, 0x01, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22,
                0x11
            ]
        );
        assert_eq!(BulkDescRepr::parse(&b), Ok(r));
        assert_eq!(BulkDescRepr::parse(&b[..15]), Err(Truncated));
    }

    #[test]
    fn release_bytes_are_the_documented_layout_and_round_trip() {
        let r = BulkReleaseRepr {
            slot: 3,
            generation: 0xBEEF,
            status: 0xFE,
        };
        let b = r.to_bytes();
        assert_eq!(b, [0xFC, 3, 0xEF, 0xBE, 0xFE, 0, 0, 0]);
        assert_eq!(BulkReleaseRepr::parse(&b), Ok(r));
        assert_eq!(
            BulkReleaseRepr::parse(&b[..5]),
            Ok(r),
            "five bytes are read"
        );
        assert_eq!(BulkReleaseRepr::parse(&b[..4]), Err(Truncated));
    }

    #[test]
    fn parsing_never_panics_on_short_or_odd_input() {
        for len in 0..=20 {
            let b: std::vec::Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(BulkDescRepr::parse(&b).is_ok(), len >= DESC_LEN);
            assert_eq!(BulkReleaseRepr::parse(&b).is_ok(), len >= RELEASE_MIN_LEN);
        }
    }
}
