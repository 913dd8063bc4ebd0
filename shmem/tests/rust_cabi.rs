//! The C ABI called from Rust as a C program would, with the data segment remapped: this
//! binary has no libtest harness because `shmem_init` remaps the executable's globals onto
//! shared memory, which must happen before any other thread exists.
//!
//! The parent (no `SHMEM_TEST_SCENARIO`) runs every case as a job of real processes on one
//! node and on two nodes and checks the outcome; each child is one PE:
//!
//! * `globals`: statics (`.data`, `.bss`, function-scope) as RMA and AMO targets,
//!   `shmem_ptr` on globals and heap (non-NULL for this PE and same-node PEs, NULL across
//!   nodes), queries, version and name, legacy names, profiling twins, the allocator rules
//!   (size 0, `free(NULL)`, alignment, realloc keeps contents, symmetric offsets, exhaustion
//!   gives NULL), contexts and invalid handles, signals, waits and locks through C calls;
//! * `global_exit`: PE 1 calls `shmem_global_exit(7)`: the job ends with status 7;
//! * `bad_size` / `bad_size_thread`: an invalid `SHMEM_SYMMETRIC_SIZE` makes `shmem_init`
//!   end the process with a message (status 255) and `shmem_init_thread` return nonzero;
//! * `not_symmetric`: `shmem_long_p` on a stack address ends the job (status 255) with a
//!   message naming the routine.

mod rust_common;

use std::ffi::{c_char, c_int, c_long, c_void};
use std::ptr::{addr_of, addr_of_mut, null, null_mut};

use rust_common::{ONE_NODE, TWO_NODES, Topology, report_ok};

type Ctx = *const c_void;

