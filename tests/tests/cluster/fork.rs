//! Remote FORK between `oshrun` and `gsas-atomicd` processes on loopback (`oshrun --fork`
//! starts every node's PEs through its daemon, as for other machines):
//!
//! * disabled in the daemon's configuration: refused, counted, the launcher names the node;
//! * a launcher with a different secret: refused (authentication), counted;
//! * the same request sent twice: the replay is refused and counted;
//! * a secret file with group or other access, or of another user: the daemon refuses to
//!   start, naming the file and the check, and binds nothing;
//! * valid: the PEs run, their output reaches the launcher tagged with their ranks, their
//!   exit statuses decide the job's; real PEs of the node tests run the full scenario with
//!   PMI over TCP to the launcher.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gsas_core::wire::ErrorCode;
use gsas_launch::fork::launcher::{ForkError, ForkTarget, send_forks};
use gsas_launch::fork::request::{ForkRequest, LaunchSpec};
use gsas_launch::fork::secret::Secret;
use gsas_launch::fork::stream::{FrameReader, FrameType};
use gsas_tests::launch::{launch, run_with_timeout, self_test_argv};
use gsas_tests::multinode::{
    ClusterFile, Daemon, RELAXED_DEADLINE_MS, SECRET, daemons, oshrun, secret_file, shipped_config,
    show,
};

fn forked(file: &Path, n: u32, program: &[&str]) -> Output {
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(file)
        .arg("-n")
        .arg(n.to_string())
        .args(["--fork", "--tag-output", "--"])
        .args(program);
    run_with_timeout(&mut cmd, Duration::from_secs(600)).unwrap()
}

/// A two-node loopback cluster with FORK enabled (secret `SECRET`), written to `dir`.
fn fork_cluster(dir: &Path) -> (ClusterFile, std::path::PathBuf) {
    let secret = secret_file(dir, "secret", SECRET, 0o600);
    let cf = ClusterFile::from_template(&shipped_config("two-nodes-loopback.toml"), dir)
        .with_default("service_timeout_ms", RELAXED_DEADLINE_MS)
        .with_fork(&secret);
    let file = cf.write(&dir.join("cluster.toml"));
    (cf, file)
}

