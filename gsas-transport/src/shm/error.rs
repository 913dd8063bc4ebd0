//! The error type of the shared-memory module.
//!
//! Every variant names what was being done and to which object (segment name, socket
//! operation), so that a message printed on its own says what failed. Thread-safety:
//! plain data, `Send + Sync`.

use std::fmt;
use std::io;
use std::time::Duration;

/// An error of segment creation and mapping, descriptor passing or the data-segment remap.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShmError {
    /// A system call failed.
    Os {
        /// The call and its object, e.g. `memfd_create("pe3-heap")`.
        op: String,
        /// The operating-system error.
        source: io::Error,
    },
    /// An argument is not acceptable (zero size, a name with a NUL byte, ...).
    Invalid {
        /// What the argument is for.
        what: String,
        /// Why it is refused.
        reason: String,
    },
    /// A file is smaller than the mapping asked of it.
    TooSmall {
        /// The object (segment name).
        what: String,
        /// Its size in bytes.
        size: u64,
        /// The size needed.
        needed: u64,
    },
    /// More descriptors than one message may carry.
    TooManyFds {
        /// Descriptors offered or received.
        count: usize,
        /// The limit ([`MAX_FDS`](super::MAX_FDS)).
        max: usize,
    },
    /// A received message did not fit the buffer (the rest was discarded by the kernel).
    MessageTruncated {
        /// Size of the buffer given.
        capacity: usize,
    },
    /// The kernel discarded descriptors attached to a message (`MSG_CTRUNC`); the ones
    /// that arrived were closed.
    FdsTruncated {
        /// Descriptors that arrived before the cut.
        received: usize,
        /// The control buffer had room for more than arrived: the receiving process could
        /// not take more descriptors (its `RLIMIT_NOFILE`, or the system's table), rather
        /// than the sender attaching more than the buffer holds.
        out_of_descriptors: bool,
    },
    /// The peer closed the socket.
    Closed {
        /// The operation that found the socket closed.
        op: &'static str,
    },
    /// The socket did not become ready in time.
    TimedOut {
        /// The operation that waited.
        op: &'static str,
        /// How long it waited.
        waited: Duration,
    },
    /// The executable's data segment could not be found or has an unsupported layout.
    DataSegment {
        /// What is wrong.
        reason: String,
    },
}

impl ShmError {
    /// An [`ShmError::Os`] from `errno` for the call `op`.
    pub(crate) fn last_os(op: impl Into<String>) -> Self {
        ShmError::Os {
            op: op.into(),
            source: io::Error::last_os_error(),
        }
    }

    /// An [`ShmError::Invalid`].
    pub(crate) fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        ShmError::Invalid {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ShmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShmError::Os { op, source } => write!(f, "{op} failed: {source}"),
            ShmError::Invalid { what, reason } => write!(f, "invalid {what}: {reason}"),
            ShmError::TooSmall { what, size, needed } => write!(
                f,
                "{what}: the file has {size} bytes but {needed} bytes are to be mapped"
            ),
            ShmError::TooManyFds { count, max } => write!(
                f,
                "{count} descriptors in one message, at most {max} are allowed"
            ),
            ShmError::MessageTruncated { capacity } => write!(
                f,
                "received message larger than the {capacity}-byte buffer (truncated)"
            ),
            ShmError::FdsTruncated {
                received,
                out_of_descriptors: true,
            } => write!(
                f,
                "descriptors sent with a message were discarded by the kernel: the receiving \
                 process is out of file descriptors (RLIMIT_NOFILE soft limit {}); {received} \
                 arrived and were closed",
                gsas_sys::process::nofile_limit()
                    .map_or_else(|_| "unknown".to_string(), |(soft, _)| soft.to_string())
            ),
            ShmError::FdsTruncated {
                received,
                out_of_descriptors: false,
            } => write!(
                f,
                "descriptors discarded by the kernel (more were attached than the control \
                 buffer holds); {received} arrived and were closed"
            ),
            ShmError::Closed { op } => write!(f, "{op}: the peer closed the socket"),
            ShmError::TimedOut { op, waited } => {
                write!(f, "{op}: timed out after {:.1} s", waited.as_secs_f64())
            }
            ShmError::DataSegment { reason } => write!(f, "data segment: {reason}"),
        }
    }
}

impl std::error::Error for ShmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ShmError::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ShmError> for io::Error {
    fn from(e: ShmError) -> io::Error {
        let kind = match &e {
            ShmError::Os { source, .. } => source.kind(),
            ShmError::Invalid { .. } | ShmError::TooManyFds { .. } => io::ErrorKind::InvalidInput,
            ShmError::TooSmall { .. }
            | ShmError::MessageTruncated { .. }
            | ShmError::FdsTruncated { .. }
            | ShmError::DataSegment { .. } => io::ErrorKind::InvalidData,
            ShmError::Closed { .. } => io::ErrorKind::UnexpectedEof,
            ShmError::TimedOut { .. } => io::ErrorKind::TimedOut,
        };
        io::Error::new(kind, e)
    }
}
