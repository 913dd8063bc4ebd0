//! The stream between a daemon that started PEs for a job and the job's launcher: output,
//! exit statuses, and the launcher's orders to end the PEs.
//!
//! The daemon connects over TCP to the stream address of the FORK request and first sends
//! [`FrameType::Hello`]: the job id, its node id, and an HMAC-SHA256 with the cluster
//! secret over `"gsas-fork-hello-1"`, job id, job key, node id and the request's nonce
//! ([`hello_mac`]). The launcher accepts nothing else on a connection before a valid Hello
//! for a node it sent a FORK to, so strangers cannot inject output or exit statuses.
//!
//! Every frame has a 12-byte header (little-endian) and a payload of at most
//! [`MAX_PAYLOAD`] bytes:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | type ([`FrameType`]) |
//! | 1 | stream: 1 = stdout, 2 = stderr (Output), else 0 |
//! | 2..4 | reserved, 0 |
//! | 4..8 | rank (0 when the frame is not about one PE) |
//! | 8..12 | payload length |
//!
//! | type | direction | payload |
//! |---|---|---|
//! | Hello (1) | daemon -> launcher | job id u64, node u16, MAC (32 bytes) |
//! | Started (2) | daemon -> launcher | pid u32 |
//! | Output (3) | daemon -> launcher | bytes the PE wrote |
//! | Exited (4) | daemon -> launcher | pid u32, raw wait status i32 |
//! | StartFailed (5) | daemon -> launcher | UTF-8 message |
//! | Done (6) | daemon -> launcher | none: every PE was reported, the daemon closes |
//! | Terminate (16) | launcher -> daemon | grace u32 ms: SIGTERM now, SIGKILL after the grace |
//! | Kill (17) | launcher -> daemon | none: SIGKILL now |
//! | Report (18) | launcher -> daemon | none: SIGQUIT to every PE that handles it (a gsas PE prints where it waits) |
//!
//! A connection that ends (EOF or error) ends the job on the daemon's side: its PEs are
//! terminated. [`FrameReader`] decodes frames from bytes read in any pieces and never
//! panics on input: a bad header or an oversized payload is an error that closes the
//! connection.
//!
//! Thread-safety: plain data and pure functions.

use std::fmt;

use super::request::{mac, verify_mac};
use super::secret::Secret;

/// Bytes of a frame header.
pub const FRAME_HEADER: usize = 12;
/// Largest payload.
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Stream number of standard output in Output frames.
pub const STDOUT: u8 = 1;
/// Stream number of standard error in Output frames.
pub const STDERR: u8 = 2;
const HELLO_CONTEXT: &[u8] = b"gsas-fork-hello-1";
/// Bytes of a Hello payload.
pub const HELLO_LEN: usize = 8 + 2 + 32;

/// The kind of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameType {
    /// The daemon identifies itself.
    Hello,
    /// A PE was started.
    Started,
    /// Output of a PE.
    Output,
    /// A PE ended.
    Exited,
    /// A PE could not be started.
    StartFailed,
    /// Every PE was reported.
    Done,
    /// End the PEs: SIGTERM, SIGKILL after the grace.
    Terminate,
    /// End the PEs at once.
    Kill,
    /// SIGQUIT to the PEs that handle it: each says where it waits.
    Report,
    /// A type this build does not know.
    Unknown(u8),
}

impl From<u8> for FrameType {
    fn from(b: u8) -> Self {
        match b {
            1 => FrameType::Hello,
            2 => FrameType::Started,
            3 => FrameType::Output,
            4 => FrameType::Exited,
            5 => FrameType::StartFailed,
            6 => FrameType::Done,
            16 => FrameType::Terminate,
            17 => FrameType::Kill,
            18 => FrameType::Report,
            other => FrameType::Unknown(other),
        }
    }
}

