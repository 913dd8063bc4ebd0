//! The verbs driver on the software verbs device, between processes: each test's roles are
//! the test binary started again, each an emulated node (`verbs_emu::roles`).

use std::time::Duration;

use verbs::mesh::Exchange;
use verbs::{Address, Endpoint, Error, Nic, Op, Region, RemoteKey, Selection, Timing};
use verbs_emu::roles::{self, Role, barrier, fetch, process_gone, publish, role};

const RUN: Duration = Duration::from_secs(120);
/// 1.07 s per attempt, 8 attempts: a machine loaded by a parallel test run does not fail
/// a connection (the peer-death test sets its own).
const TIMING: Timing = Timing {
    timeout: 18,
    retry_cnt: 7,
    rnr_retry: 7,
};
/// How long a test waits for a peer process to exit.
const DEADLINE: Duration = Duration::from_secs(30);

fn run(test: &str, roles: Vec<Role>) {
    roles::run_roles(
        || gsas_tests::launch::self_test(test).expect("the test binary"),
        roles,
        RUN,
    );
}

fn unexpected(r: &str) -> ! {
    panic!("unknown role {r}")
}

/// One side of a two-node run: the device, a registered buffer and an endpoint connected
/// to the other side, whose buffer key it returns.
struct Side {
    ep: Endpoint,
    peer_key: RemoteKey,
    region: Region,
    buf: Vec<u64>,
    _nic: Nic,
}

fn side(me: &str, other: &str, bytes: usize, timing: Timing) -> Side {
    let nic = Nic::open(&Selection::default()).expect("open the device");
    let mut buf = vec![0u64; bytes / 8];
    // SAFETY: `buf` lives in the returned Side with the region (dropped after it: `region`
    // is declared before `buf`, and the Vec's heap block does not move).
    let region = unsafe { nic.register(buf.as_mut_ptr().cast(), bytes) }.expect("register");
    let mut ep = nic
        .endpoint(&format!("node {other}"), 64)
        .expect("endpoint");
    publish(
        &format!("{me}.rec"),
        &format!("{} {}", ep.address().encode(), region.remote_key().encode()),
    );
    let rec = fetch(&format!("{other}.rec"));
    let (addr, key) = rec.split_once(' ').expect("record");
    let addr = Address::decode(addr).expect("address");
    ep.connect(&addr, timing).expect("connect");
    Side {
        ep,
        peer_key: RemoteKey::decode(key).expect("key"),
        region,
        buf,
        _nic: nic,
    }
}

fn bytes(buf: &[u64]) -> &[u8] {
    // SAFETY: the same memory viewed as bytes.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), buf.len() * 8) }
}

const BYTES: usize = 1 << 20;
const SMALL_PUTS: u64 = 2000;
const BIG: usize = 300_000;
const ADDS: u64 = 200;

/// Small puts beyond the send queue's depth (back-pressure), a large put from registered
/// memory, a get, fetch-adds and compare-swaps from both sides, and the refusal of an
/// unregistered large put.
#[test]
fn puts_gets_and_atomics_between_two_nodes() {
    match role().as_deref() {
        None => run(
            "puts_gets_and_atomics_between_two_nodes",
            vec![Role::new("a", 1), Role::new("b", 2)],
        ),
        Some(r @ ("a" | "b")) => rma_side(r),
        Some(r) => unexpected(r),
    }
}

