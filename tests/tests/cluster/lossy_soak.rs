//! A lossy soak: an atomic service and a remote client exchanging mixed puts, gets and
//! atomics through a network that drops 10% of the datagrams, duplicates 5% and reorders
//! and delays 5% (each way), every result checked exactly.
//!
//! * `a_lossy_link_between_two_network_namespaces`: the client in one namespace, the
//!   service in another, joined by a veth pair; nftables in each namespace drops 10% and
//!   duplicates 5% of the datagrams it sends (`numgen random`, `dup to`), and a small relay
//!   of ours in front of the service holds back 5% of the datagrams each way for up to
//!   2 ms, so that later ones overtake them. Needs root, `ip` and `nft`; otherwise it
//!   prints `SKIPPED: <test>: <reason>` on standard error and returns
//!   (`GSAS_REQUIRE_NETNS=1` turns the skip into a failure).
//! * `a_lossy_relay_on_loopback`: the same traffic on loopback with the relay doing the
//!   dropping and duplicating as well; needs nothing.
//!
//! Each runs 100,000 operations (a third each: inline puts of 8..=56 bytes to their own
//! slot, gets of slots whose put completed, fetch-adds on one counter), 32 in flight. The
//! checks: every get returns its slot's bytes, the fetch-adds returned each value
//! `0..n` exactly once, and the counter ends at `n`. Soak mode:
//! `GSAS_SOAK_OPS=1000000 cargo test -p gsas-tests --release --test cluster lossy_soak -- --nocapture`
//! runs a million operations per test and prints the figures. Under qemu-user (the
//! aarch64 stage) each test runs 10,000 and says so (`GSAS_QEMU_FULL=1`: the full count).

use std::collections::HashMap;
use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gsas_control::ControlClient;
use gsas_control::proto::{JoinInfo, SEG_HEAP};
use gsas_core::client::{Client, ClientError, Completion};
use gsas_core::reliable::{Config, HashIndex, PeerSlot, Reliable, buffer_len};
use gsas_core::transport::{Transport, TransportError};
use gsas_core::wire::{AtomicDesc, AtomicOp, AtomicType, GlobalAddr, SenderId};
use gsas_service::{Service, ServiceConfig, ServiceThread};
use gsas_tests::attack::Rng;
use gsas_tests::netns::run;
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};

const T: Duration = Duration::from_secs(10);
/// Operations in flight.
const WINDOW: usize = 32;
/// Bytes of heap per put slot.
const SLOT: u64 = 64;
/// Where the fetch-add counter lives (after the put slots).
const COUNTER_SLOTS: u64 = 1;

/// `GSAS_SOAK_OPS`, else 100,000 (10,000 under qemu, see `gsas_tests::attack::full_length`).
fn ops(test: &str) -> u64 {
    if let Some(n) = std::env::var("GSAS_SOAK_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if gsas_tests::attack::full_length(test, "10,000 operations instead of 100,000") {
        100_000
    } else {
        10_000
    }
}

/// What the network does to each datagram, in percent.
#[derive(Clone, Copy, Debug)]
struct Faults {
    drop: u64,
    dup: u64,
    reorder: u64,
    max_delay: Duration,
}

/// What [`relay`] did.
#[derive(Debug, Default)]
pub(super) struct RelayStats {
    pub(super) forwarded: u64,
    pub(super) dropped: u64,
    pub(super) duplicated: u64,
    pub(super) held: u64,
}

/// [`relay`] on loopback in a thread, with 10% drop, 5% duplication and 5% reordering
/// (held for up to 2 ms) each way. Also used by `put_signal.rs`.
pub(super) struct LossyRelay {
    /// Where clients send (the relay forwards to the service).
    pub(super) to: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<RelayStats>,
}

