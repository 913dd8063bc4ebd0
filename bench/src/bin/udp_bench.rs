//! UDP transport figures on one machine: raw `UdpTransport` against
//! `Reliable<UdpTransport>`, over loopback.
//!
//! ```text
//! udp_bench [--quick]        the tables below
//! udp_bench single [iters]   both ends in one thread: the CPU cost of an 8-byte round
//!                            trip, raw and reliable (for perf / callgrind)
//! ```
//!
//! Two threads, pinned to CPUs 0 and 1 with `sched_setaffinity` (when the machine has
//! two), each own one endpoint on 127.0.0.1 and busy-poll it (no blocking, no yielding):
//!
//! * **(a) ping-pong, raw UDP**: messages of 8 B to 64 KiB bounce between the threads; a
//!   message larger than one datagram travels as several. Reported: the round-trip time,
//!   median over batches of round trips (OSU style: time of a batch divided by its length).
//! * **(b) ping-pong, `Reliable<UdpTransport>`**: the same through the reliability layer
//!   (each side flushes after its message; the reply carries the ack).
//! * **(c) stream**: one thread sends datagrams of 8 KiB or 60 KiB as fast as it can, the
//!   other receives; goodput in GB/s at the receiver, payload bytes only. Both sides poll
//!   in a progress loop and yield the CPU when a round did nothing (as the runtime's
//!   waiter does), so that the kernel thread delivering loopback datagrams is not starved
//!   on a two-CPU machine. Raw UDP on loopback drops what the receiver cannot take (loss
//!   reported); the reliable stream sends packets that fill one frame per datagram of the
//!   same size, so both move the same datagrams and the difference is the layer's cost.
//!   The reliable stream runs twice: with the default configuration, and with a minimum
//!   retransmission timeout of 20 ms, which shows how much of the cost is spurious
//!   retransmission when acks are delayed by scheduling (the counts are printed).
//!
//! Not a test: nothing is asserted about the figures. `--quick` shortens every phase.
//!
//! Batching with `sendmmsg`/`recvmmsg` is not used by `UdpTransport`: a `perf` profile of
//! `udp_bench single` shows about 91% of the time in the kernel, of which the system-call
//! entry and exit are about 3%; the per-datagram work (socket buffer allocation, routing,
//! queueing, copies, softirq) dominates, and batching does not remove it.

use std::hint::spin_loop;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use gsas_core::reliable::{Config, HashIndex, PeerSlot, Reliable, buffer_len};
use gsas_core::transport::{Transport, TransportError};
use gsas_transport::poll::monotonic_ns;
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};

const KEY: u64 = 0x6265_6e63_6821;
/// Frames in flight per peer for the reliable runs.
const W: usize = 64;
/// Largest datagram (UDP payload, gsas header included) used anywhere here.
const MAX_DATAGRAM: usize = 61_440;

type Rel<'a> = Reliable<'a, UdpTransport, W, HashIndex<UdpPeer, 4>>;

