//! One mapped UIO memory region and its register accessors.
//!
//! What it is: [`UioMapping`], the single owner of one `mmap` of a UIO map (or of an emulator
//! map file) together with the file descriptor it came from. It exposes the base pointer and
//! length of the register block (the sysfs `offset` already applied) and aligned volatile
//! 32-bit and 64-bit loads and stores at byte offsets. The checked accessors return
//! [`UioErrorKind::OutOfBounds`] or [`UioErrorKind::Misaligned`] instead of panicking; the
//! `*_unchecked` ones are `unsafe` and leave those checks to the caller.
//!
//! What it is not: a register model or a barrier provider. It performs single volatile
//! accesses and nothing else: no `memcpy`, no device barriers (`dmb oshst`/`oshld` on arm64)
//! and no atomics. Ordering against a doorbell is the job of the driver built on top (the
//! `exanet` crate's register-access trait).
//!
//! Thread safety: `UioMapping` is `Send + Sync`. Loads take `&self`; the checked stores take
//! `&mut self`, so safe code can never race a store against another access in this process
//! (the device or an emulator process writing the same memory is outside Rust's model and is
//! what volatile accesses are for). Code that needs stores from several threads uses the
//! `unsafe` unchecked accessors or [`UioMapping::as_ptr`] and takes on that proof.
//! `Drop` unmaps the region, then closes the descriptor (if no other owner holds it).

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{UioError, UioErrorKind};

/// An owned memory mapping of one UIO map.
pub struct UioMapping {
    // Field order is drop order: unmap before the descriptor is released.
    mmap: MmapRaw,
    _file: Arc<File>,
    /// Offset of the register block inside the mapping (the sysfs `offset`).
    start: usize,
    /// Length of the register block.
    len: usize,
    map_index: usize,
    device: String,
    path: PathBuf,
}

/// Where and how much to map; built by the sources.
pub(crate) struct MapRequest<'a> {
    pub device: &'a str,
    pub path: &'a Path,
    pub file: Arc<File>,
    pub map_index: usize,
    /// File offset passed to `mmap` (a multiple of the page size).
    pub file_offset: u64,
    /// Bytes to map (a multiple of the page size for kernel maps).
    pub map_len: usize,
    /// Offset of the register block inside the mapping.
    pub start: usize,
    /// Length of the register block; `start + len <= map_len`.
    pub len: usize,
}

impl UioMapping {
    pub(crate) fn map(req: MapRequest<'_>) -> Result<Self, UioError> {
        debug_assert!(req.len > 0 && req.start + req.len <= req.map_len);
        let mmap = MmapOptions::new()
            .offset(req.file_offset)
            .len(req.map_len)
            .map_raw(&*req.file)
            .map_err(|e| UioError::io(req.device, req.path, e))?;
        Ok(UioMapping {
            mmap,
            _file: req.file,
            start: req.start,
            len: req.len,
            map_index: req.map_index,
            device: req.device.to_owned(),
            path: req.path.to_path_buf(),
        })
    }

    /// Base address of the register block (the mapping plus the sysfs `offset`).
    ///
    /// The pointer is valid for [`len`](Self::len) bytes while `self` lives. Accesses through
    /// it must be volatile, aligned and at most 64 bits wide, and must not race with other
    /// accesses made through this process.
    pub fn as_ptr(&self) -> *mut u8 {
        // `start < mmap.len()` was checked by the source that built the request.
        self.mmap.as_mut_ptr().wrapping_add(self.start)
    }

    /// Length of the register block in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: zero-length maps are refused when mapping.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Length of the whole `mmap` (page-rounded, includes the sysfs `offset`).
    pub fn mapped_len(&self) -> usize {
        self.mmap.len()
    }

    /// The map index (M of `mapM`).
    pub fn map_index(&self) -> usize {
        self.map_index
    }

    /// The device name or emulator label.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The file that was mapped (`/dev/uioN` or the emulator's map file).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that a `width`-byte access (`width` is 4 or 8) at `offset` is inside the block
    /// and naturally aligned in absolute address terms, so that a sysfs `offset` that breaks
    /// alignment is caught too.
    fn check(&self, offset: usize, width: usize) -> Result<(), UioError> {
        let inside = offset.checked_add(width).is_some_and(|end| end <= self.len);
        if !inside {
            return Err(self.error(UioErrorKind::OutOfBounds {
                map: self.map_index,
                offset,
                width,
                len: self.len,
            }));
        }
        if (self.as_ptr() as usize).wrapping_add(offset) % width != 0 {
            return Err(self.error(UioErrorKind::Misaligned {
                map: self.map_index,
                offset,
                width,
            }));
        }
        Ok(())
    }

