//! The library's global state: set once by initialization, read without locks.
//!
//! **What it is.** [`init`] bootstraps the PE through the gsas node client
//! ([`gsas_node::node::Node::init`], which with `remap_data` first moves the executable's globals
//! onto shared memory), then builds everything the routines read: this PE's segments for
//! address translation, the per-PE tables of direct base addresses (the mappings of
//! same-node PEs' heap, data and sync segments; 0 where a PE is reached through its
//! service), the world and shared teams, and the parsed environment. The result is leaked
//! into a `OnceLock` ([`get`], [`live`]).
//!
//! The hot paths (`shmem_long_p` and friends) do not even follow that pointer: [`HOT`], a
//! static of its own, holds the four words they need (heap base, heap limit, number of
//! PEs, the heap table), each loaded with one RIP-relative instruction, so a same-node put
//! is: load base, subtract, compare with the limit, compare
//! the PE, load the table entry, test it, store. Before initialization and after
//! finalization `HOT` describes an empty job, so every fast path falls through to the slow
//! path, which reports the misuse.
//!
//! Initialization is reference-counted as in OpenSHMEM 1.6 (a second `shmem_init` is a
//! no-op, every `shmem_finalize` but the last is a barrier); initializing again after the
//! last finalize is refused (the process manager connection is gone).
//!
//! **Finalize at exit.** The first initialization registers an exit handler (glibc's
//! `on_exit`, which also tells the exit status). A program that exits with status 0 while
//! the library runs (a `start_pes` program, which never calls finalize, or one that just
//! forgets) is finalized there as if it had called `shmem_finalize` last: quiet, barrier,
//! leaving the service and the process manager, so the launcher and the service see a
//! clean end and print no warning. The handler does nothing when the library is already
//! finalized, when the job is being ended (a fatal error, `shmem_global_exit`: the
//! process manager has been told), and when the exit status is not 0: a PE that fails
//! must not wait in a barrier for PEs that may be waiting for it; its launcher reports
//! the failure. Before it finalizes it tells gsas's launcher (a PMI note): if the other
//! PEs wait in another call (a `shmem_barrier_all` this PE never reaches), the final
//! barrier cannot complete, and `oshrun` names this PE and what the others are in
//! instead of letting the job hang. It serialises with `shmem_init`/`shmem_finalize` of other threads on the
//! same lock; it finalizes on the exiting thread, so a program that exits while other
//! threads are still inside the library gets what a `shmem_finalize` at that point would
//! give. A fatal error inside it ends the process with `_exit` (see `fatal`).
//!
//! **What it is not.** No communication: that is `rma`, `amo`, `p2p`, `lock`, `memory`.
//!
//! **Thread-safety.** [`init`] and [`finalize`] serialise on a mutex; everything else reads
//! immutable data or atomics.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use gsas_node::node::{DATA, HEAP, Node, NodeError, NodeOptions, SYNC};
use gsas_transport::poll::WaitConfig;

use crate::addr::{Range, Segments, SymAddr};
use crate::env::{Config, EnvError};
use crate::fatal::fatal;
use crate::team::Team;

/// Largest access size the inlined fast paths handle (a `long double`, a 128-bit block).
pub const SMALL: usize = 16;

/// The words of the state the fast paths read, outside the state pointer.
///
/// Ordering (the contract between [`Hot::publish`] and [`Hot::heap_direct`]): `publish`
/// stores the table, the heap base and the heap limit, then `npes` with `Release`;
/// `heap_direct` loads `npes` first, with `Acquire`, and the other words only after it.
/// So a caller that sees `npes != 0` also sees the table (never freed) and the heap of that
/// publication, whichever thread it runs on and whatever the program's own synchronisation
/// with `shmem_init` (which OpenSHMEM requires anyway). On x86_64 an `Acquire` load is the
/// same `mov` as a `Relaxed` one; on aarch64 it is one `ldar` for one `ldr`: the fast
/// paths keep their instruction counts. `retract` stores `npes = 0` first, so a late
/// caller falls to the slow path, which reports the library as not initialized.
#[derive(Debug)]
pub struct Hot {
    heap_base: AtomicUsize,
    heap_limit: AtomicUsize,
    npes: AtomicU32,
    heap_direct: AtomicPtr<usize>,
    /// The node's settled word ([`gsas_node::node::Node::settled_word`]), or null before init
    /// and after finalize: `shmem_quiet` and `shmem_fence` of the default context only
    /// fence memory while it is set.
    settled: AtomicPtr<AtomicBool>,
}

