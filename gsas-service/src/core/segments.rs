//! The segment registry: creating, installing, registering, opening and freeing segments,
//! the per-job and per-user limits, and the end of a job: dropping it with its segments and
//! peers, or, when it ended cleanly, keeping its peers closed for a while (TIME_WAIT).

use gsas_control::proto::{SegmentBatch, SegmentEntry};
use gsas_core::reliable::RefusalReason;
use gsas_core::service::{PortQueue, Segment as ServiceSegment};
use gsas_core::wire::ErrorCode;
use gsas_transport::shm::{MAX_FDS, Segment, ShmError};
use gsas_transport::shmring::{RingConfig, ShmRing};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use super::{
    Core, LINGERING_JOBS, MAX_RING_BYTES, MAX_SEGMENT, MAX_SYNC, Outcome, RingPort, SEG_DATA,
    SEG_HEAP, SEG_RING, SEG_SYNC, SEGMENTS, TOMBSTONES, seg_name, show,
};

impl Core {
    pub(super) fn create_segment(
        &mut self,
        key: u64,
        rank: u16,
        pe: u16,
        segment: u8,
        size: u64,
    ) -> Result<Outcome, (ErrorCode, String)> {
        if pe != rank {
            return Err((
                ErrorCode::NotSupported,
                format!("PE {rank} may create only its own segments, not PE {pe}'s"),
            ));
        }
        if usize::from(segment) >= SEGMENTS {
            return Err((
                ErrorCode::NoSegment,
                format!("segment id {segment} (ids are 0..={})", SEGMENTS - 1),
            ));
        }
        let page = gsas_transport::shm::page_size() as u64;
        let (len, ring) = if segment == SEG_RING {
            let slots = (size >> 32) as u32;
            let slot_size = (size as u32).min(self.max_reply as u32);
            let rc = RingConfig::new(slots, slot_size);
            rc.validate()
                .map_err(|e| (ErrorCode::Malformed, e.to_string()))?;
            (rc.segment_len() as u64, Some(rc))
        } else {
            (size.div_ceil(page).saturating_mul(page), None)
        };
        self.check_limits(key, pe, segment, len)?;
        let job = self.jobs.get(&key).expect("checked by the caller");
        let job_id = job.id;
        let exists = match segment {
            SEG_RING => self.rings.iter().any(|r| r.key == key && r.pe == pe),
            s => job
                .pes
                .get(&pe)
                .is_some_and(|p| p.segments[usize::from(s)].is_some()),
        };
        if exists {
            return Err((
                ErrorCode::Busy,
                format!(
                    "the {} segment of PE {pe} exists already",
                    seg_name(segment)
                ),
            ));
        }
        let name = format!("gsas-job{job_id:016x}-pe{pe}-{}", seg_name(segment));
        let host = |e: ShmError| (ErrorCode::HostFailure, format!("creating {name}: {e}"));
        if let Some(rc) = ring {
            let seg = ShmRing::create(&name, rc).map_err(host)?;
            let fd = seg.try_clone_fd().map_err(host)?;
            let ring = ShmRing::service_side(seg).map_err(host)?;
            self.rings.push(RingPort {
                key,
                pe,
                ring,
                pending: PortQueue::new(),
            });
            self.memory_used += len;
            return Ok(Outcome::Data(len.to_le_bytes().to_vec(), vec![fd]));
        }
        let bytes = usize::try_from(len).map_err(|_| {
            (
                ErrorCode::TooLarge,
                format!("{} does not fit this machine's address space", show(len)),
            )
        })?;
        let seg = Segment::create(&name, bytes).map_err(host)?;
        let fd = seg.try_clone_fd().map_err(host)?;
        self.install(key, pe, segment, seg)?;
        Ok(Outcome::Data(len.to_le_bytes().to_vec(), vec![fd]))
    }

