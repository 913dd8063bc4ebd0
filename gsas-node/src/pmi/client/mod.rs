//! The PMI client every PE runs at start-up: PMI-1, or PMI-2 where the launcher offers it.
//!
//! What it is: one connection to the process manager (MPICH Hydra's `mpiexec.hydra`,
//! Slurm's `srun --mpi=pmi2`, or gsas's own launcher through [`super::Server`]), found
//! through the environment:
//!
//! * `PMI_FD` (+ `PMI_RANK`, `PMI_SIZE`): an already connected descriptor. When
//!   `PMI_JOBID` is set too, as Slurm's `mpi/pmi2` plugin does (Hydra and gsas's launcher
//!   do not), the client speaks **PMI-2** on it: `cmd=init pmi_version=2` as a line, then
//!   length-framed `cmd=...;key=value;` messages (`fullinit`, `kvs-put`, `kvs-fence`,
//!   `kvs-get`, `info-getjobattr`, `info-putnodeattr`/`info-getnodeattr`, `abort`,
//!   `finalize`); otherwise PMI-1 lines;
//! * `PMI_PORT=host:port` + `PMI_ID`: a TCP connection and the `initack` handshake, which
//!   delivers size, rank and debug flag (PMI-1);
//! * `PMIX_RANK`, `PMIX_VERSION` or `PRTE_LAUNCHED` (a PMIx launcher: `srun --mpi=pmix`,
//!   Open MPI's `mpirun`): **PMIx** through the system's libpmix, loaded at run time
//!   (`pmix.rs`); where it cannot be loaded the process stops with an error naming the
//!   library rather than running as rank 0 of 1;
//! * none of these: a singleton (rank 0 of 1) with an in-process key-value space, unless
//!   the process is a task of a multi-task Slurm step that srun started without PMI
//!   (`srun --mpi=none`), which is refused ([`PmiError::SrunWithoutPmi`]).
//!
//! Values are bytes: the client hex-encodes them and splits values that do not fit in
//! one line across `key`, `key#1`, ... (see `value.rs`), so callers never see the
//! server's `vallen_max`. As with every PMI-1 server, a value put by one rank is
//! guaranteed visible to the others (and, under Hydra 4.0, even to the putting rank)
//! only after a [`Client::barrier`]. Responses are parsed by key, never by position, so
//! both the Hydra 4.0 and the 4.1+ token orders work.
//!
//! The same calls work over both protocols: [`Client::barrier`] is `barrier_in` or
//! `kvs-fence`, [`Client::get_raw`] is a `get` or an `info-getjobattr` (where Slurm keeps
//! `PMI_process_mapping` and `universeSize`). Node attributes ([`Client::node_put`],
//! [`Client::node_get`]) exist only in PMI-2 and in the singleton. PMIx stores a value
//! per (rank, key), so a reader names the rank that published the key
//! ([`Client::kvs_get_from`]; PMI-1 and PMI-2 ignore the rank).
//!
//! What it is not: `spawn`; a blocking get (there is none in PMI-1).
//!
//! Every wait is bounded: a request that gets no complete response within
//! [`ClientConfig::timeout`] ([`ClientConfig::barrier_timeout`] for barriers) fails with
//! [`PmiError::Timeout`] naming the command and what was received.
//!
//! Files: this one holds the types, the selection of the protocol from the environment, the
//! constructors and handshakes, and the queries; `calls.rs` the calls, each with its request
//! in every protocol (one `match` per call, so the protocols are not split into files);
//! `conn.rs` the connection, the framing and the response checks; `tests.rs` the unit tests.
//!
//! Thread-safety: `Client` is `Send` but not `Sync`; the protocol is strictly one request
//! at a time, so the runtime keeps it behind a mutex.

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::PmiError;
use super::mapping::ProcessMapping;
use super::pmix::{self, Pmix};
use super::value::{self, Plan};
use super::wire::{LineBuf, MAX_RESPONSE_LINE, Message, excerpt, excerpt_bytes, is_token};

