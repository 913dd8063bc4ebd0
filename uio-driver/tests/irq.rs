//! Interrupt handling: the emulator channel over socketpairs, a listening socket and pipes,
//! and the kernel path over a pseudo-terminal standing in for `/dev/uioN` (a character
//! device that polls, reads and writes like one).

mod common;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use common::{TempDir, Tree};
use uio_driver::{EmuIrq, IrqSource, KernelIrq, UioErrorKind, fabricate};

/// Generous bound for "should arrive": only a guard against hanging, never a speed check.
const LONG: Duration = Duration::from_secs(20);

fn read_word(stream: &mut UnixStream) -> u32 {
    stream.set_read_timeout(Some(LONG)).unwrap();
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf).unwrap();
    u32::from_ne_bytes(buf)
}

fn assert_times_out<I: IrqSource>(irq: &mut I, timeout: Duration) {
    let start = Instant::now();
    assert_eq!(irq.wait(timeout).unwrap(), None);
    let elapsed = start.elapsed();
    assert!(
        elapsed >= timeout,
        "returned after {elapsed:?} < {timeout:?}"
    );
    assert!(elapsed < LONG, "timeout ignored: {elapsed:?}");
}

#[test]
fn emu_wait_times_out_when_nothing_is_pending() {
    let (ours, _emu) = UnixStream::pair().unwrap();
    let mut irq = EmuIrq::from_stream("exanet-ep0", ours);
    assert_times_out(&mut irq, Duration::from_millis(50));
    assert_eq!(irq.wait(Duration::ZERO).unwrap(), None);
    assert_eq!(irq.count().unwrap(), 0);
}

#[test]
fn emu_wait_returns_a_count_sent_by_another_thread() {
    let (ours, mut emu) = UnixStream::pair().unwrap();
    let mut irq = EmuIrq::from_stream("exanet-ep0", ours);
    let sender = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        emu.write_all(&9u32.to_ne_bytes()).unwrap();
        emu
    });
    assert_eq!(irq.wait(LONG).unwrap(), Some(9));
    assert_eq!(irq.count().unwrap(), 9);
    let _emu = sender.join().unwrap();
}

#[test]
fn emu_enable_writes_a_native_endian_one() {
    let (ours, mut emu) = UnixStream::pair().unwrap();
    let mut irq = EmuIrq::from_stream("exanet-ep0", ours);
    irq.enable().unwrap();
    irq.enable().unwrap();
    assert_eq!(read_word(&mut emu), 1);
    assert_eq!(read_word(&mut emu), 1);
}

#[test]
fn emu_count_peeks_without_losing_the_wakeup() {
    let (ours, mut emu) = UnixStream::pair().unwrap();
    let mut irq = EmuIrq::from_stream("exanet-ep0", ours);
    emu.write_all(&3u32.to_ne_bytes()).unwrap();
    assert_eq!(irq.count().unwrap(), 3);
    assert_eq!(irq.wait(Duration::ZERO).unwrap(), Some(3));
    assert_eq!(irq.wait(Duration::ZERO).unwrap(), None);
    assert_eq!(irq.count().unwrap(), 3);
}

#[test]
fn emu_queued_counts_are_coalesced_to_the_newest() {
    let (ours, mut emu) = UnixStream::pair().unwrap();
    let mut irq = EmuIrq::from_stream("exanet-ep0", ours);
    for c in [4u32, 5, 6] {
        emu.write_all(&c.to_ne_bytes()).unwrap();
    }
    assert_eq!(irq.wait(LONG).unwrap(), Some(6));
    assert_eq!(irq.wait(Duration::ZERO).unwrap(), None);
}

#[test]
fn emu_partial_count_is_kept_across_a_timeout() {
    let (ours, mut emu) = UnixStream::pair().unwrap();
    let mut irq = EmuIrq::from_stream("exanet-ep0", ours);
    let bytes = 0x0102_0304u32.to_ne_bytes();
    emu.write_all(&bytes[..2]).unwrap();
    assert_times_out(&mut irq, Duration::from_millis(30));
    emu.write_all(&bytes[2..]).unwrap();
    assert_eq!(irq.wait(LONG).unwrap(), Some(0x0102_0304));
}

