//! Determinism and safety of the symmetric heap allocator under a long random workload.
//!
//! Two instances, standing for two PEs, get the same seeded sequence of 100 000 operations
//! (malloc, calloc, align, realloc, free and invalid frees; sizes 1 B to 1 MiB; a 512 MiB
//! heap). Their storage differs in kind and capacity and the second starts full of stale
//! slots, yet every result must be identical. After every step the live blocks are checked
//! against an independent reference interval set: inside the heap, aligned as requested, and
//! pairwise disjoint. Peak fragmentation is printed with `eprintln!`.

use std::collections::BTreeMap;

use gsas_core::symheap::{AllocError, HeapStats, Realloc, Slot, SymHeap};

const HEAP: u64 = 512 << 20;
const STEPS: usize = 100_000;

/// splitmix64: a small, seeded, platform-independent generator.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Log-uniform size in 1 B ..= 1 MiB.
    fn size(&mut self) -> u64 {
        let e = self.below(21);
        1 + self.below(1 << e)
    }

    fn percent(&mut self) -> u64 {
        self.below(100)
    }
}

/// One operation, with live blocks named by their index in the reference's `order` list.
#[derive(Clone, Copy, Debug)]
enum Op {
    Malloc(u64),
    Calloc(u64, u64),
    Align(u64, u64),
    ReallocNull(u64),
    Realloc(usize, u64),
    Free(usize),
    /// Free of an offset that is not a live block start: an interior offset of a live block
    /// (`Some(index)`), or the last freed offset while it is not live again (double free).
    BadFree(Option<usize>),
}

/// What the two instances answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Alloc(Result<Option<u64>, AllocError>),
    Realloc(Result<Realloc, AllocError>),
    Free(Result<(), AllocError>),
}

/// A live block as the reference sees it.
#[derive(Clone, Copy, Debug)]
struct Live {
    end: u64,
    alignment: u64,
    requested: u64,
}

/// Independent model: the live intervals, and an index list for random picks.
#[derive(Default)]
struct Reference {
    blocks: BTreeMap<u64, Live>,
    order: Vec<u64>,
    bytes: u64,
    last_freed: Option<u64>,
}

impl Reference {
    /// Records a new block after checking it against the heap bounds, its alignment and
    /// both neighbours.
    fn insert(&mut self, offset: u64, usable: u64, requested: u64, alignment: u64, step: usize) {
        assert!(
            usable >= requested,
            "step {step}: usable {usable} < requested {requested}"
        );
        let end = offset.checked_add(usable).expect("end overflows");
        assert!(
            end <= HEAP,
            "step {step}: block {offset:#x}+{usable} leaves the heap"
        );
        assert_eq!(
            offset % alignment,
            0,
            "step {step}: {offset:#x} not aligned to {alignment}"
        );
        if let Some((&o, b)) = self.blocks.range(..=offset).next_back() {
            assert!(
                b.end <= offset,
                "step {step}: {offset:#x} overlaps block at {o:#x}"
            );
        }
        if let Some((&o, _)) = self.blocks.range(offset..).next() {
            assert!(
                end <= o,
                "step {step}: {offset:#x}+{usable} overlaps block at {o:#x}"
            );
        }
        self.blocks.insert(
            offset,
            Live {
                end,
                alignment,
                requested,
            },
        );
        self.order.push(offset);
        self.bytes += usable;
    }

    /// Forgets the block at index `i` of `order`; returns (offset, block).
    fn remove(&mut self, i: usize) -> (u64, Live) {
        let offset = self.order.swap_remove(i);
        let b = self
            .blocks
            .remove(&offset)
            .expect("reference knows the block");
        self.bytes -= b.end - offset;
        self.last_freed = Some(offset);
        (offset, b)
    }
}

fn pick_op(rng: &mut SplitMix64, reference: &Reference, filling: bool) -> Op {
    let live = reference.order.len() as u64;
    let allocate = live == 0 || rng.percent() < if filling { 80 } else { 30 };
    if allocate {
        match rng.percent() {
            0..45 => Op::Malloc(rng.size()),
            45..60 => {
                let elem = 1 << rng.below(5);
                Op::Calloc(rng.size().div_ceil(elem), elem)
            }
            60..80 => Op::Align(8 << rng.below(18), rng.size()),
            80..85 => Op::ReallocNull(rng.size()),
            _ if live > 0 => Op::Realloc(rng.below(live) as usize, rng.size()),
            _ => Op::Malloc(rng.size()),
        }
    } else {
        match rng.percent() {
            0..85 => Op::Free(rng.below(live) as usize),
            85..92 => Op::Realloc(rng.below(live) as usize, 0),
            _ if rng.percent() < 50 => Op::BadFree(Some(rng.below(live) as usize)),
            _ if reference
                .last_freed
                .is_some_and(|o| !reference.blocks.contains_key(&o)) =>
            {
                Op::BadFree(None)
            }
            _ => Op::BadFree(Some(rng.below(live) as usize)),
        }
    }
}

