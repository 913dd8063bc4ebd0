//! The verbs path of the node client: RMA to PEs of other `transport = "verbs"` nodes as
//! one-sided RDMA on reliable-connected queue pairs (the `verbs` driver), with no CPU of
//! the target involved.
//!
//! **What it is.** [`VerbsPath::connect`] is the PE's verbs bootstrap: it opens the node's
//! device (cluster keys `verbs_device`, `verbs_port`, `verbs_gid_index`; defaults: the first
//! device with an active port, its first active port, GID index 0), registers the PE's own
//! heap, sync and data segments (its mappings of them) and a bounce pool, and connects one
//! queue pair to every PE of another node through `verbs::mesh::connect_all`, exchanging
//! addresses and keys over the node's PMI client. Then:
//!
//! * **put** = RDMA WRITE straight into the target's segment: inline up to the device's
//!   limit (the source is reusable at once), from the registered segment when the source
//!   lies in one (a blocking put then waits for the WRITE's completion, as the source must
//!   be reusable when it returns; an nbi put does not), else copied into the bounce pool;
//! * **get** = RDMA READ into the destination when it is registered, else into the bounce
//!   pool and copied out (at once for a blocking get, at `quiet` for `get_nbi`); a
//!   blocking get's READ is signalled and waited for;
//! * **quiet** = every endpoint's quiet (a signalled 0-byte WRITE closes a run of
//!   unsignalled requests), then the bounce pool's pending copies; **fence** = the next
//!   request on each queue pair carries `IBV_SEND_FENCE` (after READs), and operations that
//!   leave through the atomic service wait for the earlier RDMA to complete;
//! * a put-with-signal's SET is an 8-byte inline WRITE on the same queue pair after the
//!   data (in order on an RC queue pair), or a NIC atomic when `u64` is offloaded;
//!
//! A full send queue is back-pressure: wait for room (the driver's `wait_room`) and retry.
//! Every wait ends with the device's verdict: a request completes, or fails once its peer
//! stopped answering for the queue pair's retry budget, and a request that completes with
//! an error ends the operation (and so, in the OpenSHMEM layer, the job) with the driver's
//! message naming the peer PE, its node and the operation, prefixed with this PE and node.
//! The queue pairs' timeout and retry count are derived from the deadline so that a dead
//! peer is reported within it ([`timing`]); the path keeps no clock of its own on top
//! (one reliability layer: the queue pair's).
//!
//! * **atomics** on the 64-bit integer types are NIC atomics (fetch-add, compare-swap, and
//!   compare-swap loops for the rest) when every PE's device reports `IBV_ATOMIC_GLOB`
//!   ([`VerbsPath::offloads`]); every other atomic goes through the atomic service, so that
//!   one datatype never mixes the paths (`docs/verbs.md`, "Atomics").
//!
//! **What it is not.** Same-node PEs: shared memory.
//!
//! **Thread safety.** A [`VerbsPath`] lives in the node's `Remote`, behind its mutex.
//!
//! Without the cargo feature `verbs`, [`VerbsPath`] is an empty type and `connect` refuses
//! with a message: the build does not link the binding (`rdma-mummy-sys`, which loads
//! `libibverbs.so.1` in a constructor of every process that links it).

use std::time::Duration;

use super::NodeError;

/// What a PE's verbs bootstrap needs.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) struct Setup<'a> {
    /// This PE.
    pub(crate) rank: u32,
    /// The node of every PE.
    pub(crate) node_of: &'a [u16],
    /// The device (`verbs_device`); None: the first with an active port.
    pub(crate) device: Option<String>,
    /// The port (`verbs_port`); None: the device's first active one.
    pub(crate) port: Option<u8>,
    /// The source GID index (`verbs_gid_index`).
    pub(crate) gid_index: u8,
    /// This PE's heap, data and sync mappings by segment id (base, length); None: absent.
    pub(crate) segments: [Option<(usize, u64)>; 3],
    /// The reliability deadline: the queue pairs' timing ([`timing`]), and so how long a
    /// request to a peer that stopped answering may take to fail.
    pub(crate) deadline: Duration,
}

