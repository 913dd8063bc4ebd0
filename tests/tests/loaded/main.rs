//! The loaded-machine stage: jobs that must stay correct when the machine is busy and the
//! network loses and duplicates datagrams. `scripts/loaded` runs this binary (and the
//! concurrent observers of the C suite) with two CPU-bound processes beside it, as the
//! test command's stage `loaded`; it is not part of `cargo test --workspace` (its
//! Cargo.toml entry has `test = false`), so run it with `cargo test -p gsas-tests --test
//! loaded` or through the script.
//!
//! * [`coll_check`]: the randomized collective checker (`shmem/examples/coll_check.rs`):
//!   every collective in team and active-set forms, back to back with PEs running ahead,
//!   sizes around every packet and fragment boundary, results checked exactly, on three
//!   and four nodes of one to four PEs over loopback, and through network namespaces
//!   whose nftables drop and duplicate the services' and the collectives' datagrams.
//! * [`pingpong`]: the flag ping-pongs through the services, 20,000 round trips of each
//!   pattern between two nodes, within a minute.

mod coll_check;
mod pingpong;
