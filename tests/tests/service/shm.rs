//! The gsas-core service engine over `ShmMemory`: a heap segment created by the "service",
//! passed to a "PE" with `SCM_RIGHTS` and mapped there; requests executed by the engine
//! land in the PE's mapping, and the engine's atomics are coherent with the PE's own CPU
//! atomics on the same words.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gsas_core::service::{Handled, Segment as ServiceSegment, Service};
use gsas_core::wire::{
    AtomicDesc, AtomicOp, AtomicType, ErrorCode, GlobalAddr, Packet, Reply, ReplyRepr, Request,
    RequestRepr, SenderId,
};
use gsas_transport::shm::{Segment, ShmMemory, recv_fds, send_fds, seqpacket_pair};

const KEY: u64 = 0xabad_cafe;
const HEAP: usize = 1 << 20;

struct Fixture {
    service: Service<ShmMemory, 8>,
    pe: Segment,
    token: u32,
}

impl Fixture {
    fn new() -> Fixture {
        let heap = Arc::new(Segment::create("job7-pe1-heap", HEAP).unwrap());
        let memory = ShmMemory::new();
        memory.insert(heap.clone()).unwrap();
        let mut service = Service::new(SenderId::new(1).unwrap(), memory);
        service
            .register(ServiceSegment {
                job: 7,
                key: KEY,
                pe: 1,
                segment: 0,
                base: heap.addr(),
                len: HEAP as u64,
            })
            .unwrap();
        let (svc_sock, pe_sock) = seqpacket_pair().unwrap();
        send_fds(&svc_sock, b"heap", &[heap.fd()], Duration::from_secs(10)).unwrap();
        let mut msg = [0u8; 8];
        let (_, mut fds) = recv_fds(&pe_sock, &mut msg, Duration::from_secs(10)).unwrap();
        let pe = Segment::map(fds.pop().unwrap(), "heap (PE)").unwrap();
        Fixture {
            service,
            pe,
            token: 0,
        }
    }

    /// Runs one request through the engine and returns the reply's body as owned bytes
    /// (DATA payload), or the error code.
    fn run(&mut self, body: Request<'_>) -> Result<Vec<u8>, ErrorCode> {
        self.token += 1;
        let repr = RequestRepr {
            sender: SenderId::new(2).unwrap(),
            token: self.token,
            body,
        };
        let mut req = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut req[..]));
        let mut reply = [0u8; 128];
        let Ok(Handled::Replied(n)) = self.service.handle(KEY, &req, &mut reply) else {
            panic!("no reply to {body:?}");
        };
        let parsed = ReplyRepr::parse(&reply[..n]).unwrap();
        assert_eq!(parsed.token, self.token);
        match parsed.body {
            Reply::Ack => Ok(Vec::new()),
            Reply::Data(d) => Ok(d.to_vec()),
            Reply::Error(code) => Err(code),
            Reply::BulkData { .. } => panic!("unexpected bulk data"),
        }
    }

    fn atomic(
        &mut self,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> u64 {
        let desc = AtomicDesc::new(op, ty).unwrap();
        let data = self
            .run(Request::Atomic {
                addr: GlobalAddr::new(1, 0, offset).unwrap(),
                desc,
                operand,
                comparand,
            })
            .unwrap();
        let mut b = [0u8; 8];
        b[..data.len()].copy_from_slice(&data);
        u64::from_le_bytes(b)
    }
}

#[test]
fn writes_and_reads_meet_the_pe_mapping() {
    let mut f = Fixture::new();
    let addr = GlobalAddr::new(1, 0, 4096 + 3).unwrap();
    f.run(Request::Write {
        addr,
        data: b"from afar",
    })
    .unwrap();
    let mut got = [0u8; 9];
    f.pe.read(4096 + 3, &mut got).unwrap();
    assert_eq!(&got, b"from afar");
    f.pe.write(HEAP - 5, b"local").unwrap();
    let data = f
        .run(Request::Read {
            addr: GlobalAddr::new(1, 0, (HEAP - 5) as u64).unwrap(),
            len: 5,
        })
        .unwrap();
    assert_eq!(data, b"local");
    // Out of the segment: refused by the engine, memory untouched.
    let refused = f.run(Request::Read {
        addr: GlobalAddr::new(1, 0, (HEAP - 4) as u64).unwrap(),
        len: 5,
    });
    assert_eq!(refused, Err(ErrorCode::OutOfBounds));
}

