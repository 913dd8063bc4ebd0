//! [`Segment`]: an anonymous shared-memory file (memfd) and its mapping.
//!
//! What it is: the owner of one memfd and one read-write `MAP_SHARED` mapping of it.
//! [`Segment::create`] makes a new file (`memfd_create` with `MFD_CLOEXEC`, sized with
//! `ftruncate`, sparse: pages are allocated on first touch); [`Segment::map`] maps a
//! descriptor received from elsewhere (another process, through
//! [`send_fds`](super::send_fds)). Dropping the segment unmaps it and closes the descriptor;
//! the memory itself is freed by the kernel when the last descriptor and mapping are gone,
//! so a crashed process cannot leak a named object.
//!
//! Created files are sealed against shrinking (`F_SEAL_SHRINK`, then `F_SEAL_SEAL`): a
//! process that received the descriptor cannot truncate the file under the mappings of
//! others (which would make their accesses fault with `SIGBUS`).
//!
//! Every mapping starts at a multiple of [`mapping_alignment`] of its length (up to 1 GiB;
//! only address space is reserved for that), so that aligned offsets are aligned addresses
//! in every process: the symmetric heap's `shmem_align` relies on it.
//!
//! What it is not: an allocator, or a safe view of the bytes. Other processes may write the
//! memory at any time, so the segment hands out raw pointers, bounds-checked copies
//! ([`Segment::read`], [`Segment::write`]) and atomics ([`Segment::atomic_u64`]), never
//! `&[u8]`.
//!
//! Thread-safety: `Send + Sync`. The struct itself is immutable after creation; the memory
//! it maps is shared and is only accessed through raw copies and atomics.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use super::ShmError;

/// Longest name the kernel keeps for a memfd (249 bytes plus the `memfd:` prefix).
const MEMFD_NAME_MAX: usize = 249;

/// Largest alignment of a mapping's start.
const MAX_MAPPING_ALIGNMENT: usize = 1 << 30;

/// The alignment of the start of every mapping of `len` bytes: the smallest power of two
/// of at least `len`, between the page size and 1 GiB. So an offset inside a segment that
/// is a multiple of any power of two up to that is also an aligned address in every
/// process that maps the segment (OpenSHMEM's `shmem_align` returns the same offset on
/// every PE and needs aligned addresses on all of them).
pub fn mapping_alignment(len: usize) -> usize {
    len.checked_next_power_of_two()
        .unwrap_or(MAX_MAPPING_ALIGNMENT)
        .clamp(super::page_size(), MAX_MAPPING_ALIGNMENT)
}

