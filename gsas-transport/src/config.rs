//! The runtime's configuration table: every `GSAS_*` environment variable, in one place.
//!
//! **What it is.** After SOS's `shmem_env_defs.h`: [`VARS`] lists every environment variable
//! the runtime reads, with its name, type, default and one line of documentation, and
//! [`CONFIG_KEYS`] lists the cluster-configuration keys (owned by `board-config`) that the
//! runtime uses and what for. From the table come the parsing ([`RuntimeConfig::from_lookup`]
//! checks each value against its [`Kind`] and reports errors naming the variable), the
//! `--info`-style listing ([`render_info`]) and the reference table in `docs/runtime.md`
//! ([`render_markdown`], kept fresh by a test).
//!
//! **What it is not.** It does not read the cluster file (that is
//! [`board_config::Cluster::load`]) and knows nothing of `SHMEM_*` variables (the shmem crate
//! keeps its own table). Only [`RuntimeConfig::from_env`] touches the environment; everything
//! below receives the plain [`RuntimeConfig`] value.
//!
//! **Thread safety.** Plain data and pure functions.
//!
//! ```
//! use gsas_transport::config::RuntimeConfig;
//!
//! let env = [("GSAS_DIRECT", "0"), ("GSAS_SPIN_US", "20")];
//! let cfg = RuntimeConfig::from_lookup(|name| {
//!     env.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
//! })?;
//! assert!(!cfg.direct);
//! assert_eq!(cfg.spin_us, 20);
//! assert_eq!(cfg.udp_mtu, 61440); // the table's default
//!
//! let bad = RuntimeConfig::from_lookup(|name| (name == "GSAS_NODE").then(|| "seven".into()));
//! assert_eq!(
//!     bad.unwrap_err().to_string(),
//!     "GSAS_NODE=\"seven\": expected an integer in 0..=65535"
//! );
//! # Ok::<(), gsas_transport::config::EnvError>(())
//! ```

use std::fmt::{self, Write as _};
use std::path::PathBuf;

use log::LevelFilter;

/// The type of a variable's value, with the range the parser enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off` (case-insensitive).
    Bool,
    /// A decimal integer in `min..=max`.
    Int {
        /// Smallest accepted value.
        min: u64,
        /// Largest accepted value.
        max: u64,
    },
    /// A byte count in `min..=max` in `board-config`'s one size grammar
    /// ([`board_config::parse_size`]: `64k`, `1.5g`, powers of 1024).
    Size {
        /// Smallest accepted value.
        min: u64,
        /// Largest accepted value.
        max: u64,
    },
    /// A 64-bit value written as 1 to 16 hexadecimal digits (optional `0x`).
    Hex64,
    /// A file system path (absolute).
    Path,
    /// A log level: `off`, `error`, `warn`, `info`, `debug`, `trace`.
    Level,
    /// One of the listed words.
    Choice(&'static [&'static str]),
}

impl Kind {
    /// The type column of the reference table.
    pub fn describe(&self) -> String {
        match self {
            Kind::Bool => "boolean".into(),
            Kind::Int { min, max } => format!("integer, {min}..={max}"),
            Kind::Size { min, max } => format!("size, {}..={}", show_size(*min), show_size(*max)),
            Kind::Hex64 => "hex u64".into(),
            Kind::Path => "absolute path".into(),
            Kind::Level => "log level".into(),
            Kind::Choice(words) => {
                let words: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
                format!("one of {}", words.join(", "))
            }
        }
    }

    /// What a value should look like, for error messages.
    fn expected(&self) -> String {
        match self {
            Kind::Bool => "a boolean (1/0, true/false, yes/no, on/off)".into(),
            Kind::Int { min, max } => format!("an integer in {min}..={max}"),
            Kind::Size { min, max } => format!(
                "a size such as 64m in {}..={}",
                show_size(*min),
                show_size(*max)
            ),
            Kind::Hex64 => "1 to 16 hexadecimal digits".into(),
            Kind::Path => "an absolute path".into(),
            Kind::Level => "one of off, error, warn, info, debug, trace".into(),
            Kind::Choice(words) => format!("one of {}", words.join(", ")),
        }
    }
}

/// Who reads a variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// Every PE (the node client).
    Pe,
    /// The atomic service (daemon, launcher thread or embedded in a PE).
    Service,
    /// The launcher sets it for the PEs it starts.
    SetByLauncher,
    /// Every gsas process.
    All,
}

