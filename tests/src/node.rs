//! The PE side of the node tests: scenarios a test binary runs when a launcher (oshrun,
//! or a test harness playing one) starts it in child mode, and the harness helpers.
//!
//! Child mode: the parent sets `GSAS_TEST_SCENARIO` and starts the test binary through
//! [`self_test_argv`](crate::launch::self_test_argv)`("child_pe")`; the binary's `child_pe`
//! calls [`child`], which sees the variable, runs the scenario as one PE of the job and
//! ends the process (exit 0 on success; a failed check panics, which exits non-zero and
//! makes the launcher end the job). Without the variable [`child`] returns at once: run
//! as an ordinary test, `child_pe` does nothing. The singleton job (rank 0 of 1, with an
//! embedded service) is one test of its own (`cluster`'s
//! `every_scenario_in_a_singleton_job`), which calls [`run`]`("all")`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gsas_core::wire::{AtomicOp, AtomicType};
use gsas_node::{Ctx, HEAP, Node, NodeError, NodeOptions};

/// The variable naming the scenario a child runs.
pub const SCENARIO: &str = "GSAS_TEST_SCENARIO";
/// A directory for files the PEs and the harness use to signal each other.
pub const SIGNAL_DIR: &str = "GSAS_TEST_DIR";

const CTX: Ctx = Ctx::DEFAULT;

/// The scenario this process runs as a child PE, if the parent named one.
pub fn scenario() -> Option<String> {
    std::env::var(SCENARIO).ok()
}

/// In a child (the parent set [`SCENARIO`]): runs the scenario and ends the process with
/// status 0. Otherwise returns at once.
pub fn child() {
    if let Some(s) = scenario() {
        run(&s);
        std::process::exit(0);
    }
}

fn init() -> Node {
    init_pe(20 << 20)
}

/// `Node::init` of a child PE with a symmetric heap of `heap` bytes; panics with the error.
pub fn init_pe(heap: u64) -> Node {
    Node::init(NodeOptions {
        heap_size: Some(heap),
        ..NodeOptions::default()
    })
    .unwrap_or_else(|e| panic!("Node::init: {e}"))
}

/// Runs `scenario` (`all`, `rma`, `pairs`, `amo`, `threads`, `hang`, `abort`, ...) as one PE of
/// the job this process belongs to (a singleton job without a launcher).
pub fn run(scenario: &str) {
    let node = init();
    match scenario {
        "all" => {
            rma(&node);
            amo(&node);
            barriers(&node);
            contexts(&node);
            threads(&node);
        }
        "rma" => rma(&node),
        // Every pair of PEs: puts, gets and atomics between each PE and every other.
        "pairs" => {
            pairs(&node);
            amo(&node);
        }
        "threads" => threads(&node),
        "amo" => amo(&node),
        "hang" => hang(&node),
        "abort" => {
            node.barrier_all().unwrap();
            if node.rank() == 1 {
                node.abort(5, "PE 1 gives up on purpose");
            }
            // The others wait to be ended by the launcher (bounded).
            std::thread::sleep(Duration::from_secs(120));
            panic!("PE {} was not ended after the abort", node.rank());
        }
        "remote-failure" => remote_failure(&node),
        // Nothing but the barriers of init and finalize: the end of a job alone.
        "end" => node.barrier_all().unwrap(),
        "end-after-work" => end_after_work(&node),
        other => panic!("unknown scenario {other}"),
    }
    if !node.direct() {
        // GSAS_DIRECT=0: even same-node operations went through the service's ring.
        assert!(
            node.remote_ops_started() > 0,
            "no operation went through the service"
        );
    }
    if scenario != "remote-failure" {
        node.finalize().unwrap_or_else(|e| panic!("finalize: {e}"));
    }
    println!("PE {} of {}: {scenario} ok", node.rank(), node.size());
}

/// The bytes PE `pe` sends in a transfer of `len` bytes.
pub fn pattern(pe: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (pe as usize * 31 + i * 7 + len) as u8)
        .collect()
}