/// See [`Hot`]. Crate-private so that the hot paths address it directly (RIP-relative),
/// not through the GOT.
pub(crate) static HOT: Hot = Hot {
    heap_base: AtomicUsize::new(0),
    heap_limit: AtomicUsize::new(0),
    npes: AtomicU32::new(0),
    heap_direct: AtomicPtr::new(std::ptr::null_mut()),
    settled: AtomicPtr::new(std::ptr::null_mut()),
};

impl Hot {
    /// The local address of the `n` bytes (`n <= SMALL`, a constant after inlining) at
    /// `addr` in PE `pe`'s heap, if `addr` lies in this PE's heap and `pe` is a same-node PE
    /// reached directly. `None` sends the caller to its slow path, which decides properly
    /// (the last `SMALL - n` bytes of the heap, data-segment addresses, other nodes and all
    /// errors go there).
    #[inline(always)]
    pub fn heap_direct(&self, addr: usize, n: usize, pe: c_int) -> Option<*mut u8> {
        if n > SMALL {
            return None;
        }
        // Acquire, and first: see the ordering contract on `Hot`.
        let npes = self.npes.load(Ordering::Acquire);
        let off = addr.wrapping_sub(self.heap_base.load(Ordering::Relaxed));
        if off > self.heap_limit.load(Ordering::Relaxed) {
            return None;
        }
        let pe = pe as u32;
        if pe >= npes {
            return None;
        }
        // SAFETY: `npes` is non-zero only once the table of `npes` entries was published
        // (stored before the Release store of `npes`, which the Acquire load above
        // synchronizes with; never freed), and `pe < npes`.
        let base = unsafe { *self.heap_direct.load(Ordering::Relaxed).add(pe as usize) };
        if base == 0 {
            return None;
        }
        Some((base + off) as *mut u8)
    }

    /// Whether every operation this PE started before the call has completed and been
    /// reported (the node is settled): then a quiet or fence is a memory fence. False
    /// before init and after finalize, so that those calls take the slow path and its
    /// error. Two loads and a test.
    #[inline(always)]
    pub fn settled(&self) -> bool {
        let p = self.settled.load(Ordering::Acquire);
        // SAFETY: non-null only between `publish` and `retract`, pointing into the node of
        // the state, which lives in a static and is never dropped.
        !p.is_null() && unsafe { (*p).load(Ordering::Relaxed) }
    }

    /// Makes the fast paths live: `table` (`npes` entries, never freed) and `heap`, then
    /// `npes` with `Release` (see the ordering contract on [`Hot`]); `settled` is the
    /// node's settled word.
    fn publish(&self, heap: Range, npes: u32, table: *mut usize, settled: &'static AtomicBool) {
        self.settled
            .store(std::ptr::from_ref(settled).cast_mut(), Ordering::Release);
        self.heap_direct.store(table, Ordering::Relaxed);
        self.heap_base.store(heap.base, Ordering::Relaxed);
        self.heap_limit
            .store(heap.len.saturating_sub(SMALL), Ordering::Relaxed);
        self.npes.store(npes, Ordering::Release);
    }

    /// Sends every later fast-path call to the slow path.
    fn retract(&self) {
        self.settled.store(std::ptr::null_mut(), Ordering::Release);
        self.npes.store(0, Ordering::Release);
        self.heap_limit.store(0, Ordering::Relaxed);
    }
}