impl Reader {
    fn describe(self) -> &'static str {
        match self {
            Reader::Pe => "PE",
            Reader::Service => "service",
            Reader::SetByLauncher => "PE (set by `oshrun`)",
            Reader::All => "all",
        }
    }
}

/// One environment variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name (`GSAS_...`).
    pub name: &'static str,
    /// Type and accepted range.
    pub kind: Kind,
    /// The default, as shown in the reference (`unset` when absent means "not given").
    pub default: &'static str,
    /// Who reads it.
    pub reader: Reader,
    /// One line of documentation.
    pub doc: &'static str,
}

/// Default busy-poll time of a PE after its last activity, in microseconds.
pub const DEFAULT_SPIN_US: u64 = 50;
/// Default busy-poll time of an atomic service after its last activity, in microseconds.
pub const DEFAULT_SERVICE_SPIN_US: u64 = 200;
/// Default of `GSAS_SCHED_SLICE_US`.
pub const DEFAULT_SCHED_SLICE_US: u64 = 100;
/// Default UDP payload per datagram, in bytes (loopback and veth carry it unfragmented).
pub const DEFAULT_UDP_MTU: usize = 61440;
/// Default deadline for an answer from another node's service, in milliseconds.
pub const DEFAULT_DEADLINE_MS: u64 = 10_000;
/// Default limit for the start-up exchange (PMI barriers, Join), in milliseconds.
pub const DEFAULT_BOOT_TIMEOUT_MS: u64 = 60_000;
/// The cluster file read when neither `--config` nor `GSAS_CONFIG` names one (if it exists).
pub const DEFAULT_CONFIG_FILE: &str = "/etc/gsas/cluster.toml";

