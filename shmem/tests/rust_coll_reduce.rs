//! Reductions with several PEs, on one node (1, 2, 3, 4 and 8 PEs) and on two and three
//! nodes: every operation on every integer, floating-point and complex type of the Rust
//! API with exact expected results (integers wrap), in place and disjoint, short and
//! beyond the MTU, floating-point results bit-identical on every PE; the C ABI's team forms
//! (`long double`, complex) beside the active-set `_to_all` forms on the world and on a
//! strided active set, with `pSync` checked back at 0.

mod rust_common;

use std::ffi::{c_int, c_long, c_short, c_void};

use rust_common::{run_expect, topologies, world};
use shmem::{Complex32, Complex64, ReduceOp, Shmem, SymVec, Symmetric, op};

unsafe extern "C" {
    fn gsas_shmem_longdouble_from_double(v: f64, out: *mut c_void);
    fn gsas_shmem_longdouble_to_double(v: *const c_void) -> f64;
    fn shmem_longdouble_sum_reduce(
        t: *const c_void,
        d: *mut c_void,
        s: *const c_void,
        n: usize,
    ) -> c_int;
    fn shmem_longdouble_max_reduce(
        t: *const c_void,
        d: *mut c_void,
        s: *const c_void,
        n: usize,
    ) -> c_int;
    fn shmem_longdouble_prod_to_all(
        d: *mut c_void,
        s: *const c_void,
        n: c_int,
        start: c_int,
        log: c_int,
        size: c_int,
        wrk: *mut c_void,
        psync: *mut c_long,
    );
    fn shmem_complexd_prod_reduce(
        t: *const c_void,
        d: *mut Complex64,
        s: *const Complex64,
        n: usize,
    ) -> c_int;
    fn shmem_complexf_sum_to_all(
        d: *mut Complex32,
        s: *const Complex32,
        n: c_int,
        start: c_int,
        log: c_int,
        size: c_int,
        wrk: *mut Complex32,
        psync: *mut c_long,
    );
    fn shmem_int_sum_to_all(
        d: *mut c_int,
        s: *const c_int,
        n: c_int,
        start: c_int,
        log: c_int,
        size: c_int,
        wrk: *mut c_int,
        psync: *mut c_long,
    );
    fn shmem_long_max_to_all(
        d: *mut c_long,
        s: *const c_long,
        n: c_int,
        start: c_int,
        log: c_int,
        size: c_int,
        wrk: *mut c_long,
        psync: *mut c_long,
    );
    fn shmem_short_xor_to_all(
        d: *mut c_short,
        s: *const c_short,
        n: c_int,
        start: c_int,
        log: c_int,
        size: c_int,
        wrk: *mut c_short,
        psync: *mut c_long,
    );
    fn shmem_double_min_to_all(
        d: *mut f64,
        s: *const f64,
        n: c_int,
        start: c_int,
        log: c_int,
        size: c_int,
        wrk: *mut f64,
        psync: *mut c_long,
    );
    fn shmem_uint64_and_reduce(t: *const c_void, d: *mut u64, s: *const u64, n: usize) -> c_int;
    fn pshmem_ulong_or_reduce(t: *const c_void, d: *mut u64, s: *const u64, n: usize) -> c_int;
    fn shmem_int_sum_reduce(t: *const c_void, d: *mut c_int, s: *const c_int, n: usize) -> c_int;
}

const REDUCE_SYNC_SIZE: usize = 35;

/// The child entry point (see `rust_common`): one PE of a job.
#[test]
fn child_pe() {
    rust_common::child_main(|| shmem::init().expect("init"), scenario);
}

fn scenario(shmem: &Shmem, name: &str) -> String {
    match name {
        "typed" => typed(shmem),
        "cabi" => cabi(shmem),
        "straddle" => straddle(shmem),
        other => panic!("unknown scenario {other}"),
    }
}

