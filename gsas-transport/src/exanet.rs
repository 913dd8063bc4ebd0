//! Exanet endpoints for the runtime: where they live ([`ExanetSite`]), the job-key link
//! over one endpoint ([`ExanetLink`]) and the endpoint's interrupt line ([`WakeLine`]).
//!
//! What it is:
//! * [`ExanetSite`]: the Exanet endpoints of one node, either real UIO devices (`exanet-ep<k>`
//!   under `/sys/class/uio`, `/dev/uioN`; the cluster file's `uio_devices`, in endpoint
//!   order) or one node of an `exanet-emu` emulator (`GSAS_EXANET_EMU=<root>`, the emulated
//!   node whose coordinate is the node's `coord`). Endpoint 0 belongs to the node's atomic
//!   service, endpoint `1 + i` to the node's `i`-th PE of a job. [`ExanetSite::open`]
//!   opens one with [`FailurePolicy::Lose`] (losses are left to the reliability layer
//!   above), takes an exclusive lock on it (a second opener gets "endpoint busy") and
//!   checks that the endpoint reports the configured coordinate.
//! * [`ExanetLink`]: gsas-core's `Transport` over an [`ExanetTransport`] whose peers are
//!   [`ExaPeer`]s, `(coord, ep)` plus the job key. Every packet starts with a 16-byte
//!   header (magic `GSX1`, 4 reserved bytes, the job key; the wire view `header`), the counterpart of the UDP
//!   header, so that a service learns which job a request claims to belong to. The
//!   reliability layer's acknowledgements (40 bytes) stay below the 64-byte mailbox limit
//!   with it; data frames are pulled by RDMA whatever their header. A packet of up to
//!   48 bytes bypasses the frames: it travels as one mailbox message with a PIO header
//!   (see [`super::pio`]; [`ExanetLink`] implements its [`Pio`] hooks).
//! * [`WakeLine`]: the endpoint's interrupt as a pollable descriptor (the emulator's IRQ
//!   socket or `/dev/uioN`): [`WakeLine::arm`] before sleeping, [`WakeLine::drain`] after.
//!   The service and every PE sleep on their endpoint's line. The endpoint raises it for
//!   mailbox messages, NACKs and RDMA notifications; pulls in
//!   progress are not announced, so an owner keeps polling while
//!   [`ExanetLink::work_pending`] says so.
//!
//! What it is not: the emulator (crate `exanet`), or a kernel driver.
//!
//! Thread-safety: every type here is a single-owner value used through `&mut self`
//! (`Send`).

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::pio::{self, Pio, PioRx, PioTx};

use exanet::emu::EmuPaths;
use exanet::nva::{EmuRegistrar, SmmuRegistrar};
use exanet::regs::irq;
use exanet::{Dest, ExanetTransport, FailurePolicy, Mmio, Shm, TransportConfig};
use gsas_core::transport::{Capabilities, Transport, TransportError};

/// Bytes of the job-key header in front of every Exanet packet of the runtime.
pub use header::HEADER_LEN;
use header::HeaderRepr;
mod header;

/// Most endpoints a node can have (the model's 10-bit endpoint index).
const MAX_ENDPOINTS: u16 = 1024;

/// Where a node's Exanet endpoints live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExanetSource {
    /// Real UIO devices, by name, in endpoint order (`exanet-ep0` first).
    Uio {
        /// Device names (`name` in sysfs).
        devices: Vec<String>,
    },
    /// Node `node` of the `exanet-emu` emulator under `root`.
    Emulated {
        /// The emulator's root directory.
        root: PathBuf,
        /// The emulated node index.
        node: u16,
    },
}

/// The Exanet endpoints of one node (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExanetSite {
    /// Where the endpoints are.
    pub source: ExanetSource,
    /// The node's 22-bit coordinate, as configured; every endpoint must report it.
    pub coord: u32,
    /// How many endpoints the node has (endpoint 0 is the service's).
    pub endpoints: u16,
}

/// A peer of an [`ExanetLink`]: an endpoint and the job key of the packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExaPeer {
    /// The endpoint.
    pub dest: Dest,
    /// The job key (sent in, and read from, the header).
    pub key: u64,
}

fn show_coord(coord: u32) -> String {
    board_config::Coord::from_raw(coord).map_or_else(|_| format!("{coord:#x}"), |c| c.to_string())
}

