//! The launcher: `oshrun` (also installed as `gshrun`), on one machine or across the nodes
//! of a cluster.
//!
//! **What it is.** `oshrun -n N PROGRAM ARGS...` starts a job of N PEs on this machine with
//! nothing started by hand:
//!
//! 1. the command line is checked ([`args`]): a bad `-n`, a missing program or a program
//!    that cannot be executed is reported before anything starts;
//! 2. a job id and a secret job key are drawn from `getrandom(2)`;
//! 3. the node's atomic service is started on a thread of the launcher
//!    ([`gsas_service::Service`], the "embedded default"), with its control socket in the
//!    user's runtime directory (`$XDG_RUNTIME_DIR/gsas/` or `/tmp/gsas-<uid>/`) and its UDP
//!    socket on `127.0.0.1` (no other node exists);
//! 4. the PEs are started by [`job::run_job`] with `GSAS_SERVICE`, `GSAS_JOB_ID`,
//!    `GSAS_JOB_KEY`, `GSAS_NODE=0` and a PMI-1 socketpair (`PMI_FD`, `PMI_RANK`,
//!    `PMI_SIZE`) each, and `PR_SET_PDEATHSIG(SIGKILL)`;
//! 5. the launcher serves PMI, forwards output and waits; the first PE that fails ends the
//!    job (see [`job`]); SIGINT, SIGTERM or SIGHUP to the launcher end it too; a PE that
//!    exits without `shmem_finalize` while the others wait for it in a barrier of all PEs
//!    ends it, named with what the others wait in ([`hangs`]); SIGQUIT (and `--timeout`, before it ends the job)
//!    makes every PE print the call it is in and what it waits for;
//! 6. the service is stopped (its socket removed; the memory of the job is gone with the
//!    last PE) and the launcher exits with the job's status.
//!
//! `oshrun --config FILE -n N [--ppn K] [--fork] PROGRAM ARGS...` runs a **multi-node**
//! job on the nodes of a `board-config` cluster file whose `gsas-atomicd` daemons are
//! running ([`multinode`]): ranks are placed in contiguous blocks per node, the PEs of
//! nodes on this machine are started here with their node's daemon socket, and those of
//! other machines by their daemons through authenticated remote FORK ([`crate::fork`]);
//! [`job::run_job`] treats both alike, and the first failure anywhere ends the job
//! everywhere.
//!
//! Inside a **Slurm allocation** (`salloc`, `sbatch`: `SLURM_JOB_ID` set, no job step)
//! and without `--config` or `--no-srun`, `oshrun` starts a `gsas-atomicd` per allocated
//! node as one srun step and the PEs as another (`srun --mpi=pmi2 --kill-on-bad-exit=1
//! -n N ...`), and stops the services with `scancel --signal=TERM` at the end
//! ([`slurm`]).
//!
//! **What it is not.** A resource manager: it does not pick nodes, bind cores or queue
//! jobs, and it starts no daemon.
//!
//! **Thread safety.** [`main`] is the process entry point and blocks termination signals
//! in the calling thread before any thread starts; the library functions are reentrant.
//!
//! `src/bin/oshrun.rs` calls [`main`]; a program can also run the launcher in-process:
//!
//! ```no_run
//! let status = gsas_launch::oshrun::run_cli("oshrun", ["-n", "2", "./ring"].map(Into::into));
//! std::process::exit(status);
//! ```

pub mod args;
pub mod hangs;
pub mod job;
pub mod merge;
pub mod multinode;
pub mod slurm;

use std::ffi::{OsStr, OsString};
use std::time::Duration;

use gsas_service::{Service, ServiceConfig};
use gsas_transport::config::{self, RuntimeConfig};

use args::{Invocation, RunArgs};
use job::{JobSpec, PeLaunch};

/// Exit status for command-line and configuration errors.
pub const EXIT_USAGE: i32 = 2;
/// Exit status when the launcher itself fails (service, PMI, spawning).
pub const EXIT_FAILURE: i32 = 1;

