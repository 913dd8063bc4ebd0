use super::*;

#[test]
fn local_addresses() {
    assert!(is_local_ip("127.0.0.1".parse().unwrap()));
    assert!(is_local_ip("127.3.4.5".parse().unwrap()));
    // TEST-NET-3 is never assigned to a machine.
    assert!(!is_local_ip("203.0.113.77".parse().unwrap()));
    assert_eq!(
        source_ip("127.0.0.1:9".parse().unwrap()).unwrap(),
        "127.0.0.1".parse::<IpAddr>().unwrap()
    );
}

#[test]
fn a_silent_daemon_is_reported_within_the_deadline() {
    // A bound UDP socket that never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = ForkTarget {
        daemon: silent.local_addr().unwrap(),
        request: vec![1; 100],
    };
    let t0 = Instant::now();
    let r = send_forks(
        "127.0.0.1".parse().unwrap(),
        5,
        61440,
        Duration::from_millis(300),
        &[target],
    );
    let took = t0.elapsed();
    assert!(matches!(r[0], Err(ForkError::NoAnswer(_))), "{r:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let msg = r[0].clone().unwrap_err().to_string();
    assert!(msg.contains("did not answer the FORK request"), "{msg}");
}

#[test]
fn refusal_messages_say_what_to_check() {
    let m = |c| ForkError::Refused(c).to_string();
    assert!(m(ErrorCode::NotSupported).contains("fork_allowed"));
    assert!(m(ErrorCode::BadKey).contains("authentication failed"));
    assert!(m(ErrorCode::Busy).contains("busy"));
    assert!(m(ErrorCode::HostFailure).contains("node id"));
}
