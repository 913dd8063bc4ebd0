//! The segment table: which (job key, PE, segment id) the service may touch, and where.
//!
//! Fixed capacity `N` (no allocation). Entries are kept sorted by (key, PE, segment id), so a
//! lookup is a binary search over at most `N` entries (about `log2 N` compares of one `u128`
//! each) and tells an unknown key ([`ErrorCode::BadKey`]) from a missing segment of a known
//! key ([`ErrorCode::NoSegment`]) in the same search. Registration is `O(N)` (insertion in
//! order); it is rare. Every change bumps an *epoch* so that work prepared against an older
//! table can be re-checked.
//!
//! Thread safety: plain data; mutation needs `&mut`. Share it behind a lock if several
//! threads register segments.

use crate::wire::ErrorCode;

/// One registered segment of one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Segment {
    /// Job id (for unregistering a whole job).
    pub job: u32,
    /// The job's key; requests must present it (see [`Service::prepare`](super::Service::prepare)).
    pub key: u64,
    /// The PE whose segment this is.
    pub pe: u16,
    /// Segment id (0 = symmetric heap, 1 = data segment by the runtime's convention).
    pub segment: u8,
    /// Where the segment starts, interpreted by the [`Memory`](super::Memory)
    /// implementation (a byte index into word memory, an address in a mapping). Must be a
    /// multiple of 8 so that aligned offsets are aligned addresses.
    pub base: usize,
    /// Length in bytes (at most 2^40, the reach of a global address).
    pub len: u64,
}

/// Why a segment could not be registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RegisterError {
    /// The table holds its capacity of segments already.
    Full,
    /// A segment with this (key, PE, segment id) is registered already.
    Duplicate,
    /// The job id is registered with another key, or the key with another job id.
    KeyMismatch,
    /// `base` is not a multiple of 8.
    MisalignedBase,
    /// `len` is 0 or larger than 2^40.
    BadLength,
    /// The memory implementation cannot serve `base .. base + len`.
    OutsideMemory,
}

impl core::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            RegisterError::Full => "segment table full",
            RegisterError::Duplicate => "segment already registered",
            RegisterError::KeyMismatch => "job id and job key do not match existing segments",
            RegisterError::MisalignedBase => "segment base not a multiple of 8",
            RegisterError::BadLength => "segment length 0 or above 2^40",
            RegisterError::OutsideMemory => "segment outside the memory the service serves",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RegisterError {}

#[inline]
fn order(key: u64, pe: u16, segment: u8) -> u128 {
    (u128::from(key) << 24) | (u128::from(pe) << 8) | u128::from(segment)
}

impl Segment {
    #[inline]
    fn order(&self) -> u128 {
        order(self.key, self.pe, self.segment)
    }
}

/// Fixed-capacity table of segments, sorted for binary search.
#[derive(Clone, Debug)]
pub struct SegmentTable<const N: usize> {
    entries: heapless::Vec<Segment, N>,
    epoch: u64,
}

impl<const N: usize> Default for SegmentTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> SegmentTable<N> {
    /// An empty table.
    pub const fn new() -> Self {
        SegmentTable {
            entries: heapless::Vec::new(),
            epoch: 0,
        }
    }

    /// Adds a segment. Checks capacity, duplicates, key/job consistency, base alignment and
    /// length (not the memory: [`Service::register`](super::Service::register) does).
    pub fn insert(&mut self, seg: Segment) -> Result<(), RegisterError> {
        if seg.base % 8 != 0 {
            return Err(RegisterError::MisalignedBase);
        }
        if seg.len == 0 || seg.len > 1 << 40 {
            return Err(RegisterError::BadLength);
        }
        if self
            .entries
            .iter()
            .any(|e| (e.job == seg.job) != (e.key == seg.key))
        {
            return Err(RegisterError::KeyMismatch);
        }
        let pos = match self
            .entries
            .binary_search_by_key(&seg.order(), Segment::order)
        {
            Ok(_) => return Err(RegisterError::Duplicate),
            Err(pos) => pos,
        };
        self.entries
            .insert(pos, seg)
            .map_err(|_| RegisterError::Full)?;
        self.epoch += 1;
        Ok(())
    }

    /// Removes one segment; returns it if it was registered.
    pub fn remove(&mut self, key: u64, pe: u16, segment: u8) -> Option<Segment> {
        let pos = self
            .entries
            .binary_search_by_key(&order(key, pe, segment), Segment::order)
            .ok()?;
        self.epoch += 1;
        Some(self.entries.remove(pos))
    }

