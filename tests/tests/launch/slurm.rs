//! OpenSHMEM jobs started by a real Slurm: `srun --mpi=pmi2` over four nodes, then sixteen.
//!
//! **What it is.** One test that starts a Slurm cluster of its own from Debian's packages
//! (`slurmctld`, `slurmd`, `slurm-client`, `munge`), runs jobs on it and tears it down:
//!
//! * four nodes `sn0`..`sn3`, each `slurmd -D` in a network namespace of its own with its
//!   own veth address (10.203.0.11-14 on a bridge in one more namespace), host name and
//!   `/etc/hosts` (a private UTS and mount namespace, `unshare --uts --mount`); `slurmctld
//!   -D` and every `srun`/`sinfo` in a fifth namespace (10.203.0.1), so nothing touches the
//!   machine's own network; `munged -F` with a fresh key; every file (configuration,
//!   state, logs, sockets) in one scratch directory; all daemons in the foreground as
//!   children of this test (`docs/slurm.md` says why each piece is so);
//! * the OpenSHMEM C programs `rma_types` and `coll_sync` of `shmem/tests/c/`, built
//!   with the installed `oshcc` (the C suite's installation, `scripts/install --debug`),
//!   as `srun --mpi=pmi2 -K -N 4 -n 8` (Slurm places them 4+2+1+1) and `-m cyclic`; the
//!   PEs bootstrap through PMI-2, take their nodes from `PMI_process_mapping`, and each
//!   node's first PE hosts the node's atomic service (no `gsas-atomicd` runs: an srun job
//!   needs none); with no cluster file the datagrams have the default size, larger than
//!   the veths' MTU of 1500, and each node's first PE warns of it once (checked);
//! * the same over PMIx, `srun --mpi=pmix` (the PEs load the system's libpmix at run
//!   time; each node's PMIx plugin gets a directory of its own through an `mpi.conf`
//!   beside the node's copy of `slurm.conf`);
//! * the installed `oshrun` inside an allocation: `salloc -N 4 -n 8 oshrun -n 8 rma_types`
//!   and an `sbatch` script running `oshrun -n 8 rma_types`: oshrun starts a
//!   `gsas-atomicd` per node as one step, the PEs as another (`srun --mpi=pmi2
//!   --kill-on-bad-exit=1`), and stops the services with `scancel --signal=TERM`; the
//!   test checks that the PEs used them (no embedded service), and that afterwards no
//!   daemon runs and no socket is left;
//! * a PE killed with SIGKILL in the middle of a job, under `srun -K` and under
//!   `oshrun` in an `salloc`: the job ends non-zero and srun names the task (under
//!   `oshrun`, its node services are stopped too);
//! * `srun --mpi=none -n 2`: both PEs stop with the message that names `--mpi=pmi2`;
//! * then a second cluster of sixteen nodes (`sn0`..`sn15`, 10.203.0.11-26), where 32 PEs
//!   of a small program (a put to the right neighbour, an atomic add into every other PE,
//!   a broadcast and a sum reduction, each checked) run as `srun --mpi=pmi2 -K -N 16 -n
//!   32`, in blocks and `-m cyclic`, and as `salloc -N 16 -n 32 oshrun -n 32` (a service
//!   step on all sixteen nodes).
//!
//! Needs root, x86_64 and the Slurm packages (`.ci/run` installs them). Otherwise the test
//! prints `SKIPPED: slurm_cluster: <reason>` on standard error and returns; with
//! `GSAS_REQUIRE_SLURM=1` a skip is a failure. The daemons, every process left in the
//! node namespaces, the namespaces and the scratch directory are removed by a guard even
//! when a step fails (the scratch directory is kept, and the daemons' logs printed, on
//! failure). The whole test takes about 65 s on the 2-core machine (the sixteen-node part
//! 25 s of it), 150 s or more when other builds load it.
//!
//! **What it is not.** A test of Slurm itself.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gsas_tests::launch::{run_with_timeout, wait_timeout};

/// Nodes of the cluster of most jobs.
const NODES: usize = 4;
/// Nodes of the large cluster the last jobs run on.
const LARGE: usize = 16;
/// Prefix of the namespaces and interfaces (followed by this process's id).
const PREFIX: &str = "gsl";
/// The controller's address; node `i` is `10.203.0.(11 + i)`.
const CTL_ADDR: &str = "10.203.0.1";
/// Longest any one job may take.
const JOB_LIMIT: Duration = Duration::from_secs(90);

/// Prints a line on stderr at once (outside libtest's capture).
fn report(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "slurm: {line}");
}

