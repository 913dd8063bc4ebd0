//! The OpenSHMEM 1.6 routines gsas has so far, through the Rust API (the C ABI runs the
//! same internals: `c_suite`'s `openshmem16.c`), on one node (four PEs, direct stores) and
//! on two nodes (two PEs each: every other PE across the network).
//!
//! * `signals`: every PE adds to a signal word on every PE (`signal_add`, default and a
//!   created context), 50 times each; then each PE waits for the exact total on its own
//!   word and sets every other PE's second word (`signal_set`) to a value naming itself,
//!   and the owner checks it after a barrier.
//! * `pe_quiet`: PE 0 puts 256 KiB non-blocking to the last PE, calls `pe_quiet` for that PE
//!   (and a second time for itself: a same-node fence), then stores the round into its own
//!   memory; the last PE reads that word with `g` (a path not ordered with the put) and,
//!   once it sees the round, checks every word: a `pe_quiet` that returned before the
//!   fragments were delivered fails it. 30 rounds.
//! * `session`: in a `SHMEM_CTX_SESSION_BATCH` session, each PE puts 2,000 single words
//!   (blocking `p` and 8-byte `put` from one buffer it rewrites after every call) into the
//!   next PE's array, stops the session, quiets and meets the others in a barrier; every
//!   word is checked. A held put that kept a pointer to the caller's buffer instead of its
//!   bytes, or a held frame that was lost, fails it. The session reports its options and
//!   `total_ops` hint. Then PE 0 holds a put to the other node's first PE in a session and
//!   waits for its answer calling nothing: only the progress keeper sends the held frame.
//! * `scan`: `sum_inscan` and `sum_exscan` on the world team and on the team of the world
//!   in reverse order (team PE `i` is world PE `n - 1 - i`, so team order is not world
//!   order), out of place and in place, over `i64` (values that show which PEs were summed:
//!   PE `k` contributes `1 << (4 * k)`, times `j + 1` in element `j`), `f64` (halves, exact;
//!   the exclusive scan of team PE 0 is `-0.0`, the identity of a floating-point sum, which
//!   the test tells apart from `+0.0`) and `Complex64`; 3 and 1000 elements.
//! * `reinit`: three initialization cycles in one process (`init`, `init_thread` with another
//!   level, `init` again after each `finalize`): each cycle's first allocation has the
//!   first cycle's address (the last finalize emptied the heap), puts to the next PE carry
//!   the cycle, and a sum reduction over the world sees every PE's cycle-dependent value.
//! * `query_initialized` is false before `init`, true between `init` and `finalize`, false
//!   after (checked in every scenario).

mod rust_common;

use std::time::{Duration, Instant};

use rust_common::{ONE_NODE, TWO_NODES, Topology, report_ok, run_and_check};
use shmem::{Cmp, Complex64, CtxOptions, SessionOptions, Shmem, TeamConfig, ThreadLevel, op};

/// Bound on the `g` polling loop (the library bounds its own waits).
const SPIN_LIMIT: Duration = Duration::from_secs(120);

/// The child entry point (see `rust_common`).
#[test]
fn child_pe() {
    let Some(s) = rust_common::child_scenario() else {
        return;
    };
    assert!(!shmem::query_initialized(), "query_initialized before init");
    if s == "reinit" {
        let (me, summary) = reinit();
        report_ok(me, &summary);
    }
    let shmem = shmem::init().expect("init");
    assert!(shmem::query_initialized(), "query_initialized after init");
    let summary = match s.as_str() {
        "signals" => signals(&shmem),
        "pe_quiet" => pe_quiet(&shmem),
        "session" => session(&shmem),
        "scan" => scan(&shmem),
        other => panic!("unknown scenario {other}"),
    };
    let me = shmem.my_pe();
    shmem.finalize().unwrap();
    assert!(
        !shmem::query_initialized(),
        "query_initialized after finalize"
    );
    report_ok(me, &summary)
}