fn rma_side(me: &str) {
    let other = if me == "a" { "b" } else { "a" };
    let mut s = side(me, other, BYTES, TIMING);
    barrier(me, &[other], "connected");
    if me == "a" {
        // 2000 inline puts of 8 bytes through a queue of 64: WouldBlock is back-pressure.
        let mut blocked = 0;
        for i in 0..SMALL_PUTS {
            loop {
                match s.ep.put(&(i * 3).to_le_bytes(), None, s.peer_key, i * 8) {
                    Ok(()) => break,
                    Err(Error::WouldBlock) => {
                        blocked += 1;
                        s.ep.wait_room().expect("room in the send queue");
                    }
                    Err(e) => panic!("put {i}: {e}"),
                }
            }
        }
        // A large put from the registered buffer.
        let off = 512 * 1024;
        for (i, w) in s.buf[off / 8..(off + BIG) / 8].iter_mut().enumerate() {
            *w = i as u64 ^ 0x5a5a;
        }
        let src = &bytes(&s.buf)[off..off + BIG];
        match s.ep.put(src, None, s.peer_key, off as u64) {
            Err(Error::NotRegistered { .. }) => {}
            r => panic!("a large put without its region: {r:?}"),
        }
        s.ep.put(src, Some(&s.region), s.peer_key, off as u64)
            .expect("large put");
        s.ep.quiet().expect("quiet");
        assert_eq!(s.ep.outstanding(), 0);
        println!("{SMALL_PUTS} small puts, back-pressure {blocked} times");
    }
    barrier(me, &[other], "puts");
    if me == "b" {
        for i in 0..SMALL_PUTS as usize {
            assert_eq!(s.buf[i], i as u64 * 3, "small put {i}");
        }
        let off = 512 * 1024 / 8;
        for i in 0..BIG / 8 {
            assert_eq!(s.buf[off + i], i as u64 ^ 0x5a5a, "large put word {i}");
        }
        // b reads the large put's source back from a.
        s.ep.get(&s.region, 900_000, 4096, s.peer_key, 512 * 1024)
            .expect("get");
        s.ep.quiet().expect("quiet");
        for i in 0..512 {
            assert_eq!(s.buf[900_000 / 8 + i], i as u64 ^ 0x5a5a, "get word {i}");
        }
    }
    barrier(me, &[other], "get");
    // A counter word on a, which b updates through the NIC and a checks at the end.
    let counter = 1_000_000u64;
    if me == "b" {
        let mut seen = Vec::new();
        for _ in 0..ADDS {
            let old =
                s.ep.fetch_add(&s.region, 8, s.peer_key, counter, 1)
                    .expect("fetch-add");
            seen.push(old);
        }
        assert_eq!(seen, (0..ADDS).collect::<Vec<_>>(), "fetch-add old values");
        let old =
            s.ep.compare_swap(&s.region, 8, s.peer_key, counter, ADDS, 7777)
                .expect("compare-swap");
        assert_eq!(old, ADDS);
        let old =
            s.ep.compare_swap(&s.region, 8, s.peer_key, counter, 1, 9999)
                .expect("compare-swap");
        assert_eq!(old, 7777, "a failed compare-swap returns the current value");
    }
    barrier(me, &[other], "atomics");
    if me == "a" {
        assert_eq!(s.buf[counter as usize / 8], 7777);
    }
}

/// The peer dies: the next puts and quiet fail with retry-exceeded, naming the peer and the
/// operation, within the connection's timing; the endpoint stays failed.
#[test]
fn peer_death_is_reported_with_peer_and_operation() {
    match role().as_deref() {
        None => run(
            "peer_death_is_reported_with_peer_and_operation",
            vec![Role::new("a", 1), Role::new("b", 2)],
        ),
        Some("a") => death_survivor(),
        Some("b") => {
            let _s = side("b", "a", 4096, Timing::default());
            publish("b.pid", &std::process::id().to_string());
            barrier("b", &["a"], "connected");
            // SAFETY: _exit ends the process at once, as a crash would.
            unsafe { libc::_exit(0) }
        }
        Some(r) => unexpected(r),
    }
}

