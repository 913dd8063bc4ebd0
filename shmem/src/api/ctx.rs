//! Contexts and the communication routines on them: RMA (OpenSHMEM 1.5 §9.6, with the
//! block-strided `ibput`/`ibget` of 1.6), AMOs (§9.7), put-with-signal (§9.8), fence and
//! quiet (§9.11).
//!
//! Kept as one file for now because its AMO methods are to be generated from the C ABI's
//! type table (issue 14 item 2), which shrinks it; the RMA, AMO and signal methods are all
//! methods of `Ctx`.
//!
//! **What it is.** A [`Ctx`] is a context handle: the default one (through `Deref` of
//! [`Shmem`](super::Shmem)) or one from [`Shmem::ctx_create`](super::Shmem::ctx_create) /
//! [`Team::create_ctx`](super::Team::create_ctx), destroyed on drop (after a quiet). PE
//! numbers are those of the context's team. Blocking puts complete locally; gets return
//! with the data; [`Ctx::put_nbi`] copies what it cannot send at once, so its source is
//! free on return; non-blocking reads and fetching AMOs run inside [`Ctx::nbi`], which
//! quiets the context before it returns, so the borrowed destinations outlive the
//! operations (like `std::thread::scope`).
//!
//! **What it is not.** No sessions (1.6).
//!
//! **Thread-safety.** `Send + Sync`; one context per thread is the fastest arrangement.

use std::marker::PhantomData;

use gsas_core::wire::AtomicOp;

use super::bytes;
use super::sym::SymSlice;
use super::{Error, ErrorKind, c_pe};
use crate::ctx_table::{self as cctx, CtxRef};
use crate::rma;
use crate::types::{AmoBitwise, AmoExtended, AmoStandard, Scalar, Symmetric};

/// Context options (`SHMEM_CTX_*`, OpenSHMEM 1.5 §9.5.1): accepted and recorded; every
/// gsas context is thread-safe, so they change nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtxOptions(std::ffi::c_long);

impl CtxOptions {
    /// No options.
    pub const NONE: CtxOptions = CtxOptions(0);
    /// `SHMEM_CTX_PRIVATE`: used by the creating thread only.
    pub const PRIVATE: CtxOptions = CtxOptions(cctx::CTX_PRIVATE);
    /// `SHMEM_CTX_SERIALIZED`: not used by several threads at once.
    pub const SERIALIZED: CtxOptions = CtxOptions(cctx::CTX_SERIALIZED);
    /// `SHMEM_CTX_NOSTORE`: quiet and fence need not complete local stores.
    pub const NOSTORE: CtxOptions = CtxOptions(cctx::CTX_NOSTORE);

    /// The C bit mask.
    pub fn bits(self) -> std::ffi::c_long {
        self.0
    }
}

impl std::ops::BitOr for CtxOptions {
    type Output = CtxOptions;
    fn bitor(self, rhs: CtxOptions) -> CtxOptions {
        CtxOptions(self.0 | rhs.0)
    }
}

/// The signal update of a put-with-signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalOp {
    /// `SHMEM_SIGNAL_SET`: store the signal value.
    Set,
    /// `SHMEM_SIGNAL_ADD`: add the signal value.
    Add,
}

impl SignalOp {
    fn to_c(self) -> std::ffi::c_int {
        match self {
            SignalOp::Set => rma::SIGNAL_SET,
            SignalOp::Add => rma::SIGNAL_ADD,
        }
    }
}

/// Options of a session ([`Ctx::session`], OpenSHMEM 1.6 §9.9.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionOptions(std::ffi::c_long);

impl SessionOptions {
    /// No option.
    pub const NONE: SessionOptions = SessionOptions(0);
    /// `SHMEM_CTX_SESSION_BATCH`: the session's operations tolerate latency and may be
    /// batched (gsas holds blocking puts to other nodes in open frames: see
    /// [`Ctx::session`]).
    pub const BATCH: SessionOptions = SessionOptions(cctx::SESSION_BATCH);
}

/// An open session on a context; stopped when dropped or by [`Session::stop`].
///
/// Sessions do not nest (the specification's rule): a second guard on the same context
/// ORs its options into the open session, and whichever guard ends first ends the session
/// for both; the other's end then has no effect.
#[derive(Debug)]
#[must_use = "the session stops when this guard is dropped"]
pub struct Session<'c, 's> {
    ctx: &'c Ctx<'s>,
}

