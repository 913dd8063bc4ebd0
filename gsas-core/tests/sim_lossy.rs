//! End-to-end simulation of the protocol core over a lossy network.
//!
//! Kept as one file because it is one simulation: the network, the peers, the reference model
//! and the checks share their types and the simulated clock.
//!
//! Four peers, each running a [`Client`] and a [`Service`] over one
//! `Reliable<FaultInjector<Loopback>>` endpoint (10% drops, 5% duplicates, 10% of packets
//! reordered within a window of 8, simulated clock, no sleeps). Every peer hosts two PEs with
//! two segments each in [`WordMemory`], and issues a deterministic mix of operations to PEs
//! on the other peers: inline and bulk reads and writes (1 B to over four MTUs), every atomic
//! operation on every datatype, compare-swap tokens, compare-swap locks guarding a counter
//! updated by plain read/write, and requests the service must refuse.
//!
//! The workload keeps the expected final state well defined despite concurrency: writes go
//! to fresh, disjoint blocks (write-once), reads only target constant memory or blocks whose
//! write has completed, and atomic words are grouped by role so that the order in which
//! concurrent atomics execute does not change what can be checked:
//!
//! * fetch-add/fetch-inc words: the fetched values, sorted, form the chain of partial sums;
//! * add/inc words: the final value is the wrapping sum of all operands;
//! * bitwise words: every bit is flipped by exactly one AND/OR/XOR (fetching or not); the
//!   fetched values form a chain of nested flip sets;
//! * swap words: fetched values plus the final value are a permutation of the initial value
//!   and all operands;
//! * set-once words, fetch-only constant words;
//! * token words: of several compare-swaps from 0, exactly one wins;
//! * locks: the counters read under the lock are exactly `0..grants`, every release finds
//!   its own value, the final counter equals the number of grants.
//!
//! Then: every operation completed exactly once with the expected kind, context and result;
//! every request packet was executed exactly once (service request count = client packet
//! count); no stale, malformed or mismatched reply reached a client; final memory of every
//! peer equals the reference model byte for byte, guard words included; simulated time is
//! bounded (no deadlock). Counters are printed with `eprintln!` (`-- --nocapture`).
//!
//! `GSAS_SIM_OPS` sets the number of workload operations (default 100000; lock follow-ups
//! come on top), `GSAS_SIM_SEED` the seed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering as Mem};
use std::time::Instant;

use gsas_core::client::{Client, ClientError, Completion, OpError, OpHandle, OpKind};
use gsas_core::reliable::{Config, PeerSlot, Reliable, buffer_len};
use gsas_core::service::{Handled, Segment, Service, WordMemory};
use gsas_core::transport::fault::{FaultConfig, FaultInjector, PPM};
use gsas_core::transport::loopback::{LoopbackConfig, LoopbackEndpoint, LoopbackHub};
use gsas_core::transport::{Ordering, Transport, TransportError};
use gsas_core::wire::{
    AtomicDesc, AtomicOp, AtomicType, ErrorCode, GlobalAddr, SenderId, peek_type,
};

const PEERS: usize = 4;
const PES_PER_PEER: usize = 2;
const SEGS_PER_PE: usize = 2;
/// Bytes of every segment (100000 operations use about 1 MiB of a segment's write area).
const SEG_LEN: u64 = 3 << 19;
/// Guard bytes before, between and after the segments of a peer's memory.
const GUARD: usize = 64;
const GUARD_WORD: u64 = 0xdead_beef_a5a5_5a5a;
/// `[0, CONST_END)`: constant random bytes, only read.
const CONST_END: u64 = 4096;
/// `[CONST_END, ATOMIC_END)`: atomic words and lock counters.
const ATOMIC_END: u64 = 16384;
/// The last bytes of a segment are never written legitimately: refused out-of-bounds bulk
/// writes aim here, so a partial execution would show.
const TAIL_GUARD: u64 = 8192;

const MTU: usize = 1024;
/// An Exanet mailbox slot: reads up to 56 bytes and writes up to 32 bytes go inline.
const MAX_INLINE: usize = 64;
const W: usize = 32;
const HELD: usize = 32;
const SLOTS: usize = 64;
const CTXS: usize = 2;
const KEY: u64 = 0x00c0_ffee;
const TICK_NS: u64 = 5_000;
/// Simulated time after which the run counts as deadlocked.
const MAX_SIM_NS: u64 = 120_000_000_000;
/// New operations a peer tries to start per round.
const ISSUE_BURST: usize = 16;
/// Compare-swap attempts per token word.
const TOKEN_ATTEMPTS: u32 = 4;

const TYPES: [AtomicType; 6] = [
    AtomicType::I32,
    AtomicType::U32,
    AtomicType::I64,
    AtomicType::U64,
    AtomicType::F32,
    AtomicType::F64,
];
const INT_TYPES: [AtomicType; 4] = [
    AtomicType::I32,
    AtomicType::U32,
    AtomicType::I64,
    AtomicType::U64,
];

type Node<'a, 'h, 's> = Reliable<'a, FaultInjector<'a, LoopbackEndpoint<'h, 's, PEERS>, HELD>, W>;
type Engine<'m> = Service<WordMemory<'m>, 8>;
type Cli = Client<usize, SLOTS, CTXS>;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = mix(self.0);
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

fn width(ty: AtomicType) -> usize {
    ty.width().expect("known type")
}

fn mask(ty: AtomicType) -> u64 {
    if width(ty) == 4 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    }
}

fn desc(op: AtomicOp, ty: AtomicType) -> AtomicDesc {
    AtomicDesc::new(op, ty).expect("valid descriptor")
}

fn get(image: &[u8], off: u64, w: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..w].copy_from_slice(&image[off as usize..off as usize + w]);
    u64::from_le_bytes(b)
}

fn put(image: &mut [u8], off: u64, w: usize, value: u64) {
    image[off as usize..off as usize + w].copy_from_slice(&value.to_le_bytes()[..w]);
}

/// A segment's initial contents: random bytes in the constant and atomic areas, then a
/// random 4 KiB block repeated over the write area (cheap to build in a debug build under
/// qemu; reads only target constant bytes and completed writes).
fn initial_image(rng: &mut Rng) -> Vec<u8> {
    let mut image = vec![0u8; SEG_LEN as usize];
    let (head, rest) = image.split_at_mut(ATOMIC_END as usize);
    for chunk in head.chunks_exact_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes());
    }
    let mut block = [0u8; 4096];
    for chunk in block.chunks_exact_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes());
    }
    for chunk in rest.chunks_mut(block.len()) {
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
    image
}

/// The `w`-byte little-endian value at byte `at` of word memory (`at` aligned to `w`).
fn load(words: &[AtomicU64], at: usize, w: usize) -> u64 {
    let bytes = words[at / 8].load(Mem::Relaxed).to_le_bytes();
    let mut b = [0u8; 8];
    b[..w].copy_from_slice(&bytes[at % 8..at % 8 + w]);
    u64::from_le_bytes(b)
}

