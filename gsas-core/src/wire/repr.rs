//! High-level representations of packets: parse checks every invariant, emit writes bytes.
//!
//! [`RequestRepr`] covers the nine request types, [`ReplyRepr`] the four reply types and
//! [`Repr`] either, chosen by byte 0. Payloads are borrowed from the parsed buffer (no
//! copy). `parse` never panics on any input; `emit` panics only if the output buffer is
//! shorter than `buffer_len()` (a caller bug) and writes exactly `buffer_len()` bytes.

use super::packet::{CSWAP_LEN, HEADER_LEN};
use super::reply::{MAX_INLINE_DATA, REPLY_HEADER_LEN};
use super::signal::{SIGNAL_LEN, Signal, SignalOp};
use super::{
    AtomicDesc, ControlCode, Error, ErrorCode, GlobalAddr, Packet, PacketType, ReplyPacket,
    SenderId,
};

/// Position of one fragment in a bulk transfer (the bulk header minus type, sender, token
/// and fragment length).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Fragment {
    /// Base global address of the whole transfer.
    pub base: GlobalAddr,
    /// Total length of the whole transfer in bytes.
    pub total: u32,
    /// Offset of this fragment within the transfer.
    pub offset: u32,
}

impl Fragment {
    /// Checks `offset + len <= total` and `len >= 1`.
    #[inline]
    fn check(self, len: u32) -> Result<(), Error> {
        if len == 0 || u64::from(self.offset) + u64::from(len) > u64::from(self.total) {
            Err(Error::BadFragment)
        } else {
            Ok(())
        }
    }

    #[inline]
    fn read<T: AsRef<[u8]>>(packet: &Packet<T>) -> Self {
        Fragment {
            base: packet.addr(),
            total: packet.total_len(),
            offset: packet.frag_offset(),
        }
    }

    #[inline]
    fn write<T: AsRef<[u8]> + AsMut<[u8]>>(self, packet: &mut Packet<T>, len: u32) {
        packet.set_addr(self.base);
        packet.set_total_len(self.total);
        packet.set_frag_offset(self.offset);
        packet.set_frag_len(len);
    }
}

/// The type-specific part of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Request<'a> {
    /// READ: `len` (1..=56) bytes at `addr`.
    Read {
        /// Address of the first byte.
        addr: GlobalAddr,
        /// Number of bytes, 1..=56.
        len: u8,
    },
    /// WRITE (inline): `data` (at least 1 byte) to `addr`.
    Write {
        /// Address of the first byte.
        addr: GlobalAddr,
        /// The bytes to write.
        data: &'a [u8],
    },
    /// BULK_READ: `len` bytes of the transfer starting at `frag.offset`.
    BulkRead {
        /// Where this fragment lies in the transfer.
        frag: Fragment,
        /// Length of the fragment asked for (>= 1).
        len: u32,
    },
    /// BULK_WRITE: one fragment of a transfer.
    BulkWrite {
        /// Where this fragment lies in the transfer.
        frag: Fragment,
        /// The fragment's bytes (>= 1).
        data: &'a [u8],
    },
    /// WRITE (inline) with an attached signal: `data` to `addr`, then `signal` applied
    /// (`sub` = the signal's operation, the signal block before the data).
    WriteSignal {
        /// Address of the first byte.
        addr: GlobalAddr,
        /// The bytes to write.
        data: &'a [u8],
        /// The update applied after the data.
        signal: Signal,
    },
    /// BULK_WRITE of the final fragment of a transfer (`offset + length == total`) with an
    /// attached signal, applied after the fragment's data. The sender sends it only once
    /// every other fragment of the transfer is acknowledged, so the signal follows the
    /// whole transfer.
    BulkWriteSignal {
        /// Where this fragment lies in the transfer (its end is the transfer's end).
        frag: Fragment,
        /// The fragment's bytes (>= 1).
        data: &'a [u8],
        /// The update applied after the data.
        signal: Signal,
    },
    /// ATOMIC.
    Atomic {
        /// Address of the naturally aligned target.
        addr: GlobalAddr,
        /// Operation and datatype.
        desc: AtomicDesc,
        /// The operand (for 32-bit types in the low 32 bits; ignored by FETCH, INC,
        /// FETCH_INC).
        operand: u64,
        /// The comparand of COMPARE_SWAP; 0 for every other operation (not on the wire).
        comparand: u64,
    },
    /// ALLOC: executed by the host.
    Alloc {
        /// Names the (PE, segment) to allocate; the offset is host-defined.
        addr: GlobalAddr,
        /// Size in bytes.
        size: u64,
    },
    /// FREE: executed by the host.
    Free {
        /// Names the (PE, segment) to free.
        addr: GlobalAddr,
    },
    /// FORK: one fragment of an opaque launch specification, executed by the host.
    Fork {
        /// Where this fragment lies in the specification.
        frag: Fragment,
        /// The fragment's bytes (>= 1).
        data: &'a [u8],
    },
    /// CONTROL: executed by the host.
    Control {
        /// The control code (byte 1).
        code: ControlCode,
        /// First argument (word 1).
        arg0: u64,
        /// Second argument (word 2).
        arg1: u64,
    },
}