    /// Removes every segment of `job`; returns how many were removed.
    pub fn remove_job(&mut self, job: u32) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| e.job != job);
        let removed = before - self.entries.len();
        if removed > 0 {
            self.epoch += 1;
        }
        removed
    }

    /// Finds the segment for a request.
    ///
    /// Errors: [`ErrorCode::BadKey`] if no segment has `key`, [`ErrorCode::NoSegment`] if
    /// the key is known but not with this (PE, segment id).
    #[inline]
    pub fn lookup(&self, key: u64, pe: u16, segment: u8) -> Result<&Segment, ErrorCode> {
        self.position(key, pe, segment).map(|i| &self.entries[i])
    }

    /// The segment at `index` in iteration order (valid until the next change, see
    /// [`SegmentTable::epoch`]).
    #[inline]
    pub fn get(&self, index: usize) -> Option<&Segment> {
        self.entries.get(index)
    }

    /// Like [`SegmentTable::lookup`], returning the index for [`SegmentTable::get`].
    #[inline]
    pub fn position(&self, key: u64, pe: u16, segment: u8) -> Result<usize, ErrorCode> {
        let wanted = order(key, pe, segment);
        match self.entries.binary_search_by_key(&wanted, Segment::order) {
            Ok(i) => Ok(i),
            Err(i) => {
                // Sorted by key first: a segment of the same key, if any, is adjacent.
                let near = |j: usize| self.entries.get(j).is_some_and(|e| e.key == key);
                if near(i) || (i > 0 && near(i - 1)) {
                    Err(ErrorCode::NoSegment)
                } else {
                    Err(ErrorCode::BadKey)
                }
            }
        }
    }

    /// The registered segments, sorted by (key, PE, segment id).
    pub fn iter(&self) -> impl Iterator<Item = &Segment> {
        self.entries.iter()
    }

    /// Number of registered segments.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no segment is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Counter bumped by every change of the table.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(job: u32, key: u64, pe: u16, segment: u8) -> Segment {
        Segment {
            job,
            key,
            pe,
            segment,
            base: 0,
            len: 64,
        }
    }

    #[test]
    fn insert_lookup_remove() {
        let mut t = SegmentTable::<4>::new();
        t.insert(seg(1, 100, 0, 0)).unwrap();
        t.insert(seg(1, 100, 1, 0)).unwrap();
        t.insert(seg(2, 50, 0, 1)).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.lookup(100, 1, 0).unwrap().pe, 1);
        assert_eq!(t.lookup(50, 0, 1).unwrap().job, 2);
        assert_eq!(t.lookup(100, 2, 0), Err(ErrorCode::NoSegment));
        assert_eq!(t.lookup(100, 0, 1), Err(ErrorCode::NoSegment));
        assert_eq!(t.lookup(50, 0, 0), Err(ErrorCode::NoSegment));
        assert_eq!(t.lookup(51, 0, 1), Err(ErrorCode::BadKey));
        assert_eq!(t.lookup(0, 0, 0), Err(ErrorCode::BadKey));
        assert_eq!(t.lookup(u64::MAX, 0, 0), Err(ErrorCode::BadKey));
        let e = t.epoch();
        assert_eq!(t.remove(100, 1, 0).unwrap().pe, 1);
        assert!(t.epoch() > e);
        assert_eq!(t.remove(100, 1, 0), None);
        assert_eq!(t.lookup(100, 1, 0), Err(ErrorCode::NoSegment));
        assert_eq!(t.remove_job(1), 1);
        assert_eq!(t.lookup(100, 0, 0), Err(ErrorCode::BadKey));
        assert_eq!(t.remove_job(1), 0);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn register_errors() {
        let mut t = SegmentTable::<2>::new();
        t.insert(seg(1, 100, 0, 0)).unwrap();
        assert_eq!(t.insert(seg(1, 100, 0, 0)), Err(RegisterError::Duplicate));
        assert_eq!(t.insert(seg(1, 101, 1, 0)), Err(RegisterError::KeyMismatch));
        assert_eq!(t.insert(seg(2, 100, 1, 0)), Err(RegisterError::KeyMismatch));
        assert_eq!(
            t.insert(Segment {
                base: 4,
                ..seg(1, 100, 1, 0)
            }),
            Err(RegisterError::MisalignedBase)
        );
        assert_eq!(
            t.insert(Segment {
                len: 0,
                ..seg(1, 100, 1, 0)
            }),
            Err(RegisterError::BadLength)
        );
        assert_eq!(
            t.insert(Segment {
                len: (1 << 40) + 1,
                ..seg(1, 100, 1, 0)
            }),
            Err(RegisterError::BadLength)
        );
        t.insert(seg(1, 100, 1, 0)).unwrap();
        assert_eq!(t.insert(seg(1, 100, 2, 0)), Err(RegisterError::Full));
    }

    #[test]
    fn sorted_lookup_over_many() {
        let mut t = SegmentTable::<64>::new();
        for i in 0..64u32 {
            let key = u64::from(i % 8) * 0x1_0000_0001;
            t.insert(seg(i % 8, key, (i * 7 % 16) as u16, (i / 16) as u8))
                .unwrap();
        }
        for i in 0..64u32 {
            let key = u64::from(i % 8) * 0x1_0000_0001;
            let s = t.lookup(key, (i * 7 % 16) as u16, (i / 16) as u8).unwrap();
            assert_eq!(s.job, i % 8);
        }
        assert_eq!(
            t.lookup(3 * 0x1_0000_0001, 15, 9),
            Err(ErrorCode::NoSegment)
        );
        assert_eq!(t.lookup(9 * 0x1_0000_0001, 0, 0), Err(ErrorCode::BadKey));
    }
}
