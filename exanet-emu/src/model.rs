//! [`Model`]: the in-process, deterministic, single-threaded NI model for unit tests.
//!
//! What it is: a [`ModelFabric`] holds the maps of every endpoint of `nodes` emulated nodes
//! in ordinary memory and one [`NodeEngine`] per node (the same device state machine the
//! emulator runs). [`ModelFabric::endpoint`] gives a [`Model`], the [`RegIo`] of one
//! endpoint. In the default *auto* mode every doorbell or consumer-counter write runs the
//! fabric synchronously until nothing changes (all frames delivered, all acks back), so a
//! send is acknowledged by the time `doorbell` returns. In *step* mode
//! ([`ModelFabric::set_step_mode`]) nothing runs until the test calls
//! [`ModelFabric::step`], which delivers one frame (or, with no frame queued, runs one poll
//! pass of every node). Time is virtual ([`ModelFabric::advance`]), so ack timeouts are
//! deterministic too. Faults are injected through [`ModelFabric::faults`] (forced NACK,
//! `RING_FULL`, `UNREACHABLE`, `XLAT_FAULT`).
//!
//! What it is not: thread-safe (`!Send`) or timed.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use uio_driver::{IrqSource, UioError};

use crate::engine::{EngineConfig, EpMaps, Net, NodeEngine, Region};
use crate::fault::FaultPlan;
use crate::io::{DevMem, Map, RegIo, check};
use crate::nva::{MemSegment, Nva, Registrar};
use crate::regs::MAP_SIZES;
use exanet::RegisterError;

/// Shape of a model fabric.
#[derive(Clone, Copy, Debug)]
pub struct ModelConfig {
    /// Nodes (coordinates from [`crate::node_coord`]).
    pub nodes: usize,
    /// Endpoints per node.
    pub eps: usize,
    /// PDID of every endpoint.
    pub pdid: u16,
    /// Ack timeout in virtual nanoseconds.
    pub ack_timeout_ns: u64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            nodes: 2,
            eps: 2,
            pdid: 1,
            ack_timeout_ns: 1_000_000,
        }
    }
}

struct QueueNet<'a>(&'a mut VecDeque<Vec<u8>>);

impl Net for QueueNet<'_> {
    fn send(&mut self, frame: &[u8]) {
        self.0.push_back(frame.to_vec());
    }
}

struct Inner {
    nodes: Vec<NodeEngine>,
    queue: VecDeque<Vec<u8>>,
    now: u64,
    step_mode: bool,
    frames: u64,
}

impl Inner {
    fn deliver_one(&mut self) -> bool {
        let Some(frame) = self.queue.pop_front() else {
            return false;
        };
        self.frames += 1;
        let dst = crate::frame::FramePacket::new_checked(&frame[..]).map(|p| p.dst_coord());
        let now = self.now;
        let mut net = QueueNet(&mut self.queue);
        if let Ok(dst) = dst {
            if let Some(node) = self.nodes.iter_mut().find(|n| n.coord() == dst) {
                node.on_frame(&frame, now, &mut net);
            }
        }
        true
    }

    fn poll_all(&mut self) -> bool {
        let now = self.now;
        let mut net = QueueNet(&mut self.queue);
        let mut any = false;
        for node in &mut self.nodes {
            any |= node.poll(now, &mut net);
        }
        any || !self.queue.is_empty()
    }

    fn settle(&mut self) {
        for _ in 0..1_000_000 {
            let mut any = self.poll_all();
            while self.deliver_one() {
                any = true;
            }
            if !any {
                return;
            }
        }
        panic!("exanet model: the fabric did not settle after 1e6 rounds (engine livelock)");
    }
}

/// The memory of one endpoint's four maps.
struct EpStore {
    maps: [Box<[AtomicU64]>; 4],
}

impl EpStore {
    fn new() -> Self {
        EpStore {
            maps: core::array::from_fn(|i| {
                (0..MAP_SIZES[i] / 8).map(|_| AtomicU64::new(0)).collect()
            }),
        }
    }

    fn views(&self) -> [DevMem; 4] {
        // SAFETY: each box holds MAP_SIZES[i] bytes of 8-aligned atomics that live (and never
        // move) as long as the fabric, which outlives every view; all accesses are atomic.
        core::array::from_fn(|i| unsafe {
            DevMem::new(self.maps[i].as_ptr() as *mut u8, MAP_SIZES[i])
        })
    }
}

