//! The node client's path through atomic services: gsas-core client engines over
//! `Reliable<NetTransport>` (other nodes, over UDP or Exanet) and over the PE's shm ring (its own node's
//! service, when direct access is off), with a table of operation records.
//!
//! Every operation started here gets a [`Record`]; its index is the engine's tag. Replies
//! are matched by the engine and reported back through [`on_completion`]: read data is
//! copied to the record's destination, the old value of a fetching atomic stored (or
//! written to the caller's destination for nbi atomics), and the result kept until the
//! waiting caller takes it. Records of non-blocking operations free themselves at
//! completion; their errors are kept per context and reported by the next `quiet`.
//!
//! Thread-safety: [`Remote`] is a plain value behind the node's mutex.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use gsas_core::client::{Client, ClientError, Completion, OpError, OpHandle};
use gsas_core::reliable::{PeerEvent, Refusal, RefusalReason};
use gsas_core::transport::{Transport, TransportError};

use gsas_transport::net::{NetAddr, NetPeer, NetTransport};
use gsas_transport::poll::monotonic_ns;
use gsas_transport::reliable::OwnedReliable;
use gsas_transport::shmring::{RingPeer, ShmRing};

use super::NodeError;

/// Operations in flight per engine.
pub(crate) const OPS: usize = 1024;
/// Communication contexts (0 is the default one).
pub(crate) const CONTEXTS: usize = 64;
/// Frames in flight per service over the inter-node transport (UDP or Exanet).
pub(crate) const NET_WINDOW: usize = 32;
/// How long after receiving a frame the remote path counts as busy: the reliability layer
/// acknowledges it after its ack delay (200 us) at the next poll, which someone (a caller
/// or the progress keeper) must still make. 50 ms: beyond the ack delay and two keeper
/// ticks, it covers a retransmission of the service's last frame after up to twice the
/// timeout floor ([`MIN_RTO`](gsas_service::MIN_RTO), 20 ms), so that an
/// acknowledgement lost or sent late is repaired while the program computes; otherwise
/// nobody would read those retransmissions and the service would declare the PE
/// unreachable at its deadline.
pub(crate) const ACK_LINGER_NS: u64 = 50_000_000;
/// Operations in flight from which a non-blocking start first receives replies (so that
/// long runs of non-blocking operations keep the services' reply frames acknowledged
/// instead of filling the operation table first).
pub(crate) const NBI_DRAIN_AT: usize = OPS / 4;

pub(crate) type NetLayer = OwnedReliable<NetTransport, NET_WINDOW>;

/// A path to services: a client engine and the transport it sends through.
pub(crate) struct ServicePath<T: Transport> {
    pub(crate) client: Box<Client<T::Peer, OPS, CONTEXTS>>,
    pub(crate) transport: T,
}

impl<T: Transport> ServicePath<T>
where
    T::Peer: PartialEq,
{
    pub(crate) fn new(client: Box<Client<T::Peer, OPS, CONTEXTS>>, transport: T) -> Self {
        ServicePath { client, transport }
    }
}

/// How a PE is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Mapped: loads, stores and CPU atomics.
    Direct,
    /// Through the local service's ring.
    Ring,
    /// Through a service over the network (UDP or Exanet).
    Net(NetPeer),
    /// RMA by RDMA on a verbs queue pair (`verbs.rs`); atomics through the node's service
    /// at this address, over UDP.
    Verbs(NetPeer),
}

impl Route {
    /// The route of an operation that goes through a service: a verbs peer's atomics
    /// take its node's service.
    #[inline]
    pub(crate) fn service(self) -> Route {
        match self {
            Route::Verbs(p) => Route::Net(p),
            r => r,
        }
    }
}

/// What an operation was, for messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpDesc {
    pub(crate) kind: &'static str,
    pub(crate) pe: u32,
    pub(crate) seg: u8,
    pub(crate) offset: u64,
    pub(crate) len: usize,
    /// The signal word (segment, offset) of a put-with-signal.
    pub(crate) signal: Option<(u8, u64)>,
}

impl std::fmt::Display for OpDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} bytes at PE {}, segment {}, offset {:#x}",
            self.kind, self.len, self.pe, self.seg, self.offset
        )?;
        match self.signal {
            Some((seg, offset)) => write!(f, ", signal at segment {seg}, offset {offset:#x}"),
            None => Ok(()),
        }
    }
}

