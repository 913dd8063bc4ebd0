//! The key table: every configuration key, its type, default and documentation.
//!
//! What it is: one declaration per key, in the style of SOS's `shmem_env_defs.h`. The TOML
//! loader (feature `std`) takes from it the set of known keys (unknown-key errors and
//! "did you mean" hints), the expected type and range of each value, and the defaults of
//! keys left out; [`render_markdown`] turns it into the reference `docs/config.md`;
//! [`KeyPath`] names a key in a file (`nodes[1].udp_port`) for error messages.
//!
//! What it is not: a parser. Nothing in this module reads text; it is `no_std` data.
//!
//! Thread safety: constants and immutable statics only.
//!
//! Defaults that are plain values live in the `DEFAULT_*` constants below, which both the
//! table and the `Default`/`new` constructors of the configuration types use, so a default
//! is written down exactly once.

use alloc::format;
use alloc::string::String;
use core::fmt;
use core::fmt::Write as _;

use crate::size::ByteSize;

/// Default `nodes[].udp_port`.
pub const DEFAULT_UDP_PORT: u16 = 7470;
/// Default `nodes[].control_socket`.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/gsas/atomicd.sock";
/// Default `nodes[].transport`.
pub const DEFAULT_TRANSPORT: &str = "udp";
/// Default `boards[].kind`.
pub const DEFAULT_BOARD_KIND: &str = "custom";
/// Default `defaults.symmetric_size` (bytes per PE).
pub const DEFAULT_SYMMETRIC_SIZE: u64 = 64 << 20;
/// Default `defaults.service_timeout_ms`.
pub const DEFAULT_SERVICE_TIMEOUT_MS: u32 = 10_000;
/// Default `defaults.fork_allowed`.
pub const DEFAULT_FORK_ALLOWED: bool = false;
/// Default `defaults.udp_mtu` (bytes of UDP payload per datagram).
pub const DEFAULT_UDP_MTU: u32 = 61_440;
/// Default `nodes[].max_peers` (network peers an atomic service keeps state for).
pub const DEFAULT_MAX_PEERS: u32 = 1024;
/// Default share of a node's memory limit one job, and one user's jobs together, may book
/// (`nodes[].job_memory`, `nodes[].user_memory`): half, so no one user takes a node.
pub const DEFAULT_MEMORY_SHARE_PERCENT: u64 = 50;

/// The part of a configuration file a key belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Section {
    /// Top level of the file.
    Root,
    /// The `[cluster]` table.
    Cluster,
    /// The `[defaults]` table (job defaults).
    Defaults,
    /// One `[[nodes]]` table.
    Node,
    /// One `[[boards]]` table.
    Board,
}

impl Section {
    /// All sections in file order.
    pub const ALL: [Self; 5] = [
        Self::Root,
        Self::Cluster,
        Self::Defaults,
        Self::Node,
        Self::Board,
    ];

    /// The TOML name of the section (`""` for the top level).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Root => "",
            Self::Cluster => "cluster",
            Self::Defaults => "defaults",
            Self::Node => "nodes",
            Self::Board => "boards",
        }
    }

    /// Whether the section is an array of tables (`[[nodes]]`), whose keys carry an index.
    pub const fn is_array(self) -> bool {
        matches!(self, Self::Node | Self::Board)
    }
}

/// The type of a key's value, with the range the loader enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// A table (`[cluster]`).
    Table,
    /// An array of tables (`[[nodes]]`).
    TableArray,
    /// A string.
    Str,
    /// A string holding an absolute file system path.
    Path,
    /// An integer in `min..=max`.
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// `true` or `false`.
    Bool,
    /// A byte count in `min..=max`: an integer, or a string in the one size grammar
    /// (`"64m"`, `"1.5g"`, see [`crate::parse_size`]).
    Size {
        /// Smallest accepted value.
        min: u64,
        /// Largest accepted value.
        max: u64,
    },
    /// An array of strings.
    StrList,
    /// An array of integers, each in `min..=max`.
    IntList {
        /// Smallest accepted element.
        min: i64,
        /// Largest accepted element.
        max: i64,
    },
    /// An Exanet coordinate: a string `"x.y.z.fpga.tor"` or the raw 22-bit integer.
    Coord,
    /// A string, one of the listed words.
    Choice(&'static [&'static str]),
}

