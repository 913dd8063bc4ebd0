//! Point-to-point synchronization and signal reads (OpenSHMEM 1.5 §9.10, and
//! `shmem_signal_fetch` of §9.8.2).
//!
//! **What it is.** Waits and tests on variables in the calling PE's own memory that other
//! PEs update: `wait_until`, `test`, and the multi-element forms `_all`, `_any`, `_some`
//! with one comparison value or a vector of them. Variables are read with atomic (acquire)
//! loads of their width, so updates by AMOs and by puts of other PEs (same-node stores or
//! the service's writes) are seen. The element type arrives as a [`ScalarKind`] and the
//! comparison values as integers: no per-type code below the ABI.
//!
//! Rules (checklist §2.10): `status` is an optional mask (a nonzero entry excludes the
//! element; NULL includes all); an empty set makes `wait_until_all` return at once,
//! `_any` return `SIZE_MAX` and `_some` return 0; `test_all` of an empty set is 1; `_some`
//! fills `indices` with every satisfied index (ascending) and returns their number;
//! `_any` starts each scan after the index it returned last, so repeated calls report every
//! satisfied element. Waits spin, yield and sleep (see [`crate::wait`]) and are bounded by
//! `SHMEM_WAIT_TIMEOUT`. Waits and tests alike drive this PE's own remote operations
//! before they look ([`crate::wait::progress`]), so that two PEs that update each other
//! and then poll with `test` (no quiet) both see the updates.
//!
//! **What it is not.** No remote reads: the variables are local by definition.
//!
//! **Thread-safety.** Reentrant; the `_any` rotation is a shared atomic hint.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI16, AtomicI32, AtomicI64, AtomicUsize, Ordering};

use crate::fatal::fatal;
use crate::state;
use crate::types::ScalarKind;
use crate::wait::{What, progress, progress_polled, tested, wait_for};

/// A comparison operator (`SHMEM_CMP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `SHMEM_CMP_EQ` (1).
    Eq,
    /// `SHMEM_CMP_NE` (2).
    Ne,
    /// `SHMEM_CMP_GT` (3).
    Gt,
    /// `SHMEM_CMP_GE` (4).
    Ge,
    /// `SHMEM_CMP_LT` (5).
    Lt,
    /// `SHMEM_CMP_LE` (6).
    Le,
}

impl Cmp {
    /// The operator of a C `cmp` argument; anything else is a fatal error naming `call`.
    pub fn from_c(cmp: c_int, call: &str) -> Cmp {
        match cmp {
            1 => Cmp::Eq,
            2 => Cmp::Ne,
            3 => Cmp::Gt,
            4 => Cmp::Ge,
            5 => Cmp::Lt,
            6 => Cmp::Le,
            other => fatal(
                call,
                format_args!(
                    "comparison operator {other} is not one of SHMEM_CMP_EQ (1) .. SHMEM_CMP_LE (6)"
                ),
            ),
        }
    }

    /// The C value.
    pub fn to_c(self) -> c_int {
        self as c_int + 1
    }

    /// Whether `value <op> against` holds.
    #[inline]
    pub fn holds(self, value: i128, against: i128) -> bool {
        match self {
            Cmp::Eq => value == against,
            Cmp::Ne => value != against,
            Cmp::Gt => value > against,
            Cmp::Ge => value >= against,
            Cmp::Lt => value < against,
            Cmp::Le => value <= against,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
        }
    }
}

