//! [`UdpTransport`]: gsas packets in UDP datagrams.
//!
//! What it is: a non-blocking UDP socket bound to one address that implements gsas-core's
//! [`Transport`] with [`UdpPeer`] (socket address + job key) as the peer. Every datagram
//! starts with the 16-byte gsas header ([`header`]: magic `"GSAS"`, version, flags,
//! reserved, job key); the header is added on send and checked and removed on receipt, so
//! the layers above see only their payload, normally one reliability frame
//! ([`Reliable`](gsas_core::reliable::Reliable) wraps this transport). Datagrams with a bad
//! magic or version, shorter than the header, or longer than the configured MTU are
//! dropped and counted ([`UdpStats`]).
//!
//! * **MTU**: [`UdpConfig::mtu`] is the largest UDP payload, header included (config
//!   `udp_mtu`, default 61440 for loopback and veth; 1472 for a 1500-byte Ethernet path
//!   without IP fragmentation). [`Capabilities::mtu`] is that minus 16.
//! * **Capabilities**: unreliable, unordered, no RDMA, no NIC atomics.
//! * **Never blocks**: `send` fills the datagram and hands it to the kernel with
//!   `sendto`. When the socket buffer is full (`EAGAIN`, `ENOBUFS`) the datagram is kept
//!   (one datagram at most) and sent by the next `send`, `flush` or `poll`; while one is
//!   kept, `send` returns [`TransportError::WouldBlock`] *before* running `fill`. So a
//!   `fill` that ran always produced a datagram, and a caller that executes a request inside
//!   `fill` (the service engine does) never executes it twice. [`UdpTransport::wants_write`]
//!   tells a waiter to wait for `POLLOUT`. `recv` returns `Ok(None)` when nothing is pending.
//! * **Gathered send**: [`Transport::send_parts`] hands header and the caller's two parts to
//!   the kernel with one `sendmsg`, without copying them into the datagram buffer (the
//!   reliability layer sends its kept frames this way, saving one copy of every data frame:
//!   1 MiB puts through the service measured ~5% faster). Only when the socket buffer is
//!   full is the datagram copied, to be kept as above.
//! * **Send errors** that concern one destination (`EHOSTUNREACH`, `ENETUNREACH`,
//!   `ECONNREFUSED`, `EPERM` from a firewall, `EMSGSIZE`, ...) drop that datagram, are
//!   counted and remembered ([`UdpTransport::last_send_error`]); reaching a dead peer is the
//!   reliability layer's business (its deadline). Errors of the socket itself (`EBADF`, ...)
//!   are returned as [`TransportError::Failed`] with the errno.
//! * **Socket buffers** are enlarged to [`UdpConfig::socket_buffer`] bytes: with
//!   `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE` when the process may (root, `CAP_NET_ADMIN`), else
//!   `SO_SNDBUF`/`SO_RCVBUF` (capped by `net.core.[rw]mem_max`).
//! * The descriptor is exposed ([`AsFd`], [`AsRawFd`]) for `poll(2)`.
//!
//! Batching with `sendmmsg`/`recvmmsg` was considered; see the crate's benchmark notes in
//! `bench/src/bin/udp_bench.rs` for why it is not used.
//!
//! What it is not: reliable, ordered, or secure (the job key is a capability, sent in clear
//! text, that keeps jobs apart, not an authenticator).
//!
//! Thread-safety: a single-owner value (`Send`), used through `&mut self`.
//!
//! ```
//! use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};
//! use gsas_core::transport::Transport;
//!
//! let mut a = UdpTransport::bind("127.0.0.1:0".parse().unwrap(), UdpConfig::default())?;
//! let mut b = UdpTransport::bind("127.0.0.1:0".parse().unwrap(), UdpConfig::default())?;
//! let to_b = UdpPeer { addr: b.local_addr(), key: 42 };
//! a.send(to_b, 5, |buf| buf.copy_from_slice(b"hello")).unwrap();
//! let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
//! let (from, data) = loop {
//!     if let Some(got) = b.recv(|peer, data| (peer, data.to_vec())).unwrap() {
//!         break got;
//!     }
//!     assert!(std::time::Instant::now() < deadline, "nothing arrived");
//! };
//! assert_eq!((from.addr, from.key, &data[..]), (a.local_addr(), 42, &b"hello"[..]));
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod header;

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use gsas_core::transport::{Capabilities, Ordering, Transport, TransportError};

