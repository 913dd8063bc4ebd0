//! Every hang explains itself: a PE's watch over its own waits.
//!
//! **What it is.** What lets a waiting PE, and the launcher, say why a job does not move:
//!
//! * **The alert word** ([`alert`]): one process-wide word that every idle step of every
//!   wait of the runtime reads (one relaxed load of a line nobody writes while all is
//!   well). It is 0 unless the local atomic service closed the control connection
//!   ([`GONE`]: the wait fails with [`Gone`], which the caller reports as
//!   `the local atomic service (control socket ...) closed the connection`) or someone
//!   asked where this PE waits ([`REPORT`]).
//! * **[`Watch`]**, one per wait that leaves its first tight polls: after
//!   [`REGISTER_AFTER`] of waiting it names the wait in the process's *wait slot* (the
//!   OpenSHMEM call, since when), and on an alert it fails the wait or prints this PE's
//!   one line: `PE 3: in shmem_long_wait_until: waiting for the variable at 0x7f.. (heap +
//!   0x40) to become >= 5 (it is 4), for 12.3 s`. [`polled`] does the same for the
//!   routines a program calls in its own loop (`shmem_test`).
//! * **The watchdog**, a thread the library owns (`gsas-watch`), started by the first
//!   [`attach`] (in `Node::init`). It sleeps in `poll(2)` on a duplicate of the control
//!   connection (for `POLLRDHUP`/`POLLHUP` only: the service's replies do not wake it) and
//!   on an eventfd. When the service closes the connection (it stopped, or died by any
//!   signal: the kernel closes its descriptors) the poll returns and it raises [`GONE`]:
//!   a waiting PE learns it within one of its sleep steps (at most 1 ms), not at the next
//!   deadline. The eventfd is written by the SIGQUIT handler (`gsas_sys::event`; it only
//!   counts and writes, which is async-signal-safe): the watchdog then raises [`REPORT`],
//!   gives a waiting thread [`CLAIM_WAIT`] to print its line (the waiting thread knows
//!   what it waits for), and otherwise prints one itself: the call in the slot, or that
//!   the PE runs its own code. Under gsas's launcher (whose PMI server takes notes,
//!   [`crate::pmi::Client::note`]) it also wakes every [`NOTE_TICK`] and tells the
//!   launcher which call this PE has been blocked in for [`NOTE_AFTER`] or more (and when
//!   that ended), and that it printed its report: that is how `oshrun` names the PEs that
//!   wait for one that exited without `shmem_finalize`, and knows when every PE has
//!   answered a SIGQUIT. Under other launchers (Hydra, Slurm) it sleeps until an event.
//!
//! **What it is not.** Not a debugger: a wait is named by what its caller says (the
//! OpenSHMEM routine and its condition), not by a stack trace; a PE blocked outside the
//! runtime's waits (in the program, in a system call) is reported as running its own code.
//!
//! **Cost.** Nothing for waits that end within their first tight polls. A wait that goes
//! on reads the alert word once per idle step (a load and a branch) and the clock once
//! every 64 idle steps; after [`REGISTER_AFTER`] it writes the slot once (a sequence
//! lock, tens of nanoseconds) and clears it when it ends. The watchdog costs no CPU while
//! nothing happens (and, under gsas's launcher, one wake-up per [`NOTE_TICK`]).
//!
//! **Thread-safety.** Everything here is process-wide and lock-free on the waits' side;
//! the slot is a sequence lock (a wait that finds it busy skips naming itself). One
//! watchdog per process serves the node that attached last.

use std::fmt;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::pmi;
use gsas_transport::poll::monotonic_ns;

/// [`alert`] bit: the local atomic service closed the control connection.
pub const GONE: u32 = 1;
/// [`alert`] bit: someone (SIGQUIT) asked where this PE waits.
pub const REPORT: u32 = 2;

/// How long a wait lasts before it names itself in the wait slot.
pub const REGISTER_AFTER: Duration = Duration::from_millis(10);
/// How long the watchdog gives a waiting thread to take the report.
pub const CLAIM_WAIT: Duration = Duration::from_millis(300);
/// How long the watchdog then waits for the line to be written before it tells the
/// launcher (which ends a timed-out job once every PE told it).
const PRINT_WAIT: Duration = Duration::from_secs(2);
/// How long a PE is blocked in one call before the watchdog tells gsas's launcher.
pub const NOTE_AFTER: Duration = Duration::from_secs(1);
/// How often the watchdog looks at the slot under gsas's launcher.
pub const NOTE_TICK: Duration = Duration::from_millis(250);

