//! The start and the end of the library: `shmem_init`, `shmem_finalize`, and the finalize
//! at exit.
//!
//! **What it is.** [`init`] bootstraps the PE through the gsas node client
//! ([`gsas_node::Node::init`], which with `remap_data` first moves the executable's
//! globals onto shared memory), builds the [`State`] the routines read, starts the
//! collectives' endpoint and publishes the fast paths' words ([`crate::state::HOT`]).
//! [`finalize`] ends it.
//!
//! Initialization is reference-counted as in OpenSHMEM 1.6 (a second `shmem_init` is a
//! no-op, every `shmem_finalize` but the last is a barrier). The last finalize ends an
//! *initialization cycle*: it completes everything, synchronizes every PE
//! ([`gsas_node::Node::pause`]) and frees every block of the symmetric heap, but the PE
//! stays in the job (service, PMI, mappings, the collectives' endpoint), so that a later
//! `shmem_init` starts another cycle on the same job ([`again`]: the state is marked live
//! again after a barrier). The PE leaves the job at exit ([`gsas_node::Node::leave`], no
//! other PE waited for). `docs/runtime.md` ("How a PE ends, and starts again").
//!
//! **Finalize at exit.** The first initialization registers an exit handler (glibc's
//! `on_exit`, which also tells the exit status). After the last finalize it leaves the
//! job, whatever the status (a failure to leave is printed and turns status 0 into 255).
//! A program that exits with status 0 while the library runs (a `start_pes` program,
//! which never calls finalize, or one that just forgets) is finalized there as if it had
//! called `shmem_finalize` last: quiet, barrier, leaving the service and the process
//! manager, so the launcher and the service see a clean end and print no warning. The
//! handler does nothing when the job is being ended (a fatal error, `shmem_global_exit`:
//! the process manager has been told), and, while the library runs, when the exit status
//! is not 0: a PE that fails must not wait in a barrier for PEs that may be waiting for
//! it; its launcher reports the failure. Before it finalizes it tells gsas's launcher (a
//! PMI note): if the other PEs wait in another call (a `shmem_barrier_all` this PE never
//! reaches), the final barrier cannot complete, and `oshrun` names this PE and what the
//! others are in instead of letting the job hang. It serialises with
//! `shmem_init`/`shmem_finalize` of other threads on the same lock; it finalizes on the
//! exiting thread, so a program that exits while other threads are still inside the
//! library gets what a `shmem_finalize` at that point would give. A fatal error inside it
//! ends the process with `_exit` (see `fatal`). A child the PE forked inherits the handler
//! and the PE's connections; its exit does nothing (the handler acts only in the process
//! that initialized the library).
//!
//! **What it is not.** The state itself (`state`), which this module fills.
//!
//! **Thread-safety.** [`init`], [`finalize`] and the exit handler serialise on
//! [`INIT_LOCK`].

use std::ffi::c_int;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

use gsas_node::{DATA, HEAP, Node, NodeOptions, SYNC};
use gsas_transport::poll::WaitConfig;

use crate::addr::{Range, Segments};
use crate::env::Config;
use crate::fatal::fatal;
use crate::state::{
    HOT, INIT_LOCK, InitError, InitOptions, SMALL, STATE, State, THREAD_MULTIPLE, live,
};
use crate::team::{Predefined, Team};

/// Initializes the library (or counts a repeated initialization); see the
/// [module docs](self).
pub fn init(options: InitOptions) -> Result<&'static State, InitError> {
    let _guard = INIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    if !(0..=THREAD_MULTIPLE).contains(&options.thread_level) {
        return Err(InitError::ThreadLevel(options.thread_level));
    }
    if let Some(st) = STATE.get() {
        if st.is_finalized() {
            return again(st, options);
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
    publish(st);
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
            crate::team::predefined("shmem_init").shared.n_pes(),
            st.segs.describe(),
            gsas_node::MAX_CONTEXTS - 1
        );
    }
    Ok(st)
}

