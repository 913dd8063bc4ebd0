//! Descriptors passed with a message over a Unix socket (`SCM_RIGHTS`): the one encoding
//! of the control messages in the tree.
//!
//! What it is: [`sendmsg_fds`] and [`recvmsg_fds`], one `sendmsg`/`recvmsg` each (retried
//! after `EINTR`, never raising `SIGPIPE`, received descriptors close-on-exec), with up to
//! [`MAX_FDS`] descriptors; [`send_with_fd`] and [`recv_with_fd`], the one-descriptor forms
//! the Exanet emulator's registration protocol uses.
//!
//! What it is not: a policy. Waiting with a deadline, and what an empty message or a
//! truncation means, belong to the caller (`gsas_transport::shm::send_fds`/`recv_fds` give
//! them the segment layer's named errors).
//!
//! Thread safety: free functions on borrowed descriptors.

use std::io::{self, IoSlice};
use std::mem::{self, size_of};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Most descriptors one message carries: Linux's own limit (`SCM_MAX_FD`, 253) less one, so
/// that a node's service hands a PE the segments of 84 other PEs in one reply.
pub const MAX_FDS: usize = 252;

/// Control buffer for [`MAX_FDS`] descriptors, 8-byte aligned as `cmsghdr` requires.
/// `CMSG_SPACE(252 * 4)` is 1,024 bytes on 64-bit Linux; 136 words leave room on any target.
type ControlBuf = [u64; 136];

const _: () = assert!(
    // SAFETY: CMSG_SPACE is a pure computation on an integer.
    unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<RawFd>()) as u32) } as usize
        <= size_of::<ControlBuf>()
);

