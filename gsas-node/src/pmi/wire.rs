//! PMI framing: PMI-1 lines `cmd=<name>( <key>=<value>)*` and PMI-2 frames, the
//! accumulator used by both ends, and the hex encoding of values.
//!
//! What it is: pure functions and a byte buffer, no I/O. What it is not: the protocol
//! state machines (see `client` and `server`). PMI-1: no `\`-escapes are produced or
//! interpreted: every value we send is hex or a plain token, which every generation of the
//! protocol accepts.
//!
//! PMI-2 (`pmi-2.0.txt` of MPICH; Slurm's `mpi/pmi2` plugin): after the PMI-1 style line
//! `cmd=init pmi_version=2 pmi_subversion=0`, every message is a 6-character space-padded
//! decimal length followed by that many bytes of body `cmd=<name>;<key>=<value>;...;`. A
//! `;` inside a value is written doubled (`;;`); [`Message::to_frame`] does so and
//! [`Message::parse_v2`] undoes it, although every value gsas sends is hex or a plain token.
//!
//! No-panic contract: [`Message::parse`], [`Message::parse_v2`] and [`LineBuf`] accept
//! arbitrary bytes and report malformed input as errors. Thread-safety: plain data.

use std::fmt;

/// Longest request line a server accepts, newline included (MPICH's `PMIU_MAXLINE`).
pub const MAX_REQUEST_LINE: usize = 1024;

/// Longest response line the client accepts, newline included. Hydra answers a `get` of a
/// 1023-character value with a line of about 1063 characters, so this is larger than
/// [`MAX_REQUEST_LINE`].
pub const MAX_RESPONSE_LINE: usize = 4096;

/// Longest PMI-2 frame body either end accepts (Slurm and MPICH bound keys to 64 and
/// values to 1024 bytes, so real messages stay far below this).
pub const MAX_FRAME: usize = 64 * 1024;

/// One parsed line or frame: the command and its `key=value` tokens in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    cmd: String,
    pairs: Vec<(String, String)>,
}

/// Why a line is not a PMI-1 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// A byte outside printable ASCII (space to `~`).
    NotPrintable {
        /// Offset of the first such byte.
        offset: usize,
        /// The byte.
        byte: u8,
    },
    /// The line is empty or only spaces.
    Empty,
    /// The first token is not `cmd=<name>` with a non-empty name.
    NoCommand,
    /// A token without `=` or with an empty key.
    BadToken(String),
    /// A PMI-2 length header that is not a decimal number, or announces more than the limit.
    BadLength(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::NotPrintable { offset, byte } => {
                write!(
                    f,
                    "byte 0x{byte:02x} at offset {offset} is not printable ASCII"
                )
            }
            WireError::Empty => f.write_str("empty line"),
            WireError::NoCommand => f.write_str("line does not start with cmd=<name>"),
            WireError::BadToken(t) => write!(f, "token {:?} is not key=value", excerpt(t)),
            WireError::BadLength(h) => write!(
                f,
                "PMI-2 length header {:?} is not a decimal length up to {MAX_FRAME}",
                excerpt(h)
            ),
        }
    }
}

impl Message {
    /// A message with command `cmd` and no arguments.
    pub fn new(cmd: &str) -> Self {
        Message {
            cmd: cmd.to_owned(),
            pairs: Vec::new(),
        }
    }

    /// Appends `key=value`. Callers pass tokens without spaces, newlines or (in the key) `=`.
    pub fn with(mut self, key: &str, value: impl fmt::Display) -> Self {
        self.pairs.push((key.to_owned(), value.to_string()));
        self
    }

    /// The command name (the value of the leading `cmd=`).
    pub fn cmd(&self) -> &str {
        &self.cmd
    }