fn which(program: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// Why the test cannot run here, if it cannot.
fn skip_reason() -> Option<String> {
    if !cfg!(target_arch = "x86_64") {
        return Some("the Slurm stage runs on x86_64 only (Debian's Slurm for the host)".into());
    }
    if !gsas_tests::skip::is_root() {
        return Some("not running as root (namespaces and slurmd need it)".into());
    }
    let missing: Vec<&str> = [
        "slurmctld",
        "slurmd",
        "srun",
        "sinfo",
        "munged",
        "mungekey",
        "nsenter",
        "unshare",
        "ip",
    ]
    .into_iter()
    .filter(|p| which(p).is_none())
    .collect();
    if !missing.is_empty() {
        return Some(format!(
            "{} not installed (Debian: slurm-wlm slurmctld slurmd slurm-client munge iproute2 util-linux; .ci/run installs them)",
            missing.join(", ")
        ));
    }
    None
}

fn run(cmd: &mut Command, what: &str) -> Result<Output, String> {
    let out = run_with_timeout(cmd.stdin(Stdio::null()), Duration::from_secs(60))
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{what}: {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    run(
        Command::new("ip").args(args),
        &format!("ip {}", args.join(" ")),
    )
    .map(drop)
}

/// The cluster: daemons, namespaces and scratch directory, all removed on drop.
struct Lab {
    dir: PathBuf,
    tag: String,
    /// Its node count: nodes `sn0`.. at `10.203.0.11`..
    nodes: usize,
    namespaces: Vec<String>,
    daemons: Vec<(String, Child)>,
    ok: bool,
}

impl Lab {
    fn ns_path(&self, name: &str) -> String {
        format!("/run/netns/{}{name}", self.tag)
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// A Slurm client command (`srun`, `sinfo`, ...) in the controller's namespace.
    fn client(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.ns_path("ctl")))
            .arg(program)
            .env("SLURM_CONF", self.conf())
            .current_dir(&self.dir);
        c
    }

    /// Starts a daemon (foreground) as a child of the test, output into `<name>.out`.
    fn daemon(&mut self, name: &str, mut cmd: Command) -> Result<(), String> {
        let out = std::fs::File::create(self.dir.join(format!("{name}.out")))
            .map_err(|e| format!("{name}.out: {e}"))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        self.daemons.push((name.to_owned(), child));
        Ok(())
    }

    fn namespace(&mut self, name: &str) -> Result<String, String> {
        let full = format!("{}{name}", self.tag);
        ip(&["netns", "add", &full])?;
        self.namespaces.push(full.clone());
        Ok(full)
    }

    /// A cluster of `nodes` nodes.
    fn up(nodes: usize) -> Result<Lab, String> {
        gsas_tests::launch::remove_stale_namespaces(PREFIX);
        let pid = std::process::id();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("slurm-lab-{pid}-{nodes}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).map_err(|e| format!("{dir:?}: {e}"))?;
        let mut lab = Lab {
            dir,
            tag: format!("{PREFIX}{pid}"),
            nodes,
            namespaces: Vec::new(),
            daemons: Vec::new(),
            ok: false,
        };
        let d = lab.dir.clone();
        let tag = lab.tag.clone();

        // Network: a bridge namespace, the controller's namespace, one per node.
        let br = lab.namespace("br")?;
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        let mut hosts = format!("127.0.0.1 localhost\n{CTL_ADDR} gsasctl\n");
        let names: Vec<String> = std::iter::once("ctl".to_owned())
            .chain((0..nodes).map(|i| format!("n{i}")))
            .collect();
        for (i, name) in names.iter().enumerate() {
            let ns = lab.namespace(name)?;
            let addr = if i == 0 {
                CTL_ADDR.to_owned()
            } else {
                format!("10.203.0.{}", 10 + i)
            };
            let (inner, outer) = (format!("{tag}v{i}"), format!("{tag}p{i}"));
            ip(&[
                "link", "add", &inner, "netns", &ns, "type", "veth", "peer", "name", &outer,
                "netns", &br,
            ])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                &inner,
            ])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &br, "link", "set", &outer, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &outer, "up"])?;
            if i > 0 {
                hosts.push_str(&format!("{addr} sn{}\n", i - 1));
            }
        }
        let write = |name: &str, text: &str| {
            std::fs::write(d.join(name), text).map_err(|e| format!("writing {name}: {e}"))
        };
        write("hosts", &hosts)?;
        write("slurm.conf", &slurm_conf(&d, nodes))?;
        // Each node reads its own directory: the same slurm.conf, and an mpi.conf that
        // gives its PMIx plugin a directory of its own (the nodes share /tmp).
        for i in 0..nodes {
            let node_dir = d.join(format!("sn{i}"));
            std::fs::create_dir_all(node_dir.join("pmix"))
                .map_err(|e| format!("{}: {e}", node_dir.display()))?;
            write(&format!("sn{i}/slurm.conf"), &slurm_conf(&d, nodes))?;
            write(
                &format!("sn{i}/mpi.conf"),
                &format!("PMIxCliTmpDirBase={}\n", node_dir.join("pmix").display()),
            )?;
        }

        // munge with a fresh key.
        let key = d.join("munge.key");
        run(
            Command::new("mungekey")
                .arg("--create")
                .arg(format!("--keyfile={}", key.display())),
            "mungekey",
        )?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| e.to_string())?;
        let mut munged = Command::new("munged");
        munged
            .args(["-F", "-f"])
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--socket={}", d.join("munge.sock").display()))
            .arg(format!("--pid-file={}", d.join("munged.pid").display()))
            .arg(format!("--log-file={}", d.join("munged.log").display()))
            .arg(format!("--seed-file={}", d.join("munge.seed").display()));
        lab.daemon("munged", munged)?;
        wait_for(Duration::from_secs(10), "the munge socket", || {
            d.join("munge.sock").exists()
        })?;

        // slurmctld and the slurmds, each with its host name and hosts file.
        let conf = lab.conf();
        let in_host = |ns: String, host: &str, daemon: &str| {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={ns}")).args([
                "unshare",
                "--uts",
                "--mount",
                "sh",
                "-c",
                &format!(
                    "mount --bind {hosts} /etc/hosts && hostname {host} && exec {daemon}",
                    hosts = d.join("hosts").display()
                ),
            ]);
            c
        };
        let ctl = in_host(
            lab.ns_path("ctl"),
            "gsasctl",
            &format!("slurmctld -D -i -f {}", conf.display()),
        );
        lab.daemon("slurmctld", ctl)?;
        for i in 0..nodes {
            let node = in_host(
                lab.ns_path(&format!("n{i}")),
                &format!("sn{i}"),
                &format!("slurmd -D -N sn{i} -f {}/sn{i}/slurm.conf", d.display()),
            );
            lab.daemon(&format!("slurmd-sn{i}"), node)?;
        }
        let t0 = Instant::now();
        let idle = format!("idle {nodes}");
        wait_for(
            Duration::from_secs(60),
            &format!("{nodes} idle nodes in sinfo"),
            || {
                lab.client("sinfo")
                    .args(["-h", "-o", "%T %D"])
                    .stderr(Stdio::null())
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == idle)
            },
        )?;
        report(&format!(
            "cluster of {nodes} nodes up in {:.1} s ({})",
            t0.elapsed().as_secs_f64(),
            lab.dir.display()
        ));
        Ok(lab)
    }

    /// Runs `srun ARGS` in the controller's namespace, bounded by [`JOB_LIMIT`], with
    /// `env` added to the environment srun exports to the tasks.
    fn srun(&self, args: &[&str], env: &[(&str, &str)]) -> Result<Output, String> {
        let mut c = self.client("srun");
        c.args(args).stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        run_with_timeout(&mut c, JOB_LIMIT).map_err(|e| format!("srun {}: {e}", args.join(" ")))
    }

    /// The processes in the nodes' network namespaces (PEs, slurmstepd, services), the
    /// slurmd daemons excepted, whose command name is `comm` (any when empty).
    fn node_processes(&self, comm: &str) -> Vec<u32> {
        let inodes: Vec<u64> = (0..self.nodes)
            .filter_map(|i| ns_inode(&self.ns_path(&format!("n{i}"))))
            .collect();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let daemons: Vec<u32> = self.daemons.iter().map(|(_, c)| c.id()).collect();
        procs
            .flatten()
            .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| !daemons.contains(pid))
            .filter(|pid| {
                ns_inode(&format!("/proc/{pid}/ns/net")).is_some_and(|i| inodes.contains(&i))
            })
            .filter(|pid| {
                comm.is_empty()
                    || std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.trim() == comm)
            })
            .collect()
    }

    /// Kills what a failed step left in the nodes' namespaces.
    fn kill_node_processes(&self) {
        for pid in self.node_processes("") {
            // SAFETY: kill has no memory effects; the pid was just read from /proc and
            // lives in one of this test's own namespaces.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.kill_node_processes();
        // Daemons in reverse order of start: SIGTERM, then SIGKILL after 5 s.
        while let Some((name, mut child)) = self.daemons.pop() {
            // SAFETY: kill has no memory effects; the pid is our own child's.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            if wait_timeout(&mut child, Duration::from_secs(5)).is_err() {
                let _ = child.kill();
                let _ = child.wait();
                eprintln!("cleanup: {name} needed SIGKILL");
            }
        }
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("cleanup: {e}");
            }
        }
        if self.ok {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            for log in [
                "slurmctld.log",
                "slurmd-sn0.log",
                "slurmd-sn1.log",
                "slurmctld.out",
            ] {
                let text = std::fs::read_to_string(self.dir.join(log)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                eprintln!("--- {log} (last lines)");
                for l in tail.into_iter().rev() {
                    eprintln!("{l}");
                }
            }
            eprintln!("slurm: scratch directory kept: {}", self.dir.display());
        }
    }
}