impl ValueKind {
    /// What a value of this kind looks like, for "expected ..." messages.
    pub const fn expected(&self) -> &'static str {
        match self {
            Self::Table => "a table",
            Self::TableArray => "an array of tables",
            Self::Str => "a string",
            Self::Path => "a string (absolute path)",
            Self::Int { .. } => "an integer",
            Self::Bool => "a boolean",
            Self::Size { .. } => "a size (integer number of bytes, or a string such as \"64m\")",
            Self::StrList => "an array of strings",
            Self::IntList { .. } => "an array of integers",
            Self::Coord => "a coordinate (string \"x.y.z.fpga.tor\" or raw integer)",
            Self::Choice(_) => "a string",
        }
    }

    /// The type column of the reference.
    pub fn describe(&self) -> String {
        match self {
            Self::Table => String::from("table"),
            Self::TableArray => String::from("array of tables"),
            Self::Str => String::from("string"),
            Self::Path => String::from("string, absolute path"),
            Self::Int { min, max } => format!("integer, {min}..={max}"),
            Self::Bool => String::from("boolean"),
            Self::Size { min, max } => {
                format!("size, {}..={}", ByteSize(*min), ByteSize(*max))
            }
            Self::StrList => String::from("array of strings"),
            Self::IntList { min, max } => format!("array of integers, each {min}..={max}"),
            Self::Coord => String::from("coordinate"),
            Self::Choice(words) => {
                let mut s = String::from("one of ");
                for (i, w) in words.iter().enumerate() {
                    if i > 0 {
                        s.push_str(", ");
                    }
                    s.push('`');
                    s.push_str(w);
                    s.push('`');
                }
                s
            }
        }
    }
}

/// What a key takes when the file leaves it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultValue {
    /// The key must be present.
    Required,
    /// Absent means "not configured"; the field is `None`.
    Unset,
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A string (also used for choices).
    Str(&'static str),
    /// A byte count.
    Size(u64),
    /// An empty array.
    EmptyList,
    /// Computed from other keys; the text says how.
    Derived(&'static str),
}

impl fmt::Display for DefaultValue {
    /// The default column of the reference.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Required => f.write_str("**required**"),
            Self::Unset => f.write_str("unset"),
            Self::Int(v) => write!(f, "`{v}`"),
            Self::Bool(v) => write!(f, "`{v}`"),
            Self::Str(v) => write!(f, "`\"{v}\"`"),
            Self::Size(v) => write!(f, "`\"{}\"`", ByteSize(*v)),
            Self::EmptyList => f.write_str("`[]`"),
            Self::Derived(how) => f.write_str(how),
        }
    }
}

/// One configuration key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// The table the key lives in.
    pub section: Section,
    /// The key's name inside its table.
    pub name: &'static str,
    /// Type and accepted range.
    pub kind: ValueKind,
    /// Value when absent.
    pub default: DefaultValue,
    /// One line of documentation.
    pub doc: &'static str,
}

impl KeySpec {
    /// The documented path of the key, e.g. `nodes[].udp_port` or `defaults.fork_allowed`.
    pub fn doc_path(&self) -> String {
        match self.section {
            Section::Root => String::from(self.name),
            s if s.is_array() => format!("{}[].{}", s.name(), self.name),
            s => format!("{}.{}", s.name(), self.name),
        }
    }
}

impl KeySpec {
    /// Checks an integer against the range of an `Int` or `IntList` key (other kinds accept
    /// any value); the error is the reason text of the reports, `70000 is out of range 1..=65535`.
    pub fn check_int(&self, value: i64) -> Result<(), String> {
        match self.kind {
            ValueKind::Int { min, max } | ValueKind::IntList { min, max }
                if !(min..=max).contains(&value) =>
            {
                Err(format!("{value} is out of range {min}..={max}"))
            }
            _ => Ok(()),
        }
    }