    /// The value of the first token named `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key` parsed as a decimal integer (leading `+`/`-` allowed); `None` when
    /// absent, `Err` with the raw text when present but not a number.
    pub fn get_int(&self, key: &str) -> Result<Option<i64>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| v.to_owned()),
        }
    }

    /// Parses one line (without its `\n`; a trailing `\r` is not accepted). Tokens are
    /// separated by one or more spaces; a key ends at the first `=`, the value runs to the
    /// next space.
    pub fn parse(line: &[u8]) -> Result<Message, WireError> {
        if let Some(offset) = line.iter().position(|&b| !(0x20..=0x7e).contains(&b)) {
            return Err(WireError::NotPrintable {
                offset,
                byte: line[offset],
            });
        }
        // Printable ASCII is valid UTF-8.
        let text = std::str::from_utf8(line).map_err(|_| WireError::NoCommand)?;
        let mut tokens = text.split(' ').filter(|t| !t.is_empty());
        let first = tokens.next().ok_or(WireError::Empty)?;
        let cmd = match first.split_once('=') {
            Some(("cmd", name)) if !name.is_empty() => name.to_owned(),
            _ => return Err(WireError::NoCommand),
        };
        let mut pairs = Vec::new();
        for token in tokens {
            match token.split_once('=') {
                Some((k, v)) if !k.is_empty() => pairs.push((k.to_owned(), v.to_owned())),
                _ => return Err(WireError::BadToken(token.to_owned())),
            }
        }
        Ok(Message { cmd, pairs })
    }

    /// Parses one PMI-2 frame body `cmd=<name>;<key>=<value>;...` (the trailing `;` is
    /// optional; `;;` inside a value stands for one `;`). Printable ASCII only, spaces
    /// allowed in values.
    pub fn parse_v2(body: &[u8]) -> Result<Message, WireError> {
        if let Some(offset) = body.iter().position(|&b| !(0x20..=0x7e).contains(&b)) {
            return Err(WireError::NotPrintable {
                offset,
                byte: body[offset],
            });
        }
        let text = std::str::from_utf8(body).map_err(|_| WireError::NoCommand)?;
        if text.trim().is_empty() {
            return Err(WireError::Empty);
        }
        let mut pairs = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let (key, after) = match rest.split_once('=') {
                Some((k, a)) if !k.is_empty() && !k.contains(';') => (k, a),
                _ => {
                    let token = rest.split(';').next().unwrap_or(rest);
                    if token.is_empty() {
                        // An empty field between separators.
                        rest = &rest[1..];
                        continue;
                    }
                    return Err(WireError::BadToken(token.to_owned()));
                }
            };
            let mut value = String::new();
            let mut chars = after.char_indices().peekable();
            let mut end = after.len();
            while let Some((i, c)) = chars.next() {
                if c == ';' {
                    if chars.peek().is_some_and(|&(_, n)| n == ';') {
                        chars.next();
                        value.push(';');
                        continue;
                    }
                    end = i + 1;
                    break;
                }
                value.push(c);
            }
            pairs.push((key.to_owned(), value));
            rest = &after[end.min(after.len())..];
        }
        let cmd = match pairs.first() {
            Some((k, v)) if k == "cmd" && !v.is_empty() => v.clone(),
            _ => return Err(WireError::NoCommand),
        };
        pairs.remove(0);
        Ok(Message { cmd, pairs })
    }

    /// The PMI-2 frame for this message: the 6-character length, then
    /// `cmd=<name>;<key>=<value>;...;` with every `;` of a value doubled.
    pub fn to_frame(&self) -> Vec<u8> {
        let mut body = format!("cmd={};", self.cmd);
        for (k, v) in &self.pairs {
            body.push_str(k);
            body.push('=');
            body.push_str(&v.replace(';', ";;"));
            body.push(';');
        }
        let mut out = format!("{:<6}", body.len()).into_bytes();
        out.extend_from_slice(body.as_bytes());
        out
    }

    /// The line for this message, `\n` included.
    pub fn to_line(&self) -> String {
        let mut s = String::with_capacity(
            5 + self.cmd.len()
                + self
                    .pairs
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 2)
                    .sum::<usize>()
                + 1,
        );
        s.push_str("cmd=");
        s.push_str(&self.cmd);
        for (k, v) in &self.pairs {
            s.push(' ');
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        s.push('\n');
        s
    }
}

/// True when `s` can be sent as a key or value token: printable ASCII without space or `=`.
pub fn is_token(s: &str) -> bool {
    s.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'=')
}

/// Lowercase hex of `bytes`.
pub fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Decodes hex (either case); `None` for odd length or a non-hex character.
pub fn hex_decode(s: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = s.as_bytes();
    if bytes.len() % 2 != 0 {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

/// At most 160 characters of `s` for error messages, with non-printable bytes escaped.
pub fn excerpt(s: &str) -> String {
    excerpt_bytes(s.as_bytes())
}

/// [`excerpt`] for raw bytes.
pub fn excerpt_bytes(b: &[u8]) -> String {
    const MAX: usize = 160;
    let mut out: String = b[..b.len().min(MAX)]
        .iter()
        .flat_map(|&c| std::ascii::escape_default(c))
        .map(char::from)
        .collect();
    if b.len() > MAX {
        out.push_str(&format!("... ({} bytes)", b.len()));
    }
    if out.is_empty() {
        out.push_str("nothing");
    }
    out
}

/// Accumulates received bytes and cuts them into lines of bounded length.
#[derive(Debug)]
pub struct LineBuf {
    buf: Vec<u8>,
    max: usize,
}

/// A line longer than the limit (newline included) was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong {
    /// The limit.
    pub max: usize,
}

impl fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line longer than {} bytes", self.max)
    }
}