/// An anonymous shared-memory file and its read-write shared mapping.
///
/// ```
/// use gsas_transport::shm::Segment;
///
/// let seg = Segment::create("example", 1 << 20)?;
/// seg.write(4096, b"hello")?;
/// // A second mapping of the same file (as another process would make from the
/// // descriptor) sees the bytes.
/// let other = Segment::map(seg.try_clone_fd()?, "example (second mapping)")?;
/// let mut out = [0u8; 5];
/// other.read(4096, &mut out)?;
/// assert_eq!(&out, b"hello");
/// other.atomic_u64(8).unwrap().fetch_add(3, std::sync::atomic::Ordering::AcqRel);
/// assert_eq!(seg.atomic_u64(8).unwrap().load(std::sync::atomic::Ordering::Acquire), 3);
/// # Ok::<(), gsas_transport::shm::ShmError>(())
/// ```
#[derive(Debug)]
pub struct Segment {
    name: String,
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by the `Segment` and lives until `Drop`; the fields are never
// mutated after construction, and the mapped memory is shared memory that this type only
// exposes as raw pointers, bounds-checked raw copies and atomics, all of which are valid
// from any thread.
unsafe impl Send for Segment {}
// SAFETY: as for `Send`: `&Segment` gives no unsynchronised access to Rust-owned data.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates a memfd named `name` (for `/proc/<pid>/maps` and error messages) of `len`
    /// bytes, seals it against shrinking and maps it read-write.
    ///
    /// Errors: [`ShmError::Invalid`] for `len == 0` or a name containing a NUL byte;
    /// [`ShmError::Os`] naming the failing call.
    pub fn create(name: &str, len: usize) -> Result<Segment, ShmError> {
        if len == 0 {
            return Err(ShmError::invalid(
                format!("size of segment {name:?}"),
                "must not be 0",
            ));
        }
        let mut cut = name.len().min(MEMFD_NAME_MAX);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        let c_name = CString::new(&name[..cut]).map_err(|_| {
            ShmError::invalid(format!("segment name {name:?}"), "contains a NUL byte")
        })?;
        // SAFETY: `c_name` is a valid NUL-terminated string that outlives the call; the flags
        // are valid memfd flags.
        let raw = unsafe {
            libc::memfd_create(c_name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(ShmError::last_os(format!("memfd_create({name:?})")));
        }
        // SAFETY: `raw` is a descriptor just returned by memfd_create and owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len)
            .map_err(|_| ShmError::invalid(format!("size of segment {name:?}"), "too large"))?;
        // SAFETY: ftruncate on a descriptor we own; no memory is passed.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(ShmError::last_os(format!(
                "ftruncate(memfd {name:?}, {len} bytes)"
            )));
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
        // SAFETY: fcntl(F_ADD_SEALS) on a descriptor we own, with an integer argument.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(ShmError::last_os(format!(
                "fcntl(memfd {name:?}, F_ADD_SEALS)"
            )));
        }
        Self::map_fd(fd, len, name)
    }

    /// Maps the whole file behind `fd` (its current size), taking ownership of `fd`.
    ///
    /// Errors: [`ShmError::Os`] if `fstat` or `mmap` fails, [`ShmError::Invalid`] for an
    /// empty file.
    pub fn map(fd: OwnedFd, name: &str) -> Result<Segment, ShmError> {
        let size = file_size(fd.as_fd(), name)?;
        let len = usize::try_from(size).map_err(|_| {
            ShmError::invalid(
                format!("segment {name:?}"),
                "file larger than the address space",
            )
        })?;
        if len == 0 {
            return Err(ShmError::invalid(
                format!("segment {name:?}"),
                "the file is empty",
            ));
        }
        Self::map_fd(fd, len, name)
    }

    /// Maps the first `len` bytes of the file behind `fd`, taking ownership of `fd`.
    ///
    /// Errors: [`ShmError::TooSmall`] if the file is shorter than `len` (accessing the
    /// missing part would raise `SIGBUS`), [`ShmError::Invalid`] for `len == 0`,
    /// [`ShmError::Os`] if `fstat` or `mmap` fails.
    pub fn map_len(fd: OwnedFd, len: usize, name: &str) -> Result<Segment, ShmError> {
        if len == 0 {
            return Err(ShmError::invalid(
                format!("mapping length of {name:?}"),
                "must not be 0",
            ));
        }
        let size = file_size(fd.as_fd(), name)?;
        if size < len as u64 {
            return Err(ShmError::TooSmall {
                what: format!("segment {name:?}"),
                size,
                needed: len as u64,
            });
        }
        Self::map_fd(fd, len, name)
    }

    fn map_fd(fd: OwnedFd, len: usize, name: &str) -> Result<Segment, ShmError> {
        // Reserve room for an aligned start (address space only), map the file at the
        // aligned address inside the reservation, and give back the rest.
        let align = mapping_alignment(len);
        let page = super::page_size();
        let mapped = len.div_ceil(page) * page;
        let reserve = mapped.checked_add(align).ok_or_else(|| {
            ShmError::invalid(format!("segment {name:?}"), "too large to map aligned")
        })?;
        // SAFETY: a fresh anonymous inaccessible mapping at an address of the kernel's
        // choice (no MAP_FIXED): no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(ShmError::last_os(format!(
                "mmap(reservation for segment {name:?}, {reserve} bytes)"
            )));
        }
        let start = (base as usize).div_ceil(align) * align;
        // SAFETY: `start .. start + mapped` lies inside the reservation just made, which
        // this function owns; MAP_FIXED replaces only that part of it. `fd` is open.
        let ptr = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        let failed = ptr == libc::MAP_FAILED;
        let err = failed.then(|| ShmError::last_os(format!("mmap(segment {name:?}, {len} bytes)")));
        // The unused head and tail of the reservation (everything, on failure).
        let (keep_from, keep_to) = if failed {
            (start, start)
        } else {
            (start, start + mapped)
        };
        for (from, to) in [
            (base as usize, keep_from),
            (keep_to, base as usize + reserve),
        ] {
            if to > from {
                // SAFETY: the range is part of the reservation made above and holds no
                // mapping anyone else uses.
                unsafe { libc::munmap(from as *mut libc::c_void, to - from) };
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| {
            ShmError::invalid(
                format!("mapping of {name:?}"),
                "the kernel returned address 0",
            )
        })?;
        Ok(Segment {
            name: name.to_owned(),
            fd,
            ptr,
            len,
        })
    }

    /// The name given at creation or mapping.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Mapped length in bytes (never 0).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: segments are never empty. (For API symmetry with [`Segment::len`].)
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start of the mapping (page aligned). Valid for [`Segment::len`] bytes while `self`
    /// lives; other processes may change the memory at any time.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Start of the mapping as an address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The memfd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A new descriptor for the same file (`F_DUPFD_CLOEXEC`), e.g. to send it to another
    /// process.
    pub fn try_clone_fd(&self) -> Result<OwnedFd, ShmError> {
        self.fd.try_clone().map_err(|source| ShmError::Os {
            op: format!("dup(memfd {:?})", self.name),
            source,
        })
    }

    /// Whether `addr .. addr + len` lies inside the mapping.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr()
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr() + self.len)
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), ShmError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(ShmError::invalid(
                format!("range {offset}+{len} of segment {:?}", self.name),
                format!("outside its {} bytes", self.len),
            )),
        }
    }

    /// Copies `out.len()` bytes at `offset` into `out`.
    ///
    /// Errors: [`ShmError::Invalid`] if the range is outside the segment.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), ShmError> {
        self.check(offset, out.len())?;
        // SAFETY: `offset + out.len() <= self.len` was checked, so the source lies in our
        // live mapping; `out` is a distinct Rust buffer, so the ranges do not overlap.
        unsafe {
            crate::watched::load_once(self.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// Copies `data` to `offset`.
    ///
    /// Errors: [`ShmError::Invalid`] if the range is outside the segment.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), ShmError> {
        self.check(offset, data.len())?;
        // SAFETY: the destination lies in our live, writable mapping (checked above) and
        // `data` is a distinct Rust buffer.
        unsafe { crate::watched::store_once(data.as_ptr(), self.as_ptr().add(offset), data.len()) };
        Ok(())
    }

    /// The 64-bit atomic at `offset`; `None` if it is outside the segment or not 8-byte
    /// aligned.
    pub fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        if offset % 8 != 0 || self.check(offset, 8).is_err() {
            return None;
        }
        // SAFETY: the 8 bytes lie in our mapping, which outlives the returned reference
        // (tied to `&self`); the address is 8-byte aligned (page-aligned base plus a
        // multiple of 8); shared memory is accessed concurrently only through atomics or
        // raw copies, never through Rust references to non-atomic data.
        Some(unsafe { AtomicU64::from_ptr(self.as_ptr().add(offset).cast::<u64>()) })
    }

    /// The 32-bit atomic at `offset`; `None` if it is outside the segment or not 4-byte
    /// aligned.
    pub fn atomic_u32(&self, offset: usize) -> Option<&AtomicU32> {
        if offset % 4 != 0 || self.check(offset, 4).is_err() {
            return None;
        }
        // SAFETY: as in `atomic_u64`, with 4-byte alignment.
        Some(unsafe { AtomicU32::from_ptr(self.as_ptr().add(offset).cast::<u32>()) })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `ptr .. ptr + len` is exactly the mapping made in `map_fd`, owned by this
        // value and unmapped only here; references handed out borrow `self`, so none
        // outlive it.
        unsafe { unmap(self.ptr, self.len, &self.name) }
    }
}

