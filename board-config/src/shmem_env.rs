//! The OpenSHMEM environment variables (`SHMEM_*`, `SMA_*`): one table, from which
//! parsing, errors, the `SHMEM_INFO` text and the documentation come (after SOS's
//! `shmem_env_defs.h`).
//!
//! **What it is.** [`VARS`] declares every variable the library reads: its names (the
//! `SHMEM_` name first, then the deprecated `SMA_` alias where the specification has one),
//! its type, its default and what it does. [`Config::from_lookup`] reads them through a
//! lookup function (a map in tests) into a plain [`Config`]; with the `std` feature
//! `Config::from_env` reads the process environment. The library (`shmem::env`) and the
//! launcher (`oshrun` checks the variables it hands to its PEs before it starts any, so
//! that a bad value is one line and exit 2, not one line per PE) share this table. A
//! `SHMEM_` name wins over its `SMA_` alias. Booleans count as set when the variable is
//! present at all, whatever its value (even `0`), as in SOS.
//!
//! `SHMEM_SYMMETRIC_SIZE` (OpenSHMEM 1.5 §"Environment Variables") is an integer or a
//! floating-point number with an optional multiplier `k`/`K`, `m`/`M`, `g`/`G` or `t`/`T`
//! (powers of 2^10); the heap gets `ceil(number * scale)` bytes, at least
//! [`MIN_SYMMETRIC_SIZE`] (4k, a page; the cluster file's `defaults.symmetric_size` has the
//! same minimum). Only one multiplier is recognised and characters after it are ignored
//! (`20kk` is `20k`); anything else after the number is an error naming the variable and
//! its value.
//!
//! **What it is not.** The runtime's `GSAS_*` variables are `gsas_transport::config`'s.
//!
//! **Thread-safety.** Pure functions and plain data.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::{String, ToString};
use core::fmt;
use core::time::Duration;

use crate::parse_size;

/// The type of a variable's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Set when present, whatever the value.
    Bool,
    /// A size with an optional `k/m/g/t` multiplier ([`parse_size`]: board-config's one size
    /// grammar, the specification's for `SHMEM_SYMMETRIC_SIZE`).
    Size,
    /// A positive number of seconds (integer or decimal).
    Seconds,
    /// A non-negative integer.
    Count,
}

impl Kind {
    /// How the documentation names the type.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Bool => "boolean (set = on)",
            Kind::Size => "size (number, decimals allowed, with optional k/m/g/t)",
            Kind::Seconds => "seconds (number > 0)",
            Kind::Count => "integer (>= 0)",
        }
    }
}

/// One environment variable of the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvVar {
    /// The `SHMEM_` name.
    pub name: &'static str,
    /// The deprecated `SMA_` alias, if the specification has one.
    pub alias: Option<&'static str>,
    /// Its type.
    pub kind: Kind,
    /// Its default, as shown to users.
    pub default: &'static str,
    /// What it does.
    pub doc: &'static str,
}

/// `SHMEM_VERSION`.
pub const VERSION: EnvVar = EnvVar {
    name: "SHMEM_VERSION",
    alias: Some("SMA_VERSION"),
    kind: Kind::Bool,
    default: "off",
    doc: "PE 0 prints the library name and the OpenSHMEM version at start-up.",
};
/// `SHMEM_INFO`.
pub const INFO: EnvVar = EnvVar {
    name: "SHMEM_INFO",
    alias: Some("SMA_INFO"),
    kind: Kind::Bool,
    default: "off",
    doc: "PE 0 prints the library version and this list of variables at start-up.",
};
/// `SHMEM_SYMMETRIC_SIZE`.
pub const SYMMETRIC_SIZE: EnvVar = EnvVar {
    name: "SHMEM_SYMMETRIC_SIZE",
    alias: Some("SMA_SYMMETRIC_SIZE"),
    kind: Kind::Size,
    default: "the runtime's default: `defaults.symmetric_size` of the cluster file, else 64 MiB",
    doc: "Symmetric heap size of every PE in bytes; at least ceil(number * scale) bytes are provided; at least 4k (a page).",
};
/// `SHMEM_DEBUG`.
pub const DEBUG: EnvVar = EnvVar {
    name: "SHMEM_DEBUG",
    alias: Some("SMA_DEBUG"),
    kind: Kind::Bool,
    default: "off",
    doc: "Print diagnostic messages (start-up details, ignored hints) on standard error.",
};
/// `SHMEM_QUIET` (a gsas extension).
pub const QUIET: EnvVar = EnvVar {
    name: "SHMEM_QUIET",
    alias: None,
    kind: Kind::Bool,
    default: "off",
    doc: "gsas extension: PE 0 does not print the one line that reports the job's first allocation that returns NULL (`shmem_malloc` and the other allocation routines, with the heap's size and `SHMEM_SYMMETRIC_SIZE`); `SHMEM_DEBUG` still reports every one.",
};
/// `SHMEM_WAIT_TIMEOUT` (a gsas extension).
pub const WAIT_TIMEOUT: EnvVar = EnvVar {
    name: "SHMEM_WAIT_TIMEOUT",
    alias: None,
    kind: Kind::Seconds,
    default: "3600",
    doc: "gsas extension: longest time a point-to-point wait, a signal wait, a lock acquisition or a wait inside a collective may block before the job is ended with a message naming the call.",
};

