//! The remote path's machinery: bounded waits that drive progress, and the start,
//! completion and bookkeeping of one operation through a service (the `Route` matches).

use super::error::NodeError;
use super::remote::{OpDesc, Record, Remote, Route, Target};
use gsas_core::client::{ClientError, Issued};
use gsas_transport::poll::{PollFd, Progress, WaitConfig, WaitStats, Waiter, monotonic_ns};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Node;

impl Node {
    /// Waits until `step` returns a value, driving progress on the remote path in between.
    pub(super) fn wait_for<R>(
        &self,
        what: &dyn std::fmt::Display,
        limit: Duration,
        step: impl FnMut(&mut Remote) -> Result<Option<R>, NodeError>,
    ) -> Result<R, NodeError> {
        self.wait_with(self.wait, what, limit, step).0
    }

    /// [`Node::wait_for`] for a reply from another node's service (a blocking operation's
    /// result, the completions `quiet` waits for): spins as [`spin::ReplySpin`] advises
    /// and tells it how the wait went.
    pub(super) fn wait_reply<R>(
        &self,
        what: &dyn std::fmt::Display,
        limit: Duration,
        mut step: impl FnMut(&mut Remote) -> Result<Option<R>, NodeError>,
    ) -> Result<R, NodeError> {
        let plan = self.reply_spin.plan(self.wait);
        let mut looks = 0u32;
        let (r, stats) = self.wait_with(plan.config, what, limit, |remote| {
            looks = looks.saturating_add(1);
            step(remote)
        });
        self.reply_spin.record(plan, stats, looks > 1);
        r
    }

    /// [`Node::wait_for`] with the waiter configuration `config`; also returns the
    /// waiter's counters.
    pub(super) fn wait_with<R>(
        &self,
        config: WaitConfig,
        what: &dyn std::fmt::Display,
        limit: Duration,
        mut step: impl FnMut(&mut Remote) -> Result<Option<R>, NodeError>,
    ) -> (Result<R, NodeError>, WaitStats) {
        let mut waiter = Waiter::new(config);
        let deadline = Instant::now() + limit;
        // What announces replies: the UDP socket, or the Exanet endpoint's interrupt line
        // (armed before each block). Without either (a closed line) the control socket
        // stands in (poll accepts a descriptor twice) and the bounded blocks poll.
        let line = self.exanet_wake.as_ref().filter(|w| w.usable());
        let wake = match (&self.udp_fd, line) {
            (Some(fd), _) => fd.as_fd(),
            (None, Some(w)) => w.fd.as_fd(),
            (None, None) => self.control_fd.as_fd(),
        };
        let mut fds = [
            PollFd::readable(wake),
            PollFd::readable(self.control_fd.as_fd()),
        ];
        let mut arm_line = || {
            if let Some(w) = line {
                w.arm();
            }
        };
        let arm: Option<&mut dyn FnMut()> = match line {
            Some(_) => Some(&mut arm_line),
            None => None,
        };
        let mut failure = None;
        let mut watch = crate::watch::Watch::new(None, deadline - limit);
        let got = waiter.wait_armed(what, deadline, &mut fds, arm, || {
            let mut remote = self.pulse.lock();
            let activity = match self.drive(&mut remote) {
                Ok(a) => a,
                Err(e) => {
                    failure = Some(e);
                    return Progress::Done(None);
                }
            };
            match step(&mut remote) {
                Ok(Some(v)) => Progress::Done(Some(v)),
                Err(e) => {
                    failure = Some(e);
                    Progress::Done(None)
                }
                Ok(None) if activity => Progress::Busy,
                Ok(None) => {
                    drop(remote);
                    // The watchdog saw the control connection close (crate::watch).
                    if watch.idle(what).is_err() {
                        failure = Some(self.service_gone());
                        return Progress::Done(None);
                    }
                    Progress::Idle(None)
                }
            }
        });
        let stats = waiter.stats();
        let r = match got {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(failure
                .unwrap_or_else(|| NodeError::Transport("wait ended without a result".into()))),
            Err(gsas_transport::poll::WaitError::TimedOut { what, waited }) => {
                if gsas_sys::socket::peer_closed(self.control_fd.as_fd()) {
                    Err(NodeError::ServiceGone {
                        path: self.service_path.clone(),
                    })
                } else {
                    Err(NodeError::Timeout { what, waited })
                }
            }
            Err(gsas_transport::poll::WaitError::Poll(e)) => {
                Err(NodeError::Transport(format!("poll: {e}")))
            }
        };
        (r, stats)
    }

