//! Symmetric address translation: a local address becomes `(segment, offset)`.
//!
//! **What it is.** A symmetric object lives at the same *offset* of the same segment on
//! every PE (OpenSHMEM 1.5 §3.3 "Memory Model"): the symmetric heap (segment
//! [`gsas_node::HEAP`], `[heap_base, heap_base + heap_len)` of this PE) or, in C programs,
//! the remapped data segment with the executable's globals and statics
//! ([`gsas_node::DATA`]). [`Segments::translate`] finds which one holds a range and its
//! offset there; the remote address is then `base(pe, segment) + offset` (a table lookup
//! for same-node PEs, a service request otherwise). Everything else (the stack, `malloc`
//! memory, shared-library data) is not symmetric.
//!
//! **What it is not.** No lookups of allocations: offsets need no tables (the allocator is
//! deterministic). The hot paths of `shmem_TYPE_p` and friends inline their own heap check
//! (see `state::Hot`); this is the general form.
//!
//! **Thread-safety.** Plain `Copy` data.

use gsas_node::{DATA, HEAP};

/// A segment of this PE: base address and length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    /// First address.
    pub base: usize,
    /// Length in bytes (0: absent).
    pub len: usize,
}

impl Range {
    /// The offset of `addr .. addr + len` in this range, if it lies inside.
    #[inline]
    pub fn offset_of(&self, addr: usize, len: usize) -> Option<u64> {
        let off = addr.wrapping_sub(self.base);
        (addr >= self.base && off <= self.len && len <= self.len - off).then_some(off as u64)
    }
}

/// This PE's symmetric segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segments {
    /// The symmetric heap.
    pub heap: Range,
    /// The data segment (length 0 when not remapped).
    pub data: Range,
}

/// A symmetric location: segment id and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymAddr {
    /// [`HEAP`] or [`DATA`].
    pub seg: u8,
    /// Offset in the segment.
    pub off: u64,
}

impl Segments {
    /// The symmetric location of the `len` bytes at `addr`, if they lie inside one segment.
    /// A zero-length range at the end of a segment still belongs to it.
    #[inline]
    pub fn translate(&self, addr: usize, len: usize) -> Option<SymAddr> {
        if let Some(off) = self.heap.offset_of(addr, len) {
            return Some(SymAddr { seg: HEAP, off });
        }
        if self.data.len > 0 {
            if let Some(off) = self.data.offset_of(addr, len) {
                return Some(SymAddr { seg: DATA, off });
            }
        }
        None
    }

    /// A description of the segments for error messages.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "the symmetric heap is {:#x}..{:#x}",
            self.heap.base,
            self.heap.base + self.heap.len
        );
        if self.data.len > 0 {
            s.push_str(&format!(
                ", the data segment {:#x}..{:#x}",
                self.data.base,
                self.data.base + self.data.len
            ));
        } else {
            s.push_str(", globals are not symmetric (data segment not remapped)");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs() -> Segments {
        Segments {
            heap: Range {
                base: 0x7000_0000,
                len: 0x1000,
            },
            data: Range {
                base: 0x40_0000,
                len: 0x2000,
            },
        }
    }

    #[test]
    fn heap_and_data_ranges() {
        let s = segs();
        assert_eq!(
            s.translate(0x7000_0000, 8),
            Some(SymAddr { seg: HEAP, off: 0 })
        );
        assert_eq!(
            s.translate(0x7000_0ff8, 8),
            Some(SymAddr {
                seg: HEAP,
                off: 0xff8
            })
        );
        assert_eq!(
            s.translate(0x40_1000, 0x1000),
            Some(SymAddr {
                seg: DATA,
                off: 0x1000
            })
        );
        // Zero-length at the very end is inside; one byte there is not.
        assert_eq!(
            s.translate(0x7000_1000, 0),
            Some(SymAddr {
                seg: HEAP,
                off: 0x1000
            })
        );
        assert_eq!(s.translate(0x7000_1000, 1), None);
    }

    #[test]
    fn ranges_crossing_or_outside_are_refused() {
        let s = segs();
        assert_eq!(s.translate(0x7000_0ff9, 8), None, "crosses the heap end");
        assert_eq!(s.translate(0x6fff_fff8, 16), None, "starts below the heap");
        assert_eq!(s.translate(0x6fff_fff8, 8), None);
        assert_eq!(s.translate(0, 8), None, "NULL");
        assert_eq!(s.translate(usize::MAX - 3, 8), None, "wraps around");
        assert_eq!(s.translate(0x7000_0000, usize::MAX), None);
        assert_eq!(s.translate(0x40_1fff, 2), None, "crosses the data end");
    }

    #[test]
    fn absent_data_segment() {
        let mut s = segs();
        s.data = Range::default();
        assert_eq!(s.translate(0x40_0000, 8), None);
        assert_eq!(s.translate(0, 0), None, "an empty data range holds nothing");
        assert!(s.describe().contains("not remapped"));
    }
}