    /// Bytes of segments job `key` has booked here.
    pub(super) fn job_booked(&self, key: u64) -> u64 {
        let segments: u64 = self.jobs.get(&key).map_or(0, |j| {
            j.pes
                .values()
                .flat_map(|p| p.segments.iter().flatten())
                .map(|s| s.len() as u64)
                .sum()
        });
        let rings: u64 = self
            .rings
            .iter()
            .filter(|r| r.key == key)
            .map(|r| r.ring.segment().len() as u64)
            .sum();
        segments + rings
    }

    /// Checks a segment of `len` bytes for job `key` against the per-kind limits, the
    /// node's total, and the job's and its user's shares.
    pub(super) fn check_limits(
        &self,
        key: u64,
        pe: u16,
        segment: u8,
        len: u64,
    ) -> Result<(), (ErrorCode, String)> {
        let limit = match segment {
            SEG_SYNC => MAX_SYNC,
            SEG_RING => MAX_RING_BYTES,
            _ => MAX_SEGMENT,
        };
        if len > limit {
            return Err((
                ErrorCode::TooLarge,
                format!(
                    "the {} segment of PE {pe} asks for {}, more than the {} a {} segment may have",
                    seg_name(segment),
                    show(len),
                    show(limit),
                    seg_name(segment)
                ),
            ));
        }
        let (total, source) = self.memory_limit;
        if self.memory_used.saturating_add(len) > total {
            // The heap is what a user sizes: say how.
            let hint = if segment == SEG_HEAP {
                "; each PE's symmetric heap is SHMEM_SYMMETRIC_SIZE: a smaller one fits more \
                 PEs on the node"
            } else {
                ""
            };
            return Err((
                ErrorCode::TooLarge,
                format!(
                    "the {} segment of PE {pe} asks for {}, but only {} of the {} of {source} are left{hint}",
                    seg_name(segment),
                    show(len),
                    show(total.saturating_sub(self.memory_used)),
                    show(total)
                ),
            ));
        }
        self.check_shares(key, pe, segment, len)
    }

