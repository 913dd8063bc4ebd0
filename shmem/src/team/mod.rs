//! Teams: ordered sets of PEs with their own numbering (OpenSHMEM 1.5 §9.4 "Team
//! Management"), and the C handles `SHMEM_TEAM_WORLD` / `SHMEM_TEAM_SHARED`.
//!
//! **What it is.** A [`Team`] maps team PE numbers `0..n` to world PE numbers (`members`,
//! in parent order) and back (a sorted index, O(log n)), knows the calling PE's number in
//! it, its configuration (`num_contexts`), the contexts created from it, and its collective
//! state ([`crate::coll::TeamColl`]: the team's block of the sync segment and its sequence
//! numbers). The world team (every PE) and the shared team (the PEs whose memory this PE
//! maps, i.e. exactly those for which `shmem_ptr` returns non-NULL) are built at
//! initialization and live in a static of this module ([`predefined`]); their C handles are the addresses of the
//! exported objects `gsas_shmem_team_world` and `gsas_shmem_team_shared`, and their
//! collective state is made on first use (blocks 0 and 1). Teams made by splits
//! ([`split`]: `shmem_team_split_strided`, `shmem_team_split_2d`) are heap objects whose
//! handle is their address ([`into_handle`]); `SHMEM_TEAM_INVALID` is NULL;
//! `shmem_team_destroy` ([`split::destroy`]) destroys the team's remaining contexts, frees
//! its sync block and the object.
//!
//! **What it is not.** The collectives themselves are in [`crate::coll`]; this module only
//! holds the objects they run on.
//!
//! **Thread-safety.** A `Team` is immutable after construction except its context list,
//! which is behind a mutex, and its collective state, set once and then locked for the
//! duration of each collective; handles may be used from any thread.

use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use crate::fatal::fatal;
use crate::state;

pub mod split;

/// The C type `shmem_team_t`: an opaque pointer.
pub type RawTeam = *const c_void;

/// Objects whose addresses are the predefined handles (`SHMEM_CTX_DEFAULT`,
/// `SHMEM_TEAM_WORLD`, `SHMEM_TEAM_SHARED`). Only the address matters; the tag makes each
/// object non-empty and distinct.
#[repr(C)]
#[derive(Debug)]
pub struct HandleObject {
    tag: u64,
}

impl HandleObject {
    /// An object with the given tag (distinct contents keep the handle objects distinct
    /// even if a linker merged identical constants).
    pub(crate) const fn new(tag: u64) -> HandleObject {
        HandleObject { tag }
    }
}

/// `SHMEM_TEAM_WORLD` is `&gsas_shmem_team_world`.
#[allow(non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static gsas_shmem_team_world: HandleObject =
    HandleObject::new(u64::from_le_bytes(*b"gsasWRLD"));

/// `SHMEM_TEAM_SHARED` is `&gsas_shmem_team_shared`.
#[allow(non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static gsas_shmem_team_shared: HandleObject =
    HandleObject::new(u64::from_le_bytes(*b"gsasSHRD"));

/// The handle of the world team.
#[inline(always)]
pub fn world_handle() -> RawTeam {
    (&raw const gsas_shmem_team_world).cast()
}

/// The handle of the shared team.
#[inline(always)]
pub fn shared_handle() -> RawTeam {
    (&raw const gsas_shmem_team_shared).cast()
}

const TEAM_MAGIC: u64 = u64::from_le_bytes(*b"gsasTEAM");

/// The predefined teams of the job, built by initialization.
#[derive(Debug)]
pub struct Predefined {
    /// `SHMEM_TEAM_WORLD`: every PE.
    pub world: Team,
    /// `SHMEM_TEAM_SHARED`: the PEs whose memory this PE maps.
    pub shared: Team,
}

/// The predefined teams, set once by `lifecycle::init` (next to the state).
static PREDEFINED: OnceLock<Predefined> = OnceLock::new();

/// Records the predefined teams; called once, by initialization.
pub(crate) fn set_predefined(teams: Predefined) {
    if PREDEFINED.set(teams).is_err() {
        panic!("the predefined teams were set twice");
    }
}

/// The predefined teams of a running library; a fatal error naming `call` before init or
/// after the last finalize.
#[inline]
pub fn predefined(call: &str) -> &'static Predefined {
    state::live(call);
    match PREDEFINED.get() {
        Some(p) => p,
        None => fatal(call, "called before shmem_init"),
    }
}

/// `SHMEM_TEAM_WORLD` of a running library (see [`predefined`]).
#[inline]
pub fn world(call: &str) -> &'static Team {
    &predefined(call).world
}

/// A team; see the [module docs](self).
#[derive(Debug)]
pub struct Team {
    magic: u64,
    members: Box<[u32]>,
    by_world: Box<[(u32, u32)]>,
    my_pe: Option<u32>,
    num_contexts: i32,
    /// Handles of the contexts created from this team and not yet destroyed.
    pub(crate) contexts: Mutex<Vec<usize>>,
    /// The collective state: set by the split that made the team, or on first use for the
    /// predefined teams.
    pub(crate) coll: OnceLock<crate::coll::TeamColl>,
}

