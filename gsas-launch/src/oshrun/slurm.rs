//! `oshrun` inside a Slurm allocation (`salloc`, `sbatch`): the PEs go to the allocated
//! nodes through `srun`, as Open MPI's and Hydra's launchers do.
//!
//! **What it is.** [`Allocation::detect`] recognises an allocation from the variables
//! Slurm sets for `salloc` shells and batch scripts (`SLURM_JOB_ID`, and no
//! `SLURM_STEP_ID`: inside a step, `oshrun` stays on its machine). [`run_job`] then runs
//! the job as two job steps on the first M allocated nodes (`scontrol show hostnames`;
//! M = N / `--ppn` rounded up, or N up to the allocation's node count):
//!
//! 1. the **node services**: `srun --overlap -N M -n M --ntasks-per-node=1 --mpi=none`
//!    of `gsas-atomicd` (the one installed next to `oshrun`, else from `PATH`), one per
//!    node, as the job's user: UDP on the first non-loopback IPv4 address of the node's
//!    host name, control socket `/tmp/gsas-slurm-<job>-<random>-<host>.sock`, node id
//!    `SLURM_NODEID`. `oshrun` waits until every one says it serves (at most 60 s);
//! 2. the **PEs**: `srun --mpi=pmi2 --kill-on-bad-exit=1 -n N -N M --nodelist=<the same
//!    nodes> ... PROGRAM ARGS` ([`srun_args`]) with `GSAS_SERVICE` naming the socket with
//!    `%h` for the host name, so each node's first PE joins its node's service; the PEs
//!    bootstrap through PMI-2 and take their nodes from `PMI_process_mapping`, whose node
//!    order is the step's, as `SLURM_NODEID`'s is;
//! 3. when the PE step ends, the service step is stopped with `scancel --signal=TERM
//!    <job>.<step>` (the daemons remove their sockets and exit; SIGKILL only if they have
//!    not within 10 s), and `oshrun` exits with the PE step's status.
//!
//! Options: `-n N` → `-n N`; `--ppn K` → `--ntasks-per-node=K`; `--tag-output` →
//! `--label`; `--timeout S` → `--time=M:SS` (rounded up); `--kill-on-bad-exit=1` (`srun
//! -K`): the first PE that fails ends the job, as under `oshrun` on one machine. SIGTERM
//! and SIGHUP to `oshrun` are passed to the PE step's srun, SIGINT as SIGTERM (one SIGINT
//! only makes srun print the tasks' states); srun still there 10 s later gets SIGKILL.
//!
//! `oshrun --no-srun` runs on this machine even inside an allocation, and
//! `oshrun --config FILE` always uses the cluster file's daemons.
//!
//! **What it is not.** A scheduler: the nodes are the allocation's. Thread-safety:
//! [`run_job`] is called from the launcher's main thread; the rest are pure functions.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::args::RunArgs;
use super::{EXIT_FAILURE, EXIT_USAGE};
use gsas_sys::event::SignalFd;

/// Longest wait for the node services to come up.
const SERVICE_START: Duration = Duration::from_secs(60);
/// Longest wait for the node services to stop after `scancel --signal=TERM`.
const SERVICE_STOP: Duration = Duration::from_secs(10);
/// What a `gsas-atomicd` logs once its sockets are bound.
const SERVING: &str = " serving UDP ";
/// What the service step's tasks print first: `gsas-step <job>.<step>`.
const STEP_TAG: &str = "gsas-step ";

/// A Slurm allocation `oshrun` runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// `SLURM_JOB_ID`.
    pub job_id: String,
    /// `SLURM_JOB_NUM_NODES` (or `SLURM_NNODES`), when set.
    pub nodes: Option<u32>,
}

impl Allocation {
    /// The allocation this process runs in, from the variables `lookup` returns; `None`
    /// outside Slurm and inside a job step (`SLURM_STEP_ID` set).
    pub fn detect(lookup: impl Fn(&str) -> Option<OsString>) -> Option<Allocation> {
        let job_id = lookup("SLURM_JOB_ID")?.to_string_lossy().trim().to_owned();
        if job_id.is_empty() || lookup("SLURM_STEP_ID").is_some() {
            return None;
        }
        let nodes = ["SLURM_JOB_NUM_NODES", "SLURM_NNODES"]
            .iter()
            .find_map(|v| lookup(v)?.to_string_lossy().trim().parse().ok());
        Some(Allocation { job_id, nodes })
    }
}

