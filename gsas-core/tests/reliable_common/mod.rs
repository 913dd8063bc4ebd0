//! What the reliability-layer test binaries share.

use gsas_core::reliable::Config;

/// Short timers so that tests walk through timeouts with small numbers.
pub fn config(epoch: u64) -> Config {
    Config {
        ack_delay_ns: 100,
        min_rto_ns: 1_000,
        initial_rto_ns: 1_000,
        max_rto_ns: 8_000,
        deadline_ns: 50_000,
        ..Config::new(epoch)
    }
}
