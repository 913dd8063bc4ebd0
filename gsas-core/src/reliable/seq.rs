//! 32-bit frame sequence numbers with wraparound arithmetic (RFC 1982 serial numbers).
//!
//! Two sequence numbers are compared by their signed distance, so `0x0000_0002` is *after*
//! `0xffff_fffe`. The comparison is meaningful while the two are less than 2^31 apart, which
//! the reliability layer guarantees: all sequence numbers in use between one sender and one
//! receiver lie within one window (at most 64) of each other.

/// A frame sequence number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Seq(pub u32);

impl Seq {
    /// `self + n`, wrapping.
    #[inline]
    pub const fn add(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }

    /// `self - n`, wrapping.
    #[inline]
    pub const fn sub(self, n: u32) -> Seq {
        Seq(self.0.wrapping_sub(n))
    }

    /// Signed distance from `other` to `self`: positive when `self` comes after `other`.
    #[inline]
    pub const fn distance(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// Whether `self` comes strictly after `other`.
    #[inline]
    pub const fn is_after(self, other: Seq) -> bool {
        self.distance(other) > 0
    }

    /// Whether `self` comes strictly before `other`.
    #[inline]
    pub const fn is_before(self, other: Seq) -> bool {
        self.distance(other) < 0
    }
}

#[cfg(test)]
mod tests {
    use super::Seq;

    #[test]
    fn ordering_across_wraparound() {
        let a = Seq(0xffff_fffe);
        let b = a.add(4);
        assert_eq!(b, Seq(2));
        assert!(b.is_after(a));
        assert!(a.is_before(b));
        assert_eq!(b.distance(a), 4);
        assert_eq!(a.distance(b), -4);
        assert_eq!(b.sub(4), a);
        assert!(!a.is_after(a) && !a.is_before(a));
        assert_eq!(Seq(0).sub(1), Seq(u32::MAX));
        assert!(Seq(0).is_after(Seq(u32::MAX)));
    }

    #[test]
    fn half_range_is_the_limit() {
        let a = Seq(10);
        assert!(a.add(0x7fff_ffff).is_after(a));
        // Exactly 2^31 apart: the distance is i32::MIN, i.e. "before"; callers never get here.
        assert!(a.add(0x8000_0000).is_before(a));
    }
}
