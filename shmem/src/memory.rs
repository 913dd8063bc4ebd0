//! Symmetric heap management (OpenSHMEM 1.5 §9.3 "Memory Management Routines"): the
//! collective `shmem_malloc`, `calloc`, `align`, `malloc_with_hints`, `realloc`, `free`.
//!
//! **What it is.** The node client's deterministic allocator gives the same offset on
//! every PE that makes the same calls, so a block's address is `heap base + offset` on each
//! PE without any exchange. This module adds the collective rules (checklist §2.3): a
//! barrier (quiet of the default context plus a synchronization of all PEs) on exit of
//! malloc, calloc, align and malloc_with_hints, on entry of free, and on entry and exit of
//! realloc; size 0 (calloc: count or size 0) returns NULL with **no** barrier; `free(NULL)`
//! is a no-op without barrier; `realloc(NULL, n)` is malloc, `realloc(p, 0)` is free;
//! a failed allocation returns NULL on every PE (the allocators agree) and leaves a
//! reallocated block unchanged; the job's first such failure is printed by PE 0 with the
//! heap's size (every one, on every PE, with `SHMEM_DEBUG`). Alignments must be powers of
//! two (a smaller one than `sizeof(void *)`, 1, 2 or 4, is rounded up to it, as other
//! implementations do: every block is at least pointer-aligned) and at most the alignment
//! of the heap mapping (the heap size rounded up to a power of two, at most 1 GiB; see
//! `gsas_transport::shm::mapping_alignment`), else NULL is returned (on every PE, without
//! barrier).
//! These routines leave `errno` as they found it (system calls inside a barrier may set it
//! on the way; a C program that checks `errno` after a successful `shmem_malloc` must not
//! see that). Unknown
//! `malloc_with_hints` bits are ignored (reported with `SHMEM_DEBUG`): hints only permit
//! optimisations.
//!
//! Freeing or reallocating something that is not a live block of the symmetric heap is a
//! fatal error naming the call.
//!
//! **What it is not.** No checking that all PEs passed the same arguments (the
//! specification makes a mismatch undefined).
//!
//! **Thread-safety.** The allocator is behind a mutex in the node client; the collective
//! rules require every PE to call in the same order.

use std::ffi::{c_long, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use gsas_core::symheap::AllocError;
use gsas_node::NodeError;

use crate::ctx_table::debug;
use crate::fatal::fatal;
use crate::state::{self, State};

/// `SHMEM_MALLOC_ATOMICS_REMOTE`.
pub const MALLOC_ATOMICS_REMOTE: c_long = 1 << 0;
/// `SHMEM_MALLOC_SIGNAL_REMOTE`.
pub const MALLOC_SIGNAL_REMOTE: c_long = 1 << 1;

/// Restores the calling thread's `errno` when dropped: the memory routines report through
/// their results, never through `errno`, and must not leave behind what a system call of
/// the barrier or the allocator's lock set on the way.
struct KeepErrno(std::ffi::c_int);

impl KeepErrno {
    fn new() -> KeepErrno {
        // SAFETY: `__errno_location` returns the calling thread's errno, always valid.
        KeepErrno(unsafe { *libc::__errno_location() })
    }
}

impl Drop for KeepErrno {
    fn drop(&mut self) {
        // SAFETY: as in `new`; the same thread (the guard is a local of the routine).
        unsafe { *libc::__errno_location() = self.0 };
    }
}

fn barrier(st: &State, call: &str) {
    let _named = gsas_node::watch::scope(call);
    if let Err(e) = st.node.barrier_all() {
        fatal(call, e);
    }
}

fn address(st: &State, off: Option<u64>) -> *mut c_void {
    off.map_or(std::ptr::null_mut(), |o| {
        (st.segs.heap.base + o as usize) as *mut c_void
    })
}

/// Reports an allocation that returns NULL: by default the job's first one, on PE 0 only
/// (every PE gets NULL: the allocators agree), with the heap's size and the variable that
/// sets it, as other implementations print it without being asked (not with `SHMEM_QUIET`);
/// with `SHMEM_DEBUG` every one on every PE.
fn report_failure(call: &str, e: &AllocError) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    let Some(st) = state::get() else { return };
    if st.config.debug {
        debug(call, e);
    } else if st.me == 0 && !st.config.quiet && !REPORTED.swap(true, Ordering::Relaxed) {
        gsas_transport::eprintln_whole!(
            "gsas-shmem: PE 0: {call}: {e}; the symmetric heap is {} bytes per PE \
             (SHMEM_SYMMETRIC_SIZE sets it); NULL on every PE (SHMEM_DEBUG=1 reports every \
             failed allocation)",
            st.segs.heap.len
        );
    }
}

