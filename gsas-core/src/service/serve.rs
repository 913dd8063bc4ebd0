//! The serve loop: one transport served by a [`Service`], with replies that wait for room.
//!
//! What it is: [`Service::serve_port`], the loop the atomic-service daemon runs for each of
//! its transports (the network and every PE's ring), and that tests and benchmarks run
//! to put a service behind a transport. One call sends what is queued for the transport,
//! then takes up to `budget` requests, executing each inside `recv` (zero copy: from the
//! receive buffer into `scratch`) and sending its reply; host actions (ALLOC, FREE, FORK,
//! CONTROL) go to the caller's `host` callback, which writes a reply into `scratch`.
//!
//! Back-pressure: a reply the transport cannot take now (`WouldBlock`) is queued in the
//! [`PortQueue`] and sent, in order per peer, by later calls. The transport is always read,
//! even while replies wait: acknowledgements that open the window arrive that way. While
//! replies of a peer wait, its new BULK_READ requests (whose replies are large) are kept as
//! requests (32 bytes) and executed in order when room appears, so at most one large reply
//! per peer waits in memory; its other requests are executed and their small replies
//! queued behind its own. A peer whose window stays full (slow, gone, hostile) does not
//! hold up the others: another peer's reply goes out at once, never behind it in the
//! queue, and a pass over the queue goes on with the other peers' entries; a pass stops
//! after `BLOCKED_SCAN` refusals in a row (the shared frame pool, not one peer, is then
//! full). The queue's owner bounds each peer's part of it: [`PortQueue::peers_over`]
//! names the peers whose entries pile up, and a reliability layer stops taking their new
//! frames (`Reliable::pause_receive`).
//!
//! What it is not: `no_std`. The queue allocates, so this module exists with the `std`
//! feature only (the rest of the crate never allocates). It keeps no time: the caller
//! drives the transport's timers ([`Transport::poll`]) and flushes it.
//!
//! Thread safety: a plain function over `&mut` values.

use std::collections::VecDeque;
use std::vec::Vec;

use super::{Memory, Prepared, Service};
use crate::transport::{Transport, TransportError};
use crate::wire::{ErrorCode, HEADER_LEN, PacketType, RequestRepr, emit_reply_header, peek_type};

/// Peers refused in a row (their lane's first entry) after which a pass over the queue stops.
pub const BLOCKED_SCAN: usize = 64;

/// Work for a transport that could not be done at once.
#[derive(Debug)]
enum Deferred<P> {
    /// A reply waiting for room.
    Reply(P, Vec<u8>),
    /// A BULK_READ request (its header) whose large reply would wait behind others.
    Request(P, u64, Vec<u8>),
}

impl<P: Copy> Deferred<P> {
    fn peer(&self) -> P {
        match self {
            Deferred::Reply(peer, _) | Deferred::Request(peer, _, _) => *peer,
        }
    }
}

/// What waits to be sent on one transport (one per transport served): a lane of entries
/// per peer, in order, and the peers that have any in turn. Looking a peer up costs one
/// pass over the peers that have entries (not over the entries), and a pass of
/// [`Service::serve_port`] over the queue costs one look per such peer plus what it sends.
#[derive(Debug)]
pub struct PortQueue<P> {
    lanes: VecDeque<Lane<P>>,
    total: usize,
}

/// One peer's waiting entries, oldest first, and how many of them are kept requests.
#[derive(Debug)]
struct Lane<P> {
    peer: P,
    entries: VecDeque<Deferred<P>>,
    requests: usize,
}

impl<P> Default for PortQueue<P> {
    fn default() -> Self {
        PortQueue {
            lanes: VecDeque::new(),
            total: 0,
        }
    }
}