/// `SHMEM_COLL_FLAT_MAX` (a gsas extension).
pub const COLL_FLAT_MAX: EnvVar = EnvVar {
    name: "SHMEM_COLL_FLAT_MAX",
    alias: None,
    kind: Kind::Count,
    default: "8",
    doc: "gsas extension: a barrier of a team or active set on one node with at most this many PEs is flat (every PE watches every other PE's flag); larger ones gather through a tree of sub-leaders to one leader.",
};
/// `SHMEM_COLL_FANIN` (a gsas extension).
pub const COLL_FANIN: EnvVar = EnvVar {
    name: "SHMEM_COLL_FANIN",
    alias: None,
    kind: Kind::Count,
    default: "8",
    doc: "gsas extension: fan-in of the intra-node arrival tree of barriers (each sub-leader waits for this many PEs; at least 1).",
};
/// `SHMEM_COLL_RING_MIN` (a gsas extension).
pub const COLL_RING_MIN: EnvVar = EnvVar {
    name: "SHMEM_COLL_RING_MIN",
    alias: None,
    kind: Kind::Size,
    default: "256k",
    doc: "gsas extension: collect and fcollect exchange the nodes' blocks between three or more nodes over a ring once the largest node block has this many bytes; below, by recursive doubling.",
};
/// `SHMEM_COLL_SPIN_US` (a gsas extension).
pub const COLL_SPIN_US: EnvVar = EnvVar {
    name: "SHMEM_COLL_SPIN_US",
    alias: None,
    kind: Kind::Count,
    default: "20",
    doc: "gsas extension: microseconds a collective spins on a flag before it yields the CPU (then it yields for 500 us, then sleeps in growing steps of up to 100 us); no spinning while a spin would keep another thread off a CPU: the node runs more PEs than the process may use CPUs, or the machine has more runnable threads than CPUs (sampled every 10 ms, two samples in a row).",
};
/// `SHMEM_COLL_DIRECT_MAX` (a gsas extension).
pub const COLL_DIRECT_MAX: EnvVar = EnvVar {
    name: "SHMEM_COLL_DIRECT_MAX",
    alias: None,
    kind: Kind::Size,
    default: "256k",
    doc: "gsas extension: across nodes over UDP, collectives send their signals straight to the waiting PE's own socket, and data of up to this many bytes per step with them, in datagrams of `SHMEM_COLL_DIRECT_CHUNK` bytes (larger data goes through the services; a `collect` between nodes whose PEs all have the endpoint sends its blocks directly whatever their size); 0 sends everything through the services. Must be the same on every PE.",
};
/// `SHMEM_COLL_DIRECT_CHUNK` (a gsas extension).
pub const COLL_DIRECT_CHUNK: EnvVar = EnvVar {
    name: "SHMEM_COLL_DIRECT_CHUNK",
    alias: None,
    kind: Kind::Size,
    default: "what a datagram of the job's UDP MTU (`GSAS_UDP_MTU`, `defaults.udp_mtu`) holds after its headers, rounded down to 64 bytes (61312 for 61440)",
    doc: "gsas extension: most data bytes per packet of the collectives' direct path (larger values are taken as what a datagram holds; rounded down to a multiple of 64, at least 64): larger data is cut into packets at multiples of 64 bytes of its destination address. Must be the same on every PE.",
};
/// `SHMEM_P2P_DIRECT_MAX` (a gsas extension).
pub const P2P_DIRECT_MAX: EnvVar = EnvVar {
    name: "SHMEM_P2P_DIRECT_MAX",
    alias: None,
    kind: Kind::Size,
    default: "1k",
    doc: "gsas extension: across nodes over UDP, a blocking put (`shmem_p`, `shmem_put`, `shmem_putmem`, `shmem_put_signal`, ...) of up to this many bytes that fits one datagram of the collectives' endpoint goes straight to the target PE's own socket, which the target applies while it waits or tests (or its keeper thread, as soon as it arrives, when the target sleeps or computes) and then acknowledges, instead of through the target node's atomic service; only while nothing of this PE's is in flight through a service, so that no earlier operation is overtaken. 0 sends every put through the services. Needs the collectives' endpoint (`SHMEM_COLL_DIRECT_MAX` above 0).",
};

