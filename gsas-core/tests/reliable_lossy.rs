//! The reliability layer over a lossy network: `Reliable<FaultInjector<Loopback>>` endpoints
//! with 10% drops, 5% duplicates and reordering within 8 packets, driven by a simulated
//! clock. Every packet must arrive exactly once, with its exact content, and nothing may
//! stall. Retransmission counts are printed with `eprintln!` (`cargo test -- --nocapture`).

use gsas_core::reliable::{Config, PeerSlot, Reliable, Stats, buffer_len};
use gsas_core::transport::fault::{FaultConfig, FaultInjector, FaultStats, PPM};
use gsas_core::transport::loopback::{LoopbackConfig, LoopbackEndpoint, LoopbackHub};
use gsas_core::transport::{Transport, TransportError};

const MTU: usize = 1024;
const W: usize = 32;
const HELD: usize = 32;
/// Simulated time per round of the event loop.
const TICK_NS: u64 = 5_000;

type Node<'a, 'h, 's, const N: usize> =
    Reliable<'a, FaultInjector<'a, LoopbackEndpoint<'h, 's, N>, HELD>, W>;

fn faults(seed: u64) -> FaultConfig {
    FaultConfig {
        drop_ppm: PPM / 10,
        duplicate_ppm: PPM / 20,
        reorder_ppm: PPM / 10,
        reorder_window: 8,
        on_send: true,
        on_recv: false,
        ..FaultConfig::none(seed)
    }
}