/// Reduces `value(pe, i)` over the world with `o` (disjoint, then in place) and checks
/// against the fold of `f` in PE order. Returns the number of reductions.
fn one<T, O>(
    shmem: &Shmem,
    o: O,
    f: impl Fn(T, T) -> T,
    value: impl Fn(usize, usize) -> T,
    len: usize,
) -> usize
where
    T: Symmetric + PartialEq + std::fmt::Debug,
    O: ReduceOp<T> + std::fmt::Debug,
{
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let team = shmem.team_world();
    let src = shmem.alloc_vec::<T>(len).unwrap();
    let dest = shmem.alloc_vec::<T>(len).unwrap();
    for i in 0..len {
        src.write(i, value(me, i));
    }
    let want: Vec<T> = (0..len)
        .map(|i| (1..n).fold(value(0, i), |acc, p| f(acc, value(p, i))))
        .collect();
    team.reduce(o, &dest, &src).unwrap();
    assert_eq!(dest.to_vec(), want, "{o:?} on {} elements", len);
    // In place: the result replaces the source on every PE.
    team.reduce(o, &src, &src).unwrap();
    assert_eq!(src.to_vec(), want, "in-place {o:?}");
    // Back to back into the same destination (reductions need every PE, so no PE can
    // overwrite a result before its owner read it).
    for i in 0..len {
        src.write(i, value(me, i));
    }
    team.reduce(o, &dest, &src).unwrap();
    assert_eq!(dest.to_vec(), want, "repeated {o:?}");
    shmem.barrier_all();
    3
}

macro_rules! ints {
    ($shmem:ident, $calls:ident; $($t:ty),*) => {
        $(
            for len in [1usize, 13] {
                let g = |p: usize, i: usize| (p * 37 + i * 11 + 3) as $t;
                $calls += one::<$t, _>($shmem, op::Sum, <$t>::wrapping_add, g, len);
                $calls += one::<$t, _>($shmem, op::Prod, <$t>::wrapping_mul, g, len);
                $calls += one::<$t, _>($shmem, op::Max, Ord::max, g, len);
                $calls += one::<$t, _>($shmem, op::Min, Ord::min, g, len);
            }
        )*
    };
}

macro_rules! bits {
    ($shmem:ident, $calls:ident; $($t:ty),*) => {
        $(
            let g = |p: usize, i: usize| ((p * 0x9e37 + i * 0x79b9) ^ (1 << (p % 8))) as $t;
            $calls += one::<$t, _>($shmem, op::And, |a, b| a & b, g, 9);
            $calls += one::<$t, _>($shmem, op::Or, |a, b| a | b, g, 9);
            $calls += one::<$t, _>($shmem, op::Xor, |a, b| a ^ b, g, 9);
        )*
    };
}