    /// The per-job and per-user limits (see [`ServiceConfig::job_memory_limit`]).
    pub(super) fn check_shares(
        &self,
        key: u64,
        pe: u16,
        segment: u8,
        len: u64,
    ) -> Result<(), (ErrorCode, String)> {
        let Some(job) = self.jobs.get(&key) else {
            return Ok(());
        };
        let what = format!(
            "the {} segment of PE {pe} asks for {}",
            seg_name(segment),
            show(len)
        );
        let job_booked = self.job_booked(key);
        if let Some(limit) = self.cfg.job_memory_limit {
            if job_booked.saturating_add(len) > limit {
                return Err((
                    ErrorCode::TooLarge,
                    format!(
                        "{what}, but job {:016x} of uid {} has {} of its per-job limit of {} booked on this node ({})",
                        job.id,
                        job.uid,
                        show(job_booked),
                        show(limit),
                        self.cfg.memory_source.job
                    ),
                ));
            }
        }
        // An allocation with a memory figure replaces the per-user share.
        let (user_limit, user_source) = match self.allocated(job.uid) {
            Some((_, _, memory, ids)) if memory > 0 => (
                Some(memory),
                format!("its allocation(s) {ids:?} on this node, gsas-atomicd declare --memory"),
            ),
            _ => (
                self.cfg.user_memory_limit,
                self.cfg.memory_source.user.clone(),
            ),
        };
        if let Some(limit) = user_limit {
            let user_booked: u64 = self
                .jobs
                .values()
                .filter(|j| j.uid == job.uid)
                .map(|j| self.job_booked(j.key))
                .sum();
            if user_booked.saturating_add(len) > limit {
                return Err((
                    ErrorCode::TooLarge,
                    format!(
                        "{what}, but uid {} ({}) has {} of its per-user limit of {} booked on this node over {} job(s) ({})",
                        job.uid,
                        gsas_sys::socket::user_name(job.uid),
                        show(user_booked),
                        show(limit),
                        self.jobs.values().filter(|j| j.uid == job.uid).count(),
                        user_source
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Maps a segment, makes the atomic service serve it and records it for PE `pe` of job `key`.
    pub(super) fn install(
        &mut self,
        key: u64,
        pe: u16,
        segment: u8,
        seg: Segment,
    ) -> Result<(), (ErrorCode, String)> {
        let job = self.jobs.get(&key).expect("checked by the caller");
        let number = job.number;
        let len = seg.len() as u64;
        let seg = Arc::new(seg);
        let name = seg.name().to_owned();
        // Updates of the PE's memory ring its bell (see gsas_transport::bell).
        let bell = job.pes.get(&pe).and_then(|p| p.bell);
        match bell.and_then(|b| self.doorbell.bell(b)) {
            Some(bell) => self
                .service
                .memory()
                .insert_with_bell(Arc::clone(&seg), bell),
            None => self.service.memory().insert(Arc::clone(&seg)),
        }
        .map_err(|e| (ErrorCode::HostFailure, format!("mapping {name}: {e}")))?;
        let registered = self.service.register(ServiceSegment {
            job: number,
            key,
            pe,
            segment,
            base: seg.addr(),
            len,
        });
        if let Err(e) = registered {
            self.service.memory().remove(seg.addr());
            return Err((ErrorCode::HostFailure, format!("registering {name}: {e}")));
        }
        self.memory_used += len;
        let job = self.jobs.get_mut(&key).expect("checked by the caller");
        if let Some(p) = job.pes.get_mut(&pe) {
            p.segments[usize::from(segment)] = Some(seg);
        }
        log::debug!("{}: serving {name} ({})", self.cfg.name, show(len));
        Ok(())
    }

    pub(super) fn register_segment(
        &mut self,
        key: u64,
        rank: u16,
        pe: u16,
        segment: u8,
        size: u64,
        fd: OwnedFd,
    ) -> Result<Outcome, (ErrorCode, String)> {
        if pe != rank {
            return Err((
                ErrorCode::NotSupported,
                format!("PE {rank} may register only its own segments, not PE {pe}'s"),
            ));
        }
        if !matches!(segment, SEG_HEAP | SEG_DATA | SEG_SYNC) {
            return Err((
                ErrorCode::NotSupported,
                format!("segment {segment} cannot be registered"),
            ));
        }
        self.check_limits(key, pe, segment, size)?;
        let job = self.jobs.get(&key).expect("checked by the caller");
        if job
            .pes
            .get(&pe)
            .is_some_and(|p| p.segments[usize::from(segment)].is_some())
        {
            return Err((
                ErrorCode::Busy,
                format!(
                    "the {} segment of PE {pe} exists already",
                    seg_name(segment)
                ),
            ));
        }
        // SAFETY: fcntl(F_GET_SEALS) on a descriptor we own; no memory is passed.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err((
                ErrorCode::NotSupported,
                format!(
                    "the {} segment of PE {pe} is not a memfd sealed against shrinking",
                    seg_name(segment)
                ),
            ));
        }
        let len = usize::try_from(size).map_err(|_| {
            (
                ErrorCode::TooLarge,
                format!("{} does not fit this machine's address space", show(size)),
            )
        })?;
        let name = format!(
            "gsas-job{:016x}-pe{pe}-{} (registered)",
            job.id,
            seg_name(segment)
        );
        let seg = Segment::map_len(fd, len, &name)
            .map_err(|e| (ErrorCode::HostFailure, format!("mapping {name}: {e}")))?;
        self.install(key, pe, segment, seg)?;
        Ok(Outcome::Data(size.to_le_bytes().to_vec(), Vec::new()))
    }

    pub(super) fn open_segment(
        &mut self,
        key: u64,
        pe: u16,
        segment: u8,
    ) -> Result<Outcome, (ErrorCode, String)> {
        if segment == SEG_RING || usize::from(segment) >= SEGMENTS {
            return Err((
                ErrorCode::NotSupported,
                format!("segment {segment} of other PEs cannot be opened"),
            ));
        }
        let job = self.jobs.get(&key).expect("checked by the caller");
        let Some(p) = job.pes.get(&pe) else {
            return Err((
                ErrorCode::NoSegment,
                format!("PE {pe} has not joined job {:016x} on this node", job.id),
            ));
        };
        let Some(seg) = &p.segments[usize::from(segment)] else {
            return Err((
                ErrorCode::NoSegment,
                format!("PE {pe} has no {} segment", seg_name(segment)),
            ));
        };
        let fd = seg
            .try_clone_fd()
            .map_err(|e| (ErrorCode::HostFailure, e.to_string()))?;
        Ok(Outcome::Data(
            (seg.len() as u64).to_le_bytes().to_vec(),
            vec![fd],
        ))
    }

    /// [`gsas_control::proto::ControlRequest::OpenSegments`]: the heap, data and sync
    /// segments of the PEs of job `key` on this node other than `rank`, from rank `from` on,
    /// whole PEs while one reply's descriptors hold them.
    pub(super) fn open_segments(
        &mut self,
        key: u64,
        rank: u16,
        from: u16,
    ) -> Result<Outcome, (ErrorCode, String)> {
        let job = self.jobs.get(&key).expect("checked by the caller");
        let mut batch = SegmentBatch::default();
        let mut fds = Vec::new();
        for (&pe, p) in job.pes.range(from..).filter(|&(&pe, _)| pe != rank) {
            let segs: Vec<(u8, &Arc<Segment>)> = [SEG_HEAP, SEG_DATA, SEG_SYNC]
                .into_iter()
                .filter_map(|seg| Some((seg, p.segments[usize::from(seg)].as_ref()?)))
                .collect();
            if fds.len() + segs.len() > MAX_FDS {
                batch.next = Some(pe);
                break;
            }
            for (segment, seg) in segs {
                fds.push(
                    seg.try_clone_fd()
                        .map_err(|e| (ErrorCode::HostFailure, e.to_string()))?,
                );
                batch.entries.push(SegmentEntry {
                    pe,
                    segment,
                    size: seg.len() as u64,
                });
            }
        }
        Ok(Outcome::Segments(batch.encode(), fds))
    }

    pub(super) fn free_segment(
        &mut self,
        key: u64,
        rank: u16,
        pe: u16,
        segment: u8,
    ) -> Result<Outcome, (ErrorCode, String)> {
        if pe != rank {
            return Err((
                ErrorCode::NotSupported,
                format!("PE {rank} may free only its own segments"),
            ));
        }
        if segment == SEG_RING {
            let before = self.rings.len();
            let mut freed = 0;
            self.rings.retain(|r| {
                let mine = r.key == key && r.pe == pe;
                if mine {
                    freed += r.ring.segment().len() as u64;
                }
                !mine
            });
            if self.rings.len() == before {
                return Err((ErrorCode::NoSegment, format!("PE {pe} has no ring")));
            }
            self.memory_used -= freed;
            return Ok(Outcome::Ack);
        }
        let job = self.jobs.get_mut(&key).expect("checked by the caller");
        let seg = job
            .pes
            .get_mut(&pe)
            .and_then(|p| p.segments.get_mut(usize::from(segment)))
            .and_then(Option::take);
        let Some(seg) = seg else {
            return Err((
                ErrorCode::NoSegment,
                format!("PE {pe} has no segment {segment}"),
            ));
        };
        self.service.unregister(key, pe, segment);
        self.service.memory().remove(seg.addr());
        self.memory_used -= seg.len() as u64;
        Ok(Outcome::Ack)
    }

    /// Unregisters and releases everything of job `key`, its network peers included: the
    /// end of a job that did not end cleanly (a PE died, the service stops).
    pub(super) fn drop_job(&mut self, key: u64, reason: String) {
        if self.remove_job(key, reason) {
            for peer in self.net.index_mut().forget_job(key) {
                self.net.release_peer(peer);
            }
        }
    }

    /// Job `key` ended cleanly (every PE of it here left): unregisters and releases its
    /// segments, rings and bells at once, but keeps its network peers' state, closed for
    /// new data, for the reliability deadline (TCP's TIME_WAIT). A PE of another node may
    /// still retransmit a request whose reply was lost (the last increment of the final
    /// barrier, executed before this node's PEs could leave): it gets the reply again from
    /// the layer's reply cache instead of a refusal that would fail its `finalize`; its
    /// last acknowledgements are taken, not refused and logged; a request never executed
    /// is refused with [`RefusalReason::JobEnded`]. At most [`LINGERING_JOBS`] jobs linger;
    /// their peers give way first when the peer table is full.
    pub(super) fn end_job(&mut self, key: u64, reason: String) {
        if !self.remove_job(key, reason) {
            return;
        }
        let ended = gsas_core::reliable::Refusal {
            reason: RefusalReason::JobEnded,
            in_use: 0,
            limit: 0,
        };
        for peer in self.net.index_mut().end_job(key) {
            self.net.close_peer(peer, ended);
        }
        self.lingering
            .push_back((key, Instant::now() + self.cfg.deadline));
        while self.lingering.len() > LINGERING_JOBS {
            if let Some((old, _)) = self.lingering.pop_front() {
                self.free_peers_of(old);
            }
        }
    }

    /// Frees the peers of the jobs that ended at least the reliability deadline ago (by
    /// then their PEs stopped retransmitting, and the layer gave up on the replies that
    /// stayed unacknowledged).
    pub(super) fn sweep_lingering(&mut self) {
        let now = Instant::now();
        while let Some(&(key, until)) = self.lingering.front() {
            if until > now {
                return;
            }
            self.lingering.pop_front();
            self.free_peers_of(key);
        }
    }

    /// Frees the lingering peers of job `key` if it ended here and they still linger: a
    /// new job of the same key starts afresh.
    pub(super) fn release_lingering(&mut self, key: u64) {
        let before = self.lingering.len();
        self.lingering.retain(|&(k, _)| k != key);
        if self.lingering.len() != before {
            self.free_peers_of(key);
        }
    }

    /// Frees the network peers of key `key` that have a slot.
    fn free_peers_of(&mut self, key: u64) {
        for peer in self.net.index().peers_of(key) {
            self.net.release_peer(peer);
        }
    }

    /// Unregisters and releases job `key`'s segments, rings and bells, and remembers why
    /// it ended; whether the job existed.
    fn remove_job(&mut self, key: u64, reason: String) -> bool {
        let Some(job) = self.jobs.remove(&key) else {
            return false;
        };
        self.service.unregister_job(job.number);
        for (rank, p) in &job.pes {
            if let Some(b) = p.bell {
                self.doorbell.release_bell(b);
            }
            for seg in p.segments.iter().flatten() {
                self.service.memory().remove(seg.addr());
                self.memory_used = self.memory_used.saturating_sub(seg.len() as u64);
            }
            log::debug!(
                "{}: released the segments of PE {rank} (pid {}, connection {})",
                self.cfg.name,
                p.pid,
                p.conn
            );
        }
        let mut freed = 0u64;
        self.rings.retain(|r| {
            let mine = r.key == key;
            if mine {
                freed += r.ring.segment().len() as u64;
            }
            !mine
        });
        self.memory_used = self.memory_used.saturating_sub(freed);
        if self.tombstones.len() == TOMBSTONES {
            self.tombstones.pop_front();
        }
        self.tombstones.push_back((job.key, reason));
        true
    }
}
