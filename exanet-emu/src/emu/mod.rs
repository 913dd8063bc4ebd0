//! `exanet-emu`: the Exanet NI emulator (model sections 2, 12 and 13).
//!
//! What it is: [`Emulator::start`] builds a fabric of emulated nodes (default: one QFDB,
//! four nodes with the coordinates of [`crate::node_coord`]), each with `eps` endpoints,
//! under a root directory, and runs one fabric thread for all nodes plus a control thread:
//!
//! ```text
//! <root>/ready                       written last: "pid <pid>"; tests wait for it
//! <root>/topology                    "nodes N eps E pdid P fabric sockets|in-process" then
//!                                    "node <i> coord 0x<c>"
//! <root>/control                     control socket (SOCK_STREAM, text commands below)
//! <root>/doze, <root>/wake           doorbell wake-up of the dozing fabric thread (see wake)
//! <root>/node<i>/ep<k>/map0..map3    the endpoint's maps (regs 4 KiB, mbox 8 KiB, pktz 4 KiB, rdma 4 KiB)
//! <root>/node<i>/ep<k>/irq           IRQ socket (uio_pdrv_genirq semantics, see uio_driver::irq)
//! <root>/node<i>/ep<k>/mgmt          registration socket (SOCK_SEQPACKET, see crate::nva)
//! <root>/node<i>/ep<k>/{doze,wake}   symlinks to the root's doze file and wake socket
//! <root>/node<i>/sys/class/uio/uio<k>/{name,version,event,maps/mapM/*}   fabricated sysfs
//! ```
//!
//! A driver opens endpoint `k` of node `i` with [`EmuPaths::open_shm`] (or
//! `uio_driver::EmuSource::new("exanet-ep<k>", "<root>/node<i>/ep<k>")` and
//! `exanet::io::shm::Shm::open`), its interrupt with [`EmuPaths::irq`] and its registrar with
//! [`EmuPaths::registrar`].
//!
//! The NI work of each node is a [`crate::device::NiDevice`]; frames between nodes keep
//! the ExaNet three-part framing of [`crate::frame`] plus a link checksum, and by default
//! ([`FabricMode::Sockets`]) travel over point-to-point links between the nodes: a
//! connected pair of Unix stream sockets per pair of nodes, each node holding its own
//! ends, a round's frames towards one peer in one `write` (see `src/emu/link.rs`).
//! [`FabricMode::InProcess`] (`--fabric in-process`) hands them over inside the fabric
//! thread instead, which is faster and meant for benchmarks of the driver side only; every
//! fault works in both modes. The fabric thread polls while
//! traffic flows and for [`EmuConfig::spin`] after it (yielding the CPU between passes),
//! then dozes in `ppoll`; a driver's doorbell wakes it through [`wake`] (the pacing is
//! described in `src/emu/fabric.rs`). So a quiet emulator costs almost no CPU (one timed
//! wake-up per 10 ms), and the first doorbell after a quiet spell costs one thread
//! wake-up (tens of microseconds) instead of a poll interval.
//!
//! # Control commands
//!
//! One command per line on `<root>/control` (or `--fault` at start); the answer is one line,
//! `ok ...` or `error <why>`. `<node>` is a node index, `<ep>` an endpoint index or `*`.
//!
//! | command | effect |
//! |---|---|
//! | `ping` | `ok pong` |
//! | `nack <node> <ep> <count> [ring-full\|pdid\|no-ep\|unreachable]` | refuse the next `count` mailbox deliveries |
//! | `xlat <node> <ep> <count>` | fail the next `count` remote RDMA accesses with a translation fault |
//! | `unreachable <node> on\|off` | drop every frame to and from the node |
//! | `latency <us>` | hold every frame `us` microseconds |
//! | `drop <node\|*> <count>` | drop the next `count` frames the node (any node) sends |
//! | `corrupt <node\|*> <count>` | flip a bit in the next `count` frames the node sends (the receiving link discards them) |
//! | `pdid <node> <ep> <value>` | change an endpoint's PDID (management path) |
//! | `enable <node> <ep> on\|off` | enable or disable an endpoint |
//! | `clear` | remove all fault rules and the latency |
//! | `faults` | describe the rules in force |
//! | `stats` | `ok passes P frames F dozes D wakeups W dozing 0\|1 dropped X corrupted C mailbox M rdma_write W read_req Q read_resp R acks A` (fabric thread counters, frames by kind; see [`EmuStats`]) |
//!
//! Lost frames: the NI does not retransmit. A dropped or corrupted frame makes its
//! sender's NI time out after `ack_timeout` and report the message `NACKED/UNREACHABLE` or
//! the RDMA descriptor `UNREACHABLE`; the layer above resends (gsas: the reliability
//! layer). Keep `ack_timeout` short in tests that inject drops.
//!
//! What it is not: a timing model (only the optional fixed latency), nor a multi-host
//! fabric (all nodes are driven by one process and one thread; each holds its own link
//! sockets).
//!
//! Thread safety: [`Emulator`] is `Send`; its threads share only the fault plan (atomics
//! and a mutex) and a command channel.