/// The global state; see the [module docs](self).
pub struct State {
    /// The node client.
    pub node: Node,
    /// This PE.
    pub me: u32,
    /// Number of PEs.
    pub npes: u32,
    /// This PE's symmetric segments.
    pub segs: Segments,
    /// `direct[seg][pe]`: base address of segment `seg` (heap, data, sync) of `pe` mapped
    /// here, 0 when `pe` is reached through its service.
    direct: [Box<[usize]>; 3],
    /// `SHMEM_TEAM_WORLD`.
    pub world: Team,
    /// `SHMEM_TEAM_SHARED`.
    pub shared: Team,
    /// The environment.
    pub config: Config,
    /// The thread level granted.
    pub thread_level: c_int,
    /// Spin/yield/block settings of waits (`GSAS_SPIN_US`).
    pub wait: WaitConfig,
    init_count: AtomicU32,
    finalized: AtomicBool,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("me", &self.me)
            .field("npes", &self.npes)
            .field("segs", &self.segs)
            .finish_non_exhaustive()
    }
}

static STATE: OnceLock<State> = OnceLock::new();
static INIT_LOCK: Mutex<()> = Mutex::new(());

/// The state, if initialized (also after finalize).
#[inline]
pub fn get() -> Option<&'static State> {
    STATE.get()
}

/// The state of a running library; a fatal error naming `call` before init or after the
/// last finalize.
#[inline]
pub fn live(call: &str) -> &'static State {
    match STATE.get() {
        Some(s) if !s.is_finalized() => s,
        Some(_) => fatal(call, "called after shmem_finalize"),
        None => fatal(call, "called before shmem_init"),
    }
}

/// Whether the library is initialized and not finalized.
pub fn is_running() -> bool {
    STATE.get().is_some_and(|s| !s.is_finalized())
}

/// What the program asks of [`init`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitOptions {
    /// Remap the executable's globals onto shared memory (C programs; must run before any
    /// other thread exists).
    pub remap_data: bool,
    /// Requested thread level (`SHMEM_THREAD_*`, 0..=3).
    pub thread_level: c_int,
}

/// Why [`init`] failed.
#[derive(Debug)]
pub enum InitError {
    /// An environment variable is invalid.
    Env(EnvError),
    /// The node client could not start.
    Node(NodeError),
    /// The requested thread level is not one of `SHMEM_THREAD_*`.
    ThreadLevel(c_int),
    /// Initialization after the last finalize.
    AfterFinalize,
    /// The node client started, but this PE has no usable symmetric heap.
    NoHeap,
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitError::Env(e) => e.fmt(f),
            InitError::Node(e) => write!(f, "starting the gsas node client: {e}"),
            InitError::ThreadLevel(l) => write!(
                f,
                "thread level {l} is not one of SHMEM_THREAD_SINGLE (0) .. SHMEM_THREAD_MULTIPLE (3)"
            ),
            InitError::AfterFinalize => f.write_str(
                "the library cannot be initialized again after shmem_finalize in the same process",
            ),
            InitError::NoHeap => f.write_str("the node client has no symmetric heap mapped"),
        }
    }
}

impl std::error::Error for InitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InitError::Env(e) => Some(e),
            InitError::Node(e) => Some(e),
            _ => None,
        }
    }
}

/// `SHMEM_THREAD_MULTIPLE`.
pub const THREAD_MULTIPLE: c_int = 3;

