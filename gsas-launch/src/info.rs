//! `gsas-info` (installed as `oshmem_info` too): what this installation of gsas is, for a
//! user or a script, in the manner of Open MPI's `ompi_info` / `oshmem_info`.
//!
//! **What it is.** [`main`] prints the gsas version and the OpenSHMEM version the library
//! implements, how the installation was built (`share/gsas/build-info`, written by
//! `scripts/install`: target, profile, the C compilers, whether the verbs transport is in
//! `libshmem`), the transports, the limits (PEs of a job, contexts of a PE, PEs of a
//! service) and every environment variable with its default. `--parsable` prints the same
//! as `section:key:value` lines (values may contain `:`; a script splits at the first two).
//!
//! **What it is not.** It starts nothing and reads no cluster file: it describes the
//! installation, not a machine or a job.
//!
//! **Thread-safety.** Single-threaded; pure apart from reading one file.

use std::path::{Path, PathBuf};

/// The OpenSHMEM version `libshmem` implements (`SHMEM_MAJOR_VERSION`,
/// `SHMEM_MINOR_VERSION`; a test compares it with the library's).
pub const OPENSHMEM_VERSION: (i32, i32) = (1, 6);

/// The file `scripts/install` writes, relative to the prefix.
pub const BUILD_INFO: &str = "share/gsas/build-info";

