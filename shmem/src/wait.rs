//! Waiting for a condition in memory: spin, then yield, then sleep, up to a deadline.
//!
//! **What it is.** [`wait_for`] polls a condition (a flag in this PE's memory that other
//! PEs update, a lock word, ...) first in a short tight loop, then through the runtime's
//! [`Waiter`] with `GSAS_SPIN_US` of spinning, a few yields and growing sleeps of at most
//! 1 ms, so that jobs with more PEs than cores make progress. Before every evaluation it
//! lets the node client drive this PE's own remote operations ([`progress`]: one round when
//! anything is in flight, an atomic load otherwise), so that a PE waiting for its partner's
//! update keeps delivering its own updates to the partner (retransmissions, frames of
//! non-blocking operations, acknowledgements). The wait is bounded by
//! `SHMEM_WAIT_TIMEOUT`; when that passes the job ends with a message naming the routine
//! and what it waited for.
//!
//! The sleeps are sleeps on this PE's doorbell ([`gsas_node::Node::bell`], see
//! [`gsas_transport::bell`]): the waiter announces itself, re-evaluates the condition, and sleeps in
//! `futex(2)` for at most the sleep step. An update that another node's PE makes to this
//! PE's memory is applied by this node's atomic service, which rings the bell when a waiter
//! sleeps, so the waiter wakes at once instead of after up to 1 ms (with more processes
//! than cores those sleeps dominated cross-node ping-pong). A small put sent straight to
//! this PE (`SHMEM_P2P_DIRECT_MAX`, see `coll::direct`) is applied by the waiter itself,
//! which drives its endpoint in [`progress`]; while such puts flow, a waiter that sleeps
//! sleeps on the endpoint's socket instead of the futex (`coll::direct::sleep`: the put
//! wakes it once, and the keeper thread passes the bell's rings on to it through an
//! eventfd; a `shmem_test` loop's naps stay on the futex, with the keeper on the socket);
//! packets arriving on the endpoint count as activity, so the waiter spins again while a
//! stream of them comes in. Stores of same-node PEs go
//! directly into memory and do not ring; the waiter's spin phase sees those, and a sleeping
//! waiter sees them at the end of its (bounded) sleep step as before. On a crowded machine
//! (more runnable threads than CPUs) there is no spin phase: the waiter sleeps at once, and
//! sees a same-node store at the end of its current step (20 us, growing to 1 ms).
//!
//! **Hangs explain themselves** ([`gsas_node::watch`]). Every step of a wait (and every
//! [`progress`], so also `shmem_test` and the collectives' waits) reads the watch's alert
//! word: when the node's watchdog saw the local atomic service close the control
//! connection, the wait ends the job naming the routine and the service
//! (`the local atomic service (control socket ...) closed the connection: it stopped or
//! died`), within one sleep step. A wait that goes on names itself (the routine) for the
//! launcher, and on SIGQUIT prints this PE's line with what it waits for.
//!
//! **What it is not.** Not a scheduler: the condition is re-evaluated by polling.
//!
//! **Thread-safety.** Each call waits on the calling thread only.

use std::cell::Cell;
use std::fmt;
use std::time::{Duration, Instant};

use gsas_node::watch::{self, Watch};
use gsas_transport::poll::{Progress, Waiter};

use crate::fatal::fatal;
use crate::state::State;

/// Tight polls before the adaptive waiter takes over.
const QUICK_POLLS: u32 = 128;

/// Unsatisfied `shmem_test` calls in a row after which, on a crowded machine, each further
/// one naps on the doorbell ([`tested`]).
const TEST_NAP_AFTER: u32 = 32;

/// The longest nap of an unsatisfied `shmem_test` call on a crowded machine.
const TEST_NAP: Duration = Duration::from_micros(200);
/// [`TEST_NAP`] on a node that PEs of other nodes write to over verbs, which ring no bell:
/// such an update is seen at the nap's end (a ping-pong of `p` and `shmem_test` over the
/// software verbs device took 310-420 us per round trip with the 200 us nap, against
/// 130-190 us with `shmem_quiet` and `shmem_wait_until`).
const TEST_NAP_UNBELLED: Duration = Duration::from_micros(20);

