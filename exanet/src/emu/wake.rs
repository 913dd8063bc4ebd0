//! Doorbell wake-ups between drivers and a dozing emulator (an emulator extension; real
//! hardware sees every doorbell store and needs none of this).
//!
//! What it is. The emulator's fabric thread polls the doorbells (`TX_TAIL`, `CH[c].TAIL`) of
//! every endpoint in shared memory. While traffic flows it spins; after a quiet spell it
//! *dozes* in `ppoll`, and a plain store to a doorbell cannot end that sleep. So the
//! emulator publishes whether it dozes, and a driver whose doorbell finds it dozing sends
//! one empty datagram to wake it:
//!
//! * `<root>/doze`: a 4 KiB file; `u32` magic "EXDZ" at offset 0 and the doze flag at
//!   offset 64 (1 while the fabric thread dozes, else 0). Every endpoint directory holds a
//!   symlink `doze -> ../../doze`.
//! * `<root>/wake`: a Unix datagram socket the fabric thread includes in its `ppoll`; every
//!   endpoint directory holds a symlink `wake -> ../../wake`.
//!
//! The handshake is a store-buffer (Dekker) pattern with a `SeqCst` fence on both sides:
//! the emulator sets the flag, fences, looks at every doorbell once more and only then
//! sleeps; a driver stores its doorbell, fences, then reads the flag. Either the emulator's
//! second look sees the doorbell, or the driver sees the flag and sends the datagram, so no
//! doorbell is left unseen until a timeout. An awake emulator costs a driver one fence and
//! one load per doorbell, no system call.
//!
//! [`Waker`] is the driver side; [`crate::Shm::open`] attaches one automatically when the
//! endpoint directory holds `doze` and `wake`. The emulator side is the fabric thread.
//!
//! What it is not: part of the register contract (`exanet-ni-model.md`), or needed for
//! correctness: a driver without a waker is still served, only after the emulator's next
//! timed wake-up (at most the idle sleep, 10 ms).
//!
//! Thread safety: both types are `Send + Sync`; the flag is only accessed atomically.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::atomic::{Ordering, fence};

use memmap2::{MmapOptions, MmapRaw};

use crate::io::DevMem;

/// Name of the doze-flag file in the root and in each endpoint directory.
pub const DOZE_FILE: &str = "doze";
/// Name of the wake socket in the root and in each endpoint directory.
pub const WAKE_SOCKET: &str = "wake";

const DOZE_LEN: usize = 4096;
const MAGIC_OFF: usize = 0;
const FLAG_OFF: usize = 64;
/// "EXDZ".
const MAGIC: u32 = 0x5A44_5845;

fn map(path: &Path, create: bool) -> io::Result<MmapRaw> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(create)
        .open(path)?;
    if create {
        file.set_len(DOZE_LEN as u64)?;
    } else if file.metadata()?.len() < DOZE_LEN as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is shorter than {DOZE_LEN} bytes", path.display()),
        ));
    }
    MmapOptions::new().len(DOZE_LEN).map_raw(file.as_raw_fd())
}

/// The emulator's side: owns `<root>/doze` and sets the flag.
#[derive(Debug)]
pub struct DozeFlag {
    view: DevMem,
    _map: MmapRaw,
}

// SAFETY: `view` points into `_map`, which lives as long as the flag; all accesses through
// the view are atomic.
unsafe impl Send for DozeFlag {}

impl DozeFlag {
    /// Creates (or truncates) the doze file at `path`, flag clear.
    pub fn create(path: &Path) -> io::Result<DozeFlag> {
        let map = map(path, true)?;
        // SAFETY: the mapping is page aligned, DOZE_LEN bytes long and kept alive in `_map`
        // as long as the view; the file is only ever accessed atomically.
        let view = unsafe { DevMem::new(map.as_mut_ptr(), DOZE_LEN) };
        view.store32(FLAG_OFF, 0, Ordering::Relaxed);
        view.store32(MAGIC_OFF, MAGIC, Ordering::Release);
        Ok(DozeFlag { view, _map: map })
    }

    /// Announces that the fabric thread is about to sleep (then it must look at every
    /// doorbell once more) or that it is awake again.
    pub fn set(&self, dozing: bool) {
        self.view
            .store32(FLAG_OFF, u32::from(dozing), Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }
}

/// The driver's side: wakes a dozing emulator after a doorbell (see the module docs).
#[derive(Debug)]
pub struct Waker {
    view: DevMem,
    sock: UnixDatagram,
    _map: MmapRaw,
}

// SAFETY: as for `DozeFlag`: the view points into `_map` and is only accessed atomically;
// the socket is thread-safe.
unsafe impl Send for Waker {}
// SAFETY: as above; `kick` only loads atomically and sends on a socket.
unsafe impl Sync for Waker {}

impl Waker {
    /// The waker of the endpoint directory `dir`: `Ok(None)` when `dir` has no `doze` and
    /// `wake` (not an emulator endpoint, or an emulator without wake-ups).
    pub fn open(dir: &Path) -> io::Result<Option<Waker>> {
        let (doze, wake) = (dir.join(DOZE_FILE), dir.join(WAKE_SOCKET));
        if !doze.exists() || !wake.exists() {
            return Ok(None);
        }
        let map = map(&doze, false)?;
        // SAFETY: as in `DozeFlag::create`.
        let view = unsafe { DevMem::new(map.as_mut_ptr(), DOZE_LEN) };
        if view.load32(MAGIC_OFF, Ordering::Acquire) != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not an exanet-emu doze file", doze.display()),
            ));
        }
        let sock = UnixDatagram::unbound()?;
        sock.connect(&wake)?;
        sock.set_nonblocking(true)?;
        Ok(Some(Waker {
            view,
            sock,
            _map: map,
        }))
    }

    /// Call after every doorbell store: wakes the emulator if it dozes. A failed send is
    /// ignored (a full socket queue means wake-ups are already pending).
    #[inline]
    pub fn kick(&self) {
        fence(Ordering::SeqCst);
        if self.view.load32(FLAG_OFF, Ordering::Relaxed) != 0 {
            let _ = self.sock.send(&[]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kick_sends_only_while_the_flag_is_set() {
        let dir = std::env::temp_dir().join(format!("exanet-wake-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(Waker::open(&dir).unwrap().is_none(), "no files, no waker");
        let flag = DozeFlag::create(&dir.join(DOZE_FILE)).unwrap();
        let sock = UnixDatagram::bind(dir.join(WAKE_SOCKET)).unwrap();
        sock.set_nonblocking(true).unwrap();
        let waker = Waker::open(&dir).unwrap().expect("files present");
        let mut buf = [0u8; 8];
        waker.kick();
        assert!(sock.recv(&mut buf).is_err(), "awake: no datagram");
        flag.set(true);
        waker.kick();
        assert_eq!(
            sock.recv(&mut buf).unwrap(),
            0,
            "dozing: one empty datagram"
        );
        flag.set(false);
        waker.kick();
        assert!(sock.recv(&mut buf).is_err());
        std::fs::write(dir.join("bad"), [0u8; 16]).unwrap();
        std::fs::rename(dir.join("bad"), dir.join(DOZE_FILE)).unwrap();
        assert!(Waker::open(&dir).is_err(), "a short doze file is refused");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
