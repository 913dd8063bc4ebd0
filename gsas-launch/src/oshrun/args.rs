//! The command line of `oshrun` / `gshrun`: parsing, checks and the help text.
//!
//! What it is: [`parse`] turns the arguments into a [`Invocation`] and refuses bad ones
//! with a [`UsageError`] before anything is started; [`resolve_program`] finds the
//! program on `PATH` and checks that it is executable. What it is not: placement or
//! spawning (see [`super::job`]). Thread-safety: pure functions.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use log::LevelFilter;

use gsas_node::boot::MAX_PES;

/// A parsed `oshrun` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// Run a job.
    Run(RunArgs),
    /// `--help`: print the help text.
    Help,
    /// `--version`.
    Version,
}

/// What to run and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunArgs {
    /// Number of PEs (`-n`/`-np`).
    pub n: u32,
    /// The program (as given).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Prefix every output line with the PE's rank (`--tag-output`).
    pub tag_output: bool,
    /// Print the same diagnostic of many PEs once with the PE list; `--no-merge-errors`
    /// turns it off.
    pub merge_errors: bool,
    /// End the job after this long (`--timeout SECONDS`).
    pub timeout: Option<Duration>,
    /// Log level of the launcher and its service (`--log-level`).
    pub log_level: Option<LevelFilter>,
    /// Cluster file of a multi-node job (`--config`).
    pub config: Option<PathBuf>,
    /// PEs per node (`--ppn`); `None`: spread evenly over the nodes.
    pub ppn: Option<u32>,
    /// Start every node's PEs through its daemon's FORK, also nodes of this machine
    /// (`--fork`).
    pub fork: bool,
    /// Inside a Slurm allocation, run on this machine instead of through `srun`
    /// (`--no-srun`).
    pub no_srun: bool,
    /// Environment variables for the PEs (Open MPI's `-x VAR=VALUE`, or `-x VAR` with the
    /// launcher's value), in order.
    pub exports: Vec<(OsString, OsString)>,
    /// What the command line asked that gsas does not do (Open MPI options accepted for
    /// existing scripts): one line each, printed before the job starts.
    pub notes: Vec<String>,
}