/// What `gsas-info` knows, in order: `(section, key, value)`.
pub fn facts(prefix: Option<&Path>) -> Vec<(&'static str, String, String)> {
    let mut f: Vec<(&'static str, String, String)> = Vec::new();
    let mut put = |s: &'static str, k: &str, v: String| f.push((s, k.to_owned(), v));
    put("gsas", "version", env!("CARGO_PKG_VERSION").to_owned());
    put(
        "openshmem",
        "version",
        format!("{}.{}", OPENSHMEM_VERSION.0, OPENSHMEM_VERSION.1),
    );
    put("openshmem", "vendor", "gsas".to_owned());
    let build = prefix.and_then(|p| std::fs::read_to_string(p.join(BUILD_INFO)).ok());
    match prefix {
        Some(p) => put("install", "prefix", p.display().to_string()),
        None => put("install", "prefix", "unknown".to_owned()),
    }
    let build: Vec<(String, String)> = build
        .as_deref()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    if build.is_empty() {
        put(
            "build",
            "info",
            format!("none ({BUILD_INFO} is missing: not installed by scripts/install)"),
        );
    }
    for (k, v) in &build {
        put("build", k, v.clone());
    }
    let verbs = build
        .iter()
        .find(|(k, _)| k == "verbs")
        .map_or("unknown", |(_, v)| v.as_str());
    put(
        "transport",
        "shm",
        "yes (same-node PEs: loads, stores and CPU atomics on mapped memory)".to_owned(),
    );
    put(
        "transport",
        "udp",
        "yes (other nodes through their atomic services)".to_owned(),
    );
    put(
        "transport",
        "exanet",
        "yes (UIO mailboxes and DMA on the boards; exanet-emu elsewhere)".to_owned(),
    );
    put(
        "transport",
        "verbs",
        match verbs {
            "on" => "yes (InfiniBand/RoCE: RDMA and NIC atomics; libibverbs loaded at run time)"
                .to_owned(),
            "off" => "no (install with scripts/install --with-verbs)".to_owned(),
            other => other.to_owned(),
        },
    );
    put("limit", "pes_per_job", gsas_node::boot::MAX_PES.to_string());
    put(
        "limit",
        "contexts_per_pe",
        (gsas_node::MAX_CONTEXTS - 1).to_string(),
    );
    put(
        "limit",
        "pes_per_service",
        gsas_service::ServiceConfig::new(0, ([127, 0, 0, 1], 0).into(), PathBuf::new())
            .max_pes
            .to_string(),
    );
    for v in board_config::shmem_env::VARS {
        put("default", v.name, v.default.replace('`', ""));
    }
    for v in gsas_transport::config::VARS {
        put("default", v.name, v.default.replace('`', ""));
    }
    f
}

/// The installation prefix of the running program: the directory above its `bin/`.
fn own_prefix() -> Option<PathBuf> {
    let exe = std::fs::canonicalize(std::env::current_exe().ok()?).ok()?;
    let bin = exe.parent()?;
    (bin.file_name()? == "bin").then(|| bin.parent().map(Path::to_path_buf))?
}

/// The human form: one section after the other.
pub fn render(facts: &[(&'static str, String, String)]) -> String {
    let mut out = String::new();
    let mut last = "";
    for (s, k, v) in facts {
        if *s != last {
            let title = match *s {
                "gsas" => "gsas",
                "openshmem" => "OpenSHMEM",
                "install" => "Installation",
                "build" => "Build",
                "transport" => "Transports",
                "limit" => "Limits",
                _ => "Environment variables (defaults)",
            };
            out.push_str(&format!(
                "{}{title}\n",
                if last.is_empty() { "" } else { "\n" }
            ));
            last = s;
        }
        out.push_str(&format!("  {k:<26} {v}\n"));
    }
    out
}

/// The `--parsable` form: `section:key:value` lines.
pub fn render_parsable(facts: &[(&'static str, String, String)]) -> String {
    facts
        .iter()
        .map(|(s, k, v)| format!("{s}:{k}:{v}\n"))
        .collect()
}

const HELP: &str = "\
Usage: gsas-info [--parsable] [--help] [--version]

Prints what this installation of gsas is: its version and the OpenSHMEM version of
libshmem, how it was built (share/gsas/build-info), the transports, the limits and
every environment variable with its default. Also installed as oshmem_info.

  --parsable   section:key:value lines, for scripts (e.g. openshmem:version:1.6)
  --help       this text
  --version    the version line
";

/// The program: prints the facts; 0, or 2 for a bad argument.
pub fn main(name: &str, args: impl IntoIterator<Item = String>) -> i32 {
    let mut parsable = false;
    for a in args {
        match a.as_str() {
            "--parsable" | "-parsable" | "--parseable" => parsable = true,
            "-h" | "--help" => {
                print!("{HELP}");
                return 0;
            }
            "-V" | "--version" => {
                println!(
                    "{name} (gsas) {}: OpenSHMEM {}.{}",
                    env!("CARGO_PKG_VERSION"),
                    OPENSHMEM_VERSION.0,
                    OPENSHMEM_VERSION.1
                );
                return 0;
            }
            other => {
                eprintln!("{name}: unknown argument {other:?} (--parsable, --help, --version)");
                return 2;
            }
        }
    }
    let facts = facts(own_prefix().as_deref());
    if parsable {
        print!("{}", render_parsable(&facts));
    } else {
        print!("{}", render(&facts));
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_name_the_versions_the_transports_and_every_variable() {
        let dir = std::env::temp_dir().join(format!("gsas-info-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("share/gsas")).unwrap();
        std::fs::write(
            dir.join(BUILD_INFO),
            "target=x86_64-unknown-linux-gnu\nprofile=release\nverbs=off\n",
        )
        .unwrap();
        let f = facts(Some(&dir));
        let p = render_parsable(&f);
        assert!(p.contains("openshmem:version:1.6\n"), "{p}");
        assert!(p.contains("build:profile:release\n"), "{p}");
        assert!(p.contains("transport:verbs:no (install with"), "{p}");
        assert!(p.contains("limit:pes_per_job:65536\n"), "{p}");
        assert!(p.contains("default:SHMEM_SYMMETRIC_SIZE:"), "{p}");
        assert!(p.contains("default:SHMEM_QUIET:"), "{p}");
        assert!(p.contains("default:GSAS_UDP_MTU:"), "{p}");
        assert!(p.lines().all(|l| l.splitn(3, ':').count() == 3), "{p}");
        let human = render(&f);
        assert!(
            human.contains("Transports\n") && human.contains("Limits\n"),
            "{human}"
        );
        let none = render_parsable(&facts(None));
        assert!(none.contains("build:info:none ("), "{none}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
