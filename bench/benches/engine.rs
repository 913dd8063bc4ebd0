//! Service engine throughput on one core: one request in, one reply out, per iteration.
//!
//! Run with `cargo bench -p gsas-bench --bench engine`. The target is at least 10 million
//! small requests per second (<= 100 ns each).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gsas_bench::{KEY, PE, addr, encode, memory, service};
use gsas_core::service::Handled;
use gsas_core::wire::{
    AtomicDesc, AtomicOp, AtomicType, Fragment, GlobalAddr, Packet, PacketType, Request,
    RequestRepr, emit_reply_header,
};

fn engine(c: &mut Criterion) {
    let words = memory();
    let mut s = service(&words);
    let mut out = vec![0u8; 32 + 4096];
    let mut group = c.benchmark_group("service");
    group.throughput(Throughput::Elements(1));

    let cases: [(&str, Vec<u8>); 4] = [
        (
            "read_8",
            encode(
                Request::Read {
                    addr: addr(64),
                    len: 8,
                },
                1,
            ),
        ),
        (
            "write_8",
            encode(
                Request::Write {
                    addr: addr(64),
                    data: &[0x5a; 8],
                },
                2,
            ),
        ),
        (
            "fetch_add_u64",
            encode(
                Request::Atomic {
                    addr: addr(128),
                    desc: AtomicDesc::new(AtomicOp::FetchAdd, AtomicType::U64).expect("valid"),
                    operand: 1,
                    comparand: 0,
                },
                3,
            ),
        ),
        (
            "bulk_read_4k",
            encode(
                Request::BulkRead {
                    frag: Fragment {
                        base: addr(4096),
                        total: 8192,
                        offset: 4096,
                    },
                    len: 4096,
                },
                4,
            ),
        ),
    ];
    for (name, packet) in &cases {
        group.bench_function(*name, |b| {
            b.iter(
                || match s.handle(black_box(KEY), black_box(packet), &mut out) {
                    Ok(Handled::Replied(n)) => n,
                    other => panic!("benchmark request not served: {other:?}"),
                },
            )
        });
    }

    // Two segments in turn: the engine's last-segment hint misses on every request, so
    // this measures the binary search of the segment table.
    let other = encode(
        Request::Read {
            addr: GlobalAddr::new(PE, 1, 64).expect("small offset"),
            len: 8,
        },
        5,
    );
    let pair = [&cases[0].1, &other];
    let mut turn = 0usize;
    group.bench_function("read_8_alternating_segments", |b| {
        b.iter(|| {
            turn ^= 1;
            match s.handle(black_box(KEY), black_box(pair[turn]), &mut out) {
                Ok(Handled::Replied(n)) => n,
                other => panic!("benchmark request not served: {other:?}"),
            }
        })
    });
    assert_eq!(
        s.stats().total_refusals(),
        0,
        "every benchmarked request must be served"
    );

    // The wire floor: parse a READ and emit the DATA reply header, no table, no memory.
    let read = &cases[0].1;
    group.bench_function("parse_to_reply_read", |b| {
        b.iter(|| {
            let repr = RequestRepr::parse(&Packet::new_unchecked(black_box(&read[..])))
                .expect("valid READ");
            match repr.body {
                Request::Read { len, .. } => {
                    emit_reply_header(&mut out, PacketType::Data, 0, len, repr.token)
                }
                _ => unreachable!("the packet is a READ"),
            }
            out[2]
        })
    });
    group.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