/// A transfer length: half small, the rest spread over one to over four bulk fragments
/// (a fragment carries `MTU - 42 - 32 = 950` bytes).
fn transfer_len(rng: &mut Rng, small_max: u64) -> u32 {
    let len = match rng.below(100) {
        0..50 => rng.range(1, small_max),
        50..75 => rng.range(small_max + 1, 950),
        75..95 => rng.range(951, 1900),
        _ => rng.range(1901, 4000),
    };
    len as u32
}

/// A non-compare atomic.
fn amo(desc: AtomicDesc, operand: u64, check: AmoCheck) -> Body {
    Body::Atomic {
        desc,
        operand,
        comparand: 0,
        check,
    }
}

fn pick(rng: &mut Rng, cells: &[usize]) -> usize {
    cells[rng.below(cells.len() as u64) as usize]
}

/// What an atomic word is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Chain,
    Sum,
    Bits,
    Swap,
    SetOnce,
    Token,
    Lock,
}

struct Cell {
    t: usize,
    off: u64,
    ty: AtomicType,
    role: Role,
    init: u64,
    /// Bits handed out so far (`Role::Bits`).
    next_bit: u32,
    /// (operand, fetched old value) of every fetching op that completed: the increment for
    /// chains, the flipped bit for bit words, the new value for swaps and tokens.
    fetched: Vec<(u64, u64)>,
    /// Operands of every op issued (swaps, tokens).
    operands: Vec<u64>,
}

struct Lock {
    t: usize,
    cell: usize,
    counter: u64,
    attempts: u64,
    grants: u64,
    releases: u64,
    /// Counter values read by lock holders.
    reads: Vec<u64>,
}

/// One (PE, segment) with its reference image.
struct Target {
    peer: usize,
    pe: u16,
    seg: u8,
    /// Byte index of the segment in its peer's word memory.
    base: usize,
    image: Vec<u8>,
    write_cursor: u64,
    /// Blocks whose write completed: safe to read.
    written: Vec<(u64, u32)>,
    chain: Vec<usize>,
    sum: Vec<usize>,
    swap: Vec<usize>,
    bits: Vec<usize>,
    bit_cell: usize,
    set_once: Vec<usize>,
    set_next: usize,
    tokens: Vec<usize>,
    token_next: usize,
    token_uses: u32,
    locks: Vec<usize>,
}

#[derive(Clone, Copy, Debug)]
enum ReadCheck {
    /// Compare with the reference image at this place.
    Image {
        t: usize,
        off: u64,
    },
    /// A lock holder reads the counter.
    LockCounter {
        lock: usize,
        value: u64,
    },
    Refused,
}

#[derive(Clone, Copy, Debug)]
enum WriteCheck {
    Block { t: usize, off: u64 },
    LockCounter { lock: usize, value: u64 },
    Refused,
}

#[derive(Clone, Copy, Debug)]
enum AmoCheck {
    /// Fetch from constant memory: the old value is known.
    Const {
        expect: u64,
    },
    /// Record (operand, old) in the cell for the final analysis.
    Record {
        cell: usize,
        operand: u64,
    },
    /// Non-fetching: only the ACK is checked, the effect is in the final memory.
    Blind,
    LockAcquire {
        lock: usize,
        value: u64,
    },
    LockRelease {
        lock: usize,
        value: u64,
    },
    Refused,
}

#[derive(Clone, Debug)]
enum Body {
    Read {
        len: u32,
        check: ReadCheck,
    },
    Write {
        payload: Vec<u8>,
        check: WriteCheck,
    },
    Atomic {
        desc: AtomicDesc,
        operand: u64,
        comparand: u64,
        check: AmoCheck,
    },
}

/// An operation not yet started.
#[derive(Clone, Debug)]
struct Draft {
    peer: usize,
    addr: GlobalAddr,
    body: Body,
    refuse: Option<ErrorCode>,
    category: &'static str,
}

impl Draft {
    fn kind(&self) -> OpKind {
        match self.body {
            Body::Read { .. } => OpKind::Read,
            Body::Write { .. } => OpKind::Write,
            Body::Atomic { .. } => OpKind::Atomic,
        }
    }
}

/// A started operation.
struct OpRec {
    issuer: usize,
    ctx: usize,
    handle: OpHandle,
    draft: Draft,
    completions: u32,
    buf: Vec<u8>,
    got: Vec<bool>,
}

/// The workload, the reference model and the record of every operation.
struct Sim {
    rng: Rng,
    targets: Vec<Target>,
    cells: Vec<Cell>,
    locks: Vec<Lock>,
    ops: Vec<OpRec>,
    completed: usize,
    quota: usize,
    generated: [usize; PEERS],
    urgent: [VecDeque<Draft>; PEERS],
    uniq: u64,
    categories: BTreeMap<&'static str, u64>,
    bad_ops: [u64; PEERS],
}

impl Sim {
    /// Builds the model and each peer's memory (segments initialised like the images,
    /// guards around them).
    fn new(seed: u64, total_ops: usize) -> (Sim, Vec<Vec<AtomicU64>>) {
        let mut sim = Sim {
            rng: Rng(seed),
            targets: Vec::new(),
            cells: Vec::new(),
            locks: Vec::new(),
            ops: Vec::new(),
            completed: 0,
            quota: total_ops.div_ceil(PEERS),
            generated: [0; PEERS],
            urgent: Default::default(),
            uniq: 0,
            categories: BTreeMap::new(),
            bad_ops: [0; PEERS],
        };
        let mem_len = GUARD + PES_PER_PEER * SEGS_PER_PE * (SEG_LEN as usize + GUARD);
        let mut memories = Vec::new();
        for peer in 0..PEERS {
            let words: Vec<AtomicU64> = (0..mem_len / 8)
                .map(|_| AtomicU64::new(GUARD_WORD))
                .collect();
            for local in 0..PES_PER_PEER * SEGS_PER_PE {
                let base = GUARD + local * (SEG_LEN as usize + GUARD);
                let t = sim.targets.len();
                let image = initial_image(&mut sim.rng);
                sim.targets.push(Target {
                    peer,
                    pe: (peer * PES_PER_PEER + local / SEGS_PER_PE) as u16,
                    seg: (local % SEGS_PER_PE) as u8,
                    base,
                    image,
                    write_cursor: ATOMIC_END,
                    written: Vec::new(),
                    chain: Vec::new(),
                    sum: Vec::new(),
                    swap: Vec::new(),
                    bits: Vec::new(),
                    bit_cell: 0,
                    set_once: Vec::new(),
                    set_next: 0,
                    tokens: Vec::new(),
                    token_next: 0,
                    token_uses: 0,
                    locks: Vec::new(),
                });
                sim.layout_atomics(t);
                let image = &sim.targets[t].image;
                for (i, chunk) in image.chunks_exact(8).enumerate() {
                    let value = u64::from_le_bytes(chunk.try_into().unwrap());
                    words[base / 8 + i].store(value, Mem::Relaxed);
                }
            }
            memories.push(words);
        }
        (sim, memories)
    }

