//! An in-memory network of `N` endpoints: the loopback test double.
//!
//! What it is: a [`LoopbackHub`] owns one bounded packet queue per endpoint, carved out of
//! caller-provided storage (no allocation). [`LoopbackHub::endpoint`] hands out
//! [`LoopbackEndpoint`] handles that implement [`Transport`] with `Peer = usize`, the index of
//! the destination endpoint. A packet sent to endpoint `i` is appended to `i`'s queue; a full
//! queue makes the sender see [`TransportError::WouldBlock`] (back-pressure, never a drop).
//! After smoltcp's `phy::Loopback`, extended to several endpoints.
//!
//! What it is not: a model of a real network. It never loses, duplicates or reorders a packet
//! (wrap an endpoint in [`FaultInjector`](super::fault::FaultInjector) for that), has no timing,
//! and the [`Capabilities`] it reports are whatever [`LoopbackConfig`] says (reporting
//! [`Ordering::Unordered`] is allowed: in-order delivery is one possible unordered delivery).
//!
//! Thread-safety: the hub is `Sync`; every queue sits behind its own `spin::Mutex`, so
//! endpoints may live on different threads. No method waits for a lock: when a queue is busy
//! because another thread is using it, `send` returns `WouldBlock` and `recv` returns
//! `Ok(None)`, as for a full or an empty queue. Several handles for the same endpoint index may
//! exist; they share its receive queue.
//!
//! ```
//! use gsas_core::transport::Transport;
//! use gsas_core::transport::loopback::{LoopbackConfig, LoopbackHub};
//!
//! let mut storage = [0u8; 4096];
//! let hub = LoopbackHub::<2>::new(LoopbackConfig::new(256), &mut storage).unwrap();
//! let (mut a, mut b) = (hub.endpoint(0).unwrap(), hub.endpoint(1).unwrap());
//! a.send(1, 3, |buf| buf.copy_from_slice(b"abc")).unwrap();
//! let got = b.recv(|from, data| (from, data.to_vec())).unwrap();
//! assert_eq!(got, Some((0, b"abc".to_vec())));
//! ```

use spin::Mutex;

use super::{Capabilities, Ordering, Transport, TransportError};

/// Bytes in front of every queued packet: sender index (u32 LE) and length (u32 LE).
const SLOT_HEADER: usize = 8;

/// Capabilities of a loopback network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LoopbackConfig {
    /// Largest packet accepted by `send`; also the size of a queue slot.
    pub mtu: usize,
    /// Reported as [`Capabilities::max_inline`]; at most `mtu`.
    pub max_inline: usize,
    /// Reported as [`Capabilities::ordering`].
    pub ordering: Ordering,
}

impl LoopbackConfig {
    /// A configuration with the given MTU, `max_inline == mtu` and per-peer ordering.
    pub const fn new(mtu: usize) -> Self {
        LoopbackConfig {
            mtu,
            max_inline: mtu,
            ordering: Ordering::PerPeer,
        }
    }
}

impl Default for LoopbackConfig {
    /// The payload of one UDP datagram on Ethernet: 1472 bytes.
    fn default() -> Self {
        LoopbackConfig::new(1472)
    }
}

/// Why a [`LoopbackHub`] could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LoopbackError {
    /// The MTU is zero or does not fit the 32-bit length of a queue slot.
    BadMtu(usize),
    /// `max_inline` is larger than the MTU.
    InlineAboveMtu {
        /// The configured `max_inline`.
        max_inline: usize,
        /// The configured MTU.
        mtu: usize,
    },
    /// The storage does not hold one packet slot per endpoint.
    StorageTooSmall {
        /// Bytes needed for one slot per endpoint.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
}

impl core::fmt::Display for LoopbackError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LoopbackError::BadMtu(mtu) => write!(f, "loopback MTU {mtu} is not in 1..=2^32-1"),
            LoopbackError::InlineAboveMtu { max_inline, mtu } => {
                write!(f, "loopback max_inline {max_inline} exceeds the MTU {mtu}")
            }
            LoopbackError::StorageTooSmall { needed, got } => write!(
                f,
                "loopback storage of {got} bytes is too small: one slot per endpoint needs {needed}"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LoopbackError {}

/// One endpoint's receive queue: a ring of fixed-size slots.
struct Queue<'s> {
    buf: &'s mut [u8],
    slot: usize,
    capacity: usize,
    head: usize,
    len: usize,
}