fn apply<S: AsRef<[Slot]> + AsMut<[Slot]>>(h: &mut SymHeap<S>, r: &Reference, op: Op) -> Outcome {
    match op {
        Op::Malloc(n) => Outcome::Alloc(h.malloc(n)),
        Op::Calloc(c, n) => Outcome::Alloc(h.calloc(c, n)),
        Op::Align(a, n) => Outcome::Alloc(h.align(a, n)),
        Op::ReallocNull(n) => Outcome::Realloc(h.realloc(None, n)),
        Op::Realloc(i, n) => Outcome::Realloc(h.realloc(Some(r.order[i]), n)),
        Op::Free(i) => Outcome::Free(h.free(r.order[i])),
        Op::BadFree(Some(i)) => {
            // An aligned interior offset when the block has one, else an unaligned one.
            let o = r.order[i];
            let inside = if r.blocks[&o].end - o > 16 { 16 } else { 8 };
            Outcome::Free(h.free(o + inside))
        }
        Op::BadFree(None) => Outcome::Free(h.free(r.last_freed.unwrap_or(HEAP + 16))),
    }
}

/// What the workload did: allocated, in place, moved, freed, out of memory, bad free; and
/// the heap utilisation when allocations failed (lowest, sum).
struct Tally {
    counts: [usize; 6],
    oom_use: (f64, f64),
}

/// Checks the outcome `out` of `op` at `step` (the heap's statistics were `before`) and
/// records it in `reference` and `tally`.
fn account(
    a: &SymHeap<Vec<Slot>>,
    reference: &mut Reference,
    op: Op,
    out: Outcome,
    before: HeapStats,
    step: usize,
    tally: &mut Tally,
) {
    match (op, out) {
        (_, Outcome::Alloc(Err(e)) | Outcome::Realloc(Err(e)) | Outcome::Free(Err(e))) => {
            assert_eq!(
                a.stats(),
                before,
                "step {step}: refused {op:?} changed the heap"
            );
            match (op, e) {
                (Op::BadFree(_), AllocError::UnknownBlock { .. }) => tally.counts[5] += 1,
                (_, AllocError::OutOfMemory { largest_free, .. }) => {
                    assert_eq!(largest_free, before.largest_free, "step {step}");
                    let wanted = match op {
                        Op::Malloc(n) | Op::ReallocNull(n) | Op::Realloc(_, n) => Some(n),
                        Op::Calloc(c, n) => Some(c * n),
                        _ => None,
                    };
                    // Exact best fit: it fails only if no free block has the rounded size.
                    if let Some(n) = wanted {
                        assert!(largest_free < n.div_ceil(16) * 16, "step {step}: {op:?}");
                    }
                    tally.counts[4] += 1;
                    let used = before.bytes_in_use as f64 / HEAP as f64;
                    tally.oom_use = (tally.oom_use.0.min(used), tally.oom_use.1 + used);
                }
                (op, e) => panic!("step {step}: unexpected error {e:?} for {op:?}"),
            }
        }
        (_, Outcome::Alloc(Ok(Some(offset)))) => {
            let (requested, alignment) = match op {
                Op::Malloc(n) => (n, 16),
                Op::Calloc(c, n) => (c * n, 16),
                Op::Align(al, n) => (n, al),
                _ => unreachable!("{op:?} is not an allocation"),
            };
            let usable = a.usable_size(offset).unwrap();
            reference.insert(offset, usable, requested, alignment, step);
            tally.counts[0] += 1;
        }
        (Op::ReallocNull(n), Outcome::Realloc(Ok(Realloc::Allocated { offset }))) => {
            let usable = a.usable_size(offset).unwrap();
            reference.insert(offset, usable, n, 16, step);
            tally.counts[0] += 1;
        }
        (Op::Realloc(i, 0), Outcome::Realloc(Ok(Realloc::Freed)))
        | (Op::Free(i), Outcome::Free(Ok(()))) => {
            let (offset, _) = reference.remove(i);
            assert_eq!(
                a.usable_size(offset),
                Err(AllocError::UnknownBlock { offset })
            );
            tally.counts[3] += 1;
        }
        (Op::Realloc(i, n), Outcome::Realloc(Ok(Realloc::InPlace { offset }))) => {
            assert_eq!(offset, reference.order[i], "step {step}");
            let (_, old) = reference.remove(i);
            let usable = a.usable_size(offset).unwrap();
            reference.insert(offset, usable, n, old.alignment, step);
            tally.counts[1] += 1;
        }
        (Op::Realloc(i, n), Outcome::Realloc(Ok(Realloc::Moved { from, to, copy_len }))) => {
            assert_eq!(from, reference.order[i], "step {step}");
            let (_, old) = reference.remove(i);
            assert_eq!(copy_len, (old.end - from).min(n), "step {step}");
            let usable = a.usable_size(to).unwrap();
            assert!(
                to + usable <= from || old.end <= to,
                "step {step}: move overlaps"
            );
            reference.insert(to, usable, n, 16, step);
            tally.counts[2] += 1;
        }
        (op, out) => panic!("step {step}: unexpected outcome {out:?} for {op:?}"),
    }
}

