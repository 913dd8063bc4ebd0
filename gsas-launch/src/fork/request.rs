//! The FORK request: the launch specification a launcher sends a node's daemon, and its
//! authentication with HMAC-SHA256.
//!
//! **Layout** (little-endian; the whole request travels as the opaque payload of gsas-core
//! FORK fragments, reassembled by the daemon):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `GSFK` |
//! | 4 | version, [`VERSION`] |
//! | 5 | flags, 0 (other values are refused) |
//! | 6..8 | node id the request is for (a request for another node is refused) |
//! | 8..16 | job id |
//! | 16..24 | job key (must equal the key in the datagrams' gsas header) |
//! | 24..40 | nonce: 16 random bytes, never used twice |
//! | 40..48 | timestamp: milliseconds since the Unix epoch |
//! | 48..52 | body length `B` (at most [`MAX_BODY`]) |
//! | 52..56 | reserved, 0 |
//! | 56..56+B | body: the [`LaunchSpec`] |
//! | 56+B..88+B | HMAC-SHA256 with the cluster secret over bytes `0..56+B` |
//!
//! **Body** (every count and length is checked against the bytes left and the limits
//! below before anything is allocated):
//!
//! | field | encoding |
//! |---|---|
//! | job size | u32 |
//! | ranks to start | u32 count (1..=[`MAX_RANKS`]), then that many u32, strictly increasing, each < size |
//! | grace | u32 milliseconds between SIGTERM and SIGKILL when the job is ended |
//! | PMI address | u16 length + UTF-8 `ip:port` of the launcher's PMI-1 server |
//! | stream address | u16 length + UTF-8 `ip:port` where the daemon connects for output and exit statuses |
//! | working directory | u32 length + bytes (absolute path) |
//! | argv | u32 count (1..=[`MAX_ARGS`]), then u32 length + bytes each; argv\[0\] is the program |
//! | environment | u32 count (..=[`MAX_ENV`]), then name and value, u32 length + bytes each |
//!
//! Strings never contain NUL bytes; names are not empty and contain no `=`.
//!
//! **Views.** [`ForkPacket`] is the smoltcp-style view over the bytes: [`ForkPacket::new_checked`]
//! checks magic, version, flags and lengths; [`ForkPacket::verify`] recomputes the MAC and
//! compares it in constant time; [`ForkRequest::parse`] reads the body. [`ForkRequest::emit`]
//! writes and signs a request.
//!
//! **No-panic contract.** Nothing here panics on any input: all reads go through a bounds-
//! checked cursor and every failure is a [`RequestError`] (tests feed truncated, corrupted
//! and random bytes).
//!
//! Thread-safety: plain data and pure functions.

use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use gsas_core::wire::ErrorCode;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::secret::Secret;

/// The magic at the start of every request.
pub const MAGIC: [u8; 4] = *b"GSFK";
/// The request version this build writes and reads.
pub const VERSION: u8 = 1;
/// Bytes before the body.
pub const HEADER_LEN: usize = 56;
/// Bytes of the MAC after the body.
pub const TAG_LEN: usize = 32;
/// Largest body.
pub const MAX_BODY: usize = 1 << 20;
/// Most ranks one request starts.
pub const MAX_RANKS: usize = 1 << 16;
/// Most argv words.
pub const MAX_ARGS: usize = 4096;
/// Most environment variables.
pub const MAX_ENV: usize = 8192;

type HmacSha256 = Hmac<Sha256>;

mod field {
    use std::ops::Range;

    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const FLAGS: usize = 5;
    pub const NODE: Range<usize> = 6..8;
    pub const JOB_ID: Range<usize> = 8..16;
    pub const JOB_KEY: Range<usize> = 16..24;
    pub const NONCE: Range<usize> = 24..40;
    pub const TIMESTAMP: Range<usize> = 40..48;
    pub const BODY_LEN: Range<usize> = 48..52;
    pub const RESERVED: Range<usize> = 52..56;
}

/// Why a request was refused. [`RequestError::code`] is the ERROR code the daemon answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// Fewer bytes than a header and a MAC.
    Truncated {
        /// Bytes received.
        len: usize,
    },
    /// The magic is not `GSFK`.
    BadMagic,
    /// A version this build does not read.
    BadVersion(u8),
    /// Non-zero flags or reserved bytes.
    Reserved,
    /// The body length disagrees with the number of bytes.
    BadLength {
        /// The body length in the header.
        declared: u32,
        /// Bytes received in total.
        actual: usize,
    },
    /// The request exceeds a limit.
    TooLarge(String),
    /// The MAC does not match: a different secret, or the bytes were changed.
    BadMac,
    /// The body does not follow the layout.
    Body(String),
}

