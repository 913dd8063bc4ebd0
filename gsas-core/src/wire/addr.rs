//! Global addresses and sender identities as carried on the wire.
//!
//! Both are `Copy` newtypes over `u64` whose constructors reject values that do not fit their
//! wire field, so a value of these types can always be emitted as is.

/// A global address: (target PE, segment id, byte offset in the segment) packed into 64 bits.
///
/// | bits | field |
/// |---|---|
/// | 48..64 | target PE (`u16`) |
/// | 40..48 | segment id (`u8`; the runtime uses 0 = symmetric heap, 1 = data segment) |
/// | 0..40 | byte offset in the segment (up to 1 TiB - 1) |
///
/// Every `u64` is a valid global address, so [`GlobalAddr::from_raw`] is infallible; the
/// checked constructor [`GlobalAddr::new`] refuses offsets that do not fit 40 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GlobalAddr(u64);

impl GlobalAddr {
    /// Largest representable offset (`2^40 - 1`).
    pub const MAX_OFFSET: u64 = (1 << 40) - 1;

    /// Builds an address; `None` if `offset` exceeds [`GlobalAddr::MAX_OFFSET`].
    #[inline]
    pub const fn new(pe: u16, segment: u8, offset: u64) -> Option<Self> {
        if offset > Self::MAX_OFFSET {
            return None;
        }
        Some(GlobalAddr(
            ((pe as u64) << 48) | ((segment as u64) << 40) | offset,
        ))
    }

    /// Reinterprets a raw wire word.
    #[inline]
    pub const fn from_raw(raw: u64) -> Self {
        GlobalAddr(raw)
    }

    /// The raw wire word.
    #[inline]
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Target PE.
    #[inline]
    pub const fn pe(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// Segment id (not interpreted by the core).
    #[inline]
    pub const fn segment(self) -> u8 {
        (self.0 >> 40) as u8
    }

    /// Byte offset within the segment.
    #[inline]
    pub const fn offset(self) -> u64 {
        self.0 & Self::MAX_OFFSET
    }

    /// The same (PE, segment) at another offset; `None` if `offset` does not fit 40 bits.
    #[inline]
    pub const fn with_offset(self, offset: u64) -> Option<Self> {
        Self::new(self.pe(), self.segment(), offset)
    }

    /// The address `delta` bytes further in the same segment; `None` on overflow of the
    /// 40-bit offset.
    #[inline]
    pub const fn checked_add(self, delta: u64) -> Option<Self> {
        match self.offset().checked_add(delta) {
            Some(off) => self.with_offset(off),
            None => None,
        }
    }
}

impl core::fmt::Display for GlobalAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "pe{}:seg{}+{:#x}",
            self.pe(),
            self.segment(),
            self.offset()
        )
    }
}

/// Identity of the sender of a request (48 bits on the wire). The host decides what it
/// names (a process, a node's service); the core only carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SenderId(u64);

impl SenderId {
    /// Largest representable id (`2^48 - 1`).
    pub const MAX: u64 = (1 << 48) - 1;

    /// Builds an id; `None` if `id` exceeds [`SenderId::MAX`].
    #[inline]
    pub const fn new(id: u64) -> Option<Self> {
        if id > Self::MAX {
            None
        } else {
            Some(SenderId(id))
        }
    }

    /// Keeps the low 48 bits of `bits` (for values read from the 48-bit wire field).
    #[inline]
    pub(crate) const fn from_bits(bits: u64) -> Self {
        SenderId(bits & Self::MAX)
    }

    /// The id as an integer.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_addr_fields() {
        let a = GlobalAddr::new(0x1234, 0x56, 0xAB_CDEF_0123).unwrap();
        assert_eq!(a.raw(), 0x1234_56AB_CDEF_0123);
        assert_eq!(
            (a.pe(), a.segment(), a.offset()),
            (0x1234, 0x56, 0xAB_CDEF_0123)
        );
        assert_eq!(GlobalAddr::from_raw(a.raw()), a);
        assert_eq!(GlobalAddr::new(1, 1, 1 << 40), None);
        assert_eq!(
            GlobalAddr::new(1, 1, GlobalAddr::MAX_OFFSET)
                .unwrap()
                .offset(),
            (1 << 40) - 1
        );
    }

    #[test]
    fn global_addr_arithmetic() {
        let a = GlobalAddr::new(3, 1, 100).unwrap();
        assert_eq!(
            a.checked_add(28).unwrap(),
            GlobalAddr::new(3, 1, 128).unwrap()
        );
        assert_eq!(a.with_offset(0).unwrap().offset(), 0);
        let top = GlobalAddr::new(3, 1, GlobalAddr::MAX_OFFSET).unwrap();
        assert_eq!(top.checked_add(1), None);
        assert_eq!(top.checked_add(u64::MAX), None);
    }

    #[test]
    fn sender_id_range() {
        assert_eq!(SenderId::new(SenderId::MAX).unwrap().get(), SenderId::MAX);
        assert_eq!(SenderId::new(SenderId::MAX + 1), None);
    }
}
