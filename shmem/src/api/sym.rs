//! Typed symmetric objects: [`SymVec`], [`SymBox`] and the view [`SymSlice`].
//!
//! **What it is.** A [`SymVec<T>`] is `len` elements of `T` in the symmetric heap,
//! allocated collectively (`shmem_calloc`, so zeroed, or `shmem_align`) and freed
//! collectively when dropped (`shmem_free`, a barrier). The same object exists at the same
//! offset on every PE, so a [`SymSlice`] of it names the object on any PE in RMA and AMO
//! calls. Local access: [`SymVec::read`]/[`SymVec::write`] (one `Relaxed` atomic access per
//! element of 1, 2, 4 or 8 bytes, as cheap as a plain one and safe whatever other PEs do), or `unsafe` slices for bulk work when no PE writes meanwhile.
//!
//! **What it is not.** Not `Clone` (a collective object has one owner per PE), not a
//! growable vector (see [`SymVec::resize`], a collective realloc).
//!
//! **Thread-safety.** `Send + Sync` for `Symmetric` element types; the memory may change
//! under any reader because remote PEs write it.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;

use super::{Error, ErrorKind, Shmem};
use crate::memory;
use crate::types::Symmetric;

/// Expands `$body` with `$atomic` the atomic type of `T`'s size (1, 2, 4, 8 bytes); for
/// other sizes (16-byte `i128`/`u128`) `$other`. `size_of::<T>()` is a constant, so only
/// one arm is left after monomorphization.
macro_rules! by_width {
    ($t:ty, |$atomic:ident, $bits:ident| $body:expr, $other:expr) => {
        match size_of::<$t>() {
            1 => {
                type $atomic = std::sync::atomic::AtomicU8;
                type $bits = u8;
                $body
            }
            2 => {
                type $atomic = std::sync::atomic::AtomicU16;
                type $bits = u16;
                $body
            }
            4 => {
                type $atomic = std::sync::atomic::AtomicU32;
                type $bits = u32;
                $body
            }
            8 => {
                type $atomic = std::sync::atomic::AtomicU64;
                type $bits = u64;
                $body
            }
            _ => $other,
        }
    };
}

/// Loads the element at `p`: one `Relaxed` atomic load of its size (1, 2, 4, 8 bytes; a
/// volatile load costs the same instruction but races with a remote PE's write), else a
/// watched copy (every aligned 8-byte half by one atomic load).
///
/// # Safety
///
/// `p` valid for reads of a `T` and aligned for it; `T` plain data (`Symmetric`).
#[inline(always)]
unsafe fn load_relaxed<T: Symmetric>(p: *const T) -> T {
    by_width!(
        T,
        |A, B| {
            // SAFETY: `p` is aligned for `T`, whose alignment is its size for these widths
            // (primitive integers and floats); concurrent accesses by other PEs are atomic
            // or from outside this process.
            let bits: B = unsafe { A::from_ptr(p.cast_mut().cast()) }
                .load(std::sync::atomic::Ordering::Relaxed);
            // SAFETY: same size; every bit pattern is a valid `T` (`Symmetric`).
            unsafe { std::mem::transmute_copy::<B, T>(&bits) }
        },
        {
            let mut v = std::mem::MaybeUninit::<T>::uninit();
            // SAFETY: `p` readable for `size_of::<T>()` bytes, `v` writable; every byte of
            // `v` is written, and any bit pattern is a valid `T`.
            unsafe {
                gsas_transport::watched::load_once(p.cast(), v.as_mut_ptr().cast(), size_of::<T>());
                v.assume_init()
            }
        }
    )
}

/// Stores `value` at `p`: one `Relaxed` atomic store of its size, else a watched copy.
///
/// # Safety
///
/// `p` valid for writes of a `T` and aligned for it; `T` plain data (`Symmetric`).
#[inline(always)]
unsafe fn store_relaxed<T: Symmetric>(p: *mut T, value: T) {
    by_width!(
        T,
        |A, B| {
            // SAFETY: same size; `T` has no padding (`Symmetric`).
            let bits: B = unsafe { std::mem::transmute_copy::<T, B>(&value) };
            // SAFETY: as in `load_relaxed`.
            unsafe { A::from_ptr(p.cast()) }.store(bits, std::sync::atomic::Ordering::Relaxed)
        },
        // SAFETY: `p` writable for `size_of::<T>()` bytes; `value` is a local.
        unsafe {
            gsas_transport::watched::store_once((&raw const value).cast(), p.cast(), size_of::<T>())
        }
    )
}