/// Initializes the library (or counts a repeated initialization); see the
/// [module docs](self).
pub fn init(options: InitOptions) -> Result<&'static State, InitError> {
    let _guard = INIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    if !(0..=THREAD_MULTIPLE).contains(&options.thread_level) {
        return Err(InitError::ThreadLevel(options.thread_level));
    }
    if let Some(st) = STATE.get() {
        if st.is_finalized() {
            return Err(InitError::AfterFinalize);
        }
        st.init_count.fetch_add(1, Ordering::AcqRel);
        return Ok(st);
    }
    let config = Config::from_env().map_err(InitError::Env)?;
    let page = 4096u64;
    let heap_size = config
        .symmetric_size
        .map(|s| s.max(1).div_ceil(page).saturating_mul(page));
    let node = Node::init(NodeOptions {
        heap_size,
        remap_data: options.remap_data,
        ..NodeOptions::default()
    })
    .map_err(InitError::Node)?;
    let st = build(node, config, options)?;
    let st = STATE.get_or_init(|| st);
    crate::coll::direct::setup(st);
    register_exit_handler(st);
    HOT.publish(
        st.segs.heap,
        st.npes,
        st.direct[usize::from(HEAP)].as_ptr().cast_mut(),
        st.node.settled_word(),
    );
    if st.me == 0 && (st.config.version || st.config.info || st.config.debug) {
        if st.config.info {
            println!("{}", crate::env::render_info());
        } else {
            println!("{}", crate::version_line());
        }
    }
    if st.config.debug {
        gsas_transport::eprintln_whole!(
            "gsas-shmem: PE {} of {}: node {}, {} same-node PEs, {}, {} context(s) available",
            st.me,
            st.npes,
            st.node.node_id(),
            st.shared.n_pes(),
            st.segs.describe(),
            gsas_node::node::MAX_CONTEXTS - 1
        );
    }
    Ok(st)
}

fn build(node: Node, config: Config, options: InitOptions) -> Result<State, InitError> {
    let me = node.rank();
    let npes = node.size();
    let heap_base = node.local_base(me, HEAP).ok_or(InitError::NoHeap)?.as_ptr() as usize;
    let heap_len = node.segment_size(HEAP) as usize;
    if heap_len < SMALL {
        return Err(InitError::NoHeap);
    }
    let data = match node.data_segment() {
        Some(d) => Range {
            base: d.base(),
            len: d.len(),
        },
        None => Range::default(),
    };
    // With GSAS_DIRECT=0 every operation, even to this PE, goes through the service: the
    // tables stay empty.
    let table = |seg: u8| -> Box<[usize]> {
        (0..npes)
            .map(|pe| match node.local_base(pe, seg) {
                Some(p) if node.direct() => p.as_ptr() as usize,
                _ => 0,
            })
            .collect()
    };
    let direct = [table(HEAP), table(DATA), table(SYNC)];
    // SHMEM_TEAM_SHARED: exactly the PEs for which shmem_ptr gives a pointer.
    let shared: Vec<u32> = (0..npes)
        .filter(|&pe| pe == me || (node.direct() && node.local_base(pe, HEAP).is_some()))
        .collect();
    // Whether `shmem_wait_until` and its kin block at once on a crowded machine (see
    // `crate::wait`): only where what they wait for may need this CPU. A job whose PEs all
    // share this node's memory directly, no more of them than CPUs, is updated by plain
    // stores of PEs that run (no atomic service in between, no doorbell): its waits spin,
    // then yield, then sleep; blocking at once there turned a 0.4-1 us flag ping-pong into
    // 80-140 us whenever anything else was runnable for a moment, and beside one CPU-bound
    // process it is 34-41 us instead of 182-189. (The `shmem_test` naps and the
    // collectives' waits keep the rule: see `crate::wait::tested` and `coll::wait`.)
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let crowd_blocks = shared.len() < npes as usize || npes as usize > cpus;
    let spin_us = gsas_transport::config::RuntimeConfig::from_env()
        .map(|c| c.spin_us)
        .unwrap_or(gsas_transport::config::DEFAULT_SPIN_US);
    Ok(State {
        me,
        npes,
        segs: Segments {
            heap: Range {
                base: heap_base,
                len: heap_len,
            },
            data,
        },
        direct,
        world: Team::new((0..npes).collect(), me, 0),
        shared: Team::new(shared, me, 0),
        config,
        thread_level: options.thread_level,
        wait: WaitConfig {
            block_when_crowded: crowd_blocks,
            ..WaitConfig::new().with_spin_us(spin_us)
        },
        init_count: AtomicU32::new(1),
        finalized: AtomicBool::new(false),
        node,
    })
}