    /// Checks a byte count against the range of a `Size` key (other kinds accept any value).
    pub fn check_size(&self, value: u64) -> Result<(), String> {
        match self.kind {
            ValueKind::Size { min, max } if !(min..=max).contains(&value) => Err(format!(
                "{} is out of range {}..={}",
                ByteSize(value),
                ByteSize(min),
                ByteSize(max)
            )),
            _ => Ok(()),
        }
    }
}

/// Key ranges shared by several entries.
const U16_RANGE: ValueKind = ValueKind::Int {
    min: 0,
    max: u16::MAX as i64,
};

/// Top level: `[cluster]`.
pub const ROOT_CLUSTER: KeySpec = KeySpec {
    section: Section::Root,
    name: "cluster",
    kind: ValueKind::Table,
    default: DefaultValue::Required,
    doc: "Identity of the cluster.",
};
/// Top level: `[defaults]`.
pub const ROOT_DEFAULTS: KeySpec = KeySpec {
    section: Section::Root,
    name: "defaults",
    kind: ValueKind::Table,
    default: DefaultValue::Derived("every key at its default"),
    doc: "Defaults for jobs started on this cluster.",
};
/// Top level: `[[nodes]]`.
pub const ROOT_NODES: KeySpec = KeySpec {
    section: Section::Root,
    name: "nodes",
    kind: ValueKind::TableArray,
    default: DefaultValue::Required,
    doc: "One table per node; ranks are placed on nodes in this order.",
};
/// Top level: `[[boards]]`.
pub const ROOT_BOARDS: KeySpec = KeySpec {
    section: Section::Root,
    name: "boards",
    kind: ValueKind::TableArray,
    default: DefaultValue::EmptyList,
    doc: "Boards grouping nodes (e.g. the four FPGAs of a QFDB).",
};

/// `cluster.name`.
pub const CLUSTER_NAME: KeySpec = KeySpec {
    section: Section::Cluster,
    name: "name",
    kind: ValueKind::Str,
    default: DefaultValue::Required,
    doc: "Name of the cluster, shown in logs and error messages.",
};

/// `defaults.symmetric_size`.
pub const DEFAULTS_SYMMETRIC_SIZE: KeySpec = KeySpec {
    section: Section::Defaults,
    name: "symmetric_size",
    kind: ValueKind::Size {
        min: crate::shmem_env::MIN_SYMMETRIC_SIZE,
        max: 1 << 48,
    },
    default: DefaultValue::Size(DEFAULT_SYMMETRIC_SIZE),
    doc: "Symmetric heap size per PE (`SHMEM_SYMMETRIC_SIZE` overrides it per job).",
};
/// `defaults.service_timeout_ms`.
pub const DEFAULTS_SERVICE_TIMEOUT_MS: KeySpec = KeySpec {
    section: Section::Defaults,
    name: "service_timeout_ms",
    kind: ValueKind::Int {
        min: 1,
        max: 3_600_000,
    },
    default: DefaultValue::Int(DEFAULT_SERVICE_TIMEOUT_MS as i64),
    doc: "Deadline for an answer from an atomic service before the job fails with an error.",
};
/// `defaults.udp_mtu`.
pub const DEFAULTS_UDP_MTU: KeySpec = KeySpec {
    section: Section::Defaults,
    name: "udp_mtu",
    kind: ValueKind::Int {
        min: 1024,
        max: 65_000,
    },
    default: DefaultValue::Int(DEFAULT_UDP_MTU as i64),
    doc: "UDP payload bytes per datagram of the atomic services and PEs (the same on every node; `GSAS_UDP_MTU` overrides it). 61440 suits loopback and veth; use 1472 on Ethernet without jumbo frames.",
};
/// `defaults.fork_allowed`.
pub const DEFAULTS_FORK_ALLOWED: KeySpec = KeySpec {
    section: Section::Defaults,
    name: "fork_allowed",
    kind: ValueKind::Bool,
    default: DefaultValue::Bool(DEFAULT_FORK_ALLOWED),
    doc: "Whether daemons start processes for authenticated remote FORK requests; needs `fork_secret_file`.",
};
/// `defaults.require_allocation`.
pub const DEFAULTS_REQUIRE_ALLOCATION: KeySpec = KeySpec {
    section: Section::Defaults,
    name: "require_allocation",
    kind: ValueKind::Bool,
    default: DefaultValue::Bool(false),
    doc: "Whether daemons admit PEs of users other than root only under an allocation that root declared on that node (`gsas-atomicd declare`, e.g. from a Slurm prolog): its PE count, largest job and memory then bound the user instead of the per-user shares, and a user without one is refused.",
};
/// `defaults.fork_secret_file`.
pub const DEFAULTS_FORK_SECRET_FILE: KeySpec = KeySpec {
    section: Section::Defaults,
    name: "fork_secret_file",
    kind: ValueKind::Path,
    default: DefaultValue::Unset,
    doc: "File holding the cluster secret that authenticates remote FORK requests: a regular file, mode 0600 or stricter, owned by the user of the daemon (and of `oshrun`, which signs with it), at least 16 bytes.",
};
/// `defaults.verbs_rma`.
pub const DEFAULTS_VERBS_RMA: KeySpec = KeySpec {
    section: Section::Defaults,
    name: "verbs_rma",
    kind: ValueKind::Choice(&["rdma", "service"]),
    default: DefaultValue::Str("rdma"),
    doc: "In jobs across `verbs` nodes: `rdma` puts and gets by RDMA between the PEs (and NIC atomics where the devices allow); `service` sends them through the atomic services as on `udp` nodes, for comparison (`GSAS_VERBS_RMA` overrides it).",
};

