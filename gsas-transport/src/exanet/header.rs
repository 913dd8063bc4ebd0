//! The 16-byte job-key header in front of every Exanet packet of the runtime, the
//! counterpart of the UDP header (`transport::udp::header`).
//!
//! | bytes | field | value |
//! |---|---|---|
//! | 0..4 | magic | `"GSX1"` (the bytes `47 53 58 31`) |
//! | 4..8 | reserved | 0, ignored on receipt |
//! | 8..16 | job key | u64, little-endian |
//!
//! After smoltcp's `wire` modules: [`Header`] is a view over any byte buffer with field
//! offsets in a private `mod field`, [`Header::new_checked`] for untrusted input, and
//! [`HeaderRepr`] with `parse` and `emit`. Parsing never panics; emitting panics only when
//! the buffer is shorter than [`HEADER_LEN`]. Thread-safety: plain data.

/// Length of the header.
pub const HEADER_LEN: usize = 16;
/// The magic bytes.
pub const MAGIC: [u8; 4] = *b"GSX1";

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const RESERVED: Range<usize> = 4..8;
    pub const KEY: Range<usize> = 8..16;
}

/// Why a packet's header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Shorter than [`HEADER_LEN`].
    Truncated,
    /// The first four bytes are not `"GSX1"`.
    BadMagic,
}

/// A view of the job-key header at the start of a buffer.
#[derive(Clone, Copy, Debug)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checks (accessors panic if it is shorter than the header).
    pub const fn new_unchecked(buffer: T) -> Self {
        Header { buffer }
    }

    /// Wraps a buffer after checking its length and magic.
    ///
    /// Errors: [`HeaderError::Truncated`], [`HeaderError::BadMagic`].
    pub fn new_checked(buffer: T) -> Result<Self, HeaderError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(HeaderError::Truncated);
        }
        if b[field::MAGIC] != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        Ok(Header { buffer })
    }

    /// The job key.
    pub fn key(&self) -> u64 {
        let mut k = [0u8; 8];
        k.copy_from_slice(&self.buffer.as_ref()[field::KEY]);
        u64::from_le_bytes(k)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Writes the magic, zero reserved bytes and `key`.
    pub fn set(&mut self, key: u64) {
        let b = self.buffer.as_mut();
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::RESERVED].fill(0);
        b[field::KEY].copy_from_slice(&key.to_le_bytes());
    }
}

/// The header's content: the job key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderRepr {
    /// The job key the packet claims.
    pub key: u64,
}

impl HeaderRepr {
    /// Reads the header at the start of `packet`.
    ///
    /// Errors: as [`Header::new_checked`].
    pub fn parse(packet: &[u8]) -> Result<Self, HeaderError> {
        Ok(HeaderRepr {
            key: Header::new_checked(packet)?.key(),
        })
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    pub fn emit(self, buf: &mut [u8]) {
        Header::new_unchecked(&mut buf[..HEADER_LEN]).set(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_the_documented_layout_and_round_trip() {
        let mut buf = [0xAAu8; 20];
        HeaderRepr {
            key: 0x0102_0304_0506_0708,
        }
        .emit(&mut buf);
        assert_eq!(
            buf[..HEADER_LEN],
            [b'G', b'S', b'X', b'1', 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]
        );
        assert_eq!(buf[HEADER_LEN..], [0xAA; 4], "the payload is left alone");
        let h = Header::new_checked(&buf[..]).unwrap();
        assert_eq!(h.key(), 0x0102_0304_0506_0708);
        assert_eq!(
            HeaderRepr::parse(&buf),
            Ok(HeaderRepr {
                key: 0x0102_0304_0506_0708
            })
        );
    }

    #[test]
    fn short_or_foreign_packets_are_refused_without_panicking() {
        let mut buf = [0u8; HEADER_LEN];
        HeaderRepr { key: 9 }.emit(&mut buf);
        for len in 0..HEADER_LEN {
            assert_eq!(HeaderRepr::parse(&buf[..len]), Err(HeaderError::Truncated));
        }
        buf[3] = b'2';
        assert_eq!(HeaderRepr::parse(&buf), Err(HeaderError::BadMagic));
        buf[3] = b'1';
        buf[4..8].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(
            HeaderRepr::parse(&buf),
            Ok(HeaderRepr { key: 9 }),
            "reserved ignored"
        );
    }
}
