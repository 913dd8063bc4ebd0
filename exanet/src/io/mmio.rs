//! [`Mmio`]: the [`RegIo`] over real UIO mappings (device memory).

use uio_driver::{UioMapping, UioSource};

use super::{Map, RegIo, check, from_device_barrier, to_device_barrier};
use crate::error::OpenError;
use crate::regs::{MAP_SIZES, RegsBlock};

/// Register access over four `uio_driver::UioMapping`s (map0..map3 of `/dev/uioN`).
///
/// Single aligned volatile accesses only, never `memcpy`; barriers as the module docs of
/// [`crate::io`] say. The mappings are owned here and unmapped on drop.
#[derive(Debug)]
pub struct Mmio {
    maps: [UioMapping; 4],
}

impl Mmio {
    /// Maps map0..map3 of `source` (a `uio_driver::KernelSource` on the board) and checks
    /// their sizes against the model.
    pub fn open<S: UioSource>(source: &S) -> Result<Self, OpenError> {
        let mut maps = Vec::with_capacity(4);
        for (index, size) in MAP_SIZES.iter().enumerate() {
            let map = source.open_map(index)?;
            if map.len() < *size || map.as_ptr() as usize % 8 != 0 {
                return Err(OpenError::MapTooSmall {
                    device: source.device_name().to_owned(),
                    map: index,
                    len: map.len(),
                    needed: *size,
                });
            }
            maps.push(map);
        }
        let maps: [UioMapping; 4] = maps.try_into().expect("exactly four maps were pushed");
        Ok(Mmio { maps })
    }

    /// Typed view of map0 for diagnostics (`regs_block().id.read()`).
    pub fn regs_block(&self) -> &RegsBlock {
        // SAFETY: map0 is at least `size_of::<RegsBlock>()` bytes (checked in `open`),
        // page aligned, and lives as long as `self`. The block consists of volatile cells
        // (interior mutability), and no register has a read side effect.
        unsafe { &*self.maps[0].as_ptr().cast::<RegsBlock>() }
    }

    #[inline(always)]
    fn ptr(&self, map: Map, offset: usize) -> *mut u8 {
        self.maps[map as usize].as_ptr().wrapping_add(offset)
    }
}

impl RegIo for Mmio {
    #[inline(always)]
    fn read32(&self, map: Map, offset: usize) -> u32 {
        check(map, offset, 4);
        // SAFETY: `check` proved bounds (map length >= map.size(), verified in `open`) and
        // alignment (the mapping is page aligned); volatile keeps it one 32-bit access.
        unsafe { self.ptr(map, offset).cast::<u32>().read_volatile() }
    }
    #[inline(always)]
    fn write32(&self, map: Map, offset: usize, value: u32) {
        check(map, offset, 4);
        // SAFETY: as in `read32`; the mapping is writable (MAP_SHARED, read-write).
        unsafe { self.ptr(map, offset).cast::<u32>().write_volatile(value) }
    }
    #[inline(always)]
    fn read64(&self, map: Map, offset: usize) -> u64 {
        check(map, offset, 8);
        // SAFETY: as in `read32`, for an 8-byte aligned 8-byte access.
        unsafe { self.ptr(map, offset).cast::<u64>().read_volatile() }
    }
    #[inline(always)]
    fn write64(&self, map: Map, offset: usize, value: u64) {
        check(map, offset, 8);
        // SAFETY: as in `write32`, for an 8-byte aligned 8-byte access.
        unsafe { self.ptr(map, offset).cast::<u64>().write_volatile(value) }
    }
    #[inline(always)]
    fn read_counter(&self, offset: usize) -> u32 {
        let value = self.read32(Map::Regs, offset);
        from_device_barrier();
        value
    }
    #[inline(always)]
    fn doorbell(&self, offset: usize, value: u32) {
        to_device_barrier();
        self.write32(Map::Regs, offset, value);
    }
    #[inline(always)]
    fn release_counter(&self, offset: usize, value: u32) {
        from_device_barrier();
        self.write32(Map::Regs, offset, value);
    }
}
