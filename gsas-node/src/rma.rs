//! RMA: put and get, blocking and non-blocking, direct or through a service.

use super::error::NodeError;
use super::remote::{OpDesc, Route, Target};
use gsas_core::client::{ClientError, Issued};
use gsas_core::wire::{AtomicType, GlobalAddr};
use gsas_transport::watched;
use std::sync::atomic::Ordering;

use super::{Ctx, Node, remote};

use gsas_core::client::Client;
use gsas_core::transport::Transport;
use gsas_core::wire::{Signal, SignalOp};

impl Node {
    /// Writes `data` to `offset` of segment `seg` of PE `pe`; returns after local completion
    /// (the data has been copied out of `data`, and a remote write has been sent).
    /// Completion (delivery confirmed, refusals reported) is [`Node::quiet`] on `ctx`.
    pub fn put(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        data: &[u8],
    ) -> Result<(), NodeError> {
        self.put_inner(ctx, pe, seg, offset, data, false, false, None)
    }

    /// Like [`Node::put`] (the data has been copied out of `data` when it returns), but a
    /// write that goes through a service may wait in its open frame for the next operation
    /// that sends, the next [`Node::progress`] or the progress keeper's tick, as the
    /// writes of [`Node::put_nbi`] do, instead of being sent before returning. For
    /// OpenSHMEM 1.6 sessions with `SHMEM_CTX_SESSION_BATCH`: consecutive small blocking
    /// puts then share frames. Completion is [`Node::quiet`], as for every put.
    pub fn put_held(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        data: &[u8],
    ) -> Result<(), NodeError> {
        self.put_inner(ctx, pe, seg, offset, data, false, true, None)
    }

