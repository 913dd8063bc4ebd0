//! Register blocks and field constants of the four endpoint maps (`EXA-NI-EMU v0`).
//!
//! What it is: the single place that knows the layout of the model
//! (`exanet-ni-model.md`): map0 `regs` (section 3), map1 `mbox` (section 4), map2 `pktz`
//! (section 5) and map3 `rdma` (section 6), as `#[repr(C)]` structs of
//! `volatile_register::{RO, RW}` cells, with every offset checked at compile time by
//! `core::mem::offset_of!` against the model's tables. The offset constants in [`off`] are
//! *derived* from the structs, so the register-access code and the structs cannot disagree.
//! Field, bit and code constants of every register, descriptor, record, metadata word and
//! notification follow (sections 3 to 7). When real hardware documentation appears, this
//! module is the one to change.
//!
//! Using the structs directly (`&RegsBlock` over a mapping) is sound because no register of
//! the model has a read side effect (model section 0, principle 3): a volatile read of any
//! cell is harmless. The driver itself goes through [`crate::io::RegIo`] with the offsets,
//! so that the same code runs over the emulator's shared memory and the in-process model.
//!
//! What it is not: an access layer; nothing here reads or writes memory.
//!
//! Thread safety: types and constants only.

use core::mem::size_of;
use volatile_register::{RO, RW};

/// Size of map0 `regs`.
pub const REGS_SIZE: usize = 0x1000;
/// Size of map1 `mbox`.
pub const MBOX_SIZE: usize = 0x2000;
/// Size of map2 `pktz`.
pub const PKTZ_SIZE: usize = 0x1000;
/// Size of map3 `rdma`.
pub const RDMA_SIZE: usize = 0x1000;
/// Map sizes indexed by map number (map0..map3).
pub const MAP_SIZES: [usize; 4] = [REGS_SIZE, MBOX_SIZE, PKTZ_SIZE, RDMA_SIZE];
/// UIO map names (`reg-names` in the device tree).
pub const MAP_NAMES: [&str; 4] = ["regs", "mbox", "pktz", "rdma"];

/// `ID` register value: "EXNI".
pub const ID_MAGIC: u32 = 0x4558_4E49;
/// `VERSION` register value of this model: v0.1.
pub const VERSION_0_1: u32 = 0x0000_0001;
/// Major version this driver understands (`VERSION[31:16]`).
pub const VERSION_MAJOR: u32 = 0;

/// RX mailbox ring depth (slots).
pub const RX_DEPTH: u32 = 64;
/// TX packetizer ring depth.
pub const TX_DEPTH: u32 = 16;
/// RDMA channels per endpoint.
pub const RDMA_CHANNELS: usize = 4;
/// RDMA descriptor ring depth per channel.
pub const RDMA_DEPTH: u32 = 16;
/// Bytes per mailbox slot and per TX slot.
pub const SLOT_BYTES: usize = 64;
/// Maximum network payload of one packet (FACT: 16 x 128-bit words).
pub const MAX_PAYLOAD: usize = 256;
/// Highest endpoint index (10 bits).
pub const MAX_EP: u32 = 0x3FF;
/// Mask of a 22-bit node coordinate.
pub const COORD_MASK: u32 = 0x3F_FFFF;
/// Mask of a 48-bit network virtual address.
pub const NVA_MASK: u64 = (1 << 48) - 1;

/// `CAPS0` fields.
pub mod caps0 {
    /// `[3:0]` log2 RX depth.
    pub const LOG2_RX_SHIFT: u32 = 0;
    /// `[7:4]` log2 TX depth.
    pub const LOG2_TX_SHIFT: u32 = 4;
    /// `[11:8]` RDMA channels.
    pub const CHANNELS_SHIFT: u32 = 8;
    /// `[15:12]` log2 RDMA ring depth.
    pub const LOG2_RDMA_SHIFT: u32 = 12;
    /// `[23:16]` mailbox slot bytes / 8.
    pub const SLOT_WORDS_SHIFT: u32 = 16;
    /// The value this model reports: 64-slot RX, 16-slot TX, 4 channels of 16, 64-B slots.
    pub const VALUE: u32 = 6 << LOG2_RX_SHIFT
        | 4 << LOG2_TX_SHIFT
        | 4 << CHANNELS_SHIFT
        | 4 << LOG2_RDMA_SHIFT
        | 8 << SLOT_WORDS_SHIFT;
}