/// Makes the fast paths live for `st`.
fn publish(st: &'static State) {
    HOT.publish(
        st.segs.heap,
        st.npes,
        st.direct[usize::from(HEAP)].as_ptr().cast_mut(),
        st.node.settled_word(),
    );
}

/// A new initialization cycle after the last finalize (OpenSHMEM 1.6): the same job on the
/// same node connection, with an empty symmetric heap (the last finalize freed every
/// block), the thread level asked for now, and a barrier, so that no PE starts the new
/// cycle's communication before every PE has entered it. The environment is the one read
/// at the first initialization.
fn again(st: &'static State, options: InitOptions) -> Result<&'static State, InitError> {
    if st.node.has_left() {
        // Only after the exit handler has run (another exit handler calling shmem_init).
        return Err(InitError::AfterExit);
    }
    st.thread_level
        .store(options.thread_level, Ordering::Relaxed);
    st.node.barrier_all().map_err(InitError::Cycle)?;
    st.init_count.store(1, Ordering::Release);
    st.finalized.store(false, Ordering::Release);
    publish(st);
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
    crate::team::set_predefined(Predefined {
        world: Team::new((0..npes).collect(), me, 0),
        shared: Team::new(shared, me, 0),
    });
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
        config,
        thread_level: AtomicI32::new(options.thread_level),
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
/// completes every context, waits for all PEs and frees the heap ([`finish`]; the PE
/// leaves the job at exit).
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

/// The last finalize: completes everything, waits for all PEs and frees every block of the
/// symmetric heap. The PE stays in the job until it exits (the exit handler leaves the
/// service and PMI), so that a later `shmem_init` can start another cycle.
fn finish(st: &State, call: &str) {
    crate::coll::direct::flush(st);
    if let Err(e) = st.node.pause() {
        fatal(call, e);
    }
    st.node.reset_heap();
    HOT.retract();
    st.finalized.store(true, Ordering::Release);
}

/// Leaves the service and PMI at exit, after the last finalize. Every operation completed
/// at that finalize, so a failure here loses nothing of the program's, but the PE does not
/// pretend that it left cleanly: it names the failure and exits non-zero (without ending the
/// other PEs, which may still be running their own code).
fn leave(st: &State, status: c_int) {
    crate::coll::direct::stop();
    if let Err(e) = st.node.leave() {
        gsas_transport::eprintln_whole!(
            "gsas-shmem: PE {}: leaving the job at exit: {e} (every operation had completed at shmem_finalize)",
            st.me
        );
        if status == 0 {
            // SAFETY: `_exit` inside an exit handler (`exit` again would be undefined).
            unsafe { libc::_exit(crate::fatal::FATAL_EXIT_CODE) }
        }
    }
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

/// The process that initialized the library: a child it forks inherits the exit handler
/// (and the PE's connections), and must not act for the PE when it exits.
static OWNER: AtomicU32 = AtomicU32::new(0);

fn register_exit_handler(st: &State) {
    OWNER.store(std::process::id(), Ordering::Relaxed);
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
    if crate::fatal::ending() || OWNER.load(Ordering::Relaxed) != std::process::id() {
        return;
    }
    let _guard = INIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(st) = STATE.get() else {
        return;
    };
    if !st.is_finalized() && status != 0 {
        return;
    }
    crate::fatal::entering_exit_handler();
    crate::fatal::boundary(AT_EXIT, || {
        if !st.is_finalized() {
            if st.config.debug {
                gsas_transport::eprintln_whole!(
                    "gsas-shmem: PE {}: exiting without shmem_finalize: finalizing now",
                    st.me
                );
            }
            st.init_count.store(0, Ordering::Release);
            // Under gsas's launcher: if the other PEs wait in another call, this one's
            // final barrier waits in vain; the launcher names both (docs/runtime.md).
            st.node.note_exit_without_finalize();
            let _named = gsas_node::watch::scope(AT_EXIT);
            finish(st, AT_EXIT);
        }
        leave(st, status);
    });
}
