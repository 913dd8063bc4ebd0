//! Put-with-signal in one request over a lossy link: a client engine over the reliability
//! layer on UDP sends writes with an attached signal through the lossy relay of
//! [`super::lossy_soak`] (10% of the datagrams dropped, 5% duplicated, 5% held back for up
//! to 2 ms, each way) to a real atomic service; an observer thread that maps the target
//! PE's heap, as the PE does, waits for each signal value and then checks every byte of
//! the data, last byte first (the service writes forwards, so a signal applied before the
//! data shows as a stale tail). SET and ADD; 8 bytes, one byte more than a write with a
//! signal can carry inline (two fragments), and 1 MiB (18 fragments over the default
//! 61440-byte datagrams, the signal on the last, sent once the others are acknowledged).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gsas_control::proto::SEG_HEAP;
use gsas_core::client::{Client, Completion};
use gsas_core::reliable::{Config, HashIndex, PeerSlot, Reliable, buffer_len};
use gsas_core::transport::Transport;
use gsas_core::wire::{GlobalAddr, HEADER_LEN, SIGNAL_LEN, SenderId, Signal, SignalOp};
use gsas_transport::shm::Segment;
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};

use super::lossy_soak::{LossyRelay, service_with_heap};

const T: Duration = Duration::from_secs(30);
const KEY: u64 = 0x5160_0001;
/// The data area is heap bytes `0..DATA_MAX`, the signal words follow.
const DATA_MAX: usize = 1 << 20;
const SET_WORD: u64 = DATA_MAX as u64 + 4096;
const ADD_WORD: u64 = SET_WORD + 64;
const HEAP: u64 = 2 << 20;

/// Byte `i` of round `r`: never 0 and different from rounds `r - 1` and `r + 1`.
fn pat(r: u64, i: usize) -> u8 {
    ((r * 7 + i as u64 * 13) % 255 + 1) as u8
}

/// One thing for the observer to see: `len` bytes of round `round` at offset 0, announced
/// by the word at `word` reaching `value`.
#[derive(Clone, Copy, Debug)]
struct Expect {
    round: u64,
    len: usize,
    word: u64,
    value: u64,
}

/// Waits for each announced signal value, then checks the data; sends one verdict each.
fn observe(heap: &Segment, jobs: mpsc::Receiver<Expect>, verdicts: mpsc::Sender<String>) {
    for e in jobs {
        let word = heap
            .atomic_u64(e.word as usize)
            .expect("signal word in the heap");
        let t0 = Instant::now();
        let mut seen = word.load(Ordering::Acquire);
        while seen != e.value {
            // Values only grow (SET: the round; ADD: the running sum): more is an update
            // applied twice or out of turn.
            if seen > e.value {
                let _ = verdicts.send(format!("{e:?}: signal overshot to {seen}"));
                return;
            }
            if t0.elapsed() > T {
                let _ = verdicts.send(format!("{e:?}: signal is {seen} after {T:?}"));
                return;
            }
            // A tight poll: a signal applied before the data shows only for as long as
            // the service takes to copy the data.
            std::hint::spin_loop();
            seen = word.load(Ordering::Acquire);
        }
        // The signal is there: every byte must be too. Last byte first.
        let mut data = vec![0u8; e.len];
        let mut verdict = String::new();
        for i in (0..e.len).rev() {
            heap.read(i, &mut data[i..=i]).unwrap();
            if data[i] != pat(e.round, i) {
                verdict = format!(
                    "{e:?}: byte {i} is {} when the signal is seen, expected {}",
                    data[i],
                    pat(e.round, i)
                );
                break;
            }
        }
        if verdicts.send(verdict).is_err() {
            return;
        }
    }
}

