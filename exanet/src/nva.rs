//! Network virtual addresses, registered memory and the one trait that hides translation.
//!
//! What it is. RDMA descriptors name memory by *NVA* (network virtual address, 48 bits,
//! model section 1). Where an NVA points depends on the platform, and the difference is
//! kept inside [`Registrar`]:
//!
//! * **Hardware** ([`SmmuRegistrar`]): the NI translates NVAs through the ARM SMMU under
//!   the endpoint's PDID, walking the process page tables (FACT). Registration is a no-op
//!   and the NVA of a byte is its process virtual address.
//! * **Emulator** ([`EmuRegistrar`], model section 10 option B): each endpoint registers
//!   memfd-backed segments ([`MemSegment`]) with the emulator, which maps them too.
//!   `NVA = region id << 40 | offset`: 8 bits of region id (0..=255 per endpoint) and a
//!   40-bit byte offset (1 TiB per region). An NVA whose region is not registered, or whose
//!   range runs past the region's end, is a translation fault (`LOCAL_XLAT_FAULT` or
//!   `REMOTE_XLAT_FAULT`).
//! * **In-process model** (`exanet_emu::model::ModelRegistrar`): the same layout as the
//!   emulator, without a socket.
//!
//! # Registration protocol (emulator)
//!
//! The emulator listens on a `SOCK_SEQPACKET` Unix socket at `<endpoint dir>/mgmt` (for the
//! default layout `<root>/node<n>/ep<k>/mgmt`). One connection per endpoint owner; every
//! region registered through a connection is unregistered when it closes (so a process
//! that dies releases its memory). Messages are little-endian:
//!
//! * request, 32 bytes: `magic u32 = 0x47525845` ("EXRG"), `op u32` (1 REGISTER,
//!   2 UNREGISTER), `region u32` (REGISTER: wanted id or `0xFFFF_FFFF` for any;
//!   UNREGISTER: the id), `reserved u32`, `len u64` (REGISTER: bytes to map from offset
//!   0), `reserved u64`. REGISTER carries exactly one file descriptor (`SCM_RIGHTS`), a
//!   memfd (or any mappable file) at least `len` bytes long.
//! * reply, 16 bytes: `magic u32`, `status u32` ([`mgmt_status`]), `nva u64` (the NVA of
//!   the region's first byte).
//!
//! # How the runtime uses it
//!
//! Create the node segment (symmetric heap, data segment) as a [`MemSegment`] (or wrap an
//! existing memfd with [`MemSegment::from_fd`]), register it once per endpoint, and keep
//! the returned base NVA: the NVA of byte `o` is `base + o` on every platform. Exchange
//! base NVAs among PEs like segment bases; an RDMA WRITE to `(coord, ep, base_remote + o)`
//! then lands at offset `o` of the remote segment without the remote CPU.
//!
//! Thread safety: [`MemSegment`] is `Send + Sync` (its contents are shared memory; readers
//! and writers coordinate through RDMA completions). Registrars are used by one thread.

use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};

use crate::error::RegisterError;

/// Bit position of the region id in an emulator NVA.
pub const REGION_SHIFT: u32 = 40;
/// Regions per endpoint.
pub const MAX_REGIONS: usize = 256;
/// Largest region (and offset mask): 1 TiB.
pub const REGION_MASK: u64 = (1 << REGION_SHIFT) - 1;

/// A 48-bit network virtual address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nva(pub u64);

impl Nva {
    /// The emulator NVA of `offset` in region `region`.
    pub const fn new(region: u8, offset: u64) -> Nva {
        Nva((region as u64) << REGION_SHIFT | (offset & REGION_MASK))
    }
    /// Region id (emulator layout).
    pub const fn region(self) -> u8 {
        (self.0 >> REGION_SHIFT) as u8
    }
    /// Offset in the region (emulator layout).
    pub const fn offset(self) -> u64 {
        self.0 & REGION_MASK
    }
    /// `self + delta`.
    pub const fn add(self, delta: u64) -> Nva {
        Nva(self.0.wrapping_add(delta) & crate::regs::NVA_MASK)
    }
}

/// Status codes of the registration protocol.
pub mod mgmt_status {
    /// Done.
    pub const OK: u32 = 0;
    /// Malformed request (magic, op, missing descriptor).
    pub const BAD_REQUEST: u32 = 1;
    /// No free region id (or the wanted one is taken).
    pub const NO_REGION: u32 = 2;
    /// The emulator could not map the descriptor (or it is shorter than `len`).
    pub const MAP_FAILED: u32 = 3;
    /// UNREGISTER of a region that is not registered through this connection.
    pub const NO_SUCH_REGION: u32 = 4;
    /// `len` is 0 or above 1 TiB.
    pub const BAD_LENGTH: u32 = 5;

    /// Name of a status.
    pub const fn name(status: u32) -> &'static str {
        match status {
            OK => "ok",
            BAD_REQUEST => "bad request",
            NO_REGION => "no free region id",
            MAP_FAILED => "emulator could not map the segment",
            NO_SUCH_REGION => "no such region",
            BAD_LENGTH => "bad length",
            _ => "unknown status",
        }
    }
}

