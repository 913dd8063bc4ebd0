//! Tests of the TOML loader: the example configurations, the generated reference, every
//! key of the table, and one test per error checking file, line, key and reason.
//!
//! Kept as one file because it holds only the loader's tests, which share the helpers at
//! their top (workspace paths, loading from text, finding the line of a marker).

use super::*;
use std::path::PathBuf;

const FILE: &str = "configs/two.toml";

fn workspace_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

fn load(text: &str) -> core::result::Result<Cluster, ConfigError> {
    Cluster::from_toml_str(FILE, text)
}

/// 1-based number of the first line of `text` containing `marker`.
#[track_caller]
fn line_with(text: &str, marker: &str) -> usize {
    nth_line_with(text, marker, 0)
}

/// 1-based number of the `n`-th (0-based) line of `text` containing `marker`.
#[track_caller]
fn nth_line_with(text: &str, marker: &str, n: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(marker))
        .nth(n)
        .unwrap_or_else(|| panic!("marker {marker:?} #{n} not in test text:\n{text}"))
        .0
        + 1
}

/// Loads `text`, expects an error of `kind` on `line` at `key` whose reason contains
/// `reason`, and checks the displayed form.
#[track_caller]
fn expect(text: &str, kind: ErrorKind, line: usize, key: &str, reason: &str) -> ConfigError {
    let err = match load(text) {
        Ok(c) => panic!("config should be refused, got {c:?}\n{text}"),
        Err(e) => e,
    };
    assert_eq!(err.kind(), kind, "{err}");
    assert_eq!(err.file(), FILE);
    assert_eq!(err.line(), Some(line), "{err}\n{text}");
    assert_eq!(err.key(), Some(key), "{err}");
    assert!(
        err.reason().contains(reason),
        "reason of `{err}` lacks {reason:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("{FILE}:{line}: {key}: {}", err.reason())
    );
    err
}

/// A `[[nodes]]` table for a loopback node `id`; `extra` lines are added, and the
/// defaults for `host`, `udp_port` and `control_socket` are left out when `extra` sets them.
fn node(id: u16, extra: &str) -> String {
    let mut s = format!("[[nodes]]\nid = {id}\n");
    if !extra.contains("host =") {
        s.push_str("host = \"127.0.0.1\"\n");
    }
    if !extra.contains("udp_port =") {
        s.push_str(&format!("udp_port = {}\n", 7000 + id));
    }
    if !extra.contains("control_socket =") {
        s.push_str(&format!("control_socket = \"/tmp/t{id}.sock\"\n"));
    }
    for line in extra.lines() {
        s.push_str(line.trim());
        s.push('\n');
    }
    s.push('\n');
    s
}

const HEAD: &str = "[cluster]\nname = \"t\"\n\n";

/// A two-node loopback cluster with extra lines in each node and text after them.
fn two(extra0: &str, extra1: &str, tail: &str) -> String {
    format!("{HEAD}{}{}{tail}", node(0, extra0), node(1, extra1))
}

/// Four exanet nodes at fpga 0..=3 of one board, and `board` appended.
fn qfdb(coords: [&str; 4], board: &str) -> String {
    let mut s = String::from(HEAD);
    for (i, c) in coords.iter().enumerate() {
        s.push_str(&node(
            i as u16,
            &format!("coord = \"{c}\"\ntransport = \"exanet\"\nuio_devices = [\"exanet-ep0\"]"),
        ));
    }
    s.push_str(board);
    s
}

#[test]
fn valid_two_node_config_loads() {
    let c = load(&two("", "", "")).unwrap();
    assert_eq!(c.name(), "t");
    assert_eq!(c.nodes().len(), 2);
    assert_eq!(c.node(1).unwrap().udp_port, 7001);
}

#[test]
fn task_example_message_is_exact() {
    let text = two("", "udp_port = 70000", "");
    assert_eq!(line_with(&text, "70000"), 14);
    let err = load(&text).unwrap_err();
    assert_eq!(
        err.to_string(),
        "configs/two.toml:14: nodes[1].udp_port: 70000 is out of range 1..=65535"
    );
    assert_eq!(err.kind(), ErrorKind::OutOfRange);
}

