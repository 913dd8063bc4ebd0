//! Instructions and device operations per put on the software verbs device, for regression
//! tracking (docs/verbs.md, "Figures"): N inline 8-byte puts between two endpoints of one
//! process, in batches of half the send queue with a quiet after each (so that no put meets
//! a full queue and every collected call is one accepted put). Run it under callgrind:
//!
//! ```sh
//! cargo build --release -p verbs --example put_icount
//! valgrind --tool=callgrind --callgrind-out-file=cg.put \
//!     --toggle-collect='*Endpoint*put*' target/release/examples/put_icount 100000
//! callgrind_annotate --inclusive=yes cg.put | grep -E 'Endpoint.*put|sv_post_send'
//! ```
//!
//! It restarts itself with the software device in `LD_LIBRARY_PATH` when another
//! `libibverbs.so.1` (or none) is loaded.

use verbs::{Error, Nic, Selection, Timing};

/// Send queue depth of the measured endpoint.
const DEPTH: u32 = 512;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(10_000, |a| a.parse().expect("N: a number of puts"));
    if !verbs_emu::loaded_is_software() {
        let dir = std::env::temp_dir().join(format!("sv-icount-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.arg(n.to_string());
        verbs_emu::Node::new(&dir, 1).apply(&mut cmd);
        let status = cmd.status().expect("restarting with the software device");
        let _ = std::fs::remove_dir_all(&dir);
        std::process::exit(status.code().unwrap_or(1));
    }
    let nic = Nic::open(&Selection::default()).expect("open");
    let mut buf = vec![0u64; 1 << 17];
    // SAFETY: `buf` outlives the region and every request (quiet before the end).
    let region = unsafe { nic.register(buf.as_mut_ptr().cast(), buf.len() * 8) }.unwrap();
    let mut a = nic.endpoint("b", DEPTH).unwrap();
    let mut b = nic.endpoint("a", DEPTH).unwrap();
    let (aa, ba) = (a.address(), b.address());
    a.connect(&ba, Timing::default()).unwrap();
    b.connect(&aa, Timing::default()).unwrap();
    let key = region.remote_key();
    let before = verbs_emu::roles::counters();
    for i in 0..n {
        let off = (i % (1 << 17)) * 8;
        match a.put(&i.to_le_bytes(), None, key, off) {
            Ok(()) => {}
            Err(Error::WouldBlock) => panic!("a batch fits the queue"),
            Err(e) => panic!("{e}"),
        }
        if (i + 1) % u64::from(DEPTH / 2) == 0 {
            a.quiet().unwrap();
        }
    }
    a.quiet().unwrap();
    let after = verbs_emu::roles::counters();
    let last = (n - 1) % (1 << 17);
    assert_eq!(buf[last as usize], n - 1, "the last put landed");
    println!(
        "{n} puts of 8 bytes (inline): {:.2} packets sent per put (request and ACK), \
         {:.4} signalled completions per put (one per {} requests or quiet)",
        (after[0] - before[0]) as f64 / n as f64,
        1.0 / f64::from(DEPTH / 2),
        DEPTH / 2
    );
}