use header::{HEADER_LEN, Header, HeaderError, HeaderRepr};

/// Default largest UDP payload (header included): 60 KiB, for loopback and veth.
pub const DEFAULT_MTU: usize = 61_440;
/// Largest UDP payload over IPv4 (65535 minus the IPv4 and UDP headers).
pub const MAX_MTU: usize = 65_507;
/// Default socket buffer size asked for: 8 MiB each way.
pub const DEFAULT_SOCKET_BUFFER: usize = 8 << 20;

/// Most datagrams one `recv` call discards (bad header, oversized) before it returns
/// `Ok(None)`, so that garbage cannot keep a caller inside `recv`.
const RECV_BUDGET: usize = 64;

/// `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE` of the asm-generic socket options (x86, Arm,
/// RISC-V, PowerPC); the `libc` crate does not export them for glibc targets.
#[cfg(not(any(target_arch = "mips", target_arch = "mips64", target_arch = "sparc64")))]
const SO_SNDBUFFORCE: libc::c_int = 32;
#[cfg(not(any(target_arch = "mips", target_arch = "mips64", target_arch = "sparc64")))]
const SO_RCVBUFFORCE: libc::c_int = 33;

/// Settings of a [`UdpTransport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    /// Largest UDP payload, the 16-byte gsas header included (17 ..= 65507).
    pub mtu: usize,
    /// Socket send and receive buffer size to ask for, in bytes.
    pub socket_buffer: usize,
}

impl UdpConfig {
    /// Defaults: [`DEFAULT_MTU`] and [`DEFAULT_SOCKET_BUFFER`].
    pub const fn new() -> Self {
        UdpConfig {
            mtu: DEFAULT_MTU,
            socket_buffer: DEFAULT_SOCKET_BUFFER,
        }
    }
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig::new()
    }
}

/// A peer of a [`UdpTransport`]: where datagrams go and the job key they carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpPeer {
    /// The peer's socket address.
    pub addr: SocketAddr,
    /// The job key in the header: set on datagrams sent to this peer, and read from
    /// datagrams received (so a service learns which job a request claims to belong to).
    pub key: u64,
}

/// Counters of a [`UdpTransport`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams handed to the kernel.
    pub datagrams_sent: u64,
    /// Payload bytes (without the gsas header) in them.
    pub bytes_sent: u64,
    /// Datagrams received and handed to the caller.
    pub datagrams_received: u64,
    /// Payload bytes in them.
    pub bytes_received: u64,
    /// Sends that found the socket buffer full and kept the datagram for later.
    pub sends_deferred: u64,
    /// `send` calls refused with `WouldBlock` because a kept datagram was still waiting.
    pub sends_refused: u64,
    /// Datagrams dropped because the kernel refused them for their destination.
    pub send_errors: u64,
    /// Received datagrams dropped: shorter than the header.
    pub runts: u64,
    /// Received datagrams dropped: wrong magic.
    pub bad_magic: u64,
    /// Received datagrams dropped: unknown header version.
    pub bad_version: u64,
    /// Received datagrams dropped: longer than the MTU.
    pub oversized: u64,
}

