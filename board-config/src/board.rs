//! Boards: groups of nodes that share a circuit board, and the QFDB preset.
//!
//! What it is: [`Board`] and [`BoardKind`], plus [`Board::qfdb`], which builds a QFDB
//! (Quad-FPGA Daughter Board: four Zynq UltraScale+ MPSoCs with four Cortex-A53 cores each)
//! and its four Exanet nodes from a base coordinate and a host-name pattern.
//!
//! What it is not: a hardware probe. Nothing here asks a board what it is.
//!
//! Thread safety: plain owned data (`Send + Sync`).

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;

use crate::coord::Coord;
use crate::node::{Node, Transport, UnknownWord};

/// What kind of board a [`Board`] is, which decides how it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BoardKind {
    /// A QFDB: exactly four nodes at FPGA positions 0..=3 of one board coordinate.
    Qfdb,
    /// Any set of nodes.
    Custom,
}

impl BoardKind {
    /// All kinds, in the order of the key table's choice list.
    pub const ALL: [Self; 2] = [Self::Qfdb, Self::Custom];

    /// The configuration word (`qfdb`, `custom`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Qfdb => "qfdb",
            Self::Custom => "custom",
        }
    }
}

impl fmt::Display for BoardKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BoardKind {
    type Err = UnknownWord;

    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownWord {
                word: String::from(s),
                expected: match crate::keys::BOARD_KIND.kind {
                    crate::keys::ValueKind::Choice(words) => words,
                    _ => &[],
                },
            })
    }
}

/// A board and the ids of the nodes on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Board {
    /// Unique id.
    pub id: u16,
    /// Human-readable name.
    pub name: String,
    /// Kind, which decides the checks.
    pub kind: BoardKind,
    /// Ids of the nodes on the board.
    pub nodes: Vec<u16>,
}

/// Why [`Board::qfdb`] could not build a board.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PresetError {
    /// The base coordinate's `fpga` field is not 0.
    BaseNotFpga0(Coord),
    /// `first_node_id + 3` does not fit in a `u16`.
    NodeIdOverflow(u16),
    /// The host pattern has an unknown or unterminated `{...}` placeholder.
    BadPattern(String),
}

impl fmt::Display for PresetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BaseNotFpga0(c) => write!(
                f,
                "QFDB base coordinate {c} must have fpga = 0 (it names FPGA 0 of the board)"
            ),
            Self::NodeIdOverflow(first) => write!(
                f,
                "QFDB node ids {first}..={} do not fit in 16 bits",
                u32::from(*first) + 3
            ),
            Self::BadPattern(why) => write!(f, "QFDB host pattern: {why}"),
        }
    }
}

impl core::error::Error for PresetError {}

impl Board {
    /// Number of nodes on a QFDB.
    pub const QFDB_NODES: usize = 4;
    /// Cortex-A53 cores per QFDB MPSoC.
    pub const QFDB_CORES_PER_NODE: u32 = 4;
    /// UIO device of a QFDB node's first Exanet endpoint.
    pub const QFDB_UIO_DEVICE: &'static str = "exanet-ep0";

    /// A board with name `board<id>`.
    pub fn new(id: u16, kind: BoardKind, nodes: Vec<u16>) -> Self {
        Self {
            id,
            name: format!("board{id}"),
            kind,
            nodes,
        }
    }

    /// The QFDB preset: a `qfdb` board with id `board_id` and its four Exanet nodes.
    ///
    /// Node `f` (f = 0..=3) gets id `first_node_id + f`, name `board<board_id>-fpga<f>`,
    /// coordinate `base` with `fpga = f`, host `host_pattern` with the placeholders
    /// `{fpga}`, `{node}` (node id) and `{board}` (board id) replaced, transport `exanet`,
    /// UIO device [`Board::QFDB_UIO_DEVICE`], [`Board::QFDB_CORES_PER_NODE`] cores, and the
    /// key table's defaults for everything else (see [`Node::new`]).
    ///
    /// Errors: `base` with `fpga != 0`, node ids past `u16::MAX`, an unknown or unterminated
    /// placeholder. Consistency with the rest of a cluster is checked by
    /// [`crate::Cluster::new`].
    pub fn qfdb(
        board_id: u16,
        base: Coord,
        first_node_id: u16,
        host_pattern: &str,
    ) -> Result<(Self, [Node; 4]), PresetError> {
        if base.fpga() != 0 {
            return Err(PresetError::BaseNotFpga0(base));
        }
        if first_node_id > u16::MAX - 3 {
            return Err(PresetError::NodeIdOverflow(first_node_id));
        }
        let make = |fpga: u8| -> Result<Node, PresetError> {
            let id = first_node_id + u16::from(fpga);
            // fpga is 0..=3, which every coordinate accepts.
            let coord = base
                .with_fpga(fpga)
                .map_err(|_| PresetError::BaseNotFpga0(base))?;
            let host = expand_pattern(host_pattern, fpga, id, board_id)?;
            let mut node = Node::new(id, coord, host);
            node.name = format!("board{board_id}-fpga{fpga}");
            node.transport = Transport::Exanet;
            node.uio_devices = vec![String::from(Self::QFDB_UIO_DEVICE)];
            node.cores = Some(Self::QFDB_CORES_PER_NODE);
            node.board = Some(board_id);
            Ok(node)
        };
        let nodes = [make(0)?, make(1)?, make(2)?, make(3)?];
        let board = Self::new(
            board_id,
            BoardKind::Qfdb,
            nodes.iter().map(|n| n.id).collect(),
        );
        Ok((board, nodes))
    }
}

