//! The gsas test kit: what the cross-crate integration tests of `tests/tests/` share.
//!
//! **What it is.** The workspace's `gsas-tests` crate holds the tests that span crates
//! (jobs over several nodes, launchers and PMI, the atomic service as a process, every
//! transport, the OpenSHMEM C suite) and this library, which they all use:
//!
//! * [`launch`]: starting programs of this target, natively or under qemu-user, the test
//!   binary itself in child mode ([`launch::self_test_argv`]), the workspace's programs
//!   (`oshrun`, `gsas-atomicd`, `exanet-emu`: [`launch::program`]), Hydra, bounded waits;
//! * [`node`]: the PE scenarios a child runs (`GSAS_TEST_SCENARIO`), scratch directories;
//! * [`multinode`]: cluster files, `gsas-atomicd` daemons and `oshrun` commands;
//! * [`netns`]: nodes in network namespaces on a bridge, their cluster file, loss and
//!   duplication with nftables;
//! * [`emu`]: a running `exanet-emu` with a root of its own;
//! * [`install`]: the OpenSHMEM C library installed for the C programs of the tests;
//! * [`load`]: CPU-bound processes beside a job (a loaded machine);
//! * [`pmi`]: the PMI ranks' roles and the parent-side job runner;
//! * [`attack`]: floods, a wire fuzzer and replayed frames against a service;
//! * [`conformance`]: the transport conformance suite every transport runs;
//! * [`skip`]: loud skips (`SKIPPED: <test>: <reason>`) that CI can turn into failures.
//!
//! **What it is not.** Part of any program users run: no crate of the runtime depends on
//! it (`shmem` takes it as a dev-dependency for its own multi-PE tests).
//!
//! **Thread-safety.** Tests run in parallel threads: every helper uses fresh ports, job
//! ids and scratch directories; the launch decision is made once (a `OnceLock`).
//!
//! ```
//! use gsas_tests::launch::{launch, run_with_timeout};
//! use std::time::Duration;
//!
//! // Runs `true` (a host program) with a time limit; children of this target would go
//! // through `launch().command(...)`, which adds qemu-user when needed.
//! let out = run_with_timeout(&mut std::process::Command::new("true"), Duration::from_secs(10))?;
//! assert!(out.status.success());
//! assert!(launch().prefix().len() <= 3);
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod attack;
pub mod conformance;
pub mod emu;
pub mod install;
pub mod launch;
pub mod load;
pub mod multinode;
pub mod netns;
pub mod node;
pub mod pmi;
pub mod skip;