/// Both heaps verify, and the live blocks are the reference's, aligned and large enough.
fn check_against_reference(
    a: &SymHeap<Vec<Slot>>,
    b: &SymHeap<Box<[Slot]>>,
    reference: &Reference,
    step: usize,
) {
    a.verify().unwrap();
    b.verify().unwrap();
    let live: Vec<(u64, u64)> = a
        .blocks()
        .filter(|blk| blk.live)
        .map(|blk| (blk.offset, blk.offset + blk.size))
        .collect();
    let expected: Vec<(u64, u64)> = reference.blocks.iter().map(|(&o, l)| (o, l.end)).collect();
    assert_eq!(
        live, expected,
        "step {step}: live blocks differ from the reference"
    );
    for (&o, l) in &reference.blocks {
        assert_eq!(o % l.alignment, 0);
        assert!(l.end - o >= l.requested);
    }
}

#[test]
fn same_sequence_same_offsets_and_no_overlap() {
    // PE A: a Vec of 1 Mi slots. PE B: a smaller boxed slice, full of stale metadata. Real
    // PEs must use equal capacities; here neither ever fills, so the results must agree anyway.
    let mut a = SymHeap::new(HEAP, vec![Slot::EMPTY; 1 << 20]).unwrap();
    let mut stale = SymHeap::new(8 << 20, vec![Slot::EMPTY; 100_000]).unwrap();
    let junk: Vec<u64> = (1..40_000)
        .map(|n| stale.malloc(n % 97 + 1).unwrap().unwrap())
        .collect();
    for &o in junk.iter().step_by(3) {
        stale.free(o).unwrap();
    }
    let stale: Box<[Slot]> = stale.into_storage().into_boxed_slice();
    let mut b = SymHeap::new(HEAP, stale).unwrap();

    let mut rng = SplitMix64(0x5EED_0F6A_5A20_2024);
    let mut reference = Reference::default();
    let (mut peak_frag, mut peak_frag_10, mut frag_sum) = (0.0f64, 0.0f64, 0.0f64);
    let mut peak_live = 0usize;
    let mut tally = Tally {
        counts: [0; 6],
        oom_use: (1.0, 0.0),
    };

    for step in 0..STEPS {
        let filling = (step / 25_000) % 2 == 0;
        let op = pick_op(&mut rng, &reference, filling);
        let before = a.stats();
        let out_a = apply(&mut a, &reference, op);
        let out_b = apply(&mut b, &reference, op);
        assert_eq!(out_a, out_b, "step {step}: {op:?} diverged");

        account(&a, &mut reference, op, out_a, before, step, &mut tally);
        let st = a.stats();
        let st_b = b.stats();
        assert_eq!(
            HeapStats {
                slot_capacity: st.slot_capacity,
                ..st_b
            },
            st,
            "step {step}: statistics diverged (apart from the capacity)"
        );
        peak_live = peak_live.max(st.live_blocks);
        assert_eq!(st.bytes_in_use, reference.bytes, "step {step}");
        assert_eq!(st.live_blocks, reference.blocks.len(), "step {step}");
        assert_eq!(st.bytes_in_use + st.bytes_free, HEAP);
        let frag = st.fragmentation();
        peak_frag = peak_frag.max(frag);
        if st.bytes_free >= HEAP / 10 {
            peak_frag_10 = peak_frag_10.max(frag);
        }
        frag_sum += frag;

        if step % 1000 == 999 {
            check_against_reference(&a, &b, &reference, step);
        }
    }
    assert!(a.blocks().eq(b.blocks()), "final layouts differ");
    let [allocated, in_place, moved, freed, oom, bad] = tally.counts;
    let oom_use = tally.oom_use;
    eprintln!(
        "symheap determinism: {STEPS} steps, {allocated} allocations, {in_place} in-place and \
         {moved} moved reallocs, {freed} frees, {oom} out-of-memory, {bad} refused frees; \
         peak live blocks {}",
        peak_live
    );
    eprintln!(
        "symheap fragmentation (1 - largest_free/bytes_free): peak {:.4}, peak with >= 10% \
         of the heap free {:.4}, mean {:.4}",
        peak_frag,
        peak_frag_10,
        frag_sum / STEPS as f64
    );
    eprintln!(
        "symheap utilisation when an allocation failed: lowest {:.4}, mean {:.4}",
        oom_use.0,
        oom_use.1 / oom.max(1) as f64
    );
    // The workload must have exercised every path, or the test proves little.
    assert!(allocated > 10_000 && freed > 10_000 && oom > 200 && bad > 1000);
    assert!(in_place > 100 && moved > 100);
}
