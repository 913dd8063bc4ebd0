//! The OpenSHMEM environment variables: one table, from which parsing, errors, the
//! `SHMEM_INFO` text and the documentation below come (after SOS's `shmem_env_defs.h`).
//!
//! **What it is.** The table and its parser are `board_config::shmem_env` (re-exported
//! here), which the launcher shares to check the variables before it starts PEs. [`VARS`] declares every variable the library reads: its names (the
//! `SHMEM_` name first, then the deprecated `SMA_` alias where the specification has one),
//! its type, its default and what it does. [`Config::from_lookup`] reads them through a
//! lookup function (the process environment in [`Config::from_env`], a map in tests) into a
//! plain [`Config`]; nothing else in the library reads the environment. A `SHMEM_` name wins
//! over its `SMA_` alias. Booleans count as set when the variable is present at all, whatever
//! its value (even `0`), as in SOS.
//!
//! `SHMEM_SYMMETRIC_SIZE` (OpenSHMEM 1.5 §"Environment Variables") is an integer or a
//! floating-point number with an optional multiplier `k`/`K`, `m`/`M`, `g`/`G` or `t`/`T`
//! (powers of 2^10); the heap gets `ceil(number * scale)` bytes. Only one multiplier is
//! recognised and characters after it are ignored (`20kk` is `20k`); anything else after the
//! number is an error naming the variable and its value.
//!
//! **What it is not.** The runtime's `GSAS_*` variables are read by the `gsas` crate (see
//! `docs/runtime.md`); they are not repeated here.
//!
//! **Thread-safety.** Pure functions and plain data.
//!
//! The variables (generated from [`VARS`] by [`render_markdown`]; a test keeps this copy
//! current):
//!
//! <!-- BEGIN GENERATED: shmem::env::render_markdown -->
//! | variable | alias | type | default | meaning |
//! |---|---|---|---|---|
//! | `SHMEM_VERSION` | `SMA_VERSION` | boolean (set = on) | off | PE 0 prints the library name and the OpenSHMEM version at start-up. |
//! | `SHMEM_INFO` | `SMA_INFO` | boolean (set = on) | off | PE 0 prints the library version and this list of variables at start-up. |
//! | `SHMEM_SYMMETRIC_SIZE` | `SMA_SYMMETRIC_SIZE` | size (number, decimals allowed, with optional k/m/g/t) | the runtime's default: `defaults.symmetric_size` of the cluster file, else 64 MiB | Symmetric heap size of every PE in bytes; at least ceil(number * scale) bytes are provided; at least 4k (a page). |
//! | `SHMEM_DEBUG` | `SMA_DEBUG` | boolean (set = on) | off | Print diagnostic messages (start-up details, ignored hints) on standard error. |
//! | `SHMEM_QUIET` | - | boolean (set = on) | off | gsas extension: PE 0 does not print the one line that reports the job's first allocation that returns NULL (`shmem_malloc` and the other allocation routines, with the heap's size and `SHMEM_SYMMETRIC_SIZE`); `SHMEM_DEBUG` still reports every one. |
//! | `SHMEM_WAIT_TIMEOUT` | - | seconds (number > 0) | 3600 | gsas extension: longest time a point-to-point wait, a signal wait, a lock acquisition or a wait inside a collective may block before the job is ended with a message naming the call. |
//! | `SHMEM_COLL_FLAT_MAX` | - | integer (>= 0) | 8 | gsas extension: a barrier of a team or active set on one node with at most this many PEs is flat (every PE watches every other PE's flag); larger ones gather through a tree of sub-leaders to one leader. |
//! | `SHMEM_COLL_FANIN` | - | integer (>= 0) | 8 | gsas extension: fan-in of the intra-node arrival tree of barriers (each sub-leader waits for this many PEs; at least 1). |
//! | `SHMEM_COLL_RING_MIN` | - | size (number, decimals allowed, with optional k/m/g/t) | 256k | gsas extension: collect and fcollect exchange the nodes' blocks between three or more nodes over a ring once the largest node block has this many bytes; below, by recursive doubling. |
//! | `SHMEM_COLL_SPIN_US` | - | integer (>= 0) | 20 | gsas extension: microseconds a collective spins on a flag before it yields the CPU (then it yields for 500 us, then sleeps in growing steps of up to 100 us); no spinning while a spin would keep another thread off a CPU: the node runs more PEs than the process may use CPUs, or the machine has more runnable threads than CPUs (sampled every 10 ms, two samples in a row). |
//! | `SHMEM_COLL_DIRECT_MAX` | - | size (number, decimals allowed, with optional k/m/g/t) | 256k | gsas extension: across nodes over UDP, collectives send their signals straight to the waiting PE's own socket, and data of up to this many bytes per step with them, in datagrams of `SHMEM_COLL_DIRECT_CHUNK` bytes (larger data goes through the services; a `collect` between nodes whose PEs all have the endpoint sends its blocks directly whatever their size); 0 sends everything through the services. Must be the same on every PE. |
//! | `SHMEM_COLL_DIRECT_CHUNK` | - | size (number, decimals allowed, with optional k/m/g/t) | what a datagram of the job's UDP MTU (`GSAS_UDP_MTU`, `defaults.udp_mtu`) holds after its headers, rounded down to 64 bytes (61312 for 61440) | gsas extension: most data bytes per packet of the collectives' direct path (larger values are taken as what a datagram holds; rounded down to a multiple of 64, at least 64): larger data is cut into packets at multiples of 64 bytes of its destination address. Must be the same on every PE. |
//! | `SHMEM_P2P_DIRECT_MAX` | - | size (number, decimals allowed, with optional k/m/g/t) | 1k | gsas extension: across nodes over UDP, a blocking put (`shmem_p`, `shmem_put`, `shmem_putmem`, `shmem_put_signal`, ...) of up to this many bytes that fits one datagram of the collectives' endpoint goes straight to the target PE's own socket, which the target applies while it waits or tests (or its keeper thread, as soon as it arrives, when the target sleeps or computes) and then acknowledges, instead of through the target node's atomic service; only while nothing of this PE's is in flight through a service, so that no earlier operation is overtaken. 0 sends every put through the services. Needs the collectives' endpoint (`SHMEM_COLL_DIRECT_MAX` above 0). |
//! <!-- END GENERATED -->

