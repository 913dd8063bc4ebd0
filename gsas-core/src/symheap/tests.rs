//! Unit tests of the symmetric heap allocator, one group per rule of the module docs.

use super::*;

const KIB: u64 = 1024;

/// A heap over `Vec` storage with `slots` slots.
fn heap(size: u64, slots: usize) -> SymHeap<Vec<Slot>> {
    SymHeap::new(size, vec![Slot::EMPTY; slots]).expect("valid heap")
}

/// The heap as (offset, size, live) triples in address order, after checking invariants.
fn layout<S: AsRef<[Slot]> + AsMut<[Slot]>>(h: &SymHeap<S>) -> Vec<(u64, u64, bool)> {
    h.verify().expect("invariants hold");
    h.blocks().map(|b| (b.offset, b.size, b.live)).collect()
}

fn must<T>(r: Result<Option<T>, AllocError>) -> T {
    r.expect("allocation succeeds")
        .expect("size > 0 gives a block")
}

// ----- creation ------------------------------------------------------------------------

#[test]
fn new_rejects_bad_configuration() {
    assert_eq!(
        SymHeap::new(0, vec![Slot::EMPTY; 4]).unwrap_err(),
        InitError::HeapTooSmall { heap_size: 0 }
    );
    assert_eq!(
        SymHeap::new(15, vec![Slot::EMPTY; 4]).unwrap_err(),
        InitError::HeapTooSmall { heap_size: 15 }
    );
    assert_eq!(
        SymHeap::new(4096, Vec::<Slot>::new()).unwrap_err(),
        InitError::NoStorage
    );
}

#[test]
fn new_rounds_heap_size_down_and_starts_with_one_free_block() {
    let h = heap(1000, 8);
    assert_eq!(h.heap_size(), 992);
    assert_eq!(h.capacity(), 8);
    assert_eq!(layout(&h), vec![(0, 992, false)]);
    let st = h.stats();
    assert_eq!(
        st,
        HeapStats {
            heap_size: 992,
            bytes_in_use: 0,
            bytes_free: 992,
            largest_free: 992,
            live_blocks: 0,
            free_blocks: 1,
            slots_in_use: 1,
            slot_capacity: 8,
        }
    );
    assert_eq!(st.fragmentation(), 0.0);
}

#[test]
fn storage_contents_are_ignored() {
    // Storage full of stale slots from an earlier heap gives the same results as fresh storage.
    let mut old = heap(64 * KIB, 64);
    for i in 1..20 {
        must(old.malloc(i * 100));
    }
    let stale = old.into_storage();
    let mut a = SymHeap::new(32 * KIB, stale).unwrap();
    let mut b = heap(32 * KIB, 64);
    for i in 1..20 {
        assert_eq!(a.malloc(i * 37), b.malloc(i * 37));
    }
    assert_eq!(layout(&a), layout(&b));
}

#[test]
fn works_with_every_storage_kind() {
    let mut slice_storage = [Slot::EMPTY; 16];
    let mut on_slice = SymHeap::new(4 * KIB, &mut slice_storage[..]).unwrap();
    let mut on_array = SymHeap::new(4 * KIB, [Slot::EMPTY; 16]).unwrap();
    let mut on_box = SymHeap::new(4 * KIB, vec![Slot::EMPTY; 16].into_boxed_slice()).unwrap();
    for size in [100, 7, 300, 16] {
        let x = on_slice.malloc(size);
        assert_eq!(x, on_array.malloc(size));
        assert_eq!(x, on_box.malloc(size));
    }
    assert_eq!(layout(&on_slice), layout(&on_array));
    assert_eq!(layout(&on_slice), layout(&on_box));
}

#[test]
fn reset_forgets_everything() {
    let mut h = heap(4 * KIB, 16);
    must(h.malloc(100));
    must(h.align(1024, 100));
    h.reset();
    assert_eq!(layout(&h), vec![(0, 4 * KIB, false)]);
    assert_eq!(h.stats().slots_in_use, 1);
    assert_eq!(must(h.malloc(16)), 0);
}

