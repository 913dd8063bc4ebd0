//! Property tests of the symmetric heap allocator over random operation sequences.
//!
//! Each case runs a random sequence of malloc/calloc/align/realloc/free calls (including
//! invalid frees) on a small heap whose metadata capacity is sometimes tiny, so that
//! out-of-memory and metadata-full paths are common. The allocator is checked against:
//!
//! * an independent interval model (live blocks inside the heap, aligned, disjoint, with the
//!   sizes the statistics claim), after every step;
//! * simulated heap contents: every block is filled with its own tag, a moved `realloc` is
//!   followed by the caller's copy, and contents must survive until the block is freed;
//! * a second instance over stale storage of another kind, which must answer identically;
//! * the allocator's own [`SymHeap::verify`].

use std::collections::BTreeMap;

use gsas_core::symheap::{AllocError, HeapStats, Realloc, Slot, SymHeap};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Op {
    Malloc(u64),
    Calloc(u64, u64),
    Align(u32, u64),
    ReallocNull(u64),
    /// Live block chosen by index modulo the number of live blocks.
    Realloc(usize, u64),
    Free(usize),
    /// Offset inside (or just past the start of) a live block, or anywhere.
    BadFree(usize, u64),
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1..=64u64,
        4 => 1..=2048u64,
        1 => 2048..=16384u64,
        1 => Just(0u64),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => size().prop_map(Op::Malloc),
        1 => (0..=8u64, 0..=512u64).prop_map(|(c, n)| Op::Calloc(c, n)),
        // Shifts 0..=12 give alignments 1..=4096, so invalid ones (1, 2, 4) are included.
        2 => (0..=12u32, size()).prop_map(|(a, n)| Op::Align(a, n)),
        1 => size().prop_map(Op::ReallocNull),
        4 => (any::<usize>(), size()).prop_map(|(i, n)| Op::Realloc(i, n)),
        6 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), 1..64u64).prop_map(|(i, d)| Op::BadFree(i, d)),
    ]
}

/// A live block in the model: where it ends (usable size), what was asked, and its tag.
#[derive(Clone, Copy, Debug)]
struct Live {
    end: u64,
    requested: u64,
    tag: u8,
}

struct Model {
    heap_size: u64,
    blocks: BTreeMap<u64, Live>,
    memory: Vec<u8>,
    next_tag: u8,
}

impl Model {
    fn new(heap_size: u64) -> Self {
        Model {
            heap_size,
            blocks: BTreeMap::new(),
            memory: vec![0; heap_size as usize],
            next_tag: 1,
        }
    }

    fn nth(&self, i: usize) -> Option<u64> {
        if self.blocks.is_empty() {
            None
        } else {
            self.blocks.keys().nth(i % self.blocks.len()).copied()
        }
    }

    /// Checks a new block against bounds, alignment and neighbours, then records it and
    /// writes its tag over the requested bytes.
    fn insert(&mut self, offset: u64, usable: u64, requested: u64, alignment: u64) {
        assert!(usable >= requested && usable % 16 == 0);
        assert_eq!(offset % alignment.max(16), 0, "alignment {alignment}");
        let end = offset + usable;
        assert!(
            end <= self.heap_size,
            "block {offset}+{usable} leaves the heap"
        );
        if let Some((&o, b)) = self.blocks.range(..=offset).next_back() {
            assert!(b.end <= offset, "{offset} overlaps block at {o}");
        }
        if let Some((&o, _)) = self.blocks.range(offset..).next() {
            assert!(end <= o, "{offset}+{usable} overlaps block at {o}");
        }
        let tag = self.next_tag;
        self.next_tag = self.next_tag.wrapping_add(1).max(1);
        self.memory[offset as usize..(offset + requested) as usize].fill(tag);
        self.blocks.insert(
            offset,
            Live {
                end,
                requested,
                tag,
            },
        );
    }

    /// Checks that the block's contents are intact, then forgets it.
    fn remove(&mut self, offset: u64) -> Live {
        let b = self.blocks.remove(&offset).expect("model knows the block");
        self.check_contents(offset, &b, b.requested);
        b
    }

    fn check_contents(&self, offset: u64, b: &Live, len: u64) {
        let bytes = &self.memory[offset as usize..(offset + len) as usize];
        assert!(
            bytes.iter().all(|&x| x == b.tag),
            "contents of block at {offset} were overwritten"
        );
    }

