// Over 1,000 lines: `init` is one sequence of steps sharing their locals (listed below), and its unit tests sit beside it.
//! How a PE starts: [`Node::init`](super::Node::init) step by step.
//!
//! 1. **Data segment** (only with [`NodeOptions::remap_data`](super::NodeOptions)): before
//!    anything else (the process must still be single-threaded), the executable's globals
//!    are remapped onto a sealed memfd of the PE's own; it is handed to the service later.
//! 2. **PMI**: `pmi::Client::from_env` (a launcher's `PMI_FD`/`PMI_PORT` with PMI-1 or
//!    PMI-2, PMIx through libpmix, or a singleton). Every read names the rank that
//!    published the key, as PMIx requires.
//! 3. **Environment and cluster file**: the `GSAS_*` table ([`gsas_transport::config`]); the cluster
//!    file of `GSAS_CONFIG`, or `/etc/gsas/cluster.toml` if it exists.
//! 4. **Exchange 1** (PMI put + barrier): every rank publishes its node hint (`GSAS_NODE`,
//!    or the cluster node whose `host` or `name` is this host name), its host name, and,
//!    for rank 0, the job id and key (from `GSAS_JOB_ID`/`GSAS_JOB_KEY`, else drawn from
//!    `getrandom`).
//! 5. **Exchange 2** (barrier): rank 0 reads every entry and publishes the job table: job
//!    id and key, and the node of every rank, from the hints; when no rank has one, from
//!    the launcher's `PMI_process_mapping` (every block of the vector, cyclic placements
//!    included: Slurm, Hydra, gsas's launcher); only when the launcher gives none, by host
//!    name (distinct host names in rank order become nodes 0, 1, ...). Every rank reads
//!    it. Mixed hints, or `GSAS_JOB_*` values that differ between ranks, fail every rank with
//!    the same message.
//! 6. **Service** (barrier): the lowest rank of each node (its leader) finds the node's
//!    service: `GSAS_SERVICE`; else the cluster file's `control_socket` of the node if a
//!    socket exists there (a running `gsas-atomicd`); else it starts one for the node
//!    through [`crate::node_service`] (by default `gsas-atomicd --private`, a child
//!    process; control socket in the user's runtime directory, UDP on 127.0.0.1 for a
//!    one-node job, else on the node's configured `bind` address or the address of the
//!    host name). It joins and publishes the socket path and the service's UDP address.
//! 7. The other ranks join (their own `GSAS_SERVICE`, else the leader's socket), learn every
//!    node's service address, and create their segments: heap (size from the options, the
//!    cluster file, or 64 MiB), sync (1 MiB), the ring when `GSAS_DIRECT=0`, and register the
//!    data segment. **Barrier.**
//! 8. Same-node peers' segments 0-2 are opened through the service and mapped (unless
//!    `GSAS_DIRECT=0`); the PE's UDP socket is bound on its node's address; the engines and
//!    the heap allocator are built. **Barrier**: after it every PE of the job is fully set
//!    up, and the services need no bootstrap state.
//!
//! Every PE passes the same number of PMI barriers whatever its environment, so a
//! disagreement is reported, not deadlocked. Every wait is bounded by
//! `GSAS_BOOT_TIMEOUT_MS` (PMI barriers) or the PMI request timeout.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use board_config::Cluster;
use gsas_core::client::Client;
use gsas_core::symheap::{Slot, SymHeap};
use gsas_core::wire::SenderId;

use crate::node_service::{self, NodeService, NodeServiceConfig};
use crate::pmi::{self, ClientConfig};
use gsas_control::ControlClient;
use gsas_control::proto::{JOIN_RING, JoinInfo, SEG_DATA, SEG_HEAP, SEG_RING, SEG_SYNC, SYNC_SIZE};
use gsas_transport::bell::{BellRef, slot_offset};
use gsas_transport::config::{self, RuntimeConfig};
use gsas_transport::exanet::ExanetSite;
use gsas_transport::net::{NetAddr, NetPeer, NetTransport};
use gsas_transport::poll::WaitConfig;
use gsas_transport::reliable::{OwnedReliable, reliable_config};
use gsas_transport::shm::{DataSegment, Segment, View};
use gsas_transport::shmring::ShmRing;
use gsas_transport::udp::{UdpConfig, UdpTransport};

use super::error::{pmi as pmi_err, shm as shm_err};
use super::keeper::{Keeper, Pulse};
use super::remote::{Book, Remote, Route, ServicePath};
use super::{MAPPED, Mapping, Node, NodeError, NodeOptions};

/// Default symmetric heap size when neither the program nor the cluster file gives one.
pub const DEFAULT_HEAP: u64 = 64 << 20;
/// Ring shape used with `GSAS_DIRECT=0`: slots per direction.
const RING_SLOTS: u64 = 32;
/// Largest job: PE numbers are 16 bits in global addresses.
pub const MAX_PES: u32 = 1 << 16;
/// Frame buffers of a PE's reliability layer.
const PE_FRAMES: usize = 64;
/// Shortest timeout of one control request to the local service: the job's deadline
/// (`GSAS_DEADLINE_MS`) when that is longer, see [`control_timeout`].
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a control request to the node's service (join, segments, leave) waits for its
/// reply in a job with deadline `deadline`: as long as a request to another node's service
/// may go unanswered, at least [`CONTROL_TIMEOUT`]. A fixed 10 s had made a job that
/// completed fail at exit when a service on a crowded machine answered the Leave of its PEs
/// later than that (512 PEs over sixteen namespaces on two CPUs, deadline 60 s).
fn control_timeout(deadline: Duration) -> Duration {
    CONTROL_TIMEOUT.max(deadline)
}

const ENTRY_VERSION: u8 = 1;
const TABLE_OK: u8 = 1;
const TABLE_ERROR: u8 = 0xFF;

/// What a rank publishes in exchange 1.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    hint: Option<u16>,
    job: Option<(u64, u64)>,
    host: String,
}

impl Entry {
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![ENTRY_VERSION, 0, 0, 0];
        if let Some(h) = self.hint {
            b[1] |= 1;
            b[2..4].copy_from_slice(&h.to_le_bytes());
        }
        let (id, key) = self.job.unwrap_or((0, 0));
        if self.job.is_some() {
            b[1] |= 2;
        }
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&key.to_le_bytes());
        b.extend_from_slice(self.host.as_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Entry> {
        if b.len() < 20 || b[0] != ENTRY_VERSION {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        Some(Entry {
            hint: (b[1] & 1 != 0).then(|| u16::from_le_bytes([b[2], b[3]])),
            job: (b[1] & 2 != 0).then(|| (u64_at(4), u64_at(12))),
            host: String::from_utf8_lossy(&b[20..]).into_owned(),
        })
    }
}

/// The job table rank 0 publishes in exchange 2.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Table {
    job_id: u64,
    job_key: u64,
    node_of: Vec<u16>,
}