/// `nodes[].id`.
pub const NODE_ID: KeySpec = KeySpec {
    section: Section::Node,
    name: "id",
    kind: U16_RANGE,
    default: DefaultValue::Required,
    doc: "Node id, unique in the cluster.",
};
/// `nodes[].name`.
pub const NODE_NAME: KeySpec = KeySpec {
    section: Section::Node,
    name: "name",
    kind: ValueKind::Str,
    default: DefaultValue::Derived("`\"node<id>\"`"),
    doc: "Human-readable node name, unique in the cluster.",
};
/// `nodes[].coord`.
pub const NODE_COORD: KeySpec = KeySpec {
    section: Section::Node,
    name: "coord",
    kind: ValueKind::Coord,
    default: DefaultValue::Derived(
        "emulator mapping of the id (`fpga = id % 4`, `x = id/4 % 16`, `y = id/64 % 16`, `z = id/1024 % 16`, `tor = 0`); ids from 16384 must set it",
    ),
    doc: "Exanet coordinate, unique in the cluster.",
};
/// `nodes[].host`.
pub const NODE_HOST: KeySpec = KeySpec {
    section: Section::Node,
    name: "host",
    kind: ValueKind::Str,
    default: DefaultValue::Required,
    doc: "IP address or host name where the node's atomic service is reached.",
};
/// `nodes[].udp_port`.
pub const NODE_UDP_PORT: KeySpec = KeySpec {
    section: Section::Node,
    name: "udp_port",
    kind: ValueKind::Int {
        min: 1,
        max: u16::MAX as i64,
    },
    default: DefaultValue::Int(DEFAULT_UDP_PORT as i64),
    doc: "UDP port of the atomic service; (`host`, `udp_port`) is unique in the cluster.",
};
/// `nodes[].bind`.
pub const NODE_BIND: KeySpec = KeySpec {
    section: Section::Node,
    name: "bind",
    kind: ValueKind::Str,
    default: DefaultValue::Derived("same as `host`"),
    doc: "Address the atomic service binds its UDP socket to (e.g. `0.0.0.0`).",
};
/// `nodes[].control_socket`.
pub const NODE_CONTROL_SOCKET: KeySpec = KeySpec {
    section: Section::Node,
    name: "control_socket",
    kind: ValueKind::Path,
    default: DefaultValue::Str(DEFAULT_CONTROL_SOCKET),
    doc: "Unix socket where local processes reach the node's atomic service; unique per host.",
};
/// `nodes[].uio_devices`.
pub const NODE_UIO_DEVICES: KeySpec = KeySpec {
    section: Section::Node,
    name: "uio_devices",
    kind: ValueKind::StrList,
    default: DefaultValue::EmptyList,
    doc: "UIO device names of the node's Exanet endpoints (e.g. `exanet-ep0`); required for `exanet`.",
};
/// `nodes[].cores`.
pub const NODE_CORES: KeySpec = KeySpec {
    section: Section::Node,
    name: "cores",
    kind: ValueKind::Int {
        min: 1,
        max: 1 << 20,
    },
    default: DefaultValue::Unset,
    doc: "CPU cores available to PEs (unset: ask the operating system).",
};
/// `nodes[].memory`.
pub const NODE_MEMORY: KeySpec = KeySpec {
    section: Section::Node,
    name: "memory",
    kind: ValueKind::Size {
        min: 1 << 20,
        max: 1 << 50,
    },
    default: DefaultValue::Derived("90% of the node's physical memory"),
    doc: "Memory the atomic service may hand out on this node, to all its PEs together; a larger request is refused naming this key. The default leaves a tenth for the operating system and the programs' own memory.",
};
/// `nodes[].job_memory`.
pub const NODE_JOB_MEMORY: KeySpec = KeySpec {
    section: Section::Node,
    name: "job_memory",
    kind: ValueKind::Size {
        min: 1 << 20,
        max: 1 << 50,
    },
    default: DefaultValue::Derived(
        "half of the node's limit (`memory`, else 90% of its physical memory)",
    ),
    doc: "Memory one job may book on this node (the full size of its PEs' segments: every page may be touched); a larger request is refused naming this key.",
};
/// `nodes[].user_memory`.
pub const NODE_USER_MEMORY: KeySpec = KeySpec {
    section: Section::Node,
    name: "user_memory",
    kind: ValueKind::Size {
        min: 1 << 20,
        max: 1 << 50,
    },
    default: DefaultValue::Derived(
        "half of the node's limit (`memory`, else 90% of its physical memory)",
    ),
    doc: "Memory all jobs of one user together may book on this node, so that no one user takes it; a larger request is refused naming this key and the user.",
};
/// `nodes[].max_peers`.
pub const NODE_MAX_PEERS: KeySpec = KeySpec {
    section: Section::Node,
    name: "max_peers",
    kind: ValueKind::Int {
        min: 16,
        max: 1 << 20,
    },
    default: DefaultValue::Int(DEFAULT_MAX_PEERS as i64),
    doc: "Network peers (a PE socket of a job with PEs on this node) the atomic service keeps state for; each job may have its PE count + 4.",
};
/// `nodes[].transport`.
pub const NODE_TRANSPORT: KeySpec = KeySpec {
    section: Section::Node,
    name: "transport",
    kind: ValueKind::Choice(&["udp", "exanet", "shm", "verbs"]),
    default: DefaultValue::Str(DEFAULT_TRANSPORT),
    doc: "How other nodes reach this node's service; `shm` only in a single-node cluster; `verbs`: the service speaks UDP and the PEs reach the PEs of other verbs nodes by RDMA ([`verbs.md`](verbs.md)); a job's nodes are all verbs nodes or none.",
};
/// `nodes[].verbs_device`.
pub const NODE_VERBS_DEVICE: KeySpec = KeySpec {
    section: Section::Node,
    name: "verbs_device",
    kind: ValueKind::Str,
    default: DefaultValue::Derived("the first RDMA device with an active port"),
    doc: "`verbs` nodes: the RDMA device, as `ibv_devices` names it (`mlx5_0`).",
};
/// `nodes[].verbs_port`.
pub const NODE_VERBS_PORT: KeySpec = KeySpec {
    section: Section::Node,
    name: "verbs_port",
    kind: ValueKind::Int { min: 1, max: 255 },
    default: DefaultValue::Derived("the device's first active port"),
    doc: "`verbs` nodes: the device port.",
};
/// `nodes[].verbs_gid_index`.
pub const NODE_VERBS_GID_INDEX: KeySpec = KeySpec {
    section: Section::Node,
    name: "verbs_gid_index",
    kind: ValueKind::Int { min: 0, max: 255 },
    default: DefaultValue::Int(0),
    doc: "`verbs` nodes: the source GID index; on RoCE the index of a RoCEv2 GID (`show_gids`).",
};
/// `nodes[].board`.
pub const NODE_BOARD: KeySpec = KeySpec {
    section: Section::Node,
    name: "board",
    kind: U16_RANGE,
    default: DefaultValue::Derived("id of the board that lists this node, if any"),
    doc: "Board the node sits on; must agree with that board's `nodes`.",
};

