//! The service's event loop: run, one turn (serve, control, sweeps), the poll over every
//! descriptor, and the cleanup at the end.

use gsas_core::reliable::RefusalReason;
use gsas_transport::poll::monotonic_ns;
use gsas_transport::udp::UdpTransport;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{
    BLOCK_IDLE, BLOCK_TIMERS, CONTROL_EVERY, Core, LOGGED_REFUSALS, SWEEP_EVERY, ServiceError,
    SignalFd,
};

impl Core {
    pub(crate) fn run(&mut self) -> Result<(), ServiceError> {
        let slice = u64::try_from(self.cfg.sched_slice.as_micros()).unwrap_or(u64::MAX);
        gsas_transport::config::apply_sched_slice(slice, &self.cfg.name);
        let result = self.run_loop();
        self.cleanup();
        result
    }

    pub(super) fn run_loop(&mut self) -> Result<(), ServiceError> {
        let mut last_activity = Instant::now();
        let mut last_control = Instant::now();
        let mut yields = 0;
        loop {
            if self.wake.flag.load(Ordering::Acquire) {
                log::info!("{}: shutting down", self.cfg.name);
                return Ok(());
            }
            if self.last_sweep.elapsed() >= SWEEP_EVERY {
                self.sweep_peers();
                self.sweep_lingering();
            }
            let busy = self.step()?;
            let now = Instant::now();
            if busy {
                last_activity = now;
                yields = 0;
            }
            // On a crowded machine an idle service blocks at once: its spin would keep a
            // PE off the CPU, and a blocked service that a datagram wakes preempts.
            let crowded = !busy && gsas_transport::poll::oversubscribed();
            if busy || (now.duration_since(last_activity) < self.cfg.spin && !crowded) {
                if now.duration_since(last_control) >= CONTROL_EVERY {
                    self.poll_descriptors(Duration::ZERO)?;
                    last_control = Instant::now();
                }
                if !busy {
                    gsas_transport::poll::spin_pause(now.duration_since(last_activity));
                }
                continue;
            }
            if yields < 4 && !crowded {
                yields += 1;
                std::thread::yield_now();
                continue;
            }
            // Tell ring users we may sleep, then look at the rings once more (the PE side
            // stores its packet, fences, and reads this word; we store, fence, and read the
            // ring: one of the two sees the other).
            self.doorbell.word().store(1, Ordering::Relaxed);
            atomic::fence(Ordering::SeqCst);
            if self.rings.iter().any(|r| r.ring.has_pending()) {
                self.doorbell.word().store(0, Ordering::Relaxed);
                continue;
            }
            if self.net.inner().work_pending() {
                // An Exanet pull in progress: its completion raises no interrupt.
                self.doorbell.word().store(0, Ordering::Relaxed);
                std::thread::yield_now();
                continue;
            }
            let bound = self.block_bound();
            let woke = self.poll_descriptors(bound)?;
            self.doorbell.word().store(0, Ordering::Relaxed);
            last_control = Instant::now();
            if woke {
                last_activity = last_control;
                yields = 0;
            }
        }
    }

    /// How long the loop may block in `poll(2)`: [`BLOCK_TIMERS`] while replies wait for
    /// room, until the network layer's next timer while its frames are in flight (at
    /// least [`BLOCK_TIMERS`], at most [`BLOCK_IDLE`]), [`BLOCK_IDLE`] otherwise. A reply
    /// retransmitted with backoff to a PE that left (its job's peers linger) then costs a
    /// wakeup per retransmission, not one per millisecond until the deadline.
    pub(super) fn block_bound(&self) -> Duration {
        if !self.net_pending.is_empty() || self.rings.iter().any(|r| !r.pending.is_empty()) {
            return BLOCK_TIMERS;
        }
        match self.net.next_timer() {
            Some(at) => Duration::from_nanos(at.saturating_sub(monotonic_ns()))
                .clamp(BLOCK_TIMERS, BLOCK_IDLE),
            None if self.net.has_frames_in_use() => BLOCK_TIMERS,
            None => BLOCK_IDLE,
        }
    }

    /// Frees the slots of network peers that fell silent: idle (nothing in flight or
    /// owed) and not heard from for twice the deadline. A peer that comes back is
    /// admitted again (its job permitting) and continues where it was.
    pub(super) fn sweep_peers(&mut self) {
        self.last_sweep = Instant::now();
        let silence =
            u64::try_from(self.cfg.deadline.as_nanos().saturating_mul(2)).unwrap_or(u64::MAX);
        let freed = self.net.release_silent(silence, |_| true);
        if freed > 0 {
            log::debug!(
                "{}: freed {freed} network peers silent for {:.1} s ({} of {} in use)",
                self.cfg.name,
                silence as f64 / 1e9,
                self.net.index().len(),
                self.net.peer_capacity()
            );
        }
    }

