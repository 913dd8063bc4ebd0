//! The executable's data segment (C globals and statics) and its remap onto shared memory.
//!
//! What it is: [`DataSegment::discover`] finds the range of the main executable that holds
//! its writable, non-RELRO data (`.data`, `.bss` and their neighbours): the writable
//! `PT_LOAD` program header of the first object reported by `dl_iterate_phdr` (the main
//! program), minus the `PT_GNU_RELRO` range, page-aligned outward the way `ld.so` protects
//! RELRO (the RELRO end is rounded down, the segment end up). [`DataSegment::remap_onto`]
//! copies the current contents into a memfd (`pwrite`) and maps the memfd over the same
//! addresses (`mmap(MAP_FIXED | MAP_SHARED)`), so that the service and the other PEs of the
//! node can map the same memory and the program's globals become symmetric: the
//! symmetric address of a global is its address minus [`DataSegment::base`], the same on
//! every PE running the same executable, with or without ASLR.
//!
//! Linkers that put RELRO into a `PT_LOAD` of its own (lld) leave one writable segment after
//! the subtraction; an executable with more than one remaining writable range is refused
//! with [`ShmError::DataSegment`].
//!
//! What it is not: a way to share thread-locals (`PT_TLS` blocks live elsewhere), the
//! heap, or the data of shared libraries.
//!
//! Thread-safety: [`DataSegment`] is plain data. The remap itself is `unsafe`: writes made
//! by other threads to the range between the copy and the mapping are lost, so it must run
//! while no other thread writes there (at start-up, before the runtime starts threads).

use std::os::fd::{AsRawFd, BorrowedFd};

use super::ShmError;
use super::segment::file_size;

/// The main executable's writable data range, page aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSegment {
    base: usize,
    len: usize,
}

/// A range of memory as found in the program headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: usize,
    end: usize,
}

/// What the callback of `dl_iterate_phdr` collects about the main program.
#[derive(Default)]
struct Found {
    writable: Vec<Range>,
    relro: Option<Range>,
    seen: bool,
}

/// The page size of this process.
pub fn page_size() -> usize {
    // SAFETY: sysconf only reads a system parameter.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `data` is the `&mut Found` passed to dl_iterate_phdr below, alive and not
    // otherwise borrowed during the iteration.
    let found = unsafe { &mut *data.cast::<Found>() };
    // SAFETY: the loader passes a valid `dl_phdr_info` whose `dlpi_phdr` points at
    // `dlpi_phnum` program headers, valid during the callback.
    let (bias, phdrs) = unsafe {
        let info = &*info;
        (
            info.dlpi_addr as usize,
            std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)),
        )
    };
    found.seen = true;
    for ph in phdrs {
        let start = bias.wrapping_add(ph.p_vaddr as usize);
        let range = Range {
            start,
            end: start.wrapping_add(ph.p_memsz as usize),
        };
        if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W != 0 && ph.p_memsz > 0 {
            found.writable.push(range);
        } else if ph.p_type == libc::PT_GNU_RELRO {
            found.relro = Some(range);
        }
    }
    // Only the first object (the main program) matters: stop.
    1
}

impl DataSegment {
    /// Finds the main executable's writable data range.
    ///
    /// Errors: [`ShmError::DataSegment`] if the program has no writable segment or an
    /// unsupported layout.
    pub fn discover() -> Result<DataSegment, ShmError> {
        let mut found = Found::default();
        // SAFETY: `collect` matches the callback signature, only reads the headers the
        // loader passes, and uses `data` as the `Found` we pass, which outlives the call.
        unsafe { libc::dl_iterate_phdr(Some(collect), (&raw mut found).cast()) };
        if !found.seen {
            return Err(ShmError::DataSegment {
                reason: "dl_iterate_phdr reported no objects".into(),
            });
        }
        Self::from_headers(&found.writable, found.relro, page_size())
    }