/// `boards[].id`.
pub const BOARD_ID: KeySpec = KeySpec {
    section: Section::Board,
    name: "id",
    kind: U16_RANGE,
    default: DefaultValue::Required,
    doc: "Board id, unique in the cluster.",
};
/// `boards[].name`.
pub const BOARD_NAME: KeySpec = KeySpec {
    section: Section::Board,
    name: "name",
    kind: ValueKind::Str,
    default: DefaultValue::Derived("`\"board<id>\"`"),
    doc: "Human-readable board name.",
};
/// `boards[].kind`.
pub const BOARD_KIND: KeySpec = KeySpec {
    section: Section::Board,
    name: "kind",
    kind: ValueKind::Choice(&["qfdb", "custom"]),
    default: DefaultValue::Str(DEFAULT_BOARD_KIND),
    doc: "`qfdb`: exactly four nodes, FPGA positions 0..=3 of one board coordinate; `custom`: any nodes.",
};
/// `boards[].nodes`.
pub const BOARD_NODES: KeySpec = KeySpec {
    section: Section::Board,
    name: "nodes",
    kind: ValueKind::IntList {
        min: 0,
        max: u16::MAX as i64,
    },
    default: DefaultValue::Required,
    doc: "Ids of the nodes on the board; a node is on at most one board.",
};

