//! Discovery of UIO devices through sysfs.
//!
//! What it is: a reader of the text files the kernel's UIO core publishes for each device,
//! `<sysfs>/uioN/{name,version,event}` and `<sysfs>/uioN/maps/mapM/{name,addr,size,offset}`,
//! with both roots configurable ([`UioPaths`]) so that tests and the emulator can point it at
//! a fabricated tree. Numbers are parsed strictly: hex files must hold hex digits (an optional
//! `0x`/`0X` prefix, at most 16 digits), `event` a decimal `u32`; anything else is an error
//! that names the file and quotes the text.
//!
//! Decisions a caller must know:
//! * A map directory whose index is 5 or more (beyond the UIO limit `map0`..`map4`) makes
//!   parsing of *that device* fail with [`UioErrorKind::TooManyMaps`]: the kernel never
//!   creates one, so such a tree is malformed, and silently ignoring it could hide a broken
//!   emulator. Other devices in the same tree are unaffected.
//! * `maps/mapM/name` may be absent (older kernels); `addr`, `size` and `offset` are required.
//!   A device without a `maps` directory has no maps.
//! * If several devices share a name, [`UioPaths::find`] returns the lowest-numbered one; use
//!   [`UioPaths::open_index`] to pick another.
//!
//! What it is not: it does not open `/dev/uioN` or map anything (see [`crate::KernelSource`]),
//! and it does not watch for hot-plug. Everything here is a plain read of small files: the
//! types are `Send + Sync` and the functions may be called from any thread.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::MAX_MAPS;
use crate::error::{UioError, UioErrorKind};

/// The default sysfs class directory of UIO devices.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys/class/uio";
/// The default directory holding the `uioN` device nodes.
pub const DEFAULT_DEV_ROOT: &str = "/dev";

/// Where to look for UIO devices: the sysfs class directory and the device-node directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UioPaths {
    sysfs: PathBuf,
    dev: PathBuf,
}

impl Default for UioPaths {
    fn default() -> Self {
        UioPaths::system()
    }
}

/// One map of a UIO device, as described by `maps/mapM/*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapInfo {
    /// The map index M (`0..5`); map M is mmapped at file offset `M * page_size`.
    pub index: usize,
    /// The map's name (`maps/mapM/name`), absent on older kernels.
    pub name: Option<String>,
    /// Physical (or kernel virtual) address of the map (`addr`); informational.
    pub addr: u64,
    /// Size of the map in bytes (`size`).
    pub size: u64,
    /// Where the memory block starts within the first mapped page (`offset`).
    pub offset: u64,
}

/// A discovered UIO device: its sysfs description and the path of its device node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UioDevice {
    index: u32,
    name: String,
    version: String,
    sysfs_dir: PathBuf,
    dev_path: PathBuf,
    maps: Vec<MapInfo>,
}

impl UioPaths {
    /// The real system locations, `/sys/class/uio` and `/dev`.
    pub fn system() -> Self {
        UioPaths::new(DEFAULT_SYSFS_ROOT, DEFAULT_DEV_ROOT)
    }

    /// Custom locations (a fabricated tree, or an emulator root).
    pub fn new(sysfs_root: impl Into<PathBuf>, dev_root: impl Into<PathBuf>) -> Self {
        UioPaths {
            sysfs: sysfs_root.into(),
            dev: dev_root.into(),
        }
    }

    /// The sysfs class directory (`/sys/class/uio` by default).
    pub fn sysfs_root(&self) -> &Path {
        &self.sysfs
    }

    /// The device-node directory (`/dev` by default).
    pub fn dev_root(&self) -> &Path {
        &self.dev
    }

    /// Lists every UIO device under the sysfs root as `(N of uioN, name)`, sorted by N.
    ///
    /// Entries whose name is not `uio<decimal>` are skipped.
    pub fn list(&self) -> Result<Vec<(u32, String)>, UioError> {
        self.scan("*")
    }

    /// Finds the device called `name` and reads its description.
    ///
    /// If no device has that name the error lists every device that was seen.
    pub fn find(&self, name: &str) -> Result<UioDevice, UioError> {
        let seen = self.scan(name)?;
        match seen.iter().find(|(_, n)| n == name) {
            Some(&(index, _)) => self.read_device(index, name),
            None => Err(UioError::new(
                name,
                Some(&self.sysfs),
                UioErrorKind::NotFound { seen },
            )),
        }
    }

    /// Reads the description of `uio<index>` directly.
    pub fn open_index(&self, index: u32) -> Result<UioDevice, UioError> {
        let label = format!("uio{index}");
        let name = read_text(&label, &self.sysfs.join(&label).join("name"))?;
        self.read_device(index, &name)
    }