    /// Logs what the network layer refused since the last call: the first few of each
    /// kind (an unknown job key; a full job share, table or host share; a frame of a job
    /// that ended here, at info since it is no error of anyone's), then every power of
    /// two, so that a flood leaves a trace but not a flood of lines. Every refusal is
    /// counted either way.
    pub(super) fn log_refusals(&mut self) {
        let Some((peer, r)) = self.net.index_mut().take_refusal() else {
            return;
        };
        let kind = match r.reason {
            RefusalReason::UnknownJob => 0,
            RefusalReason::JobEnded | RefusalReason::JobReclaimed => 2,
            _ => 1,
        };
        self.refusals_logged[kind] += 1;
        let n = self.refusals_logged[kind];
        if n > LOGGED_REFUSALS && !n.is_power_of_two() {
            return;
        }
        let st = self.net.stats();
        if kind == 2 {
            // Not an error of this service: a frame of a job that ended here cleanly,
            // arriving after its peers stopped lingering (or one that never had a slot), or
            // of a job reclaimed here (its PE's end was logged already).
            let (how, so_far) = match r.reason {
                RefusalReason::JobReclaimed => ("was reclaimed", st.refused_job_reclaimed),
                _ => ("ended", st.refused_job_ended),
            };
            log::info!(
                "{}: network peer {} (job key {:#x}) sent a frame after its job {how} here; refused ({so_far} so far)",
                self.cfg.name,
                peer.addr,
                peer.key,
            );
            return;
        }
        if kind == 0 {
            log::warn!(
                "{}: refused network peer {} (job key {:#x}): {r}{} ({} frames refused for an unknown job so far)",
                self.cfg.name,
                peer.addr,
                peer.key,
                if self.fork.is_none() {
                    "; a remote FORK would be refused anyway: it is not enabled on this service (defaults.fork_allowed)"
                } else {
                    ""
                },
                st.refused_unknown_job
            );
            return;
        }
        log::warn!(
            "{}: refused network peer {} (job key {:#x}): {r}; peer table {} of {} in use, {} jobs; refused so far: {} job full, {} table full, {} host full, {} unknown job",
            self.cfg.name,
            peer.addr,
            peer.key,
            self.net.index().len(),
            self.net.peer_capacity(),
            self.jobs.len(),
            st.refused_job_full,
            st.refused_table_full,
            st.refused_host_full,
            st.refused_unknown_job
        );
    }

    /// Waits at most `timeout` on every descriptor and handles what is ready. Returns
    /// whether anything was.
    pub(super) fn poll_descriptors(&mut self, timeout: Duration) -> Result<bool, ServiceError> {
        // While accepting is paused (out of descriptors, no spare left), the listener is
        // left out, so that its pending connection does not turn the loop into a spin.
        let listener = match self.accept_paused_until {
            Some(t) if Instant::now() < t => -1,
            _ => {
                self.accept_paused_until = None;
                self.listener.as_raw_fd()
            }
        };
        let mut fds = Vec::with_capacity(5 + self.conns.len());
        let mut push = |fd: i32, events: libc::c_short| {
            fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            })
        };
        push(self.wake.event.as_fd().as_raw_fd(), libc::POLLIN);
        push(listener, libc::POLLIN);
        let udp = self.net.inner().udp();
        let mut udp_events = libc::POLLIN;
        if udp.is_some_and(UdpTransport::wants_write) {
            udp_events |= libc::POLLOUT;
        }
        push(udp.map_or(-1, AsRawFd::as_raw_fd), udp_events);
        push(self.doorbell.event.as_fd().as_raw_fd(), libc::POLLIN);
        push(
            self.signals.as_ref().map_or(-1, SignalFd::raw_fd),
            libc::POLLIN,
        );
        let wake_at = fds.len();
        let timeout = match &mut self.wake_line {
            Some(line) => {
                line.arm();
                match line.fd() {
                    Some(fd) => {
                        fds.push(libc::pollfd {
                            fd: fd.as_raw_fd(),
                            events: libc::POLLIN,
                            revents: 0,
                        });
                        timeout
                    }
                    None => {
                        fds.push(libc::pollfd {
                            fd: -1,
                            events: 0,
                            revents: 0,
                        });
                        timeout.min(gsas_transport::exanet::POLL_FALLBACK)
                    }
                }
            }
            None => timeout,
        };
        let first_conn = fds.len();
        let mut owners = Vec::with_capacity(self.conns.len());
        for (i, c) in self.conns.iter().enumerate() {
            if let Some(c) = c {
                fds.push(libc::pollfd {
                    fd: c.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                owners.push(i);
            }
        }
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a valid array of pollfd for the kernel to update; every
        // descriptor in it is owned by `self` and stays open during the call (-1 entries
        // are ignored by poll).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(ServiceError::Io {
                context: "poll(2) in the service loop".into(),
                source: e,
            });
        }
        if n == 0 {
            return Ok(false);
        }
        if fds[0].revents != 0 {
            self.wake.event.drain();
        }
        if fds[3].revents != 0 {
            self.doorbell.event.drain();
        }
        if let Some(line) = &mut self.wake_line {
            if fds.get(wake_at).is_some_and(|f| f.revents != 0) {
                line.drain();
            }
        }
        if fds[4].revents != 0 {
            if let Some(Ok(Some(sig))) = self.signals.as_ref().map(SignalFd::read) {
                log::info!(
                    "{}: received {}",
                    self.cfg.name,
                    gsas_sys::process::describe_signal(sig)
                );
                self.wake.flag.store(true, Ordering::Release);
            }
        }
        for (k, &i) in owners.iter().enumerate() {
            if fds[first_conn + k].revents != 0 {
                self.serve_conn(i);
            }
        }
        if fds[1].revents != 0 {
            self.accept_all();
        }
        Ok(true)
    }

    pub(super) fn cleanup(&mut self) {
        let keys: Vec<u64> = self.jobs.keys().copied().collect();
        for key in keys {
            self.drop_job(key, "the service stopped".into());
        }
        self.conns.clear();
        if let Err(e) = std::fs::remove_file(&self.cfg.socket_path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!(
                    "{}: removing {}: {e}",
                    self.cfg.name,
                    self.cfg.socket_path.display()
                );
            }
        }
    }
}
