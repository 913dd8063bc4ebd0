//! The PEs a collective runs on, split into *cells*: runs of consecutive members that share
//! memory.
//!
//! **What it is.** A [`Group`] is the member list of a team or an active set (world PE
//! numbers in member order) and the calling PE's index, cut into cells: maximal runs of
//! consecutive members on the same node whose segments this PE maps directly (with
//! `GSAS_DIRECT=0` every PE is a cell of its own). Members of a cell exchange flags and data
//! with plain loads, stores and copies; the first member of a cell is its *leader*, which
//! talks to the other cells' leaders through the services. With the launcher's placement
//! (contiguous ranks per node) and teams split with positive strides, cells are nodes.
//! Because a cell is a run of consecutive members, its part of a `collect` or `fcollect`
//! result is one contiguous range.
//!
//! Active sets are cached per triplet ([`active_set`]), teams keep theirs in their
//! collective state.
//!
//! **What it is not.** No state of a collective (see `run`).
//!
//! **Thread-safety.** A `Group` is immutable; the active-set cache is behind a mutex.

use std::ffi::c_int;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use gsas_node::SYNC;

use crate::fatal::fatal;
use crate::state::State;

/// See the [module docs](self).
#[derive(Debug)]
pub struct Group {
    members: Box<[u32]>,
    me: u32,
    /// `(first member, number of members)` of every cell, in member order.
    cells: Box<[(u32, u32)]>,
    cell_of: Box<[u32]>,
    my_cell: u32,
    /// The local address of the sync segment of every member of this PE's cell.
    sync: Box<[usize]>,
    /// Whether every member has a collective endpoint (found out on first use).
    endpoints: OnceLock<bool>,
}

impl Group {
    /// The group of world PEs `members` seen from member `me`.
    pub fn new(st: &State, members: Box<[u32]>, me: u32) -> Group {
        let key = |pe: u32| st.node.direct().then(|| st.node.node_of(pe)).flatten();
        let (cells, cell_of) = cells(members.iter().map(|&pe| key(pe)));
        if cells.len() > 1 << 14 {
            fatal(
                "shmem collectives",
                format_args!(
                    "a team or active set spans {} nodes; at most 16384 are supported",
                    cells.len()
                ),
            );
        }
        let my_cell = cell_of[me as usize];
        let (first, len) = cells[my_cell as usize];
        let sync = (first..first + len)
            .map(|m| {
                st.mapped_base(members[m as usize], SYNC)
                    .unwrap_or_else(|| {
                        fatal(
                            "shmem collectives",
                            format_args!(
                                "the sync segment of PE {} is not mapped on this node",
                                members[m as usize]
                            ),
                        )
                    })
            })
            .collect();
        Group {
            members,
            me,
            cells: cells.into_boxed_slice(),
            cell_of: cell_of.into_boxed_slice(),
            my_cell,
            sync,
            endpoints: OnceLock::new(),
        }
    }

    /// Whether every member has a collective endpoint (`has`, asked once per group).
    pub fn all_have_endpoints(&self, has: impl FnOnce() -> bool) -> bool {
        *self.endpoints.get_or_init(has)
    }

    /// Number of members.
    #[inline]
    pub fn n(&self) -> u32 {
        self.members.len() as u32
    }

    /// The calling PE's member index.
    #[inline]
    pub fn me(&self) -> u32 {
        self.me
    }

    /// The world PE of member `m`.
    #[inline]
    pub fn world(&self, m: u32) -> u32 {
        self.members[m as usize]
    }

    /// Number of cells.
    #[inline]
    pub fn nc(&self) -> u32 {
        self.cells.len() as u32
    }

    /// The calling PE's cell.
    #[inline]
    pub fn my_cell(&self) -> u32 {
        self.my_cell
    }

    /// The cell of member `m`.
    #[inline]
    pub fn cell_of(&self, m: u32) -> u32 {
        self.cell_of[m as usize]
    }

    /// The members of cell `c`.
    #[inline]
    pub fn cell(&self, c: u32) -> Range<u32> {
        let (first, len) = self.cells[c as usize];
        first..first + len
    }

    /// The leader (first member) of cell `c`.
    #[inline]
    pub fn leader(&self, c: u32) -> u32 {
        self.cells[c as usize].0
    }

