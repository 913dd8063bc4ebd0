//! Exanet node coordinates.
//!
//! What it is: [`Coord`], the 22-bit node coordinate that Exanet packets carry in their
//! header (destination) and footer (source), with checked constructors, field accessors,
//! a textual form and the emulator's index mapping (`exanet-ni-model.md`, section 1).
//!
//! What it is not: routing. Nothing here knows which links exist between coordinates.
//!
//! Thread safety: `Coord` is a `Copy` value type; share it freely.
//!
//! Layout (FACT, public ExaNet RTL): `x[3:0] y[7:4] z[11:8] fpga[13:12] tor[21:14]`.
//! Bits 22..32 of the raw value must be zero.
//!
//! Text form: `x.y.z.fpga.tor` in decimal, fields in layout order from the least significant,
//! e.g. `3.0.0.2.1` is x = 3, fpga = 2, tor = 1. [`Coord`]'s `Display` writes it and `FromStr`
//! reads it back.

use core::fmt;
use core::str::FromStr;

/// Bit positions and widths of the coordinate fields.
mod field {
    pub(super) const X_SHIFT: u32 = 0;
    pub(super) const Y_SHIFT: u32 = 4;
    pub(super) const Z_SHIFT: u32 = 8;
    pub(super) const FPGA_SHIFT: u32 = 12;
    pub(super) const TOR_SHIFT: u32 = 14;
    pub(super) const XYZ_MASK: u32 = 0xF;
    pub(super) const FPGA_MASK: u32 = 0x3;
    pub(super) const TOR_MASK: u32 = 0xFF;
}

/// A 22-bit Exanet node coordinate (`x[3:0] y[7:4] z[11:8] fpga[13:12] tor[21:14]`).
///
/// Always holds a value below `2^22`: every constructor checks its input.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Coord(u32);

/// Why a coordinate could not be built or parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordError {
    /// A field is larger than its bit width allows.
    FieldOutOfRange {
        /// Field name: `x`, `y`, `z`, `fpga` or `tor`.
        field: &'static str,
        /// The value given.
        value: u32,
        /// The largest value the field holds.
        max: u32,
    },
    /// A raw value with bits set above bit 21.
    RawOutOfRange(u32),
    /// An emulator index at or above [`Coord::EMULATOR_NODES`].
    IndexOutOfRange(u32),
    /// Text that is not five dot-separated decimal fields.
    Syntax,
}

impl fmt::Display for CoordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::FieldOutOfRange { field, value, max } => {
                write!(
                    f,
                    "coordinate field {field} = {value} is out of range 0..={max}"
                )
            }
            Self::RawOutOfRange(raw) => write!(
                f,
                "raw coordinate {raw:#x} has bits above bit 21 set (maximum {:#x})",
                Coord::RAW_MAX
            ),
            Self::IndexOutOfRange(idx) => write!(
                f,
                "emulator node index {idx} is out of range 0..{}",
                Coord::EMULATOR_NODES
            ),
            Self::Syntax => f.write_str(
                "a coordinate is written `x.y.z.fpga.tor` (five decimal fields, e.g. `0.0.0.1.0`)",
            ),
        }
    }
}

impl core::error::Error for CoordError {}

impl Coord {
    /// Number of significant bits.
    pub const BITS: u32 = 22;
    /// Largest raw value.
    pub const RAW_MAX: u32 = (1 << Self::BITS) - 1;
    /// Largest `x`, `y` or `z`.
    pub const XYZ_MAX: u8 = field::XYZ_MASK as u8;
    /// Largest `fpga` (four FPGAs per board).
    pub const FPGA_MAX: u8 = field::FPGA_MASK as u8;
    /// Largest `tor`.
    pub const TOR_MAX: u8 = field::TOR_MASK as u8;
    /// Number of distinct coordinates [`Coord::from_index`] produces (4 x 16 x 16 x 16); larger
    /// indices would wrap around onto the same coordinates and are refused.
    pub const EMULATOR_NODES: u32 = 4 * 16 * 16 * 16;

    /// Builds a coordinate from its fields, checking each against its width.
    pub const fn new(x: u8, y: u8, z: u8, fpga: u8, tor: u8) -> Result<Self, CoordError> {
        if x > Self::XYZ_MAX {
            return Err(Self::field_error("x", x));
        }
        if y > Self::XYZ_MAX {
            return Err(Self::field_error("y", y));
        }
        if z > Self::XYZ_MAX {
            return Err(Self::field_error("z", z));
        }
        if fpga > Self::FPGA_MAX {
            return Err(CoordError::FieldOutOfRange {
                field: "fpga",
                value: fpga as u32,
                max: Self::FPGA_MAX as u32,
            });
        }
        // `tor` is 8 bits wide, so every u8 fits.
        Ok(Self(
            (x as u32) << field::X_SHIFT
                | (y as u32) << field::Y_SHIFT
                | (z as u32) << field::Z_SHIFT
                | (fpga as u32) << field::FPGA_SHIFT
                | (tor as u32) << field::TOR_SHIFT,
        ))
    }

