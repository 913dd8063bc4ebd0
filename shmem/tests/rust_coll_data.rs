//! Data-movement collectives with several PEs, on one node (1, 2, 3, 4 and 8 PEs) and on
//! two and three nodes: broadcast from every root, fcollect, collect with sizes that differ
//! (zero included), alltoall and alltoalls with strides; several element types and sizes
//! up to beyond the MTU; the team forms (Rust API and C ABI) beside the active-set forms
//! (the root's `dest` untouched by an active-set broadcast, shrinking and strided active
//! sets reusing one `pSync`, checked back at 0); zero-length calls with NULL buffers.
//! Back-to-back collectives write fresh regions, so PEs running ahead are exercised.

mod rust_common;

use std::ffi::{c_int, c_long, c_void};
use std::ptr::null_mut;

use rust_common::{run_expect, topologies, world};
use shmem::{Shmem, SymVec, Symmetric};

unsafe extern "C" {
    fn shmem_int_broadcast(
        team: *const c_void,
        dest: *mut c_int,
        src: *const c_int,
        n: usize,
        root: c_int,
    ) -> c_int;
    fn shmem_broadcastmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        root: c_int,
    ) -> c_int;
    fn shmem_broadcast64(
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        root: c_int,
        start: c_int,
        log_stride: c_int,
        size: c_int,
        psync: *mut c_long,
    );
    fn shmem_broadcast32(
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        root: c_int,
        start: c_int,
        log_stride: c_int,
        size: c_int,
        psync: *mut c_long,
    );
    fn shmem_barrier(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long);
    fn shmem_fcollect64(
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        start: c_int,
        log_stride: c_int,
        size: c_int,
        psync: *mut c_long,
    );
    fn shmem_collect32(
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        start: c_int,
        log_stride: c_int,
        size: c_int,
        psync: *mut c_long,
    );
    fn shmem_fcollect32(
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        start: c_int,
        log_stride: c_int,
        size: c_int,
        psync: *mut c_long,
    );
    fn shmem_long_collect(
        team: *const c_void,
        dest: *mut c_long,
        src: *const c_long,
        n: usize,
    ) -> c_int;
    fn shmem_collectmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
    ) -> c_int;
    fn shmem_fcollectmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
    ) -> c_int;
    fn shmem_alltoall64(
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        start: c_int,
        log_stride: c_int,
        size: c_int,
        psync: *mut c_long,
    );
    fn shmem_alltoalls32(
        dest: *mut c_void,
        src: *const c_void,
        dst: isize,
        sst: isize,
        n: usize,
        start: c_int,
        log_stride: c_int,
        size: c_int,
        psync: *mut c_long,
    );
    fn shmem_alltoallmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
    ) -> c_int;
    fn shmem_alltoallsmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        dst: isize,
        sst: isize,
        n: usize,
    ) -> c_int;
    fn shmem_double_alltoall(
        team: *const c_void,
        dest: *mut f64,
        src: *const f64,
        n: usize,
    ) -> c_int;
}

/// The child entry point (see `rust_common`): one PE of a job.
#[test]
fn child_pe() {
    rust_common::child_main(|| shmem::init().expect("init"), scenario);
}

fn scenario(shmem: &Shmem, name: &str) -> String {
    match name {
        "bcast" => bcast(shmem),
        "collect" => collect(shmem),
        "alltoall" => alltoall(shmem),
        other => panic!("unknown scenario {other}"),
    }
}

/// A value that names its origin.
fn val(a: usize, b: usize, c: usize) -> u64 {
    (a as u64) << 40 | (b as u64) << 20 | c as u64
}

trait FromVal: Symmetric + PartialEq + std::fmt::Debug {
    fn from_val(v: u64) -> Self;
}
impl FromVal for u8 {
    fn from_val(v: u64) -> u8 {
        (v ^ (v >> 40) ^ (v >> 20)) as u8
    }
}
impl FromVal for u32 {
    fn from_val(v: u64) -> u32 {
        (v ^ (v >> 24)) as u32
    }
}
impl FromVal for u64 {
    fn from_val(v: u64) -> u64 {
        v
    }
}
impl FromVal for f64 {
    fn from_val(v: u64) -> f64 {
        (v % (1 << 50)) as f64 + 0.5
    }
}

