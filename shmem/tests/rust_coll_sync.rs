//! Barriers and syncs with several PEs, on one node (1, 2, 3, 4 and 8 PEs: more PEs than
//! cores) and on two, three and four nodes: `shmem_barrier_all` completes puts, `shmem_sync_all`
//! and `shmem_team_sync` (world and shared teams) order local stores, and the active-set
//! `shmem_barrier`/`shmem_sync` with strided and shrinking active sets, a `pSync` reused by
//! consecutive calls, two `pSync`s alternated, and every `pSync` word back at
//! `SHMEM_SYNC_VALUE` after each call. Also the flat and tree forms of the intra-node
//! barrier (`SHMEM_COLL_FLAT_MAX=1` and `SHMEM_COLL_FANIN=2` force the tree).

mod rust_common;

use std::ffi::{c_int, c_long, c_void};

use rust_common::{run_expect, topologies, world};
use shmem::{Shmem, SymVec};

unsafe extern "C" {
    static gsas_shmem_team_shared: u8;
    fn shmem_barrier(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long);
    fn shmem_sync(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long);
    fn shmem_team_sync(team: *const c_void) -> c_int;
    fn pshmem_sync_all();
    fn shmem_barrier_all();
}

const SYNC_SIZE: usize = 16;

/// The child entry point (see `rust_common`): one PE of a job.
#[test]
fn child_pe() {
    rust_common::child_main(|| shmem::init().expect("init"), scenario);
}

fn scenario(shmem: &Shmem, name: &str) -> String {
    match name {
        "barrier" => barrier(shmem),
        "active" => active(shmem),
        other => panic!("unknown scenario {other}"),
    }
}

fn barrier(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let right = (me + 1) % n;
    let slots = shmem.alloc_vec::<u64>(n).unwrap();
    let mine = shmem.alloc_vec::<u64>(1).unwrap();
    let rounds = 300u64;
    for round in 1..=rounds {
        // barrier_all completes the puts: every PE sees its left neighbour's value.
        shmem.put(slots.at(me), &[round << 16 | me as u64], right);
        if round % 3 == 0 {
            // SAFETY: no arguments.
            unsafe { shmem_barrier_all() };
        } else {
            shmem.barrier_all();
        }
        let left = (me + n - 1) % n;
        assert_eq!(slots.read(left), round << 16 | left as u64, "round {round}");
        // sync_all orders local stores: every PE reads every PE's own slot.
        mine.write(0, round * 1000 + me as u64);
        match round % 3 {
            // SAFETY: no arguments.
            0 => unsafe { pshmem_sync_all() },
            1 => shmem.sync_all(),
            // SAFETY: the world team's handle.
            _ => assert_eq!(unsafe { shmem_team_sync(world()) }, 0),
        }
        for pe in 0..n {
            assert_eq!(shmem.g(mine.at(0), pe), round * 1000 + pe as u64);
        }
        // Nobody may overwrite `mine` or `slots` before everyone has read them.
        shmem.team_world().sync().unwrap();
    }
    // The shared team: the same-node PEs.
    let shared = shmem.team_shared();
    for round in 0..50u64 {
        mine.write(0, round);
        // SAFETY: the shared team's handle.
        let got = unsafe { shmem_team_sync((&raw const gsas_shmem_team_shared).cast()) };
        assert_eq!(got, 0);
        for p in 0..shared.n_pes() {
            let world = shared.translate_pe(p, &shmem.team_world()).unwrap();
            let ptr = shmem.ptr(mine.at(0), world).expect("a same-node PE");
            // SAFETY: a mapping of a same-node PE's element, stable until the sync below.
            assert_eq!(unsafe { std::ptr::read_volatile(ptr.as_ptr()) }, round);
        }
        shared.sync().unwrap();
    }
    shmem.barrier_all();
    format!("barrier ok: {rounds} rounds")
}

/// Every word of a pSync is 0.
fn clean(psync: &SymVec<'_, i64>, what: &str) {
    assert!(
        psync.to_vec().iter().all(|&w| w == 0),
        "{what}: pSync not back at SHMEM_SYNC_VALUE: {:?}",
        psync.to_vec()
    );
}