impl ExanetSite {
    /// The endpoints of the node with coordinate `coord`: those of the emulator under
    /// `emulator` when given (the emulated node with that coordinate), else the UIO
    /// devices `uio_devices`. Errors name what is missing.
    pub fn resolve(
        coord: u32,
        uio_devices: &[String],
        emulator: Option<&Path>,
    ) -> Result<ExanetSite, String> {
        match emulator {
            Some(root) => ExanetSite::emulated(root, coord),
            None if uio_devices.is_empty() => Err(format!(
                "node {} has no Exanet endpoints: its uio_devices list is empty (or set GSAS_EXANET_EMU to an emulator root)",
                show_coord(coord)
            )),
            None => Ok(ExanetSite {
                source: ExanetSource::Uio {
                    devices: uio_devices.to_vec(),
                },
                coord,
                endpoints: uio_devices.len().min(usize::from(MAX_ENDPOINTS)) as u16,
            }),
        }
    }

    /// The emulated node of coordinate `coord` of the emulator under `root` (read from its
    /// `topology` file).
    pub fn emulated(root: &Path, coord: u32) -> Result<ExanetSite, String> {
        let topo_path = root.join("topology");
        let text = std::fs::read_to_string(&topo_path).map_err(|e| {
            format!(
                "no Exanet emulator at {}: {} ({e}); start `exanet-emu --root {}` first",
                root.display(),
                topo_path.display(),
                root.display()
            )
        })?;
        if !root.join("ready").exists() {
            return Err(format!(
                "the Exanet emulator at {} is not ready (no {})",
                root.display(),
                root.join("ready").display()
            ));
        }
        let bad = || format!("{}: unreadable emulator topology", topo_path.display());
        let mut lines = text.lines();
        let head: Vec<&str> = lines.next().ok_or_else(bad)?.split_whitespace().collect();
        let eps: u16 = match head.as_slice() {
            ["nodes", _, "eps", e, ..] => e.parse().map_err(|_| bad())?,
            _ => return Err(bad()),
        };
        let mut seen = Vec::new();
        for line in lines {
            let w: Vec<&str> = line.split_whitespace().collect();
            if let ["node", i, "coord", c] = w.as_slice() {
                let i: u16 = i.parse().map_err(|_| bad())?;
                let c = u32::from_str_radix(c.trim_start_matches("0x"), 16).map_err(|_| bad())?;
                if c == coord {
                    return Ok(ExanetSite {
                        source: ExanetSource::Emulated {
                            root: root.to_owned(),
                            node: i,
                        },
                        coord,
                        endpoints: eps,
                    });
                }
                seen.push(show_coord(c));
            }
        }
        Err(format!(
            "coordinate mismatch: no node of the Exanet emulator at {} has coordinate {} (its nodes: {})",
            root.display(),
            show_coord(coord),
            seen.join(", ")
        ))
    }

    /// Opens endpoint `ep` for packets of up to `mtu` bytes (header included), with its
    /// interrupt line when `wake` is true.
    pub fn open(
        &self,
        ep: u16,
        mtu: usize,
        wake: bool,
    ) -> Result<(ExanetLink, Option<WakeLine>), String> {
        let here = format!("Exanet endpoint {ep} of node {}", show_coord(self.coord));
        if ep >= self.endpoints {
            return Err(format!(
                "{here} does not exist: the node has {} endpoint(s) (endpoint 0 serves the node's atomic service, endpoint 1 + i the node's i-th PE, so at most {} PE(s) per node)",
                self.endpoints,
                self.endpoints.saturating_sub(1)
            ));
        }
        let cfg = TransportConfig {
            mtu: mtu.clamp(HEADER_LEN + 65, 1 << 20),
            on_failure: FailurePolicy::Lose,
            ..TransportConfig::default()
        };
        let (inner, lock, irq_path) = match &self.source {
            ExanetSource::Emulated { root, node } => {
                let paths = EmuPaths::new(root);
                let (n, k) = (usize::from(*node), usize::from(ep));
                let dir = paths.endpoint_dir(n, k);
                let lock = lock_endpoint(&dir.join("map0"), &here)?;
                let t = paths
                    .open_transport(n, k, cfg)
                    .map_err(|e| format!("{here} ({}): {e}", dir.display()))?;
                (Inner::Emulated(Box::new(t)), lock, dir.join("irq"))
            }
            ExanetSource::Uio { devices } => {
                let name = &devices[usize::from(ep)];
                let dev = uio_driver::UioPaths::system()
                    .find(name)
                    .map_err(|e| format!("{here} (UIO device {name}): {e}"))?;
                let path = dev.dev_path().to_owned();
                let lock = lock_endpoint(&path, &here)?;
                let source = uio_driver::KernelSource::open(dev)
                    .map_err(|e| format!("{here} ({}): {e}", path.display()))?;
                let io = Mmio::open(&source).map_err(|e| format!("{here} ({name}): {e}"))?;
                let t = ExanetTransport::new(io, SmmuRegistrar, cfg)
                    .map_err(|e| format!("{here} ({name}): {e}"))?;
                (Inner::Board(Box::new(t)), lock, path)
            }
        };
        let mut link = ExanetLink {
            inner,
            _lock: lock,
            dropped: 0,
            pio_tx: PioTx::new(pio::fresh_incarnation()),
            pio_rx: PioRx::default(),
            pio_sent: 0,
            pio_received: 0,
            pio_inbox: VecDeque::new(),
        };
        let me = link.local();
        if me.coord != self.coord || me.ep != ep {
            return Err(format!(
                "coordinate mismatch: {here} reports itself as {} (coordinate {}), but the configuration gives coordinate {}",
                me,
                show_coord(me.coord),
                show_coord(self.coord)
            ));
        }
        let line = if wake {
            let line = WakeLine::open(&irq_path)
                .map_err(|e| format!("{here}: interrupt line {}: {e}", irq_path.display()))?;
            link.set_irq_enable(irq::MBOX | irq::TX_NACK | irq::RDMA | irq::FATAL);
            Some(line)
        } else {
            None
        };
        Ok((link, line))
    }
}

