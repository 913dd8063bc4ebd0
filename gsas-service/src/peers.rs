//! Who gets state in the service's reliability layer: [`JobIndex`].
//!
//! **What it is.** The [`PeerIndex`] of a service's network layer. A peer is a (source
//! address, job key) pair; it gets a slot of the peer table only when
//!
//! * its key is the key of a job this service knows (a PE of this node joined it), the
//!   job has fewer peers than its share ([`job_share`]: the job's PE count plus
//!   [`JOB_SLACK`], at most the table), and the job's user (the uid that started it here)
//!   has fewer peers over all its jobs than the per-user share, where there is one (a
//!   daemon that serves every user: half the table, so that no user, whatever PE count
//!   its jobs claim, can fill it); or
//! * the service serves host actions for unknown keys (remote FORK is enabled) and fewer
//!   than [`HOST_SHARE`] such peers have a slot; when the share is full, the oldest one is
//!   evicted if it is idle or silent for [`HOST_QUIET_NS`] (so a flood of keys cannot lock
//!   the launcher out for longer than it keeps sending).
//!
//! Anyone else is refused (counted by reason by the layer, and a data frame answered with
//! a refusal naming the reason and the figures). A job reclaimed (a PE died) has its peers
//! freed at once ([`JobIndex::forget_job`]), and its key is remembered as an ended job's
//! (below). A job that ended cleanly (every PE of this
//! node left) keeps its peers' slots, closed in the layer, while its last frames may still
//! arrive ([`JobIndex::end_job`]; the service frees them after the reliability deadline):
//! they are *lingering* peers, which count towards no share and give way first when the
//! table is full (a lingering peer is always evicted for a newcomer, so keeping them never
//! refuses anyone). The keys of the last [`ENDED_KEYS`] jobs that ended, cleanly or
//! reclaimed, are remembered: a peer of such a key without a slot is refused with
//! [`RefusalReason::JobEnded`] (or [`RefusalReason::JobReclaimed`]), not as a stranger. Idle peers of any kind are freed when
//! they fall silent (the service calls
//! [`Reliable::release_silent`](gsas_core::reliable::Reliable::release_silent)). Peers of
//! a job that arrived as host peers (the launcher's FORK, before a PE joined) count
//! towards the job once it starts.
//!
//! **What it is not.** An authenticator: the job key travels in clear text, so whoever
//! sees a job's traffic can use its share; the share bounds what that costs other jobs.
//!
//! Thread-safety: a plain value owned by the service loop.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hasher as _;
use std::net::IpAddr;

use siphasher::sip::SipHasher24;

use gsas_core::reliable::{Admission, PeerIndex, Refusal, RefusalReason};

use gsas_transport::net::{NetAddr, NetPeer};

/// Peers a job may have beyond its PE count (the launcher's FORK sender, a restarted PE).
pub(crate) const JOB_SLACK: usize = 4;
/// Peers without a known job (remote FORK senders) that may have a slot at once.
pub(crate) const HOST_SHARE: usize = 32;
/// A host peer silent this long gives way to a newcomer even with replies unacknowledged
/// (a FORK sender acknowledges within a round trip; one that does not is most likely a
/// sender of forged frames).
pub(crate) const HOST_QUIET_NS: u64 = 1_000_000_000;

/// Host peers (of no known job) that one source address may have at once: a sender that
/// can answer challenges (its address is real) still cannot fill the host share alone.
pub(crate) const HOST_PER_ADDRESS: usize = 8;

/// A cookie is checked against the period it falls in and the one before (so it stays
/// valid for 16 to 32 s).
pub(crate) const COOKIE_PERIOD_NS: u64 = 16_000_000_000;

/// Keys of jobs that ended (cleanly or reclaimed) that are remembered (tens of bytes each),
/// so that their late frames are refused with [`RefusalReason::JobEnded`] or
/// [`RefusalReason::JobReclaimed`].
pub(crate) const ENDED_KEYS: usize = 1024;

/// The share of the peer table of a job of `npes` PEs in a table of `capacity` slots.
pub(crate) fn job_share(npes: u32, capacity: usize) -> usize {
    (npes as usize).saturating_add(JOB_SLACK).min(capacity)
}

fn figures(reason: RefusalReason, in_use: usize, limit: usize) -> Refusal {
    Refusal {
        reason,
        in_use: u32::try_from(in_use).unwrap_or(u32::MAX),
        limit: u32::try_from(limit).unwrap_or(u32::MAX),
    }
}

/// A job's share: its limit, how many of its peers have a slot, and its user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Share {
    limit: usize,
    used: usize,
    uid: u32,
}

