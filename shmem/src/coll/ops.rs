//! The arithmetic of reductions: an operation, an element type, and the loop that folds one
//! array into another (`acc[i] = acc[i] op x[i]`).
//!
//! **What it is.** [`Op`] and [`DType`] are the codes the C ABI and the Rust API pass to
//! `reduce`; [`kernel`] picks, once per reduction, the monomorphized loop for the pair, or
//! `None` when the specification has no such reduction (bitwise operations on floating
//! point or complex types, MAX/MIN on complex types). The rules:
//!
//! * integers wrap (C leaves signed overflow undefined, so any result is conforming; this
//!   one is the same on every PE);
//! * MAX/MIN of floating point keep the first operand unless the second compares greater
//!   (resp. less), so a NaN in the accumulator stays;
//! * complex SUM adds both parts; PROD is `(a+bi)(c+di) = (ac-bd) + (ad+bc)i`;
//! * `long double` (x87 80-bit on x86_64, binary128 on aarch64) is done by the C helper
//!   `gsas_shmem_longdouble_reduce` (`csrc/longdouble.c`), the only place that knows the
//!   type.
//!
//! Elements are read and written unaligned, so any buffer works.
//!
//! **What it is not.** No order: the caller folds partials in member order so that every
//! PE gets the same bits.
//!
//! **Thread-safety.** Pure functions.

use std::ffi::{c_int, c_void};
use std::ptr::{read_unaligned as rd, write_unaligned as wr};

use crate::types::{Complex32, Complex64, LongDouble};

/// A reduction operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Bitwise AND.
    And,
    /// Bitwise OR.
    Or,
    /// Bitwise XOR.
    Xor,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Sum.
    Sum,
    /// Product.
    Prod,
}

impl Op {
    /// The code of the C helper (`csrc/longdouble.c`).
    fn c_code(self) -> c_int {
        self as c_int
    }
}

/// An element type of a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// `int8_t`, `signed char`, `char` where signed.
    I8,
    /// `int16_t`, `short`.
    I16,
    /// `int32_t`, `int`.
    I32,
    /// `int64_t`, `long`, `long long`, `ptrdiff_t`.
    I64,
    /// `uint8_t`, `unsigned char`, `char` where unsigned.
    U8,
    /// `uint16_t`, `unsigned short`.
    U16,
    /// `uint32_t`, `unsigned int`.
    U32,
    /// `uint64_t`, `unsigned long [long]`, `size_t`.
    U64,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// `long double` (16 bytes of storage).
    LongDouble,
    /// `float _Complex`.
    C32,
    /// `double _Complex`.
    C64,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C32 => 8,
            DType::LongDouble | DType::C64 => 16,
        }
    }

    /// The bytes of one element that SUM leaves every value unchanged with: 0 for the
    /// integers, -0.0 for floating point (`-0.0 + x` is `x` for every `x`, `+0.0` and
    /// `-0.0` included; `+0.0` would turn a `-0.0` into `+0.0`), `-0.0 - 0.0i` for complex.
    pub fn sum_identity(self) -> Vec<u8> {
        match self {
            DType::F32 => (-0.0f32).to_ne_bytes().to_vec(),
            DType::F64 => (-0.0f64).to_ne_bytes().to_vec(),
            DType::C32 => [(-0.0f32).to_ne_bytes(), (-0.0f32).to_ne_bytes()].concat(),
            DType::C64 => [(-0.0f64).to_ne_bytes(), (-0.0f64).to_ne_bytes()].concat(),
            DType::LongDouble => {
                let mut out = [0u8; 16];
                // SAFETY: `out` is 16 writable bytes, the storage of a `long double`.
                unsafe { gsas_shmem_longdouble_from_double(-0.0, out.as_mut_ptr().cast()) };
                out.to_vec()
            }
            _ => vec![0; self.size()],
        }
    }
}

unsafe extern "C" {
    /// `*out = (long double)v` (the C shim: Rust has no `long double`).
    fn gsas_shmem_longdouble_from_double(v: f64, out: *mut std::ffi::c_void);
}

/// The element types of reductions and their codes.
pub trait Elem: Copy {
    /// The code.
    const DTYPE: DType;
}

macro_rules! elem {
    ($($t:ty => $d:ident),* $(,)?) => { $( impl Elem for $t { const DTYPE: DType = DType::$d; } )* };
}
elem!(
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    f32 => F32, f64 => F64,
    LongDouble => LongDouble, Complex32 => C32, Complex64 => C64,
);
#[cfg(target_pointer_width = "64")]
elem!(isize => I64, usize => U64);

/// `acc[i] = acc[i] op x[i]` for `i < n`.
pub type Kernel = unsafe fn(acc: *mut u8, x: *const u8, n: usize);