/// `GSAS_LOG`.
pub const GSAS_LOG: EnvVar = EnvVar {
    name: "GSAS_LOG",
    kind: Kind::Level,
    default: "`warn`",
    reader: Reader::All,
    doc: "Log level of the runtime's messages on standard error (`gsas-atomicd --log-level` overrides it).",
};
/// `GSAS_SERVICE`.
pub const GSAS_SERVICE: EnvVar = EnvVar {
    name: "GSAS_SERVICE",
    kind: Kind::Path,
    default: "unset",
    reader: Reader::SetByLauncher,
    doc: "Control socket of this node's atomic service (`%h` stands for the host name). Unset: the configured daemon socket if it exists, else the node's lowest rank starts `gsas-atomicd --private` for the node.",
};
/// `GSAS_ATOMICD`.
pub const GSAS_ATOMICD: EnvVar = EnvVar {
    name: "GSAS_ATOMICD",
    kind: Kind::Path,
    default: "the `gsas-atomicd` beside `libshmem.so` or the program, else on `PATH`",
    reader: Reader::Pe,
    doc: "The daemon a node's lowest rank starts (`gsas-atomicd --private`, a child process) when no service runs for its node and no launcher gave one.",
};
/// `GSAS_CONFIG`.
pub const GSAS_CONFIG: EnvVar = EnvVar {
    name: "GSAS_CONFIG",
    kind: Kind::Path,
    default: "`/etc/gsas/cluster.toml` if it exists",
    reader: Reader::Pe,
    doc: "Cluster configuration file (node identity by host name, daemon socket, deadline).",
};
/// `GSAS_NODE`.
pub const GSAS_NODE: EnvVar = EnvVar {
    name: "GSAS_NODE",
    kind: Kind::Int {
        min: 0,
        max: u16::MAX as u64,
    },
    default: "unset",
    reader: Reader::SetByLauncher,
    doc: "Node id of this PE. Unset: from the cluster file and the host name, else by host-name exchange over PMI.",
};
/// `GSAS_JOB_ID`.
pub const GSAS_JOB_ID: EnvVar = EnvVar {
    name: "GSAS_JOB_ID",
    kind: Kind::Hex64,
    default: "unset",
    reader: Reader::SetByLauncher,
    doc: "Job id (shown in logs). Unset: rank 0 draws one and shares it over PMI.",
};
/// `GSAS_JOB_KEY`.
pub const GSAS_JOB_KEY: EnvVar = EnvVar {
    name: "GSAS_JOB_KEY",
    kind: Kind::Hex64,
    default: "unset",
    reader: Reader::SetByLauncher,
    doc: "Secret job key every request carries; services refuse other keys. Unset: rank 0 draws one and shares it over PMI.",
};
/// `GSAS_DIRECT`.
pub const GSAS_DIRECT: EnvVar = EnvVar {
    name: "GSAS_DIRECT",
    kind: Kind::Bool,
    default: "`1`",
    reader: Reader::Pe,
    doc: "Reach same-node PEs with direct loads, stores and CPU atomics; `0` sends those operations through the local service's shared-memory ring.",
};
/// `GSAS_TRANSPORT`.
pub const GSAS_TRANSPORT: EnvVar = EnvVar {
    name: "GSAS_TRANSPORT",
    kind: Kind::Choice(&["udp", "exanet", "verbs"]),
    default: "the node's `transport` in the cluster file, else `udp`",
    reader: Reader::All,
    doc: "Transport between nodes. Services (`gsas-atomicd`, also the one a PE starts): `exanet` opens the node's Exanet endpoint 0 (UIO devices `uio_devices`, or the emulator of `GSAS_EXANET_EMU`) and keeps UDP for host actions only (ping, remote FORK); `udp` and `verbs` serve UDP. PEs use what their service serves (over Exanet: endpoint 1 + their index among the node's PEs); on `verbs` nodes they also reach the memory of other nodes' PEs by RDMA (the node's `verbs_device`, `verbs_port`, `verbs_gid_index`; see `GSAS_VERBS_RMA`). A job's nodes are all verbs nodes or none.",
};
/// `GSAS_VERBS_RMA`.
pub const GSAS_VERBS_RMA: EnvVar = EnvVar {
    name: "GSAS_VERBS_RMA",
    kind: Kind::Choice(&["rdma", "service"]),
    default: "`defaults.verbs_rma` of the cluster file, else `rdma`",
    reader: Reader::Pe,
    doc: "In a job across verbs nodes: `rdma` puts and gets by RDMA WRITE and READ on queue pairs between the PEs (and 64-bit integer atomics as NIC atomics when every device reports `IBV_ATOMIC_GLOB`); `service` sends all of them through the atomic services over UDP as on `udp` nodes (the original two-sided design, for comparison).",
};
/// `GSAS_EXANET_EMU`.
pub const GSAS_EXANET_EMU: EnvVar = EnvVar {
    name: "GSAS_EXANET_EMU",
    kind: Kind::Path,
    default: "unset: the UIO devices `uio_devices` of the node",
    reader: Reader::All,
    doc: "Root of a running `exanet-emu`: Exanet endpoints are those of the emulated node whose coordinate is the node's `coord` (refused with a message if there is none, the emulator is not running, or an endpoint is busy or missing). Services and PEs of a node on the emulator both need it (`oshrun` passes its environment on).",
};
/// `GSAS_DEADLINE_MS`.
pub const GSAS_DEADLINE_MS: EnvVar = EnvVar {
    name: "GSAS_DEADLINE_MS",
    kind: Kind::Int {
        min: 1,
        max: 3_600_000,
    },
    default: "`defaults.service_timeout_ms` of the cluster file, else `10000`",
    reader: Reader::All,
    doc: "An operation to a node whose service does not answer for this long fails with an error naming the node. A request to the PE's own service (join, segments, leave) waits this long too, at least 10 s.",
};
/// `GSAS_SPIN_US`.
pub const GSAS_SPIN_US: EnvVar = EnvVar {
    name: "GSAS_SPIN_US",
    kind: Kind::Int {
        min: 0,
        max: 1_000_000,
    },
    default: "`50`",
    reader: Reader::Pe,
    doc: "How long a waiting PE busy-polls before it yields and then sleeps in poll(2).",
};
/// `GSAS_SERVICE_SPIN_US`.
pub const GSAS_SERVICE_SPIN_US: EnvVar = EnvVar {
    name: "GSAS_SERVICE_SPIN_US",
    kind: Kind::Int {
        min: 0,
        max: 1_000_000,
    },
    default: "`200`",
    reader: Reader::Service,
    doc: "How long an idle atomic service busy-polls before it yields and then sleeps in poll(2).",
};
/// `GSAS_SCHED_SLICE_US`.
pub const GSAS_SCHED_SLICE_US: EnvVar = EnvVar {
    name: "GSAS_SCHED_SLICE_US",
    kind: Kind::Int {
        min: 0,
        max: 100_000,
    },
    default: "`100`",
    reader: Reader::All,
    doc: "The scheduler slice, in microseconds, that atomic services and PEs ask Linux for (EEVDF's custom slice, Linux 6.12 and later; older kernels ignore it): a service or a PE that wakes for a datagram or a doorbell preempts a compute-bound process at once instead of after its slice (1.4 ms on a 2-CPU machine). The kernel takes at least 100. 0 leaves the kernel's default.",
};
/// `GSAS_UDP_MTU`.
pub const GSAS_UDP_MTU: EnvVar = EnvVar {
    name: "GSAS_UDP_MTU",
    kind: Kind::Int {
        min: 1024,
        max: 65_000,
    },
    default: "`61440`",
    reader: Reader::All,
    doc: "UDP payload bytes per datagram (every process of a job must use the same value). Unset: `gsas-atomicd --config` and `oshrun --config` use the cluster file's `defaults.udp_mtu` and pass it to their PEs, and a PE takes its node service's value; a PE whose value differs from its service's refuses to start, naming both. Use 1472 across real Ethernet without jumbo frames.",
};
/// `GSAS_BOOT_TIMEOUT_MS`.
pub const GSAS_BOOT_TIMEOUT_MS: EnvVar = EnvVar {
    name: "GSAS_BOOT_TIMEOUT_MS",
    kind: Kind::Int {
        min: 100,
        max: 3_600_000,
    },
    default: "`60000`",
    reader: Reader::Pe,
    doc: "Longest wait for the other PEs in a start-up PMI barrier (the slowest PE may still be starting).",
};
/// `GSAS_MEMORY_LIMIT`.
pub const GSAS_MEMORY_LIMIT: EnvVar = EnvVar {
    name: "GSAS_MEMORY_LIMIT",
    kind: Kind::Size {
        min: 1 << 20,
        max: 1 << 50,
    },
    default: "`nodes[].memory` of the cluster file, else 90% of the machine's physical memory",
    reader: Reader::Service,
    doc: "Memory an atomic service may hand out to all its PEs together (besides: each segment at most 1 TiB, a sync segment at most 16 MiB); larger requests are refused with a message naming the limit.",
};

