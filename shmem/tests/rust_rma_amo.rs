//! RMA and AMOs through the Rust API with several PEs: on one node (direct loads, stores and
//! CPU atomics) and on two nodes (through the atomic services over UDP on loopback).
//!
//! RMA: several element types and sizes from 1 byte to 4 MiB (beyond the UDP MTU), p/g,
//! strided iput/iget, block-strided ibput/ibget (OpenSHMEM 1.6), non-blocking puts and scoped non-blocking gets, contexts, zero-length
//! transfers, blocks of `alloc_vec_aligned` (alignments 1 to 4096). AMOs: every operation with exact expected results while all PEs hammer PE 0,
//! and the non-blocking fetching forms.

mod rust_common;

use rust_common::{ONE_NODE, TWO_NODES, pattern, run_and_check};
use shmem::{CtxOptions, ErrorKind, Shmem};

/// The child entry point (see `rust_common`): one PE of a job.
#[test]
fn child_pe() {
    rust_common::child_main(|| shmem::init().expect("init"), scenario);
}

/// Every scenario as a singleton job (one PE, no launcher).
#[test]
fn every_scenario_in_a_singleton_job() {
    rust_common::singleton(|| shmem::init().expect("init"), &["rma", "amo"], scenario);
}

fn scenario(shmem: &Shmem, name: &str) -> String {
    match name {
        "rma" => rma(shmem),
        "amo" => amo(shmem),
        other => panic!("unknown scenario {other}"),
    }
}

fn rma(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let sizes = bytes_of_every_size(shmem);
    typed_elements(shmem);
    p_and_g(shmem);
    strided(shmem);
    blocks(shmem);
    non_blocking(shmem);

    // A context of its own: puts complete with its quiet.
    let ctx = shmem.ctx_create(CtxOptions::PRIVATE).unwrap();
    let c = shmem.alloc_vec::<u8>(200_000).unwrap();
    ctx.put(&c, &pattern(me + 9, 200_000), right);
    ctx.quiet();
    shmem.barrier_all();
    assert!(c.to_vec() == pattern(left + 9, 200_000));
    drop(ctx);

    // Zero-length transfers do nothing.
    shmem.put(&c, &[], right);
    shmem.get(&c, &mut [], right);
    shmem.put_nbi(&c, &[], right);
    shmem.barrier_all();

    // Aligned blocks: alignments below the pointer size mean the pointer size; one that is
    // not a power of two is refused (on every PE alike: no collective happens).
    for al in [1usize, 2, 4, 8, 64, 4096] {
        let a = shmem.alloc_vec_aligned::<u8>(al, 24).unwrap();
        let want = al.max(size_of::<usize>());
        assert_eq!(a.as_ptr() as usize % want, 0, "alignment {al}");
        shmem.put(&a, &pattern(me + al, 24), right);
        shmem.barrier_all();
        assert!(a.to_vec() == pattern(left + al, 24), "alignment {al}");
        shmem.barrier_all();
    }
    for al in [0usize, 3, 24] {
        let e = shmem.alloc_vec_aligned::<u8>(al, 24).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "alignment {al}: {e}");
    }
    format!(
        "rma ok: {} sizes up to {} bytes, {} same-node PEs",
        sizes,
        4 << 20,
        shmem.team_shared().n_pes()
    )
}

/// Bytes of every size class, with an odd offset inside the object; returns how many
/// sizes.
fn bytes_of_every_size(shmem: &Shmem) -> usize {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    // Bytes of every size class, with an odd offset inside the object.
    let max = (4 << 20) + 64;
    let buf = shmem.alloc_vec::<u8>(max).unwrap();
    let mut got = vec![0u8; max];
    let sizes = [
        1usize,
        7,
        8,
        16,
        17,
        1000,
        4096,
        61_440,
        65_539,
        1 << 20,
        4 << 20,
    ];
    for &size in &sizes {
        let data = pattern(me, size);
        shmem.put(buf.slice(13..13 + size), &data, right);
        shmem.barrier_all();
        let mine = &mut got[..size];
        shmem.get(buf.slice(13..), mine, me);
        assert!(
            *mine == pattern(left, size)[..],
            "PE {me}: {size} bytes from PE {left}"
        );
        shmem.get(buf.slice(13..), mine, right);
        assert!(
            *mine == data[..],
            "PE {me}: {size} bytes read back from PE {right}"
        );
        shmem.barrier_all();
    }
    sizes.len()
}

