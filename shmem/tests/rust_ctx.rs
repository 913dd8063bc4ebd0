//! Contexts, teams and threads through the Rust API with several PEs, on one node and on
//! two nodes: contexts created, used and destroyed (options, quiet per context, numbering
//! of a context on the shared team), team queries and translation, exhaustion of contexts
//! without harm, and `SHMEM_THREAD_MULTIPLE` with two threads per PE, each on a context of
//! its own.

mod rust_common;

use rust_common::{ONE_NODE, TWO_NODES, run_and_check};
use shmem::{Cmp, CtxOptions, ErrorKind, Shmem, ThreadLevel};

/// Initializes with `SHMEM_THREAD_MULTIPLE`, which these scenarios need.
fn init() -> Shmem {
    let shmem = shmem::init_thread(ThreadLevel::Multiple).expect("init");
    assert_eq!(shmem.thread_level(), ThreadLevel::Multiple);
    shmem
}

/// The child entry point (see `rust_common`): one PE of a job.
#[test]
fn child_pe() {
    rust_common::child_main(init, scenario);
}

/// Every scenario as a singleton job (one PE, no launcher).
#[test]
fn every_scenario_in_a_singleton_job() {
    rust_common::singleton(init, &["ctx", "threads"], scenario);
}

fn scenario(shmem: &Shmem, name: &str) -> String {
    match name {
        "ctx" => contexts(shmem),
        "threads" => threads(shmem),
        other => panic!("unknown scenario {other}"),
    }
}

fn contexts(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let right = (me + 1) % n;
    let world = shmem.team_world();
    let shared = shmem.team_shared();
    assert_eq!((world.my_pe(), world.n_pes()), (Some(me), n));
    let shared_n = shared.n_pes();
    let shared_me = shared.my_pe().expect("member of the shared team");
    // The shared team is exactly the PEs that shmem_ptr reaches.
    let probe = shmem.alloc_box(me as u32).unwrap();
    let reachable: Vec<usize> = (0..n)
        .filter(|&pe| shmem.ptr(&probe, pe).is_some())
        .collect();
    assert_eq!(reachable.len(), shared_n);
    for (i, &pe) in reachable.iter().enumerate() {
        assert_eq!(world.translate_pe(pe, &shared), Some(i));
        assert_eq!(shared.translate_pe(i, &world), Some(pe));
        // The pointer really is that PE's copy.
        let p = shmem.ptr(&probe, pe).unwrap();
        // SAFETY: a same-node PE's symmetric u32, only read here.
        assert_eq!(unsafe { std::ptr::read_volatile(p.as_ptr()) }, pe as u32);
    }
    assert_eq!(reachable[shared_me], me);
    assert_eq!(world.num_contexts(), 0);
    assert!(shmem.pe_accessible(n - 1) && !shmem.pe_accessible(n));
    assert!(shmem.addr_accessible(probe.as_ptr(), right));
    let local = 5u32;
    assert!(
        !shmem.addr_accessible(&local, right),
        "a stack address is not symmetric"
    );

    // Contexts on the world team: puts complete with their own quiet.
    let a = shmem
        .ctx_create(CtxOptions::SERIALIZED | CtxOptions::NOSTORE)
        .unwrap();
    let b = shmem.ctx_create(CtxOptions::NONE).unwrap();
    assert_eq!(a.options(), CtxOptions::SERIALIZED | CtxOptions::NOSTORE);
    assert_eq!(a.team().n_pes(), n);
    let buf = shmem.alloc_vec::<u64>(2 * 70_000).unwrap();
    let mine: Vec<u64> = (0..70_000).map(|i| (me as u64) << 40 | i).collect();
    a.put(buf.slice(..70_000), &mine, right);
    b.put_nbi(buf.slice(70_000..), &mine, right);
    a.quiet();
    b.quiet();
    shmem.barrier_all();
    let left = (me + n - 1) % n;
    let want: Vec<u64> = (0..70_000).map(|i| (left as u64) << 40 | i).collect();
    assert!(buf.slice(..70_000).len() == 70_000 && buf.to_vec()[..70_000] == want[..]);
    assert!(buf.to_vec()[70_000..] == want[..]);
    // AMOs and fence on a context.
    let counter = shmem.alloc_box(0u64).unwrap();
    for pe in 0..n {
        a.atomic_add(&counter, 1, pe);
        a.fence();
    }
    a.quiet();
    shmem.barrier_all();
    assert_eq!(counter.read(), n as u64);
    drop(a);
    drop(b);

    // A context on the shared team numbers PEs in that team.
    let s = shared.create_ctx(CtxOptions::PRIVATE).unwrap();
    let slots = shmem.alloc_vec::<u32>(n).unwrap();
    for t in 0..shared_n {
        s.p(slots.at(me), 7000 + me as u32, t);
    }
    s.quiet();
    shmem.barrier_all();
    for &pe in &reachable {
        assert_eq!(
            slots.read(pe),
            7000 + pe as u32,
            "slot of same-node PE {pe}"
        );
    }
    assert_eq!(s.team().n_pes(), shared_n);
    assert_eq!(s.g(slots.at(me), shared_me), 7000 + me as u32);
    drop(s);
    shmem.barrier_all();

    // Exhausting the node's contexts fails cleanly and the library stays usable.
    let mut held = Vec::new();
    let err = loop {
        match shmem.ctx_create(CtxOptions::NONE) {
            Ok(c) => held.push(c),
            Err(e) => break e,
        }
        assert!(held.len() < 1000, "contexts never run out");
    };
    assert_eq!(err.kind(), ErrorKind::Context);
    let made = held.len();
    held.clear();
    let again = shmem
        .ctx_create(CtxOptions::NONE)
        .expect("contexts are reusable");
    again.p(&counter, 1, right);
    again.quiet();
    drop(again);
    shmem.barrier_all();
    assert_eq!(counter.read(), 1);
    format!("ctx ok: {made} contexts")
}

