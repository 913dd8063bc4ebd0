//! The end of a job at the atomic service, one datagram at a time (issue 25, item 5): an
//! in-process service with PE 0 of a two-PE job joined through its control socket (its
//! heap mapped here, as the PE maps it), and PE 1 played by a bare requester on UDP
//! (gsas-core's client engine over the reliability layer, as a PE has) whose transport
//! drops exactly the datagrams a test says.
//!
//! * `a_reply_lost_while_the_job_ends_is_sent_again`: the requester's atomic add (as the
//!   final barrier's) is executed, its reply lost; PE 0 sees the add and leaves, so the job
//!   ends on the service's node; the requester's retransmission must get the reply, not a
//!   refusal that fails its `finalize`.
//! * `a_request_that_arrives_after_the_job_ended_is_refused_as_such`: a request the service
//!   never saw before the job ended is refused with "the job has ended there" (a PE's
//!   `finalize` may count a non-fetching one as complete), never executed; so is one of a
//!   requester the service never heard from.
//! * `ended_jobs_are_kept_bounded_and_give_way`: the state kept for ended jobs gives its
//!   peer slots to a new job's peers when the table is full, at most 64 jobs are kept, and
//!   all of it is freed after the reliability deadline.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gsas_control::proto::{JoinInfo, SEG_HEAP};
use gsas_control::{ControlClient, StatsReport};
use gsas_core::client::{Client, Completion, OpError};
use gsas_core::reliable::{
    Config, HashIndex, PeerEvent, PeerSlot, Refusal, RefusalReason, Reliable, buffer_len,
};
use gsas_core::transport::{Capabilities, Transport, TransportError};
use gsas_core::wire::{AtomicDesc, AtomicOp, AtomicType, GlobalAddr, SenderId};
use gsas_service::{Service, ServiceConfig, ServiceThread};
use gsas_transport::shm::Segment;
use gsas_transport::udp::{UdpConfig, UdpPeer, UdpTransport};

/// Bound of every wait (a loaded machine is slow; nothing here takes long otherwise).
const LIMIT: Duration = Duration::from_secs(60);
/// The service's reliability deadline: how long an ended job's peers linger.
const DEADLINE: Duration = Duration::from_secs(2);
const KEY: u64 = 0x7157_0001;

/// A transport that drops what it is told to, in either direction.
struct Gate<T> {
    inner: T,
    drop_in: bool,
    drop_out: bool,
    dropped_in: u64,
    dropped_out: u64,
}

impl<T: Transport> Transport for Gate<T> {
    type Peer = T::Peer;

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn send<R, F>(&mut self, peer: T::Peer, len: usize, fill: F) -> Result<R, TransportError>
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if self.drop_out {
            self.dropped_out += 1;
            return Ok(fill(&mut vec![0u8; len]));
        }
        self.inner.send(peer, len, fill)
    }

    fn recv<R, F>(&mut self, f: F) -> Result<Option<R>, TransportError>
    where
        F: FnOnce(T::Peer, &[u8]) -> R,
    {
        if !self.drop_in {
            return self.inner.recv(f);
        }
        while self.inner.recv(|_, _| ())?.is_some() {
            self.dropped_in += 1;
        }
        Ok(None)
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        self.inner.flush()
    }

    fn poll(&mut self, now_ns: u64) -> Result<(), TransportError> {
        self.inner.poll(now_ns)
    }
}

type Layer<'a> = Reliable<'a, Gate<UdpTransport>, 32, HashIndex<UdpPeer, 8>>;

/// PE 1 of the job, from a socket of its own.
struct Requester<'a> {
    rel: Layer<'a>,
    client: Client<UdpPeer, 8, 1>,
    to: UdpPeer,
    t0: Instant,
    events: Vec<PeerEvent<UdpPeer>>,
    /// Completed operations: tag and result.
    done: Vec<(u64, Result<Option<u64>, OpError>)>,
}

/// A requester's peer table and buffers.
struct Storage {
    peers: Vec<PeerSlot<UdpPeer, 32>>,
    buf: Vec<u8>,
}

fn storage() -> Storage {
    let mtu = UdpConfig::default().mtu;
    Storage {
        peers: (0..4).map(|_| PeerSlot::new()).collect(),
        buf: vec![0u8; buffer_len(mtu, mtu, 64)],
    }
}

