//! The collectives' direct path (`shmem/src/coll/direct/`) when datagrams are lost and
//! their sender is not in the library: on two nodes of one and of two PEs, the root of a
//! broadcast loses its datagram (a small broadcast: the only one; a broadcast of several
//! datagrams: the second, so the ones after it arrive after a gap and are dropped too) and
//! then computes (sleeps) for a second. The other node's PEs must receive the data, in
//! order and once, while the root still computes: the sender's keeper thread resends in
//! the background. Without it they would get the data only when the root calls the library
//! again (and a wait longer than `SHMEM_WAIT_TIMEOUT` ends the job). The losses are
//! injected by `shmem::testing::coll_drop` (a datagram marked is not sent the first time,
//! as if the network had dropped it). Under qemu (the aarch64 stage) only the two nodes of
//! one PE run, computing for 3 s (a node may be starved of CPU for a while there).

mod rust_common;

use std::time::{Duration, Instant};

use rust_common::{run_expect, topologies};
use shmem::Shmem;

/// Elements of the large broadcast: 160 KB, three datagrams of the default size (the
/// loopback cluster's MTU), below `SHMEM_COLL_DIRECT_MAX`.
const BIG: usize = 20_000;
/// The variable that tells the PEs how long the root computes (milliseconds).
const COMPUTE_VAR: &str = "COLL_LOSS_COMPUTE_MS";

/// The child entry point (see `rust_common`): one PE of a job.
#[test]
fn child_pe() {
    rust_common::child_main(|| shmem::init().expect("init"), scenario);
}

fn scenario(shmem: &Shmem, name: &str) -> String {
    match name {
        "lost" => lost(shmem),
        other => panic!("unknown scenario {other}"),
    }
}

fn value(round: u64, k: usize) -> u64 {
    round << 32 | k as u64
}

fn lost(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let compute = Duration::from_millis(
        std::env::var(COMPUTE_VAR)
            .ok()
            .and_then(|v| v.parse().ok())
            .expect(COMPUTE_VAR),
    );
    let world = shmem.team_world();
    let src = shmem.alloc_vec::<u64>(BIG).unwrap();
    let dest = shmem.alloc_vec::<u64>(BIG).unwrap();
    let mut waited = Duration::ZERO;
    for (round, (len, lose)) in [(1usize, 0b1u64), (BIG, 0b10)].into_iter().enumerate() {
        let round = round as u64 + 1;
        for k in 0..len {
            src.write(k, value(round, k));
        }
        if me == 0 {
            shmem::testing::coll_drop(lose);
        }
        let t = Instant::now();
        world
            .broadcast(dest.slice(..len), src.slice(..len), 0)
            .unwrap();
        if me != 0 {
            waited = waited.max(t.elapsed());
        }
        // The root computes outside the library while its datagram is missing; the others
        // (once they have the data) as long, so that no one waits for it in the barrier.
        std::thread::sleep(compute.saturating_sub(t.elapsed()));
        let got = dest.to_vec();
        for (k, &v) in got[..len].iter().enumerate() {
            assert_eq!(v, value(round, k), "round {round}: element {k}");
        }
        shmem.barrier_all();
    }
    if me != 0 {
        // The receivers got the resend while the root computed, not when it came back.
        assert!(
            waited < compute,
            "a receiver waited {waited:?} for the broadcast, as long as the root computed \
             ({compute:?}): the lost datagram was not resent in the background"
        );
    }
    "lost ok".into()
}

/// Two nodes of one PE (the root's datagrams go to the other PE) and of two (to the other
/// node's leader, which passes the data on through shared memory).
#[test]
fn a_lost_datagram_is_resent_while_its_sender_computes() {
    let test = "a_lost_datagram_is_resent_while_its_sender_computes";
    let (ppns, ms): (&[u32], &str) =
        if gsas_tests::attack::full_length(test, "two nodes of one PE, computing 3 s") {
            (&[1, 2], "1000")
        } else {
            (&[1], "3000")
        };
    run_expect(
        "lost",
        &topologies(2, ppns),
        &[(COMPUTE_VAR, ms)],
        |_, _| "lost ok".into(),
    );
}
