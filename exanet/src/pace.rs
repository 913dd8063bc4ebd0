//! Adaptive pacing of the driver's and transport's bounded waits.
//!
//! What it is: [`Pacer`], the pause between two looks at a condition that another thread or
//! process (the NI, the emulator, a peer) makes true. It spins with a CPU hint for the
//! first few looks, then yields the CPU for up to [`YIELD_FOR`] (on a small host the
//! emulator or the peer may need this very core), and only then sleeps, from 20 us
//! doubling to 1 ms. A wake-up from a sleep costs tens of microseconds on a VM, so a wait
//! that ends within a couple of milliseconds never sleeps, and a long one costs little CPU.
//!
//! What it is not: a timeout; every caller bounds its loop by a deadline of its own.
//!
//! Thread safety: a plain value owned by the waiting thread.

use std::time::{Duration, Instant};

/// Looks with only a CPU spin hint between them.
const SPINS: u32 = 32;
/// How long a wait yields the CPU between looks before it starts sleeping.
pub const YIELD_FOR: Duration = Duration::from_millis(2);
const SLEEP_MIN: Duration = Duration::from_micros(20);
const SLEEP_MAX: Duration = Duration::from_millis(1);

/// The pause between two looks at a condition (see the module docs).
#[derive(Debug)]
pub(crate) struct Pacer {
    start: Instant,
    looks: u32,
    sleep: Duration,
}

impl Pacer {
    /// A pacer for a wait that starts now.
    pub(crate) fn new() -> Self {
        Pacer {
            start: Instant::now(),
            looks: 0,
            sleep: SLEEP_MIN,
        }
    }

    /// Pauses once: spin hint, yield or sleep depending on how long the wait has lasted.
    pub(crate) fn pause(&mut self) {
        self.looks = self.looks.saturating_add(1);
        if self.looks <= SPINS {
            std::hint::spin_loop();
        } else if self.start.elapsed() < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.sleep);
            self.sleep = (self.sleep * 2).min(SLEEP_MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_from_spin_to_bounded_sleep() {
        let mut p = Pacer::new();
        let t = Instant::now();
        for _ in 0..SPINS {
            p.pause();
        }
        assert_eq!(p.sleep, SLEEP_MIN, "no sleep while spinning");
        p.start -= YIELD_FOR;
        for _ in 0..12 {
            p.pause();
        }
        assert_eq!(p.sleep, SLEEP_MAX, "sleeps double up to the bound");
        assert!(t.elapsed() >= Duration::from_millis(1));
    }
}
