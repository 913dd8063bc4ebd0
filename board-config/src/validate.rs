//! Consistency checks of a cluster description.
//!
//! What it is: the checks [`crate::Cluster::new`] runs on every cluster, however it was
//! built, and [`ValidationError`], which names the offending key (`nodes[1].udp_port`) and
//! the reason. The TOML loader turns the key path into a file line.
//!
//! The checks, in the order they run (the first failure is reported):
//! 1. `cluster.name` is not empty; the integer and size values of `[defaults]` are in the
//!    key table's ranges; `fork_allowed` has a `fork_secret_file`; paths are absolute.
//! 2. There is at least one node.
//! 3. Per node: name, host and bind address not empty and without whitespace; port, cores
//!    and memory in range; absolute control socket; UIO device names not empty, without
//!    `/` or whitespace, not repeated; `exanet` nodes have a UIO device; `shm` nodes are
//!    alone in their cluster.
//! 4. Unique node ids.
//! 5. Per board: unique id, non-empty name, at least one node, only defined nodes, each
//!    once, none on two boards; a `qfdb` board has four nodes on one board coordinate with
//!    distinct FPGA positions.
//! 6. Unique node names, coordinates, (host, UDP port) and (host, control socket).
//! 7. A node's `board`, when set, names the board that lists it.
//!
//! What it is not: a reachability check. Hosts are compared as written and not resolved.
//!
//! Thread safety: pure functions over borrowed data.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use core::fmt;

use crate::board::{Board, BoardKind};
use crate::cluster::JobDefaults;
use crate::keys::{self, KeyPath, KeySpec};
use crate::node::{Node, Transport};

/// A failed check: which key, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    /// The key the error concerns.
    pub path: KeyPath,
    /// What is wrong, in one sentence without the key.
    pub reason: String,
}