/// A view of symmetric elements: the address of an element range, valid on every PE.
#[derive(Debug)]
pub struct SymSlice<'a, T> {
    ptr: NonNull<T>,
    len: usize,
    _life: PhantomData<&'a T>,
}

impl<T> Clone for SymSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SymSlice<'_, T> {}

// SAFETY: a SymSlice is an address range; the memory behind it is shared by design and only
// accessed through the library's atomics and watched copies.
unsafe impl<T: Symmetric> Send for SymSlice<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Symmetric> Sync for SymSlice<'_, T> {}

impl<'a, T> SymSlice<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The local address of the first element (symmetric: valid in RMA calls for any PE).
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// The elements in `range`.
    ///
    /// # Panics
    ///
    /// If the range is out of bounds.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> SymSlice<'a, T> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e + 1,
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        assert!(
            start <= end && end <= self.len,
            "range {start}..{end} out of bounds of a symmetric slice of {} elements",
            self.len
        );
        SymSlice {
            // SAFETY: `start <= len`, so the pointer stays inside (or one past) the object.
            ptr: unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(start)) },
            len: end - start,
            _life: PhantomData,
        }
    }

    /// Element `i` as a slice of one.
    ///
    /// # Panics
    ///
    /// If `i` is out of bounds.
    pub fn at(&self, i: usize) -> SymSlice<'a, T> {
        self.slice(i..i + 1)
    }

    /// The first element's address, for single-element routines.
    ///
    /// # Panics
    ///
    /// If the slice is empty.
    pub(crate) fn first(&self, call: &str) -> *mut T {
        assert!(self.len > 0, "{call}: the symmetric slice is empty");
        self.ptr.as_ptr()
    }
}

/// Symmetric elements in the heap; see the [API overview](crate::api).
#[derive(Debug)]
pub struct SymVec<'s, T: Symmetric> {
    ptr: NonNull<T>,
    len: usize,
    _shmem: PhantomData<&'s Shmem>,
}

// SAFETY: the object is shared memory accessed through the library; `T: Symmetric` is plain
// data.
unsafe impl<T: Symmetric> Send for SymVec<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Symmetric> Sync for SymVec<'_, T> {}

fn alloc_error(what: &str, bytes: usize) -> Error {
    Error::new(
        ErrorKind::OutOfMemory,
        format!("{what}: the symmetric heap cannot hold {bytes} more bytes (SHMEM_SYMMETRIC_SIZE)"),
    )
}

impl Shmem {
    /// `shmem_calloc` (OpenSHMEM 1.5 §9.3.3): `len` zeroed elements, a collective.
    /// `len == 0` gives an empty vector without communication.
    ///
    /// Errors: [`ErrorKind::OutOfMemory`] on every PE when the heap cannot hold it.
    pub fn alloc_vec<T: Symmetric>(&self, len: usize) -> Result<SymVec<'_, T>, Error> {
        const CALL: &str = "shmem::Shmem::alloc_vec";
        if len == 0 || size_of::<T>() == 0 {
            return Ok(SymVec::empty());
        }
        let p = memory::calloc(len, size_of::<T>(), CALL);
        SymVec::from_raw(p.cast(), len)
            .ok_or_else(|| alloc_error(CALL, len.saturating_mul(size_of::<T>())))
    }

    /// `shmem_align` (OpenSHMEM 1.5 §9.3.1): `len` elements aligned to `alignment` bytes (a
    /// power of two; below the pointer size it means the pointer size, the least alignment
    /// of every block), a collective. The contents are unspecified (whatever the heap held)
    /// until written.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] for a bad alignment,
    /// [`ErrorKind::OutOfMemory`] as [`Shmem::alloc_vec`].
    pub fn alloc_vec_aligned<T: Symmetric>(
        &self,
        alignment: usize,
        len: usize,
    ) -> Result<SymVec<'_, T>, Error> {
        const CALL: &str = "shmem::Shmem::alloc_vec_aligned";
        if !alignment.is_power_of_two() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("{CALL}: alignment {alignment} is not a power of two"),
            ));
        }
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| alloc_error(CALL, usize::MAX))?;
        if bytes == 0 {
            return Ok(SymVec::empty());
        }
        let alignment = alignment.max(align_of::<T>());
        let p = memory::align(alignment, bytes, CALL);
        SymVec::from_raw(p.cast(), len).ok_or_else(|| alloc_error(CALL, bytes))
    }

    /// `shmem_malloc_with_hints` (OpenSHMEM 1.5 §9.3.2): `len` elements with
    /// `SHMEM_MALLOC_*` hint bits (accepted; they permit optimisations gsas does not need),
    /// a collective. The contents are unspecified until written.
    ///
    /// Errors: as [`Shmem::alloc_vec`].
    pub fn alloc_vec_with_hints<T: Symmetric>(
        &self,
        len: usize,
        hints: i64,
    ) -> Result<SymVec<'_, T>, Error> {
        const CALL: &str = "shmem::Shmem::alloc_vec_with_hints";
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| alloc_error(CALL, usize::MAX))?;
        if bytes == 0 {
            return Ok(SymVec::empty());
        }
        let p = memory::malloc_with_hints(bytes, hints as std::ffi::c_long, CALL);
        SymVec::from_raw(p.cast(), len).ok_or_else(|| alloc_error(CALL, bytes))
    }

    /// One symmetric element holding `value` on this PE (a collective).
    ///
    /// Errors: as [`Shmem::alloc_vec`].
    pub fn alloc_box<T: Symmetric>(&self, value: T) -> Result<SymBox<'_, T>, Error> {
        let v = self.alloc_vec::<T>(1)?;
        v.write(0, value);
        // Every PE's initial value is in place before anyone can address it.
        self.barrier_all();
        Ok(SymBox(v))
    }
}

