//! Futex doorbells: how the atomic service wakes a PE that sleeps waiting for an update.
//!
//! **What it is.** A [`Bell`] is two 32-bit words in memory shared by the node's service
//! and one PE: `seq`, bumped by every ring, and `sleepers`, the number of the PE's threads
//! that are about to sleep or sleep on `seq` with `futex(2)`. The service keeps one page of
//! bells (the *doorbell page*, which also holds the service's own wake word at offset 0,
//! see `gsas_service`); a PE gets a slot in it when it joins ([`slot_offset`]) and maps
//! the page. The protocol:
//!
//! * **Service** ([`Bell::ring`]), after applying a WRITE, BULK_WRITE fragment, modifying
//!   atomic or signal to the PE's memory: a sequentially consistent fence, then one relaxed
//!   load of `sleepers`; nothing more when it is 0. Otherwise it bumps `seq` and
//!   `FUTEX_WAKE`s every sleeper.
//! * **Waiter** ([`Bell::announce`], then [`Sleeper::sleep`]): `sleepers += 1` and a
//!   sequentially consistent fence, read `seq`, re-check the condition, then `FUTEX_WAIT`
//!   on `seq` for at most the bounded sleep step it would have slept anyway, and
//!   `sleepers -= 1` (when the [`Sleeper`] drops).
//!
//! Nothing is lost to a race: an update applied before the waiter's announcement is seen
//! by the re-check; one applied after it finds `sleepers > 0` (the two fences order the
//! data store before the `sleepers` load, and the increment before the re-check), bumps
//! `seq`, and the futex wait either returns at once (`seq` no longer matches) or is woken.
//! The worst case (a bell that is never rung) is the bounded sleep of before.
//!
//! The futex calls use the shared (not `FUTEX_PRIVATE_FLAG`) form, because the page is
//! mapped by several processes; the kernel keys the wait queue by the page's file offset.
//!
//! **What it is not.** Not a lock, a queue or a notification of *what* changed: a ring only
//! says "memory of this PE was written; re-check". Same-node PEs that store directly into
//! a peer's mapping do not ring (their waiters' spin phase sees such stores quickly).
//!
//! **Thread-safety.** [`Bell`] is a view of shared memory made only of atomics (`Sync`);
//! any number of threads and processes may ring, announce and sleep concurrently.
//! [`BellRef`] owns a reference to the mapping that holds the bell and is `Send + Sync`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::Duration;

use crate::shm::Segment;

/// Offset of the first bell in the doorbell page (the first cache line holds the service's
/// own wake word).
pub const FIRST_BELL: usize = 64;

/// Bytes per bell.
pub const BELL_SIZE: usize = 8;

/// Offset of bell `slot` in the doorbell page.
pub const fn slot_offset(slot: u32) -> usize {
    FIRST_BELL + slot as usize * BELL_SIZE
}

/// Length of a doorbell page that holds `slots` bells, rounded up to whole pages.
pub fn page_len(slots: usize) -> usize {
    let page = crate::shm::page_size();
    (FIRST_BELL + slots * BELL_SIZE).div_ceil(page) * page
}

/// A doorbell in shared memory; see the [module docs](self).
#[repr(C, align(8))]
#[derive(Debug, Default)]
pub struct Bell {
    seq: AtomicU32,
    sleepers: AtomicU32,
}

impl Bell {
    /// A bell in this process's own memory (for tests and single-process use).
    pub const fn new() -> Self {
        Bell {
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        }
    }

    /// The bell at `offset` of `segment`; `None` if it does not lie inside the segment or
    /// `offset` is not a multiple of 8.
    pub fn at(segment: &Segment, offset: usize) -> Option<&Bell> {
        if offset % BELL_SIZE != 0 || offset.checked_add(BELL_SIZE)? > segment.len() {
            return None;
        }
        // SAFETY: the 8 bytes at `offset` lie inside the live mapping (checked above) and
        // are 8-byte aligned (mappings are page aligned); `Bell` is two `AtomicU32`s, valid
        // for any bit pattern, and shared memory is only accessed through atomics. The
        // reference borrows `segment`, so the mapping outlives it.
        Some(unsafe { &*segment.as_ptr().add(offset).cast::<Bell>() })
    }