/// Every environment variable the runtime reads, in documentation order.
pub static VARS: &[EnvVar] = &[
    GSAS_LOG,
    GSAS_SERVICE,
    GSAS_ATOMICD,
    GSAS_CONFIG,
    GSAS_NODE,
    GSAS_JOB_ID,
    GSAS_JOB_KEY,
    GSAS_DIRECT,
    GSAS_TRANSPORT,
    GSAS_VERBS_RMA,
    GSAS_EXANET_EMU,
    GSAS_DEADLINE_MS,
    GSAS_SPIN_US,
    GSAS_SERVICE_SPIN_US,
    GSAS_SCHED_SLICE_US,
    GSAS_UDP_MTU,
    GSAS_BOOT_TIMEOUT_MS,
    GSAS_MEMORY_LIMIT,
];

/// A cluster-configuration key the runtime uses, and what for.
#[derive(Clone, Copy, Debug)]
pub struct ConfigKeyUse {
    /// The key in `board-config`'s table.
    pub key: &'static board_config::keys::KeySpec,
    /// How the runtime uses it.
    pub use_: &'static str,
}

/// The cluster-file keys the runtime reads (their types and defaults are in
/// `docs/config.md`).
pub static CONFIG_KEYS: &[ConfigKeyUse] = &[
    ConfigKeyUse {
        key: &board_config::keys::NODE_BIND,
        use_: "`gsas-atomicd` binds its UDP socket to this address and `udp_port`, nothing else",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_UDP_PORT,
        use_: "UDP port of the node's service",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_CONTROL_SOCKET,
        use_: "`gsas-atomicd`'s control socket; PEs use it when `GSAS_SERVICE` is unset and it exists; `oshrun --config` gives it as `GSAS_SERVICE` to the PEs it starts on that node",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_MEMORY,
        use_: "limit of the memory the service hands out (`GSAS_MEMORY_LIMIT` overrides it)",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_TRANSPORT,
        use_: "`udp` and `shm`: UDP between nodes; `exanet`: the service serves other nodes over its Exanet endpoint 0 and hands endpoints 1.. to its PEs; `verbs`: the service serves UDP and the PEs reach other verbs nodes' PEs by RDMA (`GSAS_TRANSPORT` overrides the key); `oshrun --config` refuses a job that mixes verbs and other nodes",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_VERBS_DEVICE,
        use_: "with `transport = \"verbs\"`: the device a PE of the node opens (unset: the first with an active port)",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_VERBS_PORT,
        use_: "with `transport = \"verbs\"`: the device port (unset: its first active port)",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_VERBS_GID_INDEX,
        use_: "with `transport = \"verbs\"`: the source GID index of the PEs' queue pairs",
    },
    ConfigKeyUse {
        key: &board_config::keys::DEFAULTS_VERBS_RMA,
        use_: "default of `GSAS_VERBS_RMA`",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_COORD,
        use_: "with `transport = \"exanet\"`: the coordinate every Exanet endpoint of the node must report (and, with `GSAS_EXANET_EMU`, which emulated node is this node)",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_UIO_DEVICES,
        use_: "with `transport = \"exanet\"` on a board: the node's Exanet endpoints in order; the first serves the atomic service, the next ones a job's PEs on the node (one each)",
    },
    ConfigKeyUse {
        key: &board_config::keys::NODE_HOST,
        use_: "`oshrun --config` reaches the node's daemon at `host`:`udp_port` and starts the node's PEs itself when that is an address of its machine (through FORK otherwise); a PE without `GSAS_NODE` finds its node by comparing the host name with `host` and `name`",
    },
    ConfigKeyUse {
        key: &board_config::keys::DEFAULTS_SERVICE_TIMEOUT_MS,
        use_: "default of `GSAS_DEADLINE_MS` and of the service's reliability deadline",
    },
    ConfigKeyUse {
        key: &board_config::keys::DEFAULTS_SYMMETRIC_SIZE,
        use_: "symmetric heap size when the program does not ask for one",
    },
    ConfigKeyUse {
        key: &board_config::keys::DEFAULTS_UDP_MTU,
        use_: "`gsas-atomicd`'s UDP MTU, and the `GSAS_UDP_MTU` that `oshrun --config` gives every PE, unless `GSAS_UDP_MTU` is set",
    },
    ConfigKeyUse {
        key: &board_config::keys::DEFAULTS_FORK_ALLOWED,
        use_: "`gsas-atomicd` serves authenticated remote FORK (starting PEs for a multi-node `oshrun`) only when true; otherwise FORK is refused with ERROR(NotSupported) and counted",
    },
    ConfigKeyUse {
        key: &board_config::keys::DEFAULTS_FORK_SECRET_FILE,
        use_: "the cluster secret: `oshrun` signs FORK requests with it, `gsas-atomicd` checks them; a file with group or other access, or of another user, stops the daemon at start",
    },
];

