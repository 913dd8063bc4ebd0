//! PEs of the OpenSHMEM library for the tests of hangs that explain themselves (issue 25,
//! item 7): each scenario calls the C ABI as a C program would (so messages name the C
//! routines), waits where its test needs it, and writes `ready-<rank>` (its pid) into
//! `GSAS_TEST_DIR` just before. Shared by the `cluster` and `launch` binaries (a module
//! included by path, like shmem's `rust_common`).
//!
//! The waits never end by themselves (nobody sets the flags), except in [`WHERE`], which
//! the harness releases with a file `go`.

#![allow(dead_code)]

use std::ffi::{c_int, c_long, c_void};
use std::path::PathBuf;
use std::ptr::addr_of;
use std::time::{Duration, Instant};

/// Every PE waits in `shmem_long_wait_until` for a flag nobody sets.
pub const WAIT_UNTIL: &str = "shmem-wait-until";
/// Every PE polls a flag nobody sets with `shmem_long_test` in its own loop.
pub const TEST_LOOP: &str = "shmem-test-loop";
/// PE 0 waits in `shmem_long_wait_until`; the others in `shmem_barrier_all`.
pub const BARRIER: &str = "shmem-barrier";
/// PE 0 waits in `shmem_long_wait_until`; the others in `shmem_long_sum_reduce`.
pub const COLLECTIVE: &str = "shmem-collective";
/// PE 0 (the lock's home) takes a lock and then computes (sleeps in its own code); the
/// others wait in `shmem_set_lock`: PE 1 by atomics on PE 0's memory (same node), 2 and 3
/// by atomics through node 0's service.
pub const LOCK: &str = "shmem-lock";
/// After a barrier, PE `GSAS_TEST_VICTIM` exits with status 0 (`exit`, or `_exit` when
/// `GSAS_TEST_EXIT=_exit`) without `shmem_finalize`; the others call `shmem_barrier_all`.
pub const EXIT_EARLY: &str = "shmem-exit-early";
/// After a barrier every PE exits with status 0 without `shmem_finalize` (the library
/// finalizes at exit): a clean job.
pub const ALL_EXIT: &str = "shmem-all-exit";
/// Four PEs: 0 waits in `shmem_long_wait_until` for its flag (4) to become >= 5, 1 and 2 in
/// `shmem_barrier_all`, 3 computes until the file `go` exists, then sets PE 0's flag to 5;
/// all then finalize.
pub const WHERE: &str = "shmem-where";
/// After a barrier every PE writes three diagnostics to standard error, each in one write:
/// `gsas-test: PE <me>: the same words on every PE`, `gsas-test: PE <me>: words of PE <me>
/// alone` and, as the PE's logger would, `pe<me>[<pid>] warn: the same warning on every
/// PE`; then a barrier and `shmem_finalize` (a clean job).
pub const SAME_WORDS: &str = "shmem-same-words";
/// After a barrier every PE puts to PE `shmem_n_pes()`, which does not exist: each prints
/// the library's error (`shmem_long_p: PE N does not exist ...`) and aborts the job.
pub const BAD_PE: &str = "shmem-bad-pe";

/// The rank that exits in [`EXIT_EARLY`].
pub const VICTIM: &str = "GSAS_TEST_VICTIM";
/// `exit` or `_exit`, for [`EXIT_EARLY`].
pub const EXIT_HOW: &str = "GSAS_TEST_EXIT";

const CMP_EQ: c_int = 1;
const CMP_GE: c_int = 4;

unsafe extern "C" {
    static gsas_shmem_team_world: u8;
    fn shmem_my_pe() -> c_int;
    fn shmem_n_pes() -> c_int;
    fn shmem_calloc(count: usize, size: usize) -> *mut c_void;
    fn shmem_barrier_all();
    fn shmem_long_wait_until(ivar: *mut c_long, cmp: c_int, value: c_long);
    fn shmem_long_test(ivar: *mut c_long, cmp: c_int, value: c_long) -> c_int;
    fn shmem_long_p(dest: *mut c_long, value: c_long, pe: c_int);
    fn shmem_long_sum_reduce(
        team: *const c_void,
        dest: *mut c_long,
        source: *const c_long,
        nreduce: usize,
    ) -> c_int;
    fn shmem_set_lock(lock: *mut c_long);
    fn shmem_finalize();
}

/// Runs scenario `s` as one PE and ends the process, if `s` is one of this module's;
/// returns otherwise.
pub fn child(s: &str) {
    let run: fn() = match s {
        WAIT_UNTIL => wait_until,
        TEST_LOOP => test_loop,
        BARRIER => barrier,
        COLLECTIVE => collective,
        LOCK => lock,
        EXIT_EARLY => exit_early,
        ALL_EXIT => all_exit,
        WHERE => where_they_wait,
        SAME_WORDS => same_words,
        BAD_PE => bad_pe,
        _ => return,
    };
    // The Rust API starts the library (the C ABI's shmem_init would remap the globals,
    // which needs a process without other threads); the routines are the C ABI's.
    let lib = shmem::init().unwrap_or_else(|e| panic!("shmem::init: {e}"));
    std::mem::forget(lib);
    run();
    // SAFETY: the library is initialized; every PE of the scenario finalizes.
    unsafe { shmem_finalize() };
    std::process::exit(0);
}

fn dir() -> PathBuf {
    PathBuf::from(std::env::var_os(gsas_tests::node::SIGNAL_DIR).expect("GSAS_TEST_DIR"))
}

fn me() -> c_int {
    // SAFETY: the library is initialized.
    unsafe { shmem_my_pe() }
}