impl RequestError {
    /// The ERROR code a daemon answers this refusal with.
    pub fn code(&self) -> ErrorCode {
        match self {
            RequestError::BadMac => ErrorCode::BadKey,
            RequestError::BadVersion(_) => ErrorCode::NotSupported,
            RequestError::TooLarge(_) => ErrorCode::TooLarge,
            RequestError::Truncated { .. }
            | RequestError::BadMagic
            | RequestError::Reserved
            | RequestError::BadLength { .. }
            | RequestError::Body(_) => ErrorCode::Malformed,
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Truncated { len } => write!(
                f,
                "request of {len} bytes is shorter than a header and a MAC ({} bytes)",
                HEADER_LEN + TAG_LEN
            ),
            RequestError::BadMagic => f.write_str("not a FORK request (bad magic)"),
            RequestError::BadVersion(v) => {
                write!(f, "request version {v}; this build reads version {VERSION}")
            }
            RequestError::Reserved => f.write_str("non-zero flags or reserved bytes"),
            RequestError::BadLength { declared, actual } => write!(
                f,
                "body length {declared} does not match a request of {actual} bytes"
            ),
            RequestError::TooLarge(what) => write!(f, "request too large: {what}"),
            RequestError::BadMac => {
                f.write_str("authentication failed (the MAC does not match the cluster secret)")
            }
            RequestError::Body(what) => write!(f, "malformed launch specification: {what}"),
        }
    }
}

impl std::error::Error for RequestError {}

/// A view of a FORK request's bytes.
#[derive(Debug, Clone)]
pub struct ForkPacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn u16_at(b: &[u8], r: std::ops::Range<usize>) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[r]);
    u16::from_le_bytes(a)
}

fn u32_at(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], r: std::ops::Range<usize>) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[r]);
    u64::from_le_bytes(a)
}

impl<T: AsRef<[u8]>> ForkPacket<T> {
    /// Wraps `buffer` without checks; the accessors may panic on a short buffer. Use
    /// [`ForkPacket::new_checked`] for bytes from the network.
    pub fn new_unchecked(buffer: T) -> Self {
        ForkPacket { buffer }
    }