#[test]
fn every_example_config_loads() {
    let dir = workspace_path("configs");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let cluster = Cluster::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!cluster.nodes().is_empty());
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    for want in [
        "four-nodes-loopback.toml",
        "one-machine.toml",
        "qfdb.toml",
        "two-nodes-loopback.toml",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
}

#[test]
fn example_contents() {
    let one = Cluster::load(workspace_path("configs/one-machine.toml")).unwrap();
    assert_eq!(one.nodes().len(), 1);
    assert_eq!(one.nodes()[0].transport, Transport::Shm);

    let two = Cluster::load(workspace_path("configs/two-nodes-loopback.toml")).unwrap();
    let (a, b) = (&two.nodes()[0], &two.nodes()[1]);
    assert_eq!(
        (a.host.as_str(), b.host.as_str()),
        ("127.0.0.1", "127.0.0.1")
    );
    assert_ne!(a.udp_port, b.udp_port);
    assert_ne!(a.control_socket, b.control_socket);
    assert_eq!(two.defaults().symmetric_size, 32 << 20);
    let p = two.place(5, None).unwrap();
    assert_eq!((p.pes_of(0), p.pes_of(1)), (Some(0..3), Some(3..5)));

    let four = Cluster::load(workspace_path("configs/four-nodes-loopback.toml")).unwrap();
    assert_eq!(four.nodes().len(), 4);
    assert_eq!(four.node(3).unwrap().memory, Some(256 << 20));
    let p = four.place(10, None).unwrap();
    assert_eq!(p.pes_of(2), Some(6..8));

    let q = Cluster::load(workspace_path("configs/qfdb.toml")).unwrap();
    assert_eq!(q.boards().len(), 1);
    assert_eq!(q.boards()[0].kind, BoardKind::Qfdb);
    let mut fpgas: Vec<u8> = q.nodes().iter().map(|n| n.coord.fpga()).collect();
    fpgas.sort();
    assert_eq!(fpgas, [0, 1, 2, 3]);
    for n in q.nodes() {
        assert_eq!(n.transport, Transport::Exanet);
        // Endpoint 0 for the atomic service, 1..=4 for the node's PEs.
        assert_eq!(
            n.uio_devices,
            [
                "exanet-ep0",
                "exanet-ep1",
                "exanet-ep2",
                "exanet-ep3",
                "exanet-ep4"
            ]
        );
        assert_eq!(n.board, Some(0));
        assert_eq!(n.bind, "0.0.0.0");
    }
    assert!(!q.defaults().fork_allowed);
}

#[test]
fn docs_reference_is_up_to_date() {
    let path = workspace_path("docs/config.md");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; generate it with `cargo run -p board-config --example gen-docs`",
            path.display()
        )
    });
    assert!(
        on_disk == keys::render_markdown(),
        "{} differs from the key table; regenerate it with \
         `cargo run -p board-config --example gen-docs`",
        path.display()
    );
}