    fn bytes(&self) -> u64 {
        self.blocks.iter().map(|(o, b)| b.end - o).sum()
    }
}

/// One `realloc(offset, n)` of a live block on both heaps, checked against the model;
/// returns whether it was refused (and so changed nothing).
fn realloc_step<S: AsRef<[Slot]> + AsMut<[Slot]>, T: AsRef<[Slot]> + AsMut<[Slot]>>(
    heap: &mut SymHeap<S>,
    twin: &mut SymHeap<T>,
    model: &mut Model,
    step: usize,
    offset: u64,
    n: u64,
    before: &HeapStats,
) -> bool {
    let result = heap.realloc(Some(offset), n);
    assert_eq!(
        result,
        twin.realloc(Some(offset), n),
        "step {step}: realloc({offset}, {n})"
    );
    match result {
        Ok(Realloc::Freed) => {
            assert_eq!(n, 0);
            model.remove(offset);
            false
        }
        Ok(Realloc::InPlace { offset: o }) => {
            assert_eq!(o, offset);
            let old = model.remove(offset);
            let usable = heap.usable_size(offset).unwrap();
            // The kept prefix must still be intact where it is.
            let kept = old.requested.min(n);
            model.insert(offset, usable, 0, 16);
            let new = model.blocks.get_mut(&offset).unwrap();
            new.tag = old.tag;
            new.requested = kept;
            model.check_contents(offset, &model.blocks[&offset], kept);
            false
        }
        Ok(Realloc::Moved { from, to, copy_len }) => {
            assert_eq!(from, offset);
            let old_usable = model.blocks[&from].end - from;
            assert_eq!(copy_len, old_usable.min(n));
            // The caller's copy, done before any other allocator call.
            let (f, t) = (from as usize, to as usize);
            model.memory.copy_within(f..f + copy_len as usize, t);
            let old = model.remove(from);
            let usable = heap.usable_size(to).unwrap();
            model.insert(to, usable, 0, 16);
            let new = model.blocks.get_mut(&to).unwrap();
            new.tag = old.tag;
            new.requested = old.requested.min(n);
            model.check_contents(to, &model.blocks[&to], old.requested.min(n));
            false
        }
        Err(AllocError::OutOfMemory { largest_free, .. }) => {
            assert!(largest_free < n.div_ceil(16) * 16);
            true
        }
        Err(AllocError::MetadataFull { capacity }) => {
            assert!(before.slots_in_use + 1 > capacity, "step {step}");
            true
        }
        other => panic!("step {step}: unexpected {other:?} for realloc({offset}, {n})"),
    }
}