/// `shmem_finalize` (OpenSHMEM 1.5 §9.1.4): all but the last call are barriers; the last
/// completes every context, waits for all PEs and leaves the job.
pub fn finalize(call: &str) {
    let _guard = INIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let st = live(call);
    let _named = gsas_node::watch::scope(call);
    if st.init_count.fetch_sub(1, Ordering::AcqRel) > 1 {
        if let Err(e) = st.node.barrier_all() {
            fatal(call, e);
        }
        return;
    }
    finish(st, call);
}

/// The last finalize: completes everything, waits for all PEs, leaves the job.
fn finish(st: &State, call: &str) {
    crate::coll::direct::flush(st);
    if let Err(e) = st.node.finalize() {
        fatal(call, e);
    }
    HOT.retract();
    st.finalized.store(true, Ordering::Release);
}

/// The name the implicit finalize reports errors under.
const AT_EXIT: &str = "shmem_finalize (implicit, at exit)";

unsafe extern "C" {
    /// glibc's `on_exit(3)`: like `atexit`, and the handler gets the exit status.
    fn on_exit(
        function: extern "C" fn(status: c_int, arg: *mut std::ffi::c_void),
        arg: *mut std::ffi::c_void,
    ) -> c_int;
}

fn register_exit_handler(st: &State) {
    // SAFETY: registers a function with the C library's exit handlers; the handler takes
    // no pointer it would dereference (the argument is NULL and ignored).
    if unsafe { on_exit(finalize_at_exit, std::ptr::null_mut()) } != 0 && st.config.debug {
        gsas_transport::eprintln_whole!(
            "gsas-shmem: PE {}: registering the exit handler failed: the program must call shmem_finalize",
            st.me
        );
    }
}

/// The exit handler; see "Finalize at exit" in the [module docs](self).
extern "C" fn finalize_at_exit(status: c_int, _arg: *mut std::ffi::c_void) {
    if status != 0 || crate::fatal::ending() {
        return;
    }
    crate::fatal::entering_exit_handler();
    crate::fatal::boundary(AT_EXIT, || {
        let _guard = INIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(st) = STATE.get() else {
            return;
        };
        if st.is_finalized() {
            return;
        }
        if st.config.debug {
            gsas_transport::eprintln_whole!(
                "gsas-shmem: PE {}: exiting without shmem_finalize: finalizing now",
                st.me
            );
        }
        st.init_count.store(0, Ordering::Release);
        // Under gsas's launcher: if the other PEs wait in another call, this one's final
        // barrier waits in vain; the launcher names both (docs/runtime.md).
        st.node.note_exit_without_finalize();
        let _named = gsas_node::watch::scope(AT_EXIT);
        finish(st, AT_EXIT);
    });
}