/// Puts and gets of every size class between neighbours, checked byte for byte.
fn rma(node: &Node) {
    let (me, n) = (node.rank(), node.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let max = 4 << 20;
    let dst = node.alloc(max).unwrap().expect("heap block");
    node.barrier_all().unwrap();
    let mut got = vec![0u8; max as usize];
    for size in [
        1usize,
        7,
        8,
        56,
        57,
        64,
        1000,
        4096,
        61_440,
        65_539,
        1 << 20,
        4 << 20,
    ] {
        let data = pattern(me, size);
        node.put(CTX, right, HEAP, dst, &data)
            .unwrap_or_else(|e| panic!("put of {size} bytes to PE {right}: {e}"));
        node.barrier_all().unwrap();
        let got = &mut got[..size];
        node.get(CTX, me, HEAP, dst, got).unwrap();
        assert!(
            got == &pattern(left, size)[..],
            "PE {me}: {size} bytes from PE {left} differ"
        );
        node.get(CTX, right, HEAP, dst, got)
            .unwrap_or_else(|e| panic!("get of {size} bytes from PE {right}: {e}"));
        assert!(
            got == &data[..],
            "PE {me}: {size} bytes read back from PE {right} differ"
        );
        node.barrier_all().unwrap();
    }
    // An unaligned offset inside the block, crossing fragment boundaries.
    let data = pattern(me + 100, 200_003);
    node.put(CTX, right, HEAP, dst + 13, &data).unwrap();
    node.quiet(CTX).unwrap();
    node.barrier_all().unwrap();
    let mut back = vec![0u8; data.len()];
    node.get(CTX, me, HEAP, dst + 13, &mut back).unwrap();
    assert_eq!(back, pattern(left + 100, 200_003));
    node.barrier_all().unwrap();
    node.free(dst).unwrap();
}

/// Bytes each PE puts into every other PE in [`pairs`]: three 1472-byte datagrams' worth,
/// so that each pair's put and get are cut into fragments at every MTU the tests use.
const PAIR_BYTES: usize = 3000;

/// Every PE puts its record into its own slot of a table on every other PE (starting at
/// its right neighbour, so that the PEs do not all begin with PE 0), then checks that its
/// own table holds every other PE's record, and reads back from every other PE the record
/// it put there.
fn pairs(node: &Node) {
    let (me, n) = (node.rank(), node.size());
    let len = PAIR_BYTES as u64;
    let table = node.calloc(u64::from(n), len).unwrap().expect("pair table");
    let slot = |pe: u32| table + u64::from(pe) * len;
    node.barrier_all().unwrap();
    let mine = pattern(me, PAIR_BYTES);
    for k in 1..n {
        let t = (me + k) % n;
        node.put(CTX, t, HEAP, slot(me), &mine)
            .unwrap_or_else(|e| panic!("PE {me}: put of {PAIR_BYTES} bytes to PE {t}: {e}"));
    }
    node.quiet(CTX).unwrap();
    node.barrier_all().unwrap();
    let mut got = vec![0u8; PAIR_BYTES];
    for k in 1..n {
        let p = (me + n - k) % n;
        node.get(CTX, me, HEAP, slot(p), &mut got).unwrap();
        assert!(
            got == pattern(p, PAIR_BYTES),
            "PE {me}: the record PE {p} put here differs"
        );
        let t = (me + k) % n;
        node.get(CTX, t, HEAP, slot(me), &mut got)
            .unwrap_or_else(|e| panic!("PE {me}: get of {PAIR_BYTES} bytes from PE {t}: {e}"));
        assert!(
            got == mine,
            "PE {me}: the record read back from PE {t} differs"
        );
    }
    node.barrier_all().unwrap();
    node.free(table).unwrap();
}

/// The wire bits of `x` for `ty`.
fn bits(x: i64, ty: AtomicType) -> u64 {
    match ty {
        AtomicType::I32 | AtomicType::U32 => u64::from(x as i32 as u32),
        _ => x as u64,
    }
}

/// Every operation and datatype with exact expected results, plus counters every PE
/// updates on every PE.
fn amo(node: &Node) {
    let (me, n) = (node.rank(), node.size());
    let right = (me + 1) % n;
    let counters = node.calloc(4, 8).unwrap().expect("counters");
    let slots = node.calloc(8, 8).unwrap().expect("slots");
    node.barrier_all().unwrap();
    counters_from_everyone(node, counters);
    integer_sequence(node, slots, right);
    floats_and_refusal(node, slots, right);
    node.barrier_all().unwrap();
    node.free(slots).unwrap();
    node.free(counters).unwrap();
}

/// Every PE adds, increments and ors into the counters of every PE; each PE then checks
/// its own.
fn counters_from_everyone(node: &Node, counters: u64) {
    let (me, n) = (node.rank(), node.size());
    // Everyone adds into everyone.
    let total = u64::from(n) * u64::from(n + 1) / 2;
    for t in 0..n {
        let old = node
            .atomic(
                CTX,
                t,
                HEAP,
                counters,
                AtomicOp::FetchAdd,
                AtomicType::U64,
                u64::from(me + 1),
                0,
            )
            .unwrap_or_else(|e| panic!("fetch-add on PE {t}: {e}"));
        assert!(old < total, "PE {me}: fetch-add on PE {t} returned {old}");
        node.atomic(
            CTX,
            t,
            HEAP,
            counters + 8,
            AtomicOp::Add,
            AtomicType::U32,
            1,
            0,
        )
        .unwrap();
        node.atomic_nbi(
            CTX,
            t,
            HEAP,
            counters + 16,
            AtomicOp::Inc,
            AtomicType::I64,
            0,
            0,
        )
        .unwrap();
        node.atomic_nbi(
            CTX,
            t,
            HEAP,
            counters + 24,
            AtomicOp::Or,
            AtomicType::U64,
            1 << (me % 64),
            0,
        )
        .unwrap();
    }
    node.barrier_all().unwrap();
    let mut c = [0u8; 32];
    node.get(CTX, me, HEAP, counters, &mut c).unwrap();
    let word = |i: usize| u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!(word(0), total, "PE {me}: fetch-add counter");
    assert_eq!(
        word(1) & 0xffff_ffff,
        u64::from(n),
        "PE {me}: 32-bit add counter"
    );
    assert_eq!(
        word(1) >> 32,
        0,
        "PE {me}: 32-bit add spilled into the next word"
    );
    assert_eq!(word(2), u64::from(n), "PE {me}: inc counter");
    let mask = (0..n).fold(0u64, |m, p| m | 1 << (p % 64));
    assert_eq!(word(3), mask, "PE {me}: or counter");
}

/// The full sequence of integer operations, for every integer type, on my slots of my
/// right neighbour (only I touch them).
fn integer_sequence(node: &Node, slots: u64, right: u32) {
    for (k, ty) in [
        AtomicType::I32,
        AtomicType::U32,
        AtomicType::I64,
        AtomicType::U64,
    ]
    .into_iter()
    .enumerate()
    {
        let at = slots + 8 * k as u64;
        let wide = matches!(ty, AtomicType::I64 | AtomicType::U64);
        let b: i64 = if wide { 5 + (1 << 40) } else { 5 };
        let mask = if wide { u64::MAX } else { 0xffff_ffff };
        let op = |op: AtomicOp, v: i64, cmp: i64| -> u64 {
            node.atomic(CTX, right, HEAP, at, op, ty, bits(v, ty), bits(cmp, ty))
                .unwrap_or_else(|e| panic!("{op:?} on {ty:?} at PE {right}: {e}"))
        };
        let want = |x: i64| (x as u64) & mask;
        assert_eq!(op(AtomicOp::Set, b, 0), 0);
        assert_eq!(op(AtomicOp::Fetch, 0, 0), want(b), "{ty:?} fetch after set");
        assert_eq!(op(AtomicOp::FetchAdd, -3, 0), want(b), "{ty:?} fetch-add");
        node.atomic_nbi(CTX, right, HEAP, at, AtomicOp::Add, ty, bits(10, ty), 0)
            .unwrap();
        node.quiet(CTX).unwrap();
        assert_eq!(
            op(AtomicOp::FetchInc, 0, 0),
            want(b + 7),
            "{ty:?} fetch-inc"
        );
        op(AtomicOp::Inc, 0, 0);
        assert_eq!(op(AtomicOp::Swap, 100, 0), want(b + 9), "{ty:?} swap");
        assert_eq!(
            op(AtomicOp::CompareSwap, 1, 99),
            100,
            "{ty:?} failing cswap"
        );
        assert_eq!(op(AtomicOp::CompareSwap, 7, 100), 100, "{ty:?} cswap");
        assert_eq!(op(AtomicOp::FetchAnd, 6, 0), 7, "{ty:?} fetch-and");
        op(AtomicOp::And, 4, 0);
        assert_eq!(op(AtomicOp::FetchOr, 1, 0), 4, "{ty:?} fetch-or");
        op(AtomicOp::Or, 8, 0);
        assert_eq!(op(AtomicOp::FetchXor, 0xff, 0), 13, "{ty:?} fetch-xor");
        op(AtomicOp::Xor, 0x0f, 0);
        let mut out = [0u8; 8];
        // SAFETY: `out` outlives the quiet below and is not touched meanwhile.
        unsafe {
            node.atomic_fetch_nbi(
                CTX,
                right,
                HEAP,
                at,
                AtomicOp::Fetch,
                ty,
                0,
                0,
                out.as_mut_ptr(),
            )
            .unwrap();
        }
        node.quiet(CTX).unwrap();
        assert_eq!(u64::from_le_bytes(out), 0xfd, "{ty:?} final value");
    }
}

/// Set, fetch and swap of floats; a float add, which the wire does not have, is refused.
fn floats_and_refusal(node: &Node, slots: u64, right: u32) {
    for (k, ty) in [(4u64, AtomicType::F32), (5, AtomicType::F64)] {
        let at = slots + 8 * k;
        let (one, two) = if ty == AtomicType::F32 {
            (u64::from(1.5f32.to_bits()), u64::from(2.5f32.to_bits()))
        } else {
            (1.5f64.to_bits(), 2.5f64.to_bits())
        };
        node.atomic(CTX, right, HEAP, at, AtomicOp::Set, ty, one, 0)
            .unwrap();
        assert_eq!(
            node.atomic(CTX, right, HEAP, at, AtomicOp::Fetch, ty, 0, 0)
                .unwrap(),
            one
        );
        assert_eq!(
            node.atomic(CTX, right, HEAP, at, AtomicOp::Swap, ty, two, 0)
                .unwrap(),
            one
        );
        assert_eq!(
            node.atomic(CTX, right, HEAP, at, AtomicOp::Fetch, ty, 0, 0)
                .unwrap(),
            two
        );
    }
    // A float add is not an atomic of the wire: refused before anything is sent.
    let e = node
        .atomic(
            CTX,
            right,
            HEAP,
            slots,
            AtomicOp::FetchAdd,
            AtomicType::F64,
            0,
            0,
        )
        .unwrap_err();
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
}

/// Many barriers, each checked with a put that must have arrived.
fn barriers(node: &Node) {
    let (me, n) = (node.rank(), node.size());
    let right = (me + 1) % n;
    let slot = node.calloc(1, 8).unwrap().expect("slot");
    node.barrier_all().unwrap();
    for round in 1..=20u64 {
        node.put(CTX, right, HEAP, slot, &round.to_le_bytes())
            .unwrap();
        node.barrier_all().unwrap();
        let mut b = [0u8; 8];
        node.get(CTX, me, HEAP, slot, &mut b).unwrap();
        assert_eq!(
            u64::from_le_bytes(b),
            round,
            "PE {me}: barrier round {round}"
        );
        node.barrier_all().unwrap();
    }
    node.free(slot).unwrap();
}

/// A little real work right before `finalize`: every PE puts a word to every PE, adds
/// into a counter on every PE (blocking, non-blocking and fetching), checks what it got
/// after a barrier, and reads a word back from every PE; the job then ends at once.
fn end_after_work(node: &Node) {
    let (me, n) = (node.rank(), node.size());
    let words = node.calloc(u64::from(n) + 1, 8).unwrap().expect("words");
    let counter = words + u64::from(n) * 8;
    node.barrier_all().unwrap();
    let mut fetched = Vec::new();
    for t in 0..n {
        let word = u64::from(me + 1) << 32 | u64::from(t);
        node.put(CTX, t, HEAP, words + u64::from(me) * 8, &word.to_le_bytes())
            .unwrap_or_else(|e| panic!("PE {me}: put to PE {t}: {e}"));
        node.atomic_nbi(CTX, t, HEAP, counter, AtomicOp::Add, AtomicType::U64, 1, 0)
            .unwrap_or_else(|e| panic!("PE {me}: add on PE {t}: {e}"));
        let old = node
            .atomic(
                CTX,
                t,
                HEAP,
                counter,
                AtomicOp::FetchAdd,
                AtomicType::U64,
                1 << 32,
                0,
            )
            .unwrap_or_else(|e| panic!("PE {me}: fetch-add on PE {t}: {e}"));
        fetched.push(old >> 32);
    }
    node.quiet(CTX).unwrap();
    node.barrier_all().unwrap();
    for from in 0..n {
        let mut b = [0u8; 8];
        node.get(CTX, me, HEAP, words + u64::from(from) * 8, &mut b)
            .unwrap();
        let want = u64::from(from + 1) << 32 | u64::from(me);
        assert_eq!(u64::from_le_bytes(b), want, "PE {me}: word from PE {from}");
    }
    let mut c = [0u8; 8];
    node.get(CTX, me, HEAP, counter, &mut c).unwrap();
    let want = u64::from(n) << 32 | u64::from(n);
    assert_eq!(u64::from_le_bytes(c), want, "PE {me}: counter");
    assert!(
        fetched.iter().all(|&f| f < u64::from(n)),
        "PE {me}: fetched {fetched:?}"
    );
    // A last round of reads from every PE: replies in flight until just before the end.
    for t in 0..n {
        let mut b = [0u8; 8];
        node.get(CTX, t, HEAP, words + u64::from(me) * 8, &mut b)
            .unwrap_or_else(|e| panic!("PE {me}: get from PE {t}: {e}"));
        let want = u64::from(me + 1) << 32 | u64::from(t);
        assert_eq!(
            u64::from_le_bytes(b),
            want,
            "PE {me}: word read back from PE {t}"
        );
    }
}

/// Two contexts with non-blocking puts, gets and fetching atomics, completed by quiet.
fn contexts(node: &Node) {
    let (me, n) = (node.rank(), node.size());
    let right = (me + 1) % n;
    let (c1, c2) = (node.ctx_create().unwrap(), node.ctx_create().unwrap());
    let nn = u64::from(n);
    let region = node.calloc(2 * nn, 8).unwrap().expect("region");
    let big = node.alloc(1 << 20).unwrap().expect("big");
    node.barrier_all().unwrap();
    for t in 0..n {
        let a = u64::from(me) * 1000 + 1;
        let b = u64::from(me) * 1000 + 2;
        node.put_nbi(c1, t, HEAP, region + 8 * u64::from(me), &a.to_le_bytes())
            .unwrap();
        node.put_nbi(
            c2,
            t,
            HEAP,
            region + 8 * (nn + u64::from(me)),
            &b.to_le_bytes(),
        )
        .unwrap();
    }
    let payload = pattern(me + 7, 1 << 20);
    node.put_nbi(c1, right, HEAP, big, &payload).unwrap();
    node.quiet(c1).unwrap();
    node.quiet(c2).unwrap();
    node.barrier_all().unwrap();
    let mut mine = vec![0u8; 16 * n as usize];
    node.get(CTX, me, HEAP, region, &mut mine).unwrap();
    for s in 0..n as usize {
        let w = |i: usize| u64::from_le_bytes(mine[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!(w(s), s as u64 * 1000 + 1, "PE {me}: c1 put from PE {s}");
        assert_eq!(
            w(n as usize + s),
            s as u64 * 1000 + 2,
            "PE {me}: c2 put from PE {s}"
        );
    }
    let mut theirs = vec![0u8; 16 * n as usize];
    let mut fetched = [0u8; 8];
    // SAFETY: `theirs` and `fetched` live until after the quiets below and are not touched
    // meanwhile.
    unsafe {
        node.get_nbi(c1, right, HEAP, region, theirs.as_mut_ptr(), theirs.len())
            .unwrap();
        node.atomic_fetch_nbi(
            c2,
            right,
            HEAP,
            region + 8 * u64::from(me),
            AtomicOp::Fetch,
            AtomicType::U64,
            0,
            0,
            fetched.as_mut_ptr(),
        )
        .unwrap();
    }
    node.quiet(c1).unwrap();
    node.quiet(c2).unwrap();
    assert_eq!(theirs, mine, "PE {me}: the right neighbour's region");
    assert_eq!(u64::from_le_bytes(fetched), u64::from(me) * 1000 + 1);
    let mut back = vec![0u8; 1 << 20];
    node.barrier_all().unwrap();
    node.get(CTX, me, HEAP, big, &mut back).unwrap();
    assert!(
        back == pattern((me + n - 1) % n + 7, 1 << 20),
        "PE {me}: 1 MiB put_nbi"
    );
    node.fence(c1).unwrap();
    node.ctx_destroy(c1).unwrap();
    node.ctx_destroy(c2).unwrap();
    assert!(node.ctx_destroy(Ctx::DEFAULT).is_err());
    node.barrier_all().unwrap();
    node.free(big).unwrap();
    node.free(region).unwrap();
}

/// Four threads, each with its own context, hammer every PE with atomics and puts. Each
/// round ends with a fence: two blocking puts to one address land in either order
/// otherwise (OpenSHMEM promises the order only across a fence or quiet), and the check
/// below wants the last round's value.
fn threads(node: &Node) {
    let (me, n) = (node.rank(), node.size());
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 50;
    let counter = node.calloc(1, 8).unwrap().expect("counter");
    let cells = node
        .calloc(THREADS * u64::from(n), 8)
        .unwrap()
        .expect("cells");
    node.barrier_all().unwrap();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            scope.spawn(move || {
                let ctx = node.ctx_create().unwrap();
                for round in 0..ROUNDS {
                    for pe in 0..n {
                        node.atomic_nbi(
                            ctx,
                            pe,
                            HEAP,
                            counter,
                            AtomicOp::Add,
                            AtomicType::U64,
                            1,
                            0,
                        )
                        .unwrap();
                        let cell = cells + 8 * (t * u64::from(n) + u64::from(me));
                        node.put(ctx, pe, HEAP, cell, &round.to_le_bytes()).unwrap();
                    }
                    if round % 10 == 0 {
                        node.quiet(ctx).unwrap();
                    } else {
                        node.fence(ctx).unwrap();
                    }
                }
                node.ctx_destroy(ctx).unwrap();
            });
        }
    });
    node.barrier_all().unwrap();
    let mut b = [0u8; 8];
    node.get(CTX, me, HEAP, counter, &mut b).unwrap();
    assert_eq!(
        u64::from_le_bytes(b),
        THREADS * ROUNDS * u64::from(n),
        "PE {me}: counter"
    );
    let mut all = vec![0u8; (THREADS * u64::from(n) * 8) as usize];
    node.get(CTX, me, HEAP, cells, &mut all).unwrap();
    for w in all.chunks(8) {
        assert_eq!(
            u64::from_le_bytes(w.try_into().unwrap()),
            ROUNDS - 1,
            "PE {me}: last put"
        );
    }
    node.barrier_all().unwrap();
}

