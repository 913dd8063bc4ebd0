//! Collectives and splits of the Rust API (OpenSHMEM 1.5 §9.4, §9.9): methods of [`Team`],
//! the reduction operations of [`op`], [`TeamConfig`] and [`OwnedTeam`].
//!
//! **What it is.** Every collective is a method of the team it runs on (the world team
//! from [`Shmem::team_world`](super::Shmem::team_world)); buffers are [`SymSlice`]s
//! (symmetric on every member), element counts come from their lengths. Reductions take an
//! operation value whose type says which element types it accepts: [`op::And`],
//! [`op::Or`], [`op::Xor`] on [`ReduceBitwise`](crate::ReduceBitwise) types, [`op::Max`],
//! [`op::Min`] on [`ReduceMinMax`](crate::ReduceMinMax) types, [`op::Sum`], [`op::Prod`] on
//! [`ReduceArith`](crate::ReduceArith) types (the
//! specification's reduction type tables). Splits return an [`OwnedTeam`], destroyed when
//! dropped; its [`OwnedTeam::team`] handle borrows it.
//!
//! Errors: a collective on a team this PE is not in, or with a root outside the team,
//! returns [`ErrorKind::InvalidArgument`] (the same on every PE); slices shorter than the
//! operation needs panic, as in the rest of the API.
//!
//! **What it is not.** No active-set forms (deprecated; the C ABI has them).
//!
//! **Thread-safety.** `Send + Sync`; collectives on one team must not run concurrently.

use std::ffi::c_int;

use super::sym::SymSlice;
use super::{Error, ErrorKind, Team};
use crate::coll::{self, On};
use crate::team::split;
use crate::types::Symmetric;

mod sealed {
    /// The codes of a reduction operation on element type `T`.
    pub trait Code<T> {
        fn code(&self) -> crate::coll::Op;
        fn dtype(&self) -> crate::coll::DType;
    }
}

/// A reduction operation accepted for element type `T` (sealed).
pub trait ReduceOp<T>: sealed::Code<T> + Copy {}

/// The reduction operations (OpenSHMEM 1.5 §9.9.9).
pub mod op {
    macro_rules! ops {
        ($($name:ident $code:ident $class:ident: $doc:literal),*) => {
            $(
                #[doc = $doc]
                #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
                pub struct $name;

                impl<T: crate::types::$class> super::sealed::Code<T> for $name {
                    fn code(&self) -> crate::coll::Op {
                        crate::coll::Op::$code
                    }
                    fn dtype(&self) -> crate::coll::DType {
                        <T as crate::coll::ops::Elem>::DTYPE
                    }
                }

                impl<T: crate::types::$class> super::ReduceOp<T> for $name {}
            )*
        };
    }
    ops!(
        And And ReduceBitwise: "Bitwise AND (`shmem_TYPENAME_and_reduce`).",
        Or Or ReduceBitwise: "Bitwise OR (`shmem_TYPENAME_or_reduce`).",
        Xor Xor ReduceBitwise: "Bitwise XOR (`shmem_TYPENAME_xor_reduce`).",
        Max Max ReduceMinMax: "Maximum (`shmem_TYPENAME_max_reduce`).",
        Min Min ReduceMinMax: "Minimum (`shmem_TYPENAME_min_reduce`).",
        Sum Sum ReduceArith: "Sum (`shmem_TYPENAME_sum_reduce`); integers wrap.",
        Prod Prod ReduceArith: "Product (`shmem_TYPENAME_prod_reduce`); integers wrap."
    );
}

/// The configuration of a new team (`shmem_team_config_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TeamConfig {
    /// The number of contexts the program expects to create from the team (a hint).
    pub num_contexts: i32,
}

/// A team made by a split; destroyed (`shmem_team_destroy`, §9.4.9) when dropped.
///
/// [`OwnedTeam::team`] lends its handle for collectives, queries and contexts: the borrow
/// keeps every context created from the team (and every copy of the handle) from
/// outliving it.
#[derive(Debug)]
pub struct OwnedTeam<'s> {
    team: Team<'s>,
}

impl OwnedTeam<'_> {
    /// The team's handle, valid while `self` is borrowed.
    pub fn team(&self) -> Team<'_> {
        Team::predefined(self.team.as_raw())
    }
}