#[test]
fn every_key_is_read_and_defaults_apply() {
    let text = r#"
[cluster]
name = "all"

[defaults]
symmetric_size = 8192
service_timeout_ms = 0x10
udp_mtu = 1472
fork_allowed = true
fork_secret_file = "/etc/gsas/fork.secret"
verbs_rma = "service"
require_allocation = true

[[nodes]]
id = 20000
name = "n"
coord = 0x3FFFFF
host = "h0"
udp_port = 1_234
bind = "0.0.0.0"
control_socket = "/run/x.sock"
uio_devices = ["exanet-ep0", "exanet-ep1"]
cores = 2
memory = "1G"
job_memory = "256m"
user_memory = "512m"
max_peers = 64
transport = "verbs"
verbs_device = "mlx5_1"
verbs_port = 2
verbs_gid_index = 3
board = 9

[[nodes]]
id = 1
host = "h1"

[[boards]]
id = 9
name = "b"
kind = "custom"
nodes = [20000]
"#;
    let c = load(text).unwrap_or_else(|e| panic!("{e}"));
    let d = c.defaults();
    assert_eq!(
        (d.symmetric_size, d.service_timeout_ms, d.fork_allowed),
        (8192, 16, true)
    );
    assert_eq!(d.fork_secret_file.as_deref(), Some("/etc/gsas/fork.secret"));
    assert_eq!(d.udp_mtu, 1472);
    assert!(d.verbs_rma_via_service);
    assert!(!JobDefaults::default().verbs_rma_via_service);
    assert!(d.require_allocation);
    assert!(!JobDefaults::default().require_allocation);
    let n = c.node(20000).unwrap();
    assert_eq!(n.name, "n");
    assert_eq!(n.coord.raw(), Coord::RAW_MAX);
    assert_eq!(
        (n.host.as_str(), n.udp_port, n.bind.as_str()),
        ("h0", 1234, "0.0.0.0")
    );
    assert_eq!(n.control_socket, "/run/x.sock");
    assert_eq!(n.uio_devices, ["exanet-ep0", "exanet-ep1"]);
    assert_eq!((n.cores, n.memory), (Some(2), Some(1 << 30)));
    assert_eq!(
        (n.job_memory, n.user_memory, n.max_peers),
        (Some(256 << 20), Some(512 << 20), 64)
    );
    assert_eq!((n.transport, n.board), (Transport::Verbs, Some(9)));
    assert_eq!(
        (n.verbs_device.as_deref(), n.verbs_port, n.verbs_gid_index),
        (Some("mlx5_1"), Some(2), 3)
    );
    let b = c.board(9).unwrap();
    assert_eq!(
        (b.name.as_str(), b.kind, b.nodes.as_slice()),
        ("b", BoardKind::Custom, &[20000][..])
    );

    // Node 1 has every optional key at its key-table default.
    let m = c.node(1).unwrap();
    assert_eq!(m.name, "node1");
    assert_eq!(m.coord, Coord::from_index(1).unwrap());
    assert_eq!(m.udp_port, keys::DEFAULT_UDP_PORT);
    assert_eq!(m.bind, "h1");
    assert_eq!(m.control_socket, keys::DEFAULT_CONTROL_SOCKET);
    assert!(m.uio_devices.is_empty());
    assert_eq!((m.cores, m.memory, m.board), (None, None, None));
    assert_eq!((m.job_memory, m.user_memory), (None, None));
    assert_eq!(m.max_peers, keys::DEFAULT_MAX_PEERS);
    assert_eq!(m.transport, Transport::Udp);
    assert_eq!(
        (m.verbs_device.as_deref(), m.verbs_port, m.verbs_gid_index),
        (None, None, 0)
    );

    // Every key of the table appears in the text above.
    for k in keys::KEYS {
        let written = match k.section {
            Section::Root if k.kind == ValueKind::Table => format!("[{}]", k.name),
            Section::Root => format!("[[{}]]", k.name),
            _ => format!("\n{} = ", k.name),
        };
        assert!(text.contains(&written), "{} not exercised", k.doc_path());
    }
}

#[test]
fn absent_defaults_table_gives_table_defaults() {
    let c = load(&two("", "", "")).unwrap();
    assert_eq!(*c.defaults(), JobDefaults::default());
    assert_eq!(c.defaults().symmetric_size, keys::DEFAULT_SYMMETRIC_SIZE);
    assert!(c.boards().is_empty());
}

#[test]
fn io_error_names_the_file() {
    let err = Cluster::load("/nonexistent/gsas/cluster.toml").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert_eq!(err.line(), None);
    assert!(
        err.to_string()
            .starts_with("/nonexistent/gsas/cluster.toml: cannot read the configuration file: "),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn syntax_error_has_line() {
    let text = two("", "name = ", "");
    let err = load(&text).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Syntax);
    // The value is missing at the end of the line `name = `.
    assert_eq!(err.line(), Some(nth_line_with(&text, "name =", 1)));
    assert_eq!(err.key(), None);
    assert!(
        err.to_string()
            .starts_with(&format!("{FILE}:{}: TOML syntax: ", err.line().unwrap()))
    );
    // A key given twice is a syntax error too.
    let text = two("", "cores = 1\ncores = 2", "");
    let err = load(&text).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Syntax);
    assert_eq!(err.line(), Some(line_with(&text, "cores = 2")));
}

#[test]
fn unknown_key_suggests_close_name() {
    let text = two("", "udp_prot = 7001", "");
    expect(
        &text,
        ErrorKind::UnknownKey,
        line_with(&text, "udp_prot"),
        "nodes[1].udp_prot",
        "did you mean `udp_port`?",
    );
    let text = format!("{HEAD}[defaults]\nsymetric_size = \"1m\"\n{}", node(0, ""));
    expect(
        &text,
        ErrorKind::UnknownKey,
        line_with(&text, "symetric_size"),
        "defaults.symetric_size",
        "did you mean `symmetric_size`?",
    );
}