impl Team {
    /// A team of the world PEs `members` (team PE `i` is `members[i]`), seen from world PE
    /// `me`, with configuration `num_contexts`.
    ///
    /// Panics if a PE appears twice (a programming error of the caller).
    pub fn new(members: Vec<u32>, me: u32, num_contexts: i32) -> Team {
        let mut by_world: Vec<(u32, u32)> = members
            .iter()
            .enumerate()
            .map(|(i, &g)| (g, i as u32))
            .collect();
        by_world.sort_unstable();
        assert!(
            by_world.windows(2).all(|w| w[0].0 != w[1].0),
            "a team lists a PE twice"
        );
        let my_pe = by_world
            .binary_search_by_key(&me, |&(g, _)| g)
            .ok()
            .map(|i| by_world[i].1);
        Team {
            magic: TEAM_MAGIC,
            members: members.into_boxed_slice(),
            by_world: by_world.into_boxed_slice(),
            my_pe,
            num_contexts,
            contexts: Mutex::new(Vec::new()),
            coll: OnceLock::new(),
        }
    }

    /// Number of PEs.
    #[inline]
    pub fn n_pes(&self) -> u32 {
        self.members.len() as u32
    }

    /// The calling PE's number in the team (`None` if it is not a member).
    #[inline]
    pub fn my_pe(&self) -> Option<u32> {
        self.my_pe
    }

    /// The world PE of team PE `pe`.
    #[inline]
    pub fn world_pe(&self, pe: u32) -> Option<u32> {
        self.members.get(pe as usize).copied()
    }

    /// The team PE of world PE `world`.
    pub fn team_pe(&self, world: u32) -> Option<u32> {
        self.by_world
            .binary_search_by_key(&world, |&(g, _)| g)
            .ok()
            .map(|i| self.by_world[i].1)
    }

    /// The world PEs of the team in team order.
    pub fn members(&self) -> &[u32] {
        &self.members
    }

    /// Team PE `pe` of `self` as a PE of `dest` (`shmem_team_translate_pe`).
    pub fn translate(&self, pe: u32, dest: &Team) -> Option<u32> {
        self.world_pe(pe).and_then(|g| dest.team_pe(g))
    }

    /// The configured number of contexts (`shmem_team_config_t.num_contexts`).
    pub fn num_contexts(&self) -> i32 {
        self.num_contexts
    }
}

/// Publishes a team made by a split: its handle is its address. It lives until
/// [`destroy_handle`].
pub fn into_handle(team: Box<Team>) -> RawTeam {
    Box::into_raw(team).cast_const().cast()
}

/// Ends a team published with [`into_handle`].
///
/// # Safety
///
/// `handle` must come from [`into_handle`], not be used afterwards, and no context created
/// from it may remain.
pub unsafe fn destroy_handle(handle: RawTeam) {
    let team = handle.cast::<Team>().cast_mut();
    // SAFETY: the caller guarantees the handle came from `into_handle` (a leaked Box) and
    // is not used again; the magic is cleared so that a stale handle is recognised.
    unsafe {
        (*team).magic = 0;
        drop(Box::from_raw(team));
    }
}

/// The team behind a handle: `None` for `SHMEM_TEAM_INVALID` (NULL); a handle that is
/// neither predefined nor a live team is a fatal error naming `call`.
///
/// # Safety
///
/// A non-predefined handle must point to readable memory (a team handle the program got
/// from the library); a destroyed team's handle is recognised only while its memory still
/// holds the cleared marker.
pub unsafe fn resolve(handle: RawTeam, call: &str) -> Option<&'static Team> {
    if handle.is_null() {
        return None;
    }
    let teams = predefined(call);
    if handle == world_handle() {
        return Some(&teams.world);
    }
    if handle == shared_handle() {
        return Some(&teams.shared);
    }
    // SAFETY: the caller guarantees the handle is a team handle from this library, i.e. a
    // pointer from `into_handle` (a leaked `Team`).
    let team = unsafe { &*handle.cast::<Team>() };
    if team.magic != TEAM_MAGIC {
        fatal(
            call,
            format_args!("{handle:p} is not a team handle (destroyed team?)"),
        );
    }
    Some(team)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_and_translation() {
        let world = Team::new((0..8).collect(), 5, 0);
        let odd = Team::new(vec![1, 3, 5, 7], 5, 2);
        let rev = Team::new(vec![7, 5, 3], 5, 0);
        assert_eq!((world.n_pes(), world.my_pe()), (8, Some(5)));
        assert_eq!((odd.n_pes(), odd.my_pe()), (4, Some(2)));
        assert_eq!(rev.my_pe(), Some(1));
        assert_eq!(odd.world_pe(3), Some(7));
        assert_eq!(odd.world_pe(4), None);
        assert_eq!(odd.team_pe(4), None);
        assert_eq!(world.translate(3, &odd), Some(1));
        assert_eq!(world.translate(2, &odd), None);
        assert_eq!(odd.translate(0, &world), Some(1));
        assert_eq!(odd.translate(3, &rev), Some(0));
        assert_eq!(odd.num_contexts(), 2);
        let outside = Team::new(vec![0, 1], 5, 0);
        assert_eq!(outside.my_pe(), None);
    }

    #[test]
    #[should_panic(expected = "twice")]
    fn duplicate_members_are_refused() {
        Team::new(vec![1, 2, 1], 1, 0);
    }

    #[test]
    fn handles_are_distinct_and_split_teams_round_trip() {
        assert_ne!(world_handle(), shared_handle());
        assert!(!world_handle().is_null());
        let h = into_handle(Box::new(Team::new(vec![0], 0, 0)));
        assert!(!h.is_null() && h != world_handle());
        // SAFETY: `h` is a fresh handle from `into_handle`, destroyed once.
        unsafe { destroy_handle(h) };
    }
}