/// Where completion data goes.
#[derive(Debug)]
pub(crate) enum Target {
    /// Read data: copied to `dest + offset`.
    Read { dest: usize },
    /// A write whose payload is kept until every fragment is sent (nbi puts).
    Write { payload: Option<Vec<u8>> },
    /// An atomic; a fetched value is written to `dest` (`width` bytes) when given.
    Atomic { dest: Option<usize>, width: usize },
}

/// One operation in flight.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) ctx: usize,
    pub(crate) route: Route,
    pub(crate) node: u16,
    pub(crate) desc: OpDesc,
    /// A caller waits for the result and frees the record.
    pub(crate) blocking: bool,
    /// The caller gave up waiting (and was told why): drop the result silently.
    pub(crate) abandoned: bool,
    pub(crate) target: Target,
    pub(crate) handle: Option<OpHandle>,
    pub(crate) result: Option<Result<Option<u64>, OpError>>,
}

/// Records and what completions update.
#[derive(Default)]
pub(crate) struct Book {
    records: Vec<Option<Record>>,
    free: Vec<usize>,
    /// First error of a non-blocking operation, per context.
    pub(crate) ctx_error: Vec<Option<NodeError>>,
    /// Services declared unreachable (or restarted under us, or refusing us).
    pub(crate) failed: HashSet<NetAddr>,
    /// Services that refused to keep state for this PE, and why.
    pub(crate) refused: HashMap<NetAddr, Refusal>,
    /// Deadline of the reliability layer, for messages.
    pub(crate) deadline: Duration,
    /// Records of writes with fragments left to send.
    pub(crate) unsent: Vec<usize>,
    /// The PE is ending: `finalize` completed every context and runs its last barrier (see
    /// [`Book::finished_by_job_end`]).
    pub(crate) ending: bool,
}

impl Book {
    pub(crate) fn new(deadline: Duration) -> Self {
        Book {
            ctx_error: (0..CONTEXTS).map(|_| None).collect(),
            deadline,
            ..Default::default()
        }
    }

    pub(crate) fn insert(&mut self, r: Record) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.records[i] = Some(r);
                i
            }
            None => {
                self.records.push(Some(r));
                self.records.len() - 1
            }
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<&Record> {
        self.records.get(i).and_then(Option::as_ref)
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut Record> {
        self.records.get_mut(i).and_then(Option::as_mut)
    }

    pub(crate) fn remove(&mut self, i: usize) -> Option<Record> {
        let r = self.records.get_mut(i).and_then(Option::take);
        if r.is_some() {
            self.free.push(i);
        }
        r
    }

    /// The error for a failed service: refused us (with the reason), or unreachable.
    pub(crate) fn peer_error(&self, node: u16, addr: NetAddr) -> NodeError {
        match self.refused.get(&addr) {
            Some(&refusal) => NodeError::PeerRefused {
                node,
                addr,
                refusal,
            },
            None => NodeError::Unreachable {
                node,
                addr,
                waited: self.deadline,
            },
        }
    }

    /// Whether `record`, which failed with `e`, counts as complete because the job ended
    /// on its target's node: while this PE is ending, a non-blocking operation whose result
    /// nobody reads (a put, a non-fetching atomic such as the final barrier's increments)
    /// to a service that refused this PE with [`RefusalReason::JobEnded`]. That refusal
    /// says every PE of the job on that node finalized, so each passed the final barrier,
    /// for which this PE's increments to it had to be executed; whatever the operation
    /// would still write there, nobody can read any more. A fetching operation, a
    /// blocking one, or any operation before `finalize` stays an error.
    pub(crate) fn finished_by_job_end(&self, record: &Record, e: OpError) -> bool {
        let Route::Net(p) = record.route else {
            return false;
        };
        let unread = match record.target {
            Target::Write { .. } | Target::Atomic { dest: None, .. } => true,
            Target::Atomic { dest: Some(_), .. } | Target::Read { .. } => false,
        };
        self.ending
            && e == OpError::Aborted
            && !record.blocking
            && unread
            && self
                .refused
                .get(&p.addr)
                .is_some_and(|r| r.reason == RefusalReason::JobEnded)
    }

    /// The error an operation of `record` ended with.
    pub(crate) fn op_error(&self, record: &Record, e: OpError) -> NodeError {
        let failed_peer = match record.route {
            Route::Net(p) if self.failed.contains(&p.addr) => Some(p.addr),
            _ => None,
        };
        match (e, failed_peer) {
            (OpError::Remote(code), _) => NodeError::Refused {
                op: record.desc.to_string(),
                node: record.node,
                code,
            },
            (OpError::Aborted, Some(addr)) => self.peer_error(record.node, addr),
            (OpError::Aborted, None) => {
                NodeError::Transport(format!("{} was abandoned", record.desc))
            }
            (OpError::BadReply, _) => NodeError::Transport(format!(
                "{}: node {} sent a reply that does not match the request",
                record.desc, record.node
            )),
        }
    }
}

