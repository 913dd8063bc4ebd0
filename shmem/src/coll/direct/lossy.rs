//! The UDP transport under the direct endpoint's reliability layer, with the loss that
//! `shmem::testing::coll_drop` injects: a data frame that carries a packet marked
//! [`LOSE_ONCE`](super::header::LOSE_ONCE) is not sent the first time the layer hands it
//! over, as if the network had lost it; its retransmission goes. Without marked packets it
//! forwards every call to the UDP socket unchanged (one branch per datagram).

use std::collections::HashSet;
use std::net::SocketAddr;

use gsas_core::reliable::frame::{FLAG_DATA, Frame};
use gsas_core::transport::{Capabilities, Transport, TransportError};
use gsas_transport::pio::Pio;
use gsas_transport::udp::{UdpPeer, UdpTransport};

use super::header::Header;

/// See the [module docs](self).
pub(super) struct Lossy {
    pub(super) udp: UdpTransport,
    /// Marked packets handed to the layer whose frame was not lost yet.
    pub(super) armed: usize,
    /// The frames lost once: (destination, frame sequence number).
    lost: HashSet<(SocketAddr, u32)>,
}

impl Lossy {
    pub(super) fn new(udp: UdpTransport) -> Lossy {
        Lossy {
            udp,
            armed: 0,
            lost: HashSet::new(),
        }
    }

    /// Whether the datagram `bytes` to `to` is to be lost now (only while armed).
    fn lose(&mut self, to: SocketAddr, bytes: &[u8]) -> bool {
        let Ok(f) = Frame::new_checked(bytes) else {
            return false;
        };
        if f.flags() & FLAG_DATA == 0 {
            return false;
        }
        let marked = f.packets().filter(|p| Header::lose_once(p)).count();
        if marked == 0 || !self.lost.insert((to, f.seq().0)) {
            return false;
        }
        self.armed = self.armed.saturating_sub(marked);
        true
    }
}

impl Transport for Lossy {
    type Peer = UdpPeer;

    fn capabilities(&self) -> Capabilities {
        self.udp.capabilities()
    }

    fn send<R, F>(&mut self, peer: UdpPeer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if self.armed == 0 {
            return self.udp.send(peer, len, fill);
        }
        let mut d = vec![0u8; len];
        let r = fill(&mut d);
        if !self.lose(peer.addr, &d) {
            self.udp.send(peer, len, |b| b.copy_from_slice(&d))?;
        }
        Ok(r)
    }

    fn send_parts(
        &mut self,
        peer: UdpPeer,
        head: &[u8],
        body: &[u8],
    ) -> Result<(), TransportError> {
        if self.armed > 0 && self.lose(peer.addr, &[head, body].concat()) {
            return Ok(());
        }
        self.udp.send_parts(peer, head, body)
    }

    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(UdpPeer, &[u8]) -> R,
    {
        self.udp.recv(f)
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        self.udp.flush()
    }

    fn poll(&mut self, now_ns: u64) -> Result<(), TransportError> {
        self.udp.poll(now_ns)
    }
}

impl Pio for Lossy {}
