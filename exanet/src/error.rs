//! Error types of the crate. Every error that concerns a destination names it as
//! `node <coord> ep <k>` so that a message on its own says where to look.
//!
//! Thread safety: plain values, `Send + Sync`.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use uio_driver::UioError;

use crate::regs::{nack, rdma_status};

/// A destination endpoint: node coordinate and endpoint index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dest {
    /// 22-bit node coordinate.
    pub coord: u32,
    /// 10-bit endpoint index.
    pub ep: u16,
}

impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {:#08x} ep {}", self.coord, self.ep)
    }
}

/// Opening an endpoint failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpenError {
    /// UIO discovery, mapping or IRQ channel.
    Uio(UioError),
    /// A map is smaller than the model requires (or misaligned).
    MapTooSmall {
        /// Device name.
        device: String,
        /// Map index.
        map: usize,
        /// Its length.
        len: usize,
        /// Required length.
        needed: usize,
    },
    /// `ID` is not "EXNI".
    BadId(u32),
    /// Unsupported major version.
    BadVersion(u32),
    /// `CAPS0`/`CAPS1` describe rings this driver does not support.
    BadCaps {
        /// CAPS0.
        caps0: u32,
        /// CAPS1.
        caps1: u32,
    },
    /// The endpoint is not enabled by management.
    Disabled,
    /// Registration of staging memory failed.
    Register(RegisterError),
    /// Other I/O (creating staging memory).
    Io(io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Uio(e) => write!(f, "{e}"),
            OpenError::MapTooSmall {
                device,
                map,
                len,
                needed,
            } => {
                write!(
                    f,
                    "{device}: map{map} is {len:#x} bytes, the model needs {needed:#x} (8-byte aligned)"
                )
            }
            OpenError::BadId(id) => write!(
                f,
                "ID register is {id:#010x}, expected 0x45584e49 (\"EXNI\")"
            ),
            OpenError::BadVersion(v) => {
                write!(f, "unsupported NI version {:#x}.{:#x}", v >> 16, v & 0xFFFF)
            }
            OpenError::BadCaps { caps0, caps1 } => {
                write!(
                    f,
                    "unsupported capabilities CAPS0={caps0:#010x} CAPS1={caps1:#010x}"
                )
            }
            OpenError::Disabled => f.write_str("endpoint not enabled (EP_STATUS.ENABLED = 0)"),
            OpenError::Register(e) => write!(f, "{e}"),
            OpenError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl From<UioError> for OpenError {
    fn from(e: UioError) -> Self {
        OpenError::Uio(e)
    }
}

impl From<RegisterError> for OpenError {
    fn from(e: RegisterError) -> Self {
        OpenError::Register(e)
    }
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

/// Registering memory failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum RegisterError {
    /// Talking to the emulator's `mgmt` socket failed.
    Io {
        /// The socket.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// The emulator answered with something else than a reply.
    Protocol {
        /// The socket.
        path: PathBuf,
        /// What was wrong.
        what: &'static str,
    },
    /// The emulator refused ([`crate::nva::mgmt_status`]).
    Refused {
        /// The socket.
        path: PathBuf,
        /// Status code.
        status: u32,
    },
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::Io { path, source } => {
                write!(f, "registration via {}: {source}", path.display())
            }
            RegisterError::Protocol { path, what } => {
                write!(f, "registration via {}: {what}", path.display())
            }
            RegisterError::Refused { path, status } => write!(
                f,
                "registration via {} refused: {} ({status})",
                path.display(),
                crate::nva::mgmt_status::name(*status)
            ),
        }
    }
}

impl std::error::Error for RegisterError {}

/// A send could not be started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// No TX slot is free now (or too many retries are queued): reap and retry.
    WouldBlock,
    /// Length not in 1..=64.
    BadLength(usize),
    /// Destination coordinate above 22 bits or endpoint above 10 bits.
    BadDest(Dest),
    /// A bounded wait for a TX slot expired.
    Timeout {
        /// The destination of the send.
        dest: Dest,
        /// How long it waited.
        waited: Duration,
    },
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::WouldBlock => f.write_str("no free TX slot (would block)"),
            SendError::BadLength(n) => write!(f, "message length {n} is not in 1..=64"),
            SendError::BadDest(d) => write!(f, "invalid destination {d}"),
            SendError::Timeout { dest, waited } => {
                write!(f, "no TX slot for a message to {dest} within {waited:?}")
            }
        }
    }
}

impl std::error::Error for SendError {}

/// A message that could not be delivered (reported by [`crate::Endpoint::take_failure`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxFailure {
    /// The destination.
    pub dest: Dest,
    /// The last NACK reason ([`crate::regs::nack`]).
    pub reason: u8,
    /// Transmissions made.
    pub attempts: u32,
    /// The caller's tag.
    pub tag: u16,
}

impl fmt::Display for TxFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "message to {} failed after {} attempt(s): {}",
            self.dest,
            self.attempts,
            nack::name(self.reason)
        )
    }
}

impl std::error::Error for TxFailure {}

/// An RDMA descriptor could not be posted, or completed with an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaError {
    /// The channel's ring is full: poll completions and retry.
    WouldBlock,
    /// Channel index out of range or reserved.
    BadChannel(usize),
    /// Length 0 (or above what one descriptor carries).
    BadLength(u64),
    /// The NI reported a status other than OK ([`crate::regs::rdma_status`]).
    Failed {
        /// The remote side.
        dest: Dest,
        /// Record status.
        status: u32,
        /// Bytes completed.
        bytes: u32,
    },
    /// A bounded wait for completion expired.
    Timeout {
        /// The remote side.
        dest: Dest,
        /// How long it waited.
        waited: Duration,
    },
    /// The handle names no operation of this endpoint (already completed and taken).
    UnknownHandle,
}

impl fmt::Display for RdmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdmaError::WouldBlock => f.write_str("RDMA channel ring full (would block)"),
            RdmaError::BadChannel(c) => write!(f, "RDMA channel {c} is not available"),
            RdmaError::BadLength(n) => write!(f, "RDMA length {n} is not in 1..=2^32-1"),
            RdmaError::Failed {
                dest,
                status,
                bytes,
            } => write!(
                f,
                "RDMA with {dest} failed: {} (status {status}, {bytes} bytes done)",
                rdma_status::name(*status)
            ),
            RdmaError::Timeout { dest, waited } => {
                write!(f, "RDMA with {dest} did not complete within {waited:?}")
            }
            RdmaError::UnknownHandle => f.write_str("unknown RDMA handle"),
        }
    }
}

impl std::error::Error for RdmaError {}