/// The service's peer index; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct JobIndex {
    map: HashMap<NetPeer, usize>,
    free: Vec<usize>,
    next: usize,
    jobs: HashMap<u64, Share>,
    /// Whether peers of unknown keys get a slot (host actions are served).
    host_open: bool,
    /// The most peers the jobs of one user may have together (`None`: no per-user share,
    /// a service that serves one user).
    user_limit: Option<usize>,
    /// Peers without a known job, oldest first.
    host: VecDeque<NetPeer>,
    /// The host peers that proved they hold the cluster's secret (a FORK request of theirs
    /// was accepted): they keep their slot while they talk, where the others give way to a
    /// newcomer at once.
    proven: HashSet<NetPeer>,
    /// Keys of jobs that ended (cleanly or reclaimed), oldest first (at most
    /// [`ENDED_KEYS`]).
    ended: VecDeque<u64>,
    /// The same as a map, with the refusal their late frames get ([`RefusalReason::JobEnded`]
    /// or [`RefusalReason::JobReclaimed`]).
    ended_keys: HashMap<u64, RefusalReason>,
    /// Peers with a slot whose job ended cleanly (closed in the layer), oldest first.
    lingering: VecDeque<NetPeer>,
    /// The last refusal decided here, for the service's log.
    last_refusal: Option<(NetPeer, Refusal)>,
    /// The secret of the cookies (see [`CookieKey`]).
    cookies: CookieKey,
    /// Frames of the layer's shared pool held for the peers of each job key.
    frames: HashMap<u64, usize>,
}

impl JobIndex {
    /// Lets peers of unknown keys have a slot (up to [`HOST_SHARE`]).
    pub(crate) fn serve_host_actions(&mut self, open: bool) {
        self.host_open = open;
    }

    /// The cookie of `peer` (with sender epoch `epoch`) in cookie period `period`; never 0.
    fn cookie(&self, peer: NetPeer, epoch: u64, period: u64) -> u64 {
        self.cookies.cookie(peer, epoch, period)
    }

    /// Marks host peer `peer` as proven (see [`JobIndex::proven`]); nothing for a peer
    /// without a host slot.
    pub(crate) fn prove(&mut self, peer: NetPeer) {
        if self.host.contains(&peer) {
            self.proven.insert(peer);
        }
    }

    /// The oldest host peer that proved nothing, among those that `pick` selects: offered
    /// to a newcomer without the quiet time, since a sender that answers cookies but never
    /// authenticates must not keep a launcher out. Removed from the host list (the offer
    /// puts it back).
    fn take_unproven(&mut self, pick: impl Fn(&NetPeer) -> bool) -> Option<NetPeer> {
        let at = self
            .host
            .iter()
            .position(|p| pick(p) && !self.proven.contains(p))?;
        self.host.remove(at)
    }

    /// Host peers with a slot whose source address is that of `peer`.
    fn host_peers_of_address(&self, peer: NetPeer) -> usize {
        self.host
            .iter()
            .filter(|p| same_address(p.addr, peer.addr))
            .count()
    }

    /// Frames of the pool held for the jobs of user `uid`.
    fn user_frames(&self, uid: u32) -> usize {
        self.jobs
            .iter()
            .filter(|(_, s)| s.uid == uid)
            .map(|(k, _)| self.frames.get(k).copied().unwrap_or(0))
            .sum()
    }

    /// Bounds the peers of all the jobs of one user together (`None`: no bound).
    pub(crate) fn set_user_limit(&mut self, limit: Option<usize>) {
        self.user_limit = limit;
    }

    /// Peers with a slot of the jobs of user `uid`.
    fn user_used(&self, uid: u32) -> usize {
        self.jobs
            .values()
            .filter(|s| s.uid == uid)
            .map(|s| s.used)
            .sum()
    }

    /// Admits the peers of job `key` of user `uid`, at most `limit` of them (and within
    /// the user's share). (The caller frees the peers of an ended job of the same key
    /// first.)
    pub(crate) fn admit_job(&mut self, key: u64, limit: usize, uid: u32) {
        if self.ended_keys.remove(&key).is_some() {
            self.ended.retain(|&k| k != key);
        }
        let before = self.host.len();
        self.host.retain(|p| p.key != key);
        self.proven.retain(|p| p.key != key);
        let moved = before - self.host.len();
        let used = self.jobs.get(&key).map_or(0, |s| s.used) + moved;
        self.jobs.insert(key, Share { limit, used, uid });
        log::debug!("job key {key:#x} admitted: {limit} peers, {moved} of them host peers before");
    }

    /// Stops admitting job `key` (reclaimed: a PE of it died) and remembers its key, so
    /// that the frames its other PEs still send are refused with
    /// [`RefusalReason::JobReclaimed`] (their operations fail at once, naming the reason), not
    /// challenged as a stranger's; returns its peers that have a slot (the caller frees
    /// them in the layer, which calls [`PeerIndex::release`]).
    pub(crate) fn forget_job(&mut self, key: u64) -> Vec<NetPeer> {
        self.stop_job(key, RefusalReason::JobReclaimed);
        self.map.keys().filter(|p| p.key == key).copied().collect()
    }

