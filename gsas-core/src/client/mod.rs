//! The client engine: issues requests to atomic services and matches their replies.
//!
//! Kept as one file because the client engine is one state machine (`Client` and its
//! operation table); its tests are apart in `client/tests.rs`.
//!
//! **What it is.** [`Client`] keeps a fixed-capacity table of operations in flight (reads,
//! writes, atomics and host requests), turns each into packets sized for the transport
//! (inline or fragmented bulk), matches replies by token, reassembles bulk reads delivered
//! in any order and reports completions. Outstanding operations are counted per context,
//! so `quiet` on a context is a wait for [`Client::outstanding`] to reach 0.
//!
//! **What it is not.** It owns no transport, no clock and no destination memory: packets
//! go out through a `&mut T: Transport` passed to each call (static dispatch), replies come
//! in through [`Client::handle_reply`], and read data is handed to a callback with the
//! caller's `u64` tag and the offset within the operation (the std layer puts a destination
//! address in the tag; the core never dereferences it). Timeouts belong to the caller:
//! [`Client::abort`] and [`Client::fail_peer`] end operations that will not be answered.
//!
//! **Thread safety.** A plain value mutated through `&mut self`; `Send` if the peer type is.
//! One client per thread, or a lock around it.
//!
//! # Packets chosen
//!
//! | operation | when | packets |
//! |---|---|---|
//! | read | `len <= 56` and `8 + len <= max_inline` | one READ, answered by DATA |
//! | read | otherwise | BULK_READ per fragment of up to `F(mtu - 32)` bytes, each answered by one BULK_DATA (`32 + fragment <= mtu`) |
//! | write | `32 + len <= max_inline` | one WRITE, answered by ACK |
//! | write | otherwise | BULK_WRITE per fragment of up to `F(mtu - 32)` bytes, each answered by ACK |
//! | write with signal | `48 + len <= max_inline` | one WRITE carrying the signal, answered by ACK |
//! | write with signal | otherwise | BULK_WRITE per fragment of up to `F(mtu - 48)` bytes; the final one carries the signal and is sent only once every other fragment is acknowledged |
//! | atomic | always | one ATOMIC (40 bytes for compare-swap), answered by DATA (fetching) or ACK |
//! | host request | ALLOC, FREE, CONTROL | one request, answered by ACK, DATA or ERROR |
//! | host request | FORK | fragments of `F(mtu - 32)` bytes, each answered by one reply |
//!
//! `F(n)` is `n` rounded down to a multiple of [`GRANULE`] (64 bytes): a transport whose
//! MTU leaves less than one granule after the header cannot carry bulk transfers
//! ([`ClientError::TransportTooSmall`]). The fragments of a read or write are cut at target
//! addresses that are multiples of the granule: the first fragment is shorter by the
//! target offset's remainder modulo 64 (`offset % 64`), every later one is `F` bytes long
//! (the last one what is left), so that a naturally aligned element is never split between
//! two packets (wire docs, "Fragment boundaries"). For example over UDP with the default
//! `udp_mtu` of 61440 (a transport MTU of 61382 after the UDP and frame headers), `F` is
//! 61312 bytes with or without a signal, and a 128 KiB write to offset 0 goes out as
//! fragments of 61312, 61312 and 8448 bytes; with `udp_mtu = 1472`, `F` is 1344 bytes.
//! FORK fragments carry no memory and start at offset 0 (`F` bytes each).
//!
//! # Tokens and generations
//!
//! A token is `generation << INDEX_BITS | (slot index + 1)`, where `INDEX_BITS` is the
//! number of bits of `N` (so token 0 is never valid) and the generation takes the other
//! bits. Every packet sent from a slot gets the next generation of that slot, so each
//! fragment of a bulk operation has its own token and a reply names exactly one fragment.
//! A reply whose slot is free, whose generation does not belong to the operation now in the
//! slot, or whose fragment was answered already (a duplicate) is ignored and counted in
//! [`ClientStats::stale`]. Generations wrap after `2^(32 - INDEX_BITS)` packets per slot
//! (at least 65536), which bounds how late a stale reply can still be recognised.
//!
//! # Back-pressure and resumption
//!
//! Nothing spins. An operation is started only if a table slot is free
//! ([`ClientError::Busy`] otherwise) and its first packet got a transport slot
//! ([`ClientError::WouldBlock`] otherwise; nothing is left behind). A multi-fragment
//! operation sends fragments until the transport reports `WouldBlock` or
//! [`WINDOW`] fragments are unanswered; [`Issued::all_sent`] tells whether everything went
//! out. Continue with [`Client::resume`] (with the same payload for writes; fragments
//! already sent are not sent again), or [`Client::pump`] for every read that has fragments
//! left. A blocking put therefore reaches local completion (all data copied into transport
//! slots) over several calls, polling replies in between. A bulk write with a signal
//! ([`Client::write_signal`]) also holds its final fragment, which carries the signal,
//! until every other fragment is answered: resume it after handling replies.
//!
//! # Completions
//!
//! [`Client::handle_reply`] delivers [`Completion::Data`] for every piece of read data (and
//! host reply payloads) and one [`Completion::Done`] when an operation is answered in full:
//! then its token is freed and its context counter decremented. After an error reply the
//! operation stops sending and completes once the fragments already sent are answered,
//! with the first error.
//!
//! # Example
//!
//! ```
//! use gsas_core::client::{Client, Completion};
//! use gsas_core::transport::{Capabilities, Ordering, Transport, TransportError};
//! use gsas_core::wire::{GlobalAddr, ReplyRepr, Reply, SenderId};
//!
//! /// Captures one packet.
//! struct Capture(Vec<u8>);
//! impl Transport for Capture {
//!     type Peer = u16;
//!     fn capabilities(&self) -> Capabilities {
//!         Capabilities { max_inline: 64, mtu: 4096, ordering: Ordering::PerPeer, reliable: true,
//!             rdma_put: false, rdma_get: false, atomic_offload: false, atomics_coherent_with_cpu: false }
//!     }
//!     fn send<R, F: FnOnce(&mut [u8]) -> R>(&mut self, _: u16, len: usize, fill: F) -> Result<R, TransportError> {
//!         self.0 = vec![0; len];
//!         Ok(fill(&mut self.0))
//!     }
//!     fn recv<R, F: FnOnce(u16, &[u8]) -> R>(&mut self, _: F) -> Result<Option<R>, TransportError> { Ok(None) }
//! }
//!
//! let mut net = Capture(Vec::new());
//! let mut client: Client<u16, 16, 1> = Client::new(SenderId::new(5).unwrap());
//! let addr = GlobalAddr::new(1, 0, 64).unwrap();
//! client.read(&mut net, 1, 0, 0xbeef, addr, 4).unwrap();
//! assert_eq!(client.outstanding(0), 1);
//! let token = u32::from_le_bytes(net.0[24..28].try_into().unwrap());
//! let mut reply = [0u8; 12];
//! ReplyRepr { token, body: Reply::Data(&[1, 2, 3, 4]) }.emit(&mut reply);
//! let mut got = Vec::new();
//! client.handle_reply(&reply, |c| if let Completion::Data { tag, data, .. } = c { got.push((tag, data.to_vec())) });
//! assert_eq!(got, [(0xbeef, vec![1, 2, 3, 4])]);
//! assert_eq!(client.outstanding(0), 0);
//! ```

