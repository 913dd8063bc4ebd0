//! The emulated links between nodes: a connected pair of Unix stream sockets for every pair
//! of nodes (point-to-point links), frames batched per system call, a link checksum on
//! every frame (model section 12).
//!
//! What it is: [`LinkEnd`], one node's end of the link to one other node. Frames for the
//! peer are appended to the end's output buffer as records (`u16` little-endian length,
//! then the datagram) and leave with one `write` per end and pass ([`LinkEnd::flush`]);
//! [`LinkEnd::receive`] reads what arrived and hands every complete record to a callback.
//! A datagram is one ExaNet three-part frame ([`crate::frame`]) followed by a 4-byte CRC-32
//! (IEEE, little-endian) of the frame, standing for the link-level check of the real
//! fabric: [`seal`] appends it, [`open`] checks and strips it, so a corrupted frame is
//! discarded by the receiving link like on a real link.
//!
//! Why Unix stream pairs: the kernel queues the bytes in the peer's socket inside the
//! `write` call (no softirq, unlike loopback UDP, whose delivery a loaded host defers to
//! ksoftirqd, and whose per-datagram network-stack cost was about 5 us per frame on the
//! reference VM); a stream carries a whole pass of frames per system call; and its queue
//! is bounded by bytes, where a Unix datagram socket queues at most
//! `net.unix.max_dgram_qlen` (10 by default) datagrams, far below the 64 packets an RDMA
//! channel keeps in flight. Per-pair order is kept, as on a link.
//!
//! What it is not: a lossy channel (the emulator drops and corrupts frames only through
//! its fault rules), or a multi-host transport.
//!
//! Thread safety: a `LinkEnd` is owned by the fabric thread.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use crate::frame::MAX_FRAME;

/// Bytes of the link checksum after each frame.
pub(crate) const TRAILER: usize = 4;
/// Largest datagram: a full frame and its checksum.
pub(crate) const MAX_DATAGRAM: usize = MAX_FRAME + TRAILER;

/// CRC-32 (IEEE 802.3, reflected, as zlib's `crc32`).
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Appends the checksum of `buf[..len]` at `buf[len..len + 4]`; returns the datagram length.
pub(crate) fn seal(buf: &mut [u8; MAX_DATAGRAM], len: usize) -> usize {
    let len = len.min(MAX_FRAME);
    let crc = crc32(&buf[..len]);
    buf[len..len + TRAILER].copy_from_slice(&crc.to_le_bytes());
    len + TRAILER
}

/// The frame inside a datagram whose checksum is right, or `None`.
pub(crate) fn open(datagram: &[u8]) -> Option<&[u8]> {
    let len = datagram.len().checked_sub(TRAILER)?;
    let (frame, trailer) = datagram.split_at(len);
    let crc = u32::from_le_bytes(trailer.try_into().ok()?);
    (crc32(frame) == crc).then_some(frame)
}

/// Record header: the datagram length.
const RECORD_HEADER: usize = 2;
/// Bytes read per `read` call.
const READ_CHUNK: usize = 64 * 1024;

/// One node's end of a link (see the module docs).
#[derive(Debug)]
pub(crate) struct LinkEnd {
    sock: UnixStream,
    /// Records not yet accepted by the socket.
    out: Vec<u8>,
    /// Bytes read but not yet parsed (at most one partial record after `receive`).
    input: Vec<u8>,
}

/// The two ends of a new link.
pub(crate) fn link_pair() -> io::Result<(LinkEnd, LinkEnd)> {
    let (a, b) = UnixStream::pair()?;
    let end = |sock: UnixStream| -> io::Result<LinkEnd> {
        sock.set_nonblocking(true)?;
        Ok(LinkEnd {
            sock,
            out: Vec::with_capacity(READ_CHUNK),
            input: Vec::with_capacity(2 * READ_CHUNK),
        })
    };
    Ok((end(a)?, end(b)?))
}

impl LinkEnd {
    /// The descriptor, for `ppoll`.
    pub(crate) fn raw_fd(&self) -> i32 {
        self.sock.as_raw_fd()
    }