#[test]
fn put_signal_over_a_lossy_relay() {
    // Rounds per size and operation: the small writes are cheap, and every round is a
    // chance to catch a signal applied before the data.
    let (small_rounds, big_rounds) = if gsas_tests::attack::full_length(
        "put_signal_over_a_lossy_relay",
        "4 rounds per small case and 2 per 1 MiB case instead of 40 and 6",
    ) {
        (40, 6)
    } else {
        (4, 2)
    };
    // The service, with PE 0 of the job and its heap, mapped here as the PE maps it.
    let bind: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (s, mut pe, fd) = service_with_heap(bind, "psig", KEY, HEAP);
    let heap = Arc::new(Segment::map(fd, "heap (observer)").unwrap());

    let relay = LossyRelay::start(s.udp_addr(), 0x5160_0001);

    // The observer.
    let (job_tx, job_rx) = mpsc::channel::<Expect>();
    let (verdict_tx, verdict_rx) = mpsc::channel::<String>();
    let observer = {
        let heap = Arc::clone(&heap);
        std::thread::spawn(move || observe(&heap, job_rx, verdict_tx))
    };

    // The client.
    let udp = UdpTransport::bind(bind, UdpConfig::default()).unwrap();
    let mtu = udp.capabilities().mtu;
    let mut peers: Vec<PeerSlot<UdpPeer, 32>> = (0..4).map(|_| PeerSlot::new()).collect();
    let mut buf = vec![0u8; buffer_len(mtu, mtu, 64)];
    let mut config = Config::new(gsas_service::reliable_config(T).epoch);
    config.deadline_ns = 30_000_000_000;
    let mut rel: Reliable<'_, _, 32, HashIndex<UdpPeer, 8>> =
        Reliable::with_index(udp, config, &mut peers, &mut buf, HashIndex::new()).unwrap();
    let caps = rel.capabilities();
    let above_inline = caps.max_inline.min(caps.mtu) - HEADER_LEN - SIGNAL_LEN + 1;
    let mut client: Client<UdpPeer, 8, 1> = Client::new(SenderId::new(9).unwrap());
    let svc = UdpPeer {
        addr: relay.to,
        key: KEY,
    };
    let t0 = Instant::now();

    let mut round = 0u64;
    let mut added = 0u64;
    for len in [8, above_inline, DATA_MAX] {
        for op in [SignalOp::Set, SignalOp::Add] {
            let rounds = if len == DATA_MAX {
                big_rounds
            } else {
                small_rounds
            };
            for _ in 0..rounds {
                round += 1;
                let data: Vec<u8> = (0..len).map(|i| pat(round, i)).collect();
                let (word, value) = match op {
                    SignalOp::Set => (SET_WORD, round),
                    SignalOp::Add => {
                        added += round;
                        (ADD_WORD, added)
                    }
                };
                let e = Expect {
                    round,
                    len,
                    word,
                    value,
                };
                job_tx.send(e).unwrap();
                let signal = Signal {
                    addr: GlobalAddr::new(0, SEG_HEAP, word).unwrap(),
                    op,
                    value: round,
                };
                let addr = GlobalAddr::new(0, SEG_HEAP, 0).unwrap();
                let mut issued = client
                    .write_signal(&mut rel, svc, 0, round, addr, &data, signal)
                    .unwrap();
                let until = Instant::now() + T;
                let mut done = None;
                while done.is_none() {
                    assert!(Instant::now() < until, "{e:?}: not acknowledged in {T:?}");
                    rel.set_now(t0.elapsed().as_nanos() as u64);
                    if !issued.all_sent {
                        issued = client.resume(&mut rel, issued.handle, &data).unwrap();
                    }
                    rel.flush().unwrap();
                    rel.poll(t0.elapsed().as_nanos() as u64).unwrap();
                    while rel
                        .recv(|_, bytes| {
                            client.handle_reply(bytes, |c| {
                                if let Completion::Done { result, .. } = c {
                                    done = Some(result);
                                }
                            });
                        })
                        .unwrap()
                        .is_some()
                    {}
                    if let Some(ev) = rel.next_event() {
                        panic!("{e:?}: the service failed: {ev:?}");
                    }
                    // Leave the CPU to the service and the observer (2 cores).
                    std::thread::sleep(Duration::from_micros(20));
                }
                assert_eq!(done, Some(Ok(None)), "{e:?}");
                let verdict = verdict_rx.recv_timeout(T).expect("observer verdict");
                assert!(verdict.is_empty(), "{verdict}");
            }
        }
    }
    drop(job_tx);
    observer.join().unwrap();
    let relay = relay.finish();
    assert!(relay.dropped > 0 && relay.duplicated > 0, "{relay:?}");
    eprintln!(
        "put_signal_over_a_lossy_relay: {round} writes with signal (8, {above_inline} and {DATA_MAX} bytes), observed in order in {:.1} s; relay {relay:?}",
        t0.elapsed().as_secs_f64()
    );
    pe.leave(0, 1).unwrap();
    s.stop().unwrap();
}
