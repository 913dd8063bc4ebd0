//! Fault injection for the NI model and the emulator (model section 13, "determinism").
//!
//! What it is: [`FaultPlan`], a set of rules the device engine consults at fixed points:
//! * **forced NACK** (`force_nack`): the next `count` mailbox deliveries (packetizer
//!   messages and `NOTIFY_REMOTE` notifications) to a node, or one endpoint of it, are
//!   refused with the given reason (`RING_FULL` by default, like a full ring);
//! * **translation fault** (`force_xlat_fault`): the next `count` remote RDMA accesses at a
//!   node/endpoint fail with `REMOTE_XLAT_FAULT`;
//! * **unreachable node** (`set_unreachable`): every frame to or from the node is dropped,
//!   so senders time out (`UNREACHABLE` after the engine's ack timeout);
//! * **added latency** (`set_latency`): every frame is held that long before delivery;
//! * **dropped frames** (`drop_frames`): the next `count` frames a node sends (or any node
//!   sends) vanish on the wire, so the sender's NI times out (`UNREACHABLE` after its ack
//!   timeout) unless a layer above resends;
//! * **corrupted frames** (`corrupt_frames`): one bit of each of the next `count` frames a
//!   node sends is flipped after the link checksum was computed, so the receiving link
//!   discards the frame (same outcome as a drop, counted separately by the emulator).
//!
//! What it is not: a random fault generator; every rule is explicit and counted, so tests
//! stay deterministic.
//!
//! Thread safety: `Sync`. The emulator's control thread changes rules while the fabric thread
//! consults them; an atomic flag keeps the no-fault path lock-free.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone)]
struct Rule {
    coord: u32,
    ep: Option<u16>,
    reason: u8,
    remaining: u32,
}

#[derive(Debug, Default)]
struct Rules {
    nacks: Vec<Rule>,
    xlat: Vec<Rule>,
    unreachable: Vec<u32>,
    drops: Vec<Rule>,
    corrupts: Vec<Rule>,
}

/// Coordinate of a frame rule that matches every sending node.
pub const ANY_NODE: u32 = u32::MAX;

/// The fault rules in force (see the module docs).
#[derive(Debug, Default)]
pub struct FaultPlan {
    rules: Mutex<Rules>,
    active: AtomicBool,
    latency_ns: AtomicU64,
}

impl FaultPlan {
    /// No faults.
    pub fn new() -> Self {
        FaultPlan::default()
    }