impl<P> PortQueue<P> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Entries waiting (replies and kept requests).
    pub fn len(&self) -> usize {
        self.total
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

impl<P: Copy + PartialEq> PortQueue<P> {
    /// Whether something of `peer` waits.
    pub fn has(&self, peer: P) -> bool {
        self.lanes.iter().any(|l| l.peer == peer)
    }

    /// The peers (each once) with at least `replies` replies waiting, or at least
    /// `requests` BULK_READ requests kept (32 bytes each: a large get of a well-behaved
    /// peer keeps many while its window opens).
    pub fn peers_over(&self, replies: usize, requests: usize) -> Vec<P> {
        self.lanes
            .iter()
            .filter(|l| l.entries.len() - l.requests >= replies || l.requests >= requests)
            .map(|l| l.peer)
            .collect()
    }

    /// Appends `entry` to its peer's lane.
    fn push_back(&mut self, entry: Deferred<P>) {
        let peer = entry.peer();
        let request = matches!(entry, Deferred::Request(..));
        let lane = match self.lanes.iter().position(|l| l.peer == peer) {
            Some(i) => &mut self.lanes[i],
            None => {
                self.lanes.push_back(Lane {
                    peer,
                    entries: VecDeque::new(),
                    requests: 0,
                });
                self.lanes.back_mut().expect("pushed above")
            }
        };
        lane.requests += usize::from(request);
        lane.entries.push_back(entry);
        self.total += 1;
    }
}

/// What one [`Service::serve_port`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// Packets received plus queued replies sent.
    pub moved: usize,
    /// Replies (or BULK_READ requests) that had to wait in the queue.
    pub deferred: u64,
    /// Replies dropped because the peer is unknown or unreachable, or the reply too large.
    pub dropped: u64,
    /// Requests not answered because `scratch` was shorter than their reply (size
    /// `scratch` to the transport's MTU and this stays 0).
    pub scratch_short: u64,
}

/// Writes an ERROR reply with `code` into `out` and returns its length.
pub fn refusal(out: &mut [u8], token: u32, code: ErrorCode) -> usize {
    emit_reply_header(out, PacketType::Error, code.into(), 0, token);
    crate::wire::REPLY_HEADER_LEN
}

/// A `host` callback for [`Service::serve_port`] that executes no host action: it refuses
/// each with `NOT_SUPPORTED` (the daemon's rings, tests and benchmarks).
pub fn refuse_host_actions<P>(_peer: P, request: RequestRepr<'_>, out: &mut [u8]) -> usize {
    refusal(out, request.token, ErrorCode::NotSupported)
}

/// What one received packet produced.
enum Got<P> {
    /// A reply of this many bytes in `scratch`; whether it may wait (`send_lazy`).
    Reply(P, usize, bool),
    /// A BULK_READ kept while replies wait.
    Stash(P, u64, Vec<u8>),
}

