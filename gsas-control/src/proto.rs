//! The local control protocol between a PE (or a tool) and its node's atomic service.
//!
//! **What it is.** The messages that travel over the service's Unix `SOCK_SEQPACKET`
//! control socket, one message per packet, requests strictly answered in order. Requests
//! are gsas-core request packets ([`gsas_core::wire`]) where they fit; replies are gsas-core
//! reply packets, with descriptors attached by `SCM_RIGHTS`:
//!
//! | request | encoding | reply |
//! |---|---|---|
//! | Join | CONTROL `Join`, sender = rank, w1 = job id, w2 = job key, then a 16-byte [`JoinInfo`] | DATA [`ServiceInfo`] (with the PE's bell slot) + the service's doorbell (memfd, eventfd) |
//! | Leave | CONTROL `Leave`, sender = rank, w1 = job id | ACK; the PE is gone, its job reclaimed when it was the last |
//! | create segment | ALLOC, address = (own rank, segment id, 0), w2 = size > 0 | DATA (u64 size) + memfd |
//! | open a peer's segment | ALLOC, address = (peer rank, segment id, 0), w2 = 0 | DATA (u64 size) + memfd; ERROR(NoSegment) if the peer has not created it |
//! | open the peers' segments | CONTROL code [`OPEN_SEGMENTS_CODE`] (0x43), w1 = first rank | SEGMENTS (type [`SEGMENTS_REPLY`], a [`SegmentBatch`]) + one memfd per entry, in its order |
//! | free segment | FREE, address = (own rank, segment id, 0) | ACK |
//! | register segment | CONTROL `Register`, sender = rank, w1 = address (own rank, segment id, 0), w2 = size; the PE's own memfd attached (sealed against shrinking) | DATA (u64 size) |
//! | ping | CONTROL `Ping` | ACK |
//! | statistics | CONTROL code [`STATS_CODE`] (0x40) | STATS (type [`STATS_REPLY`], see below) |
//!
//! Everything but Ping and statistics needs a Join on the same connection first. CONTROL
//! codes from 0x40 are this runtime's own (gsas-core leaves the meaning of CONTROL to the
//! host and defines codes 1..=6).
//!
//! * An ERROR reply carries a human-readable reason after its 8-byte header (gsas-core
//!   treats bytes after a reply as padding, so the packet still parses).
//! * A STATS reply is `[0xC0, 0, 0, 0, token u32 LE]` followed by UTF-8 text, one
//!   `name value` pair per line (see [`crate::stats`]). A SEGMENTS reply is
//!   `[0xC1, 0, 0, 0, token u32 LE]` followed by a [`SegmentBatch`] (a DATA reply holds
//!   56 bytes at most).
//!
//! Register is how the data segment arrives: the PE must remap its globals onto a memfd
//! before any thread runs (an embedded service is a thread), so it creates that memfd
//! itself and hands it over; the service maps it only if the file is sealed against
//! shrinking (`F_SEAL_SHRINK`), so the PE cannot make the service's accesses fault.
//!
//! A ring segment (3) is created with `w2 = slots << 32 | slot size` instead of a size.
//!
//! Segment ids: [`SEG_HEAP`] (0, symmetric heap), [`SEG_DATA`] (1, the remapped data
//! segment), [`SEG_SYNC`] (2, runtime synchronisation area of [`SYNC_SIZE`] bytes),
//! [`SEG_RING`] (3, the PE's request ring when it uses the shm-ring transport).
//!
//! **What it is not.** No I/O: [`ControlRequest::emit`]/[`ControlRequest::parse`] and
//! [`ControlReply::emit`]/[`ControlReply::parse`] work on byte buffers; the service and
//! the node client move them with [`gsas_transport::shm::send_fds`] and [`gsas_transport::shm::recv_fds`].
//!
//! **No-panic contract.** Parsing any bytes returns a [`ProtoError`], never panics (a unit
//! test feeds it garbage). Emitting needs a buffer of [`MAX_MESSAGE`] bytes.
//!
//! **Thread safety.** Plain data.
//!
//! ```
//! use gsas_control::proto::{ControlRequest, JoinInfo};
//!
//! let join = ControlRequest::Join {
//!     rank: 3,
//!     job_id: 0x1234,
//!     job_key: 0xfeed,
//!     info: JoinInfo { npes: 8, node: 0, flags: 0 },
//! };
//! let mut buf = [0u8; gsas_control::proto::MAX_MESSAGE];
//! let n = join.emit(7, &mut buf);
//! assert_eq!(ControlRequest::parse(&buf[..n]).unwrap(), (7, join));
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use gsas_transport::exanet::{ExanetSite, ExanetSource};

use gsas_core::wire::{
    ControlCode, ErrorCode, GlobalAddr, HEADER_LEN, Packet, PacketType, REPLY_HEADER_LEN, Reply,
    ReplyRepr, Request, RequestRepr, SenderId,
};