/// The name the launcher calls itself: `gshrun` when started under that name (the
/// installation's `gshrun` is a link to `oshrun`), else `oshrun` (also as `shmemrun`).
pub fn invoked_name() -> &'static str {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    match std::path::Path::new(&argv0).file_name() {
        Some(n) if n == "gshrun" => "gshrun",
        _ => "oshrun",
    }
}

/// Runs the launcher with the process's arguments and exits with the job's status.
pub fn main(name: &str) -> ! {
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    // `-x VAR=VALUE` goes into this process's environment, which every path gives the
    // PEs (inherited here, forwarded to other nodes, through srun) and which the
    // launcher's own settings read too (a -x GSAS_UDP_MTU reaches the service as well).
    if let Ok(Invocation::Run(run)) = args::parse(argv.clone()) {
        for (k, v) in &run.exports {
            // SAFETY: the process's first thread, before any other thread exists.
            unsafe { std::env::set_var(k, v) };
        }
    }
    let code = run_cli(name, argv);
    std::process::exit(code)
}

/// Runs the launcher for `args` (without the program name) and returns the exit status.
/// Messages go to stderr prefixed with `name`.
pub fn run_cli(name: &str, args: impl IntoIterator<Item = OsString>) -> i32 {
    let run = match args::parse(args) {
        Ok(Invocation::Run(r)) => r,
        Ok(Invocation::Help) => {
            print!("{}", args::help(name));
            return 0;
        }
        Ok(Invocation::Version) => {
            println!("{name} (gsas) {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Err(e) => {
            gsas_transport::eprintln_whole!("{name}: {e}");
            return EXIT_USAGE;
        }
    };
    // `main` applied the exports; a program that calls this function applies them itself.
    if let Some((k, _)) = run
        .exports
        .iter()
        .find(|(k, v)| std::env::var_os(k).as_ref() != Some(v))
    {
        gsas_transport::eprintln_whole!(
            "{name}: -x {}: set it in the environment before calling run_cli",
            k.to_string_lossy()
        );
        return EXIT_USAGE;
    }
    for note in &run.notes {
        gsas_transport::eprintln_whole!("{name}: note: {note}");
    }
    // The environment the PEs inherit, checked before anything else (and before the
    // logger reads GSAS_LOG): a bad value is one line and exit 2, not a line per PE.
    if let Err(e) = check_pe_environment() {
        gsas_transport::eprintln_whole!("{name}: {e}");
        return EXIT_USAGE;
    }
    gsas_transport::log::init(name, run.log_level);
    match launch(name, &run) {
        Ok(code) => code,
        Err((code, msg)) => {
            gsas_transport::eprintln_whole!("{name}: {msg}");
            code
        }
    }
}

/// Checks the `GSAS_*` and `SHMEM_*` variables of this process, which its PEs inherit:
/// the first invalid one, named with its value and why.
pub fn check_pe_environment() -> Result<(), String> {
    RuntimeConfig::from_env().map_err(|e| e.to_string())?;
    board_config::shmem_env::Config::from_env().map_err(|e| e.to_string())?;
    Ok(())
}

/// The environment one PE of a single-node job gets besides PMI.
pub fn pe_env(
    service_socket: &OsStr,
    job_id: u64,
    job_key: u64,
    node: u16,
) -> Vec<(OsString, OsString)> {
    vec![
        (config::GSAS_SERVICE.name.into(), service_socket.to_owned()),
        (
            config::GSAS_JOB_ID.name.into(),
            config::format_hex64(job_id).into(),
        ),
        (
            config::GSAS_JOB_KEY.name.into(),
            config::format_hex64(job_key).into(),
        ),
        (config::GSAS_NODE.name.into(), node.to_string().into()),
    ]
}

/// A socket file of an embedded service younger than this is never taken for stale (it
/// may be between bind and listen).
const STALE_AFTER: Duration = Duration::from_secs(10);

/// Removes the control sockets that earlier launchers named `name` left in `dir` when they
/// were killed (SIGKILL runs no cleanup): files `<name>-<16 hex digits>.sock` of this user,
/// older than `min_age`, on which nobody listens any more. Each removal is logged.
fn sweep_stale_sockets(dir: &std::path::Path, name: &str, min_age: Duration) -> usize {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(id) = file
            .to_str()
            .and_then(|f| f.strip_prefix(name))
            .and_then(|f| f.strip_prefix('-'))
            .and_then(|f| f.strip_suffix(".sock"))
        else {
            continue;
        };
        if id.len() != 16 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let old_enough = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age >= min_age);
        if !meta.file_type().is_socket() || meta.uid() != me || !old_enough {
            continue;
        }
        let refused = matches!(
            std::os::unix::net::UnixStream::connect(&path),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        );
        if refused && std::fs::remove_file(&path).is_ok() {
            log::info!(
                "removed {}: nobody listens on it (left behind by a killed {name})",
                path.display()
            );
            removed += 1;
        }
    }
    removed
}

