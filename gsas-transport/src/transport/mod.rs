//! The std transports: UDP between nodes, shared-memory rings between a PE and its service.
//!
//! What it is: implementations of gsas-core's [`Transport`](gsas_core::transport::Transport)
//! trait over operating-system facilities, and the suite that checks them:
//!
//! * [`udp::UdpTransport`]: datagrams with the 16-byte gsas header, unreliable and
//!   unordered; wrapped in gsas-core's [`Reliable`](gsas_core::reliable::Reliable) for the
//!   remote path;
//! * [`exanet::ExanetLink`]: an Exanet endpoint (real UIO device or `exanet-emu`) with
//!   the job-key header, reliable below but lossy under the runtime's reliability layer;
//! * [`net::NetTransport`]: UDP or Exanet behind one type, what the runtime's services and
//!   PEs put their reliability layer over;
//! * [`reliable::OwnedReliable`]: that reliability layer, owning its peer table and buffers;
//! * [`shmring::ShmRing`]: two single-producer/single-consumer rings in a memfd segment,
//!   reliable and ordered, for a PE and its node's service.
//!
//! Every transport passes the conformance suite of the test kit (`tests/src/conformance.rs`
//! in the workspace's `gsas-tests` crate).
//!
//! What it is not: the choice of transport at run time (config `transport`,
//! `GSAS_TRANSPORT`), or the waiting policy (the [`poll`](crate::poll) module's waiter).
//!
//! Thread-safety: each transport is a single-owner value used through `&mut self` and may
//! be moved between threads (`Send`).
//!
//! ```
//! use gsas_transport::transport::udp::{UdpConfig, UdpPeer, UdpTransport};
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

pub mod exanet;
pub mod net;
pub mod pio;
pub mod reliable;
pub mod shmring;
pub mod udp;
