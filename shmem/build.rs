//! Compiles the C shim (`csrc/shim.c`) and the `long double` arithmetic of the reductions
//! (`csrc/longdouble.c`) into the library.
//!
//! The shim holds what Rust cannot express: the `long double` by-value routines
//! (`shmem_longdouble_p/g` and their context and profiling twins) and the variadic
//! `shmem_pcontrol`. It includes the finished headers from `include/`, so its definitions
//! are checked against the public prototypes. The `cc` crate picks the compiler for the
//! target (`CC_aarch64_unknown_linux_gnu`, else `aarch64-linux-gnu-gcc`, for the boards).

fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=csrc/longdouble.c");
    println!("cargo:rerun-if-changed=include/shmem.h");
    println!("cargo:rerun-if-changed=include/pshmem.h");
    cc::Build::new()
        .file("csrc/shim.c")
        .file("csrc/longdouble.c")
        .include("include")
        .flag_if_supported("-std=c11")
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .warnings_into_errors(true)
        .compile("gsas_shmem_shim");
}