    /// Places the atomic words of target `t` in random order, naturally aligned (so a 32-bit
    /// word often shares a 64-bit word with another user), and gives them their initial
    /// values in the image.
    fn layout_atomics(&mut self, t: usize) {
        let mut cursor = CONST_END;
        let mut alloc = |w: u64| {
            cursor = cursor.next_multiple_of(w);
            let off = cursor;
            cursor += w;
            assert!(cursor <= ATOMIC_END, "atomic area overflow");
            off
        };
        let mut plan: Vec<(Role, AtomicType)> = Vec::new();
        for ty in INT_TYPES {
            for _ in 0..2 {
                plan.push((Role::Chain, ty));
                plan.push((Role::Sum, ty));
            }
            for _ in 0..24 {
                plan.push((Role::Bits, ty));
            }
            for _ in 0..64 {
                plan.push((Role::Token, ty));
            }
        }
        for ty in TYPES {
            for _ in 0..2 {
                plan.push((Role::Swap, ty));
            }
            for _ in 0..48 {
                plan.push((Role::SetOnce, ty));
            }
        }
        // Two locks per target, of different types.
        for ty in [INT_TYPES[t % 4], INT_TYPES[(t + 1) % 4]] {
            plan.push((Role::Lock, ty));
        }
        // Interleave the roles so that neighbouring words have different users.
        for i in 0..plan.len() {
            let j = i + self.rng.below((plan.len() - i) as u64) as usize;
            plan.swap(i, j);
        }
        for (role, ty) in plan {
            let w = width(ty);
            let off = alloc(w as u64);
            let init = match role {
                Role::Chain => self.rng.below(1000),
                Role::Token | Role::Lock => 0,
                _ => self.rng.next() & mask(ty),
            };
            put(&mut self.targets[t].image, off, w, init);
            let cell = self.cells.len();
            self.cells.push(Cell {
                t,
                off,
                ty,
                role,
                init,
                next_bit: 0,
                fetched: Vec::new(),
                operands: Vec::new(),
            });
            let target = &mut self.targets[t];
            match role {
                Role::Chain => target.chain.push(cell),
                Role::Sum => target.sum.push(cell),
                Role::Bits => target.bits.push(cell),
                Role::Swap => target.swap.push(cell),
                Role::SetOnce => target.set_once.push(cell),
                Role::Token => target.tokens.push(cell),
                Role::Lock => {
                    let counter = alloc(8);
                    put(&mut self.targets[t].image, counter, 8, 0);
                    self.targets[t].locks.push(self.locks.len());
                    self.locks.push(Lock {
                        t,
                        cell,
                        counter,
                        attempts: 0,
                        grants: 0,
                        releases: 0,
                        reads: Vec::new(),
                    });
                }
            }
        }
    }

    fn addr(&self, t: usize, off: u64) -> GlobalAddr {
        let target = &self.targets[t];
        GlobalAddr::new(target.pe, target.seg, off).expect("address in range")
    }

    fn draft(&self, t: usize, off: u64, body: Body, category: &'static str) -> Draft {
        Draft {
            peer: self.targets[t].peer,
            addr: self.addr(t, off),
            body,
            refuse: None,
            category,
        }
    }

    /// A value no earlier operand had, valid for `ty` and never 0.
    fn unique(&mut self, ty: AtomicType) -> u64 {
        self.uniq += 1;
        let n = self.uniq;
        match ty {
            AtomicType::F32 => u64::from((n as f32 + 0.25).to_bits()),
            AtomicType::F64 => (n as f64 + 0.25).to_bits(),
            _ => n,
        }
    }

    /// The next operation `me` should start: follow-ups first, then the workload.
    fn next_draft(&mut self, me: usize) -> Option<Draft> {
        if let Some(d) = self.urgent[me].pop_front() {
            return Some(d);
        }
        if self.generated[me] == self.quota {
            return None;
        }
        self.generated[me] += 1;
        let d = self.generate(me);
        if d.refuse.is_some() {
            self.bad_ops[me] += 1;
        }
        Some(d)
    }

    fn generate(&mut self, me: usize) -> Draft {
        // A PE on another peer.
        let peer = (me + 1 + self.rng.below(PEERS as u64 - 1) as usize) % PEERS;
        let t = peer * PES_PER_PEER * SEGS_PER_PE
            + self.rng.below((PES_PER_PEER * SEGS_PER_PE) as u64) as usize;
        let draft = match self.rng.below(1000) {
            0..280 => self.gen_write(t),
            280..520 => Some(self.gen_read(t)),
            520..540 => Some(self.gen_fetch_const(t)),
            540..640 => Some(self.gen_chain(t)),
            640..720 => Some(self.gen_sum(t)),
            720..800 => self.gen_bits(t),
            800..850 => Some(self.gen_swap(t)),
            850..880 => self.gen_set_once(t),
            880..940 => self.gen_token(t),
            940..990 => Some(self.gen_lock(t)),
            _ => Some(self.gen_bad(t)),
        };
        // A full area (write space, set-once words, tokens, bits) falls back to a read.
        let draft = draft.unwrap_or_else(|| self.gen_read(t));
        *self.categories.entry(draft.category).or_default() += 1;
        draft
    }

    fn gen_write(&mut self, t: usize) -> Option<Draft> {
        let len = transfer_len(&mut self.rng, 32);
        let off = self.targets[t].write_cursor;
        if off + u64::from(len) > SEG_LEN - TAIL_GUARD {
            return None;
        }
        // Gaps of 0..7 bytes vary the alignment of the next block.
        self.targets[t].write_cursor = off + u64::from(len) + self.rng.below(8);
        let payload: Vec<u8> = (0..len).map(|_| self.rng.next() as u8).collect();
        let image = &mut self.targets[t].image;
        image[off as usize..off as usize + len as usize].copy_from_slice(&payload);
        let category = if len <= 32 {
            "write inline"
        } else {
            "write bulk"
        };
        let check = WriteCheck::Block { t, off };
        Some(self.draft(t, off, Body::Write { payload, check }, category))
    }

    fn gen_read(&mut self, t: usize) -> Draft {
        let len = transfer_len(&mut self.rng, 56);
        let written = &self.targets[t].written;
        let (off, len) = if written.is_empty() || self.rng.below(2) == 0 {
            let len = u64::from(len).min(CONST_END);
            (self.rng.below(CONST_END - len + 1), len)
        } else {
            let (o, l) = written[self.rng.below(written.len() as u64) as usize];
            let len = len.min(l);
            (o + self.rng.below(u64::from(l - len) + 1), u64::from(len))
        };
        let category = if len <= 56 {
            "read inline"
        } else {
            "read bulk"
        };
        let check = ReadCheck::Image { t, off };
        let len = len as u32;
        self.draft(t, off, Body::Read { len, check }, category)
    }

    fn gen_fetch_const(&mut self, t: usize) -> Draft {
        let ty = TYPES[self.rng.below(6) as usize];
        let w = width(ty) as u64;
        let off = w * self.rng.below(CONST_END / w);
        let expect = get(&self.targets[t].image, off, w as usize);
        let body = amo(desc(AtomicOp::Fetch, ty), 0, AmoCheck::Const { expect });
        self.draft(t, off, body, "amo fetch")
    }