/// Largest control message in either direction.
pub const MAX_MESSAGE: usize = 4096;
/// CONTROL code of the statistics request.
pub const STATS_CODE: u8 = 0x40;
/// Packet type of the statistics reply.
pub const STATS_REPLY: u8 = 0xC0;
/// Packet type of the reply to [`ControlRequest::OpenSegments`].
pub const SEGMENTS_REPLY: u8 = 0xC1;
/// CONTROL code of [`ControlRequest::Declare`] (an allocation, from the resource manager).
pub const DECLARE_CODE: u8 = 0x41;
/// CONTROL code of [`ControlRequest::Undeclare`].
pub const UNDECLARE_CODE: u8 = 0x42;
/// CONTROL code of [`ControlRequest::OpenSegments`].
pub const OPEN_SEGMENTS_CODE: u8 = 0x43;
/// Bytes after the packet of a Declare: version, 2 spare, uid, PEs on this node, PEs of a job.
const DECLARE_LEN: usize = 16;
/// Version of the control protocol, carried by [`JoinInfo`] and [`ServiceInfo`]: a service
/// refuses a Join of another version, with both versions in the message. 2 added
/// [`ControlRequest::OpenSegments`].
pub const PROTO_VERSION: u16 = 2;

/// Segment id of the symmetric heap.
pub const SEG_HEAP: u8 = 0;
/// Segment id of the remapped data segment (C globals and statics).
pub const SEG_DATA: u8 = 1;
/// Segment id of the runtime synchronisation area.
pub const SEG_SYNC: u8 = 2;
/// Segment id of the PE's request ring (shm-ring transport to its service).
pub const SEG_RING: u8 = 3;
/// Number of segment ids a PE can have.
pub const SEGMENTS: usize = 4;
/// Size of the synchronisation segment.
pub const SYNC_SIZE: u64 = 1 << 20;

/// Flag of [`JoinInfo::flags`]: the PE will create a request ring and wants it served.
pub const JOIN_RING: u16 = 1;

/// One segment of a [`SegmentBatch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentEntry {
    /// The PE it belongs to.
    pub pe: u16,
    /// Segment id ([`SEG_HEAP`], [`SEG_DATA`] or [`SEG_SYNC`]).
    pub segment: u8,
    /// Its size in bytes.
    pub size: u64,
}

/// The bytes of an [`ControlRequest::OpenSegments`] reply ([`ControlReply::Segments`]): `next` as u32 LE (the rank the
/// next request starts from, `u32::MAX` when no PE is left), then 12 bytes per entry
/// (rank u16 LE, segment id, 0, size u64 LE). The descriptors travel beside it, one per
/// entry in the same order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentBatch {
    /// Where the next request starts; `None`: every PE was answered.
    pub next: Option<u16>,
    /// The segments, in rank order.
    pub entries: Vec<SegmentEntry>,
}

/// Bytes of one [`SegmentEntry`] in a [`SegmentBatch`].
const ENTRY_LEN: usize = 12;

impl SegmentBatch {
    /// The DATA bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4 + ENTRY_LEN * self.entries.len());
        b.extend_from_slice(&self.next.map_or(u32::MAX, u32::from).to_le_bytes());
        for e in &self.entries {
            b.extend_from_slice(&e.pe.to_le_bytes());
            b.extend_from_slice(&[e.segment, 0]);
            b.extend_from_slice(&e.size.to_le_bytes());
        }
        b
    }

    /// Parses the DATA bytes. Never panics.
    pub fn decode(b: &[u8]) -> Result<SegmentBatch, ProtoError> {
        let (head, rest) = b.split_at_checked(4).ok_or(ProtoError::Truncated)?;
        if rest.len() % ENTRY_LEN != 0 {
            return Err(ProtoError::Malformed(format!(
                "a segment batch of {} bytes",
                b.len()
            )));
        }
        let next = match u32::from_le_bytes([head[0], head[1], head[2], head[3]]) {
            u32::MAX => None,
            n => Some(u16::try_from(n).map_err(|_| {
                ProtoError::Malformed(format!("a segment batch continuing at rank {n}"))
            })?),
        };
        let entries = rest
            .chunks_exact(ENTRY_LEN)
            .map(|c| SegmentEntry {
                pe: u16::from_le_bytes([c[0], c[1]]),
                segment: c[2],
                size: u64::from_le_bytes(c[4..12].try_into().unwrap_or([0; 8])),
            })
            .collect();
        Ok(SegmentBatch { next, entries })
    }
}

/// Bytes of [`JoinInfo`] after the 32-byte CONTROL header.
const JOIN_INFO_LEN: usize = 16;
/// Bytes of [`ServiceInfo`].
const SERVICE_INFO_LEN: usize = 36;
/// [`ServiceInfo::bell`] on the wire when there is none.
const NO_BELL: u32 = u32::MAX;
/// Bytes of the fixed part of [`ServiceInfo`]'s Exanet extension.
const EXANET_EXT_LEN: usize = 10;

/// What a PE tells the service when it joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinInfo {
    /// Number of PEs in the job.
    pub npes: u32,
    /// The node the PE believes it runs on (the service checks it is its own).
    pub node: u16,
    /// [`JOIN_RING`] or 0.
    pub flags: u16,
}