impl<'s> Queue<'s> {
    fn new(buf: &'s mut [u8], slot: usize) -> Self {
        let capacity = buf.len() / slot;
        Queue {
            buf,
            slot,
            capacity,
            head: 0,
            len: 0,
        }
    }

    fn slot_mut(&mut self, index: usize) -> &mut [u8] {
        let start = index * self.slot;
        &mut self.buf[start..start + self.slot]
    }

    fn push<R, F>(&mut self, from: usize, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if self.len == self.capacity {
            return Err(TransportError::WouldBlock);
        }
        let index = (self.head + self.len) % self.capacity;
        let slot = self.slot_mut(index);
        // Both fit in u32: endpoint counts are array lengths checked at construction and
        // `len <= mtu`, which was checked against u32::MAX.
        slot[0..4].copy_from_slice(&(from as u32).to_le_bytes());
        slot[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        let result = fill(&mut slot[SLOT_HEADER..SLOT_HEADER + len]);
        self.len += 1;
        Ok(result)
    }

    fn pop<R, F>(&mut self, f: F) -> Option<R>
    where
        F: FnOnce(usize, &[u8]) -> R,
    {
        if self.len == 0 {
            return None;
        }
        let index = self.head;
        let slot = self.slot_mut(index);
        let from = u32::from_le_bytes([slot[0], slot[1], slot[2], slot[3]]) as usize;
        let len = u32::from_le_bytes([slot[4], slot[5], slot[6], slot[7]]) as usize;
        let result = f(from, &slot[SLOT_HEADER..SLOT_HEADER + len]);
        self.head = (self.head + 1) % self.capacity;
        self.len -= 1;
        Some(result)
    }
}

/// An in-memory network of `N` endpoints with a bounded queue each.
pub struct LoopbackHub<'s, const N: usize> {
    config: LoopbackConfig,
    queue_capacity: usize,
    queues: [Mutex<Queue<'s>>; N],
}

impl<'s, const N: usize> LoopbackHub<'s, N> {
    const AT_LEAST_ONE_ENDPOINT: () = assert!(N > 0, "a loopback hub needs at least one endpoint");

    /// Builds a hub whose queues share `storage` equally. Each endpoint's queue holds
    /// `storage.len() / N / (mtu + 8)` packets.
    ///
    /// Errors: [`LoopbackError`] for a zero or oversized MTU, `max_inline > mtu`, or storage
    /// that does not hold at least one packet per endpoint.
    pub fn new(config: LoopbackConfig, storage: &'s mut [u8]) -> Result<Self, LoopbackError> {
        let () = Self::AT_LEAST_ONE_ENDPOINT;
        if config.mtu == 0 || config.mtu > u32::MAX as usize - SLOT_HEADER {
            return Err(LoopbackError::BadMtu(config.mtu));
        }
        if config.max_inline > config.mtu {
            return Err(LoopbackError::InlineAboveMtu {
                max_inline: config.max_inline,
                mtu: config.mtu,
            });
        }
        let slot = config.mtu + SLOT_HEADER;
        let per_endpoint = storage.len() / N;
        if per_endpoint < slot {
            return Err(LoopbackError::StorageTooSmall {
                needed: slot.saturating_mul(N),
                got: storage.len(),
            });
        }
        let queue_capacity = per_endpoint / slot;
        let mut rest = storage;
        let queues = core::array::from_fn(|_| {
            let (mine, others) = core::mem::take(&mut rest).split_at_mut(per_endpoint);
            rest = others;
            Mutex::new(Queue::new(mine, slot))
        });
        Ok(LoopbackHub {
            config,
            queue_capacity,
            queues,
        })
    }

