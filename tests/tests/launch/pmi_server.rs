//! gsas's PMI client against gsas's PMI server: real rank processes (this test binary
//! re-executed in child mode, through qemu when emulated) over socketpairs and TCP, plus
//! in-process checks of the server's handling of bad peers and of shutdown.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gsas_launch::pmi::{Client, ClientConfig, Event, Server, ServerConfig, Stop, tcp_env};
use gsas_tests::pmi::{ABORT_CODE, BAD_RANK, EXPECT_NODES, HALF_LINE_RANK, child_command, run_job};

const JOB_LIMIT: Duration = Duration::from_secs(300);

#[test]
fn socketpair_job_of_four() {
    let mut server = Server::new(ServerConfig::new(4)).unwrap();
    assert_eq!(server.process_mapping(), "(vector,(0,1,4))");
    let mut children = Vec::new();
    for r in 0..4 {
        let ep = server.add_local_rank(r).unwrap();
        let mut cmd = child_command("exchange");
        cmd.env(EXPECT_NODES, "0,0,0,0");
        children.push((r, ep.spawn(&mut cmd).unwrap()));
    }
    let out = run_job(server, children, JOB_LIMIT);
    let t = out.transcript();
    assert_eq!(out.stop, Stop::Done, "{t}");
    for r in 0..4 {
        let o = out.output(r);
        assert!(o.status.success(), "{t}");
        let ok = format!("pmi-child rank {r} of 4 ok");
        assert!(String::from_utf8_lossy(&o.stdout).contains(&ok), "{t}");
        assert!(out.events.contains(&Event::Finalized { rank: r }), "{t}");
    }
    assert_eq!(out.events.len(), 4, "{t}");
}

#[test]
fn mixed_socketpair_and_tcp_job_with_node_map() {
    let mut cfg = ServerConfig::new(4);
    cfg.node_of_rank = Some(vec![0, 0, 1, 1]);
    let mut server = Server::new(cfg).unwrap();
    assert_eq!(server.process_mapping(), "(vector,(0,2,2))");
    let addr = server
        .listen_tcp("127.0.0.1:0".parse::<SocketAddr>().unwrap())
        .unwrap();
    let mut children = Vec::new();
    for r in 0..2 {
        let ep = server.add_local_rank(r).unwrap();
        let mut cmd = child_command("exchange");
        cmd.env(EXPECT_NODES, "0,0,1,1");
        children.push((r, ep.spawn(&mut cmd).unwrap()));
    }
    for r in 2..4 {
        let mut cmd = child_command("exchange");
        cmd.env(EXPECT_NODES, "0,0,1,1")
            .envs(tcp_env(&addr.to_string(), r));
        children.push((r, cmd.spawn().unwrap()));
    }
    let out = run_job(server, children, JOB_LIMIT);
    let t = out.transcript();
    assert_eq!(out.stop, Stop::Done, "{t}");
    for r in 0..4 {
        assert!(out.output(r).status.success(), "{t}");
        assert!(out.events.contains(&Event::Finalized { rank: r }), "{t}");
    }
}

#[test]
fn abort_is_reported_and_fails_the_barrier() {
    let mut server = Server::new(ServerConfig::new(3)).unwrap();
    let mut children = Vec::new();
    for r in 0..3 {
        let ep = server.add_local_rank(r).unwrap();
        let mut cmd = child_command("abort");
        cmd.env(BAD_RANK, "1");
        children.push((r, ep.spawn(&mut cmd).unwrap()));
    }
    let out = run_job(server, children, JOB_LIMIT);
    let t = out.transcript();
    assert_eq!(out.stop, Stop::Done, "{t}");
    assert!(
        out.events.contains(&Event::Abort {
            rank: 1,
            code: ABORT_CODE,
            // gsas's client sends it in hex to gsas's server: blanks survive.
            message: Some("rank 1 gives up".into())
        }),
        "{t}"
    );
    assert_eq!(out.output(1).status.code(), Some(ABORT_CODE), "{t}");
    for r in [0, 2] {
        assert!(out.output(r).status.success(), "{t}");
        let stdout = String::from_utf8_lossy(&out.output(r).stdout).into_owned();
        assert!(
            stdout.contains("barrier failed as expected: rank_1_aborted"),
            "{t}"
        );
        assert!(out.events.contains(&Event::Finalized { rank: r }), "{t}");
    }
    assert!(
        !out.events.iter().any(|e| matches!(e, Event::Lost { .. })),
        "{t}"
    );
}

