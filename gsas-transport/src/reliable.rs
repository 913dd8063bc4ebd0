//! The reliability layer over UDP as an owned value: [`OwnedReliable`] and [`MapIndex`].
//!
//! gsas-core's [`Reliable`] works in a peer table and a buffer it is given as a
//! [`Storage`](gsas_core::reliable::Storage): borrowed (`no_std`, no allocation) or owned.
//! A service or a PE wants one owned value it can keep in a struct, so [`OwnedReliable`]
//! allocates the table and the buffer as `Vec`s and hands them to the layer by value: a
//! `Reliable<'static, ..>` that frees them when it is dropped. It implements [`Transport`]
//! by forwarding, plus the few extra methods the runtime needs (PIO, below).
//!
//! Packets that the inner transport can carry by PIO ([`Pio`]: over Exanet, those of up
//! to 48 bytes) bypass the layer: sent as one mailbox message that the NI driver resends
//! until the layer's deadline, received from the transport's PIO inbox before the frames;
//! one that is not delivered by the deadline makes its peer unreachable
//! ([`PeerEvent::Unreachable`], later sends fail) until [`OwnedReliable::reset_peer`].
//!
//! [`MapIndex`] is a [`PeerIndex`] over a std `HashMap`: no fixed hash-table size to choose,
//! and slots are handed out in order of first appearance up to the table's capacity; it
//! admits every peer (PEs and the FORK sender talk only to services they chose). A
//! service uses its own index (`JobIndex` of `gsas_service`).
//!
//! Thread-safety: single owner, used through `&mut self`; `Send` when the inner transport,
//! its peer type and the index are (no `unsafe impl`: it follows from the fields).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use gsas_core::reliable::{
    Config, ConfigError, PeerEvent, PeerIndex, PeerSlot, Refusal, Reliable, Stats,
};
use gsas_core::transport::{Capabilities, Transport, TransportError};

use crate::pio::Pio;

/// A [`PeerIndex`] backed by a `HashMap`; slots are assigned in order of first appearance.
#[derive(Debug, Clone)]
pub struct MapIndex<P> {
    map: HashMap<P, usize>,
}

impl<P> Default for MapIndex<P> {
    fn default() -> Self {
        MapIndex {
            map: HashMap::new(),
        }
    }
}

impl<P: Copy + Eq + Hash> PeerIndex<P> for MapIndex<P> {
    fn slot(&mut self, peer: P, capacity: usize) -> Option<usize> {
        if let Some(&s) = self.map.get(&peer) {
            return Some(s);
        }
        let next = self.map.len();
        if next >= capacity {
            return None;
        }
        self.map.insert(peer, next);
        Some(next)
    }

    fn find(&self, peer: P, capacity: usize) -> Option<usize> {
        self.map.get(&peer).copied().filter(|&s| s < capacity)
    }
}

/// A [`Reliable`] layer that owns its peer table and buffers
/// ([`Storage::Owned`](gsas_core::reliable::Storage::Owned)), plus the PIO path of the
/// inner transport.
pub struct OwnedReliable<T: Transport, const W: usize, I = MapIndex<<T as Transport>::Peer>>
where
    T::Peer: Hash + 'static,
{
    rel: Reliable<'static, T, W, I>,
    capacity: usize,
    /// How long a PIO packet is resent (the layer's deadline).
    deadline: std::time::Duration,
    /// Peers a PIO packet could not be delivered to (until `reset_peer`).
    pio_failed: HashSet<T::Peer>,
}

impl<T: Transport, const W: usize> OwnedReliable<T, W>
where
    T::Peer: Hash + Eq + 'static,
{
    /// Builds the layer over `inner` with room for `peers` peers and `frames` frame
    /// buffers of `frame_size` bytes (`None`: the inner MTU); every peer is admitted.
    pub fn new(inner: T, config: Config, peers: usize, frames: usize) -> Result<Self, ConfigError> {
        Self::with_index(inner, config, peers, frames, MapIndex::default())
    }
}