    fn scan(&self, label: &str) -> Result<Vec<(u32, String)>, UioError> {
        let entries = fs::read_dir(&self.sysfs).map_err(|e| UioError::io(label, &self.sysfs, e))?;
        let mut seen = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| UioError::io(label, &self.sysfs, e))?;
            let file_name = entry.file_name();
            let Some(index) = file_name
                .to_str()
                .and_then(|s| s.strip_prefix("uio"))
                .and_then(parse_decimal)
            else {
                continue;
            };
            let name = read_text(label, &entry.path().join("name"))?;
            seen.push((index, name));
        }
        seen.sort();
        Ok(seen)
    }

    fn read_device(&self, index: u32, name: &str) -> Result<UioDevice, UioError> {
        let sysfs_dir = self.sysfs.join(format!("uio{index}"));
        let version = read_text(name, &sysfs_dir.join("version"))?;
        let maps = read_maps(name, &sysfs_dir.join("maps"))?;
        Ok(UioDevice {
            index,
            name: name.to_owned(),
            version,
            dev_path: self.dev.join(format!("uio{index}")),
            sysfs_dir,
            maps,
        })
    }
}

impl UioDevice {
    /// N of `uioN`.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The device name (`name`), e.g. `exanet-ep0`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver version string (`version`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The device's sysfs directory, `<sysfs>/uioN`.
    pub fn sysfs_dir(&self) -> &Path {
        &self.sysfs_dir
    }

    /// The device node, `<dev>/uioN`.
    pub fn dev_path(&self) -> &Path {
        &self.dev_path
    }

    /// The maps, sorted by index (at most [`MAX_MAPS`]).
    pub fn maps(&self) -> &[MapInfo] {
        &self.maps
    }

    /// The map with index `index`, or [`UioErrorKind::NoSuchMap`].
    pub fn map(&self, index: usize) -> Result<&MapInfo, UioError> {
        self.maps.iter().find(|m| m.index == index).ok_or_else(|| {
            UioError::new(
                &self.name,
                Some(&self.sysfs_dir.join("maps")),
                UioErrorKind::NoSuchMap {
                    index,
                    available: self.maps.iter().map(|m| m.index).collect(),
                },
            )
        })
    }

    /// The path of the `event` file (total interrupt count).
    pub fn event_path(&self) -> PathBuf {
        self.sysfs_dir.join("event")
    }

    /// Reads the current total interrupt count from sysfs `event`.
    pub fn event_count(&self) -> Result<u32, UioError> {
        read_event(&self.name, &self.event_path())
    }
}

/// Reads a decimal `u32` event count from `path`.
pub(crate) fn read_event(device: &str, path: &Path) -> Result<u32, UioError> {
    let text = read_text(device, path)?;
    parse_decimal(&text).ok_or_else(|| {
        UioError::new(
            device,
            Some(path),
            UioErrorKind::InvalidDecimal { value: text },
        )
    })
}

fn read_maps(device: &str, maps_dir: &Path) -> Result<Vec<MapInfo>, UioError> {
    let entries = match fs::read_dir(maps_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(UioError::io(device, maps_dir, e)),
    };
    let mut maps = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| UioError::io(device, maps_dir, e))?;
        let file_name = entry.file_name();
        let Some(index) = file_name
            .to_str()
            .and_then(|s| s.strip_prefix("map"))
            .and_then(parse_decimal)
        else {
            continue;
        };
        let index = index as usize;
        let dir = entry.path();
        if index >= MAX_MAPS {
            return Err(UioError::new(
                device,
                Some(&dir),
                UioErrorKind::TooManyMaps { index },
            ));
        }
        let name = match fs::read_to_string(dir.join("name")) {
            Ok(text) => Some(text.trim_end().to_owned()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(UioError::io(device, &dir.join("name"), e)),
        };
        maps.push(MapInfo {
            index,
            name,
            addr: read_hex(device, &dir.join("addr"))?,
            size: read_hex(device, &dir.join("size"))?,
            offset: read_hex(device, &dir.join("offset"))?,
        });
    }
    maps.sort_by_key(|m| m.index);
    Ok(maps)
}

fn read_text(device: &str, path: &Path) -> Result<String, UioError> {
    fs::read_to_string(path)
        .map(|text| text.trim_end().to_owned())
        .map_err(|e| UioError::io(device, path, e))
}

fn read_hex(device: &str, path: &Path) -> Result<u64, UioError> {
    let text = read_text(device, path)?;
    parse_hex(&text)
        .ok_or_else(|| UioError::new(device, Some(path), UioErrorKind::InvalidHex { value: text }))
}

/// Parses `0x1000`, `0X1000` or `1000` as hexadecimal; `None` for anything else (empty,
/// signs, non-hex characters, more than 64 bits).
pub(crate) fn parse_hex(text: &str) -> Option<u64> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Parses a plain decimal `u32` (digits only).
pub(crate) fn parse_decimal(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_values() {
        assert_eq!(parse_hex("0x00001000"), Some(0x1000));
        assert_eq!(parse_hex("0X1f"), Some(0x1f));
        assert_eq!(parse_hex("a0010000"), Some(0xa001_0000));
        assert_eq!(parse_hex("0x0"), Some(0));
        assert_eq!(parse_hex("0xffffffffffffffff"), Some(u64::MAX));
        for bad in [
            "",
            "0x",
            "0xZZ",
            "+1f",
            "-1",
            "0x 10",
            "0x1_000",
            "0x10000000000000000",
        ] {
            assert_eq!(parse_hex(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn decimal_values() {
        assert_eq!(parse_decimal("0"), Some(0));
        assert_eq!(parse_decimal("4294967295"), Some(u32::MAX));
        for bad in ["", "4294967296", "+3", "3a", " 3"] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
    }
}
