//! Opening the maps of a device: the [`UioSource`] trait and its two implementations.
//!
//! What it is:
//! * [`KernelSource`] opens `/dev/uioN` read-write once and maps map N the way the UIO core
//!   requires: `round_up(size, page_size)` bytes at file offset `N * page_size`, then the
//!   register block starts at the sysfs `offset` inside that mapping and is
//!   `min(size, mapped_len - offset)` bytes long. (`uio_pdrv_genirq` on current kernels
//!   reports a page-rounded `size` that already includes `offset`; the `min` keeps both that
//!   and older kernels inside the mapping.)
//! * [`EmuSource`] opens the emulator's per-map backing files, `<dir>/map<N>` (for the
//!   emulator layout, `<root>/ep<k>/map<N>`), and maps each whole file at offset 0: a regular
//!   file cannot select a map by mmap offset the way `/dev/uioN` does (model section 13). The
//!   file's length is the map's length; an empty file is refused.
//!
//! What it is not: it does not discover devices (see [`crate::UioPaths`]) and does not handle
//! interrupts (see [`crate::IrqSource`]), because an mmappable file cannot also block on
//! `read`.
//!
//! Thread safety: both sources are `Send + Sync`; `open_map` may be called from any thread.
//! Each call creates a new, independent [`UioMapping`]; mapping the same map twice gives two
//! views of the same memory, and coordinating them is the caller's job.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{UioError, UioErrorKind};
use crate::irq::KernelIrq;
use crate::mapping::{MapRequest, UioMapping};
use crate::sysfs::UioDevice;
use crate::{MAX_MAPS, page_size};

/// Something that can map the memory regions of one UIO-style device.
///
/// Implemented by [`KernelSource`] (a real `/dev/uioN`) and [`EmuSource`] (the emulator's
/// map files). Drivers are generic over it; nothing on a per-access path goes through it.
pub trait UioSource {
    /// The device name (or emulator label) used in errors.
    fn device_name(&self) -> &str;

    /// Maps map `index` and returns the owning mapping.
    fn open_map(&self, index: usize) -> Result<UioMapping, UioError>;
}

/// Maps of a real UIO device through its `/dev/uioN` node.
#[derive(Debug)]
pub struct KernelSource {
    device: UioDevice,
    file: Arc<File>,
}

impl KernelSource {
    /// Opens the device node of `device` read-write.
    pub fn open(device: UioDevice) -> Result<Self, UioError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(device.dev_path())
            .map_err(|e| UioError::io(device.name(), device.dev_path(), e))?;
        Ok(KernelSource {
            device,
            file: Arc::new(file),
        })
    }

    /// The device description this source was opened from.
    pub fn device(&self) -> &UioDevice {
        &self.device
    }

    /// The interrupt handle of this device, sharing this source's descriptor.
    pub fn irq(&self) -> KernelIrq {
        KernelIrq::from_shared(&self.device, Arc::clone(&self.file))
    }
}

impl UioSource for KernelSource {
    fn device_name(&self) -> &str {
        self.device.name()
    }

    fn open_map(&self, index: usize) -> Result<UioMapping, UioError> {
        let name = self.device.name();
        let info = self.device.map(index)?;
        let dir = self
            .device
            .sysfs_dir()
            .join("maps")
            .join(format!("map{index}"));
        let bad =
            |reason: String| UioError::new(name, Some(&dir), UioErrorKind::BadMapLayout { reason });
        let page = page_size();
        if info.size == 0 {
            return Err(bad("size is 0".into()));
        }
        let too_big = || {
            bad(format!(
                "size {:#x} does not fit the address space",
                info.size
            ))
        };
        let size = usize::try_from(info.size).map_err(|_| too_big())?;
        let map_len = size
            .checked_next_multiple_of(page)
            .filter(|len| *len <= isize::MAX as usize)
            .ok_or_else(too_big)?;
        let start = usize::try_from(info.offset)
            .ok()
            .filter(|offset| *offset < map_len)
            .ok_or_else(|| {
                bad(format!(
                    "offset {:#x} is not inside the {map_len:#x}-byte mapping",
                    info.offset
                ))
            })?;
        let len = (map_len - start).min(size);
        UioMapping::map(MapRequest {
            device: name,
            path: self.device.dev_path(),
            file: Arc::clone(&self.file),
            map_index: index,
            file_offset: (index * page) as u64,
            map_len,
            start,
            len,
        })
    }
}

/// Maps of an emulated device: one backing file per map, `<dir>/map<N>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmuSource {
    label: String,
    dir: PathBuf,
}

impl EmuSource {
    /// A source over the map files in `dir`, reported as `label` in errors.
    pub fn new(label: impl Into<String>, dir: impl Into<PathBuf>) -> Self {
        EmuSource {
            label: label.into(),
            dir: dir.into(),
        }
    }

    /// The emulator layout: endpoint `k` under `root` is `<root>/ep<k>/`, labelled
    /// `exanet-ep<k>` like the real UIO device.
    pub fn endpoint(root: &Path, k: u32) -> Self {
        EmuSource::new(format!("exanet-ep{k}"), root.join(format!("ep{k}")))
    }

    /// The directory holding the map files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The backing file of map `index`.
    pub fn map_path(&self, index: usize) -> PathBuf {
        self.dir.join(format!("map{index}"))
    }

    fn available(&self) -> Vec<usize> {
        (0..MAX_MAPS)
            .filter(|i| self.map_path(*i).is_file())
            .collect()
    }
}

impl UioSource for EmuSource {
    fn device_name(&self) -> &str {
        &self.label
    }

    fn open_map(&self, index: usize) -> Result<UioMapping, UioError> {
        let path = self.map_path(index);
        let no_such_map = || {
            UioError::new(
                &self.label,
                Some(&path),
                UioErrorKind::NoSuchMap {
                    index,
                    available: self.available(),
                },
            )
        };
        if index >= MAX_MAPS {
            return Err(no_such_map());
        }
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_such_map()),
            Err(e) => return Err(UioError::io(&self.label, &path, e)),
        };
        let size = file
            .metadata()
            .map_err(|e| UioError::io(&self.label, &path, e))?
            .len();
        let bad = |reason: String| {
            UioError::new(
                &self.label,
                Some(&path),
                UioErrorKind::BadMapLayout { reason },
            )
        };
        if size == 0 {
            return Err(bad("the map file is empty".into()));
        }
        let len = usize::try_from(size)
            .ok()
            .filter(|len| *len <= isize::MAX as usize)
            .ok_or_else(|| bad(format!("size {size:#x} does not fit the address space")))?;
        UioMapping::map(MapRequest {
            device: &self.label,
            path: &path,
            file: Arc::new(file),
            map_index: index,
            file_offset: 0,
            map_len: len,
            start: 0,
            len,
        })
    }
}
