//! Loading a cluster from a TOML file (feature `std`).
//!
//! What it is: [`Cluster::load`] and [`Cluster::from_toml_str`], which read the format
//! documented in `docs/config.md`, driven by the key table in [`crate::keys`]: a key that
//! is not in the table is refused (with the closest known key as a hint), a value of the
//! wrong type or outside the table's range is refused, and absent keys take the table's
//! defaults. The result then goes through [`Cluster::new`]'s consistency checks. Every
//! failure is a [`ConfigError`] naming the file, the 1-based line, the key and the reason:
//!
//! ```text
//! configs/two.toml:14: nodes[1].udp_port: 70000 is out of range 1..=65535
//! ```
//!
//! What it is not: a writer (configurations are written by people), and not lenient:
//! unknown keys are errors, not warnings, so a typo never silently falls back to a default.
//! It reads no environment variables; callers apply overrides to the returned values.
//!
//! Thread safety: the functions share no state; call them from any thread.
//!
//! ```
//! use board_config::Cluster;
//!
//! let text = r#"
//! [cluster]
//! name = "pair"
//!
//! [[nodes]]
//! id = 0
//! host = "127.0.0.1"
//! udp_port = 7000
//! control_socket = "/tmp/gsas-pair-0.sock"
//!
//! [[nodes]]
//! id = 1
//! host = "127.0.0.1"
//! udp_port = 70000
//! "#;
//! let err = Cluster::from_toml_str("pair.toml", text).unwrap_err();
//! assert_eq!(err.to_string(), "pair.toml:14: nodes[1].udp_port: 70000 is out of range 1..=65535");
//! assert_eq!((err.line(), err.key()), (Some(14), Some("nodes[1].udp_port")));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::string::{String, ToString};
use std::vec::Vec;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::board::{Board, BoardKind};
use crate::cluster::{Cluster, JobDefaults};
use crate::coord::{Coord, CoordError};
use crate::keys::{self, DefaultValue, KeyPath, KeySpec, Section, ValueKind, keys_of};
use crate::node::{Node, Transport};
use crate::size::{ByteSize, parse_size};
use crate::validate::ValidationError;

/// What kind of problem a [`ConfigError`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The file could not be read.
    Io,
    /// The text is not valid TOML.
    Syntax,
    /// A key that the key table does not know.
    UnknownKey,
    /// A required key is absent.
    Missing,
    /// A value of the wrong TOML type.
    WrongType,
    /// A number, size or coordinate field outside its range.
    OutOfRange,
    /// A value of the right type that is still not acceptable (bad size or coordinate text,
    /// unknown transport), or a failed consistency check.
    Invalid,
}

/// A configuration error: file, line, key and reason.
///
/// Displays as `file:line: key: reason`; without a key (syntax errors) as
/// `file:line: reason`; for I/O errors as `file: reason`.
#[derive(Debug)]
pub struct ConfigError {
    kind: ErrorKind,
    file: String,
    line: Option<usize>,
    key: Option<String>,
    reason: String,
    source: Option<std::io::Error>,
}

impl ConfigError {
    /// The kind of problem.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The file name as given to the loader.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The 1-based line; `None` only for I/O errors.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The key path (`nodes[1].udp_port`); `None` for I/O and syntax errors.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The reason, without file, line or key.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl Cluster {
    /// Reads and validates the configuration file at `path`.
    pub fn load(path: impl AsRef<Path>) -> core::result::Result<Self, ConfigError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Self::from_toml_str(&file, &text),
            Err(e) => Err(ConfigError {
                kind: ErrorKind::Io,
                reason: format!("cannot read the configuration file: {e}"),
                file,
                line: None,
                key: None,
                source: Some(e),
            }),
        }
    }

    /// Parses and validates configuration text; `file` is only used in error messages.
    pub fn from_toml_str(file: &str, text: &str) -> core::result::Result<Self, ConfigError> {
        let mut loader = Loader::new(file, text);
        let doc = DeTable::parse(text).map_err(|e| {
            let line = e.span().map_or(1, |s| loader.line_of(s.start));
            loader.error(
                ErrorKind::Syntax,
                line,
                None,
                format!("TOML syntax: {}", e.message().trim_end()),
            )
        })?;
        loader.cluster(doc.get_ref())
    }
}

type Result<T> = core::result::Result<T, ConfigError>;
type Value<'i> = Spanned<DeValue<'i>>;

