//! The atomic-service engine: executes remote reads, writes and atomics against registered
//! segments and writes the replies.
//!
//! **What it is.** [`Service`] takes one received request packet at a time, checks it
//! (parse, job key, segment, bounds with overflow checks, natural alignment of atomics,
//! atomic descriptor), executes it through a [`Memory`] implementation and writes the reply
//! into a caller-provided buffer, typically a transport slot. Requests it does not execute
//! itself (ALLOC, FREE, FORK, CONTROL) are handed back to the host as parsed
//! [`RequestRepr`]s. Every refusal is answered with an ERROR reply and counted per reason in
//! [`Stats`], along with requests per type and bytes read and written.
//!
//! **What it is not.** No I/O, no authentication and no allocation: the host receives
//! packets, decides which job key a packet's sender holds (from the transport's peer
//! identity, the sender id bound at Join, ...; see [`crate::wire::peek_sender`]), obtains
//! reply slots and executes host actions. The engine never touches memory outside the
//! segments registered with it.
//!
//! **Thread safety.** [`Service`] is a plain value mutated through `&mut self` (the stats
//! and the segment table); it is `Send` if its memory is. A multi-threaded daemon runs one
//! engine per progress thread or puts it behind a lock; the memory itself may be shared,
//! since [`Memory`] implementations use CPU atomics.
//!
//! # Processing a request
//!
//! Two steps, so that a host can get a transmit slot of the right size before executing:
//!
//! 1. [`Service::prepare`] parses and checks, and returns [`Prepared::Reply`] with a
//!    [`Pending`] whose [`Pending::reply_len`] is the exact reply length,
//!    [`Prepared::Host`] for host actions, or [`Prepared::Drop`] for packets that must not be
//!    answered (empty packets and reply types: answering a reply could make two services
//!    bounce errors forever).
//! 2. [`Service::execute`] runs the pending request and writes the reply (at most
//!    `reply_len` bytes). If the segment table changed in between, the request is checked
//!    again first.
//!
//! [`Service::handle`] does both into one buffer; [`Service::serve`] does both through a
//! [`Transport`]. Only fetching operations carry a result: READ gets DATA, BULK_READ one
//! BULK_DATA, fetching atomics DATA with the old value, WRITE, BULK_WRITE and non-fetching
//! atomics ACK. Packets that do not parse are answered with ERROR (code from
//! [`wire::Error::code`](crate::wire::Error::code)) carrying the best-effort token of
//! [`crate::wire::peek_token`].
//!
//! Segment lookup remembers the last segment found (per engine, checked against the table
//! epoch), so a stream of requests to one segment skips the table search; otherwise it is a
//! binary search (see [`SegmentTable`]).
//!
//! The ACK of a BULK_WRITE fragment that is not the last of its transfer may wait
//! ([`Pending::may_wait`]): hosts send it with [`Transport::send_lazy`], so that over the
//! reliability layer the ACKs of a stream of fragments share datagrams (one per few
//! fragments) instead of costing the service a send and the client a receive each.
//!
//! Bulk requests are checked against the whole transfer (`base + total`), so a transfer
//! that does not fit its segment is refused in every fragment (no partial write).
//!
//! A WRITE or final BULK_WRITE fragment with an attached signal (put-with-signal, see
//! [`crate::wire::Signal`]) is checked whole first: the signal word like a `u64` atomic's
//! target (segment, bounds, 8-byte alignment), then the data; a refusal of either writes
//! nothing. Executing it writes the data through [`Memory::write`], then updates the
//! signal word through [`Memory::atomic64`] (the atomic kernel: SET a release store, ADD
//! an acquire-release add, so a reader that sees the signal sees the data), then
//! acknowledges. The engine keeps no state across fragments: the sender orders a bulk
//! write's signal after its other fragments (see [`crate::client`]).
//!
//! # Example
//!
//! ```
//! use core::sync::atomic::AtomicU64;
//! use gsas_core::service::{Handled, Segment, Service, WordMemory};
//! use gsas_core::wire::{GlobalAddr, Packet, ReplyRepr, Reply, Request, RequestRepr, SenderId};
//!
//! let words: [AtomicU64; 8] = Default::default();
//! let mut service: Service<_, 4> = Service::new(SenderId::new(1).unwrap(), WordMemory::new(&words));
//! service.register(Segment { job: 1, key: 0xfeed, pe: 0, segment: 0, base: 0, len: 64 }).unwrap();
//!
//! let addr = GlobalAddr::new(0, 0, 8).unwrap();
//! let mut req = [0u8; 40];
//! let write = RequestRepr { sender: SenderId::new(2).unwrap(), token: 1, body: Request::Write { addr, data: b"hello" } };
//! write.emit(&mut Packet::new_unchecked(&mut req[..]));
//! let mut reply = [0u8; 64];
//! assert!(matches!(service.handle(0xfeed, &req[..write.buffer_len()], &mut reply), Ok(Handled::Replied(8))));
//!
//! let read = RequestRepr { sender: SenderId::new(2).unwrap(), token: 2, body: Request::Read { addr, len: 5 } };
//! read.emit(&mut Packet::new_unchecked(&mut req[..]));
//! let Ok(Handled::Replied(n)) = service.handle(0xfeed, &req[..32], &mut reply) else { panic!() };
//! assert_eq!(ReplyRepr::parse(&reply[..n]).unwrap().body, Reply::Data(b"hello"));
//! ```