impl Session<'_, '_> {
    /// The options of the context's open session (ORed over every start since it opened;
    /// none once any guard on the context ended it).
    pub fn options(&self) -> SessionOptions {
        // SAFETY: the context's handle is live while the borrow is.
        let s = unsafe { cctx::session(self.ctx.handle, "shmem::Session::options") };
        SessionOptions(s.and_then(|s| s.options()).unwrap_or(0))
    }

    /// The `total_ops` hint of the session (`usize::MAX` when none was given).
    pub fn total_ops(&self) -> usize {
        // SAFETY: as above.
        let s = unsafe { cctx::session(self.ctx.handle, "shmem::Session::total_ops") };
        s.map_or(usize::MAX, |s| s.total_ops())
    }

    /// `shmem_ctx_session_stop` (OpenSHMEM 1.6 §9.9.3): ends the session and sends what it
    /// held (the same as dropping the guard).
    pub fn stop(self) {}
}

impl Drop for Session<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: the context's handle is live while the borrow is.
        unsafe { cctx::session_stop(self.ctx.handle, "shmem::Session::stop") }
    }
}

/// A communication context; see the [API overview](crate::api).
#[derive(Debug)]
pub struct Ctx<'s> {
    handle: CtxRef,
    owned: bool,
    _shmem: PhantomData<&'s ()>,
}