    /// A handle for endpoint `index`, or [`TransportError::UnknownPeer`] if `index >= N`.
    pub fn endpoint(&self, index: usize) -> Result<LoopbackEndpoint<'_, 's, N>, TransportError> {
        if index >= N {
            return Err(TransportError::UnknownPeer);
        }
        Ok(LoopbackEndpoint { hub: self, index })
    }

    /// Packets each endpoint's queue can hold.
    pub fn queue_capacity(&self) -> usize {
        self.queue_capacity
    }

    /// Packets waiting in endpoint `index`'s queue; `None` for an unknown index or while
    /// another thread holds the queue.
    pub fn queued(&self, index: usize) -> Option<usize> {
        self.queues.get(index)?.try_lock().map(|q| q.len)
    }

    /// The configuration the hub was built with.
    pub fn config(&self) -> LoopbackConfig {
        self.config
    }
}

/// One endpoint of a [`LoopbackHub`]; peers are endpoint indices.
pub struct LoopbackEndpoint<'h, 's, const N: usize> {
    hub: &'h LoopbackHub<'s, N>,
    index: usize,
}

impl<const N: usize> LoopbackEndpoint<'_, '_, N> {
    /// This endpoint's index, which is how the other endpoints address it.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl<const N: usize> Transport for LoopbackEndpoint<'_, '_, N> {
    type Peer = usize;

    fn capabilities(&self) -> Capabilities {
        let config = self.hub.config;
        Capabilities {
            max_inline: config.max_inline,
            mtu: config.mtu,
            ordering: config.ordering,
            reliable: true,
            rdma_put: false,
            rdma_get: false,
            atomic_offload: false,
            atomics_coherent_with_cpu: true,
        }
    }

    /// Appends the packet to `peer`'s queue. `fill` runs while that queue is locked and must
    /// not use the same hub.
    fn send<R, F>(&mut self, peer: usize, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let queue = self
            .hub
            .queues
            .get(peer)
            .ok_or(TransportError::UnknownPeer)?;
        if len > self.hub.config.mtu {
            return Err(TransportError::TooLarge);
        }
        let mut queue = queue.try_lock().ok_or(TransportError::WouldBlock)?;
        queue.push(self.index, len, fill)
    }

    /// Takes the oldest packet from this endpoint's queue. `f` runs while the queue is locked
    /// and must not use the same hub.
    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(usize, &[u8]) -> R,
    {
        match self.hub.queues[self.index].try_lock() {
            Some(mut queue) => Ok(queue.pop(f)),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_configurations() {
        let mut storage = [0u8; 100];
        assert_eq!(
            LoopbackHub::<2>::new(LoopbackConfig::new(0), &mut storage).err(),
            Some(LoopbackError::BadMtu(0))
        );
        let config = LoopbackConfig {
            max_inline: 65,
            ..LoopbackConfig::new(64)
        };
        assert_eq!(
            LoopbackHub::<2>::new(config, &mut storage).err(),
            Some(LoopbackError::InlineAboveMtu {
                max_inline: 65,
                mtu: 64
            })
        );
        assert_eq!(
            LoopbackHub::<2>::new(LoopbackConfig::new(64), &mut storage).err(),
            Some(LoopbackError::StorageTooSmall {
                needed: 144,
                got: 100
            })
        );
    }

    #[test]
    fn queue_wraps_around_and_preserves_order() {
        let mut storage = [0u8; 3 * (16 + SLOT_HEADER)];
        let hub = LoopbackHub::<1>::new(LoopbackConfig::new(16), &mut storage).unwrap();
        assert_eq!(hub.queue_capacity(), 3);
        let mut ep = hub.endpoint(0).unwrap();
        for round in 0u8..10 {
            ep.send(0, 1, |b| b[0] = round).unwrap();
            ep.send(0, 2, |b| b.fill(round + 100)).unwrap();
            assert_eq!(ep.recv(|_, d| d.to_vec()).unwrap(), Some(vec![round]));
            assert_eq!(
                ep.recv(|_, d| d.to_vec()).unwrap(),
                Some(vec![round + 100; 2])
            );
        }
        assert_eq!(ep.recv(|_, d| d.len()).unwrap(), None);
    }
}
