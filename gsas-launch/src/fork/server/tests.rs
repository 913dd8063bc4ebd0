use super::*;
use crate::fork::request::LaunchSpec;
use gsas_core::wire::GlobalAddr;
use std::net::TcpListener;

fn secret() -> Secret {
    Secret::from_bytes(b"unit-test-cluster-secret").unwrap()
}

fn request(stream: SocketAddr, argv: &[&str], nonce: u8) -> ForkRequest {
    ForkRequest {
        node: 1,
        job_id: 0xabc0 + u64::from(nonce),
        job_key: 77,
        nonce: [nonce; 16],
        timestamp_ms: now_ms(),
        spec: LaunchSpec {
            size: 4,
            ranks: vec![2, 3],
            grace_ms: 200,
            pmi: "127.0.0.1:9".parse().unwrap(),
            stream,
            cwd: std::env::temp_dir(),
            argv: argv.iter().map(OsString::from).collect(),
            env: vec![("PATH".into(), std::env::var_os("PATH").unwrap_or_default())],
        },
    }
}

fn frag(total: usize, offset: usize) -> Fragment {
    Fragment {
        base: GlobalAddr::from_raw(5),
        total: total as u32,
        offset: offset as u32,
    }
}

fn server() -> ForkServer {
    let mut cfg = ForkServerConfig::new(1, secret(), "/tmp/unit-test.sock".into());
    cfg.connect_timeout = Duration::from_secs(5);
    ForkServer::new(cfg)
}

fn counter(s: &ForkServer, name: &str) -> u64 {
    s.counters()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

/// Reads frames from the daemon's connection until Done (bounded).
fn collect(listener: &TcpListener) -> Vec<stream::Frame> {
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut r = FrameReader::new();
    let mut frames = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while let Some(f) = r.next_frame().unwrap() {
            let done = f.ty == FrameType::Done;
            frames.push(f);
            if done {
                return frames;
            }
        }
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "the daemon closed before Done: {frames:?}");
        r.push(&buf[..n]);
    }
}

#[test]
fn an_accepted_request_runs_its_pes_and_reports_to_the_launcher() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let req = request(
        listener.local_addr().unwrap(),
        &[
            "sh",
            "-c",
            "echo out $PMI_ID $GSAS_NODE; echo err >&2; exit $PMI_ID",
        ],
        1,
    );
    let bytes = req.emit(&secret()).unwrap();
    let mut s = server();
    // In three fragments, out of order, one of them twice (its acknowledgement was lost
    // with the sender's slot): taken once.
    let third = bytes.len() / 3;
    let from: SocketAddr = "127.0.0.1:5555".parse().unwrap();
    // A fragment proves nothing; the whole request, authenticated, is accepted.
    for _ in 0..2 {
        assert_eq!(
            s.fork(from, 77, frag(bytes.len(), third), &bytes[third..2 * third]),
            Ok(ForkProgress::Fragment)
        );
    }
    assert_eq!(
        s.fork(from, 77, frag(bytes.len(), 2 * third), &bytes[2 * third..]),
        Ok(ForkProgress::Fragment)
    );
    assert_eq!(
        s.fork(from, 77, frag(bytes.len(), 0), &bytes[..third]),
        Ok(ForkProgress::Accepted)
    );
    let frames = collect(&listener);
    let hello = &frames[0];
    assert_eq!(hello.ty, FrameType::Hello);
    let nonce = req.nonce;
    assert_eq!(
        stream::check_hello(&secret(), req.job_id, 77, &hello.payload, |n| (n == 1)
            .then_some(nonce)),
        Ok(1)
    );
    let out = |rank: u32, st: u8| -> Vec<u8> {
        frames
            .iter()
            .filter(|f| f.ty == FrameType::Output && f.rank == rank && f.stream == st)
            .flat_map(|f| f.payload.clone())
            .collect()
    };
    assert_eq!(out(2, STDOUT), b"out 2 1\n");
    assert_eq!(out(3, STDERR), b"err\n");
    for rank in [2u32, 3] {
        let e = frames
            .iter()
            .find(|f| f.ty == FrameType::Exited && f.rank == rank)
            .unwrap();
        let (_, raw) = stream::parse_exited(&e.payload).unwrap();
        assert_eq!(
            std::process::ExitStatus::from_raw(raw).code(),
            Some(rank as i32)
        );
    }
    assert_eq!(counter(&s, "fork.accepted"), 1);
    assert_eq!(counter(&s, "fork.pes_started"), 2);
    // The same request again from the same sender (its reliability state was lost before
    // the acknowledgement reached it): answered as before, nothing started again.
    assert_eq!(
        s.fork(from, 77, frag(bytes.len(), 0), &bytes),
        Ok(ForkProgress::Accepted)
    );
    assert_eq!(counter(&s, "fork.repeated"), 1);
    assert_eq!(counter(&s, "fork.accepted"), 1);
    listener.set_nonblocking(true).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        listener.accept().is_err(),
        "a repeated request connected to the launcher again"
    );
    assert_eq!(counter(&s, "fork.pes_started"), 2);
    // The same bytes from another sender, or under another job key: a replay.
    let other: SocketAddr = "127.0.0.1:5557".parse().unwrap();
    assert_eq!(
        s.fork(other, 77, frag(bytes.len(), 0), &bytes),
        Err(ErrorCode::BadKey)
    );
    assert_eq!(counter(&s, "fork.refused.replay"), 1);
    assert_eq!(counter(&s, "fork.repeated"), 1);
}