/// Takes an exclusive `flock` on `path` (the endpoint's first map or device node).
fn lock_endpoint(path: &Path, what: &str) -> Result<File, String> {
    let f = File::open(path).map_err(|e| format!("{what}: {}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            format!(
                "{what} is busy: another process holds it ({} is locked)",
                path.display()
            )
        } else {
            format!("{what}: locking {}: {e}", path.display())
        });
    }
    Ok(f)
}

enum Inner {
    Emulated(Box<ExanetTransport<Shm, EmuRegistrar>>),
    Board(Box<ExanetTransport<Mmio, SmmuRegistrar>>),
}

/// Runs `$e` with `$t` bound to the transport of either backend (static dispatch).
macro_rules! with_inner {
    ($inner:expr, $t:ident => $e:expr) => {
        match $inner {
            Inner::Emulated($t) => $e,
            Inner::Board($t) => $e,
        }
    };
}

/// gsas-core's `Transport` over one Exanet endpoint, with the job-key header (see the
/// module docs). Holds the endpoint's lock until dropped.
pub struct ExanetLink {
    inner: Inner,
    _lock: File,
    dropped: u64,
    pio_tx: PioTx,
    pio_rx: PioRx,
    /// PIO packets sent and delivered.
    pio_sent: u64,
    pio_received: u64,
    /// PIO packets received (header stripped) and not yet taken by `pio_recv`.
    pio_inbox: VecDeque<(ExaPeer, u8, [u8; pio::MAX_PACKET])>,
}

/// PIO packets held between the mailbox and `pio_recv`: beyond it the link leaves messages
/// in the transport (whose full inbox makes the NI refuse more: back-pressure).
const PIO_INBOX: usize = 64;

impl std::fmt::Debug for ExanetLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExanetLink")
            .field("endpoint", &self.local())
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

impl ExanetLink {
    /// This endpoint as a peer address.
    pub fn local(&self) -> Dest {
        with_inner!(&self.inner, t => t.local_peer())
    }

    /// Packets dropped because they did not carry the runtime's header.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// PIO messages dropped as duplicates (a resend after a lost NI ack) or stragglers.
    pub fn pio_duplicates(&self) -> u64 {
        self.pio_rx.dropped
    }

    /// PIO messages delivered from behind their stream's window of 1024 numbers (refused
    /// with `RING_FULL` while over 1024 later ones were delivered; see [`pio`]).
    pub fn pio_late(&self) -> u64 {
        self.pio_rx.late()
    }

    /// PIO packets sent (posted to the NI) and received (delivered once).
    pub fn pio_counts(&self) -> (u64, u64) {
        (self.pio_sent, self.pio_received)
    }

    /// The counters of the Exanet transport.
    pub fn stats(&self) -> exanet::TransportStats {
        with_inner!(&self.inner, t => t.stats())
    }

    /// Whether the transport has work in progress that no interrupt announces (bulk pulls,
    /// releases to send): keep polling while it does.
    pub fn work_pending(&self) -> bool {
        with_inner!(&self.inner, t => t.work_pending())
    }

    fn set_irq_enable(&mut self, mask: u32) {
        with_inner!(&mut self.inner, t => t.endpoint().set_irq_enable(mask));
    }
}