/// Typed elements: i32, f64, u128 (the 128-bit block size).
fn typed_elements(shmem: &Shmem) {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    // Typed elements: i32, f64, u128 (the 128-bit block size), u16.
    let ints = shmem.alloc_vec::<i32>(1000).unwrap();
    let src: Vec<i32> = (0..1000).map(|i| i * (me as i32 + 1) - 500).collect();
    shmem.put(&ints, &src, right);
    let floats = shmem.alloc_vec::<f64>(100).unwrap();
    let fsrc: Vec<f64> = (0..100).map(|i| i as f64 / 3.0 + me as f64).collect();
    shmem.put(&floats, &fsrc, right);
    let wide = shmem.alloc_vec::<u128>(10).unwrap();
    let wsrc: Vec<u128> = (0..10).map(|i| (u128::MAX / 11) * i + me as u128).collect();
    shmem.put(&wide, &wsrc, right);
    shmem.barrier_all();
    let want: Vec<i32> = (0..1000).map(|i| i * (left as i32 + 1) - 500).collect();
    assert_eq!(ints.to_vec(), want);
    let fwant: Vec<f64> = (0..100).map(|i| i as f64 / 3.0 + left as f64).collect();
    assert_eq!(floats.to_vec(), fwant);
    let wwant: Vec<u128> = (0..10)
        .map(|i| (u128::MAX / 11) * i + left as u128)
        .collect();
    assert_eq!(wide.to_vec(), wwant);
    let mut back = vec![0i32; 1000];
    shmem.get(&ints, &mut back, right);
    assert_eq!(back, src);
    shmem.barrier_all();
}

/// `p` and `g` of several types.
fn p_and_g(shmem: &Shmem) {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    // p and g of several types.
    let shorts = shmem.alloc_vec::<i16>(n).unwrap();
    let words = shmem.alloc_vec::<u64>(n).unwrap();
    let singles = shmem.alloc_vec::<f32>(n).unwrap();
    for pe in 0..n {
        shmem.p(shorts.at(me), -(me as i16) - 1, pe);
        shmem.p(words.at(me), u64::MAX - me as u64, pe);
        shmem.p(singles.at(me), me as f32 + 0.5, pe);
    }
    shmem.barrier_all();
    for pe in 0..n {
        assert_eq!(shorts.read(pe), -(pe as i16) - 1);
        assert_eq!(shmem.g(words.at(pe), right), u64::MAX - pe as u64);
        assert_eq!(shmem.g(singles.at(pe), left), pe as f32 + 0.5);
    }
    shmem.barrier_all();
}

/// Strided transfers, also of 128-bit elements.
fn strided(shmem: &Shmem) {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    // Strided: every 3rd element of the source into every 2nd of the target, and back.
    let strided = shmem.alloc_vec::<u32>(64).unwrap();
    strided.fill(0);
    shmem.barrier_all();
    let s: Vec<u32> = (0..60).map(|i| (me as u32) << 16 | i).collect();
    shmem.iput(&strided, 2, &s, 3, 20, right);
    shmem.barrier_all();
    for i in 0..64 {
        let want = if i % 2 == 0 && i / 2 < 20 {
            (left as u32) << 16 | (3 * (i / 2)) as u32
        } else {
            0
        };
        assert_eq!(strided.read(i), want, "PE {me}: strided element {i}");
    }
    let mut gathered = vec![u32::MAX; 40];
    shmem.iget(&strided, 2, &mut gathered, 2, 20, right);
    for (i, &got) in gathered.iter().enumerate() {
        let want = if i % 2 == 0 {
            (me as u32) << 16 | (3 * (i / 2)) as u32
        } else {
            u32::MAX
        };
        assert_eq!(got, want, "PE {me}: iget element {i}");
    }
    let wide_strided = shmem.alloc_vec::<u128>(8).unwrap();
    shmem.iput(&wide_strided, 3, &[1u128 << 100, 2, 3], 1, 3, right);
    shmem.barrier_all();
    assert_eq!(wide_strided.read(0), 1u128 << 100);
    assert_eq!(wide_strided.read(3), 2);
    assert_eq!(wide_strided.read(6), 3);
    shmem.barrier_all();
}

/// The value PE `pe` holds at source index `i` in block case `case`: never 0 (the gaps'
/// marker), different for neighbouring PEs, cases and indices.
fn block_value<T: From<u16>>(pe: usize, case: usize, i: usize) -> T {
    T::from(1 + ((pe * 4099 + case * 31 + i * 7) % 65521) as u16)
}

