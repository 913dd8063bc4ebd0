//! The data-segment remap on this very test binary.
//!
//! Runs without libtest (`harness = false` in Cargo.toml): the remap must happen while no
//! other thread writes the executable's statics, and libtest runs tests on threads beside
//! its own. `main` is the test; any failed assertion panics and fails it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use gsas_transport::shm::{DataSegment, Segment};

/// Initialised statics (`.data`).
static INITIALISED: [AtomicU64; 64] = [const { AtomicU64::new(0x5a5a_0000_0000_0001) }; 64];
/// Zero-initialised statics (`.bss`).
static ZEROED: [AtomicU32; 1024] = [const { AtomicU32::new(0) }; 1024];
/// A plain mutable static, initialised.
static mut PLAIN: [u64; 16] = [7; 16];

fn offset(d: &DataSegment, addr: usize) -> usize {
    d.offset_of(addr)
        .unwrap_or_else(|| panic!("{addr:#x} is not in the data segment {d:?}")) as usize
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        // `cargo test -- --list`: nothing to list in the libtest format.
        return;
    }
    let d = DataSegment::discover().expect("discover the data segment");
    let init_at = offset(&d, INITIALISED.as_ptr() as usize);
    let zero_at = offset(&d, ZEROED.as_ptr() as usize);
    let plain_at = offset(&d, (&raw const PLAIN) as usize);
    assert!(d.contains(INITIALISED.as_ptr() as usize, size_of_val(&INITIALISED)));
    assert!(d.contains(ZEROED.as_ptr() as usize, size_of_val(&ZEROED)));

    ZEROED[10].store(0xabcd, Ordering::Relaxed);
    let memfd = Segment::create("data-segment-test", d.len()).expect("memfd");
    // SAFETY: this program has a single thread here (no libtest harness, no threads
    // started yet), so nothing else writes the statics during the remap.
    unsafe { d.remap_onto(memfd.fd()) }.expect("remap");

    // Contents survived the remap.
    assert!(
        INITIALISED
            .iter()
            .all(|a| a.load(Ordering::Relaxed) == 0x5a5a_0000_0000_0001)
    );
    assert_eq!(ZEROED[10].load(Ordering::Relaxed), 0xabcd);
    assert!(
        ZEROED
            .iter()
            .enumerate()
            .all(|(i, a)| i == 10 || a.load(Ordering::Relaxed) == 0)
    );
    // SAFETY: single-threaded; a read of the plain static.
    assert_eq!(unsafe { PLAIN }, [7; 16]);

    // `memfd`'s own mapping is a second view of the same file, at another address.
    assert_ne!(memfd.addr(), d.base());
    let third = Segment::map(memfd.try_clone_fd().unwrap(), "third view").unwrap();
    let mut word = [0u8; 8];
    third.read(init_at, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), 0x5a5a_0000_0000_0001);

    // Writes through the original addresses appear in the other mappings ...
    INITIALISED[3].store(0x1111, Ordering::Release);
    ZEROED[1000].store(0x2222, Ordering::Release);
    // SAFETY: single-threaded write to the plain static.
    unsafe { PLAIN[15] = 0x3333 };
    let via = |seg: &Segment, at: usize| seg.atomic_u64(at).unwrap().load(Ordering::Acquire);
    assert_eq!(via(&memfd, init_at + 3 * 8), 0x1111);
    assert_eq!(via(&third, init_at + 3 * 8), 0x1111);
    assert_eq!(
        memfd
            .atomic_u32(zero_at + 1000 * 4)
            .unwrap()
            .load(Ordering::Acquire),
        0x2222
    );
    assert_eq!(via(&third, plain_at + 15 * 8), 0x3333);

    // ... and writes through the other mappings appear at the original addresses.
    memfd
        .atomic_u64(init_at + 5 * 8)
        .unwrap()
        .store(0x4444, Ordering::Release);
    third
        .atomic_u32(zero_at + 7 * 4)
        .unwrap()
        .fetch_add(5, Ordering::AcqRel);
    third.write(plain_at, &0x5555u64.to_ne_bytes()).unwrap();
    assert_eq!(INITIALISED[5].load(Ordering::Acquire), 0x4444);
    assert_eq!(ZEROED[7].load(Ordering::Acquire), 5);
    // SAFETY: single-threaded; a volatile read, since the write came through another mapping.
    let got = unsafe { std::ptr::read_volatile(&raw const PLAIN[0]) };
    assert_eq!(got, 0x5555);

    // The process keeps working on remapped statics: threads, allocation, formatting.
    let t = std::thread::spawn(|| {
        ZEROED[20].fetch_add(1, Ordering::AcqRel);
        format!("{}", INITIALISED[5].load(Ordering::Acquire))
    });
    assert_eq!(t.join().unwrap(), "17476");
    assert_eq!(
        third
            .atomic_u32(zero_at + 20 * 4)
            .unwrap()
            .load(Ordering::Acquire),
        1
    );

    drop(third);
    drop(memfd);
    // The program's own mapping stays after the other views are gone.
    INITIALISED[0].store(9, Ordering::Release);
    assert_eq!(INITIALISED[0].load(Ordering::Acquire), 9);
    println!(
        "data segment {:#x}+{:#x} remapped onto a memfd and shared: ok",
        d.base(),
        d.len()
    );
}
