//! Passing descriptors with a message over a Unix `SOCK_SEQPACKET` socket (`SCM_RIGHTS`).
//!
//! What it is: [`send_fds`] sends one message with up to [`MAX_FDS`] descriptors attached;
//! [`recv_fds`] receives one message and the descriptors that came with it (as
//! [`OwnedFd`]s, close-on-exec). [`seqpacket_pair`] makes a connected pair of sockets, for
//! a service thread and its PEs in one process, or for a child process. Both calls work on
//! blocking and non-blocking sockets alike (they use `MSG_DONTWAIT` and wait in `poll(2)`
//! themselves), never wait longer than the timeout given, and never raise `SIGPIPE`.
//!
//! Messages must not be empty: on a `SOCK_SEQPACKET` socket an empty read is how the end
//! of the connection shows, so a received empty message without descriptors is reported
//! as [`ShmError::Closed`].
//!
//! Built on `gsas_sys::fdpass` (the one `SCM_RIGHTS` encoding): this module adds the
//! deadline and the segment layer's named errors.
//!
//! What it is not: the control protocol (what the messages mean belongs to the service and
//! node client) or a listener/connector for named sockets.
//!
//! Thread-safety: stateless functions; two threads must not receive on one socket at once
//! if they care which message each gets.
//!
//! ```
//! use std::time::Duration;
//! use gsas_transport::shm::{Segment, recv_fds, send_fds, seqpacket_pair};
//!
//! let (service, pe) = seqpacket_pair()?;
//! let heap = Segment::create("pe0-heap", 1 << 16)?;
//! heap.write(0, b"symmetric")?;
//! send_fds(&service, b"segment 0", &[heap.fd()], Duration::from_secs(5))?;
//!
//! let mut msg = [0u8; 64];
//! let (n, mut fds) = recv_fds(&pe, &mut msg, Duration::from_secs(5))?;
//! assert_eq!(&msg[..n], b"segment 0");
//! let mapped = Segment::map(fds.pop().unwrap(), "pe0-heap (received)")?;
//! let mut out = [0u8; 9];
//! mapped.read(0, &mut out)?;
//! assert_eq!(&out, b"symmetric");
//! # Ok::<(), gsas_transport::shm::ShmError>(())
//! ```

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use gsas_sys::fdpass::{Received, recvmsg_fds, sendmsg_fds};

use super::ShmError;

/// Most descriptors one message carries.
pub const MAX_FDS: usize = gsas_sys::fdpass::MAX_FDS;

/// A connected pair of Unix `SOCK_SEQPACKET` sockets (close-on-exec).
///
/// Errors: [`ShmError::Os`] if `socketpair` fails.
pub fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd), ShmError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into the 2-element array we pass.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(ShmError::last_os("socketpair(AF_UNIX, SOCK_SEQPACKET)"));
    }
    // SAFETY: both descriptors were just created by socketpair and are owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Waits for `events` on `sock` until `deadline`; `TimedOut` naming `op` when it passes.
fn wait_ready(
    sock: BorrowedFd<'_>,
    events: libc::c_short,
    op: &'static str,
    start: Instant,
    deadline: Instant,
) -> Result<(), ShmError> {
    let now = Instant::now();
    let ready = now < deadline
        && gsas_sys::fd::wait_fd(sock, events, deadline - now).map_err(|source| ShmError::Os {
            op: format!("poll({op})"),
            source,
        })?;
    if ready {
        Ok(())
    } else {
        Err(ShmError::TimedOut {
            op,
            waited: start.elapsed(),
        })
    }
}

/// Sends `msg` with the descriptors `fds` attached, as one message.
///
/// Waits at most `timeout` for room in the socket buffer.
///
/// Errors: [`ShmError::Invalid`] for an empty message, [`ShmError::TooManyFds`] above
/// [`MAX_FDS`], [`ShmError::Closed`] if the peer is gone, [`ShmError::TimedOut`],
/// [`ShmError::Os`] for other failures (e.g. `EMSGSIZE` for a message above the socket
/// buffer size).
pub fn send_fds(
    sock: &impl AsFd,
    msg: &[u8],
    fds: &[BorrowedFd<'_>],
    timeout: Duration,
) -> Result<(), ShmError> {
    let sock = sock.as_fd();
    if msg.is_empty() {
        return Err(ShmError::invalid(
            "message to send with descriptors",
            "must not be empty",
        ));
    }
    if fds.len() > MAX_FDS {
        return Err(ShmError::TooManyFds {
            count: fds.len(),
            max: MAX_FDS,
        });
    }
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        match sendmsg_fds(sock, &[IoSlice::new(msg)], fds, libc::MSG_DONTWAIT) {
            Ok(n) if n == msg.len() => return Ok(()),
            Ok(n) => {
                return Err(ShmError::Os {
                    op: "sendmsg(SCM_RIGHTS)".into(),
                    source: io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!(
                            "sent {n} of {} bytes (not a SOCK_SEQPACKET socket?)",
                            msg.len()
                        ),
                    ),
                });
            }
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN) => {
                    wait_ready(sock, libc::POLLOUT, "send_fds", start, deadline)?;
                }
                Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => {
                    return Err(ShmError::Closed { op: "send_fds" });
                }
                _ => {
                    return Err(ShmError::Os {
                        op: "sendmsg(SCM_RIGHTS)".into(),
                        source: e,
                    });
                }
            },
        }
    }
}