/// One block-strided case of [`blocks`] for element type `T`: `ibput` to the right
/// neighbour and `ibget` from it, on `ctx`, checking every element and that the gaps
/// between blocks (and everything after the last block) stay 0.
#[allow(clippy::too_many_arguments)]
fn block_case<T: shmem::Symmetric + From<u16> + PartialEq + std::fmt::Debug>(
    shmem: &Shmem,
    ctx: &shmem::Ctx<'_>,
    case: usize,
    bsize: usize,
    nblocks: usize,
    dst: usize,
    sst: usize,
) {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let zero = T::from(0);
    let dlen = (nblocks - 1) * dst + bsize + dst;
    let slen = (nblocks - 1) * sst + bsize + 3;
    // Where source index `i` lands at the destination, if it is in a block.
    let lands = |i: usize| (i % sst < bsize).then(|| (i / sst) * dst + i % sst);
    let src: Vec<T> = (0..slen).map(|i| block_value(me, case, i)).collect();
    let target = shmem.alloc_vec::<T>(dlen).unwrap();
    let source = shmem.alloc_vec::<T>(slen).unwrap();
    target.fill(zero);
    shmem.put(&source, &src, me);
    shmem.barrier_all();
    ctx.ibput(&target, dst, &src, sst, bsize, nblocks, right);
    ctx.quiet();
    shmem.barrier_all();
    let mut want = vec![zero; dlen];
    for i in 0..(nblocks - 1) * sst + bsize {
        if let Some(d) = lands(i) {
            want[d] = block_value(left, case, i);
        }
    }
    let got = target.to_vec();
    for (d, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g, w,
            "PE {me}: ibput case {case} (bsize {bsize}, nblocks {nblocks}, dst {dst}, sst {sst}) \
             element {d}"
        );
    }
    // ibget: the source blocks of the right neighbour into this PE's strided buffer.
    let mut fetched = vec![zero; dlen];
    ctx.ibget(&source, sst, &mut fetched, dst, bsize, nblocks, right);
    for i in 0..(nblocks - 1) * sst + bsize {
        if let Some(d) = lands(i) {
            want[d] = block_value(right, case, i);
        }
    }
    for (d, (g, w)) in fetched.iter().zip(&want).enumerate() {
        assert_eq!(
            g, w,
            "PE {me}: ibget case {case} (bsize {bsize}, nblocks {nblocks}, dst {dst}, sst {sst}) \
             element {d}"
        );
    }
    shmem.barrier_all();
}

/// Block-strided transfers (`ibput`/`ibget`, OpenSHMEM 1.6) of 2- to 16-byte elements on
/// the default and a created context: blocks of 1 (the iput case), contiguous at the
/// destination (one request), contiguous on both sides, sparse (one request per block;
/// for ibget beyond the dense-read limit), and blocks larger than a UDP datagram; the
/// empty transfers do nothing.
fn blocks(shmem: &Shmem) {
    let me = shmem.my_pe();
    let ctx = shmem.ctx_create(CtxOptions::NONE).unwrap();
    for (c, on) in [&**shmem, &ctx].into_iter().enumerate() {
        let k = 10 * c;
        block_case::<u32>(shmem, on, k, 1, 7, 3, 2);
        block_case::<u32>(shmem, on, k + 1, 3, 5, 3, 4);
        block_case::<u32>(shmem, on, k + 2, 4, 6, 4, 4);
        block_case::<u16>(shmem, on, k + 3, 5, 4, 9, 6);
        block_case::<u64>(shmem, on, k + 4, 2, 9, 5, 2);
        block_case::<u64>(shmem, on, k + 5, 3, 4, 4000, 4000);
        block_case::<u128>(shmem, on, k + 6, 2, 3, 3, 5);
        block_case::<u32>(shmem, on, k + 7, 20_000, 3, 25_000, 21_000);
    }
    drop(ctx);
    // Nothing happens for zero blocks or an empty block (the strides are not looked at).
    let z = shmem.alloc_vec::<u32>(4).unwrap();
    z.fill(7);
    shmem.barrier_all();
    shmem.ibput(&z, 2, &[1, 2, 3, 4], 2, 2, 0, (me + 1) % shmem.n_pes());
    shmem.ibput(&z, 1, &[1, 2, 3, 4], 1, 0, 2, (me + 1) % shmem.n_pes());
    let mut none = [9u32; 4];
    shmem.ibget(&z, 1, &mut none, 1, 0, 3, (me + 1) % shmem.n_pes());
    shmem.barrier_all();
    assert_eq!(z.to_vec(), [7; 4]);
    assert_eq!(none, [9; 4]);
    shmem.barrier_all();
}

