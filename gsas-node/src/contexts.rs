//! Contexts and completion: create/destroy, quiet and fence.

use super::error::NodeError;
use super::remote::Remote;
use std::sync::atomic;
use std::sync::atomic::Ordering;

use super::{Ctx, MAX_CONTEXTS, Node, lock};

impl Node {
    /// Creates a context (up to [`MAX_CONTEXTS`] - 1 besides the default).
    pub fn ctx_create(&self) -> Result<Ctx, NodeError> {
        self.check_live()?;
        let mut used = lock(&self.contexts);
        let free = (!*used).trailing_zeros() as usize;
        if free >= MAX_CONTEXTS {
            return Err(NodeError::Invalid(format!(
                "all {MAX_CONTEXTS} contexts are in use"
            )));
        }
        *used |= 1 << free;
        Ok(Ctx(free as u16))
    }

    /// Completes the context's operations and frees it. Destroying the default context is
    /// refused.
    pub fn ctx_destroy(&self, ctx: Ctx) -> Result<(), NodeError> {
        if ctx == Ctx::DEFAULT {
            return Err(NodeError::Invalid(
                "the default context cannot be destroyed".into(),
            ));
        }
        self.quiet(ctx)?;
        *lock(&self.contexts) &= !(1u64 << ctx.index());
        Ok(())
    }

    /// Waits until every operation of `ctx` has completed (remote writes delivered, reads
    /// and fetched values written) and returns the first error of its non-blocking
    /// operations, if any. Ends with a full memory fence.
    pub fn quiet(&self, ctx: Ctx) -> Result<(), NodeError> {
        let i = self.ctx_index(ctx)?;
        self.check_live()?;
        self.complete_outside(None)?;
        {
            let mut remote = self.pulse.lock();
            // RDMA first (the verbs path does not keep per-context counts: every context's
            // quiet completes all of it).
            if let Some(v) = remote.verbs.as_mut() {
                v.quiet()?;
            }
            // Nothing in flight (e.g. a barrier after the last operation completed): no
            // waiter and no look at the transports, only the fence and the error.
            if remote.outstanding(i) == 0 && remote.book.unsent.is_empty() {
                atomic::fence(Ordering::SeqCst);
                let error = remote.book.ctx_error.get_mut(i).and_then(Option::take);
                self.mark_settled(&remote);
                return error.map_or(Ok(()), Err);
            }
        }
        let limit = self.op_limit();
        self.wait_reply(
            &format_args!("the operations of context {i} to complete"),
            limit,
            |remote| {
                Ok((remote.outstanding(i) == 0 && remote.book.unsent.is_empty()).then_some(()))
            },
        )?;
        atomic::fence(Ordering::SeqCst);
        let mut remote = self.pulse.lock();
        let error = remote.book.ctx_error.get_mut(i).and_then(Option::take);
        self.mark_settled(&remote);
        error.map_or(Ok(()), Err)
    }

    /// Marks the node settled ([`Node::settled_word`]) if nothing of any context is in flight,
    /// unsent or unreported; called with the remote path's lock held (`remote`).
    fn mark_settled(&self, remote: &Remote) {
        if engines_idle(remote)
            && remote.book.ctx_error.iter().all(Option::is_none)
            && !self.outside.load(Ordering::Acquire)
        {
            self.settled.store(true, Ordering::Relaxed);
        }
    }

    /// Before a write of this PE goes to PE `pe`'s own endpoint, outside the node (the
    /// OpenSHMEM layer's point-to-point puts): whether it may. It may only while nothing
    /// of the remote path is in flight or unsent, so that it cannot overtake an earlier
    /// operation (fenced or not) of any context; then the node is marked as having writes
    /// outside ([`Node::outside_done`] ends that), counts it as a started operation and is
    /// no longer settled. Operations through a service that start later first complete the
    /// outside writes to their PE, and `quiet` and `fence` all of them, through the hook
    /// ([`Node::set_outside_hook`]), so a write outside the node is never reordered with
    /// another write of this PE to the same PE (two writes through a service are ordered
    /// by `fence`, as before).
    pub fn outside_begin(&self) -> bool {
        let remote = self.pulse.lock();
        if !engines_idle(&remote) {
            return false;
        }
        self.outside.store(true, Ordering::Release);
        self.ops_started.fetch_add(1, Ordering::Relaxed);
        // Under the remote path's lock, as `mark_settled`: see `Node::settled_word`.
        self.settled.store(false, Ordering::Relaxed);
        true
    }

    /// Every write sent outside the node since [`Node::outside_begin`] is complete (the
    /// caller knows, under its own lock, that no other is in flight).
    pub fn outside_done(&self) {
        self.outside.store(false, Ordering::Release);
    }

    /// Sets what completes the writes sent outside the node (once; later calls are
    /// ignored).
    pub fn set_outside_hook(&self, hook: super::OutsideHook) {
        let _ = self.outside_hook.set(hook);
    }

    /// Completes the writes sent outside the node, to `pe` or to every PE, if any may be
    /// in flight (one load otherwise). Called without the remote path's lock.
    #[inline]
    pub(crate) fn complete_outside(&self, pe: Option<u32>) -> Result<(), NodeError> {
        if !self.outside.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.outside_hook.get() {
            Some(hook) => hook(pe),
            None => Ok(()),
        }
    }

    /// Orders the delivery of the context's earlier puts and atomics before later ones;
    /// see the [module docs](self) for how.
    pub fn fence(&self, ctx: Ctx) -> Result<(), NodeError> {
        let i = self.ctx_index(ctx)?;
        self.complete_outside(None)?;
        let pending = {
            let mut remote = self.pulse.lock();
            if let Some(v) = remote.verbs.as_mut() {
                v.fence();
            }
            remote.outstanding(i) > 0
        };
        if pending {
            self.quiet(ctx)
        } else {
            atomic::fence(Ordering::Release);
            Ok(())
        }
    }
}

/// Whether no engine of the remote path has anything in flight or unsent.
fn engines_idle(remote: &Remote) -> bool {
    remote.net.client.in_flight() == 0
        && remote
            .ring
            .as_ref()
            .is_none_or(|r| r.client.in_flight() == 0)
        && remote.book.unsent.is_empty()
        && remote.verbs.as_ref().is_none_or(|v| !v.busy())
}