/// Writes `ready-<rank>` with this process's pid.
fn ready() {
    let tmp = dir().join(format!(".ready-{}", me()));
    std::fs::write(&tmp, std::process::id().to_string()).unwrap();
    std::fs::rename(&tmp, dir().join(format!("ready-{}", me()))).unwrap();
}

/// A zeroed symmetric `long` (a collective).
fn symmetric_long() -> *mut c_long {
    // SAFETY: the library is initialized; every PE calls it alike.
    let p = unsafe { shmem_calloc(1, std::mem::size_of::<c_long>()) }.cast::<c_long>();
    assert!(!p.is_null(), "shmem_calloc");
    p
}

/// Waits in `shmem_long_wait_until` for a flag nobody sets.
fn wait_forever(flag: *mut c_long) -> ! {
    // SAFETY: `flag` is symmetric and lives for the process.
    unsafe { shmem_long_wait_until(flag, CMP_EQ, 1) };
    panic!("PE {}: the flag nobody sets was set", me());
}

fn wait_until() {
    let flag = symmetric_long();
    ready();
    wait_forever(flag);
}

fn test_loop() {
    let flag = symmetric_long();
    ready();
    // SAFETY: `flag` is symmetric and lives for the process.
    while unsafe { shmem_long_test(flag, CMP_EQ, 1) } == 0 {
        std::thread::yield_now();
    }
    panic!("PE {}: the flag nobody sets was set", me());
}

fn barrier() {
    let flag = symmetric_long();
    ready();
    if me() == 0 {
        wait_forever(flag);
    }
    // SAFETY: the library is initialized.
    unsafe { shmem_barrier_all() };
    panic!("PE {}: the barrier PE 0 never enters completed", me());
}

fn collective() {
    let flag = symmetric_long();
    let src = symmetric_long();
    let dest = symmetric_long();
    ready();
    if me() == 0 {
        wait_forever(flag);
    }
    // SAFETY: the buffers are symmetric; the team handle is the library's own.
    unsafe { shmem_long_sum_reduce(addr_of!(gsas_shmem_team_world).cast(), dest, src, 1) };
    panic!("PE {}: the reduction PE 0 never enters completed", me());
}

fn lock() {
    let lock = symmetric_long();
    if me() == 0 {
        // SAFETY: `lock` is a symmetric long used only as a lock.
        unsafe { shmem_set_lock(lock) };
    }
    // SAFETY: the library is initialized.
    unsafe { shmem_barrier_all() };
    ready();
    if me() == 0 {
        // Holds the lock, outside the library, until the job is ended.
        std::thread::sleep(Duration::from_secs(300));
        panic!("PE 0 was not ended");
    }
    // SAFETY: as above.
    unsafe { shmem_set_lock(lock) };
    panic!("PE {}: got the lock PE 0 holds", me());
}

fn exit_early() {
    let victim: c_int = std::env::var(VICTIM)
        .expect("GSAS_TEST_VICTIM")
        .parse()
        .unwrap();
    // SAFETY: the library is initialized.
    unsafe { shmem_barrier_all() };
    ready();
    if me() == victim {
        match std::env::var(EXIT_HOW).as_deref() {
            // SAFETY: ends the process at once, without the exit handlers.
            Ok("_exit") => unsafe { libc::_exit(0) },
            // SAFETY: exit runs the exit handlers (the library's implicit finalize).
            _ => unsafe { libc::exit(0) },
        }
    }
    // SAFETY: the library is initialized.
    unsafe { shmem_barrier_all() };
    panic!("PE {}: the barrier PE {victim} left completed", me());
}

fn all_exit() {
    // SAFETY: the library is initialized.
    unsafe { shmem_barrier_all() };
    ready();
    // SAFETY: exit runs the exit handlers: the library finalizes on every PE.
    unsafe { libc::exit(0) }
}

fn where_they_wait() {
    let flag = symmetric_long();
    // SAFETY: the library is initialized.
    unsafe { shmem_barrier_all() };
    match me() {
        0 => {
            // SAFETY: `flag` is this PE's own symmetric long; nobody writes it yet.
            unsafe { flag.write_volatile(4) };
            ready();
            // SAFETY: as above.
            unsafe { shmem_long_wait_until(flag, CMP_GE, 5) };
        }
        3 => {
            ready();
            let go = dir().join("go");
            let until = Instant::now() + Duration::from_secs(300);
            while !go.exists() {
                assert!(Instant::now() < until, "PE 3: never released");
                std::thread::sleep(Duration::from_millis(10));
            }
            // SAFETY: `flag` is symmetric.
            unsafe { shmem_long_p(flag, 5, 0) };
        }
        _ => ready(),
    }
    // SAFETY: the library is initialized.
    unsafe { shmem_barrier_all() };
}

fn same_words() {
    use std::io::Write;
    // SAFETY: the library is initialized.
    unsafe { shmem_barrier_all() };
    let me = me();
    for line in [
        format!("gsas-test: PE {me}: the same words on every PE\n"),
        format!("gsas-test: PE {me}: words of PE {me} alone\n"),
        format!(
            "pe{me}[{}] warn: the same warning on every PE\n",
            std::process::id()
        ),
    ] {
        std::io::stderr().write_all(line.as_bytes()).unwrap();
    }
    // SAFETY: the library is initialized.
    unsafe { shmem_barrier_all() };
}

fn bad_pe() {
    let x = symmetric_long();
    // SAFETY: the library is initialized; the put's PE is out of range, which the library
    // reports and ends the job for.
    unsafe {
        shmem_barrier_all();
        shmem_long_p(x, 1, shmem_n_pes());
    }
    panic!("PE {}: a put to a PE that does not exist returned", me());
}
