//! The C test suite: OpenSHMEM C programs built with the installed `oshcc`/`oshc++` and run
//! as real jobs, plus the checks of the installation itself.
//!
//! Kept as one file because every case shares one installation, one program cache and one
//! job runner (the case list reads as the suite's table of contents).
//!
//! **What it is.** The first test that needs it installs the library with
//! `scripts/install --debug --target <this target>` into `<target dir>/c-suite/<triple>/prefix`
//! (the dev profile in the same target directory as this test, so the build reuses what the
//! test command already compiled; the prefix is kept between runs and the install only
//! replaces files whose content changed). Each program of `shmem/tests/c/` is a
//! `#[test]` of its own: it is compiled with the installed wrapper and run
//!
//! * over shared memory, one node: the installed `oshrun -n N` for N = 1, 2, 4 (the
//!   collectives and teams programs `coll_*`, `team_*` of issue 6: N = 1, 2, 3, 4, 8, see
//!   [`COLL_MATRIX`]);
//! * over UDP, two nodes: two installed `gsas-atomicd` daemons on loopback, started here
//!   from a generated cluster file (`gsas-atomicd --config FILE --node I`), and the job
//!   started by the installed `oshrun --config FILE -n N`, which places the ranks in
//!   contiguous blocks per node, the first node taking the larger half (2 PEs: 1+1,
//!   3 PEs: 2+1, 4 PEs: 2+2, 8 PEs: 4+4), and starts the PEs of both loopback nodes itself;
//! * over Exanet, four emulated nodes (a representative subset, [`EXANET_PROGRAMS`] as
//!   [`EXANET_MATRIX`]): an `exanet-emu` process (the one of this target directory, built
//!   with cargo when missing, or the host build `GSAS_TEST_EXANET_EMU` names, run
//!   natively) emulating a QFDB, four installed `gsas-atomicd` serving its endpoints
//!   (`transport = "exanet"`, `GSAS_EXANET_EMU`), and the installed
//!   `oshrun --config FILE -n N` (4 PEs: one per node; natively also 8 PEs, two per node;
//!   on both targets);
//! * over verbs, two emulated verbs nodes (a representative subset, [`VERBS_PROGRAMS`] as
//!   [`VERBS_MATRIX`]): two installed `gsas-atomicd` serving `transport = "verbs"` nodes
//!   over UDP on loopback, and the installed `oshrun --config FILE -n N` started with the
//!   software verbs device listing two devices (`verbs_emu::Node::devices`), so that each
//!   node's PEs open its `verbs_device` and reach the other node's PEs by RDMA (2 PEs: 1+1,
//!   4 PEs: 2+2; on both targets, two programs under qemu).
//!
//! Every run has a time limit (the launcher's and, above it, this harness's); a failure
//! shows the case, the exit status and everything the PEs printed. A program passes a case
//! when the job exits with the expected status and every PE printed its
//! `<program>: PE i of n: ok` line. Each case is reported on stderr as it finishes
//! (`c_suite: rma_types shm np=2 ... ok (1.4 s)`), outside libtest's output capture.
//!
//! Besides the programs: `nm -D` of the installed `libshmem.so` against the symbol tables
//! (`docs/spec/openshmem-1.5-c-symbols.tsv` and `gsas-beyond-1.5-c-symbols.tsv`: every
//! row), the wrappers' `-showme` modes and flag rules, the
//! names of other implementations (`shmemcc`, `shmemrun`, ...), `shmem_global_exit`'s status
//! under `mpiexec.hydra` (the test fails when Hydra is missing; CI installs `mpich`), the
//! pkg-config file, and that a second install changes nothing.
//!
//! **aarch64.** Built for aarch64 and run under qemu-user, the harness installs the
//! aarch64 build (cross compiler `aarch64-linux-gnu-gcc`, recorded in the wrappers) and the
//! programs, launchers and daemons all run under qemu. That stage checks the aarch64 code
//! (atomics, layouts, the C calling convention, the board's daemons), not the protocols a
//! second time (x86_64 runs the whole matrix natively; qemu on an x86_64 host orders
//! memory as the host does, so more PEs there find no ordering bug that 2 do not), and it
//! must fit the CI budget: the matrix under qemu is [`EMULATED_MATRIX`] (1 and 2 PEs on
//! one node, 2 over two UDP nodes), the collectives and teams programs run
//! [`COLL_EMULATED_MATRIX`] (1, 2, 3 PEs on one node, 3 over two UDP nodes), Exanet runs
//! one PE per node and leaves out [`EXANET_NOT_EMULATED`], and verbs runs the first
//! [`VERBS_EMULATED`] programs. Measured in one CI run before these cuts, the cases under
//! qemu took 1,833 s of job time (17 minutes on 2 cores): Exanet at 4 PEs 625 s, UDP at 2
//! PEs 342 s, one node at 4 PEs 195 s, two nodes at 4 PEs 162 s, one node at 8 PEs 101 s.
//! `C_SUITE_MATRIX=full` runs everything under qemu too; `C_SUITE_MATRIX=subset` runs only
//! [`SUBSET_MATRIX`] (2 PEs over shared memory and 2 over UDP) for quick iterations.
//!
//! **What it is not.** A benchmark (see `scripts/bench`), or a test of the Rust API (the
//! `rust_*` tests).
//!
//! **Thread-safety.** The tests run in parallel threads; the install happens once
//! (a `OnceLock`), every test has its own build directory entries, scratch directory,
//! daemons and job ids.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gsas_control::ControlClient;
use gsas_tests::install::triple;
use gsas_tests::launch::{Launch, exanet_emu_command, hydra_fork, launch, run_with_timeout};

/// Exported names allowed besides the prefixes of [`EXPORTED_PREFIXES`] (the version
/// script `shmem/tools/libshmem.map`).
const EXPORTED_LEGACY: &[&str] = &[
    "start_pes",
    "_my_pe",
    "_num_pes",
    "shmalloc",
    "shfree",
    "shrealloc",
    "shmemalign",
    "pstart_pes",
    "p_my_pe",
    "p_num_pes",
    "pshmalloc",
    "pshfree",
    "pshrealloc",
    "pshmemalign",
];
const EXPORTED_PREFIXES: &[&str] = &["shmem_", "pshmem_", "shmemx_", "pshmemx_", "gsas_shmem_"];

/// How the PEs of a case reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// One node, the installed `oshrun`.
    Shm,
    /// Two nodes (two `gsas-atomicd`), UDP on loopback.
    Udp,
    /// Four emulated Exanet nodes (`exanet-emu` and four `gsas-atomicd`).
    Exanet,
    /// Two emulated verbs nodes (two `gsas-atomicd`, the software verbs device).
    Verbs,
}

/// One run of a program.
#[derive(Clone, Copy, Debug)]
struct Case {
    pes: u32,
    transport: Transport,
}

impl Case {
    const fn new(pes: u32, transport: Transport) -> Case {
        Case { pes, transport }
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.transport {
            Transport::Shm => write!(f, "shm np={}", self.pes),
            Transport::Udp => write!(f, "udp np={} (2 nodes)", self.pes),
            Transport::Exanet => write!(f, "exanet np={} (4 emulated nodes)", self.pes),
            Transport::Verbs => write!(f, "verbs np={} (2 emulated nodes)", self.pes),
        }
    }
}

/// The full matrix: 1, 2, 4 PEs on one node; 2 and 4 PEs over two nodes.
const FULL_MATRIX: &[Case] = &[
    Case::new(1, Transport::Shm),
    Case::new(2, Transport::Shm),
    Case::new(4, Transport::Shm),
    Case::new(2, Transport::Udp),
    Case::new(4, Transport::Udp),
];

/// [`FULL_MATRIX`] under qemu (aarch64 in CI): a singleton, 2 PEs on one node and 2 PEs
/// over two UDP nodes. The aarch64 stage checks the aarch64 code (its atomics, layouts, C
/// calling convention and the board's daemons), not the protocols a second time: those
/// run natively on x86_64 in the whole matrix, and qemu on an x86_64 host orders memory
/// as the host does, so more PEs there find no ordering bug that 2 do not. 4 PEs on one
/// node cost 195 s of the stage's 1,833 s of cases, 4 over two nodes 10-15 s per program.
const EMULATED_MATRIX: &[Case] = &[
    Case::new(1, Transport::Shm),
    Case::new(2, Transport::Shm),
    Case::new(2, Transport::Udp),
];

/// The matrix of the collectives and teams programs (issue 6): 1, 2, 3, 4 and 8 PEs on one
/// node and on two nodes (1 PE over UDP runs on node 0 alone, through its daemon; 3 PEs
/// are placed 2 + 1).
const COLL_MATRIX: &[Case] = &[
    Case::new(1, Transport::Shm),
    Case::new(2, Transport::Shm),
    Case::new(3, Transport::Shm),
    Case::new(4, Transport::Shm),
    Case::new(8, Transport::Shm),
    Case::new(1, Transport::Udp),
    Case::new(2, Transport::Udp),
    Case::new(3, Transport::Udp),
    Case::new(4, Transport::Udp),
    Case::new(8, Transport::Udp),
];

/// [`COLL_MATRIX`] under qemu (aarch64 in CI): 1, 2 and 3 PEs on one node and 3 PEs over
/// two UDP nodes (placed 2 + 1: a team that is not a power of two, within and across
/// nodes). As [`EMULATED_MATRIX`]: the schedules for 4 and 8 PEs run natively; under qemu
/// 8 PEs on one node cost 101 s, and 2 and 4 over two nodes 10-40 s per program.
const COLL_EMULATED_MATRIX: &[Case] = &[
    Case::new(1, Transport::Shm),
    Case::new(2, Transport::Shm),
    Case::new(3, Transport::Shm),
    Case::new(3, Transport::Udp),
];

/// The Exanet cases of [`EXANET_PROGRAMS`]: one and two PEs per emulated node.
const EXANET_MATRIX: &[Case] = &[
    Case::new(4, Transport::Exanet),
    Case::new(8, Transport::Exanet),
];

