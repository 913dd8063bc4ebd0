//! The library's global state: set by the first initialization, read without locks.
//!
//! **What it is.** [`State`]: everything the routines read, built once by the first
//! `lifecycle::init` (see there; a later initialization cycle marks the same state live
//! again, with an emptied heap): this PE's segments for address translation, the per-PE
//! tables of direct base addresses (the mappings of same-node PEs' heap, data and sync
//! segments; 0 where a PE is reached through its service) and the parsed environment. (The
//! world and shared teams are `team::predefined`'s.) It is leaked into a `OnceLock` ([`get`], [`live`]).
//!
//! The hot paths (`shmem_long_p` and friends) do not even follow that pointer: [`HOT`], a
//! static of its own, holds the four words they need (heap base, heap limit, number of
//! PEs, the heap table), each loaded with one RIP-relative instruction, so a same-node put
//! is: load base, subtract, compare with the limit, compare
//! the PE, load the table entry, test it, store. Before initialization and after
//! finalization `HOT` describes an empty job, so every fast path falls through to the slow
//! path, which reports the misuse.
//!
//! Initialization, finalization and the finalize at exit are `lifecycle`'s; this module
//! imports only the address, environment and fatal-error modules (the last to report a
//! misuse, and it reads the state back to end the job).
//!
//! **What it is not.** No communication: that is `rma`, `amo`, `p2p`, `lock`, `memory`;
//! not the start and the end of the library (`lifecycle`).
//!
//! **Thread-safety.** Initialization and finalization serialise on [`INIT_LOCK`];
//! everything else reads immutable data or atomics.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gsas_node::{Node, NodeError};
use gsas_transport::poll::WaitConfig;

use crate::addr::{Range, Segments, SymAddr};
use crate::env::{Config, EnvError};
use crate::fatal::fatal;

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
    /// The node's settled word ([`gsas_node::Node::settled_word`]), or null before init
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
    pub(crate) fn publish(
        &self,
        heap: Range,
        npes: u32,
        table: *mut usize,
        settled: &'static AtomicBool,
    ) {
        self.settled
            .store(std::ptr::from_ref(settled).cast_mut(), Ordering::Release);
        self.heap_direct.store(table, Ordering::Relaxed);
        self.heap_base.store(heap.base, Ordering::Relaxed);
        self.heap_limit
            .store(heap.len.saturating_sub(SMALL), Ordering::Relaxed);
        self.npes.store(npes, Ordering::Release);
    }

    /// Sends every later fast-path call to the slow path.
    pub(crate) fn retract(&self) {
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
    pub(crate) direct: [Box<[usize]>; 3],
    /// The environment.
    pub config: Config,
    /// The thread level granted (by the initialization of the current cycle).
    pub(crate) thread_level: AtomicI32,
    /// Spin/yield/block settings of waits (`GSAS_SPIN_US`).
    pub wait: WaitConfig,
    /// `shmem_init` calls not yet matched by a `shmem_finalize`.
    pub(crate) init_count: AtomicU32,
    /// Set by the last finalize.
    pub(crate) finalized: AtomicBool,
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

/// The state, set by the first `lifecycle::init` (kept across initialization cycles).
pub(crate) static STATE: OnceLock<State> = OnceLock::new();
/// Serialises initialization, finalization and the finalize at exit.
pub(crate) static INIT_LOCK: Mutex<()> = Mutex::new(());

/// The state, if ever initialized (also after finalize).
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
    /// A new initialization cycle (after the last finalize) did not find every PE: its
    /// barrier failed.
    Cycle(NodeError),
    /// The requested thread level is not one of `SHMEM_THREAD_*`.
    ThreadLevel(c_int),
    /// Initialization from an exit handler that runs after the library's own, which has
    /// left the job.
    AfterExit,
    /// The node client started, but this PE has no usable symmetric heap.
    NoHeap,
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitError::Env(e) => e.fmt(f),
            InitError::Node(e) => write!(f, "starting the gsas node client: {e}"),
            InitError::Cycle(e) => write!(
                f,
                "waiting for every PE to start the new initialization cycle (after the last shmem_finalize): {e}"
            ),
            InitError::ThreadLevel(l) => write!(
                f,
                "thread level {l} is not one of SHMEM_THREAD_SINGLE (0) .. SHMEM_THREAD_MULTIPLE (3)"
            ),
            InitError::AfterExit => f.write_str(
                "the library cannot be initialized again once the process has started to exit (its exit handler has left the job)",
            ),
            InitError::NoHeap => f.write_str("the node client has no symmetric heap mapped"),
        }
    }
}

impl std::error::Error for InitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InitError::Env(e) => Some(e),
            InitError::Node(e) | InitError::Cycle(e) => Some(e),
            _ => None,
        }
    }
}

/// `SHMEM_THREAD_MULTIPLE`.
pub const THREAD_MULTIPLE: c_int = 3;

impl State {
    /// The thread level granted by the current cycle's initialization.
    pub fn thread_level(&self) -> c_int {
        self.thread_level.load(Ordering::Relaxed)
    }

    /// Whether the last finalize has run (and no initialization since).
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

    /// Whether every segment of PE `pe` is mapped here, so that every operation to it is
    /// a load, a store or a CPU atomic of this PE, complete when it returns. Without a data
    /// segment (the Rust API, or a program whose globals are not remapped) its table is
    /// empty and does not count: no address translates into it.
    pub fn direct_pe(&self, pe: u32) -> bool {
        self.direct.iter().enumerate().all(|(seg, t)| {
            (seg == usize::from(gsas_node::DATA) && self.segs.data.len == 0)
                || t.get(pe as usize).is_some_and(|&b| b != 0)
        })
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
