//! Nodes: one atomic service each.
//!
//! What it is: [`Node`], the description of one node of a cluster (identity, Exanet
//! coordinate, network and local addresses of its atomic service, UIO devices, resources,
//! transport, board), and [`Transport`].
//!
//! What it is not: a connection. A `Node` says where a service is; the `gsas` runtime and
//! the transports reach it. Whether a `Node` is consistent with the rest of its cluster is
//! checked by [`crate::Cluster::new`].
//!
//! Thread safety: plain owned data (`Send + Sync`), no interior mutability.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;

use crate::coord::Coord;
use crate::keys::{DEFAULT_CONTROL_SOCKET, DEFAULT_UDP_PORT};

/// How the other nodes reach a node's atomic service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// UDP datagrams with gsas's reliability layer (any Ethernet).
    Udp,
    /// The Exanet NI through UIO (QFDB-style boards).
    Exanet,
    /// Shared memory only: a single-node cluster.
    Shm,
    /// InfiniBand / RoCE verbs.
    Verbs,
}

impl Transport {
    /// All transports, in the order of the key table's choice list.
    pub const ALL: [Self; 4] = [Self::Udp, Self::Exanet, Self::Shm, Self::Verbs];

    /// The configuration word (`udp`, `exanet`, `shm`, `verbs`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Exanet => "exanet",
            Self::Shm => "shm",
            Self::Verbs => "verbs",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A word that names no [`Transport`] or [`crate::BoardKind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownWord {
    /// The word given.
    pub word: String,
    /// The accepted words.
    pub expected: &'static [&'static str],
}

impl fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\" is not one of ", self.word)?;
        for (i, w) in self.expected.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "\"{w}\"")?;
        }
        Ok(())
    }
}

impl core::error::Error for UnknownWord {}

impl FromStr for Transport {
    type Err = UnknownWord;

    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| UnknownWord {
                word: String::from(s),
                expected: match crate::keys::NODE_TRANSPORT.kind {
                    crate::keys::ValueKind::Choice(words) => words,
                    _ => &[],
                },
            })
    }
}

/// One node: an atomic service and the PEs placed next to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Unique id.
    pub id: u16,
    /// Unique human-readable name.
    pub name: String,
    /// Exanet coordinate (unique; meaningful for `exanet` nodes, an identifier otherwise).
    pub coord: Coord,
    /// IP address or host name of the service.
    pub host: String,
    /// UDP port of the service.
    pub udp_port: u16,
    /// Address the service binds to.
    pub bind: String,
    /// Unix socket path of the service for processes on the same node.
    pub control_socket: String,
    /// UIO device names of the node's Exanet endpoints (`exanet-ep0`, ...).
    pub uio_devices: Vec<String>,
    /// Cores available to PEs; `None`: ask the operating system.
    pub cores: Option<u32>,
    /// Memory the service may hand out, in bytes; `None`: no configured limit.
    pub memory: Option<u64>,
    /// Memory one job may book, in bytes; `None`: half of the node's limit.
    pub job_memory: Option<u64>,
    /// Memory one user's jobs may book together, in bytes; `None`: half of the node's limit.
    pub user_memory: Option<u64>,
    /// Network peers the service keeps state for.
    pub max_peers: u32,
    /// How other nodes reach this one.
    pub transport: Transport,
    /// `verbs`: the RDMA device; `None`: the first with an active port.
    pub verbs_device: Option<String>,
    /// `verbs`: the device port; `None`: its first active port.
    pub verbs_port: Option<u8>,
    /// `verbs`: the source GID index.
    pub verbs_gid_index: u8,
    /// Id of the board the node sits on, if any.
    pub board: Option<u16>,
}

impl Node {
    /// A node with every optional key at its default from the key table: name `node<id>`,
    /// UDP port [`DEFAULT_UDP_PORT`], bind address = `host`, control socket
    /// [`DEFAULT_CONTROL_SOCKET`], no UIO devices, cores and memory unset, transport UDP,
    /// no board.
    pub fn new(id: u16, coord: Coord, host: impl Into<String>) -> Self {
        let host = host.into();
        Self {
            id,
            name: format!("node{id}"),
            coord,
            bind: host.clone(),
            host,
            udp_port: DEFAULT_UDP_PORT,
            control_socket: String::from(DEFAULT_CONTROL_SOCKET),
            uio_devices: Vec::new(),
            cores: None,
            memory: None,
            job_memory: None,
            user_memory: None,
            max_peers: crate::keys::DEFAULT_MAX_PEERS,
            transport: Transport::Udp,
            verbs_device: None,
            verbs_port: None,
            verbs_gid_index: 0,
            board: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn transport_words_round_trip_and_match_key_table() {
        for t in Transport::ALL {
            assert_eq!(t.to_string().parse::<Transport>(), Ok(t));
        }
        let crate::keys::ValueKind::Choice(words) = crate::keys::NODE_TRANSPORT.kind else {
            panic!("transport key is not a choice");
        };
        let names: Vec<&str> = Transport::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names, words);
        let err = "tcp".parse::<Transport>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"tcp\" is not one of \"udp\", \"exanet\", \"shm\", \"verbs\""
        );
    }

    #[test]
    fn new_applies_table_defaults() {
        let n = Node::new(7, Coord::from_index(7).unwrap(), "10.0.0.7");
        assert_eq!(n.name, "node7");
        assert_eq!(n.bind, "10.0.0.7");
        assert_eq!(n.udp_port, 7470);
        assert_eq!(n.control_socket, "/run/gsas/atomicd.sock");
        assert_eq!(n.transport, Transport::Udp);
        assert!(n.uio_devices.is_empty() && n.cores.is_none() && n.board.is_none());
    }
}