impl Request<'_> {
    /// The packet type this body is sent as.
    #[inline]
    pub fn packet_type(&self) -> PacketType {
        match self {
            Request::Read { .. } => PacketType::Read,
            Request::Write { .. } | Request::WriteSignal { .. } => PacketType::Write,
            Request::BulkRead { .. } => PacketType::BulkRead,
            Request::BulkWrite { .. } | Request::BulkWriteSignal { .. } => PacketType::BulkWrite,
            Request::Atomic { .. } => PacketType::Atomic,
            Request::Alloc { .. } => PacketType::Alloc,
            Request::Free { .. } => PacketType::Free,
            Request::Fork { .. } => PacketType::Fork,
            Request::Control { .. } => PacketType::Control,
        }
    }
}

/// A parsed request: sender, token and body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RequestRepr<'a> {
    /// Sender id (48 bits).
    pub sender: SenderId,
    /// Token echoed in the reply.
    pub token: u32,
    /// Type-specific part.
    pub body: Request<'a>,
}

#[inline]
fn zero(value: u32) -> Result<(), Error> {
    if value == 0 {
        Ok(())
    } else {
        Err(Error::Reserved)
    }
}

/// The signal block of a checked packet at least `32 + SIGNAL_LEN` bytes long.
#[inline]
fn read_signal<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>, op: SignalOp) -> Signal {
    Signal {
        addr: packet.signal_addr(),
        op,
        value: packet.signal_value(),
    }
}

#[inline]
fn len_u32(len: usize) -> u32 {
    debug_assert!(u32::try_from(len).is_ok(), "fragment longer than 4 GiB");
    len as u32
}