/// Says it is ready (pid on stdout and a file), then sleeps until killed (bounded).
fn hang(node: &Node) {
    node.barrier_all().unwrap();
    println!("PE {} pid {} ready", node.rank(), std::process::id());
    if let Some(dir) = std::env::var_os(SIGNAL_DIR) {
        let f = PathBuf::from(dir).join(format!("ready-{}", node.rank()));
        std::fs::write(&f, std::process::id().to_string()).unwrap();
    }
    std::thread::sleep(Duration::from_secs(120));
    panic!("PE {} was not killed within 120 s", node.rank());
}

/// Two nodes, one PE each: after both are ready the harness kills node 1's service. PE 0
/// must see its operation to PE 1 fail within the deadline with an error naming node 1;
/// PE 1 must see its control connection break.
fn remote_failure(node: &Node) {
    let dir = PathBuf::from(std::env::var_os(SIGNAL_DIR).expect("GSAS_TEST_DIR"));
    let me = node.rank();
    let slot = node.calloc(1, 8).unwrap().expect("slot");
    node.barrier_all().unwrap();
    // One successful remote operation first.
    let other = 1 - me;
    node.atomic(CTX, other, HEAP, slot, AtomicOp::Add, AtomicType::U64, 1, 0)
        .unwrap();
    std::fs::write(dir.join(format!("ready-{me}")), b"").unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !dir.join("killed").exists() {
        assert!(
            Instant::now() < until,
            "PE {me}: the harness never killed the service"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    if me == 0 {
        let t0 = Instant::now();
        let mut buf = [0u8; 8];
        let e = node
            .get(CTX, 1, HEAP, slot, &mut buf)
            .expect_err("a get from a node whose service was killed must fail");
        let waited = t0.elapsed();
        let msg = e.to_string();
        println!(
            "PE 0: the get failed after {:.2} s: {msg}",
            waited.as_secs_f64()
        );
        assert!(matches!(e, NodeError::Unreachable { node: 1, .. }), "{e:?}");
        assert!(msg.starts_with("node 1 (127.0.0.1:"), "{msg}");
        assert!(msg.contains("no answer for"), "{msg}");
        assert!(waited < Duration::from_secs(20), "took {waited:?}");
    } else {
        let t0 = Instant::now();
        loop {
            match node.check_service() {
                Err(NodeError::ServiceGone { path }) => {
                    println!("PE 1: control connection to {} broke", path.display());
                    break;
                }
                Err(e) => panic!("unexpected error {e}"),
                Ok(()) => {
                    assert!(
                        t0.elapsed() < Duration::from_secs(20),
                        "PE 1 never saw its service die"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
    std::fs::write(dir.join(format!("done-{me}")), b"").unwrap();
}

/// A scratch directory for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gsas-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Entries of /dev/shm (to check that a job leaves nothing there).
pub fn dev_shm() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
