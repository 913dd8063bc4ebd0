//! A randomized checker of the collectives: thousands of collectives back to back, on the
//! world team, on split teams and on active sets, of every kind, with sizes around every
//! datagram and fragment boundary, each result checked exactly on every PE.
//!
//! ```sh
//! cargo build --release -p shmem --examples -p gsas-launch --bins
//! target/release/oshrun -n 8 target/release/examples/coll_check --count 10000 --seed 7
//! # coll_check: 10000 collectives on 8 PEs checked exactly (seed 7): 1183 barrier, ...
//! ```
//!
//! Every PE draws the same sequence from the seed: which group (the world team, teams split
//! off it, active sets with their own `pSync`s), which collective (barrier and sync,
//! broadcast from any root, fcollect, collect with sizes that differ per PE and include 0,
//! alltoall, alltoalls with strides, reductions of several types and operations, in team
//! and active-set forms), which sizes. The members call it, the others go on to the next
//! step at once, so PEs run ahead of each other by many collectives; now and then one PE
//! sleeps a little before a call. Buffers come from one symmetric arena, each collective a
//! fresh region (the specification requires `dest` to be ready on every PE before anyone
//! calls), until the arena is used up: then all PEs meet in `shmem_barrier_all`, clear it
//! and start again. Active-set collectives take a `pSync` from a rotating pool (a `pSync` is
//! reused only after that meeting), their barriers reuse one `pSync` per active set, as the
//! specification allows. A barrier step checks that it waits: every member first puts a
//! token into its right neighbour (non-blocking) and after the barrier finds its left
//! neighbour's. An exchange step (not a collective, counted with them) is the flag exchange
//! of applications: every member puts data, fences, and puts a flag into its right
//! neighbour, by a blocking put or an atomic set (or puts data and flag on a context in a
//! batch session, whose blocking puts wait in their frames), waits for its own flag and
//! checks its left neighbour's data; small puts go straight to a PE of another node, larger
//! ones, held ones and the atomic through its service, and the flag must never overtake the
//! data.
//!
//! Sizes are drawn around the boundaries of the job's UDP MTU (`--mtu`, or `GSAS_UDP_MTU`,
//! default 61440): what a datagram carries of the collectives' data and of the services'
//! bulk fragments (each path's headers subtracted, with and without rounding to 64 bytes),
//! their multiples, and `SHMEM_COLL_DIRECT_MAX` (as set, or 256 KiB), each exactly, one
//! byte and one word either side.
//!
//! Options: `--count N` collectives (10000), `--seed S` (1), `--max-bytes B` largest
//! contribution of one PE (300000), `--arena B` bytes of the arena (16 MiB), `--progress K`
//! PE 0 prints a line every K collectives (1000; 0: never), `--cycles C` (1) splits the
//! collectives over C initialization cycles: `shmem::init` .. `finalize` C times in one
//! process, as OpenSHMEM 1.6 allows, the arena, `pSync`s and teams made afresh in each,
//! the random sequence going on across them. A wrong result prints what was
//! expected, where, and the collective before it, and ends the job with status 1.

use std::ffi::{c_int, c_long, c_void};
use std::time::{Duration, Instant};

use shmem::{Shmem, TeamConfig};

unsafe extern "C" {
    fn shmem_barrier_all();
    fn shmem_quiet();
    fn shmem_global_exit(status: c_int) -> !;
    fn shmem_putmem_nbi(dest: *mut c_void, src: *const c_void, n: usize, pe: c_int);
    fn shmem_putmem(dest: *mut c_void, src: *const c_void, n: usize, pe: c_int);
    fn shmem_fence();
    fn shmem_putmem_signal(
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        sig_addr: *mut u64,
        signal: u64,
        sig_op: c_int,
        pe: c_int,
    );
    fn shmem_uint64_p(dest: *mut u64, value: u64, pe: c_int);
    fn shmem_ctx_create(options: c_long, ctx: *mut *const c_void) -> c_int;
    fn shmem_ctx_destroy(ctx: *const c_void);
    fn shmem_ctx_session_start(
        ctx: *const c_void,
        options: c_long,
        config: *const c_void,
        config_mask: c_long,
    );
    fn shmem_ctx_session_stop(ctx: *const c_void);
    fn shmem_ctx_putmem(
        ctx: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        pe: c_int,
    );
    fn shmem_ctx_fence(ctx: *const c_void);
    fn shmem_ctx_uint64_p(ctx: *const c_void, dest: *mut u64, value: u64, pe: c_int);
    fn shmem_uint64_atomic_set(dest: *mut u64, value: u64, pe: c_int);
    fn shmem_uint64_wait_until(ivar: *mut u64, cmp: c_int, value: u64);
    fn shmem_uint64_test(ivar: *mut u64, cmp: c_int, value: u64) -> c_int;
    fn shmem_team_sync(team: *const c_void) -> c_int;
    fn shmem_sync(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long);
    fn shmem_barrier(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long);
    fn shmem_broadcastmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        root: c_int,
    ) -> c_int;
    fn shmem_fcollectmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
    ) -> c_int;
    fn shmem_collectmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
    ) -> c_int;
    fn shmem_alltoallmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
    ) -> c_int;
    fn shmem_int32_alltoalls(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        dst: isize,
        sst: isize,
        n: usize,
    ) -> c_int;
    fn shmem_int64_alltoalls(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        dst: isize,
        sst: isize,
        n: usize,
    ) -> c_int;
    fn shmem_alltoallsmem(
        team: *const c_void,
        dest: *mut c_void,
        src: *const c_void,
        dst: isize,
        sst: isize,
        n: usize,
    ) -> c_int;
}

/// The active-set data-movement routines of one element width (32 or 64 bits).
#[derive(Clone, Copy)]
struct SetFns {
    bits: usize,
    broadcast: SetBcast,
    fcollect: SetGather,
    collect: SetGather,
    alltoall: SetGather,
    alltoalls: SetStrided,
}

