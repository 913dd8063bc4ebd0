//! Writes the configuration reference rendered from the key table.
//!
//! `cargo run -p board-config --example gen-docs` rewrites `docs/config.md` at the
//! workspace root; `cargo run -p board-config --example gen-docs -- PATH` writes PATH
//! instead, and `-- -` prints to standard output.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let text = board_config::keys::render_markdown();
    let target = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md")),
        PathBuf::from,
    );
    if target.as_os_str() == "-" {
        return match std::io::stdout().write_all(text.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gen-docs: cannot write to standard output: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match std::fs::write(&target, text) {
        Ok(()) => {
            eprintln!("gen-docs: wrote {}", target.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gen-docs: cannot write {}: {e}", target.display());
            ExitCode::FAILURE
        }
    }
}