    /// Service side: wakes the sleepers of this bell if there are any. Call it after the
    /// update has been stored. Returns whether it rang (found a sleeper).
    #[inline]
    pub fn ring(&self) -> bool {
        // Orders the update's stores before the load of `sleepers`; pairs with the fence
        // in `announce`.
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.ring_slow();
        true
    }

    #[cold]
    fn ring_slow(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(&self.seq);
    }

    /// Waiter side: announces a sleeper and reads the sequence. Re-check the condition
    /// after this, then [`Sleeper::sleep`] if it still does not hold.
    pub fn announce(&self) -> Sleeper<'_> {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // Orders the increment before the caller's re-check; pairs with the fence in
        // `ring`.
        fence(Ordering::SeqCst);
        Sleeper {
            bell: self,
            seq: self.seq.load(Ordering::SeqCst),
        }
    }

    /// How many sleepers are announced (for tests and diagnostics).
    pub fn sleepers(&self) -> u32 {
        self.sleepers.load(Ordering::Relaxed)
    }

    /// How often the bell rang (wrapping; for tests and diagnostics).
    pub fn seq(&self) -> u32 {
        self.seq.load(Ordering::Relaxed)
    }

    /// Sleeps until the bell's sequence is no longer `seq` (a ring after the
    /// announcement that read it, see [`Sleeper::seq`]) or `timeout` passes. Returns at
    /// once, without a system call, if it rang already. Returns whether it rang. Only
    /// an announced sleeper makes the service ring: the caller must know one stands.
    pub fn sleep_past(&self, seq: u32, timeout: Duration) -> bool {
        if self.seq.load(Ordering::Acquire) != seq {
            return true;
        }
        futex_wait(&self.seq, seq, timeout);
        self.seq.load(Ordering::Acquire) != seq
    }

    /// Resets the counters, for a slot handed to a new PE (a PE killed while asleep would
    /// otherwise leave its announcement behind and cost the service needless wakes).
    pub fn reset(&self) {
        self.sleepers.store(0, Ordering::Relaxed);
    }
}

/// An announced sleeper of a [`Bell`]; dropping it withdraws the announcement.
#[derive(Debug)]
pub struct Sleeper<'b> {
    bell: &'b Bell,
    seq: u32,
}

impl Sleeper<'_> {
    /// Whether the bell rang since the announcement.
    pub fn rung(&self) -> bool {
        self.bell.seq.load(Ordering::Acquire) != self.seq
    }

    /// Sleeps until the bell rings or `timeout` passes. Returns at once, without a system
    /// call, if it rang since the announcement. Returns whether it rang (`false`: the
    /// timeout passed, or a signal interrupted the sleep).
    pub fn sleep(&self, timeout: Duration) -> bool {
        self.bell.sleep_past(self.seq, timeout)
    }

    /// The bell's sequence read at the announcement: another thread may wait for a ring
    /// after it with [`Bell::sleep_past`] on this sleeper's behalf (while this thread
    /// blocks on something else, and the announcement stands).
    pub fn seq(&self) -> u32 {
        self.seq
    }
}