/// Every local element of `v[range]` equals `want(i)` for `i` from 0.
fn expect<T: FromVal>(
    v: &SymVec<'_, T>,
    at: usize,
    len: usize,
    want: impl Fn(usize) -> T,
    what: &str,
) {
    for i in 0..len {
        let got = v.read(at + i);
        assert_eq!(got, want(i), "{what}: element {i} of {len}");
    }
}

/// Broadcasts from every root into fresh regions of one buffer.
fn bcast_typed<T: FromVal>(shmem: &Shmem, len: usize) -> usize {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let team = shmem.team_world();
    let src = shmem.alloc_vec::<T>(len).unwrap();
    let dest = shmem.alloc_vec::<T>(len * n).unwrap();
    for i in 0..len {
        src.write(i, T::from_val(val(me, len, i)));
    }
    shmem.barrier_all();
    for root in 0..n {
        team.broadcast(dest.slice(root * len..(root + 1) * len), &src, root)
            .unwrap();
        expect(
            &dest,
            root * len,
            len,
            |i| T::from_val(val(root, len, i)),
            "team broadcast",
        );
    }
    shmem.barrier_all();
    n
}

/// Broadcasts over active sets: shrinking, one broadcast pSync reused, two barrier pSyncs
/// alternated (as the conformance suites do), then the even PEs; the root's dest is not
/// written. Returns the calls made.
fn active_set_broadcasts(
    shmem: &Shmem,
    psync: &SymVec<'_, c_long>,
    bar: &[SymVec<'_, c_long>; 2],
) -> usize {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let mut calls = 0;
    let len = 300;
    let s64 = shmem.alloc_vec::<u64>(len).unwrap();
    let d64 = shmem.alloc_vec::<u64>(len).unwrap();
    for i in 0..len {
        s64.write(i, val(me, 64, i));
    }
    shmem.barrier_all();
    const UNTOUCHED: u64 = 0xdead_beef;
    for size in (1..=n).rev() {
        if me < size {
            // Every dest is ready before anyone broadcasts: fill, then a barrier (with two
            // barrier pSyncs alternated, as the conformance suites do).
            d64.fill(UNTOUCHED);
            let b = &bar[size % 2];
            // SAFETY: a symmetric barrier pSync; every member calls.
            unsafe { shmem_barrier(0, 0, size as c_int, b.as_ptr().cast_mut()) };
            let root = size - 1;
            // SAFETY: symmetric buffers of `len` 64-bit words; every member calls.
            unsafe {
                shmem_broadcast64(
                    d64.as_ptr().cast_mut().cast(),
                    s64.as_ptr().cast(),
                    len,
                    root as c_int,
                    0,
                    0,
                    size as c_int,
                    psync.as_ptr().cast_mut(),
                )
            };
            if me == root {
                assert!(
                    d64.to_vec().iter().all(|&v| v == UNTOUCHED),
                    "the root's dest was written"
                );
            } else {
                expect(&d64, 0, len, |i| val(root, 64, i), "active-set broadcast");
            }
            assert!(
                psync.to_vec().iter().all(|&w| w == 0),
                "bcast pSync {:?}",
                psync.to_vec()
            );
            calls += 1;
        }
    }
    shmem.barrier_all();
    // A strided active set: the even PEs, root ordinal 1 (PE 2) when there is one.
    let evens = n.div_ceil(2);
    d64.fill(UNTOUCHED);
    shmem.barrier_all();
    if me % 2 == 0 {
        let root = usize::from(evens > 1);
        // SAFETY: as above; every even PE calls.
        unsafe {
            shmem_broadcast64(
                d64.as_ptr().cast_mut().cast(),
                s64.as_ptr().cast(),
                len,
                root as c_int,
                0,
                1,
                evens as c_int,
                psync.as_ptr().cast_mut(),
            )
        };
        if me == 2 * root {
            assert_eq!(d64.read(0), UNTOUCHED);
        } else {
            expect(
                &d64,
                0,
                len,
                |i| val(2 * root, 64, i),
                "strided active-set broadcast",
            );
        }
        calls += 1;
    }
    calls
}

fn bcast(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let mut calls = 0;
    for len in [1, 7, 1000] {
        calls += bcast_typed::<u8>(shmem, len);
    }
    for len in [1, 128, 20_000] {
        calls += bcast_typed::<u64>(shmem, len);
    }
    calls += bcast_typed::<f64>(shmem, 3);
    // The C ABI team form from a middle root, and a root out of range (refused everywhere).
    let src = shmem.alloc_vec::<c_int>(5).unwrap();
    let dest = shmem.alloc_vec::<c_int>(5).unwrap();
    for i in 0..5 {
        src.write(i, (me * 10 + i) as c_int);
    }
    shmem.barrier_all();
    let root = n / 2;
    // SAFETY: symmetric objects of 5 ints; every PE calls.
    unsafe {
        assert_eq!(
            shmem_int_broadcast(
                world(),
                dest.as_ptr().cast_mut(),
                src.as_ptr(),
                5,
                root as c_int
            ),
            0
        );
        assert_ne!(
            shmem_int_broadcast(
                world(),
                dest.as_ptr().cast_mut(),
                src.as_ptr(),
                5,
                n as c_int
            ),
            0
        );
        assert_ne!(
            shmem_int_broadcast(null_mut(), dest.as_ptr().cast_mut(), src.as_ptr(), 5, 0),
            0
        );
    }
    assert_eq!(
        dest.to_vec(),
        (0..5).map(|i| (root * 10 + i) as c_int).collect::<Vec<_>>()
    );
    calls += 1;
    // Zero-length calls with NULL buffers.
    let psync = shmem.alloc_vec::<c_long>(16).unwrap();
    let bar = [
        shmem.alloc_vec::<c_long>(16).unwrap(),
        shmem.alloc_vec::<c_long>(16).unwrap(),
    ];
    // SAFETY: zero-length: the buffers are not touched; the pSync is symmetric.
    unsafe {
        assert_eq!(
            shmem_int_broadcast(world(), null_mut(), null_mut(), 0, 0),
            0
        );
        assert_eq!(shmem_broadcastmem(world(), null_mut(), null_mut(), 0, 0), 0);
        shmem_broadcast32(
            null_mut(),
            null_mut(),
            0,
            0,
            0,
            0,
            n as c_int,
            psync.as_ptr().cast_mut(),
        );
    }
    calls += active_set_broadcasts(shmem, &psync, &bar);
    shmem.barrier_all();
    assert!(psync.to_vec().iter().all(|&w| w == 0));
    format!("bcast ok: {calls}")
}

fn collect(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let team = shmem.team_world();
    let mut calls = 0;
    // fcollect: three sizes, two rounds each into fresh regions.
    for len in [1usize, 3, 1000] {
        let src = shmem.alloc_vec::<u32>(len).unwrap();
        let dest = shmem.alloc_vec::<u32>(2 * len * n).unwrap();
        for round in 0..2 {
            for i in 0..len {
                src.write(i, u32::from_val(val(me, round, i)));
            }
            // Nobody reads my source before I wrote it: the collective starts with me.
            team.fcollect(dest.slice(round * len * n..(round + 1) * len * n), &src)
                .unwrap();
            for p in 0..n {
                expect(
                    &dest,
                    (round * n + p) * len,
                    len,
                    |i| u32::from_val(val(p, round, i)),
                    "fcollect",
                );
            }
            calls += 1;
            // My source is rewritten next round: everyone must have it first.
            shmem.barrier_all();
        }
    }
    // collect: sizes that differ (some zero), small and beyond the MTU.
    for scale in [1usize, 700] {
        let len_of = |p: usize| (p * 3 + 1) % 5 * scale;
        let total: usize = (0..n).map(len_of).sum();
        // Symmetric allocations must be the same on every PE: the largest contribution.
        let src = shmem
            .alloc_vec::<u64>((0..n).map(len_of).max().unwrap())
            .unwrap();
        let dest = shmem.alloc_vec::<u64>(2 * total.max(1)).unwrap();
        for i in 0..len_of(me) {
            src.write(i, val(me, scale, i));
        }
        shmem.barrier_all();
        for round in 0..2 {
            team.collect(dest.slice(round * total..), src.slice(..len_of(me)))
                .unwrap();
            let mut at = round * total;
            for p in 0..n {
                expect(&dest, at, len_of(p), |i| val(p, scale, i), "collect");
                at += len_of(p);
            }
            calls += 1;
        }
        shmem.barrier_all();
    }
    // The C ABI collect of longs, and zero-length calls with NULL (all sizes 0).
    let lsrc = shmem.alloc_vec::<c_long>(2).unwrap();
    let ldest = shmem.alloc_vec::<c_long>(2 * n).unwrap();
    lsrc.write(0, me as c_long);
    lsrc.write(1, -(me as c_long));
    shmem.barrier_all();
    let mine = if me % 2 == 0 { 2 } else { 1 };
    // SAFETY: symmetric objects; every PE calls.
    unsafe {
        assert_eq!(
            shmem_long_collect(world(), ldest.as_ptr().cast_mut(), lsrc.as_ptr(), mine),
            0
        );
        assert_eq!(shmem_collectmem(world(), null_mut(), null_mut(), 0), 0);
        assert_eq!(shmem_fcollectmem(world(), null_mut(), null_mut(), 0), 0);
    }
    let want: Vec<c_long> = (0..n)
        .flat_map(|p| {
            let v = [p as c_long, -(p as c_long)];
            v.into_iter().take(if p % 2 == 0 { 2 } else { 1 })
        })
        .collect();
    assert_eq!(ldest.to_vec()[..want.len()], want[..]);
    calls += 1;
    shmem.barrier_all();
    // Active sets: fcollect64 of the even PEs, collect32 of everyone (sizes differ), with
    // pSyncs checked back at 0.
    let psync = shmem.alloc_vec::<c_long>(18).unwrap();
    let s = shmem.alloc_vec::<u64>(4).unwrap();
    let d = shmem.alloc_vec::<u64>(4 * n).unwrap();
    for i in 0..4 {
        s.write(i, val(me, 9, i));
    }
    shmem.barrier_all();
    let evens = n.div_ceil(2);
    if me % 2 == 0 {
        // SAFETY: symmetric buffers; every even PE calls.
        unsafe {
            shmem_fcollect64(
                d.as_ptr().cast_mut().cast(),
                s.as_ptr().cast(),
                4,
                0,
                1,
                evens as c_int,
                psync.as_ptr().cast_mut(),
            )
        };
        for k in 0..evens {
            expect(&d, 4 * k, 4, |i| val(2 * k, 9, i), "active-set fcollect");
        }
        assert!(psync.to_vec().iter().all(|&w| w == 0));
        calls += 1;
    }
    shmem.barrier_all();
    let s32 = shmem.alloc_vec::<u32>(n).unwrap();
    let d32 = shmem.alloc_vec::<u32>(n * n).unwrap();
    for i in 0..n {
        s32.write(i, (me * 100 + i) as u32);
    }
    shmem.barrier_all();
    // SAFETY: symmetric buffers; every PE calls; PE p contributes p elements.
    unsafe {
        shmem_collect32(
            d32.as_ptr().cast_mut().cast(),
            s32.as_ptr().cast(),
            me,
            0,
            0,
            n as c_int,
            psync.as_ptr().cast_mut(),
        );
        shmem_fcollect32(
            null_mut(),
            null_mut(),
            0,
            0,
            0,
            n as c_int,
            psync.as_ptr().cast_mut(),
        );
    }
    let want: Vec<u32> = (0..n)
        .flat_map(|p| (0..p).map(move |i| (p * 100 + i) as u32))
        .collect();
    assert_eq!(d32.to_vec()[..want.len()], want[..]);
    assert!(
        psync.to_vec().iter().all(|&w| w == 0),
        "collect pSync {:?}",
        psync.to_vec()
    );
    calls += 1;
    shmem.barrier_all();
    format!("collect ok: {calls}")
}

fn alltoall(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let team = shmem.team_world();
    let mut calls = 0;
    for ne in [1usize, 5, 600] {
        let src = shmem.alloc_vec::<u64>(ne * n).unwrap();
        let dest = shmem.alloc_vec::<u64>(3 * ne * n).unwrap();
        for j in 0..n {
            for k in 0..ne {
                src.write(j * ne + k, val(me, j, k));
            }
        }
        shmem.barrier_all();
        for round in 0..3 {
            let region = dest.slice(round * ne * n..(round + 1) * ne * n);
            team.alltoall(region, &src, ne).unwrap();
            for i in 0..n {
                expect(
                    &dest,
                    round * ne * n + i * ne,
                    ne,
                    |k| val(i, me, k),
                    "alltoall",
                );
            }
            calls += 1;
        }
        shmem.barrier_all();
    }
    // alltoalls: 4 elements per pair, destination stride 2, source stride 3.
    let (ne, dst, sst) = (4usize, 2usize, 3usize);
    let src = shmem.alloc_vec::<i32>(((n * ne - 1) * sst) + 1).unwrap();
    let dest = shmem.alloc_vec::<i32>(((n * ne - 1) * dst) + 1).unwrap();
    for j in 0..n {
        for k in 0..ne {
            src.write((j * ne + k) * sst, (me * 1000 + j * 10 + k) as i32);
        }
    }
    dest.fill(-1);
    shmem.barrier_all();
    team.alltoalls(&dest, dst, &src, sst, ne).unwrap();
    for i in 0..n {
        for k in 0..ne {
            assert_eq!(
                dest.read((i * ne + k) * dst),
                (i * 1000 + me * 10 + k) as i32
            );
            if dst > 1 && (i * ne + k) * dst + 1 < dest.len() {
                assert_eq!(dest.read((i * ne + k) * dst + 1), -1, "a gap was written");
            }
        }
    }
    calls += 1;
    shmem.barrier_all();
    // The C ABI: doubles, and zero-length calls with NULL.
    let fs = shmem.alloc_vec::<f64>(n).unwrap();
    let fd = shmem.alloc_vec::<f64>(n).unwrap();
    for j in 0..n {
        fs.write(j, (me * n + j) as f64 * 0.25);
    }
    shmem.barrier_all();
    // SAFETY: symmetric objects of n doubles; every PE calls.
    unsafe {
        assert_eq!(
            shmem_double_alltoall(world(), fd.as_ptr().cast_mut(), fs.as_ptr(), 1),
            0
        );
        assert_eq!(shmem_alltoallmem(world(), null_mut(), null_mut(), 0), 0);
        assert_eq!(
            shmem_alltoallsmem(world(), null_mut(), null_mut(), 1, 1, 0),
            0
        );
        assert_ne!(
            shmem_alltoallsmem(world(), null_mut(), null_mut(), 0, 1, 1),
            0,
            "stride 0"
        );
    }
    assert_eq!(
        fd.to_vec(),
        (0..n)
            .map(|i| (i * n + me) as f64 * 0.25)
            .collect::<Vec<_>>()
    );
    calls += 1;
    shmem.barrier_all();
    // Active sets: alltoall64 of everyone, alltoalls32 of the even PEs.
    let psync = shmem.alloc_vec::<c_long>(16).unwrap();
    let s = shmem.alloc_vec::<u64>(2 * n).unwrap();
    let d = shmem.alloc_vec::<u64>(2 * n).unwrap();
    for j in 0..n {
        s.write(2 * j, val(me, j, 0));
        s.write(2 * j + 1, val(me, j, 1));
    }
    shmem.barrier_all();
    // SAFETY: symmetric buffers of 2n words; every PE calls.
    unsafe {
        shmem_alltoall64(
            d.as_ptr().cast_mut().cast(),
            s.as_ptr().cast(),
            2,
            0,
            0,
            n as c_int,
            psync.as_ptr().cast_mut(),
        )
    };
    for i in 0..n {
        expect(&d, 2 * i, 2, |k| val(i, me, k), "active-set alltoall");
    }
    assert!(psync.to_vec().iter().all(|&w| w == 0));
    calls += 1;
    shmem.barrier_all();
    let evens = n.div_ceil(2);
    let s32 = shmem.alloc_vec::<u32>(2 * evens).unwrap();
    let d32 = shmem.alloc_vec::<u32>(2 * evens).unwrap();
    if me % 2 == 0 {
        for j in 0..evens {
            s32.write(2 * j, (me * 100 + j) as u32);
            s32.write(2 * j + 1, 7);
        }
        d32.fill(9);
    }
    shmem.barrier_all();
    if me % 2 == 0 {
        // SAFETY: symmetric buffers; stride 2 on both sides, one element per pair.
        unsafe {
            shmem_alltoalls32(
                d32.as_ptr().cast_mut().cast(),
                s32.as_ptr().cast(),
                2,
                2,
                1,
                0,
                1,
                evens as c_int,
                psync.as_ptr().cast_mut(),
            )
        };
        for i in 0..evens {
            assert_eq!(d32.read(2 * i), (2 * i * 100 + me / 2) as u32);
            assert_eq!(d32.read(2 * i + 1), 9);
        }
        calls += 1;
    }
    shmem.barrier_all();
    assert!(psync.to_vec().iter().all(|&w| w == 0));
    format!("alltoall ok: {calls}")
}

fn bcast_calls(pe: usize, n: usize) -> String {
    let shrinking = n - pe;
    let strided = usize::from(pe % 2 == 0);
    format!("bcast ok: {}", 7 * n + 1 + shrinking + strided)
}

fn collect_calls(pe: usize, _n: usize) -> String {
    format!("collect ok: {}", 6 + 4 + 1 + 1 + usize::from(pe % 2 == 0))
}

fn alltoall_calls(pe: usize, _n: usize) -> String {
    format!("alltoall ok: {}", 9 + 1 + 1 + 1 + usize::from(pe % 2 == 0))
}

#[test]
fn bcast_one_node() {
    run_expect("bcast", &topologies(1, &[1, 2, 3, 4, 8]), &[], bcast_calls);
}

#[test]
fn bcast_several_nodes() {
    run_expect("bcast", &topologies(2, &[1, 2, 4]), &[], bcast_calls);
    run_expect("bcast", &topologies(3, &[1, 2]), &[], bcast_calls);
}

#[test]
fn collect_one_node() {
    run_expect(
        "collect",
        &topologies(1, &[1, 2, 3, 4, 8]),
        &[],
        collect_calls,
    );
}

#[test]
fn collect_several_nodes() {
    run_expect("collect", &topologies(2, &[1, 2, 4]), &[], collect_calls);
    run_expect("collect", &topologies(3, &[1, 2]), &[], collect_calls);
}

#[test]
fn alltoall_one_node() {
    run_expect(
        "alltoall",
        &topologies(1, &[1, 2, 3, 4, 8]),
        &[],
        alltoall_calls,
    );
}

#[test]
fn alltoall_several_nodes() {
    run_expect("alltoall", &topologies(2, &[1, 2, 4]), &[], alltoall_calls);
    run_expect("alltoall", &topologies(3, &[1, 2]), &[], alltoall_calls);
}

#[test]
fn without_direct_access() {
    // GSAS_DIRECT=0: same-node PEs reach each other through the service, so every PE is a
    // cell of its own and the collectives run their across-node algorithms on one node.
    let env = [("GSAS_DIRECT", "0")];
    run_expect("collect", &topologies(1, &[3]), &env, collect_calls);
    run_expect("bcast", &topologies(1, &[4]), &env, bcast_calls);
}
