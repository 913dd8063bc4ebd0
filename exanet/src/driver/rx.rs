//! Mailbox receive (model section 4) and notification parsing (section 7).
//!
//! The receive loop: `RX_PROD` is read once per drain ([`RegIo::read_counter`]: the
//! from-device barrier orders it before the slot loads); each message is copied out of its
//! slot with aligned 64-bit loads into an [`RxMessage`] (72 bytes on the stack); consuming
//! it writes `RX_CONS` ([`RegIo::release_counter`]: the slot loads complete first).
//! [`Endpoint::rx_peek`] copies without consuming, so a caller can leave a message in the
//! ring (back-pressure: the NI then NACKs senders with `RING_FULL`), and
//! [`Endpoint::rx_peek_nth`] looks at the messages behind it.
//!
//! The metadata word carries the class, so notifications are told apart without parsing
//! the payload: [`RxMessage::notification`] decodes classes 1-3.

use crate::error::Dest;
use crate::io::{Map, RegIo};
use crate::regs::{RX_DEPTH, class, meta, notif, off};

use super::Endpoint;

/// One message copied out of the mailbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxMessage {
    meta: u64,
    data: [u8; 64],
}

/// A notification written by an NI (classes 1-3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notification {
    /// [`class`] code.
    pub class: u8,
    /// RDMA status ([`crate::regs::rdma_status`]).
    pub status: u32,
    /// The descriptor's cookie.
    pub cookie: u32,
    /// Length of the transfer.
    pub len: u64,
    /// Local NVA (class 1) or destination NVA (class 2).
    pub nva: u64,
    /// The other endpoint of the transfer.
    pub peer: Dest,
    /// Channel (class 1) or 0.
    pub channel: u32,
}

impl RxMessage {
    /// The raw metadata word.
    pub fn meta(&self) -> u64 {
        self.meta
    }
    /// Sender.
    pub fn src(&self) -> Dest {
        Dest {
            coord: meta::src_coord(self.meta),
            ep: meta::src_ep(self.meta) as u16,
        }
    }
    /// Sender PDID (equal to ours once accepted).
    pub fn pdid(&self) -> u16 {
        meta::pdid(self.meta)
    }
    /// Class ([`class`]).
    pub fn class(&self) -> u8 {
        meta::class(self.meta)
    }
    /// Payload length (1..=64).
    pub fn len(&self) -> usize {
        (meta::len(self.meta) as usize).clamp(1, 64)
    }
    /// Always false (messages carry at least one byte).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Payload.
    pub fn data(&self) -> &[u8] {
        &self.data[..self.len()]
    }

    /// The notification carried by a class 1-3 message (`None` for `USER` messages and
    /// payloads without the "XFTN" magic).
    pub fn notification(&self) -> Option<Notification> {
        if self.class() == class::USER || self.len() < 44 {
            return None;
        }
        let d = &self.data;
        let u32_at = |o: usize| u32::from_le_bytes(d[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(d[o..o + 8].try_into().expect("8 bytes"));
        if u32_at(notif::MAGIC_OFF) != notif::MAGIC {
            return None;
        }
        Some(Notification {
            class: u32_at(notif::CLASS_OFF) as u8,
            status: u32_at(notif::STATUS_OFF),
            cookie: u32_at(notif::COOKIE_OFF),
            len: u64_at(notif::LEN_OFF),
            nva: u64_at(notif::NVA_OFF),
            peer: Dest {
                coord: u32_at(notif::PEER_COORD_OFF),
                ep: u32_at(notif::PEER_EP_OFF) as u16,
            },
            channel: u32_at(notif::CHANNEL_OFF),
        })
    }
}

impl<R: RegIo> Endpoint<R> {
    /// The next message, copied out but not consumed (repeated calls return the same one).
    pub fn rx_peek(&mut self) -> Option<&RxMessage> {
        if self.rx_cached.is_none() {
            if self.rx_cons == self.rx_prod {
                self.rx_prod = self.io.read_counter(off::RX_PROD);
                if self.rx_cons == self.rx_prod {
                    return None;
                }
            }
            self.rx_cached = Some(self.read_slot(self.rx_cons));
        }
        self.rx_cached.as_ref()
    }

    /// Copies out the message `n` places behind the next one (`n = 0` is the one
    /// [`rx_peek`](Self::rx_peek) returns) without consuming anything; `None` while fewer
    /// than `n + 1` messages wait. The slot stays the NI's to fill only after it is
    /// consumed, so looking ahead is safe.
    pub fn rx_peek_nth(&mut self, n: u32) -> Option<RxMessage> {
        if n >= self.rx_prod.wrapping_sub(self.rx_cons) {
            self.rx_prod = self.io.read_counter(off::RX_PROD);
            if n >= self.rx_prod.wrapping_sub(self.rx_cons) {
                return None;
            }
        }
        Some(self.read_slot(self.rx_cons.wrapping_add(n)))
    }

    /// Copies out the message of absolute RX index `index` (below the last `RX_PROD` read).
    fn read_slot(&self, index: u32) -> RxMessage {
        let i = (index % RX_DEPTH) as usize;
        let meta_word = self.io.read64(Map::Mbox, off::mbox_meta(i));
        let mut msg = RxMessage {
            meta: meta_word,
            data: [0; 64],
        };
        let words = msg.len().div_ceil(8);
        let slot = off::mbox_slot(i);
        for (k, chunk) in msg.data.chunks_exact_mut(8).take(words).enumerate() {
            chunk.copy_from_slice(&self.io.read64(Map::Mbox, slot + 8 * k).to_le_bytes());
        }
        msg
    }

    /// Consumes the message returned by the last [`rx_peek`](Self::rx_peek) (writes
    /// `RX_CONS`). Does nothing if none was peeked.
    pub fn rx_pop(&mut self) {
        if self.rx_cached.take().is_some() {
            self.rx_cons = self.rx_cons.wrapping_add(1);
            self.stats.received += 1;
            self.io.release_counter(off::RX_CONS, self.rx_cons);
        }
    }

    /// Takes the next message.
    pub fn recv(&mut self) -> Option<RxMessage> {
        let msg = *self.rx_peek()?;
        self.rx_pop();
        Some(msg)
    }

    /// Messages waiting in the ring (as of the last `RX_PROD` read plus a fresh one).
    pub fn rx_pending(&mut self) -> u32 {
        self.rx_prod = self.io.read_counter(off::RX_PROD);
        self.rx_prod.wrapping_sub(self.rx_cons)
    }
}