pub use board_config::shmem_env::*;

/// The text PE 0 prints for `SHMEM_INFO`: the version line and every variable with its
/// type, default and meaning.
pub fn render_info() -> String {
    let mut s = format!("{}\n\nEnvironment variables:\n", crate::version_line());
    for v in VARS {
        s.push_str(&format!("  {}", v.name));
        if let Some(a) = v.alias {
            s.push_str(&format!(" (alias {a})"));
        }
        s.push_str(&format!(
            "\n      type: {}\n      default: {}\n      {}\n",
            v.kind.describe(),
            v.default.replace('`', ""),
            v.doc
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_lists_every_variable() {
        let info = render_info();
        for v in VARS {
            assert!(info.contains(v.name), "{info}");
            assert!(info.contains(v.doc), "{info}");
        }
        assert!(info.contains("OpenSHMEM 1.6"), "{info}");
    }

    #[test]
    fn module_docs_are_current() {
        let src = include_str!("env.rs");
        let begin = "//! <!-- BEGIN GENERATED: shmem::env::render_markdown -->\n";
        let start = src.find(begin).expect("begin marker") + begin.len();
        let end = src.find("//! <!-- END GENERATED -->").expect("end marker");
        let documented: String = src[start..end]
            .lines()
            .map(|l| format!("{}\n", l.trim_start_matches("//! ")))
            .collect();
        assert_eq!(documented, render_markdown(), "update the table in env.rs");
    }
}
