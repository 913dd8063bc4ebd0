//! The end of a PE's life in the job: barrier_all, abort, finalize, which is pause (the end
//! of an OpenSHMEM initialization cycle: everything completed, every PE met) then leave
//! (settling before leaving the service and PMI).

use super::error::NodeError;
use gsas_control::ControlError;
use gsas_core::wire::{AtomicOp, AtomicType, ErrorCode};
use std::sync::atomic;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::{Ctx, MAPPED, MAX_CONTEXTS, Node, SETTLE_LIMIT, SYNC, boot, error, lock};

impl Node {
    /// `quiet` on the default context, then a dissemination barrier over all PEs on
    /// counters in the sync segment (atomic adds: CPU atomics for same-node PEs, through
    /// the services otherwise). Waits spin, then yield, then sleep; bounded by the boot
    /// timeout plus the deadline, with an error naming the round and the PE waited for.
    pub fn barrier_all(&self) -> Result<(), NodeError> {
        self.quiet(Ctx::DEFAULT)?;
        let mut generation = lock(&self.barrier_gen);
        *generation += 1;
        let g = *generation;
        let n = self.size;
        if n == 1 {
            return Ok(());
        }
        let mine = self.mappings[self.rank as usize * MAPPED + usize::from(SYNC)].base;
        let mut dist = 1u32;
        let mut round = 0u64;
        while dist < n {
            let to = (self.rank + dist) % n;
            let from = (self.rank + n - dist) % n;
            self.atomic_nbi(
                Ctx::DEFAULT,
                to,
                SYNC,
                round * 64,
                AtomicOp::Add,
                AtomicType::U64,
                1,
                0,
            )?;
            // SAFETY: offset round * 64 < SYNC_RESERVED lies in this PE's own sync mapping,
            // 8-byte aligned; every writer uses atomics.
            let counter =
                unsafe { AtomicU64::from_ptr((mine + (round * 64) as usize) as *mut u64) };
            let limit = self.boot_timeout + self.deadline;
            self.wait_for(
                &format_args!("barrier {g}, round {round}: PE {from}"),
                limit,
                |_| Ok((counter.load(Ordering::Acquire) >= g).then_some(())),
            )?;
            dist = dist.saturating_mul(2);
            round += 1;
        }
        atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    /// Ends the whole job: logs `message`, tells the process manager (PMI abort with
    /// `code`) and exits this process with `code`.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        log::error!("PE {} aborts the job (code {code}): {message}", self.rank);
        self.report_abort(code, message);
        std::process::exit(code)
    }

    /// Tells gsas's launcher that this PE's program exits (with status 0) without having
    /// called finalize, so that the launcher can name it if the other PEs wait for it in
    /// vain (a PMI note; nothing under other launchers). Call it before finalizing on the
    /// program's behalf.
    pub fn note_exit_without_finalize(&self) {
        if let Err(e) = lock(&self.pmi).note("exit", "0") {
            log::debug!("PE {}: note to the launcher: {e}", self.rank);
        }
    }

    /// The second half of [`Node::abort`]: tells the process manager that the job ends
    /// with `code` (PMI abort; gsas's launcher prints `message`), but leaves printing
    /// `message` here (it is logged at info only) and ending this process to the caller;
    /// for callers that have printed the reason themselves and must not call `exit` (an
    /// exit handler: a second `exit` is undefined behaviour, `_exit` is the way out).
    pub fn report_abort(&self, code: i32, message: &str) {
        log::info!("PE {} aborts the job (code {code}): {message}", self.rank);
        if let Err(e) = lock(&self.pmi).abort(code, message) {
            log::error!("PMI abort: {e}");
        }
    }

    /// Completes every context, waits for all PEs (barrier), leaves the service and says
    /// goodbye to PMI: [`Node::pause`], then [`Node::leave`]. Further operations fail with
    /// [`NodeError::Finalized`]. Calling it again does nothing.
    pub fn finalize(&self) -> Result<(), NodeError> {
        if self.finalized.load(Ordering::Acquire) {
            return Ok(());
        }
        self.pause()?;
        self.leave()
    }

    /// The end of one initialization cycle of the OpenSHMEM layer: completes every
    /// context, waits for all PEs (barrier) and completes the barrier's own increments.
    /// Every operation any PE started before its `pause` has then been executed. This PE
    /// stays in the job (service connection, PMI, mappings): the program may start
    /// another cycle, and must end with [`Node::leave`] (which needs no other PE).
    pub fn pause(&self) -> Result<(), NodeError> {
        self.check_live()?;
        let used = *lock(&self.contexts);
        for i in (0..MAX_CONTEXTS).filter(|i| used & (1 << i) != 0) {
            self.quiet(Ctx(i as u16))?;
        }
        // From here on the only operations are the barrier's increments: one that a node
        // refuses because every PE of the job there left after its own pause counts as
        // complete (`Book::finished_by_job_end`).
        self.pulse.lock().book.ending = true;
        // The barrier's last increments are non-blocking: complete them too, or the PEs
        // they went to could wait for them in vain if this PE left next.
        let done = self.barrier_all().and_then(|()| self.quiet(Ctx::DEFAULT));
        // Nothing is in flight any more; a later cycle's operations are held to the
        // normal rule.
        self.pulse.lock().book.ending = false;
        done
    }

