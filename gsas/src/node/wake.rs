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
//! Thread-safety: the line is behind a mutex (arming and draining are two short system
//! calls); the polled descriptor is a duplicate, so waits poll it without the lock.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use crate::transport::exanet::WakeLine;

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
    /// event makes [`PeWake::fd`] readable (one that is pending fires at once).
    pub(super) fn arm(&self) {
        let mut line = lock(&self.line);
        line.drain();
        line.arm();
    }
}