/// `CAPS1` fields.
pub mod caps1 {
    /// `[15:0]` max network payload bytes.
    pub const MAX_PAYLOAD_MASK: u32 = 0xFFFF;
    /// `[31:16]` max RDMA length per descriptor in MiB (0 = 4 GiB - 1).
    pub const MAX_RDMA_MIB_SHIFT: u32 = 16;
    /// The value this model reports: 256-B payload, 4 GiB - 1 RDMA length.
    pub const VALUE: u32 = 256;
}

/// `EP_STATUS` bits.
pub mod ep_status {
    /// Bit 0: endpoint enabled by management.
    pub const ENABLED: u32 = 1 << 0;
    /// Bit 1: fatal error.
    pub const FATAL: u32 = 1 << 1;
    /// `[15:8]` last fatal code.
    pub const FATAL_CODE_SHIFT: u32 = 8;
}

/// `IRQ_ENABLE` / `IRQ_PENDING` bits.
pub mod irq {
    /// Mailbox has messages (`RX_PROD - RX_CONS >= max(1, RX_IRQ_THRESH)`).
    pub const MBOX: u32 = 1 << 0;
    /// `TX_NACKS != TX_NACK_SEEN`.
    pub const TX_NACK: u32 = 1 << 1;
    /// Some `CH[c].IRQ_CNT != CH[c].IRQ_SEEN`.
    pub const RDMA: u32 = 1 << 2;
    /// `EP_STATUS.FATAL`.
    pub const FATAL: u32 = 1 << 3;
    /// All four sources.
    pub const ALL: u32 = MBOX | TX_NACK | RDMA | FATAL;
}

/// Mailbox metadata word (section 4).
pub mod meta {
    /// `[21:0]` source coordinate.
    pub const SRC_COORD_MASK: u64 = 0x3F_FFFF;
    /// `[31:22]` source endpoint.
    pub const SRC_EP_SHIFT: u32 = 22;
    /// `[47:32]` source PDID.
    pub const PDID_SHIFT: u32 = 32;
    /// `[54:48]` length 1..64.
    pub const LEN_SHIFT: u32 = 48;
    /// `[59:56]` class.
    pub const CLASS_SHIFT: u32 = 56;

    /// Packs a metadata word.
    pub const fn pack(src_coord: u32, src_ep: u32, pdid: u16, len: u32, class: u8) -> u64 {
        (src_coord as u64 & SRC_COORD_MASK)
            | ((src_ep as u64 & 0x3FF) << SRC_EP_SHIFT)
            | ((pdid as u64) << PDID_SHIFT)
            | ((len as u64 & 0x7F) << LEN_SHIFT)
            | ((class as u64 & 0xF) << CLASS_SHIFT)
    }
    /// Source coordinate of a metadata word.
    pub const fn src_coord(m: u64) -> u32 {
        (m & SRC_COORD_MASK) as u32
    }
    /// Source endpoint of a metadata word.
    pub const fn src_ep(m: u64) -> u32 {
        ((m >> SRC_EP_SHIFT) & 0x3FF) as u32
    }
    /// Source PDID of a metadata word.
    pub const fn pdid(m: u64) -> u16 {
        (m >> PDID_SHIFT) as u16
    }
    /// Length of a metadata word.
    pub const fn len(m: u64) -> u32 {
        ((m >> LEN_SHIFT) & 0x7F) as u32
    }
    /// Class of a metadata word.
    pub const fn class(m: u64) -> u8 {
        ((m >> CLASS_SHIFT) & 0xF) as u8
    }
}

/// Mailbox message classes (metadata `[59:56]`, notification `+4`).
pub mod class {
    /// From a remote packetizer send.
    pub const USER: u8 = 0;
    /// RDMA local completion (`NOTIFY_LOCAL`).
    pub const RDMA_LOCAL_CMPL: u8 = 1;
    /// RDMA remote notification (`NOTIFY_REMOTE`).
    pub const RDMA_REMOTE_NOTIFY: u8 = 2;
    /// Error report.
    pub const ERROR_REPORT: u8 = 3;
}