#[test]
fn a_daemon_without_fork_refuses_and_counts() {
    let dir = gsas_tests::node::scratch_dir("fork-disabled");
    let secret = secret_file(&dir, "secret", SECRET, 0o600);
    let base = ClusterFile::from_template(&shipped_config("two-nodes-loopback.toml"), &dir);
    let daemon_file = base.write(&dir.join("daemons.toml"));
    let launcher_file = base.with_fork(&secret).write(&dir.join("launcher.toml"));
    let ds = daemons(&base, &daemon_file);
    let out = forked(&launcher_file, 2, &["true"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("oshrun: node 0 (loop0, 127.0.0.1:{}): gsas-atomicd refused the FORK: remote process start is not enabled there", base.ports[0])),
        "{err}"
    );
    // The daemon keeps no state for a sender of a job it does not know, and says so.
    assert!(ds[0].stats().get("reliable.refused_unknown_job").unwrap() >= 1);
    assert!(
        ds[0]
            .log_text()
            .contains("a remote FORK would be refused anyway: it is not enabled on this service"),
        "{}",
        ds[0].log_text()
    );
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_wrong_secret_is_refused_and_counted() {
    let dir = gsas_tests::node::scratch_dir("fork-wrong-secret");
    let (cf, file) = fork_cluster(&dir);
    let other = secret_file(&dir, "other", "a-different-secret-0123456789", 0o600);
    let launcher_file = cf.with_fork(&other).write(&dir.join("launcher.toml"));
    let ds = daemons(&cf, &file);
    let out = forked(&launcher_file, 2, &["true"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gsas-atomicd refused the FORK: authentication failed"),
        "{err}"
    );
    let st = ds[0].stats();
    assert_eq!(st.get("fork.refused.bad_mac"), Some(1), "{st}");
    assert_eq!(st.get("fork.accepted"), Some(0), "{st}");
    assert!(
        ds[0].log_text().contains("FORK from 127.0.0.1:"),
        "{}",
        ds[0].log_text()
    );
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_replayed_request_is_refused() {
    let dir = gsas_tests::node::scratch_dir("fork-replay");
    let (cf, file) = fork_cluster(&dir);
    let d = Daemon::start(&cf, &file, 1);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let req = ForkRequest {
        node: 1,
        job_id: 0x5eb1a7,
        job_key: 0xcafe,
        nonce: [3; 16],
        timestamp_ms: now,
        spec: LaunchSpec {
            size: 1,
            ranks: vec![0],
            grace_ms: 100,
            pmi: "127.0.0.1:9".parse().unwrap(),
            stream: listener.local_addr().unwrap(),
            cwd: std::env::temp_dir(),
            argv: vec!["true".into()],
            env: vec![("PATH".into(), std::env::var_os("PATH").unwrap())],
        },
    };
    let bytes = req
        .emit(&Secret::from_bytes(SECRET.as_bytes()).unwrap())
        .unwrap();
    let target = ForkTarget {
        daemon: format!("127.0.0.1:{}", cf.ports[1]).parse().unwrap(),
        request: bytes,
    };
    let send = || {
        send_forks(
            "127.0.0.1".parse().unwrap(),
            0xcafe,
            61440,
            Duration::from_secs(20),
            std::slice::from_ref(&target),
        )
        .remove(0)
    };
    assert_eq!(send(), Ok(()));
    // The daemon connects back, says Hello, runs `true` and reports its exit.
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut r = FrameReader::new();
    let mut types = Vec::new();
    let mut buf = [0u8; 1024];
    while !types.contains(&FrameType::Done) {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {types:?}");
        r.push(&buf[..n]);
        while let Some(f) = r.next_frame().unwrap() {
            types.push(f.ty);
        }
    }
    assert_eq!(types[0], FrameType::Hello);
    assert!(types.contains(&FrameType::Exited), "{types:?}");
    // The same bytes again.
    assert_eq!(send(), Err(ForkError::Refused(ErrorCode::BadKey)));
    let st = d.stats();
    assert_eq!(st.get("fork.refused.replay"), Some(1), "{st}");
    assert_eq!(st.get("fork.accepted"), Some(1), "{st}");
    assert!(
        d.log_text().contains("replayed request"),
        "{}",
        d.log_text()
    );
    drop(d);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs the daemon of node 0 with `file` and returns its exit status and stderr.
fn daemon_must_not_start(cf: &ClusterFile, file: &Path) -> (Option<i32>, String) {
    let mut cmd = launch().command(gsas_tests::launch::program("gsas-atomicd"));
    cmd.arg("--config").arg(file).args(["--node", "0"]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(120)).unwrap();
    assert!(!cf.sockets[0].exists(), "the daemon bound its socket");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_secret_file_others_can_read_stops_the_daemon() {
    let dir = gsas_tests::node::scratch_dir("fork-mode");
    let secret = secret_file(&dir, "secret", SECRET, 0o644);
    let cf = ClusterFile::from_template(&shipped_config("two-nodes-loopback.toml"), &dir)
        .with_fork(&secret);
    let file = cf.write(&dir.join("cluster.toml"));
    let (code, err) = daemon_must_not_start(&cf, &file);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "remote FORK is enabled, but fork secret file {}",
            secret.display()
        )) && err.contains("mode 0644"),
        "{err}"
    );
    // Group access alone is refused too.
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let (code, err) = daemon_must_not_start(&cf, &file);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("mode 0640"), "{err}");
    // A file of another user (only root can make one).
    if gsas_tests::skip::is_root() {
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        std::os::unix::fs::chown(&secret, Some(65534), None).unwrap();
        let (code, err) = daemon_must_not_start(&cf, &file);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("owned by uid 65534"), "{err}");
    }
    // A missing file.
    std::fs::remove_file(&secret).unwrap();
    let (code, err) = daemon_must_not_start(&cf, &file);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot be opened"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn forked_pes_output_and_status_reach_the_launcher() {
    let dir = gsas_tests::node::scratch_dir("fork-valid");
    let (cf, file) = fork_cluster(&dir);
    let ds = daemons(&cf, &file);
    // PE 2 fails only once every PE has written all of its output: its exit ends the job,
    // and a PE still starting on a loaded machine (PE 3 had printed one line of three in
    // one CI run) would be terminated before it wrote the rest.
    let marks = dir.join("written");
    std::fs::create_dir_all(&marks).unwrap();
    std::fs::set_permissions(&marks, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let script = format!(
        "echo hello from $PMI_ID on node $GSAS_NODE; echo to stderr >&2; \
         printf 'no newline'; touch {m}/$PMI_ID; [ $PMI_ID != 2 ] && exit 0; \
         i=0; while [ $(ls {m} | wc -l) -lt 4 ] && [ $i -lt 1200 ]; do \
         sleep 0.05; i=$((i + 1)); done; exit 3",
        m = marks.display()
    );
    let out = forked(&file, 4, &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (rank, node) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
        let want = format!("[{rank}] hello from {rank} on node {node}\n");
        assert!(stdout.contains(&want), "missing {want:?}: {}", show(&out));
        assert!(
            stderr.contains(&format!("[{rank}] to stderr\n")),
            "{}",
            show(&out)
        );
    }
    assert!(
        stderr.contains("oshrun: PE 2 (pid ")
            && stderr.contains(&format!(
                " on node 1 (loop1, 127.0.0.1:{})) exited with status 3",
                cf.ports[1]
            )),
        "{}",
        show(&out)
    );
    for d in &ds {
        let st = d.stats();
        assert_eq!(st.get("fork.accepted"), Some(1), "{st}");
        assert_eq!(st.get("fork.pes_started"), Some(2), "{st}");
        assert_eq!(st.get("fork.jobs_active"), Some(0), "{st}");
    }
    // A successful job: status 0, untagged output passed through.
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(&file)
        .args(["-n", "2", "--fork", "sh", "-c", "echo plain $PMI_ID"]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(300)).unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("plain 0\n") && stdout.contains("plain 1\n"),
        "{}",
        show(&out)
    );
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn much_output_is_forwarded_completely() {
    let dir = gsas_tests::node::scratch_dir("fork-output");
    let (cf, file) = fork_cluster(&dir);
    let _ds = daemons(&cf, &file);
    // 8 MB per PE on stdout and a line on stderr, untagged: the daemons' streams must
    // apply back-pressure, not drop data or fail.
    let mut cmd = oshrun();
    cmd.arg("--config").arg(&file).args([
        "-n",
        "2",
        "--fork",
        "sh",
        "-c",
        "head -c 8000000 /dev/zero | tr '\\0' x; echo; echo done $PMI_ID >&2",
    ]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(600)).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let xs = out.stdout.iter().filter(|&&b| b == b'x').count();
    assert_eq!(xs, 16_000_000, "stdout of {} bytes", out.stdout.len());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("done 0") && err.contains("done 1"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_pe_the_daemon_cannot_start_fails_the_job_naming_the_node() {
    let dir = gsas_tests::node::scratch_dir("fork-cannot-start");
    let (cf, file) = fork_cluster(&dir);
    let _ds = daemons(&cf, &file);
    // An executable file (the launcher's check passes) whose interpreter does not exist:
    // exec fails on the node.
    let prog = dir.join("broken-script");
    std::fs::write(&prog, "#!/nonexistent/gsas-interpreter\n").unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = forked(&file, 2, &[prog.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    // Both nodes fail; whichever reports first names itself and its first PE.
    let named = [(0, 0), (1, 1)].iter().any(|&(node, rank)| {
        err.contains(&format!(
            "oshrun: node {node} (loop{node}, 127.0.0.1:{}): PE {rank} cannot be started on node {node}: {}",
            cf.ports[node],
            prog.display()
        ))
    });
    assert!(named, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn real_pes_through_fork_run_the_full_scenario() {
    let dir = gsas_tests::node::scratch_dir("fork-real");
    let (cf, file) = fork_cluster(&dir);
    let ds = daemons(&cf, &file);
    let mut cmd = oshrun();
    cmd.arg("--config")
        .arg(&file)
        .args(["-n", "4", "--fork", "--tag-output", "--"])
        .args(self_test_argv("child_pe").unwrap())
        .env(gsas_tests::node::SCENARIO, "all");
    let out = run_with_timeout(&mut cmd, Duration::from_secs(900)).unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for pe in 0..4 {
        let line = format!("[{pe}] PE {pe} of 4: all ok");
        assert!(stdout.contains(&line), "missing {line:?}: {}", show(&out));
    }
    for d in &ds {
        let st = d.stats();
        assert_eq!(st.get("fork.pes_started"), Some(2), "{st}");
        assert!(st.get("requests.bulk_write").unwrap() > 0, "{st}");
        assert_eq!(st.get("refused.total"), Some(0), "{st}");
    }
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_same_host_sender_that_answers_cookies_cannot_keep_a_launcher_out() {
    // A local user who answers the challenges (its address is real) but has no secret:
    // 12 made-up job keys from one socket of this host, pinging every 100 ms, so that none
    // is ever quiet for the second after which a host peer gave way. It takes its 8 host
    // slots of the launcher's own address on each daemon. Before, every FORK launch from
    // this host was refused ("share of the peer table for host actions is full (8 of 8)")
    // for as long as the pings went on; now a sender that proved nothing gives way at once
    // to a newcomer, and a sender whose FORK was accepted keeps its slot. A launcher whose
    // slot goes to a pinger between its request and the acknowledgement sends its last
    // fragment again, and the daemon answers it as the first time (`fork.repeated`;
    // before, under qemu and load, that was refused as a replay and the launch failed).
    let dir = gsas_tests::node::scratch_dir("fork-cookie-pingers");
    let (cf, file) = fork_cluster(&dir);
    let ds = daemons(&cf, &file);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pingers: Vec<_> = (0..2)
        .map(|n| {
            let stop = stop.clone();
            let to: std::net::SocketAddr = ([127, 0, 0, 1], cf.ports[n]).into();
            std::thread::spawn(move || {
                gsas_tests::attack::cookie_answering_pingers(
                    to,
                    12,
                    Duration::from_millis(100),
                    &stop,
                    91 + n as u64,
                )
            })
        })
        .collect();
    // The pingers hold the address's host slots before the launches start.
    let t0 = std::time::Instant::now();
    for d in &ds {
        while d.stats().get("peers.host").unwrap_or(0) < 8 {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the pingers never filled the host slots of their address: {}",
                d.stats()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let launches = 3;
    let mut ok = 0;
    let mut failures = Vec::new();
    let started = std::time::Instant::now();
    for _ in 0..launches {
        let out = forked(&file, 4, &["sh", "-c", "echo up $PMI_ID"]);
        if out.status.success() {
            ok += 1;
        } else {
            failures.push(show(&out));
        }
    }
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered: Vec<u64> = pingers.into_iter().map(|p| p.join().unwrap()).collect();
    let repeated: Vec<u64> = ds
        .iter()
        .map(|d| d.stats().get("fork.repeated").unwrap_or(0))
        .collect();
    eprintln!(
        "FORK launches beside 12 cookie-answering, never-acknowledging pingers per daemon: {ok} of {launches} in {took:?} (challenges answered {answered:?}, requests repeated {repeated:?})"
    );
    assert_eq!(ok, launches, "{failures:#?}");
    for (d, n) in ds.iter().zip(&answered) {
        let st = d.stats();
        assert_eq!(st.get("fork.accepted"), Some(launches), "{st}");
        // The pingers answered challenges (and so held slots).
        assert!(*n > 0, "no challenge answered: {st}");
    }
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fork_launches_get_through_a_flood_of_unauthenticated_senders() {
    // 200 datagrams per second from the launcher's own address (a sender that forges
    // its source can pick any), each a new job key with a CONTROL ping it never
    // acknowledges. Before cookies every one held a slot of the daemon's
    // 32-slot host share for a second, and every launch that needed FORK was refused at
    // once ("share of the peer table for host actions is full (32 of 32)"); now such a
    // sender gets a challenge and no state.
    let dir = gsas_tests::node::scratch_dir("fork-flood");
    let (cf, file) = fork_cluster(&dir);
    let ds = daemons(&cf, &file);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let floods: Vec<_> = (0..2)
        .map(|n| {
            let stop = stop.clone();
            let to: std::net::SocketAddr = ([127, 0, 0, 1], cf.ports[n]).into();
            std::thread::spawn(move || {
                gsas_tests::attack::ping_flood(to, [127, 0, 0, 1].into(), 200, &stop, 77 + n as u64)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let launches = 5;
    let mut ok = 0;
    let mut failures = Vec::new();
    for _ in 0..launches {
        let out = forked(&file, 4, &["sh", "-c", "echo up $PMI_ID"]);
        if out.status.success() {
            ok += 1;
        } else {
            failures.push(show(&out));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent: Vec<u64> = floods.into_iter().map(|f| f.join().unwrap()).collect();
    eprintln!(
        "FORK launches under a 200/s unauthenticated flood: {ok} of {launches} (flood datagrams {sent:?})"
    );
    assert_eq!(ok, launches, "{failures:#?}");
    for (d, n) in ds.iter().zip(&sent) {
        let st = d.stats();
        assert_eq!(st.get("fork.accepted"), Some(launches), "{st}");
        // Every flood frame was challenged (the kernel may drop a few under load), none
        // got a slot.
        let challenged = st.get("reliable.challenged").unwrap();
        // (The launchers' own first frames are challenged too.)
        let launcher_frames = 4 * launches;
        assert!(
            challenged <= n + launcher_frames && challenged >= n * 9 / 10,
            "{n} sent: {st}"
        );
        assert_eq!(st.get("reliable.refused_host_full"), Some(0), "{st}");
    }
    drop(ds);
    std::fs::remove_dir_all(&dir).unwrap();
}
