//! How a collective waits for a flag: spin, then yield, then sleep, up to a deadline.
//!
//! **What it is.** [`wait`] polls a condition in a tight loop for `SHMEM_COLL_SPIN_US`
//! (the PEs of a job usually have a core each, and a flag set by another core is seen
//! within a fraction of a microsecond). It does not spin at all on a *crowded* machine:
//! when the node runs more PEs than the process may use CPUs, or the machine has more
//! runnable threads than CPUs ([`gsas_transport::poll::oversubscribed`]; e.g. two emulated
//! nodes of two PEs each on two cores). Then it yields the CPU for 500 us (on a crowded
//! machine the PE being waited for needs this core), then sleeps in steps growing from
//! 2 us to 100 us (on a crowded machine up to an eighth of the time waited so far, at most
//! 50 ms: [`gsas_transport::poll::crowded_block`]); a PE with a collective endpoint sleeps
//! in `ppoll` on its socket, so that a datagram ends the nap. Every phase checks the condition between waits; before every
//! check the PE drives its own remote operations if any are in flight
//! ([`crate::wait::progress_coll`]: the signals it just posted may still sit in an open
//! frame, and the PE it waits for may be waiting for them) and its collective endpoint.
//! [`wait_on`] with `socket` waits for a signal that arrives on this PE's endpoint (the
//! remote counters of a leader whose peers it reaches directly): on a crowded machine it
//! spins for at most [`SOCKET_SPIN`] and then blocks on the socket (up to [`SOCKET_NAP`]
//! at a time, growing with the wait as above) instead of yielding, so that it leaves the CPU to the PEs and services that
//! have work. After `SHMEM_WAIT_TIMEOUT` the job ends with a message naming the collective
//! and what it waited for (the PEs that did not arrive).
//!
//! **What it is not.** Not a scheduler: nothing but a datagram wakes the PE, it polls.
//!
//! **Thread-safety.** Each call waits on the calling thread.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::direct;
use crate::fatal::fatal;
use crate::state::State;
use crate::wait::progress_coll;

/// Longest sleep between polls.
const MAX_NAP: Duration = Duration::from_micros(100);
/// How long to yield before sleeping.
const YIELD: Duration = Duration::from_micros(500);
/// How long a PE of a crowded machine spins before it blocks on its socket.
const SOCKET_SPIN: Duration = Duration::from_micros(5);
/// Longest block on the socket between looks at the condition and the deadline.
const SOCKET_NAP: Duration = Duration::from_millis(1);

/// Waits until `ready` returns true; see the [module docs](self). `what` describes what is
/// waited for (asked only on a timeout).
#[inline]
pub fn wait(st: &State, call: &str, ready: impl FnMut() -> bool, what: impl FnOnce() -> String) {
    wait_on(st, call, false, ready, what);
}

/// [`wait`]; `socket`: the signal arrives on this PE's collective endpoint (`direct`), so
/// on a crowded machine the PE blocks on the socket after [`SOCKET_SPIN`] instead of
/// yielding.
#[inline]
pub fn wait_on(
    st: &State,
    call: &str,
    socket: bool,
    mut ready: impl FnMut() -> bool,
    what: impl FnOnce() -> String,
) {
    progress_coll(st, call);
    if ready() {
        return;
    }
    slow(st, call, &mut ready, what, socket);
}

/// How long to spin: `SHMEM_COLL_SPIN_US`, or nothing on a crowded machine (the PE being
/// waited for may need this CPU).
fn spin_time(st: &State) -> Duration {
    if crowded(st) {
        Duration::ZERO
    } else {
        Duration::from_micros(st.config.coll_spin_us)
    }
}