impl Transport for ExanetLink {
    type Peer = ExaPeer;

    fn capabilities(&self) -> Capabilities {
        let mut c = with_inner!(&self.inner, t => t.capabilities());
        c.mtu -= HEADER_LEN;
        c.max_inline -= HEADER_LEN;
        c
    }

    fn send<R, F>(&mut self, peer: ExaPeer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let with_header = move |buf: &mut [u8]| {
            let (head, body) = buf.split_at_mut(HEADER_LEN);
            HeaderRepr { key: peer.key }.emit(head);
            fill(body)
        };
        with_inner!(&mut self.inner, t => t.send(peer.dest, HEADER_LEN + len, with_header))
    }

    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(ExaPeer, &[u8]) -> R,
    {
        let mut f = Some(f);
        loop {
            if self.pio_inbox.len() >= PIO_INBOX {
                return Ok(None);
            }
            let (pio_rx, pio_inbox) = (&mut self.pio_rx, &mut self.pio_inbox);
            let got = with_inner!(&mut self.inner, t => t.recv(|src, data| {
                if data.get(..2) == Some(&pio::MAGIC[..]) {
                    if let Some(key) = pio_rx.accept(src, data) {
                        let body = &data[pio::HEADER_LEN..];
                        let mut packet = [0u8; pio::MAX_PACKET];
                        packet[..body.len()].copy_from_slice(body);
                        pio_inbox.push_back((ExaPeer { dest: src, key }, body.len() as u8, packet));
                    }
                    return Some(None);
                }
                let Ok(HeaderRepr { key }) = HeaderRepr::parse(data) else {
                    return None;
                };
                let f = f.take().expect("called once per delivered packet");
                Some(Some(f(ExaPeer { dest: src, key }, &data[HEADER_LEN..])))
            }))?;
            match got {
                None => return Ok(None),
                Some(Some(Some(r))) => return Ok(Some(r)),
                Some(Some(None)) => {}
                Some(None) => self.dropped += 1,
            }
        }
    }

    fn poll(&mut self, now_ns: u64) -> Result<(), TransportError> {
        with_inner!(&mut self.inner, t => t.poll(now_ns))
    }
}

impl Pio for ExanetLink {
    #[inline]
    fn pio_fits(&self, _peer: &ExaPeer, len: usize) -> bool {
        len <= pio::MAX_PACKET
    }

    #[inline]
    fn pio_send<R, F>(
        &mut self,
        peer: ExaPeer,
        len: usize,
        deadline: Duration,
        fill: F,
    ) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let tx = &mut self.pio_tx;
        let with_header = move |buf: &mut [u8]| {
            let (head, body) = buf.split_at_mut(pio::HEADER_LEN);
            tx.header(peer.dest, peer.key, head);
            fill(body)
        };
        let out = with_inner!(&mut self.inner, t => t.send_persistent(peer.dest, pio::HEADER_LEN + len, deadline, with_header))?;
        self.pio_sent += 1;
        Ok(out)
    }

    #[inline]
    fn pio_ready(&self) -> bool {
        !self.pio_inbox.is_empty()
    }

    fn pio_recv<R, F>(&mut self, f: F) -> Option<R>
    where
        F: FnOnce(ExaPeer, &[u8]) -> R,
    {
        let (peer, len, packet) = self.pio_inbox.pop_front()?;
        self.pio_received += 1;
        Some(f(peer, &packet[..usize::from(len)]))
    }

    fn pio_lost(&mut self) -> Option<ExaPeer> {
        let lost = with_inner!(&mut self.inner, t => t.take_lost())?;
        log::debug!("exanet: PIO message to {} not delivered: {lost}", lost.dest);
        Some(ExaPeer {
            dest: lost.dest,
            key: self.pio_tx.key_of(lost.dest),
        })
    }

    fn pio_pending(&self) -> bool {
        with_inner!(&self.inner, t => t.tx_pending() > 0)
    }
}

/// An endpoint's interrupt line as a pollable descriptor (see the module docs).
#[derive(Debug)]
pub struct WakeLine {
    fd: OwnedFd,
    socket: bool,
    armed: bool,
    closed: bool,
}

