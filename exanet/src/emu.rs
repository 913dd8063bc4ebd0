//! The driver's side of the Exanet emulator (`exanet-emu`, crate `exanet-emu`): the paths
//! of an emulator root and how a driver opens its endpoints ([`EmuPaths`]), and the doorbell
//! wake-up of its dozing fabric thread ([`wake`]).
//!
//! What it is not: the emulator itself (crate `exanet-emu`), which a PE never links.

pub mod wake;

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use uio_driver::{EmuIrq, EmuSource};

use crate::error::OpenError;
use crate::io::Shm;
use crate::nva::EmuRegistrar;
use crate::transport::{ExanetTransport, TransportConfig};

/// Paths of an emulator root and helpers to open its endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmuPaths {
    root: PathBuf,
}

impl EmuPaths {
    /// Paths under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        EmuPaths { root: root.into() }
    }
    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// `<root>/node<i>`.
    pub fn node_dir(&self, node: usize) -> PathBuf {
        self.root.join(format!("node{node}"))
    }
    /// `<root>/node<i>/ep<k>`.
    pub fn endpoint_dir(&self, node: usize, ep: usize) -> PathBuf {
        self.node_dir(node).join(format!("ep{ep}"))
    }
    /// `<root>/control`.
    pub fn control_path(&self) -> PathBuf {
        self.root.join("control")
    }
    /// `<root>/ready`.
    pub fn ready_path(&self) -> PathBuf {
        self.root.join("ready")
    }
    /// The map source of an endpoint.
    pub fn source(&self, node: usize, ep: usize) -> EmuSource {
        EmuSource::new(format!("exanet-ep{ep}"), self.endpoint_dir(node, ep))
    }
    /// Maps an endpoint's registers for the driver.
    pub fn open_shm(&self, node: usize, ep: usize) -> Result<Shm, OpenError> {
        Shm::open(&self.source(node, ep))
    }
    /// Connects to an endpoint's IRQ socket.
    pub fn irq(&self, node: usize, ep: usize) -> Result<EmuIrq, OpenError> {
        let path = self.endpoint_dir(node, ep).join("irq");
        Ok(EmuIrq::connect(
            format!("exanet-ep{ep}"),
            &path,
            Duration::from_secs(5),
        )?)
    }
    /// Connects to an endpoint's registration socket.
    pub fn registrar(&self, node: usize, ep: usize) -> Result<EmuRegistrar, OpenError> {
        Ok(EmuRegistrar::connect(
            &self.endpoint_dir(node, ep).join("mgmt"),
            Duration::from_secs(5),
        )?)
    }
    /// Opens an [`ExanetTransport`] on an endpoint.
    pub fn open_transport(
        &self,
        node: usize,
        ep: usize,
        cfg: TransportConfig,
    ) -> Result<ExanetTransport<Shm, EmuRegistrar>, OpenError> {
        ExanetTransport::new(self.open_shm(node, ep)?, self.registrar(node, ep)?, cfg)
    }
    /// Waits (bounded) until the emulator wrote its `ready` file.
    pub fn wait_ready(&self, timeout: Duration) -> io::Result<()> {
        let start = Instant::now();
        while !self.ready_path().exists() {
            if start.elapsed() > timeout {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "emulator at {} not ready within {timeout:?}",
                        self.root.display()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
    /// Sends one control command and returns the answer line (without `ok `); an
    /// `error ...` answer becomes an error.
    pub fn control(&self, command: &str) -> io::Result<String> {
        let mut s = UnixStream::connect(self.control_path())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        writeln!(s, "{command}")?;
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line)?;
        let line = line.trim_end();
        match line.strip_prefix("ok") {
            Some(rest) => Ok(rest.trim_start().to_owned()),
            None => Err(io::Error::other(format!(
                "emulator refused {command:?}: {line}"
            ))),
        }
    }
}