type SetBcast = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    usize,
    c_int,
    c_int,
    c_int,
    c_int,
    *mut c_long,
);
type SetGather =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, c_int, c_int, *mut c_long);
type SetStrided = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    isize,
    isize,
    usize,
    c_int,
    c_int,
    c_int,
    *mut c_long,
);

macro_rules! set_fns {
    ($($bits:literal: $b:ident $f:ident $c:ident $a:ident $s:ident;)*) => {
        unsafe extern "C" {
            $(
                fn $b(d: *mut c_void, s: *const c_void, n: usize, root: c_int, start: c_int,
                      ls: c_int, size: c_int, psync: *mut c_long);
                fn $f(d: *mut c_void, s: *const c_void, n: usize, start: c_int, ls: c_int,
                      size: c_int, psync: *mut c_long);
                fn $c(d: *mut c_void, s: *const c_void, n: usize, start: c_int, ls: c_int,
                      size: c_int, psync: *mut c_long);
                fn $a(d: *mut c_void, s: *const c_void, n: usize, start: c_int, ls: c_int,
                      size: c_int, psync: *mut c_long);
                fn $s(d: *mut c_void, s: *const c_void, dst: isize, sst: isize, n: usize,
                      start: c_int, ls: c_int, size: c_int, psync: *mut c_long);
            )*
        }
        const SET_FNS: [SetFns; 2] = [$(SetFns {
            bits: $bits,
            broadcast: $b,
            fcollect: $f,
            collect: $c,
            alltoall: $a,
            alltoalls: $s,
        }),*];
    };
}

set_fns! {
    32: shmem_broadcast32 shmem_fcollect32 shmem_collect32 shmem_alltoall32 shmem_alltoalls32;
    64: shmem_broadcast64 shmem_fcollect64 shmem_collect64 shmem_alltoall64 shmem_alltoalls64;
}

/// Element types of the reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Int,
    Long,
    Double,
}

/// Reduction operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Sum,
    Prod,
    Max,
    Min,
    And,
    Or,
    Xor,
}

type TeamReduce = unsafe extern "C" fn(*const c_void, *mut c_void, *const c_void, usize) -> c_int;
type SetReduce = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    c_int,
    c_int,
    c_int,
    c_int,
    *mut c_void,
    *mut c_long,
);

macro_rules! reductions {
    ($($ty:ident $op:ident $team:ident $set:ident;)*) => {
        unsafe extern "C" {
            $(
                fn $team(team: *const c_void, d: *mut c_void, s: *const c_void, n: usize) -> c_int;
                fn $set(d: *mut c_void, s: *const c_void, n: c_int, start: c_int, ls: c_int,
                        size: c_int, wrk: *mut c_void, psync: *mut c_long);
            )*
        }
        const REDUCTIONS: &[(Ty, Op, TeamReduce, SetReduce)] = &[$((Ty::$ty, Op::$op, $team, $set)),*];
    };
}

reductions! {
    Int Sum shmem_int_sum_reduce shmem_int_sum_to_all;
    Int Prod shmem_int_prod_reduce shmem_int_prod_to_all;
    Int Max shmem_int_max_reduce shmem_int_max_to_all;
    Int Min shmem_int_min_reduce shmem_int_min_to_all;
    Int And shmem_int32_and_reduce shmem_int_and_to_all;
    Int Or shmem_int32_or_reduce shmem_int_or_to_all;
    Int Xor shmem_int32_xor_reduce shmem_int_xor_to_all;
    Long Sum shmem_long_sum_reduce shmem_long_sum_to_all;
    Long Max shmem_long_max_reduce shmem_long_max_to_all;
    Long Xor shmem_int64_xor_reduce shmem_long_xor_to_all;
    Double Sum shmem_double_sum_reduce shmem_double_sum_to_all;
    Double Min shmem_double_min_reduce shmem_double_min_to_all;
}

/// `SHMEM_CMP_EQ` and `SHMEM_CMP_NE`.
const SHMEM_CMP_EQ: c_int = 1;
const SHMEM_CMP_NE: c_int = 2;
/// `SHMEM_SIGNAL_SET` and `SHMEM_SIGNAL_ADD`.
const SHMEM_SIGNAL_SET: c_int = 0;
const SHMEM_SIGNAL_ADD: c_int = 1;
/// `SHMEM_CTX_SESSION_BATCH`.
const SHMEM_CTX_SESSION_BATCH: c_long = 1;

/// How long an exchange step polls `shmem_uint64_test` for its flag before it fails.
const POLL_LIMIT: Duration = Duration::from_secs(300);

/// `SHMEM_REDUCE_SYNC_SIZE`, the largest `pSync` of any collective.
const PSYNC_WORDS: usize = 35;
/// `pSync`s in the rotating pool of the active-set collectives.
const PSYNCS: usize = 32;
/// `SHMEM_COLL_DIRECT_MAX`'s default.
const DIRECT_MAX: usize = 256 << 10;

/// `SHMEM_COLL_DIRECT_MAX` as the job sets it (plain bytes or with a k/m suffix), else its
/// default.
fn direct_max() -> usize {
    let Ok(v) = std::env::var("SHMEM_COLL_DIRECT_MAX") else {
        return DIRECT_MAX;
    };
    let v = v.trim().to_ascii_lowercase();
    let (num, unit) = match v.strip_suffix('k') {
        Some(n) => (n, 1 << 10),
        None => match v.strip_suffix('m') {
            Some(n) => (n, 1 << 20),
            None => (v.as_str(), 1),
        },
    };
    num.parse::<usize>().map_or(DIRECT_MAX, |n| n * unit)
}

/// splitmix64: the same sequence on every PE.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}

/// Word `w` of the data PE `pe` contributes in step `step`: every byte odd, so a byte
/// that was not written (0) is never mistaken for data.
fn pat_word(step: u64, pe: usize, w: usize) -> u64 {
    let mut x = step
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add((pe as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f))
        .wrapping_add((w as u64).wrapping_mul(0x1656_67b1_9e37_79f9));
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 32)) | 0x0101_0101_0101_0101
}

