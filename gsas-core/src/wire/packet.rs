//! View of the 32-byte header format shared by every request and by BULK_DATA.
//!
//! [`Packet`] wraps any byte buffer and reads or writes the header fields in place. Use
//! [`Packet::new_checked`] on untrusted input: it guarantees that every accessor is in
//! bounds, so no accessor panics afterwards. [`Packet::new_unchecked`] is for buffers the
//! caller sized itself (accessors panic on a buffer that is too short, as in smoltcp).
//! The view checks lengths only; field invariants are checked by
//! [`RequestRepr::parse`](super::RequestRepr::parse) and
//! [`ReplyRepr::parse`](super::ReplyRepr::parse).

use super::{AtomicOp, Error, GlobalAddr, PacketType, SenderId};

/// Byte offsets of the fields.
mod field {
    use core::ops::{Range, RangeFrom};

    pub const TYPE: usize = 0;
    pub const SUB: usize = 1;
    pub const SENDER: Range<usize> = 2..8;
    pub const ADDR: Range<usize> = 8..16;
    pub const ARG: Range<usize> = 16..24;
    pub const TOTAL: Range<usize> = 16..20;
    pub const FRAG_OFFSET: Range<usize> = 20..24;
    pub const TOKEN: Range<usize> = 24..28;
    pub const TOKEN_HIGH: Range<usize> = 28..32;
    pub const COMPARAND: Range<usize> = 32..40;
    pub const SIGNAL_ADDR: Range<usize> = 32..40;
    pub const SIGNAL_VALUE: Range<usize> = 40..48;
    pub const PAYLOAD: RangeFrom<usize> = 32..;
}

/// Length of the header (requests, bulk header).
pub const HEADER_LEN: usize = 32;
/// Length of a COMPARE_SWAP request (header + comparand).
pub const CSWAP_LEN: usize = 40;

#[inline]
fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    u32::from_le_bytes(a)
}

#[inline]
fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_le_bytes(a)
}

