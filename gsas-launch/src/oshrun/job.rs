//! Running the PEs of a job that live on this machine: spawn, serve PMI, forward output,
//! wait, and end the job on the first failure.
//!
//! What it is: [`run_job`] takes a [`JobSpec`] (the PEs to start here, each with its rank,
//! program, arguments and extra environment, plus the PMI node map of the whole job) and
//! runs it to the end in the calling thread. Each PE gets its end of a socketpair as
//! `PMI_FD` (`PMI_RANK`, `PMI_SIZE`), `PR_SET_PDEATHSIG(SIGKILL)` so that a dead launcher
//! takes it down, and either the launcher's stdio or pipes whose lines are forwarded with a
//! `[rank] ` prefix; standard error goes through a pipe unless merging is off, so that the
//! same diagnostic of many PEs is printed once with the PE list ([`super::merge`]). One
//! loop alternates between serving PMI (at most 10 ms per step), reaping children and
//! reading the launcher's own termination signals. The first PE that
//! exits non-zero or dies by a signal, a PMI `abort`, a termination signal to the launcher
//! or the time limit ends the job: one message on stderr naming the PE, SIGTERM to the
//! PEs still running, SIGKILL after [`JobSpec::grace`], and every PE is reaped before
//! [`run_job`] returns.
//!
//! **Remote PEs.** A multi-node job also carries a [`RemoteJob`] ([`JobSpec::remote`]):
//! the PMI server then listens on TCP on each launcher address the nodes reach, the remote
//! PEs are started through their daemons' FORK before the local ones, and the loop treats
//! them like local PEs: their output is printed as it arrives, the first one that fails (or
//! a node that fails: a PE that cannot start, a daemon that never connects back or whose
//! connection ends) ends the job, and ending the job asks every daemon to SIGTERM and then
//! SIGKILL its PEs. Before [`run_job`] returns it waits (at most 2 s) for the daemons'
//! last output.
//!
//! What it is not: placement across nodes (the caller builds the [`JobSpec`]; see
//! [`super::multinode`]) and not the atomic service (the caller starts it, or the nodes'
//! daemons run it, and passes its socket in each PE's environment).
//!
//! Thread-safety: [`run_job`] runs in the caller's thread and starts one forwarding thread
//! per piped stream; they share the [`Merger`] and nothing else.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fork::launcher::{RemoteEvent, RemoteJob};
use crate::pmi::{Event, Server, ServerConfig, Stop};

use super::hangs::{self, Asked, Hangs, rank_list};
use super::merge::{self, Merger};
use gsas_sys::event::SignalFd;

/// Longest wait for the daemons' last output after every PE has ended.
const REMOTE_FINISH: Duration = Duration::from_secs(2);
/// Longest wait for remote PEs to be reported ended after SIGKILL was asked for.
const REMOTE_KILL_WAIT: Duration = Duration::from_secs(1);
/// Longest wait for the local PEs' pipes to be read to their end once every PE has ended (a
/// PE's background child may hold a pipe open: it must not hold the launcher too).
const FORWARD_DRAIN: Duration = Duration::from_secs(1);

/// One PE to start on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeLaunch {
    /// Its rank.
    pub rank: u32,
    /// The program (a path, or a name searched on `PATH`), including any prefix such as
    /// an emulator: `program args...` is exactly what is executed.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables added to (or replacing those of) the launcher's environment.
    pub env: Vec<(OsString, OsString)>,
}

/// What [`run_job`] runs.
#[derive(Debug)]
pub struct JobSpec {
    /// Name in messages (`oshrun`).
    pub launcher: String,
    /// Number of ranks in the whole job.
    pub size: u32,
    /// Node index of every rank, served as `PMI_process_mapping`.
    pub node_of_rank: Vec<u32>,
    /// The PEs to start here.
    pub pes: Vec<PeLaunch>,
    /// Forward output through pipes with a `[rank] ` prefix instead of sharing stdio.
    pub tag_output: bool,
    /// Print the same diagnostic of many PEs once with the PE list ([`super::merge`]);
    /// `false`: the PEs share the launcher's standard error (unless `tag_output`).
    pub merge_errors: bool,
    /// Time between SIGTERM and SIGKILL when the job is ended.
    pub grace: Duration,
    /// End the job when it runs longer than this.
    pub time_limit: Option<Duration>,
    /// Termination signals (SIGINT, SIGTERM, SIGHUP) of the launcher, blocked and read
    /// through this descriptor: such a signal ends the job. `None`: the caller handles
    /// signals.
    pub signals: Option<SignalFd>,
    /// The PEs other machines' daemons start (multi-node jobs); `None`: every PE is local.
    pub remote: Option<RemoteJob>,
}

impl JobSpec {
    /// A job of `pes` on one node (every rank on node 0), launcher name `oshrun`, no
    /// tagging, merged diagnostics, 500 ms grace, no time limit, no signal handling.
    pub fn single_node(pes: Vec<PeLaunch>) -> JobSpec {
        let size = pes.len() as u32;
        JobSpec {
            launcher: "oshrun".into(),
            size,
            node_of_rank: vec![0; size as usize],
            pes,
            tag_output: false,
            merge_errors: true,
            grace: Duration::from_millis(500),
            time_limit: None,
            signals: None,
            remote: None,
        }
    }
}

