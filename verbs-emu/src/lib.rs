//! softverbs: a software RDMA device behind the libibverbs ABI, for running verbs code
//! without an HCA.
//!
//! What it is: this crate builds the C sources in `csrc/` into a shared library named
//! `libibverbs.so.1` (against the system's `<infiniband/verbs.h>`, so every structure has
//! the real layout) and tells programs where it is. A process started with that directory
//! first in `LD_LIBRARY_PATH` loads it instead of rdma-core's library, whatever binding it
//! uses (the `sideway` crate dlopens `libibverbs.so.1`; C programs link it). The device
//! emulates reliable-connected queue pairs between processes of one machine over unix
//! datagram sockets in a rendezvous directory, with a device thread per opened context
//! that executes RDMA WRITE, READ, SEND/RECV and 64-bit atomics on its process's memory.
//! [`docs/verbs.md`](../../docs/verbs.md) lists what it emulates and its limits.
//!
//! What it is not: a driver for real hardware, a transport of gsas, or a fabric between
//! machines (the sockets are local).
//!
//! Thread safety: [`Node`] is plain data; the device itself is thread-safe the way
//! libibverbs is (one lock per context, one per completion queue).
//!
//! ```
//! use std::process::Command;
//! use verbs_emu::Node;
//!
//! // Two emulated nodes sharing one rendezvous directory.
//! let dir = std::env::temp_dir().join("softverbs-doc");
//! let mut a = Command::new("ibv_devinfo");
//! Node::new(&dir, 1).apply(&mut a);
//! let mut b = Command::new("ibv_devinfo");
//! Node::new(&dir, 2).faults("drop-every=50").apply(&mut b);
//! assert!(a.get_envs().any(|(k, _)| k == "LD_LIBRARY_PATH"));
//!
//! // Or one environment for the processes of two emulated nodes (a job started by one
//! // launcher): softverbs0 (LID 1) and softverbs1 (LID 2), each process opening its node's.
//! let mut job = Command::new("oshrun");
//! Node::new(&dir, 1).devices(2).device_faults(1, "unreachable").apply(&mut job);
//! assert!(job.get_envs().any(|(k, v)| k == "SOFTVERBS_DEVICES" && v == Some("2".as_ref())));
//! ```

pub mod roles;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding the built `libibverbs.so.1`.
pub fn library_dir() -> &'static Path {
    Path::new(env!("SOFTVERBS_LIB_DIR"))
}

/// The variable naming the RDMA device the hardware tests run on.
pub const HW_DEVICE: &str = "GSAS_VERBS_TEST_DEVICE";

/// The device a hardware test runs on, from [`HW_DEVICE`]. Panics when the variable is unset
/// or when the `libibverbs.so.1` loaded is the software device, so that a hardware test never
/// passes without hardware.
pub fn hardware_device() -> String {
    let name = std::env::var(HW_DEVICE).unwrap_or_else(|_| {
        panic!("{HW_DEVICE} must name the RDMA device to test (see ibv_devices)")
    });
    assert!(
        !loaded_is_software(),
        "libibverbs.so.1 is the software device: unset LD_LIBRARY_PATH"
    );
    name
}

/// Whether the `libibverbs.so.1` loaded in this process is the software device (false when
/// none is loaded). Hardware tests call it to refuse passing on the emulation.
pub fn loaded_is_software() -> bool {
    // SAFETY: RTLD_NOLOAD only looks up an already loaded library; dlsym on its handle
    // reads its symbol table.
    unsafe {
        let h = libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_NOLOAD,
        );
        !h.is_null() && !libc::dlsym(h, c"softverbs_counters".as_ptr()).is_null()
    }
}

