//! The system calls the launcher needs, each wrapped once with its safety argument:
//! `PR_SET_PDEATHSIG`, `kill`, `getrandom`, `gethostname`, the scheduler slice of a thread
//! (`sched_setattr`), the descriptor limit (`RLIMIT_NOFILE`), and signal names for messages (the signalfd is
//! [`crate::event::SignalFd`]), and whether this process runs under qemu-user
//! ([`user_mode_emulation`]).
//!
//! What it is not: process spawning (std's `Command` does that) or a general signal
//! library. Thread-safety: stateless functions.

use std::io;

/// Signal names for messages (`9` -> `SIGKILL`); `None` for numbers without a name here.
pub fn signal_name(sig: i32) -> Option<&'static str> {
    const NAMES: &[(i32, &str)] = &[
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGCHLD, "SIGCHLD"),
        (libc::SIGCONT, "SIGCONT"),
        (libc::SIGSTOP, "SIGSTOP"),
        (libc::SIGTSTP, "SIGTSTP"),
        (libc::SIGTTIN, "SIGTTIN"),
        (libc::SIGTTOU, "SIGTTOU"),
        (libc::SIGURG, "SIGURG"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGWINCH, "SIGWINCH"),
        (libc::SIGIO, "SIGIO"),
        (libc::SIGPWR, "SIGPWR"),
        (libc::SIGSYS, "SIGSYS"),
    ];
    NAMES.iter().find(|(n, _)| *n == sig).map(|(_, s)| *s)
}

/// `signal 9 (SIGKILL)`, or `signal 40` for unnamed numbers.
pub fn describe_signal(sig: i32) -> String {
    match signal_name(sig) {
        Some(name) => format!("signal {sig} ({name})"),
        None => format!("signal {sig}"),
    }
}

/// In a freshly forked child (a `pre_exec` hook): ask the kernel to send `sig` when the
/// parent thread dies, and exit at once if the parent died before the request took effect.
/// Only async-signal-safe calls.
pub fn child_set_pdeathsig(parent: libc::pid_t, sig: i32) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes an integer argument and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        // The launcher is gone already; do not run an orphan PE.
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(137) };
    }
    Ok(())
}

/// In a freshly forked child (a `pre_exec` hook): unblocks every signal. A launcher or
/// daemon that reads its signals from a signalfd keeps them blocked, and a blocked mask is
/// inherited through `fork` and `exec` (std's `Command` leaves it as it is): without this
/// a PE would never get the SIGTERM that ends a failed job, nor the SIGQUIT that asks
/// where it waits. Only async-signal-safe calls.
pub fn child_clear_signal_mask() -> io::Result<()> {
    // SAFETY: sigset_t is plain data that sigemptyset initialises; pthread_sigmask reads it
    // and is async-signal-safe.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Sends `sig` to process `pid`. A process that is gone already is not an error.
pub fn kill(pid: u32, sig: i32) -> io::Result<()> {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "pid out of range",
        ));
    };
    // SAFETY: kill has no memory arguments; pid > 0 names one process.
    if unsafe { libc::kill(pid, sig) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

/// A random `u64` from the kernel (`getrandom(2)`).
pub fn random_u64() -> io::Result<u64> {
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        got += n as usize;
    }
    Ok(u64::from_le_bytes(buf))
}

/// A random non-zero `u64` (job ids and keys are never 0).
pub fn random_nonzero_u64() -> io::Result<u64> {
    loop {
        let v = random_u64()?;
        if v != 0 {
            return Ok(v);
        }
    }
}

/// This machine's host name.
pub fn hostname() -> io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; gethostname NUL-terminates within it
    // when the name fits (we reserve one byte below to be sure).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len() - 1);
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The number of CPUs online on this machine (not the affinity mask: every process of the
/// machine competes for these), or `None` when unknown.
pub fn online_cpus() -> Option<u64> {
    // SAFETY: sysconf reads a system value; it has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u64::try_from(n).ok().filter(|&n| n > 0)
}

/// Whether process `pid` has a handler for signal `sig` (`SigCgt` of
/// `/proc/<pid>/status`): false when it does not, when it is gone, and when the file
/// cannot be read. A launcher asks before it sends a signal whose default action would
/// end the process (a PE's SIGQUIT before the library installed its handler).
pub fn catches_signal(pid: u32, sig: i32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    caught_in_status(&text, sig)
}

/// Whether the `SigCgt:` mask of a `/proc/<pid>/status` text has `sig`.
fn caught_in_status(status: &str, sig: i32) -> bool {
    let Some(bit) = u32::try_from(sig).ok().and_then(|s| s.checked_sub(1)) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| bit < 64 && mask & (1 << bit) != 0)
}