#[test]
fn peers_dying_mid_protocol_are_reported() {
    let mut server = Server::new(ServerConfig::new(3)).unwrap();
    let mut children = Vec::new();
    for r in 0..3 {
        let ep = server.add_local_rank(r).unwrap();
        let mut cmd = child_command("die");
        cmd.env(BAD_RANK, "1").env(HALF_LINE_RANK, "2");
        children.push((r, ep.spawn(&mut cmd).unwrap()));
    }
    let out = run_job(server, children, JOB_LIMIT);
    let t = out.transcript();
    assert_eq!(out.stop, Stop::Done, "{t}");
    assert_eq!(out.output(1).status.code(), Some(3), "{t}");
    assert_eq!(out.output(2).status.code(), Some(4), "{t}");
    assert!(out.output(0).status.success(), "{t}");
    assert!(out.events.contains(&Event::Finalized { rank: 0 }), "{t}");
    let lost = |rank: u32, what: &str| {
        out.events.iter().any(
            |e| matches!(e, Event::Lost { rank: r, reason } if *r == rank && reason.contains(what)),
        )
    };
    assert!(lost(1, "without finalize"), "{t}");
    assert!(lost(2, "middle of a line: cmd=put kvsname="), "{t}");
}

// ---- in-process checks: a raw peer talks to the server directly ----

/// Steps `server` until `done` holds for the events seen so far (at most 60 s).
fn step_until(server: &mut Server, events: &mut Vec<Event>, done: impl Fn(&[Event]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(events) {
        assert!(
            Instant::now() < deadline,
            "condition not reached; events: {events:?}"
        );
        server
            .step(Duration::from_millis(50), |e| events.push(e))
            .unwrap();
    }
}

/// Sends `line` on `peer`, serves it, and returns the reply lines that arrive (reading
/// until `lines` lines are complete).
fn ask(server: &mut Server, peer: &mut UnixStream, line: &[u8], lines: usize) -> String {
    peer.write_all(line).unwrap();
    peer.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.iter().filter(|&&b| b == b'\n').count() < lines {
        assert!(
            Instant::now() < deadline,
            "no reply to {line:?}: got {got:?}"
        );
        server.step(Duration::from_millis(20), |_| {}).unwrap();
        let mut buf = [0u8; 4096];
        match peer.read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
    String::from_utf8(got).unwrap()
}

/// True once the server has closed its side of `peer`.
fn is_closed(server: &mut Server, peer: &mut UnixStream) -> bool {
    peer.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        server.step(Duration::from_millis(20), |_| {}).unwrap();
        let mut buf = [0u8; 256];
        match peer.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return true,
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}

fn raw_peer(server: &mut Server, rank: u32) -> UnixStream {
    // The test plays the child: take the child's end as a plain socket.
    UnixStream::from(server.add_local_rank(rank).unwrap().into_fd())
}

#[test]
fn hydra_reply_formats_verbatim() {
    let mut cfg = ServerConfig::new(2);
    cfg.kvsname = "kvs_test".into();
    cfg.universe_size = -1;
    let mut server = Server::new(cfg).unwrap();
    let mut p = raw_peer(&mut server, 0);
    let s = &mut server;
    assert_eq!(
        ask(s, &mut p, b"cmd=init pmi_version=1 pmi_subversion=1\n", 1),
        "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0 gsas_notes=1\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=get_maxes\n", 1),
        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=get_appnum\n", 1),
        "cmd=appnum appnum=0\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=get_my_kvsname\n", 1),
        "cmd=my_kvsname kvsname=kvs_test\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=get_universe_size\n", 1),
        "cmd=universe_size size=-1\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=put kvsname=kvs_test key=a value=b\n", 1),
        "cmd=put_result rc=0 msg=success\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=get kvsname=kvs_test key=a\n", 1),
        "cmd=get_result rc=0 msg=success value=b\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=get kvsname=kvs_test key=nonexistent\n", 1),
        "cmd=get_result rc=-1 msg=key_nonexistent_not_found value=unknown\n"
    );
    assert_eq!(
        ask(
            s,
            &mut p,
            b"cmd=get kvsname=kvs_test key=PMI_process_mapping\n",
            1
        ),
        "cmd=get_result rc=0 msg=success value=(vector,(0,1,2))\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=initack pmiid=0\n", 4),
        "cmd=initack\ncmd=set size=2\ncmd=set rank=0\ncmd=set debug=0\n"
    );
    assert_eq!(ask(s, &mut p, b"cmd=finalize\n", 1), "cmd=finalize_ack\n");
}

