//! Read-only views of the allocator: [`HeapStats`] and the address-ordered [`Blocks`] walk.
//!
//! What it is: figures for `SHMEM_INFO`-style reports, tests and the service's accounting.
//! What it is not: a way to change the heap. Thread-safety: plain data and a borrowing
//! iterator; the iterator borrows the allocator immutably, so no call can change the heap
//! while it runs.

use super::slot::{Idx, NIL, Slot, SlotState};

/// Figures describing the heap at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HeapStats {
    /// Bytes managed (the heap size given at creation, rounded down to a multiple of 16).
    pub heap_size: u64,
    /// Bytes in live blocks (sizes rounded up to 16, plus slack a shrink could not give back).
    pub bytes_in_use: u64,
    /// Bytes in free blocks (`heap_size - bytes_in_use`).
    pub bytes_free: u64,
    /// Size of the largest free block: the largest request `malloc` can satisfy now.
    pub largest_free: u64,
    /// Number of live blocks.
    pub live_blocks: usize,
    /// Number of free blocks (never two adjacent: free neighbours are always merged).
    pub free_blocks: usize,
    /// Metadata slots in use (`live_blocks + free_blocks`).
    pub slots_in_use: usize,
    /// Metadata slots in the storage.
    pub slot_capacity: usize,
}

impl HeapStats {
    /// External fragmentation, `1 - largest_free / bytes_free`: 0 when all free memory is one
    /// block (or none is free), approaching 1 when free memory is scattered in small pieces.
    pub fn fragmentation(&self) -> f64 {
        if self.bytes_free == 0 {
            0.0
        } else {
            1.0 - self.largest_free as f64 / self.bytes_free as f64
        }
    }
}

/// One block of the heap as seen by [`Blocks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BlockInfo {
    /// Offset of the block from the start of the heap.
    pub offset: u64,
    /// Size of the block in bytes (a multiple of 16; for a live block, its usable size).
    pub size: u64,
    /// Whether the block is allocated (`true`) or free.
    pub live: bool,
}

/// Iterator over all blocks of a heap, free and live, in address order. They tile the heap:
/// the first starts at 0, each starts where the previous ends, the last ends at the heap size.
#[derive(Clone, Debug)]
pub struct Blocks<'a> {
    pub(super) slots: &'a [Slot],
    pub(super) next: Idx,
}

impl Iterator for Blocks<'_> {
    type Item = BlockInfo;

    fn next(&mut self) -> Option<BlockInfo> {
        if self.next == NIL {
            return None;
        }
        let s = &self.slots[self.next as usize];
        self.next = s.next;
        Some(BlockInfo {
            offset: s.offset,
            size: s.size,
            live: s.state == SlotState::Live,
        })
    }
}