#[test]
fn atomics_of_both_widths_and_floats_bitwise() {
    let mut f = Fixture::new();
    f.pe.atomic_u64(64)
        .unwrap()
        .store(u64::MAX, Ordering::Release);
    // A 32-bit increment wraps in its own word and leaves the upper half alone.
    assert_eq!(
        f.atomic(64, AtomicOp::FetchInc, AtomicType::U32, 0, 0),
        u64::from(u32::MAX)
    );
    assert_eq!(
        f.pe.atomic_u64(64).unwrap().load(Ordering::Acquire),
        0xffff_ffff_0000_0000
    );
    let minus_two = (-2i32) as u32 as u64;
    assert_eq!(
        f.atomic(72, AtomicOp::Set, AtomicType::I32, minus_two, 0),
        0
    );
    assert_eq!(
        f.atomic(72, AtomicOp::CompareSwap, AtomicType::I32, 5, minus_two),
        minus_two
    );
    assert_eq!(f.pe.atomic_u32(72).unwrap().load(Ordering::Acquire), 5);
    let nan = 0x7ff8_0000_dead_beef_u64;
    f.atomic(80, AtomicOp::Set, AtomicType::F64, nan, 0);
    assert_eq!(
        f.atomic(80, AtomicOp::Swap, AtomicType::F64, 2.5f64.to_bits(), 0),
        nan
    );
    assert_eq!(
        f.atomic(80, AtomicOp::Fetch, AtomicType::F64, 0, 0),
        2.5f64.to_bits()
    );
    let nan32 = 0x7fc0_1234_u64;
    f.atomic(88, AtomicOp::Set, AtomicType::F32, nan32, 0);
    assert_eq!(
        f.pe.atomic_u32(88).unwrap().load(Ordering::Acquire),
        0x7fc0_1234
    );
    assert_eq!(
        f.atomic(96, AtomicOp::FetchXor, AtomicType::U64, 0xff, 0),
        0
    );
    assert_eq!(
        f.atomic(96, AtomicOp::FetchAnd, AtomicType::U64, 0x0f, 0),
        0xff
    );
    assert_eq!(
        f.atomic(96, AtomicOp::FetchOr, AtomicType::U64, 0x30, 0),
        0x0f
    );
    assert_eq!(f.pe.atomic_u64(96).unwrap().load(Ordering::Acquire), 0x3f);
}

#[test]
fn engine_atomics_are_coherent_with_pe_cpu_atomics() {
    let mut f = Fixture::new();
    const N: u64 = 20_000;
    let pe_view = Segment::map(f.pe.try_clone_fd().unwrap(), "heap (PE thread)").unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let word = pe_view.atomic_u64(256).unwrap();
            let half = pe_view.atomic_u32(264).unwrap();
            for _ in 0..N {
                word.fetch_add(1, Ordering::AcqRel);
                half.fetch_add(2, Ordering::AcqRel);
            }
        });
        for _ in 0..N {
            f.atomic(256, AtomicOp::Add, AtomicType::U64, 3, 0);
            f.atomic(264, AtomicOp::FetchAdd, AtomicType::U32, 5, 0);
        }
    });
    assert_eq!(f.pe.atomic_u64(256).unwrap().load(Ordering::Acquire), 4 * N);
    assert_eq!(
        f.pe.atomic_u32(264).unwrap().load(Ordering::Acquire),
        7 * N as u32
    );
    assert_eq!(
        f.pe.atomic_u32(268).unwrap().load(Ordering::Acquire),
        0,
        "neighbour untouched"
    );
}