impl<'a> RequestRepr<'a> {
    /// Parses a request, checking every invariant of its layout.
    ///
    /// Never panics, whatever the buffer holds (the length is checked first). Trailing
    /// bytes after a fixed-size request (READ, WRITE's declared payload, BULK_READ, ATOMIC,
    /// ALLOC, FREE, CONTROL) are padding and ignored; bulk packets carrying a payload
    /// (BULK_WRITE, FORK) must be exact.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Self, Error> {
        packet.check_len()?;
        let sender = packet.sender();
        let token = packet.token();
        let sub = u32::from(packet.sub());
        let body = match packet.packet_type() {
            PacketType::Read => {
                zero(sub)?;
                zero(packet.token_high())?;
                let len = packet.arg();
                if len == 0 {
                    return Err(Error::BadLength);
                }
                if len > MAX_INLINE_DATA as u64 {
                    return Err(Error::TooLarge);
                }
                Request::Read {
                    addr: packet.addr(),
                    len: len as u8,
                }
            }
            PacketType::Write => {
                zero(packet.token_high())?;
                let signal = (sub != 0)
                    .then(|| SignalOp::from_sub(packet.sub()))
                    .transpose()?;
                let skip = if signal.is_some() { SIGNAL_LEN } else { 0 };
                let len = packet.arg();
                let payload = packet.payload();
                if len == 0 {
                    return Err(Error::BadLength);
                }
                if len > payload.len().saturating_sub(skip) as u64 || payload.len() < skip {
                    return Err(Error::Truncated);
                }
                let addr = packet.addr();
                let data = &payload[skip..skip + len as usize];
                match signal {
                    None => Request::Write { addr, data },
                    Some(op) => Request::WriteSignal {
                        addr,
                        data,
                        signal: read_signal(packet, op),
                    },
                }
            }
            PacketType::BulkRead => {
                zero(sub)?;
                let frag = Fragment::read(packet);
                let len = packet.frag_len();
                frag.check(len)?;
                Request::BulkRead { frag, len }
            }
            PacketType::BulkWrite if sub != 0 => {
                let op = SignalOp::from_sub(packet.sub())?;
                let frag = Fragment::read(packet);
                let len = packet.frag_len();
                frag.check(len)?;
                // The signal rides the final fragment only.
                if u64::from(frag.offset) + u64::from(len) != u64::from(frag.total) {
                    return Err(Error::BadFragment);
                }
                let Some(data) = packet.payload().get(SIGNAL_LEN..) else {
                    return Err(Error::Truncated);
                };
                if data.len() as u64 != u64::from(len) {
                    return Err(Error::BadFragment);
                }
                Request::BulkWriteSignal {
                    frag,
                    data,
                    signal: read_signal(packet, op),
                }
            }
            PacketType::BulkWrite | PacketType::Fork => {
                zero(sub)?;
                let frag = Fragment::read(packet);
                let len = packet.frag_len();
                frag.check(len)?;
                let data = packet.payload();
                if data.len() as u64 != u64::from(len) {
                    return Err(Error::BadFragment);
                }
                if packet.packet_type() == PacketType::Fork {
                    Request::Fork { frag, data }
                } else {
                    Request::BulkWrite { frag, data }
                }
            }
            PacketType::Atomic => {
                zero(packet.token_high())?;
                let desc = AtomicDesc::from_byte(packet.sub())?;
                let operand = packet.arg();
                let comparand = if desc.has_comparand() {
                    packet.comparand()
                } else {
                    0
                };
                let mask = desc.operand_mask();
                if operand & !mask != 0 || comparand & !mask != 0 {
                    return Err(Error::BadAtomic);
                }
                Request::Atomic {
                    addr: packet.addr(),
                    desc,
                    operand,
                    comparand,
                }
            }
            PacketType::Alloc => {
                zero(sub)?;
                zero(packet.token_high())?;
                Request::Alloc {
                    addr: packet.addr(),
                    size: packet.arg(),
                }
            }
            PacketType::Free => {
                zero(sub)?;
                zero(packet.token_high())?;
                if packet.arg() != 0 {
                    return Err(Error::Reserved);
                }
                Request::Free {
                    addr: packet.addr(),
                }
            }
            PacketType::Control => {
                zero(packet.token_high())?;
                Request::Control {
                    code: ControlCode::from(packet.sub()),
                    arg0: packet.addr().raw(),
                    arg1: packet.arg(),
                }
            }
            PacketType::Unknown(t) => return Err(Error::UnknownType(t)),
            other => return Err(Error::UnexpectedType(other)),
        };
        Ok(RequestRepr {
            sender,
            token,
            body,
        })
    }

    /// Length of the emitted packet.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        match self.body {
            Request::Read { .. }
            | Request::BulkRead { .. }
            | Request::Alloc { .. }
            | Request::Free { .. }
            | Request::Control { .. } => HEADER_LEN,
            Request::Write { data, .. }
            | Request::BulkWrite { data, .. }
            | Request::Fork { data, .. } => HEADER_LEN + data.len(),
            Request::WriteSignal { data, .. } | Request::BulkWriteSignal { data, .. } => {
                HEADER_LEN + SIGNAL_LEN + data.len()
            }
            Request::Atomic { desc, .. } => {
                if desc.has_comparand() {
                    CSWAP_LEN
                } else {
                    HEADER_LEN
                }
            }
        }
    }

    /// Writes the request into `packet`, payload included.
    ///
    /// Panics if the buffer is shorter than [`RequestRepr::buffer_len`]. Field values must
    /// satisfy the invariants [`RequestRepr::parse`] checks (debug builds assert them);
    /// the typed fields ([`SenderId`], [`GlobalAddr`], [`AtomicDesc`]) always do.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_packet_type(self.body.packet_type());
        packet.set_sender(self.sender);
        packet.set_token(self.token);
        match self.body {
            Request::Read { addr, len } => {
                debug_assert!((1..=MAX_INLINE_DATA as u8).contains(&len));
                packet.set_sub(0);
                packet.set_addr(addr);
                packet.set_arg(u64::from(len));
                packet.set_token_high(0);
            }
            Request::Write { addr, data } => {
                debug_assert!(!data.is_empty());
                packet.set_sub(0);
                packet.set_addr(addr);
                packet.set_arg(data.len() as u64);
                packet.set_token_high(0);
                packet.payload_mut()[..data.len()].copy_from_slice(data);
            }
            Request::WriteSignal { addr, data, signal } => {
                debug_assert!(!data.is_empty());
                packet.set_sub(signal.op.to_sub());
                packet.set_addr(addr);
                packet.set_arg(data.len() as u64);
                packet.set_token_high(0);
                packet.set_signal(signal.addr, signal.value);
                packet.payload_mut()[SIGNAL_LEN..SIGNAL_LEN + data.len()].copy_from_slice(data);
            }
            Request::BulkWriteSignal { frag, data, signal } => {
                let len = len_u32(data.len());
                debug_assert!(frag.check(len).is_ok());
                debug_assert!(u64::from(frag.offset) + u64::from(len) == u64::from(frag.total));
                packet.set_sub(signal.op.to_sub());
                frag.write(packet, len);
                packet.set_signal(signal.addr, signal.value);
                packet.payload_mut()[SIGNAL_LEN..SIGNAL_LEN + data.len()].copy_from_slice(data);
            }
            Request::BulkRead { frag, len } => {
                debug_assert!(frag.check(len).is_ok());
                packet.set_sub(0);
                frag.write(packet, len);
            }
            Request::BulkWrite { frag, data } | Request::Fork { frag, data } => {
                debug_assert!(frag.check(len_u32(data.len())).is_ok());
                packet.set_sub(0);
                frag.write(packet, len_u32(data.len()));
                packet.payload_mut()[..data.len()].copy_from_slice(data);
            }
            Request::Atomic {
                addr,
                desc,
                operand,
                comparand,
            } => {
                debug_assert!(operand & !desc.operand_mask() == 0);
                packet.set_sub(desc.to_byte());
                packet.set_addr(addr);
                packet.set_arg(operand);
                packet.set_token_high(0);
                if desc.has_comparand() {
                    debug_assert!(comparand & !desc.operand_mask() == 0);
                    packet.set_comparand(comparand);
                }
            }
            Request::Alloc { addr, size } => {
                packet.set_sub(0);
                packet.set_addr(addr);
                packet.set_arg(size);
                packet.set_token_high(0);
            }
            Request::Free { addr } => {
                packet.set_sub(0);
                packet.set_addr(addr);
                packet.set_arg(0);
                packet.set_token_high(0);
            }
            Request::Control { code, arg0, arg1 } => {
                packet.set_sub(code.into());
                packet.set_addr(GlobalAddr::from_raw(arg0));
                packet.set_arg(arg1);
                packet.set_token_high(0);
            }
        }
    }
}

