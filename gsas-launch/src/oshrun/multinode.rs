//! Multi-node launch: `oshrun --config FILE -n N [--ppn K] [--fork] PROGRAM ARGS...`.
//!
//! What it is: [`launch_cluster`] turns a cluster file and a command line into a job:
//!
//! 1. the file is loaded (errors name file, line and key) and the N ranks are placed in
//!    contiguous blocks, in node order (`board_config::place`; `--ppn K` fills nodes with
//!    K ranks each, otherwise ranks are spread evenly);
//! 2. each node with ranks is reached at its `host`:`udp_port`; it is **local** when that
//!    address belongs to this machine (loopback or an interface address) and `--fork` is
//!    not given, **remote** otherwise;
//! 3. a local node's daemon must answer on its `control_socket` (else an error naming the
//!    node and the socket); its PEs are started here like a one-machine job's, with that
//!    socket as `GSAS_SERVICE`, the node's id as `GSAS_NODE`, the cluster file as
//!    `GSAS_CONFIG` and a PMI socketpair;
//! 4. remote nodes need `defaults.fork_allowed` and the secret file
//!    `defaults.fork_secret_file` (checked like the daemon's, owned by the launcher's
//!    user); their daemons get one signed FORK each ([`crate::fork`]) and start the PEs
//!    with PMI over TCP to this launcher;
//! 5. every PE also gets `GSAS_UDP_MTU` (the file's `defaults.udp_mtu`) and
//!    `GSAS_DEADLINE_MS` (`defaults.service_timeout_ms`) unless the launcher's
//!    environment sets them, so that the whole job agrees;
//! 6. [`super::job::run_job`] runs the job: the first failure anywhere ends it everywhere.
//!
//! Remote PEs get the launcher's environment except host-specific variables
//! ([`forwarded_env`]), its working directory, and the program as given (a path with `/`
//! made absolute; a plain name is searched on the forwarded `PATH` on the node).
//!
//! What it is not: a daemon manager. Nothing is started on the nodes except the PEs; a
//! node whose daemon is not running fails the launch with its name.
//!
//! Thread-safety: runs in the launcher's main thread.

use std::ffi::OsString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use board_config::Cluster;

use crate::fork::launcher::{RemoteConfig, RemoteJob, RemoteNode, is_local_ip};
use crate::fork::secret::Secret;
use gsas_control::ControlClient;
use gsas_transport::config::{self, RuntimeConfig};

use super::args::RunArgs;
use super::job::{self, JobSpec, PeLaunch};
use super::{EXIT_FAILURE, EXIT_USAGE, pe_env};
use gsas_sys::event::SignalFd;

/// How long a local node's daemon may take to answer the launcher's ping.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Variables of the launcher's environment that remote PEs do not get: PMI and job
/// variables (set for each PE), and what describes this host or session only.
pub const NOT_FORWARDED: &[&str] = &[
    "GSAS_SERVICE",
    "GSAS_NODE",
    "GSAS_JOB_ID",
    "GSAS_JOB_KEY",
    "GSAS_CONFIG",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "HOSTNAME",
    "XDG_RUNTIME_DIR",
    "DISPLAY",
    "SSH_AUTH_SOCK",
    "SSH_CONNECTION",
    "SSH_CLIENT",
    "SSH_TTY",
];

/// The launcher environment remote PEs get: everything except `PMI_*` and
/// [`NOT_FORWARDED`].
pub fn forwarded_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    vars.into_iter()
        .filter(|(k, _)| {
            let b = k.as_bytes();
            !b.starts_with(b"PMI_") && !NOT_FORWARDED.iter().any(|n| n.as_bytes() == b)
        })
        .collect()
}

/// Resolves a node's service address (IPv4 preferred), naming the node on failure.
fn node_addr(n: &board_config::Node) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = (n.host.as_str(), n.udp_port)
        .to_socket_addrs()
        .map_err(|e| {
            format!(
                "node {} ({}): host {:?} does not resolve: {e}",
                n.id, n.name, n.host
            )
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| {
            format!(
                "node {} ({}): host {:?} has no address",
                n.id, n.name, n.host
            )
        })
}

/// A node of the job with its ranks.
struct Block<'c> {
    node: &'c board_config::Node,
    ranks: Vec<u32>,
    addr: SocketAddr,
    label: String,
    local: bool,
}