mod fabric;
mod link;
mod logger;

pub use exanet::emu::{EmuPaths, wake};

pub use logger::init_logger;

/// Installs SIGTERM/SIGINT handlers that make [`terminated`] return true.
pub fn install_termination_handlers() -> io::Result<()> {
    gsas_sys::event::install_termination_handlers()
}

/// Whether SIGTERM or SIGINT arrived since [`install_termination_handlers`].
pub fn terminated() -> bool {
    gsas_sys::event::signalled()
}

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};
use uio_driver::{MapInfo, fabricate};

use crate::device::{DeviceConfig, EpMaps, NiDevice};
use crate::fault::FaultPlan;
use crate::io::DevMem;
use crate::regs::{MAP_NAMES, MAP_SIZES, nack};
use fabric::{EpIo, Fabric, FabricCmd, FabricCounters, NodeSlot};

/// How frames travel between emulated nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FabricMode {
    /// Every pair of nodes is joined by a pair of connected Unix stream sockets (each node
    /// holds its own ends); frames between nodes cross the kernel (default).
    #[default]
    Sockets,
    /// Frames are handed from device to device inside the fabric thread (no system call).
    InProcess,
}

impl std::str::FromStr for FabricMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sockets" => Ok(FabricMode::Sockets),
            "in-process" => Ok(FabricMode::InProcess),
            other => Err(format!(
                "unknown fabric {other:?} (expected sockets or in-process)"
            )),
        }
    }
}

impl std::fmt::Display for FabricMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FabricMode::Sockets => "sockets",
            FabricMode::InProcess => "in-process",
        })
    }
}

/// Configuration of an emulator run.
#[derive(Clone, Debug)]
pub struct EmuConfig {
    /// Root directory (created; must not hold another emulator's files).
    pub root: PathBuf,
    /// Number of nodes (1..=64).
    pub nodes: usize,
    /// Endpoints per node (1..=64).
    pub eps: usize,
    /// Initial PDID of every endpoint.
    pub pdid: u16,
    /// How long the NI waits for an ack before `UNREACHABLE`.
    pub ack_timeout: Duration,
    /// Fault commands applied at start (control-command syntax).
    pub faults: Vec<String>,
    /// How long the fabric thread keeps polling after the last work before it dozes
    /// (yielding the CPU between passes). Longer means fewer wake-ups between bursts of
    /// traffic, shorter means less CPU burnt after them.
    pub spin: Duration,
    /// How frames travel between nodes.
    pub fabric: FabricMode,
}

impl EmuConfig {
    /// Defaults: 4 nodes (one QFDB), 4 endpoints each, PDID 1, 1 s ack timeout (generous:
    /// the NI is software on a shared host), 1 ms spin before dozing, socket links.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        EmuConfig {
            root: root.into(),
            nodes: 4,
            eps: 4,
            pdid: 1,
            ack_timeout: Duration::from_secs(1),
            faults: Vec::new(),
            spin: Duration::from_millis(1),
            fabric: FabricMode::Sockets,
        }
    }
}

