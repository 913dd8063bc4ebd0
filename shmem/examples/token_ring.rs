//! A token travels around the ring of PEs with put-with-signal; every PE counts its visits
//! on PE 0 with an atomic, and PE 0 checks the total.
//!
//! ```sh
//! cargo build --release -p shmem --examples -p gsas-launch --bins
//! target/release/oshrun -n 4 target/release/examples/token_ring
//! ```
//!
//! Without a launcher it runs as a job of one PE.

use shmem::{Cmp, SignalOp};

fn main() -> Result<(), shmem::Error> {
    let shmem = shmem::init()?;
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    let laps = 3u64;
    let token = shmem.alloc_vec::<u64>(4)?;
    let arrived = shmem.alloc_box(0u64)?;
    let visits = shmem.alloc_box(0u64)?;
    let next = (me + 1) % n;

    for lap in 0..laps {
        if me == 0 {
            // Start the lap: the token carries the lap number and a hop count.
            shmem.put_signal(&token, &[lap, 0, 0, 0], &arrived, 1, SignalOp::Add, next);
        }
        // Wait for the token of this lap, count the visit, pass it on.
        shmem.signal_wait_until(&arrived, Cmp::Ge, lap + 1);
        let mut t = token.to_vec();
        assert_eq!(t[0], lap, "PE {me} got the token of another lap");
        shmem.atomic_inc(&visits, 0);
        if me != 0 {
            t[1] += 1;
            shmem.put_signal(&token, &t, &arrived, 1, SignalOp::Add, next);
        } else {
            assert_eq!(t[1], n as u64 - 1, "hops of lap {lap}");
        }
    }
    shmem.barrier_all();
    if me == 0 {
        let total = visits.read();
        assert_eq!(total, laps * n as u64);
        println!("{n} PEs, {laps} laps: {total} visits counted on PE 0");
    }
    drop((token, arrived, visits));
    shmem.finalize()
}