impl<'s> Ctx<'s> {
    pub(crate) fn predefined(handle: CtxRef) -> Ctx<'s> {
        Ctx {
            handle,
            owned: false,
            _shmem: PhantomData,
        }
    }

    pub(crate) fn create(
        team: crate::team::RawTeam,
        options: CtxOptions,
    ) -> Result<Ctx<'s>, Error> {
        let mut raw: cctx::RawCtx = std::ptr::null();
        // SAFETY: `raw` is a valid out-pointer; `team` is a handle from the library.
        let rc = unsafe { cctx::create(team, options.0, &mut raw, "shmem::Team::create_ctx") };
        if rc != 0 {
            return Err(Error::new(
                ErrorKind::Context,
                "shmem::Team::create_ctx: no context available (all node contexts in use, \
                 invalid options, or this PE is not in the team)",
            ));
        }
        Ok(Ctx {
            handle: CtxRef(raw),
            owned: true,
            _shmem: PhantomData,
        })
    }

    /// The C handle (`shmem_ctx_t`).
    pub fn as_raw(&self) -> *const std::ffi::c_void {
        self.handle.0
    }

    /// The options the context was created with.
    pub fn options(&self) -> CtxOptions {
        // SAFETY: the handle is live while `self` is.
        CtxOptions(unsafe { cctx::options(self.handle, "shmem::Ctx::options") })
    }

    /// `shmem_put` (OpenSHMEM 1.5 §9.6.1): copies `src` to the start of `dest` on `pe`;
    /// returns when `src` may be reused (delivery: [`Ctx::quiet`] or a barrier).
    ///
    /// # Panics
    ///
    /// If `src` is longer than `dest`.
    pub fn put<'a, T: Symmetric>(&self, dest: impl Into<SymSlice<'a, T>>, src: &[T], pe: usize) {
        const CALL: &str = "shmem::Ctx::put";
        let dest = fits(dest.into(), src.len(), CALL);
        // SAFETY: `src` is a live slice; `dest` is a symmetric object of at least `src.len()`
        // elements; the handle is live while `self` is.
        unsafe {
            bytes::put(
                self.handle,
                dest.cast(),
                src.as_ptr().cast(),
                size_of_val(src),
                c_pe(pe),
                false,
                CALL,
            )
        }
    }

    /// `shmem_put_nbi` (OpenSHMEM 1.5 §9.6.7): starts the put; complete at quiet. A source
    /// in ordinary memory may be reused at once (what is not sent yet is copied); one that
    /// lies in symmetric memory (an unsafe slice of a [`SymVec`](super::SymVec)) is, over
    /// verbs, read by the NIC until quiet, as the specification allows: change it only
    /// after quiet.
    ///
    /// # Panics
    ///
    /// If `src` is longer than `dest`.
    pub fn put_nbi<'a, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: &[T],
        pe: usize,
    ) {
        const CALL: &str = "shmem::Ctx::put_nbi";
        let dest = fits(dest.into(), src.len(), CALL);
        // SAFETY: as in `put`; the node client copies unsent data, so `src` is not used
        // after the call.
        unsafe {
            bytes::put(
                self.handle,
                dest.cast(),
                src.as_ptr().cast(),
                size_of_val(src),
                c_pe(pe),
                true,
                CALL,
            )
        }
    }

    /// `shmem_get` (OpenSHMEM 1.5 §9.6.4): fills `dest` from the start of `src` on `pe`.
    ///
    /// # Panics
    ///
    /// If `dest` is longer than `src`.
    pub fn get<'a, T: Symmetric>(
        &self,
        src: impl Into<SymSlice<'a, T>>,
        dest: &mut [T],
        pe: usize,
    ) {
        const CALL: &str = "shmem::Ctx::get";
        let src = fits(src.into(), dest.len(), CALL);
        // SAFETY: `dest` is exclusively borrowed for the call; `src` is symmetric and long
        // enough.
        unsafe {
            bytes::get(
                self.handle,
                dest.as_mut_ptr().cast(),
                src.cast(),
                size_of_val(dest),
                c_pe(pe),
                false,
                CALL,
            )
        }
    }

    /// `shmem_p` (OpenSHMEM 1.5 §9.6.2): writes one element.
    ///
    /// # Panics
    ///
    /// If `dest` is empty.
    pub fn p<'a, T: Symmetric>(&self, dest: impl Into<SymSlice<'a, T>>, value: T, pe: usize) {
        const CALL: &str = "shmem::Ctx::p";
        let dest = dest.into().first(CALL);
        // SAFETY: `dest` is the first element of a symmetric object; `value` is a local.
        unsafe {
            bytes::put(
                self.handle,
                dest.cast(),
                (&raw const value).cast(),
                size_of::<T>(),
                c_pe(pe),
                false,
                CALL,
            )
        }
    }

    /// `shmem_g` (OpenSHMEM 1.5 §9.6.5): reads one element.
    ///
    /// # Panics
    ///
    /// If `src` is empty.
    pub fn g<'a, T: Symmetric>(&self, src: impl Into<SymSlice<'a, T>>, pe: usize) -> T {
        const CALL: &str = "shmem::Ctx::g";
        let src = src.into().first(CALL);
        let mut v = std::mem::MaybeUninit::<T>::uninit();
        // SAFETY: `src` is the first element of a symmetric object; the get writes every
        // byte of `v`, and `T` is plain data.
        unsafe {
            bytes::get(
                self.handle,
                v.as_mut_ptr().cast(),
                src.cast(),
                size_of::<T>(),
                c_pe(pe),
                false,
                CALL,
            );
            v.assume_init()
        }
    }

    /// `shmem_iput` (OpenSHMEM 1.5 §9.6.3): `nelems` elements from `src` (every `sst`-th)
    /// to `dest` on `pe` (every `dst`-th). Strides count elements and are at least 1.
    ///
    /// # Panics
    ///
    /// If a stride is 0 or either strided range exceeds its object.
    pub fn iput<'a, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        dst: usize,
        src: &[T],
        sst: usize,
        nelems: usize,
        pe: usize,
    ) {
        const CALL: &str = "shmem::Ctx::iput";
        let dest = dest.into();
        blocks_fit(dest.len(), dst, 1, nelems, "destination", CALL);
        blocks_fit(src.len(), sst, 1, nelems, "source", CALL);
        // SAFETY: both strided ranges were checked against their objects.
        unsafe {
            rma::iput(
                self.handle,
                dest.as_ptr().cast_mut().cast(),
                src.as_ptr().cast(),
                dst as isize,
                sst as isize,
                size_of::<T>(),
                nelems,
                c_pe(pe),
                CALL,
            )
        }
    }

    /// `shmem_iget` (OpenSHMEM 1.5 §9.6.6): `nelems` elements from `src` on `pe` (every
    /// `sst`-th) into `dest` (every `dst`-th).
    ///
    /// # Panics
    ///
    /// If a stride is 0 or either strided range exceeds its object.
    pub fn iget<'a, T: Symmetric>(
        &self,
        src: impl Into<SymSlice<'a, T>>,
        sst: usize,
        dest: &mut [T],
        dst: usize,
        nelems: usize,
        pe: usize,
    ) {
        const CALL: &str = "shmem::Ctx::iget";
        let src = src.into();
        blocks_fit(src.len(), sst, 1, nelems, "source", CALL);
        blocks_fit(dest.len(), dst, 1, nelems, "destination", CALL);
        // SAFETY: both strided ranges were checked; `dest` is exclusively borrowed.
        unsafe {
            rma::iget(
                self.handle,
                dest.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                dst as isize,
                sst as isize,
                size_of::<T>(),
                nelems,
                c_pe(pe),
                CALL,
            )
        }
    }

    /// `shmem_ibput` (OpenSHMEM 1.6 §9.6.1.4): `nblocks` blocks of `bsize` elements from
    /// `src` (block starts `sst` elements apart) to `dest` on `pe` (block starts `dst`
    /// elements apart); returns when `src` may be reused. [`Ctx::iput`] is the case
    /// `bsize = 1`. To a same-node PE each block is one copy; to another node, one request
    /// per block (one for all when the destination blocks are contiguous).
    ///
    /// # Panics
    ///
    /// If a stride is below `bsize` (or 0), or the blocks exceed their object.
    #[allow(clippy::too_many_arguments)]
    pub fn ibput<'a, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        dst: usize,
        src: &[T],
        sst: usize,
        bsize: usize,
        nblocks: usize,
        pe: usize,
    ) {
        const CALL: &str = "shmem::Ctx::ibput";
        let dest = dest.into();
        blocks_fit(dest.len(), dst, bsize, nblocks, "destination", CALL);
        blocks_fit(src.len(), sst, bsize, nblocks, "source", CALL);
        // SAFETY: both block ranges were checked against their objects.
        unsafe {
            rma::ibput(
                self.handle,
                dest.as_ptr().cast_mut().cast(),
                src.as_ptr().cast(),
                dst as isize,
                sst as isize,
                size_of::<T>(),
                bsize,
                nblocks,
                c_pe(pe),
                CALL,
            )
        }
    }

    /// `shmem_ibget` (OpenSHMEM 1.6, SHMEM_IBGET): `nblocks` blocks of `bsize` elements
    /// from `src` on `pe` (block starts `sst` elements apart) into `dest` (block starts
    /// `dst` elements apart). [`Ctx::iget`] is the case `bsize = 1`.
    ///
    /// # Panics
    ///
    /// If a stride is below `bsize` (or 0), or the blocks exceed their object.
    #[allow(clippy::too_many_arguments)]
    pub fn ibget<'a, T: Symmetric>(
        &self,
        src: impl Into<SymSlice<'a, T>>,
        sst: usize,
        dest: &mut [T],
        dst: usize,
        bsize: usize,
        nblocks: usize,
        pe: usize,
    ) {
        const CALL: &str = "shmem::Ctx::ibget";
        let src = src.into();
        blocks_fit(src.len(), sst, bsize, nblocks, "source", CALL);
        blocks_fit(dest.len(), dst, bsize, nblocks, "destination", CALL);
        // SAFETY: both block ranges were checked; `dest` is exclusively borrowed.
        unsafe {
            rma::ibget(
                self.handle,
                dest.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                dst as isize,
                sst as isize,
                size_of::<T>(),
                bsize,
                nblocks,
                c_pe(pe),
                CALL,
            )
        }
    }

    /// `shmem_get_nbi` (OpenSHMEM 1.5 §9.6.8) without a scope: `dest` is filled by the next
    /// quiet of this context. Prefer [`Ctx::nbi`].
    ///
    /// # Safety
    ///
    /// `dest` must stay valid for `len` writes and must not be accessed until
    /// [`Ctx::quiet`] on this context returns.
    ///
    /// # Panics
    ///
    /// If `len` exceeds `src`.
    pub unsafe fn get_nbi_raw<'a, T: Symmetric>(
        &self,
        src: impl Into<SymSlice<'a, T>>,
        dest: *mut T,
        len: usize,
        pe: usize,
    ) {
        const CALL: &str = "shmem::Ctx::get_nbi_raw";
        let src = fits(src.into(), len, CALL);
        // SAFETY: the caller keeps `dest` valid until quiet.
        unsafe {
            bytes::get(
                self.handle,
                dest.cast(),
                src.cast(),
                len * size_of::<T>(),
                c_pe(pe),
                true,
                CALL,
            )
        }
    }

    /// Runs `f` with a scope for non-blocking reads and fetching AMOs whose destinations are
    /// borrowed until the scope ends; quiets this context before returning (also when `f`
    /// panics), so every destination is filled when `nbi` returns.
    pub fn nbi<'b, R>(&self, f: impl FnOnce(&Nbi<'_, 'b>) -> R) -> R {
        struct QuietOnDrop(CtxRef);
        impl Drop for QuietOnDrop {
            fn drop(&mut self) {
                // SAFETY: the handle is live while the borrowed context is.
                unsafe { cctx::quiet(self.0, "shmem::Ctx::nbi") };
            }
        }
        let guard = QuietOnDrop(self.handle);
        let scope = Nbi {
            ctx: self.handle,
            _dest: PhantomData,
            _ctx: PhantomData,
        };
        let r = f(&scope);
        drop(guard);
        r
    }

    /// `shmem_put_signal` (OpenSHMEM 1.5 §9.8.1): puts `src` into `dest` on `pe`, then
    /// updates the signal word `sig` on `pe` with `op` and `signal` once the data is
    /// delivered. Returns when `src` may be reused.
    ///
    /// # Panics
    ///
    /// If `src` is longer than `dest` or `sig` is empty.
    pub fn put_signal<'a, 'g, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: &[T],
        sig: impl Into<SymSlice<'g, u64>>,
        signal: u64,
        op: SignalOp,
        pe: usize,
    ) {
        self.put_signal_impl(dest.into(), src, sig.into(), signal, op, pe, false)
    }

    /// `shmem_put_signal_nbi` (OpenSHMEM 1.5 §9.8.1): as [`Ctx::put_signal`], complete at
    /// quiet; the source may be reused at once.
    ///
    /// # Panics
    ///
    /// As [`Ctx::put_signal`].
    pub fn put_signal_nbi<'a, 'g, T: Symmetric>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        src: &[T],
        sig: impl Into<SymSlice<'g, u64>>,
        signal: u64,
        op: SignalOp,
        pe: usize,
    ) {
        self.put_signal_impl(dest.into(), src, sig.into(), signal, op, pe, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn put_signal_impl<T: Symmetric>(
        &self,
        dest: SymSlice<'_, T>,
        src: &[T],
        sig: SymSlice<'_, u64>,
        signal: u64,
        op: SignalOp,
        pe: usize,
        nbi: bool,
    ) {
        const CALL: &str = "shmem::Ctx::put_signal";
        let dest = fits(dest, src.len(), CALL);
        let sig = sig.first(CALL);
        // SAFETY: `src` is live; `dest` and `sig` are symmetric objects of sufficient size.
        unsafe {
            rma::put_signal(
                self.handle,
                dest.cast(),
                src.as_ptr().cast(),
                size_of_val(src),
                sig,
                signal,
                op.to_c(),
                c_pe(pe),
                nbi,
                CALL,
            )
        }
    }

    /// `shmem_ctx_signal_add` (OpenSHMEM 1.6 §9.8.5): adds `value` to the signal word
    /// `sig` on `pe`, atomically with respect to the other signal updates and reads.
    ///
    /// # Panics
    ///
    /// If `sig` is empty.
    pub fn signal_add<'g>(&self, sig: impl Into<SymSlice<'g, u64>>, value: u64, pe: usize) {
        self.signal_update(
            sig.into(),
            value,
            SignalOp::Add,
            pe,
            "shmem::Ctx::signal_add",
        )
    }

    /// `shmem_ctx_signal_set` (OpenSHMEM 1.6 §9.8.7): stores `value` into the signal word
    /// `sig` on `pe`, atomically with respect to the other signal updates and reads.
    ///
    /// # Panics
    ///
    /// If `sig` is empty.
    pub fn signal_set<'g>(&self, sig: impl Into<SymSlice<'g, u64>>, value: u64, pe: usize) {
        self.signal_update(
            sig.into(),
            value,
            SignalOp::Set,
            pe,
            "shmem::Ctx::signal_set",
        )
    }

    fn signal_update(
        &self,
        sig: SymSlice<'_, u64>,
        value: u64,
        op: SignalOp,
        pe: usize,
        call: &'static str,
    ) {
        let sig = sig.first(call);
        // SAFETY: `sig` is a symmetric u64 (a put-with-signal without data).
        unsafe {
            rma::put_signal(
                self.handle,
                std::ptr::null_mut(),
                std::ptr::null(),
                0,
                sig,
                value,
                op.to_c(),
                c_pe(pe),
                false,
                call,
            )
        }
    }

    /// `shmem_ctx_pe_quiet` (OpenSHMEM 1.6 §9.12.3): completes this context's operations
    /// to the PEs `pes` (numbered in the context's team). Same-node PEs whose memory this
    /// PE maps need only a memory fence; any other PE in the list quiets the context whole.
    pub fn pe_quiet(&self, pes: &[usize]) {
        const CALL: &str = "shmem::Ctx::pe_quiet";
        let pes: Vec<std::ffi::c_int> = pes.iter().map(|&p| c_pe(p)).collect();
        // SAFETY: the handle is live while `self` is; `pes` is readable for its length.
        unsafe { cctx::pe_quiet(self.handle, pes.as_ptr(), pes.len(), CALL) }
    }

    /// `shmem_ctx_session_start` (OpenSHMEM 1.6 §9.9.2): opens a session on this context
    /// with `options` and, if given, the `total_ops` hint; the session ends when the
    /// returned guard is dropped. Sessions change no result, completion or ordering. With
    /// [`SessionOptions::BATCH`], gsas lets a blocking put to a PE of another node wait in
    /// its open frame for the next operation that sends (as non-blocking puts do), so that
    /// a loop of small puts shares frames; the guard's end sends what waits. `total_ops`
    /// is recorded, not used.
    pub fn session(&self, options: SessionOptions, total_ops: Option<usize>) -> Session<'_, 's> {
        const CALL: &str = "shmem::Ctx::session";
        let config = cctx::SessionConfig {
            total_ops: total_ops.unwrap_or(usize::MAX),
        };
        let mask = if total_ops.is_some() {
            cctx::SESSION_TOTAL_OPS
        } else {
            0
        };
        // SAFETY: the handle is live while `self` is; `config` is a readable local.
        unsafe { cctx::session_start(self.handle, options.0, &config, mask, CALL) };
        Session { ctx: self }
    }

    /// `shmem_ctx_fence` (OpenSHMEM 1.5 §9.11.1): orders the delivery of earlier puts,
    /// AMOs and signals of this context before later ones, per PE.
    pub fn fence(&self) {
        // SAFETY: the handle is live while `self` is.
        unsafe { cctx::fence(self.handle, "shmem::Ctx::fence") }
    }

    /// `shmem_ctx_quiet` (OpenSHMEM 1.5 §9.11.2): completes every operation of this
    /// context (puts delivered, non-blocking reads and fetches written).
    pub fn quiet(&self) {
        // SAFETY: the handle is live while `self` is.
        unsafe { cctx::quiet(self.handle, "shmem::Ctx::quiet") }
    }

    fn amo<'a, T: Scalar>(
        &self,
        op: AtomicOp,
        dest: SymSlice<'a, T>,
        operand: T,
        comparand: T,
        pe: usize,
        call: &'static str,
    ) -> T {
        let dest = dest.first(call);
        // SAFETY: `dest` is the first element of a symmetric object; the handle is live.
        T::from_bits(unsafe {
            bytes::amo(
                self.handle,
                op,
                T::KIND.atomic(),
                dest.cast(),
                operand.to_bits(),
                comparand.to_bits(),
                c_pe(pe),
                call,
            )
        })
    }

    /// `shmem_atomic_fetch` (OpenSHMEM 1.5 §9.7.1).
    pub fn atomic_fetch<'a, T: AmoExtended>(
        &self,
        src: impl Into<SymSlice<'a, T>>,
        pe: usize,
    ) -> T {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::Fetch,
            src.into(),
            z,
            z,
            pe,
            "shmem::Ctx::atomic_fetch",
        )
    }

    /// `shmem_atomic_set` (OpenSHMEM 1.5 §9.7.2); complete at quiet.
    pub fn atomic_set<'a, T: AmoExtended>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::Set,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_set",
        );
    }

    /// `shmem_atomic_compare_swap` (OpenSHMEM 1.5 §9.7.3): stores `value` if the target
    /// equals `cond`; returns the old value.
    pub fn atomic_compare_swap<'a, T: AmoStandard>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        cond: T,
        value: T,
        pe: usize,
    ) -> T {
        self.amo(
            AtomicOp::CompareSwap,
            dest.into(),
            value,
            cond,
            pe,
            "shmem::Ctx::atomic_compare_swap",
        )
    }

    /// `shmem_atomic_swap` (OpenSHMEM 1.5 §9.7.4).
    pub fn atomic_swap<'a, T: AmoExtended>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) -> T {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::Swap,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_swap",
        )
    }

    /// `shmem_atomic_fetch_inc` (OpenSHMEM 1.5 §9.7.5).
    pub fn atomic_fetch_inc<'a, T: AmoStandard>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        pe: usize,
    ) -> T {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::FetchInc,
            dest.into(),
            z,
            z,
            pe,
            "shmem::Ctx::atomic_fetch_inc",
        )
    }

    /// `shmem_atomic_inc` (OpenSHMEM 1.5 §9.7.6); complete at quiet.
    pub fn atomic_inc<'a, T: AmoStandard>(&self, dest: impl Into<SymSlice<'a, T>>, pe: usize) {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::Inc,
            dest.into(),
            z,
            z,
            pe,
            "shmem::Ctx::atomic_inc",
        );
    }

    /// `shmem_atomic_fetch_add` (OpenSHMEM 1.5 §9.7.7).
    pub fn atomic_fetch_add<'a, T: AmoStandard>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) -> T {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::FetchAdd,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_fetch_add",
        )
    }

    /// `shmem_atomic_add` (OpenSHMEM 1.5 §9.7.8); complete at quiet.
    pub fn atomic_add<'a, T: AmoStandard>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::Add,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_add",
        );
    }

    /// `shmem_atomic_fetch_and` (OpenSHMEM 1.5 §9.7.9).
    pub fn atomic_fetch_and<'a, T: AmoBitwise>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) -> T {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::FetchAnd,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_fetch_and",
        )
    }

    /// `shmem_atomic_and` (OpenSHMEM 1.5 §9.7.10); complete at quiet.
    pub fn atomic_and<'a, T: AmoBitwise>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::And,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_and",
        );
    }

    /// `shmem_atomic_fetch_or` (OpenSHMEM 1.5 §9.7.11).
    pub fn atomic_fetch_or<'a, T: AmoBitwise>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) -> T {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::FetchOr,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_fetch_or",
        )
    }

    /// `shmem_atomic_or` (OpenSHMEM 1.5 §9.7.12); complete at quiet.
    pub fn atomic_or<'a, T: AmoBitwise>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::Or,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_or",
        );
    }

    /// `shmem_atomic_fetch_xor` (OpenSHMEM 1.5 §9.7.13).
    pub fn atomic_fetch_xor<'a, T: AmoBitwise>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) -> T {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::FetchXor,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_fetch_xor",
        )
    }

    /// `shmem_atomic_xor` (OpenSHMEM 1.5 §9.7.14); complete at quiet.
    pub fn atomic_xor<'a, T: AmoBitwise>(
        &self,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.amo(
            AtomicOp::Xor,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Ctx::atomic_xor",
        );
    }

    /// `shmem_ctx_get_team` (OpenSHMEM 1.5 §9.5.4): the context's team.
    pub fn team(&self) -> super::Team<'s> {
        let mut raw: crate::team::RawTeam = std::ptr::null();
        // SAFETY: `raw` is a valid out-pointer; the handle is live.
        unsafe { cctx::get_team(self.handle, &mut raw, "shmem::Ctx::team") };
        super::Team::predefined(raw)
    }
}