/// `--timeout` as srun's `--time` (`minutes:seconds`, rounded up).
fn srun_time(limit: std::time::Duration) -> String {
    let secs = limit.as_secs() + u64::from(limit.subsec_nanos() > 0);
    format!("{}:{:02}", secs / 60, secs % 60)
}

/// The srun command line (without `srun` itself) of the PE step of `run`, on the
/// `placement` (node count, node list) when given.
pub fn srun_args(
    run: &RunArgs,
    program: &Path,
    placement: Option<(usize, &str)>,
    mpi: &str,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        format!("--mpi={mpi}").into(),
        "--kill-on-bad-exit=1".into(),
        "-n".into(),
        run.n.to_string().into(),
    ];
    if let Some((nodes, list)) = placement {
        a.push("-N".into());
        a.push(nodes.to_string().into());
        a.push(format!("--nodelist={list}").into());
    }
    if let Some(k) = run.ppn {
        a.push(format!("--ntasks-per-node={k}").into());
    }
    if run.tag_output {
        a.push("--label".into());
    }
    if let Some(t) = run.timeout {
        a.push(format!("--time={}", srun_time(t)).into());
    }
    a.push(program.as_os_str().to_owned());
    a.extend(run.args.iter().cloned());
    a
}

/// The PMI plugin of the PEs' `srun` step, from what `srun --mpi=list` printed (`None`:
/// it could not run): `pmi2` where the site has it (or nothing is known), else `pmix`
/// where only the PMIx plugin is installed (a pmix-only site), which the PEs speak as
/// well (they load libpmix at run time).
pub fn mpi_plugin(listed: Option<&str>) -> &'static str {
    let Some(text) = listed else {
        return "pmi2";
    };
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',' || c == ':')
        .filter(|w| !w.is_empty())
        .collect();
    let has_pmix = words.iter().any(|w| w.starts_with("pmix"));
    if words.contains(&"pmi2") || !has_pmix {
        "pmi2"
    } else {
        "pmix"
    }
}

/// How long `srun --mpi=list` may take (it asks the controller, which may be down or slow).
const MPI_LIST_LIMIT: Duration = Duration::from_secs(10);

/// Asks `srun --mpi=list` which PMI plugins the site has ([`mpi_plugin`]), within
/// [`MPI_LIST_LIMIT`]: a controller that does not answer leaves the default.
fn site_mpi_plugin() -> &'static str {
    let listed = list_mpi_plugins(Command::new("srun").arg("--mpi=list"), MPI_LIST_LIMIT);
    let plugin = mpi_plugin(listed.as_deref());
    log::info!("srun --mpi=list: using --mpi={plugin}");
    plugin
}

/// Runs `cmd` (`srun --mpi=list`) for at most `limit`; what it printed on both streams when
/// it succeeded in time, else `None` (a late one is killed, with a warning).
fn list_mpi_plugins(cmd: &mut Command, limit: Duration) -> Option<String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if t0.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                log::warn!(
                    "srun --mpi=list did not answer within {} s: using the default PMI plugin",
                    limit.as_secs_f64()
                );
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    if !status.success() {
        return None;
    }
    // Slurm prints the list on stderr in some versions, stdout in others; the list is a
    // few lines, so it was in the pipes' buffers when srun ended.
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut text);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    Some(text)
}

/// How many of `available` nodes a job of `run` uses: N / `--ppn` rounded up, or one
/// per PE up to all of them.
pub fn nodes_needed(run: &RunArgs, available: usize) -> Result<usize, String> {
    let want = match run.ppn {
        Some(k) => run.n.div_ceil(k) as usize,
        None => (run.n as usize).min(available),
    };
    if want > available {
        return Err(format!(
            "-n {} with --ppn {} needs {want} nodes, the allocation has {available}",
            run.n,
            run.ppn.unwrap_or(1)
        ));
    }
    Ok(want.max(1))
}

/// The shell command of one service task: resolve the node's address, say which step
/// this is, become `gsas-atomicd` (`$0`) with the socket `$1<host>$2`.
const SERVICE_TASK: &str = r#"h=$(hostname)
a=$(getent ahostsv4 "$h" | awk '$1 !~ /^127\./ {print $1; exit}')
echo "gsas-step $SLURM_JOB_ID.$SLURM_STEP_ID"
exec "$0" --listen "${a:?gsas: host name $h has no non-loopback IPv4 address}:0" --socket "$1$h$2" --node "$SLURM_NODEID" --log-level info"#;