impl Table {
    /// Encoding: status, job id, key, size, then runs of (node u16, count u32).
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![TABLE_OK];
        b.extend_from_slice(&self.job_id.to_le_bytes());
        b.extend_from_slice(&self.job_key.to_le_bytes());
        b.extend_from_slice(&(self.node_of.len() as u32).to_le_bytes());
        let mut i = 0;
        while i < self.node_of.len() {
            let n = self.node_of[i];
            let run = self.node_of[i..].iter().take_while(|&&m| m == n).count();
            b.extend_from_slice(&n.to_le_bytes());
            b.extend_from_slice(&(run as u32).to_le_bytes());
            i += run;
        }
        b
    }

    fn decode(b: &[u8]) -> Result<Table, String> {
        match b.first() {
            Some(&TABLE_OK) => {}
            Some(&TABLE_ERROR) => return Err(String::from_utf8_lossy(&b[1..]).into_owned()),
            _ => return Err("the job table published by rank 0 is not readable".into()),
        }
        if b.len() < 21 {
            return Err("the job table published by rank 0 is truncated".into());
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let size = u32::from_le_bytes(b[17..21].try_into().unwrap_or([0; 4])) as usize;
        let mut node_of = Vec::with_capacity(size);
        for run in b[21..].chunks(6) {
            if run.len() != 6 {
                return Err("the job table has a truncated run".into());
            }
            let n = u16::from_le_bytes([run[0], run[1]]);
            let count = u32::from_le_bytes([run[2], run[3], run[4], run[5]]) as usize;
            if node_of.len() + count > size {
                return Err("the job table has more ranks than the job".into());
            }
            node_of.extend(std::iter::repeat_n(n, count));
        }
        if node_of.len() != size {
            return Err("the job table has fewer ranks than the job".into());
        }
        Ok(Table {
            job_id: u64_at(1),
            job_key: u64_at(9),
            node_of,
        })
    }
}

/// Rank 0's decision from every rank's entry and the launcher's node of every rank
/// (`launcher`, from `PMI_process_mapping`); `Err` is the message every rank reports.
fn make_table(
    entries: &[Entry],
    job: (u64, u64),
    launcher: Option<&[u32]>,
) -> Result<Table, String> {
    let hinted = entries.iter().filter(|e| e.hint.is_some()).count();
    let from_launcher = launcher
        .filter(|l| l.len() == entries.len())
        .and_then(|l| l.iter().map(|&n| u16::try_from(n).ok()).collect());
    let node_of = if hinted == entries.len() {
        entries.iter().map(|e| e.hint.unwrap_or(0)).collect()
    } else if let (0, Some(nodes)) = (hinted, from_launcher) {
        nodes
    } else if hinted == 0 {
        let mut names: HashMap<&str, u16> = HashMap::new();
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let next = names.len();
            let id = *names.entry(e.host.as_str()).or_insert(next as u16);
            out.push(id);
        }
        out
    } else {
        let missing = entries.iter().position(|e| e.hint.is_none()).unwrap_or(0);
        let with = entries.iter().position(|e| e.hint.is_some()).unwrap_or(0);
        return Err(format!(
            "GSAS_NODE (or a cluster-file match of the host name) is known for PE {with} but not for PE {missing}; set it for every PE or for none"
        ));
    };
    Ok(Table {
        job_id: job.0,
        job_key: job.1,
        node_of,
    })
}

/// The node of every rank as the launcher describes it (`PMI_process_mapping`); `None`,
/// with the reason logged, when it gives none or one that does not describe this job.
fn launcher_nodes(pmi: &mut pmi::Client, size: u32) -> Option<Vec<u32>> {
    match pmi.node_of_rank() {
        Ok(Some(nodes)) => Some(nodes),
        Ok(None) => {
            log::debug!("the launcher publishes no PMI_process_mapping: nodes by host name");
            None
        }
        Err(e) => {
            log::warn!("{e}; of {size} PEs, the nodes are told apart by host name instead");
            None
        }
    }
}

/// Remaps the executable's data segment onto a new sealed memfd.
fn remap_data() -> Result<(DataSegment, Segment), NodeError> {
    let data = DataSegment::discover().map_err(shm_err("finding the data segment"))?;
    let seg = Segment::create("gsas-data", data.len())
        .map_err(shm_err("creating the data segment memfd"))?;
    // SAFETY: `Node::init` with `remap_data` is documented to run before the process starts
    // any thread, so nothing else writes the range during the copy and remap.
    unsafe { data.remap_onto(seg.fd()) }.map_err(shm_err("remapping the data segment"))?;
    Ok((data, seg))
}

/// The cluster file: `GSAS_CONFIG`, else the default file if it exists.
fn cluster_path(env: &RuntimeConfig) -> Option<PathBuf> {
    match &env.config {
        Some(p) => Some(p.clone()),
        None => {
            let p = PathBuf::from(config::DEFAULT_CONFIG_FILE);
            p.exists().then_some(p)
        }
    }
}

fn load_cluster(env: &RuntimeConfig) -> Result<Option<Cluster>, NodeError> {
    let Some(path) = cluster_path(env) else {
        return Ok(None);
    };
    Cluster::load(&path)
        .map(Some)
        .map_err(|e| NodeError::Config(format!("cluster file: {e}")))
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// `GSAS_SERVICE` with `%h` replaced by this host's name (one value for the PEs of
/// every node, as `oshrun` inside a Slurm allocation gives it).
fn service_of_host(env: &RuntimeConfig, host: &str) -> Option<PathBuf> {
    let p = env.service.as_ref()?;
    match p.to_str() {
        Some(s) if s.contains("%h") => Some(PathBuf::from(s.replace("%h", host))),
        _ => Some(p.clone()),
    }
}

/// The address an embedded service of a multi-node job binds.
fn embedded_bind(
    cluster: Option<&Cluster>,
    node: u16,
    nodes: usize,
    host: &str,
) -> Result<SocketAddr, NodeError> {
    if nodes == 1 {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0));
    }
    let name = match cluster.and_then(|c| c.node(node)) {
        Some(n) => n.bind.clone(),
        None => host.to_owned(),
    };
    let addrs: Vec<SocketAddr> = (name.as_str(), 0)
        .to_socket_addrs()
        .map_err(|e| NodeError::Config(format!("resolving {name} for the node's service: {e}")))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4() && !a.ip().is_loopback())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| NodeError::Config(format!("{name} has no address for the node's service")))
}

/// Stops an embedded service once every PE of the node has left (bounded by `limit`).
pub(crate) fn stop_embedded(service: Box<dyn NodeService>, limit: Duration) {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        match gsas_control::query_stats(service.socket_path(), Duration::from_secs(1)) {
            Ok(s) if s.get("pes.active") == Some(0) => break,
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                log::debug!("embedded service: {e}");
                break;
            }
        }
    }
    if let Err(e) = service.stop() {
        log::warn!("stopping the embedded service: {e}");
    }
}

/// How a node's PEs reach the PEs of other nodes, as its leader publishes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeNet {
    /// Through the services (UDP or Exanet).
    Service,
    /// A verbs node: RMA by RDMA, atomics through the services.
    Verbs,
    /// A verbs node whose RMA goes through the services too (`GSAS_VERBS_RMA=service`).
    VerbsViaService,
}

