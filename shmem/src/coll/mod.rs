//! Collectives (OpenSHMEM 1.5 §9.9): barriers and syncs, broadcast, collect, fcollect,
//! alltoall(s) and reductions, for teams and for the deprecated active sets, at the byte
//! level.
//!
//! **What it is.** Every collective routine of the C ABI and the Rust API ends in one of
//! the functions here with a byte count or an element count, an [`On`] (a team handle or an
//! [`ActiveSet`] with its `pSync`) and, for reductions, an [`Op`] and a [`DType`]. The
//! algorithms are node-aware: a group's members are cut into *cells* (runs of consecutive
//! members sharing a node's memory, see [`group`]); within a cell flags and data go through
//! shared memory (one store releases all the cell's members), across cells the cell leaders
//! use logarithmic algorithms over the node client's puts, gets and atomic adds:
//!
//! | collective | within a node | across nodes |
//! |---|---|---|
//! | sync, barrier | flat up to `SHMEM_COLL_FLAT_MAX` members, else a tree of sub-leaders (fan-in `SHMEM_COLL_FANIN`), then one release store | dissemination barrier of the leaders |
//! | broadcast | the node's representative copies into every member's `dest` | binomial tree from the root, one message per node |
//! | fcollect, collect | every member copies its block into its node's `dest`s | recursive doubling, or a ring from `SHMEM_COLL_RING_MIN` bytes, between leaders; `collect` over the direct path: the leaders mail their node's sizes and blocks to each other in one round |
//! | alltoall(s) | direct copies | direct puts (the exchange is pairwise) |
//! | reductions | the leader folds its node's sources | binomial reduce to node 0 and back down; over the direct path with a power-of-two number of nodes, recursive doubling between leaders |
//!
//! Across nodes over UDP every signal of those algorithms, and data of up to
//! `SHMEM_COLL_DIRECT_MAX` bytes per step with it, goes straight to the waiting PE's own
//! socket ([`direct`]): no hop through a service, one datagram per step (several for data
//! larger than a datagram); larger data is put through the services and only its signal
//! goes direct. See the modules for each
//! algorithm. Flags live in the team's block of the sync segment
//! (tags of monotonically increasing sequence numbers, counters that only grow) or, for an
//! active set, in its `pSync` (counters that the owner decrements when it has seen them,
//! back at `SHMEM_SYNC_VALUE` on return); see [`layout`]. Waits spin, yield, then sleep
//! (on a crowded machine they do not spin, and a wait for a datagram blocks on the socket
//! after a short spin), bounded by `SHMEM_WAIT_TIMEOUT` ([`wait`]).
//!
//! **Semantics** (checklist §2.4, §2.5, §2.8): `PE_root` is an ordinal in the team or active
//! set; an active-set broadcast does not write the root's `dest`, a team broadcast does;
//! `collect` sizes may differ per PE; reductions accept `dest == source`; zero-length calls
//! never touch their buffers (NULL is fine); `shmem_barrier_all` and `shmem_barrier` quiet
//! the default context first, `shmem_sync_all`, `shmem_team_sync` and `shmem_sync` do not.
//! Team collectives return 0, or nonzero for a refused call (`SHMEM_TEAM_INVALID`, a PE not
//! in the team, a root or stride out of range: the same on every PE, so no PE waits for the
//! others); the active-set forms have no return value and end the job on such misuse.
//! Buffers that are not symmetric end the job with a message naming the routine.
//!
//! **What it is not.** Not the scans of OpenSHMEM 1.6, and no non-blocking collectives.
//!
//! **Thread-safety.** Collectives on different teams may run concurrently on different
//! threads; collectives on one team are serialized by its state's mutex (the specification
//! forbids concurrent calls on one team). Active-set collectives keep no shared state
//! besides the cached groups.

mod alltoall;
mod barrier;
mod bcast;
pub(crate) mod direct;
mod gather;
mod group;
pub(crate) mod layout;
pub(crate) mod ops;
mod reduce;
mod run;
mod wait;

use std::ffi::{c_int, c_long};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use gsas_node::SYNC;

use crate::ctx_table::{self as ctx, CtxRef, debug};
use crate::fatal::fatal;
use crate::rma::bytes;
use crate::state::{self, State};
use crate::team::{self, RawTeam, Team};

pub(crate) use ops::{DType, Op};

use group::Group;
use layout::{BLOCKS, NCOUNTERS};
use run::{Buf, CollState, Flags, Run};

/// The collective state of a team: its group, its sync block, its sequence numbers.
#[derive(Debug)]
pub struct TeamColl {
    group: Group,
    block: u32,
    state: Mutex<CollState>,
}

