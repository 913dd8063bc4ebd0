//! Small wrappers over Linux calls that `std` does not offer: `SOCK_SEQPACKET` sockets,
//! `SCM_RIGHTS` descriptor passing, `ppoll` with microsecond timeouts and signal flags.
//!
//! Thread safety: free functions on borrowed descriptors.

use std::io::{self, IoSlice};
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: `sockaddr_un` is plain old data; all-zero bytes are a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "Unix socket path {} must be 1 to 107 bytes without NUL",
                path.display()
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

fn socket(ty: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call with constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_UNIX, ty | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a fresh descriptor owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Connects a `SOCK_SEQPACKET` socket to `path`.
pub fn seqpacket_connect(path: &Path) -> io::Result<OwnedFd> {
    let (addr, len) = sockaddr(path)?;
    let fd = socket(libc::SOCK_SEQPACKET)?;
    loop {
        // SAFETY: `addr` is a valid `sockaddr_un` of `len` bytes alive across the call.
        let rc = unsafe { libc::connect(fd.as_raw_fd(), (&raw const addr).cast(), len) };
        match cvt(rc) {
            Ok(_) => return Ok(fd),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Binds a listening socket of type `ty` (`SOCK_STREAM` or `SOCK_SEQPACKET`) at `path`,
/// non-blocking.
pub fn listen(path: &Path, ty: libc::c_int) -> io::Result<OwnedFd> {
    let (addr, len) = sockaddr(path)?;
    let fd = socket(ty | libc::SOCK_NONBLOCK)?;
    // SAFETY: `addr` is valid for `len` bytes; `fd` is open.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) })?;
    // SAFETY: `fd` is a bound socket.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 16) })?;
    Ok(fd)
}

/// Accepts one connection without blocking (`Ok(None)` when none is waiting); the new
/// socket is non-blocking.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    // SAFETY: null address arguments are allowed; `listener` is open.
    let rc = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    match cvt(rc) {
        // SAFETY: `fd` is a fresh descriptor owned by nothing else.
        Ok(fd) => Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) })),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Sets send and receive timeouts.
pub fn set_timeouts(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    let t = timeout.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: `tv` is a valid timeval of the stated size alive across the call.
        cvt(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&raw const tv).cast(),
                mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
    }
    Ok(())
}

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

/// `ppoll` over `fds` for at most `timeout`; returns the number of ready descriptors.
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: `fds` is a valid array of `fds.len()` pollfds and `ts` a valid timespec, both
    // alive across the call; a null signal mask keeps the current one.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    match cvt(rc) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// Installs SIGTERM and SIGINT handlers that set a flag read by [`signalled`].
pub fn install_termination_handlers() -> io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: plain old data; zero is a valid initial value.
        let mut act: libc::sigaction = unsafe { mem::zeroed() };
        act.sa_sigaction = on_signal as *const () as libc::sighandler_t;
        act.sa_flags = libc::SA_RESTART;
        // SAFETY: `act` is a valid sigaction whose handler only stores to an atomic, which is
        // async-signal-safe; `sa_mask` stays empty.
        cvt(unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) })?;
    }
    Ok(())
}

/// Whether SIGTERM or SIGINT arrived since [`install_termination_handlers`].
pub fn signalled() -> bool {
    SIGNALLED.load(Ordering::SeqCst)
}