impl<T: Transport, const W: usize, I: PeerIndex<T::Peer>> OwnedReliable<T, W, I>
where
    T::Peer: Hash + 'static,
{
    /// As [`OwnedReliable::new`], with the peer index that decides who gets a slot.
    pub fn with_index(
        inner: T,
        config: Config,
        peers: usize,
        frames: usize,
        index: I,
    ) -> Result<Self, ConfigError> {
        let frame_size = config.max_frame.unwrap_or(inner.capabilities().mtu);
        let inner_mtu = inner.capabilities().mtu;
        let len = gsas_core::reliable::buffer_len(inner_mtu, frame_size, frames.max(1));
        let table: Vec<PeerSlot<T::Peer, W>> = (0..peers).map(|_| PeerSlot::new()).collect();
        let buf = vec![0u8; len];
        let rel = Reliable::with_index(inner, config, table, buf, index)?;
        Ok(OwnedReliable {
            rel,
            capacity: peers,
            deadline: std::time::Duration::from_nanos(config.deadline_ns),
            pio_failed: HashSet::new(),
        })
    }

    /// The inner transport.
    pub fn inner(&self) -> &T {
        self.rel.inner()
    }

    /// The inner transport, mutably.
    pub fn inner_mut(&mut self) -> &mut T {
        self.rel.inner_mut()
    }

    /// Frames in `peer`'s send window ([`Reliable::in_flight`]).
    pub fn in_flight(&self, peer: T::Peer) -> usize {
        self.rel.in_flight(peer)
    }

    /// Frame buffers of the pool: `(capacity, free)` ([`Reliable::pool_usage`]).
    pub fn pool_usage(&self) -> (u32, u32) {
        self.rel.pool_usage()
    }

    /// Sends the acknowledgement owed to `peer` now ([`Reliable::acknowledge_now`]).
    ///
    /// Errors: a failed inner transport.
    pub fn acknowledge_now(&mut self, peer: T::Peer) -> Result<bool, TransportError> {
        self.rel.acknowledge_now(peer)
    }

    /// The peers declared unreachable ([`Reliable::failed_peers`]).
    pub fn failed_peers(&self) -> impl Iterator<Item = T::Peer> + '_ {
        self.rel.failed_peers()
    }

    /// The layer's counters.
    pub fn stats(&self) -> Stats {
        self.rel.stats()
    }

    /// Advances the layer's clock without driving timers ([`Reliable::set_now`]): call it
    /// before sending when time may have passed since the last `poll`, so the frames sent
    /// carry the current time.
    pub fn set_now(&mut self, now_ns: u64) {
        self.rel.set_now(now_ns);
    }

    /// The next peer event, if any (a PIO packet not delivered by its deadline makes its
    /// peer unreachable too).
    pub fn next_event(&mut self) -> Option<PeerEvent<T::Peer>>
    where
        T: Pio,
    {
        if let Some(p) = self.rel.inner_mut().pio_lost() {
            if self.pio_failed.insert(p) {
                return Some(PeerEvent::Unreachable(p));
            }
        }
        self.rel.next_event()
    }

    /// The peer index.
    pub fn index(&self) -> &I {
        self.rel.index()
    }

    /// The peer index, mutably.
    pub fn index_mut(&mut self) -> &mut I {
        self.rel.index_mut()
    }

    /// Lets `send` reach a peer declared unreachable again ([`Reliable::reset_peer`]).
    pub fn reset_peer(&mut self, peer: T::Peer) -> Result<(), TransportError> {
        self.pio_failed.remove(&peer);
        self.rel.reset_peer(peer)
    }

    /// Closes `peer`'s slot for new data, answering them with `refusal`, while its last
    /// frames may still arrive ([`Reliable::close_peer`], TCP's TIME_WAIT).
    pub fn close_peer(&mut self, peer: T::Peer, refusal: Refusal) -> bool {
        self.rel.close_peer(peer, refusal)
    }

    /// Stops or resumes taking new data frames from `peer` ([`Reliable::pause_receive`]).
    pub fn pause_receive(&mut self, peer: T::Peer, paused: bool) -> bool {
        self.rel.pause_receive(peer, paused)
    }

    /// Frees `peer`'s slot ([`Reliable::release_peer`]).
    pub fn release_peer(&mut self, peer: T::Peer) -> bool {
        self.rel.release_peer(peer)
    }

    /// Frees idle peers silent for `silent_ns` that `pick` names
    /// ([`Reliable::release_silent`]).
    pub fn release_silent(&mut self, silent_ns: u64, pick: impl FnMut(T::Peer) -> bool) -> usize {
        self.rel.release_silent(silent_ns, pick)
    }

    /// Size of the peer table.
    pub fn peer_capacity(&self) -> usize {
        self.capacity
    }

    /// The earliest time (on the clock given to `poll`) at which `poll` may have work
    /// ([`Reliable::next_timer`]): `Some(0)` while a PIO message waits for its final
    /// status or its resend (those are polled, not timed), `None` when nothing is
    /// pending.
    pub fn next_timer(&self) -> Option<u64>
    where
        T: Pio,
    {
        if self.rel.inner().pio_pending() {
            return Some(0);
        }
        self.rel.next_timer()
    }

    /// Whether any frame is open or unacknowledged (timers are pending), or a PIO message
    /// waits for its final status or its resend.
    pub fn has_frames_in_use(&self) -> bool
    where
        T: Pio,
    {
        let (cap, free) = self.rel.pool_usage();
        free < cap || self.rel.inner().pio_pending()
    }

    #[inline]
    fn pio_send<R, F>(&mut self, peer: T::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        T: Pio,
        F: FnOnce(&mut [u8]) -> R,
    {
        if !self.pio_failed.is_empty() && self.pio_failed.contains(&peer) {
            return Err(TransportError::Unreachable);
        }
        let deadline = self.deadline;
        self.rel.inner_mut().pio_send(peer, len, deadline, fill)
    }
}