unsafe extern "C" {
    static gsas_shmem_ctx_default: u8;
    static gsas_shmem_team_world: u8;
    static gsas_shmem_team_shared: u8;
    fn shmem_init();
    fn shmem_finalize();
    fn shmem_my_pe() -> c_int;
    fn shmem_n_pes() -> c_int;
    fn pshmem_my_pe() -> c_int;
    fn _my_pe() -> c_int;
    fn _num_pes() -> c_int;
    fn start_pes(npes: c_int);
    fn shmem_global_exit(status: c_int) -> !;
    fn shmem_pe_accessible(pe: c_int) -> c_int;
    fn shmem_addr_accessible(addr: *const c_void, pe: c_int) -> c_int;
    fn shmem_ptr(dest: *const c_void, pe: c_int) -> *mut c_void;
    fn shmem_info_get_version(major: *mut c_int, minor: *mut c_int);
    fn shmem_info_get_name(name: *mut c_char);
    fn shmem_init_thread(requested: c_int, provided: *mut c_int) -> c_int;
    fn shmem_query_thread(provided: *mut c_int);
    fn shmem_malloc(size: usize) -> *mut c_void;
    fn shmem_calloc(count: usize, size: usize) -> *mut c_void;
    fn shmem_align(alignment: usize, size: usize) -> *mut c_void;
    fn shmem_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    fn shmem_malloc_with_hints(size: usize, hints: c_long) -> *mut c_void;
    fn shmem_free(ptr: *mut c_void);
    fn shmalloc(size: usize) -> *mut c_void;
    fn pshfree(ptr: *mut c_void);
    fn shmem_long_p(dest: *mut c_long, value: c_long, pe: c_int);
    fn shmem_long_g(src: *const c_long, pe: c_int) -> c_long;
    fn pshmem_long_g(src: *const c_long, pe: c_int) -> c_long;
    fn shmem_int_put(dest: *mut c_int, src: *const c_int, n: usize, pe: c_int);
    fn shmem_int_get(dest: *mut c_int, src: *const c_int, n: usize, pe: c_int);
    fn shmem_putmem(dest: *mut c_void, src: *const c_void, n: usize, pe: c_int);
    fn shmem_getmem_nbi(dest: *mut c_void, src: *const c_void, n: usize, pe: c_int);
    fn shmem_iget64(
        dest: *mut c_void,
        src: *const c_void,
        dst: isize,
        sst: isize,
        n: usize,
        pe: c_int,
    );
    fn shmem_int_iget(
        dest: *mut c_int,
        src: *const c_int,
        dst: isize,
        sst: isize,
        n: usize,
        pe: c_int,
    );
    fn shmem_int_atomic_fetch_add(dest: *mut c_int, value: c_int, pe: c_int) -> c_int;
    fn shmem_long_atomic_compare_swap(
        dest: *mut c_long,
        cond: c_long,
        value: c_long,
        pe: c_int,
    ) -> c_long;
    fn shmem_long_finc(dest: *mut c_long, pe: c_int) -> c_long;
    fn shmem_double_atomic_swap(dest: *mut f64, value: f64, pe: c_int) -> f64;
    fn shmem_ctx_create(options: c_long, ctx: *mut Ctx) -> c_int;
    fn shmem_ctx_destroy(ctx: Ctx);
    fn shmem_ctx_long_p(ctx: Ctx, dest: *mut c_long, value: c_long, pe: c_int);
    fn shmem_ctx_quiet(ctx: Ctx);
    fn shmem_ctx_fence(ctx: Ctx);
    fn shmem_ctx_get_team(ctx: Ctx, team: *mut *const c_void) -> c_int;
    fn shmem_quiet();
    fn shmem_fence();
    fn shmem_team_my_pe(team: *const c_void) -> c_int;
    fn shmem_team_n_pes(team: *const c_void) -> c_int;
    fn shmem_team_translate_pe(src: *const c_void, pe: c_int, dest: *const c_void) -> c_int;
    fn shmem_putmem_signal(
        dest: *mut c_void,
        src: *const c_void,
        n: usize,
        sig: *mut u64,
        signal: u64,
        op: c_int,
        pe: c_int,
    );
    fn shmem_signal_wait_until(sig: *mut u64, cmp: c_int, value: u64) -> u64;
    fn shmem_signal_fetch(sig: *const u64) -> u64;
    fn shmem_long_wait_until(ivar: *mut c_long, cmp: c_int, value: c_long);
    fn shmem_wait(ivar: *mut c_long, value: c_long);
    fn shmem_int_test(ivar: *mut c_int, cmp: c_int, value: c_int) -> c_int;
    fn shmem_short_wait_until(ivar: *mut i16, cmp: c_int, value: i16);
    fn shmem_size_wait_until_any(
        ivars: *mut usize,
        n: usize,
        status: *const c_int,
        cmp: c_int,
        value: usize,
    ) -> usize;
    fn shmem_int_test_all(
        ivars: *mut c_int,
        n: usize,
        status: *const c_int,
        cmp: c_int,
        value: c_int,
    ) -> c_int;
    fn shmem_set_lock(lock: *mut c_long);
    fn shmem_clear_lock(lock: *mut c_long);
    fn shmem_test_lock(lock: *mut c_long) -> c_int;
}

const CMP_EQ: c_int = 1;
const CMP_NE: c_int = 2;
const CMP_GE: c_int = 4;

// Globals in .data (initialized) and .bss (zero): symmetric in C programs.
static mut DATA_ARRAY: [c_long; 8] = [11, 22, 33, 44, 55, 66, 77, 88];
static mut BSS_ARRAY: [c_int; 1024] = [0; 1024];
static mut FLAG: c_long = 0;
static mut SIG: u64 = 0;
static mut LOCK: c_long = 0;
static mut COUNTER: c_long = 0;
static mut SHORT_FLAG: i16 = 0;

fn main() {
    match rust_common::child_scenario() {
        Some(s) => child(&s),
        None => parent(),
    }
}