// ----- malloc / calloc -----------------------------------------------------------------

#[test]
fn size_zero_allocates_nothing() {
    let mut h = heap(4 * KIB, 16);
    assert_eq!(h.malloc(0), Ok(None));
    assert_eq!(h.calloc(0, 8), Ok(None));
    assert_eq!(h.calloc(8, 0), Ok(None));
    assert_eq!(h.calloc(0, u64::MAX), Ok(None));
    assert_eq!(h.align(64, 0), Ok(None));
    assert_eq!(layout(&h), vec![(0, 4 * KIB, false)]);
}

#[test]
fn malloc_aligns_to_16_and_rounds_sizes_up() {
    let mut h = heap(4 * KIB, 16);
    let a = must(h.malloc(1));
    let b = must(h.malloc(17));
    let c = must(h.malloc(16));
    assert_eq!((a, b, c), (0, 16, 48));
    assert_eq!(h.usable_size(a), Ok(16));
    assert_eq!(h.usable_size(b), Ok(32));
    assert_eq!(h.usable_size(c), Ok(16));
    assert_eq!(
        layout(&h),
        vec![
            (0, 16, true),
            (16, 32, true),
            (48, 16, true),
            (64, 4 * KIB - 64, false)
        ]
    );
}

#[test]
fn calloc_multiplies_and_reports_overflow() {
    let mut h = heap(4 * KIB, 16);
    let a = must(h.calloc(10, 10));
    assert_eq!(h.usable_size(a), Ok(112));
    assert_eq!(
        h.calloc(u64::MAX / 2, 3),
        Err(AllocError::SizeOverflow {
            count: u64::MAX / 2,
            size: 3
        })
    );
    assert_eq!(
        h.calloc(1 << 32, 1 << 32),
        Err(AllocError::SizeOverflow {
            count: 1 << 32,
            size: 1 << 32
        })
    );
    // A product that fits in 64 bits but not in the heap is out of memory, not overflow.
    assert!(matches!(
        h.calloc(1 << 20, 1 << 20),
        Err(AllocError::OutOfMemory {
            requested: 1_099_511_627_776,
            ..
        })
    ));
    assert_eq!(layout(&h).len(), 2);
}

#[test]
fn best_fit_prefers_smallest_block_then_lowest_offset() {
    let mut h = heap(64 * KIB, 64);
    // Free holes of 256, 64, 128 and 64 bytes separated by live guards.
    let mut holes = Vec::new();
    for size in [256, 64, 128, 64] {
        holes.push(must(h.malloc(size)));
        must(h.malloc(16));
    }
    for &o in &holes {
        h.free(o).unwrap();
    }
    let first_64 = holes[1];
    let second_64 = holes[3];
    assert_eq!(must(h.malloc(50)), first_64);
    assert_eq!(must(h.malloc(64)), second_64);
    assert_eq!(must(h.malloc(100)), holes[2]);
    assert_eq!(must(h.malloc(129)), holes[0]);
}

#[test]
fn exact_fit_uses_the_whole_heap() {
    let mut h = heap(KIB + 16, 4);
    assert_eq!(must(h.malloc(KIB + 16)), 0);
    assert_eq!(h.stats().bytes_free, 0);
    assert_eq!(h.stats().largest_free, 0);
    assert_eq!(
        h.malloc(1),
        Err(AllocError::OutOfMemory {
            requested: 1,
            alignment: 16,
            largest_free: 0
        })
    );
    // No size-class rounding: a request just below a free block's size always fits it.
    let mut h = heap((1 << 20) + 16 * KIB, 4);
    assert_eq!(must(h.malloc((1 << 20) + 8 * KIB)), 0);
}

