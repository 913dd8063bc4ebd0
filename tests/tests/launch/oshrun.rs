//! `oshrun` as a user meets it: argument errors before anything starts, the first failing
//! PE ending the job with its status, PMI abort, `kill -9` of a PE (the job ends within 2 s,
//! no PE survives, nothing is left in /dev/shm), and SIGTERM to the launcher.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gsas_tests::launch::{collect_output, launch, run_with_timeout, self_test_argv};

fn oshrun() -> Command {
    launch().command(gsas_tests::launch::program("oshrun"))
}

fn run(cmd: &mut Command) -> Output {
    run_with_timeout(cmd, Duration::from_secs(600)).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_and_version() {
    let o = run(oshrun().arg("--help"));
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("Usage: oshrun -n N") && text.contains("Examples:"),
        "{text}"
    );
    let o = run(oshrun().arg("--version"));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("oshrun (gsas)"));
    let o = run(launch()
        .command(gsas_tests::launch::program("gshrun"))
        .arg("--help"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage: gshrun -n N"));
}

/// An Open MPI script's command line: `-np`, `-x VAR=VALUE` and `-x VAR` reach every PE,
/// `--oversubscribe`, `--map-by slot` and `--bind-to none` are taken silently, `--bind-to
/// core` and `--mca` with one note each; a `-x` of an invalid gsas variable is refused
/// before anything starts, as the environment itself would be.
#[test]
fn open_mpi_command_lines_run() {
    let o = run(oshrun()
        .args([
            "-np",
            "3",
            "-x",
            "GSAS_T_EXPORTED=from -x",
            "-x",
            "GSAS_T_INHERITED",
        ])
        .args(["--oversubscribe", "--map-by", "slot", "--bind-to", "none"])
        .args(["--bind-to", "core", "--mca", "btl", "self,tcp"])
        .args(["sh", "-c", "echo \"$GSAS_T_EXPORTED/$GSAS_T_INHERITED\""])
        .env("GSAS_T_INHERITED", "kept")
        .env_remove("GSAS_T_EXPORTED"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert_eq!(
        out.lines().filter(|l| *l == "from -x/kept").count(),
        3,
        "{out}{}",
        stderr(&o)
    );
    let err = stderr(&o);
    assert!(
        err.contains("oshrun: note: --bind-to core: ignored")
            && err.contains("oshrun: note: --mca btl self,tcp: ignored"),
        "{err}"
    );
    assert_eq!(err.matches("note:").count(), 2, "{err}");
    let o = run(oshrun().args(["-np", "2", "-x", "GSAS_UDP_MTU=huge", "true"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("GSAS_UDP_MTU"), "{}", stderr(&o));
}

#[test]
fn bad_arguments_are_refused_before_anything_starts() {
    let cases: [(&[&str], &str); 5] = [
        (&["-n", "0", "true"], "at least one PE"),
        (&["-n", "2"], "no program given"),
        (&["true"], "number of PEs is missing"),
        (
            &["-n", "2", "/nonexistent/gsas-program"],
            "/nonexistent/gsas-program",
        ),
        (&["-n", "2", "no-such-program-gsas-test"], "not found"),
    ];
    for (args, want) in cases {
        let o = run(oshrun().args(args));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let e = stderr(&o);
        assert!(
            e.starts_with("oshrun: ") && e.contains(want),
            "{args:?}: {e}"
        );
    }
}

#[test]
fn a_bad_environment_is_one_line_and_exit_2_before_any_pe_starts() {
    let dir = gsas_tests::node::scratch_dir("bad-env");
    let cases = [
        ("SHMEM_SYMMETRIC_SIZE", "0", "at least 4096 bytes"),
        ("SHMEM_SYMMETRIC_SIZE", "1k", "at least 4096 bytes"),
        ("SHMEM_SYMMETRIC_SIZE", "4095", "at least 4096 bytes"),
        ("SMA_SYMMETRIC_SIZE", "lots", "SMA_SYMMETRIC_SIZE"),
        ("SHMEM_WAIT_TIMEOUT", "0", "greater than 0"),
        ("GSAS_LOG", "bogus", "expected one of off, error, warn"),
    ];
    for (var, value, want) in cases {
        let o = run(oshrun()
            .args(["-n", "3", "sh", "-c", "touch \"$0/started.$PMI_RANK\""])
            .arg(&dir)
            .env(var, value));
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{var}={value}: {e}");
        assert_eq!(e.lines().count(), 1, "{var}={value}: one line only: {e}");
        assert!(
            e.starts_with("oshrun: ") && e.contains(var) && e.contains(value) && e.contains(want),
            "{var}={value}: {e}"
        );
        let started: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(
            started.is_empty(),
            "{var}={value}: PEs started: {started:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_first_failing_pe_ends_the_job_with_its_status() {
    let t0 = Instant::now();
    let o = run(oshrun().args([
        "-n",
        "3",
        "sh",
        "-c",
        "if [ \"$PMI_RANK\" = 1 ]; then exit 7; fi; exec sleep 60",
    ]));
    assert_eq!(o.status.code(), Some(7), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains("oshrun: PE 1 (pid ")
            && e.contains(") exited with status 7; terminating the job"),
        "{e}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the sleepers were waited for"
    );
    let o = run(oshrun().args(["-n", "2", "true"]));
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn pmi_abort_ends_the_job_with_its_code() {
    let o = run(oshrun()
        .args(["-n", "3", "--"])
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "abort"));
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    let e = stderr(&o);
    assert!(
        e.contains("oshrun: PE 1 (pid ") && e.contains("aborted the job with code 5"),
        "{e}"
    );
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks whether the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// Starts `oshrun -n n` of the hang scenario and returns it with the PEs' pids.
fn hanging_job(n: u32, dir: &Path) -> (Child, Vec<u32>) {
    let mut child = oshrun()
        .arg("-n")
        .arg(n.to_string())
        .arg("--")
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "hang")
        .env(gsas_tests::node::SIGNAL_DIR, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(300);
    let mut pids = Vec::new();
    for pe in 0..n {
        let f = dir.join(format!("ready-{pe}"));
        loop {
            if let Ok(text) = std::fs::read_to_string(&f) {
                if let Ok(pid) = text.trim().parse() {
                    pids.push(pid);
                    break;
                }
            }
            if Instant::now() > until || child.try_wait().unwrap().is_some() {
                let mut err = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                let _ = child.kill();
                panic!("PE {pe} never became ready: {err}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    (child, pids)
}

#[test]
fn kill_9_of_a_pe_ends_the_job_within_2_s() {
    let dir = gsas_tests::node::scratch_dir("kill9");
    let shm_before = gsas_tests::node::dev_shm();
    let (child, pids) = hanging_job(4, &dir);
    let victim = pids[2];
    // SAFETY: kill has no memory arguments.
    let got = unsafe { libc::kill(victim as libc::pid_t, libc::SIGKILL) };
    assert_eq!(got, 0);
    let t0 = Instant::now();
    let out = collect_output(child, Duration::from_secs(60)).unwrap();
    let took = t0.elapsed();
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(137), "{e}");
    assert!(
        took < Duration::from_secs(2),
        "oshrun took {took:?} to end the job: {e}"
    );
    assert!(
        e.contains(&format!(
            "oshrun: PE 2 (pid {victim}) was killed by signal 9 (SIGKILL); terminating the job"
        )),
        "{e}"
    );
    for pid in pids {
        assert!(!pid_alive(pid), "PE pid {pid} survived the job");
    }
    let shm_after = gsas_tests::node::dev_shm();
    let new: Vec<_> = shm_after
        .difference(&shm_before)
        .filter(|n| n.contains("gsas"))
        .collect();
    assert!(new.is_empty(), "the job left {new:?} in /dev/shm");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigterm_to_oshrun_ends_the_job() {
    let dir = gsas_tests::node::scratch_dir("sigterm");
    let (child, pids) = hanging_job(2, &dir);
    // SAFETY: kill has no memory arguments.
    let got = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(got, 0);
    let out = collect_output(child, Duration::from_secs(60)).unwrap();
    assert_eq!(
        out.status.code(),
        Some(128 + libc::SIGTERM),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("received signal 15 (SIGTERM); terminating the job"));
    for pid in pids {
        assert!(!pid_alive(pid), "PE pid {pid} survived");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `oshrun -n n EXTRA... -- <this binary as a PE of shmem_pes' scenario>` with standard
/// error piped.
fn shmem_job(n: u32, extra: &[&str], scenario: &str, dir: &Path, env: &[(&str, &str)]) -> Child {
    oshrun()
        .arg("-n")
        .arg(n.to_string())
        .args(extra)
        .arg("--")
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, scenario)
        .env(gsas_tests::node::SIGNAL_DIR, dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The lines `child` writes on standard error, as they come.
fn stderr_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[test]
fn a_pe_that_exits_without_finalize_is_named_with_the_call_the_others_wait_in() {
    // `exit(0)`: the library's implicit finalize then waits in its final barrier, which
    // the others (in shmem_barrier_all) never reach; `_exit(0)`: the process is gone.
    for how in ["exit", "_exit"] {
        let dir = gsas_tests::node::scratch_dir(&format!("exit-early{how}"));
        let mut child = shmem_job(
            4,
            &["--timeout", "120"],
            crate::shmem_pes::EXIT_EARLY,
            &dir,
            &[
                (crate::shmem_pes::VICTIM, "2"),
                (crate::shmem_pes::EXIT_HOW, how),
            ],
        );
        let pids = gsas_tests::multinode::wait_ready(&dir, 4, &mut child, Duration::from_secs(300));
        let out = collect_output(child, Duration::from_secs(300)).unwrap();
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{how}: {e}");
        let want = format!(
            "oshrun: PE 2 (pid {}) exited with status 0 without calling shmem_finalize; \
             PEs 0, 1, 3 are in shmem_barrier_all; terminating the job",
            pids[2]
        );
        assert!(e.contains(&want), "{how}: {e}");
        for pid in pids {
            assert!(!pid_alive(pid), "{how}: PE pid {pid} survived the job");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // Every PE exiting without shmem_finalize is a clean job: the library finalizes.
    let dir = gsas_tests::node::scratch_dir("all-exit");
    let child = shmem_job(
        4,
        &["--timeout", "120"],
        crate::shmem_pes::ALL_EXIT,
        &dir,
        &[],
    );
    let out = collect_output(child, Duration::from_secs(300)).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("without calling shmem_finalize"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigquit_makes_every_pe_say_where_it_waits_and_the_job_goes_on() {
    let dir = gsas_tests::node::scratch_dir("sigquit");
    let mut child = shmem_job(4, &["--timeout", "300"], crate::shmem_pes::WHERE, &dir, &[]);
    let lines = stderr_lines(&mut child);
    gsas_tests::multinode::wait_ready(&dir, 4, &mut child, Duration::from_secs(300));
    let wants: [fn(&str) -> bool; 4] = [
        |l| {
            l.starts_with("PE 0: in shmem_long_wait_until: waiting for the variable at 0x")
                && l.contains(" (heap + 0x")
                && l.contains(") to become >= 5 (it is 4), for ")
                && l.ends_with(" s")
        },
        |l| l.starts_with("PE 1: in shmem_barrier_all: waiting for "),
        |l| l.starts_with("PE 2: in shmem_barrier_all: waiting for "),
        |l| l == "PE 3: not waiting in the library: the program runs its own code",
    ];
    let mut seen = Vec::new();
    let mut found = [false; 4];
    // A PE that has written its ready file may not be in its wait yet: ask again until
    // every PE said where it is (each SIGQUIT makes every PE print one line).
    for _ in 0..30 {
        // SAFETY: kill has no memory arguments.
        let got = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGQUIT) };
        assert_eq!(got, 0);
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && !found.iter().all(|f| *f) {
            if let Ok(l) = lines.recv_timeout(Duration::from_millis(100)) {
                for (f, want) in found.iter_mut().zip(wants) {
                    *f |= want(&l);
                }
                seen.push(l);
            }
        }
        if found.iter().all(|f| *f) {
            break;
        }
    }
    assert!(found.iter().all(|f| *f), "{found:?}: {seen:#?}");
    assert!(
        seen.iter()
            .any(|l| l == "oshrun: SIGQUIT: asking every PE where it waits (the job goes on)"),
        "{seen:#?}"
    );
    // The job goes on: released, it ends cleanly.
    std::fs::write(dir.join("go"), b"").unwrap();
    let status = gsas_tests::launch::wait_timeout(&mut child, Duration::from_secs(300)).unwrap();
    seen.extend(lines.try_iter());
    assert_eq!(status.code(), Some(0), "{seen:#?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Each PE of `0..n` is named by exactly one of `lists` (lines saying the same thing).
fn each_pe_once(lists: &[Vec<u32>], n: u32, e: &str) {
    let mut all: Vec<u32> = lists.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..n).collect::<Vec<_>>(), "{e}");
}

#[test]
fn the_same_diagnostic_of_many_pes_is_printed_once_with_the_pe_list() {
    let dir = gsas_tests::node::scratch_dir("merge-errors");
    let same = " the same words on every PE";
    for (extra, tag) in [(&[][..], false), (&["--tag-output"][..], true)] {
        let child = shmem_job(8, extra, crate::shmem_pes::SAME_WORDS, &dir, &[]);
        let out = collect_output(child, Duration::from_secs(300)).unwrap();
        let e = stderr(&out);
        assert!(out.status.success(), "{e}");
        // Every PE said it; the lines are merged (one line when the eight PEs said it
        // within the merge window, as they do after a barrier; at worst a few).
        let lists = gsas_tests::launch::pes_saying(&e, same);
        each_pe_once(&lists, 8, &e);
        assert!(lists.len() < 8, "nothing merged: {e}");
        // The PEs' log lines merge the same way, without their pids.
        let lists = gsas_tests::launch::pes_saying(&e, "warn: the same warning on every PE");
        each_pe_once(&lists, 8, &e);
        assert!(lists.len() < 8, "no log line merged: {e}");
        let merged = e.lines().find(|l| l.contains(same)).unwrap();
        assert_eq!(
            merged.starts_with('['),
            tag,
            "a merged line is tagged with its PE list only under --tag-output: {e}"
        );
        // The words of one PE stay its own, each once.
        for pe in 0..8 {
            assert_eq!(
                gsas_tests::launch::pes_saying(&e, &format!(" words of PE {pe} alone")),
                [vec![pe]],
                "{e}"
            );
        }
    }
    // Merging off: one line per PE, as each wrote it.
    let child = shmem_job(
        8,
        &["--no-merge-errors"],
        crate::shmem_pes::SAME_WORDS,
        &dir,
        &[],
    );
    let out = collect_output(child, Duration::from_secs(300)).unwrap();
    let e = stderr(&out);
    assert!(out.status.success(), "{e}");
    let lists = gsas_tests::launch::pes_saying(&e, same);
    assert_eq!(lists.len(), 8, "{e}");
    each_pe_once(&lists, 8, &e);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_error_every_pe_meets_is_printed_once_and_the_launcher_does_not_repeat_it() {
    let dir = gsas_tests::node::scratch_dir("merge-abort");
    let child = shmem_job(8, &[], crate::shmem_pes::BAD_PE, &dir, &[]);
    let out = collect_output(child, Duration::from_secs(300)).unwrap();
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(255), "{e}");
    let said = " shmem_long_p: PE 8 does not exist (the job has 8 PEs: 0..7)";
    // PEs killed by the job's end may not have said it; none said it twice.
    let lists = gsas_tests::launch::pes_saying(&e, said);
    let mut all: Vec<u32> = lists.iter().flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), lists.iter().map(Vec::len).sum::<usize>(), "{e}");
    // The launcher names the PE whose abort ended the job; its message is printed by the
    // PE (before the launcher's line) or, if the PE's line was not read in time, by the
    // launcher: never by neither.
    let line = e
        .lines()
        .find(|l| l.starts_with("oshrun: PE ") && l.contains(" aborted the job with code 255"))
        .unwrap_or_else(|| panic!("no abort line: {e}"));
    let rank: u32 = line["oshrun: PE ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // The launcher's and its service's traces of the same failure stay at info level: the
    // first line said it.
    for trace in ["PMI server: rank", "reclaiming the job"] {
        assert!(
            !e.contains(trace),
            "{trace:?} printed at the default level: {e}"
        );
    }
    if line.contains("(its message is above)") {
        let at = e.find(line).unwrap();
        let pe_said = gsas_tests::launch::pe_line(&e, rank, said)
            .unwrap_or_else(|| panic!("PE {rank}'s message is not above: {e}"));
        assert!(pe_said < at, "{e}");
    } else {
        assert!(line.contains(said.trim_start()), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn timeout_makes_every_pe_say_where_it_waits_before_the_job_ends() {
    let dir = gsas_tests::node::scratch_dir("timeout-report");
    let child = shmem_job(
        2,
        &["--timeout", "10"],
        crate::shmem_pes::WAIT_UNTIL,
        &dir,
        &[],
    );
    let out = collect_output(child, Duration::from_secs(300)).unwrap();
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(124), "{e}");
    let asked = e
        .find("oshrun: the job ran longer than 10.0 s; asking every PE where it waits\n")
        .unwrap_or_else(|| panic!("{e}"));
    let ended = e
        .find("oshrun: the job ran longer than 10.0 s; terminating the job\n")
        .unwrap_or_else(|| panic!("{e}"));
    for pe in 0..2 {
        let line = gsas_tests::launch::pe_line(
            &e,
            pe,
            " in shmem_long_wait_until: waiting for the variable at 0x",
        )
        .unwrap_or_else(|| panic!("no line of PE {pe}: {e}"));
        assert!(asked < line && line < ended, "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program that names `shmem_init` but whose processes never start the library through
/// oshrun (none sends PMI `init`: another implementation's OpenSHMEM program, here a C
/// program with its own `shmem_init`, as a statically linked one carries) ran as N
/// one-PE jobs: oshrun says so once after the job. A plain program (`true`) and a gsas job
/// get no such line.
#[test]
fn a_program_whose_processes_never_start_the_library_here_is_named_once() {
    let dir = gsas_tests::node::scratch_dir("foreign-pes");
    let src = dir.join("other.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n\
         /* Another implementation's start-up, linked in: it never contacts oshrun. */\n\
         int shmem_init(void) { return 0; }\n\
         int main(void) { shmem_init(); printf(\"PE 0 of 1\\n\"); return 0; }\n",
    )
    .unwrap();
    let prog = dir.join("other");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = run(Command::new(&cc).arg("-o").arg(&prog).arg(&src));
    assert!(o.status.success(), "{cc}: {}", stderr(&o));
    let warning = "none of the 3 processes of";
    let o = run(oshrun().arg("-n").arg("3").arg(&prog));
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(o.status.success(), "{out}{err}");
    assert_eq!(out.matches("PE 0 of 1").count(), 3, "{out}");
    assert_eq!(err.matches(warning).count(), 1, "{err}");
    assert!(
        err.contains("started OpenSHMEM through oshrun") && err.contains("oshcc"),
        "{err}"
    );
    let o = run(oshrun().args(["-n", "3", "true"]));
    assert!(
        o.status.success() && !stderr(&o).contains("warning"),
        "{}",
        stderr(&o)
    );
    let child = shmem_job(3, &[], crate::shmem_pes::ALL_EXIT, &dir, &[]);
    let o = collect_output(child, Duration::from_secs(300)).unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains(warning), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}