fn child(scenario: &str) {
    match scenario {
        "globals" => globals(),
        "global_exit" => {
            // SAFETY: plain C ABI calls.
            unsafe {
                shmem_init();
                let shmem = shmem::init().unwrap();
                shmem.barrier_all();
                if shmem_my_pe() == 1 {
                    shmem_global_exit(7);
                }
                // The others wait to be ended (bounded).
                std::thread::sleep(std::time::Duration::from_secs(300));
                panic!("PE {} survived shmem_global_exit", shmem_my_pe());
            }
        }
        "bad_size" => {
            // SAFETY: as above; shmem_init ends the process on the invalid variable.
            unsafe { shmem_init() };
            panic!("shmem_init accepted an invalid SHMEM_SYMMETRIC_SIZE");
        }
        "bad_size_thread" => {
            let mut provided = -1;
            // SAFETY: as above.
            let rc = unsafe { shmem_init_thread(3, &mut provided) };
            assert_ne!(
                rc, 0,
                "shmem_init_thread accepted an invalid SHMEM_SYMMETRIC_SIZE"
            );
            let rank: usize = std::env::var("PMI_RANK").unwrap().parse().unwrap();
            report_ok(rank, "init_thread refused")
        }
        "not_symmetric" => {
            let mut local: c_long = 0;
            // SAFETY: the call is expected to end the job.
            unsafe {
                shmem_init();
                shmem_long_p(&mut local, 1, 0);
            }
            panic!("a stack address was accepted");
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// shmem_ptr and shmem_addr_accessible on globals (`data`, `stat`), the heap (`heap`) and
/// the stack: this PE and same-node PEs.
fn pointers(
    me: c_int,
    n: c_int,
    right: c_int,
    data: *mut c_long,
    heap: *mut c_long,
    stat: *mut u64,
) {
    // SAFETY: C ABI calls on this program's globals and heap; a pointer is read only where
    // shmem_ptr gave one, in a mapping of the same-node PE that is as long as the object.
    unsafe {
        assert_eq!(shmem_ptr(data.cast(), me), data.cast());
        assert_eq!(shmem_ptr(heap.cast(), me), heap.cast());
        let shared = shmem_team_n_pes((&raw const gsas_shmem_team_shared).cast());
        let mut reached = 0;
        for pe in 0..n {
            let g = shmem_ptr(stat.add(1).cast(), pe).cast::<u64>();
            let h = shmem_ptr(heap.cast(), pe).cast::<c_long>();
            assert_eq!(
                g.is_null(),
                h.is_null(),
                "globals and heap alike for PE {pe}"
            );
            if !h.is_null() {
                reached += 1;
                assert_eq!(std::ptr::read_volatile(h), pe as c_long);
                let want = 0xdead_0000 + ((pe + n - 1) % n) as u64;
                assert_eq!(std::ptr::read_volatile(g), want);
            }
        }
        assert_eq!(
            reached, shared,
            "SHMEM_TEAM_SHARED = the PEs shmem_ptr reaches"
        );
        let stack = 0u8;
        assert!(shmem_ptr((&raw const stack).cast(), me).is_null());
        assert_eq!(shmem_addr_accessible(data.cast(), right), 1);
        assert_eq!(shmem_addr_accessible(heap.cast(), right), 1);
        assert_eq!(shmem_addr_accessible((&raw const stack).cast(), right), 0);
        assert_eq!(shmem_addr_accessible(heap.cast(), n), 0);
    }
}

/// The allocator rules of the C ABI: zero sizes, alignments, calloc, hints, realloc,
/// symmetric offsets on every PE, exhaustion; frees `heap`.
fn allocator_rules(me: c_int, n: c_int, right: c_int, heap: *mut c_long) {
    // SAFETY: C ABI calls on heap memory of this program, as a C test would make them; every
    // pointer dereferenced comes from the symmetric allocator and is in bounds.
    unsafe {
        // The allocator rules.
        assert!(shmem_malloc(0).is_null());
        assert!(shmem_calloc(0, 8).is_null() && shmem_calloc(8, 0).is_null());
        shmem_free(null_mut());
        assert!(
            shmem_align(24, 64).is_null(),
            "alignment must be a power of two"
        );
        // Below the pointer size: rounded up to it (issue 13), a block like any other.
        let small = shmem_align(4, 64);
        assert!(
            !small.is_null() && small as usize % size_of::<*const c_void>() == 0,
            "shmem_align(4, 64): {small:p}"
        );
        shmem_free(small);
        let aligned = shmem_align(4096, 100);
        assert!(!aligned.is_null() && aligned as usize % 4096 == 0);
        for shift in [15, 20, 22] {
            let big = shmem_align(1 << shift, 64);
            assert!(
                !big.is_null() && big as usize % (1 << shift) == 0,
                "align 2^{shift}: {big:p}"
            );
            let peer = shmem_ptr(big, right);
            assert!(
                peer.is_null() || peer as usize % (1 << shift) == 0,
                "peer view {peer:p}"
            );
            shmem_free(big);
        }
        let z = shmem_calloc(100, 8).cast::<u64>();
        assert!((0..100).all(|i| *z.add(i) == 0));
        let hinted = shmem_malloc_with_hints(256, 1 | 2);
        assert!(!hinted.is_null());
        let grow = shmalloc(16).cast::<u8>();
        for i in 0..16 {
            *grow.add(i) = i as u8 + me as u8;
        }
        let grown = shmem_realloc(grow.cast(), 1 << 20).cast::<u8>();
        assert!(!grown.is_null());
        assert!(
            (0..16).all(|i| *grown.add(i) == i as u8 + me as u8),
            "realloc keeps contents"
        );
        // Symmetric: the same offset everywhere (the same address through shmem_ptr's view
        // of my own heap, and identical addresses of every block relative to the first).
        let offsets = [
            aligned as usize,
            z as usize,
            hinted as usize,
            grown as usize,
        ]
        .map(|a| a - heap as usize);
        let all = shmem::init().unwrap();
        let table = all.alloc_vec::<usize>(4 * n as usize).unwrap();
        for pe in 0..n as usize {
            all.put(
                table.slice(me as usize * 4..me as usize * 4 + 4),
                &offsets,
                pe,
            );
        }
        all.barrier_all();
        for pe in 0..n as usize {
            assert_eq!(
                table.to_vec()[pe * 4..pe * 4 + 4],
                offsets,
                "offsets of PE {pe}"
            );
        }
        drop(table);
        drop(all);
        assert!(shmem_malloc(1 << 40).is_null(), "exhaustion gives NULL");
        assert!(shmem_realloc(grown.cast(), 1 << 40).is_null());
        assert_eq!(
            *grown.add(3),
            3 + me as u8,
            "a failed realloc leaves the block"
        );
        for p in [aligned, z.cast(), hinted, grown.cast()] {
            shmem_free(p);
        }
        assert!(
            shmem_realloc(heap.cast(), 0).is_null(),
            "realloc to 0 frees"
        );
        let tiny = shmem_realloc(null_mut(), 8);
        assert!(!tiny.is_null(), "realloc(NULL) allocates");
        pshfree(tiny);
    }
}

/// Contexts (create, use, team, destroy; invalid and default handles), teams through C,
/// and fence ordering two puts to a global flag.
fn contexts_and_fences(shmem: &shmem::Shmem, me: c_int, right: c_int) {
    // SAFETY: C ABI calls on this program's globals and on handles the library gave.
    unsafe {
        // Contexts: create, use, team, destroy; invalid and default handles.
        let mut ctx: Ctx = null();
        assert_eq!(shmem_ctx_create(1 << 1, &mut ctx), 0);
        assert!(!ctx.is_null());
        let mut team: *const c_void = null();
        assert_eq!(shmem_ctx_get_team(ctx, &mut team), 0);
        assert_eq!(team, (&raw const gsas_shmem_team_world).cast());
        let flag = addr_of_mut!(FLAG);
        shmem_ctx_long_p(ctx, flag, 77, right);
        shmem_ctx_fence(ctx);
        shmem_ctx_quiet(ctx);
        shmem_ctx_destroy(ctx);
        shmem_ctx_quiet(null());
        shmem_ctx_fence(null());
        shmem_ctx_destroy(null());
        shmem_ctx_quiet((&raw const gsas_shmem_ctx_default).cast());
        let mut bad: Ctx = (&raw const gsas_shmem_ctx_default).cast();
        assert_ne!(
            shmem_ctx_create(1 << 10, &mut bad),
            0,
            "unknown options are refused"
        );
        assert!(bad.is_null(), "a failed creation gives SHMEM_CTX_INVALID");
        assert_eq!(shmem_ctx_get_team(null(), &mut team), 1);
        assert!(team.is_null());
        assert_eq!(shmem_team_my_pe(null()), -1);
        assert_eq!(shmem_team_n_pes(null()), -1);
        assert_eq!(
            shmem_team_my_pe((&raw const gsas_shmem_team_world).cast()),
            me
        );
        assert_eq!(
            shmem_team_translate_pe(
                (&raw const gsas_shmem_team_world).cast(),
                me,
                (&raw const gsas_shmem_team_shared).cast()
            ),
            shmem_team_my_pe((&raw const gsas_shmem_team_shared).cast())
        );
        shmem_long_wait_until(flag, CMP_EQ, 77);
        std::ptr::write_volatile(flag, 0);
        shmem.barrier_all();
        shmem_long_p(flag, 4, right);
        shmem_fence();
        shmem_long_p(flag, 5, right);
        shmem_long_wait_until(flag, CMP_GE, 4);
        shmem_wait(flag, 4);
        assert_eq!(
            std::ptr::read_volatile(flag),
            5,
            "fence orders the two puts"
        );
        shmem.barrier_all();
    }
}

/// Put with signal, signal waits and the typed waits and tests through C.
fn signals_and_waits(shmem: &shmem::Shmem, me: c_int, left: c_int, right: c_int) {
    // SAFETY: C ABI calls on this program's globals and on local arrays that outlive them.
    unsafe {
        // Signals and waits through C.
        let sig = addr_of_mut!(SIG);
        let payload = [me as u8; 100];
        shmem_putmem_signal(
            addr_of_mut!(BSS_ARRAY).cast(),
            payload.as_ptr().cast(),
            100,
            addr_of_mut!(SIG),
            1,
            1,
            right,
        );
        assert_eq!(shmem_signal_wait_until(sig, CMP_GE, 1), 1);
        assert_eq!(shmem_signal_fetch(sig), 1);
        assert_eq!(*addr_of!(BSS_ARRAY).cast::<u8>().add(99), left as u8);
        let sflag = addr_of_mut!(SHORT_FLAG);
        let i16_src: i16 = -3;
        shmem_putmem(sflag.cast(), (&raw const i16_src).cast(), 2, right);
        shmem_short_wait_until(sflag, CMP_EQ, -3);
        let mut ints = [1 as c_int, 2, 1];
        assert_eq!(shmem_int_test(ints.as_mut_ptr(), CMP_NE, 1), 0);
        assert_eq!(
            shmem_int_test_all(ints.as_mut_ptr(), 3, [0, 1, 0].as_ptr(), CMP_EQ, 1),
            1
        );
        assert_eq!(
            shmem_int_test_all(ints.as_mut_ptr(), 0, null(), CMP_EQ, 9),
            1,
            "an empty set"
        );
        let mut sizes = [0usize, 3, 0];
        assert_eq!(
            shmem_size_wait_until_any(sizes.as_mut_ptr(), 3, null(), CMP_EQ, 3),
            1
        );
        assert_eq!(
            shmem_size_wait_until_any(sizes.as_mut_ptr(), 0, null(), CMP_EQ, 3),
            usize::MAX
        );
        shmem.barrier_all();
    }
}

fn globals() {
    // SAFETY: this function is the whole PE: C ABI calls on globals and heap memory of this
    // program, as a C test would make them; the Rust handle only adds barriers.
    unsafe {
        start_pes(0);
        shmem_init(); // a second init is counted (OpenSHMEM 1.6 semantics), as start_pes again
        let shmem = shmem::init().unwrap();
        let (me, n) = (shmem_my_pe(), shmem_n_pes());
        assert_eq!((me, n), (_my_pe(), _num_pes()));
        assert_eq!(pshmem_my_pe(), me);
        let (right, left) = ((me + 1) % n, (me + n - 1) % n);
        let mut provided = -1;
        shmem_query_thread(&mut provided);
        assert_eq!(provided, 3);
        let (mut major, mut minor) = (0, 0);
        shmem_info_get_version(&mut major, &mut minor);
        assert_eq!((major, minor), (1, 6));
        let mut name = [1 as c_char; 256];
        shmem_info_get_name(name.as_mut_ptr());
        assert_eq!(
            std::ffi::CStr::from_ptr(name.as_ptr()).to_str().unwrap(),
            "gsas"
        );
        assert_eq!(shmem_pe_accessible(n - 1), 1);
        assert_eq!(shmem_pe_accessible(n), 0);
        assert_eq!(shmem_pe_accessible(-1), 0);

        // Globals as targets: .data, .bss and a function-scope static.
        static mut LOCAL_STATIC: [u64; 4] = [0; 4];
        let data = addr_of_mut!(DATA_ARRAY).cast::<c_long>();
        let bss = addr_of_mut!(BSS_ARRAY).cast::<c_int>();
        assert_eq!(
            shmem_long_g(data.add(2), right),
            33,
            ".data is symmetric with its initial values"
        );
        shmem_long_p(data.add(me as usize % 8), 1000 + me as c_long, right);
        let src: Vec<c_int> = (0..1024).map(|i| i * 3 + me).collect();
        shmem_int_put(bss, src.as_ptr(), 1024, right);
        let stat = addr_of_mut!(LOCAL_STATIC).cast::<u64>();
        let word = 0xdead_0000_u64 + me as u64;
        shmem_putmem(stat.add(1).cast(), (&raw const word).cast(), 8, right);
        shmem_quiet();
        shmem.barrier_all();
        assert_eq!(*data.add(left as usize % 8), 1000 + left as c_long);
        let bss_now: Vec<c_int> = (0..1024)
            .map(|i| std::ptr::read_volatile(bss.add(i)))
            .collect();
        assert_eq!(bss_now, (0..1024).map(|i| i * 3 + left).collect::<Vec<_>>());
        assert_eq!(
            std::ptr::read_volatile(stat.add(1)),
            0xdead_0000 + left as u64
        );
        let mut back = vec![0 as c_int; 1024];
        shmem_int_get(back.as_mut_ptr(), bss, 1024, right);
        assert_eq!(back, src);
        // Strided get from a global: every 4th int.
        let mut every4 = vec![0 as c_int; 16];
        shmem_int_iget(every4.as_mut_ptr(), bss, 1, 4, 16, right);
        assert_eq!(every4, (0..16).map(|i| i * 12 + me).collect::<Vec<_>>());
        let mut words = [0u64; 2];
        shmem_iget64(words.as_mut_ptr().cast(), stat.cast(), 1, 1, 2, right);
        assert_eq!(words[1], 0xdead_0000 + me as u64);
        // Zero-length with NULL pointers.
        shmem_putmem(null_mut(), null(), 0, 0);
        shmem_int_iget(null_mut(), null(), 1, 1, 0, 0);
        shmem.barrier_all();

        // shmem_ptr on globals and heap: this PE and same-node PEs.
        let heap = shmem_malloc(64).cast::<c_long>();
        assert!(!heap.is_null());
        *heap = me as c_long;
        shmem.barrier_all();
        pointers(me, n, right, data, heap, stat);

        allocator_rules(me, n, right, heap);

        // AMOs on globals and typed AMOs of several kinds.
        let counter = addr_of_mut!(COUNTER);
        for _ in 0..10 {
            shmem_long_finc(counter, 0);
        }
        let bss0 = bss.add(1000);
        shmem_int_atomic_fetch_add(bss0, 1, 0);
        shmem.barrier_all();
        if me == 0 {
            assert_eq!(std::ptr::read_volatile(counter), 10 * n as c_long);
        }
        let d = shmem_malloc(8).cast::<f64>();
        *d = 1.5;
        shmem.barrier_all();
        let old = shmem_double_atomic_swap(d, me as f64, right);
        assert!(old == 1.5, "{old}");
        shmem.barrier_all();
        assert_eq!(*d, left as f64);
        assert_eq!(
            shmem_long_atomic_compare_swap(counter, -1, 5, 0),
            10 * n as c_long
        );
        shmem.barrier_all();

        contexts_and_fences(&shmem, me, right);

        signals_and_waits(&shmem, me, left, right);

        // Locks on a global.
        let lock = addr_of_mut!(LOCK);
        for _ in 0..20 {
            shmem_set_lock(lock);
            let v = shmem_long_g(counter, 0);
            shmem_long_p(counter, v + 1, 0);
            shmem_clear_lock(lock);
        }
        shmem.barrier_all();
        if me == 0 {
            assert_eq!(
                std::ptr::read_volatile(counter),
                10 * n as c_long + 20 * n as c_long
            );
            assert_eq!(shmem_test_lock(lock), 0);
            shmem_clear_lock(lock);
        }
        shmem.barrier_all();
        let mut got = [0u8; 8];
        shmem_getmem_nbi(got.as_mut_ptr().cast(), data.add(7).cast(), 8, left);
        shmem_quiet();
        assert_eq!(c_long::from_ne_bytes(got), 88);
        assert_eq!(pshmem_long_g(data.add(7), right), 88);
        drop(shmem);
        shmem_finalize();
        shmem_finalize();
        report_ok(me as usize, "globals ok")
    }
}

fn parent() {
    let mut failures = Vec::new();
    let mut case = |name: &str, f: &dyn Fn() -> Result<(), String>| {
        let r = f();
        println!(
            "test rust_cabi::{name} ... {}",
            if r.is_ok() { "ok" } else { "FAILED" }
        );
        if let Err(e) = r {
            failures.push(format!("{name}: {e}"));
        }
    };
    let ok = |scenario: &'static str, topo: Topology| {
        move || -> Result<(), String> {
            let (report, dir) = rust_common::run(scenario, topo, &[]);
            if report.exit_code != 0 {
                return Err(format!("{report:?}"));
            }
            let r = rust_common::check(&report, &dir, topo);
            if r.iter().all(|s| s == "globals ok") {
                Ok(())
            } else {
                Err(format!("{r:?}"))
            }
        }
    };
    case("globals_one_node", &ok("globals", ONE_NODE));
    case("globals_two_nodes", &ok("globals", TWO_NODES));
    case("global_exit_status", &|| {
        let (report, dir) = rust_common::run("global_exit", ONE_NODE, &[]);
        let _ = std::fs::remove_dir_all(dir);
        (report.exit_code == 7)
            .then_some(())
            .ok_or_else(|| format!("exit code {}: {report:?}", report.exit_code))
    });
    case("invalid_symmetric_size_ends_init", &|| {
        let (report, dir) = rust_common::run(
            "bad_size",
            Topology { nodes: 1, ppn: 2 },
            &[("SHMEM_SYMMETRIC_SIZE", "12q")],
        );
        let _ = std::fs::remove_dir_all(dir);
        // A usage error: exit status 2, as oshrun's own check of the variable gives.
        (report.exit_code == 2)
            .then_some(())
            .ok_or_else(|| format!("{report:?}"))
    });
    case("invalid_symmetric_size_fails_init_thread", &|| {
        let topo = Topology { nodes: 1, ppn: 2 };
        let (report, dir) =
            rust_common::run("bad_size_thread", topo, &[("SMA_SYMMETRIC_SIZE", "-1")]);
        let r = rust_common::check(&report, &dir, topo);
        r.iter()
            .all(|s| s == "init_thread refused")
            .then_some(())
            .ok_or_else(|| format!("{r:?}"))
    });
    case("not_symmetric_is_fatal", &|| {
        let (report, dir) = rust_common::run("not_symmetric", Topology { nodes: 1, ppn: 2 }, &[]);
        let _ = std::fs::remove_dir_all(dir);
        let msg = match &report.failure {
            Some(gsas_launch::oshrun::job::Failure::Aborted { message, .. }) => {
                message.clone().unwrap_or_default()
            }
            other => return Err(format!("not an abort: {other:?}")),
        };
        if report.exit_code == shmem::FATAL_EXIT_CODE
            && msg.contains("shmem_long_p")
            && msg.contains("is not a symmetric address")
        {
            Ok(())
        } else {
            Err(format!("{report:?}"))
        }
    });
    println!();
    if failures.is_empty() {
        println!("test result: ok. 6 passed; 0 failed");
    } else {
        for f in &failures {
            eprintln!("{f}");
        }
        println!("test result: FAILED. {} failed", failures.len());
        std::process::exit(1);
    }
}