    /// Job `key` ended cleanly: stops admitting it, remembers its key, and returns its
    /// peers that have a slot, which stay as lingering peers (the caller closes them in
    /// the layer, and frees them with [`JobIndex::peers_of`] when they may go).
    pub(crate) fn end_job(&mut self, key: u64) -> Vec<NetPeer> {
        self.stop_job(key, RefusalReason::JobEnded);
        let peers = self.peers_of(key);
        self.lingering.extend(peers.iter().copied());
        peers
    }

    /// Stops admitting job `key` and remembers its key among the last [`ENDED_KEYS`], with
    /// the refusal `why` its late frames get.
    fn stop_job(&mut self, key: u64, why: RefusalReason) {
        self.jobs.remove(&key);
        if self.ended_keys.insert(key, why).is_none() {
            self.ended.push_back(key);
            if self.ended.len() > ENDED_KEYS {
                if let Some(old) = self.ended.pop_front() {
                    self.ended_keys.remove(&old);
                }
            }
        }
    }

    /// The peers of key `key` that have a slot.
    pub(crate) fn peers_of(&self, key: u64) -> Vec<NetPeer> {
        self.map.keys().filter(|p| p.key == key).copied().collect()
    }

    /// Lingering peers (with a slot, their job ended).
    pub(crate) fn lingering_peers(&self) -> usize {
        self.lingering.len()
    }

    /// The oldest lingering peer offered for `peer`'s sake when the table is full (a
    /// lingering peer is always evicted: `quiet_ns` 0), else a refusal `full`.
    fn make_room(&mut self, peer: NetPeer, full: Refusal) -> Admission<NetPeer> {
        match self.lingering.front() {
            Some(&victim) => Admission::Replace {
                victim,
                quiet_ns: 0,
                refusal: full,
            },
            None => self.refuse(peer, full),
        }
    }

    /// Peers with a slot.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Peers with a slot that belong to no known job.
    pub(crate) fn host_peers(&self) -> usize {
        self.host.len()
    }

    /// The last refusal decided, and clears it.
    pub(crate) fn take_refusal(&mut self) -> Option<(NetPeer, Refusal)> {
        self.last_refusal.take()
    }

    fn refuse(&mut self, peer: NetPeer, r: Refusal) -> Admission<NetPeer> {
        self.last_refusal = Some((peer, r));
        Admission::Refuse(r)
    }
}

impl JobIndex {
    /// Offers host peer `victim` (taken out of the host queue) for `peer`'s sake, with
    /// `full` as the refusal if it is busy; it goes to the back of the queue either way,
    /// so the next newcomer is offered another.
    /// Offers `victim` to newcomer `peer`: at once when it proved nothing, else once it
    /// was quiet for [`HOST_QUIET_NS`].
    fn offer_host_peer(
        &mut self,
        peer: NetPeer,
        victim: NetPeer,
        full: Refusal,
    ) -> Admission<NetPeer> {
        self.host.push_back(victim);
        self.last_refusal = Some((peer, full));
        let quiet_ns = if self.proven.contains(&victim) {
            HOST_QUIET_NS
        } else {
            0
        };
        Admission::Replace {
            victim,
            quiet_ns,
            refusal: full,
        }
    }
}

/// Whether two senders count as one source for [`HOST_PER_ADDRESS`]: the same IPv4 address,
/// or IPv6 addresses in the same /64 (the smallest prefix a site is given: one host may
/// hold all of its 2^64 addresses), or the same Exanet endpoint.
fn same_address(a: NetAddr, b: NetAddr) -> bool {
    match (a, b) {
        (NetAddr::Udp(a), NetAddr::Udp(b)) => source(a.ip()) == source(b.ip()),
        (a, b) => a == b,
    }
}

/// The source an address belongs to (see [`same_address`]): an IPv4 address (also when
/// written as an IPv4-mapped IPv6 address) as itself, an IPv6 address as its /64.
fn source(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let seg = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(
                    seg[0], seg[1], seg[2], seg[3], 0, 0, 0, 0,
                ))
            }
        },
    }
}

/// The secret key of a service's cookies: 128 random bits from the kernel, drawn when the
/// service starts. A cookie is SipHash-2-4 under this key of the sender's address, job
/// key, epoch and the cookie period, each in a fixed little-endian layout (so the cookie
/// does not depend on how the standard library hashes a type): a keyed pseudo-random
/// function, as the SYN cookies of Linux use, that no sender can compute without the key.
#[derive(Clone)]
struct CookieKey([u8; 16]);

impl Default for CookieKey {
    fn default() -> CookieKey {
        let mut k = [0u8; 16];
        for half in k.chunks_exact_mut(8) {
            // The kernel's generator does not fail after boot; if it ever did, the clock's
            // nanoseconds and the process id still make a key no remote sender can guess
            // within the 16 s a cookie is valid.
            let r = gsas_sys::process::random_u64().unwrap_or_else(|_| {
                gsas_transport::poll::monotonic_ns() ^ u64::from(std::process::id()) << 40
            });
            half.copy_from_slice(&r.to_le_bytes());
        }
        CookieKey(k)
    }
}