/// Replaces `{fpga}`, `{node}` and `{board}` in a host pattern.
fn expand_pattern(pattern: &str, fpga: u8, node: u16, board: u16) -> Result<String, PresetError> {
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| {
            PresetError::BadPattern(format!("unterminated placeholder in \"{pattern}\""))
        })?;
        let value = match &after[..close] {
            "fpga" => u32::from(fpga),
            "node" => u32::from(node),
            "board" => u32::from(board),
            other => {
                return Err(PresetError::BadPattern(format!(
                    "unknown placeholder {{{other}}} in \"{pattern}\" (known: {{fpga}}, {{node}}, {{board}})"
                )));
            }
        };
        out.push_str(&format!("{value}"));
        rest = &after[close + 1..];
    }
    if rest.contains('}') {
        return Err(PresetError::BadPattern(format!(
            "stray '}}' in \"{pattern}\""
        )));
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn qfdb_preset_builds_four_exanet_nodes() {
        let base = Coord::new(2, 1, 0, 0, 3).unwrap();
        let (board, nodes) = Board::qfdb(5, base, 20, "qfdb{board}-f{fpga}").unwrap();
        assert_eq!(board.kind, BoardKind::Qfdb);
        assert_eq!(board.nodes, [20, 21, 22, 23]);
        assert_eq!(board.name, "board5");
        for (f, n) in nodes.iter().enumerate() {
            assert_eq!(usize::from(n.coord.fpga()), f);
            assert!(n.coord.same_board(base));
            assert_eq!(n.host, format!("qfdb5-f{f}"));
            assert_eq!(n.bind, n.host);
            assert_eq!(n.transport, Transport::Exanet);
            assert_eq!(n.uio_devices, ["exanet-ep0"]);
            assert_eq!(n.cores, Some(4));
            assert_eq!(n.board, Some(5));
        }
        let (_, nodes) = Board::qfdb(0, Coord::default(), 0, "10.1.0.{node}").unwrap();
        assert_eq!(nodes[3].host, "10.1.0.3");
    }

    #[test]
    fn qfdb_preset_errors() {
        let base = Coord::new(0, 0, 0, 1, 0).unwrap();
        assert_eq!(
            Board::qfdb(0, base, 0, "h{fpga}").unwrap_err(),
            PresetError::BaseNotFpga0(base)
        );
        assert_eq!(
            Board::qfdb(0, Coord::default(), u16::MAX - 2, "h{fpga}").unwrap_err(),
            PresetError::NodeIdOverflow(u16::MAX - 2)
        );
        assert!(Board::qfdb(0, Coord::default(), u16::MAX - 3, "h{fpga}").is_ok());
        let err = Board::qfdb(0, Coord::default(), 0, "h{rack}").unwrap_err();
        assert!(
            err.to_string().contains("unknown placeholder {rack}"),
            "{err}"
        );
        let err = Board::qfdb(0, Coord::default(), 0, "h{fpga").unwrap_err();
        assert!(err.to_string().contains("unterminated"), "{err}");
        let err = Board::qfdb(0, Coord::default(), 0, "h}").unwrap_err();
        assert!(err.to_string().contains("stray"), "{err}");
    }

    #[test]
    fn kind_words_round_trip() {
        for k in BoardKind::ALL {
            assert_eq!(k.to_string().parse::<BoardKind>(), Ok(k));
        }
        assert!("QFDB".parse::<BoardKind>().is_err());
    }
}