impl Drop for OwnedTeam<'_> {
    fn drop(&mut self) {
        if crate::state::is_running() {
            crate::fatal::not_while_panicking("shmem::OwnedTeam::drop");
            // SAFETY: the handle came from a split and is not used after this.
            unsafe { split::destroy(self.team.as_raw(), "shmem::OwnedTeam::drop") };
        }
    }
}

/// The outcome of a team collective.
fn outcome(rc: c_int, call: &str) -> Result<(), Error> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{call}: refused (this PE is not in the team, or the root is not)"),
        ))
    }
}

fn fits<T>(s: &SymSlice<'_, T>, n: usize, what: &str, call: &str) {
    assert!(
        n <= s.len(),
        "{call}: the {what} needs {n} elements, the slice has {}",
        s.len()
    );
}

impl<'s> Team<'s> {
    fn on(&self) -> On {
        On::Team(self.as_raw())
    }

    /// `shmem_team_sync` (OpenSHMEM 1.5 §9.9.3): waits until every member entered; completes
    /// local stores only (a barrier is [`Ctx::quiet`](super::Ctx::quiet) plus this).
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] if this PE is not a member.
    pub fn sync(&self) -> Result<(), Error> {
        const CALL: &str = "shmem::Team::sync";
        // SAFETY: the handle comes from the library.
        outcome(unsafe { coll::sync(self.on(), CALL) }, CALL)
    }

    /// `shmem_broadcast` (OpenSHMEM 1.5 §9.9.4): `src` of member `root` to `dest` of every
    /// member (the root's too). `src` must be a symmetric object on every member; only the
    /// root's is read. Every member's `dest` must be ready before any member calls.
    ///
    /// Errors: as [`Team::sync`], and for a `root` outside the team.
    ///
    /// # Panics
    ///
    /// If `dest` is shorter than `src`.
    pub fn broadcast<'a, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: impl Into<SymSlice<'a, T>>,
        root: usize,
    ) -> Result<(), Error> {
        const CALL: &str = "shmem::Team::broadcast";
        let (dest, src) = (dest.into(), src.into());
        fits(&dest, src.len(), "destination", CALL);
        let root = c_int::try_from(root).unwrap_or(c_int::MAX);
        // SAFETY: both are symmetric objects of at least `src.len()` elements.
        let rc = unsafe {
            coll::broadcast(
                self.on(),
                dest.as_ptr().cast_mut().cast(),
                src.as_ptr().cast(),
                size_of_val_n::<T>(src.len()),
                root,
                CALL,
            )
        };
        outcome(rc, CALL)
    }

    /// `shmem_fcollect` (OpenSHMEM 1.5 §9.9.6): every member's `src` (all of the same
    /// length) concatenated in member order into every `dest`.
    ///
    /// Errors: as [`Team::sync`].
    ///
    /// # Panics
    ///
    /// If `dest` is shorter than `src.len() * n_pes`.
    pub fn fcollect<'a, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: impl Into<SymSlice<'a, T>>,
    ) -> Result<(), Error> {
        const CALL: &str = "shmem::Team::fcollect";
        let (dest, src) = (dest.into(), src.into());
        fits(&dest, src.len() * self.n_pes(), "destination", CALL);
        // SAFETY: `src` holds its length, `dest` the concatenation.
        let rc = unsafe {
            coll::fcollect(
                self.on(),
                dest.as_ptr().cast_mut().cast(),
                src.as_ptr().cast(),
                size_of_val_n::<T>(src.len()),
                CALL,
            )
        };
        outcome(rc, CALL)
    }

    /// `shmem_collect` (OpenSHMEM 1.5 §9.9.5): every member's `src` (lengths may differ)
    /// concatenated in member order into every `dest`, which must hold the total (the
    /// library checks only that it is symmetric memory).
    ///
    /// Errors: as [`Team::sync`].
    pub fn collect<'a, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: impl Into<SymSlice<'a, T>>,
    ) -> Result<(), Error> {
        const CALL: &str = "shmem::Team::collect";
        let (dest, src) = (dest.into(), src.into());
        // SAFETY: `src` holds its length; `dest` is a symmetric object (the total is the
        // caller's responsibility, as in C).
        let rc = unsafe {
            coll::collect(
                self.on(),
                dest.as_ptr().cast_mut().cast(),
                src.as_ptr().cast(),
                size_of_val_n::<T>(src.len()),
                CALL,
            )
        };
        outcome(rc, CALL)
    }

    /// `shmem_alltoall` (OpenSHMEM 1.5 §9.9.7): block `j` (of `nelems` elements) of this
    /// member's `src` goes to block `i` of member `j`'s `dest`, `i` this member's number.
    ///
    /// Errors: as [`Team::sync`].
    ///
    /// # Panics
    ///
    /// If `src` or `dest` is shorter than `nelems * n_pes`.
    pub fn alltoall<'a, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: impl Into<SymSlice<'a, T>>,
        nelems: usize,
    ) -> Result<(), Error> {
        self.alltoalls(dest, 1, src, 1, nelems)
    }

    /// `shmem_alltoalls` (OpenSHMEM 1.5 §9.9.8): [`Team::alltoall`] with element strides
    /// `dst` in `dest` and `sst` in `src` (at least 1).
    ///
    /// Errors: as [`Team::sync`], and for a stride of 0.
    ///
    /// # Panics
    ///
    /// If `src` or `dest` is shorter than its strided extent.
    pub fn alltoalls<'a, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        dst: usize,
        src: impl Into<SymSlice<'a, T>>,
        sst: usize,
        nelems: usize,
    ) -> Result<(), Error> {
        const CALL: &str = "shmem::Team::alltoalls";
        let (dest, src) = (dest.into(), src.into());
        let span = |stride: usize| {
            let total = nelems * self.n_pes();
            if total == 0 {
                0
            } else {
                (total - 1) * stride + 1
            }
        };
        fits(&dest, span(dst), "destination", CALL);
        fits(&src, span(sst), "source", CALL);
        let stride = |s: usize| isize::try_from(s).unwrap_or(isize::MAX);
        // SAFETY: both extents were checked against their objects.
        let rc = unsafe {
            coll::alltoall(
                self.on(),
                dest.as_ptr().cast_mut().cast(),
                src.as_ptr().cast(),
                stride(dst),
                stride(sst),
                size_of::<T>(),
                nelems,
                CALL,
            )
        };
        outcome(rc, CALL)
    }

    /// A team reduction (OpenSHMEM 1.5 §9.9.9): `dest[i] = src_0[i] op src_1[i] op ...`
    /// over the members in member order, on every member; `dest` and `src` may be the same
    /// slice (in place). Every member gets the same bits, also for floating point.
    ///
    /// Errors: as [`Team::sync`].
    ///
    /// # Panics
    ///
    /// If `dest` is shorter than `src`, or they overlap without being the same.
    pub fn reduce<'a, T: Symmetric, O: ReduceOp<T>>(
        &self,
        op: O,
        dest: impl Into<SymSlice<'a, T>>,
        src: impl Into<SymSlice<'a, T>>,
    ) -> Result<(), Error> {
        const CALL: &str = "shmem::Team::reduce";
        let (dest, src) = (dest.into(), src.into());
        fits(&dest, src.len(), "destination", CALL);
        let (d, s) = (dest.as_ptr() as usize, src.as_ptr() as usize);
        let n = size_of_val_n::<T>(src.len());
        assert!(
            d == s || d + n <= s || s + n <= d,
            "{CALL}: dest and src overlap without being the same"
        );
        // SAFETY: both are symmetric objects of `src.len()` elements, same or disjoint.
        let rc = unsafe {
            coll::reduce(
                self.on(),
                op.code(),
                op.dtype(),
                dest.as_ptr().cast_mut().cast(),
                src.as_ptr().cast(),
                src.len(),
                CALL,
            )
        };
        outcome(rc, CALL)
    }

    /// `shmem_TYPENAME_sum_inscan` (OpenSHMEM 1.6 §9.10.10): an inclusive prefix sum over
    /// the members in team order, `dest[j]` of team PE `i` = `src[j]` summed over team PEs
    /// `0..=i`; `dest` and `src` may be the same slice. Every member gets its prefix summed
    /// in the same order as the reductions, so the bits are reproducible. Costs one
    /// reduction per member (see `coll::scan`).
    ///
    /// Errors: as [`Team::sync`].
    ///
    /// # Panics
    ///
    /// As [`Team::reduce`].
    pub fn sum_inscan<'a, T: crate::types::ReduceArith>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: impl Into<SymSlice<'a, T>>,
    ) -> Result<(), Error> {
        self.scan(dest.into(), src.into(), false, "shmem::Team::sum_inscan")
    }

    /// `shmem_TYPENAME_sum_exscan` (OpenSHMEM 1.6 §9.10.10): the exclusive prefix sum,
    /// `dest[j]` of team PE `i` = `src[j]` summed over team PEs `0..i`; on team PE 0 the
    /// identity of the sum (0, or `-0.0` for floating point).
    ///
    /// Errors: as [`Team::sync`].
    ///
    /// # Panics
    ///
    /// As [`Team::reduce`].
    pub fn sum_exscan<'a, T: crate::types::ReduceArith>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: impl Into<SymSlice<'a, T>>,
    ) -> Result<(), Error> {
        self.scan(dest.into(), src.into(), true, "shmem::Team::sum_exscan")
    }

    fn scan<T: crate::types::ReduceArith>(
        &self,
        dest: SymSlice<'_, T>,
        src: SymSlice<'_, T>,
        exclusive: bool,
        call: &'static str,
    ) -> Result<(), Error> {
        fits(&dest, src.len(), "destination", call);
        let (d, s) = (dest.as_ptr() as usize, src.as_ptr() as usize);
        let n = size_of_val_n::<T>(src.len());
        assert!(
            d == s || d + n <= s || s + n <= d,
            "{call}: dest and src overlap without being the same"
        );
        // SAFETY: both are symmetric objects of `src.len()` elements, same or disjoint.
        let rc = unsafe {
            coll::scan(
                self.as_raw(),
                T::DTYPE,
                dest.as_ptr().cast_mut().cast(),
                src.as_ptr().cast(),
                src.len(),
                exclusive,
                call,
            )
        };
        outcome(rc, call)
    }

    /// `shmem_team_split_strided` (OpenSHMEM 1.5 §9.4.5): a collective of this team; the
    /// new team holds this team's PEs `start + i * stride`, `i < size`. `Ok(None)` on the
    /// PEs outside it.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] (on every PE) for arguments that leave the
    /// team, when this PE is not in this team, or when no team block is free.
    pub fn split_strided(
        &self,
        start: usize,
        stride: isize,
        size: usize,
        config: TeamConfig,
    ) -> Result<Option<OwnedTeam<'s>>, Error> {
        const CALL: &str = "shmem::Team::split_strided";
        let int = |v: i64| i32::try_from(v).unwrap_or(i32::MAX);
        split::split_strided(
            self.as_raw(),
            int(start as i64),
            int(stride as i64),
            int(size as i64),
            config.num_contexts,
            CALL,
        )
        .map(|t| {
            t.map(|h| OwnedTeam {
                team: Team::predefined(h),
            })
        })
        .map_err(|why| Error::new(ErrorKind::InvalidArgument, format!("{CALL}: {why}")))
    }

    /// `shmem_team_split_2d` (OpenSHMEM 1.5 §9.4.6): a collective of this team; returns
    /// this PE's x-team (its row of `xrange` PEs) and y-team (its column).
    ///
    /// Errors: as [`Team::split_strided`], and for `xrange == 0`.
    pub fn split_2d(
        &self,
        xrange: usize,
        xconfig: TeamConfig,
        yconfig: TeamConfig,
    ) -> Result<(OwnedTeam<'s>, OwnedTeam<'s>), Error> {
        const CALL: &str = "shmem::Team::split_2d";
        let xrange = i32::try_from(xrange).unwrap_or(i32::MAX);
        split::split_2d(
            self.as_raw(),
            xrange,
            xconfig.num_contexts,
            yconfig.num_contexts,
            CALL,
        )
        .map(|(x, y)| {
            (
                OwnedTeam {
                    team: Team::predefined(x),
                },
                OwnedTeam {
                    team: Team::predefined(y),
                },
            )
        })
        .map_err(|why| Error::new(ErrorKind::InvalidArgument, format!("{CALL}: {why}")))
    }
}

/// Bytes of `n` elements of `T` (slices cannot exceed `isize::MAX` bytes).
fn size_of_val_n<T>(n: usize) -> usize {
    n * size_of::<T>()
}