/// Idle steps between two looks at the clock in [`Watch::idle`].
const CLOCK_EVERY: u32 = 64;

static ALERT: AtomicU32 = AtomicU32::new(0);
/// The rank of the node that attached last (`u32::MAX`: none yet).
static RANK: AtomicU32 = AtomicU32::new(u32::MAX);
/// Reports asked for / taken (by a waiting thread or the watchdog) / written out.
static REPORT_WANTED: AtomicU64 = AtomicU64::new(0);
static REPORT_CLAIMED: AtomicU64 = AtomicU64::new(0);
static REPORT_PRINTED: AtomicU64 = AtomicU64::new(0);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The wait in progress.
static WAIT: Slot = Slot::new();
/// The OpenSHMEM call around the node client's own waits (see [`scope`]).
static CALL: Slot = Slot::new();

/// The alert word; see the [module docs](self). 0 while all is well.
#[inline(always)]
pub fn alert() -> u32 {
    ALERT.load(Ordering::Relaxed)
}

/// A wait failed because the local atomic service closed the control connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone;

const NAME_WORDS: usize = 8;

/// A name and a time behind a sequence lock: written by one thread at a time (a writer
/// that finds it busy skips or spins briefly), read consistently by any.
struct Slot {
    seq: AtomicU64,
    id: AtomicU64,
    since_ns: AtomicU64,
    len: AtomicU64,
    name: [AtomicU64; NAME_WORDS],
}

