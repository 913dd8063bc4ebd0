//! A flag ping-pong between PE 0 and PE 1, the exchange applications are made of: each
//! side writes the next value into the other's flag and waits for its own. Every value
//! seen is checked (a flag holds exactly the last value written), and PE 0 prints the
//! median round trip.
//!
//! ```sh
//! cargo build --release -p shmem --examples -p gsas-launch --bins
//! target/release/oshrun -n 2 target/release/examples/flag_pingpong test 20000
//! ```
//!
//! Arguments: `MODE ROUNDS`. Modes: `quiet` (`p` + `quiet`, the partner in `wait_until`),
//! `wait` (`p` alone, the partner in `wait_until`), `test` (`p` alone, the partner polling
//! `test`), `signal` (8 bytes of data and the flag in one `put_signal` with
//! `SHMEM_SIGNAL_SET`, the partner in `signal_wait_until`, then checking the data).
//! Defaults: `test 2000`. PEs other than 0 and 1 only join the barriers.

use shmem::{Cmp, SignalOp};

fn main() -> Result<(), shmem::Error> {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_else(|| "test".into());
    let rounds: u64 = match a.next().map(|s| s.parse()) {
        None => 2000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => usage("ROUNDS must be a positive integer"),
    };
    if !["quiet", "wait", "test", "signal"].contains(&mode.as_str()) {
        usage(&format!("unknown mode {mode:?}"));
    }
    let shmem = shmem::init()?;
    let me = shmem.my_pe();
    if shmem.n_pes() < 2 {
        usage("needs at least 2 PEs");
    }
    let flag = shmem.alloc_box(0u64)?;
    let data = shmem.alloc_vec::<u64>(1)?;
    shmem.barrier_all();
    let mut times = Vec::with_capacity(rounds as usize);
    if me < 2 {
        let peer = 1 - me;
        let wait = |v: u64| {
            let seen = match mode.as_str() {
                "test" => {
                    while !shmem.test(&flag, Cmp::Ge, v) {}
                    flag.read()
                }
                "signal" => shmem.signal_wait_until(&flag, Cmp::Ge, v),
                _ => shmem.wait_until(&flag, Cmp::Ge, v),
            };
            assert_eq!(seen, v, "PE {me}: flag holds {seen}, want {v}");
            if mode == "signal" {
                let got = data.read(0);
                assert_eq!(got, !v, "PE {me}: data {got:#x} under signal {v}");
            }
        };
        let send = |v: u64| {
            if mode == "signal" {
                shmem.put_signal(&data, &[!v], &flag, v, SignalOp::Set, peer);
                return;
            }
            shmem.p(&flag, v, peer);
            if mode == "quiet" {
                shmem.quiet();
            }
        };
        for round in 1..=rounds {
            let t0 = std::time::Instant::now();
            if me == 0 {
                send(2 * round - 1);
                wait(2 * round);
            } else {
                wait(2 * round - 1);
                send(2 * round);
            }
            times.push(t0.elapsed());
        }
    }
    shmem.barrier_all();
    if me == 0 {
        times.sort();
        let median = times[times.len() / 2];
        println!(
            "flag_pingpong: {rounds} rounds of {mode} between PE 0 and PE 1, every value checked; \
             round trip median {:.1} us, max {:.1} us",
            median.as_secs_f64() * 1e6,
            times[times.len() - 1].as_secs_f64() * 1e6
        );
    }
    drop(data);
    drop(flag);
    shmem.finalize()
}

fn usage(why: &str) -> ! {
    eprintln!("flag_pingpong: {why}\nusage: flag_pingpong [quiet|wait|test|signal] [ROUNDS]");
    std::process::exit(2)
}