/// Asks the kernel to run the calling thread in scheduler slices of `slice` (and threads it
/// creates later, which inherit it): the custom slice of Linux's EEVDF scheduler (6.12 and
/// later), which a thread of the normal policies may set for itself without privileges
/// (`sched_setattr(2)` with `sched_runtime`, clamped by the kernel to 0.1 ms ..= 100 ms). A
/// thread that wakes with a shorter slice than the running one preempts it at once instead
/// of waiting until that one used its slice: so a process that sleeps until a datagram or
/// a doorbell arrives (a service, a waiting PE) gets the CPU within microseconds even when
/// every core runs a compute-bound process, which on the default slice (0.75 ms scaled by
/// the CPU count: 1.4 ms on 2 CPUs) it does not. The nice value and the policy are kept (a thread of another policy, real
/// time or idle, is left alone).
///
/// Returns whether the kernel took the slice (it reads back): false on kernels before
/// 6.12, which ignore the field for these policies, and for a thread of another policy.
/// Errors: the system call's.
pub fn set_sched_slice(slice: std::time::Duration) -> io::Result<bool> {
    // SAFETY: `sched_attr` is plain integers; all-zero is a valid value to fill in.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::sched_attr>() as libc::c_uint;
    // SAFETY: sched_getattr writes at most `size` bytes into `attr` for thread 0 (the
    // caller).
    if unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &raw mut attr, size, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let policy = attr.sched_policy as libc::c_int;
    if policy != libc::SCHED_OTHER && policy != libc::SCHED_BATCH {
        return Ok(false);
    }
    let want = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    attr.size = size;
    // Only the flag the kernel refuses to see cleared by an unprivileged thread is kept.
    attr.sched_flags &= libc::SCHED_FLAG_RESET_ON_FORK as u64;
    attr.sched_runtime = want;
    // SAFETY: sched_setattr reads `attr` (initialized above, `size` set) for the caller.
    if unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &raw const attr, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as the first sched_getattr.
    if unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &raw mut attr, size, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // The kernel rounds and clamps; taken means near what was asked.
    let got = attr.sched_runtime;
    Ok(got != 0 && got.abs_diff(want) <= want / 2 + 100_000)
}

/// The descriptor limit of this process (`RLIMIT_NOFILE`): `(soft, hard)`.
pub fn nofile_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a writable rlimit alive across the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Raises the soft descriptor limit (`RLIMIT_NOFILE`) to `want`, or to the hard limit when
/// `want` is `None` or above it (a process may always do that, no privilege needed; the
/// soft limit of 1024 that systemd and most shells give is the `select(2)` era's).
/// Returns `(before, after)`; never lowers the limit.
pub fn raise_nofile_limit(want: Option<u64>) -> io::Result<(u64, u64)> {
    let (soft, hard) = nofile_limit()?;
    // An unlimited hard limit still ends at the kernel's per-process maximum.
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let target = want.map_or(hard, |w| w.min(hard)).min(nr_open);
    if target <= soft {
        return Ok((soft, soft));
    }
    let raised = libc::rlimit {
        rlim_cur: target,
        rlim_max: hard,
    };
    // SAFETY: `raised` is a readable rlimit alive across the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((soft, target))
}

/// The real user id of this process.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// How this process is emulated, when it runs under qemu-user on a kernel of another
/// architecture that cannot run this target's binaries itself (no binfmt_misc handler): a
/// program of this target it starts must be started as `emulator -L sysroot program`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emulation {
    /// The qemu-user binary (the one running this process, else `qemu-<arch>` on `PATH`).
    pub emulator: std::path::PathBuf,
    /// Its `-L` prefix for the dynamic loader and libraries (`QEMU_LD_PREFIX`, else `/`).
    pub sysroot: std::ffi::OsString,
}

/// Whether this process runs under qemu-user where its children of this target need the
/// emulator too (see [`Emulation`]); `None` when they can be `exec`ed directly.
///
/// The kernel's architecture is read from `/proc/sys/kernel/arch`, which qemu-user does
/// not emulate (unlike `uname`); when that file is missing, the emulator is recognised
/// through `/proc/thread-self/exe`, which qemu 7 leaves pointing at `qemu-<arch>` (it
/// rewrites only `/proc/self/exe`). A foreign kernel with an enabled
/// `/proc/sys/fs/binfmt_misc/qemu-<arch>` runs such binaries itself.
pub fn user_mode_emulation() -> Option<Emulation> {
    let arch = std::env::consts::ARCH;
    let kernel_arch = std::fs::read_to_string("/proc/sys/kernel/arch")
        .ok()
        .map(|s| s.trim().to_owned());
    let emulator_running_us = std::fs::read_link("/proc/thread-self/exe")
        .ok()
        .filter(|p| {
            p.file_name()
                .and_then(std::ffi::OsStr::to_str)
                .is_some_and(|n| n.starts_with("qemu-"))
        });
    let foreign = match &kernel_arch {
        Some(k) => !runs_natively(k, arch),
        None => emulator_running_us.is_some(),
    };
    if !foreign {
        return None;
    }
    let binfmt = format!("/proc/sys/fs/binfmt_misc/qemu-{arch}");
    let registered = std::fs::read_to_string(binfmt)
        .is_ok_and(|s| s.lines().next().map(str::trim) == Some("enabled"));
    if registered {
        return None;
    }
    Some(Emulation {
        emulator: emulator_running_us
            .unwrap_or_else(|| std::path::PathBuf::from(format!("qemu-{arch}"))),
        sysroot: std::env::var_os("QEMU_LD_PREFIX").unwrap_or_else(|| "/".into()),
    })
}