/// One table of the document and where it is.
#[derive(Clone, Copy)]
struct Table<'a, 'i> {
    /// `None` for an absent optional table (every key takes its default).
    inner: Option<&'a DeTable<'i>>,
    section: Section,
    index: Option<usize>,
    /// Line of the table's header (1 for the top level and absent tables).
    line: usize,
}

impl Table<'_, '_> {
    fn path(&self, spec: &'static KeySpec) -> KeyPath {
        KeyPath {
            section: spec.section,
            index: self.index,
            key: Some(spec.name),
        }
    }

    /// The display path of any key name in this table, known or not.
    fn path_text(&self, name: &str) -> String {
        let whole = KeyPath {
            section: self.section,
            index: self.index,
            key: None,
        };
        if self.section == Section::Root {
            name.to_string()
        } else {
            format!("{whole}.{name}")
        }
    }
}

struct Loader<'s> {
    file: &'s str,
    /// Byte offset of the start of every line.
    line_starts: Vec<usize>,
    /// Line of every key and table seen, for consistency errors.
    lines: BTreeMap<KeyPath, usize>,
}

impl<'s> Loader<'s> {
    fn new(file: &'s str, text: &str) -> Self {
        let line_starts = core::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self {
            file,
            line_starts,
            lines: BTreeMap::new(),
        }
    }

    /// 1-based line of a byte offset.
    fn line_of(&self, offset: usize) -> usize {
        self.line_starts
            .partition_point(|&start| start <= offset)
            .max(1)
    }

    fn error(
        &self,
        kind: ErrorKind,
        line: usize,
        key: Option<String>,
        reason: String,
    ) -> ConfigError {
        ConfigError {
            kind,
            file: self.file.to_string(),
            line: Some(line),
            key,
            reason,
            source: None,
        }
    }

    fn value_error(
        &self,
        kind: ErrorKind,
        t: &Table<'_, '_>,
        spec: &'static KeySpec,
        v: &Value<'_>,
        reason: String,
    ) -> ConfigError {
        self.error(
            kind,
            self.line_of(v.span().start),
            Some(t.path(spec).to_string()),
            reason,
        )
    }

    fn wrong_type(&self, t: &Table<'_, '_>, spec: &'static KeySpec, v: &Value<'_>) -> ConfigError {
        self.value_error(
            ErrorKind::WrongType,
            t,
            spec,
            v,
            format!(
                "expected {}, found {}",
                spec.kind.expected(),
                v.get_ref().type_str()
            ),
        )
    }

    /// Converts a validation failure into a report on the line of the key it names, or of
    /// the nearest enclosing table when the key was not written (a default).
    fn validation_error(&self, e: ValidationError) -> ConfigError {
        let p = e.path;
        let candidates = [
            p,
            KeyPath { key: None, ..p },
            KeyPath {
                key: None,
                index: None,
                ..p
            },
        ];
        let line = candidates
            .iter()
            .find_map(|c| self.lines.get(c))
            .copied()
            .unwrap_or(1);
        let mut reason = e.reason;
        if !self.lines.contains_key(&p) && p.key.is_some() {
            reason.push_str(" (the key is not set; this is its default)");
        }
        self.error(ErrorKind::Invalid, line, Some(p.to_string()), reason)
    }

    /// Refuses keys the table does not declare for this section.
    fn check_keys(&self, t: &Table<'_, '_>) -> Result<()> {
        let Some(inner) = t.inner else { return Ok(()) };
        // The table iterates in key order; report the unknown key that comes first in the file.
        let first_unknown = inner
            .iter()
            .map(|(key, _)| key)
            .filter(|key| !keys_of(t.section).any(|k| k.name == key.get_ref().as_ref()))
            .min_by_key(|key| key.span().start);
        if let Some(key) = first_unknown {
            let name: &str = key.get_ref();
            let reason = match closest(name, keys_of(t.section).map(|k| k.name)) {
                Some(close) => format!("unknown key; did you mean `{close}`?"),
                None => {
                    let known: Vec<&str> = keys_of(t.section).map(|k| k.name).collect();
                    format!("unknown key (known keys here: {})", known.join(", "))
                }
            };
            return Err(self.error(
                ErrorKind::UnknownKey,
                self.line_of(key.span().start),
                Some(t.path_text(name)),
                reason,
            ));
        }
        Ok(())
    }