#[test]
fn bad_requests_get_error_replies_and_the_connection_survives() {
    let mut server = Server::new(ServerConfig::new(1)).unwrap();
    let kvs = server.config().kvsname.clone();
    let mut p = raw_peer(&mut server, 0);
    let s = &mut server;
    assert_eq!(
        ask(s, &mut p, b"cmd=frobnicate x=1\n", 1),
        "cmd=error rc=-1 msg=unknown_command_frobnicate\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=put key=a value=b\n", 1),
        "cmd=put_result rc=-1 msg=put_needs_kvsname_key_and_value\n"
    );
    let reserved = format!("cmd=put kvsname={kvs} key=PMI_mine value=1\n");
    assert_eq!(
        ask(s, &mut p, reserved.as_bytes(), 1),
        "cmd=put_result rc=-1 msg=keys_with_PMI_prefix_are_reserved\n"
    );
    let long_key = format!("cmd=put kvsname={kvs} key={} value=1\n", "k".repeat(64));
    assert_eq!(
        ask(s, &mut p, long_key.as_bytes(), 1),
        "cmd=put_result rc=-1 msg=key_length_not_1_to_63\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=put kvsname=other key=a value=1\n", 1),
        "cmd=put_result rc=-1 msg=unknown_kvsname\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=get kvsname=other key=a\n", 1),
        "cmd=get_result rc=-1 msg=unknown_kvsname value=unknown\n"
    );
    assert_eq!(
        ask(s, &mut p, b"cmd=init pmi_version=2 pmi_subversion=0\n", 1),
        "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n"
    );
    // Still served after all that.
    assert_eq!(
        ask(s, &mut p, b"cmd=get_appnum\n", 1),
        "cmd=appnum appnum=0\n"
    );
}

#[test]
fn garbage_closes_the_connection_with_a_reason() {
    let cases: [(&[u8], &str); 5] = [
        (b"hello world\n", "does not start with cmd="),
        (b"cmd=init\x00\xff\n", "not printable ASCII"),
        (b"cmd=put novalue\n", "is not key=value"),
        (&[b'a'; 2000], "longer than 1024"),
        (b"cmd=barrier_in\ncmd=barrier_in\n", "barrier_in twice"),
    ];
    for (input, why) in cases {
        // Two ranks so that a single barrier_in cannot complete.
        let mut server = Server::new(ServerConfig::new(2)).unwrap();
        let mut p = raw_peer(&mut server, 0);
        let _other = raw_peer(&mut server, 1);
        p.write_all(input).unwrap();
        let mut events = Vec::new();
        step_until(&mut server, &mut events, |ev| {
            ev.iter().any(|e| matches!(e, Event::Lost { rank: 0, .. }))
        });
        let reason = match &events[0] {
            Event::Lost { reason, .. } => reason.clone(),
            e => panic!("{e:?}"),
        };
        assert!(reason.contains(why), "{input:?}: {reason}");
        assert!(is_closed(&mut server, &mut p), "{input:?}");
    }
}

