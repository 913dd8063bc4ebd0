//! Point-to-point synchronization and signal reads of the Rust API (OpenSHMEM 1.5 §9.10
//! and §9.8.2).
//!
//! **What it is.** Methods of [`Shmem`] that wait for or test conditions on this PE's
//! own symmetric variables, which other PEs update with AMOs, puts or signals. Multi-element
//! forms take an optional `skip` mask (`true` excludes the element: the specification's
//! nonzero `status`) and [`CmpValues`]: one value for all, or one per element.
//!
//! **What it is not.** No remote reads: these routines look at local memory only.
//!
//! **Thread-safety.** Any thread may wait; waits are bounded by `SHMEM_WAIT_TIMEOUT`.

use std::ffi::c_int;

use super::Shmem;
use super::sym::SymSlice;
use crate::p2p_wait::{self as q, Cmp, Set, Values};
use crate::types::AmoStandard;

/// The comparison values of a multi-element wait or test.
#[derive(Clone, Copy, Debug)]
pub enum CmpValues<'a, T> {
    /// One value for every element.
    One(T),
    /// Element `i` is compared with `values[i]` (the `_vector` routines).
    Each(&'a [T]),
}

/// The internals' set for `ivars`, with the mask converted to C ints in `status`.
fn set<T: AmoStandard>(
    ivars: SymSlice<'_, T>,
    skip: Option<&[bool]>,
    status: &mut Vec<c_int>,
    cmp: Cmp,
    values: CmpValues<'_, T>,
    call: &str,
) -> Set {
    let n = ivars.len();
    let status_ptr = match skip {
        Some(mask) => {
            assert_eq!(
                mask.len(),
                n,
                "{call}: the mask has {} entries for {n} variables",
                mask.len()
            );
            status.extend(mask.iter().map(|&s| c_int::from(s)));
            status.as_ptr()
        }
        None => std::ptr::null(),
    };
    let values = match values {
        CmpValues::One(v) => Values::One(v.to_i128()),
        CmpValues::Each(vs) => {
            assert_eq!(
                vs.len(),
                n,
                "{call}: {} comparison values for {n} variables",
                vs.len()
            );
            Values::Each(vs.as_ptr().cast())
        }
    };
    Set {
        ivars: ivars.as_ptr().cast(),
        nelems: n,
        status: status_ptr,
        kind: T::KIND,
        cmp,
        values,
    }
}