impl TeamColl {
    /// The state of a team of world PEs `members` (this PE is member `me`) on sync block
    /// `block`, whose collectives are numbered after `seq`, with the counters of this PE's
    /// block at `consumed`.
    pub(crate) fn new(
        st: &State,
        members: &[u32],
        me: u32,
        block: u32,
        seq: u64,
        consumed: [u64; NCOUNTERS],
    ) -> TeamColl {
        TeamColl {
            group: Group::new(st, members.into(), me),
            block,
            state: Mutex::new(CollState::new(seq, consumed)),
        }
    }

    /// The sync block.
    pub(crate) fn block(&self) -> u32 {
        self.block
    }

    /// The sequence number of the team's last collective.
    pub(crate) fn last_seq(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .seq
    }

    fn run<'a>(&'a self, st: &'static State, call: &'a str) -> Run<'a> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Run::new(
            st,
            &self.group,
            call,
            Flags::Team {
                state,
                block: block_offset(self.block),
            },
        )
    }
}

/// Offset of block `b` in the sync segment.
fn block_offset(b: u32) -> u64 {
    layout::FIRST + u64::from(b) * layout::BLOCK
}

/// The collective state of a live team of which this PE is a member.
fn team_coll(st: &'static State, t: &'static Team, call: &str) -> &'static TeamColl {
    if let Some(c) = t.coll.get() {
        return c;
    }
    predefined(st, t, call)
}

#[cold]
#[inline(never)]
fn predefined(st: &'static State, t: &'static Team, call: &str) -> &'static TeamColl {
    let teams = team::predefined(call);
    let block = if std::ptr::eq(t, &teams.world) {
        layout::WORLD_BLOCK
    } else if std::ptr::eq(t, &teams.shared) {
        layout::SHARED_BLOCK
    } else {
        fatal(call, "internal error: a team without collective state")
    };
    let me = t.my_pe().unwrap_or(0);
    // The predefined blocks are fresh at start-up: no tag and no counter was ever written.
    t.coll
        .get_or_init(|| TeamColl::new(st, t.members(), me, block, 0, [0; NCOUNTERS]))
}

/// An active set (OpenSHMEM 1.5 §9.9): `{PE_start + i * 2^logPE_stride : i < PE_size}`
/// and its `pSync` array.
#[derive(Clone, Copy, Debug)]
pub struct ActiveSet {
    /// `PE_start`.
    pub start: c_int,
    /// `logPE_stride`.
    pub log_stride: c_int,
    /// `PE_size`.
    pub size: c_int,
    /// `pSync`.
    pub psync: *mut c_long,
}

/// What a collective runs on.
#[derive(Clone, Copy, Debug)]
pub enum On {
    /// A team handle.
    Team(RawTeam),
    /// An active set.
    Set(ActiveSet),
}

/// `pSync` lengths (in `long`s) of `shmem.h`, by collective class.
const BARRIER_SYNC: usize = 16;
const BCAST_SYNC: usize = 16;
const COLLECT_SYNC: usize = 18;
const REDUCE_SYNC: usize = 35;
const ALLTOALL_SYNC: usize = 16;

/// Runs `body` as the collective `call` on `on`; see the [module docs](self) for refusals.
///
/// # Safety
///
/// A team handle from the library; an active set's `pSync` of `words` longs (checked
/// symmetric).
unsafe fn enter(on: On, words: usize, call: &str, body: impl FnOnce(&mut Run) -> c_int) -> c_int {
    let st = state::live(call);
    match on {
        On::Team(handle) => {
            // SAFETY: forwarded from the caller's contract.
            let Some(t) = (unsafe { team::resolve(handle, call) }) else {
                debug(call, "the team is SHMEM_TEAM_INVALID");
                return 1;
            };
            if t.my_pe().is_none() {
                debug(call, "the calling PE is not a member of the team");
                return 1;
            }
            let tc = team_coll(st, t, call);
            body(&mut tc.run(st, call))
        }
        On::Set(a) => {
            let g = group::active_set(st, a.start, a.log_stride, a.size, call);
            let sym = st.translate(a.psync.cast_const().cast(), 8 * words, call);
            if sym.off % 8 != 0 {
                fatal(
                    call,
                    format_args!("pSync {:p} is not aligned to a long", a.psync),
                );
            }
            let flags = Flags::Set {
                sym,
                local: a.psync.cast(),
            };
            body(&mut Run::new(st, &g, call, flags))
        }
    }
}

