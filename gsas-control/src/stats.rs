//! The service's statistics as a program reads them: [`StatsReport`] parses the `name
//! value` lines of a Stats reply (what `gsas-atomicd --stats` prints), and [`DOCS`] says of
//! each name whether it is a *counter* (only grows, for the life of the service) or a
//! *gauge* (the state now), and what it counts; `gsas-atomicd --stats SOCKET --explain`
//! prints it beside the values. The service renders the lines (`gsas-service`'s
//! `stats::render`). Names are stable: `requests.<type>`, `refused.<reason>`,
//! `bytes.read`, `bytes.written`, `udp.*`, `reliable.*`, `control.*`, `jobs.*`, `peers.*`,
//! `pes.active`, `segments.active`, `memory.*`.
//!
//! What it is not: a metrics exporter. Thread-safety: plain data.

use std::fmt::{self, Write as _};

/// Whether a statistic only grows or says how things are now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Grows for the life of the service; never reset.
    Counter,
    /// The state now.
    Gauge,
}

/// Every statistic: name (`*` stands for each packet type or refusal reason, or for the
/// names a fork handler or the Exanet link adds), kind, meaning.
pub const DOCS: &[(&str, Kind, &str)] = {
    use Kind::{Counter as C, Gauge as G};
    &[
        (
            "requests.*",
            C,
            "requests served, by packet type (unknown: types this version does not know)",
        ),
        ("requests.total", C, "requests served"),
        (
            "refused.*",
            C,
            "requests answered with an error, by reason (bad_key: no job with that key; out_of_bounds, no_segment, misaligned: outside the job's segments; ...)",
        ),
        ("refused.total", C, "requests answered with an error"),
        ("bytes.read", C, "bytes read for remote gets"),
        ("bytes.written", C, "bytes written for remote puts"),
        (
            "dropped",
            C,
            "packets dropped without an answer (malformed beyond a reply)",
        ),
        ("udp.datagrams_sent", C, "UDP datagrams sent"),
        ("udp.datagrams_received", C, "UDP datagrams received"),
        ("udp.bytes_sent", C, "UDP payload bytes sent"),
        ("udp.bytes_received", C, "UDP payload bytes received"),
        ("udp.bad_magic", C, "datagrams dropped: not a gsas header"),
        (
            "udp.bad_version",
            C,
            "datagrams dropped: another protocol version",
        ),
        ("udp.runts", C, "datagrams dropped: shorter than the header"),
        ("udp.oversized", C, "datagrams dropped: longer than the MTU"),
        ("udp.send_errors", C, "sends the kernel refused"),
        (
            "reliable.packets_delivered",
            C,
            "packets handed to the service by the reliability layer",
        ),
        (
            "reliable.packets_sent",
            C,
            "packets the service sent through the reliability layer",
        ),
        (
            "reliable.retransmissions",
            C,
            "frames sent again (timeouts, reply cache)",
        ),
        (
            "reliable.duplicates",
            C,
            "duplicate frames dropped (and acknowledged again)",
        ),
        ("reliable.bad_frames", C, "frames dropped as malformed"),
        (
            "reliable.stale_frames",
            C,
            "frames dropped for an old epoch (of the sender or of this service)",
        ),
        (
            "reliable.unknown_peers",
            C,
            "frames dropped because their sender was refused a peer slot (sum of reliable.refused_*)",
        ),
        (
            "reliable.refused_unknown_job",
            C,
            "frames refused a peer slot: no job with their key runs here",
        ),
        (
            "reliable.refused_job_full",
            C,
            "frames refused a peer slot: their job has all the peers it may have (its PEs + 4)",
        ),
        (
            "reliable.refused_table_full",
            C,
            "frames refused a peer slot: the peer table is full",
        ),
        (
            "reliable.refused_host_full",
            C,
            "frames refused a peer slot: the share of peers of no job (FORK senders, 32) is busy",
        ),
        (
            "reliable.refused_job_ended",
            C,
            "frames refused a peer slot: their job ended here (a late frame of a job whose peers no longer linger)",
        ),
        (
            "reliable.refused_user_full",
            C,
            "frames refused a peer slot: the user of their job has all the peers one user may have on this node (half the table on a shared daemon)",
        ),
        (
            "reliable.refused_job_reclaimed",
            C,
            "frames refused a peer slot: their job was reclaimed here (a PE of it ended without shmem_finalize); its other PEs' operations fail at once",
        ),
        (
            "reliable.closed_refused",
            C,
            "new requests from a lingering peer (its job ended here) refused, never executed",
        ),
        (
            "reliable.closed_expired",
            C,
            "lingering peers whose last replies stayed unacknowledged until the deadline (they left; dropped without a warning)",
        ),
        (
            "reliable.refusals_sent",
            C,
            "refusals sent to refused senders of data frames (at most 64 per 100 ms)",
        ),
        (
            "reliable.challenged",
            C,
            "frames of senders of unknown keys dropped for want of a valid cookie (FORK enabled: a data frame is answered with a challenge)",
        ),
        (
            "reliable.bad_cookies",
            C,
            "of reliable.challenged: frames that echoed a cookie that was not (or no longer) valid",
        ),
        (
            "reliable.paused_drops",
            C,
            "new frames of peers whose replies piled up (they did not acknowledge) left unacknowledged, to be sent again later",
        ),
        (
            "reliable.pool_share_full",
            C,
            "frames not opened because the job (or its user) held half of the shared frame pool while other jobs ran (the reply waits)",
        ),
        (
            "net.peers_paused",
            C,
            "times a network peer's new frames stopped being taken: 16 of its replies waited for room (it did not acknowledge)",
        ),
        (
            "reliable.peers_released",
            C,
            "peer slots freed (job ended, silent for twice the deadline, or evicted)",
        ),
        (
            "reliable.peers_failed",
            C,
            "peers declared unreachable (no acknowledgement within the deadline)",
        ),
        (
            "reliable.reply_cache_hits",
            C,
            "replies resent at once because their request came again",
        ),
        ("control.connections", C, "control connections accepted"),
        ("control.messages", C, "control messages received"),
        ("control.refused", C, "control messages refused"),
        (
            "control.uid_refused",
            C,
            "control connections or requests refused for their user id",
        ),
        (
            "control.fd_refused",
            C,
            "control connections refused because the service was out of file descriptors",
        ),
        (
            "control.user_refused",
            C,
            "control connections or Joins refused because their user holds its share of the node (connections, PEs)",
        ),
        (
            "control.allocation_refused",
            C,
            "Joins refused for want of an allocation or beyond it (`defaults.require_allocation`), and allocations declared by a user other than root",
        ),
        (
            "allocations.active",
            G,
            "allocations root declared on this node (`gsas-atomicd declare`)",
        ),
        ("jobs.started", C, "jobs started here (first Join)"),
        ("jobs.ended", C, "jobs ended because every PE left"),
        (
            "jobs.reclaimed",
            C,
            "jobs reclaimed because a PE died (connection closed without Leave)",
        ),
        ("jobs.active", G, "jobs with PEs here"),
        (
            "jobs.lingering",
            G,
            "jobs that ended here whose network peers are kept for the reliability deadline",
        ),
        ("pes.active", G, "PEs joined and not left"),
        ("segments.active", G, "segments alive"),
        ("memory.bytes", G, "bytes of segments booked"),
        ("memory.limit", G, "bytes of segments the service may book"),
        ("peers.known", G, "network peers with a slot"),
        (
            "peers.host",
            G,
            "of those, peers of no known job (FORK senders)",
        ),
        (
            "peers.lingering",
            G,
            "of those, peers of jobs that ended here (closed; the first to give way)",
        ),
        ("peers.limit", G, "size of the peer table (max_peers)"),
        (
            "net.replies_waiting",
            G,
            "network replies (and kept requests) waiting for room in their peer's window (at most 16 per peer before its new frames wait)",
        ),
        (
            "net.peers_paused_now",
            G,
            "network peers whose new frames are not taken now (their replies pile up)",
        ),
        ("control.open", G, "open control connections"),
        (
            "ring.requests",
            C,
            "requests served from PE rings (GSAS_DIRECT=0)",
        ),
        ("fork.refused", C, "remote FORK requests refused"),
        (
            "fork.*",
            C,
            "remote FORK handler counters (when FORK is enabled)",
        ),
        (
            "replies.deferred",
            C,
            "replies queued because the peer's window was full",
        ),
        (
            "replies.dropped",
            C,
            "replies dropped because their peer was gone",
        ),
        ("exanet.*", C, "Exanet link counters (services on Exanet)"),
    ]
};