fn death_survivor() {
    let timing = Timing {
        timeout: 14,
        retry_cnt: 2,
        rnr_retry: 7,
    };
    let mut s = side("a", "b", 4096, timing);
    let pid: u32 = fetch("b.pid").parse().unwrap();
    barrier("a", &["b"], "connected");
    let t0 = std::time::Instant::now();
    while !process_gone(pid) {
        assert!(t0.elapsed() < DEADLINE, "b did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = std::time::Instant::now();
    for i in 0..5u64 {
        s.ep.put(&i.to_le_bytes(), None, s.peer_key, i * 8)
            .expect("posting works");
    }
    let e = s.ep.quiet().expect_err("quiet must fail");
    let took = t0.elapsed();
    match &e {
        Error::Completion { peer, op, status } => {
            assert_eq!(peer, "node b");
            assert_eq!(*op, Op::Put);
            assert!(status.contains("retry"), "{status}");
        }
        e => panic!("expected a completion error, got {e}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("node b") && msg.contains("put"), "{msg}");
    assert!(took < Duration::from_secs(5), "reported after {took:?}");
    assert!(
        s.ep.put(b"x", None, s.peer_key, 0).is_err(),
        "the endpoint stays failed"
    );
    println!("{msg} (after {took:?})");
}

/// Device, port and GID selection: the defaults find the first active port; a missing
/// device, an inactive port and a missing GID are refused by name.
#[test]
fn selection_of_device_port_and_gid() {
    match role().as_deref() {
        None => run(
            "selection_of_device_port_and_gid",
            vec![
                Role::new("only", 1)
                    .with(verbs_emu::var::PORT, "3")
                    .with(verbs_emu::var::GID, "fe80::1,fe80::2"),
            ],
        ),
        Some("only") => {
            let nic = Nic::open(&Selection::default()).expect("default selection");
            let c = nic.caps();
            assert_eq!((c.device.as_str(), c.port, c.lid), ("softverbs0", 3, 1));
            let sel = |device: Option<&str>, port, gid_index| Selection {
                device: device.map(str::to_owned),
                port,
                gid_index,
            };
            let nic = Nic::open(&sel(Some("softverbs0"), Some(3), 1)).expect("explicit");
            assert_eq!(nic.caps().gid[15], 2, "GID index 1");
            let err = |s: Selection| Nic::open(&s).err().expect("refused").to_string();
            assert!(err(sel(Some("mlx5_9"), None, 0)).contains("no device named mlx5_9"));
            assert!(err(sel(None, Some(1), 0)).contains("port 1 of softverbs0 is not active"));
            assert!(err(sel(None, None, 3)).contains("GID index 3"));
        }
        Some(r) => unexpected(r),
    }
}

/// The exchange of the tests: files in the run's directory, a fence is a barrier.
struct Files {
    me: u32,
    n: u32,
    fences: u32,
}

impl Exchange for Files {
    fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        publish(&format!("r{}.{key}", self.me), value);
        Ok(())
    }
    fn fence(&mut self) -> Result<(), String> {
        self.fences += 1;
        let all: Vec<String> = (0..self.n).map(|r| format!("r{r}")).collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        barrier(
            &format!("r{}", self.me),
            &all,
            &format!("fence{}", self.fences),
        );
        Ok(())
    }
    fn get(&mut self, rank: u32, key: &str) -> Result<String, String> {
        Ok(fetch(&format!("r{rank}.{key}")))
    }
}

const RANKS: u32 = 4;

/// Four ranks on two emulated nodes (two per node, like PEs): each connects over verbs to
/// the two ranks of the other node only, through the key-value exchange; then every rank
/// puts its number into each remote peer's memory and adds to rank 0's counter.
#[test]
fn mesh_connects_the_remote_ranks_of_a_job() {
    match role().as_deref() {
        None => run(
            "mesh_connects_the_remote_ranks_of_a_job",
            (0..RANKS)
                .map(|r| Role::new(["r0", "r1", "r2", "r3"][r as usize], 1 + (r / 2) as u16))
                .collect(),
        ),
        Some(r) if r.starts_with('r') => mesh_rank(r[1..].parse().unwrap()),
        Some(r) => unexpected(r),
    }
}

fn mesh_rank(me: u32) {
    let node = |r: u32| r / 2;
    let nic = Nic::open(&Selection::default()).expect("open");
    let mut buf = vec![0u64; 64];
    // SAFETY: `buf` outlives the region and every request (quiet and a fence before the end).
    let region = unsafe { nic.register(buf.as_mut_ptr().cast(), 64 * 8) }.expect("register");
    let mut ex = Files {
        me,
        n: RANKS,
        fences: 0,
    };
    let remote = |r: u32| node(r) != node(me);
    let name = |r: u32| format!("PE {r} on node {}", node(r));
    let job = verbs::mesh::Job {
        me,
        n: RANKS,
        remote: &remote,
        name: &name,
    };
    let mut mesh =
        verbs::mesh::connect_all(&nic, &job, &[&region], 64, TIMING, &mut ex).expect("connect_all");
    for r in 0..RANKS {
        assert_eq!(
            mesh.endpoints[r as usize].is_some(),
            remote(r),
            "endpoint to {r}"
        );
    }
    for r in (0..RANKS).filter(|&r| remote(r)) {
        let key = mesh.keys[r as usize][0];
        let ep = mesh.endpoints[r as usize].as_mut().unwrap();
        ep.put(
            &u64::from(me + 100).to_le_bytes(),
            None,
            key,
            8 * u64::from(me),
        )
        .expect("put");
        ep.quiet().expect("quiet");
    }
    if me >= 2 {
        let key = mesh.keys[0][0];
        let ep = mesh.endpoints[0].as_mut().unwrap();
        ep.fetch_add(&region, 8 * 40, key, 8 * 32, 1 << me)
            .expect("fetch-add");
    }
    ex.fence().unwrap();
    for r in (0..RANKS).filter(|&r| remote(r)) {
        assert_eq!(buf[r as usize], u64::from(r + 100), "rank {r}'s put");
    }
    if me == 0 {
        assert_eq!(buf[32], (1 << 2) + (1 << 3), "both remote ranks added once");
    }
    drop(mesh);
}

/// Puts, a get and the atomics between two endpoints of one real HCA (through its port).
/// Never passes without one: it fails when the variable is unset, when the device is
/// missing or has no active port, and when the library loaded is the software device.
#[test]
#[ignore = "needs an RDMA device: GSAS_VERBS_TEST_DEVICE=<device> ... -- --ignored hardware_loopback"]
fn hardware_loopback() {
    let name = verbs_emu::hardware_device();
    let sel = Selection {
        device: Some(name),
        port: None,
        gid_index: std::env::var("GSAS_VERBS_TEST_GID_INDEX").map_or(0, |v| v.parse().unwrap()),
    };
    let nic = Nic::open(&sel).unwrap_or_else(|e| panic!("{e}"));
    let mut buf = vec![0u64; BYTES / 8];
    // SAFETY: `buf` outlives the region and every request (quiet before the end).
    let region = unsafe { nic.register(buf.as_mut_ptr().cast(), BYTES) }.unwrap();
    let mut a = nic.endpoint("loopback b", 64).unwrap();
    let mut b = nic.endpoint("loopback a", 64).unwrap();
    let (aa, ba) = (a.address(), b.address());
    a.connect(&ba, Timing::default()).unwrap();
    b.connect(&aa, Timing::default()).unwrap();
    let key = region.remote_key();
    for i in 0..1000u64 {
        while let Err(e) = a.put(&i.to_le_bytes(), None, key, 8 * i) {
            assert!(matches!(e, Error::WouldBlock), "{e}");
            a.progress().unwrap();
        }
    }
    a.quiet().unwrap();
    b.get(&region, 500_000, 8000, key, 0).unwrap();
    b.quiet().unwrap();
    for i in 0..1000 {
        assert_eq!((buf[i], buf[62_500 + i]), (i as u64, i as u64), "word {i}");
    }
    assert_eq!(
        a.fetch_add(&region, 8 * 100_000, key, 8 * 100_001, 5)
            .unwrap(),
        0
    );
    assert_eq!(
        a.compare_swap(&region, 8 * 100_000, key, 8 * 100_001, 5, 9)
            .unwrap(),
        5
    );
    assert_eq!(buf[100_001], 9);
}

#[test]
fn records_round_trip_and_reject_garbage() {
    let a = Address {
        lid: 0x12,
        gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7],
        qpn: 0x10_2345,
        psn: 0xab_cdef,
    };
    assert_eq!(Address::decode(&a.encode()).unwrap(), a);
    let k = RemoteKey {
        addr: 0x7fff_0000_1000,
        len: 1 << 20,
        rkey: 0x1234,
    };
    assert_eq!(RemoteKey::decode(&k.encode()).unwrap(), k);
    for bad in [
        "",
        "1:2",
        "zz:fe80000000000000000000000000000:1:2",
        "1:2:3:4:5",
    ] {
        assert!(Address::decode(bad).is_err(), "{bad}");
    }
    for bad in ["", "1:2", "1:2:3:4", "1:2:100000000", "x:1:2"] {
        assert!(RemoteKey::decode(bad).is_err(), "{bad}");
    }
}