    /// The value of `spec` in `t`, recording its line.
    fn raw<'a, 'i>(&mut self, t: &Table<'a, 'i>, spec: &'static KeySpec) -> Option<&'a Value<'i>> {
        let (key, value) = t.inner?.get_key_value(spec.name)?;
        let line = self.line_of(key.span().start);
        self.lines.insert(t.path(spec), line);
        Some(value)
    }

    fn required<T>(&self, t: &Table<'_, '_>, spec: &'static KeySpec, v: Option<T>) -> Result<T> {
        v.ok_or_else(|| {
            let what = match spec.kind {
                ValueKind::Table => format!("required table [{}] is missing", spec.name),
                ValueKind::TableArray => {
                    format!("required key is missing; add a [[{}]] table", spec.name)
                }
                _ => String::from("required key is missing"),
            };
            self.error(
                ErrorKind::Missing,
                t.line,
                Some(t.path(spec).to_string()),
                what,
            )
        })
    }

    fn string(&mut self, t: &Table<'_, '_>, spec: &'static KeySpec) -> Result<Option<String>> {
        match self.raw(t, spec) {
            Some(v) => match v.get_ref() {
                DeValue::String(s) => Ok(Some(s.to_string())),
                _ => Err(self.wrong_type(t, spec, v)),
            },
            None => Ok(match spec.default {
                DefaultValue::Str(s) => Some(s.to_string()),
                _ => None,
            }),
        }
    }

