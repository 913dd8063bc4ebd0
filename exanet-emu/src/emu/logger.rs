//! A minimal `log` backend for the emulator binary: one line per record on stderr,
//! `<seconds since start> <LEVEL> <target>: <message>`.
//!
//! Thread safety: records are written with one `write_all` each under the stderr lock.

use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

struct StderrLogger {
    start: Instant,
}

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = format!(
                "{:10.6} {:5} {}: {}\n",
                self.start.elapsed().as_secs_f64(),
                record.level(),
                record.target(),
                record.args()
            );
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }

    fn flush(&self) {}
}

static LOGGER: OnceLock<StderrLogger> = OnceLock::new();

/// Installs the stderr logger at `level` (later calls only change the level).
pub fn init_logger(level: log::LevelFilter) {
    let logger = LOGGER.get_or_init(|| StderrLogger {
        start: Instant::now(),
    });
    let _ = log::set_logger(logger);
    log::set_max_level(level);
}