fn ns_inode(path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

fn wait_for(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("no {what} within {} s", limit.as_secs()))
}

fn slurm_conf(d: &Path, nodes: usize) -> String {
    let d = d.display();
    let mut s = format!(
        "ClusterName=gsaslab
SlurmctldHost=gsasctl({CTL_ADDR})
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SchedulerType=sched/builtin
KillWait=2
"
    );
    for i in 0..nodes {
        s.push_str(&format!(
            "NodeName=sn{i} NodeAddr=10.203.0.{} CPUs=4\n",
            11 + i
        ));
    }
    s.push_str(&format!(
        "PartitionName=lab Nodes=sn[0-{}] Default=YES MaxTime=INFINITE State=UP\n",
        nodes - 1
    ));
    s
}

/// The C suite's installation (the kit's `install`; nothing is rebuilt when the test
/// command already built it).
fn install() -> Result<PathBuf, String> {
    gsas_tests::install::install()?;
    Ok(gsas_tests::install::prefix())
}

/// A program that PEs keep running (a barrier every 100 ms for a minute) after printing
/// their pid: the victim of the kill test.
const VICTIM_C: &str = r#"#include <shmem.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    shmem_barrier_all();
    printf("victim: PE %d of %d pid %d ready\n", me, n, (int)getpid());
    fflush(stdout);
    for (int i = 0; i < 600; i++) {
        shmem_barrier_all();
        usleep(100000);
    }
    shmem_finalize();
    return 0;
}
"#;