    fn gen_chain(&mut self, t: usize) -> Draft {
        let cell = pick(&mut self.rng, &self.targets[t].chain);
        let Cell { off, ty, .. } = self.cells[cell];
        let (op, operand, inc) = if self.rng.below(2) == 0 {
            let inc = self.rng.range(1, 1000);
            (AtomicOp::FetchAdd, inc, inc)
        } else {
            (AtomicOp::FetchInc, 0, 1)
        };
        let w = width(ty);
        let image = &mut self.targets[t].image;
        let old = get(image, off, w);
        put(image, off, w, old.wrapping_add(inc) & mask(ty));
        let check = AmoCheck::Record { cell, operand: inc };
        let body = amo(desc(op, ty), operand, check);
        self.draft(t, off, body, "amo fetch-add/inc")
    }

    fn gen_sum(&mut self, t: usize) -> Draft {
        let cell = pick(&mut self.rng, &self.targets[t].sum);
        let Cell { off, ty, .. } = self.cells[cell];
        let (op, operand, inc) = if self.rng.below(2) == 0 {
            let x = self.rng.next() & mask(ty);
            (AtomicOp::Add, x, x)
        } else {
            (AtomicOp::Inc, 0, 1)
        };
        let w = width(ty);
        let image = &mut self.targets[t].image;
        let old = get(image, off, w);
        put(image, off, w, old.wrapping_add(inc) & mask(ty));
        let body = amo(desc(op, ty), operand, AmoCheck::Blind);
        self.draft(t, off, body, "amo add/inc")
    }

    fn gen_bits(&mut self, t: usize) -> Option<Draft> {
        let target = &mut self.targets[t];
        let &cell = target.bits.get(target.bit_cell)?;
        let c = &mut self.cells[cell];
        let bits = 8 * width(c.ty) as u32;
        let bit = 1u64 << c.next_bit;
        c.next_bit += 1;
        if c.next_bit == bits {
            target.bit_cell += 1;
        }
        let (off, ty, init) = (c.off, c.ty, c.init);
        let set = init & bit != 0;
        // Each op flips its bit: AND clears a set bit, OR sets a clear one, XOR toggles.
        let (op, operand) = match (set, self.rng.below(4)) {
            (true, 0) => (AtomicOp::And, !bit & mask(ty)),
            (true, 1) => (AtomicOp::FetchAnd, !bit & mask(ty)),
            (false, 0) => (AtomicOp::Or, bit),
            (false, 1) => (AtomicOp::FetchOr, bit),
            (_, 2) => (AtomicOp::Xor, bit),
            _ => (AtomicOp::FetchXor, bit),
        };
        let w = width(ty);
        let image = &mut self.targets[t].image;
        let old = get(image, off, w);
        put(image, off, w, old ^ bit);
        let d = desc(op, ty);
        let check = if d.fetches() {
            AmoCheck::Record { cell, operand: bit }
        } else {
            AmoCheck::Blind
        };
        let body = amo(d, operand, check);
        Some(self.draft(t, off, body, "amo and/or/xor"))
    }

    fn gen_swap(&mut self, t: usize) -> Draft {
        let cell = pick(&mut self.rng, &self.targets[t].swap);
        let (off, ty) = (self.cells[cell].off, self.cells[cell].ty);
        let operand = self.unique(ty);
        self.cells[cell].operands.push(operand);
        let check = AmoCheck::Record { cell, operand };
        let body = amo(desc(AtomicOp::Swap, ty), operand, check);
        self.draft(t, off, body, "amo swap")
    }

    fn gen_set_once(&mut self, t: usize) -> Option<Draft> {
        let target = &mut self.targets[t];
        let &cell = target.set_once.get(target.set_next)?;
        target.set_next += 1;
        let (off, ty) = (self.cells[cell].off, self.cells[cell].ty);
        let operand = self.unique(ty);
        put(&mut self.targets[t].image, off, width(ty), operand);
        let body = amo(desc(AtomicOp::Set, ty), operand, AmoCheck::Blind);
        Some(self.draft(t, off, body, "amo set"))
    }

    fn gen_token(&mut self, t: usize) -> Option<Draft> {
        let target = &mut self.targets[t];
        let &cell = target.tokens.get(target.token_next)?;
        target.token_uses += 1;
        if target.token_uses == TOKEN_ATTEMPTS {
            target.token_next += 1;
            target.token_uses = 0;
        }
        let (off, ty) = (self.cells[cell].off, self.cells[cell].ty);
        let operand = self.unique(ty);
        self.cells[cell].operands.push(operand);
        let body = Body::Atomic {
            desc: desc(AtomicOp::CompareSwap, ty),
            operand,
            comparand: 0,
            check: AmoCheck::Record { cell, operand },
        };
        Some(self.draft(t, off, body, "amo compare-swap token"))
    }

    fn gen_lock(&mut self, t: usize) -> Draft {
        let lock = pick(&mut self.rng, &self.targets[t].locks);
        self.locks[lock].attempts += 1;
        let Cell { off, ty, .. } = self.cells[self.locks[lock].cell];
        let value = self.unique(ty);
        let body = Body::Atomic {
            desc: desc(AtomicOp::CompareSwap, ty),
            operand: value,
            comparand: 0,
            check: AmoCheck::LockAcquire { lock, value },
        };
        self.draft(t, off, body, "lock acquire")
    }

    /// Requests the service must refuse without touching memory.
    fn gen_bad(&mut self, t: usize) -> Draft {
        let pe = self.targets[t].pe;
        let at = |seg: u8, off: u64| GlobalAddr::new(pe, seg, off).unwrap();
        let (addr, body, code) = match self.rng.below(6) {
            0 => (
                at(0, SEG_LEN - 4),
                Body::Read {
                    len: 8,
                    check: ReadCheck::Refused,
                },
                ErrorCode::OutOfBounds,
            ),
            1 => (
                at(5, 64),
                Body::Write {
                    payload: vec![0xee; 8],
                    check: WriteCheck::Refused,
                },
                ErrorCode::NoSegment,
            ),
            2 => (
                at(0, 12),
                Body::Atomic {
                    desc: desc(AtomicOp::FetchAdd, AtomicType::U64),
                    operand: 1,
                    comparand: 0,
                    check: AmoCheck::Refused,
                },
                ErrorCode::Misaligned,
            ),
            3 => (
                at(1, SEG_LEN - 1000),
                Body::Write {
                    payload: vec![0xee; 3000],
                    check: WriteCheck::Refused,
                },
                ErrorCode::OutOfBounds,
            ),
            4 => (
                at(0, SEG_LEN - 100),
                Body::Read {
                    len: 2000,
                    check: ReadCheck::Refused,
                },
                ErrorCode::OutOfBounds,
            ),
            _ => (
                GlobalAddr::new(999, 0, 0).unwrap(),
                Body::Atomic {
                    desc: desc(AtomicOp::Inc, AtomicType::I32),
                    operand: 0,
                    comparand: 0,
                    check: AmoCheck::Refused,
                },
                ErrorCode::NoSegment,
            ),
        };
        Draft {
            peer: self.targets[t].peer,
            addr,
            body,
            refuse: Some(code),
            category: "refused",
        }
    }