/// A command line that cannot be run; the message says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The help text; `name` is `oshrun` or `gshrun`.
pub fn help(name: &str) -> String {
    format!(
        "\
{name}: run an OpenSHMEM / gsas job on this machine or across the nodes of a cluster

Usage: {name} -n N [--ppn K] [options] [--] PROGRAM [ARGS...]
       {name} --config FILE -n N [--ppn K] [--fork] [options] [--] PROGRAM [ARGS...]

Starts N processes (PEs) of PROGRAM and serves their PMI-1 bootstrap. On one machine
(without --config) it hosts the node's atomic service itself: nothing has to be
started by hand. With --config, the PEs are placed in contiguous blocks on the nodes
of the cluster file, whose gsas-atomicd daemons must be running: the PEs of nodes on
this machine are started here, those of other machines by their daemons through
authenticated remote FORK (defaults.fork_allowed, defaults.fork_secret_file).
Inside a Slurm allocation (salloc, sbatch) and without --config, a gsas-atomicd runs
on each allocated node as one srun step and the PEs as another (srun --mpi=pmi2
--kill-on-bad-exit=1); see docs/slurm.md.

The first PE that exits with a non-zero status or is killed by a signal ends the job
on every node: the others get SIGTERM, then SIGKILL after a short grace, and {name}
exits with that PE's status (128 + signal number for a signal).

When a job hangs: a PE that exits without shmem_finalize while the others wait for it
in shmem_barrier_all (or shmem_sync_all) ends the job (exit status 1), named with what
the others wait in (\"PE 2 (pid ...) exited with status 0 without calling
shmem_finalize; PEs 0, 1, 3 are in shmem_barrier_all\"). SIGQUIT to {name} (Ctrl-\\) makes every PE print one line, the
call it is in and what it waits for, and the job goes on; --timeout does the same
before it ends the job. A PE whose node's atomic service dies ends the job with
\"the local atomic service (control socket ...) closed the connection\".

Options:
  -n N, -np N, --np N   number of PEs (1..={max})
  --config FILE         cluster file (board-config TOML) of a multi-node job
  --ppn K               with --config or in a Slurm allocation: K PEs per node,
                        filling nodes in order (default: spread evenly)
  --fork                with --config: start every node's PEs through its daemon's
                        FORK, also the nodes of this machine
  --no-srun             in a Slurm allocation, run on this machine, not through srun
  --tag-output          prefix every line a PE prints with its rank, e.g. \"[3] \"
  --no-merge-errors     print each PE's diagnostics as they come (default: the same
                        line of many PEs once, \"gsas-shmem: PEs 0-63: ...\"; not
                        under srun, which prints the PEs' output itself)
  --timeout SECONDS     end the job (exit status 124) if it runs longer, after every
                        PE said where it waits
  --log-level LEVEL     off, error, warn, info, debug or trace (default: GSAS_LOG, or warn)
  -h, --help            print this help
  -V, --version         print the version
  --                    end of options; PROGRAM follows

Open MPI's options, for existing scripts (shmemrun is this launcher too):
  -x VAR[=VALUE]        give the PEs VAR (with VALUE, or this launcher's value)
  --map-by ppr:K:node   the same as --ppn K; --map-by slot or core: contiguous blocks,
                        which is what gsas does anyway; other policies are refused
  --npernode K, -N K    the same as --ppn K
  --oversubscribe       accepted: gsas runs more PEs than cores without being asked
  --bind-to none|core|socket|hwthread
                        accepted; gsas does not bind PEs (none), says so for the others
  --mca NAME VALUE      accepted and ignored (Open MPI's component parameters), with a note
  --hostfile FILE       refused: gsas places PEs on the nodes of a cluster file
                        (--config FILE) or of a Slurm allocation

Environment given to every PE: GSAS_SERVICE, GSAS_JOB_ID, GSAS_JOB_KEY, GSAS_NODE and
PMI_FD/PMI_RANK/PMI_SIZE (PMI_PORT/PMI_ID on other machines). Other GSAS_* variables
(GSAS_DIRECT, GSAS_DEADLINE_MS, ...) are passed through; PEs on other machines get
this environment except host-specific variables; see docs/runtime.md.

Examples:
  {name} -n 4 ./ring                      four PEs of ./ring
  {name} -np 2 --tag-output -- ./app -v   two PEs, output lines tagged with the rank
  GSAS_DIRECT=0 {name} -n 8 ./app         same-node access through the atomic service
  {name} --config cluster.toml -n 8 --ppn 2 ./app   2 PEs on each of 4 nodes
  salloc -N 4 {name} -n 8 ./app           8 PEs on the 4 allocated nodes (srun)
",
        max = MAX_PES
    )
}

fn parse_count(flag: &str, value: Option<&OsStr>) -> Result<u32, UsageError> {
    let Some(value) = value else {
        return Err(UsageError(format!("{flag} needs a number of PEs")));
    };
    let text = value.to_string_lossy();
    let n: u64 = text
        .trim()
        .parse()
        .map_err(|_| UsageError(format!("{flag} {text:?}: not a number of PEs")))?;
    if n == 0 {
        return Err(UsageError(format!("{flag} 0: a job needs at least one PE")));
    }
    if n > u64::from(MAX_PES) {
        return Err(UsageError(format!(
            "{flag} {n}: at most {MAX_PES} PEs (PE numbers are 16 bits)"
        )));
    }
    Ok(n as u32)
}

/// Parses the arguments after the program name.
///
/// Options end at the first argument that is not an option (the program) or at `--`;
/// everything after the program belongs to it.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, UsageError> {
    let mut it = args.into_iter();
    let mut n = None;
    let mut tag_output = false;
    let mut merge_errors = true;
    let mut timeout = None;
    let mut log_level = None;
    let mut config = None;
    let mut ppn = None;
    let mut fork = false;
    let mut no_srun = false;
    let mut exports = Vec::new();
    let mut notes = Vec::new();
    let mut program = None;
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy().into_owned();
        let (flag, inline) = match s.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f.to_owned(), Some(OsString::from(v))),
            _ => (s.clone(), None),
        };
        let value = |it: &mut dyn Iterator<Item = OsString>| inline.clone().or_else(|| it.next());
        match flag.as_str() {
            "-h" | "--help" => return Ok(Invocation::Help),
            "-V" | "--version" => return Ok(Invocation::Version),
            "-n" | "-np" | "--np" | "--n" => {
                n = Some(parse_count(&flag, value(&mut it).as_deref())?);
            }
            "--tag-output" => tag_output = true,
            "--no-merge-errors" => merge_errors = false,
            "--fork" => fork = true,
            "--no-srun" => no_srun = true,
            "--config" => {
                let v = value(&mut it)
                    .ok_or_else(|| UsageError("--config needs a cluster file".into()))?;
                if v.is_empty() {
                    return Err(UsageError("--config needs a cluster file".into()));
                }
                config = Some(PathBuf::from(v));
            }
            "--ppn" => {
                let v = value(&mut it)
                    .ok_or_else(|| UsageError("--ppn needs a number of PEs per node".into()))?;
                let text = v.to_string_lossy();
                let k: u32 = text.trim().parse().ok().filter(|&k| k > 0).ok_or_else(|| {
                    UsageError(format!("--ppn {text:?}: not a positive number of PEs"))
                })?;
                ppn = Some(k);
            }
            "--timeout" => {
                let v = value(&mut it)
                    .ok_or_else(|| UsageError("--timeout needs a number of seconds".into()))?;
                let text = v.to_string_lossy();
                let secs: f64 = text
                    .trim()
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s < 1e9)
                    .ok_or_else(|| {
                        UsageError(format!(
                            "--timeout {text:?}: not a positive number of seconds"
                        ))
                    })?;
                timeout = Some(Duration::from_secs_f64(secs));
            }
            "--log-level" => {
                let v =
                    value(&mut it).ok_or_else(|| UsageError("--log-level needs a level".into()))?;
                let text = v.to_string_lossy();
                log_level = Some(text.trim().parse::<LevelFilter>().map_err(|_| {
                    UsageError(format!(
                        "--log-level {text:?}: not one of off, error, warn, info, debug, trace"
                    ))
                })?);
            }
            "-x" => {
                let v = value(&mut it).ok_or_else(|| {
                    UsageError("-x needs a variable: -x VAR or -x VAR=VALUE".into())
                })?;
                exports.push(export(&v)?);
            }
            "--map-by" | "-map-by" => {
                let v = value(&mut it)
                    .ok_or_else(|| UsageError("--map-by needs a policy (ppr:K:node)".into()))?;
                if let Some(k) = map_by(&v.to_string_lossy())? {
                    ppn = Some(k);
                }
            }
            "--npernode" | "-npernode" | "-N" => {
                let v = value(&mut it)
                    .ok_or_else(|| UsageError(format!("{flag} needs a number of PEs per node")))?;
                ppn = Some(per_node(&flag, &v.to_string_lossy())?);
            }
            "--oversubscribe" | "-oversubscribe" => {}
            "--bind-to" | "-bind-to" => {
                let v = value(&mut it).ok_or_else(|| {
                    UsageError("--bind-to needs none, core, socket or hwthread".into())
                })?;
                match v.to_string_lossy().trim() {
                    "none" => {}
                    "core" | "socket" | "hwthread" | "numa" | "l3cache" | "board" => {
                        notes.push(format!(
                            "--bind-to {}: ignored, gsas does not bind PEs to CPUs (the kernel \
                             places them; use taskset or numactl in a wrapper script to pin them)",
                            v.to_string_lossy()
                        ))
                    }
                    other => {
                        return Err(UsageError(format!(
                            "--bind-to {other:?}: not one of none, core, socket, hwthread"
                        )));
                    }
                }
            }
            "--mca" | "-mca" | "--gmca" | "-gmca" => {
                let name = value(&mut it);
                let val = it.next();
                let (Some(name), Some(val)) = (name, val) else {
                    return Err(UsageError(format!("{flag} needs a name and a value")));
                };
                notes.push(format!(
                    "{flag} {} {}: ignored (an Open MPI component parameter; gsas's settings \
                     are GSAS_* variables, see docs/runtime.md)",
                    name.to_string_lossy(),
                    val.to_string_lossy()
                ));
            }
            "--hostfile" | "-hostfile" | "--machinefile" | "-machinefile" | "--host" | "-host"
            | "-H" => {
                return Err(UsageError(format!(
                    "{flag}: gsas places PEs on the nodes of a cluster file (--config FILE, \
                     see docs/runtime.md) or, inside a Slurm allocation, on its nodes"
                )));
            }
            "--" => {
                program = it.next();
                break;
            }
            f if f.starts_with('-') && f.len() > 1 => {
                return Err(UsageError(format!("unknown option {s:?} (see --help)")));
            }
            _ => {
                program = Some(arg);
                break;
            }
        }
    }
    let Some(n) = n else {
        return Err(UsageError(
            "the number of PEs is missing: give -n N (see --help)".into(),
        ));
    };
    let Some(program) = program else {
        return Err(UsageError(
            "no program given: oshrun -n N PROGRAM [ARGS...] (see --help)".into(),
        ));
    };
    if config.is_none() && fork {
        return Err(UsageError(
            "--fork needs --config FILE (without a cluster file every PE runs on this machine)"
                .into(),
        ));
    }
    Ok(Invocation::Run(RunArgs {
        n,
        program,
        args: it.collect(),
        tag_output,
        merge_errors,
        timeout,
        log_level,
        config,
        ppn,
        fork,
        no_srun,
        exports,
        notes,
    }))
}

