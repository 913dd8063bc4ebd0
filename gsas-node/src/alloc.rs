//! The symmetric heap: alloc, calloc, align, realloc, free (local calls; see the module docs).

use super::error::NodeError;
use gsas_core::symheap::Realloc;

use super::{HEAP, MAPPED, Node, lock};

impl Node {
    /// Allocates `size` bytes of the symmetric heap; `Ok(None)` for size 0. Returns the
    /// offset (the same on every PE that makes the same calls).
    pub fn alloc(&self, size: u64) -> Result<Option<u64>, NodeError> {
        self.check_live()?;
        Ok(lock(&self.heap).malloc(size)?)
    }

    /// Allocates `count * size` zeroed bytes.
    pub fn calloc(&self, count: u64, size: u64) -> Result<Option<u64>, NodeError> {
        self.check_live()?;
        let off = lock(&self.heap).calloc(count, size)?;
        if let Some(off) = off {
            let len = count.saturating_mul(size);
            let base = self.mappings[self.rank as usize * MAPPED + usize::from(HEAP)].base;
            // SAFETY: the allocator returned `off .. off + len` inside this PE's heap
            // mapping, which stays mapped while `self` lives.
            unsafe { std::ptr::write_bytes((base + off as usize) as *mut u8, 0, len as usize) };
        }
        Ok(off)
    }

    /// Allocates `size` bytes aligned to `alignment` (a power of two, at least 8).
    pub fn align(&self, alignment: u64, size: u64) -> Result<Option<u64>, NodeError> {
        self.check_live()?;
        Ok(lock(&self.heap).align(alignment, size)?)
    }

    /// Resizes a block (copying this PE's contents when it moves); see gsas-core's
    /// [`SymHeap::realloc`](gsas_core::symheap::SymHeap::realloc).
    pub fn realloc(&self, block: Option<u64>, size: u64) -> Result<Option<u64>, NodeError> {
        self.check_live()?;
        let mut heap = lock(&self.heap);
        let r = heap.realloc(block, size)?;
        if let Realloc::Moved { from, to, copy_len } = r {
            let base = self.mappings[self.rank as usize * MAPPED + usize::from(HEAP)].base;
            // SAFETY: both ranges lie in this PE's heap mapping and do not overlap (the
            // allocator guarantees it); the copy happens before the next allocator call.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (base + from as usize) as *const u8,
                    (base + to as usize) as *mut u8,
                    copy_len as usize,
                )
            };
        }
        Ok(r.offset())
    }

    /// Frees a block.
    pub fn free(&self, offset: u64) -> Result<(), NodeError> {
        self.check_live()?;
        Ok(lock(&self.heap).free(offset)?)
    }
}