    /// Records a started operation.
    fn started(&mut self, issuer: usize, ctx: usize, handle: OpHandle, draft: Draft) {
        let len = match draft.body {
            Body::Read { len, .. } => len as usize,
            _ => 0,
        };
        self.ops.push(OpRec {
            issuer,
            ctx,
            handle,
            draft,
            completions: 0,
            buf: vec![0; len],
            got: vec![false; len],
        });
    }

    fn on_data(&mut self, tag: u64, ctx: usize, offset: u32, data: &[u8]) {
        let rec = &mut self.ops[tag as usize];
        assert_eq!(rec.ctx, ctx, "op {tag}: data for the wrong context");
        assert!(
            matches!(rec.draft.body, Body::Read { .. }) && rec.draft.refuse.is_none(),
            "op {tag}: data for {:?}",
            rec.draft
        );
        let range = offset as usize..offset as usize + data.len();
        assert!(range.end <= rec.buf.len(), "op {tag}: data past the end");
        for i in range.clone() {
            assert!(!rec.got[i], "op {tag}: byte {i} delivered twice");
            rec.got[i] = true;
        }
        rec.buf[range].copy_from_slice(data);
    }

    fn on_done(
        &mut self,
        tag: u64,
        ctx: usize,
        kind: OpKind,
        result: Result<Option<u64>, OpError>,
    ) {
        let id = tag as usize;
        let rec = &mut self.ops[id];
        rec.completions += 1;
        assert_eq!(
            rec.completions, 1,
            "op {id} completed twice: {:?}",
            rec.draft
        );
        assert_eq!(
            (ctx, kind),
            (rec.ctx, rec.draft.kind()),
            "op {id}: context and kind"
        );
        self.completed += 1;
        let issuer = rec.issuer;
        if let Some(code) = rec.draft.refuse {
            assert_eq!(
                result,
                Err(OpError::Remote(code)),
                "op {id}: {:?}",
                rec.draft
            );
            assert!(
                !rec.got.contains(&true),
                "op {id}: refused read delivered data"
            );
            return;
        }
        let value = result.unwrap_or_else(|e| panic!("op {id} failed: {e} ({:?})", rec.draft));
        let buf = std::mem::take(&mut rec.buf);
        let got = std::mem::take(&mut rec.got);
        match &mut rec.draft.body {
            Body::Read { len, check } => {
                assert_eq!(value, None);
                assert!(
                    got.iter().all(|&b| b),
                    "op {id}: read of {len} bytes incomplete"
                );
                match *check {
                    ReadCheck::Image { t, off } => {
                        let want = &self.targets[t].image[off as usize..off as usize + buf.len()];
                        assert!(
                            buf == want,
                            "op {id}: read {len} bytes at {off} of target {t}"
                        );
                    }
                    ReadCheck::LockCounter { lock, value } => {
                        let counter = u64::from_le_bytes(buf[..8].try_into().unwrap());
                        self.locks[lock].reads.push(counter);
                        let l = &self.locks[lock];
                        let payload = (counter + 1).to_le_bytes().to_vec();
                        let check = WriteCheck::LockCounter { lock, value };
                        let d = self.draft(
                            l.t,
                            l.counter,
                            Body::Write { payload, check },
                            "lock write",
                        );
                        self.urgent[issuer].push_back(d);
                    }
                    ReadCheck::Refused => unreachable!("refusals are handled above"),
                }
            }
            Body::Write { payload, check } => {
                assert_eq!(value, None);
                let len = payload.len() as u32;
                *payload = Vec::new();
                match *check {
                    WriteCheck::Block { t, off } => self.targets[t].written.push((off, len)),
                    WriteCheck::LockCounter { lock, value } => {
                        let l = &self.locks[lock];
                        let Cell { off, ty, .. } = self.cells[l.cell];
                        let body = Body::Atomic {
                            desc: desc(AtomicOp::CompareSwap, ty),
                            operand: 0,
                            comparand: value,
                            check: AmoCheck::LockRelease { lock, value },
                        };
                        let d = self.draft(l.t, off, body, "lock release");
                        self.urgent[issuer].push_back(d);
                    }
                    WriteCheck::Refused => unreachable!("refusals are handled above"),
                }
            }
            Body::Atomic { desc, check, .. } => {
                assert_eq!(
                    value.is_some(),
                    desc.fetches(),
                    "op {id}: {desc:?} result {value:?}"
                );
                let old = value.unwrap_or(0);
                assert_eq!(
                    old & !desc.operand_mask(),
                    0,
                    "op {id}: 32-bit value zero-extended"
                );
                match *check {
                    AmoCheck::Const { expect } => assert_eq!(old, expect, "op {id}: fetch"),
                    AmoCheck::Record { cell, operand } => {
                        self.cells[cell].fetched.push((operand, old));
                    }
                    AmoCheck::Blind => {}
                    AmoCheck::LockAcquire { lock, value } => {
                        if old == 0 {
                            self.locks[lock].grants += 1;
                            let l = &self.locks[lock];
                            let check = ReadCheck::LockCounter { lock, value };
                            let d = self.draft(
                                l.t,
                                l.counter,
                                Body::Read { len: 8, check },
                                "lock read",
                            );
                            self.urgent[issuer].push_back(d);
                        } else {
                            assert_ne!(old, value, "op {id}: lock value reused");
                        }
                    }
                    AmoCheck::LockRelease { lock, value } => {
                        assert_eq!(
                            old, value,
                            "op {id}: the lock holder's value was overwritten"
                        );
                        self.locks[lock].releases += 1;
                    }
                    AmoCheck::Refused => unreachable!("refusals are handled above"),
                }
            }
        }
    }

    fn finished(&self) -> bool {
        self.generated.iter().all(|&g| g == self.quota)
            && self.urgent.iter().all(VecDeque::is_empty)
            && self.completed == self.ops.len()
    }

