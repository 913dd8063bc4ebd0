//! Starting child processes from tests: the running test binary again (in a "child
//! mode"), or any program built for the same target, natively or under qemu-user.
//!
//! What it is: the one place that knows how to start a binary of *this* target. Natively
//! that is just `exec`. Under qemu-user (the aarch64 tests run as
//! `qemu-aarch64 -L / test-binary` on an x86_64 host) an `exec` from the emulated process
//! goes to the host kernel, which can run an aarch64 binary only when binfmt_misc has a
//! `qemu-aarch64` handler; containers and CI machines often have none. [`Launch::detect`]
//! therefore decides:
//!
//! with `gsas_sys::process::user_mode_emulation` (the runtime asks the same when a PE
//! starts its node's daemon): [`Launch::Native`] when the kernel runs this target's code
//! (natively, or through a binfmt_misc handler), else [`Launch::Emulated`]: children are
//! started as `<emulator> -L <sysroot> <program> <args>`, where the emulator is the one
//! running us or `qemu-<arch>` from `PATH`, and the sysroot is `QEMU_LD_PREFIX` (which
//! `cross/aarch64.sh` exports) or `/`.
//!
//! For programs that are started by someone else (`mpiexec.hydra` starting ranks),
//! [`Launch::prefix`] gives the words to put in front of the program.
//!
//! Child mode: a multi-process test re-runs its own binary with
//! [`self_test`]`("name_of_the_test")`, which runs only that test; the test function
//! looks at an environment variable set by the parent and, when present, plays the
//! child and ends the process with its own exit code.
//!
//! The workspace's programs (`oshrun`, `gsas-atomicd`, `exanet-emu`) are found, and built
//! when needed, by [`program`]; examples and other programs of a package by [`example`]
//! and [`package_bin`].
//!
//! What it is not: a launcher for jobs (that is `oshrun`); nothing here is used by the
//! runtime itself. Every wait is bounded ([`run_with_timeout`], [`wait_timeout`]).
//!
//! Thread-safety: detection runs once (a `OnceLock`); everything else is free functions.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How to start a binary built for the running target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// `exec` it directly.
    Native,
    /// Through qemu-user: `emulator -L sysroot program args...`.
    Emulated {
        /// The qemu-user binary.
        emulator: PathBuf,
        /// Its `-L` prefix for the dynamic loader and libraries.
        sysroot: OsString,
    },
}

impl Launch {
    /// Examines the running process and host (see the module documentation).
    pub fn detect() -> Launch {
        match gsas_sys::process::user_mode_emulation() {
            None => Launch::Native,
            Some(e) => Launch::Emulated {
                emulator: e.emulator,
                sysroot: e.sysroot,
            },
        }
    }

    /// The words to put before a program of this target (empty when native).
    pub fn prefix(&self) -> Vec<OsString> {
        match self {
            Launch::Native => Vec::new(),
            Launch::Emulated { emulator, sysroot } => vec![
                emulator.clone().into_os_string(),
                OsString::from("-L"),
                sysroot.clone(),
            ],
        }
    }

    /// A `Command` that runs `program` (a binary of this target).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        match self {
            Launch::Native => Command::new(program),
            Launch::Emulated { emulator, sysroot } => {
                let mut c = Command::new(emulator);
                c.arg("-L").arg(sysroot).arg(program);
                c
            }
        }
    }
}

/// The variable naming an `exanet-emu` for the end-to-end tests to run *as it is* (see
/// [`exanet_emu_command`]).
pub const HOST_EXANET_EMU: &str = "GSAS_TEST_EXANET_EMU";