#[test]
fn emu_closed_channel_is_reported() {
    let (ours, emu) = UnixStream::pair().unwrap();
    let mut irq = EmuIrq::from_stream("exanet-ep0", ours);
    drop(emu);
    let err = irq.wait(LONG).unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::ChannelClosed), "{err}");
    assert_eq!(err.device(), "exanet-ep0");
    let err = irq.enable().unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::ChannelClosed), "{err}");
}

#[test]
fn emu_enable_is_bounded_when_the_emulator_stops_reading() {
    let (ours, _emu) = UnixStream::pair().unwrap();
    let mut irq = EmuIrq::from_stream("exanet-ep0", ours);
    irq.set_io_timeout(Duration::from_millis(20));
    let mut sent = 0u64;
    let err = loop {
        match irq.enable() {
            Ok(()) => sent += 1,
            Err(err) => break err,
        }
        assert!(sent < 10_000_000, "socket buffer never filled");
    };
    assert!(sent > 0);
    assert!(
        matches!(err.kind(), UioErrorKind::IrqControl { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("accepted no data within 20ms"),
        "{err}"
    );
}

/// A minimal emulator side implementing the documented masking protocol: after a count it
/// stays masked until a nonzero control word arrives, then fires again (the level is high).
fn masking_emulator(mut conn: UnixStream, fires: u32) {
    let mut total = 0u32;
    while total < fires {
        if read_word(&mut conn) != 0 {
            total += 1;
            conn.write_all(&total.to_ne_bytes()).unwrap();
        }
    }
}

#[test]
fn emu_endpoint_socket_round_trip() {
    let tmp = TempDir::new("irqsock");
    let ep = tmp.path().join("ep1");
    std::fs::create_dir_all(&ep).unwrap();
    let listener = UnixListener::bind(ep.join("irq")).unwrap();
    let emulator = thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        masking_emulator(conn, 3);
    });

    let mut irq = EmuIrq::endpoint(tmp.path(), 1).unwrap();
    assert_eq!(irq.path(), Some(ep.join("irq").as_path()));
    // Masked until enabled: nothing arrives.
    assert_times_out(&mut irq, Duration::from_millis(20));
    for want in 1..=3 {
        irq.enable().unwrap();
        assert_eq!(irq.wait(LONG).unwrap(), Some(want));
    }
    emulator.join().unwrap();
    let err = irq.wait(LONG).unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::ChannelClosed), "{err}");
    assert!(err.to_string().contains("exanet-ep1"), "{err}");
}

#[test]
fn emu_connect_to_missing_socket_names_it() {
    let tmp = TempDir::new("irqnone");
    let err = EmuIrq::endpoint(tmp.path(), 4).unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::Io(_)), "{err}");
    assert_eq!(err.path(), Some(tmp.path().join("ep4/irq").as_path()));
    let long = tmp.path().join("x".repeat(200));
    let err = EmuIrq::connect("e", &long, Duration::from_secs(1)).unwrap_err();
    assert!(err.to_string().contains("Unix socket path"), "{err}");
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints, as pipe2 requires.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

#[test]
fn emu_over_a_pipe_pair() {
    let (counts_rx, counts_tx) = pipe();
    let (ctrl_rx, ctrl_tx) = pipe();
    let mut irq = EmuIrq::from_pipes("exanet-ep0", counts_rx, ctrl_tx);
    let mut counts_tx = std::fs::File::from(counts_tx);
    let mut ctrl_rx = std::fs::File::from(ctrl_rx);

    irq.enable().unwrap();
    let mut word = [0u8; 4];
    ctrl_rx.read_exact(&mut word).unwrap();
    assert_eq!(u32::from_ne_bytes(word), 1);

    assert_times_out(&mut irq, Duration::from_millis(20));
    counts_tx.write_all(&11u32.to_ne_bytes()).unwrap();
    assert_eq!(irq.wait(LONG).unwrap(), Some(11));
    drop(counts_tx);
    let err = irq.wait(LONG).unwrap_err();
    assert!(matches!(err.kind(), UioErrorKind::ChannelClosed), "{err}");
}