impl Drop for Ctx<'_> {
    /// `shmem_ctx_destroy` (OpenSHMEM 1.5 §9.5.3) of a created context: quiet, then free.
    fn drop(&mut self) {
        if self.owned && crate::state::is_running() {
            // SAFETY: the handle was created by this object and is not used afterwards.
            unsafe { cctx::destroy(self.handle, "shmem::Ctx::drop") }
        }
    }
}

/// `dest` has room for `n` elements; returns its first element's address.
fn fits<T>(s: SymSlice<'_, T>, n: usize, call: &str) -> *mut T {
    assert!(
        n <= s.len(),
        "{call}: {n} elements do not fit a symmetric slice of {}",
        s.len()
    );
    s.as_ptr().cast_mut()
}

/// Checks `nblocks` blocks of `bsize` elements whose starts are `stride` elements apart
/// (`iput`/`iget`: blocks of 1) against an object of `len` elements: the stride is at least
/// `bsize` and at least 1, and the last block ends within the object.
fn blocks_fit(len: usize, stride: usize, bsize: usize, nblocks: usize, which: &str, call: &str) {
    let least = bsize.max(1);
    assert!(
        stride >= least,
        "{call}: the {which} stride {stride} must be at least {least}"
    );
    assert!(
        isize::try_from(stride).is_ok(),
        "{call}: the {which} stride {stride} does not fit a ptrdiff_t"
    );
    if nblocks > 0 && bsize > 0 {
        let end = (nblocks - 1)
            .checked_mul(stride)
            .and_then(|l| l.checked_add(bsize));
        assert!(
            end.is_some_and(|e| e <= len),
            "{call}: {nblocks} blocks of {bsize} with stride {stride} exceed the {which} of \
             {len} elements"
        );
    }
}