/// gsas packets over a UDP socket; see the [module docs](self).
#[derive(Debug)]
pub struct UdpTransport {
    socket: UdpSocket,
    local: SocketAddr,
    config: UdpConfig,
    /// Header plus payload of the datagram being sent (or kept).
    tx: Box<[u8]>,
    /// Receive buffer: one byte more than the MTU, to detect oversized datagrams.
    rx: Box<[u8]>,
    /// A datagram in `tx` that the kernel refused with `EAGAIN`: destination and length.
    kept: Option<(SocketAddr, usize)>,
    last_send_error: Option<i32>,
    stats: UdpStats,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl UdpTransport {
    /// Binds a non-blocking UDP socket to `addr` (port 0 for an ephemeral port) and
    /// enlarges its buffers.
    ///
    /// Errors: `InvalidInput` for an MTU outside `17..=65507`; the bind error with the
    /// address in the message (e.g. `binding UDP 10.0.0.1:7101: Address in use`).
    pub fn bind(addr: SocketAddr, config: UdpConfig) -> io::Result<UdpTransport> {
        if !(HEADER_LEN + 1..=MAX_MTU).contains(&config.mtu) {
            return Err(invalid(format!(
                "UDP MTU {} is not in {}..={MAX_MTU} (it includes the {HEADER_LEN}-byte gsas header)",
                config.mtu,
                HEADER_LEN + 1
            )));
        }
        let socket = UdpSocket::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("binding UDP {addr}: {e}")))?;
        socket.set_nonblocking(true)?;
        let local = socket.local_addr()?;
        let t = UdpTransport {
            socket,
            local,
            config,
            tx: vec![0u8; config.mtu].into_boxed_slice(),
            rx: vec![0u8; config.mtu + 1].into_boxed_slice(),
            kept: None,
            last_send_error: None,
            stats: UdpStats::default(),
        };
        t.enlarge_buffers();
        Ok(t)
    }

    /// Asks for `socket_buffer` bytes each way: forced when permitted, else as far as the
    /// system maximum allows. Failures are logged; the socket works with smaller buffers.
    fn enlarge_buffers(&self) {
        let size = libc::c_int::try_from(self.config.socket_buffer).unwrap_or(libc::c_int::MAX);
        #[cfg(not(any(target_arch = "mips", target_arch = "mips64", target_arch = "sparc64")))]
        let options = [
            (SO_SNDBUFFORCE, libc::SO_SNDBUF, "send"),
            (SO_RCVBUFFORCE, libc::SO_RCVBUF, "receive"),
        ];
        #[cfg(any(target_arch = "mips", target_arch = "mips64", target_arch = "sparc64"))]
        let options = [
            (libc::SO_SNDBUF, libc::SO_SNDBUF, "send"),
            (libc::SO_RCVBUF, libc::SO_RCVBUF, "receive"),
        ];
        for (forced, plain, which) in options {
            if setsockopt_int(self.socket.as_raw_fd(), forced, size).is_err() {
                if let Err(e) = setsockopt_int(self.socket.as_raw_fd(), plain, size) {
                    log::warn!(
                        "UDP {}: cannot set the {which} buffer to {size} bytes: {e}",
                        self.local
                    );
                }
            }
        }
    }

    /// The bound address (with the actual port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The configuration.
    pub fn config(&self) -> UdpConfig {
        self.config
    }

    /// The counters.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// The kernel's send and receive buffer sizes (as reported by `getsockopt`, which on
    /// Linux is twice the usable size).
    pub fn socket_buffers(&self) -> io::Result<(usize, usize)> {
        let fd = self.socket.as_raw_fd();
        Ok((
            getsockopt_int(fd, libc::SO_SNDBUF)? as usize,
            getsockopt_int(fd, libc::SO_RCVBUF)? as usize,
        ))
    }

    /// Whether a datagram is kept for lack of socket buffer space: wait for `POLLOUT`
    /// and call `flush` or `poll`.
    pub fn wants_write(&self) -> bool {
        self.kept.is_some()
    }

    /// The errno of the last datagram dropped because the kernel refused it.
    pub fn last_send_error(&self) -> Option<io::Error> {
        self.last_send_error.map(io::Error::from_raw_os_error)
    }

    /// Hands `tx[..len]` to the kernel. `Ok(true)`: gone (sent or dropped and counted);
    /// `Ok(false)`: the socket buffer is full, try again later.
    fn transmit(&mut self, to: SocketAddr, len: usize) -> Result<bool, TransportError> {
        loop {
            match self.socket.send_to(&self.tx[..len], to) {
                Ok(_) => return Ok(self.sent(len)),
                Err(e) => match self.send_failed(to, &e)? {
                    Some(gone) => return Ok(gone),
                    None => continue,
                },
            }
        }
    }

    /// Checks that a packet of `len` payload bytes may be sent now: `TooLarge` above the
    /// MTU; `WouldBlock` (counted) while a kept datagram still cannot be pushed out.
    fn admit(&mut self, len: usize) -> Result<(), TransportError> {
        if len > self.config.mtu - HEADER_LEN {
            return Err(TransportError::TooLarge);
        }
        if self.kept.is_some() {
            self.push_kept()?;
            if self.kept.is_some() {
                self.stats.sends_refused += 1;
                return Err(TransportError::WouldBlock);
            }
        }
        Ok(())
    }

    /// Counts a datagram of `len` bytes (header included) handed to the kernel; `true`.
    fn sent(&mut self, len: usize) -> bool {
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += (len - HEADER_LEN) as u64;
        true
    }

    /// Classifies a failed send to `to`: `None` to retry (`EINTR`), `Some(false)` when the
    /// socket buffer is full, `Some(true)` when the datagram was dropped for its
    /// destination (counted and remembered), an error when the socket itself failed.
    fn send_failed(
        &mut self,
        to: SocketAddr,
        e: &io::Error,
    ) -> Result<Option<bool>, TransportError> {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        match errno {
            libc::EINTR => Ok(None),
            libc::EAGAIN | libc::ENOBUFS => Ok(Some(false)),
            libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::ENETDOWN
            | libc::EHOSTDOWN
            | libc::ECONNREFUSED
            | libc::EPERM
            | libc::EACCES
            | libc::EMSGSIZE
            | libc::EADDRNOTAVAIL
            | libc::EAFNOSUPPORT
            | libc::EINVAL => {
                if self.last_send_error != Some(errno) {
                    log::debug!("UDP {} -> {to}: datagram dropped: {e}", self.local);
                }
                self.stats.send_errors += 1;
                self.last_send_error = Some(errno);
                Ok(Some(true))
            }
            _ => Err(TransportError::Failed(errno)),
        }
    }

    /// Sends header, `head` and `body` as one datagram to `to` with `sendmsg`, gathering
    /// from the three buffers (no copy into `tx`). Same outcomes as [`Self::transmit`].
    fn transmit_gathered(
        &mut self,
        to: SocketAddr,
        header: &[u8; HEADER_LEN],
        head: &[u8],
        body: &[u8],
    ) -> Result<bool, TransportError> {
        let (name, name_len) = sockaddr_of(to);
        let mut iov = [
            libc::iovec {
                iov_base: header.as_ptr().cast_mut().cast(),
                iov_len: header.len(),
            },
            libc::iovec {
                iov_base: head.as_ptr().cast_mut().cast(),
                iov_len: head.len(),
            },
            libc::iovec {
                iov_base: body.as_ptr().cast_mut().cast(),
                iov_len: body.len(),
            },
        ];
        // SAFETY: an all-zero msghdr is a valid value (null pointers, zero lengths); the
        // fields that matter are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&raw const name).cast_mut().cast();
        msg.msg_namelen = name_len;
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        let len = HEADER_LEN + head.len() + body.len();
        loop {
            // SAFETY: `msg` points at `name` (a sockaddr of `name_len` bytes) and at three
            // iovecs describing live, readable slices; all outlive the call, and the kernel
            // only reads through them. The descriptor is our open socket.
            let n = unsafe { libc::sendmsg(self.socket.as_raw_fd(), &msg, 0) };
            if n >= 0 {
                return Ok(self.sent(len));
            }
            let e = io::Error::last_os_error();
            if let Some(gone) = self.send_failed(to, &e)? {
                return Ok(gone);
            }
        }
    }

    /// Tries to send the kept datagram, if any.
    fn push_kept(&mut self) -> Result<(), TransportError> {
        if let Some((to, len)) = self.kept {
            if self.transmit(to, len)? {
                self.kept = None;
            }
        }
        Ok(())
    }
}

