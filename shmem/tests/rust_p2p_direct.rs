//! Point-to-point puts straight to the target PE's endpoint (`SHMEM_P2P_DIRECT_MAX`), on 2,
//! 3 and 4 nodes (atomic services on loopback): a small blocking put to a PE of another
//! node goes to that PE's own socket, not through its service. These check that the
//! shortcut delivers, completes and keeps order, with datagrams lost on purpose.
//!
//! * `ring`: every PE `p`s a round number into the next PE's flag (a ring over the nodes)
//!   and waits for its own with `wait_until` (odd rounds) or a `test` loop (even rounds);
//!   every 5th put is lost once on the network (`shmem::testing::coll_drop`) and must be
//!   resent. Each PE checks that its puts took the shortcut (the counters) and that every
//!   round's value arrived in order.
//! * `order`: PE 0 and the last PE (another node) alternate paths to the same words: a
//!   direct `p` then a `g` through the service (the get must see the put), a direct `p`
//!   then a fetching atomic on the same word, direct data + `fence` + an atomic flag (the
//!   flag must not overtake the data), non-blocking data through the service + `fence` + a
//!   `p` flag (the flag waits for the service path), and a `p` followed by `quiet` whose
//!   completion is then announced through the sender's own memory, read back with `g`.
//!   Some of the direct puts are lost once.
//! * `signal`: a ring of `shmem_put_signal` (data and signal in one packet): every PE
//!   puts 8 words of the round and the signal into the next PE, alternating
//!   `SHMEM_SIGNAL_SET` (to 3 x the round) and `SHMEM_SIGNAL_ADD` (of 3, which makes
//!   3 x the round), and waits with `signal_wait_until`; it then checks the signal's exact value and
//!   every word of the data (the signal must not come before it). Every 4th packet is lost
//!   once. Each PE checks that its puts took the shortcut.
//! * `race` (`SHMEM_THREAD_MULTIPLE`): on PE 0 one thread `p`s rising values into a word
//!   of the last PE (straight, some lost once) and publishes each one it finished, while
//!   another thread takes the newest published value, calls `shmem_quiet`, reads the word
//!   back with a fetching atomic (through the service: it must see that value or a later
//!   one) and announces the value in PE 0's own memory; the last PE reads the announcement
//!   with `g` and checks that its word holds at least that value. So a quiet, and an
//!   operation through a service, of one thread cover the direct puts another thread
//!   finished before it, while that thread keeps sending.
//! * `off`: with `SHMEM_P2P_DIRECT_MAX=0` nothing takes the shortcut and the ring still
//!   works (the counters say 0).
//! * `sleep`: PE 0 and the last PE pass a flag back and forth, each pausing 3 ms before it
//!   answers, so that the waiter's spin ends and it sleeps. Two rounds in four the answer
//!   is a direct `p` (it wakes a waiter that sleeps on its endpoint's socket; every 8th is
//!   lost once and resent), the other two an atomic set through the receiver's service (its doorbell ring must reach that
//!   waiter through the keeper thread, or the waiter sleeps out its step); the waits
//!   alternate between `wait_until` and a `test` loop. Each checks every value, that it
//!   slept on its socket, and that rings were passed on to it.
//! * `acks`: PE 0 and the last PE play a flag ping-pong of `p` + `shmem_quiet` against
//!   `wait_until` (each round's value checked; how many acknowledgements went in datagrams
//!   of their own is reported). Then PE 0 puts and quiets 200 times while the last PE
//!   polls another flag with `test`, computing 30 us between tests (so it never naps):
//!   the quiets complete, the last put is there, and the acknowledgements went at once,
//!   sent by the failed tests (a look that finds its condition leaves them to the
//!   program's answer): at least two thirds of them (without those sends, 6-95 of 200
//!   went at once and the rest late, the keeper's, 200 us after they were owed).

mod rust_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rust_common::{Topology, report_ok, run, run_and_check};
use shmem::testing::{coll_drop, p2p_acks_alone, p2p_direct_counts, socket_sleeps};
use shmem::{Cmp, Shmem, SignalOp, ThreadLevel};

const SPIN_LIMIT: Duration = Duration::from_secs(120);