impl<'s, T: Symmetric> SymVec<'s, T> {
    fn empty() -> Self {
        SymVec {
            ptr: NonNull::dangling(),
            len: 0,
            _shmem: PhantomData,
        }
    }

    fn from_raw(p: *mut T, len: usize) -> Option<Self> {
        NonNull::new(p).map(|ptr| SymVec {
            ptr,
            len,
            _shmem: PhantomData,
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The local address of the first element.
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// The whole object as a [`SymSlice`].
    pub fn as_sym(&self) -> SymSlice<'_, T> {
        SymSlice {
            ptr: self.ptr,
            len: self.len,
            _life: PhantomData,
        }
    }

    /// Elements `range` as a [`SymSlice`].
    ///
    /// # Panics
    ///
    /// If the range is out of bounds.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> SymSlice<'_, T> {
        self.as_sym().slice(range)
    }

    /// Element `i` as a [`SymSlice`] of one.
    ///
    /// # Panics
    ///
    /// If `i` is out of bounds.
    pub fn at(&self, i: usize) -> SymSlice<'_, T> {
        self.as_sym().at(i)
    }

    /// Reads local element `i` (one `Relaxed` atomic load for 1, 2, 4 and 8-byte types, so
    /// never a data race with a remote PE's write; sees what other PEs wrote once their
    /// writes are complete).
    ///
    /// # Panics
    ///
    /// If `i` is out of bounds.
    pub fn read(&self, i: usize) -> T {
        assert!(
            i < self.len,
            "index {i} out of bounds of {} elements",
            self.len
        );
        // SAFETY: `i < len` elements of a live heap block, aligned for `T`; `T` is plain data.
        unsafe { load_relaxed(self.ptr.as_ptr().add(i)) }
    }

    /// Writes local element `i` (one `Relaxed` atomic store for 1, 2, 4 and 8-byte types).
    ///
    /// # Panics
    ///
    /// If `i` is out of bounds.
    pub fn write(&self, i: usize, value: T) {
        assert!(
            i < self.len,
            "index {i} out of bounds of {} elements",
            self.len
        );
        // SAFETY: as in `read`.
        unsafe { store_relaxed(self.ptr.as_ptr().add(i), value) }
    }

    /// A copy of the local elements (element loads as [`SymVec::read`]).
    pub fn to_vec(&self) -> Vec<T> {
        (0..self.len).map(|i| self.read(i)).collect()
    }

    /// Writes `value` to every local element.
    pub fn fill(&self, value: T) {
        (0..self.len).for_each(|i| self.write(i, value));
    }