impl PeNet {
    fn word(self) -> &'static str {
        match self {
            PeNet::Service => "service",
            PeNet::Verbs => "verbs",
            PeNet::VerbsViaService => "verbs-rma-via-service",
        }
    }
}

/// What this node's PEs use: a verbs node (`GSAS_TRANSPORT`, else the node's `transport`
/// in the cluster file) with RMA over RDMA unless `GSAS_VERBS_RMA`, else the cluster
/// file's `defaults.verbs_rma`, says `service`.
fn pe_net(env: &RuntimeConfig, cluster: Option<&Cluster>, node: u16) -> PeNet {
    let verbs = match env.transport {
        Some(kind) => kind == config::TransportKind::Verbs,
        None => cluster
            .and_then(|c| c.node(node))
            .is_some_and(|n| n.transport == board_config::Transport::Verbs),
    };
    let via_service = env
        .verbs_rma_via_service
        .or(cluster.map(|c| c.defaults().verbs_rma_via_service))
        .unwrap_or(false);
    match (verbs, via_service) {
        (false, _) => PeNet::Service,
        (true, false) => PeNet::Verbs,
        (true, true) => PeNet::VerbsViaService,
    }
}

/// What a node's leader publishes: where the service is reached (`<ip>:<port>`, or
/// `exanet:<coord hex>:<ep>`), its control socket, and how its PEs reach other nodes'.
fn node_value(addr: NetAddr, path: &Path, net: PeNet) -> Vec<u8> {
    let net = net.word();
    match addr {
        NetAddr::Udp(a) => format!("{a}\n{}\n{net}", path.display()).into_bytes(),
        NetAddr::Exanet(d) => {
            format!("exanet:{:x}:{}\n{}\n{net}", d.coord, d.ep, path.display()).into_bytes()
        }
    }
}

fn parse_node_value(v: &[u8]) -> Option<(NetAddr, PathBuf, PeNet)> {
    let s = std::str::from_utf8(v).ok()?;
    let (addr, rest) = s.split_once('\n')?;
    let (path, net) = rest.rsplit_once('\n')?;
    let net = [PeNet::Service, PeNet::Verbs, PeNet::VerbsViaService]
        .into_iter()
        .find(|n| n.word() == net)?;
    let addr = match addr.strip_prefix("exanet:") {
        Some(rest) => {
            let (coord, ep) = rest.split_once(':')?;
            NetAddr::Exanet(exanet::Dest {
                coord: u32::from_str_radix(coord, 16).ok()?,
                ep: ep.parse().ok()?,
            })
        }
        None => NetAddr::Udp(addr.parse().ok()?),
    };
    Some((addr, PathBuf::from(path), net))
}

/// The service's address for other nodes: its Exanet endpoint 0, or its UDP socket.
fn service_addr(info: &gsas_control::proto::ServiceInfo) -> NetAddr {
    match &info.exanet {
        Some(site) => NetAddr::Exanet(exanet::Dest {
            coord: site.coord,
            ep: 0,
        }),
        None => NetAddr::Udp(info.udp),
    }
}

/// The node's Exanet endpoints as its service described them: the emulator of this PE's
/// `GSAS_EXANET_EMU`, or the UIO devices of the cluster file's node (`exanet-ep<k>` when
/// there is no file).
fn pe_site(
    x: &gsas_control::proto::ExanetInfo,
    env: &RuntimeConfig,
    cluster: Option<&Cluster>,
    node: u16,
) -> Result<ExanetSite, NodeError> {
    use gsas_transport::exanet::ExanetSource;
    let source = match x.emulated {
        Some(emulated) => ExanetSource::Emulated {
            root: env.exanet_emu.clone().ok_or_else(|| {
                NodeError::Config(format!(
                    "node {node}'s service serves the Exanet endpoints of emulated node {emulated}: set GSAS_EXANET_EMU to the emulator's root for the PEs too"
                ))
            })?,
            node: emulated,
        },
        None => {
            let listed = cluster
                .and_then(|c| c.node(node))
                .map(|n| n.uio_devices.clone())
                .unwrap_or_default();
            ExanetSource::Uio {
                devices: if listed.is_empty() {
                    (0..x.endpoints).map(|k| format!("exanet-ep{k}")).collect()
                } else {
                    listed
                },
            }
        }
    };
    let endpoints = match &source {
        ExanetSource::Uio { devices } => x.endpoints.min(devices.len() as u16),
        ExanetSource::Emulated { .. } => x.endpoints,
    };
    Ok(ExanetSite {
        source,
        coord: x.coord,
        endpoints,
    })
}

/// Opens this PE's Exanet endpoint, 1 + its index among the node's PEs of the job, with
/// its interrupt line (which the PE's waits sleep on, see [`super::PeWake`]).
fn open_pe_endpoint(
    site: &ExanetSite,
    local_pes: &[u32],
    rank: u32,
    mtu: usize,
) -> Result<(gsas_transport::exanet::ExanetLink, super::PeWake), NodeError> {
    let index = local_pes.iter().position(|&p| p == rank).unwrap_or(0);
    if local_pes.len() >= usize::from(site.endpoints) {
        return Err(NodeError::Config(format!(
            "the job puts {} PEs on the node of Exanet coordinate {:#x}, which has {} endpoint(s): endpoint 0 serves the node's atomic service and each PE needs one more, so at most {} PE(s) fit",
            local_pes.len(),
            site.coord,
            site.endpoints,
            site.endpoints.saturating_sub(1)
        )));
    }
    let ep = u16::try_from(index + 1).unwrap_or(u16::MAX);
    let (link, line) = site
        .open(ep, mtu, true)
        .map_err(|e| NodeError::Transport(format!("PE {rank}: {e}")))?;
    let line = line.ok_or_else(|| {
        NodeError::Transport(format!(
            "PE {rank}: endpoint {ep} opened without its interrupt line"
        ))
    })?;
    let wake = super::PeWake::new(line)
        .map_err(|e| NodeError::Transport(format!("PE {rank}: Exanet interrupt line: {e}")))?;
    Ok((link, wake))
}

/// [`Node::init`](super::Node::init): the steps of the module docs, each a method of the
/// value the step before made.
///
/// With `GSAS_LOG=debug` every PE logs how long each step took, in milliseconds.
pub(crate) fn init(options: NodeOptions) -> Result<Node, NodeError> {
    let mut steps = Steps::new();
    let started = Started::start(options)?;
    steps.mark("start");
    let placed = started.exchange()?;
    steps.mark("exchange");
    let serving = placed.join_service()?;
    steps.mark("join");
    let mapped = serving.create_segments()?;
    steps.mark("segments");
    let mapped = mapped.connect_verbs()?;
    steps.mark("verbs");
    let node = mapped.connect()?;
    steps.mark("connect");
    log::debug!("start-up took {}", steps);
    Ok(node)
}

/// The time each step of [`init`] took.
struct Steps {
    t0: Instant,
    last: Instant,
    took: Vec<(&'static str, Duration)>,
}

impl Steps {
    fn new() -> Steps {
        let now = Instant::now();
        Steps {
            t0: now,
            last: now,
            took: Vec::with_capacity(6),
        }
    }