/// The srun arguments of the service step.
pub fn service_args(
    nodes: usize,
    nodelist: &str,
    atomicd: &Path,
    socket: (&str, &str),
) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "--overlap".into(),
        "--mpi=none".into(),
        "--kill-on-bad-exit=1".into(),
        "--job-name=gsas-services".into(),
        "-N".into(),
        nodes.to_string().into(),
        "-n".into(),
        nodes.to_string().into(),
        "--ntasks-per-node=1".into(),
        format!("--nodelist={nodelist}").into(),
        "sh".into(),
        "-c".into(),
        SERVICE_TASK.into(),
    ];
    a.push(atomicd.as_os_str().to_owned());
    a.push(socket.0.into());
    a.push(socket.1.into());
    a
}

fn launcher_err(what: impl std::fmt::Display) -> (i32, String) {
    (EXIT_FAILURE, what.to_string())
}

/// The allocation's host names in Slurm's order.
fn hostnames() -> Result<Vec<String>, (i32, String)> {
    let list = std::env::var("SLURM_JOB_NODELIST")
        .or_else(|_| std::env::var("SLURM_NODELIST"))
        .map_err(|_| launcher_err("SLURM_JOB_NODELIST is not set in this allocation"))?;
    let out = Command::new("scontrol")
        .args(["show", "hostnames", &list])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| launcher_err(format!("scontrol show hostnames: {e}")))?;
    if !out.status.success() {
        return Err(launcher_err(format!(
            "scontrol show hostnames {list}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let hosts: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if hosts.is_empty() {
        return Err(launcher_err(format!(
            "the allocation's node list {list} is empty"
        )));
    }
    Ok(hosts)
}

/// `gsas-atomicd` next to the running `oshrun`, else the name for `PATH`.
fn atomicd() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("gsas-atomicd")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("gsas-atomicd"))
}

/// Lines of a child's stdout and stderr, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child
        .stdout
        .take()
        .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>);
    let err = child
        .stderr
        .take()
        .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>);
    for pipe in [out, err].into_iter().flatten() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// The running service step.
struct Services {
    child: Child,
    step: Option<String>,
    output: mpsc::Receiver<String>,
}

impl Services {
    /// Starts the step and waits until all `nodes` services serve.
    fn start(
        nodes: usize,
        nodelist: &str,
        socket: (&str, &str),
    ) -> Result<Services, (i32, String)> {
        let atomicd = atomicd();
        let mut child = Command::new("srun")
            .args(service_args(nodes, nodelist, &atomicd, socket))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| launcher_err(format!("starting the node services with srun: {e}")))?;
        let output = lines_of(&mut child);
        let mut s = Services {
            child,
            step: None,
            output,
        };
        let until = Instant::now() + SERVICE_START;
        let mut serving = 0;
        let mut seen = Vec::new();
        while serving < nodes {
            let left = until.saturating_duration_since(Instant::now());
            match s.output.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    if let Some(step) = line.trim().strip_prefix(STEP_TAG) {
                        s.step.get_or_insert_with(|| step.to_owned());
                    } else if line.contains(SERVING) {
                        serving += 1;
                    }
                    log::debug!("node services: {line}");
                    seen.push(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !left.is_zero() => {
                    if let Ok(Some(status)) = s.child.try_wait() {
                        return Err(launcher_err(format!(
                            "the node services' step ended ({status}) before every service \
                             served:\n{}",
                            seen.join("\n")
                        )));
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Both output pipes closed: the step ended (stop waits for it, bounded).
                    s.stop();
                    let status = match s.child.try_wait() {
                        Ok(Some(st)) => st.to_string(),
                        Ok(None) => "still running".to_owned(),
                        Err(e) => e.to_string(),
                    };
                    return Err(launcher_err(format!(
                        "the node services' step ended ({status}) before every service served \
                         ({serving} of {nodes}):\n{}",
                        seen.join("\n")
                    )));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    s.stop();
                    return Err(launcher_err(format!(
                        "{serving} of {nodes} node services served within {} s (gsas-atomicd \
                         {}):\n{}",
                        SERVICE_START.as_secs(),
                        atomicd.display(),
                        seen.join("\n")
                    )));
                }
            }
        }
        log::info!(
            "node services up on {nodelist} (step {})",
            s.step.as_deref().unwrap_or("?")
        );
        Ok(s)
    }

