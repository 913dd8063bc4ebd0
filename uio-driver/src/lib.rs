//! Linux UIO for gsas: find a device by name, map its memory regions, handle its interrupt.
//!
//! What it is: the lowest layer of the Exanet path (see `exanet-ni-model.md`, sections 2, 8
//! and 13). It
//! * discovers UIO devices through sysfs ([`UioPaths`], [`UioDevice`], [`MapInfo`]) with
//!   configurable sysfs and `/dev` roots, so that tests and the emulator can use fabricated
//!   trees ([`fabricate`] writes them in the kernel's format);
//! * maps memory regions through the [`UioSource`] trait: [`KernelSource`] mmaps map N of
//!   `/dev/uioN` at offset `N * page_size` and applies the sysfs `offset`; [`EmuSource`] maps
//!   the emulator's one-file-per-map backing files at offset 0;
//! * exposes each region as a [`UioMapping`], the single owner of the mmap (and of a handle on
//!   the descriptor), with bounds- and alignment-checked volatile 32/64-bit accessors;
//! * handles interrupts through the [`IrqSource`] trait: [`KernelIrq`] on `/dev/uioN`
//!   (`write(1)` re-enables, a 4-byte `read` after `poll` waits with a timeout, sysfs `event`
//!   counts) and [`EmuIrq`] on a Unix stream socket to the emulator, whose exact protocol is
//!   documented in [`irq`].
//!
//! What it is not: it knows nothing of the Exanet register layout, rings or barriers (that is
//! the `exanet` crate), performs no `memcpy` on device memory, and never pretends hardware is
//! present: tests run against fabricated sysfs trees and backing files, and the tests that
//! need a real `/dev/uioN` are `#[ignore]`d and selected with `GSAS_UIO_DEVICE=<name>`.
//!
//! Thread safety: discovery types and sources are `Send + Sync`. [`UioMapping`] is
//! `Send + Sync` with `&self` loads and `&mut self` checked stores. Interrupt handles are
//! `Send` and used through `&mut self` by one thread. Nothing here spawns threads or blocks
//! without a timeout.
//!
//! # Example
//!
//! A fabricated device (one 4 KiB map at sysfs offset 0) backed by a regular file stands in
//! for `/dev/uio0`; on a board, `UioPaths::system()` finds the real one.
//!
//! ```
//! use uio_driver::{fabricate, page_size, KernelSource, MapInfo, UioPaths, UioSource};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let root = std::env::temp_dir().join(format!("uio-doc-{}", std::process::id()));
//! let (sysfs, dev) = (root.join("sys"), root.join("dev"));
//! let map = MapInfo { index: 0, name: Some("regs".into()), addr: 0xa001_0000, size: 0x1000, offset: 0 };
//! fabricate::write_device(&sysfs, 0, "exanet-ep0", "devicetree", &[map])?;
//! std::fs::create_dir_all(&dev)?;
//! std::fs::write(dev.join("uio0"), vec![0u8; page_size()])?;
//!
//! let device = UioPaths::new(&sysfs, &dev).find("exanet-ep0")?;
//! let mut regs = KernelSource::open(device)?.open_map(0)?;
//! regs.write32(0x44, 7)?;
//! assert_eq!(regs.read32(0x44)?, 7);
//! assert!(regs.read32(0x1000).is_err()); // out of bounds: an error, not a panic
//! # drop(regs);
//! # std::fs::remove_dir_all(&root)?;
//! # Ok(())
//! # }
//! ```

mod error;
pub mod fabricate;
pub mod irq;
mod mapping;
mod source;
pub mod sysfs;

pub use error::{UioError, UioErrorKind};
pub use irq::{EmuIrq, IrqSource, KernelIrq};
pub use mapping::UioMapping;
pub use source::{EmuSource, KernelSource, UioSource};
pub use sysfs::{MapInfo, UioDevice, UioPaths};

/// The most maps a UIO device can have (`MAX_UIO_MAPS` in the kernel): `map0`..`map4`.
pub const MAX_MAPS: usize = 5;

/// The system page size, the unit of UIO map offsets and lengths.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    // POSIX requires _SC_PAGESIZE; fall back to the smallest Linux page if it ever fails.
    usize::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .unwrap_or(4096)
}