#[test]
fn unknown_key_far_from_all_lists_known_keys() {
    let text = two("colour = \"red\"", "", "");
    let err = expect(
        &text,
        ErrorKind::UnknownKey,
        line_with(&text, "colour"),
        "nodes[0].colour",
        "unknown key (known keys here: id, name, coord, host",
    );
    assert!(err.reason().contains("board)"), "{err}");
    let text = format!("{HEAD}[network]\nmtu = 9000\n{}", node(0, ""));
    expect(
        &text,
        ErrorKind::UnknownKey,
        line_with(&text, "[network]"),
        "network",
        "unknown key (known keys here: cluster, defaults, nodes, boards)",
    );
    let text = format!(
        "[cluster]\nname = \"t\"\nsize = 3\n\n{}",
        node(0, "zzz = 1\naaa = 2")
    );
    expect(
        &text,
        ErrorKind::UnknownKey,
        line_with(&text, "size = 3"),
        "cluster.size",
        "unknown key",
    );
}

#[test]
fn wrong_types() {
    let text = two("", "udp_port = \"7001\"", "");
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "\"7001\""),
        "nodes[1].udp_port",
        "expected an integer, found string",
    );
    let text = two("uio_devices = \"exanet-ep0\"", "", "");
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "uio_devices"),
        "nodes[0].uio_devices",
        "expected an array of strings, found string",
    );
    let text = two("uio_devices = [\"a\", 1]", "", "");
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "uio_devices"),
        "nodes[0].uio_devices[1]",
        "expected a string, found integer",
    );
    let text = format!(
        "{HEAD}[defaults]\nfork_allowed = \"yes\"\n\n{}",
        node(0, "")
    );
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "fork_allowed"),
        "defaults.fork_allowed",
        "expected a boolean, found string",
    );
    let text = two("cores = 2.5", "", "");
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "cores"),
        "nodes[0].cores",
        "expected an integer, found float",
    );
    let text = two("coord = true", "", "");
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "coord"),
        "nodes[0].coord",
        "expected a coordinate",
    );
    let text = format!("cluster = \"t\"\n{}", node(0, ""));
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "cluster ="),
        "cluster",
        "expected a table, found string",
    );
    let text = format!("{HEAD}[nodes]\nid = 0\n");
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "[nodes]"),
        "nodes",
        "expected an array of tables, found table",
    );
    let text = format!("nodes = [1]\n{HEAD}");
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "nodes = [1]"),
        "nodes[0]",
        "expected a table, found integer",
    );
    let text = two("", "", "[[boards]]\nid = 0\nnodes = [0, \"1\"]\n");
    expect(
        &text,
        ErrorKind::WrongType,
        line_with(&text, "nodes = [0"),
        "boards[0].nodes[1]",
        "expected an integer, found string",
    );
}

#[test]
fn out_of_range_values() {
    let text = two("cores = 0", "", "");
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "cores"),
        "nodes[0].cores",
        "0 is out of range 1..=1048576",
    );
    let text = format!("{HEAD}{}", node(0, "").replace("id = 0", "id = -1"));
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "id = -1"),
        "nodes[0].id",
        "-1 is out of range 0..=65535",
    );
    let text = two("", "udp_port = 99999999999999999999", "");
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "9999"),
        "nodes[1].udp_port",
        "99999999999999999999 is out of range 1..=65535",
    );
    let text = two("coord = \"0.0.0.4.0\"", "", "");
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "coord"),
        "nodes[0].coord",
        "coordinate field fpga = 4 is out of range 0..=3",
    );
    let text = two("coord = 0x400000", "", "");
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "coord"),
        "nodes[0].coord",
        "has bits above bit 21 set",
    );
    let text = two("coord = -1", "", "");
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "coord"),
        "nodes[0].coord",
        "raw coordinate -1 is out of range",
    );
    let text = format!("{HEAD}[defaults]\nsymmetric_size = 100\n\n{}", node(0, ""));
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "symmetric_size"),
        "defaults.symmetric_size",
        "100 is out of range 4k..=256t",
    );
    let text = format!(
        "{HEAD}[defaults]\nsymmetric_size = -4096\n\n{}",
        node(0, "")
    );
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "symmetric_size"),
        "defaults.symmetric_size",
        "-4096 is out of range 4k..=256t",
    );
    let text = two("memory = \"2048t\"", "", "");
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "memory"),
        "nodes[0].memory",
        "2048t is out of range 1m..=1024t",
    );
    let text = format!(
        "{HEAD}[defaults]\nservice_timeout_ms = 0\n\n{}",
        node(0, "")
    );
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "service_timeout_ms"),
        "defaults.service_timeout_ms",
        "0 is out of range 1..=3600000",
    );
    let text = two("", "", "[[boards]]\nid = 0\nnodes = [0, 70000]\n");
    expect(
        &text,
        ErrorKind::OutOfRange,
        line_with(&text, "nodes = [0"),
        "boards[0].nodes[1]",
        "70000 is out of range 0..=65535",
    );
}

