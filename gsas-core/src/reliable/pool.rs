//! Fixed-size frame buffers carved from the layer's [`Storage`] (borrowed or owned).
//!
//! The free list is threaded through the free blocks themselves (the first four bytes of a
//! free block hold the index of the next free one), so allocation and release are O(1) and
//! the pool needs no storage of its own.

use super::storage::Storage;

/// End of the free list.
const NONE: u32 = u32::MAX;

/// A pool of equally sized blocks.
pub(crate) struct Pool<'a> {
    buf: Storage<'a, u8>,
    block: usize,
    count: u32,
    free_head: u32,
    free: u32,
}

impl<'a> Pool<'a> {
    /// Splits `buf` into blocks of `block` bytes (at least 4); a tail shorter than a block
    /// is unused.
    pub(crate) fn new(buf: Storage<'a, u8>, block: usize) -> Self {
        let block = block.max(4);
        let count = u32::try_from(buf.len() / block)
            .unwrap_or(NONE - 1)
            .min(NONE - 1);
        let mut pool = Pool {
            buf,
            block,
            count,
            free_head: NONE,
            free: 0,
        };
        for i in (0..count).rev() {
            pool.release(i);
        }
        pool
    }

    /// Number of blocks.
    pub(crate) fn capacity(&self) -> u32 {
        self.count
    }

    /// Number of free blocks.
    pub(crate) fn available(&self) -> u32 {
        self.free
    }

    /// Takes a free block.
    pub(crate) fn alloc(&mut self) -> Option<u32> {
        if self.free_head == NONE {
            return None;
        }
        let i = self.free_head;
        let b = self.block(i);
        self.free_head = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        self.free -= 1;
        Some(i)
    }

    /// Returns a block taken with [`Pool::alloc`].
    pub(crate) fn release(&mut self, i: u32) {
        let head = self.free_head;
        self.block_mut(i)[..4].copy_from_slice(&head.to_le_bytes());
        self.free_head = i;
        self.free += 1;
    }

    pub(crate) fn block(&self, i: u32) -> &[u8] {
        let start = i as usize * self.block;
        &self.buf[start..start + self.block]
    }

    pub(crate) fn block_mut(&mut self, i: u32) -> &mut [u8] {
        let start = i as usize * self.block;
        &mut self.buf[start..start + self.block]
    }
}

#[cfg(test)]
mod tests {
    use super::Pool;

    #[test]
    fn allocates_every_block_once_then_reuses() {
        let mut storage = [0u8; 100];
        let mut pool = Pool::new((&mut storage).into(), 30);
        assert_eq!(pool.capacity(), 3);
        let mut got = [
            pool.alloc().unwrap(),
            pool.alloc().unwrap(),
            pool.alloc().unwrap(),
        ];
        assert_eq!(pool.alloc(), None);
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2]);
        pool.block_mut(1).fill(0xaa);
        pool.release(1);
        assert_eq!(pool.available(), 1);
        assert_eq!(pool.alloc(), Some(1));
        assert_eq!(pool.alloc(), None);
    }
}