/// Every variable, in the order of the documentation.
pub const VARS: &[EnvVar] = &[
    VERSION,
    INFO,
    SYMMETRIC_SIZE,
    DEBUG,
    QUIET,
    WAIT_TIMEOUT,
    COLL_FLAT_MAX,
    COLL_FANIN,
    COLL_RING_MIN,
    COLL_SPIN_US,
    COLL_DIRECT_MAX,
    COLL_DIRECT_CHUNK,
    P2P_DIRECT_MAX,
];

/// The smallest `SHMEM_SYMMETRIC_SIZE` (and `defaults.symmetric_size`): one page.
pub const MIN_SYMMETRIC_SIZE: u64 = 4096;

/// Default of [`WAIT_TIMEOUT`].
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(3600);

/// What the variables say.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `SHMEM_VERSION`.
    pub version: bool,
    /// `SHMEM_INFO`.
    pub info: bool,
    /// `SHMEM_DEBUG`.
    pub debug: bool,
    /// `SHMEM_QUIET`.
    pub quiet: bool,
    /// `SHMEM_SYMMETRIC_SIZE` in bytes; `None` when unset (the runtime's default applies).
    pub symmetric_size: Option<u64>,
    /// `SHMEM_WAIT_TIMEOUT`.
    pub wait_timeout: Duration,
    /// `SHMEM_COLL_FLAT_MAX`.
    pub coll_flat_max: u64,
    /// `SHMEM_COLL_FANIN` (at least 1).
    pub coll_fanin: u64,
    /// `SHMEM_COLL_RING_MIN` in bytes.
    pub coll_ring_min: u64,
    /// `SHMEM_COLL_SPIN_US`.
    pub coll_spin_us: u64,
    /// `SHMEM_COLL_DIRECT_MAX` in bytes.
    pub coll_direct_max: u64,
    /// `SHMEM_COLL_DIRECT_CHUNK` in bytes; `None` when unset (from the UDP MTU).
    pub coll_direct_chunk: Option<u64>,
    /// `SHMEM_P2P_DIRECT_MAX` in bytes.
    pub p2p_direct_max: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: false,
            info: false,
            debug: false,
            quiet: false,
            symmetric_size: None,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            coll_flat_max: 8,
            coll_fanin: 8,
            coll_ring_min: 256 << 10,
            coll_spin_us: 20,
            coll_direct_max: 256 << 10,
            coll_direct_chunk: None,
            p2p_direct_max: 1 << 10,
        }
    }
}

/// A variable with a value the library cannot use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvError {
    /// The name the value was read from (`SHMEM_...` or `SMA_...`).
    pub name: String,
    /// The value.
    pub value: String,
    /// Why it is refused.
    pub reason: String,
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "environment variable {}={:?} is invalid: {}",
            self.name, self.value, self.reason
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for EnvError {}

/// The value of `var` and the name it came from: the `SHMEM_` name first, then the alias.
fn lookup_var(var: &EnvVar, lookup: &impl Fn(&str) -> Option<String>) -> Option<(String, String)> {
    if let Some(v) = lookup(var.name) {
        return Some((var.name.to_owned(), v));
    }
    var.alias.and_then(|a| lookup(a).map(|v| (a.to_owned(), v)))
}