/// A refused call: nonzero for a team (the same on every PE), the end of the job for an
/// active set (whose routines return nothing).
fn refuse(r: &Run, why: std::fmt::Arguments<'_>) -> c_int {
    if r.is_team() {
        debug(r.call, why);
        1
    } else {
        fatal(r.call, why)
    }
}

/// A symmetric buffer of `len > 0` bytes at `p`.
fn buf(st: &State, p: *const u8, len: usize, call: &str) -> Buf {
    Buf {
        sym: st.translate(p, len, call),
        local: p.cast_mut(),
    }
}

/// The quiet of the default context that starts a barrier. While nothing ever went through
/// a service every earlier operation was a store or CPU atomic on a mapping, ordered before
/// the barrier's release stores: no fence is needed.
fn barrier_quiet(call: &str) {
    if state::live(call).node.remote_ops_started() > 0 {
        // SAFETY: the default context is always valid.
        unsafe { ctx::quiet(CtxRef::DEFAULT, call) };
    }
}

/// `shmem_barrier_all` (OpenSHMEM 1.5 §9.9.1): quiet on the default context, then a sync of
/// the world team.
pub fn barrier_all(call: &str) {
    barrier_quiet(call);
    sync_all(call);
}

/// `shmem_sync_all` (OpenSHMEM 1.5 §9.9.3): a sync of the world team.
pub fn sync_all(call: &str) {
    let st = state::live(call);
    let tc = team_coll(st, team::world(call), call);
    barrier::sync(&mut tc.run(st, call));
}

/// `shmem_team_sync` / `shmem_sync` (OpenSHMEM 1.5 §9.9.3).
///
/// # Safety
///
/// As [`enter`].
pub unsafe fn sync(on: On, call: &str) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        enter(on, BARRIER_SYNC, call, |r| {
            barrier::sync(r);
            0
        })
    }
}

/// `shmem_barrier` (OpenSHMEM 1.5 §9.9.2): quiet on the default context, then a sync of the
/// active set.
///
/// # Safety
///
/// As [`enter`].
pub unsafe fn barrier(set: ActiveSet, call: &str) {
    barrier_quiet(call);
    // SAFETY: forwarded.
    unsafe { sync(On::Set(set), call) };
}

/// `shmem_broadcast` (OpenSHMEM 1.5 §9.9.4): `nbytes` from member `root`'s `src` to every
/// member's `dest` (not the root's for an active set).
///
/// # Safety
///
/// As [`enter`]; `src` readable and `dest` writable for `nbytes` (symmetric).
pub unsafe fn broadcast(
    on: On,
    dest: *mut u8,
    src: *const u8,
    nbytes: usize,
    root: c_int,
    call: &str,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        enter(on, BCAST_SYNC, call, |r| {
            let n = r.g.n();
            let Some(root) = u32::try_from(root).ok().filter(|&p| p < n) else {
                return refuse(
                    r,
                    format_args!("PE_root {root} is not in 0..{n} (an ordinal of the group)"),
                );
            };
            if nbytes == 0 {
                return 0;
            }
            let dest = buf(r.st, dest, nbytes, call);
            let team = r.is_team();
            bcast::broadcast(r, dest, src, nbytes, root, team);
            0
        })
    }
}

/// `shmem_fcollect` (OpenSHMEM 1.5 §9.9.6): every member's `nbytes` concatenated in
/// member order into every `dest`.
///
/// # Safety
///
/// As [`enter`]; `src` readable for `nbytes`, `dest` symmetric for `nbytes * members`.
pub unsafe fn fcollect(on: On, dest: *mut u8, src: *const u8, nbytes: usize, call: &str) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        enter(on, COLLECT_SYNC, call, |r| {
            if nbytes == 0 {
                return 0;
            }
            let total = bytes(nbytes, r.g.n() as usize, call);
            let dest = buf(r.st, dest, total, call);
            gather::fcollect(r, dest, src, nbytes);
            0
        })
    }
}

/// `shmem_collect` (OpenSHMEM 1.5 §9.9.5): like [`fcollect`] with sizes that may differ per
/// member.
///
/// # Safety
///
/// As [`enter`]; `src` readable for `nbytes`, `dest` symmetric for the total.
pub unsafe fn collect(on: On, dest: *mut u8, src: *const u8, nbytes: usize, call: &str) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        enter(on, COLLECT_SYNC, call, |r| {
            if r.is_team() {
                gather::collect_team(r, dest, src, nbytes, call);
            } else {
                gather::collect_set(r, dest, src, nbytes, call);
            }
            0
        })
    }
}

