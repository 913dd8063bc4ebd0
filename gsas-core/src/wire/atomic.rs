//! The atomic descriptor: the `sub` byte of an ATOMIC request.
//!
//! Low nibble = operation ([`AtomicOp`]), high nibble = datatype ([`AtomicType`]). The wire
//! carries operation and datatype codes, never Rust types (GASNet-EX remote atomics). A
//! descriptor that parses into an [`AtomicDesc`] is valid: the operation and datatype are
//! known and the pair is allowed (float types allow FETCH, SET, SWAP only; these are bitwise
//! moves, no float arithmetic). Plain `Copy` values.

use super::Error;

/// Declares a 4-bit wire enumeration with an `Unknown(u8)` variant.
macro_rules! nibble_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A code this version does not know (a value `0..=15`).
            Unknown(u8),
        }

        impl $name {
            /// Decodes a nibble (`0..=15`; higher bits are ignored).
            #[inline]
            pub fn from_nibble(value: u8) -> Self {
                match value & 0x0f {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }

            /// The 4-bit code (`Unknown(v)` gives `v & 0x0f`).
            #[inline]
            pub fn nibble(self) -> u8 {
                match self {
                    $( $name::$variant => $value, )+
                    $name::Unknown(other) => other & 0x0f,
                }
            }
        }
    };
}

nibble_enum! {
    /// Atomic operation (low nibble of the descriptor).
    pub enum AtomicOp {
        /// Read the value (fetching).
        Fetch = 0,
        /// Store the operand.
        Set = 1,
        /// Store the operand, fetch the old value.
        Swap = 2,
        /// Store the operand if the value equals the comparand; fetch the old value.
        CompareSwap = 3,
        /// Add the operand, fetch the old value.
        FetchAdd = 4,
        /// Add the operand.
        Add = 5,
        /// Add one, fetch the old value.
        FetchInc = 6,
        /// Add one.
        Inc = 7,
        /// Bitwise AND with the operand, fetch the old value.
        FetchAnd = 8,
        /// Bitwise AND with the operand.
        And = 9,
        /// Bitwise OR with the operand, fetch the old value.
        FetchOr = 10,
        /// Bitwise OR with the operand.
        Or = 11,
        /// Bitwise XOR with the operand, fetch the old value.
        FetchXor = 12,
        /// Bitwise XOR with the operand.
        Xor = 13,
    }
}

nibble_enum! {
    /// Datatype of an atomic (high nibble of the descriptor); the width follows from it.
    pub enum AtomicType {
        /// Signed 32-bit integer.
        I32 = 0,
        /// Unsigned 32-bit integer.
        U32 = 1,
        /// Signed 64-bit integer.
        I64 = 2,
        /// Unsigned 64-bit integer.
        U64 = 3,
        /// 32-bit IEEE float (FETCH, SET, SWAP only).
        F32 = 4,
        /// 64-bit IEEE float (FETCH, SET, SWAP only).
        F64 = 5,
    }
}

impl AtomicOp {
    /// Whether the operation returns the old value (FETCH, SWAP, COMPARE_SWAP, FETCH_*).
    #[inline]
    pub fn fetches(self) -> bool {
        matches!(
            self,
            AtomicOp::Fetch
                | AtomicOp::Swap
                | AtomicOp::CompareSwap
                | AtomicOp::FetchAdd
                | AtomicOp::FetchInc
                | AtomicOp::FetchAnd
                | AtomicOp::FetchOr
                | AtomicOp::FetchXor
        )
    }
}

impl AtomicType {
    /// Width in bytes (4 or 8); `None` for unknown types.
    #[inline]
    pub fn width(self) -> Option<usize> {
        match self {
            AtomicType::I32 | AtomicType::U32 | AtomicType::F32 => Some(4),
            AtomicType::I64 | AtomicType::U64 | AtomicType::F64 => Some(8),
            AtomicType::Unknown(_) => None,
        }
    }

    /// Whether this is a floating-point type.
    #[inline]
    pub fn is_float(self) -> bool {
        matches!(self, AtomicType::F32 | AtomicType::F64)
    }
}

/// A valid (operation, datatype) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AtomicDesc {
    op: AtomicOp,
    ty: AtomicType,
}

