//! Every signal belongs to its collective: collectives back to back across nodes where one
//! PE's datagram of the first collective is late (lost once, then resent by the
//! collectives' direct path after its retransmission timeout) while another PE is already
//! in the next collective and signals the same PE. A counter that cannot tell the two
//! collectives apart counts the later signal for the earlier collective, which then
//! returns before its data arrived. The losses are injected with `shmem::testing::coll_drop`
//! (the marked datagram is not sent the first time), so every round takes the bad order:
//!
//! * **alltoall, broadcast, alltoall** (3 nodes of 1 PE): PE 1's block for PE 2 is late;
//!   PE 0 finishes the first alltoall, returns at once from the broadcast it roots and
//!   sends PE 2 its block of the second alltoall. Also with a zero-size alltoall in the
//!   middle instead of the broadcast.
//! * **collect, collect** (3 nodes of 1 PE, and with `GSAS_DIRECT=0` 2 nodes of 2 PEs:
//!   every PE a cell of its own): PE 1's mail to PE 2 is late; PE 0 mails PE 2 its data of
//!   the second collect.
//! * **broadcasts from two roots of one node** (2 nodes of 2 PEs, roots 0 then 1): PE 0's
//!   datagram to the other node is late; PE 1, released by PE 0 at once, roots the next
//!   broadcast.
//!
//! Every round writes fresh buffers, which each PE checks exactly as soon as each call
//! returns (a call that returned early would have its data by the end of the round).

mod rust_common;

use rust_common::{Topology, run, run_expect, topologies};
use shmem::{Shmem, SymVec};

/// Rounds per scenario.
const ROUNDS: usize = 8;

/// The child entry point (see `rust_common`): one PE of a job.
#[test]
fn child_pe() {
    rust_common::child_main(|| shmem::init().expect("init"), scenario);
}

fn scenario(shmem: &Shmem, name: &str) -> String {
    match name {
        "alltoall_bcast" => alltoall_twice(shmem, Between::Broadcast),
        "alltoall_empty" => alltoall_twice(shmem, Between::EmptyAlltoall),
        "collect_twice" => collect_twice(shmem),
        "bcast_two_roots" => bcast_two_roots(shmem),
        "panic" => panic_holding_memory(shmem),
        other => panic!("unknown scenario {other}"),
    }
}

/// The byte PE `pe` sends to `to` at `i` in round `round` (never 0).
fn byte(round: usize, pe: usize, to: usize, i: usize) -> u8 {
    ((round * 37 + pe * 11 + to * 5 + i) % 251) as u8 + 1
}

#[derive(Clone, Copy)]
enum Between {
    Broadcast,
    EmptyAlltoall,
}

/// Bytes per alltoall block.
const BLOCK: usize = 24;

fn alltoall_twice(shmem: &Shmem, between: Between) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let world = shmem.team_world();
    let src: SymVec<u8> = shmem.alloc_vec(2 * n * BLOCK).unwrap();
    let dest: SymVec<u8> = shmem.alloc_vec(2 * n * BLOCK).unwrap();
    let bsrc: SymVec<u8> = shmem.alloc_vec(8).unwrap();
    let bdest: SymVec<u8> = shmem.alloc_vec(8).unwrap();
    for round in 0..ROUNDS {
        dest.fill(0);
        for call in 0..2 {
            for to in 0..n {
                for i in 0..BLOCK {
                    let v = byte(2 * round + call, me, to, i);
                    src.write((call * n + to) * BLOCK + i, v);
                }
            }
        }
        bsrc.fill(round as u8 + 1);
        shmem.barrier_all();
        if me == 1 {
            // PE 1 sends to PE 2 first (ring order from its right neighbour): late.
            shmem::testing::coll_drop(0b1);
        }
        // Each result is checked as soon as its call returns: a call that returned early
        // would have its data by the end of the round.
        let check = |call: usize| {
            let got = dest.to_vec();
            for from in 0..n {
                for i in 0..BLOCK {
                    assert_eq!(
                        got[(call * n + from) * BLOCK + i],
                        byte(2 * round + call, from, me, i),
                        "round {round}, alltoall {call}: block from PE {from} byte {i}"
                    );
                }
            }
        };
        world
            .alltoall(dest.slice(..n * BLOCK), src.slice(..n * BLOCK), BLOCK)
            .unwrap();
        check(0);
        match between {
            Between::Broadcast => {
                world.broadcast(&bdest, &bsrc, 0).unwrap();
                assert_eq!(
                    bdest.to_vec(),
                    vec![round as u8 + 1; 8],
                    "round {round}: broadcast"
                );
            }
            Between::EmptyAlltoall => world.alltoall(dest.slice(..0), src.slice(..0), 0).unwrap(),
        }
        world
            .alltoall(dest.slice(n * BLOCK..), src.slice(n * BLOCK..), BLOCK)
            .unwrap();
        check(1);
    }
    "alltoall ok".into()
}

