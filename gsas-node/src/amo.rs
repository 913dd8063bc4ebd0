//! Atomics: validation, direct CPU atomics, and atomics through a service.

use super::error::NodeError;
use super::remote::{OpDesc, Route, Target};
use gsas_core::client::ClientError;
use gsas_core::wire::{AtomicDesc, AtomicOp, AtomicType};
use gsas_transport::watched;

use super::{Ctx, Node, local, remote};

impl Node {
    /// Validates an atomic on `pe`'s segment `seg` at `offset` (defined for the type,
    /// operands that fit, a target inside the segment, natural alignment) and returns its
    /// descriptor with the direct pointer when the target is mapped on this node.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn amo_target(
        &self,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> Result<(AtomicDesc, Option<*mut u8>), NodeError> {
        let desc = Self::amo_desc(op, ty, operand, comparand)?;
        let width = desc.width();
        self.check_target(pe, seg, offset, width)?;
        if offset % width as u64 != 0 {
            return Err(NodeError::Invalid(format!(
                "atomic at offset {offset:#x} is not aligned to {width} bytes"
            )));
        }
        Ok((desc, self.direct_ptr(pe, seg, offset, width)?))
    }

    fn amo_desc(
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> Result<AtomicDesc, NodeError> {
        let desc = AtomicDesc::new(op, ty)
            .map_err(|_| NodeError::Invalid(format!("atomic {op:?} is not defined on {ty:?}")))?;
        let mask = desc.operand_mask();
        if operand & !mask != 0 || (desc.has_comparand() && comparand & !mask != 0) {
            return Err(NodeError::Invalid(format!(
                "atomic operand {operand:#x} or comparand {comparand:#x} does not fit {ty:?}"
            )));
        }
        Ok(desc)
    }

    /// Runs atomic `op` on the `ty` at `offset` of segment `seg` of PE `pe` and returns the
    /// old value (32-bit types zero-extended; floats as bits). Non-fetching operations
    /// (SET, ADD, INC, AND, OR, XOR) also wait for completion and return 0. `comparand` is
    /// used by COMPARE_SWAP only.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> Result<u64, NodeError> {
        let (desc, direct) = self.amo_target(pe, seg, offset, op, ty, operand, comparand)?;
        let width = desc.width();
        if let Some(p) = direct {
            // SAFETY: `p` lies in a live shared mapping, aligned (mapping bases are page
            // aligned and offset is a multiple of the width), accessed atomically by PEs
            // and the service.
            let old = unsafe { local::atomic_at(p, desc.op(), desc.width(), operand, comparand) };
            return Ok(if desc.fetches() { old } else { 0 });
        }
        if let Some(old) = self.nic_atomic(ctx, pe, seg, offset, op, ty, operand, comparand)? {
            return Ok(if desc.fetches() { old } else { 0 });
        }
        let index = self.amo_start(ctx, pe, seg, offset, desc, operand, comparand, true, None)?;
        let d = OpDesc {
            kind: "atomic",
            pe,
            seg,
            offset,
            len: width,
            signal: None,
        };
        Ok(self.finish(index, &d)?.unwrap_or(0))
    }

