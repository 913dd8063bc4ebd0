//! Cross-node ping-pong: the time of one round of a flag bounced between two PEs on two
//! nodes with `shmem_p` and `shmem_wait_until`, with several pairs at once so that there
//! are more processes than cores (the case where waits sleep).
//!
//! ```sh
//! cargo bench -p shmem --bench pingpong_bench          # 4 pairs: 8 PEs on two nodes
//! cargo bench -p shmem --bench pingpong_bench -- 1     # 1 pair
//! cargo bench -p shmem --bench pingpong_bench -- 4 quick
//! cargo bench -p shmem --bench pingpong_bench -- 1 gap # wake-up after an idle gap
//! ```
//!
//! **Method.** Two atomic services on loopback, `pairs` PEs on each node; PE `i` on node 0
//! pings PE `i + pairs` on node 1, which answers. Every pair runs a warm-up, then batches of
//! rounds (each batch starts after a barrier); each PE takes the median time per round over
//! its batches, and the figure is the largest median of all PEs (the slowest pair), with
//! the best batch of that PE beside it.
//!
//! **`gap`** measures how soon a waiter that has been waiting for a while (and so sleeps
//! in its longest steps) sees an update: the pinger sleeps [`GAP`] between updates and
//! sends its `CLOCK_MONOTONIC` time as the flag's value; the waiter takes the difference to
//! its own clock when `shmem_wait_until` returns (one clock: all PEs run on this machine)
//! and acknowledges the update, which the pinger waits for before its next pause.
//! The figures are the median and 90th percentile of that one-way latency over all updates
//! of the slowest waiter.
//!
//! A benchmark, not a test: it asserts nothing about the figures.

mod common;

use std::time::{Duration, Instant};

use shmem::Cmp;

const CHILD: &str = "PINGPONG_BENCH_CHILD";
const OUT: &str = "PINGPONG_BENCH_OUT";
const GAP_ENV: &str = "PINGPONG_BENCH_GAP";
/// The pinger's pause between updates in `gap` mode.
const GAP: Duration = Duration::from_millis(3);

/// `CLOCK_MONOTONIC` in nanoseconds (the same clock in every process of the machine).
fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "quick");
    let gap = args.iter().any(|a| a == "gap");
    let pairs: u32 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(4).max(1);
    let mut env = Vec::new();
    if gap {
        env.push((GAP_ENV.into(), "1".into()));
    }
    let table = common::run(&common::BenchJob {
        name: "pingpong-bench",
        nodes: 2,
        ppn: pairs,
        salt: 0x70,
        child_var: CHILD,
        out_var: OUT,
        quick,
        env,
    });
    let size = 2 * pairs;
    println!("pingpong_bench: {pairs} pair(s), {size} PEs on two nodes\n{table}");
}

fn child() {
    let shmem = shmem::init().expect("shmem::init");
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let pairs = n / 2;
    let (other, pinger) = if me < pairs {
        (me + pairs, true)
    } else {
        (me - pairs, false)
    };
    let quick = std::env::var(CHILD).as_deref() == Ok("quick");
    let (warm, batches, per) = if quick { (20, 3, 20) } else { (200, 15, 200) };
    let flag = shmem.alloc_box(0i64).unwrap();
    if std::env::var_os(GAP_ENV).is_some() {
        gap(&shmem, &flag, other, pinger, if quick { 20 } else { 300 });
        drop(flag);
        shmem.finalize().unwrap();
        return;
    }
    let mut round = 0i64;
    let mut bounce = |count: usize| {
        for _ in 0..count {
            round += 1;
            if pinger {
                shmem.p(&flag, round, other);
            }
            shmem.wait_until(&flag, Cmp::Ge, round);
            if !pinger {
                shmem.p(&flag, round, other);
            }
        }
    };
    shmem.barrier_all();
    bounce(warm);
    let mut times: Vec<f64> = (0..batches)
        .map(|_| {
            shmem.barrier_all();
            let t = Instant::now();
            bounce(per);
            t.elapsed().as_secs_f64() * 1e6 / per as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    if let Some(all) = gather(&shmem, times[times.len() / 2], times[0]) {
        let slowest = slowest(&all);
        let medians: Vec<String> = all.iter().map(|f| format!("{:.1}", f.0)).collect();
        let table = format!(
            "  round trip (us): median {:.1}, best batch {:.1} (slowest PE {slowest})\n  \
             per-PE medians: {}\n  ({batches} batches of {per} rounds after {warm})\n",
            all[slowest].0,
            all[slowest].1,
            medians.join(" ")
        );
        std::fs::write(std::env::var_os(OUT).expect("PINGPONG_BENCH_OUT"), table)
            .expect("writing the table");
    }
    drop(flag);
    shmem.finalize().unwrap();
}

/// The `gap` mode (see the module docs).
fn gap(
    shmem: &shmem::Shmem,
    flag: &shmem::SymBox<i64>,
    other: usize,
    pinger: bool,
    updates: usize,
) {
    shmem.barrier_all();
    // The waiter acknowledges every update, and the pinger sends the next one only after
    // the acknowledgement: two updates never meet in the flag.
    let ack = shmem.alloc_box(0i64).unwrap();
    let mut lat_us = Vec::with_capacity(updates);
    let mut last = 0i64;
    for round in 1..=updates as i64 {
        if pinger {
            std::thread::sleep(GAP);
            shmem.p(flag, now_ns(), other);
            shmem.wait_until(&ack, Cmp::Ge, round);
        } else {
            last = shmem.wait_until(flag, Cmp::Gt, last);
            lat_us.push((now_ns() - last) as f64 / 1e3);
            shmem.p(&ack, round, other);
        }
    }
    lat_us.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        lat_us
            .get((q * lat_us.len() as f64) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    if let Some(all) = gather(shmem, pick(0.5), pick(0.9)) {
        let slowest = slowest(&all);
        let table = format!(
            "  one-way latency after a {GAP:?} gap (us): median {:.1}, p90 {:.1} (slowest waiter {slowest}; {updates} updates)\n",
            all[slowest].0, all[slowest].1,
        );
        std::fs::write(std::env::var_os(OUT).expect("PINGPONG_BENCH_OUT"), table)
            .expect("writing the table");
    }
    drop(ack);
}

/// Collects every PE's two figures (a median and a second one) on PE 0: `Some` there,
/// `None` elsewhere. Collective.
fn gather(shmem: &shmem::Shmem, median: f64, other: f64) -> Option<Vec<(f64, f64)>> {
    let n = shmem.n_pes();
    let mine = shmem.alloc_vec::<f64>(2).unwrap();
    let all = shmem.alloc_vec::<f64>(2 * n).unwrap();
    mine.write(0, median);
    mine.write(1, other);
    shmem.barrier_all();
    shmem.team_world().fcollect(&all, &mine).unwrap();
    let figures = (shmem.my_pe() == 0).then(|| {
        (0..n)
            .map(|p| (all.read(2 * p), all.read(2 * p + 1)))
            .collect()
    });
    drop((mine, all));
    figures
}

/// The PE with the largest median.
fn slowest(all: &[(f64, f64)]) -> usize {
    (0..all.len())
        .max_by(|&a, &b| all[a].0.total_cmp(&all[b].0))
        .unwrap_or(0)
}
