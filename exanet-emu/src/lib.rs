//! exanet-emu: the emulated Exanet NI, apart from the driver (crate `exanet`).
//!
//! What it is:
//! * [`engine`]: the NI device state machine at register level ([`engine::NodeEngine`]),
//!   shared by the in-process model and the emulator;
//! * [`model`]: [`Model`], the in-process deterministic NI for unit tests (step mode, fault
//!   hooks), a `RegIo` backend of the driver;
//! * [`emu`]: the `exanet-emu` emulator (UIO devices under a root directory, nodes joined
//!   pairwise by Unix stream socket links carrying ExaNet-framed packets with a link
//!   checksum, all nodes driven by one adaptive fabric thread, doorbell wake-ups, fault
//!   injection: NACKs, translation faults, dropped, corrupted and delayed frames,
//!   unreachable nodes), and the `exanet-emu` binary;
//! * [`fault`]: the fault plan both consult.
//!
//! What it is not: the driver a PE runs (crate `exanet`; its `exanet::emu` is the driver's
//! side of this emulator). A PE or a daemon never links this crate: the emulator is a
//! separate process, the model a test backend.
//!
//! Thread safety: [`Model`] is single-threaded (`!Send`); the emulator runs one fabric
//! thread for all its nodes plus a control thread.
//!
//! # Example
//!
//! Two endpoints of the in-process model exchange a message and an RDMA write:
//!
//! ```
//! use exanet_emu::model::{ModelConfig, ModelFabric};
//! use exanet::nva::{MemSegment, Registrar};
//! use exanet::{Dest, DriverConfig, Endpoint, RdmaDesc, RdmaOp};
//!
//! let fabric = ModelFabric::new(ModelConfig::default());
//! let mut a = Endpoint::open(fabric.endpoint(0, 0), DriverConfig::default()).unwrap();
//! let mut b = Endpoint::open(fabric.endpoint(1, 0), DriverConfig::default()).unwrap();
//! a.try_send(b.info().dest(), b"hello", 0).unwrap();
//! assert_eq!(b.recv().unwrap().data(), b"hello");
//!
//! let (src, dst) = (MemSegment::create("a", 4096).unwrap(), MemSegment::create("b", 4096).unwrap());
//! src.write(0, &[7u8; 300]).unwrap();
//! let src_nva = fabric.registrar(0, 0).register(&src).unwrap();
//! let dst_nva = fabric.registrar(1, 0).register(&dst).unwrap();
//! let desc = RdmaDesc { op: RdmaOp::Write, flags: 0, len: 300, local: src_nva, remote: dst_nva,
//!                       dest: b.info().dest(), cookie: 1 };
//! a.rdma_post(0, &desc).unwrap();
//! let mut status = None;
//! a.rdma_poll(0, |c| status = Some(c.status));
//! assert_eq!(status, Some(0));
//! let mut out = [0u8; 300];
//! dst.read(0, &mut out).unwrap();
//! assert_eq!(out, [7u8; 300]);
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod emu;
pub mod engine;
pub mod fault;
pub mod model;

pub use model::Model;

// The driver's modules under the names the moved emulator modules use (`crate::regs`, ...).
use exanet::{frame, io, node_coord, nva, regs};
