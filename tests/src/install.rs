//! The OpenSHMEM C library installed for the tests that build C programs (the C suite, the
//! Slurm test): `scripts/install --debug --target <this target>` into
//! `<target dir>/c-suite/<triple>/prefix`, in the dev profile of the same target directory
//! as the running test (so the build reuses what the test command compiled; the prefix is
//! kept between runs and only files whose content changed are replaced).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::launch::run_with_timeout;

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is inside the workspace")
        .to_owned()
}

/// The target triple of the running test (what `scripts/install --target` takes).
pub fn triple() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "aarch64-unknown-linux-gnu"
    } else if cfg!(target_arch = "x86_64") {
        "x86_64-unknown-linux-gnu"
    } else {
        panic!("no install target known for this architecture")
    }
}

/// The target directory of the running test binary (`<target>[/<triple>]/<profile>/deps/
/// <test>`: the directory above the triple, if any).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let mut dir = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("test executable in <target>/<profile>/deps");
    if dir.file_name().is_some_and(|n| n == triple()) {
        dir = dir.parent().expect("the triple directory has a parent");
    }
    dir.to_owned()
}

/// Where the library is installed for this target.
pub fn prefix() -> PathBuf {
    target_dir().join("c-suite").join(triple()).join("prefix")
}

/// The `scripts/install --prefix <prefix> --target <triple> --debug --with-verbs` command,
/// with the test's target directory (verbs on, as in the rest of the test build, so that
/// the C suite runs over verbs and the install shares the workspace's artefacts).
pub fn command() -> Command {
    let root = workspace_root();
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("scripts/install"))
        .arg("--prefix")
        .arg(prefix())
        .args(["--target", triple(), "--debug", "--with-verbs"])
        .env("CARGO_TARGET_DIR", target_dir())
        .current_dir(&root);
    cmd
}

/// Runs [`command`] (at most an hour) and returns what it printed; an error with its
/// output when it fails.
pub fn install() -> Result<String, String> {
    let out = run_with_timeout(&mut command(), Duration::from_secs(3600))
        .map_err(|e| format!("scripts/install did not finish: {e}"))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(log)
    } else {
        Err(format!(
            "scripts/install --prefix {} --target {} --debug failed ({}):\n{log}",
            prefix().display(),
            triple(),
            out.status
        ))
    }
}
