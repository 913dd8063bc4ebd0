//! One descriptor with a message over a Unix socket (`SCM_RIGHTS`): what the Exanet
//! emulator's registration protocol uses.
//!
//! What it is not: the runtime's multi-descriptor passing with timeouts and named errors
//! (`gsas_transport::shm::send_fds`/`recv_fds`, whose errors are the segment layer's).
//! Thread safety: free functions on borrowed descriptors.

use std::io::{self, IoSlice};
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

const CMSG_SPACE: usize = 64;

/// `sendmsg` of `bufs` with an optional descriptor attached (`SCM_RIGHTS`).
pub fn send_with_fd(
    sock: BorrowedFd<'_>,
    bufs: &[IoSlice<'_>],
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<usize> {
    let mut control = [0u64; CMSG_SPACE / 8];
    // SAFETY: `msghdr` is plain old data; zero is a valid initial value.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(mem::size_of::<RawFd>() as u32) } as usize;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: `msg_control` points to `space` zeroed, aligned bytes, enough for one
        // header and one descriptor, so CMSG_FIRSTHDR is non-null and CMSG_DATA in bounds.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd.as_raw_fd());
        }
    }
    loop {
        // SAFETY: `msg` points to live iovecs (IoSlice is ABI compatible with iovec) and a
        // live control buffer for the duration of the call.
        let rc = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `recvmsg` into `buf`, returning the byte count and a received descriptor, if any
/// (extra descriptors are closed). `Ok((0, None))` means the peer closed.
pub fn recv_with_fd(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut control = [0u64; CMSG_SPACE / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: plain old data.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE as _;
    let n = loop {
        // SAFETY: `msg` points to a live iovec over `buf` and a live control buffer.
        let rc = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if rc >= 0 {
            break rc as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut got = None;
    // SAFETY: the kernel filled `msg_controllen` bytes of `control`; the CMSG macros walk
    // only within it, and each SCM_RIGHTS payload holds whole descriptors we now own.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    if got.is_none() {
                        got = Some(fd);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n, got))
}
