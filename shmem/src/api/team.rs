//! Team handles of the Rust API (OpenSHMEM 1.5 §9.4): queries, translation, contexts.
//!
//! **What it is.** A [`Team`] names a team: the world or shared team from
//! [`Shmem::team_world`](super::Shmem::team_world) / [`Shmem::team_shared`](super::Shmem::team_shared),
//! or a split's ([`super::OwnedTeam::team`]). PE numbers are the team's. Its collectives and
//! splits are in the `coll` part of the API.
//!
//! **What it is not.** Not an owner: predefined teams are never destroyed, split teams by
//! their [`super::OwnedTeam`].
//!
//! **Thread-safety.** `Send + Sync`.

use std::marker::PhantomData;

use super::Error;
use super::ctx::{Ctx, CtxOptions};
use super::sym::SymSlice;
use crate::team::{self, RawTeam};
use crate::types::Symmetric;

/// A team handle; see the [API overview](crate::api).
#[derive(Debug, Clone, Copy)]
pub struct Team<'s> {
    handle: RawTeam,
    _shmem: PhantomData<&'s ()>,
}

// SAFETY: a team handle is an address of immutable library data (or of a team object whose
// mutable part is behind a mutex).
unsafe impl Send for Team<'_> {}
// SAFETY: as above.
unsafe impl Sync for Team<'_> {}

impl<'s> Team<'s> {
    pub(crate) fn predefined(handle: RawTeam) -> Team<'s> {
        Team {
            handle,
            _shmem: PhantomData,
        }
    }

    fn get(&self, call: &str) -> Option<&'static team::Team> {
        // SAFETY: handles of this type come from the library.
        unsafe { team::resolve(self.handle, call) }
    }

    /// The C handle (`shmem_team_t`).
    pub fn as_raw(&self) -> RawTeam {
        self.handle
    }

    /// `shmem_team_my_pe` (OpenSHMEM 1.5 §9.4.1): this PE's number in the team.
    pub fn my_pe(&self) -> Option<usize> {
        self.get("shmem::Team::my_pe")
            .and_then(|t| t.my_pe())
            .map(|p| p as usize)
    }

    /// `shmem_team_n_pes` (OpenSHMEM 1.5 §9.4.2).
    pub fn n_pes(&self) -> usize {
        self.get("shmem::Team::n_pes")
            .map_or(0, |t| t.n_pes() as usize)
    }

    /// `shmem_team_get_config` (OpenSHMEM 1.5 §9.4.3): the configured `num_contexts`.
    pub fn num_contexts(&self) -> i32 {
        self.get("shmem::Team::num_contexts")
            .map_or(0, |t| t.num_contexts())
    }

    /// `shmem_team_translate_pe` (OpenSHMEM 1.5 §9.4.4): team PE `pe` as a PE of `dest`.
    pub fn translate_pe(&self, pe: usize, dest: &Team<'_>) -> Option<usize> {
        const CALL: &str = "shmem::Team::translate_pe";
        let (s, d) = (self.get(CALL)?, dest.get(CALL)?);
        s.translate(u32::try_from(pe).ok()?, d).map(|p| p as usize)
    }

    /// `shmem_team_ptr` (OpenSHMEM 1.6, team management routines; the team-relative
    /// [`Shmem::ptr`](super::Shmem::ptr)): a local pointer to `obj` on team PE `pe` if that
    /// PE is this one or on this node (loads and stores through it reach its memory);
    /// `None` for a PE number outside the team, a PE of another node, or an invalid team.
    pub fn ptr<'a, T: Symmetric>(
        &self,
        obj: impl Into<SymSlice<'a, T>>,
        pe: usize,
    ) -> Option<std::ptr::NonNull<T>> {
        const CALL: &str = "shmem::Team::ptr";
        let world = self.get(CALL)?.world_pe(u32::try_from(pe).ok()?)?;
        crate::state::live(CALL)
            .local_ptr(obj.into().as_ptr() as usize, world)
            .map(std::ptr::NonNull::cast)
    }

    /// `shmem_team_create_ctx` (OpenSHMEM 1.5 §9.5.2): a context whose PE numbers are this
    /// team's.
    ///
    /// Errors: [`super::ErrorKind::Context`] when no context is left or this PE is not in
    /// the team.
    pub fn create_ctx(&self, options: CtxOptions) -> Result<Ctx<'s>, Error> {
        Ctx::create(self.handle, options)
    }
}