/// Every key, grouped by section in file order. The loader accepts exactly these keys.
pub static KEYS: &[KeySpec] = &[
    ROOT_CLUSTER,
    ROOT_DEFAULTS,
    ROOT_NODES,
    ROOT_BOARDS,
    CLUSTER_NAME,
    DEFAULTS_SYMMETRIC_SIZE,
    DEFAULTS_SERVICE_TIMEOUT_MS,
    DEFAULTS_UDP_MTU,
    DEFAULTS_FORK_ALLOWED,
    DEFAULTS_FORK_SECRET_FILE,
    DEFAULTS_REQUIRE_ALLOCATION,
    DEFAULTS_VERBS_RMA,
    NODE_ID,
    NODE_NAME,
    NODE_COORD,
    NODE_HOST,
    NODE_UDP_PORT,
    NODE_BIND,
    NODE_CONTROL_SOCKET,
    NODE_UIO_DEVICES,
    NODE_CORES,
    NODE_MEMORY,
    NODE_JOB_MEMORY,
    NODE_USER_MEMORY,
    NODE_MAX_PEERS,
    NODE_TRANSPORT,
    NODE_VERBS_DEVICE,
    NODE_VERBS_PORT,
    NODE_VERBS_GID_INDEX,
    NODE_BOARD,
    BOARD_ID,
    BOARD_NAME,
    BOARD_KIND,
    BOARD_NODES,
];

/// The keys of one section, in table order.
pub fn keys_of(section: Section) -> impl Iterator<Item = &'static KeySpec> {
    KEYS.iter().filter(move |k| k.section == section)
}

/// Where a value sits in a configuration file: a section, the element index for
/// `[[nodes]]`/`[[boards]]`, and a key. Displays as `nodes[1].udp_port`, `cluster.name`,
/// `nodes[2]` (the whole element) or `nodes` (a top-level key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyPath {
    /// Section of the key.
    pub section: Section,
    /// Index in `[[nodes]]` or `[[boards]]` (0-based); `None` in other sections.
    pub index: Option<usize>,
    /// Key name; `None` names the whole element or section.
    pub key: Option<&'static str>,
}

