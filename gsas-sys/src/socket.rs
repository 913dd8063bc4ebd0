//! Named Unix `SOCK_SEQPACKET` sockets: listen, accept, connect, peer credentials, and
//! the per-user directory for the sockets of embedded services.
//!
//! What it is: the few calls std's `UnixListener` cannot make (it only does
//! `SOCK_STREAM`), each wrapped once with its safety argument. Messages and descriptors
//! travel with `gsas_transport::shm::send_fds`/`recv_fds`.
//!
//! What it is not: a protocol (see `gsas_control::proto`). Thread-safety: stateless functions
//! over owned descriptors.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Credentials of the process at the other end of a Unix socket (`SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid (empty) address.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} must be 1 to {} bytes without NUL",
                path.display(),
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

fn new_socket() -> io::Result<OwnedFd> {
    socket(libc::SOCK_SEQPACKET)
}

/// A close-on-exec `AF_UNIX` socket of type `ty` (with flags such as `SOCK_NONBLOCK`).
fn socket(ty: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket() takes integer arguments only.
    let fd = unsafe { libc::socket(libc::AF_UNIX, ty | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just created by socket() and owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets or clears `O_NONBLOCK`.
pub fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    // SAFETY: fcntl F_GETFL/F_SETFL on an open descriptor; no memory is passed.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if fl < 0 {
            return Err(io::Error::last_os_error());
        }
        let want = if on {
            fl | libc::O_NONBLOCK
        } else {
            fl & !libc::O_NONBLOCK
        };
        if libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, want) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Binds a listening seqpacket socket at `path` with permissions `mode`.
///
/// A socket file left behind by a dead service is replaced; a path where a live service
/// answers is refused with `AddrInUse`; a path that exists and is not a socket is refused.
pub fn listen(path: &Path, mode: u32) -> io::Result<OwnedFd> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        if connect(path, Duration::from_millis(200)).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("another service is listening on {}", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let fd = new_socket()?;
    let (addr, len) = sockaddr(path)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes that lives across the call.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    // SAFETY: listen() on a bound socket we own.
    if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
        return Err(io::Error::last_os_error());
    }
    set_nonblocking(borrow(&fd), true)?;
    Ok(fd)
}