/// Applies one completion to the records.
pub(crate) fn on_completion(book: &mut Book, c: Completion<'_>) {
    match c {
        Completion::Data {
            tag, offset, data, ..
        } => {
            let Some(r) = book.get(tag as usize) else {
                return;
            };
            if let Target::Read { dest } = r.target {
                // SAFETY: `dest` points at `r.desc.len` writable bytes that the caller of
                // `get`/`get_nbi` keeps valid until the operation completes (blocking: the
                // caller waits; nbi: the caller's contract until quiet). The engine checked
                // that `offset + data.len()` lies within the operation's length.
                unsafe {
                    gsas_transport::watched::store_once(
                        data.as_ptr(),
                        (dest as *mut u8).add(offset as usize),
                        data.len(),
                    );
                }
            }
        }
        Completion::Done { tag, result, .. } => {
            let i = tag as usize;
            let Some(r) = book.get_mut(i) else {
                return;
            };
            if let (
                Target::Atomic {
                    dest: Some(d),
                    width,
                },
                Ok(Some(v)),
            ) = (&r.target, &result)
            {
                // SAFETY: `d` points at `width` (4 or 8) writable bytes the caller of
                // `atomic_fetch_nbi` keeps valid until quiet.
                unsafe {
                    gsas_transport::watched::store_once(
                        v.to_le_bytes().as_ptr(),
                        *d as *mut u8,
                        *width,
                    );
                }
            }
            r.result = Some(result);
            if !r.blocking {
                let r = book.remove(i).expect("present above");
                if r.abandoned {
                    return;
                }
                if let Some(Err(e)) = r.result {
                    if book.finished_by_job_end(&r, e) {
                        log::debug!(
                            "{} counts as complete: the job ended on node {} (every PE of it there finalized)",
                            r.desc,
                            r.node
                        );
                        return;
                    }
                    let err = book.op_error(&r, e);
                    if let Some(slot) = book.ctx_error.get_mut(r.ctx) {
                        slot.get_or_insert(err);
                    }
                }
            }
        }
    }
}

/// Everything of the remote path, behind the node's mutex.
pub(crate) struct Remote {
    pub(crate) net: ServicePath<NetLayer>,
    pub(crate) ring: Option<ServicePath<ShmRing>>,
    /// RMA to the PEs of other verbs nodes (`verbs.rs`); None in other jobs.
    pub(crate) verbs: Option<super::verbs::VerbsPath>,
    pub(crate) book: Book,
    /// The service's doorbell (page word, eventfd) for ring users.
    pub(crate) doorbell: Option<(
        std::sync::Arc<gsas_transport::shm::Segment>,
        std::os::fd::OwnedFd,
    )>,
    /// `monotonic_ns` of the last round of progress that received anything over UDP (0:
    /// never); acknowledgements may be owed until [`ACK_LINGER_NS`] after it.
    pub(crate) last_rx_ns: u64,
    /// `monotonic_ns` of the last round of progress.
    pub(crate) last_poll_ns: u64,
    /// The reliability layer's acknowledgement delay: a frame received at `t` is
    /// acknowledged by the first poll at `t + ack_delay_ns` or later (unless a data frame
    /// carried the acknowledgement before).
    pub(crate) ack_delay_ns: u64,
}

fn transport_error(e: TransportError) -> NodeError {
    NodeError::Transport(e.to_string())
}

/// What one round of progress on an engine did.
#[derive(Clone, Copy, Debug, Default)]
struct Moved {
    /// Packets were received.
    received: bool,
    /// Anything happened (packets received or sent).
    any: bool,
}