    /// Wraps `buffer` after checking the length, magic, version, flags, reserved bytes and
    /// the body length; after this every accessor is in bounds.
    pub fn new_checked(buffer: T) -> Result<Self, RequestError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN + TAG_LEN {
            return Err(RequestError::Truncated { len: b.len() });
        }
        if b[field::MAGIC] != MAGIC {
            return Err(RequestError::BadMagic);
        }
        if b[field::VERSION] != VERSION {
            return Err(RequestError::BadVersion(b[field::VERSION]));
        }
        if b[field::FLAGS] != 0 || b[field::RESERVED] != [0; 4] {
            return Err(RequestError::Reserved);
        }
        let declared = u32_at(b, field::BODY_LEN);
        if declared as usize > MAX_BODY {
            return Err(RequestError::TooLarge(format!(
                "body of {declared} bytes (at most {MAX_BODY})"
            )));
        }
        if HEADER_LEN + declared as usize + TAG_LEN != b.len() {
            return Err(RequestError::BadLength {
                declared,
                actual: b.len(),
            });
        }
        Ok(ForkPacket { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The node the request is for.
    pub fn node(&self) -> u16 {
        u16_at(self.b(), field::NODE)
    }

    /// The job id.
    pub fn job_id(&self) -> u64 {
        u64_at(self.b(), field::JOB_ID)
    }

    /// The job key.
    pub fn job_key(&self) -> u64 {
        u64_at(self.b(), field::JOB_KEY)
    }

    /// The nonce.
    pub fn nonce(&self) -> [u8; 16] {
        let mut n = [0u8; 16];
        n.copy_from_slice(&self.b()[field::NONCE]);
        n
    }

    /// The timestamp, in milliseconds since the Unix epoch.
    pub fn timestamp_ms(&self) -> u64 {
        u64_at(self.b(), field::TIMESTAMP)
    }

    /// The body (the encoded [`LaunchSpec`]).
    pub fn body(&self) -> &[u8] {
        let len = u32_at(self.b(), field::BODY_LEN) as usize;
        &self.b()[HEADER_LEN..HEADER_LEN + len]
    }

    /// The bytes the MAC covers.
    pub fn signed(&self) -> &[u8] {
        let b = self.b();
        &b[..b.len() - TAG_LEN]
    }

    /// The MAC.
    pub fn tag(&self) -> &[u8] {
        let b = self.b();
        &b[b.len() - TAG_LEN..]
    }

    /// Recomputes the MAC with `secret` and compares it in constant time.
    pub fn verify(&self, secret: &Secret) -> Result<(), RequestError> {
        let mut mac = new_mac(secret);
        mac.update(self.signed());
        mac.verify_slice(self.tag())
            .map_err(|_| RequestError::BadMac)
    }
}

fn new_mac(secret: &Secret) -> HmacSha256 {
    // HMAC takes keys of any length; `Secret` keeps them within 16..=4096 bytes.
    <HmacSha256 as Mac>::new_from_slice(secret.bytes()).unwrap_or_else(|_| {
        <HmacSha256 as Mac>::new_from_slice(&[0u8; 32]).expect("HMAC accepts a 32-byte key")
    })
}

/// HMAC-SHA256 of `parts` (concatenated) with `secret`.
pub fn mac(secret: &Secret, parts: &[&[u8]]) -> [u8; 32] {
    let mut m = new_mac(secret);
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// Verifies `tag` against the HMAC-SHA256 of `parts` with `secret`, in constant time.
pub fn verify_mac(secret: &Secret, parts: &[&[u8]], tag: &[u8]) -> bool {
    let mut m = new_mac(secret);
    for p in parts {
        m.update(p);
    }
    m.verify_slice(tag).is_ok()
}

/// What the daemon is to start: see the body table in the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Number of ranks in the whole job.
    pub size: u32,
    /// The ranks to start on the target node, strictly increasing.
    pub ranks: Vec<u32>,
    /// Time between SIGTERM and SIGKILL when the job is ended, in milliseconds.
    pub grace_ms: u32,
    /// The launcher's PMI-1 server (`PMI_PORT` of the PEs).
    pub pmi: SocketAddr,
    /// Where the daemon connects to deliver output and exit statuses.
    pub stream: SocketAddr,
    /// Working directory of the PEs (absolute).
    pub cwd: PathBuf,
    /// Program and arguments; `argv[0]` is executed (a path, or a name searched on the
    /// `PATH` of `env`).
    pub argv: Vec<OsString>,
    /// Environment variables of the PEs (the daemon adds the job's own).
    pub env: Vec<(OsString, OsString)>,
}

/// A complete FORK request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkRequest {
    /// The node it is for.
    pub node: u16,
    /// The job id.
    pub job_id: u64,
    /// The job key.
    pub job_key: u64,
    /// 16 random bytes, never used twice.
    pub nonce: [u8; 16],
    /// Milliseconds since the Unix epoch when the request was made.
    pub timestamp_ms: u64,
    /// What to start.
    pub spec: LaunchSpec,
}

/// A bounds-checked reader over the body.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], RequestError> {
        if n > self.b.len() {
            return Err(RequestError::Body(format!(
                "{what}: {n} bytes announced, {} left",
                self.b.len()
            )));
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        Ok(head)
    }

    fn u16(&mut self, what: &str) -> Result<u16, RequestError> {
        let s = self.take(2, what)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, RequestError> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// A count that must be at most `max` and for which at least `min_each` bytes per item
    /// remain (so a huge count cannot make the reader allocate).
    fn count(&mut self, what: &str, max: usize, min_each: usize) -> Result<usize, RequestError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(RequestError::TooLarge(format!(
                "{n} {what} (at most {max})"
            )));
        }
        if n.saturating_mul(min_each) > self.b.len() {
            return Err(RequestError::Body(format!(
                "{n} {what} announced but only {} bytes left",
                self.b.len()
            )));
        }
        Ok(n)
    }

    fn bytes(&mut self, what: &str) -> Result<&'a [u8], RequestError> {
        let n = self.u32(what)? as usize;
        let s = self.take(n, what)?;
        if s.contains(&0) {
            return Err(RequestError::Body(format!("{what} contains a NUL byte")));
        }
        Ok(s)
    }

    fn addr(&mut self, what: &str) -> Result<SocketAddr, RequestError> {
        let n = usize::from(self.u16(what)?);
        let s = self.take(n, what)?;
        std::str::from_utf8(s)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| RequestError::Body(format!("{what} is not an address ip:port")))
    }
}