/// The transport to other nodes (`GSAS_TRANSPORT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// UDP datagrams with the reliability layer.
    Udp,
    /// Exanet endpoints with the reliability layer.
    Exanet,
    /// Services over UDP; PEs of different nodes by RDMA (verbs).
    Verbs,
}

/// The parsed environment. Fields left `None` were not set; the caller applies the
/// cluster file or its own default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// `GSAS_LOG`.
    pub log: Option<LevelFilter>,
    /// `GSAS_SERVICE`.
    pub service: Option<PathBuf>,
    /// `GSAS_CONFIG`.
    pub config: Option<PathBuf>,
    /// `GSAS_ATOMICD`.
    pub atomicd: Option<PathBuf>,
    /// `GSAS_NODE`.
    pub node: Option<u16>,
    /// `GSAS_JOB_ID`.
    pub job_id: Option<u64>,
    /// `GSAS_JOB_KEY`.
    pub job_key: Option<u64>,
    /// `GSAS_DIRECT`.
    pub direct: bool,
    /// `GSAS_TRANSPORT` (`None`: the cluster file's, else UDP).
    pub transport: Option<TransportKind>,
    /// `GSAS_VERBS_RMA` is `service` (`None`: unset).
    pub verbs_rma_via_service: Option<bool>,
    /// `GSAS_EXANET_EMU`.
    pub exanet_emu: Option<PathBuf>,
    /// `GSAS_DEADLINE_MS`.
    pub deadline_ms: Option<u64>,
    /// `GSAS_SPIN_US`.
    pub spin_us: u64,
    /// `GSAS_SERVICE_SPIN_US`.
    pub service_spin_us: u64,
    /// `GSAS_SCHED_SLICE_US` (0: the kernel's default).
    pub sched_slice_us: u64,
    /// `GSAS_UDP_MTU`.
    pub udp_mtu: usize,
    /// `GSAS_BOOT_TIMEOUT_MS`.
    pub boot_timeout_ms: u64,
    /// `GSAS_MEMORY_LIMIT`.
    pub memory_limit: Option<u64>,
}

impl Default for RuntimeConfig {
    /// Every variable unset.
    fn default() -> Self {
        RuntimeConfig {
            log: None,
            service: None,
            config: None,
            atomicd: None,
            node: None,
            job_id: None,
            job_key: None,
            direct: true,
            transport: None,
            verbs_rma_via_service: None,
            exanet_emu: None,
            deadline_ms: None,
            spin_us: DEFAULT_SPIN_US,
            service_spin_us: DEFAULT_SERVICE_SPIN_US,
            sched_slice_us: DEFAULT_SCHED_SLICE_US,
            udp_mtu: DEFAULT_UDP_MTU,
            boot_timeout_ms: DEFAULT_BOOT_TIMEOUT_MS,
            memory_limit: None,
        }
    }
}