impl Drop for Sleeper<'_> {
    fn drop(&mut self) {
        self.bell.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A bell inside a shared mapping, keeping the mapping alive.
#[derive(Clone, Debug)]
pub struct BellRef {
    page: Arc<Segment>,
    offset: usize,
}

impl BellRef {
    /// The bell at `offset` of `page`; `None` if it does not fit (see [`Bell::at`]).
    pub fn new(page: Arc<Segment>, offset: usize) -> Option<BellRef> {
        Bell::at(&page, offset)?;
        Some(BellRef { page, offset })
    }

    /// The bell.
    #[inline]
    pub fn bell(&self) -> &Bell {
        // SAFETY: `new` checked that the bell lies inside the mapping and is aligned, and
        // `self.page` keeps the mapping alive for as long as the returned borrow of `self`.
        unsafe { &*self.page.as_ptr().add(self.offset).cast::<Bell>() }
    }
}

/// `FUTEX_WAIT` on `word` while it holds `expected`, for at most `timeout`. Spurious
/// returns (a signal, the value changed already) are fine: callers re-check.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned 32-bit word for the duration of the call; the
    // kernel only reads it and `ts`, which lives across the call. The shared form is used
    // on purpose: the word may be mapped by other processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// `FUTEX_WAKE` of every waiter on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned 32-bit word; FUTEX_WAKE reads no other argument.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_without_sleepers_does_nothing() {
        let bell = Bell::new();
        assert!(!bell.ring());
        assert_eq!(bell.seq(), 0, "no sleeper: the sequence stays");
    }

    #[test]
    fn ring_after_announce_bumps_and_sleep_returns_at_once() {
        let bell = Bell::new();
        let s = bell.announce();
        assert_eq!(bell.sleepers(), 1);
        assert!(!s.rung());
        assert!(bell.ring());
        assert_eq!(bell.seq(), 1);
        assert!(s.rung());
        // The bell rang after the announcement: no futex wait (a wait would last an hour).
        assert!(s.sleep(Duration::from_secs(3600)));
        drop(s);
        assert_eq!(bell.sleepers(), 0, "the announcement is withdrawn");
        assert!(!bell.ring());
        assert_eq!(bell.seq(), 1);
    }

    #[test]
    fn another_thread_sleeps_past_an_announcements_sequence() {
        let bell = Bell::new();
        let s = bell.announce();
        let seq = s.seq();
        assert!(
            !bell.sleep_past(seq, Duration::from_millis(2)),
            "no ring: it times out"
        );
        std::thread::scope(|t| {
            let h = t.spawn(|| bell.sleep_past(seq, Duration::from_secs(60)));
            // Rings until the other thread returns: a ring before its futex wait makes the
            // wait return at once, one during it wakes it.
            while !h.is_finished() {
                bell.ring();
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(h.join().unwrap(), "woken by a ring, not by the timeout");
        });
        // Rung since `seq`: no wait at all (a wait would last an hour).
        assert!(bell.sleep_past(seq, Duration::from_secs(3600)));
        assert!(s.rung());
    }

    #[test]
    fn unrung_sleep_times_out() {
        let bell = Bell::new();
        let s = bell.announce();
        assert!(!s.sleep(Duration::from_millis(2)));
    }

    #[test]
    fn a_ring_from_another_process_mapping_wakes_the_sleeper() {
        let page = Arc::new(Segment::create("bell-test", page_len(4)).unwrap());
        let other = Segment::map(page.try_clone_fd().unwrap(), "bell-test (service)").unwrap();
        let waiter = BellRef::new(Arc::clone(&page), slot_offset(3)).unwrap();
        let s = waiter.bell().announce();
        let ringer = std::thread::spawn(move || {
            let bell = Bell::at(&other, slot_offset(3)).unwrap();
            // Rings until the sleeper is gone: a ring before the futex wait starts
            // makes the wait return at once, one during it wakes it.
            while bell.sleepers() > 0 {
                bell.ring();
                std::thread::sleep(Duration::from_millis(1));
            }
            bell.seq()
        });
        // `sleep` says whether a ring ended it: a minute is far beyond the ringer's first
        // ring, and a timeout (a lost wake-up) fails the test instead of passing it.
        assert!(s.sleep(Duration::from_secs(60)));
        drop(s);
        assert!(ringer.join().unwrap() >= 1);
    }

    #[test]
    fn slots_outside_the_page_are_refused() {
        let page = Arc::new(Segment::create("bell-bounds", page_len(1)).unwrap());
        let last = (page.len() - FIRST_BELL) / BELL_SIZE - 1;
        assert!(BellRef::new(Arc::clone(&page), slot_offset(last as u32)).is_some());
        assert!(BellRef::new(Arc::clone(&page), slot_offset(last as u32 + 1)).is_none());
        assert!(Bell::at(&page, 4).is_none(), "misaligned");
        assert_eq!(page_len(0), crate::shm::page_size());
    }
}
