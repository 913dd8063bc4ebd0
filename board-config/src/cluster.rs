//! The cluster: its nodes, boards and job defaults, with lookups.
//!
//! What it is: [`Cluster`], a validated description of a gsas cluster, built either by
//! [`Cluster::new`] from values (tests, the emulator, presets) or by the TOML loader
//! (feature `std`), and [`JobDefaults`].
//!
//! What it is not: a registry of live nodes. It holds what the configuration says, not
//! which services answer.
//!
//! Invariant: a `Cluster` has passed every check of [`crate::validate`] (listed in
//! `docs/config.md`), so ids, names, coordinates and (host, port) pairs are unique and the
//! lookups below are unambiguous. The fields are private to keep it that way; take the
//! parts with [`Cluster::into_parts`], change them, and build a new `Cluster`.
//!
//! Thread safety: immutable after construction (`Send + Sync`); share it by reference or
//! `Arc`.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use crate::board::Board;
use crate::coord::Coord;
use crate::keys::{
    DEFAULT_FORK_ALLOWED, DEFAULT_SERVICE_TIMEOUT_MS, DEFAULT_SYMMETRIC_SIZE, DEFAULT_UDP_MTU,
};
use crate::node::Node;
use crate::placement::{Placement, PlacementError, place};
use crate::validate::{ValidationError, validate};

/// Defaults for jobs started on the cluster (the `[defaults]` table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobDefaults {
    /// Symmetric heap size per PE, in bytes.
    pub symmetric_size: u64,
    /// How long a PE waits for an atomic service to answer before failing, in ms.
    pub service_timeout_ms: u32,
    /// UDP payload bytes per datagram, the same for every process of a job.
    pub udp_mtu: u32,
    /// Whether daemons serve authenticated remote FORK requests (off unless configured).
    pub fork_allowed: bool,
    /// Path of the shared secret for remote FORK; required when `fork_allowed`.
    pub fork_secret_file: Option<String>,
    /// `verbs_rma = "service"`: RMA between verbs nodes through the atomic services.
    pub verbs_rma_via_service: bool,
    /// Whether a daemon admits PEs of users other than root only under an allocation the
    /// resource manager declared (`gsas-atomicd declare`).
    pub require_allocation: bool,
}

impl Default for JobDefaults {
    /// The key table's defaults: 64 MiB heap, 10 s service timeout, UDP MTU 61440, remote
    /// fork off.
    fn default() -> Self {
        Self {
            symmetric_size: DEFAULT_SYMMETRIC_SIZE,
            service_timeout_ms: DEFAULT_SERVICE_TIMEOUT_MS,
            udp_mtu: DEFAULT_UDP_MTU,
            fork_allowed: DEFAULT_FORK_ALLOWED,
            fork_secret_file: None,
            verbs_rma_via_service: false,
            require_allocation: false,
        }
    }
}

/// A validated cluster description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    name: String,
    defaults: JobDefaults,
    nodes: Vec<Node>,
    boards: Vec<Board>,
    by_id: BTreeMap<u16, usize>,
    by_coord: BTreeMap<Coord, usize>,
}

