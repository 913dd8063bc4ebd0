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
//!   get with the full 50 us spin, 145 us with 5 us. (That was before the waiter's spin
//!   yielded after [`PURE_SPIN`](gsas_transport::poll::PURE_SPIN), which hands such a core over
//!   at once; the short mode still saves the spinning time of waits that block anyway.)
//!
//! It learns which case holds from the waits themselves, into a history of the last 8
//! verdicts (newest in bit 0). When 6 of them are misses, later waits use the short spin.
//!
//! * A full-spin wait that caught its reply without blocking is a **hit**.
//! * A full-spin wait that blocked and still got its reply within [`LONG_WAIT`] is a
//!   **miss** (spinning did not help; on an overloaded machine it delays the answer).
//! * A full-spin wait that blocked for longer says nothing: the reply was late for another
//!   reason (a service that was busy or descheduled, a PE that came late), and no spin
//!   would have caught it. Counted as misses, such waits switched a PE to the short spin
//!   after a phase of slow replies (collectives on a loaded machine), where only one
//!   probe in [`PROBE_EVERY`] could bring it back.
//! * A short-spin wait whose first block was ended by its descriptor (the reply came
//!   within [`SHORT_SPIN`] plus the first block's bound, less than the full spin) is a
//!   **hit** too: the full spin would have caught it without the process wake-up the
//!   block cost. This is what brings the full spin back quickly once replies are fast
//!   again; other short-spin waits say nothing.
//! * A wait whose first look found the reply says nothing either.
//!
//! In the short mode every [`PROBE_EVERY`]th wait still spins fully, and its verdict
//! enters the same history, so the machine is sampled even while every short wait is slow.
//!
//! **What it is not.** Not used for waits whose length depends on other PEs (barriers,
//! room in a full window) nor for the shmem layer's waits on memory: only for replies.
//!
//! **Thread-safety.** Lock-free: two atomic words, updated with relaxed operations (a lost
//! update between racing threads only shifts the history by one entry).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use gsas_transport::poll::{WaitConfig, WaitStats};

/// A full-spin wait that blocked and lasted longer than this was slowed by something a
/// spin cannot help (its verdict is not recorded).
pub(crate) const LONG_WAIT: Duration = Duration::from_micros(500);

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
    /// Whether it spins fully.
    pub full: bool,
    /// The PE's configuration it was planned from.
    pub base: WaitConfig,
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
                base,
            };
        }
        Plan {
            config: WaitConfig {
                spin: SHORT_SPIN,
                yields: 0,
                ..base
            },
            full: false,
            base,
        }
    }

    /// Records how a wait planned as `plan` went: `stats` are its waiter's counters, and
    /// `waited` tells whether it waited at all (a wait whose first look found the reply
    /// says nothing about spinning).
    pub(crate) fn record(&self, plan: Plan, stats: WaitStats, waited: bool) {
        if let Some(missed) = verdict(plan, stats, waited) {
            let h = self.history.load(Ordering::Relaxed);
            self.history
                .store(((h << 1) | u32::from(missed)) & 0xff, Ordering::Relaxed);
        }
    }

    /// Whether the next non-probe wait uses the short spin.
    #[cfg(test)]
    fn is_short(&self) -> bool {
        (self.history.load(Ordering::Relaxed) & 0xff).count_ones() >= MISSES_TO_SHORT
    }
}