impl Shmem {
    /// `shmem_wait_until` (OpenSHMEM 1.5 §9.10.1): waits until the local `ivar` satisfies
    /// `cmp value`; returns the value that did.
    ///
    /// # Panics
    ///
    /// If `ivar` is empty.
    pub fn wait_until<'a, T: AmoStandard>(
        &self,
        ivar: impl Into<SymSlice<'a, T>>,
        cmp: Cmp,
        value: T,
    ) -> T {
        const CALL: &str = "shmem::Shmem::wait_until";
        let p = ivar.into().first(CALL);
        // SAFETY: `p` is a live symmetric element of this PE.
        let v =
            unsafe { q::wait_until(p.cast_const().cast(), T::KIND, cmp, value.to_i128(), CALL) };
        T::from_bits(v as u64)
    }

    /// `shmem_test` (OpenSHMEM 1.5 §9.10.8): whether the local `ivar` satisfies `cmp value`.
    ///
    /// # Panics
    ///
    /// If `ivar` is empty.
    pub fn test<'a, T: AmoStandard>(
        &self,
        ivar: impl Into<SymSlice<'a, T>>,
        cmp: Cmp,
        value: T,
    ) -> bool {
        const CALL: &str = "shmem::Shmem::test";
        let p = ivar.into().first(CALL);
        // SAFETY: as above.
        unsafe { q::test(p.cast_const().cast(), T::KIND, cmp, value.to_i128(), CALL) }
    }

    /// `shmem_wait_until_all[_vector]` (OpenSHMEM 1.5 §9.10.2, §9.10.5): waits until every
    /// included variable satisfies its condition (at once for an empty set).
    ///
    /// # Panics
    ///
    /// If `skip` or a value vector does not have one entry per variable.
    pub fn wait_until_all<'a, T: AmoStandard>(
        &self,
        ivars: impl Into<SymSlice<'a, T>>,
        skip: Option<&[bool]>,
        cmp: Cmp,
        values: CmpValues<'_, T>,
    ) {
        const CALL: &str = "shmem::Shmem::wait_until_all";
        let mut status = Vec::new();
        let s = set(ivars.into(), skip, &mut status, cmp, values, CALL);
        // SAFETY: the set's arrays are live for the call.
        unsafe { q::wait_until_all(s, CALL) }
    }

    /// `shmem_wait_until_any[_vector]` (OpenSHMEM 1.5 §9.10.3, §9.10.6): the index of a
    /// satisfied variable; `None` for an empty set. Successive calls rotate through the
    /// satisfied indices.
    ///
    /// # Panics
    ///
    /// As [`Shmem::wait_until_all`].
    pub fn wait_until_any<'a, T: AmoStandard>(
        &self,
        ivars: impl Into<SymSlice<'a, T>>,
        skip: Option<&[bool]>,
        cmp: Cmp,
        values: CmpValues<'_, T>,
    ) -> Option<usize> {
        const CALL: &str = "shmem::Shmem::wait_until_any";
        let mut status = Vec::new();
        let s = set(ivars.into(), skip, &mut status, cmp, values, CALL);
        // SAFETY: as above.
        let i = unsafe { q::wait_until_any(s, CALL) };
        (i != usize::MAX).then_some(i)
    }

    /// `shmem_wait_until_some[_vector]` (OpenSHMEM 1.5 §9.10.4, §9.10.7): the indices of
    /// all satisfied variables once there is at least one (empty for an empty set).
    ///
    /// # Panics
    ///
    /// As [`Shmem::wait_until_all`].
    pub fn wait_until_some<'a, T: AmoStandard>(
        &self,
        ivars: impl Into<SymSlice<'a, T>>,
        skip: Option<&[bool]>,
        cmp: Cmp,
        values: CmpValues<'_, T>,
    ) -> Vec<usize> {
        const CALL: &str = "shmem::Shmem::wait_until_some";
        let mut status = Vec::new();
        let s = set(ivars.into(), skip, &mut status, cmp, values, CALL);
        let mut idx = vec![0usize; s.nelems];
        // SAFETY: as above; `idx` has room for every index.
        let n = unsafe { q::wait_until_some(s, idx.as_mut_ptr(), CALL) };
        idx.truncate(n);
        idx
    }

    /// `shmem_test_all[_vector]` (OpenSHMEM 1.5 §9.10.9, §9.10.12): whether every included
    /// variable satisfies its condition (true for an empty set).
    ///
    /// # Panics
    ///
    /// As [`Shmem::wait_until_all`].
    pub fn test_all<'a, T: AmoStandard>(
        &self,
        ivars: impl Into<SymSlice<'a, T>>,
        skip: Option<&[bool]>,
        cmp: Cmp,
        values: CmpValues<'_, T>,
    ) -> bool {
        const CALL: &str = "shmem::Shmem::test_all";
        let mut status = Vec::new();
        let s = set(ivars.into(), skip, &mut status, cmp, values, CALL);
        // SAFETY: as above.
        unsafe { q::test_all(s, CALL) != 0 }
    }

    /// `shmem_test_any[_vector]` (OpenSHMEM 1.5 §9.10.10, §9.10.13).
    ///
    /// # Panics
    ///
    /// As [`Shmem::wait_until_all`].
    pub fn test_any<'a, T: AmoStandard>(
        &self,
        ivars: impl Into<SymSlice<'a, T>>,
        skip: Option<&[bool]>,
        cmp: Cmp,
        values: CmpValues<'_, T>,
    ) -> Option<usize> {
        const CALL: &str = "shmem::Shmem::test_any";
        let mut status = Vec::new();
        let s = set(ivars.into(), skip, &mut status, cmp, values, CALL);
        // SAFETY: as above.
        let i = unsafe { q::test_any(s, CALL) };
        (i != usize::MAX).then_some(i)
    }

    /// `shmem_test_some[_vector]` (OpenSHMEM 1.5 §9.10.11, §9.10.14): the indices of the
    /// satisfied variables (possibly none).
    ///
    /// # Panics
    ///
    /// As [`Shmem::wait_until_all`].
    pub fn test_some<'a, T: AmoStandard>(
        &self,
        ivars: impl Into<SymSlice<'a, T>>,
        skip: Option<&[bool]>,
        cmp: Cmp,
        values: CmpValues<'_, T>,
    ) -> Vec<usize> {
        const CALL: &str = "shmem::Shmem::test_some";
        let mut status = Vec::new();
        let s = set(ivars.into(), skip, &mut status, cmp, values, CALL);
        let mut idx = vec![0usize; s.nelems];
        // SAFETY: as above.
        let n = unsafe { q::test_some(s, idx.as_mut_ptr(), CALL) };
        idx.truncate(n);
        idx
    }

    /// `shmem_signal_fetch` (OpenSHMEM 1.5 §9.8.2): the local signal word.
    ///
    /// # Panics
    ///
    /// If `sig` is empty.
    pub fn signal_fetch<'a>(&self, sig: impl Into<SymSlice<'a, u64>>) -> u64 {
        const CALL: &str = "shmem::Shmem::signal_fetch";
        let p = sig.into().first(CALL);
        // SAFETY: a live symmetric u64 of this PE.
        unsafe { q::signal_fetch(p, CALL) }
    }

    /// `shmem_signal_wait_until` (OpenSHMEM 1.5 §9.10.15): waits until the local signal word
    /// satisfies `cmp value`; returns the value that did.
    ///
    /// # Panics
    ///
    /// If `sig` is empty.
    pub fn signal_wait_until<'a>(
        &self,
        sig: impl Into<SymSlice<'a, u64>>,
        cmp: Cmp,
        value: u64,
    ) -> u64 {
        const CALL: &str = "shmem::Shmem::signal_wait_until";
        let p = sig.into().first(CALL);
        // SAFETY: as above.
        unsafe { q::signal_wait_until(p, cmp, value, CALL) }
    }
}
