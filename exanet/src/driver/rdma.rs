//! RDMA posting and completion records (model section 6).
//!
//! [`Endpoint::rdma_post`] writes the four descriptor words and rings `CH[c].TAIL` through
//! [`RegIo::doorbell`] (to-device barrier first). [`Endpoint::rdma_poll`] reads `CH[c].DONE`
//! (from-device barrier) and hands the records below it to the caller *in order*, checking
//! each record's sequence word. A descriptor slot is reused only after its record was
//! polled (`TAIL - polled < 16`), so no record is overwritten unread.

use crate::error::{Dest, RdmaError};
use crate::io::{Map, RegIo};
use crate::nva::Nva;
use crate::regs::{RDMA_CHANNELS, RDMA_DEPTH, irq, off, rdmad};

use super::Endpoint;

/// RDMA opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaOp {
    /// Local to remote.
    Write,
    /// Remote to local.
    Read,
    /// Nothing (completes in order; useful with `NOTIFY_LOCAL` or `FENCE`).
    Nop,
}

/// One RDMA descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaDesc {
    /// Opcode.
    pub op: RdmaOp,
    /// [`rdmad`] flags (`NOTIFY_LOCAL`, `NOTIFY_REMOTE`, `IRQ`, `FENCE`).
    pub flags: u8,
    /// Bytes (1..=2^32-1; 0 only for NOP).
    pub len: u32,
    /// Local NVA (source of a WRITE, destination of a READ).
    pub local: Nva,
    /// Remote NVA.
    pub remote: Nva,
    /// Remote endpoint.
    pub dest: Dest,
    /// Echoed in the record and notifications.
    pub cookie: u32,
}

/// A completion record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaCompletion {
    /// Channel.
    pub channel: usize,
    /// Absolute descriptor index.
    pub index: u32,
    /// [`crate::regs::rdma_status`].
    pub status: u32,
    /// Bytes completed.
    pub bytes: u32,
    /// Cookie.
    pub cookie: u32,
}

impl<R: RegIo> Endpoint<R> {
    /// Posts `desc` on channel `ch`; returns its absolute index. Never waits:
    /// [`RdmaError::WouldBlock`] when 16 descriptors are unpolled.
    #[inline]
    pub fn rdma_post(&mut self, ch: usize, desc: &RdmaDesc) -> Result<u32, RdmaError> {
        if ch >= RDMA_CHANNELS {
            return Err(RdmaError::BadChannel(ch));
        }
        if desc.op != RdmaOp::Nop && desc.len == 0 {
            return Err(RdmaError::BadLength(0));
        }
        let st = &mut self.ch[ch];
        if st.tail.wrapping_sub(st.done) >= RDMA_DEPTH {
            return Err(RdmaError::WouldBlock);
        }
        let index = st.tail;
        let k = (index % RDMA_DEPTH) as usize;
        let opcode = match desc.op {
            RdmaOp::Write => rdmad::OP_WRITE,
            RdmaOp::Read => rdmad::OP_READ,
            RdmaOp::Nop => rdmad::OP_NOP,
        };
        self.io
            .write64(Map::Rdma, off::rdma_desc(ch, k, 1), desc.local.0);
        self.io
            .write64(Map::Rdma, off::rdma_desc(ch, k, 2), desc.remote.0);
        self.io.write64(
            Map::Rdma,
            off::rdma_desc(ch, k, 3),
            rdmad::q3(desc.dest.coord, u32::from(desc.dest.ep), desc.cookie),
        );
        self.io.write64(
            Map::Rdma,
            off::rdma_desc(ch, k, 0),
            rdmad::q0(opcode, desc.flags, desc.len),
        );
        st.tail = index.wrapping_add(1);
        self.stats.rdma_posted += 1;
        self.io.doorbell(off::ch_tail(ch), st.tail);
        Ok(index)
    }

    /// Descriptors posted on `ch` whose records were not polled yet.
    pub fn rdma_outstanding(&self, ch: usize) -> u32 {
        self.ch.get(ch).map_or(0, |s| s.tail.wrapping_sub(s.done))
    }

    /// Hands every new completion record of channel `ch` to `f`, in order; returns how
    /// many.
    pub fn rdma_poll(&mut self, ch: usize, mut f: impl FnMut(RdmaCompletion)) -> usize {
        if ch >= RDMA_CHANNELS {
            return 0;
        }
        let done = self.io.read_counter(off::ch_done(ch));
        let mut n = 0;
        while self.ch[ch].done != done && self.ch[ch].done != self.ch[ch].tail {
            let index = self.ch[ch].done;
            let k = (index % RDMA_DEPTH) as usize;
            let seq = self.io.read32(Map::Rdma, off::rdma_record(ch, k, 3));
            debug_assert_eq!(seq, index, "RDMA record out of order");
            let rec = RdmaCompletion {
                channel: ch,
                index,
                status: self.io.read32(Map::Rdma, off::rdma_record(ch, k, 0)),
                bytes: self.io.read32(Map::Rdma, off::rdma_record(ch, k, 1)),
                cookie: self.io.read32(Map::Rdma, off::rdma_record(ch, k, 2)),
            };
            self.ch[ch].done = index.wrapping_add(1);
            n += 1;
            f(rec);
        }
        n
    }

    /// Acknowledges IRQ-flagged completions of `ch` (`IRQ_SEEN = IRQ_CNT`).
    pub fn rdma_ack_irq(&mut self, ch: usize) {
        if ch < RDMA_CHANNELS {
            let cnt = self.io.read_counter(off::ch_irq_cnt(ch));
            self.io.release_counter(off::ch_irq_seen(ch), cnt);
        }
    }

    /// Sets `IRQ_ENABLE` ([`irq`] bits). 0 selects polling mode.
    pub fn set_irq_enable(&mut self, mask: u32) {
        self.io.write32(Map::Regs, off::IRQ_ENABLE, mask & irq::ALL);
    }

    /// Sets `RX_IRQ_THRESH` (the MBOX interrupt waits for this many messages; 0 means 1).
    pub fn set_rx_irq_threshold(&mut self, n: u32) {
        self.io.write32(Map::Regs, off::RX_IRQ_THRESH, n);
    }
}
