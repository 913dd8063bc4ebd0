//! A tracing wrapper around any transport: shows every packet to a sink.
//!
//! What it is: [`Tracer`] wraps a [`Transport`] and calls a [`TraceSink`] for every packet
//! that is sent (after `fill` wrote it, so the sink sees the final bytes) and for every packet
//! received (before the caller's closure sees it). The sink gets the [`Direction`], the peer
//! and the bytes (their length is the packet length). After smoltcp's `phy::Tracer`.
//!
//! Sinks: any `FnMut(Direction, P, &[u8])` closure is a sink, and [`CountingSink`] counts
//! packets and bytes per direction. Sinks are called in-line and statically dispatched.
//!
//! What it is not: a filter. The tracer never changes, drops or holds packets; capabilities,
//! errors, `flush` and `poll` are the inner transport's.
//!
//! Thread-safety: a plain single-owner value; `Send` when the inner transport and the sink are.

use super::{Capabilities, Transport, TransportError};

/// Which way a traced packet went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Direction {
    /// Sent by this endpoint to the peer.
    Send,
    /// Received by this endpoint from the peer.
    Recv,
}

/// Receives every packet a [`Tracer`] sees.
pub trait TraceSink<P> {
    /// Called once per packet; `bytes` is the whole packet.
    fn packet(&mut self, direction: Direction, peer: P, bytes: &[u8]);
}

impl<P, F: FnMut(Direction, P, &[u8])> TraceSink<P> for F {
    fn packet(&mut self, direction: Direction, peer: P, bytes: &[u8]) {
        self(direction, peer, bytes)
    }
}

/// A sink that counts packets and bytes per direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CountingSink {
    /// Packets sent.
    pub sent_packets: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Packets received.
    pub received_packets: u64,
    /// Bytes received.
    pub received_bytes: u64,
}

impl<P> TraceSink<P> for CountingSink {
    fn packet(&mut self, direction: Direction, _peer: P, bytes: &[u8]) {
        match direction {
            Direction::Send => {
                self.sent_packets += 1;
                self.sent_bytes += bytes.len() as u64;
            }
            Direction::Recv => {
                self.received_packets += 1;
                self.received_bytes += bytes.len() as u64;
            }
        }
    }
}

/// A transport wrapper that shows every packet to a [`TraceSink`].
pub struct Tracer<T: Transport, S: TraceSink<T::Peer>> {
    inner: T,
    sink: S,
}

impl<T: Transport, S: TraceSink<T::Peer>> Tracer<T, S> {
    /// Wraps `inner`, reporting to `sink`.
    pub fn new(inner: T, sink: S) -> Self {
        Tracer { inner, sink }
    }

    /// The sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The sink, mutably (e.g. to reset counters).
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The wrapped transport, mutably (bypassing the tracer).
    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Unwraps into the inner transport and the sink.
    pub fn into_parts(self) -> (T, S) {
        (self.inner, self.sink)
    }
}

impl<T: Transport, S: TraceSink<T::Peer>> Transport for Tracer<T, S> {
    type Peer = T::Peer;

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn send<R, F>(&mut self, peer: T::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let sink = &mut self.sink;
        self.inner.send(peer, len, |buf| {
            let result = fill(buf);
            sink.packet(Direction::Send, peer, buf);
            result
        })
    }

    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(T::Peer, &[u8]) -> R,
    {
        let sink = &mut self.sink;
        self.inner.recv(|peer, data| {
            sink.packet(Direction::Recv, peer, data);
            f(peer, data)
        })
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        self.inner.flush()
    }

    fn poll(&mut self, now_ns: u64) -> Result<(), TransportError> {
        self.inner.poll(now_ns)
    }
}
