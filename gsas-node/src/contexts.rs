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
        let idle = remote.net.client.in_flight() == 0
            && remote
                .ring
                .as_ref()
                .is_none_or(|r| r.client.in_flight() == 0)
            && remote.book.unsent.is_empty()
            && remote.book.ctx_error.iter().all(Option::is_none)
            && remote.verbs.as_ref().is_none_or(|v| !v.busy());
        if idle {
            self.settled.store(true, Ordering::Relaxed);
        }
    }

    /// Orders the delivery of the context's earlier puts and atomics before later ones;
    /// see the [module docs](self) for how.
    pub fn fence(&self, ctx: Ctx) -> Result<(), NodeError> {
        let i = self.ctx_index(ctx)?;
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