fn typed(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let mut calls = 0;
    ints!(shmem, calls; i8, u8, i16, u16, i32, u32, i64, u64, isize, usize);
    bits!(shmem, calls; u8, u16, u32, u64, i8, i16, i32, i64, usize);
    // Floating point with exact results: small integers and halves.
    let gf = |p: usize, i: usize| ((p * 3 + i) % 7) as f64 - 2.5;
    let gp = |p: usize, i: usize| 1.0 + ((p + i) % 3) as f64 * 0.5;
    calls += one::<f64, _>(shmem, op::Sum, |a, b| a + b, gf, 17);
    calls += one::<f64, _>(shmem, op::Prod, |a, b| a * b, gp, 17);
    calls += one::<f64, _>(shmem, op::Max, f64::max, gf, 17);
    calls += one::<f64, _>(shmem, op::Min, f64::min, gf, 17);
    calls += one::<f32, _>(shmem, op::Sum, |a, b| a + b, |p, i| gf(p, i) as f32, 17);
    calls += one::<f32, _>(shmem, op::Prod, |a, b| a * b, |p, i| gp(p, i) as f32, 17);
    calls += one::<f32, _>(shmem, op::Max, f32::max, |p, i| gf(p, i) as f32, 5);
    calls += one::<f32, _>(shmem, op::Min, f32::min, |p, i| gf(p, i) as f32, 5);
    // Complex: small Gaussian integers, exact.
    let gc = |p: usize, i: usize| Complex64 {
        re: ((p + i) % 3) as f64 - 1.0,
        im: ((p * 2 + i) % 3) as f64,
    };
    let cmul = |a: Complex64, b: Complex64| Complex64 {
        re: a.re * b.re - a.im * b.im,
        im: a.re * b.im + a.im * b.re,
    };
    calls += one::<Complex64, _>(
        shmem,
        op::Sum,
        |a, b| Complex64 {
            re: a.re + b.re,
            im: a.im + b.im,
        },
        gc,
        6,
    );
    calls += one::<Complex64, _>(shmem, op::Prod, cmul, gc, 6);
    let gcf = |p: usize, i: usize| Complex32 {
        re: gc(p, i).re as f32,
        im: gc(p, i).im as f32,
    };
    calls += one::<Complex32, _>(
        shmem,
        op::Prod,
        |a: Complex32, b: Complex32| Complex32 {
            re: a.re * b.re - a.im * b.im,
            im: a.re * b.im + a.im * b.re,
        },
        gcf,
        6,
    );
    // Beyond the MTU.
    calls += one::<i32, _>(
        shmem,
        op::Sum,
        i32::wrapping_add,
        |p, i| (p * 100_000 + i) as i32,
        20_000,
    );
    calls += one::<u64, _>(
        shmem,
        op::Max,
        Ord::max,
        |p, i| ((p + i) % 97) as u64,
        50_000,
    );
    // Inexact floating point: the same bits on every PE.
    let team = shmem.team_world();
    let src = shmem.alloc_vec::<f64>(64).unwrap();
    let dest = shmem.alloc_vec::<f64>(64).unwrap();
    let all = shmem.alloc_vec::<u64>(64 * n).unwrap();
    let bits = shmem.alloc_vec::<u64>(64).unwrap();
    for i in 0..64 {
        src.write(i, 0.1 * (me + 1) as f64 + 1e-3 * i as f64 + 1.0 / 3.0);
    }
    team.reduce(op::Sum, &dest, &src).unwrap();
    for i in 0..64 {
        bits.write(i, dest.read(i).to_bits());
    }
    shmem.barrier_all();
    team.fcollect(&all, &bits).unwrap();
    for p in 0..n {
        for i in 0..64 {
            assert_eq!(
                all.read(p * 64 + i),
                bits.read(i),
                "PE {p} element {i} differs"
            );
        }
    }
    calls += 1;
    shmem.barrier_all();
    format!("typed ok: {calls}")
}

fn clean(psync: &shmem::SymVec<'_, c_long>) {
    assert!(
        psync.to_vec().iter().all(|&w| w == 0),
        "pSync {:?}",
        psync.to_vec()
    );
}

/// long double through the C ABI: team sum and max, active-set product (16-byte storage in
/// u128s), with the pSync `ps` and the work array `w`. Returns the calls made.
fn long_doubles(shmem: &Shmem, psync: &SymVec<'_, c_long>, w: *mut u128) -> usize {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let ps = psync.as_ptr().cast_mut();
    let mut calls = 0;
    // long double: team sum and max, active-set product (16-byte storage in u128s).
    let ld = |v: f64| {
        let mut out = 0u128;
        // SAFETY: 16 writable bytes hold a long double.
        unsafe { gsas_shmem_longdouble_from_double(v, (&raw mut out).cast()) };
        out
    };
    // SAFETY: 16 readable bytes holding a long double.
    let back = |v: u128| unsafe { gsas_shmem_longdouble_to_double((&raw const v).cast()) };
    let s = shmem.alloc_vec::<u128>(4).unwrap();
    let d = shmem.alloc_vec::<u128>(4).unwrap();
    for i in 0..4 {
        s.write(i, ld(me as f64 * 0.5 + i as f64));
    }
    shmem.barrier_all();
    // SAFETY: symmetric arrays of 4 long doubles; every PE calls.
    unsafe {
        assert_eq!(
            shmem_longdouble_sum_reduce(
                world(),
                d.as_ptr().cast_mut().cast(),
                s.as_ptr().cast(),
                4
            ),
            0
        );
    }
    let tri = (n * (n - 1) / 2) as f64;
    for i in 0..4 {
        assert_eq!(
            back(d.read(i)),
            tri * 0.5 + (n * i) as f64,
            "long double sum {i}"
        );
    }
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            shmem_longdouble_max_reduce(
                world(),
                d.as_ptr().cast_mut().cast(),
                s.as_ptr().cast(),
                4
            ),
            0
        );
    }
    for i in 0..4 {
        assert_eq!(
            back(d.read(i)),
            (n - 1) as f64 * 0.5 + i as f64,
            "long double max {i}"
        );
    }
    for i in 0..4 {
        s.write(i, ld(if (me + i) % 2 == 0 { 2.0 } else { 1.0 }));
    }
    shmem.barrier_all();
    // SAFETY: symmetric arrays, pWrk and pSync; every PE calls.
    unsafe {
        shmem_longdouble_prod_to_all(
            d.as_ptr().cast_mut().cast(),
            s.as_ptr().cast(),
            4,
            0,
            0,
            n as c_int,
            w.cast(),
            ps,
        )
    };
    for i in 0..4 {
        let twos = (0..n).filter(|p| (p + i) % 2 == 0).count();
        assert_eq!(
            back(d.read(i)),
            f64::powi(2.0, twos as i32),
            "long double prod {i}"
        );
    }
    clean(psync);
    shmem.barrier_all();
    calls += 3;
    calls
}