impl From<FrameType> for u8 {
    fn from(t: FrameType) -> u8 {
        match t {
            FrameType::Hello => 1,
            FrameType::Started => 2,
            FrameType::Output => 3,
            FrameType::Exited => 4,
            FrameType::StartFailed => 5,
            FrameType::Done => 6,
            FrameType::Terminate => 16,
            FrameType::Kill => 17,
            FrameType::Report => 18,
            FrameType::Unknown(b) => b,
        }
    }
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Its type.
    pub ty: FrameType,
    /// Stream number (Output) or 0.
    pub stream: u8,
    /// The PE it is about.
    pub rank: u32,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Encodes a frame. Payloads longer than [`MAX_PAYLOAD`] must be split by the caller
/// (Output is; other payloads are small).
pub fn encode(ty: FrameType, stream: u8, rank: u32, payload: &[u8]) -> Vec<u8> {
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
    out.push(ty.into());
    out.push(stream);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&rank.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A stream that does not follow the frame format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamError(pub String);

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StreamError {}

/// Reassembles frames from the bytes of a connection.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> Self {
        FrameReader::default()
    }

    /// Appends bytes read from the connection.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes held that do not form a whole frame yet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next whole frame, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, StreamError> {
        if self.buf.len() < FRAME_HEADER {
            return Ok(None);
        }
        let h = &self.buf[..FRAME_HEADER];
        if h[2] != 0 || h[3] != 0 {
            return Err(StreamError(
                "frame header with non-zero reserved bytes".into(),
            ));
        }
        let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(StreamError(format!(
                "frame payload of {len} bytes (at most {MAX_PAYLOAD})"
            )));
        }
        if self.buf.len() < FRAME_HEADER + len {
            return Ok(None);
        }
        let frame = Frame {
            ty: FrameType::from(h[0]),
            stream: h[1],
            rank: u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
            payload: self.buf[FRAME_HEADER..FRAME_HEADER + len].to_vec(),
        };
        self.buf.drain(..FRAME_HEADER + len);
        Ok(Some(frame))
    }
}

/// The MAC of a Hello: proves the daemon knows the cluster secret and answers the FORK
/// with `nonce` for `node` of the job.
pub fn hello_mac(
    secret: &Secret,
    job_id: u64,
    job_key: u64,
    node: u16,
    nonce: &[u8; 16],
) -> [u8; 32] {
    mac(
        secret,
        &[
            HELLO_CONTEXT,
            &job_id.to_le_bytes(),
            &job_key.to_le_bytes(),
            &node.to_le_bytes(),
            nonce,
        ],
    )
}

/// The payload of a Hello.
pub fn hello_payload(
    secret: &Secret,
    job_id: u64,
    job_key: u64,
    node: u16,
    nonce: &[u8; 16],
) -> Vec<u8> {
    let mut p = Vec::with_capacity(HELLO_LEN);
    p.extend_from_slice(&job_id.to_le_bytes());
    p.extend_from_slice(&node.to_le_bytes());
    p.extend_from_slice(&hello_mac(secret, job_id, job_key, node, nonce));
    p
}

/// Checks a Hello payload; returns the node id it claims if the job id matches and the MAC
/// is right for that node and its nonce (`nonce_of(node)`, `None` for a node this job did
/// not send a FORK to).
pub fn check_hello(
    secret: &Secret,
    job_id: u64,
    job_key: u64,
    payload: &[u8],
    nonce_of: impl Fn(u16) -> Option<[u8; 16]>,
) -> Result<u16, StreamError> {
    if payload.len() != HELLO_LEN {
        return Err(StreamError(format!(
            "Hello of {} bytes (expected {HELLO_LEN})",
            payload.len()
        )));
    }
    let id = u64::from_le_bytes(payload[..8].try_into().unwrap_or([0; 8]));
    let node = u16::from_le_bytes([payload[8], payload[9]]);
    if id != job_id {
        return Err(StreamError(format!(
            "Hello for job {id:016x}, not this job ({job_id:016x})"
        )));
    }
    let nonce = nonce_of(node).ok_or_else(|| {
        StreamError(format!(
            "Hello from node {node}, which has no PEs of this job"
        ))
    })?;
    let ok = verify_mac(
        secret,
        &[
            HELLO_CONTEXT,
            &job_id.to_le_bytes(),
            &job_key.to_le_bytes(),
            &node.to_le_bytes(),
            &nonce,
        ],
        &payload[10..],
    );
    if ok {
        Ok(node)
    } else {
        Err(StreamError(format!(
            "Hello from node {node} with a wrong MAC (not the cluster secret)"
        )))
    }
}

