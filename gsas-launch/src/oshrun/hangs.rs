//! Explaining a job that does not move: who waits for whom, and where every PE is.
//!
//! **What it is.** The launcher's half of "every hang explains itself" (the PE's half is
//! `gsas_node::watch`). [`Hangs`] keeps what the PEs told the PMI server in their notes
//! ([`crate::pmi::Event::Note`]: the OpenSHMEM call a PE has been blocked in for a second
//! or more, that its program exits without `shmem_finalize`, that it printed its report)
//! and what the launcher saw of their ends, and answers two questions:
//!
//! * [`Hangs::orphaned`]: has a PE left the job without `shmem_finalize` (it exited with
//!   status 0 after talking PMI, or its program called `exit(0)` and its implicit finalize
//!   now waits) while another PE has been blocked for a second in a call that completes
//!   only when every PE makes it ([`needs_everyone`]: `shmem_barrier_all`,
//!   `shmem_sync_all`, and `shmem_finalize` once the PE that left is gone)? That PE can
//!   never move again, so the launcher ends the job with e.g. `PE 2 (pid 1234) exited with
//!   status 0 without calling shmem_finalize; PEs 0, 1, 3 are in shmem_barrier_all`
//!   instead of waiting for `--timeout`. It waits until every other running PE is blocked
//!   too (at most [`SETTLE`] more), so that the message says where each one is. A PE
//!   blocked in a point-to-point wait or a team's collective is not enough: another thread
//!   of a PE still running, or the team's other members, may yet release it; there
//!   `--timeout` and SIGQUIT say where everyone is.
//! * [`Hangs::asking`]: after the launcher sent SIGQUIT to the PEs (a SIGQUIT to the
//!   launcher, or `--timeout`), has every PE asked printed its line (or has the time for
//!   it passed)? Each gsas PE prints one line itself (`PE 3: in shmem_long_wait_until:
//!   waiting for ..., for 12.3 s`); the launcher names the PEs that did not answer.
//!
//! **What it is not.** No I/O: the job loop (`job.rs`) feeds it and acts on its answers.
//!
//! **Thread-safety.** Plain data, owned by the job loop.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// How long the launcher waits for the PEs' report lines after a SIGQUIT.
pub const REPORT_WAIT: Duration = Duration::from_secs(3);

/// How long, after a PE was seen blocked for good, the launcher waits for the other
/// running PEs to be blocked too before it names them all.
pub const SETTLE: Duration = Duration::from_secs(2);

/// Why the PEs were asked where they wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// The launcher got SIGQUIT: the job goes on.
    Quit,
    /// The job ran past `--timeout`: it ends once the PEs answered.
    Timeout,
}

#[derive(Debug)]
struct Asking {
    why: Asked,
    until: Instant,
    expected: BTreeSet<u32>,
}

/// What the launcher knows about the PEs' waits; see the [module docs](self).
#[derive(Debug, Default)]
pub struct Hangs {
    /// The call each rank has been blocked in for a second or more, and since when the
    /// launcher knows.
    waiting: BTreeMap<u32, (String, Instant)>,
    /// Ranks whose program exited with status 0 without `shmem_finalize`.
    exited: BTreeSet<u32>,
    /// Ranks that finalized PMI.
    finalized: BTreeSet<u32>,
    /// Ranks that printed their report since the PEs were last asked.
    reported: BTreeSet<u32>,
    asking: Option<Asking>,
}

/// A PE left the job without `shmem_finalize` while the others wait: the ranks that
/// left, and what the other running ranks are blocked in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphaned {
    /// The ranks that left.
    pub left: Vec<u32>,
    /// `(rank, call)` of the other running ranks that have been blocked for a second.
    pub waiting: Vec<(u32, String)>,
    /// The other running ranks that are not blocked in the library.
    pub free: Vec<u32>,
}