/// `-x VAR=VALUE`, or `-x VAR` with this process's value.
fn export(v: &OsStr) -> Result<(OsString, OsString), UsageError> {
    let text = v.to_string_lossy();
    let (name, value) = match text.split_once('=') {
        Some((n, val)) => (n.to_owned(), Some(OsString::from(val))),
        None => (text.clone().into_owned(), None),
    };
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(UsageError(format!(
            "-x {text:?}: not an environment variable name (-x VAR or -x VAR=VALUE)"
        )));
    }
    let value = match value {
        Some(v) => v,
        None => std::env::var_os(&name).ok_or_else(|| {
            UsageError(format!(
                "-x {name}: {name} is not set here (give it a value: -x {name}=VALUE)"
            ))
        })?,
    };
    Ok((name.into(), value))
}

/// `--map-by POLICY`: `Some(K)` for `ppr:K:node`, `None` for the block placement gsas
/// does anyway (`slot`, `core`, with or without `:PE=..` modifiers); other policies are
/// refused, since gsas cannot honour them.
fn map_by(policy: &str) -> Result<Option<u32>, UsageError> {
    let p = policy.trim().to_ascii_lowercase();
    if let Some(rest) = p.strip_prefix("ppr:") {
        let (k, unit) = rest.split_once(':').unwrap_or((rest, ""));
        if unit.split(':').next() != Some("node") {
            return Err(UsageError(format!(
                "--map-by {policy}: only ppr:K:node is supported (K PEs on each node)"
            )));
        }
        return per_node("--map-by ppr", k).map(Some);
    }
    match p.split(':').next() {
        Some("slot" | "core" | "hwthread") => Ok(None),
        _ => Err(UsageError(format!(
            "--map-by {policy}: gsas places PEs in contiguous blocks per node; use \
             --map-by ppr:K:node (or --ppn K) to set how many per node"
        ))),
    }
}

