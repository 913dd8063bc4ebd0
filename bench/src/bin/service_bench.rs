//! Atomic-service figures on one machine: remote READ round trips and put bandwidth
//! through a `gsas_service::Service`, beside the raw UDP limits of the same machine.
//!
//! ```text
//! service_bench [--quick] [--bandwidth] [--min-rto-us N]
//! ```
//!
//! Two threads pinned to CPUs 0 and 1 (`sched_setaffinity`, when the machine has two),
//! both busy-polling (the service is configured to spin without end):
//!
//! * **raw UDP ping-pong**: plain non-blocking `std::net::UdpSocket`s on 127.0.0.1 bounce
//!   messages of 8 B to 64 KiB (a message above one datagram travels as several of at most
//!   61440 bytes). Round-trip time per batch (time of a batch / its length), median and
//!   best over short batches (a batch fits in a scheduler slice, so the best batch shows
//!   the uncontended cost on a shared machine): the physical limit of this transport here.
//! * **READ round trip**: a client (gsas-core `Client` over `Reliable<UdpTransport>`, as a
//!   PE uses it) reads 8 B to 64 KiB from a segment of a job joined at the service
//!   (running on its own pinned thread). Inline READ up to 56 bytes, BULK_READ fragments
//!   above. Same batching, median and best.
//! * **raw UDP stream**: one thread sends 8 KiB or 60 KiB datagrams as fast as it can, the
//!   other receives; goodput at the receiver (payload bytes), loss reported.
//! * **put bandwidth**: the client writes 1 MiB puts (BULK_WRITE fragments of ~60 KiB) to
//!   the service with 8 puts in flight, each completed by the service's ACKs; GB/s of
//!   acknowledged payload. The ACKs of non-final fragments are lazy
//!   (`Transport::send_lazy`): they leave with the service's next acknowledgement of the
//!   client's frames (one datagram per four fragments) or with the ACK of a final fragment,
//!   not in a datagram each.
//!
//! Targets checked in the output: an 8-byte READ within 1.3x of the raw 8-byte round
//! trip; 1 MiB put bandwidth at least 0.7x of the raw stream in datagrams of the service's
//! size (60 KiB). Not a test: nothing is asserted. `--quick` shortens every phase;
//! `--bandwidth` skips the round trips and measures only the streams and the puts (for
//! repeated before/after comparisons).
//!
//! The client's reliability layer uses the runtime's settings
//! ([`gsas_service::reliable_config`], as a PE does); `--min-rto-us N` replaces its
//! retransmission-timeout floor (e.g. `--min-rto-us 1000`, gsas-core's LAN default, to see
//! the spurious retransmissions a too-short floor causes). Retransmissions of both sides
//! are printed with the figures.

use std::hint::spin_loop;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use gsas_control::ControlClient;
use gsas_control::proto::{JoinInfo, SEG_HEAP};
use gsas_core::client::{Client, Completion};
use gsas_core::reliable::{HashIndex, PeerSlot, Reliable, buffer_len};
use gsas_core::transport::Transport;
use gsas_core::wire::{GlobalAddr, SenderId};
use gsas_service::{Service, ServiceConfig};
use gsas_transport::poll::monotonic_ns;
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};

/// UDP payload per datagram (the runtime's default `udp_mtu`).
const MTU: usize = gsas_transport::config::DEFAULT_UDP_MTU;
/// Largest raw datagram: what a gsas datagram carries (header included).
const RAW_DATAGRAM: usize = MTU;
/// Frames in flight per peer.
const W: usize = 32;
/// Operations the client keeps in flight.
const OPS: usize = 64;
const JOB_ID: u64 = 0xbe7c_0001;
const JOB_KEY: u64 = 0xbe7c_5eed_0000_0001;
const SEGMENT: u64 = 64 << 20;
const SIZES: [usize; 8] = [8, 64, 512, 4096, 16384, 32768, 61440, 65536];
const PUT: usize = 1 << 20;
const PUTS_IN_FLIGHT: usize = 8;
/// An operation without an answer for this long means the service is gone.
const STUCK: Duration = Duration::from_secs(30);

type Rel<'a> = Reliable<'a, UdpTransport, W, HashIndex<UdpPeer, 4>>;