    /// Like [`Node::put`], but may return before the whole payload is handed to the
    /// transport: the rest is copied and sent by later progress. Completed by
    /// [`Node::quiet`].
    pub fn put_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        data: &[u8],
    ) -> Result<(), NodeError> {
        self.put_inner(ctx, pe, seg, offset, data, true, false, None)
    }

    /// Put-with-signal (OpenSHMEM 1.5 §9.8.1): writes `data` to `offset` of segment `seg`
    /// of PE `pe`, then applies `op` (SET or ADD) of `value` to the `u64` at `sig_offset`
    /// of segment `sig_seg` of the same PE once the data is delivered. Returns like
    /// [`Node::put`] (or [`Node::put_nbi`] with `nbi`); [`Node::quiet`] completes both the
    /// data and the signal, and reports a refusal of either.
    ///
    /// To a PE reached through a service (another node over UDP or Exanet, or this node's
    /// service through the shm ring), the signal travels in the write's request and the
    /// service applies it after the data (see [`gsas_core::wire`], "Attached signal"): one
    /// request and its acknowledgement for a write that fits one packet, and for a bulk
    /// write the final fragment, sent once the others are acknowledged. The request is
    /// sent before returning (the target may be waiting for the signal). Same-node direct
    /// targets get the stores and then a release atomic; over verbs, the data is an RDMA
    /// WRITE and the signal follows as in [`Node::signal`].
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        data: &[u8],
        sig_seg: u8,
        sig_offset: u64,
        op: SignalOp,
        value: u64,
        nbi: bool,
    ) -> Result<(), NodeError> {
        let sig_op = op.atomic_op();
        let (_, direct) =
            self.amo_target(pe, sig_seg, sig_offset, sig_op, AtomicType::U64, value, 0)?;
        let through_service = matches!(self.routes[pe as usize], Route::Net(_) | Route::Ring);
        if data.is_empty() || direct.is_some() || !through_service {
            self.put_inner(ctx, pe, seg, offset, data, nbi, false, None)?;
            return self.signal(ctx, pe, sig_seg, sig_offset, sig_op, value);
        }
        let signal = Signal {
            addr: self.check_target(pe, sig_seg, sig_offset, 8)?,
            op,
            value,
        };
        self.put_inner(ctx, pe, seg, offset, data, nbi, false, Some(signal))
    }

    #[allow(clippy::too_many_arguments)]
    fn put_inner(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        data: &[u8],
        nbi: bool,
        hold: bool,
        signal: Option<Signal>,
    ) -> Result<(), NodeError> {
        if data.is_empty() {
            return self.check_live();
        }
        let addr = self.check_target(pe, seg, offset, data.len())?;
        if let Some(p) = self.direct_ptr(pe, seg, offset, data.len())? {
            // SAFETY: `p .. p + len` lies inside a live shared mapping (checked by
            // direct_ptr); `data` is a valid slice and cannot overlap a mapping of another
            // PE's segment (or is the same bytes if the program copies within its own).
            unsafe { watched::store_once(data.as_ptr(), p, data.len()) };
            return Ok(());
        }
        let route = self.routes[pe as usize];
        if let Route::Verbs(_) = route {
            self.ctx_index(ctx)?;
            return self.with_verbs(|v| v.put(pe, seg, offset, data, nbi));
        }
        let ctx = self.ctx_index(ctx)?;
        let desc = OpDesc {
            kind: if signal.is_some() {
                "put-with-signal"
            } else {
                "put"
            },
            pe,
            seg,
            offset,
            len: data.len(),
            signal: signal.map(|s| (s.addr.segment(), s.addr.offset())),
        };
        let rec = self.record(ctx, route, pe, desc, false, Target::Write { payload: None });
        // A put-with-signal goes out at once even when non-blocking: the target may be
        // waiting for the signal. A held blocking put waits like a non-blocking one.
        let send_now = !(nbi || hold) || signal.is_some();
        let w = WriteArgs {
            ctx,
            addr,
            data,
            signal,
        };
        let (index, issued) = self.start(route, rec, send_now, |remote, tag| match route {
            Route::Net(peer) => remote::try_start(&mut remote.net, |c, t| w.start(c, t, peer, tag)),
            Route::Ring => match &mut remote.ring {
                Some(e) => remote::try_start(e, |c, t| w.start(c, t, remote::RING, tag)),
                None => Err(ClientError::StaleHandle),
            },
            Route::Direct | Route::Verbs(_) => Err(ClientError::StaleHandle),
        })?;
        if issued.all_sent {
            return Ok(());
        }
        if nbi {
            let mut r = self.pulse.lock();
            if let Some(rec) = r.book.get_mut(index) {
                rec.target = Target::Write {
                    payload: Some(data.to_vec()),
                };
                r.book.unsent.push(index);
            }
            return Ok(());
        }
        // Blocking: send the rest from the caller's buffer.
        let handle = issued.handle;
        self.wait_for(
            &format_args!("sending the {desc}"),
            self.op_limit(),
            |remote| {
                let r = match route {
                    Route::Net(_) => {
                        remote
                            .net
                            .client
                            .resume(&mut remote.net.transport, handle, data)
                    }
                    Route::Ring => match &mut remote.ring {
                        Some(e) => e.client.resume(&mut e.transport, handle, data),
                        None => Err(ClientError::StaleHandle),
                    },
                    Route::Direct | Route::Verbs(_) => Err(ClientError::StaleHandle),
                };
                match r {
                    Ok(s) if s.all_sent => {
                        if route == Route::Ring {
                            remote.ring_doorbell();
                        }
                        Ok(Some(()))
                    }
                    Ok(s) => {
                        if route == Route::Ring && s.packets > 0 {
                            remote.ring_doorbell();
                        }
                        Ok(None)
                    }
                    // Completed (refused) before everything was sent: the error is in the book.
                    Err(ClientError::StaleHandle) => Ok(Some(())),
                    Err(e) => Err(NodeError::Transport(format!("{desc}: {e}"))),
                }
            },
        )?;
        // The last fragments may still be in an open frame.
        self.progress()
    }

    /// Reads `dest.len()` bytes at `offset` of segment `seg` of PE `pe` into `dest`;
    /// returns when the data is there.
    pub fn get(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        dest: &mut [u8],
    ) -> Result<(), NodeError> {
        if dest.is_empty() {
            return self.check_live();
        }
        self.check_target(pe, seg, offset, dest.len())?;
        if let Some(p) = self.direct_ptr(pe, seg, offset, dest.len())? {
            // SAFETY: `p .. p + len` lies inside a live shared mapping; `dest` is a valid,
            // exclusively borrowed slice.
            unsafe { watched::load_once(p, dest.as_mut_ptr(), dest.len()) };
            return Ok(());
        }
        if let Route::Verbs(_) = self.routes[pe as usize] {
            self.ctx_index(ctx)?;
            // SAFETY: `dest` is an exclusively borrowed slice, valid until the blocking
            // get returns.
            return self.with_verbs(|v| unsafe {
                v.get(pe, seg, offset, dest.as_mut_ptr(), dest.len(), true)
            });
        }
        // SAFETY: `dest` stays borrowed (and valid) until this call returns, which waits
        // for the operation; on a failed wait the record stops writing to it.
        let index =
            unsafe { self.get_start(ctx, pe, seg, offset, dest.as_mut_ptr(), dest.len(), true)? };
        let desc = OpDesc {
            kind: "get",
            pe,
            seg,
            offset,
            len: dest.len(),
            signal: None,
        };
        self.finish(index, &desc).map(|_| ())
    }

    /// Starts reading `len` bytes at `offset` of segment `seg` of PE `pe` into `dest`;
    /// the data is there after [`Node::quiet`] on `ctx`.
    ///
    /// # Safety
    ///
    /// `dest` must be valid for writes of `len` bytes until `quiet(ctx)` returns (or the
    /// node is dropped), and must not be read or written by anything else until then.
    pub unsafe fn get_nbi(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        dest: *mut u8,
        len: usize,
    ) -> Result<(), NodeError> {
        if len == 0 {
            return self.check_live();
        }
        self.check_target(pe, seg, offset, len)?;
        if let Some(p) = self.direct_ptr(pe, seg, offset, len)? {
            // SAFETY: `p .. p + len` lies inside a live mapping; the caller guarantees
            // `dest` is valid for `len` bytes.
            unsafe { watched::load_once(p, dest, len) };
            return Ok(());
        }
        if let Route::Verbs(_) = self.routes[pe as usize] {
            self.ctx_index(ctx)?;
            // SAFETY: forwarded from the caller's contract (valid until quiet).
            return self.with_verbs(|v| unsafe { v.get(pe, seg, offset, dest, len, false) });
        }
        // SAFETY: forwarded from the caller's contract.
        unsafe { self.get_start(ctx, pe, seg, offset, dest, len, false) }.map(|_| ())
    }

    /// Starts a remote read into `dest`.
    ///
    /// # Safety
    ///
    /// `dest` valid for `len` bytes until the record completes (blocking: the caller
    /// waits; non-blocking: until quiet).
    #[allow(clippy::too_many_arguments)]
    unsafe fn get_start(
        &self,
        ctx: Ctx,
        pe: u32,
        seg: u8,
        offset: u64,
        dest: *mut u8,
        len: usize,
        blocking: bool,
    ) -> Result<usize, NodeError> {
        let addr = self.check_target(pe, seg, offset, len)?;
        let ctx = self.ctx_index(ctx)?;
        let route = self.routes[pe as usize];
        let desc = OpDesc {
            kind: "get",
            pe,
            seg,
            offset,
            len,
            signal: None,
        };
        let rec = self.record(
            ctx,
            route,
            pe,
            desc,
            blocking,
            Target::Read {
                dest: dest as usize,
            },
        );
        let (index, _) = self.start(route, rec, blocking, |remote, tag| match route {
            Route::Net(peer) => {
                remote::try_start(&mut remote.net, |c, t| c.read(t, peer, ctx, tag, addr, len))
            }
            Route::Ring => match &mut remote.ring {
                Some(e) => {
                    remote::try_start(e, |c, t| c.read(t, remote::RING, ctx, tag, addr, len))
                }
                None => Err(ClientError::StaleHandle),
            },
            Route::Direct | Route::Verbs(_) => Err(ClientError::StaleHandle),
        })?;
        Ok(index)
    }

    /// Runs `f` on the verbs path, which exists whenever a route is [`Route::Verbs`]
    /// (counted in [`Node::remote_ops_started`]).
    pub(super) fn with_verbs<R>(
        &self,
        f: impl FnOnce(&mut super::verbs::VerbsPath) -> Result<R, NodeError>,
    ) -> Result<R, NodeError> {
        self.ops_started.fetch_add(1, Ordering::Relaxed);
        let mut remote = self.pulse.lock();
        // Under the lock: see `Node::settled_word`.
        self.settled.store(false, Ordering::Relaxed);
        match remote.verbs.as_mut() {
            Some(v) => f(v),
            None => Err(NodeError::Transport(
                "a verbs route without a verbs path".into(),
            )),
        }
    }
}

/// A write to start on either service path's engine (their peer types differ).
#[derive(Clone, Copy)]
struct WriteArgs<'a> {
    ctx: usize,
    addr: GlobalAddr,
    data: &'a [u8],
    signal: Option<Signal>,
}

impl WriteArgs<'_> {
    fn start<T: Transport>(
        self,
        client: &mut Client<T::Peer, { remote::OPS }, { remote::CONTEXTS }>,
        transport: &mut T,
        peer: T::Peer,
        tag: u64,
    ) -> Result<Issued, ClientError>
    where
        T::Peer: Copy + PartialEq,
    {
        let WriteArgs {
            ctx,
            addr,
            data,
            signal,
        } = self;
        match signal {
            None => client.write(transport, peer, ctx, tag, addr, data),
            Some(s) => client.write_signal(transport, peer, ctx, tag, addr, data, s),
        }
    }
}