impl KeyPath {
    /// A key of a plain section (`cluster.name`) or the top level (`nodes`).
    pub const fn key(spec: &KeySpec) -> Self {
        Self {
            section: spec.section,
            index: None,
            key: Some(spec.name),
        }
    }

    /// A key of element `index` of an array section (`nodes[1].udp_port`).
    pub const fn item(spec: &KeySpec, index: usize) -> Self {
        Self {
            section: spec.section,
            index: Some(index),
            key: Some(spec.name),
        }
    }

    /// A whole element of an array section (`nodes[1]`).
    pub const fn element(section: Section, index: usize) -> Self {
        Self {
            section,
            index: Some(index),
            key: None,
        }
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut need_dot = false;
        if self.section != Section::Root {
            f.write_str(self.section.name())?;
            need_dot = true;
        }
        if let Some(i) = self.index {
            write!(f, "[{i}]")?;
        }
        match self.key {
            Some(k) if need_dot => write!(f, ".{k}"),
            Some(k) => f.write_str(k),
            None if self.section == Section::Root => f.write_str("(top level)"),
            None => Ok(()),
        }
    }
}

/// Renders the configuration reference (`docs/config.md`) from [`KEYS`].
///
/// The repository's copy is checked against this text by a test; regenerate it with
/// `cargo run -p board-config --example gen-docs`.
pub fn render_markdown() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; `let _` keeps the no-panic path simple.
    let _ = write_markdown(&mut out);
    out
}

