//! One unit of allocator metadata: the [`Slot`] that describes one block of the heap.
//!
//! What it is: a plain `Copy` record (offset, size, links) that the caller stores in whatever
//! memory suits it (a `Vec`, a `Box<[Slot]>`, a static array) and lends to
//! [`SymHeap`](super::SymHeap). What it is not: anything the caller reads or writes; its fields
//! are private and only the allocator interprets them. Thread-safety: plain data, `Send + Sync`.

/// Index of a slot in the caller's storage; [`NIL`] stands for "no slot".
pub(super) type Idx = u32;

/// The "no slot" index. Storage is therefore limited to `u32::MAX` slots.
pub(super) const NIL: Idx = Idx::MAX;

/// What a slot currently describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlotState {
    /// Describes nothing (never used since the last reset, or released by coalescing).
    Vacant,
    /// A free block, member of the free tree.
    Free,
    /// A live (allocated) block, member of the live tree.
    Live,
}

/// Allocator metadata for one block of the symmetric heap (free or live).
///
/// The caller provides storage for these and never looks inside. Every block of the heap,
/// free or live, occupies one slot, so `n` live blocks need at most `2n + 1` slots (a free gap
/// before, between and after them). 40 bytes each on 64-bit targets: one million slots take
/// 40 MB, which belongs on the heap (`vec![Slot::EMPTY; 1 << 20]`), not on the stack.
///
/// The initial contents of the storage do not matter: the allocator only reads slots it has
/// written itself.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    /// Offset of the block from the start of the heap, in bytes (a multiple of 16).
    pub(super) offset: u64,
    /// Size of the block in bytes (a non-zero multiple of 16).
    pub(super) size: u64,
    /// Block just below in address order, or [`NIL`]. Unused while vacant.
    pub(super) prev: Idx,
    /// Block just above in address order, or [`NIL`]. While vacant: next vacant slot.
    pub(super) next: Idx,
    /// Left child in the tree this block belongs to.
    pub(super) left: Idx,
    /// Right child in the tree this block belongs to.
    pub(super) right: Idx,
    /// Height of the subtree rooted here (a leaf has height 1).
    pub(super) height: u8,
    /// What the slot describes.
    pub(super) state: SlotState,
}

impl Slot {
    /// A slot that describes nothing; use it to fill storage (`[Slot::EMPTY; 64]`,
    /// `vec![Slot::EMPTY; n]`).
    pub const EMPTY: Slot = Slot {
        offset: 0,
        size: 0,
        prev: NIL,
        next: NIL,
        left: NIL,
        right: NIL,
        height: 0,
        state: SlotState::Vacant,
    };
}

impl Default for Slot {
    fn default() -> Self {
        Slot::EMPTY
    }
}
