//! The service's counters as text: what `gsas-atomicd --stats` prints.
//!
//! What it is: [`render`] turns the engine's counters (requests per packet type, refusals
//! per reason, bytes), the UDP and reliability counters and the service's own
//! ([`Counters`]: control messages, jobs, reclamations) into `name value` lines;
//! `gsas_control::StatsReport` parses them back for programs and tests. Names are stable:
//! `requests.<type>`, `refused.<reason>`, `bytes.read`, `bytes.written`, `udp.*`,
//! `reliable.*`, `control.*`, `jobs.*`, `peers.*`, `pes.active`, `segments.active`,
//! `memory.*`. `gsas_control::stats::DOCS` says for each whether it is a *counter* (only grows, for the life
//! of the service) or a *gauge* (the state now), and what it counts; `gsas-atomicd --stats
//! SOCKET --explain` prints it beside the values.
//!
//! What it is not: a metrics exporter. Thread-safety: plain data.

use std::fmt::Write as _;

use gsas_core::wire::{ErrorCode, PacketType};

#[cfg(test)]
use gsas_control::StatsReport;
#[cfg(test)]
use gsas_control::stats::{DOCS, Kind, doc};

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
    /// Connections refused because the service was out of file descriptors.
    pub fd_refused: u64,
    /// Connections or Joins refused because their user holds its share of the node
    /// (control connections, PEs).
    pub user_refused: u64,
    /// Joins refused for want of an allocation, or beyond one, and Declare/Undeclare
    /// requests refused because they did not come from root.
    pub allocation_refused: u64,
    /// Times a network peer's new frames stopped being taken because its replies piled
    /// up (it did not acknowledge).
    pub peers_paused: u64,
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
    /// Network peers with a slot in the reliability layer.
    pub peers: u64,
    /// Of those, peers of no known job (remote FORK senders).
    pub host_peers: u64,
    /// Of those, peers of jobs that ended here, kept closed for the reliability deadline.
    pub lingering_peers: u64,
    /// Jobs that ended here whose peers are kept closed.
    pub lingering_jobs: u64,
    /// Network replies (and kept requests) waiting for room in their peer's window.
    pub replies_waiting: u64,
    /// Network peers whose new frames are not taken now (their replies pile up).
    pub paused_peers: u64,
    /// Size of the peer table.
    pub peer_limit: u64,
    /// Total bytes of segments the service may book.
    pub memory_limit: u64,
    /// Allocations declared on this node.
    pub allocations: u64,
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
    udp: &gsas_transport::udp::UdpStats,
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
    line("reliable.refused_unknown_job", reliable.refused_unknown_job);
    line("reliable.refused_job_full", reliable.refused_job_full);
    line("reliable.refused_table_full", reliable.refused_table_full);
    line("reliable.refused_host_full", reliable.refused_host_full);
    line("reliable.refused_job_ended", reliable.refused_job_ended);
    line("reliable.refused_user_full", reliable.refused_user_full);
    line(
        "reliable.refused_job_reclaimed",
        reliable.refused_job_reclaimed,
    );
    line("reliable.closed_refused", reliable.closed_refused);
    line("reliable.closed_expired", reliable.closed_expired);
    line("reliable.refusals_sent", reliable.refusals_sent);
    line("reliable.challenged", reliable.challenged);
    line("reliable.bad_cookies", reliable.bad_cookies);
    line("reliable.paused_drops", reliable.paused_drops);
    line("reliable.pool_share_full", reliable.pool_share_full);
    line("net.peers_paused", counters.peers_paused);
    line("reliable.peers_released", reliable.peers_released);
    line("reliable.peers_failed", reliable.peers_failed);
    line("reliable.reply_cache_hits", reliable.reply_cache_hits);
    line("control.connections", counters.connections);
    line("control.messages", counters.messages);
    line("control.refused", counters.refused);
    line("control.uid_refused", counters.uid_refused);
    line("control.fd_refused", counters.fd_refused);
    line("control.user_refused", counters.user_refused);
    line("control.allocation_refused", counters.allocation_refused);
    line("allocations.active", gauges.allocations);
    line("jobs.started", counters.jobs_started);
    line("jobs.ended", counters.jobs_ended);
    line("jobs.reclaimed", counters.jobs_reclaimed);
    line("jobs.active", gauges.jobs);
    line("jobs.lingering", gauges.lingering_jobs);
    line("pes.active", gauges.pes);
    line("segments.active", gauges.segments);
    line("memory.bytes", gauges.memory);
    line("memory.limit", gauges.memory_limit);
    line("peers.known", gauges.peers);
    line("peers.host", gauges.host_peers);
    line("peers.lingering", gauges.lingering_peers);
    line("peers.limit", gauges.peer_limit);
    line("net.replies_waiting", gauges.replies_waiting);
    line("net.peers_paused_now", gauges.paused_peers);
    line("control.open", gauges.connections);
    line("ring.requests", counters.ring_requests);
    line("fork.refused", counters.fork_refused);
    line("replies.deferred", counters.replies_deferred);
    line("replies.dropped", counters.replies_dropped);
    out
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
        assert!(r.explained().contains("gauge    PEs joined and not left"));
    }

    #[test]
    fn every_statistic_is_documented_and_every_doc_names_one() {
        let text = render(
            &Default::default(),
            &Default::default(),
            &Default::default(),
            &Counters::default(),
            &Gauges::default(),
        );
        let names: Vec<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
        for n in &names {
            assert!(doc(n).is_some(), "{n} has no entry in DOCS");
        }
        for (d, _, _) in DOCS {
            // The fork handler's and the Exanet link's names are added by the service.
            if matches!(*d, "fork.*" | "exanet.*") {
                continue;
            }
            let hit = match d.strip_suffix('*') {
                Some(prefix) => names.iter().any(|n| n.starts_with(prefix)),
                None => names.contains(d),
            };
            assert!(hit, "DOCS names {d}, which is not rendered");
        }
        assert_eq!(doc("requests.total").map(|d| d.0), Some(Kind::Counter));
        assert_eq!(doc("requests.read").map(|d| d.0), Some(Kind::Counter));
        assert_eq!(doc("peers.known").map(|d| d.0), Some(Kind::Gauge));
        assert_eq!(doc("no.such"), None);
        // The runtime documentation lists every statistic too.
        let md = include_str!("../../docs/runtime.md");
        for (d, _, _) in DOCS {
            assert!(
                md.contains(&format!("`{d}`")),
                "docs/runtime.md does not list {d}"
            );
        }
    }
}
