//! Calls on plain descriptors, wrapped once with their safety arguments: `ppoll` (and a
//! poll retried to its deadline, a wait for one descriptor), `send` without `SIGPIPE`,
//! `read`, `socketpair`, `pipe`, descriptor flags, socket buffer sizes.
//!
//! What it is not: a general I/O layer; everything here works on borrowed descriptors and
//! returns `io::Result`. Thread-safety: stateless functions.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Sets `O_NONBLOCK` and `FD_CLOEXEC` on `fd`.
pub fn set_nonblocking_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor that `fd` keeps open for the duration of the call;
    // F_GETFL/F_SETFL/F_GETFD/F_SETFD only read or set flags and touch no memory.
    unsafe {
        let fl = libc::fcntl(raw, libc::F_GETFL);
        if fl < 0 || libc::fcntl(raw, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd_flags = libc::fcntl(raw, libc::F_GETFD);
        if fd_flags < 0 || libc::fcntl(raw, libc::F_SETFD, fd_flags | libc::FD_CLOEXEC) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// True when `raw` names an open descriptor of this process.
pub fn is_open(raw: RawFd) -> bool {
    // SAFETY: F_GETFD on an arbitrary number has no effect besides the return value; it
    // fails with EBADF when the number is not an open descriptor.
    unsafe { libc::fcntl(raw, libc::F_GETFD) >= 0 }
}

/// Sends on a socket without raising `SIGPIPE`; falls back to `write` for a descriptor
/// that is not a socket (a launcher may hand a pipe-like fd).
pub fn send(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    let raw = fd.as_raw_fd();
    // SAFETY: `buf` is a valid readable slice of `buf.len()` bytes for the duration of the
    // call and `fd` is open; send/write do not retain the pointer.
    let n = unsafe {
        libc::send(
            raw,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n >= 0 {
        return Ok(n as usize);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::ENOTSOCK) {
        return Err(err);
    }
    // SAFETY: as above.
    let n = unsafe { libc::write(raw, buf.as_ptr().cast(), buf.len()) };
    if n >= 0 {
        Ok(n as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads into `buf`; `Ok(0)` is end of file.
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid writable slice of `buf.len()` bytes and `fd` is open; read
    // writes at most `buf.len()` bytes and does not retain the pointer.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n >= 0 {
        Ok(n as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `ppoll` over `fds` for at most `timeout`; returns the number of ready entries (`Ok(0)`
/// at the timeout, and when a signal interrupted the wait).
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()` pollfd
    // structures (the kernel writes only their `revents` fields) and `ts` a valid timespec,
    // both alive across the call; a null signal mask keeps the current one.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if rc >= 0 {
        return Ok(rc as usize);
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::Interrupted {
        Ok(0)
    } else {
        Err(err)
    }
}

/// [`ppoll`] over `fds` for at most `timeout`, retried on `EINTR` with the remaining time.
/// Returns the number of ready entries (0 at the timeout).
pub fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        let n = ppoll(fds, deadline.saturating_duration_since(Instant::now()))?;
        if n > 0 || Instant::now() >= deadline {
            return Ok(n);
        }
    }
}

/// Waits until `fd` reports one of `events` or `timeout` passes; `Ok(false)` on timeout.
pub fn wait_fd(fd: BorrowedFd<'_>, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let mut p = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    }];
    Ok(poll(&mut p, timeout)? > 0)
}

/// Asks for `bytes` of receive and of send buffer on a socket (the kernel caps them at
/// `net.core.rmem_max` / `wmem_max`) and returns the receive buffer it then reports (which
/// counts the kernel's bookkeeping: about twice what was granted).
pub fn socket_buffers(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: an open descriptor and a pointer to an int of the length given.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&want as *const libc::c_int).cast(),
                len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let mut got: libc::c_int = 0;
    let mut got_len = len;
    // SAFETY: `got` and `got_len` are writable, `got_len` holds `got`'s size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut libc::c_int).cast(),
            &mut got_len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(got).unwrap_or(0))
}

/// A connected `AF_UNIX` stream socket pair, both ends close-on-exec.
pub fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded, so both numbers are fresh descriptors owned by nobody
    // else; each is wrapped exactly once.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A non-blocking, close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded; both descriptors are fresh and wrapped exactly once.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Clears `FD_CLOEXEC` on `raw`. Only async-signal-safe calls: usable between `fork` and
/// `exec`.
pub fn clear_cloexec(raw: RawFd) -> io::Result<()> {
    // SAFETY: fcntl only changes the descriptor flags of `raw`; it touches no memory and is
    // async-signal-safe.
    let r = unsafe { libc::fcntl(raw, libc::F_SETFD, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn socket_buffers_grow_to_what_the_kernel_grants() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let small = socket_buffers(sock.as_fd(), 4096).unwrap();
        let large = socket_buffers(sock.as_fd(), 1 << 20).unwrap();
        // The kernel doubles what it grants and has a floor; a larger request never gets
        // less (rmem_max caps it, at 208 KiB on a default kernel).
        assert!(small >= 4096, "{small}");
        assert!(large > small, "{large} after {small}");
        // Not a socket: refused, not ignored.
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(socket_buffers(file.as_fd(), 4096).is_err());
    }
}