impl<M: Memory, const N: usize> Service<M, N> {
    /// Serves `transport` once: sends what `queue` holds, then receives up to `budget`
    /// requests and answers each (see the [module documentation](self)). `key_of` gives a
    /// peer's job key; `host(peer, request, scratch)` answers a host action by writing a
    /// reply into `scratch` and returning its length (0: no reply).
    ///
    /// Errors: a transport error other than `WouldBlock`, `Unreachable`, `UnknownPeer` and
    /// `TooLarge` (which queue or drop the reply and are counted in [`Served`]).
    pub fn serve_port<T, K, H>(
        &mut self,
        transport: &mut T,
        queue: &mut PortQueue<T::Peer>,
        scratch: &mut [u8],
        budget: usize,
        key_of: K,
        mut host: H,
    ) -> Result<Served, TransportError>
    where
        T: Transport,
        K: Fn(&T::Peer) -> u64,
        H: FnMut(T::Peer, RequestRepr<'_>, &mut [u8]) -> usize,
    {
        let mut served = Served::default();
        if !queue.is_empty() {
            self.drain(transport, queue, scratch, &mut served)?;
        }
        for _ in 0..budget {
            let queued = &*queue;
            let got = transport.recv(|peer, packet| {
                let key = key_of(&peer);
                if peek_type(packet) == Some(PacketType::BulkRead) && queued.has(peer) {
                    let keep = packet.len().min(HEADER_LEN);
                    return Got::Stash(peer, key, packet[..keep].to_vec());
                }
                let (n, lazy) = match self.prepare(key, packet) {
                    Prepared::Reply(p) => match self.execute(&p, scratch) {
                        Ok(n) => (n, p.may_wait()),
                        Err(_) => {
                            served.scratch_short += 1;
                            (0, false)
                        }
                    },
                    Prepared::Host(repr) => (host(peer, repr, scratch), false),
                    Prepared::Drop => (0, false),
                };
                Got::Reply(peer, n, lazy)
            })?;
            let Some(got) = got else {
                break;
            };
            served.moved += 1;
            match got {
                Got::Stash(peer, key, req) => {
                    served.deferred += 1;
                    queue.push_back(Deferred::Request(peer, key, req));
                }
                Got::Reply(_, 0, _) => {}
                // Behind this peer's own waiting entries (order per peer); another peer's
                // reply does not wait behind them.
                Got::Reply(peer, n, _) if queue.has(peer) => {
                    served.deferred += 1;
                    queue.push_back(Deferred::Reply(peer, scratch[..n].to_vec()));
                }
                Got::Reply(peer, n, lazy) => {
                    let fill = |slot: &mut [u8]| slot.copy_from_slice(&scratch[..n]);
                    let sent = if lazy {
                        transport.send_lazy(peer, n, fill)
                    } else {
                        transport.send(peer, n, fill)
                    };
                    match sent {
                        Ok(()) => {}
                        Err(TransportError::WouldBlock) => {
                            served.deferred += 1;
                            queue.push_back(Deferred::Reply(peer, scratch[..n].to_vec()));
                        }
                        Err(
                            TransportError::Unreachable
                            | TransportError::UnknownPeer
                            | TransportError::TooLarge,
                        ) => served.dropped += 1,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(served)
    }

    /// Sends queued replies and executes kept requests while the transport takes them.
    ///
    /// One pass visits each peer's lane once, in turn: it sends the lane's entries in
    /// order until the transport refuses one (`WouldBlock`: that peer's window is full,
    /// or the pool), which goes back to the front of its lane, and moves on to the next
    /// peer. A pass stops after [`BLOCKED_SCAN`] peers refused in a row (the shared frame
    /// pool, not one peer, is then full). Its cost is one look per peer with entries plus
    /// what it sends, whatever the number of entries.
    fn drain<T: Transport>(
        &mut self,
        transport: &mut T,
        queue: &mut PortQueue<T::Peer>,
        scratch: &mut [u8],
        served: &mut Served,
    ) -> Result<(), TransportError> {
        let mut refused_in_a_row = 0;
        let mut left = queue.lanes.len();
        while left > 0 && refused_in_a_row < BLOCKED_SCAN {
            left -= 1;
            let Some(mut lane) = queue.lanes.pop_front() else {
                break;
            };
            let peer = lane.peer;
            let mut result = Ok(());
            while let Some(mut entry) = lane.entries.pop_front() {
                queue.total -= 1;
                let n = match &entry {
                    Deferred::Reply(_, bytes) => {
                        scratch[..bytes.len()].copy_from_slice(bytes);
                        bytes.len()
                    }
                    Deferred::Request(_, key, req) => {
                        lane.requests -= 1;
                        let n = match self.prepare(*key, req) {
                            Prepared::Reply(p) => self.execute(&p, scratch).unwrap_or_else(|_| {
                                served.scratch_short += 1;
                                0
                            }),
                            Prepared::Host(repr) => {
                                refusal(scratch, repr.token, ErrorCode::NotSupported)
                            }
                            Prepared::Drop => 0,
                        };
                        if n == 0 {
                            continue;
                        }
                        // Executed now: keep the reply, not the request, if it has to wait.
                        entry = Deferred::Reply(peer, scratch[..n].to_vec());
                        n
                    }
                };
                match transport.send(peer, n, |slot| slot.copy_from_slice(&scratch[..n])) {
                    Ok(()) => {
                        served.moved += 1;
                        refused_in_a_row = 0;
                    }
                    Err(TransportError::WouldBlock) => {
                        refused_in_a_row += 1;
                        lane.entries.push_front(entry);
                        queue.total += 1;
                        break;
                    }
                    Err(
                        TransportError::Unreachable
                        | TransportError::UnknownPeer
                        | TransportError::TooLarge,
                    ) => served.dropped += 1,
                    Err(e) => {
                        lane.entries.push_front(entry);
                        queue.total += 1;
                        result = Err(e);
                        break;
                    }
                }
            }
            if !lane.entries.is_empty() {
                queue.lanes.push_back(lane);
            }
            result?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use core::sync::atomic::AtomicU64;

    use super::*;
    use crate::service::{Segment, WordMemory};
    use crate::transport::{Capabilities, Ordering};
    use crate::wire::{GlobalAddr, Packet, ReplyRepr, Request, SenderId};

    const KEY: u64 = 5;

    /// Requests in, replies out; sends to peers in `full` are refused (`WouldBlock`).
    #[derive(Default)]
    struct Port {
        incoming: VecDeque<(u8, Vec<u8>)>,
        sent: Vec<(u8, u32)>,
        full: Vec<u8>,
    }

    impl Transport for Port {
        type Peer = u8;
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                max_inline: 64,
                mtu: 1024,
                ordering: Ordering::PerPeer,
                reliable: true,
                rdma_put: false,
                rdma_get: false,
                atomic_offload: false,
                atomics_coherent_with_cpu: false,
            }
        }
        fn send<R, F: FnOnce(&mut [u8]) -> R>(
            &mut self,
            peer: u8,
            len: usize,
            fill: F,
        ) -> Result<R, TransportError> {
            if self.full.contains(&peer) {
                return Err(TransportError::WouldBlock);
            }
            let mut buf = vec![0u8; len];
            let r = fill(&mut buf);
            self.sent
                .push((peer, ReplyRepr::parse(&buf).unwrap().token));
            Ok(r)
        }
        fn recv<R, F: FnOnce(u8, &[u8]) -> R>(
            &mut self,
            f: F,
        ) -> Result<Option<R>, TransportError> {
            Ok(self.incoming.pop_front().map(|(peer, p)| f(peer, &p)))
        }
    }

    fn read(token: u32) -> Vec<u8> {
        let repr = crate::wire::RequestRepr {
            sender: SenderId::new(2).unwrap(),
            token,
            body: Request::Read {
                addr: GlobalAddr::new(0, 0, 8).unwrap(),
                len: 4,
            },
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        buf
    }

    #[test]
    fn a_blocked_peer_waits_in_order_without_holding_up_the_others() {
        let words: [AtomicU64; 8] = Default::default();
        let mut service: Service<_, 2> =
            Service::new(SenderId::new(1).unwrap(), WordMemory::new(&words));
        service
            .register(Segment {
                job: 1,
                key: KEY,
                pe: 0,
                segment: 0,
                base: 0,
                len: 64,
            })
            .unwrap();
        let mut port = Port {
            full: vec![1],
            ..Port::default()
        };
        for token in 0..8u32 {
            port.incoming
                .push_back(((token % 2 + 1) as u8, read(token)));
        }
        let mut queue = PortQueue::new();
        let mut scratch = [0u8; 1024];
        let mut turn = |service: &mut Service<_, 2>, port: &mut Port, queue: &mut PortQueue<u8>| {
            service
                .serve_port(port, queue, &mut scratch, 64, |_| KEY, refuse_host_actions)
                .unwrap()
        };
        // Peer 1's first reply is refused: it and peer 1's later ones wait; peer 2's go
        // out at once, in order (they never wait behind peer 1's).
        let s = turn(&mut service, &mut port, &mut queue);
        assert_eq!((s.moved, s.deferred, s.dropped), (8, 4, 0), "{s:?}");
        assert_eq!(port.sent, [(2, 1), (2, 3), (2, 5), (2, 7)]);
        assert_eq!(queue.len(), 4);
        assert!(queue.has(1) && !queue.has(2));
        assert_eq!(queue.peers_over(4, 1), [1]);
        assert!(
            queue.peers_over(5, 1).is_empty(),
            "replies only: no request kept"
        );
        // Still no room for peer 1: nothing moves.
        let s = turn(&mut service, &mut port, &mut queue);
        assert_eq!(s.moved, 0);
        assert_eq!(queue.len(), 4);
        // Room for peer 1: its replies follow in their order.
        port.full.clear();
        let s = turn(&mut service, &mut port, &mut queue);
        assert_eq!(s.moved, 4);
        assert!(queue.is_empty());
        assert_eq!(&port.sent[4..], [(1, 0), (1, 2), (1, 4), (1, 6)]);
    }
}
