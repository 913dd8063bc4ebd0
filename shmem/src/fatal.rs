//! The library's fatal-error path and the panic boundary of exported functions.
//!
//! **What it is.** OpenSHMEM routines have no error returns for misuse or communication
//! failure, so such errors end the job: [`fatal`] prints one line naming the PE and the
//! routine (`gsas-shmem: PE 3: shmem_long_put: 0x7f.. is not a symmetric address`), flushes C
//! and Rust standard output, and ends every PE of the job through the process manager (PMI
//! abort with [`FATAL_EXIT_CODE`], so the launcher exits with that status), or exits this
//! process when the library is not initialized. [`boundary`] runs the body of an exported
//! function and turns a panic into the same path, naming the function. Before the abort it
//! waits (at most half a second) until the launcher has read this process's output pipes,
//! so that the message and the program's last output survive launchers that stop reading
//! when a job is aborted (Hydra).
//!
//! **What it is not.** Not an error type: routines that can report failure (initialization,
//! allocation, context creation) return their own codes or `Result`s.
//!
//! Inside the exit handler (the implicit finalize of a program that exits without calling
//! `shmem_finalize`, see `state`) the process ends with `_exit` instead of `exit`: calling
//! `exit` from an exit handler is undefined behaviour.
//!
//! **Thread-safety.** Any thread may call these; the first fatal error wins the race to
//! abort, others print their message and wait (at most 30 s) to be ended with it.

use std::any::Any;
use std::fmt::Display;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Exit status of a job ended by a fatal library error.
pub const FATAL_EXIT_CODE: i32 = 255;

static ENDING: AtomicBool = AtomicBool::new(false);
/// Set while the exit handler runs.
static IN_EXIT_HANDLER: AtomicBool = AtomicBool::new(false);

/// Whether the job is being ended (a fatal error, `shmem_global_exit`).
pub(crate) fn ending() -> bool {
    ENDING.load(Ordering::Acquire)
}

/// Marks that the calling code runs inside the process's exit handlers: from now on the
/// fatal path ends the process with `_exit`.
pub(crate) fn entering_exit_handler() {
    IN_EXIT_HANDLER.store(true, Ordering::Release);
}

/// Ends this process with `code`: `exit`, or `_exit` inside the exit handlers.
fn exit_process(code: i32) -> ! {
    if IN_EXIT_HANDLER.load(Ordering::Acquire) {
        flush_stdio();
        // SAFETY: `_exit` ends the process at once; nothing of Rust's needs to run after
        // the exit handlers have started (standard streams were flushed just above).
        unsafe { libc::_exit(code) }
    }
    std::process::exit(code)
}

/// Before a collective that a `Drop` runs (`shmem_free` of a `SymVec`, a team's destroy, the
/// implicit finalize of `Shmem`): when the calling thread is unwinding from a panic, the
/// other PEs are not in that collective and waiting for them would hang the job, so the job
/// ends here instead, naming `call` (the panic's own message was printed already).
pub(crate) fn not_while_panicking(call: &str) {
    if std::thread::panicking() {
        fatal(
            call,
            "the PE panicked; its unwinding would wait for the other PEs in a collective, so \
             the job ends",
        );
    }
}

/// Flushes C stdio and Rust's standard streams.
pub(crate) fn flush_stdio() {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: fflush(NULL) flushes every C output stream; it has no other effect.
    unsafe { libc::fflush(std::ptr::null_mut()) };
}

/// Ends the job with a message naming `call`; see the [module docs](self).
#[cold]
#[inline(never)]
pub fn fatal(call: &str, message: impl Display) -> ! {
    let pe = crate::state::get().map(|s| s.me);
    let line = match pe {
        Some(pe) => format!("gsas-shmem: PE {pe}: {call}: {message}"),
        None => format!("gsas-shmem: {call}: {message}"),
    };
    flush_stdio();
    gsas_transport::eprintln_whole!("{line}");
    end_job(FATAL_EXIT_CODE, &line)
}

/// How long [`end_job`] waits for the launcher to read what this process wrote.
const DRAIN_LIMIT: Duration = Duration::from_millis(500);

/// Waits (at most [`DRAIN_LIMIT`]) until the launcher has read everything this process
/// wrote to standard output and error when they are pipes. A process manager that ends
/// the job on a PMI abort may stop reading its pipes at once (Hydra does: without this wait
/// about one `shmem_global_exit` in 25 under `mpiexec.hydra` lost the calling PE's last
/// output), so the abort is sent only once the pipes are empty.
fn drain_output_pipes() {
    let until = Instant::now() + DRAIN_LIMIT;
    for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into `st`, which lives for the call.
        if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
            continue;
        }
        loop {
            let mut unread: libc::c_int = 0;
            // SAFETY: FIONREAD on a pipe writes the number of unread bytes into `unread`.
            let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut unread) };
            if rc != 0 || unread == 0 || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Ends every PE of the job with `code` (PMI abort), or this process if the library is not
/// running; never returns.
pub(crate) fn end_job(code: i32, message: &str) -> ! {
    if ENDING.swap(true, Ordering::AcqRel) {
        // Another thread is already ending the job: give it time to tell the process
        // manager, then end this process in any case.
        std::thread::sleep(Duration::from_secs(30));
        exit_process(code);
    }
    flush_stdio();
    if let Some(s) = crate::state::get() {
        if !s.is_finalized() {
            drain_output_pipes();
            s.node.report_abort(code, message);
        }
    }
    exit_process(code)
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

#[cold]
#[inline(never)]
fn panicked(call: &str, payload: Box<dyn Any + Send>) -> ! {
    fatal(
        call,
        format_args!("internal error (panic): {}", panic_message(&*payload)),
    )
}

/// Runs the body of the exported function `call`; a panic becomes [`fatal`] naming it.
/// Costs nothing on paths that cannot panic (the landing pad is out of line).
#[inline(always)]
pub(crate) fn boundary<R>(call: &str, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(p) => panicked(call, p),
    }
}

/// [`boundary`] for functions that never return.
#[inline(always)]
pub(crate) fn boundary_noreturn(call: &str, body: impl FnOnce() -> std::convert::Infallible) -> ! {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(never) => match never {},
        Err(p) => panicked(call, p),
    }
}