impl LineBuf {
    /// An empty buffer for lines of at most `max` bytes, newline included.
    pub fn new(max: usize) -> Self {
        LineBuf {
            buf: Vec::new(),
            max,
        }
    }

    /// Appends received bytes.
    pub fn extend(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Removes and returns the next complete line without its `\n`; `Ok(None)` when no
    /// complete line is buffered; `Err` when the line (complete or not) exceeds the limit.
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>, LineTooLong> {
        match self.buf.iter().position(|&b| b == b'\n') {
            Some(i) if i < self.max => {
                let mut line: Vec<u8> = self.buf.drain(..=i).collect();
                line.pop();
                Ok(Some(line))
            }
            Some(_) => Err(LineTooLong { max: self.max }),
            None if self.buf.len() >= self.max => Err(LineTooLong { max: self.max }),
            None => Ok(None),
        }
    }

    /// Removes and returns the body of the next complete PMI-2 frame; `Ok(None)` when no
    /// complete frame is buffered; `Err` when the length header is malformed or announces
    /// more than [`MAX_FRAME`] bytes.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        if self.buf.len() < 6 {
            return Ok(None);
        }
        let header = String::from_utf8_lossy(&self.buf[..6]).into_owned();
        let len: usize = header
            .trim()
            .parse()
            .ok()
            .filter(|&n| n <= MAX_FRAME)
            .ok_or(WireError::BadLength(header))?;
        if self.buf.len() < 6 + len {
            return Ok(None);
        }
        let body = self.buf[6..6 + len].to_vec();
        self.buf.drain(..6 + len);
        Ok(Some(body))
    }

    /// The bytes of an incomplete line received so far.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hydra_4_0_and_4_1_orders_alike() {
        let old = Message::parse(b"cmd=get_result rc=0 msg=success value=deadbeef1").unwrap();
        let new = Message::parse(b"cmd=get_result rc=0 value=deadbeef1").unwrap();
        for m in [&old, &new] {
            assert_eq!(m.cmd(), "get_result");
            assert_eq!(m.get_int("rc"), Ok(Some(0)));
            assert_eq!(m.get("value"), Some("deadbeef1"));
            assert_eq!(m.get("found"), None);
        }
        let missing =
            Message::parse(b"cmd=get_result rc=-1 msg=key_x_not_found value=unknown").unwrap();
        assert_eq!(missing.get_int("rc"), Ok(Some(-1)));
    }

    #[test]
    fn values_keep_equals_and_punctuation() {
        let m = Message::parse(b"cmd=get_result rc=0 value=(vector,(0,1,4)) x=a=b").unwrap();
        assert_eq!(m.get("value"), Some("(vector,(0,1,4))"));
        assert_eq!(m.get("x"), Some("a=b"));
        let e = Message::parse(b"cmd=put value=").unwrap();
        assert_eq!(e.get("value"), Some(""));
    }

    #[test]
    fn rejects_malformed_lines() {
        assert_eq!(Message::parse(b""), Err(WireError::Empty));
        assert_eq!(Message::parse(b"   "), Err(WireError::Empty));
        assert_eq!(Message::parse(b"hello world"), Err(WireError::NoCommand));
        assert_eq!(Message::parse(b"cmd= x=1"), Err(WireError::NoCommand));
        assert_eq!(Message::parse(b"mcmd=spawn"), Err(WireError::NoCommand));
        assert_eq!(
            Message::parse(b"cmd=put novalue"),
            Err(WireError::BadToken("novalue".into()))
        );
        assert_eq!(
            Message::parse(b"cmd=put =v"),
            Err(WireError::BadToken("=v".into()))
        );
        assert_eq!(
            Message::parse(b"cmd=init\r"),
            Err(WireError::NotPrintable {
                offset: 8,
                byte: b'\r'
            })
        );
        assert!(Message::parse(&[b'c', 0xff, 0]).is_err());
    }

    #[test]
    fn format_round_trips() {
        let m = Message::new("put")
            .with("kvsname", "kvs_1")
            .with("key", "k")
            .with("value", "00ff");
        let line = m.to_line();
        assert_eq!(line, "cmd=put kvsname=kvs_1 key=k value=00ff\n");
        assert_eq!(Message::parse(line.trim_end().as_bytes()).unwrap(), m);
    }

    #[test]
    fn int_values_report_garbage() {
        let m = Message::parse(b"cmd=maxes vallen_max=12x").unwrap();
        assert_eq!(m.get_int("vallen_max"), Err("12x".into()));
        assert_eq!(m.get_int("keylen_max"), Ok(None));
    }

    #[test]
    fn hex_round_trip_all_bytes() {
        let all: Vec<u8> = (0..=255).collect();
        let h = hex_encode(&all);
        assert_eq!(h.len(), 512);
        assert!(h.starts_with("000102") && h.ends_with("fdfeff"));
        assert_eq!(hex_decode(&h).unwrap(), all);
        assert_eq!(hex_decode("ABcd").unwrap(), vec![0xab, 0xcd]);
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("zz"), None);
        assert_eq!(hex_decode("").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn tokens() {
        assert!(is_token("shmem-0-addr"));
        assert!(!is_token("a b"));
        assert!(!is_token("a=b"));
        assert!(!is_token("a\n"));
        assert!(is_token(""));
    }

    #[test]
    fn line_buffer_splits_and_bounds() {
        let mut lb = LineBuf::new(16);
        lb.extend(b"cmd=initack\ncmd=set size=2\ncmd=se");
        assert_eq!(lb.next_line().unwrap().unwrap(), b"cmd=initack");
        assert_eq!(lb.next_line().unwrap().unwrap(), b"cmd=set size=2");
        assert_eq!(lb.next_line().unwrap(), None);
        assert_eq!(lb.pending(), b"cmd=se");
        lb.extend(b"t rank=1\n");
        assert_eq!(lb.next_line().unwrap().unwrap(), b"cmd=set rank=1");

        let mut lb = LineBuf::new(8);
        lb.extend(b"1234567\n");
        assert_eq!(lb.next_line().unwrap().unwrap(), b"1234567");
        lb.extend(b"12345678\n");
        assert_eq!(lb.next_line(), Err(LineTooLong { max: 8 }));
        let mut lb = LineBuf::new(8);
        lb.extend(b"12345678");
        assert_eq!(lb.next_line(), Err(LineTooLong { max: 8 }));
    }

    #[test]
    fn pmi2_frames_round_trip_with_escapes() {
        let m = Message::new("kvs-put")
            .with("key", "gsas-r0")
            .with("value", "a;b;;c d");
        let f = m.to_frame();
        assert_eq!(
            String::from_utf8(f.clone()).unwrap(),
            "42    cmd=kvs-put;key=gsas-r0;value=a;;b;;;;c d;"
        );
        let mut lb = LineBuf::new(16);
        lb.extend(&f[..10]);
        assert_eq!(lb.next_frame().unwrap(), None);
        lb.extend(&f[10..]);
        lb.extend(b"5     cmd=x");
        let body = lb.next_frame().unwrap().unwrap();
        assert_eq!(Message::parse_v2(&body).unwrap(), m);
        let second = lb.next_frame().unwrap().unwrap();
        assert_eq!(Message::parse_v2(&second).unwrap(), Message::new("x"));
        assert_eq!(lb.next_frame().unwrap(), None);
    }

    #[test]
    fn pmi2_bodies_as_slurm_writes_them() {
        let m = Message::parse_v2(
            b"cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=3;size=8;appnum=-1;debugged=FALSE;pmiverbose=FALSE;",
        )
        .unwrap();
        assert_eq!(m.cmd(), "fullinit-response");
        assert_eq!(m.get_int("rank"), Ok(Some(3)));
        assert_eq!(m.get("debugged"), Some("FALSE"));
        let m = Message::parse_v2(
            b"cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,4,2))",
        )
        .unwrap();
        assert_eq!(m.get("value"), Some("(vector,(0,4,2))"));
        let m = Message::parse_v2(b"cmd=kvs-get-response;rc=0;found=TRUE;value=;").unwrap();
        assert_eq!(m.get("value"), Some(""));
        let m = Message::parse_v2(b"cmd=abort;;isworldabort=TRUE;msg=a b").unwrap();
        assert_eq!(m.get("msg"), Some("a b"));
    }

    #[test]
    fn pmi2_rejects_malformed_frames() {
        assert_eq!(Message::parse_v2(b""), Err(WireError::Empty));
        assert_eq!(Message::parse_v2(b"rc=0;cmd=x;"), Err(WireError::NoCommand));
        assert_eq!(Message::parse_v2(b"cmd=;"), Err(WireError::NoCommand));
        assert_eq!(
            Message::parse_v2(b"cmd=x;novalue;"),
            Err(WireError::BadToken("novalue".into()))
        );
        assert!(matches!(
            Message::parse_v2(b"cmd=x;k=\x01"),
            Err(WireError::NotPrintable { offset: 8, .. })
        ));
        for bad in [&b"abcdef"[..], b"-1    ", b"999999999"] {
            let mut lb = LineBuf::new(16);
            lb.extend(bad);
            assert!(
                matches!(lb.next_frame(), Err(WireError::BadLength(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn excerpts_escape_and_shorten() {
        assert_eq!(excerpt_bytes(b"a\0b"), "a\\x00b");
        assert_eq!(excerpt(""), "nothing");
        let long = "x".repeat(500);
        let e = excerpt(&long);
        assert!(e.ends_with("... (500 bytes)"), "{e}");
    }
}