#[test]
fn child_pe() {
    let Some(s) = rust_common::child_scenario() else {
        return;
    };
    let shmem = if s == "race" {
        shmem::init_thread(ThreadLevel::Multiple).expect("init")
    } else {
        shmem::init().expect("init")
    };
    let summary = match s.as_str() {
        "ring" => ring(&shmem, true),
        "off" => ring(&shmem, false),
        "order" => order(&shmem),
        "signal" => signal(&shmem),
        "race" => race(&shmem),
        "sleep" => sleep(&shmem),
        "acks" => acks(&shmem),
        other => panic!("unknown scenario {other}"),
    };
    let me = shmem.my_pe();
    shmem.finalize().unwrap();
    report_ok(me, &summary)
}

fn ring(shmem: &Shmem, direct: bool) -> String {
    let me = shmem.my_pe();
    let n = shmem.n_pes();
    let next = (me + 1) % n;
    let flag = shmem.alloc_box(0i64).unwrap();
    shmem.barrier_all();
    let rounds = 200i64;
    let (sent0, applied0) = p2p_direct_counts();
    for round in 1..=rounds {
        // PE 0 starts each round; the others pass it on once they saw it.
        if me != 0 {
            wait(shmem, &flag, round, me);
        }
        if direct && round % 5 == 0 {
            coll_drop(1);
        }
        shmem.p(&flag, round, next);
        if me == 0 {
            wait(shmem, &flag, round, me);
        }
    }
    let (sent, applied) = p2p_direct_counts();
    let (sent, applied) = (sent - sent0, applied - applied0);
    shmem.barrier_all();
    let crosses = shmem.ptr(&flag, next).is_none();
    if direct && crosses {
        assert_eq!(
            sent, rounds as u64,
            "PE {me}: every put to PE {next} should go straight to its endpoint"
        );
    }
    if !direct {
        assert_eq!((sent, applied), (0, 0), "PE {me}: SHMEM_P2P_DIRECT_MAX=0");
    }
    format!("ring ok: {rounds} rounds")
}

fn sleep(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let last = shmem.n_pes() - 1;
    let flag = shmem.alloc_box(0i64).unwrap();
    shmem.barrier_all();
    let rounds = 40i64;
    let (sleeps0, passed0) = socket_sleeps();
    if me == 0 || me == last {
        let other = if me == 0 { last } else { 0 };
        let answer = |r: i64| {
            std::thread::sleep(Duration::from_millis(3));
            if r % 4 < 2 {
                if r % 8 == 0 {
                    // Lost once: the resend, a retransmission timeout later, must still
                    // wake the waiter asleep on its socket.
                    coll_drop(1);
                }
                shmem.p(&flag, r, other);
            } else {
                shmem.atomic_set(&flag, r, other);
            }
        };
        for r in 1..=rounds {
            if me == 0 {
                answer(r);
            }
            wait(shmem, &flag, r, me);
            if me == last {
                answer(r);
            }
        }
    }
    let (sleeps, passed) = socket_sleeps();
    let (sleeps, passed) = (sleeps - sleeps0, passed - passed0);
    shmem.barrier_all();
    if (me == 0 || me == last) && !counts_shown_only() {
        assert!(
            sleeps >= rounds as u64 / 4,
            "PE {me}: only {sleeps} of {rounds} waits slept on the endpoint's socket"
        );
        assert!(
            passed >= 1,
            "PE {me}: {sleeps} sleeps on the socket, and no doorbell ring reached one \
             (the service's atomic sets were seen only when a sleep ran out)"
        );
    }
    format!("sleep ok: {rounds} rounds, {sleeps} sleeps on the socket, {passed} rings passed on")
}