/// Why the job ended before every PE finished successfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A PE exited with a non-zero status.
    Exited {
        /// Its rank.
        rank: u32,
        /// Its pid.
        pid: u32,
        /// Its node, when it ran on another machine.
        node: Option<String>,
        /// The exit status.
        code: i32,
    },
    /// A PE was killed by a signal.
    Signaled {
        /// Its rank.
        rank: u32,
        /// Its pid.
        pid: u32,
        /// Its node, when it ran on another machine.
        node: Option<String>,
        /// The signal.
        signal: i32,
    },
    /// A PE called PMI `abort`.
    Aborted {
        /// Its rank.
        rank: u32,
        /// Its pid.
        pid: u32,
        /// Its node, when it ran on another machine.
        node: Option<String>,
        /// The exit code it asked for.
        code: i32,
        /// Its message.
        message: Option<String>,
    },
    /// A node failed the job: one of its PEs could not start, or its daemon did not
    /// connect back or lost the connection.
    Node {
        /// The node, e.g. `node 1 (loop1, 127.0.0.1:7471)`.
        node: String,
        /// What happened.
        message: String,
    },
    /// The launcher received a termination signal.
    Interrupted {
        /// The signal.
        signal: i32,
    },
    /// The job ran longer than its time limit.
    TimedOut {
        /// The limit.
        limit: Duration,
    },
    /// PEs left the job without `shmem_finalize` (they exited with status 0, or their
    /// program called `exit(0)` and the implicit finalize waits) while every other PE is
    /// blocked in a call that can no longer complete.
    Orphaned {
        /// `(rank, pid, node)` of the PEs that left (node: when on another machine).
        left: Vec<(u32, u32, Option<String>)>,
        /// `(rank, call)` of the other running PEs blocked in a call.
        waiting: Vec<(u32, String)>,
        /// The other running PEs not blocked in the library.
        free: Vec<u32>,
    },
}

impl Failure {
    /// The exit status the launcher reports: the PE's status, 128 + signal, the abort
    /// code as asked for (0 included: `shmem_global_exit(0)` ends the job successfully;
    /// like a process's own exit status, only its low 8 bits reach the shell), 128 + the
    /// launcher's signal, 124 for the time limit, 1 for a failed node or for PEs that left
    /// without finalize while the others wait.
    pub fn exit_code(&self) -> i32 {
        match *self {
            Failure::Exited { code, .. } | Failure::Aborted { code, .. } => code,
            Failure::Signaled { signal, .. } | Failure::Interrupted { signal } => 128 + signal,
            Failure::TimedOut { .. } => 124,
            Failure::Node { .. } | Failure::Orphaned { .. } => 1,
        }
    }

    /// The launcher's message, e.g. `PE 3 (pid 1234) was killed by signal 9 (SIGKILL)`,
    /// or `PE 3 (pid 1234 on node 1 (loop1, 127.0.0.1:7471)) exited with status 2`.
    pub fn describe(&self) -> String {
        let who = |rank: &u32, pid: &u32, node: &Option<String>| match node {
            Some(n) => format!("PE {rank} (pid {pid} on {n})"),
            None => format!("PE {rank} (pid {pid})"),
        };
        match self {
            Failure::Exited {
                rank,
                pid,
                node,
                code,
            } => format!("{} exited with status {code}", who(rank, pid, node)),
            Failure::Signaled {
                rank,
                pid,
                node,
                signal,
            } => format!(
                "{} was killed by {}",
                who(rank, pid, node),
                gsas_sys::process::describe_signal(*signal)
            ),
            Failure::Aborted {
                rank,
                pid,
                node,
                code,
                message,
            } => match message {
                Some(m) => format!(
                    "{} aborted the job with code {code}: {m}",
                    who(rank, pid, node)
                ),
                None => format!("{} aborted the job with code {code}", who(rank, pid, node)),
            },
            Failure::Node { node, message } => format!("{node}: {message}"),
            Failure::Interrupted { signal } => {
                format!("received {}", gsas_sys::process::describe_signal(*signal))
            }
            Failure::TimedOut { limit } => {
                format!("the job ran longer than {:.1} s", limit.as_secs_f64())
            }
            Failure::Orphaned {
                left,
                waiting,
                free,
            } => {
                let who = match &left[..] {
                    [(rank, pid, node)] => format!(
                        "{} exited with status 0 without calling shmem_finalize",
                        who(rank, pid, node)
                    ),
                    _ => format!(
                        "PEs {} exited with status 0 without calling shmem_finalize",
                        rank_list(left.iter().map(|l| l.0).collect())
                    ),
                };
                let mut text = format!("{who}; {}", hangs::describe_waiting(waiting));
                match free.len() {
                    0 => {}
                    1 => text.push_str(&format!("; PE {} is not blocked in the library", free[0])),
                    _ => text.push_str(&format!(
                        "; PEs {} are not blocked in the library",
                        rank_list(free.clone())
                    )),
                }
                text
            }
        }
    }
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobReport {
    /// The launcher's exit status: 0 when every PE exited with 0.
    pub exit_code: i32,
    /// What ended the job early, if anything.
    pub failure: Option<Failure>,
    /// Exit status of every PE started here, by position in [`JobSpec::pes`] (`None` for a
    /// PE that could not be reaped; this is reported in the log).
    pub statuses: Vec<Option<ExitStatus>>,
    /// Pids of the PEs started here, by position in [`JobSpec::pes`].
    pub pids: Vec<u32>,
    /// How the PEs on other machines ended, in the order their daemons reported them.
    pub remote: Vec<RemotePe>,
    /// How many ranks sent PMI `init` (started the library through this launcher); 0 for
    /// a program that is no gsas PE, such as another implementation's OpenSHMEM program.
    pub pmi_inits: u32,
}

/// How a PE on another machine ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePe {
    /// Its rank.
    pub rank: u32,
    /// Its pid on its node.
    pub pid: u32,
    /// Its node.
    pub node: String,
    /// Its exit status.
    pub status: ExitStatus,
}