/// Unsatisfied `shmem_test` calls count as "in a row" only this close to each other: a
/// loop that computes between its tests never naps.
const TEST_LOOP_GAP_NS: u64 = 20_000;

thread_local! {
    /// Unsatisfied `shmem_test` family calls in a row on this thread, and the monotonic
    /// time of the last one.
    static TEST_MISSES: Cell<(u32, u64)> = const { Cell::new((0, 0)) };
}

/// A description of what is waited for, formatted only when needed.
pub struct What<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result>(pub F);

impl<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result> fmt::Display for What<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.0)(f)
    }
}

/// A description made once, when first shown (the collectives describe what they wait
/// for with a `FnOnce`: on a SIGQUIT report and then perhaps on the timeout).
pub struct Described<F: FnOnce() -> String> {
    make: std::cell::Cell<Option<F>>,
    text: std::cell::OnceCell<String>,
}

impl<F: FnOnce() -> String> Described<F> {
    /// `make` is called at most once.
    pub fn new(make: F) -> Self {
        Described {
            make: std::cell::Cell::new(Some(make)),
            text: std::cell::OnceCell::new(),
        }
    }
}

impl<F: FnOnce() -> String> fmt::Display for Described<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self
            .text
            .get_or_init(|| self.make.take().map_or_else(String::new, |m| m()));
        f.write_str(text)
    }
}

/// Polls `cond` until it returns a value; see the [module docs](self).
pub fn wait_for<R>(
    st: &State,
    call: &str,
    what: impl fmt::Display,
    mut cond: impl FnMut() -> Option<R>,
) -> R {
    // On a crowded machine the tight polls only keep the CPU from the process that must
    // make the condition true (each may be a receive system call): the waiter sleeps.
    let quick = if st.wait.block_when_crowded && gsas_transport::poll::oversubscribed() {
        0
    } else {
        QUICK_POLLS
    };
    for _ in 0..quick {
        progress(st, call);
        if let Some(r) = cond() {
            return r;
        }
        crate::coll::direct::release_owed();
        std::hint::spin_loop();
    }
    let mut waiter = Waiter::new(st.wait);
    let start = Instant::now();
    let deadline = start + st.wait_timeout();
    let mut watch = Watch::new(Some(call), start);
    let mut received = crate::coll::direct::received();
    let got = waiter.wait_bell_with(
        &what,
        deadline,
        st.node.bell(),
        &mut |sleeper, timeout| crate::coll::direct::sleep(sleeper, timeout, true),
        || {
            progress(st, call);
            let found = cond();
            if found.is_none() {
                // The waiter waits on: the acknowledgements its look left owed go now.
                crate::coll::direct::release_owed();
            }
            match found {
                Some(r) => Progress::Done(r),
                // Point-to-point puts arrive on this PE's endpoint (for other variables):
                // activity, so the waiter spins again, as while a service applies them.
                None if crate::coll::direct::received() != received => {
                    received = crate::coll::direct::received();
                    Progress::Busy
                }
                None => {
                    // Announced on the bell (the re-check before a sleep): what this PE owes
                    // goes, and it looks once more; then it sleeps (`coll::direct::sleep`).
                    if st.node.bell().is_some_and(|b| b.sleepers() > 0) {
                        crate::coll::direct::sleeping();
                    }
                    // A dead service was seen by `progress`; this prints the report line.
                    let _ = watch.idle(&what);
                    Progress::Idle(None)
                }
            }
        },
    );
    match got {
        Ok(r) => r,
        Err(e) => fatal(
            call,
            format_args!(
                "{e} (limit: SHMEM_WAIT_TIMEOUT={}s)",
                st.wait_timeout().as_secs_f64()
            ),
        ),
    }
}