fn put_bytes(out: &mut Vec<u8>, what: &str, b: &[u8]) -> Result<(), RequestError> {
    if b.contains(&0) {
        return Err(RequestError::Body(format!("{what} contains a NUL byte")));
    }
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
    Ok(())
}

fn put_addr(out: &mut Vec<u8>, a: SocketAddr) {
    let s = a.to_string();
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl LaunchSpec {
    /// Checks the invariants the body table states (also applied by [`LaunchSpec::parse`]).
    pub fn check(&self) -> Result<(), RequestError> {
        if self.ranks.is_empty() {
            return Err(RequestError::Body("no rank to start".into()));
        }
        if self.ranks.len() > MAX_RANKS {
            return Err(RequestError::TooLarge(format!(
                "{} ranks (at most {MAX_RANKS})",
                self.ranks.len()
            )));
        }
        if self.ranks.windows(2).any(|w| w[0] >= w[1]) {
            return Err(RequestError::Body(
                "ranks are not strictly increasing".into(),
            ));
        }
        if let Some(r) = self.ranks.iter().find(|&&r| r >= self.size) {
            return Err(RequestError::Body(format!(
                "rank {r} in a job of {} ranks",
                self.size
            )));
        }
        if !self.cwd.is_absolute() {
            return Err(RequestError::Body(format!(
                "working directory {} is not absolute",
                self.cwd.display()
            )));
        }
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(RequestError::Body("no program".into()));
        }
        if self.argv.len() > MAX_ARGS {
            return Err(RequestError::TooLarge(format!(
                "{} arguments (at most {MAX_ARGS})",
                self.argv.len()
            )));
        }
        if self.env.len() > MAX_ENV {
            return Err(RequestError::TooLarge(format!(
                "{} environment variables (at most {MAX_ENV})",
                self.env.len()
            )));
        }
        for (k, _) in &self.env {
            let k = k.as_bytes();
            if k.is_empty() || k.contains(&b'=') {
                return Err(RequestError::Body(format!(
                    "environment variable name {:?} is empty or contains '='",
                    String::from_utf8_lossy(k)
                )));
            }
        }
        Ok(())
    }

    /// Encodes the body.
    pub fn emit(&self) -> Result<Vec<u8>, RequestError> {
        self.check()?;
        let mut out = Vec::new();
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&(self.ranks.len() as u32).to_le_bytes());
        for r in &self.ranks {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&self.grace_ms.to_le_bytes());
        put_addr(&mut out, self.pmi);
        put_addr(&mut out, self.stream);
        put_bytes(
            &mut out,
            "working directory",
            self.cwd.as_os_str().as_bytes(),
        )?;
        out.extend_from_slice(&(self.argv.len() as u32).to_le_bytes());
        for a in &self.argv {
            put_bytes(&mut out, "argument", a.as_bytes())?;
        }
        out.extend_from_slice(&(self.env.len() as u32).to_le_bytes());
        for (k, v) in &self.env {
            put_bytes(&mut out, "environment variable name", k.as_bytes())?;
            put_bytes(&mut out, "environment variable value", v.as_bytes())?;
        }
        if out.len() > MAX_BODY {
            return Err(RequestError::TooLarge(format!(
                "launch specification of {} bytes (at most {MAX_BODY}); is the environment huge?",
                out.len()
            )));
        }
        Ok(out)
    }

    /// Decodes a body; every field is checked (see [`LaunchSpec::check`]).
    pub fn parse(body: &[u8]) -> Result<LaunchSpec, RequestError> {
        let mut c = Cursor { b: body };
        let size = c.u32("job size")?;
        let n = c.count("ranks", MAX_RANKS, 4)?;
        let mut ranks = Vec::with_capacity(n);
        for _ in 0..n {
            ranks.push(c.u32("rank")?);
        }
        let grace_ms = c.u32("grace")?;
        let pmi = c.addr("PMI address")?;
        let stream = c.addr("stream address")?;
        let cwd = PathBuf::from(OsString::from_vec(c.bytes("working directory")?.to_vec()));
        let n = c.count("arguments", MAX_ARGS, 4)?;
        let mut argv = Vec::with_capacity(n);
        for _ in 0..n {
            argv.push(OsString::from_vec(c.bytes("argument")?.to_vec()));
        }
        let n = c.count("environment variables", MAX_ENV, 8)?;
        let mut env = Vec::with_capacity(n);
        for _ in 0..n {
            let k = OsString::from_vec(c.bytes("environment variable name")?.to_vec());
            let v = OsString::from_vec(c.bytes("environment variable value")?.to_vec());
            env.push((k, v));
        }
        if !c.b.is_empty() {
            return Err(RequestError::Body(format!(
                "{} bytes after the environment",
                c.b.len()
            )));
        }
        let spec = LaunchSpec {
            size,
            ranks,
            grace_ms,
            pmi,
            stream,
            cwd,
            argv,
            env,
        };
        spec.check()?;
        Ok(spec)
    }
}

