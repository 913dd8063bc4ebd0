//! PMI for the launcher: the client side (from `gsas_node::pmi`, re-exported so that the
//! launcher names one module) and the PMI-1 server that `oshrun` runs for its PEs.
//!
//! What it is not: the client a PE runs (that is `gsas_node::pmi`, which a PE links
//! without this crate).

pub use gsas_node::pmi::*;

mod server;

pub use server::{
    ChildEndpoint, Event, KEYLEN_MAX, KVSNAME_MAX, MAX_KVS_ENTRIES, MAX_PENDING_CONNECTIONS,
    MAX_UNSENT, Server, ServerConfig, ShutdownHandle, Stop, VALLEN_MAX, tcp_env,
};
