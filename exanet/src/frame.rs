//! The emulator's wire format between nodes: ExaNet three-part framing (model section 12).
//!
//! What it is: a 16-byte header, up to 16 payload words of 16 bytes (256 B, FACT), and a
//! 16-byte footer, little-endian, in smoltcp's style: [`FramePacket`] is a checked view
//! over any `AsRef<[u8]>`, [`FrameRepr`] the parsed form with `parse`/`emit`. The payload
//! is padded with zeros to whole 16-byte words; `size` holds the exact byte count.
//!
//! Field placement (the widths are the published ones, the placement is ours, ASSUMPTION):
//!
//! | word | bits | field |
//! |---|---|---|
//! | header q0 | 1:0 | `vc` (0) |
//! | header q0 | 17:2 | `pdid` (sender endpoint's PDID, stamped by the NI) |
//! | header q0 | 39:18 | `dst_coord` |
//! | header q0 | 44:40 | `type`: 0 write, 1 read request, 2 control, 6 completion notify, 10 ack/response |
//! | header q0 | 58:45 | `size` (payload bytes, <= 256) |
//! | header q0 | 63:60 | `resp` (acks: [`resp`] code) |
//! | header q1 | 47:0 | `dst_va`: NVA for RDMA packets; for mailbox and ack packets the ep in bits 9:0 |
//! | header q1 | 57:48 | `dst_ep` |
//! | header q1 | 60:58 | `sub`: type 0: 0 RDMA data, 1 mailbox message; type 10: [`ack_sub`] |
//! | header q1 | 61 | `no_ack` (mailbox messages sent with `NO_ACK`) |
//! | footer q0 | 21:0 | `src_coord` |
//! | footer q0 | 31:22 | `user_bits` = source endpoint |
//! | footer q0 | 63:32 | `tid`: TX index (mailbox), `channel << 30 \| descriptor index` (RDMA) |
//! | footer q1 | 31:0 | `seq_num` (packet number within the descriptor) |
//! | footer q1 | 32, 33, 34 | `first_p`, `last_p`, `notif_enable` |
//!
//! A read request (type 1) carries one payload word: the requester's local NVA (u64) and
//! the byte count (u32). Its response is a type-10 packet with `sub = READ_RESP`, the data
//! as payload and `dst_va` = that local NVA.
//!
//! No-panic contract: [`FramePacket::new_checked`] and [`FrameRepr::parse`] return an
//! error for every malformed input; accessors of a checked view never panic.
//!
//! Thread safety: plain data.

/// Header length.
pub const HEADER_LEN: usize = 16;
/// Footer length.
pub const FOOTER_LEN: usize = 16;
/// Largest payload. The RDMA engine cuts a transfer into packets of this size at offsets
/// `k * MAX_PAYLOAD` from the descriptor's start, so that with an aligned start no packet
/// boundary splits an aligned element ([`gsas_core::wire::GRANULE`] divides it).
pub const MAX_PAYLOAD: usize = 256;
const _: () = assert!(MAX_PAYLOAD % gsas_core::wire::GRANULE == 0);
/// Largest frame.
pub const MAX_FRAME: usize = HEADER_LEN + MAX_PAYLOAD + FOOTER_LEN;

/// Packet types (header `type`).
pub mod ptype {
    /// Packetizer or RDMA write.
    pub const WRITE: u8 = 0;
    /// RDMA read request.
    pub const READ_REQ: u8 = 1;
    /// Control.
    pub const CONTROL: u8 = 2;
    /// Completion notification (`NOTIFY_REMOTE`).
    pub const NOTIFY: u8 = 6;
    /// Ack / response.
    pub const ACK: u8 = 10;
}

/// `sub` values of type-10 packets.
pub mod ack_sub {
    /// Ack of an RDMA write packet.
    pub const RDMA_WRITE: u8 = 0;
    /// Ack of a mailbox (packetizer) message.
    pub const MAILBOX: u8 = 1;
    /// Response to a read request (carries data on success).
    pub const READ_RESP: u8 = 2;
    /// Ack of a completion notification.
    pub const NOTIFY: u8 = 3;
}