/// An in-process fabric of model nodes (see the module docs). Cloning shares it.
#[derive(Clone)]
pub struct ModelFabric {
    inner: Rc<RefCell<Inner>>,
    stores: Rc<Vec<Vec<EpStore>>>,
    faults: Arc<FaultPlan>,
}

impl std::fmt::Debug for ModelFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelFabric")
            .field("nodes", &self.stores.len())
            .finish()
    }
}

impl ModelFabric {
    /// A fabric of `cfg.nodes` nodes with `cfg.eps` endpoints each.
    pub fn new(cfg: ModelConfig) -> Self {
        let faults = Arc::new(FaultPlan::new());
        let stores: Vec<Vec<EpStore>> = (0..cfg.nodes)
            .map(|_| (0..cfg.eps).map(|_| EpStore::new()).collect())
            .collect();
        let engine_cfg = EngineConfig {
            ack_timeout_ns: cfg.ack_timeout_ns,
        };
        let nodes = stores
            .iter()
            .enumerate()
            .map(|(n, eps)| {
                let mut node =
                    NodeEngine::new(crate::node_coord(n), engine_cfg, Arc::clone(&faults));
                for ep in eps {
                    let [regs, mbox, pktz, rdma] = ep.views();
                    node.add_endpoint(
                        EpMaps {
                            regs,
                            mbox,
                            pktz,
                            rdma,
                        },
                        cfg.pdid,
                    );
                }
                node
            })
            .collect();
        let inner = Inner {
            nodes,
            queue: VecDeque::new(),
            now: 0,
            step_mode: false,
            frames: 0,
        };
        ModelFabric {
            inner: Rc::new(RefCell::new(inner)),
            stores: Rc::new(stores),
            faults,
        }
    }

    /// The register access of endpoint `ep` of node `node`.
    pub fn endpoint(&self, node: usize, ep: usize) -> Model {
        Model {
            views: self.stores[node][ep].views(),
            fabric: self.clone(),
        }
    }

    /// The fault rules of this fabric.
    pub fn faults(&self) -> &FaultPlan {
        &self.faults
    }

    /// Switches between auto mode (doorbells run the fabric) and step mode.
    pub fn set_step_mode(&self, on: bool) {
        self.inner.borrow_mut().step_mode = on;
    }

    /// Step mode: delivers one queued frame, or runs one poll pass of every node when none
    /// is queued. Returns whether anything happened.
    pub fn step(&self) -> bool {
        let mut inner = self.inner.borrow_mut();
        if inner.deliver_one() {
            return true;
        }
        inner.poll_all()
    }

    /// Frames queued and not yet delivered.
    pub fn queued(&self) -> usize {
        self.inner.borrow().queue.len()
    }

    /// Frames delivered so far.
    pub fn frames_delivered(&self) -> u64 {
        self.inner.borrow().frames
    }

    /// Runs until nothing changes (auto mode does this after every doorbell).
    pub fn settle(&self) {
        self.inner.borrow_mut().settle();
    }

    fn kick(&self) {
        let mut inner = self.inner.borrow_mut();
        if !inner.step_mode {
            inner.settle();
        }
    }

    /// Advances virtual time by `dt` (then settles in auto mode).
    pub fn advance(&self, dt: Duration) {
        self.inner.borrow_mut().now += dt.as_nanos() as u64;
        self.kick();
    }

    /// Changes the PDID of an endpoint.
    pub fn set_pdid(&self, node: usize, ep: u16, pdid: u16) {
        self.inner.borrow_mut().nodes[node].set_pdid(ep, pdid);
    }

    /// Enables or disables an endpoint.
    pub fn set_enabled(&self, node: usize, ep: u16, on: bool) {
        self.inner.borrow_mut().nodes[node].set_enabled(ep, on);
    }

    /// The registrar of an endpoint (emulator NVA layout, no socket).
    pub fn registrar(&self, node: usize, ep: u16) -> ModelRegistrar {
        ModelRegistrar {
            fabric: self.clone(),
            node,
            ep,
        }
    }

    /// A fake `uio_pdrv_genirq` line of an endpoint.
    pub fn irq(&self, node: usize, ep: u16) -> ModelIrq {
        ModelIrq {
            fabric: self.clone(),
            node,
            ep,
            unmasked: false,
            count: 0,
        }
    }
}

