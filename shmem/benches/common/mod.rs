//! The launch half of the multi-PE benchmark `pingpong_bench` (kept apart from it):
//! one gsas service thread per node on loopback, the benchmark binary started again as
//! every PE of a job (placed in contiguous blocks per node), PE 0's table read back.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use gsas_launch::oshrun::job::{JobSpec, PeLaunch, run_job};
use gsas_launch::oshrun::pe_env;
use gsas_service::{Service, ServiceConfig};

/// A benchmark job: `nodes` services with `ppn` PEs each.
pub struct BenchJob<'a> {
    /// Scratch directory name (the process id is appended).
    pub name: &'a str,
    /// Nodes (one service thread each).
    pub nodes: u32,
    /// PEs per node.
    pub ppn: u32,
    /// Mixed into the job id and key, so that concurrent configurations differ.
    pub salt: u64,
    /// The variable that tells a process it is a PE (`quick` or `full`).
    pub child_var: &'a str,
    /// The variable naming the file PE 0 writes its table to.
    pub out_var: &'a str,
    /// Short runs.
    pub quick: bool,
    /// More environment for every PE.
    pub env: Vec<(OsString, OsString)>,
}

/// Runs `job` to completion (at most 10 minutes) and returns PE 0's table; panics with
/// the job report when a PE fails.
pub fn run(job: &BenchJob<'_>) -> String {
    let pid = u64::from(std::process::id());
    let dir = std::env::temp_dir().join(format!("{}-{pid}-{}", job.name, job.nodes));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let services: Vec<_> = (0..job.nodes as u16)
        .map(|node| {
            let cfg = ServiceConfig::new(
                node,
                "127.0.0.1:0".parse().expect("an address"),
                dir.join(format!("node{node}.sock")),
            );
            Service::bind(cfg)
                .and_then(Service::spawn)
                .expect("starting a service")
        })
        .collect();
    let exe = std::env::current_exe().expect("the benchmark's path");
    let out: PathBuf = dir.join("table.txt");
    let size = job.nodes * job.ppn;
    let pes = (0..size)
        .map(|rank| {
            let node = rank / job.ppn;
            let mut env = pe_env(
                services[node as usize].socket_path().as_os_str(),
                0x6000_0000 ^ pid << 8 ^ job.salt,
                0xbe0c_0000_0000_0000 | pid << 16 | job.salt & 0xffff,
                node as u16,
            );
            let mode = if job.quick { "quick" } else { "full" };
            env.push((job.child_var.into(), mode.into()));
            env.push((job.out_var.into(), out.clone().into_os_string()));
            env.extend(job.env.iter().cloned());
            PeLaunch {
                rank,
                program: exe.clone().into_os_string(),
                args: Vec::new(),
                env,
            }
        })
        .collect();
    let mut spec = JobSpec::single_node(pes);
    spec.node_of_rank = (0..size).map(|r| r / job.ppn).collect();
    spec.time_limit = Some(Duration::from_secs(600));
    let report = run_job(spec).expect("launching the PEs");
    for svc in services {
        let _ = svc.stop();
    }
    assert_eq!(report.exit_code, 0, "the benchmark job failed: {report:?}");
    let table = std::fs::read_to_string(&out).expect("PE 0's table");
    let _ = std::fs::remove_dir_all(&dir);
    table
}
