//! The harness of the multi-PE Rust tests: jobs of real processes on one node or on two
//! nodes (two atomic services on loopback), and the child side.
//!
//! A test runs a *scenario*: the parent starts one gsas service thread per node (as
//! `oshrun` and `gsas-atomicd` would), then the PEs with `gsas_launch::oshrun::job::run_job`: the
//! running test binary again in child mode (`self_test_argv("child_pe")`, through qemu when
//! the tests run under it), with `SHMEM_TEST_SCENARIO` naming the scenario, the PMI
//! socketpair, and the node's service socket. Each PE runs the scenario, checks its own
//! results (a failed check panics, which ends the job), and writes `pe<rank>.ok` with a
//! summary into the job's scratch directory; the parent requires exit status 0 and every
//! file.

#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use gsas_launch::oshrun::job::{JobReport, JobSpec, PeLaunch, run_job};
use gsas_launch::oshrun::pe_env;
use gsas_service::ServiceThread;

/// The variable naming the scenario a child runs.
pub const SCENARIO: &str = "SHMEM_TEST_SCENARIO";
/// The variable naming the job's scratch directory.
pub const DIR: &str = "SHMEM_TEST_DIR";

/// How the PEs of a job are placed.
#[derive(Clone, Copy, Debug)]
pub struct Topology {
    /// Number of nodes (one service each).
    pub nodes: u32,
    /// PEs per node.
    pub ppn: u32,
}

/// Four PEs on one node.
pub const ONE_NODE: Topology = Topology { nodes: 1, ppn: 4 };
/// Two nodes of two PEs: every other PE is across the network.
pub const TWO_NODES: Topology = Topology { nodes: 2, ppn: 2 };

/// A fresh scratch directory.
pub fn scratch_dir(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shmem-test-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn services(dir: &Path, nodes: u32) -> Vec<ServiceThread> {
    gsas_tests::multinode::service_threads(dir, nodes as u16, |_| {})
}

/// Runs `argv` (the program and its arguments) as every PE of a job placed by `topo`, with
/// `scenario` and `env`; returns the report and the scratch directory.
pub fn run_argv(
    argv: &[OsString],
    scenario: &str,
    topo: Topology,
    env: &[(&str, &str)],
) -> (JobReport, PathBuf) {
    let dir = scratch_dir(scenario);
    let svc = services(&dir, topo.nodes);
    let sockets: Vec<PathBuf> = svc.iter().map(|s| s.socket_path().to_owned()).collect();
    let pid = u64::from(std::process::id());
    let job_id = 0x5000_0000 ^ (pid << 8) ^ u64::from(dir.to_string_lossy().len() as u32);
    let job_key = 0xbeef_0000_0000_0000 | (pid << 16) | u64::from(topo.nodes);
    let size = topo.nodes * topo.ppn;
    let pes = (0..size)
        .map(|rank| {
            let node = (rank / topo.ppn) as u16;
            let mut e = pe_env(sockets[node as usize].as_os_str(), job_id, job_key, node);
            e.push((SCENARIO.into(), scenario.into()));
            e.push((DIR.into(), dir.clone().into_os_string()));
            // These jobs test results, not deadlines: under qemu with more busy processes
            // than cores a node can be starved of CPU for seconds, so give the remote
            // operations a generous deadline unless the scenario sets its own.
            if !env.iter().any(|(k, _)| *k == "GSAS_DEADLINE_MS") {
                e.push(("GSAS_DEADLINE_MS".into(), "60000".into()));
            }
            for (k, v) in env {
                e.push((OsString::from(k), OsString::from(v)));
            }
            PeLaunch {
                rank,
                program: argv[0].clone(),
                args: argv[1..].to_vec(),
                env: e,
            }
        })
        .collect();
    let mut spec = JobSpec::single_node(pes);
    spec.node_of_rank = (0..size).map(|r| r / topo.ppn).collect();
    spec.tag_output = true;
    spec.time_limit = Some(Duration::from_secs(900));
    let report = run_job(spec).unwrap();
    for s in svc {
        s.stop().unwrap();
    }
    (report, dir)
}

/// Runs this test binary's `child_pe` test as every PE of a job.
pub fn run(scenario: &str, topo: Topology, env: &[(&str, &str)]) -> (JobReport, PathBuf) {
    let argv = gsas_tests::launch::self_test_argv("child_pe").unwrap();
    run_argv(&argv, scenario, topo, env)
}

/// Asserts that every PE succeeded and reported; returns the reports by rank.
pub fn check(report: &JobReport, dir: &Path, topo: Topology) -> Vec<String> {
    assert_eq!(report.exit_code, 0, "job failed: {report:?}");
    let size = topo.nodes * topo.ppn;
    let reports: Vec<String> = (0..size)
        .map(|r| {
            std::fs::read_to_string(dir.join(format!("pe{r}.ok")))
                .unwrap_or_else(|e| panic!("PE {r} did not report: {e}"))
        })
        .collect();
    let _ = std::fs::remove_dir_all(dir);
    reports
}

/// Runs `scenario` on `topo` and checks it.
pub fn run_and_check(scenario: &str, topo: Topology) -> Vec<String> {
    let (report, dir) = run(scenario, topo, &[]);
    check(&report, &dir, topo)
}

/// The scenario this process must run as a PE, if it is a child.
pub fn child_scenario() -> Option<String> {
    std::env::var(SCENARIO).ok()
}

/// Writes this PE's report and ends the process successfully.
pub fn report_ok(rank: usize, summary: &str) -> ! {
    let dir = PathBuf::from(std::env::var_os(DIR).expect("SHMEM_TEST_DIR"));
    std::fs::write(dir.join(format!("pe{rank}.ok")), summary).unwrap();
    std::process::exit(0)
}

/// The bytes PE `pe` sends in a transfer of `len` bytes.
pub fn pattern(pe: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (pe * 31 + i * 7 + len) as u8).collect()
}