    /// Leaves the job after a [`Node::pause`] (no other PE is waited for): lets the last
    /// replies be acknowledged, leaves the service and says goodbye to PMI. Further
    /// operations fail with [`NodeError::Finalized`]. Calling it again does nothing.
    pub fn leave(&self) -> Result<(), NodeError> {
        if self.finalized.load(Ordering::Acquire) {
            return Ok(());
        }
        // A PE that cannot settle still leaves the service and PMI (so that neither keeps
        // its state), and then reports the failure.
        let settled = self.settle();
        if let Some(mut keeper) = lock(&self.keeper).take() {
            keeper.stop();
        }
        // Leaving makes the service close the connection: no failure for the watchdog.
        crate::watch::detach(self.watch_token);
        self.finalized.store(true, Ordering::Release);
        let left = match lock(&self.control).leave(self.rank as u16, self.job_id) {
            // After the pause every operation of every PE completed; a service that no
            // longer has the job (it reclaimed it because another PE of this node died or
            // called _exit after its own pause) or that has stopped (its host PE exited)
            // keeps nothing of this PE's: there is nothing left to leave.
            Err(ControlError::Refused {
                code: ErrorCode::BadKey,
                message,
                ..
            }) => {
                log::info!(
                    "PE {}: the service ended the job already: {message}",
                    self.rank
                );
                Ok(())
            }
            Err(ControlError::Closed { path }) => {
                log::info!(
                    "PE {}: the service at {} has stopped: nothing to leave",
                    self.rank,
                    path.display()
                );
                Ok(())
            }
            other => other.map_err(NodeError::from),
        }
        .and_then(|()| {
            lock(&self.pmi)
                .finalize()
                .map_err(error::pmi("PMI finalize"))
        });
        if let Some(service) = lock(&self.service).take() {
            boot::stop_embedded(service, self.boot_timeout);
        }
        match (settled, left) {
            (Err(e), Err(also)) => {
                log::error!("finalize: after failing to settle, leaving failed too: {also}");
                Err(e)
            }
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
        }
    }

    /// Whether [`Node::leave`] (or [`Node::finalize`]) has run.
    pub fn has_left(&self) -> bool {
        self.finalized.load(Ordering::Acquire)
    }

    /// Forgets every block of the symmetric heap (the whole heap is free again), for a new
    /// initialization cycle after a [`Node::pause`]; every PE does it at the same point of
    /// the job, so the allocations that follow get the same offsets everywhere.
    pub fn reset_heap(&self) {
        lock(&self.heap).reset();
    }

    /// Before leaving, after every operation completed: lets the reliability layer
    /// acknowledge the last replies, so that no service keeps retransmitting a reply to a
    /// closed socket until it declares the PE unreachable. Usually an ack delay (200 us);
    /// bounded by [`SETTLE_LIMIT`] or the reliability deadline, whichever is longer. A PE
    /// that cannot settle does not pretend it left cleanly: the error names the services
    /// and what was outstanding.
    fn settle(&self) -> Result<(), NodeError> {
        let settled = self.wait_for(
            &"the last replies to be acknowledged",
            SETTLE_LIMIT.max(self.deadline),
            |remote| Ok(remote.settled().then_some(())),
        );
        match settled {
            Ok(()) => Ok(()),
            Err(NodeError::Timeout { waited, .. }) => Err(NodeError::Timeout {
                what: format!(
                    "PE {} to settle before leaving ({})",
                    self.rank,
                    self.pulse.lock().unsettled()
                ),
                waited,
            }),
            Err(e) => Err(e),
        }
    }

    /// Operations started through a service or over verbs (RDMA, NIC atomics) since init:
    /// while it is 0 every operation was a load, store or CPU atomic on a mapping, and
    /// there is nothing to complete (the OpenSHMEM layer's quiet relies on it).
    pub fn remote_ops_started(&self) -> u64 {
        self.ops_started.load(Ordering::Relaxed)
    }

    /// The *settled* word: true while every operation started on any context has completed
    /// and been reported, so that a quiet or fence of any context would only fence memory
    /// (one relaxed load; the OpenSHMEM layer keeps a pointer to it for the fast path of
    /// `shmem_quiet` and `shmem_fence`). It turns true at a [`Node::quiet`] that finds the
    /// whole remote path idle, and false when an operation starts (both under the remote
    /// path's lock, so an operation that happens before the reader's load is never missed).
    pub fn settled_word(&self) -> &AtomicBool {
        &self.settled
    }
}

impl Drop for Node {
    /// The verbs path's queue pairs and memory registrations go before the segments they
    /// cover are unmapped: the fields drop after this in declaration order (the mappings
    /// first), and the progress keeper may still hold `pulse`. Without this a late packet
    /// could be executed into memory that is no longer mapped.
    // Without the cargo feature `verbs` the path is an empty type with nothing to drop.
    #[allow(clippy::drop_non_drop)]
    fn drop(&mut self) {
        crate::watch::detach(self.watch_token);
        drop(self.pulse.lock().verbs.take());
    }
}
