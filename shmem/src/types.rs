//! The type classes of OpenSHMEM 1.5 as sealed Rust traits, and the scalar conversions the
//! byte-level internals take.
//!
//! **What it is.** The specification names which types each routine family accepts (the
//! tables of standard RMA types in §9.6, of standard, extended and bitwise AMO types in
//! §9.7, and the point-to-point types of §9.10). Here they are marker traits implemented
//! only by the matching Rust types:
//!
//! | trait | types | used by |
//! |---|---|---|
//! | [`Symmetric`] | all integers (8 to 128 bits, `isize`, `usize`), `f32`, `f64` | put, get, p, g, iput, iget, nbi, put-with-signal |
//! | [`AmoStandard`] | `i32`, `u32`, `i64`, `u64`, `isize`, `usize` | compare_swap, fetch_inc, inc, fetch_add, add; wait_until, test and their multi forms |
//! | [`AmoExtended`] | the standard AMO types, `f32`, `f64` | fetch, set, swap |
//! | [`AmoBitwise`] | `i32`, `u32`, `i64`, `u64` | fetch_and, and, fetch_or, or, fetch_xor, xor |
//! | [`ReduceBitwise`] | `u8` .. `u64`, `i8` .. `i64`, `usize` | AND, OR, XOR reductions (§9.9.9, team forms) |
//! | [`ReduceMinMax`] | the integers of [`Symmetric`] but 128-bit, `f32`, `f64` | MAX, MIN reductions |
//! | [`ReduceArith`] | [`ReduceMinMax`]'s types, [`Complex32`], [`Complex64`] | SUM, PROD reductions |
//!
//! They are sealed: the library relies on every implementor being plain data of 1 to 16
//! bytes for which every bit pattern is a value. [`Scalar`] (hidden) converts AMO and p2p
//! operands into the uniform forms the internals take: 64-bit patterns with a gsas-core
//! [`AtomicType`] code, or integers for comparisons. `long double` has no Rust type: the C
//! ABI moves it as [`LongDouble`] bytes.
//!
//! **What it is not.** No arithmetic: atomics execute in the service or as CPU atomics on
//! 32- and 64-bit patterns.
//!
//! **Thread-safety.** Marker traits and `Copy` conversions.

use gsas_core::wire::AtomicType;

mod sealed {
    pub trait Sealed {}
}

/// The kind of a scalar operand: width, signedness, float.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarKind {
    /// `i16`.
    I16,
    /// `u16`.
    U16,
    /// `i32`.
    I32,
    /// `u32`.
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl ScalarKind {
    /// Width in bytes.
    #[inline(always)]
    pub const fn width(self) -> usize {
        match self {
            ScalarKind::I16 | ScalarKind::U16 => 2,
            ScalarKind::I32 | ScalarKind::U32 | ScalarKind::F32 => 4,
            ScalarKind::I64 | ScalarKind::U64 | ScalarKind::F64 => 8,
        }
    }

    /// The gsas-core atomic type code (16-bit kinds have none: they exist only for the
    /// deprecated p2p routines).
    #[inline(always)]
    pub const fn atomic(self) -> AtomicType {
        match self {
            ScalarKind::I32 => AtomicType::I32,
            ScalarKind::U32 => AtomicType::U32,
            ScalarKind::I64 => AtomicType::I64,
            ScalarKind::U64 => AtomicType::U64,
            ScalarKind::F32 => AtomicType::F32,
            ScalarKind::F64 => AtomicType::F64,
            ScalarKind::I16 | ScalarKind::U16 => AtomicType::Unknown(15),
        }
    }
}

/// Conversions of an operand into the internals' uniform forms (sealed).
#[doc(hidden)]
pub trait Scalar: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The kind.
    const KIND: ScalarKind;
    /// The bit pattern, zero-extended to 64 bits.
    fn to_bits(self) -> u64;
    /// The value of a bit pattern (upper bits beyond the width ignored).
    fn from_bits(bits: u64) -> Self;
    /// The value as an integer for comparisons (0 for floats, which p2p does not take).
    fn to_i128(self) -> i128;
}

/// Types that may be moved by RMA: plain data, any bit pattern a value (sealed).
///
/// # Safety
///
/// Implemented only inside this crate, for types without padding or invalid bit patterns.
pub unsafe trait Symmetric: Copy + Send + Sync + 'static + sealed::Sealed {}