/// Pins the calling thread to `cpu` if the machine has more than one CPU online.
///
/// The count comes from `sysconf`, not from `available_parallelism`: the latter reads the
/// calling thread's affinity, which is a single CPU once the main thread has pinned itself
/// (and threads it spawns inherit that), so the second thread would stay on the first
/// thread's CPU and every round trip would cost a scheduler tick.
fn pin(cpu: usize) {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if online < 2 {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it; the call reads
    // `size_of::<cpu_set_t>()` bytes from it for the calling thread (pid 0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        eprintln!(
            "service_bench: cannot pin to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Median and best of batch samples.
#[derive(Clone, Copy, Debug)]
struct Figure {
    median: f64,
    best: f64,
}

fn figure(v: &mut [f64]) -> Figure {
    v.sort_by(f64::total_cmp);
    Figure {
        median: v[v.len() / 2],
        best: v[0],
    }
}

fn size_label(n: usize) -> String {
    if n >= 1024 && n % 1024 == 0 {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} B")
    }
}

/// Busy-polls `sock` until `len` bytes arrived; returns the last sender.
fn recv_bytes(
    sock: &UdpSocket,
    buf: &mut [u8],
    len: usize,
    stop: &AtomicBool,
) -> Option<SocketAddr> {
    let mut got = 0;
    let mut from = None;
    while got < len {
        match sock.recv_from(buf) {
            Ok((n, a)) => {
                got += n;
                from = Some(a);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
                spin_loop();
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
    from
}

/// Sends `len` bytes to `to` in datagrams of at most [`RAW_DATAGRAM`].
fn send_bytes(sock: &UdpSocket, buf: &[u8], len: usize, to: SocketAddr) {
    let mut left = len;
    while left > 0 {
        let n = left.min(RAW_DATAGRAM);
        loop {
            match sock.send_to(&buf[..n], to) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => spin_loop(),
                Err(e) => panic!("send: {e}"),
            }
        }
        left -= n;
    }
}

fn udp_socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    s.set_nonblocking(true).expect("non-blocking");
    s
}

/// Raw UDP ping-pong of `size` bytes: microseconds per round trip.
fn raw_pingpong(size: usize, batches: usize, iters: usize) -> Figure {
    let (ping, pong) = (udp_socket(), udp_socket());
    let pong_addr = pong.local_addr().expect("address");
    let stop = AtomicBool::new(false);
    let ready = Barrier::new(2);
    thread::scope(|s| {
        s.spawn(|| {
            pin(1);
            let mut buf = vec![0u8; 65536];
            ready.wait();
            while let Some(from) = recv_bytes(&pong, &mut buf, size, &stop) {
                send_bytes(&pong, &buf, size, from);
            }
        });
        pin(0);
        let mut buf = vec![1u8; 65536];
        ready.wait();
        let mut samples = Vec::with_capacity(batches);
        for b in 0..batches + 1 {
            let t0 = Instant::now();
            for _ in 0..iters {
                send_bytes(&ping, &buf, size, pong_addr);
                recv_bytes(&ping, &mut buf, size, &stop).expect("reply");
            }
            if b > 0 {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / iters as f64);
            }
        }
        stop.store(true, Ordering::Relaxed);
        figure(&mut samples)
    })
}

/// Raw UDP stream in datagrams of `dgram` bytes for `time`: (GB/s received, loss %).
fn raw_stream(dgram: usize, time: Duration) -> (f64, f64) {
    let (tx, rx) = (udp_socket(), udp_socket());
    let to = rx.local_addr().expect("address");
    let stop = AtomicBool::new(false);
    let received = AtomicU64::new(0);
    let ready = Barrier::new(2);
    let sent = thread::scope(|s| {
        s.spawn(|| {
            pin(1);
            let mut buf = vec![0u8; 65536];
            ready.wait();
            let mut got = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match rx.recv_from(&mut buf) {
                    Ok((n, _)) => got += n as u64,
                    Err(_) => spin_loop(),
                }
            }
            received.store(got, Ordering::Relaxed);
        });
        pin(0);
        let buf = vec![7u8; dgram];
        ready.wait();
        let t0 = Instant::now();
        let mut sent = 0u64;
        while t0.elapsed() < time {
            if tx.send_to(&buf, to).is_ok() {
                sent += dgram as u64;
            } else {
                spin_loop();
            }
        }
        // Let the receiver drain what is queued, then stop it.
        thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        sent
    });
    let got = received.load(Ordering::Relaxed);
    let loss = if sent == 0 {
        0.0
    } else {
        100.0 * (sent.saturating_sub(got)) as f64 / sent as f64
    };
    (got as f64 / time.as_secs_f64() / 1e9, loss)
}

