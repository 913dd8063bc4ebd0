//! `gsas_transport::watched` beside `memcpy`: the copy into (and out of) memory other PEs watch must
//! keep memcpy's bandwidth for large copies (issue 13).
//!
//! `cargo bench -p gsas-bench --bench watched` prints, per size, the time of
//! `ptr::copy_nonoverlapping` (glibc's memcpy), `store_once` and `load_once` for the same
//! buffers (destination 8-byte aligned, source 8-byte aligned); criterion reports the
//! throughput in bytes per second.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn copies(c: &mut Criterion) {
    for size in [8usize, 64, 256, 4 << 10, 64 << 10, 1 << 20, 16 << 20] {
        let src = vec![0x5Au64; size.div_ceil(8)];
        let mut dst = vec![0u64; size.div_ceil(8)];
        let mut g = c.benchmark_group(format!("copy {size} B"));
        g.throughput(Throughput::Bytes(size as u64));
        let (s, d) = (src.as_ptr().cast::<u8>(), dst.as_mut_ptr().cast::<u8>());
        g.bench_function("memcpy", |b| {
            // SAFETY: both buffers hold `size` bytes and are distinct.
            b.iter(|| unsafe {
                std::ptr::copy_nonoverlapping(black_box(s), black_box(d), black_box(size))
            })
        });
        g.bench_function("store_once", |b| {
            // SAFETY: as above.
            b.iter(|| unsafe {
                gsas_transport::watched::store_once(black_box(s), black_box(d), black_box(size))
            })
        });
        g.bench_function("load_once", |b| {
            // SAFETY: as above.
            b.iter(|| unsafe {
                gsas_transport::watched::load_once(black_box(s), black_box(d), black_box(size))
            })
        });
        g.finish();
    }
}

criterion_group!(benches, copies);
criterion_main!(benches);
