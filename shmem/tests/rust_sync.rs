//! Synchronization through the Rust API with several PEs, on one node and on two nodes:
//! put-with-signal (SET and ADD, blocking and non-blocking), `signal_wait_until`,
//! `wait_until` with each comparison, the multi-element waits and tests (masks, vectors,
//! empty sets), and locks under contention (an exact non-atomic counter and a FIFO ticket
//! log). And what a PE of a crowded node holds: 24 PEs on one node, each counting its open
//! descriptors after init (it maps 69 segments of its peers and keeps none of their
//! descriptors).

mod rust_common;

use rust_common::{ONE_NODE, TWO_NODES, run_and_check};
use shmem::{Cmp, CmpValues, Shmem, SignalOp};

/// The child entry point (see `rust_common`).
#[test]
fn child_pe() {
    rust_common::child_main(|| shmem::init().expect("init"), scenario);
}

/// Every scenario as a singleton job (one PE, no launcher).
#[test]
fn every_scenario_in_a_singleton_job() {
    rust_common::singleton(
        || shmem::init().expect("init"),
        &["signal", "p2p", "lock"],
        scenario,
    );
}

fn scenario(shmem: &Shmem, name: &str) -> String {
    match name {
        "signal" => signal(shmem),
        "p2p" => p2p(shmem),
        "lock" => lock(shmem),
        "descriptors" => descriptors(shmem),
        other => panic!("unknown scenario {other}"),
    }
}

/// This PE's open descriptors, after init and a barrier (every peer's segments mapped).
fn descriptors(shmem: &Shmem) -> String {
    shmem.barrier_all();
    let n = std::fs::read_dir("/proc/self/fd").unwrap().count();
    shmem.barrier_all();
    format!("{n}")
}

fn signal(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let data = shmem.alloc_vec::<u64>(100_000).unwrap();
    let sig = shmem.alloc_box(0u64).unwrap();
    let rounds = 20u64;
    for round in 1..=rounds {
        // The data (800 kB, beyond the MTU) must be complete when the signal is seen.
        let payload: Vec<u64> = (0..100_000)
            .map(|i| round << 40 | (me as u64) << 32 | i)
            .collect();
        if round % 2 == 0 {
            shmem.put_signal(&data, &payload, &sig, 1, SignalOp::Add, right);
        } else {
            shmem.put_signal_nbi(&data, &payload, &sig, 1, SignalOp::Add, right);
        }
        let seen = shmem.signal_wait_until(&sig, Cmp::Ge, round);
        assert_eq!(seen, round, "PE {me}: signal after round {round}");
        for i in [0usize, 1, 49_999, 99_999] {
            assert_eq!(data.read(i), round << 40 | (left as u64) << 32 | i as u64);
        }
        assert!(
            data.to_vec()
                .iter()
                .enumerate()
                .all(|(i, &v)| v == round << 40 | (left as u64) << 32 | i as u64)
        );
        // The next round may overwrite `data` only after I have read it.
        shmem.quiet();
        shmem.barrier_all();
    }
    // SET: every PE sets the signal on PE 0 to its id + 100 with a zero-length put; PE 0
    // sees one of them.
    let flag = shmem.alloc_box(0u64).unwrap();
    shmem.put_signal(&data, &[], &flag, me as u64 + 100, SignalOp::Set, 0);
    shmem.barrier_all();
    if me == 0 {
        let v = shmem.signal_fetch(&flag);
        assert!((100..100 + n as u64).contains(&v), "SET signal {v}");
    }
    assert_eq!(shmem.signal_fetch(&sig), rounds);
    shmem.barrier_all();
    format!("signal ok: {rounds} rounds")
}