    /// How long an operation may wait in total: the reliability deadline plus a margin, so
    /// that the layer's own, more precise error comes first.
    pub(super) fn op_limit(&self) -> Duration {
        self.deadline + self.deadline / 2 + Duration::from_secs(1)
    }

    /// The error of a wait that found the local service gone.
    pub fn service_gone(&self) -> NodeError {
        NodeError::ServiceGone {
            path: self.service_path.clone(),
        }
    }

    /// Checks that the local service still holds the control connection.
    ///
    /// Errors: [`NodeError::ServiceGone`] when it closed it (the service stopped or died).
    pub fn check_service(&self) -> Result<(), NodeError> {
        if gsas_sys::socket::peer_closed(self.control_fd.as_fd()) {
            Err(NodeError::ServiceGone {
                path: self.service_path.clone(),
            })
        } else {
            Ok(())
        }
    }

    /// One round of progress on the remote path (timers, open frames sent, replies
    /// received), published for the progress keeper.
    pub(super) fn drive(&self, remote: &mut Remote) -> Result<bool, NodeError> {
        let r = remote.progress();
        self.pulse.driven(remote, monotonic_ns());
        r
    }

    /// Makes progress on the remote path once without waiting: sends what earlier
    /// non-blocking operations left in open frames, retransmits what is due, receives and
    /// matches replies, sends acknowledgements that are due.
    pub fn progress(&self) -> Result<(), NodeError> {
        self.drive(&mut self.pulse.lock()).map(|_| ())
    }

    /// [`Node::progress`] if the remote path has anything in flight (operations
    /// outstanding, frames not yet acknowledged, acknowledgements possibly owed); otherwise
    /// it returns after one atomic load. For loops that wait for memory to change
    /// (`shmem_test`, `shmem_wait_until`): they keep this PE's own operations moving at
    /// the cost of one round of progress per call while something is in flight.
    #[inline]
    pub fn poke(&self) -> Result<(), NodeError> {
        if self.pulse.pending() {
            self.progress()
        } else {
            Ok(())
        }
    }

    /// Whether PEs of other nodes write into this PE's memory without its service (RDMA
    /// over verbs: the HCA, or the software device, applies them and no bell rings), so
    /// that a sleep on [`Node::bell`] is not ended by their updates and should be short.
    #[inline]
    pub fn unbelled_updates(&self) -> bool {
        self.unbelled
    }

    /// This PE's doorbell: the service rings it after applying an update that arrived
    /// from another node (or over the PE ring) to this PE's memory. Hand it to
    /// [`Waiter::wait_bell`](gsas_transport::poll::Waiter::wait_bell) when waiting for memory to
    /// change, so that the waiter's sleeps end when such an update lands instead of after
    /// their bounded step. Stores of same-node PEs made directly into this PE's mappings
    /// do not ring it. `None` when the service had no free slot (then waits sleep their
    /// bounded steps as without a bell).
    #[inline]
    pub fn bell(&self) -> Option<&gsas_transport::bell::Bell> {
        self.bell.as_ref().map(gsas_transport::bell::BellRef::bell)
    }

    /// Starts an operation through the engine of `route`; returns the record index.
    ///
    /// The operation is tried once under the lock; when the operation table or the
    /// transport is full, the call waits (with progress) for room. With `send_now`
    /// (blocking operations) one round of progress follows, which sends the frame holding
    /// the operation and receives the replies that arrived meanwhile. Without it
    /// (non-blocking operations) the operation stays in its open frame, to be joined by
    /// later ones, until the frame is full or the next round of progress (a blocking
    /// operation, a wait or test, `quiet`, or the progress keeper within a tick).
    pub(super) fn start(
        &self,
        route: Route,
        record: Record,
        send_now: bool,
        op: impl Fn(&mut Remote, u64) -> Result<Option<Issued>, ClientError>,
    ) -> Result<(usize, Issued), NodeError> {
        let desc = record.desc;
        let node = record.node;
        // Writes this PE sent to the same PE outside the node come first.
        self.complete_outside(Some(desc.pe))?;
        let index;
        {
            let mut remote = self.pulse.lock();
            if let Some(v) = remote.verbs.as_mut() {
                v.before_service()?;
            }
            index = remote.book.insert(record);
            if !send_now && remote.crowded() {
                if let Err(e) = self.drive(&mut remote) {
                    remote.book.remove(index);
                    return Err(e);
                }
            }
            if matches!(route, Route::Net(_)) {
                remote.set_clock();
            }
            match op(&mut remote, index as u64) {
                Ok(Some(issued)) => {
                    set_handle(&mut remote, index, issued);
                    return self.started(&mut remote, route, index, issued, send_now);
                }
                Ok(None) => {}
                Err(e) => {
                    let err = self.client_error(&remote, route, node, &desc, e);
                    remote.book.remove(index);
                    return Err(err);
                }
            }
        }
        let outcome = self.wait_for(
            &format_args!("room to start the {desc}"),
            self.op_limit(),
            |remote| match op(remote, index as u64) {
                Ok(Some(issued)) => {
                    // Under the same lock: a reply may complete the operation as soon as
                    // the lock is released.
                    set_handle(remote, index, issued);
                    Ok(Some(issued))
                }
                Ok(None) => Ok(None),
                Err(e) => Err(self.client_error(remote, route, node, &desc, e)),
            },
        );
        match outcome {
            Ok(issued) => self.started(&mut self.pulse.lock(), route, index, issued, send_now),
            Err(e) => {
                self.pulse.lock().book.remove(index);
                Err(e)
            }
        }
    }