    /// Posts a non-fetching atomic (a fetching `op` is executed and its value dropped);
    /// completion needs [`Node::quiet`]. A remote request may wait in its open frame until
    /// the next round of progress (see the [module docs](self)); follow with
    /// [`Node::progress`] to send it at once (a blocking OpenSHMEM AMO does).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> Result<(), NodeError> {
        // SAFETY: no destination is written.
        unsafe { self.amo_nbi(ctx, pe, seg, offset, op, ty, operand, comparand, None) }
    }

    /// Starts a fetching atomic whose old value (`ty`'s width, little-endian) is written to
    /// `dest` by [`Node::quiet`] on `ctx`.
    ///
    /// # Safety
    ///
    /// `dest` must be valid for writes of 4 (32-bit types) or 8 bytes until `quiet(ctx)`
    /// returns and not be accessed by anything else until then.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn atomic_fetch_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
        dest: *mut u8,
    ) -> Result<(), NodeError> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.amo_nbi(ctx, pe, seg, offset, op, ty, operand, comparand, Some(dest)) }
    }

    /// # Safety
    ///
    /// `dest`, if given, valid for the width until quiet.
    #[allow(clippy::too_many_arguments)]
    unsafe fn amo_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
        dest: Option<*mut u8>,
    ) -> Result<(), NodeError> {
        let (desc, direct) = self.amo_target(pe, seg, offset, op, ty, operand, comparand)?;
        let width = desc.width();
        if let Some(p) = direct {
            // SAFETY: as in `atomic`.
            let old = unsafe { local::atomic_at(p, desc.op(), desc.width(), operand, comparand) };
            if let Some(d) = dest {
                // SAFETY: the caller guarantees `d` is valid for `width` bytes.
                unsafe { watched::store_once(old.to_le_bytes().as_ptr(), d, width) };
            }
            return Ok(());
        }
        // NIC atomics complete before they return (the nbi form included).
        if let Some(old) = self.nic_atomic(ctx, pe, seg, offset, op, ty, operand, comparand)? {
            if let Some(d) = dest {
                // SAFETY: as above.
                unsafe { watched::store_once(old.to_le_bytes().as_ptr(), d, width) };
            }
            return Ok(());
        }
        self.amo_start(
            ctx,
            pe,
            seg,
            offset,
            desc,
            operand,
            comparand,
            false,
            dest.map(|d| d as usize),
        )
        .map(|_| ())
    }

    /// A NIC atomic when `pe` is reached over verbs and `ty` is offloaded there (see
    /// `verbs.rs`): the old value. `None`: the atomic goes through the service.
    #[allow(clippy::too_many_arguments)]
    fn nic_atomic(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        comparand: u64,
    ) -> Result<Option<u64>, NodeError> {
        if !matches!(self.routes[pe as usize], Route::Verbs(_)) {
            return Ok(None);
        }
        self.ctx_index(ctx)?;
        self.with_verbs(|v| {
            if v.offloads(ty) {
                v.atomic(pe, seg, offset, op, operand, comparand).map(Some)
            } else {
                Ok(None)
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn amo_start(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        desc: AtomicDesc,
        operand: u64,
        comparand: u64,
        blocking: bool,
        dest: Option<usize>,
    ) -> Result<usize, NodeError> {
        let addr = self.check_target(pe, seg, offset, desc.width())?;
        let ctx = self.ctx_index(ctx)?;
        let route = self.routes[pe as usize].service();
        let d = OpDesc {
            kind: "atomic",
            pe,
            seg,
            offset,
            len: desc.width(),
            signal: None,
        };
        let rec = self.record(
            ctx,
            route,
            pe,
            d,
            blocking,
            Target::Atomic {
                dest,
                width: desc.width(),
            },
        );
        let (index, _) = self.start(route, rec, blocking, |remote, tag| match route {
            Route::Net(peer) => remote::try_start(&mut remote.net, |c, t| {
                c.atomic(t, peer, ctx, tag, addr, desc, operand, comparand)
            }),
            Route::Ring => match &mut remote.ring {
                Some(e) => remote::try_start(e, |c, t| {
                    c.atomic(t, remote::RING, ctx, tag, addr, desc, operand, comparand)
                }),
                None => Err(ClientError::StaleHandle),
            },
            Route::Direct | Route::Verbs(_) => Err(ClientError::StaleHandle),
        })?;
        Ok(index)
    }

    /// The signal update of a put-with-signal (OpenSHMEM 1.5 §9.8.1): `op` (SET or ADD) of
    /// `value` on the `u64` at `offset` of segment `seg` of PE `pe`, delivered after every
    /// earlier put of `ctx` to that PE and sent before returning (the target may be
    /// waiting for it). Over verbs, when `u64` atomics are offloaded, the update is a NIC
    /// atomic (ADD a fetch-add, SET a compare-swap loop, so that it stays atomic against
    /// the other NIC atomics on the word) on the queue pair that carried the data, which
    /// executes in order; otherwise a SET is an 8-byte inline RDMA WRITE on that queue pair
    /// (one aligned store at the target, atomic against the service's CPU atomics) and an
    /// ADD goes through the target node's service once the RDMA before it has completed.
    /// Elsewhere: a fence, then the atomic. (A put-with-signal with data does not come
    /// here for a PE reached through a service: [`Node::put_signal`] sends the signal in
    /// the write's request.)
    pub fn signal(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        op: AtomicOp,
        value: u64,
    ) -> Result<(), NodeError> {
        let (_, direct) = self.amo_target(pe, seg, offset, op, AtomicType::U64, value, 0)?;
        if direct.is_none() && matches!(self.routes[pe as usize], Route::Verbs(_)) {
            if self
                .nic_atomic(ctx, pe, seg, offset, op, AtomicType::U64, value, 0)?
                .is_some()
            {
                return Ok(());
            }
            if op == AtomicOp::Set {
                return self.with_verbs(|v| v.write_u64(pe, seg, offset, value));
            }
            self.with_verbs(|v| v.quiet())?;
        } else {
            self.fence(ctx)?;
        }
        self.atomic_nbi(ctx, pe, seg, offset, op, AtomicType::U64, value, 0)?;
        self.progress()
    }
}