/// A running emulator (see the module docs).
#[derive(Debug)]
pub struct Emulator {
    paths: EmuPaths,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    faults: Arc<FaultPlan>,
    counters: Arc<FabricCounters>,
}

fn map_file(path: &Path, len: usize) -> io::Result<MmapRaw> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    file.set_len(len as u64)?;
    MmapOptions::new().len(len).map_raw(file.as_raw_fd())
}

struct Ctx {
    nodes: usize,
    eps: usize,
    faults: Arc<FaultPlan>,
    cmds: Sender<FabricCmd>,
    wake: PathBuf,
    counters: Arc<FabricCounters>,
}

/// Counters of the fabric thread (see [`Emulator::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmuStats {
    /// Passes over all devices.
    pub passes: u64,
    /// Frames sent between nodes (acks and responses included; dropped and corrupted
    /// ones too).
    pub frames: u64,
    /// Times the fabric thread went to sleep.
    pub dozes: u64,
    /// Wake-up datagrams it received: doorbells that found it dozing, and the `pdid` and
    /// `enable` commands.
    pub wakeups: u64,
    /// Whether it sleeps right now.
    pub dozing: bool,
    /// Frames dropped by the `drop` fault.
    pub dropped: u64,
    /// Frames discarded by a receiving link (checksum wrong: the `corrupt` fault).
    pub corrupted: u64,
    /// Mailbox (packetizer) messages among `frames`.
    pub mailbox: u64,
    /// RDMA write data packets among `frames`.
    pub rdma_write: u64,
    /// RDMA read requests among `frames`.
    pub read_req: u64,
    /// RDMA read responses among `frames`.
    pub read_resp: u64,
    /// Acknowledgements among `frames` (of mailbox messages, RDMA writes, notifications).
    pub acks: u64,
}

impl EmuStats {
    fn read(c: &FabricCounters) -> EmuStats {
        EmuStats {
            passes: c.passes.load(Ordering::Relaxed),
            frames: c.frames.load(Ordering::Relaxed),
            dozes: c.dozes.load(Ordering::Relaxed),
            wakeups: c.wakeups.load(Ordering::Relaxed),
            dozing: c.dozing.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            corrupted: c.corrupted.load(Ordering::Relaxed),
            mailbox: c.kinds.mailbox.load(Ordering::Relaxed),
            rdma_write: c.kinds.rdma_write.load(Ordering::Relaxed),
            read_req: c.kinds.read_req.load(Ordering::Relaxed),
            read_resp: c.kinds.read_resp.load(Ordering::Relaxed),
            acks: c.kinds.acks.load(Ordering::Relaxed),
        }
    }

    /// Parses the answer of the `stats` control command.
    pub fn parse(answer: &str) -> Option<EmuStats> {
        let mut s = EmuStats::default();
        let mut words = answer.split_whitespace();
        while let (Some(key), Some(value)) = (words.next(), words.next()) {
            let v: u64 = value.parse().ok()?;
            match key {
                "passes" => s.passes = v,
                "frames" => s.frames = v,
                "dozes" => s.dozes = v,
                "wakeups" => s.wakeups = v,
                "dozing" => s.dozing = v != 0,
                "dropped" => s.dropped = v,
                "corrupted" => s.corrupted = v,
                "mailbox" => s.mailbox = v,
                "rdma_write" => s.rdma_write = v,
                "read_req" => s.read_req = v,
                "read_resp" => s.read_resp = v,
                "acks" => s.acks = v,
                _ => return None,
            }
        }
        Some(s)
    }
}

impl std::fmt::Display for EmuStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "passes {} frames {} dozes {} wakeups {} dozing {} dropped {} corrupted {} mailbox {} rdma_write {} read_req {} read_resp {} acks {}",
            self.passes,
            self.frames,
            self.dozes,
            self.wakeups,
            u8::from(self.dozing),
            self.dropped,
            self.corrupted,
            self.mailbox,
            self.rdma_write,
            self.read_req,
            self.read_resp,
            self.acks
        )
    }
}

