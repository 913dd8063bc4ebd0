//! `softverbs-env`: prints the shell commands that make the processes started from a shell
//! use the software verbs device as several emulated nodes, for a job across emulated verbs
//! nodes on one machine (`docs/verbs.md`, "Emulated verbs nodes on one machine"):
//!
//! ```sh
//! eval "$(target/debug/softverbs-env --devices 2 --dir /tmp/sv-demo)"
//! ```
//!
//! sets `LD_LIBRARY_PATH` (the software device first), `SOFTVERBS_DIR` and
//! `SOFTVERBS_DEVICES`; a cluster file's verbs nodes then name `softverbs0`,
//! `softverbs1`, ... as their `verbs_device`.

use std::process::ExitCode;

const USAGE: &str = "usage: softverbs-env [--devices N] [--dir DIR]\n\
  Prints `export` lines for sh: LD_LIBRARY_PATH (the software device's directory first),\n\
  SOFTVERBS_DIR (default /tmp/softverbs-<uid>) and SOFTVERBS_DEVICES (default 2).\n\
  Use: eval \"$(softverbs-env --devices 2 --dir /tmp/sv-demo)\"";

/// Quotes `s` for a POSIX shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn main() -> ExitCode {
    let mut devices = 2u32;
    let mut dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = match a.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "--devices" | "--dir" => args.next(),
            _ => None,
        };
        match (a.as_str(), value) {
            ("--devices", Some(v)) if v.parse::<u32>().is_ok_and(|n| (1..=16).contains(&n)) => {
                devices = v.parse().unwrap_or(2);
            }
            ("--dir", Some(v)) if v.len() <= 70 => dir = Some(v),
            _ => {
                eprintln!(
                    "softverbs-env: bad argument {a:?} (--devices takes 1..16, --dir at most 70 bytes)\n{USAGE}"
                );
                return ExitCode::from(2);
            }
        }
    }
    let lib = verbs_emu::library_path();
    println!("export LD_LIBRARY_PATH={}", quote(&lib.to_string_lossy()));
    if let Some(d) = dir {
        println!("export {}={}", verbs_emu::var::DIR, quote(&d));
    }
    println!("export {}={devices}", verbs_emu::var::DEVICES);
    ExitCode::SUCCESS
}
