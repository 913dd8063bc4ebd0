//! Retransmission timeout from measured round-trip times (RFC 6298, simplified).
//!
//! `srtt` and `rttvar` are smoothed with gains 1/8 and 1/4; the timeout is
//! `srtt + 4 * rttvar`, clamped to `[min, max]`. Samples come only from frames acknowledged
//! after a single transmission (Karn's rule); the caller enforces that. Backoff doubles the
//! timeout per retransmission of a frame, up to `max`.

/// Round-trip estimator of one peer. Times are nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RttEstimator {
    srtt: u64,
    rttvar: u64,
    rto: u64,
    sampled: bool,
}

impl RttEstimator {
    /// An estimator with no sample yet, using `initial_rto` until the first one.
    pub(crate) const fn new(initial_rto: u64) -> Self {
        RttEstimator {
            srtt: 0,
            rttvar: 0,
            rto: initial_rto,
            sampled: false,
        }
    }

    /// Feeds one round-trip sample.
    pub(crate) fn sample(&mut self, rtt: u64, min_rto: u64, max_rto: u64) {
        if self.sampled {
            let err = self.srtt.abs_diff(rtt);
            self.rttvar = (3 * self.rttvar + err) / 4;
            self.srtt = (7 * self.srtt + rtt) / 8;
        } else {
            self.srtt = rtt;
            self.rttvar = rtt / 2;
            self.sampled = true;
        }
        self.rto = self
            .srtt
            .saturating_add(self.rttvar.saturating_mul(4))
            .clamp(min_rto, max_rto);
    }

    /// The smoothed round-trip time, or 0 before the first sample.
    pub(crate) fn srtt(&self) -> u64 {
        self.srtt
    }

    /// The timeout for a frame retransmitted `retries` times so far.
    pub(crate) fn timeout(&self, retries: u16, max_rto: u64) -> u64 {
        let shift = u32::from(retries.min(20));
        self.rto.saturating_mul(1 << shift).min(max_rto)
    }
}

#[cfg(test)]
mod tests {
    use super::RttEstimator;

    #[test]
    fn first_sample_then_smoothing() {
        let mut e = RttEstimator::new(5_000);
        assert_eq!(e.timeout(0, 1_000_000), 5_000);
        e.sample(1_000, 100, 1_000_000);
        // srtt 1000, rttvar 500: 1000 + 2000.
        assert_eq!(e.timeout(0, 1_000_000), 3_000);
        e.sample(1_000, 100, 1_000_000);
        // rttvar 375: 1000 + 1500.
        assert_eq!(e.srtt(), 1_000);
        assert_eq!(e.timeout(0, 1_000_000), 2_500);
    }

    #[test]
    fn clamping_and_backoff() {
        let mut e = RttEstimator::new(5_000);
        e.sample(10, 1_000, 64_000);
        assert_eq!(e.timeout(0, 64_000), 1_000, "raised to the minimum");
        assert_eq!(e.timeout(3, 64_000), 8_000);
        assert_eq!(e.timeout(10, 64_000), 64_000, "capped");
        assert_eq!(e.timeout(u16::MAX, 64_000), 64_000);
        e.sample(1_000_000, 1_000, 64_000);
        assert_eq!(e.timeout(0, 64_000), 64_000);
    }
}