#[test]
fn bad_tcp_peers_are_rejected_and_good_ones_served() {
    let mut cfg = ServerConfig::new(3);
    cfg.handshake_timeout = Duration::from_millis(300);
    let mut server = Server::new(cfg).unwrap();
    let _rank0 = raw_peer(&mut server, 0);
    let addr = server
        .listen_tcp("127.0.0.1:0".parse::<SocketAddr>().unwrap())
        .unwrap();
    let mut events = Vec::new();
    let cases: [(&[u8], &str); 4] = [
        (
            b"cmd=init pmi_version=1 pmi_subversion=1\n",
            "expected cmd=initack",
        ),
        (b"cmd=initack pmiid=99\n", "not a rank of this job of 3"),
        (b"cmd=initack pmiid=0\n", "rank 0 is already connected"),
        (b"", "no cmd=initack within 0.3 s"),
    ];
    for (n, (input, why)) in cases.into_iter().enumerate() {
        let mut peer = TcpStream::connect(addr).unwrap();
        peer.write_all(input).unwrap();
        step_until(&mut server, &mut events, |ev| ev.len() > n);
        match &events[n] {
            Event::Rejected { reason, .. } => assert!(reason.contains(why), "{reason}"),
            e => panic!("{e:?}"),
        }
    }

    // A real client on a thread gets through: rank 1 over TCP.
    let (tx, rx) = mpsc::channel();
    let url = addr.to_string();
    let t = std::thread::spawn(move || {
        let r = (|| {
            let mut c = Client::connect(&url, 1, ClientConfig::default())?;
            c.kvs_put("tcp", b"works")?;
            let v = c.kvs_get("tcp")?;
            c.finalize()?;
            Ok::<_, gsas_launch::pmi::PmiError>((c.rank(), c.size(), v))
        })();
        tx.send(r).unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let result = loop {
        server
            .step(Duration::from_millis(20), |e| events.push(e))
            .unwrap();
        if let Ok(r) = rx.try_recv() {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "client thread stuck; events {events:?}"
        );
    };
    t.join().unwrap();
    assert_eq!(result.unwrap(), (1, 3, Some(b"works".to_vec())));
    assert_eq!(events.last(), Some(&Event::Finalized { rank: 1 }));
}

/// Reads from `peer` (non-blocking) until `want` appears, stepping `server` meanwhile.
fn tcp_reply_contains(
    server: &mut Server,
    peer: &mut TcpStream,
    got: &mut Vec<u8>,
    want: &str,
) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        if String::from_utf8_lossy(got).contains(want) {
            return true;
        }
        match peer.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                server.step(Duration::from_millis(5), |_| {}).unwrap();
            }
            Err(_) => return false,
        }
    }
}