    fn edit(&self, f: impl FnOnce(&mut Rules)) {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut rules);
        let any = !rules.nacks.is_empty()
            || !rules.xlat.is_empty()
            || !rules.unreachable.is_empty()
            || !rules.drops.is_empty()
            || !rules.corrupts.is_empty();
        self.active.store(any, Ordering::Release);
    }

    fn take(
        &self,
        pick: impl FnOnce(&mut Rules) -> &mut Vec<Rule>,
        coord: u32,
        ep: u16,
    ) -> Option<u8> {
        if !self.active.load(Ordering::Acquire) {
            return None;
        }
        let mut out = None;
        self.edit(|rules| {
            let list = pick(rules);
            if let Some(i) = list.iter().position(|r| {
                (r.coord == coord || r.coord == ANY_NODE) && r.ep.is_none_or(|e| e == ep)
            }) {
                out = Some(list[i].reason);
                list[i].remaining -= 1;
                if list[i].remaining == 0 {
                    list.remove(i);
                }
            }
        });
        out
    }

    /// Refuses the next `count` mailbox deliveries to `coord` (endpoint `ep`, or any) with
    /// NACK `reason` (see [`crate::regs::nack`]).
    pub fn force_nack(&self, coord: u32, ep: Option<u16>, reason: u8, count: u32) {
        if count > 0 {
            self.edit(|r| {
                r.nacks.push(Rule {
                    coord,
                    ep,
                    reason,
                    remaining: count,
                })
            });
        }
    }

    /// Fails the next `count` remote RDMA accesses at `coord` (endpoint `ep`, or any) with a
    /// translation fault.
    pub fn force_xlat_fault(&self, coord: u32, ep: Option<u16>, count: u32) {
        if count > 0 {
            self.edit(|r| {
                r.xlat.push(Rule {
                    coord,
                    ep,
                    reason: 0,
                    remaining: count,
                })
            });
        }
    }

    /// Drops the next `count` frames sent by the node at `coord` ([`ANY_NODE`]: by any node).
    pub fn drop_frames(&self, coord: u32, count: u32) {
        if count > 0 {
            self.edit(|r| {
                r.drops.push(Rule {
                    coord,
                    ep: None,
                    reason: 0,
                    remaining: count,
                })
            });
        }
    }

    /// Corrupts the next `count` frames sent by the node at `coord` ([`ANY_NODE`]: by any
    /// node).
    pub fn corrupt_frames(&self, coord: u32, count: u32) {
        if count > 0 {
            self.edit(|r| {
                r.corrupts.push(Rule {
                    coord,
                    ep: None,
                    reason: 0,
                    remaining: count,
                })
            });
        }
    }

    /// Consumes one frame-drop rule for a frame sent by `src_coord`.
    pub fn take_drop(&self, src_coord: u32) -> bool {
        self.take(|r| &mut r.drops, src_coord, 0).is_some()
    }

    /// Consumes one corruption rule for a frame sent by `src_coord`.
    pub fn take_corrupt(&self, src_coord: u32) -> bool {
        self.take(|r| &mut r.corrupts, src_coord, 0).is_some()
    }

    /// Makes `coord` unreachable (or reachable again).
    pub fn set_unreachable(&self, coord: u32, unreachable: bool) {
        self.edit(|r| {
            r.unreachable.retain(|c| *c != coord);
            if unreachable {
                r.unreachable.push(coord);
            }
        });
    }

    /// Holds every frame for `latency` before delivery.
    pub fn set_latency(&self, latency: Duration) {
        self.latency_ns.store(
            latency.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    /// Removes every rule and the latency.
    pub fn clear(&self) {
        self.edit(|r| *r = Rules::default());
        self.latency_ns.store(0, Ordering::Relaxed);
    }

    /// Consumes one forced NACK for a delivery to `(coord, ep)`, returning its reason.
    pub fn take_nack(&self, coord: u32, ep: u16) -> Option<u8> {
        self.take(|r| &mut r.nacks, coord, ep)
    }

    /// Consumes one forced translation fault for an access at `(coord, ep)`.
    pub fn take_xlat_fault(&self, coord: u32, ep: u16) -> bool {
        self.take(|r| &mut r.xlat, coord, ep).is_some()
    }

    /// Whether frames to or from `coord` are dropped.
    pub fn is_unreachable(&self, coord: u32) -> bool {
        if !self.active.load(Ordering::Acquire) {
            return false;
        }
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules.unreachable.contains(&coord)
    }

    /// The added latency in nanoseconds.
    pub fn latency_ns(&self) -> u64 {
        self.latency_ns.load(Ordering::Relaxed)
    }

    /// A one-line description of the rules in force.
    pub fn describe(&self) -> String {
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let fmt = |l: &[Rule]| {
            l.iter()
                .map(|r| match r.ep {
                    None if r.coord == ANY_NODE => format!("*x{}", r.remaining),
                    Some(ep) => format!("{:#x}/{ep}x{}", r.coord, r.remaining),
                    None => format!("{:#x}/*x{}", r.coord, r.remaining),
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        format!(
            "nack=[{}] xlat=[{}] drop=[{}] corrupt=[{}] unreachable=[{}] latency_us={}",
            fmt(&rules.nacks),
            fmt(&rules.xlat),
            fmt(&rules.drops),
            fmt(&rules.corrupts),
            rules
                .unreachable
                .iter()
                .map(|c| format!("{c:#x}"))
                .collect::<Vec<_>>()
                .join(","),
            self.latency_ns() / 1000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_counted_and_targeted() {
        let f = FaultPlan::new();
        assert_eq!(f.take_nack(1, 0), None);
        f.force_nack(0x1000, Some(2), 1, 2);
        assert_eq!(f.take_nack(0x1000, 1), None);
        assert_eq!(f.take_nack(0x1000, 2), Some(1));
        assert_eq!(f.take_nack(0x1000, 2), Some(1));
        assert_eq!(f.take_nack(0x1000, 2), None);
        f.force_xlat_fault(0x2000, None, 1);
        assert!(f.take_xlat_fault(0x2000, 9));
        assert!(!f.take_xlat_fault(0x2000, 9));
        f.set_unreachable(0x3000, true);
        assert!(f.is_unreachable(0x3000) && !f.is_unreachable(0x2000));
        f.set_unreachable(0x3000, false);
        assert!(!f.is_unreachable(0x3000));
        f.drop_frames(0x1000, 2);
        f.corrupt_frames(ANY_NODE, 1);
        assert!(!f.take_drop(0x2000));
        assert!(f.take_drop(0x1000) && f.take_drop(0x1000) && !f.take_drop(0x1000));
        assert!(f.take_corrupt(0x2000) && !f.take_corrupt(0x1000));
        f.set_latency(Duration::from_micros(5));
        assert_eq!(f.latency_ns(), 5000);
        f.clear();
        assert_eq!(f.latency_ns(), 0);
    }
}
