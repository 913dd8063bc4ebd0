//! board-config: the description of a gsas cluster and of a job's placement on it.
//!
//! What it is: the types that the atomic-service daemon (`gsas-atomicd`), the launcher
//! (`oshrun`) and the Exanet transport share to know the cluster:
//! * [`Coord`], the 22-bit Exanet node coordinate, and the emulator's index mapping;
//! * [`Node`] (id, name, coordinate, host and UDP port, bind address, control socket, UIO
//!   devices, cores, memory, [`Transport`], board), [`Board`] with the QFDB preset
//!   [`Board::qfdb`], and [`Cluster`] with [`JobDefaults`] and lookups by id, address and
//!   coordinate;
//! * [`place`] and [`Placement`]: ranks in contiguous blocks per node, in node order;
//! * the key table [`keys::KEYS`] (SOS `shmem_env_defs.h` style), from which the loader's
//!   checks, the defaults and the reference `docs/config.md` ([`keys::render_markdown`])
//!   come;
//! * [`shmem_env`]: the OpenSHMEM environment variables' table and parser, shared by the
//!   library and the launcher;
//! * with the `std` feature (on by default): [`Cluster::load`] and
//!   [`Cluster::from_toml_str`], which report errors as `file:line: key: reason`.
//!
//! What it is not: it does no I/O and reads no environment outside [`Cluster::load`]; it
//! resolves no host names and starts nothing. Command-line and environment overrides
//! (`SHMEM_SYMMETRIC_SIZE`, `oshrun --ppn`) are applied by the callers to the plain values
//! they get from here.
//!
//! `no_std`: without the `std` feature the crate needs only `alloc` (`String`, `Vec`,
//! `BTreeMap`); everything except TOML loading and `std::error::Error` impls is available.
//!
//! Thread safety: every type is plain data without interior mutability (`Send + Sync`);
//! a [`Cluster`] is immutable once built and can be shared by reference or `Arc`.
//!
//! ```
//! use board_config::{Board, Cluster, Coord, JobDefaults};
//!
//! // One QFDB: four Exanet nodes at fpga 0..=3 of board coordinate 0.0.0.x.0.
//! let (board, nodes) = Board::qfdb(0, Coord::new(0, 0, 0, 0, 0)?, 0, "qfdb0-f{fpga}")?;
//! let cluster = Cluster::new("bench", JobDefaults::default(), nodes.to_vec(), vec![board])?;
//! assert_eq!(cluster.node_by_coord("0.0.0.2.0".parse()?).map(|n| n.host.as_str()), Some("qfdb0-f2"));
//!
//! // Ten PEs: nodes 0 and 1 get three each, nodes 2 and 3 two each.
//! let placement = cluster.place(10, None)?;
//! assert_eq!(placement.pes_of(1), Some(3..6));
//! assert_eq!((placement.node_of(9), placement.local_rank(9)), (Some(3), Some(1)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod board;
pub mod cluster;
pub mod coord;
pub mod keys;
#[cfg(feature = "std")]
pub mod load;
pub mod node;
pub mod placement;
pub mod shmem_env;
pub mod size;
pub mod validate;

pub use board::{Board, BoardKind, PresetError};
pub use cluster::{Cluster, JobDefaults};
pub use coord::{Coord, CoordError};
pub use keys::KeyPath;
#[cfg(feature = "std")]
pub use load::{ConfigError, ErrorKind};
pub use node::{Node, Transport, UnknownWord};
pub use placement::{Placement, PlacementError, place};
pub use size::{ByteSize, SizeError, parse_size};
pub use validate::ValidationError;