/// A positive number of PEs per node.
fn per_node(flag: &str, text: &str) -> Result<u32, UsageError> {
    text.trim()
        .parse()
        .ok()
        .filter(|&k: &u32| k > 0)
        .ok_or_else(|| UsageError(format!("{flag} {text:?}: not a positive number of PEs")))
}

/// Finds `program` the way `execvp` would (a name without `/` is searched on `PATH`) and
/// checks that it is an executable file, so that a typo is reported before any process
/// starts.
pub fn resolve_program(program: &OsStr, path_var: Option<&OsStr>) -> Result<PathBuf, UsageError> {
    let shown = Path::new(program).display().to_string();
    if program.is_empty() {
        return Err(UsageError("the program name is empty".into()));
    }
    let check = |p: &Path| -> Result<(), String> {
        let meta = std::fs::metadata(p).map_err(|e| e.to_string())?;
        if !meta.is_file() {
            return Err("not a regular file".into());
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err("not executable".into());
        }
        Ok(())
    };
    if Path::new(program).components().count() > 1 || program.as_encoded_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return check(&p)
            .map(|()| p)
            .map_err(|why| UsageError(format!("program {shown}: {why}")));
    }
    let mut last_problem = None;
    for dir in std::env::split_paths(path_var.unwrap_or_default()) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        match check(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(why) if candidate.exists() => {
                last_problem = Some(format!("{}: {why}", candidate.display()));
            }
            Err(_) => {}
        }
    }
    Err(UsageError(match last_problem {
        Some(p) => format!("program {shown} found on PATH but cannot be run ({p})"),
        None => format!("program {shown} not found (searched PATH)"),
    }))
}