/// A variable whose value does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvError {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What was expected.
    pub reason: String,
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?}: {}", self.var, self.value, self.reason)
    }
}

impl std::error::Error for EnvError {}

/// A parsed value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Bool(bool),
    Int(u64),
    Path(PathBuf),
    Level(LevelFilter),
    Word(&'static str),
}

/// Parses `text` as a value of `var`'s kind.
fn parse(var: &EnvVar, text: &str) -> Result<Value, EnvError> {
    let err = || EnvError {
        var: var.name,
        value: text.to_owned(),
        reason: format!("expected {}", var.kind.expected()),
    };
    let t = text.trim();
    match var.kind {
        Kind::Bool => match t.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Value::Bool(true)),
            "0" | "false" | "no" | "off" => Ok(Value::Bool(false)),
            _ => Err(err()),
        },
        Kind::Int { min, max } => t
            .parse::<u64>()
            .ok()
            .filter(|v| (min..=max).contains(v))
            .map(Value::Int)
            .ok_or_else(err),
        Kind::Size { min, max } => board_config::parse_size(t)
            .ok()
            .filter(|v| (min..=max).contains(v))
            .map(Value::Int)
            .ok_or_else(err),
        Kind::Hex64 => parse_hex64(t).map(Value::Int).ok_or_else(err),
        Kind::Path => {
            let p = PathBuf::from(t);
            if p.is_absolute() {
                Ok(Value::Path(p))
            } else {
                Err(err())
            }
        }
        Kind::Level => t
            .parse::<LevelFilter>()
            .map(Value::Level)
            .map_err(|_| err()),
        Kind::Choice(words) => words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(t))
            .map(|w| Value::Word(w))
            .ok_or_else(err),
    }
}

/// Parses 1 to 16 hexadecimal digits with an optional `0x` prefix.
pub fn parse_hex64(text: &str) -> Option<u64> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Formats a value the way [`parse_hex64`] reads it back (16 digits).
pub fn format_hex64(value: u64) -> String {
    format!("{value:016x}")
}

impl RuntimeConfig {
    /// Reads every variable of [`VARS`] from the process environment. Variables that are
    /// set but not valid Unicode are reported as errors.
    pub fn from_env() -> Result<RuntimeConfig, EnvError> {
        let mut bad = None;
        let cfg = Self::from_lookup(|name| match std::env::var(name) {
            Ok(v) => Some(v),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(v)) => {
                bad.get_or_insert(EnvError {
                    var: VARS.iter().find(|e| e.name == name).map_or("?", |e| e.name),
                    value: v.to_string_lossy().into_owned(),
                    reason: "not valid Unicode".into(),
                });
                None
            }
        });
        match bad {
            Some(e) => Err(e),
            None => cfg,
        }
    }

    /// Reads every variable of [`VARS`] through `lookup` (which returns `None` for unset
    /// variables). Empty values count as unset.
    pub fn from_lookup(
        mut lookup: impl FnMut(&str) -> Option<String>,
    ) -> Result<RuntimeConfig, EnvError> {
        let mut cfg = RuntimeConfig::default();
        for var in VARS {
            let Some(text) = lookup(var.name).filter(|t| !t.trim().is_empty()) else {
                continue;
            };
            let value = parse(var, &text)?;
            cfg.assign(var.name, value);
        }
        Ok(cfg)
    }

    /// Stores a parsed value in its field.
    fn assign(&mut self, name: &str, value: Value) {
        match (name, value) {
            ("GSAS_LOG", Value::Level(l)) => self.log = Some(l),
            ("GSAS_SERVICE", Value::Path(p)) => self.service = Some(p),
            ("GSAS_ATOMICD", Value::Path(p)) => self.atomicd = Some(p),
            ("GSAS_CONFIG", Value::Path(p)) => self.config = Some(p),
            ("GSAS_NODE", Value::Int(v)) => self.node = u16::try_from(v).ok(),
            ("GSAS_JOB_ID", Value::Int(v)) => self.job_id = Some(v),
            ("GSAS_JOB_KEY", Value::Int(v)) => self.job_key = Some(v),
            ("GSAS_DIRECT", Value::Bool(b)) => self.direct = b,
            ("GSAS_TRANSPORT", Value::Word(w)) => {
                self.transport = Some(match w {
                    "exanet" => TransportKind::Exanet,
                    "verbs" => TransportKind::Verbs,
                    _ => TransportKind::Udp,
                })
            }
            ("GSAS_VERBS_RMA", Value::Word(w)) => self.verbs_rma_via_service = Some(w == "service"),
            ("GSAS_EXANET_EMU", Value::Path(p)) => self.exanet_emu = Some(p),
            ("GSAS_DEADLINE_MS", Value::Int(v)) => self.deadline_ms = Some(v),
            ("GSAS_SPIN_US", Value::Int(v)) => self.spin_us = v,
            ("GSAS_SERVICE_SPIN_US", Value::Int(v)) => self.service_spin_us = v,
            ("GSAS_SCHED_SLICE_US", Value::Int(v)) => self.sched_slice_us = v,
            ("GSAS_UDP_MTU", Value::Int(v)) => self.udp_mtu = v as usize,
            ("GSAS_BOOT_TIMEOUT_MS", Value::Int(v)) => self.boot_timeout_ms = v,
            ("GSAS_MEMORY_LIMIT", Value::Int(v)) => self.memory_limit = Some(v),
            // The table and this match are kept in step by a unit test; an entry missing
            // here is ignored rather than fatal.
            (other, v) => log::debug!("configuration value {v:?} of {other} is not used"),
        }
    }
}