    /// Queues one datagram (at most [`MAX_DATAGRAM`] bytes) for the peer.
    pub(crate) fn push(&mut self, datagram: &[u8]) {
        let len = datagram.len().min(MAX_DATAGRAM);
        self.out.extend_from_slice(&(len as u16).to_le_bytes());
        self.out.extend_from_slice(&datagram[..len]);
    }

    /// Whether queued records wait for room in the socket.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Writes as much of the queued output as the socket takes; returns the bytes
    /// written (0 when the socket is full: the rest stays queued, in order).
    pub(crate) fn flush(&mut self) -> io::Result<usize> {
        let mut done = 0;
        while done < self.out.len() {
            match (&self.sock).write(&self.out[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.out.drain(..done);
                    return Err(e);
                }
            }
        }
        self.out.drain(..done);
        Ok(done)
    }

    /// Reads everything queued in the socket and calls `each` with every complete
    /// datagram (copied out, so `each` may borrow its caller mutably); returns the count.
    pub(crate) fn receive(&mut self, mut each: impl FnMut(&[u8])) -> io::Result<usize> {
        let mut count = 0;
        let mut buf = [0u8; MAX_DATAGRAM];
        loop {
            let have = self.input.len();
            self.input.resize(have + READ_CHUNK, 0);
            let got = match (&self.sock).read(&mut self.input[have..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.input.truncate(have);
                    break;
                }
                Err(e) => {
                    self.input.truncate(have);
                    return Err(e);
                }
            };
            self.input.truncate(have + got);
            if got == 0 {
                break;
            }
            let mut at = 0;
            while self.input.len() - at >= RECORD_HEADER {
                let len = usize::from(u16::from_le_bytes([self.input[at], self.input[at + 1]]));
                if len > MAX_DATAGRAM {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("link record of {len} bytes (largest {MAX_DATAGRAM})"),
                    ));
                }
                if self.input.len() - at - RECORD_HEADER < len {
                    break;
                }
                let start = at + RECORD_HEADER;
                buf[..len].copy_from_slice(&self.input[start..start + len]);
                at = start + len;
                count += 1;
                each(&buf[..len]);
            }
            self.input.drain(..at);
            if got < READ_CHUNK {
                // A short read of a stream socket took everything queued: spare the read
                // that would only say so (half of the system calls of a quiet link).
                break;
            }
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_reference_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn sealed_frames_open_and_corrupted_ones_do_not() {
        let mut buf = [0u8; MAX_DATAGRAM];
        buf[..40].copy_from_slice(&[0x5A; 40]);
        let n = seal(&mut buf, 40);
        assert_eq!(n, 44);
        assert_eq!(open(&buf[..n]), Some(&[0x5A; 40][..]));
        buf[7] ^= 0x10;
        assert_eq!(open(&buf[..n]), None);
        assert_eq!(open(&buf[..3]), None);
    }

    #[test]
    fn records_cross_a_link_in_order_whole_and_in_batches() {
        let (mut a, mut b) = link_pair().unwrap();
        // More than a socket buffer's worth, so that flushing and reading interleave.
        let frames: Vec<Vec<u8>> = (0..4000u32)
            .map(|i| vec![i as u8; 1 + (i as usize * 7) % MAX_DATAGRAM])
            .collect();
        for f in &frames {
            a.push(f);
        }
        let mut got: Vec<Vec<u8>> = Vec::new();
        let start = std::time::Instant::now();
        while got.len() < frames.len() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "only {} of {} records arrived",
                got.len(),
                frames.len()
            );
            a.flush().unwrap();
            b.receive(|d| got.push(d.to_vec())).unwrap();
        }
        assert!(!a.has_output());
        assert!(got == frames, "records differ or are out of order");
        // The other direction works too, and an empty link reads nothing.
        b.push(b"back");
        b.flush().unwrap();
        let mut back = Vec::new();
        a.receive(|d| back.push(d.to_vec())).unwrap();
        assert_eq!(back, vec![b"back".to_vec()]);
        assert_eq!(a.receive(|_| panic!("nothing was sent")).unwrap(), 0);
    }

    #[test]
    fn an_oversized_record_is_an_error() {
        let (a, mut b) = link_pair().unwrap();
        (&a.sock).write_all(&[0xFF, 0xFF, 1, 2, 3]).unwrap();
        assert_eq!(
            b.receive(|_| {}).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
