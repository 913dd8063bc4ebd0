//! Identical diagnostics of many PEs printed once, with the PE list.
//!
//! A library diagnostic names the PE that prints it (`gsas-shmem: PE 3: shmem_long_p: PE 8
//! does not exist`), so a failure every PE meets (a bad environment variable, the same wrong
//! PE number) used to print one line per PE: 512 lines that say one thing. The launcher reads
//! the PEs' standard error line by line and hands each line to a [`Merger`]:
//!
//! * a line of the form `PROGRAM: PE R...` where `R` is the rank of the PE that wrote it,
//!   or a line of the PE's logger, `peR[PID] LEVEL: ...`, is *held*, grouped with the lines
//!   of other PEs that read the same once their rank (and pid) is cut out;
//! * a group is printed as one line, `PROGRAM: PEs 0-63...` or `PEs 0-63: LEVEL: ...` (the
//!   original line when one PE wrote it), when every PE of the job has written it, [`QUIET`] after its latest line,
//!   [`HOLD_MAX`] after its first, or when the launcher is about to print a line of its own
//!   ([`Merger::flush_all`]);
//! * any other line passes at once, after the held groups that hold a line of the same PE
//!   (each PE's own lines keep their order), and groups are printed in the order of their
//!   first line.
//!
//! Each printed line (or batch of lines) is one `write`, so lines of different PEs are never
//! glued together. `oshrun --no-merge-errors` turns merging off (the PEs then share the
//! launcher's standard error, as its standard output).

use std::collections::HashSet;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::hangs::rank_list;

/// A held group is printed this long after its latest line.
pub const QUIET: Duration = Duration::from_millis(100);
/// A held group is printed at the latest this long after its first line.
pub const HOLD_MAX: Duration = Duration::from_secs(1);

/// Where merged lines go: standard error, or a buffer (tests).
enum Sink {
    Stderr,
    #[cfg(test)]
    Buffer(Vec<u8>),
}

/// Lines of the same text from different PEs, waiting to be printed as one.
struct Group {
    /// What a merged line has before `PEs LIST`: `gsas-shmem: ` (empty for a log line).
    head: Vec<u8>,
    /// What it has after the list, with the newline: `: shmem_long_p: ...\n`.
    tail: Vec<u8>,
    /// The first PE's line as it wrote it (printed when it stays alone).
    first_line: Vec<u8>,
    ranks: Vec<u32>,
    first: Instant,
    last: Instant,
}

struct State {
    held: Vec<Group>,
    sink: Sink,
    /// `(rank, line without its newline)` of the diagnostics seen, for [`Merger::printed`]
    /// (at most [`PRINTED_KEPT`]).
    printed: HashSet<(u32, Vec<u8>)>,
}

/// At most this many groups are held (a PE that logs many distinct lines must not make
/// each new line a long search): past it the oldest is printed.
pub const MAX_HELD: usize = 256;

/// How many diagnostics [`Merger::printed`] remembers.
const PRINTED_KEPT: usize = 4096;

/// Merges the standard-error lines of a job's PEs; see the [module docs](self).
pub struct Merger {
    size: u32,
    tag: bool,
    state: Mutex<State>,
}

impl Merger {
    /// A merger for a job of `size` PEs; `tag` prefixes every line with `[rank] ` (a merged
    /// line with `[rank list] `), as `--tag-output` asks.
    pub fn new(size: u32, tag: bool) -> Merger {
        Merger {
            size,
            tag,
            state: Mutex::new(State {
                held: Vec::new(),
                sink: Sink::Stderr,
                printed: HashSet::new(),
            }),
        }
    }

    #[cfg(test)]
    fn buffered(size: u32, tag: bool) -> Merger {
        let m = Merger::new(size, tag);
        m.lock().sink = Sink::Buffer(Vec::new());
        m
    }