/// How messages name PE `pe`.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
fn pe_name(node_of: &[u16], pe: u32) -> String {
    format!(
        "PE {pe} on node {}",
        node_of.get(pe as usize).copied().unwrap_or(0)
    )
}

#[cfg(feature = "verbs")]
pub(crate) use imp::VerbsPath;

#[cfg(not(feature = "verbs"))]
pub(crate) use stub::VerbsPath;

#[cfg(feature = "verbs")]
mod imp {
    use std::time::Duration;

    use gsas_core::service::AmoKind;
    use gsas_core::wire::{AtomicOp, AtomicType};
    use verbs::mesh::{Exchange, Job};
    use verbs::{AtomicCap, Endpoint, Nic, Region, RemoteKey, Selection, Timing};

    use super::{NodeError, Setup, pe_name};
    use crate::pmi;
    use gsas_control::proto::{SEG_DATA, SEG_HEAP, SEG_SYNC};

    /// Bytes of the bounce pool (sources and destinations outside registered memory).
    const BOUNCE: usize = 1 << 20;
    /// The largest request the path posts (a work request's length is 32 bits).
    const MAX_REQUEST: usize = 1 << 30;
    // A transfer is cut into requests of MAX_REQUEST and bounce copies of BOUNCE bytes:
    // multiples of the granule, so no aligned element is split between two (issue 25).
    const _: () = assert!(
        BOUNCE % gsas_core::wire::GRANULE == 0 && MAX_REQUEST % gsas_core::wire::GRANULE == 0
    );
    /// The exchange key of a PE's device's atomic capability.
    const ATOMICS_KEY: &str = "verbs-atomics";
    /// Send queue depth per queue pair.
    const DEPTH: u32 = 256;
    /// The order in which a PE publishes its segments' keys (heap, sync, then data, which
    /// a PE may lack).
    const PUBLISHED: [u8; 3] = [SEG_HEAP, SEG_SYNC, SEG_DATA];

    /// The queue pairs' timing for a deadline: 8 attempts (retry count 7) of
    /// 4.096 us * 2^timeout each fit in it, so that a peer that is gone is reported (retry
    /// exceeded) before the deadline. The default deadline (10 s) gives timeout 18 (1.07 s
    /// per attempt, 8.6 s in all), the values InfiniBand middleware uses on real fabrics
    /// (docs/verbs.md, "The transport"); RNR retry 7 (without limit) is moot, the path posts
    /// no receives and sends nothing that needs one.
    pub(crate) fn timing(deadline: Duration) -> Timing {
        let per_attempt = deadline.as_nanos() / 8;
        let mut t = 1u8;
        while t < 30 && 4096u128 << (t + 1) <= per_attempt {
            t += 1;
        }
        Timing {
            timeout: t,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }

    /// `verbs::mesh`'s exchange over the PE's PMI client: every key carries the publishing
    /// rank (`key@rank`), which PMI-1 and PMI-2's one flat key space need.
    struct PmiExchange<'a> {
        pmi: &'a mut pmi::Client,
        rank: u32,
    }