fn active(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe() as c_int, shmem.n_pes() as c_int);
    let a = shmem.alloc_vec::<i64>(SYNC_SIZE).unwrap();
    let b = shmem.alloc_vec::<i64>(SYNC_SIZE).unwrap();
    let data = shmem.alloc_vec::<u64>(2 * n as usize).unwrap();
    let (pa, pb) = (a.as_ptr().cast_mut(), b.as_ptr().cast_mut());
    let mut calls = 0;
    // Shrinking active sets starting at 0, alternating two pSyncs; each call is followed by
    // a check of its pSync (no PE can reuse it before passing the other one).
    for size in (1..=n).rev() {
        if me < size {
            for (k, (p, v)) in [(pa, &a), (pb, &b)].into_iter().enumerate() {
                // A put to my right neighbour in the set, completed by the barrier.
                let right = (me + 1) % size;
                let slot = |pe: c_int| k * n as usize + pe as usize;
                shmem.put(
                    data.at(slot(me)),
                    &[(size * 10 + k as c_int) as u64],
                    right as usize,
                );
                // SAFETY: symmetric pSync of SYNC_SIZE zeroed longs; every member calls.
                unsafe { shmem_barrier(0, 0, size, p) };
                let left = (me + size - 1) % size;
                assert_eq!(data.read(slot(left)), (size * 10 + k as c_int) as u64);
                clean(v, "shmem_barrier");
                calls += 1;
            }
        }
        shmem.barrier_all();
    }
    // The same pSync for consecutive barriers and syncs of the same set: the even PEs.
    let evens = (n + 1) / 2;
    if me % 2 == 0 {
        for i in 0..200 {
            // SAFETY: as above; every even PE calls.
            unsafe {
                if i % 2 == 0 {
                    shmem_barrier(0, 1, evens, pa);
                } else {
                    shmem_sync(0, 1, evens, pa);
                }
            }
        }
        calls += 200;
    }
    // The odd PEs with a stride of 2 from PE 1, then a stride of 4 from PE 1.
    if me % 2 == 1 {
        for _ in 0..50 {
            // SAFETY: as above; every odd PE calls.
            unsafe { shmem_sync(1, 1, n / 2, pb) };
        }
        calls += 50;
    }
    shmem.barrier_all();
    clean(&a, "consecutive barriers");
    clean(&b, "consecutive syncs");
    // Nobody may use `a` again before everyone checked it.
    shmem.barrier_all();
    let fours = (n - 1 + 3) / 4;
    if me % 4 == 1 && fours > 0 {
        // SAFETY: as above.
        unsafe { shmem_barrier(1, 2, fours, pa) };
        calls += 1;
    }
    shmem.barrier_all();
    clean(&a, "stride 4");
    format!("active ok: {calls} calls")
}

fn active_calls(me: usize, n: usize) -> String {
    let mut calls = 2 * (me + 1..=n).count();
    calls += if me % 2 == 0 { 200 } else { 50 };
    if me % 4 == 1 {
        calls += 1;
    }
    format!("active ok: {calls} calls")
}

#[test]
fn barrier_one_node() {
    run_expect("barrier", &topologies(1, &[1, 2, 3, 4, 8]), &[], |_, _| {
        "barrier ok: 300 rounds".into()
    });
}

#[test]
fn barrier_one_node_tree() {
    let env = [("SHMEM_COLL_FLAT_MAX", "1"), ("SHMEM_COLL_FANIN", "2")];
    run_expect("barrier", &topologies(1, &[3, 8]), &env, |_, _| {
        "barrier ok: 300 rounds".into()
    });
}

#[test]
fn barrier_two_nodes() {
    run_expect("barrier", &topologies(2, &[1, 2, 4]), &[], |_, _| {
        "barrier ok: 300 rounds".into()
    });
}

#[test]
fn barrier_three_nodes() {
    run_expect("barrier", &topologies(3, &[1, 2]), &[], |_, _| {
        "barrier ok: 300 rounds".into()
    });
}

/// Four nodes of one PE: in the leaders' dissemination barrier each PE signals the next
/// two and hears from the previous two, so it receives from a PE it never sends to (the
/// direct path must acknowledge such a sender from its datagrams' return address).
#[test]
fn barrier_four_nodes() {
    run_expect("barrier", &topologies(4, &[1]), &[], |_, _| {
        "barrier ok: 300 rounds".into()
    });
}

#[test]
fn active_one_node() {
    run_expect(
        "active",
        &topologies(1, &[1, 2, 3, 4, 8]),
        &[],
        active_calls,
    );
}

#[test]
fn active_two_and_three_nodes() {
    run_expect("active", &topologies(2, &[1, 2, 4]), &[], active_calls);
    run_expect("active", &topologies(3, &[1]), &[], active_calls);
}