/// Bytes `from .. from + len` of the data PE `pe` contributes in step `step`.
fn pattern(step: u64, pe: usize, from: usize, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 16);
    let (first, last) = (from / 8, (from + len).div_ceil(8));
    for w in first..last {
        out.extend_from_slice(&pat_word(step, pe, w).to_le_bytes());
    }
    out.drain(..from - first * 8);
    out.truncate(len);
    out
}

/// A group of PEs a collective runs on.
struct Group {
    name: String,
    /// World PE numbers in member order.
    members: Vec<usize>,
    form: Form,
}

enum Form {
    /// A team handle (null on the PEs outside it).
    Team(*const c_void),
    /// An active set; its barriers reuse `barrier_psync`.
    Set {
        start: c_int,
        log_stride: c_int,
        barrier_psync: *mut c_long,
    },
}

impl Group {
    fn ordinal(&self, pe: usize) -> Option<usize> {
        self.members.iter().position(|&m| m == pe)
    }

    fn is_team(&self) -> bool {
        matches!(self.form, Form::Team(_))
    }
}

/// The kinds of collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Barrier,
    Broadcast,
    Fcollect,
    Collect,
    Alltoall,
    Alltoalls,
    Reduce,
    /// Not a collective: point-to-point puts around the group's ring, see
    /// [`Checker::exchange`].
    Exchange,
}

const KINDS: [Kind; 8] = [
    Kind::Barrier,
    Kind::Broadcast,
    Kind::Fcollect,
    Kind::Collect,
    Kind::Alltoall,
    Kind::Alltoalls,
    Kind::Reduce,
    Kind::Exchange,
];

struct Options {
    count: u64,
    seed: u64,
    max_bytes: usize,
    arena: usize,
    progress: u64,
    mtu: usize,
    cycles: u64,
}

fn options() -> Options {
    let mut o = Options {
        count: 10_000,
        seed: 1,
        max_bytes: 300_000,
        arena: 16 << 20,
        progress: 1000,
        mtu: std::env::var("GSAS_UDP_MTU")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(61440),
        cycles: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage(&format!("{name} needs a number")))
        };
        match a.as_str() {
            "--count" => o.count = value("--count"),
            "--seed" => o.seed = value("--seed"),
            "--max-bytes" => o.max_bytes = value("--max-bytes") as usize,
            "--arena" => o.arena = value("--arena") as usize,
            "--progress" => o.progress = value("--progress"),
            "--mtu" => o.mtu = value("--mtu") as usize,
            "--cycles" => o.cycles = value("--cycles").max(1),
            "-h" | "--help" => {
                println!(
                    "usage: coll_check [--count N] [--seed S] [--max-bytes B] [--arena B] \
                     [--progress K] [--mtu M] [--cycles C]\n(see the program's documentation in \
                     shmem/examples/coll_check.rs)"
                );
                std::process::exit(0)
            }
            other => usage(&format!("unknown option {other}")),
        }
    }
    o
}

fn usage(why: &str) -> ! {
    eprintln!("coll_check: {why} (--help for the options)");
    std::process::exit(2)
}