/// What the service tells a PE that joined.
///
/// Encoding: 32 bytes (version, node, UDP address, pid, MTU); a service on Exanet appends
/// 10 bytes: kind (1 UIO devices, 2 emulated), a reserved byte, the endpoint count (u16),
/// the coordinate (u32) and the emulated node (u16). (A control reply carries at most 56
/// bytes: the emulator root and the device names are not sent; a PE takes them from its
/// own `GSAS_EXANET_EMU` and cluster file.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    /// The service's node id.
    pub node: u16,
    /// Where other nodes' PEs reach the service (its bound UDP address).
    pub udp: SocketAddr,
    /// The service's process id (for messages).
    pub pid: u32,
    /// Largest UDP payload the service sends and accepts.
    pub udp_mtu: u32,
    /// The PE's slot in the doorbell page: the [`Bell`](gsas_transport::bell::Bell) at
    /// [`slot_offset`](gsas_transport::bell::slot_offset) that the service rings after updating the
    /// PE's memory. `None` when the page has no free slot (waits then sleep unrung).
    pub bell: Option<u32>,
    /// The node's Exanet endpoints when the service serves other nodes over Exanet
    /// (endpoint 0 is the service's; a PE opens endpoint 1 + its index among the node's
    /// PEs of the job).
    pub exanet: Option<ExanetInfo>,
}

/// A service's Exanet endpoints as its PEs learn them (see [`ServiceInfo`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExanetInfo {
    /// The node's coordinate.
    pub coord: u32,
    /// Its endpoint count (0 is the service's).
    pub endpoints: u16,
    /// `Some(node)`: endpoints of that node of an emulator; `None`: UIO devices.
    pub emulated: Option<u16>,
}

impl ExanetInfo {
    /// What a service on `site` tells its PEs.
    pub fn of(site: &ExanetSite) -> ExanetInfo {
        ExanetInfo {
            coord: site.coord,
            endpoints: site.endpoints,
            emulated: match &site.source {
                ExanetSource::Emulated { node, .. } => Some(*node),
                ExanetSource::Uio { .. } => None,
            },
        }
    }
}

impl ServiceInfo {
    /// Writes the encoding (36 bytes, more with Exanet endpoints).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SERVICE_INFO_LEN];
        b[0..2].copy_from_slice(&PROTO_VERSION.to_le_bytes());
        b[2..4].copy_from_slice(&self.node.to_le_bytes());
        b[4..6].copy_from_slice(&self.udp.port().to_le_bytes());
        match self.udp.ip() {
            IpAddr::V4(a) => {
                b[6] = 4;
                b[8..12].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                b[6] = 6;
                b[8..24].copy_from_slice(&a.octets());
            }
        }
        b[24..28].copy_from_slice(&self.pid.to_le_bytes());
        b[28..32].copy_from_slice(&self.udp_mtu.to_le_bytes());
        b[32..36].copy_from_slice(&self.bell.unwrap_or(NO_BELL).to_le_bytes());
        if let Some(x) = &self.exanet {
            let kind = if x.emulated.is_some() { 2u8 } else { 1 };
            b.extend_from_slice(&[kind, 0]);
            b.extend_from_slice(&x.endpoints.to_le_bytes());
            b.extend_from_slice(&x.coord.to_le_bytes());
            b.extend_from_slice(&x.emulated.unwrap_or(0).to_le_bytes());
        }
        b
    }

    /// Reads the encoding written by [`ServiceInfo::encode`].
    pub fn decode(bytes: &[u8]) -> Result<ServiceInfo, ProtoError> {
        if bytes.len() < SERVICE_INFO_LEN {
            return Err(ProtoError::Truncated);
        }
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        if u16_at(0) != PROTO_VERSION {
            return Err(ProtoError::Version(u16_at(0)));
        }
        let ip = match bytes[6] {
            4 => IpAddr::V4(Ipv4Addr::new(bytes[8], bytes[9], bytes[10], bytes[11])),
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&bytes[8..24]);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            other => return Err(ProtoError::Malformed(format!("address family {other}"))),
        };
        let exanet = match &bytes[SERVICE_INFO_LEN..] {
            [] => None,
            ext if ext.len() < EXANET_EXT_LEN => return Err(ProtoError::Truncated),
            ext => {
                let emulated = match ext[0] {
                    1 => None,
                    2 => Some(u16::from_le_bytes([ext[8], ext[9]])),
                    k => return Err(ProtoError::Malformed(format!("Exanet endpoint kind {k}"))),
                };
                Some(ExanetInfo {
                    coord: u32::from_le_bytes([ext[4], ext[5], ext[6], ext[7]]),
                    endpoints: u16::from_le_bytes([ext[2], ext[3]]),
                    emulated,
                })
            }
        };
        Ok(ServiceInfo {
            node: u16_at(2),
            udp: SocketAddr::new(ip, u16_at(4)),
            pid: u32_at(24),
            udp_mtu: u32_at(28),
            bell: Some(u32_at(32)).filter(|&b| b != NO_BELL),
            exanet,
        })
    }
}