use crate::transport::{Capabilities, Transport, TransportError};
use crate::wire::{
    AtomicDesc, ControlCode, ErrorCode, Fragment, GRANULE, GlobalAddr, HEADER_LEN, MAX_INLINE_DATA,
    Packet, REPLY_HEADER_LEN, Reply, ReplyRepr, Request, RequestRepr, SIGNAL_LEN, SenderId, Signal,
};

/// Most fragments of one operation that may be sent and unanswered at once.
pub const WINDOW: u32 = 64;
// The answered-fragment bitmap of an operation is one u64.
const _: () = assert!(WINDOW <= 64);

/// What kind of operation completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum OpKind {
    /// A read (READ or BULK_READ).
    Read,
    /// A write (WRITE or BULK_WRITE).
    Write,
    /// An atomic.
    Atomic,
    /// A host request (ALLOC, FREE, CONTROL, FORK).
    Host,
}

/// Why an operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum OpError {
    /// The target answered ERROR with this code.
    Remote(ErrorCode),
    /// The reply did not match the request (wrong type, length or fragment).
    BadReply,
    /// Ended by [`Client::abort`] or [`Client::fail_peer`].
    Aborted,
}

impl core::fmt::Display for OpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OpError::Remote(code) => write!(f, "refused by target: {code}"),
            OpError::BadReply => f.write_str("reply does not match the request"),
            OpError::Aborted => f.write_str("operation aborted"),
        }
    }
}

/// Why an operation could not be started or continued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ClientError {
    /// The operation table is full: handle replies, then retry.
    Busy,
    /// The transport had no slot for the first packet; nothing was started.
    WouldBlock,
    /// The context index is not below the client's context count.
    BadContext,
    /// A read or write of zero bytes.
    ZeroLength,
    /// Longer than one transfer can be (`u32::MAX` bytes).
    TooLarge,
    /// An atomic operand or comparand does not fit the datatype's width.
    BadOperand,
    /// The transport's MTU cannot carry a bulk header (and a signal block, for a write
    /// with a signal) and one [`GRANULE`] of data.
    TransportTooSmall,
    /// The handle names no pending operation (it completed or was aborted).
    StaleHandle,
    /// [`Client::resume`] got a payload whose length differs from the operation's.
    PayloadMismatch,
    /// The transport failed with an error other than `WouldBlock`, before any packet of
    /// this call was sent. A started operation stays pending: resume or abort it.
    Transport(TransportError),
}