    impl Exchange for PmiExchange<'_> {
        fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
            self.pmi
                .kvs_put(&format!("{key}@{}", self.rank), value.as_bytes())
                .map_err(|e| e.to_string())
        }

        fn fence(&mut self) -> Result<(), String> {
            self.pmi.barrier().map_err(|e| e.to_string())
        }

        fn get(&mut self, rank: u32, key: &str) -> Result<String, String> {
            match self.pmi.kvs_get_from(rank, &format!("{key}@{rank}")) {
                Ok(Some(v)) => {
                    String::from_utf8(v).map_err(|_| format!("{key} of PE {rank} is not text"))
                }
                Ok(None) => Err(format!("PE {rank} published no {key}")),
                Err(e) => Err(e.to_string()),
            }
        }
    }

    /// The error of a failed request of PE `me`.
    fn fail(me: &str, e: verbs::Error) -> NodeError {
        NodeError::Transport(format!("{me}: {e}"))
    }

    /// A copy out of the bounce pool that `quiet` makes (the destination of a `get_nbi`).
    struct Pending {
        from: usize,
        to: *mut u8,
        len: usize,
    }

    // SAFETY: `to` is memory the caller of `get_nbi` keeps valid and untouched until quiet
    // (its contract); the path moves between threads only behind the node's mutex.
    unsafe impl Send for Pending {}

    /// The verbs path; see the [module docs](super).
    pub(crate) struct VerbsPath {
        // Drop order: the queue pairs, then the registrations, then the device, then the
        // bounce pool's memory.
        eps: Vec<Option<Endpoint>>,
        /// Each peer's published segment keys, by segment id.
        keys: Vec<[Option<RemoteKey>; 3]>,
        own: Vec<Region>,
        /// Where NIC atomics return the old value.
        scratch: Region,
        bounce: Region,
        _nic: Nic,
        bounce_mem: Box<[u64]>,
        _scratch_mem: Box<[u64]>,
        /// 64-bit integer atomics go to the NIC (see [`VerbsPath::offloads`]).
        offload: bool,
        bounce_used: usize,
        pending: Vec<Pending>,
        /// `fence` was called and RDMA may still be in flight: operations through the
        /// service must wait for it.
        fence_pending: bool,
        /// This PE, for messages.
        me: String,
    }

    impl VerbsPath {
        /// The bootstrap; see the [module docs](super). Every PE of a job whose nodes are
        /// verbs nodes calls it (it passes two PMI barriers).
        pub(crate) fn connect(s: Setup<'_>, pmi: &mut pmi::Client) -> Result<VerbsPath, NodeError> {
            let me = pe_name(s.node_of, s.rank);
            let fail = |e: verbs::Error| NodeError::Transport(format!("{me}: {e}"));
            let nic = Nic::open(&Selection {
                device: s.device.clone(),
                port: s.port,
                gid_index: s.gid_index,
            })
            .map_err(fail)?;
            let mut own = Vec::new();
            for seg in PUBLISHED {
                if let Some((base, len)) = s.segments[usize::from(seg)] {
                    let len = usize::try_from(len).map_err(|_| {
                        NodeError::Config(format!("segment {seg} does not fit the address space"))
                    })?;
                    // SAFETY: the segment is this PE's own mapping, which the node keeps
                    // until it is dropped, after this path (whose registrations end first).
                    own.push(unsafe { nic.register(base as *mut u8, len) }.map_err(fail)?);
                }
            }
            let mut bounce_mem = vec![0u64; BOUNCE / 8].into_boxed_slice();
            // SAFETY: the pool is owned by the path and dropped after its registration.
            let bounce =
                unsafe { nic.register(bounce_mem.as_mut_ptr().cast(), BOUNCE) }.map_err(fail)?;
            let mine = s.node_of[s.rank as usize];
            let n = s.node_of.len() as u32;
            let remote = |r: u32| s.node_of[r as usize] != mine;
            let name = |r: u32| pe_name(s.node_of, r);
            let mut scratch_mem = vec![0u64; 8].into_boxed_slice();
            // SAFETY: as the bounce pool's.
            let scratch =
                unsafe { nic.register(scratch_mem.as_mut_ptr().cast(), 64) }.map_err(fail)?;
            let regions: Vec<&Region> = own.iter().collect();
            let mut ex = PmiExchange { pmi, rank: s.rank };
            // Published before the mesh's first fence, read after it: NIC atomics only
            // when every PE's device is atomic against CPU atomics (the same decision on
            // every PE).
            let cap = |a: AtomicCap| match a {
                AtomicCap::Global => "glob",
                AtomicCap::Hca => "hca",
                AtomicCap::None => "none",
            };
            ex.put(ATOMICS_KEY, cap(nic.caps().atomics)).map_err(|e| {
                NodeError::Transport(format!("{me}: publishing the device's atomics: {e}"))
            })?;
            let mesh = verbs::mesh::connect_all(
                &nic,
                &Job {
                    me: s.rank,
                    n,
                    remote: &remote,
                    name: &name,
                },
                &regions,
                DEPTH,
                timing(s.deadline),
                &mut ex,
            )
            .map_err(fail)?;
            let mut offload = true;
            for r in 0..n {
                let theirs = ex.get(r, ATOMICS_KEY).map_err(|e| {
                    NodeError::Transport(format!("{me}: reading the atomics of PE {r}: {e}"))
                })?;
                offload &= theirs == "glob";
            }
            let keys = mesh
                .keys
                .iter()
                .map(|k| {
                    let mut by_seg = [None; 3];
                    for (seg, key) in PUBLISHED.iter().zip(k) {
                        by_seg[usize::from(*seg)] = Some(*key);
                    }
                    by_seg
                })
                .collect();
            log::info!(
                "{me}: verbs on {} port {} (LID {}, atomics {:?}), {} queue pair(s)",
                nic.caps().device,
                nic.caps().port,
                nic.caps().lid,
                nic.caps().atomics,
                mesh.endpoints.iter().flatten().count()
            );
            Ok(VerbsPath {
                eps: mesh.endpoints,
                keys,
                own,
                scratch,
                bounce,
                _nic: nic,
                bounce_mem,
                _scratch_mem: scratch_mem,
                offload,
                bounce_used: 0,
                pending: Vec::new(),
                fence_pending: false,
                me,
            })
        }

        /// The target's key and the remote offset for `len` bytes at `offset` of `seg` of
        /// `pe`, checked against the segment's published length.
        fn target(
            &self,
            pe: u32,
            seg: u8,
            offset: u64,
            len: usize,
        ) -> Result<RemoteKey, NodeError> {
            let key = self
                .keys
                .get(pe as usize)
                .and_then(|k| k.get(usize::from(seg)).copied().flatten())
                .ok_or_else(|| NodeError::Invalid(format!("PE {pe} has no segment {seg}")))?;
            match offset.checked_add(len as u64) {
                Some(end) if end <= key.len => Ok(key),
                _ => Err(NodeError::Invalid(format!(
                    "{len} bytes at offset {offset:#x} are outside segment {seg} of PE {pe} ({} bytes)",
                    key.len
                ))),
            }
        }

        /// The endpoint to `pe`.
        fn ep(eps: &mut [Option<Endpoint>], pe: u32) -> Result<&mut Endpoint, NodeError> {
            eps.get_mut(pe as usize)
                .and_then(Option::as_mut)
                .ok_or_else(|| NodeError::Invalid(format!("PE {pe} is not reached over verbs")))
        }

        /// The registered own segment holding `[addr, addr + len)`, if any.
        fn region_of(own: &[Region], addr: usize, len: usize) -> Option<&Region> {
            own.iter().find(|r| {
                let k = r.remote_key();
                let a = addr as u64;
                a >= k.addr && a - k.addr <= k.len && len as u64 <= k.len - (a - k.addr)
            })
        }

        /// Posts with `post`, treating a full send queue as back-pressure: wait for room
        /// and retry (until the device reports an error, if it does).
        fn retry<T>(
            ep: &mut Endpoint,
            mut post: impl FnMut(&mut Endpoint) -> Result<T, verbs::Error>,
        ) -> Result<T, verbs::Error> {
            loop {
                match post(ep) {
                    Err(verbs::Error::WouldBlock) => ep.wait_room()?,
                    r => return r,
                }
            }
        }

        /// `len` bytes of the bounce pool (at most [`BOUNCE`]): its offset. When the pool
        /// is used up, everything outstanding completes first (quiet) and it starts over.
        fn bounce_alloc(&mut self, len: usize) -> Result<usize, NodeError> {
            let len = len.next_multiple_of(8);
            if self.bounce_used + len > BOUNCE {
                self.quiet()?;
            }
            let at = self.bounce_used;
            self.bounce_used += len;
            Ok(at)
        }

        fn bounce_ptr(&mut self, at: usize) -> *mut u8 {
            // SAFETY: `at` is below BOUNCE, the pool's length.
            unsafe { self.bounce_mem.as_mut_ptr().cast::<u8>().add(at) }
        }

        /// RDMA WRITE of `data` to `offset` of `seg` of `pe`. Blocking (`!nbi`): `data` is
        /// reusable when it returns.
        pub(crate) fn put(
            &mut self,
            pe: u32,
            seg: u8,
            offset: u64,
            data: &[u8],
            nbi: bool,
        ) -> Result<(), NodeError> {
            let key = self.target(pe, seg, offset, data.len())?;
            let ep = Self::ep(&mut self.eps, pe)?;
            if data.len() <= ep.max_inline() as usize {
                return Self::retry(ep, |ep| ep.put(data, None, key, offset))
                    .map_err(|e| fail(&self.me, e));
            }
            if let Some(region) = Self::region_of(&self.own, data.as_ptr() as usize, data.len()) {
                // At most 1 GiB per request (a work request's length is 32 bits).
                for (i, chunk) in data.chunks(MAX_REQUEST).enumerate() {
                    let off = offset + (i * MAX_REQUEST) as u64;
                    Self::retry(ep, |ep| ep.put(chunk, Some(region), key, off))
                        .map_err(|e| fail(&self.me, e))?;
                }
                if !nbi {
                    ep.quiet().map_err(|e| fail(&self.me, e))?;
                }
                return Ok(());
            }
            for (i, chunk) in data.chunks(BOUNCE).enumerate() {
                let at = self.bounce_alloc(chunk.len())?;
                let p = self.bounce_ptr(at);
                // SAFETY: `p .. p + len` lies in the pool, which no request uses until
                // the next reset (after quiet); `chunk` is a valid slice elsewhere.
                unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), p, chunk.len()) };
                // SAFETY: as above; the slice lives in the pool until its WRITE completed.
                let src = unsafe { std::slice::from_raw_parts(p.cast_const(), chunk.len()) };
                let ep = Self::ep(&mut self.eps, pe)?;
                let off = offset + (i * BOUNCE) as u64;
                Self::retry(ep, |ep| ep.put(src, Some(&self.bounce), key, off))
                    .map_err(|e| fail(&self.me, e))?;
            }
            Ok(())
        }

        /// RDMA READ of `len` bytes at `offset` of `seg` of `pe` into `dest`: complete on
        /// return when `blocking`, else after [`VerbsPath::quiet`].
        ///
        /// # Safety
        ///
        /// `dest` valid for writes of `len` bytes until the data is there (blocking: the
        /// return; otherwise quiet) and not accessed by anything else meanwhile.
        pub(crate) unsafe fn get(
            &mut self,
            pe: u32,
            seg: u8,
            offset: u64,
            dest: *mut u8,
            len: usize,
            blocking: bool,
        ) -> Result<(), NodeError> {
            let key = self.target(pe, seg, offset, len)?;
            if let Some(region) = Self::region_of(&self.own, dest as usize, len) {
                let at = dest as u64 - region.remote_key().addr;
                let ep = Self::ep(&mut self.eps, pe)?;
                let mut done = 0usize;
                while done < len {
                    let n = (len - done).min(MAX_REQUEST);
                    let (d, o) = (at + done as u64, offset + done as u64);
                    // A blocking get waits for its last READ (completions come in order).
                    let last = blocking && done + n == len;
                    Self::retry(ep, |ep| {
                        if last {
                            ep.get_wait(region, d, n as u32, key, o)
                        } else {
                            ep.get(region, d, n as u32, key, o)
                        }
                    })
                    .map_err(|e| fail(&self.me, e))?;
                    done += n;
                }
                return Ok(());
            }
            let mut done = 0usize;
            while done < len {
                let n = (len - done).min(BOUNCE);
                let at = self.bounce_alloc(n)?;
                let o = offset + done as u64;
                let ep = Self::ep(&mut self.eps, pe)?;
                Self::retry(ep, |ep| {
                    if blocking {
                        ep.get_wait(&self.bounce, at as u64, n as u32, key, o)
                    } else {
                        ep.get(&self.bounce, at as u64, n as u32, key, o)
                    }
                })
                .map_err(|e| fail(&self.me, e))?;
                // SAFETY: `dest + done .. + n` is inside the caller's buffer.
                let to = unsafe { dest.add(done) };
                if blocking {
                    let p = self.bounce_ptr(at);
                    // SAFETY: the READ completed into the pool at `at`; `to` is valid for
                    // `n` bytes (this function's contract).
                    unsafe { gsas_transport::watched::store_once(p, to, n) };
                } else {
                    self.pending.push(Pending {
                        from: at,
                        to,
                        len: n,
                    });
                }
                done += n;
            }
            Ok(())
        }

        /// An 8-byte inline WRITE of `value` (a signal's SET): ordered after the earlier
        /// WRITEs to `pe` on the same queue pair.
        pub(crate) fn write_u64(
            &mut self,
            pe: u32,
            seg: u8,
            offset: u64,
            value: u64,
        ) -> Result<(), NodeError> {
            self.put(pe, seg, offset, &value.to_le_bytes(), true)
        }

        /// Whether atomics on `ty` go to the NIC: the 64-bit integer types (every
        /// OpenSHMEM operation on them is a NIC fetch-add or compare-swap, or a
        /// compare-swap loop), when every PE's device reports `IBV_ATOMIC_GLOB` (atomic
        /// against the CPU atomics of same-node PEs and of the services). Everything else
        /// goes through the services, so that one datatype never mixes the paths.
        pub(crate) fn offloads(&self, ty: AtomicType) -> bool {
            self.offload && matches!(ty, AtomicType::I64 | AtomicType::U64)
        }

        /// NIC atomic `op` on the 64-bit word at `offset` of `seg` of `pe` (a type that
        /// [`VerbsPath::offloads`]); returns the old value. FETCH is a fetch-add of 0;
        /// SET, SWAP, AND, OR and XOR are compare-swap loops.
        pub(crate) fn atomic(
            &mut self,
            pe: u32,
            seg: u8,
            offset: u64,
            op: AtomicOp,
            operand: u64,
            comparand: u64,
        ) -> Result<u64, NodeError> {
            let key = self.target(pe, seg, offset, 8)?;
            let ep = Self::ep(&mut self.eps, pe)?;
            let s = &self.scratch;
            let add = |ep: &mut Endpoint, v: u64| {
                Self::retry(ep, |ep| ep.fetch_add(s, 0, key, offset, v))
            };
            // The wire operation resolved by the one atomic kernel (gsas-core's AmoKind):
            // what the service and the same-node path run, here as the NIC's fetch-add and
            // compare-swap.
            let (kind, operand) = AmoKind::from_wire(op, operand);
            let r = match kind {
                AmoKind::Fetch => add(ep, 0),
                AmoKind::Add => add(ep, operand),
                AmoKind::CompareSwap => Self::retry(ep, |ep| {
                    ep.compare_swap(s, 0, key, offset, comparand, operand)
                }),
                AmoKind::Set | AmoKind::Swap | AmoKind::And | AmoKind::Or | AmoKind::Xor => {
                    add(ep, 0).and_then(|mut old| {
                        loop {
                            // Never `None`: only Fetch and a failed compare-swap give none.
                            let new = kind.apply(old, operand, 0).unwrap_or(old);
                            let got =
                                Self::retry(ep, |ep| ep.compare_swap(s, 0, key, offset, old, new))?;
                            if got == old {
                                break Ok(old);
                            }
                            old = got;
                        }
                    })
                }
            };
            r.map_err(|e| fail(&self.me, e))
        }

        /// Completes every request (puts delivered, gets landed and copied out).
        pub(crate) fn quiet(&mut self) -> Result<(), NodeError> {
            for ep in self.eps.iter_mut().flatten() {
                if ep.outstanding() > 0 {
                    ep.quiet().map_err(|e| fail(&self.me, e))?;
                }
            }
            for c in std::mem::take(&mut self.pending) {
                let p = self.bounce_ptr(c.from);
                // SAFETY: the READ into the pool completed (quiet above); `c.to` is valid
                // for `c.len` bytes until this quiet (get_nbi's contract).
                unsafe { gsas_transport::watched::store_once(p, c.to, c.len) };
            }
            self.bounce_used = 0;
            self.fence_pending = false;
            Ok(())
        }

        /// Orders later requests after earlier ones: `IBV_SEND_FENCE` on the next request of
        /// each queue pair (after READs), and [`VerbsPath::before_service`] completes the
        /// RDMA before an operation through the service.
        pub(crate) fn fence(&mut self) {
            for ep in self.eps.iter_mut().flatten() {
                ep.fence();
            }
            self.fence_pending = self.busy();
        }

        /// Called before an operation to `pe` leaves through the atomic service: after a
        /// fence, the RDMA before it must complete first.
        pub(crate) fn before_service(&mut self) -> Result<(), NodeError> {
            if self.fence_pending {
                self.quiet()?;
            }
            Ok(())
        }

        /// Whether requests may be outstanding.
        pub(crate) fn busy(&self) -> bool {
            !self.pending.is_empty() || self.eps.iter().flatten().any(|e| e.outstanding() > 0)
        }
    }
}

