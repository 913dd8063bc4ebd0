//! The inter-node transport of the runtime: UDP or Exanet, chosen at start-up.
//!
//! What it is: [`NetTransport`], gsas-core's `Transport` over either a
//! [`UdpTransport`] or an [`ExanetLink`] (plus, for a service, its UDP socket for host
//! actions such as remote FORK), with [`NetPeer`]s whose address is a socket address or an
//! Exanet endpoint ([`NetAddr`]). The runtime puts one reliability layer
//! (`OwnedReliable` of `gsas_service`) over it, whatever the choice.
//! Dispatch is a `match` on the variant (no trait objects): the UDP variant forwards every
//! call, `send_parts` included, straight to the UDP transport.
//!
//! What it is not: the choice itself (a service's `gsas_service::ServiceConfig::exanet`,
//! the transport its PEs learn when they join).
//!
//! Thread-safety: a single-owner value used through `&mut self` (`Send`).

use std::net::SocketAddr;

use exanet::Dest;
use gsas_core::transport::{Capabilities, Transport, TransportError};

use super::exanet::{ExaPeer, ExanetLink};
use super::pio::Pio;
use super::udp::{UdpPeer, UdpTransport};

/// Where a peer is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetAddr {
    /// A UDP socket address.
    Udp(SocketAddr),
    /// An Exanet endpoint.
    Exanet(Dest),
}

impl std::fmt::Display for NetAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetAddr::Udp(a) => write!(f, "{a}"),
            NetAddr::Exanet(d) => write!(f, "exanet {d}"),
        }
    }
}

/// A peer of a [`NetTransport`]: an address and the job key of the packets exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NetPeer {
    /// Where the peer is.
    pub addr: NetAddr,
    /// The job key (set on packets sent, read from packets received).
    pub key: u64,
}

/// UDP or Exanet (see the module docs).
#[derive(Debug)]
pub enum NetTransport {
    /// UDP datagrams.
    Udp(UdpTransport),
    /// An Exanet endpoint; `udp` (a service's) also receives and answers UDP peers.
    Exanet {
        /// The endpoint.
        link: Box<ExanetLink>,
        /// The UDP socket for host actions, if any.
        udp: Option<UdpTransport>,
    },
}

impl NetTransport {
    /// The UDP transport, if this one has a UDP socket.
    pub fn udp(&self) -> Option<&UdpTransport> {
        match self {
            NetTransport::Udp(u) => Some(u),
            NetTransport::Exanet { udp, .. } => udp.as_ref(),
        }
    }

    /// The Exanet link, if this is one.
    pub fn exanet(&self) -> Option<&ExanetLink> {
        match self {
            NetTransport::Udp(_) => None,
            NetTransport::Exanet { link, .. } => Some(link),
        }
    }

    /// Whether the Exanet link has work in progress that no interrupt announces.
    pub fn work_pending(&self) -> bool {
        self.exanet().is_some_and(ExanetLink::work_pending)
    }

    /// The address peers use for this transport's main path (the Exanet endpoint, or the
    /// UDP socket's address).
    pub fn local_addr(&self) -> NetAddr {
        match self {
            NetTransport::Udp(u) => NetAddr::Udp(u.local_addr()),
            NetTransport::Exanet { link, .. } => NetAddr::Exanet(link.local()),
        }
    }
}

/// PIO over the Exanet link (see [`super::pio`]); never over UDP.
impl Pio for NetTransport {
    #[inline]
    fn pio_fits(&self, peer: &NetPeer, len: usize) -> bool {
        match (self, peer.addr) {
            (NetTransport::Exanet { link, .. }, NetAddr::Exanet(dest)) => link.pio_fits(
                &ExaPeer {
                    dest,
                    key: peer.key,
                },
                len,
            ),
            _ => false,
        }
    }

    #[inline]
    fn pio_send<R, F>(
        &mut self,
        peer: NetPeer,
        len: usize,
        deadline: std::time::Duration,
        fill: F,
    ) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        match (self, peer.addr) {
            (NetTransport::Exanet { link, .. }, NetAddr::Exanet(dest)) => link.pio_send(
                ExaPeer {
                    dest,
                    key: peer.key,
                },
                len,
                deadline,
                fill,
            ),
            _ => Err(mismatch()),
        }
    }

    #[inline]
    fn pio_ready(&self) -> bool {
        self.exanet().is_some_and(Pio::pio_ready)
    }

    fn pio_recv<R, F>(&mut self, f: F) -> Option<R>
    where
        F: FnOnce(NetPeer, &[u8]) -> R,
    {
        let NetTransport::Exanet { link, .. } = self else {
            return None;
        };
        link.pio_recv(|p, d| {
            f(
                NetPeer {
                    addr: NetAddr::Exanet(p.dest),
                    key: p.key,
                },
                d,
            )
        })
    }

    fn pio_lost(&mut self) -> Option<NetPeer> {
        let NetTransport::Exanet { link, .. } = self else {
            return None;
        };
        link.pio_lost().map(|p| NetPeer {
            addr: NetAddr::Exanet(p.dest),
            key: p.key,
        })
    }

    fn pio_pending(&self) -> bool {
        self.exanet().is_some_and(Pio::pio_pending)
    }
}

