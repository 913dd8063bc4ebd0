//! The node's service as a thread of the PE that starts it, for Rust programs that link
//! the service library: [`start_in_process`], a starter for
//! [`gsas_node::node_service::set_service_starter`].
//!
//! What it is: the alternative to the default `gsas-atomicd --private` child process
//! when no service runs for a PE's node; nothing to find or exec (a Rust program run
//! without an installed gsas, a test binary). What it is not: for libshmem (a C program's
//! PE links no service code and uses the default). Thread-safety: the service runs on
//! its own thread; the handle is `Send`.

use std::path::Path;

use gsas_node::node_service::{NodeService, NodeServiceConfig};
use gsas_service::{Service, ServiceConfig, ServiceThread, UidPolicy};

/// Starts the node's service on a thread of this process (only this user's PEs, socket
/// mode 0600).
pub fn start_in_process(cfg: &NodeServiceConfig) -> Result<Box<dyn NodeService>, String> {
    let mut scfg = ServiceConfig::new(cfg.node, cfg.udp_bind, cfg.socket.clone());
    scfg.name = cfg.name.clone();
    scfg.uid_policy = UidPolicy::SameUser;
    scfg.udp_mtu = cfg.udp_mtu;
    scfg.deadline = cfg.deadline;
    scfg.spin = cfg.spin;
    scfg.sched_slice = cfg.sched_slice;
    scfg.memory_limit = cfg.memory_limit;
    scfg.exanet = cfg.exanet.clone();
    let thread = Service::bind(scfg)
        .and_then(Service::spawn)
        .map_err(|e| e.to_string())?;
    Ok(Box::new(InProcess(thread)))
}

/// A service thread of this process.
struct InProcess(ServiceThread);

impl NodeService for InProcess {
    fn socket_path(&self) -> &Path {
        self.0.socket_path()
    }

    fn stop(self: Box<Self>) -> Result<(), String> {
        self.0.stop().map_err(|e| e.to_string())
    }
}