fn collect_twice(shmem: &Shmem) -> String {
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let world = shmem.team_world();
    // PE p contributes p + 1 bytes to each collect.
    let total: usize = (1..=n).sum();
    let src: SymVec<u8> = shmem.alloc_vec(2 * n).unwrap();
    let dest: SymVec<u8> = shmem.alloc_vec(2 * total).unwrap();
    for round in 0..ROUNDS {
        dest.fill(0);
        for call in 0..2 {
            for i in 0..=me {
                src.write(call * n + i, byte(2 * round + call, me, 0, i));
            }
        }
        shmem.barrier_all();
        if me == 1 {
            // PE 1's data for PE 2: its second datagram (its first goes to PE 0).
            shmem::testing::coll_drop(0b10);
        }
        for call in 0..2 {
            world
                .collect(
                    dest.slice(call * total..(call + 1) * total),
                    src.slice(call * n..call * n + me + 1),
                )
                .unwrap();
            let got = dest.to_vec();
            let mut at = call * total;
            for from in 0..n {
                for i in 0..=from {
                    assert_eq!(
                        got[at],
                        byte(2 * round + call, from, 0, i),
                        "round {round}, collect {call}: PE {from}'s byte {i}"
                    );
                    at += 1;
                }
            }
        }
    }
    "collect ok".into()
}

fn bcast_two_roots(shmem: &Shmem) -> String {
    let me = shmem.my_pe();
    let world = shmem.team_world();
    let src: SymVec<u8> = shmem.alloc_vec(16).unwrap();
    let dest: SymVec<u8> = shmem.alloc_vec(32).unwrap();
    for round in 0..ROUNDS {
        dest.fill(0);
        for i in 0..16 {
            src.write(i, byte(round, me, 0, i));
        }
        shmem.barrier_all();
        if me == 0 {
            // PE 0's datagram to the other node's leader is late.
            shmem::testing::coll_drop(0b1);
        }
        for root in 0..2 {
            world
                .broadcast(dest.slice(16 * root..16 * (root + 1)), &src, root)
                .unwrap();
            let got = dest.to_vec();
            for i in 0..16 {
                assert_eq!(
                    got[16 * root + i],
                    byte(round, root, 0, i),
                    "round {round}, broadcast from PE {root}: byte {i}"
                );
            }
        }
    }
    "bcast ok".into()
}

/// PE 1 panics while it holds symmetric memory; the others wait in a barrier.
fn panic_holding_memory(shmem: &Shmem) -> String {
    let v: SymVec<u64> = shmem.alloc_vec(4).unwrap();
    if shmem.my_pe() == 1 {
        panic!("PE 1 gives up");
    }
    shmem.barrier_all();
    drop(v);
    "not reached".into()
}

const THREE_NODES: Topology = Topology { nodes: 3, ppn: 1 };

#[test]
fn alltoall_after_a_broadcast_waits_for_its_own_data() {
    run_expect("alltoall_bcast", &[THREE_NODES], &[], |_, _| {
        "alltoall ok".into()
    });
}

#[test]
fn alltoall_after_an_empty_alltoall_waits_for_its_own_data() {
    run_expect("alltoall_empty", &[THREE_NODES], &[], |_, _| {
        "alltoall ok".into()
    });
}

#[test]
fn collect_after_collect_waits_for_its_own_data() {
    run_expect("collect_twice", &[THREE_NODES], &[], |_, _| {
        "collect ok".into()
    });
    // Every PE a cell of its own: the one-round collect between the four PEs' "leaders".
    run_expect(
        "collect_twice",
        &topologies(2, &[2]),
        &[("GSAS_DIRECT", "0")],
        |_, _| "collect ok".into(),
    );
}

#[test]
fn broadcasts_from_two_roots_of_one_node_get_their_own_data() {
    run_expect("bcast_two_roots", &topologies(2, &[2]), &[], |_, _| {
        "bcast ok".into()
    });
}

/// A PE that panics while it holds symmetric memory ends the job with a message: its
/// unwinding would otherwise free the memory, a collective, and wait for PEs that wait
/// elsewhere until `SHMEM_WAIT_TIMEOUT`.
#[test]
fn a_panicking_pe_ends_the_job() {
    let (report, dir) = run("panic", Topology { nodes: 1, ppn: 2 }, &[]);
    let _ = std::fs::remove_dir_all(dir);
    assert_ne!(report.exit_code, 0, "{report:?}");
    let why = format!("{:?}", report.failure);
    assert!(
        why.contains("SymVec::drop") && why.contains("panicked"),
        "the failure names the panic: {report:?}"
    );
}
