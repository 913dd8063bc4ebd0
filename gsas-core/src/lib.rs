//! gsas-core: the `no_std`, allocation-free protocol core of gsas.
//!
//! **What it is.** Everything two gsas nodes must agree on, and the engines that speak it,
//! as plain code over caller-provided storage:
//!
//! * [`wire`]: the packet formats (requests, replies, bulk fragments) as zero-copy views
//!   and checked representations, in smoltcp's `wire` style;
//! * [`service`]: the atomic-service engine, which checks requests against registered
//!   segments and executes reads, writes and atomics through a [`service::Memory`];
//! * [`client`]: the client engine, which turns reads, writes, atomics and host requests
//!   into packets sized for a transport, matches replies by token and reassembles bulk data;
//! * [`reliable`]: exactly-once delivery over a transport that drops, duplicates and
//!   reorders (UDP), with a reply cache;
//! * [`transport`]: the [`Transport`](transport::Transport) trait every transport
//!   implements, and the test doubles [`loopback`](transport::loopback),
//!   [`fault`](transport::fault) and [`tracer`](transport::tracer);
//! * [`symheap`]: the deterministic symmetric-heap allocator (offsets, not pointers).
//!
//! **What it is not.** No I/O, no clock (time comes in through
//! [`Transport::poll`](transport::Transport::poll)), no environment or configuration files,
//! no threads, no heap allocation (but for the serve loop behind the `std` feature, and a
//! [`reliable::Reliable`] given owned [`reliable::Storage`] under `std`, which frees it and
//! splits its receive buffer off when built) and no `unsafe` code (`#![deny(unsafe_code)]`). Sockets,
//! UIO mappings, shared memory, the atomic-service daemon, bootstrap and launch belong to the
//! `gsas` runtime crate; the OpenSHMEM API to `shmem`; the Exanet NI driver to `exanet`.
//! Dependencies point down only: nothing here knows about those crates.
//!
//! **Thread safety.** Every engine ([`service::Service`], [`client::Client`],
//! [`reliable::Reliable`], [`symheap::SymHeap`], the transport doubles) is a plain value
//! mutated through `&mut self`, with no interior locking and no global state; each is `Send`
//! when its type parameters are. Run one engine per progress thread, or put it behind a
//! lock. The exceptions are deliberate and documented where they occur:
//! [`service::WordMemory`] is `Sync` (CPU atomics, so several service engines may share one
//! memory) and [`transport::loopback::LoopbackHub`] is `Sync` (a `spin::Mutex` per queue
//! that is only ever tried, never waited for). No method blocks: back-pressure is an explicit
//! `WouldBlock`/`Busy` result and the caller decides to poll, retry or move on.
//!
//! # Features
//!
//! Both are off by default and additive; no combination is invalid.
//!
//! | feature | effect |
//! |---|---|
//! | `std` | `std::error::Error` for the error types, and the serve loop [`Service::serve_port`](service::Service::serve_port) with its reply queue (the one part of the crate that allocates), and the `Owned` variant of [`reliable::Storage`]: a reliability layer that owns its peer table and buffer (`Vec`, `Box<[_]>`) instead of borrowing them. The engines are the same with or without it. |
//! | `defmt` | `defmt::Format` for the wire types (packet types, codes, addresses, descriptors, representations) and the status types (errors, counters, completions, events), for logging on embedded targets. |
//!
//! # Packet formats
//!
//! The tables in [`wire`] are normative; this is the summary. All integers are
//! little-endian and byte 0 of every packet is its [`PacketType`](wire::PacketType), so a
//! receiver demultiplexes on one byte (`0x01..=0x09` requests, `0x80..=0x83` replies).
//!
//! | format | bytes | layout | used by |
//! |---|---|---|---|
//! | request | 32 (+ payload) | w0: type, `sub`, sender id (48 bits); w1: [`GlobalAddr`](wire::GlobalAddr) (PE 16 / segment 8 / offset 40 bits); w2: length, operand or size; w3: token (low half) | READ, WRITE (+ 1.. bytes inline; with an attached signal, `sub` = SET/ADD and a 16-byte signal block first), ATOMIC (+ 8-byte comparand for compare-swap), ALLOC, FREE, CONTROL |
//! | bulk header | 32 + fragment | type, flags, sender; base address; total length (u32); fragment offset (u32); token; fragment length (u32) | BULK_READ (no payload), BULK_WRITE (the final fragment may carry a signal block, as WRITE), BULK_DATA, FORK |
//! | reply | 8 + 0..=56 | type, status ([`ErrorCode`](wire::ErrorCode) for ERROR), payload length, flags, token (u32) | ACK, DATA (read data, old value of a fetching atomic), ERROR |
//! | atomic descriptor | 1 (`sub`) | low nibble [`AtomicOp`](wire::AtomicOp) (14 operations), high nibble [`AtomicType`](wire::AtomicType) (I32, U32, I64, U64, F32, F64) | ATOMIC; WRITE and BULK_WRITE with a signal (u64 SET or ADD only) |
//! | signal block | 16 | signal word's global address; value | WRITE, final BULK_WRITE fragment ([`wire::Signal`]) |
//! | frame | 40 + packets | magic, version, flags, epochs, sequence number, base, cumulative + selective ack; then `[u16 length][packet]` repeated | [`reliable`] on an unreliable transport ([`reliable::frame`]) |
//!
//! Inline requests and replies fit one 64-byte Exanet mailbox slot; larger transfers are cut
//! into bulk fragments of up to `mtu - 32` bytes rounded down to a multiple of
//! [`wire::GRANULE`] (64), cut at target addresses that are multiples of it (so no aligned
//! element is split between two packets), each self-describing, so fragments may arrive
//! in any order. Parsing never panics on any input.
//!
//! # How the pieces fit
//!
//! ```text
//!  requester                                   target
//!  client::Client                              service::Service ──► service::Memory
//!   │ requests            ▲ Completion          ▲ requests    │ replies
//!   ▼                     │ Data / Done         │             ▼
//!  reliable::Reliable<T>  (over a lossy T)     reliable::Reliable<T>
//!   │                     ▲                     ▲             │
//!   ▼                     │                     │             ▼
//!  T: Transport ══════════════ network ═══════════════════ T: Transport
//! ```
//!
//! A client packs each operation into request packets written straight into transport slots
//! and keeps a token per packet. The transport carries them; over a lossy network
//! [`reliable::Reliable`] wraps the raw transport so that each request is delivered, and so
//! executed, exactly once. The host receiving a request picks the sender's job key and hands
//! the packet to [`service::Service`], which executes it on [`service::Memory`] and writes the
//! reply into a slot of the same transport; the requesting host gives replies to
//! [`client::Client::handle_reply`], which reports data and completions. One process may run
//! a client and a service on the same transport endpoint, demultiplexing on byte 0
//! ([`wire::peek_type`]). `tests/sim_lossy.rs` runs exactly this, four peers over a network
//! with 10% loss, duplicates and reordering, and checks every result.
//!
//! # Example
//!
//! A client and a service on the loopback double: a put and a fetch-add.
//!
//! ```
//! use core::sync::atomic::{AtomicU64, Ordering};
//! use gsas_core::client::{Client, Completion};
//! use gsas_core::service::{Segment, Service, WordMemory};
//! use gsas_core::transport::{Transport, loopback::{LoopbackConfig, LoopbackHub}};
//! use gsas_core::wire::{AtomicDesc, AtomicOp, AtomicType, GlobalAddr, SenderId};
//!
//! let mut storage = [0u8; 8 * 1024];
//! let hub = LoopbackHub::<2>::new(LoopbackConfig::new(256), &mut storage).unwrap();
//! let (mut here, mut there) = (hub.endpoint(0).unwrap(), hub.endpoint(1).unwrap());
//! let words: [AtomicU64; 8] = Default::default(); // the target's memory
//! let mut service: Service<_, 4> =
//!     Service::new(SenderId::new(100).unwrap(), WordMemory::new(&words));
//! service.register(Segment { job: 1, key: 7, pe: 0, segment: 0, base: 0, len: 64 }).unwrap();
//! let mut client: Client<usize, 16, 1> = Client::new(SenderId::new(1).unwrap());
//!
//! // Put 4 bytes at offset 8 of PE 0's segment 0, then fetch-add 5 at offset 24.
//! client.write(&mut here, 1, 0, 1, GlobalAddr::new(0, 0, 8).unwrap(), b"gsas").unwrap();
//! let add = AtomicDesc::new(AtomicOp::FetchAdd, AtomicType::U64).unwrap();
//! client.atomic(&mut here, 1, 0, 2, GlobalAddr::new(0, 0, 24).unwrap(), add, 5, 0).unwrap();
//!
//! // The target serves every request (its host says the sender holds job key 7).
//! let mut packet = [0u8; 256];
//! loop {
//!     let got = there.recv(|from, p| {
//!         packet[..p.len()].copy_from_slice(p);
//!         (from, p.len())
//!     });
//!     let Some((from, n)) = got.unwrap() else { break };
//!     service.serve(&mut there, from, 7, &packet[..n]).unwrap();
//! }
//! // The requester matches the replies.
//! let mut done = Vec::new();
//! let mut on_reply = |_, reply: &[u8]| {
//!     client.handle_reply(reply, |c| {
//!         if let Completion::Done { tag, result, .. } = c {
//!             done.push((tag, result));
//!         }
//!     });
//! };
//! while here.recv(&mut on_reply).unwrap().is_some() {}
//! assert_eq!(done, [(1, Ok(None)), (2, Ok(Some(0)))]);
//! assert_eq!(client.outstanding(0), 0); // "quiet" on context 0
//! assert_eq!(words[1].load(Ordering::Relaxed), u64::from(u32::from_le_bytes(*b"gsas")));
//! assert_eq!(words[3].load(Ordering::Relaxed), 5);
//! ```
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(unsafe_code)]

pub mod client;
pub mod reliable;
pub mod service;
pub mod symheap;
pub mod transport;
pub mod wire;
