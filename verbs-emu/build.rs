//! Builds `csrc/*.c` (softverbs) into `$OUT_DIR/lib/libibverbs.so.1` with the target's C
//! compiler, against the system's `<infiniband/verbs.h>` (Debian: libibverbs-dev).
//!
//! The headers are architecture-independent, so a cross build (aarch64) uses them too: they
//! are reached through `$OUT_DIR/include`, which links only `infiniband/` and `rdma/`, so
//! that the cross compiler still takes libc and kernel headers from its own sysroot.

use std::path::{Path, PathBuf};
use std::process::Command;

const HEADERS: &str = "/usr/include";
const SOURCES: [&str; 3] = ["csrc/device.c", "csrc/objects.c", "csrc/rc.c"];

fn main() {
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let verbs_h = Path::new(HEADERS).join("infiniband/verbs.h");
    println!("cargo:rerun-if-changed={}", verbs_h.display());
    assert!(
        verbs_h.is_file(),
        "{} not found: install the libibverbs headers (Debian/Ubuntu: apt-get install libibverbs-dev; bash .ci/run does)",
        verbs_h.display()
    );
    let inc = out.join("include");
    std::fs::create_dir_all(&inc).expect("creating OUT_DIR/include");
    for dir in ["infiniband", "rdma"] {
        let link = inc.join(dir);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(Path::new(HEADERS).join(dir), &link)
            .expect("linking the verbs headers");
    }
    let lib_dir = out.join("lib");
    std::fs::create_dir_all(&lib_dir).expect("creating OUT_DIR/lib");
    let lib = lib_dir.join("libibverbs.so.1");
    let compiler = cc::Build::new()
        .pic(true)
        .opt_level(2)
        .cargo_metadata(false)
        .get_compiler();
    let mut cmd: Command = compiler.to_command();
    cmd.args([
        "-shared",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fvisibility=hidden",
    ])
    .arg("-Wl,-soname,libibverbs.so.1")
    .arg("-isystem")
    .arg(&inc)
    .args(SOURCES)
    .arg("-o")
    .arg(&lib)
    .arg("-lpthread");
    let status = cmd.status().expect("running the C compiler");
    assert!(
        status.success(),
        "compiling softverbs (csrc/) failed: {cmd:?}"
    );
    println!("cargo:rustc-env=SOFTVERBS_LIB_DIR={}", lib_dir.display());
}
