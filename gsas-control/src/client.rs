//! The PE's (and tools') end of the control socket: [`ControlClient`].
//!
//! What it is: a connection to an atomic service's control socket that sends one
//! [`ControlRequest`] at a time and waits (bounded) for its reply and the descriptors that
//! come with it; typed helpers for Join, segments, Leave, Ping and statistics; and
//! [`query_stats`], what `gsas-atomicd --stats` uses. A refusal comes back as
//! [`ControlError::Refused`] with the service's code and reason; a closed connection as
//! [`ControlError::Closed`] naming the socket.
//!
//! What it is not: the node client (see `gsas_node`). Thread-safety: `Send`, used
//! through `&mut self` (the protocol is one request at a time).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gsas_transport::shm::{ShmError, recv_fds, send_fds};

use crate::ControlError;
use crate::proto::{
    ControlReply, ControlRequest, JoinInfo, MAX_MESSAGE, SegmentBatch, SegmentEntry, ServiceInfo,
};
use crate::stats::StatsReport;

/// Segments of other PEs with their descriptors, as [`ControlClient::open_segments`] returns
/// them.
pub type OpenedSegments = Vec<(SegmentEntry, OwnedFd)>;

/// A successful reply, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// ACK.
    Ack,
    /// DATA.
    Data(Vec<u8>),
    /// An encoded [`SegmentBatch`].
    Segments(Vec<u8>),
    /// Statistics text.
    Stats(String),
}

/// What a Join returns.
#[derive(Debug)]
pub struct Joined {
    /// The service's identity and address.
    pub info: ServiceInfo,
    /// The service's doorbell page (memfd) and eventfd, for waking it after putting work
    /// in a ring.
    pub doorbell: Option<(OwnedFd, OwnedFd)>,
}

/// A connection to a service's control socket.
#[derive(Debug)]
pub struct ControlClient {
    fd: OwnedFd,
    path: PathBuf,
    token: u32,
    timeout: Duration,
}