/// The device's variables (read once, when the process first lists devices).
pub mod var {
    /// How many devices the process lists (default 1, at most 16): device i is
    /// `softverbs<i>` with LID [`LID`] + i and GID `fe80::<its LID>`, an emulated node each.
    pub const DEVICES: &str = "SOFTVERBS_DEVICES";
    /// Device name of a single device (default `softverbs0`).
    pub const DEVICE: &str = "SOFTVERBS_DEVICE";
    /// The port's LID, the emulated node's identity (default 1).
    pub const LID: &str = "SOFTVERBS_LID";
    /// The active port's GID table: IPv6 addresses, comma-separated (default one GID,
    /// `fe80::<lid>`).
    pub const GID: &str = "SOFTVERBS_GID";
    /// The active port (default 1); ports 1..PORT-1 exist and are down.
    pub const PORT: &str = "SOFTVERBS_PORT";
    /// The rendezvous directory of the queue pairs' sockets (default `/tmp/softverbs-<uid>`).
    pub const DIR: &str = "SOFTVERBS_DIR";
    /// The atomic capability reported: `none`, `hca` or `glob` (default `glob`).
    pub const ATOMIC: &str = "SOFTVERBS_ATOMIC";
    /// Lower bound of the retransmission timeout in milliseconds (default 50).
    pub const MIN_TIMEOUT_MS: &str = "SOFTVERBS_MIN_TIMEOUT_MS";
    /// How long, in milliseconds, a responder that has not read what a queue pair sent
    /// (its process alive but not running) is waited for before the queue pair's timeouts
    /// count against its retry count again (default 60000).
    pub const LATE_LIMIT_MS: &str = "SOFTVERBS_LATE_LIMIT_MS";
    /// Fault injection: `drop=N`, `drop-every=K`, `rkey=N`, `unreachable`, `delay-us=U`.
    pub const FAULTS: &str = "SOFTVERBS_FAULTS";

    /// The fault injection of device `index` alone (with [`DEVICES`]), instead of
    /// [`FAULTS`]: `SOFTVERBS_FAULTS_<index>`.
    pub fn faults_of(index: u32) -> String {
        format!("{FAULTS}_{index}")
    }
}

/// `LD_LIBRARY_PATH` with [`library_dir`] first (then the current value, if any): what a
/// process needs at start to load the software device.
pub fn library_path() -> OsString {
    let mut path = OsString::from(library_dir());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    path
}

/// One emulated node: the environment that makes a process use the software device as
/// that node.
#[derive(Clone, Debug)]
pub struct Node {
    dir: PathBuf,
    lid: u16,
    extra: Vec<(String, String)>,
}

impl Node {
    /// The node with LID `lid` (1..=49151) whose queue pairs meet in `dir` (at most 70
    /// bytes: it holds socket paths).
    pub fn new(dir: impl Into<PathBuf>, lid: u16) -> Node {
        Node {
            dir: dir.into(),
            lid,
            extra: Vec::new(),
        }
    }

    /// Fault injection (see [`var::FAULTS`]).
    pub fn faults(self, spec: &str) -> Node {
        self.with(var::FAULTS, spec)
    }

    /// Lists `n` devices, `softverbs0` (LID `lid`) to `softverbs<n-1>` (LID `lid + n - 1`):
    /// several emulated nodes in one environment ([`var::DEVICES`]).
    pub fn devices(self, n: u32) -> Node {
        self.with(var::DEVICES, n.to_string())
    }

    /// Fault injection on device `index` alone ([`var::faults_of`]).
    pub fn device_faults(mut self, index: u32, spec: &str) -> Node {
        self.extra.push((var::faults_of(index), spec.to_owned()));
        self
    }

    /// Sets another of the device's variables ([`var`]).
    pub fn with(mut self, var: &'static str, value: impl Into<String>) -> Node {
        self.extra.push((var.to_owned(), value.into()));
        self
    }

    /// The variables [`Node::apply`] sets, in order.
    pub fn env(&self) -> Vec<(String, OsString)> {
        let mut v = vec![
            ("LD_LIBRARY_PATH".to_owned(), library_path()),
            (var::DIR.to_owned(), self.dir.clone().into_os_string()),
            (var::LID.to_owned(), self.lid.to_string().into()),
        ];
        v.extend(self.extra.iter().map(|(k, x)| (k.clone(), x.into())));
        v
    }

    /// Makes `cmd` load the software device as this node.
    pub fn apply(&self, cmd: &mut Command) {
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
    }
}