/// Loads the variable at `p` with an atomic acquire load of its width, as an integer.
///
/// # Safety
///
/// `p` valid for reads of `kind.width()` bytes and aligned to it.
#[inline]
pub unsafe fn load(p: *const u8, kind: ScalarKind) -> i128 {
    let acq = Ordering::Acquire;
    // SAFETY: the caller guarantees a valid aligned location; other writers use stores or
    // atomics of the same width.
    unsafe {
        match kind {
            ScalarKind::I16 => AtomicI16::from_ptr(p.cast_mut().cast()).load(acq).into(),
            ScalarKind::U16 => (AtomicI16::from_ptr(p.cast_mut().cast()).load(acq) as u16).into(),
            ScalarKind::I32 | ScalarKind::F32 => {
                AtomicI32::from_ptr(p.cast_mut().cast()).load(acq).into()
            }
            ScalarKind::U32 => (AtomicI32::from_ptr(p.cast_mut().cast()).load(acq) as u32).into(),
            ScalarKind::I64 | ScalarKind::F64 => {
                AtomicI64::from_ptr(p.cast_mut().cast()).load(acq).into()
            }
            ScalarKind::U64 => (AtomicI64::from_ptr(p.cast_mut().cast()).load(acq) as u64).into(),
        }
    }
}

/// Reads a comparison value from a vector (plain load).
///
/// # Safety
///
/// `p` valid for reads of `kind.width()` bytes.
unsafe fn read(p: *const u8, kind: ScalarKind) -> i128 {
    // SAFETY: the caller guarantees a readable element.
    unsafe {
        match kind {
            ScalarKind::I16 => std::ptr::read_unaligned(p.cast::<i16>()).into(),
            ScalarKind::U16 => std::ptr::read_unaligned(p.cast::<u16>()).into(),
            ScalarKind::I32 | ScalarKind::F32 => std::ptr::read_unaligned(p.cast::<i32>()).into(),
            ScalarKind::U32 => std::ptr::read_unaligned(p.cast::<u32>()).into(),
            ScalarKind::I64 | ScalarKind::F64 => std::ptr::read_unaligned(p.cast::<i64>()).into(),
            ScalarKind::U64 => std::ptr::read_unaligned(p.cast::<u64>()).into(),
        }
    }
}

fn check_aligned(p: *const u8, kind: ScalarKind, call: &str) {
    if (p as usize) % kind.width() != 0 {
        fatal(
            call,
            format_args!("{p:p} is not aligned to its type ({} bytes)", kind.width()),
        );
    }
}

/// `shmem_TYPE_wait_until`: waits until `*ivar <cmp> value`; returns the value that
/// satisfied it.
///
/// # Safety
///
/// `ivar` valid for reads of the kind's width.
pub unsafe fn wait_until(
    ivar: *const u8,
    kind: ScalarKind,
    cmp: Cmp,
    value: i128,
    call: &str,
) -> i128 {
    let st = state::live(call);
    check_aligned(ivar, kind, call);
    let what = What(|f| {
        // SAFETY: `ivar` stays valid during the wait (caller's contract).
        let now = unsafe { load(ivar, kind) };
        write!(f, "the variable at {ivar:p}")?;
        if let Some(sym) = st.segs.translate(ivar as usize, kind.width()) {
            write!(f, " ({} + {:#x})", segment_name(sym.seg), sym.off)?;
        }
        write!(f, " to become {} {value} (it is {now})", cmp.symbol())
    });
    wait_for(st, call, what, || {
        // SAFETY: as above.
        let v = unsafe { load(ivar, kind) };
        cmp.holds(v, value).then_some(v)
    })
}

/// The name of a symmetric segment in messages.
fn segment_name(seg: u8) -> &'static str {
    match seg {
        gsas_node::HEAP => "heap",
        gsas_node::DATA => "data",
        _ => "segment",
    }
}

/// `shmem_TYPE_test`: whether `*ivar <cmp> value` holds now.
///
/// # Safety
///
/// As [`wait_until`].
pub unsafe fn test(ivar: *const u8, kind: ScalarKind, cmp: Cmp, value: i128, call: &str) -> bool {
    let st = state::live(call);
    check_aligned(ivar, kind, call);
    progress_polled(st, call);
    // SAFETY: forwarded.
    tested(
        st,
        call,
        || cmp.holds(unsafe { load(ivar, kind) }, value),
        |&b| b,
    )
}