#[test]
fn a_fragment_of_a_reassembled_request_sent_again_gets_its_answer() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let req = request(listener.local_addr().unwrap(), &["true"], 11);
    let bytes = req.emit(&secret()).unwrap();
    let from: SocketAddr = "127.0.0.1:5560".parse().unwrap();
    let mut s = server();
    let half = bytes.len() / 2;
    let first = |s: &mut ForkServer| s.fork(from, 77, frag(bytes.len(), 0), &bytes[..half]);
    let last = |s: &mut ForkServer| s.fork(from, 77, frag(bytes.len(), half), &bytes[half..]);
    assert_eq!(first(&mut s), Ok(ForkProgress::Fragment));
    assert_eq!(last(&mut s), Ok(ForkProgress::Accepted));
    let _ = collect(&listener);
    // The last fragment again (the daemon lost the datagrams' state with the sender's slot),
    // then the first: both get the request's answer; nothing starts again.
    assert_eq!(last(&mut s), Ok(ForkProgress::Accepted));
    assert_eq!(first(&mut s), Ok(ForkProgress::Accepted));
    assert_eq!(counter(&s, "fork.repeated"), 2);
    assert_eq!(counter(&s, "fork.accepted"), 1);
    assert_eq!(counter(&s, "fork.pes_started"), 2);
    // From another port it is a new request: its fragments are reassembled and refused as a
    // replay.
    let other: SocketAddr = "127.0.0.1:5561".parse().unwrap();
    assert_eq!(
        s.fork(other, 77, frag(bytes.len(), 0), &bytes[..half]),
        Ok(ForkProgress::Fragment)
    );
    assert_eq!(
        s.fork(other, 77, frag(bytes.len(), half), &bytes[half..]),
        Err(ErrorCode::BadKey)
    );
    assert_eq!(counter(&s, "fork.refused.replay"), 1);
}

#[test]
fn a_refused_request_sent_again_is_refused_the_same_way_and_counted_once() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let from: SocketAddr = "127.0.0.1:5558".parse().unwrap();
    let mut s = server();
    let mut other_node = request(listener.local_addr().unwrap(), &["true"], 9);
    other_node.node = 2;
    let bytes = other_node.emit(&secret()).unwrap();
    for _ in 0..2 {
        assert_eq!(
            s.fork(from, 77, frag(bytes.len(), 0), &bytes),
            Err(ErrorCode::HostFailure)
        );
    }
    assert_eq!(counter(&s, "fork.refused.wrong_node"), 1);
    assert_eq!(counter(&s, "fork.refused.replay"), 0);
    assert_eq!(counter(&s, "fork.repeated"), 1);
    assert_eq!(counter(&s, "fork.accepted"), 0);
}