fn launch(name: &str, run: &RunArgs) -> Result<i32, (i32, String)> {
    let env = RuntimeConfig::from_env().map_err(|e| (EXIT_USAGE, e.to_string()))?;
    let path = std::env::var_os("PATH");
    let program =
        args::resolve_program(&run.program, path.as_deref()).map_err(|e| (EXIT_USAGE, e.0))?;
    let look = args::look_at_program(&program);
    if let Some(lib) = look.foreign {
        gsas_transport::eprintln_whole!(
            "{name}: warning: {} is linked with {lib}, another implementation's OpenSHMEM \
             library: under {name} each of its PEs runs alone as PE 0 of 1. Build it with \
             gsas's oshcc, or start it with that implementation's launcher.",
            program.display()
        );
    }
    let allocation = slurm::Allocation::detect(|k| std::env::var_os(k))
        .filter(|_| run.config.is_none() && !run.no_srun);
    if run.config.is_none() && run.ppn.is_some() && allocation.is_none() {
        return Err((
            EXIT_USAGE,
            "--ppn needs --config FILE or a Slurm allocation (otherwise every PE runs on \
             this machine)"
                .into(),
        ));
    }
    // Before any thread exists, so that every thread inherits the mask. SIGQUIT asks the
    // PEs where they wait (the job goes on).
    let signals = gsas_sys::event::SignalFd::block(&[
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
    ])
    .map_err(|e| (EXIT_FAILURE, format!("blocking termination signals: {e}")))?;
    if let Some(alloc) = allocation {
        log::info!(
            "{name}: in Slurm allocation {} ({} nodes): node services and PEs through srun",
            alloc.job_id,
            alloc.nodes.map_or("?".into(), |n| n.to_string())
        );
        return slurm::run_job(run, &program, &alloc, &signals);
    }
    if let Some(file) = &run.config {
        let r = multinode::launch_cluster(name, run, file, &program, &env, signals);
        if let Ok((_, report)) = &r {
            note_no_pe_started(name, &program, look, run.n, report);
        }
        return r.map(|(code, _)| code);
    }
    let random = |what: &str| {
        gsas_sys::process::random_nonzero_u64()
            .map_err(|e| (EXIT_FAILURE, format!("drawing the {what}: {e}")))
    };
    let job_id = random("job id")?;
    let job_key = random("job key")?;

    let dir = gsas_sys::socket::runtime_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref())
        .map_err(|e| (EXIT_FAILURE, format!("socket directory: {e}")))?;
    sweep_stale_sockets(&dir, name, STALE_AFTER);
    let socket = dir.join(format!("{name}-{}.sock", config::format_hex64(job_id)));
    // The job's service holds every PE's control connection and segment descriptors: the
    // soft limit of 1,024 that shells give ran out at about 250 PEs (as gsas-atomicd does,
    // raised to the hard limit; the PEs inherit it).
    match gsas_sys::process::raise_nofile_limit(None) {
        Ok((before, after)) if after > before => {
            log::debug!("descriptor limit (RLIMIT_NOFILE) raised from {before} to {after}")
        }
        Ok(_) => {}
        Err(e) => log::warn!("raising the descriptor limit (RLIMIT_NOFILE): {e}"),
    }
    let mut scfg = ServiceConfig::new(0, "127.0.0.1:0".parse().expect("literal address"), socket);
    scfg.name = format!("{name} service");
    // Every PE that dies is reported by the launcher itself.
    scfg.quiet_reclaims = true;
    scfg.spin = Duration::from_micros(env.service_spin_us);
    scfg.sched_slice = Duration::from_micros(env.sched_slice_us);
    scfg.udp_mtu = env.udp_mtu;
    scfg.memory_limit = env.memory_limit;
    if let Some(ms) = env.deadline_ms {
        scfg.deadline = Duration::from_millis(ms);
    }
    let service = Service::bind(scfg)
        .and_then(Service::spawn)
        .map_err(|e| (EXIT_FAILURE, format!("starting the atomic service: {e}")))?;
    log::info!(
        "job {job_id:016x}: {} PEs of {}, service at {}",
        run.n,
        program.display(),
        service.socket_path().display()
    );

    let socket_os = service.socket_path().as_os_str().to_owned();
    let pes = (0..run.n)
        .map(|rank| PeLaunch {
            rank,
            program: program.clone().into_os_string(),
            args: run.args.clone(),
            env: pe_env(&socket_os, job_id, job_key, 0),
        })
        .collect();
    let mut spec = JobSpec::single_node(pes);
    spec.launcher = name.to_owned();
    spec.tag_output = run.tag_output;
    spec.merge_errors = run.merge_errors;
    spec.time_limit = run.timeout;
    spec.signals = Some(signals);
    let result = job::run_job(spec);
    if let Err(e) = service.stop() {
        log::warn!("stopping the atomic service: {e}");
    }
    match result {
        Ok(report) => {
            note_no_pe_started(name, &program, look, run.n, &report);
            Ok(report.exit_code)
        }
        Err(e) => Err((EXIT_FAILURE, e.to_string())),
    }
}