/// TX descriptor words (section 5).
pub mod txd {
    /// `w0[21:0]` destination coordinate, `w0[31:22]` destination endpoint.
    pub const DST_EP_SHIFT: u32 = 22;
    /// `w1[6:0]` length 1..64.
    pub const LEN_MASK: u32 = 0x7F;
    /// `w1[8]` fire-and-forget.
    pub const NO_ACK: u32 = 1 << 8;
    /// `w1[31:16]` user tag.
    pub const TAG_SHIFT: u32 = 16;
    /// `w2[1:0]` status mask.
    pub const STATUS_MASK: u32 = 0x3;
    /// `w2[15:8]` NACK reason.
    pub const REASON_SHIFT: u32 = 8;

    /// Packs `w0`.
    pub const fn w0(coord: u32, ep: u32) -> u32 {
        (coord & super::COORD_MASK) | ((ep & 0x3FF) << DST_EP_SHIFT)
    }
    /// Packs `w1`.
    pub const fn w1(len: u32, no_ack: bool, tag: u16) -> u32 {
        (len & LEN_MASK) | if no_ack { NO_ACK } else { 0 } | ((tag as u32) << TAG_SHIFT)
    }
    /// Packs a status word `w2`.
    pub const fn w2(status: u32, reason: u8) -> u32 {
        (status & STATUS_MASK) | ((reason as u32) << REASON_SHIFT)
    }
}

/// TX status (`w2[1:0]`).
pub mod tx_status {
    /// Not yet final.
    pub const PENDING: u32 = 0;
    /// Accepted by the destination mailbox.
    pub const ACKED: u32 = 1;
    /// Refused; `w2[15:8]` says why.
    pub const NACKED: u32 = 2;
    /// `NO_ACK` message the NI could not transmit.
    pub const DROPPED: u32 = 3;
}

/// NACK reasons (`w2[15:8]`).
pub mod nack {
    /// Destination mailbox ring full.
    pub const RING_FULL: u8 = 1;
    /// Packet PDID differs from the destination endpoint's.
    pub const PDID_MISMATCH: u8 = 2;
    /// No such (or disabled) destination endpoint.
    pub const NO_SUCH_EP: u8 = 3;
    /// No answer from the destination (timeout).
    pub const UNREACHABLE: u8 = 4;

    /// A short name of a reason, for messages.
    pub const fn name(reason: u8) -> &'static str {
        match reason {
            RING_FULL => "ring full",
            PDID_MISMATCH => "PDID mismatch",
            NO_SUCH_EP => "no such endpoint",
            UNREACHABLE => "unreachable",
            _ => "unknown reason",
        }
    }
}

/// RDMA descriptor fields (section 6).
pub mod rdmad {
    /// `q0[7:0]` WRITE (local to remote).
    pub const OP_WRITE: u8 = 0x01;
    /// `q0[7:0]` READ (remote to local).
    pub const OP_READ: u8 = 0x02;
    /// `q0[7:0]` NOP.
    pub const OP_NOP: u8 = 0x03;
    /// Flag: completion message into own mailbox.
    pub const NOTIFY_LOCAL: u8 = 1 << 0;
    /// Flag (WRITE only): message into the remote endpoint's mailbox once data is visible.
    pub const NOTIFY_REMOTE: u8 = 1 << 1;
    /// Flag: counts toward `CH[c].IRQ_CNT`.
    pub const IRQ: u8 = 1 << 2;
    /// Flag: start only after all earlier descriptors of the channel completed.
    pub const FENCE: u8 = 1 << 3;
    /// All defined flags.
    pub const FLAGS_ALL: u8 = NOTIFY_LOCAL | NOTIFY_REMOTE | IRQ | FENCE;

    /// Packs `q0`.
    pub const fn q0(op: u8, flags: u8, len: u32) -> u64 {
        op as u64 | (flags as u64) << 8 | (len as u64) << 32
    }
    /// Packs `q3`.
    pub const fn q3(coord: u32, ep: u32, cookie: u32) -> u64 {
        (coord & super::COORD_MASK) as u64 | ((ep & 0x3FF) as u64) << 22 | (cookie as u64) << 32
    }
}