/// The outcome of an allocator call: an offset, or NULL after an exhaustion (reported, see
/// [`report_failure`]); other errors are fatal.
fn outcome(r: Result<Option<u64>, NodeError>, call: &str) -> Option<u64> {
    match r {
        Ok(o) => o,
        Err(NodeError::Heap(
            e @ (AllocError::OutOfMemory { .. }
            | AllocError::MetadataFull { .. }
            | AllocError::SizeOverflow { .. }
            | AllocError::InvalidAlignment { .. }),
        )) => {
            report_failure(call, &e);
            None
        }
        Err(e) => fatal(call, e),
    }
}

/// The heap offset of a block pointer; not a heap address is fatal.
fn offset_of(st: &State, ptr: *mut c_void, call: &str) -> u64 {
    match st.segs.heap.offset_of(ptr as usize, 0) {
        Some(o) => o,
        None => fatal(
            call,
            format_args!(
                "{ptr:p} is not a block of the symmetric heap ({})",
                st.segs.describe()
            ),
        ),
    }
}

/// `shmem_malloc` (§9.3.1).
pub fn malloc(size: usize, call: &str) -> *mut c_void {
    let _errno = KeepErrno::new();
    let st = state::live(call);
    if size == 0 {
        return std::ptr::null_mut();
    }
    let off = outcome(st.node.alloc(size as u64), call);
    barrier(st, call);
    address(st, off)
}

/// `shmem_malloc_with_hints` (§9.3.2).
pub fn malloc_with_hints(size: usize, hints: c_long, call: &str) -> *mut c_void {
    let unknown = hints & !(MALLOC_ATOMICS_REMOTE | MALLOC_SIGNAL_REMOTE);
    if unknown != 0 {
        debug(
            call,
            format_args!("ignoring unknown hint bits {unknown:#x}"),
        );
    }
    malloc(size, call)
}

/// `shmem_calloc` (§9.3.3): zeroed.
pub fn calloc(count: usize, size: usize, call: &str) -> *mut c_void {
    let _errno = KeepErrno::new();
    let st = state::live(call);
    if count == 0 || size == 0 {
        return std::ptr::null_mut();
    }
    let off = outcome(st.node.calloc(count as u64, size as u64), call);
    barrier(st, call);
    address(st, off)
}

/// `shmem_align` (§9.3.1).
pub fn align(alignment: usize, size: usize, call: &str) -> *mut c_void {
    let _errno = KeepErrno::new();
    let st = state::live(call);
    if size == 0 {
        return std::ptr::null_mut();
    }
    if !alignment.is_power_of_two() {
        debug(
            call,
            format_args!("alignment {alignment} is not a power of two"),
        );
        return std::ptr::null_mut();
    }
    // Every block is pointer-aligned: 1, 2 and 4 mean the pointer size.
    let alignment = alignment.max(size_of::<*const c_void>());
    // The allocator aligns offsets; an offset is an aligned address because every heap
    // mapping starts at a multiple of this (the same on every PE: it depends on the heap
    // size only).
    let guaranteed = gsas_transport::shm::mapping_alignment(st.segs.heap.len);
    if alignment > guaranteed {
        debug(
            call,
            format_args!("alignment {alignment} exceeds the heap mapping's alignment {guaranteed}"),
        );
        return std::ptr::null_mut();
    }
    let off = outcome(st.node.align(alignment as u64, size as u64), call);
    barrier(st, call);
    address(st, off)
}

/// `shmem_free` (§9.3.1).
pub fn free(ptr: *mut c_void, call: &str) {
    let _errno = KeepErrno::new();
    let st = state::live(call);
    if ptr.is_null() {
        return;
    }
    let off = offset_of(st, ptr, call);
    barrier(st, call);
    if let Err(e) = st.node.free(off) {
        fatal(call, e);
    }
}

/// `shmem_realloc` (§9.3.1).
pub fn realloc(ptr: *mut c_void, size: usize, call: &str) -> *mut c_void {
    let _errno = KeepErrno::new();
    let st = state::live(call);
    if ptr.is_null() {
        return malloc(size, call);
    }
    if size == 0 {
        free(ptr, call);
        return std::ptr::null_mut();
    }
    let off = offset_of(st, ptr, call);
    barrier(st, call);
    let new = match st.node.realloc(Some(off), size as u64) {
        Ok(o) => o,
        Err(NodeError::Heap(
            e @ (AllocError::OutOfMemory { .. } | AllocError::MetadataFull { .. }),
        )) => {
            report_failure(call, &e);
            None
        }
        Err(e) => fatal(call, e),
    };
    barrier(st, call);
    address(st, new)
}
