//! The service's counters as text: what `gsas-atomicd --stats` prints.
//!
//! What it is: [`render`] turns the engine's counters (requests per packet type, refusals
//! per reason, bytes), the UDP and reliability counters and the service's own
//! ([`Counters`]: control messages, jobs, reclamations) into `name value` lines;
//! [`StatsReport`] parses them back for programs and tests. Names are stable:
//! `requests.<type>`, `refused.<reason>`, `bytes.read`, `bytes.written`, `udp.*`,
//! `reliable.*`, `control.*`, `jobs.*`, `pes.active`, `segments.active`, `memory.bytes`.
//!
//! What it is not: a metrics exporter. Thread-safety: plain data.

use std::fmt::{self, Write as _};

use gsas_core::wire::{ErrorCode, PacketType};

/// Counters of the service itself (the engine and transports keep their own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Control connections accepted.
    pub connections: u64,
    /// Control messages received.
    pub messages: u64,
    /// Control messages refused (malformed, not allowed, out of limits).
    pub refused: u64,
    /// Connections refused or closed for a user id that may not use the service or job.
    pub uid_refused: u64,
    /// Jobs created by a first Join.
    pub jobs_started: u64,
    /// Jobs ended because every PE left.
    pub jobs_ended: u64,
    /// Jobs reclaimed because a PE closed its connection without Leave (it died).
    pub jobs_reclaimed: u64,
    /// Requests served from PE rings.
    pub ring_requests: u64,
    /// FORK requests refused (no fork handler, or refused by it).
    pub fork_refused: u64,
    /// Replies that could not be sent at once and were queued.
    pub replies_deferred: u64,
    /// Replies dropped because their peer was unreachable.
    pub replies_dropped: u64,
    /// Times the UDP layer was rebuilt to empty its peer table.
    pub udp_recycled: u64,
}

/// A snapshot of the live state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Jobs with at least one PE.
    pub jobs: u64,
    /// PEs joined and not left.
    pub pes: u64,
    /// Segments alive.
    pub segments: u64,
    /// Bytes of all segments.
    pub memory: u64,
    /// Open control connections.
    pub connections: u64,
}

/// Short names of the packet types, by [`PacketType::index`].
const TYPE_NAMES: [&str; PacketType::COUNT] = [
    "read",
    "write",
    "bulk_read",
    "bulk_write",
    "atomic",
    "alloc",
    "free",
    "fork",
    "control",
    "ack",
    "data",
    "bulk_data",
    "error",
    "unknown",
];

/// Short names of the error codes, by [`ErrorCode::index`].
const CODE_NAMES: [&str; ErrorCode::COUNT] = [
    "bad_key",
    "no_segment",
    "out_of_bounds",
    "misaligned",
    "bad_atomic",
    "unknown_type",
    "malformed",
    "too_large",
    "not_supported",
    "busy",
    "host_failure",
    "other",
];

/// The `refused.<name>` name of an error code.
pub fn refusal_name(code: ErrorCode) -> &'static str {
    CODE_NAMES[code.index()]
}

/// The `requests.<name>` name of a packet type.
pub fn request_name(ty: PacketType) -> &'static str {
    TYPE_NAMES[ty.index()]
}