/// The outcome of a `shmem_test` family call: `eval` evaluates the condition (after this
/// PE's progress), `hit` says whether the outcome is "satisfied".
///
/// A program that polls `shmem_test` in a loop is a compute-bound process to the kernel.
/// On a crowded machine ([`oversubscribed`](gsas_transport::poll::oversubscribed)) it
/// keeps the CPU from its node's atomic service, which must run to apply the partner's
/// update: each round trip of a `shmem_long_p` / `shmem_long_test` ping-pong then took
/// milliseconds. So after [`TEST_NAP_AFTER`] unsatisfied calls in a row on this thread
/// (each within [`TEST_LOOP_GAP_NS`] of the one before: a polling loop, not a loop that
/// computes between its tests), while the machine is crowded, an unsatisfied call naps on this PE's doorbell for at
/// most [`TEST_NAP`] (announce, re-evaluate, sleep, re-evaluate): an update from another
/// node rings the bell and ends the nap at once, and the CPU goes to the service in the
/// meantime. On a machine with a CPU for everyone the call never sleeps. (Unlike the waits,
/// this holds in a job whose PEs all share one node's memory directly too: there a polling
/// loop beside a compute-bound process kept its partner off the CPU for whole slices, 11.7
/// ms per round trip of a `p` / `test` ping-pong of 2 PEs beside one CPU-bound process, 427
/// us with the naps.)
pub fn tested<R>(
    st: &State,
    call: &str,
    mut eval: impl FnMut() -> R,
    hit: impl Fn(&R) -> bool,
) -> R {
    let r = eval();
    if hit(&r) {
        TEST_MISSES.set((0, 0));
        return r;
    }
    // The program polls on: the acknowledgements this call's look left owed go now.
    crate::coll::direct::release_owed();
    let now = gsas_transport::poll::monotonic_ns();
    let (misses, last) = TEST_MISSES.get();
    let misses = if now.saturating_sub(last) <= TEST_LOOP_GAP_NS {
        misses.saturating_add(1)
    } else {
        1
    };
    TEST_MISSES.set((misses, now));
    if misses < TEST_NAP_AFTER || !gsas_transport::poll::oversubscribed() {
        return r;
    }
    let Some(bell) = st.node.bell() else {
        return r;
    };
    let sleeper = bell.announce();
    crate::coll::direct::sleeping();
    let r = eval();
    if hit(&r) {
        TEST_MISSES.set((0, 0));
        return r;
    }
    // RDMA writes over verbs ring no bell: the nap is all the delay such an update sees.
    // On the doorbell, the keeper watching the socket: a test loop's naps are short and
    // many, and on the socket they measured slower beside CPU-bound processes (20,000
    // rounds of `p` / `test`, debug build: a median round trip of 104-138 us in five runs
    // of fourteen, against 17-25 us in every run of eight this way).
    crate::coll::direct::sleep(
        &sleeper,
        if st.node.unbelled_updates() {
            TEST_NAP_UNBELLED
        } else {
            TEST_NAP
        },
        false,
    );
    drop(sleeper);
    progress_polled(st, call);
    let r = eval();
    if hit(&r) {
        TEST_MISSES.set((0, 0));
    } else {
        // The nap is the loop's, not a gap in it.
        TEST_MISSES.set((misses, gsas_transport::poll::monotonic_ns()));
    }
    r
}

/// Drives this PE's remote operations once if any are in flight (see the
/// [module docs](self)); for waits and tests. A failure of the remote path (the transport
/// broke, the local service is gone, as the watchdog saw) is a fatal error naming `call`;
/// errors of single operations stay with their context until its next quiet.
#[inline]
pub fn progress(st: &State, call: &str) {
    progress_with(st, call, crate::coll::direct::drive_p2p);
}

/// [`progress`] for the collectives' waits: their signals arrive on this PE's collective
/// endpoint, so it is driven on every look (once: not a second time for point-to-point
/// puts).
#[inline]
pub fn progress_coll(st: &State, call: &str) {
    progress_with(st, call, crate::coll::direct::drive);
}

#[inline]
fn progress_with(st: &State, call: &str, drive: fn(&State)) {
    if let Err(e) = st.node.poke() {
        fatal(call, e);
    }
    drive(st);
    if watch::alert() & watch::GONE != 0 {
        fatal(call, st.node.service_gone());
    }
}

/// [`progress`] for routines a program calls in its own loop (`shmem_test` and the other
/// tests): also prints this PE's report line, naming `call`, when one is asked for.
#[inline]
pub fn progress_polled(st: &State, call: &str) {
    if let Err(e) = st.node.poke() {
        fatal(call, e);
    }
    crate::coll::direct::drive_p2p(st);
    if watch::alert() != 0 && watch::polled(call).is_err() {
        fatal(call, st.node.service_gone());
    }
}