impl AtomicDesc {
    /// Checks and builds a descriptor.
    ///
    /// Errors with [`Error::BadAtomic`] when the operation or datatype is unknown, or when a
    /// float datatype is combined with anything but FETCH, SET or SWAP.
    #[inline]
    pub fn new(op: AtomicOp, ty: AtomicType) -> Result<Self, Error> {
        let op_ok = !matches!(op, AtomicOp::Unknown(_));
        let ty_ok = !matches!(ty, AtomicType::Unknown(_));
        let pair_ok =
            !ty.is_float() || matches!(op, AtomicOp::Fetch | AtomicOp::Set | AtomicOp::Swap);
        if op_ok && ty_ok && pair_ok {
            Ok(AtomicDesc { op, ty })
        } else {
            Err(Error::BadAtomic)
        }
    }

    /// Decodes the `sub` byte of an ATOMIC request.
    #[inline]
    pub fn from_byte(byte: u8) -> Result<Self, Error> {
        Self::new(
            AtomicOp::from_nibble(byte),
            AtomicType::from_nibble(byte >> 4),
        )
    }

    /// Encodes the descriptor as the `sub` byte.
    #[inline]
    pub fn to_byte(self) -> u8 {
        (self.ty.nibble() << 4) | self.op.nibble()
    }

    /// The operation.
    #[inline]
    pub fn op(self) -> AtomicOp {
        self.op
    }

    /// The datatype.
    #[inline]
    pub fn ty(self) -> AtomicType {
        self.ty
    }

    /// Operand width in bytes: 4 or 8.
    #[inline]
    pub fn width(self) -> usize {
        // Unknown types cannot be in a valid descriptor; 8 is unreachable filler.
        self.ty.width().unwrap_or(8)
    }

    /// Whether the reply carries the old value (DATA of [`AtomicDesc::width`] bytes) rather
    /// than an ACK.
    #[inline]
    pub fn fetches(self) -> bool {
        self.op.fetches()
    }

    /// Whether the request carries the 8-byte comparand trailer (COMPARE_SWAP).
    #[inline]
    pub fn has_comparand(self) -> bool {
        self.op == AtomicOp::CompareSwap
    }

    /// Largest operand value for this width (`u32::MAX` or `u64::MAX`).
    #[inline]
    pub fn operand_mask(self) -> u64 {
        if self.width() == 4 {
            u64::from(u32::MAX)
        } else {
            u64::MAX
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_bytes() {
        let d = AtomicDesc::new(AtomicOp::FetchAdd, AtomicType::U64).unwrap();
        assert_eq!(d.to_byte(), 0x34);
        assert_eq!(AtomicDesc::from_byte(0x34).unwrap(), d);
        assert!(d.fetches() && !d.has_comparand() && d.width() == 8);
        let c = AtomicDesc::from_byte(0x03).unwrap();
        assert_eq!((c.op(), c.ty()), (AtomicOp::CompareSwap, AtomicType::I32));
        assert!(c.has_comparand() && c.width() == 4 && c.operand_mask() == 0xffff_ffff);
        assert_eq!(AtomicDesc::from_byte(0x52).unwrap().op(), AtomicOp::Swap);
    }

    #[test]
    fn invalid_descriptors() {
        assert_eq!(AtomicDesc::from_byte(0x0e), Err(Error::BadAtomic)); // op 14
        assert_eq!(AtomicDesc::from_byte(0x60), Err(Error::BadAtomic)); // type 6
        assert_eq!(AtomicDesc::from_byte(0x44), Err(Error::BadAtomic)); // F32 fetch-add
        assert_eq!(AtomicDesc::from_byte(0x53), Err(Error::BadAtomic)); // F64 cswap
        assert_eq!(
            AtomicDesc::new(AtomicOp::Unknown(15), AtomicType::U32),
            Err(Error::BadAtomic)
        );
    }

    #[test]
    fn all_bytes_classified() {
        let mut valid = 0;
        for b in 0..=255u8 {
            if let Ok(d) = AtomicDesc::from_byte(b) {
                assert_eq!(d.to_byte(), b);
                valid += 1;
            }
        }
        // 4 integer types x 14 ops + 2 float types x 3 ops.
        assert_eq!(valid, 4 * 14 + 2 * 3);
    }

    #[test]
    fn fetching_ops() {
        let fetching: [u8; 8] = [0, 2, 3, 4, 6, 8, 10, 12];
        for n in 0..14u8 {
            assert_eq!(
                AtomicOp::from_nibble(n).fetches(),
                fetching.contains(&n),
                "op {n}"
            );
            assert_eq!(AtomicOp::from_nibble(n).nibble(), n);
        }
    }
}
