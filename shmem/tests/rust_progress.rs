//! Progress across two nodes (two atomic services on loopback, one PE each): a PE that only
//! waits or tests must keep its own remote operations moving, and updates made by the
//! other node's PE must reach it, with no `quiet`, fence or barrier between an update and
//! the wait for it.
//!
//! * `signal`: both PEs put 200 KiB with a signal (blocking and non-blocking alternately)
//!   to each other, wait for their own signal, check the data, acknowledge with an atomic
//!   set, and wait for the acknowledgement.
//! * `pingpong`: a flag bounced 300 times with `p` (PE 0 pings, PE 1 answers), waited for
//!   with `wait_until` in half of the rounds and by spinning on `test` in the others.
//! * `nbi`: both PEs put 64 KiB non-blocking, then only wait (`wait_until_all` on the data
//!   arriving from the other PE), then acknowledge with another non-blocking put and wait
//!   for the other's acknowledgement: the non-blocking frames must leave while their issuer
//!   spins.
//! * `lock`: both PEs increment a counter on PE 1 under a lock that lives on PE 0, with a
//!   non-atomic get + put: exact only if the lock excludes and its release delivers the put.
//! * `quiet`: PE 0 puts 256 KiB non-blocking to PE 1, calls `quiet` twice (the second has
//!   nothing left to complete: the fast path of a settled node), then stores the round
//!   number into its own memory; PE 1 reads that word with `g` (through PE 0's service,
//!   a path not ordered with the put) and, once it sees the round, checks every word of
//!   the data; 40 rounds of new values. A quiet that returned before the fragments were
//!   delivered (many are still in the issuer's queue when `put_nbi` returns) fails it.
//! * `exit`: finalize at exit. PE 0 puts 64 KiB non-blocking to PE 1 and exits at once
//!   (`std::process::exit(0)`: no quiet, no finalize, no destructors); PE 1 waits for the
//!   data and exits the same way. Only the library's exit handler (the implicit finalize:
//!   quiet, barrier, leave) sends PE 0's data and lets the job end with status 0.

mod rust_common;

use std::time::{Duration, Instant};

use rust_common::{Topology, report_ok, run_and_check};
use shmem::{Cmp, CmpValues, Shmem, SignalOp};

/// One PE on each of two nodes: every operation to the other PE crosses the network.
const PAIR: Topology = Topology { nodes: 2, ppn: 1 };

/// Bound on the test-spinning loops (the library bounds its own waits).
const SPIN_LIMIT: Duration = Duration::from_secs(120);

/// The child entry point (see `rust_common`).
#[test]
fn child_pe() {
    let Some(s) = rust_common::child_scenario() else {
        return;
    };
    let shmem = shmem::init().expect("init");
    assert_eq!(
        shmem.n_pes(),
        2,
        "these scenarios run with one PE on each of two nodes"
    );
    if s == "exit" {
        exit_without_finalize(&shmem);
    }
    let summary = match s.as_str() {
        "signal" => signal(&shmem),
        "pingpong" => pingpong(&shmem),
        "nbi" => nbi(&shmem),
        "lock" => lock(&shmem),
        "quiet" => quiet(&shmem),
        other => panic!("unknown scenario {other}"),
    };
    let me = shmem.my_pe();
    shmem.finalize().unwrap();
    report_ok(me, &summary)
}

fn word(round: u64, pe: usize, i: usize) -> u64 {
    round << 40 | (pe as u64) << 32 | i as u64
}