/// The `GSAS_*` variables with their current values (set or default), one per line, for
/// `--info` style listings.
pub fn render_info(lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    for var in VARS {
        let value = lookup(var.name).unwrap_or_else(|| format!("(default: {})", var.default));
        let _ = writeln!(out, "{:<22} {}", var.name, value.replace('`', ""));
        let _ = writeln!(out, "{:<22}   {} [{}]", "", var.doc, var.kind.describe());
    }
    out
}

/// The reference tables of `docs/runtime.md`: environment variables, then the cluster-file
/// keys the runtime uses.
pub fn render_markdown() -> String {
    let mut out = String::new();
    out.push_str("| variable | type | default | read by | meaning |\n");
    out.push_str("|---|---|---|---|---|\n");
    for var in VARS {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            var.name,
            var.kind.describe(),
            var.default,
            var.reader.describe(),
            var.doc
        );
    }
    out.push('\n');
    out.push_str("| cluster-file key | used for |\n");
    out.push_str("|---|---|\n");
    for k in CONFIG_KEYS {
        let _ = writeln!(out, "| `{}` | {} |", k.key.doc_path(), k.use_);
    }
    out
}

/// `1024` -> `1k`, for the type column.
fn show_size(v: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (1 << 50, "p"),
        (1 << 40, "t"),
        (1 << 30, "g"),
        (1 << 20, "m"),
        (1 << 10, "k"),
    ];
    for (scale, unit) in UNITS {
        if v >= scale && v % scale == 0 {
            return format!("{}{unit}", v / scale);
        }
    }
    v.to_string()
}