#[test]
fn out_of_memory_reports_request_and_largest_free_block() {
    let mut h = heap(4 * KIB, 16);
    let a = must(h.malloc(KIB));
    must(h.malloc(KIB));
    h.free(a).unwrap();
    // Free: 1 KiB at 0 and 2 KiB at the end.
    assert_eq!(
        h.malloc(3 * KIB),
        Err(AllocError::OutOfMemory {
            requested: 3 * KIB,
            alignment: 16,
            largest_free: 2 * KIB
        })
    );
    assert_eq!(
        h.malloc(u64::MAX),
        Err(AllocError::OutOfMemory {
            requested: u64::MAX,
            alignment: 16,
            largest_free: 2 * KIB
        })
    );
    assert_eq!(
        layout(&h),
        vec![(0, KIB, false), (KIB, KIB, true), (2 * KIB, 2 * KIB, false)]
    );
}

#[test]
fn metadata_full_is_reported_and_exact_fits_still_work() {
    let mut h = heap(4 * KIB, 2);
    assert_eq!(must(h.malloc(16)), 0); // slot 0 live, slot 1 free tail
    assert_eq!(h.malloc(16), Err(AllocError::MetadataFull { capacity: 2 }));
    assert_eq!(
        h.align(1024, 16),
        Err(AllocError::MetadataFull { capacity: 2 })
    );
    // Taking the whole tail needs no new slot.
    assert_eq!(must(h.malloc(4 * KIB - 16)), 16);
    assert_eq!(h.stats().slots_in_use, 2);
    // Freeing never needs a slot.
    h.free(0).unwrap();
    h.free(16).unwrap();
    assert_eq!(layout(&h), vec![(0, 4 * KIB, false)]);
}

// ----- align ---------------------------------------------------------------------------

#[test]
fn align_rejects_alignments_that_are_not_powers_of_two_of_at_least_8() {
    let mut h = heap(4 * KIB, 16);
    for alignment in [0, 1, 2, 4, 12, 24, 48, 100, u64::MAX, (1 << 63) + 8] {
        assert_eq!(
            h.align(alignment, 64),
            Err(AllocError::InvalidAlignment { alignment })
        );
        assert_eq!(
            h.align(alignment, 0),
            Err(AllocError::InvalidAlignment { alignment })
        );
    }
    assert_eq!(layout(&h), vec![(0, 4 * KIB, false)]);
}

#[test]
fn align_gives_aligned_offsets_and_keeps_padding_free() {
    let mut h = heap(64 * KIB, 64);
    assert_eq!(must(h.align(8, 1)), 0); // 8 and 16 are the default alignment
    assert_eq!(must(h.align(16, 1)), 16);
    let a = must(h.align(4096, 100));
    assert_eq!(a, 4096);
    let b = must(h.align(1024, 16));
    assert_eq!(b % 1024, 0);
    // The 32..4096 padding is a free block that later small requests use.
    assert_eq!(b, 1024, "best fit takes the padding block");
    assert_eq!(must(h.malloc(16)), 32);
    for alignment in [32, 64, 128, 256, 512, 2048, 8192, 16384] {
        let o = must(h.align(alignment, 33));
        assert_eq!(o % alignment, 0, "alignment {alignment}");
    }
    layout(&h);
}

#[test]
fn align_finds_a_block_whose_start_is_already_aligned() {
    // The only free block is exactly 4096 bytes at offset 0: smaller than the 4096 + 4080
    // that guarantees a fit, but its start is aligned, so the request must succeed.
    let mut h = heap(8 * KIB, 16);
    let a = must(h.malloc(4 * KIB));
    must(h.malloc(4 * KIB));
    h.free(a).unwrap();
    assert_eq!(must(h.align(4096, 4096)), 0);
    assert_eq!(h.stats().bytes_free, 0);
}

#[test]
fn align_out_of_memory_reports_the_alignment() {
    let mut h = heap(8 * KIB - 16, 16);
    must(h.malloc(16));
    // 8160 bytes free at 16..8176: no 4096-aligned 4096-byte block fits.
    assert_eq!(
        h.align(4096, 4096),
        Err(AllocError::OutOfMemory {
            requested: 4096,
            alignment: 4096,
            largest_free: 8160
        })
    );
    assert_eq!(
        h.align(1 << 63, 16),
        Err(AllocError::OutOfMemory {
            requested: 16,
            alignment: 1 << 63,
            largest_free: 8160
        })
    );
    assert_eq!(layout(&h).len(), 2);
}

