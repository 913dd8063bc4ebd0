//! View of the 8-byte reply header format (ACK, DATA, ERROR).
//!
//! [`ReplyPacket::new_checked`] guarantees that the header and the payload it declares are
//! in bounds, so no accessor panics afterwards. Bytes after `8 + payload length` are padding
//! (transports with fixed 64-byte slots pad) and are ignored.

use super::{Error, PacketType};

/// Byte offsets of the fields.
mod field {
    pub const TYPE: usize = 0;
    pub const STATUS: usize = 1;
    pub const LEN: usize = 2;
    pub const FLAGS: usize = 3;
    pub const TOKEN: core::ops::Range<usize> = 4..8;
    pub const PAYLOAD: usize = 8;
}

/// Length of the reply header.
pub const REPLY_HEADER_LEN: usize = 8;
/// Largest payload of an inline reply (DATA) and of an inline READ.
pub const MAX_INLINE_DATA: usize = 56;

/// A view of a packet in the 8-byte reply header format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ReplyPacket<T> {
    /// Wraps a buffer without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> ReplyPacket<T> {
        ReplyPacket { buffer }
    }

    /// Wraps a buffer after [`ReplyPacket::check_len`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<ReplyPacket<T>, Error> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the header and the declared payload are in bounds.
    ///
    /// Errors with [`Error::Truncated`].
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        let data = self.buffer.as_ref();
        if data.len() < REPLY_HEADER_LEN
            || data.len() < REPLY_HEADER_LEN + usize::from(data[field::LEN])
        {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Byte 0: packet type.
    #[inline]
    pub fn packet_type(&self) -> PacketType {
        PacketType::from(self.buffer.as_ref()[field::TYPE])
    }

    /// Byte 1: status (0 for ACK and DATA, the [`ErrorCode`](super::ErrorCode) for ERROR).
    #[inline]
    pub fn status(&self) -> u8 {
        self.buffer.as_ref()[field::STATUS]
    }

    /// Byte 2: payload length.
    #[inline]
    pub fn payload_len(&self) -> u8 {
        self.buffer.as_ref()[field::LEN]
    }

    /// Byte 3: flags (reserved, 0).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Bytes 4..8: the token of the request answered.
    #[inline]
    pub fn token(&self) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::TOKEN]);
        u32::from_le_bytes(a)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> ReplyPacket<&'a T> {
    /// The declared payload (`payload_len` bytes after the header), with the lifetime of the
    /// underlying buffer. Panics if the buffer is shorter than declared (ruled out by
    /// [`ReplyPacket::new_checked`]).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        &data[field::PAYLOAD..field::PAYLOAD + usize::from(data[field::LEN])]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReplyPacket<T> {
    /// Sets byte 0.
    #[inline]
    pub fn set_packet_type(&mut self, value: PacketType) {
        self.buffer.as_mut()[field::TYPE] = value.into();
    }

    /// Sets byte 1.
    #[inline]
    pub fn set_status(&mut self, value: u8) {
        self.buffer.as_mut()[field::STATUS] = value;
    }

    /// Sets byte 2.
    #[inline]
    pub fn set_payload_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::LEN] = value;
    }

    /// Sets byte 3.
    #[inline]
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Sets bytes 4..8.
    #[inline]
    pub fn set_token(&mut self, value: u32) {
        self.buffer.as_mut()[field::TOKEN].copy_from_slice(&value.to_le_bytes());
    }

    /// The declared payload, writable (set the payload length first).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let data = self.buffer.as_mut();
        let len = usize::from(data[field::LEN]);
        &mut data[field::PAYLOAD..field::PAYLOAD + len]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for ReplyPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_and_write_fields() {
        let bytes = [
            0x81, 0x00, 0x03, 0x00, 0x78, 0x56, 0x34, 0x12, 1, 2, 3, 0xee,
        ];
        let p = ReplyPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.packet_type(), PacketType::Data);
        assert_eq!((p.status(), p.payload_len(), p.flags()), (0, 3, 0));
        assert_eq!(p.token(), 0x1234_5678);
        assert_eq!(p.payload(), &[1, 2, 3]);

        let mut out = [0xeeu8; 12];
        let mut q = ReplyPacket::new_unchecked(&mut out[..]);
        q.set_packet_type(PacketType::Data);
        q.set_status(0);
        q.set_payload_len(3);
        q.set_flags(0);
        q.set_token(0x1234_5678);
        q.payload_mut().copy_from_slice(&[1, 2, 3]);
        assert_eq!(out, bytes);
    }

    #[test]
    fn truncation() {
        assert_eq!(
            ReplyPacket::new_checked(&[0x80u8; 7][..]).unwrap_err(),
            Error::Truncated
        );
        let short = [0x81, 0, 4, 0, 0, 0, 0, 0, 1, 2, 3];
        assert_eq!(
            ReplyPacket::new_checked(&short[..]).unwrap_err(),
            Error::Truncated
        );
        assert!(ReplyPacket::new_checked(&short[..10]).is_err());
    }
}