    const fn field_error(field: &'static str, value: u8) -> CoordError {
        CoordError::FieldOutOfRange {
            field,
            value: value as u32,
            max: Self::XYZ_MAX as u32,
        }
    }

    /// Builds a coordinate from its raw 22-bit value (as found in a packet or the
    /// `NODE_COORD` register); refuses values with bits above bit 21.
    pub const fn from_raw(raw: u32) -> Result<Self, CoordError> {
        if raw > Self::RAW_MAX {
            Err(CoordError::RawOutOfRange(raw))
        } else {
            Ok(Self(raw))
        }
    }

    /// The emulator's mapping from a node index to a coordinate:
    /// `fpga = idx % 4, x = (idx/4) % 16, y = (idx/64) % 16, z = (idx/1024) % 16, tor = 0`.
    ///
    /// Refuses `idx >= EMULATOR_NODES`, where the mapping would repeat coordinates.
    pub const fn from_index(idx: u32) -> Result<Self, CoordError> {
        if idx >= Self::EMULATOR_NODES {
            return Err(CoordError::IndexOutOfRange(idx));
        }
        // Every field below is reduced modulo its width, so the casts cannot truncate.
        match Self::new(
            ((idx / 4) % 16) as u8,
            ((idx / 64) % 16) as u8,
            ((idx / 1024) % 16) as u8,
            (idx % 4) as u8,
            0,
        ) {
            Ok(c) => Ok(c),
            Err(e) => Err(e),
        }
    }

    /// Inverse of [`Coord::from_index`]: `None` when `tor != 0`, which the mapping never
    /// produces.
    pub const fn to_index(self) -> Option<u32> {
        if self.tor() != 0 {
            return None;
        }
        Some(
            self.fpga() as u32
                + 4 * self.x() as u32
                + 64 * self.y() as u32
                + 1024 * self.z() as u32,
        )
    }

    /// The raw 22-bit value.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// Field `x` (bits 3:0).
    pub const fn x(self) -> u8 {
        ((self.0 >> field::X_SHIFT) & field::XYZ_MASK) as u8
    }

    /// Field `y` (bits 7:4).
    pub const fn y(self) -> u8 {
        ((self.0 >> field::Y_SHIFT) & field::XYZ_MASK) as u8
    }

    /// Field `z` (bits 11:8).
    pub const fn z(self) -> u8 {
        ((self.0 >> field::Z_SHIFT) & field::XYZ_MASK) as u8
    }

    /// Field `fpga`, the FPGA position on its board (bits 13:12).
    pub const fn fpga(self) -> u8 {
        ((self.0 >> field::FPGA_SHIFT) & field::FPGA_MASK) as u8
    }

    /// Field `tor`, the top-of-rack switch (bits 21:14).
    pub const fn tor(self) -> u8 {
        ((self.0 >> field::TOR_SHIFT) & field::TOR_MASK) as u8
    }

    /// The same coordinate with another FPGA position.
    pub const fn with_fpga(self, fpga: u8) -> Result<Self, CoordError> {
        Self::new(self.x(), self.y(), self.z(), fpga, self.tor())
    }

    /// The coordinate of FPGA 0 of the same board (the `fpga` field cleared).
    pub const fn board_base(self) -> Self {
        Self(self.0 & !(field::FPGA_MASK << field::FPGA_SHIFT))
    }

    /// Whether two coordinates differ at most in their FPGA position.
    pub const fn same_board(self, other: Self) -> bool {
        self.board_base().0 == other.board_base().0
    }
}

impl fmt::Display for Coord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}.{}",
            self.x(),
            self.y(),
            self.z(),
            self.fpga(),
            self.tor()
        )
    }
}

impl fmt::Debug for Coord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Coord({self} = {:#08x})", self.0)
    }
}

impl FromStr for Coord {
    type Err = CoordError;

    /// Parses `x.y.z.fpga.tor` (decimal fields, no spaces).
    fn from_str(s: &str) -> Result<Self, CoordError> {
        let mut fields = [0u32; 5];
        let mut parts = s.split('.');
        for slot in &mut fields {
            let part = parts.next().ok_or(CoordError::Syntax)?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(CoordError::Syntax);
            }
            // Digits only: the parse fails only on overflow; report it as out of range below.
            *slot = part.parse().unwrap_or(u32::MAX);
        }
        if parts.next().is_some() {
            return Err(CoordError::Syntax);
        }
        const NAMES: [&str; 5] = ["x", "y", "z", "fpga", "tor"];
        const MAXES: [u8; 5] = [
            Coord::XYZ_MAX,
            Coord::XYZ_MAX,
            Coord::XYZ_MAX,
            Coord::FPGA_MAX,
            Coord::TOR_MAX,
        ];
        let mut narrow = [0u8; 5];
        for i in 0..5 {
            if fields[i] > u32::from(MAXES[i]) {
                return Err(CoordError::FieldOutOfRange {
                    field: NAMES[i],
                    value: fields[i],
                    max: u32::from(MAXES[i]),
                });
            }
            narrow[i] = fields[i] as u8;
        }
        Self::new(narrow[0], narrow[1], narrow[2], narrow[3], narrow[4])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn fields_land_in_documented_bits() {
        let c = Coord::new(0x1, 0x2, 0x3, 0x2, 0xA5).unwrap();
        assert_eq!(c.raw(), 0x1 | 0x2 << 4 | 0x3 << 8 | 0x2 << 12 | 0xA5 << 14);
        assert_eq!((c.x(), c.y(), c.z(), c.fpga(), c.tor()), (1, 2, 3, 2, 0xA5));
        let max = Coord::new(15, 15, 15, 3, 255).unwrap();
        assert_eq!(max.raw(), Coord::RAW_MAX);
    }