// ----- free and coalescing -------------------------------------------------------------

/// Four live 64-byte blocks A B C D at 0, 64, 128, 192 and a free tail from 256.
fn four_blocks() -> (SymHeap<Vec<Slot>>, [u64; 4]) {
    let mut h = heap(KIB, 16);
    let blocks = [0, 1, 2, 3].map(|_| must(h.malloc(64)));
    assert_eq!(blocks, [0, 64, 128, 192]);
    (h, blocks)
}

#[test]
fn free_with_no_free_neighbour_leaves_a_hole() {
    let (mut h, [_, b, _, _]) = four_blocks();
    h.free(b).unwrap();
    assert_eq!(
        layout(&h),
        vec![
            (0, 64, true),
            (64, 64, false),
            (128, 64, true),
            (192, 64, true),
            (256, 768, false)
        ]
    );
    assert_eq!(h.stats().free_blocks, 2);
}

#[test]
fn free_merges_with_free_predecessor() {
    let (mut h, [_, b, c, _]) = four_blocks();
    h.free(b).unwrap();
    h.free(c).unwrap();
    assert_eq!(
        layout(&h),
        vec![
            (0, 64, true),
            (64, 128, false),
            (192, 64, true),
            (256, 768, false)
        ]
    );
}

#[test]
fn free_merges_with_free_successor() {
    let (mut h, [_, b, c, _]) = four_blocks();
    h.free(c).unwrap();
    h.free(b).unwrap();
    assert_eq!(
        layout(&h),
        vec![
            (0, 64, true),
            (64, 128, false),
            (192, 64, true),
            (256, 768, false)
        ]
    );
}

#[test]
fn free_merges_with_both_neighbours() {
    let (mut h, [a, b, c, _]) = four_blocks();
    h.free(a).unwrap();
    h.free(c).unwrap();
    assert_eq!(h.stats().free_blocks, 3);
    h.free(b).unwrap();
    assert_eq!(
        layout(&h),
        vec![(0, 192, false), (192, 64, true), (256, 768, false)]
    );
    assert_eq!(h.stats().free_blocks, 2);
}

#[test]
fn free_at_heap_edges() {
    // First block (no predecessor) next to a live block.
    let (mut h, [a, _, _, d]) = four_blocks();
    h.free(a).unwrap();
    assert_eq!(layout(&h)[0], (0, 64, false));
    // Last live block merges with the free tail.
    h.free(d).unwrap();
    assert_eq!(*layout(&h).last().unwrap(), (192, 832, false));
    // A block that ends at the heap end (no successor) next to a live block.
    let mut h = heap(KIB, 16);
    must(h.malloc(KIB - 64));
    let last = must(h.malloc(64));
    assert_eq!(last, KIB - 64);
    h.free(last).unwrap();
    assert_eq!(layout(&h), vec![(0, KIB - 64, true), (KIB - 64, 64, false)]);
    // The only block (no neighbour at all).
    let mut h = heap(KIB, 16);
    let all = must(h.malloc(KIB));
    h.free(all).unwrap();
    assert_eq!(layout(&h), vec![(0, KIB, false)]);
}

#[test]
fn freeing_everything_in_any_order_restores_one_block() {
    for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
        let (mut h, blocks) = four_blocks();
        for i in order {
            h.free(blocks[i]).unwrap();
        }
        assert_eq!(layout(&h), vec![(0, KIB, false)], "order {order:?}");
        assert_eq!(h.stats().slots_in_use, 1);
    }
}

#[test]
fn bad_frees_are_errors_and_change_nothing() {
    let (mut h, [a, b, _, _]) = four_blocks();
    h.free(b).unwrap();
    let before = layout(&h);
    let stats = h.stats();
    for offset in [b, a + 16, a + 1, 256, 300, KIB, KIB + 64, u64::MAX] {
        assert_eq!(h.free(offset), Err(AllocError::UnknownBlock { offset }));
        assert_eq!(
            h.realloc(Some(offset), 32),
            Err(AllocError::UnknownBlock { offset })
        );
        assert_eq!(
            h.usable_size(offset),
            Err(AllocError::UnknownBlock { offset })
        );
    }
    assert_eq!(layout(&h), before);
    assert_eq!(h.stats(), stats);
}