/// The comparison values of a multi-element routine.
#[derive(Clone, Copy, Debug)]
pub enum Values {
    /// One value for every element.
    One(i128),
    /// `cmp_values[i]` for element `i` (a C array of the element type).
    Each(*const u8),
}

/// A set of variables with its mask and condition.
#[derive(Clone, Copy, Debug)]
pub struct Set {
    /// The first variable.
    pub ivars: *const u8,
    /// Number of variables.
    pub nelems: usize,
    /// The mask (NULL: all included).
    pub status: *const c_int,
    /// Element kind.
    pub kind: ScalarKind,
    /// The comparison.
    pub cmp: Cmp,
    /// The values.
    pub values: Values,
}

impl Set {
    /// Whether element `i` takes part.
    ///
    /// # Safety
    ///
    /// `status`, if non-null, readable for `nelems` ints.
    unsafe fn included(&self, i: usize) -> bool {
        // SAFETY: the caller's contract.
        self.status.is_null() || unsafe { *self.status.add(i) } == 0
    }

    /// Whether element `i` satisfies its condition.
    ///
    /// # Safety
    ///
    /// `ivars` (and a value vector) readable for `nelems` elements.
    unsafe fn satisfied(&self, i: usize) -> bool {
        let w = self.kind.width();
        // SAFETY: the caller's contract.
        unsafe {
            let against = match self.values {
                Values::One(v) => v,
                Values::Each(p) => read(p.add(i * w), self.kind),
            };
            self.cmp
                .holds(load(self.ivars.add(i * w), self.kind), against)
        }
    }

    /// Whether no element takes part.
    ///
    /// # Safety
    ///
    /// As [`Set::included`].
    unsafe fn empty(&self) -> bool {
        // SAFETY: forwarded.
        (0..self.nelems).all(|i| unsafe { !self.included(i) })
    }

    fn check(&self, call: &str) {
        if self.nelems > 0 {
            if self.ivars.is_null() {
                fatal(
                    call,
                    format_args!("ivars is NULL with nelems = {}", self.nelems),
                );
            }
            check_aligned(self.ivars, self.kind, call);
            if let Values::Each(p) = self.values {
                if p.is_null() {
                    fatal(call, "cmp_values is NULL");
                }
            }
        }
    }

    fn describe(&self, f: &mut std::fmt::Formatter<'_>, quantifier: &str) -> std::fmt::Result {
        write!(
            f,
            "{quantifier} of the {} variables at {:p} to satisfy {} ",
            self.nelems,
            self.ivars,
            self.cmp.symbol()
        )?;
        match self.values {
            Values::One(v) => write!(f, "{v}"),
            Values::Each(p) => write!(f, "the values at {p:p}"),
        }
    }
}

/// Where `_any` scans start next.
static ANY_CURSOR: AtomicUsize = AtomicUsize::new(0);

/// The first satisfied included index at or after the rotation cursor.
///
/// # Safety
///
/// The set's arrays readable.
unsafe fn find_any(set: &Set) -> Option<usize> {
    let n = set.nelems;
    let start = ANY_CURSOR.load(Ordering::Relaxed) % n.max(1);
    for k in 0..n {
        let i = (start + k) % n;
        // SAFETY: `i < nelems`.
        if unsafe { set.included(i) && set.satisfied(i) } {
            ANY_CURSOR.store(i + 1, Ordering::Relaxed);
            return Some(i);
        }
    }
    None
}

/// Writes every satisfied included index to `indices`; returns their number.
///
/// # Safety
///
/// The set's arrays readable; `indices` writable for `nelems` entries.
unsafe fn collect_some(set: &Set, indices: *mut usize) -> usize {
    let mut count = 0;
    for i in 0..set.nelems {
        // SAFETY: `i < nelems`; `indices` has room for `nelems` entries.
        unsafe {
            if set.included(i) && set.satisfied(i) {
                *indices.add(count) = i;
                count += 1;
            }
        }
    }
    count
}