impl core::fmt::Display for ClientError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ClientError::Busy => f.write_str("operation table full"),
            ClientError::WouldBlock => f.write_str("transport busy, nothing started"),
            ClientError::BadContext => f.write_str("context index out of range"),
            ClientError::ZeroLength => f.write_str("zero-length transfer"),
            ClientError::TooLarge => f.write_str("transfer longer than 4 GiB - 1"),
            ClientError::BadOperand => f.write_str("atomic operand wider than its datatype"),
            ClientError::TransportTooSmall => {
                f.write_str("transport MTU too small for a bulk fragment")
            }
            ClientError::StaleHandle => f.write_str("operation no longer pending"),
            ClientError::PayloadMismatch => {
                f.write_str("payload length differs from the operation's")
            }
            ClientError::Transport(e) => write!(f, "transport error: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ClientError {}

/// Names a pending operation (for [`Client::resume`], [`Client::abort`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OpHandle {
    index: u16,
    gen_base: u32,
}

/// Result of starting or resuming an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Issued {
    /// The operation.
    pub handle: OpHandle,
    /// Nothing is left to send: every packet has been handed to the transport (for a
    /// write: local completion, the source buffer may be reused), or the target refused a
    /// fragment and the operation stopped sending (its [`Completion::Done`] will carry the
    /// error).
    pub all_sent: bool,
    /// Packets sent by this call.
    pub packets: u32,
}

/// A host request (executed by the target's host, not its service engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HostRequest<'a> {
    /// ALLOC `size` bytes for the (PE, segment) named by `addr`.
    Alloc {
        /// Names the (PE, segment).
        addr: GlobalAddr,
        /// Size in bytes.
        size: u64,
    },
    /// FREE the (PE, segment) named by `addr`.
    Free {
        /// Names the (PE, segment).
        addr: GlobalAddr,
    },
    /// CONTROL message.
    Control {
        /// The control code.
        code: ControlCode,
        /// First argument.
        arg0: u64,
        /// Second argument.
        arg1: u64,
    },
    /// FORK with an opaque launch specification (fragmented like a bulk write; resume with
    /// the same `spec`).
    Fork {
        /// Host-defined address word.
        addr: GlobalAddr,
        /// The launch specification (>= 1 byte).
        spec: &'a [u8],
    },
}

/// Something [`Client::handle_reply`] (or [`Client::abort`]) reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Completion<'a> {
    /// Read data (or a host reply payload): `data` belongs at `offset` within the
    /// operation. Pieces of one bulk read arrive in any order.
    Data {
        /// The caller's tag.
        tag: u64,
        /// The operation's context.
        ctx: usize,
        /// Offset of `data` within the operation.
        offset: u32,
        /// The bytes.
        data: &'a [u8],
    },
    /// The operation is answered in full (or aborted); its token is free again.
    Done {
        /// The caller's tag.
        tag: u64,
        /// The operation's context.
        ctx: usize,
        /// What it was.
        kind: OpKind,
        /// `Ok(Some(old value))` for fetching atomics (32-bit values zero-extended),
        /// `Ok(None)` otherwise, or the first error.
        result: Result<Option<u64>, OpError>,
    },
}

/// What [`Client::handle_reply`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReplyOutcome {
    /// Matched a pending fragment; `completed` tells whether its operation finished.
    Matched {
        /// The operation completed with this reply.
        completed: bool,
    },
    /// Stale or duplicate: ignored (counted).
    Stale,
    /// Not a valid reply: ignored (counted).
    Malformed(crate::wire::Error),
}

/// Counters of the client engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ClientStats {
    /// Operations started.
    pub started: u64,
    /// Operations completed (including errors and aborts).
    pub completed: u64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Replies ignored as stale or duplicate.
    pub stale: u64,
    /// Packets ignored because they did not parse as replies.
    pub malformed: u64,
    /// Replies that did not match their request (the operation fails with
    /// [`OpError::BadReply`]).
    pub bad_replies: u64,
    /// ERROR replies received.
    pub remote_errors: u64,
}

/// How the packets of an operation are built.
#[derive(Clone, Copy, Debug)]
enum Shape {
    ReadInline,
    BulkRead,
    WriteInline,
    BulkWrite,
    Atomic {
        desc: AtomicDesc,
        operand: u64,
        comparand: u64,
    },
    Alloc {
        size: u64,
    },
    Free,
    Control {
        code: ControlCode,
        arg0: u64,
        arg1: u64,
    },
    Fork,
}

impl Shape {
    fn kind(self) -> OpKind {
        match self {
            Shape::ReadInline | Shape::BulkRead => OpKind::Read,
            Shape::WriteInline | Shape::BulkWrite => OpKind::Write,
            Shape::Atomic { .. } => OpKind::Atomic,
            Shape::Alloc { .. } | Shape::Free | Shape::Control { .. } | Shape::Fork => OpKind::Host,
        }
    }

    fn has_payload(self) -> bool {
        matches!(self, Shape::WriteInline | Shape::BulkWrite | Shape::Fork)
    }
}