impl Cluster {
    /// Builds and validates a cluster.
    ///
    /// Nodes listed by a board whose `board` field is `None` get that board's id first;
    /// then every check of [`crate::validate`] runs, and the first failure is returned with
    /// the key path it concerns (`nodes[1].udp_port`). Node order is kept: it is the
    /// placement order.
    pub fn new(
        name: impl Into<String>,
        defaults: JobDefaults,
        mut nodes: Vec<Node>,
        boards: Vec<Board>,
    ) -> Result<Self, ValidationError> {
        let name = name.into();
        for board in &boards {
            for node in nodes.iter_mut() {
                if node.board.is_none() && board.nodes.contains(&node.id) {
                    node.board = Some(board.id);
                }
            }
        }
        validate(&name, &defaults, &nodes, &boards)?;
        let by_id = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
        let by_coord = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.coord, i))
            .collect();
        Ok(Self {
            name,
            defaults,
            nodes,
            boards,
            by_id,
            by_coord,
        })
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Job defaults.
    pub fn defaults(&self) -> &JobDefaults {
        &self.defaults
    }

    /// All nodes, in placement order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// All boards.
    pub fn boards(&self) -> &[Board] {
        &self.boards
    }

    /// The node with id `id`.
    pub fn node(&self, id: u16) -> Option<&Node> {
        self.by_id.get(&id).map(|&i| &self.nodes[i])
    }

    /// The node with coordinate `coord` (e.g. the source of an Exanet packet).
    pub fn node_by_coord(&self, coord: Coord) -> Option<&Node> {
        self.by_coord.get(&coord).map(|&i| &self.nodes[i])
    }

    /// The node whose service is at `host`:`port` (e.g. the source of a UDP datagram).
    /// Hosts compare as written; no name resolution happens. Linear in the node count.
    pub fn node_by_addr(&self, host: &str, port: u16) -> Option<&Node> {
        self.nodes
            .iter()
            .find(|n| n.udp_port == port && n.host == host)
    }

    /// The node named `name`. Linear in the node count.
    pub fn node_by_name(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The board with id `id`.
    pub fn board(&self, id: u16) -> Option<&Board> {
        self.boards.iter().find(|b| b.id == id)
    }

    /// The board node `node` sits on, if any.
    pub fn board_of(&self, node: u16) -> Option<&Board> {
        self.node(node)
            .and_then(|n| n.board)
            .and_then(|b| self.board(b))
    }

    /// Node ids in placement order.
    pub fn node_ids(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes.iter().map(|n| n.id)
    }

    /// Places `n_pes` ranks on all nodes of the cluster, in order (see [`crate::place`]).
    pub fn place(&self, n_pes: u32, ppn: Option<u32>) -> Result<Placement, PlacementError> {
        let ids: Vec<u16> = self.node_ids().collect();
        place(n_pes, &ids, ppn)
    }

    /// Takes the cluster apart: `(name, defaults, nodes, boards)`.
    pub fn into_parts(self) -> (String, JobDefaults, Vec<Node>, Vec<Board>) {
        (self.name, self.defaults, self.nodes, self.boards)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::BoardKind;
    use alloc::vec;

    fn two_nodes() -> Vec<Node> {
        let mut a = Node::new(4, Coord::from_index(4).unwrap(), "127.0.0.1");
        a.udp_port = 7000;
        a.control_socket = String::from("/tmp/a.sock");
        let mut b = Node::new(9, Coord::from_index(9).unwrap(), "127.0.0.1");
        b.udp_port = 7001;
        b.control_socket = String::from("/tmp/b.sock");
        vec![a, b]
    }

    #[test]
    fn lookups() {
        let boards = vec![Board::new(3, BoardKind::Custom, vec![9])];
        let c = Cluster::new("t", JobDefaults::default(), two_nodes(), boards).unwrap();
        assert_eq!(c.name(), "t");
        assert_eq!(c.node(9).unwrap().udp_port, 7001);
        assert!(c.node(5).is_none());
        assert_eq!(c.node_by_addr("127.0.0.1", 7000).unwrap().id, 4);
        assert!(c.node_by_addr("localhost", 7000).is_none());
        assert!(c.node_by_addr("127.0.0.1", 7002).is_none());
        assert_eq!(
            c.node_by_coord(Coord::from_index(9).unwrap()).unwrap().id,
            9
        );
        assert!(c.node_by_coord(Coord::from_index(5).unwrap()).is_none());
        assert_eq!(c.node_by_name("node4").unwrap().id, 4);
        assert_eq!(c.node_ids().collect::<Vec<_>>(), [4, 9]);
        // The board id was filled in from the board's node list.
        assert_eq!(c.node(9).unwrap().board, Some(3));
        assert_eq!(c.board_of(9).unwrap().id, 3);
        assert!(c.board_of(4).is_none());
        assert_eq!(c.board(3).unwrap().nodes, [9]);
        let p = c.place(3, None).unwrap();
        assert_eq!(p.pes_of(4), Some(0..2));
        assert_eq!(p.pes_of(9), Some(2..3));
        let (name, defaults, nodes, boards) = c.into_parts();
        assert_eq!((name.as_str(), nodes.len(), boards.len()), ("t", 2, 1));
        assert_eq!(defaults, JobDefaults::default());
    }

    #[test]
    fn invalid_input_is_refused() {
        let mut nodes = two_nodes();
        nodes[1].udp_port = 7000;
        let err = Cluster::new("t", JobDefaults::default(), nodes, vec![]).unwrap_err();
        assert_eq!(alloc::format!("{}", err.path), "nodes[1].udp_port");
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Cluster>();
        check::<Placement>();
    }
}
