//! `gsas-atomicd` as an administrator meets it: configuration errors name file, line and
//! key; a configured daemon binds its address, answers `--stats`, and stops cleanly on
//! SIGTERM, removing its socket.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gsas_tests::launch::{collect_output, launch, run_with_timeout};

fn atomicd() -> Command {
    launch().command(gsas_tests::launch::program("gsas-atomicd"))
}

fn run(cmd: &mut Command) -> Output {
    run_with_timeout(cmd, Duration::from_secs(300)).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gsas-daemon-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_config(dir: &Path, body: &str) -> PathBuf {
    let f = dir.join("cluster.toml");
    std::fs::write(&f, body).unwrap();
    f
}

/// Starts `gsas-atomicd` on node 0 of the cluster file `f` (log level info, standard error
/// piped).
fn serve(f: &Path) -> std::process::Child {
    atomicd()
        .arg("--config")
        .arg(f)
        .args(["--node", "0", "--log-level", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_bad_key_in_the_config_is_named() {
    let dir = scratch("badkey");
    let f = write_config(
        &dir,
        "[cluster]\nname = \"t\"\n\n[[nodes]]\nid = 0\nhost = \"127.0.0.1\"\nudp_prot = 7470\n",
    );
    let o = run(atomicd().arg("--config").arg(&f).args(["--node", "0"]));
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.starts_with("gsas-atomicd: "), "{e}");
    assert!(
        e.contains("cluster.toml:7") && e.contains("udp_prot"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn configuration_problems_are_reported_before_binding() {
    let dir = scratch("problems");
    let f = write_config(
        &dir,
        "[cluster]\nname = \"t\"\n\n[[nodes]]\nid = 0\nhost = \"127.0.0.1\"\n\n[[nodes]]\nid = 1\nhost = \"127.0.0.2\"\ntransport = \"exanet\"\nuio_devices = [\"exanet-ep0\"]\n\n[[nodes]]\nid = 2\nhost = \"127.0.0.3\"\ntransport = \"verbs\"\n",
    );
    let o = run(atomicd().arg("--config").arg(&f).args(["--node", "9"]));
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("node 9 is not in the cluster (nodes: 0, 1, 2)"),
        "{e}"
    );
    // Node 2, a verbs node, is served as an IP node (the unit test
    // verbs_nodes_are_served_as_ip_nodes); an unknown GSAS_TRANSPORT is refused by name.
    let o = run(atomicd()
        .arg("--config")
        .arg(&f)
        .args(["--node", "2"])
        .env("GSAS_TRANSPORT", "infiniband"));
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("GSAS_TRANSPORT") && e.contains("one of udp, exanet, verbs"),
        "{e}"
    );
    // An Exanet node is served; an emulator root that does not exist is named.
    let o = run(atomicd()
        .arg("--config")
        .arg(&f)
        .args(["--node", "1"])
        .env("GSAS_EXANET_EMU", dir.join("no-emulator")));
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("node 1 (") && e.contains("no Exanet emulator at"),
        "{e}"
    );
    let o = run(atomicd()
        .arg("--config")
        .arg(dir.join("missing.toml"))
        .args(["--node", "0"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.toml"));
    let o = run(atomicd().arg("--bogus"));
    assert_eq!(o.status.code(), Some(2));
    let o = run(atomicd().arg("--help"));
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("Examples:"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn allocations_are_declared_and_ended_from_the_command_line() {
    let dir = scratch("alloc");
    let port = free_port();
    let socket = dir.join("atomicd.sock");
    let f = write_config(
        &dir,
        &format!(
            "[cluster]\nname = \"t\"\n\n[defaults]\nrequire_allocation = true\n\n[[nodes]]\nid = 0\nhost = \"127.0.0.1\"\nudp_port = {port}\ncontrol_socket = \"{}\"\n",
            socket.display()
        ),
    );
    let mut child = serve(&f);
    let gauge = |name: &str| -> Option<u64> {
        let o = run(atomicd().arg("--stats").arg(&socket));
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name)).then(|| w.next()?.parse().ok())?
        })
    };
    let until = Instant::now() + Duration::from_secs(120);
    while gauge("allocations.active").is_none() {
        assert!(
            Instant::now() < until && child.try_wait().unwrap().is_none(),
            "the daemon did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The daemon's own user (this test's) may declare; the counters follow.
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() }.to_string();
    let o = run(atomicd()
        .arg("declare")
        .arg(&socket)
        .args(["--id", "5", "--user", &me, "--pes", "2", "--memory", "8m"]));
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("allocation 5 declared"),
        "{o:?}"
    );
    assert_eq!(gauge("allocations.active"), Some(1));
    let o = run(atomicd().arg("undeclare").arg(&socket).args(["--id", "5"]));
    assert!(o.status.success(), "{o:?}");
    assert_eq!(gauge("allocations.active"), Some(0));
    // A bad command line is a usage error before anything is sent.
    let o = run(atomicd().arg("declare").arg(&socket).args(["--id", "5"]));
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--user"),
        "{o:?}"
    );
    // SAFETY: kill has no memory arguments.
    let got = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(got, 0);
    let out = collect_output(child, Duration::from_secs(60)).unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("allocation 5 for uid"), "{log}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn configured_daemon_serves_reports_and_stops_on_sigterm() {
    let dir = scratch("run");
    let port = free_port();
    let socket = dir.join("atomicd.sock");
    let f = write_config(
        &dir,
        &format!(
            "[cluster]\nname = \"t\"\n\n[defaults]\nservice_timeout_ms = 2000\n\n[[nodes]]\nid = 0\nhost = \"127.0.0.1\"\nudp_port = {port}\ncontrol_socket = \"{}\"\nmemory = \"64m\"\n",
            socket.display()
        ),
    );
    let mut child = serve(&f);
    let until = Instant::now() + Duration::from_secs(120);
    let stats = loop {
        let o = run(atomicd().arg("--stats").arg(&socket));
        if o.status.success() {
            break String::from_utf8_lossy(&o.stdout).into_owned();
        }
        if Instant::now() > until || child.try_wait().unwrap().is_some() {
            let mut e = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut e);
            let _ = child.kill();
            panic!("the daemon did not come up: {e}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        stats
            .lines()
            .any(|l| l.split_whitespace().eq(["jobs.active", "0"])),
        "{stats}"
    );
    // It bound exactly the configured address: the port is taken on 127.0.0.1.
    assert!(std::net::UdpSocket::bind(("127.0.0.1", port)).is_err());
    // The daemon's memory limit comes from the file.
    let mut c = gsas_control::ControlClient::connect(&socket, Duration::from_secs(10)).unwrap();
    c.join(
        0,
        1,
        2,
        gsas_control::proto::JoinInfo {
            npes: 1,
            node: 0,
            flags: 0,
        },
    )
    .unwrap();
    let e = c.create_segment(0, 0, 128 << 20).unwrap_err().to_string();
    assert!(e.contains("64.0 MiB"), "{e}");
    let o = run(atomicd().args(["stats"]).arg(&socket));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("pes.active"),
        "{o:?}"
    );
    // SAFETY: kill has no memory arguments.
    let got = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(got, 0);
    let out = collect_output(child, Duration::from_secs(60)).unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("received signal 15 (SIGTERM)"), "{log}");
    assert!(
        log.contains(&format!("serving UDP 127.0.0.1:{port}")),
        "{log}"
    );
    assert!(!socket.exists(), "the socket was left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Out of file descriptors (issue 27): a daemon started under `prlimit --nofile=64:64` (a
/// hard limit it cannot raise) serves connections until its table is full; every further
/// connection is refused with a message naming the descriptor limit (not left in the
/// backlog, where its client waited for a reply that never came while the daemon spun in
/// `accept` writing thousands of warnings a second); the warning comes once per 10 s with
/// a count; and the daemon serves again as soon as descriptors are free.
#[test]
fn a_daemon_out_of_descriptors_refuses_clearly_and_recovers() {
    use gsas_control::ControlClient;
    use gsas_control::ControlError;
    use gsas_tests::multinode::{ClusterFile, Daemon};
    let dir = scratch("nofile");
    let cf = ClusterFile::from_template(
        "[cluster]\nname = \"t\"\n\n[[nodes]]\nid = 0\nhost = \"127.0.0.1\"\nudp_port = 0\n\
         control_socket = \"x\"\n",
        &dir,
    );
    let file = cf.write(&dir.join("cluster.toml"));
    let d = Daemon::start_with(
        &["prlimit", "--nofile=64:64", "--"],
        &file,
        0,
        &cf.sockets[0],
    );
    let t = Duration::from_secs(20);
    let mut held = Vec::new();
    let mut refusals = Vec::new();
    for _ in 0..200 {
        let mut c = ControlClient::connect(&cf.sockets[0], t).unwrap();
        match c.stats() {
            // Served also after a refusal when a descriptor the daemon held for a moment
            // (a file it read) was free at that accept.
            Ok(_) => held.push(c),
            Err(e @ ControlError::Refused { .. }) => refusals.push(e.to_string()),
            Err(e) => panic!("after {} connections: {e}\n{}", held.len(), d.log_text()),
        }
    }
    assert!(
        !held.is_empty() && held.len() < 64 && refusals.len() > 120,
        "{} served, {} refused",
        held.len(),
        refusals.len()
    );
    for r in &refusals {
        assert!(
            r.contains("refused the connection")
                && r.contains("out of file descriptors")
                && r.contains("RLIMIT_NOFILE soft limit 64"),
            "{r}"
        );
    }
    // Descriptors free again: served, and the refusals counted.
    held.truncate(held.len() / 2);
    // The daemon frees a closed connection's descriptor when it next polls it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let stats = loop {
        match ControlClient::connect(&cf.sockets[0], t).unwrap().stats() {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet served again: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("not served again after half the connections closed: {e}"),
        }
    };
    assert!(
        stats
            .get("control.fd_refused")
            .is_some_and(|n| n >= refusals.len() as u64),
        "{}",
        d.log_text()
    );
    let log = d.log_text();
    let warnings = log.matches("out of file descriptors").count();
    assert!(
        (1..=2).contains(&warnings),
        "{warnings} warnings about the descriptors: {log}"
    );
    drop(held);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