fn write_markdown(out: &mut String) -> fmt::Result {
    out.push_str(concat!(
        "# gsas cluster configuration reference\n",
        "\n",
        "<!-- Generated from the key table in board-config/src/keys.rs; do not edit.\n",
        "     Regenerate: cargo run -p board-config --example gen-docs -->\n",
        "\n",
        "A cluster is described by one TOML file, read by `gsas-atomicd`, `oshrun` and the\n",
        "Exanet transport through the `board-config` crate. Examples are in `configs/`.\n",
        "\n",
        "* Sizes are a number of bytes, or a string in the size grammar of `SHMEM_SYMMETRIC_SIZE`:\n",
        "  a number (decimals allowed) with an optional binary multiplier, `\"64k\"`, `\"512m\"`,\n",
        "  `\"1.5g\"`, `\"1t\"` (1k = 1024, any case; rounded up to whole bytes).\n",
        "* Coordinates are Exanet node coordinates, written `\"x.y.z.fpga.tor\"` in decimal\n",
        "  (x, y, z in 0..=15, fpga in 0..=3, tor in 0..=255), or as the raw 22-bit integer\n",
        "  `x | y << 4 | z << 8 | fpga << 12 | tor << 14`.\n",
        "* Errors name the file, the line, the key and the reason, e.g.\n",
        "  `configs/two.toml:14: nodes[1].udp_port: 70000 is out of range 1..=65535`.\n",
        "  Unknown keys are errors (with a suggestion when the name is close to a known key).\n",
    ));
    for section in Section::ALL {
        let title = match section {
            Section::Root => "Top level",
            Section::Cluster => "`[cluster]`",
            Section::Defaults => "`[defaults]`: job defaults",
            Section::Node => "`[[nodes]]`: one table per node",
            Section::Board => "`[[boards]]`: one table per board",
        };
        write!(
            out,
            "\n## {title}\n\n| Key | Type | Default | Description |\n|---|---|---|---|\n"
        )?;
        for key in keys_of(section) {
            writeln!(
                out,
                "| `{}` | {} | {} | {} |",
                key.doc_path(),
                key.kind.describe(),
                key.default,
                key.doc
            )?;
        }
    }
    out.push_str(concat!(
        "\n## Checks beyond types and ranges\n",
        "\n",
        "* The cluster name is not empty and the cluster has at least one node. Node names,\n",
        "  hosts and bind addresses are not empty and contain no whitespace; paths are\n",
        "  absolute. Integer and size values set in code are held to the ranges above too.\n",
        "* Node ids, node names and coordinates are unique; so are (`host`, `udp_port`) and\n",
        "  (`host`, `control_socket`) pairs. Hosts are compared as written: `localhost` and\n",
        "  `127.0.0.1` count as different hosts.\n",
        "* An `exanet` node lists at least one UIO device; UIO device names are not empty,\n",
        "  contain no `/` and are unique per node.\n",
        "* A `shm` node is the only node of its cluster.\n",
        "* Board ids are unique; a board lists at least one node, only nodes that exist, each\n",
        "  once, and no node is on two boards. A node's `board`, when set, names the board that\n",
        "  lists it.\n",
        "* A `qfdb` board lists exactly four nodes whose coordinates differ only in `fpga`, and\n",
        "  the four `fpga` values are distinct (0, 1, 2, 3).\n",
        "* `defaults.fork_allowed = true` needs `defaults.fork_secret_file`.\n",
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    #[test]
    fn paths_are_unique_and_sections_have_keys() {
        let mut paths: Vec<String> = KEYS.iter().map(KeySpec::doc_path).collect();
        let n = paths.len();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), n, "duplicate key in KEYS");
        for s in Section::ALL {
            assert!(keys_of(s).count() > 0, "section {s:?} has no keys");
        }
        // Every non-root section is declared as a top-level key.
        for s in &Section::ALL[1..] {
            let root = keys_of(Section::Root).find(|k| k.name == s.name());
            let root = root.unwrap_or_else(|| panic!("section {s:?} not declared at top level"));
            let want = if s.is_array() {
                ValueKind::TableArray
            } else {
                ValueKind::Table
            };
            assert_eq!(root.kind, want);
        }
    }

    #[test]
    fn defaults_match_kinds() {
        for k in KEYS {
            let ok = match (k.default, k.kind) {
                (DefaultValue::Required | DefaultValue::Unset | DefaultValue::Derived(_), _) => {
                    true
                }
                (DefaultValue::Int(v), ValueKind::Int { min, max }) => (min..=max).contains(&v),
                (DefaultValue::Size(v), ValueKind::Size { min, max }) => (min..=max).contains(&v),
                (DefaultValue::Bool(_), ValueKind::Bool) => true,
                (DefaultValue::Str(s), ValueKind::Choice(words)) => words.contains(&s),
                (DefaultValue::Str(s), ValueKind::Path) => s.starts_with('/'),
                (DefaultValue::Str(_), ValueKind::Str) => true,
                (DefaultValue::EmptyList, ValueKind::StrList | ValueKind::IntList { .. }) => true,
                (DefaultValue::EmptyList, ValueKind::TableArray) => true,
                _ => false,
            };
            assert!(ok, "default of {} does not fit its kind", k.doc_path());
        }
    }

    #[test]
    fn key_path_display() {
        assert_eq!(
            KeyPath::item(&NODE_UDP_PORT, 1).to_string(),
            "nodes[1].udp_port"
        );
        assert_eq!(KeyPath::key(&CLUSTER_NAME).to_string(), "cluster.name");
        assert_eq!(KeyPath::key(&ROOT_NODES).to_string(), "nodes");
        assert_eq!(KeyPath::element(Section::Board, 3).to_string(), "boards[3]");
        assert_eq!(NODE_UDP_PORT.doc_path(), "nodes[].udp_port");
        assert_eq!(DEFAULTS_FORK_ALLOWED.doc_path(), "defaults.fork_allowed");
    }

    #[test]
    fn markdown_lists_every_key_once() {
        let md = render_markdown();
        for k in KEYS {
            let cell = alloc::format!("| `{}` |", k.doc_path());
            assert_eq!(md.matches(&cell).count(), 1, "{cell} in reference");
        }
        assert!(md.contains("| `nodes[].udp_port` | integer, 1..=65535 | `7470` |"));
        assert!(md.contains("| `defaults.symmetric_size` | size, 4k..=256t | `\"64m\"` |"));
    }
}
