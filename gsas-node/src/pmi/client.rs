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
//! Thread-safety: `Client` is `Send` but not `Sync`; the protocol is strictly one request
//! at a time, so the runtime keeps it behind a mutex.

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::mapping::ProcessMapping;
use super::pmix::{self, Pmix};
use super::value::{self, Plan};
use super::wire::{LineBuf, MAX_RESPONSE_LINE, Message, excerpt, excerpt_bytes, is_token};
use super::{PmiError, sys};

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
            if !sys::is_open(fd) {
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

    /// Stores `value` under `key` for every rank to read after the next barrier.
    ///
    /// Keys are printable ASCII without space, `=` or `#`, do not start with `PMI_`, and
    /// are at most `keylen_max - 6` characters (58 under Hydra). Values of any length up
    /// to a few megabytes are split across several server keys (one request each, about
    /// 470 bytes per request under Hydra); PMI is for bootstrap data, not bulk transfer.
    /// Storing again under the same key replaces the value (as Hydra does).
    pub fn kvs_put(&mut self, key: &str, value: &[u8]) -> Result<(), PmiError> {
        self.check_active("kvs_put")?;
        value::check_key(key, self.maxes.keylen_max)?;
        if let Link::Pmix(p) = &mut self.link {
            return p.put(key, value);
        }
        let plan = self.plan(key)?;
        let chunks = value::encode(key, value, plan)?;
        // The head, which names the chunk count, goes last: whoever finds it finds all.
        for (i, chunk) in chunks.iter().enumerate().rev() {
            self.raw_put(&value::chunk_key(key, i), chunk)?;
        }
        Ok(())
    }

    /// Reads the value stored under `key` by [`Client::kvs_put`] of any rank; `Ok(None)`
    /// when the key does not exist (yet: values of other ranks appear after a barrier).
    ///
    /// Under PMIx, which keeps values per publishing rank, use [`Client::kvs_get_from`].
    pub fn kvs_get(&mut self, key: &str) -> Result<Option<Vec<u8>>, PmiError> {
        self.check_active("kvs_get")?;
        value::check_key(key, self.maxes.keylen_max)?;
        if let Link::Pmix(_) = self.link {
            return Err(PmiError::Invalid(format!(
                "PMIx keeps values per rank: reading {key:?} needs the rank that published it \
                 (kvs_get_from)"
            )));
        }
        let Some(head) = self.raw_get(key)? else {
            return Ok(None);
        };
        let (count, mut bytes) = value::decode_head(key, &head)?;
        for i in 1..count {
            let ck = value::chunk_key(key, i);
            let chunk = self.raw_get(&ck)?.ok_or_else(|| PmiError::Corrupt {
                key: key.to_owned(),
                reason: format!("chunk {ck} of {count} is missing"),
            })?;
            bytes.extend(value::decode_chunk(key, i, &chunk)?);
        }
        Ok(Some(bytes))
    }

    /// Reads the value `source` stored under `key` with [`Client::kvs_put`]: under PMIx
    /// the value of that rank, under PMI-1 and PMI-2 (one flat space) the value of `key`.
    pub fn kvs_get_from(&mut self, source: u32, key: &str) -> Result<Option<Vec<u8>>, PmiError> {
        self.check_active("kvs_get")?;
        match &mut self.link {
            Link::Pmix(p) => {
                value::check_key(key, self.maxes.keylen_max)?;
                p.get_bytes(source, key)
            }
            _ => self.kvs_get(key),
        }
    }

    /// The ranks on this process's node, this one included, in increasing order: under
    /// PMIx `PMIX_LOCAL_PEERS`, otherwise from [`Client::node_of_rank`]; `None` when the
    /// launcher says nothing about nodes.
    pub fn local_peers(&mut self) -> Result<Option<Vec<u32>>, PmiError> {
        self.check_active("local_peers")?;
        if let Link::Pmix(p) = &self.link {
            if let Some(mut peers) = p.local_peers()? {
                peers.sort_unstable();
                return Ok(Some(peers));
            }
        }
        let rank = self.rank;
        Ok(self.node_of_rank()?.map(|nodes| {
            let mine = nodes[rank as usize];
            (0..nodes.len() as u32)
                .filter(|&r| nodes[r as usize] == mine)
                .collect()
        }))
    }

    /// Reads a value published by the process manager itself, verbatim (no hex
    /// decoding), such as [`PROCESS_MAPPING_KEY`]. `Ok(None)` when absent. Over PMI-2
    /// this is a job attribute (`info-getjobattr`: `PMI_process_mapping`,
    /// `universeSize`, ...).
    pub fn get_raw(&mut self, key: &str) -> Result<Option<String>, PmiError> {
        self.check_active("get_raw")?;
        if key.is_empty() || !is_token(key) || key.len() >= self.maxes.keylen_max {
            return Err(PmiError::InvalidKey {
                key: key.to_owned(),
                reason: format!(
                    "keys are 1 to {} printable ASCII characters without space or '='",
                    self.maxes.keylen_max.saturating_sub(1)
                ),
            });
        }
        if self.protocol == Protocol::Pmi2 {
            let label = format!("cmd=info-getjobattr key={key}");
            let m = Message::new("info-getjobattr").with("key", key);
            let r = self.request(&m, &label, "info-getjobattr-response", self.config.timeout)?;
            return found_value(&label, &r);
        }
        self.raw_get(key)
    }

    /// Publishes `value` (at most `(vallen_max - 1) / 2` bytes, 511 under Slurm) as an
    /// attribute of this node, readable at once by the processes of the same node with
    /// [`Client::node_get`] (PMI-2 `info-putnodeattr`). Keys follow the rules of
    /// [`Client::kvs_put`]. PMI-1 has no node attributes: over it this fails with
    /// [`PmiError::Invalid`].
    pub fn node_put(&mut self, key: &str, value: &[u8]) -> Result<(), PmiError> {
        self.check_active("node_put")?;
        value::check_key(key, self.maxes.keylen_max)?;
        let max = self.maxes.vallen_max.saturating_sub(1) / 2;
        if value.len() > max {
            return Err(PmiError::ValueTooLarge {
                key: key.to_owned(),
                len: value.len(),
                max,
            });
        }
        let hex = super::wire::hex_encode(value);
        match (&mut self.link, self.protocol) {
            (Link::Local(kvs), _) => {
                kvs.insert(format!("node:{key}"), hex);
                Ok(())
            }
            (Link::Pmix(_), _) | (Link::Remote(_), Protocol::Pmi1 | Protocol::Pmix) => {
                Err(no_node_attrs("node_put"))
            }
            (Link::Remote(_), Protocol::Pmi2) => {
                let label = format!("cmd=info-putnodeattr key={key}");
                let m = Message::new("info-putnodeattr")
                    .with("key", key)
                    .with("value", hex);
                let r =
                    self.request(&m, &label, "info-putnodeattr-response", self.config.timeout)?;
                check_rc(&label, &r)
            }
        }
    }

    /// Reads a node attribute published with [`Client::node_put`] by a process of this
    /// node; `Ok(None)` when absent. With `wait`, the process manager answers only once
    /// the attribute exists (bounded by [`ClientConfig::barrier_timeout`]).
    pub fn node_get(&mut self, key: &str, wait: bool) -> Result<Option<Vec<u8>>, PmiError> {
        self.check_active("node_get")?;
        value::check_key(key, self.maxes.keylen_max)?;
        let hex = match (&mut self.link, self.protocol) {
            (Link::Local(kvs), _) => kvs.get(&format!("node:{key}")).cloned(),
            (Link::Pmix(_), _) | (Link::Remote(_), Protocol::Pmi1 | Protocol::Pmix) => {
                return Err(no_node_attrs("node_get"));
            }
            (Link::Remote(_), Protocol::Pmi2) => {
                let label = format!("cmd=info-getnodeattr key={key}");
                let m = Message::new("info-getnodeattr")
                    .with("key", key)
                    .with("wait", if wait { "TRUE" } else { "FALSE" });
                let timeout = if wait {
                    self.config.barrier_timeout
                } else {
                    self.config.timeout
                };
                let r = self.request(&m, &label, "info-getnodeattr-response", timeout)?;
                found_value(&label, &r)?
            }
        };
        hex.map(|h| {
            super::wire::hex_decode(&h).ok_or_else(|| PmiError::Corrupt {
                key: key.to_owned(),
                reason: "node attribute not written by a gsas client (not hex)".into(),
            })
        })
        .transpose()
    }

    /// Waits until every rank has entered the barrier (`barrier_in` / `barrier_out`),
    /// at most [`ClientConfig::barrier_timeout`]. Makes earlier puts visible to all.
    pub fn barrier(&mut self) -> Result<(), PmiError> {
        self.check_active("barrier")?;
        let (cmd, label, expect) = match (&mut self.link, self.protocol) {
            (Link::Local(_), _) => return Ok(()),
            (Link::Pmix(p), _) => return p.fence(),
            (_, Protocol::Pmi2) => ("kvs-fence", "cmd=kvs-fence", "kvs-fence-response"),
            _ => ("barrier_in", "cmd=barrier_in", "barrier_out"),
        };
        let m = self.request(
            &Message::new(cmd),
            label,
            expect,
            self.config.barrier_timeout,
        )?;
        check_rc(label, &m)?;
        Ok(())
    }

    /// The parsed `PMI_process_mapping`, or `None` when the process manager publishes
    /// none.
    pub fn process_mapping(&mut self) -> Result<Option<ProcessMapping>, PmiError> {
        if let Link::Pmix(p) = &self.link {
            return Ok(p
                .node_of_rank()?
                .map(|n| ProcessMapping::from_node_of_rank(&n)));
        }
        match self.get_raw(PROCESS_MAPPING_KEY)? {
            None => Ok(None),
            Some(s) => ProcessMapping::parse(&s).map(Some),
        }
    }

    /// The node index of every rank, from `PMI_process_mapping` (under PMIx: from every
    /// rank's `PMIX_NODEID`, renumbered 0, 1, ... and checked against
    /// `PMIX_LOCAL_PEERS`); `None` when the process manager publishes no mapping.
    pub fn node_of_rank(&mut self) -> Result<Option<Vec<u32>>, PmiError> {
        self.check_active("node_of_rank")?;
        if let Link::Pmix(p) = &self.link {
            return p.node_of_rank();
        }
        let size = self.size;
        self.process_mapping()?
            .map(|m| m.node_of_rank(size))
            .transpose()
    }

    /// Says goodbye (`finalize` / `finalize_ack`) and closes the connection. Further
    /// calls fail with [`PmiError::Finished`].
    pub fn finalize(&mut self) -> Result<(), PmiError> {
        self.check_active("finalize")?;
        if let Link::Pmix(p) = &mut self.link {
            p.finalize()?;
            self.state = State::Finalized;
            return Ok(());
        }
        if let Link::Remote(_) = self.link {
            let expect = match self.protocol {
                Protocol::Pmi2 => "finalize-response",
                _ => "finalize_ack",
            };
            let m = self.request(
                &Message::new("finalize"),
                "cmd=finalize",
                expect,
                self.config.timeout,
            )?;
            check_rc("cmd=finalize", &m)?;
            self.link = Link::Local(HashMap::new());
        }
        self.state = State::Finalized;
        Ok(())
    }

    /// Asks the process manager to end the whole job with exit status `code`
    /// (`cmd=abort exitcode=N message=...`; PMI-2: `cmd=abort;isworldabort=TRUE;msg=...;`,
    /// which carries no code: Slurm kills the step and reports the tasks' signals; there
    /// is no response). The message is reduced to at most 200 printable characters with
    /// spaces, `=` and `;` replaced by `_`.
    ///
    /// The caller must then exit with `code` itself (Hydra kills the other ranks and
    /// exits with `code`; gsas's launcher reports an [`super::Event::Abort`]). For a
    /// singleton there is nobody to tell and this only marks the client finished.
    ///
    /// `abort` is still allowed after an earlier request failed, since that is when a PE
    /// most needs to end the job.
    pub fn abort(&mut self, code: i32, message: &str) -> Result<(), PmiError> {
        if self.state != State::Broken {
            self.check_active("abort")?;
        }
        self.state = State::Aborted;
        let text: String = message
            .chars()
            .take(200)
            .map(|c| {
                if c.is_ascii_graphic() && c != '=' && c != ';' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if let Link::Pmix(p) = &mut self.link {
            return p.abort(code, message);
        }
        let m = match self.protocol {
            Protocol::Pmi1 | Protocol::Pmix => {
                let m = Message::new("abort").with("exitcode", code);
                if text.is_empty() {
                    m
                } else {
                    m.with("message", text)
                }
            }
            Protocol::Pmi2 => Message::new("abort")
                .with("isworldabort", "TRUE")
                .with("msg", format!("exit code {code}: {text}")),
        };
        let timeout = self.config.timeout;
        let proto = self.protocol;
        if let Link::Remote(conn) = &mut self.link {
            let deadline = Instant::now() + timeout;
            conn.send(&encode(&m, proto), "cmd=abort", deadline, timeout)?;
        }
        Ok(())
    }

    fn check_active(&self, op: &'static str) -> Result<(), PmiError> {
        match self.state {
            State::Active => Ok(()),
            State::Finalized | State::Aborted => Err(PmiError::Finished { op }),
            State::Broken => Err(PmiError::Unusable { op }),
        }
    }

    fn plan(&self, key: &str) -> Result<Plan, PmiError> {
        Plan::new(&self.kvsname, key, self.maxes.vallen_max).ok_or_else(|| {
            PmiError::Invalid(format!(
                "no value fits in a put line for key {key:?} in kvs {:?} with vallen_max {}",
                self.kvsname, self.maxes.vallen_max
            ))
        })
    }

    fn raw_put(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        match &mut self.link {
            Link::Local(kvs) => {
                kvs.insert(key.to_owned(), value.to_owned());
                Ok(())
            }
            Link::Pmix(p) => p.put(key, value.as_bytes()),
            Link::Remote(_) => {
                let (label, m, expect) = match self.protocol {
                    Protocol::Pmi1 | Protocol::Pmix => (
                        format!("cmd=put key={key}"),
                        Message::new("put")
                            .with("kvsname", &self.kvsname)
                            .with("key", key)
                            .with("value", value),
                        "put_result",
                    ),
                    Protocol::Pmi2 => (
                        format!("cmd=kvs-put key={key}"),
                        Message::new("kvs-put")
                            .with("key", key)
                            .with("value", value),
                        "kvs-put-response",
                    ),
                };
                let r = self.request(&m, &label, expect, self.config.timeout)?;
                check_rc(&label, &r)
            }
        }
    }

    fn raw_get(&mut self, key: &str) -> Result<Option<String>, PmiError> {
        match &mut self.link {
            Link::Local(kvs) => Ok(kvs.get(key).cloned()),
            Link::Pmix(p) => Ok(p
                .get_bytes(pmix::RANK_WILDCARD, key)?
                .map(|b| String::from_utf8_lossy(&b).into_owned())),
            Link::Remote(_) if self.protocol == Protocol::Pmi2 => {
                let label = format!("cmd=kvs-get key={key}");
                let m = Message::new("kvs-get")
                    .with("jobid", &self.kvsname)
                    .with("srcid", -1)
                    .with("key", key);
                let r = self.request(&m, &label, "kvs-get-response", self.config.timeout)?;
                found_value(&label, &r)
            }
            Link::Remote(_) => {
                let label = format!("cmd=get key={key}");
                let m = Message::new("get")
                    .with("kvsname", &self.kvsname)
                    .with("key", key);
                let r = self.request(&m, &label, "get_result", self.config.timeout)?;
                match r.get_int("rc") {
                    Ok(None | Some(0)) => match r.get("value") {
                        Some(v) => Ok(Some(v.to_owned())),
                        None => Err(protocol(&label, &r, "rc=0 without value")),
                    },
                    Ok(Some(rc)) => {
                        log::trace!(
                            "PMI: {label}: not found (rc={rc} msg={})",
                            r.get("msg").unwrap_or("")
                        );
                        Ok(None)
                    }
                    Err(bad) => Err(protocol(&label, &r, &format!("rc={bad} is not a number"))),
                }
            }
        }
    }

    /// Sends `msg` and waits for the response line with command `expect`.
    fn request(
        &mut self,
        msg: &Message,
        label: &str,
        expect: &str,
        timeout: Duration,
    ) -> Result<Message, PmiError> {
        let Link::Remote(conn) = &mut self.link else {
            return Err(PmiError::Invalid(format!(
                "{label} needs a process manager, but this client is a singleton"
            )));
        };
        let deadline = Instant::now() + timeout;
        let proto = self.protocol;
        let r = conn
            .send(&encode(msg, proto), label, deadline, timeout)
            .and_then(|()| conn.recv(label, proto, deadline, timeout))
            .and_then(|r| {
                if r.cmd() == expect {
                    Ok(r)
                } else {
                    Err(protocol(label, &r, &format!("expected cmd={expect}")))
                }
            });
        if r.is_err() {
            // A late or unexpected response would be taken for the answer to the next
            // request: stop using the connection.
            self.state = State::Broken;
        }
        r
    }
}

/// The `initack` handshake of `PMI_PORT` mode: returns (rank, size, debug).
fn initack(conn: &mut Conn, id: u32, timeout: Duration) -> Result<(u32, u32, bool), PmiError> {
    const LABEL: &str = "cmd=initack";
    let deadline = Instant::now() + timeout;
    conn.send(
        Message::new("initack")
            .with("pmiid", id)
            .to_line()
            .as_bytes(),
        LABEL,
        deadline,
        timeout,
    )?;
    let first = conn.recv(LABEL, Protocol::Pmi1, deadline, timeout)?;
    if first.cmd() != "initack" {
        return Err(protocol(LABEL, &first, "expected cmd=initack"));
    }
    check_rc(LABEL, &first)?;
    let mut size = first.get("size").map(str::to_owned);
    let mut rank = first.get("rank").map(str::to_owned);
    let mut debug = first.get("debug").map(str::to_owned);
    // Hydra sends `cmd=set size=N`, `cmd=set rank=R`, `cmd=set debug=D` after `initack`;
    // a server that puts them in the initack line itself needs no `set` lines.
    if size.is_none() || rank.is_none() {
        for _ in 0..8 {
            if size.is_some() && rank.is_some() && debug.is_some() {
                break;
            }
            let m = conn.recv(LABEL, Protocol::Pmi1, deadline, timeout)?;
            if m.cmd() != "set" {
                return Err(protocol(LABEL, &m, "expected cmd=set after cmd=initack"));
            }
            for (slot, key) in [
                (&mut size, "size"),
                (&mut rank, "rank"),
                (&mut debug, "debug"),
            ] {
                if let Some(v) = m.get(key) {
                    *slot = Some(v.to_owned());
                }
            }
        }
    }
    let num = |what: &str, v: Option<String>| -> Result<i64, PmiError> {
        v.as_deref()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| PmiError::Protocol {
                command: LABEL.into(),
                line: v.clone().unwrap_or_default(),
                reason: format!("no numeric {what} in the initack handshake"),
            })
    };
    let size = u32::try_from(num("size", size)?).unwrap_or(0);
    let rank = u32::try_from(num("rank", rank)?).unwrap_or(u32::MAX);
    let debug = debug.and_then(|d| d.parse::<i64>().ok()).unwrap_or(0) != 0;
    check_rank_size(rank, size)?;
    Ok((rank, size, debug))
}

fn resolve(host_port: &str) -> Result<Vec<SocketAddr>, PmiError> {
    let (host, port) = host_port
        .rsplit_once(':')
        .ok_or_else(|| env_err("PMI_PORT", host_port, "expected host:port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| env_err("PMI_PORT", host_port, "the port is not a number 0-65535"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(env_err("PMI_PORT", host_port, "empty host name"));
    }
    (host, port)
        .to_socket_addrs()
        .map(Iterator::collect)
        .map_err(|e| PmiError::io(format!("resolving PMI_PORT={host_port}"), e))
}

/// A message as the protocol frames it.
fn encode(m: &Message, protocol: Protocol) -> Vec<u8> {
    match protocol {
        Protocol::Pmi2 => m.to_frame(),
        _ => m.to_line().into_bytes(),
    }
}

/// The value of a PMI-2 `*-response` with `found=`: `None` when not found (or `rc` is not
/// 0, as some servers say "not found").
fn found_value(label: &str, r: &Message) -> Result<Option<String>, PmiError> {
    match r.get_int("rc") {
        Ok(None | Some(0)) => {}
        Ok(Some(rc)) => {
            log::trace!("PMI: {label}: rc={rc}, taken as not found");
            return Ok(None);
        }
        Err(bad) => return Err(protocol(label, r, &format!("rc={bad} is not a number"))),
    }
    match (r.get("found"), r.get("value")) {
        (Some("FALSE"), _) => Ok(None),
        (_, Some(v)) => Ok(Some(v.to_owned())),
        (_, None) => Err(protocol(label, r, "found without value")),
    }
}

fn no_node_attrs(op: &str) -> PmiError {
    PmiError::Invalid(format!(
        "{op}: node attributes need PMI-2 (srun --mpi=pmi2); this launcher speaks PMI-1 or PMIx"
    ))
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

fn protocol(label: &str, m: &Message, reason: &str) -> PmiError {
    PmiError::Protocol {
        command: label.into(),
        line: excerpt(m.to_line().trim_end()),
        reason: reason.into(),
    }
}

fn check_rc(label: &str, m: &Message) -> Result<(), PmiError> {
    match m.get_int("rc") {
        Ok(None | Some(0)) => Ok(()),
        Ok(Some(rc)) => Err(PmiError::Refused {
            command: label.into(),
            rc,
            msg: m.get("msg").unwrap_or("").to_owned(),
        }),
        Err(bad) => Err(protocol(label, m, &format!("rc={bad} is not a number"))),
    }
}

fn required_int(label: &str, m: &Message, key: &str) -> Result<i64, PmiError> {
    match m.get_int(key) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(protocol(label, m, &format!("{key}= missing"))),
        Err(bad) => Err(protocol(label, m, &format!("{key}={bad} is not a number"))),
    }
}

fn required_usize(label: &str, m: &Message, key: &str) -> Result<usize, PmiError> {
    let v = required_int(label, m, key)?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| protocol(label, m, &format!("{key}={v} is not a positive size")))
}

/// One connection to the process manager: a non-blocking descriptor and a line buffer.
struct Conn {
    fd: OwnedFd,
    rx: LineBuf,
}

impl Conn {
    fn new(fd: OwnedFd) -> Result<Conn, PmiError> {
        sys::set_nonblocking_cloexec(fd.as_fd())
            .map_err(|e| PmiError::io("configuring the PMI connection", e))?;
        Ok(Conn {
            fd,
            rx: LineBuf::new(MAX_RESPONSE_LINE),
        })
    }

    fn send(
        &mut self,
        bytes: &[u8],
        label: &str,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), PmiError> {
        log::trace!("PMI > {}", excerpt_bytes(bytes));
        let mut rest = bytes;
        while !rest.is_empty() {
            match sys::send(self.fd.as_fd(), rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(PmiError::Timeout {
                            command: label.into(),
                            waited: timeout,
                            received: "nothing; the request could not even be sent \
                                       (the process manager is not reading)"
                                .into(),
                        });
                    }
                    sys::wait_fd(self.fd.as_fd(), libc::POLLOUT, left)
                        .map_err(|e| PmiError::io(format!("waiting to send {label}"), e))?;
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN)
                    ) =>
                {
                    return Err(PmiError::Closed {
                        command: label.into(),
                        received: format!("nothing ({e} while sending)"),
                    });
                }
                Err(e) => return Err(PmiError::io(format!("sending {label}"), e)),
            }
        }
        Ok(())
    }

    fn recv(
        &mut self,
        label: &str,
        protocol: Protocol,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Message, PmiError> {
        loop {
            let next = match protocol {
                Protocol::Pmi2 => self.rx.next_frame().map_err(|e| e.to_string()),
                _ => self.rx.next_line().map_err(|e| e.to_string()),
            };
            match next {
                Ok(Some(line)) => {
                    log::trace!("PMI < {}", String::from_utf8_lossy(&line));
                    let parsed = match protocol {
                        Protocol::Pmi2 => Message::parse_v2(&line),
                        _ => Message::parse(&line),
                    };
                    return parsed.map_err(|e| PmiError::Protocol {
                        command: label.into(),
                        line: excerpt_bytes(&line),
                        reason: e.to_string(),
                    });
                }
                Ok(None) => {}
                Err(reason) => {
                    return Err(PmiError::Protocol {
                        command: label.into(),
                        line: excerpt_bytes(self.rx.pending()),
                        reason,
                    });
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PmiError::Timeout {
                    command: label.into(),
                    waited: timeout,
                    received: excerpt_bytes(self.rx.pending()),
                });
            }
            sys::wait_fd(self.fd.as_fd(), libc::POLLIN, left)
                .map_err(|e| PmiError::io(format!("waiting for the response to {label}"), e))?;
            let mut buf = [0u8; 2048];
            match sys::read(self.fd.as_fd(), &mut buf) {
                Ok(0) => {
                    return Err(PmiError::Closed {
                        command: label.into(),
                        received: excerpt_bytes(self.rx.pending()),
                    });
                }
                Ok(n) => self.rx.extend(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => {
                    return Err(PmiError::Closed {
                        command: label.into(),
                        received: format!("{} ({e})", excerpt_bytes(self.rx.pending())),
                    });
                }
                Err(e) => {
                    return Err(PmiError::io(format!("reading the response to {label}"), e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    use std::thread::JoinHandle;

    /// A scripted server: for each expected request prefix, the raw bytes to answer
    /// (possibly several lines, possibly none). Returns every request line it saw. After
    /// the script it closes the connection, or with `hold` waits for the client to close.
    fn fake(script: Vec<(&'static str, &'static str)>) -> (OwnedFd, JoinHandle<Vec<String>>) {
        fake_with(script, false)
    }

    fn fake_with(
        script: Vec<(&'static str, &'static str)>,
        hold: bool,
    ) -> (OwnedFd, JoinHandle<Vec<String>>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let h = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut w = ours.try_clone().unwrap();
            let mut r = BufReader::new(ours);
            for (expect, answer) in script {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap() == 0 {
                    break;
                }
                assert!(
                    line.starts_with(expect),
                    "expected {expect:?}, got {line:?}"
                );
                seen.push(line.trim_end().to_owned());
                w.write_all(answer.as_bytes()).unwrap();
            }
            let mut rest = String::new();
            while hold && r.read_line(&mut rest).unwrap_or(0) > 0 {}
            seen
        });
        (OwnedFd::from(theirs), h)
    }

    const NEW_STYLE_INIT: [(&str, &str); 5] = [
        (
            "cmd=init pmi_version=1 pmi_subversion=1\n",
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=2\n",
        ),
        (
            "cmd=get_maxes\n",
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        ),
        ("cmd=get_appnum\n", "cmd=appnum rc=0 appnum=3\n"),
        (
            "cmd=get_my_kvsname\n",
            "cmd=my_kvsname rc=0 kvsname=kvs_7\n",
        ),
        (
            "cmd=get_universe_size\n",
            "cmd=universe_size rc=0 size=-1\n",
        ),
    ];

    fn quick() -> ClientConfig {
        ClientConfig {
            timeout: Duration::from_secs(20),
            barrier_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(20),
            pmix: false,
        }
    }

    #[test]
    fn mpich_4_1_token_order() {
        let mut script = NEW_STYLE_INIT.to_vec();
        script.extend([
            (
                "cmd=get kvsname=kvs_7 key=absent\n",
                "cmd=get_result rc=1\n",
            ),
            (
                "cmd=put kvsname=kvs_7 key=k value=1:0102\n",
                "cmd=put_result rc=0\n",
            ),
            (
                "cmd=barrier_in\n",
                "cmd=barrier_out rc=0 group=WORLD tag=0\n",
            ),
            (
                "cmd=get kvsname=kvs_7 key=k\n",
                "cmd=get_result rc=0 value=1:0102 extra=ignored\n",
            ),
            (
                "cmd=get kvsname=kvs_7 key=PMI_process_mapping\n",
                "cmd=get_result rc=0 value=(vector,(0,2,1))\n",
            ),
            ("cmd=finalize\n", "cmd=finalize_ack rc=0\n"),
        ]);
        let (fd, h) = fake(script);
        let mut c = Client::from_fd(fd, 1, 2, quick()).unwrap();
        assert_eq!((c.rank(), c.size(), c.appnum()), (1, 2, 3));
        assert_eq!(c.kvsname(), "kvs_7");
        assert_eq!(c.universe_size(), None);
        assert_eq!(c.connection(), Connection::Fd);
        assert_eq!(c.kvs_get("absent").unwrap(), None);
        c.kvs_put("k", &[1, 2]).unwrap();
        c.barrier().unwrap();
        assert_eq!(c.kvs_get("k").unwrap(), Some(vec![1, 2]));
        assert_eq!(c.node_of_rank().unwrap(), Some(vec![0, 1]));
        c.finalize().unwrap();
        assert!(matches!(
            c.barrier(),
            Err(PmiError::Finished { op: "barrier" })
        ));
        assert_eq!(h.join().unwrap().len(), 11);
    }

    #[test]
    fn failed_put_and_barrier_are_errors() {
        let mut script = NEW_STYLE_INIT.to_vec();
        script.extend([
            (
                "cmd=put kvsname=kvs_7 key=k value=1:\n",
                "cmd=put_result rc=-1 msg=no_room\n",
            ),
            (
                "cmd=barrier_in\n",
                "cmd=barrier_out rc=-1 msg=rank_0_lost\n",
            ),
        ]);
        let (fd, h) = fake(script);
        let mut c = Client::from_fd(fd, 0, 2, quick()).unwrap();
        let e = c.kvs_put("k", &[]).unwrap_err();
        assert!(
            matches!(&e, PmiError::Refused { rc: -1, msg, .. } if msg == "no_room"),
            "{e}"
        );
        let e = c.barrier().unwrap_err().to_string();
        assert!(e.contains("barrier_in") && e.contains("rank_0_lost"), "{e}");
        h.join().unwrap();
    }

    #[test]
    fn timeout_names_command_and_partial_response() {
        let mut script = NEW_STYLE_INIT.to_vec();
        script.push(("cmd=get kvsname=kvs_7 key=slow\n", "cmd=get_res"));
        script.push(("cmd=abort exitcode=2 message=timed_out\n", ""));
        let (fd, h) = fake_with(script, true);
        let mut c = Client::from_fd(fd, 0, 1, quick()).unwrap();
        c.config.timeout = Duration::from_millis(200);
        let e = c.kvs_get("slow").unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, PmiError::Timeout { .. }), "{text}");
        assert!(
            text.contains("cmd=get key=slow") && text.contains("cmd=get_res"),
            "{text}"
        );
        assert!(matches!(
            c.barrier(),
            Err(PmiError::Unusable { op: "barrier" })
        ));
        c.abort(2, "timed out").unwrap();
        drop(c);
        let seen = h.join().unwrap();
        assert_eq!(
            seen.last().map(String::as_str),
            Some("cmd=abort exitcode=2 message=timed_out")
        );
    }

    #[test]
    fn closed_connection_and_wrong_reply() {
        let (fd, h) = fake(vec![NEW_STYLE_INIT[0]]);
        let e = Client::from_fd(fd, 0, 1, quick()).unwrap_err();
        assert!(
            matches!(e, PmiError::Closed { ref command, .. } if command == "cmd=get_maxes"),
            "{e}"
        );
        h.join().unwrap();

        let (fd, h) = fake(vec![("cmd=init", "cmd=maxes kvsname_max=1\n")]);
        let e = Client::from_fd(fd, 0, 1, quick()).unwrap_err().to_string();
        assert!(e.contains("expected cmd=response_to_init"), "{e}");
        h.join().unwrap();

        let (fd, h) = fake(vec![(
            "cmd=init",
            "cmd=response_to_init pmi_version=2 rc=0\n",
        )]);
        let e = Client::from_fd(fd, 0, 1, quick()).unwrap_err().to_string();
        assert!(e.contains("version 1"), "{e}");
        h.join().unwrap();

        let (fd, h) = fake(vec![("cmd=init", "\u{1}garbage\n")]);
        let e = Client::from_fd(fd, 0, 1, quick()).unwrap_err();
        assert!(matches!(e, PmiError::Protocol { .. }), "{e}");
        h.join().unwrap();
    }

    fn tcp_fake(answer: &'static str) -> (String, JoinHandle<String>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            let mut first = String::new();
            r.read_line(&mut first).unwrap();
            w.write_all(answer.as_bytes()).unwrap();
            for (expect, reply) in NEW_STYLE_INIT {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                assert_eq!(line, expect);
                w.write_all(reply.as_bytes()).unwrap();
            }
            first
        });
        (addr, h)
    }

    #[test]
    fn initack_hydra_style_and_single_line_style() {
        let (addr, h) = tcp_fake("cmd=initack\ncmd=set size=4\ncmd=set rank=2\ncmd=set debug=1\n");
        let c = Client::connect(&addr, 2, quick()).unwrap();
        assert_eq!((c.rank(), c.size(), c.debug()), (2, 4, true));
        assert_eq!(c.connection(), Connection::Port);
        assert_eq!(h.join().unwrap(), "cmd=initack pmiid=2\n");

        let (addr, h) = tcp_fake("cmd=initack rc=0 size=3 rank=1\n");
        let c = Client::connect(&addr, 1, quick()).unwrap();
        assert_eq!((c.rank(), c.size(), c.debug()), (1, 3, false));
        h.join().unwrap();

        let (addr, h) = tcp_fake("cmd=initack\ncmd=set size=2\ncmd=set rank=5\ncmd=set debug=0\n");
        let e = Client::connect(&addr, 5, quick()).unwrap_err().to_string();
        assert!(e.contains("rank 5 is not below the job size 2"), "{e}");
        drop(h);
    }

    /// A variable lookup over fixed pairs.
    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn environment_is_validated() {
        let cfg = quick();
        let e = Client::from_vars(cfg, env(&[("PMIX_RANK", "0")])).unwrap_err();
        assert!(matches!(
            e,
            PmiError::PmixLauncher {
                var: "PMIX_RANK",
                ..
            }
        ));
        assert!(
            e.to_string().contains("PMIx launcher") && e.to_string().contains("switched off"),
            "{e}"
        );
        let e = Client::from_vars(cfg, env(&[("PRTE_LAUNCHED", "1")])).unwrap_err();
        assert!(matches!(
            e,
            PmiError::PmixLauncher {
                var: "PRTE_LAUNCHED",
                ..
            }
        ));

        let e = Client::from_vars(cfg, env(&[("PMI_FD", "x7")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("PMI_FD") && e.contains("x7"), "{e}");
        let e = Client::from_vars(
            cfg,
            env(&[("PMI_FD", "1"), ("PMI_RANK", "0"), ("PMI_SIZE", "1")]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("stdout"), "{e}");
        let e = Client::from_vars(cfg, env(&[("PMI_FD", "900"), ("PMI_SIZE", "2")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("PMI_RANK") && e.contains("not set"), "{e}");
        let e = Client::from_vars(
            cfg,
            env(&[("PMI_FD", "900"), ("PMI_RANK", "2"), ("PMI_SIZE", "2")]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("rank 2 is not below"), "{e}");
        let e = Client::from_vars(cfg, env(&[("PMI_PORT", "nohostport"), ("PMI_ID", "0")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("host:port"), "{e}");
        let e = Client::from_vars(cfg, env(&[("PMI_PORT", "localhost:1")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("PMI_ID"), "{e}");
    }

    #[test]
    fn unopened_pmi_fd_is_refused_and_releases_the_claim() {
        // Descriptor 1000 is not open in the test process (no test opens that many).
        let env = |k: &str| match k {
            "PMI_FD" => Some(OsString::from("1000")),
            "PMI_RANK" => Some(OsString::from("0")),
            "PMI_SIZE" => Some(OsString::from("1")),
            _ => None,
        };
        let e = Client::from_vars(ClientConfig::default(), env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an open file descriptor"), "{e}");
        assert!(!ENV_FD_CLAIMED.load(Ordering::Acquire));
    }

    /// A fake of Slurm's `mpi/pmi2` server, written independently of the client's
    /// framing code: the init line, then frames; one thread per connection; puts become
    /// visible at the `kvs-fence` every rank joins; job and node attributes (a
    /// `wait=TRUE` node get blocks until the attribute exists). Records every body.
    #[derive(Default)]
    struct Pmi2State {
        size: u32,
        mapping: String,
        pending: HashMap<String, String>,
        kvs: HashMap<String, String>,
        node: HashMap<String, String>,
        fenced: u32,
        generation: u64,
        bodies: Vec<String>,
    }

    type Shared = std::sync::Arc<(std::sync::Mutex<Pmi2State>, std::sync::Condvar)>;

    fn pmi2_fake(size: u32, mapping: &str) -> (Shared, Vec<(OwnedFd, JoinHandle<()>)>) {
        let shared: Shared = Default::default();
        {
            let mut st = shared.0.lock().unwrap();
            st.size = size;
            st.mapping = mapping.to_owned();
        }
        let conns = (0..size)
            .map(|rank| {
                let (ours, theirs) = UnixStream::pair().unwrap();
                let sh = shared.clone();
                let h = std::thread::spawn(move || serve_pmi2(ours, rank, &sh));
                (OwnedFd::from(theirs), h)
            })
            .collect();
        (shared, conns)
    }

    fn serve_pmi2(s: UnixStream, rank: u32, sh: &Shared) {
        use std::io::Read;
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut init = String::new();
        if r.read_line(&mut init).unwrap_or(0) == 0 {
            return; // the client never started
        }
        assert_eq!(init, "cmd=init pmi_version=2 pmi_subversion=0\n");
        w.write_all(b"cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n")
            .unwrap();
        let reply = |w: &mut UnixStream, body: String| {
            w.write_all(format!("{:<6}{body}", body.len()).as_bytes())
                .unwrap();
        };
        loop {
            let mut head = [0u8; 6];
            if r.read_exact(&mut head).is_err() {
                return;
            }
            let len: usize = std::str::from_utf8(&head).unwrap().trim().parse().unwrap();
            let mut body = vec![0u8; len];
            r.read_exact(&mut body).unwrap();
            let body = String::from_utf8(body).unwrap();
            let kv: HashMap<&str, &str> = body
                .split(';')
                .filter(|t| !t.is_empty())
                .map(|t| t.split_once('=').expect("key=value"))
                .collect();
            let (lock, cv) = &**sh;
            let mut st = lock.lock().unwrap();
            st.bodies.push(body.clone());
            let found = |v: Option<&String>, cmd: &str| match v {
                Some(v) => format!("cmd={cmd};rc=0;found=TRUE;value={v};"),
                None => format!("cmd={cmd};rc=0;found=FALSE;"),
            };
            let answer = match kv["cmd"] {
                "fullinit" => {
                    // The server's own idea of the rank: a mismatch is the client's to find.
                    assert!(kv["pmirank"].parse::<u32>().is_ok(), "{body}");
                    assert_eq!(kv["threaded"], "FALSE");
                    format!(
                        "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={rank};size={};appnum=-1;debugged=FALSE;pmiverbose=FALSE;",
                        st.size
                    )
                }
                "info-getjobattr" => {
                    let v = match kv["key"] {
                        "universeSize" => Some(st.size.to_string()),
                        "PMI_process_mapping" => Some(st.mapping.clone()),
                        _ => None,
                    };
                    found(v.as_ref(), "info-getjobattr-response")
                }
                "kvs-put" => {
                    assert!(kv["key"].len() < 64 && kv["value"].len() < 1024, "{body}");
                    st.pending.insert(kv["key"].into(), kv["value"].into());
                    "cmd=kvs-put-response;rc=0;".into()
                }
                "kvs-fence" => {
                    let generation = st.generation;
                    st.fenced += 1;
                    if st.fenced == st.size {
                        let p = std::mem::take(&mut st.pending);
                        st.kvs.extend(p);
                        st.fenced = 0;
                        st.generation += 1;
                        cv.notify_all();
                    }
                    while st.generation == generation {
                        st = cv.wait(st).unwrap();
                    }
                    "cmd=kvs-fence-response;rc=0;".into()
                }
                "kvs-get" => {
                    assert_eq!(kv["srcid"], "-1");
                    found(st.kvs.get(kv["key"]), "kvs-get-response")
                }
                "info-putnodeattr" => {
                    st.node.insert(kv["key"].into(), kv["value"].into());
                    cv.notify_all();
                    "cmd=info-putnodeattr-response;rc=0;".into()
                }
                "info-getnodeattr" => {
                    while kv["wait"] == "TRUE" && !st.node.contains_key(kv["key"]) {
                        st = cv.wait(st).unwrap();
                    }
                    found(st.node.get(kv["key"]), "info-getnodeattr-response")
                }
                "abort" => continue,
                "finalize" => {
                    reply(&mut w, "cmd=finalize-response;rc=0;".into());
                    return;
                }
                other => panic!("unexpected command {other} in {body}"),
            };
            drop(st);
            reply(&mut w, answer);
        }
    }

    #[test]
    fn pmi2_job_of_three_ranks() {
        let (shared, conns) = pmi2_fake(3, "(vector,(0,2,1))");
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(rank, (fd, server))| {
                std::thread::spawn(move || {
                    let rank = rank as u32;
                    let mut c = Client::from_fd_pmi2(fd, rank, 3, "77.0", quick()).unwrap();
                    assert_eq!(c.protocol(), Protocol::Pmi2);
                    assert_eq!((c.rank(), c.size(), c.universe_size()), (rank, 3, Some(3)));
                    let mine: Vec<u8> = (0..2000u32).map(|i| (i * (rank + 1)) as u8).collect();
                    c.kvs_put(&format!("gsas-r{rank}"), &mine).unwrap();
                    assert_eq!(
                        c.kvs_get("gsas-r0").unwrap(),
                        None,
                        "visible before the fence"
                    );
                    if rank == 0 {
                        c.node_put("leader", b"/run/x;y.sock").unwrap();
                    } else {
                        assert_eq!(
                            c.node_get("leader", true).unwrap().unwrap(),
                            b"/run/x;y.sock"
                        );
                    }
                    c.barrier().unwrap();
                    for r in 0..3u32 {
                        let want: Vec<u8> = (0..2000u32).map(|i| (i * (r + 1)) as u8).collect();
                        assert_eq!(c.kvs_get(&format!("gsas-r{r}")).unwrap(), Some(want));
                    }
                    assert_eq!(c.kvs_get("never").unwrap(), None);
                    assert_eq!(c.node_get("absent", false).unwrap(), None);
                    assert_eq!(c.node_of_rank().unwrap(), Some(vec![0, 1, 0]));
                    assert_eq!(c.get_raw("PMI_nothing").unwrap(), None);
                    c.finalize().unwrap();
                    assert!(matches!(c.barrier(), Err(PmiError::Finished { .. })));
                    server.join().unwrap();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let st = shared.0.lock().unwrap();
        // 2000 bytes are 4000 hex characters: several kvs-put chunks per rank.
        let puts = st
            .bodies
            .iter()
            .filter(|b| b.starts_with("cmd=kvs-put;"))
            .count();
        assert!(puts >= 3 * 5, "{puts} puts");
        assert!(st.bodies.iter().any(|b| b == "cmd=kvs-fence;"));
        assert!(
            st.bodies
                .iter()
                .any(|b| b.starts_with("cmd=kvs-get;jobid=77.0;srcid=-1;key=gsas-r2;"))
        );
    }

    #[test]
    fn pmi2_abort_and_mismatches() {
        // abort: world abort, message without ';', no response awaited.
        let (shared, mut conns) = pmi2_fake(1, "(vector,(0,1,1))");
        let (fd, server) = conns.pop().unwrap();
        let mut c = Client::from_fd_pmi2(fd, 0, 1, "5.2", quick()).unwrap();
        assert!(matches!(
            c.node_put("k", &[0; 600]),
            Err(PmiError::ValueTooLarge { max: 511, .. })
        ));
        assert!(matches!(
            c.kvs_put(&"k".repeat(59), b""),
            Err(PmiError::InvalidKey { .. })
        ));
        c.abort(3, "bad; input = here").unwrap();
        drop(c);
        server.join().unwrap();
        let last = shared.0.lock().unwrap().bodies.last().cloned().unwrap();
        assert_eq!(
            last,
            "cmd=abort;isworldabort=TRUE;msg=exit code 3: bad__input___here;"
        );

        // A server that answers PMI-1 to the version 2 handshake.
        let (fd, h) = fake(vec![(
            "cmd=init pmi_version=2 pmi_subversion=0\n",
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
        )]);
        let e = Client::from_fd_pmi2(fd, 0, 1, "1.0", quick())
            .unwrap_err()
            .to_string();
        assert!(e.contains("PMI version 2"), "{e}");
        h.join().unwrap();

        // The environment's rank differs from the server's.
        let (_shared, mut conns) = pmi2_fake(2, "(vector,(0,1,2))");
        let (fd1, s1) = conns.pop().unwrap();
        let e = Client::from_fd_pmi2(fd1, 0, 2, "1.0", quick())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("says rank 1 of 2, the environment rank 0 of 2"),
            "{e}"
        );
        drop(conns);
        s1.join().unwrap();

        let (fd, h) = fake(vec![]);
        let e = Client::from_fd_pmi2(fd, 0, 1, "a;b", quick())
            .unwrap_err()
            .to_string();
        assert!(e.contains("PMI_JOBID"), "{e}");
        drop(h);
    }

    #[test]
    fn pmi1_has_no_node_attributes() {
        let (fd, h) = fake(NEW_STYLE_INIT.to_vec());
        let mut c = Client::from_fd(fd, 0, 1, quick()).unwrap();
        assert_eq!(c.protocol(), Protocol::Pmi1);
        let e = c.node_put("k", b"v").unwrap_err().to_string();
        assert!(e.contains("need PMI-2"), "{e}");
        drop(c);
        h.join().unwrap();
        let mut s = Client::singleton(quick());
        s.node_put("k", b"v").unwrap();
        assert_eq!(s.node_get("k", false).unwrap(), Some(b"v".to_vec()));
        assert_eq!(s.kvs_get("k").unwrap(), None);
    }

    #[test]
    fn srun_without_pmi_is_refused() {
        let cfg = ClientConfig::default();
        let e = Client::from_vars(
            cfg,
            env(&[("SLURM_STEP_NUM_TASKS", "2"), ("SLURM_NTASKS", "2")]),
        )
        .unwrap_err();
        assert!(
            matches!(e, PmiError::SrunWithoutPmi { tasks: 2, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("`srun --mpi=pmi2`"), "{e}");
        let e = Client::from_vars(cfg, env(&[("SLURM_NTASKS", "4"), ("SLURM_STEPID", "0")]))
            .unwrap_err();
        assert!(
            matches!(
                e,
                PmiError::SrunWithoutPmi {
                    var: "SLURM_NTASKS",
                    tasks: 4
                }
            ),
            "{e}"
        );
        // One task, or a batch script of a many-task job (no step): a singleton.
        for vars in [
            &[("SLURM_STEP_NUM_TASKS", "1"), ("SLURM_STEPID", "0")][..],
            &[("SLURM_NTASKS", "8"), ("SLURM_JOB_ID", "12")][..],
        ] {
            let vars: &'static [(&'static str, &'static str)] = vars;
            let c = Client::from_vars(cfg, env(vars)).unwrap();
            assert_eq!(c.connection(), Connection::Singleton);
        }
    }

    #[test]
    fn singleton_kvs_and_limits() {
        let mut c = Client::from_vars(ClientConfig::default(), |_| None).unwrap();
        assert_eq!(c.connection(), Connection::Singleton);
        assert_eq!((c.rank(), c.size()), (0, 1));
        let big: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        c.kvs_put("big", &big).unwrap();
        c.barrier().unwrap();
        assert_eq!(c.kvs_get("big").unwrap().unwrap(), big);
        c.kvs_put("big", b"small now").unwrap();
        assert_eq!(c.kvs_get("big").unwrap().unwrap(), b"small now");
        assert!(matches!(
            c.kvs_put("PMI_x", b""),
            Err(PmiError::InvalidKey { .. })
        ));
        assert!(matches!(
            c.kvs_put("a b", b""),
            Err(PmiError::InvalidKey { .. })
        ));
        assert!(matches!(c.kvs_get("k#1"), Err(PmiError::InvalidKey { .. })));
        assert_eq!(
            c.get_raw(PROCESS_MAPPING_KEY).unwrap().as_deref(),
            Some("(vector,(0,1,1))")
        );
        let huge = vec![0u8; 5_000_000];
        assert!(matches!(
            c.kvs_put("huge", &huge),
            Err(PmiError::ValueTooLarge { .. })
        ));
        c.abort(3, "bye").unwrap();
        assert!(matches!(c.kvs_get("big"), Err(PmiError::Finished { .. })));
    }
}
