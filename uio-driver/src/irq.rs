//! Interrupts: the [`IrqSource`] trait, the kernel implementation on `/dev/uioN`, and the
//! emulator implementation on a Unix stream socket (or a pipe pair).
//!
//! What it is. A UIO interrupt is a counter. Writing the 4-byte native-endian value `1` to
//! the device node re-enables the line (`irqcontrol(1)`; `uio_pdrv_genirq` masks the line
//! each time it fires). A 4-byte `read` blocks until the next interrupt and returns the total
//! number of interrupts so far; a jump of more than one means interrupts were coalesced. The
//! sysfs file `event` holds the same total. [`IrqSource`] captures exactly that:
//! [`enable`](IrqSource::enable), [`wait`](IrqSource::wait) with a timeout (a timeout is
//! `Ok(None)`, not an error) and [`count`](IrqSource::count). The service loop of the model
//! (section 8) is `enable(); wait(t); read IRQ_PENDING; do the work; repeat`.
//!
//! [`KernelIrq`] implements it on the `/dev/uioN` descriptor (waits with `poll(2)`, then a
//! 4-byte `read`; the count comes from sysfs `event`). [`EmuIrq`] implements it on a byte
//! stream from the emulator, using the protocol below.
//!
//! # Emulator IRQ protocol (`EXA-NI-EMU v0`, what the emulator must implement)
//!
//! * **Endpoint.** For endpoint `k` under the emulator root, the emulator listens on a Unix
//!   *stream* socket at `<root>/ep<k>/irq` (`SOCK_STREAM`, path-based, not abstract). The
//!   driver connects to it ([`EmuIrq::endpoint`]); one connection per endpoint owner. Tests
//!   and in-process setups may instead hand the driver one end of a `socketpair`
//!   ([`EmuIrq::from_stream`]) or two pipes ([`EmuIrq::from_pipes`]); the bytes are the same.
//! * **Emulator to driver: counts.** Each interrupt delivery is exactly 4 bytes, the new
//!   *total* interrupt count of the endpoint as a native-endian `u32` (the same host runs both
//!   sides), starting from 1 after the emulator starts and wrapping modulo 2^32. Totals must
//!   never go backwards. The driver reads them in whole 4-byte units, tolerating short reads.
//! * **Driver to emulator: control words.** Exactly 4 bytes, a native-endian `u32`: nonzero
//!   unmasks the line (the driver sends `1`, as `write(fd, 1)` does on a UIO device), `0`
//!   masks it (`uio_pdrv_genirq_irqcontrol` semantics).
//! * **Masking, as `uio_pdrv_genirq` does it.** A new connection starts *masked*. When the
//!   line is unmasked and the level `(IRQ_ENABLE & IRQ_PENDING) != 0` is high (or becomes
//!   high), the emulator increments the total, sends it once and masks the line. It sends
//!   nothing more until the next nonzero control word, at which point it re-evaluates the
//!   level and, if still high, fires again at once. So the driver sees at most one count per
//!   enable, and no wakeup is lost.
//! * **Sysfs count.** The emulator may also publish the total in a fabricated sysfs `event`
//!   file; the driver's [`EmuIrq::count`] does not depend on it (see below).
//! * **Shutdown.** Either side closes the stream. The driver reports end of file as
//!   [`UioErrorKind::ChannelClosed`]; the emulator should treat a closed connection as
//!   "masked, no listener" and accept a new connection later.
//!
//! What it is not: no IRQ demultiplexing (one device has one line; `IRQ_PENDING` says why),
//! no threads, no async. Every wait is bounded: `wait` by its timeout, control writes to the
//! emulator by an I/O timeout ([`DEFAULT_EMU_IO_TIMEOUT`] unless changed), connecting by the
//! same timeout. Writes to a UIO device never block.
//!
//! Thread safety: both types are `Send` (not shared: all methods take `&mut self`); move the
//! handle into the thread that services interrupts.

use std::fs::{File, OpenOptions};
use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{UioError, UioErrorKind};
use crate::sysfs::{UioDevice, read_event};

/// Default bound on connecting to the emulator and on writing a control word to it.
pub const DEFAULT_EMU_IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The 4-byte control word that re-enables (unmasks) the interrupt line.
pub const IRQ_ENABLE_WORD: u32 = 1;

/// Upper bound on counts consumed in one go when coalescing queued deliveries.
const MAX_DRAIN: usize = 64;

/// A source of interrupts with UIO semantics.
pub trait IrqSource {
    /// Re-enables (unmasks) the interrupt line: a 4-byte native-endian `1`.
    fn enable(&mut self) -> Result<(), UioError>;