/// The programs run over Exanet: RMA of every type and size class (up to megabytes, far
/// above the 256-byte wire payload), atomics, signals, point-to-point synchronisation,
/// contexts, and collectives.
const EXANET_PROGRAMS: &[&str] = &[
    "rma_types",
    "rma_blocks",
    "rma_large",
    "amo",
    "signal",
    "p2p",
    "contexts",
    "coll_reduce",
    "coll_collect",
    "openshmem16",
    "reinit",
];

/// The verbs cases of [`VERBS_PROGRAMS`]: one and two PEs per emulated node.
const VERBS_MATRIX: &[Case] = &[
    Case::new(2, Transport::Verbs),
    Case::new(4, Transport::Verbs),
];

/// The programs run over verbs: RMA of every type and size class (inline, bounce pool,
/// megabytes), put-with-signal, atomics (64-bit ones on the NIC), point-to-point
/// synchronisation, ordering (fence), contexts and a collective. Under qemu the first
/// two ([`VERBS_EMULATED`]), to keep the aarch64 stage in its budget (the atomics run
/// there in `cluster verbs::`).
const VERBS_PROGRAMS: &[&str] = &[
    "rma_types",
    "signal",
    "amo",
    "rma_large",
    "p2p",
    "ordering",
    "contexts",
    "coll_collect",
    "openshmem16",
    "rma_blocks",
    "reinit",
];
/// How many of [`VERBS_PROGRAMS`] run under qemu.
const VERBS_EMULATED: usize = 2;

/// The [`EXANET_PROGRAMS`] left out under qemu: `rma_large` (160 s there, its megabytes
/// take the same bulk path as `rma_blocks`, which stays) and `coll_reduce` (96 s; the
/// reductions run under qemu on the other transports, and the Exanet collectives with
/// `coll_collect`).
const EXANET_NOT_EMULATED: &[&str] = &["rma_large", "coll_reduce"];

/// The subset for quick runs (`C_SUITE_MATRIX=subset`).
const SUBSET_MATRIX: &[Case] = &[Case::new(2, Transport::Shm), Case::new(2, Transport::Udp)];

/// The installation and everything the tests share.
struct Suite {
    root: PathBuf,
    prefix: PathBuf,
    build: PathBuf,
    emulated: bool,
    /// `nm` able to read the target's objects.
    nm: String,
    /// Seconds a job may run (launcher limit); the harness allows a minute more.
    job_limit: u64,
    /// What the install printed.
    install_log: String,
}

/// Whether this harness runs on a machine of another architecture (qemu-user): then the
/// installation is a cross build and the wrappers use the cross compilers. The kernel's
/// architecture is read from `/proc/sys/kernel/arch`, which qemu-user does not emulate.
fn cross() -> bool {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/arch").unwrap_or_default();
    let kernel = kernel.trim();
    !kernel.is_empty() && !triple().starts_with(kernel)
}

/// Reports a line on stderr immediately (not captured by libtest).
fn report(line: &str) {
    let mut e = std::io::stderr().lock();
    // A failed write to stderr has nowhere better to go.
    let _ = writeln!(e, "c_suite: {line}");
}

/// The installation, made by the first test that asks (every test panics with the
/// install's output if it failed).
fn suite() -> &'static Suite {
    static SUITE: OnceLock<Result<Suite, String>> = OnceLock::new();
    match SUITE.get_or_init(install) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

/// Runs `scripts/install --debug` for this target into the suite's prefix.
fn install() -> Result<Suite, String> {
    let root = gsas_tests::install::workspace_root();
    let triple = triple();
    let emulated = matches!(launch(), Launch::Emulated { .. });
    let prefix = gsas_tests::install::prefix();
    let build = prefix
        .parent()
        .expect("prefix in c-suite/<triple>")
        .join("programs");
    std::fs::create_dir_all(&build).map_err(|e| format!("creating {}: {e}", build.display()))?;
    let t0 = Instant::now();
    let log = gsas_tests::install::install()?;
    report(&format!(
        "installed {triple} (dev profile) into {} in {:.1} s",
        prefix.display(),
        t0.elapsed().as_secs_f64()
    ));
    let cases: Vec<String> = matrix().iter().map(ToString::to_string).collect();
    let coll: Vec<String> = coll_matrix().iter().map(ToString::to_string).collect();
    report(&format!(
        "each program runs as: {} (collectives and teams: {}){}",
        cases.join(", "),
        coll.join(", "),
        if emulated {
            " (every PE, launcher and daemon under qemu-user)"
        } else {
            ""
        }
    ));
    let cross_nm = format!("{}-linux-gnu-nm", std::env::consts::ARCH);
    let nm = if cross() && which(&cross_nm) {
        cross_nm
    } else {
        "nm".to_owned()
    };
    Ok(Suite {
        root,
        prefix,
        build,
        emulated,
        nm,
        job_limit: if emulated { 900 } else { 300 },
        install_log: log,
    })
}