/// CPUs this process may use, taken once before any thread is pinned (afterwards
/// `available_parallelism` would report the pinned thread's single CPU, and threads
/// spawned by it inherit that mask).
fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Pins the calling thread to `cpu` if the process has more than one CPU.
fn pin(cpu: usize) {
    if cpus() < 2 {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it; the syscall
    // reads `size_of::<cpu_set_t>()` bytes from it for the calling thread (pid 0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        eprintln!(
            "udp_bench: cannot pin to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn udp(mtu: usize) -> UdpTransport {
    UdpTransport::bind(
        "127.0.0.1:0".parse().expect("address"),
        UdpConfig {
            mtu,
            ..UdpConfig::default()
        },
    )
    .expect("bind UDP on 127.0.0.1")
}

fn peer(addr: SocketAddr) -> UdpPeer {
    UdpPeer { addr, key: KEY }
}

/// Owns the storage of a reliability layer.
struct RelStore {
    slots: Vec<PeerSlot<UdpPeer, W>>,
    buffers: Vec<u8>,
}

impl RelStore {
    fn new(mtu: usize) -> Self {
        RelStore {
            slots: (0..2).map(|_| PeerSlot::new()).collect(),
            buffers: vec![0u8; buffer_len(mtu, mtu, 2 * W)],
        }
    }

    /// The layer over `t`, its clock set (the layer takes time only from `poll`; frames
    /// sent before the first `poll` would be stamped with time 0).
    fn layer(&mut self, t: UdpTransport, epoch: u64) -> Rel<'_> {
        self.layer_with(t, epoch, Config::new(epoch).min_rto_ns)
    }

    /// [`RelStore::layer`] with a minimum retransmission timeout of `min_rto_ns`.
    fn layer_with(&mut self, t: UdpTransport, epoch: u64, min_rto_ns: u64) -> Rel<'_> {
        // A long deadline: on a shared machine a pinned thread can be descheduled for a
        // long time, and declaring the peer dead is not what is measured here.
        let defaults = Config::new(epoch);
        let config = Config {
            deadline_ns: 120_000_000_000,
            min_rto_ns,
            initial_rto_ns: defaults.initial_rto_ns.max(min_rto_ns),
            ..defaults
        };
        let mut r = Reliable::new(t, config, &mut self.slots, &mut self.buffers)
            .expect("reliability layer");
        r.poll(monotonic_ns()).expect("poll");
        r
    }
}

/// What the benchmark drives: either transport, busy-polling.
trait Endpoint {
    type T: Transport<Peer = UdpPeer>;
    fn t(&mut self) -> &mut Self::T;
    /// One round of timers (reliable: `poll(now)`; raw: nothing).
    fn tick(&mut self);
    /// The bound UDP address.
    fn addr(&self) -> SocketAddr;
}

struct Raw(UdpTransport);

impl Endpoint for Raw {
    type T = UdpTransport;
    fn t(&mut self) -> &mut UdpTransport {
        &mut self.0
    }
    fn tick(&mut self) {}
    fn addr(&self) -> SocketAddr {
        self.0.local_addr()
    }
}

struct Rl<'a>(Rel<'a>);

impl<'a> Endpoint for Rl<'a> {
    type T = Rel<'a>;
    fn t(&mut self) -> &mut Rel<'a> {
        &mut self.0
    }
    fn tick(&mut self) {
        self.0.poll(monotonic_ns()).expect("poll");
    }
    fn addr(&self) -> SocketAddr {
        self.0.inner().local_addr()
    }
}

/// Sends a message of `len` bytes to `to` as packets of at most `mtu`, then flushes.
fn send_message<E: Endpoint>(e: &mut E, to: UdpPeer, len: usize, mtu: usize) {
    let mut left = len;
    while left > 0 {
        let n = left.min(mtu);
        loop {
            match e.t().send(to, n, |b| b[0] = 1) {
                Ok(()) => break,
                Err(TransportError::WouldBlock) => {
                    e.tick();
                    e.t().flush().expect("flush");
                    let _ = e.t().recv(|_, _| ()).expect("recv");
                }
                Err(err) => panic!("send: {err}"),
            }
        }
        left -= n;
    }
    e.t().flush().expect("flush");
}

/// Busy-polls until `len` bytes arrived; returns the sender.
fn recv_message<E: Endpoint>(e: &mut E, len: usize, stop: &AtomicBool) -> Option<UdpPeer> {
    let mut got = 0;
    let mut from = None;
    while got < len {
        match e.t().recv(|p, d| (p, d.len())).expect("recv") {
            Some((p, n)) => {
                got += n;
                from = Some(p);
            }
            None => {
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
                e.tick();
                spin_loop();
            }
        }
    }
    from
}