    /// Waits up to `timeout` for the next interrupt.
    ///
    /// Returns `Ok(Some(total))` with the total interrupt count (a jump of more than one
    /// since the previous value means coalesced interrupts), or `Ok(None)` if nothing arrived
    /// in time. `Duration::ZERO` checks without blocking.
    fn wait(&mut self, timeout: Duration) -> Result<Option<u32>, UioError>;

    /// The current total interrupt count, without blocking and without consuming an
    /// interrupt that [`wait`](Self::wait) has yet to report.
    fn count(&mut self) -> Result<u32, UioError>;
}

/// Interrupts of a real UIO device through `/dev/uioN`.
#[derive(Debug)]
pub struct KernelIrq {
    device: String,
    path: PathBuf,
    file: Arc<File>,
    event_path: PathBuf,
    counts: CountReader,
}

impl KernelIrq {
    /// Opens the device node of `device` read-write for interrupt handling only.
    ///
    /// [`crate::KernelSource::irq`] gives the same handle sharing the source's descriptor.
    pub fn open(device: &UioDevice) -> Result<Self, UioError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(device.dev_path())
            .map_err(|e| UioError::io(device.name(), device.dev_path(), e))?;
        Ok(KernelIrq::from_shared(device, Arc::new(file)))
    }

    pub(crate) fn from_shared(device: &UioDevice, file: Arc<File>) -> Self {
        KernelIrq {
            device: device.name().to_owned(),
            path: device.dev_path().to_path_buf(),
            file,
            event_path: device.event_path(),
            counts: CountReader::default(),
        }
    }
}

impl IrqSource for KernelIrq {
    fn enable(&mut self) -> Result<(), UioError> {
        // A UIO node never reports POLLOUT and its write never blocks: no poll, no timeout.
        write_control(self.file.as_fd(), IRQ_ENABLE_WORD, false, None)
            .map_err(|e| e.into_error(&self.device, Some(&self.path)))
    }

    fn wait(&mut self, timeout: Duration) -> Result<Option<u32>, UioError> {
        self.counts
            .wait(self.file.as_fd(), timeout)
            .map_err(|e| channel_error(&self.device, Some(&self.path), e))
    }

    fn count(&mut self) -> Result<u32, UioError> {
        read_event(&self.device, &self.event_path)
    }
}

/// Interrupts of an emulated endpoint over a byte stream (see the module docs for the
/// protocol).
#[derive(Debug)]
pub struct EmuIrq {
    label: String,
    path: Option<PathBuf>,
    rx: OwnedFd,
    /// `None`: control words go to `rx` (a bidirectional socket).
    tx: Option<OwnedFd>,
    tx_is_socket: bool,
    io_timeout: Duration,
    counts: CountReader,
}

impl EmuIrq {
    /// Connects to the emulator's IRQ socket of endpoint `k`: `<root>/ep<k>/irq`, labelled
    /// `exanet-ep<k>`, with [`DEFAULT_EMU_IO_TIMEOUT`].
    pub fn endpoint(root: &Path, k: u32) -> Result<Self, UioError> {
        EmuIrq::connect(
            format!("exanet-ep{k}"),
            &root.join(format!("ep{k}")).join("irq"),
            DEFAULT_EMU_IO_TIMEOUT,
        )
    }

    /// Connects to the Unix stream socket at `path`, giving up after `timeout`.
    pub fn connect(
        label: impl Into<String>,
        path: &Path,
        timeout: Duration,
    ) -> Result<Self, UioError> {
        let label = label.into();
        let stream = connect_unix(path, timeout).map_err(|e| UioError::io(&label, path, e))?;
        let mut irq = EmuIrq::from_stream(label, stream);
        irq.path = Some(path.to_path_buf());
        irq.io_timeout = timeout;
        Ok(irq)
    }

    /// Uses one end of an already connected stream socket (e.g. from `UnixStream::pair`).
    pub fn from_stream(label: impl Into<String>, stream: UnixStream) -> Self {
        EmuIrq {
            label: label.into(),
            path: None,
            rx: OwnedFd::from(stream),
            tx: None,
            tx_is_socket: true,
            io_timeout: DEFAULT_EMU_IO_TIMEOUT,
            counts: CountReader::default(),
        }
    }