/// Registration protocol constants.
pub mod mgmt {
    /// Request and reply magic ("EXRG").
    pub const MAGIC: u32 = 0x4752_5845;
    /// REGISTER op.
    pub const OP_REGISTER: u32 = 1;
    /// UNREGISTER op.
    pub const OP_UNREGISTER: u32 = 2;
    /// "any region" in REGISTER.
    pub const ANY_REGION: u32 = 0xFFFF_FFFF;
    /// Request length.
    pub const REQUEST_LEN: usize = 32;
    /// Reply length.
    pub const REPLY_LEN: usize = 16;
}

/// A shared-memory segment (memfd) mapped into this process, for RDMA.
#[derive(Debug)]
pub struct MemSegment {
    map: MmapRaw,
    file: File,
    len: usize,
}

impl MemSegment {
    /// Creates a zero-filled memfd segment of `len` bytes named `name` (for `/proc`).
    pub fn create(name: &str, len: usize) -> io::Result<MemSegment> {
        if len == 0 || len as u64 > REGION_MASK + 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "segment length must be 1..=2^40",
            ));
        }
        let cname = std::ffi::CString::new(name.replace('\0', "_")).map_err(io::Error::other)?;
        // SAFETY: `cname` is a valid NUL-terminated string alive across the call.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(len as u64)?;
        Self::from_file(file, len)
    }

    /// Wraps an existing mappable descriptor of at least `len` bytes (mapped from offset 0).
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<MemSegment> {
        Self::from_file(File::from(fd), len)
    }

    fn from_file(file: File, len: usize) -> io::Result<MemSegment> {
        if file.metadata()?.len() < len as u64 || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "descriptor shorter than the segment",
            ));
        }
        let map = MmapOptions::new().len(len).map_raw(&file)?;
        Ok(MemSegment { map, file, len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (empty segments are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Base address in this process. Accesses through it must stay within `len` bytes and
    /// must not overlap an RDMA operation in flight on the same bytes.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// The backing descriptor (sent to the emulator on registration).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    fn range(&self, offset: usize, len: usize) -> io::Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "range {offset:#x}+{len:#x} outside the {:#x}-byte segment",
                    self.len
                ),
            )),
        }
    }

    /// Copies `data` to `offset`. Errors if the range is outside the segment.
    pub fn write(&self, offset: usize, data: &[u8]) -> io::Result<()> {
        self.range(offset, data.len())?;
        // SAFETY: the range is inside the mapping (checked); the mapping is writable shared
        // memory that lives as long as `self`; `data` cannot overlap it mutably.
        unsafe { std::ptr::copy(data.as_ptr(), self.as_ptr().add(offset), data.len()) };
        Ok(())
    }

    /// Copies `out.len()` bytes from `offset`. Errors if the range is outside the segment.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> io::Result<()> {
        self.range(offset, out.len())?;
        // SAFETY: as in `write`, reading.
        unsafe { std::ptr::copy(self.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// The bytes at `offset..offset + len` as a slice.
    ///
    /// # Safety
    ///
    /// No RDMA operation (or other process) writes these bytes while the slice lives.
    pub unsafe fn slice(&self, offset: usize, len: usize) -> io::Result<&[u8]> {
        self.range(offset, len)?;
        // SAFETY: in range; the caller guarantees no concurrent writer.
        Ok(unsafe { std::slice::from_raw_parts(self.as_ptr().add(offset), len) })
    }

    /// The bytes at `offset..offset + len` as a mutable slice.
    ///
    /// Reads from outside this process (an RDMA READ by the NI or the emulator pulling the
    /// bytes) may happen while the slice lives: they cannot change what this process sees,
    /// so they do not make the slice unsound, but they may observe any mix of old and new
    /// bytes. A caller that lets that happen must detect such a read on the other side (the
    /// transport's generation stamps do: a pull of a slot being rewritten is dropped,
    /// `stale_pulls`).
    ///
    /// # Safety
    ///
    /// Nothing writes these bytes while the slice lives except through it (no RDMA WRITE or
    /// READ into them, no other process), and no other slice or pointer access of them
    /// exists in this process meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> io::Result<&mut [u8]> {
        self.range(offset, len)?;
        // SAFETY: in range; the caller guarantees exclusive access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.as_ptr().add(offset), len) })
    }
}

// SAFETY: the mapping is shared memory owned by the segment; `&self` methods copy with raw
// pointers and the unsafe slice accessors put the aliasing contract on the caller.
unsafe impl Sync for MemSegment {}

/// Makes memory reachable by the NI: the only place where hardware and emulator differ.
pub trait Registrar {
    /// Registers `seg` with the NI and returns the NVA of its first byte.
    fn register(&mut self, seg: &MemSegment) -> Result<Nva, RegisterError>;
    /// Undoes [`register`](Self::register) for the segment whose base NVA is `base`.
    fn unregister(&mut self, base: Nva) -> Result<(), RegisterError>;
}

/// Hardware: the SMMU translates process virtual addresses; nothing to register.
#[derive(Clone, Copy, Debug, Default)]
pub struct SmmuRegistrar;

