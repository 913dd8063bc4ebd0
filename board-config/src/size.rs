//! Byte sizes: the one size grammar of gsas.
//!
//! What it is: [`parse_size`] reads the grammar OpenSHMEM 1.5 gives `SHMEM_SYMMETRIC_SIZE`
//! (Sandia OpenSHMEM and Open MPI read the same): a non-negative integer or decimal number
//! (`4096`, `3.1`, `.5`, `2.`), optionally followed by one multiplier `k`, `m`, `g`, `t` (any
//! case; binary: 2^10, 2^20, 2^30, 2^40), after which anything is ignored (`20kk` = `20k`,
//! `2GiB` = `2g`, `512mb` = `512m`); the result is `ceil(number * multiplier)` bytes.
//! Surrounding white space is ignored. The library's environment variables
//! (`SHMEM_SYMMETRIC_SIZE`, `SHMEM_COLL_RING_MIN`), the cluster file's sizes and the
//! service's configuration keys all use it. [`ByteSize`] writes a size back in the shortest
//! exact form.
//!
//! What it is not: decimal units. A multiplier is always a power of 1024 (`1kB` is 1024
//! bytes), so a size never means two different things.
//!
//! Errors ([`SizeError`]) say what is wrong: no number, two decimal points, an unexpected
//! character after the number (named), or a value beyond 64 bits.
//!
//! ```
//! use board_config::{SizeError, parse_size};
//! assert_eq!(parse_size("64k"), Ok(65_536));
//! assert_eq!(parse_size("3.1M"), Ok(3_250_586)); // ceil(3.1 * 2^20)
//! assert_eq!(parse_size("2GiB"), parse_size("2g"));
//! assert_eq!(parse_size("20x"), Err(SizeError::Unexpected('x')));
//! ```
//!
//! Thread safety: pure functions and `Copy` types.

use core::fmt;

/// Why a size string was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// No number where one was expected (empty, a lone `.`, a sign, a letter first).
    NoNumber,
    /// More than one decimal point.
    TwoPoints,
    /// A character after the number that is not a multiplier `k`, `m`, `g` or `t`.
    Unexpected(char),
    /// The value does not fit in 64 bits.
    Overflow,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoNumber => f.write_str(
                "expected a size: a number of bytes with an optional binary multiplier \
                 k, m, g or t (e.g. 1048576, 64k, 512m, 3.5M, 2g)",
            ),
            Self::TwoPoints => f.write_str("a size has at most one decimal point"),
            Self::Unexpected(c) => write!(
                f,
                "unexpected {c:?} after the number (multipliers are k, m, g, t: 64k, 512m, 2g)"
            ),
            Self::Overflow => f.write_str("size does not fit in 64 bits"),
        }
    }
}

impl core::error::Error for SizeError {}

const SUFFIXES: [(u8, u32); 4] = [(b't', 40), (b'g', 30), (b'm', 20), (b'k', 10)];

/// Parses a byte size in the grammar of the [module documentation](self): a number
/// (integer or decimal), an optional multiplier `k`/`m`/`g`/`t` (any case, powers of 1024)
/// and anything after it ignored; `ceil(number * multiplier)` bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let end = t
        .bytes()
        .position(|b| !(b.is_ascii_digit() || b == b'.'))
        .unwrap_or(t.len());
    let (number, rest) = t.split_at(end);
    if number.is_empty() || number == "." {
        return Err(SizeError::NoNumber);
    }
    let shift = match rest.chars().next() {
        None => 0,
        Some(c) => {
            let lower = c.to_ascii_lowercase();
            SUFFIXES
                .iter()
                .find(|(s, _)| char::from(*s) == lower)
                .map(|(_, shift)| *shift)
                .ok_or(SizeError::Unexpected(c))?
        }
    };
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if frac_part.contains('.') {
        return Err(SizeError::TwoPoints);
    }
    let int: u64 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| SizeError::Overflow)?
    };
    let scale = 1u64 << shift;
    let whole = int.checked_mul(scale).ok_or(SizeError::Overflow)?;
    let frac_digits = frac_part.trim_end_matches('0');
    if frac_digits.is_empty() {
        return Ok(whole);
    }
    // ceil(0.frac * scale) exactly: frac / 10^d * scale rounded up, in 128-bit integers
    // while the digits fit; beyond 30 digits the tail only decides the rounding.
    let d = frac_digits.len().min(30);
    let frac: u128 = frac_digits[..d].parse().map_err(|_| SizeError::Overflow)?;
    let denom = 10u128.pow(d as u32);
    let num = frac * u128::from(scale);
    let mut extra = num / denom;
    if num % denom != 0 || frac_digits.len() > d {
        extra += 1;
    }
    let extra = u64::try_from(extra).map_err(|_| SizeError::Overflow)?;
    whole.checked_add(extra).ok_or(SizeError::Overflow)
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
    fn multipliers_are_binary_and_case_insensitive() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("3t"), Ok(3 << 40));
        assert_eq!(parse_size("1kB"), Ok(1024), "never decimal units");
    }

    #[test]
    fn the_specification_examples() {
        // OpenSHMEM 1.5 SHMEM_SYMMETRIC_SIZE (docs/openshmem-checklist.md).
        assert_eq!(parse_size("20m"), Ok(20_971_520));
        assert_eq!(parse_size("3.1M"), Ok(3_250_586));
        assert_eq!(parse_size(".5m"), Ok(524_288));
        assert_eq!(parse_size("0.5m"), parse_size(".5m"));
        assert_eq!(parse_size("20kk"), Ok(20_480));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("3.25mega"), Ok(3_407_872));
    }

    #[test]
    fn decimals_round_up_and_white_space_is_ignored() {
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size("2."), Ok(2));
        assert_eq!(parse_size("1.000"), Ok(1));
        // ceil: 0.001k = 1.024 bytes -> 2
        assert_eq!(parse_size("0.001k"), Ok(2));
        assert_eq!(parse_size("1.0000000000000000000000000000000001"), Ok(2));
        assert_eq!(parse_size(" 64M "), Ok(64 << 20));
        assert_eq!(
            parse_size("16777215.5t"),
            Ok((16_777_215 << 40) + (1 << 39))
        );
    }

    #[test]
    fn bad_sizes_are_refused_with_the_reason() {
        for bad in ["", " ", "k", ".", "-1", "+5", "abc"] {
            assert_eq!(parse_size(bad), Err(SizeError::NoNumber), "input {bad:?}");
        }
        assert_eq!(parse_size("1.2.3m"), Err(SizeError::TwoPoints));
        assert_eq!(parse_size("20x"), Err(SizeError::Unexpected('x')));
        assert_eq!(parse_size("1 g"), Err(SizeError::Unexpected(' ')));
        assert_eq!(parse_size("1p"), Err(SizeError::Unexpected('p')));
        assert_eq!(parse_size("0x10"), Err(SizeError::Unexpected('x')));
        assert!(parse_size("20x").unwrap_err().to_string().contains("'x'"));
        assert_eq!(parse_size("99999999999999999999"), Err(SizeError::Overflow));
        assert_eq!(parse_size("16777216t"), Err(SizeError::Overflow));
        assert_eq!(
            parse_size("16777215.9999999999999t"),
            Err(SizeError::Overflow)
        );
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