/// The standard AMO types (OpenSHMEM 1.5 §9.7), also the point-to-point types (§9.10).
pub trait AmoStandard: Symmetric + Scalar {}
/// The extended AMO types (§9.7): the standard ones plus `f32` and `f64`.
pub trait AmoExtended: Symmetric + Scalar {}
/// The bitwise AMO types (§9.7).
pub trait AmoBitwise: Symmetric + Scalar {}
/// The types of the AND, OR and XOR team reductions (§9.9.9, table "Reduction Types").
pub trait ReduceBitwise: Symmetric + crate::coll::ops::Elem {}
/// The types of the MAX and MIN team reductions (§9.9.9).
pub trait ReduceMinMax: Symmetric + crate::coll::ops::Elem {}
/// The types of the SUM and PROD team reductions (§9.9.9).
pub trait ReduceArith: Symmetric + crate::coll::ops::Elem {}

macro_rules! symmetric {
    ($($t:ty),*) => {
        $(
            impl sealed::Sealed for $t {}
            // SAFETY: primitive integers and floats, and `repr(C)` pairs of floats, have no
            // padding and no invalid values.
            unsafe impl Symmetric for $t {}
        )*
    };
}
symmetric!(
    i8, u8, i16, u16, i32, u32, i64, u64, i128, u128, isize, usize, f32, f64
);

macro_rules! scalar_int {
    ($($t:ty => $kind:ident as $u:ty),*) => {
        $(
            impl Scalar for $t {
                const KIND: ScalarKind = ScalarKind::$kind;
                #[inline(always)]
                fn to_bits(self) -> u64 {
                    self as $u as u64
                }
                #[inline(always)]
                fn from_bits(bits: u64) -> Self {
                    bits as $u as $t
                }
                #[inline(always)]
                fn to_i128(self) -> i128 {
                    self as i128
                }
            }
        )*
    };
}
scalar_int!(
    i16 => I16 as u16, u16 => U16 as u16,
    i32 => I32 as u32, u32 => U32 as u32,
    i64 => I64 as u64, u64 => U64 as u64
);
#[cfg(target_pointer_width = "64")]
scalar_int!(isize => I64 as u64, usize => U64 as u64);

impl Scalar for f32 {
    const KIND: ScalarKind = ScalarKind::F32;
    #[inline(always)]
    fn to_bits(self) -> u64 {
        u64::from(f32::to_bits(self))
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
    fn to_i128(self) -> i128 {
        0
    }
}

impl Scalar for f64 {
    const KIND: ScalarKind = ScalarKind::F64;
    #[inline(always)]
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
    fn to_i128(self) -> i128 {
        0
    }
}

macro_rules! class {
    ($tr:ident: $($t:ty),*) => { $( impl $tr for $t {} )* };
}
class!(AmoStandard: i32, u32, i64, u64, isize, usize);
class!(AmoExtended: i32, u32, i64, u64, isize, usize, f32, f64);
class!(AmoBitwise: i32, u32, i64, u64);
class!(ReduceBitwise: u8, u16, u32, u64, i8, i16, i32, i64, usize);
class!(ReduceMinMax: i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, f32, f64);
class!(ReduceArith: i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, f32, f64);
class!(ReduceArith: Complex32, Complex64);

/// A C `float _Complex`: the element type of complex reductions (sum and product).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Complex32 {
    /// The real part.
    pub re: f32,
    /// The imaginary part.
    pub im: f32,
}

/// A C `double _Complex`: the element type of complex reductions (sum and product).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Complex64 {
    /// The real part.
    pub re: f64,
    /// The imaginary part.
    pub im: f64,
}

symmetric!(Complex32, Complex64);

/// The storage of a C `long double` (16 bytes on x86_64 and aarch64): moved as bytes by the
/// RMA routines of the `longdouble` type.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug)]
pub struct LongDouble(pub [u8; 16]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_patterns_are_zero_extended_and_round_trip() {
        assert_eq!((-1i32).to_bits(), 0xffff_ffff);
        assert_eq!(i32::from_bits(0xffff_ffff), -1);
        assert_eq!((-2i64).to_bits(), u64::MAX - 1);
        assert_eq!(<u32 as Scalar>::from_bits(0x1_0000_0005), 5);
        assert_eq!(Scalar::to_bits(1.5f64), 1.5f64.to_bits());
        assert_eq!(<f32 as Scalar>::from_bits(Scalar::to_bits(-0.25f32)), -0.25);
        assert_eq!((-7i16).to_i128(), -7);
        assert_eq!(u64::MAX.to_i128(), u64::MAX as i128);
        assert_eq!(usize::KIND, ScalarKind::U64);
        assert_eq!(isize::KIND.atomic(), AtomicType::I64);
        assert_eq!(ScalarKind::F32.width(), 4);
        assert_eq!(std::mem::size_of::<LongDouble>(), 16);
    }
}