/// The entry of [`DOCS`] for `name`: the exact name, else the longest `prefix.*` match.
pub fn doc(name: &str) -> Option<(Kind, &'static str)> {
    DOCS.iter()
        .find(|(n, _, _)| *n == name)
        .or_else(|| {
            DOCS.iter()
                .filter(|(n, _, _)| {
                    n.strip_suffix('*')
                        .is_some_and(|prefix| name.starts_with(prefix))
                })
                .max_by_key(|(n, _, _)| n.len())
        })
        .map(|&(_, k, d)| (k, d))
}

/// Counters parsed from the service's statistics text (`name value` lines).
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

impl StatsReport {
    /// The report with each line's kind and meaning ([`DOCS`]) beside the value.
    pub fn explained(&self) -> String {
        let width = self.entries.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (n, v) in &self.entries {
            let (kind, what) = match doc(n) {
                Some((Kind::Counter, d)) => ("counter", d),
                Some((Kind::Gauge, d)) => ("gauge  ", d),
                None => ("       ", ""),
            };
            let _ = writeln!(out, "{n:<width$} {v:>14}  {kind}  {what}");
        }
        out
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
    fn a_report_parses_and_explains_itself() {
        let r = StatsReport::parse("pes.active 8\njobs.reclaimed 3\nnot a line\n");
        assert_eq!(r.get("pes.active"), Some(8));
        assert_eq!(r.get("jobs.reclaimed"), Some(3));
        assert_eq!(r.get("no.such"), None);
        assert_eq!(r.entries().len(), 2);
        assert!(r.to_string().contains("jobs.reclaimed 3"));
        assert!(r.explained().contains("gauge    PEs joined and not left"));
        assert_eq!(doc("requests.read").map(|d| d.0), Some(Kind::Counter));
        assert_eq!(doc("no.such"), None);
    }
}