mod calls;
mod conn;

use conn::{Conn, check_rc, initack, protocol, required_int, required_usize, resolve};

/// Timeouts of the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// Longest wait for the response to any request but `barrier_in` (default 30 s: a
    /// launcher serving many PEs on an overloaded node can be slow, and a launcher that
    /// died closes the connection, which ends the wait at once).
    pub timeout: Duration,
    /// Longest wait for `barrier_out` (default 60 s): the slowest rank may still be
    /// starting up.
    pub barrier_timeout: Duration,
    /// Longest wait for the TCP connection in `PMI_PORT` mode (default 30 s).
    pub connect_timeout: Duration,
    /// Use the system's libpmix under a PMIx launcher (default `true`); `false` refuses
    /// such launchers with [`PmiError::PmixLauncher`].
    pub pmix: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            timeout: Duration::from_secs(30),
            barrier_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            pmix: true,
        }
    }
}

/// How the client reached its process manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    /// An inherited descriptor (`PMI_FD`).
    Fd,
    /// TCP (`PMI_PORT`/`PMI_ID`).
    Port,
    /// No process manager: rank 0 of 1.
    Singleton,
    /// The system's libpmix, which reaches the PMIx server itself.
    Pmix,
}

/// The server's size limits, from `get_maxes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maxes {
    /// Longest KVS name.
    pub kvsname_max: usize,
    /// Longest key (Hydra: 64, terminating NUL included).
    pub keylen_max: usize,
    /// Longest value (Hydra: 1024, NUL included; longer values are truncated to 1023).
    pub vallen_max: usize,
}

/// Hydra's limits, used by the singleton and over PMI-2 (`PMI2_MAX_KEYLEN` 64 and
/// `PMI2_MAX_VALLEN` 1024 in MPICH and Slurm alike).
const HYDRA_MAXES: Maxes = Maxes {
    kvsname_max: 256,
    keylen_max: 64,
    vallen_max: 1024,
};

/// The variable by which Slurm's `mpi/pmi2` plugin (and MPICH's PMI-2 client) names the
/// job; its presence next to `PMI_FD` selects PMI-2.
pub const PMI2_JOBID_VAR: &str = "PMI_JOBID";

/// The wire protocol a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// PMI-1 lines (Hydra, gsas's launcher, and the singleton's local space).
    Pmi1,
    /// PMI-2 frames (Slurm's `mpi/pmi2`).
    Pmi2,
    /// PMIx through libpmix.
    Pmix,
}

/// The key under which process managers publish the rank-to-node mapping.
pub const PROCESS_MAPPING_KEY: &str = "PMI_process_mapping";

/// Set once a `Client` has taken ownership of the descriptor named by `PMI_FD`.
static ENV_FD_CLAIMED: AtomicBool = AtomicBool::new(false);

/// Variables that reveal a PMIx launcher (MPICH's `PMIU_detect_pmix_launcher`).
const PMIX_VARS: [&str; 3] = ["PMIX_VERSION", "PMIX_RANK", "PRTE_LAUNCHED"];

