//! PMI bootstrap: how the processes of a job find each other.
//!
//! What it is: the client every PE uses at start-up ([`Client`]) and the server gsas's
//! launcher runs (`gsas_launch::pmi::Server`), speaking the PMI-1 "simple" wire protocol of MPICH's
//! Hydra: one ASCII line per request or response, `cmd=<name>( <key>=<value>)*`, strictly
//! one request at a time. The client also speaks PMI-2 (length-framed
//! `cmd=<name>;<key>=<value>;` messages) when the launcher offers it, as Slurm's
//! `srun --mpi=pmi2` does. With it a PE learns its rank and the job size, publishes
//! bytes under a key (`put`), waits for everyone (`barrier`), reads what the others
//! published (`get`), and can end the whole job (`abort`). The same client works under
//! `mpiexec.hydra` (MPICH 4.0 and newer token orders), under gsas's launcher, and alone
//! as a singleton.
//!
//! Under a PMIx launcher (`srun --mpi=pmix`, Open MPI's `mpirun`) the same client calls
//! the system's libpmix, loaded at run time.
//!
//! What it is not: a PMI-2 or PMIx server (gsas's launcher serves PMI-1), dynamic process
//! management (`spawn`), or a data channel: a value costs one request per ~470 bytes.
//!
//! Thread-safety: [`Client`] and `gsas_launch::pmi::Server` are `Send` and used from one thread at a time
//! (the runtime keeps the client behind a mutex; the launcher runs the server on its
//! own thread); `ShutdownHandle` is `Send + Sync`. Every blocking wait has a timeout.
//!
//! ```
//! use gsas_node::pmi::{Client, ClientConfig};
//!
//! // No PMI variables: a singleton, rank 0 of 1, with an in-process key-value space.
//! let mut pmi = Client::from_vars(ClientConfig::default(), |_| None)?;
//! let key = format!("shmem-{}-heap", pmi.rank());
//! pmi.kvs_put(&key, &0x7f00_0000_u64.to_le_bytes())?;
//! pmi.barrier()?;
//! let heap = pmi.kvs_get("shmem-0-heap")?.expect("published before the barrier");
//! assert_eq!(heap, 0x7f00_0000_u64.to_le_bytes());
//! assert_eq!(pmi.kvs_get("never-put")?, None);
//! assert_eq!(pmi.node_of_rank()?, Some(vec![0]));
//! pmi.finalize()?;
//! # Ok::<(), gsas_node::pmi::PmiError>(())
//! ```

mod client;
mod error;
mod mapping;
mod pmix;
mod value;
pub mod wire;

pub use client::{
    Client, ClientConfig, Connection, Maxes, PMI2_JOBID_VAR, PROCESS_MAPPING_KEY, Protocol,
};
pub use error::PmiError;
pub use mapping::{Block, ProcessMapping};