fn acks(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let last = shmem.n_pes() - 1;
    let flag = shmem.alloc_box(0i64).unwrap();
    let data = shmem.alloc_box(0i64).unwrap();
    let done = shmem.alloc_box(0i64).unwrap();
    shmem.barrier_all();
    let rounds = 200i64;
    if me != 0 && me != last {
        shmem.barrier_all();
        return "acks ok: not playing".into();
    }
    let other = if me == 0 { last } else { 0 };
    let (prompt0, late0) = p2p_acks_alone();
    for r in 1..=rounds {
        if me == 0 {
            shmem.p(&flag, r, other);
            shmem.quiet();
        }
        assert_eq!(shmem.wait_until(&flag, Cmp::Ge, r), r, "PE {me}: round {r}");
        if me == last {
            shmem.p(&flag, r, other);
            shmem.quiet();
        }
    }
    let (prompt1, late1) = p2p_acks_alone();
    // Reported, not asserted: mostly 0-50 of 200 (the answers carry the rest), but one run
    // in about six sends 60-160 alone, as every look did before (the benchmarks'
    // flag_quiet shows the difference).
    let alone = prompt1 + late1 - prompt0 - late0;
    if me == 0 {
        for r in 1..=rounds {
            shmem.p(&data, r, other);
            shmem.quiet();
        }
        shmem.p(&done, 1, other);
    } else {
        // A test loop that computes 30 us between its tests, so that it never naps (a nap
        // sends what is owed, and lets the keeper take the puts): without the
        // acknowledgements its failed tests send, only the keeper would, late.
        let t0 = Instant::now();
        while !shmem.test(&done, Cmp::Ge, 1) {
            assert!(t0.elapsed() < SPIN_LIMIT, "PE {me}: the flag never came");
            let t = Instant::now();
            while t.elapsed() < Duration::from_micros(30) {
                std::hint::spin_loop();
            }
        }
        assert_eq!(data.read(), rounds, "PE {me}: the last put before the flag");
    }
    let (prompt2, late2) = p2p_acks_alone();
    let (prompt, late) = (prompt2 - prompt1, late2 - late1);
    shmem.barrier_all();
    if me == last && !counts_shown_only() {
        // How soon they go is a benchmark's matter (put + quiet against a PE in a wait:
        // scripts/bench's put_quiet, 11 us, 33 us when they waited for the keeper); here:
        // they go at once (the failed tests send them), not after the keeper's 200 us.
        assert!(
            prompt >= 2 * rounds as u64 / 3,
            "PE {me}: while it polled another flag, {late} of the acknowledgements of \
             {rounds} puts went late (the keeper sent what the tests left owed), {prompt} \
             at once"
        );
    }
    format!("acks ok: {alone} alone in the ping-pong, then {prompt} at once, {late} late")
}

/// Set by the test under qemu: its timing (a PE descheduled for longer than the keeper's
/// 200 us, puts more than 100 ms apart) makes the counters of `sleep` and `acks` figures
/// to show, not to assert (their values are still checked).
const COUNTS_SHOWN_ONLY: &str = "P2P_TEST_COUNTS_SHOWN_ONLY";

fn counts_shown_only() -> bool {
    std::env::var_os(COUNTS_SHOWN_ONLY).is_some()
}

/// The environment of the `sleep` and `acks` jobs (see [`COUNTS_SHOWN_ONLY`]).
fn counts_env() -> Vec<(&'static str, &'static str)> {
    if gsas_tests::attack::emulated() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "NOTE: rust_p2p_direct sleep/acks: under qemu the counts of sleeps on the socket, \
             rings passed on and acknowledgements sent are shown, not asserted"
        );
        vec![(COUNTS_SHOWN_ONLY, "1")]
    } else {
        Vec::new()
    }
}

fn wait(shmem: &Shmem, flag: &shmem::SymBox<i64>, round: i64, me: usize) {
    if round % 2 == 1 {
        assert_eq!(shmem.wait_until(flag, Cmp::Ge, round), round, "PE {me}");
    } else {
        let t0 = Instant::now();
        while !shmem.test(flag, Cmp::Ge, round) {
            assert!(
                t0.elapsed() < SPIN_LIMIT,
                "PE {me}: round {round}: shmem_test never saw the flag (it is {})",
                flag.read()
            );
        }
        assert_eq!(flag.read(), round, "PE {me}");
    }
}