impl State {
    /// Whether the last finalize has run.
    pub fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::Acquire)
    }

    /// `pe` as a world PE; out of range is a fatal error naming `call`.
    #[inline]
    pub fn check_pe(&self, pe: c_int, call: &str) -> u32 {
        match u32::try_from(pe) {
            Ok(p) if p < self.npes => p,
            _ => fatal(
                call,
                format_args!(
                    "PE {pe} does not exist (the job has {} PEs: 0..{})",
                    self.npes,
                    self.npes.saturating_sub(1)
                ),
            ),
        }
    }

    /// The symmetric location of the `len` bytes at `addr`; anything else is a fatal error
    /// naming `call`.
    #[inline]
    pub fn translate(&self, addr: *const u8, len: usize, call: &str) -> SymAddr {
        match self.segs.translate(addr as usize, len) {
            Some(s) => s,
            None => self.not_symmetric(addr, len, call),
        }
    }

    #[cold]
    #[inline(never)]
    fn not_symmetric(&self, addr: *const u8, len: usize, call: &str) -> ! {
        fatal(
            call,
            format_args!(
                "{addr:p} ({len} bytes) is not a symmetric address ({})",
                self.segs.describe()
            ),
        )
    }

    /// The local address of `sym` on PE `pe` if that PE's segment is mapped here.
    #[inline]
    pub fn direct_ptr(&self, pe: u32, sym: SymAddr) -> Option<*mut u8> {
        let base = *self.direct.get(usize::from(sym.seg))?.get(pe as usize)?;
        (base != 0).then(|| (base + sym.off as usize) as *mut u8)
    }

    /// The local address of offset 0 of segment `seg` of `pe` for `shmem_ptr`, if mapped
    /// in this process (also with `GSAS_DIRECT=0`, where the fast tables are empty).
    pub fn mapped_base(&self, pe: u32, seg: u8) -> Option<usize> {
        self.node.local_base(pe, seg).map(|p| p.as_ptr() as usize)
    }

    /// What `shmem_ptr` and `shmem_team_ptr` return: the address through which loads and
    /// stores reach the symmetric object at `addr` (an address of this PE) on world PE
    /// `pe`: `addr` itself for this PE, the object in `pe`'s mapped segment for a same-node
    /// PE, `None` for a PE of another node, a PE out of range, or an address that is not
    /// symmetric.
    pub fn local_ptr(&self, addr: usize, pe: u32) -> Option<std::ptr::NonNull<u8>> {
        if pe >= self.npes {
            return None;
        }
        let sym = self.segs.translate(addr, 1)?;
        let local = if pe == self.me {
            addr
        } else {
            self.mapped_base(pe, sym.seg)? + sym.off as usize
        };
        std::ptr::NonNull::new(local as *mut u8)
    }

    /// How long user-level waits may block (`SHMEM_WAIT_TIMEOUT`).
    pub fn wait_timeout(&self) -> Duration {
        self.config.wait_timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hot() -> Hot {
        Hot {
            heap_base: AtomicUsize::new(0),
            heap_limit: AtomicUsize::new(0),
            npes: AtomicU32::new(0),
            heap_direct: AtomicPtr::new(std::ptr::null_mut()),
            settled: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    #[test]
    fn heap_direct_is_live_only_between_publish_and_retract() {
        let h = hot();
        let heap = Range {
            base: 0x10_0000,
            len: 0x1000,
        };
        assert_eq!(h.heap_direct(heap.base, 8, 0), None, "before publish");
        let settled: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(true)));
        assert!(
            !h.settled(),
            "before publish: quiet takes the slow path and its error"
        );
        // PE 0 mapped at 0x50_0000, PE 1 reached through the service (0).
        let table: &'static mut [usize] = Box::leak(vec![0x50_0000, 0].into_boxed_slice());
        h.publish(heap, 2, table.as_mut_ptr(), settled);
        assert!(h.settled(), "the node's word, read through");
        settled.store(false, Ordering::Relaxed);
        assert!(!h.settled(), "an operation in flight");
        settled.store(true, Ordering::Relaxed);
        assert_eq!(
            h.heap_direct(heap.base + 0x10, 8, 0),
            Some(0x50_0010 as *mut u8)
        );
        assert_eq!(h.heap_direct(heap.base + 0x10, 8, 1), None, "not mapped");
        assert_eq!(h.heap_direct(heap.base + 0x10, 8, 2), None, "pe >= npes");
        assert_eq!(h.heap_direct(heap.base + 0x10, 8, -1), None, "negative pe");
        assert_eq!(h.heap_direct(heap.base - 8, 8, 0), None, "below the heap");
        let last = heap.base + heap.len - SMALL;
        assert_eq!(
            h.heap_direct(last, 16, 0),
            Some((0x50_0000 + 0x1000 - 16) as *mut u8)
        );
        assert_eq!(h.heap_direct(last + 1, 8, 0), None, "the tail goes slow");
        assert_eq!(h.heap_direct(heap.base, SMALL + 1, 0), None, "too large");
        h.retract();
        assert_eq!(h.heap_direct(heap.base + 0x10, 8, 0), None, "after retract");
        assert!(
            !h.settled(),
            "after retract: quiet reports the finalized library"
        );
    }
}