fn threads(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let per_thread = 200u64;
    let counters = shmem.alloc_vec::<u64>(2).unwrap();
    let data = shmem.alloc_vec::<u64>(2 * n * 64).unwrap();
    let done = shmem.alloc_box(0u64).unwrap();
    std::thread::scope(|s| {
        for t in 0..2usize {
            let (counters, data, done) = (&counters, &data, &done);
            s.spawn(move || {
                let ctx = shmem
                    .ctx_create(CtxOptions::PRIVATE)
                    .expect("a context per thread");
                for i in 0..per_thread {
                    let pe = (me + i as usize) % n;
                    ctx.atomic_fetch_add(counters.at(t), 1, pe);
                }
                let row: Vec<u64> = (0..64).map(|k| (t * 1000 + me) as u64 * 64 + k).collect();
                for pe in 0..n {
                    ctx.put(
                        data.slice((t * n + me) * 64..(t * n + me + 1) * 64),
                        &row,
                        pe,
                    );
                }
                ctx.quiet();
                for pe in 0..n {
                    ctx.atomic_inc(done, pe);
                }
                ctx.quiet();
            });
        }
    });
    // Every thread of every PE has delivered its puts before its increments.
    shmem.wait_until(&done, Cmp::Eq, 2 * n as u64);
    shmem.barrier_all();
    for t in 0..2 {
        assert_eq!(
            counters.read(t),
            per_thread,
            "thread {t}'s counter on PE {me}"
        );
        for pe in 0..n {
            for k in 0..64 {
                assert_eq!(
                    data.read((t * n + pe) * 64 + k),
                    (t * 1000 + pe) as u64 * 64 + k as u64
                );
            }
        }
    }
    format!("threads ok: {}", 2 * per_thread)
}

#[test]
fn ctx_one_node() {
    let r = run_and_check("ctx", ONE_NODE);
    assert!(r.iter().all(|s| s == "ctx ok: 63 contexts"), "{r:?}");
}

#[test]
fn ctx_two_nodes() {
    let r = run_and_check("ctx", TWO_NODES);
    assert!(r.iter().all(|s| s == "ctx ok: 63 contexts"), "{r:?}");
}

#[test]
fn thread_multiple_one_node() {
    let r = run_and_check("threads", ONE_NODE);
    assert!(r.iter().all(|s| s == "threads ok: 400"), "{r:?}");
}

#[test]
fn thread_multiple_two_nodes() {
    let r = run_and_check("threads", TWO_NODES);
    assert!(r.iter().all(|s| s == "threads ok: 400"), "{r:?}");
}
