//! The allocator proper: [`SymHeap`], best fit over offsets with immediate coalescing.
//!
//! What it is: the OpenSHMEM 1.5 `malloc`/`calloc`/`align`/`realloc`/`free` semantics over
//! the offsets `[0, heap_size)` of one PE's symmetric heap, with metadata in caller storage.
//! What it is not: a memory writer (it never reads or writes heap bytes) or a lock.
//! Thread-safety: every mutating method takes `&mut self`; the caller serialises.
//!
//! Layout of the metadata: every block (free or live) is one [`Slot`]. Blocks are linked in
//! address order (`prev`/`next`), which makes coalescing O(1). Free blocks are in an AVL tree
//! keyed by (size, offset), so best fit is a lower-bound search; live blocks are in an AVL tree
//! keyed by offset, so `free` finds its block, and rejects offsets that are not a block start,
//! in O(log n). Unused slots are a stack threaded through `next`, plus a high-water mark so
//! that creating a heap never touches the storage beyond slot 0.

use core::fmt;

use super::error::{AllocError, InitError};
use super::slot::{Idx, NIL, Slot, SlotState};
use super::stats::{Blocks, HeapStats};
use super::tree::{self, Order};

/// Every block starts and ends on a multiple of this many bytes.
pub const GRANULE: u64 = 16;

/// Alignment of every block returned by `malloc`, `calloc` and `realloc` (`long double`,
/// `double _Complex`).
pub const DEFAULT_ALIGNMENT: u64 = 16;

/// Largest metadata storage in slots (indices are 32-bit, one value means "none").
pub const MAX_SLOTS: usize = u32::MAX as usize;

/// The block at offset 0 always lives in slot 0: merging keeps the lower block's slot and
/// splitting keeps the original slot at the lower address.
const FIRST: Idx = 0;

/// What [`SymHeap::realloc`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "a moved block must be copied by the caller"]
pub enum Realloc {
    /// `realloc(None, 0)`: nothing was allocated; the result is a null pointer.
    Null,
    /// `realloc(Some(offset), 0)`: the block was freed; the result is a null pointer.
    Freed,
    /// `realloc(None, size)`: a new block, exactly as from [`SymHeap::malloc`].
    Allocated {
        /// Offset of the new block.
        offset: u64,
    },
    /// The block was grown or shrunk where it is; its contents stay in place.
    InPlace {
        /// Offset of the block (unchanged).
        offset: u64,
    },
    /// The block moved. The caller must copy `copy_len` bytes from `from` to `to` before it
    /// makes its next call on this allocator. The ranges never overlap.
    Moved {
        /// Offset of the old block, now free in the allocator's books but with its bytes
        /// untouched.
        from: u64,
        /// Offset of the new block.
        to: u64,
        /// Bytes to copy: the smaller of the old block's usable size and the new size.
        copy_len: u64,
    },
}

impl Realloc {
    /// The offset the caller holds afterwards, `None` for a null pointer.
    pub fn offset(&self) -> Option<u64> {
        match *self {
            Realloc::Null | Realloc::Freed => None,
            Realloc::Allocated { offset } | Realloc::InPlace { offset } => Some(offset),
            Realloc::Moved { to, .. } => Some(to),
        }
    }
}

/// A deterministic allocator of offsets in one PE's symmetric heap.
///
/// `S` is the metadata storage: anything that lends a `[Slot]` mutably (`&mut [Slot]`,
/// `Vec<Slot>`, `Box<[Slot]>`, `[Slot; N]`). See the [module documentation](super) for the
/// semantics, the determinism contract and the complexity of each operation.
pub struct SymHeap<S> {
    storage: S,
    heap_size: u64,
    capacity: Idx,
    live_root: Idx,
    free_root: Idx,
    /// Top of the stack of released slots (linked through `next`).
    vacant: Idx,
    /// Slots at or above this index have not been used since the last reset.
    high_water: Idx,
    slots_in_use: Idx,
    live_blocks: Idx,
    free_blocks: Idx,
    bytes_in_use: u64,
}

/// Shows the figures of [`SymHeap::stats`], not the (possibly huge) storage.
impl<S: AsRef<[Slot]> + AsMut<[Slot]>> fmt::Debug for SymHeap<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymHeap")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Rounds `size` up to the granule; `None` on overflow.
#[inline]
fn round_to_granule(size: u64) -> Option<u64> {
    size.checked_add(GRANULE - 1).map(|v| v & !(GRANULE - 1))
}

