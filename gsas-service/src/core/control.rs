//! The control protocol: accepting and serving control connections (join, leave, segments,
//! stats) and the replies.

use gsas_core::wire::ErrorCode;
use gsas_transport::shm::{ShmError, recv_fds, send_fds};
use gsas_transport::udp::UdpTransport;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use super::{
    Allocation, CONTROL_SEND_TIMEOUT, Conn, ConnState, ControlReply, ControlRequest, Core,
    ExanetInfo, Gauges, Job, JoinInfo, MAX_MESSAGE, Outcome, Pe, PeerCred, ServiceInfo, UidPolicy,
    job_share, show, socket,
};

/// How long the listener rests when the service is out of descriptors and has no spare.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// At most one warning about refusals for lack of descriptors per this time.
const FD_WARN_EVERY: Duration = Duration::from_secs(10);

/// Opens the spare descriptor (`/dev/null`), or `None` when even that fails.
pub(super) fn spare_descriptor() -> Option<OwnedFd> {
    std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
}

impl Core {
    pub(super) fn accept_all(&mut self) {
        loop {
            match socket::accept(self.listener.as_fd()) {
                Ok(Some(fd)) => {
                    let cred = match socket::peer_cred(fd.as_fd()) {
                        Ok(c) => c,
                        Err(e) => {
                            log::warn!("{}: reading peer credentials: {e}", self.cfg.name);
                            continue;
                        }
                    };
                    if self.cfg.uid_policy == UidPolicy::SameUser
                        && cred.uid != self.uid
                        && cred.uid != 0
                    {
                        self.counters.uid_refused += 1;
                        log::warn!(
                            "{}: connection from pid {} uid {} refused (this service serves uid {} only)",
                            self.cfg.name,
                            cred.pid,
                            cred.uid,
                            self.uid
                        );
                        continue;
                    }
                    if let Some(shares) = self.cfg.user_shares() {
                        let open = self
                            .conns
                            .iter()
                            .flatten()
                            .filter(|c| c.cred.uid == cred.uid)
                            .count();
                        if open >= shares.connections {
                            self.refuse_connection(
                                fd,
                                &format!(
                                    "uid {} ({}) has {open} control connections open to {}, its \
                                     share (its PE share + {}); close some or end jobs",
                                    cred.uid,
                                    gsas_sys::socket::user_name(cred.uid),
                                    self.cfg.name,
                                    crate::CONNECTION_SLACK
                                ),
                            );
                            self.counters.user_refused += 1;
                            continue;
                        }
                    }
                    self.counters.connections += 1;
                    log::debug!(
                        "{}: connection from pid {} uid {} gid {}",
                        self.cfg.name,
                        cred.pid,
                        cred.uid,
                        cred.gid
                    );
                    let conn = Conn {
                        fd,
                        cred,
                        state: ConnState::Fresh,
                    };
                    match self.conns.iter().position(Option::is_none) {
                        Some(i) => self.conns[i] = Some(conn),
                        None => self.conns.push(Some(conn)),
                    }
                }
                Ok(None) => return,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    if !self.refuse_without_descriptors(&e) {
                        return;
                    }
                }
                Err(e) => {
                    log::warn!("{}: accept: {e}", self.cfg.name);
                    return;
                }
            }
        }
    }

    /// `accept` failed for lack of descriptors (`e`: EMFILE for this process, ENFILE for
    /// the system). The pending connection would keep the listener readable and the loop
    /// spinning, so it is taken with the spare descriptor, told why, and closed; the spare
    /// is opened again. Without a spare (another descriptor took its place) the listener is
    /// left out of the poll set for [`ACCEPT_PAUSE`]. One warning per
    /// [`FD_WARN_EVERY`], with the count of refusals. Returns whether to go on accepting.
    fn refuse_without_descriptors(&mut self, e: &std::io::Error) -> bool {
        // accept(2) fails with EMFILE before it looks at the queue: with the spare closed
        // it either takes a pending connection or says there is none.
        let accepted = match self.spare_fd.take() {
            Some(spare) => {
                drop(spare);
                socket::accept(self.listener.as_fd())
            }
            None => Ok(None),
        };
        let Ok(Some(fd)) = accepted else {
            self.reserve_spare();
            return false;
        };
        let limit = gsas_sys::process::nofile_limit()
            .map_or_else(|_| "unknown".to_string(), |(soft, _)| soft.to_string());
        let why = format!(
            "{} is out of file descriptors ({e}; RLIMIT_NOFILE soft limit {limit}); raise \
             its limit (LimitNOFILE= in its systemd unit, ulimit -n) or end jobs on this node",
            self.cfg.name
        );
        // Closed before the spare is opened again: the spare takes its place.
        self.refuse_connection(fd, &why);
        self.reserve_spare();
        self.counters.fd_refused += 1;
        self.fd_refusals.0 += 1;
        let now = Instant::now();
        if self
            .fd_refusals
            .1
            .is_none_or(|t| now.duration_since(t) >= FD_WARN_EVERY)
        {
            log::warn!(
                "{}: out of file descriptors ({e}; RLIMIT_NOFILE soft limit {limit}): \
                 refused {} control connection(s) since the last such warning; raise the \
                 limit (LimitNOFILE= in the unit, ulimit -n)",
                self.cfg.name,
                self.fd_refusals.0
            );
            self.fd_refusals = (0, Some(now));
        }
        self.spare_fd.is_some()
    }

    /// Tells the client of a connection that it is refused (`why`: an error reply of token
    /// 0, which no request of a client carries, so `gsas_control::ControlClient` reports it as a
    /// refusal whatever it asked), and closes it.
    fn refuse_connection(&self, fd: OwnedFd, why: &str) {
        let mut buf = [0u8; MAX_MESSAGE];
        let reply = ControlReply::Error {
            code: ErrorCode::Busy,
            message: why,
        };
        let n = reply.emit(0, &mut buf);
        let _ = send_fds(&fd, &buf[..n], &[], Duration::ZERO);
    }

    /// Opens the spare descriptor again; without one, pauses accepting ([`ACCEPT_PAUSE`]).
    fn reserve_spare(&mut self) {
        self.spare_fd = spare_descriptor();
        if self.spare_fd.is_none() {
            self.accept_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
        }
    }

    /// Handles the messages waiting on connection `i`.
    pub(super) fn serve_conn(&mut self, i: usize) {
        for _ in 0..16 {
            let Some(conn) = self.conns.get(i).and_then(Option::as_ref) else {
                return;
            };
            let received = recv_fds(&conn.fd, &mut self.msg, Duration::ZERO);
            let (n, stray) = match received {
                Ok(x) => x,
                Err(ShmError::TimedOut { .. }) => return,
                Err(ShmError::Closed { .. }) => {
                    self.close_conn(i, true);
                    return;
                }
                Err(e @ (ShmError::MessageTruncated { .. } | ShmError::FdsTruncated { .. })) => {
                    self.counters.messages += 1;
                    self.counters.refused += 1;
                    let msg = e.to_string();
                    // The request's own token (its first bytes arrived), so that the
                    // client takes this for the answer to it, not for a refusal of the
                    // connection (token 0).
                    let token = gsas_core::wire::peek_token(&self.msg);
                    self.reply(
                        i,
                        token,
                        ControlReply::Error {
                            code: ErrorCode::Malformed,
                            message: &msg,
                        },
                        &[],
                    );
                    continue;
                }
                Err(e) => {
                    log::warn!("{}: receiving on a control connection: {e}", self.cfg.name);
                    self.close_conn(i, true);
                    return;
                }
            };
            self.counters.messages += 1;
            let bytes = self.msg[..n].to_vec();
            let parsed = ControlRequest::parse(&bytes);
            let wants_fd = matches!(parsed, Ok((_, ControlRequest::RegisterSegment { .. })));
            let mut attached = stray;
            if !wants_fd && !attached.is_empty() {
                log::warn!(
                    "{}: pid {} sent {} descriptors with a control message; closed them",
                    self.cfg.name,
                    conn.cred.pid,
                    attached.len()
                );
                attached.clear();
            }
            let (token, outcome) = match parsed {
                Ok((token, req)) => (token, self.handle(i, req, attached)),
                Err(e) => (
                    gsas_core::wire::peek_token(&bytes),
                    Err((e.code(), e.to_string())),
                ),
            };
            match outcome {
                Ok(Outcome::Ack) => self.reply(i, token, ControlReply::Ack, &[]),
                Ok(Outcome::Data(d, fds)) => {
                    let borrowed: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
                    self.reply(i, token, ControlReply::Data(&d), &borrowed)
                }
                Ok(Outcome::Stats(text)) => self.reply(i, token, ControlReply::Stats(&text), &[]),
                Ok(Outcome::Segments(b, fds)) => {
                    let borrowed: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
                    self.reply(i, token, ControlReply::Segments(&b), &borrowed)
                }
                Err((code, message)) => {
                    self.counters.refused += 1;
                    log::debug!("{}: refused a control request: {message}", self.cfg.name);
                    self.reply(
                        i,
                        token,
                        ControlReply::Error {
                            code,
                            message: &message,
                        },
                        &[],
                    )
                }
            }
        }
    }

    /// Sends a reply on connection `i`; closes it if that fails.
    pub(super) fn reply(
        &mut self,
        i: usize,
        token: u32,
        reply: ControlReply<'_>,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) {
        let mut buf = [0u8; MAX_MESSAGE];
        let n = reply.emit(token, &mut buf);
        let Some(conn) = self.conns.get(i).and_then(Option::as_ref) else {
            return;
        };
        if let Err(e) = send_fds(&conn.fd, &buf[..n], fds, CONTROL_SEND_TIMEOUT) {
            log::warn!(
                "{}: replying to pid {}: {e}; closing the connection",
                self.cfg.name,
                conn.cred.pid
            );
            self.close_conn(i, true);
        }
    }

    /// Closes connection `i`. `eof`: it ended without Leave, so a joined PE died.
    pub(super) fn close_conn(&mut self, i: usize, eof: bool) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::take) else {
            return;
        };
        if let (true, ConnState::Joined { key, rank }) = (eof, conn.state) {
            let Some(job) = self.jobs.get(&key) else {
                return;
            };
            let reason = format!(
                "PE {rank} (pid {}) of job {:016x} closed its control connection without Leave",
                conn.cred.pid, job.id
            );
            let level = if self.cfg.quiet_reclaims {
                log::Level::Info
            } else {
                log::Level::Warn
            };
            log::log!(level, "{}: {reason}; reclaiming the job", self.cfg.name);
            self.counters.jobs_reclaimed += 1;
            self.drop_job(key, reason);
        }
    }

    pub(super) fn handle(
        &mut self,
        i: usize,
        req: ControlRequest,
        mut attached: Vec<OwnedFd>,
    ) -> Result<Outcome, (ErrorCode, String)> {
        let (state, cred) = match self.conns.get(i).and_then(Option::as_ref) {
            Some(c) => (c.state, c.cred),
            None => return Err((ErrorCode::HostFailure, "connection gone".into())),
        };
        match req {
            ControlRequest::Ping => Ok(Outcome::Ack),
            ControlRequest::Stats => Ok(Outcome::Stats(self.stats_text())),
            ControlRequest::Declare {
                id,
                uid,
                pes,
                job_pes,
                memory,
            } => {
                self.may_allocate(cred, "declare")?;
                let a = Allocation {
                    uid,
                    pes,
                    job_pes,
                    memory,
                };
                log::info!(
                    "{}: allocation {id} for uid {uid} ({}): {pes} PEs here, jobs of {} PEs, {} of memory",
                    self.cfg.name,
                    gsas_sys::socket::user_name(uid),
                    if job_pes == 0 {
                        "any".to_string()
                    } else {
                        job_pes.to_string()
                    },
                    if memory == 0 {
                        "the per-user share".to_string()
                    } else {
                        show(memory)
                    }
                );
                self.allocations.insert(id, a);
                Ok(Outcome::Ack)
            }
            ControlRequest::Undeclare { id } => {
                self.may_allocate(cred, "end")?;
                // Running PEs go on; an unknown id is fine (an epilog may run twice).
                if let Some(a) = self.allocations.remove(&id) {
                    log::info!("{}: allocation {id} of uid {} ended", self.cfg.name, a.uid);
                }
                Ok(Outcome::Ack)
            }
            ControlRequest::Join {
                rank,
                job_id,
                job_key,
                info,
            } => {
                if state != ConnState::Fresh {
                    return Err((
                        ErrorCode::NotSupported,
                        "this connection has joined already".into(),
                    ));
                }
                self.join(i, cred, rank, job_id, job_key, info)
            }
            _ => {
                let (key, rank) = match state {
                    ConnState::Joined { key, rank } => (key, rank),
                    ConnState::Fresh => {
                        return Err((ErrorCode::NotSupported, "Join first".into()));
                    }
                    ConnState::Left => {
                        return Err((ErrorCode::NotSupported, "this PE has left its job".into()));
                    }
                };
                if !self.jobs.contains_key(&key) {
                    let reason = self
                        .tombstones
                        .iter()
                        .find(|(k, _)| *k == key)
                        .map_or("the job no longer exists".to_string(), |(_, r)| {
                            format!("the job was reclaimed: {r}")
                        });
                    return Err((ErrorCode::BadKey, reason));
                }
                match req {
                    ControlRequest::Leave { .. } => {
                        self.leave(i, key, rank);
                        Ok(Outcome::Ack)
                    }
                    ControlRequest::CreateSegment { pe, segment, size } => {
                        self.create_segment(key, rank, pe, segment, size)
                    }
                    ControlRequest::OpenSegment { pe, segment } => {
                        self.open_segment(key, pe, segment)
                    }
                    ControlRequest::OpenSegments { from } => self.open_segments(key, rank, from),
                    ControlRequest::FreeSegment { pe, segment } => {
                        self.free_segment(key, rank, pe, segment)
                    }
                    ControlRequest::RegisterSegment { pe, segment, size } => {
                        let fd = match (attached.pop(), attached.is_empty()) {
                            (Some(fd), true) => fd,
                            _ => {
                                return Err((
                                    ErrorCode::Malformed,
                                    "Register needs exactly one descriptor attached".into(),
                                ));
                            }
                        };
                        self.register_segment(key, rank, pe, segment, size, fd)
                    }
                    _ => Err((ErrorCode::NotSupported, "unexpected request".into())),
                }
            }
        }
    }

    pub(super) fn join(
        &mut self,
        i: usize,
        cred: PeerCred,
        rank: u16,
        job_id: u64,
        job_key: u64,
        info: JoinInfo,
    ) -> Result<Outcome, (ErrorCode, String)> {
        self.may_join(cred, rank, job_key, &info)?;
        self.job_to_join(cred, rank, job_id, job_key, &info)?;
        let bell = self.doorbell.take_bell();
        let job = self
            .jobs
            .get_mut(&job_key)
            .expect("inserted or found above");
        job.pes.insert(
            rank,
            Pe {
                conn: i,
                pid: cred.pid,
                left: false,
                segments: [None, None, None],
                bell,
            },
        );
        if let Some(Some(c)) = self.conns.get_mut(i) {
            c.state = ConnState::Joined { key: job_key, rank };
        }
        log::debug!(
            "{}: PE {rank} (pid {}) joined job {job_id:016x}",
            self.cfg.name,
            cred.pid
        );
        self.welcome(bell)
    }

    /// The checks of a Join that do not depend on its job: the node, the rank, the key,
    /// the service's PE limit and the user's allocation or share.
    fn may_join(
        &mut self,
        cred: PeerCred,
        rank: u16,
        job_key: u64,
        info: &JoinInfo,
    ) -> Result<(), (ErrorCode, String)> {
        if info.node != self.cfg.node {
            return Err((
                ErrorCode::NotSupported,
                format!(
                    "this service serves node {}, but PE {rank} believes it runs on node {}",
                    self.cfg.node, info.node
                ),
            ));
        }
        if info.npes == 0 || u32::from(rank) >= info.npes {
            return Err((
                ErrorCode::Malformed,
                format!("rank {rank} in a job of {} PEs", info.npes),
            ));
        }
        if job_key == 0 {
            return Err((ErrorCode::BadKey, "job key 0 is not allowed".into()));
        }
        let joined: usize = self.jobs.values().map(|j| j.pes.len()).sum();
        if joined >= self.cfg.max_pes {
            return Err((
                ErrorCode::Busy,
                format!(
                    "this service serves {} PEs already (its limit)",
                    self.cfg.max_pes
                ),
            ));
        }
        if let Some(bound) = self.allocated(cred.uid) {
            self.within_allocation(cred.uid, info.npes, bound)?;
        } else if let Some(shares) = self.cfg.user_shares() {
            let mine: usize = self
                .jobs
                .values()
                .filter(|j| j.uid == cred.uid)
                .map(|j| j.pes.len())
                .sum();
            if mine >= shares.pes {
                self.counters.user_refused += 1;
                return Err((
                    ErrorCode::Busy,
                    format!(
                        "uid {} ({}) has {mine} PEs on this node, its share ({}% of the \
                         service's {} PEs, shared by every user)",
                        cred.uid,
                        gsas_sys::socket::user_name(cred.uid),
                        self.cfg.user_share_percent.unwrap_or(100),
                        self.cfg.max_pes
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The job a Join joins: its running job (same id, same user, same size, the rank not
    /// taken yet), or a new one.
    fn job_to_join(
        &mut self,
        cred: PeerCred,
        rank: u16,
        job_id: u64,
        job_key: u64,
        info: &JoinInfo,
    ) -> Result<(), (ErrorCode, String)> {
        if let Some(job) = self.jobs.get(&job_key) {
            if job.id != job_id {
                return Err((
                    ErrorCode::BadKey,
                    "the job key belongs to another job".into(),
                ));
            }
            if job.uid != cred.uid && cred.uid != 0 {
                self.counters.uid_refused += 1;
                return Err((
                    ErrorCode::BadKey,
                    format!(
                        "job {job_id:016x} belongs to uid {}, not {}",
                        job.uid, cred.uid
                    ),
                ));
            }
            if job.npes != info.npes {
                return Err((
                    ErrorCode::Malformed,
                    format!("job {job_id:016x} has {} PEs, not {}", job.npes, info.npes),
                ));
            }
            if job.pes.contains_key(&rank) {
                return Err((
                    ErrorCode::Busy,
                    format!("PE {rank} of job {job_id:016x} has joined already"),
                ));
            }
        } else {
            if self.jobs.values().any(|j| j.id == job_id) {
                return Err((
                    ErrorCode::BadKey,
                    format!("job {job_id:016x} is running with another key"),
                ));
            }
            // An ended job of the same key may still linger: the new one starts afresh.
            self.release_lingering(job_key);
            let number = self.next_number;
            self.next_number = self.next_number.checked_add(1).unwrap_or(1);
            self.jobs.insert(
                job_key,
                Job {
                    id: job_id,
                    key: job_key,
                    number,
                    uid: cred.uid,
                    npes: info.npes,
                    pes: BTreeMap::new(),
                },
            );
            self.counters.jobs_started += 1;
            let share = job_share(info.npes, self.net.peer_capacity());
            self.net.index_mut().admit_job(job_key, share, cred.uid);
            log::info!(
                "{}: job {job_id:016x} started ({} PEs in total, uid {})",
                self.cfg.name,
                info.npes,
                cred.uid
            );
        }
        Ok(())
    }

    /// The answer to an accepted Join: the service's description (with the PE's doorbell
    /// slot `bell`), with the doorbell's page and eventfd.
    fn welcome(&self, bell: Option<u32>) -> Result<Outcome, (ErrorCode, String)> {
        let info = ServiceInfo {
            node: self.cfg.node,
            udp: self.udp_addr,
            pid: self.pid,
            udp_mtu: self.cfg.udp_mtu as u32,
            bell,
            exanet: self.cfg.exanet.as_ref().map(ExanetInfo::of),
        };
        let dup_failed = |e: String| {
            (
                ErrorCode::HostFailure,
                format!("duplicating the doorbell: {e}"),
            )
        };
        let page = self
            .doorbell
            .page
            .try_clone_fd()
            .map_err(|e| dup_failed(e.to_string()))?;
        let event = self
            .doorbell
            .event
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| dup_failed(e.to_string()))?;
        Ok(Outcome::Data(info.encode(), vec![page, event]))
    }

    /// Declare and Undeclare come from root (the resource manager) or the service's own
    /// user only.
    fn may_allocate(&mut self, cred: PeerCred, what: &str) -> Result<(), (ErrorCode, String)> {
        if cred.uid == 0 || cred.uid == self.uid {
            return Ok(());
        }
        self.counters.allocation_refused += 1;
        Err((
            ErrorCode::BadKey,
            format!(
                "only root (the resource manager) may {what} allocations on {}; uid {} ({}) may not",
                self.cfg.name,
                cred.uid,
                gsas_sys::socket::user_name(cred.uid)
            ),
        ))
    }

    /// What the allocations bind user `uid` to when they apply
    /// ([`ServiceConfig::require_allocation`], and not root or the service's own user):
    /// their PEs on this node, the largest job they allow (0: any), their memory (0 when
    /// one of them leaves it to the share), and their ids. `None`: the shares apply.
    pub(super) fn allocated(&self, uid: u32) -> Option<(u64, u32, u64, Vec<u64>)> {
        if !self.cfg.require_allocation || uid == 0 || uid == self.uid {
            return None;
        }
        let mut pes = 0u64;
        let mut job_pes = Some(0u32);
        let mut memory = Some(0u64);
        let mut ids = Vec::new();
        for (&id, a) in self.allocations.iter().filter(|(_, a)| a.uid == uid) {
            pes += u64::from(a.pes);
            job_pes = job_pes
                .zip((a.job_pes > 0).then_some(a.job_pes))
                .map(|(x, y)| x.max(y));
            memory = memory
                .zip((a.memory > 0).then_some(a.memory))
                .map(|(x, y)| x + y);
            ids.push(id);
        }
        ids.sort_unstable();
        Some((pes, job_pes.unwrap_or(0), memory.unwrap_or(0), ids))
    }

    /// Refuses a Join of user `uid` into a job of `npes` PEs beyond its allocations `bound`
    /// ([`Core::allocated`]).
    fn within_allocation(
        &mut self,
        uid: u32,
        npes: u32,
        bound: (u64, u32, u64, Vec<u64>),
    ) -> Result<(), (ErrorCode, String)> {
        let (pes, job_pes, _, ids) = bound;
        let who = format!("uid {uid} ({})", gsas_sys::socket::user_name(uid));
        let refused = if ids.is_empty() {
            Some(format!(
                "{who} has no allocation on {}: this node admits a user's PEs only under one \
                 that root declared (defaults.require_allocation; gsas-atomicd declare, \
                 e.g. from a Slurm prolog)",
                self.cfg.name
            ))
        } else {
            let mine: u64 = self
                .jobs
                .values()
                .filter(|j| j.uid == uid)
                .map(|j| j.pes.len() as u64)
                .sum();
            if mine >= pes {
                Some(format!(
                    "{who} has {mine} PEs on this node, as many as its allocation(s) {ids:?} allow"
                ))
            } else if job_pes > 0 && npes > job_pes {
                Some(format!(
                    "a job of {npes} PEs, but the allocation(s) {ids:?} of {who} allow jobs of at most {job_pes}"
                ))
            } else {
                None
            }
        };
        match refused {
            None => Ok(()),
            Some(why) => {
                self.counters.allocation_refused += 1;
                Err((ErrorCode::Busy, why))
            }
        }
    }

    pub(super) fn leave(&mut self, i: usize, key: u64, rank: u16) {
        if let Some(Some(c)) = self.conns.get_mut(i) {
            c.state = ConnState::Left;
        }
        let Some(job) = self.jobs.get_mut(&key) else {
            return;
        };
        if let Some(pe) = job.pes.get_mut(&rank) {
            pe.left = true;
        }
        log::debug!("{}: PE {rank} left job {:016x}", self.cfg.name, job.id);
        if job.pes.values().all(|p| p.left) {
            let reason = format!("job {:016x} ended (every PE left)", job.id);
            log::info!("{}: {reason}", self.cfg.name);
            self.counters.jobs_ended += 1;
            self.end_job(key, reason);
        }
    }

    pub(super) fn gauges(&self) -> Gauges {
        Gauges {
            jobs: self.jobs.len() as u64,
            pes: self
                .jobs
                .values()
                .map(|j| j.pes.values().filter(|p| !p.left).count() as u64)
                .sum(),
            segments: self.service.segments().len() as u64 + self.rings.len() as u64,
            memory: self.memory_used,
            connections: self.conns.iter().flatten().count() as u64,
            peers: self.net.index().len() as u64,
            host_peers: self.net.index().host_peers() as u64,
            lingering_peers: self.net.index().lingering_peers() as u64,
            lingering_jobs: self.lingering.len() as u64,
            replies_waiting: self.net_pending.len() as u64,
            paused_peers: self.paused.len() as u64,
            peer_limit: self.net.peer_capacity() as u64,
            memory_limit: self.memory_limit.0,
            allocations: self.allocations.len() as u64,
        }
    }

    pub(super) fn stats_text(&self) -> String {
        let mut text = crate::stats::render(
            self.service.stats(),
            &self.net.stats(),
            &self
                .net
                .inner()
                .udp()
                .map(UdpTransport::stats)
                .unwrap_or_default(),
            &self.counters,
            &self.gauges(),
        );
        if let Some(link) = self.net.inner().exanet() {
            let st = link.stats();
            for (name, value) in [
                ("exanet.small_sent", st.small_sent),
                ("exanet.bulk_sent", st.bulk_sent),
                ("exanet.delivered", st.delivered),
                ("exanet.pull_errors", st.pull_errors),
                ("exanet.failures", st.failures),
                ("exanet.foreign_dropped", link.dropped()),
                ("exanet.pio_sent", link.pio_counts().0),
                ("exanet.pio_received", link.pio_counts().1),
                ("exanet.pio_duplicates", link.pio_duplicates()),
                ("exanet.pio_late", link.pio_late()),
            ] {
                text.push_str(&format!("{name} {value}\n"));
            }
        }
        if let Some(handler) = &self.fork {
            for (name, value) in handler.counters() {
                text.push_str(&format!("{name} {value}\n"));
            }
        }
        text
    }
}