    /// The bookkeeping after operation `index` started and got its handle (see
    /// [`Node::start`]).
    pub(super) fn started(
        &self,
        remote: &mut Remote,
        route: Route,
        index: usize,
        issued: Issued,
        send_now: bool,
    ) -> Result<(usize, Issued), NodeError> {
        if route == Route::Ring {
            remote.ring_doorbell();
        }
        self.ops_started.fetch_add(1, Ordering::Relaxed);
        // Under the remote path's lock (`remote`): see `Node::settled_word`.
        self.settled.store(false, Ordering::Relaxed);
        self.pulse.mark_pending(!send_now);
        if send_now {
            if let Err(e) = self.drive(remote) {
                abandon(remote, index);
                return Err(e);
            }
        }
        Ok((index, issued))
    }

    pub(super) fn client_error(
        &self,
        remote: &Remote,
        route: Route,
        node: u16,
        desc: &OpDesc,
        e: ClientError,
    ) -> NodeError {
        match (e, route) {
            (
                ClientError::Transport(gsas_core::transport::TransportError::Unreachable),
                Route::Net(p),
            ) => remote.book.peer_error(node, p.addr),
            (e, _) => NodeError::Transport(format!("{desc}: {e}")),
        }
    }

    /// Waits for the blocking record `index` and returns its result.
    pub(super) fn finish(&self, index: usize, desc: &OpDesc) -> Result<Option<u64>, NodeError> {
        let r = self.wait_reply(&format_args!("the {desc}"), self.op_limit(), |remote| {
            let done = remote.book.get(index).is_some_and(|r| r.result.is_some());
            if !done {
                return Ok(None);
            }
            let rec = remote.book.remove(index).expect("present");
            Ok(Some(match rec.result.expect("checked above") {
                Ok(v) => Ok(v),
                Err(e) => Err(remote.book.op_error(&rec, e)),
            }))
        });
        match r {
            Ok(v) => v,
            Err(e) => {
                abandon(&mut self.pulse.lock(), index);
                Err(e)
            }
        }
    }

    pub(super) fn record(
        &self,
        ctx: usize,
        route: Route,
        pe: u32,
        desc: OpDesc,
        blocking: bool,
        target: Target,
    ) -> Record {
        Record {
            ctx,
            route,
            node: self.node_of[pe as usize],
            desc,
            blocking,
            abandoned: false,
            target,
            handle: None,
            result: None,
        }
    }
}

/// Records the engine's handle of the operation that record `index` stands for.
pub(super) fn set_handle(remote: &mut Remote, index: usize, issued: Issued) {
    if let Some(rec) = remote.book.get_mut(index) {
        rec.handle = Some(issued.handle);
    }
}

/// Makes the blocking record `index`, whose caller stops waiting, free itself when the
/// engine completes or aborts the operation (or frees it now if it already completed); late
/// data then goes nowhere.
pub(super) fn abandon(remote: &mut Remote, index: usize) {
    if remote.book.get(index).is_some_and(|r| r.result.is_some()) {
        // It completed meanwhile: nobody will take the result.
        remote.book.remove(index);
    } else if let Some(rec) = remote.book.get_mut(index) {
        rec.blocking = false;
        rec.abandoned = true;
        if let Target::Read { .. } = rec.target {
            // The caller's buffer is going away: late data must not land there.
            rec.target = Target::Write { payload: None };
        }
        if let Target::Atomic { dest, .. } = &mut rec.target {
            *dest = None;
        }
    }
}