    fn mark(&mut self, step: &'static str) {
        let now = Instant::now();
        self.took.push((step, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1} ms:", (self.last - self.t0).as_secs_f64() * 1e3)?;
        for (step, d) in &self.took {
            write!(f, " {step} {:.1}", d.as_secs_f64() * 1e3)?;
        }
        Ok(())
    }
}

/// Steps 1-3 done: the data segment remapped, PMI up, the environment and the cluster file
/// read, this PE's node hint.
struct Started {
    options: NodeOptions,
    remapped: Option<(DataSegment, Segment)>,
    env: RuntimeConfig,
    boot_timeout: Duration,
    pmi: pmi::Client,
    rank: u32,
    size: u32,
    cluster: Option<Cluster>,
    host: String,
    hint: Option<u16>,
}

/// Steps 4-5 done: the job table, and where this PE sits in it.
struct Placed {
    started: Started,
    table: Table,
    node: u16,
    nodes: Vec<u16>,
    leader: u32,
    local_pes: Vec<u32>,
    deadline: Duration,
}

/// Step 6 and 7's joins done: this PE joined its node's service; every node's service
/// address is known.
struct Serving {
    placed: Placed,
    embedded: Option<Box<dyn NodeService>>,
    service_path: PathBuf,
    control: ControlClient,
    joined: gsas_control::Joined,
    node_addrs: Vec<(u16, NetAddr)>,
    verbs_rma: bool,
    service_mtu: usize,
}

/// Steps 7 and 8's segments done: this PE's and its same-node peers' mapped, the ring, the
/// verbs connections.
struct Mapped {
    serving: Serving,
    maps: Vec<Segment>,
    /// The same-node peers' segments (mapped, their descriptors closed).
    views: Vec<View>,
    mappings: Vec<Mapping>,
    own_sizes: [u64; MAPPED],
    data: Option<DataSegment>,
    ring: Option<ShmRing>,
    udp_mtu: usize,
    verbs: Option<super::verbs::VerbsPath>,
}

impl Started {
    /// Steps 1-3.
    fn start(options: NodeOptions) -> Result<Started, NodeError> {
        let remapped = if options.remap_data {
            Some(remap_data()?)
        } else {
            None
        };
        let env = RuntimeConfig::from_env().map_err(|e| NodeError::Config(e.to_string()))?;
        let boot_timeout = Duration::from_millis(env.boot_timeout_ms);
        let pmi = pmi::Client::from_env_with(ClientConfig {
            barrier_timeout: boot_timeout,
            ..ClientConfig::default()
        })
        .map_err(pmi_err("PMI bootstrap"))?;
        let (rank, size) = (pmi.rank(), pmi.size());
        if size > MAX_PES {
            return Err(NodeError::Config(format!(
                "a job of {size} PEs: at most {} are supported",
                MAX_PES
            )));
        }
        gsas_transport::log::init(&format!("pe{rank}"), env.log);
        // A PE that sleeps in a wait preempts compute-bound processes when it is woken.
        gsas_transport::config::apply_sched_slice(env.sched_slice_us, &format!("PE {rank}"));
        log::info!(
            "PMI: rank {rank} of {size}, {:?} over {:?}",
            pmi.protocol(),
            pmi.connection()
        );
        let cluster = load_cluster(&env)?;
        let host = gsas_sys::process::hostname().unwrap_or_else(|_| "localhost".into());
        let hint = env.node.or_else(|| {
            let c = cluster.as_ref()?;
            let mut matches = c
                .nodes()
                .iter()
                .filter(|n| n.host == host || n.name == host);
            let first = matches.next()?;
            matches.next().is_none().then_some(first.id)
        });

        Ok(Started {
            options,
            remapped,
            env,
            boot_timeout,
            pmi,
            rank,
            size,
            cluster,
            host,
            hint,
        })
    }

