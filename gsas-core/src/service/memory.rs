//! Memory access for the service engine: the [`Memory`] trait and [`WordMemory`].
//!
//! The engine checks every request (segment, bounds, alignment, descriptor) *before* it
//! calls a [`Memory`] method, so implementations only move bytes and run atomics. The std
//! runtime implements the trait over shared-memory mappings with CPU atomics; this crate
//! provides [`WordMemory`], a safe implementation over caller-provided `&[AtomicU64]` words,
//! for tests, benchmarks and single-address-space setups.
//!
//! Thread safety: methods take `&self`; implementations use interior mutability (atomics)
//! and must be safe to call from several threads at once if the type is `Sync`.
//! [`WordMemory`] is `Send + Sync`.

use core::sync::atomic::{AtomicU64, Ordering};

use super::{AmoKind, Segment};

/// How the service engine reaches memory.
///
/// Contract the engine keeps for every call: `seg` is a segment registered through
/// [`Service::register`](super::Service::register) (for which [`Memory::contains`]
/// returned true), `offset + len <= seg.len` without overflow, and atomic offsets are
/// naturally aligned (`seg.base` is a multiple of 8). The methods are safe functions: an
/// implementation over raw memory must stay sound even if called with other arguments (a
/// cheap bounds check against its own mapping suffices); the engine's checks make such a
/// check never fail.
///
/// Ordering: byte writes should be release stores and byte reads acquire loads (a put
/// followed by a flag write must become visible in that order to a local reader);
/// atomic read-modify-writes acquire-release.
pub trait Memory {
    /// Whether `base .. base + len` lies in memory this implementation serves. Called once
    /// when a segment is registered.
    fn contains(&self, base: usize, len: u64) -> bool;

    /// Copies `out.len()` bytes starting at `offset` in `seg` into `out`.
    fn read(&self, seg: &Segment, offset: u64, out: &mut [u8]);

    /// Copies `data` to `offset` in `seg`.
    fn write(&self, seg: &Segment, offset: u64, data: &[u8]);

    /// Runs a 32-bit atomic at `offset` (4-byte aligned) and returns the old value.
    fn atomic32(
        &self,
        seg: &Segment,
        offset: u64,
        op: AmoKind,
        operand: u32,
        comparand: u32,
    ) -> u32;

    /// Runs a 64-bit atomic at `offset` (8-byte aligned) and returns the old value.
    fn atomic64(
        &self,
        seg: &Segment,
        offset: u64,
        op: AmoKind,
        operand: u64,
        comparand: u64,
    ) -> u64;
}

/// [`Memory`] over caller-provided 64-bit atomic words; `Segment::base` is a byte index into
/// the words (little-endian: byte `i` is bits `8 * (i % 8)..` of word `i / 8`).
///
/// * 64-bit atomics are the CPU atomics of the word.
/// * 32-bit atomics run a compare-exchange loop on the containing word (still a real CPU
///   atomic; the other half of the word is preserved).
/// * Byte reads are acquire word loads. Byte writes store whole words with release stores;
///   a partially covered word at either edge is updated with a compare-exchange loop, so
///   concurrent byte writes from several threads into different bytes of one word do not
///   lose each other's bytes (a plain load-mask-store would).
///
/// Out-of-range arguments (which the engine never passes) panic on slice indexing; they
/// never touch other memory.
#[derive(Clone, Copy, Debug)]
pub struct WordMemory<'a> {
    words: &'a [AtomicU64],
}

impl<'a> WordMemory<'a> {
    /// Wraps the words.
    pub const fn new(words: &'a [AtomicU64]) -> Self {
        WordMemory { words }
    }

    /// The wrapped words.
    pub fn words(&self) -> &'a [AtomicU64] {
        self.words
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        self.words.len() * 8
    }

    #[inline]
    fn index(seg: &Segment, offset: u64) -> usize {
        seg.base + offset as usize
    }
}

