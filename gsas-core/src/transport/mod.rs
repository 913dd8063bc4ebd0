//! The transport abstraction every gsas transport implements.
//!
//! A transport moves whole packets (datagrams) between *peers*. It is deliberately small,
//! after smoltcp's `phy::Device` and UCX's `uct`: the caller obtains a transmit slot from the
//! transport and writes the packet straight into it (no allocation, no intermediate copy where
//! the hardware allows), and polls for received packets, which are lent to a closure for the
//! duration of the call. [`Capabilities`] tells the layers above what the transport can do.
//!
//! Back-pressure is an explicit [`TransportError::WouldBlock`], never a hidden spin: the caller
//! decides whether to poll, retry or move on (GASNet-EX "immediate" operations).
//!
//! Every use on the per-operation path is statically dispatched: the engines are generic over
//! `T: Transport`. Nothing here is object safe on purpose.
//!
//! Time is handed in by the caller through [`Transport::poll`] as nanoseconds since an
//! arbitrary, monotonic epoch; the core has no clock.

pub mod fault;
pub mod loopback;
pub mod tracer;

/// What a transport can do; constant for the lifetime of a transport instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Capabilities {
    /// Largest packet that travels as one small message (for Exanet, one 64-byte mailbox
    /// slot). Requests and replies up to this size are never fragmented.
    pub max_inline: usize,
    /// Largest packet [`Transport::send`] accepts. Bulk transfers are fragmented to this size.
    pub mtu: usize,
    /// Delivery order guaranteed between one pair of peers.
    pub ordering: Ordering,
    /// Whether every packet sent is delivered exactly once (no loss, no duplicates).
    pub reliable: bool,
    /// The transport can write remote memory without the remote CPU (RDMA write).
    pub rdma_put: bool,
    /// The transport can read remote memory without the remote CPU (RDMA read).
    pub rdma_get: bool,
    /// The NIC can execute atomic operations on remote memory.
    pub atomic_offload: bool,
    /// NIC atomics are coherent with CPU atomics on the same location. When false, every
    /// atomic of a domain must go through the atomic service so that they stay coherent.
    pub atomics_coherent_with_cpu: bool,
}

/// Delivery order between one pair of peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Ordering {
    /// Packets may arrive in any order.
    Unordered,
    /// Packets from one sender to one receiver arrive in the order sent.
    PerPeer,
}

/// Why a transport operation did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TransportError {
    /// No transmit slot is free (or the peer's window is full) right now. Poll and retry.
    WouldBlock,
    /// The packet is larger than [`Capabilities::mtu`].
    TooLarge,
    /// The peer did not answer within the configured deadline.
    Unreachable,
    /// The peer is not known to this transport.
    UnknownPeer,
    /// The transport is closed or failed; the code is transport specific (an errno for the
    /// std transports).
    Failed(i32),
}

impl core::fmt::Display for TransportError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TransportError::WouldBlock => f.write_str("transport busy (would block)"),
            TransportError::TooLarge => f.write_str("packet larger than the transport MTU"),
            TransportError::Unreachable => f.write_str("peer unreachable"),
            TransportError::UnknownPeer => f.write_str("unknown peer"),
            TransportError::Failed(code) => write!(f, "transport failed (code {code})"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TransportError {}

/// A packet transport between peers.
///
/// Implementations must not block in any method: when nothing can be done they return
/// [`TransportError::WouldBlock`] (send) or `Ok(None)` (recv).
pub trait Transport {
    /// How a peer is named (a socket address, an Exanet coordinate and endpoint, an index).
    type Peer: Copy + Eq + core::fmt::Debug;

    /// What this transport can do.
    fn capabilities(&self) -> Capabilities;

    /// Obtains a transmit slot of exactly `len` bytes for `peer`, lets `fill` write the packet
    /// into it, and sends it. `fill` runs only if a slot was obtained; its result is returned.
    ///
    /// Errors: [`TransportError::WouldBlock`] when no slot is free now,
    /// [`TransportError::TooLarge`] when `len` exceeds the MTU.
    fn send<R, F>(&mut self, peer: Self::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R;

    /// Sends one packet made of `head` followed by `body`, as [`send`](Self::send) with a
    /// `fill` that copies both would (same errors; nothing is sent on `WouldBlock`).
    ///
    /// The default does exactly that. A transport that can gather from several buffers
    /// (UDP with `sendmsg`) overrides it to hand both parts to the device without copying
    /// them into its own slot first; the reliability layer sends its kept frames this way.
    fn send_parts(
        &mut self,
        peer: Self::Peer,
        head: &[u8],
        body: &[u8],
    ) -> Result<(), TransportError> {
        self.send(peer, head.len() + body.len(), |buf| {
            let (h, b) = buf.split_at_mut(head.len());
            h.copy_from_slice(head);
            b.copy_from_slice(body);
        })
    }

    /// Sends a packet that may wait, as [`send`](Self::send) otherwise (same errors, same
    /// delivery guarantees). A batching transport may keep it back past
    /// [`flush`](Self::flush) for a short, bounded time, hoping to carry it in one device
    /// send with later packets or acknowledgements to the same peer; a later
    /// [`send`](Self::send) to that peer, or the bound expiring at a
    /// [`poll`](Self::poll), pushes it out. Use it only for packets nobody waits on
    /// urgently (the service's acknowledgements of non-final bulk-write fragments).
    ///
    /// The default is [`send`](Self::send). The reliability layer overrides it (the bound is
    /// its `ack_delay_ns`).
    fn send_lazy<R, F>(
        &mut self,
        peer: Self::Peer,
        len: usize,
        fill: F,
    ) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        self.send(peer, len, fill)
    }

    /// Hands the next received packet, if any, to `f` and returns its result. The slice is
    /// valid only during the call.
    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(Self::Peer, &[u8]) -> R;

    /// Pushes out packets the transport holds back for batching. The default does nothing.
    fn flush(&mut self) -> Result<(), TransportError> {
        Ok(())
    }

    /// Drives the transport's timers (retransmission, deadlines). `now_ns` is monotonic
    /// time in nanoseconds from an arbitrary epoch. The default does nothing.
    fn poll(&mut self, now_ns: u64) -> Result<(), TransportError> {
        let _ = now_ns;
        Ok(())
    }
}