#[test]
fn invalid_values() {
    let text = two("memory = \"1.5p\"", "", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "memory"),
        "nodes[0].memory",
        "\"1.5p\" is not a size: unexpected 'p' after the number",
    );
    let text = two("coord = \"1.2.3\"", "", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "coord"),
        "nodes[0].coord",
        "x.y.z.fpga.tor",
    );
    let text = two("", "transport = \"upd\"", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "upd"),
        "nodes[1].transport",
        "\"upd\" is not one of \"udp\", \"exanet\", \"shm\", \"verbs\"; did you mean \"udp\"?",
    );
    let text = two("", "", "[[boards]]\nid = 0\nkind = \"quad\"\nnodes = [0]\n");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "quad"),
        "boards[0].kind",
        "\"quad\" is not one of \"qfdb\", \"custom\"",
    );
}

#[test]
fn missing_required_keys() {
    let text = node(0, "");
    let err = load(&text).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Missing);
    assert_eq!(
        err.to_string(),
        format!("{FILE}:1: cluster: required table [cluster] is missing")
    );
    let text = format!("[cluster]\n\n{}", node(0, ""));
    expect(
        &text,
        ErrorKind::Missing,
        line_with(&text, "[cluster]"),
        "cluster.name",
        "required key is missing",
    );
    let text = HEAD.to_string();
    let err = load(&text).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Missing);
    assert_eq!(
        err.to_string(),
        format!("{FILE}:1: nodes: required key is missing; add a [[nodes]] table")
    );
    let text = format!(
        "{HEAD}{}",
        node(0, "").replace("host = \"127.0.0.1\"\n", "")
    );
    expect(
        &text,
        ErrorKind::Missing,
        line_with(&text, "[[nodes]]"),
        "nodes[0].host",
        "required key is missing",
    );
    let text = format!("{HEAD}{}[[nodes]]\nhost = \"h\"\n", node(0, ""));
    let err = load(&text).unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.key()),
        (
            ErrorKind::Missing,
            Some(line_with(&text, "host = \"h\"") - 1),
            Some("nodes[1].id")
        )
    );
    let text = two("", "", "[[boards]]\nid = 0\n");
    expect(
        &text,
        ErrorKind::Missing,
        line_with(&text, "[[boards]]"),
        "boards[0].nodes",
        "required key is missing",
    );
    let text = format!("{HEAD}{}", node(20000, ""));
    expect(
        &text,
        ErrorKind::Missing,
        line_with(&text, "[[nodes]]"),
        "nodes[0].coord",
        "node id 20000 has no default coordinate",
    );
}

#[test]
fn empty_cluster() {
    let text = format!("nodes = []\n{HEAD}");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "nodes = []"),
        "nodes",
        "the cluster has no nodes",
    );
}

#[test]
fn duplicate_node_id() {
    let text = format!(
        "{HEAD}{}{}",
        node(0, ""),
        node(0, "udp_port = 7001\ncoord = 5")
    );
    // The second `id = 0` is the one reported.
    expect(
        &text,
        ErrorKind::Invalid,
        nth_line_with(&text, "id = 0", 1),
        "nodes[1].id",
        "node id 0 is also used by nodes[0] (id 0)",
    );
}