    /// The local elements as a slice.
    ///
    /// # Safety
    ///
    /// No PE may write these elements while the slice is alive (e.g. between two barriers
    /// in which nobody targets them).
    pub unsafe fn as_slice(&self) -> &[T] {
        // SAFETY: `len` initialized elements (zeroed at allocation); the caller excludes
        // concurrent writers.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The local elements as a mutable slice.
    ///
    /// # Safety
    ///
    /// No PE may read or write these elements while the slice is alive.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`, exclusive by `&mut self` and the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// `shmem_realloc` (OpenSHMEM 1.5 §9.3.1): changes the length to `len` (a collective;
    /// the contents up to the smaller length are kept, new elements are unspecified until
    /// written). On failure the vector is unchanged on every PE.
    ///
    /// Errors: [`ErrorKind::OutOfMemory`].
    pub fn resize(&mut self, len: usize) -> Result<(), Error> {
        const CALL: &str = "shmem::SymVec::resize";
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| alloc_error(CALL, usize::MAX))?;
        if self.len == 0 {
            let p = memory::malloc(bytes, CALL);
            if bytes > 0 {
                self.ptr = NonNull::new(p.cast()).ok_or_else(|| alloc_error(CALL, bytes))?;
            }
            self.len = len;
            return Ok(());
        }
        if bytes == 0 {
            memory::free(self.ptr.as_ptr().cast(), CALL);
            *self = SymVec::empty();
            return Ok(());
        }
        let p = memory::realloc(self.ptr.as_ptr().cast(), bytes, CALL);
        self.ptr = NonNull::new(p.cast()).ok_or_else(|| alloc_error(CALL, bytes))?;
        self.len = len;
        Ok(())
    }
}

impl<T: Symmetric> Drop for SymVec<'_, T> {
    /// `shmem_free`: a collective (barrier on entry).
    fn drop(&mut self) {
        if self.len > 0 && crate::state::is_running() {
            crate::fatal::not_while_panicking("shmem::SymVec::drop");
            memory::free(self.ptr.as_ptr().cast(), "shmem::SymVec::drop");
        }
    }
}

impl<'a, T: Symmetric> From<&'a SymVec<'_, T>> for SymSlice<'a, T> {
    fn from(v: &'a SymVec<'_, T>) -> Self {
        v.as_sym()
    }
}

/// One symmetric element; see the [API overview](crate::api).
#[derive(Debug)]
pub struct SymBox<'s, T: Symmetric>(SymVec<'s, T>);

impl<T: Symmetric> SymBox<'_, T> {
    /// Reads the local value (as [`SymVec::read`]).
    pub fn read(&self) -> T {
        self.0.read(0)
    }

    /// Writes the local value (as [`SymVec::write`]).
    pub fn write(&self, value: T) {
        self.0.write(0, value)
    }

    /// The local address.
    pub fn as_ptr(&self) -> *const T {
        self.0.as_ptr()
    }

    /// The element as a [`SymSlice`].
    pub fn as_sym(&self) -> SymSlice<'_, T> {
        self.0.as_sym()
    }
}

impl<'a, T: Symmetric> From<&'a SymBox<'_, T>> for SymSlice<'a, T> {
    fn from(b: &'a SymBox<'_, T>) -> Self {
        b.as_sym()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element width: a store writes exactly its element (neighbours intact) and a
    /// load returns it; a store of the wrong width would clobber a neighbour.
    fn round_trip<T: Symmetric + PartialEq + std::fmt::Debug>(a: T, b: T) {
        let mut v = [b, b, b];
        let p = v.as_mut_ptr();
        // SAFETY: `p .. p + 3` is a live, aligned local array.
        unsafe {
            store_relaxed(p.add(1), a);
            assert_eq!(load_relaxed(p.add(1)), a);
            assert_eq!(load_relaxed(p), b);
            assert_eq!(load_relaxed(p.add(2)), b);
        }
        assert_eq!(v, [b, a, b]);
    }

    #[test]
    fn element_accesses_have_the_element_width() {
        round_trip::<u8>(0x5a, 0xff);
        round_trip::<i16>(-2, 0x7fff);
        round_trip::<u32>(0xdead_beef, u32::MAX);
        round_trip::<f32>(1.5, f32::MAX);
        round_trip::<i64>(-3, i64::MAX);
        round_trip::<f64>(-0.25, f64::MIN);
        round_trip::<u128>(u128::MAX / 3, u128::MAX);
        round_trip::<isize>(-7, isize::MIN);
    }
}