    /// Steps 4-5: the two exchanges; every rank reads the job table.
    fn exchange(mut self) -> Result<Placed, NodeError> {
        let Started {
            options,
            env,
            pmi,
            rank,
            size,
            cluster,
            host,
            hint,
            ..
        } = &mut self;
        let (rank, size, hint) = (*rank, *size, *hint);
        // Exchange 1: entries.
        let job_from_env = env.job_id.zip(env.job_key);
        let rank0_job = if rank == 0 {
            Some(match job_from_env {
                Some(j) => j,
                None => {
                    let r = |what: &str| {
                        gsas_sys::process::random_nonzero_u64()
                            .map_err(|e| NodeError::Config(format!("drawing the {what}: {e}")))
                    };
                    (r("job id")?, r("job key")?)
                }
            })
        } else {
            None
        };
        let entry = Entry {
            hint,
            job: rank0_job,
            host: host.clone(),
        };
        pmi.kvs_put(&format!("gsas-r{rank}"), &entry.encode())
            .map_err(pmi_err("publishing this PE's entry"))?;
        pmi.barrier()
            .map_err(pmi_err("PMI barrier (exchange of PE entries)"))?;

        // Exchange 2: the job table.
        if rank == 0 {
            let mut entries = Vec::with_capacity(size as usize);
            let mut bad = None;
            for r in 0..size {
                let v = pmi
                    .kvs_get_from(r, &format!("gsas-r{r}"))
                    .map_err(pmi_err(format!("reading the entry of PE {r}")))?;
                match v.as_deref().and_then(Entry::decode) {
                    Some(e) => entries.push(e),
                    None => {
                        bad.get_or_insert(format!("PE {r} published no readable entry"));
                        entries.push(Entry {
                            hint: None,
                            job: None,
                            host: String::new(),
                        });
                    }
                }
            }
            let job = rank0_job.unwrap_or((0, 0));
            let launcher = launcher_nodes(pmi, size);
            let value =
                match bad.map_or_else(|| make_table(&entries, job, launcher.as_deref()), Err) {
                    Ok(t) => t.encode(),
                    Err(msg) => {
                        let mut v = vec![TABLE_ERROR];
                        v.extend_from_slice(msg.as_bytes());
                        v
                    }
                };
            pmi.kvs_put("gsas-table", &value)
                .map_err(pmi_err("publishing the job table"))?;
        }
        pmi.barrier().map_err(pmi_err("PMI barrier (job table)"))?;
        let table_bytes = pmi
            .kvs_get_from(0, "gsas-table")
            .map_err(pmi_err("reading the job table"))?
            .ok_or_else(|| NodeError::Config("rank 0 published no job table".into()))?;
        let table = Table::decode(&table_bytes).map_err(NodeError::Config)?;
        if let Some((id, key)) = job_from_env {
            if (id, key) != (table.job_id, table.job_key) {
                return Err(NodeError::Config(format!(
                    "GSAS_JOB_ID/GSAS_JOB_KEY of PE {rank} differ from rank 0's (job {:016x})",
                    table.job_id
                )));
            }
        }
        let node = table.node_of[rank as usize];
        let mut nodes: Vec<u16> = Vec::new();
        for &n in &table.node_of {
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
        let leader = table.node_of.iter().position(|&n| n == node).unwrap_or(0) as u32;
        let local_pes: Vec<u32> = (0..size)
            .filter(|&p| table.node_of[p as usize] == node)
            .collect();
        let deadline = options
            .deadline
            .or(env.deadline_ms.map(Duration::from_millis))
            .or(cluster
                .as_ref()
                .map(|c| Duration::from_millis(u64::from(c.defaults().service_timeout_ms))))
            .unwrap_or(Duration::from_millis(config::DEFAULT_DEADLINE_MS));
        Ok(Placed {
            started: self,
            table,
            node,
            nodes,
            leader,
            local_pes,
            deadline,
        })
    }
}

impl Placed {
    /// Steps 6 and 7's joins: the leader of each node finds or starts the node's service
    /// ([`Placed::find_or_start_service`]), joins and publishes it; every PE learns every
    /// node's service and joins its own.
    fn join_service(mut self) -> Result<Serving, NodeError> {
        let leading = if self.started.rank == self.leader {
            Some(self.find_or_start_service()?)
        } else {
            None
        };
        let control_timeout = control_timeout(self.deadline);
        let Placed {
            started,
            table,
            node,
            nodes,
            ..
        } = &mut self;
        let Started {
            env,
            pmi,
            rank,
            size,
            cluster,
            host,
            ..
        } = started;
        let (rank, size, node) = (*rank, *size, *node);

        // Service: the leader finds or starts it and publishes it.
        let join_info = JoinInfo {
            npes: size,
            node,
            flags: if env.direct { 0 } else { JOIN_RING },
        };
        let mut embedded: Option<Box<dyn NodeService>> = None;
        let mut joined = None;
        if let Some((path, service)) = leading {
            embedded = service;
            let mut c = ControlClient::connect(&path, control_timeout)?;
            let j = c.join(rank as u16, table.job_id, table.job_key, join_info)?;
            pmi.kvs_put(
                &format!("gsas-n{node}"),
                &node_value(
                    service_addr(&j.info),
                    &path,
                    pe_net(env, cluster.as_ref(), node),
                ),
            )
            .map_err(pmi_err("publishing the node's service"))?;
            joined = Some((path, c, j));
        }
        pmi.barrier().map_err(pmi_err("PMI barrier (services)"))?;
        let mut node_addrs = Vec::with_capacity(nodes.len());
        let mut node_nets = Vec::with_capacity(nodes.len());
        let mut leader_path = None;
        for &n in nodes.iter() {
            let node_leader = table.node_of.iter().position(|&m| m == n).unwrap_or(0) as u32;
            let v = pmi
                .kvs_get_from(node_leader, &format!("gsas-n{n}"))
                .map_err(pmi_err(format!("reading the service of node {n}")))?
                .and_then(|v| parse_node_value(&v))
                .ok_or_else(|| {
                    NodeError::Config(format!("the leader of node {n} published no service"))
                })?;
            if n == node {
                leader_path = Some(v.1.clone());
            }
            node_addrs.push((n, v.0));
            node_nets.push((n, v.2));
        }
        // Every PE reads the same values, so all agree on the verbs path (and its barriers).
        let (first, net) = node_nets[0];
        if let Some(&(other, other_net)) = node_nets.iter().find(|(_, m)| *m != net) {
            return Err(NodeError::Config(format!(
                "node {first}'s PEs reach other nodes as `{}` but node {other}'s as `{}`: a job's nodes must all be verbs nodes (with the same GSAS_VERBS_RMA) or none; mixed jobs are not supported",
                net.word(),
                other_net.word()
            )));
        }
        let verbs_rma = net == PeNet::Verbs && nodes.len() > 1;
        let (service_path, control, joined) = match joined {
            Some(j) => j,
            None => {
                let path = service_of_host(env, host).or(leader_path).ok_or_else(|| {
                    NodeError::Config(format!("no service known for node {node}"))
                })?;
                let mut c = ControlClient::connect(&path, control_timeout)?;
                let j = c.join(rank as u16, table.job_id, table.job_key, join_info)?;
                (path, c, j)
            }
        };
        if joined.info.node != node {
            return Err(NodeError::Config(format!(
                "the service at {} serves node {}, but PE {rank} runs on node {node}",
                service_path.display(),
                joined.info.node
            )));
        }
        let service_mtu = joined.info.udp_mtu as usize;
        if service_mtu != env.udp_mtu && std::env::var_os(config::GSAS_UDP_MTU.name).is_some() {
            return Err(NodeError::Config(format!(
                "GSAS_UDP_MTU={} but the atomic service of node {node} ({}) uses {service_mtu}: \
                 every process of a job must use the same datagram size; unset GSAS_UDP_MTU \
                 (PEs then take the service's) or start the services with the same `udp_mtu`",
                env.udp_mtu,
                service_path.display()
            )));
        }

        Ok(Serving {
            placed: self,
            embedded,
            service_path,
            control,
            joined,
            node_addrs,
            verbs_rma,
            service_mtu,
        })
    }