/// `sub` values of type-0 packets.
pub mod write_sub {
    /// RDMA write data.
    pub const RDMA: u8 = 0;
    /// Mailbox (packetizer) message.
    pub const MAILBOX: u8 = 1;
}

/// Response codes (`resp[3:0]`).
pub mod resp {
    /// Accepted.
    pub const OK: u8 = 0;
    /// Mailbox ring full.
    pub const RING_FULL: u8 = 1;
    /// PDID mismatch.
    pub const PDID_MISMATCH: u8 = 2;
    /// No such endpoint.
    pub const NO_SUCH_EP: u8 = 3;
    /// Destination did not answer (generated locally on timeout).
    pub const UNREACHABLE: u8 = 4;
    /// Remote address translation fault.
    pub const XLAT_FAULT: u8 = 5;
    /// Remote endpoint disabled.
    pub const EP_DISABLED: u8 = 6;
    /// Malformed request.
    pub const BAD_REQUEST: u8 = 7;
}

/// Why bytes are not a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than header + footer, or than the payload `size` needs.
    Truncated,
    /// `size` above 256.
    TooLarge,
    /// Length not `32 + 16 * words`.
    BadLength,
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            FrameError::Truncated => "frame truncated",
            FrameError::TooLarge => "frame payload above 256 bytes",
            FrameError::BadLength => "frame length is not header + 16-byte words + footer",
        })
    }
}

impl std::error::Error for FrameError {}

mod field {
    pub const H0: core::ops::Range<usize> = 0..8;
    pub const H1: core::ops::Range<usize> = 8..16;
    pub const PAYLOAD: usize = 16;
}

/// A view of a frame.
#[derive(Debug, Clone)]
pub struct FramePacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn word(bytes: &[u8], range: core::ops::Range<usize>) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[range]);
    u64::from_le_bytes(w)
}

impl<T: AsRef<[u8]>> FramePacket<T> {
    /// Wraps a buffer without checks (accessors may panic on short buffers).
    pub const fn new_unchecked(buffer: T) -> Self {
        FramePacket { buffer }
    }

    /// Wraps a buffer after checking its length against `size`.
    pub fn new_checked(buffer: T) -> Result<Self, FrameError> {
        let p = FramePacket { buffer };
        let len = p.buffer.as_ref().len();
        if len < HEADER_LEN + FOOTER_LEN {
            return Err(FrameError::Truncated);
        }
        if (len - HEADER_LEN - FOOTER_LEN) % 16 != 0 {
            return Err(FrameError::BadLength);
        }
        let size = p.size();
        if size > MAX_PAYLOAD {
            return Err(FrameError::TooLarge);
        }
        if padded(size) != len - HEADER_LEN - FOOTER_LEN {
            return Err(FrameError::Truncated);
        }
        Ok(p)
    }

    fn h0(&self) -> u64 {
        word(self.buffer.as_ref(), field::H0)
    }
    fn h1(&self) -> u64 {
        word(self.buffer.as_ref(), field::H1)
    }
    fn footer(&self) -> (u64, u64) {
        let b = self.buffer.as_ref();
        let at = b.len() - FOOTER_LEN;
        (word(b, at..at + 8), word(b, at + 8..at + 16))
    }