/// Non-blocking puts to every PE and a scope of gets.
fn non_blocking(shmem: &Shmem) {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let right = (me + 1) % n;
    // Non-blocking: puts to every PE, quiet; a scope of gets from every PE.
    let slots = shmem.alloc_vec::<u64>(n * 512).unwrap();
    let mine: Vec<u64> = (0..512).map(|i| (me as u64) << 32 | i).collect();
    for pe in 0..n {
        shmem.put_nbi(slots.slice(me * 512..(me + 1) * 512), &mine, pe);
    }
    shmem.quiet();
    shmem.barrier_all();
    let mut all = vec![vec![0u64; 512]; n];
    shmem.nbi(|s| {
        for (pe, out) in all.iter_mut().enumerate() {
            s.get(slots.slice(pe * 512..(pe + 1) * 512), out, right);
        }
    });
    for (pe, out) in all.iter().enumerate() {
        assert!(
            out.iter()
                .enumerate()
                .all(|(i, &v)| v == (pe as u64) << 32 | i as u64)
        );
    }
    shmem.barrier_all();
}

fn amo(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let rounds = 50u64;
    let c64 = shmem.alloc_box(0u64).unwrap();
    let c32 = shmem.alloc_box(0i32).unwrap();
    let cs = shmem.alloc_box(0usize).unwrap();
    let bits = shmem.alloc_box(0u64).unwrap();
    let bits32 = shmem.alloc_box(u32::MAX).unwrap();
    let xor = shmem.alloc_box(0i64).unwrap();
    let swap = shmem.alloc_box(-1i64).unwrap();
    let float = shmem.alloc_box(0.0f64).unwrap();
    let ring = shmem.alloc_box(0u32).unwrap();

    // fetch_add, add, fetch_inc, inc on three types: the fetched values are all distinct.
    let mut seen = Vec::new();
    for _ in 0..rounds {
        seen.push(shmem.atomic_fetch_add(&c64, me as u64 + 1, 0));
        shmem.atomic_add(&c64, 1, 0);
        shmem.atomic_fetch_inc(&c32, 0);
        shmem.atomic_inc(&c32, 0);
        shmem.atomic_add(&c32, -3, 0);
        shmem.atomic_fetch_add(&cs, 2, 0);
    }
    seen.dedup();
    assert_eq!(
        seen.len(),
        rounds as usize,
        "fetch_add returned a value twice"
    );
    // Bitwise: every PE sets its bit, clears the complement of it in the 32-bit word, and
    // toggles bit `me` of `xor` twice and bit 32 + me once.
    let before = shmem.atomic_fetch_or(&bits, 1 << me, 0);
    assert_eq!(before & (1 << me), 0);
    shmem.atomic_and(&bits32, !(1u32 << (me + 8)), 0);
    shmem.atomic_xor(&xor, 1 << me, 0);
    shmem.atomic_fetch_xor(&xor, 1 << me, 0);
    shmem.atomic_fetch_xor(&xor, 1 << (32 + me), 0);
    shmem.atomic_or(&bits, 1 << (16 + me), 0);
    // Without a fence two AMOs to one PE may be applied in either order.
    shmem.fence();
    shmem.atomic_fetch_and(&bits, !(1u64 << (16 + me)), 0);
    // Swap: the values taken form a chain from the initial -1 through every PE's id.
    let taken = shmem.atomic_swap(&swap, me as i64, 0);
    // Compare-and-swap ring: PE k waits (by retrying) until the ring holds k, then sets k+1.
    loop {
        let old = shmem.atomic_compare_swap(&ring, me as u32, me as u32 + 1, 0);
        if old == me as u32 {
            break;
        }
        assert!(old < me as u32, "ring passed PE {me}: {old}");
        std::thread::yield_now();
    }
    // Set and fetch of a float on my right neighbour.
    shmem.atomic_set(&float, me as f64 * 1.25, (me + 1) % n);
    shmem.barrier_all();

    // Non-blocking fetches: read the results of everyone's work.
    let (mut f64v, mut f32v, mut ringv, mut fl) = (0u64, 0i32, 0u32, 0f64);
    let (mut oldor, mut cas, mut inc, mut add) = (0u64, 0u32, 0usize, 0usize);
    let extra = shmem.alloc_box(0usize).unwrap();
    shmem.nbi(|s| {
        s.atomic_fetch(&mut f64v, &c64, 0);
        s.atomic_fetch(&mut f32v, &c32, 0);
        s.atomic_fetch(&mut ringv, &ring, 0);
        s.atomic_fetch(&mut fl, &float, me);
        s.atomic_fetch_or(&mut oldor, &bits, 0u64, 0);
        s.atomic_compare_swap(&mut cas, &ring, u32::MAX, 0, 0);
        s.atomic_fetch_inc(&mut inc, &extra, 0);
    });
    shmem.barrier_all();
    shmem.nbi(|s| s.atomic_fetch_add(&mut add, &extra, 0usize, 0));

    let n64 = n as u64;
    let want64 = rounds * (n64 * (n64 + 1) / 2) + rounds * n64;
    assert_eq!(f64v, want64, "u64 fetch_add/add");
    assert_eq!(f32v, -(rounds as i32) * n as i32, "i32 fetch_inc/inc/add");
    assert_eq!(shmem.atomic_fetch(&cs, 0), 2 * rounds as usize * n, "usize");
    assert_eq!(ringv, n as u32, "compare_swap ring");
    assert_eq!(cas, n as u32, "nbi compare_swap returns the old value");
    let all: u64 = (0..n).map(|p| 1u64 << p).sum();
    assert_eq!(oldor, all, "fetch_or / or / fetch_and");
    assert_eq!(shmem.atomic_fetch(&bits32, 0), !(((1u32 << n) - 1) << 8));
    assert_eq!(shmem.atomic_fetch(&xor, 0), (all << 32) as i64, "xor");
    assert_eq!(fl, ((me + n - 1) % n) as f64 * 1.25, "set/fetch of f64");
    assert!(inc < n, "nbi fetch_inc");
    assert_eq!(add, n, "all nbi fetch_incs done");
    // The swap chain: every PE took a distinct value from {-1} ∪ ids, and the last value
    // written is still there.
    let takens = shmem.alloc_vec::<i64>(n).unwrap();
    for pe in 0..n {
        shmem.p(takens.at(me), taken, pe);
    }
    shmem.barrier_all();
    let mut chain: Vec<i64> = takens.to_vec();
    chain.push(shmem.atomic_fetch(&swap, 0));
    chain.sort_unstable();
    let mut expect: Vec<i64> = (-1..n as i64).collect();
    expect.sort_unstable();
    assert_eq!(chain, expect, "swap chain");
    assert_eq!(shmem.atomic_swap(&float, 2.5f64, me), fl);
    assert_eq!(shmem.atomic_fetch(&float, me), 2.5);
    shmem.barrier_all();
    format!("amo ok: {rounds} rounds on {n} PEs")
}