/// `shmem_TYPE_wait_until_all[_vector]`.
///
/// # Safety
///
/// The set's arrays readable for `nelems` elements.
pub unsafe fn wait_until_all(set: Set, call: &str) {
    let st = state::live(call);
    set.check(call);
    let what = What(|f| set.describe(f, "all"));
    wait_for(st, call, what, || {
        // SAFETY: forwarded.
        (0..set.nelems)
            .all(|i| unsafe { !set.included(i) || set.satisfied(i) })
            .then_some(())
    })
}

/// `shmem_TYPE_wait_until_any[_vector]`: an index, `SIZE_MAX` for an empty set.
///
/// # Safety
///
/// As [`wait_until_all`].
pub unsafe fn wait_until_any(set: Set, call: &str) -> usize {
    let st = state::live(call);
    set.check(call);
    // SAFETY: forwarded.
    if unsafe { set.empty() } {
        return usize::MAX;
    }
    let what = What(|f| set.describe(f, "any"));
    // SAFETY: forwarded.
    wait_for(st, call, what, || unsafe { find_any(&set) })
}

/// `shmem_TYPE_wait_until_some[_vector]`: the number of satisfied indices written.
///
/// # Safety
///
/// As [`wait_until_all`]; `indices` writable for `nelems` entries.
pub unsafe fn wait_until_some(set: Set, indices: *mut usize, call: &str) -> usize {
    let st = state::live(call);
    set.check(call);
    // SAFETY: forwarded.
    if unsafe { set.empty() } {
        return 0;
    }
    if indices.is_null() {
        fatal(call, "indices is NULL");
    }
    let what = What(|f| set.describe(f, "some"));
    wait_for(st, call, what, || {
        // SAFETY: forwarded.
        let n = unsafe { collect_some(&set, indices) };
        (n > 0).then_some(n)
    })
}

/// `shmem_TYPE_test_all[_vector]`: 1 if every included element is satisfied (also for an
/// empty set), else 0.
///
/// # Safety
///
/// As [`wait_until_all`].
pub unsafe fn test_all(set: Set, call: &str) -> c_int {
    let st = state::live(call);
    set.check(call);
    progress_polled(st, call);
    // SAFETY: forwarded.
    let all = || (0..set.nelems).all(|i| unsafe { !set.included(i) || set.satisfied(i) });
    c_int::from(tested(st, call, all, |&b| b))
}

/// `shmem_TYPE_test_any[_vector]`: a satisfied index or `SIZE_MAX`.
///
/// # Safety
///
/// As [`wait_until_all`].
pub unsafe fn test_any(set: Set, call: &str) -> usize {
    let st = state::live(call);
    set.check(call);
    progress_polled(st, call);
    // SAFETY: forwarded. An empty set is never satisfied: no nap for it.
    if unsafe { set.empty() } {
        return usize::MAX;
    }
    // SAFETY: forwarded.
    let any = || unsafe { find_any(&set) };
    tested(st, call, any, Option::is_some).unwrap_or(usize::MAX)
}

/// `shmem_TYPE_test_some[_vector]`: the number of satisfied indices written.
///
/// # Safety
///
/// As [`wait_until_some`].
pub unsafe fn test_some(set: Set, indices: *mut usize, call: &str) -> usize {
    let st = state::live(call);
    set.check(call);
    if set.nelems > 0 && indices.is_null() {
        fatal(call, "indices is NULL");
    }
    progress_polled(st, call);
    // SAFETY: forwarded. An empty set is never satisfied: no nap for it.
    if unsafe { set.empty() } {
        return 0;
    }
    // SAFETY: forwarded (a nap evaluates again and writes `indices` again).
    tested(
        st,
        call,
        || unsafe { collect_some(&set, indices) },
        |&n| n > 0,
    )
}