/// Completion record status (`r0`) and notification status.
pub mod rdma_status {
    /// Success.
    pub const OK: u32 = 0;
    /// Remote endpoint has another PDID.
    pub const REMOTE_PDID_MISMATCH: u32 = 1;
    /// Local NVA not translatable.
    pub const LOCAL_XLAT_FAULT: u32 = 2;
    /// Remote NVA not translatable.
    pub const REMOTE_XLAT_FAULT: u32 = 3;
    /// No answer / retries exhausted.
    pub const UNREACHABLE: u32 = 4;
    /// Malformed descriptor.
    pub const BAD_DESCRIPTOR: u32 = 5;
    /// Remote endpoint absent or disabled.
    pub const REMOTE_EP_DISABLED: u32 = 6;

    /// A short name of a status, for messages.
    pub const fn name(status: u32) -> &'static str {
        match status {
            OK => "ok",
            REMOTE_PDID_MISMATCH => "remote PDID mismatch",
            LOCAL_XLAT_FAULT => "local translation fault",
            REMOTE_XLAT_FAULT => "remote translation fault",
            UNREACHABLE => "unreachable",
            BAD_DESCRIPTOR => "bad descriptor",
            REMOTE_EP_DISABLED => "remote endpoint disabled",
            _ => "unknown status",
        }
    }
}

/// Notification message layout (section 7).
pub mod notif {
    /// Magic at `+0`: "XFTN".
    pub const MAGIC: u32 = 0x4E54_4658;
    /// `+0` magic.
    pub const MAGIC_OFF: usize = 0;
    /// `+4` class.
    pub const CLASS_OFF: usize = 4;
    /// `+8` status.
    pub const STATUS_OFF: usize = 8;
    /// `+12` cookie.
    pub const COOKIE_OFF: usize = 12;
    /// `+16` u64 length.
    pub const LEN_OFF: usize = 16;
    /// `+24` u64 NVA.
    pub const NVA_OFF: usize = 24;
    /// `+32` peer coordinate.
    pub const PEER_COORD_OFF: usize = 32;
    /// `+36` peer endpoint.
    pub const PEER_EP_OFF: usize = 36;
    /// `+40` channel.
    pub const CHANNEL_OFF: usize = 40;
}

/// One RDMA channel's registers at `0x080 + 0x10 * c`.
#[repr(C)]
pub struct ChRegs {
    /// Descriptors posted (doorbell).
    pub tail: RW<u32>,
    /// Descriptors fetched/started.
    pub head: RO<u32>,
    /// Descriptors completed.
    pub done: RO<u32>,
    /// Acknowledged IRQ-flagged completions.
    pub irq_seen: RW<u32>,
}

/// map0 `regs` (section 3).
#[repr(C)]
pub struct RegsBlock {
    /// `0x000` magic.
    pub id: RO<u32>,
    /// `0x004` version.
    pub version: RO<u32>,
    /// `0x008` capabilities 0.
    pub caps0: RO<u32>,
    /// `0x00C` capabilities 1.
    pub caps1: RO<u32>,
    /// `0x010` local coordinate.
    pub node_coord: RO<u32>,
    /// `0x014` endpoint index.
    pub ep_id: RO<u32>,
    /// `0x018` protection domain.
    pub pdid: RO<u32>,
    /// `0x01C` status.
    pub ep_status: RO<u32>,
    _reserved0: [u32; 8],
    /// `0x040` messages written into the RX ring.
    pub rx_prod: RO<u32>,
    /// `0x044` messages consumed by software.
    pub rx_cons: RW<u32>,
    /// `0x048` incoming messages refused.
    pub rx_nacks: RO<u32>,
    /// `0x04C` mailbox IRQ threshold.
    pub rx_irq_thresh: RW<u32>,
    _reserved1: [u32; 4],
    /// `0x060` TX slots posted (doorbell).
    pub tx_tail: RW<u32>,
    /// `0x064` TX slots consumed by the NI.
    pub tx_head: RO<u32>,
    /// `0x068` TX slots with final status.
    pub tx_done: RO<u32>,
    /// `0x06C` TX messages that ended in NACK.
    pub tx_nacks: RO<u32>,
    /// `0x070` software copy of `TX_NACKS`.
    pub tx_nack_seen: RW<u32>,
    _reserved2: [u32; 3],
    /// `0x080` RDMA channel registers.
    pub ch: [ChRegs; RDMA_CHANNELS],
    /// `0x0C0` IRQ-flagged completion counts.
    pub ch_irq_cnt: [RO<u32>; RDMA_CHANNELS],
    _reserved3: [u32; 12],
    /// `0x100` IRQ enable mask.
    pub irq_enable: RW<u32>,
    /// `0x104` IRQ pending (computed).
    pub irq_pending: RO<u32>,
    /// `0x108` IRQ rising edges.
    pub irq_count: RO<u32>,
    _reserved4: [u32; 957],
}