mod amo;
mod memory;
mod segment;
#[cfg(feature = "std")]
mod serve;
mod stats;

pub use amo::AmoKind;
pub use memory::{Memory, WordMemory};
pub use segment::{RegisterError, Segment, SegmentTable};
#[cfg(feature = "std")]
pub use serve::{BLOCKED_SCAN, PortQueue, Served, refusal, refuse_host_actions};
pub use stats::Stats;

use crate::transport::{Transport, TransportError};
use crate::wire::{
    AtomicDesc, ErrorCode, Fragment, GlobalAddr, HEADER_LEN, Packet, PacketType, REPLY_HEADER_LEN,
    Request, RequestRepr, SenderId, Signal, emit_reply_header, peek_token, peek_type,
};

/// The reply buffer given to [`Service::execute`] is shorter than the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ReplyBufferTooSmall {
    /// Bytes the reply needs.
    pub needed: usize,
}

impl core::fmt::Display for ReplyBufferTooSmall {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "reply buffer too small: {} bytes needed", self.needed)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ReplyBufferTooSmall {}

/// A checked memory request, ready to run.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
enum Action<'a> {
    Read {
        seg: Segment,
        offset: u64,
        len: u8,
    },
    Write {
        seg: Segment,
        offset: u64,
        data: &'a [u8],
        signal: Option<SignalAt>,
    },
    BulkRead {
        seg: Segment,
        offset: u64,
        frag: Fragment,
        len: u32,
    },
    BulkWrite {
        seg: Segment,
        offset: u64,
        data: &'a [u8],
        signal: Option<SignalAt>,
    },
    Atomic {
        seg: Segment,
        offset: u64,
        desc: AtomicDesc,
        operand: u64,
        comparand: u64,
    },
    Refuse(ErrorCode),
}

/// A checked signal word and its update, applied after a write's data.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
struct SignalAt {
    seg: Segment,
    offset: u64,
    kind: AmoKind,
    value: u64,
}

impl Action<'_> {
    #[inline]
    fn reply_len(&self) -> usize {
        match *self {
            Action::Read { len, .. } => REPLY_HEADER_LEN + usize::from(len),
            Action::BulkRead { len, .. } => HEADER_LEN + len as usize,
            Action::Atomic { desc, .. } if desc.fetches() => REPLY_HEADER_LEN + desc.width(),
            Action::Atomic { .. } | Action::Write { .. } | Action::BulkWrite { .. } => {
                REPLY_HEADER_LEN
            }
            Action::Refuse(_) => REPLY_HEADER_LEN,
        }
    }
}

/// A request checked by [`Service::prepare`], to be run by [`Service::execute`].
///
/// Plain data borrowing the request bytes; keep it (and the bytes) if the reply slot is not
/// available yet and execute it later.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Pending<'a> {
    key: u64,
    epoch: u64,
    token: u32,
    request: Option<Request<'a>>,
    action: Action<'a>,
}