/// After a job of `n` processes of `program` in which none started the library through
/// this launcher (none sent PMI `init`): if the program names `shmem_init` and is not
/// linked with gsas's library, nor with one [`args::look_at_program`] recognised (that was
/// said before the start), it is most likely another implementation's OpenSHMEM program,
/// and each process ran alone as PE 0 of 1. Says so, once. A plain program (`hostname`)
/// says nothing: running one is fine.
fn note_no_pe_started(
    name: &str,
    program: &std::path::Path,
    look: args::ProgramLook,
    n: u32,
    report: &job::JobReport,
) {
    if n < 2 || report.pmi_inits > 0 || !look.openshmem || look.gsas || look.foreign.is_some() {
        return;
    }
    gsas_transport::eprintln_whole!(
        "{name}: warning: none of the {n} processes of {} started OpenSHMEM through {name} \
         (none contacted its PMI server), yet the program names shmem_init: if it is \
         another implementation's OpenSHMEM program, each process ran alone as PE 0 of 1. \
         Build it with gsas's oshcc, or start it with that implementation's launcher.",
        program.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_sockets_of_killed_launchers_are_removed_and_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("gsas-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let stale = dir.join("oshrun-00000000deadbeef.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let live_path = dir.join("oshrun-0123456789abcdef.sock");
        let _live = std::os::unix::net::UnixListener::bind(&live_path).unwrap();
        let other = dir.join("gshrun-00000000deadbeef.sock");
        drop(std::os::unix::net::UnixListener::bind(&other).unwrap());
        let not_ours = dir.join("oshrun-notanid.sock");
        drop(std::os::unix::net::UnixListener::bind(&not_ours).unwrap());
        // Too young: kept.
        assert_eq!(
            sweep_stale_sockets(&dir, "oshrun", Duration::from_secs(3600)),
            0
        );
        assert!(stale.exists());
        assert_eq!(sweep_stale_sockets(&dir, "oshrun", Duration::ZERO), 1);
        assert!(!stale.exists(), "the socket nobody listens on is gone");
        assert!(live_path.exists() && other.exists() && not_ours.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