/// Whether a spinning PE would keep another off a CPU: this node runs more PEs than this
/// process may use CPUs, or the machine has more runnable threads than CPUs right now
/// ([`gsas_transport::poll::oversubscribed`]: several emulated nodes on one machine, other
/// jobs, or the services at work). Unlike `shmem_wait_until` (see `lifecycle::build`) this holds
/// in a job whose PEs all share one node's memory directly too: spinning there beside one
/// CPU-bound process made a 2-PE barrier 64 us instead of 5.
fn crowded(st: &State) -> bool {
    static NODE: OnceLock<bool> = OnceLock::new();
    *NODE.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        st.node.local_pes().len() > cpus
    }) || gsas_transport::poll::oversubscribed()
}

/// The longest nap of a wait that began at `start`, whose bound on a quiet machine is
/// `base`: on a crowded one it grows with the wait
/// ([`gsas_transport::poll::crowded_block`]), so that hundreds of waiting PEs do not keep
/// the run queue full (and the services and PEs they wait for off the CPUs) by waking
/// every 100 us to look.
fn nap_bound(st: &State, base: Duration, start: Instant) -> Duration {
    if crowded(st) {
        gsas_transport::poll::crowded_block(base, start.elapsed())
    } else {
        base
    }
}

#[inline(never)]
fn slow(
    st: &State,
    call: &str,
    ready: &mut dyn FnMut() -> bool,
    what: impl FnOnce() -> String,
    socket: bool,
) {
    let start = Instant::now();
    // On a crowded machine a waiter for a datagram spins briefly, then sleeps on its socket.
    let block = socket && crowded(st);
    let spin = if block {
        SOCKET_SPIN.min(Duration::from_micros(st.config.coll_spin_us))
    } else {
        spin_time(st)
    };
    // Datagrams this PE's endpoint took in: point-to-point puts arriving while the PE waits
    // here start the spin and yield phases again, so that a stream of them is taken in by
    // a running PE (as a service would) instead of waking a sleeping one for each.
    let mut received = direct::received();
    let mut phase = start;
    let look = |received: &mut u64, phase: &mut Instant| {
        progress_coll(st, call);
        let now = direct::received();
        if now != *received {
            *received = now;
            *phase = Instant::now();
        }
    };
    // Every poll drives the endpoint (a receive system call when the PE has one), so the
    // clock is read after every poll, and not at all when there is no spin (a crowded
    // machine): a fixed batch of polls had cost ~19 us of another PE's CPU per wait.
    while phase.elapsed() < spin {
        look(&mut received, &mut phase);
        if ready() {
            return;
        }
        std::hint::spin_loop();
    }
    let yield_until = if block { spin } else { spin + YIELD };
    let deadline = st.wait_timeout();
    // A dead local service ends the wait in `progress_coll`; this names the wait for the
    // launcher and prints the SIGQUIT report (crate::wait's module docs).
    let what = crate::wait::Described::new(what);
    let mut watch = gsas_node::watch::Watch::new(Some(call), start);
    let mut nap = Duration::from_micros(2);
    loop {
        let idle = phase.elapsed();
        if block {
            // Woken by the datagram (or after the nap: the deadline is looked at).
            direct::nap(nap_bound(st, SOCKET_NAP, start));
        } else if idle < spin {
            std::hint::spin_loop();
        } else if idle < yield_until {
            std::thread::yield_now();
        } else {
            // A datagram ends the nap early.
            if !direct::nap(nap) {
                std::thread::sleep(nap);
            }
            nap = (nap * 2).min(nap_bound(st, MAX_NAP, start));
        }
        if ready() {
            return;
        }
        let before = phase;
        look(&mut received, &mut phase);
        if phase != before {
            nap = Duration::from_micros(2);
        }
        if ready() {
            return;
        }
        let _ = watch.idle(&what);
        let elapsed = start.elapsed();
        if elapsed >= deadline {
            fatal(
                call,
                format_args!(
                    "timed out after {:.1} s waiting for {} (SHMEM_WAIT_TIMEOUT={}s)",
                    elapsed.as_secs_f64(),
                    what,
                    deadline.as_secs_f64()
                ),
            );
        }
    }
}