/// TX descriptor (4 x u32).
#[repr(C)]
pub struct TxDescRegs {
    /// Destination.
    pub w0: RW<u32>,
    /// Length, flags, tag.
    pub w1: RW<u32>,
    /// Status (NI).
    pub w2: RO<u32>,
    /// Sequence (NI, written last).
    pub w3: RO<u32>,
}

/// map1 `mbox` (section 4).
#[repr(C)]
pub struct MboxBlock {
    /// Slot payloads.
    pub slots: [[RO<u64>; 8]; RX_DEPTH as usize],
    /// Slot metadata.
    pub meta: [RO<u64>; RX_DEPTH as usize],
    _reserved: [u64; 448],
}

/// map2 `pktz` (section 5).
#[repr(C)]
pub struct PktzBlock {
    /// TX slot payloads.
    pub slots: [[RW<u64>; 8]; TX_DEPTH as usize],
    /// TX descriptors.
    pub desc: [TxDescRegs; TX_DEPTH as usize],
    _reserved: [u64; 352],
}

/// RDMA descriptor (4 x u64).
#[repr(C)]
pub struct RdmaDescRegs {
    /// Opcode, flags, length.
    pub q0: RW<u64>,
    /// Local NVA.
    pub q1: RW<u64>,
    /// Remote NVA.
    pub q2: RW<u64>,
    /// Remote coordinate, endpoint, cookie.
    pub q3: RW<u64>,
}

/// Completion record (4 x u32).
#[repr(C)]
pub struct RecordRegs {
    /// Status.
    pub r0: RO<u32>,
    /// Bytes completed.
    pub r1: RO<u32>,
    /// Cookie.
    pub r2: RO<u32>,
    /// Sequence (written last).
    pub r3: RO<u32>,
}

/// map3 `rdma` (section 6).
#[repr(C)]
pub struct RdmaBlock {
    /// Descriptor rings.
    pub desc: [[RdmaDescRegs; RDMA_DEPTH as usize]; RDMA_CHANNELS],
    /// Completion record rings.
    pub records: [[RecordRegs; RDMA_DEPTH as usize]; RDMA_CHANNELS],
    _reserved: [u64; 128],
}

/// Byte offsets, derived from the blocks with `offset_of!`.
pub mod off {
    use core::mem::offset_of;

    use super::{
        ChRegs, MboxBlock, PktzBlock, RDMA_DEPTH, RdmaBlock, RdmaDescRegs, RecordRegs, RegsBlock,
        TxDescRegs,
    };

