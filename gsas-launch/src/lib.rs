//! gsas-launch: starting gsas jobs, and the node daemon.
//!
//! **What it is.**
//!
//! * [`oshrun`]: `oshrun`/`gshrun`, which starts a job on this machine with its own
//!   service thread and a PMI-1 server, or across the nodes of a cluster file with their
//!   daemons, or through `srun` inside a Slurm allocation, and ends it on the first failure;
//! * [`pmi`]: the PMI-1 server the launcher runs (with the client side re-exported);
//! * [`fork`]: remote FORK, how a multi-node launcher has the nodes' daemons start PEs,
//!   authenticated with HMAC-SHA256 under a cluster secret (off unless configured);
//! * [`daemon`]: `gsas-atomicd`, the node's service as a daemon (it hosts the FORK server);
//! * [`info`]: `gsas-info` (`oshmem_info`), what an installation is.
//!
//! The binaries `oshrun`, `gshrun`, `gsas-atomicd` and `gsas-info` are this crate's.
//!
//! **What it is not.** Nothing a PE links: the PE side is `gsas-node`, the service library
//! `gsas-service`. Not a resource manager (the launcher uses the nodes of a cluster file
//! whose daemons run; it picks, binds and queues nothing).

pub mod daemon;
pub mod embedded;
pub mod fork;
pub mod info;
pub mod oshrun;
pub mod pmi;