/// A new epoch for every requester: a socket may get the port of a closed one.
fn fresh_epoch() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    gsas_service::reliable_config(LIMIT).epoch
        + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl<'a> Requester<'a> {
    fn new(st: &'a mut Storage, service: &ServiceThread, key: u64) -> Requester<'a> {
        let udp = UdpTransport::bind("127.0.0.1:0".parse().unwrap(), UdpConfig::default()).unwrap();
        let gate = Gate {
            inner: udp,
            drop_in: false,
            drop_out: false,
            dropped_in: 0,
            dropped_out: 0,
        };
        let mut config = Config::new(fresh_epoch());
        config.min_rto_ns = 20_000_000;
        config.initial_rto_ns = 20_000_000;
        config.deadline_ns = LIMIT.as_nanos() as u64;
        let rel = Reliable::with_index(gate, config, &mut st.peers, &mut st.buf, HashIndex::new())
            .unwrap();
        Requester {
            rel,
            client: Client::new(SenderId::new(1).unwrap()),
            to: UdpPeer {
                addr: service.udp_addr(),
                key,
            },
            t0: Instant::now(),
            events: Vec::new(),
            done: Vec::new(),
        }
    }

    fn gate(&mut self) -> &mut Gate<UdpTransport> {
        self.rel.inner_mut()
    }

    /// Starts an atomic add of 1 to the word at `offset` of PE 0's heap (the final
    /// barrier's kind of operation).
    fn add(&mut self, tag: u64, offset: u64) {
        let desc = AtomicDesc::new(AtomicOp::Add, AtomicType::U64).unwrap();
        let addr = GlobalAddr::new(0, SEG_HEAP, offset).unwrap();
        self.rel.set_now(self.t0.elapsed().as_nanos() as u64);
        self.client
            .atomic(&mut self.rel, self.to, 0, tag, addr, desc, 1, 0)
            .unwrap();
        self.rel.flush().unwrap();
    }

    /// One round of progress: timers, replies, events (which fail the peer's operations).
    fn progress(&mut self) {
        let Requester {
            rel,
            client,
            t0,
            events,
            done,
            ..
        } = self;
        rel.poll(t0.elapsed().as_nanos() as u64).unwrap();
        while rel
            .recv(|_, bytes| {
                client.handle_reply(bytes, |c| {
                    if let Completion::Done { tag, result, .. } = c {
                        done.push((tag, result));
                    }
                });
            })
            .unwrap()
            .is_some()
        {}
        while let Some(ev) = rel.next_event() {
            events.push(ev);
            let (PeerEvent::Unreachable(p) | PeerEvent::Restarted(p) | PeerEvent::Refused(p, _)) =
                ev;
            client.fail_peer(p, |c| {
                if let Completion::Done { tag, result, .. } = c {
                    done.push((tag, result));
                }
            });
        }
        rel.flush().unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }

    /// Drives progress until operation `tag` completes; its result.
    fn wait(&mut self, tag: u64) -> Result<Option<u64>, OpError> {
        let t0 = Instant::now();
        loop {
            if let Some(&(_, r)) = self.done.iter().find(|(t, _)| *t == tag) {
                return r;
            }
            assert!(
                t0.elapsed() < LIMIT,
                "operation {tag} not completed in {LIMIT:?}; events {:?}",
                self.events
            );
            self.progress();
        }
    }

    /// Drives progress until `cond` holds.
    fn progress_until(&mut self, what: &str, mut cond: impl FnMut(&mut Self) -> bool) {
        let t0 = Instant::now();
        while !cond(self) {
            assert!(t0.elapsed() < LIMIT, "{what}: not within {LIMIT:?}");
            self.progress();
        }
    }
}

fn socket_path(name: &str) -> PathBuf {
    gsas_sys::socket::runtime_dir(None)
        .unwrap()
        .join(format!("job-end-{name}-{}.sock", std::process::id()))
}

/// A service (deadline [`DEADLINE`], `max_peers` slots) with PE 0 of job `key` (2 PEs)
/// joined, its heap mapped.
fn service_with_pe0(
    name: &str,
    key: u64,
    max_peers: usize,
) -> (ServiceThread, ControlClient, Segment) {
    let mut cfg = ServiceConfig::new(0, "127.0.0.1:0".parse().unwrap(), socket_path(name));
    cfg.deadline = DEADLINE;
    cfg.max_peers = max_peers;
    let s = Service::bind(cfg).unwrap().spawn().unwrap();
    let (pe, heap) = join_pe0(&s, key);
    (s, pe, heap)
}

/// PE 0 of a two-PE job `key` joins `s` and creates its heap.
fn join_pe0(s: &ServiceThread, key: u64) -> (ControlClient, Segment) {
    let mut pe = ControlClient::connect(s.socket_path(), LIMIT).unwrap();
    let info = JoinInfo {
        npes: 2,
        node: 0,
        flags: 0,
    };
    pe.join(0, key & 0xffff, key, info).unwrap();
    let (_, fd) = pe.create_segment(0, SEG_HEAP, 4096).unwrap();
    (pe, Segment::map(fd, "heap of PE 0").unwrap())
}

fn stats(s: &ServiceThread) -> StatsReport {
    gsas_control::query_stats(s.socket_path(), LIMIT).unwrap()
}

fn word(heap: &Segment) -> u64 {
    heap.atomic_u64(0)
        .unwrap()
        .load(std::sync::atomic::Ordering::Acquire)
}

#[test]
fn a_reply_lost_while_the_job_ends_is_sent_again() {
    let (s, mut pe0, heap) = service_with_pe0("lost-reply", KEY, 1024);
    let mut st = storage();
    let mut pe1 = Requester::new(&mut st, &s, KEY);
    // Every datagram of the service to PE 1 is lost from now on: the add's reply, and the
    // replies the service resends when the request comes again.
    pe1.gate().drop_in = true;
    pe1.add(1, 0);
    // PE 0 sees the add (it would now pass the final barrier) and leaves: the job ends on
    // this node while the add's reply is still missing at PE 1.
    pe1.progress_until("the add executed", |_| word(&heap) == 1);
    pe1.progress_until("the reply lost", |r| r.gate().dropped_in > 0);
    pe0.leave(0, KEY & 0xffff).unwrap();
    let after_end = stats(&s);
    assert_eq!(after_end.get("jobs.ended"), Some(1), "{after_end}");
    // The network heals; PE 1 retransmits the request.
    pe1.gate().drop_in = false;
    let result = pe1.wait(1);
    assert_eq!(
        result,
        Ok(None),
        "the add of PE 1 failed after it was executed; events {:?}; service: {}",
        pe1.events,
        stats(&s)
    );
    assert!(pe1.events.is_empty(), "{:?}", pe1.events);
    assert_eq!(word(&heap), 1, "executed once");
    let st = stats(&s);
    assert_eq!(st.get("reliable.refused_unknown_job"), Some(0), "{st}");
    assert_eq!(st.get("reliable.closed_refused"), Some(0), "{st}");
    assert_eq!(st.get("requests.atomic"), Some(1), "{st}");
    s.stop().unwrap();
}

#[test]
fn a_request_that_arrives_after_the_job_ended_is_refused_as_such() {
    let key = KEY + 1;
    let (s, mut pe0, heap) = service_with_pe0("late-request", key, 1024);
    let mut st = storage();
    let mut pe1 = Requester::new(&mut st, &s, key);
    pe1.add(1, 0);
    assert_eq!(pe1.wait(1), Ok(None));
    // The second add is lost on its way until the job has ended.
    pe1.gate().drop_out = true;
    pe1.add(2, 0);
    pe1.progress_until("the request lost", |r| r.gate().dropped_out > 0);
    pe0.leave(0, key & 0xffff).unwrap();
    pe1.gate().drop_out = false;
    assert_eq!(pe1.wait(2), Err(OpError::Aborted));
    let ended = Refusal {
        reason: RefusalReason::JobEnded,
        in_use: 0,
        limit: 0,
    };
    assert_eq!(pe1.events, vec![PeerEvent::Refused(pe1.to, ended)]);
    assert_eq!(word(&heap), 1, "the late add was never executed");
    let st1 = stats(&s);
    assert!(st1.get("reliable.closed_refused").unwrap() >= 1, "{st1}");

    // A requester the service never heard from: refused by name too.
    let mut st2 = storage();
    let mut stranger = Requester::new(&mut st2, &s, key);
    stranger.add(7, 8);
    assert_eq!(stranger.wait(7), Err(OpError::Aborted));
    assert_eq!(
        stranger.events,
        vec![PeerEvent::Refused(stranger.to, ended)]
    );
    let st2 = stats(&s);
    assert!(st2.get("reliable.refused_job_ended").unwrap() >= 1, "{st2}");
    assert_eq!(st2.get("reliable.refused_unknown_job"), Some(0), "{st2}");
    assert_eq!(st2.get("requests.atomic"), Some(1), "{st2}");
    s.stop().unwrap();
}

#[test]
fn a_request_of_a_reclaimed_job_is_refused_by_name_at_once() {
    let key = KEY + 3;
    let (s, pe0, heap) = service_with_pe0("reclaimed", key, 1024);
    let mut st = storage();
    let mut pe1 = Requester::new(&mut st, &s, key);
    pe1.add(1, 0);
    assert_eq!(pe1.wait(1), Ok(None));
    // PE 0 dies: its control connection closes without a Leave, the job is reclaimed.
    drop(pe0);
    let t0 = Instant::now();
    while stats(&s).get("jobs.reclaimed") != Some(1) {
        assert!(t0.elapsed() < LIMIT, "not reclaimed: {}", stats(&s));
        std::thread::sleep(Duration::from_millis(5));
    }
    // The other PE's next request is refused naming the reclaim (its operation fails at
    // once), not refused as a stranger's (nor challenged, where FORK is served).
    let mut st2 = storage();
    let mut late = Requester::new(&mut st2, &s, key);
    late.add(2, 0);
    assert_eq!(late.wait(2), Err(OpError::Aborted));
    let reclaimed = Refusal {
        reason: RefusalReason::JobReclaimed,
        in_use: 0,
        limit: 0,
    };
    assert_eq!(late.events, vec![PeerEvent::Refused(late.to, reclaimed)]);
    assert!(reclaimed.to_string().contains("reclaimed"), "{reclaimed}");
    assert_eq!(word(&heap), 1, "the late add was never executed");
    let st = stats(&s);
    assert!(
        st.get("reliable.refused_job_reclaimed").unwrap() >= 1,
        "{st}"
    );
    assert_eq!(st.get("reliable.refused_unknown_job"), Some(0), "{st}");
    assert_eq!(st.get("reliable.refused_job_ended"), Some(0), "{st}");
    s.stop().unwrap();
}

#[test]
fn ended_jobs_are_kept_bounded_and_give_way() {
    // A table of 4 peer slots, filled by requesters of a job that then ends.
    let key = KEY + 2;
    let (s, mut pe0, _heap) = service_with_pe0("bounded", key, 4);
    let mut storages: Vec<Storage> = (0..5).map(|_| storage()).collect();
    let mut iter = storages.iter_mut();
    let mut first: Vec<Requester<'_>> = (0..4)
        .map(|_| Requester::new(iter.next().unwrap(), &s, key))
        .collect();
    for (i, r) in first.iter_mut().enumerate() {
        r.add(1, 8 * i as u64);
        assert_eq!(r.wait(1), Ok(None));
    }
    pe0.leave(0, key & 0xffff).unwrap();
    let st = stats(&s);
    assert_eq!(st.get("peers.known"), Some(4), "{st}");
    assert_eq!(st.get("peers.lingering"), Some(4), "{st}");
    assert_eq!(st.get("jobs.lingering"), Some(1), "{st}");
    // A new job's peer gets a slot: a lingering peer gives way.
    let key2 = key + 1;
    let (mut pe0b, heap2) = join_pe0(&s, key2);
    let mut newcomer = Requester::new(iter.next().unwrap(), &s, key2);
    newcomer.add(1, 0);
    assert_eq!(newcomer.wait(1), Ok(None), "{:?}", newcomer.events);
    assert_eq!(word(&heap2), 1);
    let st = stats(&s);
    assert_eq!(st.get("peers.lingering"), Some(3), "{st}");
    assert_eq!(st.get("reliable.refused_table_full"), Some(0), "{st}");
    pe0b.leave(0, key2 & 0xffff).unwrap();
    // At most 64 ended jobs are kept.
    for k in 0..70u64 {
        let (mut pe, _) = join_pe0(&s, key + 100 + k);
        pe.leave(0, (key + 100 + k) & 0xffff).unwrap();
    }
    let st = stats(&s);
    assert_eq!(st.get("jobs.lingering"), Some(64), "{st}");
    // After the deadline everything of the ended jobs is freed.
    let t0 = Instant::now();
    loop {
        let st = stats(&s);
        if st.get("jobs.lingering") == Some(0) && st.get("peers.known") == Some(0) {
            break;
        }
        assert!(t0.elapsed() < LIMIT, "still kept after {LIMIT:?}: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(first);
    s.stop().unwrap();
}
