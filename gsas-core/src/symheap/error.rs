//! Errors of the symmetric heap allocator.
//!
//! What it is: [`AllocError`] for refused operations and [`InitError`] for a refused
//! construction. Every refusal leaves the allocator exactly as it was before the call. What it
//! is not: a fatal-error path; deciding whether a failed collective allocation ends the job is
//! the caller's business. Thread-safety: plain `Copy` data.

use core::fmt;

/// Why an allocator operation was refused. The allocator is unchanged by a refused call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AllocError {
    /// No free block can hold the request.
    OutOfMemory {
        /// Requested size in bytes, as passed by the caller.
        requested: u64,
        /// Requested alignment in bytes (16 for `malloc`, `calloc` and `realloc`).
        alignment: u64,
        /// Size of the largest free block at the time of the call.
        largest_free: u64,
    },
    /// The request fits in free memory, but splitting a free block needs a metadata slot and
    /// all slots of the caller-provided storage are in use.
    MetadataFull {
        /// Number of slots in the storage.
        capacity: usize,
    },
    /// The alignment is not a power of two of at least 8 (a multiple of `sizeof(void *)`).
    InvalidAlignment {
        /// The alignment passed by the caller.
        alignment: u64,
    },
    /// `calloc(count, size)`: `count * size` does not fit in 64 bits.
    SizeOverflow {
        /// Number of elements passed by the caller.
        count: u64,
        /// Element size passed by the caller.
        size: u64,
    },
    /// The offset is not the start of a live block: never allocated, already freed (double
    /// free), or pointing inside a block.
    UnknownBlock {
        /// The offset passed by the caller.
        offset: u64,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AllocError::OutOfMemory {
                requested,
                alignment,
                largest_free,
            } => write!(
                f,
                "symmetric heap exhausted: requested {requested} bytes aligned to {alignment}, \
                 largest free block is {largest_free} bytes"
            ),
            AllocError::MetadataFull { capacity } => write!(
                f,
                "symmetric heap metadata full: all {capacity} block slots are in use"
            ),
            AllocError::InvalidAlignment { alignment } => write!(
                f,
                "invalid symmetric heap alignment {alignment}: must be a power of two >= 8"
            ),
            AllocError::SizeOverflow { count, size } => write!(
                f,
                "calloc size overflow: {count} elements of {size} bytes exceed 2^64 bytes"
            ),
            AllocError::UnknownBlock { offset } => write!(
                f,
                "offset {offset:#x} is not the start of a live symmetric heap block \
                 (double free, interior pointer or never allocated)"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AllocError {}

/// Why a [`SymHeap`](super::SymHeap) could not be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum InitError {
    /// The heap must hold at least one 16-byte granule.
    HeapTooSmall {
        /// The heap size passed by the caller.
        heap_size: u64,
    },
    /// The metadata storage has no slot (at least one is needed for the initial free block).
    NoStorage,
    /// The metadata storage has more slots than 32-bit indices can address.
    StorageTooLarge {
        /// The number of slots passed by the caller.
        len: usize,
    },
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            InitError::HeapTooSmall { heap_size } => write!(
                f,
                "symmetric heap of {heap_size} bytes is too small (at least 16 bytes)"
            ),
            InitError::NoStorage => f.write_str("symmetric heap metadata storage is empty"),
            InitError::StorageTooLarge { len } => write!(
                f,
                "symmetric heap metadata storage of {len} slots exceeds the limit of {} slots",
                super::MAX_SLOTS
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for InitError {}
