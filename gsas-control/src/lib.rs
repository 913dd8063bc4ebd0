//! gsas-control: the control protocol between a PE (or a tool such as `gsas-atomicd
//! --stats`) and its node's atomic service, over the service's Unix control socket.
//!
//! **What it is.** [`proto`]: the messages (Join, Leave, segments, Ping, statistics,
//! allocations) and their encoding; [`ControlClient`]: the client end, one request at a
//! time with bounded waits, and [`query_stats`]; [`StatsReport`] and [`stats::DOCS`]: the
//! statistics a service reports and what each means; [`ControlError`]: what a request can
//! meet (a refusal with the service's code and reason, a closed connection, a reply that
//! breaks the protocol, a system error).
//!
//! **What it is not.** Not the service (`gsas-service` serves this protocol and depends on
//! this crate) and not the node client (`gsas-node`, a PE's user of it). A PE links this
//! crate to talk to its node's service.
//!
//! **Thread safety.** [`ControlClient`] is `Send` and used through `&mut self`; the rest is
//! plain data.

pub mod client;
pub mod proto;
pub mod stats;

use std::path::PathBuf;

use gsas_core::wire::ErrorCode;

pub use client::{Answer, ControlClient, Joined, query_stats};
pub use stats::StatsReport;

/// What a control request can meet.
#[derive(Debug)]
#[non_exhaustive]
pub enum ControlError {
    /// A system call failed (connecting, sending, a timeout).
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The service refused a request.
    Refused {
        /// The request.
        request: String,
        /// The service's reason code.
        code: ErrorCode,
        /// The service's explanation.
        message: String,
    },
    /// The service closed the control connection (it stopped or died).
    Closed {
        /// The control socket.
        path: PathBuf,
    },
    /// A message that does not follow the control protocol.
    Protocol(String),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Io { context, source } => write!(f, "{context}: {source}"),
            ControlError::Refused {
                request,
                code,
                message,
            } => {
                if message.is_empty() {
                    write!(f, "the atomic service refused {request}: {code}")
                } else {
                    write!(
                        f,
                        "the atomic service refused {request}: {message} ({code})"
                    )
                }
            }
            ControlError::Closed { path } => write!(
                f,
                "the atomic service at {} closed the control connection (it stopped or died)",
                path.display()
            ),
            ControlError::Protocol(m) => write!(f, "control protocol: {m}"),
        }
    }
}

impl std::error::Error for ControlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ControlError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