/// Whether `call` (an OpenSHMEM routine's name as a PE noted it: `shmem_barrier_all`, or
/// `shmem::Shmem::barrier_all` of the Rust API) completes only when every PE of the job
/// makes the same call: a PE that left without finalize never will. `left_gone`: the PEs
/// that left have ended (a PE whose program called `exit(0)` still finalizes at exit, and
/// its final barrier matches the others' `shmem_finalize`).
pub fn needs_everyone(call: &str, left_gone: bool) -> bool {
    let routine = call.rsplit("::").next().unwrap_or(call);
    let routine = routine
        .strip_prefix("pshmem_")
        .or_else(|| routine.strip_prefix("shmem_"))
        .unwrap_or(routine);
    match routine {
        "barrier_all" | "sync_all" => true,
        "finalize" => left_gone,
        _ => false,
    }
}

impl Hangs {
    /// A PE's note (see the [module docs](self)).
    pub fn note(&mut self, rank: u32, kind: &str, value: &str) {
        match kind {
            "wait" if value == "-" => {
                self.waiting.remove(&rank);
            }
            "wait" => {
                self.waiting
                    .insert(rank, (value.to_owned(), Instant::now()));
            }
            "exit" => {
                if !self.finalized.contains(&rank) {
                    self.exited.insert(rank);
                }
            }
            "report" => {
                self.reported.insert(rank);
            }
            other => log::debug!("note {other}={value} of PE {rank} ignored"),
        }
    }

    /// `rank` finalized PMI (an implicit finalize that completed, too).
    pub fn finalized(&mut self, rank: u32) {
        self.finalized.insert(rank);
        self.exited.remove(&rank);
        self.waiting.remove(&rank);
    }

    /// `rank`'s process ended with `status`; `initialized`: it talked PMI (a PE of the
    /// library, not a plain program).
    pub fn ended(&mut self, rank: u32, status: ExitStatus, initialized: bool) {
        self.waiting.remove(&rank);
        if status.code() == Some(0) && initialized && !self.finalized.contains(&rank) {
            self.exited.insert(rank);
        }
    }

    /// Whether a PE left without `shmem_finalize` while another rank that still runs
    /// (`running(rank)`, of `0..size`) has been blocked for a second in a call that
    /// [`needs_everyone`], and every other running rank is blocked too or [`SETTLE`] has
    /// passed since.
    pub fn orphaned(&self, size: u32, running: impl Fn(u32) -> bool) -> Option<Orphaned> {
        if self.exited.is_empty() {
            return None;
        }
        let left_gone = self.exited.iter().all(|r| !running(*r));
        let others: Vec<u32> = (0..size)
            .filter(|r| !self.exited.contains(r) && !self.finalized.contains(r) && running(*r))
            .collect();
        let stuck_since = others
            .iter()
            .filter_map(|r| self.waiting.get(r))
            .filter(|(call, _)| needs_everyone(call, left_gone))
            .map(|(_, since)| *since)
            .min()?;
        let (waiting, free): (Vec<u32>, Vec<u32>) =
            others.iter().partition(|r| self.waiting.contains_key(r));
        if !free.is_empty() && stuck_since.elapsed() < SETTLE {
            return None;
        }
        Some(Orphaned {
            left: self.exited.iter().copied().collect(),
            waiting: waiting
                .into_iter()
                .map(|r| (r, self.waiting[&r].0.clone()))
                .collect(),
            free,
        })
    }

    /// The launcher sent SIGQUIT (or asked the daemons to) for `why`; `expected`: the
    /// ranks that should answer.
    pub fn ask(&mut self, why: Asked, expected: BTreeSet<u32>) {
        self.reported.clear();
        let why = match &self.asking {
            // A timeout while a SIGQUIT's answers are awaited still ends the job.
            Some(a) if a.why == Asked::Timeout => Asked::Timeout,
            _ => why,
        };
        self.asking = Some(Asking {
            why,
            until: Instant::now() + REPORT_WAIT,
            expected,
        });
    }

    /// Whether the PEs are being asked.
    pub fn is_asking(&self) -> bool {
        self.asking.is_some()
    }