/// Unmaps `ptr .. ptr + len`, warning (naming segment `name`) when the kernel refuses.
///
/// # Safety
///
/// The range is a whole mapping that nothing uses any more.
unsafe fn unmap(ptr: NonNull<u8>, len: usize, name: &str) {
    // SAFETY: the caller's contract.
    let rc = unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    if rc != 0 {
        log::warn!(
            "munmap of segment {name:?} ({len} bytes) failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The mapping of a [`Segment`] without its descriptor ([`Segment::into_view`]): the memory
/// stays mapped until the view is dropped, and the process holds no file descriptor for it.
/// A PE keeps the segments of its same-node peers this way, so that a node of N PEs does
/// not need 3(N - 1) descriptors in each of them (a default `RLIMIT_NOFILE` of 1,024 would
/// end a node at about 340 PEs).
#[derive(Debug)]
pub struct View {
    name: String,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: as for `Segment`: the mapping is owned by the view until `Drop` and exposed only as
// an address.
unsafe impl Send for View {}
// SAFETY: as for `Send`.
unsafe impl Sync for View {}

impl View {
    /// Start of the mapping as an address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: segments have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: the mapping `Segment::map_fd` made, handed over whole by `into_view` and
        // unmapped only here.
        unsafe { unmap(self.ptr, self.len, &self.name) }
    }
}

impl Segment {
    /// Closes the descriptor and keeps the mapping, as a [`View`].
    pub fn into_view(self) -> View {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped or used again, so each field read out here is owned
        // exactly once: the name moves into the view, the descriptor is closed below.
        let (name, fd) = unsafe { (std::ptr::read(&me.name), std::ptr::read(&me.fd)) };
        drop(fd);
        View {
            name,
            ptr: me.ptr,
            len: me.len,
        }
    }
}

/// Size of the file behind `fd`.
pub(crate) fn file_size(fd: BorrowedFd<'_>, name: &str) -> Result<u64, ShmError> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `struct stat` into the buffer we pass, which has the right size
    // and alignment; `fd` is open for the duration of the call.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(ShmError::last_os(format!("fstat({name:?})")));
    }
    // SAFETY: fstat succeeded, so it initialised the structure.
    let st = unsafe { st.assume_init() };
    Ok(u64::try_from(st.st_size).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn create_read_write_and_bounds() {
        let seg = Segment::create("unit", 10_000).unwrap();
        assert_eq!(seg.len(), 10_000);
        assert!(!seg.is_empty());
        assert_eq!(seg.addr() % 4096, 0);
        seg.write(9_990, b"0123456789").unwrap();
        let mut out = [0u8; 10];
        seg.read(9_990, &mut out).unwrap();
        assert_eq!(&out, b"0123456789");
        let e = seg.write(9_991, b"0123456789").unwrap_err();
        assert!(e.to_string().contains("outside its 10000 bytes"), "{e}");
        assert!(seg.read(usize::MAX, &mut out).is_err());
        assert!(seg.atomic_u64(4).is_none(), "misaligned");
        assert!(seg.atomic_u64(10_000 - 7).is_none());
        assert!(seg.atomic_u32(9_996).is_some());
        assert!(seg.contains(seg.addr() + 10, 9_990));
        assert!(!seg.contains(seg.addr() + 10, 9_991));
        assert!(!seg.contains(seg.addr() - 1, 1));
    }

    /// A view keeps the memory shared and mapped while its descriptor is closed.
    #[test]
    fn a_view_keeps_the_mapping_without_the_descriptor() {
        let seg = Segment::create("viewed", 8192).unwrap();
        let fd = seg.try_clone_fd().unwrap();
        let raw = fd.as_raw_fd();
        let other = Segment::map(fd, "viewed elsewhere").unwrap();
        let view = other.into_view();
        // The number is closed, or (another test thread opened something since) names
        // another file.
        let inode = |fd: std::os::fd::RawFd| {
            let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
            // SAFETY: fstat writes into `st` or fails; it only reads the number.
            let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
            // SAFETY: initialised by a successful fstat.
            (rc == 0).then(|| unsafe { st.assume_init() }.st_ino)
        };
        let ino = inode(seg.fd().as_raw_fd());
        assert!(ino.is_some());
        assert_ne!(inode(raw), ino, "the view's descriptor is closed");
        assert_eq!((view.len(), view.is_empty()), (8192, false));
        seg.write(4096, &0x5eedu64.to_le_bytes()).unwrap();
        // SAFETY: `view` maps 8192 bytes; the word is 8-byte aligned in it.
        let got = unsafe { std::ptr::read_volatile((view.addr() + 4096) as *const u64) };
        assert_eq!(got, 0x5eed, "the view sees the segment's bytes");
        // SAFETY: as above; the segment sees the view's store.
        unsafe { std::ptr::write_volatile((view.addr() + 8) as *mut u64, 9) };
        assert_eq!(
            seg.atomic_u64(8).map(|a| a.load(Ordering::Acquire)),
            Some(9)
        );
    }

    #[test]
    fn mappings_start_aligned_to_their_size() {
        assert_eq!(mapping_alignment(1), crate::shm::page_size());
        assert_eq!(mapping_alignment(3 << 20), 4 << 20);
        assert_eq!(mapping_alignment(64 << 20), 64 << 20);
        assert_eq!(mapping_alignment(usize::MAX), 1 << 30);
        for len in [4096, 10_000, 3 << 20, 16 << 20] {
            let seg = Segment::create("aligned", len).unwrap();
            assert_eq!(seg.addr() % mapping_alignment(len), 0, "{len} bytes");
            let again = Segment::map(seg.try_clone_fd().unwrap(), "aligned again").unwrap();
            assert_eq!(again.addr() % mapping_alignment(len), 0, "{len} bytes");
            again.write(len - 8, &7u64.to_le_bytes()).unwrap();
            assert_eq!(
                seg.atomic_u64(len - 8).map(|a| a.load(Ordering::Acquire)),
                Some(7)
            );
        }
    }

    #[test]
    fn second_mapping_shares_memory_and_size_is_checked() {
        let seg = Segment::create("shared", 4096).unwrap();
        let again = Segment::map(seg.try_clone_fd().unwrap(), "again").unwrap();
        assert_eq!(again.len(), 4096);
        assert_ne!(again.addr(), seg.addr());
        seg.atomic_u32(100)
            .unwrap()
            .store(0xdead_beef, Ordering::Release);
        assert_eq!(
            again.atomic_u32(100).unwrap().load(Ordering::Acquire),
            0xdead_beef
        );
        let e = Segment::map_len(seg.try_clone_fd().unwrap(), 8192, "big").unwrap_err();
        assert!(
            matches!(
                e,
                ShmError::TooSmall {
                    size: 4096,
                    needed: 8192,
                    ..
                }
            ),
            "{e}"
        );
        let part = Segment::map_len(seg.try_clone_fd().unwrap(), 100, "part").unwrap();
        assert_eq!(part.len(), 100);
    }

    #[test]
    fn bad_arguments_are_named() {
        let e = Segment::create("zero", 0).unwrap_err();
        assert!(e.to_string().contains("\"zero\""), "{e}");
        let e = Segment::create("a\0b", 10).unwrap_err();
        assert!(e.to_string().contains("NUL"), "{e}");
        // Overlong names are shortened for the kernel only.
        let long = "é".repeat(200);
        let seg = Segment::create(&long, 10).unwrap();
        assert_eq!(seg.name(), long);
    }

    #[test]
    fn sealed_against_shrinking() {
        let seg = Segment::create("sealed", 8192).unwrap();
        // SAFETY: ftruncate on a descriptor the segment keeps open; no memory is passed.
        let rc = unsafe { libc::ftruncate(seg.fd().as_raw_fd(), 4096) };
        assert_eq!(rc, -1, "shrinking a sealed memfd must fail");
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EPERM)
        );
        assert_eq!(file_size(seg.fd(), "sealed").unwrap(), 8192);
    }
}
