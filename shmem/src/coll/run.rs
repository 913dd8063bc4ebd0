//! One collective call in progress: its group, its flags, and the primitives the
//! algorithms are written in.
//!
//! **What it is.** A [`Run`] is made when a collective starts and holds the [`Group`], the
//! routine's name (for errors), and the flag backend:
//!
//! * **Team** ([`Flags::Team`]): the team's block in the sync segment (see `layout`) and its
//!   locked [`CollState`] (sequence number, consumed counter values). Within a cell a
//!   signal is one release store of a tag to the sender's own line, which any number of
//!   cell members read ("one store releases them all"); across cells it is an atomic add to
//!   a counter in the receiver's block.
//! * **Active set** ([`Flags::Set`]): counters in the `pSync` words. A signal is an atomic
//!   add to the receiver's word (a CPU atomic within the cell, through the service across
//!   cells); the receiver waits for the count and subtracts it, leaving the word at 0.
//!
//! The primitives: [`Run::lpost`]/[`Run::lwait`] signal within the cell,
//! [`Run::rpost`]/[`Run::rwait`] across cells (every remote counter has one sender per
//! collective, or is kept apart per call parity, so that a PE running a collective ahead
//! cannot be mistaken for one still due); [`Run::copy_to`] copies into a cell member's
//! memory, [`Run::put_to`]/[`Run::get_from`] move data across cells through the node
//! client (default context), [`Run::quiet`] completes those puts before a signal.
//!
//! **What it is not.** No algorithm (see `barrier`, `bcast`, `gather`, `alltoall`,
//! `reduce`).
//!
//! **Thread-safety.** A `Run` belongs to the calling thread; a team's state stays locked
//! while its `Run` lives (collectives on one team are not concurrent, as the specification
//! requires).

use std::sync::MutexGuard;
use std::sync::atomic::{AtomicU64, Ordering};

use gsas_core::wire::{AtomicOp, AtomicType};
use gsas_node::{Ctx as NodeCtx, SYNC};

use super::direct;
use super::group::Group;
use super::layout::{self, Exchange, Slot};
use super::wait::{wait, wait_on};
use crate::addr::SymAddr;
use crate::fatal::fatal;
use crate::state::State;

/// The mutable collective state of a team.
#[derive(Debug)]
pub struct CollState {
    /// The sequence number of the team's last collective.
    pub seq: u64,
    /// Per remote counter of this PE's block: the value consumed so far.
    pub consumed: [u64; layout::NCOUNTERS],
    /// Per [`Exchange`] kind: the team's calls of that kind so far (see `layout`).
    pub exchanges: [u64; 2],
}

impl CollState {
    /// The state of a team whose collectives are numbered after `seq`, with the counters
    /// of this PE's block at `consumed`.
    pub fn new(seq: u64, consumed: [u64; layout::NCOUNTERS]) -> CollState {
        CollState {
            seq,
            consumed,
            exchanges: [0; 2],
        }
    }
}

/// A symmetric buffer: its symmetric address and this PE's local address.
#[derive(Clone, Copy, Debug)]
pub struct Buf {
    /// Segment and offset.
    pub sym: SymAddr,
    /// This PE's copy.
    pub local: *mut u8,
}

impl Buf {
    /// The buffer `off` bytes further.
    #[inline]
    pub fn at(self, off: usize) -> Buf {
        Buf {
            sym: SymAddr {
                seg: self.sym.seg,
                off: self.sym.off + off as u64,
            },
            local: self.local.wrapping_add(off),
        }
    }
}

/// The two signals within a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// Towards the leader: arrived, data pushed, subtree arrived.
    Arrive,
    /// From the leader (or the broadcast's sender): released, data ready.
    Release,
}

/// Where the flags of a run live; see the [module docs](self).
pub enum Flags<'a> {
    /// A team's block and state.
    Team {
        /// The locked state.
        state: MutexGuard<'a, CollState>,
        /// Offset of the block in the sync segment.
        block: u64,
    },
    /// An active set's `pSync`.
    Set {
        /// Its symmetric address.
        sym: SymAddr,
        /// This PE's copy.
        local: *mut u64,
    },
}

/// One collective call; see the [module docs](self).
pub struct Run<'a> {
    /// The library state.
    pub st: &'static State,
    /// The members.
    pub g: &'a Group,
    /// The routine's name.
    pub call: &'a str,
    flags: Flags<'a>,
    seq: u64,
}

