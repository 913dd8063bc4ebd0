//! Writing UIO sysfs descriptions in the kernel's format.
//!
//! What it is: the inverse of [`crate::sysfs`]. It writes `uioN/{name,version,event}` and
//! `uioN/maps/mapM/{name,addr,size,offset}` under a directory, formatted as the kernel does
//! (`addr`/`size` as `0x` plus 16 hex digits, `offset` as `0x%llx`, `event` in decimal), so
//! that the emulator can publish its endpoints the way a real kernel would, and tests can
//! build device trees. The device nodes (`/dev/uioN` or the emulator's map files) are not
//! created here.
//!
//! What it is not: a validator. It writes what it is given, including map indices beyond the
//! UIO limit, so that tests can fabricate malformed trees.
//!
//! Thread safety: plain file writes. [`write_event`] replaces the `event` file atomically
//! (write to a temporary file, then rename), so a concurrent reader never sees a partial
//! number; concurrent writers of the same device race as file writers do.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::sysfs::MapInfo;

/// Writes the sysfs description of `uio<index>` under `sysfs_root` and returns its
/// directory. The event count starts at 0. A map whose `name` is `None` gets no `name` file.
pub fn write_device(
    sysfs_root: &Path,
    index: u32,
    name: &str,
    version: &str,
    maps: &[MapInfo],
) -> io::Result<PathBuf> {
    let dir = sysfs_root.join(format!("uio{index}"));
    fs::create_dir_all(&dir)?;
    fs::write(dir.join("name"), format!("{name}\n"))?;
    fs::write(dir.join("version"), format!("{version}\n"))?;
    write_event(sysfs_root, index, 0)?;
    for map in maps {
        let map_dir = dir.join("maps").join(format!("map{}", map.index));
        fs::create_dir_all(&map_dir)?;
        if let Some(map_name) = &map.name {
            fs::write(map_dir.join("name"), format!("{map_name}\n"))?;
        }
        fs::write(map_dir.join("addr"), format!("0x{:016x}\n", map.addr))?;
        fs::write(map_dir.join("size"), format!("0x{:016x}\n", map.size))?;
        fs::write(map_dir.join("offset"), format!("0x{:x}\n", map.offset))?;
    }
    Ok(dir)
}

/// Sets the `event` count of `uio<index>` under `sysfs_root`, replacing the file atomically.
pub fn write_event(sysfs_root: &Path, index: u32, count: u32) -> io::Result<()> {
    let dir = sysfs_root.join(format!("uio{index}"));
    let tmp = dir.join(".event.tmp");
    fs::write(&tmp, format!("{count}\n"))?;
    fs::rename(&tmp, dir.join("event"))
}
