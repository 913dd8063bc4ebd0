//! Byte sizes with binary suffixes.
//!
//! What it is: [`parse_size`] reads `4096`, `64k`, `512m`, `2g`, `1t` (suffixes are binary
//! multiples, 1k = 1024, and case-insensitive), the form SOS accepts for
//! `SHMEM_SYMMETRIC_SIZE`; [`ByteSize`] writes a size back in the shortest such form.
//!
//! What it is not: decimal units. `kB`/`MB`/`GiB` spellings and fractions are refused, so a
//! size never means two different things.
//!
//! Thread safety: pure functions and a `Copy` type.

use core::fmt;

/// Why a size string was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not digits followed by at most one of `k`, `m`, `g`, `t`.
    Syntax,
    /// The value does not fit in 64 bits.
    Overflow,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax => f.write_str(
                "a size is a whole number of bytes with an optional binary suffix k, m, g or t \
                 (e.g. 4096, 64k, 512m, 2g)",
            ),
            Self::Overflow => f.write_str("size does not fit in 64 bits"),
        }
    }
}

impl core::error::Error for SizeError {}

const SUFFIXES: [(u8, u32); 4] = [(b't', 40), (b'g', 30), (b'm', 20), (b'k', 10)];

/// Parses a byte size: decimal digits, then optionally one of `k`, `m`, `g`, `t` (any case)
/// for 2^10, 2^20, 2^30, 2^40. No spaces, signs or fractions.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let bytes = text.as_bytes();
    let (digits, shift) = match bytes.last() {
        Some(last) if last.is_ascii_alphabetic() => {
            let lower = last.to_ascii_lowercase();
            let shift = SUFFIXES
                .iter()
                .find(|(s, _)| *s == lower)
                .map(|(_, shift)| *shift)
                .ok_or(SizeError::Syntax)?;
            (&text[..text.len() - 1], shift)
        }
        _ => (text, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SizeError::Syntax);
    }
    let value: u64 = digits.parse().map_err(|_| SizeError::Overflow)?;
    value.checked_mul(1u64 << shift).ok_or(SizeError::Overflow)
}

/// Displays a byte count in the shortest exact form [`parse_size`] reads back
/// (`67108864` shows as `64m`, `1000` as `1000`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 != 0 {
            for (suffix, shift) in SUFFIXES {
                if self.0 % (1u64 << shift) == 0 {
                    return write!(f, "{}{}", self.0 >> shift, suffix as char);
                }
            }
        }
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn suffixes_are_binary_and_case_insensitive() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("3t"), Ok(3 << 40));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for bad in [
            "", "k", "1.5g", "-1", "1 g", "1gb", "1GiB", "1p", "0x10", "+5",
        ] {
            assert_eq!(parse_size(bad), Err(SizeError::Syntax), "input {bad:?}");
        }
        assert_eq!(parse_size("99999999999999999999"), Err(SizeError::Overflow));
        assert_eq!(parse_size("16777216t"), Err(SizeError::Overflow));
    }

    #[test]
    fn display_round_trips() {
        for (value, text) in [
            (0, "0"),
            (1000, "1000"),
            (1024, "1k"),
            (64 << 20, "64m"),
            (3 << 30, "3g"),
            (5 << 40, "5t"),
            ((1 << 20) + 1024, "1025k"),
        ] {
            assert_eq!(ByteSize(value).to_string(), text);
            assert_eq!(parse_size(text), Ok(value));
        }
    }
}