/// Asks for the scheduler slice `us` (`GSAS_SCHED_SLICE_US`; 0 leaves the kernel's) for
/// the calling thread and the threads it creates later; `who` names the process in the
/// debug log. See [`gsas_sys::process::set_sched_slice`].
pub fn apply_sched_slice(us: u64, who: &str) {
    if us == 0 {
        return;
    }
    match gsas_sys::process::set_sched_slice(std::time::Duration::from_micros(us)) {
        Ok(true) => log::debug!("{who}: scheduler slice {us} us"),
        Ok(false) => log::debug!(
            "{who}: the kernel keeps its scheduler slice (before Linux 6.12, or not the normal policy)"
        ),
        Err(e) => log::debug!("{who}: asking for a {us} us scheduler slice: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<RuntimeConfig, EnvError> {
        RuntimeConfig::from_lookup(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        assert_eq!(from(&[]).unwrap(), RuntimeConfig::default());
    }

    #[test]
    fn every_variable_reaches_its_field() {
        let cfg = from(&[
            ("GSAS_LOG", "debug"),
            ("GSAS_SERVICE", "/run/x.sock"),
            ("GSAS_CONFIG", "/etc/c.toml"),
            ("GSAS_ATOMICD", "/opt/gsas/bin/gsas-atomicd"),
            ("GSAS_NODE", "3"),
            ("GSAS_JOB_ID", "0xabc"),
            ("GSAS_JOB_KEY", "00000000000000ff"),
            ("GSAS_DIRECT", "off"),
            ("GSAS_TRANSPORT", "Exanet"),
            ("GSAS_VERBS_RMA", "service"),
            ("GSAS_EXANET_EMU", "/tmp/exa"),
            ("GSAS_DEADLINE_MS", "250"),
            ("GSAS_SPIN_US", "0"),
            ("GSAS_SERVICE_SPIN_US", "7"),
            ("GSAS_SCHED_SLICE_US", "300"),
            ("GSAS_UDP_MTU", "1472"),
            ("GSAS_BOOT_TIMEOUT_MS", "1000"),
            ("GSAS_MEMORY_LIMIT", "2g"),
        ])
        .unwrap();
        let want = RuntimeConfig {
            log: Some(LevelFilter::Debug),
            service: Some("/run/x.sock".into()),
            config: Some("/etc/c.toml".into()),
            atomicd: Some("/opt/gsas/bin/gsas-atomicd".into()),
            node: Some(3),
            job_id: Some(0xabc),
            job_key: Some(0xff),
            direct: false,
            transport: Some(TransportKind::Exanet),
            verbs_rma_via_service: Some(true),
            exanet_emu: Some("/tmp/exa".into()),
            deadline_ms: Some(250),
            spin_us: 0,
            service_spin_us: 7,
            sched_slice_us: 300,
            udp_mtu: 1472,
            boot_timeout_ms: 1000,
            memory_limit: Some(2 << 30),
        };
        assert_eq!(cfg, want);
        // Every table entry was exercised above.
        assert_eq!(VARS.len(), 18);
        let verbs = from(&[("GSAS_TRANSPORT", "verbs"), ("GSAS_VERBS_RMA", "rdma")]).unwrap();
        assert_eq!(verbs.transport, Some(TransportKind::Verbs));
        assert_eq!(verbs.verbs_rma_via_service, Some(false));
    }

    #[test]
    fn errors_name_the_variable_and_the_expectation() {
        let e = from(&[("GSAS_DIRECT", "maybe")]).unwrap_err();
        assert_eq!(e.var, "GSAS_DIRECT");
        assert!(e.to_string().contains("expected a boolean"), "{e}");
        let e = from(&[("GSAS_UDP_MTU", "100")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GSAS_UDP_MTU=\"100\": expected an integer in 1024..=65000"
        );
        let e = from(&[("GSAS_SERVICE", "relative.sock")]).unwrap_err();
        assert!(e.to_string().contains("absolute path"), "{e}");
        let e = from(&[("GSAS_JOB_KEY", "12345678901234567")]).unwrap_err();
        assert!(e.to_string().contains("hexadecimal"), "{e}");
        let e = from(&[("GSAS_TRANSPORT", "tcp")]).unwrap_err();
        assert!(e.to_string().contains("one of udp"), "{e}");
        let e = from(&[("GSAS_MEMORY_LIMIT", "12")]).unwrap_err();
        assert!(e.to_string().contains("1m..=1p"), "{e}");
        // Empty means unset.
        assert_eq!(from(&[("GSAS_NODE", " ")]).unwrap().node, None);
    }

    #[test]
    fn hex_round_trip() {
        for v in [0, 1, 0xdead_beef, u64::MAX] {
            assert_eq!(parse_hex64(&format_hex64(v)), Some(v));
        }
        assert_eq!(parse_hex64(""), None);
        assert_eq!(parse_hex64("0x"), None);
        assert_eq!(parse_hex64("xyz"), None);
    }

    #[test]
    fn docs_runtime_md_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/runtime.md");
        let text = std::fs::read_to_string(path).unwrap();
        let begin = "<!-- BEGIN GENERATED: gsas_transport::config::render_markdown -->\n";
        let end = "<!-- END GENERATED -->";
        let a = text.find(begin).expect("begin marker in docs/runtime.md") + begin.len();
        let b = a + text[a..].find(end).expect("end marker in docs/runtime.md");
        let fresh = render_markdown();
        assert!(
            text[a..b] == fresh,
            "docs/runtime.md is stale: put this between its markers:\n{fresh}"
        );
    }

    #[test]
    fn markdown_lists_every_variable_and_key() {
        let md = render_markdown();
        for var in VARS {
            assert!(md.contains(&format!("| `{}` |", var.name)), "{}", var.name);
        }
        assert!(md.contains("`nodes[].control_socket`"));
        let info = render_info(|n| (n == "GSAS_NODE").then(|| "2".to_string()));
        assert!(info.contains("GSAS_NODE              2"), "{info}");
        assert!(info.contains("(default: 61440)"), "{info}");
    }
}