#[inline]
fn merge(word: &AtomicU64, start: usize, bytes: &[u8]) {
    let mut b = [0u8; 8];
    b[start..start + bytes.len()].copy_from_slice(bytes);
    let value = u64::from_le_bytes(b);
    let mask = (u64::MAX >> (64 - 8 * bytes.len())) << (8 * start);
    let mut old = word.load(Ordering::Relaxed);
    loop {
        let new = (old & !mask) | value;
        match word.compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(current) => old = current,
        }
    }
}

impl Memory for WordMemory<'_> {
    fn contains(&self, base: usize, len: u64) -> bool {
        (base as u64)
            .checked_add(len)
            .is_some_and(|end| end <= self.byte_len() as u64)
    }

    #[inline]
    fn read(&self, seg: &Segment, offset: u64, out: &mut [u8]) {
        let at = Self::index(seg, offset);
        let end = at + out.len();
        // Head: up to the next word boundary.
        let head = ((8 - at % 8) % 8).min(out.len());
        if head > 0 {
            let word = self.words[at / 8].load(Ordering::Acquire).to_le_bytes();
            out[..head].copy_from_slice(&word[at % 8..at % 8 + head]);
        }
        // Body: whole words.
        let first = (at + head) / 8;
        let mut body = out[head..].chunks_exact_mut(8);
        for (chunk, word) in (&mut body).zip(&self.words[first..]) {
            chunk.copy_from_slice(&word.load(Ordering::Acquire).to_le_bytes());
        }
        // Tail: a partial last word.
        let tail = body.into_remainder();
        if !tail.is_empty() {
            let word = self.words[end / 8].load(Ordering::Acquire).to_le_bytes();
            tail.copy_from_slice(&word[..tail.len()]);
        }
    }

    #[inline]
    fn write(&self, seg: &Segment, offset: u64, data: &[u8]) {
        let at = Self::index(seg, offset);
        let head = ((8 - at % 8) % 8).min(data.len());
        if head > 0 {
            merge(&self.words[at / 8], at % 8, &data[..head]);
        }
        let first = (at + head) / 8;
        let mut body = data[head..].chunks_exact(8);
        for (chunk, word) in (&mut body).zip(&self.words[first..]) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            word.store(u64::from_le_bytes(b), Ordering::Release);
        }
        let tail = body.remainder();
        if !tail.is_empty() {
            merge(&self.words[(at + data.len()) / 8], 0, tail);
        }
    }

    #[inline]
    fn atomic32(
        &self,
        seg: &Segment,
        offset: u64,
        op: AmoKind,
        operand: u32,
        comparand: u32,
    ) -> u32 {
        let at = Self::index(seg, offset);
        let word = &self.words[at / 8];
        let shift = 8 * (at % 8) as u32;
        let mask = u64::from(u32::MAX) << shift;
        let mut old = word.load(Ordering::Acquire);
        loop {
            let old32 = (old >> shift) as u32;
            let Some(new32) = op.apply(u64::from(old32), u64::from(operand), u64::from(comparand))
            else {
                return old32;
            };
            let new = (old & !mask) | ((new32 & 0xffff_ffff) << shift);
            match word.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return old32,
                Err(current) => old = current,
            }
        }
    }

    #[inline]
    fn atomic64(
        &self,
        seg: &Segment,
        offset: u64,
        op: AmoKind,
        operand: u64,
        comparand: u64,
    ) -> u64 {
        op.run64(
            &self.words[Self::index(seg, offset) / 8],
            operand,
            comparand,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words<const N: usize>() -> [AtomicU64; N] {
        core::array::from_fn(|_| AtomicU64::new(0))
    }

    fn seg(base: usize, len: u64) -> Segment {
        Segment {
            job: 1,
            key: 1,
            pe: 0,
            segment: 0,
            base,
            len,
        }
    }

    #[test]
    fn unaligned_bytes_round_trip() {
        let w = words::<4>();
        let m = WordMemory::new(&w);
        let s = seg(8, 24);
        let data: [u8; 13] = core::array::from_fn(|i| i as u8 + 1);
        m.write(&s, 3, &data);
        let mut out = [0u8; 13];
        m.read(&s, 3, &mut out);
        assert_eq!(out, data);
        assert_eq!(w[0].load(Ordering::Relaxed), 0);
        assert_eq!(
            w[1].load(Ordering::Relaxed),
            u64::from_le_bytes([0, 0, 0, 1, 2, 3, 4, 5])
        );
        assert_eq!(w[3].load(Ordering::Relaxed), 0);
        let mut all = [0u8; 32];
        m.read(&seg(0, 32), 0, &mut all);
        assert_eq!(&all[11..24], &data);
        assert!(all[..11].iter().chain(&all[24..]).all(|&b| b == 0));
    }

    #[test]
    fn partial_writes_keep_neighbours() {
        let w = words::<1>();
        w[0].store(u64::MAX, Ordering::Relaxed);
        let m = WordMemory::new(&w);
        m.write(&seg(0, 8), 2, &[0, 0]);
        assert_eq!(w[0].load(Ordering::Relaxed), 0xffff_ffff_0000_ffff);
    }

    #[test]
    fn atomics_32_and_64() {
        let w = words::<2>();
        let m = WordMemory::new(&w);
        let s = seg(0, 16);
        assert_eq!(m.atomic32(&s, 4, AmoKind::Add, 5, 0), 0);
        assert_eq!(m.atomic32(&s, 0, AmoKind::Set, 0xffff_ffff, 0), 0);
        assert_eq!(m.atomic32(&s, 0, AmoKind::Add, 1, 0), 0xffff_ffff); // wraps in 32 bits
        assert_eq!(w[0].load(Ordering::Relaxed), 5 << 32);
        assert_eq!(m.atomic32(&s, 4, AmoKind::CompareSwap, 9, 4), 5); // no match
        assert_eq!(m.atomic32(&s, 4, AmoKind::CompareSwap, 9, 5), 5);
        assert_eq!(m.atomic32(&s, 4, AmoKind::Fetch, 0, 0), 9);
        assert_eq!(m.atomic64(&s, 8, AmoKind::Or, 0xf0, 0), 0);
        assert_eq!(m.atomic64(&s, 8, AmoKind::Xor, 0xff, 0), 0xf0);
        assert_eq!(m.atomic64(&s, 8, AmoKind::And, 0x3c, 0), 0x0f);
        assert_eq!(m.atomic64(&s, 8, AmoKind::Swap, 7, 0), 0x0c);
        assert_eq!(m.atomic64(&s, 8, AmoKind::CompareSwap, 1, 6), 7);
        assert_eq!(m.atomic64(&s, 8, AmoKind::CompareSwap, 1, 7), 7);
        assert_eq!(m.atomic64(&s, 8, AmoKind::Fetch, 0, 0), 1);
    }

    #[test]
    fn contains_checks_range() {
        let w = words::<2>();
        let m = WordMemory::new(&w);
        assert!(m.contains(0, 16));
        assert!(m.contains(8, 8));
        assert!(!m.contains(8, 9));
        assert!(!m.contains(usize::MAX, 2));
    }

    #[test]
    fn concurrent_byte_writes_into_one_word() {
        let w = words::<1>();
        let m = WordMemory::new(&w);
        std::thread::scope(|scope| {
            for t in 0..4u8 {
                scope.spawn(move || {
                    for i in 0..2000u32 {
                        let byte = [t * 16 + (i % 16) as u8];
                        m.write(&seg(0, 8), u64::from(t) * 2, &byte);
                        m.write(&seg(0, 8), u64::from(t) * 2 + 1, &[t + 1]);
                    }
                });
            }
        });
        let b = w[0].load(Ordering::Relaxed).to_le_bytes();
        for t in 0..4u8 {
            assert_eq!(
                b[usize::from(t) * 2],
                t * 16 + 15,
                "thread {t}'s last byte was lost"
            );
            assert_eq!(b[usize::from(t) * 2 + 1], t + 1);
        }
    }
}
