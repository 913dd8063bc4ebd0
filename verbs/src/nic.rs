//! The device: selection of device, port and GID, protection domain, memory registration.

use std::sync::Arc;

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{AtomicCapability, DeviceContext, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use crate::{Endpoint, Error};

/// Which device, port and GID to use (the config keys `verbs_device`, `verbs_port`,
/// `verbs_gid_index` of the design in `docs/verbs.md`).
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Device name; None: the first device with an active port.
    pub device: Option<String>,
    /// Port; None: the device's first active port.
    pub port: Option<u8>,
    /// GID index used as the source GID (RoCE: a RoCEv2 GID's index).
    pub gid_index: u8,
}

/// What the NIC can do for atomics (`ibv_device_attr.atomic_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicCap {
    /// No NIC atomics.
    None,
    /// Atomic against other NIC atomics of this HCA only, not against CPU atomics.
    Hca,
    /// Atomic against CPU atomics too.
    Global,
}

/// The chosen device's properties the transport decides with.
#[derive(Clone, Debug)]
pub struct Caps {
    /// The device's name (`ibv_get_device_name`).
    pub device: String,
    /// The port used.
    pub port: u8,
    /// The port's LID.
    pub lid: u16,
    /// The GID used.
    pub gid: [u8; 16],
    /// The index of that GID in the port's table.
    pub gid_index: u8,
    /// What the device's atomics are atomic against.
    pub atomics: AtomicCap,
    /// Largest work request count per queue (`max_qp_wr`).
    pub max_qp_wr: u32,
}

/// An opened device with one protection domain.
pub struct Nic {
    pub(crate) pd: Arc<ProtectionDomain>,
    pub(crate) ctx: Arc<DeviceContext>,
    caps: Caps,
}

impl Nic {
    /// Opens the device of `sel` (see [`Selection`]).
    pub fn open(sel: &Selection) -> Result<Nic, Error> {
        let list = DeviceList::new().map_err(|e| {
            Error::NoDevice(format!(
                "cannot list devices (is rdma-core installed?): {e}"
            ))
        })?;
        let mut tried = Vec::new();
        for dev in list.iter() {
            let name = dev.name();
            if sel.device.as_ref().is_some_and(|want| *want != name) {
                continue;
            }
            tried.push(name.clone());
            let ctx = dev
                .open()
                .map_err(|e| Error::Verbs("ibv_open_device", std::io::Error::other(e)))?;
            let attr = ctx
                .query_device()
                .map_err(|e| Error::Verbs("ibv_query_device", std::io::Error::other(e)))?;
            let active = |p: u8| {
                ctx.query_port(p)
                    .is_ok_and(|a| a.port_state() == PortState::Active)
            };
            let port = match sel.port {
                Some(p) if active(p) => p,
                Some(p) => {
                    return Err(Error::NoActivePort(format!(
                        "port {p} of {name} is not active"
                    )));
                }
                None => match (1..=attr.phys_port_cnt()).find(|&p| active(p)) {
                    Some(p) => p,
                    None if sel.device.is_some() => {
                        return Err(Error::NoActivePort(format!("{name} has no active port")));
                    }
                    None => continue,
                },
            };
            let port_attr = ctx
                .query_port(port)
                .map_err(|e| Error::Verbs("ibv_query_port", std::io::Error::other(e)))?;
            let gid = ctx.query_gid(port, sel.gid_index.into()).map_err(|e| {
                Error::BadGid(format!(
                    "GID index {} of {name} port {port}: {e}",
                    sel.gid_index
                ))
            })?;
            let atomics = match attr.atomic_capability() {
                AtomicCapability::Global => AtomicCap::Global,
                AtomicCapability::HostChannelAdapter => AtomicCap::Hca,
                _ => AtomicCap::None,
            };
            let pd = ctx
                .alloc_pd()
                .map_err(|e| Error::Verbs("ibv_alloc_pd", std::io::Error::other(e)))?;
            let caps = Caps {
                device: name,
                port,
                lid: port_attr.lid(),
                gid: std::net::Ipv6Addr::from(gid).octets(),
                gid_index: sel.gid_index,
                atomics,
                max_qp_wr: attr.max_qp_wr().max(1) as u32,
            };
            return Ok(Nic { pd, ctx, caps });
        }
        Err(match &sel.device {
            Some(d) if tried.is_empty() => Error::NoDevice(format!("no device named {d}")),
            _ if tried.is_empty() => Error::NoDevice("no RDMA device found".into()),
            _ => Error::NoActivePort(format!("no active port on {}", tried.join(", "))),
        })
    }

    /// The chosen device, port and capabilities.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Registers `[addr, addr + len)` for local use and remote READ, WRITE and atomics.
    ///
    /// # Safety
    ///
    /// The memory must stay valid until the [`Region`] and every request using it are gone:
    /// the NIC reads and writes it without the borrow checker's knowledge.
    pub unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<Region, Error> {
        let access = AccessFlags::LocalWrite
            | AccessFlags::RemoteWrite
            | AccessFlags::RemoteRead
            | AccessFlags::RemoteAtomic;
        // SAFETY: the caller keeps the memory valid (this function's contract).
        let mr = unsafe { self.pd.reg_mr(addr as usize, len, access) }
            .map_err(|e| Error::Verbs("ibv_reg_mr", std::io::Error::other(e)))?;
        Ok(Region {
            mr,
            addr: addr as u64,
            len: len as u64,
        })
    }

    /// A reliable-connected endpoint towards `peer` (a name for messages) with a send queue
    /// of `depth` requests.
    pub fn endpoint(&self, peer: &str, depth: u32) -> Result<Endpoint, Error> {
        Endpoint::new(self, peer, depth.min(self.caps.max_qp_wr))
    }
}

/// Registered memory.
pub struct Region {
    mr: Arc<MemoryRegion>,
    addr: u64,
    len: u64,
}

impl Region {
    /// The local key, for requests that read or write this memory locally.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// What a peer needs to reach this memory.
    pub fn remote_key(&self) -> RemoteKey {
        RemoteKey {
            addr: self.addr,
            len: self.len,
            rkey: self.mr.rkey(),
        }
    }
}

/// A peer's registered memory: address, length and rkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteKey {
    /// The region's start address in the owner's address space.
    pub addr: u64,
    /// The region's length in bytes.
    pub len: u64,
    /// The key a remote access presents.
    pub rkey: u32,
}

impl RemoteKey {
    /// The record a bootstrap publishes (`addr:len:rkey`, hexadecimal).
    pub fn encode(&self) -> String {
        format!("{:x}:{:x}:{:x}", self.addr, self.len, self.rkey)
    }

    /// Parses [`RemoteKey::encode`]'s record.
    pub fn decode(s: &str) -> Result<RemoteKey, Error> {
        let bad = || Error::BadRecord(format!("remote key '{s}' (expected addr:len:rkey)"));
        let w: Vec<u64> = s
            .split(':')
            .map(|w| u64::from_str_radix(w, 16).map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        match w[..] {
            [addr, len, rkey] => Ok(RemoteKey {
                addr,
                len,
                rkey: u32::try_from(rkey).map_err(|_| bad())?,
            }),
            _ => Err(bad()),
        }
    }
}