fn signals(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let n = shmem.n_pes();
    let sig = shmem.alloc_vec::<u64>(2).unwrap();
    let ctx = shmem.ctx_create(CtxOptions::NONE).unwrap();
    shmem.barrier_all();
    let rounds = 50u64;
    for round in 0..rounds {
        for pe in 0..n {
            // Alternate the default and the created context; values differ per sender.
            let value = 1 + me as u64;
            if round % 2 == 0 {
                shmem.signal_add(sig.at(0), value, pe);
            } else {
                ctx.signal_add(sig.at(0), value, pe);
            }
        }
    }
    // Every PE adds rounds * (1 + sender) from each sender.
    let total: u64 = (0..n as u64).map(|s| rounds * (1 + s)).sum();
    assert_eq!(
        shmem.signal_wait_until(sig.at(0), Cmp::Eq, total),
        total,
        "PE {me}: the sum of every signal_add"
    );
    for pe in (0..n).filter(|&p| p != me) {
        // Each PE is set by several; the last set wins, so every setter writes a value that
        // names the target and the setter, and the owner checks it is one of them.
        ctx.signal_set(sig.at(1), (pe as u64) << 32 | me as u64 | 1 << 63, pe);
    }
    ctx.quiet();
    shmem.barrier_all();
    let set = shmem.signal_fetch(sig.at(1));
    if n > 1 {
        assert_eq!(set >> 63, 1, "PE {me}: signal_set arrived ({set:#x})");
        assert_eq!((set >> 32) & 0x7fff_ffff, me as u64, "PE {me}: set for me");
        assert_ne!(set & 0xffff_ffff, me as u64, "PE {me}: set by another PE");
    }
    shmem.barrier_all();
    drop(ctx);
    format!("signals ok: {total}")
}

fn pe_quiet(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let last = shmem.n_pes() - 1;
    let len = 256 * 1024 / 8;
    let data = shmem.alloc_vec::<u64>(len).unwrap();
    let ready = shmem.alloc_box(0u64).unwrap();
    let ack = shmem.alloc_box(0u64).unwrap();
    shmem.barrier_all();
    let rounds = 30u64;
    for round in 1..=rounds {
        if me == 0 {
            let payload: Vec<u64> = (0..len).map(|i| round << 32 | i as u64).collect();
            shmem.put_nbi(&data, &payload, last);
            shmem.pe_quiet(&[last]);
            shmem.pe_quiet(&[0]);
            // A store to this PE's own memory: no ordering with the put but pe_quiet's.
            shmem.p(&ready, round, 0);
            assert_eq!(shmem.wait_until(&ack, Cmp::Ge, round), round);
        } else if me == last {
            let t0 = Instant::now();
            while shmem.g(&ready, 0) < round {
                assert!(t0.elapsed() < SPIN_LIMIT, "round {round}: never announced");
            }
            let got = data.to_vec();
            let wrong = (0..len)
                .filter(|&i| got[i] != round << 32 | i as u64)
                .count();
            assert_eq!(
                wrong, 0,
                "round {round}: {wrong} of {len} words not delivered at PE 0's pe_quiet"
            );
            shmem.p(&ack, round, 0);
        }
    }
    // No PE named: returns at once.
    shmem.pe_quiet(&[]);
    shmem.barrier_all();
    format!("pe_quiet ok: {rounds} rounds")
}