#[derive(Clone, Copy, Debug)]
struct Op<P> {
    shape: Shape,
    peer: P,
    ctx: usize,
    tag: u64,
    addr: GlobalAddr,
    /// Bytes of the transfer (0 for atomics and fixed host requests).
    len: u32,
    /// Fragment size (a multiple of [`GRANULE`]); 0 for single-packet operations.
    frag: u32,
    /// Bytes the first fragment is short of `frag`: the target offset modulo [`GRANULE`]
    /// for reads and writes (so every later boundary lies on a multiple of the granule),
    /// 0 for FORK and single-packet operations. Always below `frag`.
    head: u32,
    nfrags: u32,
    gen_base: u32,
    /// Fragments sent.
    sent: u32,
    /// Lowest unanswered fragment.
    lo: u32,
    /// Answered fragments in `lo .. lo + 64` (bit i = fragment lo + i).
    answered: u64,
    error: Option<OpError>,
    fetched: Option<u64>,
    /// Counted in `Client::unsent_reads`.
    listed: bool,
    /// A write's attached signal, carried by its last packet.
    signal: Option<Signal>,
}

impl<P> Op<P> {
    /// Offset and length of fragment `k` (`k < nfrags`): fragment 0 is `frag - head` bytes,
    /// every later one starts at `k * frag - head`, so each boundary is a multiple of
    /// `frag` (and of [`GRANULE`]) in the target's address space.
    #[inline]
    fn fragment(&self, k: u32) -> (u32, u32) {
        if self.frag == 0 {
            return (0, self.len);
        }
        let (frag, head) = (u64::from(self.frag), u64::from(self.head));
        // `head < frag`, so fragment 0 starts at 0 and every later one after it; the sums
        // stay below `len + frag < 2^33` (u64).
        let start = (u64::from(k) * frag).saturating_sub(head);
        let end = ((u64::from(k) + 1) * frag - head).min(u64::from(self.len));
        (start as u32, (end - start) as u32)
    }

    /// Whether the next fragment may go out: no error, window open, and for a write with a
    /// signal, its final fragment only once every other one is answered (fragments may be
    /// delivered in any order; the signal must follow all of them).
    #[inline]
    fn may_send(&self) -> bool {
        self.error.is_none()
            && self.sent < self.nfrags
            && self.sent < self.lo + WINDOW
            && (self.signal.is_none() || self.sent + 1 < self.nfrags || self.lo == self.sent)
    }