/// Why a job could not be started at all.
#[derive(Debug)]
pub enum LaunchError {
    /// The PMI server could not be set up.
    Pmi(crate::pmi::PmiError),
    /// A PE could not be started; the PEs started before it were killed and reaped.
    Spawn {
        /// Its rank.
        rank: u32,
        /// The program.
        program: OsString,
        /// The operating-system error.
        source: std::io::Error,
    },
    /// The job specification is inconsistent.
    Invalid(String),
    /// The remote PEs could not be started (the message names the node).
    Remote(String),
}

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchError::Pmi(e) => write!(f, "PMI server: {e}"),
            LaunchError::Spawn {
                rank,
                program,
                source,
            } => write!(
                f,
                "starting PE {rank} ({}): {source}",
                std::path::Path::new(program).display()
            ),
            LaunchError::Invalid(why) | LaunchError::Remote(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for LaunchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LaunchError::Pmi(e) => Some(e),
            LaunchError::Spawn { source, .. } => Some(source),
            LaunchError::Invalid(_) | LaunchError::Remote(_) => None,
        }
    }
}

struct Running {
    rank: u32,
    pid: u32,
    child: Child,
    status: Option<ExitStatus>,
    forwarders: Vec<std::thread::JoinHandle<()>>,
}

/// Where a forwarder sends the lines it reads.
enum Dest {
    /// Standard output, each line prefixed with `[rank] `.
    TaggedStdout,
    /// Standard error, each line prefixed with `[rank] `.
    TaggedStderr,
    /// The merger of standard-error lines (which tags them if asked).
    Merged(Arc<Merger>),
}

/// Copies lines from `pipe` to `dest`. Ends at end of file.
fn forward(rank: u32, pipe: impl Read + Send + 'static, dest: Dest) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    let tagged = || {
                        let mut buf = format!("[{rank}] ").into_bytes();
                        buf.extend_from_slice(&line);
                        buf
                    };
                    // One write per line keeps lines of different PEs whole.
                    let _ = match &dest {
                        Dest::TaggedStdout => std::io::stdout().lock().write_all(&tagged()),
                        Dest::TaggedStderr => std::io::stderr().lock().write_all(&tagged()),
                        Dest::Merged(m) => {
                            m.line(rank, &line);
                            Ok(())
                        }
                    };
                }
            }
        }
    })
}

