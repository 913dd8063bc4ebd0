//! Counters of the service engine.

use crate::wire::{ErrorCode, PacketType};

/// What the service engine has seen and done since it was created (or since
/// [`Stats::reset`]). Plain data: copy it out to report it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stats {
    requests: [u64; PacketType::COUNT],
    refusals: [u64; ErrorCode::COUNT],
    bytes_read: u64,
    bytes_written: u64,
    dropped: u64,
}

impl Stats {
    /// Packets received of type `ty` (unknown types share one counter; reply types count
    /// packets that were dropped).
    pub fn requests(&self, ty: PacketType) -> u64 {
        self.requests[ty.index()]
    }

    /// All packets received.
    pub fn total_requests(&self) -> u64 {
        self.requests.iter().sum()
    }

    /// Requests refused with `code` (unknown codes share one counter).
    pub fn refusals(&self, code: ErrorCode) -> u64 {
        self.refusals[code.index()]
    }

    /// All refusals.
    pub fn total_refusals(&self) -> u64 {
        self.refusals.iter().sum()
    }

    /// Bytes served by READ and BULK_READ.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Bytes stored by WRITE and BULK_WRITE.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Packets dropped without an answer (empty packets, reply types sent to the service).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Sets every counter to 0.
    pub fn reset(&mut self) {
        *self = Stats::default();
    }

    #[inline]
    pub(crate) fn count_request(&mut self, ty: PacketType) {
        self.requests[ty.index()] += 1;
    }

    #[inline]
    pub(crate) fn count_refusal(&mut self, code: ErrorCode) {
        self.refusals[code.index()] += 1;
    }

    #[inline]
    pub(crate) fn count_read(&mut self, n: usize) {
        self.bytes_read += n as u64;
    }

    #[inline]
    pub(crate) fn count_written(&mut self, n: usize) {
        self.bytes_written += n as u64;
    }

    #[inline]
    pub(crate) fn count_dropped(&mut self) {
        self.dropped += 1;
    }
}
