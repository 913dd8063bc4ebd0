//! The error type of the node client.
//!
//! Every variant prints on its own: which operation, which PE and node, what the service
//! said, which socket broke. Thread-safety: plain data, `Send + Sync`.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use gsas_core::wire::ErrorCode;

use crate::pmi::PmiError;
use gsas_control::ControlError;
use gsas_transport::shm::ShmError;

/// An error of the node client.
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeError {
    /// The PMI bootstrap failed.
    Pmi {
        /// What was being done.
        context: String,
        /// The PMI error.
        source: PmiError,
    },
    /// The environment or the cluster file is wrong, or the PEs disagree about the job.
    Config(String),
    /// The local atomic service refused or failed a control request.
    Service(ControlError),
    /// The atomic service this PE starts for its node (no daemon runs there) could not
    /// start.
    ServiceStart(String),
    /// Shared memory could not be set up.
    Shm {
        /// What was being done.
        context: String,
        /// The error.
        source: ShmError,
    },
    /// The local atomic service closed the control connection: it stopped or died.
    ServiceGone {
        /// Its control socket.
        path: PathBuf,
    },
    /// A node's service did not answer within the deadline.
    Unreachable {
        /// The node id.
        node: u16,
        /// Its service's address.
        addr: gsas_transport::net::NetAddr,
        /// The deadline.
        waited: Duration,
    },
    /// A node's service refused to keep state for this PE: its peer table, or the job's
    /// share of it, is full, or it knows no job with this PE's key.
    PeerRefused {
        /// The node id.
        node: u16,
        /// Its service's address.
        addr: gsas_transport::net::NetAddr,
        /// Why, with the figures.
        refusal: gsas_core::reliable::Refusal,
    },
    /// The target's service refused an operation.
    Refused {
        /// The operation, e.g. `put of 64 bytes to PE 3, segment 0, offset 0x100`.
        op: String,
        /// The node that refused it.
        node: u16,
        /// The reason.
        code: ErrorCode,
    },
    /// A wait reached its limit.
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// Bad arguments (PE out of range, offset outside a segment, bad atomic operand...).
    Invalid(String),
    /// The transport failed.
    Transport(String),
    /// The symmetric heap refused an allocation or free.
    Heap(gsas_core::symheap::AllocError),
    /// The node was finalized.
    Finalized,
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Pmi { context, source } => write!(f, "{context}: {source}"),
            NodeError::Config(m) => f.write_str(m),
            NodeError::Service(e) => e.fmt(f),
            NodeError::ServiceStart(m) => {
                write!(f, "starting an atomic service for this node: {m}")
            }
            NodeError::Shm { context, source } => write!(f, "{context}: {source}"),
            NodeError::ServiceGone { path } => write!(
                f,
                "the local atomic service (control socket {}) closed the connection: it stopped or died",
                path.display()
            ),
            NodeError::Unreachable { node, addr, waited } => write!(
                f,
                "node {node} ({addr}): no answer for {:.1} s",
                waited.as_secs_f64()
            ),
            NodeError::PeerRefused {
                node,
                addr,
                refusal,
            } => {
                use gsas_core::reliable::RefusalReason;
                // What the refusal means for this operation: an ended job's came after
                // the job; a reclaimed job's names its cause; the others have figures.
                let tail = match refusal.reason {
                    RefusalReason::JobEnded => "; this operation came after that",
                    RefusalReason::JobReclaimed => "",
                    _ => " (its log has the figures)",
                };
                write!(
                    f,
                    "node {node} ({addr}): the atomic service there refused this PE: {refusal}{tail}"
                )
            }
            NodeError::Refused { op, node, code } => {
                write!(f, "{op}: refused by node {node}: {code}")
            }
            NodeError::Timeout { what, waited } => write!(
                f,
                "timed out after {:.1} s waiting for {what}",
                waited.as_secs_f64()
            ),
            NodeError::Invalid(m) => f.write_str(m),
            NodeError::Transport(m) => write!(f, "transport failure: {m}"),
            NodeError::Heap(e) => write!(f, "symmetric heap: {e}"),
            NodeError::Finalized => f.write_str("the node client was finalized"),
        }
    }
}

impl std::error::Error for NodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NodeError::Pmi { source, .. } => Some(source),
            NodeError::Service(e) => Some(e),
            NodeError::Shm { source, .. } => Some(source),
            NodeError::Heap(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ControlError> for NodeError {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::Closed { path } => NodeError::ServiceGone { path },
            other => NodeError::Service(other),
        }
    }
}

impl From<gsas_core::symheap::AllocError> for NodeError {
    fn from(e: gsas_core::symheap::AllocError) -> Self {
        NodeError::Heap(e)
    }
}

pub(crate) fn pmi(context: impl Into<String>) -> impl FnOnce(PmiError) -> NodeError {
    let context = context.into();
    move |source| NodeError::Pmi { context, source }
}

pub(crate) fn shm(context: impl Into<String>) -> impl FnOnce(ShmError) -> NodeError {
    let context = context.into();
    move |source| NodeError::Shm { context, source }
}

#[cfg(test)]
mod tests {
    use super::NodeError;
    use gsas_core::reliable::{Refusal, RefusalReason};
    use gsas_transport::net::NetAddr;

    #[test]
    fn a_refusal_says_what_it_means_for_the_operation() {
        // The service sends figures only with the refusals of a full share or table.
        let text = |reason, n| {
            NodeError::PeerRefused {
                node: 1,
                addr: NetAddr::Udp("10.0.0.2:7470".parse().unwrap()),
                refusal: Refusal {
                    reason,
                    in_use: n,
                    limit: n,
                },
            }
            .to_string()
        };
        let ended = text(RefusalReason::JobEnded, 0);
        assert!(
            ended.ends_with("; this operation came after that"),
            "{ended}"
        );
        let reclaimed = text(RefusalReason::JobReclaimed, 0);
        assert!(
            reclaimed.starts_with("node 1 (10.0.0.2:7470): the atomic service there refused this PE: the job was reclaimed there")
                && reclaimed.ends_with("see that PE's exit"),
            "{reclaimed}"
        );
        let full = text(RefusalReason::JobFull, 12);
        assert!(
            full.ends_with("(12 of 12 in use) (its log has the figures)"),
            "{full}"
        );
    }
}