/// The payload of an Exited frame.
pub fn exited_payload(pid: u32, raw_status: i32) -> Vec<u8> {
    let mut p = pid.to_le_bytes().to_vec();
    p.extend_from_slice(&raw_status.to_le_bytes());
    p
}

/// Decodes an Exited payload into (pid, raw wait status).
pub fn parse_exited(payload: &[u8]) -> Option<(u32, i32)> {
    if payload.len() != 8 {
        return None;
    }
    let pid = u32::from_le_bytes(payload[..4].try_into().ok()?);
    let raw = i32::from_le_bytes(payload[4..].try_into().ok()?);
    Some((pid, raw))
}

/// Decodes a u32 payload (Started: pid; Terminate: grace in ms).
pub fn parse_u32(payload: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(payload.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_anywhere_are_reassembled() {
        let mut bytes = encode(FrameType::Output, STDERR, 7, b"hello\n");
        bytes.extend(encode(FrameType::Exited, 0, 7, &exited_payload(42, 9)));
        bytes.extend(encode(FrameType::Unknown(99), 0, 0, b""));
        for split in 0..bytes.len() {
            let mut r = FrameReader::new();
            r.push(&bytes[..split]);
            let mut got = Vec::new();
            while let Some(f) = r.next_frame().unwrap() {
                got.push(f);
            }
            r.push(&bytes[split..]);
            while let Some(f) = r.next_frame().unwrap() {
                got.push(f);
            }
            assert_eq!(got.len(), 3, "split at {split}");
            assert_eq!(
                got[0],
                Frame {
                    ty: FrameType::Output,
                    stream: STDERR,
                    rank: 7,
                    payload: b"hello\n".to_vec()
                }
            );
            assert_eq!(parse_exited(&got[1].payload), Some((42, 9)));
            assert_eq!(got[2].ty, FrameType::Unknown(99));
            assert_eq!(r.pending(), 0);
        }
        for t in [1u8, 2, 3, 4, 5, 6, 16, 17, 18, 200] {
            assert_eq!(u8::from(FrameType::from(t)), t);
        }
    }

    #[test]
    fn bad_headers_are_errors() {
        let mut r = FrameReader::new();
        let mut b = encode(FrameType::Done, 0, 0, b"");
        b[2] = 1;
        r.push(&b);
        assert!(r.next_frame().is_err());
        let mut r = FrameReader::new();
        let mut b = encode(FrameType::Done, 0, 0, b"");
        b[8..12].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        r.push(&b);
        assert!(r.next_frame().unwrap_err().to_string().contains("at most"));
        assert_eq!(parse_exited(b"short"), None);
        assert_eq!(parse_u32(&500u32.to_le_bytes()), Some(500));
        assert_eq!(parse_u32(b"12345"), None);
    }

    #[test]
    fn hello_is_bound_to_secret_job_node_and_nonce() {
        let s = Secret::from_bytes(b"cluster-secret-0123456789").unwrap();
        let other = Secret::from_bytes(b"another-secret-0123456789").unwrap();
        let nonce = [7u8; 16];
        let nonces = |n: u16| (n == 2).then_some(nonce);
        let p = hello_payload(&s, 10, 20, 2, &nonce);
        assert_eq!(check_hello(&s, 10, 20, &p, nonces), Ok(2));
        assert!(check_hello(&other, 10, 20, &p, nonces).is_err());
        assert!(
            check_hello(&s, 11, 20, &p, nonces)
                .unwrap_err()
                .0
                .contains("not this job")
        );
        assert!(check_hello(&s, 10, 21, &p, nonces).is_err());
        assert!(check_hello(&s, 10, 20, &p, |_| Some([8; 16])).is_err());
        let p3 = hello_payload(&s, 10, 20, 3, &nonce);
        assert!(
            check_hello(&s, 10, 20, &p3, nonces)
                .unwrap_err()
                .0
                .contains("node 3")
        );
        assert!(check_hello(&s, 10, 20, &p[..20], nonces).is_err());
    }
}