    fn error(&self, kind: UioErrorKind) -> UioError {
        UioError::new(&self.device, Some(&self.path), kind)
    }

    /// Volatile 32-bit load at byte `offset`.
    pub fn read32(&self, offset: usize) -> Result<u32, UioError> {
        self.check(offset, 4)?;
        // SAFETY: `check` proved the 4 bytes lie inside the mapping and are 4-byte aligned;
        // no safe code can store concurrently because stores need `&mut self`.
        Ok(unsafe { self.read32_unchecked(offset) })
    }

    /// Volatile 64-bit load at byte `offset`.
    pub fn read64(&self, offset: usize) -> Result<u64, UioError> {
        self.check(offset, 8)?;
        // SAFETY: as in `read32`, for 8 bytes and 8-byte alignment.
        Ok(unsafe { self.read64_unchecked(offset) })
    }

    /// Volatile 32-bit store at byte `offset`.
    pub fn write32(&mut self, offset: usize, value: u32) -> Result<(), UioError> {
        self.check(offset, 4)?;
        // SAFETY: `check` proved bounds and alignment; `&mut self` excludes every other
        // access through this mapping in safe code.
        unsafe { self.write32_unchecked(offset, value) };
        Ok(())
    }

    /// Volatile 64-bit store at byte `offset`.
    pub fn write64(&mut self, offset: usize, value: u64) -> Result<(), UioError> {
        self.check(offset, 8)?;
        // SAFETY: as in `write32`, for 8 bytes and 8-byte alignment.
        unsafe { self.write64_unchecked(offset, value) };
        Ok(())
    }

    /// Volatile 32-bit load without checks.
    ///
    /// # Safety
    ///
    /// `offset + 4 <= self.len()`, `as_ptr() + offset` is 4-byte aligned, and no store to
    /// these bytes happens concurrently from this process.
    pub unsafe fn read32_unchecked(&self, offset: usize) -> u32 {
        // SAFETY: the caller guarantees bounds, alignment and the absence of racing stores;
        // the mapping is alive for the duration of `&self`.
        unsafe { self.as_ptr().add(offset).cast::<u32>().read_volatile() }
    }

    /// Volatile 64-bit load without checks.
    ///
    /// # Safety
    ///
    /// `offset + 8 <= self.len()`, `as_ptr() + offset` is 8-byte aligned, and no store to
    /// these bytes happens concurrently from this process.
    pub unsafe fn read64_unchecked(&self, offset: usize) -> u64 {
        // SAFETY: the caller guarantees bounds, alignment and the absence of racing stores.
        unsafe { self.as_ptr().add(offset).cast::<u64>().read_volatile() }
    }

    /// Volatile 32-bit store without checks.
    ///
    /// # Safety
    ///
    /// `offset + 4 <= self.len()`, `as_ptr() + offset` is 4-byte aligned, and no other access
    /// to these bytes happens concurrently from this process.
    pub unsafe fn write32_unchecked(&self, offset: usize, value: u32) {
        // SAFETY: the caller guarantees bounds, alignment and exclusive access; the mapping
        // is writable (mapped PROT_READ | PROT_WRITE, MAP_SHARED).
        unsafe {
            self.as_ptr()
                .add(offset)
                .cast::<u32>()
                .write_volatile(value)
        }
    }

    /// Volatile 64-bit store without checks.
    ///
    /// # Safety
    ///
    /// `offset + 8 <= self.len()`, `as_ptr() + offset` is 8-byte aligned, and no other access
    /// to these bytes happens concurrently from this process.
    pub unsafe fn write64_unchecked(&self, offset: usize, value: u64) {
        // SAFETY: the caller guarantees bounds, alignment and exclusive access; the mapping
        // is writable.
        unsafe {
            self.as_ptr()
                .add(offset)
                .cast::<u64>()
                .write_volatile(value)
        }
    }
}

impl fmt::Debug for UioMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UioMapping")
            .field("device", &self.device)
            .field("path", &self.path)
            .field("map_index", &self.map_index)
            .field("base", &self.as_ptr())
            .field("len", &self.len)
            .field("mapped_len", &self.mmap.len())
            .finish()
    }
}