/// What one wait says about spinning: `Some(true)` a miss, `Some(false)` a hit, `None`
/// nothing; see the [module docs](self).
fn verdict(plan: Plan, stats: WaitStats, waited: bool) -> Option<bool> {
    if !waited {
        return None;
    }
    if plan.full {
        return match stats.blocks {
            0 => Some(false),
            _ if stats.waited <= LONG_WAIT => Some(true),
            _ => None,
        };
    }
    let caught_by_full_spin = stats.blocks == 1
        && stats.fd_wakeups == 1
        && plan.config.spin + plan.config.min_block <= plan.base.spin;
    caught_by_full_spin.then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters of a wait that blocked `blocks` times, `fd_wakeups` of them ended by a
    /// descriptor, and lasted `us` microseconds.
    fn outcome(blocks: u64, fd_wakeups: u64, us: u64) -> WaitStats {
        WaitStats {
            steps: 10,
            yields: 4,
            blocks,
            fd_wakeups,
            waited: Duration::from_micros(us),
        }
    }

    /// A full-spin wait that caught its reply while spinning.
    const HIT: WaitStats = WaitStats {
        steps: 10,
        yields: 0,
        blocks: 0,
        fd_wakeups: 0,
        waited: Duration::from_micros(8),
    };

    /// A full-spin wait that blocked and got its reply soon after (overloaded machine).
    fn miss() -> WaitStats {
        outcome(1, 1, 150)
    }

    /// Switches `s` to the short mode with misses.
    fn make_short(s: &ReplySpin, base: WaitConfig) {
        while !s.is_short() {
            let p = s.plan(base);
            s.record(p, miss(), true);
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
            s.record(p, HIT, true);
        }
        assert!(!s.is_short());
        // Six misses in a row switch.
        for _ in 0..6 {
            let p = s.plan(base);
            s.record(p, miss(), true);
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
        // Short waits that caught their reply spinning, or blocked more than once, say
        // nothing.
        for p in plans.iter().filter(|p| !p.full) {
            s.record(*p, outcome(0, 0, 3), true);
            s.record(*p, outcome(3, 1, 120), true);
        }
        assert!(s.is_short());
        // Probes that catch their reply bring the full spin back (3 of them: 6 -> 3 misses
        // of the last 8 is below the threshold after the third).
        let mut probes_ok = 0;
        while s.is_short() {
            let p = s.plan(base);
            if p.full {
                s.record(p, HIT, true);
                probes_ok += 1;
            }
            assert!(probes_ok <= 3, "still short after {probes_ok} good probes");
        }
        assert_eq!(probes_ok, 3);
    }

    #[test]
    fn long_blocking_waits_do_not_switch_to_short() {
        // Replies slowed by something else (a busy service, a late PE): the full spin
        // blocks every time, for long. That is no reason to stop spinning.
        let s = ReplySpin::default();
        let base = WaitConfig::new();
        for us in [600, 2_000, 700, 10_000, 501, 900, 3_000, 800, 1_000, 650] {
            let p = s.plan(base);
            assert!(p.full);
            s.record(p, outcome(4, 2, us), true);
        }
        assert!(!s.is_short());
        // A miss is a block that ended within LONG_WAIT.
        let p = s.plan(base);
        s.record(p, outcome(1, 1, LONG_WAIT.as_micros() as u64), true);
        assert_eq!(s.history.load(Ordering::Relaxed) & 1, 1);
    }

    #[test]
    fn recovers_when_short_waits_show_the_full_spin_would_have_caught_the_reply() {
        // The symptom: after a phase of misses (collectives on a loaded machine), round
        // trips are fast again, but each short wait blocks and pays a process wake-up.
        // A short wait whose first block was ended by the reply proves that the full spin
        // (50 us > 5 us + the first block's 20 us) would have caught it: three of them
        // bring the full spin back, without waiting for probes.
        let s = ReplySpin::default();
        let base = WaitConfig::new();
        make_short(&s, base);
        // Skip the probe due now, so that only short waits follow.
        let mut recorded = 0;
        while s.is_short() {
            let p = s.plan(base);
            if p.full {
                continue;
            }
            // Woken by the reply at the first block; with the wake-up it took 90 us.
            s.record(p, outcome(1, 1, 90), true);
            recorded += 1;
            assert!(recorded <= 3, "still short after {recorded} fast replies");
        }
        assert_eq!(recorded, 3);
        assert_eq!(s.plan(base).config, base);
    }

    #[test]
    fn a_short_first_block_that_timed_out_says_nothing() {
        let s = ReplySpin::default();
        let base = WaitConfig::new();
        make_short(&s, base);
        let h = s.history.load(Ordering::Relaxed);
        for stats in [outcome(1, 0, 30), outcome(2, 1, 70), outcome(5, 1, 400)] {
            let p = (0..2).map(|_| s.plan(base)).find(|p| !p.full).unwrap();
            s.record(p, stats, true);
        }
        assert_eq!(s.history.load(Ordering::Relaxed), h);
        // Nor a short first block that cannot prove anything: a base spin too short for
        // SHORT_SPIN plus the first block.
        let narrow = WaitConfig::new().with_spin_us(20);
        let p = Plan {
            config: WaitConfig {
                spin: SHORT_SPIN,
                yields: 0,
                ..narrow
            },
            full: false,
            base: narrow,
        };
        assert_eq!(verdict(p, outcome(1, 1, 40), true), None);
    }

    #[test]
    fn waits_that_did_not_wait_teach_nothing() {
        let s = ReplySpin::default();
        for _ in 0..10 {
            let p = s.plan(WaitConfig::new());
            s.record(p, miss(), false);
        }
        assert!(!s.is_short());
    }

    #[test]
    fn a_base_spin_below_the_short_one_is_kept() {
        let s = ReplySpin::default();
        let base = WaitConfig::new().with_spin_us(1);
        for _ in 0..8 {
            let p = s.plan(base);
            s.record(p, miss(), true);
        }
        for _ in 0..4 {
            assert_eq!(s.plan(base).config, base);
        }
    }
}
