//! Two nodes on loopback: each with its own atomic service and its own PEs, started by the
//! test harness with the environment a multi-node launcher gives (`GSAS_NODE`,
//! `GSAS_SERVICE`, `GSAS_JOB_ID`, `GSAS_JOB_KEY`, a PMI node map). Put/get/atomics across
//! nodes, bulk transfers above the UDP MTU, the same through the rings, and a killed
//! service: the operation to it fails within the deadline naming the node.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use gsas_control::ControlClient;
use gsas_launch::oshrun::job::{JobReport, JobSpec, PeLaunch, run_job};
use gsas_launch::oshrun::pe_env;
use gsas_tests::launch::{launch, self_test_argv};

fn job(scenario: &str, sockets: &[PathBuf], ppn: u32, extra: &[(&str, &str)]) -> JobSpec {
    let argv = self_test_argv("child_pe").unwrap();
    let job_id = 0x1000 + u64::from(std::process::id());
    let job_key = 0xfeed_0000_0000_0000 | u64::from(std::process::id());
    let size = sockets.len() as u32 * ppn;
    let pes = (0..size)
        .map(|rank| {
            let node = (rank / ppn) as u16;
            let mut env = pe_env(sockets[node as usize].as_os_str(), job_id, job_key, node);
            env.push((gsas_tests::node::SCENARIO.into(), scenario.into()));
            for (k, v) in extra {
                env.push((OsString::from(k), OsString::from(v)));
            }
            PeLaunch {
                rank,
                program: argv[0].clone(),
                args: argv[1..].to_vec(),
                env,
            }
        })
        .collect();
    let mut spec = JobSpec::single_node(pes);
    spec.node_of_rank = (0..size).map(|r| r / ppn).collect();
    spec.tag_output = true;
    spec.time_limit = Some(Duration::from_secs(600));
    spec
}

fn services(dir: &Path) -> Vec<gsas_service::ServiceThread> {
    gsas_tests::multinode::service_threads(dir, 2, |_| {})
}

fn assert_ok(report: &JobReport) {
    assert_eq!(report.exit_code, 0, "{report:?}");
    assert!(
        report
            .statuses
            .iter()
            .all(|s| s.is_some_and(|s| s.success())),
        "{report:?}"
    );
}

#[test]
fn two_services_four_pes() {
    let dir = gsas_tests::node::scratch_dir("two-services");
    let svc = services(&dir);
    let sockets: Vec<PathBuf> = svc.iter().map(|s| s.socket_path().to_owned()).collect();
    let report = run_job(job("all", &sockets, 2, &[])).unwrap();
    assert_ok(&report);
    // Requests crossed the network: both services served UDP traffic.
    for s in &svc {
        let st = gsas_control::query_stats(s.socket_path(), Duration::from_secs(5)).unwrap();
        assert!(st.get("requests.bulk_write").unwrap() > 0, "{st}");
        assert!(st.get("requests.bulk_read").unwrap() > 0, "{st}");
        assert!(st.get("requests.atomic").unwrap() > 0, "{st}");
        assert_eq!(st.get("refused.total"), Some(0), "{st}");
        assert_eq!(st.get("jobs.active"), Some(0), "{st}");
        assert_eq!(st.get("jobs.ended"), Some(1), "{st}");
    }
    for s in svc {
        s.stop().unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_services_through_rings() {
    let dir = gsas_tests::node::scratch_dir("two-services-rings");
    let svc = services(&dir);
    let sockets: Vec<PathBuf> = svc.iter().map(|s| s.socket_path().to_owned()).collect();
    let report = run_job(job("all", &sockets, 2, &[("GSAS_DIRECT", "0")])).unwrap();
    assert_ok(&report);
    for s in &svc {
        let st = gsas_control::query_stats(s.socket_path(), Duration::from_secs(5)).unwrap();
        assert!(st.get("ring.requests").unwrap() > 0, "{st}");
    }
    drop(svc);
    std::fs::remove_dir_all(&dir).unwrap();
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn daemon(node: u16, socket: &Path) -> Daemon {
    let child = launch()
        .command(gsas_tests::launch::program("gsas-atomicd"))
        .args(["--listen", "127.0.0.1:0", "--node"])
        .arg(node.to_string())
        .arg("--socket")
        .arg(socket)
        .arg("--log-level")
        .arg("warn")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let d = Daemon(child);
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut c) = ControlClient::connect(socket, Duration::from_secs(1)) {
            if c.ping().is_ok() {
                return d;
            }
        }
        assert!(
            Instant::now() < until,
            "gsas-atomicd for node {node} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_file(path: &Path, limit: Duration) {
    let until = Instant::now() + limit;
    while !path.exists() {
        assert!(Instant::now() < until, "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn killed_service_fails_operations_within_the_deadline() {
    let dir = gsas_tests::node::scratch_dir("killed-service");
    let sockets = [dir.join("node0.sock"), dir.join("node1.sock")];
    let d0 = daemon(0, &sockets[0]);
    let mut d1 = daemon(1, &sockets[1]);
    let dir_s = dir.to_string_lossy().into_owned();
    let spec = job(
        "remote-failure",
        &sockets,
        1,
        &[
            ("GSAS_DEADLINE_MS", "1500"),
            (gsas_tests::node::SIGNAL_DIR, &dir_s),
        ],
    );
    let runner = std::thread::spawn(move || run_job(spec));
    wait_file(&dir.join("ready-0"), Duration::from_secs(300));
    wait_file(&dir.join("ready-1"), Duration::from_secs(300));
    d1.0.kill().unwrap();
    d1.0.wait().unwrap();
    std::fs::write(dir.join("killed"), b"").unwrap();
    let report = runner.join().unwrap().unwrap();
    assert_ok(&report);
    assert!(dir.join("done-0").exists() && dir.join("done-1").exists());
    drop(d0);
    std::fs::remove_dir_all(&dir).unwrap();
}
