//! The collectives benchmark: latency of barrier, broadcast (8 B and 1 KiB), collect and
//! fcollect (8 B per PE) and a sum reduction of 8 doubles, through the C ABI as a C program
//! calls them (and, for reference, a blocking 64-bit fetch-add to the next PE: one round
//! trip), for 2 PEs on one node (pinned to CPUs 0 and 1), for 8 PEs over two nodes
//! (two atomic services on loopback, four PEs each, not pinned: on a 2-core machine they
//! share the cores), and for 2 PEs over two nodes (the cost of one hop through a service).
//!
//! ```sh
//! cargo bench -p shmem --bench coll_bench            # every configuration
//! cargo bench -p shmem --bench coll_bench -- quick   # short batches (a smoke test)
//! cargo bench -p shmem --bench coll_bench -- one-node # only the first configuration
//! cargo bench -p shmem --bench coll_bench -- two-nodes # only the two-node ones
//! ```
//!
//! **Method** (OSU style): every PE runs a warm-up, then batches of back-to-back calls
//! (each batch starts after a barrier), takes the median time per call over its batches,
//! and the figure is the largest median of all PEs; the best batch (again of the slowest
//! PE) shows what the machine gives without interference from other processes. The
//! broadcast's root moves to the next PE at every call: a root returns as soon as its
//! copies are made, so with a fixed root the receivers would only measure how fast it can
//! push; with a moving root every call waits for the data of the one before, which is the
//! latency of one broadcast. The parent process starts the services and the PEs (this
//! program again, with `COLL_BENCH_CHILD` set, through the gsas launcher library), and
//! prints PE 0's table with the targets of the issue beside the one-node figures. A
//! benchmark, not a test: it asserts nothing about the figures.

mod common;

use std::ffi::{c_int, c_void};
use std::time::Instant;

unsafe extern "C" {
    static gsas_shmem_team_world: u8;
    fn shmem_barrier_all();
    fn shmem_broadcastmem(
        t: *const c_void,
        d: *mut c_void,
        s: *const c_void,
        n: usize,
        root: c_int,
    ) -> c_int;
    fn shmem_collectmem(t: *const c_void, d: *mut c_void, s: *const c_void, n: usize) -> c_int;
    fn shmem_fcollectmem(t: *const c_void, d: *mut c_void, s: *const c_void, n: usize) -> c_int;
    fn shmem_double_sum_reduce(t: *const c_void, d: *mut f64, s: *const f64, n: usize) -> c_int;
    fn shmem_long_atomic_fetch_add(d: *mut i64, v: i64, pe: c_int) -> i64;
}

const CHILD: &str = "COLL_BENCH_CHILD";
const OUT: &str = "COLL_BENCH_OUT";

/// One configuration of the benchmark.
struct Setup {
    name: &'static str,
    nodes: u32,
    ppn: u32,
    pin: bool,
}

/// The figures, with the issue's targets for 2 PEs on one node (microseconds).
const FIGURES: &[(&str, f64)] = &[
    ("barrier", 0.18),
    ("broadcast 8 B", 0.23),
    ("broadcast 1 KiB", f64::NAN),
    ("collect 8 B", 0.60),
    ("fcollect 8 B", 0.30),
    ("sum-reduce 8 doubles", f64::NAN),
    ("(fetch-add, next PE)", f64::NAN),
];

fn main() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let has = |w: &str| args.iter().any(|a| a == w);
    let quick = has("quick");
    let setups = [
        Setup {
            name: "2 PEs, one node (pinned)",
            nodes: 1,
            ppn: 2,
            pin: true,
        },
        Setup {
            name: "8 PEs, two nodes of 4 (loopback UDP between them)",
            nodes: 2,
            ppn: 4,
            pin: false,
        },
        Setup {
            name: "2 PEs, two nodes of 1 (loopback UDP; pinned)",
            nodes: 2,
            ppn: 1,
            pin: true,
        },
    ];
    for (k, s) in setups.iter().enumerate() {
        if (k == 0 && has("two-nodes")) || (k > 0 && has("one-node")) {
            continue;
        }
        let table = launch(s, quick);
        println!("coll_bench: {}\n{table}", s.name);
    }
}

/// Runs one configuration; returns PE 0's table.
fn launch(s: &Setup, quick: bool) -> String {
    let mut env = Vec::new();
    if s.pin {
        env.push(("COLL_BENCH_PIN".into(), "1".into()));
    }
    common::run(&common::BenchJob {
        name: "coll-bench",
        nodes: s.nodes,
        ppn: s.ppn,
        salt: u64::from(s.nodes),
        child_var: CHILD,
        out_var: OUT,
        quick,
        env,
    })
}

