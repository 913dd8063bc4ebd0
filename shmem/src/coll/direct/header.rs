//! The header of a direct datagram (see the [parent module](super)): its bytes, kinds and
//! flags, with [`Header::parse`] and [`Header::emit`] after the wire views of
//! `gsas_core::wire`.

use crate::addr::SymAddr;

/// Magic of a direct datagram ("GSCD").
pub(super) const MAGIC: u32 = 0x4443_5347;
/// Header bytes ([`Header`]).
pub(super) const HEADER: usize = 64;

/// Field offsets of the header (all integers little-endian).
mod field {
    use std::ops::Range;
    /// `"GSCD"` ([`super::MAGIC`]).
    pub const MAGIC: Range<usize> = 0..4;
    pub const KIND: usize = 4;
    /// Segment of the flag (or `NOTE`).
    pub const FLAG_SEG: usize = 5;
    /// Segment of the data.
    pub const DATA_SEG: usize = 6;
    /// Bits: [`super::ACK_NOW`].
    pub const FLAGS: usize = 7;
    /// The sender (world PE).
    pub const FROM: Range<usize> = 8..12;
    // 12..16: 0.
    /// The receiver's token.
    pub const TOKEN: Range<usize> = 16..24;
    pub const SEQ: Range<usize> = 24..32;
    /// The cumulative acknowledgement of the other direction.
    pub const ACK: Range<usize> = 32..40;
    /// Offset of the flag (or the note's key).
    pub const FLAG_OFF: Range<usize> = 40..48;
    pub const DATA_OFF: Range<usize> = 48..56;
    /// The sender's token (for the receiver's acknowledgements to a sender it has not
    /// looked up).
    pub const REPLY_TOKEN: Range<usize> = 56..64;
}

/// The header of a direct datagram, after the wire views of `gsas_core::wire`: [`Header::parse`]
/// never panics (it refuses a short datagram or another magic), [`Header::emit`] writes all
/// [`HEADER`] bytes (zeros where reserved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) kind: u8,
    pub(super) flags: u8,
    pub(super) from: u32,
    pub(super) token: u64,
    pub(super) seq: u64,
    pub(super) ack: u64,
    pub(super) flag: SymAddr,
    pub(super) at: SymAddr,
    pub(super) reply_token: u64,
}

impl Header {
    pub(super) fn parse(b: &[u8]) -> Option<Header> {
        let h = b.get(..HEADER)?;
        let u64_at = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&h[r]);
            u64::from_le_bytes(w)
        };
        let mut w = [0u8; 4];
        w.copy_from_slice(&h[field::MAGIC]);
        if u32::from_le_bytes(w) != MAGIC {
            return None;
        }
        w.copy_from_slice(&h[field::FROM]);
        Some(Header {
            kind: h[field::KIND],
            flags: h[field::FLAGS],
            from: u32::from_le_bytes(w),
            token: u64_at(field::TOKEN),
            seq: u64_at(field::SEQ),
            ack: u64_at(field::ACK),
            flag: SymAddr {
                seg: h[field::FLAG_SEG],
                off: u64_at(field::FLAG_OFF),
            },
            at: SymAddr {
                seg: h[field::DATA_SEG],
                off: u64_at(field::DATA_OFF),
            },
            reply_token: u64_at(field::REPLY_TOKEN),
        })
    }

    pub(super) fn emit(&self, d: &mut [u8]) {
        let h = &mut d[..HEADER];
        h.fill(0);
        h[field::MAGIC].copy_from_slice(&MAGIC.to_le_bytes());
        h[field::KIND] = self.kind;
        h[field::FLAG_SEG] = self.flag.seg;
        h[field::DATA_SEG] = self.at.seg;
        h[field::FLAGS] = self.flags;
        h[field::FROM].copy_from_slice(&self.from.to_le_bytes());
        h[field::TOKEN].copy_from_slice(&self.token.to_le_bytes());
        h[field::SEQ].copy_from_slice(&self.seq.to_le_bytes());
        Header::set_ack(h, self.ack);
        h[field::FLAG_OFF].copy_from_slice(&self.flag.off.to_le_bytes());
        h[field::DATA_OFF].copy_from_slice(&self.at.off.to_le_bytes());
        h[field::REPLY_TOKEN].copy_from_slice(&self.reply_token.to_le_bytes());
    }

    /// Rewrites the acknowledgement of an emitted header (a resend carries the latest).
    pub(super) fn set_ack(d: &mut [u8], ack: u64) {
        d[field::ACK].copy_from_slice(&ack.to_le_bytes());
    }
}
/// The address of an absent flag or data.
pub(super) const NOWHERE: SymAddr = SymAddr { seg: 0, off: 0 };
/// Kinds.
pub(super) const KIND_ACK: u8 = 0;
pub(super) const KIND_ADD: u8 = 1;
pub(super) const KIND_PUT_ADD: u8 = 2;
pub(super) const KIND_PUT: u8 = 3;
pub(super) const KIND_MAIL: u8 = 4;
pub(super) const KIND_NOTE: u8 = 5;
/// Bytes to append to the receiver's unfinished mail or note of (sender, flag or key): a
/// part of a larger one, whose last part is a [`KIND_MAIL`] or [`KIND_NOTE`].
pub(super) const KIND_PART: u8 = 6;
/// Header flag: acknowledge at once (the sender's window is half full).
pub(super) const ACK_NOW: u8 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_has_its_documented_bytes_and_parse_refuses_what_is_not_one() {
        let h = Header {
            kind: KIND_PUT_ADD,
            flags: ACK_NOW,
            from: 0x0403_0201,
            token: 0x1111_1111_1111_1111,
            seq: 0x2222_2222_2222_2222,
            ack: 0x3333_3333_3333_3333,
            flag: SymAddr {
                seg: 7,
                off: 0x4444_4444_4444_4444,
            },
            at: SymAddr {
                seg: 9,
                off: 0x5555_5555_5555_5555,
            },
            reply_token: 0x6666_6666_6666_6666,
        };
        let mut d = [0xffu8; HEADER + 4];
        h.emit(&mut d);
        assert_eq!(
            d[..8],
            [b'G', b'S', b'C', b'D', KIND_PUT_ADD, 7, 9, ACK_NOW]
        );
        assert_eq!(
            d[8..16],
            [1, 2, 3, 4, 0, 0, 0, 0],
            "sender, then reserved zeros"
        );
        for (i, byte) in [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66]
            .into_iter()
            .enumerate()
        {
            let at = 16 + 8 * i;
            assert_eq!(d[at..at + 8], [byte; 8], "word at {at}");
        }
        assert_eq!(d[HEADER..], [0xff; 4], "nothing written past the header");
        assert_eq!(Header::parse(&d), Some(h));
        Header::set_ack(&mut d, 5);
        assert_eq!(Header::parse(&d).map(|p| p.ack), Some(5));
        for n in 0..HEADER {
            assert_eq!(Header::parse(&d[..n]), None, "{n} bytes");
        }
        d[3] = b'X';
        assert_eq!(Header::parse(&d), None, "another magic");
    }
}