/// Rounds `offset` up to `alignment` (a power of two); `None` on overflow.
#[inline]
fn align_up(offset: u64, alignment: u64) -> Option<u64> {
    offset
        .checked_add(alignment - 1)
        .map(|v| v & !(alignment - 1))
}

impl<S: AsRef<[Slot]> + AsMut<[Slot]>> SymHeap<S> {
    /// Creates an allocator for a heap of `heap_size` bytes (rounded down to a multiple of 16)
    /// with metadata in `storage`. The initial contents of `storage` do not matter and only
    /// its first slot is written here, so creation is O(1) whatever the capacity.
    ///
    /// All PEs must create their heaps with the same `heap_size` and the same capacity: the
    /// capacity decides when [`AllocError::MetadataFull`] is reported and when a shrinking
    /// `realloc` keeps its tail as slack, and both change later offsets.
    ///
    /// Errors: [`InitError::HeapTooSmall`] below 16 bytes, [`InitError::NoStorage`] for an
    /// empty storage, [`InitError::StorageTooLarge`] above [`MAX_SLOTS`] slots.
    pub fn new(heap_size: u64, storage: S) -> Result<Self, InitError> {
        let usable = heap_size & !(GRANULE - 1);
        if usable == 0 {
            return Err(InitError::HeapTooSmall { heap_size });
        }
        let len = storage.as_ref().len();
        if len == 0 {
            return Err(InitError::NoStorage);
        }
        let capacity = Idx::try_from(len)
            .ok()
            .filter(|&c| c as usize <= MAX_SLOTS)
            .ok_or(InitError::StorageTooLarge { len })?;
        let mut heap = SymHeap {
            storage,
            heap_size: usable,
            capacity,
            live_root: NIL,
            free_root: NIL,
            vacant: NIL,
            high_water: 0,
            slots_in_use: 0,
            live_blocks: 0,
            free_blocks: 0,
            bytes_in_use: 0,
        };
        heap.reset();
        Ok(heap)
    }

    /// Forgets every block: the whole heap becomes one free block again. O(1).
    pub fn reset(&mut self) {
        self.storage.as_mut()[FIRST as usize] = Slot {
            offset: 0,
            size: self.heap_size,
            state: SlotState::Free,
            ..Slot::EMPTY
        };
        self.high_water = 1;
        self.vacant = NIL;
        self.slots_in_use = 1;
        self.live_root = NIL;
        self.free_root = NIL;
        self.live_blocks = 0;
        self.free_blocks = 1;
        self.bytes_in_use = 0;
        self.free_insert(FIRST);
    }

    /// The number of bytes managed (the size given to [`new`](Self::new), rounded down to a
    /// multiple of 16).
    pub fn heap_size(&self) -> u64 {
        self.heap_size
    }

    /// The number of metadata slots in the storage.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Gives the storage back.
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// `shmem_malloc`: a block of at least `size` bytes aligned to 16, or `Ok(None)` for
    /// `size == 0` (no action; a null pointer).
    ///
    /// The smallest free block that fits is used (lowest offset among equal sizes), from its
    /// low end. Errors: [`AllocError::OutOfMemory`], [`AllocError::MetadataFull`].
    pub fn malloc(&mut self, size: u64) -> Result<Option<u64>, AllocError> {
        if size == 0 {
            return Ok(None);
        }
        self.alloc_default(size, DEFAULT_ALIGNMENT).map(Some)
    }

    /// `shmem_calloc`: room for `count` elements of `size` bytes, or `Ok(None)` when either
    /// is 0.
    ///
    /// **The block is not zeroed.** The allocator never writes heap memory (other processes
    /// write it, and the core has no `unsafe`), so the caller must zero `count * size` bytes
    /// at the returned offset before handing the block to the user.
    ///
    /// Errors: [`AllocError::SizeOverflow`] if `count * size` overflows 64 bits, otherwise as
    /// [`malloc`](Self::malloc).
    pub fn calloc(&mut self, count: u64, size: u64) -> Result<Option<u64>, AllocError> {
        if count == 0 || size == 0 {
            return Ok(None);
        }
        let total = count
            .checked_mul(size)
            .ok_or(AllocError::SizeOverflow { count, size })?;
        self.alloc_default(total, DEFAULT_ALIGNMENT).map(Some)
    }

