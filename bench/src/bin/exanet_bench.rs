//! Exanet figures through the emulated NI (regression tracking, not hardware figures).
//!
//! ```text
//! exanet_bench latency   [iters]   8-byte READ round trip: client engine -> ExanetTransport
//!                                  -> exanet-emu engine -> service engine -> back; then
//!                                  the same after 20 ms of silence (the emulator dozes and
//!                                  the doorbell must wake it)
//! exanet_bench bandwidth [iters]   1 MiB BULK_WRITE through client + service, and 1 MiB
//!                                  RDMA write through the transport
//! exanet_bench idle      [secs]    CPU time the emulator's fabric thread uses while nothing
//!                                  happens
//! exanet_bench sends     [count]   driver-only packetizer sends on the Model backend, for
//!                                  valgrind --tool=callgrind --toggle-collect='*send_one*'
//! ```
//!
//! `EXANET_BENCH_FABRIC=in-process` runs the emulator with frames handed over inside its
//! fabric thread instead of its default per-node loopback sockets.
//!
//! The emulator runs in this process (`exanet_emu::emu::Emulator`, same fabric thread as the
//! `exanet-emu` binary) under a temporary root. The client and the service each run on
//! their own thread and poll (yielding the CPU between looks), as a gsas PE would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use exanet::nva::{EmuRegistrar, MemSegment};
use exanet::{Dest, DriverConfig, Endpoint, ExanetTransport, Shm, TransportConfig};
use exanet_emu::Model;
use exanet_emu::emu::{EmuConfig, Emulator, FabricMode};
use exanet_emu::model::{ModelConfig, ModelFabric};
use gsas_core::client::{Client, Completion};
use gsas_core::service::{Segment, Service, WordMemory};
use gsas_core::transport::{Transport, TransportError};
use gsas_core::wire::{GlobalAddr, SenderId};

type Tr = ExanetTransport<Shm, EmuRegistrar>;
const KEY: u64 = 7;
const MIB: usize = 1 << 20;

fn serve(mut t: Tr, stop: Arc<AtomicBool>) {
    let words: Vec<AtomicU64> = (0..(2 * MIB / 8)).map(|_| AtomicU64::new(0)).collect();
    let id = SenderId::new(t.sender_id()).expect("48-bit id");
    let mut service: Service<_, 4> = Service::new(id, WordMemory::new(&words));
    service
        .register(Segment {
            job: 1,
            key: KEY,
            pe: 0,
            segment: 0,
            base: 0,
            len: 2 * MIB as u64,
        })
        .expect("segment");
    while !stop.load(Ordering::Acquire) {
        match t.recv(|p, d| (p, d.to_vec())).expect("recv") {
            Some((peer, pkt)) => loop {
                match service.serve(&mut t, peer, KEY, &pkt) {
                    Ok(_) => break,
                    Err(TransportError::WouldBlock) => {
                        let _ = t.poll(0);
                    }
                    Err(e) => panic!("serve: {e}"),
                }
            },
            None => {
                let _ = t.poll(0);
                std::thread::yield_now();
            }
        }
    }
}

fn drive(
    client: &mut Client<Dest, 128, 1>,
    t: &mut Tr,
    payload: &[u8],
    handle: Option<gsas_core::client::OpHandle>,
) {
    let start = Instant::now();
    while client.outstanding(0) > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "operation did not complete"
        );
        if let Some(h) = handle.filter(|h| client.is_pending(*h)) {
            let _ = client.resume(t, h, payload);
        }
        if let Some(reply) = t.recv(|_, d| d.to_vec()).expect("recv") {
            client.handle_reply(&reply, |c| {
                if let Completion::Done { result, .. } = c {
                    result.expect("operation failed");
                }
            });
        } else {
            let _ = t.poll(0);
            std::thread::yield_now();
        }
    }
}

struct Setup {
    emu: Emulator,
    client_t: Tr,
    server: Dest,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn setup() -> Setup {
    let root = std::env::temp_dir().join(format!("exanet-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let fabric = match std::env::var("EXANET_BENCH_FABRIC") {
        Ok(word) => word.parse().expect("EXANET_BENCH_FABRIC"),
        Err(_) => FabricMode::default(),
    };
    let emu = Emulator::start(EmuConfig {
        eps: 1,
        fabric,
        ..EmuConfig::new(&root)
    })
    .expect("start emulator");
    let cfg = TransportConfig {
        mtu: 64 * 1024,
        tx_slots: 16,
        rx_slots: 16,
        ..TransportConfig::default()
    };
    let client_t = emu
        .paths()
        .open_transport(0, 0, cfg)
        .expect("client transport");
    let server_t = emu
        .paths()
        .open_transport(1, 0, cfg)
        .expect("service transport");
    let server = server_t.local_peer();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let thread = Some(std::thread::spawn(move || serve(server_t, stop2)));
    Setup {
        emu,
        client_t,
        server,
        stop,
        thread,
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(self.emu.paths().root());
    }
}

/// Median, 10th and 99th percentile in microseconds.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    let pct =
        |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)].as_secs_f64() * 1e6;
    (pct(50), pct(10), pct(99))
}