/// Runs a multi-node job; see the [module docs](self). Returns the exit status and the
/// job's report, or the status and message of a launch error.
pub fn launch_cluster(
    name: &str,
    run: &RunArgs,
    file: &Path,
    program: &Path,
    env: &RuntimeConfig,
    signals: SignalFd,
) -> Result<(i32, job::JobReport), (i32, String)> {
    let usage = |m: String| (EXIT_USAGE, m);
    let cluster = Cluster::load(file).map_err(|e| usage(e.to_string()))?;
    let file = std::path::absolute(file).unwrap_or_else(|_| file.to_owned());
    let placement = cluster.place(run.n, run.ppn).map_err(|e| {
        usage(format!(
            "{}: placing {} PEs on {} node(s): {e}",
            file.display(),
            run.n,
            cluster.nodes().len()
        ))
    })?;
    let blocks = blocks_of(&cluster, &placement, &file, run)?;

    check_local_daemons(&blocks, &file)?;
    let remote_blocks: Vec<&Block<'_>> = blocks.iter().filter(|b| !b.local).collect();
    let secret = fork_secret(&cluster, &remote_blocks, &file, run)?;

    let random = |what: &str| {
        gsas_sys::process::random_nonzero_u64()
            .map_err(|e| (EXIT_FAILURE, format!("drawing the {what}: {e}")))
    };
    let job_id = random("job id")?;
    let job_key = random("job key")?;
    let defaults = cluster.defaults();
    let deadline_ms = env
        .deadline_ms
        .unwrap_or(u64::from(defaults.service_timeout_ms));
    let mtu = if std::env::var_os(config::GSAS_UDP_MTU.name).is_some() {
        env.udp_mtu
    } else {
        defaults.udp_mtu as usize
    };
    // What every PE gets so that the whole job agrees.
    let mut common: Vec<(OsString, OsString)> = Vec::new();
    for (var, value) in [
        (config::GSAS_UDP_MTU.name, mtu.to_string()),
        (config::GSAS_DEADLINE_MS.name, deadline_ms.to_string()),
    ] {
        if std::env::var_os(var).is_none() {
            common.push((var.into(), value.into()));
        }
    }
    log::info!(
        "job {job_id:016x}: {} PEs of {} on {} node(s) of {} ({} started through FORK)",
        run.n,
        program.display(),
        blocks.len(),
        file.display(),
        remote_blocks.len()
    );

    let mut pes = Vec::new();
    for b in blocks.iter().filter(|b| b.local) {
        for &rank in &b.ranks {
            let mut env_vars = pe_env(b.node.control_socket.as_ref(), job_id, job_key, b.node.id);
            if std::env::var_os(config::GSAS_CONFIG.name).is_none() {
                env_vars.push((
                    config::GSAS_CONFIG.name.into(),
                    file.clone().into_os_string(),
                ));
            }
            env_vars.extend(common.iter().cloned());
            pes.push(PeLaunch {
                rank,
                program: program.as_os_str().to_owned(),
                args: run.args.clone(),
                env: env_vars,
            });
        }
    }
    let mut spec = JobSpec::single_node(pes);
    spec.launcher = name.to_owned();
    spec.size = run.n;
    spec.node_of_rank = (0..run.n)
        .map(|r| u32::from(placement.node_of(r).unwrap_or(0)))
        .collect();
    spec.tag_output = run.tag_output;
    spec.merge_errors = run.merge_errors;
    spec.time_limit = run.timeout;
    spec.signals = Some(signals);
    if let Some(secret) = secret {
        let rc = RemoteConfig {
            job_id,
            job_key,
            size: run.n,
            secret,
            argv: remote_argv(run, program),
            env: {
                let mut env_vars = forwarded_env(std::env::vars_os());
                env_vars.extend(common.iter().cloned());
                env_vars
            },
            cwd: std::env::current_dir()
                .map_err(|e| (EXIT_FAILURE, format!("the working directory: {e}")))?,
            grace: spec.grace,
            deadline: Duration::from_millis(deadline_ms),
            mtu,
            tag_output: run.tag_output,
            nodes: remote_blocks
                .iter()
                .map(|b| RemoteNode {
                    id: b.node.id,
                    label: b.label.clone(),
                    daemon: b.addr,
                    ranks: b.ranks.clone(),
                })
                .collect(),
        };
        spec.remote = Some(RemoteJob::new(rc).map_err(|e| (EXIT_FAILURE, e))?);
    }
    match job::run_job(spec) {
        Ok(report) => Ok((report.exit_code, report)),
        Err(e) => Err((EXIT_FAILURE, e.to_string())),
    }
}