fn p2p(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let flag = shmem.alloc_box(0i64).unwrap();
    let ack = shmem.alloc_box(0u32).unwrap();
    // My left neighbour drives my flag through values that satisfy each comparison only
    // when set; I acknowledge each stage on its ack word.
    let stages: [(Cmp, i64, i64); 6] = [
        (Cmp::Eq, 5, 5),
        (Cmp::Ne, 5, 6),
        (Cmp::Gt, 10, 11),
        (Cmp::Ge, 20, 20),
        (Cmp::Lt, 0, -1),
        (Cmp::Le, -5, -5),
    ];
    for (k, &(cmp, value, set)) in stages.iter().enumerate() {
        // Drive my right neighbour's flag, then wait on mine.
        shmem.atomic_set(&flag, set, right);
        let seen = shmem.wait_until(&flag, cmp, value);
        assert_eq!(seen, set, "PE {me}: stage {k} {cmp:?} {value}");
        assert!(shmem.test(&flag, cmp, value));
        shmem.atomic_inc(&ack, left);
        shmem.wait_until(&ack, Cmp::Ge, k as u32 + 1);
    }
    assert!(!shmem.test(&flag, Cmp::Gt, 0));
    shmem.barrier_all();

    // Multi-element: every PE owns ivars[0..n]; PE p sets element p on every PE.
    let ivars = shmem.alloc_vec::<u64>(n).unwrap();
    let none: Vec<bool> = vec![false; n];
    let all_skipped = vec![true; n];
    assert_eq!(
        shmem.wait_until_any(&ivars, Some(&all_skipped), Cmp::Eq, CmpValues::One(0)),
        None
    );
    assert!(
        shmem
            .wait_until_some(&ivars, Some(&all_skipped), Cmp::Eq, CmpValues::One(7))
            .is_empty()
    );
    shmem.wait_until_all(&ivars, Some(&all_skipped), Cmp::Eq, CmpValues::One(7));
    assert!(shmem.test_all(&ivars, Some(&all_skipped), Cmp::Eq, CmpValues::One(7)));
    assert_eq!(
        shmem.test_any(&ivars, Some(&all_skipped), Cmp::Eq, CmpValues::One(0)),
        None
    );
    assert_eq!(
        shmem.test_any(&ivars, Some(&none), Cmp::Eq, CmpValues::One(9)),
        None
    );
    assert!(!shmem.test_all(&ivars, None, Cmp::Eq, CmpValues::One(9)));
    shmem.barrier_all();
    for pe in 0..n {
        shmem.atomic_set(ivars.at(me), 1000 + me as u64, pe);
    }
    let targets: Vec<u64> = (0..n as u64).map(|p| 1000 + p).collect();
    shmem.wait_until_all(&ivars, None, Cmp::Eq, CmpValues::Each(&targets));
    assert!(shmem.test_all(&ivars, None, Cmp::Ge, CmpValues::One(1000)));
    let some = shmem.wait_until_some(&ivars, None, Cmp::Ge, CmpValues::One(1000));
    assert_eq!(some, (0..n).collect::<Vec<_>>());
    // A mask: only my right neighbour's element counts.
    let mut mask = vec![true; n];
    mask[right] = false;
    assert_eq!(
        shmem.wait_until_any(
            &ivars,
            Some(&mask),
            Cmp::Eq,
            CmpValues::One(1000 + right as u64)
        ),
        Some(right)
    );
    assert_eq!(
        shmem.test_some(&ivars, Some(&mask), Cmp::Gt, CmpValues::One(0)),
        vec![right]
    );
    // _any reports every satisfied index over successive calls.
    let mut reported: Vec<usize> = (0..2 * n)
        .map(|_| {
            shmem
                .wait_until_any(&ivars, None, Cmp::Ge, CmpValues::One(1000))
                .unwrap()
        })
        .collect();
    reported.sort_unstable();
    reported.dedup();
    assert_eq!(reported, (0..n).collect::<Vec<_>>(), "_any rotation");
    let vector_some = shmem.test_some(&ivars, None, Cmp::Eq, CmpValues::Each(&targets));
    assert_eq!(vector_some.len(), n);
    assert_eq!(
        shmem.test_any(&ivars, None, Cmp::Lt, CmpValues::Each(&targets)),
        None
    );
    // A wait that is satisfied later: PE 0 releases everyone after a barrier.
    let go = shmem.alloc_vec::<i32>(3).unwrap();
    shmem.barrier_all();
    if me == 0 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        for pe in 0..n {
            shmem.atomic_set(go.at(1), 1, pe);
        }
    }
    let idx = shmem.wait_until_any(&go, None, Cmp::Ne, CmpValues::One(0));
    assert_eq!(idx, Some(1));
    shmem.barrier_all();
    format!("p2p ok: {} stages", stages.len())
}