/// Drives timers (which also sends open frames), receives and matches replies, resumes
/// bulk reads.
fn progress_engine<T: Transport>(
    e: &mut ServicePath<T>,
    book: &mut Book,
    now: u64,
) -> Result<Moved, TransportError>
where
    T::Peer: PartialEq,
{
    e.transport.poll(now)?;
    let mut moved = Moved::default();
    for _ in 0..256 {
        let ServicePath { client, transport } = e;
        let got = transport.recv(|_, bytes| {
            client.handle_reply(bytes, |c| on_completion(book, c));
        })?;
        if got.is_none() {
            break;
        }
        moved.received = true;
    }
    moved.any = moved.received;
    match e.client.pump(&mut e.transport) {
        Ok(n) => moved.any |= n > 0,
        Err(ClientError::Transport(t)) => return Err(t),
        Err(_) => {}
    }
    Ok(moved)
}

impl Remote {
    /// Brings the UDP layer's clock to now before an operation is started: frames that the
    /// operation fills and sends at once are then stamped with the current time, not with
    /// the last round of progress (which may be long ago when the program computed).
    pub(crate) fn set_clock(&mut self) {
        self.net.transport.set_now(monotonic_ns());
    }

    /// One round of progress on every engine: timers (retransmissions, delayed
    /// acknowledgements), open frames sent, replies received and matched, bulk transfers
    /// resumed. Returns whether anything moved.
    pub(crate) fn progress(&mut self) -> Result<bool, NodeError> {
        let now = monotonic_ns();
        self.last_poll_ns = now;
        let net = progress_engine(&mut self.net, &mut self.book, now).map_err(transport_error)?;
        if net.received {
            self.last_rx_ns = now;
        }
        let mut activity = net.any;
        if let Some(ring) = &mut self.ring {
            activity |= progress_engine(ring, &mut self.book, now)
                .map_err(transport_error)?
                .any;
        }
        while let Some(ev) = self.net.transport.next_event() {
            let peer = match ev {
                PeerEvent::Unreachable(p) => {
                    log::warn!("service at {} stopped answering", p.addr);
                    p
                }
                PeerEvent::Restarted(p) => {
                    log::warn!("service at {} restarted; its operations are lost", p.addr);
                    p
                }
                PeerEvent::Refused(p, r) => {
                    log::error!(
                        "the atomic service at {} refused this PE: {r}; see its log",
                        p.addr
                    );
                    self.book.refused.insert(p.addr, r);
                    p
                }
            };
            self.book.failed.insert(peer.addr);
            let book = &mut self.book;
            self.net.client.fail_peer(peer, |c| on_completion(book, c));
            activity = true;
        }
        activity |= self.resume_writes()?;
        self.net.transport.flush().map_err(transport_error)?;
        if let Some(ring) = &mut self.ring {
            ring.transport.flush().map_err(transport_error)?;
        }
        Ok(activity)
    }

    /// Sends more fragments of writes that kept their payload.
    fn resume_writes(&mut self) -> Result<bool, NodeError> {
        if self.book.unsent.is_empty() {
            return Ok(false);
        }
        let mut activity = false;
        let list = std::mem::take(&mut self.book.unsent);
        for i in list {
            let Some(r) = self.book.get_mut(i) else {
                continue;
            };
            let (Some(handle), Target::Write { payload: Some(p) }) = (r.handle, &r.target) else {
                continue;
            };
            let issued = match r.route {
                Route::Net(_) => self.net.client.resume(&mut self.net.transport, handle, p),
                Route::Ring => match &mut self.ring {
                    Some(ring) => ring.client.resume(&mut ring.transport, handle, p),
                    None => Err(ClientError::StaleHandle),
                },
                Route::Direct | Route::Verbs(_) => Err(ClientError::StaleHandle),
            };
            match issued {
                Ok(s) => {
                    activity |= s.packets > 0;
                    if s.all_sent {
                        r.target = Target::Write { payload: None };
                    } else {
                        self.book.unsent.push(i);
                    }
                }
                // The operation completed (with an error) before everything was sent.
                Err(ClientError::StaleHandle) => {}
                Err(e) => {
                    self.book.unsent.push(i);
                    return Err(NodeError::Transport(e.to_string()));
                }
            }
        }
        Ok(activity)
    }