impl std::fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

impl CookieKey {
    /// The cookie of `peer` with sender epoch `epoch` in period `period`; never 0.
    fn cookie(&self, peer: NetPeer, epoch: u64, period: u64) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.0);
        match peer.addr {
            NetAddr::Udp(a) => {
                h.write_u8(0);
                match a.ip() {
                    IpAddr::V4(v4) => h.write(&v4.to_ipv6_mapped().octets()),
                    IpAddr::V6(v6) => h.write(&v6.octets()),
                }
                h.write(&a.port().to_le_bytes());
            }
            NetAddr::Exanet(d) => {
                h.write_u8(1);
                h.write(&d.coord.to_le_bytes());
                h.write(&d.ep.to_le_bytes());
            }
        }
        h.write(&peer.key.to_le_bytes());
        h.write(&epoch.to_le_bytes());
        h.write(&period.to_le_bytes());
        h.finish() | 1
    }
}

impl PeerIndex<NetPeer> for JobIndex {
    /// Senders of keys no job here has must echo a cookie before they get a slot (only
    /// while host actions are served: otherwise they are refused anyway, statelessly).
    fn challenge(
        &mut self,
        peer: NetPeer,
        epoch: u64,
        cookie: Option<u64>,
        now_ns: u64,
    ) -> Option<u64> {
        if !self.host_open
            || self.jobs.contains_key(&peer.key)
            || self.ended_keys.contains_key(&peer.key)
        {
            return None;
        }
        let period = now_ns / COOKIE_PERIOD_NS;
        let valid = cookie.is_some_and(|c| {
            c == self.cookie(peer, epoch, period)
                || c == self.cookie(peer, epoch, period.wrapping_sub(1))
        });
        if valid {
            return None;
        }
        log::debug!(
            "challenge to {} (key {:#x}, epoch {epoch:#x}, cookie {}): no job here has the key",
            peer.addr,
            peer.key,
            if cookie.is_some() { "stale" } else { "none" }
        );
        Some(self.cookie(peer, epoch, period))
    }

    fn slot(&mut self, peer: NetPeer, capacity: usize) -> Option<usize> {
        if let Some(&s) = self.map.get(&peer) {
            return Some(s);
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.next < capacity => {
                self.next += 1;
                self.next - 1
            }
            None => return None,
        };
        self.map.insert(peer, slot);
        match self.jobs.get_mut(&peer.key) {
            Some(share) => share.used += 1,
            None => self.host.push_back(peer),
        }
        Some(slot)
    }

    fn find(&self, peer: NetPeer, _capacity: usize) -> Option<usize> {
        self.map.get(&peer).copied()
    }

    fn admit(&mut self, peer: NetPeer, capacity: usize) -> Admission<NetPeer> {
        let in_use = self.map.len();
        if let Some(share) = self.jobs.get(&peer.key).copied() {
            if share.used >= share.limit {
                return self.refuse(
                    peer,
                    figures(RefusalReason::JobFull, share.used, share.limit),
                );
            }
            if let Some(limit) = self.user_limit {
                let used = self.user_used(share.uid);
                if used >= limit {
                    return self.refuse(peer, figures(RefusalReason::UserFull, used, limit));
                }
            }
            if in_use >= capacity {
                return self.make_room(peer, figures(RefusalReason::TableFull, in_use, capacity));
            }
            return Admission::Admit;
        }
        if let Some(&why) = self.ended_keys.get(&peer.key) {
            return self.refuse(peer, figures(why, 0, 0));
        }
        if !self.host_open {
            return self.refuse(peer, figures(RefusalReason::UnknownJob, 0, 0));
        }
        // One source address holds at most its part of the host share: its oldest host
        // peer is offered for its newcomer.
        let mine = self.host_peers_of_address(peer);
        if mine >= HOST_PER_ADDRESS {
            let full = figures(RefusalReason::HostFull, mine, HOST_PER_ADDRESS);
            let same = |p: &NetPeer| same_address(p.addr, peer.addr);
            if let Some(victim) = self.take_unproven(same) {
                return self.offer_host_peer(peer, victim, full);
            }
            let Some(at) = self.host.iter().position(same) else {
                return self.refuse(peer, full);
            };
            let victim = self.host.remove(at).expect("found above");
            return self.offer_host_peer(peer, victim, full);
        }
        let full = figures(RefusalReason::HostFull, self.host.len(), HOST_SHARE);
        if self.host.len() < HOST_SHARE && in_use >= capacity && !self.lingering.is_empty() {
            return self.make_room(peer, full);
        }
        if self.host.len() >= HOST_SHARE || in_use >= capacity {
            // Offer the oldest host peer that proved nothing, else the oldest; if it is busy
            // it goes to the back, so the next newcomer is offered another.
            let Some(victim) = self
                .take_unproven(|_| true)
                .or_else(|| self.host.pop_front())
            else {
                return self.refuse(peer, figures(RefusalReason::TableFull, in_use, capacity));
            };
            return self.offer_host_peer(peer, victim, full);
        }
        Admission::Admit
    }