/// The body of a test binary's `child_pe` test. In a PE of a job (`SHMEM_TEST_SCENARIO`
/// set) it initializes with `init`, runs that scenario, finalizes and reports (ending the
/// process); run by libtest as an ordinary test it does nothing (a singleton job is a test
/// of its own, [`singleton`], where no job of one PE runs the scenarios already).
pub fn child_main(
    init: impl Fn() -> shmem::Shmem,
    scenario: impl Fn(&shmem::Shmem, &str) -> String,
) {
    let Some(s) = child_scenario() else {
        return;
    };
    let shmem = init();
    let summary = scenario(&shmem, &s);
    let me = shmem.my_pe();
    shmem.finalize().unwrap();
    report_ok(me, &summary)
}

/// Runs every scenario of `all` in this test's process, a singleton job (one PE with an
/// embedded service, no launcher), after initializing with `init`.
pub fn singleton(
    init: impl Fn() -> shmem::Shmem,
    all: &[&str],
    scenario: impl Fn(&shmem::Shmem, &str) -> String,
) {
    assert!(
        child_scenario().is_none(),
        "a singleton test run inside a job"
    );
    let shmem = init();
    assert_eq!(shmem.n_pes(), 1, "a test run directly is a singleton PE");
    for s in all {
        scenario(&shmem, s);
    }
    shmem.finalize().unwrap();
}

/// One topology per entry of `ppns`, each on `nodes` nodes.
pub fn topologies(nodes: u32, ppns: &[u32]) -> Vec<Topology> {
    ppns.iter().map(|&ppn| Topology { nodes, ppn }).collect()
}

/// The most PEs a job of [`run_expect`] has under qemu-user (the aarch64 stage), unless
/// `GSAS_QEMU_FULL=1`. That stage checks the aarch64 build of the code (atomics, layouts,
/// the calling convention), not the protocols a second time: the x86_64 stage runs every
/// topology natively, and qemu on an x86_64 host orders memory as the host does, so a job
/// of 8 emulated PEs finds nothing that one of 4 does not, at several times the cost.
pub const EMULATED_MAX_PES: u32 = 4;

/// The topologies of `topos` that run here: all of them natively (or with
/// `GSAS_QEMU_FULL=1`), those of at most [`EMULATED_MAX_PES`] PEs under qemu, where the
/// others are named on stderr (`SHORTENED:`, or `SKIPPED:` when none is left).
fn topologies_here(scenario: &str, topos: &[Topology]) -> Vec<Topology> {
    let (kept, left): (Vec<Topology>, Vec<Topology>) = topos
        .iter()
        .partition(|t| t.nodes * t.ppn <= EMULATED_MAX_PES);
    let full = std::env::var_os("GSAS_QEMU_FULL").is_some_and(|v| v == "1");
    if left.is_empty() || full || !gsas_tests::attack::emulated() {
        return topos.to_vec();
    }
    let thread = std::thread::current();
    let test = format!("{} ({scenario})", thread.name().unwrap_or("?"));
    let what = format!(
        "jobs of more than {EMULATED_MAX_PES} PEs ({}) are left out",
        left.iter()
            .map(|t| format!("{} x {}", t.nodes, t.ppn))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if kept.is_empty() {
        // Outside the harness's capture, where scripts/test-all collects the skips.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {test}: under qemu the {what}; the x86_64 stage runs them (GSAS_QEMU_FULL=1 runs them here)"
        );
    } else {
        gsas_tests::attack::note_shortened(&test, &what);
    }
    kept
}

/// Runs `scenario` on every topology of `topos` with the environment `env` and requires
/// every PE's summary to be `expect(pe, n_pes)`. Under qemu the jobs of more than
/// [`EMULATED_MAX_PES`] PEs are left out, loudly (see there).
pub fn run_expect(
    scenario: &str,
    topos: &[Topology],
    env: &[(&str, &str)],
    expect: impl Fn(usize, usize) -> String,
) {
    for t in topologies_here(scenario, topos) {
        let (report, dir) = run(scenario, t, env);
        let r = check(&report, &dir, t);
        let n = (t.nodes * t.ppn) as usize;
        for (pe, s) in r.iter().enumerate() {
            assert_eq!(*s, expect(pe, n), "{t:?} PE {pe}");
        }
    }
}

unsafe extern "C" {
    static gsas_shmem_team_world: u8;
}

/// `SHMEM_TEAM_WORLD` as the C ABI sees it.
pub fn world() -> *const std::ffi::c_void {
    (&raw const gsas_shmem_team_world).cast()
}