/// A scope of non-blocking reads and fetching AMOs; see [`Ctx::nbi`]. Destinations are
/// borrowed for `'b`, which outlives the scope.
pub struct Nbi<'c, 'b> {
    ctx: CtxRef,
    // Invariant in 'b: destinations cannot be shortened to the closure's lifetime.
    _dest: PhantomData<fn(&'b mut ()) -> &'b mut ()>,
    _ctx: PhantomData<&'c ()>,
}

impl std::fmt::Debug for Nbi<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nbi").field("ctx", &self.ctx).finish()
    }
}

impl<'b> Nbi<'_, 'b> {
    /// `shmem_get_nbi` (OpenSHMEM 1.5 §9.6.8): fills `dest` from `src` on `pe` by the end
    /// of the scope.
    ///
    /// # Panics
    ///
    /// If `dest` is longer than `src`.
    pub fn get<'a, T: Symmetric>(
        &self,
        src: impl Into<SymSlice<'a, T>>,
        dest: &'b mut [T],
        pe: usize,
    ) {
        const CALL: &str = "shmem::Nbi::get";
        let src = fits(src.into(), dest.len(), CALL);
        // SAFETY: `dest` stays borrowed until the scope's quiet has completed the read.
        unsafe {
            bytes::get(
                self.ctx,
                dest.as_mut_ptr().cast(),
                src.cast(),
                size_of_val(dest),
                c_pe(pe),
                true,
                CALL,
            )
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn fetch<'a, T: Scalar>(
        &self,
        op: AtomicOp,
        fetch: &'b mut T,
        dest: SymSlice<'a, T>,
        operand: T,
        comparand: T,
        pe: usize,
        call: &'static str,
    ) {
        let dest = dest.first(call);
        // SAFETY: `fetch` stays borrowed until the scope's quiet wrote it; `dest` is the first
        // element of a symmetric object.
        unsafe {
            bytes::amo_nbi(
                self.ctx,
                op,
                T::KIND.atomic(),
                (fetch as *mut T).cast(),
                dest.cast(),
                operand.to_bits(),
                comparand.to_bits(),
                c_pe(pe),
                call,
            )
        }
    }

    /// `shmem_atomic_fetch_nbi` (OpenSHMEM 1.5 §9.7.1).
    pub fn atomic_fetch<'a, T: AmoExtended>(
        &self,
        fetch: &'b mut T,
        src: impl Into<SymSlice<'a, T>>,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.fetch(
            AtomicOp::Fetch,
            fetch,
            src.into(),
            z,
            z,
            pe,
            "shmem::Nbi::atomic_fetch",
        )
    }

    /// `shmem_atomic_swap_nbi` (OpenSHMEM 1.5 §9.7.4).
    pub fn atomic_swap<'a, T: AmoExtended>(
        &self,
        fetch: &'b mut T,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.fetch(
            AtomicOp::Swap,
            fetch,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Nbi::atomic_swap",
        )
    }

    /// `shmem_atomic_compare_swap_nbi` (OpenSHMEM 1.5 §9.7.3).
    pub fn atomic_compare_swap<'a, T: AmoStandard>(
        &self,
        fetch: &'b mut T,
        dest: impl Into<SymSlice<'a, T>>,
        cond: T,
        value: T,
        pe: usize,
    ) {
        self.fetch(
            AtomicOp::CompareSwap,
            fetch,
            dest.into(),
            value,
            cond,
            pe,
            "shmem::Nbi::atomic_compare_swap",
        )
    }

    /// `shmem_atomic_fetch_inc_nbi` (OpenSHMEM 1.5 §9.7.5).
    pub fn atomic_fetch_inc<'a, T: AmoStandard>(
        &self,
        fetch: &'b mut T,
        dest: impl Into<SymSlice<'a, T>>,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.fetch(
            AtomicOp::FetchInc,
            fetch,
            dest.into(),
            z,
            z,
            pe,
            "shmem::Nbi::atomic_fetch_inc",
        )
    }

    /// `shmem_atomic_fetch_add_nbi` (OpenSHMEM 1.5 §9.7.7).
    pub fn atomic_fetch_add<'a, T: AmoStandard>(
        &self,
        fetch: &'b mut T,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.fetch(
            AtomicOp::FetchAdd,
            fetch,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Nbi::atomic_fetch_add",
        )
    }

    /// `shmem_atomic_fetch_and_nbi` (OpenSHMEM 1.5 §9.7.9).
    pub fn atomic_fetch_and<'a, T: AmoBitwise>(
        &self,
        fetch: &'b mut T,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.fetch(
            AtomicOp::FetchAnd,
            fetch,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Nbi::atomic_fetch_and",
        )
    }

    /// `shmem_atomic_fetch_or_nbi` (OpenSHMEM 1.5 §9.7.11).
    pub fn atomic_fetch_or<'a, T: AmoBitwise>(
        &self,
        fetch: &'b mut T,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.fetch(
            AtomicOp::FetchOr,
            fetch,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Nbi::atomic_fetch_or",
        )
    }

    /// `shmem_atomic_fetch_xor_nbi` (OpenSHMEM 1.5 §9.7.13).
    pub fn atomic_fetch_xor<'a, T: AmoBitwise>(
        &self,
        fetch: &'b mut T,
        dest: impl Into<SymSlice<'a, T>>,
        value: T,
        pe: usize,
    ) {
        let z = T::from_bits(0);
        self.fetch(
            AtomicOp::FetchXor,
            fetch,
            dest.into(),
            value,
            z,
            pe,
            "shmem::Nbi::atomic_fetch_xor",
        )
    }
}
