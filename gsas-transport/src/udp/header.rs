//! The 16-byte gsas UDP header, in front of every datagram.
//!
//! | bytes | field | value |
//! |---|---|---|
//! | 0..4 | magic | `"GSAS"` (the bytes `47 53 41 53`) |
//! | 4 | version | [`VERSION`] (1) |
//! | 5 | flags | 0; reserved for future use, ignored on receipt |
//! | 6..8 | reserved | 0, ignored on receipt |
//! | 8..16 | job key | u64, little-endian |
//!
//! After smoltcp's `wire` modules: [`Header`] is a view over any byte buffer with field
//! offsets in a private `mod field`, [`Header::new_checked`] for untrusted input, and
//! [`HeaderRepr`] with `parse` and `emit`. Parsing never panics; emitting panics only when
//! the buffer is shorter than [`HEADER_LEN`]. Thread-safety: plain data.

use core::fmt;

/// Length of the header.
pub const HEADER_LEN: usize = 16;
/// The magic bytes.
pub const MAGIC: [u8; 4] = *b"GSAS";
/// The header version this code speaks.
pub const VERSION: u8 = 1;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const FLAGS: usize = 5;
    pub const RESERVED: Range<usize> = 6..8;
    pub const KEY: Range<usize> = 8..16;
}

/// Why a datagram's header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Shorter than [`HEADER_LEN`].
    Truncated,
    /// The first four bytes are not `"GSAS"`.
    BadMagic,
    /// A version other than [`VERSION`].
    BadVersion(u8),
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Truncated => {
                write!(f, "datagram shorter than the {HEADER_LEN}-byte gsas header")
            }
            HeaderError::BadMagic => f.write_str("datagram without the gsas magic"),
            HeaderError::BadVersion(v) => {
                write!(f, "gsas header version {v}, expected {VERSION}")
            }
        }
    }
}

impl std::error::Error for HeaderError {}

/// A view of a gsas UDP header at the start of a buffer.
#[derive(Clone, Copy, Debug)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checks (accessors panic if it is shorter than the header).
    pub const fn new_unchecked(buffer: T) -> Self {
        Header { buffer }
    }

    /// Wraps a buffer after checking its length.
    ///
    /// Errors: [`HeaderError::Truncated`].
    pub fn new_checked(buffer: T) -> Result<Self, HeaderError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(HeaderError::Truncated);
        }
        Ok(Header { buffer })
    }

    /// The magic bytes.
    pub fn magic(&self) -> [u8; 4] {
        let mut m = [0u8; 4];
        m.copy_from_slice(&self.buffer.as_ref()[field::MAGIC]);
        m
    }

    /// The version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The flags.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The job key.
    pub fn key(&self) -> u64 {
        let mut k = [0u8; 8];
        k.copy_from_slice(&self.buffer.as_ref()[field::KEY]);
        u64::from_le_bytes(k)
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Sets the magic bytes.
    pub fn set_magic(&mut self, magic: [u8; 4]) {
        self.buffer.as_mut()[field::MAGIC].copy_from_slice(&magic);
    }

    /// Sets the version.
    pub fn set_version(&mut self, version: u8) {
        self.buffer.as_mut()[field::VERSION] = version;
    }

    /// Sets the flags.
    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[field::FLAGS] = flags;
    }

    /// Zeroes the reserved bytes.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }

    /// Sets the job key.
    pub fn set_key(&mut self, key: u64) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(&key.to_le_bytes());
    }
}

/// The meaning of a valid header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderRepr {
    /// The job key of the sender's job.
    pub key: u64,
}

impl HeaderRepr {
    /// Checks magic and version.
    ///
    /// Errors: [`HeaderError::BadMagic`], [`HeaderError::BadVersion`].
    pub fn parse<T: AsRef<[u8]>>(header: &Header<T>) -> Result<Self, HeaderError> {
        if header.magic() != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        if header.version() != VERSION {
            return Err(HeaderError::BadVersion(header.version()));
        }
        Ok(HeaderRepr { key: header.key() })
    }

    /// Writes the header (flags and reserved bytes 0).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, header: &mut Header<T>) {
        header.set_magic(MAGIC);
        header.set_version(VERSION);
        header.set_flags(0);
        header.clear_reserved();
        header.set_key(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_on_bytes() {
        let mut buf = [0xffu8; 20];
        HeaderRepr {
            key: 0x0102_0304_0506_0708,
        }
        .emit(&mut Header::new_unchecked(&mut buf[..]));
        assert_eq!(
            &buf[..16],
            &[b'G', b'S', b'A', b'S', 1, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]
        );
        let h = Header::new_checked(&buf[..]).unwrap();
        assert_eq!(
            HeaderRepr::parse(&h),
            Ok(HeaderRepr {
                key: 0x0102_0304_0506_0708
            })
        );
        assert_eq!(h.payload(), &[0xff; 4]);
    }

    #[test]
    fn refusals() {
        assert_eq!(
            Header::new_checked(&[0u8; 15][..]).err(),
            Some(HeaderError::Truncated)
        );
        let mut buf = [0u8; 16];
        HeaderRepr { key: 1 }.emit(&mut Header::new_unchecked(&mut buf[..]));
        buf[4] = 2;
        let h = Header::new_checked(&buf[..]).unwrap();
        assert_eq!(HeaderRepr::parse(&h), Err(HeaderError::BadVersion(2)));
        buf[0] = b'X';
        let h = Header::new_checked(&buf[..]).unwrap();
        assert_eq!(HeaderRepr::parse(&h), Err(HeaderError::BadMagic));
        // Flags and reserved bytes are ignored on receipt.
        let mut buf = [0u8; 16];
        HeaderRepr { key: 5 }.emit(&mut Header::new_unchecked(&mut buf[..]));
        buf[5] = 0x80;
        buf[6] = 1;
        let h = Header::new_checked(&buf[..]).unwrap();
        assert_eq!(h.flags(), 0x80);
        assert_eq!(HeaderRepr::parse(&h), Ok(HeaderRepr { key: 5 }));
    }

    #[test]
    fn parsing_arbitrary_bytes_never_panics() {
        let mut x = 0x1234_5678_u64;
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 56) as u8
                })
                .collect();
            if let Ok(h) = Header::new_checked(&bytes[..]) {
                let _ = HeaderRepr::parse(&h);
                assert_eq!(h.payload().len(), len - HEADER_LEN);
            }
        }
    }
}
