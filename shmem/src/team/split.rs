//! Team splits and destruction (OpenSHMEM 1.5 §9.4.5 `shmem_team_split_strided`, §9.4.6
//! `shmem_team_split_2d`, §9.4.9 `shmem_team_destroy`).
//!
//! **What it is.** A split is a collective over the parent team. Every member checks the
//! arguments (the same on every PE, so a refusal is the same everywhere and needs no
//! communication), then the parent agrees on free sync blocks for the new teams
//! ([`crate::coll::agree_blocks`]: a MAX reduction over the parent of every PE's block
//! usage, which also yields the sequence number the new team starts after); then every PE
//! builds the teams it belongs to. The rules (checklist §2.5):
//!
//! * `split_strided(start, stride, size)`: the members are parent PEs `start + i * stride`
//!   for `i < size`, numbered `i` (parent order for positive strides). `size >= 1`, every
//!   member inside the parent; a stride of 0 only with `size == 1`; negative strides are
//!   accepted (members numbered in stride order, as OpenSHMEM 1.6 allows).
//! * `split_2d(xrange)`: `xrange > N` is clamped to `N`, `yrange = ceil(N / xrange)`,
//!   parent PE `p` is at `(p mod xrange, p / xrange)`; its x-team holds the PEs of its row,
//!   its y-team those of its column, both in parent order.
//! * Non-members get `SHMEM_TEAM_INVALID` and 0; a refused split (bad arguments, an invalid
//!   parent, no free block) gives nonzero and `SHMEM_TEAM_INVALID` on every PE.
//! * `num_contexts` comes from the configuration when its mask bit is set (default 0).
//!
//! Splits are serialized within a process (a lock held across the agreement), so that two
//! threads splitting different teams at once cannot pick the same block; such concurrent
//! splits must then not depend on each other across PEs.
//!
//! `destroy` destroys the team's remaining contexts, frees its block on this PE and the
//! object; `SHMEM_TEAM_INVALID` is a no-op; the predefined teams cannot be destroyed (a
//! fatal error naming the call, where the specification leaves it undefined).
//!
//! **What it is not.** No checking that all PEs passed the same arguments (the
//! specification requires it).
//!
//! **Thread-safety.** See above; a team must not be used while it is destroyed.

use std::sync::{Mutex, PoisonError};

use super::{RawTeam, Team};
use crate::coll::{self, TeamColl};
use crate::ctx_table::{self as ctx, CtxRef};
use crate::fatal::fatal;
use crate::state;

static SPLIT_LOCK: Mutex<()> = Mutex::new(());

/// The outcome of a split for this PE: its new team's handle, or `None` when it is not a
/// member. `Err` carries why the split was refused (on every PE).
pub type Split = Result<Option<RawTeam>, String>;

fn parent_of(parent: RawTeam, call: &str) -> Result<&'static Team, String> {
    // SAFETY: the handle comes from the program, as every team handle.
    let Some(p) = (unsafe { super::resolve(parent, call) }) else {
        return Err("the parent team is SHMEM_TEAM_INVALID".into());
    };
    if p.my_pe().is_none() {
        return Err("the calling PE is not a member of the parent team".into());
    }
    Ok(p)
}

/// Builds this PE's team of parent members `members` on an agreed block.
fn build(
    parent: &Team,
    members: &[u32],
    num_contexts: i32,
    block: (u32, u64, [u64; crate::coll::layout::NCOUNTERS]),
) -> Option<RawTeam> {
    let st = state::live("shmem_team_split");
    let world: Vec<u32> = members
        .iter()
        .map(|&m| parent.world_pe(m).expect("checked parent member"))
        .collect();
    let me = world.iter().position(|&w| w == st.me)? as u32;
    let team = Box::new(Team::new(world.clone(), st.me, num_contexts));
    let (b, seq, counters) = block;
    // A fresh team has no collective state yet, so this cannot fail.
    let _ = team
        .coll
        .set(TeamColl::new(st, &world, me, b, seq, counters));
    coll::claim_block(b);
    Some(super::into_handle(team))
}