/// Runs `warmup` untimed and then `iters` timed ping-pongs of `size` bytes between `ping`
/// (this thread, CPU 0) and `pong` (a helper thread, CPU 1); returns nanoseconds per round
/// trip.
fn batch<E: Endpoint + Send>(
    ping: &mut E,
    pong: &mut E,
    size: usize,
    warmup: usize,
    iters: usize,
) -> f64
where
    E::T: Send,
{
    let to_pong = peer(pong.addr());
    let mtu = ping.t().capabilities().mtu;
    let stop = AtomicBool::new(false);
    let ready = Barrier::new(2);
    thread::scope(|s| {
        s.spawn(|| {
            pin(1);
            ready.wait();
            while let Some(from) = recv_message(pong, size, &stop) {
                send_message(pong, from, size, mtu);
            }
        });
        pin(0);
        ready.wait();
        let never = AtomicBool::new(false);
        for _ in 0..warmup {
            send_message(ping, to_pong, size, mtu);
            recv_message(ping, size, &never);
        }
        let start = Instant::now();
        for _ in 0..iters {
            send_message(ping, to_pong, size, mtu);
            recv_message(ping, size, &never);
        }
        let ns = start.elapsed().as_nanos() as f64 / iters as f64;
        stop.store(true, Ordering::Relaxed);
        ns
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Streams packets of `packet` bytes from `tx` (this thread, CPU 0) to `rx` (a helper
/// thread, CPU 1) for `secs` seconds; returns (payload GB/s at the receiver, fraction of
/// the sent bytes that did not arrive).
fn stream<E: Endpoint + Send>(tx: &mut E, rx: &mut E, packet: usize, secs: f64) -> (f64, f64)
where
    E::T: Send,
{
    let to_rx = peer(rx.addr());
    let stop = AtomicBool::new(false);
    let ready = Barrier::new(2);
    let duration = Duration::from_secs_f64(secs);
    thread::scope(|s| {
        let receiver = s.spawn(|| {
            pin(1);
            ready.wait();
            let mut bytes = 0u64;
            let mut first = None;
            let mut last = Instant::now();
            let mut quiet_since = None::<Instant>;
            loop {
                // A progress loop as the runtime runs it: take in up to 64 packets, then
                // drive the timers (acks) and flush.
                let mut got_any = false;
                for _ in 0..64 {
                    match rx.t().recv(|_, d| d.len()).expect("recv") {
                        Some(n) => {
                            let now = Instant::now();
                            first.get_or_insert(now);
                            last = now;
                            bytes += n as u64;
                            got_any = true;
                        }
                        None => break,
                    }
                }
                rx.tick();
                rx.t().flush().expect("flush");
                if !got_any {
                    // As the runtime's waiter does when idle: let the kernel's softirq
                    // thread (which delivers loopback datagrams) run on this CPU.
                    thread::yield_now();
                }
                if got_any {
                    quiet_since = None;
                } else if stop.load(Ordering::Acquire) {
                    let q = *quiet_since.get_or_insert_with(Instant::now);
                    if q.elapsed() > Duration::from_millis(50) {
                        break;
                    }
                }
            }
            let span = first.map_or(0.0, |f| (last - f).as_secs_f64());
            (bytes, span)
        });
        pin(0);
        ready.wait();
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < duration {
            // Drive the timers and take in acks, then send as much as the window allows.
            tx.tick();
            let _ = tx.t().recv(|_, _| ()).expect("recv");
            let mut sent_any = false;
            for _ in 0..64 {
                match tx.t().send(to_rx, packet, |b| b[0] = 1) {
                    Ok(()) => {
                        n += 1;
                        sent_any = true;
                    }
                    Err(TransportError::WouldBlock) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
            tx.t().flush().expect("flush");
            if !sent_any {
                thread::yield_now();
            }
        }
        // Let a reliable sender finish its window (acks through recv, retransmits in tick).
        let drain = Instant::now();
        while drain.elapsed() < Duration::from_millis(200) {
            tx.tick();
            tx.t().flush().expect("flush");
            let _ = tx.t().recv(|_, _| ()).expect("recv");
        }
        stop.store(true, Ordering::Release);
        let (bytes, span) = receiver.join().expect("receiver");
        let sent_bytes = n as f64 * packet as f64;
        let gbps = if span > 0.0 {
            bytes as f64 / span / 1e9
        } else {
            0.0
        };
        (gbps, 1.0 - bytes as f64 / sent_bytes)
    })
}

/// One thread drives both ends of an 8-byte ping-pong, so no scheduling or cross-CPU
/// wake-up is measured: the CPU cost of a round trip (four system calls on the raw path,
/// plus the layer's work on the reliable one). Returns nanoseconds per round trip.
fn single_thread<E: Endpoint>(a: &mut E, b: &mut E, iters: usize) -> f64 {
    let to_b = peer(b.addr());
    let mtu = a.t().capabilities().mtu;
    let never = AtomicBool::new(false);
    let start = Instant::now();
    for _ in 0..iters {
        send_message(a, to_b, 8, mtu);
        let from = recv_message(b, 8, &never).expect("a message");
        send_message(b, from, 8, mtu);
        recv_message(a, 8, &never);
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

/// `udp_bench single [iters]`: [`single_thread`] for both transports, alternating batches.
fn single(iters: usize) {
    let (mut ra, mut rb) = (Raw(udp(MAX_DATAGRAM)), Raw(udp(MAX_DATAGRAM)));
    let (a, b) = (udp(MAX_DATAGRAM), udp(MAX_DATAGRAM));
    let mtu = a.capabilities().mtu;
    let (mut sa, mut sb) = (RelStore::new(mtu), RelStore::new(mtu));
    let (mut la, mut lb) = (Rl(sa.layer(a, 1)), Rl(sb.layer(b, 2)));
    pin(0);
    let (mut raw, mut rel) = (Vec::new(), Vec::new());
    for _ in 0..11 {
        raw.push(single_thread(&mut ra, &mut rb, iters));
        rel.push(single_thread(&mut la, &mut lb, iters));
    }
    let (raw, rel) = (median(raw), median(rel));
    println!(
        "single thread, 8-byte round trip: raw UDP {:.2} us, Reliable<UDP> {:.2} us (+{:.2} us, {:.0}%)",
        raw / 1e3,
        rel / 1e3,
        (rel - raw) / 1e3,
        (rel / raw - 1.0) * 100.0
    );
}

fn main() {
    cpus();
    let mut args = std::env::args().skip(1);
    if let Some("single") = args.next().as_deref() {
        let iters = args.next().and_then(|n| n.parse().ok()).unwrap_or(20_000);
        single(iters);
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let cpus = cpus();
    println!(
        "udp_bench: loopback 127.0.0.1, {} CPUs, threads {}, both sides busy-polling",
        cpus,
        if cpus >= 2 {
            "pinned to CPUs 0 and 1"
        } else {
            "not pinned (one CPU)"
        }
    );
    println!("raw and reliable batches alternate, so both see the same background load");
    println!("load average at start: {}", load_average());
    let sizes = [8usize, 64, 512, 4096, 8192, 16_384, 32_768, 61_000, 65_536];
    let batches = if quick { 5 } else { 21 };
    println!();
    println!("(a, b) ping-pong round trip, median of {batches} batches, microseconds");
    println!(
        "{:>9} {:>12} {:>16} {:>9} {:>14}",
        "size", "raw UDP", "Reliable<UDP>", "overhead", "retransmits"
    );
    for &size in &sizes {
        let iters = match size {
            0..=4096 => 1000,
            4097..=16_384 => 500,
            _ => 200,
        } / if quick { 5 } else { 1 };
        let (mut raw_ping, mut raw_pong) = (Raw(udp(MAX_DATAGRAM)), Raw(udp(MAX_DATAGRAM)));
        let (a, b) = (udp(MAX_DATAGRAM), udp(MAX_DATAGRAM));
        let mtu = a.capabilities().mtu;
        let (mut sa, mut sb) = (RelStore::new(mtu), RelStore::new(mtu));
        let (mut rel_ping, mut rel_pong) = (Rl(sa.layer(a, 1)), Rl(sb.layer(b, 2)));
        let (mut raw, mut rel) = (Vec::new(), Vec::new());
        for i in 0..batches {
            let warmup = if i == 0 { iters / 5 } else { 10 };
            raw.push(batch(&mut raw_ping, &mut raw_pong, size, warmup, iters));
            rel.push(batch(&mut rel_ping, &mut rel_pong, size, warmup, iters));
        }
        let (raw, rel) = (median(raw) / 1e3, median(rel) / 1e3);
        let retransmits = rel_ping.0.stats().retransmissions + rel_pong.0.stats().retransmissions;
        println!(
            "{:>9} {:>12.2} {:>16.2} {:>8.0}% {:>14}",
            human(size),
            raw,
            rel,
            (rel / raw - 1.0) * 100.0,
            retransmits
        );
    }
    println!();
    let rounds = if quick { 1 } else { 5 };
    let secs = if quick { 0.3 } else { 0.5 };
    println!("(c) stream, goodput at the receiver, median of {rounds} runs of {secs} s, GB/s");
    println!(
        "{:>9} {:>12} {:>8} {:>16} {:>9} {:>22}",
        "datagram", "raw UDP", "lost", "Reliable<UDP>", "overhead", "Reliable, min RTO 20ms"
    );
    for datagram in [8192usize, 61_440] {
        let (mut raw_tx, mut raw_rx) = (Raw(udp(datagram)), Raw(udp(datagram)));
        let (a, b) = (udp(datagram), udp(datagram));
        let mtu = a.capabilities().mtu;
        let (mut sa, mut sb) = (RelStore::new(mtu), RelStore::new(mtu));
        let (mut rel_tx, mut rel_rx) = (Rl(sa.layer(a, 1)), Rl(sb.layer(b, 2)));
        let (a, b) = (udp(datagram), udp(datagram));
        let (mut sc, mut sd) = (RelStore::new(mtu), RelStore::new(mtu));
        let slow_rto = 20_000_000;
        let (mut slow_tx, mut slow_rx) = (
            Rl(sc.layer_with(a, 3, slow_rto)),
            Rl(sd.layer_with(b, 4, slow_rto)),
        );
        let raw_packet = raw_tx.t().capabilities().mtu;
        let rel_packet = rel_tx.t().capabilities().mtu;
        let (mut raw, mut lost, mut rel, mut slow) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (gbps, loss) = stream(&mut raw_tx, &mut raw_rx, raw_packet, secs);
            raw.push(gbps);
            lost.push(loss);
            rel.push(stream(&mut rel_tx, &mut rel_rx, rel_packet, secs).0);
            slow.push(stream(&mut slow_tx, &mut slow_rx, rel_packet, secs).0);
        }
        let (raw, lost, rel, slow) = (median(raw), median(lost), median(rel), median(slow));
        let retransmits = rel_tx.0.stats().retransmissions;
        let frames = rel_tx.0.stats().frames_sent.max(1);
        println!(
            "{:>9} {:>12.2} {:>7.1}% {:>16.2} {:>8.0}% {:>22.2}",
            human(datagram),
            raw,
            lost * 100.0,
            rel,
            (1.0 - rel / raw) * 100.0,
            slow
        );
        println!(
            "{:>9} default RTO: {retransmits} retransmissions for {frames} frames; min RTO 20 ms: {} for {}",
            "",
            slow_tx.0.stats().retransmissions,
            slow_tx.0.stats().frames_sent
        );
    }
    println!();
    println!("load average at end: {}", load_average());
}

/// The first three fields of `/proc/loadavg` (other work on the machine skews every figure).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn human(n: usize) -> String {
    if n >= 1024 && n % 1024 == 0 {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} B")
    }
}