/// Folds with `f`.
///
/// # Safety
///
/// `acc` and `x` valid for `n` elements of `T`.
#[inline(always)]
unsafe fn fold<T: Copy>(acc: *mut u8, x: *const u8, n: usize, f: impl Fn(T, T) -> T) {
    let (a, b) = (acc.cast::<T>(), x.cast::<T>());
    for i in 0..n {
        // SAFETY: `i < n` elements of both arrays.
        unsafe { wr(a.add(i), f(rd(a.add(i)), rd(b.add(i)))) };
    }
}

macro_rules! int_kernels {
    ($($t:ty),*) => {
        $(
            impl Kernels for $t {
                fn kernel(op: Op) -> Option<Kernel> {
                    Some(match op {
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::And => |a, x, n| unsafe { fold::<$t>(a, x, n, |p, q| p & q) },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Or => |a, x, n| unsafe { fold::<$t>(a, x, n, |p, q| p | q) },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Xor => |a, x, n| unsafe { fold::<$t>(a, x, n, |p, q| p ^ q) },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Max => |a, x, n| unsafe { fold::<$t>(a, x, n, |p, q| p.max(q)) },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Min => |a, x, n| unsafe { fold::<$t>(a, x, n, |p, q| p.min(q)) },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Sum => |a, x, n| unsafe { fold::<$t>(a, x, n, <$t>::wrapping_add) },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Prod => |a, x, n| unsafe { fold::<$t>(a, x, n, <$t>::wrapping_mul) },
                    })
                }
            }
        )*
    };
}

macro_rules! float_kernels {
    ($($t:ty),*) => {
        $(
            impl Kernels for $t {
                fn kernel(op: Op) -> Option<Kernel> {
                    Some(match op {
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Max => |a, x, n| unsafe {
                            fold::<$t>(a, x, n, |p, q| if q > p { q } else { p })
                        },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Min => |a, x, n| unsafe {
                            fold::<$t>(a, x, n, |p, q| if q < p { q } else { p })
                        },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Sum => |a, x, n| unsafe { fold::<$t>(a, x, n, |p, q| p + q) },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Prod => |a, x, n| unsafe { fold::<$t>(a, x, n, |p, q| p * q) },
                        Op::And | Op::Or | Op::Xor => return None,
                    })
                }
            }
        )*
    };
}

macro_rules! complex_kernels {
    ($($t:ident: $f:ty),*) => {
        $(
            impl Kernels for $t {
                fn kernel(op: Op) -> Option<Kernel> {
                    Some(match op {
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Sum => |a, x, n| unsafe {
                            fold::<$t>(a, x, n, |p, q| $t { re: p.re + q.re, im: p.im + q.im })
                        },
                        // SAFETY: `fold`'s contract is `Kernel`'s.
                        Op::Prod => |a, x, n| unsafe {
                            fold::<$t>(a, x, n, |p, q| $t {
                                re: p.re * q.re - p.im * q.im,
                                im: p.re * q.im + p.im * q.re,
                            })
                        },
                        _ => return None,
                    })
                }
            }
        )*
    };
}

/// The kernels of one element type.
trait Kernels {
    fn kernel(op: Op) -> Option<Kernel>;
}

int_kernels!(i8, i16, i32, i64, u8, u16, u32, u64);
float_kernels!(f32, f64);
complex_kernels!(Complex32: f32, Complex64: f64);

unsafe extern "C" {
    /// `csrc/longdouble.c`: `acc[i] = acc[i] op x[i]` on `long double`; returns nonzero for
    /// an operation it does not do.
    fn gsas_shmem_longdouble_reduce(
        op: c_int,
        acc: *mut c_void,
        x: *const c_void,
        n: usize,
    ) -> c_int;
}

macro_rules! longdouble_kernel {
    ($op:expr) => {
        |a, x, n| {
            // SAFETY: `Kernel`'s contract: both arrays hold `n` long doubles.
            let rc = unsafe { gsas_shmem_longdouble_reduce($op.c_code(), a.cast(), x.cast(), n) };
            debug_assert_eq!(rc, 0, "the C helper refused {:?}", $op);
        }
    };
}