/// A request on the control socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlRequest {
    /// Join a job as PE `rank`.
    Join {
        /// The PE's rank.
        rank: u16,
        /// Job id.
        job_id: u64,
        /// Job key.
        job_key: u64,
        /// Further details.
        info: JoinInfo,
    },
    /// Leave the job.
    Leave {
        /// The PE's rank.
        rank: u16,
        /// Job id.
        job_id: u64,
    },
    /// Create segment `segment` of `size` bytes for PE `pe` (the caller itself).
    CreateSegment {
        /// The caller's rank.
        pe: u16,
        /// Segment id.
        segment: u8,
        /// Size in bytes (> 0).
        size: u64,
    },
    /// Get the descriptor of segment `segment` of PE `pe` of the caller's job.
    OpenSegment {
        /// The PE whose segment is wanted.
        pe: u16,
        /// Segment id.
        segment: u8,
    },
    /// Register the caller's own memfd (attached) as segment `segment` of `size` bytes.
    RegisterSegment {
        /// The caller's rank.
        pe: u16,
        /// Segment id.
        segment: u8,
        /// Size in bytes (> 0).
        size: u64,
    },
    /// Drop segment `segment` of PE `pe` (the caller itself).
    FreeSegment {
        /// The caller's rank.
        pe: u16,
        /// Segment id.
        segment: u8,
    },
    /// The heap, data and sync segments of the other PEs of the caller's job on this node,
    /// from rank `from` on, in rank order: as many whole PEs as one reply's descriptors
    /// ([`gsas_transport::shm::MAX_FDS`]) carry. The reply ([`SegmentBatch`]) says where the
    /// next request starts. A start-up of N PEs on one node then costs each PE about
    /// 3N / `MAX_FDS` round trips through the service instead of 3(N - 1).
    OpenSegments {
        /// The first rank to consider.
        from: u16,
    },
    /// Liveness probe.
    Ping,
    /// Ask for the service's counters.
    Stats,
    /// An allocation on this node, declared by the resource manager (root): user `uid` may
    /// run up to `pes` PEs here, in jobs of up to `job_pes` PEs (0: no bound beyond the
    /// service's), with up to `memory` bytes of segments (0: the per-user share). Replaces
    /// an allocation of the same `id`.
    Declare {
        /// The allocation's id (e.g. the Slurm job id).
        id: u64,
        /// The user it is for.
        uid: u32,
        /// PEs the user may run on this node under it.
        pes: u32,
        /// The largest job (all nodes) it allows; 0: any.
        job_pes: u32,
        /// Bytes of segments it allows on this node; 0: the per-user share.
        memory: u64,
    },
    /// Ends allocation `id` (running PEs go on; no new PE joins under it).
    Undeclare {
        /// The allocation's id.
        id: u64,
    },
}

/// Why a control message did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// Shorter than its layout.
    Truncated,
    /// Not a gsas-core packet of an accepted kind.
    Wire(gsas_core::wire::Error),
    /// A gsas-core packet that is not a control request or reply.
    Unexpected(String),
    /// A field is out of range.
    Malformed(String),
    /// A version this service does not speak.
    Version(u16),
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::Truncated => f.write_str("control message truncated"),
            ProtoError::Wire(e) => write!(f, "control message does not parse: {e}"),
            ProtoError::Unexpected(what) => write!(f, "unexpected control message: {what}"),
            ProtoError::Malformed(what) => write!(f, "malformed control message: {what}"),
            ProtoError::Version(v) => write!(
                f,
                "control protocol version {v} (this build speaks {PROTO_VERSION})"
            ),
        }
    }
}

impl std::error::Error for ProtoError {}

impl ProtoError {
    /// The ERROR code the service answers this with.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtoError::Wire(e) => e.code(),
            ProtoError::Version(_) => ErrorCode::NotSupported,
            ProtoError::Unexpected(_) => ErrorCode::NotSupported,
            ProtoError::Truncated | ProtoError::Malformed(_) => ErrorCode::Malformed,
        }
    }
}

/// The longest trailer of a request (Join's or Declare's).
const TRAILER_MAX: usize = if JOIN_INFO_LEN > DECLARE_LEN {
    JOIN_INFO_LEN
} else {
    DECLARE_LEN
};

fn seg_addr(pe: u16, segment: u8) -> GlobalAddr {
    GlobalAddr::new(pe, segment, 0).unwrap_or(GlobalAddr::from_raw(0))
}

