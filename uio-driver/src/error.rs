//! The crate's error type.
//!
//! Every [`UioError`] names the device it concerns (the UIO name such as `exanet-ep0`, or the
//! label of an emulated endpoint) and, where there is one, the file that was being read,
//! written or mapped, so that a message on its own tells the operator where to look:
//!
//! ```text
//! uio device "exanet-ep0" (/sys/class/uio/uio3/maps/map1/size): invalid hex value "0xZZ"
//! ```
//!
//! It is not a recovery mechanism: callers match on [`UioError::kind`] only to tell the few
//! cases that need different handling (device absent, bad offset, IRQ channel closed).
//! Errors are plain values and are `Send + Sync`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong; carried by [`UioError`].
#[derive(Debug)]
#[non_exhaustive]
pub enum UioErrorKind {
    /// An operating-system call failed (open, read, write, mmap, poll, connect).
    Io(io::Error),
    /// A sysfs file that must hold a hexadecimal number held something else.
    InvalidHex {
        /// The offending text, without the trailing newline.
        value: String,
    },
    /// A sysfs file that must hold a decimal number held something else.
    InvalidDecimal {
        /// The offending text, without the trailing newline.
        value: String,
    },
    /// No UIO device with the requested name exists under the sysfs root.
    NotFound {
        /// Every device that was seen: `(N of uioN, name)`, sorted by N.
        seen: Vec<(u32, String)>,
    },
    /// The sysfs tree lists a map whose index is outside the UIO limit (`map0`..`map4`).
    TooManyMaps {
        /// The index that was found.
        index: usize,
    },
    /// The requested map does not exist on this device.
    NoSuchMap {
        /// The requested index.
        index: usize,
        /// The indices that do exist.
        available: Vec<usize>,
    },
    /// A map's description cannot be mapped as stated (zero size, offset beyond the map,
    /// size that does not fit the address space).
    BadMapLayout {
        /// Why.
        reason: String,
    },
    /// A register access lies (partly) outside the mapping.
    OutOfBounds {
        /// The map index.
        map: usize,
        /// Byte offset of the access from the start of the register block.
        offset: usize,
        /// Access width in bytes.
        width: usize,
        /// Length of the register block in bytes.
        len: usize,
    },
    /// A register access is not naturally aligned.
    Misaligned {
        /// The map index.
        map: usize,
        /// Byte offset of the access from the start of the register block.
        offset: usize,
        /// Access width in bytes (the required alignment).
        width: usize,
    },
    /// The interrupt channel reached end of file or hang-up (the emulator went away, or the
    /// device was removed).
    ChannelClosed,
    /// Writing the 4-byte IRQ control word did not complete in time or wrote fewer bytes.
    IrqControl {
        /// Why.
        reason: String,
    },
}

/// An error of this crate: a device, an optional file, and what went wrong.
#[derive(Debug)]
pub struct UioError {
    device: String,
    path: Option<PathBuf>,
    kind: UioErrorKind,
}

impl UioError {
    /// Creates an error about `device`, concerning the file `path` (if any).
    pub fn new(device: impl Into<String>, path: Option<&Path>, kind: UioErrorKind) -> Self {
        UioError {
            device: device.into(),
            path: path.map(Path::to_path_buf),
            kind,
        }
    }

    /// Shorthand for an [`UioErrorKind::Io`] error on a file.
    pub(crate) fn io(device: &str, path: &Path, err: io::Error) -> Self {
        UioError::new(device, Some(path), UioErrorKind::Io(err))
    }

    /// The device name (UIO name or emulator label) the error concerns.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The file involved, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What went wrong.
    pub fn kind(&self) -> &UioErrorKind {
        &self.kind
    }
}

impl fmt::Display for UioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "uio device {:?}", self.device)?;
        if let Some(path) = &self.path {
            write!(f, " ({})", path.display())?;
        }
        f.write_str(": ")?;
        match &self.kind {
            UioErrorKind::Io(err) => write!(f, "{err}"),
            UioErrorKind::InvalidHex { value } => write!(f, "invalid hex value {value:?}"),
            UioErrorKind::InvalidDecimal { value } => {
                write!(f, "invalid decimal value {value:?}")
            }
            UioErrorKind::NotFound { seen } => {
                f.write_str("not found; devices seen: ")?;
                if seen.is_empty() {
                    f.write_str("none")
                } else {
                    for (i, (index, name)) in seen.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "uio{index} {name:?}")?;
                    }
                    Ok(())
                }
            }
            UioErrorKind::TooManyMaps { index } => write!(
                f,
                "map index {index} exceeds the UIO limit of {} maps (map0..map{})",
                crate::MAX_MAPS,
                crate::MAX_MAPS - 1
            ),
            UioErrorKind::NoSuchMap { index, available } => {
                write!(f, "no map {index}; the device has maps {available:?}")
            }
            UioErrorKind::BadMapLayout { reason } => write!(f, "cannot map: {reason}"),
            UioErrorKind::OutOfBounds {
                map,
                offset,
                width,
                len,
            } => write!(
                f,
                "map {map}: {width}-byte access at offset {offset:#x} is outside the {len:#x}-byte register block"
            ),
            UioErrorKind::Misaligned { map, offset, width } => write!(
                f,
                "map {map}: {width}-byte access at offset {offset:#x} is not {width}-byte aligned"
            ),
            UioErrorKind::ChannelClosed => f.write_str("interrupt channel closed by the other end"),
            UioErrorKind::IrqControl { reason } => {
                write!(f, "interrupt control write failed: {reason}")
            }
        }
    }
}

impl std::error::Error for UioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            UioErrorKind::Io(err) => Some(err),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_device_file_and_value() {
        let err = UioError::new(
            "exanet-ep0",
            Some(Path::new("/sys/class/uio/uio3/maps/map1/size")),
            UioErrorKind::InvalidHex {
                value: "0xZZ".into(),
            },
        );
        assert_eq!(
            err.to_string(),
            "uio device \"exanet-ep0\" (/sys/class/uio/uio3/maps/map1/size): invalid hex value \"0xZZ\""
        );
    }

    #[test]
    fn not_found_lists_seen_devices() {
        let err = UioError::new(
            "exanet-ep9",
            Some(Path::new("/sys/class/uio")),
            UioErrorKind::NotFound {
                seen: vec![(0, "axi-dma".into()), (3, "exanet-ep0".into())],
            },
        );
        assert_eq!(
            err.to_string(),
            "uio device \"exanet-ep9\" (/sys/class/uio): not found; devices seen: uio0 \"axi-dma\", uio3 \"exanet-ep0\""
        );
        let none = UioError::new("x", None, UioErrorKind::NotFound { seen: vec![] });
        assert_eq!(
            none.to_string(),
            "uio device \"x\": not found; devices seen: none"
        );
    }

    #[test]
    fn io_errors_keep_their_source() {
        let err = UioError::io(
            "d",
            Path::new("/dev/uio0"),
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert!(std::error::Error::source(&err).is_some());
        assert!(
            err.to_string()
                .starts_with("uio device \"d\" (/dev/uio0): ")
        );
    }
}