impl Registrar for SmmuRegistrar {
    fn register(&mut self, seg: &MemSegment) -> Result<Nva, RegisterError> {
        Ok(Nva(seg.as_ptr() as u64 & crate::regs::NVA_MASK))
    }
    fn unregister(&mut self, _base: Nva) -> Result<(), RegisterError> {
        Ok(())
    }
}

/// Emulator registration over the endpoint's `mgmt` socket (protocol in the module docs).
#[derive(Debug)]
pub struct EmuRegistrar {
    sock: OwnedFd,
    path: PathBuf,
}

impl EmuRegistrar {
    /// Connects to the `mgmt` socket at `path`, with `timeout` on every exchange.
    pub fn connect(path: &Path, timeout: Duration) -> Result<EmuRegistrar, RegisterError> {
        let err = |e: io::Error| RegisterError::Io {
            path: path.to_path_buf(),
            source: e,
        };
        let sock = gsas_sys::socket::connect(path, timeout).map_err(err)?;
        gsas_sys::socket::set_timeouts(sock.as_fd(), timeout).map_err(err)?;
        Ok(EmuRegistrar {
            sock,
            path: path.to_path_buf(),
        })
    }

    fn exchange(
        &mut self,
        req: &[u8; mgmt::REQUEST_LEN],
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Nva, RegisterError> {
        let err = |e: io::Error| RegisterError::Io {
            path: self.path.clone(),
            source: e,
        };
        gsas_sys::fdpass::send_with_fd(self.sock.as_fd(), &[IoSlice::new(req)], fd).map_err(err)?;
        let mut reply = [0u8; 64];
        let (n, _) = gsas_sys::fdpass::recv_with_fd(self.sock.as_fd(), &mut reply).map_err(err)?;
        if n == 0 {
            return Err(err(io::Error::from(io::ErrorKind::UnexpectedEof)));
        }
        let u32_at = |o: usize| u32::from_le_bytes(reply[o..o + 4].try_into().expect("4 bytes"));
        if n != mgmt::REPLY_LEN || u32_at(0) != mgmt::MAGIC {
            return Err(RegisterError::Protocol {
                path: self.path.clone(),
                what: "malformed reply",
            });
        }
        match u32_at(4) {
            mgmt_status::OK => Ok(Nva(u64::from_le_bytes(
                reply[8..16].try_into().expect("8 bytes"),
            ))),
            status => Err(RegisterError::Refused {
                path: self.path.clone(),
                status,
            }),
        }
    }

    fn request(op: u32, region: u32, len: u64) -> [u8; mgmt::REQUEST_LEN] {
        let mut req = [0u8; mgmt::REQUEST_LEN];
        req[0..4].copy_from_slice(&mgmt::MAGIC.to_le_bytes());
        req[4..8].copy_from_slice(&op.to_le_bytes());
        req[8..12].copy_from_slice(&region.to_le_bytes());
        req[16..24].copy_from_slice(&len.to_le_bytes());
        req
    }

    /// Registers `seg` as region `region` (instead of any free id).
    pub fn register_as(&mut self, seg: &MemSegment, region: u8) -> Result<Nva, RegisterError> {
        let req = Self::request(mgmt::OP_REGISTER, u32::from(region), seg.len() as u64);
        self.exchange(&req, Some(seg.fd()))
    }
}

impl Registrar for EmuRegistrar {
    fn register(&mut self, seg: &MemSegment) -> Result<Nva, RegisterError> {
        let req = Self::request(mgmt::OP_REGISTER, mgmt::ANY_REGION, seg.len() as u64);
        self.exchange(&req, Some(seg.fd()))
    }
    fn unregister(&mut self, base: Nva) -> Result<(), RegisterError> {
        let req = Self::request(mgmt::OP_UNREGISTER, u32::from(base.region()), 0);
        self.exchange(&req, None).map(|_| ())
    }
}

/// Checks that a Unix socket path fits `sun_path`.
pub fn socket_path_ok(path: &Path) -> bool {
    let b = path.as_os_str().as_bytes();
    !b.is_empty() && b.len() < 108 && !b.contains(&0)
}

impl AsRawFd for EmuRegistrar {
    fn as_raw_fd(&self) -> i32 {
        self.sock.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nva_layout() {
        let n = Nva::new(3, 0x1234);
        assert_eq!(n.0, 3 << 40 | 0x1234);
        assert_eq!((n.region(), n.offset()), (3, 0x1234));
        assert_eq!(n.add(0x10).offset(), 0x1244);
    }

    #[test]
    fn segment_read_write_and_bounds() {
        let seg = MemSegment::create("t", 4096).unwrap();
        seg.write(100, b"hello").unwrap();
        let mut out = [0u8; 5];
        seg.read(100, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert!(seg.write(4094, b"abc").is_err());
        assert!(seg.read(usize::MAX, &mut out).is_err());
        assert!(MemSegment::create("z", 0).is_err());
        let nva = SmmuRegistrar.register(&seg).unwrap();
        assert_eq!(nva.0, seg.as_ptr() as u64 & crate::regs::NVA_MASK);
    }
}