    /// Virtual channel.
    pub fn vc(&self) -> u8 {
        (self.h0() & 0x3) as u8
    }
    /// Sender PDID.
    pub fn pdid(&self) -> u16 {
        (self.h0() >> 2) as u16
    }
    /// Destination coordinate.
    pub fn dst_coord(&self) -> u32 {
        ((self.h0() >> 18) & 0x3F_FFFF) as u32
    }
    /// Packet type.
    pub fn packet_type(&self) -> u8 {
        ((self.h0() >> 40) & 0x1F) as u8
    }
    /// Payload bytes.
    pub fn size(&self) -> usize {
        ((self.h0() >> 45) & 0x3FFF) as usize
    }
    /// Response code.
    pub fn resp(&self) -> u8 {
        (self.h0() >> 60) as u8
    }
    /// Destination virtual address.
    pub fn dst_va(&self) -> u64 {
        self.h1() & crate::regs::NVA_MASK
    }
    /// Destination endpoint.
    pub fn dst_ep(&self) -> u16 {
        ((self.h1() >> 48) & 0x3FF) as u16
    }
    /// Sub-kind.
    pub fn sub(&self) -> u8 {
        ((self.h1() >> 58) & 0x7) as u8
    }
    /// `NO_ACK` bit.
    pub fn no_ack(&self) -> bool {
        self.h1() >> 61 & 1 == 1
    }
    /// Payload (exactly `size` bytes).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..field::PAYLOAD + self.size()]
    }
    /// Source coordinate.
    pub fn src_coord(&self) -> u32 {
        (self.footer().0 & 0x3F_FFFF) as u32
    }
    /// Source endpoint (`user_bits`).
    pub fn src_ep(&self) -> u16 {
        ((self.footer().0 >> 22) & 0x3FF) as u16
    }
    /// Transaction id.
    pub fn tid(&self) -> u32 {
        (self.footer().0 >> 32) as u32
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        self.footer().1 as u32
    }
    /// `first_p`.
    pub fn first(&self) -> bool {
        self.footer().1 >> 32 & 1 == 1
    }
    /// `last_p`.
    pub fn last(&self) -> bool {
        self.footer().1 >> 33 & 1 == 1
    }
    /// `notif_enable`.
    pub fn notif(&self) -> bool {
        self.footer().1 >> 34 & 1 == 1
    }
}

/// Payload bytes rounded up to whole 16-byte words.
pub const fn padded(size: usize) -> usize {
    size.div_ceil(16) * 16
}

/// A parsed frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    /// Sender PDID.
    pub pdid: u16,
    /// Destination coordinate.
    pub dst_coord: u32,
    /// Packet type ([`ptype`]).
    pub ptype: u8,
    /// Response code ([`resp`]).
    pub resp: u8,
    /// Destination virtual address.
    pub dst_va: u64,
    /// Destination endpoint.
    pub dst_ep: u16,
    /// Sub-kind.
    pub sub: u8,
    /// `NO_ACK`.
    pub no_ack: bool,
    /// Source coordinate.
    pub src_coord: u32,
    /// Source endpoint.
    pub src_ep: u16,
    /// Transaction id.
    pub tid: u32,
    /// Sequence number.
    pub seq: u32,
    /// First packet of a transfer.
    pub first: bool,
    /// Last packet of a transfer.
    pub last: bool,
    /// Completion notification enabled.
    pub notif: bool,
    /// Payload.
    pub payload: &'a [u8],
}

