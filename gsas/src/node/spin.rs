//! Adaptive spinning for waits on another node's reply (blocking get and atomic, quiet).
//!
//! **What it is.** [`ReplySpin`] decides, before each such wait, whether the waiter spins
//! for the full `GSAS_SPIN_US` before it blocks in `ppoll`, or spins only [`SHORT_SPIN`]
//! and blocks without yielding. Both are right somewhere:
//!
//! * On a machine with a core to spare for the PE, the reply of a loopback round trip
//!   comes within a few microseconds: spinning catches it, while blocking would add the
//!   wake-up of a sleeping thread (tens of microseconds on a virtual machine) to every
//!   operation.
//! * On a machine with more busy processes than cores (the service that must answer may
//!   be waiting for the very core the PE spins on), spinning delays the answer, the PE
//!   blocks in the end anyway, and a yield can hand the core to a compute-bound process
//!   for a whole time slice. Measured on 2 cores under a load of 15: 270 us per blocking
//!   get with the full 50 us spin, 145 us with 5 us.
//!
//! It learns which case holds from the waits themselves: a wait with the full spin that
//! still had to block counts as a miss. When 6 of the last 8 full-spin waits missed, later
//! waits use the short spin; every [`PROBE_EVERY`]th wait still spins fully, and its
//! outcome enters the same history, so three probes that do not block bring the full spin
//! back when the machine becomes idle.
//!
//! **What it is not.** Not used for waits whose length depends on other PEs (barriers,
//! room in a full window) nor for the shmem layer's waits on memory: only for replies.
//!
//! **Thread-safety.** Lock-free: two atomic words, updated with relaxed operations (a lost
//! update between racing threads only shifts the history by one entry).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::poll::{WaitConfig, WaitStats};

/// The spin of the short mode: about one loopback send and receive.
pub(crate) const SHORT_SPIN: Duration = Duration::from_micros(5);

/// In the short mode, one wait in this many still spins fully (a probe).
pub(crate) const PROBE_EVERY: u32 = 16;

/// Of the last 8 full-spin waits, this many misses switch to the short mode.
const MISSES_TO_SHORT: u32 = 6;

/// How the next wait on a reply spins; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct ReplySpin {
    /// The outcomes of the last 8 full-spin waits, newest in bit 0 (1: it blocked).
    history: AtomicU32,
    /// Waits planned, for choosing probes.
    waits: AtomicU32,
}

/// What [`ReplySpin::plan`] chose for one wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The configuration the wait uses.
    pub config: WaitConfig,
    /// Whether it spins fully (its outcome enters the history).
    pub full: bool,
}

impl ReplySpin {
    /// The configuration for the next wait, from the PE's `base` configuration.
    pub(crate) fn plan(&self, base: WaitConfig) -> Plan {
        let short = (self.history.load(Ordering::Relaxed) & 0xff).count_ones() >= MISSES_TO_SHORT;
        let probe = self.waits.fetch_add(1, Ordering::Relaxed) % PROBE_EVERY == 0;
        if !short || probe || base.spin <= SHORT_SPIN {
            return Plan {
                config: base,
                full: true,
            };
        }
        Plan {
            config: WaitConfig {
                spin: SHORT_SPIN,
                yields: 0,
                ..base
            },
            full: false,
        }
    }

    /// Records how a wait planned as `plan` went: `stats` are its waiter's counters, and
    /// `waited` tells whether it waited at all (a wait whose first look found the reply
    /// says nothing about spinning).
    pub(crate) fn record(&self, plan: Plan, stats: WaitStats, waited: bool) {
        if !plan.full || !waited {
            return;
        }
        let missed = u32::from(stats.blocks > 0);
        let h = self.history.load(Ordering::Relaxed);
        self.history
            .store(((h << 1) | missed) & 0xff, Ordering::Relaxed);
    }

    /// Whether the next non-probe wait uses the short spin.
    #[cfg(test)]
    fn is_short(&self) -> bool {
        (self.history.load(Ordering::Relaxed) & 0xff).count_ones() >= MISSES_TO_SHORT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(blocks: u64) -> WaitStats {
        WaitStats {
            steps: 10,
            yields: 4,
            blocks,
            fd_wakeups: blocks,
        }
    }

    #[test]
    fn switches_to_short_after_misses_and_back_after_probes() {
        let s = ReplySpin::default();
        let base = WaitConfig::new();
        // Full spins that catch their reply keep the full spin.
        for _ in 0..20 {
            let p = s.plan(base);
            assert_eq!(p.config, base);
            s.record(p, outcome(0), true);
        }
        assert!(!s.is_short());
        // Six misses in a row switch.
        for _ in 0..6 {
            let p = s.plan(base);
            s.record(p, outcome(3), true);
        }
        assert!(s.is_short());
        // Now most waits are short (no yields), one in PROBE_EVERY is a full probe.
        let plans: Vec<Plan> = (0..PROBE_EVERY).map(|_| s.plan(base)).collect();
        let probes = plans.iter().filter(|p| p.full).count();
        assert_eq!(probes, 1, "{plans:?}");
        let short = plans.iter().find(|p| !p.full).unwrap();
        assert_eq!(short.config.spin, SHORT_SPIN);
        assert_eq!(short.config.yields, 0);
        assert_eq!(short.config.max_block, base.max_block);
        // Short waits do not enter the history, whatever they do.
        for p in plans.iter().filter(|p| !p.full) {
            s.record(*p, outcome(0), true);
        }
        assert!(s.is_short());
        // Probes that catch their reply bring the full spin back (3 of them: 6 -> 3 misses
        // of the last 8 is below the threshold after the third).
        let mut probes_ok = 0;
        while s.is_short() {
            let p = s.plan(base);
            if p.full {
                s.record(p, outcome(0), true);
                probes_ok += 1;
            }
            assert!(probes_ok <= 3, "still short after {probes_ok} good probes");
        }
        assert_eq!(probes_ok, 3);
    }

    #[test]
    fn waits_that_did_not_wait_teach_nothing() {
        let s = ReplySpin::default();
        for _ in 0..10 {
            let p = s.plan(WaitConfig::new());
            s.record(p, outcome(5), false);
        }
        assert!(!s.is_short());
    }

    #[test]
    fn a_base_spin_below_the_short_one_is_kept() {
        let s = ReplySpin::default();
        let base = WaitConfig::new().with_spin_us(1);
        for _ in 0..8 {
            let p = s.plan(base);
            s.record(p, outcome(1), true);
        }
        for _ in 0..4 {
            assert_eq!(s.plan(base).config, base);
        }
    }
}