    /// `shmem_align`: a block of at least `size` bytes whose offset is a multiple of
    /// `alignment`, or `Ok(None)` for `size == 0`.
    ///
    /// The offset is aligned relative to the heap start, so the heap's base address must be
    /// aligned at least as strictly for the pointer to be (a page-aligned mapping covers
    /// alignments up to the page size). Leading padding stays a free block.
    ///
    /// Errors: [`AllocError::InvalidAlignment`] unless `alignment` is a power of two >= 8
    /// (checked first, also for `size == 0`); [`AllocError::OutOfMemory`];
    /// [`AllocError::MetadataFull`].
    pub fn align(&mut self, alignment: u64, size: u64) -> Result<Option<u64>, AllocError> {
        if !alignment.is_power_of_two() || alignment < 8 {
            return Err(AllocError::InvalidAlignment { alignment });
        }
        if size == 0 {
            return Ok(None);
        }
        if alignment <= GRANULE {
            return self.alloc_default(size, alignment).map(Some);
        }
        let oom = |heap: &Self| AllocError::OutOfMemory {
            requested: size,
            alignment,
            largest_free: heap.largest_free(),
        };
        let n = round_to_granule(size).ok_or_else(|| oom(self))?;
        // A block of n + alignment - 16 bytes holds an aligned n-byte block wherever it starts.
        let sure_fit = n.checked_add(alignment - GRANULE);
        if let Some(need) = sure_fit {
            let b = tree::lower_bound(
                self.storage.as_ref(),
                self.free_root,
                (need, 0),
                Order::SizeOffset,
            );
            if b != NIL {
                let off = self.slot(b).offset;
                let start = align_up(off, alignment).ok_or_else(|| oom(self))?;
                return self.carve(b, start - off, n).map(Some);
            }
        }
        // No block is certain to fit: try the smaller ones whose start happens to suit.
        let mut b = tree::lower_bound(
            self.storage.as_ref(),
            self.free_root,
            (n, 0),
            Order::SizeOffset,
        );
        while b != NIL {
            let Slot {
                offset,
                size: bsize,
                ..
            } = *self.slot(b);
            let fitting_start = align_up(offset, alignment).filter(|start| {
                start
                    .checked_add(n)
                    .is_some_and(|end| end <= offset + bsize)
            });
            if let Some(start) = fitting_start {
                return self.carve(b, start - offset, n).map(Some);
            }
            b = tree::lower_bound(
                self.storage.as_ref(),
                self.free_root,
                (bsize, offset + 1),
                Order::SizeOffset,
            );
        }
        Err(oom(self))
    }

    /// `shmem_realloc`.
    ///
    /// * `realloc(None, 0)` is [`Realloc::Null`]; `realloc(None, n)` is `malloc(n)`
    ///   ([`Realloc::Allocated`]).
    /// * `realloc(Some(off), 0)` frees the block ([`Realloc::Freed`]).
    /// * Otherwise the block shrinks in place, grows in place into the free block right after
    ///   it, or moves to a new 16-aligned block ([`Realloc::Moved`]); an alignment obtained
    ///   from [`align`](Self::align) is not kept by a move, as the specification allows.
    ///
    /// A move frees the old block in the allocator's books at once, but the allocator never
    /// writes memory, so the old bytes stay intact: the caller copies `copy_len` bytes from
    /// `from` to `to` before its next call on this allocator (which may hand the old range
    /// out again). The new block never overlaps the old one.
    ///
    /// A shrink never fails: when there is no metadata slot for the freed tail and no free
    /// neighbour to give it to, the block keeps its size.
    ///
    /// Errors (the block is then unchanged): [`AllocError::UnknownBlock`] if `block` is not
    /// the start of a live block, [`AllocError::OutOfMemory`], [`AllocError::MetadataFull`].
    pub fn realloc(&mut self, block: Option<u64>, size: u64) -> Result<Realloc, AllocError> {
        let Some(offset) = block else {
            return Ok(match self.malloc(size)? {
                Some(offset) => Realloc::Allocated { offset },
                None => Realloc::Null,
            });
        };
        let u = self.find_live(offset)?;
        if size == 0 {
            self.release_live(u);
            return Ok(Realloc::Freed);
        }
        let n = round_to_granule(size).ok_or_else(|| self.oom(size, DEFAULT_ALIGNMENT))?;
        let old = self.slot(u).size;
        if n <= old {
            self.shrink(u, n);
            return Ok(Realloc::InPlace { offset });
        }
        let extra = n - old;
        let next = self.slot(u).next;
        if next != NIL && self.slot(next).state == SlotState::Free && self.slot(next).size >= extra
        {
            self.free_remove(next);
            if self.slot(next).size == extra {
                self.unlink(next);
                self.release_slot(next);
                self.free_blocks -= 1;
            } else {
                let nx = self.slot_mut(next);
                nx.offset += extra;
                nx.size -= extra;
                self.free_insert(next);
            }
            self.slot_mut(u).size = n;
            self.bytes_in_use += extra;
            return Ok(Realloc::InPlace { offset });
        }
        // Move: allocate first (the old block stays live, so the two cannot overlap), then
        // free the old block. A failed allocation leaves everything as it was.
        let to = self.alloc_default(size, DEFAULT_ALIGNMENT)?;
        self.release_live(u);
        Ok(Realloc::Moved {
            from: offset,
            to,
            copy_len: old.min(size),
        })
    }