    /// Checks the fetched values of every atomic word and completes the reference image
    /// with the values only the run decides (swap and token winners, lock counters).
    fn check_atomics(&mut self, memories: &[Vec<AtomicU64>]) {
        for (i, c) in self.cells.iter().enumerate() {
            let w = width(c.ty);
            let m = mask(c.ty);
            let image = &mut self.targets[c.t].image;
            match c.role {
                Role::Chain => {
                    let mut f = c.fetched.clone();
                    f.sort_by_key(|&(_, old)| old);
                    let mut expect = c.init;
                    for &(inc, old) in &f {
                        assert_eq!(old, expect, "cell {i}: fetch-add results are not a chain");
                        expect = (expect + inc) & m;
                    }
                    assert_eq!(get(image, c.off, w), expect, "cell {i}: chain end");
                }
                Role::Bits => {
                    let all = (c.next_bit < 64).then(|| (1u64 << c.next_bit) - 1);
                    let assigned = all.unwrap_or(u64::MAX);
                    let mut flips: Vec<u64> = c
                        .fetched
                        .iter()
                        .map(|&(bit, old)| {
                            let flipped = (old ^ c.init) & m;
                            assert_eq!(flipped & bit, 0, "cell {i}: saw its own flip before it");
                            assert_eq!(flipped & !assigned, 0, "cell {i}: unknown bits flipped");
                            flipped
                        })
                        .collect();
                    flips.sort_by_key(|f| f.count_ones());
                    for pair in flips.windows(2) {
                        assert_eq!(
                            pair[0] & !pair[1],
                            0,
                            "cell {i}: fetched bit sets not nested"
                        );
                    }
                    assert_eq!(get(image, c.off, w), (c.init ^ assigned) & m, "cell {i}");
                }
                Role::Swap => {
                    assert_eq!(c.fetched.len(), c.operands.len(), "cell {i}: swaps done");
                    let t = &self.targets[c.t];
                    let fin = load(&memories[t.peer], t.base + c.off as usize, w);
                    let image = &mut self.targets[c.t].image;
                    let mut before: Vec<u64> = c.operands.clone();
                    before.push(c.init);
                    let mut after: Vec<u64> = c.fetched.iter().map(|&(_, old)| old).collect();
                    after.push(fin);
                    before.sort_unstable();
                    after.sort_unstable();
                    assert_eq!(
                        before, after,
                        "cell {i}: swap results are not a permutation"
                    );
                    put(image, c.off, w, fin);
                }
                Role::Token => {
                    assert_eq!(c.fetched.len(), c.operands.len(), "cell {i}: attempts done");
                    if c.fetched.is_empty() {
                        continue;
                    }
                    let winners: Vec<u64> = c
                        .fetched
                        .iter()
                        .filter(|&&(_, old)| old == 0)
                        .map(|&(v, _)| v)
                        .collect();
                    assert_eq!(
                        winners.len(),
                        1,
                        "cell {i}: token granted {} times",
                        winners.len()
                    );
                    for &(v, old) in &c.fetched {
                        assert!(
                            v == winners[0] || old == winners[0],
                            "cell {i}: loser saw {old:#x}"
                        );
                    }
                    put(image, c.off, w, winners[0]);
                }
                Role::Sum | Role::SetOnce | Role::Lock => {}
            }
        }
        for (i, l) in self.locks.iter().enumerate() {
            let mut reads = l.reads.clone();
            reads.sort_unstable();
            assert!(
                reads.iter().copied().eq(0..l.grants),
                "lock {i}: counters read under the lock {reads:?} for {} grants",
                l.grants
            );
            assert_eq!(l.releases, l.grants, "lock {i}: every grant released");
            put(&mut self.targets[l.t].image, l.counter, 8, l.grants);
        }
    }
}

/// Starts `draft` as operation `id`.
fn issue<T: Transport<Peer = usize>>(
    client: &mut Cli,
    node: &mut T,
    id: usize,
    draft: &Draft,
) -> Result<gsas_core::client::Issued, ClientError> {
    let (peer, ctx, tag, addr) = (draft.peer, id % CTXS, id as u64, draft.addr);
    match &draft.body {
        Body::Read { len, .. } => client.read(node, peer, ctx, tag, addr, *len as usize),
        Body::Write { payload, .. } => client.write(node, peer, ctx, tag, addr, payload),
        Body::Atomic {
            desc,
            operand,
            comparand,
            ..
        } => client.atomic(node, peer, ctx, tag, addr, *desc, *operand, *comparand),
    }
}

/// Executes one request and sends the reply (lazily when it may wait, as the runtime's
/// service does); false when the transport pushed back (nothing executed: try again later).
fn serve<T: Transport<Peer = usize>>(
    service: &mut Engine<'_>,
    node: &mut T,
    from: usize,
    packet: &[u8],
) -> bool {
    // The core's one-shot serve (prepare, then execute into the transport's slot).
    match service.serve(node, from, KEY, packet) {
        Ok(Handled::Replied(_)) => true,
        Err(TransportError::WouldBlock) => false,
        Ok(other) => panic!("request from peer {from} not a memory request: {other:?}"),
        Err(e) => panic!("reply to peer {from} failed: {e}"),
    }
}

struct Storage {
    hold: Vec<u8>,
    buffers: Vec<u8>,
    peers: Vec<PeerSlot<usize, W>>,
}

fn faults(seed: u64) -> FaultConfig {
    FaultConfig {
        drop_ppm: PPM / 10,
        duplicate_ppm: PPM / 20,
        reorder_ppm: PPM / 10,
        reorder_window: 8,
        on_send: true,
        on_recv: false,
        ..FaultConfig::none(seed)
    }
}

/// Timers in simulated time: acks within 20 us, timeouts from 100 us.
fn config(epoch: u64) -> Config {
    Config {
        ack_delay_ns: 20_000,
        min_rto_ns: 100_000,
        initial_rto_ns: 200_000,
        max_rto_ns: 2_000_000,
        deadline_ns: 1_000_000_000,
        ..Config::new(epoch)
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|e| panic!("{name}={s:?} is not an unsigned integer: {e}")),
        Err(_) => default,
    }
}

/// One peer's share of a round of [`simulate`]: its node, client and service, and its
/// entries of the per-peer state.
struct PeerTurn<'p, 'a, 'h, 's, 'm> {
    me: usize,
    node: &'p mut Node<'a, 'h, 's>,
    client: &'p mut Cli,
    service: &'p mut Engine<'m>,
    /// Requests whose reply the transport refused earlier.
    deferred: &'p mut VecDeque<(usize, Vec<u8>)>,
    /// The service's counts inflated by serving deferred requests again: (requests, refusals).
    recounted: &'p mut (u64, u64),
    packets: &'p mut u64,
    /// Bulk writes with fragments left.
    resume: &'p mut Vec<usize>,
    /// An operation the client could not start yet.
    next: &'p mut Option<Draft>,
}

/// A completion as the client reports it: tag, context, kind, result.
type Done = (u64, usize, OpKind, Result<Option<u64>, OpError>);