fn spawn_one(
    pe: &PeLaunch,
    endpoint: crate::pmi::ChildEndpoint,
    tag_output: bool,
    merger: Option<&Arc<Merger>>,
) -> Result<Running, std::io::Error> {
    let mut cmd = Command::new(&pe.program);
    cmd.args(&pe.args);
    for (k, v) in &pe.env {
        cmd.env(k, v);
    }
    cmd.stdin(if pe.rank == 0 {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    if tag_output {
        cmd.stdout(Stdio::piped());
    }
    if tag_output || merger.is_some() {
        cmd.stderr(Stdio::piped());
    }
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the hook runs in the forked child before exec and calls only prctl, getppid,
    // _exit and pthread_sigmask, which are async-signal-safe; it touches no memory of the
    // parent. (The launcher blocks SIGINT, SIGTERM, SIGHUP and SIGQUIT to read them from a
    // signalfd, and std's spawn keeps the mask: the PEs must not inherit it.)
    unsafe {
        cmd.pre_exec(move || {
            gsas_sys::process::child_clear_signal_mask()?;
            gsas_sys::process::child_set_pdeathsig(parent, libc::SIGKILL)
        });
    }
    let mut child = endpoint.spawn(&mut cmd)?;
    let mut forwarders = Vec::new();
    if let Some(out) = child.stdout.take() {
        forwarders.push(forward(pe.rank, out, Dest::TaggedStdout));
    }
    if let Some(err) = child.stderr.take() {
        let dest = merger.map_or(Dest::TaggedStderr, |m| Dest::Merged(m.clone()));
        forwarders.push(forward(pe.rank, err, dest));
    }
    Ok(Running {
        rank: pe.rank,
        pid: child.id(),
        child,
        status: None,
        forwarders,
    })
}

/// Runs the job to its end; see the [module docs](self).
///
/// Errors only when the job cannot start ([`LaunchError`]); a job that fails while running
/// returns a [`JobReport`] with the failure and a non-zero exit code.
pub fn run_job(mut spec: JobSpec) -> Result<JobReport, LaunchError> {
    if spec.node_of_rank.len() != spec.size as usize {
        return Err(LaunchError::Invalid(format!(
            "node map of {} entries for a job of {} ranks",
            spec.node_of_rank.len(),
            spec.size
        )));
    }
    if let Some(pe) = spec.pes.iter().find(|p| p.rank >= spec.size) {
        return Err(LaunchError::Invalid(format!(
            "PE rank {} in a job of {} ranks",
            pe.rank, spec.size
        )));
    }
    let mut config = ServerConfig::new(spec.size);
    config.node_of_rank = Some(spec.node_of_rank.clone());
    let mut server = Server::new(config).map_err(LaunchError::Pmi)?;
    let merger = spec
        .merge_errors
        .then(|| Arc::new(Merger::new(spec.size, spec.tag_output)));
    let mut remote = spec.remote.take();
    if let Some(r) = remote.as_mut() {
        r.set_merger(merger.clone());
        let mut pmi = Vec::new();
        for ip in r.listen_ips() {
            pmi.push(
                server
                    .listen_tcp(std::net::SocketAddr::new(ip, 0))
                    .map_err(LaunchError::Pmi)?,
            );
        }
        // Dropping `remote` on an error closes the streams: daemons that accepted end
        // their PEs.
        r.start(&pmi).map_err(LaunchError::Remote)?;
    }
    let mut running: Vec<Running> = Vec::with_capacity(spec.pes.len());
    for pe in &spec.pes {
        let started = server
            .add_local_rank(pe.rank)
            .map_err(LaunchError::Pmi)
            .and_then(|ep| {
                spawn_one(pe, ep, spec.tag_output, merger.as_ref()).map_err(|source| {
                    LaunchError::Spawn {
                        rank: pe.rank,
                        program: pe.program.clone(),
                        source,
                    }
                })
            });
        match started {
            Ok(r) => {
                log::debug!("started PE {} as pid {}", r.rank, r.pid);
                running.push(r);
            }
            Err(e) => {
                // The PEs started so far wait for the missing one at PMI: end them as a
                // failing job's (SIGTERM, SIGKILL after the grace time), not by waiting.
                terminate(&mut running, Duration::ZERO);
                if let Some(r) = remote.as_mut() {
                    r.kill();
                }
                let until = Instant::now() + spec.grace;
                while Instant::now() < until && running.iter_mut().any(|r| !r.reaped()) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                kill_all(&mut running);
                reap_all(&mut running, Duration::from_secs(5), &spec.launcher);
                return Err(e);
            }
        }
    }
    let report = supervise(
        &spec,
        &mut server,
        &mut running,
        remote.as_mut(),
        merger.as_deref(),
    );
    join_forwarders(&mut running);
    if let Some(m) = &merger {
        m.flush_all();
    }
    Ok(report)
}

/// Waits until the forwarders have read their pipes to the end, at most [`FORWARD_DRAIN`].
fn join_forwarders(running: &mut [Running]) {
    let until = Instant::now() + FORWARD_DRAIN;
    let handles: Vec<_> = running
        .iter_mut()
        .flat_map(|r| r.forwarders.drain(..))
        .collect();
    while handles.iter().any(|h| !h.is_finished()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    let open = handles.iter().filter(|h| !h.is_finished()).count();
    if open > 0 {
        log::info!(
            "{open} output pipe(s) still open {:.1} s after every PE ended (a PE's background \
             process?): not waited for",
            FORWARD_DRAIN.as_secs_f64()
        );
    }
    for h in handles.into_iter().filter(|h| h.is_finished()) {
        let _ = h.join();
    }
}

/// The loop of [`run_job`] once every PE is started.
fn supervise(
    spec: &JobSpec,
    server: &mut Server,
    running: &mut [Running],
    remote: Option<&mut RemoteJob>,
    merger: Option<&Merger>,
) -> JobReport {
    let mut s = Supervisor {
        spec,
        server,
        running,
        remote,
        merger,
        start: Instant::now(),
        failure: None,
        failure_at: None,
        kill_at: None,
        pmi_done: false,
        events: Vec::new(),
        remote_events: Vec::new(),
        remote_pes: Vec::new(),
        ended: Vec::new(),
        hangs: Hangs::default(),
        timed_out: false,
    };
    loop {
        s.reap_local();
        s.step_pmi();
        s.take_pmi_events();
        // PEs that ended since the last look, classified after the PMI messages: a PE that
        // aborts writes its abort to PMI before it exits, so an exit seen here has its
        // abort (if any) already readable, and the abort is what the user must be told.
        s.take_ended();
        s.poll_remote();
        s.take_signals();
        s.check_time_limit();
        s.check_hangs();
        if let Some(m) = s.merger {
            m.flush_due();
        }
        if s.finished() {
            break;
        }
    }
    s.report()
}

/// The state of [`supervise`]'s loop, one method per step of a turn.
struct Supervisor<'a> {
    spec: &'a JobSpec,
    server: &'a mut Server,
    running: &'a mut [Running],
    remote: Option<&'a mut RemoteJob>,
    /// Holds the PEs' diagnostics; printed out before a line of the launcher's own.
    merger: Option<&'a Merger>,
    start: Instant,
    /// The first failure seen: what the user is told and what sets the exit code.
    failure: Option<Failure>,
    /// When [`Self::finished`] first saw the failure.
    failure_at: Option<Instant>,
    /// When the PEs still running after the termination get SIGKILL.
    kill_at: Option<Instant>,
    pmi_done: bool,
    events: Vec<Event>,
    remote_events: Vec<RemoteEvent>,
    remote_pes: Vec<RemotePe>,
    /// Local PEs that ended since the last turn: (rank, pid, status).
    ended: Vec<(u32, u32, ExitStatus)>,
    hangs: Hangs,
    timed_out: bool,
}

/// One turn's wait for PMI messages (or signals, once PMI is done).
const SUPERVISE_STEP: Duration = Duration::from_millis(10);

impl Supervisor<'_> {
    /// The failure as the launcher tells it: a PE's abort message that the PE printed on
    /// standard error just before is not repeated.
    fn describe(&self, f: &Failure) -> String {
        if let Failure::Aborted {
            rank,
            message: Some(m),
            ..
        } = f
        {
            if self.merger.is_some_and(|mg| mg.printed(*rank, m)) {
                let mut short = f.clone();
                if let Failure::Aborted { message, .. } = &mut short {
                    *message = None;
                }
                return format!("{} (its message is above)", short.describe());
            }
        }
        f.describe()
    }

    /// Prints the PEs' held diagnostics, before a line of the launcher's own.
    fn flush_held(&self) {
        if let Some(m) = self.merger {
            m.flush_all();
        }
    }

    /// Local PEs that ended since the last turn go to `ended`.
    fn reap_local(&mut self) {
        for r in self.running.iter_mut().filter(|r| r.status.is_none()) {
            match r.child.try_wait() {
                Ok(Some(status)) => {
                    r.status = Some(status);
                    log::debug!("PE {} (pid {}) ended: {status}", r.rank, r.pid);
                    self.ended.push((r.rank, r.pid, status));
                }
                Ok(None) => {}
                Err(e) => log::warn!("waiting for PE {} (pid {}): {e}", r.rank, r.pid),
            }
        }
    }

    /// Serves PMI for up to one step (not at all when a PE just ended).
    fn step_pmi(&mut self) {
        if self.pmi_done {
            wait_briefly(self.spec.signals.as_ref(), SUPERVISE_STEP);
            return;
        }
        let wait = if self.ended.is_empty() {
            SUPERVISE_STEP
        } else {
            Duration::ZERO
        };
        let events = &mut self.events;
        match self.server.step(wait, |e| events.push(e)) {
            Ok(Some(Stop::Done | Stop::Shutdown)) => self.pmi_done = true,
            Ok(None) => {}
            Err(e) => {
                log::error!("PMI server failed: {e}");
                self.pmi_done = true;
            }
        }
    }

    fn take_pmi_events(&mut self) {
        for e in std::mem::take(&mut self.events) {
            match e {
                Event::Abort {
                    rank,
                    code,
                    message,
                } => {
                    let (pid, node) = match self.running.iter().find(|r| r.rank == rank) {
                        Some(r) => (r.pid, None),
                        None => self
                            .remote
                            .as_deref()
                            .and_then(|rj| rj.describe_rank(rank))
                            .map_or((0, None), |(n, pid)| (pid, Some(n))),
                    };
                    self.failure.get_or_insert(Failure::Aborted {
                        rank,
                        pid,
                        node,
                        code,
                        message,
                    });
                }
                Event::Lost { rank, reason } => {
                    log::debug!("PMI connection of PE {rank} ended without finalize: {reason}")
                }
                Event::Finalized { rank } => {
                    log::debug!("PE {rank} finalized PMI");
                    self.hangs.finalized(rank);
                }
                Event::Note { rank, kind, value } => self.hangs.note(rank, &kind, &value),
                Event::Rejected { peer, reason } => {
                    log::warn!("PMI connection from {peer} refused: {reason}")
                }
            }
        }
    }

    fn take_ended(&mut self) {
        for (rank, pid, status) in std::mem::take(&mut self.ended) {
            self.hangs
                .ended(rank, status, self.server.initialized(rank));
            if self.failure.is_none() {
                self.failure = failure_of(rank, pid, None, status);
            }
        }
    }

    /// The remote daemons' news: PEs that ended, nodes that failed.
    fn poll_remote(&mut self) {
        let Some(rj) = self.remote.as_deref_mut() else {
            return;
        };
        rj.poll(&mut self.remote_events);
        for e in self.remote_events.drain(..) {
            match e {
                RemoteEvent::Exited {
                    rank,
                    pid,
                    node,
                    status,
                } => {
                    log::debug!("PE {rank} (pid {pid} on {node}) ended: {status}");
                    self.hangs
                        .ended(rank, status, self.server.initialized(rank));
                    if self.failure.is_none() {
                        self.failure = failure_of(rank, pid, Some(node.clone()), status);
                    }
                    self.remote_pes.push(RemotePe {
                        rank,
                        pid,
                        node,
                        status,
                    });
                }
                RemoteEvent::Failed { node, message } => {
                    self.failure.get_or_insert(Failure::Node { node, message });
                }
            }
        }
    }

    /// SIGQUIT asks every PE where it waits; any other signal ends the job.
    fn take_signals(&mut self) {
        while let Some(sig) = self
            .spec
            .signals
            .as_ref()
            .and_then(|s| s.read().ok().flatten())
        {
            if sig != libc::SIGQUIT {
                self.failure
                    .get_or_insert(Failure::Interrupted { signal: sig });
            } else if self.failure.is_none() {
                self.flush_held();
                gsas_transport::eprintln_whole!(
                    "{}: SIGQUIT: asking every PE where it waits (the job goes on)",
                    self.spec.launcher
                );
                self.ask(Asked::Quit);
            }
        }
    }

    fn ask(&mut self, why: Asked) {
        ask_reports(
            &mut self.hangs,
            why,
            self.server,
            self.running,
            self.remote.as_deref_mut(),
        );
    }

    /// Past `--timeout`: every PE is asked where it waits (the job then ends).
    fn check_time_limit(&mut self) {
        let Some(limit) = self.spec.time_limit else {
            return;
        };
        if self.start.elapsed() > limit && !self.timed_out && self.failure.is_none() {
            self.timed_out = true;
            self.flush_held();
            gsas_transport::eprintln_whole!(
                "{}: the job ran longer than {:.1} s; asking every PE where it waits",
                self.spec.launcher,
                limit.as_secs_f64()
            );
            self.ask(Asked::Timeout);
        }
    }

    /// Whether PE `rank` has ended (a rank of nobody's counts as ended).
    fn gone(running: &[Running], remote: Option<&RemoteJob>, rank: u32) -> bool {
        running.iter().find(|r| r.rank == rank).map_or_else(
            || remote.and_then(|rj| rj.has_ended(rank)).unwrap_or(true),
            |r| r.status.is_some(),
        )
    }

    /// The PEs that did not answer where they wait; PEs left waiting for ones that ended.
    fn check_hangs(&mut self) {
        let (running, remote) = (&*self.running, self.remote.as_deref());
        let gone = |rank| Self::gone(running, remote, rank);
        if let Some((why, missing)) = self.hangs.asking(gone) {
            for rank in missing {
                self.flush_held();
                gsas_transport::eprintln_whole!(
                    "{}: {} did not say where it waits within {:.1} s",
                    self.spec.launcher,
                    describe_pe(rank, running, remote),
                    hangs::REPORT_WAIT.as_secs_f64()
                );
            }
            if why == Asked::Timeout {
                if let Some(limit) = self.spec.time_limit {
                    self.failure.get_or_insert(Failure::TimedOut { limit });
                }
            }
        }
        if self.failure.is_none() {
            if let Some(o) = self.hangs.orphaned(self.spec.size, |r| !gone(r)) {
                let left = o
                    .left
                    .iter()
                    .map(|&rank| pe_identity(rank, running, remote))
                    .collect();
                self.failure = Some(Failure::Orphaned {
                    left,
                    waiting: o.waiting,
                    free: o.free,
                });
            }
        }
    }

    /// Whether the loop ends: every PE ended, or the grace after the termination of a
    /// failed job passed (the rest are killed). A failure terminates the job first.
    fn finished(&mut self) -> bool {
        if self.failure.is_some() && self.kill_at.is_none() && self.merger.is_some() {
            // The failing PE's last words (and the same words of PEs failing alike) come
            // first, merged: they are read from pipes while its abort came over PMI.
            let at = *self.failure_at.get_or_insert_with(Instant::now);
            if at.elapsed() < merge::QUIET {
                return false;
            }
        }
        let remote_ended = self.remote.as_deref().is_none_or(RemoteJob::all_ended);
        let launcher = &self.spec.launcher;
        if self.running.iter().all(|r| r.status.is_some()) && remote_ended {
            if let (Some(f), None) = (&self.failure, self.kill_at) {
                // Nothing is left to terminate, but the user must learn what failed.
                self.flush_held();
                gsas_transport::eprintln_whole!("{launcher}: {}", self.describe(f));
            }
            let left = self.hangs.exited_without_finalize();
            if self.failure.is_none() && !left.is_empty() {
                // The job succeeded, but these PEs never told the process manager they
                // were done: one line, where the PMI server's and the service's traces
                // used to say it twice per PE. (A PE leaves the job in the library's exit
                // handler, after its last shmem_finalize.)
                self.flush_held();
                gsas_transport::eprintln_whole!(
                    "{launcher}: warning: {} {} exited with status 0 without leaving the job \
                     (the library's exit handler did not run: _exit or exec, after \
                     shmem_finalize or without it?)",
                    if left.len() == 1 { "PE" } else { "PEs" },
                    rank_list(left)
                );
            }
            return true;
        }
        let Some(f) = &self.failure else {
            return false;
        };
        match self.kill_at {
            None => {
                self.flush_held();
                gsas_transport::eprintln_whole!(
                    "{launcher}: {}; terminating the job",
                    self.describe(f)
                );
                terminate(self.running, Duration::ZERO);
                if let Some(rj) = self.remote.as_deref_mut() {
                    rj.terminate(self.spec.grace);
                }
                self.kill_at = Some(Instant::now() + self.spec.grace);
                self.server.shutdown_handle().shutdown();
                false
            }
            Some(at) if Instant::now() >= at => {
                kill_all(self.running);
                if let Some(rj) = self.remote.as_deref_mut() {
                    rj.kill();
                    wait_remote(rj, &mut self.remote_pes, REMOTE_KILL_WAIT, launcher);
                }
                reap_all(self.running, Duration::from_secs(5), launcher);
                true
            }
            Some(_) => false,
        }
    }

    fn report(self) -> JobReport {
        if let Some(rj) = self.remote {
            rj.finish(REMOTE_FINISH);
        }
        let exit_code = self.failure.as_ref().map_or(0, Failure::exit_code);
        JobReport {
            exit_code,
            failure: self.failure,
            statuses: self.running.iter().map(|r| r.status).collect(),
            pids: self.running.iter().map(|r| r.pid).collect(),
            remote: self.remote_pes,
            pmi_inits: (0..self.spec.size)
                .filter(|&r| self.server.initialized(r))
                .count() as u32,
        }
    }
}

/// `(rank, pid, node)` of a PE of this job (pid 0 when unknown; node when remote).
fn pe_identity(
    rank: u32,
    running: &[Running],
    remote: Option<&RemoteJob>,
) -> (u32, u32, Option<String>) {
    match running.iter().find(|r| r.rank == rank) {
        Some(r) => (rank, r.pid, None),
        None => remote
            .and_then(|rj| rj.describe_rank(rank))
            .map_or((rank, 0, None), |(n, pid)| (rank, pid, Some(n))),
    }
}

/// `PE 3 (pid 1234)` or `PE 3 (pid 1234 on node 1 (...))`.
fn describe_pe(rank: u32, running: &[Running], remote: Option<&RemoteJob>) -> String {
    match pe_identity(rank, running, remote) {
        (rank, pid, Some(node)) => format!("PE {rank} (pid {pid} on {node})"),
        (rank, pid, None) => format!("PE {rank} (pid {pid})"),
    }
}

/// Sends SIGQUIT to every PE of this machine that handles it (a gsas PE prints where it
/// waits; one without a handler, whose library is not initialized, would die of it) and
/// asks the daemons to do the same with theirs; the PEs that talked PMI and have not
/// finalized are expected to answer.
fn ask_reports(
    hangs: &mut Hangs,
    why: Asked,
    server: &Server,
    running: &[Running],
    remote: Option<&mut RemoteJob>,
) {
    let mut expected = std::collections::BTreeSet::new();
    for r in running.iter().filter(|r| r.status.is_none()) {
        if !server.initialized(r.rank) || hangs.is_finalized(r.rank) {
            continue;
        }
        expected.insert(r.rank);
        if !gsas_sys::process::catches_signal(r.pid, libc::SIGQUIT) {
            log::info!(
                "PE {} (pid {}) has no SIGQUIT handler: not asked",
                r.rank,
                r.pid
            );
        } else if let Err(e) = gsas_sys::process::kill(r.pid, libc::SIGQUIT) {
            log::warn!("SIGQUIT to PE {} (pid {}): {e}", r.rank, r.pid);
        }
    }
    if let Some(rj) = remote {
        rj.ask_reports();
        expected.extend(rj.ranks().into_iter().filter(|&rank| {
            rj.has_ended(rank) == Some(false)
                && server.initialized(rank)
                && !hangs.is_finalized(rank)
        }));
    }
    hangs.ask(why, expected);
}

/// The failure a PE's end means, if any (a non-zero status or a signal).
fn failure_of(rank: u32, pid: u32, node: Option<String>, status: ExitStatus) -> Option<Failure> {
    if let Some(signal) = status.signal() {
        Some(Failure::Signaled {
            rank,
            pid,
            node,
            signal,
        })
    } else {
        status
            .code()
            .filter(|&c| c != 0)
            .map(|code| Failure::Exited {
                rank,
                pid,
                node,
                code,
            })
    }
}

/// Polls the remote half until every remote PE is reported ended or `limit` passes.
fn wait_remote(rj: &mut RemoteJob, reports: &mut Vec<RemotePe>, limit: Duration, launcher: &str) {
    let until = Instant::now() + limit;
    let mut events = Vec::new();
    while !rj.all_ended() && Instant::now() < until {
        rj.poll(&mut events);
        for e in events.drain(..) {
            if let RemoteEvent::Exited {
                rank,
                pid,
                node,
                status,
            } = e
            {
                reports.push(RemotePe {
                    rank,
                    pid,
                    node,
                    status,
                });
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if !rj.all_ended() {
        gsas_transport::eprintln_whole!(
            "{launcher}: some remote PEs were not reported ended {:.1} s after SIGKILL was asked for; their daemons end them when this launcher exits",
            limit.as_secs_f64()
        );
    }
}

/// Sleeps up to `d`, waking early when a signal arrives on `signals`.
fn wait_briefly(signals: Option<&SignalFd>, d: Duration) {
    match signals {
        Some(s) => {
            let mut pfd = libc::pollfd {
                fd: s.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call; the timeout is bounded.
            unsafe { libc::poll(&mut pfd, 1, d.as_millis() as libc::c_int) };
        }
        None => std::thread::sleep(d),
    }
}

impl Running {
    /// Whether the PE has ended (reaping it if it just did).
    fn reaped(&mut self) -> bool {
        if self.status.is_none() {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
            }
        }
        self.status.is_some()
    }
}

/// Logs one warning per distinct error of a signal sent to many PEs.
fn warn_grouped(what: &str, failed: Vec<(u32, String)>) {
    let mut by_error: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (rank, e) in failed {
        by_error.entry(e).or_default().push(rank);
    }
    for (e, ranks) in by_error {
        log::warn!("{what} to PE(s) {}: {e}", rank_list(ranks));
    }
}

/// Sends SIGTERM to every PE still running.
fn terminate(running: &mut [Running], _grace: Duration) {
    let failed = running
        .iter()
        .filter(|r| r.status.is_none())
        .filter_map(|r| {
            gsas_sys::process::kill(r.pid, libc::SIGTERM)
                .err()
                .map(|e| (r.rank, e.to_string()))
        })
        .collect();
    warn_grouped("SIGTERM", failed);
}

/// Sends SIGKILL to every PE still running.
fn kill_all(running: &mut [Running]) {
    let failed = running
        .iter_mut()
        .filter(|r| r.status.is_none())
        .filter_map(|r| r.child.kill().err().map(|e| (r.rank, e.to_string())))
        .collect();
    warn_grouped("SIGKILL", failed);
}

/// Reaps every PE, waiting at most `limit` in total; names the ones left in one line.
fn reap_all(running: &mut [Running], limit: Duration, launcher: &str) {
    let until = Instant::now() + limit;
    loop {
        let mut left = 0;
        for r in running.iter_mut().filter(|r| r.status.is_none()) {
            match r.child.try_wait() {
                Ok(Some(s)) => r.status = Some(s),
                Ok(None) => left += 1,
                Err(_) => r.status = Some(ExitStatus::from_raw(libc::SIGKILL)),
            }
        }
        if left == 0 {
            return;
        }
        if Instant::now() >= until {
            let left: Vec<&Running> = running.iter().filter(|r| r.status.is_none()).collect();
            let pids: Vec<String> = left.iter().take(8).map(|r| r.pid.to_string()).collect();
            gsas_transport::eprintln_whole!(
                "{launcher}: {} PE(s) did not exit {:.1} s after SIGKILL: ranks {} (pids {}{})",
                left.len(),
                limit.as_secs_f64(),
                rank_list(left.iter().map(|r| r.rank).collect()),
                pids.join(", "),
                if left.len() > pids.len() { ", ..." } else { "" }
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(rank: u32, script: &str) -> PeLaunch {
        PeLaunch {
            rank,
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![],
        }
    }

    #[test]
    fn all_succeed() {
        let report = run_job(JobSpec::single_node(vec![sh(0, "exit 0"), sh(1, "true")])).unwrap();
        assert_eq!(report.exit_code, 0);
        assert_eq!(report.failure, None);
        assert!(
            report
                .statuses
                .iter()
                .all(|s| s.is_some_and(|s| s.success()))
        );
    }

    #[test]
    fn first_failure_ends_the_job_with_its_status() {
        let t0 = Instant::now();
        let report = run_job(JobSpec::single_node(vec![
            sh(0, "sleep 30"),
            sh(1, "exit 7"),
            sh(2, "sleep 30"),
        ]))
        .unwrap();
        assert_eq!(report.exit_code, 7);
        assert!(matches!(
            report.failure,
            Some(Failure::Exited {
                rank: 1,
                code: 7,
                ..
            })
        ));
        // The sleepers were terminated, not waited for.
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        assert_eq!(
            report.statuses[0].and_then(|s| s.signal()),
            Some(libc::SIGTERM)
        );
    }

    #[test]
    fn an_abort_gives_its_code_zero_included() {
        // shmem_global_exit(0) ends the job successfully (issue 13); other codes as asked.
        for code in [0, 3, 255] {
            let f = Failure::Aborted {
                rank: 1,
                pid: 42,
                node: None,
                code,
                message: Some(format!("PE 1 called shmem_global_exit({code})")),
            };
            assert_eq!(f.exit_code(), code);
        }
    }

    #[test]
    fn a_signal_gives_128_plus_signal() {
        let report = run_job(JobSpec::single_node(vec![sh(0, "kill -9 $$")])).unwrap();
        assert_eq!(report.exit_code, 137);
        let f = report.failure.unwrap();
        assert!(
            f.describe().ends_with("was killed by signal 9 (SIGKILL)"),
            "{}",
            f.describe()
        );
    }

    #[test]
    fn sigterm_is_ignored_then_sigkill_follows() {
        // PE 1 fails only once PE 0 has installed its trap (a slow start of PE 0's shell
        // must not let the SIGTERM arrive first); it gives up after 20 s.
        let marker = std::env::temp_dir().join(format!("gsas-trap-{}", std::process::id()));
        let _ = std::fs::remove_file(&marker);
        let m = marker.display();
        let mut spec = JobSpec::single_node(vec![
            sh(0, &format!("trap '' TERM; : > {m}; sleep 30")),
            sh(
                1,
                &format!(
                    "i=0; while [ ! -e {m} ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; exit 3"
                ),
            ),
        ]);
        spec.grace = Duration::from_millis(200);
        let report = run_job(spec).unwrap();
        let trapped = marker.exists();
        let _ = std::fs::remove_file(&marker);
        assert!(trapped, "PE 0 never installed its trap");
        assert_eq!(report.exit_code, 3);
        assert_eq!(
            report.statuses[0].and_then(|s| s.signal()),
            Some(libc::SIGKILL)
        );
    }

    #[test]
    fn time_limit() {
        let mut spec = JobSpec::single_node(vec![sh(0, "sleep 30")]);
        spec.time_limit = Some(Duration::from_millis(200));
        let report = run_job(spec).unwrap();
        assert_eq!(report.exit_code, 124);
    }

    #[test]
    fn spawn_failure_is_an_error_naming_the_pe() {
        let mut bad = sh(1, "");
        bad.program = "/nonexistent/program".into();
        let err = run_job(JobSpec::single_node(vec![sh(0, "sleep 30"), bad])).unwrap_err();
        assert!(err.to_string().contains("starting PE 1"), "{err}");
    }

    #[test]
    fn inconsistent_specs_are_refused() {
        let mut spec = JobSpec::single_node(vec![sh(0, "true")]);
        spec.node_of_rank = vec![];
        assert!(matches!(run_job(spec), Err(LaunchError::Invalid(_))));
        let mut spec = JobSpec::single_node(vec![sh(3, "true")]);
        spec.size = 1;
        assert!(matches!(run_job(spec), Err(LaunchError::Invalid(_))));
    }
}