impl<T: Pio, const W: usize, I: PeerIndex<T::Peer>> Transport for OwnedReliable<T, W, I>
where
    T::Peer: Hash + 'static,
{
    type Peer = T::Peer;

    fn capabilities(&self) -> Capabilities {
        self.rel.capabilities()
    }

    #[inline]
    fn send<R, F>(&mut self, peer: T::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if self.rel.inner().pio_fits(&peer, len) {
            return self.pio_send(peer, len, fill);
        }
        self.rel.send(peer, len, fill)
    }

    #[inline]
    fn send_lazy<R, F>(&mut self, peer: T::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if self.rel.inner().pio_fits(&peer, len) {
            return self.pio_send(peer, len, fill);
        }
        self.rel.send_lazy(peer, len, fill)
    }

    #[inline]
    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(T::Peer, &[u8]) -> R,
    {
        if !self.rel.inner().pio_ready() {
            // Reading the frames also moves PIO packets to the transport's PIO inbox.
            let mut f = Some(f);
            let got = self
                .rel
                .recv(|p, d| (f.take().expect("called once"))(p, d))?;
            if got.is_some() {
                return Ok(got);
            }
            return Ok(f.and_then(|f| self.rel.inner_mut().pio_recv(f)));
        }
        Ok(self.rel.inner_mut().pio_recv(f))
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        self.rel.flush()
    }

    fn poll(&mut self, now_ns: u64) -> Result<(), TransportError> {
        self.rel.poll(now_ns)
    }
}

