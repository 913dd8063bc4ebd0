//! exanet: the Exanet NI driver for gsas: register model, ring driver, transport.
//!
//! What it is: everything between gsas-core's [`Transport`](gsas_core::transport::Transport)
//! and the register contract `exanet-ni-model.md` ("EXA-NI-EMU v0"):
//! * [`regs`]: the four register maps as `#[repr(C)]` blocks of volatile cells with
//!   compile-time offset checks, and every field constant of the model;
//! * [`io`]: the [`RegIo`] access trait with [`Mmio`] (real UIO device memory, `dmb oshst` /
//!   `dmb oshld` device barriers) and [`Shm`] (the emulator's shared maps, release/acquire
//!   atomics);
//! * [`driver`]: the ring driver [`Endpoint`] (packetizer send with NACK retry and
//!   backoff, mailbox receive, RDMA post and in-order completions, notifications,
//!   interrupt or polling mode);
//! * [`ExanetTransport`]: gsas-core's `Transport` over an endpoint (small packets through
//!   packetizer and mailbox, larger ones pulled with RDMA READ), plus direct RDMA for the
//!   runtime;
//! * [`nva`]: network virtual addresses and memory registration (a no-op on hardware, memfd
//!   passing to the emulator);
//! * [`frame`]: the ExaNet three-part framing of packets between nodes;
//! * [`emu`]: the driver's side of the `exanet-emu` emulator (its paths, how to open its
//!   endpoints, the doorbell wake-up).
//!
//! Under gsas-core's reliability layer, open the transport with
//! [`FailurePolicy::Lose`]: an undeliverable packet then counts as a lost datagram, which
//! the layer resends. `docs/exanet.md` describes the emulator, the end-to-end tests and
//! the board bundle.
//!
//! What it is not: a kernel driver (UIO does the kernel part), a NIC atomic engine (gsas
//! does atomics in its service), a model of real ExaNet timing, or the emulator: the
//! emulated NI (engine, fabric, faults, the in-process `Model` backend and the `exanet-emu`
//! binary) is the crate `exanet-emu`, which a PE does not link.
//!
//! Thread safety: an [`Endpoint`] or [`ExanetTransport`] is used by one thread through
//! `&mut self` (`Send` with the `Mmio`/`Shm` backends).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod driver;
pub mod emu;
mod error;
pub mod frame;
pub mod io;
pub mod nva;
mod pace;
pub mod regs;
mod transport;

pub use driver::irq::{Event, IrqError};
pub use driver::{
    DriverConfig, Endpoint, EpInfo, EpStats, Notification, RdmaCompletion, RdmaDesc, RdmaOp,
    RxMessage,
};
pub use error::{Dest, OpenError, RdmaError, RegisterError, SendError, TxFailure};
pub use io::{Map, Mmio, RegIo, Shm, from_device_barrier, to_device_barrier};
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