impl Ctx {
    fn node(&self, word: Option<&str>) -> Result<usize, String> {
        let n: usize = word
            .ok_or("missing node")?
            .parse()
            .map_err(|_| "node must be an index")?;
        if n >= self.nodes {
            return Err(format!("no node {n} (nodes 0..{})", self.nodes));
        }
        Ok(n)
    }
    fn ep(&self, word: Option<&str>) -> Result<Option<u16>, String> {
        match word.ok_or("missing endpoint")? {
            "*" => Ok(None),
            w => {
                let e: usize = w.parse().map_err(|_| "endpoint must be an index or *")?;
                if e >= self.eps {
                    return Err(format!("no endpoint {e} (endpoints 0..{})", self.eps));
                }
                Ok(Some(e as u16))
            }
        }
    }
    fn num(word: Option<&str>, what: &str) -> Result<u64, String> {
        word.ok_or(format!("missing {what}"))?
            .parse()
            .map_err(|_| format!("{what} must be a number"))
    }
    fn on_off(word: Option<&str>) -> Result<bool, String> {
        match word {
            Some("on") => Ok(true),
            Some("off") => Ok(false),
            _ => Err("expected on or off".into()),
        }
    }
    fn send(&self, cmd: FabricCmd) -> Result<(), String> {
        self.cmds
            .send(cmd)
            .map_err(|_| "fabric thread is gone".to_owned())?;
        if let Ok(s) = UnixDatagram::unbound() {
            let _ = s.send_to(&[], &self.wake);
        }
        Ok(())
    }

    /// Executes one control command.
    fn execute(&self, line: &str) -> Result<String, String> {
        let mut w = line.split_whitespace();
        let coord = |n| crate::node_coord(n);
        match w.next() {
            Some("ping") => Ok("pong".into()),
            Some("nack") => {
                let (n, ep) = (self.node(w.next())?, self.ep(w.next())?);
                let count = Self::num(w.next(), "count")? as u32;
                let reason = match w.next() {
                    None | Some("ring-full") => nack::RING_FULL,
                    Some("pdid") => nack::PDID_MISMATCH,
                    Some("no-ep") => nack::NO_SUCH_EP,
                    Some("unreachable") => nack::UNREACHABLE,
                    Some(other) => return Err(format!("unknown NACK reason {other:?}")),
                };
                self.faults.force_nack(coord(n), ep, reason, count);
                Ok(String::new())
            }
            Some("xlat") => {
                let (n, ep) = (self.node(w.next())?, self.ep(w.next())?);
                self.faults
                    .force_xlat_fault(coord(n), ep, Self::num(w.next(), "count")? as u32);
                Ok(String::new())
            }
            Some("unreachable") => {
                let n = self.node(w.next())?;
                self.faults
                    .set_unreachable(coord(n), Self::on_off(w.next())?);
                Ok(String::new())
            }
            Some(cmd @ ("drop" | "corrupt")) => {
                let n = match w.next() {
                    Some("*") => crate::fault::ANY_NODE,
                    word => coord(self.node(word)?),
                };
                let count = Self::num(w.next(), "count")? as u32;
                if cmd == "drop" {
                    self.faults.drop_frames(n, count);
                } else {
                    self.faults.corrupt_frames(n, count);
                }
                Ok(String::new())
            }
            Some("latency") => {
                self.faults
                    .set_latency(Duration::from_micros(Self::num(w.next(), "latency")?));
                Ok(String::new())
            }
            Some("pdid") => {
                let n = self.node(w.next())?;
                let ep = self.ep(w.next())?.ok_or("pdid needs one endpoint")?;
                let pdid =
                    u16::try_from(Self::num(w.next(), "pdid")?).map_err(|_| "pdid is 16 bits")?;
                self.send(FabricCmd::SetPdid { node: n, ep, pdid })?;
                Ok(String::new())
            }
            Some("enable") => {
                let n = self.node(w.next())?;
                let ep = self.ep(w.next())?.ok_or("enable needs one endpoint")?;
                let on = Self::on_off(w.next())?;
                self.send(FabricCmd::SetEnabled { node: n, ep, on })?;
                Ok(String::new())
            }
            Some("clear") => {
                self.faults.clear();
                Ok(String::new())
            }
            Some("faults") => Ok(self.faults.describe()),
            Some("stats") => Ok(EmuStats::read(&self.counters).to_string()),
            Some(other) => Err(format!("unknown command {other:?}")),
            None => Err("empty command".into()),
        }
    }
}