#[test]
fn duplicate_coordinates() {
    let text = two("coord = \"1.0.0.2.0\"", "coord = 0x2001", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "coord = 0x2001"),
        "nodes[1].coord",
        "coordinate 1.0.0.2.0 is also used by nodes[0] (id 0)",
    );
    // A default coordinate clashing with an explicit one points at the table header.
    let text = two("coord = \"0.0.0.1.0\"", "", "");
    let err = expect(
        &text,
        ErrorKind::Invalid,
        nth_line_with(&text, "[[nodes]]", 1),
        "nodes[1].coord",
        "coordinate 0.0.0.1.0 is also used by nodes[0] (id 0)",
    );
    assert!(
        err.reason()
            .ends_with("(the key is not set; this is its default)"),
        "{err}"
    );
}

#[test]
fn duplicate_host_and_port() {
    let text = two("", "udp_port = 7000", "");
    expect(
        &text,
        ErrorKind::Invalid,
        nth_line_with(&text, "udp_port = 7000", 1),
        "nodes[1].udp_port",
        "UDP port 7000 on host 127.0.0.1 is also used by nodes[0] (id 0)",
    );
    // Both at the default port.
    let text = format!(
        "{HEAD}{}{}",
        node(0, "host = \"a\""),
        node(1, "host = \"a\"")
    )
    .replace("udp_port = 7000\n", "")
    .replace("udp_port = 7001\n", "");
    let err = load(&text).unwrap_err();
    assert_eq!(err.key(), Some("nodes[1].udp_port"));
    assert!(err.reason().contains("UDP port 7470 on host a"), "{err}");
}

#[test]
fn duplicate_control_socket_and_name() {
    let text = two("", "control_socket = \"/tmp/t0.sock\"", "");
    let err = load(&text).unwrap_err();
    let line = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("/tmp/t0.sock"))
        .nth(1)
        .unwrap()
        .0
        + 1;
    assert_eq!(err.line(), Some(line));
    assert_eq!(
        err.reason(),
        "control socket /tmp/t0.sock on host 127.0.0.1 is also used by nodes[0] (id 0)"
    );
    let text = two("name = \"x\"", "name = \"x\"", "");
    let err = load(&text).unwrap_err();
    assert_eq!(err.key(), Some("nodes[1].name"));
    assert_eq!(
        err.reason(),
        "node name \"x\" is also used by nodes[0] (id 0)"
    );
}

#[test]
fn board_references_missing_node() {
    let text = two("", "", "[[boards]]\nid = 0\nnodes = [0, 5]\n");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "nodes = [0, 5]"),
        "boards[0].nodes",
        "node 5 is not defined (no [[nodes]] table has id = 5)",
    );
}

#[test]
fn node_on_two_boards_and_board_disagreement() {
    let text = two(
        "",
        "",
        "[[boards]]\nid = 0\nnodes = [0]\n\n[[boards]]\nid = 1\nnodes = [1, 0]\n",
    );
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "nodes = [1, 0]"),
        "boards[1].nodes",
        "node 0 is also on boards[0] (id 0)",
    );
    let text = two(
        "board = 1",
        "",
        "[[boards]]\nid = 0\nnodes = [0]\n\n[[boards]]\nid = 1\nnodes = [1]\n",
    );
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "board = 1"),
        "nodes[0].board",
        "node 0 is listed by boards[0] (id 0) but sets board = 1",
    );
    let text = two("board = 3", "", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "board = 3"),
        "nodes[0].board",
        "board 3 is not defined",
    );
    let text = two(
        "",
        "",
        "[[boards]]\nid = 2\nnodes = [1]\n\n[[boards]]\nid = 2\nnodes = [0]\n",
    );
    let err = load(&text).unwrap_err();
    assert_eq!(err.key(), Some("boards[1].id"));
    assert_eq!(
        err.line(),
        Some(
            text.lines()
                .enumerate()
                .filter(|(_, l)| *l == "id = 2")
                .nth(1)
                .unwrap()
                .0
                + 1
        )
    );
}

#[test]
fn qfdb_with_wrong_node_count() {
    let text = qfdb(
        ["0.0.0.0.0", "0.0.0.1.0", "0.0.0.2.0", "0.0.0.3.0"],
        "[[boards]]\nid = 0\nkind = \"qfdb\"\nnodes = [0, 1, 2]\n",
    );
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "nodes = [0, 1, 2]"),
        "boards[0].nodes",
        "a qfdb board has exactly 4 nodes, this one lists 3",
    );
}