/// `shmem_alltoall[s]` (OpenSHMEM 1.5 §9.9.7, §9.9.8): `nelems` elements of `elem` bytes per
/// pair, strides in elements (1 for `alltoall`).
///
/// # Safety
///
/// As [`enter`]; `src` readable and `dest` symmetric over their strided extents.
#[allow(clippy::too_many_arguments)]
pub unsafe fn alltoall(
    on: On,
    dest: *mut u8,
    src: *const u8,
    dst: isize,
    sst: isize,
    elem: usize,
    nelems: usize,
    call: &str,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        enter(on, ALLTOALL_SYNC, call, |r| {
            if dst < 1 || sst < 1 {
                return refuse(
                    r,
                    format_args!("the strides dst={dst}, sst={sst} must be at least 1"),
                );
            }
            if nelems == 0 {
                return 0;
            }
            let shape = alltoall::Shape {
                nelems,
                elem,
                dst: dst as usize,
                sst: sst as usize,
            };
            let n = r.g.n();
            let extent = n as usize * nelems;
            let _ = bytes(bytes(extent, shape.dst, call), elem, call);
            let _ = bytes(bytes(extent, shape.sst, call), elem, call);
            let dest = buf(r.st, dest, shape.extent(n, shape.dst), call);
            alltoall::alltoall(r, dest, src, shape);
            0
        })
    }
}

/// `dest` and `src` of `n` bytes must be the same or disjoint (reductions and scans); a
/// fatal error naming `call` otherwise.
fn same_or_disjoint(dest: *mut u8, src: *const u8, n: usize, call: &str) {
    let (d, s) = (dest as usize, src as usize);
    if d != s && d < s + n && s < d + n {
        fatal(
            call,
            format_args!(
                "dest {dest:p} and source {src:p} ({n} bytes) overlap without being the same"
            ),
        );
    }
}

/// A reduction (OpenSHMEM 1.5 §9.9.9): `count` elements of `dt` combined with `op` over
/// the members, into every `dest`; `dest` and `src` identical or disjoint.
///
/// # Safety
///
/// As [`enter`]; `src` and `dest` symmetric for `count` elements.
pub unsafe fn reduce(
    on: On,
    op: Op,
    dt: DType,
    dest: *mut u8,
    src: *const u8,
    count: usize,
    call: &str,
) -> c_int {
    let Some(k) = ops::kernel(op, dt) else {
        fatal(
            call,
            format_args!("internal error: no {op:?} reduction on {dt:?}"),
        );
    };
    // SAFETY: forwarded.
    unsafe {
        enter(on, REDUCE_SYNC, call, |r| {
            if count == 0 {
                return 0;
            }
            let n = bytes(count, dt.size(), call);
            same_or_disjoint(dest, src, n, call);
            let dest = buf(r.st, dest, n, call);
            let src = buf(r.st, src, n, call);
            reduce::reduce(r, dest, src, n, count, k);
            0
        })
    }
}

/// A scan with the SUM operator (OpenSHMEM 1.6 §9.10.10, `shmem_TYPENAME_sum_inscan` and
/// `_sum_exscan`): `dest[j]` of team PE `i` becomes the sum of `src[j]` over the team PEs
/// `0..=i` (inclusive) or `0..i` (exclusive; 0 on team PE 0); `dest` and `src` identical
/// or disjoint. Returns 0, or nonzero (the same on every PE) for `SHMEM_TEAM_INVALID` or a
/// PE outside the team.
///
/// How: one in-place SUM reduction of `dest` per team PE `r`, in which the PEs up to `r`
/// (before `r` for the exclusive scan) contribute their source and the others the identity
/// of SUM ([`DType::sum_identity`]: 0, or -0.0 for floating point); PE `r` keeps the
/// result. Every prefix is thus summed in the reductions' fixed order, the same bits on
/// every PE, for every type the reductions have, complex ones included. The source is
/// read once, before `dest` is first written, so in place works. The cost is one
/// reduction per team PE: a scan of a team of `n` PEs takes `n` reduction latencies (a
/// tree-shaped scan in `log n` steps is the way to make it faster).
///
/// # Safety
///
/// As [`reduce`].
pub unsafe fn scan(
    team: RawTeam,
    dt: DType,
    dest: *mut u8,
    src: *const u8,
    count: usize,
    exclusive: bool,
    call: &str,
) -> c_int {
    let st = state::live(call);
    // SAFETY: forwarded.
    let Some(t) = (unsafe { team::resolve(team, call) }) else {
        debug(call, "the team is SHMEM_TEAM_INVALID");
        return 1;
    };
    let Some(me) = t.my_pe() else {
        debug(call, "the calling PE is not a member of the team");
        return 1;
    };
    let n = bytes(count, dt.size(), call);
    if n == 0 {
        // SAFETY: forwarded; a collective without data still synchronizes the team.
        return unsafe { sync(On::Team(team), call) };
    }
    same_or_disjoint(dest, src, n, call);
    // Checked symmetric on this PE before anything is read or written.
    st.translate(dest, n, call);
    st.translate(src, n, call);
    // SAFETY: `src` is a symmetric object of `n` bytes (checked), read before `dest` (which
    // may be the same memory) is written.
    let mine = unsafe { std::slice::from_raw_parts(src, n) }.to_vec();
    let zero = dt.sum_identity().repeat(count);
    let mut result = vec![0u8; n];
    for r in 0..t.n_pes() {
        let contributes = if exclusive { me < r } else { me <= r };
        let part = if contributes { &mine } else { &zero };
        // SAFETY: `dest` holds `n` bytes here (checked symmetric); no other PE reads it
        // outside the reductions, and the reduction before returned.
        unsafe { gsas_transport::watched::store_once(part.as_ptr(), dest, n) };
        // SAFETY: forwarded; in place on `dest`.
        let rc = unsafe { reduce(On::Team(team), Op::Sum, dt, dest, dest, count, call) };
        if rc != 0 {
            return rc;
        }
        if r == me {
            // SAFETY: `dest` holds the `n` bytes of this round's result.
            result.copy_from_slice(unsafe { std::slice::from_raw_parts(dest, n) });
        }
    }
    // SAFETY: as above; the last reduction returned, nobody reads `dest` any more.
    unsafe { gsas_transport::watched::store_once(result.as_ptr(), dest, n) };
    0
}

