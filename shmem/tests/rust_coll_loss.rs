//! The collectives' direct path (`shmem/src/coll/direct.rs`) when datagrams are lost and
//! their sender is not in the library: on two nodes of one and of two PEs, the root of a
//! broadcast loses its datagram (a small broadcast: the only one; a broadcast of several
//! datagrams: the second, so the ones after it arrive after a gap and are dropped too) and
//! then computes for longer than `SHMEM_WAIT_TIMEOUT`. The other node's PEs must still
//! receive the data, in order and once, before their wait times out: the sender's keeper
//! thread resends in the background. Without it the receivers' wait ends the job.
//! The losses are injected by `shmem::testing::coll_drop` (a datagram marked is not sent
//! the first time, as if the network had dropped it).

mod rust_common;

use std::time::{Duration, Instant};

use rust_common::{run_expect, topologies};
use shmem::Shmem;

/// Elements of the large broadcast: 160 KB, three datagrams of the default size (the
/// loopback cluster's MTU), below `SHMEM_COLL_DIRECT_MAX`.
const BIG: usize = 20_000;
/// How long the root computes after its broadcast: longer than the wait timeout below.
const COMPUTE: Duration = Duration::from_millis(1500);

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
        std::thread::sleep(COMPUTE.saturating_sub(t.elapsed()));
        let got = dest.to_vec();
        for (k, &v) in got[..len].iter().enumerate() {
            assert_eq!(v, value(round, k), "round {round}: element {k}");
        }
        shmem.barrier_all();
    }
    if me != 0 {
        // The receivers did wait for a resend, well before the root came back.
        assert!(
            waited < COMPUTE,
            "a receiver waited {waited:?}, as long as the root computed"
        );
    }
    "lost ok".into()
}

/// Two nodes of one PE (the root's datagrams go to the other PE) and of two (to the other
/// node's leader, which passes the data on through shared memory).
#[test]
fn a_lost_datagram_is_resent_while_its_sender_computes() {
    run_expect(
        "lost",
        &topologies(2, &[1, 2]),
        &[("SHMEM_WAIT_TIMEOUT", "1")],
        |_, _| "lost ok".into(),
    );
}
