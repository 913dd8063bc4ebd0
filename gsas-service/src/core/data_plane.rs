//! The data plane: one pass that serves the network and every ring through gsas-core's
//! serve loop, and the host actions (ping, remote FORK) that arrive over UDP.

use gsas_core::reliable::PeerEvent;
use gsas_core::service::{Served, refusal, refuse_host_actions};
use gsas_core::transport::Transport;
use gsas_core::wire::{
    ControlCode, ErrorCode, PacketType, Request, RequestRepr, emit_reply_header,
};
use gsas_transport::net::{NetAddr, NetPeer};
use gsas_transport::poll::monotonic_ns;
use gsas_transport::shmring::RingPeer;

use super::{
    BUDGET, Core, Counters, ForkHandler, ForkProgress, PEER_KEPT_REQUESTS_CAP, PEER_QUEUE_CAP,
    ServiceError,
};

impl Core {
    /// Drives timers and serves UDP and every ring once. Returns whether anything moved.
    pub(super) fn step(&mut self) -> Result<bool, ServiceError> {
        let net_err = |source| ServiceError::Transport {
            context: "network transport of the service".into(),
            source,
        };
        self.net.poll(monotonic_ns()).map_err(net_err)?;
        let mut busy = false;
        {
            let Core {
                net,
                net_pending,
                service,
                scratch,
                counters,
                fork,
                proven,
                ..
            } = self;
            let served = service
                .serve_port(
                    net,
                    net_pending,
                    scratch,
                    BUDGET,
                    |p: &NetPeer| p.key,
                    |peer: NetPeer, repr: RequestRepr<'_>, out: &mut [u8]| {
                        udp_host_action(fork, peer, repr, out, counters, proven)
                    },
                )
                .map_err(net_err)?;
            count_served(counters, served);
            busy |= served.moved > 0;
        }
        for peer in self.proven.drain(..) {
            self.net.index_mut().prove(peer);
        }
        self.pace_net_peers();
        let mut broken = Vec::new();
        for (i, port) in self.rings.iter_mut().enumerate() {
            let key = port.key;
            let served = self.service.serve_port(
                &mut port.ring,
                &mut port.pending,
                &mut self.scratch,
                BUDGET,
                |_: &RingPeer| key,
                refuse_host_actions,
            );
            match served {
                Ok(served) => {
                    count_served(&mut self.counters, served);
                    self.counters.ring_requests += served.moved as u64;
                    busy |= served.moved > 0;
                }
                Err(e) => {
                    log::warn!("ring of PE {} failed ({e}); no longer served", port.pe);
                    broken.push(i);
                }
            }
        }
        for i in broken.into_iter().rev() {
            self.rings.remove(i);
        }
        self.net.flush().map_err(net_err)?;
        self.log_refusals();
        while let Some(ev) = self.net.next_event() {
            match ev {
                PeerEvent::Unreachable(p) => {
                    log::info!(
                        "{}: peer {} (job key {:#x}) stopped answering; its unacknowledged replies are dropped",
                        self.cfg.name,
                        p.addr,
                        p.key
                    );
                    // A service only answers: if the peer speaks again, answer it (its
                    // receive state stays, so its requests are still executed once); if it
                    // does not, its slot is freed when it ends or falls silent.
                    let _ = self.net.reset_peer(p);
                }
                PeerEvent::Restarted(p) => {
                    log::debug!("{}: peer {} restarted", self.cfg.name, p.addr)
                }
                PeerEvent::Refused(p, r) => log::warn!(
                    "{}: peer {} (job key {:#x}) refused us: {r}",
                    self.cfg.name,
                    p.addr,
                    p.key
                ),
            }
        }
        Ok(busy)
    }
}

impl Core {
    /// Stops taking new frames from network peers with [`PEER_QUEUE_CAP`] replies or more
    /// waiting (they do not acknowledge), or [`PEER_KEPT_REQUESTS_CAP`] BULK_READ requests
    /// kept, and takes them again from those below.
    fn pace_net_peers(&mut self) {
        if self.net_pending.is_empty() && self.paused.is_empty() {
            return;
        }
        let over = self
            .net_pending
            .peers_over(PEER_QUEUE_CAP, PEER_KEPT_REQUESTS_CAP);
        for p in &self.paused {
            if !over.contains(p) {
                self.net.pause_receive(*p, false);
            }
        }
        for p in &over {
            if !self.paused.contains(p) && self.net.pause_receive(*p, true) {
                self.counters.peers_paused += 1;
                log::debug!(
                    "{}: peer {} (job key {:#x}) does not acknowledge; {} replies wait: its new requests wait too",
                    self.cfg.name,
                    p.addr,
                    p.key,
                    PEER_QUEUE_CAP
                );
            }
        }
        self.paused = over;
    }
}

/// Adds what one [`AtomicService::serve_port`] call did to the service's counters.
pub(super) fn count_served(counters: &mut Counters, served: Served) {
    counters.replies_deferred += served.deferred;
    counters.replies_dropped += served.dropped;
    if served.scratch_short > 0 {
        log::error!(
            "{} requests unanswered: their reply exceeds the reply buffer",
            served.scratch_short
        );
    }
}

/// Host actions arriving over UDP: Ping is answered, FORK goes to the hook (or is
/// refused), everything else is refused. A sender whose FORK request was accepted is
/// pushed to `proven` (its host slot is then kept as a job's, see `peers`).
pub(super) fn udp_host_action(
    fork: &mut Option<Box<dyn ForkHandler>>,
    peer: NetPeer,
    repr: RequestRepr<'_>,
    out: &mut [u8],
    counters: &mut Counters,
    proven: &mut Vec<NetPeer>,
) -> usize {
    match repr.body {
        Request::Control {
            code: ControlCode::Ping,
            ..
        } => {
            emit_reply_header(out, PacketType::Ack, 0, 0, repr.token);
            gsas_core::wire::REPLY_HEADER_LEN
        }
        Request::Fork { frag, data } => match (fork, peer.addr) {
            (Some(handler), NetAddr::Udp(from)) => match handler.fork(from, peer.key, frag, data) {
                Ok(progress) => {
                    if progress == ForkProgress::Accepted {
                        proven.push(peer);
                    }
                    emit_reply_header(out, PacketType::Ack, 0, 0, repr.token);
                    gsas_core::wire::REPLY_HEADER_LEN
                }
                Err(code) => {
                    // The handler logs its refusals with the reason.
                    counters.fork_refused += 1;
                    refusal(out, repr.token, code)
                }
            },
            (Some(_), NetAddr::Exanet(from)) => {
                counters.fork_refused += 1;
                log::warn!("FORK request from exanet {from} refused: remote FORK comes over UDP");
                refusal(out, repr.token, ErrorCode::NotSupported)
            }
            (None, _) => {
                counters.fork_refused += 1;
                // Every refusal is counted; the log stays readable under a flood.
                if counters.fork_refused <= 32 || counters.fork_refused.is_power_of_two() {
                    log::warn!(
                        "FORK request from {} refused: remote FORK is not enabled on this service (defaults.fork_allowed) ({} refused so far)",
                        peer.addr,
                        counters.fork_refused
                    );
                }
                refusal(out, repr.token, ErrorCode::NotSupported)
            }
        },
        _ => refusal(out, repr.token, ErrorCode::NotSupported),
    }
}
