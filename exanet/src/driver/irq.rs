//! Interrupt mode: the section-8 service loop over a `uio_driver::IrqSource`.
//!
//! One call of [`Endpoint::service_irq`] is one turn of the model's loop:
//! `enable()` (re-arm the masked line), `wait(timeout)`, read `IRQ_PENDING`, then drain the
//! mailbox (`MBOX`), reap TX statuses and acknowledge NACKs (`TX_NACK`), poll every
//! channel's records and write `IRQ_SEEN = IRQ_CNT` (`RDMA`), report `FATAL`. Because the
//! line is level-sensitive and computed from counters, an event arriving while software
//! works keeps the level high and the next `enable()` fires at once: no wakeup is lost.
//! Polling mode needs none of this (leave `IRQ_ENABLE = 0`).

use std::time::Duration;

use uio_driver::{IrqSource, UioError};

use crate::error::TxFailure;
use crate::io::RegIo;
use crate::regs::{RDMA_CHANNELS, ep_status, irq, off};

use super::{Endpoint, RdmaCompletion, RxMessage};

/// Something the interrupt loop hands to its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A mailbox message (any class).
    Message(&'a RxMessage),
    /// An RDMA completion record.
    Rdma(RdmaCompletion),
    /// A message that could not be delivered.
    TxFailure(TxFailure),
}

/// Why the interrupt loop stopped.
#[derive(Debug)]
pub enum IrqError {
    /// The interrupt channel failed.
    Uio(UioError),
    /// `EP_STATUS.FATAL` is set; the code is `EP_STATUS[15:8]`.
    Fatal(u8),
}

impl std::fmt::Display for IrqError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IrqError::Uio(e) => write!(f, "{e}"),
            IrqError::Fatal(code) => write!(f, "endpoint reported a fatal error (code {code})"),
        }
    }
}

impl std::error::Error for IrqError {}

impl<R: RegIo> Endpoint<R> {
    /// One turn of the interrupt loop (see the module docs). Returns `Ok(false)` when no
    /// interrupt arrived within `timeout`, `Ok(true)` after servicing one.
    pub fn service_irq<I: IrqSource>(
        &mut self,
        line: &mut I,
        timeout: Duration,
        mut on: impl FnMut(Event<'_>),
    ) -> Result<bool, IrqError> {
        line.enable().map_err(IrqError::Uio)?;
        if line.wait(timeout).map_err(IrqError::Uio)?.is_none() {
            return Ok(false);
        }
        let pending = self.io.read_counter(off::IRQ_PENDING);
        if pending & irq::MBOX != 0 {
            while let Some(msg) = self.recv() {
                on(Event::Message(&msg));
            }
        }
        if pending & irq::TX_NACK != 0 {
            self.progress();
            while let Some(failure) = self.take_failure() {
                on(Event::TxFailure(failure));
            }
        }
        if pending & irq::RDMA != 0 {
            for c in 0..RDMA_CHANNELS {
                self.rdma_poll(c, |rec| on(Event::Rdma(rec)));
                self.rdma_ack_irq(c);
            }
        }
        if pending & irq::FATAL != 0 {
            let status = self.io.read_counter(off::EP_STATUS);
            return Err(IrqError::Fatal(
                (status >> ep_status::FATAL_CODE_SHIFT) as u8,
            ));
        }
        Ok(true)
    }
}