    /// When every expected rank answered (or `ended(rank)` says it is gone) or the time
    /// passed: why they were asked and the ranks that did not answer; `None` while the
    /// answers are awaited or nobody was asked.
    pub fn asking(&mut self, ended: impl Fn(u32) -> bool) -> Option<(Asked, Vec<u32>)> {
        let a = self.asking.as_ref()?;
        let missing: Vec<u32> = a
            .expected
            .iter()
            .copied()
            .filter(|r| !self.reported.contains(r) && !self.finalized.contains(r) && !ended(*r))
            .collect();
        if !missing.is_empty() && Instant::now() < a.until {
            return None;
        }
        let why = a.why;
        self.asking = None;
        Some((why, missing))
    }

    /// Ranks that finalized PMI.
    pub fn is_finalized(&self, rank: u32) -> bool {
        self.finalized.contains(&rank)
    }

    /// The ranks whose program exited with status 0 without finalizing PMI (which the
    /// library does in its exit handler: `_exit` or an `exec` skip it), in order.
    pub fn exited_without_finalize(&self) -> Vec<u32> {
        self.exited.iter().copied().collect()
    }
}

/// `0-3, 7, 9, 10`: ranks (sorted), runs of three or more as ranges, for one-line
/// summaries of many PEs.
pub fn rank_list(mut ranks: Vec<u32>) -> String {
    ranks.sort_unstable();
    let mut out = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        match j - i {
            0 => out.push(ranks[i].to_string()),
            1 => out.extend([ranks[i].to_string(), ranks[j].to_string()]),
            _ => out.push(format!("{}-{}", ranks[i], ranks[j])),
        }
        i = j + 1;
    }
    out.join(", ")
}