impl ControlClient {
    /// Connects to the socket at `path`; every later request waits at most `timeout` for
    /// its reply.
    pub fn connect(path: &Path, timeout: Duration) -> Result<ControlClient, ControlError> {
        let fd = gsas_sys::socket::connect(path, timeout).map_err(|source| ControlError::Io {
            context: format!("connecting to the atomic service at {}", path.display()),
            source,
        })?;
        Ok(ControlClient {
            fd,
            path: path.to_owned(),
            token: 0,
            timeout,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the service closed the connection (checked without blocking).
    pub fn is_closed(&self) -> bool {
        gsas_sys::socket::peer_closed(self.fd.as_fd())
    }

    /// The connection's descriptor (for `poll(2)`: readable or hung up means the service
    /// went away, since it never sends unasked; the one exception, an error with token 0
    /// right after connecting when it refuses the connection, is followed by the close).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The error the service sent with token 0 before it closed the connection (it
    /// refused it, out of descriptors), if one is waiting to be read.
    fn refusal(&self) -> Option<ControlError> {
        let mut buf = vec![0u8; MAX_MESSAGE];
        // A close with our request unread reports ECONNRESET once, before the queued
        // message: read twice.
        let (n, _) = recv_fds(&self.fd, &mut buf, Duration::ZERO)
            .or_else(|_| recv_fds(&self.fd, &mut buf, Duration::ZERO))
            .ok()?;
        match ControlReply::parse(&buf[..n]).ok()? {
            (0, ControlReply::Error { code, message }) => Some(ControlError::Refused {
                request: "the connection".into(),
                code,
                message: message.to_owned(),
            }),
            _ => None,
        }
    }

    fn shm_err(&self, what: &str, e: ShmError) -> ControlError {
        match e {
            ShmError::Closed { .. } => ControlError::Closed {
                path: self.path.clone(),
            },
            other => ControlError::Io {
                context: format!("{what} (atomic service at {})", self.path.display()),
                source: other.into(),
            },
        }
    }

    /// Sends `req` and returns the reply and its descriptors.
    ///
    /// Errors: [`ControlError::Refused`] for an ERROR reply, [`ControlError::Closed`],
    /// [`ControlError::Protocol`] for a reply that does not parse or answers another
    /// request, [`ControlError::Io`] for timeouts and system errors.
    pub fn request(
        &mut self,
        req: &ControlRequest,
    ) -> Result<(Answer, Vec<OwnedFd>), ControlError> {
        self.request_with(req, &[])
    }

    /// Sends `req` with descriptors attached; see [`ControlClient::request`].
    pub fn request_with(
        &mut self,
        req: &ControlRequest,
        attach: &[BorrowedFd<'_>],
    ) -> Result<(Answer, Vec<OwnedFd>), ControlError> {
        // Token 0 is the service's: an error it sends before any request (it refused the
        // connection, out of descriptors).
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        let mut buf = vec![0u8; MAX_MESSAGE];
        let n = req.emit(token, &mut buf);
        let what = describe(req);
        if let Err(e) = send_fds(&self.fd, &buf[..n], attach, self.timeout) {
            // A service that refused the connection sent why before it closed it.
            if let Some(refusal) = self.refusal() {
                return Err(refusal);
            }
            return Err(self.shm_err(&format!("sending {what}"), e));
        }
        let (n, fds) = match recv_fds(&self.fd, &mut buf, self.timeout) {
            Ok(r) => r,
            Err(e) => {
                if let Some(refusal) = self.refusal() {
                    return Err(refusal);
                }
                return Err(self.shm_err(&format!("waiting for the reply to {what}"), e));
            }
        };
        let (got, reply) = ControlReply::parse(&buf[..n]).map_err(|e| {
            ControlError::Protocol(format!("reply to {what} from {}: {e}", self.path.display()))
        })?;
        if let (0, ControlReply::Error { code, message }) = (got, &reply) {
            return Err(ControlError::Refused {
                request: "the connection".into(),
                code: *code,
                message: (*message).to_owned(),
            });
        }
        if got != token {
            return Err(ControlError::Protocol(format!(
                "reply to {what} from {} carries token {got}, expected {token}",
                self.path.display()
            )));
        }
        match reply {
            ControlReply::Ack => Ok((Answer::Ack, fds)),
            ControlReply::Data(d) => Ok((Answer::Data(d.to_vec()), fds)),
            ControlReply::Stats(s) => Ok((Answer::Stats(s.to_owned()), fds)),
            ControlReply::Segments(b) => Ok((Answer::Segments(b.to_vec()), fds)),
            ControlReply::Error { code, message } => Err(ControlError::Refused {
                request: what,
                code,
                message: message.to_owned(),
            }),
        }
    }

    /// Joins job `job_id` with key `job_key` as PE `rank`.
    pub fn join(
        &mut self,
        rank: u16,
        job_id: u64,
        job_key: u64,
        info: JoinInfo,
    ) -> Result<Joined, ControlError> {
        let (answer, mut fds) = self.request(&ControlRequest::Join {
            rank,
            job_id,
            job_key,
            info,
        })?;
        let Answer::Data(d) = answer else {
            return Err(ControlError::Protocol(
                "Join answered without service data".into(),
            ));
        };
        let info = ServiceInfo::decode(&d)
            .map_err(|e| ControlError::Protocol(format!("Join reply: {e}")))?;
        let doorbell = if fds.len() == 2 {
            let efd = fds.pop();
            let page = fds.pop();
            page.zip(efd)
        } else {
            None
        };
        Ok(Joined { info, doorbell })
    }

    fn segment_reply(&mut self, req: ControlRequest) -> Result<(u64, OwnedFd), ControlError> {
        let what = describe(&req);
        let (answer, mut fds) = self.request(&req)?;
        let size = match answer {
            Answer::Data(d) if d.len() == 8 => u64::from_le_bytes(d.try_into().unwrap_or([0; 8])),
            _ => {
                return Err(ControlError::Protocol(format!(
                    "{what}: reply without a segment size"
                )));
            }
        };
        let fd = fds
            .pop()
            .ok_or_else(|| ControlError::Protocol(format!("{what}: no descriptor attached")))?;
        Ok((size, fd))
    }

    /// Creates segment `segment` of `size` bytes for the caller (PE `pe`); returns its
    /// size (rounded up to pages) and descriptor.
    pub fn create_segment(
        &mut self,
        pe: u16,
        segment: u8,
        size: u64,
    ) -> Result<(u64, OwnedFd), ControlError> {
        self.segment_reply(ControlRequest::CreateSegment { pe, segment, size })
    }

    /// The size and descriptor of segment `segment` of PE `pe` of the caller's job.
    pub fn open_segment(&mut self, pe: u16, segment: u8) -> Result<(u64, OwnedFd), ControlError> {
        self.segment_reply(ControlRequest::OpenSegment { pe, segment })
    }

    /// The segments of the other PEs of the caller's job on this node from rank `from` on,
    /// as many as one reply carries, each with its descriptor, and the rank the next call
    /// starts from (`None`: there are no more). See [`ControlRequest::OpenSegments`].
    pub fn open_segments(
        &mut self,
        from: u16,
    ) -> Result<(OpenedSegments, Option<u16>), ControlError> {
        let req = ControlRequest::OpenSegments { from };
        let (answer, fds) = self.request(&req)?;
        let what = describe(&req);
        let Answer::Segments(d) = answer else {
            return Err(ControlError::Protocol(format!(
                "{what}: reply without segments"
            )));
        };
        let batch =
            SegmentBatch::decode(&d).map_err(|e| ControlError::Protocol(format!("{what}: {e}")))?;
        if batch.entries.len() != fds.len() {
            return Err(ControlError::Protocol(format!(
                "{what}: {} segments with {} descriptors",
                batch.entries.len(),
                fds.len()
            )));
        }
        if batch.next.is_some_and(|n| n <= from) {
            return Err(ControlError::Protocol(format!(
                "{what}: the next batch would start at rank {:?}, not after {from}",
                batch.next
            )));
        }
        Ok((batch.entries.into_iter().zip(fds).collect(), batch.next))
    }

    /// Hands the caller's own memfd `fd` to the service as segment `segment` of `size`
    /// bytes (the file must be sealed against shrinking).
    pub fn register_segment(
        &mut self,
        pe: u16,
        segment: u8,
        size: u64,
        fd: BorrowedFd<'_>,
    ) -> Result<(), ControlError> {
        self.request_with(
            &ControlRequest::RegisterSegment { pe, segment, size },
            &[fd],
        )
        .map(|_| ())
    }

    /// Drops the caller's segment `segment`.
    pub fn free_segment(&mut self, pe: u16, segment: u8) -> Result<(), ControlError> {
        self.request(&ControlRequest::FreeSegment { pe, segment })
            .map(|_| ())
    }

    /// Leaves the job.
    pub fn leave(&mut self, rank: u16, job_id: u64) -> Result<(), ControlError> {
        self.request(&ControlRequest::Leave { rank, job_id })
            .map(|_| ())
    }

    /// Declares an allocation (see [`ControlRequest::Declare`]); the service takes it from
    /// root only.
    pub fn declare(
        &mut self,
        id: u64,
        uid: u32,
        pes: u32,
        job_pes: u32,
        memory: u64,
    ) -> Result<(), ControlError> {
        self.request(&ControlRequest::Declare {
            id,
            uid,
            pes,
            job_pes,
            memory,
        })
        .map(|_| ())
    }

    /// Ends allocation `id` (see [`ControlRequest::Undeclare`]).
    pub fn undeclare(&mut self, id: u64) -> Result<(), ControlError> {
        self.request(&ControlRequest::Undeclare { id }).map(|_| ())
    }

    /// Checks that the service answers.
    pub fn ping(&mut self) -> Result<(), ControlError> {
        self.request(&ControlRequest::Ping).map(|_| ())
    }

    /// The service's counters.
    pub fn stats(&mut self) -> Result<StatsReport, ControlError> {
        match self.request(&ControlRequest::Stats)?.0 {
            Answer::Stats(text) => Ok(StatsReport::parse(&text)),
            _ => Err(ControlError::Protocol(
                "statistics answered without text".into(),
            )),
        }
    }
}

/// Connects to the service at `path` and returns its counters.
pub fn query_stats(path: &Path, timeout: Duration) -> Result<StatsReport, ControlError> {
    ControlClient::connect(path, timeout)?.stats()
}

fn describe(req: &ControlRequest) -> String {
    match *req {
        ControlRequest::Join { rank, job_id, .. } => {
            format!("Join of PE {rank} to job {job_id:016x}")
        }
        ControlRequest::Leave { rank, .. } => format!("Leave of PE {rank}"),
        ControlRequest::CreateSegment { pe, segment, size } => {
            format!("creating segment {segment} of PE {pe} ({size} bytes)")
        }
        ControlRequest::OpenSegment { pe, segment } => {
            format!("opening segment {segment} of PE {pe}")
        }
        ControlRequest::OpenSegments { from } => {
            format!("opening the segments of the PEs from {from} on")
        }
        ControlRequest::FreeSegment { pe, segment } => {
            format!("freeing segment {segment} of PE {pe}")
        }
        ControlRequest::RegisterSegment { pe, segment, size } => {
            format!("registering segment {segment} of PE {pe} ({size} bytes)")
        }
        ControlRequest::Ping => "Ping".into(),
        ControlRequest::Stats => "statistics".into(),
        ControlRequest::Declare { id, uid, .. } => {
            format!("declaring allocation {id} for uid {uid}")
        }
        ControlRequest::Undeclare { id } => format!("ending allocation {id}"),
    }
}