/// A `Command` that starts `exanet-emu`, for the end-to-end Exanet tests: the build named by
/// [`HOST_EXANET_EMU`], run as it is (natively), when that variable is set; otherwise
/// [`program`]`("exanet-emu")` started through [`launch`] (so under qemu when the tests run
/// there).
///
/// Why the variable: the emulator stands in for hardware, and the Exanet issue lets it run
/// natively while the PEs and daemons under test are aarch64 code under qemu. Emulated, the
/// emulator is the bottleneck (the 4-PE `rma_types` C program over it took 314-416 s with
/// the emulator under qemu, 17 s with the host's). `scripts/test-all` sets the variable to
/// the host build for the aarch64 stage; the emulator's own tests (crate `exanet`) still run
/// it under qemu.
///
/// Panics (a test setup error, reported at once) when the variable names no file.
pub fn exanet_emu_command() -> Command {
    if let Some(path) = std::env::var_os(HOST_EXANET_EMU).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{HOST_EXANET_EMU}={}: no such file (build it with `cargo build -p exanet-emu`)",
            path.display()
        );
        return Command::new(path);
    }
    launch().command(program("exanet-emu"))
}

/// The workspace's programs the tests start: [`program`] builds them all at once.
pub const PROGRAMS: &[&str] = &["oshrun", "gshrun", "gsas-atomicd", "exanet-emu"];

/// The path of the workspace program `name` (one of [`PROGRAMS`]) built for the running
/// test's target and profile, in its target directory (`<target>[/<triple>]/<profile>/`).
///
/// Cargo sets `CARGO_BIN_EXE_<name>` only for the tests of the package that owns a program,
/// and these tests are in another package. So the first call of a test process runs
/// `cargo build --bin ...` for all of [`PROGRAMS`] with the same target directory, target
/// and profile (a no-op when `cargo test --workspace` built them already, and what keeps
/// `cargo test -p gsas-tests` from running stale programs). Test binaries run without
/// cargo (no `CARGO` variable), or with `GSAS_TEST_NO_BUILD=1`, use the programs as they
/// are and build only missing ones.
///
/// Panics (a test setup error) when cargo fails, with its output.
pub fn program(name: &str) -> PathBuf {
    assert!(
        PROGRAMS.contains(&name),
        "{name} is not one of {PROGRAMS:?}"
    );
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(build_programs);
    dir.join(name)
}

/// Builds [`PROGRAMS`] (see [`program`]) and returns the directory they are in.
fn build_programs() -> PathBuf {
    let profile_dir = profile_dir();
    let missing = PROGRAMS.iter().any(|p| !profile_dir.join(p).exists());
    let targets: Vec<&str> = PROGRAMS.iter().flat_map(|p| ["--bin", p]).collect();
    cargo_build(&profile_dir, missing, &targets);
    profile_dir
}

/// The path of the example `name` of the workspace package `package`, built for the running
/// test's target and profile (`<profile>/examples/<name>`) with the package's `features`,
/// built first as [`program`] builds the programs (a no-op when `cargo test --workspace`
/// built the examples already with those features). Every caller of one example must ask
/// for the same features, or one build replaces the program another test runs.
///
/// Panics (a test setup error) when cargo fails, with its output.
pub fn example(package: &str, name: &str, features: &[&str]) -> PathBuf {
    package_target(
        package,
        "--example",
        name,
        &format!("examples/{name}"),
        features,
    )
}

/// The path of the program `name` of the workspace package `package` (one not in
/// [`PROGRAMS`]), built for the running test's target and profile as [`example`] builds.
pub fn package_bin(package: &str, name: &str) -> PathBuf {
    package_target(package, "--bin", name, name, &[])
}

/// Builds target `name` (`flag` = `--bin` or `--example`) of `package` with its
/// `features`, at `path` in the profile directory.
fn package_target(package: &str, flag: &str, name: &str, path: &str, features: &[&str]) -> PathBuf {
    let profile_dir = profile_dir();
    let path = profile_dir.join(path);
    let features = features.join(",");
    let mut targets = vec!["-p", package, flag, name];
    if !features.is_empty() {
        targets.extend(["--features", features.as_str()]);
    }
    cargo_build(&profile_dir, !path.exists(), &targets);
    path
}