/// Pins this process to CPU `cpu` (modulo the CPUs present).
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity only
    // touch it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let n = libc::sysconf(libc::_SC_NPROCESSORS_ONLN).max(1) as usize;
        libc::CPU_SET(cpu % n, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

fn child() {
    let shmem = shmem::init().expect("shmem::init");
    let (me, n) = (shmem.my_pe(), shmem.n_pes());
    if std::env::var_os("COLL_BENCH_PIN").is_some() {
        pin(me);
    }
    let quick = std::env::var(CHILD).as_deref() == Ok("quick");
    // Across nodes a call takes tens of microseconds: fewer of them.
    let across = shmem.team_shared().n_pes() < n;
    let (warm, batches, per) = match (quick, across) {
        (true, _) => (50, 5, 50),
        (false, false) => (20_000, 31, 20_000),
        (false, true) => (500, 15, 500),
    };
    let world: *const c_void = (&raw const gsas_shmem_team_world).cast();
    let src = shmem.alloc_vec::<u8>(1024).unwrap();
    let dest = shmem.alloc_vec::<u8>(1024 * n).unwrap();
    let dsrc = shmem.alloc_vec::<f64>(8).unwrap();
    let ddest = shmem.alloc_vec::<f64>(8).unwrap();
    let (s, d) = (
        src.as_ptr().cast::<c_void>(),
        dest.as_ptr().cast_mut().cast::<c_void>(),
    );
    let (fs, fd) = (dsrc.as_ptr(), ddest.as_ptr().cast_mut());
    let count = shmem.alloc_vec::<i64>(1).unwrap();
    let counter = count.as_ptr().cast_mut();
    // SAFETY (every call): symmetric buffers large enough for the call; every PE makes the
    // same calls.
    let call = |k: usize, i: usize| unsafe {
        let root = (i % n) as c_int;
        match k {
            0 => shmem_barrier_all(),
            1 => {
                shmem_broadcastmem(world, d, s, 8, root);
            }
            2 => {
                shmem_broadcastmem(world, d, s, 1024, root);
            }
            3 => {
                shmem_collectmem(world, d, s, 8);
            }
            4 => {
                shmem_fcollectmem(world, d, s, 8);
            }
            5 => {
                shmem_double_sum_reduce(world, fd, fs, 8);
            }
            _ => {
                shmem_long_atomic_fetch_add(counter, 1, ((me + 1) % n) as c_int);
            }
        }
    };
    let figures = FIGURES.len();
    // Per figure: the median and the best batch of this PE.
    let mine = shmem.alloc_vec::<f64>(2 * figures).unwrap();
    let all = shmem.alloc_vec::<f64>(2 * figures * n).unwrap();
    for k in 0..figures {
        for i in 0..warm {
            call(k, i);
        }
        let mut times: Vec<f64> = (0..batches)
            .map(|_| {
                shmem.barrier_all();
                let t = Instant::now();
                for i in 0..per {
                    call(k, i);
                }
                t.elapsed().as_secs_f64() * 1e6 / per as f64
            })
            .collect();
        times.sort_by(f64::total_cmp);
        mine.write(2 * k, times[times.len() / 2]);
        mine.write(2 * k + 1, times[0]);
    }
    shmem.barrier_all();
    shmem.team_world().fcollect(&all, &mine).unwrap();
    if me == 0 {
        let mut table = format!(
            "  {:<22} {:>12} {:>12} {:>12}\n",
            "figure (us per call)", "median", "best batch", "target"
        );
        for (k, (name, target)) in FIGURES.iter().enumerate() {
            let worst = |j: usize| {
                (0..n)
                    .map(|p| all.read(p * 2 * figures + 2 * k + j))
                    .fold(0.0, f64::max)
            };
            let target = if n == 2 && !across && target.is_finite() {
                format!("{target:.2}")
            } else {
                "-".into()
            };
            table.push_str(&format!(
                "  {name:<22} {:>12.3} {:>12.3} {target:>12}\n",
                worst(0),
                worst(1)
            ));
        }
        table.push_str(&format!(
            "  ({batches} batches of {per} calls after {warm}; the slowest PE's figures)\n"
        ));
        let out = std::env::var_os(OUT).expect("COLL_BENCH_OUT");
        std::fs::write(out, table).expect("writing the table");
    }
    drop((src, dest, dsrc, ddest, count, mine, all));
    shmem.finalize().unwrap();
}