impl Pending<'_> {
    /// Exact length of the reply [`Service::execute`] will write, unless the segment table
    /// changes before it runs (then the reply may differ; execute reports a too-small
    /// buffer instead of writing past it).
    #[inline]
    pub fn reply_len(&self) -> usize {
        self.action.reply_len()
    }

    /// The token the reply will carry.
    #[inline]
    pub fn token(&self) -> u32 {
        self.token
    }

    /// Whether the reply may wait: the request is a BULK_WRITE fragment other than the last
    /// of its transfer (`offset + length < total`) and is not refused. Its ACK only tells
    /// the client that one fragment of an unfinished transfer landed, so a host may send
    /// it with [`Transport::send_lazy`] (as [`Service::serve`] does); replies that complete
    /// an operation, carry data or refuse a request should go out at once.
    ///
    /// Fragments may arrive in any order, so the last fragment's ACK can leave before
    /// some lazy ones: that changes nothing for the client, which completes a write only
    /// when every fragment is acknowledged. (If the segment table changes between
    /// `prepare` and `execute` and the request is refused then, the ERROR goes out
    /// lazily: late by at most the transport's bound, still correct.)
    #[inline]
    pub fn may_wait(&self) -> bool {
        match (&self.request, &self.action) {
            (_, Action::Refuse(_)) => false,
            (Some(Request::BulkWrite { frag, data }), _) => {
                u64::from(frag.offset) + (data.len() as u64) < u64::from(frag.total)
            }
            _ => false,
        }
    }

    /// The refusal this request will be answered with, if any.
    #[inline]
    pub fn refusal(&self) -> Option<ErrorCode> {
        match self.action {
            Action::Refuse(code) => Some(code),
            _ => None,
        }
    }
}