impl ControlRequest {
    /// Writes the request with `token` into `buf` (at least [`MAX_MESSAGE`] bytes, or
    /// 48 bytes, the longest request) and returns its length.
    pub fn emit(&self, token: u32, buf: &mut [u8]) -> usize {
        let sender = |rank: u16| SenderId::new(u64::from(rank)).unwrap_or_default();
        let control = |code, arg0, arg1| Request::Control { code, arg0, arg1 };
        let anyone = SenderId::default();
        // Join and Declare carry a trailer after the gsas request.
        let mut t = [0u8; TRAILER_MAX];
        let mut trailer_len = 0;
        let (from, body) = match *self {
            ControlRequest::Join {
                rank,
                job_id,
                job_key,
                info,
            } => {
                t[0..2].copy_from_slice(&PROTO_VERSION.to_le_bytes());
                t[2..4].copy_from_slice(&info.node.to_le_bytes());
                t[4..8].copy_from_slice(&info.npes.to_le_bytes());
                t[8..10].copy_from_slice(&info.flags.to_le_bytes());
                trailer_len = JOIN_INFO_LEN;
                (sender(rank), control(ControlCode::Join, job_id, job_key))
            }
            ControlRequest::Leave { rank, job_id } => {
                (sender(rank), control(ControlCode::Leave, job_id, 0))
            }
            ControlRequest::CreateSegment { pe, segment, size } => (
                sender(pe),
                Request::Alloc {
                    addr: seg_addr(pe, segment),
                    size,
                },
            ),
            ControlRequest::OpenSegment { pe, segment } => (
                anyone,
                Request::Alloc {
                    addr: seg_addr(pe, segment),
                    size: 0,
                },
            ),
            ControlRequest::RegisterSegment { pe, segment, size } => (
                sender(pe),
                control(ControlCode::Register, seg_addr(pe, segment).raw(), size),
            ),
            ControlRequest::FreeSegment { pe, segment } => (
                sender(pe),
                Request::Free {
                    addr: seg_addr(pe, segment),
                },
            ),
            ControlRequest::OpenSegments { from } => (
                anyone,
                control(ControlCode::Unknown(OPEN_SEGMENTS_CODE), u64::from(from), 0),
            ),
            ControlRequest::Ping => (anyone, control(ControlCode::Ping, 0, 0)),
            ControlRequest::Stats => (anyone, control(ControlCode::Unknown(STATS_CODE), 0, 0)),
            ControlRequest::Declare {
                id,
                uid,
                pes,
                job_pes,
                memory,
            } => {
                t[0..2].copy_from_slice(&PROTO_VERSION.to_le_bytes());
                t[4..8].copy_from_slice(&uid.to_le_bytes());
                t[8..12].copy_from_slice(&pes.to_le_bytes());
                t[12..16].copy_from_slice(&job_pes.to_le_bytes());
                trailer_len = DECLARE_LEN;
                (
                    anyone,
                    control(ControlCode::Unknown(DECLARE_CODE), id, memory),
                )
            }
            ControlRequest::Undeclare { id } => {
                (anyone, control(ControlCode::Unknown(UNDECLARE_CODE), id, 0))
            }
        };
        let repr = RequestRepr {
            sender: from,
            token,
            body,
        };
        let n = repr.buffer_len();
        repr.emit(&mut Packet::new_unchecked(&mut buf[..n]));
        buf[n..n + trailer_len].copy_from_slice(&t[..trailer_len]);
        n + trailer_len
    }