fn mismatch() -> TransportError {
    TransportError::UnknownPeer
}

impl Transport for NetTransport {
    type Peer = NetPeer;

    fn capabilities(&self) -> Capabilities {
        match self {
            NetTransport::Udp(u) => u.capabilities(),
            NetTransport::Exanet { link, udp } => {
                let mut c = link.capabilities();
                if let Some(u) = udp {
                    let uc = u.capabilities();
                    c.mtu = c.mtu.min(uc.mtu);
                    c.max_inline = c.max_inline.min(c.mtu);
                }
                c
            }
        }
    }

    #[inline]
    fn send<R, F>(&mut self, peer: NetPeer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        match (self, peer.addr) {
            (NetTransport::Udp(u), NetAddr::Udp(addr)) => u.send(
                UdpPeer {
                    addr,
                    key: peer.key,
                },
                len,
                fill,
            ),
            (NetTransport::Exanet { link, .. }, NetAddr::Exanet(dest)) => link.send(
                ExaPeer {
                    dest,
                    key: peer.key,
                },
                len,
                fill,
            ),
            (NetTransport::Exanet { udp: Some(u), .. }, NetAddr::Udp(addr)) => u.send(
                UdpPeer {
                    addr,
                    key: peer.key,
                },
                len,
                fill,
            ),
            _ => Err(mismatch()),
        }
    }

    #[inline]
    fn send_parts(
        &mut self,
        peer: NetPeer,
        head: &[u8],
        body: &[u8],
    ) -> Result<(), TransportError> {
        match (self, peer.addr) {
            (NetTransport::Udp(u), NetAddr::Udp(addr))
            | (NetTransport::Exanet { udp: Some(u), .. }, NetAddr::Udp(addr)) => u.send_parts(
                UdpPeer {
                    addr,
                    key: peer.key,
                },
                head,
                body,
            ),
            (NetTransport::Exanet { link, .. }, NetAddr::Exanet(dest)) => link.send_parts(
                ExaPeer {
                    dest,
                    key: peer.key,
                },
                head,
                body,
            ),
            _ => Err(mismatch()),
        }
    }

    #[inline]
    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(NetPeer, &[u8]) -> R,
    {
        match self {
            NetTransport::Udp(u) => u.recv(|p, d| {
                f(
                    NetPeer {
                        addr: NetAddr::Udp(p.addr),
                        key: p.key,
                    },
                    d,
                )
            }),
            NetTransport::Exanet { link, udp } => {
                let mut f = Some(f);
                let got = link.recv(|p, d| {
                    let f = f.take().expect("called at most once");
                    f(
                        NetPeer {
                            addr: NetAddr::Exanet(p.dest),
                            key: p.key,
                        },
                        d,
                    )
                })?;
                if got.is_some() {
                    return Ok(got);
                }
                match (udp, f) {
                    (Some(u), Some(f)) => u.recv(|p, d| {
                        f(
                            NetPeer {
                                addr: NetAddr::Udp(p.addr),
                                key: p.key,
                            },
                            d,
                        )
                    }),
                    _ => Ok(None),
                }
            }
        }
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        match self {
            NetTransport::Udp(u) => u.flush(),
            NetTransport::Exanet { link, udp } => {
                link.flush()?;
                udp.as_mut().map_or(Ok(()), Transport::flush)
            }
        }
    }

    fn poll(&mut self, now_ns: u64) -> Result<(), TransportError> {
        match self {
            NetTransport::Udp(u) => u.poll(now_ns),
            NetTransport::Exanet { link, udp } => {
                link.poll(now_ns)?;
                udp.as_mut().map_or(Ok(()), |u| u.poll(now_ns))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udp::UdpConfig;

    #[test]
    fn udp_variant_forwards_and_refuses_exanet_peers() {
        let bind =
            || UdpTransport::bind("127.0.0.1:0".parse().unwrap(), UdpConfig::default()).unwrap();
        let mut a = NetTransport::Udp(bind());
        let mut b = NetTransport::Udp(bind());
        let to_b = NetPeer {
            addr: b.local_addr(),
            key: 7,
        };
        a.send(to_b, 3, |buf| buf.copy_from_slice(b"abc")).unwrap();
        a.send_parts(to_b, b"de", b"f").unwrap();
        let mut got = Vec::new();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < 2 && std::time::Instant::now() < until {
            if let Some(x) = b.recv(|p, d| (p, d.to_vec())).unwrap() {
                got.push(x);
            }
        }
        let from = NetPeer {
            addr: a.local_addr(),
            key: 7,
        };
        assert_eq!(got, [(from, b"abc".to_vec()), (from, b"def".to_vec())]);
        let exa = NetPeer {
            addr: NetAddr::Exanet(Dest {
                coord: 0x1000,
                ep: 1,
            }),
            key: 7,
        };
        assert_eq!(a.send(exa, 1, |_| ()), Err(TransportError::UnknownPeer));
        assert_eq!(exa.addr.to_string(), "exanet node 0x001000 ep 1");
        assert!(a.exanet().is_none() && !a.work_pending());
    }
}
