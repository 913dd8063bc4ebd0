//! Distributed locks of the Rust API (OpenSHMEM 1.5 §9.12): [`SymLock`] and its guard.
//!
//! **What it is.** A [`SymLock`] is a symmetric `long` used as an OpenSHMEM lock (a FIFO
//! ticket lock, see [`crate::ticket_lock`]); [`SymLock::lock`] waits for it and returns a
//! [`LockGuard`] that releases it when dropped (`shmem_clear_lock`, which first quiets the
//! default context). The guard tells its ticket: locks are granted in ticket order.
//!
//! **What it is not.** Not a local mutex (threads of one PE compete like PEs), not
//! reentrant, and it protects nothing by itself: the program decides what the lock guards.
//!
//! **Thread-safety.** `Send + Sync`.

use std::ffi::c_long;

use super::Error;
use super::Shmem;
use super::sym::SymBox;
use crate::ticket_lock;

/// A distributed lock; see the [API overview](crate::api).
#[derive(Debug)]
pub struct SymLock<'s>(SymBox<'s, i64>);

/// A held lock; dropping it is `shmem_clear_lock`.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard<'l> {
    lock: &'l SymLock<'l>,
    ticket: u32,
}

impl Shmem {
    /// A new lock (a collective allocation of a zeroed symmetric `long`).
    ///
    /// Errors: as [`Shmem::alloc_vec`].
    pub fn alloc_lock(&self) -> Result<SymLock<'_>, Error> {
        Ok(SymLock(self.alloc_box(0i64)?))
    }
}

impl<'s> SymLock<'s> {
    fn word(&self) -> *mut c_long {
        self.0.as_ptr().cast_mut().cast()
    }

    /// `shmem_set_lock` (OpenSHMEM 1.5 §9.12.1): waits for the lock (first come, first
    /// served).
    pub fn lock(&self) -> LockGuard<'_> {
        // SAFETY: the word is a symmetric long used only as this lock.
        let ticket = unsafe { ticket_lock::set_lock(self.word(), "shmem::SymLock::lock") };
        LockGuard { lock: self, ticket }
    }

    /// `shmem_test_lock` (OpenSHMEM 1.5 §9.12.1): the lock if it is free now.
    pub fn try_lock(&self) -> Option<LockGuard<'_>> {
        // SAFETY: as above.
        let ticket = unsafe { ticket_lock::try_lock(self.word(), "shmem::SymLock::try_lock") }?;
        Some(LockGuard { lock: self, ticket })
    }
}

impl LockGuard<'_> {
    /// The ticket of this acquisition: acquisitions of a lock are numbered 0, 1, 2, ... in
    /// the order the lock grants them (modulo 2^32).
    pub fn ticket(&self) -> u32 {
        self.ticket
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock.
        unsafe { ticket_lock::clear_lock(self.lock.word(), "shmem::SymLock::unlock") }
    }
}