/// `sendmsg` of `bufs` with `fds` attached (`SCM_RIGHTS`) and `flags` (`MSG_NOSIGNAL` is
/// always added); returns the bytes sent.
///
/// Errors: `InvalidInput` for more than [`MAX_FDS`] descriptors; the `sendmsg` error
/// otherwise (`EINTR` is retried).
pub fn sendmsg_fds(
    sock: BorrowedFd<'_>,
    bufs: &[IoSlice<'_>],
    fds: &[BorrowedFd<'_>],
    flags: libc::c_int,
) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} descriptors in one message (at most {MAX_FDS})",
                fds.len()
            ),
        ));
    }
    let mut control: ControlBuf = [0; 136];
    // SAFETY: an all-zero msghdr is a valid "no name, no data, no control" header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = bufs.as_ptr().cast_mut().cast::<libc::iovec>();
    msg.msg_iovlen = bufs.len() as _;
    if !fds.is_empty() {
        let data_len = (fds.len() * size_of::<RawFd>()) as u32;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure computation; the result fits `control` (checked at
        // compile time for MAX_FDS descriptors).
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as _;
        // SAFETY: `msg` points at `control`, which is large enough and 8-byte aligned, so
        // CMSG_FIRSTHDR returns its start; one complete cmsghdr and `fds.len()`
        // descriptors are written within `msg_controllen` bytes (the data area is only
        // 4-byte aligned: written unaligned).
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
            let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: `msg` describes `bufs` (IoSlice is ABI compatible with iovec) and
        // `control`, both alive and unmodified during the call; the descriptors in it are
        // borrowed and open.
        let rc = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, flags | libc::MSG_NOSIGNAL) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What one [`recvmsg_fds`] received.
#[derive(Debug)]
pub struct Received {
    /// Bytes of the message in the buffer (0 with no descriptors: the peer closed, on a
    /// stream or `SOCK_SEQPACKET` socket).
    pub len: usize,
    /// The descriptors that came with it, owned and close-on-exec.
    pub fds: Vec<OwnedFd>,
    /// The message was longer than the buffer (`MSG_TRUNC`).
    pub truncated: bool,
    /// More descriptors came than [`MAX_FDS`]; the others were closed by the kernel
    /// (`MSG_CTRUNC`).
    pub fds_truncated: bool,
}

/// `recvmsg` of one message into `buf` with `flags` (`MSG_CMSG_CLOEXEC` is always added),
/// taking every descriptor attached to it.
///
/// Errors: the `recvmsg` error (`EINTR` is retried).
pub fn recvmsg_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    flags: libc::c_int,
) -> io::Result<Received> {
    let mut control: ControlBuf = [0; 136];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid "no name, no data, no control" header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<ControlBuf>() as _;
    let len = loop {
        // SAFETY: `msg` describes `buf` and `control`, both writable and alive for the call.
        let rc =
            unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, flags | libc::MSG_CMSG_CLOEXEC) };
        if rc >= 0 {
            break rc as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg.msg_control` with `msg.msg_controllen` bytes of
    // well-formed control messages; CMSG_FIRSTHDR/CMSG_NXTHDR stay within them and return
    // null at the end. SCM_RIGHTS data holds `(cmsg_len - CMSG_LEN(0)) / 4` descriptors
    // now owned by this process (read unaligned: the data area is only 4-byte aligned).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Received {
        len,
        fds,
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
        fds_truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    })
}

/// `sendmsg` of `bufs` with an optional descriptor attached, blocking.
pub fn send_with_fd(
    sock: BorrowedFd<'_>,
    bufs: &[IoSlice<'_>],
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<usize> {
    sendmsg_fds(sock, bufs, fd.as_slice(), 0)
}

/// `recvmsg` into `buf`, returning the byte count and the first received descriptor, if
/// any (extra descriptors are closed). `Ok((0, None))` means the peer closed.
pub fn recv_with_fd(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let r = recvmsg_fds(sock, buf, 0)?;
    Ok((r.len, r.fds.into_iter().next()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixDatagram;

    fn inode(fd: BorrowedFd<'_>) -> u64 {
        // SAFETY: fstat writes one stat into the zeroed struct we pass.
        unsafe {
            let mut st: libc::stat = mem::zeroed();
            assert_eq!(libc::fstat(fd.as_raw_fd(), &mut st), 0);
            st.st_ino
        }
    }

    #[test]
    fn descriptors_arrive_in_order_with_their_message_and_the_limit_is_enforced() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let files: Vec<std::fs::File> = (0..3).map(|_| tempfile()).collect();
        let borrowed: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        let n = sendmsg_fds(
            a.as_fd(),
            &[IoSlice::new(b"ab"), IoSlice::new(b"c")],
            &borrowed,
            0,
        )
        .unwrap();
        assert_eq!(n, 3);
        let mut buf = [0u8; 8];
        let r = recvmsg_fds(b.as_fd(), &mut buf, 0).unwrap();
        assert_eq!(&buf[..r.len], b"abc");
        assert!(!r.truncated && !r.fds_truncated);
        let got: Vec<u64> = r.fds.iter().map(|f| inode(f.as_fd())).collect();
        let sent: Vec<u64> = files.iter().map(|f| inode(f.as_fd())).collect();
        assert_eq!(got, sent, "the same files, in order");
        // SAFETY: fcntl on a descriptor we own.
        let flags = unsafe { libc::fcntl(r.fds[0].as_raw_fd(), libc::F_GETFD) };
        assert!(flags & libc::FD_CLOEXEC != 0, "close-on-exec");

        // A full message: the kernel takes MAX_FDS (its limit is 253).
        let full = vec![files[2].as_fd(); MAX_FDS];
        sendmsg_fds(a.as_fd(), &[IoSlice::new(b"f")], &full, 0).unwrap();
        let r = recvmsg_fds(b.as_fd(), &mut buf, 0).unwrap();
        assert!(!r.fds_truncated);
        assert_eq!(r.fds.len(), MAX_FDS);
        assert!(
            r.fds
                .iter()
                .all(|f| inode(f.as_fd()) == inode(files[2].as_fd()))
        );
        drop(r);

        let many = vec![files[0].as_fd(); MAX_FDS + 1];
        let e = sendmsg_fds(a.as_fd(), &[IoSlice::new(b"x")], &many, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);

        // The one-descriptor forms, and a truncated message.
        send_with_fd(
            a.as_fd(),
            &[IoSlice::new(b"0123456789")],
            Some(files[1].as_fd()),
        )
        .unwrap();
        let mut small = [0u8; 4];
        let r = recvmsg_fds(b.as_fd(), &mut small, 0).unwrap();
        assert!(r.truncated);
        assert_eq!(inode(r.fds[0].as_fd()), inode(files[1].as_fd()));
        send_with_fd(a.as_fd(), &[IoSlice::new(b"z")], None).unwrap();
        let (n, fd) = recv_with_fd(b.as_fd(), &mut buf).unwrap();
        assert_eq!((n, fd.is_none()), (1, true));
    }

    fn tempfile() -> std::fs::File {
        // SAFETY: memfd_create with a NUL-terminated name; the descriptor is ours.
        unsafe {
            let fd = libc::memfd_create(c"fdpass-test".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0);
            std::fs::File::from_raw_fd(fd)
        }
    }
}