/// Byte sizes around the boundaries of the datagrams and fragments of an MTU.
fn boundary_sizes(mtu: usize, max: usize) -> Vec<usize> {
    let mut bases = vec![direct_max(), 4096];
    // The collectives' packets (UDP, frame, packet and direct headers: 90 bytes) and the
    // services' bulk fragments (UDP, frame, packet and request headers: 90 bytes with a
    // signal's 16 more), and the plain MTU less the older 32- and 64-byte headers.
    for payload in [
        mtu.saturating_sub(90),
        mtu.saturating_sub(106),
        mtu.saturating_sub(64),
        mtu.saturating_sub(32),
    ] {
        bases.extend([payload, payload / 64 * 64]);
    }
    let mut out = Vec::new();
    for b in bases {
        for k in 1..=3usize {
            for d in [-9isize, -8, -1, 0, 1, 8, 9] {
                let s = (k * b) as isize + d;
                if s > 0 && (s as usize) <= max {
                    out.push(s as usize);
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// A bump allocator over the arena, the same on every PE.
struct Arena {
    base: *mut u8,
    len: usize,
    used: usize,
    high: usize,
    psync_next: usize,
}

impl Arena {
    /// `n` bytes (64-byte aligned), or `None` when the arena is used up.
    fn take(&mut self, n: usize) -> Option<*mut u8> {
        let at = self.used.next_multiple_of(64);
        if at + n > self.len {
            return None;
        }
        self.used = at + n;
        self.high = self.high.max(self.used);
        Some(self.base.wrapping_add(at))
    }
}

struct Checker<'a> {
    me: usize,
    npes: usize,
    opt: &'a Options,
    rng: Rng,
    arena: Arena,
    psyncs: *mut c_long,
    /// A context of this cycle for the exchange steps in a session.
    ctx: *const c_void,
    small: Vec<usize>,
    boundary: Vec<usize>,
    step: u64,
    last: String,
    counts: [u64; KINDS.len()],
    set_calls: u64,
    team_calls: u64,
    wraps: u64,
}

impl Checker<'_> {
    fn fail(&self, what: &str, detail: std::fmt::Arguments<'_>) -> ! {
        eprintln!(
            "coll_check: PE {}: step {} ({what}; the step before: {}; seed {}): {detail}",
            self.me, self.step, self.last, self.opt.seed
        );
        // SAFETY: ends the job; no state is used after it.
        unsafe { shmem_global_exit(1) }
    }

    /// A byte size for one PE's contribution, a multiple of `unit`.
    fn size(&mut self, unit: usize) -> usize {
        let s = match self.rng.below(100) {
            0..=9 => 0,
            10..=69 => self.rng.pick(&self.small),
            70..=89 => self.rng.pick(&self.boundary),
            _ => self.rng.below(self.opt.max_bytes + 1),
        };
        s.min(self.opt.max_bytes) / unit * unit
    }

    /// All PEs meet, clear the arena, meet again.
    fn wrap(&mut self) {
        // SAFETY: plain library calls; the arena is this PE's own memory.
        unsafe {
            shmem_barrier_all();
            std::ptr::write_bytes(self.arena.base, 0, self.arena.high);
            for i in 0..PSYNCS * PSYNC_WORDS {
                *self.psyncs.add(i) = 0;
            }
            shmem_barrier_all();
        }
        self.arena.used = 0;
        self.arena.high = 0;
        self.arena.psync_next = 0;
        self.wraps += 1;
    }

    /// Regions of `sizes` bytes and, for an active set, a `pSync` from the pool, after a
    /// wrap if they do not fit.
    fn regions<const N: usize>(
        &mut self,
        g: &Group,
        sizes: [usize; N],
    ) -> ([*mut u8; N], *mut c_long) {
        let total: usize = sizes.iter().map(|s| s.next_multiple_of(64) + 64).sum();
        if total > self.arena.len {
            self.fail(
                "arena",
                format_args!("{total} bytes do not fit an arena of {}", self.arena.len),
            );
        }
        let psync = !g.is_team();
        if self.arena.used.next_multiple_of(64) + total > self.arena.len
            || (psync && self.arena.psync_next == PSYNCS)
        {
            self.wrap();
        }
        let regions = sizes.map(|s| self.arena.take(s).expect("checked above"));
        if !psync {
            return (regions, std::ptr::null_mut());
        }
        let p = self
            .psyncs
            .wrapping_add(self.arena.psync_next * PSYNC_WORDS);
        self.arena.psync_next += 1;
        (regions, p)
    }

    fn run_step(&mut self, groups: &[Group]) {
        let g = &groups[self.rng.below(groups.len())];
        let kind = self.rng.pick(&KINDS);
        // A PE now and then computes a little before the call (the others run ahead).
        let sleeper = self.rng.below(self.npes * 25);
        let nap = Duration::from_micros(self.rng.below(2000) as u64);
        let what = format!("{kind:?} on {} ({} PEs)", g.name, g.members.len());
        let me_in = g.ordinal(self.me);
        if sleeper == self.me && me_in.is_some() {
            std::thread::sleep(nap);
        }
        match kind {
            Kind::Barrier => self.barrier(g, me_in, &what),
            Kind::Broadcast => self.broadcast(g, me_in, &what),
            Kind::Fcollect | Kind::Collect => self.gather(g, me_in, kind, &what),
            Kind::Alltoall | Kind::Alltoalls => self.alltoall(g, me_in, kind, &what),
            Kind::Reduce => self.reduce(g, me_in, &what),
            Kind::Exchange => self.exchange(g, me_in, &what),
        }
        self.counts[KINDS.iter().position(|&k| k == kind).unwrap_or(0)] += 1;
        if g.is_team() {
            self.team_calls += 1;
        } else {
            self.set_calls += 1;
        }
        self.last = what;
    }

    fn barrier(&mut self, g: &Group, me_in: Option<usize>, what: &str) {
        let n = g.members.len();
        let ([slots], _) = self.regions(g, [8]);
        let quiet_first = self.rng.below(2) == 0;
        let Some(i) = me_in else { return };
        let token = self.step | 1 << 63;
        let right = g.members[(i + 1) % n];
        // SAFETY: `slots` is a symmetric 8-byte region; `token` lives until the quiet or
        // barrier below completes the put.
        unsafe {
            shmem_putmem_nbi(slots.cast(), (&raw const token).cast(), 8, right as c_int);
            match g.form {
                Form::Team(t) => {
                    // A sync completes no puts: quiet first.
                    shmem_quiet();
                    if shmem_team_sync(t) != 0 {
                        self.fail(what, format_args!("shmem_team_sync refused"));
                    }
                }
                Form::Set {
                    start,
                    log_stride,
                    barrier_psync,
                } => {
                    if quiet_first {
                        shmem_quiet();
                        shmem_sync(start, log_stride, n as c_int, barrier_psync);
                    } else {
                        shmem_barrier(start, log_stride, n as c_int, barrier_psync);
                    }
                }
            }
        }
        // SAFETY: this PE's slot, written by its left neighbour before the barrier.
        let got = unsafe { std::ptr::read_volatile(slots.cast::<u64>()) };
        if got != token {
            let left = g.members[(i + n - 1) % n];
            self.fail(
                what,
                format_args!("the token of PE {left} is {got:#x}, want {token:#x}"),
            );
        }
    }

    /// Point-to-point puts around the group's ring, the flag exchange of applications: every
    /// member writes data (blocking `shmem_putmem`, any size: the small ones go straight to
    /// a PE of another node, the others through its service), `shmem_fence`, and an 8-byte
    /// flag (`shmem_putmem`, `shmem_uint64_p` or `shmem_uint64_atomic_set`) into its right
    /// neighbour, or the data and the flag in one `shmem_putmem_signal` (no fence: the
    /// signal must follow its data by itself; `SHMEM_SIGNAL_SET`, or `SHMEM_SIGNAL_ADD`
    /// onto the zeroed flag, which a duplicated datagram applied twice would double), or,
    /// in a `SHMEM_CTX_SESSION_BATCH` session on this cycle's context (OpenSHMEM 1.6), the
    /// data in up to three `shmem_ctx_putmem`, `shmem_ctx_fence` and the flag by
    /// `shmem_ctx_uint64_p`: blocking puts that wait in their frame for the next send, with
    /// the session stopped before the wait, or only after it (then the held puts, the
    /// flag's included, must leave by themselves while every PE of the ring waits). It
    /// then waits for its own flag (`shmem_uint64_wait_until`, or polls `shmem_uint64_test`)
    /// and checks the data of its left neighbour: the flag must not overtake the data,
    /// whichever paths the two take, and must hold exactly the token. (Without the fence
    /// OpenSHMEM does not order a put and a flag, and gsas does not either: two writes
    /// through a service may be reordered by a lost datagram.) No PE meets another after
    /// it: the regions are fresh, as for every step.
    fn exchange(&mut self, g: &Group, me_in: Option<usize>, what: &str) {
        let n = g.members.len();
        let len = match self.rng.below(4) {
            // Mostly what goes straight to the PE (SHMEM_P2P_DIRECT_MAX, 1 KiB by default).
            0..=2 => self.rng.below(1025),
            _ => self.size(1),
        };
        let flag_by = self.rng.below(7);
        let polls = self.rng.below(2) == 0;
        // The session forms put the data in up to three pieces.
        let cut = [self.rng.below(len + 1), self.rng.below(len + 1)];
        let ([src, dest, flag], _) = self.regions(g, [len, len, 8]);
        let Some(i) = me_in else { return };
        let right = g.members[(i + 1) % n];
        let left = g.members[(i + n - 1) % n];
        let token = self.step | 1 << 63;
        let what = format!(
            "{what}, {len} bytes, {}, {} for it",
            [
                "a fence and a flag by shmem_putmem",
                "a fence and a flag by shmem_uint64_p",
                "a fence and a flag by shmem_uint64_atomic_set",
                "shmem_putmem_signal with SHMEM_SIGNAL_SET",
                "shmem_putmem_signal with SHMEM_SIGNAL_ADD",
                "in a SHMEM_CTX_SESSION_BATCH session on a context: the data in up to three \
                 shmem_ctx_putmem, shmem_ctx_fence and a flag by shmem_ctx_uint64_p, the \
                 session stopped before the wait",
                "in a SHMEM_CTX_SESSION_BATCH session on a context: the data in up to three \
                 shmem_ctx_putmem, shmem_ctx_fence and a flag by shmem_ctx_uint64_p, the \
                 session stopped after the wait (the held puts leave by themselves)",
            ][flag_by],
            if polls {
                "shmem_uint64_test"
            } else {
                "shmem_uint64_wait_until"
            }
        );
        fill(src, len, self.step, self.me);
        // SAFETY: symmetric regions of this step (`dest` of `len` bytes, `flag` of 8);
        // `src` and `token` outlive the blocking puts.
        unsafe {
            let f = flag.cast::<u64>();
            if flag_by < 3 {
                shmem_putmem(dest.cast(), src.cast(), len, right as c_int);
                shmem_fence();
            }
            match flag_by {
                0 => shmem_putmem(f.cast(), (&raw const token).cast(), 8, right as c_int),
                1 => shmem_uint64_p(f, token, right as c_int),
                2 => shmem_uint64_atomic_set(f, token, right as c_int),
                5 | 6 => {
                    let ctx = self.ctx;
                    shmem_ctx_session_start(ctx, SHMEM_CTX_SESSION_BATCH, std::ptr::null(), 0);
                    let (a, b) = (cut[0].min(cut[1]), cut[0].max(cut[1]));
                    for (from, to) in [(0, a), (a, b), (b, len)] {
                        shmem_ctx_putmem(
                            ctx,
                            dest.add(from).cast(),
                            src.add(from).cast(),
                            to - from,
                            right as c_int,
                        );
                    }
                    shmem_ctx_fence(ctx);
                    shmem_ctx_uint64_p(ctx, f, token, right as c_int);
                    if flag_by == 5 {
                        shmem_ctx_session_stop(ctx);
                    }
                }
                op => {
                    let sig_op = if op == 3 {
                        SHMEM_SIGNAL_SET
                    } else {
                        SHMEM_SIGNAL_ADD
                    };
                    shmem_putmem_signal(
                        dest.cast(),
                        src.cast(),
                        len,
                        f,
                        token,
                        sig_op,
                        right as c_int,
                    );
                }
            }
            // For any change of the zeroed flag, so that a wrong value fails below at once
            // instead of waiting; a flag stored by `shmem_putmem` (not one store of 8
            // bytes) for the token itself.
            let (cmp, value) = if flag_by == 0 {
                (SHMEM_CMP_EQ, token)
            } else {
                (SHMEM_CMP_NE, 0)
            };
            if polls {
                // Bounded, as the library's waits are (SHMEM_WAIT_TIMEOUT), and well inside
                // the loaded stage's job limit: a lost flag names its step instead of
                // hanging until the launcher ends the job.
                let t0 = Instant::now();
                while shmem_uint64_test(f, cmp, value) == 0 {
                    if t0.elapsed() > POLL_LIMIT {
                        self.fail(
                            &what,
                            format_args!("no flag from PE {left} after {POLL_LIMIT:?}"),
                        );
                    }
                    std::hint::spin_loop();
                }
            } else {
                shmem_uint64_wait_until(f, cmp, value);
            }
            if flag_by == 6 {
                shmem_ctx_session_stop(self.ctx);
            }
        }
        self.expect(dest, len, left, 0, &what, "dest (the flag came first)");
        // SAFETY: this PE's flag word of this step.
        let got = unsafe { std::ptr::read_volatile(flag.cast::<u64>()) };
        if got != token {
            self.fail(
                &what,
                format_args!("the flag of PE {left} is {got:#x}, want {token:#x}"),
            );
        }
    }

    fn broadcast(&mut self, g: &Group, me_in: Option<usize>, what: &str) {
        let n = g.members.len();
        let root = self.rng.below(n);
        let wide = self.rng.pick(&SET_FNS).bits / 8;
        let unit = if g.is_team() { 1 } else { wide };
        let len = self.size(unit);
        let ([src, dest], psync) = self.regions(g, [len, len]);
        let Some(i) = me_in else { return };
        let root_pe = g.members[root];
        let what = format!("{what}, {len} bytes from member {root} (PE {root_pe})");
        if i == root {
            fill(src, len, self.step, self.me);
        }
        // SAFETY: symmetric regions of `len` bytes; the pSync from the pool.
        let rc = unsafe {
            match g.form {
                Form::Team(t) => shmem_broadcastmem(t, dest.cast(), src.cast(), len, root as c_int),
                Form::Set {
                    start, log_stride, ..
                } => {
                    let f = SET_FNS.iter().find(|f| f.bits / 8 == wide).expect("width");
                    (f.broadcast)(
                        dest.cast(),
                        src.cast(),
                        len / wide,
                        root as c_int,
                        start,
                        log_stride,
                        n as c_int,
                        psync,
                    );
                    0
                }
            }
        };
        if rc != 0 {
            self.fail(&what, format_args!("refused ({rc})"));
        }
        if i == root && !g.is_team() {
            // An active-set broadcast leaves the root's dest alone.
            self.expect_zero(dest, len, &what, "the root's dest");
        } else {
            self.expect(dest, len, root_pe, 0, &what, "dest");
        }
    }

    fn gather(&mut self, g: &Group, me_in: Option<usize>, kind: Kind, what: &str) {
        let n = g.members.len();
        let wide = self.rng.pick(&SET_FNS).bits / 8;
        let unit = if g.is_team() { 1 } else { wide };
        let fixed = self.size(unit);
        let sizes: Vec<usize> = (0..n)
            .map(|_| {
                if kind == Kind::Fcollect {
                    fixed
                } else {
                    self.size(unit)
                }
            })
            .collect();
        let total: usize = sizes.iter().sum();
        let mine = me_in.map_or(0, |i| sizes[i]);
        let ([src, dest], psync) =
            self.regions(g, [sizes.iter().copied().max().unwrap_or(0), total]);
        let Some(_) = me_in else { return };
        let what = format!("{what}, {sizes:?} bytes");
        fill(src, mine, self.step, self.me);
        // SAFETY: symmetric regions holding this PE's block and the total.
        let rc = unsafe {
            match (g.form_team(), kind) {
                (Some(t), Kind::Fcollect) => shmem_fcollectmem(t, dest.cast(), src.cast(), mine),
                (Some(t), _) => shmem_collectmem(t, dest.cast(), src.cast(), mine),
                (None, _) => {
                    let (start, log_stride) = g.set_triplet();
                    let f = SET_FNS.iter().find(|f| f.bits / 8 == wide).expect("width");
                    let call = if kind == Kind::Fcollect {
                        f.fcollect
                    } else {
                        f.collect
                    };
                    call(
                        dest.cast(),
                        src.cast(),
                        mine / wide,
                        start,
                        log_stride,
                        n as c_int,
                        psync,
                    );
                    0
                }
            }
        };
        if rc != 0 {
            self.fail(&what, format_args!("refused ({rc})"));
        }
        let mut off = 0;
        for (k, &len) in sizes.iter().enumerate() {
            let block = format!("block of member {k} (PE {})", g.members[k]);
            self.expect(dest.wrapping_add(off), len, g.members[k], 0, &what, &block);
            off += len;
        }
    }

    fn alltoall(&mut self, g: &Group, me_in: Option<usize>, kind: Kind, what: &str) {
        let n = g.members.len();
        let wide = self.rng.pick(&SET_FNS).bits / 8;
        let elem = match (g.is_team(), kind) {
            (true, Kind::Alltoall) => 1,
            (true, _) => self.rng.pick(&[1, 4, 8]),
            (false, _) => wide,
        };
        let (dst, sst) = if kind == Kind::Alltoalls {
            (1 + self.rng.below(3), 1 + self.rng.below(3))
        } else {
            (1, 1)
        };
        // Blocks around the boundaries too, as long as both extents fit half the arena.
        let most = self.arena.len / 4 / (n * elem * dst.max(sst));
        let nelems = (self.size(elem) / elem).min(most);
        let extent = |stride: usize| {
            if nelems == 0 {
                0
            } else {
                ((n * nelems - 1) * stride + 1) * elem
            }
        };
        let ([src, dest], psync) = self.regions(g, [extent(sst), extent(dst)]);
        let Some(i) = me_in else { return };
        let what = format!("{what}, {nelems} elements of {elem} bytes, strides {dst}/{sst}");
        // Element e of block l of this PE's source holds its data from byte (l * nelems + e) * elem.
        let mine = pattern(self.step, self.me, 0, n * nelems * elem);
        for (x, chunk) in mine.chunks(elem).enumerate() {
            // SAFETY: element x lies inside the source extent.
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), src.add(x * sst * elem), elem) };
        }
        let (d, s) = (dst as isize, sst as isize);
        // SAFETY: symmetric regions over their strided extents.
        let rc = unsafe {
            match g.form {
                Form::Team(t) => match (kind, elem) {
                    (Kind::Alltoall, _) => shmem_alltoallmem(t, dest.cast(), src.cast(), nelems),
                    (_, 1) => shmem_alltoallsmem(t, dest.cast(), src.cast(), d, s, nelems),
                    (_, 4) => shmem_int32_alltoalls(t, dest.cast(), src.cast(), d, s, nelems),
                    _ => shmem_int64_alltoalls(t, dest.cast(), src.cast(), d, s, nelems),
                },
                Form::Set {
                    start, log_stride, ..
                } => {
                    let f = SET_FNS.iter().find(|f| f.bits / 8 == elem).expect("width");
                    let size = n as c_int;
                    if kind == Kind::Alltoall {
                        (f.alltoall)(
                            dest.cast(),
                            src.cast(),
                            nelems,
                            start,
                            log_stride,
                            size,
                            psync,
                        );
                    } else {
                        let (dp, sp) = (dest.cast(), src.cast());
                        (f.alltoalls)(dp, sp, d, s, nelems, start, log_stride, size, psync);
                    }
                    0
                }
            }
        };
        if rc != 0 {
            self.fail(&what, format_args!("refused ({rc})"));
        }
        // Block k of dest (its elements at stride dst) holds block i of member k's source;
        // the bytes between strided elements stay 0.
        let span = extent(dst);
        let mut want = vec![0u8; span];
        for k in 0..n {
            let theirs = pattern(self.step, g.members[k], i * nelems * elem, nelems * elem);
            for (e, chunk) in theirs.chunks(elem).enumerate() {
                let at = (k * nelems + e) * dst * elem;
                want[at..at + elem].copy_from_slice(chunk);
            }
        }
        // SAFETY: this PE's dest extent.
        let got = unsafe { std::slice::from_raw_parts(dest, span) };
        if got != want.as_slice() {
            let at = (0..span).find(|&b| got[b] != want[b]).unwrap_or(0);
            let k = (at / elem / dst / nelems.max(1)).min(n - 1);
            self.fail(
                &what,
                format_args!(
                    "dest byte {at} (block from member {k}, PE {}) = {}, want {}",
                    g.members[k], got[at], want[at]
                ),
            );
        }
    }

    fn reduce(&mut self, g: &Group, me_in: Option<usize>, what: &str) {
        let n = g.members.len();
        let (ty, op, team_fn, set_fn) = self.rng.pick(REDUCTIONS);
        let width = if ty == Ty::Int { 4 } else { 8 };
        let count = self.size(width) / width / 2;
        let in_place = self.rng.below(4) == 0;
        let wrk_elems = (count / 2 + 1).max(1);
        let ([src, dest, wrk], psync) =
            self.regions(g, [count * width, count * width, wrk_elems * width]);
        let Some(_) = me_in else { return };
        let what = format!(
            "{what}, {op:?} of {count} {ty:?}{}",
            if in_place { " in place" } else { "" }
        );
        let value = |pe: usize, k: usize| -> i64 {
            let x = (pat_word(self.step, pe, k) & 0xff) as i64;
            match op {
                Op::Prod => 1 + (x & 1),
                Op::And | Op::Or | Op::Xor => (x * 0x0101_0101) ^ ((k as i64) << 3),
                _ => x - 128 + (k as i64 % 7) * 1000,
            }
        };
        let target = if in_place { src } else { dest };
        for k in 0..count {
            let v = value(self.me, k);
            // SAFETY: element k of the source region.
            unsafe {
                match ty {
                    Ty::Int => *src.cast::<i32>().add(k) = v as i32,
                    Ty::Long => *src.cast::<i64>().add(k) = v,
                    Ty::Double => *src.cast::<f64>().add(k) = v as f64,
                }
            }
        }
        // SAFETY: symmetric regions of `count` elements (same or disjoint), pWrk and pSync.
        let rc = unsafe {
            match g.form {
                Form::Team(t) => team_fn(t, target.cast(), src.cast(), count),
                Form::Set {
                    start, log_stride, ..
                } => {
                    set_fn(
                        target.cast(),
                        src.cast(),
                        count as c_int,
                        start,
                        log_stride,
                        n as c_int,
                        wrk.cast(),
                        psync,
                    );
                    0
                }
            }
        };
        if rc != 0 {
            self.fail(&what, format_args!("refused ({rc})"));
        }
        for k in 0..count {
            let mut acc = value(g.members[0], k);
            for &m in &g.members[1..] {
                let v = value(m, k);
                acc = match (ty, op) {
                    (Ty::Int, Op::Sum) => (acc as i32).wrapping_add(v as i32) as i64,
                    (Ty::Int, Op::Prod) => (acc as i32).wrapping_mul(v as i32) as i64,
                    (_, Op::Sum) => acc.wrapping_add(v),
                    (_, Op::Prod) => acc.wrapping_mul(v),
                    (_, Op::Max) => acc.max(v),
                    (_, Op::Min) => acc.min(v),
                    (_, Op::And) => acc & v,
                    (_, Op::Or) => acc | v,
                    (_, Op::Xor) => acc ^ v,
                };
            }
            // SAFETY: element k of the result.
            let (got, want) = unsafe {
                match ty {
                    Ty::Int => (*target.cast::<i32>().add(k) as f64, acc as i32 as f64),
                    Ty::Long => (*target.cast::<i64>().add(k) as f64, acc as f64),
                    Ty::Double => (*target.cast::<f64>().add(k), acc as f64),
                }
            };
            if got != want {
                self.fail(&what, format_args!("element {k} = {got}, want {want}"));
            }
        }
    }

    /// Checks `len` bytes at `at`: PE `pe`'s pattern from index `from`.
    fn expect(&self, at: *const u8, len: usize, pe: usize, from: usize, what: &str, name: &str) {
        // SAFETY: `len` bytes of this PE's arena.
        let got = unsafe { std::slice::from_raw_parts(at, len) };
        let want = pattern(self.step, pe, from, len);
        if got != want.as_slice() {
            let i = (0..len).find(|&i| got[i] != want[i]).unwrap_or(0);
            self.fail(
                what,
                format_args!(
                    "{name}: byte {i} = {}, want {} (PE {pe}'s data)",
                    got[i], want[i]
                ),
            );
        }
    }

    fn expect_zero(&self, at: *const u8, len: usize, what: &str, name: &str) {
        // SAFETY: `len` bytes of this PE's arena.
        let got = unsafe { std::slice::from_raw_parts(at, len) };
        if let Some(i) = got.iter().position(|&b| b != 0) {
            self.fail(
                what,
                format_args!("{name}: byte {i} = {}, want 0 (untouched)", got[i]),
            );
        }
    }
}

