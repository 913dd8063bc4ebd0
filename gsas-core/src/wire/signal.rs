//! The signal a WRITE or the final BULK_WRITE fragment may carry (put-with-signal).
//!
//! A write with an attached signal asks the service to update one naturally aligned `u64`
//! (the signal word) once the write's data is applied, in the same request: OpenSHMEM's
//! `shmem_put_signal` (1.5 §9.8.1) to another node without a separate atomic. The `sub`
//! byte of the request says whether a signal is attached (0: none) and what it does: the
//! ATOMIC descriptor of a `u64` SET (`0x31`) or ADD (`0x35`); any other non-zero value is
//! refused with [`Error::BadAtomic`]. The 16-byte signal block follows the header: the
//! signal's global address, then the value. Plain `Copy` data, usable from any thread.

use super::{AtomicDesc, AtomicOp, AtomicType, Error, GlobalAddr};

/// Length of the signal block after the header (address and value, 8 bytes each).
pub const SIGNAL_LEN: usize = 16;

/// What a signal update does to the signal word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SignalOp {
    /// Store the value (`SHMEM_SIGNAL_SET`).
    Set,
    /// Add the value, wrapping (`SHMEM_SIGNAL_ADD`).
    Add,
}

impl SignalOp {
    /// The atomic operation the update is (on a `u64`).
    #[inline]
    pub fn atomic_op(self) -> AtomicOp {
        match self {
            SignalOp::Set => AtomicOp::Set,
            SignalOp::Add => AtomicOp::Add,
        }
    }

    /// The `sub` byte that announces this update: the ATOMIC descriptor of a `u64` SET or
    /// ADD (never 0).
    #[inline]
    pub fn to_sub(self) -> u8 {
        // A u64 SET or ADD is always a valid descriptor.
        match AtomicDesc::new(self.atomic_op(), AtomicType::U64) {
            Ok(d) => d.to_byte(),
            Err(_) => 0,
        }
    }

    /// Decodes a non-zero `sub` byte; [`Error::BadAtomic`] unless it is the descriptor of a
    /// `u64` SET or ADD.
    #[inline]
    pub fn from_sub(byte: u8) -> Result<Self, Error> {
        let desc = AtomicDesc::from_byte(byte)?;
        match (desc.op(), desc.ty()) {
            (AtomicOp::Set, AtomicType::U64) => Ok(SignalOp::Set),
            (AtomicOp::Add, AtomicType::U64) => Ok(SignalOp::Add),
            _ => Err(Error::BadAtomic),
        }
    }
}

/// A signal update attached to a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Signal {
    /// The signal word (8-byte aligned, in a segment of the same job; the service checks).
    pub addr: GlobalAddr,
    /// SET or ADD.
    pub op: SignalOp,
    /// The value stored or added.
    pub value: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_bytes() {
        assert_eq!(SignalOp::Set.to_sub(), 0x31);
        assert_eq!(SignalOp::Add.to_sub(), 0x35);
        assert_eq!(SignalOp::from_sub(0x31), Ok(SignalOp::Set));
        assert_eq!(SignalOp::from_sub(0x35), Ok(SignalOp::Add));
        for b in 1..=255u8 {
            if b != 0x31 && b != 0x35 {
                assert_eq!(SignalOp::from_sub(b), Err(Error::BadAtomic), "{b:#x}");
            }
        }
    }
}