/// The type-specific part of a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Reply<'a> {
    /// ACK: success without data.
    Ack,
    /// DATA: success with 1..=56 bytes (read data, an atomic's old value, a host answer).
    Data(&'a [u8]),
    /// BULK_DATA: one fragment of a bulk read.
    BulkData {
        /// Id of the answering service.
        sender: SenderId,
        /// Where this fragment lies in the transfer.
        frag: Fragment,
        /// The fragment's bytes (>= 1).
        data: &'a [u8],
    },
    /// ERROR: refusal.
    Error(ErrorCode),
}

/// A parsed reply: the token of the request it answers and the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ReplyRepr<'a> {
    /// Token of the request answered.
    pub token: u32,
    /// Type-specific part.
    pub body: Reply<'a>,
}

impl<'a> ReplyRepr<'a> {
    /// Parses a reply of any of the four reply types, checking every invariant.
    ///
    /// Never panics. ACK, DATA and ERROR may be followed by padding, which is ignored;
    /// BULK_DATA must be exact (payload length equal to the fragment length).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let Some(&first) = bytes.first() else {
            return Err(Error::Truncated);
        };
        match PacketType::from(first) {
            PacketType::BulkData => {
                let packet = Packet::new_checked(bytes)?;
                zero(u32::from(packet.sub()))?;
                let frag = Fragment::read(&packet);
                let len = packet.frag_len();
                frag.check(len)?;
                let data = packet.payload();
                if data.len() as u64 != u64::from(len) {
                    return Err(Error::BadFragment);
                }
                Ok(ReplyRepr {
                    token: packet.token(),
                    body: Reply::BulkData {
                        sender: packet.sender(),
                        frag,
                        data,
                    },
                })
            }
            ty @ (PacketType::Ack | PacketType::Data | PacketType::Error) => {
                let packet = ReplyPacket::new_checked(bytes)?;
                zero(u32::from(packet.flags()))?;
                let len = packet.payload_len();
                let body = match ty {
                    PacketType::Ack => {
                        zero(u32::from(packet.status()))?;
                        if len != 0 {
                            return Err(Error::BadLength);
                        }
                        Reply::Ack
                    }
                    PacketType::Data => {
                        zero(u32::from(packet.status()))?;
                        if len == 0 {
                            return Err(Error::BadLength);
                        }
                        if usize::from(len) > MAX_INLINE_DATA {
                            return Err(Error::TooLarge);
                        }
                        Reply::Data(packet.payload())
                    }
                    _ => {
                        if len != 0 {
                            return Err(Error::BadLength);
                        }
                        Reply::Error(ErrorCode::from(packet.status()))
                    }
                };
                Ok(ReplyRepr {
                    token: packet.token(),
                    body,
                })
            }
            PacketType::Unknown(t) => Err(Error::UnknownType(t)),
            other => Err(Error::UnexpectedType(other)),
        }
    }

    /// Length of the emitted packet.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        match self.body {
            Reply::Ack | Reply::Error(_) => REPLY_HEADER_LEN,
            Reply::Data(data) => REPLY_HEADER_LEN + data.len(),
            Reply::BulkData { data, .. } => HEADER_LEN + data.len(),
        }
    }

    /// Writes the reply into `buffer`.
    ///
    /// Panics if `buffer` is shorter than [`ReplyRepr::buffer_len`]. DATA must carry
    /// 1..=56 bytes and BULK_DATA a consistent fragment (debug builds assert it).
    pub fn emit(&self, buffer: &mut [u8]) {
        let (ty, status, data): (PacketType, u8, &[u8]) = match self.body {
            Reply::Ack => (PacketType::Ack, 0, &[]),
            Reply::Error(code) => (PacketType::Error, code.into(), &[]),
            Reply::Data(data) => {
                debug_assert!((1..=MAX_INLINE_DATA).contains(&data.len()));
                (PacketType::Data, 0, data)
            }
            Reply::BulkData { sender, frag, data } => {
                let len = len_u32(data.len());
                debug_assert!(frag.check(len).is_ok());
                let mut packet = Packet::new_unchecked(&mut buffer[..HEADER_LEN + data.len()]);
                packet.set_packet_type(PacketType::BulkData);
                packet.set_sub(0);
                packet.set_sender(sender);
                packet.set_token(self.token);
                frag.write(&mut packet, len);
                packet.payload_mut().copy_from_slice(data);
                return;
            }
        };
        emit_reply_header(buffer, ty, status, data.len() as u8, self.token);
        buffer[REPLY_HEADER_LEN..REPLY_HEADER_LEN + data.len()].copy_from_slice(data);
    }
}