/// A job of more TCP ranks than `MAX_PENDING_CONNECTIONS` whose ranks all connect before
/// any identifies (what 512 PEs started at once on sixteen nodes do): every one is served.
/// Before, connections past the 256th were refused ("more than 256 connections waiting to
/// identify") and the job failed in `shmem_init`.
#[test]
fn more_ranks_than_the_pending_bound_all_connect_at_once() {
    let _ = gsas_sys::process::raise_nofile_limit(None);
    let n = u32::try_from(gsas_launch::pmi::MAX_PENDING_CONNECTIONS).unwrap() + 64;
    let mut server = Server::new(ServerConfig::new(n)).unwrap();
    let addr = server
        .listen_tcp("127.0.0.1:0".parse::<SocketAddr>().unwrap())
        .unwrap();
    // Every rank connects (the kernel queues them: the listener's backlog holds them all)
    // and is accepted before any says who it is.
    let mut peers: Vec<TcpStream> = (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut events = Vec::new();
    for _ in 0..20 {
        server
            .step(Duration::from_millis(20), |e| events.push(e))
            .unwrap();
    }
    for (r, p) in peers.iter_mut().enumerate() {
        p.write_all(format!("cmd=initack pmiid={r}\n").as_bytes())
            .unwrap();
        p.set_nonblocking(true).unwrap();
    }
    for (r, p) in peers.iter_mut().enumerate() {
        let mut got = Vec::new();
        let want = format!("cmd=set rank={r}\n");
        assert!(
            tcp_reply_contains(&mut server, p, &mut got, &want),
            "rank {r} of {n} was not served: {:?}; events {events:?}",
            String::from_utf8_lossy(&got)
        );
    }
    assert!(events.is_empty(), "{events:?}");
}

/// Strangers that fill every pending slot only delay a rank of the job: its connection
/// waits in the kernel's queue until a stranger's handshake times out, then is served.
#[test]
fn a_rank_behind_a_full_set_of_silent_strangers_waits_and_is_served() {
    let _ = gsas_sys::process::raise_nofile_limit(None);
    let mut cfg = ServerConfig::new(2);
    cfg.handshake_timeout = Duration::from_millis(500);
    let mut server = Server::new(cfg).unwrap();
    let _rank0 = raw_peer(&mut server, 0);
    let addr = server
        .listen_tcp("127.0.0.1:0".parse::<SocketAddr>().unwrap())
        .unwrap();
    let strangers: Vec<TcpStream> = (0..gsas_launch::pmi::MAX_PENDING_CONNECTIONS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    // Let the server accept all of them before the rank connects.
    for _ in 0..10 {
        server.step(Duration::from_millis(10), |_| {}).unwrap();
    }
    let mut rank1 = TcpStream::connect(addr).unwrap();
    rank1.write_all(b"cmd=initack pmiid=1\n").unwrap();
    rank1.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let start = Instant::now();
    assert!(
        tcp_reply_contains(&mut server, &mut rank1, &mut got, "cmd=set rank=1\n"),
        "rank 1 was refused: {:?}",
        String::from_utf8_lossy(&got)
    );
    // It was held back until the strangers' handshakes expired, not refused.
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    drop(strangers);
}

#[test]
fn lost_rank_fails_a_pending_barrier_at_once() {
    let mut server = Server::new(ServerConfig::new(2)).unwrap();
    let mut p0 = raw_peer(&mut server, 0);
    let p1 = raw_peer(&mut server, 1);
    p0.write_all(b"cmd=barrier_in\n").unwrap();
    server.step(Duration::from_millis(50), |_| {}).unwrap();
    drop(p1);
    assert_eq!(
        ask(&mut server, &mut p0, b"", 1),
        "cmd=barrier_out rc=-1 msg=rank_1_lost\n"
    );
}

#[test]
fn shutdown_stops_a_running_server() {
    let mut server = Server::new(ServerConfig::new(2)).unwrap();
    let _p = raw_peer(&mut server, 0);
    let handle = server.shutdown_handle();
    assert!(!handle.is_shutdown());
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let r = server.run(|_| {});
        tx.send(r.map_err(|e| e.to_string())).unwrap();
    });
    // The server is running (no rank finished); it must stop only when asked.
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    handle.shutdown();
    let r = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("run did not return after shutdown");
    assert_eq!(r, Ok(Stop::Shutdown));
    assert!(handle.is_shutdown());
    t.join().unwrap();
}

#[test]
fn server_config_is_validated() {
    assert!(Server::new(ServerConfig::new(0)).is_err());
    let mut c = ServerConfig::new(2);
    c.node_of_rank = Some(vec![0]);
    assert!(
        Server::new(c)
            .unwrap_err()
            .to_string()
            .contains("1 entries for 2 ranks")
    );
    let mut c = ServerConfig::new(2);
    c.kvsname = "has space".into();
    assert!(Server::new(c).is_err());
    let mut s = Server::new(ServerConfig::new(2)).unwrap();
    s.add_local_rank(1).unwrap();
    assert!(
        s.add_local_rank(1)
            .unwrap_err()
            .to_string()
            .contains("already connected")
    );
    assert!(
        s.add_local_rank(2)
            .unwrap_err()
            .to_string()
            .contains("outside the job")
    );
}