impl PeerTurn<'_, '_, '_, '_, '_> {
    /// Polls the node, serves deferred requests, continues and starts operations, and
    /// handles everything that arrived. `backlog` counts deferrals (total, largest queue).
    fn turn(
        self,
        sim: &mut Sim,
        now: u64,
        scratch: &mut Vec<u8>,
        events: &mut Vec<Done>,
        backlog: &mut (u64, usize),
    ) {
        let PeerTurn {
            me,
            node,
            client,
            service,
            deferred,
            recounted,
            packets,
            resume,
            next,
        } = self;
        node.poll(now).unwrap();

        // Requests whose reply the transport refused earlier.
        if !deferred.is_empty() {
            let before = (
                service.stats().total_requests(),
                service.stats().total_refusals(),
            );
            for _ in 0..deferred.len() {
                let (from, packet) = deferred.pop_front().unwrap();
                if !serve(service, node, from, &packet) {
                    deferred.push_back((from, packet));
                }
            }
            let stats = service.stats();
            recounted.0 += stats.total_requests() - before.0;
            recounted.1 += stats.total_refusals() - before.1;
        }

        // Continue bulk writes and reads that have fragments left.
        let ops = &mut sim.ops;
        resume.retain(|&id| {
            let rec = &ops[id];
            let Body::Write { payload, .. } = &rec.draft.body else {
                unreachable!("only writes are resumed")
            };
            if rec.completions > 0 {
                return false;
            }
            match client.resume(node, rec.handle, payload) {
                Ok(issued) => {
                    *packets += u64::from(issued.packets);
                    !issued.all_sent
                }
                Err(e) => panic!("resume of op {id}: {e}"),
            }
        });
        *packets += u64::from(client.pump(node).unwrap());

        // New operations.
        for _ in 0..ISSUE_BURST {
            let Some(draft) = next.take().or_else(|| sim.next_draft(me)) else {
                break;
            };
            let id = sim.ops.len();
            match issue(client, node, id, &draft) {
                Ok(issued) => {
                    *packets += u64::from(issued.packets);
                    // Reads with fragments left are continued by `pump`.
                    if !issued.all_sent && draft.kind() == OpKind::Write {
                        resume.push(id);
                    }
                    sim.started(me, id % CTXS, issued.handle, draft);
                }
                Err(ClientError::Busy | ClientError::WouldBlock) => {
                    *next = Some(draft);
                    break;
                }
                Err(e) => panic!("peer {me} could not start {draft:?}: {e}"),
            }
        }
        node.flush().unwrap();

        // Everything that arrived: replies to the client, requests to the service.
        while let Some(from) = node
            .recv(|from, data| {
                scratch.clear();
                scratch.extend_from_slice(data);
                from
            })
            .unwrap()
        {
            if peek_type(scratch).is_some_and(|t| t.is_reply()) {
                let outcome = client.handle_reply(scratch, |c| match c {
                    Completion::Data {
                        tag,
                        ctx,
                        offset,
                        data,
                    } => sim.on_data(tag, ctx, offset, data),
                    Completion::Done {
                        tag,
                        ctx,
                        kind,
                        result,
                    } => events.push((tag, ctx, kind, result)),
                });
                assert!(
                    matches!(outcome, gsas_core::client::ReplyOutcome::Matched { .. }),
                    "peer {me}: reply from {from} not matched: {outcome:?}"
                );
                for (tag, ctx, kind, result) in events.drain(..) {
                    let handle = sim.ops[tag as usize].handle;
                    assert!(!client.is_pending(handle), "op {tag} pending after Done");
                    sim.on_done(tag, ctx, kind, result);
                }
            } else if !serve(service, node, from, scratch) {
                deferred.push_back((from, scratch.clone()));
                backlog.0 += 1;
                backlog.1 = backlog.1.max(deferred.len());
            }
        }
        node.flush().unwrap();
    }
}

/// The final memory: the atomics analysed, then every byte of every target against the
/// reference model, and every guard word untouched.
fn check_final_memory(sim: &mut Sim, memories: &[Vec<AtomicU64>]) {
    sim.check_atomics(memories);
    for (i, t) in sim.targets.iter().enumerate() {
        let words = &memories[t.peer][t.base / 8..(t.base + SEG_LEN as usize) / 8];
        for (k, (word, want)) in words.iter().zip(t.image.chunks_exact(8)).enumerate() {
            let got = word.load(Mem::Relaxed).to_le_bytes();
            if got[..] != want[..] {
                let b = (0..8).find(|&b| got[b] != want[b]).unwrap_or(0);
                panic!(
                    "target {i} (PE {} segment {}): memory differs from the model at byte {}: \
                     {:#04x} != {:#04x}",
                    t.pe,
                    t.seg,
                    8 * k + b,
                    got[b],
                    want[b]
                );
            }
        }
    }
    for (peer, words) in memories.iter().enumerate() {
        for local in 0..=PES_PER_PEER * SEGS_PER_PE {
            let start = local * (SEG_LEN as usize + GUARD) / 8;
            for w in &words[start..start + GUARD / 8] {
                assert_eq!(
                    w.load(Mem::Relaxed),
                    GUARD_WORD,
                    "peer {peer}: guard word changed"
                );
            }
        }
    }
}

/// The service engine of each peer, with the segments of its targets registered.
fn services_for<'m>(sim: &Sim, memories: &'m [Vec<AtomicU64>]) -> Vec<Engine<'m>> {
    memories
        .iter()
        .enumerate()
        .map(|(peer, words)| {
            let id = SenderId::new(100 + peer as u64).unwrap();
            let mut service = Service::new(id, WordMemory::new(words));
            for target in sim.targets.iter().filter(|t| t.peer == peer) {
                let seg = Segment {
                    job: 1,
                    key: KEY,
                    pe: target.pe,
                    segment: target.seg,
                    base: target.base,
                    len: SEG_LEN,
                };
                service.register(seg).unwrap();
            }
            service
        })
        .collect()
}