impl Group {
    fn form_team(&self) -> Option<*const c_void> {
        match self.form {
            Form::Team(t) => Some(t),
            Form::Set { .. } => None,
        }
    }

    fn set_triplet(&self) -> (c_int, c_int) {
        match self.form {
            Form::Set {
                start, log_stride, ..
            } => (start, log_stride),
            Form::Team(_) => (0, 0),
        }
    }
}

/// Writes PE `pe`'s data of step `step` into `len` bytes at `at`.
fn fill(at: *mut u8, len: usize, step: u64, pe: usize) {
    let data = pattern(step, pe, 0, len);
    // SAFETY: `len` bytes of this PE's arena, disjoint from the new vector.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, len) };
}

/// The world team, teams split off it, and active sets, with their members.
fn groups<'s>(shmem: &'s Shmem, owned: &mut Vec<shmem::OwnedTeam<'s>>) -> Vec<Group> {
    let n = shmem.n_pes();
    let world = shmem.team_world();
    let mut out = vec![Group {
        name: "SHMEM_TEAM_WORLD".into(),
        members: (0..n).collect(),
        form: Form::Team(world.as_raw()),
    }];
    let splits = [
        ("even", 0, 2, n.div_ceil(2)),
        ("odd", 1, 2, n / 2),
        ("tail", 1, 1, n.saturating_sub(1)),
        ("head", 0, 1, n.saturating_sub(1)),
        ("thirds", 0, 3, n.div_ceil(3)),
    ];
    for (name, start, stride, size) in splits {
        if size == 0 {
            continue;
        }
        let t = world
            .split_strided(start, stride as isize, size, TeamConfig::default())
            .unwrap_or_else(|e| usage(&format!("splitting team {name}: {e}")));
        let handle = t.as_ref().map_or(std::ptr::null(), |t| t.team().as_raw());
        out.push(Group {
            name: format!("team {name}"),
            members: (0..size).map(|i| start + i * stride).collect(),
            form: Form::Team(handle),
        });
        owned.extend(t);
    }
    let sets = [
        ("all", 0, 0, n),
        ("evens", 0, 1, n.div_ceil(2)),
        ("odds", 1, 1, n / 2),
        ("tail", 1, 0, n.saturating_sub(1)),
        ("fourths", 0, 2, n.div_ceil(4)),
    ];
    let sets: Vec<_> = sets.into_iter().filter(|s| s.3 > 0).collect();
    let barrier_psyncs = shmem
        .alloc_vec::<c_long>(16 * sets.len())
        .unwrap_or_else(|e| usage(&format!("allocating pSyncs: {e}")));
    barrier_psyncs.fill(0);
    let base = barrier_psyncs.as_ptr().cast_mut();
    std::mem::forget(barrier_psyncs);
    for (k, (name, start, log_stride, size)) in sets.into_iter().enumerate() {
        out.push(Group {
            name: format!("active set {name}"),
            members: (0..size).map(|i| start + (i << log_stride)).collect(),
            form: Form::Set {
                start: start as c_int,
                log_stride: log_stride as c_int,
                barrier_psync: base.wrapping_add(16 * k),
            },
        });
    }
    out
}

