//! The header of a direct packet (see the [parent module](super)): its bytes, kinds and
//! flags, with [`Header::parse`] and [`Header::emit`] after the wire views of
//! `gsas_core::wire`. A packet is one packet of the reliability layer's frames: the layer
//! (`gsas_core::reliable`) numbers, acknowledges and resends the frames; this header says
//! what the packet does and where it stands in the stream of messages from its sender.

use crate::addr::SymAddr;

/// Header bytes ([`Header`]).
pub(super) const HEADER: usize = 32;

/// Field offsets of the header (all integers little-endian).
mod field {
    use std::ops::Range;
    pub const KIND: usize = 0;
    /// Bits: [`super::LOSE_ONCE`], [`super::URGENT`].
    pub const FLAGS: usize = 1;
    /// Segment of the flag (or `NOTE`).
    pub const FLAG_SEG: usize = 2;
    /// Segment of the data.
    pub const DATA_SEG: usize = 3;
    /// The sender (world PE).
    pub const FROM: Range<usize> = 4..8;
    /// The packet's number in the stream from the sender to this receiver, from 1.
    pub const SEQ: Range<usize> = 8..16;
    /// Offset of the flag (or the note's key).
    pub const FLAG_OFF: Range<usize> = 16..24;
    pub const DATA_OFF: Range<usize> = 24..32;
}

/// The header of a direct packet: [`Header::parse`] never panics (it refuses a short packet
/// or an unknown kind), [`Header::emit`] writes all [`HEADER`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) kind: u8,
    pub(super) flags: u8,
    pub(super) from: u32,
    pub(super) seq: u64,
    pub(super) flag: SymAddr,
    pub(super) at: SymAddr,
}

impl Header {
    pub(super) fn parse(b: &[u8]) -> Option<Header> {
        let h = b.get(..HEADER)?;
        let u64_at = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&h[r]);
            u64::from_le_bytes(w)
        };
        if !(KIND_ADD..=KIND_PUT_SIGNAL_ADD).contains(&h[field::KIND]) {
            return None;
        }
        let mut w = [0u8; 4];
        w.copy_from_slice(&h[field::FROM]);
        Some(Header {
            kind: h[field::KIND],
            flags: h[field::FLAGS],
            from: u32::from_le_bytes(w),
            seq: u64_at(field::SEQ),
            flag: SymAddr {
                seg: h[field::FLAG_SEG],
                off: u64_at(field::FLAG_OFF),
            },
            at: SymAddr {
                seg: h[field::DATA_SEG],
                off: u64_at(field::DATA_OFF),
            },
        })
    }

    pub(super) fn emit(&self, d: &mut [u8]) {
        let h = &mut d[..HEADER];
        h[field::KIND] = self.kind;
        h[field::FLAGS] = self.flags;
        h[field::FLAG_SEG] = self.flag.seg;
        h[field::DATA_SEG] = self.at.seg;
        h[field::FROM].copy_from_slice(&self.from.to_le_bytes());
        h[field::SEQ].copy_from_slice(&self.seq.to_le_bytes());
        h[field::FLAG_OFF].copy_from_slice(&self.flag.off.to_le_bytes());
        h[field::DATA_OFF].copy_from_slice(&self.at.off.to_le_bytes());
    }

    /// Whether the packet `b` is marked [`LOSE_ONCE`] (a short packet is not).
    pub(super) fn lose_once(b: &[u8]) -> bool {
        b.len() >= HEADER && b[field::FLAGS] & LOSE_ONCE != 0
    }
}
/// The address of an absent flag or data.
pub(super) const NOWHERE: SymAddr = SymAddr { seg: 0, off: 0 };
/// Kinds.
pub(super) const KIND_ADD: u8 = 1;
pub(super) const KIND_PUT_ADD: u8 = 2;
pub(super) const KIND_PUT: u8 = 3;
pub(super) const KIND_MAIL: u8 = 4;
pub(super) const KIND_NOTE: u8 = 5;
/// Bytes to append to the receiver's unfinished mail or note of (sender, flag or key): a
/// part of a larger one, whose last part is a [`KIND_MAIL`] or [`KIND_NOTE`].
pub(super) const KIND_PART: u8 = 6;
/// Bytes for the receiver's memory at the data address, then the signal word at the flag
/// address set to the packet's last 8 bytes (little-endian, not part of the data): a
/// point-to-point `shmem_put_signal` with `SHMEM_SIGNAL_SET`.
pub(super) const KIND_PUT_SIGNAL_SET: u8 = 7;
/// As [`KIND_PUT_SIGNAL_SET`], the value added to the signal word (`SHMEM_SIGNAL_ADD`).
pub(super) const KIND_PUT_SIGNAL_ADD: u8 = 8;
/// Bytes of the signal value at the end of a put-with-signal packet.
pub(super) const SIGNAL_BYTES: usize = 8;
/// Header flag (tests): the frame that carries this packet is lost on its first
/// transmission (see `shmem::testing::coll_drop`); receivers ignore it.
pub(super) const LOSE_ONCE: u8 = 1;
/// Header flag: a point-to-point put, whose sender may be waiting in `shmem_quiet`: the
/// receiver rings its own doorbell once it is applied, and acknowledges it soon (see the
/// parent module's `round`).
pub(super) const URGENT: u8 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_has_its_documented_bytes_and_parse_refuses_what_is_not_one() {
        let h = Header {
            kind: KIND_PUT_ADD,
            flags: LOSE_ONCE,
            from: 0x0403_0201,
            seq: 0x2222_2222_2222_2222,
            flag: SymAddr {
                seg: 7,
                off: 0x4444_4444_4444_4444,
            },
            at: SymAddr {
                seg: 9,
                off: 0x5555_5555_5555_5555,
            },
        };
        let mut d = [0xffu8; HEADER + 4];
        h.emit(&mut d);
        assert_eq!(d[..8], [KIND_PUT_ADD, LOSE_ONCE, 7, 9, 1, 2, 3, 4]);
        for (i, byte) in [0x22u8, 0x44, 0x55].into_iter().enumerate() {
            let at = 8 + 8 * i;
            assert_eq!(d[at..at + 8], [byte; 8], "word at {at}");
        }
        assert_eq!(d[HEADER..], [0xff; 4], "nothing written past the header");
        assert_eq!(Header::parse(&d), Some(h));
        assert!(Header::lose_once(&d));
        for n in 0..HEADER {
            assert_eq!(Header::parse(&d[..n]), None, "{n} bytes");
            assert!(!Header::lose_once(&d[..n]));
        }
        for kind in [0, KIND_PUT_SIGNAL_ADD + 1, 0xff] {
            d[0] = kind;
            assert_eq!(Header::parse(&d), None, "kind {kind}");
        }
        for kind in KIND_ADD..=KIND_PUT_SIGNAL_ADD {
            d[0] = kind;
            assert_eq!(Header::parse(&d).map(|h| h.kind), Some(kind), "kind {kind}");
        }
    }
}