/// What a [`Slot`] holds.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    id: u64,
    since_ns: u64,
    name: String,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            seq: AtomicU64::new(0),
            id: AtomicU64::new(0),
            since_ns: AtomicU64::new(0),
            len: AtomicU64::new(0),
            name: [const { AtomicU64::new(0) }; NAME_WORDS],
        }
    }

    /// Takes the write side; `None` after `tries` looks at a busy slot.
    fn lock(&self, tries: u32) -> Option<u64> {
        for _ in 0..tries {
            let s = self.seq.load(Ordering::Relaxed);
            if s & 1 == 0
                && self
                    .seq
                    .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // The odd sequence is visible before any field changes.
                fence(Ordering::Release);
                return Some(s);
            }
            std::hint::spin_loop();
        }
        None
    }

    fn unlock(&self, s: u64) {
        self.seq.store(s + 2, Ordering::Release);
    }

    /// Names wait `id` (`name` cut to 64 bytes); skipped when another writer holds it.
    fn write(&self, id: u64, since_ns: u64, name: &str) {
        let Some(s) = self.lock(64) else {
            return;
        };
        let mut bytes = name.as_bytes();
        if bytes.len() > NAME_WORDS * 8 {
            let mut end = NAME_WORDS * 8;
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            bytes = &bytes[..end];
        }
        for (i, word) in self.name.iter().enumerate() {
            let mut w = [0u8; 8];
            let from = (i * 8).min(bytes.len());
            let to = (from + 8).min(bytes.len());
            w[..to - from].copy_from_slice(&bytes[from..to]);
            word.store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        self.len.store(bytes.len() as u64, Ordering::Relaxed);
        self.since_ns.store(since_ns, Ordering::Relaxed);
        self.id.store(id, Ordering::Relaxed);
        self.unlock(s);
    }

    /// Empties the slot if it still names `id` (a later wait may have taken it). Spins
    /// until the lock is free: a slot left naming an ended wait would make the launcher
    /// believe the PE still waits.
    fn clear(&self, id: u64) {
        let Some(s) = self.lock(u32::MAX) else {
            return;
        };
        if self.id.load(Ordering::Relaxed) == id {
            self.id.store(0, Ordering::Relaxed);
        }
        self.unlock(s);
    }

    /// What the slot holds, `None` when empty (or busy for a long time).
    fn read(&self) -> Option<Entry> {
        for _ in 0..1000 {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let id = self.id.load(Ordering::Relaxed);
            let since_ns = self.since_ns.load(Ordering::Relaxed);
            let len = (self.len.load(Ordering::Relaxed) as usize).min(NAME_WORDS * 8);
            let mut bytes = Vec::with_capacity(NAME_WORDS * 8);
            for w in &self.name {
                bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) != s1 {
                continue;
            }
            if id == 0 {
                return None;
            }
            bytes.truncate(len);
            return Some(Entry {
                id,
                since_ns,
                name: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        None
    }
}

/// Names the OpenSHMEM call `call` for the node client's own waits inside it (a
/// `shmem_finalize`'s barrier, a `shmem_malloc`'s), until the guard drops. Waits that
/// name their call themselves ([`Watch::new`] with a call) do not need it.
pub fn scope(call: &str) -> Scope {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    CALL.write(id, 0, call);
    Scope { id }
}

/// See [`scope`].
#[derive(Debug)]
#[must_use = "the scope ends when the guard drops"]
pub struct Scope {
    id: u64,
}

impl Drop for Scope {
    fn drop(&mut self) {
        CALL.clear(self.id);
    }
}

/// The watch over one wait; see the [module docs](self). Create it where the wait leaves
/// its first tight polls and call [`Watch::idle`] on every idle step.
#[derive(Debug)]
pub struct Watch<'a> {
    /// The OpenSHMEM call, or `None`: the node client's wait, named by [`scope`].
    call: Option<&'a str>,
    start: Instant,
    steps: u32,
    /// The id in the wait slot (0: not named there).
    id: u64,
}

impl<'a> Watch<'a> {
    /// The watch of a wait in `call` that started at `start` (the caller reads the clock
    /// for its deadline anyway). `call` `None`: the node client's own wait, which takes
    /// its name from [`scope`].
    #[inline]
    pub fn new(call: Option<&'a str>, start: Instant) -> Watch<'a> {
        Watch {
            call,
            start,
            steps: 0,
            id: 0,
        }
    }

    /// One idle step of the wait: `Err(Gone)` when the local service is gone (the wait
    /// must fail); prints this PE's report line with `what` when one is asked for.
    #[inline]
    pub fn idle(&mut self, what: &dyn fmt::Display) -> Result<(), Gone> {
        self.steps = self.steps.wrapping_add(1);
        if self.id == 0 && self.steps % CLOCK_EVERY == 0 {
            self.maybe_register();
        }
        match alert() {
            0 => Ok(()),
            a => self.alerted(a, what),
        }
    }

    #[cold]
    #[inline(never)]
    fn maybe_register(&mut self) {
        if self.start.elapsed() >= REGISTER_AFTER {
            self.register();
        }
    }

    fn register(&mut self) {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let since = monotonic_ns().saturating_sub(self.start.elapsed().as_nanos() as u64);
        match self.call {
            Some(call) => WAIT.write(id, since, call),
            // A node-client wait inside an OpenSHMEM wait (a lock's remote polls) leaves
            // the outer wait's name in place.
            None if WAIT.read().is_some() => {}
            None => WAIT.write(id, since, &node_call()),
        }
        self.id = id;
    }

    #[cold]
    #[inline(never)]
    fn alerted(&mut self, a: u32, what: &dyn fmt::Display) -> Result<(), Gone> {
        if a & GONE != 0 {
            return Err(Gone);
        }
        if a & REPORT != 0 && claim_report() {
            let call = match self.call {
                Some(c) => c.to_owned(),
                // Inside an OpenSHMEM wait, that wait's call.
                None => WAIT.read().map_or_else(node_call, |e| e.name),
            };
            print_report(&format!(
                "in {call}: waiting for {what}, for {:.1} s",
                self.start.elapsed().as_secs_f64()
            ));
        }
        Ok(())
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if self.id != 0 {
            WAIT.clear(self.id);
        }
    }
}

/// The name of the node client's wait: the call of the current [`scope`], else a
/// description.
fn node_call() -> String {
    CALL.read()
        .map_or_else(|| "a wait of the gsas node client".to_owned(), |e| e.name)
}

/// For routines a program calls in its own polling loop (`shmem_test`): `Err(Gone)` when
/// the local service is gone; prints this PE's report line naming `call` when one is
/// asked for. Call it only when [`alert`] is not 0.
#[cold]
#[inline(never)]
pub fn polled(call: &str) -> Result<(), Gone> {
    let a = alert();
    if a & GONE != 0 {
        return Err(Gone);
    }
    if a & REPORT != 0 && claim_report() {
        print_report(&format!(
            "in {call}, which the program calls in a loop (polling; not blocked in the library)"
        ));
    }
    Ok(())
}

/// Takes the report asked for last, if nobody printed it yet.
fn claim_report() -> bool {
    let want = REPORT_WANTED.load(Ordering::Acquire);
    let had = REPORT_CLAIMED.load(Ordering::Acquire);
    had < want
        && REPORT_CLAIMED
            .compare_exchange(had, want, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
}

/// Prints the report line this thread took ([`claim_report`]) and marks it written, so
/// that the watchdog tells the launcher only after the line is out.
fn print_report(text: &str) {
    let claimed = REPORT_CLAIMED.load(Ordering::Acquire);
    print_line(text);
    REPORT_PRINTED.fetch_max(claimed, Ordering::AcqRel);
}

/// Prints `PE <rank>: <text>` on standard error in one write.
fn print_line(text: &str) {
    let line = match RANK.load(Ordering::Relaxed) {
        u32::MAX => format!("gsas: {text}\n"),
        r => format!("PE {r}: {text}\n"),
    };
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// What the watchdog serves: the node that attached last.
struct Attached {
    rank: u32,
    /// A duplicate of the control connection.
    control: OwnedFd,
    pmi: Arc<Mutex<pmi::Client>>,
    notes: bool,
    token: u64,
}

/// The watchdog's shared state.
struct Dog {
    attached: Mutex<Option<Attached>>,
    /// Bumped by every attach and detach.
    generation: AtomicU64,
    /// The eventfd that wakes the watchdog (attach, detach, the SIGQUIT handler).
    wake: OwnedFd,
}

static DOG: OnceLock<Dog> = OnceLock::new();

/// Hands the watchdog this PE's rank, control connection and PMI client (see the
/// [module docs](self)); `notes`: the process manager takes notes
/// ([`pmi::Client::takes_notes`]). Starts the watchdog and installs the SIGQUIT handler
/// the first time. Clears [`alert`] (a new node). Returns the token for [`detach`].
///
/// Errors: the eventfd, the duplicate of `control` or the thread could not be created.
pub fn attach(
    rank: u32,
    control: BorrowedFd<'_>,
    pmi: Arc<Mutex<pmi::Client>>,
    notes: bool,
) -> std::io::Result<u64> {
    let dog = dog()?;
    let control = control.try_clone_to_owned()?;
    let token = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    *lock(&dog.attached) = Some(Attached {
        rank,
        control,
        pmi,
        notes,
        token,
    });
    RANK.store(rank, Ordering::Relaxed);
    ALERT.store(0, Ordering::SeqCst);
    dog.generation.fetch_add(1, Ordering::SeqCst);
    gsas_sys::event::signal_raw(dog.wake.as_fd());
    Ok(token)
}

/// Stops watching the node of `token` (finalize, before it leaves its service, whose
/// closing the connection is then no failure). The watchdog keeps answering SIGQUIT.
pub fn detach(token: u64) {
    let Some(dog) = DOG.get() else {
        return;
    };
    let mut a = lock(&dog.attached);
    if a.as_ref().is_some_and(|a| a.token == token) {
        *a = None;
        drop(a);
        dog.generation.fetch_add(1, Ordering::SeqCst);
        gsas_sys::event::signal_raw(dog.wake.as_fd());
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The watchdog, started on first use.
fn dog() -> std::io::Result<&'static Dog> {
    if let Some(d) = DOG.get() {
        return Ok(d);
    }
    let wake = eventfd()?;
    let handler_wake = wake.try_clone()?;
    let dog = DOG.get_or_init(|| Dog {
        attached: Mutex::new(None),
        generation: AtomicU64::new(0),
        wake,
    });
    static STARTED: OnceLock<()> = OnceLock::new();
    let mut spawned = Ok(());
    STARTED.get_or_init(|| {
        match gsas_sys::event::install_report_handler(libc::SIGQUIT, handler_wake) {
            Ok(true) => {}
            Ok(false) => log::debug!(
                "the program handles SIGQUIT itself: this PE does not report where it waits"
            ),
            Err(e) => log::warn!("installing the SIGQUIT handler: {e}"),
        }
        spawned = std::thread::Builder::new()
            .name("gsas-watch".into())
            .spawn(|| run(DOG.get().expect("set before the thread starts")))
            .map(drop);
    });
    spawned.map(|()| dog)
}

fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd takes integer arguments only.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just created by eventfd and owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What the watchdog holds of the attached node.
struct Current {
    rank: u32,
    control: Option<OwnedFd>,
    pmi: Arc<Mutex<pmi::Client>>,
    notes: bool,
}

fn snapshot(dog: &Dog) -> Option<Current> {
    let a = lock(&dog.attached);
    let a = a.as_ref()?;
    Some(Current {
        rank: a.rank,
        control: a.control.try_clone().ok(),
        pmi: Arc::clone(&a.pmi),
        notes: a.notes,
    })
}

/// The watchdog's loop; see the [module docs](self).
fn run(dog: &'static Dog) {
    // A launcher that reads its signals from a signalfd may have started this process
    // with SIGQUIT blocked: this thread takes it whatever the others block.
    if let Err(e) = gsas_sys::event::unblock_in_this_thread(libc::SIGQUIT) {
        log::warn!("unblocking SIGQUIT in the watchdog: {e}");
    }
    let mut generation = u64::MAX;
    let mut current: Option<Current> = None;
    let mut reports_seen = gsas_sys::event::report_signals();
    // The wait id told to the launcher as ongoing.
    let mut noted: Option<u64> = None;
    loop {
        let g = dog.generation.load(Ordering::SeqCst);
        if g != generation {
            generation = g;
            current = snapshot(dog);
            noted = None;
        }
        let control = current.as_ref().and_then(|c| c.control.as_ref());
        let mut fds = [
            libc::pollfd {
                fd: dog.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: control.map_or(-1, |c| c.as_raw_fd()),
                events: libc::POLLRDHUP,
                revents: 0,
            },
        ];
        let tick = current.as_ref().is_some_and(|c| c.notes);
        let timeout = if tick {
            NOTE_TICK.as_millis() as libc::c_int
        } else {
            -1
        };
        // SAFETY: `fds` is a valid array of two pollfd for the call (a negative fd is
        // ignored by poll).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                log::warn!("the watchdog's poll failed: {e}");
                std::thread::sleep(NOTE_TICK);
            }
            continue;
        }
        if fds[0].revents != 0 {
            drain(dog.wake.as_fd());
        }
        if dog.generation.load(Ordering::SeqCst) != generation {
            // Attached or detached meanwhile: what the poll saw may be of the old node.
            continue;
        }
        if fds[1].revents != 0 {
            if let Some(c) = current.as_mut() {
                c.control = None;
                ALERT.fetch_or(GONE, Ordering::SeqCst);
                log::debug!(
                    "PE {}: the local atomic service closed the control connection",
                    c.rank
                );
            }
        }
        let reports = gsas_sys::event::report_signals();
        if reports != reports_seen {
            report(current.as_ref());
            // Signals that came while reporting (the terminal's and the launcher's
            // SIGQUIT) are answered by this report.
            drain(dog.wake.as_fd());
            reports_seen = gsas_sys::event::report_signals();
        }
        if let Some(c) = current.as_mut().filter(|c| c.notes) {
            note_wait(c, &mut noted);
        }
    }
}

fn drain(fd: BorrowedFd<'_>) {
    let mut v = 0u64;
    // SAFETY: `v` is a writable 8-byte buffer for the call; the eventfd is non-blocking.
    let _ = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

/// Asks a waiting thread for its line, prints one itself if none answers, and tells the
/// launcher.
fn report(current: Option<&Current>) {
    let seq = REPORT_WANTED.fetch_add(1, Ordering::AcqRel) + 1;
    ALERT.fetch_or(REPORT, Ordering::SeqCst);
    let until = Instant::now() + CLAIM_WAIT;
    while REPORT_CLAIMED.load(Ordering::Acquire) < seq && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    ALERT.fetch_and(!REPORT, Ordering::SeqCst);
    // A waiting thread took it: the launcher hears of the report once the line is out (a
    // slow machine had the launcher end the job between the two, the line coming after).
    let until = Instant::now() + PRINT_WAIT;
    while REPORT_CLAIMED.load(Ordering::Acquire) >= seq
        && REPORT_PRINTED.load(Ordering::Acquire) < seq
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    if claim_report() {
        match (current, WAIT.read()) {
            (None, _) => print_report("not in the library (finalized, or not initialized yet)"),
            (Some(_), Some(e)) => print_report(&format!(
                "in {}, for {:.1} s (the waiting thread did not answer within {:.1} s)",
                e.name,
                Duration::from_nanos(monotonic_ns().saturating_sub(e.since_ns)).as_secs_f64(),
                CLAIM_WAIT.as_secs_f64()
            )),
            (Some(_), None) => {
                print_report("not waiting in the library: the program runs its own code")
            }
        }
    }
    if let Some(c) = current.filter(|c| c.notes) {
        // Bounded: the main thread may hold the PMI client for a moment.
        let until = Instant::now() + Duration::from_millis(500);
        while !note(c, "report", &seq.to_string()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Tells the launcher about the wait in the slot once it lasted [`NOTE_AFTER`], and when
/// it ended.
fn note_wait(c: &mut Current, noted: &mut Option<u64>) {
    let entry = WAIT.read();
    let now = monotonic_ns();
    let after = NOTE_AFTER.as_nanos() as u64;
    match entry {
        Some(e) if now.saturating_sub(e.since_ns) >= after => {
            if *noted != Some(e.id) {
                // The routine's name: a token (no blanks) for the PMI line.
                let name = e.name.split_whitespace().next().unwrap_or("-").to_owned();
                if note(c, "wait", &name) {
                    *noted = Some(e.id);
                }
            }
        }
        e => {
            if noted.is_some() && e.map(|e| e.id) != *noted && note(c, "wait", "-") {
                *noted = None;
            }
        }
    }
}

/// One note to the launcher; false when the PMI client is busy (try again later). A
/// failure stops the notes.
fn note(c: &Current, kind: &str, value: &str) -> bool {
    let Ok(mut client) = c.pmi.try_lock() else {
        return false;
    };
    if let Err(e) = client.note(kind, value) {
        log::debug!("PE {}: note to the launcher: {e}", c.rank);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_names_a_wait_and_forgets_it_when_it_ends() {
        let slot = Slot::new();
        assert_eq!(slot.read(), None);
        slot.write(7, 123, "shmem_barrier_all");
        assert_eq!(
            slot.read(),
            Some(Entry {
                id: 7,
                since_ns: 123,
                name: "shmem_barrier_all".into()
            })
        );
        // A later wait took the slot: clearing the first leaves it.
        slot.write(8, 200, "shmem_long_wait_until");
        slot.clear(7);
        assert_eq!(slot.read().map(|e| e.id), Some(8));
        slot.clear(8);
        assert_eq!(slot.read(), None);
        // Long names are cut on a character boundary.
        let long = "é".repeat(40);
        slot.write(9, 1, &long);
        let got = slot.read().unwrap().name;
        assert!(
            got.len() <= NAME_WORDS * 8 && long.starts_with(&got),
            "{got}"
        );
    }

    #[test]
    fn readers_never_see_a_torn_name() {
        let slot = Arc::new(Slot::new());
        let names = ["shmem_barrier_all", "shmem_int_wait_until_any_vector", "x"];
        let writer = {
            let slot = Arc::clone(&slot);
            std::thread::spawn(move || {
                for i in 0..20_000u64 {
                    slot.write(i + 1, i, names[(i % 3) as usize]);
                }
            })
        };
        for _ in 0..20_000 {
            if let Some(e) = slot.read() {
                assert!(names.contains(&e.name.as_str()), "{e:?}");
                assert_eq!(e.since_ns + 1, e.id, "{e:?}");
            }
        }
        writer.join().unwrap();
    }

    #[test]
    fn one_report_is_printed_once() {
        let before = REPORT_WANTED.fetch_add(1, Ordering::AcqRel) + 1;
        assert!(claim_report());
        assert!(!claim_report());
        assert_eq!(REPORT_CLAIMED.load(Ordering::Acquire), before);
        print_report("a report line of a unit test");
        assert!(REPORT_PRINTED.load(Ordering::Acquire) >= before);
    }
}
