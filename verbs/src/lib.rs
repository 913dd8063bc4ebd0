//! verbs: the InfiniBand / RoCE driver of gsas.
//!
//! What it is: the layer the verbs transport stands on, as the `exanet` crate is for Exanet:
//! choosing the device, port and GID ([`Selection`], [`Nic::open`]), registering memory
//! ([`Nic::register`], [`Region`], [`RemoteKey`]), reliable-connected endpoints with the
//! addresses a bootstrap exchanges ([`Endpoint`], [`Address`]), and on them one-sided RDMA
//! WRITE (inline when small) and READ, NIC fetch-add and compare-swap, fences, selective
//! signalling, back-pressure ([`Error::WouldBlock`]) and `quiet`; and the bootstrap that
//! connects every pair of ranks through a key-value exchange such as PMI
//! ([`mesh::connect_all`]). Setup goes through the
//! `sideway` binding; posting and polling go through `rdma-mummy-sys` on the raw handles
//! with work requests built on the stack (no allocation per operation).
//!
//! What it is not: a gsas transport (no wire protocol, no PMI; the runtime glue is to come,
//! see `docs/verbs.md`), and not tied to hardware: tests run it on the software device of
//! `verbs-emu`.
//!
//! Thread safety: a [`Nic`] is shared by reference; an [`Endpoint`] is used by one thread
//! at a time (`&mut self`), like a verbs queue pair without locks of its own.
//!
//! ```no_run
//! use verbs::{Nic, Selection, Timing};
//!
//! let nic = Nic::open(&Selection::default())?; // first device with an active port
//! let mut buf = vec![0u8; 4096];
//! // SAFETY: `buf` outlives the registration and every request on it.
//! let region = unsafe { nic.register(buf.as_mut_ptr(), buf.len()) }?;
//! let mut ep = nic.endpoint("node 1", 128)?;
//! let me = ep.address(); // publish `me.encode()` and `region.remote_key().encode()`
//! # let (peer, target) = (me, region.remote_key());
//! ep.connect(&peer, Timing::default())?;
//! ep.put(b"hello", None, target, 0)?; // inline: no registration needed
//! ep.quiet()?; // the device's verdict: done, or an error once the peer stops answering
//! # Ok::<(), verbs::Error>(())
//! ```

mod endpoint;
pub mod mesh;
mod nic;

pub use endpoint::{Address, Endpoint, Op, Timing};
pub use nic::{AtomicCap, Caps, Nic, Region, RemoteKey, Selection};

use std::fmt;

/// What can go wrong, with enough context to name the node and the operation.
#[derive(Debug)]
pub enum Error {
    /// No device (or none by that name) is present.
    NoDevice(String),
    /// The device has no active port, or the chosen port is not active.
    NoActivePort(String),
    /// The GID index does not exist on the port.
    BadGid(String),
    /// A verb failed (the call and its error).
    Verbs(&'static str, std::io::Error),
    /// The send queue is full: wait for room ([`Endpoint::wait_room`]) or poll
    /// ([`Endpoint::progress`]), and retry.
    WouldBlock,
    /// Data above the inline limit without a registered source.
    NotRegistered {
        /// The length of the data.
        len: usize,
        /// The queue pair's inline limit.
        max_inline: u32,
    },
    /// An address or key record that does not parse.
    BadRecord(String),
    /// A request completed with an error: the queue pair is now unusable.
    Completion {
        /// The peer the request went to.
        peer: String,
        /// What the request was.
        op: Op,
        /// The completion status the device reported.
        status: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDevice(d) => write!(f, "verbs: {d}"),
            Error::NoActivePort(d) => write!(f, "verbs: {d}"),
            Error::BadGid(d) => write!(f, "verbs: {d}"),
            Error::Verbs(call, e) => write!(f, "verbs: {call} failed: {e}"),
            Error::WouldBlock => write!(f, "verbs: send queue full"),
            Error::NotRegistered { len, max_inline } => write!(
                f,
                "verbs: {len} bytes from unregistered memory (inline limit {max_inline})"
            ),
            Error::BadRecord(r) => write!(f, "verbs: bad record: {r}"),
            Error::Completion { peer, op, status } => {
                write!(f, "verbs: {op} to {peer} failed: {status}")
            }
        }
    }
}

impl std::error::Error for Error {}