/// Receives one message into `buf` and the descriptors attached to it (close-on-exec).
/// Returns the message length and the descriptors.
///
/// Waits at most `timeout` for a message.
///
/// Errors: [`ShmError::Closed`] at the end of the connection, [`ShmError::TimedOut`],
/// [`ShmError::MessageTruncated`] if the message did not fit `buf`,
/// [`ShmError::FdsTruncated`] if more than [`MAX_FDS`] descriptors were attached, and
/// [`ShmError::Os`]. Descriptors that arrived with a refused message are closed.
pub fn recv_fds(
    sock: &impl AsFd,
    buf: &mut [u8],
    timeout: Duration,
) -> Result<(usize, Vec<OwnedFd>), ShmError> {
    let sock = sock.as_fd();
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        let Received {
            len,
            fds,
            truncated,
            fds_truncated,
        } = match recvmsg_fds(sock, buf, libc::MSG_DONTWAIT) {
            Ok(r) => r,
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN) => {
                    wait_ready(sock, libc::POLLIN, "recv_fds", start, deadline)?;
                    continue;
                }
                Some(libc::ECONNRESET) => return Err(ShmError::Closed { op: "recv_fds" }),
                _ => {
                    return Err(ShmError::Os {
                        op: "recvmsg(SCM_RIGHTS)".into(),
                        source: e,
                    });
                }
            },
        };
        if fds_truncated {
            return Err(ShmError::FdsTruncated {
                received: fds.len(),
                out_of_descriptors: fds.len() < MAX_FDS,
            });
        }
        if truncated {
            return Err(ShmError::MessageTruncated {
                capacity: buf.len(),
            });
        }
        if len == 0 && fds.is_empty() {
            return Err(ShmError::Closed { op: "recv_fds" });
        }
        return Ok((len, fds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::Segment;

    const T: Duration = Duration::from_secs(10);

    #[test]
    fn passes_several_segments_and_plain_messages() {
        let (a, b) = seqpacket_pair().unwrap();
        let segs: Vec<Segment> = (0..3)
            .map(|i| {
                let s = Segment::create(&format!("seg{i}"), 4096 * (i + 1)).unwrap();
                s.write(0, &[i as u8 + 1; 8]).unwrap();
                s
            })
            .collect();
        let fds: Vec<BorrowedFd<'_>> = segs.iter().map(Segment::fd).collect();
        send_fds(&a, b"three", &fds, T).unwrap();
        send_fds(&a, b"none", &[], T).unwrap();
        let mut buf = [0u8; 16];
        let (n, got) = recv_fds(&b, &mut buf, T).unwrap();
        assert_eq!(&buf[..n], b"three");
        assert_eq!(got.len(), 3);
        for (i, fd) in got.into_iter().enumerate() {
            let m = Segment::map(fd, "received").unwrap();
            assert_eq!(m.len(), 4096 * (i + 1));
            let mut out = [0u8; 8];
            m.read(0, &mut out).unwrap();
            assert_eq!(out, [i as u8 + 1; 8]);
        }
        let (n, got) = recv_fds(&b, &mut buf, T).unwrap();
        assert_eq!((&buf[..n], got.len()), (&b"none"[..], 0));
    }

    #[test]
    fn errors_are_named() {
        let (a, b) = seqpacket_pair().unwrap();
        assert!(matches!(
            send_fds(&a, b"", &[], T),
            Err(ShmError::Invalid { .. })
        ));
        let many: Vec<BorrowedFd<'_>> = (0..MAX_FDS + 1).map(|_| a.as_fd()).collect();
        assert!(matches!(
            send_fds(&a, b"x", &many, T),
            Err(ShmError::TooManyFds { count, max }) if count == MAX_FDS + 1 && max == MAX_FDS
        ));
        let e = recv_fds(&b, &mut [0u8; 4], Duration::from_millis(20)).unwrap_err();
        assert!(
            e.to_string().starts_with("recv_fds: timed out after"),
            "{e}"
        );
        send_fds(&a, b"too long for four", &[b.as_fd()], T).unwrap();
        assert!(matches!(
            recv_fds(&b, &mut [0u8; 4], T),
            Err(ShmError::MessageTruncated { capacity: 4 })
        ));
        drop(a);
        let e = recv_fds(&b, &mut [0u8; 4], T).unwrap_err();
        assert!(matches!(e, ShmError::Closed { op: "recv_fds" }), "{e}");
        let e = send_fds(&b, b"x", &[], T).unwrap_err();
        assert!(matches!(e, ShmError::Closed { op: "send_fds" }), "{e}");
    }

    #[test]
    fn full_socket_times_out_on_send() {
        let (a, _b) = seqpacket_pair().unwrap();
        let big = vec![7u8; 32 * 1024];
        let mut sent = 0;
        let e = loop {
            match send_fds(&a, &big, &[], Duration::from_millis(20)) {
                Ok(()) => sent += 1,
                Err(e) => break e,
            }
            assert!(sent < 10_000, "the socket buffer never filled");
        };
        assert!(
            matches!(e, ShmError::TimedOut { op: "send_fds", .. }),
            "{e}"
        );
        assert!(sent > 0);
    }
}
