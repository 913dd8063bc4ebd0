//! The connection to the process manager: the PMI-1 `initack` handshake, the framing of
//! each protocol (PMI-1 lines, PMI-2 length-prefixed frames), and the checks of a response.

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use super::{
    LineBuf, MAX_RESPONSE_LINE, Message, PmiError, Protocol, check_rank_size, env_err, excerpt,
    excerpt_bytes,
};

/// The `initack` handshake of `PMI_PORT` mode: returns (rank, size, debug).
pub(super) fn initack(
    conn: &mut Conn,
    id: u32,
    timeout: Duration,
) -> Result<(u32, u32, bool), PmiError> {
    const LABEL: &str = "cmd=initack";
    let deadline = Instant::now() + timeout;
    conn.send(
        Message::new("initack")
            .with("pmiid", id)
            .to_line()
            .as_bytes(),
        LABEL,
        deadline,
        timeout,
    )?;
    let first = conn.recv(LABEL, Protocol::Pmi1, deadline, timeout)?;
    if first.cmd() != "initack" {
        return Err(protocol(LABEL, &first, "expected cmd=initack"));
    }
    check_rc(LABEL, &first)?;
    let mut size = first.get("size").map(str::to_owned);
    let mut rank = first.get("rank").map(str::to_owned);
    let mut debug = first.get("debug").map(str::to_owned);
    // Hydra sends `cmd=set size=N`, `cmd=set rank=R`, `cmd=set debug=D` after `initack`;
    // a server that puts them in the initack line itself needs no `set` lines.
    if size.is_none() || rank.is_none() {
        for _ in 0..8 {
            if size.is_some() && rank.is_some() && debug.is_some() {
                break;
            }
            let m = conn.recv(LABEL, Protocol::Pmi1, deadline, timeout)?;
            if m.cmd() != "set" {
                return Err(protocol(LABEL, &m, "expected cmd=set after cmd=initack"));
            }
            for (slot, key) in [
                (&mut size, "size"),
                (&mut rank, "rank"),
                (&mut debug, "debug"),
            ] {
                if let Some(v) = m.get(key) {
                    *slot = Some(v.to_owned());
                }
            }
        }
    }
    let num = |what: &str, v: Option<String>| -> Result<i64, PmiError> {
        v.as_deref()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| PmiError::Protocol {
                command: LABEL.into(),
                line: v.clone().unwrap_or_default(),
                reason: format!("no numeric {what} in the initack handshake"),
            })
    };
    let size = u32::try_from(num("size", size)?).unwrap_or(0);
    let rank = u32::try_from(num("rank", rank)?).unwrap_or(u32::MAX);
    let debug = debug.and_then(|d| d.parse::<i64>().ok()).unwrap_or(0) != 0;
    check_rank_size(rank, size)?;
    Ok((rank, size, debug))
}

pub(super) fn resolve(host_port: &str) -> Result<Vec<SocketAddr>, PmiError> {
    let (host, port) = host_port
        .rsplit_once(':')
        .ok_or_else(|| env_err("PMI_PORT", host_port, "expected host:port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| env_err("PMI_PORT", host_port, "the port is not a number 0-65535"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(env_err("PMI_PORT", host_port, "empty host name"));
    }
    (host, port)
        .to_socket_addrs()
        .map(Iterator::collect)
        .map_err(|e| PmiError::io(format!("resolving PMI_PORT={host_port}"), e))
}

/// A message as the protocol frames it.
pub(super) fn encode(m: &Message, protocol: Protocol) -> Vec<u8> {
    match protocol {
        Protocol::Pmi2 => m.to_frame(),
        _ => m.to_line().into_bytes(),
    }
}

pub(super) fn protocol(label: &str, m: &Message, reason: &str) -> PmiError {
    PmiError::Protocol {
        command: label.into(),
        line: excerpt(m.to_line().trim_end()),
        reason: reason.into(),
    }
}

pub(super) fn check_rc(label: &str, m: &Message) -> Result<(), PmiError> {
    match m.get_int("rc") {
        Ok(None | Some(0)) => Ok(()),
        Ok(Some(rc)) => Err(PmiError::Refused {
            command: label.into(),
            rc,
            msg: m.get("msg").unwrap_or("").to_owned(),
        }),
        Err(bad) => Err(protocol(label, m, &format!("rc={bad} is not a number"))),
    }
}

pub(super) fn required_int(label: &str, m: &Message, key: &str) -> Result<i64, PmiError> {
    match m.get_int(key) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(protocol(label, m, &format!("{key}= missing"))),
        Err(bad) => Err(protocol(label, m, &format!("{key}={bad} is not a number"))),
    }
}