    /// `scancel --signal=TERM` on the step, then waits; SIGKILL to srun as a last resort.
    fn stop(&mut self) {
        if let Some(step) = &self.step {
            let r = Command::new("scancel")
                .args(["--signal=TERM", step])
                .stdin(Stdio::null())
                .output();
            if let Err(e) = r {
                log::warn!("scancel --signal=TERM {step}: {e}");
            }
        }
        let until = Instant::now() + SERVICE_STOP;
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            while let Ok(line) = self.output.try_recv() {
                log::debug!("node services: {line}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        log::warn!(
            "the node services did not stop within {} s",
            SERVICE_STOP.as_secs()
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The exit status `oshrun` reports for srun's `status`.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or(status.signal().map(|s| 128 + s))
        .unwrap_or(EXIT_FAILURE)
}

/// How long the PE step's srun may take to end after oshrun passed it a signal.
const STEP_GRACE: Duration = Duration::from_secs(10);

/// Runs the job in the allocation (see the module documentation); returns the exit
/// status, or a status and message when the launch itself failed.
pub fn run_job(
    run: &RunArgs,
    program: &Path,
    alloc: &Allocation,
    signals: &SignalFd,
) -> Result<i32, (i32, String)> {
    let hosts = hostnames()?;
    let m = nodes_needed(run, hosts.len()).map_err(|e| (EXIT_USAGE, e))?;
    let nodelist = hosts[..m].join(",");
    let token = gsas_sys::process::random_u64().map_err(launcher_err)? as u32;
    let prefix = format!("/tmp/gsas-slurm-{}-{token:08x}-", alloc.job_id);
    let mut services = Services::start(m, &nodelist, (&prefix, ".sock"))?;
    let words = srun_args(run, program, Some((m, &nodelist)), site_mpi_plugin());
    let mut pes = Command::new("srun");
    pes.args(&words).env(
        gsas_transport::config::GSAS_SERVICE.name,
        format!("{prefix}%h.sock"),
    );
    log::info!("PEs: srun {words:?}");
    let mut child = match pes.spawn() {
        Ok(c) => c,
        Err(e) => {
            services.stop();
            return Err(launcher_err(format!("starting the PEs with srun: {e}")));
        }
    };
    // A signal to oshrun ends the PE step: srun gets SIGTERM for SIGINT (one SIGINT only
    // makes srun print the tasks' states), and SIGKILL if it is still there after
    // STEP_GRACE.
    let mut signalled: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        while let Ok(Some(sig)) = signals.read() {
            if sig == libc::SIGQUIT {
                // srun takes SIGQUIT as an order to abort the step, so it is not passed on.
                gsas_transport::eprintln_whole!(
                    "oshrun: SIGQUIT: under Slurm, ask the PEs where they wait with \
                     `scancel --signal=QUIT <job id>.<step id of the PEs>` (srun would abort \
                     the step); the job goes on"
                );
                continue;
            }
            let to = if sig == libc::SIGINT {
                libc::SIGTERM
            } else {
                sig
            };
            log::info!("passing signal {sig} to the PE step's srun (as {to})");
            let _ = gsas_sys::process::kill(child.id(), to);
            signalled.get_or_insert_with(Instant::now);
        }
        if signalled.is_some_and(|t| t.elapsed() > STEP_GRACE) {
            log::warn!(
                "the PE step's srun did not end {} s after the signal: SIGKILL",
                STEP_GRACE.as_secs()
            );
            let _ = gsas_sys::process::kill(child.id(), libc::SIGKILL);
            signalled = None;
        }
        while let Ok(line) = services.output.try_recv() {
            log::debug!("node services: {line}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    services.stop();
    status
        .map(exit_code)
        .map_err(|e| launcher_err(format!("waiting for srun: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn allocations_are_recognised_outside_steps_only() {
        assert_eq!(
            Allocation::detect(vars(&[
                ("SLURM_JOB_ID", "42"),
                ("SLURM_JOB_NUM_NODES", "4")
            ])),
            Some(Allocation {
                job_id: "42".into(),
                nodes: Some(4)
            })
        );
        assert_eq!(
            Allocation::detect(vars(&[("SLURM_JOB_ID", "42"), ("SLURM_NNODES", "2")]))
                .and_then(|a| a.nodes),
            Some(2)
        );
        assert_eq!(Allocation::detect(vars(&[])), None);
        assert_eq!(
            Allocation::detect(vars(&[("SLURM_JOB_ID", "42"), ("SLURM_STEP_ID", "0")])),
            None
        );
    }

    #[test]
    fn oshrun_options_become_srun_options() {
        let mut run = match super::super::args::parse(
            [
                "-n",
                "8",
                "--ppn",
                "2",
                "--tag-output",
                "--timeout",
                "90.5",
                "./app",
                "-v",
            ]
            .map(OsString::from),
        ) {
            Ok(super::super::args::Invocation::Run(r)) => r,
            other => panic!("{other:?}"),
        };
        let words = |run: &RunArgs| -> Vec<String> {
            srun_args(run, Path::new("/bin/app"), None, "pmi2")
                .iter()
                .map(|w| w.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            words(&run),
            [
                "--mpi=pmi2",
                "--kill-on-bad-exit=1",
                "-n",
                "8",
                "--ntasks-per-node=2",
                "--label",
                "--time=1:31",
                "/bin/app",
                "-v"
            ]
        );
        run.ppn = None;
        run.tag_output = false;
        run.timeout = Some(Duration::from_secs(3600));
        assert_eq!(words(&run)[4..], ["--time=60:00", "/bin/app", "-v"]);
        let placed: Vec<OsString> = srun_args(&run, Path::new("/a"), Some((2, "n[1-2]")), "pmix");
        assert_eq!(
            placed[4..7],
            ["-N", "2", "--nodelist=n[1-2]"].map(OsString::from)
        );
        assert_eq!(placed[0], "--mpi=pmix");
    }

    #[test]
    fn the_pmi_plugin_is_pmi2_unless_the_site_has_only_pmix() {
        // Slurm 22.05 (Debian 12) with both plugins; a pmix-only site; Slurm 20.11's form.
        let both = "MPI plugin types are...\n\tcray_shasta\n\tnone\n\tpmi2\n\tpmix\n\
                    specific pmix plugin versions available: pmix_v4\n";
        let pmix_only = "MPI plugin types are...\n\tnone\n\tpmix\n\
                         specific pmix plugin versions available: pmix_v3,pmix_v4\n";
        let old = "srun: MPI types are...\nsrun: none\nsrun: pmi2\nsrun: openmpi\n";
        assert_eq!(mpi_plugin(Some(both)), "pmi2");
        assert_eq!(mpi_plugin(Some(pmix_only)), "pmix");
        assert_eq!(mpi_plugin(Some(old)), "pmi2");
        assert_eq!(
            mpi_plugin(Some("MPI plugin types are...\n\tnone\n")),
            "pmi2"
        );
        assert_eq!(
            mpi_plugin(None),
            "pmi2",
            "srun --mpi=list failed: the default"
        );
    }

    /// The list is read from both streams; a command that fails gives nothing, and one
    /// that hangs (a controller that does not answer) is killed at the limit.
    #[test]
    fn the_plugin_list_is_read_within_a_limit() {
        let sh = |script: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            c
        };
        let got = list_mpi_plugins(&mut sh("echo pmix; echo pmi2 >&2"), Duration::from_secs(20));
        assert_eq!(got.as_deref(), Some("pmix\npmi2\n"));
        assert_eq!(
            list_mpi_plugins(&mut sh("exit 1"), Duration::from_secs(20)),
            None
        );
        let t0 = Instant::now();
        assert_eq!(
            list_mpi_plugins(&mut sh("exec sleep 30"), Duration::from_millis(300)),
            None
        );
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        assert_eq!(
            list_mpi_plugins(
                &mut Command::new("/nonexistent/srun"),
                Duration::from_secs(1)
            ),
            None
        );
    }

    #[test]
    fn nodes_for_a_job() {
        let mut run = match super::super::args::parse(["-n", "8", "x"].map(OsString::from)) {
            Ok(super::super::args::Invocation::Run(r)) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(nodes_needed(&run, 4), Ok(4));
        assert_eq!(nodes_needed(&run, 16), Ok(8));
        run.ppn = Some(3);
        assert_eq!(nodes_needed(&run, 4), Ok(3));
        let e = nodes_needed(&run, 2).unwrap_err();
        assert!(e.contains("needs 3 nodes, the allocation has 2"), "{e}");
        let a = service_args(
            2,
            "n[1-2]",
            Path::new("/p/gsas-atomicd"),
            ("/tmp/s-", ".sock"),
        );
        let a: Vec<String> = a.iter().map(|w| w.to_string_lossy().into_owned()).collect();
        assert!(
            a.starts_with(&["--overlap".to_owned(), "--mpi=none".to_owned()]),
            "{a:?}"
        );
        assert!(a.contains(&"--nodelist=n[1-2]".to_owned()));
        assert_eq!(a[a.len() - 3..], ["/p/gsas-atomicd", "/tmp/s-", ".sock"]);
    }
}