#[test]
fn rma_one_node() {
    let r = run_and_check("rma", ONE_NODE);
    assert!(
        r.iter()
            .all(|s| s.starts_with("rma ok") && s.ends_with(", 4 same-node PEs")),
        "{r:?}"
    );
}

#[test]
fn rma_one_node_through_the_service_rings() {
    // GSAS_DIRECT=0: even same-node PEs are reached through the local service.
    let (report, dir) = rust_common::run("rma", ONE_NODE, &[("GSAS_DIRECT", "0")]);
    let r = rust_common::check(&report, &dir, ONE_NODE);
    assert!(r.iter().all(|s| s.ends_with(", 1 same-node PEs")), "{r:?}");
}

#[test]
fn rma_two_nodes() {
    let r = run_and_check("rma", TWO_NODES);
    assert!(
        r.iter()
            .all(|s| s.starts_with("rma ok") && s.ends_with(", 2 same-node PEs")),
        "{r:?}"
    );
}

#[test]
fn amo_one_node() {
    let r = run_and_check("amo", ONE_NODE);
    assert!(r.iter().all(|s| s == "amo ok: 50 rounds on 4 PEs"), "{r:?}");
}

#[test]
fn amo_two_nodes() {
    let r = run_and_check("amo", TWO_NODES);
    assert!(r.iter().all(|s| s == "amo ok: 50 rounds on 4 PEs"), "{r:?}");
}