    /// The computation of [`DataSegment::discover`] on given program-header ranges.
    fn from_headers(
        writable: &[Range],
        relro: Option<Range>,
        page: usize,
    ) -> Result<DataSegment, ShmError> {
        let down = |a: usize| a & !(page - 1);
        let up = |a: usize| a.div_ceil(page) * page;
        let mut remaining = Vec::new();
        for w in writable {
            let mut start = w.start;
            if let Some(r) = relro {
                // ld.so makes [down(r.start), down(r.end)) read-only; the rest stays writable.
                let (ro_start, ro_end) = (down(r.start), down(r.end));
                if ro_start <= start && start < ro_end {
                    start = ro_end;
                }
            }
            let (start, end) = (down(start), up(w.end));
            if start < end {
                remaining.push(Range { start, end });
            }
        }
        match remaining.as_slice() {
            [one] => Ok(DataSegment {
                base: one.start,
                len: one.end - one.start,
            }),
            [] => Err(ShmError::DataSegment {
                reason: "the executable has no writable data outside RELRO".into(),
            }),
            many => Err(ShmError::DataSegment {
                reason: format!(
                    "the executable has {} writable ranges outside RELRO ({}); one is supported",
                    many.len(),
                    many.iter()
                        .map(|r| format!("{:#x}..{:#x}", r.start, r.end))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }

    /// First address of the range (page aligned): symmetric offset 0.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Length of the range in bytes (a multiple of the page size): the size of the memfd
    /// to ask the service for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a discovered data segment has at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The symmetric offset of `addr`, if it lies in the range.
    pub fn offset_of(&self, addr: usize) -> Option<u64> {
        (addr >= self.base && addr - self.base < self.len).then(|| (addr - self.base) as u64)
    }

    /// Whether `addr .. addr + len` lies in the range.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base + self.len)
    }

    /// Copies the range into the file behind `fd` (offset 0) and maps the file over the
    /// range, shared and read-write. Afterwards the globals live in the file: writes through
    /// their addresses are visible in every other mapping of it, and the other way round.
    /// The mapping stays for the life of the process; `fd` may be closed afterwards.
    ///
    /// Errors: [`ShmError::TooSmall`] if the file is shorter than [`DataSegment::len`],
    /// [`ShmError::Os`] if the copy or the mapping fails (if `mmap` fails the range is
    /// normally left as it was; a failure of `MAP_FIXED` after the kernel removed the old
    /// pages would be fatal for the process, and is not known to happen for a range that
    /// is already mapped).
    ///
    /// # Safety
    ///
    /// No other thread may write to the range (any global or static of the executable,
    /// including those of the Rust standard library and locks held there) while this runs:
    /// such writes would be lost. Call it at start-up, before threads are started.
    pub unsafe fn remap_onto(&self, fd: BorrowedFd<'_>) -> Result<(), ShmError> {
        let size = file_size(fd, "data segment memfd")?;
        if size < self.len as u64 {
            return Err(ShmError::TooSmall {
                what: "data segment memfd".into(),
                size,
                needed: self.len as u64,
            });
        }
        let mut done = 0;
        while done < self.len {
            // SAFETY: the source `base + done .. base + len` is mapped and readable (it is
            // the writable data segment of the running program); pwrite only reads it.
            let n = unsafe {
                libc::pwrite(
                    fd.as_raw_fd(),
                    (self.base + done) as *const libc::c_void,
                    self.len - done,
                    done as libc::off_t,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(ShmError::Os {
                    op: format!("pwrite(data segment, {} bytes)", self.len),
                    source: e,
                });
            }
            if n == 0 {
                return Err(ShmError::Os {
                    op: "pwrite(data segment)".into(),
                    source: std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote nothing"),
                });
            }
            done += n as usize;
        }
        // SAFETY: MAP_FIXED replaces exactly the data segment range, whose contents were
        // just copied into the file at the same offsets, so every byte keeps its value; the
        // caller guarantees no other thread writes there meanwhile. The range holds only
        // the executable's own data (page-aligned outward inside its writable mapping), not
        // code, stack or heap.
        let p = unsafe {
            libc::mmap(
                self.base as *mut libc::c_void,
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ShmError::last_os(format!(
                "mmap(MAP_FIXED, data segment {:#x}+{:#x})",
                self.base, self.len
            )));
        }
        if p as usize != self.base {
            return Err(ShmError::DataSegment {
                reason: format!(
                    "mmap placed the data segment at {p:p}, not {:#x}",
                    self.base
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    fn r(start: usize, end: usize) -> Range {
        Range { start, end }
    }

    #[test]
    fn gnu_ld_layout_subtracts_relro() {
        // One RW PT_LOAD starting with RELRO (.init_array .. .got), then .got.plt .data .bss.
        let d =
            DataSegment::from_headers(&[r(0x1_0de8, 0x1_3050)], Some(r(0x1_0de8, 0x1_1000)), PAGE)
                .unwrap();
        assert_eq!((d.base(), d.len()), (0x1_1000, 0x3000));
        assert_eq!(d.offset_of(0x1_1008), Some(8));
        assert_eq!(d.offset_of(0x1_0ff8), None);
        assert!(d.contains(0x1_3ff0, 16));
        assert!(!d.contains(0x1_3ff0, 17));
    }

    #[test]
    fn relro_end_inside_a_page_keeps_that_page() {
        // ld.so rounds the RELRO end down: the partial page stays writable and is shared.
        let d =
            DataSegment::from_headers(&[r(0x2000, 0x5100)], Some(r(0x2000, 0x3800)), PAGE).unwrap();
        assert_eq!((d.base(), d.len()), (0x3000, 0x3000));
    }

    #[test]
    fn lld_layout_with_a_relro_segment_of_its_own() {
        let d = DataSegment::from_headers(
            &[r(0x5000, 0x6000), r(0x7000, 0x7400)],
            Some(r(0x5000, 0x6000)),
            PAGE,
        )
        .unwrap();
        assert_eq!((d.base(), d.len()), (0x7000, 0x1000));
    }

    #[test]
    fn unsupported_layouts_are_refused() {
        let e = DataSegment::from_headers(&[], None, PAGE).unwrap_err();
        assert!(e.to_string().contains("no writable data"), "{e}");
        let e = DataSegment::from_headers(&[r(0x5000, 0x6000)], Some(r(0x5000, 0x6000)), PAGE)
            .unwrap_err();
        assert!(e.to_string().contains("no writable data"), "{e}");
        let e = DataSegment::from_headers(&[r(0x5000, 0x6000), r(0x9000, 0x9100)], None, PAGE)
            .unwrap_err();
        assert!(e.to_string().contains("2 writable ranges"), "{e}");
    }

    #[test]
    fn discovers_this_test_binary() {
        static mut MARKER: [u8; 64] = [1; 64];
        static ZEROED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let d = DataSegment::discover().unwrap();
        assert_eq!(d.base() % page_size(), 0);
        assert_eq!(d.len() % page_size(), 0);
        let marker = (&raw const MARKER) as usize;
        assert!(d.contains(marker, 64), "{d:?} vs .data {marker:#x}");
        assert!(d.contains((&raw const ZEROED) as usize, 8), ".bss");
        let local = 0u8;
        assert!(!d.contains((&raw const local) as usize, 1), "stack");
    }
}