/// Complex through the C ABI: team product, active-set sum. Returns the calls made.
fn complexes(shmem: &Shmem, psync: &SymVec<'_, c_long>, w: *mut u128) -> usize {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let ps = psync.as_ptr().cast_mut();
    let tri = (n * (n - 1) / 2) as f64;
    let mut calls = 0;
    // Complex through the C ABI: team product, active-set sum.
    let cs = shmem.alloc_vec::<Complex64>(2).unwrap();
    let cd = shmem.alloc_vec::<Complex64>(2).unwrap();
    cs.write(0, Complex64 { re: 0.0, im: 1.0 });
    cs.write(1, Complex64 { re: 1.0, im: 1.0 });
    shmem.barrier_all();
    // SAFETY: symmetric arrays of 2 complex doubles; every PE calls.
    unsafe {
        assert_eq!(
            shmem_complexd_prod_reduce(world(), cd.as_ptr().cast_mut(), cs.as_ptr(), 2),
            0
        )
    };
    let ipow = |z: Complex64, k: usize| {
        (0..k).fold(Complex64 { re: 1.0, im: 0.0 }, |a, _| Complex64 {
            re: a.re * z.re - a.im * z.im,
            im: a.re * z.im + a.im * z.re,
        })
    };
    assert_eq!(cd.read(0), ipow(Complex64 { re: 0.0, im: 1.0 }, n), "i^n");
    assert_eq!(
        cd.read(1),
        ipow(Complex64 { re: 1.0, im: 1.0 }, n),
        "(1+i)^n"
    );
    let fs = shmem.alloc_vec::<Complex32>(1).unwrap();
    let fd = shmem.alloc_vec::<Complex32>(1).unwrap();
    fs.write(
        0,
        Complex32 {
            re: me as f32,
            im: -1.0,
        },
    );
    shmem.barrier_all();
    // SAFETY: symmetric arrays, pWrk and pSync; every PE calls.
    unsafe {
        shmem_complexf_sum_to_all(
            fd.as_ptr().cast_mut(),
            fs.as_ptr(),
            1,
            0,
            0,
            n as c_int,
            w.cast(),
            ps,
        )
    };
    assert_eq!(
        fd.read(0),
        Complex32 {
            re: tri as f32,
            im: -(n as f32)
        }
    );
    clean(psync);
    shmem.barrier_all();
    calls += 2;
    calls
}