    /// The leader's part of step 6: the node's service (`GSAS_SERVICE`, the cluster file's
    /// `control_socket` where a socket exists, else an embedded service started here) and,
    /// when started here, its thread.
    fn find_or_start_service(&self) -> Result<(PathBuf, Option<Box<dyn NodeService>>), NodeError> {
        let Started {
            env,
            rank,
            cluster,
            host,
            ..
        } = &self.started;
        let (rank, node) = (*rank, self.node);
        let known = service_of_host(env, host).or_else(|| {
            let n = cluster.as_ref()?.node(node)?;
            let p = PathBuf::from(&n.control_socket);
            is_socket(&p).then_some(p)
        });
        if let Some(p) = known {
            return Ok((p, None));
        }
        let dir = gsas_sys::socket::runtime_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref())
            .map_err(|e| NodeError::Config(format!("socket directory: {e}")))?;
        let path = dir.join(format!("pe-job{:016x}-node{node}.sock", self.table.job_id));
        let bind = embedded_bind(cluster.as_ref(), node, self.nodes.len(), host)?;
        let node_entry = cluster.as_ref().and_then(|c| c.node(node));
        let exanet = match node_entry {
            Some(n) => gsas_transport::exanet::exanet_site(n, env).map_err(NodeError::Config)?,
            None => None,
        };
        let cfg = NodeServiceConfig {
            node,
            name: format!("pe{rank} node service"),
            udp_bind: bind,
            socket: path,
            udp_mtu: env.udp_mtu,
            deadline: self.deadline,
            spin: Duration::from_micros(env.service_spin_us),
            sched_slice: Duration::from_micros(env.sched_slice_us),
            memory_limit: env.memory_limit.or(node_entry.and_then(|n| n.memory)),
            cluster_file: cluster_path(env),
            exanet,
            daemon: env.atomicd.clone(),
        };
        let s = node_service::start(&cfg).map_err(NodeError::ServiceStart)?;
        log::info!(
            "started a service for node {node} at {}",
            s.socket_path().display()
        );
        Ok((s.socket_path().to_owned(), Some(s)))
    }
}

impl Serving {
    /// Step 7's segments and step 8's mappings of the same-node peers' segments, then the
    /// verbs connections when the job's nodes are verbs nodes.
    fn create_segments(mut self) -> Result<Mapped, NodeError> {
        let Serving {
            placed,
            control,
            joined,
            ..
        } = &mut self;
        let Placed {
            started, local_pes, ..
        } = placed;
        let Started {
            options,
            remapped,
            env,
            pmi,
            rank,
            size,
            cluster,
            ..
        } = started;
        let (rank, size) = (*rank, *size);
        // Own segments.
        let heap_size = options
            .heap_size
            .or(cluster.as_ref().map(|c| c.defaults().symmetric_size))
            .unwrap_or(DEFAULT_HEAP);
        let me = rank as u16;
        let mut maps = Vec::new();
        let mut views = Vec::new();
        let map = |fd, len: u64, what: &str| {
            let len = usize::try_from(len).map_err(|_| {
                NodeError::Config(format!(
                    "{what} of {len} bytes does not fit the address space"
                ))
            })?;
            Segment::map_len(fd, len, what).map_err(shm_err(format!("mapping {what}")))
        };
        let mut mappings = vec![Mapping::default(); size as usize * MAPPED];
        let mut own_sizes = [0u64; MAPPED];
        for (seg, want) in [(SEG_HEAP, heap_size), (SEG_SYNC, SYNC_SIZE)] {
            let (len, fd) = control.create_segment(me, seg, want)?;
            let m = map(fd, len, &format!("segment {seg} of PE {rank}"))?;
            mappings[rank as usize * MAPPED + usize::from(seg)] = Mapping {
                base: m.addr(),
                len,
            };
            own_sizes[usize::from(seg)] = len;
            maps.push(m);
        }
        let mut data = None;
        if let Some((d, memfd)) = remapped.take() {
            control.register_segment(me, SEG_DATA, d.len() as u64, memfd.fd())?;
            mappings[rank as usize * MAPPED + usize::from(SEG_DATA)] = Mapping {
                base: d.base(),
                len: d.len() as u64,
            };
            own_sizes[usize::from(SEG_DATA)] = d.len() as u64;
            data = Some(d);
            maps.push(memfd);
        }
        let udp_mtu = joined.info.udp_mtu as usize;
        let ring = if env.direct {
            None
        } else {
            let slot = (udp_mtu - gsas_transport::udp::header::HEADER_LEN - 64) as u64;
            let (len, fd) = control.create_segment(me, SEG_RING, (RING_SLOTS << 32) | slot)?;
            let seg = map(fd, len, &format!("ring of PE {rank}"))?;
            Some(ShmRing::pe_side(seg).map_err(shm_err("opening the ring"))?)
        };
        pmi.barrier()
            .map_err(pmi_err("PMI barrier (segments created)"))?;

        // Same-node peers' segments, as many per request as a reply's descriptors hold
        // (one request per segment made start-up quadratic in the node's PEs).
        if env.direct {
            let wanted = |seg: u8| seg != SEG_DATA || data.is_some();
            views.reserve(3 * local_pes.len());
            let mut from = Some(0u16);
            while let Some(f) = from {
                let (batch, next) = control.open_segments(f)?;
                from = next;
                for (e, fd) in batch {
                    let (pe, seg) = (u32::from(e.pe), e.segment);
                    if pe == rank
                        || local_pes.binary_search(&pe).is_err()
                        || ![SEG_HEAP, SEG_DATA, SEG_SYNC].contains(&seg)
                    {
                        return Err(NodeError::Config(format!(
                            "the node's service offered segment {seg} of PE {pe}, which is \
                             not another PE of this node's share of the job"
                        )));
                    }
                    if !wanted(seg) {
                        continue;
                    }
                    let m = map(fd, e.size, &format!("segment {seg} of PE {pe}"))?;
                    mappings[pe as usize * MAPPED + usize::from(seg)] = Mapping {
                        base: m.addr(),
                        len: e.size,
                    };
                    views.push(m.into_view());
                }
            }
            for &pe in local_pes.iter().filter(|&&p| p != rank) {
                for seg in [SEG_HEAP, SEG_DATA, SEG_SYNC]
                    .into_iter()
                    .filter(|&s| wanted(s))
                {
                    if mappings[pe as usize * MAPPED + usize::from(seg)].len == 0 {
                        return Err(NodeError::Config(format!(
                            "PE {pe} of this node has no segment {seg} at the service after \
                             the segments barrier"
                        )));
                    }
                }
            }
        }
        let verbs = None;

        Ok(Mapped {
            serving: self,
            maps,
            views,
            mappings,
            own_sizes,
            data,
            ring,
            udp_mtu,
            verbs,
        })
    }
}

impl Mapped {
    /// Step 8's RDMA: the connections to the other verbs nodes' PEs, when the job's nodes
    /// are verbs nodes (two PMI barriers, on every PE of such a job).
    fn connect_verbs(mut self) -> Result<Mapped, NodeError> {
        let Serving {
            placed, verbs_rma, ..
        } = &mut self.serving;
        if !*verbs_rma {
            return Ok(self);
        }
        let Placed {
            started,
            table,
            node,
            deadline,
            ..
        } = placed;
        let rank = started.rank;
        let n = started.cluster.as_ref().and_then(|c| c.node(*node));
        let mappings = &self.mappings;
        let own = |seg: u8| {
            let m = mappings[rank as usize * MAPPED + usize::from(seg)];
            (m.base != 0).then_some((m.base, m.len))
        };
        let path = super::verbs::VerbsPath::connect(
            super::verbs::Setup {
                rank,
                node_of: &table.node_of,
                device: n.and_then(|n| n.verbs_device.clone()),
                port: n.and_then(|n| n.verbs_port),
                gid_index: n.map_or(0, |n| n.verbs_gid_index),
                segments: [own(SEG_HEAP), own(SEG_DATA), own(SEG_SYNC)],
                deadline: *deadline,
            },
            &mut started.pmi,
        )?;
        self.verbs = Some(path);
        Ok(self)
    }