impl<'a> FrameRepr<'a> {
    /// Checks and parses the bytes of one frame.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FrameError> {
        let checked = FramePacket::new_checked(bytes)?;
        Ok(FrameRepr {
            pdid: checked.pdid(),
            dst_coord: checked.dst_coord(),
            ptype: checked.packet_type(),
            resp: checked.resp(),
            dst_va: checked.dst_va(),
            dst_ep: checked.dst_ep(),
            sub: checked.sub(),
            no_ack: checked.no_ack(),
            src_coord: checked.src_coord(),
            src_ep: checked.src_ep(),
            tid: checked.tid(),
            seq: checked.seq(),
            first: checked.first(),
            last: checked.last(),
            notif: checked.notif(),
            payload: &bytes[field::PAYLOAD..field::PAYLOAD + checked.size()],
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + padded(self.payload.len()) + FOOTER_LEN
    }

    /// Writes the frame into `out` (at least `buffer_len()` bytes) and returns its length.
    /// Panics if the payload exceeds 256 bytes or `out` is too short (caller bugs).
    pub fn emit(&self, out: &mut [u8]) -> usize {
        assert!(
            self.payload.len() <= MAX_PAYLOAD,
            "frame payload above 256 bytes"
        );
        let len = self.buffer_len();
        let out = &mut out[..len];
        let h0 = (u64::from(self.pdid) << 2)
            | (u64::from(self.dst_coord & 0x3F_FFFF) << 18)
            | (u64::from(self.ptype & 0x1F) << 40)
            | ((self.payload.len() as u64) << 45)
            | (u64::from(self.resp & 0xF) << 60);
        let h1 = (self.dst_va & crate::regs::NVA_MASK)
            | (u64::from(self.dst_ep & 0x3FF) << 48)
            | (u64::from(self.sub & 0x7) << 58)
            | (u64::from(self.no_ack) << 61);
        let f0 = u64::from(self.src_coord & 0x3F_FFFF)
            | (u64::from(self.src_ep & 0x3FF) << 22)
            | (u64::from(self.tid) << 32);
        let f1 = u64::from(self.seq)
            | (u64::from(self.first) << 32)
            | (u64::from(self.last) << 33)
            | (u64::from(self.notif) << 34);
        out[field::H0].copy_from_slice(&h0.to_le_bytes());
        out[field::H1].copy_from_slice(&h1.to_le_bytes());
        let end = field::PAYLOAD + self.payload.len();
        out[field::PAYLOAD..end].copy_from_slice(self.payload);
        out[end..len - FOOTER_LEN].fill(0);
        out[len - 16..len - 8].copy_from_slice(&f0.to_le_bytes());
        out[len - 8..].copy_from_slice(&f1.to_le_bytes());
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(payload: &[u8]) -> FrameRepr<'_> {
        FrameRepr {
            pdid: 0xBEEF,
            dst_coord: 0x3F_F00F,
            ptype: ptype::ACK,
            resp: resp::XLAT_FAULT,
            dst_va: 0xFFFF_0000_1234,
            dst_ep: 0x3FF,
            sub: ack_sub::READ_RESP,
            no_ack: true,
            src_coord: 0x2000,
            src_ep: 7,
            tid: 0xC000_0005,
            seq: 0xFFFF_FFFF,
            first: true,
            last: false,
            notif: true,
            payload,
        }
    }

    #[test]
    fn round_trip_all_sizes() {
        let data: Vec<u8> = (0..=255u8).collect();
        for size in [0usize, 1, 15, 16, 17, 64, 255, 256] {
            let repr = sample(&data[..size]);
            let mut buf = [0xAAu8; MAX_FRAME];
            let len = repr.emit(&mut buf);
            assert_eq!(len, 32 + padded(size));
            let parsed = FrameRepr::parse(&buf[..len]).unwrap();
            assert_eq!(parsed, repr);
        }
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        let mut buf = [0u8; MAX_FRAME];
        let len = sample(&[1, 2, 3]).emit(&mut buf);
        assert_eq!(
            FramePacket::new_checked(&buf[..31]).unwrap_err(),
            FrameError::Truncated
        );
        assert_eq!(
            FramePacket::new_checked(&buf[..len - 1]).unwrap_err(),
            FrameError::BadLength
        );
        // Claim 32 payload bytes in a frame that carries one word.
        let mut bad = buf;
        bad[6] |= 0x04;
        assert!(FramePacket::new_checked(&bad[..len]).is_err());
        // Every prefix and every single-byte corruption parses or errors without panicking.
        for cut in 0..len {
            let _ = FrameRepr::parse(&buf[..cut]);
        }
        for i in 0..len {
            let mut c = buf;
            c[i] ^= 0xFF;
            let _ = FrameRepr::parse(&c[..len]);
        }
    }
}