fn latency(iters: usize) {
    let mut s = setup();
    let mut client: Client<Dest, 128, 1> =
        Client::new(SenderId::new(s.client_t.sender_id()).expect("id"));
    let addr = GlobalAddr::new(0, 0, 64).expect("addr");
    let mut read = |s: &mut Setup| {
        let t0 = Instant::now();
        client
            .read(&mut s.client_t, s.server, 0, 0, addr, 8)
            .expect("read");
        drive(&mut client, &mut s.client_t, &[], None);
        t0.elapsed()
    };
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + 100 {
        let t = read(&mut s);
        if i >= 100 {
            samples.push(t);
        }
    }
    let (median, p10, p99) = percentiles(samples);
    println!(
        "8-byte READ round trip through exanet-emu: median {median:.1} us, p10 {p10:.1} us, p99 {p99:.1} us ({iters} iterations)"
    );
    let quiet = (iters / 40).clamp(5, 50);
    let mut samples = Vec::with_capacity(quiet);
    for _ in 0..quiet {
        std::thread::sleep(Duration::from_millis(20));
        samples.push(read(&mut s));
    }
    let (median, p10, p99) = percentiles(samples);
    let stats = s.emu.stats();
    println!(
        "  after 20 ms of silence: median {median:.1} us, p10 {p10:.1} us, p99 {p99:.1} us ({quiet} iterations; emulator: {} frames, {} dozes, {} doorbell wake-ups)",
        stats.frames, stats.dozes, stats.wakeups
    );
}

/// CPU time (user + system) of this process's thread named `name`, from /proc.
fn thread_cpu(name: &str) -> Option<Duration> {
    let tick = 100.0; // USER_HZ on Linux
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
        let ticks: f64 =
            fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        return Some(Duration::from_secs_f64(ticks / tick));
    }
    None
}

fn idle(secs: u64) {
    let root = std::env::temp_dir().join(format!("exanet-bench-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let emu = Emulator::start(EmuConfig::new(&root)).expect("start emulator");
    std::thread::sleep(Duration::from_millis(200));
    let before = thread_cpu("exanet-fabric").expect("fabric thread in /proc");
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let used = thread_cpu("exanet-fabric").expect("fabric thread in /proc") - before;
    println!(
        "idle exanet-emu (4 nodes x 4 endpoints): fabric thread used {:.1} ms of CPU in {:.1} s ({:.2} %; {} dozes)",
        used.as_secs_f64() * 1e3,
        t0.elapsed().as_secs_f64(),
        used.as_secs_f64() / t0.elapsed().as_secs_f64() * 100.0,
        emu.stats().dozes
    );
    emu.shutdown().expect("shutdown");
}

fn bandwidth(iters: usize) {
    let mut s = setup();
    let mut client: Client<Dest, 128, 1> =
        Client::new(SenderId::new(s.client_t.sender_id()).expect("id"));
    let data: Vec<u8> = (0..MIB).map(|i| i as u8).collect();
    let addr = GlobalAddr::new(0, 0, 0).expect("addr");
    let t0 = Instant::now();
    for _ in 0..iters {
        let issued = client
            .write(&mut s.client_t, s.server, 0, 0, addr, &data)
            .expect("write");
        drive(&mut client, &mut s.client_t, &data, Some(issued.handle));
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "1 MiB BULK_WRITE through exanet-emu: {:.1} MB/s ({iters} transfers, {:.2} ms each)",
        (iters * MIB) as f64 / secs / 1e6,
        secs * 1e3 / iters as f64
    );

    let mut server_side = s
        .emu
        .paths()
        .open_transport(1, 0, TransportConfig::default())
        .expect("second endpoint");
    let _ = &mut server_side;
    let local = MemSegment::create("bench-src", MIB).expect("segment");
    let remote = MemSegment::create("bench-dst", MIB).expect("segment");
    let lnva = s.client_t.register(&local).expect("register");
    let rnva = server_side.register(&remote).expect("register");
    let peer = server_side.local_peer();
    let t0 = Instant::now();
    for _ in 0..iters {
        let h = s
            .client_t
            .rdma_write(lnva, peer, rnva, MIB as u32, false, 0)
            .expect("rdma");
        s.client_t
            .rdma_wait(h, Duration::from_secs(60))
            .expect("rdma completes");
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "1 MiB RDMA write through exanet-emu: {:.1} MB/s ({:.2} ms each)",
        (iters * MIB) as f64 / secs / 1e6,
        secs * 1e3 / iters as f64
    );
}

#[inline(never)]
fn send_one(ep: &mut Endpoint<Model>, dest: Dest, payload: &[u8; 32]) -> u32 {
    ep.try_send(dest, payload, 0).expect("slot free")
}

fn sends(count: usize) {
    let fabric = ModelFabric::new(ModelConfig::default());
    let mut a = Endpoint::open(fabric.endpoint(0, 0), DriverConfig::default()).expect("open");
    let mut b = Endpoint::open(fabric.endpoint(1, 0), DriverConfig::default()).expect("open");
    let dest = b.info().dest();
    fabric.set_step_mode(true);
    let payload = [0x5Au8; 32];
    let mut sent = 0;
    while sent < count {
        for _ in 0..8 {
            send_one(&mut a, dest, &payload);
        }
        sent += 8;
        fabric.settle();
        a.progress();
        while b.recv().is_some() {}
    }
    println!("{sent} packetizer sends of 32 bytes (Model backend, step mode)");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |d: usize| args.get(1).and_then(|s| s.parse().ok()).unwrap_or(d);
    match args.first().map(String::as_str) {
        Some("latency") => latency(n(2000)),
        Some("bandwidth") => bandwidth(n(20)),
        Some("sends") => sends(n(10_000)),
        Some("idle") => idle(n(2) as u64),
        Some("all") | None => {
            latency(n(2000));
            bandwidth(20);
            idle(2);
        }
        Some(other) => {
            eprintln!("unknown mode {other:?}; use latency, bandwidth, idle, sends or all");
            std::process::exit(2);
        }
    }
}