    /// `shmem_free`: releases the live block that starts at `offset` and merges it with free
    /// neighbours. (A null pointer is the caller's no-op and never reaches the allocator.)
    ///
    /// Errors: [`AllocError::UnknownBlock`] if `offset` is not the start of a live block
    /// (double free, interior pointer, never allocated); nothing changes then.
    pub fn free(&mut self, offset: u64) -> Result<(), AllocError> {
        let u = self.find_live(offset)?;
        self.release_live(u);
        Ok(())
    }

    /// The usable size of the live block at `offset` (its size rounded up to 16, or more after
    /// a shrink that could not give memory back). Errors: [`AllocError::UnknownBlock`].
    pub fn usable_size(&self, offset: u64) -> Result<u64, AllocError> {
        self.find_live(offset).map(|u| self.slot(u).size)
    }

    /// Size of the largest free block (0 when the heap is full). O(log n).
    pub fn largest_free(&self) -> u64 {
        match tree::last(self.storage.as_ref(), self.free_root) {
            NIL => 0,
            b => self.slot(b).size,
        }
    }

    /// Current figures. O(log n).
    pub fn stats(&self) -> HeapStats {
        HeapStats {
            heap_size: self.heap_size,
            bytes_in_use: self.bytes_in_use,
            bytes_free: self.heap_size - self.bytes_in_use,
            largest_free: self.largest_free(),
            live_blocks: self.live_blocks as usize,
            free_blocks: self.free_blocks as usize,
            slots_in_use: self.slots_in_use as usize,
            slot_capacity: self.capacity as usize,
        }
    }