impl ForkRequest {
    /// Encodes the request and signs it with `secret`.
    pub fn emit(&self, secret: &Secret) -> Result<Vec<u8>, RequestError> {
        let body = self.spec.emit()?;
        let mut out = Vec::with_capacity(HEADER_LEN + body.len() + TAG_LEN);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(0);
        out.extend_from_slice(&self.node.to_le_bytes());
        out.extend_from_slice(&self.job_id.to_le_bytes());
        out.extend_from_slice(&self.job_key.to_le_bytes());
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&self.timestamp_ms.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&body);
        let tag = mac(secret, &[&out]);
        out.extend_from_slice(&tag);
        Ok(out)
    }

    /// Checks the header, verifies the MAC with `secret`, then decodes the body. The MAC
    /// is checked before the body is read, so nothing of an unauthenticated body is
    /// interpreted.
    pub fn parse(bytes: &[u8], secret: &Secret) -> Result<ForkRequest, RequestError> {
        let p = ForkPacket::new_checked(bytes)?;
        p.verify(secret)?;
        Ok(ForkRequest {
            node: p.node(),
            job_id: p.job_id(),
            job_key: p.job_key(),
            nonce: p.nonce(),
            timestamp_ms: p.timestamp_ms(),
            spec: LaunchSpec::parse(p.body())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> Secret {
        Secret::from_bytes(s.as_bytes()).unwrap()
    }

    fn sample() -> ForkRequest {
        ForkRequest {
            node: 3,
            job_id: 0x1122_3344_5566_7788,
            job_key: 0x99aa_bbcc_ddee_ff00,
            nonce: *b"0123456789abcdef",
            timestamp_ms: 1_700_000_000_123,
            spec: LaunchSpec {
                size: 8,
                ranks: vec![4, 5, 6, 7],
                grace_ms: 500,
                pmi: "10.201.0.1:4000".parse().unwrap(),
                stream: "[::1]:4001".parse().unwrap(),
                cwd: "/home/user/run".into(),
                argv: vec!["./ring".into(), "-v".into(), "".into()],
                env: vec![
                    ("GSAS_LOG".into(), "debug".into()),
                    ("EMPTY".into(), "".into()),
                    ("X".into(), OsString::from_vec(vec![0xff, b'='])),
                ],
            },
        }
    }

    #[test]
    fn round_trip_and_fields() {
        let s = secret("cluster-secret-0123456789");
        let r = sample();
        let bytes = r.emit(&s).unwrap();
        let p = ForkPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            (p.node(), p.job_id(), p.job_key(), p.timestamp_ms()),
            (3, r.job_id, r.job_key, r.timestamp_ms)
        );
        assert_eq!(&p.nonce(), b"0123456789abcdef");
        assert_eq!(p.tag().len(), TAG_LEN);
        assert_eq!(ForkRequest::parse(&bytes, &s).unwrap(), r);
    }

    #[test]
    fn wrong_secret_and_any_changed_byte_fail_the_mac() {
        let s = secret("cluster-secret-0123456789");
        let bytes = sample().emit(&s).unwrap();
        assert_eq!(
            ForkRequest::parse(&bytes, &secret("another-secret-0123456789")),
            Err(RequestError::BadMac)
        );
        // Flip one bit of every byte in turn: never accepted, never a panic.
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            let e = ForkRequest::parse(&b, &s).unwrap_err();
            assert_ne!(e.code(), ErrorCode::HostFailure, "byte {i}: {e}");
        }
        assert_eq!(RequestError::BadMac.code(), ErrorCode::BadKey);
    }

    #[test]
    fn header_checks() {
        let s = secret("cluster-secret-0123456789");
        let bytes = sample().emit(&s).unwrap();
        let check = |b: &[u8]| ForkPacket::new_checked(b).map(|_| ());
        assert_eq!(
            check(&bytes[..10]),
            Err(RequestError::Truncated { len: 10 })
        );
        let mut b = bytes.clone();
        b[0] = b'X';
        assert_eq!(check(&b), Err(RequestError::BadMagic));
        let mut b = bytes.clone();
        b[4] = 2;
        assert_eq!(check(&b), Err(RequestError::BadVersion(2)));
        assert_eq!(RequestError::BadVersion(2).code(), ErrorCode::NotSupported);
        let mut b = bytes.clone();
        b[5] = 1;
        assert_eq!(check(&b), Err(RequestError::Reserved));
        let mut b = bytes.clone();
        b.push(0);
        assert!(matches!(check(&b), Err(RequestError::BadLength { .. })));
        let mut b = bytes.clone();
        b[48..52].copy_from_slice(&(MAX_BODY as u32 + 1).to_le_bytes());
        assert!(matches!(check(&b), Err(RequestError::TooLarge(_))));
    }

    #[test]
    fn bodies_are_checked() {
        let mut spec = sample().spec;
        spec.ranks = vec![5, 4];
        assert!(spec.emit().unwrap_err().to_string().contains("increasing"));
        let mut spec = sample().spec;
        spec.ranks = vec![8];
        assert!(spec.emit().unwrap_err().to_string().contains("rank 8"));
        let mut spec = sample().spec;
        spec.ranks.clear();
        assert!(spec.emit().is_err());
        let mut spec = sample().spec;
        spec.cwd = "relative".into();
        assert!(spec.emit().unwrap_err().to_string().contains("absolute"));
        let mut spec = sample().spec;
        spec.argv = vec![OsString::from_vec(b"a\0b".to_vec())];
        assert!(spec.emit().unwrap_err().to_string().contains("NUL"));
        let mut spec = sample().spec;
        spec.env = vec![("A=B".into(), "x".into())];
        assert!(spec.emit().unwrap_err().to_string().contains("'='"));
        let mut spec = sample().spec;
        spec.argv.clear();
        assert!(spec.emit().unwrap_err().to_string().contains("no program"));
        // A body with trailing bytes, a huge count, a bad address.
        let body = sample().spec.emit().unwrap();
        let mut b = body.clone();
        b.push(1);
        assert!(
            LaunchSpec::parse(&b)
                .unwrap_err()
                .to_string()
                .contains("after")
        );
        let mut b = body.clone();
        b[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            LaunchSpec::parse(&b),
            Err(RequestError::TooLarge(_))
        ));
        let mut b = body.clone();
        b[4..8].copy_from_slice(&60_000u32.to_le_bytes());
        assert!(LaunchSpec::parse(&b).is_err());
        let mut b = body;
        // The PMI address follows size, count, 4 ranks and grace (28 bytes) and its length.
        b[30] = b'x';
        assert!(
            LaunchSpec::parse(&b)
                .unwrap_err()
                .to_string()
                .contains("address")
        );
    }

    #[test]
    fn truncations_and_random_bodies_never_panic() {
        let body = sample().spec.emit().unwrap();
        for n in 0..body.len() {
            assert!(
                LaunchSpec::parse(&body[..n]).is_err(),
                "prefix of {n} bytes"
            );
        }
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for round in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 300) as usize;
            let mut b: Vec<u8> = (0..len)
                .map(|i| (x.rotate_left(i as u32 % 64) >> 3) as u8)
                .collect();
            if round % 2 == 0 && b.len() >= 8 {
                b[..4].copy_from_slice(&4u32.to_le_bytes());
                b[4..8].copy_from_slice(&1u32.to_le_bytes());
            }
            let _ = LaunchSpec::parse(&b);
            let _ = ForkPacket::new_checked(&b[..]);
        }
    }

    #[test]
    fn macs_of_parts() {
        let s = secret("cluster-secret-0123456789");
        let t = mac(&s, &[b"ab", b"c"]);
        assert_eq!(t, mac(&s, &[b"abc"]));
        assert!(verify_mac(&s, &[b"abc"], &t));
        assert!(!verify_mac(&s, &[b"abd"], &t));
        assert!(!verify_mac(&s, &[b"abc"], &t[..31]));
    }
}
