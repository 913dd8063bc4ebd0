//! An Exanet PE's interrupt line, which its waits sleep on.
//!
//! What it is: [`PeWake`], the PE's endpoint interrupt line (the emulator's `irq` socket,
//! `/dev/uioN` on a board) shared by the PE's waiting threads. A wait that blocks arms the
//! line first ([`PeWake::arm`]: consume the interrupts that fired, enable it again), looks
//! once more, then sleeps in `ppoll` on [`PeWake::fd`]: a mailbox message (a reply, an
//! acknowledgement, a bulk descriptor), a completed bulk pull or a NACK ends the sleep, as
//! a datagram does on the UDP socket. Before, a waiting PE slept in bounded steps (20 us
//! growing to 1 ms) and looked at its endpoint after each: a reply could wait for the rest
//! of a step, and an idle PE kept waking up. On the emulator the two measure the same
//! (its own latency dominates, docs/exanet.md); on a board the line is what UIO offers.
//!
//! When the other side closes the line (an emulator that stopped), the duplicate is
//! pointed at a descriptor that never becomes readable, so that a wait that started with
//! the line does not spin on its end-of-file; its bounded blocks poll from then on, and
//! later waits poll the control socket instead.
//!
//! Thread-safety: the line is behind a mutex (arming and draining are two short system
//! calls); the polled descriptor is a duplicate, so waits poll it without the lock.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use gsas_transport::exanet::WakeLine;

use super::lock;

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct PeWake {
    line: Mutex<WakeLine>,
    /// A duplicate of the line's descriptor, for `ppoll`.
    pub(super) fd: OwnedFd,
}

impl PeWake {
    /// Wraps an open line. Errors: the line is closed already, or `dup` failed.
    pub(crate) fn new(line: WakeLine) -> io::Result<PeWake> {
        let fd = line
            .fd()
            .ok_or_else(|| io::Error::other("the line is closed"))?
            .try_clone_to_owned()?;
        Ok(PeWake {
            line: Mutex::new(line),
            fd,
        })
    }

    /// Whether the line still works (the other side, e.g. the emulator, has not closed it).
    pub(super) fn usable(&self) -> bool {
        lock(&self.line).fd().is_some()
    }

    /// Consumes the interrupts that fired and enables the line again, so that the next
    /// event makes [`PeWake::fd`] readable (one that is pending fires at once). Finding the
    /// line closed, it silences [`PeWake::fd`] (see the module docs).
    pub(super) fn arm(&self) {
        let mut line = lock(&self.line);
        if line.fd().is_none() {
            return;
        }
        line.drain();
        line.arm();
        if line.fd().is_none() {
            silence(&self.fd);
        }
    }
}

/// Points `fd` at a fresh eventfd that is never written, so it never becomes readable
/// (the descriptor number stays valid for waits that poll it). Best effort: on failure
/// `fd` stays as it is, and such waits spin until they end.
fn silence(fd: &OwnedFd) {
    // SAFETY: eventfd has no memory arguments; the result is checked before use.
    let quiet = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if quiet < 0 {
        log::warn!(
            "Exanet interrupt line closed, and no eventfd to replace it: {}",
            io::Error::last_os_error()
        );
        return;
    }
    // SAFETY: `quiet` was just returned by eventfd and is owned by nobody else.
    let quiet = unsafe { OwnedFd::from_raw_fd(quiet) };
    // SAFETY: both descriptors are open and owned (`fd` by the caller, which keeps it);
    // dup3 atomically replaces what `fd`'s number refers to.
    let r = unsafe { libc::dup3(quiet.as_raw_fd(), fd.as_raw_fd(), libc::O_CLOEXEC) };
    if r < 0 {
        log::warn!(
            "Exanet interrupt line closed; silencing its descriptor failed: {}",
            io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixListener;

    use super::*;

    fn readable(fd: &OwnedFd) -> bool {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; zero timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn a_line_closed_by_the_other_side_goes_quiet_instead_of_readable() {
        let dir = std::env::temp_dir().join(format!("gsas-wake-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("irq");
        let listener = UnixListener::bind(&path).unwrap();
        let wake = PeWake::new(WakeLine::open(&path).unwrap()).unwrap();
        let (mut emulator, _) = listener.accept().unwrap();
        wake.arm();
        // The emulator raises the interrupt: the descriptor is readable, and arming again
        // consumes the event.
        std::io::Write::write_all(&mut emulator, &1u32.to_ne_bytes()).unwrap();
        assert!(readable(&wake.fd));
        wake.arm();
        assert!(!readable(&wake.fd));
        assert!(wake.usable());
        // The emulator stops: the end of file must not leave the descriptor readable.
        drop(emulator);
        wake.arm();
        assert!(!wake.usable());
        assert!(
            !readable(&wake.fd),
            "a closed line would make every wait spin"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