#[cfg(all(test, feature = "verbs"))]
mod tests {
    use super::imp::timing;
    use std::time::Duration;

    #[test]
    fn queue_pair_timing_fits_the_deadline() {
        for ms in [100u64, 2_000, 10_000, 60_000, 3_600_000] {
            let t = timing(Duration::from_millis(ms));
            let per = 4.096e-6 * f64::from(1u32 << t.timeout);
            let total = per * f64::from(1 + t.retry_cnt);
            assert!(total <= ms as f64 / 1e3, "{ms} ms: timeout {}", t.timeout);
            assert!(
                ms < 200 || total > ms as f64 / 2e3,
                "{ms} ms: timeout {}",
                t.timeout
            );
        }
        // 10 s (the default deadline): 1.07 s per attempt, 8.6 s to retry-exceeded.
        assert_eq!(timing(Duration::from_secs(10)).timeout, 18);
    }
}

#[cfg(not(feature = "verbs"))]
mod stub {
    use super::{NodeError, Setup};
    use crate::pmi;

    /// Without the `verbs` feature: no value exists.
    pub(crate) enum VerbsPath {}

    #[allow(clippy::unused_self, missing_docs)]
    impl VerbsPath {
        pub(crate) fn connect(s: Setup<'_>, _: &mut pmi::Client) -> Result<VerbsPath, NodeError> {
            Err(NodeError::Config(format!(
                "PE {}: the job's nodes are verbs nodes, but this build of gsas has no verbs transport (built without the cargo feature `verbs`: install with `scripts/install --with-verbs`)",
                s.rank
            )))
        }
        pub(crate) fn put(
            &mut self,
            _: u32,
            _: u8,
            _: u64,
            _: &[u8],
            _: bool,
        ) -> Result<(), NodeError> {
            match *self {}
        }
        pub(crate) unsafe fn get(
            &mut self,
            _: u32,
            _: u8,
            _: u64,
            _: *mut u8,
            _: usize,
            _: bool,
        ) -> Result<(), NodeError> {
            match *self {}
        }
        pub(crate) fn write_u64(&mut self, _: u32, _: u8, _: u64, _: u64) -> Result<(), NodeError> {
            match *self {}
        }
        pub(crate) fn offloads(&self, _: gsas_core::wire::AtomicType) -> bool {
            match *self {}
        }
        pub(crate) fn atomic(
            &mut self,
            _: u32,
            _: u8,
            _: u64,
            _: gsas_core::wire::AtomicOp,
            _: u64,
            _: u64,
        ) -> Result<u64, NodeError> {
            match *self {}
        }
        pub(crate) fn quiet(&mut self) -> Result<(), NodeError> {
            match *self {}
        }
        pub(crate) fn fence(&mut self) {
            match *self {}
        }
        pub(crate) fn busy(&self) -> bool {
            match *self {}
        }
        pub(crate) fn before_service(&mut self) -> Result<(), NodeError> {
            match *self {}
        }
    }
}