fn signal(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let other = 1 - me;
    let len = 200 * 1024 / 8;
    let data = shmem.alloc_vec::<u64>(len).unwrap();
    let sig = shmem.alloc_box(0u64).unwrap();
    let ack = shmem.alloc_box(0u64).unwrap();
    shmem.barrier_all();
    let rounds = 8u64;
    for round in 1..=rounds {
        let payload: Vec<u64> = (0..len).map(|i| word(round, me, i)).collect();
        if round % 2 == 1 {
            shmem.put_signal(&data, &payload, &sig, round, SignalOp::Set, other);
        } else {
            shmem.put_signal_nbi(&data, &payload, &sig, round, SignalOp::Set, other);
        }
        let seen = shmem.signal_wait_until(&sig, Cmp::Ge, round);
        assert_eq!(seen, round, "PE {me}: signal of round {round}");
        let got = data.to_vec();
        if let Some(i) = (0..len).find(|&i| got[i] != word(round, other, i)) {
            panic!(
                "PE {me}: round {round}: word {i} is {:#x}, expected {:#x} (the signal came before the data)",
                got[i],
                word(round, other, i)
            );
        }
        shmem.atomic_set(&ack, round, other);
        assert_eq!(shmem.wait_until(&ack, Cmp::Ge, round), round);
    }
    shmem.barrier_all();
    format!("signal ok: {rounds} rounds")
}

fn pingpong(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let other = 1 - me;
    let flag = shmem.alloc_box(0i64).unwrap();
    shmem.barrier_all();
    let rounds = 300i64;
    for round in 1..=rounds {
        // PE 0 pings, PE 1 answers: each update is sent only after the update it answers
        // arrived, so no two updates of one flag are in flight at once.
        if me == 0 {
            shmem.p(&flag, round, other);
        }
        if round % 4 < 2 {
            assert_eq!(shmem.wait_until(&flag, Cmp::Ge, round), round);
        } else {
            let t0 = Instant::now();
            while !shmem.test(&flag, Cmp::Ge, round) {
                assert!(
                    t0.elapsed() < SPIN_LIMIT,
                    "PE {me}: round {round}: shmem_test never saw the flag (it is {})",
                    flag.read()
                );
            }
            assert_eq!(flag.read(), round);
        }
        if me == 1 {
            shmem.p(&flag, round, other);
        }
    }
    shmem.barrier_all();
    assert_eq!(flag.read(), rounds);
    format!("pingpong ok: {rounds} rounds")
}

fn nbi(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let other = 1 - me;
    let len = 64 * 1024 / 8;
    let data = shmem.alloc_vec::<u64>(len).unwrap();
    let ack = shmem.alloc_box(0u64).unwrap();
    shmem.barrier_all();
    let rounds = 10u64;
    for round in 1..=rounds {
        let payload: Vec<u64> = (0..len).map(|i| word(round, me, i)).collect();
        shmem.put_nbi(&data, &payload, other);
        // From here on this PE only waits: its non-blocking frames must leave meanwhile.
        let expect: Vec<u64> = (0..len).map(|i| word(round, other, i)).collect();
        shmem.wait_until_all(&data, None, Cmp::Eq, CmpValues::Each(&expect));
        assert_eq!(data.to_vec(), expect, "PE {me}: round {round}");
        // Acknowledge non-blockingly too (an 8-byte put of a value below 256: one byte
        // changes, so the waiter cannot see a torn value), and wait for the other's.
        shmem.put_nbi(&ack, &[round], other);
        assert_eq!(shmem.wait_until(&ack, Cmp::Ge, round), round);
    }
    shmem.barrier_all();
    format!("nbi ok: {rounds} rounds")
}

fn lock(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let lock = shmem.alloc_lock().unwrap();
    let counter = shmem.alloc_box(0u64).unwrap();
    shmem.barrier_all();
    let per_pe = 100u64;
    for _ in 0..per_pe {
        let guard = lock.lock();
        let v = shmem.g(&counter, 1);
        shmem.p(&counter, v + 1, 1);
        drop(guard);
    }
    shmem.barrier_all();
    let total = shmem.g(&counter, 1);
    assert_eq!(total, 2 * per_pe, "PE {me}: counter under the lock");
    format!("lock ok: {total}")
}