fn run<S: AsRef<[Slot]> + AsMut<[Slot]>, T: AsRef<[Slot]> + AsMut<[Slot]>>(
    heap: &mut SymHeap<S>,
    twin: &mut SymHeap<T>,
    model: &mut Model,
    ops: &[Op],
) {
    for (step, &op) in ops.iter().enumerate() {
        let before = heap.stats();
        let snapshot: Vec<_> = heap.blocks().collect();
        let refused = match op {
            Op::Malloc(n) | Op::Calloc(_, n) | Op::ReallocNull(n) | Op::Align(_, n) => {
                let (result, requested, alignment) = match op {
                    Op::Malloc(_) => (heap.malloc(n), n, 16),
                    Op::Calloc(c, _) => (heap.calloc(c, n), c * n, 16),
                    Op::Align(shift, _) => (heap.align(1 << shift, n), n, 1u64 << shift),
                    _ => (heap.realloc(None, n).map(|r| r.offset()), n, 16),
                };
                let twin_result = match op {
                    Op::Malloc(_) => twin.malloc(n),
                    Op::Calloc(c, _) => twin.calloc(c, n),
                    Op::Align(shift, _) => twin.align(1 << shift, n),
                    _ => twin.realloc(None, n).map(|r| r.offset()),
                };
                assert_eq!(result, twin_result, "step {step}: {op:?}");
                match result {
                    Ok(Some(offset)) => {
                        let usable = heap.usable_size(offset).unwrap();
                        model.insert(offset, usable, requested, alignment);
                        false
                    }
                    Ok(None) => {
                        assert_eq!(requested, 0, "step {step}: {op:?}");
                        true
                    }
                    Err(AllocError::InvalidAlignment { alignment: a }) => {
                        assert!(a < 8, "step {step}: valid alignment {a} refused");
                        true
                    }
                    Err(AllocError::OutOfMemory { largest_free, .. }) => {
                        assert_eq!(largest_free, before.largest_free);
                        if alignment <= 16 {
                            assert!(largest_free < requested.div_ceil(16) * 16);
                        }
                        true
                    }
                    Err(AllocError::MetadataFull { capacity }) => {
                        assert!(before.slots_in_use + 2 > capacity, "step {step}");
                        true
                    }
                    Err(e) => panic!("step {step}: unexpected {e:?} for {op:?}"),
                }
            }
            Op::Realloc(i, n) => {
                let Some(offset) = model.nth(i) else {
                    continue;
                };
                realloc_step(heap, twin, model, step, offset, n, &before)
            }
            Op::Free(i) => {
                let Some(offset) = model.nth(i) else {
                    continue;
                };
                assert_eq!(heap.free(offset), Ok(()));
                assert_eq!(twin.free(offset), Ok(()));
                model.remove(offset);
                assert_eq!(
                    heap.free(offset),
                    Err(AllocError::UnknownBlock { offset }),
                    "double free"
                );
                false
            }
            Op::BadFree(i, delta) => {
                let offset = model.nth(i).map_or(delta * 16, |o| o + delta);
                if model.blocks.contains_key(&offset) {
                    continue;
                }
                assert_eq!(heap.free(offset), Err(AllocError::UnknownBlock { offset }));
                assert_eq!(twin.free(offset), Err(AllocError::UnknownBlock { offset }));
                true
            }
        };
        let after = heap.stats();
        if refused {
            // Refused calls and no-ops change nothing.
            assert_eq!(
                heap.blocks().collect::<Vec<_>>(),
                snapshot,
                "step {step}: {op:?}"
            );
            assert_eq!(after, before, "step {step}: {op:?}");
        }
        heap.verify().unwrap();
        assert!(
            heap.blocks().eq(twin.blocks()),
            "step {step}: twin diverged"
        );
        assert_eq!(after.bytes_in_use, model.bytes(), "step {step}");
        assert_eq!(after.live_blocks, model.blocks.len(), "step {step}");
        assert_eq!(after.bytes_in_use + after.bytes_free, after.heap_size);
        assert!(after.slots_in_use <= after.slot_capacity);
        let live: Vec<(u64, u64)> = heap
            .blocks()
            .filter(|b| b.live)
            .map(|b| (b.offset, b.offset + b.size))
            .collect();
        let expected: Vec<(u64, u64)> = model.blocks.iter().map(|(&o, b)| (o, b.end)).collect();
        assert_eq!(live, expected, "step {step}");
    }
    // Every surviving block still holds its own contents.
    for (&o, b) in &model.blocks {
        model.check_contents(o, b, b.requested);
    }
    // Freeing everything restores one free block.
    let offsets: Vec<u64> = model.blocks.keys().copied().collect();
    for o in offsets {
        heap.free(o).unwrap();
    }
    heap.verify().unwrap();
    assert_eq!(heap.blocks().count(), 1);
    assert_eq!(heap.stats().largest_free, heap.heap_size());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_sequences_keep_every_invariant(
        heap_kib in prop_oneof![Just(4u64), Just(16), Just(64)],
        capacity in prop_oneof![Just(3usize), Just(8), Just(32), Just(4096)],
        stale_seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..160),
    ) {
        let heap_size = heap_kib * 1024;
        let mut heap = SymHeap::new(heap_size, vec![Slot::EMPTY; capacity]).unwrap();
        // The twin's storage is an array full of stale metadata from an unrelated heap.
        let mut stale = SymHeap::new(1 << 20, [Slot::EMPTY; 4096]).unwrap();
        let mut x = stale_seed | 1;
        for _ in 0..64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let _ = stale.malloc(x % 4000);
        }
        let mut storage = stale.into_storage();
        let mut twin = SymHeap::new(heap_size, &mut storage[..capacity]).unwrap();
        let mut model = Model::new(heap.heap_size());
        run(&mut heap, &mut twin, &mut model, &ops);
    }
}