/// The program of the sixteen-node jobs: every PE puts its rank into its right
/// neighbour and adds one to a counter on every other PE (so every pair of nodes
/// exchanges), then checks both, a broadcast from the last PE and a sum reduction. Light
/// on purpose: 32 PEs of a debug build on two cores, where `rma_types` (hundreds of
/// barriers) did not finish within [`JOB_LIMIT`].
const RING_C: &str = r#"#include <shmem.h>
#include <stdio.h>
int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    static long from_left = -1, counter = 0, bsrc = 0, bcast = 0, sum = 0, mine;
    shmem_long_p(&from_left, me, (me + 1) % n);
    for (int k = 1; k < n; k++)
        shmem_long_atomic_add(&counter, 1, (me + k) % n);
    shmem_barrier_all();
    int ok = from_left == (me + n - 1) % n && shmem_long_atomic_fetch(&counter, me) == n - 1;
    if (me == n - 1)
        bsrc = 4242;
    shmem_long_broadcast(SHMEM_TEAM_WORLD, &bcast, &bsrc, 1, n - 1);
    mine = me;
    shmem_long_sum_reduce(SHMEM_TEAM_WORLD, &sum, &mine, 1);
    ok = ok && bcast == 4242 && sum == (long)n * (n - 1) / 2;
    if (ok)
        printf("ring: PE %d of %d: ok\n", me, n);
    else
        printf("ring: PE %d of %d: FAILED (left %ld counter %ld bcast %ld sum %ld)\n", me, n,
               from_left, counter, bcast, sum);
    fflush(stdout);
    shmem_finalize();
    return ok ? 0 : 1;
}
"#;

fn build(prefix: &Path, source: &Path, out: &Path) -> Result<(), String> {
    run(
        Command::new(prefix.join("bin/oshcc"))
            .arg(source)
            .arg("-o")
            .arg(out),
        &format!("oshcc {}", source.display()),
    )
    .map(drop)
}

fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A job of `program` that must pass, started by `srun ARGS PROGRAM`.
fn passing_job(
    lab: &Lab,
    program: &Path,
    args: &[&str],
    pes: u32,
    protocol: &str,
) -> Result<(), String> {
    let t0 = Instant::now();
    let mut all = args.to_vec();
    let p = program.to_string_lossy().into_owned();
    all.push(&p);
    let out = lab.srun(&all, &[("GSAS_LOG", "info")])?;
    let name = program.file_name().unwrap_or_default().to_string_lossy();
    let what = format!("srun {}", all.join(" "));
    check_passed(
        &what,
        &out,
        (&name, lab.nodes, pes),
        protocol,
        NodeServices::Embedded,
    )?;
    // No cluster file under srun, so the datagrams have the default size, larger than the
    // lab's veth MTU of 1500 bytes: each node's first PE says so once (docs/slurm.md,
    // "Datagram size").
    let t = text(&out);
    let warned = t
        .lines()
        .filter(|l| l.contains("exceed the path MTU to node(s)") && l.contains("GSAS_UDP_MTU="))
        .count();
    if warned != lab.nodes {
        return Err(format!(
            "{what}: want the path-MTU warning once per node ({} nodes), got {warned}:\n{t}",
            lab.nodes
        ));
    }
    report(&format!(
        "{what}: {pes} PEs ok on {} nodes through {protocol} ({:.1} s)",
        lab.nodes,
        t0.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `srun --mpi=pmi2 -K -N 4 -n 8` with `GSAS_TRANSPORT=verbs` over the software verbs
/// device: every Slurm node is an emulated verbs node (its LID is `SLURM_NODEID + 1`, set
/// by a shell in front of the program, as a site's task prolog would), the PEs bootstrap
/// through PMI-2, open the first device with an active port and reach the PEs of the
/// other nodes by RDMA. Checked: the job passes, and every PE reports its verbs path, the
/// four nodes' LIDs among them.
fn verbs_job(lab: &Lab, program: &Path) -> Result<(), String> {
    let t0 = Instant::now();
    let p = program.to_string_lossy().into_owned();
    let wrapped = format!("SOFTVERBS_LID=$((SLURM_NODEID + 1)) exec '{p}'");
    let args = [
        "--mpi=pmi2",
        "-K",
        "-N",
        "4",
        "-n",
        "8",
        "/bin/sh",
        "-c",
        wrapped.as_str(),
    ];
    let sv = lab.dir.join("sv");
    std::fs::create_dir_all(&sv).map_err(|e| format!("{}: {e}", sv.display()))?;
    let libs = verbs_emu::library_path();
    let env = [
        ("GSAS_LOG", "info"),
        ("GSAS_TRANSPORT", "verbs"),
        ("LD_LIBRARY_PATH", libs.to_str().unwrap_or_default()),
        ("SOFTVERBS_DIR", sv.to_str().unwrap_or_default()),
    ];
    let out = lab.srun(&args, &env)?;
    let what = format!("GSAS_TRANSPORT=verbs srun {}", args.join(" "));
    check_passed(
        &what,
        &out,
        ("rma_types", NODES, 8),
        "Pmi2",
        NodeServices::Embedded,
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut lids: Vec<String> = Vec::new();
    let mut reports = 0;
    for l in stderr
        .lines()
        .filter(|l| l.contains(": verbs on softverbs0 port 1 (LID "))
    {
        reports += 1;
        let lid = l
            .split("(LID ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .unwrap_or("");
        lids.push(lid.to_owned());
    }
    lids.sort_unstable();
    lids.dedup();
    if reports != 8 || lids != ["1", "2", "3", "4"] {
        return Err(format!(
            "{what}: expected 8 PEs on verbs with LIDs 1-4, saw {reports} reports with LIDs {lids:?}\n{}",
            text(&out)
        ));
    }
    report(&format!(
        "{what}: 8 PEs ok on 4 emulated verbs nodes through Pmi2 ({:.1} s)",
        t0.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Where the node services of a job run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NodeServices {
    /// In each node's first PE (a plain srun job).
    Embedded,
    /// `gsas-atomicd` in a service step of `oshrun`.
    Step,
}

/// What a job of program `name` that passed shows: exit 0, every PE's `ok` line, every
/// PE bootstrapped through `protocol` (`Pmi2`, `Pmix`: the PEs' `GSAS_LOG=info` line),
/// and the node services: one `gsas-atomicd --private` started by the first PE of each of
/// the `nodes` nodes, or `oshrun`'s service step on all of them and none started by a PE.
fn check_passed(
    what: &str,
    out: &Output,
    (name, nodes, pes): (&str, usize, u32),
    protocol: &str,
    services: NodeServices,
) -> Result<(), String> {
    let all = [what];
    let stdout = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<u32> = (0..pes)
        .filter(|pe| !stdout.contains(&format!("{name}: PE {pe} of {pes}: ok")))
        .collect();
    if !out.status.success() || !missing.is_empty() {
        return Err(format!(
            "{}: expected exit 0 and every PE's ok line (missing: {missing:?})\n{}",
            all.join(" "),
            text(out)
        ));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let other: Vec<u32> = (0..pes)
        .filter(|pe| !stderr.contains(&format!("PMI: rank {pe} of {pes}, {protocol} over")))
        .collect();
    if !other.is_empty() {
        return Err(format!(
            "{}: PEs {other:?} did not bootstrap through {protocol}\n{}",
            all.join(" "),
            text(out)
        ));
    }
    // GSAS_LOG=info: each node's first PE says it started the node's service.
    let mut started: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split("started a service for node ").nth(1))
        .map(|r| r.split_whitespace().next().unwrap_or(""))
        .collect();
    started.sort_unstable();
    started.dedup();
    let hosts: Vec<String> = (0..nodes).map(|i| format!("sn{i}")).collect();
    let step = stderr.contains(&format!("node services up on {}", hosts.join(",")));
    let mut expected: Vec<String> = match services {
        NodeServices::Embedded => (0..nodes).map(|i| i.to_string()).collect(),
        NodeServices::Step if step => Vec::new(),
        NodeServices::Step => {
            return Err(format!(
                "{}: oshrun did not report its node services on sn0-sn{}\n{}",
                all.join(" "),
                nodes - 1,
                text(out)
            ));
        }
    };
    expected.sort_unstable();
    if started != expected {
        return Err(format!(
            "{}: expected services started by PEs on nodes {expected:?}, saw {started:?}\n{}",
            all.join(" "),
            text(out)
        ));
    }
    Ok(())
}

/// After an `oshrun` job: its node services stopped cleanly (SIGTERM: each removed its
/// socket) and no `gsas-atomicd` runs on the nodes.
fn services_gone(lab: &Lab) -> Result<(), String> {
    let left: Vec<String> = std::fs::read_dir("/tmp")
        .map_err(|e| format!("/tmp: {e}"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gsas-slurm-"))
        .collect();
    let daemons = lab.node_processes("gsas-atomicd");
    if !left.is_empty() || !daemons.is_empty() {
        return Err(format!(
            "after the job: sockets {left:?} left in /tmp, gsas-atomicd pids {daemons:?} running"
        ));
    }
    Ok(())
}

/// `salloc -N NODES -n PES oshrun -n PES PROGRAM` on all of the lab's nodes: oshrun
/// places the PEs through srun.
fn salloc_oshrun(lab: &Lab, oshrun: &Path, program: &Path, pes: u32) -> Result<(), String> {
    let t0 = Instant::now();
    let (n, p) = (lab.nodes.to_string(), pes.to_string());
    let mut c = lab.client("salloc");
    c.args(["-N", &n, "-n", &p])
        .arg(oshrun)
        .args(["-n", &p])
        .arg(program)
        .env("GSAS_LOG", "info")
        .stdin(Stdio::null());
    let out = run_with_timeout(&mut c, JOB_LIMIT).map_err(|e| format!("salloc: {e}"))?;
    let name = program.file_name().unwrap_or_default().to_string_lossy();
    let what = format!("salloc -N {n} -n {p} oshrun -n {p} {name}");
    check_passed(
        &what,
        &out,
        (&name, lab.nodes, pes),
        "Pmi2",
        NodeServices::Step,
    )?;
    services_gone(lab)?;
    report(&format!(
        "{what}: {pes} PEs ok on {n} nodes ({:.1} s)",
        t0.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// An sbatch script that runs `oshrun -n 8 PROGRAM` on four nodes; the job's end is
/// polled with `scontrol show job` (`sbatch --wait` polls at 2, 4, 8, ... s).
fn sbatch_oshrun(lab: &Lab, oshrun: &Path, program: &Path) -> Result<(), String> {
    let t0 = Instant::now();
    let d = &lab.dir;
    let (out_file, err_file) = (d.join("sbatch.out"), d.join("sbatch.err"));
    let script = format!(
        "#!/bin/sh\n#SBATCH -N 4\n#SBATCH -n 8\n#SBATCH -o {}\n#SBATCH -e {}\n\
         export GSAS_LOG=info\nexec {} -n 8 {}\n",
        out_file.display(),
        err_file.display(),
        oshrun.display(),
        program.display()
    );
    let path = d.join("job.sh");
    std::fs::write(&path, script).map_err(|e| format!("job.sh: {e}"))?;
    let submitted = run(
        lab.client("sbatch").arg("--parsable").arg(&path),
        "sbatch job.sh",
    )?;
    let job = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut record = String::new();
    wait_for(JOB_LIMIT, &format!("end of batch job {job}"), || {
        record = lab
            .client("scontrol")
            .args(["-o", "show", "job", &job])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        ![
            "JobState=PENDING",
            "JobState=RUNNING",
            "JobState=CONFIGURING",
            "JobState=COMPLETING",
        ]
        .iter()
        .any(|s| record.contains(s))
            && record.contains("JobState=")
    })?;
    let completed = record.contains("JobState=COMPLETED") && record.contains("ExitCode=0:0");
    let out = Output {
        status: std::process::ExitStatus::from_raw(if completed { 0 } else { 1 << 8 }),
        stdout: std::fs::read(&out_file).unwrap_or_default(),
        stderr: std::fs::read(&err_file).unwrap_or_default(),
    };
    let name = program.file_name().unwrap_or_default().to_string_lossy();
    let what = format!("sbatch job.sh (oshrun -n 8 {name}), batch job {job}");
    check_passed(&what, &out, (&name, NODES, 8), "Pmi2", NodeServices::Step)
        .map_err(|e| format!("{e}\n--- scontrol show job {job}\n{record}"))?;
    services_gone(lab)?;
    report(&format!(
        "{what}: 8 PEs ok on 4 nodes ({:.1} s)",
        t0.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// A PE killed with SIGKILL mid-job ends the step non-zero, with the task named.
/// `oshrun`: the job is started by `salloc -N 4 -n 8 OSHRUN -n 8`, else by `srun -K`.
fn killed_pe(lab: &Lab, victim: &Path, oshrun: Option<&Path>) -> Result<(), String> {
    let t0 = Instant::now();
    let mut c = match oshrun {
        Some(o) => {
            let mut c = lab.client("salloc");
            c.args(["-N", "4", "-n", "8"]).arg(o).args(["-n", "8"]);
            c
        }
        None => {
            let mut c = lab.client("srun");
            c.args(["--mpi=pmi2", "-K", "-N", "4", "-n", "8"]);
            c
        }
    };
    let how = if oshrun.is_some() {
        "salloc + oshrun"
    } else {
        "srun -K"
    };
    c.arg(victim)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("srun: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut pids = std::collections::BTreeMap::new();
    let until = Instant::now() + Duration::from_secs(60);
    while pids.len() < 8 {
        let left = until.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "only {} of 8 PEs reported ready: {pids:?}\n{}",
                pids.len(),
                err_reader.join().unwrap_or_default()
            ));
        };
        // "victim: PE 5 of 8 pid 1234 ready"
        let w: Vec<&str> = line.split_whitespace().collect();
        if let [_, "PE", pe, "of", _, "pid", pid, "ready"] = w[..] {
            if let (Ok(pe), Ok(pid)) = (pe.parse::<u32>(), pid.parse::<i32>()) {
                pids.insert(pe, pid);
            }
        }
    }
    let pid = pids[&5];
    // SAFETY: kill has no memory effects; the pid is PE 5's, which it just printed.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let status = match wait_timeout(&mut child, Duration::from_secs(60)) {
        Ok(s) => s,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("srun did not end within 60 s of PE 5's death: {e}"));
        }
    };
    let stderr = err_reader.join().unwrap_or_default();
    if status.success() || !stderr.contains("task 5") {
        return Err(format!(
            "{how}: after SIGKILL of PE 5 (pid {pid}) the job should fail naming task 5: {status} \
             (signal {:?})\n{stderr}",
            status.signal()
        ));
    }
    let named = stderr
        .lines()
        .find(|l| l.contains("task 5"))
        .unwrap_or_default();
    if oshrun.is_some() {
        services_gone(lab)?;
    }
    report(&format!(
        "PE 5 killed under {how}: {status}, {named:?} ({:.1} s)",
        t0.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `srun --mpi=none -n 2`: both PEs stop with the message naming `--mpi=pmi2`.
fn without_pmi(lab: &Lab, program: &Path) -> Result<(), String> {
    let p = program.to_string_lossy();
    let out = lab.srun(&["--mpi=none", "-N", "1", "-n", "2", &p], &[])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let told = stderr.matches("`srun --mpi=pmi2`").count();
    let ran = String::from_utf8_lossy(&out.stdout).contains(": ok");
    if out.status.success() || told != 2 || ran {
        return Err(format!(
            "srun --mpi=none -n 2: expected failure and the --mpi=pmi2 message from both PEs \
             (got it {told} times)\n{}",
            text(&out)
        ));
    }
    let line = stderr
        .lines()
        .find(|l| l.contains("--mpi=pmi2"))
        .unwrap_or_default();
    report(&format!(
        "srun --mpi=none -n 2: refused by both PEs: {line}"
    ));
    Ok(())
}

/// Removes the cluster (keeping its scratch directory and printing its logs when the
/// steps failed), then fails the test with the steps' error.
fn tear_down(mut lab: Lab, result: Result<(), String>) {
    lab.ok = result.is_ok();
    drop(lab);
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn slurm_cluster() {
    if let Some(reason) = skip_reason() {
        gsas_tests::skip::skip("slurm_cluster", gsas_tests::skip::REQUIRE_SLURM, &reason);
        return;
    }
    let t0 = Instant::now();
    let prefix = install().unwrap_or_else(|e| panic!("{e}"));
    let lab = Lab::up(NODES).unwrap_or_else(|e| panic!("starting the Slurm cluster: {e}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shmem/tests/c");
    let bin = lab.dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin directory");
    let victim_src = lab.dir.join("victim.c");
    std::fs::write(&victim_src, VICTIM_C).expect("victim.c");
    let steps = || -> Result<(), String> {
        for p in ["rma_types", "coll_sync"] {
            build(&prefix, &src.join(format!("{p}.c")), &bin.join(p))?;
        }
        build(&prefix, &victim_src, &bin.join("victim"))?;
        let pmi2 = ["--mpi=pmi2", "-K", "-N", "4", "-n", "8"];
        passing_job(&lab, &bin.join("rma_types"), &pmi2, 8, "Pmi2")?;
        let cyclic = ["--mpi=pmi2", "-K", "-N", "4", "-n", "8", "-m", "cyclic"];
        passing_job(&lab, &bin.join("coll_sync"), &cyclic, 8, "Pmi2")?;
        let pmix = ["--mpi=pmix", "-K", "-N", "4", "-n", "8"];
        passing_job(&lab, &bin.join("rma_types"), &pmix, 8, "Pmix")?;
        verbs_job(&lab, &bin.join("rma_types"))?;
        let oshrun = prefix.join("bin/oshrun");
        salloc_oshrun(&lab, &oshrun, &bin.join("rma_types"), 8)?;
        sbatch_oshrun(&lab, &oshrun, &bin.join("rma_types"))?;
        killed_pe(&lab, &bin.join("victim"), None)?;
        killed_pe(&lab, &bin.join("victim"), Some(&oshrun))?;
        without_pmi(&lab, &bin.join("rma_types"))?;
        Ok(())
    };
    let result = steps();
    tear_down(lab, result);
    // Sixteen nodes: 32 PEs by srun over PMI-2, in blocks and cyclic (each node's first PE
    // hosts its service), and by oshrun in an allocation (a service step on all sixteen).
    let large =
        Lab::up(LARGE).unwrap_or_else(|e| panic!("starting the {LARGE}-node Slurm cluster: {e}"));
    let bin = large.dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin directory");
    let steps = || -> Result<(), String> {
        let ring_src = large.dir.join("ring.c");
        std::fs::write(&ring_src, RING_C).map_err(|e| format!("ring.c: {e}"))?;
        build(&prefix, &ring_src, &bin.join("ring"))?;
        let pes = 2 * LARGE as u32;
        let (n, p) = (LARGE.to_string(), pes.to_string());
        let pmi2 = ["--mpi=pmi2", "-K", "-N", &n, "-n", &p];
        passing_job(&large, &bin.join("ring"), &pmi2, pes, "Pmi2")?;
        let cyclic = ["--mpi=pmi2", "-K", "-N", &n, "-n", &p, "-m", "cyclic"];
        passing_job(&large, &bin.join("ring"), &cyclic, pes, "Pmi2")?;
        salloc_oshrun(&large, &prefix.join("bin/oshrun"), &bin.join("ring"), pes)?;
        Ok(())
    };
    let result = steps();
    tear_down(large, result);
    report(&format!(
        "all Slurm jobs passed ({:.1} s including the cluster)",
        t0.elapsed().as_secs_f64()
    ));
}