    #[cfg(test)]
    fn take_output(&self) -> String {
        match &mut self.lock().sink {
            Sink::Buffer(b) => String::from_utf8(std::mem::take(b)).unwrap(),
            Sink::Stderr => unreachable!(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A forwarder that panicked while printing leaves nothing half-done that matters.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether PE `rank` wrote the diagnostic `text` (one line, with or without its
    /// newline); it is then printed, or held until the next [`Merger::flush_all`].
    pub fn printed(&self, rank: u32, text: &str) -> bool {
        let text = text.strip_suffix('\n').unwrap_or(text);
        self.lock()
            .printed
            .contains(&(rank, text.as_bytes().to_vec()))
    }

    /// One line PE `rank` wrote to standard error (a missing final newline is added).
    pub fn line(&self, rank: u32, line: &[u8]) {
        self.line_at(rank, line, Instant::now());
    }

    fn line_at(&self, rank: u32, line: &[u8], now: Instant) {
        let mut line = line.to_vec();
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        let mut st = self.lock();
        let mut out = Vec::new();
        let Some((head, tail)) = split_at_rank(&line, rank) else {
            // Not a diagnostic of this PE's: at once, after this PE's held lines.
            if let Some(i) = st.held.iter().rposition(|g| g.ranks.contains(&rank)) {
                self.drain(&mut st.held, i + 1, &mut out);
            }
            self.tagged(&rank.to_string(), &line, &mut out);
            write(&mut st.sink, &out);
            return;
        };
        if st.printed.len() < PRINTED_KEPT {
            st.printed.insert((rank, line[..line.len() - 1].to_vec()));
        }
        let same = st
            .held
            .iter()
            .position(|g| g.head == head && g.tail == tail);
        match same {
            Some(i) if !st.held[i].ranks.contains(&rank) => {
                let g = &mut st.held[i];
                g.ranks.push(rank);
                g.last = now;
                if g.ranks.len() as u32 >= self.size {
                    self.drain(&mut st.held, i + 1, &mut out);
                }
            }
            other => {
                // The same PE said it again: the first time is printed, this one waits.
                if let Some(i) = other {
                    self.drain(&mut st.held, i + 1, &mut out);
                }
                st.held.push(Group {
                    head,
                    tail,
                    first_line: line.clone(),
                    ranks: vec![rank],
                    first: now,
                    last: now,
                });
                let n = st.held.len();
                if self.size <= 1 {
                    self.drain(&mut st.held, n, &mut out);
                } else if n > MAX_HELD {
                    self.drain(&mut st.held, n - MAX_HELD, &mut out);
                }
            }
        }
        write(&mut st.sink, &out);
    }

    /// Prints the groups whose time has come (and every group held before them).
    pub fn flush_due(&self) {
        self.flush_due_at(Instant::now());
    }

    fn flush_due_at(&self, now: Instant) {
        let mut st = self.lock();
        let due = st.held.iter().rposition(|g| {
            now.duration_since(g.last) >= QUIET || now.duration_since(g.first) >= HOLD_MAX
        });
        if let Some(i) = due {
            let mut out = Vec::new();
            self.drain(&mut st.held, i + 1, &mut out);
            write(&mut st.sink, &out);
        }
    }

    /// Prints every held group (before a line of the launcher's own, and at the end).
    pub fn flush_all(&self) {
        let mut st = self.lock();
        let n = st.held.len();
        let mut out = Vec::new();
        self.drain(&mut st.held, n, &mut out);
        write(&mut st.sink, &out);
    }

    /// Renders the first `n` held groups into `out` and forgets them.
    fn drain(&self, held: &mut Vec<Group>, n: usize, out: &mut Vec<u8>) {
        for g in held.drain(..n) {
            if let [one] = g.ranks[..] {
                self.tagged(&one.to_string(), &g.first_line, out);
                continue;
            }
            let list = rank_list(g.ranks);
            let mut line = g.head;
            line.extend_from_slice(format!("PEs {list}").as_bytes());
            line.extend_from_slice(&g.tail);
            self.tagged(&list, &line, out);
        }
    }

    fn tagged(&self, ranks: &str, line: &[u8], out: &mut Vec<u8>) {
        if self.tag {
            out.extend_from_slice(format!("[{ranks}] ").as_bytes());
        }
        out.extend_from_slice(line);
    }
}

fn write(sink: &mut Sink, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    match sink {
        // One write for the batch keeps it whole; a closed stderr is not the job's failure.
        Sink::Stderr => {
            let _ = std::io::stderr().lock().write_all(bytes);
        }
        #[cfg(test)]
        Sink::Buffer(b) => b.extend_from_slice(bytes),
    }
}

/// `(head, tail)` of a merged line ([`Group`]) when `line` names `rank` as the PE that
/// wrote it: `PROGRAM: PE R...` (`PROGRAM` one word of letters, digits and `-_.+`, as the
/// libraries' and tools' names are) or the PE's log line `peR[PID] ...`; `None` otherwise.
fn split_at_rank(line: &[u8], rank: u32) -> Option<(Vec<u8>, Vec<u8>)> {
    // A program whose name starts with `pe` (`perftest: PE 3: ...`) is not a log line.
    split_log_line(line, rank).or_else(|| split_program_line(line, rank))
}

/// Whether `digits` (ASCII) is `rank`.
fn is_rank(digits: &[u8], rank: u32) -> bool {
    !digits.is_empty()
        && std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<u32>().ok())
            == Some(rank)
}

/// The PE's logger: `pe3[4802] warn: ...` merges as `PEs 3, 5: warn: ...`.
fn split_log_line(line: &[u8], rank: u32) -> Option<(Vec<u8>, Vec<u8>)> {
    let rest = line.strip_prefix(b"pe")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let after = rest[digits..].strip_prefix(b"[")?;
    let pid = after.iter().take_while(|b| b.is_ascii_digit()).count();
    let said = after[pid..].strip_prefix(b"] ")?;
    if !is_rank(&rest[..digits], rank) || pid == 0 {
        return None;
    }
    let mut tail = b": ".to_vec();
    tail.extend_from_slice(said);
    Some((Vec::new(), tail))
}

/// `PROGRAM: PE R...` merges as `PROGRAM: PEs 3, 5...`.
fn split_program_line(line: &[u8], rank: u32) -> Option<(Vec<u8>, Vec<u8>)> {
    let colon = line.iter().position(|&b| b == b':')?;
    let word = &line[..colon];
    let word_ok = !word.is_empty()
        && word
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b));
    if !word_ok {
        return None;
    }
    let rest = line[colon..].strip_prefix(b": PE ")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if !is_rank(&rest[..digits], rank) {
        return None;
    }
    let head_len = colon + b": ".len();
    let tail_at = colon + b": PE ".len() + digits;
    Some((line[..head_len].to_vec(), line[tail_at..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BAD: &str = ": shmem_long_p: PE 8 does not exist (the job has 8 PEs: 0..7)\n";

    fn bad(rank: u32) -> String {
        format!("gsas-shmem: PE {rank}{BAD}")
    }

    #[test]
    fn a_line_only_its_own_pe_could_write_is_split_at_the_rank() {
        let l = bad(3);
        let (h, t) = split_at_rank(l.as_bytes(), 3).unwrap();
        assert_eq!(h, b"gsas-shmem: ");
        assert_eq!(t, BAD.as_bytes());
        let (h, t) = split_at_rank(b"pe3[4802] warn: slow\n", 3).unwrap();
        assert_eq!(
            (h.as_slice(), t.as_slice()),
            (&b""[..], &b": warn: slow\n"[..])
        );
        assert!(split_at_rank(b"pe3[4802] warn: slow\n", 4).is_none());
        assert!(split_at_rank(b"pe3[] warn\n", 3).is_none());
        assert!(split_at_rank(b"pe3 warn\n", 3).is_none());
        // A program named pe...: its PE lines, not a log line.
        let (h, t) = split_at_rank(b"perftest: PE 3: slow\n", 3).unwrap();
        assert_eq!(
            (h.as_slice(), t.as_slice()),
            (&b"perftest: "[..], &b": slow\n"[..])
        );
        // Another PE's number, a longer number, no program word, a sentence: not split.
        assert!(split_at_rank(l.as_bytes(), 4).is_none());
        assert!(split_at_rank(b"gsas-shmem: PE 31: x\n", 3).is_none());
        assert!(split_at_rank(b"PE 3: x\n", 3).is_none());
        assert!(split_at_rank(b"result for PE 3: 17\n", 3).is_none());
        assert!(split_at_rank(b"gsas-shmem: PE: 3\n", 3).is_none());
    }

    #[test]
    fn every_pe_saying_the_same_is_one_line_with_the_pe_list_at_once() {
        let m = Merger::buffered(8, false);
        let t = Instant::now();
        for r in [2, 0, 1, 3, 7, 6, 5] {
            m.line_at(r, bad(r).as_bytes(), t);
        }
        assert_eq!(
            m.take_output(),
            "",
            "held until every PE said it or the time came"
        );
        m.line_at(4, bad(4).as_bytes(), t);
        assert_eq!(m.take_output(), format!("gsas-shmem: PEs 0-7{BAD}"));
    }

    #[test]
    fn a_group_is_printed_when_its_pes_fall_quiet_and_one_pe_prints_its_own_line() {
        let m = Merger::buffered(64, false);
        let t = Instant::now();
        m.line_at(5, bad(5).as_bytes(), t);
        m.line_at(9, bad(9).as_bytes(), t + QUIET / 2);
        m.line_at(6, bad(6).as_bytes(), t + QUIET / 2);
        m.flush_due_at(t + QUIET / 2 + QUIET - Duration::from_millis(1));
        assert_eq!(m.take_output(), "");
        m.flush_due_at(t + QUIET / 2 + QUIET);
        assert_eq!(m.take_output(), format!("gsas-shmem: PEs 5, 6, 9{BAD}"));
        // Alone, the line is what the PE wrote.
        m.line_at(11, bad(11).as_bytes(), t);
        m.flush_all();
        assert_eq!(m.take_output(), bad(11));
    }

    #[test]
    fn a_stream_of_new_pes_is_printed_by_the_hold_limit() {
        let m = Merger::buffered(1024, false);
        let t = Instant::now();
        let step = QUIET / 2;
        let mut now = t;
        let mut r = 0;
        while now.duration_since(t) < HOLD_MAX {
            m.line_at(r, bad(r).as_bytes(), now);
            m.flush_due_at(now);
            assert_eq!(m.take_output(), "", "at {:?}", now.duration_since(t));
            r += 1;
            now += step;
        }
        m.flush_due_at(now);
        assert_eq!(m.take_output(), format!("gsas-shmem: PEs 0-{}{BAD}", r - 1));
    }

    #[test]
    fn other_lines_pass_at_once_and_after_their_own_pes_held_lines() {
        let m = Merger::buffered(4, true);
        let t = Instant::now();
        m.line_at(0, bad(0).as_bytes(), t);
        m.line_at(1, b"gsas-shmem: PE 1: other\n", t);
        m.line_at(2, bad(2).as_bytes(), t);
        // A plain line of PE 3 (nothing held of it) passes at once, without a newline of its
        // own.
        m.line_at(3, b"progress 50%", t);
        assert_eq!(m.take_output(), "[3] progress 50%\n");
        // PE 2's next line comes after PE 2's held one (and every group held before it);
        // PE 1's line, held after it, waits on.
        m.line_at(2, b"  detail\n", t);
        assert_eq!(
            m.take_output(),
            format!("[0, 2] gsas-shmem: PEs 0, 2{BAD}[2]   detail\n")
        );
        m.flush_all();
        assert_eq!(m.take_output(), "[1] gsas-shmem: PE 1: other\n");
    }

    #[test]
    fn the_diagnostics_a_pe_wrote_are_known_and_other_lines_are_not() {
        let m = Merger::buffered(4, false);
        m.line(2, bad(2).as_bytes());
        m.line(3, b"plain output\n");
        assert!(m.printed(2, &bad(2)));
        assert!(m.printed(2, bad(2).trim_end()));
        assert!(!m.printed(1, &bad(2)), "PE 1 did not write it");
        assert!(!m.printed(3, "plain output"), "not a diagnostic");
    }

    #[test]
    fn a_pe_that_says_the_same_twice_is_not_counted_twice() {
        let m = Merger::buffered(2, false);
        let t = Instant::now();
        m.line_at(0, bad(0).as_bytes(), t);
        m.line_at(0, bad(0).as_bytes(), t);
        assert_eq!(
            m.take_output(),
            bad(0),
            "the first is printed, the second held"
        );
        m.line_at(1, bad(1).as_bytes(), t);
        assert_eq!(m.take_output(), format!("gsas-shmem: PEs 0, 1{BAD}"));
    }

    #[test]
    fn log_lines_of_many_pes_merge_without_their_pids() {
        let m = Merger::buffered(4, false);
        let t = Instant::now();
        for (r, pid) in [(0, 100), (1, 101), (3, 103)] {
            m.line_at(r, format!("pe{r}[{pid}] error: refused\n").as_bytes(), t);
        }
        m.line_at(2, b"pe2[102] error: other\n", t);
        m.flush_all();
        assert_eq!(
            m.take_output(),
            "PEs 0, 1, 3: error: refused\npe2[102] error: other\n"
        );
    }

    #[test]
    fn no_more_than_max_held_groups_wait() {
        let m = Merger::buffered(4, false);
        let t = Instant::now();
        for i in 0..=MAX_HELD {
            m.line_at(1, format!("gsas-shmem: PE 1: line {i}\n").as_bytes(), t);
        }
        assert_eq!(m.take_output(), "gsas-shmem: PE 1: line 0\n");
        assert_eq!(m.lock().held.len(), MAX_HELD);
    }

    #[test]
    fn lines_differing_in_anything_but_the_rank_stay_apart() {
        let m = Merger::buffered(4, false);
        let t = Instant::now();
        m.line_at(0, b"gsas-shmem: PE 0 of 4: node 0\n", t);
        m.line_at(1, b"gsas-shmem: PE 1 of 4: node 0\n", t);
        m.line_at(2, b"gsas-shmem: PE 2 of 4: node 1\n", t);
        m.line_at(3, b"gsas-shmem: PE 3 of 4: node 1\n", t);
        m.flush_all();
        assert_eq!(
            m.take_output(),
            "gsas-shmem: PEs 0, 1 of 4: node 0\ngsas-shmem: PEs 2, 3 of 4: node 1\n"
        );
    }
}