fn quiet(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let len = 256 * 1024 / 8;
    let data = shmem.alloc_vec::<u64>(len).unwrap();
    let ready = shmem.alloc_box(0u64).unwrap();
    let ack = shmem.alloc_box(0u64).unwrap();
    shmem.barrier_all();
    let rounds = 40u64;
    for round in 1..=rounds {
        if me == 0 {
            let payload: Vec<u64> = (0..len).map(|i| word(round, 0, i)).collect();
            shmem.put_nbi(&data, &payload, 1);
            shmem.quiet();
            shmem.quiet();
            // A store to this PE's own memory: no ordering with the put but the quiet's.
            shmem.p(&ready, round, 0);
            assert_eq!(shmem.wait_until(&ack, Cmp::Ge, round), round);
        } else {
            // Read PE 0's word through PE 0's service until the round is announced: a path
            // of its own, not ordered with PE 0's put.
            let t0 = Instant::now();
            while shmem.g(&ready, 0) < round {
                assert!(t0.elapsed() < SPIN_LIMIT, "round {round}: never announced");
            }
            let expect: Vec<u64> = (0..len).map(|i| word(round, 0, i)).collect();
            let wrong = data
                .to_vec()
                .iter()
                .zip(&expect)
                .filter(|(a, b)| a != b)
                .count();
            assert_eq!(
                wrong, 0,
                "round {round}: {wrong} of {len} words not delivered at PE 0's quiet"
            );
            shmem.p(&ack, round, 0);
        }
    }
    shmem.barrier_all();
    format!("quiet ok: {rounds} rounds")
}

fn exit_without_finalize(shmem: &Shmem) -> ! {
    let me = shmem.my_pe();
    let len = 64 * 1024 / 8;
    let data = shmem.alloc_vec::<u64>(len).unwrap();
    shmem.barrier_all();
    let dir = std::path::PathBuf::from(std::env::var_os(rust_common::DIR).expect("SHMEM_TEST_DIR"));
    if me == 0 {
        let payload: Vec<u64> = (0..len).map(|i| word(1, 0, i)).collect();
        shmem.put_nbi(&data, &payload, 1);
    } else {
        let expect: Vec<u64> = (0..len).map(|i| word(1, 0, i)).collect();
        shmem.wait_until_all(&data, None, Cmp::Eq, CmpValues::Each(&expect));
        assert_eq!(data.to_vec(), expect, "PE 1: the data of PE 0");
    }
    std::fs::write(dir.join(format!("pe{me}.ok")), "exit ok").unwrap();
    std::process::exit(0)
}

#[test]
fn signal_wait_across_nodes() {
    let r = run_and_check("signal", PAIR);
    assert!(r.iter().all(|s| s == "signal ok: 8 rounds"), "{r:?}");
}

#[test]
fn pingpong_wait_until_across_nodes() {
    let r = run_and_check("pingpong", PAIR);
    assert!(r.iter().all(|s| s == "pingpong ok: 300 rounds"), "{r:?}");
}

#[test]
fn nbi_put_completes_while_issuer_waits() {
    let r = run_and_check("nbi", PAIR);
    assert!(r.iter().all(|s| s == "nbi ok: 10 rounds"), "{r:?}");
}

#[test]
fn lock_across_nodes() {
    let r = run_and_check("lock", PAIR);
    assert!(r.iter().all(|s| s == "lock ok: 200"), "{r:?}");
}

#[test]
fn quiet_delivers_nbi_puts_before_it_returns() {
    let r = run_and_check("quiet", PAIR);
    assert!(r.iter().all(|s| s == "quiet ok: 40 rounds"), "{r:?}");
}

#[test]
fn exit_without_finalize_flushes_and_ends_cleanly() {
    // A lost flush would leave PE 1 waiting: let its wait fail well before the job limit.
    let (report, dir) = rust_common::run("exit", PAIR, &[("SHMEM_WAIT_TIMEOUT", "60")]);
    let r = rust_common::check(&report, &dir, PAIR);
    assert!(r.iter().all(|s| s == "exit ok"), "{r:?}");
}