    /// Uses two one-way channels: `from_emulator` carries counts, `to_emulator` control words.
    ///
    /// If `to_emulator` is a pipe and the emulator has closed its end, the control write
    /// raises `SIGPIPE` (fatal unless ignored, as Rust's runtime does for Rust `main`);
    /// sockets are written with `MSG_NOSIGNAL` and never do.
    pub fn from_pipes(
        label: impl Into<String>,
        from_emulator: OwnedFd,
        to_emulator: OwnedFd,
    ) -> Self {
        let tx_is_socket = is_socket(to_emulator.as_fd());
        EmuIrq {
            label: label.into(),
            path: None,
            rx: from_emulator,
            tx: Some(to_emulator),
            tx_is_socket,
            io_timeout: DEFAULT_EMU_IO_TIMEOUT,
            counts: CountReader::default(),
        }
    }

    /// Changes the bound on control writes (default [`DEFAULT_EMU_IO_TIMEOUT`]).
    pub fn set_io_timeout(&mut self, timeout: Duration) {
        self.io_timeout = timeout;
    }

    /// The socket path, if this handle was connected by path.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn tx_fd(&self) -> BorrowedFd<'_> {
        self.tx.as_ref().unwrap_or(&self.rx).as_fd()
    }
}

impl IrqSource for EmuIrq {
    fn enable(&mut self) -> Result<(), UioError> {
        write_control(
            self.tx_fd(),
            IRQ_ENABLE_WORD,
            self.tx_is_socket,
            Some(self.io_timeout),
        )
        .map_err(|e| e.into_error(&self.label, self.path.as_deref()))
    }

    fn wait(&mut self, timeout: Duration) -> Result<Option<u32>, UioError> {
        self.counts
            .wait(self.rx.as_fd(), timeout)
            .map_err(|e| channel_error(&self.label, self.path.as_deref(), e))
    }

    /// The newest total the emulator has sent (0 before the first). A count that is queued
    /// but not yet reported by [`wait`](IrqSource::wait) is read, remembered and still
    /// returned by the next `wait`, as a UIO `read` would after sysfs `event` changed.
    fn count(&mut self) -> Result<u32, UioError> {
        self.counts
            .peek(self.rx.as_fd())
            .map_err(|e| channel_error(&self.label, self.path.as_deref(), e))
    }
}

/// Assembles 4-byte counts from a descriptor, remembering partial reads and counts seen by
/// `peek` but not yet returned by `wait`.
#[derive(Debug, Default)]
struct CountReader {
    buf: [u8; 4],
    filled: usize,
    pending: Option<u32>,
    latest: u32,
}