/// Every client started and completed its operations, sent the packets counted, and is
/// quiet; no service dropped a packet; no peer failed; and every request packet reached a
/// service exactly once. Returns the request packets executed.
fn check_counts(
    sim: &Sim,
    clients: &[Cli],
    services: &[Engine<'_>],
    nodes: &mut [Node<'_, '_, '_>],
    packets: &[u64],
    recounted: &[(u64, u64)],
) -> u64 {
    let mut sent_total = 0;
    let mut executed_total = 0;
    for me in 0..PEERS {
        let c = clients[me].stats();
        let mine = sim.ops.iter().filter(|r| r.issuer == me).count() as u64;
        assert_eq!(
            (c.started, c.completed),
            (mine, mine),
            "peer {me}: client counts"
        );
        assert_eq!(
            (c.stale, c.malformed, c.bad_replies),
            (0, 0, 0),
            "peer {me}: replies"
        );
        assert_eq!(c.packets_sent, packets[me], "peer {me}: packets");
        assert_eq!(clients[me].in_flight(), 0);
        assert!(
            (0..CTXS).all(|ctx| clients[me].outstanding(ctx) == 0),
            "quiet on every context"
        );
        let s = services[me].stats();
        assert_eq!(s.dropped(), 0, "peer {me}: service dropped packets");
        sent_total += c.packets_sent;
        executed_total += s.total_requests() - recounted[me].0;
        assert_eq!(
            nodes[me].next_event(),
            None,
            "peer {me}: no peer failed or restarted"
        );
    }
    assert_eq!(
        executed_total, sent_total,
        "every request packet reached a service exactly once"
    );
    executed_total
}

/// Prints each peer's reliability, fault and service counts; returns the totals of frames
/// sent, retransmissions, duplicates dropped, reply-cache hits, frames dropped and
/// duplicated by the faults.
fn report_peers(
    nodes: &[Node<'_, '_, '_>],
    services: &[Engine<'_>],
    clients: &[Cli],
    recounted: &[(u64, u64)],
) -> [u64; 6] {
    let mut totals = [0u64; 6];
    for (i, node) in nodes.iter().enumerate() {
        let r = node.stats();
        let f = node.inner().stats();
        let s = services[i].stats();
        eprintln!(
            "sim peer {i}: frames sent {} retransmitted {} | duplicates dropped {} | \
             reply-cache hits {} | pure acks {} | faults: dropped {} duplicated {} reordered {} \
             | service requests {} refused {} | client packets {}",
            r.frames_sent,
            r.retransmissions,
            r.duplicates,
            r.reply_cache_hits,
            r.acks_sent,
            f.dropped,
            f.duplicated,
            f.reordered,
            s.total_requests() - recounted[i].0,
            s.total_refusals() - recounted[i].1,
            clients[i].stats().packets_sent
        );
        for (t, v) in totals.iter_mut().zip([
            r.frames_sent,
            r.retransmissions,
            r.duplicates,
            r.reply_cache_hits,
            f.dropped,
            f.duplicated,
        ]) {
            *t += v;
        }
    }
    totals
}

fn simulate(seed: u64, total_ops: usize) {
    let wall = Instant::now();
    let (mut sim, memories) = Sim::new(seed, total_ops);
    let mut services = services_for(&sim, &memories);
    let mut clients: Vec<Cli> = (0..PEERS)
        .map(|peer| Client::new(SenderId::new(1 + peer as u64).unwrap()))
        .collect();

    let mut net = vec![0u8; PEERS * 128 * (MTU + 8)];
    let link = LoopbackConfig {
        mtu: MTU,
        max_inline: MAX_INLINE,
        ordering: Ordering::PerPeer,
    };
    let hub = LoopbackHub::<PEERS>::new(link, &mut net).unwrap();
    let mut storage: Vec<Storage> = (0..PEERS)
        .map(|_| Storage {
            hold: vec![0u8; (HELD + 1) * MTU],
            buffers: vec![0u8; buffer_len(MTU, MTU, PEERS * W + 1)],
            peers: vec![PeerSlot::new(); PEERS],
        })
        .collect();
    let mut nodes: Vec<Node<'_, '_, '_>> = storage
        .iter_mut()
        .enumerate()
        .map(|(i, s)| {
            let inj = FaultInjector::new(
                hub.endpoint(i).unwrap(),
                faults(seed ^ mix(i as u64)),
                &mut s.hold,
            )
            .unwrap();
            // Epochs whose low 32 bits start the sequence numbers 16384 frames before the
            // wrap: every peer's numbers wrap during the run.
            let epoch = ((i as u64 + 1) << 32) | 0xffff_c000;
            Reliable::new(inj, config(epoch), &mut s.peers, &mut s.buffers).unwrap()
        })
        .collect();
    let setup = wall.elapsed();
    let caps = nodes[0].capabilities();
    assert_eq!((caps.max_inline, caps.mtu), (MAX_INLINE, MTU - 42));

    let mut deferred: Vec<VecDeque<(usize, Vec<u8>)>> = vec![VecDeque::new(); PEERS];
    // Counts of the service engines inflated by preparing deferred requests again:
    // (requests, refusals) per peer.
    let mut recounted = [(0u64, 0u64); PEERS];
    // Replies deferred by back-pressure: (total, largest queue).
    let mut backlog = (0u64, 0usize);
    let mut packets = [0u64; PEERS];
    let mut resume: Vec<Vec<usize>> = vec![Vec::new(); PEERS];
    let mut next: Vec<Option<Draft>> = vec![None; PEERS];
    let mut scratch: Vec<u8> = Vec::with_capacity(MTU);
    let mut events = Vec::new();
    let mut now = 0u64;
    let mut rounds = 0u64;
    loop {
        let quiet = deferred.iter().all(VecDeque::is_empty)
            && next.iter().all(Option::is_none)
            && nodes
                .iter()
                .enumerate()
                .all(|(i, n)| (0..PEERS).all(|p| p == i || n.in_flight(p) == 0));
        if quiet && sim.finished() {
            break;
        }
        rounds += 1;
        now += TICK_NS;
        assert!(
            now < MAX_SIM_NS,
            "no progress after {rounds} rounds: {} of {} operations completed, generated {:?}, \
             in flight {:?}, deferred replies {:?}",
            sim.completed,
            sim.ops.len(),
            sim.generated,
            clients.iter().map(Cli::in_flight).collect::<Vec<_>>(),
            deferred.iter().map(VecDeque::len).collect::<Vec<_>>()
        );
        for me in 0..PEERS {
            let peer = PeerTurn {
                me,
                node: &mut nodes[me],
                client: &mut clients[me],
                service: &mut services[me],
                deferred: &mut deferred[me],
                recounted: &mut recounted[me],
                packets: &mut packets[me],
                resume: &mut resume[me],
                next: &mut next[me],
            };
            peer.turn(&mut sim, now, &mut scratch, &mut events, &mut backlog);
        }
    }

    let ran = wall.elapsed();
    // Every operation completed exactly once (on_done asserts "at most once").
    assert!(sim.ops.iter().all(|r| r.completions == 1));
    let workload = sim.generated.iter().sum::<usize>();
    assert!(workload >= total_ops);
    let executed_total = check_counts(&sim, &clients, &services, &mut nodes, &packets, &recounted);
    let refusals: u64 = services
        .iter()
        .zip(&recounted)
        .map(|(s, r)| s.stats().total_refusals() - r.1)
        .sum();
    let errors: u64 = clients.iter().map(|c| c.stats().remote_errors).sum();
    assert_eq!(refusals, errors, "every refusal answered once");
    assert!(refusals >= sim.bad_ops.iter().sum::<u64>());

    // Final memory: atomics analysed, then every byte against the reference model.
    check_final_memory(&mut sim, &memories);

    // Report.
    let totals = report_peers(&nodes, &services, &clients, &recounted);
    let mix: Vec<String> = sim
        .categories
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let grants: u64 = sim.locks.iter().map(|l| l.grants).sum();
    let attempts: u64 = sim.locks.iter().map(|l| l.attempts).sum();
    let fill = sim
        .targets
        .iter()
        .map(|t| t.write_cursor - ATOMIC_END)
        .max()
        .unwrap_or(0);
    eprintln!("sim workload: {}", mix.join(", "));
    eprintln!(
        "sim: {} operations ({workload} workload + {} lock follow-ups; {grants} of {attempts} \
         lock attempts granted), {executed_total} request packets, {refusals} refused; \
         {rounds} rounds, {} ms simulated; wall: setup {:.1} s, run {:.1} s, checks {:.1} s; largest write area use {} KiB; \
         {} replies deferred by back-pressure (at most {} at once)",
        sim.ops.len(),
        sim.ops.len() - workload,
        now / 1_000_000,
        setup.as_secs_f64(),
        (ran - setup).as_secs_f64(),
        (wall.elapsed() - ran).as_secs_f64(),
        fill / 1024,
        backlog.0,
        backlog.1
    );
    eprintln!(
        "sim totals: frames sent {} retransmissions {} duplicates dropped {} reply-cache hits {} \
         | injected: dropped {} duplicated {}",
        totals[0], totals[1], totals[2], totals[3], totals[4], totals[5]
    );
    assert!(totals[1] > 0 && totals[2] > 0, "the faults did bite");
}

#[test]
fn four_peers_mixed_operations_over_a_lossy_network() {
    let ops = env_u64("GSAS_SIM_OPS", 100_000) as usize;
    let seed = env_u64("GSAS_SIM_SEED", 0x6a5a_2024);
    simulate(seed, ops);
}