/// Writes an 8-byte reply header (flags 0) into `buffer[..8]`; the caller writes the
/// payload after it. Panics if `buffer` is shorter than 8 bytes.
#[inline]
pub fn emit_reply_header(buffer: &mut [u8], ty: PacketType, status: u8, len: u8, token: u32) {
    let t = token.to_le_bytes();
    buffer[..REPLY_HEADER_LEN].copy_from_slice(&[
        ty.into(),
        status,
        len,
        0,
        t[0],
        t[1],
        t[2],
        t[3],
    ]);
}

/// Any packet: a request or a reply, chosen by byte 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Repr<'a> {
    /// A request (types `0x01..=0x09`).
    Request(RequestRepr<'a>),
    /// A reply (types `0x80..=0x83`).
    Reply(ReplyRepr<'a>),
}

impl<'a> Repr<'a> {
    /// Parses any packet. Never panics; unknown types give [`Error::UnknownType`].
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let Some(&first) = bytes.first() else {
            return Err(Error::Truncated);
        };
        let ty = PacketType::from(first);
        if ty.is_request() {
            RequestRepr::parse(&Packet::new_unchecked(bytes)).map(Repr::Request)
        } else if ty.is_reply() {
            ReplyRepr::parse(bytes).map(Repr::Reply)
        } else {
            Err(Error::UnknownType(first))
        }
    }

    /// Length of the emitted packet.
    pub fn buffer_len(&self) -> usize {
        match self {
            Repr::Request(r) => r.buffer_len(),
            Repr::Reply(r) => r.buffer_len(),
        }
    }

    /// Writes the packet into `buffer`; panics if it is shorter than
    /// [`Repr::buffer_len`].
    pub fn emit(&self, buffer: &mut [u8]) {
        match self {
            Repr::Request(r) => r.emit(&mut Packet::new_unchecked(buffer)),
            Repr::Reply(r) => r.emit(buffer),
        }
    }
}