/// How many bytes of a program [`look_at_program`] reads: the dynamic section's strings
/// (the libraries it needs) sit near the start of an ELF file, and a small static
/// program's symbol names fit too.
const LINK_SCAN: u64 = 8 << 20;

/// What the launcher can tell of a program from its bytes before it starts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgramLook {
    /// The OpenSHMEM library of another implementation it is linked with: Open MPI's
    /// `liboshmem.so` (its PEs bootstrap through PMIx, which gsas's launcher does not serve,
    /// so each would run alone as PE 0 of 1), Sandia OpenSHMEM's `libsma.so`, or either
    /// linked statically (their internal start-up functions, `oshmem_shmem_init` and
    /// `shmem_internal_init`, in a symbol table that was not stripped).
    pub foreign: Option<&'static str>,
    /// Whether it names `shmem_init` or `start_pes` (an OpenSHMEM program, of whatever
    /// implementation, unless stripped of symbols and linked statically).
    pub openshmem: bool,
    /// Whether it is linked with gsas's library: it needs `libshmem.so`, or carries the
    /// library's `gsas-shmem` messages (linked statically).
    pub gsas: bool,
}

/// Reads the first [`LINK_SCAN`] bytes of `program` for the names [`ProgramLook`] looks
/// for (a dynamically linked program carries the libraries it needs and the symbols it
/// imports in its dynamic string table). Nothing is known of a file that cannot be read.
pub fn look_at_program(program: &Path) -> ProgramLook {
    use std::io::Read;
    let mut head = Vec::new();
    let read = std::fs::File::open(program).and_then(|f| f.take(LINK_SCAN).read_to_end(&mut head));
    if read.is_err() {
        return ProgramLook::default();
    }
    let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
    let foreign = [
        (&b"liboshmem.so"[..], "Open MPI's liboshmem.so"),
        (b"libsma.so", "Sandia OpenSHMEM's libsma.so"),
        (
            b"oshmem_shmem_init",
            "Open MPI's OpenSHMEM library (linked statically)",
        ),
        (
            b"shmem_internal_init",
            "Sandia OpenSHMEM's library (linked statically)",
        ),
    ]
    .into_iter()
    .find(|(needle, _)| has(needle))
    .map(|(_, name)| name);
    ProgramLook {
        foreign,
        openshmem: has(b"shmem_init") || has(b"start_pes"),
        gsas: has(b"libshmem.so") || has(b"gsas-shmem"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Invocation, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    fn run(args: &[&str]) -> RunArgs {
        match p(args).unwrap() {
            Invocation::Run(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn forms_of_n_and_program_arguments() {
        let r = run(&["-n", "4", "./a", "-n", "9", "--tag-output"]);
        assert_eq!((r.n, r.program.as_os_str()), (4, OsStr::new("./a")));
        assert_eq!(r.args, ["-n", "9", "--tag-output"]);
        assert!(!r.tag_output);
        assert_eq!(run(&["-np", "2", "x"]).n, 2);
        assert_eq!(run(&["--np=3", "x"]).n, 3);
        assert_eq!(run(&["-n=5", "x"]).n, 5);
        let r = run(&[
            "--tag-output",
            "-n",
            "1",
            "--timeout",
            "2.5",
            "--",
            "-weird",
            "a",
        ]);
        assert!(r.tag_output);
        assert!(r.merge_errors, "merged unless asked not to");
        assert!(!run(&["--no-merge-errors", "-n", "1", "x"]).merge_errors);
        assert_eq!(r.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(r.program, "-weird");
        assert_eq!(r.args, ["a"]);
        assert_eq!(
            run(&["-n", "1", "--log-level", "debug", "x"]).log_level,
            Some(LevelFilter::Debug)
        );
        let r = run(&["--config", "c.toml", "-n", "8", "--ppn=2", "--fork", "x"]);
        assert_eq!(r.config.as_deref(), Some(Path::new("c.toml")));
        assert_eq!((r.ppn, r.fork), (Some(2), true));
        let r = run(&["-n", "1", "x"]);
        assert_eq!(
            (r.config, r.ppn, r.fork, r.no_srun),
            (None, None, false, false)
        );
        assert!(run(&["--no-srun", "-n", "1", "x"]).no_srun);
        assert_eq!(p(&["--help"]).unwrap(), Invocation::Help);
        assert_eq!(p(&["-n", "2", "-V"]).unwrap(), Invocation::Version);
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        let msg = |a: &[&str]| p(a).unwrap_err().to_string();
        assert!(msg(&["-n", "0", "x"]).contains("at least one PE"));
        assert!(msg(&["-n", "x", "y"]).contains("not a number"));
        assert!(msg(&["-n"]).contains("needs a number"));
        assert!(msg(&["-n", "70000", "x"]).contains("at most 65536"));
        assert!(msg(&["-n", "2"]).contains("no program given"));
        assert!(msg(&["-n", "2", "--"]).contains("no program given"));
        assert!(msg(&["prog"]).contains("number of PEs is missing"));
        assert!(msg(&["-q", "prog"]).contains("unknown option \"-q\""));
        assert!(msg(&["-n", "1", "--timeout", "-3", "x"]).contains("positive"));
        assert!(msg(&["-n", "1", "--log-level", "loud", "x"]).contains("not one of"));
        assert!(msg(&["-n", "2", "--fork", "x"]).contains("--fork needs --config"));
        assert!(msg(&["--config", "c", "-n", "2", "--ppn", "0", "x"]).contains("positive"));
        assert!(msg(&["-n", "2", "--config"]).contains("needs a cluster file"));
    }

    #[test]
    fn open_mpi_options_are_taken_or_refused_with_a_reason() {
        // What an existing Open MPI script passes.
        let r = run(&[
            "-np",
            "4",
            "-x",
            "GSAS_T_A=1",
            "-x",
            "PATH",
            "--oversubscribe",
            "--map-by",
            "ppr:2:node",
            "--bind-to",
            "none",
            "./a",
            "-x",
            "y",
        ]);
        assert_eq!((r.n, r.ppn), (4, Some(2)));
        assert_eq!(r.exports[0], ("GSAS_T_A".into(), "1".into()));
        assert_eq!(r.exports[1].0, "PATH");
        assert_eq!(Some(&r.exports[1].1), std::env::var_os("PATH").as_ref());
        assert_eq!(r.args, ["-x", "y"], "options after the program are its own");
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        assert_eq!(run(&["-n", "2", "-N", "1", "x"]).ppn, Some(1));
        assert_eq!(run(&["-n", "2", "--npernode=3", "x"]).ppn, Some(3));
        assert_eq!(run(&["-n", "2", "--map-by", "slot", "x"]).ppn, None);
        assert_eq!(run(&["-n", "2", "-x", "A=b=c", "x"]).exports[0].1, "b=c");
        // Accepted, and said to be ignored.
        let r = run(&[
            "-n",
            "2",
            "--bind-to",
            "core",
            "--mca",
            "btl",
            "^openib",
            "x",
        ]);
        assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
        assert!(r.notes[0].contains("does not bind"), "{:?}", r.notes);
        assert!(
            r.notes[1].contains("--mca btl ^openib: ignored"),
            "{:?}",
            r.notes
        );
        // Refused, saying what to do instead.
        let msg = |a: &[&str]| p(a).unwrap_err().to_string();
        assert!(msg(&["-n", "2", "--hostfile", "h", "x"]).contains("--config FILE"));
        assert!(msg(&["-n", "2", "--map-by", "node", "x"]).contains("ppr:K:node"));
        assert!(msg(&["-n", "2", "--map-by", "ppr:2:socket", "x"]).contains("ppr:K:node"));
        assert!(msg(&["-n", "2", "--map-by", "ppr:0:node", "x"]).contains("positive"));
        assert!(msg(&["-n", "2", "--bind-to", "magic", "x"]).contains("not one of"));
        assert!(msg(&["-n", "2", "-x", "GSAS_NO_SUCH_VAR_T", "x"]).contains("is not set here"));
        assert!(msg(&["-n", "2", "-x", "1A=2", "x"]).contains("not an environment variable"));
        assert!(msg(&["-n", "2", "-x"]).contains("-x needs a variable"));
        assert!(msg(&["-n", "2", "--mca", "btl"]).contains("a name and a value"));
    }

    #[test]
    fn other_implementations_programs_are_recognised() {
        let dir = std::env::temp_dir().join(format!("gsas-foreign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let look = |name: &str, strings: &[u8]| {
            let path = dir.join(name);
            let mut bytes = b"\x7fELF....\0libc.so.6\0".to_vec();
            bytes.extend_from_slice(strings);
            std::fs::write(&path, &bytes).unwrap();
            look_at_program(&path)
        };
        let cases: [(&str, &[u8], Option<&str>); 4] = [
            (
                "ompi",
                b"liboshmem.so.40\0shmem_init\0",
                Some("Open MPI's liboshmem.so"),
            ),
            (
                "sos",
                b"libsma.so.1\0shmem_init\0",
                Some("Sandia OpenSHMEM's libsma.so"),
            ),
            (
                "ompi-static",
                b"shmem_init\0oshmem_shmem_init\0",
                Some("Open MPI's OpenSHMEM library (linked statically)"),
            ),
            (
                "sos-static",
                b"start_pes\0shmem_internal_init\0",
                Some("Sandia OpenSHMEM's library (linked statically)"),
            ),
        ];
        for (name, strings, foreign) in cases {
            let l = look(name, strings);
            assert_eq!(l.foreign, foreign, "{name}");
            assert!(l.openshmem, "{name}");
        }
        for strings in [
            &b"libshmem.so.0.1\0shmem_init\0"[..],
            b"shmem_init\0gsas-shmem: \0",
        ] {
            let ours = look("gsas-app", strings);
            let want = ProgramLook {
                foreign: None,
                openshmem: true,
                gsas: true,
            };
            assert_eq!(ours, want, "{}", String::from_utf8_lossy(strings));
        }
        let unknown = look("other", b"libopenshmem.so\0shmem_init\0");
        assert!(unknown.openshmem && !unknown.gsas && unknown.foreign.is_none());
        let plain = look("hostname", b"gethostname\0");
        assert_eq!(plain, ProgramLook::default(), "no OpenSHMEM program");
        assert_eq!(look_at_program(&dir.join("absent")), ProgramLook::default());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn programs_are_resolved_before_anything_starts() {
        let path = std::env::var_os("PATH");
        let sh = resolve_program(OsStr::new("sh"), path.as_deref()).unwrap();
        assert!(sh.is_absolute() || sh.starts_with("."), "{}", sh.display());
        let e = resolve_program(OsStr::new("no-such-program-gsas"), path.as_deref()).unwrap_err();
        assert!(e.0.contains("not found"), "{e}");
        let e = resolve_program(OsStr::new("./no/such/file"), None).unwrap_err();
        assert!(e.0.contains("./no/such/file"), "{e}");
        let plain = std::env::temp_dir().join(format!("gsas-args-{}.txt", std::process::id()));
        std::fs::write(&plain, b"data").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve_program(plain.as_os_str(), None).unwrap_err();
        assert!(e.0.contains("not executable"), "{e}");
        std::fs::remove_file(&plain).unwrap();
        let e = resolve_program(OsStr::new("/"), None).unwrap_err();
        assert!(e.0.contains("not a regular file"), "{e}");
    }
}