fn session(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let n = shmem.n_pes();
    let next = (me + 1) % n;
    let words = 2000;
    let data = shmem.alloc_vec::<u64>(words).unwrap();
    shmem.barrier_all();
    let value = |from: usize, i: usize| (from as u64) << 48 | 0xbeef << 16 | i as u64;
    {
        let s = shmem.session(SessionOptions::BATCH, Some(2 * words));
        assert_eq!(s.options(), SessionOptions::BATCH);
        assert_eq!(s.total_ops(), 2 * words);
        let mut buf = [0u64; 1];
        for i in 0..words {
            if i % 2 == 0 {
                shmem.p(data.at(i), value(me, i), next);
            } else {
                // One buffer for every put, rewritten after each: a blocking put returns
                // when its source may be reused, session or not.
                buf[0] = value(me, i);
                shmem.put(data.at(i), &buf, next);
                buf[0] = u64::MAX;
            }
        }
        s.stop();
    }
    shmem.quiet();
    shmem.barrier_all();
    let from = (me + n - 1) % n;
    let got = data.to_vec();
    let wrong: Vec<usize> = (0..words).filter(|&i| got[i] != value(from, i)).collect();
    assert!(
        wrong.is_empty(),
        "PE {me}: {} of {words} words wrong after the session, first {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    // A second session on the default context with no hint.
    let s = shmem.session(SessionOptions::NONE, None);
    assert_eq!(s.total_ops(), usize::MAX);
    drop(s);
    shmem.barrier_all();
    held_put_leaves_while_the_sender_computes(shmem);
    format!("session ok: {words} words")
}

fn scan(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let n = shmem.n_pes();
    let world = shmem.team_world();
    let reversed = world
        .split_strided(n - 1, -1, n, TeamConfig::default())
        .unwrap()
        .expect("every PE is in the reversed team");
    let mut checked = 0;
    for len in [3usize, 1000] {
        let a = shmem.alloc_vec::<i64>(len).unwrap();
        let b = shmem.alloc_vec::<i64>(len).unwrap();
        let f = shmem.alloc_vec::<f64>(len).unwrap();
        let c = shmem.alloc_vec::<Complex64>(len).unwrap();
        for (team, rank) in [(world, me), (reversed.team(), n - 1 - me)] {
            assert_eq!(team.my_pe(), Some(rank));
            let int = |k: usize, j: usize| (1i64 << (4 * k)) * (j as i64 + 1);
            let half = |k: usize, j: usize| k as f64 + 0.5 + j as f64;
            let cplx = |k: usize, j: usize| Complex64 {
                re: k as f64,
                im: -(j as f64),
            };
            let ranks = |exclusive: bool| 0..if exclusive { rank } else { rank + 1 };
            for exclusive in [false, true] {
                let scan_i64 = |dest, src| {
                    if exclusive {
                        team.sum_exscan(dest, src)
                    } else {
                        team.sum_inscan(dest, src)
                    }
                };
                // Out of place, then in place.
                for j in 0..len {
                    a.write(j, int(rank, j));
                    b.write(j, -1);
                }
                scan_i64(&b, &a).unwrap();
                let want: Vec<i64> = (0..len)
                    .map(|j| ranks(exclusive).map(|k| int(k, j)).sum())
                    .collect();
                assert_eq!(
                    b.to_vec(),
                    want,
                    "i64 out of place, exclusive {exclusive}, team rank {rank}"
                );
                assert!(
                    (0..len).all(|j| a.read(j) == int(rank, j)),
                    "the source is unchanged"
                );
                scan_i64(&a, &a).unwrap();
                assert_eq!(a.to_vec(), want, "i64 in place, exclusive {exclusive}");

                for j in 0..len {
                    f.write(j, half(rank, j));
                }
                if exclusive {
                    team.sum_exscan(&f, &f).unwrap();
                } else {
                    team.sum_inscan(&f, &f).unwrap();
                }
                for j in 0..len {
                    let want: f64 = ranks(exclusive).map(|k| half(k, j)).sum();
                    let got = f.read(j);
                    if exclusive && rank == 0 {
                        assert!(
                            got == 0.0 && got.is_sign_negative(),
                            "-0.0 on team PE 0, got {got}"
                        );
                    } else {
                        assert_eq!(got, want, "f64 element {j}, exclusive {exclusive}");
                    }
                }

                for j in 0..len {
                    c.write(j, cplx(rank, j));
                }
                if exclusive {
                    team.sum_exscan(&c, &c).unwrap();
                } else {
                    team.sum_inscan(&c, &c).unwrap();
                }
                for j in 0..len {
                    let got = c.read(j);
                    let k = ranks(exclusive).count() as f64;
                    let re: f64 = ranks(exclusive).map(|k| k as f64).sum();
                    assert_eq!(
                        (got.re, got.im),
                        (re, -(j as f64) * k),
                        "complex element {j}"
                    );
                }
                checked += 1;
            }
        }
        shmem.barrier_all();
    }
    drop(reversed);
    format!("scan ok: {checked} scans of each type")
}

/// A put held by a batch session leaves although its sender makes no library call after
/// it: PE 0 puts a flag into the first PE of the second half (another node in the two-node
/// job), then reads its own acknowledgement word with plain loads, calling nothing; the
/// flag's PE waits for it and acknowledges with a put, which PE 0's service applies. Only
/// the progress keeper can send the held frame, so without it this never ends (the loop
/// gives up after `SPIN_LIMIT` with the reason).
fn held_put_leaves_while_the_sender_computes(shmem: &Shmem) {
    let me = shmem.my_pe();
    let far = shmem.n_pes() / 2;
    let flag = shmem.alloc_box(0u64).unwrap();
    let ack = shmem.alloc_box(0u64).unwrap();
    shmem.barrier_all();
    if me == 0 {
        let s = shmem.session(SessionOptions::BATCH, None);
        shmem.p(&flag, 1, far);
        let t0 = Instant::now();
        while ack.read() == 0 {
            assert!(
                t0.elapsed() < SPIN_LIMIT,
                "the held put never left while its sender computed"
            );
            std::hint::spin_loop();
        }
        s.stop();
    } else if me == far {
        assert_eq!(shmem.wait_until(&flag, Cmp::Eq, 1), 1);
        shmem.p(&ack, 1, 0);
        shmem.quiet();
    }
    shmem.barrier_all();
}

fn reinit() -> (usize, String) {
    const CYCLES: u64 = 3;
    let mut first = None;
    let mut me = 0;
    for cycle in 0..CYCLES {
        let shmem = if cycle == 1 {
            shmem::init_thread(ThreadLevel::Serialized).expect("init_thread, cycle 1")
        } else {
            shmem::init().expect("init")
        };
        assert!(
            shmem::query_initialized(),
            "cycle {cycle}: query_initialized"
        );
        me = shmem.my_pe();
        let n = shmem.n_pes();
        let data = shmem.alloc_vec::<u64>(64).unwrap();
        let total = shmem.alloc_vec::<u64>(2).unwrap();
        let at = data.as_ptr() as usize;
        assert_eq!(
            *first.get_or_insert(at),
            at,
            "cycle {cycle}: the first block moved: the last finalize did not empty the heap"
        );
        let words: Vec<u64> = (0..64)
            .map(|i| cycle << 32 | (me as u64) << 16 | i)
            .collect();
        shmem.barrier_all();
        shmem.put(&data, &words, (me + 1) % n);
        shmem.barrier_all();
        let from = (me + n - 1) as u64 % n as u64;
        for (i, got) in data.to_vec().into_iter().enumerate() {
            assert_eq!(
                got,
                cycle << 32 | from << 16 | i as u64,
                "cycle {cycle}: word {i}"
            );
        }
        shmem.p(total.at(1), me as u64 + cycle, me);
        shmem.barrier_all();
        shmem
            .team_world()
            .reduce(op::Sum, total.at(0), total.at(1))
            .unwrap();
        let n64 = n as u64;
        assert_eq!(
            total.to_vec()[0],
            n64 * (n64 - 1) / 2 + n64 * cycle,
            "cycle {cycle}: the sum"
        );
        drop((data, total));
        shmem.finalize().unwrap();
        assert!(!shmem::query_initialized(), "cycle {cycle}: after finalize");
    }
    (me, format!("reinit ok: {CYCLES} cycles"))
}

fn check(scenario: &str, topo: Topology, want: &str) {
    let r = run_and_check(scenario, topo);
    assert!(r.iter().all(|s| s == want), "{r:?}");
}

#[test]
fn signal_add_and_set_on_one_node() {
    check("signals", ONE_NODE, "signals ok: 500");
}

#[test]
fn signal_add_and_set_across_nodes() {
    check("signals", TWO_NODES, "signals ok: 500");
}

#[test]
fn pe_quiet_completes_puts_to_the_named_pe_on_one_node() {
    check("pe_quiet", ONE_NODE, "pe_quiet ok: 30 rounds");
}

#[test]
fn pe_quiet_completes_puts_to_the_named_pe_across_nodes() {
    check("pe_quiet", TWO_NODES, "pe_quiet ok: 30 rounds");
}

#[test]
fn batch_session_puts_arrive_on_one_node() {
    check("session", ONE_NODE, "session ok: 2000 words");
}

#[test]
fn batch_session_puts_arrive_across_nodes() {
    check("session", TWO_NODES, "session ok: 2000 words");
}

#[test]
fn initialization_cycles_on_one_node() {
    check("reinit", ONE_NODE, "reinit ok: 3 cycles");
}

#[test]
fn initialization_cycles_across_nodes() {
    check("reinit", TWO_NODES, "reinit ok: 3 cycles");
}

#[test]
fn scans_on_one_node() {
    check("scan", ONE_NODE, "scan ok: 8 scans of each type");
}

#[test]
fn scans_across_nodes() {
    check("scan", TWO_NODES, "scan ok: 8 scans of each type");
}