impl LossyRelay {
    /// Starts a relay in front of `service`, with the given random seed.
    pub(super) fn start(service: SocketAddr, seed: u64) -> LossyRelay {
        let front = UdpSocket::bind("127.0.0.1:0").unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let faults = Faults {
            drop: 10,
            dup: 5,
            reorder: 5,
            max_delay: Duration::from_millis(2),
        };
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || relay(front, back, service, faults, seed, stop))
        };
        LossyRelay { to, stop, thread }
    }

    /// Stops the relay; what it did.
    pub(super) fn finish(self) -> RelayStats {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Forwards datagrams between a client (whoever sends to `front`) and `service` (through
/// `back`), applying `faults` each way, until `stop`.
fn relay(
    front: UdpSocket,
    back: UdpSocket,
    service: SocketAddr,
    faults: Faults,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> RelayStats {
    front.set_nonblocking(true).unwrap();
    back.set_nonblocking(true).unwrap();
    let mut rng = Rng(seed);
    let mut stats = RelayStats::default();
    let mut client: Option<SocketAddr> = None;
    // (due, to the service?, bytes)
    let mut held: Vec<(Instant, bool, Vec<u8>)> = Vec::new();
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let mut pfd = [
            libc::pollfd {
                fd: front.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: back.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds for the duration of the call; bounded timeout.
        unsafe { libc::poll(pfd.as_mut_ptr(), 2, 1) };
        let now = Instant::now();
        let mut got = Vec::new();
        while let Ok((n, from)) = front.recv_from(&mut buf) {
            client = Some(from);
            got.push((true, buf[..n].to_vec()));
        }
        while let Ok((n, _)) = back.recv_from(&mut buf) {
            got.push((false, buf[..n].to_vec()));
        }
        for (to_service, bytes) in got {
            if rng.next_u64() % 100 < faults.drop {
                stats.dropped += 1;
                continue;
            }
            let copies = if rng.next_u64() % 100 < faults.dup {
                stats.duplicated += 1;
                2
            } else {
                1
            };
            for _ in 0..copies {
                if rng.next_u64() % 100 < faults.reorder {
                    stats.held += 1;
                    let delay = faults.max_delay.as_micros() as u64;
                    let due = now + Duration::from_micros(rng.next_u64() % delay.max(1));
                    held.push((due, to_service, bytes.clone()));
                } else {
                    send(
                        &front, &back, service, client, to_service, &bytes, &mut stats,
                    );
                }
            }
        }
        let mut i = 0;
        while i < held.len() {
            if held[i].0 <= now {
                let (_, to_service, bytes) = held.swap_remove(i);
                send(
                    &front, &back, service, client, to_service, &bytes, &mut stats,
                );
            } else {
                i += 1;
            }
        }
    }
    stats
}

fn send(
    front: &UdpSocket,
    back: &UdpSocket,
    service: SocketAddr,
    client: Option<SocketAddr>,
    to_service: bool,
    bytes: &[u8],
    stats: &mut RelayStats,
) {
    let sent = if to_service {
        back.send_to(bytes, service)
    } else if let Some(c) = client {
        front.send_to(bytes, c)
    } else {
        return;
    };
    if sent.is_ok() {
        stats.forwarded += 1;
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Put(u64),
    Get(u64),
    Fadd,
}

#[derive(Debug, Default)]
struct SoakReport {
    puts: u64,
    gets: u64,
    fadds: u64,
    retransmissions: u64,
    duplicates: u64,
    elapsed: Duration,
}

fn pattern(slot: u64) -> Vec<u8> {
    let len = 8 + (slot % 49) as usize;
    (0..len)
        .map(|j| (slot.wrapping_mul(31).wrapping_add(j as u64 * 7) % 251) as u8)
        .collect()
}

/// The fetch-adds saw each value of 0..fadds once.
fn check_fetched(mut fetched: Vec<u64>, fadds: u64) -> Result<(), String> {
    fetched.sort_unstable();
    if fetched.iter().copied().ne(0..fadds) {
        let wrong = fetched
            .iter()
            .enumerate()
            .find(|&(i, &v)| v != i as u64)
            .map(|(i, v)| (i, *v));
        return Err(format!(
            "fetch-add results are not 0..{}: first mismatch {wrong:?}",
            fadds
        ));
    }
    Ok(())
}

/// Reads the counter (a request with tag `tag`) and waits for its value (bounded).
fn read_counter(
    rel: &mut Reliable<'_, UdpTransport, 32, HashIndex<UdpPeer, 8>>,
    client: &mut Client<UdpPeer, 64, 1>,
    svc: UdpPeer,
    counter: GlobalAddr,
    tag: u64,
    t0: Instant,
) -> Result<u64, String> {
    client
        .read(rel, svc, 0, tag, counter, 8)
        .map_err(|e| e.to_string())?;
    rel.flush().map_err(|e| e.to_string())?;
    let until = Instant::now() + T * 3;
    let mut end = None;
    while end.is_none() {
        if Instant::now() > until {
            return Err("no answer to the final read".into());
        }
        rel.poll(t0.elapsed().as_nanos() as u64)
            .map_err(|e| e.to_string())?;
        let mut data = Vec::new();
        rel.recv(|_, bytes| {
            client.handle_reply(bytes, |c| match c {
                Completion::Data { data: d, .. } => data.extend_from_slice(d),
                Completion::Done { result, .. } => end = Some((result, data.clone())),
            });
        })
        .map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_micros(100));
    }
    let (result, data) = end.expect("loop ends with a value");
    result.map_err(|e| format!("final read: {e:?}"))?;
    let total = u64::from_le_bytes(data.try_into().map_err(|d| format!("final read {d:?}"))?);
    Ok(total)
}

/// Runs `n` mixed operations against the service at `to` (job `key`, PE 0's heap) from a
/// socket bound to `bind`, `WINDOW` in flight, checking every result; the heap holds
/// `n / 3 + 1` put slots and then the counter.
fn soak(bind: SocketAddr, to: SocketAddr, key: u64, n: u64) -> Result<SoakReport, String> {
    let udp = UdpTransport::bind(bind, UdpConfig::default()).map_err(|e| e.to_string())?;
    let mtu = udp.capabilities().mtu;
    let mut peers: Vec<PeerSlot<UdpPeer, 32>> = (0..4).map(|_| PeerSlot::new()).collect();
    let mut buf = vec![0u8; buffer_len(mtu, mtu, 64)];
    let mut config = Config::new(gsas_service::reliable_config(T).epoch);
    config.deadline_ns = 30_000_000_000;
    let mut rel: Reliable<'_, _, 32, HashIndex<UdpPeer, 8>> =
        Reliable::with_index(udp, config, &mut peers, &mut buf, HashIndex::new())
            .map_err(|e| e.to_string())?;
    let mut client: Client<UdpPeer, 64, 1> = Client::new(SenderId::new(9).unwrap());
    let svc = UdpPeer { addr: to, key };
    let slots = n / 3 + 1;
    let counter = GlobalAddr::new(0, SEG_HEAP, slots * SLOT).unwrap();
    let slot_addr = |s: u64| GlobalAddr::new(0, SEG_HEAP, s * SLOT).unwrap();
    let fadd = AtomicDesc::new(AtomicOp::FetchAdd, AtomicType::U64).unwrap();
    let t0 = Instant::now();
    let mut report = SoakReport::default();
    let mut in_flight: HashMap<u64, Op> = HashMap::new();
    let mut reads: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut readable: Vec<u64> = Vec::new();
    let mut fetched: Vec<u64> = Vec::new();
    let (mut next_slot, mut issued, mut tag) = (0u64, 0u64, 1u64);
    let limit = Duration::from_secs(60 + n / 500);
    while issued < n || !in_flight.is_empty() {
        if t0.elapsed() > limit {
            return Err(format!(
                "{issued} of {n} issued, {} in flight after {limit:?}",
                in_flight.len()
            ));
        }
        let now = t0.elapsed().as_nanos() as u64;
        rel.set_now(now);
        while issued < n && in_flight.len() < WINDOW {
            let op = match issued % 3 {
                0 => Op::Put(next_slot),
                1 => match readable.pop() {
                    Some(s) => Op::Get(s),
                    None => Op::Fadd,
                },
                _ => Op::Fadd,
            };
            let r = match op {
                Op::Put(s) => client.write(&mut rel, svc, 0, tag, slot_addr(s), &pattern(s)),
                Op::Get(s) => client.read(&mut rel, svc, 0, tag, slot_addr(s), pattern(s).len()),
                Op::Fadd => client.atomic(&mut rel, svc, 0, tag, counter, fadd, 1, 0),
            };
            match r {
                Ok(_) => {}
                Err(ClientError::Transport(TransportError::WouldBlock)) => {
                    if let Op::Get(s) = op {
                        readable.push(s);
                    }
                    break;
                }
                Err(e) => return Err(format!("issuing {op:?}: {e}")),
            }
            if let Op::Put(_) = op {
                next_slot += 1;
            }
            in_flight.insert(tag, op);
            tag += 1;
            issued += 1;
        }
        rel.flush().map_err(|e| e.to_string())?;
        rel.poll(now).map_err(|e| e.to_string())?;
        let mut failure = None;
        loop {
            let mut done = Vec::new();
            let got = rel
                .recv(|_, bytes| {
                    client.handle_reply(bytes, |c| match c {
                        Completion::Data { tag, data, .. } => {
                            reads.entry(tag).or_default().extend_from_slice(data)
                        }
                        Completion::Done { tag, result, .. } => done.push((tag, result)),
                    });
                })
                .map_err(|e| e.to_string())?;
            for (t, result) in done {
                let Some(op) = in_flight.remove(&t) else {
                    failure = Some(format!("completion of unknown tag {t}"));
                    continue;
                };
                let value = match result {
                    Ok(v) => v,
                    Err(e) => {
                        failure = Some(format!("{op:?} failed: {e:?}"));
                        continue;
                    }
                };
                match op {
                    Op::Put(s) => {
                        report.puts += 1;
                        readable.push(s);
                    }
                    Op::Get(s) => {
                        report.gets += 1;
                        let data = reads.remove(&t).unwrap_or_default();
                        if data != pattern(s) {
                            failure = Some(format!("get of slot {s} returned {data:?}"));
                        }
                    }
                    Op::Fadd => {
                        report.fadds += 1;
                        fetched.push(value.unwrap_or(u64::MAX));
                    }
                }
            }
            if got.is_none() {
                break;
            }
        }
        if let Some(f) = failure {
            return Err(f);
        }
        if let Some(ev) = rel.next_event() {
            return Err(format!("the service failed: {ev:?}"));
        }
    }
    // Each fetch-add saw a distinct value, 0..fadds, and the counter ends at fadds.
    check_fetched(fetched, report.fadds)?;
    let total = read_counter(&mut rel, &mut client, svc, counter, tag, t0)?;
    if total != report.fadds {
        return Err(format!("the counter is {total}, not {}", report.fadds));
    }
    let st = rel.stats();
    report.retransmissions = st.retransmissions;
    report.duplicates = st.duplicates;
    report.elapsed = t0.elapsed();
    Ok(report)
}

/// A service with one job (`key`) whose PE 0 has a heap for `n` operations.
fn service(bind: SocketAddr, name: &str, key: u64, n: u64) -> (ServiceThread, ControlClient) {
    let heap = (n / 3 + 1 + COUNTER_SLOTS) * SLOT;
    let (s, pe, _) = service_with_heap(bind, name, key, heap.next_multiple_of(4096));
    (s, pe)
}

/// A service with one job (`key`) of two PEs, PE 0 joined through the returned control
/// connection with a heap of `heap` bytes (its descriptor returned, to map it). Also used
/// by `put_signal.rs`.
pub(super) fn service_with_heap(
    bind: SocketAddr,
    name: &str,
    key: u64,
    heap: u64,
) -> (ServiceThread, ControlClient, std::os::fd::OwnedFd) {
    let path = gsas_sys::socket::runtime_dir(None)
        .unwrap()
        .join(format!("soak-{name}-{}.sock", std::process::id()));
    let s = Service::bind(ServiceConfig::new(0, bind, path))
        .unwrap()
        .spawn()
        .unwrap();
    let mut pe = ControlClient::connect(s.socket_path(), T).unwrap();
    let info = JoinInfo {
        npes: 2,
        node: 0,
        flags: 0,
    };
    pe.join(0, 1, key, info).unwrap();
    let (_, fd) = pe.create_segment(0, SEG_HEAP, heap).unwrap();
    (s, pe, fd)
}

/// Checks that the service saw the faults (duplicates dropped, retransmissions) and
/// prints the figures of a run.
fn check_and_print(test: &str, r: &SoakReport, relay: &RelayStats, pe: &mut ControlClient) {
    let st = pe.stats().unwrap();
    let (dups, retx) = (
        st.get("reliable.duplicates").unwrap(),
        st.get("reliable.retransmissions").unwrap(),
    );
    assert!(dups > 0 && retx > 0, "{st}");
    let _ = writeln!(
        std::io::stderr(),
        "{test}: {} puts, {} gets, {} fetch-adds exact in {:.1} s; client: {} retransmissions, {} duplicates dropped; relay: {relay:?}; service: {dups} duplicates dropped, {retx} retransmissions",
        r.puts,
        r.gets,
        r.fadds,
        r.elapsed.as_secs_f64(),
        r.retransmissions,
        r.duplicates
    );
}

#[test]
fn a_lossy_relay_on_loopback() {
    let n = ops("a_lossy_relay_on_loopback");
    let key = 0x50a6_0001;
    let (s, mut pe) = service("127.0.0.1:0".parse().unwrap(), "lo", key, n);
    let relay = LossyRelay::start(s.udp_addr(), 0x1234_5678);
    let result = soak("127.0.0.1:0".parse().unwrap(), relay.to, key, n);
    let relay = relay.finish();
    let report = result.unwrap_or_else(|e| panic!("{e}; relay {relay:?}"));
    assert_eq!(report.puts + report.gets + report.fadds, n);
    assert!(
        relay.dropped > 0 && relay.duplicated > 0 && relay.held > 0,
        "{relay:?}"
    );
    check_and_print("a_lossy_relay_on_loopback", &report, &relay, &mut pe);
    pe.leave(0, 1).unwrap();
    s.stop().unwrap();
}

// ---------------------------------------------------------------------------------------
// Network namespaces

const PREFIX: &str = "gsas-s";

/// Two namespaces joined by a veth pair (`10.203.0.1` client, `10.203.0.2` service);
/// deleted when dropped.
struct Pair {
    client: String,
    service: String,
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.client, &self.service] {
            if let Err(e) = run("ip", &["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

fn pair() -> Result<Pair, String> {
    // Namespaces of earlier test processes that died.
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            let pid = name.strip_prefix(PREFIX).and_then(|r| r.split('-').next());
            if pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
                let _ = run("ip", &["netns", "del", name]);
            }
        }
    }
    run("nft", &["--version"]).map_err(|e| format!("nftables: {e}"))?;
    let pid = std::process::id();
    let p = Pair {
        client: format!("{PREFIX}{pid}-a"),
        service: format!("{PREFIX}{pid}-b"),
    };
    run("ip", &["netns", "add", &p.client])?;
    run("ip", &["netns", "add", &p.service])?;
    let (va, vb) = (format!("sa{pid}"), format!("sb{pid}"));
    run(
        "ip",
        &[
            "link", "add", &va, "netns", &p.client, "type", "veth", "peer", "name", &vb, "netns",
            &p.service,
        ],
    )?;
    for (ns, dev, addr) in [
        (&p.client, &va, "10.203.0.1/24"),
        (&p.service, &vb, "10.203.0.2/24"),
    ] {
        run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        run("ip", &["-n", ns, "addr", "add", addr, "dev", dev])?;
        run("ip", &["-n", ns, "link", "set", dev, "up"])?;
    }
    Ok(p)
}

/// In namespace `ns`: drop 10% and duplicate 5% of the UDP datagrams it sends to `peer`
/// through `dev` with `port` as destination (`dport`) or source (`sport`) port.
fn faults(ns: &str, dev: &str, peer: &str, port_match: &str, port: u16) -> Result<(), String> {
    let nft = |rule: &str| run("ip", &["netns", "exec", ns, "nft", rule]);
    nft("add table ip soak")?;
    nft("add chain ip soak out { type filter hook output priority 0; }")?;
    let m = format!("ip daddr {peer} udp {port_match} {port}");
    nft(&format!(
        "add rule ip soak out {m} numgen random mod 100 < 10 drop"
    ))?;
    nft(&format!(
        "add rule ip soak out {m} numgen random mod 100 < 5 dup to {peer} device {dev}"
    ))
}

/// Moves the calling thread into network namespace `ns`.
fn enter(ns: &str) -> Result<(), String> {
    let f =
        std::fs::File::open(format!("/var/run/netns/{ns}")).map_err(|e| format!("{ns}: {e}"))?;
    // SAFETY: setns on a descriptor of a network namespace, for the calling thread only.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {ns}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[test]
fn a_lossy_link_between_two_network_namespaces() {
    const TEST: &str = "a_lossy_link_between_two_network_namespaces";
    let ns = if !gsas_tests::skip::is_root() {
        Err("not running as root (network namespaces and nftables need CAP_NET_ADMIN)".into())
    } else {
        pair()
    };
    let ns = match ns {
        Ok(ns) => ns,
        Err(reason) => {
            gsas_tests::skip::skip(TEST, gsas_tests::skip::REQUIRE_NETNS, &reason);
            return;
        }
    };
    let n = ops(TEST);
    let key = 0x50a6_0002;
    let pid = std::process::id();
    // The service and the relay in the service's namespace.
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let relay_stop = Arc::clone(&stop);
    let service_ns = ns.service.clone();
    let relay = std::thread::spawn(move || {
        enter(&service_ns).unwrap();
        let (s, pe) = service("127.0.0.1:0".parse().unwrap(), "netns", key, n);
        let front = UdpSocket::bind("10.203.0.2:0").unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        let svc = s.udp_addr();
        tx.send((s, pe, front.local_addr().unwrap())).unwrap();
        let faults = Faults {
            drop: 0,
            dup: 0,
            reorder: 5,
            max_delay: Duration::from_millis(2),
        };
        relay(front, back, svc, faults, 0x8765_4321, relay_stop)
    });
    let (s, mut pe, front) = rx.recv().unwrap();
    faults(
        &ns.client,
        &format!("sa{pid}"),
        "10.203.0.2",
        "dport",
        front.port(),
    )
    .unwrap();
    faults(
        &ns.service,
        &format!("sb{pid}"),
        "10.203.0.1",
        "sport",
        front.port(),
    )
    .unwrap();
    let client_ns = ns.client.clone();
    let result = std::thread::spawn(move || {
        enter(&client_ns)?;
        soak("10.203.0.1:0".parse().unwrap(), front, key, n)
    })
    .join()
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    let relay = relay.join().unwrap();
    let report = result.unwrap_or_else(|e| panic!("{e}; relay {relay:?}"));
    assert_eq!(report.puts + report.gets + report.fadds, n);
    // nftables dropped (retransmissions on both sides) and duplicated (duplicates dropped
    // by the service's layer); the relay held datagrams back.
    assert!(report.retransmissions > 0, "{report:?}");
    assert!(relay.held > 0, "{relay:?}");
    check_and_print(TEST, &report, &relay, &mut pe);
    pe.leave(0, 1).unwrap();
    s.stop().unwrap();
    drop(ns);
}