enum Link {
    Remote(Conn),
    Local(HashMap<String, String>),
    Pmix(Box<Pmix>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Active,
    Finalized,
    Aborted,
    /// A request timed out or got a bad response: the stream may be out of step.
    Broken,
}

/// A PMI-1 client. See the module documentation.
pub struct Client {
    link: Link,
    state: State,
    connection: Connection,
    rank: u32,
    size: u32,
    appnum: i64,
    universe_size: Option<u32>,
    kvsname: String,
    maxes: Maxes,
    debug: bool,
    protocol: Protocol,
    config: ClientConfig,
    /// The server is gsas's launcher, which takes notes (`response_to_init` said
    /// `gsas_notes=1`; see [`Client::note`]).
    notes: bool,
}

const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Client>();
};

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("connection", &self.connection)
            .field("protocol", &self.protocol)
            .field("state", &self.state)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("kvsname", &self.kvsname)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects as the environment says, with default timeouts.
    pub fn from_env() -> Result<Client, PmiError> {
        Self::from_env_with(ClientConfig::default())
    }

    /// Connects as the environment says, with the given timeouts.
    pub fn from_env_with(config: ClientConfig) -> Result<Client, PmiError> {
        Self::from_vars(config, |name| std::env::var_os(name))
    }

    /// Connects as the variables returned by `lookup` say (`PMI_FD`, `PMI_RANK`,
    /// `PMI_SIZE`, `PMI_DEBUG`, `PMI_PORT`, `PMI_ID`, and the PMIx markers). With
    /// `PMI_FD`, the client takes ownership of that descriptor (and makes it
    /// close-on-exec); a process can do so only once.
    pub fn from_vars(
        config: ClientConfig,
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Client, PmiError> {
        if let Some(raw) = lookup("PMI_FD") {
            let fd: RawFd = parse_var("PMI_FD", Some(raw))?;
            if fd <= 2 {
                return Err(env_err(
                    "PMI_FD",
                    fd,
                    "stdin, stdout and stderr cannot be PMI connections",
                ));
            }
            let rank: u32 = parse_var("PMI_RANK", lookup("PMI_RANK"))?;
            let size: u32 = parse_var("PMI_SIZE", lookup("PMI_SIZE"))?;
            check_rank_size(rank, size)?;
            let debug = match lookup("PMI_DEBUG") {
                Some(v) => parse_var::<i64>("PMI_DEBUG", Some(v))? != 0,
                None => false,
            };
            if ENV_FD_CLAIMED.swap(true, Ordering::AcqRel) {
                return Err(PmiError::Invalid(
                    "PMI_FD was already taken by another Client of this process; \
                     create one Client and share it"
                        .into(),
                ));
            }
            if !gsas_sys::fd::is_open(fd) {
                ENV_FD_CLAIMED.store(false, Ordering::Release);
                return Err(env_err(
                    "PMI_FD",
                    fd,
                    "not an open file descriptor of this process",
                ));
            }
            // SAFETY: the launcher created this descriptor for this process's PMI client
            // and named it in PMI_FD; nothing else in the process owns it by contract, it
            // is open (checked above), and ENV_FD_CLAIMED guarantees it is wrapped in an
            // OwnedFd at most once per process.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let mut c = match lookup(PMI2_JOBID_VAR) {
                Some(jobid) => {
                    let jobid = jobid.to_string_lossy().into_owned();
                    Self::from_fd_pmi2(owned, rank, size, &jobid, config)?
                }
                None => Self::from_fd(owned, rank, size, config)?,
            };
            c.debug |= debug;
            return Ok(c);
        }
        if let Some(port) = lookup("PMI_PORT") {
            let port = port.into_string().map_err(|v| PmiError::Env {
                var: "PMI_PORT",
                value: v.to_string_lossy().into_owned(),
                reason: "not valid UTF-8".into(),
            })?;
            let id: u32 = parse_var("PMI_ID", lookup("PMI_ID"))?;
            return Self::connect(&port, id, config);
        }
        if let Some(var) = PMIX_VARS.into_iter().find(|v| lookup(v).is_some()) {
            if !config.pmix {
                return Err(PmiError::PmixLauncher {
                    var,
                    reason: "PMIx is switched off in this client".into(),
                });
            }
            return match Pmix::init(config.barrier_timeout) {
                Ok(p) => Ok(Self::from_pmix(p, config)),
                Err(e) => Err(PmiError::PmixLauncher {
                    var,
                    reason: e.to_string().trim_start_matches("PMI: ").to_owned(),
                }),
            };
        }
        if let Some((var, tasks)) = srun_tasks(&lookup) {
            return Err(PmiError::SrunWithoutPmi { var, tasks });
        }
        Ok(Self::singleton(config))
    }

    /// A client over an already connected descriptor whose rank and size the launcher
    /// gave out of band; performs the `init` exchange.
    pub fn from_fd(
        fd: OwnedFd,
        rank: u32,
        size: u32,
        config: ClientConfig,
    ) -> Result<Client, PmiError> {
        check_rank_size(rank, size)?;
        let conn = Conn::new(fd)?;
        Self::start(Self::remote(
            conn,
            Connection::Fd,
            rank,
            size,
            false,
            config,
        ))
    }

    /// A PMI-2 client over an already connected descriptor (Slurm's `PMI_FD`), for rank
    /// `rank` of `size` in job `jobid` (`PMI_JOBID`): performs `init` (version 2),
    /// `fullinit`, and reads the `universeSize` job attribute. The rank and size the
    /// server reports must match the given ones.
    pub fn from_fd_pmi2(
        fd: OwnedFd,
        rank: u32,
        size: u32,
        jobid: &str,
        config: ClientConfig,
    ) -> Result<Client, PmiError> {
        check_rank_size(rank, size)?;
        if jobid.is_empty() || jobid.contains(';') || !jobid.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(env_err(
                PMI2_JOBID_VAR,
                jobid,
                "expected a job id of printable ASCII without spaces or ';'",
            ));
        }
        let conn = Conn::new(fd)?;
        let mut c = Self::remote(conn, Connection::Fd, rank, size, false, config);
        c.kvsname = jobid.to_owned();
        // The version handshake is a PMI-1 line in both directions.
        c.init_handshake(2, 0)?;
        c.protocol = Protocol::Pmi2;

        const FULLINIT: &str = "cmd=fullinit";
        let m = Message::new("fullinit")
            .with("pmijobid", jobid)
            .with("pmirank", rank)
            .with("threaded", "FALSE");
        let r = c.request(&m, FULLINIT, "fullinit-response", config.timeout)?;
        check_rc(FULLINIT, &r)?;
        let (srank, ssize) = (
            required_int(FULLINIT, &r, "rank")?,
            required_int(FULLINIT, &r, "size")?,
        );
        if (srank, ssize) != (i64::from(rank), i64::from(size)) {
            return Err(protocol(
                FULLINIT,
                &r,
                &format!(
                    "the process manager says rank {srank} of {ssize}, the environment \
                     rank {rank} of {size}"
                ),
            ));
        }
        c.appnum = r.get_int("appnum").ok().flatten().unwrap_or(0);
        c.debug = r.get("pmiverbose") == Some("TRUE");
        c.universe_size = c
            .get_raw("universeSize")?
            .and_then(|u| u.trim().parse::<u32>().ok())
            .filter(|&u| u > 0);
        log::debug!(
            "PMI-2: rank {rank} of {size}, job {jobid}, universe {:?}",
            c.universe_size
        );
        Ok(c)
    }

    /// Connects to `host:port` over TCP and identifies as `id` with the `initack`
    /// handshake (the `PMI_PORT`/`PMI_ID` mode); performs the `init` exchange.
    pub fn connect(host_port: &str, id: u32, config: ClientConfig) -> Result<Client, PmiError> {
        let addrs = resolve(host_port)?;
        let mut last = None;
        let mut stream = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, config.connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some((a, e)),
            }
        }
        let stream = match (stream, last) {
            (Some(s), _) => s,
            (None, Some((a, e))) => {
                return Err(PmiError::io(
                    format!("connecting to the process manager at PMI_PORT={host_port} ({a})"),
                    e,
                ));
            }
            (None, None) => {
                return Err(env_err("PMI_PORT", host_port, "resolves to no address"));
            }
        };
        // Small request/response lines: do not let Nagle delay them.
        stream
            .set_nodelay(true)
            .map_err(|e| PmiError::io("setting TCP_NODELAY on the PMI connection", e))?;
        let mut conn = Conn::new(OwnedFd::from(stream))?;
        let (rank, size, debug) = initack(&mut conn, id, config.timeout)?;
        Self::start(Self::remote(
            conn,
            Connection::Port,
            rank,
            size,
            debug,
            config,
        ))
    }

    fn from_pmix(p: Pmix, config: ClientConfig) -> Client {
        let universe = p
            .get_u64(pmix::RANK_WILDCARD, "pmix.univ.size")
            .ok()
            .flatten()
            .and_then(|u| u32::try_from(u).ok());
        Client {
            rank: p.rank(),
            size: p.size(),
            kvsname: p.nspace(),
            link: Link::Pmix(Box::new(p)),
            state: State::Active,
            connection: Connection::Pmix,
            appnum: 0,
            universe_size: universe,
            maxes: Maxes {
                kvsname_max: 256,
                keylen_max: 512,
                vallen_max: usize::MAX,
            },
            debug: false,
            protocol: Protocol::Pmix,
            config,
            notes: false,
        }
    }

    /// A client without process manager: rank 0 of 1, with an in-process key-value space
    /// that already holds `PMI_process_mapping=(vector,(0,1,1))`.
    pub fn singleton(config: ClientConfig) -> Client {
        let mut kvs = HashMap::new();
        kvs.insert(
            PROCESS_MAPPING_KEY.to_owned(),
            "(vector,(0,1,1))".to_owned(),
        );
        Client {
            link: Link::Local(kvs),
            state: State::Active,
            connection: Connection::Singleton,
            rank: 0,
            size: 1,
            appnum: 0,
            universe_size: Some(1),
            kvsname: "singleton_kvs".to_owned(),
            maxes: HYDRA_MAXES,
            debug: false,
            protocol: Protocol::Pmi1,
            config,
            notes: false,
        }
    }

    /// A PMI-1 client over `conn` before its `init` exchange.
    fn remote(
        conn: Conn,
        connection: Connection,
        rank: u32,
        size: u32,
        debug: bool,
        config: ClientConfig,
    ) -> Client {
        Client {
            link: Link::Remote(conn),
            state: State::Active,
            connection,
            rank,
            size,
            appnum: 0,
            universe_size: None,
            kvsname: String::new(),
            maxes: HYDRA_MAXES,
            debug,
            protocol: Protocol::Pmi1,
            config,
            notes: false,
        }
    }

    /// The `cmd=init pmi_version=V pmi_subversion=S` line and its `response_to_init`,
    /// which must accept version `V` (a PMI-1 server may leave the version out).
    fn init_handshake(&mut self, version: i64, subversion: i64) -> Result<(), PmiError> {
        let init = Message::new("init")
            .with("pmi_version", version)
            .with("pmi_subversion", subversion);
        let r = self.request(&init, "cmd=init", "response_to_init", self.config.timeout)?;
        check_rc("cmd=init", &r)?;
        let accepted = match r.get_int("pmi_version") {
            Ok(Some(v)) => v == version,
            Ok(None) => version == 1,
            Err(_) => false,
        };
        if !accepted {
            return Err(protocol(
                "cmd=init",
                &r,
                &format!("server does not speak PMI version {version}"),
            ));
        }
        self.notes = version == 1 && r.get("gsas_notes") == Some("1");
        Ok(())
    }

    /// Performs `init`, `get_maxes`, `get_appnum`, `get_my_kvsname`, `get_universe_size`
    /// on a client made by [`Client::remote`].
    fn start(mut c: Client) -> Result<Client, PmiError> {
        let config = c.config;
        c.init_handshake(1, 1)?;

        let m = c.request(
            &Message::new("get_maxes"),
            "cmd=get_maxes",
            "maxes",
            config.timeout,
        )?;
        check_rc("cmd=get_maxes", &m)?;
        c.maxes = Maxes {
            kvsname_max: required_usize("cmd=get_maxes", &m, "kvsname_max")?,
            keylen_max: required_usize("cmd=get_maxes", &m, "keylen_max")?,
            vallen_max: required_usize("cmd=get_maxes", &m, "vallen_max")?,
        };

        let m = c.request(
            &Message::new("get_appnum"),
            "cmd=get_appnum",
            "appnum",
            config.timeout,
        )?;
        check_rc("cmd=get_appnum", &m)?;
        c.appnum = required_int("cmd=get_appnum", &m, "appnum")?;

        let m = c.request(
            &Message::new("get_my_kvsname"),
            "cmd=get_my_kvsname",
            "my_kvsname",
            config.timeout,
        )?;
        check_rc("cmd=get_my_kvsname", &m)?;
        match m.get("kvsname") {
            Some(k) if !k.is_empty() && is_token(k) => c.kvsname = k.to_owned(),
            _ => return Err(protocol("cmd=get_my_kvsname", &m, "no usable kvsname")),
        }

        let m = c.request(
            &Message::new("get_universe_size"),
            "cmd=get_universe_size",
            "universe_size",
            config.timeout,
        )?;
        check_rc("cmd=get_universe_size", &m)?;
        let u = required_int("cmd=get_universe_size", &m, "size")?;
        c.universe_size = u32::try_from(u).ok().filter(|&u| u > 0);
        log::debug!(
            "PMI: rank {} of {} via {:?}, kvs {}, maxes {:?}",
            c.rank,
            c.size,
            c.connection,
            c.kvsname,
            c.maxes
        );
        Ok(c)
    }

    /// This process's rank, `0..size()`.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The application number (0 unless the launcher ran several executables).
    pub fn appnum(&self) -> i64 {
        self.appnum
    }

    /// The universe size, when the process manager knows one (Hydra answers -1: unknown).
    pub fn universe_size(&self) -> Option<u32> {
        self.universe_size
    }

    /// The name of this job's key-value space.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// The server's size limits.
    pub fn maxes(&self) -> Maxes {
        self.maxes
    }

    /// Whether the launcher asked for PMI debugging (`PMI_DEBUG` or the `initack` flag).
    pub fn debug(&self) -> bool {
        self.debug
    }

    /// How the client reached its process manager.
    pub fn connection(&self) -> Connection {
        self.connection
    }

    /// The wire protocol in use ([`Protocol::Pmi1`] for the singleton).
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The timeouts in force.
    pub fn config(&self) -> ClientConfig {
        self.config
    }
}