/// Timers in simulated time: acks within 20 us, timeouts from 100 us.
fn config(epoch: u64) -> Config {
    Config {
        ack_delay_ns: 20_000,
        min_rto_ns: 100_000,
        initial_rto_ns: 200_000,
        max_rto_ns: 2_000_000,
        deadline_ns: 1_000_000_000,
        ..Config::new(epoch)
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Length of packet `seq` from `src` to `dst`: mostly small, some large, up to the MTU.
fn packet_len(src: usize, dst: usize, seq: u32, max: usize) -> usize {
    let h = mix(((src as u64) << 48) | ((dst as u64) << 40) | u64::from(seq));
    if h % 10 < 7 {
        12 + (h >> 8) as usize % 52
    } else {
        64 + (h >> 8) as usize % (max - 64 + 1)
    }
}

/// Packet layout: `[src u8][dst u8][0u8; 2][seq u32 LE][seq u32 LE ^ 0xa5a5a5a5][pattern]`.
fn fill_packet(buf: &mut [u8], src: usize, dst: usize, seq: u32) {
    buf[0] = src as u8;
    buf[1] = dst as u8;
    buf[2..4].fill(0);
    buf[4..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..12].copy_from_slice(&(seq ^ 0xa5a5_a5a5).to_le_bytes());
    for (i, b) in buf[12..].iter_mut().enumerate() {
        *b = (seq as usize).wrapping_mul(31).wrapping_add(i) as u8;
    }
}

/// Checks a received packet and returns (src, seq).
fn check_packet(me: usize, from: usize, data: &[u8], max: usize) -> (usize, u32) {
    assert!(data.len() >= 12, "runt packet of {} bytes", data.len());
    let (src, dst) = (data[0] as usize, data[1] as usize);
    let seq = u32::from_le_bytes(data[4..8].try_into().unwrap());
    assert_eq!(src, from, "source field matches the transport peer");
    assert_eq!(dst, me, "delivered to the right endpoint");
    assert_eq!(
        u32::from_le_bytes(data[8..12].try_into().unwrap()),
        seq ^ 0xa5a5_a5a5
    );
    assert_eq!(
        data.len(),
        packet_len(src, dst, seq, max),
        "length of {src}->{dst} #{seq}"
    );
    for (i, &b) in data[12..].iter().enumerate() {
        assert_eq!(
            b,
            (seq as usize).wrapping_mul(31).wrapping_add(i) as u8,
            "content of {src}->{dst} #{seq} at {i}"
        );
    }
    (src, seq)
}

struct Storage {
    hold: Vec<u8>,
    buffers: Vec<u8>,
    peers: Vec<PeerSlot<usize, W>>,
}

impl Storage {
    fn new(n: usize) -> Self {
        Storage {
            hold: vec![0u8; (HELD + 1) * MTU],
            buffers: vec![0u8; buffer_len(MTU, MTU, n * W + 1)],
            peers: vec![PeerSlot::new(); n],
        }
    }
}

fn report(name: &str, i: usize, s: &Stats, f: &FaultStats) {
    eprintln!(
        "{name} node {i}: packets sent {} delivered {} | frames sent {} retransmitted {} \
         acked {} | pure acks {} | duplicates {} | reply-cache hits {} | faults: dropped {} \
         duplicated {} reordered {}",
        s.packets_sent,
        s.packets_delivered,
        s.frames_sent,
        s.retransmissions,
        s.frames_acked,
        s.acks_sent,
        s.duplicates,
        s.reply_cache_hits,
        f.dropped,
        f.duplicated,
        f.reordered
    );
}

/// Every endpoint sends `per_node` packets spread over all other endpoints.
fn all_to_all<const N: usize>(seed: u64, per_node: u32) {
    let mut net = vec![0u8; N * 128 * (MTU + 8)];
    let hub = LoopbackHub::<N>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut storage: Vec<Storage> = (0..N).map(|_| Storage::new(N)).collect();
    let mut nodes: Vec<Node<'_, '_, '_, N>> = storage
        .iter_mut()
        .enumerate()
        .map(|(i, s)| {
            let ep = hub.endpoint(i).unwrap();
            let inj = FaultInjector::new(ep, faults(seed + i as u64), &mut s.hold).unwrap();
            // Epochs whose low bits start the sequence numbers just before the wrap.
            let epoch = ((i as u64 + 1) << 32) | 0xffff_ff00;
            Reliable::new(inj, config(epoch), &mut s.peers, &mut s.buffers).unwrap()
        })
        .collect();
    let max = nodes[0].capabilities().mtu;

    // Next sequence number per (src, dst), and what each receiver has seen per source.
    let mut next_seq = vec![vec![0u32; N]; N];
    let mut sent = vec![0u32; N];
    let mut seen: Vec<Vec<Vec<bool>>> = vec![vec![Vec::new(); N]; N];
    let mut delivered = 0u64;
    let total = u64::from(per_node) * N as u64;
    let mut rng = seed;
    let mut now = 0u64;
    let mut rounds = 0u64;
    loop {
        rounds += 1;
        now += TICK_NS;
        assert!(
            rounds < 2_000_000,
            "no progress: delivered {delivered} of {total}, sent {sent:?}"
        );
        for me in 0..N {
            let node = &mut nodes[me];
            node.poll(now).unwrap();
            // A burst of up to 8 packets to random peers, until back-pressure.
            for _ in 0..8 {
                if sent[me] == per_node {
                    break;
                }
                rng = mix(rng);
                let dst = (me + 1 + (rng % (N as u64 - 1)) as usize) % N;
                let seq = next_seq[me][dst];
                let len = packet_len(me, dst, seq, max);
                match node.send(dst, len, |b| fill_packet(b, me, dst, seq)) {
                    Ok(()) => {
                        next_seq[me][dst] += 1;
                        sent[me] += 1;
                    }
                    Err(TransportError::WouldBlock) => break,
                    Err(e) => panic!("node {me} send to {dst} failed: {e}"),
                }
            }
            node.flush().unwrap();
            while let Some((src, seq)) = node
                .recv(|from, data| check_packet(me, from, data, max))
                .unwrap()
            {
                let log = &mut seen[me][src];
                if log.len() <= seq as usize {
                    log.resize(seq as usize + 1, false);
                }
                assert!(!log[seq as usize], "{src}->{me} #{seq} delivered twice");
                log[seq as usize] = true;
                delivered += 1;
            }
        }
        let all_acked = nodes
            .iter()
            .enumerate()
            .all(|(i, n)| (0..N).all(|p| p == i || n.in_flight(p) == 0));
        if delivered == total && all_acked {
            break;
        }
    }
    for (dst, per_src) in seen.iter().enumerate() {
        for (src, log) in per_src.iter().enumerate() {
            let want = next_seq[src][dst] as usize;
            assert_eq!(log.len(), want, "{src}->{dst}: highest seq");
            assert!(log.iter().all(|&b| b), "{src}->{dst}: every packet arrived");
        }
    }
    let mut retransmissions = 0;
    let mut duplicates = 0;
    for (i, node) in nodes.iter_mut().enumerate() {
        let s = node.stats();
        report(&format!("all_to_all<{N}>"), i, &s, &node.inner().stats());
        assert_eq!(node.next_event(), None, "no peer failed or restarted");
        assert_eq!(s.packets_delivered, seen[i].iter().flatten().count() as u64);
        retransmissions += s.retransmissions;
        duplicates += s.duplicates;
    }
    eprintln!(
        "all_to_all<{N}>: {total} packets in {rounds} rounds ({} ms simulated), \
         {retransmissions} retransmissions, {duplicates} duplicate frames suppressed",
        now / 1_000_000
    );
    assert!(retransmissions > 0 && duplicates > 0, "the faults did bite");
}

#[test]
fn four_endpoints_exchange_100k_packets_exactly_once() {
    all_to_all::<4>(0x5eed, 25_000);
}

#[test]
fn two_endpoints_exchange_100k_packets_exactly_once() {
    all_to_all::<2>(0xbeef, 50_000);
}

/// Endpoint 0 is a service; the others send requests and wait for replies. Each request must
/// be executed exactly once and each reply must arrive exactly once, while the network loses
/// and repeats frames; the reply cache answers repeated requests.
#[test]
fn request_reply_service_executes_each_request_once() {
    const N: usize = 4;
    const REQUESTS: u32 = 8_000;
    const OUTSTANDING: u32 = 48;
    let mut net = vec![0u8; N * 128 * (MTU + 8)];
    let hub = LoopbackHub::<N>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
    let mut storage: Vec<Storage> = (0..N).map(|_| Storage::new(N)).collect();
    let mut nodes: Vec<Node<'_, '_, '_, N>> = storage
        .iter_mut()
        .enumerate()
        .map(|(i, s)| {
            let ep = hub.endpoint(i).unwrap();
            let inj = FaultInjector::new(ep, faults(77 + i as u64), &mut s.hold).unwrap();
            Reliable::new(inj, config(1_000 + i as u64), &mut s.peers, &mut s.buffers).unwrap()
        })
        .collect();

    // Request: [id u32][operand u32]; reply: [id u32][operand * 3 u32].
    let mut executed = vec![vec![0u8; REQUESTS as usize]; N];
    let mut replied = vec![vec![false; REQUESTS as usize]; N];
    let mut issued = [0u32; N];
    let mut answered = [0u32; N];
    let mut pending_replies: Vec<(usize, u32, u32)> = Vec::new();
    let mut now = 0u64;
    let mut rounds = 0u64;
    let operand =
        |client: usize, id: u32| (mix((client as u64) << 32 | u64::from(id)) >> 40) as u32;
    loop {
        let settled = (1..N).all(|c| nodes[c].in_flight(0) == 0 && nodes[0].in_flight(c) == 0);
        if settled && answered[1..].iter().all(|&a| a == REQUESTS) {
            break;
        }
        rounds += 1;
        now += TICK_NS;
        assert!(rounds < 1_000_000, "no progress: answered {answered:?}");

        // The service: execute each request, answer on the same layer.
        let service = &mut nodes[0];
        service.poll(now).unwrap();
        // Replies refused earlier by back-pressure go first.
        pending_replies.retain(|&(client, id, value)| {
            service
                .send(client, 8, |b| {
                    b[..4].copy_from_slice(&id.to_le_bytes());
                    b[4..].copy_from_slice(&value.to_le_bytes());
                })
                .is_err()
        });
        while let Some((client, id, x)) = service
            .recv(|from, d| {
                let id = u32::from_le_bytes(d[..4].try_into().unwrap());
                let x = u32::from_le_bytes(d[4..8].try_into().unwrap());
                (from, id, x)
            })
            .unwrap()
        {
            assert_eq!(x, operand(client, id));
            executed[client][id as usize] += 1;
            assert_eq!(
                executed[client][id as usize], 1,
                "request {client}/{id} executed twice"
            );
            let value = x.wrapping_mul(3);
            let reply = service.send(client, 8, |b| {
                b[..4].copy_from_slice(&id.to_le_bytes());
                b[4..].copy_from_slice(&value.to_le_bytes());
            });
            match reply {
                Ok(()) => {}
                Err(TransportError::WouldBlock) => pending_replies.push((client, id, value)),
                Err(e) => panic!("reply to {client} failed: {e}"),
            }
        }
        service.flush().unwrap();

        // The clients.
        for c in 1..N {
            let node = &mut nodes[c];
            node.poll(now).unwrap();
            while issued[c] < REQUESTS && issued[c] - answered[c] < OUTSTANDING {
                let id = issued[c];
                let x = operand(c, id);
                let r = node.send(0, 8, |b| {
                    b[..4].copy_from_slice(&id.to_le_bytes());
                    b[4..].copy_from_slice(&x.to_le_bytes());
                });
                match r {
                    Ok(()) => issued[c] += 1,
                    Err(TransportError::WouldBlock) => break,
                    Err(e) => panic!("client {c} request failed: {e}"),
                }
            }
            node.flush().unwrap();
            while let Some((id, value)) = node
                .recv(|from, d| {
                    assert_eq!(from, 0);
                    (
                        u32::from_le_bytes(d[..4].try_into().unwrap()),
                        u32::from_le_bytes(d[4..8].try_into().unwrap()),
                    )
                })
                .unwrap()
            {
                assert!(!replied[c][id as usize], "reply {c}/{id} arrived twice");
                assert_eq!(value, operand(c, id).wrapping_mul(3));
                replied[c][id as usize] = true;
                answered[c] += 1;
            }
        }
    }
    for c in 1..N {
        assert!(
            executed[c].iter().all(|&n| n == 1),
            "client {c}: all executed once"
        );
        assert!(replied[c].iter().all(|&r| r), "client {c}: all replies");
    }
    let mut hits = 0;
    for (i, node) in nodes.iter().enumerate() {
        let s = node.stats();
        report("request_reply", i, &s, &node.inner().stats());
        hits += s.reply_cache_hits;
    }
    eprintln!(
        "request_reply: {} requests in {rounds} rounds ({} ms simulated), {hits} reply-cache hits",
        REQUESTS * (N as u32 - 1),
        now / 1_000_000
    );
    assert!(hits > 0, "lost replies were resent from the reply cache");
}