impl CountReader {
    /// One `read(2)` towards the current count; `Some` once 4 bytes are complete.
    fn read_some(&mut self, fd: BorrowedFd<'_>) -> io::Result<Option<u32>> {
        let want = &mut self.buf[self.filled..];
        // SAFETY: `want` is writable memory of `want.len()` bytes that outlives the call, and
        // `fd` is an open descriptor borrowed for the call.
        let n = unsafe { libc::read(fd.as_raw_fd(), want.as_mut_ptr().cast(), want.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(err),
            };
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        self.filled += n as usize;
        if self.filled < 4 {
            return Ok(None);
        }
        self.filled = 0;
        self.latest = u32::from_ne_bytes(self.buf);
        Ok(Some(self.latest))
    }

    /// Reads every whole count that is available now and returns the newest. An error is
    /// returned only if no count was read first; otherwise it is left for the next call to
    /// meet (end of file and device errors persist).
    fn drain(&mut self, fd: BorrowedFd<'_>) -> io::Result<Option<u32>> {
        let mut newest = None;
        for _ in 0..MAX_DRAIN {
            let step = match poll_one(fd, libc::POLLIN, Duration::ZERO) {
                Ok(true) => self.read_some(fd),
                Ok(false) => break,
                Err(err) => Err(err),
            };
            match step {
                Ok(Some(count)) => newest = Some(count),
                Ok(None) => {}
                Err(err) if newest.is_none() => return Err(err),
                Err(_) => break,
            }
        }
        Ok(newest)
    }

    fn wait(&mut self, fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<Option<u32>> {
        if let Some(count) = self.pending.take() {
            return Ok(Some(self.drain(fd).ok().flatten().unwrap_or(count)));
        }
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let remaining =
                deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
            if !poll_one(fd, libc::POLLIN, remaining)? {
                return Ok(None);
            }
            if let Some(count) = self.read_some(fd)? {
                // Coalesce counts queued behind this one, as a UIO read returns the total.
                return Ok(Some(self.drain(fd).ok().flatten().unwrap_or(count)));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    fn peek(&mut self, fd: BorrowedFd<'_>) -> io::Result<u32> {
        if let Some(count) = self.drain(fd)? {
            self.pending = Some(count);
        }
        Ok(self.latest)
    }
}

/// `poll(2)` one descriptor for `events` for at most `timeout` (rounded up to whole
/// milliseconds, so a wait is never shorter than asked). `Ok(true)` when ready or when the
/// descriptor reports hang-up or error (the following read or write tells which).
fn poll_one(fd: BorrowedFd<'_>, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let remaining = deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
        let millis = remaining
            .as_nanos()
            .div_ceil(1_000_000)
            .min(i32::MAX as u128) as i32;
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid `pollfd` that lives across the call; `fd` is open.
        let rc = unsafe { libc::poll(&mut pfd, 1, millis) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if rc == 0 {
            return Ok(false);
        }
        if pfd.revents & libc::POLLNVAL != 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        return Ok(true);
    }
}

/// Why a control write failed.
enum ControlError {
    Io(io::Error),
    Timeout(Duration),
    Short(usize),
}

impl From<io::Error> for ControlError {
    fn from(err: io::Error) -> Self {
        ControlError::Io(err)
    }
}

impl ControlError {
    fn into_error(self, device: &str, path: Option<&Path>) -> UioError {
        match self {
            ControlError::Io(err) => channel_error(device, path, err),
            ControlError::Timeout(t) => UioError::new(
                device,
                path,
                UioErrorKind::IrqControl {
                    reason: format!("the other end accepted no data within {t:?}"),
                },
            ),
            ControlError::Short(n) => UioError::new(
                device,
                path,
                UioErrorKind::IrqControl {
                    reason: format!("wrote {n} of 4 bytes"),
                },
            ),
        }
    }
}

/// Writes one 4-byte native-endian control word. With `timeout`, first waits (bounded) until
/// the descriptor is writable.
fn write_control(
    fd: BorrowedFd<'_>,
    value: u32,
    socket: bool,
    timeout: Option<Duration>,
) -> Result<(), ControlError> {
    if let Some(t) = timeout {
        if !poll_one(fd, libc::POLLOUT, t)? {
            return Err(ControlError::Timeout(t));
        }
    }
    let bytes = value.to_ne_bytes();
    loop {
        let n = if socket {
            // SAFETY: `bytes` is 4 readable bytes alive across the call; `fd` is an open
            // socket. MSG_NOSIGNAL turns a closed peer into EPIPE instead of SIGPIPE.
            unsafe { libc::send(fd.as_raw_fd(), bytes.as_ptr().cast(), 4, libc::MSG_NOSIGNAL) }
        } else {
            // SAFETY: `bytes` is 4 readable bytes alive across the call; `fd` is open.
            unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), 4) }
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(ControlError::Io(err));
        }
        return if n == 4 {
            Ok(())
        } else {
            Err(ControlError::Short(n as usize))
        };
    }
}

/// Whether `fd` refers to a socket (`fstat` says `S_IFSOCK`).
fn is_socket(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: `libc::stat` is plain old data; all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a valid, writable `stat` buffer for the call.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    rc == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK
}

/// Maps a channel I/O error to [`UioErrorKind::ChannelClosed`] when the other end is gone.
fn channel_error(device: &str, path: Option<&Path>, err: io::Error) -> UioError {
    let kind = match err.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionReset => UioErrorKind::ChannelClosed,
        _ => UioErrorKind::Io(err),
    };
    UioError::new(device, path, kind)
}

/// Connects a Unix stream socket to `path`, bounded by `timeout`: `SO_SNDTIMEO` is set
/// before `connect`, which Linux honours when the listener's backlog is full.
fn connect_unix(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    // SAFETY: `sockaddr_un` is plain old data; all-zero bytes are a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a Unix socket path must be 1 to {} bytes without NUL",
                addr.sun_path.len() - 1
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: plain socket(2) call with constant arguments.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
    let stream = UnixStream::from(unsafe { OwnedFd::from_raw_fd(raw) });
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let len = mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    loop {
        // SAFETY: `addr` is a valid `sockaddr_un` of at least `len` bytes that outlives the
        // call; the descriptor is open.
        let rc = unsafe {
            libc::connect(
                stream.as_raw_fd(),
                (&raw const addr).cast::<libc::sockaddr>(),
                len as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(stream);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EISCONN) {
            // A connect interrupted by a signal completed in the background.
            return Ok(stream);
        }
        match err.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect timed out after {timeout:?} (listener backlog full)"),
                ));
            }
            _ => return Err(err),
        }
    }
}