/// The loop for `op` on `dt`, or `None` if the specification has no such reduction.
pub fn kernel(op: Op, dt: DType) -> Option<Kernel> {
    match dt {
        DType::I8 => i8::kernel(op),
        DType::I16 => i16::kernel(op),
        DType::I32 => i32::kernel(op),
        DType::I64 => i64::kernel(op),
        DType::U8 => u8::kernel(op),
        DType::U16 => u16::kernel(op),
        DType::U32 => u32::kernel(op),
        DType::U64 => u64::kernel(op),
        DType::F32 => f32::kernel(op),
        DType::F64 => f64::kernel(op),
        DType::C32 => Complex32::kernel(op),
        DType::C64 => Complex64::kernel(op),
        DType::LongDouble => match op {
            Op::Max => Some(longdouble_kernel!(Op::Max)),
            Op::Min => Some(longdouble_kernel!(Op::Min)),
            Op::Sum => Some(longdouble_kernel!(Op::Sum)),
            Op::Prod => Some(longdouble_kernel!(Op::Prod)),
            Op::And | Op::Or | Op::Xor => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Elem>(op: Op, acc: &mut [T], x: &[T]) {
        let k = kernel(op, T::DTYPE).expect("a kernel");
        assert_eq!(acc.len(), x.len());
        // SAFETY: both slices hold `len` elements of `T`.
        unsafe { k(acc.as_mut_ptr().cast(), x.as_ptr().cast(), acc.len()) };
    }

    #[test]
    fn integers_wrap_and_compare_with_sign() {
        let mut a = [i8::MAX, -3, 5];
        run(Op::Sum, &mut a, &[1, -4, 0]);
        assert_eq!(a, [i8::MIN, -7, 5]);
        let mut b = [0xf0u16, 7, 9];
        run(Op::And, &mut b, &[0x3c, 2, 9]);
        assert_eq!(b, [0x30, 2, 9]);
        let mut c = [-1i64, 2, 3];
        run(Op::Max, &mut c, &[-2, 5, 3]);
        assert_eq!(c, [-1, 5, 3]);
        let mut d = [u32::MAX, 1];
        run(Op::Min, &mut d, &[0, 2]);
        assert_eq!(d, [0, 1]);
        let mut e = [3u64, 1 << 40];
        run(Op::Prod, &mut e, &[5, 1 << 30]);
        assert_eq!(e, [15, 0], "2^70 wraps to 0");
        let mut f = [0b1010u8];
        run(Op::Xor, &mut f, &[0b0110]);
        run(Op::Or, &mut f, &[0b0001]);
        assert_eq!(f, [0b1101]);
    }

    #[test]
    fn floats_and_complex() {
        let mut a = [1.5f64, -0.0, f64::NAN];
        run(Op::Max, &mut a, &[2.5, 0.0, 1.0]);
        assert_eq!(a[0], 2.5);
        assert!(a[1] == 0.0 && a[2].is_nan());
        let mut p = [Complex64 { re: 1.0, im: 2.0 }];
        run(Op::Prod, &mut p, &[Complex64 { re: 3.0, im: -1.0 }]);
        assert_eq!((p[0].re, p[0].im), (5.0, 5.0), "(1+2i)(3-i) = 5+5i");
        let mut s = [Complex32 { re: 1.0, im: 1.0 }];
        run(Op::Sum, &mut s, &[Complex32 { re: -2.0, im: 0.5 }]);
        assert_eq!((s[0].re, s[0].im), (-1.0, 1.5));
        assert!(kernel(Op::And, DType::F64).is_none());
        assert!(kernel(Op::Max, DType::C32).is_none());
        assert!(kernel(Op::Xor, DType::LongDouble).is_none());
    }

    #[test]
    fn long_double_through_the_c_helper() {
        // The value 1.5 as a long double, built by the C compiler's own conversion: the
        // helper sums 1.5 + 1.5 and multiplies, and the results compare as expected when
        // converted back by the helper's sibling (max of x and 3.0 is 3.0).
        let one_and_half = longdouble_from_f64(1.5);
        let mut acc = [one_and_half, longdouble_from_f64(-2.0)];
        run(Op::Sum, &mut acc, &[one_and_half, longdouble_from_f64(0.5)]);
        assert_eq!(longdouble_to_f64(acc[0]), 3.0);
        assert_eq!(longdouble_to_f64(acc[1]), -1.5);
        run(
            Op::Prod,
            &mut acc,
            &[longdouble_from_f64(4.0), longdouble_from_f64(2.0)],
        );
        assert_eq!(longdouble_to_f64(acc[0]), 12.0);
        run(
            Op::Max,
            &mut acc,
            &[longdouble_from_f64(100.0), longdouble_from_f64(-7.0)],
        );
        assert_eq!(
            (longdouble_to_f64(acc[0]), longdouble_to_f64(acc[1])),
            (100.0, -3.0)
        );
        run(
            Op::Min,
            &mut acc,
            &[longdouble_from_f64(-1.0), longdouble_from_f64(0.0)],
        );
        assert_eq!(longdouble_to_f64(acc[0]), -1.0);
    }

    unsafe extern "C" {
        fn gsas_shmem_longdouble_to_double(v: *const c_void) -> f64;
    }

    fn longdouble_from_f64(v: f64) -> LongDouble {
        let mut out = LongDouble([0; 16]);
        // SAFETY: `out` is 16 writable bytes, the storage of a long double.
        unsafe { gsas_shmem_longdouble_from_double(v, (&raw mut out).cast()) };
        out
    }

    fn longdouble_to_f64(v: LongDouble) -> f64 {
        // SAFETY: `v` is 16 readable bytes holding a long double.
        unsafe { gsas_shmem_longdouble_to_double((&raw const v).cast()) }
    }
}