/// Lower bound of the retransmission timeout of every reliability layer of the runtime.
///
/// gsas-core's LAN default (1 ms) is below a scheduler time slice: on a loaded machine
/// (more processes than cores, which the runtime supports) a peer that is merely
/// descheduled for a few milliseconds looks like a lost frame, and every such pause turns
/// into retransmissions of full windows (measured: a reliable stream at 0.48 GB/s against
/// 0.80 GB/s raw in 8 KiB datagrams). 20 ms is above the pauses of a busy Linux scheduler
/// and still far below the 200 ms floor of TCP; real loss on a LAN (a full receive buffer)
/// is rare, and a lost reply is resent at once by the reply cache when its request is.
pub const MIN_RTO: std::time::Duration = std::time::Duration::from_millis(20);

/// Retransmission timeout before the first round-trip sample of a peer.
pub const INITIAL_RTO: std::time::Duration = std::time::Duration::from_millis(50);

/// The settings of the runtime's reliability layers over UDP (services, PEs, the FORK
/// sender): gsas-core's defaults with the floor [`MIN_RTO`], the first timeout
/// [`INITIAL_RTO`], a fresh epoch, and `deadline` after which an unanswered peer is
/// declared unreachable. Round-trip samples come only from frames sent once (Karn's rule,
/// enforced by gsas-core).
pub fn reliable_config(deadline: std::time::Duration) -> Config {
    let mut rc = Config::new(fresh_epoch());
    rc.min_rto_ns = MIN_RTO.as_nanos() as u64;
    rc.initial_rto_ns = INITIAL_RTO.as_nanos() as u64;
    rc.deadline_ns = u64::try_from(deadline.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    rc
}

/// A non-zero epoch that grows across restarts: the wall clock in nanoseconds (or 1).
pub fn fresh_epoch() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsas_core::transport::loopback::{LoopbackConfig, LoopbackHub};

    #[test]
    fn map_index_assigns_in_order_up_to_capacity() {
        let mut m = MapIndex::default();
        assert_eq!(m.slot(10u32, 2), Some(0));
        assert_eq!(m.slot(20, 2), Some(1));
        assert_eq!(m.slot(10, 2), Some(0));
        assert_eq!(m.slot(30, 2), None);
        assert_eq!(m.find(20, 2), Some(1));
        assert_eq!(m.find(30, 2), None);
        assert_eq!(m.map.len(), 2);
    }

    /// `OwnedReliable` is `Send` by its fields (no `unsafe impl`): the runtime moves its
    /// layers into progress threads, so losing it must fail to compile.
    #[test]
    fn owned_reliable_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<OwnedReliable<crate::net::NetTransport, 32>>();
        assert_send::<
            OwnedReliable<gsas_core::transport::loopback::LoopbackEndpoint<'static, 'static, 2>, 8>,
        >();
    }

    #[test]
    fn owned_layers_deliver_and_drop_cleanly() {
        let mut storage = vec![0u8; 2 * 16 * 1100];
        let hub = LoopbackHub::<2>::new(LoopbackConfig::new(1024), &mut storage).unwrap();
        let mut a: OwnedReliable<_, 8> =
            OwnedReliable::new(hub.endpoint(0).unwrap(), Config::new(1), 2, 8).unwrap();
        let mut b: OwnedReliable<_, 8> =
            OwnedReliable::new(hub.endpoint(1).unwrap(), Config::new(2), 2, 8).unwrap();
        a.send(1usize, 3, |buf| buf.copy_from_slice(b"abc"))
            .unwrap();
        a.flush().unwrap();
        let got = b.recv(|from, d| (from, d.to_vec())).unwrap();
        assert_eq!(got, Some((0, b"abc".to_vec())));
        assert!(a.has_frames_in_use(), "the frame waits for its ack");
        assert_eq!(
            (a.index().map.len(), b.index().map.len(), a.peer_capacity()),
            (1, 1, 2)
        );
        // A bad configuration is refused and frees what was allocated.
        let bad = OwnedReliable::<_, 8>::new(hub.endpoint(0).unwrap(), Config::new(0), 2, 8);
        assert!(matches!(bad, Err(ConfigError::ZeroEpoch)));
    }
}
