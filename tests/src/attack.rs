//! Traffic an attacker (or a broken peer) sends an atomic service, for the tests that
//! check it keeps serving: a flood of well-formed frames with random job keys, and a
//! bounded-time wire fuzzer (random datagrams, random requests with a valid key, replayed
//! and reordered frames whose effect is counted exactly).

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use gsas_core::reliable::frame::{AckRepr, Frame, FrameRepr, HEADER_LEN, emit_packet_prefix};
use gsas_core::reliable::seq::Seq;
use gsas_core::transport::Transport;
use gsas_core::wire::{
    AtomicDesc, AtomicOp, AtomicType, ErrorCode, GlobalAddr, Packet, Request, RequestRepr, SenderId,
};
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};

/// Whether the tests run under qemu-user (the aarch64 stage on an x86_64 host), where
/// every datagram's path is emulated and long runs are cut short.
pub fn emulated() -> bool {
    matches!(
        crate::launch::launch(),
        crate::launch::Launch::Emulated { .. }
    )
}

/// Prints (outside the harness's capture) that `test` runs a shorter version under qemu.
pub fn note_shortened(test: &str, what: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SHORTENED: {test}: {what} under qemu (GSAS_QEMU_FULL=1 runs the full length)"
    );
}

/// Whether a long test runs at full length: natively, or with `GSAS_QEMU_FULL=1`.
pub fn full_length(test: &str, what: &str) -> bool {
    if !emulated() || std::env::var_os("GSAS_QEMU_FULL").is_some_and(|v| v == "1") {
        return true;
    }
    note_shortened(test, what);
    false
}

/// A xorshift generator: the tests are reproducible from their seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next number of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A UDP transport on an ephemeral loopback port (the attacker's socket).
pub fn socket() -> UdpTransport {
    UdpTransport::bind("127.0.0.1:0".parse().unwrap(), UdpConfig::default()).unwrap()
}

/// Sends one reliability frame with `packets` (none: a bare ack) to `to` as `peer` would.
pub fn send_frame(udp: &mut UdpTransport, to: UdpPeer, repr: &FrameRepr, packets: &[&[u8]]) {
    let len = HEADER_LEN + packets.iter().map(|p| 2 + p.len()).sum::<usize>();
    udp.send(to, len, |b| {
        repr.emit(&mut Frame::new_unchecked(&mut *b));
        let mut at = HEADER_LEN;
        for p in packets {
            emit_packet_prefix(&mut b[at..], p.len())
                .unwrap()
                .copy_from_slice(p);
            at += 2 + p.len();
        }
    })
    .unwrap();
}

