//! Shared memory: memfd segments, descriptor passing, the data-segment remap, and the
//! service engine's memory access over mapped segments.
//!
//! What it is: the pieces the runtime builds the node's shared memory from, as settled in
//! the runtime design ("Segments"):
//!
//! * [`Segment`]: one anonymous shared-memory file (`memfd_create`, `MFD_CLOEXEC`, sealed
//!   against shrinking) and its read-write shared mapping; `Drop` unmaps and closes.
//!   Nothing is ever created in `/dev/shm`: when the last process holding a descriptor or a
//!   mapping exits, the memory is gone.
//! * [`send_fds`] / [`recv_fds`]: a message and up to [`MAX_FDS`] descriptors over a Unix
//!   `SOCK_SEQPACKET` socket (`SCM_RIGHTS`), bounded in time; [`seqpacket_pair`].
//! * [`DataSegment`]: the executable's writable data (C globals) found with
//!   `dl_iterate_phdr` and remapped onto a memfd, so that globals are symmetric and
//!   reachable by the service and by same-node PEs.
//! * [`ShmMemory`]: gsas-core's [`Memory`](gsas_core::service::Memory) over mapped
//!   segments, with CPU atomics of the requested width.
//!
//! Segment ids by convention (the `segment` field of a global address): 0 symmetric heap,
//! 1 data segment, 2 runtime sync area, 3 the PE-service request ring
//! ([`ShmRing`](crate::shmring::ShmRing)).
//!
//! What it is not: the policy of who creates which segment for whom, the control protocol,
//! or the symmetric allocator (those are the service's and node client's).
//!
//! Thread-safety: [`Segment`] and [`ShmMemory`] are `Send + Sync`; the free functions are
//! stateless. Memory inside a segment is shared with other processes and is only accessed
//! through raw copies and atomics.
//!
//! ```
//! use std::sync::Arc;
//! use gsas_transport::shm::{Segment, ShmMemory};
//! use gsas_core::service::{Segment as ServiceSegment, Service};
//! use gsas_core::wire::SenderId;
//!
//! // The service creates a PE's heap, maps it, and serves requests on it.
//! let heap = Arc::new(Segment::create("job1-pe0-heap", 1 << 20)?);
//! let memory = ShmMemory::new();
//! memory.insert(heap.clone())?;
//! let mut service: Service<ShmMemory, 16> = Service::new(SenderId::new(1).unwrap(), memory);
//! service
//!     .register(ServiceSegment { job: 1, key: 0xfeed, pe: 0, segment: 0, base: heap.addr(), len: 1 << 20 })
//!     .unwrap();
//! // The PE maps the same file from the descriptor the service passes it.
//! let pe_view = Segment::map(heap.try_clone_fd()?, "heap (PE side)")?;
//! assert_eq!(pe_view.len(), heap.len());
//! # Ok::<(), gsas_transport::shm::ShmError>(())
//! ```

mod data;
mod error;
mod fdpass;
mod memory;
mod segment;

pub use data::{DataSegment, page_size};
pub use error::ShmError;
pub use fdpass::{MAX_FDS, recv_fds, send_fds, seqpacket_pair};
pub use memory::ShmMemory;
pub use segment::{Segment, View, mapping_alignment};