    #[test]
    fn raw_round_trip_over_whole_range_sample() {
        for raw in (0..=Coord::RAW_MAX).step_by(997).chain([Coord::RAW_MAX]) {
            let c = Coord::from_raw(raw).unwrap();
            assert_eq!(c.raw(), raw);
            let rebuilt = Coord::new(c.x(), c.y(), c.z(), c.fpga(), c.tor()).unwrap();
            assert_eq!(rebuilt, c);
            let text = c.to_string();
            assert_eq!(text.parse::<Coord>().unwrap(), c, "text {text}");
        }
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        assert_eq!(
            Coord::new(16, 0, 0, 0, 0),
            Err(CoordError::FieldOutOfRange {
                field: "x",
                value: 16,
                max: 15
            })
        );
        assert!(matches!(
            Coord::new(0, 16, 0, 0, 0),
            Err(CoordError::FieldOutOfRange { field: "y", .. })
        ));
        assert!(matches!(
            Coord::new(0, 0, 200, 0, 0),
            Err(CoordError::FieldOutOfRange { field: "z", .. })
        ));
        assert_eq!(
            Coord::new(0, 0, 0, 4, 0),
            Err(CoordError::FieldOutOfRange {
                field: "fpga",
                value: 4,
                max: 3
            })
        );
        assert_eq!(
            Coord::from_raw(1 << 22),
            Err(CoordError::RawOutOfRange(1 << 22))
        );
        assert_eq!(
            Coord::from_raw(u32::MAX),
            Err(CoordError::RawOutOfRange(u32::MAX))
        );
        assert_eq!(
            Coord::new(0, 0, 0, 0, 0).unwrap().with_fpga(7),
            Err(CoordError::FieldOutOfRange {
                field: "fpga",
                value: 7,
                max: 3
            })
        );
    }

    #[test]
    fn emulator_index_mapping() {
        let c = Coord::from_index(0).unwrap();
        assert_eq!(c.raw(), 0);
        let c = Coord::from_index(5).unwrap();
        assert_eq!((c.fpga(), c.x(), c.y(), c.z(), c.tor()), (1, 1, 0, 0, 0));
        let idx = 3 + 4 * 7 + 64 * 9 + 1024 * 13;
        let c = Coord::from_index(idx).unwrap();
        assert_eq!((c.fpga(), c.x(), c.y(), c.z(), c.tor()), (3, 7, 9, 13, 0));
        for idx in 0..Coord::EMULATOR_NODES {
            assert_eq!(Coord::from_index(idx).unwrap().to_index(), Some(idx));
        }
        assert_eq!(
            Coord::from_index(Coord::EMULATOR_NODES),
            Err(CoordError::IndexOutOfRange(Coord::EMULATOR_NODES))
        );
        assert_eq!(Coord::new(0, 0, 0, 0, 1).unwrap().to_index(), None);
    }

    #[test]
    fn text_form_and_errors() {
        let c: Coord = "3.0.0.2.1".parse().unwrap();
        assert_eq!((c.x(), c.y(), c.z(), c.fpga(), c.tor()), (3, 0, 0, 2, 1));
        assert_eq!(c.to_string(), "3.0.0.2.1");
        assert!(alloc::format!("{c:?}").contains("3.0.0.2.1"));
        for bad in [
            "",
            "1.2.3.4",
            "1.2.3.0.0.0",
            "a.0.0.0.0",
            "1..0.0.0",
            " 1.0.0.0.0",
            "-1.0.0.0.0",
        ] {
            assert_eq!(
                bad.parse::<Coord>(),
                Err(CoordError::Syntax),
                "input {bad:?}"
            );
        }
        assert_eq!(
            "0.0.0.4.0".parse::<Coord>(),
            Err(CoordError::FieldOutOfRange {
                field: "fpga",
                value: 4,
                max: 3
            })
        );
        assert_eq!(
            "0.0.0.0.256".parse::<Coord>(),
            Err(CoordError::FieldOutOfRange {
                field: "tor",
                value: 256,
                max: 255
            })
        );
        assert!(matches!(
            "0.99999999999.0.0.0".parse::<Coord>(),
            Err(CoordError::FieldOutOfRange { field: "y", .. })
        ));
    }

    #[test]
    fn board_relations() {
        let a = Coord::new(1, 2, 3, 0, 4).unwrap();
        let b = a.with_fpga(3).unwrap();
        assert!(a.same_board(b));
        assert_eq!(b.board_base(), a);
        assert!(!a.same_board(Coord::new(1, 2, 3, 0, 5).unwrap()));
    }
}