fn order(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let last = shmem.n_pes() - 1;
    let word = shmem.alloc_box(0u64).unwrap();
    let data = shmem.alloc_vec::<u64>(8).unwrap();
    let big = shmem.alloc_vec::<u64>(32 * 1024).unwrap();
    let flag = shmem.alloc_box(0u64).unwrap();
    let done = shmem.alloc_box(0u64).unwrap();
    shmem.barrier_all();
    let rounds = 30u64;
    if me == 0 {
        for r in 1..=rounds {
            if r % 3 == 0 {
                coll_drop(1);
            }
            // A direct put, then a get through the service of the same word.
            shmem.p(&word, 10 * r, last);
            assert_eq!(shmem.g(&word, last), 10 * r, "round {r}: get after p");
            // A direct put, then a fetching atomic on the same word.
            shmem.p(&word, 10 * r + 1, last);
            assert_eq!(
                shmem.atomic_fetch(&word, last),
                10 * r + 1,
                "round {r}: fetch after p"
            );
            // Direct data, fence, a flag through the service.
            let payload: Vec<u64> = (0..8).map(|i| r << 8 | i).collect();
            shmem.put(&data, &payload, last);
            shmem.fence();
            shmem.atomic_set(&flag, 3 * r - 2, last);
            // Data through the service, fence, a flag that must wait for it.
            let bulk: Vec<u64> = (0..big.len() as u64).map(|i| r << 32 | i).collect();
            shmem.put_nbi(&big, &bulk, last);
            shmem.fence();
            shmem.p(&flag, 3 * r - 1, last);
            // A put, quiet, then the news in this PE's own memory.
            if r % 2 == 0 {
                coll_drop(1);
            }
            shmem.p(&word, 10 * r + 2, last);
            shmem.quiet();
            shmem.p(&done, r, 0);
            assert_eq!(shmem.wait_until(&flag, Cmp::Ge, r), r, "round {r}: ack");
        }
    } else if me == last {
        let mut seen = 0;
        for r in 1..=rounds {
            shmem.wait_until(&flag, Cmp::Ge, 3 * r - 2);
            let got = data.to_vec();
            let want: Vec<u64> = (0..8).map(|i| r << 8 | i).collect();
            assert_eq!(got, want, "round {r}: the flag overtook the data");
            shmem.wait_until(&flag, Cmp::Ge, 3 * r - 1);
            let b = big.to_vec();
            if let Some(i) = (0..b.len()).find(|&i| b[i] != r << 32 | i as u64) {
                panic!(
                    "round {r}: word {i} of the bulk data is {:#x}: the flag overtook it",
                    b[i]
                );
            }
            // Once PE 0 says its quiet returned, its last put is here.
            let t0 = Instant::now();
            while shmem.g(&done, 0) < r {
                assert!(t0.elapsed() < SPIN_LIMIT, "round {r}: PE 0 never quieted");
            }
            assert_eq!(word.read(), 10 * r + 2, "round {r}: quiet returned early");
            seen += 1;
            shmem.p(&flag, r, 0);
        }
        assert_eq!(seen, rounds);
    }
    shmem.barrier_all();
    let (sent, _) = p2p_direct_counts();
    if me == 0 {
        // The three plain puts and the data of every round (the flag after the fence
        // waits for the service path).
        assert!(
            sent >= 4 * rounds,
            "PE 0 sent only {sent} puts straight to PE {last}"
        );
    }
    format!("order ok: {rounds} rounds")
}

fn signal(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let n = shmem.n_pes();
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let data = shmem.alloc_vec::<u64>(8).unwrap();
    let sig = shmem.alloc_box(0u64).unwrap();
    let words = |pe: usize, round: u64| -> Vec<u64> {
        (0..8).map(|i| (pe as u64) << 48 | round << 8 | i).collect()
    };
    shmem.barrier_all();
    let rounds = 200u64;
    let (sent0, _) = p2p_direct_counts();
    for round in 1..=rounds {
        // PE 0 starts each round; the others pass it on once they saw it.
        let take = |round: u64| {
            // Any change (a wrong value fails here instead of waiting for ever).
            let got = shmem.signal_wait_until(&sig, Cmp::Ne, 3 * (round - 1));
            assert_eq!(got, 3 * round, "PE {me}: round {round}: the signal's value");
            assert_eq!(
                data.to_vec(),
                words(prev, round),
                "PE {me}: round {round}: the data of PE {prev} (the signal came first)"
            );
        };
        if me != 0 {
            take(round);
        }
        if round % 4 == 0 {
            coll_drop(1);
        }
        let (op, value) = if round % 2 == 1 {
            (SignalOp::Set, 3 * round)
        } else {
            (SignalOp::Add, 3)
        };
        shmem.put_signal(&data, &words(me, round), &sig, value, op, next);
        if me == 0 {
            take(round);
        }
    }
    let (sent, _) = p2p_direct_counts();
    shmem.barrier_all();
    if shmem.ptr(&sig, next).is_none() {
        assert_eq!(
            sent - sent0,
            rounds,
            "PE {me}: every put with signal to PE {next} should go straight to its endpoint"
        );
    }
    format!("signal ok: {rounds} rounds")
}