    /// Step 8: the engines (the PE's network transport and reliability layer, the routes,
    /// the doorbell), the progress keeper and the heap allocator; the last barrier.
    fn connect(self) -> Result<Node, NodeError> {
        let (net, exanet_wake) = self.pe_transport()?;
        let Mapped {
            serving:
                Serving {
                    placed:
                        Placed {
                            started:
                                Started {
                                    options,
                                    env,
                                    boot_timeout,
                                    mut pmi,
                                    rank,
                                    size,
                                    ..
                                },
                            table,
                            node,
                            nodes,
                            local_pes,
                            deadline,
                            ..
                        },
                    embedded,
                    service_path,
                    control,
                    joined,
                    node_addrs,
                    ..
                },
            maps,
            views,
            mappings,
            own_sizes,
            data,
            ring,
            udp_mtu,
            verbs,
        } = self;
        // Engines.
        let rc = reliable_config(deadline);
        let rc_ack_delay = rc.ack_delay_ns;
        let layer = OwnedReliable::new(net, rc, nodes.len() + 1, PE_FRAMES)
            .map_err(|e| NodeError::Config(format!("reliability layer: {e}")))?;
        let udp_fd = match layer.inner().udp() {
            Some(u) => Some(u.as_fd().try_clone_to_owned().map_err(|e| {
                NodeError::Transport(format!("duplicating the UDP descriptor: {e}"))
            })?),
            None => None,
        };
        let control_fd = control.fd().try_clone_to_owned().map_err(|e| {
            NodeError::Transport(format!("duplicating the control descriptor: {e}"))
        })?;
        let sender = SenderId::new(u64::from(rank)).unwrap_or_default();
        let routes = routes(&table, node, env.direct, &node_addrs, verbs.is_some());
        let (doorbell, bell) = doorbell_and_bell(joined.doorbell, joined.info.bell)?;
        let remote = Remote {
            net: ServicePath::new(Box::new(Client::new(sender)), layer),
            ring: ring.map(|r| ServicePath::new(Box::new(Client::new(sender)), r)),
            verbs,
            book: Book::new(deadline),
            doorbell,
            last_rx_ns: 0,
            last_poll_ns: 0,
            ack_delay_ns: rc_ack_delay,
        };
        let pulse = Arc::new(Pulse::new(remote));
        // Only the network needs retransmissions and acknowledgements while the program
        // computes.
        let keeper =
            if routes
                .iter()
                .any(|r| matches!(r, Route::Net(_) | Route::Verbs(_)))
            {
                Some(Keeper::spawn(Arc::clone(&pulse)).map_err(|e| {
                    NodeError::Transport(format!("starting the progress keeper: {e}"))
                })?)
            } else {
                None
            };
        let heap = SymHeap::new(
            own_sizes[usize::from(SEG_HEAP)],
            vec![Slot::EMPTY; options.heap_slots.max(16)],
        )
        .map_err(|e| NodeError::Config(format!("symmetric heap allocator: {e}")))?;
        pmi.barrier()
            .map_err(pmi_err("PMI barrier (start-up complete)"))?;
        let notes = pmi.takes_notes();
        let pmi = Arc::new(Mutex::new(pmi));
        let watch_token =
            crate::watch::attach(rank, control_fd.as_fd(), Arc::clone(&pmi), notes)
                .map_err(|e| NodeError::Transport(format!("starting the watchdog: {e}")))?;
        log::debug!(
            "PE {rank} of {size} ready: node {node}, {} local PEs, service {}",
            local_pes.len(),
            service_path.display()
        );
        let unbelled = routes.iter().any(|r| matches!(r, Route::Verbs(_)));
        Ok(Node {
            rank,
            size,
            node,
            job_id: table.job_id,
            job_key: table.job_key,
            udp_mtu,
            node_of: table.node_of,
            local_pes,
            routes,
            mappings,
            own_sizes,
            _maps: maps,
            _views: views,
            data,
            pulse,
            bell,
            keeper: Mutex::new(keeper),
            control: Mutex::new(control),
            control_fd,
            udp_fd,
            exanet_wake,
            pmi,
            watch_token,
            heap: Mutex::new(heap),
            contexts: Mutex::new(1),
            barrier_gen: Mutex::new(0),
            finalized: AtomicBool::new(false),
            service: Mutex::new(embedded),
            service_path,
            nodes: node_addrs,
            wait: WaitConfig::new().with_spin_us(env.spin_us),
            reply_spin: Default::default(),
            deadline,
            boot_timeout,
            direct: env.direct,
            ops_started: AtomicU64::new(0),
            settled: AtomicBool::new(true),
            outside: AtomicBool::new(false),
            outside_hook: std::sync::OnceLock::new(),
            unbelled,
        })
    }

