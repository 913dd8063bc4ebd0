//! The system calls the launcher needs, each wrapped once with its safety argument:
//! `PR_SET_PDEATHSIG`, `kill`, `getrandom`, `gethostname`, and signal names for messages
//! (the signalfd is [`crate::event::SignalFd`]).
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

/// In a freshly forked child (a `pre_exec` hook): ask the kernel to send `SIGKILL` when the
/// parent thread dies, and exit at once if the parent died before the request took effect.
/// Only async-signal-safe calls.
pub fn child_set_pdeathsig(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes an integer argument and touches no memory.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
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

/// The real user id of this process.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
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
}