// ----- realloc -------------------------------------------------------------------------

#[test]
fn realloc_null_and_zero_cases() {
    let mut h = heap(KIB, 16);
    assert_eq!(h.realloc(None, 0), Ok(Realloc::Null));
    let r = h.realloc(None, 40).unwrap();
    assert_eq!(r, Realloc::Allocated { offset: 0 });
    assert_eq!(h.usable_size(0), Ok(48));
    assert_eq!(h.realloc(Some(0), 0), Ok(Realloc::Freed));
    assert_eq!(layout(&h), vec![(0, KIB, false)]);
    assert_eq!(
        h.realloc(Some(0), 0),
        Err(AllocError::UnknownBlock { offset: 0 })
    );
}

#[test]
fn realloc_offset_helper() {
    assert_eq!(Realloc::Null.offset(), None);
    assert_eq!(Realloc::Freed.offset(), None);
    assert_eq!(Realloc::Allocated { offset: 32 }.offset(), Some(32));
    assert_eq!(Realloc::InPlace { offset: 48 }.offset(), Some(48));
    let moved = Realloc::Moved {
        from: 0,
        to: 64,
        copy_len: 16,
    };
    assert_eq!(moved.offset(), Some(64));
}

#[test]
fn realloc_same_rounded_size_stays() {
    let (mut h, [_, b, _, _]) = four_blocks();
    let before = layout(&h);
    assert_eq!(h.realloc(Some(b), 50), Ok(Realloc::InPlace { offset: b }));
    assert_eq!(h.realloc(Some(b), 64), Ok(Realloc::InPlace { offset: b }));
    assert_eq!(layout(&h), before);
}

#[test]
fn realloc_shrinks_into_a_new_free_block() {
    let (mut h, [_, b, _, _]) = four_blocks();
    assert_eq!(h.realloc(Some(b), 16), Ok(Realloc::InPlace { offset: b }));
    assert_eq!(
        layout(&h)[1..3],
        [(64, 16, true), (80, 48, false)],
        "tail became a free block"
    );
}

#[test]
fn realloc_shrink_gives_tail_to_free_successor() {
    let (mut h, [_, b, c, _]) = four_blocks();
    h.free(c).unwrap();
    assert_eq!(h.realloc(Some(b), 20), Ok(Realloc::InPlace { offset: b }));
    assert_eq!(layout(&h)[1..3], [(64, 32, true), (96, 96, false)]);
    assert_eq!(h.stats().free_blocks, 2);
}

#[test]
fn realloc_shrink_with_metadata_full_keeps_the_block() {
    let mut h = heap(KIB, 3);
    let a = must(h.malloc(64));
    let b = must(h.malloc(KIB - 64)); // exact fit: 2 slots, both live
    assert_eq!((a, b), (0, 64));
    assert_eq!(h.stats().slots_in_use, 2);
    // One slot left: a shrink of `a` can take it.
    assert_eq!(h.realloc(Some(a), 16), Ok(Realloc::InPlace { offset: a }));
    assert_eq!(h.stats().slots_in_use, 3);
    // No slot left and no free successor: the block keeps its size, and the call succeeds.
    assert_eq!(h.realloc(Some(b), 16), Ok(Realloc::InPlace { offset: b }));
    assert_eq!(h.usable_size(b), Ok(KIB - 64));
    layout(&h);
}

#[test]
fn realloc_grows_into_part_of_free_successor() {
    let (mut h, [_, b, c, _]) = four_blocks();
    h.free(c).unwrap();
    assert_eq!(h.realloc(Some(b), 96), Ok(Realloc::InPlace { offset: b }));
    assert_eq!(layout(&h)[1..3], [(64, 96, true), (160, 32, false)]);
}