/// Renders every counter as `name value` lines.
pub fn render(
    engine: &gsas_core::service::Stats,
    reliable: &gsas_core::reliable::Stats,
    udp: &crate::transport::udp::UdpStats,
    counters: &Counters,
    gauges: &Gauges,
) -> String {
    let mut out = String::new();
    let mut line = |name: &str, v: u64| {
        let _ = writeln!(out, "{name} {v}");
    };
    for code in (0..=0x83u8).map(PacketType::from) {
        if matches!(code, PacketType::Unknown(c) if c != 0) {
            continue;
        }
        let name = request_name(code);
        line(&format!("requests.{name}"), engine.requests(code));
    }
    line("requests.total", engine.total_requests());
    for c in 1..=12u8 {
        let code = ErrorCode::from(c);
        line(
            &format!("refused.{}", refusal_name(code)),
            engine.refusals(code),
        );
    }
    line("refused.total", engine.total_refusals());
    line("bytes.read", engine.bytes_read());
    line("bytes.written", engine.bytes_written());
    line("dropped", engine.dropped());
    line("udp.datagrams_sent", udp.datagrams_sent);
    line("udp.datagrams_received", udp.datagrams_received);
    line("udp.bytes_sent", udp.bytes_sent);
    line("udp.bytes_received", udp.bytes_received);
    line("udp.bad_magic", udp.bad_magic);
    line("udp.bad_version", udp.bad_version);
    line("udp.runts", udp.runts);
    line("udp.oversized", udp.oversized);
    line("udp.send_errors", udp.send_errors);
    line("reliable.packets_delivered", reliable.packets_delivered);
    line("reliable.packets_sent", reliable.packets_sent);
    line("reliable.retransmissions", reliable.retransmissions);
    line("reliable.duplicates", reliable.duplicates);
    line("reliable.bad_frames", reliable.bad_frames);
    line("reliable.stale_frames", reliable.stale_frames);
    line("reliable.unknown_peers", reliable.unknown_peers);
    line("reliable.peers_failed", reliable.peers_failed);
    line("reliable.reply_cache_hits", reliable.reply_cache_hits);
    line("control.connections", counters.connections);
    line("control.messages", counters.messages);
    line("control.refused", counters.refused);
    line("control.uid_refused", counters.uid_refused);
    line("jobs.started", counters.jobs_started);
    line("jobs.ended", counters.jobs_ended);
    line("jobs.reclaimed", counters.jobs_reclaimed);
    line("jobs.active", gauges.jobs);
    line("pes.active", gauges.pes);
    line("segments.active", gauges.segments);
    line("memory.bytes", gauges.memory);
    line("control.open", gauges.connections);
    line("ring.requests", counters.ring_requests);
    line("fork.refused", counters.fork_refused);
    line("replies.deferred", counters.replies_deferred);
    line("replies.dropped", counters.replies_dropped);
    line("udp.recycled", counters.udp_recycled);
    out
}

/// Counters parsed from [`render`]'s text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsReport {
    entries: Vec<(String, u64)>,
}

impl StatsReport {
    /// Parses `name value` lines; lines that do not have that form are skipped.
    pub fn parse(text: &str) -> StatsReport {
        let entries = text
            .lines()
            .filter_map(|l| {
                let (name, value) = l.trim().split_once(' ')?;
                Some((name.to_owned(), value.trim().parse().ok()?))
            })
            .collect();
        StatsReport { entries }
    }

    /// The value of `name`, if present.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// All entries in order.
    pub fn entries(&self) -> &[(String, u64)] {
        &self.entries
    }
}

impl fmt::Display for StatsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.entries.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        for (n, v) in &self.entries {
            writeln!(f, "{n:<width$} {v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_every_index_once() {
        let mut seen: Vec<&str> = TYPE_NAMES.to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), PacketType::COUNT);
        assert_eq!(request_name(PacketType::BulkRead), "bulk_read");
        assert_eq!(request_name(PacketType::Unknown(0x77)), "unknown");
        assert_eq!(refusal_name(ErrorCode::OutOfBounds), "out_of_bounds");
        assert_eq!(refusal_name(ErrorCode::Unknown(99)), "other");
    }

    #[test]
    fn render_and_parse_round_trip() {
        let text = render(
            &Default::default(),
            &Default::default(),
            &Default::default(),
            &Counters {
                jobs_reclaimed: 3,
                ..Default::default()
            },
            &Gauges {
                pes: 8,
                ..Default::default()
            },
        );
        let r = StatsReport::parse(&text);
        assert_eq!(r.get("jobs.reclaimed"), Some(3));
        assert_eq!(r.get("pes.active"), Some(8));
        assert_eq!(r.get("refused.bad_key"), Some(0));
        assert_eq!(r.get("requests.unknown"), Some(0));
        assert_eq!(r.get("no.such"), None);
        // Every line parsed.
        assert_eq!(r.entries().len(), text.lines().count());
        assert!(r.to_string().contains("jobs.reclaimed"));
    }
}