    fn bool(&mut self, t: &Table<'_, '_>, spec: &'static KeySpec) -> Result<Option<bool>> {
        match self.raw(t, spec) {
            Some(v) => v
                .get_ref()
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.wrong_type(t, spec, v)),
            None => Ok(match spec.default {
                DefaultValue::Bool(b) => Some(b),
                _ => None,
            }),
        }
    }

    /// An integer value, range-checked against the key table.
    fn integer(&self, t: &Table<'_, '_>, spec: &'static KeySpec, v: &Value<'_>) -> Result<i64> {
        let DeValue::Integer(i) = v.get_ref() else {
            return Err(self.wrong_type(t, spec, v));
        };
        let out_of_range = |shown: &str| {
            let reason = match spec.kind {
                ValueKind::Int { min, max } | ValueKind::IntList { min, max } => {
                    format!("{shown} is out of range {min}..={max}")
                }
                _ => format!("{shown} does not fit in 64 bits"),
            };
            self.value_error(ErrorKind::OutOfRange, t, spec, v, reason)
        };
        let value =
            i64::from_str_radix(i.as_str(), i.radix()).map_err(|_| out_of_range(&i.to_string()))?;
        spec.check_int(value)
            .map_err(|reason| self.value_error(ErrorKind::OutOfRange, t, spec, v, reason))?;
        Ok(value)
    }

    fn int<T: TryFrom<i64>>(
        &mut self,
        t: &Table<'_, '_>,
        spec: &'static KeySpec,
    ) -> Result<Option<T>> {
        let value = match self.raw(t, spec) {
            Some(v) => Some((self.integer(t, spec, v)?, Some(v))),
            None => match spec.default {
                DefaultValue::Int(d) => Some((d, None)),
                _ => None,
            },
        };
        match value {
            None => Ok(None),
            Some((value, at)) => T::try_from(value).map(Some).map_err(|_| {
                let line = at.map_or(t.line, |v| self.line_of(v.span().start));
                self.error(
                    ErrorKind::OutOfRange,
                    line,
                    Some(t.path(spec).to_string()),
                    format!("{value} does not fit this key's type"),
                )
            }),
        }
    }

    fn size(&mut self, t: &Table<'_, '_>, spec: &'static KeySpec) -> Result<Option<u64>> {
        let Some(v) = self.raw(t, spec) else {
            return Ok(match spec.default {
                DefaultValue::Size(s) => Some(s),
                _ => None,
            });
        };
        let bytes = match v.get_ref() {
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| {
                    let reason = match spec.kind {
                        ValueKind::Size { min, max } => {
                            format!("{i} is out of range {}..={}", ByteSize(min), ByteSize(max))
                        }
                        _ => format!("{i} is not a byte count"),
                    };
                    self.value_error(ErrorKind::OutOfRange, t, spec, v, reason)
                })?,
            DeValue::String(s) => parse_size(s).map_err(|e| {
                self.value_error(
                    ErrorKind::Invalid,
                    t,
                    spec,
                    v,
                    format!("\"{s}\" is not a size: {e}"),
                )
            })?,
            _ => return Err(self.wrong_type(t, spec, v)),
        };
        spec.check_size(bytes)
            .map_err(|reason| self.value_error(ErrorKind::OutOfRange, t, spec, v, reason))?;
        Ok(Some(bytes))
    }

    fn coord(&mut self, t: &Table<'_, '_>, spec: &'static KeySpec) -> Result<Option<Coord>> {
        let Some(v) = self.raw(t, spec) else {
            return Ok(None);
        };
        let parsed = match v.get_ref() {
            DeValue::String(s) => s.parse::<Coord>(),
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .and_then(|n| u32::try_from(n).ok())
            {
                Some(raw) => Coord::from_raw(raw),
                None => Err(CoordError::Syntax),
            },
            _ => return Err(self.wrong_type(t, spec, v)),
        };
        parsed.map(Some).map_err(|e| {
            let (kind, reason) = match (e, v.get_ref()) {
                (CoordError::Syntax, DeValue::Integer(i)) => (
                    ErrorKind::OutOfRange,
                    format!(
                        "raw coordinate {i} is out of range 0..={:#x}",
                        Coord::RAW_MAX
                    ),
                ),
                (CoordError::Syntax, _) => (ErrorKind::Invalid, e.to_string()),
                _ => (ErrorKind::OutOfRange, e.to_string()),
            };
            self.value_error(kind, t, spec, v, reason)
        })
    }

    fn choice(&mut self, t: &Table<'_, '_>, spec: &'static KeySpec) -> Result<Option<String>> {
        let ValueKind::Choice(words) = spec.kind else {
            return self.string(t, spec);
        };
        let value = self.string(t, spec)?;
        if let (Some(word), Some(v)) = (&value, self.raw(t, spec)) {
            if !words.contains(&word.as_str()) {
                let list: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
                let mut reason = format!("\"{word}\" is not one of {}", list.join(", "));
                if let Some(close) = closest(word, words.iter().copied()) {
                    reason.push_str(&format!("; did you mean \"{close}\"?"));
                }
                return Err(self.value_error(ErrorKind::Invalid, t, spec, v, reason));
            }
        }
        Ok(value)
    }

    /// The elements of an array key, each with its display path.
    fn array<'a, 'i>(
        &mut self,
        t: &Table<'a, 'i>,
        spec: &'static KeySpec,
    ) -> Result<Option<Vec<(String, &'a Value<'i>)>>> {
        let Some(v) = self.raw(t, spec) else {
            return Ok(match spec.default {
                DefaultValue::EmptyList => Some(Vec::new()),
                _ => None,
            });
        };
        let DeValue::Array(items) = v.get_ref() else {
            return Err(self.wrong_type(t, spec, v));
        };
        let base = t.path(spec).to_string();
        Ok(Some(
            items
                .iter()
                .enumerate()
                .map(|(k, item)| (format!("{base}[{k}]"), item))
                .collect(),
        ))
    }

    fn element_error(
        &self,
        key: String,
        v: &Value<'_>,
        kind: ErrorKind,
        reason: String,
    ) -> ConfigError {
        self.error(kind, self.line_of(v.span().start), Some(key), reason)
    }

    fn str_list(&mut self, t: &Table<'_, '_>, spec: &'static KeySpec) -> Result<Vec<String>> {
        let Some(items) = self.array(t, spec)? else {
            return Ok(Vec::new());
        };
        items
            .into_iter()
            .map(|(key, v)| match v.get_ref() {
                DeValue::String(s) => Ok(s.to_string()),
                other => Err(self.element_error(
                    key,
                    v,
                    ErrorKind::WrongType,
                    format!("expected a string, found {}", other.type_str()),
                )),
            })
            .collect()
    }

    fn u16_list(&mut self, t: &Table<'_, '_>, spec: &'static KeySpec) -> Result<Option<Vec<u16>>> {
        let Some(items) = self.array(t, spec)? else {
            return Ok(None);
        };
        items
            .into_iter()
            .map(|(key, v)| {
                let DeValue::Integer(i) = v.get_ref() else {
                    return Err(self.element_error(
                        key,
                        v,
                        ErrorKind::WrongType,
                        format!("expected an integer, found {}", v.get_ref().type_str()),
                    ));
                };
                i64::from_str_radix(i.as_str(), i.radix())
                    .ok()
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| {
                        self.element_error(
                            key,
                            v,
                            ErrorKind::OutOfRange,
                            format!("{i} is out of range 0..={}", u16::MAX),
                        )
                    })
            })
            .collect::<Result<Vec<u16>>>()
            .map(Some)
    }

    /// A sub-table of the top level (`[cluster]`, `[defaults]`).
    fn table<'a, 'i>(
        &mut self,
        root: &Table<'a, 'i>,
        spec: &'static KeySpec,
        section: Section,
    ) -> Result<Table<'a, 'i>> {
        let mut t = Table {
            inner: None,
            section,
            index: None,
            line: 1,
        };
        if let Some(v) = self.raw(root, spec) {
            let DeValue::Table(inner) = v.get_ref() else {
                return Err(self.wrong_type(root, spec, v));
            };
            t.inner = Some(inner);
            t.line = self.line_of(v.span().start);
            self.lines.insert(
                KeyPath {
                    section,
                    index: None,
                    key: None,
                },
                t.line,
            );
        } else if spec.default == DefaultValue::Required {
            self.required::<()>(root, spec, None)?;
        }
        self.check_keys(&t)?;
        Ok(t)
    }

    /// The elements of an array of tables (`[[nodes]]`).
    fn table_array<'a, 'i>(
        &mut self,
        root: &Table<'a, 'i>,
        spec: &'static KeySpec,
        section: Section,
    ) -> Result<Vec<Table<'a, 'i>>> {
        let Some(v) = self.raw(root, spec) else {
            if spec.default == DefaultValue::Required {
                self.required::<()>(root, spec, None)?;
            }
            return Ok(Vec::new());
        };
        let DeValue::Array(items) = v.get_ref() else {
            return Err(self.wrong_type(root, spec, v));
        };
        let mut tables = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let DeValue::Table(inner) = item.get_ref() else {
                return Err(self.element_error(
                    format!("{}[{i}]", spec.name),
                    item,
                    ErrorKind::WrongType,
                    format!("expected a table, found {}", item.get_ref().type_str()),
                ));
            };
            let line = self.line_of(item.span().start);
            self.lines.insert(KeyPath::element(section, i), line);
            let t = Table {
                inner: Some(inner),
                section,
                index: Some(i),
                line,
            };
            self.check_keys(&t)?;
            tables.push(t);
        }
        Ok(tables)
    }

    fn cluster(&mut self, doc: &DeTable<'_>) -> Result<Cluster> {
        let root = Table {
            inner: Some(doc),
            section: Section::Root,
            index: None,
            line: 1,
        };
        self.check_keys(&root)?;
        let cluster = self.table(&root, &keys::ROOT_CLUSTER, Section::Cluster)?;
        let name = self.string(&cluster, &keys::CLUSTER_NAME)?;
        let name = self.required(&cluster, &keys::CLUSTER_NAME, name)?;
        let defaults = self.table(&root, &keys::ROOT_DEFAULTS, Section::Defaults)?;
        let defaults = self.defaults(&defaults)?;
        let node_tables = self.table_array(&root, &keys::ROOT_NODES, Section::Node)?;
        let nodes = node_tables
            .iter()
            .map(|t| self.node(t))
            .collect::<Result<Vec<Node>>>()?;
        let board_tables = self.table_array(&root, &keys::ROOT_BOARDS, Section::Board)?;
        let boards = board_tables
            .iter()
            .map(|t| self.board(t))
            .collect::<Result<Vec<Board>>>()?;
        Cluster::new(name, defaults, nodes, boards).map_err(|e| self.validation_error(e))
    }

    fn defaults(&mut self, t: &Table<'_, '_>) -> Result<JobDefaults> {
        let fallback = JobDefaults::default();
        Ok(JobDefaults {
            symmetric_size: self
                .size(t, &keys::DEFAULTS_SYMMETRIC_SIZE)?
                .unwrap_or(fallback.symmetric_size),
            service_timeout_ms: self
                .int(t, &keys::DEFAULTS_SERVICE_TIMEOUT_MS)?
                .unwrap_or(fallback.service_timeout_ms),
            udp_mtu: self
                .int(t, &keys::DEFAULTS_UDP_MTU)?
                .unwrap_or(fallback.udp_mtu),
            fork_allowed: self
                .bool(t, &keys::DEFAULTS_FORK_ALLOWED)?
                .unwrap_or(fallback.fork_allowed),
            fork_secret_file: self.string(t, &keys::DEFAULTS_FORK_SECRET_FILE)?,
            verbs_rma_via_service: self
                .choice(t, &keys::DEFAULTS_VERBS_RMA)?
                .map_or(fallback.verbs_rma_via_service, |w| w == "service"),
            require_allocation: self
                .bool(t, &keys::DEFAULTS_REQUIRE_ALLOCATION)?
                .unwrap_or(fallback.require_allocation),
        })
    }

    fn node(&mut self, t: &Table<'_, '_>) -> Result<Node> {
        let id = self.int::<u16>(t, &keys::NODE_ID)?;
        let id = self.required(t, &keys::NODE_ID, id)?;
        let host = self.string(t, &keys::NODE_HOST)?;
        let host = self.required(t, &keys::NODE_HOST, host)?;
        let coord = match self.coord(t, &keys::NODE_COORD)? {
            Some(c) => c,
            None => Coord::from_index(u32::from(id)).map_err(|_| {
                self.error(
                    ErrorKind::Missing,
                    t.line,
                    Some(t.path(&keys::NODE_COORD).to_string()),
                    format!(
                        "node id {id} has no default coordinate (the emulator mapping covers ids 0..{}); set coord",
                        Coord::EMULATOR_NODES
                    ),
                )
            })?,
        };
        let mut node = Node::new(id, coord, host);
        if let Some(name) = self.string(t, &keys::NODE_NAME)? {
            node.name = name;
        }
        if let Some(port) = self.int(t, &keys::NODE_UDP_PORT)? {
            node.udp_port = port;
        }
        if let Some(bind) = self.string(t, &keys::NODE_BIND)? {
            node.bind = bind;
        }
        if let Some(socket) = self.string(t, &keys::NODE_CONTROL_SOCKET)? {
            node.control_socket = socket;
        }
        node.uio_devices = self.str_list(t, &keys::NODE_UIO_DEVICES)?;
        node.cores = self.int(t, &keys::NODE_CORES)?;
        node.memory = self.size(t, &keys::NODE_MEMORY)?;
        node.job_memory = self.size(t, &keys::NODE_JOB_MEMORY)?;
        node.user_memory = self.size(t, &keys::NODE_USER_MEMORY)?;
        if let Some(peers) = self.int(t, &keys::NODE_MAX_PEERS)? {
            node.max_peers = peers;
        }
        if let Some(word) = self.choice(t, &keys::NODE_TRANSPORT)? {
            node.transport = word.parse::<Transport>().map_err(|e| {
                self.error(
                    ErrorKind::Invalid,
                    t.line,
                    Some(t.path(&keys::NODE_TRANSPORT).to_string()),
                    e.to_string(),
                )
            })?;
        }
        node.verbs_device = self.string(t, &keys::NODE_VERBS_DEVICE)?;
        node.verbs_port = self.int(t, &keys::NODE_VERBS_PORT)?;
        if let Some(index) = self.int(t, &keys::NODE_VERBS_GID_INDEX)? {
            node.verbs_gid_index = index;
        }
        node.board = self.int(t, &keys::NODE_BOARD)?;
        Ok(node)
    }

    fn board(&mut self, t: &Table<'_, '_>) -> Result<Board> {
        let id = self.int::<u16>(t, &keys::BOARD_ID)?;
        let id = self.required(t, &keys::BOARD_ID, id)?;
        let nodes = self.u16_list(t, &keys::BOARD_NODES)?;
        let nodes = self.required(t, &keys::BOARD_NODES, nodes)?;
        let mut board = Board::new(id, BoardKind::Custom, nodes);
        if let Some(name) = self.string(t, &keys::BOARD_NAME)? {
            board.name = name;
        }
        if let Some(word) = self.choice(t, &keys::BOARD_KIND)? {
            board.kind = word.parse::<BoardKind>().map_err(|e| {
                self.error(
                    ErrorKind::Invalid,
                    t.line,
                    Some(t.path(&keys::BOARD_KIND).to_string()),
                    e.to_string(),
                )
            })?;
        }
        Ok(board)
    }
}

/// The candidate closest to `word` by edit distance, if close enough to be a likely typo
/// (at most 2 edits, or a third of the word's length for long words).
fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .map(|c| (edit_distance(word, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        core::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests;