fn cabi(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let mut calls = 0;
    let psync = shmem.alloc_vec::<c_long>(REDUCE_SYNC_SIZE).unwrap();
    let ps = psync.as_ptr().cast_mut();
    let wrk = shmem.alloc_vec::<u128>(n / 2 + 2).unwrap();
    let w = wrk.as_ptr().cast_mut();
    calls += long_doubles(shmem, &psync, w);
    calls += complexes(shmem, &psync, w);
    // Active-set forms on a strided set (the even PEs) and the world, one pSync reused
    // after barriers.
    let evens = n.div_ceil(2);
    let is = shmem.alloc_vec::<c_int>(3).unwrap();
    let id = shmem.alloc_vec::<c_int>(3).unwrap();
    let ls = shmem.alloc_vec::<c_long>(3).unwrap();
    let lsd = shmem.alloc_vec::<c_long>(3).unwrap();
    let ss = shmem.alloc_vec::<c_short>(3).unwrap();
    let ds = shmem.alloc_vec::<f64>(3).unwrap();
    let dd = shmem.alloc_vec::<f64>(3).unwrap();
    for i in 0..3 {
        is.write(i, (me * 10 + i) as c_int);
        ls.write(i, (me as c_long - 3) * (i as c_long + 1));
        ss.write(i, (me as c_short + 1) << i);
        ds.write(i, -(me as f64) + i as f64 * 0.25);
    }
    shmem.barrier_all();
    if me % 2 == 0 {
        // SAFETY: symmetric arrays, pWrk, pSync; every even PE calls.
        unsafe {
            shmem_int_sum_to_all(
                id.as_ptr().cast_mut(),
                is.as_ptr(),
                3,
                0,
                1,
                evens as c_int,
                w.cast(),
                ps,
            )
        };
        for i in 0..3 {
            let want: usize = (0..evens).map(|k| 2 * k * 10 + i).sum();
            assert_eq!(id.read(i), want as c_int);
        }
        clean(&psync);
        calls += 1;
    }
    shmem.barrier_all();
    // SAFETY: as above, every PE.
    unsafe {
        shmem_long_max_to_all(
            lsd.as_ptr().cast_mut(),
            ls.as_ptr(),
            3,
            0,
            0,
            n as c_int,
            w.cast(),
            ps,
        );
    }
    for i in 0..3 {
        let want = (0..n)
            .map(|p| (p as c_long - 3) * (i as c_long + 1))
            .max()
            .unwrap();
        assert_eq!(lsd.read(i), want);
    }
    clean(&psync);
    shmem.barrier_all();
    // SAFETY: as above; in place.
    unsafe {
        shmem_short_xor_to_all(
            ss.as_ptr().cast_mut(),
            ss.as_ptr(),
            3,
            0,
            0,
            n as c_int,
            w.cast(),
            ps,
        );
    }
    for i in 0..3 {
        let want = (0..n).fold(0, |a, p| a ^ ((p as c_short + 1) << i));
        assert_eq!(ss.read(i), want, "in-place xor_to_all");
    }
    clean(&psync);
    shmem.barrier_all();
    // SAFETY: as above.
    unsafe {
        shmem_double_min_to_all(
            dd.as_ptr().cast_mut(),
            ds.as_ptr(),
            3,
            0,
            0,
            n as c_int,
            w.cast(),
            ps,
        );
        shmem_double_min_to_all(
            dd.as_ptr().cast_mut(),
            ds.as_ptr(),
            0,
            0,
            0,
            n as c_int,
            w.cast(),
            ps,
        );
    }
    for i in 0..3 {
        assert_eq!(dd.read(i), -((n - 1) as f64) + i as f64 * 0.25);
    }
    clean(&psync);
    shmem.barrier_all();
    calls += 3;
    // Team forms through the C ABI, a profiling twin, and a zero-length call with NULL.
    let us = shmem.alloc_vec::<u64>(2).unwrap();
    let ud = shmem.alloc_vec::<u64>(2).unwrap();
    us.write(0, !(1u64 << me));
    us.write(1, 1u64 << me);
    shmem.barrier_all();
    // SAFETY: symmetric arrays of 2 words; every PE calls.
    unsafe {
        assert_eq!(
            shmem_uint64_and_reduce(world(), ud.as_ptr().cast_mut(), us.as_ptr(), 2),
            0
        );
        assert_eq!(ud.read(0), !((1u64 << n) - 1));
        assert_eq!(
            pshmem_ulong_or_reduce(world(), ud.as_ptr().cast_mut(), us.as_ptr(), 2),
            0
        );
        assert_eq!(ud.read(1), (1u64 << n) - 1);
        assert_eq!(
            shmem_int_sum_reduce(world(), std::ptr::null_mut(), std::ptr::null(), 0),
            0
        );
    }
    calls += 2;
    shmem.barrier_all();
    format!("cabi ok: {calls}")
}