/// The job's nodes with their ranks, in placement order; refuses a job that mixes verbs
/// nodes with others.
fn blocks_of<'c>(
    cluster: &'c Cluster,
    placement: &board_config::Placement,
    file: &Path,
    run: &RunArgs,
) -> Result<Vec<Block<'c>>, (i32, String)> {
    let usage = |m: String| (EXIT_USAGE, m);
    let mut blocks = Vec::new();
    let mut verbs_node: Option<&board_config::Node> = None;
    let mut other_node: Option<&board_config::Node> = None;
    for (id, ranks) in placement.blocks() {
        if ranks.is_empty() {
            continue;
        }
        let Some(node) = cluster.node(id) else {
            continue;
        };
        let seen = if node.transport == board_config::Transport::Verbs {
            &mut verbs_node
        } else {
            &mut other_node
        };
        seen.get_or_insert(node);
        if let (Some(v), Some(o)) = (verbs_node, other_node) {
            return Err(usage(format!(
                "{}: the job spans node {} ({}, transport verbs) and node {} ({}, transport {}): a job's nodes must all be verbs nodes or none",
                file.display(),
                v.id,
                v.name,
                o.id,
                o.name,
                o.transport
            )));
        }
        let addr = node_addr(node).map_err(usage)?;
        blocks.push(Block {
            node,
            ranks: ranks.collect(),
            addr,
            label: format!("node {id} ({}, {addr})", node.name),
            local: !run.fork && is_local_ip(addr.ip()),
        });
    }
    Ok(blocks)
}

/// The daemons of the job's nodes on this machine must answer.
fn check_local_daemons(blocks: &[Block<'_>], file: &Path) -> Result<(), (i32, String)> {
    for b in blocks.iter().filter(|b| b.local) {
        let socket = Path::new(&b.node.control_socket);
        ControlClient::connect(socket, PING_TIMEOUT)
            .and_then(|mut c| c.ping())
            .map_err(|e| {
                (
                    EXIT_FAILURE,
                    format!(
                        "{}: no gsas-atomicd answers at {} ({e}); start it with `gsas-atomicd --config {} --node {}`",
                        b.label,
                        socket.display(),
                        file.display(),
                        b.node.id
                    ),
                )
            })?;
    }
    Ok(())
}

/// The cluster secret when nodes are started through remote FORK: FORK must be allowed,
/// and the secret readable and private.
fn fork_secret(
    cluster: &Cluster,
    remote_blocks: &[&Block<'_>],
    file: &Path,
    run: &RunArgs,
) -> Result<Option<Secret>, (i32, String)> {
    let usage = |m: String| (EXIT_USAGE, m);
    if remote_blocks.is_empty() {
        return Ok(None);
    }
    let d = cluster.defaults();
    let first = &remote_blocks[0].label;
    let path = match (&d.fork_secret_file, d.fork_allowed) {
        (Some(p), true) => PathBuf::from(p),
        _ => {
            let why = if run.fork {
                format!("{first}: --fork starts its PEs")
            } else {
                format!("{first} is not on this machine: its PEs must be started")
            };
            return Err(usage(format!(
                "{why} by its gsas-atomicd through remote FORK, which {} does not allow (set defaults.fork_allowed = true and defaults.fork_secret_file)",
                file.display()
            )));
        }
    };
    Secret::load(&path, gsas_sys::process::uid())
        .map(Some)
        .map_err(|e| usage(e.to_string()))
}

/// The program and arguments the daemons start: the program as given when it is a bare
/// name (each node's `PATH` finds it), else made absolute.
fn remote_argv(run: &RunArgs, program: &Path) -> Vec<OsString> {
    let remote_program = if run.program.as_bytes().contains(&b'/') {
        std::path::absolute(program)
            .unwrap_or_else(|_| program.to_owned())
            .into_os_string()
    } else {
        run.program.clone()
    };
    let mut argv = vec![remote_program];
    argv.extend(run.args.iter().cloned());
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_specific_variables_stay_here() {
        let vars = [
            ("PATH", "/usr/bin"),
            ("GSAS_LOG", "debug"),
            ("PMI_FD", "3"),
            ("PMI_RANK", "0"),
            ("GSAS_SERVICE", "/tmp/x"),
            ("GSAS_CONFIG", "/etc/x"),
            ("PWD", "/home"),
            ("SHMEM_SYMMETRIC_SIZE", "1m"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let kept: Vec<String> = forwarded_env(vars)
            .into_iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(kept, ["PATH", "GSAS_LOG", "SHMEM_SYMMETRIC_SIZE"]);
    }
}