fn lock(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let per_pe = 30usize;
    let lock = shmem.alloc_lock().unwrap();
    let counter = shmem.alloc_box(0u64).unwrap();
    let log_len = shmem.alloc_box(0usize).unwrap();
    let log = shmem.alloc_vec::<u32>(n * per_pe).unwrap();
    let who = shmem.alloc_vec::<u32>(n * per_pe).unwrap();
    shmem.barrier_all();
    for _ in 0..per_pe {
        let guard = lock.lock();
        // A non-atomic read-modify-write of PE 0's counter: exact only under mutual
        // exclusion (and with the previous holder's puts delivered).
        let v = shmem.g(&counter, 0);
        shmem.p(&counter, v + 1, 0);
        let at = shmem.g(&log_len, 0);
        shmem.p(log.at(at), guard.ticket(), 0);
        shmem.p(who.at(at), me as u32, 0);
        shmem.p(&log_len, at + 1, 0);
        drop(guard);
    }
    // test_lock: a free lock is taken; while PE 0 holds it, PE 1's test is refused.
    let held = shmem.alloc_box(0u64).unwrap();
    let refused = shmem.alloc_box(0u64).unwrap();
    if me == 0 {
        let g = lock.try_lock().expect("a free lock");
        assert_eq!(g.ticket(), (n * per_pe) as u32);
        shmem.p(&counter, shmem.g(&counter, 0) + 1000, 0);
        if n > 1 {
            shmem.atomic_set(&held, 1, 1);
            shmem.wait_until(&refused, Cmp::Eq, 1);
        }
        drop(g);
    } else if me == 1 {
        shmem.wait_until(&held, Cmp::Eq, 1);
        assert!(
            lock.try_lock().is_none(),
            "a held lock was taken by test_lock"
        );
        shmem.atomic_set(&refused, 1, 0);
    }
    shmem.barrier_all();
    let total = shmem.g(&counter, 0);
    assert_eq!(total, (n * per_pe) as u64 + 1000, "counter under the lock");
    if me == 0 {
        assert_eq!(log_len.read(), n * per_pe);
        // FIFO: the holders logged their tickets in the order the lock granted them.
        for i in 0..n * per_pe {
            assert_eq!(log.read(i), i as u32, "ticket log position {i}");
        }
        let mut per: Vec<usize> = vec![0; n];
        for i in 0..n * per_pe {
            per[who.read(i) as usize] += 1;
        }
        assert!(per.iter().all(|&c| c == per_pe), "{per:?}");
    }
    shmem.barrier_all();
    format!("lock ok: {total}")
}

#[test]
fn signal_one_node() {
    let r = run_and_check("signal", ONE_NODE);
    assert!(r.iter().all(|s| s == "signal ok: 20 rounds"), "{r:?}");
}

#[test]
fn signal_two_nodes() {
    let r = run_and_check("signal", TWO_NODES);
    assert!(r.iter().all(|s| s == "signal ok: 20 rounds"), "{r:?}");
}

#[test]
fn p2p_one_node() {
    let r = run_and_check("p2p", ONE_NODE);
    assert!(r.iter().all(|s| s == "p2p ok: 6 stages"), "{r:?}");
}

#[test]
fn p2p_two_nodes() {
    let r = run_and_check("p2p", TWO_NODES);
    assert!(r.iter().all(|s| s == "p2p ok: 6 stages"), "{r:?}");
}

#[test]
fn lock_one_node() {
    let r = run_and_check("lock", ONE_NODE);
    assert!(r.iter().all(|s| s == "lock ok: 1120"), "{r:?}");
}

/// A PE maps the heap and sync segments of each of its 23 same-node peers (46 mappings)
/// and holds none of their descriptors: a node of many PEs must not need 3 descriptors per
/// peer in each PE (a soft limit of 1,024 ended a node at about 340 PEs).
#[test]
fn a_pe_holds_no_descriptor_of_its_peers_segments() {
    let topo = rust_common::Topology { nodes: 1, ppn: 24 };
    let r = run_and_check("descriptors", topo);
    let counts: Vec<usize> = r.iter().map(|s| s.parse().unwrap()).collect();
    // Its own segments, control and PMI connections, doorbell, sockets, stdio and the
    // test harness's: about 20, whatever the PE count.
    assert!(
        counts.iter().all(|&n| n < 2 * 23),
        "open descriptors per PE: {counts:?}"
    );
}

#[test]
fn lock_two_nodes() {
    let r = run_and_check("lock", TWO_NODES);
    assert!(r.iter().all(|s| s == "lock ok: 1120"), "{r:?}");
}