impl WakeLine {
    /// Opens the line at `path`: a Unix stream socket (the emulator's `irq`) or a UIO
    /// device node.
    pub fn open(path: &Path) -> io::Result<WakeLine> {
        use std::os::unix::fs::FileTypeExt;
        let socket = std::fs::metadata(path)?.file_type().is_socket();
        let fd: OwnedFd = if socket {
            let s = UnixStream::connect(path)?;
            s.set_nonblocking(true)?;
            s.into()
        } else {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)?
                .into()
        };
        Ok(WakeLine {
            fd,
            socket,
            armed: false,
            closed: false,
        })
    }

    /// The descriptor to poll for readability (`None` once the line was closed by the
    /// other side, e.g. an emulator that stopped).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        (!self.closed).then(|| self.fd.as_fd())
    }

    /// Re-enables the interrupt (write 1) unless it is enabled already. An event that is
    /// pending keeps the line's level high, so the interrupt then fires at once: no
    /// wake-up is lost between the last look and the sleep.
    pub fn arm(&mut self) {
        if self.armed || self.closed {
            return;
        }
        let word = 1u32.to_ne_bytes();
        // SAFETY: `word` is 4 readable bytes; the descriptor is owned by `self`.
        let n = unsafe {
            if self.socket {
                libc::send(
                    self.fd.as_raw_fd(),
                    word.as_ptr().cast(),
                    4,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            } else {
                libc::write(self.fd.as_raw_fd(), word.as_ptr().cast(), 4)
            }
        };
        if n == 4 {
            self.armed = true;
        } else if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted {
                log::warn!("Exanet interrupt line: enabling failed ({e}); polling instead");
                self.closed = true;
            }
        }
    }

    /// Consumes the interrupts that fired (the line must be armed again before the next
    /// sleep). Returns whether any had.
    pub fn drain(&mut self) -> bool {
        let mut any = false;
        let mut word = [0u8; 4];
        loop {
            // SAFETY: `word` is 4 writable bytes; the descriptor is owned by `self` and
            // non-blocking.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), word.as_mut_ptr().cast(), 4) };
            if n > 0 {
                any = true;
                self.armed = false;
                continue;
            }
            if n == 0 {
                log::warn!("Exanet interrupt line closed by the other side; polling instead");
                self.closed = true;
            } else {
                // A reset connection (the other side closed with our enable unread) stays
                // readable like an end of file: closed too, or its owner would spin.
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted {
                    log::warn!("Exanet interrupt line failed ({e}); polling instead");
                    self.closed = true;
                }
            }
            return any;
        }
    }
}

/// Bound of a sleep while the line cannot be used (closed): the owner polls this often.
pub const POLL_FALLBACK: Duration = Duration::from_millis(1);

/// The Exanet endpoints a service of `node` serves with, if its transport (`GSAS_TRANSPORT`
/// of `env`, else the node's `transport`) is Exanet.
pub fn exanet_site(
    node: &board_config::Node,
    env: &crate::config::RuntimeConfig,
) -> Result<Option<ExanetSite>, String> {
    let exanet = match env.transport {
        Some(kind) => kind == crate::config::TransportKind::Exanet,
        None => node.transport == board_config::Transport::Exanet,
    };
    if !exanet {
        return Ok(None);
    }
    ExanetSite::resolve(
        node.coord.raw(),
        &node.uio_devices,
        env.exanet_emu.as_deref(),
    )
    .map(Some)
    .map_err(|e| format!("node {} ({}): {e}", node.id, node.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_site_errors_name_the_problem() {
        let dir = std::env::temp_dir().join(format!("gsas-exa-site-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let e = ExanetSite::emulated(&dir, 0x1000).unwrap_err();
        assert!(e.contains("no Exanet emulator at"), "{e}");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("topology"),
            "nodes 2 eps 3 pdid 1 fabric sockets\nnode 0 coord 0x0\nnode 1 coord 0x1000\n",
        )
        .unwrap();
        let e = ExanetSite::emulated(&dir, 0x1000).unwrap_err();
        assert!(e.contains("not ready"), "{e}");
        std::fs::write(dir.join("ready"), "pid 1").unwrap();
        let s = ExanetSite::emulated(&dir, 0x1000).unwrap();
        assert_eq!(
            s,
            ExanetSite {
                source: ExanetSource::Emulated {
                    root: dir.clone(),
                    node: 1
                },
                coord: 0x1000,
                endpoints: 3
            }
        );
        let e = ExanetSite::emulated(&dir, 0x2000).unwrap_err();
        assert!(
            e.contains("coordinate mismatch") && e.contains("0.0.0.2.0"),
            "{e}"
        );
        let e = s.open(3, 8192, false).unwrap_err();
        assert!(
            e.contains("has 3 endpoint(s)") && e.contains("at most 2 PE"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        let e = ExanetSite::resolve(0, &[], None).unwrap_err();
        assert!(e.contains("uio_devices list is empty"), "{e}");
    }
}
