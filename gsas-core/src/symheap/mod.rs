//! The symmetric heap allocator: deterministic OpenSHMEM `malloc`/`calloc`/`align`/
//! `realloc`/`free` over heap *offsets*.
//!
//! # What it is
//!
//! Every PE runs its own [`SymHeap`] over its own symmetric heap. The allocator is
//! deterministic: its results depend only on the heap size and the sequence of calls (no
//! randomness, no addresses, no time, no hash seeds), so when every PE makes the same calls in
//! the same order, as OpenSHMEM requires of these collectives, every PE gets the same offsets.
//! A symmetric address is therefore `base(pe) + offset`, and nothing is exchanged per
//! allocation. Every PE must use the same heap size and the same metadata capacity (the
//! capacity decides when [`AllocError::MetadataFull`] happens). Results do not depend on the
//! storage type, on what the storage held before, or on the target: all arithmetic is in
//! `u64`, so x86_64 and aarch64 PEs agree.
//!
//! # What it is not
//!
//! * It never reads or writes heap memory. It manages numbers in `[0, heap_size)`; block
//!   headers inside the heap would be overwritten by remote writes from buggy programs, and the
//!   core has no `unsafe`. Consequences for the caller: `calloc` does not zero (the caller
//!   zeroes the block), and a `realloc` that moves tells the caller what to copy.
//! * It is not the collective: the barriers around `shmem_malloc` and friends, and the check
//!   that all PEs passed the same arguments, belong to the layer above.
//! * It does not allocate metadata: the caller lends the storage (see below).
//!
//! # Thread-safety
//!
//! There is no internal locking: every mutating operation takes `&mut self`, so the compiler
//! makes the caller serialise (one owner, or a `spin::Mutex`/`std::sync::Mutex` around it).
//! The state has no interior mutability, so `&SymHeap` may be shared to read statistics;
//! `SymHeap<S>` is `Send`/`Sync` exactly when the storage `S` is.
//!
//! # Semantics (OpenSHMEM 1.5, `shmem_malloc.tex` and neighbours)
//!
//! * Size 0 (or `calloc` with a zero count or size) does nothing and returns `Ok(None)`: a null
//!   pointer, and no barrier in the layer above.
//! * Blocks are aligned to 16 bytes ([`DEFAULT_ALIGNMENT`]) and sizes are rounded up to 16.
//!   [`SymHeap::align`] takes any power of two >= 8; other alignments are an error.
//! * `realloc(None, n)` is `malloc(n)`; `realloc(Some(p), 0)` frees `p`; otherwise the block
//!   shrinks in place, grows in place into a free successor, or moves (see [`Realloc`]).
//!   A failed `realloc` leaves the block as it was.
//! * Freeing an offset that is not the start of a live block (double free, interior pointer,
//!   garbage) is [`AllocError::UnknownBlock`] and changes nothing.
//! * Freed blocks merge with free neighbours at once, so no two free blocks are adjacent.
//! * Exhaustion says which resource ran out: [`AllocError::OutOfMemory`] (with the largest
//!   free block) or [`AllocError::MetadataFull`].
//!
//! # Policy and complexity
//!
//! Best fit: the smallest free block that can hold the request, the lowest offset among
//! equal sizes, allocated from its low end. Unlike size-class allocators (TLSF, dlmalloc
//! bins), the search is exact: a request succeeds whenever some free block is large enough,
//! which matters for a collective heap that programs often fill to the last byte.
//!
//! With `n` blocks (free and live):
//!
//! | operation | cost |
//! |---|---|
//! | [`SymHeap::new`], [`SymHeap::reset`] | O(1), whatever the capacity |
//! | [`malloc`](SymHeap::malloc), [`calloc`](SymHeap::calloc), [`free`](SymHeap::free), [`realloc`](SymHeap::realloc) | O(log n) |
//! | [`align`](SymHeap::align) with alignment <= 16 | O(log n) |
//! | [`align`](SymHeap::align) with alignment `a` > 16 | O(log n) when a free block of at least `size + a - 16` bytes exists; otherwise O(k log n) over the `k` smaller free blocks of at least `size` bytes, looking for one whose start happens to suit |
//! | [`stats`](SymHeap::stats), [`largest_free`](SymHeap::largest_free), [`usable_size`](SymHeap::usable_size) | O(log n) |
//! | [`blocks`](SymHeap::blocks) | O(n) for the whole walk |
//! | [`verify`](SymHeap::verify) | O(n log n) |
//!
//! The indexes are AVL trees (height below 1.45 log2 n), and merging with neighbours is O(1)
//! through address-order links.
//!
//! # Metadata storage
//!
//! Each block, free or live, takes one [`Slot`] (40 bytes on 64-bit targets) of storage the
//! caller provides: `&mut [Slot]`, `Vec<Slot>`, `Box<[Slot]>` or an array `[Slot; N]`. `n` live
//! blocks need at most `2n + 1` slots. The storage's initial contents are ignored, and creation
//! writes only one slot. For large capacities build the storage on the heap, never as an array
//! on the stack:
//!
//! ```
//! use gsas_core::symheap::{Slot, SymHeap};
//!
//! // One million slots = 40 MB of metadata, allocated by the caller on the (process) heap.
//! let mut heap = SymHeap::new(512 << 20, vec![Slot::EMPTY; 1 << 20])?;
//! assert_eq!(heap.capacity(), 1 << 20);
//! # Ok::<(), gsas_core::symheap::InitError>(())
//! ```
//!
//! In `no_std` code with a small heap, an array works too:
//! `SymHeap::new(64 << 10, [Slot::EMPTY; 128])`.
//!
//! # Example
//!
//! ```
//! use gsas_core::symheap::{AllocError, Realloc, Slot, SymHeap};
//!
//! let mut slots = vec![Slot::EMPTY; 1024];
//! let mut heap = SymHeap::new(1 << 20, slots.as_mut_slice()).expect("valid heap and storage");
//!
//! let a = heap.malloc(100)?.expect("size > 0 gives a block");
//! let b = heap.align(4096, 10)?.expect("size > 0 gives a block");
//! assert_eq!((a, b), (0, 4096)); // the same on every PE that makes the same calls
//! assert_eq!(heap.malloc(0)?, None); // size 0: no block, no barrier
//!
//! // Growing `a` past `b`'s padding gap moves it; the caller copies the old contents.
//! match heap.realloc(Some(a), 8192)? {
//!     Realloc::Moved { from, to, copy_len } => {
//!         assert_eq!((from, to, copy_len), (0, 4112, 112));
//!         // shmem layer: copy `copy_len` bytes from base + from to base + to, now.
//!     }
//!     other => panic!("expected a move, got {other:?}"),
//! }
//!
//! assert_eq!(heap.free(a), Err(AllocError::UnknownBlock { offset: a })); // already moved
//! heap.free(b)?;
//! heap.free(4112)?;
//! assert_eq!(heap.stats().bytes_in_use, 0);
//! assert_eq!(heap.stats().largest_free, 1 << 20); // everything merged again
//! # Ok::<(), AllocError>(())
//! ```

mod error;
mod heap;
mod slot;
mod stats;
mod tree;

#[cfg(test)]
mod tests;

pub use error::{AllocError, InitError};
pub use heap::{DEFAULT_ALIGNMENT, GRANULE, MAX_SLOTS, Realloc, SymHeap};
pub use slot::Slot;
pub use stats::{BlockInfo, Blocks, HeapStats};
