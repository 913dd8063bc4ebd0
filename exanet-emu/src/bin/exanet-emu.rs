//! `exanet-emu`: runs the Exanet NI emulator until SIGTERM or SIGINT, then removes its root
//! directory. See `exanet::emu` for the layout and control commands, `--help` for usage.

use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cfg, level) = match exanet_emu::emu::parse_args(&args) {
        Ok(parsed) => parsed,
        Err(e) if e.is_empty() => {
            print!("{}", exanet_emu::emu::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("exanet-emu: {e}\n\n{}", exanet_emu::emu::USAGE);
            return ExitCode::from(2);
        }
    };
    exanet_emu::emu::init_logger(level);
    if let Err(e) = exanet_emu::emu::install_termination_handlers() {
        log::error!("cannot install signal handlers: {e}");
        return ExitCode::FAILURE;
    }
    let emu = match exanet_emu::emu::Emulator::start(cfg) {
        Ok(emu) => emu,
        Err(e) => {
            log::error!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    while !exanet_emu::emu::terminated() {
        std::thread::sleep(Duration::from_millis(50));
    }
    log::info!("signal received; shutting down");
    match emu.shutdown() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("shutdown: {e}");
            ExitCode::FAILURE
        }
    }
}
