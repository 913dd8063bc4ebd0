//! The progress keeper: a thread that drives a PE's remote path while the program does not.
//!
//! **What it is.** A PE's reliability layer retransmits lost frames and acknowledges the
//! frames the services send it only when something drives it. Every node-client call on
//! the remote path does (starting a blocking operation, waiting, [`Node::progress`]), but a
//! program may compute for a long time after its last call. Without help, a lost request
//! of that PE would not be sent again until the next call, and the reply frame its service
//! sent last would stay unacknowledged: the service retransmits it until its deadline and
//! then declares the PE unreachable, after which that node drops the PE's replies and its
//! later operations there fail; and non-blocking operations, which share frames, would
//! wait in their open frame. The keeper closes the gap. It naps for [`TICK`] while the
//! remote path has anything in flight (operations outstanding, frames open or not yet
//! acknowledged, acknowledgements owed: the [`Pulse`]'s `pending` word) and for
//! [`IDLE_NAP`] otherwise; when it wakes with something pending and no caller has driven
//! progress for a tick, it takes the remote path's lock *if it is free* (`try_lock`) and
//! runs one round of progress (open frames sent, timers, retransmissions, delayed
//! acknowledgements, replies). A non-blocking start that finds the path idle and the
//! keeper in its long nap wakes it (one `unpark`, only on that transition), so that frame
//! leaves within about a tick too; blocking operations send their frame themselves and do
//! not pay for a wake-up.
//!
//! **Guarantee** (documented in the [node docs](super)): while a PE computes without
//! calling the library, its non-blocking operations are sent within about a tick, and its
//! lost frames are retransmitted and the replies it got acknowledged within about
//! [`IDLE_NAP`] of being due (a tick once the keeper is looking); so delivery and the PE's
//! sessions with the services do not depend on the program calling back in.
//!
//! **Why it does not cost latency.** It takes no part in operations: callers start, send
//! and complete them on their own thread, and publish two words with relaxed stores (when
//! they last drove progress, and whether anything is pending). The keeper acts only after a
//! caller left the remote path alone for a whole tick, so never inside a latency loop, and
//! it does not wait on the UDP socket (a thread woken by every datagram would compete with
//! the caller for every reply). Its cost is one wake-up per tick while something is pending
//! and one per nap otherwise; a caller meets it only if it comes back during the one round
//! the keeper is running (a few microseconds).
//!
//! **What it is not.** Not needed for the target side of operations (the node's service
//! serves requests whatever the PE does), and not started for jobs on one node (same-node
//! PEs are reached directly or through the ring, which needs no retransmission).
//!
//! **Thread-safety.** [`Pulse`] is shared between the callers and the keeper (a mutex and
//! atomics); the thread is owned by [`Keeper`], which stops and joins it when stopped or
//! dropped.
//!
//! [`Node::progress`]: super::Node::progress

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use gsas_transport::poll::monotonic_ns;

use super::remote::Remote;

/// How often the keeper looks while something is pending: 1 ms, well below the runtime's
/// smallest retransmission timeout ([`MIN_RTO`](gsas_service::MIN_RTO)), so a
/// retransmission or a delayed acknowledgement is late by at most about this much.
pub(crate) const TICK: Duration = Duration::from_millis(1);

/// How long the keeper naps when nothing was pending at its last look. A blocking
/// operation does not wake it (that would cost the caller a system call); the nap bounds
/// how late the keeper notices, which only matters for a PE that computes right after such
/// an operation, and then only for a frame that is lost or an acknowledgement its service
/// waits for (the service retransmits meanwhile).
pub(crate) const IDLE_NAP: Duration = Duration::from_millis(10);

/// The remote path and the words its callers publish for the keeper.
pub(crate) struct Pulse {
    remote: Mutex<Remote>,
    /// `monotonic_ns` of the last round of progress a caller drove.
    last_drive: AtomicU64,
    /// Whether the remote path had anything in flight when last looked at.
    pending: AtomicBool,
    /// The keeper is in (or about to enter) its long nap.
    napping: AtomicBool,
    /// The keeper thread, for waking it.
    keeper: OnceLock<Thread>,
    /// Tells the keeper to end.
    stop: AtomicBool,
}

impl Pulse {
    pub(crate) fn new(remote: Remote) -> Self {
        Pulse {
            remote: Mutex::new(remote),
            last_drive: AtomicU64::new(0),
            pending: AtomicBool::new(false),
            napping: AtomicBool::new(false),
            keeper: OnceLock::new(),
            stop: AtomicBool::new(false),
        }
    }