/// What one initialization cycle hands to the next: the random sequence and the counts.
struct Tally {
    rng: Rng,
    counts: [u64; KINDS.len()],
    set_calls: u64,
    team_calls: u64,
    wraps: u64,
}

fn main() -> Result<(), shmem::Error> {
    let opt = options();
    let mut tally = Tally {
        rng: Rng(opt.seed),
        counts: [0; KINDS.len()],
        set_calls: 0,
        team_calls: 0,
        wraps: 0,
    };
    let t0 = Instant::now();
    let mut pes = (0, 0);
    for cycle in 0..opt.cycles {
        let steps = opt.count * cycle / opt.cycles..opt.count * (cycle + 1) / opt.cycles;
        (tally, pes) = run_cycle(&opt, steps, tally, t0)?;
    }
    let (me, npes) = pes;
    if me == 0 {
        let kinds: Vec<String> = KINDS
            .iter()
            .zip(tally.counts)
            .map(|(k, n)| format!("{n} {}", format!("{k:?}").to_lowercase()))
            .collect();
        let cycles = if opt.cycles > 1 {
            format!(", {} initialization cycles", opt.cycles)
        } else {
            String::new()
        };
        println!(
            "coll_check: {} collectives on {npes} PEs checked exactly (seed {}): {} ({} on teams, {} on active sets, {} arena wraps{cycles}) in {:.1} s",
            opt.count,
            opt.seed,
            kinds.join(", "),
            tally.team_calls,
            tally.set_calls,
            tally.wraps,
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// One initialization cycle (`shmem::init` .. `finalize`): the arena, the `pSync`s and the
/// groups made afresh, then the steps of `steps`.
fn run_cycle(
    opt: &Options,
    steps: std::ops::Range<u64>,
    tally: Tally,
    t0: Instant,
) -> Result<(Tally, (usize, usize)), shmem::Error> {
    let shmem = shmem::init()?;
    let (me, npes) = (shmem.my_pe(), shmem.n_pes());
    let arena = shmem.alloc_vec::<u8>(opt.arena)?;
    let psyncs = shmem.alloc_vec::<c_long>(PSYNCS * PSYNC_WORDS)?;
    arena.fill(0);
    psyncs.fill(0);
    let mut owned = Vec::new();
    let groups = groups(&shmem, &mut owned);
    let mut ctx: *const c_void = std::ptr::null();
    // SAFETY: `ctx` receives the handle; destroyed below before the cycle's finalize.
    if unsafe { shmem_ctx_create(0, &raw mut ctx) } != 0 {
        eprintln!("coll_check: PE {me}: shmem_ctx_create failed");
        // SAFETY: ends the job.
        unsafe { shmem_global_exit(1) }
    }
    shmem.barrier_all();
    let small = vec![
        1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 56, 63, 64, 65, 100, 127, 128, 129, 255,
        256, 257, 1000, 1024, 2000,
    ];
    let mut c = Checker {
        me,
        npes,
        opt,
        rng: tally.rng,
        arena: Arena {
            base: arena.as_ptr().cast_mut(),
            len: opt.arena,
            used: 0,
            high: opt.arena,
            psync_next: 0,
        },
        psyncs: psyncs.as_ptr().cast_mut(),
        ctx,
        small,
        boundary: boundary_sizes(opt.mtu, opt.max_bytes),
        step: 0,
        last: "none".into(),
        counts: tally.counts,
        set_calls: tally.set_calls,
        team_calls: tally.team_calls,
        wraps: tally.wraps,
    };
    for step in steps {
        c.step = step;
        c.run_step(&groups);
        if me == 0 && opt.progress > 0 && (step + 1) % opt.progress == 0 && step + 1 < opt.count {
            println!(
                "coll_check: {} of {} collectives checked, {:.1} s",
                step + 1,
                opt.count,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    shmem.barrier_all();
    let tally = Tally {
        rng: c.rng,
        counts: c.counts,
        set_calls: c.set_calls,
        team_calls: c.team_calls,
        wraps: c.wraps,
    };
    // SAFETY: created above; no session is open and nothing uses it after this.
    unsafe { shmem_ctx_destroy(ctx) };
    drop(owned);
    drop((arena, psyncs));
    shmem.finalize()?;
    Ok((tally, (me, npes)))
}