    /// All blocks, free and live, in address order. O(1) per block.
    pub fn blocks(&self) -> Blocks<'_> {
        Blocks {
            slots: self.storage.as_ref(),
            next: FIRST,
        }
    }

    /// Checks every internal invariant (blocks tile the heap, no two free blocks adjacent,
    /// both trees ordered, balanced and holding exactly the free and the live blocks,
    /// counters right, slot bookkeeping consistent). O(n log n); a debugging and testing aid.
    /// Returns a description of the first violation found.
    pub fn verify(&self) -> Result<(), &'static str> {
        let s = self.storage.as_ref();
        let (mut live, mut free, mut in_use) = (0usize, 0usize, 0u64);
        let mut expected_offset = 0u64;
        let (mut prev, mut cur) = (NIL, FIRST);
        let mut prev_free = false;
        while cur != NIL {
            if live + free >= self.slots_in_use as usize {
                return Err("address list is longer than the slots in use (cycle?)");
            }
            if cur >= self.high_water {
                return Err("address list reaches a slot above the high-water mark");
            }
            let b = &s[cur as usize];
            if b.prev != prev {
                return Err("address list back link is wrong");
            }
            if b.offset != expected_offset {
                return Err("blocks do not tile the heap (gap or overlap)");
            }
            if b.size == 0 || b.size % GRANULE != 0 {
                return Err("block size is zero or not a multiple of 16");
            }
            expected_offset = b.offset.checked_add(b.size).ok_or("block end overflows")?;
            match b.state {
                SlotState::Live => {
                    live += 1;
                    in_use += b.size;
                    prev_free = false;
                    if tree::find(s, self.live_root, (b.offset, 0), Order::Offset) != cur {
                        return Err("live block missing from the live tree");
                    }
                }
                SlotState::Free => {
                    if prev_free {
                        return Err("two adjacent free blocks were not merged");
                    }
                    free += 1;
                    prev_free = true;
                    let k = (b.size, b.offset);
                    if tree::find(s, self.free_root, k, Order::SizeOffset) != cur {
                        return Err("free block missing from the free tree");
                    }
                }
                SlotState::Vacant => return Err("address list reaches a vacant slot"),
            }
            prev = cur;
            cur = b.next;
        }
        if expected_offset != self.heap_size {
            return Err("blocks do not end at the heap size");
        }
        if live != self.live_blocks as usize
            || free != self.free_blocks as usize
            || in_use != self.bytes_in_use
            || live + free != self.slots_in_use as usize
        {
            return Err("block counters disagree with the address list");
        }
        let (_, live_nodes) = tree::check(s, self.live_root, Order::Offset, None, None)?;
        let (_, free_nodes) = tree::check(s, self.free_root, Order::SizeOffset, None, None)?;
        if live_nodes != live || free_nodes != free {
            return Err("a tree holds blocks that are not in the address list");
        }
        let mut vacant = 0usize;
        let mut v = self.vacant;
        while v != NIL {
            if v >= self.high_water || s[v as usize].state != SlotState::Vacant {
                return Err("vacant stack holds a slot in use");
            }
            vacant += 1;
            if vacant > self.high_water as usize {
                return Err("vacant stack has a cycle");
            }
            v = s[v as usize].next;
        }
        if vacant + self.slots_in_use as usize != self.high_water as usize {
            return Err("slot bookkeeping lost a slot");
        }
        Ok(())
    }

    // ----- internals -------------------------------------------------------------------

    #[inline]
    fn slot(&self, i: Idx) -> &Slot {
        &self.storage.as_ref()[i as usize]
    }

    #[inline]
    fn slot_mut(&mut self, i: Idx) -> &mut Slot {
        &mut self.storage.as_mut()[i as usize]
    }

    fn oom(&self, requested: u64, alignment: u64) -> AllocError {
        AllocError::OutOfMemory {
            requested,
            alignment,
            largest_free: self.largest_free(),
        }
    }

    /// Best-fit allocation of `size` (> 0) bytes at the default alignment; `alignment` is
    /// only reported in errors.
    fn alloc_default(&mut self, size: u64, alignment: u64) -> Result<u64, AllocError> {
        let n = round_to_granule(size).ok_or_else(|| self.oom(size, alignment))?;
        let b = tree::lower_bound(
            self.storage.as_ref(),
            self.free_root,
            (n, 0),
            Order::SizeOffset,
        );
        if b == NIL {
            return Err(self.oom(size, alignment));
        }
        self.carve(b, 0, n)
    }

    /// Makes `[off + pad, off + pad + n)` of free block `b` = `[off, off + size)` live; the
    /// padding before and the tail after stay free. `pad` and `n` are multiples of 16 and
    /// `pad + n <= size`. Returns the live block's offset. Checks for the metadata slots it
    /// needs before changing anything.
    fn carve(&mut self, b: Idx, pad: u64, n: u64) -> Result<u64, AllocError> {
        let Slot { offset, size, .. } = *self.slot(b);
        debug_assert!(pad + n <= size && pad % GRANULE == 0 && n % GRANULE == 0);
        let tail = size - pad - n;
        let needed = Idx::from(pad > 0) + Idx::from(tail > 0);
        if self.capacity - self.slots_in_use < needed {
            return Err(AllocError::MetadataFull {
                capacity: self.capacity as usize,
            });
        }
        self.free_remove(b);
        let u = if pad > 0 {
            // `b` keeps the padding (and its place in the address list); `u` follows it.
            let u = self.take_slot();
            self.link_after(b, u);
            self.slot_mut(b).size = pad;
            self.free_insert(b);
            u
        } else {
            self.free_blocks -= 1;
            b
        };
        let start = offset + pad;
        let block = self.slot_mut(u);
        block.offset = start;
        block.size = n;
        block.state = SlotState::Live;
        self.live_insert(u);
        self.live_blocks += 1;
        self.bytes_in_use += n;
        if tail > 0 {
            let t = self.take_slot();
            self.link_after(u, t);
            let rest = self.slot_mut(t);
            rest.offset = start + n;
            rest.size = tail;
            rest.state = SlotState::Free;
            self.free_insert(t);
            self.free_blocks += 1;
        }
        Ok(start)
    }

    /// Shrinks live block `u` to `n` bytes (`n <= size`), giving the tail to the free block
    /// after it, or to a new free block, or keeping it as slack when no slot is left.
    fn shrink(&mut self, u: Idx, n: u64) {
        let Slot {
            offset, size, next, ..
        } = *self.slot(u);
        let rest = size - n;
        if rest == 0 {
            return;
        }
        if next != NIL && self.slot(next).state == SlotState::Free {
            self.free_remove(next);
            let nx = self.slot_mut(next);
            nx.offset -= rest;
            nx.size += rest;
            self.free_insert(next);
        } else if self.slots_in_use < self.capacity {
            let t = self.take_slot();
            self.link_after(u, t);
            let tail = self.slot_mut(t);
            tail.offset = offset + n;
            tail.size = rest;
            tail.state = SlotState::Free;
            self.free_insert(t);
            self.free_blocks += 1;
        } else {
            return;
        }
        self.slot_mut(u).size = n;
        self.bytes_in_use -= rest;
    }

    /// Turns live block `u` into free memory, merging it with free neighbours.
    fn release_live(&mut self, u: Idx) {
        self.live_remove(u);
        self.live_blocks -= 1;
        self.bytes_in_use -= self.slot(u).size;
        let mut cur = u;
        let prev = self.slot(u).prev;
        if prev != NIL && self.slot(prev).state == SlotState::Free {
            self.free_remove(prev);
            self.slot_mut(prev).size += self.slot(u).size;
            self.unlink(u);
            self.release_slot(u);
            cur = prev;
        } else {
            self.slot_mut(u).state = SlotState::Free;
            self.free_blocks += 1;
        }
        let next = self.slot(cur).next;
        if next != NIL && self.slot(next).state == SlotState::Free {
            self.free_remove(next);
            self.slot_mut(cur).size += self.slot(next).size;
            self.unlink(next);
            self.release_slot(next);
            self.free_blocks -= 1;
        }
        self.free_insert(cur);
    }

    /// The slot of the live block starting at `offset`.
    fn find_live(&self, offset: u64) -> Result<Idx, AllocError> {
        let u = if offset % GRANULE != 0 || offset >= self.heap_size {
            NIL
        } else {
            tree::find(
                self.storage.as_ref(),
                self.live_root,
                (offset, 0),
                Order::Offset,
            )
        };
        if u == NIL {
            Err(AllocError::UnknownBlock { offset })
        } else {
            Ok(u)
        }
    }

    /// Takes an unused slot. The caller has checked that one exists
    /// (`slots_in_use < capacity`).
    fn take_slot(&mut self) -> Idx {
        let i = if self.vacant != NIL {
            let i = self.vacant;
            self.vacant = self.slot(i).next;
            i
        } else {
            let i = self.high_water;
            self.high_water += 1;
            i
        };
        debug_assert!(i < self.capacity);
        self.slots_in_use += 1;
        *self.slot_mut(i) = Slot::EMPTY;
        i
    }

    fn release_slot(&mut self, i: Idx) {
        let vacant = self.vacant;
        let s = self.slot_mut(i);
        s.state = SlotState::Vacant;
        s.next = vacant;
        self.vacant = i;
        self.slots_in_use -= 1;
    }

    /// Links unlinked slot `new` into the address list right after `at`.
    fn link_after(&mut self, at: Idx, new: Idx) {
        let next = self.slot(at).next;
        let n = self.slot_mut(new);
        n.prev = at;
        n.next = next;
        self.slot_mut(at).next = new;
        if next != NIL {
            self.slot_mut(next).prev = new;
        }
    }

    /// Removes slot `i` from the address list (never the first block).
    fn unlink(&mut self, i: Idx) {
        let Slot { prev, next, .. } = *self.slot(i);
        debug_assert!(prev != NIL, "the first block is never unlinked");
        self.slot_mut(prev).next = next;
        if next != NIL {
            self.slot_mut(next).prev = prev;
        }
    }

    fn free_insert(&mut self, i: Idx) {
        self.free_root = tree::insert(self.storage.as_mut(), self.free_root, i, Order::SizeOffset);
    }

    fn free_remove(&mut self, i: Idx) {
        self.free_root = tree::remove(self.storage.as_mut(), self.free_root, i, Order::SizeOffset);
    }

    fn live_insert(&mut self, i: Idx) {
        self.live_root = tree::insert(self.storage.as_mut(), self.live_root, i, Order::Offset);
    }

    fn live_remove(&mut self, i: Idx) {
        self.live_root = tree::remove(self.storage.as_mut(), self.live_root, i, Order::Offset);
    }
}