    /// `ID`.
    pub const ID: usize = offset_of!(RegsBlock, id);
    /// `VERSION`.
    pub const VERSION: usize = offset_of!(RegsBlock, version);
    /// `CAPS0`.
    pub const CAPS0: usize = offset_of!(RegsBlock, caps0);
    /// `CAPS1`.
    pub const CAPS1: usize = offset_of!(RegsBlock, caps1);
    /// `NODE_COORD`.
    pub const NODE_COORD: usize = offset_of!(RegsBlock, node_coord);
    /// `EP_ID`.
    pub const EP_ID: usize = offset_of!(RegsBlock, ep_id);
    /// `PDID`.
    pub const PDID: usize = offset_of!(RegsBlock, pdid);
    /// `EP_STATUS`.
    pub const EP_STATUS: usize = offset_of!(RegsBlock, ep_status);
    /// `RX_PROD`.
    pub const RX_PROD: usize = offset_of!(RegsBlock, rx_prod);
    /// `RX_CONS`.
    pub const RX_CONS: usize = offset_of!(RegsBlock, rx_cons);
    /// `RX_NACKS`.
    pub const RX_NACKS: usize = offset_of!(RegsBlock, rx_nacks);
    /// `RX_IRQ_THRESH`.
    pub const RX_IRQ_THRESH: usize = offset_of!(RegsBlock, rx_irq_thresh);
    /// `TX_TAIL`.
    pub const TX_TAIL: usize = offset_of!(RegsBlock, tx_tail);
    /// `TX_HEAD`.
    pub const TX_HEAD: usize = offset_of!(RegsBlock, tx_head);
    /// `TX_DONE`.
    pub const TX_DONE: usize = offset_of!(RegsBlock, tx_done);
    /// `TX_NACKS`.
    pub const TX_NACKS: usize = offset_of!(RegsBlock, tx_nacks);
    /// `TX_NACK_SEEN`.
    pub const TX_NACK_SEEN: usize = offset_of!(RegsBlock, tx_nack_seen);
    /// `IRQ_ENABLE`.
    pub const IRQ_ENABLE: usize = offset_of!(RegsBlock, irq_enable);
    /// `IRQ_PENDING`.
    pub const IRQ_PENDING: usize = offset_of!(RegsBlock, irq_pending);
    /// `IRQ_COUNT`.
    pub const IRQ_COUNT: usize = offset_of!(RegsBlock, irq_count);

    const CH: usize = offset_of!(RegsBlock, ch);
    const CH_SIZE: usize = size_of::<ChRegs>();
    const IRQ_CNT: usize = offset_of!(RegsBlock, ch_irq_cnt);

    /// `CH[c].TAIL`.
    pub const fn ch_tail(c: usize) -> usize {
        CH + c * CH_SIZE + offset_of!(ChRegs, tail)
    }
    /// `CH[c].HEAD`.
    pub const fn ch_head(c: usize) -> usize {
        CH + c * CH_SIZE + offset_of!(ChRegs, head)
    }
    /// `CH[c].DONE`.
    pub const fn ch_done(c: usize) -> usize {
        CH + c * CH_SIZE + offset_of!(ChRegs, done)
    }
    /// `CH[c].IRQ_SEEN`.
    pub const fn ch_irq_seen(c: usize) -> usize {
        CH + c * CH_SIZE + offset_of!(ChRegs, irq_seen)
    }
    /// `CH[c].IRQ_CNT`.
    pub const fn ch_irq_cnt(c: usize) -> usize {
        IRQ_CNT + c * 4
    }

    const MBOX_SLOTS: usize = offset_of!(MboxBlock, slots);
    const MBOX_META: usize = offset_of!(MboxBlock, meta);
    /// Mailbox slot `i` payload (map1).
    pub const fn mbox_slot(i: usize) -> usize {
        MBOX_SLOTS + i * 64
    }
    /// Mailbox slot `i` metadata (map1).
    pub const fn mbox_meta(i: usize) -> usize {
        MBOX_META + i * 8
    }

    const PKTZ_SLOTS: usize = offset_of!(PktzBlock, slots);
    const PKTZ_DESC: usize = offset_of!(PktzBlock, desc);
    /// TX slot `j` payload (map2).
    pub const fn tx_slot(j: usize) -> usize {
        PKTZ_SLOTS + j * 64
    }
    /// TX descriptor `j` word `w` (map2).
    pub const fn tx_desc(j: usize, w: usize) -> usize {
        PKTZ_DESC + j * size_of::<TxDescRegs>() + w * 4
    }

    const RDMA_DESC: usize = offset_of!(RdmaBlock, desc);
    const RDMA_REC: usize = offset_of!(RdmaBlock, records);
    /// RDMA channel `c` descriptor `k` word `q` (map3).
    pub const fn rdma_desc(c: usize, k: usize, q: usize) -> usize {
        RDMA_DESC + (c * RDMA_DEPTH as usize + k) * size_of::<RdmaDescRegs>() + q * 8
    }
    /// RDMA channel `c` completion record `k` word `r` (map3).
    pub const fn rdma_record(c: usize, k: usize, r: usize) -> usize {
        RDMA_REC + (c * RDMA_DEPTH as usize + k) * size_of::<RecordRegs>() + r * 4
    }
}