/// Binds a non-blocking listening socket of type `ty` (`SOCK_STREAM` or `SOCK_SEQPACKET`)
/// at the fresh path `path`, with the default permissions and a backlog of 16 (the
/// emulator's endpoint sockets, under a directory it owns).
pub fn bind_listen(path: &Path, ty: libc::c_int) -> io::Result<OwnedFd> {
    let (addr, len) = sockaddr(path)?;
    let fd = socket(ty | libc::SOCK_NONBLOCK)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes that lives across the call.
    if unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: listen() on a bound socket we own.
    if unsafe { libc::listen(fd.as_raw_fd(), 16) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Raises the accept queue of a listening socket to the most the kernel allows (it
/// truncates 65,535 to `net.core.somaxconn`, 4,096 by default), where the standard
/// library's `TcpListener` asks for 128: a launcher whose ranks all connect at once needs
/// room for them.
pub fn widen_backlog(listener: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: listen(2) on a borrowed descriptor; calling it again on a listening socket
    // only changes its backlog.
    if unsafe { libc::listen(listener.as_raw_fd(), 65_535) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the send and receive timeouts of a socket (at least 1 ms).
pub fn set_timeouts(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    let t = timeout.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: `tv` is a valid timeval of the stated size alive across the call.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&raw const tv).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn borrow(fd: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}

/// Accepts one pending connection (non-blocking listener: `Ok(None)` when none waits). The
/// new socket is non-blocking and close-on-exec.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    // SAFETY: null address pointers ask for no peer address; flags are valid.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    if fd >= 0 {
        // SAFETY: a descriptor just returned by accept4, owned by no one else.
        return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNABORTED) => Ok(None),
        _ => Err(e),
    }
}

/// Connects to the seqpacket socket at `path`, waiting at most `timeout` while the
/// listener's backlog is full. The socket returned is blocking and close-on-exec.
pub fn connect(path: &Path, timeout: Duration) -> io::Result<OwnedFd> {
    let (addr, len) = sockaddr(path)?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let fd = new_socket()?;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes that lives across the call.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if rc == 0 {
            return Ok(fd);
        }
        let e = io::Error::last_os_error();
        let retry = matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR));
        if !retry || std::time::Instant::now() >= deadline {
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The credentials of the peer of a connected Unix socket.
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable ucred of `len` bytes for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid as u32,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// The kernel's path MTU of a connected UDP socket (`IP_MTU`, or `IPV6_MTU` for an IPv6
/// socket): the largest datagram the route to its peer carries unfragmented.
///
/// Errors: the `getsockopt` error (`ENOTCONN` for a socket that is not connected; qemu-user
/// does not emulate the option and fails it too).
pub fn path_mtu(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<usize> {
    let (level, name) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `mtu`, a c_int that lives for the
    // call; the descriptor is borrowed, so open for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw mut mtu).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    usize::try_from(mtu)
        .ok()
        .filter(|&m| m > 0)
        .ok_or_else(|| io::Error::other(format!("path MTU {mtu}")))
}

/// The login name of `uid` from the password database, or `"unknown user"`, for messages
/// (the service names the user whose limit a refusal hits).
pub fn user_name(uid: u32) -> String {
    // SAFETY: `passwd` is plain data (integers and pointers): all zeroes is a valid value.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pw` and `buf` (of the given length), both alive for
    // the call, and sets `result` to `&mut pw` or NULL.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pw.pw_name.is_null() {
        return "unknown user".into();
    }
    // SAFETY: on success `pw_name` points at a NUL-terminated string inside `buf`.
    unsafe { std::ffi::CStr::from_ptr(pw.pw_name) }
        .to_string_lossy()
        .into_owned()
}

/// Whether the other end of a connected socket has closed (or reset) it, without
/// consuming any message.
pub fn peer_closed(fd: BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call; timeout 0 never blocks.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLRDHUP | libc::POLLNVAL) != 0
}

/// The directory for the sockets of embedded services of the calling user:
/// `$XDG_RUNTIME_DIR/gsas` when that variable names an existing directory, else
/// `/tmp/gsas-<uid>`. Created with mode 0700 if missing; an existing directory must be
/// owned by the user and closed to others, or it is refused.
pub fn runtime_dir(xdg_runtime_dir: Option<&OsStr>) -> io::Result<PathBuf> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = match xdg_runtime_dir
        .map(Path::new)
        .filter(|p| p.is_absolute() && p.is_dir())
    {
        Some(base) => base.join("gsas"),
        None => PathBuf::from(format!("/tmp/gsas-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("creating {}: {e}", dir.display()),
            ));
        }
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} must be a directory owned by uid {uid} and writable only by it",
                dir.display()
            ),
        ));
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loopback's MTU (65536, as a path 65535) for a connected socket; an unconnected one has
    /// no path.
    #[test]
    fn the_path_mtu_of_a_loopback_socket() {
        use std::os::fd::AsFd;
        if crate::process::user_mode_emulation().is_some() {
            eprintln!(
                "SKIPPED: the_path_mtu_of_a_loopback_socket: qemu-user does not emulate \
                 getsockopt(IP_MTU)"
            );
            return;
        }
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(path_mtu(s.as_fd(), false).is_err(), "not connected");
        s.connect("127.0.0.1:9").unwrap();
        let lo = std::fs::read_to_string("/sys/class/net/lo/mtu").unwrap();
        // The kernel caps a route's MTU at the largest IPv4 datagram, 65535.
        let lo: usize = lo.trim().parse().unwrap();
        assert_eq!(path_mtu(s.as_fd(), false).unwrap(), lo.min(65535));
    }

    #[test]
    fn listen_accept_connect_and_credentials() {
        let dir = runtime_dir(None).unwrap();
        let path = dir.join(format!("unit-{}.sock", std::process::id()));
        let l = listen(&path, 0o600).unwrap();
        assert!(accept(borrow(&l)).unwrap().is_none());
        // A second service on the same path is refused while the first one listens (its
        // probe connection, already closed, waits in the backlog).
        let e = listen(&path, 0o600).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        let probe = accept(borrow(&l)).unwrap().expect("the probe connection");
        assert!(peer_closed(borrow(&probe)));
        let c = connect(&path, Duration::from_secs(1)).unwrap();
        let mut s = None;
        for _ in 0..1000 {
            s = accept(borrow(&l)).unwrap();
            if s.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let s = s.expect("pending connection");
        let cred = peer_cred(borrow(&s)).unwrap();
        assert_eq!(cred.pid, std::process::id());
        assert!(!peer_closed(borrow(&s)));
        drop(c);
        assert!(peer_closed(borrow(&s)));
        drop(l);
        // The stale file is replaced by the next listener.
        let l2 = listen(&path, 0o600).unwrap();
        drop(l2);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn user_names_come_from_the_password_database() {
        assert_eq!(super::user_name(0), "root");
        assert_eq!(super::user_name(0xfff0_0001), "unknown user");
    }

    #[test]
    fn bad_paths_are_refused() {
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        assert_eq!(
            listen(&long, 0o600).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let e = listen(Path::new("/etc/hostname"), 0o600).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert!(
            connect(
                Path::new("/nonexistent/gsas.sock"),
                Duration::from_millis(10)
            )
            .is_err()
        );
    }
}