impl Config {
    /// Reads the variables of [`VARS`] through `lookup`.
    ///
    /// Errors: the first variable whose value does not parse, with its name and value.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, EnvError> {
        let mut c = Config::default();
        for var in VARS {
            let Some((name, value)) = lookup_var(var, &lookup) else {
                continue;
            };
            let bad = |reason: String| EnvError {
                name: name.clone(),
                value: value.clone(),
                reason,
            };
            match var.kind {
                Kind::Bool => {
                    let on = true;
                    match var.name {
                        "SHMEM_VERSION" => c.version = on,
                        "SHMEM_INFO" => c.info = on,
                        "SHMEM_DEBUG" => c.debug = on,
                        "SHMEM_QUIET" => c.quiet = on,
                        _ => {}
                    }
                }
                Kind::Size => {
                    let v = parse_size(&value).map_err(|e| bad(e.to_string()))?;
                    match var.name {
                        "SHMEM_COLL_RING_MIN" => c.coll_ring_min = v,
                        "SHMEM_COLL_DIRECT_MAX" => c.coll_direct_max = v,
                        "SHMEM_P2P_DIRECT_MAX" => c.p2p_direct_max = v,
                        "SHMEM_COLL_DIRECT_CHUNK" if v == 0 => {
                            return Err(bad("a datagram carries at least 1 byte".into()));
                        }
                        "SHMEM_COLL_DIRECT_CHUNK" => c.coll_direct_chunk = Some(v),
                        _ if v < MIN_SYMMETRIC_SIZE => {
                            return Err(bad(format!(
                                "the symmetric heap needs at least {MIN_SYMMETRIC_SIZE} bytes \
                                 (4k, a page); try 64m"
                            )));
                        }
                        _ => c.symmetric_size = Some(v),
                    }
                }
                Kind::Seconds => c.wait_timeout = parse_seconds(&value).map_err(bad)?,
                Kind::Count => {
                    let v = parse_count(&value).map_err(bad)?;
                    match var.name {
                        "SHMEM_COLL_FLAT_MAX" => c.coll_flat_max = v,
                        "SHMEM_COLL_FANIN" if v == 0 => {
                            return Err(bad("the fan-in must be at least 1".into()));
                        }
                        "SHMEM_COLL_FANIN" => c.coll_fanin = v,
                        _ => c.coll_spin_us = v,
                    }
                }
            }
        }
        Ok(c)
    }

    #[cfg(feature = "std")]
    /// [`Config::from_lookup`] over the process environment (non-UTF-8 values are invalid
    /// values of their variable).
    pub fn from_env() -> Result<Config, EnvError> {
        for var in VARS {
            for name in std::iter::once(var.name).chain(var.alias) {
                if let Some(v) = std::env::var_os(name) {
                    if v.to_str().is_none() {
                        return Err(EnvError {
                            name: name.to_owned(),
                            value: v.to_string_lossy().into_owned(),
                            reason: "not valid UTF-8".into(),
                        });
                    }
                }
            }
        }
        Config::from_lookup(|name| std::env::var(name).ok())
    }
}

/// Parses a positive number of seconds (`30`, `0.5`).
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds such as 600 or 0.5".to_string())?;
    if !(v > 0.0 && v <= 1e9) {
        return Err("must be greater than 0 and at most 1e9 seconds".into());
    }
    Ok(Duration::from_secs_f64(v))
}

/// Parses a non-negative integer (`0`, `16`).
fn parse_count(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| "expected a non-negative integer such as 0, 4 or 16".to_string())
}