    /// Whether anything is in flight at `now`: operations outstanding (their payload
    /// possibly not all sent), UDP frames open or unacknowledged, or acknowledgements
    /// possibly owed. What the progress keeper and [`super::Node::poke`] look at.
    pub(crate) fn busy(&self, now: u64) -> bool {
        (self.last_rx_ns != 0 && now < self.last_rx_ns.saturating_add(ACK_LINGER_NS))
            || self.net.client.in_flight() > 0
            || self.net.transport.has_frames_in_use()
            || self.ring.as_ref().is_some_and(|r| r.client.in_flight() > 0)
    }

    /// Whether every operation completed and every frame received has been acknowledged
    /// (a round of progress ran an ack delay after the last receipt): what a PE waits for
    /// before it leaves, so that no service keeps retransmitting a reply to it.
    pub(crate) fn settled(&self) -> bool {
        self.net.client.in_flight() == 0
            && self.ring.as_ref().is_none_or(|r| r.client.in_flight() == 0)
            && (self.last_rx_ns == 0
                || self.last_poll_ns >= self.last_rx_ns.saturating_add(self.ack_delay_ns))
    }

    /// What keeps [`Remote::settled`] false, for the message of a PE that cannot leave
    /// cleanly: operations outstanding per service (with the first of each), and an
    /// acknowledgement still owed.
    pub(crate) fn unsettled(&self) -> String {
        let mut per: std::collections::BTreeMap<String, (usize, String)> = Default::default();
        for r in self.book.records.iter().flatten() {
            if r.result.is_some() || r.abandoned {
                continue;
            }
            let to = match r.route {
                Route::Net(p) => format!("node {} ({})", r.node, p.addr),
                Route::Ring => format!("node {} (through its ring)", r.node),
                Route::Direct | Route::Verbs(_) => continue,
            };
            let e = per.entry(to).or_insert((0, r.desc.to_string()));
            e.0 += 1;
        }
        let mut parts: Vec<String> = per
            .into_iter()
            .map(|(to, (n, first))| {
                format!("{n} operation(s) to {to} outstanding, the first a {first}")
            })
            .collect();
        let in_flight =
            self.net.client.in_flight() + self.ring.as_ref().map_or(0, |r| r.client.in_flight());
        if parts.is_empty() && in_flight > 0 {
            parts.push(format!(
                "{in_flight} operation(s) in flight without a record"
            ));
        }
        if self.last_rx_ns != 0
            && self.last_poll_ns < self.last_rx_ns.saturating_add(self.ack_delay_ns)
        {
            parts.push("an acknowledgement of the last replies still owed".into());
        }
        if parts.is_empty() {
            "nothing outstanding any more".into()
        } else {
            parts.join("; ")
        }
    }

    /// Whether a non-blocking start should receive replies first (see [`NBI_DRAIN_AT`]).
    pub(crate) fn crowded(&self) -> bool {
        self.net.client.in_flight() >= NBI_DRAIN_AT
            || self
                .ring
                .as_ref()
                .is_some_and(|r| r.client.in_flight() >= NBI_DRAIN_AT)
    }

    /// Operations of `ctx` not completed, over both engines.
    pub(crate) fn outstanding(&self, ctx: usize) -> u32 {
        self.net.client.outstanding(ctx)
            + self.ring.as_ref().map_or(0, |r| r.client.outstanding(ctx))
    }

    /// Rings the service's doorbell if it sleeps (after putting work in the ring).
    pub(crate) fn ring_doorbell(&self) {
        if let Some((page, efd)) = &self.doorbell {
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            let sleeping = page
                .atomic_u32(0)
                .is_some_and(|w| w.load(std::sync::atomic::Ordering::Relaxed) != 0);
            if sleeping {
                use std::os::fd::AsFd;
                gsas_sys::event::signal_raw(efd.as_fd());
            }
        }
    }
}

/// Starts an operation on engine `e` toward `peer` with `start`, mapping engine errors.
/// `Ok(None)`: no room now (table full or transport busy); progress and retry.
pub(crate) fn try_start<T, F>(
    e: &mut ServicePath<T>,
    start: F,
) -> Result<Option<gsas_core::client::Issued>, ClientError>
where
    T: Transport,
    T::Peer: PartialEq + Eq + Hash,
    F: FnOnce(
        &mut Client<T::Peer, OPS, CONTEXTS>,
        &mut T,
    ) -> Result<gsas_core::client::Issued, ClientError>,
{
    match start(&mut e.client, &mut e.transport) {
        Ok(i) => Ok(Some(i)),
        Err(ClientError::Busy | ClientError::WouldBlock) => Ok(None),
        Err(err) => Err(err),
    }
}