fn race(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let last = shmem.n_pes() - 1;
    let word = shmem.alloc_box(0u64).unwrap();
    let done = shmem.alloc_box(0u64).unwrap();
    shmem.barrier_all();
    let rounds = 3000u64;
    let (sent0, _) = p2p_direct_counts();
    if me == 0 {
        let finished = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..=rounds {
                    if i % 16 == 0 {
                        coll_drop(1);
                    }
                    shmem.p(&word, i, last);
                    finished.store(i, Ordering::Release);
                }
            });
            let mut k = 0;
            while k < rounds {
                k = finished.load(Ordering::Acquire);
                shmem.quiet();
                let seen = shmem.atomic_fetch(&word, last);
                assert!(
                    seen >= k,
                    "PE 0: the put of {k} had returned in the other thread, but an atomic through the service after it read {seen}"
                );
                shmem.p(&done, k, 0);
            }
        });
    } else if me == last {
        let t0 = Instant::now();
        let mut k = 0;
        while k < rounds {
            k = shmem.g(&done, 0);
            let v = word.read();
            assert!(
                v >= k,
                "PE {me}: PE 0's quiet returned after its put of {k}, but the word holds {v}"
            );
            assert!(
                t0.elapsed() < SPIN_LIMIT,
                "PE {me}: PE 0 announced only {k}"
            );
        }
        assert_eq!(word.read(), rounds);
    }
    shmem.barrier_all();
    let (sent, _) = p2p_direct_counts();
    if me == 0 && shmem.ptr(&word, last).is_none() {
        // While the other thread's atomic is in flight through the service, puts go there
        // too; the rest go straight.
        assert!(
            sent - sent0 >= rounds / 10,
            "PE 0 sent only {} of {rounds} puts straight",
            sent - sent0
        );
    }
    format!("race ok: {rounds} puts")
}

fn topo(nodes: u32) -> Topology {
    Topology { nodes, ppn: 1 }
}

#[test]
fn a_ring_of_direct_puts_on_two_three_and_four_nodes_with_losses() {
    for nodes in [2, 3, 4] {
        let r = run_and_check("ring", topo(nodes));
        assert!(r.iter().all(|s| s == "ring ok: 200 rounds"), "{r:?}");
    }
    let r = run_and_check("ring", Topology { nodes: 2, ppn: 2 });
    assert!(r.iter().all(|s| s == "ring ok: 200 rounds"), "{r:?}");
}

#[test]
fn direct_puts_keep_their_order_with_the_service_path() {
    for nodes in [2, 3] {
        let r = run_and_check("order", topo(nodes));
        assert!(r.iter().all(|s| s == "order ok: 30 rounds"), "{r:?}");
    }
}

#[test]
fn puts_with_signal_go_straight_with_their_signal_on_two_three_and_four_nodes() {
    for nodes in [2, 3, 4] {
        let r = run_and_check("signal", topo(nodes));
        assert!(r.iter().all(|s| s == "signal ok: 200 rounds"), "{r:?}");
    }
}

#[test]
fn one_threads_quiet_covers_the_direct_puts_another_thread_finished() {
    for nodes in [2, 3] {
        let r = run_and_check("race", topo(nodes));
        assert!(r.iter().all(|s| s == "race ok: 3000 puts"), "{r:?}");
    }
}

#[test]
fn a_waiter_asleep_on_its_socket_is_woken_by_direct_puts_and_by_its_doorbell() {
    for nodes in [2, 3, 4] {
        let (report, dir) = run("sleep", topo(nodes), &counts_env());
        let r = rust_common::check(&report, &dir, topo(nodes));
        assert!(
            r.iter().all(|s| s.starts_with("sleep ok: 40 rounds")),
            "{r:?}"
        );
        eprintln!("{nodes} nodes: {r:?}");
    }
}

#[test]
fn answers_carry_the_acknowledgements_and_a_waiting_pe_sends_them_itself() {
    for nodes in [2, 3, 4] {
        let (report, dir) = run("acks", topo(nodes), &counts_env());
        let r = rust_common::check(&report, &dir, topo(nodes));
        assert!(r.iter().all(|s| s.starts_with("acks ok")), "{r:?}");
        eprintln!("{nodes} nodes: {r:?}");
    }
}

#[test]
fn without_the_shortcut_nothing_takes_it() {
    let t = topo(2);
    let (report, dir) = run("off", t, &[("SHMEM_P2P_DIRECT_MAX", "0")]);
    let r = rust_common::check(&report, &dir, t);
    assert!(r.iter().all(|s| s == "ring ok: 200 rounds"), "{r:?}");
}