/// The task count of the Slurm step this process belongs to, when it is above 1: the
/// sign of `srun -n N` started without a PMI plugin (`--mpi=none`).
fn srun_tasks(lookup: &impl Fn(&str) -> Option<OsString>) -> Option<(&'static str, u32)> {
    // SLURM_STEP_NUM_TASKS is set by srun for its tasks (not in a batch script, where one
    // process may well run alone); SLURM_NTASKS counts only together with a step id.
    for var in ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"] {
        if var == "SLURM_NTASKS" && lookup("SLURM_STEPID").is_none() {
            continue;
        }
        let tasks = lookup(var)
            .and_then(|v| v.to_string_lossy().trim().parse::<u32>().ok())
            .filter(|&n| n > 1);
        if let Some(n) = tasks {
            return Some((var, n));
        }
    }
    None
}

fn check_rank_size(rank: u32, size: u32) -> Result<(), PmiError> {
    if size == 0 {
        return Err(PmiError::Invalid("PMI job size 0".into()));
    }
    if rank >= size {
        return Err(PmiError::Invalid(format!(
            "PMI rank {rank} is not below the job size {size}"
        )));
    }
    Ok(())
}

fn env_err(var: &'static str, value: impl std::fmt::Display, reason: &str) -> PmiError {
    PmiError::Env {
        var,
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn parse_var<T: std::str::FromStr>(
    var: &'static str,
    value: Option<OsString>,
) -> Result<T, PmiError> {
    let Some(v) = value else {
        return Err(env_err(
            var,
            "<unset>",
            "required by the launcher protocol but not set",
        ));
    };
    let s = v.to_string_lossy();
    s.trim()
        .parse()
        .map_err(|_| env_err(var, &s, "not a valid non-negative integer"))
}

#[cfg(test)]
mod tests;