#[test]
fn realloc_grows_into_all_of_free_successor() {
    let (mut h, [_, b, c, _]) = four_blocks();
    h.free(c).unwrap();
    assert_eq!(h.realloc(Some(b), 128), Ok(Realloc::InPlace { offset: b }));
    assert_eq!(layout(&h)[1..3], [(64, 128, true), (192, 64, true)]);
    assert_eq!(h.stats().free_blocks, 1);
    assert_eq!(
        h.stats().slots_in_use,
        4,
        "the successor's slot was released"
    );
}

#[test]
fn realloc_grows_last_block_into_the_tail() {
    let (mut h, [_, _, _, d]) = four_blocks();
    assert_eq!(h.realloc(Some(d), 800), Ok(Realloc::InPlace { offset: d }));
    assert_eq!(h.usable_size(d), Ok(800));
}

#[test]
fn realloc_moves_when_successor_is_live_or_too_small() {
    let (mut h, [_, b, c, _]) = four_blocks();
    // Successor live: move to the tail; the old block becomes free.
    let r = h.realloc(Some(b), 100).unwrap();
    assert_eq!(
        r,
        Realloc::Moved {
            from: b,
            to: 256,
            copy_len: 64
        }
    );
    assert_eq!(
        layout(&h),
        vec![
            (0, 64, true),
            (64, 64, false),
            (128, 64, true),
            (192, 64, true),
            (256, 112, true),
            (368, 656, false)
        ]
    );
    // Successor free but too small: move, and the old block merges with it.
    h.free(192).unwrap();
    let r = h.realloc(Some(c), 200).unwrap();
    assert_eq!(
        r,
        Realloc::Moved {
            from: c,
            to: 368,
            copy_len: 64
        }
    );
    assert_eq!(
        layout(&h)[1],
        (64, 192, false),
        "old block merged both ways"
    );
}

#[test]
fn realloc_move_copy_len_is_the_smaller_size() {
    let mut h = heap(4 * KIB, 16);
    let a = must(h.malloc(100)); // usable 112
    must(h.malloc(16));
    match h.realloc(Some(a), 1000).unwrap() {
        Realloc::Moved { copy_len, .. } => assert_eq!(copy_len, 112),
        other => panic!("expected a move, got {other:?}"),
    }
}

#[test]
fn realloc_move_never_overlaps_the_old_block() {
    // The only room for the grown block would include the old block itself (free space
    // on both sides); the move must fail rather than overlap.
    let mut h = heap(KIB, 16);
    let a = must(h.malloc(256));
    let b = must(h.malloc(256));
    must(h.malloc(KIB - 512));
    h.free(a).unwrap();
    assert_eq!(
        h.realloc(Some(b), 400),
        Err(AllocError::OutOfMemory {
            requested: 400,
            alignment: 16,
            largest_free: 256
        })
    );
    assert_eq!(h.usable_size(b), Ok(256), "block unchanged after failure");
    layout(&h);
}

#[test]
fn realloc_failure_leaves_the_block_unchanged() {
    let (mut h, [_, b, _, _]) = four_blocks();
    let before = layout(&h);
    assert_eq!(
        h.realloc(Some(b), 2 * KIB),
        Err(AllocError::OutOfMemory {
            requested: 2 * KIB,
            alignment: 16,
            largest_free: 768
        })
    );
    assert_eq!(
        h.realloc(Some(b), u64::MAX),
        Err(AllocError::OutOfMemory {
            requested: u64::MAX,
            alignment: 16,
            largest_free: 768
        })
    );
    assert_eq!(layout(&h), before);
    // Metadata full: the move needs a slot for the new block's tail.
    let mut h = heap(KIB, 4);
    let a = must(h.malloc(64));
    must(h.malloc(64)); // slots: a, guard, tail = 3
    must(h.malloc(64)); // 4 slots
    let before = layout(&h);
    assert_eq!(
        h.realloc(Some(a), 128),
        Err(AllocError::MetadataFull { capacity: 4 })
    );
    assert_eq!(layout(&h), before);
}

// ----- statistics, errors, traits ------------------------------------------------------