/// The [`RegIo`] of one model endpoint.
pub struct Model {
    views: [DevMem; 4],
    fabric: ModelFabric,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").finish_non_exhaustive()
    }
}

impl Model {
    /// The fabric this endpoint belongs to.
    pub fn fabric(&self) -> &ModelFabric {
        &self.fabric
    }
}

impl RegIo for Model {
    fn read32(&self, map: Map, offset: usize) -> u32 {
        check(map, offset, 4);
        self.views[map as usize].load32(offset, Ordering::Relaxed)
    }
    fn write32(&self, map: Map, offset: usize, value: u32) {
        check(map, offset, 4);
        self.views[map as usize].store32(offset, value, Ordering::Relaxed)
    }
    fn read64(&self, map: Map, offset: usize) -> u64 {
        check(map, offset, 8);
        self.views[map as usize].load64(offset, Ordering::Relaxed)
    }
    fn write64(&self, map: Map, offset: usize, value: u64) {
        check(map, offset, 8);
        self.views[map as usize].store64(offset, value, Ordering::Relaxed)
    }
    fn read_counter(&self, offset: usize) -> u32 {
        check(Map::Regs, offset, 4);
        self.views[0].load32(offset, Ordering::Acquire)
    }
    fn doorbell(&self, offset: usize, value: u32) {
        check(Map::Regs, offset, 4);
        self.views[0].store32(offset, value, Ordering::Release);
        self.fabric.kick();
    }
    fn release_counter(&self, offset: usize, value: u32) {
        check(Map::Regs, offset, 4);
        self.views[0].store32(offset, value, Ordering::Release);
        self.fabric.kick();
    }
}

/// Registration with a model endpoint: maps the segment's descriptor into the engine, as
/// the emulator does, and returns `NVA = region << 40`.
#[derive(Debug)]
pub struct ModelRegistrar {
    fabric: ModelFabric,
    node: usize,
    ep: u16,
}

impl Registrar for ModelRegistrar {
    fn register(&mut self, seg: &MemSegment) -> Result<Nva, RegisterError> {
        let region = Region::map(seg.fd(), seg.len()).map_err(|e| RegisterError::Io {
            path: "model".into(),
            source: e,
        })?;
        let mut inner = self.fabric.inner.borrow_mut();
        let id = inner.nodes[self.node]
            .register_region(self.ep, None, region)
            .ok_or(RegisterError::Refused {
                path: "model".into(),
                status: crate::nva::mgmt_status::NO_REGION,
            })?;
        Ok(Nva::new(id, 0))
    }
    fn unregister(&mut self, base: Nva) -> Result<(), RegisterError> {
        let mut inner = self.fabric.inner.borrow_mut();
        if inner.nodes[self.node].unregister_region(self.ep, base.region()) {
            Ok(())
        } else {
            Err(RegisterError::Refused {
                path: "model".into(),
                status: crate::nva::mgmt_status::NO_SUCH_REGION,
            })
        }
    }
}

/// A fake interrupt line with `uio_pdrv_genirq` semantics over a model endpoint: starts
/// masked, fires once (and masks) when unmasked with the level high, `enable` unmasks.
#[derive(Debug)]
pub struct ModelIrq {
    fabric: ModelFabric,
    node: usize,
    ep: u16,
    unmasked: bool,
    count: u32,
}

impl IrqSource for ModelIrq {
    fn enable(&mut self) -> Result<(), UioError> {
        self.unmasked = true;
        Ok(())
    }

    /// Runs the fabric (auto mode), then fires if unmasked and the level is high. The model
    /// has no other thread, so it never sleeps: `timeout` is only an upper bound.
    fn wait(&mut self, _timeout: Duration) -> Result<Option<u32>, UioError> {
        self.fabric.kick();
        let level = {
            let mut inner = self.fabric.inner.borrow_mut();
            // Re-evaluate the level with current IRQ_ENABLE and counters.
            let now = inner.now;
            let Inner { nodes, queue, .. } = &mut *inner;
            nodes[self.node].poll(now, &mut QueueNet(queue));
            nodes[self.node].irq_level(self.ep)
        };
        if self.unmasked && level {
            self.unmasked = false;
            self.count = self.count.wrapping_add(1);
            return Ok(Some(self.count));
        }
        Ok(None)
    }

    fn count(&mut self) -> Result<u32, UioError> {
        Ok(self.count)
    }
}