/// A pseudo-terminal in raw mode: the slave path plays `/dev/uioN`, the master plays the
/// kernel's side of the UIO file.
struct Pty {
    master: std::fs::File,
    _slave: std::fs::File,
    slave_path: String,
}

fn open_pty() -> Pty {
    // SAFETY: posix_openpt has no memory-safety preconditions.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    assert!(
        master >= 0,
        "posix_openpt: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `master` is a fresh descriptor that nothing else owns.
    let master = unsafe { std::fs::File::from_raw_fd(master) };
    let fd = master.as_raw_fd();
    // SAFETY: `fd` is an open pty master.
    assert_eq!(unsafe { libc::grantpt(fd) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::unlockpt(fd) }, 0);
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `name` is a writable buffer of the length passed.
    let got = unsafe { libc::ptsname_r(fd, name.as_mut_ptr(), name.len()) };
    assert_eq!(got, 0);
    // SAFETY: ptsname_r wrote a NUL-terminated string into `name`.
    let slave_path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&slave_path)
        .unwrap();
    // SAFETY: `termios` is plain old data; tcgetattr fills it from an open tty.
    let mut tio: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `slave` is an open tty and `tio` a valid buffer.
    assert_eq!(unsafe { libc::tcgetattr(slave.as_raw_fd(), &mut tio) }, 0);
    // SAFETY: `tio` is a valid termios obtained above.
    unsafe { libc::cfmakeraw(&mut tio) };
    // SAFETY: `slave` is an open tty and `tio` a valid termios.
    let got = unsafe { libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &tio) };
    assert_eq!(got, 0);
    Pty {
        master,
        _slave: slave,
        slave_path,
    }
}

fn master_read_word(master: &mut std::fs::File) -> u32 {
    let mut pfd = libc::pollfd {
        fd: master.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, LONG.as_millis() as i32) };
    assert_eq!(rc, 1, "nothing written to the device within {LONG:?}");
    let mut buf = [0u8; 4];
    master.read_exact(&mut buf).unwrap();
    u32::from_ne_bytes(buf)
}

fn kernel_irq_on_pty(tag: &str) -> (Tree, Pty, KernelIrq) {
    let tree = Tree::new(tag);
    tree.add(7, "exanet-ep0", &[]);
    let pty = open_pty();
    std::os::unix::fs::symlink(&pty.slave_path, tree.dev().join("uio7")).unwrap();
    let device = tree.paths.find("exanet-ep0").unwrap();
    assert_eq!(device.dev_path(), tree.dev().join("uio7"));
    let irq = KernelIrq::open(&device).unwrap();
    (tree, pty, irq)
}

#[test]
fn kernel_enable_writes_one_to_the_device_node() {
    let (_tree, mut pty, mut irq) = kernel_irq_on_pty("kenable");
    irq.enable().unwrap();
    assert_eq!(master_read_word(&mut pty.master), 1);
}

#[test]
fn kernel_wait_times_out_then_returns_a_count() {
    let (_tree, pty, mut irq) = kernel_irq_on_pty("kwait");
    assert_times_out(&mut irq, Duration::from_millis(50));
    let mut master = pty.master.try_clone().unwrap();
    let sender = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        master.write_all(&42u32.to_ne_bytes()).unwrap();
    });
    assert_eq!(irq.wait(LONG).unwrap(), Some(42));
    sender.join().unwrap();
    assert_eq!(irq.wait(Duration::ZERO).unwrap(), None);
}

#[test]
fn kernel_count_reads_sysfs_event() {
    let (tree, _pty, mut irq) = kernel_irq_on_pty("kcount");
    assert_eq!(irq.count().unwrap(), 0);
    fabricate::write_event(tree.sysfs(), 7, 12).unwrap();
    assert_eq!(irq.count().unwrap(), 12);
    std::fs::write(tree.sysfs().join("uio7/event"), "x\n").unwrap();
    let err = irq.count().unwrap_err();
    assert!(
        matches!(err.kind(), UioErrorKind::InvalidDecimal { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("{}", Path::new("uio7/event").display()))
    );
}