/// The Markdown table of the module documentation.
pub fn render_markdown() -> String {
    let mut s =
        String::from("| variable | alias | type | default | meaning |\n|---|---|---|---|---|\n");
    for v in VARS {
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            v.name,
            v.alias.map_or("-".to_string(), |a| format!("`{a}`")),
            v.kind.describe(),
            v.default,
            v.doc
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, EnvError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|n| m.get(n).cloned())
    }

    #[test]
    fn sizes_use_the_one_grammar_and_name_the_variable_on_error() {
        // The grammar itself is tested in board-config (size.rs).
        let c = cfg(&[
            ("SHMEM_SYMMETRIC_SIZE", "3.1M"),
            ("SHMEM_COLL_RING_MIN", "2k"),
        ])
        .unwrap();
        assert_eq!(c.symmetric_size, Some(3_250_586));
        assert_eq!(c.coll_ring_min, 2048);
        let e = cfg(&[("SHMEM_SYMMETRIC_SIZE", "20x")]).unwrap_err();
        assert_eq!(e.name, "SHMEM_SYMMETRIC_SIZE");
        assert!(e.reason.contains("'x'"), "{}", e.reason);
    }

    #[test]
    fn a_heap_smaller_than_a_page_is_refused_naming_the_variable() {
        for small in ["0", "1k", "4095", "0.5k"] {
            let e = cfg(&[("SHMEM_SYMMETRIC_SIZE", small)]).unwrap_err();
            assert_eq!(
                (e.name.as_str(), e.value.as_str()),
                ("SHMEM_SYMMETRIC_SIZE", small)
            );
            assert!(e.reason.contains("at least 4096 bytes"), "{e}");
        }
        let e = cfg(&[("SMA_SYMMETRIC_SIZE", "1k")]).unwrap_err();
        assert_eq!(e.name, "SMA_SYMMETRIC_SIZE");
        assert_eq!(
            cfg(&[("SHMEM_SYMMETRIC_SIZE", "4k")])
                .unwrap()
                .symmetric_size,
            Some(4096)
        );
    }

    #[test]
    fn table_lookup_aliases_and_errors() {
        assert_eq!(cfg(&[]).unwrap(), Config::default());
        let c = cfg(&[("SMA_SYMMETRIC_SIZE", "1m"), ("SMA_DEBUG", "0")]).unwrap();
        assert_eq!(c.symmetric_size, Some(1 << 20));
        assert!(c.debug, "a boolean is on when present, even as 0");
        let c = cfg(&[("SMA_SYMMETRIC_SIZE", "1m"), ("SHMEM_SYMMETRIC_SIZE", "2m")]).unwrap();
        assert_eq!(c.symmetric_size, Some(2 << 20), "SHMEM_ wins over SMA_");
        let c = cfg(&[("SHMEM_VERSION", ""), ("SHMEM_INFO", "yes")]).unwrap();
        assert!(c.version && c.info && !c.debug && !c.quiet);
        assert!(cfg(&[("SHMEM_QUIET", "1")]).unwrap().quiet);
        let c = cfg(&[("SHMEM_WAIT_TIMEOUT", "2.5")]).unwrap();
        assert_eq!(c.wait_timeout, Duration::from_millis(2500));

        let e = cfg(&[("SMA_SYMMETRIC_SIZE", "lots")]).unwrap_err();
        assert_eq!(e.name, "SMA_SYMMETRIC_SIZE");
        let text = e.to_string();
        assert!(text.contains("SMA_SYMMETRIC_SIZE=\"lots\""), "{text}");
        let e = cfg(&[("SHMEM_WAIT_TIMEOUT", "0")]).unwrap_err();
        assert!(e.to_string().contains("SHMEM_WAIT_TIMEOUT"), "{e}");
    }

    #[test]
    fn collective_tuning() {
        let c = cfg(&[
            ("SHMEM_COLL_FLAT_MAX", "2"),
            ("SHMEM_COLL_FANIN", "3"),
            ("SHMEM_COLL_RING_MIN", "1m"),
            ("SHMEM_COLL_SPIN_US", "0"),
        ])
        .unwrap();
        assert_eq!(
            (
                c.coll_flat_max,
                c.coll_fanin,
                c.coll_ring_min,
                c.coll_spin_us
            ),
            (2, 3, 1 << 20, 0)
        );
        assert_eq!(
            c.symmetric_size, None,
            "the ring threshold is not the heap size"
        );
        let e = cfg(&[("SHMEM_COLL_FANIN", "0")]).unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        let e = cfg(&[("SHMEM_COLL_FLAT_MAX", "-1")]).unwrap_err();
        assert_eq!(e.name, "SHMEM_COLL_FLAT_MAX");
        let e = cfg(&[("SHMEM_COLL_SPIN_US", "lots")]).unwrap_err();
        assert!(e.to_string().contains("non-negative integer"), "{e}");
    }
}