#[test]
fn stats_and_fragmentation() {
    let (mut h, [a, _, c, _]) = four_blocks();
    h.free(a).unwrap();
    h.free(c).unwrap();
    // Free: 64 at 0, 64 at 128, 768 at 256. Live: 64 at 64 and at 192.
    let st = h.stats();
    assert_eq!(st.bytes_in_use, 128);
    assert_eq!(st.bytes_free, 896);
    assert_eq!(st.largest_free, 768);
    assert_eq!(st.live_blocks, 2);
    assert_eq!(st.free_blocks, 3);
    assert_eq!(st.slots_in_use, 5);
    assert_eq!(st.slot_capacity, 16);
    assert!((st.fragmentation() - (1.0 - 768.0 / 896.0)).abs() < 1e-12);
    assert_eq!(h.largest_free(), 768);
    // A full heap has no fragmentation.
    let mut full = heap(KIB, 4);
    must(full.malloc(KIB));
    assert_eq!(full.stats().fragmentation(), 0.0);
}

#[test]
fn debug_shows_figures_not_the_storage() {
    let mut h = heap(4 * KIB, 100_000);
    must(h.malloc(100));
    let text = format!("{h:?}");
    assert!(text.starts_with("SymHeap"), "{text}");
    assert!(text.contains("live_blocks: 1"), "{text}");
    assert!(text.len() < 400, "Debug printed {} bytes", text.len());
}

#[test]
fn errors_display_their_numbers() {
    let cases: [(AllocError, &[&str]); 5] = [
        (
            AllocError::OutOfMemory {
                requested: 123,
                alignment: 64,
                largest_free: 45,
            },
            &["123", "64", "45", "exhausted"],
        ),
        (AllocError::MetadataFull { capacity: 9 }, &["9", "metadata"]),
        (
            AllocError::InvalidAlignment { alignment: 12 },
            &["12", "power of two"],
        ),
        (
            AllocError::SizeOverflow { count: 7, size: 11 },
            &["7", "11", "overflow"],
        ),
        (
            AllocError::UnknownBlock { offset: 0x40 },
            &["0x40", "double free"],
        ),
    ];
    for (e, words) in cases {
        let text = e.to_string();
        for w in words {
            assert!(text.contains(w), "{text:?} lacks {w:?}");
        }
    }
    assert!(
        InitError::HeapTooSmall { heap_size: 5 }
            .to_string()
            .contains('5')
    );
    assert!(InitError::NoStorage.to_string().contains("empty"));
    assert!(
        InitError::StorageTooLarge { len: 1 << 40 }
            .to_string()
            .contains("1099511627776")
    );
}

#[test]
fn heap_is_send_and_sync_when_storage_is() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SymHeap<Vec<Slot>>>();
    assert_send_sync::<SymHeap<&mut [Slot]>>();
    assert_send_sync::<SymHeap<[Slot; 4]>>();
}

// ----- scale ---------------------------------------------------------------------------

#[test]
fn a_million_slots_from_std_storage() {
    // 1 Mi slots (40 MB) on the process heap; 400 000 live blocks use 400 001 of them.
    let mut h = SymHeap::new(64 << 20, vec![Slot::EMPTY; 1 << 20]).unwrap();
    let blocks: Vec<u64> = (0..400_000).map(|_| must(h.malloc(16))).collect();
    assert_eq!(blocks[399_999], 399_999 * 16);
    assert_eq!(h.stats().slots_in_use, 400_001);
    // Free every other block: 200 000 holes that cannot merge.
    for &o in blocks.iter().step_by(2) {
        h.free(o).unwrap();
    }
    assert_eq!(h.stats().free_blocks, 200_001);
    // Best fit refills the holes in address order.
    assert_eq!(must(h.malloc(16)), 0);
    assert_eq!(must(h.malloc(1)), 32);
    h.verify().unwrap();
    for &o in blocks.iter().skip(1).step_by(2) {
        h.free(o).unwrap();
    }
    h.free(0).unwrap();
    h.free(32).unwrap();
    assert_eq!(layout(&h), vec![(0, 64 << 20, false)]);
}