    /// Parses a request; returns its token and the request. Never panics.
    pub fn parse(bytes: &[u8]) -> Result<(u32, ControlRequest), ProtoError> {
        let repr = RequestRepr::parse(&Packet::new_checked(bytes).map_err(ProtoError::Wire)?)
            .map_err(ProtoError::Wire)?;
        let rank = || {
            u16::try_from(repr.sender.get()).map_err(|_| {
                ProtoError::Malformed(format!("rank {} above 65535", repr.sender.get()))
            })
        };
        let req = match repr.body {
            Request::Control {
                code: ControlCode::Join,
                arg0,
                arg1,
            } => {
                let t = bytes
                    .get(HEADER_LEN..HEADER_LEN + JOIN_INFO_LEN)
                    .ok_or(ProtoError::Truncated)?;
                let version = u16::from_le_bytes([t[0], t[1]]);
                if version != PROTO_VERSION {
                    return Err(ProtoError::Version(version));
                }
                ControlRequest::Join {
                    rank: rank()?,
                    job_id: arg0,
                    job_key: arg1,
                    info: JoinInfo {
                        node: u16::from_le_bytes([t[2], t[3]]),
                        npes: u32::from_le_bytes([t[4], t[5], t[6], t[7]]),
                        flags: u16::from_le_bytes([t[8], t[9]]),
                    },
                }
            }
            Request::Control {
                code: ControlCode::Leave,
                arg0,
                ..
            } => ControlRequest::Leave {
                rank: rank()?,
                job_id: arg0,
            },
            Request::Control {
                code: ControlCode::Ping,
                ..
            } => ControlRequest::Ping,
            Request::Control {
                code: ControlCode::Register,
                arg0,
                arg1,
            } => {
                let addr = GlobalAddr::from_raw(arg0);
                if addr.offset() != 0 || arg1 == 0 {
                    return Err(ProtoError::Malformed(
                        "Register needs a segment address with offset 0 and a size".into(),
                    ));
                }
                ControlRequest::RegisterSegment {
                    pe: addr.pe(),
                    segment: addr.segment(),
                    size: arg1,
                }
            }
            Request::Control {
                code: ControlCode::Unknown(STATS_CODE),
                ..
            } => ControlRequest::Stats,
            Request::Control {
                code: ControlCode::Unknown(DECLARE_CODE),
                arg0,
                arg1,
            } => {
                let t = bytes
                    .get(HEADER_LEN..HEADER_LEN + DECLARE_LEN)
                    .ok_or(ProtoError::Truncated)?;
                let version = u16::from_le_bytes([t[0], t[1]]);
                if version != PROTO_VERSION {
                    return Err(ProtoError::Version(version));
                }
                let word = |at: usize| u32::from_le_bytes([t[at], t[at + 1], t[at + 2], t[at + 3]]);
                let pes = word(8);
                if pes == 0 {
                    return Err(ProtoError::Malformed(
                        "an allocation of 0 PEs (end one with Undeclare)".into(),
                    ));
                }
                ControlRequest::Declare {
                    id: arg0,
                    uid: word(4),
                    pes,
                    job_pes: word(12),
                    memory: arg1,
                }
            }
            Request::Control {
                code: ControlCode::Unknown(UNDECLARE_CODE),
                arg0,
                ..
            } => ControlRequest::Undeclare { id: arg0 },
            Request::Control {
                code: ControlCode::Unknown(OPEN_SEGMENTS_CODE),
                arg0,
                ..
            } => ControlRequest::OpenSegments {
                from: u16::try_from(arg0)
                    .map_err(|_| ProtoError::Malformed(format!("OpenSegments from rank {arg0}")))?,
            },
            Request::Control { code, .. } => {
                return Err(ProtoError::Unexpected(format!(
                    "CONTROL code {}",
                    u8::from(code)
                )));
            }
            Request::Alloc { addr, size } if addr.offset() == 0 => {
                if size == 0 {
                    ControlRequest::OpenSegment {
                        pe: addr.pe(),
                        segment: addr.segment(),
                    }
                } else {
                    ControlRequest::CreateSegment {
                        pe: addr.pe(),
                        segment: addr.segment(),
                        size,
                    }
                }
            }
            Request::Free { addr } if addr.offset() == 0 => ControlRequest::FreeSegment {
                pe: addr.pe(),
                segment: addr.segment(),
            },
            Request::Alloc { .. } | Request::Free { .. } => {
                return Err(ProtoError::Malformed(
                    "segment address with a non-zero offset".into(),
                ));
            }
            other => {
                return Err(ProtoError::Unexpected(format!(
                    "{:?} request",
                    other.packet_type()
                )));
            }
        };
        Ok((repr.token, req))
    }
}