/// True when a kernel reporting `kernel` runs code of target architecture `target`.
pub fn runs_natively(kernel: &str, target: &str) -> bool {
    kernel == target
        || matches!(
            (kernel, target),
            ("x86_64", "x86") | ("aarch64", "arm") | ("i686" | "i586" | "i386", "x86")
        )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_descriptor_limit_is_raised_never_lowered() {
        let (soft, hard) = super::nofile_limit().unwrap();
        assert!(soft <= hard);
        // Asking for less than the soft limit changes nothing.
        assert_eq!(super::raise_nofile_limit(Some(3)).unwrap(), (soft, soft));
        let (before, after) = super::raise_nofile_limit(None).unwrap();
        assert_eq!(before, soft);
        assert!(after >= soft && after <= hard, "{after}");
        assert_eq!(super::nofile_limit().unwrap(), (after, hard));
    }

    #[test]
    fn a_thread_may_shorten_its_own_scheduler_slice() {
        // In a thread of its own: the slice stays with the thread.
        std::thread::spawn(|| {
            // SAFETY: getpriority has no memory effects.
            let nice_before = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            let taken = match super::set_sched_slice(std::time::Duration::from_micros(100)) {
                Ok(t) => t,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                    // A seccomp filter or an emulator without the call: nothing to test.
                    eprintln!("SKIPPED: a_thread_may_shorten_its_own_scheduler_slice: {e}");
                    return;
                }
                Err(e) => panic!("sched_setattr on the thread itself: {e}"),
            };
            // SAFETY: getpriority has no memory effects.
            let nice_after = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            assert_eq!(nice_before, nice_after, "the nice value is kept");
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
            let mut v = release
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|x| x.parse::<u32>().ok());
            let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
            if (major, minor) >= (6, 12) {
                assert!(taken, "Linux {release}: the custom slice reads back");
            }
        })
        .join()
        .unwrap();
    }

    use super::*;

    #[test]
    fn caught_signals_are_read_from_the_status_mask() {
        let status = "Name:\tpe\nSigIgn:\t0000000000000000\nSigCgt:\t0000000180000004\n";
        assert!(caught_in_status(status, libc::SIGQUIT));
        assert!(!caught_in_status(status, libc::SIGINT));
        assert!(caught_in_status(status, 32));
        assert!(!caught_in_status("Name:\tpe\n", libc::SIGQUIT));
        assert!(!caught_in_status(status, 0));
        assert!(!catches_signal(u32::MAX, libc::SIGQUIT));
    }

    #[test]
    fn online_cpus_is_at_least_the_affinity_mask() {
        let online = online_cpus().expect("sysconf(_SC_NPROCESSORS_ONLN) works on Linux");
        let usable = std::thread::available_parallelism().unwrap().get() as u64;
        assert!(online >= usable, "{online} online < {usable} usable");
    }

    #[test]
    fn names() {
        assert_eq!(describe_signal(9), "signal 9 (SIGKILL)");
        assert_eq!(describe_signal(15), "signal 15 (SIGTERM)");
        assert_eq!(describe_signal(63), "signal 63");
    }

    #[test]
    fn randomness_and_identity() {
        let (a, b) = (random_u64().unwrap(), random_u64().unwrap());
        assert_ne!(a, b, "two draws of 64 random bits collided");
        assert_ne!(random_nonzero_u64().unwrap(), 0);
        assert!(!hostname().unwrap().is_empty());
    }

    #[test]
    fn kill_of_a_reaped_process_is_not_an_error() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        // The pid may be reused in theory; signal 0 only checks existence.
        kill(pid, 0).unwrap();
    }

    #[test]
    fn arch_compatibility() {
        assert!(runs_natively("x86_64", "x86_64"));
        assert!(runs_natively("x86_64", "x86"));
        assert!(runs_natively("aarch64", "aarch64"));
        assert!(!runs_natively("x86_64", "aarch64"));
        assert!(!runs_natively("aarch64", "x86_64"));
    }
}