/// `shmem_team_split_strided`; see the [module docs](self).
pub fn split_strided(
    parent: RawTeam,
    start: i32,
    stride: i32,
    size: i32,
    num_contexts: i32,
    call: &str,
) -> Split {
    let p = parent_of(parent, call)?;
    let n = i64::from(p.n_pes());
    let bad = |why: String| {
        Err(format!(
            "start={start}, stride={stride}, size={size}: {why}"
        ))
    };
    if size < 1 {
        return bad("size must be at least 1".into());
    }
    if stride == 0 && size > 1 {
        return bad("a stride of 0 repeats PE start".into());
    }
    let last = i64::from(start) + i64::from(stride) * (i64::from(size) - 1);
    if !(0..n).contains(&i64::from(start)) || !(0..n).contains(&last) {
        return bad(format!("the PEs leave the parent team of {n} PEs"));
    }
    if num_contexts < 0 {
        return Err(format!("num_contexts {num_contexts} is negative"));
    }
    let members: Vec<u32> = (0..i64::from(size))
        .map(|i| (i64::from(start) + i * i64::from(stride)) as u32)
        .collect();
    let _serial = SPLIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(mut blocks) = coll::agree_blocks(p, 1, call) else {
        return Err(no_block());
    };
    Ok(build(p, &members, num_contexts, blocks.remove(0)))
}

fn no_block() -> String {
    format!(
        "no team block is free on every PE of the parent (at most {} teams besides the \
         predefined ones may exist at a time)",
        coll::layout::MAX_BLOCKS - 2
    )
}

/// `shmem_team_split_2d`: this PE's x-team and y-team; see the [module docs](self).
pub fn split_2d(
    parent: RawTeam,
    xrange: i32,
    x_contexts: i32,
    y_contexts: i32,
    call: &str,
) -> Result<(RawTeam, RawTeam), String> {
    let p = parent_of(parent, call)?;
    if xrange < 1 {
        return Err(format!("xrange {xrange} must be at least 1"));
    }
    if x_contexts < 0 || y_contexts < 0 {
        return Err("num_contexts is negative".into());
    }
    let n = p.n_pes();
    let xr = (xrange as u32).min(n);
    let me = p.my_pe().expect("checked member");
    let (x, y) = (me % xr, me / xr);
    let row: Vec<u32> = (y * xr..((y + 1) * xr).min(n)).collect();
    let column: Vec<u32> = (x..n).step_by(xr as usize).collect();
    let _serial = SPLIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(mut blocks) = coll::agree_blocks(p, 2, call) else {
        return Err(no_block());
    };
    let by = blocks.remove(1);
    let bx = blocks.remove(0);
    let xt = build(p, &row, x_contexts, bx).expect("a member of its row");
    let yt = build(p, &column, y_contexts, by).expect("a member of its column");
    Ok((xt, yt))
}

/// `shmem_team_destroy`; see the [module docs](self).
///
/// # Safety
///
/// `handle` a team handle from the library, not used afterwards.
pub unsafe fn destroy(handle: RawTeam, call: &str) {
    if handle.is_null() {
        return;
    }
    if handle == super::world_handle() || handle == super::shared_handle() {
        fatal(call, "the predefined teams cannot be destroyed");
    }
    // SAFETY: forwarded from the caller's contract.
    let Some(t) = (unsafe { super::resolve(handle, call) }) else {
        return;
    };
    let contexts: Vec<usize> = t
        .contexts
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for c in contexts {
        // SAFETY: the list holds live contexts created from this team.
        unsafe { ctx::destroy(CtxRef(c as ctx::RawCtx), call) };
    }
    if let Some(tc) = t.coll.get() {
        coll::release_block(tc);
    }
    // SAFETY: the handle came from `into_handle` (splits are the only other teams) and its
    // contexts are gone.
    unsafe { super::destroy_handle(handle) };
}