fn control_loop(listener: UnixListener, ctx: Ctx, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        let conn = match listener.accept() {
            Ok((conn, _)) => conn,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut fds = [libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                let _ = gsas_sys::fd::ppoll(&mut fds, Duration::from_millis(100));
                continue;
            }
            Err(e) => {
                log::warn!("control: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
        let mut reader = BufReader::new(&conn);
        let mut line = String::new();
        while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
            let answer = match ctx.execute(line.trim()) {
                Ok(s) if s.is_empty() => "ok".to_owned(),
                Ok(s) => format!("ok {s}"),
                Err(e) => format!("error {e}"),
            };
            log::info!("control: {} -> {answer}", line.trim());
            if writeln!(&conn, "{answer}").is_err() {
                break;
            }
            line.clear();
        }
    }
}

/// With [`FabricMode::Sockets`], the links between every two nodes: `links[n][m]` is node
/// n's end of the link to node m (none to itself); empty otherwise.
fn socket_links(cfg: &EmuConfig) -> io::Result<Vec<Vec<Option<link::LinkEnd>>>> {
    if cfg.fabric != FabricMode::Sockets {
        return Ok(Vec::new());
    }
    // Two descriptors per endpoint (listeners) and one per link end, plus slack.
    let needed = cfg.nodes * cfg.eps * 2 + cfg.nodes * (cfg.nodes - 1) + 64;
    ensure_descriptors(needed as u64)?;
    let mut links: Vec<Vec<Option<link::LinkEnd>>> = (0..cfg.nodes)
        .map(|_| (0..cfg.nodes).map(|_| None).collect())
        .collect();
    let pairs = (0..cfg.nodes).flat_map(|a| (a + 1..cfg.nodes).map(move |b| (a, b)));
    for (a, b) in pairs {
        let (end_a, end_b) = link::link_pair()?;
        links[a][b] = Some(end_a);
        links[b][a] = Some(end_b);
    }
    Ok(links)
}

/// Node `n`: its NI device and, for each endpoint, the register maps (files in the root),
/// the fabricated UIO sysfs entry, the interrupt and management sockets.
fn make_node(
    cfg: &EmuConfig,
    paths: &EmuPaths,
    n: usize,
    faults: &Arc<FaultPlan>,
) -> io::Result<NodeSlot> {
    fs::create_dir_all(paths.node_dir(n))?;
    let mut device = NiDevice::new(
        crate::node_coord(n),
        DeviceConfig {
            ack_timeout_ns: cfg.ack_timeout.as_nanos() as u64,
        },
        Arc::clone(faults),
    );
    let mut eps = Vec::new();
    let sysfs = paths.node_dir(n).join("sys/class/uio");
    for k in 0..cfg.eps {
        let dir = paths.endpoint_dir(n, k);
        fs::create_dir_all(&dir)?;
        let mut maps = Vec::new();
        let mut infos = Vec::new();
        for (m, size) in MAP_SIZES.iter().enumerate() {
            maps.push(map_file(&dir.join(format!("map{m}")), *size)?);
            infos.push(MapInfo {
                index: m,
                name: Some(MAP_NAMES[m].to_owned()),
                addr: 0xa001_0000 + 0x1_0000 * k as u64 + 0x2000 * m as u64,
                size: *size as u64,
                offset: 0,
            });
        }
        fabricate::write_device(&sysfs, k as u32, &format!("exanet-ep{k}"), "0.1", &infos)?;
        // SAFETY: each mapping is page aligned, MAP_SIZES[m] bytes long, and is kept
        // alive in `EpIo::_maps` by the fabric thread that uses the views.
        let views: Vec<DevMem> = maps
            .iter()
            .enumerate()
            .map(|(m, map)| unsafe { DevMem::new(map.as_mut_ptr(), MAP_SIZES[m]) })
            .collect();
        device.add_endpoint(
            EpMaps {
                regs: views[0],
                mbox: views[1],
                pktz: views[2],
                rdma: views[3],
            },
            cfg.pdid,
        );
        let irq = gsas_sys::socket::bind_listen(&dir.join("irq"), libc::SOCK_STREAM)?;
        let mgmt = gsas_sys::socket::bind_listen(&dir.join("mgmt"), libc::SOCK_SEQPACKET)?;
        for name in [wake::DOZE_FILE, wake::WAKE_SOCKET] {
            std::os::unix::fs::symlink(Path::new("../..").join(name), dir.join(name))?;
        }
        eps.push(EpIo::new(irq, mgmt, maps));
    }
    Ok(NodeSlot { device, eps })
}

impl Emulator {
    /// Creates the root layout, starts the node and control threads and writes `ready`.
    pub fn start(cfg: EmuConfig) -> io::Result<Emulator> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if !(1..=64).contains(&cfg.nodes) || !(1..=64).contains(&cfg.eps) {
            return Err(invalid(format!(
                "nodes ({}) and eps ({}) must be 1..=64",
                cfg.nodes, cfg.eps
            )));
        }
        let paths = EmuPaths::new(&cfg.root);
        if paths.ready_path().exists() || paths.control_path().exists() {
            return Err(invalid(format!(
                "{} holds another emulator's files",
                cfg.root.display()
            )));
        }
        let probe = paths.endpoint_dir(cfg.nodes - 1, cfg.eps - 1).join("mgmt");
        if !crate::nva::socket_path_ok(&probe) {
            return Err(invalid(format!(
                "root {} is too long for Unix socket paths",
                cfg.root.display()
            )));
        }
        fs::create_dir_all(&cfg.root)?;
        let faults = Arc::new(FaultPlan::new());
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let wake_path = cfg.root.join(wake::WAKE_SOCKET);
        let wake = UnixDatagram::bind(&wake_path)?;
        wake.set_nonblocking(true)?;
        let doze = wake::DozeFlag::create(&cfg.root.join(wake::DOZE_FILE))?;
        let links = socket_links(&cfg)?;
        let nodes = (0..cfg.nodes)
            .map(|n| make_node(&cfg, &paths, n, &faults))
            .collect::<io::Result<Vec<_>>>()?;
        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(FabricCounters::default());
        let ctx = Ctx {
            nodes: cfg.nodes,
            eps: cfg.eps,
            faults: Arc::clone(&faults),
            cmds: tx,
            wake: wake_path,
            counters: Arc::clone(&counters),
        };
        for f in &cfg.faults {
            ctx.execute(f)
                .map_err(|e| invalid(format!("--fault {f:?}: {e}")))?;
        }
        let listener = UnixListener::bind(paths.control_path())?;
        listener.set_nonblocking(true)?;
        let mut topo = format!(
            "nodes {} eps {} pdid {} fabric {}\n",
            cfg.nodes, cfg.eps, cfg.pdid, cfg.fabric
        );
        for n in 0..cfg.nodes {
            topo.push_str(&format!("node {n} coord {:#x}\n", crate::node_coord(n)));
        }
        fs::write(cfg.root.join("topology"), topo)?;
        let fabric = Fabric::new(
            nodes,
            wake,
            doze,
            Arc::clone(&faults),
            Arc::clone(&stop),
            rx,
            epoch,
            cfg.spin,
            Arc::clone(&counters),
            links,
        );
        let mut threads = vec![
            std::thread::Builder::new()
                .name("exanet-fabric".into())
                .spawn(move || fabric.run())?,
        ];
        let stop2 = Arc::clone(&stop);
        threads.push(
            std::thread::Builder::new()
                .name("exanet-control".into())
                .spawn(move || control_loop(listener, ctx, stop2))?,
        );
        fs::write(paths.ready_path(), format!("pid {}\n", std::process::id()))?;
        log::info!(
            "exanet-emu ready at {} ({} nodes x {} endpoints)",
            cfg.root.display(),
            cfg.nodes,
            cfg.eps
        );
        Ok(Emulator {
            paths,
            stop,
            threads,
            faults,
            counters,
        })
    }

    /// The root's paths.
    pub fn paths(&self) -> &EmuPaths {
        &self.paths
    }

    /// The fault plan (the same the control socket changes).
    pub fn faults(&self) -> &FaultPlan {
        &self.faults
    }

    /// The fabric thread's counters now.
    pub fn stats(&self) -> EmuStats {
        EmuStats::read(&self.counters)
    }

    /// Stops every thread and removes the root directory.
    pub fn shutdown(mut self) -> io::Result<()> {
        self.stop_threads();
        fs::remove_dir_all(self.paths.root())
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop_threads();
            let _ = fs::remove_dir_all(self.paths.root());
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` to `needed` (within the hard limit), or explains why
/// the socket fabric cannot be built.
fn ensure_descriptors(needed: u64) -> io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a writable rlimit alive across the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur >= needed {
        return Ok(());
    }
    if lim.rlim_max >= needed {
        let raised = libc::rlimit {
            rlim_cur: needed,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a readable rlimit alive across the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(());
        }
    }
    Err(io::Error::other(format!(
        "the socket fabric needs about {needed} file descriptors, RLIMIT_NOFILE allows {} \
         (hard {}): raise it (ulimit -n), use fewer nodes or endpoints, or --fabric in-process",
        lim.rlim_cur, lim.rlim_max
    )))
}

/// Usage text of the `exanet-emu` binary.
pub const USAGE: &str = "\
usage: exanet-emu --root DIR [options]

Emulates Exanet NI endpoints as UIO devices under DIR (see the exanet::emu docs).

options:
  --root DIR            root directory (required; removed on SIGTERM/SIGINT)
  --nodes N             emulated nodes, 1..=64 (default 4: one QFDB)
  --eps N               endpoints per node, 1..=64 (default 4)
  --pdid P              initial PDID of every endpoint (default 1)
  --ack-timeout-ms T    NI ack timeout before UNREACHABLE (default 1000)
  --spin-us S           keep polling S microseconds after the last work before
                        dozing (default 1000; doorbells wake a dozing emulator)
  --fabric F            sockets (default: a Unix stream socket pair between every
                        two nodes) or in-process (frames handed over inside the
                        emulator)
  --latency-us U        hold every frame U microseconds (default 0)
  --fault CMD           apply a control command at start (repeatable), e.g.
                        --fault 'nack 1 0 5 ring-full' --fault 'unreachable 3 on'
                        --fault 'drop * 3' --fault 'corrupt 2 1'
  --log LEVEL           error|warn|info|debug|trace (default info)
  --help                this text

Control at run time: one command per line on DIR/control, e.g.
  echo 'xlat 2 * 1' | socat - UNIX-CONNECT:DIR/control
";

/// Parses the command line of `exanet-emu` (without the program name) into a config and
/// a log level.
pub fn parse_args(args: &[String]) -> Result<(EmuConfig, log::LevelFilter), String> {
    let mut root = None;
    let mut cfg = EmuConfig::new("");
    let mut level = log::LevelFilter::Info;
    let mut latency = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        let num = |s: String, name: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("{name}: {s:?} is not a number"))
        };
        match a.as_str() {
            "--root" => root = Some(PathBuf::from(val("--root")?)),
            "--nodes" => cfg.nodes = num(val("--nodes")?, "--nodes")? as usize,
            "--eps" => cfg.eps = num(val("--eps")?, "--eps")? as usize,
            "--pdid" => {
                cfg.pdid = u16::try_from(num(val("--pdid")?, "--pdid")?)
                    .map_err(|_| "--pdid is 16 bits")?
            }
            "--ack-timeout-ms" => {
                cfg.ack_timeout =
                    Duration::from_millis(num(val("--ack-timeout-ms")?, "--ack-timeout-ms")?)
            }
            "--latency-us" => latency = Some(num(val("--latency-us")?, "--latency-us")?),
            "--fabric" => cfg.fabric = val("--fabric")?.parse()?,
            "--spin-us" => cfg.spin = Duration::from_micros(num(val("--spin-us")?, "--spin-us")?),
            "--fault" => cfg.faults.push(val("--fault")?),
            "--log" => {
                level = val("--log")?
                    .parse()
                    .map_err(|_| "--log: unknown level".to_owned())?
            }
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    cfg.root = root.ok_or("--root is required")?;
    if let Some(us) = latency {
        cfg.faults.push(format!("latency {us}"));
    }
    Ok((cfg, level))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn cli_parses_and_rejects() {
        let (cfg, level) = parse_args(&args("--root /tmp/x --nodes 2 --eps 3 --pdid 9 --ack-timeout-ms 5 --latency-us 7 --spin-us 30 --fabric in-process --log debug")).unwrap();
        assert_eq!(cfg.fabric, FabricMode::InProcess);
        assert!(
            parse_args(&args("--root x --fabric carrier-pigeon"))
                .unwrap_err()
                .contains("carrier-pigeon")
        );
        assert_eq!((cfg.nodes, cfg.eps, cfg.pdid), (2, 3, 9));
        assert_eq!(cfg.ack_timeout, Duration::from_millis(5));
        assert_eq!(cfg.spin, Duration::from_micros(30));
        assert_eq!(cfg.faults, vec!["latency 7".to_owned()]);
        assert_eq!(level, log::LevelFilter::Debug);
        assert!(
            parse_args(&args("--nodes 2"))
                .unwrap_err()
                .contains("--root")
        );
        assert!(
            parse_args(&args("--root x --bogus"))
                .unwrap_err()
                .contains("--bogus")
        );
        assert!(
            parse_args(&args("--root x --nodes many"))
                .unwrap_err()
                .contains("not a number")
        );
    }

    #[test]
    fn control_commands_are_validated() {
        let (tx, rx) = mpsc::channel();
        let ctx = Ctx {
            nodes: 4,
            eps: 2,
            faults: Arc::new(FaultPlan::new()),
            cmds: tx,
            wake: PathBuf::from("/nonexistent"),
            counters: Arc::new(FabricCounters::default()),
        };
        assert_eq!(ctx.execute("ping").unwrap(), "pong");
        ctx.execute("nack 1 * 2 pdid").unwrap();
        assert_eq!(ctx.faults.take_nack(0x1000, 1), Some(nack::PDID_MISMATCH));
        ctx.execute("unreachable 3 on").unwrap();
        assert!(ctx.faults.is_unreachable(0x3000));
        assert!(ctx.execute("nack 9 0 1").unwrap_err().contains("no node 9"));
        assert!(
            ctx.execute("nack 1 5 1")
                .unwrap_err()
                .contains("no endpoint 5")
        );
        assert!(
            ctx.execute("nack 1 0 1 weird")
                .unwrap_err()
                .contains("weird")
        );
        assert!(
            ctx.execute("frobnicate")
                .unwrap_err()
                .contains("unknown command")
        );
        ctx.execute("pdid 1 1 5").unwrap();
        assert!(matches!(
            rx.try_recv(),
            Ok(FabricCmd::SetPdid {
                node: 1,
                ep: 1,
                pdid: 5
            })
        ));
        assert!(
            ctx.execute("faults")
                .unwrap()
                .contains("unreachable=[0x3000]")
        );
        ctx.counters.frames.store(12, Ordering::Relaxed);
        ctx.counters.dozing.store(true, Ordering::Relaxed);
        let stats = EmuStats::parse(&ctx.execute("stats").unwrap()).unwrap();
        assert_eq!((stats.frames, stats.dozing, stats.wakeups), (12, true, 0));
        assert_eq!(EmuStats::parse("frames x"), None);
        ctx.execute("drop * 2").unwrap();
        ctx.execute("corrupt 2 1").unwrap();
        assert!(ctx.faults.take_corrupt(0x2000) && !ctx.faults.take_corrupt(0x2000));
        assert!(ctx.faults.take_drop(0x1000) && ctx.faults.take_drop(0x3000));
        assert!(!ctx.faults.take_drop(0x1000));
        assert!(ctx.execute("drop 7 1").unwrap_err().contains("no node 7"));
    }
}