// Every offset of the model's tables, checked at compile time.
const _: () = {
    assert!(off::ID == 0x000 && off::VERSION == 0x004);
    assert!(off::CAPS0 == 0x008 && off::CAPS1 == 0x00C);
    assert!(off::NODE_COORD == 0x010 && off::EP_ID == 0x014);
    assert!(off::PDID == 0x018 && off::EP_STATUS == 0x01C);
    assert!(off::RX_PROD == 0x040 && off::RX_CONS == 0x044);
    assert!(off::RX_NACKS == 0x048 && off::RX_IRQ_THRESH == 0x04C);
    assert!(off::TX_TAIL == 0x060 && off::TX_HEAD == 0x064 && off::TX_DONE == 0x068);
    assert!(off::TX_NACKS == 0x06C && off::TX_NACK_SEEN == 0x070);
    assert!(off::ch_tail(0) == 0x080 && off::ch_head(0) == 0x084);
    assert!(off::ch_done(0) == 0x088 && off::ch_irq_seen(0) == 0x08C);
    assert!(off::ch_tail(3) == 0x0B0 && off::ch_irq_seen(3) == 0x0BC);
    assert!(off::ch_irq_cnt(0) == 0x0C0 && off::ch_irq_cnt(3) == 0x0CC);
    assert!(off::IRQ_ENABLE == 0x100 && off::IRQ_PENDING == 0x104 && off::IRQ_COUNT == 0x108);
    assert!(size_of::<RegsBlock>() == REGS_SIZE);
    assert!(off::mbox_slot(0) == 0x0000 && off::mbox_slot(63) == 0x0FC0);
    assert!(off::mbox_meta(0) == 0x1000 && off::mbox_meta(63) == 0x11F8);
    assert!(size_of::<MboxBlock>() == MBOX_SIZE);
    assert!(off::tx_slot(15) == 0x3C0 && off::tx_desc(0, 0) == 0x400);
    assert!(off::tx_desc(15, 3) == 0x4FC);
    assert!(size_of::<PktzBlock>() == PKTZ_SIZE);
    assert!(off::rdma_desc(1, 0, 0) == 0x200 && off::rdma_desc(3, 15, 3) == 0x7F8);
    assert!(off::rdma_record(0, 0, 0) == 0x800 && off::rdma_record(1, 0, 0) == 0x900);
    assert!(off::rdma_record(3, 15, 3) == 0xBFC);
    assert!(size_of::<RdmaBlock>() == RDMA_SIZE);
    assert!(caps0::VALUE == 0x0008_4446);
};

#[cfg(test)]
mod tests {
    use core::mem::offset_of;

    use super::*;

    #[test]
    fn offsets_match_the_model_tables() {
        assert_eq!(offset_of!(RegsBlock, ch_irq_cnt), 0x0C0);
        assert_eq!(off::ch_done(2), 0x0A8);
        assert_eq!(off::rdma_desc(2, 1, 2), 0x400 + 32 + 16);
        assert_eq!(off::rdma_record(2, 3, 1), 0xA00 + 48 + 4);
        assert_eq!(off::tx_desc(1, 2), 0x418);
        assert_eq!(off::mbox_meta(1), 0x1008);
    }

    #[test]
    fn packers_round_trip() {
        let m = meta::pack(0x3F_FFFF, 0x3FF, 0xBEEF, 64, class::RDMA_REMOTE_NOTIFY);
        assert_eq!(meta::src_coord(m), 0x3F_FFFF);
        assert_eq!(meta::src_ep(m), 0x3FF);
        assert_eq!(meta::pdid(m), 0xBEEF);
        assert_eq!(meta::len(m), 64);
        assert_eq!(meta::class(m), class::RDMA_REMOTE_NOTIFY);
        assert_eq!(txd::w0(0x1000, 5), 0x1000 | 5 << 22);
        assert_eq!(txd::w1(64, true, 0xABCD), 64 | 1 << 8 | 0xABCD << 16);
        assert_eq!(
            rdmad::q0(rdmad::OP_READ, rdmad::FENCE, 4096),
            0x0000_1000_0000_0802
        );
        assert_eq!(rdmad::q3(0x2000, 3, 7), 0x2000 | 3 << 22 | 7 << 32);
    }
}