    /// This PE's network transport: its Exanet endpoint when the service is on Exanet, else
    /// a UDP socket on the service's address (its interrupt line for Exanet).
    fn pe_transport(&self) -> Result<(NetTransport, Option<super::PeWake>), NodeError> {
        let Serving {
            placed,
            joined,
            node_addrs,
            service_mtu,
            ..
        } = &self.serving;
        let Placed {
            started,
            node,
            local_pes,
            ..
        } = placed;
        let (env, cluster, rank, node, service_mtu, udp_mtu) = (
            &started.env,
            &started.cluster,
            started.rank,
            *node,
            *service_mtu,
            self.udp_mtu,
        );
        let own_kind = std::mem::discriminant(&service_addr(&joined.info));
        if let Some((n, a)) = node_addrs
            .iter()
            .find(|(_, a)| std::mem::discriminant(a) != own_kind)
        {
            return Err(NodeError::Config(format!(
                "node {n}'s service is reached at {a}, but node {node}'s at {}: a job's nodes must all use the same inter-node transport (UDP or Exanet)",
                service_addr(&joined.info)
            )));
        }
        let mut exanet_wake = None;
        let net = match &joined.info.exanet {
            Some(x) => {
                let site = pe_site(x, env, cluster.as_ref(), node)?;
                let (link, wake) = open_pe_endpoint(&site, local_pes, rank, udp_mtu)?;
                exanet_wake = Some(wake);
                NetTransport::Exanet {
                    link: Box::new(link),
                    udp: None,
                }
            }
            None => {
                let ip = match joined.info.udp.ip() {
                    IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    ip => ip,
                };
                let udp = UdpTransport::bind(
                    SocketAddr::new(ip, 0),
                    UdpConfig {
                        mtu: service_mtu,
                        ..UdpConfig::default()
                    },
                )
                .map_err(|e| NodeError::Transport(format!("PE {rank} UDP socket: {e}")))?;
                if rank == self.serving.placed.leader {
                    warn_fragmented(node, service_mtu, ip, node_addrs);
                }
                NetTransport::Udp(udp)
            }
        };
        Ok((net, exanet_wake))
    }
}

/// IPv4 and UDP headers: what a datagram adds to its payload on the wire.
const IP_UDP_HEADERS: usize = 28;

/// The path MTU the kernel knows from `from` to `to` (the route's, or what path MTU
/// discovery learnt), from a connected UDP socket that sends nothing; `None` if it cannot
/// be asked (no route, IPv6).
fn path_mtu(from: IpAddr, to: SocketAddr) -> Option<usize> {
    let s = std::net::UdpSocket::bind(SocketAddr::new(from, 0)).ok()?;
    s.connect(to).ok()?;
    gsas_sys::socket::path_mtu(s.as_fd(), to.is_ipv6()).ok()
}

/// Warns once per node (its leader calls it) when the job's datagrams are larger than the
/// path to another node carries: each is then sent as several IP fragments, and one lost
/// fragment loses the whole datagram (docs/slurm.md, "Datagram size"). Loopback (MTU 65536)
/// never warns at the default size.
fn warn_fragmented(node: u16, datagram: usize, from: IpAddr, node_addrs: &[(u16, NetAddr)]) {
    let mut small: Vec<(u16, usize)> = node_addrs
        .iter()
        .filter(|(n, _)| *n != node)
        .filter_map(|(n, a)| match a {
            NetAddr::Udp(to) => path_mtu(from, *to).map(|m| (*n, m)),
            NetAddr::Exanet(_) => None,
        })
        .filter(|&(_, m)| datagram + IP_UDP_HEADERS > m)
        .collect();
    let Some(&(_, mtu)) = small.iter().min_by_key(|&&(_, m)| m) else {
        return;
    };
    small.sort_unstable();
    let nodes: Vec<String> = small.iter().map(|(n, _)| n.to_string()).collect();
    log::warn!(
        "node {node}: datagrams of {datagram} bytes (GSAS_UDP_MTU, or udp_mtu in the cluster \
         file) exceed the path MTU to node(s) {}: {mtu} bytes; each is sent as {} IP \
         fragments and one lost fragment loses it: set GSAS_UDP_MTU={} or less where the \
         network can lose packets (docs/slurm.md)",
        nodes.join(", "),
        // A fragment carries up to the MTU less the IP header, in multiples of 8 bytes.
        (datagram + 8).div_ceil((mtu - 20) / 8 * 8),
        mtu - IP_UDP_HEADERS
    );
}

/// The service's doorbell page mapped, and this PE's bell in it (see `gsas_transport::bell`): the
/// bell the service rings after updating this PE's memory.
#[allow(clippy::type_complexity)]
fn doorbell_and_bell(
    doorbell: Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>,
    slot: Option<u32>,
) -> Result<
    (
        Option<(Arc<Segment>, std::os::fd::OwnedFd)>,
        Option<BellRef>,
    ),
    NodeError,
> {
    let doorbell = match doorbell {
        Some((page, efd)) => Some((
            Arc::new(
                Segment::map(page, "service doorbell").map_err(shm_err("mapping the doorbell"))?,
            ),
            efd,
        )),
        None => None,
    };
    let bell = match (&doorbell, slot) {
        (Some((page, _)), Some(slot)) => Some(
            BellRef::new(Arc::clone(page), slot_offset(slot)).ok_or_else(|| {
                NodeError::Service(gsas_control::ControlError::Protocol(format!(
                    "the service gave bell slot {slot}, outside its {}-byte doorbell page",
                    page.len()
                )))
            })?,
        ),
        _ => None,
    };
    Ok((doorbell, bell))
}

/// How this PE reaches each PE of the job: same-node PEs directly (or through the ring
/// with `GSAS_DIRECT=0`), the others through their node's service, or by RDMA between verbs
/// nodes (`verbs`).
fn routes(
    table: &Table,
    node: u16,
    direct: bool,
    node_addrs: &[(u16, NetAddr)],
    verbs: bool,
) -> Vec<Route> {
    let addr_of: HashMap<u16, NetAddr> = node_addrs.iter().copied().collect();
    table
        .node_of
        .iter()
        .map(|&n| {
            if n == node {
                if direct { Route::Direct } else { Route::Ring }
            } else {
                let peer = NetPeer {
                    addr: addr_of[&n],
                    key: table.job_key,
                };
                if verbs {
                    Route::Verbs(peer)
                } else {
                    Route::Net(peer)
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(hint: Option<u16>, host: &str) -> Entry {
        Entry {
            hint,
            job: None,
            host: host.into(),
        }
    }

    #[test]
    fn entries_and_tables_round_trip() {
        let x = Entry {
            hint: Some(7),
            job: Some((1, 2)),
            host: "qfdb0-f3".into(),
        };
        assert_eq!(Entry::decode(&x.encode()), Some(x));
        assert_eq!(Entry::decode(&[1, 2]), None);
        let t = Table {
            job_id: 9,
            job_key: 10,
            node_of: vec![0, 0, 0, 1, 1, 5, 0],
        };
        assert_eq!(Table::decode(&t.encode()), Ok(t));
        let mut err = vec![TABLE_ERROR];
        err.extend_from_slice(b"no good");
        assert_eq!(Table::decode(&err), Err("no good".into()));
        assert!(Table::decode(&[TABLE_OK, 1]).is_err());
    }

    #[test]
    fn control_requests_wait_as_long_as_the_deadline_and_at_least_ten_seconds() {
        assert_eq!(control_timeout(Duration::from_secs(1)), CONTROL_TIMEOUT);
        assert_eq!(control_timeout(CONTROL_TIMEOUT), CONTROL_TIMEOUT);
        assert_eq!(
            control_timeout(Duration::from_secs(60)),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn node_assignment() {
        let t = make_table(
            &[e(Some(3), "a"), e(Some(3), "a"), e(Some(1), "b")],
            (1, 2),
            Some(&[0, 1, 2]),
        )
        .unwrap();
        assert_eq!(t.node_of, [3, 3, 1], "hints come first");
        let t = make_table(
            &[e(None, "b"), e(None, "a"), e(None, "b"), e(None, "c")],
            (1, 2),
            None,
        )
        .unwrap();
        assert_eq!(t.node_of, [0, 1, 0, 2]);
        let err = make_table(&[e(Some(0), "a"), e(None, "a")], (1, 2), None).unwrap_err();
        assert!(err.contains("PE 0 but not for PE 1"), "{err}");
    }

    #[test]
    fn launcher_mapping_beats_host_names() {
        // Four PEs that all report the same host name (containers, several slurmd on one
        // host) but that the launcher placed cyclically on two nodes.
        let same = [e(None, "h"), e(None, "h"), e(None, "h"), e(None, "h")];
        let cyclic = pmi::ProcessMapping::parse("(vector,(0,2,1))")
            .unwrap()
            .node_of_rank(4)
            .unwrap();
        let t = make_table(&same, (1, 2), Some(&cyclic)).unwrap();
        assert_eq!(t.node_of, [0, 1, 0, 1]);
        // An uneven Slurm placement: 3 + 3 on nodes 0, 1, then 2 on node 2.
        let uneven = pmi::ProcessMapping::parse("(vector,(0,2,3),(2,1,2))")
            .unwrap()
            .node_of_rank(8)
            .unwrap();
        let eight = vec![e(None, "h"); 8];
        let t = make_table(&eight, (1, 2), Some(&uneven)).unwrap();
        assert_eq!(t.node_of, [0, 0, 0, 1, 1, 1, 2, 2]);
        // A mapping for another job size, or node numbers past u16: host names.
        let t = make_table(&same, (1, 2), Some(&[0, 1])).unwrap();
        assert_eq!(t.node_of, [0, 0, 0, 0]);
        let t = make_table(&same[..1], (1, 2), Some(&[70_000])).unwrap();
        assert_eq!(t.node_of, [0]);
    }

    #[test]
    fn node_values() {
        let udp = NetAddr::Udp("127.0.0.1:9".parse().unwrap());
        let v = node_value(udp, Path::new("/tmp/x y.sock"), PeNet::Verbs);
        assert_eq!(
            parse_node_value(&v),
            Some((udp, PathBuf::from("/tmp/x y.sock"), PeNet::Verbs))
        );
        let exa = NetAddr::Exanet(exanet::Dest {
            coord: 0x3000,
            ep: 0,
        });
        let v = node_value(exa, Path::new("/s"), PeNet::Service);
        assert_eq!(v, b"exanet:3000:0\n/s\nservice");
        assert_eq!(
            parse_node_value(&v),
            Some((exa, PathBuf::from("/s"), PeNet::Service))
        );
        assert_eq!(parse_node_value(b"garbage"), None);
        assert_eq!(parse_node_value(b"127.0.0.1:9\n/s\nsmoke-signals"), None);
    }
}