    /// Where users have shares (a shared daemon) and more than one job runs, one job, and
    /// the jobs of one user together, hold at most half of the pool: peers that never
    /// acknowledge (4 frames each) cannot take it all from the others.
    fn may_take_frame(&mut self, peer: NetPeer, pool: usize) -> bool {
        if self.user_limit.is_none() || self.jobs.len() < 2 {
            return true;
        }
        let Some(share) = self.jobs.get(&peer.key) else {
            return true;
        };
        let half = pool / 2;
        self.frames.get(&peer.key).copied().unwrap_or(0) < half
            && self.user_frames(share.uid) < half
    }

    fn frames_held(&mut self, peer: NetPeer, delta: isize) {
        // Counted only where shares are checked (a daemon): the embedded service's frames
        // pay nothing for it.
        if self.user_limit.is_none() {
            return;
        }
        let n = self.frames.entry(peer.key).or_insert(0);
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            self.frames.remove(&peer.key);
        }
    }

    fn release(&mut self, peer: NetPeer) {
        let Some(slot) = self.map.remove(&peer) else {
            return;
        };
        self.free.push(slot);
        match self.jobs.get_mut(&peer.key) {
            Some(share) => share.used = share.used.saturating_sub(1),
            None => {
                self.host.retain(|p| *p != peer);
                self.proven.remove(&peer);
                self.lingering.retain(|p| *p != peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gsas_transport::net::NetAddr;

    fn peer(port: u16, key: u64) -> NetPeer {
        NetPeer {
            addr: NetAddr::Udp(([127, 0, 0, 1], port).into()),
            key,
        }
    }

    /// Admits each of `peers` (each must be admitted) and gives it a slot.
    fn admit_all(ix: &mut JobIndex, peers: impl Iterator<Item = NetPeer>) {
        for p in peers {
            assert_eq!(ix.admit(p, 1024), Admission::Admit, "{p:?}");
            ix.slot(p, 1024).unwrap();
        }
    }

    /// A peer of key `key` on host `n` (its own IP address).
    fn host(n: u16, key: u64) -> NetPeer {
        NetPeer {
            addr: NetAddr::Udp(([10, 0, (n >> 8) as u8, n as u8], 7000).into()),
            key,
        }
    }

    #[test]
    fn unknown_senders_echo_a_cookie_before_they_get_a_slot() {
        let mut ix = JobIndex::default();
        let now = 5 * COOKIE_PERIOD_NS;
        // Without host actions, nobody is challenged (they are refused, statelessly).
        assert_eq!(ix.challenge(host(1, 77), 9, None, now), None);
        ix.serve_host_actions(true);
        let cookie = ix
            .challenge(host(1, 77), 9, None, now)
            .expect("a challenge");
        assert_ne!(cookie, 0);
        // The same sender, epoch and period get the same cookie; it is valid now and in
        // the next period, not after; another address, key or epoch does not share it.
        assert_eq!(ix.challenge(host(1, 77), 9, None, now + 1), Some(cookie));
        assert_eq!(ix.challenge(host(1, 77), 9, Some(cookie), now), None);
        assert_eq!(
            ix.challenge(host(1, 77), 9, Some(cookie), now + COOKIE_PERIOD_NS),
            None
        );
        assert!(
            ix.challenge(host(1, 77), 9, Some(cookie), now + 2 * COOKIE_PERIOD_NS)
                .is_some()
        );
        for (p, epoch) in [(host(2, 77), 9), (host(1, 78), 9), (host(1, 77), 10)] {
            let other = ix.challenge(p, epoch, Some(cookie), now);
            assert!(other.is_some_and(|c| c != cookie), "{p:?} {epoch}");
        }
        // A job's own key, and an ended job's, are not challenged.
        ix.admit_job(77, 4, 0);
        assert_eq!(ix.challenge(host(3, 77), 1, None, now), None);
        ix.end_job(77);
        assert_eq!(ix.challenge(host(3, 77), 1, None, now), None);
        // Another service has another secret.
        let other = JobIndex {
            host_open: true,
            ..JobIndex::default()
        };
        assert_ne!(
            other.cookie(host(1, 77), 9, 5),
            ix.cookie(host(1, 77), 9, 5)
        );
    }

    #[test]
    fn one_address_holds_at_most_its_part_of_the_host_share() {
        let mut ix = JobIndex::default();
        ix.serve_host_actions(true);
        let same = |port: u16, key: u64| peer(port, key);
        admit_all(
            &mut ix,
            (0..HOST_PER_ADDRESS as u16).map(|p| same(p, 500 + u64::from(p))),
        );
        // The next sender of that address is offered its own oldest, not anyone else's, at
        // once: none of them proved anything.
        let refusal = figures(RefusalReason::HostFull, HOST_PER_ADDRESS, HOST_PER_ADDRESS);
        assert_eq!(
            ix.admit(same(999, 9), 1024),
            Admission::Replace {
                victim: same(0, 500),
                quiet_ns: 0,
                refusal,
            }
        );
        // Senders whose FORK was accepted keep their slot while they talk: the oldest
        // unproven one is offered first, and a proven one only after its quiet time.
        for p in 1..HOST_PER_ADDRESS as u16 {
            ix.prove(same(p, 500 + u64::from(p)));
        }
        assert_eq!(
            ix.admit(same(999, 9), 1024),
            Admission::Replace {
                victim: same(0, 500),
                quiet_ns: 0,
                refusal,
            }
        );
        ix.prove(same(0, 500));
        assert_eq!(
            ix.admit(same(999, 9), 1024),
            Admission::Replace {
                victim: same(1, 501),
                quiet_ns: HOST_QUIET_NS,
                refusal,
            }
        );
        // Other addresses get the rest of the share.
        admit_all(
            &mut ix,
            (0..(HOST_SHARE - HOST_PER_ADDRESS) as u16).map(|n| host(n, 900 + u64::from(n))),
        );
        assert_eq!(ix.host_peers(), HOST_SHARE); // A peer that leaves takes its proof with it; a peer without a host slot gets none.
        ix.release(same(1, 501));
        assert!(!ix.proven.contains(&same(1, 501)));
        ix.prove(same(777, 1));
        assert!(!ix.proven.contains(&same(777, 1)));
    }

    #[test]
    fn an_ipv6_slash_64_is_one_source_for_the_host_share() {
        let mut ix = JobIndex::default();
        ix.serve_host_actions(true);
        // Every sender in 2001:db8:1:2::/64 has an address of its own; together they are
        // one source.
        let v6 = |net: u16, n: u16, key: u64| NetPeer {
            addr: NetAddr::Udp(
                (
                    std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, net, 0, 0, 0x10, n),
                    7000,
                )
                    .into(),
            ),
            key,
        };
        admit_all(
            &mut ix,
            (0..HOST_PER_ADDRESS as u16).map(|n| v6(2, n, 600 + u64::from(n))),
        );
        let refusal = figures(RefusalReason::HostFull, HOST_PER_ADDRESS, HOST_PER_ADDRESS);
        assert_eq!(
            ix.admit(v6(2, 999, 9), 1024),
            Admission::Replace {
                victim: v6(2, 0, 600),
                quiet_ns: 0,
                refusal,
            }
        );
        // The next /64 is another source; an IPv4 sender written as an IPv4-mapped IPv6
        // address is the same source as the plain IPv4 one.
        assert_eq!(ix.admit(v6(3, 0, 700), 1024), Admission::Admit);
        let mapped = NetPeer {
            addr: NetAddr::Udp(
                (std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(), 7001).into(),
            ),
            key: 800,
        };
        assert!(same_address(mapped.addr, host(1, 5).addr));
        assert!(!same_address(v6(2, 0, 1).addr, v6(3, 0, 1).addr));
    }

    #[test]
    fn cookies_are_siphash_of_a_fixed_layout_under_the_service_key() {
        let key = CookieKey(*b"0123456789abcdef");
        let p = host(1, 0x1122_3344_5566_7788);
        let mut h = SipHasher24::new_with_key(b"0123456789abcdef");
        h.write_u8(0);
        h.write(
            &std::net::Ipv4Addr::new(10, 0, 0, 1)
                .to_ipv6_mapped()
                .octets(),
        );
        h.write(&7000u16.to_le_bytes());
        h.write(&0x1122_3344_5566_7788u64.to_le_bytes());
        h.write(&9u64.to_le_bytes());
        h.write(&5u64.to_le_bytes());
        assert_eq!(key.cookie(p, 9, 5), h.finish() | 1);
        // Each input changes it; two services draw different keys.
        let c = key.cookie(p, 9, 5);
        for other in [
            key.cookie(host(2, p.key), 9, 5),
            key.cookie(NetPeer { key: 1, ..p }, 9, 5),
            key.cookie(p, 10, 5),
            key.cookie(p, 9, 6),
            CookieKey::default().cookie(p, 9, 5),
        ] {
            assert_ne!(other, c);
        }
        assert_ne!(CookieKey::default().0, CookieKey::default().0);
    }

    #[test]
    fn only_known_jobs_get_slots_within_their_share() {
        let mut ix = JobIndex::default();
        assert_eq!(
            ix.admit(peer(1, 7), 8),
            Admission::Refuse(figures(RefusalReason::UnknownJob, 0, 0))
        );
        ix.admit_job(7, 2, 0);
        for port in 1..=2 {
            assert_eq!(ix.admit(peer(port, 7), 8), Admission::Admit);
            assert!(ix.slot(peer(port, 7), 8).is_some());
        }
        assert_eq!(
            ix.admit(peer(3, 7), 8),
            Admission::Refuse(figures(RefusalReason::JobFull, 2, 2))
        );
        assert_eq!(ix.take_refusal().map(|(p, _)| p), Some(peer(3, 7)));
        // Freed slots are reused, and the job's share follows.
        ix.release(peer(1, 7));
        assert_eq!(ix.admit(peer(3, 7), 8), Admission::Admit);
        assert_eq!(ix.slot(peer(3, 7), 8), Some(0));
        let mut gone = ix.forget_job(7);
        gone.sort_by_key(|p| format!("{:?}", p.addr));
        assert_eq!(gone.len(), 2);
        for p in gone {
            ix.release(p);
        }
        assert_eq!(ix.len(), 0);
        assert!(!ix.jobs.contains_key(&7));
        // A reclaimed job's late frames are refused by name, not challenged (with host
        // actions served) or refused as a stranger's.
        assert_eq!(
            ix.admit(peer(1, 7), 8),
            Admission::Refuse(figures(RefusalReason::JobReclaimed, 0, 0))
        );
        ix.serve_host_actions(true);
        assert_eq!(ix.challenge(peer(1, 7), 9, None, 1), None);
        // The same key may start again (a job of that key starts afresh).
        ix.admit_job(7, 2, 0);
        assert_eq!(ix.admit(peer(1, 7), 8), Admission::Admit);
    }

    #[test]
    fn an_ended_job_lingers_gives_way_first_and_is_refused_by_name() {
        let mut ix = JobIndex::default();
        ix.admit_job(7, 3, 0);
        for port in 1..=2 {
            assert_eq!(ix.admit(peer(port, 7), 4), Admission::Admit);
            ix.slot(peer(port, 7), 4).unwrap();
        }
        let mut lingering = ix.end_job(7);
        lingering.sort_by_key(|p| format!("{:?}", p.addr));
        assert_eq!(lingering, vec![peer(1, 7), peer(2, 7)]);
        assert_eq!((ix.len(), ix.lingering_peers()), (2, 2));
        // A peer of the ended job without a slot is refused by name, FORK served or not.
        let ended = Admission::Refuse(figures(RefusalReason::JobEnded, 0, 0));
        assert_eq!(ix.admit(peer(3, 7), 4), ended);
        ix.serve_host_actions(true);
        assert_eq!(ix.admit(peer(3, 7), 4), ended);
        // A full table: a lingering peer gives way (always: quiet_ns 0), for a job's peer
        // and for a host peer alike.
        ix.admit_job(8, 10, 0);
        for port in 10..=11 {
            assert_eq!(ix.admit(peer(port, 8), 4), Admission::Admit);
            ix.slot(peer(port, 8), 4).unwrap();
        }
        let full = figures(RefusalReason::TableFull, 4, 4);
        let Admission::Replace {
            victim,
            quiet_ns: 0,
            refusal,
        } = ix.admit(peer(12, 8), 4)
        else {
            panic!("a lingering peer is offered")
        };
        assert!(lingering.contains(&victim) && refusal == full);
        ix.release(victim);
        assert_eq!(ix.lingering_peers(), 1);
        assert!(ix.slot(peer(12, 8), 4).is_some());
        assert!(matches!(
            ix.admit(peer(999, 55), 4),
            Admission::Replace { quiet_ns: 0, victim, .. } if lingering.contains(&victim)
        ));
        // Once no peer lingers, a full table refuses the job's newcomers as before.
        let last = ix.peers_of(7);
        assert_eq!(last.len(), 1);
        ix.release(last[0]);
        ix.slot(peer(13, 8), 4).unwrap();
        assert_eq!(
            ix.admit(peer(14, 8), 4),
            Admission::Refuse(figures(RefusalReason::TableFull, 4, 4))
        );
        // A new job of the same key is admitted again.
        ix.admit_job(7, 3, 0);
        assert!(!ix.ended_keys.contains_key(&7) && !ix.ended.contains(&7));
        assert_eq!(ix.admit(peer(3, 7), 8), Admission::Admit);
        // The remembered keys are bounded.
        for key in 1000..1000 + ENDED_KEYS as u64 + 5 {
            ix.admit_job(key, 1, 0);
            ix.end_job(key);
        }
        assert_eq!(ix.ended.len(), ENDED_KEYS);
        assert_eq!(ix.ended_keys.len(), ENDED_KEYS);
        assert!(!ix.ended_keys.contains_key(&1000));
    }

    #[test]
    fn a_job_and_a_user_hold_at_most_half_the_pool_when_others_run() {
        // Without per-user shares (an embedded service): no bound, nothing counted.
        let mut ix = JobIndex::default();
        ix.admit_job(1, 100, 1000);
        ix.admit_job(2, 100, 2000);
        ix.frames_held(peer(1, 1), 8);
        assert!(ix.may_take_frame(peer(1, 1), 8) && ix.frames.is_empty());
        // With shares, the only job has no bound either.
        let mut ix = JobIndex::default();
        ix.set_user_limit(Some(512));
        ix.admit_job(1, 100, 1000);
        for _ in 0..8 {
            assert!(ix.may_take_frame(peer(1, 1), 8), "the only job");
            ix.frames_held(peer(1, 1), 1);
        }
        ix.admit_job(2, 100, 2000);
        assert!(
            !ix.may_take_frame(peer(1, 1), 8),
            "8 of 8 held, another job runs"
        );
        ix.frames_held(peer(1, 1), -5);
        assert!(ix.may_take_frame(peer(1, 1), 8), "3 of 8");
        ix.frames_held(peer(2, 1), 1);
        assert!(!ix.may_take_frame(peer(3, 1), 8), "4 of 8: the job's half");
        // The other job has its own half, and a second job of the first user shares the
        // user's half.
        assert!(ix.may_take_frame(peer(9, 2), 8));
        ix.admit_job(3, 100, 1000);
        assert!(!ix.may_take_frame(peer(4, 3), 8), "the user holds 4 of 8");
        ix.frames_held(peer(1, 1), -4);
        assert!(ix.may_take_frame(peer(4, 3), 8));
        assert!(!ix.frames.contains_key(&1), "nothing held, nothing kept");
    }

    #[test]
    fn one_user_has_at_most_its_share_over_all_its_jobs() {
        let mut ix = JobIndex::default();
        ix.set_user_limit(Some(3));
        // User 1000 claims a huge job and a second one: together at most 3 peers.
        ix.admit_job(1, 2004, 1000);
        ix.admit_job(2, 10, 1000);
        ix.admit_job(3, 10, 2000);
        for port in 0..2 {
            assert_eq!(ix.admit(peer(port, 1), 64), Admission::Admit);
            ix.slot(peer(port, 1), 64).unwrap();
        }
        assert_eq!(ix.admit(peer(2, 2), 64), Admission::Admit);
        ix.slot(peer(2, 2), 64).unwrap();
        let full = Admission::Refuse(figures(RefusalReason::UserFull, 3, 3));
        assert_eq!(ix.admit(peer(3, 1), 64), full);
        assert_eq!(ix.admit(peer(3, 2), 64), full);
        // Another user's job is untouched by it.
        for port in 10..13 {
            assert_eq!(ix.admit(peer(port, 3), 64), Admission::Admit);
            ix.slot(peer(port, 3), 64).unwrap();
        }
        // A freed slot of the user is the user's again.
        ix.release(peer(0, 1));
        assert_eq!(ix.admit(peer(3, 2), 64), Admission::Admit);
    }

    #[test]
    fn the_table_bounds_every_job_and_host_peers_rotate() {
        let mut ix = JobIndex::default();
        ix.admit_job(1, 10, 0);
        for port in 0..3 {
            assert_eq!(ix.admit(peer(port, 1), 3), Admission::Admit);
            ix.slot(peer(port, 1), 3).unwrap();
        }
        assert_eq!(
            ix.admit(peer(9, 1), 3),
            Admission::Refuse(figures(RefusalReason::TableFull, 3, 3))
        );
        // Host peers: admitted while FORK is served, then the oldest is offered.
        let mut ix = JobIndex::default();
        ix.serve_host_actions(true);
        admit_all(
            &mut ix,
            (0..HOST_SHARE as u16).map(|p| host(p, 100 + u64::from(p))),
        );
        let refusal = figures(RefusalReason::HostFull, HOST_SHARE, HOST_SHARE);
        // Unproven host peers give way at once, the oldest first.
        assert_eq!(
            ix.admit(host(999, 5), 1024),
            Admission::Replace {
                victim: host(0, 100),
                quiet_ns: 0,
                refusal,
            }
        );
        // Proven ones (senders of accepted FORK requests) after their quiet time.
        for p in 0..HOST_SHARE as u16 {
            ix.prove(host(p, 100 + u64::from(p)));
        }
        let offer = |victim| Admission::Replace {
            victim,
            quiet_ns: HOST_QUIET_NS,
            refusal,
        };
        assert_eq!(ix.admit(host(999, 5), 1024), offer(host(1, 101)));
        assert_eq!(
            ix.admit(host(999, 5), 1024),
            offer(host(2, 102)),
            "a busy victim goes to the back"
        );
        // A job starting takes its host peers into its share (and their proof).
        ix.admit_job(103, 5, 0);
        assert_eq!(ix.host_peers(), HOST_SHARE - 1);
        assert_eq!(ix.jobs[&103].used, 1);
        assert!(!ix.proven.contains(&host(3, 103)));
    }
}