/// The ring's peer, for symmetry with UDP peers.
pub(crate) const RING: RingPeer = RingPeer;

#[cfg(test)]
mod tests {
    use super::*;
    use gsas_core::client::OpKind;
    use gsas_core::wire::ErrorCode;

    /// A non-blocking operation of context 0 to the service at `peer`.
    fn record(peer: NetPeer, target: Target) -> Record {
        Record {
            ctx: 0,
            route: Route::Net(peer),
            node: 1,
            desc: OpDesc {
                kind: "atomic",
                pe: 3,
                seg: 2,
                offset: 0x40,
                len: 8,
                signal: None,
            },
            blocking: false,
            abandoned: false,
            target,
            handle: None,
            result: None,
        }
    }

    /// The context's error after `target` was refused because the job ended at its node,
    /// with the PE `ending` or not.
    fn after_job_end(target: Target, ending: bool, reason: RefusalReason) -> Option<String> {
        let peer = NetPeer {
            addr: NetAddr::Udp("127.0.0.1:7471".parse().unwrap()),
            key: 5,
        };
        let mut book = Book::new(Duration::from_secs(10));
        book.ending = ending;
        let tag = book.insert(record(peer, target)) as u64;
        book.failed.insert(peer.addr);
        let refusal = Refusal {
            reason,
            in_use: 0,
            limit: 0,
        };
        book.refused.insert(peer.addr, refusal);
        on_completion(
            &mut book,
            Completion::Done {
                tag,
                ctx: 0,
                kind: OpKind::Atomic,
                result: Err(OpError::Aborted),
            },
        );
        assert!(
            book.get(tag as usize).is_none(),
            "a non-blocking record frees itself"
        );
        book.ctx_error[0].take().map(|e| e.to_string())
    }

    #[test]
    fn only_unread_operations_at_finalize_complete_by_the_end_of_the_job() {
        let add = || Target::Atomic {
            dest: None,
            width: 8,
        };
        let put = || Target::Write { payload: None };
        // The final barrier's increments, and puts, while finalizing: complete.
        assert_eq!(after_job_end(add(), true, RefusalReason::JobEnded), None);
        assert_eq!(after_job_end(put(), true, RefusalReason::JobEnded), None);
        // Before finalize, a fetching atomic, a get, or another refusal: errors.
        let ended = "node 1 (127.0.0.1:7471): the atomic service there refused this PE: the \
                     job has ended there (every PE of it on that node finalized); this \
                     operation came after that";
        assert_eq!(
            after_job_end(add(), false, RefusalReason::JobEnded).as_deref(),
            Some(ended)
        );
        let mut fetched = 0u64;
        let fetch = Target::Atomic {
            dest: Some(&mut fetched as *mut u64 as usize),
            width: 8,
        };
        assert_eq!(
            after_job_end(fetch, true, RefusalReason::JobEnded).as_deref(),
            Some(ended)
        );
        assert_eq!(fetched, 0, "no value was written");
        let get = Target::Read { dest: 0 };
        assert_eq!(
            after_job_end(get, true, RefusalReason::JobEnded).as_deref(),
            Some(ended)
        );
        assert!(
            after_job_end(add(), true, RefusalReason::UnknownJob)
                .unwrap()
                .contains("no job with this key is known there")
        );
    }

    /// What `quiet` reports when a service refuses a put-with-signal.
    #[test]
    fn a_refused_put_with_signal_names_the_pe_and_both_addresses() {
        let d = OpDesc {
            kind: "put-with-signal",
            pe: 3,
            seg: 0,
            offset: 0x100,
            len: 8,
            signal: Some((1, 0x4c)),
        };
        let e = NodeError::Refused {
            op: d.to_string(),
            node: 1,
            code: ErrorCode::Misaligned,
        };
        assert_eq!(
            e.to_string(),
            "put-with-signal of 8 bytes at PE 3, segment 0, offset 0x100, signal at segment 1, \
             offset 0x4c: refused by node 1: atomic not naturally aligned (code 4)"
        );
    }
}