/// 10 integer types x 2 lengths x 4 operations, 9 bitwise types x 3, 12 floating-point
/// and complex, 2 large: 3 reductions each; and the bit-identity check.
const TYPED: usize = 3 * (10 * 2 * 4 + 9 * 3 + 11 + 2) + 1;

/// An active set of four PEs on three nodes whose middle two share a node (PEs 1..=4 of
/// 3 nodes x 2: nodes 0, 1, 1, 2); with `GSAS_DIRECT=0` every PE is a cell of its own, so
/// two of the four cell leaders share a node. Every leader must choose the same algorithm
/// (recursive doubling or the tree): one that chose differently would wait for a partial
/// that never comes. Sums of 3 and of 5000 ints (beyond one datagram's worth of a small
/// MTU too), 6 rounds in all.
fn straddle(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let psync = shmem.alloc_vec::<c_long>(REDUCE_SYNC_SIZE).unwrap();
    let ps = psync.as_ptr().cast_mut();
    let len = 5000usize;
    let wrk = shmem.alloc_vec::<c_int>(len / 2 + 16).unwrap();
    let src = shmem.alloc_vec::<c_int>(len).unwrap();
    let dst = shmem.alloc_vec::<c_int>(len).unwrap();
    let mut calls = 0;
    for round in 0..6usize {
        for i in 0..len {
            src.write(i, (me * 1000 + i + round) as c_int);
        }
        shmem.barrier_all();
        if (1..=4).contains(&me) {
            let n = if round % 2 == 0 { 3 } else { len };
            // SAFETY: symmetric arrays, pWrk and pSync; PEs 1..=4 call.
            unsafe {
                shmem_int_sum_to_all(
                    dst.as_ptr().cast_mut(),
                    src.as_ptr(),
                    n as c_int,
                    1,
                    0,
                    4,
                    wrk.as_ptr().cast_mut(),
                    ps,
                )
            };
            for i in 0..n {
                let want: usize = (1..=4).map(|pe| pe * 1000 + i + round).sum();
                assert_eq!(dst.read(i), want as c_int, "round {round} element {i}");
            }
            clean(&psync);
            calls += 1;
        }
        shmem.barrier_all();
    }
    format!("straddle ok: {calls}")
}

fn typed_calls(_pe: usize, _n: usize) -> String {
    format!("typed ok: {TYPED}")
}

fn cabi_calls(pe: usize, _n: usize) -> String {
    format!("cabi ok: {}", 3 + 2 + 3 + 2 + usize::from(pe % 2 == 0))
}

#[test]
fn typed_one_node() {
    run_expect("typed", &topologies(1, &[1, 2, 3, 4, 8]), &[], typed_calls);
}

#[test]
fn typed_several_nodes() {
    run_expect("typed", &topologies(2, &[1, 2, 4]), &[], typed_calls);
    run_expect("typed", &topologies(3, &[1, 2]), &[], typed_calls);
}

#[test]
fn cabi_one_node() {
    run_expect("cabi", &topologies(1, &[1, 2, 3, 4, 8]), &[], cabi_calls);
}

#[test]
fn cabi_several_nodes() {
    run_expect("cabi", &topologies(2, &[1, 2, 4]), &[], cabi_calls);
    run_expect("cabi", &topologies(3, &[1, 2]), &[], cabi_calls);
}

#[test]
fn leaders_sharing_a_node_choose_alike() {
    run_expect(
        "straddle",
        &topologies(3, &[2]),
        &[("GSAS_DIRECT", "0"), ("SHMEM_WAIT_TIMEOUT", "120")],
        |pe, _| format!("straddle ok: {}", if (1..=4).contains(&pe) { 6 } else { 0 }),
    );
}
