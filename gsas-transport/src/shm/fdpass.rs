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

use std::io;
use std::mem::{size_of, size_of_val};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::ShmError;

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 32;

/// Control buffer for [`MAX_FDS`] descriptors, 8-byte aligned as `cmsghdr` requires.
/// `CMSG_SPACE(32 * 4)` is 144 bytes on 64-bit Linux; 32 words leave room on any target.
type ControlBuf = [u64; 32];

const _: () = assert!(
    // SAFETY: CMSG_SPACE is a pure computation on an integer.
    unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<RawFd>()) as u32) } as usize
        <= size_of::<ControlBuf>()
);

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
    let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let mut control: ControlBuf = [0; 32];
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr().cast_mut().cast(),
        iov_len: msg.len(),
    };
    // SAFETY: an all-zero msghdr is a valid "no name, no data, no control" header.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if !raw.is_empty() {
        let data_len = size_of_val(raw.as_slice()) as u32;
        hdr.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure computation; the result fits `control` (checked at
        // compile time for MAX_FDS descriptors).
        hdr.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as _;
        // SAFETY: `hdr` points at `control`, which is large enough and 8-byte aligned, so
        // CMSG_FIRSTHDR returns a pointer to its start; we write one complete cmsghdr and
        // `raw.len()` descriptors into its data area, all within `msg_controllen` bytes.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&hdr);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                data_len as usize,
            );
        }
    }
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        // SAFETY: `hdr` describes `msg` (through `iov`) and `control`, both alive and
        // unmodified during the call; the descriptors in it are borrowed and open.
        let n = unsafe {
            libc::sendmsg(
                sock.as_raw_fd(),
                &hdr,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return if n as usize == msg.len() {
                Ok(())
            } else {
                Err(ShmError::Os {
                    op: "sendmsg(SCM_RIGHTS)".into(),
                    source: io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!(
                            "sent {n} of {} bytes (not a SOCK_SEQPACKET socket?)",
                            msg.len()
                        ),
                    ),
                })
            };
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) => wait_ready(sock, libc::POLLOUT, "send_fds", start, deadline)?,
            Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => {
                return Err(ShmError::Closed { op: "send_fds" });
            }
            _ => {
                return Err(ShmError::Os {
                    op: "sendmsg(SCM_RIGHTS)".into(),
                    source: e,
                });
            }
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
    let mut control: ControlBuf = [0; 32];
    loop {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: an all-zero msghdr is a valid "no name, no data, no control" header.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = control.as_mut_ptr().cast();
        hdr.msg_controllen = size_of::<ControlBuf>() as _;
        // SAFETY: `hdr` describes `buf` and `control`, both writable and alive for the call.
        let n = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut hdr,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
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
            }
        }
        let fds = take_fds(&hdr);
        if hdr.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(ShmError::FdsTruncated {
                received: fds.len(),
            });
        }
        if hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(ShmError::MessageTruncated {
                capacity: buf.len(),
            });
        }
        if n == 0 && fds.is_empty() {
            return Err(ShmError::Closed { op: "recv_fds" });
        }
        return Ok((n as usize, fds));
    }
}

/// Takes ownership of every descriptor in the `SCM_RIGHTS` messages of `hdr`.
fn take_fds(hdr: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `hdr.msg_control` with `hdr.msg_controllen` bytes of
    // well-formed control messages; CMSG_FIRSTHDR/CMSG_NXTHDR stay within them and return
    // null at the end. SCM_RIGHTS data holds `(cmsg_len - CMSG_LEN(0)) / 4` descriptors
    // now owned by this process (read unaligned: the data area is only 4-byte aligned).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / size_of::<RawFd>() {
                    let raw = data.add(i).read_unaligned();
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    fds
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
            Err(ShmError::TooManyFds { count: 33, max: 32 })
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
