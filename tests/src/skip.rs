//! Loud skips: a test that cannot run here says so, and CI can make that a failure.
//!
//! A skipped test prints `SKIPPED: <test>: <reason>` on standard error, outside libtest's
//! output capture, and returns; `scripts/test-all` collects these lines into its summary.
//! A requirement variable (`GSAS_REQUIRE_NETNS=1`, `GSAS_REQUIRE_SLURM=1`) turns the skip
//! into a failure: `scripts/test-all` sets them where the machine can run the tests (as
//! root on x86_64), so that a broken setup fails instead of passing green.

use std::io::Write as _;

/// Requirement variable of the tests that need root and `ip netns` (network namespaces).
pub const REQUIRE_NETNS: &str = "GSAS_REQUIRE_NETNS";
/// Requirement variable of the test that starts a Slurm cluster.
pub const REQUIRE_SLURM: &str = "GSAS_REQUIRE_SLURM";

/// Whether `variable` is set to `1`.
pub fn required(variable: &str) -> bool {
    std::env::var_os(variable).is_some_and(|v| v == "1")
}

/// Reports that `test` is skipped for `reason`; panics instead when `variable` requires
/// the test to run.
pub fn skip(test: &str, variable: &str, reason: &str) {
    assert!(
        !required(variable),
        "{variable}=1 but {test} cannot run: {reason}"
    );
    note(test, reason);
}

/// Prints `SKIPPED: <test>: <reason>` on standard error, outside the harness's capture
/// (for skips no variable can require, such as a target the test does not run on).
pub fn note(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}

/// Whether the effective user is root (namespaces, nftables and Slurm's daemons need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
