//! The client's calls (key-value space, node attributes, barrier, mapping, finalize, abort)
//! and the request each makes in PMI-1, PMI-2, PMIx or the singleton.

use super::conn::encode;
use super::conn::{check_rc, protocol};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{
    Client, Link, Message, PROCESS_MAPPING_KEY, Plan, PmiError, ProcessMapping, Protocol, State,
    is_token, pmix, value,
};
use crate::pmi::wire;

/// The most bytes of an abort message sent to gsas's launcher: hex doubles them, and the
/// request line must stay within [`wire::MAX_REQUEST_LINE`].
const ABORT_TEXT_MAX: usize = 480;

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Client {
    /// Stores `value` under `key` for every rank to read after the next barrier.
    ///
    /// Keys are printable ASCII without space, `=` or `#`, do not start with `PMI_`, and
    /// are at most `keylen_max - 6` characters (58 under Hydra). Values of any length up
    /// to a few megabytes are split across several server keys (one request each, about
    /// 470 bytes per request under Hydra); PMI is for bootstrap data, not bulk transfer.
    /// Storing again under the same key replaces the value (as Hydra does).
    pub fn kvs_put(&mut self, key: &str, value: &[u8]) -> Result<(), PmiError> {
        self.check_active("kvs_put")?;
        value::check_key(key, self.maxes.keylen_max)?;
        if let Link::Pmix(p) = &mut self.link {
            return p.put(key, value);
        }
        let plan = self.plan(key)?;
        let chunks = value::encode(key, value, plan)?;
        // The head, which names the chunk count, goes last: whoever finds it finds all.
        for (i, chunk) in chunks.iter().enumerate().rev() {
            self.raw_put(&value::chunk_key(key, i), chunk)?;
        }
        Ok(())
    }

    /// Reads the value stored under `key` by [`Client::kvs_put`] of any rank; `Ok(None)`
    /// when the key does not exist (yet: values of other ranks appear after a barrier).
    ///
    /// Under PMIx, which keeps values per publishing rank, use [`Client::kvs_get_from`].
    pub fn kvs_get(&mut self, key: &str) -> Result<Option<Vec<u8>>, PmiError> {
        self.check_active("kvs_get")?;
        value::check_key(key, self.maxes.keylen_max)?;
        if let Link::Pmix(_) = self.link {
            return Err(PmiError::Invalid(format!(
                "PMIx keeps values per rank: reading {key:?} needs the rank that published it \
                 (kvs_get_from)"
            )));
        }
        let Some(head) = self.raw_get(key)? else {
            return Ok(None);
        };
        let (count, mut bytes) = value::decode_head(key, &head)?;
        for i in 1..count {
            let ck = value::chunk_key(key, i);
            let chunk = self.raw_get(&ck)?.ok_or_else(|| PmiError::Corrupt {
                key: key.to_owned(),
                reason: format!("chunk {ck} of {count} is missing"),
            })?;
            bytes.extend(value::decode_chunk(key, i, &chunk)?);
        }
        Ok(Some(bytes))
    }

    /// Reads the value `source` stored under `key` with [`Client::kvs_put`]: under PMIx
    /// the value of that rank, under PMI-1 and PMI-2 (one flat space) the value of `key`.
    pub fn kvs_get_from(&mut self, source: u32, key: &str) -> Result<Option<Vec<u8>>, PmiError> {
        self.check_active("kvs_get")?;
        match &mut self.link {
            Link::Pmix(p) => {
                value::check_key(key, self.maxes.keylen_max)?;
                p.get_bytes(source, key)
            }
            _ => self.kvs_get(key),
        }
    }

    /// The ranks on this process's node, this one included, in increasing order: under
    /// PMIx `PMIX_LOCAL_PEERS`, otherwise from [`Client::node_of_rank`]; `None` when the
    /// launcher says nothing about nodes.
    pub fn local_peers(&mut self) -> Result<Option<Vec<u32>>, PmiError> {
        self.check_active("local_peers")?;
        if let Link::Pmix(p) = &self.link {
            if let Some(mut peers) = p.local_peers()? {
                peers.sort_unstable();
                return Ok(Some(peers));
            }
        }
        let rank = self.rank;
        Ok(self.node_of_rank()?.map(|nodes| {
            let mine = nodes[rank as usize];
            (0..nodes.len() as u32)
                .filter(|&r| nodes[r as usize] == mine)
                .collect()
        }))
    }

    /// Reads a value published by the process manager itself, verbatim (no hex
    /// decoding), such as [`PROCESS_MAPPING_KEY`]. `Ok(None)` when absent. Over PMI-2
    /// this is a job attribute (`info-getjobattr`: `PMI_process_mapping`,
    /// `universeSize`, ...).
    pub fn get_raw(&mut self, key: &str) -> Result<Option<String>, PmiError> {
        self.check_active("get_raw")?;
        if key.is_empty() || !is_token(key) || key.len() >= self.maxes.keylen_max {
            return Err(PmiError::InvalidKey {
                key: key.to_owned(),
                reason: format!(
                    "keys are 1 to {} printable ASCII characters without space or '='",
                    self.maxes.keylen_max.saturating_sub(1)
                ),
            });
        }
        if self.protocol == Protocol::Pmi2 {
            let label = format!("cmd=info-getjobattr key={key}");
            let m = Message::new("info-getjobattr").with("key", key);
            let r = self.request(&m, &label, "info-getjobattr-response", self.config.timeout)?;
            return found_value(&label, &r);
        }
        self.raw_get(key)
    }

    /// Publishes `value` (at most `(vallen_max - 1) / 2` bytes, 511 under Slurm) as an
    /// attribute of this node, readable at once by the processes of the same node with
    /// [`Client::node_get`] (PMI-2 `info-putnodeattr`). Keys follow the rules of
    /// [`Client::kvs_put`]. PMI-1 has no node attributes: over it this fails with
    /// [`PmiError::Invalid`].
    pub fn node_put(&mut self, key: &str, value: &[u8]) -> Result<(), PmiError> {
        self.check_active("node_put")?;
        value::check_key(key, self.maxes.keylen_max)?;
        let max = self.maxes.vallen_max.saturating_sub(1) / 2;
        if value.len() > max {
            return Err(PmiError::ValueTooLarge {
                key: key.to_owned(),
                len: value.len(),
                max,
            });
        }
        let hex = wire::hex_encode(value);
        match (&mut self.link, self.protocol) {
            (Link::Local(kvs), _) => {
                kvs.insert(format!("node:{key}"), hex);
                Ok(())
            }
            (Link::Pmix(_), _) | (Link::Remote(_), Protocol::Pmi1 | Protocol::Pmix) => {
                Err(no_node_attrs("node_put"))
            }
            (Link::Remote(_), Protocol::Pmi2) => {
                let label = format!("cmd=info-putnodeattr key={key}");
                let m = Message::new("info-putnodeattr")
                    .with("key", key)
                    .with("value", hex);
                let r =
                    self.request(&m, &label, "info-putnodeattr-response", self.config.timeout)?;
                check_rc(&label, &r)
            }
        }
    }

    /// Reads a node attribute published with [`Client::node_put`] by a process of this
    /// node; `Ok(None)` when absent. With `wait`, the process manager answers only once
    /// the attribute exists (bounded by [`ClientConfig::barrier_timeout`](super::ClientConfig::barrier_timeout)).
    pub fn node_get(&mut self, key: &str, wait: bool) -> Result<Option<Vec<u8>>, PmiError> {
        self.check_active("node_get")?;
        value::check_key(key, self.maxes.keylen_max)?;
        let hex = match (&mut self.link, self.protocol) {
            (Link::Local(kvs), _) => kvs.get(&format!("node:{key}")).cloned(),
            (Link::Pmix(_), _) | (Link::Remote(_), Protocol::Pmi1 | Protocol::Pmix) => {
                return Err(no_node_attrs("node_get"));
            }
            (Link::Remote(_), Protocol::Pmi2) => {
                let label = format!("cmd=info-getnodeattr key={key}");
                let m = Message::new("info-getnodeattr")
                    .with("key", key)
                    .with("wait", if wait { "TRUE" } else { "FALSE" });
                let timeout = if wait {
                    self.config.barrier_timeout
                } else {
                    self.config.timeout
                };
                let r = self.request(&m, &label, "info-getnodeattr-response", timeout)?;
                found_value(&label, &r)?
            }
        };
        hex.map(|h| {
            wire::hex_decode(&h).ok_or_else(|| PmiError::Corrupt {
                key: key.to_owned(),
                reason: "node attribute not written by a gsas client (not hex)".into(),
            })
        })
        .transpose()
    }

    /// Waits until every rank has entered the barrier (`barrier_in` / `barrier_out`),
    /// at most [`ClientConfig::barrier_timeout`](super::ClientConfig::barrier_timeout). Makes earlier puts visible to all.
    pub fn barrier(&mut self) -> Result<(), PmiError> {
        self.check_active("barrier")?;
        let (cmd, label, expect) = match (&mut self.link, self.protocol) {
            (Link::Local(_), _) => return Ok(()),
            (Link::Pmix(p), _) => return p.fence(),
            (_, Protocol::Pmi2) => ("kvs-fence", "cmd=kvs-fence", "kvs-fence-response"),
            _ => ("barrier_in", "cmd=barrier_in", "barrier_out"),
        };
        let m = self.request(
            &Message::new(cmd),
            label,
            expect,
            self.config.barrier_timeout,
        )?;
        check_rc(label, &m)?;
        Ok(())
    }

    /// The parsed `PMI_process_mapping`, or `None` when the process manager publishes
    /// none.
    pub fn process_mapping(&mut self) -> Result<Option<ProcessMapping>, PmiError> {
        if let Link::Pmix(p) = &self.link {
            return Ok(p
                .node_of_rank()?
                .map(|n| ProcessMapping::from_node_of_rank(&n)));
        }
        match self.get_raw(PROCESS_MAPPING_KEY)? {
            None => Ok(None),
            Some(s) => ProcessMapping::parse(&s).map(Some),
        }
    }

    /// The node index of every rank, from `PMI_process_mapping` (under PMIx: from every
    /// rank's `PMIX_NODEID`, renumbered 0, 1, ... and checked against
    /// `PMIX_LOCAL_PEERS`); `None` when the process manager publishes no mapping.
    pub fn node_of_rank(&mut self) -> Result<Option<Vec<u32>>, PmiError> {
        self.check_active("node_of_rank")?;
        if let Link::Pmix(p) = &self.link {
            return p.node_of_rank();
        }
        let size = self.size;
        self.process_mapping()?
            .map(|m| m.node_of_rank(size))
            .transpose()
    }

    /// Says goodbye (`finalize` / `finalize_ack`) and closes the connection. Further
    /// calls fail with [`PmiError::Finished`].
    pub fn finalize(&mut self) -> Result<(), PmiError> {
        self.check_active("finalize")?;
        if let Link::Pmix(p) = &mut self.link {
            p.finalize()?;
            self.state = State::Finalized;
            return Ok(());
        }
        if let Link::Remote(_) = self.link {
            let expect = match self.protocol {
                Protocol::Pmi2 => "finalize-response",
                _ => "finalize_ack",
            };
            let m = self.request(
                &Message::new("finalize"),
                "cmd=finalize",
                expect,
                self.config.timeout,
            )?;
            check_rc("cmd=finalize", &m)?;
            self.link = Link::Local(HashMap::new());
        }
        self.state = State::Finalized;
        Ok(())
    }

    /// Asks the process manager to end the whole job with exit status `code`
    /// (`cmd=abort exitcode=N message=...`; PMI-2: `cmd=abort;isworldabort=TRUE;msg=...;`,
    /// which carries no code: Slurm kills the step and reports the tasks' signals; there
    /// is no response). The message is reduced to at most 200 printable characters with
    /// spaces, `=` and `;` replaced by `_`.
    ///
    /// The caller must then exit with `code` itself (Hydra kills the other ranks and
    /// exits with `code`; gsas's launcher reports an `Event::Abort` of `gsas_launch::pmi`). For a
    /// singleton there is nobody to tell and this only marks the client finished.
    ///
    /// `abort` is still allowed after an earlier request failed, since that is when a PE
    /// most needs to end the job.
    pub fn abort(&mut self, code: i32, message: &str) -> Result<(), PmiError> {
        if self.state != State::Broken {
            self.check_active("abort")?;
        }
        self.state = State::Aborted;
        let text: String = message
            .chars()
            .take(200)
            .map(|c| {
                if c.is_ascii_graphic() && c != '=' && c != ';' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if let Link::Pmix(p) = &mut self.link {
            return p.abort(code, message);
        }
        let m = match self.protocol {
            Protocol::Pmi1 | Protocol::Pmix => {
                let m = Message::new("abort").with("exitcode", code);
                if message.is_empty() {
                    m
                } else if self.notes {
                    // gsas's launcher decodes the whole message, blanks and all, and
                    // prints it as the PE wrote it.
                    m.with(
                        "gsas_message_hex",
                        wire::hex_encode(cut(message, ABORT_TEXT_MAX).as_bytes()),
                    )
                } else {
                    m.with("message", text)
                }
            }
            Protocol::Pmi2 => Message::new("abort")
                .with("isworldabort", "TRUE")
                .with("msg", format!("exit code {code}: {text}")),
        };
        let timeout = self.config.timeout;
        let proto = self.protocol;
        if let Link::Remote(conn) = &mut self.link {
            let deadline = Instant::now() + timeout;
            conn.send(&encode(&m, proto), "cmd=abort", deadline, timeout)?;
        }
        Ok(())
    }

    /// Whether the process manager is gsas's launcher, which takes [`Client::note`]s (its
    /// `response_to_init` said `gsas_notes=1`; Hydra, Slurm and PMIx do not).
    pub fn takes_notes(&self) -> bool {
        self.notes && self.state == State::Active
    }

    /// Tells gsas's launcher something about this PE that it uses to explain a hang
    /// (`cmd=gsas_note kind=K value=V`, answered by `cmd=gsas_note_result rc=0`): `kind`
    /// and `value` are tokens (printable ASCII without space or `=`). `wait` with the name
    /// of the OpenSHMEM call this PE has been blocked in for a while (`-`: no longer),
    /// `exit` (the program exits without `shmem_finalize`), `report` (this PE printed
    /// where it waits). Does nothing, successfully, when the server does not take notes.
    pub fn note(&mut self, kind: &str, value: &str) -> Result<(), PmiError> {
        if !self.takes_notes() {
            return Ok(());
        }
        if !is_token(kind) || !is_token(value) {
            return Err(PmiError::Invalid(format!(
                "note {kind:?}={value:?}: not tokens"
            )));
        }
        let m = Message::new("gsas_note")
            .with("kind", kind)
            .with("value", value);
        let r = self.request(&m, "cmd=gsas_note", "gsas_note_result", self.config.timeout)?;
        check_rc("cmd=gsas_note", &r)
    }

    pub(super) fn check_active(&self, op: &'static str) -> Result<(), PmiError> {
        match self.state {
            State::Active => Ok(()),
            State::Finalized | State::Aborted => Err(PmiError::Finished { op }),
            State::Broken => Err(PmiError::Unusable { op }),
        }
    }

    pub(super) fn plan(&self, key: &str) -> Result<Plan, PmiError> {
        Plan::new(&self.kvsname, key, self.maxes.vallen_max).ok_or_else(|| {
            PmiError::Invalid(format!(
                "no value fits in a put line for key {key:?} in kvs {:?} with vallen_max {}",
                self.kvsname, self.maxes.vallen_max
            ))
        })
    }

    pub(super) fn raw_put(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        match &mut self.link {
            Link::Local(kvs) => {
                kvs.insert(key.to_owned(), value.to_owned());
                Ok(())
            }
            Link::Pmix(p) => p.put(key, value.as_bytes()),
            Link::Remote(_) => {
                let (label, m, expect) = match self.protocol {
                    Protocol::Pmi1 | Protocol::Pmix => (
                        format!("cmd=put key={key}"),
                        Message::new("put")
                            .with("kvsname", &self.kvsname)
                            .with("key", key)
                            .with("value", value),
                        "put_result",
                    ),
                    Protocol::Pmi2 => (
                        format!("cmd=kvs-put key={key}"),
                        Message::new("kvs-put")
                            .with("key", key)
                            .with("value", value),
                        "kvs-put-response",
                    ),
                };
                let r = self.request(&m, &label, expect, self.config.timeout)?;
                check_rc(&label, &r)
            }
        }
    }

    pub(super) fn raw_get(&mut self, key: &str) -> Result<Option<String>, PmiError> {
        match &mut self.link {
            Link::Local(kvs) => Ok(kvs.get(key).cloned()),
            Link::Pmix(p) => Ok(p
                .get_bytes(pmix::RANK_WILDCARD, key)?
                .map(|b| String::from_utf8_lossy(&b).into_owned())),
            Link::Remote(_) if self.protocol == Protocol::Pmi2 => {
                let label = format!("cmd=kvs-get key={key}");
                let m = Message::new("kvs-get")
                    .with("jobid", &self.kvsname)
                    .with("srcid", -1)
                    .with("key", key);
                let r = self.request(&m, &label, "kvs-get-response", self.config.timeout)?;
                found_value(&label, &r)
            }
            Link::Remote(_) => {
                let label = format!("cmd=get key={key}");
                let m = Message::new("get")
                    .with("kvsname", &self.kvsname)
                    .with("key", key);
                let r = self.request(&m, &label, "get_result", self.config.timeout)?;
                match r.get_int("rc") {
                    Ok(None | Some(0)) => match r.get("value") {
                        Some(v) => Ok(Some(v.to_owned())),
                        None => Err(protocol(&label, &r, "rc=0 without value")),
                    },
                    Ok(Some(rc)) => {
                        log::trace!(
                            "PMI: {label}: not found (rc={rc} msg={})",
                            r.get("msg").unwrap_or("")
                        );
                        Ok(None)
                    }
                    Err(bad) => Err(protocol(&label, &r, &format!("rc={bad} is not a number"))),
                }
            }
        }
    }

    /// Sends `msg` and waits for the response line with command `expect`.
    pub(super) fn request(
        &mut self,
        msg: &Message,
        label: &str,
        expect: &str,
        timeout: Duration,
    ) -> Result<Message, PmiError> {
        let Link::Remote(conn) = &mut self.link else {
            return Err(PmiError::Invalid(format!(
                "{label} needs a process manager, but this client is a singleton"
            )));
        };
        let deadline = Instant::now() + timeout;
        let proto = self.protocol;
        let r = conn
            .send(&encode(msg, proto), label, deadline, timeout)
            .and_then(|()| conn.recv(label, proto, deadline, timeout))
            .and_then(|r| {
                if r.cmd() == expect {
                    Ok(r)
                } else {
                    Err(protocol(label, &r, &format!("expected cmd={expect}")))
                }
            });
        if r.is_err() {
            // A late or unexpected response would be taken for the answer to the next
            // request: stop using the connection.
            self.state = State::Broken;
        }
        r
    }
}

/// The value of a PMI-2 `*-response` with `found=`: `None` when not found (or `rc` is not
/// 0, as some servers say "not found").
pub(super) fn found_value(label: &str, r: &Message) -> Result<Option<String>, PmiError> {
    match r.get_int("rc") {
        Ok(None | Some(0)) => {}
        Ok(Some(rc)) => {
            log::trace!("PMI: {label}: rc={rc}, taken as not found");
            return Ok(None);
        }
        Err(bad) => return Err(protocol(label, r, &format!("rc={bad} is not a number"))),
    }
    match (r.get("found"), r.get("value")) {
        (Some("FALSE"), _) => Ok(None),
        (_, Some(v)) => Ok(Some(v.to_owned())),
        (_, None) => Err(protocol(label, r, "found without value")),
    }
}

pub(super) fn no_node_attrs(op: &str) -> PmiError {
    PmiError::Invalid(format!(
        "{op}: node attributes need PMI-2 (srun --mpi=pmi2); this launcher speaks PMI-1 or PMIx"
    ))
}