/// Sends `n` well-formed reliability frames from one socket to `to`, each with a fresh
/// pseudo-random job key and sender epoch: every third one a data frame carrying 32 bytes,
/// the others bare acknowledgements. Pauses a little every 32 frames so that the service's
/// socket buffer does not overflow (a datagram dropped by the kernel would test nothing).
pub fn flood(to: SocketAddr, n: usize, seed: u64) {
    let mut udp = socket();
    let mut rng = Rng(seed);
    for i in 0..n {
        let key = rng.next_u64() | 1;
        let data = i % 3 == 0;
        let repr = FrameRepr {
            epoch: rng.next_u64() | 1,
            dest_epoch: 0,
            seq: data.then_some(Seq(i as u32)),
            base: Seq(i as u32),
            ack: (!data).then_some(AckRepr {
                cum: Seq(0),
                sack: 0,
            }),
            cookie: None,
        };
        let packets: &[&[u8]] = if data { &[&[0x5a; 32]] } else { &[] };
        send_frame(&mut udp, UdpPeer { addr: to, key }, &repr, packets);
        if i % 32 == 31 {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

/// A fork handler that refuses everything: installing it opens the host share of the
/// peer table (peers of unknown keys get a slot, for remote FORK).
pub struct NoFork;

impl gsas_service::ForkHandler for NoFork {
    fn fork(
        &mut self,
        _: SocketAddr,
        _: u64,
        _: gsas_core::wire::Fragment,
        _: &[u8],
    ) -> Result<gsas_service::ForkProgress, ErrorCode> {
        Err(ErrorCode::NotSupported)
    }
}

/// What [`fuzz`] sent.
#[derive(Debug, Default)]
pub struct FuzzReport {
    /// Datagrams of random bytes.
    pub garbage: u64,
    /// Frames carrying random requests with the fuzz job's key.
    pub random_requests: u64,
    /// Distinct frames, each an ADD of 1 to the replay job's counter.
    pub adds: u64,
    /// Extra copies of those frames (replays, in shuffled order).
    pub replays: u64,
}

/// Fuzzes the service at `to` for `time`: datagrams of random bytes (some with a valid
/// gsas header or frame start), well-formed frames with random requests under
/// `fuzz_key` (a job whose memory may be scribbled on), and frames each carrying an
/// ADD of 1 to the 8 bytes at `counter` under `replay_key`, every one sent two to four
/// times in shuffled groups: the service must execute each exactly once.
pub fn fuzz(
    to: SocketAddr,
    fuzz_key: u64,
    replay_key: u64,
    counter: GlobalAddr,
    time: Duration,
    seed: u64,
) -> FuzzReport {
    let mut rng = Rng(seed);
    let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut fuzzer = socket();
    let mut replayer = socket();
    let fuzz_peer = UdpPeer {
        addr: to,
        key: fuzz_key,
    };
    let replay_peer = UdpPeer {
        addr: to,
        key: replay_key,
    };
    let (fuzz_epoch, replay_epoch) = (rng.next_u64() | 1, rng.next_u64() | 1);
    let mut fuzz_seq = 1u32;
    let mut replay_seq = 1u32;
    let add = AtomicDesc::new(AtomicOp::Add, AtomicType::U64).unwrap();
    let mut report = FuzzReport::default();
    let t0 = Instant::now();
    while t0.elapsed() < time {
        // Random bytes: nothing, a gsas header, or a gsas header and a frame start.
        for _ in 0..8 {
            let len = (rng.next_u64() % 200) as usize;
            let mut d: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if len >= 16 && rng.next_u64() % 2 == 0 {
                d[..4].copy_from_slice(b"GSAS");
                d[4] = 1;
                d[8..16].copy_from_slice(&fuzz_key.to_le_bytes());
                if len >= 19 && rng.next_u64() % 2 == 0 {
                    d[16..18].copy_from_slice(&0x6752u16.to_le_bytes());
                    d[18] = 1;
                }
            }
            let _ = raw.send_to(&d, to);
            report.garbage += 1;
        }
        // Random requests in well-formed, in-order frames of the fuzz job.
        for _ in 0..4 {
            let len = 1 + (rng.next_u64() % 96) as usize;
            let mut req: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if len >= 8 {
                // A known type more often than not.
                req[7] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x7f]
                    [(rng.next_u64() % 9) as usize];
            }
            let repr = FrameRepr {
                epoch: fuzz_epoch,
                dest_epoch: 0,
                seq: Some(Seq(fuzz_seq)),
                base: Seq(fuzz_seq),
                ack: None,
                cookie: None,
            };
            fuzz_seq += 1;
            send_frame(&mut fuzzer, fuzz_peer, &repr, &[&req]);
            report.random_requests += 1;
        }
        // A group of 8 ADD frames, each sent 2..=4 times, shuffled; then one old frame
        // again (long delivered: a replay the window must still recognise).
        let first = replay_seq;
        let mut sends = Vec::new();
        for s in first..first + 8 {
            for _ in 0..2 + rng.next_u64() % 3 {
                sends.push(s);
            }
        }
        for i in (1..sends.len()).rev() {
            sends.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        if first > 8 {
            sends.push(first - 1 - (rng.next_u64() % 8) as u32);
        }
        let frame_of = |s: u32| {
            let body = RequestRepr {
                sender: SenderId::new(7).unwrap(),
                token: s,
                body: Request::Atomic {
                    addr: counter,
                    desc: add,
                    operand: 1,
                    comparand: 0,
                },
            };
            let mut req = vec![0u8; body.buffer_len()];
            body.emit(&mut Packet::new_unchecked(&mut req[..]));
            let repr = FrameRepr {
                epoch: replay_epoch,
                dest_epoch: 0,
                seq: Some(Seq(s)),
                base: Seq(1),
                ack: None,
                cookie: None,
            };
            (repr, req)
        };
        for &s in &sends {
            let (repr, req) = frame_of(s);
            send_frame(&mut replayer, replay_peer, &repr, &[&req]);
        }
        // Like a sender that retransmits: resend the group until the service acknowledges
        // all of it (a datagram the kernel dropped would otherwise leave a hole), so the
        // count at the end is exact whatever the load.
        let last = Seq(first + 7);
        let t_group = Instant::now();
        let mut resent_at = Instant::now();
        loop {
            let acked = replayer
                .recv(|_, bytes| {
                    Frame::new_checked(bytes)
                        .and_then(|f| FrameRepr::parse(&f))
                        .ok()
                        .and_then(|r| r.ack)
                })
                .unwrap();
            match acked {
                Some(Some(a)) if !a.cum.is_before(last) => break,
                Some(_) => continue,
                None => {}
            }
            assert!(
                t_group.elapsed() < Duration::from_secs(20),
                "the service did not acknowledge frames {first}..={} within 20 s",
                first + 7
            );
            if resent_at.elapsed() > Duration::from_millis(50) {
                for s in first..first + 8 {
                    let (repr, req) = frame_of(s);
                    send_frame(&mut replayer, replay_peer, &repr, &[&req]);
                    report.replays += 1;
                }
                resent_at = Instant::now();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        replay_seq += 8;
        report.adds += 8;
        report.replays += sends.len() as u64 - 8;
        std::thread::sleep(Duration::from_millis(1));
    }
    report
}

/// What [`fuzz_control`] sent and what came back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlFuzz {
    /// Messages sent (each one packet of at least one byte; the service answers each).
    pub sent: u64,
    /// ERROR replies.
    pub refused: u64,
    /// Other replies (ACK, DATA, STATS).
    pub answered: u64,
    /// Descriptors that came with the replies (closed at once).
    pub descriptors: u64,
    /// Connections opened.
    pub connections: u64,
}

/// A control request with fields drawn from `rng` (small ranks, ids and keys, so that
/// Joins meet each other and later requests find something to act on).
fn random_request(rng: &mut Rng) -> gsas_control::proto::ControlRequest {
    use gsas_control::proto::{ControlRequest as R, JoinInfo};
    let small = |rng: &mut Rng, n: u64| rng.next_u64() % n;
    let pe = small(rng, 4) as u16;
    let segment = small(rng, 5) as u8;
    match small(rng, 12) {
        0 | 1 => R::Join {
            rank: pe,
            job_id: small(rng, 6),
            job_key: small(rng, 6),
            info: JoinInfo {
                npes: small(rng, 6) as u32,
                node: small(rng, 2) as u16,
                flags: small(rng, 4) as u16,
            },
        },
        2 => R::Leave {
            rank: pe,
            job_id: small(rng, 6),
        },
        3 => R::CreateSegment {
            pe,
            segment,
            size: match small(rng, 4) {
                0 => 0,
                1 => u64::MAX >> small(rng, 64),
                _ => small(rng, 1 << 20),
            },
        },
        4 => R::OpenSegment { pe, segment },
        5 => R::FreeSegment { pe, segment },
        6 => R::RegisterSegment {
            pe,
            segment,
            size: small(rng, 1 << 16),
        },
        7 => R::Ping,
        8 => R::Declare {
            id: small(rng, 6),
            uid: small(rng, 3) as u32 + 65533,
            pes: small(rng, 4) as u32,
            job_pes: small(rng, 8) as u32,
            memory: small(rng, 1 << 24),
        },
        9 => R::Undeclare { id: small(rng, 6) },
        10 => R::OpenSegments { from: pe },
        _ => R::Stats,
    }
}

/// Sends `messages` control messages to the service at `path`: well-formed requests of
/// every kind with random fields, the same mutated (bytes flipped, cut short, extended),
/// and random bytes; 1 to 32 per connection, then a new connection (the old one closed,
/// joined or not). Reads every reply; panics when one does not come within 10 s (the
/// service must answer every message). Reproducible from `seed`.
pub fn fuzz_control(path: &std::path::Path, messages: u64, seed: u64) -> ControlFuzz {
    use gsas_control::proto::{ControlReply, MAX_MESSAGE};
    let t = Duration::from_secs(10);
    let mut rng = Rng(seed | 1);
    let mut out = ControlFuzz::default();
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut reply = vec![0u8; MAX_MESSAGE];
    while out.sent < messages {
        let fd = gsas_sys::socket::connect(path, t).expect("connecting");
        out.connections += 1;
        let burst = 1 + rng.next_u64() % 32;
        for _ in 0..burst {
            let len = match rng.next_u64() % 10 {
                // Random bytes, sometimes behind a valid request's first bytes.
                0..=2 => {
                    let n = 1 + (rng.next_u64() % 128) as usize;
                    let keep = if rng.next_u64() % 2 == 0 {
                        random_request(&mut rng).emit(0, &mut buf).min(n)
                    } else {
                        0
                    };
                    for b in &mut buf[keep..n] {
                        *b = rng.next_u64() as u8;
                    }
                    n
                }
                k => {
                    let token = rng.next_u64() as u32;
                    let mut n = random_request(&mut rng).emit(token, &mut buf);
                    match k {
                        3 | 4 => {
                            for _ in 0..1 + rng.next_u64() % 4 {
                                let at = (rng.next_u64() as usize) % n;
                                buf[at] ^= 1 << (rng.next_u64() % 8);
                            }
                        }
                        5 => n = 1 + (rng.next_u64() as usize) % n,
                        6 => {
                            let more = (rng.next_u64() % 64) as usize;
                            for b in &mut buf[n..n + more] {
                                *b = rng.next_u64() as u8;
                            }
                            n += more;
                        }
                        _ => {}
                    }
                    n
                }
            };
            gsas_transport::shm::send_fds(&fd, &buf[..len], &[], t).expect("sending a message");
            out.sent += 1;
            let (n, fds) = gsas_transport::shm::recv_fds(&fd, &mut reply, t)
                .unwrap_or_else(|e| panic!("no reply to message {} ({e})", out.sent));
            out.descriptors += fds.len() as u64;
            match ControlReply::parse(&reply[..n]) {
                Ok((_, ControlReply::Error { .. })) => out.refused += 1,
                Ok(_) => out.answered += 1,
                Err(e) => panic!("a reply that does not parse ({e}): {:?}", &reply[..n]),
            }
            if out.sent == messages {
                break;
            }
        }
    }
    out
}

/// A CONTROL Ping request packet (token 1), what the floods below send.
fn ping_request() -> Vec<u8> {
    let ping = RequestRepr {
        sender: SenderId::new(7).unwrap(),
        token: 1,
        body: Request::Control {
            code: gsas_core::wire::ControlCode::Ping,
            arg0: 0,
            arg1: 0,
        },
    };
    let mut req = vec![0u8; ping.buffer_len()];
    ping.emit(&mut Packet::new_unchecked(&mut req[..]));
    req
}

/// Sends, from a socket bound to `from` (port 0), `rate` data frames per second to `to`,
/// each with a new pseudo-random job key and sender epoch and carrying a CONTROL Ping,
/// never acknowledging anything, until `stop` is set. Returns how many it sent. Without
/// cookies each such sender held a slot of the service's host share for a second.
pub fn ping_flood(
    to: SocketAddr,
    from: std::net::IpAddr,
    rate: u32,
    stop: &std::sync::atomic::AtomicBool,
    seed: u64,
) -> u64 {
    let mut udp = UdpTransport::bind(SocketAddr::new(from, 0), UdpConfig::default()).unwrap();
    let mut rng = Rng(seed | 1);
    let req = ping_request();
    let gap = Duration::from_secs(1) / rate.max(1);
    let t0 = Instant::now();
    let mut sent = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let repr = FrameRepr {
            epoch: rng.next_u64() | 1,
            dest_epoch: 0,
            seq: Some(Seq(1)),
            base: Seq(1),
            ack: None,
            cookie: None,
        };
        let key = rng.next_u64() | 1;
        send_frame(&mut udp, UdpPeer { addr: to, key }, &repr, &[&req]);
        sent += 1;
        // Drain what the service answers (challenges, replies): never acknowledged.
        while udp.recv(|_, _| ()).ok().flatten().is_some() {}
        let next = t0 + gap * sent as u32;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    sent
}

/// `peers` peers of job `key` (one socket each, served round-robin by the calling thread)
/// that read `len` bytes at `addr` of the service at `to` (BULK_READ) as fast as the
/// thread can send, and never acknowledge a reply (their frames move their base along
/// with their sequence number, so the service keeps taking them), pausing `pause` after
/// each round over the peers (zero: none). Runs until `stop` is set; returns the frames
/// sent.
#[allow(clippy::too_many_arguments)]
pub fn greedy_readers(
    to: SocketAddr,
    key: u64,
    peers: usize,
    addr: GlobalAddr,
    len: u32,
    stop: &std::sync::atomic::AtomicBool,
    epoch: u64,
    pause: Duration,
) -> u64 {
    let mut socks: Vec<UdpTransport> = (0..peers).map(|_| socket()).collect();
    let peer = UdpPeer { addr: to, key };
    let mut seq = 1u32;
    let mut sent = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let read = RequestRepr {
            sender: SenderId::new(9).unwrap(),
            token: seq,
            body: Request::BulkRead {
                frag: gsas_core::wire::Fragment {
                    base: addr,
                    total: len,
                    offset: 0,
                },
                len,
            },
        };
        let mut req = vec![0u8; read.buffer_len()];
        read.emit(&mut Packet::new_unchecked(&mut req[..]));
        for (i, udp) in socks.iter_mut().enumerate() {
            let repr = FrameRepr {
                epoch: epoch + i as u64,
                dest_epoch: 0,
                seq: Some(Seq(seq)),
                base: Seq(seq),
                ack: None,
                cookie: None,
            };
            send_frame(udp, peer, &repr, &[&req]);
            sent += 1;
            // What comes back (replies, acks) is read and thrown away, never acknowledged.
            while udp.recv(|_, _| ()).ok().flatten().is_some() {}
        }
        seq = seq.wrapping_add(1);
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    sent
}

/// A sender on this host that answers the service's challenges (its address is real) but
/// holds no secret: `keys` made-up job keys from one socket, each sending a CONTROL Ping
/// to `to` every `period` (a new frame each time, its base moved along), echoing the
/// cookie of a challenge, and never acknowledging a reply, until `stop` is set: it is
/// never quiet and always has replies in flight, so it keeps any host slot it gets unless
/// it must give way at once. Returns the challenges it answered. Before host peers had to
/// prove themselves, such a sender kept the 8 host slots of its address, and a launcher of
/// the same host was refused ("share of the peer table for host actions is full").
pub fn cookie_answering_pingers(
    to: SocketAddr,
    keys: u64,
    period: Duration,
    stop: &std::sync::atomic::AtomicBool,
    seed: u64,
) -> u64 {
    use gsas_core::reliable::frame::RefusalRepr;
    use gsas_core::reliable::{Refusal, RefusalReason};
    let mut udp = socket();
    let req = ping_request();
    let base_epoch = gsas_service::reliable_config(Duration::from_secs(10)).epoch + (seed << 8);
    // Per key: its epoch, next sequence number and the cookie to echo.
    let mut state: Vec<(UdpPeer, u64, u32, Option<u64>)> = (0..keys)
        .map(|k| {
            let peer = UdpPeer {
                addr: to,
                key: (seed << 32) | (k + 1),
            };
            (peer, base_epoch + k, 1u32, None)
        })
        .collect();
    let mut answered = 0u64;
    let mut next = Instant::now();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if Instant::now() >= next {
            for (peer, epoch, seq, cookie) in &mut state {
                let repr = FrameRepr {
                    epoch: *epoch,
                    dest_epoch: 0,
                    seq: Some(Seq(*seq)),
                    base: Seq(*seq),
                    ack: None,
                    cookie: *cookie,
                };
                send_frame(&mut udp, *peer, &repr, &[&req]);
                *seq = seq.wrapping_add(1);
            }
            next += period;
        }
        // Challenges are answered with their cookie on the next frame; replies are read
        // and never acknowledged.
        let mut got: Vec<(u64, u64)> = Vec::new();
        while udp
            .recv(|from, data| {
                let Ok(frame) = Frame::new_checked(data) else {
                    return;
                };
                if let Ok(r) = RefusalRepr::parse(&frame) {
                    if r.reason == RefusalReason::Challenge {
                        let c = Refusal {
                            reason: r.reason,
                            in_use: r.in_use,
                            limit: r.limit,
                        }
                        .cookie();
                        got.push((from.key, c));
                    }
                }
            })
            .ok()
            .flatten()
            .is_some()
        {}
        for (key, c) in got {
            if let Some(st) = state.iter_mut().find(|s| s.0.key == key) {
                st.3 = Some(c);
                answered += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    answered
}