/// `to` as a C socket address for `sendmsg`, with its length.
fn sockaddr_of(to: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid (family AF_UNSPEC).
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for every socket address
            // type, so writing a sockaddr_in at its start is in bounds and aligned.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in>().write(sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as for IPv4 above.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in6>().write(sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn setsockopt_int(fd: RawFd, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from the pointer to `value`, which
    // lives across the call; `fd` is a socket kept open by the caller.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt_int(fd: RawFd, option: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes to `value` and updates `len`; both live
    // across the call; `fd` is a socket kept open by the caller.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

impl AsFd for UdpTransport {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl AsRawFd for UdpTransport {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

/// No PIO path over UDP.
impl crate::pio::Pio for UdpTransport {}

impl Transport for UdpTransport {
    type Peer = UdpPeer;

    fn capabilities(&self) -> Capabilities {
        let mtu = self.config.mtu - HEADER_LEN;
        Capabilities {
            max_inline: mtu,
            mtu,
            ordering: Ordering::Unordered,
            reliable: false,
            rdma_put: false,
            rdma_get: false,
            atomic_offload: false,
            atomics_coherent_with_cpu: true,
        }
    }

    /// Writes the header and lets `fill` write the payload into the datagram buffer, then
    /// sends it (or keeps it when the socket buffer is full; see the module docs).
    ///
    /// Errors: `TooLarge` above the MTU; `WouldBlock` while a kept datagram still waits
    /// (`fill` does not run); `Failed(errno)` if the socket itself failed.
    fn send<R, F>(&mut self, peer: UdpPeer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        self.admit(len)?;
        let total = HEADER_LEN + len;
        HeaderRepr { key: peer.key }.emit(&mut Header::new_unchecked(&mut self.tx[..HEADER_LEN]));
        let result = fill(&mut self.tx[HEADER_LEN..total]);
        if !self.transmit(peer.addr, total)? {
            self.stats.sends_deferred += 1;
            self.kept = Some((peer.addr, total));
        }
        Ok(result)
    }

    /// Sends `head` then `body` as one datagram, gathered by `sendmsg` straight from the
    /// caller's buffers. When the socket buffer is full the datagram is copied into the
    /// kept buffer and sent later, as `send` does. Errors as `send`.
    fn send_parts(
        &mut self,
        peer: UdpPeer,
        head: &[u8],
        body: &[u8],
    ) -> Result<(), TransportError> {
        let len = head.len() + body.len();
        self.admit(len)?;
        let mut header = [0u8; HEADER_LEN];
        HeaderRepr { key: peer.key }.emit(&mut Header::new_unchecked(&mut header[..]));
        if !self.transmit_gathered(peer.addr, &header, head, body)? {
            let total = HEADER_LEN + len;
            self.tx[..HEADER_LEN].copy_from_slice(&header);
            self.tx[HEADER_LEN..HEADER_LEN + head.len()].copy_from_slice(head);
            self.tx[HEADER_LEN + head.len()..total].copy_from_slice(body);
            self.stats.sends_deferred += 1;
            self.kept = Some((peer.addr, total));
        }
        Ok(())
    }

    /// Hands the next valid datagram's payload to `f`; `Ok(None)` when none is pending.
    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(UdpPeer, &[u8]) -> R,
    {
        for _ in 0..RECV_BUDGET {
            let (n, from) = match self.socket.recv_from(&mut self.rx) {
                Ok(got) => got,
                Err(e) => match e.raw_os_error().unwrap_or(libc::EIO) {
                    libc::EAGAIN => return Ok(None),
                    // EINTR: try again. ECONNREFUSED and friends: an ICMP error about an
                    // earlier datagram of ours, not a datagram; skip it.
                    libc::EINTR
                    | libc::ECONNREFUSED
                    | libc::EHOSTUNREACH
                    | libc::ENETUNREACH
                    | libc::ECONNRESET => continue,
                    errno => return Err(TransportError::Failed(errno)),
                },
            };
            if n > self.config.mtu {
                self.stats.oversized += 1;
                continue;
            }
            let header = match Header::new_checked(&self.rx[..n]) {
                Ok(h) => h,
                Err(_) => {
                    self.stats.runts += 1;
                    continue;
                }
            };
            match HeaderRepr::parse(&header) {
                Ok(repr) => {
                    self.stats.datagrams_received += 1;
                    self.stats.bytes_received += (n - HEADER_LEN) as u64;
                    let peer = UdpPeer {
                        addr: from,
                        key: repr.key,
                    };
                    return Ok(Some(f(peer, &self.rx[HEADER_LEN..n])));
                }
                Err(HeaderError::BadMagic) => self.stats.bad_magic += 1,
                Err(HeaderError::BadVersion(_)) => self.stats.bad_version += 1,
                Err(HeaderError::Truncated) => self.stats.runts += 1,
            }
        }
        Ok(None)
    }

    /// Sends the kept datagram if the socket has room now.
    fn flush(&mut self) -> Result<(), TransportError> {
        self.push_kept()
    }

    /// Sends the kept datagram if the socket has room now (UDP has no timers).
    fn poll(&mut self, _now_ns: u64) -> Result<(), TransportError> {
        self.push_kept()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn bind() -> UdpTransport {
        UdpTransport::bind("127.0.0.1:0".parse().unwrap(), UdpConfig::default()).unwrap()
    }

    fn recv_one(t: &mut UdpTransport) -> Option<(UdpPeer, Vec<u8>)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(got) = t.recv(|p, d| (p, d.to_vec())).unwrap() {
                return Some(got);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        None
    }

    #[test]
    fn bad_config_and_bind_errors_are_named() {
        let e = UdpTransport::bind(
            "127.0.0.1:0".parse().unwrap(),
            UdpConfig {
                mtu: 70_000,
                ..UdpConfig::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("UDP MTU 70000"), "{e}");
        let a = bind();
        let e = UdpTransport::bind(a.local_addr(), UdpConfig::default()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("binding UDP {}", a.local_addr())),
            "{e}"
        );
    }

    #[test]
    fn foreign_datagrams_are_dropped_and_counted() {
        let mut t = bind();
        let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = t.local_addr();
        raw.send_to(b"short", to).unwrap();
        raw.send_to(b"XXXX\x01\0\0\0\0\0\0\0\0\0\0\0payload", to)
            .unwrap();
        raw.send_to(b"GSAS\x07\0\0\0\0\0\0\0\0\0\0\0payload", to)
            .unwrap();
        raw.send_to(&vec![0u8; DEFAULT_MTU + 1], to).unwrap();
        raw.send_to(b"GSAS\x01\0\0\0\x2a\0\0\0\0\0\0\0good", to)
            .unwrap();
        let (peer, data) = recv_one(&mut t).expect("the valid datagram arrives");
        assert_eq!(
            (peer.addr, peer.key, &data[..]),
            (raw.local_addr().unwrap(), 42, &b"good"[..])
        );
        let s = t.stats();
        assert_eq!(
            (
                s.runts,
                s.bad_magic,
                s.bad_version,
                s.oversized,
                s.datagrams_received
            ),
            (1, 1, 1, 1, 1)
        );
        assert_eq!(t.recv(|_, _| ()).unwrap(), None);
    }

    #[test]
    fn header_and_key_on_the_wire() {
        let mut t = bind();
        let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = UdpPeer {
            addr: raw.local_addr().unwrap(),
            key: 0x1122_3344_5566_7788,
        };
        let r = t.send(peer, 3, |b| {
            b.copy_from_slice(b"abc");
            7
        });
        assert_eq!(r, Ok(7));
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = raw.recv_from(&mut buf).unwrap();
        assert_eq!(from, t.local_addr());
        assert_eq!(
            &buf[..n],
            b"GSAS\x01\0\0\0\x88\x77\x66\x55\x44\x33\x22\x11abc"
        );
        assert_eq!(t.stats().datagrams_sent, 1);
        assert_eq!(t.stats().bytes_sent, 3);
    }

    #[test]
    fn gathered_parts_form_one_datagram() {
        let mut t = bind();
        let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = UdpPeer {
            addr: raw.local_addr().unwrap(),
            key: 0x0102_0304_0506_0708,
        };
        let body: Vec<u8> = (0..DEFAULT_MTU - HEADER_LEN - 5)
            .map(|i| (i % 251) as u8)
            .collect();
        t.send_parts(peer, b"head!", &body).unwrap();
        t.send_parts(peer, b"", b"xy").unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0u8; DEFAULT_MTU + 1];
        let (n, from) = raw.recv_from(&mut buf).unwrap();
        assert_eq!(from, t.local_addr());
        assert_eq!(n, DEFAULT_MTU);
        assert_eq!(
            &buf[..HEADER_LEN],
            b"GSAS\x01\0\0\0\x08\x07\x06\x05\x04\x03\x02\x01"
        );
        assert_eq!(&buf[HEADER_LEN..HEADER_LEN + 5], b"head!");
        assert!(buf[HEADER_LEN + 5..n] == body[..], "body differs");
        let (n, _) = raw.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[HEADER_LEN..n], b"xy");
        assert_eq!(t.stats().datagrams_sent, 2);
        assert_eq!(t.stats().bytes_sent, (DEFAULT_MTU - HEADER_LEN + 2) as u64);
        // One byte over the MTU is refused before anything is sent.
        let big = vec![0u8; DEFAULT_MTU - HEADER_LEN - 4];
        assert_eq!(
            t.send_parts(peer, b"12345", &big),
            Err(TransportError::TooLarge)
        );
        assert_eq!(t.stats().datagrams_sent, 2);
    }

    #[test]
    fn gathered_parts_reach_an_ipv6_peer() {
        // Not every container has an IPv6 loopback; without one there is nothing to test.
        let Ok(raw) = UdpSocket::bind("[::1]:0") else {
            return;
        };
        let mut t = UdpTransport::bind("[::1]:0".parse().unwrap(), UdpConfig::default()).unwrap();
        let peer = UdpPeer {
            addr: raw.local_addr().unwrap(),
            key: 9,
        };
        t.send_parts(peer, b"ab", b"cd").unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = raw.recv_from(&mut buf).unwrap();
        assert_eq!(from, t.local_addr());
        assert_eq!(&buf[HEADER_LEN..n], b"abcd");
    }

    #[test]
    fn gathered_send_to_an_unroutable_destination_is_dropped_and_recorded() {
        let mut t = bind();
        let peer = UdpPeer {
            addr: "[::1]:9".parse().unwrap(),
            key: 1,
        };
        // An IPv6 destination from an IPv4 socket: refused by the kernel for this
        // datagram only (EAFNOSUPPORT or EINVAL), which is counted, not returned.
        assert_eq!(t.send_parts(peer, b"a", b"b"), Ok(()));
        assert_eq!(t.stats().send_errors, 1);
        assert_eq!(t.stats().datagrams_sent, 0);
        assert!(t.last_send_error().is_some());
    }

    #[test]
    fn too_large_does_not_fill() {
        let mut t = bind();
        let peer = UdpPeer {
            addr: t.local_addr(),
            key: 1,
        };
        let mtu = t.capabilities().mtu;
        assert_eq!(mtu, DEFAULT_MTU - HEADER_LEN);
        let mut filled = false;
        assert_eq!(
            t.send(peer, mtu + 1, |_| filled = true),
            Err(TransportError::TooLarge)
        );
        assert!(!filled);
        assert!(!t.capabilities().reliable);
        assert_eq!(t.capabilities().ordering, Ordering::Unordered);
    }

    #[test]
    fn unroutable_destination_drops_and_records() {
        let mut t = bind();
        // An IPv6 destination from an IPv4 socket: the kernel refuses it at once.
        let peer = UdpPeer {
            addr: "[::1]:9".parse().unwrap(),
            key: 1,
        };
        assert_eq!(t.send(peer, 1, |b| b[0] = 1), Ok(()));
        assert_eq!(t.stats().send_errors, 1);
        assert!(t.last_send_error().is_some());
        assert!(!t.wants_write());
    }

    #[test]
    fn buffers_are_enlarged() {
        let t = bind();
        let (snd, rcv) = t.socket_buffers().unwrap();
        // Linux reports twice the size set. Forced (as root) the full request is granted;
        // otherwise up to the system maximum.
        let cap = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(0)
        };
        let want = DEFAULT_SOCKET_BUFFER;
        assert!(
            snd >= want.min(cap("/proc/sys/net/core/wmem_max")),
            "send buffer {snd}"
        );
        assert!(
            rcv >= want.min(cap("/proc/sys/net/core/rmem_max")),
            "receive buffer {rcv}"
        );
    }
}