/// A view of a packet in the 32-byte header format (all requests and BULK_DATA).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after [`Packet::check_len`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that every accessor is in bounds: at least [`HEADER_LEN`] bytes, and
    /// [`CSWAP_LEN`] for an ATOMIC whose descriptor names COMPARE_SWAP (the comparand).
    ///
    /// Errors with [`Error::Truncated`].
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if PacketType::from(data[field::TYPE]) == PacketType::Atomic
            && AtomicOp::from_nibble(data[field::SUB]) == AtomicOp::CompareSwap
            && data.len() < CSWAP_LEN
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

    /// Length of the whole buffer.
    #[inline]
    pub fn len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// Whether the buffer is empty (never true for a checked packet).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buffer.as_ref().is_empty()
    }

    /// Byte 0: packet type.
    #[inline]
    pub fn packet_type(&self) -> PacketType {
        PacketType::from(self.buffer.as_ref()[field::TYPE])
    }

    /// Byte 1: the `sub` byte (atomic descriptor, control code, bulk flags; 0 otherwise).
    #[inline]
    pub fn sub(&self) -> u8 {
        self.buffer.as_ref()[field::SUB]
    }

    /// Bytes 2..8: sender id (48 bits).
    #[inline]
    pub fn sender(&self) -> SenderId {
        let b = &self.buffer.as_ref()[field::SENDER];
        let mut a = [0u8; 8];
        a[..6].copy_from_slice(b);
        SenderId::from_bits(u64::from_le_bytes(a))
    }

    /// Word 1: global address (the base address for bulk packets).
    #[inline]
    pub fn addr(&self) -> GlobalAddr {
        GlobalAddr::from_raw(le64(&self.buffer.as_ref()[field::ADDR]))
    }

    /// Word 2: length or operand (requests).
    #[inline]
    pub fn arg(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::ARG])
    }

    /// Low half of word 2: total length of the transfer (bulk header).
    #[inline]
    pub fn total_len(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::TOTAL])
    }

    /// High half of word 2: offset of this fragment in the transfer (bulk header).
    #[inline]
    pub fn frag_offset(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::FRAG_OFFSET])
    }

    /// Low half of word 3: request token.
    #[inline]
    pub fn token(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::TOKEN])
    }

    /// High half of word 3: reserved (must be 0) in requests; the fragment length in the
    /// bulk header (see [`Packet::frag_len`]).
    #[inline]
    pub fn token_high(&self) -> u32 {
        le32(&self.buffer.as_ref()[field::TOKEN_HIGH])
    }

    /// High half of word 3 in the bulk header: length of this fragment.
    #[inline]
    pub fn frag_len(&self) -> u32 {
        self.token_high()
    }

    /// Word 4: comparand of a COMPARE_SWAP. Panics if the buffer is shorter than
    /// [`CSWAP_LEN`] (which [`Packet::new_checked`] rules out for COMPARE_SWAP packets).
    #[inline]
    pub fn comparand(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::COMPARAND])
    }

    /// Word 4 of a WRITE or BULK_WRITE with an attached signal: the signal's global
    /// address. Panics if the buffer is shorter than 40 bytes (parse checks first).
    #[inline]
    pub fn signal_addr(&self) -> GlobalAddr {
        GlobalAddr::from_raw(le64(&self.buffer.as_ref()[field::SIGNAL_ADDR]))
    }

    /// Word 5 of a WRITE or BULK_WRITE with an attached signal: the signal value. Panics if
    /// the buffer is shorter than 48 bytes (parse checks first).
    #[inline]
    pub fn signal_value(&self) -> u64 {
        le64(&self.buffer.as_ref()[field::SIGNAL_VALUE])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Everything after the 32-byte header, with the lifetime of the underlying buffer.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets byte 0.
    #[inline]
    pub fn set_packet_type(&mut self, value: PacketType) {
        self.buffer.as_mut()[field::TYPE] = value.into();
    }

    /// Sets byte 1.
    #[inline]
    pub fn set_sub(&mut self, value: u8) {
        self.buffer.as_mut()[field::SUB] = value;
    }

    /// Sets bytes 2..8.
    #[inline]
    pub fn set_sender(&mut self, value: SenderId) {
        self.buffer.as_mut()[field::SENDER].copy_from_slice(&value.get().to_le_bytes()[..6]);
    }

    /// Sets word 1.
    #[inline]
    pub fn set_addr(&mut self, value: GlobalAddr) {
        self.buffer.as_mut()[field::ADDR].copy_from_slice(&value.raw().to_le_bytes());
    }

    /// Sets word 2.
    #[inline]
    pub fn set_arg(&mut self, value: u64) {
        self.buffer.as_mut()[field::ARG].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the low half of word 2 (bulk total length).
    #[inline]
    pub fn set_total_len(&mut self, value: u32) {
        self.buffer.as_mut()[field::TOTAL].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the high half of word 2 (bulk fragment offset).
    #[inline]
    pub fn set_frag_offset(&mut self, value: u32) {
        self.buffer.as_mut()[field::FRAG_OFFSET].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the low half of word 3.
    #[inline]
    pub fn set_token(&mut self, value: u32) {
        self.buffer.as_mut()[field::TOKEN].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the high half of word 3 (0 in requests, the fragment length in bulk headers).
    #[inline]
    pub fn set_token_high(&mut self, value: u32) {
        self.buffer.as_mut()[field::TOKEN_HIGH].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets the fragment length (high half of word 3) of a bulk header.
    #[inline]
    pub fn set_frag_len(&mut self, value: u32) {
        self.set_token_high(value);
    }

    /// Sets word 4 (COMPARE_SWAP comparand). Panics if the buffer is shorter than
    /// [`CSWAP_LEN`].
    #[inline]
    pub fn set_comparand(&mut self, value: u64) {
        self.buffer.as_mut()[field::COMPARAND].copy_from_slice(&value.to_le_bytes());
    }

    /// Sets words 4 and 5 (the signal block of a write with an attached signal). Panics if
    /// the buffer is shorter than 48 bytes.
    #[inline]
    pub fn set_signal(&mut self, addr: GlobalAddr, value: u64) {
        let b = self.buffer.as_mut();
        b[field::SIGNAL_ADDR].copy_from_slice(&addr.raw().to_le_bytes());
        b[field::SIGNAL_VALUE].copy_from_slice(&value.to_le_bytes());
    }

    /// Everything after the 32-byte header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const BULK: [u8; 36] = [
        0x82, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
        0x10, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00,
        0x00, 0x10, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00,
        0x07, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
        0xaa, 0xbb, 0xcc, 0xdd,
    ];

    #[test]
    fn read_fields() {
        let p = Packet::new_checked(&BULK[..]).unwrap();
        assert_eq!(p.packet_type(), PacketType::BulkData);
        assert_eq!(p.sub(), 0);
        assert_eq!(p.sender().get(), 0x0605_0403_0201);
        assert_eq!(p.addr(), GlobalAddr::new(2, 1, 0x10).unwrap());
        assert_eq!(p.total_len(), 0x1000);
        assert_eq!(p.frag_offset(), 0x800);
        assert_eq!(p.token(), 7);
        assert_eq!(p.frag_len(), 4);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(p.arg(), 0x0000_0800_0000_1000);
    }

    #[test]
    fn write_fields() {
        let mut buf = [0u8; 36];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_packet_type(PacketType::BulkData);
        p.set_sub(0);
        p.set_sender(SenderId::new(0x0605_0403_0201).unwrap());
        p.set_addr(GlobalAddr::new(2, 1, 0x10).unwrap());
        p.set_total_len(0x1000);
        p.set_frag_offset(0x800);
        p.set_token(7);
        p.set_frag_len(4);
        p.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(buf, BULK);
    }

    #[test]
    fn length_checks() {
        assert_eq!(
            Packet::new_checked(&BULK[..31]).unwrap_err(),
            Error::Truncated
        );
        assert!(Packet::new_checked(&BULK[..32]).is_ok());
        let mut cswap = [0u8; 40];
        cswap[0] = 0x05;
        cswap[1] = 0x33;
        assert_eq!(
            Packet::new_checked(&cswap[..39]).unwrap_err(),
            Error::Truncated
        );
        let p = Packet::new_checked(&cswap[..]).unwrap();
        assert_eq!(p.comparand(), 0);
        cswap[1] = 0x34;
        assert!(Packet::new_checked(&cswap[..32]).is_ok());
    }
}
