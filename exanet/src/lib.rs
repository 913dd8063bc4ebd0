//! exanet: the Exanet NI for gsas: register model, ring driver, transport, emulator.
//!
//! What it is: everything between gsas-core's [`Transport`](gsas_core::transport::Transport)
//! and the register contract `exanet-ni-model.md` ("EXA-NI-EMU v0"):
//! * [`regs`]: the four register maps as `#[repr(C)]` blocks of volatile cells with
//!   compile-time offset checks, and every field constant of the model;
//! * [`io`]: the [`RegIo`] access trait with [`Mmio`] (real UIO device memory, `dmb oshst` /
//!   `dmb oshld` device barriers), [`Shm`] (the emulator's shared maps, release/acquire
//!   atomics) and [`Model`] (an in-process deterministic NI for unit tests, with step mode
//!   and fault hooks);
//! * [`driver`]: the ring driver [`Endpoint`] (packetizer send with NACK retry and
//!   backoff, mailbox receive, RDMA post and in-order completions, notifications,
//!   interrupt or polling mode);
//! * [`ExanetTransport`]: gsas-core's `Transport` over an endpoint (small packets through
//!   packetizer and mailbox, larger ones pulled with RDMA READ), plus direct RDMA for the
//!   runtime;
//! * [`nva`]: network virtual addresses and memory registration (a no-op on hardware, memfd
//!   passing to the emulator);
//! * [`emu`]: the `exanet-emu` emulator (UIO devices under a root directory, NI engine at
//!   register level, nodes joined pairwise by Unix stream socket links carrying
//!   ExaNet-framed packets with a link checksum, all nodes driven by one adaptive fabric
//!   thread, doorbell wake-ups, fault injection: NACKs, translation faults, dropped,
//!   corrupted and delayed frames, unreachable nodes).
//!
//! Under gsas-core's reliability layer, open the transport with
//! [`FailurePolicy::Lose`]: an undeliverable packet then counts as a lost datagram, which
//! the layer resends. `docs/exanet.md` describes the emulator, the end-to-end tests and
//! the board bundle.
//!
//! What it is not: a kernel driver (UIO does the kernel part), a NIC atomic engine (gsas
//! does atomics in its service), or a model of real ExaNet timing.
//!
//! Thread safety: an [`Endpoint`] or [`ExanetTransport`] is used by one thread through
//! `&mut self` (`Send` with the `Mmio`/`Shm` backends, `!Send` with `Model`). The emulator
//! runs one fabric thread for all its nodes plus a control thread.
//!
//! # Example
//!
//! Two endpoints of the in-process model exchange a message and an RDMA write:
//!
//! ```
//! use exanet::io::model::{ModelConfig, ModelFabric};
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

pub mod driver;
pub mod emu;
pub mod engine;
mod error;
pub mod fault;
pub mod frame;
pub mod io;
pub mod nva;
mod pace;
pub mod regs;
mod sys;
mod transport;

pub use driver::irq::{Event, IrqError};
pub use driver::{
    DriverConfig, Endpoint, EpInfo, EpStats, Notification, RdmaCompletion, RdmaDesc, RdmaOp,
    RxMessage,
};
pub use error::{Dest, OpenError, RdmaError, RegisterError, SendError, TxFailure};
pub use io::{Map, Mmio, Model, RegIo, Shm, from_device_barrier, to_device_barrier};
pub use transport::{
    ExanetPeer, ExanetTransport, FailurePolicy, RdmaHandle, TransportConfig, TransportStats,
};

/// The coordinate of emulated node `idx` (model section 1): `fpga = idx % 4`,
/// `x = (idx / 4) % 16`, `y = (idx / 64) % 16`, `z = (idx / 1024) % 16`, `tor = 0`.
pub const fn node_coord(idx: usize) -> u32 {
    let fpga = (idx % 4) as u32;
    let x = ((idx / 4) % 16) as u32;
    let y = ((idx / 64) % 16) as u32;
    let z = ((idx / 1024) % 16) as u32;
    x | y << 4 | z << 8 | fpga << 12
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_coords_follow_the_model() {
        assert_eq!(super::node_coord(0), 0);
        assert_eq!(super::node_coord(1), 0x1000);
        assert_eq!(super::node_coord(3), 0x3000);
        assert_eq!(super::node_coord(4), 0x0001);
        assert_eq!(super::node_coord(69), 0x1011);
    }
}