#[test]
fn qfdb_nodes_not_on_one_board() {
    let text = qfdb(
        ["0.0.0.0.0", "0.0.0.1.0", "1.0.0.2.0", "0.0.0.3.0"],
        "[[boards]]\nid = 0\nkind = \"qfdb\"\nnodes = [0, 1, 2, 3]\n",
    );
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "nodes = [0, 1, 2, 3]"),
        "boards[0].nodes",
        "node 2 (coordinate 1.0.0.2.0) and node 0 (coordinate 0.0.0.0.0) are not on one board",
    );
}

#[test]
fn qfdb_nodes_with_repeated_fpga_position() {
    let text = qfdb(
        ["0.0.0.0.0", "0.0.0.1.0", "0.0.0.1.0", "0.0.0.3.0"],
        "[[boards]]\nid = 0\nkind = \"qfdb\"\nnodes = [0, 1, 2, 3]\n",
    );
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "nodes = [0, 1, 2, 3]"),
        "boards[0].nodes",
        "nodes 1 and 2 both have fpga position 1",
    );
}

#[test]
fn qfdb_valid_board_loads() {
    let text = qfdb(
        ["0.1.0.0.2", "0.1.0.1.2", "0.1.0.2.2", "0.1.0.3.2"],
        "[[boards]]\nid = 4\nkind = \"qfdb\"\nnodes = [3, 2, 1, 0]\n",
    );
    let c = load(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.board_of(2).unwrap().id, 4);
}

#[test]
fn exanet_node_without_uio_devices() {
    let text = two("transport = \"exanet\"", "", "");
    // uio_devices is not written, so the node's header line is reported.
    let err = expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "[[nodes]]"),
        "nodes[0].uio_devices",
        "an exanet node needs at least one UIO device",
    );
    assert!(
        err.reason()
            .ends_with("(the key is not set; this is its default)")
    );
    let text = two("transport = \"exanet\"\nuio_devices = []", "", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "uio_devices = []"),
        "nodes[0].uio_devices",
        "an exanet node needs at least one UIO device",
    );
    let text = two("uio_devices = [\"/dev/uio0\"]", "", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "uio_devices"),
        "nodes[0].uio_devices",
        "contains '/'",
    );
}

#[test]
fn shm_in_multi_node_cluster() {
    let text = two("", "transport = \"shm\"", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "shm"),
        "nodes[1].transport",
        "transport \"shm\" is only for a single-node cluster, and this one has 2 nodes",
    );
}

#[test]
fn fork_needs_secret_and_absolute_paths() {
    let text = format!("{HEAD}[defaults]\nfork_allowed = true\n\n{}", node(0, ""));
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "fork_allowed"),
        "defaults.fork_allowed",
        "remote fork is enabled but defaults.fork_secret_file is not set",
    );
    let text = format!(
        "{HEAD}[defaults]\nfork_secret_file = \"secret\"\n\n{}",
        node(0, "")
    );
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "fork_secret_file"),
        "defaults.fork_secret_file",
        "\"secret\" is not an absolute path",
    );
    let text = two("", "control_socket = \"run/x.sock\"", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "run/x.sock"),
        "nodes[1].control_socket",
        "\"run/x.sock\" is not an absolute path",
    );
}

#[test]
fn empty_and_spaced_words() {
    let text = two("", "host = \"\"", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "host = \"\""),
        "nodes[1].host",
        "host is empty",
    );
    let text = two("name = \"my node\"", "", "");
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "my node"),
        "nodes[0].name",
        "node name \"my node\" contains whitespace",
    );
    let text = format!("[cluster]\nname = \"\"\n\n{}", node(0, ""));
    expect(
        &text,
        ErrorKind::Invalid,
        line_with(&text, "name = \"\""),
        "cluster.name",
        "cluster name is empty",
    );
}

#[test]
fn suggestions() {
    assert_eq!(
        closest("udp_prot", keys_of(Section::Node).map(|k| k.name)),
        Some("udp_port")
    );
    assert_eq!(
        closest("hots", keys_of(Section::Node).map(|k| k.name)),
        Some("host")
    );
    assert_eq!(
        closest("uio_device", keys_of(Section::Node).map(|k| k.name)),
        Some("uio_devices")
    );
    assert_eq!(
        closest("colour", keys_of(Section::Node).map(|k| k.name)),
        None
    );
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("same", "same"), 0);
}