    /// The members of the calling PE's cell.
    #[inline]
    pub fn local(&self) -> Range<u32> {
        self.cell(self.my_cell)
    }

    /// Whether the calling PE leads its cell.
    #[inline]
    pub fn is_leader(&self) -> bool {
        self.leader(self.my_cell) == self.me
    }

    /// The local address of the sync segment of member `m` of this PE's cell.
    #[inline]
    pub fn sync_base(&self, m: u32) -> usize {
        self.sync[(m - self.cells[self.my_cell as usize].0) as usize]
    }

    /// The other members of this PE's cell.
    #[inline]
    pub fn local_others(&self) -> impl Iterator<Item = u32> + Clone + use<> {
        let me = self.me;
        self.local().filter(move |&m| m != me)
    }
}

/// Cuts members with node keys `keys` (`None`: a member that shares no memory) into cells:
/// `(first, len)` of each maximal run of equal `Some` keys, and the cell of each member.
fn cells(keys: impl Iterator<Item = Option<u16>>) -> (Vec<(u32, u32)>, Vec<u32>) {
    let mut cells: Vec<(u32, u32)> = Vec::new();
    let mut cell_of = Vec::new();
    let mut last = None;
    for (i, key) in keys.enumerate() {
        let joins = i > 0 && key.is_some() && key == last;
        match cells.last_mut() {
            Some(c) if joins => c.1 += 1,
            _ => cells.push((i as u32, 1)),
        }
        cell_of.push(cells.len() as u32 - 1);
        last = key;
    }
    (cells, cell_of)
}

/// The cached groups of active sets, by triplet.
type ActiveSets = Vec<((c_int, c_int, c_int), Arc<Group>)>;
static ACTIVE_SETS: Mutex<ActiveSets> = Mutex::new(Vec::new());

/// The group of the active set `{start + i * 2^log_stride : i < size}`; a triplet that is
/// not one (OpenSHMEM 1.5 §9.9, checklist §2.4) or that does not contain this PE is a
/// fatal error naming `call`.
pub fn active_set(
    st: &State,
    start: c_int,
    log_stride: c_int,
    size: c_int,
    call: &str,
) -> Arc<Group> {
    let key = (start, log_stride, size);
    let mut cache = ACTIVE_SETS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, g)) = cache.iter().find(|(k, _)| *k == key) {
        return Arc::clone(g);
    }
    let bad = |why: &str| -> ! {
        fatal(
            call,
            format_args!(
                "the active set PE_start={start}, logPE_stride={log_stride}, PE_size={size} {why}"
            ),
        )
    };
    if start < 0 || size < 1 || !(0..31).contains(&log_stride) {
        bad("is invalid (PE_start >= 0, 0 <= logPE_stride < 31 and PE_size >= 1 are required)");
    }
    let stride = 1u64 << log_stride;
    let last = start as u64 + (size as u64 - 1) * stride;
    if last >= u64::from(st.npes) {
        bad(&format!(
            "reaches PE {last}, beyond the job's {} PEs",
            st.npes
        ));
    }
    let members: Box<[u32]> = (0..size as u64)
        .map(|i| (start as u64 + i * stride) as u32)
        .collect();
    let Some(me) = members.iter().position(|&p| p == st.me) else {
        bad(&format!("does not contain the calling PE {}", st.me));
    };
    let g = Arc::new(Group::new(st, members, me as u32));
    if cache.len() >= 64 {
        cache.remove(0);
    }
    cache.push((key, Arc::clone(&g)));
    g
}

#[cfg(test)]
mod tests {
    use super::cells;

    #[test]
    fn cells_are_runs_of_one_node() {
        let (c, of) = cells([Some(0), Some(0), Some(1), Some(1), Some(1)].into_iter());
        assert_eq!((c, of), (vec![(0, 2), (2, 3)], vec![0, 0, 1, 1, 1]));
        // A node visited twice gives two cells (a strided team over round-robin ranks).
        let (c, _) = cells([Some(0), Some(1), Some(0)].into_iter());
        assert_eq!(c, vec![(0, 1), (1, 1), (2, 1)]);
        // Without direct access every member is a cell.
        let (c, of) = cells([None, None, None].into_iter());
        assert_eq!((c, of), (vec![(0, 1), (1, 1), (2, 1)], vec![0, 1, 2]));
        assert_eq!(cells(std::iter::empty()).0, vec![]);
    }
}