/// A service on its own pinned thread with one job of one PE and a heap segment.
struct Served {
    addr: SocketAddr,
    shutdown: gsas_service::ShutdownHandle,
    thread: Option<thread::JoinHandle<()>>,
    /// Keeps the PE's control connection (and so the job) alive.
    _control: ControlClient,
    socket: PathBuf,
}

impl Served {
    fn start() -> Served {
        let socket =
            std::env::temp_dir().join(format!("service-bench-{}.sock", std::process::id()));
        let mut cfg =
            ServiceConfig::new(0, "127.0.0.1:0".parse().expect("address"), socket.clone());
        cfg.name = "bench service".into();
        // Busy-poll for as long as the benchmark runs.
        cfg.spin = Duration::from_secs(3600);
        cfg.udp_mtu = MTU;
        let service = Service::bind(cfg).expect("service bind");
        let addr = service.udp_addr();
        let shutdown = service.shutdown_handle();
        let thread = thread::spawn(move || {
            pin(1);
            if let Err(e) = service.run() {
                eprintln!("service_bench: the service failed: {e}");
            }
        });
        let mut control = ControlClient::connect(&socket, Duration::from_secs(5)).expect("connect");
        control
            .join(
                0,
                JOB_ID,
                JOB_KEY,
                JoinInfo {
                    npes: 1,
                    node: 0,
                    flags: 0,
                },
            )
            .expect("join");
        control
            .create_segment(0, SEG_HEAP, SEGMENT)
            .expect("heap segment");
        Served {
            addr,
            shutdown,
            thread: Some(thread),
            _control: control,
            socket,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.shutdown.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Storage of the client's reliability layer.
struct RelStore {
    slots: Vec<PeerSlot<UdpPeer, W>>,
    buffers: Vec<u8>,
}

/// The PE side: a client engine over the reliability layer, busy-polling.
struct Pe<'a> {
    layer: Rel<'a>,
    client: Box<Client<UdpPeer, OPS, 1>>,
    peer: UdpPeer,
    done: usize,
    bytes: usize,
}

impl<'a> Pe<'a> {
    fn new(store: &'a mut RelStore, service: SocketAddr, min_rto: Option<Duration>) -> Pe<'a> {
        let udp = UdpTransport::bind(
            "127.0.0.1:0".parse().expect("address"),
            UdpConfig {
                mtu: MTU,
                ..UdpConfig::default()
            },
        )
        .expect("client UDP");
        let mut config = gsas_service::reliable_config(STUCK);
        if let Some(min) = min_rto {
            config.min_rto_ns = min.as_nanos() as u64;
            config.initial_rto_ns = config.initial_rto_ns.max(config.min_rto_ns);
        }
        let mut layer = Reliable::new(udp, config, &mut store.slots, &mut store.buffers)
            .expect("reliability layer");
        layer.poll(monotonic_ns()).expect("poll");
        Pe {
            layer,
            client: Box::new(Client::new(SenderId::new(0).expect("sender"))),
            peer: UdpPeer {
                addr: service,
                key: JOB_KEY,
            },
            done: 0,
            bytes: 0,
        }
    }

    /// One round of progress: timers, flush, replies, more read fragments.
    fn progress(&mut self) {
        self.layer.poll(monotonic_ns()).expect("poll");
        self.layer.flush().expect("flush");
        let (client, done, bytes) = (&mut self.client, &mut self.done, &mut self.bytes);
        while let Some(()) = self
            .layer
            .recv(|_, reply| {
                client.handle_reply(reply, |c| match c {
                    Completion::Data { data, .. } => *bytes += data.len(),
                    Completion::Done { result, .. } => {
                        result.expect("the service refused a request");
                        *done += 1;
                    }
                });
            })
            .expect("recv")
        {}
        self.client.pump(&mut self.layer).expect("pump");
    }

    /// One READ of `size` bytes, to completion.
    fn read(&mut self, size: usize) {
        let want = self.done + 1;
        let addr = GlobalAddr::new(0, SEG_HEAP, 0).expect("address");
        loop {
            match self
                .client
                .read(&mut self.layer, self.peer, 0, 0, addr, size)
            {
                Ok(_) => break,
                Err(_) => self.progress(),
            }
        }
        let t0 = Instant::now();
        while self.done < want {
            self.progress();
            assert!(t0.elapsed() < STUCK, "a READ of {size} bytes got no answer");
            spin_loop();
        }
    }

    /// Microseconds per READ of `size` bytes.
    fn read_rt(&mut self, size: usize, batches: usize, iters: usize) -> Figure {
        let mut samples = Vec::with_capacity(batches);
        for b in 0..batches + 1 {
            let t0 = Instant::now();
            for _ in 0..iters {
                self.read(size);
            }
            if b > 0 {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / iters as f64);
            }
        }
        figure(&mut samples)
    }

    /// 1 MiB puts with [`PUTS_IN_FLIGHT`] in flight for `time`: GB/s acknowledged, and
    /// how many puts completed.
    fn put_bw(&mut self, time: Duration) -> (f64, usize) {
        let data = vec![0x5au8; PUT];
        let mut unsent: Vec<gsas_core::client::OpHandle> = Vec::new();
        let (mut started, start_done) = (0usize, self.done);
        let t0 = Instant::now();
        let mut stop_at = None;
        loop {
            let in_flight = started - (self.done - start_done);
            if stop_at.is_none() && t0.elapsed() >= time {
                stop_at = Some(started);
            }
            if stop_at.is_none() && in_flight < PUTS_IN_FLIGHT && unsent.is_empty() {
                let at = (started % (SEGMENT as usize / PUT)) * PUT;
                let addr = GlobalAddr::new(0, SEG_HEAP, at as u64).expect("address");
                if let Ok(issued) = self
                    .client
                    .write(&mut self.layer, self.peer, 0, 0, addr, &data)
                {
                    started += 1;
                    if !issued.all_sent {
                        unsent.push(issued.handle);
                    }
                }
            }
            unsent.retain(|&h| match self.client.resume(&mut self.layer, h, &data) {
                Ok(i) => !i.all_sent,
                Err(_) => false,
            });
            self.progress();
            if stop_at.is_some() && self.done - start_done == started {
                break;
            }
            assert!(t0.elapsed() < time + STUCK, "puts got no answer");
        }
        let puts = self.done - start_done;
        let moved = puts * PUT;
        (moved as f64 / t0.elapsed().as_secs_f64() / 1e9, puts)
    }
}

fn main() {
    let usage = |msg: &str| -> ! {
        eprintln!(
            "service_bench: {msg}; usage: service_bench [--quick] [--bandwidth] [--min-rto-us N]"
        );
        std::process::exit(2)
    };
    let (mut quick, mut bandwidth_only, mut min_rto) = (false, false, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--bandwidth" => bandwidth_only = true,
            "--min-rto-us" => match args.next().and_then(|v| v.parse::<u64>().ok()) {
                Some(us) if us > 200 => min_rto = Some(Duration::from_micros(us)),
                _ => usage("--min-rto-us needs microseconds above the 200 us ack delay"),
            },
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    // Short batches (tens of round trips) fit in one scheduler slice, so the best batch
    // shows the uncontended cost even on a machine shared with other work.
    let (batches, iters) = if bandwidth_only {
        (0, 0)
    } else if quick {
        (11, 50)
    } else {
        (201, 50)
    };
    let stream_time = Duration::from_millis(if quick { 300 } else { 2000 });
    let iters_of = |size: usize| if size > 16384 { iters / 2 } else { iters };
    // The raw figures first: the service spins on CPU 1 while it runs.
    let sizes: &[usize] = if bandwidth_only { &[] } else { &SIZES };
    let raw: Vec<Figure> = sizes
        .iter()
        .map(|&size| {
            eprintln!("service_bench: raw ping-pong, {}", size_label(size));
            raw_pingpong(size, batches, iters_of(size))
        })
        .collect();
    eprintln!("service_bench: raw streams");
    let (s8, l8) = raw_stream(8192, stream_time);
    let (s60, l60) = raw_stream(61440, stream_time);

    let served = Served::start();
    pin(0);
    let mut store = RelStore {
        slots: (0..2).map(|_| PeerSlot::new()).collect(),
        buffers: vec![0u8; buffer_len(MTU - 16, MTU - 16, 2 * W + 2)],
    };
    let mut pe = Pe::new(&mut store, served.addr, min_rto);
    // Warm up: the first exchange also sets up the reliability layer's peer state.
    for _ in 0..100 {
        pe.read(8);
    }
    let service_rtx = || {
        gsas_control::query_stats(&served.socket, Duration::from_secs(5))
            .ok()
            .and_then(|s| s.get("reliable.retransmissions"))
            .unwrap_or(0)
    };
    let (pe0, svc0) = (pe.layer.stats().retransmissions, service_rtx());
    let read: Vec<Figure> = sizes
        .iter()
        .map(|&size| {
            eprintln!("service_bench: READ round trips, {}", size_label(size));
            pe.read_rt(size, batches, iters_of(size))
        })
        .collect();
    let (pe1, svc1) = (pe.layer.stats().retransmissions, service_rtx());
    let frames1 = pe.layer.stats().frames_received;
    eprintln!("service_bench: 1 MiB puts");
    let (put, puts) = pe.put_bw(stream_time);
    let (pe2, svc2) = (pe.layer.stats().retransmissions, service_rtx());
    // Every datagram of the service reaches the client's layer as one frame (data or ack).
    let service_datagrams = pe.layer.stats().frames_received - frames1;
    let floor = min_rto.unwrap_or(gsas_service::MIN_RTO);

    println!("service_bench: 127.0.0.1, two threads pinned to CPUs 0 and 1, both busy-polling");
    println!(
        "client retransmission-timeout floor {} us (runtime default {} us)",
        floor.as_micros(),
        gsas_service::MIN_RTO.as_micros()
    );
    if !bandwidth_only {
        println!(
            "round trips: {batches} batches of up to {iters}; median and best batch, microseconds per round trip\n"
        );
        println!(
            "| size | raw UDP median | READ median | ratio | raw UDP best | READ best | ratio |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        for (i, &size) in sizes.iter().enumerate() {
            println!(
                "| {} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {:.2} |",
                size_label(size),
                raw[i].median,
                read[i].median,
                read[i].median / raw[i].median,
                raw[i].best,
                read[i].best,
                read[i].best / raw[i].best
            );
        }
        println!(
            "retransmissions during the READs: client {}, service {}",
            pe1 - pe0,
            svc1.saturating_sub(svc0)
        );
    }
    println!();
    println!("| stream | GB/s | note |");
    println!("|---|---:|---|");
    println!("| raw UDP, 8 KiB datagrams | {s8:.2} | {l8:.1}% lost |");
    println!("| raw UDP, 60 KiB datagrams | {s60:.2} | {l60:.1}% lost |");
    println!(
        "| 1 MiB puts through the service ({PUTS_IN_FLIGHT} in flight, 60 KiB fragments) | {put:.2} | acknowledged |"
    );
    println!(
        "retransmissions during the puts: client {}, service {}",
        pe2 - pe1,
        svc2.saturating_sub(svc1)
    );
    let fragments = PUT.div_ceil(pe.layer.capabilities().mtu - gsas_core::wire::HEADER_LEN);
    println!(
        "service datagrams per 1 MiB put ({fragments} fragments): {:.2}",
        service_datagrams as f64 / puts.max(1) as f64
    );
    println!();
    if !bandwidth_only {
        let ratio8 = read[0].median / raw[0].median;
        let best8 = read[0].best / raw[0].best;
        println!(
            "target 8-byte READ <= 1.3x raw round trip: median {ratio8:.2}x ({}), best batch {best8:.2}x ({})",
            if ratio8 <= 1.3 { "met" } else { "MISSED" },
            if best8 <= 1.3 { "met" } else { "MISSED" }
        );
    }
    let r = put / s60;
    println!(
        "target 1 MiB put bandwidth >= 0.7x raw 60 KiB stream: {r:.2}x ({})",
        if r >= 0.7 { "met" } else { "MISSED" }
    );
    drop(pe);
    drop(served);
}