/// The blocks a split of `parent` may use (OpenSHMEM 1.5 §9.4.5, §9.4.6): a collective of
/// the parent. Returns `want` blocks free on every parent member, each with the sequence
/// number its team starts after and this PE's counter values on it; `None` (on every PE)
/// when fewer are free.
pub(crate) fn agree_blocks(
    parent: &'static Team,
    want: usize,
    call: &str,
) -> Option<Vec<(u32, u64, [u64; NCOUNTERS])>> {
    let st = state::live(call);
    let tc = team_coll(st, parent, call);
    let mut r = tc.run(st, call);
    let src = r.block_buf(layout::SPLIT_SRC).expect("a team block");
    let dest = r.block_buf(layout::SPLIT_DST).expect("a team block");
    let own = st
        .mapped_base(st.me, SYNC)
        .unwrap_or_else(|| fatal(call, "this PE's sync segment is not mapped"));
    let mut counters = [[0u64; NCOUNTERS]; layout::MAX_BLOCKS];
    {
        // The counters of every free block are read before this PE contributes: a member of
        // the new team can signal on it only after the agreement, which needs everyone.
        let blocks = BLOCKS.lock().unwrap_or_else(PoisonError::into_inner);
        for (b, slot) in counters.iter_mut().enumerate() {
            if blocks.is_free(b) {
                let base = own + (block_offset(b as u32) + layout::COUNTERS) as usize;
                for (i, c) in slot.iter_mut().enumerate() {
                    // SAFETY: counter `i` of this PE's block `b` (aligned, mapped); remote
                    // writers use atomics.
                    *c = unsafe { AtomicU64::from_ptr((base as *mut u64).add(i)) }
                        .load(Ordering::Acquire);
                }
            }
        }
        let mine = blocks.contribution();
        for (i, v) in mine.iter().enumerate() {
            // SAFETY: word `i < 64` of the agreement area of this PE's parent block.
            unsafe { std::ptr::write_volatile(src.local.cast::<u64>().add(i), *v) };
        }
    }
    let k = ops::kernel(Op::Max, DType::U64).expect("MAX on u64");
    // SAFETY: both areas hold 64 words on every member of the parent.
    unsafe { reduce::reduce(&mut r, dest, src, 8 * 64, 64, k) };
    // SAFETY: the result area holds 64 words, complete after the reduction.
    let agreed: [u64; 64] = std::array::from_fn(|i| unsafe {
        std::ptr::read_volatile(dest.local.cast::<u64>().add(i))
    });
    layout::choose(&agreed, want).map(|chosen| {
        chosen
            .into_iter()
            .map(|(b, seq)| (b, seq, counters[b as usize]))
            .collect()
    })
}

/// Frees a destroyed team's block on this PE.
pub(crate) fn release_block(tc: &TeamColl) {
    BLOCKS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .release(tc.block(), tc.last_seq());
}

/// Marks a new team's block used on this PE.
pub(crate) fn claim_block(b: u32) {
    BLOCKS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .claim(b);
}