impl ValidationError {
    fn new(path: KeyPath, reason: String) -> Self {
        Self { path, reason }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl core::error::Error for ValidationError {}

type Check = Result<(), ValidationError>;

fn node_key(spec: &KeySpec, i: usize) -> KeyPath {
    KeyPath::item(spec, i)
}

fn word(path: KeyPath, what: &str, value: &str) -> Check {
    if value.is_empty() {
        return Err(ValidationError::new(path, format!("{what} is empty")));
    }
    if value.chars().any(char::is_whitespace) {
        return Err(ValidationError::new(
            path,
            format!("{what} \"{value}\" contains whitespace"),
        ));
    }
    Ok(())
}

fn absolute(path: KeyPath, value: &str) -> Check {
    if value.starts_with('/') {
        Ok(())
    } else {
        Err(ValidationError::new(
            path,
            format!("\"{value}\" is not an absolute path"),
        ))
    }
}

fn int_range(path: KeyPath, spec: &KeySpec, value: i64) -> Check {
    spec.check_int(value)
        .map_err(|reason| ValidationError::new(path, reason))
}

fn size_range(path: KeyPath, spec: &KeySpec, value: u64) -> Check {
    spec.check_size(value)
        .map_err(|reason| ValidationError::new(path, reason))
}

/// Runs every check; see the module docs.
pub(crate) fn validate(
    name: &str,
    defaults: &JobDefaults,
    nodes: &[Node],
    boards: &[Board],
) -> Check {
    if name.is_empty() {
        return Err(ValidationError::new(
            KeyPath::key(&keys::CLUSTER_NAME),
            String::from("cluster name is empty"),
        ));
    }
    check_defaults(defaults)?;
    if nodes.is_empty() {
        return Err(ValidationError::new(
            KeyPath::key(&keys::ROOT_NODES),
            String::from("the cluster has no nodes; describe each node in a [[nodes]] table"),
        ));
    }
    for (i, node) in nodes.iter().enumerate() {
        check_node(i, node, nodes.len())?;
    }
    unique(
        nodes,
        &keys::NODE_ID,
        |n| n.id,
        |n| format!("node id {}", n.id),
    )?;
    // Boards before the other uniqueness checks: two nodes of a QFDB at the same fpga
    // position also share a coordinate, and the board's message says more.
    check_boards(nodes, boards)?;
    check_unique_nodes(nodes)?;
    check_node_boards(nodes, boards)
}

fn check_defaults(d: &JobDefaults) -> Check {
    size_range(
        KeyPath::key(&keys::DEFAULTS_SYMMETRIC_SIZE),
        &keys::DEFAULTS_SYMMETRIC_SIZE,
        d.symmetric_size,
    )?;
    int_range(
        KeyPath::key(&keys::DEFAULTS_SERVICE_TIMEOUT_MS),
        &keys::DEFAULTS_SERVICE_TIMEOUT_MS,
        i64::from(d.service_timeout_ms),
    )?;
    int_range(
        KeyPath::key(&keys::DEFAULTS_UDP_MTU),
        &keys::DEFAULTS_UDP_MTU,
        i64::from(d.udp_mtu),
    )?;
    if let Some(path) = &d.fork_secret_file {
        absolute(KeyPath::key(&keys::DEFAULTS_FORK_SECRET_FILE), path)?;
    } else if d.fork_allowed {
        return Err(ValidationError::new(
            KeyPath::key(&keys::DEFAULTS_FORK_ALLOWED),
            String::from(
                "remote fork is enabled but defaults.fork_secret_file is not set; \
                 the daemon only forks for requests authenticated with that secret",
            ),
        ));
    }
    Ok(())
}

fn check_node(i: usize, n: &Node, node_count: usize) -> Check {
    word(node_key(&keys::NODE_NAME, i), "node name", &n.name)?;
    word(node_key(&keys::NODE_HOST, i), "host", &n.host)?;
    word(node_key(&keys::NODE_BIND, i), "bind address", &n.bind)?;
    int_range(
        node_key(&keys::NODE_UDP_PORT, i),
        &keys::NODE_UDP_PORT,
        i64::from(n.udp_port),
    )?;
    absolute(node_key(&keys::NODE_CONTROL_SOCKET, i), &n.control_socket)?;
    if let Some(cores) = n.cores {
        int_range(
            node_key(&keys::NODE_CORES, i),
            &keys::NODE_CORES,
            i64::from(cores),
        )?;
    }
    if let Some(memory) = n.memory {
        size_range(node_key(&keys::NODE_MEMORY, i), &keys::NODE_MEMORY, memory)?;
    }
    for (key, value) in [
        (&keys::NODE_JOB_MEMORY, n.job_memory),
        (&keys::NODE_USER_MEMORY, n.user_memory),
    ] {
        let Some(v) = value else {
            continue;
        };
        size_range(node_key(key, i), key, v)?;
        if n.memory.is_some_and(|m| v > m) {
            return Err(ValidationError::new(
                node_key(key, i),
                format!(
                    "{v} bytes is more than the node's limit `memory` ({} bytes)",
                    n.memory.unwrap_or_default()
                ),
            ));
        }
    }
    int_range(
        node_key(&keys::NODE_MAX_PEERS, i),
        &keys::NODE_MAX_PEERS,
        i64::from(n.max_peers),
    )?;
    let uio = node_key(&keys::NODE_UIO_DEVICES, i);
    for (k, dev) in n.uio_devices.iter().enumerate() {
        word(uio, "UIO device name", dev)?;
        if dev.contains('/') {
            return Err(ValidationError::new(
                uio,
                format!("UIO device name \"{dev}\" contains '/'; give the name, not a path"),
            ));
        }
        if n.uio_devices[..k].contains(dev) {
            return Err(ValidationError::new(
                uio,
                format!("UIO device \"{dev}\" is listed twice"),
            ));
        }
    }
    if n.transport == Transport::Exanet && n.uio_devices.is_empty() {
        return Err(ValidationError::new(
            uio,
            String::from("an exanet node needs at least one UIO device (e.g. \"exanet-ep0\")"),
        ));
    }
    if n.transport == Transport::Shm && node_count > 1 {
        return Err(ValidationError::new(
            node_key(&keys::NODE_TRANSPORT, i),
            format!(
                "transport \"shm\" is only for a single-node cluster, and this one has {node_count} nodes"
            ),
        ));
    }
    Ok(())
}

/// Reports the second holder of a value that must be unique, naming the first.
fn unique<'a, K: Ord>(
    nodes: &'a [Node],
    spec: &KeySpec,
    key: impl Fn(&'a Node) -> K,
    describe: impl Fn(&Node) -> String,
) -> Check {
    let mut seen: BTreeMap<K, usize> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if let Some(&first) = seen.get(&key(n)) {
            return Err(ValidationError::new(
                node_key(spec, i),
                format!(
                    "{} is also used by nodes[{first}] (id {})",
                    describe(n),
                    nodes[first].id
                ),
            ));
        }
        seen.insert(key(n), i);
    }
    Ok(())
}

fn check_unique_nodes(nodes: &[Node]) -> Check {
    unique(
        nodes,
        &keys::NODE_NAME,
        |n| n.name.as_str(),
        |n| format!("node name \"{}\"", n.name),
    )?;
    unique(
        nodes,
        &keys::NODE_COORD,
        |n| n.coord,
        |n| format!("coordinate {}", n.coord),
    )?;
    unique(
        nodes,
        &keys::NODE_UDP_PORT,
        |n| (n.host.as_str(), n.udp_port),
        |n| format!("UDP port {} on host {}", n.udp_port, n.host),
    )?;
    unique(
        nodes,
        &keys::NODE_CONTROL_SOCKET,
        |n| (n.host.as_str(), n.control_socket.as_str()),
        |n| format!("control socket {} on host {}", n.control_socket, n.host),
    )
}

fn check_boards(nodes: &[Node], boards: &[Board]) -> Check {
    let by_id: BTreeMap<u16, &Node> = nodes.iter().map(|n| (n.id, n)).collect();
    let mut board_ids: BTreeMap<u16, usize> = BTreeMap::new();
    // node id -> index of the board that lists it
    let mut owner: BTreeMap<u16, usize> = BTreeMap::new();
    for (j, b) in boards.iter().enumerate() {
        let id_path = KeyPath::item(&keys::BOARD_ID, j);
        let nodes_path = KeyPath::item(&keys::BOARD_NODES, j);
        if let Some(&first) = board_ids.get(&b.id) {
            return Err(ValidationError::new(
                id_path,
                format!("board id {} is also used by boards[{first}]", b.id),
            ));
        }
        board_ids.insert(b.id, j);
        if b.name.is_empty() {
            return Err(ValidationError::new(
                KeyPath::item(&keys::BOARD_NAME, j),
                String::from("board name is empty"),
            ));
        }
        if b.nodes.is_empty() {
            return Err(ValidationError::new(
                nodes_path,
                String::from("a board lists at least one node"),
            ));
        }
        for (k, &id) in b.nodes.iter().enumerate() {
            if !by_id.contains_key(&id) {
                return Err(ValidationError::new(
                    nodes_path,
                    format!("node {id} is not defined (no [[nodes]] table has id = {id})"),
                ));
            }
            if b.nodes[..k].contains(&id) {
                return Err(ValidationError::new(
                    nodes_path,
                    format!("node {id} is listed twice"),
                ));
            }
            if let Some(&other) = owner.get(&id) {
                return Err(ValidationError::new(
                    nodes_path,
                    format!(
                        "node {id} is also on boards[{other}] (id {}); a node is on at most one board",
                        boards[other].id
                    ),
                ));
            }
            owner.insert(id, j);
        }
        if b.kind == BoardKind::Qfdb {
            check_qfdb(nodes_path, b, &by_id)?;
        }
    }
    Ok(())
}

fn check_qfdb(path: KeyPath, b: &Board, by_id: &BTreeMap<u16, &Node>) -> Check {
    if b.nodes.len() != Board::QFDB_NODES {
        return Err(ValidationError::new(
            path,
            format!(
                "a qfdb board has exactly {} nodes, this one lists {}",
                Board::QFDB_NODES,
                b.nodes.len()
            ),
        ));
    }
    let coords: alloc::vec::Vec<(u16, crate::Coord)> = b
        .nodes
        .iter()
        .filter_map(|id| by_id.get(id).map(|n| (*id, n.coord)))
        .collect();
    let (first_id, first) = coords[0];
    for (k, &(id, c)) in coords.iter().enumerate().skip(1) {
        if !c.same_board(first) {
            return Err(ValidationError::new(
                path,
                format!(
                    "node {id} (coordinate {c}) and node {first_id} (coordinate {first}) are not \
                     on one board: the nodes of a qfdb board differ only in fpga"
                ),
            ));
        }
        if let Some(&(other, _)) = coords[..k].iter().find(|(_, o)| o.fpga() == c.fpga()) {
            return Err(ValidationError::new(
                path,
                format!(
                    "nodes {other} and {id} both have fpga position {}; a qfdb board has fpga 0, 1, 2 and 3",
                    c.fpga()
                ),
            ));
        }
    }
    Ok(())
}

fn check_node_boards(nodes: &[Node], boards: &[Board]) -> Check {
    for (i, n) in nodes.iter().enumerate() {
        let Some(b) = n.board else { continue };
        let path = node_key(&keys::NODE_BOARD, i);
        let lister = boards.iter().position(|bd| bd.nodes.contains(&n.id));
        match lister {
            Some(j) if boards[j].id == b => {}
            Some(j) => {
                return Err(ValidationError::new(
                    path,
                    format!(
                        "node {} is listed by boards[{j}] (id {}) but sets board = {b}",
                        n.id, boards[j].id
                    ),
                ));
            }
            None => {
                let reason = match boards.iter().position(|bd| bd.id == b) {
                    Some(j) => format!(
                        "board {b} (boards[{j}]) does not list node {} in its nodes",
                        n.id
                    ),
                    None => format!("board {b} is not defined (no [[boards]] table has id = {b})"),
                };
                return Err(ValidationError::new(path, reason));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Coord;
    use crate::cluster::Cluster;
    use alloc::string::ToString;
    use alloc::vec;
    use alloc::vec::Vec;

    fn udp(id: u16, port: u16) -> Node {
        let mut n = Node::new(id, Coord::from_index(u32::from(id)).unwrap(), "127.0.0.1");
        n.udp_port = port;
        n.control_socket = format!("/tmp/gsas-{id}.sock");
        n
    }

    fn qfdb_nodes() -> Vec<Node> {
        let (_, nodes) = Board::qfdb(0, Coord::default(), 0, "q{fpga}").unwrap();
        nodes.to_vec()
    }

    fn err(nodes: Vec<Node>, boards: Vec<Board>) -> String {
        err_with(JobDefaults::default(), nodes, boards)
    }

    fn err_with(d: JobDefaults, nodes: Vec<Node>, boards: Vec<Board>) -> String {
        Cluster::new("c", d, nodes, boards)
            .expect_err("cluster should be refused")
            .to_string()
    }

    #[test]
    fn memory_shares_fit_the_node_limit() {
        let mut n = udp(0, 1);
        n.memory = Some(1 << 30);
        n.user_memory = Some(2 << 30);
        assert_eq!(
            err(vec![n.clone()], vec![]),
            "nodes[0].user_memory: 2147483648 bytes is more than the node's limit `memory` (1073741824 bytes)"
        );
        n.user_memory = Some(1 << 30);
        n.job_memory = Some(1 << 29);
        n.max_peers = 8;
        assert!(err(vec![n.clone()], vec![]).starts_with("nodes[0].max_peers: "));
        n.max_peers = 16;
        assert!(Cluster::new("c", JobDefaults::default(), vec![n], vec![]).is_ok());
    }

    #[test]
    fn defaults_checks() {
        let d = JobDefaults {
            fork_allowed: true,
            ..JobDefaults::default()
        };
        assert!(
            err_with(d, vec![udp(0, 1)], vec![])
                .starts_with("defaults.fork_allowed: remote fork is enabled")
        );
        let d = JobDefaults {
            fork_secret_file: Some("secret".to_string()),
            ..JobDefaults::default()
        };
        assert_eq!(
            err_with(d, vec![udp(0, 1)], vec![]),
            "defaults.fork_secret_file: \"secret\" is not an absolute path"
        );
        let d = JobDefaults {
            symmetric_size: 100,
            ..JobDefaults::default()
        };
        assert_eq!(
            err_with(d, vec![udp(0, 1)], vec![]),
            "defaults.symmetric_size: 100 is out of range 4k..=256t"
        );
        let d = JobDefaults {
            service_timeout_ms: 0,
            ..JobDefaults::default()
        };
        assert_eq!(
            err_with(d, vec![udp(0, 1)], vec![]),
            "defaults.service_timeout_ms: 0 is out of range 1..=3600000"
        );
        let d = JobDefaults {
            udp_mtu: 100,
            ..JobDefaults::default()
        };
        assert_eq!(
            err_with(d, vec![udp(0, 1)], vec![]),
            "defaults.udp_mtu: 100 is out of range 1024..=65000"
        );
        assert!(Cluster::new("", JobDefaults::default(), vec![udp(0, 1)], vec![]).is_err());
    }

    #[test]
    fn node_checks() {
        assert!(err(vec![], vec![]).starts_with("nodes: the cluster has no nodes"));
        let mut n = udp(0, 0);
        assert_eq!(
            err(vec![n.clone()], vec![]),
            "nodes[0].udp_port: 0 is out of range 1..=65535"
        );
        n.udp_port = 1;
        n.bind = "0.0.0.0 x".to_string();
        assert_eq!(
            err(vec![n.clone()], vec![]),
            "nodes[0].bind: bind address \"0.0.0.0 x\" contains whitespace"
        );
        n.bind = n.host.clone();
        n.cores = Some(0);
        assert_eq!(
            err(vec![n.clone()], vec![]),
            "nodes[0].cores: 0 is out of range 1..=1048576"
        );
        n.cores = None;
        n.control_socket = "relative.sock".to_string();
        assert_eq!(
            err(vec![n.clone()], vec![]),
            "nodes[0].control_socket: \"relative.sock\" is not an absolute path"
        );
        n.control_socket = "/tmp/x.sock".to_string();
        n.transport = Transport::Exanet;
        assert!(
            err(vec![n.clone()], vec![]).starts_with("nodes[0].uio_devices: an exanet node needs")
        );
        n.uio_devices = vec!["/dev/uio0".to_string()];
        assert!(err(vec![n.clone()], vec![]).contains("contains '/'"));
        n.uio_devices = vec!["exanet-ep0".to_string(), "exanet-ep0".to_string()];
        assert!(err(vec![n.clone()], vec![]).contains("listed twice"));
        n.uio_devices.pop();
        assert!(Cluster::new("c", JobDefaults::default(), vec![n.clone()], vec![]).is_ok());
        n.transport = Transport::Shm;
        assert!(Cluster::new("c", JobDefaults::default(), vec![n.clone()], vec![]).is_ok());
        assert_eq!(
            err(vec![n, udp(1, 2)], vec![]),
            "nodes[0].transport: transport \"shm\" is only for a single-node cluster, and this one has 2 nodes"
        );
    }

    #[test]
    fn duplicate_checks() {
        assert_eq!(
            err(vec![udp(0, 1), udp(0, 2)], vec![]),
            "nodes[1].id: node id 0 is also used by nodes[0] (id 0)"
        );
        let mut b = udp(1, 2);
        b.coord = Coord::from_index(0).unwrap();
        assert_eq!(
            err(vec![udp(0, 1), b], vec![]),
            "nodes[1].coord: coordinate 0.0.0.0.0 is also used by nodes[0] (id 0)"
        );
        assert_eq!(
            err(vec![udp(0, 1), udp(1, 1)], vec![]),
            "nodes[1].udp_port: UDP port 1 on host 127.0.0.1 is also used by nodes[0] (id 0)"
        );
        let mut b = udp(1, 2);
        b.control_socket = "/tmp/gsas-0.sock".to_string();
        assert_eq!(
            err(vec![udp(0, 1), b.clone()], vec![]),
            "nodes[1].control_socket: control socket /tmp/gsas-0.sock on host 127.0.0.1 is also used by nodes[0] (id 0)"
        );
        // The same socket path on another host is fine.
        b.host = "10.0.0.2".to_string();
        b.bind = b.host.clone();
        assert!(Cluster::new("c", JobDefaults::default(), vec![udp(0, 1), b], vec![]).is_ok());
        let mut b = udp(1, 2);
        b.name = "node0".to_string();
        assert!(err(vec![udp(0, 1), b], vec![]).starts_with("nodes[1].name: node name \"node0\""));
    }

    #[test]
    fn board_checks() {
        let custom = |id, nodes: Vec<u16>| Board::new(id, BoardKind::Custom, nodes);
        let nodes = || vec![udp(0, 1), udp(1, 2), udp(2, 3)];
        assert_eq!(
            err(nodes(), vec![custom(0, vec![0, 7])]),
            "boards[0].nodes: node 7 is not defined (no [[nodes]] table has id = 7)"
        );
        assert_eq!(
            err(nodes(), vec![custom(0, vec![1, 1])]),
            "boards[0].nodes: node 1 is listed twice"
        );
        assert_eq!(
            err(nodes(), vec![custom(0, vec![1]), custom(1, vec![2, 1])]),
            "boards[1].nodes: node 1 is also on boards[0] (id 0); a node is on at most one board"
        );
        assert_eq!(
            err(nodes(), vec![custom(4, vec![1]), custom(4, vec![2])]),
            "boards[1].id: board id 4 is also used by boards[0]"
        );
        assert_eq!(
            err(nodes(), vec![custom(0, vec![])]),
            "boards[0].nodes: a board lists at least one node"
        );
        let mut n = nodes();
        n[0].board = Some(9);
        assert_eq!(
            err(n, vec![]),
            "nodes[0].board: board 9 is not defined (no [[boards]] table has id = 9)"
        );
        let mut n = nodes();
        n[0].board = Some(1);
        assert_eq!(
            err(n.clone(), vec![custom(1, vec![2])]),
            "nodes[0].board: board 1 (boards[0]) does not list node 0 in its nodes"
        );
        assert_eq!(
            err(n, vec![custom(1, vec![2]), custom(2, vec![0])]),
            "nodes[0].board: node 0 is listed by boards[1] (id 2) but sets board = 1"
        );
    }

    #[test]
    fn qfdb_checks() {
        let (board, nodes) = Board::qfdb(0, Coord::default(), 0, "q{fpga}").unwrap();
        assert!(
            Cluster::new(
                "c",
                JobDefaults::default(),
                nodes.to_vec(),
                vec![board.clone()]
            )
            .is_ok()
        );
        let qfdb = |ids: Vec<u16>| Board::new(0, BoardKind::Qfdb, ids);
        let mut n = qfdb_nodes();
        for node in &mut n {
            node.board = None;
        }
        assert_eq!(
            err(n.clone(), vec![qfdb(vec![0, 1, 2])]),
            "boards[0].nodes: a qfdb board has exactly 4 nodes, this one lists 3"
        );
        let mut moved = n.clone();
        moved[2].coord = Coord::new(1, 0, 0, 2, 0).unwrap();
        assert!(err(moved, vec![qfdb(vec![0, 1, 2, 3])]).contains(
            "node 2 (coordinate 1.0.0.2.0) and node 0 (coordinate 0.0.0.0.0) are not on one board"
        ));
        let mut dup = n;
        dup[2].coord = Coord::new(0, 0, 0, 1, 0).unwrap();
        assert_eq!(
            err(dup, vec![qfdb(vec![0, 1, 2, 3])]),
            "boards[0].nodes: nodes 1 and 2 both have fpga position 1; a qfdb board has fpga 0, 1, 2 and 3"
        );
    }
}
