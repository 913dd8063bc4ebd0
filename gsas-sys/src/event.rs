//! Descriptors the service loop waits on besides sockets: `signalfd` for termination
//! signals and `eventfd` for wake-ups (shutdown requests, ring doorbells); for a program
//! without such a loop (the Exanet emulator), termination handlers that set a flag; and
//! for a PE, the handler of the signal that asks it where it waits
//! ([`install_report_handler`]).
//!
//! What it is: [`SignalFd`] (also used by the launcher) and [`EventFd`], each wrapped once
//! with its safety argument. What it is not: a signal-handling library. Thread-safety:
//! [`EventFd`] may be signalled from any thread (`&self`); [`SignalFd`] is a plain owned
//! descriptor.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

fn sigset(signals: &[i32]) -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before any other use and
    // sigaddset only writes into it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            if libc::sigaddset(&mut set, s) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(set)
    }
}

/// A `signalfd` for a set of signals that this thread (and threads it starts later) keep
/// blocked, so they are delivered only through the descriptor.
#[derive(Debug)]
pub struct SignalFd {
    fd: OwnedFd,
}

impl SignalFd {
    /// Blocks `signals` in the calling thread and returns a non-blocking descriptor that
    /// reports them. Call it before starting threads: threads inherit the mask, and a
    /// signal sent to the process goes to any thread that does not block it. Processes
    /// started later get an empty mask (std's `Command` resets it).
    pub fn block(signals: &[i32]) -> io::Result<SignalFd> {
        let set = sigset(signals)?;
        // SAFETY: `set` is an initialised sigset_t that lives across the call; a null old
        // set pointer is allowed.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: -1 asks for a new descriptor; `set` is valid for the call.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: signalfd returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(SignalFd { fd })
    }

    /// The next pending signal, if any (never blocks).
    pub fn read(&self) -> io::Result<Option<i32>> {
        // SAFETY: signalfd_siginfo is plain data; zeroed is a valid value.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let len = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: `info` is a writable buffer of `len` bytes for the duration of the call.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                len,
            )
        };
        if n == len as isize {
            return Ok(Some(info.ssi_signo as i32));
        }
        let err = io::Error::last_os_error();
        if n < 0 && err.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else if n < 0 {
            Err(err)
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short read from signalfd",
            ))
        }
    }

    /// The descriptor, for `poll(2)`.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for SignalFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A non-blocking, close-on-exec `eventfd` counter.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new counter at 0.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes integer arguments only.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just created by eventfd and owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    /// Wraps a descriptor received from elsewhere (it must be an eventfd).
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        EventFd { fd }
    }

    /// Adds 1 to the counter, waking a poller. A counter at its maximum is not an error.
    pub fn signal(&self) {
        signal_raw(self.fd.as_fd());
    }

    /// Resets the counter to 0; returns whether it was signalled.
    pub fn drain(&self) -> bool {
        let mut v = 0u64;
        // SAFETY: `v` is a writable 8-byte buffer for the duration of the call.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut v as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        n == 8 && v > 0
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Adds 1 to the eventfd `fd` (ignoring a full counter or a closed descriptor).
pub fn signal_raw(fd: BorrowedFd<'_>) {
    let one = 1u64;
    // SAFETY: `one` is a readable 8-byte buffer for the duration of the call.
    let _ = unsafe {
        libc::write(
            fd.as_raw_fd(),
            (&one as *const u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
}

/// Set by the handlers of [`install_termination_handlers`].
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// Installs SIGTERM and SIGINT handlers that set a flag read by [`signalled`].
pub fn install_termination_handlers() -> io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: plain old data; zero is a valid initial value.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_signal as *const () as libc::sighandler_t;
        act.sa_flags = libc::SA_RESTART;
        // SAFETY: `act` is a valid sigaction whose handler only stores to an atomic, which is
        // async-signal-safe; `sa_mask` stays empty.
        if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGTERM or SIGINT arrived since [`install_termination_handlers`].
pub fn signalled() -> bool {
    SIGNALLED.load(Ordering::SeqCst)
}

/// The eventfd the report signal's handler adds 1 to (-1: none installed).
static REPORT_FD: AtomicI32 = AtomicI32::new(-1);
/// Report signals received since [`install_report_handler`].
static REPORTS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_report_signal(_: libc::c_int) {
    // Only async-signal-safe work: an atomic add and write(2) to an eventfd, with errno
    // kept for the code the signal interrupted.
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    REPORTS.fetch_add(1, Ordering::SeqCst);
    let fd = REPORT_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let one = 1u64;
        // SAFETY: `one` is a readable 8-byte buffer; `fd` is the eventfd handed to
        // install_report_handler, which is never closed.
        let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Installs the handler of `sig` (a PE's SIGQUIT: "say where you wait") that counts the
/// signal ([`report_signals`]) and adds 1 to the eventfd `wake`, which a thread polls;
/// the handler itself does nothing else (async-signal-safe). `wake` is kept open for the
/// life of the process. The handler is installed only when `sig` has no handler of the
/// program (its disposition is the default or ignore): returns `Ok(false)` and changes
/// nothing otherwise. A second call changes nothing and returns `Ok(true)`.
pub fn install_report_handler(sig: i32, wake: OwnedFd) -> io::Result<bool> {
    if REPORT_FD.load(Ordering::SeqCst) >= 0 {
        return Ok(true);
    }
    // SAFETY: plain old data; zero is a valid value for sigaction to overwrite.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a NULL new action only reads the current one into `old`.
    if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
        return Ok(false);
    }
    // Never closed: the handler may write to it at any time.
    REPORT_FD.store(wake.as_raw_fd(), Ordering::SeqCst);
    std::mem::forget(wake);
    // SAFETY: plain old data; zero is a valid initial value.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = on_report_signal as *const () as libc::sighandler_t;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: `act` is a valid sigaction whose handler is async-signal-safe (above);
    // `sa_mask` stays empty.
    if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

/// Unblocks `sig` in the calling thread, so that a signal sent to the process is
/// delivered to this thread even where the others block it (a process started with the
/// signal blocked keeps it blocked in every thread it creates).
pub fn unblock_in_this_thread(sig: i32) -> io::Result<()> {
    let set = sigset(&[sig])?;
    // SAFETY: `set` is an initialised sigset_t; the old mask is not asked for.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// How many report signals arrived since [`install_report_handler`].
pub fn report_signals() -> u64 {
    REPORTS.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_signal_and_drain() {
        let e = EventFd::new().unwrap();
        assert!(!e.drain());
        e.signal();
        e.signal();
        assert!(e.drain());
        assert!(!e.drain());
    }
}