/// `shmem_signal_fetch`: the signal word's value (atomic acquire load).
///
/// # Safety
///
/// `sig` valid for reads of 8 bytes.
pub unsafe fn signal_fetch(sig: *const u64, call: &str) -> u64 {
    let st = state::live(call);
    check_aligned(sig.cast(), ScalarKind::U64, call);
    progress(st, call);
    // No condition to tell whether the program answers now: owed acknowledgements go.
    crate::coll::direct::release_owed();
    // SAFETY: forwarded.
    unsafe { load(sig.cast(), ScalarKind::U64) as u64 }
}

/// `shmem_signal_wait_until`: waits until `*sig <cmp> value`; returns the satisfying value.
///
/// # Safety
///
/// As [`signal_fetch`].
pub unsafe fn signal_wait_until(sig: *const u64, cmp: Cmp, value: u64, call: &str) -> u64 {
    // SAFETY: forwarded.
    unsafe { wait_until(sig.cast(), ScalarKind::U64, cmp, i128::from(value), call) as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators() {
        for c in 1..=6 {
            assert_eq!(Cmp::from_c(c, "t").to_c(), c);
        }
        assert!(Cmp::Gt.holds(3, 2) && !Cmp::Gt.holds(2, 2));
        assert!(Cmp::Ge.holds(2, 2) && Cmp::Le.holds(2, 2) && Cmp::Lt.holds(-1, 0));
        assert!(Cmp::Ne.holds(1, 2) && Cmp::Eq.holds(7, 7));
    }

    #[test]
    fn loads_respect_width_and_sign() {
        let words: [u64; 2] = [0xffff_ffff_ffff_fffe, 0];
        let p = words.as_ptr().cast::<u8>();
        // SAFETY: `words` is a live, aligned array.
        unsafe {
            assert_eq!(load(p, ScalarKind::I64), -2);
            assert_eq!(load(p, ScalarKind::U64), 0xffff_ffff_ffff_fffe);
            assert_eq!(load(p, ScalarKind::I32), -2);
            assert_eq!(load(p, ScalarKind::U32), 0xffff_fffe);
            assert_eq!(load(p, ScalarKind::I16), -2);
            assert_eq!(load(p, ScalarKind::U16), 0xfffe);
            assert_eq!(read(p.add(8), ScalarKind::U64), 0);
        }
    }

    #[test]
    fn sets_masks_and_rotation_without_waiting() {
        let vars: [i32; 5] = [1, 0, 1, 1, 0];
        let status: [c_int; 5] = [0, 0, 1, 0, 0];
        let set = Set {
            ivars: vars.as_ptr().cast(),
            nelems: 5,
            status: status.as_ptr(),
            kind: ScalarKind::I32,
            cmp: Cmp::Eq,
            values: Values::One(1),
        };
        let mut idx = [usize::MAX; 5];
        // SAFETY: the arrays above are live for all calls.
        unsafe {
            assert_eq!(collect_some(&set, idx.as_mut_ptr()), 2);
            assert_eq!(idx[..2], [0, 3]);
            assert!(!set.empty());
            // Rotation: consecutive scans report both satisfied indices.
            let a = find_any(&set).unwrap();
            let b = find_any(&set).unwrap();
            assert_ne!(a, b);
            assert!([0, 3].contains(&a) && [0, 3].contains(&b));
            let all_out: [c_int; 5] = [1; 5];
            let masked = Set {
                status: all_out.as_ptr(),
                ..set
            };
            assert!(masked.empty());
            let each: [i32; 5] = [1, 0, 0, 0, 0];
            let vector = Set {
                values: Values::Each(each.as_ptr().cast()),
                status: std::ptr::null(),
                ..set
            };
            assert_eq!(collect_some(&vector, idx.as_mut_ptr()), 3);
            assert_eq!(idx[..3], [0, 1, 4]);
        }
    }
}