/// What [`Service::prepare`] decided.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Prepared<'a> {
    /// Run it with [`Service::execute`]; the reply needs [`Pending::reply_len`] bytes.
    Reply(Pending<'a>),
    /// ALLOC, FREE, FORK or CONTROL: the host executes it and answers with the token.
    Host(RequestRepr<'a>),
    /// Not answered: an empty packet or a reply type (counted in [`Stats::dropped`]).
    Drop,
}

/// What [`Service::handle`] and [`Service::serve`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Handled<'a> {
    /// A reply of this many bytes was written (or sent).
    Replied(usize),
    /// A host action for the host to execute and answer.
    Host(RequestRepr<'a>),
    /// The packet was dropped without an answer.
    Dropped,
}

/// The atomic-service engine over memory `M`, with room for `N` segments.
#[derive(Debug)]
pub struct Service<M: Memory, const N: usize> {
    id: SenderId,
    memory: M,
    table: SegmentTable<N>,
    stats: Stats,
    hint: Hint,
    max_reply: usize,
}

/// The last segment found: requests tend to hit the same segment again.
#[derive(Clone, Copy, Debug)]
struct Hint {
    epoch: u64,
    key: u64,
    pe: u16,
    segment: u8,
    index: usize,
}

impl<M: Memory, const N: usize> Service<M, N> {
    /// A service with no segments. `id` is written as the sender of BULK_DATA replies.
    pub fn new(id: SenderId, memory: M) -> Self {
        Service {
            id,
            memory,
            table: SegmentTable::new(),
            stats: Stats::default(),
            // Epoch u64::MAX is never reached by the table: the hint starts invalid.
            hint: Hint {
                epoch: u64::MAX,
                key: 0,
                pe: 0,
                segment: 0,
                index: 0,
            },
            max_reply: usize::MAX,
        }
    }

    /// Registers a segment after checking it against the table (see
    /// [`SegmentTable::insert`]) and the memory ([`Memory::contains`]).
    pub fn register(&mut self, seg: Segment) -> Result<(), RegisterError> {
        if !self.memory.contains(seg.base, seg.len) {
            return Err(RegisterError::OutsideMemory);
        }
        self.table.insert(seg)
    }

    /// Unregisters one segment; returns it if it was registered.
    pub fn unregister(&mut self, key: u64, pe: u16, segment: u8) -> Option<Segment> {
        self.table.remove(key, pe, segment)
    }

    /// Unregisters every segment of `job`; returns how many.
    pub fn unregister_job(&mut self, job: u32) -> usize {
        self.table.remove_job(job)
    }

    /// The segment table.
    pub fn segments(&self) -> &SegmentTable<N> {
        &self.table
    }

    /// The memory.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Limits replies to `max` bytes (the transport's MTU): a BULK_READ asking for a
    /// larger fragment is refused with [`ErrorCode::TooLarge`] instead of producing a reply
    /// the transport cannot carry. Unlimited by default; [`Service::serve`] also applies
    /// the transport's MTU.
    pub fn set_max_reply_len(&mut self, max: usize) {
        self.max_reply = max;
    }

    /// This service's id.
    pub fn id(&self) -> SenderId {
        self.id
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Sets every counter to 0.
    pub fn reset_stats(&mut self) {
        self.stats.reset();
    }

    /// Finds the segment and checks `offset + len <= seg.len` and alignment.
    #[inline]
    fn locate(
        &mut self,
        key: u64,
        addr: GlobalAddr,
        len: u64,
        align: u64,
    ) -> Result<(Segment, u64), ErrorCode> {
        let (pe, segment) = (addr.pe(), addr.segment());
        let h = self.hint;
        let index = if h.epoch == self.table.epoch()
            && h.key == key
            && h.pe == pe
            && h.segment == segment
        {
            h.index
        } else {
            let index = self.table.position(key, pe, segment)?;
            self.hint = Hint {
                epoch: self.table.epoch(),
                key,
                pe,
                segment,
                index,
            };
            index
        };
        let Some(&seg) = self.table.get(index) else {
            return Err(ErrorCode::NoSegment);
        };
        let offset = addr.offset();
        match offset.checked_add(len) {
            Some(end) if end <= seg.len => {}
            _ => return Err(ErrorCode::OutOfBounds),
        }
        if offset & (align - 1) != 0 {
            return Err(ErrorCode::Misaligned);
        }
        Ok((seg, offset))
    }

    /// Checks an attached signal's word like a `u64` atomic's target.
    #[inline]
    fn locate_signal(&mut self, key: u64, signal: &Signal) -> Result<SignalAt, ErrorCode> {
        let (seg, offset) = self.locate(key, signal.addr, 8, 8)?;
        let (kind, value) = AmoKind::from_wire(signal.op.atomic_op(), signal.value);
        Ok(SignalAt {
            seg,
            offset,
            kind,
            value,
        })
    }

    /// Checks a memory request against the current table.
    #[inline]
    fn plan<'a>(&mut self, key: u64, request: &Request<'a>) -> Action<'a> {
        let checked = match *request {
            Request::Read { addr, len } => self
                .locate(key, addr, u64::from(len), 1)
                .map(|(seg, offset)| Action::Read { seg, offset, len }),
            Request::Write { addr, data } => {
                self.locate(key, addr, data.len() as u64, 1)
                    .map(|(seg, offset)| Action::Write {
                        seg,
                        offset,
                        data,
                        signal: None,
                    })
            }
            Request::WriteSignal { addr, data, signal } => {
                self.locate_signal(key, &signal).and_then(|signal| {
                    self.locate(key, addr, data.len() as u64, 1)
                        .map(|(seg, offset)| Action::Write {
                            seg,
                            offset,
                            data,
                            signal: Some(signal),
                        })
                })
            }
            Request::BulkRead { len, .. }
                if HEADER_LEN as u64 + u64::from(len) > self.max_reply as u64 =>
            {
                Err(ErrorCode::TooLarge)
            }
            Request::BulkRead { frag, len } => self
                .locate(key, frag.base, u64::from(frag.total), 1)
                .map(|(seg, base)| Action::BulkRead {
                    seg,
                    offset: base + u64::from(frag.offset),
                    frag,
                    len,
                }),
            Request::BulkWrite { frag, data } => self
                .locate(key, frag.base, u64::from(frag.total), 1)
                .map(|(seg, base)| Action::BulkWrite {
                    seg,
                    offset: base + u64::from(frag.offset),
                    data,
                    signal: None,
                }),
            Request::BulkWriteSignal { frag, data, signal } => {
                self.locate_signal(key, &signal).and_then(|signal| {
                    self.locate(key, frag.base, u64::from(frag.total), 1)
                        .map(|(seg, base)| Action::BulkWrite {
                            seg,
                            offset: base + u64::from(frag.offset),
                            data,
                            signal: Some(signal),
                        })
                })
            }
            Request::Atomic {
                addr,
                desc,
                operand,
                comparand,
            } => {
                let width = desc.width() as u64;
                self.locate(key, addr, width, width)
                    .map(|(seg, offset)| Action::Atomic {
                        seg,
                        offset,
                        desc,
                        operand,
                        comparand,
                    })
            }
            Request::Alloc { .. }
            | Request::Free { .. }
            | Request::Fork { .. }
            | Request::Control { .. } => Err(ErrorCode::NotSupported),
        };
        checked.unwrap_or_else(Action::Refuse)
    }

    /// Parses and checks one received packet; see the [module docs](self).
    ///
    /// `key` is the job key the host attributes to the packet's sender. Counts the packet
    /// by type, and the refusal if there is one.
    #[inline]
    pub fn prepare<'a>(&mut self, key: u64, packet: &'a [u8]) -> Prepared<'a> {
        let Some(ty) = peek_type(packet) else {
            self.stats.count_dropped();
            return Prepared::Drop;
        };
        self.stats.count_request(ty);
        if ty.is_reply() {
            self.stats.count_dropped();
            return Prepared::Drop;
        }
        let epoch = self.table.epoch();
        let repr = match RequestRepr::parse(&Packet::new_unchecked(packet)) {
            Ok(repr) => repr,
            Err(e) => {
                let code = e.code();
                self.stats.count_refusal(code);
                let token = peek_token(packet);
                return Prepared::Reply(Pending {
                    key,
                    epoch,
                    token,
                    request: None,
                    action: Action::Refuse(code),
                });
            }
        };
        if matches!(
            ty,
            PacketType::Alloc | PacketType::Free | PacketType::Fork | PacketType::Control
        ) {
            return Prepared::Host(repr);
        }
        let action = self.plan(key, &repr.body);
        if let Action::Refuse(code) = action {
            self.stats.count_refusal(code);
        }
        Prepared::Reply(Pending {
            key,
            epoch,
            token: repr.token,
            request: Some(repr.body),
            action,
        })
    }

    /// Runs a prepared request and writes its reply into `out`; returns the reply length.
    ///
    /// `pending` must come from this service's [`Service::prepare`]. If the segment table
    /// changed since then, the request is checked again first. Errors (nothing executed)
    /// if `out` is shorter than the reply.
    #[inline]
    pub fn execute(
        &mut self,
        pending: &Pending<'_>,
        out: &mut [u8],
    ) -> Result<usize, ReplyBufferTooSmall> {
        if pending.epoch != self.table.epoch() {
            if let Some(request) = &pending.request {
                let action = self.plan(pending.key, request);
                if let Action::Refuse(code) = action {
                    self.stats.count_refusal(code);
                }
                return self.run(pending.token, &action, out);
            }
        }
        self.run(pending.token, &pending.action, out)
    }

    #[inline]
    fn run(
        &mut self,
        token: u32,
        action: &Action<'_>,
        out: &mut [u8],
    ) -> Result<usize, ReplyBufferTooSmall> {
        let needed = action.reply_len();
        if out.len() < needed {
            return Err(ReplyBufferTooSmall { needed });
        }
        match *action {
            Action::Read { seg, offset, len } => {
                emit_reply_header(out, PacketType::Data, 0, len, token);
                self.memory
                    .read(&seg, offset, &mut out[REPLY_HEADER_LEN..needed]);
                self.stats.count_read(usize::from(len));
            }
            Action::Write {
                seg,
                offset,
                data,
                signal,
            }
            | Action::BulkWrite {
                seg,
                offset,
                data,
                signal,
            } => {
                self.memory.write(&seg, offset, data);
                self.stats.count_written(data.len());
                if let Some(s) = signal {
                    // After the data: the kernel's SET is a release store and ADD an
                    // acquire-release RMW, so a reader that sees the update sees the data.
                    self.memory.atomic64(&s.seg, s.offset, s.kind, s.value, 0);
                }
                emit_reply_header(out, PacketType::Ack, 0, 0, token);
            }
            Action::BulkRead {
                seg,
                offset,
                frag,
                len,
            } => {
                let mut packet = Packet::new_unchecked(&mut out[..needed]);
                packet.set_packet_type(PacketType::BulkData);
                packet.set_sub(0);
                packet.set_sender(self.id);
                packet.set_addr(frag.base);
                packet.set_total_len(frag.total);
                packet.set_frag_offset(frag.offset);
                packet.set_token(token);
                packet.set_frag_len(len);
                self.memory.read(&seg, offset, packet.payload_mut());
                self.stats.count_read(len as usize);
            }
            Action::Atomic {
                seg,
                offset,
                desc,
                operand,
                comparand,
            } => {
                let (kind, operand) = AmoKind::from_wire(desc.op(), operand);
                let old = if desc.width() == 4 {
                    u64::from(self.memory.atomic32(
                        &seg,
                        offset,
                        kind,
                        operand as u32,
                        comparand as u32,
                    ))
                } else {
                    self.memory.atomic64(&seg, offset, kind, operand, comparand)
                };
                if desc.fetches() {
                    let width = desc.width();
                    emit_reply_header(out, PacketType::Data, 0, width as u8, token);
                    out[REPLY_HEADER_LEN..needed].copy_from_slice(&old.to_le_bytes()[..width]);
                } else {
                    emit_reply_header(out, PacketType::Ack, 0, 0, token);
                }
            }
            Action::Refuse(code) => {
                emit_reply_header(out, PacketType::Error, code.into(), 0, token)
            }
        }
        Ok(needed)
    }

    /// [`Service::prepare`] then, for memory requests and refusals,
    /// [`Service::execute`] into `out`.
    #[inline]
    pub fn handle<'a>(
        &mut self,
        key: u64,
        packet: &'a [u8],
        out: &mut [u8],
    ) -> Result<Handled<'a>, ReplyBufferTooSmall> {
        match self.prepare(key, packet) {
            Prepared::Reply(pending) => self.execute(&pending, out).map(Handled::Replied),
            Prepared::Host(repr) => Ok(Handled::Host(repr)),
            Prepared::Drop => Ok(Handled::Dropped),
        }
    }

    /// Prepares `packet`, obtains a transport slot of exactly the reply length for `peer`
    /// and executes into it. Replies that [may wait](Pending::may_wait) are sent with
    /// [`Transport::send_lazy`], the others with [`Transport::send`].
    ///
    /// Errors: the transport's error when no slot could be obtained (for
    /// [`TransportError::WouldBlock`] nothing was executed: keep the packet and call again
    /// later). Host actions and drops are returned without sending anything.
    pub fn serve<'a, T: Transport>(
        &mut self,
        transport: &mut T,
        peer: T::Peer,
        key: u64,
        packet: &'a [u8],
    ) -> Result<Handled<'a>, TransportError> {
        match self.prepare(key, packet) {
            Prepared::Reply(mut pending) => {
                if pending.reply_len() > transport.capabilities().mtu {
                    self.stats.count_refusal(ErrorCode::TooLarge);
                    pending.action = Action::Refuse(ErrorCode::TooLarge);
                    pending.request = None;
                }
                let len = pending.reply_len();
                let sent = if pending.may_wait() {
                    transport.send_lazy(peer, len, |slot| self.execute(&pending, slot))
                } else {
                    transport.send(peer, len, |slot| self.execute(&pending, slot))
                };
                match sent? {
                    Ok(n) => Ok(Handled::Replied(n)),
                    // The slot is exactly `len` bytes; only a table change between prepare
                    // and execute (impossible here: both run in this call) could need more.
                    Err(_) => Err(TransportError::TooLarge),
                }
            }
            Prepared::Host(repr) => Ok(Handled::Host(repr)),
            Prepared::Drop => Ok(Handled::Dropped),
        }
    }
}