/// The profile directory of the running test binary (`<target>[/<triple>]/<profile>/`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().expect("test executable in a directory");
    // Tests are in <profile>/deps; the kit's own programs (netns-cluster) in <profile>.
    if dir.file_name() == Some(OsStr::new("deps")) {
        dir.parent().expect("<profile>/deps").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// `cargo build -q TARGETS...` into `profile_dir`'s target directory, target and profile
/// (see [`program`] for when: always under cargo, otherwise only when `missing`).
fn cargo_build(profile_dir: &std::path::Path, missing: bool, targets: &[&str]) {
    let under_cargo = std::env::var_os("CARGO").is_some();
    let no_build = std::env::var_os("GSAS_TEST_NO_BUILD").is_some_and(|v| v == "1");
    if !missing && (no_build || !under_cargo) {
        return;
    }
    let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let above = profile_dir.parent().expect("target directory");
    let cross = above.file_name() == Some(OsStr::new(&triple));
    let target_dir = if cross {
        above.parent().expect("target directory")
    } else {
        above
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-q"])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .args(targets);
    if cross {
        cmd.args(["--target", &triple]);
    }
    if profile_dir.file_name() == Some(OsStr::new("release")) {
        cmd.arg("--release");
    }
    let out = run_with_timeout(&mut cmd, Duration::from_secs(1800)).expect("running cargo");
    assert!(
        out.status.success(),
        "building {targets:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The decision of [`Launch::detect`] for this process, made once.
pub fn launch() -> &'static Launch {
    static LAUNCH: OnceLock<Launch> = OnceLock::new();
    LAUNCH.get_or_init(Launch::detect)
}

/// The command line (program first) that runs only the test `test_name` of the running
/// test binary (exact name, output not captured, one thread), through qemu when needed.
/// For launchers such as `mpiexec.hydra` that take the program as arguments.
pub fn self_test_argv(test_name: &str) -> io::Result<Vec<OsString>> {
    let mut argv = launch().prefix();
    argv.push(std::env::current_exe()?.into_os_string());
    argv.extend(
        [
            "--exact",
            test_name,
            "--nocapture",
            "--test-threads=1",
            "-q",
        ]
        .map(OsString::from),
    );
    Ok(argv)
}

/// The variables through which a launcher hands a job to its PEs (PMI-1's and gsas's). A
/// command that starts a job with another launcher removes them, so that the environment of
/// the test (which may itself run as a PE of a job) does not leak into the new job.
pub const JOB_VARIABLES: &[&str] = &[
    "PMI_FD",
    "PMI_PORT",
    "PMI_ID",
    "PMI_RANK",
    "PMI_SIZE",
    "GSAS_SERVICE",
    "GSAS_NODE",
    "GSAS_JOB_ID",
    "GSAS_JOB_KEY",
    "GSAS_CONFIG",
];

/// MPICH's Hydra launcher, `mpiexec.hydra` in `PATH` or `/usr/bin`. Panics naming the
/// package when it is missing: the tests that need Hydra fail, never skip, without it (CI
/// installs `mpich`).
pub fn mpiexec_hydra() -> PathBuf {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("mpiexec.hydra"))
        .find(|c| c.is_file())
        .unwrap_or_else(|| {
            panic!(
                "mpiexec.hydra not found in PATH or /usr/bin: install MPICH's Hydra \
                 (Debian/Ubuntu: apt-get install mpich); CI installs it"
            )
        })
}

/// `mpiexec.hydra -launcher fork` (every rank on this machine) without [`JOB_VARIABLES`];
/// the caller adds `-n N` and the program (through [`Launch::prefix`] or
/// [`self_test_argv`]).
pub fn hydra_fork() -> Command {
    let mut cmd = Command::new(mpiexec_hydra());
    cmd.args(["-launcher", "fork"]);
    for v in JOB_VARIABLES {
        cmd.env_remove(v);
    }
    cmd
}

/// [`self_test_argv`] as a `Command`.
pub fn self_test(test_name: &str) -> io::Result<Command> {
    let argv = self_test_argv(test_name)?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    Ok(cmd)
}

/// Waits for `child` at most `timeout`; on timeout kills it and returns a `TimedOut`
/// error.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> io::Result<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            // Already exited between the two calls, or killed now: either way reap it.
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "process {} did not exit within {:.0} s and was killed",
                    child.id(),
                    timeout.as_secs_f64()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` with stdin closed and stdout/stderr captured, for at most `timeout`. On
/// timeout the process is killed and the error message includes what it printed.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> io::Result<Output> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    collect_output(child, timeout)
}

/// Waits at most `timeout` for a child spawned with piped stdout and stderr and returns
/// its status and output (as `Child::wait_with_output`, but bounded). On timeout the
/// process is killed and the error message includes what it printed.
pub fn collect_output(mut child: Child, timeout: Duration) -> io::Result<Output> {
    let out_rx = drain(child.stdout.take());
    let err_rx = drain(child.stderr.take());
    let status = wait_timeout(&mut child, timeout);
    // The pipes close when the process (and any descendant holding them) is gone; do not
    // wait forever for a descendant that keeps them open.
    let grace = Duration::from_secs(5);
    let stdout = out_rx.recv_timeout(grace).unwrap_or_default();
    let stderr = err_rx.recv_timeout(grace).unwrap_or_default();
    match status {
        Ok(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "{e}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            ),
        )),
    }
}

/// Deletes the network namespaces (`ip netns`) named `<prefix><pid>...` whose process
/// `<pid>` no longer runs: what earlier test processes that died left behind.
pub fn remove_stale_namespaces(prefix: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(pid) = digits.parse::<u32>() else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip")
                .args(["netns", "del", name])
                .stdin(Stdio::null())
                .output();
        }
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut p) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            // A read error ends the capture; what was read so far is still reported.
            let _ = p.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_prefix_is_empty_and_emulated_prefix_names_qemu() {
        assert!(Launch::Native.prefix().is_empty());
        let e = Launch::Emulated {
            emulator: "/usr/bin/qemu-aarch64".into(),
            sysroot: "/".into(),
        };
        assert_eq!(e.prefix(), ["/usr/bin/qemu-aarch64", "-L", "/"]);
        let c = e.command("/bin/prog");
        assert_eq!(c.get_program(), "/usr/bin/qemu-aarch64");
        assert_eq!(c.get_args().collect::<Vec<_>>(), ["-L", "/", "/bin/prog"]);
    }

    #[test]
    fn detected_launch_runs_this_binary() {
        // Whatever was detected must actually start this test binary: list its tests.
        let exe = std::env::current_exe().unwrap();
        let out = run_with_timeout(
            launch().command(exe).args(["--list", "--format=terse"]),
            Duration::from_secs(120),
        )
        .unwrap();
        assert!(out.status.success(), "{out:?}");
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(
            listing.contains("detected_launch_runs_this_binary: test"),
            "{listing}"
        );
    }

    #[test]
    fn every_workspace_program_is_found_and_starts() {
        for name in PROGRAMS {
            let path = program(name);
            assert!(path.is_file(), "{}", path.display());
        }
        // The launcher of this target starts and knows itself.
        let out = run_with_timeout(
            launch().command(program("oshrun")).arg("--version"),
            Duration::from_secs(120),
        )
        .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("oshrun"),
            "{out:?}"
        );
    }

    #[test]
    fn timeout_kills() {
        let mut c = Command::new("sleep");
        c.arg("30");
        let e = run_with_timeout(&mut c, Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("was killed"), "{e}");
    }
}

/// Byte offset of the first line of `stderr` in which PE `pe` says `text`: a diagnostic
/// `PROGRAM: PE 3: ...text...`, or the same line of several PEs as the launcher merges it,
/// `PROGRAM: PEs 0-3, 7: ...text...` (`oshrun --no-merge-errors` prints one line per PE).
pub fn pe_line(stderr: &str, pe: u32, text: &str) -> Option<usize> {
    let mut at = 0;
    for line in stderr.split_inclusive('\n') {
        if line_is_of(line, pe, text) {
            return Some(at);
        }
        at += line.len();
    }
    None
}

/// The PE lists of the diagnostic lines of `stderr` that say `text`, in order: one list
/// per line, `[3]` for `gsas-shmem: PE 3: text`, `[0, 1, 2]` for `... PEs 0-2: text`.
pub fn pes_saying(stderr: &str, text: &str) -> Vec<Vec<u32>> {
    stderr
        .lines()
        .filter_map(said_by)
        .filter(|(_, said)| said.contains(text))
        .map(|(pes, _)| pes)
        .collect()
}

fn line_is_of(line: &str, pe: u32, text: &str) -> bool {
    said_by(line).is_some_and(|(pes, said)| pes.contains(&pe) && said.contains(text))
}

/// The PEs a diagnostic line names and what they say: `gsas-shmem: PEs 0-2, 5: in x` is
/// `([0, 1, 2, 5], " in x")`, `PE 3: in y` is `([3], " in y")`, the log line `pe3[4802]
/// warn: z` is `([3], "warn: z")`; `None` for a line that is not `[PROGRAM: ]PE(s) LIST: ...`
/// or a PE's log line.
pub fn said_by(line: &str) -> Option<(Vec<u32>, &str)> {
    // `--tag-output`'s `[0-7] ` goes first.
    let line = match line.strip_prefix('[').and_then(|l| l.split_once("] ")) {
        Some((_, rest)) => rest,
        None => line,
    };
    // A PE's log line: `pe3[4802] warn: ...`.
    if let Some((rank, rest)) = line.strip_prefix("pe").and_then(|r| r.split_once('[')) {
        let said = rest.split_once("] ")?.1;
        return Some((vec![rank.parse().ok()?], said));
    }
    let rest = match line.strip_prefix("PE") {
        Some(r) => r,
        None => &line[line.find(": PE")? + ": PE".len()..],
    };
    let rest = rest.strip_prefix("s ").or_else(|| rest.strip_prefix(' '))?;
    let (list, said) = rest.split_once(':')?;
    let mut pes = Vec::new();
    for item in list.split(", ") {
        match item.split_once('-') {
            Some((a, b)) => pes.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => pes.push(item.parse().ok()?),
        }
    }
    Some((pes, said))
}

#[cfg(test)]
mod pe_line_tests {
    use super::pe_line;

    #[test]
    fn a_pes_line_is_found_alone_or_merged() {
        let err = "noise\ngsas-shmem: PE 3: in x: waiting\ngsas-shmem: PEs 0-2, 5, 7: in y\n";
        assert_eq!(pe_line(err, 3, "in x"), Some(6));
        assert_eq!(pe_line(err, 1, "in y"), Some(38));
        assert_eq!(pe_line(err, 7, "in y"), Some(38));
        assert_eq!(pe_line(err, 4, "in y"), None);
        assert_eq!(pe_line(err, 3, "in y"), None);
        assert_eq!(pe_line(err, 31, "in x"), None);
        assert_eq!(
            super::said_by("gsas-shmem: PEs 0-2, 5, 7: in y"),
            Some((vec![0, 1, 2, 5, 7], " in y"))
        );
        assert_eq!(super::said_by("gsas-shmem: PE 0 of 4: node 0"), None);
        assert_eq!(super::said_by("PE 3: in y"), Some((vec![3], " in y")));
        assert_eq!(
            super::said_by("pe3[4802] warn: z"),
            Some((vec![3], "warn: z"))
        );
    }
}
