//! Refusing replayed FORK requests: a timestamp window and a cache of nonces seen.
//!
//! What it is: [`ReplayGuard::check`] accepts an (authenticated) request only if its
//! timestamp lies within `window` of the daemon's clock and its nonce was not accepted
//! before. A nonce is remembered until its request's timestamp leaves the window; after
//! that the timestamp check refuses the request anyway, so the cache holds at most the
//! nonces of one window. The cache is bounded ([`ReplayGuard::new`]'s capacity): when it is
//! full of live nonces, new requests are refused as [`ReplayError::Full`] (retry later)
//! rather than letting memory grow.
//!
//! What it is not: authentication (the MAC is checked first, by the caller) or clock
//! synchronisation: launcher and daemon clocks must agree within the window (NTP).
//!
//! Each nonce carries a value of the caller's ([`ReplayGuard::seen`],
//! [`ReplayGuard::seen_mut`]): the FORK server keeps there who sent the request and what
//! it was answered, so that the same request coming again from the same sender (its
//! reliability state was lost with its peer slot, and it sent its last fragment again) gets
//! the same answer instead of a refusal, and starts nothing twice.
//!
//! Thread-safety: a plain value mutated through `&mut self`.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// Default window: requests at most this far from the daemon's clock are accepted.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(120);
/// Default number of nonces remembered.
pub const DEFAULT_CAPACITY: usize = 1 << 16;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayError {
    /// The timestamp is outside the window; `skew_ms` is request time minus daemon time.
    Stale {
        /// Request time minus daemon time, in milliseconds.
        skew_ms: i64,
    },
    /// The nonce was accepted before.
    Replayed,
    /// The cache is full of live nonces.
    Full,
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Stale { skew_ms } => write!(
                f,
                "timestamp {:+.1} s from this daemon's clock, outside the accepted window",
                *skew_ms as f64 / 1000.0
            ),
            ReplayError::Replayed => f.write_str("replayed request (nonce seen before)"),
            ReplayError::Full => f.write_str("too many recent requests; retry later"),
        }
    }
}

/// The timestamp window and nonce cache; every nonce remembered carries a `T` of the
/// caller's.
#[derive(Debug)]
pub struct ReplayGuard<T = ()> {
    window_ms: u64,
    capacity: usize,
    /// Nonce -> the daemon time (ms) after which it may be forgotten, and the caller's value.
    seen: HashMap<[u8; 16], (u64, T)>,
}

impl<T> ReplayGuard<T> {
    /// A guard accepting timestamps within `window` of the daemon's clock and remembering
    /// at most `capacity` nonces.
    pub fn new(window: Duration, capacity: usize) -> Self {
        ReplayGuard {
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
            capacity: capacity.max(1),
            seen: HashMap::new(),
        }
    }

    /// Nonces remembered now.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no nonce is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The value remembered with `nonce`, if the nonce is remembered.
    pub fn seen(&self, nonce: &[u8; 16]) -> Option<&T> {
        self.seen.get(nonce).map(|(_, v)| v)
    }

    /// The value remembered with `nonce`, to change it.
    pub fn seen_mut(&mut self, nonce: &[u8; 16]) -> Option<&mut T> {
        self.seen.get_mut(nonce).map(|(_, v)| v)
    }

    /// Checks a request made at `timestamp_ms` with `nonce`, the daemon's clock reading
    /// `now_ms` (both in ms since the Unix epoch), and remembers the nonce with `value` if
    /// accepted.
    pub fn check(
        &mut self,
        nonce: [u8; 16],
        timestamp_ms: u64,
        now_ms: u64,
        value: T,
    ) -> Result<(), ReplayError> {
        let skew = i128::from(timestamp_ms) - i128::from(now_ms);
        if skew.unsigned_abs() > u128::from(self.window_ms) {
            return Err(ReplayError::Stale {
                skew_ms: skew.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
            });
        }
        if self.seen.contains_key(&nonce) {
            return Err(ReplayError::Replayed);
        }
        if self.seen.len() >= self.capacity {
            self.seen
                .retain(|_, &mut (forget_at, _)| forget_at > now_ms);
            if self.seen.len() >= self.capacity {
                return Err(ReplayError::Full);
            }
        }
        self.seen
            .insert(nonce, (timestamp_ms.saturating_add(self.window_ms), value));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(i: u8) -> [u8; 16] {
        [i; 16]
    }

    #[test]
    fn window_and_replays() {
        let mut g = ReplayGuard::new(Duration::from_secs(120), 8);
        let now = 1_700_000_000_000;
        assert_eq!(g.check(n(1), now, now, ()), Ok(()));
        assert_eq!(g.check(n(1), now, now + 5, ()), Err(ReplayError::Replayed));
        assert_eq!(g.check(n(2), now - 120_000, now, ()), Ok(()));
        assert_eq!(g.check(n(3), now + 120_000, now, ()), Ok(()));
        assert_eq!(
            g.check(n(4), now - 120_001, now, ()),
            Err(ReplayError::Stale { skew_ms: -120_001 })
        );
        assert_eq!(
            g.check(n(5), now + 600_000, now, ()),
            Err(ReplayError::Stale { skew_ms: 600_000 })
        );
        assert_eq!(
            g.check(n(6), 0, u64::MAX, ()),
            Err(ReplayError::Stale { skew_ms: i64::MIN })
        );
        assert!(
            ReplayError::Stale { skew_ms: -130_000 }
                .to_string()
                .contains("-130.0 s")
        );
        assert_eq!(g.len(), 3);
    }

    #[test]
    fn the_cache_is_bounded_and_forgets_expired_nonces() {
        let mut g = ReplayGuard::new(Duration::from_secs(10), 3);
        let t = 1_000_000;
        for i in 0..3 {
            g.check(n(i), t, t, ()).unwrap();
        }
        assert_eq!(g.check(n(9), t, t + 1, ()), Err(ReplayError::Full));
        // Ten seconds later the first three can be forgotten: their timestamps are out of
        // the window, so a replay of them is refused as stale anyway.
        assert_eq!(g.check(n(9), t + 10_001, t + 10_001, ()), Ok(()));
        assert_eq!(g.len(), 1);
        assert!(matches!(
            g.check(n(0), t, t + 10_001, ()),
            Err(ReplayError::Stale { .. })
        ));
        assert!(!g.is_empty());
    }

    #[test]
    fn a_nonce_keeps_the_value_it_was_first_seen_with() {
        let mut g = ReplayGuard::new(Duration::from_secs(10), 4);
        let t = 5_000_000;
        g.check(n(1), t, t, "first").unwrap();
        assert_eq!(g.seen(&n(1)), Some(&"first"));
        // A second check of the nonce is refused and leaves the value as it was.
        assert_eq!(g.check(n(1), t, t, "second"), Err(ReplayError::Replayed));
        assert_eq!(g.seen(&n(1)), Some(&"first"));
        *g.seen_mut(&n(1)).unwrap() = "answered";
        assert_eq!(g.seen(&n(1)), Some(&"answered"));
        assert_eq!(g.seen(&n(2)), None);
    }
}
