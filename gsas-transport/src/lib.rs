//! gsas-transport: the transports of the gsas std runtime and the layers every PE and
//! service runs under them.
//!
//! **What it is.**
//!
//! * the transports, implementations of gsas-core's
//!   [`Transport`](gsas_core::transport::Transport) trait over operating-system
//!   facilities, each a single-owner value used through `&mut self` (`Send`), each passing
//!   the conformance suite of the test kit (`tests/src/conformance.rs` in the workspace's
//!   `gsas-tests` crate):
//!   - [`udp::UdpTransport`]: datagrams with the 16-byte gsas header, unreliable and
//!     unordered; wrapped in gsas-core's [`Reliable`](gsas_core::reliable::Reliable) for
//!     the remote path;
//!   - [`exanet::ExanetLink`]: an Exanet endpoint (real UIO device or `exanet-emu`) with
//!     the job-key header, reliable below but lossy under the runtime's reliability layer;
//!   - [`net::NetTransport`]: UDP or Exanet behind one type, what the runtime's services
//!     and PEs put their reliability layer over;
//!   - [`reliable::OwnedReliable`]: that reliability layer, owning its peer table and
//!     buffers;
//!   - [`shmring::ShmRing`]: two single-producer/single-consumer rings in a memfd segment,
//!     reliable and ordered, for a PE and its node's service;
//!   - [`pio`]: the PIO path over Exanet (a packet that fits one mailbox message travels
//!     as that message, outside the reliability layer);
//! * [`shm`]: memfd segments, descriptor passing, the data-segment remap, the engine's
//!   memory access;
//! * [`bell`] (doorbells between a service and its PEs), [`watched`] (copies of memory that
//!   another party watches), [`poll`] (the spin-yield-block waiter);
//! * [`config`] (the table of `GSAS_*` variables) and [`log`] (the logger).
//!
//! **What it is not.** Not the service (`gsas-service`), the node client (`gsas-node`) or
//! the launcher (`gsas-launch`); not the system-call wrappers (`gsas-sys`); not the choice
//! of transport at run time (config `transport`, `GSAS_TRANSPORT`).
//!
//! ```
//! use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};
//! use gsas_core::reliable::{Config, HashIndex, PeerSlot, Reliable, buffer_len};
//! use gsas_core::transport::Transport;
//!
//! // The remote path: the reliability layer over UDP.
//! let udp = UdpTransport::bind("127.0.0.1:0".parse().unwrap(), UdpConfig::default())?;
//! let mtu = udp.capabilities().mtu;
//! let mut peers = [const { PeerSlot::<UdpPeer, 16>::new() }; 4];
//! let mut buffers = vec![0u8; buffer_len(mtu, mtu, 4 * 16)];
//! let link: Reliable<'_, _, 16, HashIndex<UdpPeer, 8>> =
//!     Reliable::new(udp, Config::new(1), &mut peers, &mut buffers).unwrap();
//! assert!(link.capabilities().reliable);
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! **Thread safety.** Each transport is a single-owner value (`Send`); the other types
//! document their own contract.

pub mod bell;
pub mod config;
pub mod exanet;
pub mod log;
pub mod net;
pub mod pio;
pub mod poll;
pub mod reliable;
pub mod shm;
pub mod shmring;
pub mod udp;
pub mod watched;

/// `eprintln!` in one write: the line is formatted first and written whole. Standard
/// error is unbuffered, and `eprintln!` writes its pieces one by one, so lines of the
/// launcher and of its PEs, which share the pipe, came out interleaved mid-line
/// (`oshrunpe2[10048] error: ...` then `: PE 3 ... aborted the job`).
#[macro_export]
macro_rules! eprintln_whole {
    ($($arg:tt)*) => {{
        let mut line = ::std::format!($($arg)*);
        line.push('\n');
        $crate::log::write_stderr(line.as_bytes());
    }};
}