/// `PE 0 is in shmem_barrier_all; PEs 1, 3 are in shmem_long_wait_until`: the ranks
/// grouped by call, in the order of their first rank.
pub fn describe_waiting(waiting: &[(u32, String)]) -> String {
    let mut by_call: Vec<(String, Vec<u32>)> = Vec::new();
    for (rank, call) in waiting {
        match by_call.iter_mut().find(|(c, _)| c == call) {
            Some((_, ranks)) => ranks.push(*rank),
            None => by_call.push((call.clone(), vec![*rank])),
        }
    }
    by_call
        .into_iter()
        .map(|(call, ranks)| match ranks.len() {
            1 => format!("PE {} is in {call}", ranks[0]),
            _ => format!("PEs {} are in {call}", rank_list(ranks)),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn exit(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn a_pe_that_left_is_named_once_every_other_pe_waits() {
        let mut h = Hangs::default();
        let running = |r: u32| r != 2;
        h.ended(2, exit(0), true);
        assert_eq!(h.orphaned(4, running), None, "nobody waits yet");
        h.note(0, "wait", "shmem_barrier_all");
        h.note(1, "wait", "shmem::Shmem::barrier_all");
        assert_eq!(h.orphaned(4, running), None, "PE 3 still computes");
        h.note(3, "wait", "shmem_long_wait_until");
        let o = h.orphaned(4, running).unwrap();
        assert_eq!(o.left, vec![2]);
        assert!(o.free.is_empty());
        assert_eq!(
            describe_waiting(&o.waiting),
            "PE 0 is in shmem_barrier_all; PE 1 is in shmem::Shmem::barrier_all; \
             PE 3 is in shmem_long_wait_until"
        );
        // A wait that ended is no wait: PE 3 computes, for less than SETTLE.
        h.note(3, "wait", "-");
        assert_eq!(h.orphaned(4, running), None);
    }

    #[test]
    fn point_to_point_waits_and_team_collectives_are_not_enough() {
        // Another thread of a PE still running, or the team's other members, may yet
        // release them.
        let mut h = Hangs::default();
        h.ended(2, exit(0), true);
        h.note(0, "wait", "shmem_long_wait_until");
        h.note(1, "wait", "shmem_team_sync");
        h.note(3, "wait", "shmem_long_sum_reduce");
        assert_eq!(h.orphaned(4, |r| r != 2), None);
        // shmem_finalize completes with the final barrier of a PE that exits with exit(0)
        // (its implicit finalize), not once it is gone.
        let mut h = Hangs::default();
        h.note(2, "exit", "0");
        h.note(0, "wait", "shmem_finalize");
        assert_eq!(h.orphaned(3, |_| true), None);
        // Gone, it never will: PE 0 is stuck; PE 1 may still arrive for SETTLE.
        assert_eq!(h.orphaned(3, |r| r != 2), None);
        if let Some((_, since)) = h.waiting.get_mut(&0) {
            *since -= SETTLE;
        }
        let o = h.orphaned(3, |r| r != 2).unwrap();
        assert_eq!((o.left, o.free), (vec![2], vec![1]));
        assert!(needs_everyone("shmem_finalize", true));
        assert!(!needs_everyone("shmem_finalize", false));
        assert!(needs_everyone("pshmem_sync_all", false));
        assert!(needs_everyone("shmem::Shmem::sync_all", false));
        assert!(!needs_everyone("shmem_barrier", true));
    }

    #[test]
    fn clean_ends_and_plain_programs_are_no_orphans() {
        let mut h = Hangs::default();
        // Finalized, then exited 0; a program that never talked PMI; a failure (reported
        // by the launcher as such).
        h.finalized(0);
        h.ended(0, exit(0), true);
        h.ended(1, exit(0), false);
        h.ended(2, exit(3), true);
        h.note(3, "wait", "shmem_barrier_all");
        assert_eq!(h.orphaned(4, |r| r == 3), None);
        // An implicit finalize that completed takes the exit note back.
        h.note(3, "exit", "0");
        h.finalized(3);
        assert_eq!(h.orphaned(4, |_| true), None);
    }

    #[test]
    fn an_exit_note_names_a_pe_whose_implicit_finalize_waits() {
        let mut h = Hangs::default();
        h.note(1, "exit", "0");
        h.note(1, "wait", "shmem_finalize");
        h.note(0, "wait", "shmem_barrier_all");
        let o = h.orphaned(2, |_| true).unwrap();
        assert_eq!(o.left, vec![1]);
        assert_eq!(o.waiting, vec![(0, "shmem_barrier_all".to_owned())]);
    }

    #[test]
    fn pes_that_do_not_wait_are_named_after_the_settling_time() {
        let mut h = Hangs::default();
        h.ended(1, exit(0), true);
        h.note(0, "wait", "shmem_barrier_all");
        assert_eq!(h.orphaned(3, |r| r != 1), None, "PE 2 may still arrive");
        // As if the note came SETTLE ago.
        if let Some((_, since)) = h.waiting.get_mut(&0) {
            *since -= SETTLE;
        }
        let o = h.orphaned(3, |r| r != 1).unwrap();
        assert_eq!(o.free, vec![2]);
        assert_eq!(o.waiting, vec![(0, "shmem_barrier_all".to_owned())]);
    }

    #[test]
    fn asking_ends_when_everyone_answered_or_left() {
        let mut h = Hangs::default();
        assert_eq!(h.asking(|_| false), None);
        h.ask(Asked::Quit, [0, 1, 2].into());
        assert!(h.is_asking());
        h.note(0, "report", "1");
        assert_eq!(h.asking(|_| false), None);
        h.note(1, "report", "1");
        assert_eq!(h.asking(|r| r == 2), Some((Asked::Quit, vec![])));
        assert!(!h.is_asking());
        // A timeout during a SIGQUIT's wait still ends the job.
        h.ask(Asked::Timeout, [0].into());
        h.ask(Asked::Quit, [0].into());
        h.note(0, "report", "2");
        assert_eq!(h.asking(|_| false), Some((Asked::Timeout, vec![])));
    }

    #[test]
    fn rank_lists_are_ranges() {
        assert_eq!(rank_list(vec![]), "");
        assert_eq!(rank_list(vec![3]), "3");
        assert_eq!(
            rank_list(vec![9, 0, 1, 2, 3, 7, 10, 11, 12]),
            "0-3, 7, 9-12"
        );
        assert_eq!(rank_list(vec![3, 0, 1]), "0, 1, 3");
    }
}
