//! This crate's `exanet-emu` started through the workspace's test kit (`gsas-tests`): the
//! build of this target and profile, under qemu-user when the tests run there, never the
//! host build that `GSAS_TEST_EXANET_EMU` names (these are the emulator's own tests).

#![allow(dead_code)]

pub use gsas_tests::emu::{Emu as EmuProc, wait_for};

/// Starts this crate's emulator: `exanet-emu --root <tmp> --nodes 4 --eps <eps>` plus
/// `extra` (see `gsas_tests::emu::Emu::start_with`).
pub fn start(tag: &str, eps: usize, extra: &[&str]) -> EmuProc {
    let cmd = gsas_tests::launch::launch().command(env!("CARGO_BIN_EXE_exanet-emu"));
    EmuProc::start_with(cmd, tag, eps, extra)
}