/// Whether `tool` is on PATH.
fn which(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// A unique number for job ids, file names and ports.
fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Source language of a program.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lang {
    C,
    Cxx,
}

/// How long one compile of a test program may take (they take seconds, under load tens).
const COMPILE_LIMIT: Duration = Duration::from_secs(240);

/// Builds `source` (in shmem/tests/c) into `name` with the installed wrapper.
fn compile(name: &str, source: &str, lang: Lang, extra: &[&str]) -> PathBuf {
    let s = suite();
    let out = s.build.join(name);
    let (wrapper, std_flag) = match lang {
        Lang::C => ("oshcc", "-std=c11"),
        Lang::Cxx => ("oshc++", "-std=c++17"),
    };
    let mut cmd = Command::new(s.prefix.join("bin").join(wrapper));
    cmd.args([std_flag, "-g", "-O1", "-Wall", "-Wextra", "-Werror"])
        .args(extra)
        .arg(s.root.join("shmem/tests/c").join(source))
        .arg("-o")
        .arg(&out);
    // A compile takes seconds. Once in ten CI runs, one under qemu-user never finished
    // (a fork of the multithreaded test binary under qemu can hang before its exec): such
    // a compile is killed after COMPILE_LIMIT and tried once more, loudly.
    let o = match run_with_timeout(&mut cmd, COMPILE_LIMIT) {
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            eprintln!(
                "c_suite: NOTE: {wrapper} {source} did not finish within {} s and was killed; trying once more: {e}",
                COMPILE_LIMIT.as_secs()
            );
            run_with_timeout(&mut cmd, COMPILE_LIMIT)
        }
        other => other,
    }
    .unwrap_or_else(|e| panic!("{wrapper} {source}: {e}"));
    assert!(
        o.status.success(),
        "{wrapper} {} {source} -o {name} failed ({}):\n{}{}",
        extra.join(" "),
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// What a run must end with.
#[derive(Clone, Copy)]
enum Expect<'a> {
    /// Exit status 0 and every PE's ok line.
    Success,
    /// This exit status, and this text somewhere in the output.
    Status(i32, &'a str),
}

/// The outcome of one job.
struct Run {
    status: Option<i32>,
    output: String,
    elapsed: Duration,
}

/// The `gsas-atomicd` daemons of a multi-node case (and, for Exanet, the emulator), stopped
/// when dropped.
struct Daemons {
    children: Vec<Child>,
    sockets: Vec<PathBuf>,
    config: PathBuf,
    dir: PathBuf,
    /// The `exanet-emu` process and its root (Exanet cases).
    emulator: Option<(Child, PathBuf)>,
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.children {
            // SIGTERM lets it remove its socket; a daemon that does not stop is killed.
            let _ = gsas_sys::process::kill(c.id(), libc::SIGTERM);
        }
        for c in &mut self.children {
            if gsas_tests::launch::wait_timeout(c, Duration::from_secs(20)).is_err() {
                report(&format!(
                    "gsas-atomicd (pid {}) ignored SIGTERM and was killed",
                    c.id()
                ));
            }
        }
        if let Some((c, root)) = &mut self.emulator {
            let _ = gsas_sys::process::kill(c.id(), libc::SIGTERM);
            if gsas_tests::launch::wait_timeout(c, Duration::from_secs(20)).is_err() {
                report(&format!(
                    "exanet-emu (pid {}) ignored SIGTERM and was killed",
                    c.id()
                ));
            }
            let _ = std::fs::remove_dir_all(root);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A free UDP port on 127.0.0.1 (free when asked; the daemon binds it right after).
fn free_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("binding an ephemeral UDP port");
    s.local_addr().expect("local address").port()
}

/// Starts `exanet-emu` (four nodes, `eps` endpoints each) under `root` and waits until it
/// is ready.
fn start_emulator(root: &Path, eps: usize) -> Child {
    let within = Duration::from_secs(if suite().emulated { 300 } else { 60 });
    gsas_tests::emu::spawn_ready(exanet_emu_command(), root, eps, &[], within)
}

/// Starts the daemons of `transport` (two UDP nodes on loopback, or four emulated Exanet
/// nodes with their emulator) from a generated cluster file and waits until all answer.
fn start_daemons(tag: &str, transport: Transport) -> Daemons {
    start_daemons_mtu(tag, transport, None)
}

/// [`start_daemons`] with `defaults.udp_mtu` set in the cluster file (the services' and,
/// through `oshrun --config`, the PEs' `GSAS_UDP_MTU`) when `udp_mtu` is given.
fn start_daemons_mtu(tag: &str, transport: Transport, udp_mtu: Option<u32>) -> Daemons {
    let s = suite();
    // Unix socket paths are limited to 107 bytes: a short directory under the system's
    // temporary directory, not the (deep) target directory.
    let dir = std::env::temp_dir().join(format!("gsas-cs-{}-{}", std::process::id(), unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let exanet = transport == Transport::Exanet;
    let verbs = transport == Transport::Verbs;
    let nodes = if exanet { 4 } else { 2 };
    let sockets: Vec<PathBuf> = (0..nodes)
        .map(|i| dir.join(format!("node{i}.sock")))
        .collect();
    let mut toml = format!(
        "# Generated by tests/tests/c_suite.rs for {tag}: {nodes} nodes on loopback ({}).\n\
         [cluster]\nname = \"c-suite\"\n\n[defaults]\nservice_timeout_ms = 60000\n",
        if exanet {
            "Exanet, emulated"
        } else if verbs {
            "verbs, emulated"
        } else {
            "UDP"
        }
    );
    if let Some(mtu) = udp_mtu {
        writeln!(toml, "udp_mtu = {mtu}").unwrap();
    }
    for (i, sock) in sockets.iter().enumerate() {
        write!(
            toml,
            "\n[[nodes]]\nid = {i}\nname = \"loop{i}\"\nhost = \"127.0.0.1\"\nudp_port = {}\n\
             control_socket = \"{}\"\n",
            free_port(),
            sock.display()
        )
        .unwrap();
        if exanet {
            write!(
                toml,
                "transport = \"exanet\"\ncoord = \"0.0.0.{i}.0\"\n\
                 uio_devices = [\"exanet-ep0\", \"exanet-ep1\", \"exanet-ep2\"]\n"
            )
            .unwrap();
        } else if verbs {
            write!(
                toml,
                "transport = \"verbs\"\nverbs_device = \"softverbs{i}\"\n"
            )
            .unwrap();
        } else {
            toml.push_str("transport = \"udp\"\n");
        }
    }
    let config = dir.join("cluster.toml");
    std::fs::write(&config, toml).unwrap();
    let emulator = exanet.then(|| {
        let root = dir.join("exa");
        (start_emulator(&root, 3), root)
    });
    let mut d = Daemons {
        children: Vec::new(),
        sockets: sockets.clone(),
        config: config.clone(),
        dir,
        emulator,
    };
    for node in 0..nodes {
        let mut cmd = launch().command(s.prefix.join("bin/gsas-atomicd"));
        if let Some(root) = d.emulator_root() {
            cmd.env("GSAS_EXANET_EMU", root);
        }
        let child = cmd
            .arg("--config")
            .arg(&config)
            .arg("--node")
            .arg(node.to_string())
            .arg("--log-level")
            .arg("warn")
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting gsas-atomicd: {e}"));
        d.children.push(child);
    }
    let until = Instant::now() + Duration::from_secs(if s.emulated { 300 } else { 60 });
    for (node, sock) in sockets.iter().enumerate() {
        loop {
            if let Ok(mut c) = ControlClient::connect(sock, Duration::from_secs(2)) {
                if c.ping().is_ok() {
                    break;
                }
            }
            if let Some(st) = d.children[node].try_wait().unwrap() {
                panic!(
                    "gsas-atomicd --config {} --node {node} exited: {st}",
                    config.display()
                );
            }
            assert!(
                Instant::now() < until,
                "gsas-atomicd for node {node} did not answer on {} in time",
                sock.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    d
}

impl Daemons {
    /// The emulator's root (Exanet cases).
    fn emulator_root(&self) -> Option<&Path> {
        self.emulator.as_ref().map(|(_, root)| root.as_path())
    }
}

/// Runs `program args` as a job of the case.
fn run_case(
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    case: Case,
    daemons: Option<&Daemons>,
) -> Run {
    let s = suite();
    let t0 = Instant::now();
    let mut cmd = launch().command(s.prefix.join("bin/oshrun"));
    if case.transport != Transport::Shm {
        // Across the daemons: oshrun places the ranks in contiguous blocks per node from
        // the cluster file and starts the PEs of every (loopback) node itself.
        let d = daemons.expect("multi-node cases need daemons");
        cmd.arg("--config").arg(&d.config);
        if let Some(root) = d.emulator_root() {
            cmd.env("GSAS_EXANET_EMU", root);
        }
        if case.transport == Transport::Verbs {
            // The PEs of both nodes inherit it: two software devices, each node's PEs
            // opening their `verbs_device`.
            verbs_emu::Node::new(d.dir.join("sv"), 1)
                .devices(2)
                .apply(&mut cmd);
        }
    }
    cmd.arg("-n")
        .arg(case.pes.to_string())
        .arg("--tag-output")
        .arg("--timeout")
        .arg(s.job_limit.to_string())
        .arg("--");
    cmd.args(launch().prefix()).arg(program).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_with_timeout(&mut cmd, Duration::from_secs(s.job_limit + 60))
        .unwrap_or_else(|e| panic!("{} ({case}): {e}", program.display()));
    Run {
        status: out.status.code(),
        output: joined(&out),
        elapsed: t0.elapsed(),
    }
}

/// Standard output and standard error of a finished command.
fn joined(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Reports the case as failed and panics with the whole output.
fn fail_run(label: &str, case: Case, run: &Run, why: &str) -> ! {
    report(&format!(
        "{label} {case} ... FAILED ({:.1} s)",
        run.elapsed.as_secs_f64()
    ));
    panic!(
        "{label} ({case}): {why}\nexit status: {:?}\n--- output ---\n{}",
        run.status, run.output
    )
}

/// Checks a run of `program` (reported as `label`) against its expectation; panics with
/// the whole output otherwise.
fn check_run(label: &str, program: &str, case: Case, run: &Run, expect: Expect<'_>) {
    match expect {
        Expect::Success => {
            if run.status != Some(0) {
                fail_run(label, case, run, "the job failed");
            }
            for pe in 0..case.pes {
                let line = format!("{program}: PE {pe} of {}: ok", case.pes);
                if !run.output.contains(&line) {
                    fail_run(label, case, run, &format!("no {line:?} line"));
                }
            }
        }
        Expect::Status(code, text) => {
            if run.status != Some(code) {
                fail_run(label, case, run, &format!("expected exit status {code}"));
            }
            if !run.output.contains(text) {
                fail_run(
                    label,
                    case,
                    run,
                    &format!("expected {text:?} in the output"),
                );
            }
        }
    }
    report(&format!(
        "{label} {case} ... ok ({:.1} s)",
        run.elapsed.as_secs_f64()
    ));
}

/// The cases to run: [`FULL_MATRIX`] natively, [`EMULATED_MATRIX`] under qemu,
/// [`FULL_MATRIX`] everywhere with `C_SUITE_MATRIX=full`, or the subset with
/// `C_SUITE_MATRIX=subset`.
fn matrix() -> &'static [Case] {
    match std::env::var("C_SUITE_MATRIX").as_deref() {
        Ok("subset") => SUBSET_MATRIX,
        Ok("full") => FULL_MATRIX,
        _ if matches!(launch(), Launch::Emulated { .. }) => EMULATED_MATRIX,
        _ => FULL_MATRIX,
    }
}

/// The Exanet cases: [`EXANET_MATRIX`], under qemu only its first (one PE per node; the
/// two-PE case took 20-86 s per program there) unless `C_SUITE_MATRIX=full`.
fn exanet_matrix() -> &'static [Case] {
    let full = std::env::var("C_SUITE_MATRIX").as_deref() == Ok("full");
    if matches!(launch(), Launch::Emulated { .. }) && !full {
        &EXANET_MATRIX[..1]
    } else {
        EXANET_MATRIX
    }
}

/// The cases of the collectives and teams programs: [`COLL_MATRIX`] natively,
/// [`COLL_EMULATED_MATRIX`] under qemu, [`COLL_MATRIX`] everywhere with
/// `C_SUITE_MATRIX=full`, or the subset with `C_SUITE_MATRIX=subset`.
fn coll_matrix() -> &'static [Case] {
    match std::env::var("C_SUITE_MATRIX").as_deref() {
        Ok("subset") => SUBSET_MATRIX,
        Ok("full") => COLL_MATRIX,
        _ if matches!(launch(), Launch::Emulated { .. }) => COLL_EMULATED_MATRIX,
        _ => COLL_MATRIX,
    }
}

/// Builds a program and runs it over the whole matrix.
fn run_program(
    label: &str,
    binary: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    expect: Expect<'_>,
) {
    run_cases(label, binary, matrix(), args, env, expect);
}

/// Runs a built program as every case of `cases` (the daemons started once, if needed).
fn run_cases(
    label: &str,
    binary: &Path,
    cases: &[Case],
    args: &[&str],
    env: &[(&str, &str)],
    expect: Expect<'_>,
) {
    let mut daemons: Option<(Transport, Daemons)> = None;
    for &case in cases {
        if case.transport != Transport::Shm
            && daemons.as_ref().is_none_or(|(t, _)| *t != case.transport)
        {
            // The previous transport's daemons (and emulator) stop first.
            drop(daemons.take());
            daemons = Some((case.transport, start_daemons(label, case.transport)));
        }
        let run = run_case(binary, args, env, case, daemons.as_ref().map(|(_, d)| d));
        check_run(label, label, case, &run, expect);
    }
}

/// The test of a collectives or teams program (issue 6): compile `name.c` and run it as
/// every case of [`coll_matrix`].
fn coll_program(name: &str) {
    let bin = compile(name, &format!("{name}.c"), Lang::C, &[]);
    run_cases(name, &bin, coll_matrix(), &[], &[], Expect::Success);
}

/// The common program test: compile `name.c` and run it everywhere.
fn c_program(name: &str, extra: &[&str]) {
    let bin = compile(name, &format!("{name}.c"), Lang::C, extra);
    run_program(name, &bin, &[], &[], Expect::Success);
}

#[test]
fn setup_query() {
    c_program("setup_query", &[]);
    // Globals and statics are symmetric with the static library too.
    let bin = compile(
        "setup_query-static",
        "setup_query.c",
        Lang::C,
        &["-static-shmem"],
    );
    run_program("setup_query", &bin, &[], &[], Expect::Success);
}

/// `legacy.c` never calls `shmem_finalize` (as `start_pes` programs do): the library's
/// exit handler must finish every PE cleanly ([`ends_cleanly`]).
#[test]
fn legacy() {
    let bin = compile("legacy", "legacy.c", Lang::C, &[]);
    ends_cleanly("legacy", &bin, &[]);
}

/// OpenSHMEM 1.6's initialization cycles (`reinit.c`: three init/finalize cycles, the
/// heap emptied by each last finalize, every kind of operation in each): the PEs stay in
/// the job between cycles and leave at exit, which the process manager and the services
/// see as a clean end ([`ends_cleanly`]); with the argument `implicit` the exit handler
/// ends the last cycle.
#[test]
fn reinit() {
    let bin = compile("reinit", "reinit.c", Lang::C, &[]);
    ends_cleanly("reinit", &bin, &[]);
    ends_cleanly("reinit implicit", &bin, &["implicit"]);
    // A child forked after the last finalize exits through the inherited exit handler,
    // which must not leave the job for its parent.
    ends_cleanly("reinit fork-child", &bin, &["fork-child"]);
    // The last PE exits after the first cycle: the others' next initialization (the second
    // cycle's, by shmem_init_thread) fails naming the cycle (its barrier times out, or the
    // node of the PE that left refuses) and returns nonzero, which the program's check
    // turns into status 1; no hang.
    run_cases(
        "reinit",
        &bin,
        &[Case::new(3, Transport::Shm), Case::new(2, Transport::Udp)],
        &["leave-early"],
        &[
            ("GSAS_BOOT_TIMEOUT_MS", "1000"),
            ("GSAS_DEADLINE_MS", "2000"),
        ],
        Expect::Status(
            1,
            "shmem_init_thread: waiting for every PE to start the new initialization cycle",
        ),
    );
    // The last PE skips the library's exit handler (_exit after its last finalize): the
    // job succeeds and oshrun says, once, that the PE did not leave.
    run_cases(
        "reinit",
        &bin,
        &[Case::new(3, Transport::Shm)],
        &["underscore-exit"],
        &[],
        Expect::Status(
            0,
            "warning: PE 2 exited with status 0 without leaving the job",
        ),
    );
}

/// Runs `bin` over the matrix and checks that every PE ended cleanly: the job succeeded,
/// no "without finalize" and no "without Leave" in its output at log level info (the PMI
/// server's and, on one node, `oshrun`'s service's traces, which are info there), and no
/// job reclaimed by the daemons (two nodes), which saw every job end.
fn ends_cleanly(label: &str, bin: &Path, args: &[&str]) {
    let program = label.split(' ').next().unwrap_or(label);
    let mut daemons = None;
    let mut runs_per_daemon = 0;
    for &case in matrix() {
        if case.transport == Transport::Udp && daemons.is_none() {
            daemons = Some(start_daemons(program, Transport::Udp));
        }
        let run = run_case(bin, args, &[("GSAS_LOG", "info")], case, daemons.as_ref());
        for warning in ["without finalize", "without Leave"] {
            if run.output.contains(warning) {
                fail_run(label, case, &run, &format!("a PE ended {warning}"));
            }
        }
        check_run(label, program, case, &run, Expect::Success);
        if case.transport == Transport::Udp {
            runs_per_daemon += 1;
        }
    }
    if let Some(d) = &daemons {
        for sock in &d.sockets {
            let stats = gsas_control::query_stats(sock, Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("stats of the daemon at {}: {e}", sock.display()));
            assert_eq!(
                stats.get("jobs.reclaimed"),
                Some(0),
                "a daemon reclaimed a {label} job (a PE left without Leave): {stats:?}"
            );
            assert_eq!(
                stats.get("jobs.ended"),
                Some(runs_per_daemon),
                "a daemon did not see every {label} job end: {stats:?}"
            );
        }
    }
}

#[test]
fn progress() {
    c_program("progress", &[]);
}

#[test]
fn memory() {
    c_program("memory", &[]);
}

#[test]
fn rma_types() {
    c_program("rma_types", &[]);
}

/// The interleaved block transfers of OpenSHMEM 1.6 (`shmem_ibput`, `shmem_ibget`: typed,
/// sized, ctx and generic forms) over the whole matrix; and a stride below the block size,
/// a fatal error naming the routine (2 PEs on one node).
#[test]
fn rma_blocks() {
    let bin = compile("rma_blocks", "rma_blocks.c", Lang::C, &[]);
    run_program("rma_blocks", &bin, &[], &[], Expect::Success);
    let case = Case::new(2, Transport::Shm);
    let run = run_case(&bin, &["bad-stride"], &[], case, None);
    check_run(
        "rma_blocks bad-stride",
        "rma_blocks",
        case,
        &run,
        Expect::Status(
            255,
            "shmem_int_ibput: the destination stride is 2; strides count elements and must \
             be at least 3 (the block size)",
        ),
    );
}

#[test]
fn rma_sized() {
    c_program("rma_sized", &[]);
}

#[test]
fn rma_large() {
    c_program("rma_large", &[]);
    let bin = compile(
        "rma_large-static",
        "rma_large.c",
        Lang::C,
        &["-static-shmem"],
    );
    run_program("rma_large", &bin, &[], &[], Expect::Success);
}

#[test]
fn amo() {
    c_program("amo", &[]);
}

#[test]
fn signal() {
    c_program("signal", &[]);
}

#[test]
fn p2p() {
    c_program("p2p", &[]);
}

#[test]
fn ordering() {
    c_program("ordering", &[]);
}

#[test]
fn locks() {
    c_program("locks", &[]);
}

#[test]
fn contexts() {
    c_program("contexts", &[]);
}

#[test]
fn threads() {
    c_program("threads", &["-pthread"]);
}

#[test]
fn generics() {
    c_program("generics", &[]);
}

#[test]
fn pshmem() {
    c_program("pshmem", &["-DTEST_PSHMEM"]);
    // Statically: the tool's shmem_putmem must take precedence over the library's weak
    // alias (with two strong definitions this link failed).
    let bin = compile(
        "pshmem-static",
        "pshmem.c",
        Lang::C,
        &["-DTEST_PSHMEM", "-static-shmem"],
    );
    run_program("pshmem", &bin, &[], &[], Expect::Success);
}

#[test]
fn coll_sync() {
    coll_program("coll_sync");
}

#[test]
fn coll_bcast() {
    coll_program("coll_bcast");
}

#[test]
fn coll_collect() {
    coll_program("coll_collect");
}

#[test]
fn coll_alltoall() {
    coll_program("coll_alltoall");
}

#[test]
fn coll_reduce() {
    coll_program("coll_reduce");
}

#[test]
fn coll_mixed() {
    coll_program("coll_mixed");
}

/// Collectives back to back with changing data, team and active-set forms, at sizes on
/// both sides of the direct path's datagram size and data limit (`coll_direct.c`): the
/// two-node cases of [`coll_matrix`], where the direct path runs (one node has none),
/// with the defaults and with small datagrams and limit.
#[test]
fn coll_direct() {
    let bin = compile("coll_direct", "coll_direct.c", Lang::C, &[]);
    let cases: Vec<Case> = coll_matrix()
        .iter()
        .copied()
        .filter(|c| c.transport == Transport::Udp)
        .collect();
    run_cases("coll_direct", &bin, &cases, &[], &[], Expect::Success);
    let small = [
        ("SHMEM_COLL_DIRECT_CHUNK", "1000"),
        ("SHMEM_COLL_DIRECT_MAX", "8k"),
    ];
    run_cases("coll_direct", &bin, &cases, &[], &small, Expect::Success);
}

/// `shmem_team_ptr` (OpenSHMEM 1.6) on the world, shared and a strided team, over the
/// whole matrix (two nodes: the pointers of the other node's PEs are NULL).
#[test]
fn team_ptr() {
    c_program("team_ptr", &[]);
}

/// The OpenSHMEM 1.6 routines besides `shmem_team_ptr` (query_initialized, signal_add and
/// signal_set, pe_quiet, sessions) over the whole matrix.
#[test]
fn openshmem16() {
    c_program("openshmem16", &[]);
}

#[test]
fn team_split() {
    coll_program("team_split");
}

/// [`EXANET_PROGRAMS`] over four emulated Exanet nodes ([`exanet_matrix`], on both targets:
/// under qemu the emulator runs natively when `GSAS_TEST_EXANET_EMU` names the host's
/// build, as `scripts/test-all` arranges; emulated itself it was the bottleneck, rma_types
/// at 4 PEs took 314-416 s against 17 s), one emulator and set of daemons for all of them.
#[test]
fn exanet_programs() {
    let daemons = start_daemons("exanet", Transport::Exanet);
    let full = std::env::var("C_SUITE_MATRIX").as_deref() == Ok("full");
    let emulated = matches!(launch(), Launch::Emulated { .. }) && !full;
    for name in EXANET_PROGRAMS
        .iter()
        .filter(|n| !(emulated && EXANET_NOT_EMULATED.contains(n)))
    {
        let bin = compile(
            &format!("{name}-exanet"),
            &format!("{name}.c"),
            Lang::C,
            &[],
        );
        for &case in exanet_matrix() {
            let run = run_case(&bin, &[], &[], case, Some(&daemons));
            check_run(name, name, case, &run, Expect::Success);
        }
    }
    for sock in &daemons.sockets {
        let stats = gsas_control::query_stats(sock, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("stats of the daemon at {}: {e}", sock.display()));
        // Small requests and replies by PIO, large ones by RDMA.
        for key in [
            "exanet.bulk_sent",
            "exanet.delivered",
            "exanet.pio_sent",
            "exanet.pio_received",
            "requests.atomic",
        ] {
            assert!(
                stats.get(key).unwrap_or(0) > 0,
                "{}: no {key}: {stats:?}",
                sock.display()
            );
        }
        assert_eq!(stats.get("refused.total"), Some(0), "{stats:?}");
    }
}

/// [`VERBS_PROGRAMS`] over two emulated verbs nodes ([`VERBS_MATRIX`], on both targets;
/// the first [`VERBS_EMULATED`] under qemu), one set of daemons for all of them.
#[test]
fn verbs_programs() {
    let daemons = start_daemons("verbs", Transport::Verbs);
    let programs = if matches!(launch(), Launch::Emulated { .. }) {
        &VERBS_PROGRAMS[..VERBS_EMULATED]
    } else {
        VERBS_PROGRAMS
    };
    for name in programs {
        let bin = compile(&format!("{name}-verbs"), &format!("{name}.c"), Lang::C, &[]);
        for &case in VERBS_MATRIX {
            let run = run_case(&bin, &[], &[], case, Some(&daemons));
            check_run(name, name, case, &run, Expect::Success);
        }
    }
    for sock in &daemons.sockets {
        let stats = gsas_control::query_stats(sock, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("stats of the daemon at {}: {e}", sock.display()));
        // Every job joined the service; no put or get went through it (RDMA); nothing was
        // refused. (Atomics: the 64-bit ones are NIC atomics, the others the service's.)
        assert!(
            stats.get("jobs.started").unwrap_or(0) >= 2,
            "{}: {stats:?}",
            sock.display()
        );
        for kind in [
            "requests.read",
            "requests.write",
            "requests.bulk_read",
            "requests.bulk_write",
        ] {
            assert_eq!(stats.get(kind), Some(0), "{kind}: {stats:?}");
        }
        assert_eq!(stats.get("refused.total"), Some(0), "{stats:?}");
    }
}

/// The concurrent-observer family (`observer.c`, issue 13): every put flavour (p to the
/// heap, to a static and through a created context; typed puts of one and five elements;
/// putmem of 1..=64 bytes, into a static array and of 4 KiB; iput; put_nbi + quiet;
/// put-with-signal; AMO set and swap; broadcast and collect into a flag array) checked by a
/// target that reads the exact sequence number and clears, at 2 and 4 PEs on every path:
/// same node direct, same node through the atomic service (`GSAS_DIRECT=0`), two UDP
/// nodes on loopback (the pairs cross the nodes), four emulated Exanet nodes, two emulated
/// verbs nodes (RDMA WRITEs landing in the observed memory).
///
/// Rounds per flavour ([`OBSERVER_ROUNDS`]): 10,000 on the direct path; on the paths where
/// every put crosses a service (150-2,000 us a round here) fewer, to keep the test command
/// in its budget (about 3 minutes of job time natively on a busy 2-core machine); a
/// twentieth under qemu, where it checks the aarch64 copy code rather than races.
/// `OBSERVER_ROUNDS=1000000` in the environment makes every case the soak.
#[test]
fn observer() {
    let bin = compile("observer", "observer.c", Lang::C, &["-pthread"]);
    let emulated = matches!(launch(), Launch::Emulated { .. });
    let rounds = |path: usize| OBSERVER_ROUNDS[path] / if emulated { 20 } else { 1 };
    let check =
        |label: &str, case: Case, path: usize, env: &[(&str, &str)], d: Option<&Daemons>| {
            let rounds = rounds(path).to_string();
            let run = run_case(&bin, &[&rounds], env, case, d);
            check_run(label, "observer", case, &run, Expect::Success);
        };
    for pes in [2, 4] {
        check("observer", Case::new(pes, Transport::Shm), 0, &[], None);
        let service = [("GSAS_DIRECT", "0")];
        check(
            "observer GSAS_DIRECT=0",
            Case::new(pes, Transport::Shm),
            1,
            &service,
            None,
        );
    }
    for (transport, path) in [
        (Transport::Udp, 2),
        (Transport::Exanet, 3),
        (Transport::Verbs, 4),
    ] {
        let daemons = start_daemons("observer", transport);
        for pes in [2, 4] {
            check(
                "observer",
                Case::new(pes, transport),
                path,
                &[],
                Some(&daemons),
            );
        }
    }
}

/// Rounds per flavour of [`observer`] on each path: same node direct, same node through the
/// service, two UDP nodes, four emulated Exanet nodes, two emulated verbs nodes.
const OBSERVER_ROUNDS: [u32; 5] = [10_000, 2_000, 2_000, 500, 1_000];

/// The concurrent observer on bulk transfers (issue 25 item 4; `observer.c`'s `put_bulk` and
/// `get_bulk`): arrays of `uint64_t` words of 40 KiB to 256 KiB (128 KiB every other round)
/// put to a PE that scans them with one 8-byte load per word while they arrive, and got
/// into a buffer that a thread of the getting PE scans while the reply packets land in it;
/// a word must be entirely old (0) or entirely new, never half of each. On every path, at
/// 2 PEs: same node direct; same node through the service's ring with an odd
/// `GSAS_UDP_MTU` (4099); two UDP nodes with the default `udp_mtu` (61440: fragments split
/// word 7668 before the fix), 1472 and the odd 4099; four emulated Exanet nodes; two
/// emulated verbs nodes (RDMA READs and WRITEs in the software device's 32 KiB packets).
///
/// [`OBSERVER_BULK_ROUNDS`] rounds per mode and case (a twentieth under qemu, at least 2);
/// `OBSERVER_ROUNDS` in the environment overrides them. Every case runs even when one
/// fails, and the test fails listing every failed case with its output.
#[test]
fn observer_bulk() {
    let bin = compile("observer_bulk", "observer.c", Lang::C, &["-pthread"]);
    let emulated = matches!(launch(), Launch::Emulated { .. });
    let rounds = (OBSERVER_BULK_ROUNDS / if emulated { 20 } else { 1 })
        .max(2)
        .to_string();
    let mut failed = Vec::new();
    let mut check = |label: &str, case: Case, env: &[(&str, &str)], d: Option<&Daemons>| {
        // One job per mode, so that a failed put does not hide the get.
        for mode in ["put_bulk", "get_bulk"] {
            let run = run_case(&bin, &[&rounds, mode], env, case, d);
            let ok = run.status == Some(0)
                && (0..case.pes).all(|pe| {
                    let line = format!("observer: PE {pe} of {}: ok", case.pes);
                    run.output.contains(&line)
                });
            let verdict = if ok { "ok" } else { "FAILED" };
            let secs = run.elapsed.as_secs_f64();
            report(&format!(
                "{label} {mode} {case} ... {verdict} ({secs:.1} s)"
            ));
            if !ok {
                failed.push(format!(
                    "{label} {mode} ({case}): exit status {:?}\n{}",
                    run.status, run.output
                ));
            }
        }
    };
    check("observer_bulk", Case::new(2, Transport::Shm), &[], None);
    check(
        "observer_bulk GSAS_DIRECT=0 GSAS_UDP_MTU=4099",
        Case::new(2, Transport::Shm),
        &[("GSAS_DIRECT", "0"), ("GSAS_UDP_MTU", "4099")],
        None,
    );
    for mtu in [None, Some(1472), Some(4099)] {
        let daemons = start_daemons_mtu("observer_bulk", Transport::Udp, mtu);
        let label = match mtu {
            Some(m) => format!("observer_bulk udp_mtu={m}"),
            None => "observer_bulk".to_string(),
        };
        check(&label, Case::new(2, Transport::Udp), &[], Some(&daemons));
    }
    for transport in [Transport::Exanet, Transport::Verbs] {
        let daemons = start_daemons("observer_bulk", transport);
        check(
            "observer_bulk",
            Case::new(2, transport),
            &[],
            Some(&daemons),
        );
    }
    assert!(
        failed.is_empty(),
        "observer_bulk: {} case(s) failed:\n{}",
        failed.len(),
        failed.join("\n---\n")
    );
}

/// Rounds per mode and case of [`observer_bulk`].
const OBSERVER_BULK_ROUNDS: u32 = 200;

#[test]
fn cxx_program() {
    let bin = compile("cxx_program", "cxx_program.cpp", Lang::Cxx, &[]);
    run_program("cxx_program", &bin, &[], &[], Expect::Success);
}

/// The text `global_exit.c` prints (unflushed) before it calls `shmem_global_exit(status)`.
fn global_exit_text(status: i32) -> String {
    format!("calls shmem_global_exit({status}) [unflushed]")
}

/// `shmem_global_exit(S)`: the launcher exits with S, 0 included: S = 42 over the whole
/// matrix, 0, 3 and 255 at 2 PEs on one node, 0 at 2 PEs on two nodes (the calling PE on
/// node 1, served by its own daemon).
#[test]
fn global_exit_status_reaches_the_launcher() {
    let bin = compile("global_exit", "global_exit.c", Lang::C, &[]);
    let text = global_exit_text(42);
    run_program("global_exit", &bin, &[], &[], Expect::Status(42, &text));
    let daemons = start_daemons("global_exit", Transport::Udp);
    for (case, statuses) in [
        (Case::new(2, Transport::Shm), &[0, 3, 255][..]),
        (Case::new(2, Transport::Udp), &[0][..]),
    ] {
        for &status in statuses {
            let run = run_case(&bin, &[&status.to_string()], &[], case, Some(&daemons));
            let text = global_exit_text(status);
            let label = format!("global_exit({status})");
            check_run(
                &label,
                "global_exit",
                case,
                &run,
                Expect::Status(status, &text),
            );
        }
    }
}

/// `shmem_global_exit(S)` in a job started by MPICH's `mpiexec.hydra -launcher fork -n 2`
/// (the PEs bootstrap through Hydra's PMI-1 and start their own service): Hydra exits with
/// S for S = 0, 3, 42 and 255, as with `oshrun` (measured with MPICH 4.0 of Debian 12; see
/// docs/runtime.md).
#[test]
fn global_exit_under_hydra() {
    let bin = compile("global_exit-hydra", "global_exit.c", Lang::C, &[]);
    for status in [0, 3, 42, 255] {
        let mut cmd = hydra_fork();
        cmd.args(["-n", "2"])
            .args(launch().prefix())
            .arg(&bin)
            .arg(status.to_string());
        global_exit_job(
            &format!("global_exit({status}) under mpiexec.hydra"),
            cmd,
            status,
        );
    }
}

/// Runs `cmd`, a job of 2 PEs on one node running `global_exit.c` with `status`, and checks
/// that it ends with `status` and the calling PE's text.
fn global_exit_job(label: &str, mut cmd: Command, status: i32) {
    let s = suite();
    let t0 = Instant::now();
    let out = run_with_timeout(&mut cmd, Duration::from_secs(s.job_limit + 60))
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let run = Run {
        status: out.status.code(),
        output: joined(&out),
        elapsed: t0.elapsed(),
    };
    let text = global_exit_text(status);
    let case = Case::new(2, Transport::Shm);
    check_run(
        label,
        "global_exit",
        case,
        &run,
        Expect::Status(status, &text),
    );
}

#[test]
fn symmetric_size_from_the_environment() {
    let bin = compile("env_size", "env_size.c", Lang::C, &[]);
    // (variable, value, bytes it means)
    let valid: &[(&str, &str, u64)] = &[
        ("SHMEM_SYMMETRIC_SIZE", "2m", 2 << 20),
        ("SHMEM_SYMMETRIC_SIZE", "1.5M", 1_572_864),
        ("SHMEM_SYMMETRIC_SIZE", "3.1M", 3_250_586),
        ("SHMEM_SYMMETRIC_SIZE", "768k", 768 << 10),
        ("SHMEM_SYMMETRIC_SIZE", "64kk", 64 << 10),
        ("SHMEM_SYMMETRIC_SIZE", "1048576", 1 << 20),
        ("SMA_SYMMETRIC_SIZE", "1m", 1 << 20),
    ];
    let cases: &[Case] = if std::env::var("C_SUITE_MATRIX").as_deref() == Ok("subset") {
        &[Case::new(2, Transport::Shm)]
    } else {
        &[Case::new(2, Transport::Shm), Case::new(2, Transport::Udp)]
    };
    let daemons = cases
        .iter()
        .any(|c| c.transport == Transport::Udp)
        .then(|| start_daemons("env_size", Transport::Udp));
    for &case in cases {
        for &(var, value, bytes) in valid {
            let bytes_s = bytes.to_string();
            let run = run_case(&bin, &[&bytes_s], &[(var, value)], case, daemons.as_ref());
            let label = format!("env_size {var}={value}");
            // The first refused request (four times the heap) is printed once, by PE 0,
            // with the heap's size, without SHMEM_DEBUG; the second (eight times) is not.
            let said = format!(
                "gsas-shmem: PE 0: shmem_malloc: symmetric heap exhausted: requested {} bytes",
                bytes * 4
            );
            // (The heap is whole pages.)
            let heap = format!(
                "the symmetric heap is {} bytes per PE",
                bytes.div_ceil(4096) * 4096
            );
            let lines: Vec<&str> = run
                .output
                .lines()
                .filter(|l| l.contains(": shmem_malloc: "))
                .collect();
            if lines.len() != 1 || !lines[0].contains(&said) || !lines[0].contains(&heap) {
                fail_run(
                    &label,
                    case,
                    &run,
                    &format!("want one line {said:?} ... {heap:?}, got {lines:?}"),
                );
            }
            check_run(&label, "env_size", case, &run, Expect::Success);
        }
    }
    // SHMEM_QUIET silences that line; the allocation still returns NULL (the program
    // checks it and succeeds).
    let case = cases[0];
    let (var, value, bytes) = valid[0];
    let run = run_case(
        &bin,
        &[&bytes.to_string()],
        &[(var, value), ("SHMEM_QUIET", "1")],
        case,
        daemons.as_ref(),
    );
    if run.output.contains(": shmem_malloc: ") {
        fail_run(
            "env_size SHMEM_QUIET",
            case,
            &run,
            "SHMEM_QUIET=1 printed the failed allocation",
        );
    }
    check_run(
        "env_size SHMEM_QUIET",
        "env_size",
        case,
        &run,
        Expect::Success,
    );
    // SHMEM_ wins over SMA_.
    let run = run_case(
        &bin,
        &[&(2u64 << 20).to_string()],
        &[("SHMEM_SYMMETRIC_SIZE", "2m"), ("SMA_SYMMETRIC_SIZE", "1k")],
        case,
        daemons.as_ref(),
    );
    check_run(
        "env_size SHMEM_ over SMA_",
        "env_size",
        case,
        &run,
        Expect::Success,
    );
    // Invalid values: initialisation refused (shmem_init_thread returns nonzero, or the
    // program is ended) with a message naming the variable.
    for value in ["lots", "-1m", "12q"] {
        let run = run_case(
            &bin,
            &["invalid"],
            &[("SHMEM_SYMMETRIC_SIZE", value)],
            case,
            daemons.as_ref(),
        );
        let refused_politely = run.status == Some(0)
            && (0..case.pes).all(|pe| {
                run.output
                    .contains(&format!("[{pe}] env_size: shmem_init_thread refused"))
            });
        let ended = run.status.is_some_and(|c| c != 0) && !run.output.contains("FAILED at");
        assert!(
            (refused_politely || ended) && run.output.contains("SHMEM_SYMMETRIC_SIZE"),
            "SHMEM_SYMMETRIC_SIZE={value:?} ({case}): init must fail with a message naming the \
             variable\nexit status {:?}\n--- output ---\n{}",
            run.status,
            run.output
        );
        report(&format!(
            "env_size SHMEM_SYMMETRIC_SIZE={value} {case} ... refused as expected ({:.1} s)",
            run.elapsed.as_secs_f64()
        ));
    }
}

/// Parses the symbol tables (OpenSHMEM 1.5's and the routines beyond it): the symbol of
/// every row.
fn tsv_symbols(root: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for table in [
        "openshmem-1.5-c-symbols.tsv",
        "gsas-beyond-1.5-c-symbols.tsv",
    ] {
        let path = root.join("docs/spec").join(table);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().expect("header line").split('\t').collect();
        assert_eq!(
            &header[..3],
            ["symbol", "family_template", "category"],
            "unexpected header of {}",
            path.display()
        );
        rows.extend(
            lines
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.split('\t').next().unwrap_or_default().to_owned()),
        );
    }
    rows
}

/// The profiling twin of a routine name: a `p` in front of the whole name.
fn twin(symbol: &str) -> String {
    format!("p{symbol}")
}

#[test]
fn shared_library_exports_exactly_the_interface() {
    let s = suite();
    let rows = tsv_symbols(&s.root);
    let lib = s.prefix.join("lib/libshmem.so");
    let out = run_with_timeout(
        Command::new(&s.nm)
            .arg("-D")
            .arg("--defined-only")
            .arg(&lib),
        Duration::from_secs(300),
    )
    .unwrap();
    assert!(
        out.status.success(),
        "{} -D {}: {}",
        s.nm,
        lib.display(),
        joined(&out)
    );
    let mut exported = BTreeSet::new();
    let mut data_objects = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut f = line.split_whitespace();
        let (Some(_addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name).to_owned();
        if matches!(kind, "D" | "B" | "R" | "V") {
            data_objects.insert(name.clone());
        }
        exported.insert(name);
    }
    let expected: BTreeSet<String> = rows
        .iter()
        .flat_map(|sym| [sym.clone(), twin(sym)])
        .collect();
    let missing: Vec<&String> = expected.difference(&exported).collect();
    let outside: Vec<&String> = exported
        .iter()
        .filter(|n| {
            !EXPORTED_PREFIXES.iter().any(|p| n.starts_with(p))
                && !EXPORTED_LEGACY.contains(&n.as_str())
        })
        .collect();
    report(&format!(
        "nm -D {}: {} symbols exported; the tables: {} routines + {} pshmem_ twins \
         expected, {} missing; {} exported outside the version script's patterns",
        lib.display(),
        exported.len(),
        expected.len() / 2,
        expected.len() / 2,
        missing.len(),
        outside.len()
    ));
    assert!(
        missing.is_empty(),
        "{} of {} expected symbols are not exported by {}, e.g. {:?}",
        missing.len(),
        expected.len(),
        lib.display(),
        missing.iter().take(20).collect::<Vec<_>>()
    );
    assert!(
        outside.is_empty(),
        "{} exports symbols outside shmem/tools/libshmem.map's patterns: {:?}",
        lib.display(),
        outside.iter().take(20).collect::<Vec<_>>()
    );
    for handle in [
        "gsas_shmem_ctx_default",
        "gsas_shmem_team_world",
        "gsas_shmem_team_shared",
    ] {
        assert!(
            data_objects.contains(handle),
            "the handle object {handle} is not exported as data"
        );
    }
}

/// Runs an installed wrapper with `args`; returns (status ok, stdout).
fn wrapper(name: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let s = suite();
    let mut cmd = Command::new(s.prefix.join("bin").join(name));
    cmd.args(args).current_dir(&s.build);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = run_with_timeout(&mut cmd, Duration::from_secs(300)).unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn wrappers_add_the_right_flags() {
    let s = suite();
    let inc = format!("-I{}", s.prefix.join("include").display());
    let libdir = s.prefix.join("lib");
    let dyn_link = format!(
        "-L{} -Wl,-rpath,{} -lshmem",
        libdir.display(),
        libdir.display()
    );
    // What scripts/install records: cc/c++ natively, the cross compilers for the boards.
    let (default_cc, default_cxx) = if cross() {
        ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++")
    } else {
        ("cc", "c++")
    };

    // Open MPI's double-dash spellings are the same modes.
    for dash in ["-", "--"] {
        let (ok, out, _) = wrapper("oshcc", &[&format!("{dash}showme:compile")], &[]);
        assert!(
            ok && out.trim() == inc,
            "oshcc {dash}showme:compile: {out:?}"
        );
        let (ok, out, _) = wrapper("oshcc", &[&format!("{dash}showme:link")], &[]);
        assert!(
            ok && out.trim() == dyn_link,
            "oshcc {dash}showme:link: {out:?}"
        );
    }
    let (ok, out, _) = wrapper("oshcc", &["--showme", "-c", "app.c"], &[]);
    assert!(
        ok && out.trim().ends_with(&format!("{inc} -c app.c")),
        "oshcc --showme: {out:?}"
    );
    let (ok, out, _) = wrapper("oshcc", &["-static-shmem", "-showme:link"], &[]);
    assert!(
        ok && out
            .trim()
            .starts_with(&format!("{}/libshmem.a ", libdir.display()))
            && out.contains("-lpthread")
            && !out.contains("-lshmem"),
        "oshcc -static-shmem -showme:link: {out:?}"
    );
    // Linking: compiler, -I, the arguments, then the library flags.
    let (ok, out, _) = wrapper("oshcc", &["-showme", "-O2", "app.c", "-o", "app"], &[]);
    assert!(
        ok && out.trim() == format!("{default_cc} {inc} -O2 app.c -o app {dyn_link}"),
        "oshcc -showme (link): {out:?}"
    );
    // Compiling only: just -I.
    for stop in ["-c", "-E", "-S", "-M", "-MM"] {
        let (ok, out, _) = wrapper("oshcc", &["-showme", stop, "app.c"], &[]);
        assert!(
            ok && out.trim() == format!("{default_cc} {inc} {stop} app.c"),
            "oshcc -showme {stop}: {out:?}"
        );
    }
    // Arguments with spaces and quotes are shown quoted for a shell.
    let (ok, out, _) = wrapper(
        "oshcc",
        &["-showme", "-c", "-DMSG=\"a b\"", "my app.c"],
        &[],
    );
    assert!(
        ok && out.trim() == format!("{default_cc} {inc} -c '-DMSG=\"a b\"' 'my app.c'"),
        "oshcc -showme quoting: {out:?}"
    );
    // The compiler variables.
    let (ok, out, _) = wrapper(
        "oshcc",
        &["-showme", "-c", "x.c"],
        &[("OSHCC_CC", "clang-99")],
    );
    assert!(
        ok && out.starts_with("clang-99 "),
        "OSHCC_CC ignored: {out:?}"
    );
    let (ok, out, _) = wrapper("oshc++", &["-showme", "x.cpp"], &[]);
    assert!(
        ok && out.trim() == format!("{default_cxx} {inc} x.cpp {dyn_link}"),
        "oshc++ -showme: {out:?}"
    );
    let (ok, out, _) = wrapper(
        "oshc++",
        &["-showme", "-c", "x.cpp"],
        &[("OSHCXX_CXX", "g++-99")],
    );
    assert!(
        ok && out.starts_with("g++-99 "),
        "OSHCXX_CXX ignored: {out:?}"
    );
    // No input file: no link flags (e.g. --version).
    let (ok, out, _) = wrapper("oshcc", &["-showme", "--version"], &[]);
    assert!(
        ok && out.trim() == format!("{default_cc} {inc} --version"),
        "{out:?}"
    );
    let (ok, _, err) = wrapper("oshcc", &["-showme:everything"], &[]);
    assert!(
        !ok && err.contains("unknown option"),
        "bad -showme: {err:?}"
    );
    // A real compile-only run and a real link through the wrappers.
    let (ok, _, err) = wrapper(
        "oshcc",
        &[
            "-c",
            "-std=c11",
            "-o",
            "probe.o",
            &s.root.join("shmem/tests/c/legacy.c").display().to_string(),
        ],
        &[],
    );
    assert!(ok, "oshcc -c: {err}");
    let (ok, _, err) = wrapper("oshcc", &["probe.o", "-o", "probe"], &[]);
    assert!(ok, "oshcc linking an object: {err}");
    assert!(s.build.join("probe").is_file());

    // The pkg-config file describes the same installation.
    let pc = std::fs::read_to_string(libdir.join("pkgconfig/gsas-shmem.pc")).unwrap();
    assert!(
        pc.contains(&format!("prefix={}", s.prefix.display())),
        "{pc}"
    );
    assert!(
        pc.contains("Libs: -L${libdir} -Wl,-rpath,${libdir} -lshmem"),
        "{pc}"
    );
    assert!(pc.contains("Cflags: -I${includedir}"), "{pc}");
    if which("pkg-config") {
        let o = run_with_timeout(
            Command::new("pkg-config")
                .args(["--cflags", "--libs", "gsas-shmem"])
                .env("PKG_CONFIG_PATH", libdir.join("pkgconfig")),
            Duration::from_secs(60),
        )
        .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && text.contains(&inc) && text.contains("-lshmem"),
            "{text}"
        );
    }
    // The headers and the library links are in place.
    for h in [
        "shmem.h",
        "shmemx.h",
        "pshmem.h",
        "mpp/shmem.h",
        "mpp/shmemx.h",
    ] {
        assert!(
            s.prefix.join("include").join(h).is_file(),
            "include/{h} missing"
        );
    }
    for l in ["libshmem.so", "libshmem.a"] {
        assert!(libdir.join(l).is_file(), "lib/{l} missing");
    }
    for b in ["oshcc", "oshc++", "oshrun", "gshrun", "gsas-atomicd"] {
        assert!(s.prefix.join("bin").join(b).is_file(), "bin/{b} missing");
    }
}

/// The names other implementations install (Sandia OpenSHMEM's `oshcxx`, Open MPI's
/// `shmemcc`, `shmemc++`, `shmemcxx`, `shmemrun`) are links to our wrappers and launcher:
/// they print the same commands, and a program built with `shmemcc` runs under `shmemrun`
/// (with the job status of `shmem_global_exit`, 0 and 7).
#[test]
fn other_implementations_names() {
    let s = suite();
    let bin = s.prefix.join("bin");
    for (alias, target) in [
        ("oshcxx", "oshc++"),
        ("shmemcc", "oshcc"),
        ("shmemc++", "oshc++"),
        ("shmemcxx", "oshc++"),
        ("shmemrun", "oshrun"),
        ("gshrun", "oshrun"),
        ("oshmem_info", "gsas-info"),
    ] {
        let link = std::fs::read_link(bin.join(alias))
            .unwrap_or_else(|e| panic!("bin/{alias} is not a link: {e}"));
        assert_eq!(link, Path::new(target), "bin/{alias}");
        if target.starts_with("osh") && target != "oshrun" {
            let args = ["-showme", "-O2", "app.c", "-o", "app"];
            assert_eq!(
                wrapper(alias, &args, &[]),
                wrapper(target, &args, &[]),
                "{alias} -showme differs from {target} -showme"
            );
        }
    }
    // gshrun is a link too, but calls itself gshrun; shmemrun keeps oshrun's name.
    for (name, usage) in [
        ("gshrun", "Usage: gshrun -n N"),
        ("shmemrun", "Usage: oshrun -n N"),
    ] {
        let o = run_with_timeout(
            launch().command(bin.join(name)).arg("--help"),
            Duration::from_secs(300),
        )
        .unwrap();
        assert!(joined(&o).contains(usage), "{name} --help: {}", joined(&o));
    }
    let o = run_with_timeout(
        launch().command(bin.join("shmemrun")).arg("--version"),
        Duration::from_secs(300),
    )
    .unwrap();
    assert!(
        o.status.success() && joined(&o).contains(env!("CARGO_PKG_VERSION")),
        "shmemrun --version: {}",
        joined(&o)
    );
    // A real build with shmemcc and runs with shmemrun.
    let prog = s.build.join("global_exit-shmemcc");
    let (ok, _, err) = wrapper(
        "shmemcc",
        &[
            "-std=c11",
            "-Wall",
            "-Werror",
            &s.root
                .join("shmem/tests/c/global_exit.c")
                .display()
                .to_string(),
            "-o",
            &prog.display().to_string(),
        ],
        &[],
    );
    assert!(ok, "shmemcc global_exit.c: {err}");
    for status in [0, 7] {
        let mut cmd = launch().command(bin.join("shmemrun"));
        cmd.args(["-n", "2", "--timeout", &s.job_limit.to_string(), "--"])
            .args(launch().prefix())
            .arg(&prog)
            .arg(status.to_string());
        global_exit_job(&format!("shmemrun global_exit({status})"), cmd, status);
    }
}

/// The installed `gsas-info` (and `oshmem_info`) describes this installation: the version,
/// the OpenSHMEM version the library reports at run time (`shmem_info_get_version` in
/// `setup_query`, and the crate's constants), the prefix, the build the install recorded,
/// the verbs transport as built, and every variable's default; bad arguments are refused.
#[test]
fn gsas_info_describes_the_installation() {
    let s = suite();
    let bin = s.prefix.join("bin");
    let info = |name: &str, args: &[&str]| {
        run_with_timeout(
            launch().command(bin.join(name)).args(args),
            Duration::from_secs(120),
        )
        .unwrap()
    };
    let o = info("gsas-info", &["--parsable"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", joined(&o));
    let want = [
        format!("gsas:version:{}", env!("CARGO_PKG_VERSION")),
        format!(
            "openshmem:version:{}.{}",
            shmem::MAJOR_VERSION,
            shmem::MINOR_VERSION
        ),
        format!(
            "install:prefix:{}",
            s.prefix.canonicalize().unwrap().display()
        ),
        format!("build:version:{}", env!("CARGO_PKG_VERSION")),
        "limit:pes_per_job:65536".to_string(),
    ];
    for line in &want {
        assert!(out.lines().any(|l| l == line), "no {line:?} in\n{out}");
    }
    let built = std::fs::read_to_string(s.prefix.join("share/gsas/build-info")).unwrap();
    let verbs_on = built.lines().any(|l| l == "verbs=on");
    assert!(
        out.lines()
            .any(|l| l.starts_with("transport:verbs:") && l.contains("yes") == verbs_on),
        "{out}"
    );
    let shmem_vars = ["SHMEM_SYMMETRIC_SIZE", "SHMEM_DEBUG", "SHMEM_WAIT_TIMEOUT"];
    for name in gsas_transport::config::VARS
        .iter()
        .map(|v| v.name)
        .chain(shmem_vars)
    {
        assert!(out.contains(&format!("default:{name}:")), "{name}: {out}");
    }
    // Open MPI's name prints the same; the human form has its sections; bad input exits 2.
    assert_eq!(
        String::from_utf8_lossy(&info("oshmem_info", &["--parsable"]).stdout),
        out
    );
    let human = String::from_utf8_lossy(&info("gsas-info", &[]).stdout).into_owned();
    assert!(
        human.contains("OpenSHMEM\n") && human.contains("Transports\n"),
        "{human}"
    );
    assert_eq!(info("gsas-info", &["--bogus"]).status.code(), Some(2));
}

/// The install carries the man pages (oshrun(1) with gshrun and shmemrun, oshcc(1) with
/// the other wrapper names, gsas-info(1) with oshmem_info, gsas-atomicd(8)), versioned,
/// rendered by groff without a warning and found by `man` under the prefix's MANPATH, and
/// the user documentation under share/doc/gsas.
#[test]
fn man_pages_and_docs_are_installed() {
    let s = suite();
    let man = s.prefix.join("share/man");
    let pages = [
        ("man1", "oshrun.1"),
        ("man1", "gshrun.1"),
        ("man1", "shmemrun.1"),
        ("man1", "oshcc.1"),
        ("man1", "oshc++.1"),
        ("man1", "shmemcc.1"),
        ("man1", "gsas-info.1"),
        ("man1", "oshmem_info.1"),
        ("man8", "gsas-atomicd.8"),
    ];
    for (dir, page) in pages {
        let text = std::fs::read_to_string(man.join(dir).join(page))
            .unwrap_or_else(|e| panic!("share/man/{dir}/{page}: {e}"));
        assert!(
            text.contains(&format!("\"gsas {}\"", env!("CARGO_PKG_VERSION")))
                && !text.contains("@VERSION@"),
            "share/man/{dir}/{page} is not versioned: {}",
            text.lines().next().unwrap_or("")
        );
    }
    for doc in [
        "README.md",
        "runtime.md",
        "slurm.md",
        "bench.md",
        "verbs.md",
        "exanet.md",
    ] {
        assert!(
            s.prefix.join("share/doc/gsas").join(doc).is_file(),
            "share/doc/gsas/{doc} missing"
        );
    }
    let groff = Command::new("groff").arg("-v").output();
    if groff.is_err() {
        gsas_tests::skip::note(
            "c_suite::man_pages_and_docs_are_installed (rendering)",
            "groff is not installed (Debian: groff-base)",
        );
        return;
    }
    for (dir, page) in pages {
        let o = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(man.join(dir).join(page))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && err.is_empty(), "{page}: {err}");
    }
    if Command::new("man").arg("--version").output().is_ok() {
        for (section, name) in [("1", "oshrun"), ("1", "shmemrun"), ("8", "gsas-atomicd")] {
            let o = Command::new("man")
                .args(["-w", section, name])
                .env("MANPATH", &man)
                .output()
                .unwrap();
            let found = String::from_utf8_lossy(&o.stdout);
            // (A name that is a link is shown as the page it links to.)
            assert!(
                o.status.success()
                    && found.starts_with(&*man.to_string_lossy())
                    && found.trim_end().ends_with(&format!(".{section}")),
                "man -w {section} {name}: {found}{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// A program built with Open MPI's `oshcc` is named before it starts under gsas's
/// `oshrun` (its PEs would each run alone as PE 0 of 1): the warning names the library and
/// what to do. Its PEs' own fate under a launcher they do not speak to is not checked.
#[test]
fn an_open_mpi_program_is_named_as_such() {
    const TEST: &str = "c_suite::an_open_mpi_program_is_named_as_such";
    let ompi_cc = Path::new("/usr/bin/oshcc");
    if !ompi_cc.exists() {
        gsas_tests::skip::note(TEST, "Open MPI's /usr/bin/oshcc is not installed");
        return;
    }
    let s = suite();
    if s.emulated {
        gsas_tests::skip::note(TEST, "Open MPI's oshcc builds for the host, not the board");
        return;
    }
    let prog = s.build.join("hello-ompi");
    let src = s.build.join("hello-ompi.c");
    std::fs::write(
        &src,
        "#include <shmem.h>\n#include <stdio.h>\nint main(void) { shmem_init(); \
         printf(\"PE %d of %d\\n\", shmem_my_pe(), shmem_n_pes()); shmem_finalize(); \
         return 0; }\n",
    )
    .unwrap();
    let o = Command::new(ompi_cc)
        .arg(&src)
        .arg("-o")
        .arg(&prog)
        .output()
        .unwrap();
    assert!(o.status.success(), "Open MPI's oshcc: {}", joined(&o));
    let o = run_with_timeout(
        launch()
            .command(s.prefix.join("bin/oshrun"))
            .args(["-n", "2", "--timeout", "120", "--"])
            .arg(&prog)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
        Duration::from_secs(300),
    )
    .unwrap();
    let out = joined(&o);
    assert!(
        out.contains("is linked with Open MPI's liboshmem.so")
            && out.contains("Build it with gsas's oshcc"),
        "{out}"
    );
}

/// The installed binaries and libshmem.so carry no DWARF (scripts/install splits it off):
/// each names its debug file in `.gnu_debuglink`, and that file, in `.debug/` beside it,
/// holds the DWARF under the same build id; libshmem.a has none, lib/.debug/libshmem.a all.
#[test]
fn installed_binaries_keep_their_debug_information_apart() {
    let s = suite();
    let readelf = |args: &[&str], file: &Path| {
        let o = Command::new("readelf")
            .args(args)
            .arg(file)
            .output()
            .unwrap();
        assert!(o.status.success(), "readelf {args:?} {}", file.display());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let build_id = |file: &Path| {
        readelf(&["-n"], file)
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
            .unwrap_or_else(|| panic!("{} has no build id", file.display()))
    };
    let so = std::fs::canonicalize(s.prefix.join("lib/libshmem.so")).unwrap();
    let files = ["bin/oshrun", "bin/gsas-atomicd", "bin/gsas-info"]
        .map(|b| s.prefix.join(b))
        .into_iter()
        .chain([so]);
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let sections = readelf(&["-S", "-W"], &file);
        assert!(
            !sections.contains(".debug_info"),
            "{name} still has its DWARF"
        );
        let link = readelf(&["--string-dump=.gnu_debuglink"], &file);
        assert!(link.contains(&format!("{name}.debug")), "{name}: {link}");
        let dbg = file
            .parent()
            .unwrap()
            .join(".debug")
            .join(format!("{name}.debug"));
        assert!(
            readelf(&["-S", "-W"], &dbg).contains(".debug_info"),
            "{} holds no DWARF",
            dbg.display()
        );
        assert_eq!(build_id(&dbg), build_id(&file), "{name} and its debug file");
    }
    let lib = s.prefix.join("lib");
    assert!(!readelf(&["-S", "-W"], &lib.join("libshmem.a")).contains(".debug_info"));
    assert!(readelf(&["-S", "-W"], &lib.join(".debug/libshmem.a")).contains(".debug_info"));
}

#[test]
fn install_twice_changes_nothing() {
    let s = suite();
    assert!(
        s.install_log.contains("installed") || s.install_log.contains("unchanged"),
        "{}",
        s.install_log
    );
    let lib = s.prefix.join("lib/libshmem.a");
    let before = std::fs::metadata(&lib).unwrap().modified().unwrap();
    let out = run_with_timeout(
        &mut gsas_tests::install::command(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let log = joined(&out);
    assert!(out.status.success(), "second install failed:\n{log}");
    assert!(
        log.contains("(0 changed)"),
        "a second install changed files:\n{log}"
    );
    assert!(!log.contains("  installed "), "{log}");
    assert_eq!(
        std::fs::metadata(&lib).unwrap().modified().unwrap(),
        before,
        "the second install touched lib/libshmem.a"
    );
    // Bad arguments are refused with a message and status 2.
    let o = run_with_timeout(
        Command::new("bash")
            .arg(s.root.join("scripts/install"))
            .args(["--prefix", "/tmp/x", "--target", "mips-unknown-linux-gnu"]),
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", joined(&o));
    assert!(joined(&o).contains("unsupported target"), "{}", joined(&o));
    let o = run_with_timeout(
        Command::new("bash").arg(s.root.join("scripts/install")),
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        joined(&o).contains("--prefix DIR is required"),
        "{}",
        joined(&o)
    );
}

/// The installed launcher under Open MPI's name takes an Open MPI script's command line:
/// `-np`, `-x VAR=VALUE` (reaching every PE), `--oversubscribe`, `--map-by slot` and
/// `--bind-to none` silently, `--bind-to core` with a note; `--hostfile` and `--map-by
/// ppr:K:node` without a cluster file are refused before anything starts, saying what
/// to use instead.
#[test]
fn the_installed_shmemrun_takes_open_mpi_command_lines() {
    let s = suite();
    let shmemrun = |args: &[&str]| {
        let o = run_with_timeout(
            launch()
                .command(s.prefix.join("bin/shmemrun"))
                .args(args)
                .current_dir(&s.build),
            Duration::from_secs(300),
        )
        .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        (
            o.status.code(),
            out,
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, out, err) = shmemrun(&[
        "-np",
        "3",
        "-x",
        "GSAS_T_FROM_X=exported",
        "--oversubscribe",
        "--map-by",
        "slot",
        "--bind-to",
        "none",
        "--bind-to",
        "core",
        "sh",
        "-c",
        "echo \"PE $PMI_RANK: $GSAS_T_FROM_X\"",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    for r in 0..3 {
        assert!(out.contains(&format!("PE {r}: exported")), "{out}{err}");
    }
    assert!(err.contains("note: --bind-to core: ignored"), "{err}");
    assert_eq!(err.matches("note:").count(), 1, "{err}");
    let (code, _, err) = shmemrun(&["-np", "2", "--hostfile", "hosts", "true"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--hostfile") && err.contains("--config FILE"),
        "{err}"
    );
    let (code, _, err) = shmemrun(&["-np", "4", "--map-by", "ppr:2:node", "true"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--config FILE or a Slurm allocation"), "{err}");
}