#[test]
fn refusals_are_classified_and_counted() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let from: SocketAddr = "127.0.0.1:5556".parse().unwrap();
    let mut s = server();
    let bytes = request(addr, &["true"], 2)
        .emit(&Secret::from_bytes(b"not-the-cluster-secret").unwrap())
        .unwrap();
    assert_eq!(
        s.fork(from, 77, frag(bytes.len(), 0), &bytes),
        Err(ErrorCode::BadKey)
    );
    assert_eq!(counter(&s, "fork.refused.bad_mac"), 1);
    let bytes = request(addr, &["true"], 3).emit(&secret()).unwrap();
    assert_eq!(
        s.fork(from, 78, frag(bytes.len(), 0), &bytes),
        Err(ErrorCode::BadKey)
    );
    assert_eq!(counter(&s, "fork.refused.wrong_key"), 1);
    let mut old = request(addr, &["true"], 4);
    old.timestamp_ms -= 600_000;
    let bytes = old.emit(&secret()).unwrap();
    assert_eq!(
        s.fork(from, 77, frag(bytes.len(), 0), &bytes),
        Err(ErrorCode::BadKey)
    );
    assert_eq!(counter(&s, "fork.refused.stale"), 1);
    let mut other = request(addr, &["true"], 5);
    other.node = 2;
    let bytes = other.emit(&secret()).unwrap();
    assert_eq!(
        s.fork(from, 77, frag(bytes.len(), 0), &bytes),
        Err(ErrorCode::HostFailure)
    );
    assert_eq!(counter(&s, "fork.refused.wrong_node"), 1);
    assert_eq!(
        s.fork(from, 77, frag(12, 0), b"garbage-here"),
        Err(ErrorCode::Malformed)
    );
    assert_eq!(
        s.fork(from, 77, frag(MAX_REQUEST + 1, 0), b"x"),
        Err(ErrorCode::TooLarge)
    );
    // Overlapping fragments of one request: the same offset with other bytes (the same
    // bytes again are a fragment whose acknowledgement was lost, taken once).
    assert_eq!(
        s.fork(from, 77, frag(100, 0), &[1; 10]),
        Ok(ForkProgress::Fragment)
    );
    assert_eq!(
        s.fork(from, 77, frag(100, 0), &[1; 10]),
        Ok(ForkProgress::Fragment)
    );
    assert_eq!(
        s.fork(from, 77, frag(100, 0), &[2; 10]),
        Err(ErrorCode::Malformed)
    );
    // Fragments at different offsets that cover the same bytes.
    assert_eq!(
        s.fork(from, 77, frag(100, 0), &[1; 10]),
        Ok(ForkProgress::Fragment)
    );
    assert_eq!(
        s.fork(from, 77, frag(100, 20), &[1; 10]),
        Ok(ForkProgress::Fragment)
    );
    assert_eq!(
        s.fork(from, 77, frag(100, 15), &[1; 10]),
        Err(ErrorCode::Malformed)
    );
    assert_eq!(counter(&s, "fork.refused.malformed"), 3);
    assert_eq!(counter(&s, "fork.accepted"), 0);
    assert_eq!(counter(&s, "fork.refused.too_large"), 1);
}

#[test]
fn a_program_that_cannot_start_is_reported() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let req = request(listener.local_addr().unwrap(), &["/nonexistent/gsas-pe"], 6);
    let bytes = req.emit(&secret()).unwrap();
    let mut s = server();
    let from: SocketAddr = "127.0.0.1:5557".parse().unwrap();
    assert_eq!(
        s.fork(from, 77, frag(bytes.len(), 0), &bytes),
        Ok(ForkProgress::Accepted)
    );
    let frames = collect(&listener);
    let f = frames
        .iter()
        .find(|f| f.ty == FrameType::StartFailed)
        .unwrap();
    let msg = String::from_utf8_lossy(&f.payload);
    assert!(
        msg.contains("PE 2 cannot be started on node 1") && msg.contains("/nonexistent/gsas-pe"),
        "{msg}"
    );
    assert!(!frames.iter().any(|f| f.ty == FrameType::Started));
    assert_eq!(counter(&s, "fork.start_failures"), 1);
}

#[test]
fn the_pes_end_when_the_launcher_connection_drops() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let req = request(listener.local_addr().unwrap(), &["sleep", "60"], 7);
    let bytes = req.emit(&secret()).unwrap();
    let mut s = server();
    let from: SocketAddr = "127.0.0.1:5558".parse().unwrap();
    assert_eq!(
        s.fork(from, 77, frag(bytes.len(), 0), &bytes),
        Ok(ForkProgress::Accepted)
    );
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // Wait for both Started frames, then hang up.
    let mut r = FrameReader::new();
    let mut pids = Vec::new();
    let mut buf = [0u8; 1024];
    while pids.len() < 2 {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0);
        r.push(&buf[..n]);
        while let Some(f) = r.next_frame().unwrap() {
            if f.ty == FrameType::Started {
                pids.push(stream::parse_u32(&f.payload).unwrap());
            }
        }
    }
    drop(conn);
    let until = Instant::now() + Duration::from_secs(30);
    while counter(&s, "fork.jobs_active") > 0 {
        assert!(Instant::now() < until, "the job's PEs were not ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    for pid in pids {
        // SAFETY: signal 0 only checks whether the process exists.
        let got = unsafe { libc::kill(pid as i32, 0) };
        assert_ne!(got, 0, "pid {pid} survived");
    }
    let _ = &mut s;
}