impl<'a> Run<'a> {
    /// Starts a collective of `g` with `flags` (a team's sequence number advances).
    pub fn new(st: &'static State, g: &'a Group, call: &'a str, mut flags: Flags<'a>) -> Run<'a> {
        let seq = match &mut flags {
            Flags::Team { state, .. } => {
                state.seq += 1;
                state.seq
            }
            Flags::Set { .. } => 0,
        };
        Run {
            st,
            g,
            call,
            flags,
            seq,
        }
    }

    /// The counter parity of this call of an [`Exchange`] kind: the parity of its number among
    /// the team's calls of that kind (0 for an active set, whose `pSync` is not shared
    /// between calls in flight). Every member calls it once per such call.
    pub fn exchange_parity(&mut self, kind: Exchange) -> u32 {
        match &mut self.flags {
            Flags::Team { state, .. } => {
                let n = &mut state.exchanges[kind as usize];
                *n += 1;
                (*n & 1) as u32
            }
            Flags::Set { .. } => 0,
        }
    }

    /// Whether the flags are a team's.
    pub fn is_team(&self) -> bool {
        matches!(self.flags, Flags::Team { .. })
    }

    /// The tag of `step` of this collective.
    #[inline]
    fn tag(&self, step: u32) -> u64 {
        self.seq << 4 | u64::from(step & 15)
    }

    /// Offset of `line` in a team block.
    #[inline]
    fn line_off(line: Line) -> u64 {
        match line {
            Line::Arrive => layout::ARRIVE,
            Line::Release => layout::RELEASE,
        }
    }

    /// The word at byte `off` of the block of cell member `m` (team flags).
    #[inline]
    fn block_word(&self, block: u64, m: u32, off: u64) -> &AtomicU64 {
        let p = self.g.sync_base(m) + (block + off) as usize;
        // SAFETY: `p` is an 8-byte aligned word of the sync segment of a member of this PE's
        // cell, mapped for the life of the job; every access to flag words is atomic.
        unsafe { AtomicU64::from_ptr(p as *mut u64) }
    }

    /// The `pSync` word `w` of cell member `m` (active-set flags).
    #[inline]
    fn psync_word(&self, sym: SymAddr, local: *mut u64, m: u32, w: usize) -> &AtomicU64 {
        let p = if m == self.g.me() {
            local.wrapping_add(w)
        } else {
            let at = SymAddr {
                seg: sym.seg,
                off: sym.off + 8 * w as u64,
            };
            match self.st.direct_ptr(self.g.world(m), at) {
                Some(p) => p.cast::<u64>(),
                None => self.unmapped(m),
            }
        };
        // SAFETY: `p` is word `w` of a `pSync` (checked symmetric and aligned at entry) of
        // this PE or of a cell member mapped here; every access to it is atomic.
        unsafe { AtomicU64::from_ptr(p) }
    }

    #[cold]
    #[inline(never)]
    fn unmapped(&self, m: u32) -> ! {
        fatal(
            self.call,
            format_args!(
                "internal error: PE {} of the calling PE's node is not mapped",
                self.g.world(m)
            ),
        )
    }

    /// Signals `line` (`step`) to the cell members `to`: for a team one store to this PE's
    /// own line (`to` is not needed), for an active set an add to each receiver's word.
    pub fn lpost(&mut self, line: Line, step: u32, to: impl IntoIterator<Item = u32>) {
        match self.flags {
            Flags::Team { block, .. } => {
                let tag = self.tag(step);
                self.block_word(block, self.g.me(), Self::line_off(line))
                    .store(tag, Ordering::Release);
            }
            Flags::Set { sym, local } => {
                let w = set_line_word(line);
                for m in to {
                    self.psync_word(sym, local, m, w)
                        .fetch_add(1, Ordering::AcqRel);
                }
            }
        }
    }

    /// Waits for `line` (`step`) from every cell member of `from`.
    pub fn lwait(&mut self, line: Line, step: u32, from: impl Iterator<Item = u32> + Clone) {
        let (st, call) = (self.st, self.call);
        match self.flags {
            Flags::Team { block, .. } => {
                let tag = self.tag(step);
                let off = Self::line_off(line);
                let mut pending = from.clone();
                let mut next = pending.next();
                wait(
                    st,
                    call,
                    || {
                        while let Some(m) = next {
                            if self.block_word(block, m, off).load(Ordering::Acquire) < tag {
                                return false;
                            }
                            next = pending.next();
                        }
                        true
                    },
                    || {
                        let late: Vec<u32> = from
                            .filter(|&m| {
                                self.block_word(block, m, off).load(Ordering::Acquire) < tag
                            })
                            .map(|m| self.g.world(m))
                            .collect();
                        format!("{line:?} signal {tag:#x} from same-node PEs {late:?}")
                    },
                );
            }
            Flags::Set { sym, local } => {
                let count = from.clone().count() as u64;
                if count == 0 {
                    return;
                }
                let word = self.psync_word(sym, local, self.g.me(), set_line_word(line));
                wait(
                    st,
                    call,
                    || word.load(Ordering::Acquire) >= count,
                    || {
                        let who: Vec<u32> = from.map(|m| self.g.world(m)).collect();
                        format!(
                            "{line:?} signals from same-node PEs {who:?} in pSync ({} of {count} arrived)",
                            word.load(Ordering::Acquire)
                        )
                    },
                );
                word.fetch_sub(count, Ordering::AcqRel);
            }
        }
    }

    /// The symmetric address of counter `slot` (the same on every member).
    fn slot_addr(&self, slot: Slot) -> SymAddr {
        match self.flags {
            Flags::Team { block, .. } => SymAddr {
                seg: SYNC,
                off: block + layout::COUNTERS + 8 * slot.index() as u64,
            },
            Flags::Set { sym, .. } => SymAddr {
                seg: sym.seg,
                off: sym.off + 8 * slot.word() as u64,
            },
        }
    }

    /// Whether every member of the group has a collective endpoint (asked once per group):
    /// the test for choices that every member must make alike. [`Run::direct_data`] is
    /// per pair and false for a same-node member, so two leaders of one node would decide
    /// differently from the leaders of others.
    pub fn all_direct(&self) -> bool {
        let (g, st, call) = (self.g, self.st, self.call);
        g.all_have_endpoints(|| (0..g.n()).all(|m| direct::has_endpoint(st, g.world(m), call)))
    }

    /// Whether `len` bytes of data for member `to` (another cell) travel in datagrams
    /// straight to it with their signal (see `direct`); else [`Run::put_to`],
    /// [`Run::quiet`], [`Run::rpost`].
    pub fn direct_data(&self, to: u32, len: usize) -> bool {
        len <= direct::data_max(self.st) && direct::reaches(self.st, self.g.world(to), self.call)
    }

    /// Sends `len` bytes from local `src` to `dest + off` of member `to` (another cell,
    /// [`Run::direct_data`]), then signals `slot` (`None`: no signal yet, a later send to
    /// `to` carries it; it is delivered after this one).
    ///
    /// # Safety
    ///
    /// As [`Run::copy_to`].
    pub unsafe fn send_to(
        &self,
        to: u32,
        dest: Buf,
        off: usize,
        src: *const u8,
        len: usize,
        slot: Option<Slot>,
    ) {
        // SAFETY: the caller guarantees `src` is readable for `len` bytes.
        let data = unsafe { std::slice::from_raw_parts(src, len) };
        let at = dest.at(off).sym;
        let msg = match slot {
            Some(s) => direct::Msg::PutAdd(at, data, self.slot_addr(s)),
            None => direct::Msg::Put(at, data),
        };
        direct::send(self.st, self.g.world(to), msg, self.call);
    }

    /// Sends `len` bytes from local `src` to the mailbox of member `to` (another cell,
    /// [`Run::direct_data`]) and signals `slot`; `to` takes them with [`Run::take_mail`].
    ///
    /// # Safety
    ///
    /// `src` readable for `len` bytes.
    pub unsafe fn mail_to(&self, to: u32, src: *const u8, len: usize, slot: Slot) {
        // SAFETY: the caller guarantees `src` is readable for `len` bytes.
        self.mail_vec_to(to, unsafe { std::slice::from_raw_parts(src, len) }, slot);
    }

    /// Sends `data` to the mailbox of member `to` (another cell, reached directly) and
    /// signals `slot`, whatever its length; `to` takes it with [`Run::take_mail_any`].
    pub fn mail_vec_to(&self, to: u32, data: &[u8], slot: Slot) {
        let msg = direct::Msg::Mail(data, self.slot_addr(slot));
        direct::send(self.st, self.g.world(to), msg, self.call);
    }

    /// Takes the mail member `from` sent with signal `slot` into `out` (after that signal
    /// was waited for); false when it sent none (its data is then in its memory).
    pub fn take_mail(&self, from: u32, slot: Slot, out: &mut [u8]) -> bool {
        direct::take_mail(self.g.world(from), self.slot_addr(slot), out, self.call)
    }

    /// Sends `data` as a note under `key` to member `to` (another cell, reached directly).
    pub fn note_to(&self, to: u32, key: u64, data: &[u8]) {
        direct::send(
            self.st,
            self.g.world(to),
            direct::Msg::Note(key, data),
            self.call,
        );
    }

    /// Takes the oldest note of member `from` under `key` into `out`, if one arrived.
    pub fn take_note(&self, from: u32, key: u64, out: &mut [u8]) -> bool {
        let pe = self.g.world(from);
        direct::has_note(self.st, pe, key) && direct::take_note(pe, key, out, self.call)
    }

    /// Adds one to counter `slot` of member `to` (another cell): straight to it when it
    /// has a collective endpoint (see `direct`), else through its service.
    pub fn rpost(&mut self, slot: Slot, to: u32) {
        let at = self.slot_addr(slot);
        let pe = self.g.world(to);
        if direct::reaches(self.st, pe, self.call) {
            direct::send(self.st, pe, direct::Msg::Add(at), self.call);
            return;
        }
        if let Err(e) = self.st.node.atomic_nbi(
            NodeCtx::DEFAULT,
            pe,
            at.seg,
            at.off,
            AtomicOp::Add,
            AtomicType::U64,
            1,
            0,
        ) {
            fatal(self.call, e);
        }
    }

    /// Waits until `count` more signals reached counter `slot` of this PE; `from` names the
    /// members expected to send them (for the timeout message).
    pub fn rwait(&mut self, slot: Slot, count: u64, from: &[u32]) {
        if count == 0 {
            return;
        }
        let (st, call, me) = (self.st, self.call, self.g.me());
        // Signals from PEs reached directly arrive on this PE's socket.
        let socket = from
            .iter()
            .all(|&m| direct::reaches(st, self.g.world(m), call));
        let describe = |now: u64, want: u64| {
            let who: Vec<u32> = from.iter().map(|&m| self.g.world(m)).collect();
            format!("{slot:?} signals from PEs {who:?} (counter {now}, waiting for {want})")
        };
        match &mut self.flags {
            Flags::Team { state, block } => {
                let p = self.g.sync_base(me) + (*block + layout::COUNTERS) as usize;
                // SAFETY: a counter word of this PE's own block (aligned, mapped for the
                // life of the job); remote writers use atomics through the service.
                let word = unsafe { AtomicU64::from_ptr((p as *mut u64).add(slot.index())) };
                let want = state.consumed[slot.index()] + count;
                wait_on(
                    st,
                    call,
                    socket,
                    || word.load(Ordering::Acquire) >= want,
                    || describe(word.load(Ordering::Acquire), want),
                );
                state.consumed[slot.index()] = want;
            }
            Flags::Set { local, .. } => {
                // SAFETY: a word of this PE's `pSync` (checked at entry); all accesses are
                // atomic.
                let word = unsafe { AtomicU64::from_ptr(local.add(slot.word())) };
                wait_on(
                    st,
                    call,
                    socket,
                    || word.load(Ordering::Acquire) >= count,
                    || describe(word.load(Ordering::Acquire), count),
                );
                word.fetch_sub(count, Ordering::AcqRel);
            }
        }
    }

    /// The local address of `buf + off` in cell member `m` (this PE included).
    #[inline]
    pub fn peer(&self, m: u32, buf: Buf, off: usize) -> *mut u8 {
        if m == self.g.me() {
            return buf.local.wrapping_add(off);
        }
        match self.st.direct_ptr(self.g.world(m), buf.at(off).sym) {
            Some(p) => p,
            None => self.unmapped(m),
        }
    }

    /// Copies `len` bytes from local `src` to `dest + off` of cell member `m`.
    ///
    /// # Safety
    ///
    /// `src` readable for `len` bytes; `dest + off .. + len` inside the symmetric object.
    pub unsafe fn copy_to(&self, m: u32, dest: Buf, off: usize, src: *const u8, len: usize) {
        if len == 0 {
            return;
        }
        let d = self.peer(m, dest, off);
        // SAFETY: `d` maps `len` bytes of the member's copy of the object (the caller keeps
        // the range inside it); `store_once` tolerates `src == d` (an in-place collective).
        unsafe { gsas_transport::watched::store_once(src, d, len) };
    }

    /// Puts `len` bytes from local `src` to `dest + off` of member `m` (another cell);
    /// locally complete on return, delivered by [`Run::quiet`].
    ///
    /// # Safety
    ///
    /// As [`Run::copy_to`].
    pub unsafe fn put_to(&self, m: u32, dest: Buf, off: usize, src: *const u8, len: usize) {
        if len == 0 {
            return;
        }
        let at = dest.at(off).sym;
        // SAFETY: the caller guarantees `src` is readable for `len` bytes.
        let data = unsafe { std::slice::from_raw_parts(src, len) };
        if let Err(e) = self
            .st
            .node
            .put(NodeCtx::DEFAULT, self.g.world(m), at.seg, at.off, data)
        {
            fatal(self.call, e);
        }
    }

    /// As [`Run::put_to`], non-blocking: `src` may be reused on return, the data is
    /// delivered by [`Run::quiet`] (many small puts share frames).
    ///
    /// # Safety
    ///
    /// As [`Run::copy_to`].
    pub unsafe fn put_nbi_to(&self, m: u32, dest: Buf, off: usize, src: *const u8, len: usize) {
        if len == 0 {
            return;
        }
        let at = dest.at(off).sym;
        // SAFETY: the caller guarantees `src` is readable for `len` bytes.
        let data = unsafe { std::slice::from_raw_parts(src, len) };
        if let Err(e) =
            self.st
                .node
                .put_nbi(NodeCtx::DEFAULT, self.g.world(m), at.seg, at.off, data)
        {
            fatal(self.call, e);
        }
    }

    /// Reads `len` bytes at `src + off` of member `m` into local `dst`.
    ///
    /// # Safety
    ///
    /// `dst` writable for `len` bytes; the range inside the symmetric object.
    pub unsafe fn get_from(&self, m: u32, src: Buf, off: usize, dst: *mut u8, len: usize) {
        if len == 0 {
            return;
        }
        let at = src.at(off).sym;
        // SAFETY: the caller guarantees `dst` is writable for `len` bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        if let Err(e) = self
            .st
            .node
            .get(NodeCtx::DEFAULT, self.g.world(m), at.seg, at.off, out)
        {
            fatal(self.call, e);
        }
    }

    /// Completes this PE's puts (before signalling that they arrived).
    pub fn quiet(&self) {
        if self.st.node.remote_ops_started() == 0 {
            return;
        }
        if let Err(e) = self.st.node.quiet(NodeCtx::DEFAULT) {
            fatal(self.call, e);
        }
    }

    /// The word this PE publishes to its cell (a team's block line, else `pSync`).
    pub fn published(&self, m: u32) -> &AtomicU64 {
        match self.flags {
            Flags::Team { block, .. } => self.block_word(block, m, layout::PUBLISH),
            Flags::Set { sym, local } => self.psync_word(sym, local, m, layout::PUBLISH_WORD),
        }
    }

    /// The second word this PE publishes to its cell (a source address).
    pub fn published_src(&self, m: u32) -> &AtomicU64 {
        match self.flags {
            Flags::Team { block, .. } => self.block_word(block, m, layout::PUBLISH_SRC),
            Flags::Set { sym, local } => self.psync_word(sym, local, m, layout::PUBLISH_SRC_WORD),
        }
    }

    /// Takes the mail member `from` sent with signal `slot`, whatever its length.
    pub fn take_mail_any(&self, from: u32, slot: Slot) -> Option<Vec<u8>> {
        direct::take_mail_any(self.g.world(from), self.slot_addr(slot))
    }

    /// Word `w` of the active set's `pSync` as a buffer (for gets from other cells).
    pub fn psync_buf(&self, w: usize) -> Buf {
        match self.flags {
            Flags::Set { sym, local } => Buf {
                sym: SymAddr {
                    seg: sym.seg,
                    off: sym.off + 8 * w as u64,
                },
                local: local.wrapping_add(w).cast(),
            },
            Flags::Team { .. } => fatal(self.call, "internal error: a team has no pSync"),
        }
    }

    /// The team block's buffer at byte `off` (a symmetric object of the sync segment).
    pub fn block_buf(&self, off: u64) -> Option<Buf> {
        match self.flags {
            Flags::Team { block, .. } => Some(Buf {
                sym: SymAddr {
                    seg: SYNC,
                    off: block + off,
                },
                local: (self.g.sync_base(self.g.me()) + (block + off) as usize) as *mut u8,
            }),
            Flags::Set { .. } => None,
        }
    }
}

/// The `pSync` word of an active set's cell signal.
fn set_line_word(line: Line) -> usize {
    match line {
        Line::Arrive => layout::ARRIVE_WORD,
        Line::Release => layout::RELEASE_WORD,
    }
}
