//! A small logger for the `log` facade: one line per record on standard error, prefixed
//! with the component and the process id.
//!
//! **What it is.** [`init`] installs the logger once per process with a level (given, or
//! from `GSAS_LOG`, default `warn`); [`set_component`] renames the component later (a PE
//! becomes `pe3` once it knows its rank). A record prints as
//!
//! ```text
//! gsas-atomicd[4711] info: serving node 0 on 127.0.0.1:7470, control socket /run/gsas/atomicd.sock
//! pe3[4802] warn: node 1 (127.0.0.1:7471): no answer for 10.0 s
//! ```
//!
//! At `debug` and `trace` the module path is added after the level. Each line is written
//! with one `write` call, so lines of concurrent processes sharing a terminal do not mix.
//!
//! **What it is not.** No files, no rotation, no timestamps (journald and terminals add
//! them). If the program installed another `log` implementation first, [`init`] leaves it
//! in place and only the level is applied.
//!
//! **Thread safety.** The logger is `Sync`; the component name sits behind a mutex that is
//! taken once per record.
//!
//! ```
//! gsas_transport::log::init("example", Some(log::LevelFilter::Info));
//! log::info!("hello"); // prints "example[<pid>] info: hello" on stderr
//! gsas_transport::log::set_component("pe0");
//! ```

use std::io::Write as _;
use std::sync::Mutex;

use log::{LevelFilter, Log, Metadata, Record};

struct Logger {
    component: Mutex<String>,
}

static LOGGER: Logger = Logger {
    component: Mutex::new(String::new()),
};

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let component = match self.component.lock() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let level = record.level().as_str().to_ascii_lowercase();
        let mut line = if record.level() >= log::Level::Debug {
            format!(
                "{component}[{}] {level} {}: {}\n",
                std::process::id(),
                record.module_path().unwrap_or("?"),
                record.args()
            )
        } else {
            format!(
                "{component}[{}] {level}: {}\n",
                std::process::id(),
                record.args()
            )
        };
        // Keep one record on one line even if a message embeds newlines.
        if line.matches('\n').count() > 1 {
            let trimmed = line.trim_end_matches('\n').replace('\n', "\n    ");
            line = trimmed + "\n";
        }
        // A failed write to stderr has nowhere to be reported.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Writes `bytes` to standard error in one `write_all` (one `write(2)` for a line: standard
/// error is unbuffered). See [`eprintln_whole!`](crate::eprintln_whole).
pub fn write_stderr(bytes: &[u8]) {
    // A failed write to stderr has nowhere to be reported.
    let _ = std::io::stderr().lock().write_all(bytes);
}

/// Installs the logger with component name `component` and `level` (or `GSAS_LOG`, or
/// `warn`). Calling it again only changes the component and the level.
///
/// An invalid `GSAS_LOG` is reported once at `warn` level and ignored.
pub fn init(component: &str, level: Option<LevelFilter>) {
    set_component(component);
    let (from_env, bad) = match std::env::var(crate::config::GSAS_LOG.name) {
        Ok(text) if !text.trim().is_empty() => match text.trim().parse::<LevelFilter>() {
            Ok(l) => (Some(l), None),
            Err(_) => (None, Some(text)),
        },
        _ => (None, None),
    };
    let level = level.or(from_env).unwrap_or(LevelFilter::Warn);
    // Fails only when some logger is installed already (ours or the program's).
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
    if let Some(text) = bad {
        log::warn!(
            "GSAS_LOG={text:?} is not one of off, error, warn, info, debug, trace; using {level}"
        );
    }
}

/// Renames the component shown in front of every line.
pub fn set_component(component: &str) {
    let mut c = match LOGGER.component.lock() {
        Ok(c) => c,
        Err(poisoned) => poisoned.into_inner(),
    };
    c.clear();
    c.push_str(component);
}

/// The component name currently shown.
pub fn component() -> String {
    match LOGGER.component.lock() {
        Ok(c) => c.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_sets_level_and_component() {
        init("unit", Some(LevelFilter::Debug));
        assert_eq!(log::max_level(), LevelFilter::Debug);
        assert_eq!(component(), "unit");
        set_component("pe7");
        assert_eq!(component(), "pe7");
        assert!(LOGGER.enabled(&Metadata::builder().level(log::Level::Debug).build()));
        assert!(!LOGGER.enabled(&Metadata::builder().level(log::Level::Trace).build()));
    }
}