    #[inline]
    fn finished(&self) -> bool {
        self.lo == self.sent && (self.sent == self.nfrags || self.error.is_some())
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot<P> {
    next_gen: u32,
    op: Option<Op<P>>,
}

/// The client engine for peers of type `P`, with room for `N` operations in flight
/// (`1..=65535`) and `C` contexts (at least 1).
#[derive(Debug)]
pub struct Client<P: Copy, const N: usize, const C: usize> {
    sender: SenderId,
    slots: [Slot<P>; N],
    free: heapless::Vec<u16, N>,
    outstanding: [u32; C],
    /// Pending operations without payload that still have fragments to send.
    unsent_reads: usize,
    stats: ClientStats,
}

impl<P: Copy + PartialEq, const N: usize, const C: usize> Client<P, N, C> {
    const INDEX_BITS: u32 = usize::BITS - N.leading_zeros();
    const INDEX_MASK: u32 = (1 << Self::INDEX_BITS) - 1;
    const GEN_MASK: u32 = u32::MAX >> Self::INDEX_BITS;

    /// An idle client that writes `sender` into every request.
    pub fn new(sender: SenderId) -> Self {
        const { assert!(N >= 1 && N <= 65535, "Client capacity N must be 1..=65535") };
        const { assert!(C >= 1, "Client needs at least one context") };
        let mut free = heapless::Vec::new();
        for i in (0..N).rev() {
            // N <= 65535 so the index fits and the vector has room for all of them.
            let _ = free.push(i as u16);
        }
        Client {
            sender,
            slots: core::array::from_fn(|_| Slot {
                next_gen: 0,
                op: None,
            }),
            free,
            outstanding: [0; C],
            unsent_reads: 0,
            stats: ClientStats::default(),
        }
    }

    /// Operations of context `ctx` not yet completed (0 for an invalid context).
    #[inline]
    pub fn outstanding(&self, ctx: usize) -> u32 {
        self.outstanding.get(ctx).copied().unwrap_or(0)
    }

    /// Operations in flight over all contexts.
    #[inline]
    pub fn in_flight(&self) -> usize {
        N - self.free.len()
    }

    /// Whether `handle` names an operation that has not completed.
    pub fn is_pending(&self, handle: OpHandle) -> bool {
        self.op(handle).is_some()
    }

    /// The counters.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// This client's sender id.
    pub fn sender(&self) -> SenderId {
        self.sender
    }

    fn op(&self, handle: OpHandle) -> Option<&Op<P>> {
        self.slots
            .get(usize::from(handle.index))?
            .op
            .as_ref()
            .filter(|op| op.gen_base == handle.gen_base)
    }

    /// Starts a read of `len` bytes at `addr`. Data arrives as [`Completion::Data`].
    pub fn read<T: Transport<Peer = P>>(
        &mut self,
        transport: &mut T,
        peer: P,
        ctx: usize,
        tag: u64,
        addr: GlobalAddr,
        len: usize,
    ) -> Result<Issued, ClientError> {
        let caps = transport.capabilities();
        let len32 = transfer_len(len)?;
        let (shape, frag) =
            if len <= MAX_INLINE_DATA && REPLY_HEADER_LEN + len <= inline_limit(&caps) {
                (Shape::ReadInline, 0)
            } else {
                (Shape::BulkRead, fragment_size(caps.mtu, 0)?)
            };
        self.start(
            transport,
            peer,
            ctx,
            tag,
            addr,
            len32,
            frag,
            shape,
            &[],
            None,
        )
    }

    /// Starts a write of `data` to `addr`. Resume with the same `data` until
    /// [`Issued::all_sent`].
    pub fn write<T: Transport<Peer = P>>(
        &mut self,
        transport: &mut T,
        peer: P,
        ctx: usize,
        tag: u64,
        addr: GlobalAddr,
        data: &[u8],
    ) -> Result<Issued, ClientError> {
        self.write_with(transport, peer, ctx, tag, addr, data, None)
    }

    /// Starts a write of `data` to `addr` that updates `signal` at the target once the
    /// data is written (put-with-signal): the signal travels in the write's last packet,
    /// which for a bulk write is sent only once every other fragment is acknowledged (see
    /// "Packets chosen" in the module docs). Resume with the same `data` until
    /// [`Issued::all_sent`]; the write completes when the last packet is acknowledged,
    /// i.e. after the signal was applied.
    #[allow(clippy::too_many_arguments)]
    pub fn write_signal<T: Transport<Peer = P>>(
        &mut self,
        transport: &mut T,
        peer: P,
        ctx: usize,
        tag: u64,
        addr: GlobalAddr,
        data: &[u8],
        signal: Signal,
    ) -> Result<Issued, ClientError> {
        self.write_with(transport, peer, ctx, tag, addr, data, Some(signal))
    }

    /// A write, inline or bulk; a signal takes [`SIGNAL_LEN`] bytes of every packet (and so
    /// of every fragment's room, which keeps all fragments one size).
    #[allow(clippy::too_many_arguments)]
    fn write_with<T: Transport<Peer = P>>(
        &mut self,
        transport: &mut T,
        peer: P,
        ctx: usize,
        tag: u64,
        addr: GlobalAddr,
        data: &[u8],
        signal: Option<Signal>,
    ) -> Result<Issued, ClientError> {
        let caps = transport.capabilities();
        let len32 = transfer_len(data.len())?;
        let extra = if signal.is_some() { SIGNAL_LEN } else { 0 };
        let (shape, frag) = if HEADER_LEN + extra + data.len() <= inline_limit(&caps) {
            (Shape::WriteInline, 0)
        } else {
            (Shape::BulkWrite, fragment_size(caps.mtu, extra)?)
        };
        self.start(
            transport, peer, ctx, tag, addr, len32, frag, shape, data, signal,
        )
    }

    /// Starts an atomic. `comparand` is used by COMPARE_SWAP only; operand and comparand
    /// must fit the datatype's width. The old value of a fetching atomic arrives in
    /// [`Completion::Done`].
    #[allow(clippy::too_many_arguments)]
    pub fn atomic<T: Transport<Peer = P>>(
        &mut self,
        transport: &mut T,
        peer: P,
        ctx: usize,
        tag: u64,
        addr: GlobalAddr,
        desc: AtomicDesc,
        operand: u64,
        comparand: u64,
    ) -> Result<Issued, ClientError> {
        let comparand = if desc.has_comparand() { comparand } else { 0 };
        let mask = desc.operand_mask();
        if operand & !mask != 0 || comparand & !mask != 0 {
            return Err(ClientError::BadOperand);
        }
        let shape = Shape::Atomic {
            desc,
            operand,
            comparand,
        };
        self.start(transport, peer, ctx, tag, addr, 0, 0, shape, &[], None)
    }

    /// Starts a host request. Replies (ACK, DATA, ERROR) are matched like every other; a
    /// DATA payload arrives as [`Completion::Data`].
    pub fn host_request<T: Transport<Peer = P>>(
        &mut self,
        transport: &mut T,
        peer: P,
        ctx: usize,
        tag: u64,
        request: HostRequest<'_>,
    ) -> Result<Issued, ClientError> {
        match request {
            HostRequest::Alloc { addr, size } => self.start(
                transport,
                peer,
                ctx,
                tag,
                addr,
                0,
                0,
                Shape::Alloc { size },
                &[],
                None,
            ),
            HostRequest::Free { addr } => self.start(
                transport,
                peer,
                ctx,
                tag,
                addr,
                0,
                0,
                Shape::Free,
                &[],
                None,
            ),
            HostRequest::Control { code, arg0, arg1 } => {
                let shape = Shape::Control { code, arg0, arg1 };
                self.start(
                    transport,
                    peer,
                    ctx,
                    tag,
                    GlobalAddr::from_raw(arg0),
                    0,
                    0,
                    shape,
                    &[],
                    None,
                )
            }
            HostRequest::Fork { addr, spec } => {
                let len32 = transfer_len(spec.len())?;
                let frag = fragment_size(transport.capabilities().mtu, 0)?;
                self.start(
                    transport,
                    peer,
                    ctx,
                    tag,
                    addr,
                    len32,
                    frag,
                    Shape::Fork,
                    spec,
                    None,
                )
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start<T: Transport<Peer = P>>(
        &mut self,
        transport: &mut T,
        peer: P,
        ctx: usize,
        tag: u64,
        addr: GlobalAddr,
        len: u32,
        frag: u32,
        shape: Shape,
        payload: &[u8],
        signal: Option<Signal>,
    ) -> Result<Issued, ClientError> {
        if ctx >= C {
            return Err(ClientError::BadContext);
        }
        let index = *self.free.last().ok_or(ClientError::Busy)?;
        let slot = &mut self.slots[usize::from(index)];
        // Reads and writes cut at multiples of the granule of the target's addresses; FORK
        // carries no memory.
        let head = match shape {
            Shape::BulkRead | Shape::BulkWrite => (addr.offset() % GRANULE as u64) as u32,
            _ => 0,
        };
        let nfrags = if frag == 0 {
            1
        } else {
            // At most `(2^32 - 1 + 63) / 64` fragments: fits a u32.
            (u64::from(len) + u64::from(head)).div_ceil(u64::from(frag)) as u32
        };
        let gen_base = slot.next_gen;
        slot.op = Some(Op {
            shape,
            peer,
            ctx,
            tag,
            addr,
            len,
            frag,
            head,
            nfrags,
            gen_base,
            sent: 0,
            lo: 0,
            answered: 0,
            error: None,
            fetched: None,
            listed: false,
            signal,
        });
        let (packets, error) = self.send_more(transport, index, payload);
        if packets == 0 {
            // Nothing went out: leave no trace.
            self.slots[usize::from(index)].op = None;
            return Err(match error {
                Some(TransportError::WouldBlock) | None => ClientError::WouldBlock,
                Some(e) => ClientError::Transport(e),
            });
        }
        self.free.pop();
        self.outstanding[ctx] += 1;
        self.stats.started += 1;
        let all_sent = self.relist(usize::from(index));
        Ok(Issued {
            handle: OpHandle { index, gen_base },
            all_sent,
            packets,
        })
    }

    /// Sends fragments of the operation in slot `index` while its window and the transport
    /// allow. Returns the packets sent and the transport error that stopped it, if any.
    fn send_more<T: Transport<Peer = P>>(
        &mut self,
        transport: &mut T,
        index: u16,
        payload: &[u8],
    ) -> (u32, Option<TransportError>) {
        let sender = self.sender;
        let slot_bits = u32::from(index) + 1;
        let Some(op) = self.slots[usize::from(index)].op.as_mut() else {
            return (0, None);
        };
        let mut packets = 0;
        let mut error = None;
        while op.may_send() {
            let k = op.sent;
            let generation = op.gen_base.wrapping_add(k) & Self::GEN_MASK;
            let token = (generation << Self::INDEX_BITS) | slot_bits;
            let repr = RequestRepr {
                sender,
                token,
                body: request_body(op, k, payload),
            };
            match transport.send(op.peer, repr.buffer_len(), |slot| {
                repr.emit(&mut Packet::new_unchecked(slot));
            }) {
                Ok(()) => {
                    op.sent += 1;
                    packets += 1;
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        self.stats.packets_sent += u64::from(packets);
        (packets, error)
    }

    /// Updates the count of payload-less operations with fragments left; returns whether
    /// the operation in slot `index` has nothing left to send.
    fn relist(&mut self, index: usize) -> bool {
        let Some(op) = self.slots[index].op.as_mut() else {
            return true;
        };
        let wants = !op.shape.has_payload() && op.error.is_none() && op.sent < op.nfrags;
        if wants != op.listed {
            op.listed = wants;
            if wants {
                self.unsent_reads += 1;
            } else {
                self.unsent_reads -= 1;
            }
        }
        op.sent == op.nfrags || op.error.is_some()
    }

    /// Sends more fragments of a pending operation. Writes and FORK must pass the same
    /// payload as when they were started; reads pass `&[]`.
    ///
    /// Returns the progress (possibly 0 packets when the transport is busy or the window
    /// is full: handle replies first). Errors: [`ClientError::StaleHandle`],
    /// [`ClientError::PayloadMismatch`], or [`ClientError::Transport`] when a hard
    /// transport error stopped it before any packet went out (the operation stays pending).
    pub fn resume<T: Transport<Peer = P>>(
        &mut self,
        transport: &mut T,
        handle: OpHandle,
        payload: &[u8],
    ) -> Result<Issued, ClientError> {
        let op = self.op(handle).ok_or(ClientError::StaleHandle)?;
        if op.shape.has_payload() && payload.len() != op.len as usize {
            return Err(ClientError::PayloadMismatch);
        }
        let (packets, error) = self.send_more(transport, handle.index, payload);
        let all_sent = self.relist(usize::from(handle.index));
        match error {
            Some(e) if packets == 0 && e != TransportError::WouldBlock => {
                Err(ClientError::Transport(e))
            }
            _ => Ok(Issued {
                handle,
                all_sent,
                packets,
            }),
        }
    }

    /// Sends more fragments of every pending bulk read that has some left (they need no
    /// payload). Cheap when there are none. Returns the packets sent; errors with the first
    /// hard transport error only if nothing could be sent.
    pub fn pump<T: Transport<Peer = P>>(&mut self, transport: &mut T) -> Result<u32, ClientError> {
        if self.unsent_reads == 0 {
            return Ok(0);
        }
        let mut total = 0;
        let mut hard = None;
        for index in 0..N {
            let listed = self.slots[index]
                .op
                .as_ref()
                .is_some_and(|op| op.listed && op.may_send());
            if !listed {
                continue;
            }
            let (packets, error) = self.send_more(transport, index as u16, &[]);
            total += packets;
            self.relist(index);
            if let Some(e) = error.filter(|&e| e != TransportError::WouldBlock) {
                hard.get_or_insert(e);
            }
        }
        match hard {
            Some(e) if total == 0 => Err(ClientError::Transport(e)),
            _ => Ok(total),
        }
    }

    /// Matches one received reply and reports what it completes through `sink`.
    ///
    /// Never panics on any input. Stale, duplicate and unparsable packets are ignored and
    /// counted.
    pub fn handle_reply<F: FnMut(Completion<'_>)>(
        &mut self,
        bytes: &[u8],
        mut sink: F,
    ) -> ReplyOutcome {
        let repr = match ReplyRepr::parse(bytes) {
            Ok(repr) => repr,
            Err(e) => {
                self.stats.malformed += 1;
                return ReplyOutcome::Malformed(e);
            }
        };
        let slot_bits = repr.token & Self::INDEX_MASK;
        if slot_bits == 0 || slot_bits as usize > N {
            self.stats.stale += 1;
            return ReplyOutcome::Stale;
        }
        let index = slot_bits as usize - 1;
        let generation = repr.token >> Self::INDEX_BITS;
        let Some(op) = self.slots[index].op.as_mut() else {
            self.stats.stale += 1;
            return ReplyOutcome::Stale;
        };
        let k = generation.wrapping_sub(op.gen_base) & Self::GEN_MASK;
        // `sent <= lo + WINDOW`, so an unanswered fragment lies within the bitmap.
        if k >= op.sent || k < op.lo || op.answered & (1u64 << (k - op.lo)) != 0 {
            self.stats.stale += 1;
            return ReplyOutcome::Stale;
        }
        op.answered |= 1u64 << (k - op.lo);
        let done = op.answered.trailing_ones();
        op.lo += done;
        op.answered = op.answered.checked_shr(done).unwrap_or(0);

        let (tag, ctx) = (op.tag, op.ctx);
        let (offset, frag_len) = op.fragment(k);
        let outcome = match (op.shape, repr.body) {
            (_, Reply::Error(code)) => {
                self.stats.remote_errors += 1;
                Err(OpError::Remote(code))
            }
            (Shape::ReadInline, Reply::Data(data)) if data.len() == op.len as usize => {
                sink(Completion::Data {
                    tag,
                    ctx,
                    offset: 0,
                    data,
                });
                Ok(())
            }
            (Shape::BulkRead, Reply::BulkData { frag, data, .. })
                if frag
                    == (Fragment {
                        base: op.addr,
                        total: op.len,
                        offset,
                    })
                    && data.len() == frag_len as usize =>
            {
                sink(Completion::Data {
                    tag,
                    ctx,
                    offset,
                    data,
                });
                Ok(())
            }
            (Shape::WriteInline | Shape::BulkWrite, Reply::Ack) => Ok(()),
            (Shape::Atomic { desc, .. }, Reply::Data(data))
                if desc.fetches() && data.len() == desc.width() =>
            {
                let mut value = [0u8; 8];
                value[..data.len()].copy_from_slice(data);
                op.fetched = Some(u64::from_le_bytes(value));
                Ok(())
            }
            (Shape::Atomic { desc, .. }, Reply::Ack) if !desc.fetches() => Ok(()),
            (Shape::Alloc { .. } | Shape::Free | Shape::Control { .. } | Shape::Fork, body) => {
                match body {
                    Reply::Ack => Ok(()),
                    Reply::Data(data) => {
                        sink(Completion::Data {
                            tag,
                            ctx,
                            offset,
                            data,
                        });
                        Ok(())
                    }
                    Reply::BulkData { frag, data, .. } => {
                        sink(Completion::Data {
                            tag,
                            ctx,
                            offset: frag.offset,
                            data,
                        });
                        Ok(())
                    }
                    // ERROR was matched by the first arm.
                    Reply::Error(_) => Ok(()),
                }
            }
            _ => Err(OpError::BadReply),
        };
        if let Err(e) = outcome {
            if e == OpError::BadReply {
                self.stats.bad_replies += 1;
            }
            op.error.get_or_insert(e);
        }
        if op.finished() {
            self.complete(index, &mut sink);
            ReplyOutcome::Matched { completed: true }
        } else {
            self.relist(index);
            ReplyOutcome::Matched { completed: false }
        }
    }

    /// Frees slot `index` and reports its completion.
    fn complete<F: FnMut(Completion<'_>)>(&mut self, index: usize, sink: &mut F) {
        let slot = &mut self.slots[index];
        let Some(op) = slot.op.take() else {
            return;
        };
        slot.next_gen = op.gen_base.wrapping_add(op.sent) & Self::GEN_MASK;
        if op.listed {
            self.unsent_reads -= 1;
        }
        self.outstanding[op.ctx] -= 1;
        // The slot was taken from the free list, so there is room to put it back.
        let _ = self.free.push(index as u16);
        self.stats.completed += 1;
        sink(Completion::Done {
            tag: op.tag,
            ctx: op.ctx,
            kind: op.shape.kind(),
            result: match op.error {
                Some(e) => Err(e),
                None => Ok(op.fetched),
            },
        });
    }

    /// Ends a pending operation now: reports [`Completion::Done`] with
    /// [`OpError::Aborted`] and frees its token (late replies are then ignored as stale).
    /// Returns false if the handle names no pending operation.
    pub fn abort<F: FnMut(Completion<'_>)>(&mut self, handle: OpHandle, mut sink: F) -> bool {
        if self.op(handle).is_none() {
            return false;
        }
        let index = usize::from(handle.index);
        if let Some(op) = self.slots[index].op.as_mut() {
            op.error = Some(OpError::Aborted);
        }
        self.complete(index, &mut sink);
        true
    }

    /// Aborts every pending operation addressed to `peer` (a peer found dead or
    /// unreachable); returns how many.
    pub fn fail_peer<F: FnMut(Completion<'_>)>(&mut self, peer: P, mut sink: F) -> usize {
        let mut count = 0;
        for index in 0..N {
            if let Some(op) = self.slots[index].op.as_mut().filter(|op| op.peer == peer) {
                op.error = Some(OpError::Aborted);
                self.complete(index, &mut sink);
                count += 1;
            }
        }
        count
    }
}

/// Builds the body of fragment `k` of `op`.
#[inline]
fn request_body<'a, P>(op: &Op<P>, k: u32, payload: &'a [u8]) -> Request<'a> {
    let (offset, len) = op.fragment(k);
    let frag = Fragment {
        base: op.addr,
        total: op.len,
        offset,
    };
    let piece = || &payload[offset as usize..(offset + len) as usize];
    match op.shape {
        Shape::ReadInline => Request::Read {
            addr: op.addr,
            len: op.len as u8,
        },
        Shape::BulkRead => Request::BulkRead { frag, len },
        Shape::WriteInline => match op.signal {
            None => Request::Write {
                addr: op.addr,
                data: payload,
            },
            Some(signal) => Request::WriteSignal {
                addr: op.addr,
                data: payload,
                signal,
            },
        },
        Shape::BulkWrite => match op.signal {
            Some(signal) if k + 1 == op.nfrags => Request::BulkWriteSignal {
                frag,
                data: piece(),
                signal,
            },
            _ => Request::BulkWrite {
                frag,
                data: piece(),
            },
        },
        Shape::Fork => Request::Fork {
            frag,
            data: piece(),
        },
        Shape::Atomic {
            desc,
            operand,
            comparand,
        } => Request::Atomic {
            addr: op.addr,
            desc,
            operand,
            comparand,
        },
        Shape::Alloc { size } => Request::Alloc {
            addr: op.addr,
            size,
        },
        Shape::Free => Request::Free { addr: op.addr },
        Shape::Control { code, arg0, arg1 } => Request::Control { code, arg0, arg1 },
    }
}

/// Checks a transfer length: 1..=u32::MAX.
fn transfer_len(len: usize) -> Result<u32, ClientError> {
    if len == 0 {
        return Err(ClientError::ZeroLength);
    }
    u32::try_from(len).map_err(|_| ClientError::TooLarge)
}

/// The largest packet that may travel inline: a transport reporting `max_inline` above its
/// MTU would refuse such a packet with `TooLarge`, so the smaller of the two bounds it.
fn inline_limit(caps: &Capabilities) -> usize {
    caps.max_inline.min(caps.mtu)
}

/// Bulk fragment size for an MTU when each packet also carries `extra` bytes beside the
/// bulk header (a signal block): what is left, rounded down to a multiple of [`GRANULE`]
/// (and below 4 GiB); [`ClientError::TransportTooSmall`] when not one granule is left.
fn fragment_size(mtu: usize, extra: usize) -> Result<u32, ClientError> {
    let room = mtu
        .saturating_sub(HEADER_LEN + extra)
        .min(u32::MAX as usize);
    match room - room % GRANULE {
        0 => Err(ClientError::TransportTooSmall),
        n => Ok(n as u32),
    }
}

#[cfg(test)]
mod tests;