    /// Locks the remote path (a poisoned lock is taken over: the remote state stays
    /// consistent between statements that can panic).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Remote> {
        self.remote.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether anything was in flight at the last look (one relaxed load).
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// Marks the remote path as having work in flight (an operation was just started).
    /// `wake`: the operation may sit in an open frame (a non-blocking start), so a keeper in
    /// its long nap is woken when the path turns from idle to busy.
    #[inline]
    pub(crate) fn mark_pending(&self, wake: bool) {
        if !wake {
            self.pending.store(true, Ordering::Relaxed);
            return;
        }
        // SeqCst pairs with the keeper's store to `napping` and load of `pending`: either it
        // sees this operation pending before it naps, or this sees it napping.
        if !self.pending.swap(true, Ordering::SeqCst) && self.napping.load(Ordering::SeqCst) {
            if let Some(t) = self.keeper.get() {
                t.unpark();
            }
        }
    }

    /// Records that a caller just drove a round of progress on `remote` at `now`, and
    /// whether anything is left in flight.
    pub(crate) fn driven(&self, remote: &Remote, now: u64) {
        self.last_drive.store(now, Ordering::Relaxed);
        self.pending.store(remote.busy(now), Ordering::Relaxed);
    }

    /// One look of the keeper: a round of progress if something is pending, no caller drove
    /// one for `idle_ns`, and the lock is free. Returns whether it ran one.
    fn look(&self, idle_ns: u64) -> bool {
        if !self.pending() {
            return false;
        }
        let now = monotonic_ns();
        if now.saturating_sub(self.last_drive.load(Ordering::Relaxed)) < idle_ns {
            return false;
        }
        let mut remote = match self.remote.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        if let Err(e) = remote.progress() {
            // The caller's next operation meets the same failure and reports it.
            log::debug!("progress keeper: {e}");
        }
        let now = monotonic_ns();
        self.pending.store(remote.busy(now), Ordering::Relaxed);
        true
    }
}

/// The keeper thread of a node; see the [module docs](self).
pub(crate) struct Keeper {
    pulse: Arc<Pulse>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    /// Starts the keeper on `pulse`.
    ///
    /// Errors: the thread could not be created.
    pub(crate) fn spawn(pulse: Arc<Pulse>) -> std::io::Result<Keeper> {
        let shared = Arc::clone(&pulse);
        let thread = std::thread::Builder::new()
            .name("gsas-progress".into())
            .spawn(move || run(&shared))?;
        // Set once: a pulse has at most one keeper.
        let _ = pulse.keeper.set(thread.thread().clone());
        Ok(Keeper {
            pulse,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it (it ends within one round of progress).
    pub(crate) fn stop(&mut self) {
        self.pulse.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            if t.join().is_err() {
                log::warn!("the progress keeper panicked");
            }
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(pulse: &Pulse) {
    let tick_ns = TICK.as_nanos() as u64;
    while !pulse.stop.load(Ordering::Acquire) {
        pulse.napping.store(true, Ordering::SeqCst);
        if !pulse.pending.load(Ordering::SeqCst) {
            // Long nap; whatever ends it (time, a wake-up, `stop`), the loop starts over
            // and naps a tick before looking, so that a non-blocking burst that woke the
            // keeper has a tick to fill its frame.
            std::thread::park_timeout(IDLE_NAP);
            pulse.napping.store(false, Ordering::SeqCst);
            continue;
        }
        pulse.napping.store(false, Ordering::SeqCst);
        std::thread::park_timeout(TICK);
        if pulse.stop.load(Ordering::Acquire) {
            break;
        }
        pulse.look(tick_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_keep_their_promises() {
        // The tick must not exceed the reliability layer's minimum retransmission timeout,
        // or the keeper would add more than one timeout to a retransmission.
        let rc = gsas_transport::reliable::reliable_config(std::time::Duration::from_secs(10));
        assert!(TICK.as_nanos() as u64 <= rc.min_rto_ns);
        // A delayed acknowledgement is due after ack_delay: the linger of `busy` must keep
        // the keeper looking until then plus a tick.
        assert!(
            super::super::remote::ACK_LINGER_NS >= rc.ack_delay_ns + 2 * TICK.as_nanos() as u64
        );
        // ... and past a retransmission of the service's last frame after up to twice the
        // timeout floor, so a lost acknowledgement is repaired.
        assert!(
            super::super::remote::ACK_LINGER_NS
                >= 2 * rc.min_rto_ns + rc.ack_delay_ns + 2 * TICK.as_nanos() as u64
        );
        // Finalize's settling covers an ack delay with room to spare.
        assert!(super::super::SETTLE_LIMIT.as_nanos() as u64 > 100 * rc.ack_delay_ns);
        assert!(IDLE_NAP > TICK);
    }
}