pub(super) fn required_usize(label: &str, m: &Message, key: &str) -> Result<usize, PmiError> {
    let v = required_int(label, m, key)?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| protocol(label, m, &format!("{key}={v} is not a positive size")))
}

/// One connection to the process manager: a non-blocking descriptor and a line buffer.
pub(super) struct Conn {
    fd: OwnedFd,
    rx: LineBuf,
}

impl Conn {
    pub(super) fn new(fd: OwnedFd) -> Result<Conn, PmiError> {
        gsas_sys::fd::set_nonblocking_cloexec(fd.as_fd())
            .map_err(|e| PmiError::io("configuring the PMI connection", e))?;
        Ok(Conn {
            fd,
            rx: LineBuf::new(MAX_RESPONSE_LINE),
        })
    }

    pub(super) fn send(
        &mut self,
        bytes: &[u8],
        label: &str,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), PmiError> {
        log::trace!("PMI > {}", excerpt_bytes(bytes));
        let mut rest = bytes;
        while !rest.is_empty() {
            match gsas_sys::fd::send(self.fd.as_fd(), rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(PmiError::Timeout {
                            command: label.into(),
                            waited: timeout,
                            received: "nothing; the request could not even be sent \
                                       (the process manager is not reading)"
                                .into(),
                        });
                    }
                    gsas_sys::fd::wait_fd(self.fd.as_fd(), libc::POLLOUT, left)
                        .map_err(|e| PmiError::io(format!("waiting to send {label}"), e))?;
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN)
                    ) =>
                {
                    return Err(PmiError::Closed {
                        command: label.into(),
                        received: format!("nothing ({e} while sending)"),
                    });
                }
                Err(e) => return Err(PmiError::io(format!("sending {label}"), e)),
            }
        }
        Ok(())
    }

    pub(super) fn recv(
        &mut self,
        label: &str,
        protocol: Protocol,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Message, PmiError> {
        loop {
            let next = match protocol {
                Protocol::Pmi2 => self.rx.next_frame().map_err(|e| e.to_string()),
                _ => self.rx.next_line().map_err(|e| e.to_string()),
            };
            match next {
                Ok(Some(line)) => {
                    log::trace!("PMI < {}", String::from_utf8_lossy(&line));
                    let parsed = match protocol {
                        Protocol::Pmi2 => Message::parse_v2(&line),
                        _ => Message::parse(&line),
                    };
                    return parsed.map_err(|e| PmiError::Protocol {
                        command: label.into(),
                        line: excerpt_bytes(&line),
                        reason: e.to_string(),
                    });
                }
                Ok(None) => {}
                Err(reason) => {
                    return Err(PmiError::Protocol {
                        command: label.into(),
                        line: excerpt_bytes(self.rx.pending()),
                        reason,
                    });
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PmiError::Timeout {
                    command: label.into(),
                    waited: timeout,
                    received: excerpt_bytes(self.rx.pending()),
                });
            }
            gsas_sys::fd::wait_fd(self.fd.as_fd(), libc::POLLIN, left)
                .map_err(|e| PmiError::io(format!("waiting for the response to {label}"), e))?;
            let mut buf = [0u8; 2048];
            match gsas_sys::fd::read(self.fd.as_fd(), &mut buf) {
                Ok(0) => {
                    return Err(PmiError::Closed {
                        command: label.into(),
                        received: excerpt_bytes(self.rx.pending()),
                    });
                }
                Ok(n) => self.rx.extend(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => {
                    return Err(PmiError::Closed {
                        command: label.into(),
                        received: format!("{} ({e})", excerpt_bytes(self.rx.pending())),
                    });
                }
                Err(e) => {
                    return Err(PmiError::io(format!("reading the response to {label}"), e));
                }
            }
        }
    }
}