/// A reply on the control socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlReply<'a> {
    /// Done, nothing to return.
    Ack,
    /// Done, with 1..=56 bytes.
    Data(&'a [u8]),
    /// Refused.
    Error {
        /// The reason code.
        code: ErrorCode,
        /// A human-readable reason (may be empty).
        message: &'a str,
    },
    /// The counters, as text.
    Stats(&'a str),
    /// An encoded [`SegmentBatch`].
    Segments(&'a [u8]),
}

impl<'a> ControlReply<'a> {
    /// Writes the reply with `token` into `buf` ([`MAX_MESSAGE`] bytes); returns its length.
    /// Messages and statistics longer than the buffer are cut at a character boundary.
    pub fn emit(&self, token: u32, buf: &mut [u8]) -> usize {
        let text = |buf: &mut [u8], s: &str, at: usize| {
            let mut n = s.len().min(buf.len().saturating_sub(at));
            while !s.is_char_boundary(n) {
                n -= 1;
            }
            buf[at..at + n].copy_from_slice(&s.as_bytes()[..n]);
            at + n
        };
        match *self {
            ControlReply::Ack => {
                let r = ReplyRepr {
                    token,
                    body: Reply::Ack,
                };
                r.emit(buf);
                r.buffer_len()
            }
            ControlReply::Data(d) => {
                let r = ReplyRepr {
                    token,
                    body: Reply::Data(d),
                };
                r.emit(buf);
                r.buffer_len()
            }
            ControlReply::Error { code, message } => {
                let r = ReplyRepr {
                    token,
                    body: Reply::Error(code),
                };
                r.emit(buf);
                text(buf, message, REPLY_HEADER_LEN)
            }
            ControlReply::Stats(s) => {
                buf[..8].copy_from_slice(&[STATS_REPLY, 0, 0, 0, 0, 0, 0, 0]);
                buf[4..8].copy_from_slice(&token.to_le_bytes());
                text(buf, s, 8)
            }
            ControlReply::Segments(b) => {
                buf[..8].copy_from_slice(&[SEGMENTS_REPLY, 0, 0, 0, 0, 0, 0, 0]);
                buf[4..8].copy_from_slice(&token.to_le_bytes());
                let n = b.len().min(buf.len() - 8);
                buf[8..8 + n].copy_from_slice(&b[..n]);
                8 + n
            }
        }
    }

    /// Parses a reply; returns its token and the reply. Never panics.
    pub fn parse(bytes: &'a [u8]) -> Result<(u32, ControlReply<'a>), ProtoError> {
        if bytes.first() == Some(&STATS_REPLY) {
            let head = bytes.get(..8).ok_or(ProtoError::Truncated)?;
            let token = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            let text = std::str::from_utf8(&bytes[8..])
                .map_err(|_| ProtoError::Malformed("statistics are not UTF-8".into()))?;
            return Ok((token, ControlReply::Stats(text)));
        }
        if bytes.first() == Some(&SEGMENTS_REPLY) {
            let head = bytes.get(..8).ok_or(ProtoError::Truncated)?;
            let token = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            return Ok((token, ControlReply::Segments(&bytes[8..])));
        }
        let repr = ReplyRepr::parse(bytes).map_err(ProtoError::Wire)?;
        let reply = match repr.body {
            Reply::Ack => ControlReply::Ack,
            Reply::Data(d) => ControlReply::Data(d),
            Reply::Error(code) => ControlReply::Error {
                code,
                message: std::str::from_utf8(&bytes[REPLY_HEADER_LEN..]).unwrap_or(""),
            },
            Reply::BulkData { .. } => {
                return Err(ProtoError::Unexpected(format!(
                    "{:?} reply",
                    PacketType::BulkData
                )));
            }
        };
        Ok((repr.token, reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(req: ControlRequest) {
        let mut buf = [0u8; MAX_MESSAGE];
        let n = req.emit(99, &mut buf);
        assert_eq!(ControlRequest::parse(&buf[..n]), Ok((99, req)), "{req:?}");
    }

    #[test]
    fn requests_round_trip() {
        round_trip(ControlRequest::Join {
            rank: 65535,
            job_id: u64::MAX,
            job_key: 1,
            info: JoinInfo {
                npes: 65536,
                node: 7,
                flags: JOIN_RING,
            },
        });
        round_trip(ControlRequest::Leave { rank: 2, job_id: 5 });
        round_trip(ControlRequest::CreateSegment {
            pe: 4,
            segment: SEG_SYNC,
            size: SYNC_SIZE,
        });
        round_trip(ControlRequest::OpenSegment { pe: 9, segment: 0 });
        round_trip(ControlRequest::FreeSegment { pe: 9, segment: 3 });
        round_trip(ControlRequest::RegisterSegment {
            pe: 9,
            segment: SEG_DATA,
            size: 8192,
        });
        round_trip(ControlRequest::Ping);
        round_trip(ControlRequest::Stats);
        round_trip(ControlRequest::Declare {
            id: u64::MAX,
            uid: 65534,
            pes: u32::MAX,
            job_pes: 0,
            memory: 1 << 40,
        });
        round_trip(ControlRequest::Undeclare { id: 12345 });
        round_trip(ControlRequest::OpenSegments { from: 0 });
        round_trip(ControlRequest::OpenSegments { from: u16::MAX });
        // A rank beyond 16 bits is refused.
        let mut buf = [0u8; MAX_MESSAGE];
        let n = ControlRequest::OpenSegments { from: 1 }.emit(1, &mut buf);
        buf[8..16].copy_from_slice(&65536u64.to_le_bytes());
        assert!(matches!(
            ControlRequest::parse(&buf[..n]),
            Err(ProtoError::Malformed(m)) if m.contains("65536")
        ));
        // An allocation of no PEs, or a Declare cut short, is refused.
        let mut buf = [0u8; MAX_MESSAGE];
        let bad = ControlRequest::Declare {
            id: 1,
            uid: 1,
            pes: 1,
            job_pes: 0,
            memory: 0,
        };
        let n = bad.emit(1, &mut buf);
        assert_eq!(
            ControlRequest::parse(&buf[..n - 1]),
            Err(ProtoError::Truncated)
        );
        buf[n - 8..n - 4].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            ControlRequest::parse(&buf[..n]),
            Err(ProtoError::Malformed(m)) if m.contains("0 PEs")
        ));
    }

    #[test]
    fn segment_batches_round_trip_and_garbage_is_refused() {
        for batch in [
            SegmentBatch::default(),
            SegmentBatch {
                next: Some(11),
                entries: vec![
                    SegmentEntry {
                        pe: 0,
                        segment: SEG_HEAP,
                        size: 8 << 20,
                    },
                    SegmentEntry {
                        pe: 65535,
                        segment: SEG_SYNC,
                        size: u64::MAX,
                    },
                ],
            },
            SegmentBatch {
                next: Some(u16::MAX),
                entries: Vec::new(),
            },
        ] {
            let b = batch.encode();
            assert_eq!(b.len(), 4 + 12 * batch.entries.len());
            assert_eq!(SegmentBatch::decode(&b), Ok(batch));
        }
        assert_eq!(SegmentBatch::decode(&[1, 2]), Err(ProtoError::Truncated));
        assert!(matches!(
            SegmentBatch::decode(&[0; 4 + 11]),
            Err(ProtoError::Malformed(m)) if m.contains("15 bytes")
        ));
        assert!(matches!(
            SegmentBatch::decode(&70000u32.to_le_bytes()),
            Err(ProtoError::Malformed(m)) if m.contains("70000")
        ));
    }

    #[test]
    fn replies_round_trip() {
        let mut buf = [0u8; MAX_MESSAGE];
        for r in [
            ControlReply::Ack,
            ControlReply::Data(&[1, 2, 3]),
            ControlReply::Error {
                code: ErrorCode::TooLarge,
                message: "segment 0 of 2.0 TiB exceeds the limit",
            },
            ControlReply::Error {
                code: ErrorCode::BadKey,
                message: "",
            },
            ControlReply::Stats("requests.read 5\nrefused.bad_key 1\n"),
            ControlReply::Segments(&[]),
            ControlReply::Segments(&[7; 388]),
        ] {
            let n = r.emit(3, &mut buf);
            assert_eq!(ControlReply::parse(&buf[..n]), Ok((3, r)));
        }
        let long = "x".repeat(2 * MAX_MESSAGE);
        let n = ControlReply::Stats(&long).emit(1, &mut buf);
        assert_eq!(n, MAX_MESSAGE);
    }

    #[test]
    fn service_info_round_trips_both_families() {
        for (udp, bell) in [
            ("127.0.0.1:7470", Some(0)),
            ("[::1]:9", None),
            ("[::1]:9", Some(77)),
        ] {
            let info = ServiceInfo {
                node: 3,
                udp: udp.parse().unwrap(),
                pid: 42,
                udp_mtu: 61440,
                bell,
                exanet: None,
            };
            assert_eq!(ServiceInfo::decode(&info.encode()), Ok(info));
        }
        for source in [
            ExanetSource::Uio {
                devices: vec!["exanet-ep0".into(), "exanet-ep1".into()],
            },
            ExanetSource::Emulated {
                root: "/tmp/exa root".into(),
                node: 3,
            },
        ] {
            let site = ExanetSite {
                source,
                coord: 0x3000,
                endpoints: 5,
            };
            let info = ServiceInfo {
                node: 3,
                udp: "[::1]:1".parse().unwrap(),
                pid: 42,
                udp_mtu: 61440,
                bell: Some(7),
                exanet: Some(ExanetInfo::of(&site)),
            };
            let bytes = info.encode();
            // It fits a control reply's DATA.
            assert!(bytes.len() <= gsas_core::wire::MAX_INLINE_DATA);
            assert_eq!(ServiceInfo::decode(&bytes), Ok(info));
            assert_eq!(
                ServiceInfo::decode(&bytes[..SERVICE_INFO_LEN + 4]),
                Err(ProtoError::Truncated)
            );
        }
        assert_eq!(
            ServiceInfo::decode(&[0; SERVICE_INFO_LEN - 1]),
            Err(ProtoError::Truncated)
        );
        assert_eq!(ServiceInfo::decode(&[0; 5]), Err(ProtoError::Truncated));
        let mut bad = ServiceInfo {
            node: 0,
            udp: "1.2.3.4:5".parse().unwrap(),
            pid: 0,
            udp_mtu: 0,
            bell: None,
            exanet: None,
        }
        .encode();
        bad[6] = 9;
        assert!(matches!(
            ServiceInfo::decode(&bad),
            Err(ProtoError::Malformed(_))
        ));
    }

    #[test]
    fn refusals_are_typed() {
        let mut buf = [0u8; MAX_MESSAGE];
        // A READ is a valid gsas-core packet but not a control request.
        let read = RequestRepr {
            sender: SenderId::default(),
            token: 1,
            body: Request::Read {
                addr: GlobalAddr::from_raw(0),
                len: 8,
            },
        };
        read.emit(&mut Packet::new_unchecked(&mut buf[..32]));
        let e = ControlRequest::parse(&buf[..32]).unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotSupported);
        // A Join without its trailer.
        let n = ControlRequest::Join {
            rank: 0,
            job_id: 1,
            job_key: 2,
            info: JoinInfo {
                npes: 1,
                node: 0,
                flags: 0,
            },
        }
        .emit(0, &mut buf);
        assert_eq!(
            ControlRequest::parse(&buf[..n - 1]),
            Err(ProtoError::Truncated)
        );
        // A segment address with an offset.
        let alloc = RequestRepr {
            sender: SenderId::default(),
            token: 1,
            body: Request::Alloc {
                addr: GlobalAddr::new(0, 0, 8).unwrap(),
                size: 1,
            },
        };
        alloc.emit(&mut Packet::new_unchecked(&mut buf[..32]));
        assert!(matches!(
            ControlRequest::parse(&buf[..32]),
            Err(ProtoError::Malformed(_))
        ));
    }

    #[test]
    fn garbage_never_panics() {
        // A deterministic xorshift stream of lengths and bytes, including valid type bytes.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut buf = vec![0u8; 256];
        for _ in 0..20_000 {
            let len = (next() % 80) as usize;
            for b in &mut buf[..len] {
                *b = next() as u8;
            }
            if len > 0 && next() % 2 == 0 {
                buf[0] = [0x06, 0x07, 0x09, 0x80, 0x81, 0x83, STATS_REPLY][(next() % 7) as usize];
            }
            let _ = ControlRequest::parse(&buf[..len]);
            let _ = ControlReply::parse(&buf[..len]);
            let _ = ServiceInfo::decode(&buf[..len]);
        }
    }
}
